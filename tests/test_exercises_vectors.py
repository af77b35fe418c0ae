"""The chapter 1 checkers: the right answer passes, each recognized mistake gets its hint."""
import math

import torch

from companion.exercises import vectors as check


def stub(*args):
    raise NotImplementedError


def test_dot_by_hand():
    def right(a, b):
        if len(a) != len(b):
            raise ValueError("lengths differ")
        return sum(x * y for x, y in zip(a, b))

    assert check.dot_by_hand(right).passed
    assert check.dot_by_hand(stub).status == "not attempted"
    assert check.dot_by_hand(...).status == "not attempted"
    no_length_check = lambda a, b: sum(x * y for x, y in zip(a, b))
    assert "did not raise ValueError" in check.dot_by_hand(no_length_check).message
    assert "add them up" in check.dot_by_hand(lambda a, b: [x * y for x, y in zip(a, b)]).message
    assert "multiplied the sums" in check.dot_by_hand(lambda a, b: sum(a) * sum(b)).message
    assert "added all the numbers" in check.dot_by_hand(lambda a, b: sum(a) + sum(b)).message
    off_by_one = lambda a, b: sum(a[i] * b[i] for i in range(len(a) - 1))
    assert "skips one position" in check.dot_by_hand(off_by_one).message
    crash = check.dot_by_hand(lambda a, b: a @ b)
    assert crash.status == "hint" and "TypeError" in crash.message


def test_cosine():
    right = lambda a, b: (a @ b) / (torch.sqrt(a @ a) * torch.sqrt(b @ b))
    assert check.cosine(right).passed
    assert check.cosine(stub).status == "not attempted"
    assert "raw dot product" in check.cosine(lambda a, b: a @ b).message
    assert "both lengths" in check.cosine(lambda a, b: (a @ b) / a.norm()).message
    assert "squared length" in check.cosine(lambda a, b: (a @ b) / ((a @ a) * (b @ b))).message
    assert "angle itself" in check.cosine(lambda a, b: torch.arccos(right(a, b))).message


def test_all_pairs():
    right = lambda Q, K: torch.einsum("nbd,mbd->bnm", Q, K)
    assert check.all_pairs(right).passed
    assert check.all_pairs(lambda Q, K: Q.transpose(0, 1) @ K.permute(1, 2, 0)).passed
    loop = lambda Q, K: torch.stack([Q[:, b] @ K[:, b].T for b in range(Q.shape[1])])
    assert check.all_pairs(loop).passed  # a loop over the batch is allowed: the layout is the point
    assert check.all_pairs(stub).status == "not attempted"
    assert "transposed" in check.all_pairs(lambda Q, K: torch.einsum("nbd,mbd->bmn", Q, K)).message
    assert "batch axis first" in check.all_pairs(lambda Q, K: torch.einsum("nbd,mbd->nbm", Q, K)).message
    assert "pairs the wrong axes" in check.all_pairs(lambda Q, K: Q @ K.transpose(-2, -1)).message
    assert "raw scores" in check.all_pairs(lambda Q, K: right(Q, K) / math.sqrt(Q.shape[-1])).message
    assert "wrong type" in check.all_pairs(lambda Q, K: right(Q, K).tolist()).message


def test_all_pairs_edge_classes_name_themselves():
    only_square = lambda Q, K: torch.einsum("nbd,mbd->bnm", Q, K) if Q.shape[1] > 1 else Q.sum() * 0
    assert "a batch of one" in check.all_pairs(only_square).message
    in_place = check.all_pairs(lambda Q, K: torch.einsum("nbd,mbd->bnm", Q.requires_grad_(), K))
    assert "requires_grad" in in_place.message
    half = lambda Q, K: torch.einsum("nbd,mbd->bnm", Q.float(), K.float()).to(Q.dtype)
    assert "7 digits" in check.all_pairs(half).message


def test_scaled_scores():
    assert check.scaled_scores(lambda d, a, b: math.sqrt(d * a * b)).passed
    assert check.scaled_scores(lambda d, a, b: (d * a * b) ** 0.5).passed
    assert check.scaled_scores(lambda d, a, b: torch.tensor(float(d * a * b)).sqrt()).passed
    assert check.scaled_scores(stub).status == "not attempted"
    assert "that is sqrt(d)" in check.scaled_scores(lambda d, a, b: math.sqrt(d)).message
    assert "variance of q · k" in check.scaled_scores(lambda d, a, b: d * a * b).message
    assert "under the square root" in check.scaled_scores(lambda d, a, b: math.sqrt(d) * a * b).message
    assert "wrong type" in check.scaled_scores(lambda d, a, b: [math.sqrt(d * a * b)]).message


def test_feedback_text_is_one_clear_line():
    text = repr(check.scaled_scores(lambda d, a, b: math.sqrt(d * a * b)))
    assert text.startswith("✅ Exercise 1.4 passed:")
    assert repr(check.scaled_scores(stub)).startswith("⏳ Exercise 1.4 not attempted yet:")
    assert repr(check.scaled_scores(lambda d, a, b: math.sqrt(d))).startswith("❌ Exercise 1.4 not yet:")


# --- the rules each exercise's text states, whatever the import -------------------------------------
def _numpy_dot(a, b):
    from numpy import dot
    if len(a) != len(b):
        raise ValueError("lengths differ")
    return float(dot(a, b))


def _numpy_helper(a, b):
    import numpy
    return float(numpy.dot(a, b))


def _through_a_helper(a, b):
    if len(a) != len(b):
        raise ValueError("lengths differ")
    return _numpy_helper(a, b)


def _no_loop(a, b):
    if len(a) != len(b):
        raise ValueError("lengths differ")
    return a[0] * b[0] + _no_loop(a[1:], b[1:]) if a else 0


_TABLE = {(1, 2, 3, 4, 5, 6): 32, (3, 5, -2, 4): 14, (1, 2, 3, 4, -4, 0, 2, 5): 22}


def _lookup(a, b):
    if len(a) != len(b):
        raise ValueError("lengths differ")
    return _TABLE.get(tuple(a + b), 0)


def test_dot_by_hand_rules():
    assert "without NumPy or PyTorch" in check.dot_by_hand(_numpy_dot).message
    assert "without NumPy or PyTorch" in check.dot_by_hand(_through_a_helper).message
    assert check.dot_by_hand(_no_loop).passed  # recursion is a loop in disguise, as is map()
    assert not check.dot_by_hand(_lookup).passed
    fb = check.dot_by_hand(lambda a, b: 10**400)
    assert fb.status == "hint" and "too large" in fb.message


def _cosine_norm(a, b):
    return (a @ b) / (a.norm() * b.norm())


def _cosine_alias(a, b):
    from torch.nn.functional import cosine_similarity
    return cosine_similarity(a, b, dim=0)


def _cosine_linalg(a, b):
    return (a @ b) / (torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b))


def test_cosine_rules():
    assert "only @" in check.cosine(_cosine_norm).message
    assert "from its formula" in check.cosine(_cosine_alias).message
    assert "linalg.vector_norm" in check.cosine(_cosine_linalg).message
    for junk in (10**400, 1 + 2j, torch.tensor(1 + 2j), "0.5", torch.tensor([]), float("inf")):
        fb = check.cosine(lambda a, b, junk=junk: junk)
        assert fb.status == "hint", (junk, fb)


def _all_scores_loop(Q, K):
    return torch.stack([torch.stack([q @ k for k in K]) for q in Q])


def _all_scores_for(Q, K):
    S = torch.empty(Q.shape[0], K.shape[0], dtype=Q.dtype)
    for i in range(Q.shape[0]):
        S[i] = K @ Q[i]
    return S
