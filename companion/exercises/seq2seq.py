"""Checkers for chapter 9, *The full transformer: an encoder-decoder that translates*.

* Exercise 9.1 :func:`masked_cross_attention` — queries from the target, keys and values from
  the source, padded source positions masked out;
* Exercise 9.4 :func:`teacher_forcing` — the decoder's input ``<s> y`` and its targets ``y </s>``;
* Exercise 9.6 :func:`char_ngram_precision_recall` — the core of chrF for one n-gram order.

(Exercises 9.2, 9.3 and 9.5 are in :mod:`companion.exercises.seq2seq_model`, 9.7 in
:mod:`companion.exercises.seq2seq_extra`, which the chapter imports as ``check``.)

They recognize the classic slips: a decoder input that keeps ``</s>`` or lacks ``<s>``, padding
with the wrong token or on the wrong side; a padding mask inverted, forgotten, applied to the
queries, or applied with 0 instead of ``-inf``; a causal mask where none belongs; n-grams counted
as a set, matches not clipped, whitespace kept, precision and recall swapped.
"""
from __future__ import annotations

import math
import random
from collections import Counter

import torch

from ._core import require_graph, checker, close, describe, hint, passed

__all__ = ["teacher_forcing", "masked_cross_attention", "char_ngram_precision_recall"]


# ------------------------------------------------------------------------------- Exercise 9.4
def _as_long_pair(out):
    """(tgt_in, tgt_out) as integer tensors, or a hint naming what is wrong."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"return a pair `(tgt_in, tgt_out)` of tensors (got {type(out).__name__}).")
    pair = []
    for name, t in zip(("tgt_in", "tgt_out"), out):
        if not isinstance(t, torch.Tensor):
            hint(f"`{name}` must be a tensor of token ids (got {type(t).__name__}); build it with torch.tensor or "
                 "torch.full(..., dtype=torch.long).")
        if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
            hint(f"`{name}` must hold integer token ids (dtype torch.long), not {t.dtype}: embeddings are looked up "
                 "by integer index.")
        pair.append(t)
    return pair


def _require_long(dtypes) -> None:
    for name, dtype in zip(("tgt_in", "tgt_out"), dtypes):
        if dtype != torch.long:
            hint(f"the values are right, but `{name}` must be a LongTensor (dtype torch.long), not {dtype}: "
                 "torch.tensor of Python ints and torch.full(..., dtype=torch.long) give one.")


def _forcing(targets, bos, eos, pad, *, variant=None):
    """The reference and its classic mistakes (by ``variant``)."""
    T = max(len(y) for y in targets) + 1
    rows_in, rows_out = [], []
    for y in targets:
        y = list(y)
        inp, out = [bos] + y, y + [eos]
        fill_in = fill_out = pad
        if variant == "no bos":
            inp = y + [eos]
        elif variant == "no eos":
            inp, out = [bos] + y[:-1], y
        elif variant == "unshifted":
            out = [bos] + y
        elif variant == "pad with eos":
            fill_in = fill_out = eos
        elif variant == "pad with 0":
            fill_in = fill_out = 0
        elif variant == "ignore index":
            fill_out = -100
        rows_in.append(inp + [fill_in] * (T - len(inp)))
        rows_out.append(out + [fill_out] * (T - len(out)))
        if variant == "left pad":
            rows_in[-1] = [fill_in] * (T - len(inp)) + inp
            rows_out[-1] = [fill_out] * (T - len(out)) + out
    return torch.tensor(rows_in), torch.tensor(rows_out)


@checker("Exercise 9.4")
def teacher_forcing(my_teacher_forcing) -> None:
    """``my_teacher_forcing(targets, bos_id, eos_id, pad_id) -> (tgt_in, tgt_out)``, both ``(B, T)``."""
    cases = [([[5, 6, 7], [8], [9, 10, 11, 12]], 1, 2, 0), ([[7, 7], [3, 4, 5, 6, 8]], 2, 4, 9)]
    rng = random.Random(91)
    for B, bos, eos, pad in ((5, 3, 1, 2), (1, 0, 13, 14), (4, 20, 21, 22)):
        targets = [[rng.randrange(30) for _ in range(rng.randrange(7))] for _ in range(B)]
        targets[0].append(rng.randrange(30))  # at least one token somewhere
        cases.append((targets, bos, eos, pad))
    cases.append(([[], [6, 5]], 1, 2, 0))  # an empty target: only <s> in, only </s> out
    for targets, bos, eos, pad in cases:
        want_in, want_out = _forcing(targets, bos, eos, pad)
        got = my_teacher_forcing([list(y) for y in targets], bos, eos, pad)
        got_in, got_out = _as_long_pair(got)
        dtypes = (got_in.dtype, got_out.dtype)
        got_in, got_out = got_in.long(), got_out.long()
        B, T = want_in.shape
        if got_in.shape == want_in.shape and got_out.shape == want_out.shape:
            if torch.equal(got_in, want_in) and torch.equal(got_out, want_out):
                _require_long(dtypes)
                continue
            if torch.equal(got_in, want_out) and torch.equal(got_out, want_in):
                hint("you returned the pair the other way round: first the decoder's input `<s> y`, then the "
                     "targets `y </s>`.")
            for variant, message in [
                ("no bos", "the decoder's input must start with `<s>` (`bos_id`): at the first step the decoder has "
                           "seen nothing of the target yet, and `<s>` is what it reads to predict y_1."),
                ("unshifted", "the targets are a copy of the input: they must be the input shifted one position to "
                              "the left, `y </s>`, so that position t, having read `<s> y_1 .. y_t`, predicts y_(t+1)."),
                ("no eos", "the targets must end with `</s>` (`eos_id`): a model never trained to predict the end "
                           "cannot stop when it generates."),
                ("pad with 0", f"pad with the `pad_id` you are given (here {pad}), not a fixed 0."),
                ("pad with eos", "pad with `pad_id`, not `eos_id`: a row has one `</s>`, after its last token; the "
                                 "rest is padding, which the loss ignores."),
                ("ignore index", "pad both tensors with `pad_id` (the model's loss ignores `pad_id` targets), not -100."),
                ("left pad", "pad on the right: position 0 of every row must be `<s>` so that all rows start "
                             "together, and causality keeps real positions from seeing the padding after them."),
            ]:
                if variant == "pad with 0" and pad == 0 or variant == "pad with eos" and eos in (0, pad):
                    continue  # the same tensors as the right answer, or as another mistake: not told apart here
                wrong_in, wrong_out = _forcing(targets, bos, eos, pad, variant=variant)
                if wrong_in.shape == got_in.shape and torch.equal(got_in, wrong_in) and torch.equal(got_out, wrong_out):
                    hint(message)
            if not torch.equal(got_in, want_in):
                if torch.equal(got_in[:, 0], torch.full((B,), 1)) and bos != 1:
                    hint(f"use the `bos_id` argument (here {bos}), not a fixed id.")
                if bool((got_in == eos).any()) and eos not in (bos, pad):
                    hint("`</s>` appears in the decoder's input: it is only ever a target (nothing is predicted "
                         "after the end).")
                hint(f"for targets={targets}, bos_id={bos}, eos_id={eos}, pad_id={pad} the input is "
                     f"{want_in.tolist()}, you returned {got_in.tolist()}.", generic=True)
            hint(f"for targets={targets}, bos_id={bos}, eos_id={eos}, pad_id={pad} the targets are "
                 f"{want_out.tolist()}, you returned {got_out.tolist()}.", generic=True)
        if got_in.shape != got_out.shape:
            hint(f"`tgt_in` and `tgt_out` must have the same shape (got {tuple(got_in.shape)} and "
                 f"{tuple(got_out.shape)}): position t of the input predicts position t of the targets.")
        if got_in.dim() == 2 and got_in.shape[1] == T + 1 and bool((got_in == eos).any()):
            hint("`</s>` appears in the decoder's input: it is only ever a target (nothing is predicted after the "
                 "end). The input is `<s> y`, padded; T = longest target + 1.")
        if got_in.dim() == 2 and got_in.shape[0] == B and got_in.shape[1] == T - 1:
            hint("one column short: with `<s>` in front (input) and `</s>` behind (targets), each row is one "
                 "token longer than its target; T = longest target + 1.")
        hint(f"both tensors have shape (B, T) = ({B}, {T}): B targets, T = longest target + 1 "
             f"(got {tuple(got_in.shape)}).", generic=True)
    passed("`<s> y` in, `y </s>` out, padded with `pad_id`.")


# ------------------------------------------------------------------------------- Exercise 9.1
def _attend(q, k, v, mask, *, variant=None):
    """Single-head cross-attention and its classic mistakes: out (B, T, d_v), weights (B, T, S)."""
    d = q.shape[-1]
    scale = {"no scale": 1.0, "scale d": d, "scale S": math.sqrt(k.shape[1])}.get(variant, math.sqrt(d))
    scores = q @ k.transpose(1, 2) / scale  # (B, T, S)
    m = mask[:, None, :]  # (B, 1, S): the same keys for every query
    if variant == "inverted":
        m = ~m
    if variant == "causal":
        T, S = scores.shape[1:]
        m = m & torch.ones(T, S, dtype=torch.bool).tril()
    if variant in ("no mask", "after softmax"):
        weights = torch.softmax(scores, -1)
        if variant == "after softmax":
            weights = weights * m
    elif variant == "zero fill":
        weights = torch.softmax(scores.masked_fill(~m, 0.0), -1)
    elif variant == "softmax over queries":
        weights = torch.softmax(scores.masked_fill(~m, float("-inf")), 1)
    else:
        weights = torch.softmax(scores.masked_fill(~m, float("-inf")), -1)
    out = weights @ (k if variant == "keys as values" else v)
    return out, weights


@checker("Exercise 9.1")
def masked_cross_attention(my_cross_attention) -> None:
    """``my_cross_attention(q, k, v, src_key_mask) -> (out, weights)``: one head of cross-attention."""
    g = torch.Generator().manual_seed(9)
    B, T, S, d = 2, 3, 5, 4
    q = torch.randn(B, T, d, generator=g, dtype=torch.float64)
    k = torch.randn(B, S, d, generator=g, dtype=torch.float64) * 2
    v = torch.randn(B, S, d, generator=g, dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True, True], [True, True, False, False, False]])
    want_out, want_w = _attend(q, k, v, mask)
    got = my_cross_attention(q.clone(), k.clone(), v.clone(), mask.clone())
    if isinstance(got, torch.Tensor):
        hint("return the pair `(out, weights)`: the output (B, T, d) and the attention weights (B, T, S).")
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        hint(f"return a pair `(out, weights)` (got {type(got).__name__}).")
    out, w = got
    if (isinstance(out, torch.Tensor) and isinstance(w, torch.Tensor) and tuple(out.shape) == (B, T, S)
            and tuple(w.shape) == (B, T, d) and S != d):
        hint("the pair is the other way round: return `(out, weights)`, the output (B, T, d) first, then the "
             "weights (B, T, S).")
    for name, t, shape in (("weights", w, (B, T, S)), ("out", out, (B, T, d))):
        if not isinstance(t, torch.Tensor):
            hint(f"`{name}` must be a tensor (got {type(t).__name__}).")
        if tuple(t.shape) != shape:
            if name == "weights" and tuple(t.shape) == (B, S, T):
                hint("the weights are transposed: one row per target query (T rows), one column per source key "
                     "(S columns), shape (B, T, S) = q @ k^T.")
            hint(f"`{name}` must have shape {shape} (B={B} sentences, T={T} target positions, S={S} source "
                 f"positions, d={d}) (got {tuple(t.shape)}).")
    for name, t in (("weights", w), ("out", out)):
        if t.is_complex() or t.dtype == torch.bool:
            hint(f"`{name}` must hold real numbers (a float tensor) (got dtype {t.dtype}).")
    if close(w, want_w) and close(out, want_out):
        require_graph(my_cross_attention, (q, k, v, mask), grad=(0, 1, 2))
        passed("padded source positions get weight exactly 0.")
    variants = [
        ("no mask", "the padded source positions get weight: set their scores to -inf before the softmax "
                    "(`scores.masked_fill(~src_key_mask[:, None, :], float('-inf'))`)."),
        ("inverted", "the mask is inverted: True in `src_key_mask` marks a real token, which must be *kept*; "
                     "mask where it is False."),
        ("causal", "cross-attention has no causal mask: the whole source is known before decoding starts, so "
                   "every target position may look at every real source position."),
        ("zero fill", "a masked score of 0 still gets weight exp(0) = 1 in the softmax: fill with float('-inf')."),
        ("after softmax", "you zeroed the padded weights after the softmax, so the rows no longer sum to 1: mask "
                          "the scores (with -inf) before the softmax instead."),
        ("softmax over queries", "the softmax runs over the keys (the last dimension, dim=-1): each target "
                                 "position distributes its attention over the source."),
        ("no scale", "divide the scores by sqrt(d) (d = the width of a query): without it the softmax saturates "
                     "as d grows."),
        ("scale d", "the scale is sqrt(d), not d."),
        ("scale S", "the scale is sqrt(d), the width of a query and key, not sqrt(S), the source length."),
        ("keys as values", "the output is the weighted sum of the *values* `v`, not of the keys."),
    ]
    w_seen = torch.nan_to_num(w.double(), nan=7.0)  # a mistake that makes NaN is still recognized
    out_seen = torch.nan_to_num(out.double(), nan=7.0)
    for variant, message in variants:
        wrong_out, wrong_w = _attend(q, k, v, mask, variant=variant)
        if close(w_seen, torch.nan_to_num(wrong_w, nan=7.0)) and (
                variant != "keys as values" or close(out_seen, torch.nan_to_num(wrong_out, nan=7.0))):
            hint(message)
    if bool(torch.isnan(w).any()) or bool(torch.isnan(out).any()):
        hint("your result holds NaN: a row whose scores are all -inf gives 0/0 in the softmax. Mask only the "
             "padded keys (src_key_mask False), never a whole row.")
    if close(w, want_w):
        hint("the weights are right but the output is not: out = weights @ v, shape (B, T, d).")
    if not close(w.sum(-1), torch.ones(B, T, dtype=torch.float64)):
        hint("each row of the weights must sum to 1 over the source positions (softmax over dim=-1).")
    hint("compute scores = q @ k^T / sqrt(d) (B, T, S), set the scores of padded keys to -inf, take the softmax "
         "over the keys, and return (weights @ v, weights).", generic=True)


# ------------------------------------------------------------------------------- Exercise 9.6
def _prf(hyp, ref, n, *, variant=None):
    """Character n-gram precision and recall (chrF's statistics for one order) and classic mistakes."""
    if variant == "spaces only":
        hyp, ref = hyp.replace(" ", ""), ref.replace(" ", "")
    elif variant != "whitespace":
        hyp, ref = "".join(hyp.split()), "".join(ref.split())
    if variant == "lowercase":
        hyp, ref = hyp.lower(), ref.lower()

    def grams(s):
        if variant == "chunks":
            return Counter(s[i:i + n] for i in range(0, len(s) - n + 1, n))
        if variant == "off by one":
            return Counter(s[i:i + n] for i in range(len(s) - n))
        return Counter(s[i:i + n] for i in range(len(s) - n + 1))

    h, r = grams(hyp), grams(ref)
    if variant == "sets":
        h, r = Counter(set(h)), Counter(set(r))
    if variant == "unclipped":
        match = sum(c for g, c in h.items() if g in r)
    else:
        match = sum(min(c, r[g]) for g, c in h.items())
    nh, nr = sum(h.values()), sum(r.values())
    if variant == "string length":
        nh, nr = len(hyp), len(ref)
    empty = 1.0 if variant == "empty is 1" else 0.0
    p = match / nh if nh else empty
    rec = match / nr if nr else empty
    return (rec, p) if variant == "swapped" else (p, rec)


@checker("Exercise 9.6")
def char_ngram_precision_recall(my_ngram_pr) -> None:
    """``my_ngram_pr(hypothesis, reference, n) -> (precision, recall)`` of character n-grams."""
    cases = [("siebenund neunzig", "siebenundneunzig", 3), ("aaaab", "aab", 2), ("neun und vierzig", "Neunundvierzig", 2),
             ("abcabc", "abcab", 3), ("zwei", "zweiundzwanzig", 1), ("abababab", "ab ab", 2), ("xyz", "abc", 2),
             # tabs and new lines are whitespace too; a side with no n-gram has the rate 0
             ("acht\tund\nachtzig", "achtund achtzig", 3), ("ab", "abcdef", 3), ("vier zig", "v i", 2),
             ("", "", 1), ("drei\r\n", "drei", 4)]
    rng = random.Random(93)
    for n in (1, 2, 4):
        hyp = "".join(rng.choice("ab c") for _ in range(rng.randrange(3, 15)))
        ref = "".join(rng.choice("abc\t") for _ in range(rng.randrange(3, 15)))
        cases.append((hyp, ref, n))
    for hyp, ref, n in cases:
        want = _prf(hyp, ref, n)
        got = my_ngram_pr(hyp, ref, n)
        try:
            if len(got) != 2:
                raise ValueError
            got = (float(got[0]), float(got[1]))
        except Exception:
            hint(f"return a pair of numbers `(precision, recall)` (got {describe(got)}).")
        if any(math.isnan(x) for x in got):
            hint("your result holds NaN: when one side has no n-grams at all, its rate is 0.")
        if all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(got, want)):
            continue
        for variant, message in [
            ("swapped", "precision and recall are swapped: precision divides the matches by the *hypothesis's* "
                        "n-grams (how much of what we wrote is right), recall by the *reference's* (how much of "
                        "what we should have written we did write)."),
            ("sets", "count n-grams with their multiplicity (a Counter), not as a set: 'aa' occurring three "
                     "times in the hypothesis is three n-grams."),
            ("unclipped", "clip the matches: an n-gram counts as matched at most as often as it occurs in the "
                          "reference, `min(count_hyp, count_ref)`, or repeating a right n-gram would raise precision."),
            ("spaces only", "remove all whitespace, tabs and new lines too, not only spaces: "
                            "`''.join(text.split())`."),
            ("empty is 1", "when a side has no n-grams at all (a string shorter than n), its rate is 0, not 1."),
            ("whitespace", "remove the whitespace first (`''.join(text.split())`), as chrF does: spaces are not "
                           "characters of the words."),
            ("lowercase", "chrF is case-sensitive: 'N' and 'n' are different characters."),
            ("chunks", "take every n-gram, overlapping: one starting at each position i = 0 .. len - n."),
            ("off by one", "one n-gram is missing: positions run from 0 to len - n *inclusive*, "
                           "`range(len(s) - n + 1)`."),
            ("string length", "divide by the number of n-grams (len - n + 1), not by the number of characters."),
        ]:
            wrong = _prf(hyp, ref, n, variant=variant)
            if all(math.isclose(a, b, abs_tol=1e-9) for a, b in zip(got, wrong)):
                hint(message)
        hint(f"for hypothesis={hyp!r}, reference={ref!r}, n={n} the answer is (precision, recall) = "
             f"({want[0]:.4f}, {want[1]:.4f}); you returned ({got[0]:.4f}, {got[1]:.4f}).", generic=True)
    passed("clipped counts of overlapping character n-grams.")
