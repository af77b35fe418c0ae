"""Checkers for chapter 13, *Today's decoder*.

Each checker calls the student's function on random inputs of several shapes (float64, and once
float32 to check the dtype is kept), compares with the right answer and with the answers of the
classic mistakes, and names the one it recognizes. The function the exercise rebuilds (the
library's or the companion's) is detected however it was imported: calls are watched with
:func:`sys.setprofile`, which sees every Python function and builtin called, whatever its name
in the student's cell.
"""
from __future__ import annotations

import contextlib
import math
import sys
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from .. import modern as _modern
from ..norm import RMSNorm as _RMSNorm
from . import rules
from ._core import checker, close, first_difference, hint, passed, require_tensor

__all__ = ["rms_norm_heads", "swiglu", "rotate_at_offset", "repeat_heads"]


@contextlib.contextmanager
def _watching(forbidden: dict[Any, str]) -> Iterator[list[str]]:
    """Record which of the ``forbidden`` functions (Python functions by their code object,
    builtins by identity) are called while the block runs; the previous profiler is restored."""
    codes = {getattr(f, "__code__", None): label for f, label in forbidden.items() if hasattr(f, "__code__")}
    builtins = {id(f): label for f, label in forbidden.items() if not hasattr(f, "__code__")}
    seen: list[str] = []

    def profile(frame, event, arg):
        if event == "call":
            label = codes.get(frame.f_code)
        elif event == "c_call":
            label = builtins.get(id(arg))
        else:
            return
        if label and label not in seen:
            seen.append(label)

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        with rules.watch() as watched:  # the student's calls, as the shared rules observe them
            yield seen
    finally:
        sys.setprofile(previous)
    # The guarded call observes the student's code with its own profiler (which replaces this one
    # while it runs): read the torch functions it saw too, whatever their import.
    for label in forbidden.values():
        name = label.rsplit(".", 1)[-1]
        if label not in seen and (name in watched.torch_calls or f"F.{name}" in watched.torch_calls):
            seen.append(label)


def _tensor_of(out: Any, x: torch.Tensor, shape: tuple, what: str) -> torch.Tensor:
    """The student's result as a tensor of ``shape`` and ``x``'s dtype, or a hint."""
    out = require_tensor(out, what)
    if out.is_complex():
        hint(f"return real numbers: your result is a complex tensor ({out.dtype}).")
    if tuple(out.shape) != tuple(shape):
        hint(f"the result must have shape {tuple(shape)} (got {tuple(out.shape)}).", generic=True)
    if out.dtype != x.dtype:
        hint(f"the result has dtype {out.dtype} but the input was {x.dtype}: keep the input's dtype "
             "(build any table in that dtype, or convert it with .to(x.dtype)).")
    return out


def _unchanged(before: torch.Tensor, after: torch.Tensor, name: str) -> None:
    if not torch.equal(before, after):
        hint(f"your function changed its argument `{name}` in place; compute a new tensor instead "
             "(the caller still needs the old values).")


def _require_function(fn, name: str) -> None:
    if not callable(fn) or isinstance(fn, type):
        hint(f"give your function `{name}` itself (defined with def), not {type(fn).__name__} {fn!r:.40}.")


# ----------------------------------------------------------------------------------- 13.1
def _rms(x, weight, eps, dim=-1):
    return x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + eps) * weight


_LIBRARY_RMS = {F.rms_norm: "torch.nn.functional.rms_norm", _RMSNorm.forward: "companion's RMSNorm"}
if hasattr(torch, "rms_norm"):
    _LIBRARY_RMS[torch.rms_norm] = "torch.rms_norm"


@checker("Exercise 13.1")
def rms_norm_heads(my_rms_norm) -> None:
    """``my_rms_norm(x, weight, eps)``: x ``(B, h, T, d_head)``, weight ``(d_head,)`` -> the same
    shape, each head's vector of every token divided by its root mean square, times ``weight``."""
    _require_function(my_rms_norm, "my_rms_norm")
    for seed, shape, eps, dtype in [(0, (2, 3, 5, 8), 1e-6, torch.float64), (1, (1, 4, 3, 6), 0.5, torch.float64),
                                    (2, (3, 2, 4, 4), 1e-6, torch.float32)]:
        g = torch.Generator().manual_seed(seed)
        x = (torch.randn(shape, generator=g, dtype=torch.float64) * 2 + 0.7).to(dtype)
        w = torch.randn(shape[-1], generator=g, dtype=torch.float64).to(dtype)
        x_in, w_in = x.clone(), w.clone()
        with _watching(_LIBRARY_RMS) as calls:
            out = my_rms_norm(x_in, w_in, eps)
        if calls:
            hint(f"your function calls {calls[0]}; the exercise is to write RMSNorm from its formula with "
                 "tensor arithmetic: x / sqrt(mean(x**2 over the last dimension) + eps) * weight.")
        _unchanged(x, x_in, "x"), _unchanged(w, w_in, "weight")
        out = _tensor_of(out, x, shape, "a tensor of x's shape")
        right = _rms(x, w, eps)
        if close(out, right, rtol=1e-4 if dtype == torch.float32 else 1e-6):
            continue
        x64, w64 = x.double(), w.double()
        mistakes = [
            (((x64 - x64.mean(-1, keepdim=True)) / torch.sqrt(x64.var(-1, keepdim=True, unbiased=False) + eps)) * w64,
             "RMSNorm does not subtract the mean (that is LayerNorm): divide x itself by the root mean square."),
            (x64 / (x64.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w64,
             "`eps` goes inside the square root: sqrt(mean(x**2) + eps)."),
            (x64 / torch.sqrt(x64.pow(2).sum(-1, keepdim=True) + eps) * w64,
             "take the mean of the squares over the last dimension, not their sum."),
            (_rms(x64, w64, eps, dim=1), "you normalized over the heads (dim=1); QK-norm normalizes each "
                                         "head's vector over its own d_head features (dim=-1)."),
            (_rms(x64, w64, eps, dim=2), "you normalized over the positions (dim=2); normalize each "
                                         "token's head vector over its features (dim=-1)."),
            (x64 / torch.sqrt(x64.pow(2).mean((1, 3), keepdim=True) + eps) * w64,
             "you normalized each token's whole vector (all heads together); QK-norm normalizes each "
             "head separately, over dim=-1 only."),
            (x64 / torch.sqrt(x64.pow(2).mean() + eps) * w64,
             "you took one mean square over the whole tensor; take it for each vector (dim=-1, keepdim=True)."),
            (_rms(x64, 1.0, eps), "multiply by the learned scale `weight` at the end."),
            (x64 / (x64.pow(2).mean(-1, keepdim=True) + eps) * w64,
             "divide by the square root of the mean square, not by the mean square itself."),
            (x64 / torch.sqrt(x64.mean(-1, keepdim=True).pow(2) + eps) * w64,
             "square first, then average: mean(x**2), not the square of the mean."),
            (x64 * torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * w64,
             "divide by the root mean square; you multiplied by it."),
        ]
        if eps > 0.1:
            mistakes.append((_rms(x64, w64, 0.0), "`eps` is missing: sqrt(mean(x**2) + eps)."))
        for wrong, message in mistakes:
            if close(out, wrong, rtol=1e-4):
                hint(message)
        hint("the values differ from x / sqrt(mean(x**2, dim=-1) + eps) * weight: "
             f"{first_difference(out, right)}.", generic=True)
    passed("every head's query or key vector is scaled to a root mean square of 1, then by weight.")


# ----------------------------------------------------------------------------------- 13.2
@checker("Exercise 13.2")
def swiglu(my_swiglu) -> None:
    """``my_swiglu(x, w_gate, w_up, w_down)``: x ``(B, T, d)``, w_gate and w_up ``(d, d_ff)``,
    w_down ``(d_ff, d)`` -> ``(silu(x @ w_gate) * (x @ w_up)) @ w_down``, shape ``(B, T, d)``."""
    _require_function(my_swiglu, "my_swiglu")
    for seed, (B, T, d, d_ff), dtype in [(0, (2, 5, 6, 10), torch.float64), (1, (1, 3, 4, 7), torch.float64),
                                         (2, (2, 2, 8, 12), torch.float32)]:
        g = torch.Generator().manual_seed(seed)

        def rand(*s):
            return torch.randn(*s, generator=g, dtype=torch.float64).to(dtype)

        x, wg, wu, wd = rand(B, T, d) * 1.5, rand(d, d_ff), rand(d, d_ff), rand(d_ff, d)
        args = [a.clone() for a in (x, wg, wu, wd)]
        out = my_swiglu(*args)
        for name, before, after in zip(("x", "w_gate", "w_up", "w_down"), (x, wg, wu, wd), args):
            _unchanged(before, after, name)
        out = _tensor_of(out, x, (B, T, d), "a tensor of shape (B, T, d)")
        x64, g64, u64, d64 = x.double(), wg.double(), wu.double(), wd.double()
        right = (F.silu(x64 @ g64) * (x64 @ u64)) @ d64
        if close(out, right.to(dtype), rtol=1e-4 if dtype == torch.float32 else 1e-6, atol=1e-5):
            continue
        a, b = x64 @ g64, x64 @ u64
        mistakes = [
            ((a * F.silu(b)) @ d64, "the SiLU goes on the gate, x @ w_gate; you applied it to x @ w_up."),
            ((torch.sigmoid(a) * b) @ d64, "use SiLU, a * sigmoid(a), not the sigmoid alone (that is GLU's gate)."),
            ((F.gelu(a) * b) @ d64, "use SiLU (x * sigmoid(x)) for the gate; GELU makes GEGLU, a close cousin."),
            ((F.relu(a) * b) @ d64, "use SiLU (x * sigmoid(x)) for the gate; ReLU makes ReGLU."),
            (F.silu(a * b) @ d64, "apply SiLU to the gate alone, then multiply: silu(x @ w_gate) * (x @ w_up)."),
            ((F.silu(a) + b) @ d64, "the two branches are multiplied element by element, not added."),
            (F.silu(a) @ d64, "the up branch is missing: multiply silu(x @ w_gate) by x @ w_up."),
            (b @ d64, "the gate is missing: multiply x @ w_up by silu(x @ w_gate)."),
            ((F.silu(a) * F.silu(b)) @ d64, "only the gate goes through SiLU; the up branch stays linear."),
            (F.silu((F.silu(a) * b) @ d64), "no activation after w_down: the output is a plain product."),
            (F.silu(a) * b, "multiply by w_down at the end to come back to width d."),
        ]
        for wrong, message in mistakes:
            if close(out, wrong, rtol=1e-4, atol=1e-5):
                hint(message)
        hint("the values differ from (silu(x @ w_gate) * (x @ w_up)) @ w_down: "
             f"{first_difference(out, right)}.", generic=True)
    passed("a gated feed-forward: SiLU of one branch scales the other, then w_down.")


# ----------------------------------------------------------------------------------- 13.3
def _rotate(x, offset, *, base=10000.0, layout="halves", sign=1.0, exponent=2.0, start=0):
    """The rotation and its classic mistakes, in float64."""
    *_, T, d = x.shape
    pos = torch.arange(T, dtype=torch.float64) + offset + start  # (T,)
    freq = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    ang = sign * pos[:, None] * freq[None, :]  # (T, d/2)
    cos, sin = ang.cos(), ang.sin()
    if layout == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x1 * sin + x2 * cos
        return out
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


@checker("Exercise 13.3")
def rotate_at_offset(my_rotate) -> None:
    """``my_rotate(x, offset)``: x ``(B, h, T, d_head)`` -> the same shape, the token at index
    ``t`` rotated as position ``offset + t`` (halves layout, base 10000)."""
    _require_function(my_rotate, "my_rotate")
    for seed, shape, offset, dtype in [(0, (2, 3, 5, 8), 7, torch.float64), (1, (1, 2, 4, 6), 0, torch.float64),
                                       (2, (1, 1, 1, 4), 50, torch.float64), (3, (2, 2, 3, 16), 1000, torch.float64),
                                       (4, (1, 2, 6, 8), 3, torch.float32)]:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        x_in = x.clone()
        with _watching({_modern.rotate: "companion.modern.rotate"}) as calls:
            out = my_rotate(x_in, offset)
        if calls:
            hint(f"your function calls {calls[0]}, the function this exercise rebuilds; write the rotation "
                 "with cos and sin of (offset + t) * base ** (-2j / d_head).")
        _unchanged(x, x_in, "x")
        out = _tensor_of(out, x, shape, "a tensor of x's shape")
        x64 = x.double()
        right = _rotate(x64, offset)
        if close(out, right, rtol=1e-4 if dtype == torch.float32 else 1e-6, atol=1e-5):
            continue
        mistakes = [
            (_rotate(x64, 0), "the offset is missing: the token at index t of x sits at position offset + t "
                              "(offset = tokens already in the cache)."),
            (_rotate(x64, -offset), "the offset is added, not subtracted: position offset + t."),
            (_rotate(x64, offset, layout="interleaved"),
             "you rotated interleaved pairs (2j, 2j+1); this exercise uses the halves layout: pair j is "
             "features j and j + d_head/2 (Hugging Face's rotate_half)."),
            (_rotate(x64, offset, sign=-1.0), "the rotation goes the wrong way: the first feature of a pair "
                                              "becomes x1 cos - x2 sin, the second x1 sin + x2 cos."),
            (_rotate(x64, offset, exponent=1.0), "the frequencies are base ** (-2j / d_head) for j = 0 .. "
                                                 "d_head/2 - 1; you used -j / d_head."),
            (_rotate(x64, offset, start=1), "positions start at 0: the first token of x is at position offset, "
                                            "not offset + 1."),
        ]
        if shape[-2] > 1:
            pos_all = torch.full((shape[-2],), float(offset), dtype=torch.float64)
            d = shape[-1]
            ang = pos_all[:, None] * 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
            x1, x2 = x64[..., : d // 2], x64[..., d // 2:]
            same = torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)
            mistakes.append((same, "every token got the same angle: the token at index t is at position "
                                   "offset + t, so each row of x turns by its own angle."))
        for wrong, message in mistakes:
            if close(out, wrong, rtol=1e-4, atol=1e-5):
                hint(message)
        hint("the values differ from the rotation of pair (j, j + d/2) of the token at index t by the "
             f"angle (offset + t) * 10000 ** (-2j / d): {first_difference(out, right)}.", generic=True)
    passed("queries and keys turn by their absolute positions, so q . k depends only on i - j.")


# ----------------------------------------------------------------------------------- 13.4
@checker("Exercise 13.4")
def repeat_heads(my_repeat_kv) -> None:
    """``my_repeat_kv(k, groups)``: k ``(B, h_kv, S, d_head)`` -> ``(B, h_kv * groups, S, d_head)``,
    query head ``i`` reading key/value head ``i // groups``."""
    _require_function(my_repeat_kv, "my_repeat_kv")
    for seed, shape, groups, dtype in [(0, (2, 3, 4, 2), 2, torch.float64), (1, (1, 2, 3, 4), 4, torch.float64),
                                       (2, (2, 4, 2, 2), 1, torch.float64), (3, (1, 2, 5, 3), 3, torch.float32)]:
        g = torch.Generator().manual_seed(seed)
        k = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        k_in = k.clone()
        with _watching({_modern.repeat_kv: "companion.modern.repeat_kv"}) as calls:
            out = my_repeat_kv(k_in, groups)
        if calls:
            hint(f"your function calls {calls[0]}, the function this exercise rebuilds; write it with "
                 "indexing, expand or repeat_interleave.")
        _unchanged(k, k_in, "k")
        B, h_kv, S, d = shape
        out = require_tensor(out, "a tensor")
        if tuple(out.shape) == shape and groups > 1:
            hint(f"the result still has {h_kv} heads: repeat each of them `groups` = {groups} times, to "
                 f"{h_kv * groups} heads, one per query head.")
        if tuple(out.shape) == (B, h_kv * h_kv * groups, S, d) and h_kv > 1:
            hint("repeat each key/value head `groups` times (n_heads / n_kv_heads), not n_heads times.")
        out = _tensor_of(out, k, (B, h_kv * groups, S, d), "a tensor of shape (B, h_kv * groups, S, d_head)")
        right = k.repeat_interleave(groups, dim=1)
        if torch.equal(out, right):
            continue
        if close(out, k.repeat(1, groups, 1, 1)):
            hint("query head i must read key/value head i // groups: heads 0 and 1 share head 0, and so on. "
                 "You tiled the heads (k.repeat gives head i % h_kv); use repeat_interleave or expand a new "
                 "dimension after the heads.")
        hint(f"query head i must read key/value head i // groups: {first_difference(out, right)}.", generic=True)
    passed("each key/value head serves `groups` neighbouring query heads, as in Llama's repeat_kv.")
