"""Mutation registry of chapter 8 (decoding and beam search): see tests/mutation_harness.py.

The sampling mutants of 8.1 are random: each is caught unless it draws the argmax on all 96 rows
of the check, which has a probability below 1e-12 (see companion.exercises.decoding).

The references are the book's solutions, character for character: the last test reads them from
book/08_beam_search.ipynb, so that what the harness proves is about the solution students see.
"""
import inspect
import math
import re
from pathlib import Path

import torch

from companion import decoding
from companion.exercises import decoding as check
from mutation_harness import Exercise, Mutant, make_tests
from test_exercises_decoding import ranked_candidates


# --- 8.1 ---------------------------------------------------------------------------------------------
def my_greedy_step(model, ids):
    logits = model(ids)  # (B, T, V)
    # the last position predicts the next token: (B, 1)
    next_ids = logits[:, -1].argmax(dim=-1, keepdim=True)
    return torch.cat([ids, next_ids], dim=1)  # (B, T + 1)


def _sampler(temperature=1.0, top_k=None):
    def step(model, ids):
        logits = model(ids)[:, -1] / temperature
        if top_k is not None:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        return torch.cat([ids, torch.multinomial(logits.softmax(-1), 1)], dim=1)
    return step


def _append(pick):
    return lambda model, ids: torch.cat([ids, pick(model(ids)).unsqueeze(-1)], dim=1)


GREEDY = [
    Mutant("samples", _sampler(), "samples"),
    Mutant("samples at temperature 0.5", _sampler(0.5), "samples"),
    Mutant("samples from the top 2", _sampler(top_k=2), "samples"),
    Mutant("samples at temperature 0.01", _sampler(0.01), "samples"),
    Mutant("first position", _append(lambda l: l[:, 0].argmax(-1)), "first position's logits"),
    Mutant("pooled over positions", _append(lambda l: l.mean(1).argmax(-1)), "pooled the logits"),
    Mutant("argmin", _append(lambda l: l[:, -1].argmin(-1)), "argmin"),
    Mutant("only the new tokens", lambda m, ids: m(ids)[:, -1].argmax(-1), "only the new tokens"),
    Mutant("returns ids unchanged", lambda m, ids: ids),
    Mutant("second best", _append(lambda l: l[:, -1].topk(2, dim=-1).indices[:, 1]), "second most probable"),
    Mutant("feeds only the last token", lambda m, ids: torch.cat([ids, m(ids[:, -1:])[:, -1].argmax(-1, keepdim=True)], 1)),
    Mutant("float ids", lambda m, ids: my_greedy_step(m, ids).float(), "integer token ids"),
    Mutant("returns None", lambda m, ids: None, "a tensor of token ids"),
    Mutant("prepends the token", lambda m, ids: torch.cat([m(ids)[:, -1].argmax(-1, keepdim=True), ids], 1),
           "first T columns must be the input"),
    Mutant("argmax without keepdim", lambda m, ids: torch.cat([ids, m(ids)[:, -1].argmax(-1)], 1), "RuntimeError",
           raised=True),
]


# --- 8.2 ---------------------------------------------------------------------------------------------
def my_beam_step(beam_scores, next_probs, k, eos_id):
    n, V = next_probs.shape
    # (n, V): the summed log-probability of every candidate
    scores = beam_scores[:, None] + next_probs.log()
    alive, finished = [], []
    for flat in scores.flatten().argsort(descending=True).tolist():
        if len(alive) == k:  # the beam is full: the rest are pruned
            break
        parent, token = divmod(flat, V)
        target = finished if token == eos_id else alive
        target.append((parent, token, scores[parent, token].item()))
    return alive, finished


def _beam(combine=None, per_beam=False, keep_eos=False, drop_finished=False, stop_total=False, swap=False,
          score_out=lambda s: s, order=lambda a, f: (a, f)):
    def beam_step(beam_scores, next_probs, k, eos_id):
        flat = ranked_candidates(beam_scores, next_probs, k, combine, per_beam)
        alive, finished = [], []
        for s, p, t in flat:
            if len(alive) == k or (stop_total and len(alive) + len(finished) == k):
                break
            item = (t, p, score_out(s)) if swap else (p, t, score_out(s))
            if t == eos_id and not keep_eos:
                if not drop_finished:
                    finished.append(item)
            else:
                alive.append(item)
        return order(alive, finished)
    return beam_step


BEAM = [
    Mutant("multiplied probabilities", _beam(combine=lambda s, p: s[:, None].exp() * p), "multiplied probabilities"),
    Mutant("score times probability", _beam(combine=lambda s, p: s[:, None] * p), "multiplied the score by the probability"),
    Mutant("raw probabilities added", _beam(combine=lambda s, p: s[:, None] + p), "added raw probabilities"),
    Mutant("beam scores ignored", _beam(combine=lambda s, p: p.log().expand(len(s), -1).clone()),
           "ignore the beams' own scores"),
    Mutant("best k of each beam", _beam(per_beam=True), "each beam separately"),
    Mutant("eos stays alive", _beam(keep_eos=True), "must leave the beam"),
    Mutant("finished dropped", _beam(drop_finished=True), "you dropped the hypotheses that end"),
    Mutant("worst first", _beam(order=lambda a, f: (a[::-1], f[::-1])), "best first"),
    Mutant("returns alive only", _beam(order=lambda a, f: a), "must be lists"),
    Mutant("returns a number", lambda *a: 42, "pair `(alive, finished)`"),
    Mutant("parent and token swapped", _beam(swap=True), "parent and token are swapped"),
    Mutant("probabilities as scores", _beam(score_out=math.exp), "summed log-probabilities"),
    Mutant("scores in base 2", _beam(score_out=lambda s: s / math.log(2)), "scores are wrong"),
    Mutant("stops at k hypotheses in all", _beam(stop_total=True)),
    Mutant("returns None", lambda *a: None, "pair `(alive, finished)`"),
    Mutant("strings in the triples", _beam(order=lambda a, f: ([(str(p), t, s) for p, t, s in a], f)), "must be lists"),
]


# --- 8.3: top-p with Hugging Face's rule -------------------------------------------------------------
def my_top_p(logits, top_p, min_tokens_to_keep=1):
    # ascending: the least probable first, ties with the smaller id first
    sorted_logits, order = logits.sort(dim=-1, stable=True)
    # (B, V): the probability of each token and all less probable ones
    tail_mass = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = tail_mass <= 1 - top_p  # the rest still holds >= top_p
    remove[:, -min_tokens_to_keep:] = False  # the most probable stay
    # back to vocabulary order: token order[b, j] gets remove[b, j]
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove, float("-inf"))


def _nucleus(rule="tail", keep_end="top", fill=float("-inf"), stable=True, softmax=True, scatter=True,
             in_place=False, dim=-1):
    """The reference, written from the most probable token down or up, with one mistake."""
    def top_p(logits, top_p, min_tokens_to_keep=1):
        x = logits.T if dim == 0 else logits
        if rule in ("tail", "tail <"):
            s, o = x.sort(dim=-1, stable=stable)
            mass = (s.softmax(-1) if softmax else s).cumsum(-1)
            remove = mass <= 1 - top_p if rule == "tail" else mass < 1 - top_p
            if keep_end == "top":
                remove[:, -min_tokens_to_keep:] = False
            elif keep_end == "bottom":
                remove[:, :min_tokens_to_keep] = False
        else:  # from the most probable down; descending sort keeps ties with the smaller id first
            s, o = x.sort(dim=-1, descending=True, stable=True)
            p = s.softmax(-1)
            before = p.cumsum(-1) - p
            remove = {"crossing dropped": p.cumsum(-1) > top_p, "before >": before > top_p,
                      "before >=": before >= top_p}[rule]
            if keep_end == "top":
                remove[:, :min_tokens_to_keep] = False
        if not scatter:
            return s.masked_fill(remove, fill)
        remove = remove.scatter(-1, o, remove)
        if in_place:
            return logits.masked_fill_(remove.T if dim == 0 else remove, fill)
        out = x.masked_fill(remove, fill)
        return out.T if dim == 0 else out
    return top_p


def _flat_top_p(logits, top_p, min_tokens_to_keep=1):
    return my_top_p(logits.reshape(1, -1), top_p, min_tokens_to_keep).reshape(logits.shape)


def _own_probability(logits, top_p, min_tokens_to_keep=1):
    return logits.masked_fill(logits.softmax(-1) < 1 - top_p, float("-inf"))


def _low_precision_mass(dtype):
    def top_p(logits, top_p, min_tokens_to_keep=1):  # the outside red team's out_bfloat16_mass, out_float16_mass
        s, order = torch.sort(logits, dim=-1, stable=True)
        remove = s.to(dtype).softmax(-1).cumsum(-1) <= 1 - top_p
        remove[..., -min_tokens_to_keep:] = False
        return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))
    return top_p


def _exp_without_shift(logits, top_p, min_tokens_to_keep=1):  # out_neg_inf_rows_nan: exp overflows above 88
    s, order = torch.sort(logits, dim=-1, stable=True)
    e = s.exp()
    remove = (e / e.sum(-1, keepdim=True)).cumsum(-1) <= 1 - top_p
    remove[..., -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def _min_tokens_by_value(logits, top_p, min_tokens_to_keep=1):  # out_min_tokens_by_value
    s, order = torch.sort(logits, dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove = remove.scatter(-1, order, remove)
    return logits.masked_fill(remove & (logits < logits.topk(min_tokens_to_keep, dim=-1).values[..., -1:]),
                              float("-inf"))


def _hf_warper(logits, top_p, min_tokens_to_keep=1):  # out_hf_warper
    from transformers import TopPLogitsWarper

    return TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep)(None, logits.clone())


TOP_P = [
    Mutant("mass in bfloat16", _low_precision_mass(torch.bfloat16), "bfloat16"),
    Mutant("mass in float16", _low_precision_mass(torch.float16), "float16"),
    Mutant("mass in float64 (forbidden)", _low_precision_mass(torch.float64), "float64"),
    Mutant("returns float32 for float64", lambda x, p, m=1: my_top_p(x.float(), p, m), "input's dtype"),
    Mutant("transformers' TopPLogitsWarper", _hf_warper, "transformers"),
    Mutant("unstable sort", _nucleus(stable=False), "stable=True"),
    Mutant("softmax by hand without the max", _exp_without_shift, "overflows"),
    Mutant("min_tokens_to_keep by value (ties kept)", _min_tokens_by_value, "tied with the m-th largest"),
    Mutant("drops the crossing token", _nucleus(rule="crossing dropped"), "removed the token that crosses"),
    Mutant("< instead of <=: one too many", _nucleus(rule="tail <"), "one token too many"),
    Mutant("mass before > p: one too many", _nucleus(rule="before >"), "one token too many"),
    Mutant("ties the other way", _nucleus(rule="before >="), "ties broken the wrong way"),
    Mutant("min_tokens_to_keep ignored", _nucleus(keep_end="none"), "is ignored"),
    Mutant("keeps the least probable", _nucleus(keep_end="bottom"), "least probable tokens"),
    Mutant("in place", _nucleus(in_place=True), "in place"),
    Mutant("probabilities", lambda x, p, m=1: my_top_p(x, p, m).softmax(-1), "returned probabilities"),
    Mutant("zeros, not -inf", _nucleus(fill=0.0), "to 0"),
    Mutant("-1e9, not -inf", _nucleus(fill=-1e9), "large negative"),
    Mutant("NaN, not -inf", _nucleus(fill=float("nan")), "NaN"),
    Mutant("cumsum of the logits", _nucleus(softmax=False), "summed the logits"),
    Mutant("sorted logits returned", _nucleus(scatter=False), "in its place"),
    Mutant("the batch as one distribution", _flat_top_p, "the batch as one distribution"),
    Mutant("along dim 0", _nucleus(dim=0), "dim=0"),
    Mutant("own probability >= 1 - p", _own_probability, "own probability"),
    Mutant("first row only", lambda x, p, m=1: my_top_p(x, p, m)[0], "one row"),
    Mutant("returns (values, indices)", lambda x, p, m=1: x.sort(-1), "not a tuple"),
    Mutant("unchanged logits", lambda x, p, m=1: x.clone()),
    Mutant("no min_tokens_to_keep argument", lambda x, p: my_top_p(x, p), "TypeError", raised=True),
]


# --- 8.4: a sampling loop ----------------------------------------------------------------------------
def my_sample(model, ids, n, temperature=1.0, top_k=None, top_p=None,
              generator=None):
    for _ in range(n):
        window = ids[:, -model.config.context_length:]  # (B, <= ctx)
        logits, _ = model(window)  # (B, T', V)
        logits = logits[:, -1] / temperature  # (B, V): the next token
        if top_k is not None:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p is not None:
            logits = my_top_p(logits, top_p)
        probs = logits.softmax(dim=-1)  # renormalised over what is left
        new = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
        ids = torch.cat([ids, new], dim=1)  # (B, T + 1)
    return ids


def _loop(crop="last", temperature_at="logits", order="k then p", position=-1, draw="multinomial",
          append=True, seeded=True):
    """The reference loop with one mistake, chosen by the arguments."""
    def sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        g = generator if seeded else None
        ctx = model.config.context_length
        out = ids
        for _ in range(n):
            window = {"last": out[:, -ctx:], "first": out[:, :ctx], "none": out}[crop]
            logits = model(window)[0][:, position]
            if temperature_at == "logits":
                logits = logits / temperature
            elif temperature_at == "times":
                logits = logits * temperature

            def k_(z):
                return z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], float("-inf")) if top_k else z

            def p_(z):
                return my_top_p(z, top_p) if top_p is not None else z
            if order == "k then p":
                logits = p_(k_(logits))
            elif order == "p then k":
                logits = k_(p_(logits))
            elif order == "p on the unfiltered":
                logits = k_(logits).masked_fill(~torch.isfinite(p_(logits)), float("-inf"))
            elif order == "no p":
                logits = k_(logits)
            probs = logits.softmax(-1)
            if temperature_at == "probs":
                probs = probs / temperature
            if draw == "logits":
                new = torch.multinomial(logits, 1, generator=g)
            elif draw == "argmax":
                new = probs.argmax(-1, keepdim=True)
            else:
                new = torch.multinomial(probs, 1, generator=g)
            out = torch.cat([out, new], dim=1) if append else torch.cat([ids, new], dim=1)
        return out
    return sample


def _p_before_temperature(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        logits = model(ids[:, -model.config.context_length:])[0][:, -1]
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
        if top_p is not None:
            logits = my_top_p(logits, top_p)
        probs = (logits / temperature).softmax(-1)
        ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], dim=1)
    return ids


def _new_tokens_only(model, ids, n, **kw):
    return my_sample(model, ids, n, **kw)[:, ids.shape[1]:]


def _sample_variant(window=None, rng="generator", train=False):
    """The outside red team's false passes: a window of 8 hard-coded, torch's global generator
    reseeded from the generator's seed, the caller's generator rewound, the model put in training mode."""
    def sample(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        if train:
            model.train()
        if rng == "global from seed":
            torch.manual_seed(generator.initial_seed())
        elif rng == "rewound":
            generator.manual_seed(generator.initial_seed())
        ctx = window or model.config.context_length
        for _ in range(n):
            logits = model(ids[:, -ctx:])[0][:, -1] / temperature
            if top_k is not None:
                logits = logits.masked_fill(logits < logits.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
            if top_p is not None:
                logits = my_top_p(logits, top_p)
            g = None if rng == "global from seed" else generator
            ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=g)], dim=1)
        return ids
    return sample


def _top_k_as_min_tokens(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        logits = model(ids[:, -model.config.context_length:])[0][:, -1] / temperature
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
        if top_p is not None:
            logits = my_top_p(logits, top_p, top_k or 1)
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=generator)], dim=1)
    return ids


SAMPLE = [
    Mutant("window of 8 hard-coded", _sample_variant(window=8), "outgrew the model's window"),
    Mutant("global RNG reseeded from the generator's seed", _sample_variant(rng="global from seed"),
           "global random state"),
    Mutant("caller's generator rewound to its seed", _sample_variant(rng="rewound"), "started afresh"),
    Mutant("model put in training mode", _sample_variant(train=True), "training mode"),
    Mutant("top_k passed as min_tokens_to_keep", _top_k_as_min_tokens, "min_tokens_to_keep"),
    Mutant("temperature after the softmax", _loop(temperature_at="probs"), "temperature changes nothing"),
    Mutant("no temperature", _loop(temperature_at="none"), "temperature changes nothing"),
    Mutant("times the temperature", _loop(temperature_at="times"), "multiplied the logits by the temperature"),
    Mutant("samples from the logits", _loop(draw="logits"), "sampled from the logits"),
    Mutant("argmax", _loop(draw="argmax"), "most probable token"),
    Mutant("no crop", _loop(crop="none"), "outgrew the model's window"),
    Mutant("keeps the first tokens", _loop(crop="first"), "keep the *last* ones"),
    Mutant("forgets to append", _loop(append=False), "only one token was added"),
    Mutant("first position's logits", _loop(position=0), "first position's logits"),
    Mutant("top-p before top-k", _loop(order="p then k"), "renormalised"),
    Mutant("nucleus of the unfiltered distribution", _loop(order="p on the unfiltered"), "renormalised"),
    Mutant("top-p before the temperature", _p_before_temperature, "before the temperature"),
    Mutant("top_p ignored", _loop(order="no p"), "top_p changed nothing"),
    Mutant("generator not passed", _loop(seeded=False), "global random state"),
    Mutant("only the new tokens", _new_tokens_only, "only the new tokens"),
    Mutant("returns None", lambda *a, **k: None, "token ids of shape"),
    Mutant("the companion's sample", lambda model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None:
           decoding.sample(model, ids, n, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator),
           "course's own decoders"),
]


# --- 8.5: a KV cache by hand -------------------------------------------------------------------------
def my_cached_attention(q_new, k_new, v_new, cache):
    if cache["k"] is None:  # the first token starts the cache
        cache["k"], cache["v"] = k_new, v_new  # (B, 1, d)
    else:  # append along time: (B, t, d) + (B, 1, d) -> (B, t + 1, d)
        cache["k"] = torch.cat([cache["k"], k_new], dim=1)
        cache["v"] = torch.cat([cache["v"], v_new], dim=1)
    d = q_new.shape[-1]
    # (B, 1, d) @ (B, d, t + 1) -> (B, 1, t + 1): no mask, no future token
    scores = q_new @ cache["k"].transpose(-2, -1) / math.sqrt(d)
    weights = torch.softmax(scores, dim=-1)  # over the cached positions
    return weights @ cache["v"]  # (B, 1, t + 1) @ (B, t + 1, d) -> (B, 1, d)


def _cached(append="after", dim=1, scale=True, attend="cache", returns="output", softmax_dim=-1, swap_kv=False,
            times=1):
    """The reference with one mistake, chosen by the arguments."""
    def cached(q_new, k_new, v_new, cache):
        k_all = k_new if cache["k"] is None else torch.cat(
            [cache["k"], k_new] if append == "after" else [k_new, cache["k"]], dim=dim)
        v_all = v_new if cache["v"] is None else torch.cat(
            [cache["v"], v_new] if append == "after" else [v_new, cache["v"]], dim=dim)
        for _ in range(times - 1):
            k_all, v_all = torch.cat([k_all, k_new], dim=dim), torch.cat([v_all, v_new], dim=dim)
        old_k, old_v = cache["k"], cache["v"]
        if append != "never":
            cache["k"], cache["v"] = (v_all, k_all) if swap_kv else (k_all, v_all)
        if attend == "before append":
            keys, values = (old_k, old_v) if old_k is not None else (k_new, v_new)
        elif attend == "new only":
            keys, values = k_new, v_new
        elif attend == "twice":
            keys, values = torch.cat([k_all, k_new], 1), torch.cat([v_all, v_new], 1)
        else:
            keys, values = k_all, v_all
        s = q_new @ keys.transpose(-2, -1)
        if scale:
            s = s / math.sqrt(q_new.shape[-1])
        w = torch.softmax(s, dim=softmax_dim)
        if returns == "weights":
            return w
        return (w @ values, w) if returns == "pair" else w @ values
    return cached


def _replaced(q_new, k_new, v_new, cache):
    cache["k"], cache["v"] = k_new, v_new
    return my_cached_attention(q_new, k_new, v_new, {"k": None, "v": None})


def _new_dict(q_new, k_new, v_new, cache):
    cache = {"k": None, "v": None}  # a new dict: the caller's stays empty
    return my_cached_attention(q_new, k_new, v_new, cache)


CACHED = [
    Mutant("never appends", _cached(append="never", attend="new only"), "the cache must hold"),
    Mutant("replaces the cache", _replaced, "replaced the cache"),
    Mutant("prepends", _cached(append="before"), "wrong order"),
    Mutant("attends before appending", _cached(attend="before append"), "does not see itself"),
    Mutant("no scale", _cached(scale=False), "forgot the scale"),
    Mutant("new key attended twice", _cached(attend="twice"), "attended twice"),
    Mutant("returns the weights", _cached(returns="weights"), "attention weights"),
    Mutant("returns (output, weights)", _cached(returns="pair"), "only the attention output"),
    Mutant("concatenates the features", _cached(dim=2), "RuntimeError", raised=True),
    Mutant("appends twice", _cached(times=2), "appended twice"),
    Mutant("softmax over the query", _cached(softmax_dim=1), "wrong axis"),
    Mutant("keys and values swapped", _cached(swap_kv=True), "swapped in the cache"),
    Mutant("returns None", lambda *a: None, "the attention output"),
    Mutant("rebinds the cache", _new_dict, "store them in the dict"),
    Mutant("attends to the new token only", _cached(attend="new only"), "only to its own key"),
    Mutant("batch concatenation", _cached(dim=0), "RuntimeError", raised=True),
]



# --- 8.6: beam search on the KV cache ----------------------------------------------------------------
def my_beam_search(model, prompt, n, k):
    cache = model.new_cache()
    logits, _ = model(prompt[None], cache=cache)  # the prompt, once
    seqs = prompt[None]  # (1, T): one beam
    scores = torch.zeros(1, dtype=logits.dtype)  # (n_beams,)
    for step in range(n):
        logp = logits[:, -1].log_softmax(dim=-1)  # (n_beams, V)
        V = logp.shape[-1]
        candidates = (scores[:, None] + logp).flatten()  # (n_beams * V,)
        scores, flat = candidates.topk(min(k, candidates.numel()))
        parents, tokens = flat // V, flat % V  # (n_beams',) each
        seqs = torch.cat([seqs[parents], tokens[:, None]], dim=1)
        if step < n - 1:
            cache.reorder(parents)  # row b now holds beam b's parent
            logits, _ = model(tokens[:, None], cache=cache)  # new tokens
    return seqs, scores


def _companion_beam_search(model, prompt, n, k):
    result = decoding.beam_search(model, prompt, n, k=k)
    return (torch.stack([h.tokens for h in result.hypotheses]),
            torch.tensor([h.score for h in result.hypotheses], dtype=torch.float64))


def _beams(reorder="parents", start="one", score="log_softmax", rank="flat", keep_seqs=True, feed="new",
           cache=True, out="pair", accumulate=True):
    """The reference with one mistake, chosen by the arguments."""
    def beam_search(model, prompt, n, k):
        c = model.new_cache() if cache else None
        first = prompt[None] if start == "one" else prompt[None].expand(k, -1)
        logits = model(first, cache=c)[0] if cache else model(first)[0]
        seqs = first
        scores = torch.zeros(first.shape[0], dtype=logits.dtype)
        if start == "k copies":
            scores[1:] = float("-inf")
        for step in range(n):
            last = logits[:, -1]
            logp = {"log_softmax": last.log_softmax(-1), "softmax": last.softmax(-1), "logits": last}[score]
            V = logp.shape[-1]
            cand = scores[:, None] + logp if accumulate else logp
            if rank == "per beam" and cand.shape[0] > 1:  # each beam: its own argmax
                new_scores, best = cand.max(-1)
                order = new_scores.argsort(descending=True)
                new_scores, flat = new_scores[order], best[order] + order * V
            else:
                new_scores, flat = cand.flatten().topk(min(k, cand.numel()), largest=rank != "worst")
            parents, tokens = flat // V, flat % V
            scores = new_scores if accumulate else scores[parents] + logp[parents, tokens]
            seqs = torch.cat([seqs[parents] if keep_seqs else seqs[:1].expand(len(tokens), -1)
                              if seqs.shape[0] < len(tokens) else seqs[:len(tokens)], tokens[:, None]], 1)
            if step < n - 1:
                if not cache:
                    logits = model(seqs)[0]
                    continue
                if reorder == "parents":
                    c.reorder(parents)
                elif reorder == "tokens":
                    c.reorder(tokens % c.batch_size)
                elif reorder == "after":
                    pass
                feed_ids = tokens[:, None]
                if reorder == "after":
                    c.reorder(torch.zeros(len(tokens), dtype=torch.long) if c.batch_size == 1
                              else torch.arange(len(tokens)))
                logits = model(feed_ids, cache=c)[0]
                if reorder == "after":
                    c.reorder(parents)
        if out == "new only":
            return seqs[:, prompt.shape[0]:], scores
        if out == "seqs only":
            return seqs
        return seqs, scores
    return beam_search


def _beams_variant(vocab=None, reorder="parents"):
    """The outside red team's answers: V = 5 hard-coded, the layers' keys reordered by hand (values
    forgotten), the cache reordered by the sorted parents."""
    def beam_search(model, prompt, n, k):
        cache = model.new_cache()
        logits, _ = model(prompt[None], cache=cache)
        seqs, scores = prompt[None], torch.zeros(1, dtype=logits.dtype)
        for step in range(n):
            logp = logits[:, -1].log_softmax(-1)
            V = vocab or logp.shape[-1]
            cand = (scores[:, None] + logp).reshape(-1)
            scores, flat = cand.topk(min(k, cand.numel()))
            parents, tokens = flat // V, flat % V
            seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
            if step < n - 1:
                if reorder == "keys only":
                    for layer in cache.layers:
                        layer.k = layer.k[parents]
                elif reorder == "sorted":
                    cache.reorder(parents.sort().values)
                else:
                    cache.reorder(parents)
                logits, _ = model(tokens[:, None], cache=cache)
        return seqs, scores
    return beam_search


BEAM_CACHE = [
    Mutant("V = 5 hard-coded", _beams_variant(vocab=5)),
    Mutant("keys reordered by hand, values forgotten", _beams_variant(reorder="keys only"), "cache.reorder(parents)"),
    Mutant("reordered by the sorted parents", _beams_variant(reorder="sorted"), "in the order of the new beams"),
    Mutant("k copies, never reordered", _beams(reorder="never", start="k copies"), "not those of the sequences"),
    Mutant("one row, never reordered", _beams(reorder="never"), "still holds the prompt's one row"),
    Mutant("reordered by token", _beams(reorder="tokens"), "in the order of the new beams"),
    Mutant("reordered after feeding", _beams(reorder="after"), "in the order of the new beams"),
    Mutant("no cache: recomputes", _beams(cache=False), "use the KV cache"),
    Mutant("sequences not reordered", _beams(keep_seqs=False), "index the sequences by the parents"),
    Mutant("probabilities added", _beams(score="softmax"), "summed log-probabilities"),
    Mutant("raw logits added", _beams(score="logits"), "added raw logits"),
    Mutant("each beam its own best token", _beams(rank="per beam"), "its own best token"),
    Mutant("last token only", _beams(accumulate=False), "last token's log-probability alone"),
    Mutant("worst first", _beams(rank="worst")),
    Mutant("new tokens only", _beams(out="new only"), "only the new tokens"),
    Mutant("sequences only", _beams(out="seqs only"), "pair `(seqs, scores)`"),
    Mutant("returns None", lambda *a: None, "pair `(seqs, scores)`"),
    Mutant("the companion's beam_search", _companion_beam_search, "course's own decoders"),
]


# --- 8.7: beam search with an end token and length normalization --------------------------------------
def my_beam_search_eos(model, prompt, k, max_new, eos_id, alpha=0.0):
    beams, finished = [(0.0, list(prompt))], []  # (score, tokens)
    for _ in range(max_new):
        ids = torch.tensor([tokens for _, tokens in beams])  # (n, T)
        logp = model(ids)[:, -1].double().log_softmax(-1)  # (n, V)
        ranked = sorted(((s + logp[b, w].item(), t + [w])
                         for b, (s, t) in enumerate(beams)
                         for w in range(logp.shape[1])),
                        key=lambda c: -c[0])  # stable: ties in order
        beams = []
        for score, tokens in ranked:
            if len(beams) == k:
                break  # the k-th hypothesis that goes on: prune the rest
            ends = tokens[-1] == eos_id
            (finished if ends else beams).append((score, tokens))
        if not beams:
            break
        if alpha == 0 and len(finished) >= k:  # can a beam still win?
            if beams[0][0] <= sorted(s for s, _ in finished)[-k]:
                break

    def normalized(hyp):
        return hyp[0] / (len(hyp[1]) - len(prompt)) ** alpha

    return sorted(finished + beams, key=normalized, reverse=True)[:k]


def _eos_mistake(mistake):
    return lambda model, prompt, k, n, eos, alpha=0.0: check._eos_beam(model, prompt, k, n, eos, alpha,
                                                                       mistake=mistake)


def _float32_scores(model, prompt, k, n, eos, alpha=0.0):
    """Right, but scored in float32: ties and near-ties may go the other way."""
    return my_beam_search_eos(lambda ids: model(ids).half().float(), prompt, k, n, eos, alpha)


def _companion_eos(model, prompt, k, n, eos, alpha=0.0):
    result = decoding.beam_search(model, torch.tensor(prompt), n, k=k, eos_id=eos, length_penalty=alpha)
    return [(h.score, h.tokens.tolist()) for h in result.hypotheses]


BEAM_EOS = [
    Mutant("end token goes on", _eos_mistake("no end"), "ends with eos_id went on"),
    Mutant("every finished candidate kept", _eos_mistake("keep every finished"), "kept every candidate that ends"),
    Mutant("each beam its own best token", _eos_mistake("per beam"), "its own best token"),
    Mutant("alpha ignored", _eos_mistake("no normalization"), "ignores alpha"),
    Mutant("length counts the prompt", _eos_mistake("length with prompt"), "counted the prompt"),
    Mutant("length without the end token", _eos_mistake("length without end"), "left out the end token"),
    Mutant("normalized scores returned", _eos_mistake("normalized scores"), "returned the normalized scores"),
    Mutant("early stop with alpha > 0", _eos_mistake("early stop always"), "stop early only when alpha == 0"),
    Mutant("finished only", _eos_mistake("finished only"), "still alive after max_new"),
    Mutant("stops at the first finished", _eos_mistake("stop at first finished"), "stopped as soon as one"),
    Mutant("scores in half precision", _float32_scores),
    Mutant("the companion's beam_search", _companion_eos, "companion.decoding"),
    Mutant("returns None", lambda *a, **kw: None, "list of (score, tokens) pairs"),
    Mutant("returns the tokens only", lambda *a, **kw: [t for _, t in my_beam_search_eos(*a, **kw)], "pair"),
    Mutant("the prompt left out", lambda m, p, *a: [(s, t[len(p):]) for s, t in my_beam_search_eos(m, p, *a)],
           "start with the prompt"),
    Mutant("changes the prompt", lambda m, p, *a: (p.append(0), my_beam_search_eos(m, p[:-1], *a))[1],
           "changed p in place"),
]


EXERCISES = [
    Exercise(check.greedy_step, my_greedy_step, GREEDY),
    Exercise(check.beam_step, my_beam_step, BEAM),
    Exercise(check.top_p_filter, my_top_p, TOP_P),
    Exercise(check.sample_loop, my_sample, SAMPLE),
    Exercise(check.cached_attention, my_cached_attention, CACHED),
    Exercise(check.cached_beam_search, my_beam_search, BEAM_CACHE),
    Exercise(check.beam_search_eos, my_beam_search_eos, BEAM_EOS),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "08_beam_search.ipynb"


def test_references_are_the_notebooks_solutions():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    solutions = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            solutions[re.match(r"def (\w+)\(", cell.source).group(1)] = cell.source.strip()
    assert sorted(solutions) == sorted(e.reference.__name__ for e in EXERCISES)
    for exercise in EXERCISES:
        name = exercise.reference.__name__
        assert inspect.getsource(exercise.reference).strip() == solutions[name], (
            f"{exercise.name}: the registry's {name} differs from the solution cell of {NOTEBOOK.name}")
