"""Mutation registry of chapter 5 (positional encoding): see tests/mutation_harness.py."""
import math

import torch

from companion.exercises import positional as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 5.1 ---------------------------------------------------------------------------------------------
def my_sinusoidal(T, D):
    positions = torch.arange(T, dtype=torch.float64)[:, None]  # (T, 1)
    omega = 10000.0 ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)  # (D/2,): omega_j = 10000^(-2j/D)
    P = torch.zeros(T, D, dtype=torch.float64)
    P[:, 0::2] = torch.sin(positions * omega)  # (T, 1) * (D/2,) -> (T, D/2)
    P[:, 1::2] = torch.cos(positions * omega)
    return P


def _table(exponent=lambda j2, D: j2 / D, start=0, c=10000.0, multiply=False, sin=torch.sin, cos=torch.cos,
           layout="interleaved", dtype=torch.float64):
    def table(T, D):
        positions = torch.arange(start, start + T, dtype=torch.float64)[:, None]
        j2 = torch.arange(0, D, 2, dtype=torch.float64)  # 2j
        power = exponent(j2, D)
        omega = (c ** power) if multiply else c ** (-power if isinstance(power, torch.Tensor) else -power)
        angles = positions * omega
        P = torch.zeros(T, D, dtype=dtype)
        if layout == "halves":
            P[:, : D // 2], P[:, D // 2:] = sin(angles), cos(angles)
        else:
            P[:, 0::2], P[:, 1::2] = sin(angles), cos(angles)
        return P
    return table


SINUSOIDAL = [
    Mutant("sine and cosine swapped", _table(sin=torch.cos, cos=torch.sin), "swapped"),
    Mutant("integer division 2j // D", _table(exponent=lambda j2, D: torch.div(j2, D, rounding_mode="floor")), "integer division"),
    Mutant("exponent j / D", _table(exponent=lambda j2, D: (j2 // 2) / D), "you used j/D"),
    Mutant("exponent column / D", lambda T, D: _column_table(T, D), "not the column index itself"),
    Mutant("sines then cosines", _table(layout="halves"), "interleaved"),
    Mutant("multiplied by c ** (2j/D)", _table(multiply=True), "must fall from 1"),
    Mutant("positions from 1", _table(start=1), "positions start at 0"),
    Mutant("base 1000", _table(c=1000.0), "the base is c = 10000"),
    Mutant("integer table", _table(dtype=torch.long), "holds integers"),
    Mutant("transposed", lambda T, D: my_sinusoidal(T, D).T, "transposed"),
    Mutant("cosines everywhere", _table(sin=torch.cos), "the odd columns (the cosines) are right"),
    Mutant("sines everywhere", _table(cos=torch.sin), "the even columns (the sines) are right"),
    Mutant("returns None", lambda T, D: None, "should return a tensor"),
    Mutant("only the angles", lambda T, D: torch.arange(T, dtype=torch.float64)[:, None] * 10000.0 ** (
        -torch.arange(0, D, 2, dtype=torch.float64) / D)),
    Mutant("float32 and degrees", _table(sin=lambda a: torch.sin(torch.deg2rad(a)), cos=lambda a: torch.cos(torch.deg2rad(a)))),
]


def _column_table(T, D):
    """The exponent col / D, with the column index instead of 2j."""
    P = torch.zeros(T, D, dtype=torch.float64)
    i = torch.arange(T, dtype=torch.float64)[:, None]
    cols = torch.arange(D, dtype=torch.float64)
    angles = i / 10000.0 ** (cols / D)  # (T, D)
    P[:, 0::2], P[:, 1::2] = torch.sin(angles[:, 0::2]), torch.cos(angles[:, 1::2])
    return P


# --- 5.2 ---------------------------------------------------------------------------------------------
def rot(a):
    return torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)


def my_shift_block(k, w):
    a = k * w  # the rotation angle: shift times frequency
    return torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=torch.float64)


SHIFT = [
    Mutant("transposed rotation", lambda k, w: rot(k * w).T, "transposed rotation"),
    Mutant("negative angle", lambda k, w: rot(-k * w), "transposed rotation"),
    Mutant("angle k", lambda k, w: rot(k), "not k or w alone"),
    Mutant("angle w", lambda k, w: rot(w), "not k or w alone"),
    Mutant("identity", lambda k, w: torch.eye(2, dtype=torch.float64), "identity"),
    Mutant("3 x 3", lambda k, w: torch.eye(3)),
    Mutant("returns None", lambda k, w: None, "should return a tensor"),
    Mutant("no minus sign", lambda k, w: rot(k * w).abs()),
    Mutant("cos and sin swapped", lambda k, w: torch.tensor([[math.sin(k * w), -math.cos(k * w)],
                                                             [math.cos(k * w), math.sin(k * w)]])),
    Mutant("angle k / w", lambda k, w: rot(k / w)),
    Mutant("returns lists of lists", lambda k, w: rot(k * w).T.tolist(), "transposed rotation"),
    Mutant("complex number", lambda k, w: torch.tensor(complex(math.cos(k * w), math.sin(k * w))), "real numbers"),
    Mutant("degrees", lambda k, w: rot(math.radians(k * w))),
]


# --- 5.3 ---------------------------------------------------------------------------------------------
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    A = W_q @ W_k.T  # (d, d)
    return (x_i @ A @ x_j, x_i @ A @ p_j, p_i @ A @ x_j, p_i @ A @ p_j)


TERMS = [
    Mutant("cross terms swapped", lambda *a: (lambda t: (t[0], t[2], t[1], t[3]))(my_score_terms(*a)),
           "cross terms are swapped"),
    Mutant("W_k W_q^T", lambda x_i, p_i, x_j, p_j, W_q, W_k: my_score_terms(x_i, p_i, x_j, p_j, W_k, W_q), "W_q W_k^T"),
    Mutant("three terms", lambda *a: my_score_terms(*a)[:3], "exactly four"),
    Mutant("lumped", lambda *a: (lambda t: (t[0] + t[1], 0.0, t[2], t[3]))(my_score_terms(*a)),
           "not split as asked"),
    Mutant("reverse order", lambda *a: my_score_terms(*a)[::-1], "reverse order"),
    Mutant("the score only", lambda x_i, p_i, x_j, p_j, W_q, W_k: ((x_i + p_i) @ W_q) @ ((x_j + p_j) @ W_k),
           "four numbers"),
    Mutant("returns None", lambda *a: None, "four numbers"),
    Mutant("a dict", lambda *a: dict(zip("abcd", my_score_terms(*a))), "four numbers"),
    Mutant("vectors instead of numbers", lambda x_i, p_i, x_j, p_j, W_q, W_k: (x_i @ W_q, x_j @ W_k, p_i @ W_q, p_j @ W_k),
           "four numbers"),
    Mutant("same weights for keys", lambda x_i, p_i, x_j, p_j, W_q, W_k: my_score_terms(x_i, p_i, x_j, p_j, W_q, W_q)),
    Mutant("positions ignored", lambda *a: (lambda t: (t[0], 0.0, 0.0, 0.0))(my_score_terms(*a))),
    Mutant("sign flipped", lambda *a: tuple(-t for t in my_score_terms(*a))),
    Mutant("NaN", lambda *a: (float("nan"),) * 4),
]


# --- 5.4 ---------------------------------------------------------------------------------------------
# The wrong answers of tests/test_exercises_positional.py, each with the hint it must get.
from test_exercises_positional import ROTATE_MISTAKES, turn  # noqa: E402

ROTATE = [Mutant(f"{i}: {expect}", fn, expect) for i, (fn, expect) in enumerate(ROTATE_MISTAKES)]


EXERCISES = [
    Exercise(check.sinusoidal, my_sinusoidal, SINUSOIDAL),
    Exercise(check.shift_block, my_shift_block, SHIFT),
    Exercise(check.score_terms, my_score_terms, TERMS),
    Exercise(check.rotate_pair, turn, ROTATE),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
