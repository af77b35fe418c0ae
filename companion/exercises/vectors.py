"""Checkers for the exercises of chapter 1 (dot products)."""
from __future__ import annotations

import inspect
import math
import random

import numpy as np
import torch

from ._core import (require_graph, attempt, checker, close, describe, first_difference, hint, passed, require_tensor, safe_float,
                    source_facts, uses_numpy, uses_torch)
from .rules import watch

# The seed's worked example and its two activities, with their hand-computed answers.
_DOT_CASES = [([1, 2, 3], [4, 5, 6], 32), ([3, 5], [-2, 4], 14), ([1, 2, 3, 4], [-4, 0, 2, 5], 22)]

#: Library calls that compute a length or a cosine: exercise 1.2 allows only @ (or torch.dot) and
#: torch.sqrt. Canonical names of rules.canonical; a name ending in "." is a prefix.
_LENGTH_SHORTCUTS = ("norm", "linalg.", "cosine_similarity", "normalize", "pairwise_distance", "cdist",
                     "dist", "renorm", "frobenius_norm", "nuclear_norm", "rsqrt", "hypot")


def _random_dot_cases(seed: int = 11):
    """Cases beyond the worked examples (a lookup table of the examples does not pass them)."""
    rng = random.Random(seed)
    cases = []
    for n in (1, 5, 8):
        a = [rng.randint(-9, 9) for _ in range(n)]
        b = [rng.randint(-9, 9) for _ in range(n)]
        cases.append((a, b, sum(x * y for x, y in zip(a, b))))
    a = [round(rng.uniform(-3, 3), 3) for _ in range(6)]
    b = [round(rng.uniform(-3, 3), 3) for _ in range(6)]
    cases.append((a, b, math.fsum(x * y for x, y in zip(a, b))))
    cases.append(([], [], 0))  # two empty vectors: a sum of no products is 0
    return cases


def _is_number(x) -> bool:
    """A plain number (int or float, not bool), or a tensor/array holding exactly one number."""
    if isinstance(x, (bool, np.bool_)):
        return False
    if isinstance(x, (int, float, np.integer, np.floating)):
        return True
    if isinstance(x, (torch.Tensor, np.ndarray)):
        return x.size == 1 if isinstance(x, np.ndarray) else (x.numel() == 1 and x.dtype != torch.bool and not x.is_complex())
    return False


def _skips(my_dot) -> bool:
    """True when my_dot also skips the first or the last position on another pair (not a coincidence)."""
    a, b = [2, -1, 3, 5], [4, 6, -2, 1]
    got = safe_float(my_dot(list(a), list(b)))
    return got is not None and got in (sum(x * y for x, y in zip(a[:-1], b[:-1])),
                                       sum(x * y for x, y in zip(a[1:], b[1:])))


def _plain_python(used: str = "") -> None:
    hint("write the dot product with a plain Python loop over the two lists, without NumPy or "
         f"PyTorch{used}: add up a[i] * b[i] for every position i.")


@checker("Exercise 1.1")
def dot_by_hand(my_dot) -> None:
    """``my_dot(a, b)`` on plain Python lists, with a loop (no NumPy, no PyTorch)."""
    facts = source_facts(my_dot)
    with watch() as seen:
        for a, b, expected in _DOT_CASES + _random_dot_cases():
            got = my_dot(list(a), list(b))
            if isinstance(got, (torch.Tensor, np.ndarray, np.generic)):
                _plain_python(f" (you returned {describe(got)})")
            if isinstance(got, (list, tuple)):
                if close(got, [x * y for x, y in zip(a, b)]):
                    hint("you returned the products a_i * b_i, one per position: add them up into one number.")
                hint(f"the dot product is one number, but my_dot({a}, {b}) returned {describe(got)}.")
            if not _is_number(got):
                hint(f"my_dot({a}, {b}) returned {describe(got)}; expected a number.")
            value = safe_float(got)
            if value is None:
                hint(f"my_dot({a}, {b}) returned {describe(got)}, expected {expected:g}.", generic=True)
            if math.isclose(value, expected, rel_tol=1e-9, abs_tol=1e-9):
                continue
            if math.isclose(value, sum(a) * sum(b)):
                hint("you multiplied the sums (sum of a) × (sum of b); multiply position by position first, then add.")
            if math.isclose(value, sum(a) + sum(b)):
                hint("you added all the numbers; multiply a_i by b_i at each position, then add the products.")
            if len(a) > 1 and (math.isclose(value, sum(x * y for x, y in zip(a[:-1], b[:-1])))
                               or math.isclose(value, sum(x * y for x, y in zip(a[1:], b[1:])))) and _skips(my_dot):
                hint("your loop skips one position: use every index, range(len(a)).")
            if math.isclose(value, abs(expected)) and expected < 0:
                hint("you returned the absolute value: a dot product is negative when the vectors point in "
                     "opposite directions; return the sum of the products as it is.")
            if math.isclose(value, -expected) and expected != 0:
                hint("the sign is flipped: add the products a_i * b_i, do not subtract them.")
            hint(f"my_dot({a}, {b}) returned {value:g}, expected {expected:g}.", generic=True)
    if uses_numpy(seen, facts) or uses_torch(seen, facts):
        used = sorted(seen.torch_calls)[:3]
        _plain_python(f" (you called {', '.join(used)})" if used else "")
    name = getattr(inspect.unwrap(my_dot), "__name__", "")
    in_disguise = {"map", "starmap", "reduce", "accumulate", name} & facts.names  # a map, a fold, or recursion
    if facts.parsed and not facts.loops and not in_disguise:
        hint("the values are right, but the exercise asks for a loop: for a_i, b_i in zip(a, b): "
             "total += a_i * b_i (or the same as a generator inside sum()).")
    for a, b in (([1, 2, 3], [1, 2]), ([4], [1, 2, 3]), ([], [5])):
        _, error = attempt(my_dot, a, b)
        if error is None:
            hint(f"the values are right, but my_dot({a}, {b}) did not raise ValueError: "
                 "zip() silently drops the extra numbers, so check the lengths first.")
        if not isinstance(error, ValueError):
            hint(f"vectors of different lengths should raise ValueError; yours raised {type(error).__name__}. "
                 "Check the lengths first: if len(a) != len(b): raise ValueError(...).")
    passed("all three examples (32, 14 and 22) are right, and vectors of different lengths are refused.")


def _cosine_cases():
    cases = [
        (torch.tensor([3.0, 5.0]), torch.tensor([-2.0, 4.0])),
        (torch.tensor([1.0, 0.0, 0.0]), torch.tensor([5.0, 5.0, 0.0])),
        (torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([-4.0, 0.0, 2.0, 5.0])),
        (torch.tensor([2.0, -1.0, 0.0]), torch.tensor([-1.0, 3.0, 2.0])),  # an obtuse angle: cos < 0
    ]
    g = torch.Generator().manual_seed(12)
    for n, dtype in ((7, torch.float64), (16, torch.float32), (1, torch.float64)):
        a = torch.randn(n, generator=g, dtype=dtype) * 3
        b = torch.randn(n, generator=g, dtype=dtype) - 0.5
        cases.append((a, b))
    a = torch.randn(5, generator=g, dtype=torch.float64)
    cases.append((a, -2.5 * a))  # opposite directions: exactly -1
    cases.append((torch.tensor([2.0, 0.0]), torch.tensor([0.0, 3.0])))  # orthogonal: exactly 0
    return cases


@checker("Exercise 1.2")
def cosine(my_cosine) -> None:
    """``my_cosine(a, b)`` for 1-D tensors: the cosine of the angle between them, with only ``@``
    (or ``torch.dot``) and ``torch.sqrt``."""
    facts = source_facts(my_cosine)
    with watch() as seen:
        for a, b in _cosine_cases():
            got = my_cosine(a.clone(), b.clone())
            if seen.called("cosine_similarity"):
                hint("compute the cosine from its formula, (a · b) / (|a| |b|), with @ and torch.sqrt; "
                     "the exercise is to write what cosine_similarity does.")
            a64, b64 = a.double(), b.double()
            dot, na, nb = a64 @ b64, a64.norm(), b64.norm()
            expected = dot / (na * nb)
            tol = dict(rtol=1e-4, atol=1e-5) if a.dtype == torch.float32 else {}
            if isinstance(got, torch.Tensor) and got.numel() > 1:
                if close(got, a64 * b64 / (na * nb)) or close(got, a64 * b64):
                    hint("you returned one number per position: add the products up (a @ b) into one number.")
                hint(f"the cosine is one number; for a={_short(a)}, b={_short(b)} you returned {describe(got)}.")
            if not _is_number(got):
                hint(f"return a number (a float or a 0-d tensor); you returned {describe(got)}.")
            value = safe_float(got)
            if value is None:
                hint(f"return a number between -1 and 1; you returned {describe(got)}.", generic=True)
            if close(value, expected, **tol):
                continue
            if close(value, dot, **tol):
                hint("that is the raw dot product: divide it by the two lengths |a| |b|.")
            if close(value, dot / na, **tol) or close(value, dot / nb, **tol):
                hint("divide by both lengths, |a| and |b|, not just one of them.")
            if close(value, dot / na * nb, **tol) or close(value, dot / nb * na, **tol):
                hint("operator precedence: x / y * z is (x / y) * z. Put the product of the lengths in "
                     "parentheses: (a @ b) / (|a| * |b|).")
            if (close(value, dot / (na**2 * nb**2), **tol) or close(value, dot / (a64 @ a64 + b64 @ b64), **tol)
                    or close(value, dot / (na**2 + nb**2), **tol)):
                hint("a length is the square root of a · a; you used the squared length.")
            if close(value, dot / (na + nb), **tol):
                hint("divide by the product of the lengths |a| * |b|, not their sum.")
            if close(value, torch.arccos(expected), **tol) or close(value, torch.rad2deg(torch.arccos(expected)), **tol):
                hint("you returned the angle itself; the exercise asks for its cosine.")
            if close(value, 1 - expected, **tol) and abs(float(expected)) > 1e-6:  # at cos 0, 1 - cos is just 1
                hint("that is the cosine distance, 1 - cos; return the cosine itself.")
            if close(value, -expected, **tol) or close(value, abs(expected), **tol):
                hint("the sign is wrong: the cosine is negative when the angle is wider than 90°; do not "
                     "negate it or take its absolute value.")
            hint(f"for a={_short(a)}, b={_short(b)} you returned {value:.4f}, expected {float(expected):.4f}.",
                 generic=True)
    shortcuts = seen.called(*_LENGTH_SHORTCUTS)
    if shortcuts or uses_numpy(seen, facts):
        used = ", ".join(shortcuts) if shortcuts else "NumPy"
        hint(f"the values are right, but the exercise allows only @ (or torch.dot) and torch.sqrt, and "
             f"you used {used}: the length of a is torch.sqrt(a @ a).")
    require_graph(my_cosine, (torch.tensor([3.0, 5.0]), torch.tensor([-2.0, 4.0])))
    passed("cosine similarity is the dot product of the two directions (unit vectors).")


def _short(t: torch.Tensor) -> str:
    values = [round(v, 3) for v in t.double().tolist()]
    text = str(values)
    return text if len(text) <= 40 else text[:36] + "...]"


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
        for n, m, d, dtype in ((1, 6, 2, torch.float64), (7, 1, 5, torch.float32), (3, 8, 16, torch.float64)):
            q = torch.randn(n, d, generator=gen, dtype=dtype)
            k = torch.randn(m, d, generator=gen, dtype=dtype)
            out = require_tensor(my_all_scores(q.clone(), k.clone()))
            if not close(out, q @ k.T, rtol=1e-4, atol=1e-5):
                hint(f"right on the first example, but not for Q of shape {tuple(q.shape)} and K of shape "
                     f"{tuple(k.shape)} ({dtype}): {first_difference(out, q @ k.T, 'S')}.", generic=True)
        facts = source_facts(my_all_scores)
        if facts.loops or "map" in facts.names:
            kind = sorted(facts.loops)[0] if facts.loops else "map"
            hint(f"the values are right, but the exercise asks for no Python loop (your code has a {kind}): "
                 "one matrix product, Q @ K.T, computes every score at once.")
        require_graph(my_all_scores, (Q, K))
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


def _fixed_scale(fn, got, raw, d, gen):
    """The constant c when ``got`` is ``raw / c`` and the function divides by the same c for
    another width too (a number written into the code), else None."""
    try:
        c = float((raw * raw).sum() / (raw * got.to(raw.dtype)).sum())
    except Exception:  # noqa: BLE001 - a shape or dtype that does not compare: not this mistake
        return None
    if not math.isfinite(c) or c == 0 or not close(got, raw / c):
        return None
    d2 = 7 if d != 7 else 5
    Q, K = torch.randn(3, d2, generator=gen, dtype=raw.dtype), torch.randn(2, d2, generator=gen, dtype=raw.dtype)
    other = fn(Q.clone(), K.clone())
    if isinstance(other, torch.Tensor) and close(other, (Q @ K.T) / c):
        return c
    return None


@checker("Exercise 1.4")
def scaled_scores(my_scaled_scores) -> None:
    """``my_scaled_scores(Q, K)``: ``Q Kᵀ / sqrt(d)`` where d is the width of each query/key."""
    gen = torch.Generator().manual_seed(2)
    # several widths: a scale written as a number fits only one
    for n, m, d, dtype in ((6, 4, 16, torch.float32), (3, 5, 9, torch.float32), (2, 7, 25, torch.float64),
                           (1, 1, 2, torch.float64)):
        Q, K = torch.randn(n, d, generator=gen, dtype=dtype), torch.randn(m, d, generator=gen, dtype=dtype)
        got = require_tensor(my_scaled_scores(Q.clone(), K.clone()))
        raw = Q @ K.T
        right = raw / math.sqrt(d)
        if close(got, right):
            continue
        if close(got, raw):
            hint("these are the raw scores: divide by sqrt(d).")
        scale = _fixed_scale(my_scaled_scores, got, raw, d, gen)
        if scale is not None:
            hint(f"you divided by {scale:.4g} whatever the width: compute the scale from the input, "
                 f"math.sqrt(Q.shape[-1]), not from the example's numbers (for d = {d} it is {math.sqrt(d):.4g}).")
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
    require_graph(my_scaled_scores, (torch.randn(3, 4), torch.randn(2, 4)))
    passed("dividing by sqrt(d) brings the variance of the scores back to about 1, whatever d.")
