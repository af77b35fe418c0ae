"""Attention: a stable softmax, scaled dot-product attention, masks, one head, a KV cache.

Chapter 2 of the book (Attention) builds every piece of this module by hand first.

Conventions used everywhere in the companion:

* Row vectors: a sequence is ``x`` of shape ``(B, T, d_model)``; ``q = x W_q`` and so on.
* **Masks: True = may attend.** A boolean mask (broadcastable to ``(..., T, S)``) keeps the
  scores where it is True and sets the others to ``-inf`` before the softmax, exactly as
  :func:`torch.nn.functional.scaled_dot_product_attention` does. A floating-point mask is
  *added* to the scores (``0`` keeps a score, ``-inf`` removes it).
* **A query whose keys are all masked** gets zero weights and therefore a zero output, in the
  forward and in the backward pass (never NaN). :func:`torch.softmax` would give NaN there.
* Causal masks are aligned bottom-right: with ``S`` keys and ``T <= S`` queries, query ``i`` is
  the token at absolute position ``S - T + i`` and sees keys ``j <= S - T + i``. With ``S == T``
  this is the usual rule "key ``j`` is hidden from query ``i`` when ``j > i``" (a token sees
  itself). It is what a KV cache needs: new queries see everything cached plus themselves.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from companion.validation import (
    check_bool,
    check_float,
    check_index,
    check_int,
    check_tensor,
    check_vectors,
)

__all__ = [
    "softmax",
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "SelfAttention",
    "KVCache",
]


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    """Numerically stable softmax along ``dim``.

    Subtracts the largest entry of each slice before exponentiating, so that scores of ``1e4``
    do not overflow (``exp(1e4)`` is ``inf`` in every float type). A slice that is entirely
    ``-inf`` (a query with no allowed key) gives all zeros instead of NaN.

    Shapes:
        x: any shape; the output has the same shape, and sums to 1 along ``dim`` (or to 0 for
        an all ``-inf`` slice).
    """
    check_tensor("x", x, dtype="float")
    check_int("dim", dim, minimum=-max(x.ndim, 1), maximum=max(x.ndim, 1) - 1)
    m = x.amax(dim=dim, keepdim=True).detach()  # softmax(x - c) == softmax(x): no gradient needed
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))  # all -inf slice: shift by 0
    e = torch.exp(x - m)  # every entry <= exp(0) = 1: no overflow
    s = e.sum(dim=dim, keepdim=True)  # >= 1 unless the slice is all -inf, then exactly 0
    return e / torch.where(s == 0, torch.ones_like(s), s)


def causal_mask(T: int, S: int | None = None, *, device: torch.device | str | None = None) -> Tensor:
    """Boolean causal mask, True = may attend: query ``i`` sees key ``j`` iff ``j <= i + S - T``.

    With ``S == T`` (the default) key ``j`` is hidden from query ``i`` exactly when ``j > i``.
    With ``S > T`` (queries are the last ``T`` of ``S`` positions, as with a KV cache) the mask
    is aligned bottom-right, so the last query sees every key.

    Shapes:
        returns: bool ``(T, S)``.
    """
    T = check_int("T", T, minimum=1)
    S = T if S is None else check_int("S", S, minimum=1)
    if S < T:
        raise ValueError(f"`S` must be at least `T` for a causal mask (got T={T}, S={S})")
    i = torch.arange(T, device=device).unsqueeze(1)  # (T, 1)
    j = torch.arange(S, device=device).unsqueeze(0)  # (1, S)
    return j <= i + (S - T)  # (T, S)


def padding_mask(lengths: Tensor | list[int], S: int) -> Tensor:
    """Key mask for padded sequences, True = a real token: ``mask[b, j] = j < lengths[b]``.

    This is the ``key_mask`` that :class:`companion.multihead.MultiHeadAttention` accepts
    (note: the *opposite* of ``torch.nn.MultiheadAttention``'s ``key_padding_mask``).

    Shapes:
        lengths: ``(B,)`` integers in ``[0, S]``.
        returns: bool ``(B, S)``.
    """
    if not isinstance(lengths, Tensor):
        try:
            lengths = torch.as_tensor(lengths)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"`lengths` must be a 1-D tensor (or list) of integers (got {lengths!r:.60})") from None
    check_tensor("lengths", lengths, shape=("B",), dtype="int", hint="one length per sequence")
    S = check_int("S", S, minimum=1)
    if bool((lengths < 0).any() | (lengths > S).any()):
        raise ValueError(f"`lengths` must lie in [0, S={S}] (got {lengths.tolist()})")
    return torch.arange(S, device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)


def check_attn_mask(attn_mask: object, T: int, S: int, *, ndim: int) -> Tensor:
    """Validate a mask that must broadcast to ``(..., T, S)`` with at most ``ndim`` dimensions.

    Returns the mask unchanged. Raises ``TypeError`` for a dtype that is neither bool nor
    floating point, ``ValueError`` for a shape that does not broadcast.
    """
    if not isinstance(attn_mask, Tensor):
        raise TypeError(f"`attn_mask` must be a torch.Tensor (got {type(attn_mask).__name__})")
    if not (attn_mask.dtype == torch.bool or attn_mask.is_floating_point()):
        raise TypeError(
            f"`attn_mask` must be bool (True = may attend) or floating point (added to the scores) "
            f"(got dtype={attn_mask.dtype})"
        )
    shape = tuple(attn_mask.shape)
    ok = 2 <= attn_mask.ndim <= ndim and shape[-2] in (1, T) and shape[-1] in (1, S)
    if not ok:
        raise ValueError(
            f"`attn_mask` must have shape (T, S) = ({T}, {S}) or broadcast to (..., {T}, {S}) with at most "
            f"{ndim} dimensions (got shape={shape})"
        )
    return attn_mask


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    attn_mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    training: bool = False,
) -> tuple[Tensor, Tensor]:
    """``softmax(q k^T / sqrt(d_k) + mask) v``, returning the output and the attention weights.

    The explicit ("math") path: every intermediate is an ordinary tensor, so the weights can be
    returned and inspected. ``attn_mask`` is bool (True = may attend) or float (added to the
    scores); ``is_causal`` adds :func:`causal_mask` (aligned bottom-right when ``S > T``; torch's
    function aligns it top-left, the two agree when ``S == T``). Dropout is applied to the
    weights only when ``training`` is True and ``dropout_p > 0``; the returned weights are the
    ones actually used (after dropout), as in ``torch.nn.MultiheadAttention``. A query whose
    keys are all masked gets zero weights and a zero output.

    Shapes:
        q: ``(..., T, d_k)``; k: ``(..., S, d_k)``; v: ``(..., S, d_v)`` (same leading dims).
        attn_mask: broadcastable to ``(..., T, S)``.
        returns: out ``(..., T, d_v)``, weights ``(..., T, S)``.
    """
    check_tensor("q", q, shape=("...", "T", "d_k"), dtype="float")
    check_tensor("k", k, shape=("...", "S", "d_k"), dtype="float")
    check_tensor("v", v, shape=("...", "S", "d_v"), dtype="float")
    if not (q.ndim == k.ndim == v.ndim):
        raise ValueError(f"`q`, `k`, `v` must have the same number of dimensions (got {q.ndim}, {k.ndim}, {v.ndim})")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"`q` and `k` must have the same width d_k (got q: {q.shape[-1]}, k: {k.shape[-1]})")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"`k` and `v` must have the same length S (got k: {k.shape[-2]}, v: {v.shape[-2]})")
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            f"`q`, `k`, `v` must have the same leading (batch, head) dimensions "
            f"(got {tuple(q.shape[:-2])}, {tuple(k.shape[:-2])}, {tuple(v.shape[:-2])})"
        )
    check_float("dropout_p", dropout_p, low=0.0, high=1.0, high_open=True)
    check_bool("is_causal", is_causal)
    check_bool("training", training)
    *_, T, d_k = q.shape
    S = k.shape[-2]
    if is_causal and S < T:
        raise ValueError(f"`is_causal` needs at least as many keys as queries (got T={T}, S={S})")

    # (..., T, d_k) @ (..., d_k, S) -> (..., T, S); the scale is sqrt(d_k), the width of one query
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(d_k)
    if is_causal:
        scores = scores.masked_fill(~causal_mask(T, S, device=q.device), float("-inf"))
    if attn_mask is not None:
        check_attn_mask(attn_mask, T, S, ndim=max(q.ndim, 2))
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask.to(scores.dtype)
    weights = softmax(scores, dim=-1)  # (..., T, S), each row sums to 1 over the keys (or is all 0)
    if training and dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p, training=True)
    out = weights @ v  # (..., T, S) @ (..., S, d_v) -> (..., T, d_v)
    return out, weights


class SelfAttention(nn.Module):
    """One head of self-attention with learned query, key and value projections.

    ``q = x W_q``, ``k = x W_k``, ``v = x W_v`` (``nn.Linear`` layers ``q_proj``, ``k_proj``,
    ``v_proj`` from ``d_model`` to ``d_head``), then :func:`scaled_dot_product_attention`.

    Shapes:
        x: ``(B, T, d_model)``.
        returns: out ``(B, T, d_head)``, weights ``(B, T, T)``.
    """

    def __init__(self, d_model: int, d_head: int | None = None, *, bias: bool = False):
        super().__init__()
        d_model = check_int("d_model", d_model, minimum=1)
        d_head = d_model if d_head is None else check_int("d_head", d_head, minimum=1)
        check_bool("bias", bias)
        self.d_model, self.d_head = d_model, d_head
        self.q_proj = nn.Linear(d_model, d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, d_head, bias=bias)

    def forward(self, x: Tensor, *, attn_mask: Tensor | None = None,
                is_causal: bool = False) -> tuple[Tensor, Tensor]:
        B, T, C = check_vectors("x", x, self.d_model, like=self.q_proj.weight)
        q = self.q_proj(x)  # (B, T, d_model) -> (B, T, d_head)
        k, v = self.k_proj(x), self.v_proj(x)  # (B, T, d_head) each
        return scaled_dot_product_attention(
            q, k, v, attn_mask=attn_mask, is_causal=is_causal)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, d_head={self.d_head}"


class KVCache:
    """The keys and values of the positions seen so far, for one attention layer.

    During generation each step feeds only the new tokens; their keys and values are appended
    here and the queries attend to everything cached (see chapter 8).

    Shapes:
        k, v: stored as ``(B, h, S, d_head)``, ``S`` = number of cached positions.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Concatenate new keys and values along ``S`` and return all of them.

        Shapes:
            k, v: ``(B, h, T_new, d_head)``.
            returns: k, v ``(B, h, S + T_new, d_head)``.
        """
        check_tensor("k", k, shape=("B", "h", "T", "d_head"), dtype="float")
        check_tensor("v", v, shape=("B", "h", "T", "d_head"), dtype="float")
        if k.shape != v.shape:
            raise ValueError(f"`k` and `v` must have the same shape (got {tuple(k.shape)} and {tuple(v.shape)})")
        if self.k is None:
            self.k, self.v = k, v
        else:
            B, h, _, d_head = self.k.shape
            if (k.shape[0], k.shape[1], k.shape[3]) != (B, h, d_head):
                raise ValueError(
                    f"new `k`, `v` must match the cache's (B, h, d_head) = ({B}, {h}, {d_head}) "
                    f"(got shape={tuple(k.shape)}); a cache holds one batch of one layer: use a new "
                    "KVCache() for another batch or layer"
                )
            if (k.device, k.dtype) != (self.k.device, self.k.dtype):
                raise ValueError(f"new `k`, `v` must have the cache's device and dtype ({self.k.device}, "
                                 f"{self.k.dtype}) (got {k.device}, {k.dtype})")
            self.k = torch.cat([self.k, k], dim=2)  # (B, h, S, d_head) + (B, h, T_new, d_head) -> (B, h, S + T_new, d_head)
            self.v = torch.cat([self.v, v], dim=2)
        return self.k, self.v

    def reorder(self, index: Tensor) -> None:
        """Keep, reorder or duplicate batch rows: row ``b`` becomes old row ``index[b]``.

        Shapes:
            index: ``(B_new,)`` integers in ``[0, B)``.
        """
        if self.k is None:
            check_tensor("index", index, shape=("B_new",), dtype="int", nonempty=False)
            return
        check_index("index", index, self.k.shape[0], what=f"rows of the cache's batch of B={self.k.shape[0]}")
        index = index.to(self.k.device)
        self.k = self.k.index_select(0, index)  # (B_new, h, S, d_head)
        self.v = self.v.index_select(0, index)

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    @property
    def batch_size(self) -> int | None:
        """Number of sequences cached (None while the cache is empty)."""
        return None if self.k is None else self.k.shape[0]

    def __repr__(self) -> str:
        shape = None if self.k is None else tuple(self.k.shape)
        return f"KVCache(len={len(self)}, shape={shape})"
