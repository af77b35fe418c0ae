"""The chapter 13 checkers: right answers written several ways pass; every wrong answer below gets a
hint (the specific one where the checker names the mistake), never a pass; junk returns never crash."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from companion.exercises import modern as check


def stub(*args):
    raise NotImplementedError  # your code here


# ------------------------------------------------------------------------------ 13.1 RMSNorm per head
def rms_right(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rms_rsqrt(x, w, eps):
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) / x.shape[-1] + eps) * w


RMS_WRONG = {
    "does not subtract the mean": lambda x, w, eps: (x - x.mean(-1, keepdim=True))
    / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * w,
    "inside the square root": lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w,
    "not their sum": lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w,
    "over the heads": lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(1, keepdim=True) + eps) * w,
    "over the positions": lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(2, keepdim=True) + eps) * w,
    "all heads together": lambda x, w, eps: x / torch.sqrt(x.pow(2).mean((1, 3), keepdim=True) + eps) * w,
    "whole tensor": lambda x, w, eps: x / torch.sqrt(x.pow(2).mean() + eps) * w,
    "learned scale": lambda x, w, eps: rms_right(x, 1.0, eps),
    "not by the mean square itself": lambda x, w, eps: x / (x.pow(2).mean(-1, keepdim=True) + eps) * w,
    "not the square of the mean": lambda x, w, eps: x / torch.sqrt(x.mean(-1, keepdim=True) ** 2 + eps) * w,
    "you multiplied": lambda x, w, eps: x * torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w,
    "`eps` is missing": lambda x, w, eps: rms_right(x, w, 0.0),
    "keep the input's dtype": lambda x, w, eps: rms_right(x.double(), w.double(), eps),
    "in place": lambda x, w, eps: x.mul_(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).mul_(w),
    "calls torch.nn.functional.rms_norm": lambda x, w, eps: F.rms_norm(x, x.shape[-1:], w, eps),
    "differ from": lambda x, w, eps: rms_right(x, w, eps) * 1.01,
}


def test_rms_norm_right_answers_pass():
    assert check.rms_norm_heads(rms_right).passed
    assert check.rms_norm_heads(rms_rsqrt).passed


@pytest.mark.parametrize("expected", list(RMS_WRONG))
def test_rms_norm_mistakes(expected):
    fb = check.rms_norm_heads(RMS_WRONG[expected])
    assert fb.status == "hint" and expected in fb.message, fb


def test_rms_norm_library_is_seen_whatever_the_import():
    from torch.nn.functional import rms_norm as rn  # an alias: patching the module would miss it

    from companion.norm import RMSNorm

    fb = check.rms_norm_heads(lambda x, w, eps: rn(x, (x.shape[-1],), w, eps))
    assert fb.status == "hint" and "rms_norm" in fb.message, fb

    def with_module(x, w, eps):
        m = RMSNorm(x.shape[-1], eps=eps).to(x.dtype)
        with torch.no_grad():
            m.weight.copy_(w)
        return m(x).detach()

    fb = check.rms_norm_heads(with_module)
    assert fb.status == "hint" and "companion.norm" in fb.message, fb


# ------------------------------------------------------------------------------ 13.2 SwiGLU
def swiglu_right(x, wg, wu, wd):
    return (F.silu(x @ wg) * (x @ wu)) @ wd


def swiglu_by_hand(x, wg, wu, wd):
    a = x @ wg
    return ((a * torch.sigmoid(a)) * torch.einsum("btd,df->btf", x, wu)) @ wd


SWIGLU_WRONG = {
    "you applied it to x @ w_up": lambda x, wg, wu, wd: ((x @ wg) * F.silu(x @ wu)) @ wd,
    "not the sigmoid alone": lambda x, wg, wu, wd: (torch.sigmoid(x @ wg) * (x @ wu)) @ wd,
    "GEGLU": lambda x, wg, wu, wd: (F.gelu(x @ wg) * (x @ wu)) @ wd,
    "ReGLU": lambda x, wg, wu, wd: (F.relu(x @ wg) * (x @ wu)) @ wd,
    "apply SiLU to the gate alone": lambda x, wg, wu, wd: F.silu((x @ wg) * (x @ wu)) @ wd,
    "not added": lambda x, wg, wu, wd: (F.silu(x @ wg) + (x @ wu)) @ wd,
    "up branch is missing": lambda x, wg, wu, wd: F.silu(x @ wg) @ wd,
    "the gate is missing": lambda x, wg, wu, wd: (x @ wu) @ wd,
    "up branch stays linear": lambda x, wg, wu, wd: (F.silu(x @ wg) * F.silu(x @ wu)) @ wd,
    "no activation after w_down": lambda x, wg, wu, wd: F.silu(swiglu_right(x, wg, wu, wd)),
    "shape": lambda x, wg, wu, wd: F.silu(x @ wg) * (x @ wu),  # w_down forgotten: width d_ff
    "keep the input's dtype": lambda x, wg, wu, wd: swiglu_right(x.double(), wg.double(), wu.double(), wd.double()),
    "in place": lambda x, wg, wu, wd: (F.silu(x @ wg) * (x.mul_(1.0).add_(0.0) @ wu)) @ wd if x.add_(1) is not None else 0,
    "differ from": lambda x, wg, wu, wd: swiglu_right(x, wg, wu, wd) + 0.1,
}


def test_swiglu_right_answers_pass():
    assert check.swiglu(swiglu_right).passed
    assert check.swiglu(swiglu_by_hand).passed


@pytest.mark.parametrize("expected", list(SWIGLU_WRONG))
def test_swiglu_mistakes(expected):
    fb = check.swiglu(SWIGLU_WRONG[expected])
    assert fb.status == "hint" and expected in fb.message, fb


# ------------------------------------------------------------------------------ 13.3 rotation at an offset
def rotate_right(x, offset, base=10000.0):
    *_, T, d = x.shape
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = (pos[:, None] * base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).to(x.dtype)  # (T, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


def rotate_complex(x, offset):
    """The same rotation with complex numbers (the view Meta's Llama code takes), real in and out."""
    *_, T, d = x.shape
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = pos[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.complex(x[..., : d // 2].double(), x[..., d // 2:].double()) * torch.polar(torch.ones_like(ang), ang)
    return torch.cat([z.real, z.imag], -1).to(x.dtype)


def rotate_float64_angles(x, offset):  # a table left in float64: float32 in, float64 out
    *_, T, d = x.shape
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = pos[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


def _interleaved(x, offset):
    *_, T, d = x.shape
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = (pos[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).to(x.dtype)
    out = torch.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * ang.cos() - x[..., 1::2] * ang.sin()
    out[..., 1::2] = x[..., 0::2] * ang.sin() + x[..., 1::2] * ang.cos()
    return out


def _wrong_frequencies(x, offset):
    *_, T, d = x.shape
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = (pos[:, None] * 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d)).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


def _same_angle(x, offset):
    d = x.shape[-1]
    ang = (offset * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


def _rotate_in_place(x, offset):
    x.copy_(rotate_right(x, offset))
    return x


ROTATE_WRONG = {
    "offset is missing": lambda x, offset: rotate_right(x, 0),
    "not subtracted": lambda x, offset: rotate_right(x, -offset),
    "interleaved pairs": _interleaved,
    "wrong way": lambda x, offset: rotate_right(x.flip(-1), offset).flip(-1) if False else _reverse(x, offset),
    "-j / d_head": _wrong_frequencies,
    "positions start at 0": lambda x, offset: rotate_right(x, offset + 1),
    "same angle": _same_angle,
    "keep the input's dtype": rotate_float64_angles,
    "in place": _rotate_in_place,
    "base": lambda x, offset: rotate_right(x, offset, base=500.0),
}


def _reverse(x, offset):
    *_, T, d = x.shape
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = (-pos[:, None] * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)).to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)


def test_rotate_right_answers_pass():
    assert check.rotate_at_offset(rotate_right).passed
    assert check.rotate_at_offset(rotate_complex).passed


@pytest.mark.parametrize("expected", list(ROTATE_WRONG))
def test_rotate_mistakes(expected):
    fb = check.rotate_at_offset(ROTATE_WRONG[expected])
    assert fb.status == "hint", fb
    if expected != "base":  # a wrong base is caught by the generic description
        assert expected in fb.message, fb


def test_rotate_companion_is_seen_whatever_the_import():
    from companion.modern import rotate as turn

    fb = check.rotate_at_offset(lambda x, offset: turn(x, offset=offset))
    assert fb.status == "hint" and "companion.modern" in fb.message, fb


# ------------------------------------------------------------------------------ 13.4 repeating shared heads
def repeat_right(k, groups):
    B, h_kv, S, d = k.shape
    return k[:, :, None].expand(B, h_kv, groups, S, d).reshape(B, h_kv * groups, S, d)


REPEAT_WRONG = {
    "You tiled the heads": lambda k, groups: k.repeat(1, groups, 1, 1),
    "still has": lambda k, groups: k,
    "not n_heads times": lambda k, groups: k.repeat_interleave(k.shape[1] * groups, dim=1),
    "shape": lambda k, groups: k.repeat_interleave(groups, dim=2),
    "i // groups": lambda k, groups: k.repeat_interleave(groups, dim=1).flip(1),
    "keep the input's dtype": lambda k, groups: k.repeat_interleave(groups, dim=1).double(),
    "in place": lambda k, groups: k.mul_(1.0).add_(1.0).repeat_interleave(groups, dim=1) - 1,
    "companion.modern": lambda k, groups: __import__("companion.modern", fromlist=["x"]).repeat_kv(k, groups),
    "return a tensor": lambda k, groups: [k] * groups,
}


def test_repeat_right_answers_pass():
    assert check.repeat_heads(repeat_right).passed
    assert check.repeat_heads(lambda k, g: k.repeat_interleave(g, dim=1)).passed
    assert check.repeat_heads(lambda k, g: torch.cat([k[:, i:i + 1] for i in range(k.shape[1]) for _ in range(g)], 1)).passed


@pytest.mark.parametrize("expected", list(REPEAT_WRONG))
def test_repeat_mistakes(expected):
    fb = check.repeat_heads(REPEAT_WRONG[expected])
    assert fb.status == "hint" and expected in fb.message, fb


# ------------------------------------------------------------------------------ every checker
CHECKERS = [check.rms_norm_heads, check.swiglu, check.rotate_at_offset, check.repeat_heads]
JUNK = {
    "None": None, "a string": "tensor", "a huge int": 10**400, "a float": 1.5, "a complex number": 1 + 2j,
    "NaN": float("nan"), "an empty tensor": torch.empty(0), "a complex tensor": torch.ones(2, 3, 4, 4, dtype=torch.cfloat),
    "a list": [1, 2, 3], "a NumPy array": np.ones((2, 3, 5, 8)), "a bool tensor": torch.ones(2, 3, 5, 8, dtype=torch.bool),
    "a tuple": (torch.ones(2), torch.ones(2)), "an int tensor": torch.ones(2, 3, 5, 8, dtype=torch.long),
}


@pytest.mark.parametrize("fn", CHECKERS)
@pytest.mark.parametrize("junk", list(JUNK))
def test_junk_returns_get_a_hint_never_a_pass_or_a_crash(fn, junk):
    value = JUNK[junk]
    fb = fn(lambda *args: value)
    assert fb.status == "hint", fb


@pytest.mark.parametrize("fn", CHECKERS)
def test_same_shape_junk_values(fn):
    """Returns of the right shape and dtype but wrong values: zeros, NaN, infinities, the input."""
    def like_first(make):
        def answer(x, *rest):
            shape = {check.swiglu: x.shape, check.repeat_heads: (x.shape[0], x.shape[1] * rest[0], *x.shape[2:])}.get(
                fn, x.shape)
            return make(shape, x.dtype)
        return answer

    for make in (torch.zeros, lambda s, dt: torch.full(s, float("nan"), dtype=dt),
                 lambda s, dt: torch.full(s, float("inf"), dtype=dt), lambda s, dt: torch.full(s, 1e300, dtype=dt)):
        fb = fn(like_first(make))
        assert fb.status == "hint", fb
    if fn in (check.rotate_at_offset,):
        assert fn(lambda x, offset: x.clone()).status == "hint"


@pytest.mark.parametrize("fn", CHECKERS)
def test_stub_not_attempted_and_errors_become_hints(fn):
    assert fn(stub).status == "not attempted"
    assert fn(...).status == "not attempted"
    fb = fn(lambda *a: 1 / 0)
    assert fb.status == "hint" and "ZeroDivisionError" in fb.message
    assert fn("not a function").status == "hint"


def test_the_profiler_is_restored():
    import sys

    before = sys.getprofile()
    check.rotate_at_offset(lambda x, offset: 1 / 0)
    check.repeat_heads(repeat_right)
    assert sys.getprofile() is before
