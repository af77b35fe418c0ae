"""Checkers for chapter 5, *Positional encoding*.

They recognize the classic slips in the sinusoidal table (sine and cosine swapped, sines and
cosines in two halves instead of interleaved, the exponent ``j/D`` or ``k/D`` instead of ``2j/D``,
multiplying by ``c**(2j/D)`` instead of dividing, positions counted from 1), the transposed rotation of the
shift property, and the cross terms of the ``q_i . k_j`` expansion put in the wrong order.
"""
from __future__ import annotations

import math

import torch

from ._core import checker, close, describe, first_difference, hint, passed

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


def _as_tensor(out, call: str) -> torch.Tensor:
    """The student's table or matrix as a float64 tensor, or a hint (never an error of ours)."""
    if isinstance(out, torch.Tensor):
        if out.is_complex() or out.dtype == torch.bool:
            hint(f"{call} should return real numbers; it returned {describe(out)}.")
        return out
    try:
        return torch.as_tensor(out, dtype=torch.float64)
    except Exception:  # noqa: BLE001 - whatever the student returned is not a table of numbers
        hint(f"{call} should return a tensor; it returned {describe(out)}.")
        raise AssertionError  # unreachable


@checker("Exercise 5.1")
def sinusoidal(my_sinusoidal) -> None:
    """``my_sinusoidal(T, D)`` -> ``(T, D)`` with ``P[i,2j] = sin(i/10000**(2j/D))``, ``P[i,2j+1] = cos(...)``."""
    for T, D in ((50, 16), (9, 6)):  # two sizes: a table built for one D only fits that one
        _check_sinusoidal(my_sinusoidal, T, D)
    passed("sine on even features, cosine on odd ones, one frequency per pair.")


def _check_sinusoidal(my_sinusoidal, T: int, D: int) -> None:
    out = _as_tensor(my_sinusoidal(T, D), f"my_sinusoidal({T}, {D})")
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
        hint("the sines and cosines must be interleaved: column 2j holds a sine and column 2j + 1 the cosine "
             "of the same frequency. You put all the sines in the first half and all the cosines in the "
             "second (P[:, 0::2] = sin, P[:, 1::2] = cos).")
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
    for k, w in [(3, 0.5), (-2, 0.1), (5, 1.0)]:
        R = _as_tensor(my_shift_block(k, w), f"my_shift_block({k}, {w})").double()
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
    passed("a shift by k rotates every (sin, cos) pair by k times its frequency, whatever the position.")


@checker("Exercise 5.3")
def score_terms(my_score_terms) -> None:
    """``my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k)`` -> the four terms (content-content,
    content-position, position-content, position-position) whose sum is ``q_i . k_j``."""
    g = torch.Generator().manual_seed(5)
    d, d_k = 6, 4
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
        passed(f"the four terms add up to q_i . k_j = {score:.4f}; only the last one depends on positions alone.")
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
