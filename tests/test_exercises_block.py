"""The chapter 6 checkers: the right answer passes, each classic mistake gets its own hint."""
import pytest
import torch

from companion.block import block_parameters
from companion.exercises import block as check


def stub(*args):
    raise NotImplementedError  # your code here


def test_block_forward_and_crossover_book_answers_pass():
    from test_checker_mutations_ch06 import my_block_forward, my_crossover

    for _ in range(2):  # fresh draws each time
        assert check.block_forward(my_block_forward).passed
    assert check.crossover(my_crossover).passed


def test_block_forward_names_the_class_and_the_unwritten_branch():
    from companion.exercises.block import _block_ref

    fb = check.block_forward(lambda block, x: _block_ref(block, x, activation="relu"))
    assert fb.status == "hint" and "on a GELU block" in fb.message

    def half_done(block, x):
        if x.shape[1] == 1:
            raise NotImplementedError
        return _block_ref(block, x)

    fb = check.block_forward(half_done)
    assert fb.status == "hint" and "one position (T = 1)" in fb.message


def count(d, h, d_ff):
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d + 4 * d


@pytest.mark.parametrize(
    "wrong,expected",
    [
        (lambda d, h, d_ff: count(d, h, 4 * d), "use the d_ff you are given"),
        (lambda d, h, d_ff: count(d, h, d), "hidden layer of the feed-forward network has d_ff units"),
        (lambda d, h, d_ff: count(d, h, d_ff) - 4 * d, "4 d_model parameters are missing"),
        (lambda d, h, d_ff: 4 * d * d + 2 * d * d_ff + 4 * d, "biases are missing"),
        (lambda d, h, d_ff: 4 * d * d + 2 * d * d_ff, "both the biases and the LayerNorm"),
        (lambda d, h, d_ff: count(d, h, d_ff) - d * d - d, "output projection W_O"),
        (lambda d, h, d_ff: count(d, h, d_ff) + (h - 1) * (4 * d * d + 4 * d), "the heads share the projections"),
        (lambda d, h, d_ff: count(d, h, d_ff) - 3 * d * d + 3 * d * (d // h), "each head's W_Q is d_model x d_head"),
        (lambda d, h, d_ff: 12 * d * d, "the count is not"),  # 12 d^2 ignores d_ff: no one mistake explains it
        (lambda d, h, d_ff: 7, "whatever the arguments"),
        (lambda d, h, d_ff: "many", "whole number"),
    ],
)
def test_block_params(wrong, expected):
    assert check.block_params(count).passed
    # the companion agrees (its values are right), but using it is not doing the exercise
    assert "the values are right, but your code uses companion.block" in check.block_params(
        lambda d, h, d_ff: block_parameters(d, d_ff)).message
    fb = check.block_params(wrong)
    assert fb.status == "hint" and expected in fb.message, fb


@pytest.mark.parametrize("fn", [check.block_forward, check.crossover, check.block_params])
def test_stub_not_attempted(fn):
    assert fn(stub).status == "not attempted"
    assert fn(...).status == "not attempted"


def test_block_params_rejects_a_fractional_count():
    right = lambda d, h, f: 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d  # noqa: E731
    assert "a float" in check.block_params(lambda d, h, f: float(right(d, h, f))).message  # a count is an int
    fb = check.block_params(lambda d, h, f: right(d, h, f) + 0.7)  # int() would have truncated it to right
    assert fb.status == "hint" and "not a whole number" in fb.message
