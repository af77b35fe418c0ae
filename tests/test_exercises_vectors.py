"""The chapter 1 checkers: the right answer passes, each recognized mistake gets its hint."""
import math

import torch

from companion.exercises import vectors as check


def stub(*args):
    raise NotImplementedError


def test_sparse_dot():
    right = lambda a, b: sum(v * b[k] for k, v in a.items() if k in b)
    assert check.sparse_dot(right).passed
    assert check.sparse_dot(stub).status == "not attempted"
    assert check.sparse_dot(...).status == "not attempted"
    assert "does not store" in check.sparse_dot(lambda a, b: sum(v * b[k] for k, v in a.items())).message
    assert "by their position" in check.sparse_dot(lambda a, b: sum(x * y for x, y in zip(a.values(), b.values()))).message
    assert "not 1" in check.sparse_dot(lambda a, b: sum(v * b.get(k, 1) for k, v in a.items())).message
    assert "changed the dict b" in check.sparse_dot(lambda a, b: sum(v * b.setdefault(k, 0) for k, v in a.items())).message
    crash = check.sparse_dot(lambda a, b: a @ b)
    assert crash.status == "hint" and crash.kind == "raised" and "TypeError" in crash.message


def test_sparse_dot_reference_is_the_dense_dot_product():
    # Independent of the checker's reference: the dense vectors over every feature, by hand.
    for label, a, b in check._sparse_cases():
        features = list(dict.fromkeys([*a, *b]))
        dense_a = [a.get(k, 0) for k in features]
        dense_b = [b.get(k, 0) for k in features]
        assert math.isclose(check._sparse_reference(a, b), math.fsum(x * y for x, y in zip(dense_a, dense_b)),
                            rel_tol=1e-12, abs_tol=1e-12), label
    assert check._sparse_reference({0: 1, 1: 2, 2: 3}, {0: 4, 1: 5, 2: 6}) == 32
    assert check._sparse_reference({0: 1, 1: 2, 2: 3, 3: 4}, {0: -4, 2: 2, 3: 5}) == 22


def _cosine_right(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp_min(eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp_min(eps)
    return (a * b).sum(-1) / (na * nb)


def test_cosine_batch():
    assert check.cosine_batch(_cosine_right).passed
    assert check.cosine_batch(stub).status == "not attempted"
    assert "raw dot product" in check.cosine_batch(lambda a, b, eps=1e-8: (a * b).sum(-1)).message
    no_floor = lambda a, b, eps=1e-8: (a * b).sum(-1) / torch.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    assert "0 / 0 is nan" in check.cosine_batch(no_floor).message
    old = lambda a, b: (a @ b) / (torch.sqrt(a @ a) * torch.sqrt(b @ b))  # the 1-D formula of the text
    assert "@ is a matrix product" in check.cosine_batch(old).message
    assert "use the eps you are given" in check.cosine_batch(lambda a, b, eps=1e-8: _cosine_right(a, b)).message
    assert "angle itself" in check.cosine_batch(lambda a, b, eps=1e-8: torch.arccos(_cosine_right(a, b, eps))).message


def test_cosine_reference_is_torchs_cosine_similarity():
    # torch.nn.functional.cosine_similarity divides by max(|a|, eps) * max(|b|, eps): the rule of 1.2.
    for label, a, b, eps in check._cosine_cases():
        eps = 1e-8 if eps is None else eps
        theirs = torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1, eps=eps)
        torch.testing.assert_close(check._cosine_reference(a, b, eps).double(), theirs, rtol=1e-6, atol=1e-9,
                                   msg=label)


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
def _numpy_sparse(a, b):
    from numpy import sum as np_sum
    return float(np_sum([v * b.get(k, 0) for k, v in a.items()]))


def _numpy_helper(a, b):
    import numpy
    return float(numpy.sum([v * b.get(k, 0) for k, v in a.items()]))


def _through_a_helper(a, b):
    return _numpy_helper(a, b)


def _reduce(a, b):
    from functools import reduce
    return reduce(lambda total, kv: total + kv[1] * b.get(kv[0], 0), a.items(), 0)


def _lookup(a, b):
    return {(0, 1, 2): 32, (0, 1, 2, 3): 22}.get(tuple(a), 0)


def test_sparse_dot_rules():
    assert "without NumPy or PyTorch" in check.sparse_dot(_numpy_sparse).message
    assert "without NumPy or PyTorch" in check.sparse_dot(_through_a_helper).message
    assert check.sparse_dot(_reduce).passed
    assert not check.sparse_dot(_lookup).passed
    fb = check.sparse_dot(lambda a, b: 10**400)
    assert fb.status == "hint" and "expected" in fb.message


def _cosine_norm(a, b, eps=1e-8):
    return (a * b).sum(-1) / (a.norm(dim=-1).clamp_min(eps) * b.norm(dim=-1).clamp_min(eps))


def _cosine_alias(a, b, eps=1e-8):
    from torch.nn.functional import cosine_similarity
    return cosine_similarity(a, b, dim=-1, eps=eps)


def _cosine_linalg(a, b, eps=1e-8):
    return (a * b).sum(-1) / (torch.linalg.vector_norm(a, dim=-1).clamp_min(eps)
                              * torch.linalg.vector_norm(b, dim=-1).clamp_min(eps))


def test_cosine_rules():
    assert "you used norm" in check.cosine_batch(_cosine_norm).message
    assert "cosine_similarity" in check.cosine_batch(_cosine_alias).message
    assert "linalg.vector_norm" in check.cosine_batch(_cosine_linalg).message
    for junk in (10**400, 1 + 2j, torch.tensor(1 + 2j), "0.5", torch.tensor([]), float("inf")):
        fb = check.cosine_batch(lambda a, b, eps=1e-8, junk=junk: junk)
        assert fb.status == "hint", (junk, fb)


def _all_scores_loop(Q, K):
    return torch.stack([torch.stack([q @ k for k in K]) for q in Q])


def _all_scores_for(Q, K):
    S = torch.empty(Q.shape[0], K.shape[0], dtype=Q.dtype)
    for i in range(Q.shape[0]):
        S[i] = K @ Q[i]
    return S
