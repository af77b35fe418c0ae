"""Checkers for the exercises of chapter 1 (dot products)."""
from __future__ import annotations

import inspect
import math
import random

import numpy as np
import torch

from ._core import (StudentError, require_graph, attempt, checker, close, describe, first_difference, hint, passed, require_tensor, safe_float,
                    source_facts, uses_numpy, uses_torch)
from . import _diff, rules
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


def _pairs_cases():
    """(label, Q, K) with Q (n, B, d) and K (m, B, d): sequence first, as nn.MultiheadAttention's default."""
    g = torch.Generator().manual_seed(13)
    cases = []
    for label, (n, m, B, d), dtype in (
            ("the first example", (4, 5, 3, 6), torch.float32),
            ("n = m (a transposed result looks right in shape)", (4, 4, 2, 3), torch.float64),
            ("a batch of one", (3, 5, 1, 4), torch.float64),
            ("one query", (1, 6, 2, 5), torch.float32),
            ("one key", (5, 1, 3, 2), torch.float64),
            ("width 1", (3, 4, 2, 1), torch.float64),
            ("n = B (the sequence and batch axes look alike)", (3, 5, 3, 4), torch.float64),
            ("odd sizes", (7, 3, 5, 9), torch.float32)):
        cases.append((f"{label}, {dtype}", torch.randn(n, B, d, generator=g, dtype=dtype),
                      torch.randn(m, B, d, generator=g, dtype=dtype)))
    draw = random.Random()  # fresh every run, and not the caller's global random state
    fresh = torch.Generator().manual_seed(draw.randrange(2**31))
    n, m, B, d = (draw.randint(1, 7) for _ in range(4))
    cases.append((f"a fresh random draw (n, m, B, d) = ({n}, {m}, {B}, {d})",
                  torch.randn(n, B, d, generator=fresh, dtype=torch.float64),
                  torch.randn(m, B, d, generator=fresh, dtype=torch.float64)))
    return cases


def _pairs_reference(Q, K):
    return torch.einsum("nbd,mbd->bnm", Q, K)


@checker("Exercise 1.3")
def all_pairs(my_all_scores) -> None:
    """``my_all_scores(Q, K)`` for Q (n, B, d), K (m, B, d), sequence first: the (B, n, m) scores."""
    cases = _pairs_cases()
    classes = [("", False, False)] + [(", with requires_grad", True, False), (", under torch.no_grad()", False, True)]
    for index, (label, Q, K) in enumerate(cases):
        for extra, grad, no_grad in classes if index in (0, 2) else classes[:1]:
            where = label + extra
            text = f"my_all_scores(Q {tuple(Q.shape)}, K {tuple(K.shape)})"
            try:
                got = _diff.call(my_all_scores, (Q, K), where, grad=grad, no_grad=no_grad, name="my_all_scores",
                                 first=index == 0 and not extra)
            except StudentError as exc:
                if isinstance(exc.error, RuntimeError) and ("size" in str(exc.error) or "dimension" in str(exc.error)):
                    hint(f"the shapes do not fit for {text} ({where}): Q is (n, B, d), sequence first, so a plain "
                         "Q @ K.transpose(-2, -1) pairs the wrong axes. Move the batch axis to the front "
                         "(Q.transpose(0, 1) is (B, n, d)) or use einsum('nbd,mbd->bnm', Q, K).")
                raise
            got = _diff.real_tensor(got, text)
            expected = _pairs_reference(Q, K)
            if _diff.same_values(got, expected, where, text, "S"):
                if grad and not got.requires_grad and not rules.is_remote(my_all_scores):
                    hint("the values are right, but no gradient flows back to Q and K: compute with torch "
                         "operations on the tensors you are given (no .detach(), .numpy(), torch.tensor(...)).")
                continue
            _pairs_mistakes(got, Q, K, where)
            _diff.generic(got, expected, where, text, "S")
    passed("S[b] = Q[:, b] K[:, b]ᵀ for every sequence b: the sequence-first layout moved to batch-first "
           "in one product.")


def _pairs_mistakes(got, Q, K, where):
    n, B, d = Q.shape
    m = K.shape[0]
    right = _pairs_reference(Q, K)
    shape = tuple(got.shape)
    if shape == (n, B, m) and close(got, right.permute(1, 0, 2)):
        hint(f"the values are right but in the order (n, B, m) ({where}): put the batch axis first, (B, n, m), "
             "as every later chapter expects.")
    if shape == (B, m, n) and n != m or (shape == (B, n, m) and n == m and close(got, right.transpose(1, 2))):
        hint(f"the result is transposed ({where}): S[b, i, j] is query i against key j, so rows are queries "
             "(n) and columns keys (m).")
    if shape == (B, n, m) and close(got, right / math.sqrt(d)):
        hint("this exercise asks for the raw scores; the scaling by sqrt(d) comes later in the chapter.")
    if shape == (B, n, m) and close(got, -right):
        hint("the sign is flipped: S = Q Kᵀ.")
    if shape in ((n, B, B), (B, B)) or (len(shape) == 3 and shape[1:] == (B, B)):
        hint(f"your result pairs the batch entries with each other ({where}): you treated the first axis as "
             "the batch. Here Q is (n, B, d), sequence first: move the batch axis to the front "
             "(Q.transpose(0, 1)) before the product, or use einsum('nbd,mbd->bnm', Q, K).")
    if shape == (B, d, d) or shape == (d, d):
        hint(f"your result is (d, d) per sequence ({where}): that is Qᵀ K. Transpose K instead, so that the "
             "features are summed over: (B, n, d) @ (B, d, m).")
    if len(shape) == 3 and shape == (B, n, m):
        qs = Q.transpose(0, 1)
        if close(got, qs @ qs.transpose(1, 2)) and not close(Q, K):
            hint("you compared the queries with themselves; the columns are the keys K.")




def _scale_cases():
    """(label, d, var_q, var_k): widths 1, odd and large; equal and unequal variances; number types."""
    draw = random.Random()  # a fresh draw each run, beside the fixed classes
    return [
        ("unit variances, d = 16", 16, 1.0, 1.0),
        ("nn.Linear's queries and keys (variance 1/3 each), d = 64", 64, 1 / 3, 1 / 3),
        ("width 1", 1, 2.0, 0.5),
        ("an odd width and unequal variances", 9, 4.0, 0.25),
        ("integer variances", 25, 2, 3),
        ("NumPy numbers", np.int64(12), np.float64(0.2), np.float64(5.0)),
        ("a wide head", 1024, 0.01, 0.04),
        ("a fresh random draw", draw.randint(1, 300), round(draw.uniform(0.05, 4), 3), round(draw.uniform(0.05, 4), 3)),
    ]


def _measured_variance(d: int, var_q: float, var_k: float, scale: float, n: int = 20_000) -> float:
    g = torch.Generator().manual_seed(14)
    q = torch.randn(n, d, generator=g, dtype=torch.float64) * math.sqrt(var_q)
    k = torch.randn(n, d, generator=g, dtype=torch.float64) * math.sqrt(var_k)
    return float(((q * k).sum(-1) / scale).var())


@checker("Exercise 1.4")
def scaled_scores(my_scale) -> None:
    """``my_scale(d, var_q, var_k)``: the number to divide q · k by so that its variance is 1."""
    pending = ""
    for label, d, vq, vk in _scale_cases():
        text = f"my_scale({d}, {float(vq):.4g}, {float(vk):.4g})"
        got = _diff.call(my_scale, (d, vq, vk), label, name="my_scale", first=label.startswith("unit"))
        if isinstance(got, torch.Tensor) and (got.is_meta or got.numel() != 1):
            hint(f"wrong type: {text} should return one number; it returned {describe(got)}.")
        value = safe_float(got)
        if value is None or isinstance(got, (list, tuple, str)):
            hint(f"wrong type: {text} should return one number (the scale); it returned {describe(got)}.")
        d_, vq_, vk_ = float(d), float(vq), float(vk)
        right = math.sqrt(d_ * vq_ * vk_)
        if math.isclose(value, right, rel_tol=1e-6):
            continue
        matches = []
        for wrong, message in (
                (math.sqrt(d_), "that is sqrt(d), right only for unit variances: each product q_i k_i has variance "
                                "var_q · var_k, so the sum of d of them has variance d · var_q · var_k."),
                (d_ * vq_ * vk_, "that is the variance of q · k; divide by its standard deviation, the square root."),
                (math.sqrt(d_) * vq_ * vk_, "the variances go under the square root too: the spread of q · k is "
                                            "sqrt(d · var_q · var_k)."),
                (math.sqrt(d_ * (vq_ + vk_)), "the variance of a product of independent zero-mean numbers is the "
                                              "product of their variances, not the sum."),
                (math.sqrt(d_) * (vq_ + vk_) / 2, "the variance of a product of independent zero-mean numbers is "
                                                  "the product of their variances."),
                (d_, "dividing by d makes the variance 1/d · var_q var_k; the spread grows like sqrt(d)."),
                (1 / right, "that is 1 / scale, the factor to multiply by; return the number to divide by."),
                (math.sqrt(d_ * vq_), "the keys' variance var_k counts as much as the queries'."),
                (math.sqrt(d_ * vk_), "the queries' variance var_q counts as much as the keys'.")):
            if math.isclose(value, wrong, rel_tol=1e-6) and not math.isclose(wrong, right, rel_tol=1e-6):
                matches.append(message)
        if len(matches) == 1:
            hint(f"{text} ({label}) returned {value:.4g}: {matches[0]}")
        pending = pending or (f"{text} ({label}) returned {value:.4g}; the scores would then have variance "
                              f"{d_ * vq_ * vk_ / value ** 2 if value else float('inf'):.3g}, not 1.")
        if not matches:  # no known mistake fits: say how far off it is
            hint(pending, generic=True)
    if pending:  # several mistakes fit every wrong case alike
        hint(pending, generic=True)
    lines = []
    for d, vq, vk in ((64, 1 / 3, 1 / 3), (256, 1.0, 0.25)):
        scale = safe_float(my_scale(d, vq, vk))
        lines.append(f"d = {d}, variances {vq:.3g} and {vk:.3g}: measured variance "
                     f"{_measured_variance(d, vq, vk, scale):.2f}")
    passed("measured on 20,000 random pairs with your scale: " + "; ".join(lines) + ".")
