"""Mutation registry of chapter 1 (dot products): see tests/mutation_harness.py."""
import math

import numpy as np
import torch
import torch.nn.functional as F

from companion.exercises import vectors as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 1.1: the book's solution, right variants, and wrong ones ---------------------------------------
def my_sparse_dot(a, b):
    total = 0
    for feature, value in a.items():
        if feature in b:  # a feature that b does not store is 0 there
            total += value * b[feature]
    return total


def _smaller_first(a, b):
    """Right: loop over the smaller dict, look up in the larger."""
    if len(b) < len(a):
        a, b = b, a
    return sum(v * b.get(k, 0) for k, v in a.items())


def _over_the_union(a, b):
    """Right: every feature of either vector, a missing one read as 0."""
    return sum(a.get(k, 0) * b.get(k, 0) for k in set(a) | set(b))


def _shared_keys(a, b):
    """Right: the key views' intersection."""
    return sum(a[k] * b[k] for k in a.keys() & b.keys())


def _setdefault(a, b):
    return sum(v * b.setdefault(k, 0) for k, v in a.items())


def _pops(a, b):
    total = 0
    for k in list(a):
        v = a.pop(k)
        total += v * b.get(k, 0)
    return total


def _as_lists(a, b):
    return sum(a[i] * b[i] for i in range(len(a)))


SPARSE_RIGHT = [_smaller_first, _over_the_union, _shared_keys]

SPARSE = [
    Mutant("KeyError on a missing feature", lambda a, b: sum(v * b[k] for k, v in a.items()), "does not store"),
    Mutant("indexes like a list", _as_lists, "does not store"),
    Mutant("zip of the values", lambda a, b: sum(x * y for x, y in zip(a.values(), b.values())), "by their position"),
    Mutant("counts the shared features", lambda a, b: len(set(a) & set(b)), "counted the shared features"),
    Mutant("sums instead of products", lambda a, b: sum(a[k] + b[k] for k in a if k in b), "a[k] + b[k]"),
    Mutant("adds everything", lambda a, b: sum(a.values()) + sum(b.values()), "added all the values"),
    Mutant("a missing feature as 1", lambda a, b: sum(v * b.get(k, 1) for k, v in a.items()), "not 1"),
    Mutant("the union, missing as 1", lambda a, b: sum(a.get(k, 1) * b.get(k, 1) for k in set(a) | set(b)), "not 1"),
    Mutant("sign flipped", lambda a, b: -my_sparse_dot(a, b), "sign is flipped"),
    Mutant("absolute value", lambda a, b: abs(my_sparse_dot(a, b)), "absolute value"),
    Mutant("a dict of products", lambda a, b: {k: v * b[k] for k, v in a.items() if k in b}, "one number"),
    Mutant("a list of products", lambda a, b: [v * b[k] for k, v in a.items() if k in b], "one number"),
    Mutant("setdefault fills b", _setdefault, "changed the dict b"),
    Mutant("pops from a", _pops, "changed the dict a"),
    Mutant("NumPy", lambda a, b: float(np.sum([v * b.get(k, 0) for k, v in a.items()])), "without NumPy"),
    Mutant("a torch tensor", lambda a, b: torch.tensor(float(my_sparse_dot(a, b))), "without NumPy"),
    Mutant("returns a string", lambda a, b: str(my_sparse_dot(a, b)), "expected a number"),
    Mutant("returns None", lambda a, b: None, "expected a number"),
    Mutant("first vector's keys only, squared", lambda a, b: sum(v * v for v in a.values())),
    Mutant("integer division", lambda a, b: my_sparse_dot(a, b) // 3),
    Mutant("NaN", lambda a, b: float("nan")),
    Mutant("a @ b on dicts", lambda a, b: a @ b, "TypeError", raised=True),
]


def test_right_variants_of_the_sparse_dot_pass():
    for variant in SPARSE_RIGHT:
        fb = check.sparse_dot(variant)
        assert fb.passed, (variant.__name__, fb)


# --- 1.2 ---------------------------------------------------------------------------------------------
def my_cosine(a, b, eps=1e-8):
    dot = (a * b).sum(dim=-1)  # broadcast, then one number per pair
    length_a = torch.sqrt((a * a).sum(dim=-1)).clamp_min(eps)
    length_b = torch.sqrt((b * b).sum(dim=-1)).clamp_min(eps)
    return dot / (length_a * length_b)


def _cosine_unit_first(a, b, eps=1e-8):
    """Right: each vector divided by its floored length first, then the dot product."""
    ua = a / torch.maximum(torch.sqrt((a * a).sum(-1, keepdim=True)), torch.tensor(eps, dtype=a.dtype))
    ub = b / torch.maximum(torch.sqrt((b * b).sum(-1, keepdim=True)), torch.tensor(eps, dtype=b.dtype))
    return (ua * ub).sum(-1)


def _cosine_squared_floor(a, b, eps=1e-8):
    """Right: the squared length floored at eps², then the root (finite gradients at zero too)."""
    na = torch.sqrt((a * a).sum(-1).clamp_min(eps * eps))
    nb = torch.sqrt((b * b).sum(-1).clamp_min(eps * eps))
    return (a * b).sum(-1) / (na * nb)


def _cosine_matmul(a, b, eps=1e-8):
    """Right: the dot products by @ on an added axis."""
    dot = (a.unsqueeze(-2) @ b.unsqueeze(-1)).squeeze(-1).squeeze(-1)
    na = (a.unsqueeze(-2) @ a.unsqueeze(-1)).squeeze(-1).squeeze(-1).sqrt().clamp(min=eps)
    nb = (b.unsqueeze(-2) @ b.unsqueeze(-1)).squeeze(-1).squeeze(-1).sqrt().clamp(min=eps)
    return dot / (na * nb)


COSINE_RIGHT = [_cosine_unit_first, _cosine_squared_floor, _cosine_matmul]


def _cos(floor=lambda na, nb, eps: na.clamp_min(eps) * nb.clamp_min(eps), keepdim=False):
    def cosine(a, b, eps=1e-8):
        na = torch.sqrt((a * a).sum(-1, keepdim=keepdim))
        nb = torch.sqrt((b * b).sum(-1, keepdim=keepdim))
        return (a * b).sum(-1, keepdim=keepdim) / floor(na, nb, eps)
    return cosine


def _cosine_in_place(a, b, eps=1e-8):
    a /= torch.sqrt((a * a).sum(-1, keepdim=True)).clamp_min(eps)
    return (a * b).sum(-1) / torch.sqrt((b * b).sum(-1)).clamp_min(eps)


COSINE = [
    Mutant("no floor", _cos(lambda na, nb, eps: na * nb), "0 / 0 is nan"),
    Mutant("eps added to the product", _cos(lambda na, nb, eps: na * nb + eps), "not an amount added"),
    Mutant("eps added to each length", _cos(lambda na, nb, eps: (na + eps) * (nb + eps)), "not an amount added"),
    Mutant("sqrt(|a|² + eps²)", _cos(lambda na, nb, eps: (na**2 + eps**2).sqrt() * (nb**2 + eps**2).sqrt()),
           "not sqrt(|a|² + eps²)"),
    Mutant("floor on the product", _cos(lambda na, nb, eps: (na * nb).clamp_min(eps)), "each length separately"),
    Mutant("eps ignored", lambda a, b, eps=1e-8: my_cosine(a, b), "use the eps you are given"),
    Mutant("raw dot product", lambda a, b, eps=1e-8: (a * b).sum(-1), "raw dot product"),
    Mutant("one length only", _cos(lambda na, nb, eps: na.clamp_min(eps)), "both lengths"),
    Mutant("squared lengths", _cos(lambda na, nb, eps: na.clamp_min(eps) ** 2 * nb.clamp_min(eps) ** 2),
           "squared length"),
    Mutant("sum of lengths", _cos(lambda na, nb, eps: na.clamp_min(eps) + nb.clamp_min(eps)), "not their sum"),
    Mutant("keepdim", _cos(keepdim=True), "the last axis goes away"),
    Mutant("per component", lambda a, b, eps=1e-8: a * b / (my_cosine(a, a, eps) * 0 + 1), "one number per "
                                                                                            "component"),
    Mutant("1-D only (a @ b)", lambda a, b, eps=1e-8: (a @ b) / (torch.sqrt(a @ a) * torch.sqrt(b @ b)),
           "@ is a matrix product"),
    Mutant("the angle", lambda a, b, eps=1e-8: torch.arccos(my_cosine(a, b, eps)), "angle itself"),
    Mutant("cosine distance", lambda a, b, eps=1e-8: 1 - my_cosine(a, b, eps), "cosine distance"),
    Mutant("sign flipped", lambda a, b, eps=1e-8: -my_cosine(a, b, eps), "sign is wrong"),
    Mutant("absolute value", lambda a, b, eps=1e-8: my_cosine(a, b, eps).abs(), "sign is wrong"),
    Mutant("library cosine", lambda a, b, eps=1e-8: F.cosine_similarity(a, b, dim=-1, eps=eps), "cosine_similarity"),
    Mutant("library norm", lambda a, b, eps=1e-8: (a * b).sum(-1) / (
        a.norm(dim=-1).clamp_min(eps) * b.norm(dim=-1).clamp_min(eps)), "you used norm"),
    Mutant("in place", _cosine_in_place, "changed a in place"),
    Mutant("detached", lambda a, b, eps=1e-8: my_cosine(a, b, eps).detach(), "no gradient flows"),
    Mutant("float32 inside", lambda a, b, eps=1e-8: my_cosine(a.float(), b.float(), eps).to(a.dtype), "7 digits"),
    Mutant("in float32", lambda a, b, eps=1e-8: my_cosine(a.float(), b.float(), eps), "dtype"),
    Mutant("returns a float", lambda a, b, eps=1e-8: float(my_cosine(a, b, eps).sum()), "wrong type"),
    Mutant("returns None", lambda a, b, eps=1e-8: None, "wrong type"),
    Mutant("NaN", lambda a, b, eps=1e-8: my_cosine(a, b, eps) * float("nan")),
]


def test_right_variants_of_the_cosine_pass():
    for variant in COSINE_RIGHT:
        fb = check.cosine_batch(variant)
        assert fb.passed, (variant.__name__, fb)


# --- 1.3 ---------------------------------------------------------------------------------------------
def my_all_scores(Q, K):
    return Q.transpose(0, 1) @ K.permute(1, 2, 0)  # (B, n, d) @ (B, d, m)


def _bnm(Q, K):
    return torch.einsum("nbd,mbd->bnm", Q, K)


ALL_PAIRS = [
    Mutant("batch-first assumed", lambda Q, K: Q @ K.transpose(-2, -1), "pairs the wrong axes"),
    Mutant("(n, B, m) order", lambda Q, K: torch.einsum("nbd,mbd->nbm", Q, K), "batch axis first"),
    Mutant("transposed", lambda Q, K: torch.einsum("nbd,mbd->bmn", Q, K), "transposed"),
    Mutant("scaled already", lambda Q, K: _bnm(Q, K) / math.sqrt(Q.shape[-1]), "raw scores"),
    Mutant("sign flipped", lambda Q, K: -_bnm(Q, K), "sign is flipped"),
    Mutant("K.T on 3-D", lambda Q, K: Q.transpose(0, 1) @ K.T, "shapes do not fit"),
    Mutant("queries with queries", lambda Q, K: _bnm(Q, Q)),
    Mutant("returns a list", lambda Q, K: _bnm(Q, K).tolist(), "wrong type"),
    Mutant("returns None", lambda Q, K: None, "wrong type"),
    Mutant("a meta tensor", lambda Q, K: torch.empty(Q.shape[1], Q.shape[0], K.shape[0], device="meta"),
           "wrong type"),
    Mutant("in float32", lambda Q, K: _bnm(Q.float(), K.float()), "dtype"),
    Mutant("float32 inside float64", lambda Q, K: _bnm(Q.float(), K.float()).to(Q.dtype), "7 digits"),
    Mutant("detached", lambda Q, K: _bnm(Q, K).detach(), "no gradient flows"),
    Mutant("requires_grad_ on Q", lambda Q, K: _bnm(Q.requires_grad_(), K), "requires_grad"),
    Mutant("first sequence only", lambda Q, K: _bnm(Q[:, :1], K[:, :1]).expand(Q.shape[1], -1, -1)),
    Mutant("plus one", lambda Q, K: _bnm(Q, K) + 1),
    Mutant("breaks for one key", lambda Q, K: _bnm(Q, K) if K.shape[0] > 1 else _bnm(Q, K) * 0),
    Mutant("NaN", lambda Q, K: _bnm(Q, K) * float("nan")),
]


# --- 1.4 ---------------------------------------------------------------------------------------------
def my_scale(d, var_q, var_k):
    return math.sqrt(d * var_q * var_k)


SCALED = [
    Mutant("sqrt(d) only", lambda d, a, b: math.sqrt(d), "that is sqrt(d)"),
    Mutant("the variance", lambda d, a, b: d * a * b, "that is the variance"),
    Mutant("variances outside the root", lambda d, a, b: math.sqrt(d) * a * b, "under the square root"),
    Mutant("sum of variances", lambda d, a, b: math.sqrt(d * (a + b)), "not the sum"),
    Mutant("d", lambda d, a, b: d, "dividing by d"),
    Mutant("the factor 1 / scale", lambda d, a, b: 1 / math.sqrt(d * a * b), "1 / scale"),
    Mutant("queries only", lambda d, a, b: math.sqrt(d * a), "keys' variance"),
    Mutant("keys only", lambda d, a, b: math.sqrt(d * b), "queries' variance"),
    Mutant("returns a string", lambda d, a, b: str(math.sqrt(d * a * b)), "wrong type"),
    Mutant("returns None", lambda d, a, b: None, "wrong type"),
    Mutant("a meta tensor", lambda d, a, b: torch.empty((), device="meta"), "wrong type"),
    Mutant("standard deviations added", lambda d, a, b: math.sqrt(d) * (math.sqrt(a) + math.sqrt(b))),
    Mutant("draws from torch's generator", lambda d, a, b: math.sqrt(d * a * b) + 0 * torch.rand(1).item(),
           "random generator"),
    Mutant("NaN", lambda d, a, b: float("nan")),
]


EXERCISES = [
    Exercise(check.sparse_dot, my_sparse_dot, SPARSE),
    Exercise(check.cosine_batch, my_cosine, COSINE),
    Exercise(check.all_pairs, my_all_scores, ALL_PAIRS),
    Exercise(check.scaled_scores, my_scale, SCALED),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
