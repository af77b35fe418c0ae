"""The chapter 6 checkers: the right answer passes, each classic mistake gets its own hint."""
import pytest
import torch

from companion.block import block_parameters
from companion.exercises import block as check


def stub(*args):
    raise NotImplementedError  # your code here


def ff_right(x, W1, b1, W2, b2):
    return torch.relu(x @ W1 + b1) @ W2 + b2


@pytest.mark.parametrize(
    "wrong,expected",
    [
        (lambda x, W1, b1, W2, b2: (x @ W1 + b1) @ W2 + b2, "ReLU between the two layers is missing"),
        (lambda x, W1, b1, W2, b2: torch.relu(ff_right(x, W1, b1, W2, b2)), "no activation after the second"),
        (lambda x, W1, b1, W2, b2: torch.relu(x @ W1) @ W2, "biases b1 and b2 are missing"),
        (lambda x, W1, b1, W2, b2: torch.relu(x @ W1) @ W2 + b2, "one of the two biases"),
        (lambda x, W1, b1, W2, b2: x + ff_right(x, W1, b1, W2, b2), "added by the block"),
        (lambda x, W1, b1, W2, b2: torch.relu(x @ W1 + b1), "hidden layer"),
        (lambda x, W1, b1, W2, b2: torch.tanh(x @ W1 + b1) @ W2 + b2, "not tanh"),
    ],
)
def test_feed_forward(wrong, expected):
    assert check.feed_forward(ff_right).passed
    fb = check.feed_forward(wrong)
    assert fb.status == "hint" and expected in fb.message, fb


def pre_norm(x, attn, ff, norm1, norm2):
    h = x + attn(norm1(x))
    return h + ff(norm2(h))


def post_norm(x, attn, ff, norm1, norm2):
    h = norm1(x + attn(x))
    return norm2(h + ff(h))


@pytest.mark.parametrize(
    "wrong,expected",
    [
        (post_norm, "post-norm block"),
        (lambda x, a, f, n1, n2: f(n2(a(n1(x)))), "residual connection is missing"),
        (lambda x, a, f, n1, n2: (lambda h: h + f(n2(a(n1(x)))))(x + a(n1(x))), "residual connection is missing"),
        (lambda x, a, f, n1, n2: x + a(n1(x)) + f(n2(x)), "works on the output of the attention step"),
        (lambda x, a, f, n1, n2: (lambda hn: hn + f(n2(hn)))(n1(x) + a(n1(x))), "un-normalized input"),
        (lambda x, a, f, n1, n2: pre_norm(x, a, f, n1, n1), "norm2 (its own scale"),
        (lambda x, a, f, n1, n2: x, "h = x + attn(norm1(x))"),
    ],
)
def test_pre_norm_block(wrong, expected):
    assert check.pre_norm_block(pre_norm).passed
    fb = check.pre_norm_block(wrong)
    assert fb.status == "hint" and expected in fb.message, fb


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


@pytest.mark.parametrize("fn", [check.feed_forward, check.pre_norm_block, check.block_params])
def test_stub_not_attempted(fn):
    assert fn(stub).status == "not attempted"
    assert fn(...).status == "not attempted"


def test_block_params_rejects_a_fractional_count():
    right = lambda d, h, f: 4 * d * d + 4 * d + 2 * d * f + f + d + 4 * d  # noqa: E731
    assert "a float" in check.block_params(lambda d, h, f: float(right(d, h, f))).message  # a count is an int
    fb = check.block_params(lambda d, h, f: right(d, h, f) + 0.7)  # int() would have truncated it to right
    assert fb.status == "hint" and "not a whole number" in fb.message
