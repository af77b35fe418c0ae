"""The chapter 5 checkers: the right answer passes, each classic mistake gets its own hint."""
import math

import pytest
import torch

from companion.exercises import positional as check
from companion.positional import shift_matrix, sinusoidal_encoding


def table(T, D, power, swap=False, start=0, c=10000.0):
    i = torch.arange(start, T + start, dtype=torch.float64)[:, None]
    cols = torch.arange(D)
    angle = i / c ** power(cols, D)[None, :]
    even = (cols % 2 == 0) != swap
    return torch.where(even, torch.sin(angle), torch.cos(angle))


RIGHT = lambda k, D: (2 * (k // 2)) / D  # noqa: E731


def angles(T, D, grow=False):
    """(T, D/2): position i times the frequency of pair j, 1 / 10000**(2j/D) (or, wrongly, 10000**(2j/D))."""
    power = torch.arange(0, D, 2, dtype=torch.float64) / D
    return torch.arange(T, dtype=torch.float64)[:, None] * 10000.0 ** (power if grow else -power)


def interleave(a):
    P = torch.empty(a.shape[0], 2 * a.shape[1], dtype=torch.float64)
    P[:, 0::2], P[:, 1::2] = torch.sin(a), torch.cos(a)
    return P


def stub(*args):
    raise NotImplementedError  # your code here


def test_sinusoidal_right_passes():
    assert check.sinusoidal(lambda T, D: sinusoidal_encoding(T, D)).passed
    assert check.sinusoidal(lambda T, D: table(T, D, RIGHT).numpy()).passed  # NumPy is accepted too
    assert check.sinusoidal(lambda T, D: interleave(angles(T, D))).passed


@pytest.mark.parametrize(
    "wrong,expected",
    [
        (lambda T, D: table(T, D, RIGHT, swap=True), "swapped"),
        (lambda T, D: table(T, D, lambda k, D: (k // 2) / D), "you used j/D"),
        (lambda T, D: table(T, D, lambda k, D: k / D), "share one frequency"),
        (lambda T, D: torch.cat([torch.sin(angles(T, D)), torch.cos(angles(T, D))], dim=1), "interleaved"),
        (lambda T, D: interleave(angles(T, D, grow=True)), "not grow"),
        (lambda T, D: table(T, D, RIGHT, start=1), "positions start at 0"),
        (lambda T, D: table(T, D, RIGHT, c=1000.0), "c = 10000"),
        (lambda T, D: table(T, D, RIGHT).T, "one row per position"),
        (lambda T, D: table(T, D, RIGHT) * 2, "should be cos(0 / 10000**(0/16)) = 1.0000"),
    ],
)
def test_sinusoidal_mistakes(wrong, expected):
    fb = check.sinusoidal(wrong)
    assert fb.status == "hint" and expected in fb.message, fb


def rot(a):
    return torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])


def test_shift_block():
    assert check.shift_block(lambda k, w: rot(k * w)).passed
    assert "transposed rotation" in check.shift_block(lambda k, w: rot(k * w).T).message
    assert "k * w" in check.shift_block(lambda k, w: rot(k)).message
    assert "identity" in check.shift_block(lambda k, w: torch.eye(2)).message
    assert "sin(a + b)" in check.shift_block(lambda k, w: 2 * torch.eye(2)).message
    assert "2 x 2" in check.shift_block(lambda k, w: torch.eye(3)).message


def terms(x_i, p_i, x_j, p_j, W_q, W_k):
    A = W_q @ W_k.T
    return (x_i @ A @ x_j, x_i @ A @ p_j, p_i @ A @ x_j, p_i @ A @ p_j)


def test_score_terms():
    assert check.score_terms(terms).passed
    swapped = lambda *a: (lambda t: (t[0], t[2], t[1], t[3]))(terms(*a))  # noqa: E731
    assert "cross terms are swapped" in check.score_terms(swapped).message
    transposed = lambda x_i, p_i, x_j, p_j, W_q, W_k: terms(x_i, p_i, x_j, p_j, W_k, W_q)  # noqa: E731
    assert "W_q W_k^T" in check.score_terms(transposed).message
    assert "exactly four" in check.score_terms(lambda *a: terms(*a)[:3]).message
    lumped = lambda *a: (lambda t: (t[0] + t[1], 0.0, t[2], t[3]))(terms(*a))  # noqa: E731
    assert "not split as asked" in check.score_terms(lumped).message
    assert "must add up" in check.score_terms(lambda *a: (1.0, 2.0, 3.0, 4.0)).message


@pytest.mark.parametrize("fn", [check.sinusoidal, check.shift_block, check.score_terms])
def test_stub_not_attempted(fn):
    assert fn(stub).status == "not attempted"
    assert fn(...).status == "not attempted"


def test_integer_division_exponent_is_named_and_no_hint_quotes_matching_values():
    floor = table(50, 16, lambda k, D: (2 * (k // 2)) // D)  # 2j // D is 0: every pair has frequency 1
    small = table(9, 6, lambda k, D: (2 * (k // 2)) // D)
    fb = check.sinusoidal(lambda T, D: floor if T == 50 else small)
    assert fb.status == "hint" and "integer division" in fb.message
    # The generic fallback quotes an entry where the student's table differs, never one where it agrees.
    columns = lambda D: ((torch.arange(D) == 2) | (torch.arange(D) == 3)) * 0.5  # noqa: E731
    shifted = check.sinusoidal(lambda T, D: sinusoidal_encoding(T, D) + columns(D))
    assert shifted.kind == "generic" and "P[0, 2] should be sin(0 / 10000**(2/16)) = 0.0000" in shifted.message
