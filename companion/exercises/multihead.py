"""Checkers for the exercises of chapter 3 (multi-head attention)."""
from __future__ import annotations

import math

import torch

from ._core import checker, close, hint, passed


@checker("Exercise 3.1")
def parameter_count(my_count) -> None:
    """``my_count(d_model, n_heads, bias)``: parameters of multi-head attention with 4 (d, d) projections."""
    for d, h, bias in [(512, 8, True), (64, 1, True), (768, 12, False), (256, 4, False)]:
        expected = 4 * d * d + (4 * d if bias else 0)
        got = my_count(d, h, bias)
        try:
            got = int(got)
        except (TypeError, ValueError):
            hint(f"return an integer, got {got!r}.")
        if got == expected:
            continue
        if got == 3 * d * d + (3 * d if bias else 0):
            hint("you counted W_Q, W_K and W_V but forgot the output projection W_O (another d x d, plus d biases).")
        if h > 1 and got == h * expected:
            hint("each head has d_head = d / h columns, not d: the heads together cost the same as one full-width head, "
                 "so the count does not depend on h.")
        if got == 4 * d * d and bias:
            hint(f"with bias=True each of the four layers also has d = {d} biases.")
        if got == 4 * d * d + 4 * d and not bias:
            hint("with bias=False there are no biases to count.")
        if got in (4 * d * (d // h) + (4 * d // h if bias else 0), 3 * d * (d // h)):
            hint("that is the size of one head's slices; the four projections are d x d in total.")
        hint(f"my_count({d}, {h}, {bias}) returned {got}, expected a different number.")
    passed("4 d^2 (+ 4 d biases), whatever the number of heads.")


@checker("Exercise 3.2")
def split_heads(my_split_heads) -> None:
    """``my_split_heads(x, n_heads)``: (B, T, d) -> (B, h, T, d / h), head i holding features i*d_head..(i+1)*d_head."""
    B, T, d, h = 2, 3, 8, 4
    x = torch.arange(B * T * d, dtype=torch.float32).reshape(B, T, d)
    expected = x.view(B, T, h, d // h).transpose(1, 2)
    got = my_split_heads(x.clone(), h)
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor, got {type(got).__name__}.")
    if close(got, expected):
        passed("view as (B, T, h, d_head), then swap T and h: each head sees every token.")
    if got.shape == (B, T, h, d // h):
        hint("the shape is (B, T, h, d_head): also transpose dims 1 and 2 so that heads come before tokens.")
    if got.shape == expected.shape and close(got, x.reshape(B, h, T, d // h)):
        hint("reshaping straight to (B, h, T, d_head) mixes tokens across heads: reshape to (B, T, h, d_head) "
             "first, then transpose(1, 2).")
    if got.shape == expected.shape and close(got, x.view(B, T, d // h, h).permute(0, 3, 1, 2)):
        hint("the head index must be the slower one: feature f belongs to head f // d_head, so view as "
             "(B, T, h, d_head), not (B, T, d_head, h).")
    hint(f"expected shape (B, h, T, d_head) = {tuple(expected.shape)}, got {tuple(got.shape)}.")


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
    B, T, d, h = 2, 5, 16, 4
    x = torch.randn(B, T, d, generator=g)
    W_q, W_k, W_v, W_o = (torch.randn(d, d, generator=g) / math.sqrt(d) for _ in range(4))
    args = (x, W_q, W_k, W_v, W_o, h)
    expected = _reference(*args)
    got = my_multi_head(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor, got {type(got).__name__}.")
    if close(got, expected, rtol=1e-4, atol=1e-5):
        passed("project, split into heads, attend in every head at once, merge, project back with W_O.")
    if got.shape != expected.shape:
        hint(f"the output should have shape (B, T, d) = {tuple(expected.shape)}, got {tuple(got.shape)}.")
    mistakes = [
        (dict(scale_by=d), "you scaled by sqrt(d_model); each head's queries and keys have d_head = d / h "
                           "features, so divide by sqrt(d_head)."),
        (dict(out_proj=False), "you forgot the output projection: multiply the merged heads by W_O."),
        (dict(scale_by=d, out_proj=False), "two things: scale by sqrt(d_head), not sqrt(d_model), and apply "
                                           "the output projection W_O."),
        (dict(dim=-2), "softmax over the wrong axis: each query's weights must sum to 1 over the keys (dim=-1)."),
        (dict(heads=False), "that is one full-width head: split the projections into n_heads heads of d_head features "
                            "and attend in each separately."),
        (dict(scale_by=1), "you forgot the scale: divide the scores by sqrt(d_head)."),
    ]
    for kwargs, message in mistakes:
        if close(got, _reference(*args, **kwargs), rtol=1e-4, atol=1e-5):
            hint(message)
    if close(got, _reference(x, W_q.T, W_k.T, W_v.T, W_o.T, h), rtol=1e-4, atol=1e-5):
        hint("you multiplied by the transposed matrices: in the row convention q = x @ W_Q (shape (d, d)); "
             "x @ W.T is what nn.Linear does with its stored (out, in) weight.")
    q = (x @ W_q).view(B, T, h, d // h).transpose(1, 2)
    k = (x @ W_k).view(B, T, h, d // h).transpose(1, 2)
    v = (x @ W_v).view(B, T, h, d // h).transpose(1, 2)
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), -1) @ v  # (B, h, T, d_head)
    if close(got, heads.reshape(B, T, d) @ W_o,  # merged without transposing back
              rtol=1e-4, atol=1e-5):
        hint("merging the heads: transpose (B, h, T, d_head) back to (B, T, h, d_head) before reshaping to (B, T, d).")
    hint("the output does not match multi-head attention; compare one head with chapter 2's attention first.")
