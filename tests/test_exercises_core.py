"""The checker machinery (companion.exercises._core): verdicts, blame, wrapping, recording."""
import math

import torch
import torch.nn.functional as F

from companion.exercises import _core
from companion.exercises._core import Feedback, as_count, checker, hint, passed, recording


def test_feedback_wraps_at_78_columns():
    fb = Feedback("Exercise 9.9", "hint", "word " * 60, "generic")
    lines = repr(fb).splitlines()
    assert len(lines) > 2 and max(len(line) for line in lines) <= 78
    assert lines[0].startswith("❌ Exercise 9.9 not yet:") and all(line.startswith("   ") for line in lines[1:])


def test_an_error_of_the_checker_is_an_internal_error_not_the_students():
    @checker("Exercise 9.1")
    def buggy(fn):
        fn(1)
        torch.zeros(2) @ torch.zeros(3)  # our own bug

    fb = buggy(lambda x: x)
    assert fb.status == "internal error" and fb.kind == "internal" and not fb.passed
    assert "tell the instructors" in fb.message and "not in your code" in fb.message
    assert repr(fb).startswith("⚠️ Exercise 9.1 could not be checked:")


def test_an_error_of_the_students_code_is_reported_as_theirs():
    @checker("Exercise 9.2")
    def check(fn):
        fn(1)
        passed()

    fb = check(lambda x: x / 0)
    assert fb.status == "hint" and fb.kind == "raised" and "your code raised ZeroDivisionError" in fb.message


def test_an_error_raised_in_a_callback_the_student_misused_is_theirs():
    @checker("Exercise 9.3")
    def check(fn):
        fn(lambda h: h * 2)  # the checker hands the student a one-argument function
        passed()

    fb = check(lambda f: f(1, 2))  # the student calls it with two
    assert fb.kind == "raised" and "TypeError" in fb.message


def test_not_attempted_and_hint_kinds():
    @checker("Exercise 9.4")
    def check(fn):
        if fn(1) == 3:
            hint("a recognized mistake")
        hint("something differs", generic=True)

    def stub(x):
        raise NotImplementedError

    assert check(stub).status == "not attempted" and check(...).status == "not attempted"
    assert check(lambda x: 3).kind == "specific" and check(lambda x: 4).kind == "generic"


def test_recording_restores_the_library_even_after_an_error():
    originals = (torch.softmax, F.softmax, torch.Tensor.softmax)
    names = {"torch.softmax": (torch, "softmax"), "F.softmax": (F, "softmax"), "Tensor.softmax": (torch.Tensor, "softmax")}
    try:
        with recording(names) as calls:
            torch.ones(3).softmax(0)
            raise RuntimeError("inside")
    except RuntimeError:
        pass
    assert calls == ["Tensor.softmax"]
    assert (torch.softmax, F.softmax, torch.Tensor.softmax) == originals
    assert "softmax" not in vars(torch.Tensor)  # the inherited method is not shadowed afterwards


def test_counts_are_never_truncated():
    @checker("Exercise 9.5")
    def check(fn):
        as_count(fn(), "f()")
        passed()

    assert "not a whole number" in check(lambda: 12.7).message
    assert check(lambda: 12).passed and check(lambda: torch.tensor(12)).passed
    assert "a float" in check(lambda: 12.0).message and "//" in check(lambda: 12.0).message
    assert check(lambda: torch.tensor(12 + 0j)).status == "hint"
    assert "a bool" in check(lambda: True).message and "whole number" in check(lambda: "12").message
    assert "not a whole number" in check(lambda: math.nan).message


def test_first_difference_quotes_a_differing_entry():
    text = _core.first_difference(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([1.0, 2.5, 3.0]))
    assert text == "out[1] is 2, expected 2.5"


def _helper(values, i):
    return values[i]


def _student(a, b):
    total = 0
    for i in range(len(a)):
        total += _helper(a, i) * _helper(b, i)
    return total


def test_a_raised_hint_shows_the_students_own_traceback_first():
    @checker("Exercise 9.6")
    def check(fn):
        fn([1, 2, 3], [1, 2])
        passed()

    fb = check(_student)
    text = repr(fb)
    lines = text.splitlines()
    assert fb.kind == "raised" and fb.message.startswith("your code raised IndexError")
    assert lines[0] == "Traceback of your code (most recent call last):"
    assert any("in _student" in line for line in lines) and any("in _helper" in line for line in lines)
    assert any("return values[i]" in line for line in lines)
    assert not any(" _core.py" in line or " rules.py" in line or "in call" in line for line in lines)
    assert lines[-1].startswith("   ") or lines[-1].startswith("❌")  # the hint comes last
    assert any(line.startswith("❌ Exercise 9.6 not yet: your code raised IndexError") for line in lines)
    assert max(len(line) for line in lines) <= 78


def test_a_traceback_from_a_notebook_cell_says_your_cell():
    source = "def my_fn(x):\n    return x.nonexistent\n"
    namespace = {}
    exec(compile(source, "/tmp/ipykernel_123/4567.py", "exec"), namespace)

    @checker("Exercise 9.7")
    def check(fn):
        fn(1)

    text = repr(check(namespace["my_fn"]))
    assert "your cell, line 2, in my_fn" in text and "(line 2 of your cell)" in text


# --- one acceptance policy (issue 33): "not attempted" and junk -------------------------------------

def _three_calls():
    @checker("Exercise 9.7")
    def check(fn):
        for n in (1, 2, 3):
            if fn(n) != 2 * n:
                hint(f"fn({n}) is wrong", generic=True)
        passed()
    return check


def test_a_stub_that_only_raises_is_not_attempted():
    def my_double(n):
        """Double n."""
        # your code here
        raise NotImplementedError("write this")

    assert _three_calls()(my_double).status == "not attempted"


def test_a_raise_in_one_branch_is_that_branch_with_its_input():
    def my_double(n):
        if n == 3:
            raise NotImplementedError
        return 2 * n

    fb = _three_calls()(my_double)
    assert fb.status == "hint" and "NotImplementedError" in fb.message and "my_double(3)" in fb.message


def test_a_raise_on_the_first_call_of_a_function_that_can_return_is_a_branch():
    def my_double(n):
        if n > 0 and n < 2:
            raise NotImplementedError("small numbers later")
        return 2 * n

    fb = _three_calls()(my_double)
    assert fb.status == "hint" and "my_double(1)" in fb.message


def test_a_stub_left_in_a_helper_is_not_attempted():
    def my_double(n):
        return helper(n)

    def helper(n):
        raise NotImplementedError

    # the answer's own source can return: the raise comes from a helper the checker cannot read
    fb = _three_calls()(my_double)
    assert fb.status in ("hint", "not attempted")  # never an internal error
    assert "could not be checked" not in repr(fb)


def test_a_helper_that_raises_under_written_code_is_a_branch_not_a_stub():
    # o1's junk_not_implemented_deep: the answer does work and can return; its helper only raises
    def _helper(*args):
        raise NotImplementedError("this case is not handled yet")

    def my_double(n):
        total = 1 + 1
        return _helper(n) + total

    fb = _three_calls()(my_double)
    assert fb.status == "hint" and "NotImplementedError" in fb.message and "not written yet" in fb.message


def test_a_checker_restores_the_grad_mode_an_answer_left_off():
    def my_double(n):
        torch.set_grad_enabled(False)
        return 2 * n

    assert torch.is_grad_enabled()
    fb = _three_calls()(my_double)
    assert torch.is_grad_enabled(), "the next check in the kernel would run without gradients"
    assert fb.status == "passed"  # this toy checker does not look at the grad mode; real ones hint


class _Liar:
    """Compares equal to everything."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False


class _Exploding:
    def __eq__(self, other):
        raise RuntimeError("boom")

    __ne__ = __eq__

    def __float__(self):
        raise RuntimeError("boom")


def test_an_object_that_fakes_equality_never_passes():
    fb = _three_calls()(lambda n: _Liar())
    assert fb.status == "hint" and "_Liar" in fb.message


def test_junk_that_breaks_the_checker_is_a_wrong_type_hint_not_an_internal_error():
    fb = _three_calls()(lambda n: _Exploding())
    assert fb.status == "hint" and "_Exploding" in fb.message
    meta = _three_calls()(lambda n: torch.empty(3, device="meta"))
    assert meta.status == "hint" and "meta" in meta.message
    nested = _three_calls()(lambda n: [torch.zeros(2).to_sparse()])
    assert nested.status == "hint" and "sparse" in nested.message


def test_ordinary_values_are_not_junk():
    for value in (1, 2.5, np_float(), torch.zeros(2), [torch.ones(1), 3], {"k": torch.zeros(1)}, "text", None,
                  torch.nn.Linear(2, 2), torch.nn.Parameter(torch.zeros(1)), (x for x in ())):
        assert _core._junk(value) is None, value


def np_float():
    import numpy as np
    return np.float32(1.5)


def test_our_own_bug_after_ordinary_returns_is_still_internal():
    @checker("Exercise 9.8")
    def buggy(fn):
        fn(1)
        raise KeyError("our bug")

    assert buggy(lambda n: 2 * n).status == "internal error"
