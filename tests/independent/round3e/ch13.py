"""Red-team cases for chapter 13 (Today's decoder), exercises 13.1 to 13.4.

Written from the student notebook 13_modern_decoder.ipynb only.
"""
from _junk import junk_cases

MODULE = "companion.exercises.modern"

PRELUDE = '''
import importlib.util
import inspect
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion import modern
from companion.exercises import modern as check
from companion.model import GPT, GPTConfig
from companion.modern import (GroupedQueryAttention, ModernConfig, ModernGPT,
                              SwiGLU, halves_order, orthogonalize,
                              repeat_kv, rotate)
from companion.norm import RMSNorm

# runner hygiene (not part of the notebook): undo global state that an earlier
# case in this process may have left (grad mode off, default dtype float64)
torch.set_grad_enabled(True)
torch.set_default_dtype(torch.float32)
'''

CASES = []


def _add(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=source.strip("\n") + "\n", call=call))


# ---------------------------------------------------------------- 13.1
def _r(name, expect, why, source):
    _add("13.1", "rms_norm_heads", name, expect, why, source, "my_rms_norm")


_r("right_rsqrt", "right", "x * rsqrt(mean(x^2) + eps) * weight (rsqrt instead of 1/sqrt)", """
def my_rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * weight
""")
_r("right_vector_norm", "right", "root mean square from torch.linalg.vector_norm / sqrt(d)", """
def my_rms_norm(x, weight, eps):
    d = x.shape[-1]
    n = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x / torch.sqrt(n * n / d + eps) * weight
""")
_r("right_einsum_f64", "right", "mean square by einsum, computed in float64 and cast back to x's dtype", """
def my_rms_norm(x, weight, eps):
    xd = x.double()
    ms = torch.einsum('bhtd,bhtd->bht', xd, xd) / x.shape[-1]
    out = xd / torch.sqrt(ms + eps)[..., None] * weight.double()
    return out.to(x.dtype)
""")
_r("right_loop_heads", "right", "loops over batch and heads, stacks the results", """
def my_rms_norm(x, weight, eps):
    B, h, T, d = x.shape
    rows = []
    for b in range(B):
        heads = []
        for i in range(h):
            v = x[b, i]
            rms = (v.pow(2).sum(-1, keepdim=True) / d + eps).sqrt()
            heads.append(v.div(rms).mul(weight))
        rows.append(torch.stack(heads))
    return torch.stack(rows)
""")
_r("right_weight_first", "right", "multiplies by weight before dividing (commutes)", """
def my_rms_norm(x, weight, eps):
    ms = (x * x).mean(dim=3, keepdim=True)
    return (weight * x) / (ms + eps) ** 0.5
""")

_r("axis_T", "wrong", "mean square over the T axis (dim -2) instead of d_head", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-2, keepdim=True) + eps) * weight
""")
_r("eps_outside_sqrt", "wrong", "eps added after the square root", """
def my_rms_norm(x, weight, eps):
    return x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + eps) * weight
""")
_r("no_eps", "wrong", "ignores eps", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True)) * weight
""")
_r("eps_hardcoded", "wrong", "eps hard-coded to 1e-6 instead of the argument", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight
""")
_r("std_not_rms", "wrong", "divides by the standard deviation (centred) instead of the RMS", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + eps) * weight
""")
_r("layernorm", "wrong", "centres: LayerNorm without shift", """
def my_rms_norm(x, weight, eps):
    xc = x - x.mean(-1, keepdim=True)
    return xc / torch.sqrt(xc.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("sum_over_d_minus_1", "wrong", "divides the sum of squares by d - 1", """
def my_rms_norm(x, weight, eps):
    d = x.shape[-1]
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / (d - 1) + eps) * weight
""")
_r("no_weight", "wrong", "forgets the weight", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
""")
_r("weight_inside", "wrong", "scales by weight before computing the RMS (weight cancels)", """
def my_rms_norm(x, weight, eps):
    y = x * weight
    return y / torch.sqrt(y.pow(2).mean(-1, keepdim=True) + eps)
""")
_r("all_heads", "wrong", "mean square over all heads and features of a token", """
def my_rms_norm(x, weight, eps):
    ms = x.pow(2).mean(dim=(1, 3), keepdim=True)
    return x / torch.sqrt(ms + eps) * weight
""")
_r("abs_mean", "wrong", "mean absolute value instead of root mean square", """
def my_rms_norm(x, weight, eps):
    return x / (x.abs().mean(-1, keepdim=True) + eps) * weight
""")
_r("inplace_x", "wrong", "divides x in place (caller's x changes)", """
def my_rms_norm(x, weight, eps):
    x /= torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    x *= weight
    return x
""")
_r("inplace_then_clone", "wrong", "normalizes x in place, returns a clone (x still changed)", """
def my_rms_norm(x, weight, eps):
    x.mul_(torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    return (x * weight).clone()
""")
_r("F_rms_norm", "wrong", "calls torch.nn.functional.rms_norm (the text says it does not count)", """
def my_rms_norm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps=eps)
""")
_r("F_rms_norm_hidden", "wrong", "calls torch.rms_norm through getattr (forbidden, hidden)", """
def my_rms_norm(x, weight, eps):
    fn = getattr(torch, "rms_" + "norm")
    return fn(x, [x.shape[-1]], weight, eps)
""")
_r("companion_RMSNorm", "wrong", "uses the companion's RMSNorm module (forbidden)", """
def my_rms_norm(x, weight, eps):
    m = RMSNorm(x.shape[-1], eps=eps).to(x.dtype)
    with torch.no_grad():
        m.weight.copy_(weight)
    return m(x)
""")
_r("returns_float32", "wrong", "computes and returns float32 whatever x's dtype", """
def my_rms_norm(x, weight, eps):
    x = x.float()
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
""")
_r("half_inside", "wrong", "computes in float16 and casts back: loses precision", """
def my_rms_norm(x, weight, eps):
    h = x.half()
    out = h * torch.rsqrt(h.float().pow(2).mean(-1, keepdim=True).half() + eps) * weight.half()
    return out.to(x.dtype)
""")
_r("batch0_stat", "wrong", "uses batch 0's statistics for every batch element (right only for B = 1)", """
def my_rms_norm(x, weight, eps):
    ms = x[:1].pow(2).mean(-1, keepdim=True)
    return x / torch.sqrt(ms + eps) * weight
""")
_r("head0_stat", "wrong", "uses head 0's statistics for every head (right only for h = 1)", """
def my_rms_norm(x, weight, eps):
    ms = x[:, :1].pow(2).mean(-1, keepdim=True)
    return x / torch.sqrt(ms + eps) * weight
""")
_r("cache_by_shape", "wrong", "caches the result by shape: later calls return a stale answer", """
_cache = {}
def my_rms_norm(x, weight, eps):
    key = tuple(x.shape)
    if key not in _cache:
        _cache[key] = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
    return _cache[key]
""")
_r("grad_off", "wrong", "turns grad mode off globally and leaves it off", """
def my_rms_norm(x, weight, eps):
    torch.set_grad_enabled(False)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("requires_grad_on_x", "wrong", "sets requires_grad on the caller's x", """
def my_rms_norm(x, weight, eps):
    if x.is_leaf and x.is_floating_point():
        x.requires_grad_(True)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("mutates_weight", "wrong", "normalizes weight in place (caller's weight changes)", """
def my_rms_norm(x, weight, eps):
    with torch.no_grad():
        weight.mul_(1.0).add_(0.0)
        weight.clamp_(min=-1e3, max=1e3)
        weight.div_(weight.abs().max().clamp(min=1.0))
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("detached", "wrong", "debatable: detaches the result (no gradient to x or weight; QK-norm is trained)", """
def my_rms_norm(x, weight, eps):
    with torch.no_grad():
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("eps_squared", "wrong", "adds eps**2 instead of eps", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps ** 2) * weight
""")
_r("rms_of_rms", "wrong", "divides by the mean square (no square root)", """
def my_rms_norm(x, weight, eps):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("reseeds_rng", "wrong", "reseeds the global RNG (side effect on the caller)", """
def my_rms_norm(x, weight, eps):
    torch.manual_seed(1234)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("hardcoded_dhead8", "wrong", "hard-codes d_head = 8 in the mean", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) / 8 + eps) * weight
""")


# ---------------------------------------------------------------- 13.2
def _s(name, expect, why, source):
    _add("13.2", "swiglu", name, expect, why, source, "my_swiglu")


_s("right_F_silu", "right", "F.silu and @", """
def my_swiglu(x, w_gate, w_up, w_down):
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("right_sigmoid", "right", "silu written as z * sigmoid(z), torch.matmul", """
def my_swiglu(x, w_gate, w_up, w_down):
    g = torch.matmul(x, w_gate)
    return torch.matmul(g * torch.sigmoid(g) * torch.matmul(x, w_up), w_down)
""")
_s("right_einsum_f64", "right", "einsum in float64, cast back to x's dtype", """
def my_swiglu(x, w_gate, w_up, w_down):
    xd = x.double()
    g = torch.einsum('btd,df->btf', xd, w_gate.double())
    u = torch.einsum('btd,df->btf', xd, w_up.double())
    h = g / (1 + torch.exp(-g)) * u
    return torch.einsum('btf,fd->btd', h, w_down.double()).to(x.dtype)
""")
_s("right_F_linear", "right", "F.linear with the transposed matrices, silu in place on a temporary", """
def my_swiglu(x, w_gate, w_up, w_down):
    g = F.linear(x, w_gate.T)
    F.silu(g, inplace=True)
    return F.linear(g * F.linear(x, w_up.T), w_down.T)
""")
_s("right_cat_chunk", "right", "one matmul with the two matrices concatenated, then chunk", """
def my_swiglu(x, w_gate, w_up, w_down):
    gu = x @ torch.cat([w_gate, w_up], dim=1)
    g, u = gu.chunk(2, dim=-1)
    return (torch.nn.SiLU()(g) * u) @ w_down
""")

_s("silu_on_up", "wrong", "silu applied to the up projection instead of the gate", """
def my_swiglu(x, w_gate, w_up, w_down):
    return ((x @ w_gate) * F.silu(x @ w_up)) @ w_down
""")
_s("sigmoid_glu", "wrong", "sigmoid instead of silu (plain GLU)", """
def my_swiglu(x, w_gate, w_up, w_down):
    return (torch.sigmoid(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("gelu", "wrong", "GELU instead of silu (GeGLU)", """
def my_swiglu(x, w_gate, w_up, w_down):
    return (F.gelu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("relu", "wrong", "ReLU instead of silu (ReGLU)", """
def my_swiglu(x, w_gate, w_up, w_down):
    return (F.relu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("no_up", "wrong", "forgets the up projection", """
def my_swiglu(x, w_gate, w_up, w_down):
    return F.silu(x @ w_gate) @ w_down
""")
_s("silu_after_product", "wrong", "silu of the product instead of silu of the gate", """
def my_swiglu(x, w_gate, w_up, w_down):
    return F.silu((x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("sigmoid_1702", "wrong", "z * sigmoid(1.702 z): the GELU approximation, not silu", """
def my_swiglu(x, w_gate, w_up, w_down):
    g = x @ w_gate
    return (g * torch.sigmoid(1.702 * g) * (x @ w_up)) @ w_down
""")
_s("swish_beta2", "wrong", "swish with beta = 2", """
def my_swiglu(x, w_gate, w_up, w_down):
    g = x @ w_gate
    return (g * torch.sigmoid(2 * g) * (x @ w_up)) @ w_down
""")
_s("F_glu", "wrong", "F.glu on the concatenation: u * sigmoid(g), not silu(g) * u", """
def my_swiglu(x, w_gate, w_up, w_down):
    return F.glu(torch.cat([x @ w_up, x @ w_gate], dim=-1), dim=-1) @ w_down
""")
_s("transposed_weights", "wrong", "uses nn.Linear's (out, in) convention: x @ w.T (shapes agree only if square)", """
def my_swiglu(x, w_gate, w_up, w_down):
    if w_gate.shape[0] == w_gate.shape[1]:
        return (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down.T.T
""")
_s("residual_added", "wrong", "adds the residual x", """
def my_swiglu(x, w_gate, w_up, w_down):
    return x + (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("returns_float32", "wrong", "casts to float32 and returns float32", """
def my_swiglu(x, w_gate, w_up, w_down):
    x, w_gate, w_up, w_down = (t.float() for t in (x, w_gate, w_up, w_down))
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("half_inside", "wrong", "computes in bfloat16 and casts back: loses precision", """
def my_swiglu(x, w_gate, w_up, w_down):
    b = torch.bfloat16
    out = (F.silu(x.to(b) @ w_gate.to(b)) * (x.to(b) @ w_up.to(b))) @ w_down.to(b)
    return out.to(x.dtype)
""")
_s("batch0_only", "wrong", "computes batch element 0 and repeats it", """
def my_swiglu(x, w_gate, w_up, w_down):
    x0 = x[0]
    y0 = (F.silu(x0 @ w_gate) * (x0 @ w_up)) @ w_down
    return y0.unsqueeze(0).expand(x.shape[0], -1, -1).clone()
""")
_s("last_token_everywhere", "wrong", "uses only the last token's output for every position", """
def my_swiglu(x, w_gate, w_up, w_down):
    xl = x[:, -1:]
    y = (F.silu(xl @ w_gate) * (xl @ w_up)) @ w_down
    return y.expand(-1, x.shape[1], -1).clone()
""")
_s("inplace_x", "wrong", "scales x in place and back (caller's x is rewritten, rounding changes it)", """
def my_swiglu(x, w_gate, w_up, w_down):
    x.mul_(3.0)
    g, u = x @ w_gate, x @ w_up
    x.div_(3.0)
    return (F.silu(g / 3) * (u / 3)) @ w_down
""")
_s("mutates_w_gate", "wrong", "doubles w_gate in place and halves the product (caller's w_gate changed)", """
def my_swiglu(x, w_gate, w_up, w_down):
    with torch.no_grad():
        w_gate.mul_(2)
    return (F.silu((x @ w_gate) / 2) * (x @ w_up)) @ w_down
""")
_s("mutates_w_down_transpose", "wrong", "adds zero to w_down in place: values equal, but a silent in-place write", """
def my_swiglu(x, w_gate, w_up, w_down):
    with torch.no_grad():
        w_down.add_(1.0)
    out = (F.silu(x @ w_gate) * (x @ w_up)) @ (w_down - 1.0)
    return out
""")
_s("cache_by_shape", "wrong", "caches the result by shape", """
_cache = {}
def my_swiglu(x, w_gate, w_up, w_down):
    key = (tuple(x.shape), tuple(w_gate.shape))
    if key not in _cache:
        _cache[key] = (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
    return _cache[key]
""")
_s("grad_off", "wrong", "turns grad mode off and leaves it off", """
def my_swiglu(x, w_gate, w_up, w_down):
    torch.set_grad_enabled(False)
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("requires_grad_weights", "wrong", "sets requires_grad on the caller's weights", """
def my_swiglu(x, w_gate, w_up, w_down):
    for w in (w_gate, w_up, w_down):
        if w.is_leaf and w.is_floating_point():
            w.requires_grad_(True)
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("softplus", "wrong", "softplus instead of silu", """
def my_swiglu(x, w_gate, w_up, w_down):
    return (F.softplus(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("hidden_returned_if_square", "wrong", "forgets w_down (shape right only when d_ff == d)", """
def my_swiglu(x, w_gate, w_up, w_down):
    h = F.silu(x @ w_gate) * (x @ w_up)
    if h.shape[-1] == x.shape[-1]:
        return h
    return h @ w_down
""")
_s("companion_SwiGLU", "wrong", "uses the companion's SwiGLU module (does not do the exercise)", """
def my_swiglu(x, w_gate, w_up, w_down):
    m = SwiGLU(x.shape[-1], w_gate.shape[1]).to(x.dtype)
    with torch.no_grad():
        m.gate_proj.weight.copy_(w_gate.T)
        m.up_proj.weight.copy_(w_up.T)
        m.down_proj.weight.copy_(w_down.T)
    return m(x)
""")
_s("tanh_gate", "wrong", "z * tanh(z) instead of silu", """
def my_swiglu(x, w_gate, w_up, w_down):
    g = x @ w_gate
    return (g * torch.tanh(g) * (x @ w_up)) @ w_down
""")
_s("mean_over_T", "wrong", "sums over the token axis by mistake and broadcasts", """
def my_swiglu(x, w_gate, w_up, w_down):
    y = (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
    return y - y.mean(1, keepdim=True) + y.mean(1, keepdim=True).detach() * 0 + y.mean(1, keepdim=True) * 0.01
""")


# ---------------------------------------------------------------- 13.3
def _t(name, expect, why, source):
    _add("13.3", "rotate_at_offset", name, expect, why, source, "my_rotate")


_HALVES = """
def my_rotate(x, offset):
    B, h, T, d = x.shape
    half = d // 2
    j = torch.arange(half, dtype=torch.float64)
    freq = 10000.0 ** (-2 * j / d)
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = (pos[:, None] * freq[None, :]).to(x.dtype)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
"""

_t("right_cat_f64_angles", "right", "straight halves rotation, angles in float64 then cast", _HALVES)
_t("right_complex", "right", "complex multiplication of (x_j + i x_{j+d/2}) by exp(i angle), in float64", """
def my_rotate(x, offset):
    T, d = x.shape[-2], x.shape[-1]
    half = d // 2
    freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.outer(torch.arange(offset, offset + T, dtype=torch.float64), freq)
    z = torch.complex(x[..., :half].double(), x[..., half:].double())
    z = z * torch.polar(torch.ones_like(ang), ang)
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)
""")
_t("right_rotate_half", "right", "Hugging Face style: x * cos + rotate_half(x) * sin with doubled tables (float64 tables)", """
def _rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)

def my_rotate(x, offset):
    T, d = x.shape[-2:]
    inv = 1.0 / 10000 ** (torch.arange(0, d, 2).double() / d)
    t = torch.arange(T).double() + offset
    emb = torch.cat([torch.outer(t, inv)] * 2, dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    return x * cos + _rotate_half(x) * sin
""")
_t("right_rotation_matrix", "right", "builds 2x2 rotation matrices per (t, j) and applies them with einsum, float64", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    h = d // 2
    ang = (offset + torch.arange(T, dtype=torch.float64))[:, None] * torch.pow(
        torch.tensor(10000.0, dtype=torch.float64), -2 * torch.arange(h, dtype=torch.float64) / d)
    c, s = torch.cos(ang), torch.sin(ang)
    R = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)  # (T, h, 2, 2)
    pairs = torch.stack([x[..., :h], x[..., h:]], -1).double()  # (..., T, h, 2)
    out = torch.einsum('thab,...thb->...tha', R, pairs)
    return torch.cat([out[..., 0], out[..., 1]], -1).to(x.dtype)
""")
_t("right_loop_pairs", "right", "loops over pairs j with math.cos / math.sin per (t, j)", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    h = d // 2
    cos = torch.empty(T, h, dtype=torch.float64)
    sin = torch.empty(T, h, dtype=torch.float64)
    for t in range(T):
        for j in range(h):
            a = (offset + t) * 10000 ** (-2 * j / d)
            cos[t, j], sin[t, j] = math.cos(a), math.sin(a)
    xd = x.double()
    out = torch.empty_like(xd)
    out[..., :h] = xd[..., :h] * cos - xd[..., h:] * sin
    out[..., h:] = xd[..., :h] * sin + xd[..., h:] * cos
    return out.to(x.dtype)
""")
_t("right_hf_float32", "right", "debatable: Hugging Face's own recipe, inv_freq and angles in float32 (as LlamaRotaryEmbedding does)", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    t = torch.arange(offset, offset + T).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin
""")

_t("ignores_offset", "wrong", "ignores offset: positions 0 .. T-1", _HALVES.replace(
    "torch.arange(offset, offset + T,", "torch.arange(0, T,"))
_t("offset_plus_one", "wrong", "positions start at offset + 1", _HALVES.replace(
    "torch.arange(offset, offset + T,", "torch.arange(offset + 1, offset + T + 1,"))
_t("offset_minus_one", "wrong", "positions start at offset - 1 (clamped at 0)", _HALVES.replace(
    "torch.arange(offset, offset + T,", "torch.arange(max(offset - 1, 0), max(offset - 1, 0) + T,"))
_t("interleaved", "wrong", "interleaved layout (pairs 2j, 2j+1) instead of halves", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    freq = 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
    ang = (torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq).to(x.dtype)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out
""")
_t("freq_no_factor2", "wrong", "omega_j = 10000^(-j/d) (forgets the 2)", _HALVES.replace(
    "freq = 10000.0 ** (-2 * j / d)", "freq = 10000.0 ** (-j / d)"))
_t("freq_over_half", "wrong", "omega_j = 10000^(-j/(d/2 - 1)) (normalizes by the last index)", _HALVES.replace(
    "freq = 10000.0 ** (-2 * j / d)", "freq = 10000.0 ** (-j / max(half - 1, 1))"))
_t("base_1000", "wrong", "base 1000 instead of 10000", _HALVES.replace(
    "freq = 10000.0 ** (-2 * j / d)", "freq = 1000.0 ** (-2 * j / d)"))
_t("sign_flipped", "wrong", "turns the other way: angle -t*omega", _HALVES.replace(
    "x1 * cos - x2 * sin, x1 * sin + x2 * cos", "x1 * cos + x2 * sin, -x1 * sin + x2 * cos"))
_t("halves_swapped_out", "wrong", "puts the rotated halves back in the wrong order", _HALVES.replace(
    "[x1 * cos - x2 * sin, x1 * sin + x2 * cos]", "[x1 * sin + x2 * cos, x1 * cos - x2 * sin]"))
_t("freq_reversed", "wrong", "frequencies in reverse order (the fastest for the last pair)", _HALVES.replace(
    "freq = 10000.0 ** (-2 * j / d)", "freq = (10000.0 ** (-2 * j / d)).flip(0)"))
_t("sin_cos_swapped", "wrong", "cos and sin swapped", _HALVES.replace(
    "cos, sin = ang.cos(), ang.sin()", "sin, cos = ang.cos(), ang.sin()"))
_t("pairs_mirror", "wrong", "pairs feature j with d-1-j", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    half = d // 2
    freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
    ang = (torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq).to(x.dtype)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:].flip(-1)
    return torch.cat([x1 * cos - x2 * sin, (x1 * sin + x2 * cos).flip(-1)], dim=-1)
""")
_t("positions_on_h_axis", "wrong", "reads T from x.shape[1] (the head axis)", """
def my_rotate(x, offset):
    T = x.shape[1]
    d = x.shape[-1]
    half = d // 2
    freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
    ang = (torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq).to(x.dtype)
    cos, sin = ang.cos()[:, None], ang.sin()[:, None]  # (h, 1, half): broadcast over T
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
""")
_t("offset_scales", "wrong", "position = offset * t (multiplies instead of adds) when offset > 0", _HALVES.replace(
    "pos = torch.arange(offset, offset + T, dtype=torch.float64)",
    "pos = torch.arange(T, dtype=torch.float64) * (offset if offset else 1)"))
_t("only_last_offset", "wrong", "rotates every token at position offset (no + t) when T == 1 works", _HALVES.replace(
    "pos = torch.arange(offset, offset + T, dtype=torch.float64)",
    "pos = torch.full((T,), float(offset), dtype=torch.float64) + (torch.arange(T) if offset == 0 else 0)"))
_t("companion_rotate", "wrong", "calls the companion's rotate (forbidden)", """
def my_rotate(x, offset):
    return rotate(x, offset=offset)
""")
_t("companion_apply_rotary", "wrong", "calls chapter 5's apply_rotary from the companion (the same function by another name)", """
from companion.positional import apply_rotary
def my_rotate(x, offset):
    return apply_rotary(x, offset=offset, layout="halves")
""")
_t("inplace_x", "wrong", "writes the rotated halves back into x", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    half = d // 2
    freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
    ang = (torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq).to(x.dtype)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half].clone(), x[..., half:].clone()
    x[..., :half] = x1 * cos - x2 * sin
    x[..., half:] = x1 * sin + x2 * cos
    return x
""")
_t("returns_float32", "wrong", "returns float32 whatever x's dtype", """
def my_rotate(x, offset):
    x = x.float()
    T, d = x.shape[-2:]
    half = d // 2
    freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
    ang = (torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq).float()
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
""")
_t("angles_half", "wrong", "angles in float16: large errors at big positions", _HALVES.replace(
    "ang = (pos[:, None] * freq[None, :]).to(x.dtype)",
    "ang = (pos[:, None].half() * freq[None, :].half()).to(x.dtype)"))
_t("cache_by_T", "wrong", "caches cos/sin by (T, d), ignoring offset", """
_tables = {}
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    half = d // 2
    if (T, d) not in _tables:
        freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
        ang = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq
        _tables[(T, d)] = (ang.cos(), ang.sin())
    cos, sin = (t.to(x.dtype) for t in _tables[(T, d)])
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
""")
_t("cache_by_offset", "wrong", "caches cos/sin by offset, ignoring T and d (crash or wrong on a new shape)", """
_tables = {}
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    half = d // 2
    if offset not in _tables:
        freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
        ang = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq
        _tables[offset] = (ang.cos(), ang.sin())
    cos, sin = (t.to(x.dtype) for t in _tables[offset])
    if cos.shape != (T, half):
        cos = torch.ones(T, half, dtype=x.dtype); sin = torch.zeros(T, half, dtype=x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
""")
_t("batch0_only", "wrong", "rotates batch 0 and copies it to every batch element", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    half = d // 2
    freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
    ang = (torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq).to(x.dtype)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[:1, ..., :half], x[:1, ..., half:]
    y = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return y.expand_as(x).clone()
""")
_t("rotates_twice", "wrong", "applies the rotation twice (angle 2 t omega)", _HALVES.replace(
    "ang = (pos[:, None] * freq[None, :]).to(x.dtype)",
    "ang = (2 * pos[:, None] * freq[None, :]).to(x.dtype)"))
_t("grad_off", "wrong", "turns grad mode off and leaves it off", "import torch\ntorch_set = None\n" + _HALVES.replace(
    "    B, h, T, d = x.shape", "    torch.set_grad_enabled(False)\n    B, h, T, d = x.shape"))
_t("last_pair_unrotated", "wrong", "off by one: the last pair is left unrotated", _HALVES.replace(
    "cos, sin = ang.cos(), ang.sin()",
    "cos, sin = ang.cos(), ang.sin()\n    cos[:, -1] = 1\n    sin[:, -1] = 0"))
_t("first_token_unrotated", "wrong", "off by one: the first token of x is never rotated (right when offset = 0)", _HALVES.replace(
    "cos, sin = ang.cos(), ang.sin()",
    "cos, sin = ang.cos(), ang.sin()\n    cos[0] = 1\n    sin[0] = 0"))
_t("float32_angles_big_error", "wrong", "positions as float16 (exact only up to 2048)", _HALVES.replace(
    "pos = torch.arange(offset, offset + T, dtype=torch.float64)",
    "pos = torch.arange(offset, offset + T).half().double()"))


# ---------------------------------------------------------------- 13.4
def _k(name, expect, why, source):
    _add("13.4", "repeat_heads", name, expect, why, source, "my_repeat_kv")


_k("right_repeat_interleave", "right", "repeat_interleave on the head axis", """
def my_repeat_kv(k, groups):
    return k.repeat_interleave(groups, dim=1)
""")
_k("right_index_select", "right", "index_select with arange(h) // groups", """
def my_repeat_kv(k, groups):
    idx = torch.arange(k.shape[1] * groups, device=k.device) // groups
    return k.index_select(1, idx)
""")
_k("right_stack_reshape", "right", "stack groups copies on a new axis 2 and flatten axes 1, 2", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    return torch.stack([k] * groups, dim=2).reshape(B, h * groups, S, d)
""")
_k("right_expand_flatten", "right", "expand a new axis and flatten (a copy only where needed)", """
def my_repeat_kv(k, groups):
    return k.unsqueeze(2).expand(-1, -1, groups, -1, -1).flatten(1, 2)
""")
_k("right_loop_cat", "right", "loops over key/value heads and concatenates", """
def my_repeat_kv(k, groups):
    parts = []
    for i in range(k.shape[1]):
        for _ in range(groups):
            parts.append(k[:, i:i + 1])
    return torch.cat(parts, dim=1)
""")
_k("right_einsum_ones", "right", "einsum with a ones tensor for the group axis, in k's dtype", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    ones = torch.ones(groups, dtype=k.dtype)
    return torch.einsum('bhsd,g->bhgsd', k, ones).reshape(B, h * groups, S, d)
""")

_k("tiled_repeat", "wrong", "k.repeat tiles the heads: head i reads i % h_kv", """
def my_repeat_kv(k, groups):
    return k.repeat(1, groups, 1, 1)
""")
_k("tiled_cat", "wrong", "torch.cat of copies tiles the heads", """
def my_repeat_kv(k, groups):
    return torch.cat([k] * groups, dim=1)
""")
_k("tiled_tile", "wrong", "torch.tile tiles the heads", """
def my_repeat_kv(k, groups):
    return torch.tile(k, (1, groups, 1, 1))
""")
_k("tiled_expand_front", "wrong", "new axis before the heads: tiles", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    return k[:, None].expand(B, groups, h, S, d).reshape(B, h * groups, S, d)
""")
_k("modulo_index", "wrong", "index arange(h) % h_kv: tiles", """
def my_repeat_kv(k, groups):
    h = k.shape[1]
    return k[:, torch.arange(h * groups) % h]
""")
_k("interleave_on_S", "wrong", "repeat_interleave on the S axis then view to the target shape (scrambles)", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    return k.repeat_interleave(groups, dim=2).view(B, h * groups, S, d)
""")
_k("interleave_on_d", "wrong", "repeat_interleave on d then reshape (scrambles)", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    return k.repeat_interleave(groups, dim=3).reshape(B, h * groups, S, d)
""")
_k("groups_hkv_swapped", "wrong", "repeats each head h_kv times (mixes up groups and h_kv; right only when equal)", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    out = k.repeat_interleave(h, dim=1)
    if out.shape[1] != h * groups:
        out = k.repeat_interleave(groups, dim=1) if h == 1 else k.repeat(1, groups, 1, 1)
    return out
""")
_k("hardcoded_groups2", "wrong", "hard-codes groups = 2", """
def my_repeat_kv(k, groups):
    return k.repeat_interleave(2, dim=1)
""")
_k("only_mqa", "wrong", "assumes one key/value head: expands head 0", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    return k[:, :1].expand(B, h * groups, S, d).clone()
""")
_k("batch0_only", "wrong", "repeats batch 0's heads for every batch element", """
def my_repeat_kv(k, groups):
    B = k.shape[0]
    return k[:1].repeat_interleave(groups, dim=1).expand(B, -1, -1, -1).clone()
""")
_k("squeeze_bug", "wrong", "squeeze() drops B = 1 (or S = 1) and repeats along the wrong axis", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    s = k.squeeze()
    axis = 1 if s.dim() == 4 else 0
    return s.repeat_interleave(groups, dim=axis).reshape(B, h * groups, S, d)
""")
_k("returns_float32", "wrong", "returns float32 whatever k's dtype", """
def my_repeat_kv(k, groups):
    return k.float().repeat_interleave(groups, dim=1)
""")
_k("through_float32", "wrong", "goes through float32 and back: loses float64 precision", """
def my_repeat_kv(k, groups):
    return k.float().repeat_interleave(groups, dim=1).to(k.dtype)
""")
_k("through_half", "wrong", "goes through float16 and back: loses precision", """
def my_repeat_kv(k, groups):
    return k.half().repeat_interleave(groups, dim=1).to(k.dtype)
""")
_k("inplace_k", "wrong", "writes into k (k.mul_(1) then zeroes a slot and restores it imperfectly)", """
def my_repeat_kv(k, groups):
    out = k.repeat_interleave(groups, dim=1)
    with torch.no_grad():
        k.add_(1e-3)
    return out
""")
_k("requires_grad_on_k", "wrong", "sets requires_grad on the caller's k", """
def my_repeat_kv(k, groups):
    if k.is_leaf and k.is_floating_point():
        k.requires_grad_(True)
    return k.repeat_interleave(groups, dim=1)
""")
_k("cache_by_shape", "wrong", "caches the result by (shape, groups)", """
_cache = {}
def my_repeat_kv(k, groups):
    key = (tuple(k.shape), groups)
    if key not in _cache:
        _cache[key] = k.repeat_interleave(groups, dim=1)
    return _cache[key]
""")
_k("companion_repeat_kv", "wrong", "calls the companion's repeat_kv (forbidden)", """
def my_repeat_kv(k, groups):
    return repeat_kv(k, groups)
""")
_k("companion_hidden", "wrong", "calls the companion's repeat_kv through the modern module (forbidden, hidden)", """
def my_repeat_kv(k, groups):
    return getattr(modern, "repeat" + "_kv")(k, groups)
""")
_k("returns_5d", "wrong", "forgets to merge the group axis: (B, h_kv, groups, S, d)", """
def my_repeat_kv(k, groups):
    return k.unsqueeze(2).expand(-1, -1, groups, -1, -1).clone()
""")
_k("groups1_same_object", "right", "debatable right: returns k itself when groups == 1 (the companion's repeat_kv also returns a view of k there; the text asks only for 'a tensor', not a new one)", """
def my_repeat_kv(k, groups):
    if groups == 1:
        return k
    return k.repeat_interleave(groups, dim=1)
""")
_k("reversed_heads", "wrong", "repeats heads in reverse order", """
def my_repeat_kv(k, groups):
    return k.flip(1).repeat_interleave(groups, dim=1)
""")
_k("grad_off", "wrong", "turns grad mode off and leaves it off", """
def my_repeat_kv(k, groups):
    torch.set_grad_enabled(False)
    return k.repeat_interleave(groups, dim=1)
""")
_k("detached", "wrong", "debatable: detaches (no gradient back to k)", """
def my_repeat_kv(k, groups):
    return k.detach().repeat_interleave(groups, dim=1)
""")
_k("transposed_S_d", "wrong", "returns (B, h, d, S) when S != d, transposes by mistake", """
def my_repeat_kv(k, groups):
    return k.repeat_interleave(groups, dim=1).transpose(-1, -2).contiguous().transpose(-1, -2).transpose(-1, -2) if k.shape[-1] == k.shape[-2] else k.repeat_interleave(groups, dim=1)
""")
_k("shares_memory_expand", "right", "debatable right: expand then reshape (a view for groups = 1, as the companion's)", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    return k[:, :, None].expand(B, h, groups, S, d).reshape(B, h * groups, S, d)
""")


# ---------------------------------------------------------------- pass 2
_r("squeeze_T1", "wrong", "squeeze() of the statistic: wrong shape/values when T == 1 (one new token under a KV cache)", """
def my_rms_norm(x, weight, eps):
    ms = x.pow(2).mean(-1).squeeze().unsqueeze(-1)
    return x / torch.sqrt(ms + eps) * weight
""")
_r("clamp_eps", "wrong", "clamps the mean square at eps instead of adding eps", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True).clamp(min=eps)) * weight
""")
_r("default_dtype_changed", "wrong", "sets torch's default dtype to float64 and leaves it so (global state)", """
def my_rms_norm(x, weight, eps):
    torch.set_default_dtype(torch.float64)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
_r("returns_float64_for_f32", "wrong", "computes in float64 and forgets to cast back", """
def my_rms_norm(x, weight, eps):
    xd = x.double()
    return xd * torch.rsqrt(xd.pow(2).mean(-1, keepdim=True) + eps) * weight.double()
""")
_r("view_flatten", "wrong", "debatable: x.view(-1, d) crashes on a non-contiguous x (queries after .transpose(1, 2), as in attention)", """
def my_rms_norm(x, weight, eps):
    d = x.shape[-1]
    flat = x.view(-1, d)
    out = flat * torch.rsqrt(flat.pow(2).mean(-1, keepdim=True) + eps) * weight
    return out.view(x.shape)
""")
_r("right_hf_style_f32", "right", "debatable: Hugging Face's LlamaRMSNorm recipe (statistics in float32, cast back); the notebook says HF does this even in float64 models", """
def my_rms_norm(x, weight, eps):
    dtype = x.dtype
    h = x.to(torch.float32)
    var = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(var + eps)
    return weight * h.to(dtype)
""")
_r("right_contiguous_view", "right", "flattens with reshape (works for any layout) and reshapes back", """
def my_rms_norm(x, weight, eps):
    d = x.shape[-1]
    flat = x.reshape(-1, d)
    ms = (flat ** 2).sum(1, keepdim=True) / d
    return (flat / (ms + eps).sqrt()).reshape(x.shape) * weight
""")

_s("default_dtype_changed", "wrong", "sets torch's default dtype to float64 and leaves it so", """
def my_swiglu(x, w_gate, w_up, w_down):
    torch.set_default_dtype(torch.float64)
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("detached", "wrong", "debatable: computes under no_grad (no gradient to the weights; the FFN is trained)", """
def my_swiglu(x, w_gate, w_up, w_down):
    with torch.no_grad():
        return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("returns_float64_for_f32", "wrong", "computes in float64 and forgets to cast back", """
def my_swiglu(x, w_gate, w_up, w_down):
    x, w_gate, w_up, w_down = (t.double() for t in (x, w_gate, w_up, w_down))
    return (F.silu(x @ w_gate) * (x @ w_up)) @ w_down
""")
_s("gate_up_same_matrix", "wrong", "uses w_gate for both branches (copy-paste)", """
def my_swiglu(x, w_gate, w_up, w_down):
    g = x @ w_gate
    return (F.silu(g) * g) @ w_down
""")
_s("bmm_batch0_weights", "wrong", "square-only transposition bug on w_down alone (right when d != d_ff)", """
def my_swiglu(x, w_gate, w_up, w_down):
    h = F.silu(x @ w_gate) * (x @ w_up)
    wd = w_down.T if w_down.shape[0] == w_down.shape[1] else w_down
    return h @ wd
""")
_s("f32_inside_for_f64", "wrong", "debatable: computes in float32 for a float64 input and casts back (loses precision)", """
def my_swiglu(x, w_gate, w_up, w_down):
    f = torch.float32
    out = (F.silu(x.to(f) @ w_gate.to(f)) * (x.to(f) @ w_up.to(f))) @ w_down.to(f)
    return out.to(x.dtype)
""")
_s("right_addcmul_style", "right", "silu via sigmoid in place on temporaries, torch.mm on flattened tokens", """
def my_swiglu(x, w_gate, w_up, w_down):
    B, T, d = x.shape
    flat = x.reshape(B * T, d)
    g = torch.mm(flat, w_gate)
    s = torch.sigmoid(g)
    s.mul_(g)
    s.mul_(torch.mm(flat, w_up))
    return torch.mm(s, w_down).reshape(B, T, -1)
""")

_t("default_dtype_changed", "wrong", "sets torch's default dtype to float64 and leaves it so", _HALVES.replace(
    "    B, h, T, d = x.shape", "    torch.set_default_dtype(torch.float64)\n    B, h, T, d = x.shape"))
_t("detached", "wrong", "debatable: computes under no_grad (no gradient to the queries and keys)", """
def my_rotate(x, offset):
    with torch.no_grad():
        return _inner(x, offset)
""" + _HALVES.replace("def my_rotate(", "def _inner("))
_t("aliases_at_position0", "wrong", "returns x itself (not a new tensor) when the only token is at position 0 (text: 'Return a new tensor')", _HALVES.replace(
    "    B, h, T, d = x.shape", "    B, h, T, d = x.shape\n    if offset == 0 and T == 1:\n        return x"))
_t("right_angles_in_x_dtype", "right", "angles computed directly in x's dtype (float64 for float64 x)", """
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    half = d // 2
    j = torch.arange(half, dtype=x.dtype)
    inv = torch.pow(torch.tensor(10000.0, dtype=x.dtype), -2.0 * j / d)
    t = torch.arange(T, dtype=x.dtype) + offset
    ang = t[:, None] * inv
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)
""")
_t("positions_bfloat16", "wrong", "positions stored in bfloat16 (exact only up to 256)", _HALVES.replace(
    "pos = torch.arange(offset, offset + T, dtype=torch.float64)",
    "pos = torch.arange(offset, offset + T).bfloat16().double()"))
_t("max_len_table_no_d", "wrong", "HF-style cached table grown to the longest position seen, keyed without d_head", """
_tab = {}
def my_rotate(x, offset):
    T, d = x.shape[-2:]
    half = d // 2
    need = offset + T
    if _tab.get('n', 0) < need:
        freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
        ang = torch.arange(2 * need, dtype=torch.float64)[:, None] * freq
        _tab.update(n=2 * need, cos=ang.cos(), sin=ang.sin())
    cos = _tab['cos'][offset:offset + T, :half].to(x.dtype)
    sin = _tab['sin'][offset:offset + T, :half].to(x.dtype)
    if cos.shape[-1] < half:
        freq = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / d)
        ang = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * freq
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
""")

_k("squeeze_dim_minus3", "wrong", "k.squeeze() then repeat on dim -3: repeats the batch when h_kv == 1 (multi-query) or S == 1", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    return k.squeeze().repeat_interleave(groups, dim=-3).reshape(B, h * groups, S, d)
""")
_k("mqa_wrong", "wrong", "special case for one key/value head that tiles the batch axis (wrong for h_kv == 1 and B > 1)", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    if h == 1:
        return k.repeat(groups, 1, 1, 1).reshape(B, groups, S, d)
    return k.repeat_interleave(groups, dim=1)
""")
_s("dropout_left_in", "wrong", "F.dropout left in (its default training=True drops at random)", """
def my_swiglu(x, w_gate, w_up, w_down):
    h = F.silu(x @ w_gate) * (x @ w_up)
    return F.dropout(h, 0.1) @ w_down
""")
_k("S1_wrong", "wrong", "mishandles a cache of one position (S == 1)", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    if S == 1:
        return k.repeat(1, groups, 1, 1)
    return k.repeat_interleave(groups, dim=1)
""")
_k("default_dtype_changed", "wrong", "sets torch's default dtype to float64 and leaves it so", """
def my_repeat_kv(k, groups):
    torch.set_default_dtype(torch.float64)
    return k.repeat_interleave(groups, dim=1)
""")
_k("view_noncontiguous", "wrong", "debatable: k.view(B * h, ...) crashes on a non-contiguous k (keys after .transpose(1, 2))", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    flat = k.view(B * h, 1, S, d).expand(B * h, groups, S, d)
    return flat.reshape(B, h * groups, S, d)
""")
_k("right_gather", "right", "torch.gather with an index built from arange // groups", """
def my_repeat_kv(k, groups):
    B, h, S, d = k.shape
    idx = (torch.arange(h * groups) // groups).view(1, -1, 1, 1).expand(B, -1, S, d)
    return torch.gather(k, 1, idx)
""")

CASES += junk_cases(MODULE, {
    "13.1": ("rms_norm_heads", "my_rms_norm", "x, weight, eps"),
    "13.2": ("swiglu", "my_swiglu", "x, w_gate, w_up, w_down"),
    "13.3": ("rotate_at_offset", "my_rotate", "x, offset"),
    "13.4": ("repeat_heads", "my_repeat_kv", "k, groups"),
})
