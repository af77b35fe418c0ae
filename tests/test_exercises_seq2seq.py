"""Tests for the chapter 9 checkers: the right answer passes; at least ten plausible wrong answers
per exercise do not (the classic ones with their specific hint); an untouched stub is "not
attempted"; and no answer, however broken, makes a checker fail inside its own code."""
from __future__ import annotations

import math
from collections import Counter

import pytest
import torch

from companion.exercises import seq2seq as check


def never_crashed(fb):
    """A student function that does not raise must never be reported as raising: that would be the
    checker failing inside its own code."""
    return not fb.message.startswith("your code raised")


# ------------------------------------------------------------------ 9.4 teacher forcing
def forcing_ok(targets, bos_id, eos_id, pad_id):
    T = max(len(y) for y in targets) + 1
    tgt_in = torch.full((len(targets), T), pad_id)
    tgt_out = torch.full((len(targets), T), pad_id)
    for b, y in enumerate(targets):
        tgt_in[b, : len(y) + 1] = torch.tensor([bos_id] + y)
        tgt_out[b, : len(y) + 1] = torch.tensor(y + [eos_id])
    return tgt_in, tgt_out


def forcing_variant(**change):
    def fn(targets, bos_id, eos_id, pad_id):
        bos, eos = change.get("bos", bos_id), change.get("eos", eos_id)
        pad_in, pad_out = change.get("pad_in", pad_id), change.get("pad_out", pad_id)
        extra = change.get("extra", 1)
        T = max(len(y) for y in targets) + extra
        rows_in, rows_out = [], []
        for y in targets:
            inp, out = change.get("make", lambda y: ([bos] + y, y + [eos]))(y)
            inp, out = inp[:T], out[:T]
            if change.get("left"):
                rows_in.append([pad_in] * (T - len(inp)) + inp)
                rows_out.append([pad_out] * (T - len(out)) + out)
            else:
                rows_in.append(inp + [pad_in] * (T - len(inp)))
                rows_out.append(out + [pad_out] * (T - len(out)))
        result = (torch.tensor(rows_in), torch.tensor(rows_out))
        return change.get("post", lambda r: r)(result)
    return fn


FORCING_WRONG = {
    "must start with `<s>`": forcing_variant(make=lambda y: (y + [2], y + [2])),
    "a copy of the input": forcing_variant(make=lambda y: ([1] + y, [1] + y)),
    "must end with `</s>`": forcing_variant(make=lambda y: ([1] + y[:-1], y)),
    "not `eos_id`": forcing_variant(pad_in=2, pad_out=2),
    "not -100": forcing_variant(pad_out=-100),
    "pad on the right": forcing_variant(left=True),
    "the other way round": forcing_variant(post=lambda r: (r[1], r[0])),
    "`</s>` appears in the decoder's input": forcing_variant(make=lambda y: ([1] + y + [2], y + [2]), extra=2),
    "use the `bos_id` argument": forcing_variant(bos=1),
    "dtype torch.long": forcing_variant(post=lambda r: (r[0].float(), r[1].float())),
    "must be a tensor": forcing_variant(post=lambda r: (r[0].tolist(), r[1].tolist())),
    "same shape": forcing_variant(post=lambda r: (r[0], r[1][:, :-1])),
    "one column short": forcing_variant(extra=0),
    "return a pair": forcing_variant(post=lambda r: torch.stack(r)),
    "for targets=": forcing_variant(make=lambda y: ([1] + y[::-1], y[::-1] + [2])),  # reversed targets
}


def test_teacher_forcing_right_and_wrong():
    assert check.teacher_forcing(forcing_ok).passed

    def stub(targets, bos_id, eos_id, pad_id):
        raise NotImplementedError

    assert check.teacher_forcing(stub).status == "not attempted"
    assert check.teacher_forcing(...).status == "not attempted"
    assert len(FORCING_WRONG) >= 10
    for expected, fn in FORCING_WRONG.items():
        fb = check.teacher_forcing(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)
        assert never_crashed(fb), (expected, fb)


# ------------------------------------------------------------------ 9.1 masked cross-attention
def attention_variant(mask_mode="right", softmax_dim=-1, scale="sqrt_d", values="v", post=None):
    def fn(q, k, v, src_key_mask):
        d = q.shape[-1]
        div = {"sqrt_d": math.sqrt(d), "none": 1.0, "d": d, "sqrt_S": math.sqrt(k.shape[1])}[scale]
        scores = q @ k.transpose(-2, -1) / div  # (B, T, S)
        keep = src_key_mask[:, None, :]
        if mask_mode == "inverted":
            keep = ~keep
        if mask_mode == "causal":
            keep = keep & torch.ones(scores.shape[1:], dtype=torch.bool).tril()
        if mask_mode == "queries":
            keep = src_key_mask[:, :, None]  # (B, S, 1) against (B, T, S): wrong axis
        if mask_mode in ("right", "inverted", "causal", "queries"):
            scores = scores.masked_fill(~keep, float("-inf"))
        if mask_mode == "zero":
            scores = scores.masked_fill(~keep, 0.0)
        w = torch.softmax(scores, dim=softmax_dim)
        if mask_mode == "after":
            w = w * keep
        if mask_mode == "after renormalized":  # right, by another route
            w = w * keep
            w = w / w.sum(-1, keepdim=True)
        out = w @ (k if values == "k" else v)
        return post((out, w)) if post else (out, w)
    return fn


ATTENTION_WRONG = {
    "the padded source positions get weight": attention_variant(mask_mode="none"),
    "the mask is inverted": attention_variant(mask_mode="inverted"),
    "no causal mask": attention_variant(mask_mode="causal"),
    "exp(0) = 1": attention_variant(mask_mode="zero"),
    "no longer sum to 1": attention_variant(mask_mode="after"),
    "over the keys": attention_variant(softmax_dim=1),
    "divide the scores by sqrt(d)": attention_variant(scale="none"),
    "not d.": attention_variant(scale="d"),
    "not sqrt(S)": attention_variant(scale="sqrt_S"),
    "*values*": attention_variant(values="k"),
    "transposed": attention_variant(post=lambda r: (r[0], r[1].transpose(1, 2))),
    "return the pair": attention_variant(post=lambda r: r[0]),
    "the output is not": attention_variant(post=lambda r: (r[0] * 2, r[1])),
    "your code raised": attention_variant(mask_mode="queries"),  # the mask does not fit the scores: it raises
    "must have shape": attention_variant(post=lambda r: (r[0].mean(1), r[1])),
}


def test_masked_cross_attention_right_and_wrong():
    assert check.masked_cross_attention(attention_variant()).passed
    assert check.masked_cross_attention(attention_variant(mask_mode="after renormalized")).passed
    assert len(ATTENTION_WRONG) >= 10
    for expected, fn in ATTENTION_WRONG.items():
        fb = check.masked_cross_attention(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)
        if expected != "your code raised":
            assert never_crashed(fb), (expected, fb)

    def nan_answer(q, k, v, m):
        return torch.full((2, 3, 4), float("nan"), dtype=torch.float64), torch.full((2, 3, 5), float("nan"))

    fb = check.masked_cross_attention(nan_answer)
    assert fb.status == "hint" and "NaN" in fb.message


# ------------------------------------------------------------------ 9.6 character n-gram precision and recall
def prf_variant(strip=True, counter="multi", clip=True, swap=False, rng="overlap", lower=False, denom="grams"):
    def fn(hyp, ref, n):
        if strip:
            hyp, ref = "".join(hyp.split()), "".join(ref.split())
        if lower:
            hyp, ref = hyp.lower(), ref.lower()

        def grams(s):
            if rng == "chunks":
                idx = range(0, len(s) - n + 1, n)
            elif rng == "short":
                idx = range(len(s) - n)
            else:
                idx = range(len(s) - n + 1)
            c = Counter(s[i:i + n] for i in idx)
            return Counter(set(c)) if counter == "set" else c

        h, r = grams(hyp), grams(ref)
        match = sum(min(c, r[g]) for g, c in h.items()) if clip else sum(c for g, c in h.items() if g in r)
        nh, nr = (sum(h.values()), sum(r.values())) if denom == "grams" else (len(hyp), len(ref))
        p, rec = (match / nh if nh else 0.0), (match / nr if nr else 0.0)
        return (rec, p) if swap else (p, rec)
    return fn


PRF_WRONG = {
    "swapped": prf_variant(swap=True),
    "multiplicity": prf_variant(counter="set"),
    "clip the matches": prf_variant(clip=False),
    "remove the whitespace": prf_variant(strip=False),
    "case-sensitive": prf_variant(lower=True),
    "overlapping": prf_variant(rng="chunks"),
    "one n-gram is missing": prf_variant(rng="short"),
    "not by the number of characters": prf_variant(denom="chars"),
    "(precision, recall)": lambda h, r, n: 0.5,
    "NaN": lambda h, r, n: (float("nan"), 0.0),
    "the answer is": lambda h, r, n: prf_variant()(h, r, max(n - 1, 1)),  # the wrong order
    "the answer is (precision": lambda h, r, n: (0.5, 0.5),
    "for hypothesis=": lambda h, r, n: tuple(2 * p * rr / (p + rr) if p + rr else 0.0 for p, rr in [prf_variant()(h, r, n)] * 2),  # F1 twice
}


def test_char_ngram_precision_recall_right_and_wrong():
    assert check.char_ngram_precision_recall(prf_variant()).passed

    def stub(h, r, n):
        raise NotImplementedError

    assert check.char_ngram_precision_recall(stub).status == "not attempted"
    assert len(PRF_WRONG) >= 10
    for expected, fn in PRF_WRONG.items():
        fb = check.char_ngram_precision_recall(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)
        assert never_crashed(fb), (expected, fb)


def test_exercise_numbers_match_the_chapter():
    assert [c.exercise for c in (check.teacher_forcing, check.masked_cross_attention,
                                 check.char_ngram_precision_recall)] == ["Exercise 9.4", "Exercise 9.1", "Exercise 9.6"]


@pytest.mark.parametrize("answer", [None, "text", 3, (1,), (None, None), [torch.zeros(0)] * 2, (torch.zeros(2, 3, 4), "x"),
                                    (torch.full((2, 3, 4), float("nan")), torch.full((2, 3, 5), float("inf"))),
                                    (torch.zeros(2, 3, 4, dtype=torch.complex64), torch.zeros(2, 3, 5, dtype=torch.bool)),
                                    (torch.zeros(2, 3, 4, dtype=torch.long), torch.ones(2, 3, 5, dtype=torch.long)),
                                    ("ab", "cd"), (float("inf"), 1.0), {"p": 1}, torch.zeros(2)])
def test_no_checker_fails_inside_its_own_code(answer):
    for checker in (check.teacher_forcing, check.masked_cross_attention, check.char_ngram_precision_recall):
        fb = checker(lambda *args: answer)
        assert fb.status in ("hint", "not attempted"), fb
        assert never_crashed(fb), (answer, fb)


def _pads_with_zero(targets, bos_id, eos_id, pad_id):
    T = max(len(y) for y in targets) + 1
    rows_in = [[bos_id] + y + [0] * (T - 1 - len(y)) for y in targets]
    rows_out = [y + [eos_id] + [0] * (T - 1 - len(y)) for y in targets]
    return torch.tensor(rows_in), torch.tensor(rows_out)


def _pads_with_eos(targets, bos_id, eos_id, pad_id):
    T = max(len(y) for y in targets) + 1
    rows_in = [[bos_id] + y + [eos_id] * (T - 1 - len(y)) for y in targets]
    rows_out = [y + [eos_id] + [eos_id] * (T - 1 - len(y)) for y in targets]
    return torch.tensor(rows_in), torch.tensor(rows_out)


def test_teacher_forcing_padding_hints_name_the_mistake_made():
    zero = check.teacher_forcing(_pads_with_zero).message
    eos = check.teacher_forcing(_pads_with_eos).message
    assert "not a fixed 0" in zero and "not `eos_id`" not in zero, zero
    assert "not `eos_id`" in eos and "not a fixed 0" not in eos, eos
