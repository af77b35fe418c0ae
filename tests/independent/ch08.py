"""Independent red-team cases for chapter 8 (decoding and beam search).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.decoding"
PRELUDE = """
import collections
import inspect
import itertools
import math
import textwrap
import time
import numpy as np
import torch
from companion import decoding
from companion.checkpoint import load_checkpoint, shipped_model_path
from companion.decoding import (
    beam_search, greedy, next_token_probs, sample, sequence_log_prob)
from companion.exercises import decoding as check
from companion.model import GPT, GPTConfig
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 8.1 ----
def gs(name, expect, why, source):
    case("8.1", "greedy_step", name, expect, why, source, "my_greedy_step")


gs("first_position", "wrong", "argmax of the first position's logits", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, 0].argmax(dim=-1, keepdim=True)
    return torch.cat([ids, nxt], dim=1)
""")
gs("argmax_over_time", "wrong", "argmax over the time axis", """
def my_greedy_step(model, ids):
    logits = model(ids)
    nxt = logits.argmax(dim=1)[:, -1:]
    return torch.cat([ids, nxt], dim=1)
""")
gs("prepends", "wrong", "puts the new token first", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, -1].argmax(dim=-1, keepdim=True)
    return torch.cat([nxt, ids], dim=1)
""")
gs("samples", "wrong", "samples instead of taking the most probable token", """
def my_greedy_step(model, ids):
    p = torch.softmax(model(ids)[:, -1], dim=-1)
    return torch.cat([ids, torch.multinomial(p, 1)], dim=1)
""")
gs("argmin", "wrong", "the least probable token", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, -1].argmin(dim=-1, keepdim=True)
    return torch.cat([ids, nxt], dim=1)
""")
gs("only_new_tokens", "wrong", "returns only the (B, 1) new tokens", """
def my_greedy_step(model, ids):
    return model(ids)[:, -1].argmax(dim=-1, keepdim=True)
""")
gs("float_ids", "wrong", "returns float ids", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, -1].argmax(dim=-1, keepdim=True)
    return torch.cat([ids.float(), nxt.float()], dim=1)
""")
gs("row0_for_all", "wrong", "appends row 0's token to every row", """
def my_greedy_step(model, ids):
    nxt = model(ids)[0, -1].argmax()
    return torch.cat([ids, nxt.repeat(ids.shape[0], 1)], dim=1)
""")
gs("overwrites_last", "wrong", "writes the token over the last id in place: shape (B, T)", """
def my_greedy_step(model, ids):
    ids[:, -1] = model(ids)[:, -1].argmax(dim=-1)
    return ids
""")
gs("second_to_last", "wrong", "logits of position T - 2", """
def my_greedy_step(model, ids):
    logits = model(ids)
    pos = -2 if ids.shape[1] > 1 else -1
    nxt = logits[:, pos].argmax(dim=-1, keepdim=True)
    return torch.cat([ids, nxt], dim=1)
""")
gs("max_values", "wrong", "appends the max logit value, not its index", """
def my_greedy_step(model, ids):
    v = model(ids)[:, -1].max(dim=-1, keepdim=True).values
    return torch.cat([ids, v.long()], dim=1)
""")
gs("companion_greedy", "wrong", "calls the companion's greedy: imports the answer", """
from companion.decoding import greedy
def my_greedy_step(model, ids):
    return torch.stack([greedy(model, row, 1) for row in ids])
""")
gs("right_topk", "right", "topk(1).indices", """
def my_greedy_step(model, ids):
    last = model(ids)[:, -1, :]
    return torch.cat((ids, last.topk(1, dim=-1).indices), dim=-1)
""")
gs("right_softmax_argmax", "right", "softmax first, then argmax", """
def my_greedy_step(model, ids):
    probs = torch.softmax(model(ids)[:, -1], dim=-1)
    nxt = torch.argmax(probs, dim=-1)
    return torch.hstack([ids, nxt.unsqueeze(1)])
""")
gs("right_no_grad_unsqueeze", "right", "no_grad, unsqueeze, to ids' dtype", """
@torch.no_grad()
def my_greedy_step(model, ids):
    logits = model(ids)
    nxt = logits[:, logits.shape[1] - 1].argmax(-1).unsqueeze(-1).to(ids.dtype)
    return torch.cat([ids, nxt], -1)
""")


# ---------------------------------------------------------------- 8.2 ----
def bs(name, expect, why, source):
    case("8.2", "beam_step", name, expect, why, source, "my_beam_step")


_RANK = """
def _ranked(cand):
    n, V = cand.shape
    flat = cand.reshape(-1)
    order = torch.sort(flat, descending=True, stable=True).indices.tolist()
    return [(i // V, i % V, float(flat[i])) for i in order]
"""

bs("adds_probabilities", "wrong", "adds probabilities to log-probabilities", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] + next_probs):
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("forgets_beam_scores", "wrong", "scores candidates by the next log-probability only", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(torch.log(next_probs).expand(len(beam_scores), -1)):
        s = s + float(beam_scores[p])
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("top_k_rule", "wrong", "Hugging Face's rule: only the first k candidates count", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    cands = _ranked(beam_scores[:, None] + torch.log(next_probs))
    alive = [c for c in cands[:2 * k] if c[1] != eos_id][:k]
    finished = [c for c in cands[:k] if c[1] == eos_id]
    return alive, finished
""")
bs("keeps_every_eos", "wrong", "keeps every candidate that ends, whatever its rank", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    cands = _ranked(beam_scores[:, None] + torch.log(next_probs))
    alive = [c for c in cands if c[1] != eos_id][:k]
    finished = [c for c in cands if c[1] == eos_id]
    return alive, finished
""")
bs("eos_stays_alive", "wrong", "treats the end token like any other", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    return _ranked(beam_scores[:, None] + torch.log(next_probs))[:k], []
""")
bs("parent_token_swapped", "wrong", "tuples (token, parent, score)", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] + torch.log(next_probs)):
        (finished if t == eos_id else alive).append((t, p, s))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("worst_first", "wrong", "sorts ascending", """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    cand = beam_scores[:, None] + torch.log(next_probs)
    V = cand.shape[1]
    alive, finished = [], []
    for i in torch.argsort(cand.reshape(-1)).tolist():
        p, t, s = i // V, i % V, float(cand.reshape(-1)[i])
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("index_decode_swapped", "wrong", "parent = i % V, token = i // V", """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    cand = beam_scores[:, None] + torch.log(next_probs)
    V = cand.shape[1]
    flat = cand.reshape(-1)
    alive, finished = [], []
    for i in torch.sort(flat, descending=True, stable=True).indices.tolist():
        p, t = i % V, i // V
        (finished if t == eos_id else alive).append((p, t, float(flat[i])))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("finished_count_toward_k", "wrong", "stops when alive + finished reach k", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] + torch.log(next_probs)):
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) + len(finished) == k:
            break
    return alive, finished
""")
bs("one_too_many", "wrong", "stops at k + 1 alive", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] + torch.log(next_probs)):
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) > k:
            break
    return alive, finished
""")
bs("log10", "wrong", "log base 10", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] + torch.log10(next_probs)):
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("multiplies", "wrong", "multiplies the summed log-probability by the probability", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] * next_probs):
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("per_beam_topk", "wrong", "the best k tokens of each beam, then the best k of those, ignoring ends", """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    cand = beam_scores[:, None] + torch.log(next_probs)
    pool = []
    for p in range(cand.shape[0]):
        v, t = cand[p].topk(k)
        pool += [(p, int(tt), float(vv)) for vv, tt in zip(v, t)]
    pool.sort(key=lambda c: -c[2])
    alive = [c for c in pool if c[1] != eos_id][:k]
    finished = [c for c in pool[:k] if c[1] == eos_id]
    return alive, finished
""")
bs("right_python_sorted", "right", "pure Python, sorted on (-score, parent, token)", """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    n, V = next_probs.shape
    cands = []
    for p in range(n):
        for t in range(V):
            cands.append((float(beam_scores[p]) + math.log(float(next_probs[p, t])) if float(next_probs[p, t]) > 0 else -math.inf, p, t))
    cands.sort(key=lambda c: (-c[0], c[1], c[2]))
    alive, finished = [], []
    for s, p, t in cands:
        if t == eos_id:
            finished.append((p, t, s))
        else:
            alive.append((p, t, s))
            if len(alive) == k:
                break
    return alive, finished
""")
bs("right_torch_sort", "right", "torch.sort on the flat scores, divmod", """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    scores = beam_scores.unsqueeze(1) + next_probs.log()
    V = scores.size(1)
    vals, idx = scores.flatten().sort(descending=True, stable=True)
    alive, finished = [], []
    for v, i in zip(vals.tolist(), idx.tolist()):
        parent, token = divmod(i, V)
        (finished if token == eos_id else alive).append((parent, token, v))
        if len(alive) >= k:
            break
    return alive, finished
""")
bs("right_while_loop", "right", "a while loop over a ranked list", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    ranked = _ranked(beam_scores[:, None] + torch.log(next_probs))
    alive, finished, i = [], [], 0
    while len(alive) < k and i < len(ranked):
        p, t, s = ranked[i]
        if t == eos_id:
            finished.append((p, t, s))
        else:
            alive.append((p, t, s))
        i += 1
    return alive, finished
""")


# ---------------------------------------------------------------- 8.3 ----
def lr(name, expect, why, source):
    case("8.3", "length_ranking", name, expect, why, source,
         "my_length_ranking")


lr("worst_first", "wrong", "ascending order", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: scores[i] / lengths[i] ** alpha)
""")
lr("multiplies", "wrong", "score * length ** alpha", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: -scores[i] * lengths[i] ** alpha)
""")
lr("ignores_alpha", "wrong", "score / length", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: -scores[i] / lengths[i])
""")
lr("alpha_power_length", "wrong", "alpha ** length", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: -scores[i] / alpha ** lengths[i])
""")
lr("raw_scores", "wrong", "ranks by the raw score", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: -scores[i])
""")
lr("returns_scores", "wrong", "returns the normalized scores, sorted", """
def my_length_ranking(scores, lengths, alpha):
    return sorted((s / l ** alpha for s, l in zip(scores, lengths)), reverse=True)
""")
lr("returns_ranks", "wrong", "returns each hypothesis's rank, not the order", """
def my_length_ranking(scores, lengths, alpha):
    order = sorted(range(len(scores)), key=lambda i: -scores[i] / lengths[i] ** alpha)
    ranks = [0] * len(order)
    for r, i in enumerate(order):
        ranks[i] = r
    return ranks
""")
lr("gnmt_penalty", "wrong", "GNMT's ((5 + L) / 6) ** alpha", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: -scores[i] / ((5 + lengths[i]) / 6) ** alpha)
""")
lr("one_based", "wrong", "indices from 1", """
def my_length_ranking(scores, lengths, alpha):
    order = sorted(range(len(scores)), key=lambda i: -scores[i] / lengths[i] ** alpha)
    return [i + 1 for i in order]
""")
lr("negated_alpha", "wrong", "length ** -alpha in the denominator", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: -scores[i] / lengths[i] ** (-alpha))
""")
lr("best_only", "wrong", "returns only the best index", """
def my_length_ranking(scores, lengths, alpha):
    return max(range(len(scores)), key=lambda i: scores[i] / lengths[i] ** alpha)
""")
lr("sorts_input", "wrong", "sorts the caller's scores list in place", """
def my_length_ranking(scores, lengths, alpha):
    keyed = [s / l ** alpha for s, l in zip(scores, lengths)]
    order = sorted(range(len(keyed)), key=lambda i: -keyed[i])
    scores.sort(reverse=True)
    return order
""")
lr("right_reverse_true", "right", "sorted(reverse=True) on the normalized score", """
def my_length_ranking(scores, lengths, alpha):
    norm = [s / n ** alpha for s, n in zip(scores, lengths)]
    return sorted(range(len(norm)), key=norm.__getitem__, reverse=True)
""")
lr("right_torch_argsort", "right", "stable torch.argsort, as a list of ints", """
def my_length_ranking(scores, lengths, alpha):
    s = torch.tensor(scores, dtype=torch.float64)
    l = torch.tensor(lengths, dtype=torch.float64)
    return torch.argsort(s / l ** alpha, descending=True, stable=True).tolist()
""")
lr("right_tuples", "right", "sorts (key, index) tuples", """
def my_length_ranking(scores, lengths, alpha):
    pairs = [(-(scores[i] / lengths[i] ** alpha), i) for i in range(len(scores))]
    return [i for _, i in sorted(pairs)]
""")


# ---------------------------------------------------------------- 8.4 ----
def tk(name, expect, why, source):
    case("8.4", "top_k_filter", name, expect, why, source, "my_top_k")


tk("keeps_smallest", "wrong", "keeps the k smallest", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1, largest=False).values[:, -1:]
    return logits.masked_fill(logits > kth, float("-inf"))
""")
tk("zeros_not_inf", "wrong", "sets the others to 0", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, 0.0)
""")
tk("minus_1e9", "wrong", "sets the others to -1e9, not -inf", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, -1e9)
""")
tk("strict_threshold", "wrong", "> k-th value keeps only k - 1", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(~(logits > kth), float("-inf"))
""")
tk("global_topk", "wrong", "one threshold for the whole batch", """
def my_top_k(logits, k):
    kth = logits.flatten().topk(k).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))
""")
tk("dim0", "wrong", "top-k along the batch", """
def my_top_k(logits, k):
    kth = logits.topk(min(k, logits.shape[0]), dim=0).values[-1:]
    return logits.masked_fill(logits < kth, float("-inf"))
""")
tk("in_place", "wrong", "fills -inf into the caller's logits", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    logits[logits < kth] = float("-inf")
    return logits
""")
tk("softmaxed", "wrong", "returns probabilities", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return torch.softmax(logits.masked_fill(logits < kth, float("-inf")), -1)
""")
tk("values_only", "wrong", "returns the (B, k) top values", """
def my_top_k(logits, k):
    return logits.topk(k, dim=-1).values
""")
tk("companion_filter", "wrong", "the companion's filter_logits: imports the answer", """
from companion.decoding import filter_logits
def my_top_k(logits, k):
    return filter_logits(logits, top_k=k)
""")
tk("k_plus_one", "wrong", "keeps k + 1 (off by one)", """
def my_top_k(logits, k):
    kk = min(k + 1, logits.shape[-1])
    kth = logits.topk(kk, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("-inf"))
""")
tk("row0_threshold", "wrong", "row 0's threshold for every row", """
def my_top_k(logits, k):
    kth = logits[0].topk(k).values[-1]
    return logits.masked_fill(logits < kth, float("-inf"))
""")
tk("right_scatter", "right", "scatter the top values into a -inf tensor", """
def my_top_k(logits, k):
    v, i = torch.topk(logits, k, dim=-1)
    out = torch.full_like(logits, float("-inf"))
    return out.scatter(-1, i, v)
""")
tk("right_kthvalue", "right", "kthvalue of the negated logits", """
def my_top_k(logits, k):
    thresh = -torch.kthvalue(-logits, k, dim=-1, keepdim=True).values
    return torch.where(logits >= thresh, logits, torch.tensor(float("-inf"), dtype=logits.dtype))
""")
tk("right_sort_mask", "right", "sort, then a boolean mask by rank", """
def my_top_k(logits, k):
    order = logits.argsort(dim=-1, descending=True)
    keep = torch.zeros_like(logits, dtype=torch.bool)
    keep.scatter_(-1, order[:, :k], True)
    return logits.masked_fill(~keep, -math.inf)
""")


# ---------------------------------------------------------------- 8.5 ----
def kv(name, expect, why, source):
    case("8.5", "cached_attention", name, expect, why, source,
         "my_cached_attention")


_APPEND = """
def _append(cache, k_new, v_new):
    if cache.get("k") is None:
        cache["k"], cache["v"] = k_new, v_new
    else:
        cache["k"] = torch.cat([cache["k"], k_new], dim=1)
        cache["v"] = torch.cat([cache["v"], v_new], dim=1)
"""

kv("newest_first", "wrong", "prepends the new key and value", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        cache["k"], cache["v"] = k_new, v_new
    else:
        cache["k"] = torch.cat([k_new, cache["k"]], dim=1)
        cache["v"] = torch.cat([v_new, cache["v"]], dim=1)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ cache["v"]
""")
kv("cache_not_updated", "wrong", "attends over old + new but never stores them", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        K, V = k_new, v_new
    else:
        K = torch.cat([cache["k"], k_new], dim=1)
        V = torch.cat([cache["v"], v_new], dim=1)
    w = torch.softmax(q_new @ K.transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ V
""")
kv("rebinds_cache", "wrong", "cache = {...} rebinds the name; the caller's dict is unchanged", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        cache = {"k": k_new, "v": v_new}
    else:
        cache = {"k": torch.cat([cache["k"], k_new], 1), "v": torch.cat([cache["v"], v_new], 1)}
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ cache["v"]
""")
kv("attends_before_append", "wrong", "attends over the earlier tokens only, appends afterwards", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        _append(cache, k_new, v_new)
        return v_new.clone()
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    out = w @ cache["v"]
    _append(cache, k_new, v_new)
    return out
""")
kv("scale_by_t", "wrong", "scales by sqrt of the cache length", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(cache["k"].shape[1]), -1)
    return w @ cache["v"]
""")
kv("no_scale", "wrong", "forgets the scale", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    return torch.softmax(q_new @ cache["k"].transpose(1, 2), -1) @ cache["v"]
""")
kv("softmax_wrong_dim", "wrong", "softmax over the single query", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), 1)
    return w @ cache["v"]
""")
kv("cat_on_features", "wrong", "concatenates along dim 2", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        cache["k"], cache["v"] = k_new, v_new
    else:
        cache["k"] = torch.cat([cache["k"], k_new], dim=2)
        cache["v"] = torch.cat([cache["v"], v_new], dim=2)
    K = cache["k"].reshape(k_new.shape[0], -1, k_new.shape[-1])
    V = cache["v"].reshape(v_new.shape[0], -1, v_new.shape[-1])
    w = torch.softmax(q_new @ K.transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ V
""")
kv("returns_tuple", "wrong", "returns (out, cache)", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ cache["v"], cache
""")
kv("causal_mask_on_one_row", "wrong", "a tril mask on the (1, t) score row hides all but the first key", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    s = q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1])
    mask = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, -1) @ cache["v"]
""")
kv("keys_as_values", "wrong", "stores k_new under 'v' too (copy-paste)", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        cache["k"], cache["v"] = k_new, k_new
    else:
        cache["k"] = torch.cat([cache["k"], k_new], dim=1)
        cache["v"] = torch.cat([cache["v"], k_new], dim=1)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ cache["v"]
""")
kv("stores_scaled_keys", "wrong", "stores k / sqrt(d) and then scales again", """
def my_cached_attention(q_new, k_new, v_new, cache):
    d = q_new.shape[-1]
    k_new = k_new / math.sqrt(d)
    if cache.get("k") is None:
        cache["k"], cache["v"] = k_new, v_new
    else:
        cache["k"] = torch.cat([cache["k"], k_new], dim=1)
        cache["v"] = torch.cat([cache["v"], v_new], dim=1)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(d), -1)
    return w @ cache["v"]
""")
kv("right_sdpa", "right", "torch's attention on the cache", _APPEND + """
import torch.nn.functional as F
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    return F.scaled_dot_product_attention(q_new, cache["k"], cache["v"])
""")
kv("right_einsum", "right", "einsum, with None or missing keys handled", """
def my_cached_attention(q_new, k_new, v_new, cache):
    old_k, old_v = cache.get("k"), cache.get("v")
    cache["k"] = k_new if old_k is None else torch.cat((old_k, k_new), 1)
    cache["v"] = v_new if old_v is None else torch.cat((old_v, v_new), 1)
    s = torch.einsum("bqd,bkd->bqk", q_new, cache["k"]) * q_new.size(-1) ** -0.5
    return torch.einsum("bqk,bkd->bqd", s.softmax(-1), cache["v"])
""")
kv("right_own_softmax", "right", "its own stable softmax", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    s = q_new @ cache["k"].mT / math.sqrt(k_new.shape[-1])
    e = torch.exp(s - s.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)) @ cache["v"]
""")


kv("cache_as_list", "wrong", "keeps the cache as Python lists of (B, 1, d) tensors", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        cache["k"], cache["v"] = [], []
    cache["k"].append(k_new)
    cache["v"].append(v_new)
    K, V = torch.cat(cache["k"], 1), torch.cat(cache["v"], 1)
    w = torch.softmax(q_new @ K.transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ V
""")
kv("squeezed_output", "wrong", "returns (B, d), dropping the time dimension", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return (w @ cache["v"]).squeeze(1)
""")
gs("int32_out", "wrong", "returns int32 ids", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
    return torch.cat([ids, nxt], 1).int()
""")

# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "8.1": ("greedy_step", "my_greedy_step", "model, ids"),
    "8.2": ("beam_step", "my_beam_step", "beam_scores, next_probs, k, eos_id"),
    "8.3": ("length_ranking", "my_length_ranking", "scores, lengths, alpha"),
    "8.4": ("top_k_filter", "my_top_k", "logits, k"),
    "8.5": ("cached_attention", "my_cached_attention", "q_new, k_new, v_new, cache"),
})


# ------------------------------------------------------------- batch 2 ---
gs("tuple_model_output", "wrong", "unpacks model(ids) as (logits, loss) like the companion GPT", """
def my_greedy_step(model, ids):
    logits, _ = model(ids)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat([ids, nxt], 1)
""")
bs("drops_minus_inf_but_scores_probs", "wrong", "ranks by probability product but reports log scores (ties to ranks are same, scores right) -- uses beam probs multiplied", """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    joint = torch.exp(beam_scores)[:, None] * next_probs
    V = joint.shape[1]
    alive, finished = [], []
    for i in torch.sort(joint.flatten(), descending=True, stable=True).indices.tolist():
        p, t = divmod(i, V)
        s = float(joint.flatten()[i])
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k:
            break
    return alive, finished
""")
lr("alpha_on_score", "wrong", "score ** alpha / length", """
def my_length_ranking(scores, lengths, alpha):
    return sorted(range(len(scores)), key=lambda i: -(-abs(scores[i]) ** max(alpha, 1e-9)) / lengths[i])
""")
tk("returns_mask", "wrong", "returns the boolean keep-mask, not the logits", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits >= kth
""")
tk("nan_fill", "wrong", "fills with nan", """
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]
    return logits.masked_fill(logits < kth, float("nan"))
""")
kv("literal_none_keys", "right", "reads the text literally: cache['k'] is None before the first token", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache["k"] is None:
        cache["k"], cache["v"] = k_new, v_new
    else:
        cache["k"] = torch.cat([cache["k"], k_new], dim=1)
        cache["v"] = torch.cat([cache["v"], v_new], dim=1)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ cache["v"]
""")
kv("update_dict_method", "right", "cache.update(...) and an empty-dict check", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if not cache or cache.get("k") is None:
        cache.update(k=k_new, v=v_new)
    else:
        cache.update(k=torch.cat([cache["k"], k_new], 1), v=torch.cat([cache["v"], v_new], 1))
    s = q_new @ cache["k"].transpose(-1, -2) * (1.0 / math.sqrt(q_new.shape[-1]))
    return s.softmax(-1) @ cache["v"]
""")
kv("keeps_only_last_two", "wrong", "a sliding window: keeps only the last 2 keys", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    cache["k"], cache["v"] = cache["k"][:, -2:], cache["v"][:, -2:]
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ cache["v"]
""")
