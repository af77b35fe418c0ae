"""Checkers for chapter 8, decoding and beam search.

* Exercise 8.1 :func:`greedy_step` — append the most probable next token;
* Exercise 8.2 :func:`beam_step` — one step of beam search from probabilities;
* Exercise 8.3 :func:`length_ranking` — rank finished hypotheses with length normalization;
* Exercise 8.4 :func:`top_k_filter` — keep the k largest logits.
"""
from __future__ import annotations

import math

import torch

from ._core import checker, close, hint, passed

__all__ = ["greedy_step", "beam_step", "length_ranking", "top_k_filter"]


# ------------------------------------------------------------------------------- Exercise 8.1
class _PositionLM:
    """A model whose logits differ at every position and in every row (to expose wrong indexing)."""

    def __init__(self, vocab_size: int = 6, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.E = torch.randn(vocab_size, vocab_size, generator=g)
        self.P = torch.randn(32, vocab_size, generator=g)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        return self.E[ids] + self.P[:T]  # (B, T, V)


@checker("Exercise 8.1")
def greedy_step(my_greedy_step) -> None:
    """``my_greedy_step(model, ids)``: ids (B, T) -> (B, T + 1) with the argmax token appended."""
    model = _PositionLM(seed=2)  # a seed where last, first, pooled and argmin all differ
    ids = torch.tensor([[0, 3, 1], [2, 2, 5], [4, 0, 0]])
    logits = model(ids)  # (B, T, V)
    expected = torch.cat([ids, logits[:, -1].argmax(-1, keepdim=True)], 1)
    got = my_greedy_step(model, ids.clone())
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor of token ids of shape (B, T + 1) = {tuple(expected.shape)} (got {type(got).__name__}).")
    if tuple(got.shape) == (ids.shape[0],) or tuple(got.shape) == (ids.shape[0], 1):
        hint("you returned only the new tokens: append them to `ids` with torch.cat(..., dim=1) so the result is (B, T + 1).")
    if tuple(got.shape) != tuple(expected.shape):
        hint(f"the result should have shape (B, T + 1) = {tuple(expected.shape)} (got {tuple(got.shape)}).")
    if torch.equal(got, expected):
        passed("the next token is the argmax of the last position's logits, for every row.")
    first = torch.cat([ids, logits[:, 0].argmax(-1, keepdim=True)], 1)
    if torch.equal(got, first):
        hint("you used the first position's logits; the prediction for the next token is at the last position, `logits[:, -1]`.")
    mean = torch.cat([ids, logits.mean(1).argmax(-1, keepdim=True)], 1)
    if torch.equal(got, mean) or torch.equal(got, torch.cat([ids, logits.sum(1).argmax(-1, keepdim=True)], 1)):
        hint("you pooled the logits over all positions; only the last position `logits[:, -1]` predicts the next token.")
    argmin = torch.cat([ids, logits[:, -1].argmin(-1, keepdim=True)], 1)
    if torch.equal(got, argmin):
        hint("you took the least probable token: greedy takes `argmax`, not `argmin`.")
    if not torch.equal(got[:, :-1], ids):
        hint("the first T columns must be the input `ids`, unchanged.")
    hint("the appended tokens are not the most probable ones: compute `logits = model(ids)` (B, T, V), then `logits[:, -1].argmax(dim=-1)` (over the vocabulary, per row).")


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
    return [(int(p), int(t), float(s)) for p, t, s in x]


def _same(a, b, tol=1e-5):
    return len(a) == len(b) and all(p == q and t == u and math.isclose(s, r, abs_tol=tol) for (p, t, s), (q, u, r) in zip(a, b))


@checker("Exercise 8.2")
def beam_step(my_beam_step) -> None:
    """``my_beam_step(beam_scores, next_probs, k, eos_id) -> (alive, finished)``, lists of (parent, token, score)."""
    beam_scores = torch.tensor([math.log(0.5), math.log(0.4)], dtype=torch.float64)
    next_probs = torch.tensor([[0.05, 0.25, 0.20, 0.50],   # beam 0 (yes): </s> (id 3) is likely
                               [0.05, 0.10, 0.80, 0.05]], dtype=torch.float64)  # beam 1 (ok): ok is strong
    cases = [(beam_scores, next_probs, 2, 3)]
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
        hint(f"for k={k}, eos_id={eos} the expected step is alive={[(p, t, round(s, 3)) for p, t, s in exp_alive]}, "
             f"finished={[(p, t, round(s, 3)) for p, t, s in exp_fin]}; you returned alive={[(p, t, round(s, 3)) for p, t, s in alive]}, "
             f"finished={[(p, t, round(s, 3)) for p, t, s in fin]}.")
    passed("summed log-probabilities, all candidates ranked together, and finished hypotheses set aside.")


# ------------------------------------------------------------------------------- Exercise 8.3
@checker("Exercise 8.3")
def length_ranking(my_length_ranking) -> None:
    """``my_length_ranking(scores, lengths, alpha) -> indices best first`` by ``score / length ** alpha``."""
    cases = [
        ([math.log(0.15), math.log(0.12), math.log(0.252), math.log(0.1)], [2, 3, 3, 1], 1.0),
        ([-2.0, -3.0, -4.5, -1.5], [4, 9, 12, 2], 0.7),
        ([-2.0, -3.0, -4.5, -1.5], [4, 9, 12, 2], 0.0),
        ([-5.0, -6.0, -1.0], [10, 20, 1], 1.0),
    ]
    for scores, lengths, alpha in cases:
        def order(key):
            return sorted(range(len(scores)), key=key)

        expected = order(lambda i: -scores[i] / lengths[i] ** alpha)
        got = my_length_ranking(list(scores), list(lengths), alpha)
        try:
            got = [int(i) for i in got]
        except Exception:
            hint(f"return the indices of the hypotheses as a list of ints, best first (got {got!r}).")
        if got == expected:
            continue
        if alpha != 0 and got == order(lambda i: -scores[i]):
            hint("you ranked by the raw summed log-probability: every extra token lowers it, so short hypotheses win. Divide by `length ** alpha` first.")
        if got == expected[::-1]:
            hint("that is the worst first: sort from the highest normalized score (closest to 0) down.")
        if alpha != 0 and got == order(lambda i: -scores[i] * lengths[i] ** alpha):
            hint("you multiplied by the length; normalization divides: `score / length ** alpha`.")
        if alpha not in (0, 1) and got == order(lambda i: -scores[i] / lengths[i]):
            hint("you divided by the length but forgot the exponent `alpha`: `score / length ** alpha`.")
        hint(f"for scores={[round(s, 3) for s in scores]}, lengths={lengths}, alpha={alpha} the ranking is {expected}, you returned {got}.")
    passed("normalized scores compare hypotheses of different lengths fairly (and alpha=0 gives back the raw ranking).")


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
            hint(f"return a tensor of the same shape as `logits` {tuple(logits.shape)} (got {getattr(got, 'shape', type(got).__name__)}).")
        if torch.equal(got, expected):
            continue
        if close(got, expected.softmax(-1)):
            hint("you returned probabilities; return the filtered *logits* (-inf outside the top k), the softmax comes later.")
        if torch.equal(got, logits.masked_fill(logits < kth, 0.0)):
            hint("you set the other logits to 0, but exp(0) = 1: those tokens still get probability. Use `float('-inf')`.")
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
        hint(f"with k={k}, each row should keep its {k} largest logits unchanged and set the others to -inf.")
    passed("each row keeps its k largest logits; the rest get probability exactly 0 after the softmax.")
