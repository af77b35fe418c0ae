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
    assert check.sinusoidal(lambda T, D: table(T, D, RIGHT)).passed
    assert check.sinusoidal(lambda T, D: interleave(angles(T, D))).passed


def _through_the_companion(T, D):
    import companion.positional
    return companion.positional.sinusoidal_encoding(T, D)


def _companion_imported_elsewhere(T, D):
    return sinusoidal_encoding(T, D)  # imported at the top of the notebook


def test_sinusoidal_rules_and_types():
    for fn in (_through_the_companion, _companion_imported_elsewhere):
        fb = check.sinusoidal(fn)
        assert not fb.passed and "without the companion" in fb.message, fb
    fb = check.sinusoidal(lambda T, D: table(T, D, RIGHT).numpy())  # a tensor is asked
    assert not fb.passed and "should return a tensor (a torch tensor)" in fb.message, fb
    fb = check.shift_block(lambda k, w: [[math.cos(k * w), -math.sin(k * w)], [math.sin(k * w), math.cos(k * w)]])
    assert not fb.passed and "should return a tensor (a torch tensor)" in fb.message, fb


def test_the_halves_layout_is_called_a_convention_not_a_mistake():
    fb = check.sinusoidal(lambda T, D: torch.cat([table(T, D, RIGHT)[:, 0::2], table(T, D, RIGHT)[:, 1::2]], 1))
    assert not fb.passed and "conventions" in fb.message and "permutation" in fb.message, fb
    assert "P[:, 0::2] = sin" not in fb.message  # the right layout is never shown as the mistake


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


# --------------------------------------------------------------------------- Exercise 5.4: RoPE, one pair


def turn(x, position, theta):
    a = position * theta
    return torch.stack([x[0] * math.cos(a) - x[1] * math.sin(a), x[0] * math.sin(a) + x[1] * math.cos(a)])


def turn_by_matrix(x, position, theta):
    a = torch.tensor(position * theta, dtype=x.dtype)
    R = torch.stack([torch.stack([torch.cos(a), -torch.sin(a)]), torch.stack([torch.sin(a), torch.cos(a)])])
    return R @ x  # a column-vector rotation, the same numbers


def turn_complex(x, position, theta):
    z = torch.complex(x[0], x[1]) * torch.exp(torch.tensor(1j * position * theta))
    return torch.stack([z.real, z.imag])


def turn_float32(x, position, theta):
    return turn(x.float(), position, theta)


def turn_tracked(x, position, theta):
    return turn(x, position, theta).requires_grad_()


def turn_tensor_of_scalars(x, position, theta):
    a = position * theta
    return torch.tensor([x[0] * math.cos(a) - x[1] * math.sin(a), x[0] * math.sin(a) + x[1] * math.cos(a)])


@pytest.mark.parametrize(
    "right", [turn, turn_by_matrix, turn_complex, turn_float32, turn_tracked, turn_tensor_of_scalars]
)
def test_rotate_pair_right_passes(right):
    fb = check.rotate_pair(right)
    assert fb.passed, fb
    assert "only i - j counts" in fb.message


def _pair(y0, y1):
    return torch.stack([torch.as_tensor(y0, dtype=torch.float64), torch.as_tensor(y1, dtype=torch.float64)])


def _by_formula(formula):
    """A student's function from a formula of (x0, x1, a), a = position * theta."""
    return lambda x, p, t: _pair(*formula(x[0].item(), x[1].item(), p, t))


def _sequential_in_copy(x, p, t):
    y = x.clone()
    a = p * t
    y[0] = y[0] * math.cos(a) - y[1] * math.sin(a)
    y[1] = y[0] * math.sin(a) + y[1] * math.cos(a)  # uses the new y[0]
    return y


def _in_place(x, p, t):
    x0, x1 = x[0].item(), x[1].item()
    a = p * t
    x[0] = x0 * math.cos(a) - x1 * math.sin(a)
    x[1] = x0 * math.sin(a) + x1 * math.cos(a)
    return x


def _c(p, t):
    return math.cos(p * t)


def _s(p, t):
    return math.sin(p * t)


def _row_vector_rotation(x, p, t):  # x @ R with the shift exercise's R: turns the other way
    a = p * t
    R = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]], dtype=x.dtype)
    return x @ R


ROTATE_MISTAKES = [
    (_row_vector_rotation, "as x @ R does"),
    # rotation the wrong way (clockwise)
    (_by_formula(lambda x0, x1, p, t: (x0 * _c(p, t) + x1 * _s(p, t), -x0 * _s(p, t) + x1 * _c(p, t))), "clockwise"),
    # the angle without the position
    (_by_formula(lambda x0, x1, p, t: (x0 * _c(1, t) - x1 * _s(1, t), x0 * _s(1, t) + x1 * _c(1, t))),
     "the position never enters"),
    # the angle without theta
    (_by_formula(lambda x0, x1, p, t: (x0 * _c(p, 1) - x1 * _s(p, 1), x0 * _s(p, 1) + x1 * _c(p, 1))),
     "by the position alone"),
    # degrees instead of radians: math.radians of an angle that already is in radians
    (lambda x, p, t: turn(x, p, math.radians(t)), "no math.radians"),
    # radians turned into degrees before cos and sin
    (lambda x, p, t: turn(x, p, math.degrees(t)), "no math.degrees"),
    # the position divided by theta
    (lambda x, p, t: turn(x, 1, p / t), "not position / theta"),
    # the components swapped
    (lambda x, p, t: turn(x, p, t).flip(0), "components are swapped"),
    # no rotation at all
    (lambda x, p, t: x.clone(), "comes back unchanged"),
    # sin and cos swapped
    (_by_formula(lambda x0, x1, p, t: (x0 * _s(p, t) - x1 * _c(p, t), x0 * _c(p, t) + x1 * _s(p, t))),
     "sin and cos are swapped"),
    # the second component computed from the already-turned first one
    (_sequential_in_copy, "already-turned first one"),
    # one sign wrong, either place
    (_by_formula(lambda x0, x1, p, t: (x0 * _c(p, t) + x1 * _s(p, t), x0 * _s(p, t) + x1 * _c(p, t))), "a sign is wrong"),
    (_by_formula(lambda x0, x1, p, t: (x0 * _c(p, t) - x1 * _s(p, t), -x0 * _s(p, t) + x1 * _c(p, t))), "a sign is wrong"),
    # the right numbers in a list, a tuple, a NumPy array
    (lambda x, p, t: turn(x, p, t).tolist(), "the numbers are right, but return a torch tensor"),
    (lambda x, p, t: tuple(turn(x, p, t)), "the numbers are right, but return a torch tensor"),
    (lambda x, p, t: turn(x, p, t).numpy(), "the numbers are right, but return a torch tensor"),
    # the right numbers in the wrong shape
    (lambda x, p, t: turn(x, p, t)[None, :], "shape (2,)"),
    (lambda x, p, t: turn(x, p, t)[:, None], "shape (2,)"),
    # a complex number instead of a pair
    (lambda x, p, t: torch.complex(x[0], x[1]) * torch.exp(torch.tensor(1j * p * t)), "real tensor"),
    # x changed in place
    (_in_place, "changed x in place"),
    # the `return` forgotten
    (lambda x, p, t: None, "forget the `return`"),
    # NaN
    (lambda x, p, t: turn(x, p, t) * float("nan"), "NaN"),
    # unrecognized mistakes get the worked case: a half angle,
    (lambda x, p, t: turn(x, p, t / 2), "the turned pair is"),
    # a doubled angle, and a rotation that uses theta as a wavelength (2 pi / theta)
    (lambda x, p, t: turn(x, p, 2 * t), "the turned pair is"),
    (lambda x, p, t: turn(x, p, 2 * math.pi / t), "the turned pair is"),
]


@pytest.mark.parametrize("wrong,expected", ROTATE_MISTAKES)
def test_rotate_pair_mistakes_get_their_hint(wrong, expected):
    fb = check.rotate_pair(wrong)
    assert fb.status == "hint" and expected in fb.message, fb
    assert "your code raised" not in fb.message, fb  # the checker itself never fails


@pytest.mark.parametrize(
    "odd",
    [
        lambda x, p, t: "a string",
        lambda x, p, t: {"x0": 1.0},
        lambda x, p, t: torch.zeros(3),
        lambda x, p, t: torch.zeros(0),
        lambda x, p, t: torch.tensor([True, False]),
        lambda x, p, t: torch.tensor([1, 2]),
        lambda x, p, t: torch.tensor([float("inf"), 0.0]),
        lambda x, p, t: 3.0,
        lambda x, p, t: [1.0, 2.0, 3.0],
        lambda x, p, t: (u for u in (1.0, 2.0)),
    ],
)
def test_rotate_pair_never_fails_in_its_own_code(odd):
    fb = check.rotate_pair(odd)
    assert fb.status == "hint", fb
    assert "your code raised" not in fb.message, fb


def test_rotate_pair_reports_the_students_own_error():
    def broken(x, position, theta):
        return torch.cos(position * theta)  # torch.cos wants a tensor, not a float

    fb = check.rotate_pair(broken)
    assert fb.status == "hint" and "your code raised TypeError" in fb.message, fb


def test_rotate_pair_right_only_on_the_test_cases_fails():
    from companion.exercises.positional import _ROTATE_CASES

    known = {(p, t) for _, _, p, t in _ROTATE_CASES}

    def memorized(x, p, t):  # right on the graded cases, unrotated elsewhere
        return turn(x, p, t) if (p, t) in known else x.clone()

    fb = check.rotate_pair(memorized)
    assert fb.status == "hint" and "positions 0..7" in fb.message, fb


def test_rotate_pair_stub_not_attempted():
    assert check.rotate_pair(stub).status == "not attempted"
    assert check.rotate_pair(...).status == "not attempted"


def test_integer_division_exponent_is_named_and_no_hint_quotes_matching_values():
    floor = table(50, 16, lambda k, D: (2 * (k // 2)) // D)  # 2j // D is 0: every pair has frequency 1
    small = table(9, 6, lambda k, D: (2 * (k // 2)) // D)
    fb = check.sinusoidal(lambda T, D: floor if T == 50 else small)
    assert fb.status == "hint" and "integer division" in fb.message
    # The generic fallback quotes an entry where the student's table differs, never one where it agrees.
    columns = lambda D: ((torch.arange(D) == 2) | (torch.arange(D) == 3)) * 0.5  # noqa: E731
    shifted = check.sinusoidal(lambda T, D: sinusoidal_encoding(T, D) + columns(D))
    assert shifted.kind == "generic" and "P[0, 2] should be sin(0 / 10000**(2/16)) = 0.0000" in shifted.message
