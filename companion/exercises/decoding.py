"""Checkers for chapter 8, decoding and beam search.

* Exercise 8.1 :func:`greedy_step` — append the most probable next token;
* Exercise 8.2 :func:`beam_step` — one step of beam search from probabilities;
* Exercise 8.3 :func:`length_ranking` — rank finished hypotheses with length normalization;
* Exercise 8.4 :func:`top_k_filter` — keep the k largest logits;
* Exercise 8.5 :func:`cached_attention` — one head's attention with a KV cache, by hand.
"""
from __future__ import annotations

import math

import torch

from ._core import checker, close, describe, first_difference, hint, passed, require_tensor

__all__ = ["greedy_step", "beam_step", "length_ranking", "top_k_filter", "cached_attention"]


# ------------------------------------------------------------------------------- Exercise 8.1
class _NearTieLM:
    """A model whose last position, in every row, has two top tokens only 0.001 apart.

    ``logits[b, t] = E[ids[b, t]] + P[t]`` with ``P[2] = 0``: the last of 3 positions' logits are a
    row of ``E``, in which two tokens are within 0.001 of each other and every other token is at
    least 3 lower. A sampler (at any temperature above 0.001) picks the runner-up with
    probability above 1/4 at each row; the other positions' logits differ (``P``), so that the
    first position, pooled logits or the argmin give other tokens.
    """

    def __init__(self, vocab_size: int = 8, T: int = 3, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        V = vocab_size
        self.E = -3.0 - 2.0 * torch.rand(V, V, generator=g)  # (V, V): every token well below the top two
        for row in range(V):
            top, second = torch.randperm(V, generator=g)[:2].tolist()
            self.E[row, top], self.E[row, second] = 0.0, -0.001
        self.P = 3.0 * torch.randn(T, V, generator=g)  # (T, V): other positions differ
        self.P[T - 1] = 0.0

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
            raise TypeError(f"the model takes integer ids of shape (B, T), got {describe(ids)}")
        B, T = ids.shape
        if T > self.P.shape[0]:
            raise ValueError(f"this model reads at most {self.P.shape[0]} positions (got {T})")
        return self.E[ids] + self.P[:T]  # (B, T, V); for T = 3 the last position is E[ids[:, -1]]


#: Calls of the student's greedy step on the same ids: a sampler differs from the argmax on one of
#: these 3 x 32 rows with probability above 1 - 0.74**96 > 1 - 1e-12.
_GREEDY_REPEATS, _GREEDY_ROWS = 3, 32


@checker("Exercise 8.1")
def greedy_step(my_greedy_step) -> None:
    """``my_greedy_step(model, ids)``: ids (B, T) -> (B, T + 1) with the argmax token appended."""
    model = _NearTieLM(seed=2)
    g = torch.Generator().manual_seed(81)
    ids = torch.randint(8, (_GREEDY_ROWS, 3), generator=g)
    logits = model(ids)  # (B, T, V)
    expected = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
    outs = []
    for _ in range(_GREEDY_REPEATS):
        got = require_tensor(my_greedy_step(model, ids.clone()),
                             f"a tensor of token ids of shape (B, T + 1) = {tuple(expected.shape)}")
        if tuple(got.shape) in ((ids.shape[0],), (ids.shape[0], 1)):
            hint("you returned only the new tokens: append them to `ids` with torch.cat(..., dim=1) so the "
                 "result is (B, T + 1).")
        if tuple(got.shape) != tuple(expected.shape):
            hint(f"the result should have shape (B, T + 1) = {tuple(expected.shape)} (got {tuple(got.shape)}).",
                 generic=True)
        if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool:
            hint(f"return integer token ids (dtype torch.long), got dtype {got.dtype}.")
        outs.append(got)
    if any(not torch.equal(o, outs[0]) for o in outs[1:]):
        hint("three calls on the same ids appended different tokens: your step samples. Greedy decoding "
             "is deterministic: take the most probable token, `logits[:, -1].argmax(dim=-1)`.")
    got = outs[0]
    if torch.equal(got.long(), expected):
        if got.dtype != ids.dtype:
            hint(f"the tokens are right, but the result has dtype {got.dtype}: keep the ids' dtype, {ids.dtype} "
                 "(a LongTensor: the model's embedding indexes with it). torch.cat of ids and argmax gives one.")
        passed("the next token is the argmax of the last position's logits, for every row.")
    if not torch.equal(got[:, :-1], ids):
        hint("the first T columns must be the input `ids`, unchanged.")
    new = got[:, -1]
    top2 = logits[:, -1].topk(2, dim=-1).indices  # (B, 2)
    if bool(((new[:, None] == top2).any(-1)).all()):
        hint("some rows got their second most probable token, not the most probable one: greedy takes "
             "the argmax of the last position's logits, `logits[:, -1].argmax(dim=-1)`.")
    if torch.equal(new, logits[:, 0].argmax(-1)):
        hint("you used the first position's logits; the prediction for the next token is at the last "
             "position, `logits[:, -1]`.")
    if torch.equal(new, logits.mean(1).argmax(-1)) or torch.equal(new, logits.sum(1).argmax(-1)):
        hint("you pooled the logits over all positions; only the last position `logits[:, -1]` predicts the next token.")
    if torch.equal(new, logits[:, -1].argmin(-1)):
        hint("you took the least probable token: greedy takes `argmax`, not `argmin`.")
    hint("the appended tokens are not the most probable ones: compute `logits = model(ids)` (B, T, V), then "
         "`logits[:, -1].argmax(dim=-1)` (over the vocabulary, per row).", generic=True)


# ------------------------------------------------------------------------------- Exercise 8.2
def _reference_beam_step(beam_scores, next_probs, k, eos_id, combine=None, per_beam=False, keep_eos=False, drop_finished=False):
    """The correct step and its classic mistakes (selected by the flags)."""
    n, V = next_probs.shape
    cand = combine(beam_scores, next_probs) if combine else beam_scores[:, None] + next_probs.log()  # (n, V)
    if per_beam:  # the best k of each beam, instead of the best k over all n x V
        order = [(float(cand[p, t]), p, t) for p in range(n) for t in cand[p].argsort(descending=True)[:k].tolist()]
    else:
        order = [(float(cand[p, t]), p, t) for p in range(n) for t in range(V)]
    order.sort(key=lambda x: -x[0])
    alive, finished = [], []
    for score, p, t in order:
        if len(alive) == k:
            break
        if t == eos_id and not keep_eos:
            if not drop_finished:
                finished.append((p, t, score))
        else:
            alive.append((p, t, score))
    return alive, finished


def _as_triples(x):
    if isinstance(x, (str, bytes, dict)) or not hasattr(x, "__iter__"):
        raise TypeError("not a list of triples")
    out = []
    for item in x:
        p, t, s = item
        if any(isinstance(v, (str, bytes, bool)) for v in (p, t, s)):
            raise TypeError("not numbers")
        p, t, s = int(p), int(t), float(s)
        if float(item[0]) != p or float(item[1]) != t:
            raise TypeError("parent and token must be whole numbers")
        out.append((p, t, s))
    return out


def _same(a, b, tol=1e-5):
    return len(a) == len(b) and all(p == q and t == u and math.isclose(s, r, abs_tol=tol) for (p, t, s), (q, u, r) in zip(a, b))


@checker("Exercise 8.2")
def beam_step(my_beam_step) -> None:
    """``my_beam_step(beam_scores, next_probs, k, eos_id) -> (alive, finished)``, lists of (parent, token, score)."""
    beam_scores = torch.tensor([math.log(0.5), math.log(0.4)], dtype=torch.float64)
    next_probs = torch.tensor([[0.05, 0.25, 0.20, 0.50],   # beam 0 (yes): </s> (id 3) is likely
                               [0.05, 0.10, 0.80, 0.05]], dtype=torch.float64)  # beam 1 (ok): ok is strong
    cases = [(beam_scores, next_probs, 2, 3)]
    # ranked: alive, end, end, alive: the second end candidate (rank 3, beyond the first k = 2) still
    # counts, because the beam is not full before it (a rule that looks at the first k only misses it)
    cases.append((torch.tensor([0.6, 0.4], dtype=torch.float64).log(),
                  torch.tensor([[0.35, 0.55, 0.10], [0.50, 0.05, 0.45]], dtype=torch.float64), 2, 0))
    g = torch.Generator().manual_seed(1)
    for n, V, k in ((3, 5, 3), (2, 6, 4)):
        cases.append((torch.randn(n, generator=g, dtype=torch.float64) - 2, torch.rand(n, V, generator=g, dtype=torch.float64).softmax(-1), k, 0))
    mistakes = [
        (dict(combine=lambda s, p: s[:, None] * p), "you multiplied the score by the probability: scores are log-probabilities, so add `log(p)`: `beam_scores[:, None] + next_probs.log()`."),
        (dict(combine=lambda s, p: s[:, None].exp() * p), "you multiplied probabilities: right in exact arithmetic, but the product of many probabilities underflows to 0 in floating point. Keep scores as summed log-probabilities: `beam_scores[:, None] + next_probs.log()`."),
        (dict(combine=lambda s, p: s[:, None] + p), "you added raw probabilities; add their logarithms: `beam_scores[:, None] + next_probs.log()`."),
        (dict(combine=lambda s, p: p.log().expand(len(s), -1).clone()), "the candidates' scores ignore the beams' own scores: add `beam_scores[:, None]` to the log-probabilities of the next token."),
        (dict(per_beam=True), "you chose the best tokens of each beam separately; beam search ranks all n x V candidates together (flatten them) and keeps the best k overall."),
        (dict(keep_eos=True), "a candidate that ends with `eos_id` must leave the beam (into `finished`), not stay alive to be extended."),
        (dict(drop_finished=True), "you dropped the hypotheses that end with `eos_id`: keep them in `finished` (they are often the best complete answers)."),
    ]
    for beam_scores, next_probs, k, eos in cases:
        exp_alive, exp_fin = _reference_beam_step(beam_scores, next_probs, k, eos)
        out = my_beam_step(beam_scores.clone(), next_probs.clone(), k, eos)
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            hint("return a pair `(alive, finished)`, each a list of `(parent, token, score)` tuples.")
        try:
            alive, fin = _as_triples(out[0]), _as_triples(out[1])
        except Exception:
            hint("`alive` and `finished` must be lists of `(parent, token, score)` triples (ints, ints, floats).")
        if _same(alive, exp_alive) and _same(fin, exp_fin):
            continue
        for flags, message in mistakes:
            wrong_alive, wrong_fin = _reference_beam_step(beam_scores, next_probs, k, eos, **flags)
            if _same(alive, wrong_alive, 1e-4) and _same(fin, wrong_fin, 1e-4):
                hint(message)
        if len(alive) > k:
            hint(f"`alive` must hold at most k={k} hypotheses (got {len(alive)}).")
        if [s for _, _, s in alive] != sorted((s for _, _, s in alive), reverse=True):
            hint("list `alive` best first (highest score first).")
        if sorted(alive) == sorted(exp_alive) and sorted(fin) == sorted(exp_fin):
            hint("the right hypotheses, but list each of `alive` and `finished` best first.")
        if [(p, t) for p, t, _ in alive] == [(p, t) for p, t, _ in exp_alive] and [(p, t) for p, t, _ in fin] == [
                (p, t) for p, t, _ in exp_fin]:
            hint("the right candidates in the right order, but their scores are wrong: each score is the "
                 "parent's score plus log(next_probs[parent, token]).")
        if [(t, p) for p, t, _ in alive] == [(p, t) for p, t, _ in exp_alive][: len(alive)] and alive:
            hint("parent and token are swapped: each tuple is (parent, token, score).")
        hint(f"for k={k}, eos_id={eos} the expected step is alive={[(p, t, round(s, 3)) for p, t, s in exp_alive]}, "
             f"finished={[(p, t, round(s, 3)) for p, t, s in exp_fin]}; you returned alive={[(p, t, round(s, 3)) for p, t, s in alive]}, "
             f"finished={[(p, t, round(s, 3)) for p, t, s in fin]}.", generic=True)
    passed("summed log-probabilities, all candidates ranked together, and finished hypotheses set aside.")


# ------------------------------------------------------------------------------- Exercise 8.3
def _as_indices(got, n: int) -> list[int] | None:
    """The student's ranking as a list of ints, or None when it is not one (never truncates 1.5 to 1)."""
    if isinstance(got, (str, bytes, dict)) or not hasattr(got, "__iter__"):
        return None
    if isinstance(got, torch.Tensor) and (got.dim() != 1 or got.is_floating_point()):
        return None
    out = []
    for i in got:
        if isinstance(i, (bool, float, str, bytes)) or (isinstance(i, torch.Tensor) and (i.is_floating_point() or i.numel() != 1)):
            return None
        try:
            out.append(int(i))
        except (TypeError, ValueError):
            return None
    return out


_LENGTH_CASES = [
    ([math.log(0.15), math.log(0.12), math.log(0.252), math.log(0.1)], [2, 3, 3, 1], 1.0),
    ([-2.0, -3.0, -4.5, -1.5], [4, 9, 12, 2], 0.7),
    ([-2.0, -3.0, -4.5, -1.5], [4, 9, 12, 2], 0.0),
    ([-5.0, -6.0, -1.0], [10, 20, 1], 1.0),
    ([-3.0, -3.3, -6.2, -1.0, -4.0], [3, 4, 10, 1, 20], 0.6),
    # tells the GNMT penalty ((5 + n) / 6) ** alpha apart from other penalties such as log(n + 1) ** alpha
    ([-3.44, -4.62, -8.44, -10.18, -8.0], [17, 1, 15, 8, 2], 0.8),
]


def _ranking(scores, lengths, key) -> list[int]:
    """Indices best first by ``key(score, length)`` (stable: ties keep their order)."""
    return sorted(range(len(scores)), key=lambda i: -key(scores[i], lengths[i]))


@checker("Exercise 8.3")
def length_ranking(my_length_ranking) -> None:
    """``my_length_ranking(scores, lengths, alpha) -> indices best first`` by ``score / length ** alpha``.

    A mistake is named only when it explains the student's answer on every case (and differs from
    the right answer on at least one), so that a hint never describes a mistake the student did
    not make.
    """
    answers = []
    for scores, lengths, alpha in _LENGTH_CASES:
        got = my_length_ranking(list(scores), list(lengths), alpha)
        ranking = _as_indices(got, len(scores))
        if ranking is None:
            if isinstance(got, (list, tuple)) and got and all(isinstance(v, float) for v in got):
                if sorted(got) == list(range(len(scores))):
                    hint(f"return the indices as a list of ints; you returned floats ({got}).")
                hint("you returned scores; return the indices of the hypotheses, best first "
                     "(sorted(range(len(scores)), key=...)).")
            hint(f"return the indices of the hypotheses as a list of ints, best first (got {describe(got)}).")
        if sorted(ranking) != list(range(len(scores))):
            hint(f"return every index 0..{len(scores) - 1} exactly once, best first (got {ranking}).")
        answers.append(ranking)
    expected = [_ranking(s, l, lambda x, n, a=a: x / n**a) for s, l, a in _LENGTH_CASES]
    if answers == expected:
        passed("normalized scores compare hypotheses of different lengths fairly (and alpha=0 gives back the raw ranking).")
    mistakes = [
        (lambda x, n, a: x, "you ranked by the raw summed log-probability: every extra token lowers it, so "
                            "short hypotheses win. Divide by `length ** alpha` first."),
        (lambda x, n, a: -x / n**a, "that is the worst first: sort from the highest normalized score "
                                    "(closest to 0) down."),
        (lambda x, n, a: x * n**a, "you multiplied by the length; normalization divides: `score / length ** alpha`."),
        (lambda x, n, a: x / n, "you divided by the length but forgot the exponent `alpha`: `score / length ** alpha`."),
        (lambda x, n, a: x / ((5 + n) / 6) ** a, "that is the GNMT length penalty ((5 + length) / 6) ** alpha; "
                                                 "this exercise divides by `length ** alpha` itself."),
        (lambda x, n, a: x / (n * a) if a else x, "the exponent: `length ** alpha`, not `length * alpha`."),
        (lambda x, n, a: x / a**n if a else x, "base and exponent are swapped: `length ** alpha`, not `alpha ** length`."),
    ]
    for key, message in mistakes:
        wrong = [_ranking(s, l, lambda x, n, a=a, key=key: key(x, n, a)) for s, l, a in _LENGTH_CASES]
        if answers == wrong and wrong != expected:
            hint(message)
    for (scores, lengths, alpha), got, right in zip(_LENGTH_CASES, answers, expected):
        if got != right:
            hint(f"for scores={[round(s, 3) for s in scores]}, lengths={lengths}, alpha={alpha} the ranking is "
                 f"{right}, you returned {got}.", generic=True)


# ------------------------------------------------------------------------------- Exercise 8.4
@checker("Exercise 8.4")
def top_k_filter(my_top_k) -> None:
    """``my_top_k(logits, k)``: logits (B, V) -> (B, V), -inf outside each row's k largest."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 8, generator=g)
    logits[2] -= 5  # a row with much smaller logits: a batch-wide threshold would empty it
    for k in (1, 3, 8):
        kth = logits.topk(k, dim=-1).values[:, -1:]
        expected = logits.masked_fill(logits < kth, float("-inf"))
        got = my_top_k(logits.clone(), k)
        if not isinstance(got, torch.Tensor) or got.shape != logits.shape:
            if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor):
                hint("return one tensor, the filtered logits; torch.topk returns a pair (values, indices), "
                     "which is a means, not the answer.")
            hint(f"return a tensor of the same shape as `logits` {tuple(logits.shape)} (got "
                 f"{tuple(got.shape) if isinstance(got, torch.Tensor) else describe(got)}).")
        if torch.equal(got, expected):
            continue
        if close(got, expected.softmax(-1)):
            hint("you returned probabilities; return the filtered *logits* (-inf outside the top k), the softmax comes later.")
        if torch.equal(got, logits.masked_fill(logits < kth, 0.0)):
            hint("you set the other logits to 0, but exp(0) = 1: those tokens still get probability. Use `float('-inf')`.")
        finite = torch.isfinite(got) & torch.isfinite(expected)
        if (not got.is_complex() and bool(torch.isnan(got).any()) and bool(torch.isfinite(got[finite]).all())
                and torch.equal(got[finite], expected[finite])):
            hint("you filled the other logits with NaN: a softmax over a row with NaN is NaN everywhere. Use "
                 "`float('-inf')`, which gives them probability exactly 0.")
        if bool((torch.isfinite(expected) == (got > -1e3)).all()) and torch.equal(got[finite], expected[finite]) and k < 8:
            hint("use `float('-inf')` for the removed logits, not a large negative number: only -inf gives "
                 "them probability exactly 0 whatever the other logits are.")
        smallest = logits.topk(k, dim=-1, largest=False).values[:, -1:]
        if torch.equal(got, logits.masked_fill(logits > smallest, float("-inf"))):
            hint("you kept the k *smallest* logits; keep the k largest (`torch.topk` returns the largest by default).")
        kept = torch.isfinite(got).sum(-1)
        if k < 8 and (kept == k - 1).all():
            hint("one token too few: keep every logit >= the k-th largest (`logits < kth` is what to mask).")
        if k < 7 and (kept == k + 1).all():
            hint("one token too many: the threshold is the k-th largest value, `topk(k).values[..., -1:]`.")
        flat_kth = logits.flatten().topk(k).values[-1]
        if torch.equal(got, logits.masked_fill(logits < flat_kth, float("-inf"))):
            hint("you chose the top k over the whole batch; filter each row on its own (`topk(k, dim=-1)`, threshold of shape (B, 1)).")
        if torch.equal(got, logits.masked_fill(logits < logits.topk(k, dim=0).values[-1:], float("-inf"))):
            hint("you chose the top k of each column (dim=0); filter each row over the vocabulary: `topk(k, dim=-1)`.")
        if torch.equal(got, logits.sort(-1, descending=True).values.masked_fill(
                torch.arange(8) >= k, float("-inf"))):
            hint("keep each logit in its place (its token id): mask the others with -inf instead of sorting.")
        hint(f"with k={k}, each row should keep its {k} largest logits unchanged and set the others to -inf: "
             f"{first_difference(got, expected, 'logits')}.", generic=True)
    passed("each row keeps its k largest logits; the rest get probability exactly 0 after the softmax.")


# ------------------------------------------------------------------------------- Exercise 8.5
def _attend(q, k, v, scale=True):
    """One head's attention of the queries q (B, n, d) over the keys/values k, v (B, S, d)."""
    scores = q @ k.transpose(-2, -1)  # (B, n, d) @ (B, d, S) -> (B, n, S)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ v  # (B, n, S) @ (B, S, d) -> (B, n, d)


_CACHE_K = "cache['k']"


@checker("Exercise 8.5")
def cached_attention(my_cached_attention) -> None:
    """``my_cached_attention(q_new, k_new, v_new, cache)``: one head's attention for one new token.

    ``q_new``, ``k_new``, ``v_new`` are (B, 1, d); ``cache`` is a dict ``{"k": (B, t, d) or None,
    "v": ...}``. The function appends the new key and value to the cache (newest last, along the
    time dimension 1) and returns the new query's attention output (B, 1, d) over every cached
    position, itself included. The check runs it token by token from an empty cache and compares
    each output with full causal attention over the whole sequence, and the cache with the keys
    and values so far.
    """
    g = torch.Generator().manual_seed(85)
    B, T, d = 2, 5, 4
    q, k, v = (torch.randn(B, T, d, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T): query t sees keys 0..t
    scores = (q @ k.transpose(-2, -1) / math.sqrt(d)).masked_fill(~mask, float("-inf"))
    full = torch.softmax(scores, dim=-1) @ v  # (B, T, d): full causal attention, every position at once
    cache = {"k": None, "v": None}
    ambiguous = False
    for t in range(T):
        new = slice(t, t + 1)
        got = my_cached_attention(q[:, new].clone(), k[:, new].clone(), v[:, new].clone(), cache)
        if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor):
            hint("return only the attention output (B, 1, d), not a tuple.")
        got = require_tensor(got, "the attention output, a tensor of shape (B, 1, d)")
        weights = torch.softmax(q[:, new] @ k[:, : t + 1].transpose(-2, -1) / math.sqrt(d), dim=-1)  # (B, 1, t+1)
        if close(got, weights):
            hint("you returned the attention weights (B, 1, t); return the output, weights @ values (B, 1, d).")
        if not isinstance(cache, dict) or not isinstance(cache.get("k"), torch.Tensor) or not isinstance(
                cache.get("v"), torch.Tensor):
            hint("after the call the cache must hold the keys and values so far: store them in the dict you "
                 "were given, cache['k'] = ... and cache['v'] = ... (the first call starts from None).")
        ck, cv = cache["k"], cache["v"]
        if tuple(ck.shape) == (B, 1, d) and t >= 1:
            if torch.equal(ck, k[:, new]):
                hint("you replaced the cache with the new key and value; append them to what is there: "
                     "torch.cat([cache['k'], k_new], dim=1).")
        if tuple(ck.shape) != (B, t + 1, d) or tuple(cv.shape) != (B, t + 1, d):
            if tuple(ck.shape) == (B, t + 2, d):
                hint("the new key and value were appended twice; append them once per call.")
            if ck.dim() == 3 and (ck.shape[0] == B * (t + 1) or ck.shape[2] == d * (t + 1)):
                hint("concatenate along the time dimension, dim=1: the cache is (B, t, d).")
            hint(f"after {t + 1} call(s) the cache should hold keys and values of shape (B, t, d) = "
                 f"{(B, t + 1, d)}; cache['k'] has shape {tuple(ck.shape)}.", generic=True)
        if not close(ck, k[:, : t + 1]) or not close(cv, v[:, : t + 1]):
            if close(ck, k[:, : t + 1].flip(1)) and close(cv, v[:, : t + 1].flip(1)):
                hint("the cache is in the wrong order: append the new key last, "
                     "torch.cat([cache['k'], k_new], dim=1), so that position t is at index t.")
            if close(ck, v[:, : t + 1]) and close(cv, k[:, : t + 1]):
                hint("keys and values are swapped in the cache: cache['k'] holds the keys.")
            hint("the cache should hold the keys and values of every position so far, in order: "
                 f"{first_difference(ck, k[:, : t + 1], _CACHE_K)}.", generic=True)
        if tuple(got.shape) != (B, 1, d):
            hint(f"the output should have shape (B, 1, d) = {(B, 1, d)}, got {tuple(got.shape)}.", generic=True)
        if close(got, full[:, new]):
            continue
        both = [torch.cat([k[:, : t + 1], k[:, new]], 1), torch.cat([v[:, : t + 1], v[:, new]], 1)]
        mistakes = [
            (_attend(q[:, new], k[:, : t + 1], v[:, : t + 1], scale=False),
             "you forgot the scale: divide the scores by sqrt(d) before the softmax."),
            (_attend(q[:, new], *both), "the new key is attended twice: it is already in the cache after you "
                                        "append it; attend over the cache alone."),
            (v[:, : t + 1].sum(1, keepdim=True), "softmax over the wrong axis: each query's weights run over the "
                                                 "keys, the last dimension of the (B, 1, t) scores."),
        ]
        if t >= 1:
            mistakes += [
                (_attend(q[:, new], k[:, :t], v[:, :t]),
                 "the new token does not see itself: append its key and value to the cache first, then attend "
                 "over everything in it."),
                (v[:, new], "the new query attends only to its own key: attend over every cached key, "
                            "torch.cat([cache['k'], k_new], dim=1)."),
                (_attend(q[:, new], k[:, 1: t + 1], v[:, 1: t + 1]),
                 "position 0 is missing from the keys and values you attend over: attend over the whole "
                 "cache, cache['k'] and cache['v'] with every position from 0."),
                (_attend(q[:, new], k[:, :1], v[:, :1]),
                 "the new token sees only position 0: a causal mask built with tril() on the (1, t) scores of "
                 "one query keeps only the first column. The new token may see every cached key, itself "
                 "included, so it needs no mask."),
            ]
        matched = list(dict.fromkeys(message for wrong, message in mistakes if close(got, wrong)))
        if len(matched) == 1:
            hint(matched[0])
        if len(matched) > 1 and t < T - 1:
            ambiguous = True  # several mistakes give this output at this step: the next step tells them apart
            continue
        hint(f"at step {t} the output differs from causal attention over positions 0..{t}: "
             f"{first_difference(got, full[:, new])}.", generic=True)
    if ambiguous:
        hint("the outputs differ from causal attention over the cached positions at an early step: "
             "append the new key and value, then attend over every position in the cache.", generic=True)
    passed("each new token appends its key and value and attends over the cache: the same outputs as full "
           "causal attention, one token at a time.")
