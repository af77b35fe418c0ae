"""Mutation registry of chapter 1 (dot products): see tests/mutation_harness.py."""
import math

import numpy as np
import torch
import torch.nn.functional as F

from companion.exercises import vectors as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 1.1: the book's solution, and wrong ones -------------------------------------------------------
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError(f"vectors must have the same length, got {len(a)} and {len(b)}")
    total = 0
    for a_i, b_i in zip(a, b):
        total += a_i * b_i
    return total


def _checked(body):
    """A dot product variant that keeps the length check (so that only ``body`` is wrong)."""
    def dot(a, b):
        if len(a) != len(b):
            raise ValueError("lengths differ")
        return body(a, b)
    return dot


def _no_return(a, b):
    if len(a) != len(b):
        raise ValueError("lengths differ")
    total = 0
    for a_i, b_i in zip(a, b):
        total += a_i * b_i


def _assert_lengths(a, b):
    assert len(a) == len(b)
    return sum(x * y for x, y in zip(a, b))


def _type_error(a, b):
    if len(a) != len(b):
        raise TypeError("lengths differ")
    return sum(x * y for x, y in zip(a, b))


DOT = [
    Mutant("product of the sums", _checked(lambda a, b: sum(a) * sum(b)), "multiplied the sums"),
    Mutant("sum of everything", _checked(lambda a, b: sum(a) + sum(b)), "added all the numbers"),
    Mutant("loop stops one early", _checked(lambda a, b: sum(a[i] * b[i] for i in range(len(a) - 1))), "skips one position"),
    Mutant("loop starts at 1", _checked(lambda a, b: sum(a[i] * b[i] for i in range(1, len(a)))), "skips one position"),
    Mutant("list of products", _checked(lambda a, b: [x * y for x, y in zip(a, b)]), "add them up"),
    Mutant("largest product", _checked(lambda a, b: max(x * y for x, y in zip(a, b)))),
    Mutant("no length check", lambda a, b: sum(x * y for x, y in zip(a, b)), "did not raise ValueError"),
    Mutant("TypeError for lengths", _type_error, "should raise ValueError"),
    Mutant("assert for lengths", _assert_lengths, "yours raised AssertionError"),
    Mutant("numpy.dot", _checked(lambda a, b: float(np.dot(a, b))), "plain Python loop"),
    Mutant("torch tensors", _checked(lambda a, b: torch.tensor(a) @ torch.tensor(b)), "plain Python loop"),
    Mutant("returns a string", _checked(lambda a, b: str(sum(x * y for x, y in zip(a, b)))), "expected a number"),
    Mutant("forgets to return", _no_return, "expected a number"),
    Mutant("sign flipped", _checked(lambda a, b: -sum(x * y for x, y in zip(a, b))), "sign is flipped"),
    Mutant("squares of a", _checked(lambda a, b: sum(x * x for x in a))),
    Mutant("NaN", _checked(lambda a, b: float("nan"))),
    Mutant("a @ b on lists", lambda a, b: a @ b, "TypeError", raised=True),
    Mutant("integer division of the total", _checked(lambda a, b: sum(x * y for x, y in zip(a, b)) // 3)),
]


# --- 1.2 ---------------------------------------------------------------------------------------------
def my_cosine(a, b):
    return (a @ b) / (torch.sqrt(a @ a) * torch.sqrt(b @ b))


COSINE = [
    Mutant("raw dot product", lambda a, b: a @ b, "raw dot product"),
    Mutant("one length only", lambda a, b: (a @ b) / torch.sqrt(a @ a), "both lengths"),
    Mutant("precedence", lambda a, b: (a @ b) / torch.sqrt(a @ a) * torch.sqrt(b @ b), "operator precedence"),
    Mutant("squared lengths", lambda a, b: (a @ b) / ((a @ a) * (b @ b)), "squared length"),
    Mutant("sum of lengths", lambda a, b: (a @ b) / (a.norm() + b.norm()), "not their sum"),
    Mutant("the angle", lambda a, b: torch.arccos(my_cosine(a, b)), "angle itself"),
    Mutant("the angle in degrees", lambda a, b: torch.rad2deg(torch.arccos(my_cosine(a, b))), "angle itself"),
    Mutant("cosine distance", lambda a, b: 1 - my_cosine(a, b), "cosine distance"),
    Mutant("sign flipped", lambda a, b: -my_cosine(a, b), "sign is wrong"),
    Mutant("absolute value", lambda a, b: my_cosine(a, b).abs(), "sign is wrong"),
    Mutant("library cosine", lambda a, b: F.cosine_similarity(a, b, dim=0), "from its formula"),
    Mutant("per position", lambda a, b: a * b / (a.norm() * b.norm()), "one number per position"),
    Mutant("returns a list", lambda a, b: [float(my_cosine(a, b))], "return a number"),
    Mutant("returns None", lambda a, b: None, "return a number"),
    Mutant("NaN", lambda a, b: torch.tensor(float("nan"))),
    Mutant("sqrt missing on b", lambda a, b: (a @ b) / (torch.sqrt(a @ a) * (b @ b))),
]


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
    Exercise(check.dot_by_hand, my_dot, DOT),
    Exercise(check.cosine, my_cosine, COSINE),
    Exercise(check.all_pairs, my_all_scores, ALL_PAIRS),
    Exercise(check.scaled_scores, my_scale, SCALED),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
