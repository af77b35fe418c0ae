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
    "8.7": ("beam_search_eos", "my_beam_search_eos", "model, prompt, k, max_new, eos_id, alpha=0.0"),
})


# ------------------------------------------------------------- batch 2 ---
gs("tuple_model_output", "wrong", "unpacks model(ids) as (logits, loss) like the companion GPT", """
def my_greedy_step(model, ids):
    logits, _ = model(ids)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat([ids, nxt], 1)
""")
bs("drops_minus_inf_but_scores_probs", "wrong", "ranks by the product of probabilities and reports that product as the score, not a summed log-probability (the ranking is right, the scores are not)", """
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


# ============================================================ outside ===
# Outside red-team cases (prefix out_), written from the student notebook.

_HF_TOP_P = '''
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
'''

# ---------------------------------------------------------------- 8.3 ----
tp("out_strict_less", "wrong", "tail mass < 1 - p instead of <= (exact boundary kept)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) < 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_companion_filter", "wrong", "calls the companion's filter_logits: ties keep the smaller ids, min_tokens_to_keep ignored", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    return decoding.filter_logits(logits, top_p=top_p)
""")
tp("out_companion_rule_by_hand", "wrong", "companion's rule by hand (descending, mass before >= p): ties keep the smaller ids", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, descending=True, stable=True)
    probs = s.softmax(-1)
    remove = probs.cumsum(-1) - probs >= top_p
    remove[..., :min_tokens_to_keep] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_ignores_min_tokens", "wrong", "never applies min_tokens_to_keep", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_min_tokens_wrong_end", "wrong", "protects the min_tokens_to_keep LEAST probable tokens (start of an ascending sort)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., :min_tokens_to_keep] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_min_tokens_one_fewer", "wrong", "protects min_tokens_to_keep - 1 tokens (off by one)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    if min_tokens_to_keep > 1:
        remove[..., -(min_tokens_to_keep - 1):] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_min_tokens_single_index", "wrong", "remove[..., -m] = False: protects only the m-th most probable token", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_min_tokens_one_more", "wrong", "protects min_tokens_to_keep + 1 tokens", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -(min_tokens_to_keep + 1):] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_p_not_complement", "wrong", "compares the ascending tail mass with p instead of 1 - p", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_fills_zero", "wrong", "puts 0 instead of -inf outside the nucleus", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), 0.0)
""")
tp("out_fills_finfo_min", "wrong", "puts the smallest float (HF's filter_value for fp16 habits) instead of -inf", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), torch.finfo(logits.dtype).min)
""")
tp("out_returns_probs", "wrong", "returns the renormalized probabilities, not logits", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf")).softmax(-1)
""")
tp("out_returns_log_probs", "wrong", "returns log_softmax of the filtered logits: the nucleus's values change", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf")).log_softmax(-1)
""")
tp("out_in_place_index", "wrong", "logits[mask] = -inf on the caller's tensor", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    logits[remove.scatter(-1, order, remove)] = float("-inf")
    return logits
""")
tp("out_in_place_detach", "wrong", "out = logits.detach() shares storage; masked_fill_ changes the caller's logits", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    out = logits.detach()
    s, order = torch.sort(out, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return out.masked_fill_(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_row0_only", "wrong", "computes the nucleus of row 0 and applies it to every row", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits[0], stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[-min_tokens_to_keep:] = False
    mask = remove.scatter(0, order, remove)
    return logits.masked_fill(mask.expand_as(logits), float("-inf"))
""")
tp("out_softmax_dim0", "wrong", "softmax over the batch dimension", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(0).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_mask_not_unsorted", "wrong", "applies the sorted-order mask to the unsorted logits (no scatter back)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove, float("-inf"))
""")
tp("out_ties_larger_id_less_probable", "wrong", "ties broken the other way: the larger id counts as less probable", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, descending=True, stable=True)
    s, order = s.flip(-1), order.flip(-1)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_excludes_own_prob", "wrong", "tail mass without the token itself: the token that crosses 1 - p goes too", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    p = s.softmax(-1)
    remove = p.cumsum(-1) - p <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_old_hf_descending", "wrong", "the older Hugging Face code: descending cumsum > p shifted right (exact boundary kept, ties by smaller id)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, descending=True)
    cum = s.softmax(-1).cumsum(-1)
    remove = cum > top_p
    if min_tokens_to_keep > 1:
        remove[..., :min_tokens_to_keep - 1] = False
    remove[..., 1:] = remove[..., :-1].clone()
    remove[..., 0] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_bfloat16_mass", "wrong", "computes the probabilities in bfloat16: the mass is off by ~1e-3", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.bfloat16().softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_min_p", "wrong", "min-p instead of top-p: keeps tokens with probability >= p * the top probability", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    probs = logits.softmax(-1)
    keep = probs >= top_p * probs.amax(-1, keepdim=True)
    return logits.masked_fill(~keep, float("-inf"))
""")
tp("out_top_k_disguised", "wrong", "keeps the ceil(p * V) largest logits (top-k in disguise)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    k = max(min_tokens_to_keep, math.ceil(top_p * logits.shape[-1]))
    kth = logits.topk(k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))
""")
tp("out_returns_mask", "wrong", "returns the boolean removal mask", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return remove.scatter(-1, order, remove)
""")
tp("out_scatter_dim0", "wrong", "scatters back along dim 0 (written for a vector)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(torch.zeros_like(remove).scatter(0, order, remove), float("-inf"))
""")
tp("out_casts_float32", "wrong", "returns logits.float(): a float64 row's nucleus is not unchanged (arguable if only float32 is tested)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    x = logits.float()
    s, order = torch.sort(x, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return x.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_hf_warper", "wrong", "calls transformers' TopPLogitsWarper: the exercise is to write it (unstable sort above 16 tokens); arguable", """
from transformers import TopPLogitsWarper
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    return TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep)(None, logits.clone())
""")
tp("out_unstable_sort", "wrong", "HF's code with torch.sort unstable (ties not ordered by id beyond 16 tokens); arguable: it is Hugging Face's own code", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, descending=False)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = 0
    return logits.masked_fill(remove.scatter(1, order, remove), -float("inf"))
""")
tp("out_top_p_one_all_kept_else_top1", "wrong", "hard-codes: p >= 0.5 keeps the top token only, else everything", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    kth = logits.topk(max(1, min_tokens_to_keep), dim=-1).values[..., -1:]
    if top_p < 0.5:
        return logits.clone()
    return logits.masked_fill(logits < kth, float("-inf"))
""")
tp("out_neg_inf_rows_nan", "wrong", "softmax by hand without the max shift: logits above ~88 overflow to inf/nan (arguable: only caught if the check uses large logits)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    e = s.exp()
    p = e / e.sum(-1, keepdim=True)
    remove = p.cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
# right answers for 8.3
tp("out_right_pairwise", "right", "no sort: each token's tail mass from a (B, V, V) comparison on (logit, id)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    probs = logits.softmax(-1)
    V = logits.shape[-1]
    ids = torch.arange(V)
    a, b = logits[..., :, None], logits[..., None, :]  # token i vs token j
    below = (b < a) | ((b == a) & (ids[None, :] <= ids[:, None]))  # j at or below i in HF's order
    tail = (below * probs[..., None, :]).sum(-1)
    rank_from_top = (~below).sum(-1)  # tokens strictly above i
    remove = (tail <= 1 - top_p) & (rank_from_top >= min_tokens_to_keep)
    return torch.where(remove, torch.full_like(logits, float("-inf")), logits)
""")
tp("out_right_argsort_inverse", "right", "argsort, then the inverse permutation (argsort of argsort) instead of scatter", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    order = torch.argsort(logits, dim=-1, stable=True)
    probs = torch.gather(logits.softmax(-1), -1, order)
    remove_sorted = probs.cumsum(-1) <= (1 - top_p)
    V = logits.shape[-1]
    remove_sorted[..., V - min_tokens_to_keep:] = False
    rank = torch.argsort(order, dim=-1)
    remove = torch.gather(remove_sorted, -1, rank)
    out = logits.clone()
    out[remove] = -math.inf
    return out
""")
tp("out_right_descending_mass_before", "right", "descending with HF's tie order (larger id first), removed when the mass above is >= p", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    V = logits.shape[-1]
    flipped = logits.flip(-1)  # larger ids first among ties
    s, order = flipped.sort(dim=-1, descending=True, stable=True)
    order = V - 1 - order  # back to vocabulary ids
    p = s.softmax(-1)
    above = p.cumsum(-1) - p
    remove = 1 - above <= 1 - top_p
    remove[..., :min_tokens_to_keep] = False
    return logits.masked_fill(torch.zeros_like(remove).scatter(-1, order, remove), float("-inf"))
""")
tp("out_right_python_rows", "right", "plain Python per row: accumulate the mass from the least probable token", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    out = logits.clone()
    B, V = logits.shape
    for b in range(B):
        row = logits[b]
        probs = torch.softmax(row, 0)
        order = torch.argsort(row, stable=True).tolist()
        mass = torch.zeros((), dtype=probs.dtype)
        for pos, i in enumerate(order):
            mass = mass + probs[i]
            if pos >= V - min_tokens_to_keep:
                break
            if mass <= 1 - top_p:
                out[b, i] = float("-inf")
            else:
                break
    return out
""")
tp("out_right_nd_reshape", "right", "reshapes (..., V) to 2-D, marks the tokens to KEEP and scatter_s them into zeros", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    shape = logits.shape
    x = logits.reshape(-1, shape[-1])
    order = torch.sort(x, dim=-1, stable=True).indices
    sorted_probs = torch.softmax(x, -1).gather(-1, order)
    cum = torch.cumsum(sorted_probs, dim=-1)
    keep_sorted = cum > 1 - top_p
    keep_sorted[:, -min_tokens_to_keep:] = True
    keep = torch.zeros_like(keep_sorted)
    keep.scatter_(-1, order, keep_sorted)
    return torch.where(keep, x, torch.tensor(float("-inf"), dtype=x.dtype)).reshape(shape)
""")
tp("out_right_early_exit", "right", "returns a copy at once when top_p >= 1, else HF's rule with torch.where", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    if top_p >= 1:
        return logits.clone()
    s, order = logits.sort(dim=-1, stable=True)
    remove = torch.cumsum(torch.softmax(s, dim=-1), dim=-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    remove = torch.empty_like(remove).scatter_(-1, order, remove)
    return torch.where(remove, -torch.inf, logits)
""")

# ---------------------------------------------------------------- 8.4 ----
_REF_SAMPLE = _HF_TOP_P + '''
def _filt(logits, temperature, top_k, top_p):
    logits = logits / temperature
    if top_k is not None:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None:
        logits = my_top_p(logits, top_p)
    return logits
'''


def _sl_variant(body):
    return _REF_SAMPLE + body


sl("out_topp_before_temperature", "wrong", "nucleus measured on the untempered logits, temperature after", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1]
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k).values[:, -1:], -math.inf)
        if top_p is not None:
            logits = my_top_p(logits, top_p)
        probs = (logits / temperature).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
sl("out_topp_before_topk", "wrong", "nucleus of the full distribution, then top-k", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1] / temperature
        if top_p is not None:
            logits = my_top_p(logits, top_p)
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k).values[:, -1:], -math.inf)
        probs = logits.softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
sl("out_crop_one_short", "wrong", "feeds the last context_length - 1 tokens", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -(ctx - 1):])[0][:, -1]
        probs = _filt(logits, temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_crop_head", "wrong", "feeds the FIRST context_length tokens", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, :ctx])[0][:, -1]
        probs = _filt(logits, temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_crop_prompt_once", "wrong", "crops the prompt once, then feeds the growing sequence uncropped", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    seq = ids[:, -ctx:]
    head = ids[:, :-ctx] if ids.shape[1] > ctx else ids[:, :0]
    for _ in range(n):
        logits = model(seq[:, -ctx:] if seq.shape[1] <= ctx else seq)[0][:, -1]
        probs = _filt(logits, temperature, top_k, top_p).softmax(-1)
        seq = torch.cat([seq, torch.multinomial(probs, 1, generator=generator)], 1)
    return torch.cat([head, seq], 1)
"""))
sl("out_hardcoded_window_8", "wrong", "hard-codes the check model's window of 8 tokens", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        logits = model(ids[:, -8:])[0][:, -1]
        probs = _filt(logits, temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_draws_twice", "wrong", "draws a token to look at, then draws again (two draws per step)", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        _peek = torch.multinomial(probs, 1, generator=generator)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_per_row_draws", "right", "one multinomial per row; judged right: on the CPU each row of a (B, 1) draw takes its number from the generator in turn, so B one-row draws give the same tokens and leave the generator in the same state (the text's 'once per step' is there so that the stream matches, and it does)", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        nxt = torch.stack([torch.multinomial(probs[b], 1, generator=generator) for b in range(probs.shape[0])])
        ids = torch.cat([ids, nxt], 1)
    return ids
"""))
sl("out_rows_one_after_another", "wrong", "samples all n tokens of row 0, then of row 1: the draws come in another order", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    rows = []
    for b in range(ids.shape[0]):
        row = ids[b:b + 1]
        for _ in range(n):
            probs = _filt(model(row[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
            row = torch.cat([row, torch.multinomial(probs, 1, generator=generator)], 1)
        rows.append(row)
    return torch.cat(rows, 0)
"""))
sl("out_argmax", "wrong", "greedy: argmax instead of a draw", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, probs.argmax(-1, keepdim=True)], 1)
    return ids
"""))
sl("out_temperature_multiplies", "wrong", "multiplies the logits by the temperature", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1] * temperature * temperature
        probs = _filt(logits, temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_topk_plus_one", "wrong", "keeps top_k + 1 tokens (off by one)", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1] / temperature
        if top_k is not None:
            kth = logits.topk(min(top_k + 1, logits.shape[-1])).values[:, -1:]
            logits = logits.masked_fill(logits < kth, -math.inf)
        if top_p is not None:
            logits = my_top_p(logits, top_p)
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
    return ids
""")
sl("out_topk_strict", "wrong", "keeps logits > the k-th largest: only k - 1 tokens", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1] / temperature
        if top_k is not None:
            kth = logits.topk(top_k).values[:, -1:]
            logits = logits.masked_fill(logits <= kth, -math.inf)
        if top_p is not None:
            logits = my_top_p(logits, top_p)
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
    return ids
""")
sl("out_ignores_top_k", "wrong", "forgets top_k", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, None, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_ignores_top_p", "wrong", "forgets top_p", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, None).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_log_probs_to_multinomial", "wrong", "passes log-probabilities to multinomial (it raises)", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logp = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).log_softmax(-1)
        ids = torch.cat([ids, torch.multinomial(logp, 1, generator=generator)], 1)
    return ids
"""))
sl("out_returns_new_only", "wrong", "returns only the n new tokens (B, n)", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    new = []
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        nxt = torch.multinomial(probs, 1, generator=generator)
        new.append(nxt)
        ids = torch.cat([ids, nxt], 1)
    return torch.cat(new, 1)
"""))
sl("out_returns_window", "wrong", "keeps only the window: ids = ids[:, -ctx:] each step, so the returned sequence is cropped", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        ids = ids[:, -ctx:]
        probs = _filt(model(ids)[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_own_generator", "wrong", "makes its own seeded generator, ignoring the caller's", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=g)], 1)
    return ids
"""))
sl("out_global_rng_from_seed", "wrong", "reseeds the GLOBAL RNG with the generator's seed and draws from it: same stream for a fresh generator, but clobbers torch's global state and ignores the generator's position", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    if generator is not None:
        torch.manual_seed(generator.initial_seed())
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1)], 1)
    return ids
"""))
sl("out_companion_sample", "wrong", "calls the companion's sample: imports the answer", """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    return decoding.sample(model, ids, n, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)
""")
sl("out_companion_next_token_probs", "wrong", "uses the companion's next_token_probs (its top-p ties keep the smaller ids, not my_top_p's rule); arguable", """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = next_token_probs(model(ids[:, -ctx:])[0][:, -1], temperature=temperature, top_k=top_k, top_p=top_p)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
sl("out_n_samples_at_once", "wrong", "draws all n tokens from the first step's distribution", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
    return torch.cat([ids, torch.multinomial(probs, n, replacement=True, generator=generator)], 1)
"""))
sl("out_first_position", "wrong", "takes the first position's logits", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, 0], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_n_minus_one", "wrong", "range(n - 1): one token short", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n - 1):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_row0_draw_for_all", "wrong", "draws once from row 0's distribution and appends it to every row", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        nxt = torch.multinomial(probs[:1], 1, generator=generator).expand(ids.shape[0], 1)
        ids = torch.cat([ids, nxt], 1)
    return ids
"""))
sl("out_top_p_on_probs", "wrong", "passes probabilities (not logits) to my_top_p, then samples from their softmax", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1] / temperature
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k).values[:, -1:], -math.inf)
        probs = logits.softmax(-1)
        if top_p is not None:
            probs = my_top_p(probs, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
sl("out_train_mode", "wrong", "puts the model in training mode (dropout) before sampling; arguable if the check model has no dropout", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    model.train()
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
# right answers for 8.4
sl("out_right_topk_before_temperature", "right", "top-k before the temperature: dividing by tau > 0 keeps the same k largest", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1]
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k).values[:, -1:], -math.inf)
        logits = logits / temperature
        if top_p is not None:
            logits = my_top_p(logits, top_p)
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
    return ids
""")
sl("out_right_unnormalized_weights", "right", "gives multinomial exp(logits - max) unnormalized (it normalizes itself)", _REF_SAMPLE + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        z = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p)
        w = (z - z.max(dim=-1, keepdim=True).values).exp()
        ids = torch.cat([ids, torch.multinomial(w, 1, generator=generator)], 1)
    return ids
""")
sl("out_right_preallocated", "right", "preallocates (B, T + n) and fills a column per step, window by start index", _REF_SAMPLE + """
@torch.no_grad()
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    B, T = ids.shape
    out = torch.empty(B, T + n, dtype=ids.dtype)
    out[:, :T] = ids
    ctx = model.config.context_length
    for t in range(T, T + n):
        start = max(0, t - ctx)
        logits, _ = model(out[:, start:t])
        probs = torch.softmax(_filt(logits[:, -1, :], temperature, top_k, top_p), dim=-1)
        out[:, t] = torch.multinomial(probs, num_samples=1, generator=generator).squeeze(1)
    return out
""")
sl("out_right_zeroed_probs", "right", "top-k by zeroing probabilities, the nucleus on their log (softmax renormalizes)", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = torch.softmax(model(ids[:, -ctx:])[0][:, -1] / temperature, -1)
        if top_k is not None:
            kth = torch.topk(probs, top_k, dim=-1).values[:, -1:]
            probs = torch.where(probs >= kth, probs, torch.zeros_like(probs))
            probs = probs / probs.sum(-1, keepdim=True)
        if top_p is not None:
            probs = my_top_p(probs.log(), top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
sl("out_right_sort_scatter_topk", "right", "top-k by sorting and scattering -inf past rank k; a list of steps concatenated at the end", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = getattr(model.config, "context_length")
    steps = [ids]
    seq = ids
    for _ in range(n):
        logits = model(seq[:, -ctx:])[0][:, -1, :].div(temperature)
        if top_k is not None and top_k < logits.shape[-1]:
            order = logits.argsort(dim=-1, descending=True)
            drop = torch.zeros_like(logits, dtype=torch.bool)
            drop.scatter_(-1, order[:, top_k:], True)
            logits = logits.masked_fill(drop, float("-inf"))
        if top_p is not None and top_p < 1.0:
            logits = my_top_p(logits, top_p)
        tok = torch.multinomial(F.softmax(logits, dim=-1), 1, generator=generator)
        steps.append(tok)
        seq = torch.cat([seq, tok], dim=1)
    return torch.cat(steps, dim=1)
import torch.nn.functional as F
""")
sl("out_right_window_if", "right", "crops only when the sequence is longer than the window, with an explicit if", _REF_SAMPLE + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    window = model.config.context_length
    seq = ids.clone()
    for step in range(n):
        feed = seq if seq.size(1) <= window else seq[:, seq.size(1) - window:]
        out = model(feed)
        last = out[0][:, -1]
        p = _filt(last, temperature, top_k, top_p).softmax(dim=1)
        seq = torch.cat((seq, torch.multinomial(p, 1, generator=generator)), dim=1)
    return seq
""")

# ---------------------------------------------------------------- 8.6 ----
# A reference shape of the loop; the wrong cases each change one thing.
_CB_REF = '''
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits, _ = model(prompt[None], cache=cache)
    seqs, scores = prompt[None], torch.zeros(1)
    for step in range(n):
        logp = logits[:, -1].log_softmax(-1)
        V = logp.shape[-1]
        cand = (scores[:, None] + logp).reshape(-1)
        scores, flat = cand.topk(min(k, cand.numel()))
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        if step < n - 1:
            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)
    return seqs, scores
'''


def _cb(old, new, count=1):
    assert _CB_REF.count(old) == count, old
    return _CB_REF.replace(old, new)


cb("out_no_cache", "wrong", "feeds the whole sequences every step, no cache", """
def my_beam_search(model, prompt, n, k):
    seqs, scores = prompt[None], torch.zeros(1)
    for step in range(n):
        logp = model(seqs)[0][:, -1].log_softmax(-1)
        V = logp.shape[-1]
        cand = (scores[:, None] + logp).reshape(-1)
        scores, flat = cand.topk(min(k, cand.numel()))
        seqs = torch.cat([seqs[flat // V], (flat % V)[:, None]], 1)
    return seqs, scores
""")
cb("out_k_copies_of_prompt", "wrong", "feeds k copies of the prompt (the text: once, as a batch of one), -inf for the copies", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits, _ = model(prompt[None].repeat(k, 1), cache=cache)
    seqs = prompt[None].repeat(k, 1)
    scores = torch.full((k,), -math.inf)
    scores[0] = 0.0
    for step in range(n):
        logp = logits[:, -1].log_softmax(-1)
        V = logp.shape[-1]
        cand = (scores[:, None] + logp).reshape(-1)
        scores, flat = cand.topk(k)
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        if step < n - 1:
            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)
    return seqs, scores
""")
cb("out_adds_probabilities", "wrong", "adds probabilities instead of log-probabilities", _cb(
    "logp = logits[:, -1].log_softmax(-1)", "logp = logits[:, -1].softmax(-1)"))
cb("out_adds_logits", "wrong", "adds raw logits (no log-softmax)", _cb(
    "logp = logits[:, -1].log_softmax(-1)", "logp = logits[:, -1]"))
cb("out_reorder_after_feed", "wrong", "feeds the new tokens first, then reorders the cache", _cb(
    """            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)""",
    """            cache.reorder(torch.arange(len(parents)) % cache.batch_size)
            logits, _ = model(tokens[:, None], cache=cache)
            cache.reorder(parents)"""))
cb("out_reorder_sorted_parents", "wrong", "reorders the cache by the SORTED parents while the beams stay in score order", _cb(
    "cache.reorder(parents)", "cache.reorder(parents.sort().values)"))
cb("out_seqs_not_reindexed", "wrong", "the cache follows the parents but the sequences do not (history of the wrong beam)", _cb(
    "seqs = torch.cat([seqs[parents], tokens[:, None]], 1)",
    "seqs = torch.cat([seqs.expand(len(parents), -1) if seqs.shape[0] == 1 else seqs[:len(parents)], tokens[:, None]], 1)"))
cb("out_last_token_score", "wrong", "ranks by the new token's log-probability only (scores not summed)", _cb(
    "cand = (scores[:, None] + logp).reshape(-1)", "cand = (0 * scores[:, None] + logp).reshape(-1)"))
cb("out_ascending", "wrong", "returns the beams worst first", _cb(
    "    return seqs, scores", "    return seqs.flip(0), scores.flip(0)"))
cb("out_generated_only", "wrong", "returns the sequences without the prompt (k, n)", _cb(
    "    return seqs, scores", "    return seqs[:, len(prompt):], scores"))
cb("out_mean_scores", "wrong", "returns the average log-probability per token (same ranking, wrong scores)", _cb(
    "    return seqs, scores", "    return seqs, scores / n"))
cb("out_prob_scores", "wrong", "returns probabilities exp(score)", _cb(
    "    return seqs, scores", "    return seqs, scores.exp()"))
cb("out_n_minus_one", "wrong", "n - 1 new tokens", _cb(
    "for step in range(n):", "for step in range(n - 1):"))
cb("out_hardcoded_V5", "wrong", "hard-codes the check model's 5 tokens", _cb(
    "V = logp.shape[-1]", "V = 5"))
cb("out_min_k_V", "wrong", "keeps min(k, V) candidates at every step, not min(k, n_beams * V)", _cb(
    "scores, flat = cand.topk(min(k, cand.numel()))", "scores, flat = cand.topk(min(k, logp.shape[-1]))"))
cb("out_per_beam_best", "wrong", "each beam keeps its own best token (k greedy runs after the first step)", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits, _ = model(prompt[None], cache=cache)
    logp = logits[:, -1].log_softmax(-1)[0]
    scores, tokens = logp.topk(min(k, logp.numel()))
    seqs = torch.cat([prompt[None].repeat(len(tokens), 1), tokens[:, None]], 1)
    cache.reorder(torch.zeros(len(tokens), dtype=torch.long))
    for step in range(1, n):
        logits, _ = model(tokens[:, None], cache=cache)
        lp, tokens = logits[:, -1].log_softmax(-1).max(-1)
        scores = scores + lp
        seqs = torch.cat([seqs, tokens[:, None]], 1)
    order = scores.argsort(descending=True)
    return seqs[order], scores[order]
""")
cb("out_companion_beam_search", "wrong", "calls the companion's beam_search: imports the answer", """
def my_beam_search(model, prompt, n, k):
    res = decoding.beam_search(model, prompt, n, k=k, n_best=k)
    seqs = torch.stack([h.tokens for h in res.hypotheses])
    scores = torch.tensor([float(h.score) for h in res.hypotheses])
    return seqs, scores
""")
cb("out_mutates_prompt", "wrong", "prompt.unsqueeze_(0) changes the caller's prompt to (1, T)", """
def my_beam_search(model, prompt, n, k):
    prompt.unsqueeze_(0)
    cache = model.new_cache()
    logits, _ = model(prompt, cache=cache)
    seqs, scores = prompt, torch.zeros(1)
    for step in range(n):
        logp = logits[:, -1].log_softmax(-1)
        V = logp.shape[-1]
        cand = (scores[:, None] + logp).reshape(-1)
        scores, flat = cand.topk(min(k, cand.numel()))
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        if step < n - 1:
            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)
    return seqs, scores
""")
cb("out_feeds_parents", "wrong", "feeds the parents' ids as the new tokens", _cb(
    "logits, _ = model(tokens[:, None], cache=cache)", "logits, _ = model(parents[:, None], cache=cache)"))
cb("out_prompt_in_two_calls", "wrong", "feeds the prompt in two calls (all but the last token, then the last): the text says once", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    if len(prompt) > 1:
        model(prompt[None, :-1], cache=cache)
    logits, _ = model(prompt[None, -1:], cache=cache)
    seqs, scores = prompt[None], torch.zeros(1)
    for step in range(n):
        logp = logits[:, -1].log_softmax(-1)
        V = logp.shape[-1]
        cand = (scores[:, None] + logp).reshape(-1)
        scores, flat = cand.topk(min(k, cand.numel()))
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        if step < n - 1:
            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)
    return seqs, scores
""")
cb("out_new_cache_each_step", "wrong", "a fresh cache every step, fed the whole sequences (the cache does nothing)", """
def my_beam_search(model, prompt, n, k):
    seqs, scores = prompt[None], torch.zeros(1)
    for step in range(n):
        cache = model.new_cache()
        logp = model(seqs, cache=cache)[0][:, -1].log_softmax(-1)
        V = logp.shape[-1]
        cand = (scores[:, None] + logp).reshape(-1)
        scores, flat = cand.topk(min(k, cand.numel()))
        seqs = torch.cat([seqs[flat // V], (flat % V)[:, None]], 1)
    return seqs, scores
""")
cb("out_lists_returned", "wrong", "returns Python lists instead of tensors", _cb(
    "    return seqs, scores", "    return seqs.tolist(), scores.tolist()"))
cb("out_first_token_scored_twice", "wrong", "adds the first step's log-probability twice (scores off, ranking may change)", _cb(
    "        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)",
    "        if step == 0:\n            scores = scores + logp.reshape(-1)[flat]\n        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)"))
cb("out_float_division_index", "wrong", "flat / V: float indices (raises)", _cb(
    "parents, tokens = flat // V, flat % V", "parents, tokens = flat / V, flat % V"))
cb("out_parents_mod_beams", "wrong", "parent = flat % n_beams, token = flat // n_beams (mixed up the layout)", _cb(
    "parents, tokens = flat // V, flat % V", "parents, tokens = flat % len(logp), flat // len(logp)"))
cb("out_single_beam_prefix_dup", "wrong", "greedy: k ignored", _cb(
    "scores, flat = cand.topk(min(k, cand.numel()))", "scores, flat = cand.topk(1)"))
cb("out_sorted_by_tokens", "wrong", "returns the beams sorted by their token ids, not by score", _cb(
    "    return seqs, scores",
    "    order = sorted(range(len(seqs)), key=lambda i: seqs[i].tolist())\n    return seqs[order], scores[order]"))
cb("out_topk_unsorted", "wrong", "topk(sorted=False): the final beams are not guaranteed best first; arguable if torch returns them sorted anyway", _cb(
    "scores, flat = cand.topk(min(k, cand.numel()))", "scores, flat = cand.topk(min(k, cand.numel()), sorted=False)"))
# right answers for 8.6
cb("out_right_feed_at_top", "right", "feeds at the top of the loop: the prompt at step 0, the reordered beams' tokens after", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    seqs = prompt.unsqueeze(0)
    scores = torch.zeros(1, dtype=torch.float64)
    parents = tokens = None
    for step in range(n):
        if step == 0:
            logits = model(seqs, cache=cache)[0]
        else:
            cache.reorder(parents)
            logits = model(tokens.unsqueeze(1), cache=cache)[0]
        logp = torch.log_softmax(logits[:, -1].double(), dim=-1)
        V = logp.size(-1)
        total = scores.unsqueeze(1) + logp
        scores, flat = total.flatten().topk(min(k, total.numel()))
        parents = torch.div(flat, V, rounding_mode="floor")
        tokens = flat - parents * V
        seqs = torch.cat((seqs.index_select(0, parents), tokens.unsqueeze(1)), dim=1)
    return seqs, scores
""")
cb("out_right_sort_unravel", "right", "sorts every candidate, takes the first k, torch.unravel_index", """
def my_beam_search(model, prompt, n, k):
    with torch.no_grad():
        cache = model.new_cache()
        logits, _ = model(prompt.view(1, -1), cache=cache)
        seqs = prompt.view(1, -1)
        scores = logits.new_zeros(1)
        for step in range(n):
            logp = logits[:, -1, :] - torch.logsumexp(logits[:, -1, :], dim=-1, keepdim=True)
            total = scores[:, None] + logp
            vals, idx = torch.sort(total.flatten(), descending=True)
            vals, idx = vals[:k], idx[:k]
            parents, tokens = torch.unravel_index(idx, total.shape)
            seqs = torch.cat([seqs[parents], tokens[:, None]], dim=1)
            scores = vals
            if step + 1 < n:
                cache.reorder(parents)
                logits, _ = model(tokens[:, None], cache=cache)
    return seqs, scores
""")
cb("out_right_python_beams", "right", "beams as (score, tokens) lists, the cache reordered with a LongTensor of parents", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits = model(prompt[None], cache=cache)[0][:, -1]
    beams = [(0.0, prompt.tolist())]
    for step in range(n):
        logp = torch.log_softmax(logits.double(), dim=-1)
        cands = []
        for b, (s, toks) in enumerate(beams):
            for t, lp in enumerate(logp[b].tolist()):
                cands.append((s + lp, b, t))
        cands = sorted(cands, key=lambda c: c[0], reverse=True)[:k]
        beams = [(s, beams[b][1] + [t]) for s, b, t in cands]
        if step < n - 1:
            cache.reorder(torch.tensor([b for _, b, _ in cands], dtype=torch.long))
            logits = model(torch.tensor([[t] for _, _, t in cands]), cache=cache)[0][:, -1]
    return torch.tensor([toks for _, toks in beams]), torch.tensor([s for s, _ in beams])
""")
cb("out_right_expand_first", "right", "after the prompt, the cache reordered with zeros to the first beams; scatter-free bookkeeping", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    last = model(prompt[None], cache=cache)[0][0, -1]
    logp = last.log_softmax(-1)
    scores, tokens = logp.topk(min(k, logp.numel()))
    seqs = torch.cat([prompt.expand(len(tokens), -1), tokens[:, None]], 1)
    for step in range(1, n):
        if step == 1:
            cache.reorder(torch.zeros(len(tokens), dtype=torch.long))
        logits = model(tokens[:, None], cache=cache)[0][:, -1]
        V = logits.shape[-1]
        total = (scores[:, None] + logits.log_softmax(-1)).flatten()
        scores, flat = total.topk(min(k, total.numel()))
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        cache.reorder(parents)
    return seqs, scores
""")
cb("out_extra_final_feed", "right", "feeds the last step's tokens too, after the search is over (n token feeds, not n - 1): one call more than needed, but the text does not forbid it (issue 33: accepted)", _cb(
    """        if step < n - 1:
            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)""",
    """        cache.reorder(parents)
        logits, _ = model(tokens[:, None], cache=cache)"""))
cb("out_right_repeat_interleave", "right", "parents from a repeat_interleave table instead of integer division", """
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    out, _ = model(prompt.reshape(1, -1), cache=cache)
    seqs, scores = prompt.reshape(1, -1), torch.zeros(1)
    for step in range(n):
        logp = F.log_softmax(out[:, -1], dim=-1)
        nb, V = logp.shape
        parent_of = torch.arange(nb).repeat_interleave(V)
        token_of = torch.arange(V).repeat(nb)
        scores, flat = (scores.unsqueeze(-1) + logp).view(-1).topk(min(k, nb * V))
        parents, tokens = parent_of[flat], token_of[flat]
        seqs = torch.column_stack([seqs[parents], tokens])
        if step != n - 1:
            cache.reorder(parents)
            out, _ = model(tokens.view(-1, 1), cache=cache)
    return seqs, scores
import torch.nn.functional as F
""")

# ------------------------------------------------------ 8.1, 8.2, 8.5 ----
gs("out_set_in_place", "wrong", "ids.set_(...) grows the caller's tensor in place", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
    return ids.set_(torch.cat([ids, nxt], 1))
""")
gs("out_returns_list", "wrong", "returns nested lists", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
    return torch.cat([ids, nxt], 1).tolist()
""")
gs("out_cat_dim0", "wrong", "concatenates the new tokens as a new row, (B + ..., T) garbage", """
def my_greedy_step(model, ids):
    nxt = model(ids)[:, -1].argmax(-1)
    return torch.cat([ids, nxt[None].expand(1, ids.shape[1]) if ids.shape[1] == nxt.shape[0] else nxt[None, :1].expand(1, ids.shape[1])], 0)
""")
gs("out_right_log_softmax_rows", "right", "row by row: each sequence fed alone, log-softmax, max", """
def my_greedy_step(model, ids):
    rows = []
    for row in ids:
        lp = model(row[None])[0, -1].log_softmax(-1)
        rows.append(torch.cat([row, lp.max(-1).indices.view(1)]))
    return torch.stack(rows)
""")
gs("out_right_new_empty", "right", "preallocates (B, T + 1) with new_empty", """
def my_greedy_step(model, ids):
    B, T = ids.shape
    out = ids.new_empty(B, T + 1)
    out[:, :T] = ids
    out[:, T] = model(ids)[:, T - 1].argmax(dim=1)
    return out
""")
bs("out_ties_by_larger_parent", "right", "sorts descending, larger index first among exactly equal scores; judged right: the text asks to go from best to worst and gives no rule for equal scores", """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    cand = beam_scores[:, None] + next_probs.log()
    V = cand.shape[1]
    flat = cand.flatten().flip(0)
    alive, finished = [], []
    for j in torch.sort(flat, descending=True, stable=True).indices.tolist():
        i = len(flat) - 1 - j
        p, t = divmod(i, V)
        (finished if t == eos_id else alive).append((p, t, float(cand[p, t])))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("out_finished_capped_k", "wrong", "also stops when finished holds k", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] + torch.log(next_probs)):
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k or len(finished) == k:
            break
    return alive, finished
""")
bs("out_skips_zero_prob_then_counts", "wrong", "drops the beam's own score: scores are log next_probs only", _RANK + """
def my_beam_step(beam_scores, next_probs, k, eos_id):
    alive, finished = [], []
    for p, t, s in _ranked(beam_scores[:, None] + torch.log(next_probs)):
        s = s - float(beam_scores[p])
        (finished if t == eos_id else alive).append((p, t, s))
        if len(alive) == k:
            break
    return alive, finished
""")
bs("out_right_check_full_first", "right", "checks for a full beam before taking each candidate, heapq for the order", """
import heapq
def my_beam_step(beam_scores, next_probs, k, eos_id):
    n, V = next_probs.shape
    logp = next_probs.double().log()
    heap = [(-(float(beam_scores[p]) + float(logp[p, t])), p, t) for p in range(n) for t in range(V)]
    heapq.heapify(heap)
    alive, finished = [], []
    while heap:
        if len(alive) == k:
            break
        neg, p, t = heapq.heappop(heap)
        (finished if t == eos_id else alive).append((p, t, -neg))
    return alive, finished
""")
kv("out_cat_in_place_views", "wrong", "writes the new key into a preallocated buffer but attends over the whole buffer (zeros included)", """
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache.get("k") is None:
        cache["k"] = torch.zeros(k_new.shape[0], 64, k_new.shape[-1])
        cache["v"] = torch.zeros(v_new.shape[0], 64, v_new.shape[-1])
        cache["t"] = 0
    t = cache["t"]
    cache["k"][:, t:t + 1] = k_new
    cache["v"][:, t:t + 1] = v_new
    cache["t"] = t + 1
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2) / math.sqrt(q_new.shape[-1]), -1)
    return w @ cache["v"]
""")
kv("out_scale_value", "wrong", "scales the values instead of the scores", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    w = torch.softmax(q_new @ cache["k"].transpose(1, 2), -1)
    return w @ (cache["v"] / math.sqrt(q_new.shape[-1]))
""")
kv("out_only_new_key", "wrong", "attends to the new token only (output = v_new)", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    return v_new.clone()
""")
kv("out_right_baddbmm", "right", "baddbmm with alpha for the scale, log-softmax then exp", _APPEND + """
def my_cached_attention(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    K, V = cache["k"], cache["v"]
    s = torch.baddbmm(q_new.new_zeros(q_new.shape[0], 1, K.shape[1]), q_new, K.transpose(1, 2), beta=0, alpha=q_new.shape[-1] ** -0.5)
    return torch.bmm(s.log_softmax(-1).exp(), V)
""")

# ------------------------------------------------------------ round 2 ---
tp("out_float16_mass", "wrong", "computes the probabilities in float16: the mass is off by ~1e-3", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.half().softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
tp("out_min_tokens_by_value", "wrong", "protects every token whose logit is >= the m-th largest: ties at the m-th value all stay", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove = remove.scatter(-1, order, remove)
    mth = logits.topk(min_tokens_to_keep, dim=-1).values[..., -1:]
    remove = remove & (logits < mth)
    return logits.masked_fill(remove, float("-inf"))
""")
tp("out_mass_float64_vs_p", "wrong", "the mass in float64 on float32 logits, which the text forbids (issue 33: enforced)", """
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    s, order = torch.sort(logits.double(), dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
""")
sl("out_temperature_twice", "wrong", "divides by the temperature twice (once more before the nucleus)", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1] / temperature
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k).values[:, -1:], -math.inf)
        if top_p is not None:
            logits = my_top_p(logits / temperature, top_p)
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
    return ids
""")
sl("out_min_tokens_is_top_k", "wrong", "passes top_k as my_top_p's min_tokens_to_keep", _HF_TOP_P + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        logits = model(ids[:, -ctx:])[0][:, -1] / temperature
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k).values[:, -1:], -math.inf)
        if top_p is not None:
            logits = my_top_p(logits, top_p, top_k or 1)
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=generator)], 1)
    return ids
""")
sl("out_window_from_pos_emb", "right", "reads the window from the position table's size (model.pos_emb.num_embeddings)", _REF_SAMPLE + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.pos_emb.num_embeddings if hasattr(model, "pos_emb") else model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
""")
cb("out_reorder_keys_only", "wrong", "reorders each layer's keys by hand and forgets the values", _cb(
    "cache.reorder(parents)",
    "for layer in cache.layers:\n                layer.k = layer.k[parents]"))
cb("out_right_skip_identity_reorder", "right", "skips the reorder when the parents are already 0..n-1 in order", _cb(
    "cache.reorder(parents)",
    "if not (len(parents) == cache.batch_size and torch.equal(parents, torch.arange(len(parents)))):\n                cache.reorder(parents)"))
cb("out_right_manual_layer_reorder", "right", "arguable: reorders every layer's keys and values by hand instead of cache.reorder", _cb(
    "cache.reorder(parents)",
    "for layer in cache.layers:\n                layer.k, layer.v = layer.k[parents], layer.v[parents]"))
cb("out_hardcoded_vocab_from_config", "right", "V from model.config.vocab_size instead of the logits' shape", _cb(
    "V = logp.shape[-1]", "V = model.config.vocab_size"))
sl("out_resets_generator", "wrong", "generator.manual_seed(generator.initial_seed()): rewinds the caller's generator, so a used generator repeats its draws", _sl_variant("""
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    if generator is not None:
        generator.manual_seed(generator.initial_seed())  # "for reproducibility"
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
    return ids
"""))
sl("out_right_replacement_flag", "right", "multinomial(probs, 1, True, generator=...): with one sample, replacement changes nothing", _REF_SAMPLE + """
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    ctx = model.config.context_length
    for _ in range(n):
        probs = _filt(model(ids[:, -ctx:])[0][:, -1], temperature, top_k, top_p).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, True, generator=generator)], 1)
    return ids
""")
