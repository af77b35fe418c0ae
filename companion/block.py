"""The transformer block and its parts (chapter 6, *The transformer block*).

* :class:`FeedForward`: the position-wise network ``linear2(act(linear1(x)))``, ``d_ff = 4 d_model``.
* :class:`TransformerBlock`: attention and feed-forward, each wrapped in a residual connection and a
  LayerNorm, either after the sum (``norm_first=False``, post-norm, the original transformer) or
  before the sublayer (``norm_first=True``, pre-norm, GPT-2 and later).
* :class:`EncoderBlock`: the block with unmasked self-attention (BERT, the original encoder).
* :class:`DecoderBlock`: masked self-attention, then cross-attention to an encoder's output
  (``memory``), then the feed-forward network (the original decoder).
* :func:`count_parameters` / :func:`parameter_breakdown`: the size of a configuration, without
  building it.

The submodule names and the order of operations follow ``torch.nn.TransformerEncoderLayer`` and
``torch.nn.TransformerDecoderLayer``, so that weights can be copied between them (the tests do).
"""
from __future__ import annotations


import torch
from torch import Tensor, nn
from torch.nn import functional as F

from companion.multihead import MultiHeadAttention
from companion.norm import LayerNorm
from companion.validation import check_bool, check_choice, check_float, check_int, check_vectors

__all__ = [
    "FeedForward",
    "TransformerBlock",
    "EncoderBlock",
    "DecoderBlock",
    "block_parameters",
    "parameter_breakdown",
    "count_parameters",
]

_ACTIVATIONS = {
    "relu": F.relu,
    "gelu": F.gelu,  # the exact GELU, x * Phi(x), as torch's "gelu"
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),  # GPT-2's approximation
}


def _check_input(x: Tensor, module: nn.Module) -> tuple[int, int, int]:
    """``x`` must be ``(B, T, d_model)`` vectors on the module's device, of its dtype."""
    weight = next(module.parameters())
    return check_vectors("x", x, module.d_model, like=weight)


def _resolve_d_ff(d_model: int, d_ff: int | None) -> int:
    d_model = check_int("d_model", d_model, minimum=1)
    if d_ff is None:
        return 4 * d_model
    return check_int("d_ff", d_ff, minimum=1, hint="use d_ff=None for 4 * d_model")


class FeedForward(nn.Module):
    """Position-wise feed-forward network: the same two-layer MLP applied to every token.

    ``FFN(x) = linear2(dropout(act(linear1(x))))`` with ``linear1: d_model -> d_ff`` and
    ``linear2: d_ff -> d_model``.

    Args:
        d_model: token width.
        d_ff: hidden width (the original and GPT-2 use ``4 * d_model``).
        dropout: dropout on the hidden activations (training only).
        activation: ``"relu"`` (original), ``"gelu"`` (exact; BERT) or ``"gelu_tanh"`` (GPT-2).
        bias: biases in both linear layers.

    Shapes:
        x: ``(B, T, d_model)`` -> ``(B, T, d_model)``.
    """

    def __init__(self, d_model: int, d_ff: int, *, dropout: float = 0.0, activation: str = "relu", bias: bool = True):
        super().__init__()
        d_model = check_int("d_model", d_model, minimum=1)
        d_ff = check_int("d_ff", d_ff, minimum=1)
        check_float("dropout", dropout, low=0.0, high=1.0, high_open=True)
        check_choice("activation", activation, sorted(_ACTIVATIONS))
        check_bool("bias", bias)
        self.d_model, self.d_ff, self.activation = d_model, d_ff, activation
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        B, T, C = _check_input(x, self)
        h = _ACTIVATIONS[self.activation](self.linear1(x))  # (B, T, d_ff)
        return self.linear2(self.dropout(h))  # (B, T, d_model)


def _copy_linear_and_norms(ours: nn.Module, theirs: nn.Module, norms: list[str]) -> None:
    """Copy torch's ``linear1``/``linear2`` and norms into ``ours.ff`` and ``ours.<norm>``."""
    with torch.no_grad():
        for name in ("linear1", "linear2"):
            mine, other = getattr(ours.ff, name), getattr(theirs, name)
            mine.weight.copy_(other.weight)
            if mine.bias is not None:
                mine.bias.copy_(other.bias)
        for name in norms:
            mine, other = getattr(ours, name), getattr(theirs, name)
            mine.weight.copy_(other.weight)
            if mine.bias is not None:
                mine.bias.copy_(other.bias)


def _check_torch_layer(block: nn.Module, layer: nn.Module, cls: type) -> None:
    if not isinstance(layer, cls):
        raise TypeError(f"`layer` must be a torch.nn.{cls.__name__} (got {type(layer).__name__})")
    d_model, d_ff = layer.linear1.in_features, layer.linear1.out_features
    same = (d_model, layer.self_attn.num_heads, d_ff, layer.norm_first) == (block.d_model, block.n_heads, block.d_ff, block.norm_first)
    if not same:
        raise ValueError(
            f"`layer` must have d_model={block.d_model}, nhead={block.n_heads}, dim_feedforward={block.d_ff}, "
            f"norm_first={block.norm_first} (got {d_model}, {layer.self_attn.num_heads}, {d_ff}, {layer.norm_first})"
        )


class TransformerBlock(nn.Module):
    """One transformer layer: self-attention and a feed-forward network, each with a residual and a LayerNorm.

    Post-norm (``norm_first=False``, Vaswani et al. 2017)::

        x = norm1(x + dropout(attn(x)))
        x = norm2(x + dropout(ff(x)))

    Pre-norm (``norm_first=True``, GPT-2 and most models since)::

        x = x + dropout(attn(norm1(x)))
        x = x + dropout(ff(norm2(x)))

    Pre-norm leaves an identity path from input to output, so gradients reach early layers
    unscaled; a pre-norm stack needs a final LayerNorm after its last block.

    Args:
        d_model: token width; n_heads: attention heads (must divide d_model).
        d_ff: feed-forward hidden width, ``None`` for ``4 * d_model``.
        dropout: on the attention weights, the feed-forward hidden layer and both residual branches.
        norm_first: pre-norm if True, post-norm (the original) if False.
        activation: feed-forward activation (see :class:`FeedForward`).
        bias: biases in the linear layers and the LayerNorms.
        eps: LayerNorm's epsilon.

    Submodules: ``attn`` (:class:`~companion.multihead.MultiHeadAttention`), ``norm1``, ``norm2``, ``ff``.

    Shapes:
        x: ``(B, T, d_model)`` -> ``(B, T, d_model)``. ``attn_mask``, ``key_mask``, ``is_causal`` and
        ``kv_cache`` go to the attention unchanged (True in a boolean mask = may attend).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        bias: bool = True,
        eps: float = 1e-5,
    ):
        super().__init__()
        d_ff = _resolve_d_ff(d_model, d_ff)
        check_bool("norm_first", norm_first)
        self.d_model, self.n_heads, self.d_ff, self.norm_first = d_model, n_heads, d_ff, norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.norm1 = LayerNorm(d_model, eps=eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=eps, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.dropout1 = nn.Dropout(dropout)  # on the attention branch, before the residual sum
        self.dropout2 = nn.Dropout(dropout)  # on the feed-forward branch

    def _sa(self, x: Tensor, attn_mask, key_mask, is_causal, kv_cache) -> Tensor:
        out, _ = self.attn(x, attn_mask=attn_mask, key_mask=key_mask,
                           is_causal=is_causal, kv_cache=kv_cache)
        return self.dropout1(out)  # (B, T, d_model)

    def forward(
        self,
        x: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        is_causal: bool = False,
        kv_cache=None,
    ) -> Tensor:
        B, T, C = check_vectors("x", x, self.d_model)
        sa_args = (attn_mask, key_mask, is_causal, kv_cache)  # for self._sa
        if self.norm_first:
            x = x + self._sa(self.norm1(x), *sa_args)  # (B, T, C) + (B, T, C)
            x = x + self.dropout2(self.ff(self.norm2(x)))
        else:
            x = self.norm1(x + self._sa(x, *sa_args))
            x = self.norm2(x + self.dropout2(self.ff(x)))
        return x  # (B, T, d_model)


class EncoderBlock(TransformerBlock):
    """An encoder layer: :class:`TransformerBlock` with unmasked self-attention by default.

    Equal to ``torch.nn.TransformerEncoderLayer(d_model, n_heads, d_ff, batch_first=True,
    norm_first=...)`` once the same weights are copied in (:meth:`copy_from_torch`).

    Shapes:
        x: ``(B, T, d_model)`` -> ``(B, T, d_model)``; ``key_mask`` ``(B, T)`` bool, True = a real token.
    """

    @torch.no_grad()
    def copy_from_torch(self, layer: nn.TransformerEncoderLayer) -> "EncoderBlock":
        """Copy the weights of a ``torch.nn.TransformerEncoderLayer`` of the same shape. Returns ``self``."""
        _check_torch_layer(self, layer, nn.TransformerEncoderLayer)
        self.attn.copy_from_torch(layer.self_attn)
        _copy_linear_and_norms(self, layer, ["norm1", "norm2"])
        return self


class DecoderBlock(nn.Module):
    """A decoder layer of the original encoder-decoder transformer.

    Three sublayers, each with a residual and a LayerNorm (post- or pre-norm as in
    :class:`TransformerBlock`): masked self-attention over the target (``attn``), cross-attention
    whose queries come from the target and whose keys and values come from the encoder's output
    ``memory`` (``cross_attn``), and the feed-forward network (``ff``). Norms: ``norm1``, ``norm2``,
    ``norm3``.

    Args: as :class:`TransformerBlock`.

    Shapes:
        x: ``(B, T, d_model)``, memory: ``(B, S, d_model)`` -> ``(B, T, d_model)``.
        ``attn_mask`` ``(T, T)`` and ``key_mask`` ``(B, T)`` mask the self-attention (``is_causal``
        True by default: position t sees targets up to t); ``memory_mask`` ``(T, S)`` and
        ``memory_key_mask`` ``(B, S)`` (True = a real source token) mask the cross-attention.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        bias: bool = True,
        eps: float = 1e-5,
    ):
        super().__init__()
        d_ff = _resolve_d_ff(d_model, d_ff)
        check_bool("norm_first", norm_first)
        self.d_model, self.n_heads, self.d_ff, self.norm_first = d_model, n_heads, d_ff, norm_first
        self.attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout, bias=bias)
        self.norm1 = LayerNorm(d_model, eps=eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=eps, bias=bias)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.dropout1, self.dropout2, self.dropout3 = nn.Dropout(dropout), nn.Dropout(dropout), nn.Dropout(dropout)

    @torch.no_grad()
    def copy_from_torch(self, layer: nn.TransformerDecoderLayer) -> "DecoderBlock":
        """Copy the weights of a ``torch.nn.TransformerDecoderLayer`` of the same shape. Returns ``self``."""
        _check_torch_layer(self, layer, nn.TransformerDecoderLayer)
        self.attn.copy_from_torch(layer.self_attn)
        self.cross_attn.copy_from_torch(layer.multihead_attn)
        _copy_linear_and_norms(self, layer, ["norm1", "norm2", "norm3"])
        return self

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        attn_mask: Tensor | None = None,
        key_mask: Tensor | None = None,
        is_causal: bool = True,
        memory_mask: Tensor | None = None,
        memory_key_mask: Tensor | None = None,
        kv_cache=None,
    ) -> Tensor:
        B, T, C = check_vectors("x", x, self.d_model)
        check_vectors("memory", memory, self.d_model, shape=("B", "S"), hint=(
            "`memory` is the encoder's output: the encoder and the decoder must have the same d_model"))
        if memory.shape[0] != B:
            raise ValueError(f"`memory` must have the decoder's batch size B={B} (got {memory.shape[0]}): "
                             "one encoded source per target sequence")

        def sa(h: Tensor) -> Tensor:  # masked self-attention over the target
            out, _ = self.attn(h, attn_mask=attn_mask, key_mask=key_mask, is_causal=is_causal, kv_cache=kv_cache)
            return self.dropout1(out)

        def ca(h: Tensor) -> Tensor:  # queries from the target (B, T, C), keys/values from memory (B, S, C)
            out, _ = self.cross_attn(h, memory, memory, attn_mask=memory_mask, key_mask=memory_key_mask)
            return self.dropout2(out)

        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            x = x + self.dropout3(self.ff(self.norm3(x)))
        else:
            x = self.norm1(x + sa(x))
            x = self.norm2(x + ca(x))
            x = self.norm3(x + self.dropout3(self.ff(x)))
        return x  # (B, T, d_model)


# --------------------------------------------------------------------------- parameter counting


def block_parameters(d_model: int, d_ff: int | None = None, *, bias: bool = True, cross_attention: bool = False) -> int:
    """Parameters of one :class:`TransformerBlock` (or :class:`DecoderBlock` with ``cross_attention=True``).

    Attention: four ``d x d`` projections (``4 d^2``, plus ``4 d`` biases), whatever the number of
    heads. Feed-forward: ``2 d d_ff`` (plus ``d_ff + d`` biases). Each LayerNorm: ``2 d`` (``d``
    without bias). With ``d_ff = 4 d`` and biases: ``12 d^2 + 13 d``.

    Shapes:
        integers in, an integer out (nothing is built).
    """
    d_ff = _resolve_d_ff(d_model, d_ff)
    check_bool("bias", bias)
    check_bool("cross_attention", cross_attention)
    b = 1 if bias else 0
    attention = 4 * d_model * d_model + b * 4 * d_model
    norm = d_model + b * d_model
    ff = 2 * d_model * d_ff + b * (d_ff + d_model)
    n_attn = 2 if cross_attention else 1
    return n_attn * attention + (n_attn + 1) * norm + ff


def parameter_breakdown(
    *,
    d_model: int,
    n_layers: int,
    n_heads: int | None = None,
    d_ff: int | None = None,
    vocab_size: int = 0,
    context_length: int = 0,
    n_segments: int = 0,
    bias: bool = True,
    tied_embeddings: bool = True,
    final_norm: bool = True,
    embedding_norm: bool = False,
    pooler: bool = False,
    n_decoder_layers: int = 0,
) -> dict[str, int]:
    """The parameters of a configuration, by part, without building it.

    Decoder-only (GPT): ``n_layers`` pre-norm blocks, learned positions (``context_length`` rows),
    a final LayerNorm, an output head tied to the token embedding (``tied_embeddings``).
    Encoder-only (BERT): set ``n_segments=2``, ``embedding_norm=True``, ``final_norm=False``,
    ``pooler=True``. Encoder-decoder: ``n_decoder_layers > 0`` adds that many
    :class:`DecoderBlock` layers (``context_length=0`` for sinusoidal positions, which have no parameters).

    Args:
        d_model, n_layers, d_ff, bias: as in :class:`TransformerBlock`; ``n_heads`` is only checked
            (the count does not depend on it).
        vocab_size: rows of the token embedding (0: no embedding).
        context_length: rows of the learned position table (0: sinusoidal or none).
        n_segments: rows of BERT's segment (token type) table.
        tied_embeddings: the output head reuses the token embedding; False adds ``vocab_size x d_model``.
        final_norm: a LayerNorm after the last block (pre-norm models; one per stack for encoder-decoder).
        embedding_norm: a LayerNorm on the embeddings (BERT).
        pooler: BERT's ``d x d`` pooler with bias on the first token.
        n_decoder_layers: decoder blocks of an encoder-decoder model.

    Returns:
        a dict with keys ``embeddings``, ``blocks``, ``norms``, ``head``, ``pooler``, ``total``.

    Shapes:
        integers in, a dict of integers out (nothing is built).
    """
    for name, value in [("d_model", d_model), ("n_layers", n_layers)]:
        check_int(name, value, minimum=1)
    for name, value in [("vocab_size", vocab_size), ("context_length", context_length), ("n_segments", n_segments),
                        ("n_decoder_layers", n_decoder_layers)]:
        check_int(name, value, minimum=0)
    for name, value in [("bias", bias), ("tied_embeddings", tied_embeddings), ("final_norm", final_norm),
                        ("embedding_norm", embedding_norm), ("pooler", pooler)]:
        check_bool(name, value)
    if n_heads is not None:
        check_int("n_heads", n_heads, minimum=1, hint="n_heads=None skips this check: the count does not depend on it")
        if d_model % n_heads:
            raise ValueError(f"`d_model` must be divisible by `n_heads` (got d_model={d_model}, n_heads={n_heads})")
    norm = d_model * (2 if bias else 1)
    embeddings = (vocab_size + context_length + n_segments) * d_model + (norm if embedding_norm else 0)
    blocks = n_layers * block_parameters(d_model, d_ff, bias=bias)
    blocks += n_decoder_layers * block_parameters(d_model, d_ff, bias=bias, cross_attention=True)
    stacks = 2 if n_decoder_layers else 1
    norms = stacks * norm if final_norm else 0
    head = 0 if tied_embeddings else vocab_size * d_model
    pool = d_model * d_model + d_model if pooler else 0
    parts = {"embeddings": embeddings, "blocks": blocks, "norms": norms, "head": head, "pooler": pool}
    parts["total"] = sum(parts.values())
    return parts


def count_parameters(**config) -> int:
    """Total parameters of a configuration; the keyword arguments of :func:`parameter_breakdown`.

    >>> count_parameters(vocab_size=50257, context_length=1024, d_model=768, n_layers=12, n_heads=12)
    124439808
    """
    return parameter_breakdown(**config)["total"]
