"""Masked language modelling: an encoder-only transformer that fills in blanks (chapter 10).

The objective of BERT (Devlin et al., 2019), on the characters of chapter 7:

* :class:`MaskedCharTokenizer`: chapter 7's characters plus three special tokens, ``[PAD]``
  (fills a short line up to the batch's length), ``[MASK]`` (a blank) and ``[CLS]`` (a summary
  slot at the start of every sequence).
* :func:`mask_tokens`: choose about 15% of the positions (never a special token); of those, 80%
  become ``[MASK]``, 10% a random character and 10% stay as they are. The labels hold the original
  token at the chosen positions and ``-100`` (:data:`IGNORE_INDEX`) everywhere else.
* :func:`mlm_loss`: the cross-entropy over the chosen positions only.
* :class:`EncoderLM`: token and learned position embeddings, the
  :class:`companion.encoder.Encoder` stack with **no causal mask** (every position sees every
  other), and an output head tied to the token embedding.
* :class:`EncoderClassifier`: the ``[CLS]`` summary vector of an :class:`EncoderLM` and a linear
  layer on it, for fine-tuning on a labelled task.
* :func:`pad_batch` / :func:`encode_lines`: batches of lines of different lengths, with the key
  mask that hides the padding from attention.
* :func:`mlm_step`, :func:`classifier_step`: one pre-training step and one fine-tuning step (the
  references of exercises 10.4 and 10.6).
* :func:`train_mlm`, :func:`fine_tune`: small training loops that reuse chapter 7's schedule
  (:func:`companion.train.learning_rate`) and optimizer (:func:`companion.train.make_optimizer`).
* :func:`score_both_sides`, :func:`score_left_only`: the loss of predicting chosen characters of a
  text from both sides (this model) or from the left only (a chapter 7 GPT).

From a terminal (the shipped model's command is in its checkpoint)::

    python -m companion.mlm --config small --steps 4000 --threads 1 --positions 4000 \
        --progress --out runs/shakespeare_mlm.safetensors
    python -m companion.mlm --help
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import Tensor

from companion.data import CharTokenizer, get_batch, load_corpus, play_group, play_text
from companion.encoder import Encoder
from companion.model import GPT, GPTConfig
from companion.train import History, TrainConfig, learning_rate, make_optimizer
from companion.validation import check_logits

__all__ = [
    "IGNORE_INDEX",
    "MASK_PROB",
    "SPECIALS",
    "MaskedCharTokenizer",
    "mask_tokens",
    "mlm_loss",
    "pad_batch",
    "encode_lines",
    "EncoderLMConfig",
    "EncoderLM",
    "EncoderClassifier",
    "swap_letters",
    "mlm_batch",
    "mlm_step",
    "classifier_step",
    "estimate_mlm_loss",
    "train_mlm",
    "spoken_lines",
    "labelled_lines",
    "fine_tune",
    "classify",
    "held_out_positions",
    "score_both_sides",
    "score_left_only",
    "CONFIGS",
    "SHIPPED_MLM",
    "shipped_mlm_path",
    "main",
]

#: Label of a position that is not scored (``torch.nn.functional.cross_entropy``'s default).
IGNORE_INDEX = -100
#: Share of the positions chosen for prediction.
MASK_PROB = 0.15
#: What becomes of a chosen position: ``[MASK]`` 80%, a random character 10%, unchanged 10%.
MASK_SHARE, RANDOM_SHARE = 0.8, 0.1
#: The special tokens, in the order of their ids after the characters.
SPECIALS = ("[PAD]", "[MASK]", "[CLS]")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_ids(ids, name: str, vocab_size: int | None = None, ndim: int | None = None) -> Tensor:
    if not isinstance(ids, Tensor):
        raise TypeError(f"`{name}` must be a torch.Tensor of token ids (got {type(ids).__name__})")
    if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        raise TypeError(f"`{name}` must hold integer token ids (dtype torch.long), got dtype {ids.dtype}")
    if ndim is not None and ids.ndim != ndim:
        shape = "(B, T)" if ndim == 2 else "(T,)"
        raise ValueError(f"`{name}` must have shape {shape} (got shape {tuple(ids.shape)})")
    if vocab_size is not None and ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"`{name}` must hold token ids in [0, {vocab_size}) "
                         f"(got values from {int(ids.min())} to {int(ids.max())})")
    return ids


def _check_generator(generator) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"`generator` must be None or a torch.Generator (got {type(generator).__name__})")


# --------------------------------------------------------------------------- the tokenizer


class MaskedCharTokenizer(CharTokenizer):
    """Chapter 7's characters plus the special tokens ``[PAD]``, ``[MASK]`` and ``[CLS]``.

    The characters keep their chapter 7 ids (``0 .. n_chars - 1``), so a text encodes to the same
    ids as for the GPT; the specials follow: ``pad_id = n_chars``, ``mask_id = n_chars + 1``,
    ``cls_id = n_chars + 2``. No text encodes to a special token (a ``[`` in the text is the
    character ``[``): only the code that builds batches puts them in.

    Shapes:
        encode: a string of length T -> LongTensor ``(T,)``, or ``(T + 1,)`` with ``cls=True``.
        decode: ids ``(T,)`` -> a string; a special token reads as its name, e.g. ``[MASK]``.
    """

    def __init__(self, chars: str):
        if not isinstance(chars, str) or not chars:
            raise TypeError(f"`chars` must be a non-empty str (got {chars!r:.60})")
        super().__init__(chars)
        n = len(chars)
        self.pad_id, self.mask_id, self.cls_id = n, n + 1, n + 2

    @classmethod
    def from_char_tokenizer(cls, tokenizer: CharTokenizer) -> "MaskedCharTokenizer":
        """The chapter 7 tokenizer's characters, with the specials added after them."""
        if not isinstance(tokenizer, CharTokenizer):
            raise TypeError(f"`tokenizer` must be a companion.data.CharTokenizer (got {type(tokenizer).__name__})")
        return cls(tokenizer.chars)

    @property
    def n_chars(self) -> int:
        """Number of ordinary tokens (characters); the random replacements are drawn from them."""
        return len(self.chars)

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + len(SPECIALS)

    @property
    def specials(self) -> dict[str, int]:
        """``{"[PAD]": pad_id, "[MASK]": mask_id, "[CLS]": cls_id}``."""
        return {"[PAD]": self.pad_id, "[MASK]": self.mask_id, "[CLS]": self.cls_id}

    def to_dict(self) -> dict:
        return {"chars": self.chars, "specials": list(SPECIALS)}

    @classmethod
    def from_dict(cls, d: dict) -> "MaskedCharTokenizer":
        if (not isinstance(d, dict) or set(d) != {"chars", "specials"} or not isinstance(d["chars"], str)
                or d["specials"] != list(SPECIALS)):
            raise ValueError(f"a MaskedCharTokenizer is stored as {{'chars': str, 'specials': {list(SPECIALS)}}} "
                             f"(got {d!r:.80})")
        return cls(d["chars"])

    def encode(self, text: str, *, cls: bool = False) -> Tensor:
        ids = super().encode(text)
        if cls:
            ids = torch.cat([torch.tensor([self.cls_id]), ids])  # (T + 1,): [CLS] first
        return ids

    def decode(self, ids) -> str:
        if isinstance(ids, Tensor) and ids.dim() != 1:
            raise ValueError(f"`ids` must be one sequence of shape (T,) (got shape {tuple(ids.shape)}); "
                             "decode a batch row by row: [tok.decode(row) for row in ids]")
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        if not all(_is_int(i) for i in ids):
            raise TypeError("`ids` must be integers (a LongTensor of shape (T,) or a list of ints)")
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"`ids` must lie in [0, {self.vocab_size}) (got {bad[0]})")
        n = self.n_chars
        return "".join(self.chars[i] if i < n else SPECIALS[i - n] for i in ids)

    def is_special(self, ids: Tensor) -> Tensor:
        """Shapes: ids (any shape) -> bool tensor of the same shape, True at [PAD], [MASK], [CLS]."""
        return _check_ids(ids, "ids", self.vocab_size) >= self.n_chars

    def __repr__(self) -> str:
        return f"MaskedCharTokenizer(n_chars={self.n_chars}, vocab_size={self.vocab_size})"


def _check_tokenizer(tokenizer) -> MaskedCharTokenizer:
    if not isinstance(tokenizer, MaskedCharTokenizer):
        raise TypeError(f"`tokenizer` must be a companion.mlm.MaskedCharTokenizer (got {type(tokenizer).__name__}); "
                        "build it with MaskedCharTokenizer.from_char_tokenizer(corpus.tokenizer)")
    return tokenizer


# --------------------------------------------------------------------------- the objective


def _check_mask_prob(mask_prob) -> None:
    if isinstance(mask_prob, bool) or not isinstance(mask_prob, (int, float)) or not 0 < mask_prob < 1:
        raise ValueError(f"`mask_prob` must be a number in (0, 1) (got {mask_prob!r}); BERT uses 0.15")


def mask_tokens(
    ids: Tensor,
    tokenizer: MaskedCharTokenizer,
    *,
    mask_prob: float = MASK_PROB,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """BERT's masking rule: the model's input and the labels.

    Each position that holds a character (never [PAD], [MASK] or [CLS])
    is chosen with probability ``mask_prob``, independently. A chosen
    position becomes [MASK] with probability 0.8, a character drawn
    uniformly from the ``n_chars`` characters with probability 0.1 (it
    may be the same one), and stays as it is otherwise. The labels hold
    the original token at the chosen positions and -100 elsewhere.

    The draws, in this order: a uniform number per position (chosen if
    below ``mask_prob``), a second one (below 0.8: [MASK]; below 0.9:
    random), then a random character per position.

    Shapes:
        ids: integer (B, T) (any shape) -> inputs, labels: the same
        shape, dtype long.
    """
    tok = _check_tokenizer(tokenizer)
    ids = _check_ids(ids, "ids", tok.vocab_size).long()
    _check_mask_prob(mask_prob)
    _check_generator(generator)
    g, shape = generator, ids.shape
    special = ids >= tok.n_chars  # [PAD], [MASK], [CLS]: never chosen
    chosen = (torch.rand(shape, generator=g) < mask_prob) & ~special
    kind = torch.rand(shape, generator=g)  # what a chosen one becomes
    random_chars = torch.randint(tok.n_chars, shape, generator=g)
    to_mask = chosen & (kind < MASK_SHARE)
    to_random = chosen & (kind >= MASK_SHARE)
    to_random &= kind < MASK_SHARE + RANDOM_SHARE
    inputs = ids.clone()
    inputs[to_mask] = tok.mask_id
    inputs[to_random] = random_chars[to_random]
    labels = torch.where(chosen, ids, IGNORE_INDEX)  # (B, T)
    return inputs, labels


def mlm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy over the chosen positions (labels ``!= -100``) only.

    Shapes:
        logits: ``(B, T, V)``, labels: integer ``(B, T)`` -> a scalar tensor (nats per chosen
        token).
    """
    if not isinstance(logits, Tensor) or not logits.is_floating_point() or logits.ndim != 3:
        got = f"shape {tuple(logits.shape)}, dtype {logits.dtype}" if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"`logits` must be a floating-point tensor of shape (B, T, V) (got {got})")
    B, T, V = logits.shape
    _check_ids(labels, "labels")
    if tuple(labels.shape) != (B, T):
        raise ValueError(f"`labels` must have shape (B, T) = ({B}, {T}), the shape of the logits "
                         f"without V (got {tuple(labels.shape)})")
    chosen = labels != IGNORE_INDEX
    if not chosen.any():
        raise ValueError("`labels` chooses no position (every label is -100): there is nothing to score; "
                         "mask at least one position")
    if int(labels[chosen].min()) < 0 or int(labels[chosen].max()) >= V:
        raise ValueError(f"`labels` must be token ids in [0, {V}) or -100 for a position that is not "
                         f"scored (got values from {int(labels.min())} to {int(labels.max())})")
    # NaN or +inf at a scored position would give a NaN loss: say so instead (a diverged run).
    check_logits("logits", logits.detach()[chosen],
                 hint="a NaN or +inf score at a scored position makes the loss NaN: the model diverged "
                      "(lower the learning rate) or its weights are damaged")
    flat = logits.reshape(B * T, V).float()  # (B*T, V)
    return F.cross_entropy(flat, labels.reshape(B * T).long(), ignore_index=IGNORE_INDEX)


# --------------------------------------------------------------------------- batches of lines


def pad_batch(seqs: list[Tensor], pad_id: int) -> tuple[Tensor, Tensor]:
    """Stack sequences of different lengths, padding each on the right with ``pad_id``.

    Shapes:
        seqs: a list of B integer tensors of shape ``(T_b,)`` -> ids ``(B, T)`` with
        ``T = max T_b``, and key_mask ``(B, T)`` bool, True at a real token, False at padding.
    """
    if not isinstance(seqs, (list, tuple)) or not seqs:
        raise TypeError(f"`seqs` must be a non-empty list of 1-D tensors of token ids (got {type(seqs).__name__}"
                        f"{' of length 0' if isinstance(seqs, (list, tuple)) else ''})")
    if not _is_int(pad_id) or pad_id < 0:
        raise ValueError(f"`pad_id` must be a non-negative int (got {pad_id!r})")
    for b, s in enumerate(seqs):
        _check_ids(s, f"seqs[{b}]", ndim=1)
        if len(s) == 0:
            raise ValueError(f"`seqs[{b}]` is empty; every sequence needs at least one token")
    lengths = torch.tensor([len(s) for s in seqs])  # (B,)
    T = int(lengths.max())
    ids = torch.full((len(seqs), T), pad_id, dtype=torch.long)  # (B, T)
    for b, s in enumerate(seqs):
        ids[b, : len(s)] = s
    key_mask = torch.arange(T)[None, :] < lengths[:, None]  # (1, T) < (B, 1) -> (B, T)
    return ids, key_mask


def encode_lines(lines: list[str], tokenizer: MaskedCharTokenizer, context_length: int) -> tuple[Tensor, Tensor]:
    """``[CLS]`` + the characters of each line (cut to ``context_length`` positions), padded.

    Shapes:
        lines: B strings -> ids ``(B, T)``, key_mask ``(B, T)`` with ``T <= context_length``.
    """
    tok = _check_tokenizer(tokenizer)
    if not isinstance(lines, (list, tuple)) or not lines or not all(isinstance(s, str) and s for s in lines):
        raise TypeError("`lines` must be a non-empty list of non-empty strings")
    if not _is_int(context_length) or context_length < 2:
        raise ValueError(f"`context_length` must be an int >= 2 (got {context_length!r})")
    return pad_batch([tok.encode(s, cls=True)[:context_length] for s in lines], tok.pad_id)


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class EncoderLMConfig(GPTConfig):
    """The shape of an :class:`EncoderLM`: the fields (and checks) of chapter 7's
    :class:`~companion.model.GPTConfig`, so that the two kinds of model are built at the same
    size from the same numbers. ``context_length`` counts every position, the ``[CLS]`` slot
    included; ``vocab_size`` counts the special tokens."""

    vocab_size: int = 72  # 69 characters + [PAD], [MASK], [CLS]
    context_length: int = 129  # [CLS] + 128 characters


def _check_key_mask(key_mask, B: int, T: int) -> None:
    if key_mask is None:
        return
    if not isinstance(key_mask, Tensor) or key_mask.dtype != torch.bool or tuple(key_mask.shape) != (B, T):
        got = f"shape {tuple(key_mask.shape)}, dtype {key_mask.dtype}" if isinstance(key_mask, Tensor) else type(key_mask).__name__
        raise ValueError(f"`key_mask` must be a bool tensor of shape (B, T) = ({B}, {T}), True at real tokens "
                         f"(got {got}); pad_batch returns one")
    if not key_mask.any(dim=1).all():
        raise ValueError("`key_mask` has a row with no real token; every sequence needs at least one")


class EncoderLM(nn.Module):
    """An encoder-only transformer with a masked-language-model head (a small BERT).

    * Embeddings: token plus learned position, ``h = E[x_t] + P[t]``.
    * :class:`companion.encoder.Encoder`: ``n_layers`` **pre-norm** blocks (GELU) and a final
      LayerNorm, with **no causal mask**: every position attends to every real position. Pre-norm,
      like the chapter 7 GPT, so that the two models differ only in the mask and the objective
      (BERT itself is post-norm, with a LayerNorm on the embeddings and none at the end).
    * Head: the scores of the tokens at each position are dot products with the token embeddings
      (tied, as the GPT's).

    Shapes:
        idx: ``(B, T)`` token ids, ``T <= context_length``; key_mask: ``(B, T)`` bool (True = real
        token) or None; labels: ``(B, T)`` (the original tokens at chosen positions, ``-100``
        elsewhere) or None. Returns logits ``(B, T, vocab_size)`` and the loss over the chosen
        positions (a scalar), or None without labels.
    """

    def __init__(self, config: EncoderLMConfig):
        super().__init__()
        if not isinstance(config, EncoderLMConfig):
            raise TypeError(f"`config` must be an EncoderLMConfig (got {type(config).__name__})")
        self.config = c = config
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_emb = nn.Embedding(c.context_length, c.d_model)
        self.drop = nn.Dropout(c.dropout)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, dropout=c.dropout, norm_first=True,
                               activation="gelu", bias=c.bias, final_norm=True)
        # As in the GPT: torch's fused LayerNorm in place of chapter 4's (the same function, tested
        # equal; the same parameter names), for speed.
        for block in self.encoder.blocks:
            block.norm1 = nn.LayerNorm(c.d_model, bias=c.bias)
            block.norm2 = nn.LayerNorm(c.d_model, bias=c.bias)
        self.encoder.norm = nn.LayerNorm(c.d_model, bias=c.bias)
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.head.weight = self.tok_emb.weight  # tied: (V, d_model), one matrix in and out
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Chapter 7's initialization (:meth:`companion.model.GPT.reset_parameters`, reused):
        N(0, 0.02^2) weights, residual projections scaled by 1/sqrt(2 n_layers), norms at 1, 0."""
        GPT.reset_parameters(self)

    def num_parameters(self) -> int:
        """Distinct parameters (the tied head counts once)."""
        return sum(p.numel() for p in self.parameters())

    def _check_input(self, idx, key_mask) -> tuple[int, int]:
        c = self.config
        _check_ids(idx, "idx", c.vocab_size, ndim=2)
        B, T = idx.shape
        if T > c.context_length:
            raise ValueError(f"`idx` has {T} positions but the model reads at most context_length="
                             f"{c.context_length}; cut the sequence")
        if T == 0:
            raise ValueError("`idx` has no positions (shape (B, 0))")
        _check_key_mask(key_mask, B, T)
        return B, T

    def hidden(self, idx: Tensor, key_mask: Tensor | None = None) -> Tensor:
        """The final hidden state of every position.

        Shapes: idx (B, T), key_mask (B, T) or None -> (B, T, d_model).
        """
        B, T = self._check_input(idx, key_mask)
        pos = torch.arange(T, device=idx.device)  # (T,)
        x = self.tok_emb(idx) + self.pos_emb(pos)  # (B, T, d) + (T, d)
        x = self.drop(x)  # (B, T, d)
        # no causal mask: every position sees every real position
        return self.encoder(x, key_mask=key_mask)  # (B, T, d), normed

    def summary(self, idx: Tensor, key_mask: Tensor | None = None) -> Tensor:
        """The [CLS]-style summary vector: the final hidden state of
        position 0.

        Shapes: idx (B, T) with [CLS] at position 0 -> (B, d_model).
        """
        return self.hidden(idx, key_mask)[:, 0]  # (B, T, d) -> (B, d)

    def forward(
        self,
        idx: Tensor,
        labels: Tensor | None = None,
        *,
        key_mask: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        h = self.hidden(idx, key_mask)  # (B, T, d_model)
        logits = self.head(h)  # (B, T, d) @ (d, V) -> (B, T, V)
        loss = None if labels is None else mlm_loss(logits, labels)
        return logits, loss

    @torch.no_grad()
    def attention_weights(self, idx: Tensor, key_mask: Tensor | None = None) -> Tensor:
        """Every head's attention weights (no causal mask: row t may weigh later positions).

        Shapes: idx (B, T) -> (n_layers, B, n_heads, T, T); row t holds query t's weights.
        """
        B, T = self._check_input(idx, key_mask)
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T, device=idx.device))  # (B, T, d)
        maps = []
        for block in self.encoder.blocks:
            _, w = block.attn(block.norm1(x), key_mask=key_mask, need_weights=True,
                              average_weights=False)  # pre-norm input; w (B, h, T, T)
            maps.append(w)
            x = block(x, key_mask=key_mask)  # (B, T, d)
        return torch.stack(maps)  # (n_layers, B, h, T, T)


class EncoderClassifier(nn.Module):
    """Fine-tuning: a linear layer on the ``[CLS]`` summary vector of an :class:`EncoderLM`.

    The whole encoder is trained with the new layer (BERT's recipe; BERT adds a ``tanh`` "pooler"
    layer before it, left out here). The MLM head is kept (it is tied to the embedding, so it
    costs no parameter) but not used.

    Shapes:
        idx: ``(B, T)`` with ``[CLS]`` at position 0; key_mask: ``(B, T)`` bool or None;
        labels: ``(B,)`` class ids or None. Returns logits ``(B, n_classes)`` and the mean
        cross-entropy (or None).
    """

    def __init__(self, body: EncoderLM, n_classes: int):
        super().__init__()
        if not isinstance(body, EncoderLM):
            raise TypeError(f"`body` must be a companion.mlm.EncoderLM (got {type(body).__name__})")
        if not _is_int(n_classes) or n_classes < 2:
            raise ValueError(f"`n_classes` must be an int >= 2 (got {n_classes!r})")
        self.body, self.n_classes = body, n_classes
        self.classifier = nn.Linear(body.config.d_model, n_classes)
        nn.init.normal_(self.classifier.weight, std=0.02)
        nn.init.zeros_(self.classifier.bias)

    def forward(self, idx: Tensor, labels: Tensor | None = None, *,
                key_mask: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        cls_vec = self.body.summary(idx, key_mask)  # (B, d_model)
        logits = self.classifier(cls_vec)  # (B, d_model) @ (d_model, n_classes) -> (B, n_classes)
        loss = None
        if labels is not None:
            _check_ids(labels, "labels", self.n_classes, ndim=1)
            if len(labels) != len(idx):
                raise ValueError(f"`labels` must have one class per sequence, shape ({len(idx)},) "
                                 f"(got {tuple(labels.shape)})")
            loss = F.cross_entropy(logits.float(), labels.long())
        return logits, loss


# --------------------------------------------------------------------------- pre-training


def mlm_batch(ids: Tensor, tokenizer: MaskedCharTokenizer, batch_size: int, context_length: int,
              generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Random windows of ``context_length - 1`` characters, ``[CLS]`` in front, masked.

    Shapes: ids (N,) -> inputs, labels (batch_size, context_length).
    """
    tok = _check_tokenizer(tokenizer)
    _check_ids(ids, "ids", tok.n_chars, ndim=1)
    for name, v in (("batch_size", batch_size), ("context_length", context_length)):
        if not _is_int(v) or v < (2 if name == "context_length" else 1):
            raise ValueError(f"`{name}` must be a positive int (got {v!r})")
    _check_generator(generator)
    windows, _ = get_batch(ids, batch_size, context_length - 1, generator)  # (B, T - 1)
    cls = torch.full((batch_size, 1), tok.cls_id, dtype=torch.long)
    x = torch.cat([cls, windows], dim=1)  # (B, T): [CLS] then the characters
    return mask_tokens(x, tok, generator=generator)


@torch.no_grad()
def estimate_mlm_loss(model: EncoderLM, ids: Tensor, tokenizer: MaskedCharTokenizer, batches: int,
                      batch_size: int, seed: int = 1234) -> float:
    """Mean masked-LM loss on ``batches`` random masked windows: the same windows and masks on
    every call (nats per chosen character)."""
    if not isinstance(model, EncoderLM):
        raise TypeError(f"`model` must be an EncoderLM (got {type(model).__name__})")
    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    losses = [model(*mlm_batch(ids, tokenizer, batch_size, model.config.context_length, g))[1].item()
              for _ in range(batches)]
    model.train(was_training)
    return sum(losses) / len(losses)


def _check_train_args(model, cls, cfg, steps) -> int:
    if not isinstance(model, cls):
        raise TypeError(f"`model` must be a companion.mlm.{cls.__name__} (got {type(model).__name__})")
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"`cfg` must be a companion.train.TrainConfig (got {type(cfg).__name__})")
    steps = cfg.max_steps if steps is None else steps
    if not _is_int(steps) or steps < 0:
        raise ValueError(f"`steps` must be None or an int >= 0 (got {steps!r})")
    return steps


def _optimizer_step(model: nn.Module, optimizer, loss: Tensor, max_norm: float) -> None:
    optimizer.zero_grad(set_to_none=True)  # gradients left by earlier code must not count
    loss.backward()
    if max_norm > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()


def _check_step_args(model, cls, optimizer, max_norm) -> None:
    if not isinstance(model, cls):
        raise TypeError(f"`model` must be a companion.mlm.{cls.__name__} (got {type(model).__name__})")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"`optimizer` must be a torch.optim.Optimizer (got {type(optimizer).__name__})")
    if isinstance(max_norm, bool) or not isinstance(max_norm, (int, float)) or not max_norm >= 0:
        raise ValueError(f"`max_norm` must be a number >= 0, 0 for no clipping (got {max_norm!r})")


def mlm_step(model: EncoderLM, optimizer: torch.optim.Optimizer, ids: Tensor, tokenizer: MaskedCharTokenizer, *,
             key_mask: Tensor | None = None, generator: torch.Generator | None = None,
             max_norm: float = 0.0) -> float | None:
    """One masked-LM pre-training step on the batch ``ids`` (``[CLS]`` first, maybe ``[PAD]`` at
    the end, with its ``key_mask``).

    :func:`mask_tokens` draws the masks from ``generator``; the model scores the chosen
    positions (:func:`mlm_loss`); the gradients the model arrived with are zeroed, then backward,
    clipping to ``max_norm`` (0: none) and the optimizer's step. Returns the loss (a float), or
    None, with the model and the optimizer untouched, when no position of the batch was chosen
    (possible for a few short lines): there is nothing to learn from.

    Shapes: ids (B, T), key_mask (B, T) bool or None -> float or None.
    """
    _check_step_args(model, EncoderLM, optimizer, max_norm)
    inputs, labels = mask_tokens(ids, tokenizer, generator=generator)  # (B, T) each
    if not bool((labels != IGNORE_INDEX).any()):
        return None
    _, loss = model(inputs, labels, key_mask=key_mask)
    _optimizer_step(model, optimizer, loss, max_norm)
    return loss.item()


def classifier_step(model: EncoderClassifier, optimizer: torch.optim.Optimizer, ids: Tensor, key_mask: Tensor,
                    labels: Tensor, *, max_norm: float = 0.0) -> float:
    """One fine-tuning step: the classifier's logits on the ``[CLS]`` summary of each line, their
    mean cross-entropy against ``labels``, zeroed gradients, backward, clipping to ``max_norm``
    (0: none), the optimizer's step. Returns the loss (a float).

    Shapes: ids, key_mask (B, T) with [CLS] at position 0; labels (B,) -> float.
    """
    _check_step_args(model, EncoderClassifier, optimizer, max_norm)
    _, loss = model(ids, labels, key_mask=key_mask)
    _optimizer_step(model, optimizer, loss, max_norm)
    return loss.item()


def train_mlm(model: EncoderLM, train_ids: Tensor, tokenizer: MaskedCharTokenizer, cfg: TrainConfig, *,
              steps: int | None = None, val_ids: Tensor | None = None, progress: bool = False) -> History:
    """Pre-train ``model`` with the masked-LM objective for ``steps`` steps (default
    ``cfg.max_steps``), on random windows of ``train_ids``.

    Chapter 7's recipe, reused: :func:`~companion.train.make_optimizer` (AdamW, decay on
    matrices only; typed for a GPT, it only uses ``model.parameters()``) and
    :func:`~companion.train.learning_rate` (warm-up, cosine decay over ``cfg.max_steps``),
    gradient clipping. One generator seeded with ``cfg.seed`` draws the windows and the masks, so a
    run is the same for the same seed, steps and thread count. With ``val_ids`` the held-out loss
    is measured every ``cfg.eval_interval`` steps and at the end.

    Shapes: train_ids, val_ids (N,) character ids -> a :class:`companion.train.History`.
    """
    steps = _check_train_args(model, EncoderLM, cfg, steps)
    tok = _check_tokenizer(tokenizer)
    _check_ids(train_ids, "train_ids", tok.n_chars, ndim=1)
    if model.config.vocab_size != tok.vocab_size:
        raise ValueError(f"the model's vocab_size={model.config.vocab_size} does not match the tokenizer's "
                         f"{tok.vocab_size}")
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    optimizer = make_optimizer(model, cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    h = History()
    T = model.config.context_length
    evaluate = (lambda: estimate_mlm_loss(model, val_ids, tok, cfg.eval_batches, cfg.batch_size)) \
        if val_ids is not None else None
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        lr = learning_rate(min(1.0, step / cfg.max_steps), cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        windows, _ = get_batch(train_ids, cfg.batch_size, T - 1, g)  # (B, T - 1), then the masks
        ids = torch.cat([torch.full((cfg.batch_size, 1), tok.cls_id, dtype=torch.long), windows], dim=1)
        value = mlm_step(model, optimizer, ids, tok, generator=g, max_norm=cfg.grad_clip)
        if value is None:  # no position chosen in the whole batch (0.85 ** (B * (T - 1))): no step
            continue
        if not math.isfinite(value):
            raise FloatingPointError(f"the training loss became {value} at step {step + 1}; lower the learning rate")
        h.steps.append(step + 1), h.train_loss.append(value), h.lr.append(lr)
        h.tokens += ids.numel()
        if evaluate and cfg.eval_interval and (step + 1) % cfg.eval_interval == 0:
            h.eval_steps.append(step + 1), h.val_loss.append(evaluate())
            if progress:
                print(f"step {step + 1}: train {value:.4f}, held-out {h.val_loss[-1]:.4f} nats/char "
                      f"({time.perf_counter() - start:.0f} s)", flush=True)
    h.seconds = time.perf_counter() - start
    if evaluate and (not h.eval_steps or h.eval_steps[-1] != steps) and steps:
        h.eval_steps.append(steps), h.val_loss.append(evaluate())
    model.eval()
    return h


# --------------------------------------------------------------------------- fine-tuning


def spoken_lines(name: str, min_chars: int = 1) -> list[str]:
    """The spoken lines of one play (speakers' names left out), of at least ``min_chars``
    characters, in order."""
    if not _is_int(min_chars) or min_chars < 1:
        raise ValueError(f"`min_chars` must be an int >= 1 (got {min_chars!r})")
    lines = []
    for speech in play_text(name).split("\n\n"):
        for line in speech.split("\n")[1:]:  # the first line of a speech is "SPEAKER:"
            if len(line) >= min_chars:
                lines.append(line)
    return lines


def labelled_lines(plays, groups: tuple[str, ...] = ("comedies", "tragedies"),
                   min_chars: int = 20) -> tuple[list[str], Tensor]:
    """The spoken lines of ``plays`` that belong to ``groups``, labelled by the index of their
    play's group in ``groups`` (:func:`companion.data.play_group`).

    Shapes: -> (N lines, LongTensor (N,) of labels).
    """
    if isinstance(plays, str) or not isinstance(plays, (list, tuple)) or not plays:
        raise TypeError(f"`plays` must be a non-empty list of play names (got {plays!r:.60})")
    if isinstance(groups, str) or not isinstance(groups, (list, tuple)) or len(groups) < 2:
        raise TypeError(f"`groups` must be a list of at least two play groups (got {groups!r:.60})")
    lines, labels = [], []
    for name in plays:
        group = play_group(name)  # raises a clear error for an unknown play
        if group in groups:
            new = spoken_lines(name, min_chars)
            lines += new
            labels += [list(groups).index(group)] * len(new)
    if not lines:
        raise ValueError(f"none of `plays` belongs to `groups` {list(groups)}")
    return lines, torch.tensor(labels)


def _check_lines(model, ids, key_mask, labels) -> None:
    if key_mask is None:
        raise ValueError("`key_mask` is required: encode_lines returns one with the ids")
    B, _ = model.body._check_input(ids, key_mask)
    _check_ids(labels, "labels", model.n_classes, ndim=1)
    if len(labels) != B:
        raise ValueError(f"`labels` must have one class per line, shape ({B},) (got {tuple(labels.shape)})")


def fine_tune(model: EncoderClassifier, ids: Tensor, key_mask: Tensor, labels: Tensor, cfg: TrainConfig, *,
              steps: int | None = None) -> History:
    """Train a classifier on labelled lines: ``steps`` steps of ``cfg.batch_size`` random lines,
    chapter 7's optimizer and schedule, every weight trained (the encoder's too).

    Each batch is cut to its longest line, so that short lines cost little.

    Shapes: ids, key_mask (N, T) from :func:`encode_lines`; labels (N,) -> a History.
    """
    steps = _check_train_args(model, EncoderClassifier, cfg, steps)
    _check_lines(model, ids, key_mask, labels)
    optimizer = make_optimizer(model, cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    h = History()
    lengths = key_mask.sum(1)  # (N,)
    model.train()
    start = time.perf_counter()
    for step in range(steps):
        lr = learning_rate(min(1.0, step / cfg.max_steps), cfg)
        for group in optimizer.param_groups:
            group["lr"] = lr
        rows = torch.randint(len(ids), (cfg.batch_size,), generator=g)  # (b,)
        T = int(lengths[rows].max())
        value = classifier_step(model, optimizer, ids[rows, :T], key_mask[rows, :T], labels[rows],
                                max_norm=cfg.grad_clip)
        h.steps.append(step + 1), h.train_loss.append(value), h.lr.append(lr)
        h.tokens += int(key_mask[rows, :T].sum())
    h.seconds = time.perf_counter() - start
    model.eval()
    return h


@torch.no_grad()
def classify(model: EncoderClassifier, ids: Tensor, key_mask: Tensor, batch_size: int = 256) -> Tensor:
    """The predicted class of every line (lines sorted by length into batches, so that little
    padding is computed). Shapes: ids, key_mask (N, T) -> (N,) class ids."""
    if not isinstance(model, EncoderClassifier):
        raise TypeError(f"`model` must be an EncoderClassifier (got {type(model).__name__})")
    model.body._check_input(ids, key_mask)
    if not _is_int(batch_size) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive int (got {batch_size!r})")
    was_training = model.training
    model.eval()
    lengths = key_mask.sum(1)  # (N,)
    order = torch.argsort(lengths)
    out = torch.empty(len(ids), dtype=torch.long)
    for i in range(0, len(ids), batch_size):
        rows = order[i : i + batch_size]
        T = int(lengths[rows].max())
        logits, _ = model(ids[rows, :T], key_mask=key_mask[rows, :T])  # (b, n_classes)
        out[rows] = logits.argmax(-1)
    model.train(was_training)
    return out


# --------------------------------------------------------------------------- a task for a probe


def swap_letters(line: str, generator: torch.Generator) -> str:
    """``line`` with one pair of adjacent letters swapped: a pair ``line[i], line[i + 1]`` of two
    letters (``str.isalpha``) that differ, so that the line changes, chosen uniformly among the
    line's pairs by one draw from ``generator``. Raises ``ValueError`` when the line has none.
    """
    if not isinstance(line, str):
        raise TypeError(f"`line` must be a str (got {type(line).__name__})")
    _check_generator(generator)
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    if not pairs:
        raise ValueError(f"`line` has no two adjacent, different letters to swap (got {line!r:.60})")
    i = pairs[int(torch.randint(len(pairs), (1,), generator=generator))]
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]


# --------------------------------------------------------------------------- both sides or the left only


def held_out_positions(n_text: int, n: int, *, left: int, right: int, seed: int = 0) -> Tensor:
    """``n`` distinct positions of a text of ``n_text`` characters, drawn at random (seeded),
    each with at least ``left`` characters before it and ``right`` after it; sorted.

    Shapes: -> LongTensor (n,).
    """
    for name, v in (("n_text", n_text), ("n", n), ("left", left), ("right", right), ("seed", seed)):
        if not _is_int(v) or v < 0:
            raise ValueError(f"`{name}` must be a non-negative int (got {v!r})")
    room = n_text - left - right
    if n < 1 or n > room:
        raise ValueError(f"`n` must be between 1 and {max(room, 0)}, the positions with {left} characters "
                         f"before and {right} after in a text of {n_text} (got n={n})")
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(room, generator=g)[:n].sort().values + left


def _check_positions(ids, positions, left: int, right: int) -> None:
    _check_ids(positions, "positions", ndim=1)
    if len(positions) == 0:
        raise ValueError("`positions` is empty")
    lo, hi = int(positions.min()), int(positions.max())
    if lo < left or hi + right >= len(ids):
        raise ValueError(f"`positions` must leave {left} characters before and {right} after each position in a "
                         f"text of {len(ids)} (got positions from {lo} to {hi}); use held_out_positions")


@torch.no_grad()
def score_both_sides(model: EncoderLM, ids: Tensor, positions: Tensor, tokenizer: MaskedCharTokenizer, *,
                     left: int, right: int, batch_size: int = 128) -> Tensor:
    """``-log p(x_j | context)`` for each position ``j``: the window ``[CLS], x[j-left : j+right+1]``
    with ``x_j`` replaced by ``[MASK]`` (one blank per window, the rest visible).

    ``right=0`` gives the same model the left side only.

    Shapes: ids (N,), positions (P,) -> (P,) losses in nats.
    """
    if not isinstance(model, EncoderLM):
        raise TypeError(f"`model` must be an EncoderLM (got {type(model).__name__})")
    tok = _check_tokenizer(tokenizer)
    _check_ids(ids, "ids", tok.n_chars, ndim=1)
    for name, v in (("left", left), ("right", right)):
        if not _is_int(v) or v < 0:
            raise ValueError(f"`{name}` must be a non-negative int (got {v!r})")
    if left + right + 2 > model.config.context_length:
        raise ValueError(f"`left` + `right` + 2 (the blank and [CLS]) must be at most context_length="
                         f"{model.config.context_length} (got {left} + {right} + 2)")
    _check_positions(ids, positions, left, right)
    was_training = model.training
    model.eval()
    offsets = torch.arange(-left, right + 1)  # (W,) window around the blank
    out = []
    for i in range(0, len(positions), batch_size):
        p = positions[i : i + batch_size]  # (b,)
        x = ids[p[:, None] + offsets]  # (b, 1) + (W,) -> (b, W)
        x[:, left] = tok.mask_id  # the blank
        cls = torch.full((len(p), 1), tok.cls_id, dtype=torch.long)
        logits, _ = model(torch.cat([cls, x], dim=1))  # (b, 1 + W, V)
        logp = torch.log_softmax(logits[:, 1 + left].float(), dim=-1)  # (b, V) at the blank
        out.append(-logp.gather(1, ids[p][:, None])[:, 0])  # (b,)
    model.train(was_training)
    return torch.cat(out)


@torch.no_grad()
def score_left_only(model: GPT, ids: Tensor, positions: Tensor, *, left: int, batch_size: int = 128) -> Tensor:
    """``-log p(x_j | x[j-left : j])`` for each position ``j``, from a left-to-right GPT (its
    prediction at the last of the ``left`` characters before ``x_j``).

    Shapes: ids (N,), positions (P,) -> (P,) losses in nats.
    """
    if not isinstance(model, GPT):
        raise TypeError(f"`model` must be a companion.model.GPT (got {type(model).__name__})")
    _check_ids(ids, "ids", model.config.vocab_size, ndim=1)
    if not _is_int(left) or not 1 <= left <= model.config.context_length:
        raise ValueError(f"`left` must be an int in [1, context_length={model.config.context_length}] (got {left!r})")
    _check_positions(ids, positions, left, 0)
    was_training = model.training
    model.eval()
    offsets = torch.arange(-left, 0)  # (left,)
    out = []
    for i in range(0, len(positions), batch_size):
        p = positions[i : i + batch_size]  # (b,)
        logits, _ = model(ids[p[:, None] + offsets])  # (b, left, V)
        logp = torch.log_softmax(logits[:, -1].float(), dim=-1)  # (b, V): the next character
        out.append(-logp.gather(1, ids[p][:, None])[:, 0])
    model.train(was_training)
    return torch.cat(out)


# --------------------------------------------------------------------------- the command line

#: Named configurations: (model, training). ``small`` is the chapter 7 GPT's shape and recipe
#: (the shipped GPT: width 128, 4 layers, 4 heads, 128 characters, batches of 16, peak learning
#: rate 3e-3), run for 4,000 steps (the GPT had 9,140: the shipped encoder saw 44% of its
#: training characters, so that it could be trained in well under an hour on one thread);
#: ``tiny`` is for tests.
CONFIGS: dict[str, tuple[dict, dict]] = {
    "small": (dict(context_length=129, d_model=128, n_layers=4, n_heads=4, dropout=0.0, bias=False),
              dict(batch_size=16, max_steps=4000, learning_rate=3e-3, min_lr=1e-4, warmup=0.02,
                   eval_interval=500, eval_batches=20)),
    "tiny": (dict(context_length=33, d_model=32, n_layers=2, n_heads=2, dropout=0.0),
             dict(batch_size=8, max_steps=50, learning_rate=3e-3, min_lr=3e-4, warmup=5, eval_interval=25,
                  eval_batches=2)),
}

#: The shipped encoder, in ``companion/assets`` (trained as its ``info["command"]`` says).
SHIPPED_MLM = "shakespeare_mlm.safetensors"


FINE_TUNING_RECORD = "mlm_fine_tuning.json"
_SEED_0_KEYS = ("fine-tuned, pre-trained", "fine-tuned, random")


def _labels_text(name: str, labels: Tensor) -> str:
    if not isinstance(labels, Tensor) or labels.dim() != 1 or labels.dtype.is_floating_point or labels.numel() == 0 \
            or not bool(((labels == 0) | (labels == 1)).all()):
        raise ValueError(f"`{name}` must be a 1-D integer tensor of 0s and 1s (one class per test line)")
    return "".join(str(int(v)) for v in labels.tolist())


def record_fine_tuning(path: str | Path, *, pred: Tensor, scratch_pred: Tensor, history: History,
                       scratch_history: History, swap_seed_0: dict[str, float]) -> Path:
    """Write what chapter 10's fine-tuning cells measured, for readers who set ``TRAIN = False``.

    ``pred``, ``scratch_pred``: the genre classifier's class for each test line, from the pre-trained and
    from random weights; ``history``, ``scratch_history``: their :class:`History`; ``swap_seed_0``: the
    accuracies of the two fine-tunings of seed 0 of the swap comparison. A JSON file: data only.
    """
    import dataclasses
    import json

    for name, h in (("history", history), ("scratch_history", scratch_history)):
        if not isinstance(h, History):
            raise TypeError(f"`{name}` must be a companion.train.History (what fine_tune returns)")
    if not isinstance(swap_seed_0, dict) or set(swap_seed_0) != set(_SEED_0_KEYS):
        raise ValueError(f"`swap_seed_0` must map exactly {list(_SEED_0_KEYS)} to accuracies")
    record = {
        "genre": {"pred": _labels_text("pred", pred), "scratch_pred": _labels_text("scratch_pred", scratch_pred),
                  "history": dataclasses.asdict(history), "scratch_history": dataclasses.asdict(scratch_history)},
        "swap_seed_0": {k: float(swap_seed_0[k]) for k in _SEED_0_KEYS},
    }
    path = Path(path)
    path.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return path


def recorded_fine_tuning(path: str | Path | None = None) -> dict:
    """What the book's own run of chapter 10's fine-tuning cells measured (``TRAIN = False``).

    Returns ``{"genre": {"pred", "scratch_pred": LongTensor (N,), "history", "scratch_history": History},
    "swap_seed_0": {"fine-tuned, pre-trained": float, "fine-tuned, random": float}}``. The file is JSON,
    read as data; a malformed one raises ``ValueError`` naming what is wrong.
    """
    import json

    from companion.data import asset_path

    path = Path(path) if path is not None else asset_path(FINE_TUNING_RECORD)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        genre, seed_0 = raw["genre"], raw["swap_seed_0"]
        out = {"genre": {}, "swap_seed_0": {}}
        for name in ("pred", "scratch_pred"):
            text = genre[name]
            if not isinstance(text, str) or not text or set(text) - {"0", "1"}:
                raise ValueError(f"genre.{name} must be a string of 0s and 1s")
            out["genre"][name] = torch.tensor([int(c) for c in text])
        for name in ("history", "scratch_history"):
            out["genre"][name] = History(**genre[name])
        for key in _SEED_0_KEYS:
            value = seed_0[key]
            if not isinstance(value, float) or not 0.0 <= value <= 1.0:
                raise ValueError(f"swap_seed_0[{key!r}] must be an accuracy between 0 and 1")
            out["swap_seed_0"][key] = value
    except (KeyError, TypeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not a record of chapter 10's fine-tuning ({type(exc).__name__}: {exc})") from None
    if len(out["genre"]["pred"]) != len(out["genre"]["scratch_pred"]):
        raise ValueError(f"{path}: pred and scratch_pred must have one class per test line each")
    return out


def shipped_mlm_path() -> Path:
    """Path of the shipped chapter 10 encoder; load it with ``companion.checkpoint.load_checkpoint``."""
    from companion.data import asset_path

    return asset_path(SHIPPED_MLM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m companion.mlm",
        description="Pre-train the chapter 10 encoder (masked language model) on Shakespeare's plays, "
                    "compare it with the shipped chapter 7 GPT on held-out positions, write a checkpoint.",
        epilog="Example (the shipped encoder): python -m companion.mlm --config small --steps 4000 --threads 1 "
               "--positions 4000 --progress --out runs/shakespeare_mlm.safetensors",
    )
    parser.add_argument("--config", default="tiny", choices=sorted(CONFIGS), help="a named configuration (default: tiny)")
    parser.add_argument("--steps", type=int, help="training steps (default: the configuration's max_steps)")
    parser.add_argument("--threads", type=int, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    parser.add_argument("--positions", type=int, default=10_000,
                        help="held-out positions scored from both sides and from the left (default: 10000)")
    parser.add_argument("--out", type=Path, default=Path("runs/mlm.safetensors"), help="checkpoint to write")
    parser.add_argument("--progress", action="store_true", help="print the losses at each evaluation")
    args = parser.parse_args(argv)

    def refuse(message: str) -> int:  # one line on stderr, exit status 1, no traceback
        raise SystemExit(f"{parser.prog}: error: {message}")

    # Every argument is checked here, before the (long) training: a mistake costs a second.
    for flag, value, low in (("--steps", args.steps, 1), ("--threads", args.threads, 1), ("--seed", args.seed, 0),
                             ("--positions", args.positions, 1)):
        if value is not None and value < low:
            return refuse(f"{flag} must be an integer >= {low} (got {value})")

    from companion.checkpoint import check_output_path, load_checkpoint, save_checkpoint, shipped_model_path

    try:
        check_output_path(args.out, "--out")
    except (TypeError, ValueError) as exc:
        return refuse(str(exc).replace("`--out`", "--out"))
    corpus = load_corpus()
    tok = MaskedCharTokenizer.from_char_tokenizer(corpus.tokenizer)
    model_kw, train_kw = CONFIGS[args.config]
    steps = train_kw["max_steps"] if args.steps is None else args.steps
    cfg = TrainConfig(**{**train_kw, "max_steps": steps, "seed": args.seed, "threads": args.threads})
    torch.manual_seed(args.seed)
    model = EncoderLM(EncoderLMConfig(vocab_size=tok.vocab_size, **model_kw))
    rng = torch.get_rng_state()  # building the GPT draws weights: leave training's random stream as it was
    gpt, _, gpt_extra = load_checkpoint(shipped_model_path())
    torch.set_rng_state(rng)
    n_chars = model.config.context_length - 1
    left = n_chars // 2
    right = n_chars - 1 - left
    pos = None
    if gpt.config.context_length >= n_chars - 1:
        try:  # drawn now, so that too many --positions is said before training, not after
            pos = held_out_positions(len(corpus.val_ids), args.positions, left=n_chars - 1, right=right,
                                     seed=args.seed)
        except ValueError as exc:
            return refuse(f"--positions {args.positions}: {str(exc).replace('`n` must', 'it must')}")
    print(f"model: {model.config}\ntraining: {cfg}\nparameters: {model.num_parameters():,}", flush=True)
    history = train_mlm(model, corpus.train_ids, tok, cfg, val_ids=corpus.val_ids, progress=args.progress)
    info = {"command": "python -m companion.mlm " + " ".join(sys.argv[1:] if argv is None else argv),
            "steps": steps, "seconds": round(history.seconds, 1), "tokens": history.tokens,
            "threads": torch.get_num_threads(), "val_mlm_nats_per_char": round(history.val_loss[-1], 4),
            # the loss curves: held-out at each evaluation, training averaged over blocks of 100 steps
            "eval_steps": history.eval_steps, "val_loss": [round(v, 4) for v in history.val_loss],
            "train_loss_per_100_steps": [round(sum(history.train_loss[i : i + 100]) / len(history.train_loss[i : i + 100]), 4)
                                         for i in range(0, len(history.train_loss), 100)]}
    if pos is not None:
        both = score_both_sides(model, corpus.val_ids, pos, tok, left=left, right=right).mean().item()
        enc_left = score_both_sides(model, corpus.val_ids, pos, tok, left=n_chars - 1, right=0).mean().item()
        gpt_left = score_left_only(gpt, corpus.val_ids, pos, left=n_chars - 1).mean().item()
        info.update({"positions": args.positions, "both_sides_nats_per_char": round(both, 4),
                     "encoder_left_only_nats_per_char": round(enc_left, 4),
                     "gpt_left_only_nats_per_char": round(gpt_left, 4),
                     "gpt": gpt_extra["info"].get("command", "")})
        print(f"held-out, {args.positions} positions: both sides {both:.4f}, encoder left only {enc_left:.4f}, "
              f"GPT left only {gpt_left:.4f} nats/char", flush=True)
    path = save_checkpoint(args.out, model, tok, info=info)
    print(f"held-out masked-LM loss {info['val_mlm_nats_per_char']:.4f} nats/char after {steps} steps, "
          f"{history.seconds:.0f} s; wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    # Run the main() of the imported module, not of this __main__ copy: a checkpoint must name
    # companion.mlm's classes (python -m runs this file under the name __main__).
    from companion.mlm import main as _main

    sys.exit(_main())
