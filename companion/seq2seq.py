"""The full transformer: an encoder-decoder that maps a source sequence to a target (chapter 9).

The original architecture of Vaswani et al. (2017), assembled from the companion's parts:

* source and target token embeddings, multiplied by ``sqrt(d_model)``, plus the sinusoidal
  positions of chapter 5 (:class:`~companion.positional.SinusoidalPositionalEncoding`);
* the encoder: :class:`companion.encoder.Encoder`, a stack of chapter 6 encoder blocks and a
  final LayerNorm, which turns the source into the *memory* ``(B, S, d_model)``;
* the decoder: :class:`Decoder`, a stack of chapter 6 :class:`~companion.block.DecoderBlock`
  layers (masked self-attention, cross-attention to the memory, feed-forward) and a final
  LayerNorm;
* an output head from ``d_model`` to the vocabulary, optionally sharing its matrix with the
  target embedding (weight tying).

Without the embeddings and the head, :class:`Seq2SeqTransformer` computes exactly what
``torch.nn.Transformer`` computes once the same weights are copied in
(:meth:`Seq2SeqTransformer.copy_from_torch`); the tests check values and gradients.

Generation reuses chapter 8's decoders (:mod:`companion.decoding`), which accept any model that
maps target ids ``(B, T)`` to logits ``(B, T, V)``: :meth:`Seq2SeqTransformer.conditioned_on`
fixes a source ``x`` and returns such a model of ``p(y | x)``, with a cache that holds the
decoder's self-attention keys and values (:class:`~companion.attention.KVCache`) and the
cross-attention's keys and values, computed once from the memory.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from companion.attention import KVCache, scaled_dot_product_attention
from companion.multihead import fused_attention
from companion.block import DecoderBlock
from companion.encoder import Encoder
from companion.norm import LayerNorm
from companion.validation import IGNORE_INDEX, check_token_ids, check_vectors
from companion.positional import SinusoidalPositionalEncoding

__all__ = ["Seq2SeqConfig", "Decoder", "DecoderCache", "Seq2SeqTransformer", "ConditionalLM"]

_ACTIVATIONS = ("relu", "gelu")  # the two that torch.nn.Transformer offers by name


@dataclass(frozen=True)
class Seq2SeqConfig:
    """The shape of a :class:`Seq2SeqTransformer` (nothing about training)."""

    vocab_size: int = 36  # tokens (one character table for both sides)
    context_length: int = 64  # longest source, longest target
    d_model: int = 64  # width of every token's vector
    n_heads: int = 4  # heads per attention layer; d_head = d_model / n_heads
    n_encoder_layers: int = 2  # encoder blocks
    n_decoder_layers: int = 2  # decoder blocks
    d_ff: int | None = None  # feed-forward width; None means 4 * d_model
    dropout: float = 0.0  # on embeddings and inside blocks (training only)
    norm_first: bool = False  # False: post-norm (original); True: pre-norm
    activation: str = "relu"  # feed-forward activation: "relu" or "gelu"
    tie_embeddings: bool = True  # the head reuses the target embedding
    pad_id: int = 0  # padding token, masked out of the source

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "d_model", "n_heads", "n_encoder_layers", "n_decoder_layers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer (got {name}={value!r})")
        if self.d_model % self.n_heads:
            raise ValueError(f"`d_model` must be divisible by `n_heads` (got d_model={self.d_model}, "
                             f"n_heads={self.n_heads}); each head gets d_model / n_heads features")
        if self.d_model % 2:
            raise ValueError(f"`d_model` must be even for the sinusoidal positions, which pair features "
                             f"as (sin, cos) (got d_model={self.d_model})")
        if self.d_ff is not None and (isinstance(self.d_ff, bool) or not isinstance(self.d_ff, int) or self.d_ff < 1):
            raise ValueError(f"`d_ff` must be a positive integer or None for 4 * d_model (got d_ff={self.d_ff!r})")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"`dropout` must be a number in [0, 1) (got dropout={self.dropout!r})")
        for name in ("norm_first", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"`{name}` must be True or False (got {name}={getattr(self, name)!r})")
        if self.activation not in _ACTIVATIONS:
            raise ValueError(f"`activation` must be one of {list(_ACTIVATIONS)} (got activation={self.activation!r})")
        if isinstance(self.pad_id, bool) or not isinstance(self.pad_id, int) or not 0 <= self.pad_id < self.vocab_size:
            raise ValueError(f"`pad_id` must be a token id in [0, vocab_size={self.vocab_size}) (got pad_id={self.pad_id!r})")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


# --------------------------------------------------------------------------------------------
# The decoder stack and its cache
# --------------------------------------------------------------------------------------------
class DecoderCache:
    """What incremental decoding keeps between steps, for one batch of sources.

    * ``self_attn``: one :class:`~companion.attention.KVCache` per decoder layer, the keys and
      values of the target positions decoded so far (they grow by one position per step);
    * ``cross_kv``: one pair ``(k, v)`` per decoder layer, the cross-attention's keys and values.
      They depend on the source only, so they are computed once, when the cache is made;
    * ``memory_key_mask``: ``(B, S)`` bool, True = a real source token, or None.

    ``len(cache)`` is the number of target positions processed; :meth:`reorder` keeps, reorders or
    duplicates batch rows in all of them (beam search).

    Shapes:
        cross_kv: each ``k``, ``v`` ``(B, h, S, d_head)``.
    """

    def __init__(self, cross_kv: list[tuple[Tensor, Tensor]], memory_key_mask: Tensor | None = None):
        if not isinstance(cross_kv, list) or not cross_kv or not all(
                isinstance(kv, tuple) and len(kv) == 2 and all(isinstance(t, Tensor) and t.ndim == 4 for t in kv)
                for kv in cross_kv):
            raise TypeError("`cross_kv` must be a non-empty list of (k, v) pairs of tensors (B, h, S, d_head), one per "
                            "decoder layer; make a cache with Seq2SeqTransformer.new_cache(memory)")
        B, _, S, _ = cross_kv[0][0].shape
        if memory_key_mask is not None and (not isinstance(memory_key_mask, Tensor) or memory_key_mask.dtype != torch.bool
                                            or tuple(memory_key_mask.shape) != (B, S)):
            got = (f"{memory_key_mask.dtype} {tuple(memory_key_mask.shape)}" if isinstance(memory_key_mask, Tensor)
                   else type(memory_key_mask).__name__)
            raise ValueError(f"`memory_key_mask` must be a bool tensor of shape (B, S) = ({B}, {S}) (got {got})")
        self.self_attn = [KVCache() for _ in cross_kv]
        self.cross_kv = cross_kv
        self.memory_key_mask = memory_key_mask

    def __len__(self) -> int:
        return len(self.self_attn[0])

    @property
    def batch_size(self) -> int:
        return self.cross_kv[0][0].shape[0]

    def reorder(self, index: Tensor) -> None:
        """Row ``b`` becomes old row ``index[b]``, in every layer, the source's keys, values and
        mask included (so that each hypothesis of a beam keeps attending to its own source).

        Shapes:
            index: ``(B_new,)`` integers in ``[0, B)``.
        """
        if not isinstance(index, Tensor) or index.ndim != 1 or index.is_floating_point() or index.dtype == torch.bool:
            raise TypeError(f"`index` must be a 1-D integer tensor (got {index!r:.80})")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= self.batch_size):
            raise ValueError(f"`index` must hold rows in [0, {self.batch_size}) (got values from "
                             f"{int(index.min())} to {int(index.max())})")
        index = index.to(self.cross_kv[0][0].device)
        for cache in self.self_attn:
            cache.reorder(index)
        self.cross_kv = [(k.index_select(0, index), v.index_select(0, index)) for k, v in self.cross_kv]
        if self.memory_key_mask is not None:
            self.memory_key_mask = self.memory_key_mask.index_select(0, index)  # (B_new, S)

    def __repr__(self) -> str:
        S = self.cross_kv[0][0].shape[2]
        return f"DecoderCache(n_layers={len(self.self_attn)}, batch={self.batch_size}, source={S}, positions={len(self)})"


class Decoder(nn.Module):
    """``n_layers`` decoder blocks and a final LayerNorm: the decoder of the original transformer.

    Every block runs masked self-attention over the target, cross-attention from the target to
    the encoder's output ``memory``, and a feed-forward network (chapter 6's
    :class:`~companion.block.DecoderBlock`). With ``final_norm=True`` it computes what
    ``torch.nn.TransformerDecoder(layer, n_layers, norm=nn.LayerNorm(d_model))`` computes with a
    causal mask, once the same weights are copied in (:meth:`copy_from_torch`).

    Args:
        n_layers: number of blocks; the others are :class:`~companion.block.DecoderBlock`'s.
        final_norm: a LayerNorm after the last block (``torch.nn.Transformer`` has one in both
            orders; a pre-norm stack needs it).

    Submodules: ``blocks`` (a ModuleList of DecoderBlock), ``norm`` (LayerNorm or None).

    Shapes:
        x: ``(B, T, d_model)``, memory: ``(B, S, d_model)`` -> ``(B, T, d_model)``.
        ``key_mask`` ``(B, T)`` and ``memory_key_mask`` ``(B, S)`` bool, True = a real token.
    """

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int | None = None, *,
                 dropout: float = 0.0, norm_first: bool = False, activation: str = "relu",
                 bias: bool = True, eps: float = 1e-5, final_norm: bool = True):
        super().__init__()
        if isinstance(n_layers, bool) or not isinstance(n_layers, int) or n_layers < 1:
            raise ValueError(f"`n_layers` must be an integer >= 1 (got n_layers={n_layers!r})")
        self.d_model, self.n_layers, self.n_heads = d_model, n_layers, n_heads
        self.blocks = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first,
                         activation=activation, bias=bias, eps=eps)
            for _ in range(n_layers)
        )
        self.norm = LayerNorm(d_model, eps=eps, bias=bias) if final_norm else None

    def forward(self, x: Tensor, memory: Tensor, *, key_mask: Tensor | None = None,
                memory_key_mask: Tensor | None = None) -> Tensor:
        B, T, C = check_vectors("x", x, self.d_model, like=next(self.parameters()))
        for block in self.blocks:
            # target position t sees targets <= t, and every real source position
            x = block(x, memory, is_causal=True, key_mask=key_mask, memory_key_mask=memory_key_mask)  # (B, T, C)
        return x if self.norm is None else self.norm(x)  # (B, T, C)

    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every layer's cross-attention keys and values for ``memory``: they depend on the
        source only, so decoding computes them once (:class:`DecoderCache`).

        Shapes:
            memory: ``(B, S, d_model)`` -> ``n_layers`` pairs of ``(B, h, S, d_head)``.
        """
        B, S, C = check_vectors("memory", memory, self.d_model, like=next(self.parameters()))
        h = self.n_heads
        pairs = []
        for block in self.blocks:
            ca = block.cross_attn
            k = ca.k_proj(memory).view(B, S, h, C // h).transpose(1, 2)  # (B, S, C) -> (B, h, S, d_head)
            v = ca.v_proj(memory).view(B, S, h, C // h).transpose(1, 2)  # (B, h, S, d_head)
            pairs.append((k, v))
        return pairs

    def forward_cached(self, x: Tensor, cache: DecoderCache, *, need_weights: bool = False
                       ) -> tuple[Tensor, list[Tensor] | None]:
        """The decoder on the next ``T`` target positions, after the ``len(cache)`` in ``cache``.

        The same three sublayers as :meth:`DecoderBlock.forward`, in the same order, with two
        differences that make generation cheap: self-attention appends the new keys and values to
        the cache and attends to all of them (no recomputation of the past), and cross-attention
        uses the keys and values stored in the cache (no projection of the memory at every step).
        With ``need_weights=True`` it also returns each layer's cross-attention weights.

        Shapes:
            x: ``(B, T, d_model)`` -> out ``(B, T, d_model)``; weights: ``n_layers`` tensors of
            ``(B, h, T, S)`` or None.
        """
        B, T, C = check_vectors("x", x, self.d_model, like=next(self.parameters()))
        if not isinstance(cache, DecoderCache):
            raise TypeError(f"`cache` must be a DecoderCache (got {type(cache).__name__}); "
                            "make one with Seq2SeqTransformer.new_cache(memory)")
        if len(cache.cross_kv) != self.n_layers:
            raise ValueError(f"`cache` was made for a decoder of {len(cache.cross_kv)} layers; this one has "
                             f"{self.n_layers}: make it with this model's new_cache(memory)")
        if cache.batch_size != B:
            raise ValueError(f"`cache` holds {cache.batch_size} source rows but the target has batch size B={B}: "
                             "make the cache from the memory of the same batch (new_cache(memory)), or "
                             "cache.reorder(index) to pick or repeat its rows")
        h, d_head = self.n_heads, C // self.n_heads
        mask = None if cache.memory_key_mask is None else cache.memory_key_mask[:, None, None, :]  # (B, 1, 1, S)
        weights = [] if need_weights else None
        for block, (k, v), self_cache in zip(self.blocks, cache.cross_kv, cache.self_attn):
            ca = block.cross_attn
            p = ca.dropout if self.training else 0.0

            def sa(h_in: Tensor) -> Tensor:  # masked self-attention, new keys/values appended to the cache
                out, _ = block.attn(h_in, is_causal=True, kv_cache=self_cache)  # (B, T, C)
                return block.dropout1(out)

            def cross(h_in: Tensor) -> Tensor:  # queries from the target, cached keys/values from the source
                q = ca.q_proj(h_in).view(B, T, h, d_head).transpose(1, 2)  # (B, T, C) -> (B, h, T, d_head)
                if need_weights:
                    out, w = scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, training=self.training)
                    weights.append(w)  # (B, h, T, S)
                else:
                    out = fused_attention(q, k, v, attn_mask=mask, dropout_p=p)  # (B, h, T, d_head)
                out = out.transpose(1, 2).reshape(B, T, C)  # (B, h, T, d_head) -> (B, T, C)
                return block.dropout2(ca.out_proj(out))

            if block.norm_first:
                x = x + sa(block.norm1(x))
                x = x + cross(block.norm2(x))
                x = x + block.dropout3(block.ff(block.norm3(x)))
            else:
                x = block.norm1(x + sa(x))
                x = block.norm2(x + cross(x))
                x = block.norm3(x + block.dropout3(block.ff(x)))
        return (x if self.norm is None else self.norm(x)), weights

    @torch.no_grad()
    def copy_from_torch(self, decoder: nn.TransformerDecoder) -> "Decoder":
        """Copy the weights of a ``torch.nn.TransformerDecoder`` of the same shape. Returns ``self``."""
        if not isinstance(decoder, nn.TransformerDecoder):
            raise TypeError(f"`decoder` must be a torch.nn.TransformerDecoder (got {type(decoder).__name__})")
        if len(decoder.layers) != self.n_layers or (decoder.norm is None) != (self.norm is None):
            raise ValueError(
                f"`decoder` must have {self.n_layers} layers and "
                f"{'a final norm' if self.norm is not None else 'no final norm'} "
                f"(got {len(decoder.layers)} layers, {'no' if decoder.norm is None else 'a'} final norm)"
            )
        for mine, theirs in zip(self.blocks, decoder.layers):
            mine.copy_from_torch(theirs)
        if self.norm is not None:
            self.norm.weight.copy_(decoder.norm.weight)
            if self.norm.bias is not None:
                self.norm.bias.copy_(decoder.norm.bias)
        return self


# --------------------------------------------------------------------------------------------
# The encoder-decoder model
# --------------------------------------------------------------------------------------------
def _check_ids(name: str, ids: object, vocab_size: int, context_length: int, start: int = 0) -> tuple[int, int]:
    if not isinstance(ids, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor of token ids (got {type(ids).__name__})")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"`{name}` must hold integer token ids (dtype torch.long) (got dtype {ids.dtype})")
    if ids.ndim != 2 or ids.shape[1] == 0 or ids.shape[0] == 0:
        raise ValueError(f"`{name}` must have shape (B, length) with B, length >= 1 (got shape {tuple(ids.shape)}); "
                         "a single sequence is ids[None]")
    if int(ids.min()) < 0 or int(ids.max()) >= vocab_size:
        raise ValueError(f"`{name}` must hold token ids in [0, vocab_size={vocab_size}) "
                         f"(got values from {int(ids.min())} to {int(ids.max())})")
    if start + ids.shape[1] > context_length:
        where = f"{start} cached + {ids.shape[1]} new positions" if start else f"{ids.shape[1]} positions"
        raise ValueError(f"`{name}` is longer than the model's position table: {where} > context_length="
                         f"{context_length}; use shorter sequences or a model with a larger context_length")
    return ids.shape[0], ids.shape[1]


def _check_key_mask(name: str, mask: object, B: int, L: int) -> Tensor:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise TypeError(f"`{name}` must be a bool tensor, True = a real token, False = padding (got {got})")
    if tuple(mask.shape) != (B, L):
        raise ValueError(f"`{name}` must have shape (B, length) = ({B}, {L}) (got shape {tuple(mask.shape)})")
    return mask


class Seq2SeqTransformer(nn.Module):
    """The encoder-decoder transformer of Vaswani et al. (2017), for one shared vocabulary.

    ``x`` (source ids) -> embeddings * sqrt(d_model) + positions -> :class:`~companion.encoder.Encoder`
    -> memory; ``y`` (target ids, shifted right: ``<s> y_1 ... y_{T-1}``) -> embeddings *
    sqrt(d_model) + positions -> :class:`Decoder` (causal self-attention, cross-attention to the
    memory) -> head -> logits for ``y_1 ... y_T``.

    Source positions that hold ``config.pad_id`` are masked out of every attention over the
    source (the encoder's self-attention and the decoder's cross-attention) unless an explicit
    ``src_key_mask`` is given. Targets are padded on the right: causality already keeps every
    real position from seeing the padding after it, and the loss ignores padded targets.

    Shapes:
        src: ``(B, S)``, tgt: ``(B, T)`` integer ids, ``S, T <= context_length``.
        returns logits ``(B, T, vocab_size)`` and, with ``targets`` ``(B, T)``, the mean
        cross-entropy over non-padding targets (else None).
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        if not isinstance(config, Seq2SeqConfig):
            raise TypeError(f"`config` must be a Seq2SeqConfig (got {type(config).__name__})")
        self.config = c = config
        self.src_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.tgt_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos = SinusoidalPositionalEncoding(c.d_model, c.context_length)
        self.drop = nn.Dropout(c.dropout)
        common = dict(dropout=c.dropout, norm_first=c.norm_first, activation=c.activation)
        self.encoder = Encoder(c.n_encoder_layers, c.d_model, c.n_heads, c.d_ff, **common)
        self.decoder = Decoder(c.n_decoder_layers, c.d_model, c.n_heads, c.d_ff, **common)
        # Chapter 4's LayerNorm (tested equal to torch.nn.LayerNorm) is swapped for torch's fused
        # kernel, as chapter 7's GPT does: the same function and parameter names, fewer passes.
        for module in list(self.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, LayerNorm):
                    setattr(module, name, nn.LayerNorm(child.d_model, eps=child.eps, bias=child.bias is not None))
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.head.weight = self.tgt_emb.weight  # one (V, d_model) matrix reads and writes target tokens
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform weight matrices (``torch.nn.Transformer``'s choice), zero biases, identity
        norms, and embeddings drawn from ``N(0, 1 / d_model)`` (the scale of tensor2tensor, the
        original's reference code; the paper gives no initialization).

        With that scale an embedding times ``sqrt(d_model)`` has entries of variance 1, comparable
        with the sinusoidal positions added to it, and a tied head gives logits of order 1.
        """
        d = self.config.d_model
        for name, p in self.named_parameters():
            if name in ("src_emb.weight", "tgt_emb.weight") or (name == "head.weight" and not self.config.tie_embeddings):
                nn.init.normal_(p, mean=0.0, std=d ** -0.5)
            elif p.ndim >= 2:
                nn.init.xavier_uniform_(p)
            elif "norm" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def num_parameters(self) -> int:
        """Number of distinct parameters (a tied head counts once, with the target embedding)."""
        return sum(p.numel() for p in self.parameters())

    # ---------------------------------------------------------------- the two halves
    def source_key_mask(self, src: Tensor) -> Tensor:
        """``src != pad_id``: True where the source holds a real token.

        Shapes:
            src ``(B, S)`` -> ``(B, S)`` bool.
        """
        _check_ids("src", src, self.config.vocab_size, self.config.context_length)
        return src != self.config.pad_id

    def embed_source(self, src: Tensor) -> Tensor:
        """``E_src[x] * sqrt(d_model) + P``, then dropout. Shapes: src ``(B, S)`` -> ``(B, S, d_model)``."""
        _check_ids("src", src, self.config.vocab_size, self.config.context_length)
        return self.drop(self.pos(self.src_emb(src) * math.sqrt(self.config.d_model)))  # (B, S, d)

    def embed_target(self, tgt: Tensor, offset: int = 0) -> Tensor:
        """``E_tgt[y] * sqrt(d_model) + P[offset:]``, then dropout. Shapes: tgt ``(B, T)`` -> ``(B, T, d_model)``."""
        _check_ids("tgt", tgt, self.config.vocab_size, self.config.context_length, offset)
        return self.drop(self.pos(self.tgt_emb(tgt) * math.sqrt(self.config.d_model), offset=offset))  # (B, T, d)

    def encode(self, src: Tensor, src_key_mask: Tensor | None = None) -> Tensor:
        """The memory: the encoder's output for the source.

        ``src_key_mask`` (True = a real token) defaults to :meth:`source_key_mask`. Pass the
        same mask to :meth:`decode` (as ``memory_key_mask``) or to :meth:`new_cache`.

        Shapes:
            src ``(B, S)`` -> memory ``(B, S, d_model)``.
        """
        return self._encode(src, src_key_mask)[0]

    def _encode(self, src: Tensor, src_key_mask: Tensor | None) -> tuple[Tensor, Tensor | None]:
        """-> memory (B, S, d_model) and the key mask actually used (None when nothing is padded)."""
        _check_ids("src", src, self.config.vocab_size, self.config.context_length)
        mask = self._source_mask(src, src_key_mask)
        return self.encoder(self.embed_source(src), key_mask=mask), mask  # (B, S, d_model)

    def _source_mask(self, src: Tensor, src_key_mask: Tensor | None) -> Tensor | None:
        B, S = src.shape
        mask = src != self.config.pad_id if src_key_mask is None else _check_key_mask("src_key_mask", src_key_mask, B, S)
        empty = (~mask.any(dim=1)).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"source rows {empty[:5]} hold only padding (pad_id={self.config.pad_id}): a "
                             "source needs at least one real token for the decoder to attend to")
        return None if bool(mask.all()) else mask  # None: nothing to mask, the fast attention path

    def decode(self, tgt: Tensor, memory: Tensor | None = None, *, memory_key_mask: Tensor | None = None,
               tgt_key_mask: Tensor | None = None, cache: DecoderCache | None = None) -> Tensor:
        """Logits of the next target token at every position of ``tgt``, given the source.

        Either from ``memory`` (and its ``memory_key_mask``: without it, padded source positions
        are attended to), or, for incremental decoding, from a ``cache`` made by :meth:`new_cache`
        (then ``tgt`` holds only the new positions, after the ``len(cache)`` already processed).

        Shapes:
            tgt ``(B, T)``, memory ``(B, S, d_model)`` -> logits ``(B, T, vocab_size)``.
        """
        c = self.config
        if cache is not None:
            if memory is not None or memory_key_mask is not None or tgt_key_mask is not None:
                raise ValueError("pass either `memory` (with its masks) or `cache`, not both: the cache holds the "
                                 "source's keys, values and mask already")
            if not isinstance(cache, DecoderCache):
                raise TypeError(f"`cache` must be a DecoderCache (got {type(cache).__name__}); make one with new_cache()")
            B, T = _check_ids("tgt", tgt, c.vocab_size, c.context_length, len(cache))
            x = self.embed_target(tgt, offset=len(cache))  # (B, T, d): positions continue after the cache
            h, _ = self.decoder.forward_cached(x, cache)  # (B, T, d)
            return self.head(h)  # (B, T, d) @ (d, V) -> (B, T, V)
        B, T = _check_ids("tgt", tgt, c.vocab_size, c.context_length)
        if not isinstance(memory, Tensor) or memory.ndim != 3 or memory.shape[0] != B or memory.shape[2] != c.d_model:
            got = tuple(memory.shape) if isinstance(memory, Tensor) else type(memory).__name__
            raise ValueError(f"`memory` must be the encoder's output, of shape (B={B}, S, d_model={c.d_model}) "
                             f"(got {got}); compute it with model.encode(src)")
        S = memory.shape[1]
        if memory_key_mask is not None:
            _check_key_mask("memory_key_mask", memory_key_mask, B, S)
        if tgt_key_mask is not None:
            _check_key_mask("tgt_key_mask", tgt_key_mask, B, T)
            # Targets are padded on the right: real tokens first. A False before a True (left
            # padding) would leave a query with no key it may see (NaN) or hide real tokens.
            left = (~tgt_key_mask[:, :-1] & tgt_key_mask[:, 1:]).any(dim=1) | ~tgt_key_mask[:, 0]
            if bool(left.any()):
                rows = left.nonzero().flatten().tolist()
                raise ValueError(f"`tgt_key_mask` must mark right padding: in each row True for the real tokens, "
                                 f"then only False (rows {rows[:5]} have a False first or before a True). Pad "
                                 "targets on the right; the causal mask then keeps every real position from "
                                 "seeing the padding, so tgt_key_mask can also be left out")
        x = self.embed_target(tgt)  # (B, T, d)
        h = self.decoder(x, memory, key_mask=tgt_key_mask, memory_key_mask=memory_key_mask)  # (B, T, d)
        return self.head(h)  # (B, T, d) @ (d, V) -> (B, T, V)

    def forward(self, src: Tensor, tgt: Tensor, targets: Tensor | None = None, *,
                src_key_mask: Tensor | None = None, tgt_key_mask: Tensor | None = None):
        """Teacher forcing: logits for every target position at once (and the loss).

        ``tgt`` is the decoder's input, the target shifted right (``<s> y_1 .. y_{T-1}``);
        ``targets`` the target itself (``y_1 .. y_T``). Positions whose target is ``pad_id`` do
        not count in the loss.

        Shapes:
            src ``(B, S)``, tgt ``(B, T)``, targets ``(B, T)`` -> logits ``(B, T, V)``, loss (scalar) or None.
        """
        c = self.config
        B, S = _check_ids("src", src, c.vocab_size, c.context_length)
        B2, T = _check_ids("tgt", tgt, c.vocab_size, c.context_length)
        if B2 != B:
            raise ValueError(f"`src` and `tgt` must have the same batch size (got {B} and {B2})")
        if targets is not None:
            if not isinstance(targets, Tensor) or tuple(targets.shape) != (B, T) or targets.is_floating_point() \
                    or targets.is_complex() or targets.dtype == torch.bool:
                got = f"{tuple(targets.shape)} {targets.dtype}" if isinstance(targets, Tensor) else type(targets).__name__
                raise ValueError(f"`targets` must be integer ids of the same shape as `tgt` {(B, T)} (got {got})")
            check_token_ids("targets", targets, c.vocab_size, ignore_index=IGNORE_INDEX,
                            hint=f"pad_id={c.pad_id} and -100 (as for the GPT) are both left out of the loss")
        memory, mask = self._encode(src, src_key_mask)  # (B, S, d)
        logits = self.decode(tgt, memory, memory_key_mask=mask, tgt_key_mask=tgt_key_mask)  # (B, T, V)
        loss = None
        if targets is not None:
            V = logits.shape[-1]
            # pad_id and -100 (the GPT's ignore_index) are both left out; the mean over the rest
            # is 0, with a zero gradient, when nothing is left (as the GPT's), never NaN.
            flat = targets.reshape(B * T).long().masked_fill(targets.reshape(B * T) == c.pad_id, IGNORE_INDEX)
            nll = F.cross_entropy(logits.reshape(B * T, V).float(), flat, ignore_index=IGNORE_INDEX, reduction="sum")
            loss = nll / (flat != IGNORE_INDEX).sum().clamp(min=1)
        return logits, loss

    # ---------------------------------------------------------------- decoding
    def new_cache(self, memory: Tensor, memory_key_mask: Tensor | None = None) -> DecoderCache:
        """An empty cache for :meth:`decode`, holding the cross-attention keys and values of
        ``memory`` (computed here, once).

        Shapes:
            memory ``(B, S, d_model)``, memory_key_mask ``(B, S)`` bool or None.
        """
        if not isinstance(memory, Tensor) or memory.ndim != 3 or memory.shape[2] != self.config.d_model:
            got = tuple(memory.shape) if isinstance(memory, Tensor) else type(memory).__name__
            raise ValueError(f"`memory` must be the encoder's output, of shape (B, S, d_model={self.config.d_model}) "
                             f"(got {got}); compute it with model.encode(src)")
        if memory_key_mask is not None:
            _check_key_mask("memory_key_mask", memory_key_mask, memory.shape[0], memory.shape[1])
        return DecoderCache(self.decoder.cross_kv(memory), memory_key_mask)

    @torch.no_grad()
    def conditioned_on(self, src: Tensor, src_key_mask: Tensor | None = None) -> "ConditionalLM":
        """``p(y | x)`` for the fixed source ``src``, as a language model over the target.

        The result maps target ids ``(B, T)`` to logits ``(B, T, V)``, has ``new_cache()`` and
        ``config.context_length``: what chapter 8's decoders (:mod:`companion.decoding`) need. The
        source is encoded once, here (without gradients: this is for decoding).

        Shapes:
            src ``(B, S)``; a source of one row serves any number of target rows (beam search).
        """
        memory, mask = self._encode(src, src_key_mask)  # (B, S, d)
        return ConditionalLM(self, memory, mask)

    @torch.no_grad()
    def cross_attention_weights(self, src: Tensor, tgt: Tensor, src_key_mask: Tensor | None = None) -> Tensor:
        """The cross-attention weights of every head of every decoder layer, teacher-forced on ``tgt``.

        Row ``t`` of a map says how much the decoder, reading ``tgt[:t+1]`` to predict the next
        target token, looks at each source position.

        Shapes:
            src ``(B, S)``, tgt ``(B, T)`` -> ``(n_decoder_layers, B, n_heads, T, S)``.
        """
        B, _ = _check_ids("tgt", tgt, self.config.vocab_size, self.config.context_length)
        memory, mask = self._encode(src, src_key_mask)  # (B, S, d)
        if memory.shape[0] != B:
            raise ValueError(f"`src` and `tgt` must have the same batch size (got {memory.shape[0]} and {B})")
        cache = self.new_cache(memory, mask)
        _, weights = self.decoder.forward_cached(self.embed_target(tgt), cache, need_weights=True)
        return torch.stack(weights)  # (n_layers, B, h, T, S)

    @torch.no_grad()
    def copy_from_torch(self, transformer: nn.Transformer) -> "Seq2SeqTransformer":
        """Copy the encoder and decoder weights of a ``torch.nn.Transformer`` of the same shape.

        ``torch.nn.Transformer`` has no embeddings and no head: those stay as they are. Returns ``self``.
        """
        if not isinstance(transformer, nn.Transformer):
            raise TypeError(f"`transformer` must be a torch.nn.Transformer (got {type(transformer).__name__})")
        c = self.config
        layer = transformer.encoder.layers[0]
        act = {1: "relu", 2: "gelu"}.get(getattr(layer, "activation_relu_or_gelu", 0), "another function")
        got = (transformer.d_model, transformer.nhead, len(transformer.encoder.layers), len(transformer.decoder.layers),
               layer.linear1.out_features, layer.norm_first, act)
        want = (c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff or 4 * c.d_model, c.norm_first,
                c.activation)
        if got != want:
            names = "d_model, nhead, num_encoder_layers, num_decoder_layers, dim_feedforward, norm_first, activation"
            raise ValueError(f"`transformer` must have ({names}) = {want} (got {got})")
        self.encoder.copy_from_torch(transformer.encoder)
        self.decoder.copy_from_torch(transformer.decoder)
        return self


class ConditionalLM(nn.Module):
    """A :class:`Seq2SeqTransformer` with its source fixed: a language model of ``p(y | x)``.

    Made by :meth:`Seq2SeqTransformer.conditioned_on`. Calling it on target ids returns the
    logits of the next target token at every position, exactly as a decoder-only language model
    would, so that chapter 8's decoders (greedy, sampling, beam search, ``sequence_log_prob``)
    work on it unchanged. ``new_cache()`` returns a :class:`DecoderCache` whose ``reorder`` also
    reorders the source's rows, as beam search needs. A memory of one row serves any number of
    target rows.

    Shapes:
        ids ``(B, T)`` -> logits ``(B, T, vocab_size)``; memory ``(B_src, S, d_model)`` with
        ``B_src`` equal to ``B`` or 1.
    """

    def __init__(self, model: Seq2SeqTransformer, memory: Tensor, memory_key_mask: Tensor | None = None):
        super().__init__()
        if not isinstance(model, Seq2SeqTransformer):
            raise TypeError(f"`model` must be a Seq2SeqTransformer (got {type(model).__name__})")
        if not isinstance(memory, Tensor) or memory.ndim != 3 or memory.shape[2] != model.config.d_model:
            got = tuple(memory.shape) if isinstance(memory, Tensor) else type(memory).__name__
            raise ValueError(f"`memory` must have shape (B, S, d_model={model.config.d_model}) (got {got})")
        if memory_key_mask is not None:
            _check_key_mask("memory_key_mask", memory_key_mask, memory.shape[0], memory.shape[1])
        self.model = model
        self.memory, self.memory_key_mask = memory, memory_key_mask
        self.config = model.config  # decoders read config.context_length: the longest target

    def new_cache(self) -> DecoderCache:
        """An empty cache with the source's cross-attention keys and values."""
        return self.model.new_cache(self.memory, self.memory_key_mask)

    def _rows(self, B: int) -> tuple[Tensor, Tensor | None]:
        n = self.memory.shape[0]
        if n == B:
            return self.memory, self.memory_key_mask
        if n == 1:  # one source, many hypotheses of its translation
            mask = None if self.memory_key_mask is None else self.memory_key_mask.expand(B, -1)
            return self.memory.expand(B, -1, -1), mask  # (B, S, d)
        raise ValueError(self._rows_message(B))

    def _rows_message(self, B: int) -> str:
        n = self.memory.shape[0]
        return (f"`ids` must have as many rows as the source (B={n}) or the source must be one row (got {B} "
                f"rows of target ids, the decoder's prompt, for the {n} source rows given to conditioned_on()): "
                "give one prompt row per source row, or condition on one source row, "
                "model.conditioned_on(src[i:i+1]), which serves any number of target rows (beam search)")

    def forward(self, ids: Tensor, cache: DecoderCache | None = None) -> Tensor:
        c = self.config
        B, T = _check_ids("ids", ids, c.vocab_size, c.context_length, len(cache) if isinstance(cache, DecoderCache) else 0)
        if cache is None:
            memory, mask = self._rows(B)
            return self.model.decode(ids, memory, memory_key_mask=mask)  # (B, T, V)
        if isinstance(cache, DecoderCache) and len(cache) == 0 and cache.batch_size != B:
            if cache.batch_size != 1:
                raise ValueError(self._rows_message(B))
            cache.reorder(torch.zeros(B, dtype=torch.long))  # one source row copied for each target row
        return self.model.decode(ids, cache=cache)  # (B, T, V)

    def extra_repr(self) -> str:
        B, S, _ = self.memory.shape
        return f"source rows={B}, source length={S}"
