"""A small translation task for chapter 9: English number words into German number words.

The data are generated, deterministically and offline, by the ``num2words`` package: ``97`` gives
the pair ("ninety-seven", "siebenundneunzig"), ``342`` gives ("three hundred and forty-two",
"dreihundertzweiundvierzig"). German says the units before the tens ("seven-and-ninety"), so
the order of the pieces changes between source and target: a translation model must *reorder*,
not only substitute. Everything is character-level.

* :func:`english`, :func:`german`: the two sides of a number.
* :func:`number_splits`: which numbers are for training, validation and the two held-out tests.
  ``test`` holds numbers never seen in training whose every piece was seen (4342 is held out,
  but 4341, 342 and 4000 are not); ``unseen_endings`` holds every number whose last two digits
  are in :data:`HELD_OUT_ENDINGS`, so that their German words (``vierunddreißig`` ...) never
  occur in training at all.
* :class:`TranslationTokenizer`: characters plus ``<pad>``, ``<s>`` and ``</s>``.
* :func:`make_batch`: teacher forcing, ``<s> y`` in and ``y </s>`` out.
* :func:`train`: the training loop (AdamW, warm-up and cosine decay, clipping: chapter 7's
  :mod:`companion.train` pieces).
* :func:`translate`: greedy (batched) or beam search, with chapter 8's decoders.
* :func:`chrf`, :func:`exact_match`, :func:`evaluate`: the scores.

From a terminal (the shipped model was made by the first command; see the chapter)::

    python -m companion.translation train --steps 800 --threads 1 --no-eval --out companion/assets/numbers_en_de.safetensors
    python -m companion.translation evaluate companion/assets/numbers_en_de.safetensors --threads 1 --write
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Callable, Sequence

import torch
from torch import Tensor
from torch.nn import functional as F

from companion.decoding import beam_search, greedy
from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from companion.train import TrainConfig, learning_rate, make_optimizer
from companion.validation import check_float

__all__ = [
    "HELD_OUT_ENDINGS",
    "english",
    "german",
    "NumberSplits",
    "number_splits",
    "pairs",
    "TranslationTokenizer",
    "make_batch",
    "train",
    "smoothed_cross_entropy",
    "token_confidence",
    "translate",
    "chrf",
    "exact_match",
    "evaluate",
    "DECODERS",
    "MODEL_CONFIG",
    "TRAIN_CONFIG",
    "LIVE_SPLIT",
    "LIVE_TRAIN_CONFIG",
    "SHIPPED_MODEL",
    "shipped_model_path",
    "main",
]

#: Two-digit endings held out entirely: no training number ends with them (``unseen_endings``).
HELD_OUT_ENDINGS = (34, 58, 76)

#: The chapter 9 model, shipped in ``companion/assets`` (trained by this module's ``train`` command).
SHIPPED_MODEL = "numbers_en_de.safetensors"

#: The largest number of the task (``0 .. MAX_NUMBER``).
MAX_NUMBER = 9999


def _check_number(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_NUMBER:
        raise ValueError(f"`n` must be an integer in [0, {MAX_NUMBER}] (got n={n!r})")
    return n


@lru_cache(maxsize=None)
def english(n: int) -> str:
    """``n`` in English words, as ``num2words`` writes them: 342 -> "three hundred and forty-two"."""
    from num2words import num2words

    return num2words(_check_number(n), lang="en")


@lru_cache(maxsize=None)
def german(n: int) -> str:
    """``n`` in German words, as ``num2words`` writes them: 342 -> "dreihundertzweiundvierzig"."""
    from num2words import num2words

    return num2words(_check_number(n), lang="de")


def pairs(numbers: Sequence[int]) -> list[tuple[str, str]]:
    """``[(english(n), german(n)) for n in numbers]``."""
    if isinstance(numbers, (str, bytes)) or not hasattr(numbers, "__iter__"):
        raise TypeError(f"`numbers` must be a sequence of integers (got {type(numbers).__name__})")
    return [(english(n), german(n)) for n in numbers]


@dataclass(frozen=True)
class NumberSplits:
    """Which numbers are used for what. Every number of ``0 .. max_number`` is in exactly one split."""

    train: tuple[int, ...]
    valid: tuple[int, ...]  # for the training log only: no decision is taken on it
    test: tuple[int, ...]  # held out at random: every piece of these numbers occurs in training
    unseen_endings: tuple[int, ...]  # every number ending in HELD_OUT_ENDINGS: those words never occur


def number_splits(max_number: int = MAX_NUMBER, *, test_size: int = 200, valid_size: int = 200,
                  held_out_endings: Sequence[int] = HELD_OUT_ENDINGS, seed: int = 0) -> NumberSplits:
    """Split ``0 .. max_number`` deterministically (the same ``seed`` gives the same split).

    First every number whose last two digits are in ``held_out_endings`` goes to
    ``unseen_endings``; of the rest, ``test_size`` numbers drawn at random go to ``test`` and
    ``valid_size`` to ``valid``; the others are for training.

    Shapes:
        integers in; four sorted tuples of integers out.
    """
    for name, value in (("max_number", max_number), ("test_size", test_size), ("valid_size", valid_size),
                        ("seed", seed)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"`{name}` must be a non-negative integer (got {name}={value!r})")
    if max_number > MAX_NUMBER or max_number < 99:
        raise ValueError(f"`max_number` must be in [99, {MAX_NUMBER}] (got max_number={max_number})")
    if isinstance(held_out_endings, (str, bytes)) or not hasattr(held_out_endings, "__iter__"):
        raise TypeError(f"`held_out_endings` must be a sequence of two-digit endings such as {HELD_OUT_ENDINGS} "
                        f"(or () for none) (got {held_out_endings!r:.60})")
    endings = tuple(held_out_endings)
    if not all(isinstance(e, int) and not isinstance(e, bool) and 21 <= e <= 99 and e % 10 for e in endings):
        raise ValueError(f"`held_out_endings` must be two-digit numbers 21..99 that are not multiples of 10, whose "
                         f"German words reorder units and tens (got {endings!r})")
    unseen = [n for n in range(max_number + 1) if n % 100 in endings]
    rest = [n for n in range(max_number + 1) if n % 100 not in endings]
    if test_size + valid_size >= len(rest):
        raise ValueError(f"`test_size` + `valid_size` must leave numbers to train on (got {test_size} + {valid_size} "
                         f"of {len(rest)})")
    random.Random(seed).shuffle(rest)
    test, valid, train_ = rest[:test_size], rest[test_size:test_size + valid_size], rest[test_size + valid_size:]
    return NumberSplits(tuple(sorted(train_)), tuple(sorted(valid)), tuple(sorted(test)), tuple(unseen))


# --------------------------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------------------------
class TranslationTokenizer:
    """One token per character, after three special tokens.

    ``<pad>`` (id 0) fills the end of shorter sequences in a batch; ``<s>`` (id 1) starts every
    decoder input; ``</s>`` (id 2) ends every target. Characters follow in the order given.

    Shapes:
        encode: a string of length L -> ``(L,)`` (plus one per special asked for);
        decode: ``(L,)`` -> a string.
    """

    SPECIALS = ("<pad>", "<s>", "</s>")
    pad_id, bos_id, eos_id = 0, 1, 2

    def __init__(self, chars: str):
        if not isinstance(chars, str) or not chars:
            raise TypeError(f"`chars` must be a non-empty str of the characters to encode (got {chars!r:.60})")
        if len(set(chars)) != len(chars):
            raise ValueError(f"`chars` must not repeat a character (got {len(chars)} characters, {len(set(chars))} distinct)")
        self.chars = chars
        self.stoi = {ch: i + len(self.SPECIALS) for i, ch in enumerate(chars)}
        self.itos = list(self.SPECIALS) + list(chars)

    @classmethod
    def from_texts(cls, texts: Sequence[str]) -> "TranslationTokenizer":
        """A tokenizer for every character that occurs in ``texts`` (sorted)."""
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("`texts` must be a sequence of strings (a list of sentences, not one string)")
        return cls("".join(sorted(set("".join(texts)))))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def to_dict(self) -> dict:
        """What a checkpoint stores to rebuild this tokenizer (:meth:`from_dict`)."""
        return {"chars": self.chars}

    @classmethod
    def from_dict(cls, d: dict) -> "TranslationTokenizer":
        if not isinstance(d, dict) or set(d) != {"chars"} or not isinstance(d["chars"], str):
            raise ValueError(f"a TranslationTokenizer is stored as {{'chars': str}} (got {d!r:.80})")
        return cls(d["chars"])

    def encode(self, text: str, *, bos: bool = False, eos: bool = False) -> Tensor:
        """Ids of ``text``'s characters, after ``<s>`` if ``bos`` and before ``</s>`` if ``eos``."""
        if not isinstance(text, str):
            raise TypeError(f"`text` must be a str (got {type(text).__name__})")
        for name, value in (("bos", bos), ("eos", eos)):
            if not isinstance(value, bool):
                raise TypeError(f"`{name}` must be True or False (got {name}={value!r})")
        try:
            ids = [self.stoi[ch] for ch in text]
        except KeyError as exc:
            ch = exc.args[0]
            raise ValueError(f"`text` contains the character {ch!r} at position {text.index(ch)}, which is not in "
                             f"this tokenizer's {len(self.chars)} characters {self.chars!r}") from None
        return torch.tensor([self.bos_id] * bos + ids + [self.eos_id] * eos, dtype=torch.long)

    def encode_batch(self, texts: Sequence[str], *, bos: bool = False, eos: bool = False) -> Tensor:
        """Encode several texts and pad them on the right with ``<pad>`` to the longest.

        Shapes:
            ``B`` strings -> ``(B, L_max)``.
        """
        if isinstance(texts, str) or not hasattr(texts, "__len__") or len(texts) == 0:
            raise TypeError("`texts` must be a non-empty list of strings (for one text use encode())")
        rows = [self.encode(t, bos=bos, eos=eos) for t in texts]
        out = torch.full((len(rows), max(len(r) for r in rows)), self.pad_id, dtype=torch.long)
        for b, r in enumerate(rows):
            out[b, : len(r)] = r
        return out

    def decode(self, ids) -> str:
        """The characters of ``ids`` up to the first ``</s>``; ``<s>`` and ``<pad>`` are skipped."""
        if isinstance(ids, Tensor):
            if ids.ndim != 1:
                raise ValueError(f"`ids` must be one sequence of shape (L,) (got shape {tuple(ids.shape)}); "
                                 "decode a batch row by row")
            ids = ids.tolist()
        ids = list(ids)
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise TypeError("`ids` must be integers (a LongTensor of shape (L,) or a list of ints)")
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"`ids` must lie in [0, {self.vocab_size}) (got {bad[0]})")
        out = []
        for i in ids:
            if i == self.eos_id:
                break
            if i >= len(self.SPECIALS):
                out.append(self.itos[i])
        return "".join(out)

    def __repr__(self) -> str:
        return f"TranslationTokenizer(vocab_size={self.vocab_size})"


def make_batch(tokenizer: TranslationTokenizer, batch: Sequence[tuple[str, str]]) -> tuple[Tensor, Tensor, Tensor]:
    """Source, decoder input and targets for teacher forcing.

    The decoder reads ``<s> y_1 .. y_n`` and must predict ``y_1 .. y_n </s>``: the same target
    shifted by one. Rows are padded with ``<pad>``, which the model masks in the source and the
    loss ignores in the targets.

    Shapes:
        ``B`` pairs -> src ``(B, S)``, tgt_in ``(B, T)``, tgt_out ``(B, T)``.
    """
    if not isinstance(tokenizer, TranslationTokenizer):
        raise TypeError(f"`tokenizer` must be a TranslationTokenizer (got {type(tokenizer).__name__})")
    if isinstance(batch, (str, bytes)) or not hasattr(batch, "__len__") or len(batch) == 0 or not all(
            isinstance(p, tuple) and len(p) == 2 for p in batch):
        raise TypeError("`batch` must be a non-empty list of (source, target) string pairs")
    src = tokenizer.encode_batch([s for s, _ in batch])  # (B, S)
    full = tokenizer.encode_batch([t for _, t in batch], bos=True, eos=True)  # (B, T + 1): <s> y </s>
    tgt_in, tgt_out = full[:, :-1].clone(), full[:, 1:].clone()  # (B, T) each: shifted by one
    tgt_in[tgt_in == tokenizer.eos_id] = tokenizer.pad_id  # a shorter row's </s> is never an input
    return src, tgt_in, tgt_out


def next_characters(texts: Sequence[str], prefix: str) -> dict[str, int]:
    """What follows ``prefix`` in ``texts``: ``{character: count}``, sorted by character.

    Every occurrence counts, overlapping ones included (``"aa"`` occurs three times in ``"aaaa"``);
    an occurrence at the very end of a text is followed by nothing and is not counted; the texts
    are separate (an occurrence never spans two of them). Chapter 9 uses it to find what the
    training targets say after a prefix, such as ``"sechsunds"``.

    Shapes:
        a list of strings and a non-empty string in; a dict of counts out.
    """
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"`texts` must be a list of strings (got {type(texts).__name__})")
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"`prefix` must be a non-empty string (got {prefix!r})")
    counts: Counter = Counter()
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"`texts[{i}]` must be a string (got {type(text).__name__})")
        start = text.find(prefix)
        while start != -1:
            end = start + len(prefix)
            if end < len(text):
                counts[text[end]] += 1
            start = text.find(prefix, start + 1)  # overlapping occurrences too
    return dict(sorted(counts.items()))


# --------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------
#: The shipped model's shape (the vocabulary size comes from the tokenizer).
MODEL_CONFIG = dict(context_length=64, d_model=64, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
                    d_ff=256, dropout=0.0, norm_first=False, activation="relu", tie_embeddings=True)
#: How the shipped model was trained.
TRAIN_CONFIG = TrainConfig(batch_size=64, max_steps=800, learning_rate=2e-3, min_lr=1e-4, warmup=100,
                           weight_decay=0.01, grad_clip=1.0, eval_interval=100, eval_batches=1, seed=0)

#: Chapter 9's live run: the numbers 0 to 999 (the same endings held out), trained in the notebook
#: with and without label smoothing; benchmarks/bench_label_smoothing.py repeats it over seeds.
LIVE_SPLIT = dict(max_number=999, test_size=100, valid_size=0)
LIVE_TRAIN_CONFIG = TrainConfig(batch_size=32, max_steps=300, learning_rate=2e-3, min_lr=1e-4, warmup=30,
                                weight_decay=0.01, grad_clip=1.0, eval_interval=0, eval_batches=1, seed=0)


@dataclass
class TrainHistory:
    """Training log: the loss of every step, and the validation loss every ``eval_interval`` steps."""

    steps: list[int]
    train_loss: list[float]
    eval_steps: list[int]
    valid_loss: list[float]
    seconds: float = 0.0


@torch.no_grad()
def _mean_loss(model: Seq2SeqTransformer, tokenizer: TranslationTokenizer, data: Sequence[tuple[str, str]],
               batch_size: int = 256) -> float:
    """Cross-entropy per target token (``</s>`` included) over ``data``, teacher-forced."""
    was = model.training
    model.eval()
    total, count = 0.0, 0
    for i in range(0, len(data), batch_size):
        src, tgt_in, tgt_out = make_batch(tokenizer, data[i:i + batch_size])
        _, loss = model(src, tgt_in, tgt_out)
        n = int((tgt_out != tokenizer.pad_id).sum())
        total, count = total + loss.item() * n, count + n
    model.train(was)
    return total / count


def smoothed_cross_entropy(logits: Tensor, targets: Tensor, pad_id: int, label_smoothing: float = 0.0) -> Tensor:
    """Mean cross-entropy over the targets that are not ``pad_id``, against smoothed targets.

    With ``label_smoothing = eps`` the target distribution of a position is ``1 - eps`` on its
    token plus ``eps / V`` on every token of the vocabulary (Szegedy et al. 2016, as
    ``F.cross_entropy(..., label_smoothing=eps)``); ``eps = 0`` is the plain cross-entropy, the
    loss of :class:`~companion.seq2seq.Seq2SeqTransformer`.

    Shapes:
        logits ``(B, T, V)``, targets ``(B, T)`` -> a scalar.
    """
    if not isinstance(logits, Tensor) or logits.ndim != 3 or not isinstance(targets, Tensor) \
            or tuple(targets.shape) != tuple(logits.shape[:2]):
        got = (tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__,
               tuple(targets.shape) if isinstance(targets, Tensor) else type(targets).__name__)
        raise ValueError(f"`logits` must have shape (B, T, V) and `targets` (B, T) (got {got[0]} and {got[1]})")
    check_float("label_smoothing", label_smoothing, low=0, high=1, high_open=True)
    B, T, V = logits.shape
    return F.cross_entropy(logits.reshape(B * T, V).float(), targets.reshape(B * T).long(), ignore_index=pad_id,
                           label_smoothing=float(label_smoothing))


@torch.no_grad()
def token_confidence(model: Seq2SeqTransformer, tokenizer: TranslationTokenizer, data: Sequence[tuple[str, str]],
                     batch_size: int = 256) -> dict[str, float]:
    """How sure the model is of each target token, and how often it is right, teacher-forced.

    Over every target token of ``data`` (``</s>`` included, padding not), reading the reference
    prefix: ``confidence``, the mean probability of the most probable token; ``accuracy``, the
    share of tokens where that token is the reference's; ``p_right``, the mean probability of the
    reference token; ``nll``, the mean of ``-log p(reference token)`` (nats). A calibrated model has
    ``confidence`` close to ``accuracy``.

    Shapes:
        a list of (source, reference) pairs -> a dict of floats.
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"`model` must be a Seq2SeqTransformer (got {type(model).__name__})")
    _check_pairs("data", data, "reference")
    was = model.training
    model.eval()
    sums = {"confidence": 0.0, "accuracy": 0.0, "p_right": 0.0, "nll": 0.0}
    count = 0
    for i in range(0, len(data), batch_size):
        src, tgt_in, tgt_out = make_batch(tokenizer, data[i:i + batch_size])
        logp = model(src, tgt_in)[0].float().log_softmax(-1)  # (B, T, V)
        real = tgt_out != tokenizer.pad_id  # (B, T)
        best, arg = logp.max(-1)  # (B, T) each
        right = logp.gather(-1, tgt_out[..., None])[..., 0]  # (B, T): log p(reference token)
        sums["confidence"] += best.exp()[real].sum().item()
        sums["accuracy"] += (arg == tgt_out)[real].sum().item()
        sums["p_right"] += right.exp()[real].sum().item()
        sums["nll"] -= right[real].sum().item()
        count += int(real.sum())
    model.train(was)
    return {key: value / count for key, value in sums.items()}


def _check_pairs(name: str, data, second: str = "target") -> None:
    """``data`` must be a non-empty list of (source, target) pairs of strings."""
    if isinstance(data, (str, bytes)) or not hasattr(data, "__len__") or len(data) == 0:
        raise ValueError(f"`{name}` must be a non-empty list of (source, {second}) pairs")
    for i, pair in enumerate(data):
        if isinstance(pair, (str, bytes)) or not isinstance(pair, (tuple, list)) or len(pair) != 2 \
                or not all(isinstance(t, str) for t in pair):
            raise ValueError(f"`{name}` must be a list of (source, {second}) pairs of strings, such as "
                             f"pairs(numbers) gives (got {pair!r:.60} at index {i})")


def train(model: Seq2SeqTransformer, tokenizer: TranslationTokenizer, data: Sequence[tuple[str, str]],
          cfg: TrainConfig, *, valid: Sequence[tuple[str, str]] | None = None, progress: bool = False,
          label_smoothing: float = 0.0, forward: Callable[..., Tensor] | None = None) -> TrainHistory:
    """Train ``model`` for ``cfg.max_steps`` steps on random batches of ``data``.

    Each step draws ``cfg.batch_size`` pairs (from a generator seeded with ``cfg.seed``), computes
    the teacher-forced loss, clips the gradient's norm to ``cfg.grad_clip`` and takes an AdamW step
    with chapter 7's warm-up and cosine schedule. For a given seed, thread count and number of
    steps the result is the same on every run of one machine.

    ``label_smoothing`` (``eps``): the loss's target puts ``1 - eps`` on the right token and spreads
    ``eps`` evenly over the whole vocabulary (:func:`smoothed_cross_entropy`; the original
    transformer used 0.1). ``forward``: a function ``(model, src, tgt_in) -> logits (B, T, V)``
    used instead of ``model(src, tgt_in)`` (chapter 9 trains with the reader's own forward pass).
    The validation loss is always the plain cross-entropy of ``model``'s own forward.

    Shapes:
        ``data``: a list of (source, target) strings; returns a :class:`TrainHistory`.
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"`model` must be a Seq2SeqTransformer (got {type(model).__name__})")
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"`cfg` must be a companion.train.TrainConfig (got {type(cfg).__name__})")
    _check_pairs("data", data)
    if valid is not None:
        _check_pairs("valid", valid)
    if not isinstance(tokenizer, TranslationTokenizer):
        raise TypeError(f"`tokenizer` must be a TranslationTokenizer (got {type(tokenizer).__name__})")
    if tokenizer.vocab_size != model.config.vocab_size:
        raise ValueError(f"`tokenizer` has {tokenizer.vocab_size} tokens but the model's vocab_size is "
                         f"{model.config.vocab_size}; build the model with vocab_size=tokenizer.vocab_size")
    check_float("label_smoothing", label_smoothing, low=0, high=1, high_open=True)
    if forward is not None and not callable(forward):
        raise TypeError(f"`forward` must be a function (model, src, tgt_in) -> logits, or None for the model's own "
                        f"(got {type(forward).__name__})")
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    optimizer = make_optimizer(model, cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    history = TrainHistory([], [], [], [])
    model.train()
    start = time.perf_counter()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=cfg.max_steps, mininterval=5.0, ncols=78, desc="training")
    for step in range(cfg.max_steps):
        lr = learning_rate(step / cfg.max_steps, cfg, cfg.max_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        rows = torch.randint(len(data), (cfg.batch_size,), generator=g).tolist()
        src, tgt_in, tgt_out = make_batch(tokenizer, [data[i] for i in rows])
        if forward is None and not label_smoothing:
            _, loss = model(src, tgt_in, tgt_out)
        else:
            logits = model(src, tgt_in)[0] if forward is None else forward(model, src, tgt_in)
            loss = smoothed_cross_entropy(logits, tgt_out, tokenizer.pad_id, label_smoothing)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        history.steps.append(step + 1)
        history.train_loss.append(loss.item())
        last = step + 1 == cfg.max_steps
        if valid is not None and (last or (cfg.eval_interval and (step + 1) % cfg.eval_interval == 0)):
            history.eval_steps.append(step + 1)
            history.valid_loss.append(_mean_loss(model, tokenizer, valid))
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    if bar is not None:
        bar.close()
    history.seconds = time.perf_counter() - start
    model.eval()
    return history


# --------------------------------------------------------------------------------------------
# Translating and scoring
# --------------------------------------------------------------------------------------------
def _max_new(source: str, max_new_tokens: int | None, context_length: int) -> int:
    n = len(source) + 10 if max_new_tokens is None else max_new_tokens  # German is rarely longer than English
    return min(n, context_length - 1)  # the decoder's positions: <s> plus the new tokens


@torch.no_grad()
def translate(model: Seq2SeqTransformer, tokenizer: TranslationTokenizer, sources: Sequence[str], *,
              k: int | None = None, length_penalty: float = 0.0, max_new_tokens: int | None = None,
              batch_size: int = 256) -> list[str]:
    """Translate each source with chapter 8's decoders run on ``p(y | x)``.

    ``k=None``: greedy decoding, a batch of sources at a time (padded sources, masked).
    ``k``: beam search of width ``k``, one source at a time, ranked by
    ``score / length ** length_penalty``. Generation stops at ``</s>`` or after
    ``max_new_tokens`` tokens (default: the source's length plus 10).

    Shapes:
        ``N`` strings in, ``N`` strings out.
    """
    if not isinstance(model, Seq2SeqTransformer):
        raise TypeError(f"`model` must be a Seq2SeqTransformer (got {type(model).__name__})")
    if isinstance(sources, str) or not hasattr(sources, "__len__") or not all(isinstance(s, str) for s in sources):
        raise TypeError("`sources` must be a list of strings (for one sentence: [sentence])")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise ValueError(f"`k` must be None (greedy) or a beam width >= 1 (got k={k!r})")
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                                       or max_new_tokens < 1):
        raise ValueError(f"`max_new_tokens` must be None or an integer >= 1 (got {max_new_tokens!r})")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer, the number of sources decoded at once "
                         f"(got batch_size={batch_size!r})")
    if not isinstance(tokenizer, TranslationTokenizer):
        raise TypeError(f"`tokenizer` must be a TranslationTokenizer (got {type(tokenizer).__name__}); the one "
                        "load_checkpoint returns with the model")
    check_float("length_penalty", length_penalty)
    model.eval()
    ctx, out = model.config.context_length, []
    if k is None:
        for i in range(0, len(sources), batch_size):
            chunk = list(sources[i:i + batch_size])
            src = tokenizer.encode_batch(chunk)  # (B, S), padded
            start = torch.full((len(chunk), 1), tokenizer.bos_id)  # (B, 1): every target starts with <s>
            n = max(_max_new(s, max_new_tokens, ctx) for s in chunk)
            ids = greedy(model.conditioned_on(src), start, n, eos_id=tokenizer.eos_id)  # (B, 1 + n)
            out += [tokenizer.decode(row[1:]) for row in ids]
        return out
    for source in sources:
        cond = model.conditioned_on(tokenizer.encode(source)[None])  # a source of one row
        result = beam_search(cond, [tokenizer.bos_id], _max_new(source, max_new_tokens, ctx), k=k,
                             eos_id=tokenizer.eos_id, length_penalty=length_penalty)
        out.append(tokenizer.decode(result.best.generated))
    return out


def _check_texts(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if isinstance(texts, str) or not hasattr(texts, "__len__") or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"`{name}` must be a list of strings (for one sentence: [sentence])")
    if len(hypotheses) != len(references):
        raise ValueError(f"`hypotheses` and `references` must have the same length (got {len(hypotheses)} and "
                         f"{len(references)})")
    if not hypotheses:
        raise ValueError("`hypotheses` must not be empty")


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """The share of hypotheses equal to their reference, character for character (0 to 1)."""
    _check_texts(hypotheses, references)
    return sum(h == r for h, r in zip(hypotheses, references)) / len(references)


def chrf(hypotheses: Sequence[str], references: Sequence[str], *, n: int = 6, beta: float = 2.0) -> float:
    """Corpus-level chrF (Popović 2015), 0 to 100, computed as sacrebleu's ``CHRF()`` default does.

    Whitespace is removed; for each order ``1..n`` the character n-grams of hypotheses and
    references are counted, and the matches (the smaller of the two counts of each n-gram) are
    summed **over the whole corpus**. Precision and recall of each order are averaged over the
    orders that occur on both sides, and combined into the F-score
    ``(1 + beta^2) P R / (beta^2 P + R)``; ``beta = 2`` weighs recall twice as much as precision.

    Shapes:
        two lists of ``N`` strings -> a float.
    """
    _check_texts(hypotheses, references)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"`n` must be a positive integer, the longest character n-gram (got n={n!r})")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not 0 < beta < math.inf:
        raise ValueError(f"`beta` must be a positive number, finite (the weight of recall against precision) "
                         f"(got beta={beta!r})")
    hyp_total, ref_total, matches = [0] * n, [0] * n, [0] * n
    for hyp, ref in zip(hypotheses, references):
        hyp, ref = "".join(hyp.split()), "".join(ref.split())  # chrF ignores whitespace
        for order in range(1, n + 1):
            h = Counter(hyp[i:i + order] for i in range(len(hyp) - order + 1))
            r = Counter(ref[i:i + order] for i in range(len(ref) - order + 1))
            if r:  # (sacrebleu counts a hypothesis's n-grams only where the reference has some)
                hyp_total[order - 1] += sum(h.values())
            ref_total[order - 1] += sum(r.values())
            matches[order - 1] += sum(min(c, r[g]) for g, c in h.items())
    orders = [i for i in range(n) if hyp_total[i] and ref_total[i]]
    if not orders:
        return 0.0
    precision = sum(matches[i] / hyp_total[i] for i in orders) / len(orders)
    recall = sum(matches[i] / ref_total[i] for i in orders) / len(orders)
    if precision + recall == 0:
        return 0.0
    b2 = float(beta) * float(beta)  # a tiny beta rounds b2 to 0 (F = P): fine
    if b2 > 1e100:  # a huge beta: the same F divided by b2, which tends to R (no overflow)
        inv = (1 / float(beta)) ** 2
        return 100 * (1 + inv) * precision * recall / (precision + inv * recall)
    return 100 * (1 + b2) * precision * recall / (b2 * precision + recall)


#: The decoders of the chapter's table: name -> keyword arguments of :func:`translate`.
DECODERS: dict[str, dict] = {
    "greedy": {},
    **{f"beam {k}": {"k": k, "length_penalty": 0.0} for k in (1, 2, 4, 8)},
    **{f"beam {k}, normalized": {"k": k, "length_penalty": 1.0} for k in (1, 2, 4, 8)},
}


def evaluate(model: Seq2SeqTransformer, tokenizer: TranslationTokenizer, data: Sequence[tuple[str, str]],
             decoders: dict[str, dict] | None = None) -> dict[str, dict[str, float]]:
    """Exact match (in %) and chrF of each decoder on ``data``: ``{name: {"exact": .., "chrf": ..}}``.

    Shapes:
        a list of (source, reference) pairs -> a dict of dicts of floats.
    """
    decoders = DECODERS if decoders is None else decoders
    if not isinstance(decoders, dict) or not all(isinstance(v, dict) for v in decoders.values()):
        raise TypeError("`decoders` must map names to keyword arguments of translate(), e.g. {'beam 4': {'k': 4}}")
    known = ("k", "length_penalty", "max_new_tokens", "batch_size")
    for name, kwargs in decoders.items():
        unknown = sorted(set(kwargs) - set(known))
        if unknown:
            raise ValueError(f"`decoders[{name!r}]` names {unknown}, which translate() does not take; its keyword "
                             f"arguments are {', '.join(known)}")
    if isinstance(data, (str, bytes)) or not hasattr(data, "__len__") or len(data) == 0:
        raise ValueError("`data` must be a non-empty list of (source, reference) pairs")
    _check_pairs("data", data, "reference")
    sources, refs = [s for s, _ in data], [r for _, r in data]
    table = {}
    for name, kwargs in decoders.items():
        hyps = translate(model, tokenizer, sources, **kwargs)
        table[name] = {"exact": 100 * exact_match(hyps, refs), "chrf": chrf(hyps, refs)}
    return table


def format_table(tables: dict[str, dict[str, dict[str, float]]]) -> str:
    """One line per decoder, exact match and chrF of each test set side by side (<= 78 columns)."""
    names = list(tables)
    head = f"{'decoder':<20}" + "".join(f"{n[:18]:>20}" for n in names)
    sub = f"{'':<20}" + "".join(f"{'exact %':>11}{'chrF':>9}" for _ in names)
    lines = [head, sub]
    first = next(iter(tables.values()))
    for dec in [d for d in DECODERS if d in first] + [d for d in first if d not in DECODERS]:
        lines.append(f"{dec:<20}" + "".join(f"{tables[n][dec]['exact']:>11.1f}{tables[n][dec]['chrf']:>9.1f}"
                                             for n in names))
    return "\n".join(lines)


def shipped_model_path():
    """Path of the shipped chapter 9 model; load it with ``companion.checkpoint.load_checkpoint``."""
    from companion.data import asset_path

    return asset_path(SHIPPED_MODEL)


# --------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    """``python -m companion.translation train|evaluate ...`` (see ``--help``)."""
    from companion.checkpoint import check_output_path, load_checkpoint, save_checkpoint

    parser = argparse.ArgumentParser(prog="python -m companion.translation",
                                     description="Train or evaluate the chapter 9 English-to-German number model.")
    sub = parser.add_subparsers(dest="command", required=True)
    p_train = sub.add_parser("train", help="train a model and save it (with its scores) to a checkpoint")
    p_train.add_argument("--steps", type=int, default=TRAIN_CONFIG.max_steps)
    p_train.add_argument("--threads", type=int, default=None, help="torch threads (default: leave as is)")
    p_train.add_argument("--seed", type=int, default=TRAIN_CONFIG.seed)
    p_train.add_argument("--out", required=True, help="the checkpoint to write (.safetensors)")
    p_train.add_argument("--no-eval", action="store_true", help="skip the table of decoders after training")
    p_eval = sub.add_parser("evaluate", help="print exact match and chrF of every decoder on the held-out sets")
    p_eval.add_argument("checkpoint")
    p_eval.add_argument("--threads", type=int, default=None)
    p_eval.add_argument("--write", action="store_true", help="store the table in the checkpoint's info")
    p_eval.add_argument("--sets", nargs="+", choices=["test", "unseen"], default=["test", "unseen"],
                        help="which held-out sets to score (default both)")
    args = parser.parse_args(argv)

    def refuse(message: str) -> int:  # one line on stderr, exit status 1, no traceback
        raise SystemExit(f"{parser.prog} {args.command}: error: {message}")

    # Every argument is checked here, before training or evaluating (an hour on one thread).
    if args.threads is not None and args.threads < 1:
        return refuse(f"--threads must be an integer >= 1 (got {args.threads})")
    if args.command == "train":
        if args.steps < 1:
            return refuse(f"--steps must be an integer >= 1 (got {args.steps})")
        if args.seed < 0:
            return refuse(f"--seed must be an integer >= 0 (got {args.seed})")
        try:
            check_output_path(args.out, "--out")
        except (TypeError, ValueError) as exc:
            return refuse(str(exc).replace("`--out`", "--out"))
    else:
        try:
            loaded = load_checkpoint(args.checkpoint)
        except (OSError, ValueError, TypeError) as exc:  # missing, damaged, or not a checkpoint
            return refuse(str(exc))
        if not isinstance(loaded[0], Seq2SeqTransformer):
            return refuse(f"{args.checkpoint} holds a {type(loaded[0]).__name__}, not the translation model "
                          "(a Seq2SeqTransformer); chapter 9's is companion/assets/" + SHIPPED_MODEL)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    splits = number_splits()
    held_out = {"test": pairs(splits.test), "unseen endings": pairs(splits.unseen_endings)}
    if args.command == "train":
        data = pairs(splits.train)
        tokenizer = TranslationTokenizer.from_texts([t for p in data for t in p])
        cfg = replace(TRAIN_CONFIG, max_steps=args.steps, seed=args.seed)
        torch.manual_seed(cfg.seed)
        model = Seq2SeqTransformer(Seq2SeqConfig(vocab_size=tokenizer.vocab_size, pad_id=tokenizer.pad_id,
                                                 **MODEL_CONFIG))
        print(f"{len(data)} training pairs, {model.num_parameters():,} parameters, {cfg.max_steps} steps")
        history = train(model, tokenizer, data, cfg, valid=pairs(splits.valid), progress=True)
        print(f"trained in {history.seconds:.0f} s on {torch.get_num_threads()} thread(s); "
              f"validation loss {history.valid_loss[-1]:.4f} nats/token")
        info = {"command": "python -m companion.translation " + " ".join(argv if argv is not None else sys.argv[1:]),
                "steps": cfg.max_steps, "seconds": round(history.seconds), "threads": torch.get_num_threads(),
                "train_config": asdict(cfg), "valid_loss": round(history.valid_loss[-1], 4),
                "train_loss_curve": [round(sum(history.train_loss[i:i + 50]) / len(history.train_loss[i:i + 50]), 4)
                                     for i in range(0, len(history.train_loss), 50)],
                "valid_curve": {"steps": history.eval_steps, "loss": [round(x, 4) for x in history.valid_loss]}}
        if not args.no_eval:
            start = time.perf_counter()
            info["scores"] = {name: evaluate(model, tokenizer, data_) for name, data_ in held_out.items()}
            info["eval_seconds"] = {"test unseen": round(time.perf_counter() - start)}
            print(format_table(info["scores"]))
        save_checkpoint(args.out, model, tokenizer, info=info)
        print(f"saved {args.out}")
        return 0
    model, tokenizer, _ = loaded
    start = time.perf_counter()
    names = {"test": "test", "unseen": "unseen endings"}
    scores = {names[key]: evaluate(model, tokenizer, held_out[names[key]]) for key in args.sets}
    print(format_table(scores))
    if args.write:
        _, _, extra = load_checkpoint(args.checkpoint)  # read again: another set may have been stored meanwhile
        info = dict(extra["info"])
        info["scores"] = {**info.get("scores", {}), **scores}
        info.setdefault("eval_seconds", {})[" ".join(args.sets)] = round(time.perf_counter() - start)
        info["eval_threads"] = torch.get_num_threads()
        info["eval_command"] = "python -m companion.translation evaluate CHECKPOINT --threads 1"
        save_checkpoint(args.checkpoint, model, tokenizer, info=info)
        print(f"stored the scores in {args.checkpoint}")
    return 0


if __name__ == "__main__":
    # Run the imported module's main, so that the tokenizer saved in the checkpoint is
    # companion.translation.TranslationTokenizer, not a class of __main__.
    from companion.translation import main as _main

    raise SystemExit(_main())
