"""Tests for the chapter 8 checkers: the right answer passes, each classic mistake gets its hint,
an untouched stub is "not attempted"."""
from __future__ import annotations

import math

import torch

from companion.exercises import decoding as check


def status(fb):
    return fb.status, fb.message


# ------------------------------------------------------------------ 8.1 greedy step
def greedy_ok(model, ids):
    return torch.cat([ids, model(ids)[:, -1].argmax(-1, keepdim=True)], 1)


def test_greedy_step():
    assert check.greedy_step(greedy_ok).passed

    def stub(model, ids):
        raise NotImplementedError

    assert check.greedy_step(stub).status == "not attempted"
    assert check.greedy_step(...).status == "not attempted"
    cases = {
        "first position": lambda m, ids: torch.cat([ids, m(ids)[:, 0].argmax(-1, keepdim=True)], 1),
        "pooled the logits": lambda m, ids: torch.cat([ids, m(ids).mean(1).argmax(-1, keepdim=True)], 1),
        "argmin": lambda m, ids: torch.cat([ids, m(ids)[:, -1].argmin(-1, keepdim=True)], 1),
        "only the new tokens": lambda m, ids: m(ids)[:, -1].argmax(-1),
        "shape (B, T + 1)": lambda m, ids: ids,
        "your code raised IndexError": lambda m, ids: m(ids)[:, :, 99],
    }
    for expected, fn in cases.items():
        fb = check.greedy_step(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)


# ------------------------------------------------------------------ 8.2 beam step
def ranked_candidates(beam_scores, next_probs, k, combine=None, per_beam=False):
    """Every (score, parent, token), best first: of all n*V extensions, or (per_beam) of each
    beam's k best (a classic mistake). Also used by tests/test_checker_mutations_ch08.py."""
    cand = combine(beam_scores, next_probs) if combine else beam_scores[:, None] + next_probs.log()  # (n, V)
    n, V = cand.shape
    if per_beam:
        flat = []
        for p in range(n):
            top = cand[p].topk(k)
            flat += [(float(s), p, int(t)) for s, t in zip(top.values, top.indices)]
        return sorted(flat, key=lambda x: -x[0])
    scores, idx = cand.flatten().sort(descending=True)
    return [(float(s), int(i) // V, int(i) % V) for s, i in zip(scores, idx)]


def beam_ok(beam_scores, next_probs, k, eos_id, combine=None, per_beam=False, keep_eos=False, drop_finished=False):
    flat = ranked_candidates(beam_scores, next_probs, k, combine, per_beam)
    alive, finished = [], []
    for s, p, t in flat:
        if len(alive) == k:
            break
        if t == eos_id and not keep_eos:
            if not drop_finished:
                finished.append((p, t, s))
        else:
            alive.append((p, t, s))
    return alive, finished


def test_beam_step():
    assert check.beam_step(beam_ok).passed

    def stub(beam_scores, next_probs, k, eos_id):
        raise NotImplementedError

    assert check.beam_step(stub).status == "not attempted"
    cases = {
        "multiplied probabilities": dict(combine=lambda s, p: s[:, None].exp() * p),
        "multiplied the score by the probability": dict(combine=lambda s, p: s[:, None] * p),
        "added raw probabilities": dict(combine=lambda s, p: s[:, None] + p),
        "ignore the beams' own scores": dict(combine=lambda s, p: p.log().expand(len(s), -1).clone()),
        "each beam separately": dict(per_beam=True),
        "must leave the beam": dict(keep_eos=True),
        "you dropped the hypotheses that end": dict(drop_finished=True),
    }
    for expected, flags in cases.items():
        fb = check.beam_step(lambda *a, flags=flags: beam_ok(*a, **flags))
        assert fb.status == "hint" and expected in fb.message, (expected, fb)
    reversed_order = check.beam_step(lambda *a: tuple(x[::-1] for x in beam_ok(*a)))
    assert reversed_order.status == "hint" and "best first" in reversed_order.message
    assert "`alive` and `finished` must be lists" in check.beam_step(lambda *a: beam_ok(*a)[0]).message
    assert "pair `(alive, finished)`" in check.beam_step(lambda *a: None if False else 42).message


# ------------------------------------------------------------------ 8.3 length ranking
def test_length_ranking():
    def ok(scores, lengths, alpha):
        return sorted(range(len(scores)), key=lambda i: -scores[i] / lengths[i] ** alpha)

    assert check.length_ranking(ok).passed
    assert check.length_ranking(...).status == "not attempted"
    cases = {
        "raw summed log-probability": lambda s, l, a: sorted(range(len(s)), key=lambda i: -s[i]),
        "worst first": lambda s, l, a: ok(s, l, a)[::-1],
        "multiplied by the length": lambda s, l, a: sorted(range(len(s)), key=lambda i: -s[i] * l[i] ** a),
        "forgot the exponent": lambda s, l, a: sorted(range(len(s)), key=lambda i: -s[i] / l[i]),
        "as a list of ints": lambda s, l, a: "best",
    }
    for expected, fn in cases.items():
        fb = check.length_ranking(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)


# ------------------------------------------------------------------ 8.4 top-k filter
def test_top_k_filter():
    def ok(logits, k):
        kth = logits.topk(k, dim=-1).values[:, -1:]
        return logits.masked_fill(logits < kth, float("-inf"))

    assert check.top_k_filter(ok).passed

    def stub(logits, k):
        raise NotImplementedError

    assert check.top_k_filter(stub).status == "not attempted"
    cases = {
        "returned probabilities": lambda x, k: ok(x, k).softmax(-1),
        "exp(0) = 1": lambda x, k: x.masked_fill(x < x.topk(k, dim=-1).values[:, -1:], 0.0),
        "k *smallest*": lambda x, k: x.masked_fill(x > x.topk(k, dim=-1, largest=False).values[:, -1:], float("-inf")),
        "one token too few": lambda x, k: x.masked_fill(x <= x.topk(k, dim=-1).values[:, -1:], float("-inf")) if k < 8 else ok(x, k),
        "one token too many": lambda x, k: ok(x, k + 1) if k < 7 else ok(x, k),
        "whole batch": lambda x, k: x.masked_fill(x < x.flatten().topk(k).values[-1], float("-inf")),
        "same shape": lambda x, k: ok(x, k)[0],
    }
    for expected, fn in cases.items():
        fb = check.top_k_filter(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)


# ------------------------------------------------------------------ issue 10 cases
def test_greedy_step_rejects_samplers():
    """A sampler passes only if it draws the argmax on 96 near-tied rows: probability < 1e-12."""
    def sampler(temperature):
        def step(model, ids):
            probs = (model(ids)[:, -1] / temperature).softmax(-1)
            return torch.cat([ids, torch.multinomial(probs, 1)], 1)
        return step

    for temperature in (1.0, 0.3, 0.01):
        for _ in range(5):
            fb = check.greedy_step(sampler(temperature))
            assert fb.status == "hint" and ("samples" in fb.message or "second most probable" in fb.message), fb


def test_length_ranking_names_gnmt_and_never_misattributes():
    gnmt = lambda s, l, a: sorted(range(len(s)), key=lambda i: -s[i] / ((5 + l[i]) / 6) ** a)  # noqa: E731
    fb = check.length_ranking(gnmt)
    assert fb.status == "hint" and "GNMT" in fb.message and "raw sum" not in fb.message


# ------------------------------------------------------------------ 8.5 KV cache by hand
def cached_ok(q_new, k_new, v_new, cache):
    cache["k"] = k_new if cache["k"] is None else torch.cat([cache["k"], k_new], 1)
    cache["v"] = v_new if cache["v"] is None else torch.cat([cache["v"], v_new], 1)
    w = torch.softmax(q_new @ cache["k"].transpose(-2, -1) / math.sqrt(q_new.shape[-1]), -1)  # (B, 1, t)
    return w @ cache["v"]


def test_cached_attention():
    assert check.cached_attention(cached_ok).passed

    def stub(q_new, k_new, v_new, cache):
        raise NotImplementedError

    assert check.cached_attention(stub).status == "not attempted"

    def before(q_new, k_new, v_new, cache):  # attends to the old cache, then appends
        keys = k_new if cache["k"] is None else cache["k"]
        values = v_new if cache["v"] is None else cache["v"]
        out = torch.softmax(q_new @ keys.transpose(-2, -1) / math.sqrt(q_new.shape[-1]), -1) @ values
        cached_ok(q_new, k_new, v_new, cache)
        return out

    def unscaled(q_new, k_new, v_new, cache):
        cached_ok(q_new, k_new, v_new, cache)
        return torch.softmax(q_new @ cache["k"].transpose(-2, -1), -1) @ cache["v"]

    def prepended(q_new, k_new, v_new, cache):
        cache["k"] = k_new if cache["k"] is None else torch.cat([k_new, cache["k"]], 1)
        cache["v"] = v_new if cache["v"] is None else torch.cat([v_new, cache["v"]], 1)
        return torch.softmax(q_new @ cache["k"].transpose(-2, -1) / math.sqrt(q_new.shape[-1]), -1) @ cache["v"]

    def forgets(q_new, k_new, v_new, cache):
        return torch.softmax(q_new @ k_new.transpose(-2, -1), -1) @ v_new

    def twice(q_new, k_new, v_new, cache):
        cached_ok(q_new, k_new, v_new, cache)
        k, v = torch.cat([cache["k"], k_new], 1), torch.cat([cache["v"], v_new], 1)
        return torch.softmax(q_new @ k.transpose(-2, -1) / math.sqrt(q_new.shape[-1]), -1) @ v

    def weights(q_new, k_new, v_new, cache):
        cached_ok(q_new, k_new, v_new, cache)
        return torch.softmax(q_new @ cache["k"].transpose(-2, -1) / math.sqrt(q_new.shape[-1]), -1)

    cases = {"does not see itself": before, "forgot the scale": unscaled, "wrong order": prepended,
             "the cache must hold": forgets, "attended twice": twice, "attention weights": weights}
    for expected, fn in cases.items():
        fb = check.cached_attention(fn)
        assert fb.status == "hint" and fb.kind == "specific" and expected in fb.message, (expected, fb)


def test_cached_attention_accepts_other_right_answers():
    """Right answers written differently from the book's all pass: PyTorch's fused attention, a
    cache started from empty tensors, and keys and values appended in place with dict.update."""
    import torch.nn.functional as F

    def fused(q_new, k_new, v_new, cache):
        cached_ok(q_new, k_new, v_new, cache)
        return F.scaled_dot_product_attention(q_new, cache["k"], cache["v"])

    def from_empty(q_new, k_new, v_new, cache):
        B, _, d = k_new.shape
        empty = k_new.new_zeros(B, 0, d)  # (B, 0, d): no token yet
        keys = torch.cat([empty if cache["k"] is None else cache["k"], k_new], dim=1)
        values = torch.cat([empty if cache["v"] is None else cache["v"], v_new], dim=1)
        cache.update(k=keys, v=values)
        weights = torch.softmax(q_new @ keys.transpose(1, 2) * d**-0.5, dim=-1)
        return weights @ values

    for right in (fused, from_empty):
        fb = check.cached_attention(right)
        assert fb.passed, (right.__name__, fb)


def test_the_books_solutions_pass():
    """The chapter's solution cells, run as they are, pass their checks (the same text as the
    mutation registry's references, which tests/test_checker_mutations_ch08.py compares)."""
    from pathlib import Path

    import nbformat

    nb = nbformat.read(Path(__file__).resolve().parents[1] / "book" / "08_beam_search.ipynb", as_version=4)
    namespace = {"torch": torch, "math": math}
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            exec(cell.source, namespace)
    checks = {"my_greedy_step": check.greedy_step, "my_beam_step": check.beam_step,
              "my_length_ranking": check.length_ranking, "my_top_k": check.top_k_filter,
              "my_cached_attention": check.cached_attention}
    for name, checker in checks.items():
        assert checker(namespace[name]).passed, name


# --- the hints of 8.5 name the mistake that was made (issue 19: two were misleading) ----------------
def _attend_over(q, keys, values):
    w = torch.softmax(q @ keys.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    return w @ values


def _append(cache, k_new, v_new):
    if cache["k"] is None:
        cache["k"], cache["v"] = k_new, v_new
    else:
        cache["k"] = torch.cat([cache["k"], k_new], dim=1)
        cache["v"] = torch.cat([cache["v"], v_new], dim=1)


def _drops_position_0(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    keys, values = (cache["k"][:, 1:], cache["v"][:, 1:]) if cache["k"].shape[1] > 1 else (cache["k"], cache["v"])
    return _attend_over(q_new, keys, values)


def _tril_on_one_row(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    scores = q_new @ cache["k"].transpose(-2, -1) / math.sqrt(q_new.shape[-1])  # (B, 1, t)
    mask = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()  # (1, t): only column 0
    w = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return w @ cache["v"]


def _own_key_only(q_new, k_new, v_new, cache):
    _append(cache, k_new, v_new)
    return v_new


def _before_append(q_new, k_new, v_new, cache):
    out = _attend_over(q_new, cache["k"], cache["v"]) if cache["k"] is not None else v_new
    _append(cache, k_new, v_new)
    return out


def test_cached_attention_hints_name_the_mistake_made():
    told = {fn: check.cached_attention(fn).message for fn in
            (_drops_position_0, _tril_on_one_row, _own_key_only, _before_append)}
    assert "position 0 is missing" in told[_drops_position_0], told[_drops_position_0]
    assert "sees only position 0" in told[_tril_on_one_row], told[_tril_on_one_row]
    assert "attends only to its own key" in told[_own_key_only], told[_own_key_only]
    assert "does not see itself" in told[_before_append], told[_before_append]
    for phrase in ("position 0 is missing", "sees only position 0", "attends only to its own key",
                   "does not see itself"):
        assert sum(phrase in message for message in told.values()) == 1, (phrase, told)
