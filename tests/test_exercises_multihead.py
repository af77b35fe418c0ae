"""The chapter 3 checkers: the right answer passes, each recognized mistake gets its hint."""
import math

import torch

from companion.exercises import multihead as check


def stub(*args):
    raise NotImplementedError


def _count(d, h, dh, bias):
    """Counted by building the four linear layers (an independent reference for the formula)."""
    layers = [torch.nn.Linear(d, h * dh, bias=bias) for _ in range(3)] + [torch.nn.Linear(h * dh, d, bias=bias)]
    return sum(p.numel() for layer in layers for p in layer.parameters())


def test_parameter_count():
    right = lambda d, h, dh, bias: _count(d, h, dh, bias)
    assert check.parameter_count(right).passed
    assert check.parameter_count(stub).status == "not attempted"
    usual = check.parameter_count(lambda d, h, dh, bias: 4 * d * d + (4 * d if bias else 0))
    assert "width d_model // n_heads" in usual.message and "Gemma" in usual.message
    no_out = lambda d, h, dh, bias: 3 * d * h * dh + (3 * h * dh if bias else 0)
    assert "forgot the output projection" in check.parameter_count(no_out).message
    assert "whole number" in check.parameter_count(lambda d, h, dh, bias: "many").message


def test_the_count_matches_built_layers_on_every_case():
    from companion.exercises.multihead import _COUNT_CASES, _count as formula
    for _, d, h, dh, bias in _COUNT_CASES[:3] + _COUNT_CASES[5:]:  # the Gemma-sized ones allocate 50M floats
        assert formula(d, h, dh, bias) == _count(d, h, dh, bias)
    assert formula(3072, 16, 256, False) == 4 * 3072 * 4096  # Gemma 7B's attention, no biases


def test_split_qkv():
    def right(qkv, h):  # by slicing, not by a view: an independent reference
        B, T, three_d = qkv.shape
        d = three_d // 3
        dh = d // h
        return tuple(torch.stack([qkv[..., p * d + r * dh: p * d + (r + 1) * dh] for r in range(h)], dim=1)
                     for p in range(3))

    assert check.split_qkv(right).passed
    assert check.split_qkv(stub).status == "not attempted"
    per_head = lambda qkv, h: tuple(qkv.view(*qkv.shape[:2], h, 3, -1).permute(3, 0, 2, 1, 4))
    assert "head by head" in check.split_qkv(per_head).message
    no_transpose = lambda qkv, h: tuple(qkv.view(*qkv.shape[:2], 3, h, -1).permute(2, 0, 1, 3, 4))
    assert "heads before tokens" in check.split_qkv(no_transpose).message
    shuffled = lambda qkv, h: (lambda q, k, v: (q, v, k))(*right(qkv, h))
    fb = check.split_qkv(shuffled)
    assert fb.status == "hint" and "fails on the example's shape" in fb.message


def make(scale="head", out_proj=True, dim=-1, transpose_back=True, heads=True):
    def mha(x, W_q, W_k, W_v, W_o, n_heads):
        B, T, d = x.shape
        h = n_heads if heads else 1
        d_head = d // h
        q, k, v = ((x @ W).view(B, T, h, d_head).transpose(1, 2) for W in (W_q, W_k, W_v))
        s = {"head": math.sqrt(d_head), "model": math.sqrt(d), "none": 1.0}[scale]
        out = torch.softmax(q @ k.transpose(-2, -1) / s, dim=dim) @ v
        out = (out.transpose(1, 2) if transpose_back else out).reshape(B, T, d)
        return out @ W_o if out_proj else out

    return mha


def test_multi_head():
    assert check.multi_head(make()).passed
    assert check.multi_head(stub).status == "not attempted"
    assert "sqrt(d_model)" in check.multi_head(make(scale="model")).message
    assert "forgot the output projection" in check.multi_head(make(out_proj=False)).message
    assert "two things" in check.multi_head(make(scale="model", out_proj=False)).message
    assert "wrong axis" in check.multi_head(make(dim=-2)).message
    assert "one full-width head" in check.multi_head(make(heads=False)).message
    assert "forgot the scale" in check.multi_head(make(scale="none")).message
    assert "transpose (B, h, T, d_head) back" in check.multi_head(make(transpose_back=False)).message
    right = make()
    transposed = lambda x, W_q, W_k, W_v, W_o, h: right(x, W_q.T, W_k.T, W_v.T, W_o.T, h)
    assert "transposed matrices" in check.multi_head(transposed).message
