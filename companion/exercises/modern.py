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
import re
import sys
from typing import Any, Iterator

import torch
import torch.nn.functional as F

from .. import modern as _modern
from ..norm import RMSNorm as _RMSNorm
from . import _diff, rules
from ._core import checker, close, first_difference, hint, passed, require_tensor

__all__ = ["rms_norm_heads", "swiglu", "rotate_at_offset", "repeat_heads", "gqa_with_cache", "newton_schulz", "muon_step"]


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
        if label not in seen and (name in watched.torch_calls or f"F.{name}" in watched.torch_calls
                                  or label.removeprefix("torch.") in watched.torch_calls):
            seen.append(label)
    for f, label in forbidden.items():  # the course's own functions, seen by the modules called
        module = getattr(f, "__module__", None) or ""
        if module.startswith("companion.") and label not in seen and watched.used_module(module):
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


# ----------------------------------------------------------------------------------- shared by 13.1-13.4
#: The extra classes of a case marked for them: the caller's tensors requiring gradients, and a call
#: under torch.no_grad(). The model calls these functions both ways (training, and decoding).
_GRAD_CLASSES = [("", False, False), (", with inputs that require gradients", True, False),
                 (", under torch.no_grad()", False, True)]


def _rand(g: torch.Generator, shape: tuple, dtype: torch.dtype, scale: float = 1.0, shift: float = 0.0):
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale + shift).to(dtype)


def _differential(fn, name: str, cases: list, reference, text, *, forbidden: dict[Any, str], forbidden_hint: str,
                  mistakes=None, grad_args: tuple[int, ...] = (0,), new_tensor: bool = True) -> None:
    """Run ``fn`` on every case next to ``reference`` (issue 33's differential check).

    ``cases``: ``(label, args, classes)``, where ``classes`` asks for the gradient and no_grad
    variants of that case. Every call gets the state checks of :func:`_diff.call` (grad mode,
    default dtype, random state, requires_grad and .grad of the inputs), the inputs are checked
    unchanged, the result must be a real tensor equal to the reference at the dtype's precision
    (a float32 computation of float64 inputs gets a precision hint), and in the gradient variant
    the gradients with respect to ``grad_args`` must equal the reference's. ``mistakes(got, args,
    label)`` may name a recognized mistake before the generic hint, which names the failing case.
    """
    for index, (label, args, classes) in enumerate(cases):
        for extra, grad, no_grad in _GRAD_CLASSES if classes else _GRAD_CLASSES[:1]:
            where = label + extra
            given: list = []
            with _watching(forbidden) as calls:
                got = _diff.call(fn, args, where, grad=grad_args if grad else False, no_grad=no_grad, name=name,
                                 first=index == 0 and not extra, keep=given)
            if calls:
                hint(f"your function calls {calls[0]}; {forbidden_hint}")
            call_text = text(args)
            for position, (before, after) in enumerate(zip(args, given)):
                if isinstance(before, torch.Tensor) and not torch.equal(before, after.detach()):
                    hint(f"{call_text} changed its argument {position + 1} in place ({where}); compute a new "
                         "tensor instead (the caller still needs the old values).")
            got = _diff.real_tensor(got, call_text)
            expected = reference(*args)
            if new_tensor and got.numel() and isinstance(given[0], torch.Tensor) \
                    and got.untyped_storage().data_ptr() == given[0].untyped_storage().data_ptr():
                hint(f"{call_text} returned x itself, or a view of it ({where}): return a new tensor, so that "
                     "writing into the result never changes the caller's x.")
            if not _diff.same_values(got, expected, where, call_text, precision_hint=False):
                if mistakes is not None and tuple(got.shape) == tuple(expected.shape) and got.dtype == expected.dtype:
                    mistakes(got.detach().double(), args, where)
                _diff.precision(got, expected, where, call_text)
                _diff.generic(got, expected, where, call_text)
            if grad:
                _same_gradients(got, given, args, reference, grad_args, where, call_text, name)


def _same_gradients(got, given, args, reference, grad_args, where, call_text, name) -> None:
    """The gradients through the student's result equal those through the reference."""
    if not got.requires_grad:
        hint(f"{call_text} returns a result that no gradient reaches ({where}): .detach(), torch.no_grad(), "
             f".data or NumPy inside {name} cut the graph, and the model trains through this function.")
    weights = torch.randn(got.shape, generator=torch.Generator().manual_seed(13), dtype=torch.float64).to(got.dtype)
    inputs = [given[i] for i in grad_args]
    try:
        mine = torch.autograd.grad((got * weights).sum(), inputs, allow_unused=True)
    except RuntimeError as exc:
        hint(f"backward through the result of {call_text} fails ({where}): {str(exc).splitlines()[0]}")
    copies = [a.detach().clone().requires_grad_(i in grad_args) if isinstance(a, torch.Tensor) and a.is_floating_point()
              else a for i, a in enumerate(args)]
    with torch.enable_grad():
        ref = reference(*copies)
        theirs = torch.autograd.grad((ref * weights).sum(), [copies[i] for i in grad_args])
    for i, a, b in zip(grad_args, mine, theirs):
        if a is None:
            hint(f"no gradient reaches argument {i + 1} of {call_text} ({where}): part of the computation is cut "
                 "from the graph (.detach(), .data, NumPy or torch.no_grad() inside).")
        tol = dict(rtol=1e-4, atol=1e-5) if b.dtype == torch.float32 else dict(rtol=1e-7, atol=1e-9)
        if not close(a, b, **tol):
            hint(f"the gradient with respect to argument {i + 1} of {call_text} differs from the formula's "
                 f"({where}): {first_difference(a, b, 'grad')}.")


def _named(got64: torch.Tensor, right: torch.Tensor, mistakes: list, label: str, dtype: torch.dtype) -> None:
    """Hint the first mistake whose output the student's matches (and the right answer does not), at
    the precision of the case's dtype (float64 tells apart an eps of 1e-6 in or out of a root)."""
    tol = dict(rtol=1e-9, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    for wrong, message in mistakes:
        if close(got64, wrong, **tol) and not close(wrong, right, **tol):
            hint(f"on {label}: {message}")


# ----------------------------------------------------------------------------------- 13.1
def _rms(x, weight, eps, dim=-1):
    return x / torch.sqrt(x.pow(2).mean(dim, keepdim=True) + eps) * weight


_LIBRARY_RMS = {F.rms_norm: "torch.nn.functional.rms_norm", _RMSNorm.forward: "companion.norm.RMSNorm"}
if hasattr(torch, "rms_norm"):
    _LIBRARY_RMS[torch.rms_norm] = "torch.rms_norm"


def _rms_cases() -> list:
    g = torch.Generator().manual_seed(1301)
    f64, f32 = torch.float64, torch.float32
    cases = []
    for label, shape, eps, dtype, classes in [
            ("the first example, (2, 3, 5, 8)", (2, 3, 5, 8), 1e-6, f64, True),
            ("the first example's shape again, with new values", (2, 3, 5, 8), 1e-6, f64, False),
            ("one token (T = 1), as when decoding", (2, 4, 1, 8), 1e-6, f64, True),
            ("a batch of one with one head", (1, 1, 3, 6), 1e-6, f64, False),
            ("an odd d_head (5)", (2, 2, 3, 5), 1e-6, f64, False),
            ("d_head = 1", (1, 2, 3, 1), 1e-6, f64, False),
            ("a large eps (0.5)", (1, 4, 3, 6), 0.5, f64, False),
            ("float32 inputs", (3, 2, 4, 4), 1e-6, f32, True)]:
        cases.append((label, (_rand(g, shape, dtype, 2.0, 0.7), _rand(g, shape[-1:], dtype), eps), classes))
    x = _rand(g, (2, 3, 4, 8), f64, 2.0)
    x[0, 1, 2] = 0.0
    cases.append(("a token whose head vector is all zeros", (x, _rand(g, (8,), f64), 1e-6), False))
    q = _rand(g, (2, 5, 3, 6), f64, 2.0).transpose(1, 2)  # (B, h, T, d) as the model makes it: not contiguous
    cases.append(("queries as the model makes them (a transposed view, not contiguous)", (q, _rand(g, (6,), f64), 1e-6),
                  False))
    return cases


def _rms_mistakes(got, args, label) -> None:
    x, w, eps = args
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
        (_rms(x64, w64, 0.0), "`eps` is missing: sqrt(mean(x**2) + eps)."),
        (_rms(x64, w64, 1e-5), "use the `eps` you are given, not a constant of your own."),
        (_rms(x64, w64, 1e-6), "use the `eps` you are given, not a constant of your own."),
    ]
    _named(got, _rms(x64, w64, eps), mistakes, label, x.dtype)


@checker("Exercise 13.1")
def rms_norm_heads(my_rms_norm) -> None:
    """``my_rms_norm(x, weight, eps)``: x ``(B, h, T, d_head)``, weight ``(d_head,)`` -> the same
    shape, each head's vector of every token divided by its root mean square, times ``weight``."""
    _require_function(my_rms_norm, "my_rms_norm")
    _differential(my_rms_norm, "my_rms_norm", _rms_cases(), _rms,
                  lambda a: f"my_rms_norm(x {tuple(a[0].shape)}, weight, eps={a[2]:g})",
                  forbidden=_LIBRARY_RMS, mistakes=_rms_mistakes, grad_args=(0, 1),
                  forbidden_hint="the exercise is to write RMSNorm from its formula with tensor arithmetic: "
                                 "x / sqrt(mean(x**2 over the last dimension) + eps) * weight.")
    passed("every head's query or key vector is scaled to a root mean square of 1, then by weight.")


# ----------------------------------------------------------------------------------- 13.2
def _swiglu(x, wg, wu, wd):
    return (F.silu(x @ wg) * (x @ wu)) @ wd


def _swiglu_cases() -> list:
    g = torch.Generator().manual_seed(1302)
    cases = []
    for label, (B, T, d, d_ff), dtype, classes in [
            ("the first example, d = 6 and d_ff = 10", (2, 5, 6, 10), torch.float64, True),
            ("the first example's shapes again, with new values", (2, 5, 6, 10), torch.float64, False),
            ("d_ff equal to d (square weights)", (2, 3, 6, 6), torch.float64, True),
            ("d_ff smaller than d", (2, 3, 8, 3), torch.float64, False),
            ("a batch of one token", (1, 1, 4, 7), torch.float64, False),
            ("d = 1", (2, 3, 1, 5), torch.float64, False),
            ("float32 inputs", (2, 2, 8, 12), torch.float32, True)]:
        cases.append((label, (_rand(g, (B, T, d), dtype, 1.5), _rand(g, (d, d_ff), dtype), _rand(g, (d, d_ff), dtype),
                              _rand(g, (d_ff, d), dtype)), classes))
    return cases


def _swiglu_mistakes(got, args, label) -> None:
    x64, g64, u64, d64 = (t.double() for t in args)
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
    ]
    if g64.shape[0] == g64.shape[1]:  # only square weights can be used the other way round
        mistakes += [
            ((F.silu(x64 @ g64.T) * (x64 @ u64.T)) @ d64.T,
             "the weights are used as given, x @ w (row vectors), not transposed as nn.Linear stores them."),
            ((F.silu(a) * b) @ d64.T, "w_down is used as given: (...) @ w_down, not its transpose."),
            ((F.silu(b) * a) @ d64, "the SiLU goes on the gate, x @ w_gate; you swapped w_gate and w_up."),
            ((F.silu(a) * b), "multiply by w_down at the end."),
        ]
    _named(got, _swiglu(x64, g64, u64, d64), mistakes, label, args[0].dtype)


@checker("Exercise 13.2")
def swiglu(my_swiglu) -> None:
    """``my_swiglu(x, w_gate, w_up, w_down)``: x ``(B, T, d)``, w_gate and w_up ``(d, d_ff)``,
    w_down ``(d_ff, d)`` -> ``(silu(x @ w_gate) * (x @ w_up)) @ w_down``, shape ``(B, T, d)``."""
    _require_function(my_swiglu, "my_swiglu")
    _differential(my_swiglu, "my_swiglu", _swiglu_cases(), _swiglu,
                  lambda a: f"my_swiglu(x {tuple(a[0].shape)}, w_gate {tuple(a[1].shape)}, w_up, w_down)",
                  forbidden={}, forbidden_hint="", mistakes=_swiglu_mistakes, grad_args=(0, 1, 2, 3))
    passed("a gated feed-forward: SiLU of one branch scales the other, then w_down.")


# ----------------------------------------------------------------------------------- 13.3
def _rotate(x, offset, *, base=10000.0, layout="halves", sign=1.0, exponent=2.0, start=0, angle_dtype=None):
    """The rotation and its classic mistakes, in x's dtype (the angles in ``angle_dtype`` when given)."""
    *_, T, d = x.shape
    pos = torch.arange(T, dtype=torch.float64) + offset + start  # (T,)
    freq = base ** (-exponent * torch.arange(d // 2, dtype=torch.float64) / d)  # (d/2,)
    if angle_dtype is not None:  # positions and frequencies in float32, as Hugging Face computes them
        ang = (sign * pos.to(angle_dtype)[:, None] * freq.to(angle_dtype)[None, :])
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    else:
        ang = sign * pos[:, None] * freq[None, :]  # (T, d/2)
        cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    if layout == "interleaved":
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2], out[..., 1::2] = x1 * cos - x2 * sin, x1 * sin + x2 * cos
        return out
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


def _rotate_cases() -> list:
    g = torch.Generator().manual_seed(1303)
    f64 = torch.float64
    cases = []
    for label, shape, offset, dtype, classes in [
            ("the first example, offset 7", (2, 3, 5, 8), 7, f64, True),
            ("the first example's shape again, at offset 3", (2, 3, 5, 8), 3, f64, False),
            ("offset 0 (an empty cache)", (1, 2, 4, 6), 0, f64, False),
            ("one token at offset 0", (1, 1, 1, 4), 0, f64, False),
            ("one token (T = 1) at offset 50, as when decoding", (2, 2, 1, 8), 50, f64, True),
            ("one token at offset 51, the next decoding step", (2, 2, 1, 8), 51, f64, False),
            ("d_head = 2", (1, 2, 3, 2), 5, f64, False),
            ("positions past 1000", (2, 2, 3, 16), 1000, f64, False),
            ("positions past 4000", (1, 1, 3, 16), 4001, f64, False),
            ("float32 inputs", (1, 2, 6, 8), 3, torch.float32, True)]:
        cases.append((label, (_rand(g, shape, dtype), offset), classes))
    return cases


def _rotate_mistakes(got, args, label) -> None:
    x, offset = args
    x64 = x.double()
    T = x.shape[-2]
    right = _rotate(x64, offset)
    if x.dtype == torch.float64 and close(got, _rotate(x64, offset, angle_dtype=torch.float32), rtol=1e-6, atol=1e-6):
        hint(f"on {label}: your angles are computed in float32 (a torch.arange or a frequency table without "
             "dtype=): at large positions they lose digits. Compute the positions and the frequencies in x's "
             "dtype (Hugging Face computes them in float32; this exercise asks for x's precision).")
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
    if T > 1:
        d = x.shape[-1]
        ang = float(offset) * 10000.0 ** (-2 * torch.arange(d // 2, dtype=torch.float64) / d)
        x1, x2 = x64[..., : d // 2], x64[..., d // 2:]
        same = torch.cat([x1 * ang.cos() - x2 * ang.sin(), x1 * ang.sin() + x2 * ang.cos()], -1)
        mistakes.append((same, "every token got the same angle: the token at index t is at position "
                               "offset + t, so each row of x turns by its own angle."))
    _named(got, right, mistakes, label, x.dtype)


@checker("Exercise 13.3")
def rotate_at_offset(my_rotate) -> None:
    """``my_rotate(x, offset)``: x ``(B, h, T, d_head)`` -> the same shape, the token at index
    ``t`` rotated as position ``offset + t`` (halves layout, base 10000)."""
    _require_function(my_rotate, "my_rotate")
    _differential(my_rotate, "my_rotate", _rotate_cases(), _rotate,
                  lambda a: f"my_rotate(x {tuple(a[0].shape)}, offset={a[1]})",
                  forbidden={_modern.rotate: "companion.modern.rotate"}, mistakes=_rotate_mistakes,
                  forbidden_hint="the function this exercise rebuilds; write the rotation with cos and sin of "
                                 "(offset + t) * base ** (-2j / d_head).")
    passed("queries and keys turn by their absolute positions, so q . k depends only on i - j.")


# ----------------------------------------------------------------------------------- 13.4
def _repeat(k, groups):
    return k.repeat_interleave(groups, dim=1)


def _repeat_cases() -> list:
    g = torch.Generator().manual_seed(1304)
    f64 = torch.float64
    cases = []
    for label, shape, groups, dtype, classes in [
            ("the first example, 3 key/value heads, groups 2", (2, 3, 4, 2), 2, f64, True),
            ("the first example's shape again, with new values", (2, 3, 4, 2), 2, f64, False),
            ("one key/value head (multi-query attention), groups 4", (2, 1, 4, 3), 4, f64, True),
            ("a cache of one position (S = 1)", (2, 2, 1, 4), 3, f64, False),
            ("a batch of one", (1, 2, 3, 4), 4, f64, False),
            ("groups = 1", (2, 4, 2, 2), 1, f64, False),
            ("d_head = 1", (2, 2, 3, 1), 2, f64, False),
            ("float32 keys", (1, 2, 5, 3), 3, torch.float32, True)]:
        cases.append((label, (_rand(g, shape, dtype), groups), classes))
    k = _rand(g, (2, 5, 3, 4), f64).transpose(1, 2)  # (B, h_kv, S, d) as the model makes it: not contiguous
    cases.append(("keys as the model makes them (a transposed view, not contiguous)", (k, 2), False))
    return cases


def _repeat_mistakes(got, args, label) -> None:
    k, groups = args
    if groups > 1 and k.shape[1] > 1 and close(got, k.double().repeat(1, groups, 1, 1)):
        hint(f"on {label}: query head i must read key/value head i // groups: heads 0 and 1 share head 0, and "
             "so on. You tiled the heads (k.repeat gives head i % h_kv); use repeat_interleave or expand a new "
             "dimension after the heads.")


@checker("Exercise 13.4")
def repeat_heads(my_repeat_kv) -> None:
    """``my_repeat_kv(k, groups)``: k ``(B, h_kv, S, d_head)`` -> ``(B, h_kv * groups, S, d_head)``,
    query head ``i`` reading key/value head ``i // groups``."""
    _require_function(my_repeat_kv, "my_repeat_kv")
    # the shapes' own mistakes first, on the first example (they are clearer than a value difference)
    k = torch.randn(2, 3, 4, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with _watching({_modern.repeat_kv: "companion.modern.repeat_kv"}) as calls:
        out = _diff.call(my_repeat_kv, (k, 2), "the first example", name="my_repeat_kv", first=True)
    if calls:
        hint(f"your function calls {calls[0]}, the function this exercise rebuilds; write it with "
             "indexing, expand or repeat_interleave.")
    if isinstance(out, torch.Tensor) and tuple(out.shape) == (2, 3, 4, 2):
        hint("the result still has 3 heads: repeat each of them `groups` = 2 times, to 6 heads, one per "
             "query head.")
    if isinstance(out, torch.Tensor) and tuple(out.shape) == (2, 18, 4, 2):
        hint("repeat each key/value head `groups` times (n_heads / n_kv_heads), not n_heads times.")
    # a view of k is allowed: the text asks for "a tensor" without changing k, as torch's expand gives
    _differential(my_repeat_kv, "my_repeat_kv", _repeat_cases(), _repeat,
                  lambda a: f"my_repeat_kv(k {tuple(a[0].shape)}, groups={a[1]})",
                  forbidden={_modern.repeat_kv: "companion.modern.repeat_kv"}, mistakes=_repeat_mistakes,
                  new_tensor=False,
                  forbidden_hint="the function this exercise rebuilds; write it with indexing, expand or "
                                 "repeat_interleave.")
    passed("each key/value head serves `groups` neighbouring query heads, as in Llama's repeat_kv.")


def _gqa_chunk(attn, x, past, *, offset=True, mask="right", tiled=False, scale=None, o_proj=True,
               keep_repeated=False, append=True):
    """One cached call of grouped-query attention, right or with one classic mistake, in x's dtype."""
    B, T, _ = x.shape
    h, h_kv, d = attn.n_heads, attn.n_kv_heads, attn.d_head
    S = 0 if past is None else past[0].shape[2]
    q = attn.q_proj(x).view(B, T, h, d).transpose(1, 2)  # (B, h, T, d)
    k = attn.k_proj(x).view(B, T, h_kv, d).transpose(1, 2)  # (B, h_kv, T, d)
    v = attn.v_proj(x).view(B, T, h_kv, d).transpose(1, 2)
    start = S if offset else 0
    q, k = _modern.rotate(q, offset=start), _modern.rotate(k, offset=start)
    groups = h // h_kv

    def rep(t):
        return t.repeat(1, groups, 1, 1) if tiled else t.repeat_interleave(groups, dim=1)

    if keep_repeated:  # the cache holds the repeated heads
        k, v = rep(k), rep(v)
    if past is not None:
        k_all, v_all = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
    else:
        k_all, v_all = k, v
    kk, vv = (k_all, v_all) if keep_repeated else (rep(k_all), rep(v_all))
    scores = q @ kk.transpose(-2, -1) / math.sqrt(scale or d)  # (B, h, T, S + T)
    allowed = {"right": torch.ones(T, S + T, dtype=torch.bool).tril(S),
               "top-left": torch.ones(T, S + T, dtype=torch.bool).tril(0),
               "none": torch.ones(T, S + T, dtype=torch.bool)}[mask]
    w = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    y = (w @ vv).transpose(1, 2).reshape(B, T, h * d)
    return (attn.o_proj(y) if o_proj else y), ((k_all, v_all) if append else (k, v))


_CALLS_LAYER = re.compile(r"(?<![\w.])attn\s*\(|\.forward\s*\(")


def _run_chunks(fn, attn, x, splits):
    """Feed x in pieces of ``splits`` tokens through ``fn(attn, piece, past)``; the outputs
    concatenated along the sequence and the last cache."""
    outs, past, start = [], None, 0
    for n in splits:
        y, past = fn(attn, x[:, start:start + n], past)
        outs.append(y)
        start += n
    return torch.cat(outs, 1), past


@checker("Exercise 13.5", companion_given=True)
def gqa_with_cache(my_gqa_cached) -> None:
    """``my_gqa_cached(attn, x, past)``: attn a GroupedQueryAttention, x ``(B, T, d_model)`` the new
    tokens, past None or ``(k, v)`` of shape ``(B, h_kv, S, d_head)`` (keys rotated) -> ``(y, (k, v))``
    with y ``(B, T, d_model)`` and the cache grown to ``S + T`` positions; fed a sequence in any
    pieces, the outputs equal ``attn(whole sequence)``."""
    _require_function(my_gqa_cached, "my_gqa_cached")
    cases = [  # (seed, d_model, heads, kv heads, B, splits, dtype)
        (0, 16, 4, 2, 1, [7], torch.float64), (1, 16, 4, 2, 1, [1] * 5, torch.float64),
        (2, 24, 6, 2, 2, [3, 4], torch.float64), (3, 16, 4, 1, 1, [2, 1, 4], torch.float64),
        (4, 16, 4, 4, 2, [5, 1, 1], torch.float64), (5, 16, 4, 2, 1, [1, 6], torch.float32)]
    for seed, d_model, h, h_kv, B, splits, dtype in cases:
        torch.manual_seed(1000 + seed)  # the checker's own weights; the global generator is restored below
        state = torch.get_rng_state()
        attn = _modern.GroupedQueryAttention(d_model, h, h_kv).to(dtype)
        g = torch.Generator().manual_seed(seed)
        L = sum(splits)
        x = torch.randn(B, L, d_model, generator=g, dtype=torch.float64).to(dtype)
        torch.set_rng_state(state)
        label = (f"batch {B}, {h} query heads and {h_kv} key/value heads, {L} tokens fed as pieces of "
                 f"{splits}, {dtype}")
        with torch.no_grad():
            whole = attn(x)  # the companion's attention on the whole sequence, no cache
        # the layer itself must not be called: read from the source (the module travels to the
        # grader's kernel, so no spy is attached to it)
        text = rules.source_of(my_gqa_cached) or ""
        calls = ["GroupedQueryAttention's own forward (attn(...))"] if _CALLS_LAYER.search(text) else []
        with torch.no_grad():
            outs, past, start = [], None, 0
            for n in splits:
                result = my_gqa_cached(attn, x[:, start:start + n].clone(), past)
                if not isinstance(result, tuple) or len(result) != 2 or not isinstance(result[1], tuple) \
                        or len(result[1]) != 2:
                    hint("return a pair (y, (k, v)): the output of the new tokens and the grown cache, "
                         f"keys and values (got {type(result).__name__}).")
                y, past = result
                y = _tensor_of(y, x, (B, n, d_model), "a tensor y of shape (B, T, d_model)")
                for name, t in zip(("k", "v"), past):
                    t = require_tensor(t, f"the cached {name}, a tensor")
                    want = (B, h_kv, start + n, attn.d_head)
                    if tuple(t.shape) == (B, h, start + n, attn.d_head) and h != h_kv:
                        hint(f"your cache stores {h} heads: store the {h_kv} shared key/value heads only (that is "
                             "the point of grouped-query attention) and repeat them when computing the scores.")
                    if tuple(t.shape) == (B, h_kv, n, attn.d_head) and start:
                        hint("the cache you return holds only the new tokens' keys and values: append them to "
                             "`past` (torch.cat along the positions, dim 2) and return the whole cache.")
                    if tuple(t.shape) != want:
                        hint(f"the cached {name} must have shape (B, h_kv, S + T, d_head) = {want} after "
                             f"{start + n} tokens (got {tuple(t.shape)}); {label}.", generic=True)
                outs.append(y)
                start += n
        if calls:
            hint(f"your function calls {calls[0]}; the exercise is to write the cached attention from the "
                 "projections attn.q_proj, k_proj, v_proj and o_proj.")
        out = torch.cat(outs, 1)
        rtol = 1e-4 if dtype == torch.float32 else 1e-6
        with torch.no_grad():
            right_k, right_v = _run_chunks(_gqa_chunk, attn, x, splits)[1][:2]
        if close(out, whole, rtol=rtol, atol=1e-5) and close(past[0], right_k, rtol=rtol, atol=1e-5):
            continue
        with torch.no_grad():
            mistakes = [
                (dict(offset=False), "the new tokens were rotated as if they started at position 0: rotate "
                                     "their queries and keys at offset S, the number of cached tokens."),
                (dict(mask="top-left"), "the causal mask ignores the cache: new token t sits at position S + t "
                                        "and sees keys 0 .. S + t, so the mask of shape (T, S + T) is "
                                        "tril(diagonal=S), not tril()."),
                (dict(mask="none"), "a new token sees the new tokens after it: with several new tokens, mask the "
                                    "scores so that token t sees keys 0 .. S + t only."),
                (dict(tiled=True), "query head i must read key/value head i // groups; you tiled the heads "
                                   "(head i % h_kv, as k.repeat gives)."),
                (dict(scale=d_model), "scale the scores by sqrt(d_head), the size of one head's vectors, "
                                      "not sqrt(d_model)."),
                (dict(o_proj=False), "the output projection attn.o_proj is missing after the heads are joined."),
            ]
            for kw, message in mistakes:
                wrong = _run_chunks(lambda a, xx, p: _gqa_chunk(a, xx, p, **kw), attn, x, splits)[0]
                if close(out, wrong, rtol=1e-4, atol=1e-5) and not close(wrong, whole, rtol=1e-4, atol=1e-5):
                    hint(message + f" ({label})")
        if close(out, whole, rtol=1e-4, atol=1e-5) and close(past[0], right_v, rtol=rtol, atol=1e-5):
            hint(f"the outputs are right, but the cache you return is (values, keys) ({label}): return "
                 "(k, v), keys first, as `past` comes in.")
        if close(out, whole, rtol=1e-4, atol=1e-5) and not close(past[0], right_k, rtol=rtol, atol=1e-5) and close(
                past[0].sort(dim=2).values, right_k.sort(dim=2).values, rtol=rtol, atol=1e-5):
            hint(f"the outputs are right, but the cached keys are in another order ({label}): append the new keys "
                 "after the cached ones (torch.cat([past_k, k], dim=2)), so that position i stays at index i.")
        if close(out, whole, rtol=1e-4, atol=1e-5):
            hint("the outputs are right, but the cached keys differ from the keys rotated at their own "
                 f"positions: store each key once, already rotated ({label}; "
                 f"{first_difference(past[0], right_k, 'k')}).", generic=True)
        hint(f"fed as pieces of {splits} tokens, your outputs differ from the companion's attention on the whole "
             f"sequence without a cache ({label}): {first_difference(out, whole)}.", generic=True)
    passed("fed in any pieces, your cached grouped-query attention equals the attention of the whole sequence.")


# ----------------------------------------------------------------------------------- 13.6
def _ns(g, steps, *, normalize=True, coefficients=None):
    a, b, c = coefficients or _modern.NEWTON_SCHULZ
    wide = g.shape[0] <= g.shape[1]
    x = g if wide else g.T
    if normalize:
        x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        s = x @ x.T
        x = a * x + (b * s + c * s @ s) @ x
    return x if wide else x.T


_LIBRARY_NS = {_modern.orthogonalize: "companion.modern.orthogonalize", torch.linalg.svd: "torch.linalg.svd",
               torch.svd: "torch.svd", torch.linalg.qr: "torch.linalg.qr", torch.linalg.matrix_power: "matrix_power"}


@checker("Exercise 13.6")
def newton_schulz(my_orthogonalize) -> None:
    """``my_orthogonalize(g, steps)``: g ``(m, n)`` -> ``(m, n)``, ``steps`` iterations of Muon's
    quintic Newton-Schulz on ``g / (||g||_F + 1e-7)``, on the wide orientation (a tall ``g`` is
    transposed first and the result transposed back)."""
    _require_function(my_orthogonalize, "my_orthogonalize")
    earlier: dict = {}  # results by (shape, steps): a stale one returned again names itself
    for seed, shape, steps, dtype, scale in [
            (0, (4, 6), 5, torch.float64, 3.0), (1, (7, 3), 5, torch.float64, 3.0),
            (2, (5, 5), 1, torch.float64, 3.0), (3, (1, 4), 3, torch.float64, 3.0),
            (4, (6, 2), 2, torch.float64, 3.0), (5, (3, 8), 5, torch.float32, 3.0),
            (6, (4, 6), 5, torch.float64, 2.0),  # a second call with the same shape and steps, new values
            (7, (3, 5), 2, torch.float64, 0.0),  # a zero gradient: the + 1e-7 keeps it zero (no 0 / 0)
            (8, (5, 3), 1, torch.float64, 1e-7)]:  # a tiny gradient, whose norm is about the 1e-7
        g = torch.Generator().manual_seed(seed)
        m = torch.randn(shape, generator=g, dtype=torch.float64) * torch.logspace(-1, 0, shape[0],
                                                                                   dtype=torch.float64)[:, None]
        m = (m * scale).to(dtype)
        m_in = m.clone()
        with _watching(_LIBRARY_NS) as calls:
            out = my_orthogonalize(m_in, steps)
        if calls:
            hint(f"your function calls {calls[0]}; the exercise is the Newton-Schulz iteration itself, with "
                 "matrix products only.")
        _unchanged(m, m_in, "g")
        out = _tensor_of(out, m, shape, "a tensor of g's shape")
        right = _ns(m.double(), steps)
        label = (f"a {'tall' if shape[0] > shape[1] else 'wide' if shape[0] < shape[1] else 'square'} {shape} matrix, "
                 f"{steps} steps" + (", all zeros" if scale == 0 else f", norm {m.norm().item():.2g}" if scale < 1 else ""))
        stale = any(close(out, before) for before in earlier.get((shape, steps), []))
        earlier.setdefault((shape, steps), []).append(out.detach().clone())
        if close(out, right.to(dtype), rtol=1e-4 if dtype == torch.float32 else 1e-7, atol=1e-5 * min(scale, 1.0)):
            continue
        m64 = m.double()
        if stale:
            hint(f"on {label}, called again with new values, your function returned the result of an earlier call "
                 "with the same shape: compute it from the g of each call.")
        if scale == 0 and not torch.isfinite(out).all():
            hint(f"your result is not finite on {label}: g / ||g||_F is 0 / 0 there; divide by the norm plus 1e-7, "
                 "as the text says, and a zero gradient stays zero.")
        if scale < 1 and close(out, _ns(m64 / m64.norm(), steps, normalize=False), rtol=1e-6, atol=1e-9):
            hint(f"on {label} your result is that of g / ||g||_F: divide by the norm plus 1e-7, as the text says "
                 "(for a gradient this small the 1e-7 matters).")
        mistakes = [
            (_ns(m64, steps, normalize=False), "divide g by its Frobenius norm (plus 1e-7) first: the "
                                               "iteration converges only when every singular value is <= 1."),
            (_ns(m64, steps, coefficients=(3.4445, 4.7750, 2.0315)),
             "the second coefficient is negative: (a, b, c) = (3.4445, -4.7750, 2.0315)."),
            (_ns(m64, steps, coefficients=(1.5, -0.5, 0.0)),
             "use Muon's quintic coefficients (3.4445, -4.7750, 2.0315), not the cubic (1.5, -0.5)."),
            (_ns(m64, steps - 1) if steps > 1 else m64 * 0 + float("nan"),
             "you did one step too few: run the update `steps` times."),
            (_ns(m64, steps + 1), "you did one step too many: run the update `steps` times."),
        ]
        for wrong, message in mistakes:
            if close(out, wrong, rtol=1e-4, atol=1e-5):
                hint(message + f" ({label})")
        blown = [message for wrong, message in mistakes  # not finite where exactly one mistake is not finite
                 if not torch.isfinite(out).all() and torch.equal(torch.isfinite(out), torch.isfinite(wrong))]
        if blown:
            hint(f"your result is not finite ({label}), as with " + ("this mistake: " if len(blown) == 1 else
                 "each of these mistakes: ") + " Or: ".join(blown))
        if not torch.isfinite(out).all() or out.abs().max() > 1e6:
            hint(f"your result has values of {out.abs().max().item():.3g} or not finite ({label}), where the "
                 "iteration on g / (||g||_F + 1e-7) stays near [-1, 1]: check each step, "
                 "X <- a X + (b A + c A @ A) @ X with A = X @ X.T (matrix products).", generic=True)
        hint(f"the values differ from {steps} Newton-Schulz steps ({label}): {first_difference(out, right)}.",
             generic=True)
    passed("a few matrix products push every singular value towards 1: the update's directions all move alike.")


# ----------------------------------------------------------------------------------- 13.7
@checker("Exercise 13.7")
def muon_step(my_muon_step) -> None:
    """``my_muon_step(w, grad, buf, lr, momentum, weight_decay)`` -> ``(new_w, new_buf)``: one step of
    :class:`companion.modern.Muon` for one matrix, as new tensors."""
    _require_function(my_muon_step, "my_muon_step")
    for seed, shape, lr, beta, wd, dtype in [(0, (6, 4), 0.02, 0.95, 0.0, torch.float64),
                                             (1, (3, 8), 0.05, 0.9, 0.0, torch.float64),
                                             (2, (5, 5), 0.02, 0.95, 0.1, torch.float64),
                                             (3, (8, 2), 0.1, 0.5, 0.01, torch.float64),
                                             (4, (4, 6), 0.02, 0.95, 0.0, torch.float32)]:
        g = torch.Generator().manual_seed(seed)
        label = (f"a {'tall' if shape[0] > shape[1] else 'wide' if shape[0] < shape[1] else 'square'} {shape} "
                 f"matrix, lr={lr}, momentum={beta}, weight_decay={wd}, {dtype}")
        w0 = torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
        grads = [torch.randn(shape, generator=g, dtype=torch.float64).to(dtype) for _ in range(3)]
        ref = torch.nn.Parameter(w0.clone())
        opt = _modern.Muon([ref], lr=lr, momentum=beta, weight_decay=wd)
        w, buf = w0.clone(), torch.zeros_like(w0)
        for i, grad in enumerate(grads):  # three steps: the momentum buffer carries over
            ref.grad = grad.clone()
            opt.step()
            right_buf = opt.state[ref]["momentum_buffer"]
            args = (w.clone(), grad.clone(), buf.clone())
            result = my_muon_step(*args, lr, beta, wd)
            for name, before, after in zip(("w", "grad", "buf"), (w, grad, buf), args):
                _unchanged(before, after, name)
            if not isinstance(result, tuple) or len(result) != 2:
                hint(f"return a pair (new_w, new_buf) (got {type(result).__name__}).")
            new_w = _tensor_of(result[0], w0, shape, "new_w, a tensor of w's shape")
            new_buf = _tensor_of(result[1], w0, shape, "new_buf, a tensor of w's shape")
            rtol = 1e-4 if dtype == torch.float32 else 1e-7
            if close(new_buf, right_buf, rtol=rtol, atol=1e-6) and close(new_w, ref.detach(), rtol=rtol, atol=1e-6):
                w, buf = new_w.detach().clone(), new_buf.detach().clone()
                continue
            w64, g64, b64 = w.double(), grad.double(), buf.double()
            m_right = b64 + (1 - beta) * (g64 - b64)
            scale = max(1.0, shape[0] / shape[1]) ** 0.5

            def step(update, *, s=scale, decay=True, m=m_right):
                base = w64 * (1 - lr * wd) if decay else w64
                return base - lr * s * _ns(update, 5), m

            nesterov = g64 + beta * (m_right - g64)
            mistakes = [
                (b64 * beta + g64, None, "the buffer is an average: m = momentum * m + (1 - momentum) * grad "
                                         "(buf.lerp(grad, 1 - momentum)), not momentum * m + grad."),
                (None, step(m_right)[0], "you orthogonalized the updated buffer m' (or, the same numbers, a "
                                         "look-ahead with the old buffer, (1 - momentum) * grad + momentum * m): "
                                         "Muon uses Nesterov momentum, orthogonalize (1 - momentum) * grad + "
                                         "momentum * m' with m' the buffer just updated."),
                (None, step(g64)[0], "the momentum is missing from the update: orthogonalize "
                                     "(1 - momentum) * grad + momentum * m, with m the updated buffer."),
                (None, step(nesterov, s=1.0)[0], "scale the step by sqrt(max(1, rows / cols)): a tall matrix "
                                                 "moves further."),
                (None, step(nesterov, s=(shape[0] / shape[1]) ** 0.5)[0],
                 "the scale is sqrt(max(1, rows / cols)): a wide matrix keeps 1, it is not shrunk."),
                (None, step(nesterov, decay=False)[0], "apply the decoupled weight decay first: "
                                                       "w * (1 - lr * weight_decay), then the update."),
                (None, w64 * (1 - lr * wd) + lr * scale * _ns(nesterov, 5),
                 "the update is subtracted: w - lr * scale * orthogonalize(update)."),
            ]
            for wrong_buf, wrong_w, message in mistakes:
                if wrong_buf is not None and close(new_buf, wrong_buf, rtol=1e-4, atol=1e-6):
                    hint(message + f" ({label}, step {i + 1})")
            named = [message for wrong_buf, wrong_w, message in mistakes
                     if wrong_w is not None and close(new_w, wrong_w, rtol=1e-4, atol=1e-6)
                     and not close(wrong_w, ref.detach().double(), rtol=1e-4, atol=1e-6)]
            if len(named) == 1:
                hint(named[0] + f" ({label}, step {i + 1})")
            if len(named) > 1 and i < len(grads) - 1:  # several mistakes give this step: the next one tells
                w, buf = ref.detach().clone(), right_buf.detach().clone()
                continue
            if not close(new_buf, right_buf, rtol=rtol, atol=1e-6):
                hint(f"the new momentum buffer differs from Muon's after step {i + 1} ({label}): "
                     f"{first_difference(new_buf, right_buf, 'new_buf')}.", generic=True)
            hint(f"the new weights differ from companion.modern.Muon's after step {i + 1} ({label}): "
                 f"{first_difference(new_w, ref.detach(), 'new_w')}.", generic=True)
    passed("three steps of momentum, Nesterov look-ahead, orthogonalization and scale equal companion.modern.Muon's.")
