"""Checkers for the exercises of chapter 3 (multi-head attention)."""
from __future__ import annotations

import math
import re

import torch

from ._core import require_graph, as_count, checker, close, first_difference, hint, passed, require_tensor, source_facts


@checker("Exercise 3.1")
def parameter_count(my_count) -> None:
    """``my_count(d_model, n_heads, bias)``: parameters of multi-head attention with 4 (d, d) projections."""
    for d, h, bias in [(512, 8, True), (64, 1, True), (768, 12, False), (256, 4, False)]:
        expected = 4 * d * d + (4 * d if bias else 0)
        call = f"my_count({d}, {h}, {bias})"
        got = as_count(my_count(d, h, bias), call)
        if got == expected:
            continue
        if got == 3 * d * d + (3 * d if bias else 0):
            hint("you counted W_Q, W_K and W_V but forgot the output projection W_O (another d x d, plus d biases).")
        if h > 1 and got in (h * expected, h * 4 * d * d + (4 * d if bias else 0), h * 3 * d * d + d * d + (4 * d if bias else 0)):
            hint("each head has d_head = d / h columns, not d: the heads together cost the same as one full-width head, "
                 "so the count does not depend on h.")
        if got == 4 * d * d and bias:
            hint(f"with bias=True each of the four layers also has d = {d} biases.")
        if got == 4 * d * d + 4 * d and not bias:
            hint("with bias=False there are no biases to count.")
        if bias and got in (4 * d * d + d, 4 * d * d + 4 * d * h, 4 * d * d + 4 * (d // h), 4 * d * d + 4):
            hint(f"each of the four linear layers has one bias per output feature: 4 x d = {4 * d} biases in all.")
        if h > 1 and got in (4 * d * (d // h) + (4 * d // h if bias else 0), 3 * d * (d // h), 4 * d * (d // h) + (4 * d if bias else 0)):
            hint("that is the size of one head's slices; the four projections are d x d in total.")
        if got == 4 * 2 * d + (4 * d if bias else 0):
            hint("a linear layer from d to d features has a d x d weight matrix (d squared numbers), not 2 d.")
        hint(f"{call} returned {got}, but that is not the number of parameters.", generic=True)
    passed("4 d^2 (+ 4 d biases), whatever the number of heads.")


@checker("Exercise 3.2")
def split_heads(my_split_heads) -> None:
    """``my_split_heads(x, n_heads)``: (B, T, d) -> (B, h, T, d / h), head i holding features i*d_head..(i+1)*d_head."""
    for B, T, d, h in ((2, 3, 8, 4), (1, 5, 6, 2)):
        x = torch.arange(B * T * d, dtype=torch.float32).reshape(B, T, d)
        expected = x.view(B, T, h, d // h).transpose(1, 2)
        got = require_tensor(my_split_heads(x.clone(), h))
        if close(got, expected):
            continue
        if tuple(got.shape) == (B, T, h, d // h):
            hint("the shape is (B, T, h, d_head): also transpose dims 1 and 2 so that heads come before tokens.")
        if tuple(got.shape) == tuple(expected.shape):
            if close(got, x.reshape(B, h, T, d // h)):
                hint("reshaping straight to (B, h, T, d_head) mixes tokens across heads: reshape to "
                     "(B, T, h, d_head) first, then transpose(1, 2).")
            if close(got, x.view(B, T, d // h, h).permute(0, 3, 1, 2)):
                hint("the head index must be the slower one: feature f belongs to head f // d_head, so view as "
                     "(B, T, h, d_head), not (B, T, d_head, h).")
            hint("the shape is right but the values are not in place; head r must hold features "
                 f"r * d_head .. (r + 1) * d_head - 1 of every token: {first_difference(got, expected)}.",
                 generic=True)
        if tuple(got.shape) == (B, h, d // h, T):
            hint("the last two dimensions are swapped: each head holds (T, d_head), one row per token.")
        if tuple(got.shape) == (B * h, T, d // h):
            hint("keep the batch and head dimensions apart: the result is (B, h, T, d_head), four dimensions.")
        hint(f"for x of shape {(B, T, d)} and n_heads={h} expected shape (B, h, T, d_head) = "
             f"{tuple(expected.shape)}, got {tuple(got.shape)}.", generic=True)
    passed("view as (B, T, h, d_head), then swap T and h: each head sees every token.")


def _reference(x, W_q, W_k, W_v, W_o, n_heads, *, scale_by=None, out_proj=True, dim=-1, heads=True):
    B, T, d = x.shape
    h = n_heads if heads else 1
    d_head = d // h

    def split(t):
        return t.view(B, T, h, d_head).transpose(1, 2)  # (B, h, T, d_head)

    q, k, v = split(x @ W_q), split(x @ W_k), split(x @ W_v)
    scale = math.sqrt(d_head if scale_by is None else scale_by)
    w = torch.softmax(q @ k.transpose(-2, -1) / scale, dim=dim)  # (B, h, T, T)
    out = (w @ v).transpose(1, 2).reshape(B, T, d)  # (B, T, d)
    return out @ W_o if out_proj else out


@checker("Exercise 3.3")
def multi_head(my_multi_head) -> None:
    """``my_multi_head(x, W_q, W_k, W_v, W_o, n_heads)``: batched multi-head self-attention, no biases.

    Row convention: ``q = x @ W_q`` with ``W_*`` of shape (d, d); output (B, T, d).
    """
    g = torch.Generator().manual_seed(3)
    # d_head differs from n_heads (so that sqrt(n_heads) is not the right scale by chance), and two
    # configurations (so that a scale or a shape written as a number fits at most one). A mistake is
    # named only when it explains the answers of both configurations.
    cases, answers = [], []
    for B, T, d, h in ((2, 5, 24, 4), (1, 4, 12, 3)):
        x = torch.randn(B, T, d, generator=g)
        W_q, W_k, W_v, W_o = (torch.randn(d, d, generator=g) / math.sqrt(d) for _ in range(4))
        args = (x, W_q, W_k, W_v, W_o, h)
        got = require_tensor(my_multi_head(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args)))
        cases.append(args)
        answers.append(got)
    expected = [_reference(*args) for args in cases]
    if all(close(got, e, rtol=1e-4, atol=1e-5) for got, e in zip(answers, expected)):
        for B, T, d, h, dtype in ((3, 1, 8, 8, torch.float64), (2, 7, 10, 2, torch.float64)):
            x = torch.randn(B, T, d, generator=g, dtype=dtype)
            Ws = [torch.randn(d, d, generator=g, dtype=dtype) / math.sqrt(d) for _ in range(4)]
            got = require_tensor(my_multi_head(x.clone(), *(W.clone() for W in Ws), h))
            right = _reference(x, *Ws, h)
            if not close(got, right, rtol=1e-4, atol=1e-6):
                hint(f"right on the first examples, but not for x of shape {(B, T, d)} with {h} heads ({dtype}): "
                     f"{first_difference(got, right)}.", generic=True)
        over_heads = [it for it in source_facts(my_multi_head).loop_iters
                      if re.search(r"head|\brange\(\s*h\b|unbind|chunk|split", it)]
        if over_heads:
            hint(f"the values are right, but your code loops over the heads (`for ... in {over_heads[0]}`): the "
                 "exercise asks to attend in all heads at once, with one batched matrix product over the "
                 "(B, h, T, d_head) tensors.")
        require_graph(my_multi_head, cases[0])
        passed("project, split into heads, attend in every head at once, merge, project back with W_O.")
    for got, e in zip(answers, expected):
        if got.shape != e.shape:
            hint(f"the output should have shape (B, T, d) = {tuple(e.shape)}, got {tuple(got.shape)}.", generic=True)
    for variant, message in _MULTI_HEAD_MISTAKES:
        if all(close(got, variant(*args), rtol=1e-4, atol=1e-5) for got, args in zip(answers, cases)):
            hint(message)
    got, e = next((got, e) for got, e in zip(answers, expected) if not close(got, e, rtol=1e-4, atol=1e-5))
    hint("the output does not match multi-head attention; compare one head with chapter 2's attention "
         f"first: {first_difference(got, e)}.", generic=True)


def _merged_without_transpose(x, W_q, W_k, W_v, W_o, h):
    B, T, d = x.shape
    q, k, v = ((x @ W).view(B, T, h, d // h).transpose(1, 2) for W in (W_q, W_k, W_v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), -1) @ v  # (B, h, T, d_head)
    return heads.reshape(B, T, d) @ W_o  # merged without transposing back


def _split_without_transpose(x, W_q, W_k, W_v, W_o, h, merge_back=False):
    B, T, d = x.shape
    q, k, v = ((x @ W).reshape(B, h, T, d // h) for W in (W_q, W_k, W_v))  # split without the transpose
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), -1) @ v
    return (heads.transpose(1, 2) if merge_back else heads).reshape(B, T, d) @ W_o


def _flags(**flags):
    return lambda x, W_q, W_k, W_v, W_o, h: _reference(x, W_q, W_k, W_v, W_o, h, **{
        k: (v(x.shape[-1], h) if callable(v) else v) for k, v in flags.items()})


_MULTI_HEAD_MISTAKES = [
    (_flags(scale_by=lambda d, h: d), "you scaled by sqrt(d_model); each head's queries and keys have "
                                      "d_head = d / h features, so divide by sqrt(d_head)."),
    (_flags(out_proj=False), "you forgot the output projection: multiply the merged heads by W_O."),
    (_flags(scale_by=lambda d, h: d, out_proj=False), "two things: scale by sqrt(d_head), not sqrt(d_model), and "
                                                       "apply the output projection W_O."),
    (_flags(dim=-2), "softmax over the wrong axis: each query's weights must sum to 1 over the keys (dim=-1)."),
    (_flags(heads=False), "that is one full-width head: split the projections into n_heads heads of d_head "
                          "features and attend in each separately."),
    (_flags(scale_by=1), "you forgot the scale: divide the scores by sqrt(d_head)."),
    (_flags(scale_by=lambda d, h: h), "you scaled by sqrt(n_heads); the scale is sqrt(d_head), the width of each "
                                      "head's queries and keys."),
    (lambda x, W_q, W_k, W_v, W_o, h: _reference(x, W_q.T, W_k.T, W_v.T, W_o.T, h),
     "you multiplied by the transposed matrices: in the row convention q = x @ W_Q (shape (d, d)); "
     "x @ W.T is what nn.Linear does with its stored (out, in) weight."),
    (_merged_without_transpose, "merging the heads: transpose (B, h, T, d_head) back to (B, T, h, d_head) "
                                "before reshaping to (B, T, d)."),
    (_split_without_transpose, "splitting into heads: view as (B, T, h, d_head) and then transpose(1, 2); "
                               "reshaping straight to (B, h, T, d_head) mixes the tokens."),
    (lambda *a: _split_without_transpose(*a, merge_back=True),
     "splitting into heads: view as (B, T, h, d_head) and then transpose(1, 2); reshaping straight to "
     "(B, h, T, d_head) mixes the tokens."),
    *[(_flags(scale_by=c * c), "the scale is sqrt(d_head) with d_head = d_model // n_heads: compute it from the "
                               "inputs, not from the example's numbers.") for c in (2.0, 3.0, 4.0, 6.0)],
]
