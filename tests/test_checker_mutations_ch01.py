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
    return Q @ K.T


ALL_PAIRS = [
    Mutant("transposed", lambda Q, K: K @ Q.T, "K Qᵀ"),
    Mutant("Q transpose Q", lambda Q, K: Q.T @ Q, "(d, d)"),
    Mutant("scaled already", lambda Q, K: Q @ K.T / math.sqrt(Q.shape[-1]), "exercise 1.4"),
    Mutant("sign flipped", lambda Q, K: -(Q @ K.T), "sign is flipped"),
    Mutant("returns a list", lambda Q, K: (Q @ K.T).tolist(), "return a tensor"),
    Mutant("returns None", lambda Q, K: None, "return a tensor"),
    Mutant("queries with queries", lambda Q, K: Q @ Q.T),
    Mutant("plus one", lambda Q, K: Q @ K.T + 1),
    Mutant("two features only", lambda Q, K: Q[:, :2] @ K[:, :2].T),
    Mutant("integer scores", lambda Q, K: (Q @ K.T).int()),
    Mutant("Q @ K", lambda Q, K: Q @ K, "RuntimeError", raised=True),
    Mutant("row sums", lambda Q, K: (Q @ K.T).sum(1)),
    Mutant("NaN", lambda Q, K: torch.full((Q.shape[0], K.shape[0]), float("nan"))),
]


# --- 1.4 ---------------------------------------------------------------------------------------------
def my_scaled_scores(Q, K):
    d = Q.shape[-1]
    return Q @ K.T / math.sqrt(d)


SCALED = [
    Mutant("raw scores", lambda Q, K: Q @ K.T, "raw scores"),
    Mutant("divided by d", lambda Q, K: Q @ K.T / Q.shape[-1], "you divided by d"),
    Mutant("d ** 1/2", lambda Q, K: Q @ K.T / Q.shape[-1] ** 1 / 2, "operator precedence"),
    Mutant("times sqrt(d)", lambda Q, K: Q @ K.T * math.sqrt(Q.shape[-1]), "multiplied by sqrt(d)"),
    Mutant("sqrt of n", lambda Q, K: Q @ K.T / math.sqrt(Q.shape[0]), "number of vectors"),
    Mutant("sqrt of m", lambda Q, K: Q @ K.T / math.sqrt(K.shape[0]), "number of vectors"),
    Mutant("transposed", lambda Q, K: (K @ Q.T) / math.sqrt(Q.shape[-1]), "transposed"),
    Mutant("the example's sqrt(16)", lambda Q, K: Q @ K.T / 4.0, "not from the example's numbers"),
    Mutant("returns a list", lambda Q, K: my_scaled_scores(Q, K).tolist(), "return a tensor"),
    Mutant("returns None", lambda Q, K: None, "return a tensor"),
    Mutant("integer sqrt", lambda Q, K: Q @ K.T / math.isqrt(Q.shape[-1]) if Q.shape[-1] != 16 else Q @ K.T / 5),
    Mutant("scaled keys only", lambda Q, K: Q @ (K / Q.shape[-1]).T, "you divided by d"),
    Mutant("NaN", lambda Q, K: Q @ K.T * float("nan")),
]


EXERCISES = [
    Exercise(check.dot_by_hand, my_dot, DOT),
    Exercise(check.cosine, my_cosine, COSINE),
    Exercise(check.all_pairs, my_all_scores, ALL_PAIRS),
    Exercise(check.scaled_scores, my_scaled_scores, SCALED),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
