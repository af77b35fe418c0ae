"""The running example of chapters 1 to 6: "the cat sat on the mat", with hand-set weights.

Every token is a vector of six readable features, and two attention heads are set by hand so that
their weights mean something a reader can check:

* the *subject* head: the verb ("sat") asks "who did it?" and finds the animate noun ("cat");
* the *place* head: the preposition ("on") asks "where?" and finds the place noun ("mat").

Chapters 1-6 come back to the same sentence: its dot products (1), one head's attention (2), the
two heads side by side (3), the residual sum and its normalization (4), shuffled and with
positions (5), and a whole block (6).

Shapes (row-vector convention, as in the book): embeddings ``(6, 6)``; each head's ``W_Q``, ``W_K``,
``W_V`` are ``(d, d_k) = (6, 3)``.
"""
from __future__ import annotations

import torch
from torch import Tensor

from companion.multihead import MultiHeadAttention
from companion.validation import check_bool, check_choice, check_float

__all__ = ["WORDS", "FEATURES", "QUESTIONS", "sentence_embeddings", "head_weights", "two_head_attention"]

#: The sentence, one token per word.
WORDS = ("the", "cat", "sat", "on", "the", "mat")
#: What each of the six features of a token's vector says.
FEATURES = ("noun", "verb", "determiner", "preposition", "animate", "place")
#: The question each hand-set head asks: its asking word class and the feature it looks for.
QUESTIONS = {"subject": ("verb", "animate"), "place": ("preposition", "place")}

_FEATURES_OF = {
    "the": ("determiner",),
    "cat": ("noun", "animate"),
    "sat": ("verb",),
    "on": ("preposition",),
    "mat": ("noun", "place"),
}
_D, _D_K = len(FEATURES), 3


def sentence_embeddings(dtype: torch.dtype = torch.float32) -> Tensor:
    """The six tokens as rows of 0/1 features, shape ``(6, 6)``: row ``i`` is ``WORDS[i]``."""
    X = torch.zeros(len(WORDS), _D, dtype=dtype)
    for i, word in enumerate(WORDS):
        for feature in _FEATURES_OF[word]:
            X[i, FEATURES.index(feature)] = 1.0
    return X


def head_weights(question: str, strength: float = 2.5, dtype: torch.dtype = torch.float32) -> tuple[Tensor, Tensor, Tensor]:
    """``(W_Q, W_K, W_V)`` of one hand-set head, each ``(6, 3)``.

    ``question`` is ``"subject"`` or ``"place"``. The query of the asking word class and the key of
    the wanted feature both point along the first of the head's three directions, with length
    ``strength``, so their score is ``strength**2`` and every other score is 0. The values carry a
    token's ``noun``, ``animate`` and ``place`` features: what the asking word learns about the word
    it finds.
    """
    check_choice("question", question, sorted(QUESTIONS))
    strength = check_float("strength", strength, low=0.0)
    asks, wants = QUESTIONS[question]
    W_Q = torch.zeros(_D, _D_K, dtype=dtype)
    W_K = torch.zeros(_D, _D_K, dtype=dtype)
    W_V = torch.zeros(_D, _D_K, dtype=dtype)
    W_Q[FEATURES.index(asks), 0] = strength  # "I am looking for ..."
    W_K[FEATURES.index(wants), 0] = strength  # "... and I am it"
    for column, feature in enumerate(("noun", "animate", "place")):
        W_V[FEATURES.index(feature), column] = 1.0
    return W_Q, W_K, W_V


def two_head_attention(strength: float = 2.5, *, write_back: bool = False) -> MultiHeadAttention:
    """Both heads in one ``MultiHeadAttention(6, 2, bias=False)``: head 0 asks for the subject,
    head 1 for the place.

    With ``write_back=False`` ``W_O`` is the identity, so the output is the two heads side by side.
    With ``write_back=True`` ``W_O`` writes what each head found back into the token features it
    came from (``noun``, ``animate``, ``place``), so that the output can be added to the input: a
    residual connection (chapters 4 and 6).
    """
    check_bool("write_back", write_back)
    mha = MultiHeadAttention(_D, 2, bias=False).eval()
    heads = [head_weights(q, strength) for q in ("subject", "place")]
    with torch.no_grad():
        for i, proj in enumerate((mha.q_proj, mha.k_proj, mha.v_proj)):
            stacked = torch.cat([h[i] for h in heads], dim=1)  # (6, 3) side by side -> (6, 6)
            proj.weight.copy_(stacked.T)  # nn.Linear computes x @ weight.T
        if write_back:
            W_O = torch.zeros(_D, _D)  # (h d_k, d): head dims -> features
            for head in range(2):
                for column, feature in enumerate(("noun", "animate", "place")):
                    W_O[head * _D_K + column, FEATURES.index(feature)] = 1.0
            mha.out_proj.weight.copy_(W_O.T)
        else:
            mha.out_proj.weight.copy_(torch.eye(_D))
    return mha
