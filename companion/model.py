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
from companion.validation import (
    IGNORE_INDEX,
    check_bool,
    check_float,
    check_generator,
    check_instance,
    check_int,
    check_logits,
    check_tensor,
    check_token_ids,
)


@dataclass(frozen=True)
class GPTConfig:
    """Everything needed to build a :class:`GPT` (nothing about training)."""

    vocab_size: int = 69  # distinct tokens (characters): the tokenizer's
    context_length: int = 64  # longest input (nanoGPT: block_size)
    d_model: int = 128  # width of a token's vector (nanoGPT: n_embd)
    n_layers: int = 4  # transformer blocks (nanoGPT: n_layer)
    n_heads: int = 4  # attention heads per block; d_head = d_model / n_heads
    d_ff: int | None = None  # feed-forward hidden width; None: 4 * d_model
    dropout: float = 0.0  # dropout in the blocks and after the embeddings
    bias: bool = True  # biases in the linear layers and the norms

    def __post_init__(self):
        for name in ("vocab_size", "context_length", "d_model", "n_layers",
                     "n_heads"):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_ff is not None:
            check_int("d_ff", self.d_ff, minimum=1,
                      hint="use d_ff=None for 4 * d_model")
        check_float("dropout", self.dropout, low=0.0, high=1.0,
                    high_open=True)
        check_bool("bias", self.bias)
        if self.d_model % self.n_heads:
            raise ValueError(
                "`d_model` must be divisible by `n_heads` (got "
                f"d_model={self.d_model}, n_heads={self.n_heads})")

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

    @property
    def batch_size(self) -> int | None:
        """Number of sequences cached (None while the cache is empty)."""
        return self.layers[0].batch_size if self.layers else None

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
        check_bool("include_position", include_position)
        n = sum(p.numel() for p in self.parameters())
        return n if include_position else n - self.pos_emb.weight.numel()

    def new_cache(self) -> GPTCache:
        """An empty cache for :meth:`forward` (one KVCache per layer)."""
        return GPTCache(self.config.n_layers)

    def _check_input(self, idx, targets, cache) -> int:
        """Validate a forward pass's arguments; returns the number of cached positions.

        Shapes, dtypes and devices are checked on the host; the token ids' values on the CPU
        (on a GPU asynchronously: no waiting, see :mod:`companion.validation`).
        """
        c = self.config
        check_tensor("idx", idx, shape=("B", "T"), hint="for one sequence of shape (T,) pass idx[None]")
        check_token_ids("idx", idx, c.vocab_size)
        B, T = idx.shape
        device = self.tok_emb.weight.device
        if idx.device != device:
            raise ValueError(f"`idx` is on {idx.device} but the model is on {device}; move it with idx.to({str(device)!r})")
        start = 0
        if cache is not None:
            check_instance("cache", cache, GPTCache, "a GPTCache", hint="make one with model.new_cache()")
            if len(cache.layers) != c.n_layers:
                raise ValueError(f"`cache` was made for a model of {len(cache.layers)} layers, this one has "
                                 f"n_layers={c.n_layers}; make one with model.new_cache()")
            start = len(cache)
            if start:
                _, h, _, d_head = cache.layers[0].k.shape
                if (h, d_head) != (c.n_heads, c.d_head):
                    raise ValueError(f"`cache` was filled by another model (n_heads={h}, d_head={d_head}; this model "
                                     f"has n_heads={c.n_heads}, d_head={c.d_head}); make one with model.new_cache()")
                if cache.batch_size != B:
                    raise ValueError(
                        f"`cache` holds {cache.batch_size} sequences but `idx` has batch size B={B}; a cache "
                        "belongs to one batch: start a new one with model.new_cache(), or keep rows with "
                        "cache.reorder(index)")
        if start + T > c.context_length:
            raise ValueError(
                f"the sequence is longer than the model's context: {start} cached + {T} new positions "
                f"> context_length={c.context_length}; crop `idx` to its last {c.context_length - start} tokens"
            )
        if targets is not None:
            check_tensor("targets", targets, shape=("B", "T"))
            if targets.shape != idx.shape:
                raise ValueError(f"`targets` must have the shape of `idx` {tuple(idx.shape)}: the next token at every "
                                 f"position (got shape={tuple(targets.shape)})")
            if targets.device != idx.device:
                raise ValueError(f"`targets` is on {targets.device} but `idx` is on {idx.device}; move it there")
            check_token_ids("targets", targets, c.vocab_size, ignore_index=IGNORE_INDEX, long_only=True,
                            hint=f"{IGNORE_INDEX} marks a position left out of the loss")
        return start

    def embed(self, idx: torch.Tensor, start: int = 0) -> torch.Tensor:
        """Token plus position embeddings. Shapes: idx (B, T) -> (B, T, d_model)."""
        B, T = idx.shape
        pos = torch.arange(start, start + T, device=idx.device)  # (T,) absolute positions
        return self.drop(self.tok_emb(idx) + self.pos_emb(pos))  # (B, T, d) + (T, d) -> (B, T, d)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                *, cache: GPTCache | None = None):
        """Logits for every position and, with ``targets``, the mean loss.

        The loss is the mean of -log p(target) over the positions whose
        target is not -100 (PyTorch's ``ignore_index``); it is 0, with a zero
        gradient, when every target is -100. With ``cache``, ``idx`` holds
        only the new tokens. See the class docstring for the shapes.
        """
        start = self._check_input(idx, targets, cache)  # cached positions
        B, T = idx.shape
        x = self.embed(idx, start)  # (B, T, d_model)
        for i, block in enumerate(self.blocks):
            kv = None if cache is None else cache.layers[i]
            x = block(x, is_causal=True, kv_cache=kv)  # (B, T, d_model)
        x = self.final_norm(x)
        logits = self.head(x)  # (B, T, d_model) @ (d_model, V) -> (B, T, V)
        loss = None
        if targets is not None:  # -log p(target), summed, then averaged
            V = logits.shape[-1]
            flat = logits.reshape(B * T, V)  # (B*T, V)
            if flat.dtype == self.head.weight.dtype:  # no autocast:
                flat = flat.float()  # softmax in float32 (no-op for float32)
            # (under autocast cross_entropy is on autocast's float32 list: it
            # makes the same float32 copy of the logits itself, and keeps a
            # float32 log-softmax for backward; see the appendix's trace)
            nll = F.cross_entropy(flat, targets.reshape(B * T),
                                  reduction="sum")
            counted = (targets != IGNORE_INDEX).sum()  # positions not ignored
            loss = nll / counted.clamp(min=1)  # no NaN when all are ignored
        return logits, loss

    @torch.no_grad()
    def attention_weights(self, idx: torch.Tensor) -> torch.Tensor:
        """The causal attention weights of every head of every layer.

        Shapes: idx (B, T) -> (n_layers, B, n_heads, T, T); row t holds query t's weights over keys.
        """
        self._check_input(idx, None, None)
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

        It samples in evaluation mode (no dropout) and leaves the model in the mode it was in.
        A prompt longer than ``context_length`` is cropped to its last ``context_length`` tokens
        for the model; the result holds the whole prompt.

        Shapes: idx (B, T) -> (B, T + max_new_tokens); one sequence (T,) -> (T + max_new_tokens,).
        """
        max_new_tokens = check_int("max_new_tokens", max_new_tokens, minimum=0)
        temperature = check_float("temperature", temperature, low=0.0, low_open=True,
                                  hint="for the most probable token use companion.decoding.greedy")
        if top_k is not None:
            top_k = check_int("top_k", top_k, minimum=1, hint="use top_k=None to keep every token")
        check_generator("generator", generator)
        check_tensor("idx", idx)
        if idx.ndim not in (1, 2):
            raise ValueError(f"`idx` must have shape (T,) or (B, T) (got shape={tuple(idx.shape)})")
        single = idx.ndim == 1
        idx = idx[None] if single else idx  # (B, T)
        check_tensor("idx", idx, shape=("B", "T"))
        check_token_ids("idx", idx, self.config.vocab_size)
        was_training = self.training
        self.eval()  # no dropout while generating
        try:
            for _ in range(max_new_tokens):
                context = idx[:, -self.config.context_length:]  # (B, <= context_length)
                logits, _ = self(context)
                logits = logits[:, -1, :]  # (B, V): only the last position predicts the next token
                check_logits("logits", logits, what="the model's output (its logits)",
                             hint="check the model's weights for NaN (a diverged training run?)")
                logits = logits / temperature
                check_logits("temperature", logits, what=f"the logits divided by `temperature`={temperature:g}",
                             hint="the temperature is too small; for the most probable token use greedy decoding")
                if top_k is not None:
                    kth = torch.topk(logits, min(top_k, logits.shape[-1])).values[:, -1:]  # (B, 1)
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                probs = torch.softmax(logits, dim=-1)
                nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
                idx = torch.cat([idx, nxt], dim=1)
        finally:
            self.train(was_training)
        return idx[0] if single else idx
