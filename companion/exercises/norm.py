"""Checkers for chapter 4, *Layer normalization*.

Each checker calls the student's function on a few inputs and compares with the right answer and
with the answers of the classic mistakes (normalizing over the batch axis or over the whole tensor,
``eps`` outside the square root, the unbiased variance, forgetting the scale and shift), naming the
one it recognizes.
"""
from __future__ import annotations

import torch

import torch.nn.functional as F

from ._core import (require_graph, checker, close, first_difference, hint, library, passed, require_tensor, source_facts,
                    uses_companion)
from .rules import watch

__all__ = ["layer_norm", "batch_norm", "rms_norm"]


def _inputs(seed: int = 0, n: int = 5, d: int = 6):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=torch.float64) * 2 + 1  # n tokens (rows), d features
    weight = torch.randn(d, generator=g, dtype=torch.float64)
    bias = torch.randn(d, generator=g, dtype=torch.float64)
    return x, weight, bias


def _normalize(x, dim, eps, unbiased=False, eps_outside=False):
    mean = x.mean(dim, keepdim=True)
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    return (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)


#: Exercise 4.1 asks for LayerNorm with tensor arithmetic, not the library's (canonical names of
#: rules.canonical: F.layer_norm, torch.layer_norm and nn.LayerNorm are all "layer_norm").
_LIBRARY_LAYER_NORM = ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "instance_norm",
                       "batch_norm", "native_batch_norm", "rms_norm", "_fused_rms_norm")


def _output(out, x) -> torch.Tensor:
    out = require_tensor(out)
    if out.shape != x.shape:
        if out.shape == x.T.shape:
            hint(f"the output is transposed: it must have the input's shape {tuple(x.shape)}, one row per token.")
        hint(f"the output must have the input's shape {tuple(x.shape)} (got {tuple(out.shape)}).", generic=True)
    return out


@checker("Exercise 4.1")
def layer_norm(my_layer_norm) -> None:
    """``my_layer_norm(x, weight, bias, eps)``: x ``(n, d)`` -> ``(n, d)``, each row normalized."""
    # a large eps makes "eps outside the sqrt" visible; random shapes beyond the first
    for seed, eps, (n, d) in [(0, 1e-5, (5, 6)), (1, 0.5, (5, 6)), (4, 1e-5, (3, 11)), (5, 1e-3, (9, 2))]:
        x, w, b = _inputs(seed, n, d)
        with watch() as seen:
            out = my_layer_norm(x.clone(), w.clone(), b.clone(), eps)
        calls = seen.called(*_LIBRARY_LAYER_NORM) + uses_companion(seen, source_facts(my_layer_norm))
        if calls:
            hint(f"your function calls {library(calls[0])}; the exercise is to write LayerNorm from its formula "
                 "with tensor arithmetic: (x - mean) / sqrt(var + eps) * weight + bias, per row.")
        out = _output(out, x)
        right = _normalize(x, -1, eps) * w + b
        if close(out, right):
            continue
        if close(out, _normalize(x, 0, eps) * w + b):
            hint("you normalized each feature over the rows (the batch): that is batch normalization. "
                 "LayerNorm takes the mean and variance of each row, over its features (dim=-1).")
        if close(out, (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * w + b):
            hint("you took one mean and one variance over the whole tensor; LayerNorm takes them for each "
                 "row separately: x.mean(dim=-1, keepdim=True).")
        if close(out, _normalize(x, -1, eps, eps_outside=True) * w + b):
            hint("`eps` goes inside the square root: divide by sqrt(var + eps), not sqrt(var) + eps.")
        if close(out, _normalize(x, -1, eps, unbiased=True) * w + b):
            hint("use the biased variance (divide by d, `unbiased=False`), as LayerNorm does; "
                 "`torch.var` divides by d - 1 by default.")
        if eps > 0.1 and close(out, _normalize(x, -1, 0.0) * w + b):
            hint(f"`eps` is missing (or fixed to a tiny number): divide by sqrt(var + eps) with the `eps` you are given "
                 f"(here {eps}). It keeps a row of equal values from a division by 0.")
        if close(out, (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, unbiased=False) + eps) * w + b):
            hint("divide by the standard deviation, sqrt(var + eps), not by the variance.")
        if close(out, _normalize(x, -1, eps)):
            hint("the rows are normalized, but the learned scale `weight` and shift `bias` are missing.")
        if close(out, _normalize(x, -1, eps) * w):
            hint("the shift `bias` is missing: y = x_hat * weight + bias.")
        if close(out, _normalize(x, -1, eps) + b):
            hint("the scale `weight` is missing: y = x_hat * weight + bias.")
        if close(out, (_normalize(x, -1, eps) + b) * w):
            hint("scale first, then shift: y = x_hat * weight + bias, not (x_hat + bias) * weight.")
        if close(out, (x - x.mean(-1, keepdim=True)) * w + b):
            hint("you centred each row but did not divide by its standard deviation sqrt(var + eps).")
        hint("the values differ from (x - mean) / sqrt(var + eps) * weight + bias, with mean and var over "
             f"each row: {first_difference(out, right)}.", generic=True)
    require_graph(my_layer_norm, (*_inputs(3), 1e-5))
    passed("each token is normalized over its own features, with eps inside the square root.")


@checker("Exercise 4.2")
def batch_norm(my_batch_norm) -> None:
    """``my_batch_norm(x, eps)``: x ``(n, d)`` -> ``(n, d)``, each column normalized over the rows."""
    for seed, eps, (n, d) in [(0, 1e-5, (5, 6)), (2, 0.5, (5, 6)), (6, 1e-5, (3, 11)), (7, 1e-3, (9, 2))]:
        x, _, _ = _inputs(seed, n, d)
        out = _output(my_batch_norm(x.clone(), eps), x)
        right = _normalize(x, 0, eps)
        if close(out, right):
            continue
        if close(out, _normalize(x, -1, eps)):
            hint("you normalized each row over its features: that is LayerNorm. BatchNorm takes the "
                 "statistics of each feature (column) over the batch (dim=0).")
        if close(out, (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps)):
            hint("you took one mean and one variance over the whole tensor; BatchNorm takes them for each "
                 "column separately: x.mean(dim=0, keepdim=True).")
        if close(out, _normalize(x, 0, eps, eps_outside=True)):
            hint("`eps` goes inside the square root: sqrt(var + eps).")
        if close(out, _normalize(x, 0, eps, unbiased=True)):
            hint("normalize with the biased variance (divide by n, `unbiased=False`), as BatchNorm does in training.")
        if eps > 0.1 and close(out, _normalize(x, 0, 0.0)):
            hint(f"`eps` is missing (or fixed to a tiny number): divide by sqrt(var + eps) with the `eps` you are "
                 f"given (here {eps}).")
        if close(out, (x - x.mean(0, keepdim=True)) / (x.var(0, keepdim=True, unbiased=False) + eps)):
            hint("divide by the standard deviation, sqrt(var + eps), not by the variance.")
        if close(out, x - x.mean(0, keepdim=True)):
            hint("you centred each column but did not divide by its standard deviation sqrt(var + eps).")
        hint("the values differ from (x - mean) / sqrt(var + eps) with mean and var of each column: "
             f"{first_difference(out, right)}.", generic=True)
    require_graph(my_batch_norm, (_inputs(3)[0], 1e-5))
    passed("each feature is normalized over the batch; compare with the LayerNorm rows above.")


@checker("Exercise 4.3")
def rms_norm(my_rms_norm) -> None:
    """``my_rms_norm(x, weight, eps)``: x ``(n, d)`` -> ``(n, d)``, ``x / sqrt(mean(x**2) + eps) * weight``."""
    for seed, eps, (n, d) in [(0, 1e-6, (5, 6)), (3, 0.5, (5, 6)), (8, 1e-6, (3, 11)), (9, 1e-3, (9, 2))]:
        x, w, _ = _inputs(seed, n, d)
        out = _output(my_rms_norm(x.clone(), w.clone(), eps), x)
        ms = x.pow(2).mean(-1, keepdim=True)
        right = x / torch.sqrt(ms + eps) * w
        if close(out, right):
            continue
        if close(out, _normalize(x, -1, eps) * w):
            hint("RMSNorm does not subtract the mean: divide x itself by the root mean square of its row.")
        if close(out, x / (ms.sqrt() + eps) * w):
            hint("`eps` goes inside the square root: sqrt(mean(x**2) + eps).")
        if close(out, x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w):
            hint("take the mean of the squares over the features, not their sum.")
        if close(out, x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w):
            hint("the mean square is taken over each row's features (dim=-1), not over the batch.")
        if close(out, x / torch.sqrt(x.pow(2).mean() + eps) * w):
            hint("you took one mean square over the whole tensor; RMSNorm takes it for each row (dim=-1, keepdim=True).")
        if close(out, x / torch.sqrt(ms + eps)):
            hint("multiply by the learned scale `weight` at the end.")
        if close(out, x / (ms + eps) * w):
            hint("divide by the square root of the mean square, sqrt(mean(x**2) + eps), not by the mean square itself.")
        if close(out, x / torch.sqrt(x.abs().mean(-1, keepdim=True) + eps) * w) or close(
                out, x / torch.sqrt(x.mean(-1, keepdim=True).pow(2) + eps) * w):
            hint("square first, then average: mean(x**2), the mean of the squares (not the square of the mean).")
        if eps > 0.1 and close(out, x / torch.sqrt(ms) * w):
            hint(f"`eps` is missing (or fixed to a tiny number): divide by sqrt(mean(x**2) + eps) with the `eps` "
                 f"you are given (here {eps}).")
        hint("the values differ from x / sqrt(mean(x**2 over the row) + eps) * weight: "
             f"{first_difference(out, right)}.", generic=True)
    require_graph(my_rms_norm, (*_inputs(3)[:2], 1e-5))
    passed("RMSNorm rescales each token without centring it.")
