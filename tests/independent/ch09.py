"""Independent red-team cases for chapter 9 (the encoder-decoder).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.seq2seq"
PRELUDE = """
import math
import time
import torch
from torch import nn
from companion import decoding, translation
from companion.decoding import beam_search, greedy, sample, sequence_log_prob
from companion.exercises import seq2seq as check
from companion.positional import sinusoidal_encoding
from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
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
