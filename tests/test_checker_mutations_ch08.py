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


# --- 8.3 ---------------------------------------------------------------------------------------------
def my_length_ranking(scores, lengths, alpha):
    normalized = [s / n**alpha for s, n in zip(scores, lengths)]
    return sorted(range(len(scores)), key=lambda i: -normalized[i])


def _rank(key):
    return lambda s, l, a: sorted(range(len(s)), key=lambda i: key(s[i], l[i], a), reverse=True)


LENGTH = [
    Mutant("raw sum", _rank(lambda s, n, a: s), "raw summed log-probability"),
    Mutant("worst first", lambda s, l, a: my_length_ranking(s, l, a)[::-1], "worst first"),
    Mutant("multiplied by the length", _rank(lambda s, n, a: s * n**a), "multiplied by the length"),
    Mutant("no exponent", _rank(lambda s, n, a: s / n), "forgot the exponent"),
    Mutant("GNMT length penalty", _rank(lambda s, n, a: s / ((5 + n) / 6) ** a), "GNMT length penalty"),
    Mutant("length times alpha", _rank(lambda s, n, a: s / (n * a) if a else s), "not `length * alpha`"),
    Mutant("alpha ** length", _rank(lambda s, n, a: s / a**n if a else s), "base and exponent are swapped"),
    Mutant("returns the scores", lambda s, l, a: sorted((x / n**a for x, n in zip(s, l)), reverse=True),
           "you returned scores"),
    Mutant("returns a string", lambda s, l, a: "best", "as a list of ints"),
    Mutant("returns None", lambda s, l, a: None, "as a list of ints"),
    Mutant("the best one only", lambda s, l, a: my_length_ranking(s, l, a)[:1], "exactly once"),
    Mutant("indices from 1", lambda s, l, a: [i + 1 for i in my_length_ranking(s, l, a)], "exactly once"),
    Mutant("divides by log of the length", _rank(lambda s, n, a: s / math.log(n + 1) ** a)),
    Mutant("floats for indices", lambda s, l, a: [float(i) for i in my_length_ranking(s, l, a)], "list of ints"),
]


# --- 8.4 ---------------------------------------------------------------------------------------------
def my_top_k(logits, k):
    kth = logits.topk(k, dim=-1).values[:, -1:]  # (B, 1): each row's k-th
    return logits.masked_fill(logits < kth, float("-inf"))


def _fill(threshold, fill=float("-inf"), keep=lambda x, t: x < t):
    return lambda x, k: x.masked_fill(keep(x, threshold(x, k)), fill)


TOP_K = [
    Mutant("probabilities", lambda x, k: my_top_k(x, k).softmax(-1), "returned probabilities"),
    Mutant("zeros instead of -inf", _fill(lambda x, k: x.topk(k, dim=-1).values[:, -1:], fill=0.0), "exp(0) = 1"),
    Mutant("the k smallest", _fill(lambda x, k: x.topk(k, dim=-1, largest=False).values[:, -1:], keep=lambda x, t: x > t),
           "k *smallest*"),
    Mutant("one too few", _fill(lambda x, k: x.topk(k, dim=-1).values[:, -1:], keep=lambda x, t: x <= t),
           "one token too few"),
    Mutant("one too many", lambda x, k: my_top_k(x, min(k + 1, x.shape[-1])), "one token too many"),
    Mutant("over the whole batch", _fill(lambda x, k: x.flatten().topk(k).values[-1]), "whole batch"),
    Mutant("over the columns", _fill(lambda x, k: x.topk(k, dim=0).values[-1:] if k <= x.shape[0] else x.min()),
           "each column"),
    Mutant("sorted", lambda x, k: x.sort(-1, descending=True).values.masked_fill(torch.arange(x.shape[-1]) >= k,
                                                                                 float("-inf")), "instead of sorting"),
    Mutant("-1e9 instead of -inf", _fill(lambda x, k: x.topk(k, dim=-1).values[:, -1:], fill=-1e9), "not a large negative"),
    Mutant("returns topk's pair", lambda x, k: x.topk(k, dim=-1), "means, not the answer"),
    Mutant("first row only", lambda x, k: my_top_k(x, k)[0], "same shape"),
    Mutant("in place, returns None", lambda x, k: (x.masked_fill_(x < x.topk(k, dim=-1).values[:, -1:], float("-inf")),
                                                   None)[1], "in place, an input"),
    Mutant("k fixed to 3", lambda x, k: my_top_k(x, 3)),
    Mutant("the values only", lambda x, k: x.topk(k, dim=-1).values, "same shape"),
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


EXERCISES = [
    Exercise(check.greedy_step, my_greedy_step, GREEDY),
    Exercise(check.beam_step, my_beam_step, BEAM),
    Exercise(check.length_ranking, my_length_ranking, LENGTH),
    Exercise(check.top_k_filter, my_top_k, TOP_K),
    Exercise(check.cached_attention, my_cached_attention, CACHED),
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
