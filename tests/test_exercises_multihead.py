"""The chapter 3 checkers: the right answer passes, each recognized mistake gets its hint."""
import math

import torch

from companion.exercises import multihead as check


def stub(*args):
    raise NotImplementedError


def test_parameter_count():
    right = lambda d, h, bias: 4 * d * d + (4 * d if bias else 0)
    assert check.parameter_count(right).passed
    assert check.parameter_count(stub).status == "not attempted"
    assert "output projection" in check.parameter_count(lambda d, h, bias: 3 * d * d + (3 * d if bias else 0)).message
    assert "does not depend on h" in check.parameter_count(lambda d, h, bias: h * right(d, h, bias)).message
    assert "biases" in check.parameter_count(lambda d, h, bias: 4 * d * d).message
    assert "no biases" in check.parameter_count(lambda d, h, bias: 4 * d * d + 4 * d).message
    assert "whole number" in check.parameter_count(lambda d, h, bias: "many").message


def test_split_heads():
    right = lambda x, h: x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2)
    assert check.split_heads(right).passed
    assert check.split_heads(stub).status == "not attempted"
    assert "transpose dims 1 and 2" in check.split_heads(lambda x, h: x.view(x.shape[0], x.shape[1], h, -1)).message
    straight = lambda x, h: x.reshape(x.shape[0], h, x.shape[1], -1)
    assert "mixes tokens" in check.split_heads(straight).message
    slow = lambda x, h: x.view(x.shape[0], x.shape[1], -1, h).permute(0, 3, 1, 2)
    assert "slower one" in check.split_heads(slow).message


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


def test_split_heads_fallback_never_claims_a_shape_mismatch_for_the_right_shape():
    fb = check.split_heads(lambda x, h: x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2).flip(1))
    assert fb.status == "hint" and "values are not in place" in fb.message
    assert "expected shape" not in fb.message
