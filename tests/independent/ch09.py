"""Independent red-team cases for chapter 9 (the encoder-decoder).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.seq2seq_extra"  # the notebook imports it as `check` (it re-exports 9.1-9.6)
PRELUDE = """
import json
import math
import statistics
import time

import matplotlib.pyplot as plt
import torch
from torch import nn

from companion import decoding, translation
from companion.checkpoint import load_checkpoint
from companion.data import asset_path
from companion.decoding import beam_search, greedy, sample, sequence_log_prob
from companion.exercises import seq2seq_extra as check
from companion.positional import sinusoidal_encoding
from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from companion.translation import (
    TranslationTokenizer,
    chrf,
    english,
    exact_match,
    german,
    make_batch,
    next_characters,
    number_splits,
    pairs,
    translate,
)
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 9.4 ----
def tf(name, expect, why, source):
    case("9.4", "teacher_forcing", name, expect, why, source,
         "my_teacher_forcing")


_PAD = """
def _pad(rows, T, pad_id):
    return torch.tensor([r + [pad_id] * (T - len(r)) for r in rows], dtype=torch.long)
"""

tf("swapped", "wrong", "returns (tgt_out, tgt_in)", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    return (_pad([t + [eos_id] for t in targets], T, pad_id),
            _pad([[bos_id] + t for t in targets], T, pad_id))
""")
tf("T_too_short", "wrong", "T = longest target: truncates the longest row", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets)
    return (_pad([([bos_id] + t)[:T] for t in targets], T, pad_id),
            _pad([(t + [eos_id])[:T] for t in targets], T, pad_id))
""")
tf("T_plus_two", "wrong", "T = longest + 2", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 2
    return (_pad([[bos_id] + t for t in targets], T, pad_id),
            _pad([t + [eos_id] for t in targets], T, pad_id))
""")
tf("pads_with_zero", "wrong", "pads with 0 instead of pad_id", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    return (_pad([[bos_id] + t for t in targets], T, 0),
            _pad([t + [eos_id] for t in targets], T, 0))
""")
tf("shift_of_full_sequence", "wrong", "slices [bos, y, eos, pad..]: short rows' inputs keep their eos", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    L = max(len(t) for t in targets) + 2
    full = _pad([[bos_id] + t + [eos_id] for t in targets], L, pad_id)
    return full[:, :-1], full[:, 1:]
""")
tf("left_padding", "wrong", "pads on the left", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    tin = [[pad_id] * (T - len(t) - 1) + [bos_id] + t for t in targets]
    tout = [[pad_id] * (T - len(t) - 1) + t + [eos_id] for t in targets]
    return torch.tensor(tin), torch.tensor(tout)
""")
tf("int32", "wrong", "int32 tensors, not LongTensors", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    return (_pad([[bos_id] + t for t in targets], T, pad_id).int(),
            _pad([t + [eos_id] for t in targets], T, pad_id).int())
""")
tf("lists", "wrong", "returns lists of lists", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    tin = [[bos_id] + t + [pad_id] * (T - 1 - len(t)) for t in targets]
    tout = [t + [eos_id] + [pad_id] * (T - 1 - len(t)) for t in targets]
    return tin, tout
""")
tf("eos_at_end", "wrong", "puts eos in the last column, after the padding", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    tin = [[bos_id] + t + [pad_id] * (T - 1 - len(t)) for t in targets]
    tout = [t + [pad_id] * (T - 1 - len(t)) + [eos_id] for t in targets]
    return torch.tensor(tin), torch.tensor(tout)
""")
tf("appends_to_inputs", "wrong", "t.append(eos_id) changes the caller's lists", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    tin, tout = [], []
    for t in targets:
        tin.append([bos_id] + t + [pad_id] * (T - 1 - len(t)))
        t.append(eos_id)
        tout.append(t + [pad_id] * (T - len(t)))
    return torch.tensor(tin), torch.tensor(tout)
""")
tf("both_specials_in_input", "wrong", "tgt_in = bos + y + eos, T = longest + 2", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 2
    return (_pad([[bos_id] + t + [eos_id] for t in targets], T, pad_id),
            _pad([t + [eos_id] for t in targets], T, pad_id))
""")
tf("float_tensors", "wrong", "float tensors", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    tin = torch.full((len(targets), T), float(pad_id))
    tout = torch.full((len(targets), T), float(pad_id))
    for b, t in enumerate(targets):
        tin[b, : len(t) + 1] = torch.tensor([bos_id] + t, dtype=torch.float)
        tout[b, : len(t) + 1] = torch.tensor(t + [eos_id], dtype=torch.float)
    return tin, tout
""")
tf("right_full_loop", "right", "torch.full then fill each row", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    B = len(targets)
    T = max(map(len, targets)) + 1
    tgt_in = torch.full((B, T), pad_id, dtype=torch.long)
    tgt_out = torch.full((B, T), pad_id, dtype=torch.long)
    for b, t in enumerate(targets):
        n = len(t)
        tgt_in[b, 0] = bos_id
        if n:
            tgt_in[b, 1:n + 1] = torch.tensor(t)
            tgt_out[b, :n] = torch.tensor(t)
        tgt_out[b, n] = eos_id
    return tgt_in, tgt_out
""")
tf("right_pad_sequence", "right", "nn.utils.rnn.pad_sequence", """
from torch.nn.utils.rnn import pad_sequence
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    tin = [torch.tensor([bos_id] + list(t), dtype=torch.long) for t in targets]
    tout = [torch.tensor(list(t) + [eos_id], dtype=torch.long) for t in targets]
    return (pad_sequence(tin, batch_first=True, padding_value=pad_id),
            pad_sequence(tout, batch_first=True, padding_value=pad_id))
""")
tf("right_comprehension", "right", "list comprehensions, torch.LongTensor", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = 1 + max(len(t) for t in targets)
    fill = lambda row: row + [pad_id] * (T - len(row))
    return (torch.LongTensor([fill([bos_id, *t]) for t in targets]),
            torch.LongTensor([fill([*t, eos_id]) for t in targets]))
""")


# ---------------------------------------------------------------- 9.1 ----
def xa(name, expect, why, source):
    case("9.1", "masked_cross_attention", name, expect, why, source,
         "my_cross_attention")


xa("mask_inverted", "wrong", "masks the real tokens, keeps the padding", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s.masked_fill(src_key_mask[:, None, :], float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w
""")
xa("mask_after_softmax", "wrong", "zeroes the padded weights after the softmax, no renormalizing", """
def my_cross_attention(q, k, v, src_key_mask):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    w = w * src_key_mask[:, None, :]
    return w @ v, w
""")
xa("mask_over_queries", "wrong", "broadcasts the mask over the target positions", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    m = src_key_mask[:, :, None].expand(-1, -1, s.shape[-1])[:, : s.shape[1], :]
    if m.shape[1] < s.shape[1]:
        m = torch.cat([m, m[:, -1:].expand(-1, s.shape[1] - m.shape[1], -1)], 1)
    w = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
    return w @ v, w
""")
xa("no_scale", "wrong", "forgets 1 / sqrt(d)", """
def my_cross_attention(q, k, v, src_key_mask):
    s = (q @ k.transpose(-2, -1)).masked_fill(~src_key_mask[:, None, :], float("-inf"))
    w = torch.softmax(s, dim=-1)
    return w @ v, w
""")
xa("scale_sqrt_S", "wrong", "scales by the source length", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(k.shape[1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=-1)
    return w @ v, w
""")
xa("softmax_over_targets", "wrong", "softmax over dim 1", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=1)
    return w @ v, w
""")
xa("returns_out_only", "wrong", "returns only out", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=-1)
    return w @ v
""")
xa("order_swapped", "wrong", "returns (weights, out)", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=-1)
    return w, w @ v
""")
xa("causal_too", "wrong", "adds a causal mask (cross-attention has none)", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    T, S = s.shape[-2:]
    causal = torch.ones(T, S, dtype=torch.bool).tril()
    keep = src_key_mask[:, None, :] & causal
    keep[..., 0] = True
    w = torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1)
    return w @ v, w
""")
xa("fill_zero", "wrong", "masked_fill with 0: padding still gets weight", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], 0.0), dim=-1)
    return w @ v, w
""")
xa("values_are_keys", "wrong", "weights @ k instead of v", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=-1)
    return w @ k, w
""")
xa("weights_transposed", "wrong", "returns weights (B, S, T)", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=-1)
    return w @ v, w.transpose(1, 2)
""")
xa("in_place_q_scale", "wrong", "scales q in place: mutates the input", """
def my_cross_attention(q, k, v, src_key_mask):
    q /= math.sqrt(q.shape[-1])
    s = q @ k.transpose(-2, -1)
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=-1)
    return w @ v, w
""")
xa("right_minus_1e9", "right", "a large negative number instead of -inf", """
def my_cross_attention(q, k, v, src_key_mask):
    s = torch.einsum("btd,bsd->bts", q, k) / q.size(-1) ** 0.5
    s = torch.where(src_key_mask.unsqueeze(1), s, torch.full_like(s, -1e9))
    w = s.softmax(-1)
    return torch.einsum("bts,bsd->btd", w, v), w
""")
xa("right_renormalize", "right", "zero after the softmax, then renormalize", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.mT / math.sqrt(q.shape[-1])
    e = torch.exp(s - s.amax(-1, keepdim=True)) * src_key_mask[:, None, :]
    w = e / e.sum(-1, keepdim=True)
    return w @ v, w
""")
xa("right_sdpa_out", "right", "torch's attention for out, the weights computed alongside", """
import torch.nn.functional as F
def my_cross_attention(q, k, v, src_key_mask):
    m = src_key_mask[:, None, :]
    s = (q @ k.transpose(1, 2)) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~m, float("-inf")), dim=-1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)
    return out, w
""")


# ---------------------------------------------------------------- 9.6 ----
def ng(name, expect, why, source):
    case("9.6", "char_ngram_precision_recall", name, expect, why, source,
         "my_ngram_pr")


_GRAMS = """
from collections import Counter
def _grams(s, n):
    return Counter(s[i:i + n] for i in range(len(s) - n + 1))
def _pr(h, r):
    m = sum(min(c, r[g]) for g, c in h.items())
    nh, nr = sum(h.values()), sum(r.values())
    return (m / nh if nh else 0.0), (m / nr if nr else 0.0)
"""

ng("strip_only", "wrong", "strip() removes only the ends' whitespace", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    return _pr(_grams(hypothesis.strip(), n), _grams(reference.strip(), n))
""")
ng("spaces_only", "wrong", "removes spaces but not tabs or newlines", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    return _pr(_grams(hypothesis.replace(" ", ""), n), _grams(reference.replace(" ", ""), n))
""")
ng("sets_not_counts", "wrong", "sets: each n-gram counted once", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    h = "".join(hypothesis.split()); r = "".join(reference.split())
    hs = {h[i:i + n] for i in range(len(h) - n + 1)}
    rs = {r[i:i + n] for i in range(len(r) - n + 1)}
    m = len(hs & rs)
    return (m / len(hs) if hs else 0.0), (m / len(rs) if rs else 0.0)
""")
ng("no_clipping", "wrong", "a hypothesis n-gram matches every time it occurs", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    h = _grams("".join(hypothesis.split()), n)
    r = _grams("".join(reference.split()), n)
    m = sum(c for g, c in h.items() if g in r)
    nh, nr = sum(h.values()), sum(r.values())
    return (m / nh if nh else 0.0), (m / nr if nr else 0.0)
""")
ng("p_r_swapped", "wrong", "returns (recall, precision)", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    p, r = _pr(_grams("".join(hypothesis.split()), n), _grams("".join(reference.split()), n))
    return r, p
""")
ng("drops_last_gram", "wrong", "range(len(s) - n): misses the last n-gram", """
from collections import Counter
def my_ngram_pr(hypothesis, reference, n):
    h = "".join(hypothesis.split()); r = "".join(reference.split())
    hc = Counter(h[i:i + n] for i in range(len(h) - n))
    rc = Counter(r[i:i + n] for i in range(len(r) - n))
    m = sum((hc & rc).values())
    nh, nr = sum(hc.values()), sum(rc.values())
    return (m / nh if nh else 0.0), (m / nr if nr else 0.0)
""")
ng("short_tail_grams", "wrong", "range(len(s)): counts the short tails as n-grams", """
from collections import Counter
def my_ngram_pr(hypothesis, reference, n):
    h = "".join(hypothesis.split()); r = "".join(reference.split())
    hc = Counter(h[i:i + n] for i in range(len(h)))
    rc = Counter(r[i:i + n] for i in range(len(r)))
    m = sum((hc & rc).values())
    nh, nr = sum(hc.values()), sum(rc.values())
    return (m / nh if nh else 0.0), (m / nr if nr else 0.0)
""")
ng("zero_division", "wrong", "divides by zero when a string has no n-grams", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    h = _grams("".join(hypothesis.split()), n)
    r = _grams("".join(reference.split()), n)
    m = sum(min(c, r[g]) for g, c in h.items())
    return m / sum(h.values()), m / sum(r.values())
""")
ng("percent", "wrong", "returns percentages", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    p, r = _pr(_grams("".join(hypothesis.split()), n), _grams("".join(reference.split()), n))
    return 100 * p, 100 * r
""")
ng("word_ngrams", "wrong", "word n-grams, not character n-grams", """
from collections import Counter
def my_ngram_pr(hypothesis, reference, n):
    h, r = hypothesis.split(), reference.split()
    hc = Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
    rc = Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
    m = sum((hc & rc).values())
    nh, nr = sum(hc.values()), sum(rc.values())
    return (m / nh if nh else 0.0), (m / nr if nr else 0.0)
""")
ng("lowercases", "wrong", "lowercases both strings; chrF is case-sensitive", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    h = "".join(hypothesis.lower().split()); r = "".join(reference.lower().split())
    return _pr(_grams(h, n), _grams(r, n))
""")
ng("keeps_whitespace", "wrong", "never removes whitespace", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    return _pr(_grams(hypothesis, n), _grams(reference, n))
""")
ng("f_score", "wrong", "returns one F-score instead of (P, R)", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    p, r = _pr(_grams("".join(hypothesis.split()), n), _grams("".join(reference.split()), n))
    return 0.0 if p + r == 0 else 5 * p * r / (4 * p + r)
""")
ng("right_counter_and", "right", "Counter & Counter gives the clipped matches", """
import collections
def my_ngram_pr(hypothesis, reference, n):
    def grams(s):
        s = "".join(s.split())
        return collections.Counter(s[i:i + n] for i in range(max(len(s) - n + 1, 0)))
    h, r = grams(hypothesis), grams(reference)
    matches = sum((h & r).values())
    total_h, total_r = sum(h.values()), sum(r.values())
    precision = matches / total_h if total_h > 0 else 0.0
    recall = matches / total_r if total_r > 0 else 0.0
    return precision, recall
""")
ng("right_regex_dict", "right", "re.sub for whitespace, a plain dict for counts", """
import re
def my_ngram_pr(hypothesis, reference, n):
    def counts(s):
        s = re.sub(r"\\s+", "", s)
        d = {}
        for i in range(len(s) - n + 1):
            d[s[i:i + n]] = d.get(s[i:i + n], 0) + 1
        return d
    h, r = counts(hypothesis), counts(reference)
    m = sum(min(c, r.get(g, 0)) for g, c in h.items())
    nh, nr = sum(h.values()), sum(r.values())
    return (m / nh) if nh else 0, (m / nr) if nr else 0
""")
ng("right_sorted_lists", "right", "sorted lists, a two-pointer match count", """
def my_ngram_pr(hypothesis, reference, n):
    def grams(s):
        s = "".join(ch for ch in s if not ch.isspace())
        return sorted(s[i:i + n] for i in range(len(s) - n + 1))
    h, r = grams(hypothesis), grams(reference)
    i = j = m = 0
    while i < len(h) and j < len(r):
        if h[i] == r[j]:
            m += 1; i += 1; j += 1
        elif h[i] < r[j]:
            i += 1
        else:
            j += 1
    return (m / len(h) if h else 0.0, m / len(r) if r else 0.0)
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "9.4": ("teacher_forcing", "my_teacher_forcing", "targets, bos_id, eos_id, pad_id"),
    "9.1": ("masked_cross_attention", "my_cross_attention", "q, k, v, src_key_mask"),
    "9.6": ("char_ngram_precision_recall", "my_ngram_pr", "hypothesis, reference, n"),
})


# ------------------------------------------------------------- batch 2 ---
tf("bos_in_targets", "wrong", "tgt_out = bos + y (the input again)", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    tin = _pad([[bos_id] + t for t in targets], T, pad_id)
    return tin, tin.clone()
""")
tf("pad_eos_swapped", "wrong", "pads with eos_id, ends with pad_id", _PAD + """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(len(t) for t in targets) + 1
    return (_pad([[bos_id] + t for t in targets], T, eos_id),
            _pad([t + [pad_id] for t in targets], T, eos_id))
""")
xa("mask_bool_as_float_add", "wrong", "adds the boolean mask as 0/1 to the scores", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]) + src_key_mask[:, None, :].float()
    w = torch.softmax(s, dim=-1)
    return w @ v, w
""")
xa("log_mask", "right", "adds log(mask): -inf at padding, 0 elsewhere", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    s = s + torch.log(src_key_mask.to(s.dtype))[:, None, :]
    w = torch.softmax(s, dim=-1)
    return w @ v, w
""")
ng("unicode_whitespace_kept", "wrong", "removes only ASCII spaces and tabs via a character set", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    strip = lambda s: "".join(ch for ch in s if ch not in " \\t")
    return _pr(_grams(strip(hypothesis), n), _grams(strip(reference), n))
""")
ng("none_when_empty", "wrong", "returns None instead of 0 when there are no n-grams", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    h = _grams("".join(hypothesis.split()), n)
    r = _grams("".join(reference.split()), n)
    m = sum(min(c, r[g]) for g, c in h.items())
    nh, nr = sum(h.values()), sum(r.values())
    return (m / nh if nh else None), (m / nr if nr else None)
""")


# =================================================== outside red team ===
# Cases for the exercises added with the renumbering (9.2 decoder block,
# 9.3 forward pass, 9.5 batched greedy, 9.7 next_chars) and a few more for
# 9.1, 9.4, 9.6; written from the student notebook only. The notebook
# imports `companion.exercises.seq2seq_extra as check`.
_EXTRA = "companion.exercises.seq2seq_extra"


def _xcase(exercise, checker, call, name, expect, why, source):
    CASES.append(dict(exercise=exercise, checker=checker, module=_EXTRA,
                      name="out_" + name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


def _variant(base, edits):
    src = base
    for old, new in edits:
        assert old in src, (old, base)
        src = src.replace(old, new, 1)
    return src


# ---------------------------------------------------------------- 9.2 ----
_DB = """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    h = x
    a, _ = block.attn(h, key_mask=tgt_key_mask, is_causal=True)
    h = block.norm1(h + block.dropout1(a))
    c, _ = block.cross_attn(h, memory, memory, key_mask=src_key_mask)
    h = block.norm2(h + block.dropout2(c))
    f = block.ff(h)
    h = block.norm3(h + block.dropout3(f))
    return h
"""


def db(name, expect, why, source):
    _xcase("9.2", "decoder_block", "my_decoder_block", name, expect, why,
           source)


def dbv(name, why, *edits, expect="wrong"):
    db(name, expect, why, _variant(_DB, edits))


dbv("pre_norm", "pre-norm: x + sublayer(norm(x)) in all three sublayers",
    ("a, _ = block.attn(h,", "a, _ = block.attn(block.norm1(h),"),
    ("h = block.norm1(h + block.dropout1(a))", "h = h + block.dropout1(a)"),
    ("block.cross_attn(h, memory", "block.cross_attn(block.norm2(h), memory"),
    ("h = block.norm2(h + block.dropout2(c))", "h = h + block.dropout2(c)"),
    ("f = block.ff(h)", "f = block.ff(block.norm3(h))"),
    ("h = block.norm3(h + block.dropout3(f))", "h = h + block.dropout3(f)"))
dbv("no_residual_self", "self-attention sublayer without its residual",
    ("block.norm1(h + block.dropout1(a))", "block.norm1(block.dropout1(a))"))
dbv("no_residual_cross", "cross-attention sublayer without its residual",
    ("block.norm2(h + block.dropout2(c))", "block.norm2(block.dropout2(c))"))
dbv("no_residual_ff", "feed-forward sublayer without its residual",
    ("block.norm3(h + block.dropout3(f))", "block.norm3(block.dropout3(f))"))
dbv("norms_1_2_swapped", "norm2 after self-attention, norm1 after cross-attention",
    ("block.norm1(h + block.dropout1(a))", "block.norm2(h + block.dropout1(a))"),
    ("block.norm2(h + block.dropout2(c))", "block.norm1(h + block.dropout2(c))"))
dbv("norm1_everywhere", "the same LayerNorm (norm1) for all three sublayers",
    ("block.norm2(h + block.dropout2(c))", "block.norm1(h + block.dropout2(c))"),
    ("block.norm3(h + block.dropout3(f))", "block.norm1(h + block.dropout3(f))"))
dbv("norm_inside_residual", "x + norm(sublayer(x)): the norm on the branch, not on the sum",
    ("block.norm1(h + block.dropout1(a))", "h + block.norm1(block.dropout1(a))"),
    ("block.norm2(h + block.dropout2(c))", "h + block.norm2(block.dropout2(c))"),
    ("block.norm3(h + block.dropout3(f))", "h + block.norm3(block.dropout3(f))"))
dbv("no_causal", "self-attention without the causal mask",
    ("is_causal=True", "is_causal=False"))
dbv("causal_inverted", "a causal mask pointing the wrong way: each position sees itself and the future",
    ("a, _ = block.attn(h, key_mask=tgt_key_mask, is_causal=True)",
     "T = h.shape[1]\n    fut = torch.ones(T, T, dtype=torch.bool).triu()\n"
     "    a, _ = block.attn(h, key_mask=tgt_key_mask, attn_mask=fut)"))
dbv("causal_cross_too", "also a causal mask on the cross-attention",
    ("key_mask=src_key_mask)", "key_mask=src_key_mask, is_causal=True)"))
dbv("masks_swapped", "source mask in the self-attention, target mask in the cross-attention",
    ("key_mask=tgt_key_mask, is_causal", "key_mask=src_key_mask, is_causal"),
    ("key_mask=src_key_mask)", "key_mask=tgt_key_mask)"))
dbv("tgt_mask_inverted", "target key mask inverted (PyTorch's True = padding)",
    ("key_mask=tgt_key_mask,", "key_mask=~tgt_key_mask,"))
dbv("src_mask_inverted", "source key mask inverted (PyTorch's True = padding)",
    ("key_mask=src_key_mask)", "key_mask=~src_key_mask)"))
dbv("no_tgt_mask", "no target key mask (causal only)",
    ("key_mask=tgt_key_mask, ", ""))
dbv("no_src_mask", "no source key mask: padded source positions attended",
    (", key_mask=src_key_mask)", ")"))
dbv("float_key_mask_added", "the bool masks turned into 0/1 floats and added to the scores",
    ("a, _ = block.attn(h, key_mask=tgt_key_mask, is_causal=True)",
     "a, _ = block.attn(h, attn_mask=tgt_key_mask[:, None, :].float(), is_causal=True)"),
    ("key_mask=src_key_mask)", "attn_mask=src_key_mask[:, None, :].float())"))
dbv("cross_kv_from_decoder", "cross-attention keys and values from the target, not the memory",
    ("block.cross_attn(h, memory, memory, key_mask=src_key_mask)",
     "block.cross_attn(h, h, h, key_mask=tgt_key_mask)"))
dbv("cross_query_from_input", "cross-attention queries from the block's input x, not from LN1's output",
    ("block.cross_attn(h, memory", "block.cross_attn(x, memory"))
dbv("ff_residual_from_input", "the feed-forward residual adds the block's input, not c",
    ("block.norm3(h + block.dropout3(f))", "block.norm3(x + block.dropout3(f))"))
dbv("order_cross_first", "cross-attention before self-attention",
    ("    a, _ = block.attn(h, key_mask=tgt_key_mask, is_causal=True)\n"
     "    h = block.norm1(h + block.dropout1(a))\n"
     "    c, _ = block.cross_attn(h, memory, memory, key_mask=src_key_mask)\n"
     "    h = block.norm2(h + block.dropout2(c))\n",
     "    c, _ = block.cross_attn(h, memory, memory, key_mask=src_key_mask)\n"
     "    h = block.norm2(h + block.dropout2(c))\n"
     "    a, _ = block.attn(h, key_mask=tgt_key_mask, is_causal=True)\n"
     "    h = block.norm1(h + block.dropout1(a))\n"))
dbv("parallel_sublayers", "all three sublayers read x, one sum, one norm",
    ("h = block.norm1(h + block.dropout1(a))", "a = block.dropout1(a)"),
    ("block.cross_attn(h, memory", "block.cross_attn(x, memory"),
    ("h = block.norm2(h + block.dropout2(c))", "c = block.dropout2(c)"),
    ("f = block.ff(h)", "f = block.ff(x)"),
    ("h = block.norm3(h + block.dropout3(f))", "h = block.norm3(x + a + c + block.dropout3(f))"))
dbv("dropout_after_sum", "dropout on the residual sum instead of the sublayer's output",
    ("block.norm1(h + block.dropout1(a))", "block.norm1(block.dropout1(h + a))"),
    ("block.norm2(h + block.dropout2(c))", "block.norm2(block.dropout2(h + c))"),
    ("block.norm3(h + block.dropout3(f))", "block.norm3(block.dropout3(h + f))"))
dbv("dropout_after_norm", "dropout after the LayerNorm",
    ("block.norm1(h + block.dropout1(a))", "block.dropout1(block.norm1(h + a))"),
    ("block.norm2(h + block.dropout2(c))", "block.dropout2(block.norm2(h + c))"),
    ("block.norm3(h + block.dropout3(f))", "block.dropout3(block.norm3(h + f))"))
dbv("no_dropout", "leaves the three dropouts out (right only in eval mode)",
    ("block.dropout1(a)", "a"), ("block.dropout2(c)", "c"), ("block.dropout3(f)", "f"))
dbv("dropouts_reversed", "dropout3 on self-attention, dropout1 on the feed-forward",
    ("block.dropout1(a)", "block.dropout3(a)"), ("block.dropout3(f)", "block.dropout1(f)"))
dbv("own_dropout", "F.dropout with its own draw instead of the block's modules",
    ("block.dropout1(a)", "torch.nn.functional.dropout(a, block.dropout1.p, block.training)"),
    ("block.dropout2(c)", "torch.nn.functional.dropout(c, block.dropout2.p, block.training)"),
    ("block.dropout3(f)", "torch.nn.functional.dropout(f, block.dropout3.p, block.training)"))
dbv("forces_eval", "calls block.eval(): changes the caller's block and drops dropout in training",
    ("    h = x\n", "    block.eval()\n    h = x\n"))
dbv("in_place_residual", "x += ...: the residual sum overwrites the caller's x",
    ("h = block.norm1(h + block.dropout1(a))", "h += block.dropout1(a)\n    h = block.norm1(h)"))
dbv("in_place_mask", "writes into the caller's target mask (marks the last position real, in place)",
    ("    h = x\n", "    tgt_key_mask[:, -1] = True\n    h = x\n"))
dbv("seq_first", "transposes to (T, B, d) as for PyTorch's default layout, attention mixes the batch",
    ("    h = x\n", "    h = x.transpose(0, 1).contiguous()\n    memory = memory.transpose(0, 1).contiguous()\n"
     ""),
    ("key_mask=tgt_key_mask, is_causal=True", "is_causal=False"),
    ("key_mask=src_key_mask)", ")"),
    ("    return h", "    return h.transpose(0, 1)"))
dbv("returns_pair", "returns (out, weights) like an attention module",
    ("    return h", "    return h, None"))
dbv("detached", "runs under torch.no_grad(): no gradient reaches the block's weights",
    ("    h = x\n", "    with torch.no_grad():\n        return _inner(x, memory, block, tgt_key_mask, src_key_mask)\n"
     "def _inner(x, memory, block, tgt_key_mask, src_key_mask):\n    h = x\n"))
db("calls_block", "wrong", "calls block(...) itself, which the text forbids", """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    return block(x, memory, key_mask=tgt_key_mask, is_causal=True, memory_key_mask=src_key_mask)
""")
db("calls_forward", "wrong", "block.forward(...): the forbidden call under another name", """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    return block.forward(x, memory, key_mask=tgt_key_mask, memory_key_mask=src_key_mask)
""")
db("calls_class_forward", "wrong", "type(block).forward(block, ...): evades a check on block.__call__", """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    fwd = getattr(type(block), "for" + "ward")
    return fwd(block, x, memory, key_mask=tgt_key_mask, memory_key_mask=src_key_mask)
""")
db("torch_layer", "wrong", "builds nn.TransformerDecoderLayer without copying the block's weights", """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    d = x.shape[-1]
    layer = nn.TransformerDecoderLayer(d, block.n_heads, block.d_ff, dropout=0.0, batch_first=True)
    T = x.shape[1]
    return layer(x, memory, tgt_mask=nn.Transformer.generate_square_subsequent_mask(T),
                 tgt_key_padding_mask=~tgt_key_mask, memory_key_padding_mask=~src_key_mask)
""")
db("right_attn_mask_causal", "right", "an explicit bool (T, T) lower-triangular attn_mask instead of is_causal", _variant(_DB, [
    ("a, _ = block.attn(h, key_mask=tgt_key_mask, is_causal=True)",
     "T = h.shape[1]\n    causal = torch.tril(torch.ones(T, T, dtype=torch.bool, device=h.device))\n"
     "    a, _ = block.attn(h, attn_mask=causal, key_mask=tgt_key_mask)")]))
db("right_combined_masks", "right", "causal and key masks combined into one (B, T, T) / (B, T, S) attn_mask", """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    T, S = x.shape[1], memory.shape[1]
    self_mask = torch.ones(T, T, dtype=torch.bool).tril()[None] & tgt_key_mask[:, None, :]
    cross_mask = src_key_mask[:, None, :].expand(-1, T, S)
    a = block.attn(x, attn_mask=self_mask)[0]
    x1 = block.norm1(x + block.dropout1(a))
    c = block.cross_attn(x1, memory, memory, attn_mask=cross_mask)[0]
    x2 = block.norm2(x1 + block.dropout2(c))
    return block.norm3(x2 + block.dropout3(block.ff(x2)))
""")
db("right_float_mask", "right", "an additive float mask (0 / -inf) for the self-attention", """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    B, T, _ = x.shape
    allowed = torch.ones(T, T, dtype=torch.bool).tril() & tgt_key_mask[:, None, :]   # (B, T, T)
    add = torch.zeros(B, 1, T, T, dtype=x.dtype).masked_fill(~allowed[:, None], float("-inf"))
    out = block.attn(x, attn_mask=add)[0]
    x = block.norm1(x + block.dropout1(out))
    out = block.cross_attn(x, memory, memory, key_mask=src_key_mask)[0]
    x = block.norm2(x + block.dropout2(out))
    out = block.ff(x)
    return block.norm3(x + block.dropout3(out))
""")
db("right_loop_of_sublayers", "right", "a loop over (sublayer, dropout, norm) triples", """
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    steps = [
        (lambda h: block.attn(h, key_mask=tgt_key_mask, is_causal=True)[0], block.dropout1, block.norm1),
        (lambda h: block.cross_attn(h, memory, memory, key_mask=src_key_mask)[0], block.dropout2, block.norm2),
        (block.ff, block.dropout3, block.norm3),
    ]
    for sublayer, drop, norm in steps:
        x = norm(x + drop(sublayer(x)))
    return x
""")
db("right_functional_layer_norm", "right", "F.layer_norm with the norms' parameters; value defaults to key", """
import torch.nn.functional as F
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    def ln(norm, t):
        return F.layer_norm(t, norm.normalized_shape if hasattr(norm, "normalized_shape") else (t.shape[-1],),
                            norm.weight, norm.bias, norm.eps)
    a = block.attn(x, x, x, key_mask=tgt_key_mask, is_causal=True, need_weights=True)[0]
    x = ln(block.norm1, x + block.dropout1(a))
    c = block.cross_attn(x, memory, key_mask=src_key_mask)[0]
    x = ln(block.norm2, x + block.dropout2(c))
    return ln(block.norm3, x + block.dropout3(block.ff(x)))
""")
db("right_by_hand_heads", "right", "arguable: multi-head attention by hand from q/k/v/out_proj (no attention-weight dropout)", """
def _mha(m, q_in, kv_in, keep):
    B, T, C = q_in.shape
    S, h = kv_in.shape[1], m.n_heads
    q = m.q_proj(q_in).view(B, T, h, -1).transpose(1, 2)
    k = m.k_proj(kv_in).view(B, S, h, -1).transpose(1, 2)
    v = m.v_proj(kv_in).view(B, S, h, -1).transpose(1, 2)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    s = s.masked_fill(~keep, float("-inf"))
    w = torch.softmax(s, -1)
    return m.out_proj((w @ v).transpose(1, 2).reshape(B, T, C))
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    T = x.shape[1]
    self_keep = torch.ones(T, T, dtype=torch.bool).tril()[None, None] & tgt_key_mask[:, None, None, :]
    x = block.norm1(x + block.dropout1(_mha(block.attn, x, x, self_keep)))
    x = block.norm2(x + block.dropout2(_mha(block.cross_attn, x, memory, src_key_mask[:, None, None, :])))
    return block.norm3(x + block.dropout3(block.ff(x)))
""")


# ---------------------------------------------------------------- 9.3 ----
_FW = """
def my_seq2seq_forward(model, src, tgt):
    c = model.config
    d = c.d_model
    keep = src != c.pad_id
    S, T = src.shape[1], tgt.shape[1]
    h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)
    for block in model.encoder.blocks:
        h = block(h, key_mask=keep)
    memory = model.encoder.norm(h)
    g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(T, d)
    for block in model.decoder.blocks:
        g = block(g, memory, is_causal=True, memory_key_mask=keep)
    g = model.decoder.norm(g)
    return model.head(g)
"""


def fw(name, expect, why, source):
    _xcase("9.3", "seq2seq_forward", "my_seq2seq_forward", name, expect, why,
           source)


def fwv(name, why, *edits, expect="wrong"):
    fw(name, expect, why, _variant(_FW, edits))


fwv("no_scale", "forgets the sqrt(d) scale on both embeddings",
    ("model.src_emb(src) * math.sqrt(d)", "model.src_emb(src)"),
    ("model.tgt_emb(tgt) * math.sqrt(d)", "model.tgt_emb(tgt)"))
fwv("no_scale_target", "scales the source embedding only",
    ("model.tgt_emb(tgt) * math.sqrt(d)", "model.tgt_emb(tgt)"))
fwv("scale_twice", "scales the sum (embedding + positions) by sqrt(d) as well",
    ("h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)",
     "h = (model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)) * math.sqrt(d)"),
    ("g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(T, d)",
     "g = (model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(T, d)) * math.sqrt(d)"))
fwv("scale_sum", "(E[x] + P) * sqrt(d): the positions scaled too",
    ("h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)",
     "h = (model.src_emb(src) + sinusoidal_encoding(S, d)) * math.sqrt(d)"),
    ("g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(T, d)",
     "g = (model.tgt_emb(tgt) + sinusoidal_encoding(T, d)) * math.sqrt(d)"))
fwv("divide_scale", "divides by sqrt(d)",
    ("model.src_emb(src) * math.sqrt(d)", "model.src_emb(src) / math.sqrt(d)"),
    ("model.tgt_emb(tgt) * math.sqrt(d)", "model.tgt_emb(tgt) / math.sqrt(d)"))
fwv("scale_by_d", "multiplies by d instead of sqrt(d)",
    ("model.src_emb(src) * math.sqrt(d)", "model.src_emb(src) * d"),
    ("model.tgt_emb(tgt) * math.sqrt(d)", "model.tgt_emb(tgt) * d"))
fwv("no_positions_target", "no positions on the target side",
    ("g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(T, d)",
     "g = model.tgt_emb(tgt) * math.sqrt(d)"))
fwv("no_positions_source", "no positions on the source side",
    ("h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)",
     "h = model.src_emb(src) * math.sqrt(d)"))
fwv("target_positions_from_1", "target positions start at 1 (the <s> counted as position -1)",
    ("sinusoidal_encoding(T, d)", "sinusoidal_encoding(T + 1, d)[1:]"))
fwv("target_positions_after_source", "target positions continue after the source's",
    ("sinusoidal_encoding(T, d)", "sinusoidal_encoding(S + T, d)[S:]"))
fwv("positions_over_batch", "batch-first confusion: one position per batch row",
    ("+ sinusoidal_encoding(S, d)", "+ sinusoidal_encoding(src.shape[0], d)[:, None, :]"),
    ("+ sinusoidal_encoding(T, d)", "+ sinusoidal_encoding(tgt.shape[0], d)[:, None, :]"))
fwv("no_encoder_mask", "encoder self-attention sees the padding",
    ("h = block(h, key_mask=keep)", "h = block(h)"))
fwv("no_cross_mask", "cross-attention sees the padding",
    (", memory_key_mask=keep)", ")"))
fwv("mask_inverted", "keep = src == pad_id",
    ("keep = src != c.pad_id", "keep = src == c.pad_id\n    keep[:, 0] = True"))
fwv("pad_id_zero", "hard-codes pad id 0",
    ("keep = src != c.pad_id", "keep = src != 0\n    keep[:, 0] = True"))
fwv("not_causal", "decoder self-attention without the causal mask",
    ("is_causal=True", "is_causal=False"))
fwv("tgt_key_mask_added", "arguable, judged right: also masks the padded target keys, which the text's pass does not. "
    "Targets are padded on the right only (teacher forcing), so under the causal mask only the padded positions' "
    "logits change, and the loss ignores those (their target is padding too): training is unchanged, as with "
    "model(src, tgt, tgt_key_mask=...). The check's targets hold padding and it compares the non-pad positions",
    ("g = block(g, memory, is_causal=True, memory_key_mask=keep)",
     "tk = tgt != c.pad_id\n        tk[:, 0] = True\n        g = block(g, memory, is_causal=True, key_mask=tk, memory_key_mask=keep)"),
    expect="right")
fwv("src_table_for_target", "embeds the target with the source table",
    ("model.tgt_emb(tgt)", "model.src_emb(tgt)"))
fwv("tgt_table_for_source", "embeds the source with the target table",
    ("model.src_emb(src)", "model.tgt_emb(src)"))
fwv("head_from_src_emb", "output layer tied to the source embedding",
    ("return model.head(g)", "return g @ model.src_emb.weight.T"))
fwv("head_scaled", "divides the logits by sqrt(d) (tied head 'undone')",
    ("return model.head(g)", "return model.head(g) / math.sqrt(d)"))
fwv("no_encoder_norm", "memory without the encoder's final LayerNorm",
    ("memory = model.encoder.norm(h)", "memory = h"))
fwv("no_decoder_norm", "no final decoder LayerNorm",
    ("g = model.decoder.norm(g)\n", ""))
fwv("norms_swapped", "decoder.norm on the memory, encoder.norm on the decoder output",
    ("memory = model.encoder.norm(h)", "memory = model.decoder.norm(h)"),
    ("g = model.decoder.norm(g)", "g = model.encoder.norm(g)"))
fwv("norm_every_block", "applies the final norm after every encoder block",
    ("h = block(h, key_mask=keep)", "h = model.encoder.norm(block(h, key_mask=keep))"))
fwv("memory_unnormed_used", "computes the normed memory but feeds the raw h to the decoder",
    ("g = block(g, memory, is_causal", "g = block(g, h, is_causal"))
fwv("encoder_not_chained", "every encoder block reads the embeddings: only the last counts",
    ("    for block in model.encoder.blocks:\n        h = block(h, key_mask=keep)\n",
     "    e = h\n    for block in model.encoder.blocks:\n        h = block(e, key_mask=keep)\n"))
fwv("decoder_blocks_reversed", "decoder blocks in reverse order",
    ("for block in model.decoder.blocks:", "for block in reversed(model.decoder.blocks):"))
fwv("first_decoder_block_only", "only the first decoder block",
    ("for block in model.decoder.blocks:", "for block in model.decoder.blocks[:1]:"))
fwv("returns_softmax", "returns probabilities, not logits",
    ("return model.head(g)", "return model.head(g).softmax(-1)"))
fwv("returns_log_softmax", "returns log-probabilities",
    ("return model.head(g)", "return torch.log_softmax(model.head(g), -1)"))
fwv("detach_memory", "memory.detach(): no gradient reaches the encoder (the live training uses this pass)",
    ("memory = model.encoder.norm(h)", "memory = model.encoder.norm(h).detach()"))
fwv("no_grad", "the whole pass under torch.no_grad(): nothing trains",
    ("    c = model.config\n", "    with torch.no_grad():\n        return _fw(model, src, tgt)\ndef _fw(model, src, tgt):\n    c = model.config\n"))
fwv("returns_pair", "returns (logits, None) like the model",
    ("return model.head(g)", "return model.head(g), None"))
fwv("scales_weights_in_place", "multiplies the embedding tables by sqrt(d) in place: the model changes at every call",
    ("h = model.src_emb(src) * math.sqrt(d)", "with torch.no_grad():\n        model.src_emb.weight.mul_(math.sqrt(d))\n        model.tgt_emb.weight.mul_(math.sqrt(d))\n    h = model.src_emb(src)"),
    ("g = model.tgt_emb(tgt) * math.sqrt(d)", "g = model.tgt_emb(tgt)"),
    ("return model.head(g)", "out = g @ (model.tgt_emb.weight / math.sqrt(d)).T\n"
     "    with torch.no_grad():\n        model.src_emb.weight.div_(math.sqrt(d) ** 0.5)\n"
     "        model.tgt_emb.weight.div_(math.sqrt(d) ** 0.5)\n    return out"))
fwv("scales_tables_once", "multiplies the embedding tables by sqrt(d) in place and never restores them: right once, wrong from the second call on, and the model is changed",
    ("h = model.src_emb(src) * math.sqrt(d)", "with torch.no_grad():\n        model.src_emb.weight.mul_(math.sqrt(d))\n        model.tgt_emb.weight.mul_(math.sqrt(d))\n    h = model.src_emb(src)"),
    ("g = model.tgt_emb(tgt) * math.sqrt(d)", "g = model.tgt_emb(tgt)"),
    ("return model.head(g)", "return g @ model.tgt_emb.weight.T / math.sqrt(d)"))
fwv("detach_source_embeddings", "detaches the source embeddings: src_emb never trains",
    ("h = model.src_emb(src) * math.sqrt(d)", "h = model.src_emb(src).detach() * math.sqrt(d)"))
fwv("encoder_no_grad", "runs the encoder under torch.no_grad(): no encoder weight trains",
    ("    h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)\n    for block in model.encoder.blocks:\n        h = block(h, key_mask=keep)\n    memory = model.encoder.norm(h)\n",
     "    with torch.no_grad():\n        h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)\n        for block in model.encoder.blocks:\n            h = block(h, key_mask=keep)\n        memory = model.encoder.norm(h)\n"))
fw("calls_model", "wrong", "calls model(...), which the text forbids", """
def my_seq2seq_forward(model, src, tgt):
    return model(src, tgt)[0]
""")
fw("calls_encode_decode", "wrong", "model.decode(tgt, model.encode(src)): forbidden", """
def my_seq2seq_forward(model, src, tgt):
    keep = src != model.config.pad_id
    return model.decode(tgt, model.encode(src), memory_key_mask=keep)
""")
fw("calls_embed", "wrong", "uses the forbidden embed_source / embed_target", """
def my_seq2seq_forward(model, src, tgt):
    keep = src != model.config.pad_id
    h = model.embed_source(src)
    for b in model.encoder.blocks:
        h = b(h, key_mask=keep)
    memory = model.encoder.norm(h)
    g = model.embed_target(tgt)
    for b in model.decoder.blocks:
        g = b(g, memory, is_causal=True, memory_key_mask=keep)
    return model.head(model.decoder.norm(g))
""")
fw("class_forward", "wrong", "type(model).forward(model, ...): the forbidden call under another name", """
def my_seq2seq_forward(model, src, tgt):
    return getattr(type(model), "forward")(model, src, tgt)[0]
""")
fwv("right_pos_module", "uses the model's own position module model.pos instead of sinusoidal_encoding",
    ("h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(S, d)", "h = model.pos(model.src_emb(src) * math.sqrt(d))"),
    ("g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(T, d)", "g = model.pos(model.tgt_emb(tgt) * math.sqrt(d))"),
    expect="right")
fw("right_stacks", "right", "arguable: the stacks model.encoder(...) and model.decoder(...) (final norms inside), not banned by the text", """
def my_seq2seq_forward(model, src, tgt):
    d = model.config.d_model
    keep = src.ne(model.config.pad_id)
    P = sinusoidal_encoding(model.config.context_length, d)
    x = model.src_emb(src) * d ** 0.5 + P[: src.shape[1]]
    memory = model.encoder(x, key_mask=keep)
    y = model.tgt_emb(tgt) * d ** 0.5 + P[: tgt.shape[1]]
    return model.head(model.decoder(y, memory, memory_key_mask=keep))
""")
fw("right_functional", "right", "F.embedding, a table cut from a longer one, F.linear with the tied weight, model.drop kept", """
import torch.nn.functional as F
def my_seq2seq_forward(model, src, tgt):
    cfg = model.config
    d = model.tgt_emb.embedding_dim
    table = sinusoidal_encoding(cfg.context_length, d)
    keep = model.source_key_mask(src)
    def embed(emb, ids):
        return model.drop(F.embedding(ids, emb.weight) * math.sqrt(d) + table[: ids.shape[1]])
    mem = embed(model.src_emb, src)
    for layer in model.encoder.blocks:
        mem = layer(mem, key_mask=keep)
    mem = model.encoder.norm(mem)
    out = embed(model.tgt_emb, tgt)
    for layer in model.decoder.blocks:
        out = layer(out, mem, is_causal=True, memory_key_mask=keep)
    return F.linear(model.decoder.norm(out), model.head.weight)
""")
fw("right_mask_none_unpadded", "right", "passes no mask when nothing is padded, like the model", _variant(_FW, [
    ("keep = src != c.pad_id", "keep = src != c.pad_id\n    keep = None if bool(keep.all()) else keep")]))
fw("right_positions_by_hand", "right", "the sinusoidal table written out by hand", """
def _table(n, d):
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    i = torch.arange(0, d, 2, dtype=torch.float64)
    ang = pos / (10000.0 ** (i / d))
    P = torch.zeros(n, d, dtype=torch.float64)
    P[:, 0::2], P[:, 1::2] = torch.sin(ang), torch.cos(ang)
    return P.float()
def my_seq2seq_forward(model, src, tgt):
    d = model.config.d_model
    keep = src != model.config.pad_id
    h = model.src_emb.weight[src] * math.sqrt(d) + _table(src.shape[1], d)
    for blk in model.encoder.blocks:
        h = blk(h, key_mask=keep)
    m = model.encoder.norm(h)
    g = model.tgt_emb.weight[tgt] * math.sqrt(d) + _table(tgt.shape[1], d)
    for blk in model.decoder.blocks:
        g = blk(g, m, is_causal=True, memory_key_mask=keep)
    return model.decoder.norm(g) @ model.tgt_emb.weight.T
""")
fw("right_explicit_causal", "right", "decoder blocks given an explicit causal attn_mask", _variant(_FW, [
    ("g = block(g, memory, is_causal=True, memory_key_mask=keep)",
     "g = block(g, memory, is_causal=False, attn_mask=torch.ones(T, T, dtype=torch.bool).tril(), memory_key_mask=keep)")]))


# ---------------------------------------------------------------- 9.5 ----
_GR = """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    keep = src != pad
    memory = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long)
    done = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model.decode(ys, memory, memory_key_mask=keep)[:, -1]
        nxt = logits.argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if bool(done.all()):
            break
    return ys[:, 1:]
"""


def gr(name, expect, why, source):
    _xcase("9.5", "batched_greedy", "my_greedy_translate", name, expect, why,
           source)


def grv(name, why, *edits, expect="wrong"):
    gr(name, expect, why, _variant(_GR, edits))


grv("no_per_row_stop", "rows go on after their </s>",
    ("        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)\n", ""))
grv("eos_dropped", "the </s> itself replaced by pad",
    ("        nxt = torch.where(done, torch.full_like(nxt, pad), nxt)\n",
     "        nxt = torch.where(done | (nxt == eos_id), torch.full_like(nxt, pad), nxt)\n"))
grv("eos_after_eos", "fills finished rows with eos_id (as chapter 8's greedy does), not pad",
    ("torch.full_like(nxt, pad)", "torch.full_like(nxt, eos_id)"))
grv("pad_zero", "hard-codes pad id 0",
    ("pad = model.config.pad_id", "pad = 0"))
grv("mask_pad_zero", "hard-codes pad id 0 in the source mask only",
    ("keep = src != pad", "keep = src != 0\n    keep[:, 0] = True"))
grv("first_position_logits", "takes the logits of the first position",
    ("memory_key_mask=keep)[:, -1]", "memory_key_mask=keep)[:, 0]"))
grv("ignores_max_new_tokens", "runs to the context length whatever max_new_tokens says",
    ("for _ in range(max_new_tokens):", "for _ in range(model.config.context_length - 1):"))
grv("one_too_many", "max_new_tokens + 1 new tokens",
    ("for _ in range(max_new_tokens):", "for _ in range(max_new_tokens + 1):\n        if ys.shape[1] >= model.config.context_length:\n            break"))
grv("one_too_few", "max_new_tokens - 1 new tokens",
    ("for _ in range(max_new_tokens):", "for _ in range(max_new_tokens - 1):"))
grv("no_memory_mask", "decodes without the source mask: padding leaks into cross-attention",
    ("memory_key_mask=keep)", ")"))
grv("encoder_unmasked", "encodes with everything marked real: the encoder attends to padding",
    ("memory = model.encode(src)", "memory = model.encode(src, src_key_mask=torch.ones_like(keep))"))
grv("returns_list", "returns a list of lists",
    ("    return ys[:, 1:]", "    return ys[:, 1:].tolist()"))
grv("returns_trimmed_rows", "returns a list of per-row tensors cut at their </s>",
    ("    return ys[:, 1:]", "    return [r[r != pad] for r in ys[:, 1:]]"))
grv("keeps_bos", "keeps the <s> column",
    ("    return ys[:, 1:]", "    return ys"))
grv("always_max_columns", "never stops early: L = max_new_tokens even when every row has ended",
    ("        if bool(done.all()):\n            break\n", ""))
grv("stops_at_first_row", "stops as soon as any row has ended",
    ("if bool(done.all()):", "if bool(done.any()):"))
grv("done_not_sticky", "'ended' means 'last token is </s>': a row restarts after its pad",
    ("done = done | (nxt == eos_id)", "done = nxt == eos_id"))
grv("int32_output", "returns int32, not a LongTensor",
    ("    return ys[:, 1:]", "    return ys[:, 1:].int()"))
grv("samples", "samples from the softmax instead of taking the argmax",
    ("nxt = logits.argmax(-1)", "nxt = torch.multinomial(logits.softmax(-1), 1)[:, 0]"))
grv("only_last_token_fed", "feeds only the last token each step (no history, position 0 every time)",
    ("model.decode(ys, memory", "model.decode(ys[:, -1:], memory"))
grv("bos_hard_coded", "starts with token 1, not bos_id",
    ("torch.full((B, 1), bos_id,", "torch.full((B, 1), 1,"))
grv("eos_hard_coded", "stops at token 2, not eos_id",
    ("done = done | (nxt == eos_id)", "done = done | (nxt == 2)"))
grv("left_aligned_padding", "puts each row's padding on the left",
    ("    return ys[:, 1:]",
     "    out = ys[:, 1:]\n    rows = []\n    for r in out:\n        n = int((r != pad).sum())\n"
     "        rows.append(torch.cat([r[n:], r[:n]]))\n    return torch.stack(rows)"))
grv("argmax_over_batch", "argmax over the batch dimension",
    ("nxt = logits.argmax(-1)", "nxt = logits.argmax(0)[:B] if logits.shape[1] >= B else logits.argmax(-1)"))
grv("in_place_src", "overwrites the caller's padding with eos_id (masked anyway, but src changes)",
    ("    memory = model.encode(src)", "    src[~keep] = eos_id\n    memory = model.encode(src, keep)"))
gr("uses_greedy", "wrong", "chapter 8's greedy on conditioned_on, eos padding turned into pad: forbidden by the text", """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    start = torch.full((src.shape[0], 1), bos_id)
    out = greedy(model.conditioned_on(src), start, max_new_tokens, eos_id=eos_id)[:, 1:]
    after = (out == eos_id).long().cumsum(1) - (out == eos_id).long() > 0
    return out.masked_fill(after, model.config.pad_id)
""")
gr("uses_translate_module", "wrong", "decoding.greedy via the module and ConditionalLM built by hand: same ban, evaded", """
from companion.seq2seq import ConditionalLM
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    keep = src != model.config.pad_id
    lm = ConditionalLM(model, model.encode(src), keep)
    out = getattr(decoding, "gre" + "edy")(lm, torch.full((src.shape[0], 1), bos_id), max_new_tokens, eos_id=eos_id)[:, 1:]
    after = (out == eos_id).long().cumsum(1) - (out == eos_id).long() > 0
    return out.masked_fill(after, model.config.pad_id)
""")
gr("right_prealloc", "right", "a preallocated pad-filled output and per-row lengths", """
@torch.no_grad()
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    mask = model.source_key_mask(src)
    memory = model.encode(src)
    B = src.size(0)
    out = torch.full((B, max_new_tokens), pad, dtype=torch.long)
    ys = torch.full((B, 1), bos_id, dtype=torch.long)
    alive = torch.ones(B, dtype=torch.bool)
    steps = 0
    while steps < max_new_tokens and alive.any():
        tok = model.decode(ys, memory, memory_key_mask=mask)[:, -1].argmax(dim=-1)
        out[alive, steps] = tok[alive]
        ys = torch.cat([ys, tok.unsqueeze(1)], 1)
        alive &= tok != eos_id
        steps += 1
    return out[:, :steps]
""")
gr("right_postprocess", "right", "runs finished rows on freely, then pads everything after the first </s> and trims", """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    memory = model.encode(src)
    keep = src != pad
    ys = torch.full((src.shape[0], 1), bos_id)
    for _ in range(max_new_tokens):
        step = model.decode(ys, memory, memory_key_mask=keep)[:, -1]
        ys = torch.cat([ys, step.argmax(-1, keepdim=True)], 1)
        if ((ys[:, 1:] == eos_id).any(1)).all():
            break
    new = ys[:, 1:]
    is_eos = (new == eos_id).long()
    after = (is_eos.cumsum(1) - is_eos) > 0
    new = new.masked_fill(after, pad)
    return new.long()
""")
gr("right_cache", "right", "the model's cache: new_cache + decode(last token, cache=...)", """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    keep = src != pad
    memory = model.encode(src, keep)
    cache = model.new_cache(memory, keep)
    B = src.shape[0]
    last = torch.full((B, 1), bos_id, dtype=torch.long)
    cols, ended = [], torch.zeros(B, dtype=torch.bool)
    for _ in range(max_new_tokens):
        nxt = model.decode(last, cache=cache)[:, -1].argmax(-1)
        nxt[ended] = pad
        cols.append(nxt)
        ended |= nxt == eos_id
        last = nxt[:, None]
        if ended.all():
            break
    if not cols:
        return torch.zeros(B, 0, dtype=torch.long)
    return torch.stack(cols, 1)
""")
gr("right_python_lists", "right", "python lists per row, padded at the end", """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    memory = model.encode(src)
    B = len(src)
    rows = [[] for _ in range(B)]
    finished = [False] * B
    ys = torch.tensor([[bos_id]] * B)
    n = 0
    while n < max_new_tokens and not all(finished):
        best = model.decode(ys, memory, memory_key_mask=(src != pad))[:, -1].argmax(-1).tolist()
        for b in range(B):
            if not finished[b]:
                rows[b].append(best[b])
                finished[b] = best[b] == eos_id
        ys = torch.cat([ys, torch.tensor(best)[:, None]], 1)
        n += 1
    L = max((len(r) for r in rows), default=0)
    return torch.tensor([r + [pad] * (L - len(r)) for r in rows], dtype=torch.long).reshape(B, L)
""")
gr("right_active_rows", "right", "decodes only the rows still running, their memory rows picked out", """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    keep = src != pad
    memory = model.encode(src)
    B = src.shape[0]
    ys = torch.full((B, 1), bos_id, dtype=torch.long)
    active = torch.arange(B)
    for _ in range(max_new_tokens):
        if active.numel() == 0:
            break
        logits = model.decode(ys[active], memory[active], memory_key_mask=keep[active])[:, -1]
        col = torch.full((B,), pad, dtype=torch.long)
        col[active] = logits.argmax(-1)
        ys = torch.cat([ys, col[:, None]], 1)
        active = active[col[active] != eos_id]
    return ys[:, 1:]
""")
gr("right_full_then_trim", "right", "always runs max_new_tokens steps, then cuts the all-pad columns at the end", """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    memory = model.encode(src)
    keep = src != pad
    ys = torch.full((src.shape[0], 1), bos_id, dtype=torch.long)
    ended = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        t = model.decode(ys, memory, memory_key_mask=keep)[:, -1].argmax(-1)
        t = t.masked_fill(ended, pad)
        ended = ended | t.eq(eos_id)
        ys = torch.cat((ys, t[:, None]), dim=1)
    out = ys[:, 1:]
    is_eos = out == eos_id
    lengths = torch.where(is_eos.any(1), is_eos.int().argmax(1) + 1, torch.full_like(is_eos[:, 0], max_new_tokens, dtype=torch.long))
    L = int(lengths.max()) if lengths.numel() else 0
    return out[:, :L].contiguous()
""")
gr("right_row_by_row", "right", "arguable: each source decoded alone without its padding (the check's own reference), not as one batch", """
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad = model.config.pad_id
    rows = []
    for s in src:
        s = s[s != pad][None]
        mem = model.encode(s)
        ys = torch.tensor([[bos_id]])
        for _ in range(max_new_tokens):
            t = model.decode(ys, mem)[:, -1].argmax(-1, keepdim=True)
            ys = torch.cat([ys, t], 1)
            if t.item() == eos_id:
                break
        rows.append(ys[0, 1:].tolist())
    L = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (L - len(r)) for r in rows], dtype=torch.long).view(len(rows), L)
""")


# ---------------------------------------------------------------- 9.7 ----
def nc(name, expect, why, source):
    _xcase("9.7", "next_chars", "my_next_chars", name, expect, why, source)


nc("non_overlapping_find", "wrong", "str.find advancing past the whole prefix: misses overlapping occurrences", """
def my_next_chars(texts, prefix):
    out = {}
    for t in texts:
        i = t.find(prefix)
        while i != -1:
            j = i + len(prefix)
            if j < len(t):
                out[t[j]] = out.get(t[j], 0) + 1
            i = t.find(prefix, j)
    return out
""")
nc("joined_texts", "wrong", "joins the texts: occurrences span two texts", """
def my_next_chars(texts, prefix):
    s = "".join(texts)
    out = {}
    for i in range(len(s) - len(prefix)):
        if s.startswith(prefix, i):
            c = s[i + len(prefix)]
            out[c] = out.get(c, 0) + 1
    return out
""")
nc("joined_with_space", "wrong", "joins with spaces: an occurrence at a text's end is followed by ' '", """
def my_next_chars(texts, prefix):
    s = " ".join(texts)
    out = {}
    for i in range(len(s) - len(prefix)):
        if s[i:i + len(prefix)] == prefix:
            c = s[i + len(prefix)]
            out[c] = out.get(c, 0) + 1
    return out
""")
nc("counts_end_as_empty", "wrong", "counts an occurrence at the end under the key ''", """
def my_next_chars(texts, prefix):
    out = {}
    for t in texts:
        for i in range(len(t) - len(prefix) + 1):
            if t[i:].startswith(prefix):
                c = t[i + len(prefix): i + len(prefix) + 1]
                out[c] = out.get(c, 0) + 1
    return out
""")
nc("first_per_text", "wrong", "only the first occurrence in each text", """
def my_next_chars(texts, prefix):
    out = {}
    for t in texts:
        i = t.find(prefix)
        if i != -1 and i + len(prefix) < len(t):
            c = t[i + len(prefix)]
            out[c] = out.get(c, 0) + 1
    return out
""")
nc("regex_unescaped", "wrong", "a regex lookahead without re.escape: '.' or '(' in the prefix misbehave", """
import re
def my_next_chars(texts, prefix):
    out = {}
    for t in texts:
        for m in re.finditer("(?=" + prefix + "(.))", t, flags=re.S):
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out
""")
nc("sorts_texts", "wrong", "texts.sort() in place changes the caller's list", """
def my_next_chars(texts, prefix):
    texts.sort()
    out = {}
    for t in texts:
        for i in range(len(t) - len(prefix)):
            if t.startswith(prefix, i):
                out[t[i + len(prefix)]] = out.get(t[i + len(prefix)], 0) + 1
    return out
""")
nc("list_of_pairs", "wrong", "returns a list of (char, count) pairs", """
from collections import Counter
def my_next_chars(texts, prefix):
    c = Counter(t[i + len(prefix)] for t in texts for i in range(len(t) - len(prefix)) if t.startswith(prefix, i))
    return sorted(c.items())
""")
nc("previous_char", "wrong", "counts the character before the prefix", """
def my_next_chars(texts, prefix):
    out = {}
    for t in texts:
        for i in range(1, len(t) - len(prefix) + 1):
            if t.startswith(prefix, i):
                out[t[i - 1]] = out.get(t[i - 1], 0) + 1
    return out
""")
nc("strips_text", "wrong", "strips/lowercases the texts first", """
def my_next_chars(texts, prefix):
    out = {}
    for t in texts:
        t = t.strip().lower()
        for i in range(len(t) - len(prefix)):
            if t.startswith(prefix, i):
                out[t[i + len(prefix)]] = out.get(t[i + len(prefix)], 0) + 1
    return out
""")
nc("right_regex", "right", "re.finditer with an escaped lookahead", """
import re
def my_next_chars(texts, prefix):
    pat = re.compile("(?=" + re.escape(prefix) + "(.))", re.S)
    out = {}
    for t in texts:
        for m in pat.finditer(t):
            out[m.group(1)] = out.get(m.group(1), 0) + 1
    return out
""")
nc("right_counter", "right", "returns a collections.Counter (a dict subclass)", """
from collections import Counter
def my_next_chars(texts, prefix):
    k = len(prefix)
    return Counter(t[i + k] for t in texts for i in range(len(t) - k) if t[i:i + k] == prefix)
""")
nc("right_find_step_one", "right", "str.find stepping one character at a time, plain dict", """
def my_next_chars(texts, prefix):
    counts = dict()
    for text in list(texts):
        start = text.find(prefix)
        while start >= 0:
            nxt = start + len(prefix)
            if nxt < len(text):
                counts[text[nxt]] = counts.get(text[nxt], 0) + 1
            start = text.find(prefix, start + 1)
    return dict(counts)
""")


# ------------------------------------------------ more for 9.1, 9.4, 9.6 ---
def _xa(name, expect, why, source):
    _xcase("9.1", "masked_cross_attention", "my_cross_attention", name, expect, why, source)


def _tf(name, expect, why, source):
    _xcase("9.4", "teacher_forcing", "my_teacher_forcing", name, expect, why, source)


def _ng(name, expect, why, source):
    _xcase("9.6", "char_ngram_precision_recall", "my_ngram_pr", name, expect, why, source)


_xa("scale_by_d", "wrong", "divides by d instead of sqrt(d)", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / q.shape[-1]
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], float("-inf")), dim=-1)
    return w @ v, w
""")
_xa("minus_100", "wrong", "a masking value of -100: padding keeps a tiny but nonzero weight", """
def my_cross_attention(q, k, v, src_key_mask):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    w = torch.softmax(s.masked_fill(~src_key_mask[:, None, :], -10.0), dim=-1)
    return w @ v, w
""")
_xa("right_torch_mha_free", "right", "baddbmm and a where on the weights after softmax", """
def my_cross_attention(q, k, v, src_key_mask):
    scores = torch.baddbmm(torch.zeros(q.shape[0], q.shape[1], k.shape[1], dtype=q.dtype), q, k.transpose(1, 2), alpha=q.shape[-1] ** -0.5)
    scores = scores.masked_fill(src_key_mask.logical_not().unsqueeze(1), -float("inf"))
    weights = scores.softmax(dim=2)
    return torch.bmm(weights, v), weights
""")
_tf("T_from_first", "wrong", "T from the first target, not the longest", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = len(targets[0]) + 1
    tin = [([bos_id] + t + [pad_id] * T)[:T] for t in targets]
    tout = [(t + [eos_id] + [pad_id] * T)[:T] for t in targets]
    return torch.tensor(tin), torch.tensor(tout)
""")
_tf("right_shift_then_fill", "right", "builds [bos, y, eos] rows, slices, then fixes eos left in tgt_in", """
def my_teacher_forcing(targets, bos_id, eos_id, pad_id):
    T = max(map(len, targets)) + 1
    full = torch.full((len(targets), T + 1), pad_id, dtype=torch.long)
    for i, t in enumerate(targets):
        full[i, : len(t) + 2] = torch.tensor([bos_id, *t, eos_id])
    tin = full[:, :-1].clone()
    for i, t in enumerate(targets):
        tin[i, len(t) + 1:] = pad_id
    return tin, full[:, 1:].clone()
""")
_ng("n_gram_of_words_joined", "wrong", "removes only ' ' then counts over the joined words with a space-aware split", _GRAMS + """
def my_ngram_pr(hypothesis, reference, n):
    h = "".join(hypothesis.split(" ")); r = "".join(reference.split(" "))
    return _pr(_grams(h, n), _grams(r, n))
""")
_ng("right_zip_counter", "right", "n-grams by zipping shifted strings", """
from collections import Counter
def my_ngram_pr(hypothesis, reference, n):
    def grams(s):
        s = "".join(s.split())
        return Counter("".join(g) for g in zip(*(s[i:] for i in range(n))))
    h, r = grams(hypothesis), grams(reference)
    m = sum(min(c, r[g]) for g, c in h.items())
    H, R = sum(h.values()), sum(r.values())
    return (m / H if H else 0.0, m / R if R else 0.0)
""")

CASES += [dict(c, name="out_" + c["name"]) for c in junk_cases(_EXTRA, {
    "9.2": ("decoder_block", "my_decoder_block", "x, memory, block, tgt_key_mask, src_key_mask"),
    "9.3": ("seq2seq_forward", "my_seq2seq_forward", "model, src, tgt"),
    "9.5": ("batched_greedy", "my_greedy_translate", "model, src, bos_id, eos_id, max_new_tokens"),
    "9.7": ("next_chars", "my_next_chars", "texts, prefix"),
})]
