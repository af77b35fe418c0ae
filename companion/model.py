"""A small GPT: token and position embeddings, pre-norm transformer blocks, final norm, tied head.

The model of chapter 7. Its blocks are the chapter 6 :class:`~companion.block.TransformerBlock`
with ``norm_first=True`` (pre-norm, as GPT-2) and causal self-attention. The output head reuses the
token-embedding matrix (weight tying): the score of character ``v`` at a position is the dot product
of the final hidden state with ``v``'s own embedding.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion.attention import KVCache
from companion.block import TransformerBlock


@dataclass(frozen=True)
class GPTConfig:
    """Everything needed to build a :class:`GPT` (and nothing about how it is trained)."""

    vocab_size: int = 69  # number of distinct tokens (characters here); the tokenizer decides it
    context_length: int = 64  # longest sequence the model can read (nanoGPT: block_size)
    d_model: int = 128  # width of every token's vector (nanoGPT: n_embd; HF: hidden_size)
    n_layers: int = 4  # number of transformer blocks (nanoGPT: n_layer)
    n_heads: int = 4  # attention heads per block; d_head = d_model / n_heads
    d_ff: int | None = None  # hidden width of the feed-forward network; None means 4 * d_model
    dropout: float = 0.0  # dropout probability in the blocks and after the embeddings
    bias: bool = True  # biases in the linear layers and the norms

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "d_model", "n_layers", "n_heads"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"`{name}` must be a positive integer (got {value!r})")
        if self.d_model % self.n_heads:
            raise ValueError(f"`d_model` must be divisible by `n_heads` (got d_model={self.d_model}, n_heads={self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1) (got {self.dropout})")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


class GPTCache:
    """The key/value caches of every layer of one :class:`GPT`, for incremental decoding.

    ``len(cache)`` is the number of positions already processed; ``reorder(index)`` keeps or
    duplicates batch rows in every layer (beam search).
    """

    def __init__(self, n_layers: int):
        self.layers = [KVCache() for _ in range(n_layers)]

    def __len__(self) -> int:
        return len(self.layers[0]) if self.layers else 0

    def reorder(self, index: torch.Tensor) -> None:
        """Shapes: index (B_new,) LongTensor of batch rows to keep, in order."""
        for layer in self.layers:
            layer.reorder(index)

    def __repr__(self) -> str:
        return f"GPTCache(n_layers={len(self.layers)}, positions={len(self)})"


class GPT(nn.Module):
    """A decoder-only transformer language model.

    Shapes:
        idx: (B, T) integer token ids with T <= context_length (T new tokens when a cache is given)
        targets: (B, T) the next token at every position, or None
        returns logits (B, T, vocab_size) for every position, and the mean cross-entropy (a scalar
        tensor, in nats per token) when targets are given, else None.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"`config` must be a GPTConfig (got {type(config).__name__})")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.context_length, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(
            TransformerBlock(c.d_model, c.n_heads, c.d_ff, dropout=c.dropout, norm_first=True, activation="gelu", bias=c.bias)
            for _ in range(c.n_layers)
        )
        for block in self.blocks:
            # The blocks' LayerNorm is chapter 4's hand-built one (tested equal to torch.nn.LayerNorm).
            # For training speed we swap in torch's fused kernel: same function, same parameter names
            # (weight, bias), but one pass instead of five, which makes a training step about twice as fast.
            block.norm1 = nn.LayerNorm(c.d_model, bias=c.bias)
            block.norm2 = nn.LayerNorm(c.d_model, bias=c.bias)
        self.final_norm = nn.LayerNorm(c.d_model, bias=c.bias)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying: one (V, d_model) matrix, read and written
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2's initialization.

        Every weight matrix and embedding is drawn from N(0, 0.02^2), biases are zero, norms start as
        the identity. The projections that write into the residual stream (the attention output and
        the second feed-forward layer) get std 0.02 / sqrt(2 * n_layers): each block adds two such
        terms to the stream, and with 2 * n_layers independent additions the variance of the stream
        would otherwise grow with depth; scaling keeps it about the same whatever the depth.
        """
        std, resid_std = 0.02, 0.02 / math.sqrt(2 * self.config.n_layers)
        for name, p in self.named_parameters():
            if p.ndim >= 2:
                residual = name.endswith("attn.out_proj.weight") or name.endswith("ff.linear2.weight")
                nn.init.normal_(p, mean=0.0, std=resid_std if residual else std)
            elif "norm" in name and name.endswith("weight"):
                nn.init.ones_(p)
            else:
                nn.init.zeros_(p)

    def num_parameters(self, include_position: bool = True) -> int:
        """Number of distinct parameters (the tied head counts once, with the token embedding)."""
        n = sum(p.numel() for p in self.parameters())
        return n if include_position else n - self.pos_emb.weight.numel()

    def new_cache(self) -> GPTCache:
        """An empty cache for :meth:`forward` (one KVCache per layer)."""
        return GPTCache(self.config.n_layers)

    def _check_input(self, idx, targets, start: int) -> None:
        c = self.config
        if not isinstance(idx, torch.Tensor):
            raise TypeError(f"`idx` must be a torch.Tensor of token ids (got {type(idx).__name__})")
        if idx.is_floating_point() or idx.is_complex() or idx.dtype == torch.bool:
            raise TypeError(f"`idx` must hold integer token ids (dtype torch.long), got dtype {idx.dtype}")
        if idx.ndim != 2:
            raise ValueError(f"`idx` must have shape (B, T) (got shape {tuple(idx.shape)})")
        # the range check reads min and max back from the device: only on the CPU, where that is free
        # (on a GPU it would stall every step; an id out of range there trips embedding's own assert)
        on_cpu = idx.device.type == "cpu" and not torch.compiler.is_compiling()
        if on_cpu and idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= c.vocab_size):
            raise ValueError(f"`idx` must hold token ids in [0, {c.vocab_size}) (got values from {int(idx.min())} to {int(idx.max())})")
        if start + idx.shape[1] > c.context_length:
            raise ValueError(
                f"the sequence is longer than the model's context: {start} cached + {idx.shape[1]} new positions "
                f"> context_length={c.context_length}; crop `idx` to its last {c.context_length - start} tokens"
            )
        if targets is not None:
            if not isinstance(targets, torch.Tensor) or targets.shape != idx.shape or targets.is_floating_point():
                got = f"{tuple(targets.shape)} {targets.dtype}" if isinstance(targets, torch.Tensor) else type(targets).__name__
                raise ValueError(f"`targets` must be integer ids of the same shape as `idx` {tuple(idx.shape)} (got {got})")

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token plus position embeddings. Shapes: idx (B, T) -> (B, T, d_model)."""
        B, T = idx.shape
        pos = torch.arange(start, start + T, device=idx.device)  # (T,) absolute positions
        return self.drop(self.tok_emb(idx) + self.pos_emb(pos))  # (B, T, d) + (T, d) -> (B, T, d)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, *, cache: GPTCache | None = None):
        start = len(cache) if cache is not None else 0
        self._check_input(idx, targets, start)
        B, T = idx.shape
        x = self.embed(idx, start)  # (B, T, d_model)
        for i, block in enumerate(self.blocks):
            x = block(x, is_causal=True, kv_cache=None if cache is None else cache.layers[i])  # (B, T, d_model)
        x = self.final_norm(x)
        logits = self.head(x)  # (B, T, d_model) @ (d_model, V) -> (B, T, V)
        loss = None
        if targets is not None:
            V = logits.shape[-1]
            flat = logits.reshape(B * T, V)  # (B*T, V)
            if flat.dtype == self.head.weight.dtype:  # no autocast:
                flat = flat.float()  # softmax in float32 (no-op for float32)
            # under autocast the softmax runs in float32 by itself, with no
            # float32 copy of the logits; the loss: mean of -log p(target)
            loss = F.cross_entropy(flat, targets.reshape(B * T))
        return logits, loss

    @torch.no_grad()
    def attention_weights(self, idx: torch.Tensor) -> torch.Tensor:
        """The causal attention weights of every head of every layer.

        Shapes: idx (B, T) -> (n_layers, B, n_heads, T, T); row t holds query t's weights over keys.
        """
        self._check_input(idx, None, 0)
        x = self.embed(idx)
        maps = []
        for block in self.blocks:
            _, w = block.attn(block.norm1(x), is_causal=True, need_weights=True, average_weights=False)  # pre-norm input
            maps.append(w)  # (B, h, T, T)
            x = block(x, is_causal=True)
        return torch.stack(maps)

    @torch.no_grad()
    def generate(self, idx: torch.Tensor, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Sample ``max_new_tokens`` tokens after ``idx``, feeding each back in (a short sampler;
        chapter 8 and :mod:`companion.decoding` have the full set of decoders).

        Shapes: idx (B, T) -> (B, T + max_new_tokens).
        """
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"`max_new_tokens` must be an integer >= 0 (got {max_new_tokens!r})")
        if temperature <= 0:
            raise ValueError(f"`temperature` must be > 0 (got {temperature})")
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
            raise ValueError(f"`top_k` must be None or an integer >= 1 (got {top_k!r})")
        for _ in range(max_new_tokens):
            context = idx[:, -self.config.context_length:]  # (B, <= context_length)
            logits, _ = self(context)
            logits = logits[:, -1, :] / temperature  # (B, V): only the last position predicts the next token
            if top_k is not None:
                kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]  # (B, 1)
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = torch.softmax(logits, dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
            idx = torch.cat([idx, nxt], dim=1)
        return idx
