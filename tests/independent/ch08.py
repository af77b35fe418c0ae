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
def tp(name, expect, why, source):
    case("8.3", "top_p_filter", name, expect, why, source, "my_top_p")


tp("right_descending", "right", "sorted descending, ties reversed by flipping the vocabulary", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    x = logits.flip(-1)
    probs, order = x.softmax(-1).sort(dim=-1, descending=True, stable=True)
    tail = probs.flip(-1).cumsum(-1).flip(-1)
    remove = tail <= 1 - top_p
    remove[:, :min_tokens_to_keep] = False
    out = x.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return out.flip(-1)
""")
tp("right_loop", "right", "row by row in Python, ascending with sorted() on (logit, id)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    out = logits.clone()
    for b in range(logits.shape[0]):
        probs = logits[b].softmax(-1)
        order = sorted(range(logits.shape[1]), key=lambda i: (logits[b, i].item(), i))
        mass = torch.cumsum(probs[order], 0)
        for j, i in enumerate(order):
            if mass[j] <= 1 - top_p and j < len(order) - min_tokens_to_keep:
                out[b, i] = float("-inf")
    return out
""")
tp("holtzman_strict", "wrong", "keeps tokens while the mass before them is below p (ties kept by id)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    before = probs.cumsum(-1) - probs
    remove = before >= top_p
    remove[:, :min_tokens_to_keep] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("drops_crossing", "wrong", "keeps only tokens whose cumulative probability stays <= p", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
    remove = probs.cumsum(-1) > top_p
    remove[:, :min_tokens_to_keep] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("gather_not_scatter", "wrong", "maps the decisions back with a gather", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = logits.sort(dim=-1)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[:, -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.gather(-1, order), float("-inf"))
""")
tp("in_place", "wrong", "masks the caller's logits in place", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = logits.sort(dim=-1)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[:, -min_tokens_to_keep:] = False
    return logits.masked_fill_(remove.scatter(-1, order, remove), float("-inf"))
""")


# ---------------------------------------------------------------- 8.4 ----
def sl(name, expect, why, source):
    case("8.4", "sample_loop", name, expect, why, source, "my_sample")


sl("right_hf_style", "right", "writes the filters inline, a softmax by hand", """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1, :] / temperature
        if top_k:
            v = torch.topk(logits, top_k).values[..., -1, None]
            logits = torch.where(logits < v, torch.full_like(logits, -math.inf), logits)
        if top_p is not None:
            s, idx = torch.sort(logits)
            rm = s.softmax(-1).cumsum(-1) <= 1 - top_p
            rm[..., -1] = False
            logits = logits.masked_fill(rm.scatter(1, idx, rm), -math.inf)
        e = torch.exp(logits - logits.max(-1, keepdim=True).values)
        nxt = torch.multinomial(e / e.sum(-1, keepdim=True), 1, generator=generator)
        ids = torch.cat((ids, nxt), 1)
    return ids
""")
sl("temperature_on_probs", "wrong", "divides the probabilities by the temperature", """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        probs = model(ids[:, -model.config.context_length:])[0][:, -1].softmax(-1)
        probs = probs / temperature
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
sl("no_crop", "wrong", "feeds the whole sequence past the window", """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        probs = (model(ids)[0][:, -1] / temperature).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
sl("global_rng", "wrong", "ignores the generator", """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        logits = model(ids[:, -model.config.context_length:])[0][:, -1] / temperature
        if top_k is not None:
            logits[logits < logits.topk(top_k).values[:, -1:]] = -math.inf
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1)], 1)
    return ids
""")
sl("categorical", "wrong", "torch.distributions.Categorical, which takes no generator", """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        logits = model(ids[:, -model.config.context_length:])[0][:, -1] / temperature
        nxt = torch.distributions.Categorical(logits=logits).sample()
        ids = torch.cat([ids, nxt[:, None]], 1)
    return ids
""")


# ---------------------------------------------------------------- 8.6 ----
def cb(name, expect, why, source):
    case("8.6", "cached_beam_search", name, expect, why, source, "my_beam_search")


cb("right_lists", "right", "keeps the beams as Python lists, reorders with a list of parents", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits, _ = model(prompt.unsqueeze(0), cache=cache)
    beams = [(0.0, prompt.tolist())]
    for step in range(n):
        logp = torch.log_softmax(logits[:, -1], -1)
        cands = [(s + logp[b, t].item(), b, t) for b, (s, _) in enumerate(beams)
                 for t in range(logp.shape[1])]
        cands.sort(key=lambda c: -c[0])
        cands = cands[:k]
        parents = [b for _, b, _ in cands]
        beams = [(s, beams[b][1] + [t]) for s, b, t in cands]
        if step < n - 1:
            cache.reorder(torch.tensor(parents))
            logits, _ = model(torch.tensor([[t] for _, _, t in cands]), cache=cache)
    return torch.tensor([b for _, b in beams]), torch.tensor([s for s, _ in beams])
""")
cb("no_reorder_expand", "wrong", "feeds k copies of the prompt and never reorders the cache", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    seqs = prompt[None].repeat(k, 1)
    logits, _ = model(seqs, cache=cache)
    scores = torch.zeros(k, dtype=logits.dtype)
    scores[1:] = -math.inf
    for step in range(n):
        cand = (scores[:, None] + logits[:, -1].log_softmax(-1)).flatten()
        scores, flat = cand.topk(k)
        V = logits.shape[-1]
        seqs = torch.cat([seqs[flat // V], (flat % V)[:, None]], 1)
        if step < n - 1:
            logits, _ = model((flat % V)[:, None], cache=cache)
    return seqs, scores
""")
cb("reorder_by_tokens", "wrong", "reorders the cache by the new tokens, not by the parents", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits, _ = model(prompt[None], cache=cache)
    seqs, scores = prompt[None], torch.zeros(1, dtype=logits.dtype)
    for step in range(n):
        logp = logits[:, -1].log_softmax(-1)
        V = logp.shape[-1]
        scores, flat = (scores[:, None] + logp).flatten().topk(min(k, logp.numel()))
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        if step < n - 1:
            cache.reorder(tokens % cache.batch_size)
            logits, _ = model(tokens[:, None], cache=cache)
    return seqs, scores
""")
cb("fixed_k_first_step", "wrong", "takes k candidates at the first step even when fewer exist", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits, _ = model(prompt[None], cache=cache)
    seqs, scores = prompt[None], torch.zeros(1, dtype=logits.dtype)
    for step in range(n):
        logp = logits[:, -1].log_softmax(-1)
        V = logp.shape[-1]
        scores, flat = (scores[:, None] + logp).flatten().topk(k)
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        if step < n - 1:
            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)
    return seqs, scores
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
    "8.3": ("top_p_filter", "my_top_p", "logits, top_p, min_tokens_to_keep=1"),
    "8.4": ("sample_loop", "my_sample", "model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None"),
    "8.5": ("cached_attention", "my_cached_attention", "q_new, k_new, v_new, cache"),
    "8.6": ("cached_beam_search", "my_beam_search", "model, prompt, n, k"),
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
