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
    "keep the inputs' dtype": lambda x, w, eps: rms_right(x.double(), w.double(), eps),
    "in place": lambda x, w, eps: x.mul_(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).mul_(w),
    "calls torch.nn.functional.rms_norm": lambda x, w, eps: F.rms_norm(x, x.shape[-1:], w, eps),
    "fails on": lambda x, w, eps: rms_right(x, w, eps) * 1.01,
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
    "keep the inputs' dtype": lambda x, wg, wu, wd: swiglu_right(x.double(), wg.double(), wu.double(), wd.double()),
    "in place": lambda x, wg, wu, wd: (F.silu(x @ wg) * (x.mul_(1.0).add_(0.0) @ wu)) @ wd if x.add_(1) is not None else 0,
    "fails on": lambda x, wg, wu, wd: swiglu_right(x, wg, wu, wd) + 0.1,
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
    "keep the inputs' dtype": rotate_float64_angles,
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
    "fails on": lambda k, groups: k.repeat_interleave(groups, dim=1).flip(1),
    "keep the inputs' dtype": lambda k, groups: k.repeat_interleave(groups, dim=1).double(),
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


# ------------------------------------------------------------------------------ 13.5 GQA with a KV cache
import math  # noqa: E402

from companion.modern import orthogonalize, repeat_kv, rotate  # noqa: E402


def gqa_right(attn, x, past):
    B, T, _ = x.shape
    h, h_kv, d = attn.n_heads, attn.n_kv_heads, attn.d_head
    S = 0 if past is None else past[0].shape[2]
    q = rotate(attn.q_proj(x).view(B, T, h, d).transpose(1, 2), offset=S)
    k = rotate(attn.k_proj(x).view(B, T, h_kv, d).transpose(1, 2), offset=S)
    v = attn.v_proj(x).view(B, T, h_kv, d).transpose(1, 2)
    if past is not None:
        k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
    mask = torch.ones(T, S + T, dtype=torch.bool).tril(S)
    y = F.scaled_dot_product_attention(q, repeat_kv(k, h // h_kv), repeat_kv(v, h // h_kv), attn_mask=mask)
    return attn.o_proj(y.transpose(1, 2).reshape(B, T, h * d)), (k, v)


def gqa_by_hand(attn, x, past):
    """The same with explicit scores, a -inf mask and softmax."""
    B, T, _ = x.shape
    h, h_kv, d = attn.n_heads, attn.n_kv_heads, attn.d_head
    S = 0 if past is None else past[0].shape[2]
    q = rotate(attn.q_proj(x).view(B, T, h, d).transpose(1, 2), offset=S)
    k = rotate(attn.k_proj(x).view(B, T, h_kv, d).transpose(1, 2), offset=S)
    v = attn.v_proj(x).view(B, T, h_kv, d).transpose(1, 2)
    k_all = k if past is None else torch.cat([past[0], k], 2)
    v_all = v if past is None else torch.cat([past[1], v], 2)
    kk, vv = k_all.repeat_interleave(h // h_kv, 1), v_all.repeat_interleave(h // h_kv, 1)
    scores = q @ kk.transpose(-2, -1) / math.sqrt(d)
    future = torch.arange(S + T)[None, :] > torch.arange(S, S + T)[:, None]
    y = scores.masked_fill(future, float("-inf")).softmax(-1) @ vv
    return attn.o_proj(y.transpose(1, 2).reshape(B, T, h * d)), (k_all, v_all)


def _gqa_variant(**kw):
    return lambda attn, x, past: check._gqa_chunk(attn, x, past, **kw)


GQA_WRONG = {
    "at offset S": _gqa_variant(offset=False),
    "tril(diagonal=S)": _gqa_variant(mask="top-left"),
    "sees the new tokens after it": _gqa_variant(mask="none"),
    "you tiled the heads": _gqa_variant(tiled=True),
    "not sqrt(d_model)": lambda attn, x, past: check._gqa_chunk(attn, x, past, scale=attn.n_heads * attn.d_head),
    "o_proj is missing": _gqa_variant(o_proj=False),
    "shared key/value heads only": _gqa_variant(keep_repeated=True),
    "append them to": _gqa_variant(append=False),
    "own forward": lambda attn, x, past: (attn(x) if past is None else gqa_right(attn, x, past)[0],
                                                                  gqa_right(attn, x, past)[1]),
    "return a pair": lambda attn, x, past: gqa_right(attn, x, past)[0],
    "differ from": lambda attn, x, past: (gqa_right(attn, x, past)[0] * 1.01, gqa_right(attn, x, past)[1]),
    "keep the input's dtype": lambda attn, x, past: (gqa_right(attn, x, past)[0].double(),
                                                     gqa_right(attn, x, past)[1]),
}


def test_gqa_right_answers_pass():
    assert check.gqa_with_cache(gqa_right).passed
    assert check.gqa_with_cache(gqa_by_hand).passed


@pytest.mark.parametrize("expected", list(GQA_WRONG))
def test_gqa_mistakes(expected):
    fb = check.gqa_with_cache(GQA_WRONG[expected])
    assert fb.status == "hint" and expected in fb.message, fb


def test_gqa_leaves_the_global_generator_alone():
    state = torch.get_rng_state()
    check.gqa_with_cache(gqa_right)
    assert torch.equal(state, torch.get_rng_state())


# ------------------------------------------------------------------------------ 13.6 Newton-Schulz
def ns_right(g, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = g.shape[0] > g.shape[1]
    x = g.T if tall else g
    x = x / (torch.linalg.matrix_norm(x) + 1e-7)
    for _ in range(steps):
        s = x @ x.mT
        x = a * x + b * s @ x + c * s @ s @ x
    return x.T if tall else x


def _ns_variant(**kw):
    return lambda g, steps: check._ns(g, steps, **kw)


NS_WRONG = {
    "Frobenius norm": _ns_variant(normalize=False),
    "-4.7750": _ns_variant(coefficients=(3.4445, 4.7750, 2.0315)),
    "not the cubic": _ns_variant(coefficients=(1.5, -0.5, 0.0)),
    "one step too few": lambda g, steps: check._ns(g, steps - 1),
    "one step too many": lambda g, steps: check._ns(g, steps + 1),
    "companion.modern": lambda g, steps: orthogonalize(g, steps),
    "calls torch.linalg.svd": lambda g, steps: (lambda u, s, vh: u @ vh)(*torch.linalg.svd(g, full_matrices=False)),
    "keep the input's dtype": lambda g, steps: ns_right(g.double(), steps),
    "in place": lambda g, steps: ns_right(g.div_(1.0).mul_(2.0), steps),
    "differ from": lambda g, steps: ns_right(g, steps) * 1.01,
}


def ns_on_the_tall_side(g, steps):
    """No transpose: X X^T X = X (X^T X), so the iteration gives the same matrix (more slowly)."""
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g / (g.norm() + 1e-7)
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x


def test_ns_right_answers_pass():
    assert check.newton_schulz(ns_right).passed
    assert check.newton_schulz(lambda g, steps: check._ns(g, steps)).passed
    assert check.newton_schulz(ns_on_the_tall_side).passed


@pytest.mark.parametrize("expected", list(NS_WRONG))
def test_ns_mistakes(expected):
    fb = check.newton_schulz(NS_WRONG[expected])
    assert fb.status == "hint" and expected in fb.message, fb


# ------------------------------------------------------------------------------ 13.7 one Muon step
def muon_right(w, grad, buf, lr, momentum, weight_decay):
    new_buf = momentum * buf + (1 - momentum) * grad
    update = (1 - momentum) * grad + momentum * new_buf
    scale = max(1.0, w.shape[0] / w.shape[1]) ** 0.5
    return w * (1 - lr * weight_decay) - lr * scale * ns_right(update, 5), new_buf


def muon_with_companion(w, grad, buf, lr, momentum, weight_decay):
    new_buf = buf.lerp(grad, 1 - momentum)
    update = grad.lerp(new_buf, momentum)
    scale = math.sqrt(max(1.0, w.shape[0] / w.shape[1]))
    return w * (1 - lr * weight_decay) - lr * scale * orthogonalize(update), new_buf


def _muon(*, buf_rule="right", nesterov=True, scale="right", decay=True, sign=-1.0):
    def step(w, grad, buf, lr, momentum, weight_decay):
        new_buf = momentum * buf + grad if buf_rule == "sum" else momentum * buf + (1 - momentum) * grad
        update = {True: (1 - momentum) * grad + momentum * new_buf, False: new_buf, "none": grad}[nesterov]
        r = w.shape[0] / w.shape[1]
        s = {"right": max(1.0, r) ** 0.5, "one": 1.0, "ratio": r ** 0.5}[scale]
        base = w * (1 - lr * weight_decay) if decay else w
        return base + sign * lr * s * ns_right(update, 5), new_buf
    return step


MUON_WRONG = {
    "the buffer is an average": _muon(buf_rule="sum"),
    "Nesterov momentum": _muon(nesterov=False),
    "the momentum is missing": _muon(nesterov="none"),
    "a tall matrix moves further": _muon(scale="one"),
    "a wide matrix keeps 1": _muon(scale="ratio"),
    "weight decay first": _muon(decay=False),
    "the update is subtracted": _muon(sign=1.0),
    "return a pair": lambda *a: muon_right(*a)[0],
    "companion.modern": muon_with_companion,
    "in place": lambda w, grad, buf, lr, m, wd: muon_right(w, grad, buf.mul_(1.0).add_(0.5), lr, m, wd),
    "keep the input's dtype": lambda *a: tuple(t.double() for t in muon_right(*a)),
    "differ from": lambda *a: (muon_right(*a)[0] * 1.001, muon_right(*a)[1]),
}


def test_muon_right_answers_pass():
    assert check.muon_step(muon_right).passed
    assert check.muon_step(lambda w, g, b, lr, m, wd: (w * (1 - lr * wd) - lr * math.sqrt(max(1.0, w.shape[0] / w.shape[1]))
                                                       * ns_right(g.lerp(b.lerp(g, 1 - m), m), 5), b.lerp(g, 1 - m))).passed


@pytest.mark.parametrize("expected", list(MUON_WRONG))
def test_muon_mistakes(expected):
    fb = check.muon_step(MUON_WRONG[expected])
    assert fb.status == "hint" and expected in fb.message, fb


# ------------------------------------------------------------------------------ every checker
CHECKERS = [check.rms_norm_heads, check.swiglu, check.rotate_at_offset, check.repeat_heads]
NEW_CHECKERS = [check.gqa_with_cache, check.newton_schulz, check.muon_step]
JUNK = {
    "None": None, "a string": "tensor", "a huge int": 10**400, "a float": 1.5, "a complex number": 1 + 2j,
    "NaN": float("nan"), "an empty tensor": torch.empty(0), "a complex tensor": torch.ones(2, 3, 4, 4, dtype=torch.cfloat),
    "a list": [1, 2, 3], "a NumPy array": np.ones((2, 3, 5, 8)), "a bool tensor": torch.ones(2, 3, 5, 8, dtype=torch.bool),
    "a tuple": (torch.ones(2), torch.ones(2)), "an int tensor": torch.ones(2, 3, 5, 8, dtype=torch.long),
}


@pytest.mark.parametrize("fn", CHECKERS + NEW_CHECKERS)
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


@pytest.mark.parametrize("fn", CHECKERS + NEW_CHECKERS)
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
