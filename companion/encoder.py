"""A stack of encoder blocks: the encoder of the original transformer and of BERT.

:class:`Encoder` is ``n_layers`` chapter 6 :class:`~companion.block.EncoderBlock` layers, one
after the other, and an optional final LayerNorm. It takes vectors, not token ids: the
embeddings in front of it differ between models (sinusoidal positions in the original
transformer, chapter 9; learned ones in BERT, chapter 10), so each model adds its own.

With ``final_norm=True`` it computes what ``torch.nn.TransformerEncoder(layer, n_layers,
norm=nn.LayerNorm(d_model))`` computes (the encoder inside ``torch.nn.Transformer``), once the
same weights are copied in with :meth:`Encoder.copy_from_torch`; the tests check it.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from companion.block import EncoderBlock
from companion.norm import LayerNorm
from companion.validation import check_bool, check_int, check_vectors

__all__ = ["Encoder"]


class Encoder(nn.Module):
    """``n_layers`` encoder blocks and a final LayerNorm.

    Args:
        n_layers: number of blocks; the other arguments are :class:`~companion.block.EncoderBlock`'s
        (``d_model``, ``n_heads``, ``d_ff``, ``dropout``, ``norm_first``, ``activation``,
        ``bias``, ``eps``).
        final_norm: a LayerNorm after the last block. A pre-norm stack needs it (its blocks'
        output is an un-normalized residual sum); ``torch.nn.Transformer`` has one in both
        orders; BERT (post-norm) has none.

    Submodules: ``blocks`` (a ModuleList of EncoderBlock), ``norm`` (LayerNorm or None).

    Shapes:
        x: ``(B, S, d_model)`` -> ``(B, S, d_model)``. ``key_mask`` ``(B, S)`` bool, True = a
        real token (padding is False); ``attn_mask`` as in
        :class:`~companion.multihead.MultiHeadAttention`.
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        bias: bool = True,
        eps: float = 1e-5,
        final_norm: bool = True,
    ):
        super().__init__()
        n_layers = check_int("n_layers", n_layers, minimum=1)
        check_bool("final_norm", final_norm)
        self.d_model, self.n_layers = d_model, n_layers
        self.blocks = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first,
                         activation=activation, bias=bias, eps=eps)
            for _ in range(n_layers)
        )
        self.norm = LayerNorm(d_model, eps=eps, bias=bias) if final_norm else None

    def forward(self, x: Tensor, *, key_mask: Tensor | None = None,
                attn_mask: Tensor | None = None) -> Tensor:
        B, S, C = check_vectors("x", x, self.d_model, shape=("B", "S"))
        for block in self.blocks:
            x = block(x, key_mask=key_mask, attn_mask=attn_mask)  # (B, S, C)
        return x if self.norm is None else self.norm(x)  # (B, S, C)

    @torch.no_grad()
    def copy_from_torch(self, encoder: nn.TransformerEncoder) -> "Encoder":
        """Copy the weights of a ``torch.nn.TransformerEncoder`` of the same shape. Returns ``self``."""
        if not isinstance(encoder, nn.TransformerEncoder):
            raise TypeError(f"`encoder` must be a torch.nn.TransformerEncoder (got {type(encoder).__name__})")
        if len(encoder.layers) != self.n_layers or (encoder.norm is None) != (self.norm is None):
            raise ValueError(
                f"`encoder` must have {self.n_layers} layers and "
                f"{'a final norm' if self.norm is not None else 'no final norm'} "
                f"(got {len(encoder.layers)} layers, {'no' if encoder.norm is None else 'a'} final norm)"
            )
        for mine, theirs in zip(self.blocks, encoder.layers):
            mine.copy_from_torch(theirs)
        if self.norm is not None:
            self.norm.weight.copy_(encoder.norm.weight)
            if self.norm.bias is not None:
                self.norm.bias.copy_(encoder.norm.bias)
        return self
