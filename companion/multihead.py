"""Multi-head attention, batched: heads folded into the batch dimension.

Chapter 3 of the book (Multi-head attention) builds a loop-over-heads version by hand and shows
that this batched module computes the same thing, faster. Masks follow the convention of
:mod:`companion.attention`: **True = may attend**; a float mask is added to the scores; a query
whose keys are all masked gets a zero attention output (before the output projection, so the
module returns ``out_proj.bias`` there), never NaN.
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from companion.attention import KVCache, causal_mask, check_attn_mask, scaled_dot_product_attention
from companion.positional import apply_rotary
from companion.validation import check_bool, check_float, check_instance, check_int, check_vectors

__all__ = ["MultiHeadAttention"]



#: How many times :func:`fused_attention` fell back to the math kernel in this process (a measurement of
#: the fused kernel's memory can tell that it did not measure that kernel).
math_fallbacks = 0


def fused_attention(q: Tensor, k: Tensor, v: Tensor, **kwargs) -> Tensor:
    """:func:`torch.nn.functional.scaled_dot_product_attention`, falling back to PyTorch's math kernel
    where the fused CPU kernel refuses the machine: on a CPU with AVX-512 run with a lower
    ``ATEN_CPU_CAPABILITY`` (avx2 or default), PyTorch 2.13's bfloat16 kernel raises "pack_vnni2 is only
    supported when avx512 is supported". The math kernel computes the same attention."""
    try:
        return F.scaled_dot_product_attention(q, k, v, **kwargs)
    except RuntimeError as exc:
        if "pack_vnni" not in str(exc):
            raise
        from torch.nn.attention import SDPBackend, sdpa_kernel

        global math_fallbacks
        math_fallbacks += 1
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(q, k, v, **kwargs)

class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention for self- and cross-attention.

    ``h = n_heads`` heads of width ``d_head = d_model / n_heads`` each; the four projections
    ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj`` are ``nn.Linear(d_model, d_model)``, so the
    parameter count is ``4 d_model^2`` (+ ``4 d_model`` biases) whatever ``n_heads`` is.

    Two paths compute the same function: when no weights are requested the module calls
    :func:`torch.nn.functional.scaled_dot_product_attention` (fused, fast); with
    ``need_weights=True`` it uses the explicit math of
    :func:`companion.attention.scaled_dot_product_attention` and returns the weights.
    Dropout acts on the attention weights, in training mode only.

    Shapes:
        query: ``(B, T, d_model)``; key, value: ``(B, S, d_model)`` (default: ``query``; ``value``
        defaults to ``key``).
        attn_mask: ``(T, S)``, ``(B, T, S)`` or ``(B, h, T, S)`` (any of these dims may be 1),
        bool (True = may attend) or float (added to the scores).
        key_mask: bool ``(B, S)``, True = a real token that may be attended (the *opposite* of
        ``torch.nn.MultiheadAttention``'s ``key_padding_mask``).
        returns: out ``(B, T, d_model)``; weights None unless ``need_weights=True``, then
        ``(B, T, S)`` averaged over the heads, or ``(B, h, T, S)`` per head with
        ``average_weights=False``.

    With ``kv_cache`` (self-attention only) the new keys and values are appended to the cache
    and ``S`` is the total number of cached positions (masks must cover all ``S``); with
    ``is_causal`` query ``t`` (absolute position ``len(cache_before) + t``) sees keys up to its
    own position.

    With ``rotary=True`` the queries and keys of every head are rotated by their positions (RoPE,
    :func:`companion.positional.apply_rotary`, interleaved pairs within each head's ``d_head``
    features); under a ``kv_cache`` the new tokens' positions start at ``len(kv_cache)``. Meant for
    self-attention (for cross-attention both sides would be counted from 0).
    """

    def __init__(self, d_model: int, n_heads: int, *, dropout: float = 0.0, bias: bool = True, rotary: bool = False):
        super().__init__()
        d_model = check_int("d_model", d_model, minimum=1)
        n_heads = check_int("n_heads", n_heads, minimum=1)
        if d_model % n_heads != 0:
            raise ValueError(
                f"`d_model` must be divisible by `n_heads` (got d_model={d_model}, n_heads={n_heads}); "
                f"each head gets d_model / n_heads features"
            )
        dropout = check_float("dropout", dropout, low=0.0, high=1.0, high_open=True)
        check_bool("bias", bias)
        check_bool("rotary", rotary)
        if rotary and (d_model // n_heads) % 2:
            raise ValueError(f"`rotary` needs an even head width, d_model / n_heads (got {d_model // n_heads}): "
                             "RoPE turns the features of each head in pairs")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.rotary = rotary
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def extra_repr(self) -> str:
        rotary = ", rotary=True" if self.rotary else ""
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}, dropout={self.dropout}{rotary}"

    @torch.no_grad()
    def copy_from_torch(self, mha: nn.MultiheadAttention) -> "MultiHeadAttention":
        """Copy the weights of a ``torch.nn.MultiheadAttention`` (same ``d_model``, ``n_heads``,
        ``bias``; no ``kdim``/``vdim``, no ``add_bias_kv``) into this module. Returns ``self``.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"`mha` must be a torch.nn.MultiheadAttention (got {type(mha).__name__})")
        if (mha.embed_dim, mha.num_heads) != (self.d_model, self.n_heads) or not mha._qkv_same_embed_dim:
            raise ValueError(
                f"`mha` must have embed_dim={self.d_model}, num_heads={self.n_heads} and no kdim/vdim "
                f"(got embed_dim={mha.embed_dim}, num_heads={mha.num_heads})"
            )
        if (mha.in_proj_bias is None) != (self.q_proj.bias is None) or mha.bias_k is not None:
            raise ValueError("`mha` must use biases exactly when this module does, and no add_bias_kv")
        w_q, w_k, w_v = mha.in_proj_weight.chunk(3, dim=0)  # (3 d_model, d_model) -> 3 x (d_model, d_model)
        for proj, w in ((self.q_proj, w_q), (self.k_proj, w_k), (self.v_proj, w_v)):
            proj.weight.copy_(w)
        self.out_proj.weight.copy_(mha.out_proj.weight)
        if mha.in_proj_bias is not None:
            for proj, b in zip((self.q_proj, self.k_proj, self.v_proj), mha.in_proj_bias.chunk(3)):
                proj.bias.copy_(b)
            self.out_proj.bias.copy_(mha.out_proj.bias)
        return self

    def _check_input(self, name: str, x: object, B: int | None = None) -> Tensor:
        check_vectors(name, x, self.d_model, shape=("B", "T" if name == "query" else "S"), like=self.q_proj.weight)
        if B is not None and x.shape[0] != B:
            raise ValueError(f"`{name}` must have the batch size of `query` B={B} (got shape={tuple(x.shape)})")
        return x

    def _combine_masks(
        self, attn_mask: Tensor | None, key_mask: Tensor | None, is_causal: bool, T: int, S: int, device: torch.device
    ) -> Tensor | None:
        """One mask broadcastable to (B, h, T, S): bool (True = may attend) or float (added)."""
        mask: Tensor | None = None
        if is_causal:
            mask = causal_mask(T, S, device=device)  # (T, S)
        if key_mask is not None:
            km = key_mask[:, None, None, :]  # (B, S) -> (B, 1, 1, S)
            mask = km if mask is None else mask & km  # -> (B, 1, T, S)
        if attn_mask is not None:
            if attn_mask.ndim == 3:
                attn_mask = attn_mask.unsqueeze(1)  # (B, T, S) -> (B, 1, T, S)
            if attn_mask.dtype == torch.bool:
                mask = attn_mask if mask is None else mask & attn_mask
            else:
                mask = attn_mask if mask is None else attn_mask.masked_fill(~mask, float("-inf"))
        return mask

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        attn_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
        average_weights: bool = True,
        kv_cache: KVCache | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        self._check_input("query", query)
        B, T, C = query.shape
        check_bool("is_causal", is_causal)
        check_bool("need_weights", need_weights)
        check_bool("average_weights", average_weights)
        if kv_cache is not None:
            check_instance("kv_cache", kv_cache, KVCache, "a companion.attention.KVCache")
            if (key is not None and key is not query) or (value is not None and value is not query):
                raise ValueError("`kv_cache` works with self-attention only: leave `key` and `value` as None")
            if kv_cache.k is not None:
                B_cache, h_cache, _, d_cache = kv_cache.k.shape
                if B_cache != B:
                    raise ValueError(
                        f"`kv_cache` holds {B_cache} sequences but `query` has batch size B={B}; a cache belongs "
                        "to one batch: use a new KVCache(), or keep rows with kv_cache.reorder(index)")
                if (h_cache, d_cache) != (self.n_heads, self.d_head):
                    raise ValueError(
                        f"`kv_cache` was filled by another layer (h={h_cache}, d_head={d_cache}; this one has "
                        f"h={self.n_heads}, d_head={self.d_head}); give each layer its own KVCache()")
        key = query if key is None else self._check_input("key", key, B)
        value = key if value is None else self._check_input("value", value, B)
        if key.shape[1] != value.shape[1]:
            raise ValueError(f"`key` and `value` must have the same length S (got {key.shape[1]} and {value.shape[1]})")
        h, d_head = self.n_heads, self.d_head
        # the number of keys after this call; known before the cache is touched, so that a bad
        # mask raises without leaving the new keys behind in the cache
        S = key.shape[1] + (len(kv_cache) if kv_cache is not None else 0)

        if key_mask is not None:
            if not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool:
                got = key_mask.dtype if isinstance(key_mask, Tensor) else type(key_mask).__name__
                raise TypeError(f"`key_mask` must be a bool tensor, True = a real token (got {got})")
            if tuple(key_mask.shape) != (B, S):
                raise ValueError(f"`key_mask` must have shape (B, S) = ({B}, {S}) (got shape={tuple(key_mask.shape)})")
        if attn_mask is not None:
            check_attn_mask(attn_mask, T, S, ndim=4)
            lead = tuple(attn_mask.shape[:-2])
            if (attn_mask.ndim >= 3 and lead[0] not in (1, B)) or (attn_mask.ndim == 4 and lead[1] not in (1, h)):
                raise ValueError(
                    f"`attn_mask` must have shape (T, S), (B, T, S) or (B, h, T, S) with B={B}, h={h}, T={T}, S={S} "
                    f"(got shape={tuple(attn_mask.shape)})"
                )
        if is_causal and S < T:
            raise ValueError(f"`is_causal` needs at least as many keys as queries (got T={T}, S={S})")

        q, k, v = self._project(query, key, value)  # (B, T, C), (B, S_new, C), (B, S_new, C)
        # (B, T, d_model) -> (B, T, h, d_head) -> (B, h, T, d_head): heads folded into the batch
        q = q.view(B, T, h, d_head).transpose(1, 2)
        k = k.view(B, -1, h, d_head).transpose(1, 2)  # (B, h, S_new, d_head)
        v = v.view(B, -1, h, d_head).transpose(1, 2)  # (B, h, S_new, d_head)
        if self.rotary:
            # RoPE in every head, on queries and keys (never values); new tokens continue after
            # the cached ones, so both start at position len(cache)
            offset = len(kv_cache) if kv_cache is not None else 0
            q, k = apply_rotary(q, offset=offset), apply_rotary(k, offset=offset)  # (B, h, T|S_new, d_head)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)  # (B, h, S_past + T, d_head)
        assert k.shape[2] == S

        p = self.dropout if self.training else 0.0
        weights = None
        if not need_weights and is_causal and T == S and attn_mask is None and key_mask is None:
            # fast path: torch's causal kernel (top-left aligned, equal to ours when T == S)
            out = fused_attention(q, k, v, dropout_p=p, is_causal=True)  # (B, h, T, d_head)
        elif not need_weights and is_causal and T == 1 and attn_mask is None and key_mask is None:
            # one new token after a KV cache: it is the last position, so it sees every key (no mask)
            out = fused_attention(q, k, v, dropout_p=p)  # (B, h, 1, d_head)
        else:
            mask = self._combine_masks(attn_mask, key_mask, is_causal, T, S, query.device)
            if mask is not None and mask.dtype != torch.bool:
                mask = mask.to(q.dtype)
            if not need_weights and (mask is None or self._every_query_has_a_key(mask)):
                out = fused_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (B, h, T, d_head)
            else:
                # explicit path: returns the weights and handles rows with no allowed key
                out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=self.dropout, training=self.training)
                # out (B, h, T, d_head), weights (B, h, T, S)

        out = out.transpose(1, 2).reshape(B, T, C)  # (B, h, T, d_head) -> (B, T, h, d_head) -> (B, T, d_model)
        out = self.out_proj(out)  # (B, T, d_model)
        if not need_weights:
            return out, None
        if average_weights:
            weights = weights.mean(dim=1)  # (B, h, T, S) -> (B, T, S)
        return out, weights

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``query W_q^T``, ``key W_k^T``, ``value W_v^T`` (plus biases).

        In self-attention (``key`` and ``value`` are ``query``) the three products are done as one,
        ``query @ [W_q; W_k; W_v]^T``, as ``torch.nn.MultiheadAttention`` and nanoGPT do: the input
        is read once, and on a GPU one large matrix product (and, under autocast, one cast of the
        weights) replaces three. The weights stay the three ``nn.Linear`` modules that chapter 3
        teaches and checkpoints store; ``torch.cat`` stacks them for this call and the gradient
        flows back to each. The same function as three products (equal up to rounding).

        Shapes: query (B, T, C), key and value (B, S, C) -> (B, T, C), (B, S, C), (B, S, C).
        """
        projections = (self.q_proj, self.k_proj, self.v_proj)
        if key is query and value is query and all(type(m) is nn.Linear for m in projections):
            w = torch.cat([m.weight for m in projections])  # 3 x (C, C) -> (3C, C)
            b = None if self.q_proj.bias is None else torch.cat([m.bias for m in projections])  # (3C,)
            q, k, v = F.linear(query, w, b).chunk(3, dim=-1)  # (B, T, C) @ (C, 3C) -> (B, T, 3C) -> 3 x (B, T, C)
            return q, k, v
        return self.q_proj(query), self.k_proj(key), self.v_proj(value)

    @staticmethod
    def _every_query_has_a_key(mask: Tensor) -> bool:
        allowed = mask if mask.dtype == torch.bool else mask > float("-inf")
        return bool(allowed.any(dim=-1).all())
