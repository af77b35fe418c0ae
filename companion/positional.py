"""Telling attention where each token is (chapter 5, *Positional encoding*).

Attention treats its input as a set; these modules add order.

* :func:`sinusoidal_encoding` builds the table of the original transformer,
  ``P[i, 2j] = sin(i / c**(2j/D))`` and ``P[i, 2j+1] = cos(i / c**(2j/D))`` with ``c = 10000``;
  :class:`SinusoidalPositionalEncoding` adds it to a batch of embeddings.
* :func:`shift_matrix` is the linear map that moves every row of that table ``k`` positions on:
  ``P[i + k] = P[i] @ shift_matrix(k, D)`` (a rotation of each (sin, cos) pair).
* :class:`LearnedPositionalEmbedding` is a trained table, one vector per position (GPT, BERT).
* :func:`apply_rotary` rotates queries and keys by their position (RoPE), so that
  ``q_i . k_j`` depends on ``i - j`` only.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from companion.validation import check_choice, check_float, check_float_dtype, check_int, check_tensor, check_vectors

__all__ = [
    "sinusoidal_encoding",
    "shift_matrix",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "apply_rotary",
]


def _even_width(d_model: object, what: str) -> int:
    check_int("d_model", d_model, minimum=1)
    if d_model % 2:
        raise ValueError(f"`d_model` must be even (got d_model={d_model}): {what} pairs features as (sin, cos)")
    return d_model  # type: ignore[return-value]


def _frequencies(d_model: int, c: float, dtype: torch.dtype, device=None) -> Tensor:
    """``1 / c**(2j / D)`` for ``j = 0 .. D/2 - 1``: one angular frequency per (sin, cos) pair."""
    two_j = torch.arange(0, d_model, 2, dtype=dtype, device=device)  # (D/2,): 0, 2, 4, ...
    return c ** (-two_j / d_model)  # (D/2,)


def sinusoidal_encoding(
    context_length: int, d_model: int, *, c: float = 10000.0,
    dtype: torch.dtype = torch.float32, device=None,
) -> Tensor:
    """The sinusoidal position table of Vaswani et al. (2017).

    Row ``i`` is position ``i`` (from 0); column ``2j`` holds
    ``sin(i / c**(2j/D))`` and column ``2j + 1`` holds ``cos(i / c**(2j/D))``,
    with the *same* frequency for both members of a pair.

    Shapes:
        returns ``(context_length, d_model)``.
    """
    _check_table(context_length, d_model, c, dtype)
    pos = torch.arange(context_length, dtype=torch.float64, device=device)
    freq = _frequencies(d_model, c, torch.float64, device)  # (D/2,)
    angles = pos[:, None] * freq[None, :]  # (T, 1) * (1, D/2) -> (T, D/2)
    table = torch.empty(context_length, d_model, dtype=torch.float64,
                        device=device)
    table[:, 0::2] = torch.sin(angles)  # even features: sine
    table[:, 1::2] = torch.cos(angles)  # odd features: cosine
    return table.to(dtype)  # float64 above: large positions keep their digits


def _check_table(context_length, d_model, c, dtype) -> None:
    check_int("context_length", context_length, minimum=1)
    _even_width(d_model, "the sinusoidal encoding")
    check_float("c", c, low=1.0, low_open=True)
    check_float_dtype("dtype", dtype)


def shift_matrix(k: int, d_model: int, *, c: float = 10000.0, dtype: torch.dtype = torch.float32) -> Tensor:
    """The matrix ``M`` with ``sinusoidal_encoding(...)[i + k] == sinusoidal_encoding(...)[i] @ M`` for all ``i``.

    It is block diagonal: for the pair with frequency ``w`` the block is
    ``[[cos(k w), -sin(k w)], [sin(k w), cos(k w)]]`` (row-vector convention). It does not depend on
    ``i``: a fixed shift of position is a fixed linear map.

    Shapes:
        returns ``(d_model, d_model)``.
    """
    _even_width(d_model, "the shift matrix")
    k = check_int("k", k, hint="`k` is the number of positions to shift by")
    check_float("c", c, low=1.0, low_open=True)
    check_float_dtype("dtype", dtype)
    theta = k * _frequencies(d_model, c, torch.float64)  # (D/2,)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    m[even, even] = torch.cos(theta)  # sin' = sin cos(kw) + cos sin(kw)
    m[even + 1, even] = torch.sin(theta)
    m[even, even + 1] = -torch.sin(theta)  # cos' = cos cos(kw) - sin sin(kw)
    m[even + 1, even + 1] = torch.cos(theta)
    return m.to(dtype)


def _check_input(x: Tensor, offset: int, module: nn.Module, fix: str) -> tuple[int, int, int]:
    B, T, C = check_vectors("x", x, module.d_model)
    check_int("offset", offset, minimum=0, hint="`offset` is the position of x's first token")
    if offset + T > module.context_length:
        raise ValueError(
            f"`x` holds positions {offset}..{offset + T - 1}, which do not fit the table of "
            f"context_length={module.context_length}; {fix}"
        )
    return B, T, C


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to token embeddings (no parameters).

    Args:
        d_model: embedding width (even).
        context_length: longest sequence; the table is precomputed up to it.
        c: the base of the frequencies (10000 in the paper).

    Shapes:
        x: ``(B, T, d_model)`` -> ``(B, T, d_model)``, with ``offset + T <= context_length``.
    """

    def __init__(self, d_model: int, context_length: int, *, c: float = 10000.0):
        super().__init__()
        self.d_model, self.context_length = d_model, context_length
        # The table in float64, kept aside: .double() (or .half()) rounds it afresh from these
        # digits instead of widening the float32 copy (which would be off by about 3e-8).
        self._exact = sinusoidal_encoding(context_length, d_model, c=c, dtype=torch.float64)
        self.register_buffer("table", self._exact.float(), persistent=False)

    def _apply(self, fn, *args, **kwargs):
        super()._apply(fn, *args, **kwargs)  # moves and casts the buffer
        self.table = self._exact.to(device=self.table.device, dtype=self.table.dtype)
        return self

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        B, T, C = _check_input(x, offset, self, "build the encoding with a larger context_length")
        return x + self.table[offset : offset + T].to(x.dtype)  # (B, T, C) + (T, C) broadcasts over the batch


class LearnedPositionalEmbedding(nn.Module):
    """A trained table with one vector per position, added to the token embeddings (GPT-2, BERT).

    Unlike the sinusoidal table it cannot go beyond ``context_length``: there is no row for a
    position it never had.

    Args:
        context_length: number of positions (rows of the table).
        d_model: embedding width.

    Shapes:
        x: ``(B, T, d_model)`` -> ``(B, T, d_model)``, with ``offset + T <= context_length``.
    """

    def __init__(self, context_length: int, d_model: int):
        super().__init__()
        check_int("context_length", context_length, minimum=1)
        check_int("d_model", d_model, minimum=1)
        self.context_length, self.d_model = context_length, d_model
        self.weight = nn.Parameter(torch.randn(context_length, d_model) * 0.02)  # GPT-2's init scale

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        B, T, C = _check_input(x, offset, self, "a learned table has no row for a later position: crop the "
                               f"input to its last {self.context_length} tokens")
        return x + self.weight[offset : offset + T]  # (B, T, C) + (T, C)


def apply_rotary(x: Tensor, *, offset: int = 0, base: float = 10000.0, layout: str = "interleaved") -> Tensor:
    """Rotary position embedding (RoPE, Su et al.): rotate each feature pair by its position.

    The pair ``(x[..., 2j], x[..., 2j+1])`` of the token at position ``t = offset + index`` is
    rotated by the angle ``t / base**(2j/d)``. Applied to queries and keys (not values), it makes
    ``q_i . k_j`` a function of the content and of ``i - j`` only.

    ``layout`` says which features form a pair: ``"interleaved"`` (RoFormer, Meta's original LLaMA
    code) pairs ``(2j, 2j+1)``; ``"halves"`` (Hugging Face's ``rotate_half``) pairs ``(j, j + d/2)``. The two are the same rotation of permuted
    features: ``apply_rotary(x[..., perm], layout="halves") == apply_rotary(x)[..., perm]`` with
    ``perm = [0, 2, 4, ..., 1, 3, 5, ...]``, which is why checkpoints move between the layouts by
    permuting the columns of ``W_Q`` and ``W_K`` (per head).

    Shapes:
        x: ``(..., T, d)`` with ``d`` even (for example ``(B, h, T, d_head)``) -> same shape.
    """
    check_tensor("x", x, shape=("...", "T", "d"), dtype="float")
    *_, T, d = x.shape
    _even_width(d, "the rotary embedding")
    offset = check_int("offset", offset, minimum=0, hint="`offset` is the position of x's first token")
    check_float("base", base, low=1.0, low_open=True)
    check_choice("layout", layout, ("interleaved", "halves"))
    pos = torch.arange(offset, offset + T, dtype=torch.float64, device=x.device)[:, None]  # (T, 1)
    angles = (pos * _frequencies(d, base, torch.float64, x.device)[None, :]).to(x.dtype)  # (T, d/2)
    cos, sin = torch.cos(angles), torch.sin(angles)  # (T, d/2) each
    if layout == "halves":  # pair j is (x[j], x[j + d/2]), as Hugging Face's rotate_half
        x1, x2 = x[..., : d // 2], x[..., d // 2 :]  # (..., T, d/2) each
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (..., T, d/2): first and second member of each pair
    out = torch.empty_like(x)
    out[..., 0::2] = x1 * cos - x2 * sin  # a 2-D rotation of every pair
    out[..., 1::2] = x1 * sin + x2 * cos
    return out
