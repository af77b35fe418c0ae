"""Checkers for chapter 4, *Layer normalization*.

Each exercise goes one step beyond the chapter's row-by-row normalization:

* 4.1 ``my_layer_norm_channels_first(x, weight, bias, eps)``: LayerNorm of a ``(B, d, T)`` tensor, the
  layout the companion's ``LayerNorm`` refuses (features in the middle);
* 4.2 ``my_masked_batch_norm(x, mask, eps)``: batch statistics over the real tokens of a padded
  batch only, padded positions set to 0;
* 4.3 ``my_rms_norm_half(x, weight, eps)``: RMSNorm of a float16 or bfloat16 tensor, computed in
  float32 (the squares of float16 features above 256 overflow) and returned in the input's dtype.

Every checker is a differential test: the student's function and the reference run on inputs
generated per class (a batch of one, odd sizes, one feature, one position, constant rows, both
float dtypes, a caller's tensor that requires grad, a call under ``no_grad``), with fixed seeds and
one fresh draw. The call must leave its inputs, their ``requires_grad`` and ``.grad``, the grad mode
and torch's random state as they were. A wrong output is compared with the classic mistakes (the
wrong axis, padding in the statistics, the unbiased variance, ``eps`` outside the square root,
float16 arithmetic...), and the hint names the mistake and the class of input that showed it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ._core import (unseeded_rng, StudentError, checker, describe, first_difference, hint, library, passed, require_graph, source_facts,
                    uses_companion)
from .rules import watch

__all__ = ["layer_norm_channels_first", "masked_batch_norm", "rms_norm_half"]

#: The library's normalizations (canonical names of rules.canonical): the exercises ask for
#: tensor arithmetic, so F.layer_norm, nn.LayerNorm, F.batch_norm, nn.RMSNorm... are refused.
_LIBRARY_NORMS = ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm",
                  "batch_norm", "native_batch_norm", "rms_norm", "_fused_rms_norm")


# --------------------------------------------------------------------------- the shared engine
@dataclass
class Case:
    """One generated input: the class it stands for, the arguments, and how to call."""

    name: str
    args: tuple
    no_grad: bool = False
    extra: dict = field(default_factory=dict)


def _state(args: tuple) -> tuple:
    return ([(a.requires_grad, None if a.grad is None else a.grad.clone()) for a in args if isinstance(a, torch.Tensor)],
            torch.is_grad_enabled())


def _run(fn: Callable, case: Case, attempted: list[bool]) -> Any:
    """Call the student's function on ``case`` and check the state around the call."""
    before, rng = _state(case.args), unseeded_rng()
    try:
        with watch() as seen:
            if case.no_grad:
                with torch.no_grad():
                    out = fn(*case.args)
                    grad_mode_inside = torch.is_grad_enabled()
            else:
                out = fn(*case.args)
                grad_mode_inside = torch.is_grad_enabled()
    except StudentError as raised:
        if isinstance(raised.error, NotImplementedError):
            if any(attempted):
                hint(f"your function raised NotImplementedError on {case.name}: that branch is not written yet "
                     "(other calls returned).")
            _UNWRITTEN.append((case.name, raised))  # "not attempted" only if every call raises it
            return _SKIP
        raise
    attempted.append(True)
    calls = seen.called(*_LIBRARY_NORMS) + uses_companion(seen, source_facts(fn))
    if calls:
        hint(f"your function calls {library(calls[0])}; the exercise is to write the normalization with tensor "
             "arithmetic (mean, var or pow, sqrt), not with the library's or the course's layer.")
    after = _state(case.args)
    if case.no_grad and grad_mode_inside:
        hint(f"on {case.name}, called under torch.no_grad(), your function switched gradients back on "
             "(torch.set_grad_enabled(True) or enable_grad): leave the grad mode as the caller set it.")
    if after[1] != before[1]:
        hint(f"on {case.name}, your function left the grad mode changed ({before[1]} before the call, "
             f"{after[1]} after): restore it, or use a `with torch.no_grad():` block.")
    for (rg0, g0), (rg1, g1) in zip(before[0], after[0]):
        if rg0 != rg1:
            hint(f"on {case.name}, your function changed requires_grad of an input (requires_grad_ on the "
                 "caller's tensor): work on a copy, or leave the flag alone.")
        if (g0 is None) != (g1 is None) or (g0 is not None and not torch.equal(g0, g1)):
            hint(f"on {case.name}, your function changed the .grad of an input (a backward() inside the "
                 "function): a normalization only computes its output.")
    if not torch.equal(rng, torch.get_rng_state()):
        hint(f"on {case.name}, your function drew random numbers from torch's global generator; a "
             "normalization is deterministic and needs none.")
    return out


_SKIP = object()
_UNWRITTEN: list = []


def _finish(attempted: list[bool]) -> None:
    """After the loop: every call raised NotImplementedError -> not attempted; some did -> that branch."""
    unwritten, _UNWRITTEN[:] = list(_UNWRITTEN), []
    if unwritten and any(attempted):
        hint(f"your function raised NotImplementedError on {unwritten[0][0]}: that branch is not written yet "
             "(other calls returned).")
    if unwritten:
        raise unwritten[0][1]


def _as_tensor(out: Any, case: Case, shape: tuple, dtype: torch.dtype | None = None) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        hint(f"your function should return a tensor; on {case.name} it returned {describe(out)} "
             "(wrong type).")
    if out.is_meta or out.layout != torch.strided or out.is_complex() or out.dtype == torch.bool:
        hint(f"your function should return a real tensor of numbers; on {case.name} it returned {describe(out)} "
             "(wrong type).")
    if tuple(out.shape) != shape:
        if tuple(out.shape) == shape[:-2] + shape[:-3:-1]:
            hint(f"on {case.name} the output is transposed: it must have the input's shape {shape} "
                 f"(got {tuple(out.shape)}): permute back after normalizing.")
        hint(f"on {case.name} the output must have the input's shape {shape} (got {tuple(out.shape)}).",
             generic=True)
    if dtype is not None and out.dtype != dtype:
        hint(f"on {case.name} the output is {out.dtype}; it must come back in the input's dtype {dtype} "
             "(cast back with .to(x.dtype) at the end).")
    return out


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float, atol: float) -> bool:
    a, b = a.detach().double(), b.detach().double()
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=False))


def _compare(out: torch.Tensor, right: torch.Tensor, case: Case, mistakes: list[tuple[str, Callable[[], Any]]],
             what: str, rtol: float = 1e-4, atol: float = 1e-6) -> None:
    """Pass quietly if ``out`` is right; else the hint of the first mistake it matches, naming the class."""
    if out.dtype == torch.float64 and (rtol, atol) == (1e-4, 1e-6):
        rtol, atol = 1e-9, 1e-10  # a float64 input is normalized in float64
        if case.name.startswith(_LARGE_MEAN_64):  # x - mean keeps 1e-10 of 1e6 (x.var_mean's own rounding)
            rtol, atol = 1e-7, 1e-7
    if _close(out, right, rtol, atol):
        return
    if not bool(torch.isfinite(out.detach()).all()):
        for message, wrong in mistakes:
            if message.startswith("nonfinite:"):
                hint(f"on {case.name}: {message[len('nonfinite:'):].strip()}")
        hint(f"on {case.name} your output holds inf or NaN; {what}.")
    for message, wrong in mistakes:
        if message.startswith("nonfinite:"):
            continue
        try:
            value = wrong()
        except Exception:  # noqa: BLE001 - a mistake that does not apply to this shape
            continue
        if isinstance(value, torch.Tensor) and value.shape == out.shape and _close(out, value, rtol, atol):
            hint(f"on {case.name}: {message}")
    if out.dtype == torch.float64 and _close(out, right, 1e-5, 1e-6):
        hint(f"on {case.name} your values are right to float32 precision only, but x is float64: compute in "
             "the input's dtype (a .float() step inside, or a float32 constant tensor, loses digits).")
    hint(f"on {case.name} the values differ from {what}: "
         f"{first_difference(out.detach().double(), right.double(), rtol=rtol, atol=atol)}.", generic=True)


def _normalize(x: torch.Tensor, dim, eps: float, unbiased: bool = False, eps_outside: bool = False) -> torch.Tensor:
    mean = x.mean(dim, keepdim=True)
    var = ((x - mean) ** 2).sum(dim, keepdim=True) / (_count(x, dim) - (1 if unbiased else 0))
    return (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)


def _count(x: torch.Tensor, dim) -> int:
    dims = (dim,) if isinstance(dim, int) else dim
    n = 1
    for d in dims:
        n *= x.shape[d]
    return n


def _gen(seed: int | None) -> torch.Generator:
    g = torch.Generator()
    if seed is None:
        g.seed()  # a fresh draw
    else:
        g.manual_seed(seed)
    return g


# --------------------------------------------------------------------------- 4.1
_LARGE_MEAN_64 = "features with a large mean (about 1e6, spread about 1)"


def _channels_first_cases() -> list[Case]:
    cases = []
    for name, (B, d, T), seed, eps, dtype, extra in [
        ("a batch of (2, 6, 5) in float64", (2, 6, 5), 0, 1e-5, torch.float64, ""),
        ("a large eps (0.5)", (2, 6, 5), 1, 0.5, torch.float64, ""),
        ("a batch of one", (1, 5, 4), 2, 1e-5, torch.float64, ""),
        ("odd sizes (3, 7, 9)", (3, 7, 9), 3, 1e-5, torch.float64, ""),
        ("one position (T = 1)", (2, 6, 1), 4, 1e-5, torch.float64, ""),
        ("d equal to T (5, 5)", (2, 5, 5), 5, 1e-3, torch.float64, ""),
        ("a token whose features are all equal", (2, 4, 3), 6, 1e-5, torch.float64, "constant"),
        ("float32 input", (2, 6, 7), 7, 1e-5, torch.float32, ""),
        # E[x^2] - E[x]^2 keeps 4 digits of a variance of 1 under a mean of 1e6, whatever the CPU kernels
        (_LARGE_MEAN_64, (2, 6, 4), 10, 1e-5, torch.float64, "offset"),
        ("an x that requires grad", (2, 6, 5), 8, 1e-5, torch.float64, "grad"),
        ("a call under torch.no_grad()", (2, 6, 5), 9, 1e-5, torch.float64, "no_grad"),
        ("a fresh random draw", (2, 8, 6), None, 1e-5, torch.float64, ""),
    ]:
        g = _gen(seed)
        x = torch.randn(B, d, T, generator=g, dtype=dtype) * 2 + 1
        if extra == "constant":
            x[0, :, 1] = 3.0  # position 1 of sequence 0: every feature 3
        if extra == "offset":
            x = x / 2 + 1e6
        w = torch.randn(d, generator=g, dtype=dtype)
        b = torch.randn(d, generator=g, dtype=dtype)
        if extra == "grad":
            x.requires_grad_(True)
        cases.append(Case(name, (x, w, b, eps), no_grad=extra == "no_grad"))
    return cases


@checker("Exercise 4.1")
def layer_norm_channels_first(my_layer_norm_channels_first) -> None:
    """``my_layer_norm_channels_first(x, weight, bias, eps)``: x ``(B, d, T)``, each token ``x[b, :, t]``
    normalized over its ``d`` features, scaled and shifted per feature; the output has x's shape."""
    attempted: list[bool] = []
    _UNWRITTEN.clear()
    for case in _channels_first_cases():
        x, w, b, eps = case.args
        out = _run(my_layer_norm_channels_first, case, attempted)
        if out is _SKIP:
            continue
        out = _as_tensor(out, case, tuple(x.shape))
        x = x.detach()
        col = (slice(None), None)  # (d,) -> (d, 1): one scale per feature, along T
        right = _normalize(x, 1, eps) * w[col] + b[col]
        mistakes = [
            ("you normalized over the last axis, the T positions: in (B, d, T) the features are axis 1. "
             "Take the mean and variance over dim=1.", lambda: _normalize(x, -1, eps) * w[col] + b[col]),
            ("you normalized over the batch (dim=0): that is batch normalization, not LayerNorm.",
             lambda: _normalize(x, 0, eps) * w[col] + b[col]),
            ("you took one mean and variance per sequence, over features and positions together (dims 1 and 2): "
             "LayerNorm takes them for each token, over its d features only (dim=1).",
             lambda: _normalize(x, (1, 2), eps) * w[col] + b[col]),
            ("`eps` goes inside the square root: sqrt(var + eps), not sqrt(var) + eps.",
             lambda: _normalize(x, 1, eps, eps_outside=True) * w[col] + b[col]),
            ("use the biased variance (divide by d, unbiased=False), as LayerNorm does.",
             lambda: _normalize(x, 1, eps, unbiased=True) * w[col] + b[col]),
            ("the scale and shift are applied along the wrong axis: weight and bias have one value per feature, "
             "so in (B, d, T) they broadcast as weight[:, None] (shape (d, 1)).",
             lambda: _normalize(x, 1, eps) * w + b),
            ("the scale `weight` and shift `bias` are missing.", lambda: _normalize(x, 1, eps)),
            ("the shift `bias` is missing: x_hat * weight + bias.", lambda: _normalize(x, 1, eps) * w[col]),
            ("the scale `weight` is missing: x_hat * weight + bias.", lambda: _normalize(x, 1, eps) + b[col]),
            ("divide by the standard deviation sqrt(var + eps), not by the variance.",
             lambda: (x - x.mean(1, keepdim=True)) / (x.var(1, keepdim=True, unbiased=False) + eps) * w[col] + b[col]),
            ("`eps` is missing: divide by sqrt(var + eps) with the eps you are given (it keeps a constant token "
             "from giving 0 / 0).", lambda: _normalize(x, 1, 0.0) * w[col] + b[col]),
            (f"`eps` is fixed in your code: use the eps you are given (here {eps:g}).",
             lambda: _normalize(x, 1, 1e-5) * w[col] + b[col] if eps != 1e-5 else None),
        ]
        _compare(out, right, case, mistakes, "LayerNorm over dim=1, with weight[:, None] and bias[:, None]")
    _finish(attempted)
    x, w, b, eps = _channels_first_cases()[0].args
    require_graph(my_layer_norm_channels_first, (x, w, b, eps))
    passed("each token x[b, :, t] is normalized over its features, in the layout of a convolution.")


# --------------------------------------------------------------------------- 4.2
def _masked_reference(x, mask, eps, *, pad_in=False, per_position=False, unbiased=False, eps_outside=False,
                      keep_pad=False, divide_all=False):
    m = mask[..., None].to(x.dtype)  # (B, T, 1)
    if pad_in:
        m = torch.ones_like(m)
    dims = (0,) if per_position else (0, 1)
    count = m.sum(dims, keepdim=True)
    denom = torch.full_like(count, _count(x, dims)) if divide_all else count
    mean = (x * m).sum(dims, keepdim=True) / denom
    var = (((x - mean) * m) ** 2).sum(dims, keepdim=True) / (denom - (1 if unbiased else 0))
    y = (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)
    return y if keep_pad else y * mask[..., None].to(x.dtype)


_LARGE_MEAN = "float32 features with a large mean (about 1000, spread about 1)"


def _masked_cases() -> list[Case]:
    cases = []
    for name, (B, T, d), seed, eps, dtype, lengths, extra in [
        ("a padded batch (3, 6, 4)", (3, 6, 4), 0, 1e-5, torch.float64, (6, 4, 2), ""),
        ("a large eps (0.5)", (3, 5, 4), 1, 0.5, torch.float64, (5, 3, 1), ""),
        ("a batch of one with padding", (1, 7, 3), 2, 1e-5, torch.float64, (4,), ""),
        ("a batch without padding", (2, 5, 3), 3, 1e-5, torch.float64, (5, 5), ""),
        ("odd sizes (3, 7, 5)", (3, 7, 5), 4, 1e-5, torch.float64, (7, 1, 3), ""),
        ("one feature (d = 1)", (2, 4, 1), 5, 1e-5, torch.float64, (4, 2), ""),
        ("a single real token", (2, 3, 4), 6, 1e-5, torch.float64, (1, 0), ""),
        ("padding on the left", (2, 6, 3), 7, 1e-5, torch.float64, (6, 3), "left"),
        ("float32 input", (3, 6, 4), 8, 1e-5, torch.float32, (6, 2, 5), ""),
        (_LARGE_MEAN, (3, 6, 4), 11, 1e-5, torch.float32,
         (6, 4, 5), "offset"),
        ("an x that requires grad", (2, 5, 4), 9, 1e-5, torch.float64, (5, 3), "grad"),
        ("a call under torch.no_grad()", (2, 5, 4), 10, 1e-5, torch.float64, (2, 5), "no_grad"),
        ("a fresh random draw", (4, 6, 5), None, 1e-5, torch.float64, (6, 5, 3, 2), ""),
    ]:
        g = _gen(seed)
        x = torch.randn(B, T, d, generator=g, dtype=dtype) * 2 + 1
        if extra == "offset":
            x = x / 2 + 1000
        mask = torch.zeros(B, T, dtype=torch.bool)
        for i, n in enumerate(lengths):
            if extra == "left":
                mask[i, T - n:] = True
            else:
                mask[i, :n] = True
        x = torch.where(mask[..., None], x, torch.full_like(x, 50.0))  # padding: a large, constant vector
        if extra == "grad":
            x.requires_grad_(True)
        cases.append(Case(name, (x, mask, eps), no_grad=extra == "no_grad"))
    return cases


@checker("Exercise 4.2")
def masked_batch_norm(my_masked_batch_norm) -> None:
    """``my_masked_batch_norm(x, mask, eps)``: x ``(B, T, d)``, mask ``(B, T)`` (True: a real token); each
    feature normalized by its mean and biased variance over the real tokens only; padding gives 0."""
    attempted: list[bool] = []
    _UNWRITTEN.clear()
    for case in _masked_cases():
        x, mask, eps = case.args
        out = _run(my_masked_batch_norm, case, attempted)
        if out is _SKIP:
            continue
        out = _as_tensor(out, case, tuple(x.shape))
        x = x.detach()
        right = _masked_reference(x, mask, eps)
        mistakes = [
            ("the padded positions count in your statistics: take the mean and variance of each feature over "
             "the real tokens only (mask True), as many as mask.sum().",
             lambda: _masked_reference(x, mask, eps, pad_in=True)),
            ("the padded positions count in your statistics, and are not set to 0.",
             lambda: _masked_reference(x, mask, eps, pad_in=True, keep_pad=True)),
            ("you divided the masked sums by B * T, every position, instead of by the number of real tokens "
             "(mask.sum()).", lambda: _masked_reference(x, mask, eps, divide_all=True)),
            ("the statistics are right, but the padded positions are not 0: multiply the output by the mask "
             "(or use torch.where).", lambda: _masked_reference(x, mask, eps, keep_pad=True)),
            ("you took statistics for each position separately (over the batch only, dim=0); they are pooled "
             "over every real token of the batch, all positions together.",
             lambda: _masked_reference(x, mask, eps, per_position=True)),
            ("use the biased variance: divide by the number of real tokens, not by that number minus one.",
             lambda: _masked_reference(x, mask, eps, unbiased=True)),
            ("`eps` goes inside the square root: sqrt(var + eps).",
             lambda: _masked_reference(x, mask, eps, eps_outside=True)),
            ("you normalized each token over its features: that is LayerNorm; BatchNorm normalizes each "
             "feature over the tokens.", lambda: _normalize(x, -1, eps) * mask[..., None]),
        ]
        tol = (1e-3, 1e-3) if case.name.startswith(_LARGE_MEAN) else (1e-4, 1e-6)  # float32 rounding of x - mean
        if case.name.startswith(_LARGE_MEAN) and bool(torch.isfinite(out.detach()).all()) \
                and not _close(out, right, *tol):  # every earlier class passed: the variance cancels
            hint(f"on {case.name}: your variance loses its digits. Computed as mean(x**2) - mean(x)**2, its two "
                 "terms are nearly equal when the mean is large against the spread, and float32 keeps only their "
                 "first 7 digits. Subtract the mean first: mean((x - mean)**2).")
        _compare(out, right, case, mistakes,
                 "(x - mean) / sqrt(var + eps) with each feature's mean and biased variance over the real tokens, "
                 "and 0 at padding", *tol)
    _finish(attempted)
    x, mask, eps = _masked_cases()[0].args
    require_graph(my_masked_batch_norm, (x, mask, eps), grad=(0,))
    passed("the statistics come from the real tokens only: the same sequence gets the same output, "
           "whatever padding its batch holds.")


# --------------------------------------------------------------------------- 4.3
def _rms_reference(x, w, eps, *, in_dtype=False, no_weight=False, weight_in_float32=False, eps_outside=False,
                   keep_float32=False):
    h = x if in_dtype else x.float()
    ms = h.pow(2).mean(-1, keepdim=True)
    h = h / (ms.sqrt() + eps) if eps_outside else h * torch.rsqrt(ms + eps)
    if no_weight:
        return h.to(x.dtype)
    if keep_float32:
        return h * w.float()
    if weight_in_float32:
        return (h * w.float()).to(x.dtype)
    return w * h.to(x.dtype)


_ZEROS = "a token of zeros"


def _half_cases() -> list[Case]:
    cases = []
    for name, (n, d), seed, scale, dtype, eps, extra in [
        ("float16 tokens of typical size", (4, 8), 0, 1.0, torch.float16, 1e-6, ""),
        ("float16 tokens with features near 300 (x**2 above float16's largest, 65504)", (3, 8), 1, 300.0,
         torch.float16, 1e-6, ""),
        ("bfloat16 tokens", (4, 8), 2, 1.0, torch.bfloat16, 1e-6, ""),
        ("bfloat16 tokens with features near 300", (3, 6), 3, 300.0, torch.bfloat16, 1e-6, ""),
        ("one token (n = 1)", (1, 8), 4, 1.0, torch.float16, 1e-6, ""),
        ("odd sizes (5, 7)", (5, 7), 5, 2.0, torch.float16, 1e-5, ""),
        ("one feature (d = 1)", (3, 1), 6, 1.0, torch.float16, 1e-6, ""),
        (_ZEROS, (3, 8), 7, 1.0, torch.float16, 1e-6, "zeros"),
        ("a large eps (0.5)", (3, 8), 8, 1.0, torch.float16, 0.5, ""),
        ("an x that requires grad", (3, 8), 9, 1.0, torch.float16, 1e-6, "grad"),
        ("a call under torch.no_grad()", (3, 8), 10, 1.0, torch.float16, 1e-6, "no_grad"),
        ("a fresh random draw", (4, 16), None, 50.0, torch.float16, 1e-6, ""),
    ]:
        g = _gen(seed)
        x = (torch.randn(n, d, generator=g) * scale).to(dtype)
        if extra == "zeros":
            x[1] = 0
        w = (torch.rand(d, generator=g) + 0.5).to(dtype)
        if extra == "grad":
            x.requires_grad_(True)
        cases.append(Case(name, (x, w, eps), no_grad=extra == "no_grad"))
    return cases


def _check_rms_order(my_rms_norm_half) -> None:
    """The text's order (Llama's): cast the normalized tokens to x's dtype, then multiply by weight in that
    dtype. Multiplying in float32 and casting once differs by one rounding, on about a quarter of the
    outputs: too little for a tolerance, plain on 4,096 outputs compared exactly (any correct way of
    computing the float32 normalization rounds to the same float16 values, measured: 0 of 4,096 differ)."""
    for dtype in (torch.float16, torch.bfloat16):
        g = _gen(20 if dtype == torch.float16 else 21)
        x = (torch.randn(64, 64, generator=g) * 3).to(dtype)
        w = (torch.rand(64, generator=g) + 0.5).to(dtype)
        case = Case(f"64 {str(dtype).replace('torch.', '')} tokens of width 64, compared exactly", (x, w, 1e-6))
        out = _as_tensor(my_rms_norm_half(x.clone(), w.clone(), 1e-6), case, (64, 64), dtype=dtype).detach()
        right = _rms_reference(x, w, 1e-6)
        off = (out != right).float().mean().item()
        if off > 0.1 and (out != _rms_reference(x, w, 1e-6, weight_in_float32=True)).float().mean().item() < 0.02:
            hint(f"on {case.name}: you multiplied by weight in float32 and cast once at the end; the text's order "
                 "(Llama's) casts the normalized tokens back to x's dtype first, then multiplies by weight in that "
                 f"dtype. One rounding apart, but {100 * off:.0f}% of the outputs differ.")


@checker("Exercise 4.3")
def rms_norm_half(my_rms_norm_half) -> None:
    """``my_rms_norm_half(x, weight, eps)``: x and weight in float16 or bfloat16; RMSNorm computed in
    float32, returned in x's dtype."""
    attempted: list[bool] = []
    _UNWRITTEN.clear()
    for case in _half_cases():
        x, w, eps = case.args
        out = _run(my_rms_norm_half, case, attempted)
        if out is _SKIP:
            continue
        out = _as_tensor(out, case, tuple(x.shape), dtype=x.dtype)
        x = x.detach()
        right = _rms_reference(x, w, eps)
        # one or two roundings to the output dtype: a few units in the last place
        rtol, atol = (4e-3, 1e-4) if x.dtype == torch.float16 else (2e-2, 1e-3)
        if _close(out, _rms_reference(x, w, eps, weight_in_float32=True), rtol, atol):
            continue  # weight applied in float32, then cast: also right
        mistakes = [
            ("nonfinite: your computation overflowed: x**2 of a feature near 300 is 90,000, above float16's largest "
             "number (65504), so the mean square is inf. Compute in float32: h = x.float(), normalize h, "
             "cast back.", lambda: None),
            ("the squares were computed in the input's dtype and overflowed (x**2 of 300 is above float16's 65504): "
             "the mean square is inf and every output 0. Compute in float32 (x.float()), then cast back.",
             lambda: _rms_reference(x, w, eps, in_dtype=True)),
            ("the learned scale `weight` is missing: multiply by it at the end.",
             lambda: _rms_reference(x, w, eps, no_weight=True)),
            ("`eps` goes inside the square root: sqrt(mean(x**2) + eps).",
             lambda: _rms_reference(x, w, eps, eps_outside=True)),
            ("RMSNorm does not subtract the mean: divide x itself by its root mean square.",
             lambda: (w.float() * _normalize(x.float(), -1, eps)).to(x.dtype)),
            ("take the mean of the squares over each token's features (dim=-1), not over the tokens.",
             lambda: (w.float() * x.float() * torch.rsqrt(x.float().pow(2).mean(0, keepdim=True) + eps)).to(x.dtype)),
        ]
        if case.name == _ZEROS and not bool(torch.isfinite(out.detach()).all()):  # no overflow here: no eps
            hint(f"on {case.name}: your output holds inf or NaN. The mean square of that token is 0, so only "
                 "eps keeps rsqrt finite: add it inside, rsqrt(mean(x**2) + eps), in float32 (an eps of 1e-6, "
                 "scaled or not, can round to 0 in float16).")
        _compare(out, right, case, mistakes, "x / sqrt(mean(x**2) + eps) * weight computed in float32", rtol, atol)
    _finish(attempted)
    _check_rms_order(my_rms_norm_half)
    x, w, eps = _half_cases()[1].args
    require_graph(my_rms_norm_half, (x, w, eps))
    passed("RMSNorm in float32 inside, the input's dtype outside: large float16 features no longer overflow.")
