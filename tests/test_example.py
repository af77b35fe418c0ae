"""companion.example: the running example's hand-set heads do what chapters 1-6 say they do."""
import math

import pytest
import torch

from companion import example
from companion.attention import scaled_dot_product_attention


def test_embeddings_spell_the_features():
    X = example.sentence_embeddings()
    assert X.shape == (6, 6)
    assert torch.equal(X[0], X[4])  # the two "the"
    cat, mat = X[1], X[5]
    assert cat[example.FEATURES.index("animate")] == 1 and mat[example.FEATURES.index("place")] == 1


@pytest.mark.parametrize("question,asker,found", [("subject", "sat", "cat"), ("place", "on", "mat")])
def test_each_head_finds_its_word(question, asker, found):
    X = example.sentence_embeddings(torch.float64)
    W_Q, W_K, W_V = example.head_weights(question, dtype=torch.float64)
    out, w = scaled_dot_product_attention(X @ W_Q, X @ W_K, X @ W_V)
    i, j = example.WORDS.index(asker), example.WORDS.index(found)
    assert w[i].argmax() == j and w[i, j] > 0.85
    scores = (X @ W_Q) @ (X @ W_K).T
    assert scores[i, j] == 2.5**2 and scores[j, i] == 0  # not symmetric
    # every other word asks nothing: even weights
    others = [r for r in range(6) if r != i]
    torch.testing.assert_close(w[others], torch.full((5, 6), 1 / 6, dtype=torch.float64))


def test_two_head_module_equals_the_heads_side_by_side():
    X = example.sentence_embeddings().unsqueeze(0)
    mha = example.two_head_attention()
    y, w = mha(X, need_weights=True, average_weights=False)
    for r, question in enumerate(("subject", "place")):
        W_Q, W_K, W_V = example.head_weights(question)
        out, weights = scaled_dot_product_attention(X[0] @ W_Q, X[0] @ W_K, X[0] @ W_V)
        torch.testing.assert_close(y[0, :, 3 * r: 3 * r + 3], out)
        torch.testing.assert_close(w[0, r], weights)


def test_bad_arguments():
    with pytest.raises(ValueError, match="question"):
        example.head_weights("object")
    with pytest.raises((TypeError, ValueError), match="strength"):
        example.head_weights("subject", strength="big")


def test_write_back_adds_what_each_head_found_to_the_features():
    X = example.sentence_embeddings().unsqueeze(0)
    y, _ = example.two_head_attention(write_back=True)(X)
    sat, animate = example.WORDS.index("sat"), example.FEATURES.index("animate")
    # sat learns that its subject is animate; the place head adds its even average on top
    assert y[0, sat, animate] > 0.85
    side, _ = example.two_head_attention()(X)
    torch.testing.assert_close(y[0, :, animate], side[0, :, 1] + side[0, :, 4])
    with pytest.raises(TypeError, match="write_back"):
        example.two_head_attention(write_back=1)
