"""Junk answers never crash a checker and never pass: every checker, fuzzed with hypothesis.

The student's function returns junk (None, strings, huge ints, NaN, complex numbers, empty and
odd-dtype tensors, NumPy arrays, nested lists, tuples and dicts of those, an object whose every
method raises) or raises an exception of its own; the checker must answer with a hint (or "not
attempted"), never with a pass, an internal error, or an exception.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mutation_harness as harness

CHECKERS = sorted(harness.all_checkers().items(), key=lambda kv: [(0, int(p)) if p.isdigit() else (1, 0) if p == "A" else (2, p) for p in kv[0].split()[1].split(".")])
#: Checkers that set up a model or a million positions before the student's code runs: fewer examples.
SLOW = {"Exercise 7.4", "Exercise 7.5", "Exercise 10.1", "Exercise 8.1", "Exercise 9.9"}


class Hostile:
    """An object whose every protocol raises: a checker must not trip over it."""

    def _boom(self, *args, **kwargs):
        raise RuntimeError("hostile object")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _boom
    __len__ = __iter__ = __getitem__ = __float__ = __int__ = __index__ = __bool__ = _boom
    __repr__ = __str__ = __format__ = _boom
    __hash__ = None


def _tensor(shape, dtype, fill):
    try:
        if dtype.is_complex:
            return torch.full(shape, complex(fill, -fill), dtype=dtype)
        if dtype == torch.bool:
            return torch.full(shape, bool(fill), dtype=dtype)
        return torch.full(shape, fill, dtype=torch.float64).to(dtype)
    except (RuntimeError, OverflowError, ValueError):
        return torch.zeros(shape, dtype=dtype)


_SPECIAL = [  # built on demand: hypothesis prints its strategies, and some of these cannot be printed
    lambda: 10**400, lambda: -10**400, lambda: 10**5000, lambda: 2**63, lambda: -(2**63) - 1, lambda: float("nan"),
    lambda: float("inf"), lambda: -float("inf"), lambda: 1 + 2j, lambda: True, lambda: False, lambda: b"bytes",
    lambda: "", lambda: "1.5", lambda: Ellipsis, lambda: NotImplemented, object, Hostile, list, tuple, dict, set,
    lambda: np.float64("nan"), lambda: np.int64(7), lambda: np.array([]), lambda: np.zeros((2, 2), dtype=complex),
    lambda: torch.tensor(float("nan")), lambda: torch.empty(0), lambda: torch.zeros(0, 3), lambda: torch.tensor(1 + 1j),
    lambda: torch.empty(2, 0, 3), lambda: torch.zeros(2, 3, device="meta"), lambda: (x for x in range(3)),
    lambda: range(5), lambda: math.pi,
]
SPECIAL = st.integers(0, len(_SPECIAL) - 1).map(lambda i: _SPECIAL[i]())
TENSORS = st.builds(
    _tensor,
    st.lists(st.integers(0, 4), max_size=3).map(tuple),
    st.sampled_from([torch.float32, torch.float64, torch.int64, torch.int32, torch.uint8, torch.bool,
                     torch.complex64, torch.float16]),
    st.floats(allow_nan=True, allow_infinity=True, width=32),
)
LEAVES = st.one_of(
    st.none(), st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.complex_numbers(),
    st.text(max_size=4), SPECIAL, TENSORS,
)
JUNK = st.recursive(
    LEAVES,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.tuples(inner, inner), st.tuples(inner, inner, inner),
                            st.dictionaries(st.sampled_from(["k", "v", 0]), inner, max_size=2)),
    max_leaves=6,
)
ERRORS = st.sampled_from([ValueError("junk"), TypeError("junk"), RuntimeError("junk"), KeyError("junk"),
                          ZeroDivisionError("junk"), IndexError("junk"), AttributeError("junk"),
                          RecursionError("junk"), MemoryError(), AssertionError("junk"), OverflowError("junk")])


def _judge(name, fb):
    assert fb.status in ("hint", "not attempted"), f"{name}: {fb.status}: {fb.message}"
    assert not fb.passed, f"{name} passed junk: {fb}"
    assert all(len(line) <= 78 for line in repr(fb).splitlines()), repr(fb)


def _settings(name):
    return settings(max_examples=4 if name in SLOW else 12, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


@pytest.mark.parametrize("name,checker", CHECKERS, ids=[n for n, _ in CHECKERS])
def test_junk_returns_never_crash_or_pass(name, checker):
    @_settings(name)
    @given(JUNK)
    def run(value):
        _judge(name, checker(lambda *args, **kwargs: value))

    run()


@pytest.mark.parametrize("name,checker", CHECKERS, ids=[n for n, _ in CHECKERS])
def test_student_exceptions_are_reported_as_theirs(name, checker):
    @_settings(name)
    @given(ERRORS)
    def run(error):
        def raising(*args, **kwargs):
            raise error

        fb = checker(raising)
        _judge(name, fb)
        assert fb.kind == "raised" and type(error).__name__ in fb.message, fb

    run()


@pytest.mark.parametrize("name,checker", CHECKERS, ids=[n for n, _ in CHECKERS])
def test_values_instead_of_functions(name, checker):
    for value in (3.5, "my_function", 10**400, torch.ones(2), [1, 2]):
        fb = checker(value)
        _judge(name, fb)
        assert "pass your function itself" in fb.message, fb
