"""Checkers for the exercises of chapter 1 (dot products)."""
from __future__ import annotations

import math

import torch

from ._core import checker, close, hint, passed

# The seed's worked example and its two activities, with their hand-computed answers.
_DOT_CASES = [([1, 2, 3], [4, 5, 6], 32), ([3, 5], [-2, 4], 14), ([1, 2, 3, 4], [-4, 0, 2, 5], 22)]


@checker("Exercise 1.1")
def dot_by_hand(my_dot) -> None:
    """``my_dot(a, b)`` on plain Python lists, with a loop."""
    for a, b, expected in _DOT_CASES:
        got = my_dot(list(a), list(b))
        if isinstance(got, (list, tuple)) or (isinstance(got, torch.Tensor) and got.dim() > 0):
            if close(got, [x * y for x, y in zip(a, b)]):
                hint("you returned the products a_i * b_i, one per position: add them up into one number.")
            hint(f"the dot product is one number, but my_dot({a}, {b}) returned {got!r}.")
        try:
            got = float(got)
        except (TypeError, ValueError):
            hint(f"my_dot({a}, {b}) returned {got!r}; expected a number.")
        if got == expected:
            continue
        if got == sum(a) * sum(b):
            hint("you multiplied the sums (sum of a) × (sum of b); multiply position by position first, then add.")
        if got == sum(a) + sum(b):
            hint("you added all the numbers; multiply a_i by b_i at each position, then add the products.")
        if got == sum(x * y for x, y in zip(a[:-1], b[:-1])):
            hint("your loop stops one position early: use every index, range(len(a)).")
        hint(f"my_dot({a}, {b}) returned {got}, expected {expected}.")
    try:
        my_dot([1, 2, 3], [1, 2])
    except ValueError:
        passed("all three examples (32, 14 and 22) are right, and vectors of different lengths are refused.")
    except Exception as exc:
        hint(f"vectors of different lengths should raise ValueError, yours raised {type(exc).__name__}.")
    hint("the values are right, but my_dot([1, 2, 3], [1, 2]) did not raise ValueError: "
         "zip() silently drops the extra number, so check the lengths first.")


@checker("Exercise 1.2")
def cosine(my_cosine) -> None:
    """``my_cosine(a, b)`` for 1-D tensors: the cosine of the angle between them."""
    cases = [
        (torch.tensor([3.0, 5.0]), torch.tensor([-2.0, 4.0])),
        (torch.tensor([1.0, 0.0, 0.0]), torch.tensor([5.0, 5.0, 0.0])),
        (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([-4.0, 0.0, 2.0, 5.0])),
    ]
    for a, b in cases:
        got = my_cosine(a, b)
        expected = torch.dot(a, b) / (a.norm() * b.norm())
        if close(got, expected):
            continue
        if close(got, torch.dot(a, b)):
            hint("that is the raw dot product: divide it by the two lengths |a| |b|.")
        if close(got, torch.dot(a, b) / a.norm()) or close(got, torch.dot(a, b) / b.norm()):
            hint("divide by both lengths, |a| and |b|, not just one of them.")
        if close(got, torch.dot(a, b) / (a.norm() ** 2 * b.norm() ** 2)) or close(got, torch.dot(a, b) / (a @ a + b @ b)):
            hint("a length is the square root of a · a; you used the squared length.")
        if close(got, torch.arccos(expected)) or close(got, torch.rad2deg(torch.arccos(expected))):
            hint("you returned the angle itself; the exercise asks for its cosine.")
        hint(f"for a={a.tolist()}, b={b.tolist()} you returned {got}, expected {float(expected):.4f}.")
    passed("cosine similarity is the dot product of the two directions (unit vectors).")


@checker("Exercise 1.3")
def all_pairs(my_all_scores) -> None:
    """``my_all_scores(Q, K)``: the (n, m) matrix of every query-key dot product, no loops."""
    gen = torch.Generator().manual_seed(1)
    Q, K = torch.randn(4, 3, generator=gen), torch.randn(5, 3, generator=gen)
    got = my_all_scores(Q, K)
    expected = Q @ K.T
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor, got {type(got).__name__}.")
    if close(got, expected):
        square = torch.randn(3, 3, generator=gen)
        if not close(my_all_scores(square, square.flip(0)), square @ square.flip(0).T):
            hint("right on this example, but not in general: make sure you transpose K, not Q.")
        passed("S = Q Kᵀ holds every score S[i, j] = q_i · k_j, computed in one matrix product.")
    if close(got, expected.T):
        hint("you computed K Qᵀ, the transpose: rows must be queries and columns keys, S = Q Kᵀ.")
    if tuple(got.shape) == (3, 3):
        hint("your result is (d, d): that is Qᵀ K (or similar). Transpose K instead: Q @ K.T is (n, m).")
    if tuple(got.shape) == (4, 5) and close(got, expected / math.sqrt(3)):
        hint("this exercise asks for the raw scores; the scaling by sqrt(d) comes in exercise 1.4.")
    hint(f"for Q of shape (4, 3) and K of shape (5, 3) expected shape (4, 5) with S[i, j] = Q[i] · K[j]; "
         f"got shape {tuple(got.shape)}.")


@checker("Exercise 1.4")
def scaled_scores(my_scaled_scores) -> None:
    """``my_scaled_scores(Q, K)``: ``Q Kᵀ / sqrt(d)`` where d is the width of each query/key."""
    gen = torch.Generator().manual_seed(2)
    Q, K = torch.randn(6, 16, generator=gen), torch.randn(4, 16, generator=gen)
    got = my_scaled_scores(Q, K)
    raw = Q @ K.T
    if close(got, raw / 4.0):
        passed("dividing by sqrt(d) brings the variance of the scores back to about 1, whatever d.")
    if close(got, raw):
        hint("these are the raw scores: divide by sqrt(d).")
    if close(got, raw / 16.0):
        hint("you divided by d; the variance of q · k grows like d, so its spread (standard deviation) "
             "grows like sqrt(d): divide by sqrt(d).")
    if close(got, raw / math.sqrt(6)) or close(got, raw / math.sqrt(4)):
        hint("you divided by the square root of the number of vectors; d is the width, Q.shape[-1].")
    hint("expected Q @ K.T / sqrt(d) with d = Q.shape[-1].")
