"""Checkers for chapter 8, decoding and beam search.

* Exercise 8.1 :func:`greedy_step` — append the most probable next token;
* Exercise 8.2 :func:`beam_step` — one step of beam search from probabilities;
* Exercise 8.3 :func:`top_p_filter` — nucleus (top-p) filtering with Hugging Face's rule;
* Exercise 8.4 :func:`sample_loop` — a sampling loop with temperature, top-k and top-p;
* Exercise 8.5 :func:`cached_attention` — one head's attention with a KV cache, by hand;
* Exercise 8.6 :func:`cached_beam_search` — beam search on a GPT's KV cache, with ``reorder``.
* Exercise 8.7 :func:`beam_search_eos` — beam search with an end token and length normalization.
"""
from __future__ import annotations

import math
import random

import torch

from . import rules
from ._core import (StudentError, _answers_elsewhere, _one_branch_missing, checker, close, describe,
                    first_difference, hint, passed, require_tensor)

__all__ = ["greedy_step", "beam_step", "top_p_filter", "sample_loop", "cached_attention", "cached_beam_search",
           "beam_search_eos"]


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
def _hf_top_p(logits, top_p, min_tokens_to_keep=1):
    """Hugging Face's ``TopPLogitsWarper`` rule, written out here (the checker does not import
    transformers): sort ascending, remove a token when the probability of it and of every less
    probable token is at most ``1 - top_p``, keep the ``min_tokens_to_keep`` most probable. Ties:
    the smaller id counts as less probable (a stable sort; Hugging Face's sort is stable for
    ``V <= 16``, the sizes the checks use for ties). tests/test_exercises_decoding.py compares it
    with ``TopPLogitsWarper`` on random and tied logits."""
    sorted_logits, order = torch.sort(logits, dim=-1, descending=False, stable=True)
    # (B, V): mass of it and every less probable, in float64 whatever the input's dtype, so that the
    # reference's own rounding never decides a row (the checks keep every boundary they do not mean
    # to be exact at least 1e-4 away, which float32 resolves and bfloat16 or float16 do not)
    cumulative = sorted_logits.double().softmax(dim=-1).cumsum(dim=-1)
    remove = cumulative <= (1 - top_p)
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def _top_p_cases():
    """(logits (B, V), top_p, min_tokens_to_keep): random rows, a crossing token far from any
    boundary, exact boundaries (uniform rows: probabilities 1/4, sums exact in floating point),
    ties, min_tokens_to_keep > 1, rows already holding -inf (after top-k), a batch of rows of
    different scales (one threshold per row)."""
    g = torch.Generator().manual_seed(83)
    cases = [(torch.tensor([[1.0, 2.0, -1.0, 1.5]]).log_softmax(-1), 0.6, 1)]
    random = torch.randn(4, 10, generator=g) * 2
    random[1] += 7.0  # rows of different scales
    random[3] = random[3] * 0.2 - 3.0
    cases += [(random, 0.5, 1), (random, 0.9, 1), (random, 0.3, 1)]
    cases.append((torch.zeros(2, 4), 0.5, 1))  # the two most probable of four equal: ids 2, 3
    cases.append((torch.zeros(1, 8), 0.25, 1))  # 1/8 each: the nucleus is exactly 2 of the 8
    ties = torch.tensor([[1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 2.0, -1.0],
                         [0.0, 3.0, 0.0, 0.0, 3.0, 0.0, 1.0, 1.0]])
    cases += [(ties, 0.5, 1), (ties, 0.8, 1), (ties, 0.95, 1)]
    cases.append((random, 0.05, 3))  # min_tokens_to_keep: 3 kept though one token crosses 0.05
    cases.append((torch.zeros(1, 4), 0.5, 3))
    masked = torch.randn(3, 9, generator=g)
    masked[:, ::3] = float("-inf")  # tokens already removed by top-k
    cases += [(masked, 0.7, 1), (masked, 1.0, 1)]
    cases.append((torch.randn(5, 16, generator=g) * 1.5, 0.75, 2))
    near = _near_boundary_rows(0.7)  # the crossing token's tail mass 1e-3, 3e-4, 1e-4 from 1 - p
    cases += [(near, 0.7, 1), (near.float(), 0.7, 1)]
    # logits above 88: exp overflows float32 (a softmax by hand without the max shift gives inf / nan)
    cases.append((torch.randn(2, 10, generator=g) * 2 + torch.tensor([[95.0], [300.0]]), 0.5, 1))
    # ties among more than 16 tokens, where torch.sort without stable=True does not keep the id order
    wide = torch.zeros(2, 24)
    wide[1] = torch.randint(0, 3, (24,), generator=g).float()
    cases += [(wide, 0.5, 1), (wide, 0.8, 1)]
    return cases


def _near_boundary_rows(p, V=12):
    """(6, V) float64 logits whose crossing token (ascending, the 6th) has a tail mass of exactly
    ``1 - p + d`` for d = +-1e-3, +-3e-4, +-1e-4: float32 arithmetic (error ~1e-7) decides every row
    as float64 does, bfloat16 (~4e-3) and float16 (~5e-4) get some of them wrong."""
    g = torch.Generator().manual_seed(830)
    rows = []
    for d in (1e-3, 3e-4, 1e-4):
        for sign in (1, -1):
            w = (torch.rand(V, generator=g, dtype=torch.float64) + 0.5).sort().values
            j = V // 2
            probs = torch.cat([w[:j] / w[:j].sum() * (1 - p + sign * d), w[j:] / w[j:].sum() * (p - sign * d)])
            rows.append(probs.log() + 3.0 * torch.rand(1, generator=g, dtype=torch.float64))
    return torch.stack(rows)


def _top_p_desc(logits, top_p, min_keep, *, strict=True, ties_low_first=True):
    """The same filter written from the most probable token down, with its variants."""
    x = logits.flip(-1) if ties_low_first else logits
    probs, order = torch.sort(x.softmax(-1), dim=-1, descending=True, stable=True)
    before = probs.cumsum(-1) - probs  # mass strictly above each token
    remove = before >= top_p if strict else before > top_p
    remove[..., :min_keep] = False
    remove = remove.scatter(-1, order, remove)
    return x.masked_fill(remove, float("-inf")).flip(-1) if ties_low_first else x.masked_fill(remove, float("-inf"))


def _top_p_mistakes():
    """(hint, wrong filter (x, p, m) -> logits) for the usual mistakes. A hint is given only when its
    mistake explains the answers on every case (and so never names a mistake that was not made)."""
    inf = float("-inf")

    def desc_rule(op):  # from the most probable down, with ``op(cumulative, mass before, p)``
        def f(x, p, m):
            probs, order = torch.sort(x.softmax(-1), dim=-1, descending=True, stable=True)
            remove = op(probs.cumsum(-1), probs.cumsum(-1) - probs, p)
            remove[..., :m] = False
            return x.masked_fill(remove.scatter(-1, order, remove), inf)
        return f

    def asc_rule(op=torch.le, keep="top", softmax=True, stable=True):  # Hugging Face's way, with one change
        def f(x, p, m):
            s, o = torch.sort(x, dim=-1, stable=True) if stable else torch.sort(x, dim=-1)
            remove = op((s.softmax(-1) if softmax else s).cumsum(-1), 1 - p)
            if keep == "top":
                remove[..., -m:] = False
            elif keep == "bottom":
                remove[..., :m] = False
            return x.masked_fill(remove.scatter(-1, o, remove), inf)
        return f

    def min_keep_by_value(x, p, m):  # every token tied with the m-th largest logit is protected
        s, o = torch.sort(x, dim=-1, stable=True)
        remove = s.softmax(-1).cumsum(-1) <= 1 - p
        remove = remove.scatter(-1, o, remove) & (x < x.topk(m, dim=-1).values[..., -1:])
        return x.masked_fill(remove, inf)

    def low_precision(dtype):
        def f(x, p, m):
            s, o = torch.sort(x, dim=-1, stable=True)
            remove = s.to(dtype).softmax(-1).cumsum(-1) <= 1 - p
            remove[..., -m:] = False
            return x.masked_fill(remove.scatter(-1, o, remove), inf)
        return f

    def one_threshold(x, p, m):
        right = _hf_top_p(x, p, m)
        return x.masked_fill(x < right[0][torch.isfinite(right[0])].min(), inf)

    return [
        ("you removed the token that crosses top_p: the nucleus is the smallest set whose probability reaches "
         "top_p, so the token that takes the sum past top_p stays in it.", desc_rule(lambda c, b, p: c > p)),
        ("one token too many at an exact boundary: a token goes when the mass of it and of every less probable "
         "token is *at most* 1 - top_p (`<=`, not `<`).", asc_rule(torch.lt)),
        ("one token too many at an exact boundary: when the more probable tokens already hold exactly top_p, the "
         "nucleus is complete without the next one.", lambda x, p, m: _top_p_desc(x, p, m, strict=False)),
        ("one token too many at an exact boundary (when the more probable tokens already hold exactly top_p, the "
         "nucleus is complete without the next one), and ties broken the wrong way (among equal probabilities "
         "the smaller id counts as less probable, so it goes first).",
         lambda x, p, m: _top_p_desc(x, p, m, strict=False, ties_low_first=False)),
        ("ties broken the wrong way: among tokens of equal probability the one with the smaller id counts as "
         "less probable (Hugging Face's ascending sort), so it is the first to go.",
         lambda x, p, m: _top_p_desc(x, p, m, ties_low_first=False)),
        ("min_tokens_to_keep is ignored: that many of the most probable tokens always stay, whatever top_p.",
         asc_rule(keep="none")),
        ("min_tokens_to_keep protects the least probable tokens in your code: it must keep the most probable ones "
         "(the end of an ascending sort).", asc_rule(keep="bottom")),
        ("min_tokens_to_keep keeps every token tied with the m-th largest logit: it keeps exactly "
         "min_tokens_to_keep tokens, the last ones of the ascending (stable) sort, `remove[:, -min_tokens_to_keep:] "
         "= False`, ties included.", min_keep_by_value),
        ("ties among more than 16 tokens are not ordered by id: torch.sort without stable=True promises no order "
         "for equal values (it happens to keep it for small rows only). Sort with stable=True, so that the smaller "
         "id counts as less probable.", asc_rule(stable=False)),
        ("your probabilities are computed in bfloat16: a row whose nucleus boundary lies within 1e-3 of top_p "
         "gets the wrong tokens. Keep the softmax and its cumulative sum in the logits' dtype.",
         low_precision(torch.bfloat16)),
        ("your probabilities are computed in float16: a row whose nucleus boundary lies within 1e-4 of top_p "
         "gets the wrong tokens. Keep the softmax and its cumulative sum in the logits' dtype.",
         low_precision(torch.float16)),
        ("you summed the logits: the nucleus is defined by probabilities, softmax first, then the cumulative sum.",
         asc_rule(softmax=False)),
        ("you treated the batch as one distribution: each row is its own distribution, filter along the last "
         "dimension, row by row.", lambda x, p, m: _hf_top_p(x.reshape(1, -1), p, m).reshape(x.shape)),
        ("you filtered along dim=0, the batch: sort and softmax along the vocabulary, dim=-1.",
         lambda x, p, m: _hf_top_p(x.T.contiguous(), p, m).T),
        ("one threshold for the whole batch: each row needs its own nucleus.", one_threshold),
        ("you kept the tokens whose own probability is at least 1 - top_p: the rule is on the *sum* of the "
         "probabilities of the tokens, sorted.", lambda x, p, m: x.masked_fill(x.softmax(-1) < 1 - p, inf)),
    ]


def _wide_ties(x):
    """True for a row of more than 16 tokens holding equal finite logits (torch.sort without
    stable=True does not keep their order there)."""
    finite = x[torch.isfinite(x)]
    return x.shape[-1] > 16 and len(finite.unique()) < len(finite)


def _same_filter(a, b):
    return isinstance(a, torch.Tensor) and a.shape == b.shape and not a.is_complex() and bool(
        ((a == b) | (torch.isneginf(a) & torch.isneginf(b))).all())


class _Float64Watch(torch.overrides.TorchFunctionMode):
    """Notes whether any torch call made while it is active returned a float64 tensor."""

    def __init__(self):
        super().__init__()
        self.float64 = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                self.float64 = True
        return out


_FLOAT64_HINT = ("on float32 logits your code computes in float64 (.double(), dtype=torch.float64, or a float64 "
                 "tensor mixed in), which the exercise forbids: compute the probabilities in the logits' own dtype, "
                 "as Hugging Face's filter does, so that a row whose boundary lies within float32's rounding of "
                 "top_p is decided as there.")


def _source_float64(fn) -> bool:
    """The source converts to float64 (for the grader, where the calls run in another process)."""
    f = rules.facts(fn)
    return bool({"double", "float64"} & (set(f.attributes) | set(f.names)))


@checker("Exercise 8.3")
def top_p_filter(my_top_p) -> None:
    """``my_top_p(logits, top_p, min_tokens_to_keep=1)``: logits (B, V) -> (B, V), ``-inf``
    outside each row's nucleus, with Hugging Face's rule (``TopPLogitsWarper``): boundary,
    ties and ``min_tokens_to_keep`` exactly as there. Compared with :func:`_hf_top_p`."""
    cases, answers = _top_p_cases(), []
    for x, p, m in cases:
        watch64 = _Float64Watch()
        with rules.watch() as seen, watch64:
            got = my_top_p(x.clone(), p, m) if m != 1 else my_top_p(x.clone(), p)
        if x.dtype == torch.float32 and (watch64.float64 or rules.is_remote(my_top_p) and _source_float64(my_top_p)):
            hint(_FLOAT64_HINT)
        if seen.used_module("transformers"):
            hint("your code calls Hugging Face's transformers (its TopPLogitsWarper): the exercise is to write the "
                 "filter yourself, with torch.")
        if seen.used_module("companion.decoding"):
            hint("your code runs companion.decoding, the course's own filter (whose rule differs at ties and "
                 "ignores min_tokens_to_keep): the exercise is to write the filter yourself, with Hugging Face's "
                 "rule.")
        if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor):
            hint("return one tensor, the filtered logits, not a tuple (torch.sort returns a pair: values and "
                 "indices).")
        got = require_tensor(got, f"the filtered logits, a tensor of shape (B, V) = {tuple(x.shape)}")
        if tuple(got.shape) != tuple(x.shape):
            if tuple(got.shape) == (x.shape[1],) or x.shape[0] > 1 and tuple(got.shape) == (1, x.shape[1]):
                hint("you returned one row (V,): filter every row of the batch and keep its shape, (B, V).")
            hint(f"return the logits with the same shape as the input, (B, V) = {tuple(x.shape)} (got "
                 f"{tuple(got.shape)}).", generic=True)
        if got.is_complex() or not got.is_floating_point():
            hint(f"return floating-point logits, like the input (got dtype {got.dtype}).")
        if got.dtype != x.dtype:
            hint(f"the logits came back as {got.dtype} for an input of dtype {x.dtype}: the nucleus must stay "
                 "unchanged, so keep the input's dtype (filter `logits` itself, do not convert it).")
        answers.append(got)
    rights = [_hf_top_p(x, p, m) for x, p, m in cases]
    if all(_same_filter(got, right) for got, right in zip(answers, rights)):
        passed("the nucleus of every row, with Hugging Face's boundary (the crossing token stays), its ties and "
               "min_tokens_to_keep.")
    for message, wrong in _top_p_mistakes():
        # a mistake made with an unstable sort still gets its hint: rows of more than 16 tied tokens,
        # where such a sort scrambles ties, are left out, except for the unstable sort's own hint
        if all(_same_filter(got, wrong(x, p, m)) for got, (x, p, m) in zip(answers, cases)
               if "stable=True" in message or not _wide_ties(x)):
            hint(message)
    wrong_rows = [i for i, (got, right) in enumerate(zip(answers, rights)) if not _same_filter(got, right)]
    if all(float(cases[i][0].max()) > 88 for i in wrong_rows):
        hint("a row of large logits (above 88) goes wrong: exp overflows to inf there (and inf / inf is nan). "
             "Use torch.softmax, which subtracts each row's largest logit before exp.")
    for got, right, (x, p, m) in zip(answers, rights, cases):
        if _same_filter(got, right):
            continue
        keep = torch.isfinite(right)
        if close(got, right.softmax(-1)):
            hint("you returned probabilities: return the filtered *logits* (-inf outside the nucleus); the softmax "
                 "comes later.")
        same_kept = got.dtype == right.dtype and torch.equal(got[keep], right[keep])
        if same_kept and bool((got[~keep] == 0).all()) and not bool((x[~keep] == 0).all()):
            hint("you set the removed logits to 0, but exp(0) = 1: they keep some probability. Use float('-inf').")
        if same_kept and bool(torch.isnan(got[~keep]).all()):
            hint("you filled the removed logits with NaN: a softmax over a row with NaN is NaN everywhere. Use "
                 "float('-inf').")
        if same_kept and bool((torch.isfinite(got[~keep]) & (got[~keep] < -1e3)).all()):
            hint("use float('-inf') for the removed logits, not a large negative number: only -inf gives them "
                 "probability exactly 0.")
        already_sorted = any(torch.equal(x.sort(-1, descending=d).values, x) for d in (False, True))
        if not already_sorted and any(_same_filter(got, right.sort(-1, descending=d).values) for d in (False, True)):
            hint("keep each logit in its place (its token id): scatter the decisions back to vocabulary order "
                 "instead of returning the sorted logits.")
        if bool(torch.isfinite(got).sum(-1).eq(0).any()):
            hint("a row has no token left: the most probable token (and min_tokens_to_keep of them) always stays.")
        if torch.equal(torch.isfinite(got), keep):
            hint("the right tokens are kept, but their logits changed: return the kept logits unchanged.")
        hint(f"with top_p={p}, min_tokens_to_keep={m}: {first_difference(got, right, 'logits')}; the rule: sort "
             "the probabilities, remove a token when it and every less probable token hold at most 1 - top_p, "
             "keep the min_tokens_to_keep most probable.", generic=True)


# ------------------------------------------------------------------------------- Exercise 8.4
class _Proxy(torch.nn.Module):
    """What the student's loop is given: a model with ``config`` and ``__call__`` only (no
    ``generate``), counting its calls. A module whose counters are plain ints, so that the
    grader, which runs the student's code in another process, gets them back with the module."""

    def __init__(self, model):
        super().__init__()
        self.model, self.config, self.calls = model, model.config, 0
        self.eval()  # as the model given: a loop that calls model.train() shows in self.training

    def forward(self, ids, *args, **kwargs):
        self.calls += 1
        return self.model(ids, *args, **kwargs)


_TINY_GPTS: dict = {}


def _tiny_gpt(vocab_size, context_length, seed):
    """A small random GPT in float64 (so that sums of probabilities agree to 1e-15 whatever the
    order of the student's operations), built once per process."""
    key = (vocab_size, context_length, seed)
    if key not in _TINY_GPTS:
        from companion.model import GPT, GPTConfig  # the chapter's model (the student is given it)
        with torch.random.fork_rng():
            torch.manual_seed(seed)
            config = GPTConfig(vocab_size=vocab_size, context_length=context_length, d_model=16, n_layers=1,
                               n_heads=2, dropout=0.0)
            model = GPT(config).double().eval()
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(4.0)  # sharper distributions than at initialisation
        _TINY_GPTS[key] = model
    return _TINY_GPTS[key]


def _used_generator(seed):
    """A generator seeded with ``seed`` that has already drawn: its state is not its seed's, so that a
    loop that reseeds it (or torch's global generator) from ``initial_seed()`` draws other tokens."""
    g = torch.Generator().manual_seed(seed)
    torch.rand(3 + seed % 5, generator=g)
    return g


def _reference_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, seed=0, *, crop=True,
                      temperature_at="logits", order="k then p", position=-1, draw="multinomial", dtype=None,
                      append=True, generator=None):
    """The reference loop, and its variants (selected by the keyword arguments). It draws from
    ``generator`` (advanced in place) when given, else from :func:`_used_generator` ``(seed)``."""
    g = generator if generator is not None else _used_generator(seed)
    ctx = model.config.context_length
    with torch.no_grad():
        for _ in range(n):
            window = ids[:, -ctx:] if crop == True else ids[:, :ctx] if crop == "first" else ids  # noqa: E712
            logits = model(window)[0][:, position]  # (B, V)
            if temperature_at == "logits":
                logits = logits / temperature
            elif temperature_at == "times":
                logits = logits * temperature
            steps = {"k": lambda z: z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
                     if top_k is not None else z,
                     "p": lambda z: _hf_top_p(z, top_p) if top_p is not None else z}
            if order == "k then p":
                logits = steps["p"](steps["k"](logits))
            elif order == "p then k":
                logits = steps["k"](steps["p"](logits))
            elif order == "p before temperature":
                logits = steps["p"](steps["k"](logits * temperature)) / temperature
            elif order == "no k":
                logits = steps["p"](logits)
            elif order == "no p":
                logits = steps["k"](logits)
            elif order == "p keeps k":  # top_k passed to top-p as min_tokens_to_keep
                logits = steps["k"](logits)
                logits = _hf_top_p(logits, top_p, top_k or 1) if top_p is not None else logits
            probs = logits.softmax(-1)
            if dtype is not None:
                probs = probs.to(dtype)
            if draw == "argmax":
                new = probs.argmax(-1, keepdim=True)
            else:
                new = torch.multinomial(probs, 1, generator=g)  # (B, 1)
            ids = torch.cat([ids, new], dim=1) if append else new
    return ids


_OWN_DECODERS = ("the values may be right, but your code runs companion.decoding, the course's own decoders: the "
                 "exercise is to write the loop yourself (the model given is the only companion code to call).")


_SAMPLE_CASES = [  # (context length, B, T, n, temperature, top_k, top_p, seed): past the window of 8 (or 6)
    (8, 3, 3, 12, 0.7, None, None, 1),
    (8, 4, 2, 10, 1.6, 5, None, 2),
    (8, 3, 4, 9, 0.8, None, 0.6, 3),
    (8, 4, 3, 11, 1.3, 6, 0.7, 4),
    (6, 4, 2, 10, 0.9, 4, 0.75, 5),  # another window (a loop that hard-codes 8 goes wrong), a nucleus wider than top_k
]


@checker("Exercise 8.4", companion_given=True)
def sample_loop(my_sample) -> None:
    """``my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None)``:
    (B, T) -> (B, T + n). Compared token for token with :func:`_reference_sample` under the same
    seed (the exercise fixes the draw, ``torch.multinomial(probs, 1, generator=generator)`` once
    per step); the models are random GPTs whose windows (8, then 6) the loop outgrows. The generator
    handed over has already drawn (:func:`_used_generator`): the loop must draw from it as it is,
    advance it exactly as the reference does, and leave torch's global generator alone."""
    g = torch.Generator().manual_seed(840)
    suspects, deferred = None, None  # the variants that explain every wrong case so far; a generic hint
    for ctx, B, T, n, tau, top_k, top_p, seed in _SAMPLE_CASES:
        model = _tiny_gpt(11, ctx, seed=84 if ctx == 8 else 84 + ctx)
        ids = torch.randint(11, (B, T), generator=g)
        proxy = _Proxy(model)
        kwargs = dict(temperature=tau, top_k=top_k, top_p=top_p)
        generator = _used_generator(seed)
        global_state = torch.get_rng_state()
        try:
            with rules.watch() as seen:  # the model is the companion's; its decoders must not run
                got = my_sample(proxy, ids.clone(), n, generator=generator, **kwargs)
            if seen.used_module("companion.decoding"):
                hint(_OWN_DECODERS)
        except Exception as exc:  # the student's own error: name the common ones, else report it
            error = getattr(exc, "error", None)
            text = str(error)
            if isinstance(error, ValueError) and "longer than the model's context" in text:
                hint("the sequence outgrew the model's window: feed it only the last "
                     "model.config.context_length tokens, `ids[:, -model.config.context_length:]` (the result "
                     "still holds them all).")
            if isinstance(error, RuntimeError) and "probability tensor contains" in text:
                hint("torch.multinomial was given negative or infinite weights: you sampled from the logits. "
                     "Turn them into probabilities with a softmax first.")
            raise
        finally:
            reseeded = not torch.equal(torch.get_rng_state(), global_state)
            torch.set_rng_state(global_state)
            trained = proxy.training or model.training
            proxy.eval()  # the model is shared by every check: back to evaluation mode
        if trained:
            hint("your loop put the model in training mode (model.train()): dropout would then change its "
                 "predictions at random. Sampling runs the model as it is given, in evaluation mode.")
        if reseeded:
            hint("your loop changed torch's global random state (torch.manual_seed, or a draw without the "
                 "generator): draw only from the generator you are given, "
                 "torch.multinomial(probs, 1, generator=generator), and do not reseed anything.")
        got = require_tensor(got, f"token ids of shape (B, T + n) = {(B, T + n)}")
        if tuple(got.shape) != (B, T + n):
            if tuple(got.shape) == (B, n):
                hint("you returned only the new tokens: return the whole sequences, prompt included, (B, T + n).")
            if tuple(got.shape) in ((B, T + 1), (B, 1)):
                hint("only one token was added: append each new token to `ids` (ids = torch.cat([ids, new], "
                     "dim=1)) so that the next step sees it.")
            hint(f"the result should have shape (B, T + n) = {(B, T + n)} (got {tuple(got.shape)}).", generic=True)
        if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool:
            hint(f"return integer token ids (dtype torch.long), got dtype {got.dtype}.")
        if not torch.equal(got[:, :T], ids):
            hint("the first T columns must be the prompt `ids`, unchanged.")
        right_generator = _used_generator(seed)
        right = _reference_sample(model, ids, n, **kwargs, seed=seed, generator=right_generator)
        if torch.equal(got, right) or torch.equal(got, _reference_sample(model, ids, n, **kwargs, seed=seed,
                                                                          dtype=torch.float32)):
            if proxy.calls != n:
                hint(f"the model was called {proxy.calls} times for {n} tokens: one call per new token.")
            # (the grader runs the loop in another process, on a copy of the generator: not checked there)
            if not rules.is_remote(my_sample) and not torch.equal(generator.get_state(),
                                                                  right_generator.get_state()):
                hint("the tokens are right, but the generator you were given did not advance as one draw per step "
                     "advances it: draw exactly once per step, torch.multinomial(probs, 1, generator=generator), "
                     "and do not reseed or replace the generator.")
            continue
        restarted = _reference_sample(model, ids, n, **kwargs, generator=torch.Generator().manual_seed(seed))
        if torch.equal(got, restarted):
            hint("your tokens are those of a generator started afresh from its seed: the generator you are given "
                 "may have drawn before. Draw from it as it is, torch.multinomial(probs, 1, generator=generator), "
                 "without reseeding it (or torch) from generator.initial_seed().")
        again = my_sample(_Proxy(model), ids.clone(), n, generator=_used_generator(seed), **kwargs)
        torch.set_rng_state(global_state)
        if not torch.equal(again, got):
            hint("two runs with the same seeded generator gave different tokens: pass it to every draw, "
                 "torch.multinomial(probs, 1, generator=generator).")
        variants = [
            (dict(temperature_at="none"), "the temperature changes nothing in your samples: divide the *logits* by "
                                          "it, before the softmax (dividing the probabilities is undone by the "
                                          "normalization)."),
            (dict(temperature_at="times"), "you multiplied the logits by the temperature: divide them by it."),
            (dict(draw="argmax"), "you took the most probable token: sample it, "
                                  "torch.multinomial(probs, 1, generator=generator)."),
            (dict(crop="first"), "you kept the first context_length tokens: keep the *last* ones, "
                                 "ids[:, -model.config.context_length:]."),
            (dict(position=0), "you used the first position's logits: the next token is predicted at the last "
                               "position, logits[:, -1]."),
            (dict(order="p before temperature"), "top-p was applied before the temperature: divide by the "
                                                 "temperature first, then filter (the nucleus depends on it)."),
            (dict(order="p then k"), "your nucleus was measured before top-k (top-p applied first, or to the "
                                     "unfiltered distribution): apply top-k first, then top-p to the logits it "
                                     "returned, so that the nucleus is measured on probabilities renormalised over "
                                     "the tokens left."),
            (dict(order="no k"), "top_k has no effect: keep only the top_k largest logits when top_k is given."),
            (dict(order="p keeps k"), "top-p removes nothing after top-k in your loop: you passed top_k as "
                                      "my_top_p's min_tokens_to_keep, which then keeps every token top-k left. "
                                      "Call my_top_p(logits, top_p), with its default min_tokens_to_keep=1."),
            (dict(order="no p"), "top_p changed nothing in your samples: apply my_top_p(logits, top_p) to the "
                                 "logits top-k left, when top_p is given (with min_tokens_to_keep=1, its default)."),
        ]
        # a variant's hint only when it alone explains every case that went wrong so far (two variants
        # may draw the same tokens on one case; a later case tells them apart)
        matched = [message for flags, message in variants
                   if torch.equal(got, _reference_sample(model, ids, n, **kwargs, seed=seed, **flags))]
        suspects = matched if suspects is None else [m for m in suspects if m in matched]
        if len(suspects) == 1:
            hint(suspects[0])
        generic = (f"with temperature={tau}, top_k={top_k}, top_p={top_p} the tokens differ from the reference "
                   f"loop under the same seed: {first_difference(got, right, 'tokens')}. Each step: crop, last "
                   "position's logits / temperature, top-k, top-p, softmax, one torch.multinomial(probs, 1, "
                   "generator=generator) for the whole batch, append.")
        if len(suspects) > 1:
            deferred = deferred or generic
            continue
        hint(deferred or generic, generic=True)
    if deferred:  # the variants left explain every case: the first of them (they agree on all of them)
        hint(suspects[0]) if suspects else hint(deferred, generic=True)
    passed("temperature, top-k and top-p in the right order, one seeded draw per step, and a window that "
           "slides: the same tokens as the reference loop.")


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


# ------------------------------------------------------------------------------- Exercise 8.6
class _WatchedCache:
    """The GPT's cache, handed to the student: writes every ``reorder`` into its owner's log, and
    offers everything else the real cache has (``layers``, ...) as it is, so that code written for
    the GPT's cache runs on it unchanged."""

    def __init__(self, cache, owner):
        self._cache, self._owner = cache, owner

    def __getattr__(self, name):  # only for what is not defined here: the real cache's attributes
        if name.startswith("__") or name in ("_cache", "_owner"):
            raise AttributeError(name)
        return getattr(self._cache, name)

    def reorder(self, index):
        self._owner.note("reorder", ",".join(str(int(i)) for i in torch.as_tensor(index).flatten().tolist()))
        self._cache.reorder(index)

    def __len__(self):
        return len(self._cache)

    @property
    def batch_size(self):
        return self._cache.batch_size


class _CachedProxy(torch.nn.Module):
    """A GPT with ``config``, ``new_cache()`` and ``__call__``; logs the calls and what they fed.

    The log is one string (``"kind:detail;..."``): the grader runs the student's code in another
    process and copies a module's plain attributes back, so the log has to be plain data."""

    def __init__(self, model):
        super().__init__()
        self.model, self.config, self.log_text = model, model.config, ""

    def note(self, kind, detail=""):
        self.log_text += f"{kind}:{detail};"

    @property
    def log(self):
        """[(kind, detail)]: ("new_cache", None), ("call", ((B, T), cached)), ("reorder", [rows])."""
        out = []
        for entry in self.log_text.split(";")[:-1]:
            kind, _, detail = entry.partition(":")
            if kind == "call":
                b, t, cached = detail.split(",")
                out.append((kind, ((int(b), int(t)), cached == "1")))
            elif kind == "reorder":
                out.append((kind, [int(i) for i in detail.split(",") if i]))
            else:
                out.append((kind, None))
        return out

    def new_cache(self):
        self.note("new_cache")
        return _WatchedCache(self.model.new_cache(), self)

    def forward(self, ids, cache=None, **kwargs):
        shape = tuple(ids.shape) if ids.dim() == 2 else (1, ids.shape[-1])
        self.note("call", f"{shape[0]},{shape[1]},{int(cache is not None)}")
        inner = cache._cache if isinstance(cache, _WatchedCache) else cache
        return self.model(ids, cache=inner, **kwargs) if inner is not None else self.model(ids, **kwargs)


def _log_probs_of(model, seqs, T):
    """Summed log-probabilities of ``seqs[:, T:]`` given ``seqs[:, :T]``, from scratch (no cache)."""
    with torch.no_grad():
        logp = model(seqs[:, :-1])[0].log_softmax(-1)[:, T - 1:]  # (N, n, V)
    return logp.gather(-1, seqs[:, T:, None])[..., 0].sum(-1)  # (N,)


def _brute_force(model, prompt, n, k):
    """The exact k best continuations of n tokens: every one of the V**n scored without a cache."""
    import itertools
    V, T = model.config.vocab_size, prompt.shape[0]
    tails = torch.tensor(list(itertools.product(range(V), repeat=n)))  # (V**n, n)
    seqs = torch.cat([prompt.expand(len(tails), T), tails], 1)
    scores = _log_probs_of(model, seqs, T)
    best = scores.argsort(descending=True)[:k]
    return seqs[best], scores[best]


def _uncached_beam(model, prompt, n, k, *, per_beam=False, raw_logits=False, last_only=False):
    """Beam search without a cache (the whole sequences fed at every step), and its variants."""
    seqs, scores = prompt[None], torch.zeros(1, dtype=torch.float64)
    with torch.no_grad():
        for _ in range(n):
            logits = model(seqs)[0][:, -1]  # (n_beams, V)
            step = logits.double() if raw_logits else logits.double().log_softmax(-1)
            cand = (step if last_only else scores[:, None] + step)  # (n_beams, V)
            if per_beam and cand.shape[0] > 1:  # each beam extended by its own best token
                top_scores, best = cand.max(-1)
                order = top_scores.argsort(descending=True)
                top_scores, top_flat = top_scores[order], best[order] + order * cand.shape[1]
            else:
                top_scores, top_flat = cand.flatten().topk(min(k, cand.numel()))
            parents, tokens = top_flat // cand.shape[1], top_flat % cand.shape[1]
            seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
            scores = top_scores if not last_only else scores[parents] + step[parents, tokens]
    return seqs, scores


def _cached_no_reorder(model, prompt, n, k):
    """The usual mistake: k copies of the prompt in the cache (scores 0, -inf, ...), never reordered."""
    with torch.no_grad():
        cache = model.new_cache()
        logits = model(prompt[None].expand(k, -1), cache=cache)[0][:, -1]
        scores = torch.full((k,), float("-inf"), dtype=torch.float64)
        scores[0] = 0.0
        seqs = prompt[None].expand(k, -1)
        for step in range(n):
            cand = scores[:, None] + logits.double().log_softmax(-1)
            top_scores, top_flat = cand.flatten().topk(k)
            parents, tokens = top_flat // cand.shape[1], top_flat % cand.shape[1]
            seqs, scores = torch.cat([seqs[parents], tokens[:, None]], 1), top_scores
            if step < n - 1:
                logits = model(tokens[:, None], cache=cache)[0][:, -1]
    return seqs, scores


_BEAM_CASES = [  # (V, prompt length, n new tokens, k): k = V ** (n - 1) is exhaustive, k = 1 is greedy
    (5, 4, 5, 3),
    (5, 3, 3, 25),
    (5, 2, 4, 1),
    (5, 5, 6, 4),
    (7, 3, 4, 5),  # another vocabulary: code that hard-codes V = 5 goes wrong here
]


def _as_beams(out, k, T, n):
    """(seqs (k, T + n) long, scores (k,) float64) from the student's answer; hint otherwise."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint("return a pair `(seqs, scores)`: the k sequences (k, T + n), best first, and their scores (k,).")
    seqs, scores = out
    seqs = require_tensor(seqs, f"the sequences, token ids of shape (k, T + n) = {(k, T + n)}")
    if isinstance(scores, (list, tuple)):
        try:
            scores = torch.tensor([float(s) for s in scores], dtype=torch.float64)
        except (TypeError, ValueError):
            hint("`scores` must be a tensor (or list) of k floats, the summed log-probabilities.")
    scores = require_tensor(scores, "the scores, a tensor of shape (k,)")
    if tuple(seqs.shape) == (k, n):
        hint("you returned only the new tokens: return the whole sequences, prompt included, (k, T + n).")
    if tuple(seqs.shape) != (k, T + n):
        hint(f"the sequences should have shape (k, T + n) = {(k, T + n)} (got {tuple(seqs.shape)}).", generic=True)
    if seqs.is_floating_point() or seqs.is_complex() or seqs.dtype == torch.bool:
        hint(f"return the sequences as integer token ids (got dtype {seqs.dtype}).")
    if scores.numel() != k or scores.is_complex():
        hint(f"`scores` should hold k={k} numbers, one per sequence (got shape {tuple(scores.shape)}).")
    return seqs.long(), scores.reshape(-1).double()


@checker("Exercise 8.6", companion_given=True)
def cached_beam_search(my_beam_search) -> None:
    """``my_beam_search(model, prompt, n, k) -> (seqs, scores)``: beam search of width ``k`` for
    ``n`` new tokens on a GPT's KV cache (no end of sequence). Compared with brute force (every
    ``V ** n`` continuation scored without a cache, where ``k`` covers every prefix) and with beam
    search without a cache; the calls must feed the prompt once, then only the new tokens, and
    reorder the cache to the surviving beams."""
    g = torch.Generator().manual_seed(860)
    for V, T, n, k in _BEAM_CASES:
        model = _tiny_gpt(V, 16, seed=86 if V == 5 else 86 + V)
        prompt = torch.randint(V, (T,), generator=g)
        proxy = _CachedProxy(model)
        try:
            with rules.watch() as seen:  # the model is the companion's; its decoders must not run
                out = my_beam_search(proxy, prompt.clone(), n, k)
            if seen.used_module("companion.decoding"):
                hint(_OWN_DECODERS.replace("the loop", "the search"))
        except Exception as exc:
            error = getattr(exc, "error", None)
            if isinstance(error, ValueError) and "cache.reorder" in str(error) and not any(
                    e == "reorder" for e, _ in proxy.log):
                hint("the cache still holds the prompt's one row while you feed k beams: after choosing the "
                     "beams, call cache.reorder(parents) (the row of each new beam's parent), then feed their "
                     "new tokens.")
            if isinstance(error, RuntimeError) and "Sizes of tensors must match" in str(error) and not any(
                    e == "reorder" for e, _ in proxy.log):
                hint("the cache's rows do not match the beams you feed (its keys and values hold other rows than "
                     "your beams): after choosing the beams, call cache.reorder(parents), which reorders every "
                     "layer's keys and values together, then feed the new tokens.")
            raise
        seqs, scores = _as_beams(out, k, T, n)
        if not torch.equal(seqs[:, :T], prompt.expand(k, T)):
            hint("every sequence must start with the prompt, unchanged.")
        right_seqs, right_scores = (_brute_force(model, prompt, n, k) if k >= V ** (n - 1)
                                    else _uncached_beam(model, prompt, n, k))
        true_scores = _log_probs_of(model, seqs, T)  # what the student's sequences really score
        calls = [a for e, a in proxy.log if e == "call"]
        if not any(e == "new_cache" for e, _ in proxy.log) or not any(cached for _, cached in calls):
            hint("use the KV cache: cache = model.new_cache(), feed the prompt once with model(prompt[None], "
                 "cache=cache), then only the new tokens (n_beams, 1).")
        fed = [shape for shape, _ in calls]
        ok_tokens = torch.equal(seqs, right_seqs)
        ok_scores = close(scores, right_scores, rtol=1e-6, atol=1e-5)
        if ok_tokens and ok_scores:
            # n calls, or n + 1 when the tokens chosen at the last step are fed too (one call more than
            # needed, but right by the text, which does not forbid it)
            if fed[0] != (1, T) or any(shape[1] != 1 for shape in fed[1:]) or len(fed) not in (n, n + 1):
                hint(f"the beams are right, but the calls fed {fed}: feed the prompt once, (1, T), then only the "
                     "newest token of each beam, (n_beams, 1), once per step: that is what the cache is for.")
            continue
        variants = [
            (_uncached_beam(model, prompt, n, k, per_beam=True), "each beam was extended by its own best token "
             "(k greedy searches side by side): rank all n_beams x V candidates together (flatten) and keep the "
             "best k, so that a strong beam may continue twice and a weak one none."),
            (_uncached_beam(model, prompt, n, k, raw_logits=True), "you added raw logits: a candidate's score "
             "adds the log-probability of its token, logits.log_softmax(-1)."),
            (_uncached_beam(model, prompt, n, k, last_only=True), "the candidates were ranked by the last "
             "token's log-probability alone: add the parent beam's score, scores[:, None] + logp."),
        ]
        for (wrong_seqs, wrong_scores), message in variants:
            if torch.equal(seqs, wrong_seqs):
                hint(message)
        if close(scores, right_scores, rtol=1e-6, atol=1e-5) and not torch.equal(seqs, right_seqs):
            hint("the scores are right but the sequences are not: index the sequences by the parents too, "
                 "seqs = torch.cat([seqs[parents], tokens[:, None]], dim=1), as the cache is reordered.")
        if not close(scores, true_scores, rtol=1e-6, atol=1e-5):
            no_reorder = _cached_no_reorder(model, prompt, n, k)
            if not any(e == "reorder" for e, _ in proxy.log) or (
                    torch.equal(seqs, no_reorder[0]) and close(scores, no_reorder[1], rtol=1e-6, atol=1e-5)):
                hint("the scores you return are not those of the sequences you return: the cache's rows no longer "
                     "match the beams. After choosing them, call cache.reorder(parents), so that row b of the "
                     "cache holds the keys and values of beam b's parent, then feed the new tokens.")
            if close(scores, true_scores.exp(), rtol=1e-6) or bool((scores > 0).any()):
                hint("the scores should be summed log-probabilities (log_softmax), not probabilities or logits.")
            hint("the scores you return are not the summed log-probabilities of the sequences you return (scored "
                 "without a cache). Either the cache's rows do not follow the beams (once per step, before feeding "
                 "the new tokens, call cache.reorder(parents) with the parents in the order of the new beams, so "
                 "that row b holds beam b's parent), or the scores are not summed right (each is its parent's "
                 "score plus the log_softmax of its new token).")
        if close(scores, true_scores, rtol=1e-6, atol=1e-5) and bool((scores[1:] > scores[:-1] + 1e-12).any()):
            hint("list the sequences best first (highest score first).")
        if torch.equal(seqs, right_seqs) and not ok_scores:
            hint("the right sequences, but wrong scores: each is the sum of the log-probabilities of the n new "
                 "tokens.")
        what = "the exact best k of all continuations" if k >= V ** (n - 1) else "beam search without a cache"
        hint(f"for a prompt of {T} tokens, n={n}, k={k} the beams differ from {what}: "
             f"{first_difference(seqs, right_seqs, 'seqs')}.", generic=True)
    passed("the prompt fed once, then one token per beam, with the cache reordered to the surviving beams: the "
           "same beams and scores as search without a cache, and the exact best sequences where k covers all.")


# ------------------------------------------------------------------------------- Exercise 8.7
class _TableLM:
    """A language model given by a table: the logits at position t depend on t and on the token there.

    ``kind``: "random" (normal logits), "ties" (integer logits: many candidates tie exactly),
    "eos first" (the end token is by far the most probable at the first step), "eos never" (the end
    token has probability about e^-40). Called on ids (B, T) it returns float32 logits (B, T, V).
    """

    def __init__(self, V, seed, kind="random", eos_id=0, T=12):
        g = torch.Generator().manual_seed(seed)
        if kind == "ties":
            self.table = torch.randint(-1, 2, (T, V, V), generator=g).float()
        else:
            self.table = torch.randn(T, V, V, generator=g) * 1.5  # (position, token there, next token)
        if kind == "eos first":
            self.table[:, :, eos_id] -= 1.0
            self.table[:4, :, eos_id] = 8.0  # ending now is by far the most probable
        if kind == "eos never":
            self.table[:, :, eos_id] = -40.0
        self.vocab_size = V

    def __call__(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
            raise TypeError(f"the model takes integer ids of shape (B, T), got {describe(ids)}")
        B, T = ids.shape
        if T > self.table.shape[0]:
            raise ValueError(f"this model reads at most {self.table.shape[0]} positions (got {T})")
        self.longest = max(getattr(self, "longest", 0), T)
        return self.table[torch.arange(T), ids]  # (B, T, V)


class _PrefixLM:
    """A language model whose logits after a prefix are drawn from a generator seeded by the whole
    prefix: integer logits (ties everywhere) or normal ones, the end token pushed up at the first
    steps (``eos_bias`` > 0) or impossible (``eos_bias`` < 0: logit -inf). Returns float32 logits."""

    def __init__(self, V, seed, integer, eos_bias=None, eos_id=0):
        self.vocab_size, self.seed, self.integer, self.eos_bias, self.eos = V, seed, integer, eos_bias, eos_id
        self.longest = 0

    def _row(self, prefix):
        g = random.Random(hash((self.seed,) + tuple(prefix)))
        r = [float(g.randint(0, 2)) if self.integer else g.gauss(0, 1.5) for _ in range(self.vocab_size)]
        if self.eos_bias is not None and len(prefix) <= 3:
            r[self.eos] += self.eos_bias
        if self.eos_bias is not None and self.eos_bias < 0:
            r[self.eos] = float("-inf")
        return r

    def __call__(self, ids):
        if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.is_floating_point():
            raise TypeError(f"the model takes integer ids of shape (B, T), got {describe(ids)}")
        B, T = ids.shape
        self.longest = max(self.longest, T)
        rows = ids.tolist()
        return torch.tensor([[self._row(row[:t + 1]) for t in range(T)] for row in rows], dtype=torch.float32)


def _eos_beam(model, prompt, k, max_new, eos_id, alpha=0.0, *, mistake=None):
    """The chapter's beam search with an end token and length normalization, or one mistake."""
    beams, finished = [(0.0, list(prompt))], []
    for _ in range(max_new):
        ids = torch.tensor([tokens for _, tokens in beams])
        logp = model(ids)[:, -1].double().log_softmax(-1)  # (n_beams, V)
        V = logp.shape[1]
        if mistake == "per beam":  # each beam extended by its own best token only
            candidates = []
            for b, (s, t) in enumerate(beams):
                w = int(logp[b].argmax())
                candidates.append((s + logp[b, w].item(), t + [w]))
        else:
            candidates = [(s + logp[b, w].item(), t + [w]) for b, (s, t) in enumerate(beams) for w in range(V)]
        candidates.sort(key=lambda c: -c[0])  # stable: ties keep the (parent, token) order
        if mistake == "drop -inf":  # another reading: impossible candidates are never kept
            candidates = [c for c in candidates if c[0] != float("-inf")]
        beams = []
        for s, t in candidates:
            if len(beams) == k and mistake != "keep every finished":
                break
            ended = t[-1] == eos_id and mistake != "no end"
            if ended:
                finished.append((s, t))
            elif len(beams) < k:
                beams.append((s, t))
        if mistake == "stop at first finished" and finished:
            beams = []
        if not beams:
            break
        if (alpha == 0 or mistake == "early stop always") and len(finished) >= k:
            kth = sorted(s for s, _ in finished)[-k]
            if beams[0][0] <= kth:
                break
    n0 = len(prompt)

    def length(t):
        if mistake == "length with prompt":
            return len(t)
        if mistake == "length without end":
            return max(len(t) - n0 - (t[-1] == eos_id), 1)
        return len(t) - n0

    a = 0.0 if mistake == "no normalization" else alpha
    pool = finished if mistake == "finished only" and finished else finished + beams
    ranked = sorted(pool, key=lambda c: -(c[0] / length(c[1]) ** a))[:k]
    if mistake == "normalized scores":
        return [(s / length(t) ** alpha, t) for s, t in ranked]
    return ranked


def _eos_cases():
    """(name of the class, model, prompt, k, max_new, eos_id, alpha)."""
    cases = []
    for i, (kind, V, k, n, eos, alpha, prompt, *seed) in enumerate([
            ("random", 5, 2, 4, 0, 0.0, [1]),
            ("random", 5, 3, 4, 4, 1.0, [2, 3]),
            ("ties", 4, 2, 3, 1, 0.0, [0]),
            ("ties", 4, 3, 3, 0, 0.7, [2, 2, 1]),
            ("random", 6, 1, 5, 2, 0.0, [3]),
            ("random", 6, 1, 5, 2, 1.0, [3]),
            ("eos first", 5, 2, 4, 3, 0.0, [1]),
            ("eos first", 5, 3, 4, 3, 1.0, [0, 4]),
            ("eos never", 5, 3, 3, 0, 1.0, [1]),
            ("random", 4, 16, 2, 3, 0.5, [1]),  # k = V^2: every hypothesis kept, brute force
            ("random", 7, 4, 6, 5, 0.0, [6, 1, 2]),
            ("eos first", 4, 3, 5, 0, 0.7, [1], 3),  # an early stop with alpha > 0 loses a hypothesis here
    ]):
        name = {"ties": "exactly tied scores", "eos first": "the end token first",
                "eos never": "an end token that never comes"}.get(kind, "random logits")
        if k == 1:
            name = "a beam of 1 (greedy)"
        elif k >= V ** n:
            name = "a beam wide enough to keep every hypothesis (brute force)"
        name += f" (V = {V}, k = {k}, max_new = {n}, eos_id = {eos}, alpha = {alpha}, prompt {prompt})"
        cases.append((name, _TableLM(V, seed[0] if seed else 870 + i, kind, eos), prompt, k, n, eos, alpha))
    # the same arguments as the first case, another model: an answer kept from an earlier call shows
    cases.append(("a second call with the same arguments and another model" + cases[0][0][cases[0][0].index(" ("):],
                  _TableLM(5, 899, "random", 0), [1], 2, 4, 0, 0.0))
    # generated models whose logits depend on the whole prefix (float64 matters on integer logits,
    # the end token first or impossible), where both readings of an impossible (-inf) candidate agree
    for trial in [0, 23, 42, 85, *range(1, 40)]:
        rnd = random.Random(trial)
        V = rnd.randint(2, 7)
        eos = rnd.randrange(V)
        integer = rnd.random() < 0.5
        kind = rnd.choice(["plain", "plain", "eosfirst", "never"])
        bias = {"plain": None, "eosfirst": 6.0, "never": -1.0}[kind]
        k = rnd.choice([1, 2, 3, 4, 25])
        n = rnd.randint(1, 5)
        alpha = rnd.choice([0.0, 0.0, 0.5, 0.7, 1.0])
        prompt = [rnd.randrange(V) for _ in range(rnd.randint(1, 3))]
        model = _PrefixLM(V, trial, integer, bias, eos)
        if _eos_beam(model, prompt, k, n, eos, alpha) != _eos_beam(model, prompt, k, n, eos, alpha, mistake="drop -inf"):
            continue
        name = (f"generated prefix models ({'integer' if integer else 'random'} logits, end token "
                f"{ {'plain': 'plain', 'eosfirst': 'first', 'never': 'impossible'}[kind] }; V = {V}, k = {k}, "
                f"max_new = {n}, eos_id = {eos}, alpha = {alpha}, prompt {prompt}, seed {trial})")
        cases.append((name, model, prompt, k, n, eos, alpha))
    # exact ties between beams that decide which beams go on (the order (parent, token) matters)
    cases.append(("exactly tied candidates of two beams (generated prefix model, V = 5, k = 2, max_new = 4, "
                  "eos_id = 3, alpha = 0.0, prompt [0], seed 250)", _PrefixLM(5, 250, True, None, 3), [0], 2, 4, 3, 0.0))
    return cases


def _as_hypotheses(got, call):
    """The student's answer as [(score: float, tokens: tuple of ints)], or a hint."""
    if not isinstance(got, (list, tuple)):
        hint(f"{call} returned {describe(got)}: return a list of (score, tokens) pairs, best first.")
    out = []
    for item in got:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            hint(f"{call} returned a list holding {describe(item)}: each entry must be a pair (score, tokens).")
        score, tokens = item
        if isinstance(score, torch.Tensor) or isinstance(tokens, torch.Tensor):
            hint(f"{call} returned {describe(score if isinstance(score, torch.Tensor) else tokens)} in a pair (wrong "
                 "type): the text asks for plain Python lists, each score a float (.item()) and tokens a list of "
                 "ints (.tolist()).")
        try:
            score = float(score)
            if isinstance(tokens, (str, bytes)) or any(isinstance(t, float) or isinstance(t, bool) for t in tokens):
                raise TypeError
            tokens = tuple(int(t) for t in tokens)
        except Exception:  # noqa: BLE001 - anything that is not numbers
            hint(f"{call} returned an entry ({describe(item)}) that is not a pair (score: a number, tokens: a list "
                 "of token ids).")
        out.append((score, tokens))
    return out


def _same_hypotheses(got, right, alpha, n0, tol=1e-9):
    """Equal lists, allowing any order among hypotheses of equal normalized score."""
    if len(got) != len(right):
        return False

    def key(c):
        return c[0] / max(len(c[1]) - n0, 1) ** alpha

    if not all(math.isclose(key(a), key(b), rel_tol=tol, abs_tol=tol) for a, b in zip(got, right)):
        return False
    if not all(math.isclose(a[0], b[0], rel_tol=tol, abs_tol=tol) for a, b in zip(got, right)):
        return False
    if not right:
        return True
    # the text fixes the order of tied candidates, not which of the hypotheses tied at the k-th place
    # of the final ranking are returned: those may be any of them
    last = key(right[-1])
    above = [tuple(t) for c in right if not math.isclose(key(c), last, rel_tol=tol, abs_tol=tol) for t in [c[1]]]
    got_above = [tuple(t) for c in got if not math.isclose(key(c), last, rel_tol=tol, abs_tol=tol) for t in [c[1]]]
    if sorted(above) != sorted(got_above):
        return False
    tied = [tuple(t) for _, t in got if tuple(t) not in set(got_above)]
    return len(set(tied)) == len(tied) and all(t[:n0] == tuple(right[0][1][:n0]) for t in tied)


_EOS_MISTAKES = [
    ("no end", "a hypothesis that ends with eos_id went on: a candidate whose last token is eos_id is finished, "
               "it is set aside (among the finished ones) and never extended."),
    ("keep every finished", "you kept every candidate that ends, also those ranked below the k-th hypothesis that "
                            "goes on: going down the candidates from the best, stop as soon as k hypotheses go on; "
                            "a finished candidate after that point is pruned like the others."),
    ("per beam", "each beam was extended by its own best token only: score every token after every beam and "
                 "rank all those candidates together."),
    ("no normalization", "the final ranking ignores alpha: rank the hypotheses by score / length ** alpha, with "
                         "length the number of generated tokens, the end token included."),
    ("length with prompt", "the length in score / length ** alpha counted the prompt: it counts the generated "
                           "tokens only (the end token included)."),
    ("length without end", "the length in score / length ** alpha left out the end token: count it."),
    ("normalized scores", "you returned the normalized scores: rank by score / length ** alpha, but return each "
                          "hypothesis's raw summed log-probability."),
    ("early stop always", "you stopped early with alpha > 0: divided by a larger length, a longer hypothesis can "
                          "still overtake a finished one, so stop early only when alpha == 0."),
    ("finished only", "the hypotheses still alive after max_new steps are missing: when the search runs out of "
                      "steps, they compete with the finished ones in the final ranking."),
    ("stop at first finished", "you stopped as soon as one hypothesis finished: the search goes on while beams "
                               "that go on remain (and, with alpha == 0, one of them can still beat the k-th "
                               "finished one)."),
]


@checker("Exercise 8.7")
def beam_search_eos(my_beam_search_eos) -> None:
    """``my_beam_search_eos(model, prompt, k, max_new, eos_id, alpha=0.0)`` -> [(score, tokens)], best first.

    Compared with :func:`_eos_beam` on table models of every class in :func:`_eos_cases`.
    """
    cases = _eos_cases()
    answers, longest = [], []  # the student's answers, and the longest ids their search fed each model
    for name, model, prompt, k, n, eos, alpha in cases:
        call = f"my_beam_search_eos(model, {prompt}, k={k}, max_new={n}, eos_id={eos}, alpha={alpha})"
        given = list(prompt)
        model.longest = 0
        try:
            with rules.watch() as seen:
                got = my_beam_search_eos(model, given, k, n, eos, alpha)
        except StudentError as exc:
            if not answers:
                _answers_elsewhere(exc, lambda c: my_beam_search_eos(c[1], list(c[2]), *c[3:]), cases[1:],
                                   lambda c: f"on {c[0]}", name)
            _one_branch_missing(exc, f"on {name}")
        if seen.used_module("companion.decoding"):
            hint("your code runs companion.decoding (the course's beam_search): the exercise is to write the "
                 "search yourself.")
        if given != list(prompt):
            hint("your function changed the prompt list it was given: build new lists (tokens + [w]).")
        answers.append(_as_hypotheses(got, call))
        longest.append(model.longest)
    for (name, model, prompt, k, n, eos, alpha), got, read in zip(cases, answers, longest):
        model.longest = 0
        right = _eos_beam(model, prompt, k, n, eos, alpha)
        if _same_hypotheses(got, right, alpha, len(prompt)):
            if alpha == 0 and read > model.longest:
                hint(f"on {name}: the right hypotheses, but your search fed the model {read} positions where the "
                     f"chapter's stops after {model.longest}: with alpha == 0, stop as soon as k hypotheses have "
                     "finished and the best beam's score is at most the k-th best finished score (the text asks "
                     "for this early stop).")
            continue
        if _same_hypotheses(got, right, alpha, len(prompt), tol=1e-5):
            hint(f"on {name}: the right hypotheses, but the scores differ from float64's after the 7th digit: take "
                 "log_softmax in float64 (.double() on the logits first), as the text says; float32 also breaks "
                 "exact ties (integer logits) at random.")
        if got and all(not t[: len(prompt)] == tuple(prompt) for _, t in got):
            hint(f"on {name}: every token list must start with the prompt, then the generated tokens.")
        for mistake, message in _EOS_MISTAKES:
            explained = all(_same_hypotheses(a, _eos_beam(m, p, kk, nn, e, al, mistake=mistake), al, len(p))
                            for (_, m, p, kk, nn, e, al), a in zip(cases, answers))
            if explained:
                hint(message)
        failing = [(c, a) for c, a in zip(cases, answers)
                   if not _same_hypotheses(a, _eos_beam(*c[1:]), c[6], len(c[2]))]
        named = [message for mistake, message in _EOS_MISTAKES  # the one mistake that gives every answer that differs
                 if all(_same_hypotheses(a, _eos_beam(m, p, kk, nn, e, al, mistake=mistake), al, len(p))
                        for (_, m, p, kk, nn, e, al), a in failing)]
        if len(named) == 1 and len(failing) >= 2:
            hint(f"on {name}: {named[0]}")
        if len(got) != len(right):
            hint(f"on {name}: expected the {len(right)} best hypotheses, got {len(got)} (return the k best of the "
                 "finished ones and those still alive, fewer only if fewer exist).", generic=True)
        hint(f"on {name}: expected {[(round(s, 4), list(t)) for s, t in right]}, got "
             f"{[(round(s, 4), list(t)) for s, t in got]}.", generic=True)
    passed("finished hypotheses set aside by the chapter's rule, the final ranking by score / length ** alpha, "
           "early stop only with alpha = 0: the same hypotheses on every class (ties, k = 1, the end token first "
           "and never, a beam wide enough for brute force).")
