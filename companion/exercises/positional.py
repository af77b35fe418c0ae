"""Checkers for chapter 5, *Positional encoding*.

They recognize the classic slips in the sinusoidal table (sine and cosine swapped, the other
layout convention (sines and cosines in two halves, equivalent up to a permutation of the columns)
where the exercise asks for the interleaved one, the exponent ``j/D`` or ``k/D`` instead of ``2j/D``,
multiplying by ``c**(2j/D)`` instead of dividing, positions counted from 1), the transposed rotation of the
shift property, and the cross terms of the ``q_i . k_j`` expansion put in the wrong order.
"""
from __future__ import annotations

import math

import torch

from ._core import checker, close, describe, first_difference, hint, passed, source_facts, uses_companion
from . import rules
from .rules import watch

__all__ = ["sinusoidal", "shift_block", "score_terms"]


def _table(
    T: int, D: int, *, exponent: str = "2j", swap: bool = False, start: int = 0, c: float = 10000.0,
    multiply: bool = False,
):
    """The table and its classic variants, built independently of the companion."""
    P = torch.zeros(T, D, dtype=torch.float64)
    for i in range(T):
        for col in range(D):
            j = col // 2
            power = {"2j": 2 * j / D, "j": j / D, "col": col / D, "floor": (2 * j) // D}[exponent]
            angle = (i + start) * c**power if multiply else (i + start) / c**power
            use_sin = (col % 2 == 0) != swap
            P[i, col] = math.sin(angle) if use_sin else math.cos(angle)
    return P


def _halves(T: int, D: int) -> torch.Tensor:
    """The layout of some libraries: all sines in the first half of the columns, all cosines in the second."""
    P = _table(T, D)
    return torch.cat([P[:, 0::2], P[:, 1::2]], dim=1)


def _as_tensor(out, call: str, not_tensors: list | None = None) -> torch.Tensor:
    """The student's table or matrix as a tensor, or a hint (never an error of ours).

    The exercises ask for a tensor: a NumPy array or a list is checked for its values first (the
    more useful hint), and noted in ``not_tensors`` for :func:`_require_tensors` at the end.
    """
    if isinstance(out, torch.Tensor):
        if out.is_complex() or out.dtype == torch.bool:
            hint(f"{call} should return real numbers; it returned {describe(out)}.")
        return out
    if out is None:
        hint(f"{call} should return a tensor; it returned None: did you forget the `return`?")
    if not_tensors is not None:
        not_tensors.append((call, describe(out)))
    try:
        return torch.as_tensor(out, dtype=torch.float64)
    except Exception:  # noqa: BLE001 - whatever the student returned is not a table of numbers
        hint(f"{call} should return a tensor; it returned {describe(out)}.")
        raise AssertionError  # unreachable


@checker("Exercise 5.1")
def sinusoidal(my_sinusoidal) -> None:
    """``my_sinusoidal(T, D)`` -> ``(T, D)`` with ``P[i,2j] = sin(i/10000**(2j/D))``, ``P[i,2j+1] = cos(...)``."""
    facts = source_facts(my_sinusoidal)
    # several sizes: a table built for one D only fits that one
    not_tensors: list = []
    with watch() as seen:
        for T, D in ((50, 16), (9, 6), (1, 2), (3, 40)):
            _check_sinusoidal(my_sinusoidal, T, D, not_tensors)
    _require_tensors(not_tensors)
    companion = uses_companion(seen, facts)
    if companion:
        hint(f"the table is right, but the exercise asks for it without the companion, and your code uses "
             f"{', '.join(companion[:2])}: build it from torch.arange, torch.sin and torch.cos (or loops).")
    passed("sine on even features, cosine on odd ones, one frequency per pair.")


def _require_tensors(not_tensors: list) -> None:
    if not_tensors:
        call, what = not_tensors[0]
        hint(f"the values are right, but {call} should return a tensor (a torch tensor); it returned {what}. "
             "Build it with torch functions or torch.tensor(...).")


def _check_sinusoidal(my_sinusoidal, T: int, D: int, not_tensors: list) -> None:
    out = _as_tensor(my_sinusoidal(T, D), f"my_sinusoidal({T}, {D})", not_tensors)
    if tuple(out.shape) == (D, T):
        hint(f"the table is transposed: my_sinusoidal({T}, {D}) has one row per position, shape ({T}, {D}).")
    if tuple(out.shape) != (T, D):
        hint(f"my_sinusoidal({T}, {D}) must have shape ({T}, {D}): one row per position (got {tuple(out.shape)}).",
             generic=True)
    if not out.is_floating_point():
        hint(f"your table holds integers ({out.dtype}): the sines and cosines were truncated to whole "
             "numbers. Create it with a float dtype, e.g. torch.zeros(T, D, dtype=torch.float64).")
    out = out.double()
    right = _table(T, D)
    if close(out, right, atol=1e-5):
        return
    if close(out, _table(T, D, swap=True), atol=1e-5):
        hint("sine and cosine are swapped: even columns (0, 2, ...) hold the sine, odd columns the cosine.")
    if close(out, _table(T, D, exponent="floor"), atol=1e-5):
        hint("every pair has the same frequency 1: the exponent 2j/D was computed with integer division "
             "(2 * j // D, or integers in Python 2 style), which is 0 for every pair. Use true division, "
             "2 * j / D, with floats.")
    if close(out, _table(T, D, exponent="j"), atol=1e-5):
        hint("the exponent is 2j/D where j is the pair index (column // 2): you used j/D, so the "
             "frequencies fall too slowly.")
    if close(out, _table(T, D, exponent="col"), atol=1e-5):
        hint("both columns of a pair share one frequency: the exponent uses 2j with j = column // 2 "
             "(0, 0, 2, 2, 4, 4, ... over D), not the column index itself.")
    if close(out, _halves(T, D), atol=1e-5):
        hint("your table uses the other common layout: all the sines in the first half of the columns, "
             "all the cosines in the second (as tensor2tensor does). Both layouts are conventions, the "
             "same table up to a permutation of the columns; this exercise asks for the paper's interleaved "
             "one: column 2j holds the sine and column 2j + 1 the cosine of the same frequency.")
    if close(out, _table(T, D, multiply=True), atol=1e-5):
        hint("divide the position by c**(2j/D) (or multiply by c**(-2j/D)): the frequencies must fall from 1 "
             "towards 1/c, not grow.")
    if close(out, _table(T, D, start=1), atol=1e-5):
        hint("positions start at 0: the first row is sin(0) = 0 and cos(0) = 1.")
    if close(out, _table(T, D, c=1000.0), atol=1e-5) or close(out, _table(T, D, c=100.0), atol=1e-5):
        hint("the base is c = 10000.")
    if close(out[:, 0::2], right[:, 0::2], atol=1e-5):
        hint("the even columns (the sines) are right; the odd columns must hold the cosine of the same "
             "angle, P[i, 2j + 1] = cos(i / 10000**(2j/D)).")
    if close(out[:, 1::2], right[:, 1::2], atol=1e-5):
        hint("the odd columns (the cosines) are right; the even columns must hold the sine of the same "
             "angle, P[i, 2j] = sin(i / 10000**(2j/D)).")
    bad = (out - right).abs() > 1e-5 + 1e-4 * right.abs()
    i, col = (int(v) for v in bad.nonzero()[0]) if bool(bad.any()) else (0, 0)
    fn = "sin" if col % 2 == 0 else "cos"
    hint(f"P[{i}, {col}] should be {fn}({i} / 10000**({2 * (col // 2)}/{D})) = {float(right[i, col]):.4f}; "
         f"yours is {float(out[i, col]):.4f}.", generic=True)


@checker("Exercise 5.2")
def shift_block(my_shift_block) -> None:
    """``my_shift_block(k, w)`` -> ``(2, 2)`` tensor ``R`` with ``[sin(wi), cos(wi)] @ R == [sin(w(i+k)), cos(w(i+k))]``."""
    not_tensors: list = []
    for k, w in [(3, 0.5), (-2, 0.1), (5, 1.0), (0, 0.7), (17, 0.013)]:
        R = _as_tensor(my_shift_block(k, w), f"my_shift_block({k}, {w})", not_tensors).double()
        if tuple(R.shape) != (2, 2):
            hint(f"return a 2 x 2 matrix (got shape {tuple(R.shape)}).", generic=True)
        a = k * w
        right = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
        if close(R, right):
            continue
        if close(R, right.T):
            hint("that is the transposed rotation: it works for column vectors (R @ p). The table's rows "
                 "are row vectors, multiplied on the right: p @ R. Check sin(a + b) = sin a cos b + cos a sin b.")
        for angle in (k, w):
            rotation = torch.tensor([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]],
                                    dtype=torch.float64)
            if close(R, rotation) or close(R, rotation.T):
                hint("the angle of the rotation is k * w (the shift times the pair's frequency), not k or w alone.")
        if close(R, torch.eye(2, dtype=torch.float64)):
            hint("that is the identity: a shift by k must rotate each pair by the angle k * w.")
        hint("use sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b with b = k w: "
             f"for k={k}, w={w}, {first_difference(R, right, 'R')}.", generic=True)
    _require_tensors(not_tensors)
    passed("a shift by k rotates every (sin, cos) pair by k times its frequency, whatever the position.")


@checker("Exercise 5.3")
def score_terms(my_score_terms) -> None:
    """``my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k)`` -> the four terms (content-content,
    content-position, position-content, position-position) whose sum is ``q_i . k_j``."""
    scores = [_check_score_terms(my_score_terms, torch.Generator().manual_seed(seed), d, d_k)
              for seed, d, d_k in ((5, 6, 4), (15, 3, 7), (25, 16, 1))]
    score = scores[0]  # the worked case's score, for the message
    x = torch.ones(2, dtype=torch.float64)
    terms = my_score_terms(x, x, x, x, torch.eye(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64))
    if not isinstance(terms, tuple):
        hint(f"the values are right, but return a tuple of the four terms, (cc, cp, pc, pp), as the exercise asks; "
             f"you returned {describe(terms)}.")
    passed(f"the four terms add up to q_i . k_j = {score:.4f}; only the last one depends on positions alone.")


def _check_score_terms(my_score_terms, g, d, d_k):
    x_i, p_i, x_j, p_j = torch.randn(4, d, generator=g, dtype=torch.float64)
    W_q, W_k = torch.randn(2, d, d_k, generator=g, dtype=torch.float64)
    terms = my_score_terms(*(t.clone() for t in (x_i, p_i, x_j, p_j, W_q, W_k)))
    try:
        if isinstance(terms, (str, bytes, dict)) or (isinstance(terms, torch.Tensor) and terms.dim() != 1):
            raise TypeError
        terms = [float(t) for t in terms]
    except Exception:  # noqa: BLE001 - not a sequence of numbers
        hint(f"return four numbers (or 0-d tensors) in a tuple: (cc, cp, pc, pp); you returned {describe(terms)}.")
    if len(terms) != 4:
        hint(f"return exactly four terms (got {len(terms)}).")
    A = W_q @ W_k.T  # (d, d): q_i . k_j = (x_i + p_i) W_q W_k^T (x_j + p_j)^T
    right = [float(u @ A @ v) for u, v in [(x_i, x_j), (x_i, p_j), (p_i, x_j), (p_i, p_j)]]
    score = float(((x_i + p_i) @ W_q) @ ((x_j + p_j) @ W_k))
    if close(terms, right):
        return score
    if close(sum(terms), score):
        if close(terms, [right[0], right[2], right[1], right[3]]):
            hint("the two cross terms are swapped: the second term pairs the query's content x_i with the key's position p_j.")
        if close(terms, right[::-1]):
            hint("the terms are in reverse order: (content-content, content-position, position-content, "
                 "position-position), that is (x_i, x_j), (x_i, p_j), (p_i, x_j), (p_i, p_j).")
        hint("the terms add up to the score but are not split as asked: (x_i, x_j), (x_i, p_j), (p_i, x_j), (p_i, p_j).")
    A_t = W_k @ W_q.T
    if close(terms, [float(u @ A_t @ v) for u, v in [(x_i, x_j), (x_i, p_j), (p_i, x_j), (p_i, p_j)]]):
        hint("the middle matrix is W_q W_k^T (row vectors: q_i = (x_i + p_i) W_q), not W_k W_q^T.")
    hint(f"the four terms must add up to q_i . k_j = {score:.4f}, with q_i = (x_i + p_i) @ W_q and "
         f"k_j = (x_j + p_j) @ W_k: {first_difference(terms, right, 'term')} (terms counted from 0).", generic=True)


# --------------------------------------------------------------------------- Exercise 5.4: RoPE, one pair

__all__.append("rotate_pair")

# (x0, x1, position, theta): positions 0 and 1 sit among larger ones, so that every recognized
# mistake (angle without the position, without theta, in degrees, ...) differs on some case.
_ROTATE_CASES = [
    (0.6, -1.3, 5, 0.3),
    (-0.8, 0.4, 2, 1.1),
    (1.7, 0.9, 11, 0.05),
    (0.3, 2.0, 0, 0.7),
    (1.2, -0.5, 1, 2.0),
    (-1.1, -0.7, 7, 0.45),
]


def _turn(x0: float, x1: float, a: float) -> tuple[float, float]:
    """The pair turned counterclockwise by ``a`` radians (RoFormer's and ``apply_rotary``'s direction)."""
    c, s = math.cos(a), math.sin(a)
    return (x0 * c - x1 * s, x0 * s + x1 * c)


def _sequential(x0: float, x1: float, position: int, theta: float) -> tuple[float, float]:
    """The slip of updating x0 first and then using the new x0 for x1."""
    a = position * theta
    y0 = x0 * math.cos(a) - x1 * math.sin(a)
    return (y0, y0 * math.sin(a) + x1 * math.cos(a))


# Each recognized mistake: (how it computes the pair from x0, x1, position, theta; the hint).
_ROTATE_MISTAKES = [
    (lambda x0, x1, p, t: _turn(x0, x1, -p * t),
     "you turned the pair clockwise (by -position * theta), as x @ R does with the matrix R "
     "of the shift exercise. The scores would still depend on i - j only, as long as queries "
     "and keys turn the same way, but the exercise follows RoFormer and apply_rotary: "
     "(x0 cos a - x1 sin a, x0 sin a + x1 cos a)."),
    (lambda x0, x1, p, t: _turn(x0, x1, t),
     "the angle is position * theta: you turned every position by theta, so the position "
     "never enters."),
    (lambda x0, x1, p, t: _turn(x0, x1, p),
     "the angle is position * theta: you turned by the position alone (theta is the pair's "
     "frequency, in radians per position)."),
    (lambda x0, x1, p, t: _turn(x0, x1, p * t * math.pi / 180),
     "math.cos and torch.cos take radians, and position * theta is already in radians: do not "
     "convert it (no math.radians, no pi / 180)."),
    (lambda x0, x1, p, t: _turn(x0, x1, p * t * 180 / math.pi),
     "math.cos and torch.cos take radians: position * theta is the angle as it is (no "
     "math.degrees, no 180 / pi)."),
    (lambda x0, x1, p, t: _turn(x0, x1, p / t),
     "the angle is position * theta, the position times the frequency, not position / theta."),
    (lambda x0, x1, p, t: _turn(x0, x1, p * t)[::-1],
     "the two components are swapped: the first output is x0 cos a - x1 sin a, the second "
     "x0 sin a + x1 cos a."),
    (lambda x0, x1, p, t: (x0, x1),
     "the pair comes back unchanged: turn it by the angle a = position * theta."),
    (lambda x0, x1, p, t: (x0 * math.sin(p * t) - x1 * math.cos(p * t),
                           x0 * math.cos(p * t) + x1 * math.sin(p * t)),
     "sin and cos are swapped: at position 0 (a = 0) the pair must come back unchanged, so "
     "cos a multiplies x0 in the first component and x1 in the second."),
    (_sequential,
     "the second component used the already-turned first one: compute both from the original "
     "x0 and x1 (keep a copy of x0 before you overwrite it)."),
]
for _s0, _s1 in [(1, 1), (-1, -1)]:  # one sign of the rotation matrix wrong (both: clockwise, above)
    _ROTATE_MISTAKES.append((
        lambda x0, x1, p, t, s0=_s0, s1=_s1: (
            x0 * math.cos(p * t) + s0 * x1 * math.sin(p * t),
            s1 * x0 * math.sin(p * t) + x1 * math.cos(p * t),
        ),
        "a sign is wrong: a rotation sends (1, 0) to (cos a, sin a) and (0, 1) to (-sin a, cos a), "
        "so the result is (x0 cos a - x1 sin a, x0 sin a + x1 cos a).",
    ))


def _as_pair(out):
    """``(values, problem)``: the student's result as a float64 tensor of shape (2,), or what is wrong."""
    if out is None:
        return None, "your function returned None: did you forget the `return`?"
    if not isinstance(out, torch.Tensor):
        try:
            values = torch.as_tensor(out, dtype=torch.float64).reshape(-1)
        except Exception:
            values = None
        kind = type(out).__name__
        return values, (f"return a torch tensor of shape (2,) (got a {kind}); build it with "
                        "torch.stack([y0, y1]) or torch.tensor([y0, y1]).")
    if out.is_complex():
        return None, ("return a real tensor of shape (2,), the two turned components (got a "
                      "complex tensor: take torch.view_as_real of it, or write the rotation out).")
    if tuple(out.shape) != (2,):
        try:
            values = out.detach().reshape(-1).to(torch.float64) if out.numel() == 2 else None
        except Exception:
            values = None
        return values, f"return a tensor of shape (2,), like x (got shape {tuple(out.shape)})."
    try:
        values = out.detach().to(torch.float64).cpu()
    except Exception:
        return None, f"return a floating-point tensor (got dtype {out.dtype})."
    if not bool(torch.isfinite(values).all()):
        return None, f"your result contains NaN or infinity: {values.tolist()}."
    return values, None


def _score_table(rotate, q, k, theta: float, n: int):
    """``S[i, j] = rotate(q, i, theta) . rotate(k, j, theta)`` for positions 0..n-1, or a problem."""
    rows = []
    for i in range(n):
        qi, problem = _as_pair(rotate(q.clone(), i, theta))
        if problem:
            return None, problem
        row = []
        for j in range(n):
            kj, problem = _as_pair(rotate(k.clone(), j, theta))
            if problem:
                return None, problem
            row.append(float(qi @ kj))
        rows.append(row)
    return torch.tensor(rows, dtype=torch.float64), None


@checker("Exercise 5.4")
def rotate_pair(my_rotate_pair) -> None:
    """``my_rotate_pair(x, position, theta)``: the pair ``x`` (a tensor of shape (2,)) turned
    counterclockwise by the angle ``a = position * theta``: ``(x0 cos a - x1 sin a, x0 sin a + x1 cos a)``."""
    results = []
    for x0, x1, position, theta in _ROTATE_CASES:
        x = torch.tensor([x0, x1], dtype=torch.float64)
        out = my_rotate_pair(x, position, theta)
        if not torch.equal(x, torch.tensor([x0, x1], dtype=torch.float64)):
            hint("your function changed x in place: return a new tensor and leave x as it was (RoPE "
                 "turns the same query for many positions).")
        if not rules.is_remote(my_rotate_pair) and isinstance(out, torch.Tensor) and out.numel() and \
                out.untyped_storage().data_ptr() == \
                x.untyped_storage().data_ptr():
            hint("your function returned x itself (or a view of it) for this pair: return a NEW tensor, so that "
                 "changing the result never changes x (torch.stack([...]) or x.clone()).")
        values, problem = _as_pair(out)
        right = _turn(x0, x1, position * theta)
        if problem:
            if values is not None and close(values, right):
                hint("the numbers are right, but " + problem)
            hint(problem)
        results.append(values)

    def matches(compute) -> bool:
        return all(close(v, compute(x0, x1, p, t)) for v, (x0, x1, p, t) in zip(results, _ROTATE_CASES))

    if not matches(lambda x0, x1, p, t: _turn(x0, x1, p * t)):
        for compute, message in _ROTATE_MISTAKES:
            if matches(compute):
                hint(message)
        for v, (x0, x1, p, t) in zip(results, _ROTATE_CASES):
            right = _turn(x0, x1, p * t)
            if not close(v, right):
                got = ", ".join(f"{float(u):.4f}" for u in v)
                hint(f"for x = ({x0}, {x1}), position {p}, theta {t} (a = {p * t:.2f} rad) the turned "
                     f"pair is ({right[0]:.4f}, {right[1]:.4f}); yours is ({got}). Use "
                     "(x0 cos a - x1 sin a, x0 sin a + x1 cos a).")

    # The point of RoPE: the score of a turned query and a turned key depends on i - j only.
    q = torch.tensor([0.9, -0.4], dtype=torch.float64)
    k = torch.tensor([0.3, 1.2], dtype=torch.float64)
    S, problem = _score_table(my_rotate_pair, q, k, 0.4, 8)
    if problem:
        hint(problem)
    diagonals_constant = all(
        close(torch.diagonal(S, offset), torch.diagonal(S, offset)[0].expand(8 - abs(offset)))
        for offset in range(-7, 8)
    )
    if not diagonals_constant or close(S[0, 0], S[3, 0]):
        hint("your function is right on the test pairs but not at positions 0..7 with theta = 0.4: "
             "use (x0 cos a - x1 sin a, x0 sin a + x1 cos a) with a = position * theta everywhere.")
    passed(f"q_5 . k_2 = q_7 . k_4 = {S[5, 2].item():.4f}: only i - j counts.")
