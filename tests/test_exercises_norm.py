"""The chapter 4 checkers: the right answer passes, each classic mistake gets its own hint."""
import pytest
import torch

from companion.exercises import norm as check


def right_ln(x, weight, bias, eps):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def stub(*args):
    raise NotImplementedError  # your code here


def test_layer_norm_right_and_torch_pass():
    assert check.layer_norm(right_ln).passed
    library = check.layer_norm(lambda x, w, b, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, eps))
    assert library.status == "hint" and "calls the library's layer_norm" in library.message


@pytest.mark.parametrize(
    "wrong,expected",
    [
        (lambda x, w, b, eps: (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps) * w + b, "batch normalization"),
        (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True, unbiased=False) + eps) * w + b, "inside the square root"),
        (lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True) + eps) * w + b, "biased variance"),
        (lambda x, w, b, eps: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * w + b, "whole tensor"),
        (lambda x, w, b, eps: right_ln(x, 1.0, 0.0, eps), "scale `weight` and shift `bias` are missing"),
        (lambda x, w, b, eps: right_ln(x, w, 0.0, eps), "shift `bias` is missing"),
        (lambda x, w, b, eps: right_ln(x, 1.0, 0.0, eps) * 2, "differ from"),
        (lambda x, w, b, eps: x[:2], "input's shape"),
    ],
)
def test_layer_norm_mistakes(wrong, expected):
    fb = check.layer_norm(wrong)
    assert fb.status == "hint" and expected in fb.message, fb


def test_batch_norm():
    def right(x, eps):
        return (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + eps)

    assert check.batch_norm(right).passed
    assert "that is LayerNorm" in check.batch_norm(lambda x, eps: right_ln(x, 1.0, 0.0, eps)).message
    assert "biased variance" in check.batch_norm(lambda x, eps: (x - x.mean(0)) / torch.sqrt(x.var(0) + eps)).message
    assert "inside the square root" in check.batch_norm(
        lambda x, eps: (x - x.mean(0)) / (x.std(0, unbiased=False) + eps)).message


def test_rms_norm():
    def right(x, w, eps):
        return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    assert check.rms_norm(right).passed
    assert check.rms_norm(lambda x, w, eps: torch.nn.functional.rms_norm(x, x.shape[-1:], w, eps)).passed
    assert "does not subtract the mean" in check.rms_norm(lambda x, w, eps: right_ln(x, w, 0.0, eps)).message
    assert "inside the square root" in check.rms_norm(
        lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w).message
    assert "not their sum" in check.rms_norm(lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w).message
    assert "over the batch" in check.rms_norm(lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w).message
    assert "learned scale" in check.rms_norm(lambda x, w, eps: right(x, 1.0, eps)).message


@pytest.mark.parametrize("fn", [check.layer_norm, check.batch_norm, check.rms_norm])
def test_stub_not_attempted_and_errors_become_hints(fn):
    assert fn(stub).status == "not attempted"
    assert fn(...).status == "not attempted"
    fb = fn(lambda *a: 1 / 0)
    assert fb.status == "hint" and "ZeroDivisionError" in fb.message
