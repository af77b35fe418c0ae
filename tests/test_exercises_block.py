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


def _built(d, d_ff, cross, bias):
    """Counted on layers built with torch.nn (an independent reference for the formula)."""
    layers = [torch.nn.Linear(d, d, bias=bias) for _ in range(8 if cross else 4)]
    layers += [torch.nn.LayerNorm(d, bias=bias) for _ in range(3 if cross else 2)]
    layers += [torch.nn.Linear(d, d_ff, bias=bias), torch.nn.Linear(d_ff, d, bias=bias)]
    return sum(p.numel() for layer in layers for p in layer.parameters())


def test_the_reference_count_equals_the_built_blocks():
    from companion.block import DecoderBlock, TransformerBlock
    from companion.exercises.block import _BLOCK_CASES, _right_count
    for _, d, d_ff, cross, bias in _BLOCK_CASES:
        block = DecoderBlock(d, 1, d_ff, bias=bias) if cross else TransformerBlock(d, 1, d_ff, bias=bias)
        assert _right_count(d, d_ff, cross, bias) == _built(d, d_ff, cross, bias) == sum(
            p.numel() for p in block.parameters())


@pytest.mark.parametrize(
    "wrong,expected",
    [
        (lambda d, f, c, b: _built(d, 4 * d, c, b), "use the d_ff you are given"),
        (lambda d, f, c, b: _built(d, f, False, b), "second attention sublayer"),
        (lambda d, f, c, b: _built(d, f, c, True), "no biases to count"),
        (lambda d, f, c, b: _built(d, f, c, b) + (0 if b else (3 if c else 2) * d), "no shift either"),
        (lambda d, f, c, b: 12 * d * d + 13 * d, "not the number of parameters"),
        (lambda d, f, c, b: 7, "whatever the arguments"),
        (lambda d, f, c, b: "many", "whole number"),
    ],
)
def test_block_params(wrong, expected):
    assert check.block_params(_built).passed  # building is allowed: the check watches the count
    # the companion agrees (its values are right), but using it is not doing the exercise
    assert "the values are right, but your code uses companion.block" in check.block_params(
        lambda d, f, c, b: block_parameters(d, f, bias=b, cross_attention=c)).message
    fb = check.block_params(wrong)
    assert fb.status == "hint" and expected in fb.message, fb


@pytest.mark.parametrize("fn", [check.block_forward, check.crossover, check.block_params])
def test_stub_not_attempted(fn):
    assert fn(stub).status == "not attempted"
    assert fn(...).status == "not attempted"


def test_block_params_rejects_a_fractional_count():
    right = lambda d, f, c, b: _built(d, f, c, b)  # noqa: E731
    assert "a float" in check.block_params(lambda d, f, c, b: float(right(d, f, c, b))).message  # a count is an int
    fb = check.block_params(lambda d, f, c, b: right(d, f, c, b) + 0.7)  # int() would have truncated it to right
    assert fb.status == "hint" and "not a whole number" in fb.message
