"""Checkers for chapter 5, *Positional encoding*.

They recognize the classic slips in the sinusoidal table (sine and cosine swapped, sines and
cosines in two halves instead of interleaved, the exponent ``j/D`` or ``k/D`` instead of ``2j/D``,
multiplying by ``c**(2j/D)`` instead of dividing, positions counted from 1), the transposed rotation of the
shift property, and the cross terms of the ``q_i . k_j`` expansion put in the wrong order.
"""
from __future__ import annotations

import math

import torch

from ._core import checker, close, hint, passed

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
            power = {"2j": 2 * j / D, "j": j / D, "col": col / D}[exponent]
            angle = (i + start) * c**power if multiply else (i + start) / c**power
            use_sin = (col % 2 == 0) != swap
            P[i, col] = math.sin(angle) if use_sin else math.cos(angle)
    return P


def _halves(T: int, D: int) -> torch.Tensor:
    """The layout of some libraries: all sines in the first half of the columns, all cosines in the second."""
    P = _table(T, D)
    return torch.cat([P[:, 0::2], P[:, 1::2]], dim=1)


@checker("Exercise 5.1")
def sinusoidal(my_sinusoidal) -> None:
    """``my_sinusoidal(T, D)`` -> ``(T, D)`` with ``P[i,2j] = sin(i/10000**(2j/D))``, ``P[i,2j+1] = cos(...)``."""
    T, D = 50, 16
    out = my_sinusoidal(T, D)
    if not isinstance(out, torch.Tensor):
        out = torch.as_tensor(out)
    if tuple(out.shape) != (T, D):
        hint(f"my_sinusoidal({T}, {D}) must have shape ({T}, {D}): one row per position (got {tuple(out.shape)}).")
    out = out.double()
    if close(out, _table(T, D), atol=1e-5):
        passed("sine on even features, cosine on odd ones, one frequency per pair.")
    if close(out, _table(T, D, swap=True), atol=1e-5):
        hint("sine and cosine are swapped: even columns (0, 2, ...) hold the sine, odd columns the cosine.")
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
    hint("compare your first two rows with the formula: row 0 is [0, 1, 0, 1, ...], row 1 starts [sin 1, cos 1].")


@checker("Exercise 5.2")
def shift_block(my_shift_block) -> None:
    """``my_shift_block(k, w)`` -> ``(2, 2)`` tensor ``R`` with ``[sin(wi), cos(wi)] @ R == [sin(w(i+k)), cos(w(i+k))]``."""
    for k, w in [(3, 0.5), (-2, 0.1), (5, 1.0)]:
        R = my_shift_block(k, w)
        R = torch.as_tensor(R, dtype=torch.float64)
        if tuple(R.shape) != (2, 2):
            hint(f"return a 2 x 2 matrix (got shape {tuple(R.shape)}).")
        a = k * w
        right = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)
        if close(R, right):
            continue
        if close(R, right.T):
            hint("that is the transposed rotation: it works for column vectors (R @ p). The table's rows "
                 "are row vectors, multiplied on the right: p @ R. Check sin(a + b) = sin a cos b + cos a sin b.")
        if close(R, torch.tensor([[math.cos(k), -math.sin(k)], [math.sin(k), math.cos(k)]], dtype=torch.float64)):
            hint("the angle of the rotation is k * w (the shift times the pair's frequency), not k.")
        hint("use sin(a + b) = sin a cos b + cos a sin b and cos(a + b) = cos a cos b - sin a sin b with b = k w.")
    passed("a shift by k rotates every (sin, cos) pair by k times its frequency, whatever the position.")


@checker("Exercise 5.3")
def score_terms(my_score_terms) -> None:
    """``my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k)`` -> the four terms (content-content,
    content-position, position-content, position-position) whose sum is ``q_i . k_j``."""
    g = torch.Generator().manual_seed(5)
    d, d_k = 6, 4
    x_i, p_i, x_j, p_j = torch.randn(4, d, generator=g, dtype=torch.float64)
    W_q, W_k = torch.randn(2, d, d_k, generator=g, dtype=torch.float64)
    terms = my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k)
    try:
        terms = [float(t) for t in terms]
    except Exception:
        hint("return four numbers (or 0-d tensors) in a tuple: (cc, cp, pc, pp).")
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
        hint("the terms add up to the score but are not split as asked: (x_i, x_j), (x_i, p_j), (p_i, x_j), (p_i, p_j).")
    A_t = W_k @ W_q.T
    if close(terms, [float(u @ A_t @ v) for u, v in [(x_i, x_j), (x_i, p_j), (p_i, x_j), (p_i, p_j)]]):
        hint("the middle matrix is W_q W_k^T (row vectors: q_i = (x_i + p_i) W_q), not W_k W_q^T.")
    hint(f"the four terms must add up to q_i . k_j = {score:.4f}, with q_i = (x_i + p_i) @ W_q and k_j = (x_j + p_j) @ W_k.")
