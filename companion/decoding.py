"""Decoding: turning a language model's next-token distributions into text.

Every decoder here accepts any *model* that maps token ids ``(B, T)`` to logits ``(B, T, V)``:
a plain function, a :class:`TableLM` with explicit probabilities, the companion's
:class:`~companion.model.GPT` (whose ``(logits, loss)`` tuple is understood), or another
library's model wrapped in a function. When the model has ``new_cache()`` (the companion GPT),
the decoders use its KV cache: after the prompt, each step feeds only the newest token.

* :func:`greedy` — the most probable token at every step;
* :func:`sample` — a random token, with ``temperature``, ``top_k`` and ``top_p``, reproducible
  from a ``torch.Generator``; :func:`next_token_probs` is the distribution it samples from;
* :func:`beam_search` — the ``k`` best partial hypotheses, scored by their summed
  log-probabilities, with end of sequence, optional length normalization and a trace of every
  step (:func:`plot_beam_tree` draws it);
* :func:`sequence_log_prob` — the log-probability of a continuation, recomputed from scratch.

The prompt and the context window: a model sees at most ``context_length`` tokens (read from
``model.config.context_length`` or given as an argument). A longer prompt is **cropped**: the
model is given its last ``context_length`` tokens, and the returned sequences still hold the
whole prompt. When generation outgrows the window, the window jumps forward to hold the last
``refill_to`` tokens (default ``context_length``: an exact sliding window, so every step past the
window recomputes it all, as without a cache). A smaller ``refill_to`` keeps the cache useful
past the window: it is rebuilt from ``refill_to`` tokens once every
``context_length - refill_to + 1`` steps, and the model then sees between ``refill_to`` and
``context_length`` tokens. With or without the cache, the decoders give the same tokens.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from companion.validation import (
    as_token_ids,
    check_bool,
    check_float,
    check_generator,
    check_instance,
    check_int,
    check_logits,
    check_tensor,
    check_token_ids,
)

__all__ = [
    "TableLM",
    "yes_ok_model",
    "greedy",
    "sample",
    "filter_logits",
    "next_token_probs",
    "beam_search",
    "BeamSearchResult",
    "Hypothesis",
    "BeamStep",
    "sequence_log_prob",
    "penalize_repetitions",
    "ban_repeated_ngrams",
    "plot_beam_tree",
]

Model = Callable[..., Any]


# --------------------------------------------------------------------------------------------
# A toy language model with explicit probabilities
# --------------------------------------------------------------------------------------------
class TableLM:
    """A language model given by a table: ``prefix -> probabilities of the next token``.

    ``table`` maps a tuple of token ids (the whole sequence so far, prompt included) to ``V``
    probabilities. Prefixes missing from the table use ``default`` (for example "always end").
    Calling the model returns the log-probabilities as logits, so that a softmax gives the
    table's probabilities back exactly.

    Shapes:
        ``ids`` (B, T) -> logits (B, T, V)
    """

    def __init__(self, table: Mapping[tuple[int, ...], Sequence[float]], vocab_size: int,
                 default: Sequence[float] | None = None, itos: Sequence[str] | None = None):
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=1)
        self.itos = list(itos) if itos is not None else [str(i) for i in range(vocab_size)]
        if len(self.itos) != vocab_size:
            raise ValueError(f"`itos` must name each of the vocab_size={vocab_size} tokens (got {len(self.itos)} names)")
        self.stoi = {s: i for i, s in enumerate(self.itos)}
        check_instance("table", table, Mapping, "a dict from prefixes (tuples of ids) to probabilities")
        try:
            self.table = {tuple(int(i) for i in k): torch.as_tensor(v, dtype=torch.float64) for k, v in table.items()}
            self.default = None if default is None else torch.as_tensor(default, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as exc:
            raise TypeError(f"`table` must map tuples of token ids to lists of {vocab_size} probabilities, and "
                            f"`default` be such a list or None ({exc})") from None
        for key, probs in list(self.table.items()) + ([((), self.default)] if default is not None else []):
            if probs.shape != (vocab_size,) or not bool(torch.isfinite(probs).all()) or (probs < 0).any() \
                    or not math.isclose(float(probs.sum()), 1.0, abs_tol=1e-9):
                raise ValueError(f"each row of `table` must hold {vocab_size} probabilities summing to 1 (got {probs.tolist()} for prefix {key})")

    def probs(self, prefix: Sequence[int]) -> Tensor:
        """The next-token probabilities after ``prefix`` (float64, shape (V,))."""
        prefix = tuple(int(i) for i in prefix)
        if prefix in self.table:
            return self.table[prefix]
        if self.default is None:
            raise KeyError(f"prefix {prefix} is not in the table and there is no default")
        return self.default

    def __call__(self, ids: Tensor) -> Tensor:
        check_token_ids("ids", ids, self.vocab_size, shape=("B", "T"))
        B, T = ids.shape
        rows = [[self.probs(ids[b, : t + 1].tolist()) for t in range(T)] for b in range(B)]
        probs = torch.stack([torch.stack(r) for r in rows])  # (B, T, V)
        return probs.log().float()  # log 0 = -inf: that token is impossible

    def encode(self, words: str) -> list[int]:
        """Space-separated words -> ids."""
        check_instance("words", words, str, "a str of space-separated words")
        unknown = [w for w in words.split() if w not in self.stoi]
        if unknown:
            raise ValueError(f"`words` holds {unknown[0]!r}, which is not in the vocabulary {self.itos}")
        return [self.stoi[w] for w in words.split()]

    def decode(self, ids: Sequence[int] | Tensor) -> str:
        """Ids -> space-separated words."""
        ids = as_token_ids("ids", ids, ndims=(1,), empty_ok=True)
        check_token_ids("ids", ids, self.vocab_size)
        return " ".join(self.itos[int(i)] for i in ids)


def yes_ok_model() -> TableLM:
    """The chapter's toy model, where greedy decoding says "yes yes" but "ok ok" is more probable.

    Vocabulary: ``<s>`` (0, the prompt), ``yes`` (1), ``ok`` (2), ``</s>`` (3, end of sequence).
    After two words the model ends with probability 0.9 (0.8 after mixed words); after three it
    always ends. No two hypotheses of the same length tie, so every ranking is unambiguous. The probabilities of the first two steps are those of the chapter's figure::

        after <s>        : yes 0.5, ok 0.4, </s> 0.1
        after <s> yes    : yes 0.4, ok 0.3, </s> 0.3
        after <s> ok     : yes 0.2, ok 0.7, </s> 0.1
    """
    S, Y, O, E = 0, 1, 2, 3
    table = {
        (S,): [0, 0.5, 0.4, 0.1],
        (S, Y): [0, 0.4, 0.3, 0.3],
        (S, O): [0, 0.2, 0.7, 0.1],
        (S, Y, Y): [0, 0.06, 0.04, 0.9],
        (S, O, O): [0, 0.04, 0.06, 0.9],
        (S, Y, O): [0, 0.08, 0.12, 0.8],
        (S, O, Y): [0, 0.12, 0.08, 0.8],
    }
    return TableLM(table, vocab_size=4, default=[0, 0, 0, 1.0], itos=["<s>", "yes", "ok", "</s>"])


# --------------------------------------------------------------------------------------------
# Calling a model: validation, the context window and the KV cache
# --------------------------------------------------------------------------------------------
def _as_prompt(prompt: Any, device: torch.device) -> tuple[Tensor, bool]:
    """-> (ids (B, T) long on ``device``, was it one sequence). Raises on bad prompts."""
    ids = as_token_ids("prompt", prompt)
    single = ids.dim() == 1
    return (ids[None] if single else ids).to(device), single


def _vocab_size(model: Model) -> int | None:
    """The model's vocabulary size when it says (``config.vocab_size`` or ``vocab_size``)."""
    v = getattr(getattr(model, "config", None), "vocab_size", None)
    v = getattr(model, "vocab_size", None) if v is None else v
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _device(model: Model) -> torch.device:
    if isinstance(model, torch.nn.Module):
        for p in model.parameters():
            return p.device
    return torch.device("cpu")


def _context_length(model: Model, context_length: int | None) -> int | None:
    if context_length is not None:
        return check_int("context_length", context_length, minimum=1)
    context_length = getattr(getattr(model, "config", None), "context_length", None)
    if context_length is None:
        context_length = getattr(model, "context_length", None)
    if context_length is not None:
        check_int("context_length", context_length, minimum=1, hint="it was read from the model; pass context_length=... instead")
    return context_length


def _check_model(model: Any) -> None:
    """``model`` must map target ids to logits; an encoder-decoder needs its source first."""
    if callable(getattr(model, "conditioned_on", None)) and callable(getattr(model, "encode", None)):
        raise TypeError(f"`model` is an encoder-decoder ({type(model).__name__}): it needs a source to decode "
                        "from. Pass `model.conditioned_on(src)`, the language model p(y | x) of that source "
                        "(src of shape (B, S); one row serves any number of target rows, as in beam search)")
    if type(model).__module__ == "companion.mlm" and type(model).__name__ in ("EncoderLM", "EncoderClassifier"):
        raise TypeError(f"`model` is chapter 10's encoder ({type(model).__name__}): it sees both sides of a text and "
                        "fills in blanks ([MASK]); it does not predict the next token, so it cannot generate. "
                        "Decode with a causal model, such as chapter 7's GPT")
    if not callable(model):
        raise TypeError(f"`model` must be callable, mapping ids (B, T) to logits (B, T, V) (got "
                        f"{type(model).__name__})")


class _Runner:
    """Feeds growing sequences to a model and returns the logits for the next token.

    It holds the sequences ``seqs`` (B, L). With a cache, the first call feeds the (cropped)
    prompt and later calls feed only the newest token. When the sequence outgrows the window, the
    window jumps forward to its last ``refill_to`` tokens and the cache is rebuilt from them. The
    model always sees ``seqs[:, start:]``, with or without a cache, so both give the same logits.
    """

    def __init__(self, model: Model, seqs: Tensor, context_length: int | None, use_cache: bool | None,
                 refill_to: int | None = None):
        _check_model(model)
        if use_cache is not None:
            check_bool("use_cache", use_cache)
        has_cache = callable(getattr(model, "new_cache", None))
        if use_cache and not has_cache:
            raise ValueError("`use_cache=True` needs a model with a `new_cache()` method, such as companion.model.GPT (got "
                             f"{type(model).__name__}); leave use_cache=None to use a cache only when there is one")
        self.model, self.seqs, self.ctx = model, seqs, context_length
        self.use_cache = has_cache if use_cache is None else bool(use_cache)
        self.cache: Any = None
        self.vocab_size: int | None = None
        if refill_to is not None:
            if context_length is None:
                raise ValueError("`refill_to` needs a context length: the model has no `config.context_length`; pass `context_length`")
            check_int("refill_to", refill_to, minimum=1, maximum=context_length,
                      hint=f"at most context_length={context_length}")
        self.keep = context_length if refill_to is None else refill_to
        self.start = 0 if context_length is None else max(0, seqs.shape[1] - context_length)  # a long prompt is cropped

    def _call(self, ids: Tensor, cache: Any = None) -> Tensor:
        out = self.model(ids) if cache is None else self.model(ids, cache=cache)
        logits = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(logits, Tensor) or logits.dim() != 3 or logits.shape[:2] != ids.shape \
                or not logits.is_floating_point():
            got = f"{tuple(logits.shape)} {logits.dtype}" if isinstance(logits, Tensor) else type(logits).__name__
            raise TypeError(f"`model` must map ids (B, T) to floating-point logits (B, T, V) (fed shape "
                            f"{tuple(ids.shape)}, got {got})")
        return logits

    def next_logits(self) -> Tensor:
        """Logits (B, V) of the token after ``self.seqs``."""
        B, L = self.seqs.shape
        if self.ctx is not None and L - self.start > self.ctx:
            # The window is full. Learned positions cannot slide inside a cache: jump forward, rebuild.
            self.start, self.cache = L - self.keep, None
        window = self.seqs[:, self.start:]  # (B, <= ctx)
        if self.use_cache:
            if self.cache is None:
                self.cache = self.model.new_cache()
                logits = self._call(window, self.cache)  # (B, T_window, V): the whole window once
            else:
                logits = self._call(self.seqs[:, -1:], self.cache)  # (B, 1, V): only the new token
        else:
            logits = self._call(window)  # (B, T_window, V): everything, every step
        logits = logits[:, -1, :]
        check_logits("model", logits, what="the logits returned by `model` for the next token",
                     hint="a model's output must be finite (-inf marks an impossible token): check its weights")
        self.vocab_size = logits.shape[-1]
        return logits

    def append(self, tokens: Tensor, index: Tensor | None = None) -> None:
        """Keep rows ``index`` (beam search; may repeat rows) and append ``tokens`` (B',)."""
        if index is not None:
            self.seqs = self.seqs[index]
            if self.cache is not None:
                self.cache.reorder(index)
        self.seqs = torch.cat([self.seqs, tokens[:, None].to(self.seqs)], dim=1)  # (B', L + 1)


def _check_ids(ids: Tensor, V: int | None, eos_id: int | None) -> None:
    """The prompt's ids and ``eos_id`` must be token ids of a vocabulary of ``V`` (when known)."""
    if V is None:
        return
    if eos_id is not None:
        check_int("eos_id", eos_id, minimum=0, maximum=V - 1, hint=f"it must be a token id of the model's vocabulary (vocab_size={V})")
    check_token_ids("prompt", ids, V)


def _check_eos_type(eos_id: Any) -> None:
    if eos_id is not None:
        check_int("eos_id", eos_id, minimum=0, hint="it is the id of the end-of-sequence token, or None")


# --------------------------------------------------------------------------------------------
# Repetition controls (Hugging Face's `repetition_penalty` and `no_repeat_ngram_size`)
# --------------------------------------------------------------------------------------------
def penalize_repetitions(scores: Tensor, seqs: Tensor, penalty: float) -> Tensor:
    """The repetition penalty of CTRL (Keskar et al., 2019), as Hugging Face's ``repetition_penalty``.

    Every token that occurs in a sequence (its prompt included) has its score divided by
    ``penalty`` where the score is positive and multiplied by it where it is negative, once,
    however often the token occurs. ``penalty > 1`` makes repeating less likely, ``1`` changes
    nothing, below 1 makes it more likely. The greedy and sampling decoders apply it to the
    logits, beam search to the log-probabilities (which are negative: a factor of 1.3 there
    makes a repeated token's probability ``p ** 1.3``), as Hugging Face's ``generate()`` does.

    Shapes:
        ``scores`` (B, V), ``seqs`` (B, L) token ids -> (B, V)
    """
    seen = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, seqs, True)  # (B, V): in the sequence
    penalized = torch.where(scores < 0, scores * penalty, scores / penalty)
    return torch.where(seen, penalized, scores)


def ban_repeated_ngrams(scores: Tensor, seqs: Tensor, n: int) -> Tensor:
    """Forbid every token that would repeat an ``n``-gram, as Hugging Face's ``no_repeat_ngram_size``.

    A token gets the score ``-inf`` when it and the ``n - 1`` tokens before it (the end of the
    sequence, prompt included) already occur together somewhere in the sequence. ``n = 1``
    forbids every token already used. Nothing is forbidden before the sequence holds ``n - 1``
    tokens.

    Shapes:
        ``scores`` (B, V), ``seqs`` (B, L) token ids -> (B, V)
    """
    B, L = seqs.shape
    if L < n:
        return scores  # no n-gram is complete yet, so none can repeat
    grams = seqs.unfold(1, n, 1)  # (B, L - n + 1, n): every n-gram of the sequence
    prefix = seqs[:, L - n + 1:]  # (B, n - 1): the tokens a new n-gram would start with
    same = (grams[:, :, :-1] == prefix[:, None, :]).all(-1)  # (B, L - n + 1): n-grams continuing it
    hits = torch.zeros(scores.shape, dtype=torch.int32, device=scores.device)
    hits.scatter_add_(1, grams[:, :, -1], same.to(torch.int32))  # (B, V): how often each token completes one
    return scores.masked_fill(hits > 0, float("-inf"))


def _check_controls(repetition_penalty: Any, no_repeat_ngram_size: Any) -> tuple[float, int]:
    penalty = check_float("repetition_penalty", repetition_penalty, low=0.0, low_open=True,
                          hint="1.0 is no penalty; above 1 discourages repeating a token")
    n = check_int("no_repeat_ngram_size", no_repeat_ngram_size, minimum=0, hint="no_repeat_ngram_size=0 allows every repetition")
    return penalty, n


def _apply_controls(scores: Tensor, seqs: Tensor, penalty: float, n: int) -> Tensor:
    if penalty != 1.0:
        scores = penalize_repetitions(scores, seqs, penalty)
    if n:
        scores = ban_repeated_ngrams(scores, seqs, n)
    return scores


# --------------------------------------------------------------------------------------------
# Greedy decoding and sampling
# --------------------------------------------------------------------------------------------
@torch.no_grad()
def greedy(model: Model, prompt: Any, max_new_tokens: int, *, eos_id: int | None = None,
           context_length: int | None = None, use_cache: bool | None = None, refill_to: int | None = None,
           repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0) -> Tensor:
    """Append the most probable next token, ``max_new_tokens`` times (or until ``eos_id``).

    A sequence that has produced ``eos_id`` is padded with ``eos_id`` while the others go on;
    generation stops early when every sequence has ended. ``use_cache=None`` uses the model's KV
    cache when it has one. ``context_length`` and ``refill_to`` set the context window (see the
    module's docstring). Put a model with dropout in ``eval()`` mode first.

    Repetition controls, as Hugging Face's ``generate()`` arguments of the same names:
    ``repetition_penalty`` (:func:`penalize_repetitions`, applied to the logits) and
    ``no_repeat_ngram_size`` (:func:`ban_repeated_ngrams`); both look at the whole sequence,
    prompt included. A ValueError says so if they leave a sequence no token at all.

    Shapes:
        ``prompt`` (T,) or (B, T) -> (T + n,) or (B, T + n), n <= max_new_tokens new tokens.
    """
    return _generate(model, prompt, max_new_tokens, eos_id, context_length, use_cache, refill_to,
                     repetition_penalty, no_repeat_ngram_size, pick=lambda logits: logits.argmax(-1))


@torch.no_grad()
def sample(model: Model, prompt: Any, max_new_tokens: int, *, temperature: float = 1.0, top_k: int | None = None,
           top_p: float | None = None, generator: torch.Generator | None = None, eos_id: int | None = None,
           context_length: int | None = None, use_cache: bool | None = None, refill_to: int | None = None,
           repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0) -> Tensor:
    """Append tokens drawn from :func:`next_token_probs`, ``max_new_tokens`` times (or until ``eos_id``).

    The same ``generator`` state gives the same sample. End of sequence, cache, context window
    and repetition controls behave as in :func:`greedy`; the controls act on the logits before
    the temperature and the filters.

    Shapes:
        ``prompt`` (T,) or (B, T) -> (T + n,) or (B, T + n).
    """
    _check_filters(temperature, top_k, top_p)
    check_generator("generator", generator)

    def pick(logits: Tensor) -> Tensor:
        probs = next_token_probs(logits, temperature=temperature, top_k=top_k, top_p=top_p)  # (B, V)
        return torch.multinomial(probs.float().cpu(), 1, generator=generator)[:, 0].to(logits.device)

    return _generate(model, prompt, max_new_tokens, eos_id, context_length, use_cache, refill_to,
                     repetition_penalty, no_repeat_ngram_size, pick)


def _generate(model, prompt, max_new_tokens, eos_id, context_length, use_cache, refill_to,
              repetition_penalty, no_repeat_ngram_size, pick) -> Tensor:
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    _check_eos_type(eos_id)
    penalty, n = _check_controls(repetition_penalty, no_repeat_ngram_size)
    ids, single = _as_prompt(prompt, _device(model))
    _check_ids(ids, _vocab_size(model), eos_id)
    runner = _Runner(model, ids, _context_length(model, context_length), use_cache, refill_to)
    done = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)  # (B,)
    for step in range(max_new_tokens):
        logits = runner.next_logits()  # (B, V)
        if step == 0:
            _check_ids(ids, runner.vocab_size, eos_id)
        logits = _apply_controls(logits, runner.seqs, penalty, n)  # (B, V)
        if n and bool(((logits == float("-inf")).all(-1) & ~done).any()):
            row = int(((logits == float("-inf")).all(-1) & ~done).nonzero()[0])
            raise ValueError(f"`no_repeat_ngram_size`={n} leaves sequence {row} no token at step {step}: every "
                             "token would repeat an n-gram; use a larger no_repeat_ngram_size (or 0)")
        token = pick(logits)  # (B,)
        if eos_id is not None:
            token = torch.where(done, torch.full_like(token, eos_id), token)  # ended rows stay ended
            done = done | (token == eos_id)
        runner.append(token)
        if eos_id is not None and bool(done.all()):
            break
    return runner.seqs[0] if single else runner.seqs


def _check_filters(temperature: Any, top_k: Any, top_p: Any, logits: Any = None) -> None:
    """The sampling filters' arguments and, when given, the logits they act on."""
    check_float("temperature", temperature, low=0.0, low_open=True,
                hint="for the most probable token use greedy()")
    if top_k is not None:
        check_int("top_k", top_k, minimum=1, hint="use top_k=None to keep every token")
    if top_p is not None:
        check_float("top_p", top_p, low=0.0, high=1.0, low_open=True,
                    hint="use top_p=None or 1.0 to keep every token")
    if logits is not None:
        check_tensor("logits", logits, shape=("...", "V"), dtype="real")
        check_logits("logits", logits)
        check_logits("temperature", logits.float() / temperature,
                     what=f"the logits divided by `temperature`={temperature:g}",
                     hint="the temperature is too small: use greedy() for the most probable token")


def filter_logits(logits: Tensor, *, temperature: float = 1.0,
                  top_k: int | None = None,
                  top_p: float | None = None) -> Tensor:
    """Divide by ``temperature``, then set to ``-inf`` the tokens outside the
    top-k and the nucleus.

    Order: temperature, then top-k (keep the ``top_k`` largest), then top-p
    (keep the smallest set of most probable tokens whose probability sums to
    at least ``top_p``; the most probable token is always kept). Ties at the
    top-k boundary are all kept.

    Shapes:
        ``logits`` (..., V) -> (..., V)
    """
    _check_filters(temperature, top_k, top_p, logits)
    logits = logits.float() / temperature
    V = logits.shape[-1]
    if top_k is not None and top_k < V:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # the k-th largest
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        sorted_probs = sorted_logits.softmax(dim=-1)  # (..., V)
        # the mass of the tokens more probable than each one:
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs
        drop_sorted = mass_before >= top_p  # nucleus complete without it
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def next_token_probs(logits: Tensor, *, temperature: float = 1.0, top_k: int | None = None,
                     top_p: float | None = None) -> Tensor:
    """The distribution :func:`sample` draws from: ``softmax(filter_logits(logits, ...))``.

    Shapes:
        ``logits`` (..., V) -> probabilities (..., V), zero outside top-k and the nucleus.
    """
    return filter_logits(logits, temperature=temperature, top_k=top_k, top_p=top_p).softmax(dim=-1)


# --------------------------------------------------------------------------------------------
# Beam search
# --------------------------------------------------------------------------------------------
@dataclass
class Hypothesis:
    """One hypothesis: the whole sequence (prompt included) and its scores.

    ``score`` is the sum of the log-probabilities of the generated tokens (end of sequence
    included); ``normalized_score = score / n_generated ** length_penalty`` ranks the results.
    ``finished`` says whether it ended with ``eos_id`` (otherwise it reached ``max_new_tokens``).
    """

    tokens: Tensor
    score: float
    normalized_score: float
    finished: bool
    n_prompt: int

    @property
    def generated(self) -> Tensor:
        """The new tokens only, shape (n,)."""
        return self.tokens[self.n_prompt:]


@dataclass
class BeamStep:
    """What beam search did at one step (the "show your work" trace).

    ``beams``: the generated tokens of each hypothesis that entered the step (a tuple each);
    ``beam_scores`` their scores; ``candidate_scores`` (n_beams, V): the score of every one-token
    extension; ``kept``: ``(parent, token, score, status)`` for the candidates examined, best
    first, with status ``"alive"`` (stays in the beam) or ``"finished"`` (ended with end of sequence).
    Every other candidate was pruned.
    """

    step: int
    beams: list[tuple[int, ...]]
    beam_scores: list[float]
    candidate_scores: Tensor
    kept: list[tuple[int, int, float, str]] = field(default_factory=list)


@dataclass
class BeamSearchResult:
    """The best hypotheses, best first, and (if asked) the trace of every step."""

    hypotheses: list[Hypothesis]
    trace: list[BeamStep] | None = None

    @property
    def best(self) -> Hypothesis:
        return self.hypotheses[0]

    def __getattr__(self, name: str) -> Any:
        # Only called for a missing attribute: a Hypothesis's attribute asked of the result.
        if name in _HYPOTHESIS_ATTRIBUTES:
            raise AttributeError(
                f"a BeamSearchResult has no `{name}`: it holds several hypotheses, best first. Use "
                f"result.best.{name} for the best one, or [h.{name} for h in result.hypotheses]")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


_HYPOTHESIS_ATTRIBUTES = frozenset({"tokens", "score", "normalized_score", "finished", "n_prompt", "generated"})


@torch.no_grad()
def beam_search(model: Model, prompt: Any, max_new_tokens: int, *, k: int, eos_id: int | None = None,
                length_penalty: float = 0.0, n_best: int | None = None, return_trace: bool = False,
                context_length: int | None = None, use_cache: bool | None = None,
                refill_to: int | None = None, repetition_penalty: float = 1.0,
                no_repeat_ngram_size: int = 0) -> BeamSearchResult:
    """Beam search of width ``k``: keep the ``k`` best partial hypotheses at every step.

    A hypothesis's score is the sum of the log-probabilities of its tokens. At each step, every
    beam is extended by every token in **one** batched forward pass, giving ``n_beams x V``
    candidates; in order of score, a candidate ending with ``eos_id`` is set aside as finished,
    any other joins the next beam, until the beam holds ``k`` hypotheses (candidates after that
    are pruned). The search stops after ``max_new_tokens`` steps (unfinished beams then compete
    too), when no beam is left, or, without length normalization, when no beam can still beat
    the ``n_best``-th finished hypothesis (scores only fall as tokens are added).

    Results are ranked by ``score / length ** length_penalty`` with ``length`` the number of
    generated tokens: ``0`` ranks by the raw sum (which favours short hypotheses), ``1`` by the
    average log-probability per token. Cache and context window behave as in :func:`greedy`.

    Repetition controls, as Hugging Face's ``generate()`` with ``num_beams``: they act on each
    step's log-probabilities before the beams are chosen, so the scores of the hypotheses and
    of the trace are then the *controlled* scores (a repeated token's log-probability times
    ``repetition_penalty``; ``-inf`` for an n-gram that ``no_repeat_ngram_size`` forbids), not
    log-probabilities of the model: :func:`sequence_log_prob` gives those. A beam whose every
    extension is forbidden stops there, as an unfinished hypothesis.

    Shapes:
        ``prompt`` (T,) (one prompt) -> ``n_best`` (default ``k``) hypotheses of length <= T + max_new_tokens.
    """
    k = check_int("k", k, minimum=1, hint="k is the beam width, the number of hypotheses kept")
    check_int("max_new_tokens", max_new_tokens, minimum=0)
    n_best = k if n_best is None else check_int("n_best", n_best, minimum=1)
    if n_best > k:
        raise ValueError(f"`n_best` must be at most the beam width k (got n_best={n_best}, k={k})")
    _check_eos_type(eos_id)
    length_penalty = check_float("length_penalty", length_penalty, hint="length_penalty=0 ranks by the summed log-probability")
    check_bool("return_trace", return_trace)
    penalty, n_gram = _check_controls(repetition_penalty, no_repeat_ngram_size)
    ids, single = _as_prompt(prompt, _device(model))
    if not single:
        raise ValueError(f"`prompt` must be one sequence of shape (T,) for beam search (got shape={tuple(ids.shape)}); "
                         "search each prompt on its own: [beam_search(model, p, ...) for p in prompts]")
    _check_ids(ids, _vocab_size(model), eos_id)
    T0 = ids.shape[1]
    runner = _Runner(model, ids, _context_length(model, context_length), use_cache, refill_to)

    def rank(score: float, length: int) -> float:
        return score / max(length, 1) ** length_penalty

    def make(seq: Tensor, score: float, finished: bool) -> Hypothesis:
        return Hypothesis(seq.clone(), score, rank(score, seq.shape[0] - T0), finished, T0)

    beam_scores = torch.zeros(1, dtype=torch.float64, device=ids.device)  # (n_beams,)
    finished: list[Hypothesis] = []
    trace: list[BeamStep] | None = [] if return_trace else None
    parents: list[int] = [0]  # the prompt is the one beam alive
    stopped_early = False
    for step in range(max_new_tokens):
        n_beams = beam_scores.shape[0]
        logits = runner.next_logits()  # (n_beams, V): all beams in one forward pass
        if step == 0:
            _check_ids(ids, runner.vocab_size, eos_id)
        V = logits.shape[-1]
        logp = _apply_controls(logits.double().log_softmax(dim=-1), runner.seqs, penalty, n_gram)  # (n_beams, V)
        cand = beam_scores[:, None] + logp  # (n_beams, V): log p summed
        if n_gram:  # a beam with no allowed extension ends here, unfinished
            for b in (cand == float("-inf")).all(-1).nonzero()[:, 0].tolist():
                finished.append(make(runner.seqs[b], float(beam_scores[b]), False))
        # At most n_beams candidates end, so the best k + n_beams hold k that go on.
        n_top = min(k + n_beams, n_beams * V)
        top_scores, top_flat = cand.flatten().topk(n_top)  # (n_top,)
        record = BeamStep(step, [tuple(s[T0:].tolist()) for s in runner.seqs], beam_scores.tolist(), cand.float().cpu()) if trace is not None else None
        parents, tokens, scores = [], [], []
        for score, flat in zip(top_scores.tolist(), top_flat.tolist()):
            if score == float("-inf") or len(parents) == k:
                break
            parent, token = divmod(flat, V)
            if eos_id is not None and token == eos_id:
                seq = torch.cat([runner.seqs[parent], torch.tensor([token], device=ids.device)])
                finished.append(make(seq, score, True))
                status = "finished"
            else:
                parents.append(parent)
                tokens.append(token)
                scores.append(score)
                status = "alive"
            if record is not None:
                record.kept.append((parent, token, score, status))
        if record is not None:
            trace.append(record)
        if not parents:
            break
        index = torch.tensor(parents, device=ids.device)
        runner.append(torch.tensor(tokens, device=ids.device), index=index)  # beams reordered, then extended
        beam_scores = torch.tensor(scores, dtype=torch.float64, device=ids.device)
        if length_penalty == 0 and len(finished) >= n_best:
            nth_best = sorted(h.score for h in finished)[-n_best]
            if scores[0] <= nth_best:  # every extension of every beam scores below it
                stopped_early = True
                break
    if parents and not stopped_early:  # max_new_tokens reached: the beams still alive compete as they are
        finished += [make(seq, s, False) for seq, s in zip(runner.seqs, beam_scores.tolist())]
    finished.sort(key=lambda h: h.normalized_score, reverse=True)
    return BeamSearchResult(finished[:n_best], trace)


def sequence_log_prob(model: Model, prompt: Any, continuation: Any, *, context_length: int | None = None) -> float:
    """``log p(continuation | prompt)`` = the sum of the log-probabilities of its tokens, from scratch.

    No cache: one forward pass over the whole sequence (or one per token beyond the context
    window, with the window cropped as the decoders do). Token ids are integers: a float or a
    2-D continuation is refused, never rounded or flattened.

    Shapes:
        ``prompt`` (T,), ``continuation`` (n,) -> a float.
    """
    _check_model(model)
    ids, single = _as_prompt(prompt, _device(model))
    if not single:
        raise ValueError(f"`prompt` must be one sequence of shape (T,) (got shape={tuple(ids.shape)})")
    cont = as_token_ids("continuation", continuation, ndims=(1,), empty_ok=True).to(ids.device)
    V = _vocab_size(model)
    if V is not None:
        check_token_ids("prompt", ids, V)
        check_token_ids("continuation", cont, V)
    if cont.numel() == 0:
        return 0.0  # log 1: the empty continuation is certain
    seq = torch.cat([ids[0], cont])  # (T + n,)
    T0, ctx = ids.shape[1], _context_length(model, context_length)
    runner = _Runner(model, seq[None], ctx, use_cache=False)
    what = "the logits returned by `model`"
    with torch.no_grad():
        if ctx is None or seq.shape[0] - 1 <= ctx:
            logits = runner._call(seq[None, :-1])[0]  # (T + n - 1, V)
            logits = check_logits("model", logits[T0 - 1:], what=what)  # (n, V): predictions of the continuation
            logp = logits.double().log_softmax(-1)
        else:
            logp = torch.stack([check_logits("model", runner._call(seq[None, max(0, t - ctx):t])[0, -1], what=what)
                                .double().log_softmax(-1) for t in range(T0, seq.shape[0])])  # (n, V)
    check_token_ids("prompt", ids, logp.shape[-1])
    check_token_ids("continuation", cont, logp.shape[-1])
    return float(logp.gather(-1, cont[:, None]).sum())


# --------------------------------------------------------------------------------------------
# Drawing the search tree
# --------------------------------------------------------------------------------------------
def plot_beam_tree(trace: Sequence[BeamStep], decode: Callable[[int], str] = str, *, ax: Any = None,
                   show_pruned: int = 2, best: Sequence[int] | None = None, fontsize: float = 8) -> Any:
    """Draw a beam-search trace as a tree: one column per step, one node per hypothesis.

    Nodes show the token, boxed in a monospace font (so that "," and "." stand out; give a
    ``decode`` that also makes spaces and new lines visible, such as "␣" and "⏎"), and the summed
    log-probability; alive beams are blue, finished hypotheses green, and for each beam the
    ``show_pruned`` best pruned extensions are grey. ``best`` (the generated tokens of the
    winner) is drawn in bold red. Returns the axes.

    Shapes:
        ``trace``: one BeamStep per step; ``best`` (n,) token ids; ``decode``: int -> str.
    """
    import matplotlib.pyplot as plt

    if isinstance(trace, BeamSearchResult):
        raise TypeError("`trace` must be the trace of a search, result.trace, not the BeamSearchResult itself "
                        "(search with return_trace=True)")
    if trace is None or isinstance(trace, (str, bytes)) or not all(isinstance(r, BeamStep) for r in trace):
        raise TypeError(f"`trace` must be a list of BeamStep, result.trace from beam_search(..., return_trace=True) "
                        f"(got {type(trace).__name__})")
    check_int("show_pruned", show_pruned, minimum=0)
    if not callable(decode):
        raise TypeError(f"`decode` must be a function from a token id to its text (got {type(decode).__name__})")
    if ax is None:
        _, ax = plt.subplots(figsize=(2.2 * (len(trace) + 1), 4))
    best_t = tuple(int(t) for t in best) if best is not None else None
    positions: dict[tuple[int, ...], tuple[float, float]] = {(): (0.0, 0.0)}
    ax.scatter([0], [0], s=60, color="black", zorder=3)
    ax.annotate("prompt", (0, 0), textcoords="offset points", xytext=(-6, 8), fontsize=fontsize, ha="right")
    for record in trace:
        x = record.step + 1
        nodes = []  # (prefix, token, score, status)
        kept_set = {(p, t) for p, t, _, _ in record.kept}
        for p, t, s, status in record.kept:
            nodes.append((record.beams[p], t, s, status))
        for p, beam in enumerate(record.beams):
            scores = record.candidate_scores[p]
            order = scores.argsort(descending=True).tolist()
            pruned = [t for t in order if (p, t) not in kept_set and scores[t] > float("-inf")][:show_pruned]
            nodes += [(beam, t, float(scores[t]), "pruned") for t in pruned]
        nodes.sort(key=lambda n: (-positions.get(n[0], (0, 0))[1], -n[2]))  # children below their parent's rank
        n = len(nodes)
        for i, (prefix, t, s, status) in enumerate(nodes):
            y = (n - 1) / 2 - i
            px, py = positions.get(prefix, (x - 1, 0.0))
            path = prefix + (t,)
            on_best = best_t is not None and path == best_t[: len(path)]
            color = {"alive": "tab:blue", "finished": "tab:green", "pruned": "0.7"}[status]
            ax.plot([px, x], [py, y], color="tab:red" if on_best else color, lw=2.5 if on_best else 1, zorder=1)
            ax.scatter([x], [y], s=40, color=color, zorder=2)
            text_style = dict(color="black" if status != "pruned" else "0.5",
                              fontweight="bold" if on_best else "normal", va="center")
            # The token in a box, in a monospace font, so that "," and "." are as visible as letters;
            # its score just right of the box.
            token = ax.annotate(str(decode(t)), (x, y), textcoords="offset points", xytext=(5, 7),
                                fontsize=fontsize + 1, family=["DejaVu Sans Mono", "DejaVu Sans"],
                                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="0.6", lw=0.6), **text_style)
            ax.annotate(f"{s:.2f}", (1, 0.5), xycoords=token, textcoords="offset points", xytext=(3, 0),
                        fontsize=fontsize, **text_style)
            if status == "alive":
                positions[path] = (x, y)
    ax.set_xlabel("step")
    ax.set_xticks(range(len(trace) + 1))
    ax.set_yticks([])
    for side in ("left", "right", "top"):
        ax.spines[side].set_visible(False)
    return ax
