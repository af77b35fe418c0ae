"""Checkers for the exercises of chapter 1 (dot products)."""
from __future__ import annotations

import math

import numpy as np
import torch

from ._core import attempt, checker, close, describe, first_difference, hint, passed, recording, require_tensor

# The seed's worked example and its two activities, with their hand-computed answers.
_DOT_CASES = [([1, 2, 3], [4, 5, 6], 32), ([3, 5], [-2, 4], 14), ([1, 2, 3, 4], [-4, 0, 2, 5], 22)]

# Exercise 1.1 asks for a plain Python loop: these library calls do the work for the student.
_LIBRARY_DOT = {
    "numpy.dot": (np, "dot"), "numpy.inner": (np, "inner"), "numpy.vdot": (np, "vdot"),
    "numpy.matmul": (np, "matmul"), "numpy.einsum": (np, "einsum"), "numpy.array": (np, "array"),
    "numpy.asarray": (np, "asarray"), "torch.tensor": (torch, "tensor"), "torch.as_tensor": (torch, "as_tensor"),
    "torch.dot": (torch, "dot"), "torch.inner": (torch, "inner"), "torch.matmul": (torch, "matmul"),
}
# Exercise 1.2 asks for the formula: the library's cosine similarity does it all.
_LIBRARY_COSINE = {
    "torch.nn.functional.cosine_similarity": (torch.nn.functional, "cosine_similarity"),
    "torch.cosine_similarity": (torch, "cosine_similarity"),
}


def _is_number(x) -> bool:
    """A plain number (int or float, not bool), or a tensor/array holding exactly one number."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (int, float, np.integer, np.floating)):
        return True
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.size == 1 if isinstance(x, np.ndarray) else (x.numel() == 1 and x.dtype != torch.bool and not x.is_complex())
    return False


@checker("Exercise 1.1")
def dot_by_hand(my_dot) -> None:
    """``my_dot(a, b)`` on plain Python lists, with a loop."""
    for a, b, expected in _DOT_CASES:
        with recording(_LIBRARY_DOT) as calls:
            got = my_dot(list(a), list(b))
        if calls or isinstance(got, (torch.Tensor, np.ndarray, np.generic)):
            used = f" (you called {', '.join(sorted(set(calls)))})" if calls else ""
            hint(f"write the dot product with a plain Python loop over the two lists, without NumPy or "
                 f"PyTorch{used}: add up a[i] * b[i] for every position i.")
        if isinstance(got, (list, tuple)):
            if close(got, [x * y for x, y in zip(a, b)]):
                hint("you returned the products a_i * b_i, one per position: add them up into one number.")
            hint(f"the dot product is one number, but my_dot({a}, {b}) returned {describe(got)}.")
        if not _is_number(got):
            hint(f"my_dot({a}, {b}) returned {describe(got)}; expected a number.")
        got = float(got)
        if got == expected:
            continue
        if got == sum(a) * sum(b):
            hint("you multiplied the sums (sum of a) × (sum of b); multiply position by position first, then add.")
        if got == sum(a) + sum(b):
            hint("you added all the numbers; multiply a_i by b_i at each position, then add the products.")
        if got == sum(x * y for x, y in zip(a[:-1], b[:-1])) or got == sum(x * y for x, y in zip(a[1:], b[1:])):
            hint("your loop skips one position: use every index, range(len(a)).")
        if got == -expected:
            hint("the sign is flipped: add the products a_i * b_i, do not subtract them.")
        hint(f"my_dot({a}, {b}) returned {got:g}, expected {expected}.", generic=True)
    _, error = attempt(my_dot, [1, 2, 3], [1, 2])
    if isinstance(error, ValueError):
        passed("all three examples (32, 14 and 22) are right, and vectors of different lengths are refused.")
    if error is not None:
        hint(f"vectors of different lengths should raise ValueError; yours raised {type(error).__name__}. "
             "Check the lengths first: if len(a) != len(b): raise ValueError(...).")
    hint("the values are right, but my_dot([1, 2, 3], [1, 2]) did not raise ValueError: "
         "zip() silently drops the extra number, so check the lengths first.")


@checker("Exercise 1.2")
def cosine(my_cosine) -> None:
    """``my_cosine(a, b)`` for 1-D tensors: the cosine of the angle between them."""
    cases = [
        (torch.tensor([3.0, 5.0]), torch.tensor([-2.0, 4.0])),
        (torch.tensor([1.0, 0.0, 0.0]), torch.tensor([5.0, 5.0, 0.0])),
        (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([-4.0, 0.0, 2.0, 5.0])),
        (torch.tensor([2.0, -1.0, 0.0]), torch.tensor([-1.0, 3.0, 2.0])),  # an obtuse angle: cos < 0
    ]
    for a, b in cases:
        with recording(_LIBRARY_COSINE) as calls:
            got = my_cosine(a.clone(), b.clone())
        if calls:
            hint("compute the cosine from its formula, (a · b) / (|a| |b|), with @ and torch.sqrt; "
                 f"the exercise is to write what {calls[0]} does.")
        expected = torch.dot(a, b) / (a.norm() * b.norm())
        if isinstance(got, torch.Tensor) and got.numel() > 1:
            if close(got, a * b / (a.norm() * b.norm())) or close(got, a * b):
                hint("you returned one number per position: add the products up (a @ b) into one number.")
            hint(f"the cosine is one number; for a={a.tolist()}, b={b.tolist()} you returned {describe(got)}.")
        if not _is_number(got):
            hint(f"return a number (a float or a 0-d tensor); you returned {describe(got)}.")
        got = float(got)
        if close(got, expected):
            continue
        dot, na, nb = torch.dot(a, b), a.norm(), b.norm()
        if close(got, dot):
            hint("that is the raw dot product: divide it by the two lengths |a| |b|.")
        if close(got, dot / na) or close(got, dot / nb):
            hint("divide by both lengths, |a| and |b|, not just one of them.")
        if close(got, dot / na * nb) or close(got, dot / nb * na):
            hint("operator precedence: x / y * z is (x / y) * z. Put the product of the lengths in "
                 "parentheses: (a @ b) / (|a| * |b|).")
        if close(got, dot / (na**2 * nb**2)) or close(got, dot / (a @ a + b @ b)) or close(got, dot / (na**2 + nb**2)):
            hint("a length is the square root of a · a; you used the squared length.")
        if close(got, dot / (na + nb)):
            hint("divide by the product of the lengths |a| * |b|, not their sum.")
        if close(got, torch.arccos(expected)) or close(got, torch.rad2deg(torch.arccos(expected))):
            hint("you returned the angle itself; the exercise asks for its cosine.")
        if close(got, 1 - expected):
            hint("that is the cosine distance, 1 - cos; return the cosine itself.")
        if close(got, -expected) or close(got, abs(expected)):
            hint("the sign is wrong: the cosine is negative when the angle is wider than 90°; do not "
                 "negate it or take its absolute value.")
        hint(f"for a={a.tolist()}, b={b.tolist()} you returned {got:.4f}, expected {float(expected):.4f}.", generic=True)
    passed("cosine similarity is the dot product of the two directions (unit vectors).")


@checker("Exercise 1.3")
def all_pairs(my_all_scores) -> None:
    """``my_all_scores(Q, K)``: the (n, m) matrix of every query-key dot product, no loops."""
    gen = torch.Generator().manual_seed(1)
    Q, K = torch.randn(4, 3, generator=gen), torch.randn(5, 3, generator=gen)
    got = require_tensor(my_all_scores(Q.clone(), K.clone()))
    expected = Q @ K.T
    if close(got, expected):
        square = torch.randn(3, 3, generator=gen)
        other = require_tensor(my_all_scores(square.clone(), square.flip(0)))
        if not close(other, square @ square.flip(0).T):
            hint("right on this example, but not when Q and K have the same shape: make sure you "
                 "transpose K, not Q (S = Q @ K.T).")
        passed("S = Q Kᵀ holds every score S[i, j] = q_i · k_j, computed in one matrix product.")
    if close(got, expected.T):
        hint("you computed K Qᵀ, the transpose: rows must be queries and columns keys, S = Q Kᵀ.")
    if tuple(got.shape) == (3, 3):
        hint("your result is (d, d): that is Qᵀ K (or similar). Transpose K instead: Q @ K.T is (n, m).")
    if close(got, expected / math.sqrt(3)) or close(got, expected / 3):
        hint("this exercise asks for the raw scores; the scaling by sqrt(d) comes in exercise 1.4.")
    if close(got, -expected):
        hint("the sign is flipped: S = Q Kᵀ.")
    if tuple(got.shape) != (4, 5):
        hint(f"for Q of shape (4, 3) and K of shape (5, 3) expected shape (4, 5) with "
             f"S[i, j] = Q[i] · K[j]; got shape {tuple(got.shape)}.", generic=True)
    hint(f"S[i, j] should be Q[i] · K[j]: {first_difference(got, expected, 'S')}.", generic=True)


@checker("Exercise 1.4")
def scaled_scores(my_scaled_scores) -> None:
    """``my_scaled_scores(Q, K)``: ``Q Kᵀ / sqrt(d)`` where d is the width of each query/key."""
    gen = torch.Generator().manual_seed(2)
    for n, m, d in ((6, 4, 16), (3, 5, 9)):  # two widths: a scale written as a number fits only one
        Q, K = torch.randn(n, d, generator=gen), torch.randn(m, d, generator=gen)
        got = require_tensor(my_scaled_scores(Q.clone(), K.clone()))
        raw = Q @ K.T
        right = raw / math.sqrt(d)
        if close(got, right):
            continue
        if close(got, raw):
            hint("these are the raw scores: divide by sqrt(d).")
        if close(got, raw / d):
            hint("you divided by d; the variance of q · k grows like d, so its spread (standard deviation) "
                 "grows like sqrt(d): divide by sqrt(d).")
        if close(got, raw / (d / 2)) or close(got, raw / (2 * d)):
            hint("operator precedence: d ** 1/2 is (d ** 1) / 2 = d / 2. Write d ** 0.5 or math.sqrt(d).")
        if close(got, raw * math.sqrt(d)):
            hint("you multiplied by sqrt(d); divide by it.")
        if close(got, raw / math.sqrt(n)) or close(got, raw / math.sqrt(m)):
            hint("you divided by the square root of the number of vectors; d is the width, Q.shape[-1].")
        if close(got, right.T):
            hint("the result is transposed: rows are queries, columns keys, Q @ K.T / sqrt(d).")
        if close(got, raw / 4.0) or close(got, raw / 3.0):
            hint(f"for Q of width d = {d} the scale is sqrt({d}): compute it from the input, "
                 "math.sqrt(Q.shape[-1]), not from the example's numbers.")
        if tuple(got.shape) != (n, m):
            hint(f"for Q ({n}, {d}) and K ({m}, {d}) the scores have shape ({n}, {m}); got {tuple(got.shape)}.",
                 generic=True)
        hint(f"expected Q @ K.T / sqrt(d) with d = Q.shape[-1] = {d}: {first_difference(got, right, 'S')}.",
             generic=True)
    passed("dividing by sqrt(d) brings the variance of the scores back to about 1, whatever d.")
