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


# ------------------------------------------------------------------ 8.3 top-p, Hugging Face's rule
def top_p_ok(logits, top_p, min_tokens_to_keep=1):
    s, order = logits.sort(dim=-1, stable=True)
    remove = s.softmax(-1).cumsum(-1) <= 1 - top_p
    remove[:, -min_tokens_to_keep:] = False
    return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))


def _hf_top_p_warper(logits, top_p, min_tokens_to_keep=1):
    from transformers.generation.logits_process import TopPLogitsWarper

    return TopPLogitsWarper(top_p, min_tokens_to_keep=min_tokens_to_keep)(None, logits.clone())


def test_checkers_top_p_rule_is_hugging_faces():
    """The checker's own copy of the rule equals transformers' TopPLogitsWarper: on continuous random
    logits of any size, and on ties (small integer logits, V <= 16: the sizes where PyTorch's sort
    keeps ties in order, so that Hugging Face's result is defined), on rows holding -inf, on exact
    boundaries, with min_tokens_to_keep from 1 to 3 and top_p from 0 to 1."""
    g = torch.Generator().manual_seed(0)
    for trial in range(1500):
        B = int(torch.randint(1, 5, (1,), generator=g))
        if trial % 3 == 0:
            V = int(torch.randint(2, 200, (1,), generator=g))
            x = torch.randn(B, V, generator=g) * 3
        else:
            V = int(torch.randint(2, 17, (1,), generator=g))
            x = torch.randint(-2, 3, (B, V), generator=g).float()
        if trial % 5 == 0:
            x[:, :: 3] = float("-inf")
            x[:, 1] = 0.0  # every row keeps a finite logit
        p = float(torch.rand(1, generator=g)) if trial % 7 else [0.25, 0.5, 0.75, 1.0][trial % 4]
        m = int(torch.randint(1, 4, (1,), generator=g))
        assert torch.equal(check._hf_top_p(x, p, m), _hf_top_p_warper(x, p, m)), (trial, x, p, m)
    for x, p, m in check._top_p_cases():  # the checker's own cases, ties and boundaries included
        finite = x[torch.isfinite(x)]
        if x.shape[-1] > 16 and len(finite.unique()) < len(finite):  # ties in a wide row: the warper's
            assert torch.equal(check._hf_top_p(x, p, m), top_p_ok(x, p, m)), (x, p, m)  # order is undefined
            continue
        assert torch.equal(check._hf_top_p(x, p, m), _hf_top_p_warper(x, p, m)), (x, p, m)


def test_top_p_cases_are_decided_alike_in_float32_and_float64():
    """The reference sums the mass in float64; on every case float32 arithmetic (the student's, on a
    float32 input) decides every token the same way, so a right float32 answer cannot fail on
    rounding; the near-boundary rows hold their crossing token within 1e-3 and 1e-4 of 1 - top_p."""
    for x, p, m in check._top_p_cases():
        assert torch.equal(check._hf_top_p(x, p, m), top_p_ok(x, p, m).to(x.dtype)), (x, p, m)
        assert torch.equal(check._hf_top_p(x, p, m).isinf(), top_p_ok(x.float(), p, m).isinf()), (x, p, m)
    near = check._near_boundary_rows(0.7)
    tail = near.softmax(-1).sort(-1).values.cumsum(-1)[:, 5] - 0.3
    torch.testing.assert_close(tail, torch.tensor([1e-3, -1e-3, 3e-4, -3e-4, 1e-4, -1e-4], dtype=torch.float64))


def test_top_p_filter():
    assert check.top_p_filter(top_p_ok).passed
    fb = check.top_p_filter(_hf_top_p_warper)  # Hugging Face's own warper: not doing the exercise
    assert not fb.passed and "transformers" in fb.message, fb

    def stub(logits, top_p, min_tokens_to_keep=1):
        raise NotImplementedError

    assert check.top_p_filter(stub).status == "not attempted"
    assert check.top_p_filter(...).status == "not attempted"


def test_top_p_filter_accepts_other_right_answers():
    """From the most probable token down (the reverse order handles ties) and in a loop over the rows:
    each passes."""
    def from_the_top(logits, top_p, min_tokens_to_keep=1):
        flipped = logits.flip(-1)  # equal logits: the larger id first when sorted descending
        probs, order = flipped.softmax(-1).sort(dim=-1, descending=True, stable=True)
        tail = probs.flip(-1).cumsum(-1).flip(-1)  # mass of each token and every less probable one
        remove = tail <= 1 - top_p
        remove[:, :min_tokens_to_keep] = False
        return flipped.masked_fill(remove.scatter(-1, order, remove), float("-inf")).flip(-1)

    def row_by_row(logits, top_p, min_tokens_to_keep=1):
        return torch.stack([top_p_ok(row[None], top_p, min_tokens_to_keep)[0] for row in logits])

    for fn in (from_the_top, row_by_row):
        fb = check.top_p_filter(fn)
        assert fb.passed, (fn.__name__, fb)


def test_top_p_filter_refuses_float64_for_float32_logits():
    """The text asks for the probabilities in the logits' dtype (issue 33: float64 passed)."""
    def in_float64(logits, top_p, min_tokens_to_keep=1):
        sorted_logits, order = logits.sort(dim=-1, stable=True)
        tail = sorted_logits.double().softmax(-1).cumsum(-1)
        remove = tail <= 1 - top_p
        remove[:, -min_tokens_to_keep:] = False
        return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))

    def softmax_dtype(logits, top_p, min_tokens_to_keep=1):
        sorted_logits, order = logits.sort(dim=-1, stable=True)
        tail = sorted_logits.softmax(-1, dtype=torch.float64).cumsum(-1)
        remove = tail <= 1 - top_p
        remove[:, -min_tokens_to_keep:] = False
        return logits.masked_fill(remove.scatter(-1, order, remove), float("-inf"))

    for fn in (in_float64, softmax_dtype):
        fb = check.top_p_filter(fn)
        assert fb.status == "hint" and "float64" in fb.message and fb.kind == "specific", (fn.__name__, fb)


def test_top_p_filter_hints():
    inf = float("-inf")

    def drops_crossing(logits, top_p, min_tokens_to_keep=1):
        probs, order = logits.softmax(-1).sort(dim=-1, descending=True)
        remove = probs.cumsum(-1) > top_p
        remove[:, :min_tokens_to_keep] = False
        return logits.masked_fill(remove.scatter(-1, order, remove), inf)

    def in_place(logits, top_p, min_tokens_to_keep=1):
        out = top_p_ok(logits, top_p, min_tokens_to_keep)
        logits[torch.isinf(out)] = inf
        return logits

    cases = {"crosses top_p": drops_crossing, "in place": in_place,
             "probabilities": lambda x, p, m=1: top_p_ok(x, p, m).softmax(-1),
             "is ignored": lambda x, p, m=1: top_p_ok(x, p, 1)}
    for expected, fn in cases.items():
        fb = check.top_p_filter(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)


# ------------------------------------------------------------------ 8.4 sampling loop
def sample_ok(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
    for _ in range(n):
        logits = model(ids[:, -model.config.context_length:])[0][:, -1] / temperature
        if top_k is not None:
            logits = logits.masked_fill(logits < logits.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
        if top_p is not None:
            logits = top_p_ok(logits, top_p)
        ids = torch.cat([ids, torch.multinomial(logits.softmax(-1), 1, generator=generator)], dim=1)
    return ids


def test_sample_loop():
    assert check.sample_loop(sample_ok).passed

    def stub(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        raise NotImplementedError

    assert check.sample_loop(stub).status == "not attempted"


def test_sample_loop_reference_is_the_companions_sampler():
    """The checker's reference loop draws the tokens of companion.decoding.sample (which draws from
    float32 probabilities) from the same seed, with and without its cache, on the checker's cases."""
    from companion.decoding import sample

    g = torch.Generator().manual_seed(1)
    for ctx, B, T, n, tau, top_k, top_p, seed in check._SAMPLE_CASES:
        model = check._tiny_gpt(11, ctx, seed=84 if ctx == 8 else 84 + ctx)
        ids = torch.randint(11, (B, T), generator=g)
        ref = check._reference_sample(model, ids, n, tau, top_k, top_p, seed=seed, dtype=torch.float32)
        for use_cache in (False, True):
            got = sample(model, ids, n, temperature=tau, top_k=top_k, top_p=top_p, use_cache=use_cache,
                         generator=check._used_generator(seed))
            assert torch.equal(got, ref), (use_cache, got, ref)


def test_sample_loop_accepts_other_arithmetic():
    """The same draws written differently (a softmax by hand, multiplying by 1 / temperature, a
    float32 distribution, Hugging Face's warpers) pass: the model runs in float64, so rounding
    differences cannot flip a draw except with probability ~1e-14 per draw."""
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    def by_hand(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        for _ in range(n):
            z = model(ids[:, -model.config.context_length:])[0][:, -1] * (1 / temperature)
            if top_k is not None:
                z = TopKLogitsWarper(top_k)(None, z)
            if top_p is not None:
                z = TopPLogitsWarper(top_p)(None, z)
            e = (z - z.max(-1, keepdim=True).values).exp()
            ids = torch.cat([ids, torch.multinomial(e / e.sum(-1, keepdim=True), 1, generator=generator)], 1)
        return ids

    def in_float32(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        for _ in range(n):
            z = model(ids[:, -model.config.context_length:])[0][:, -1].float() / temperature
            if top_k is not None:
                z = z.masked_fill(z < z.topk(top_k, dim=-1).values[:, -1:], float("-inf"))
            if top_p is not None:
                z = top_p_ok(z, top_p)
            ids = torch.cat([ids, torch.multinomial(z.softmax(-1), 1, generator=generator)], 1)
        return ids

    for fn in (by_hand, in_float32):
        fb = check.sample_loop(fn)
        assert fb.passed, (fn.__name__, fb)


def test_sample_loop_hints():
    def after_softmax(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        for _ in range(n):
            probs = model(ids[:, -model.config.context_length:])[0][:, -1].softmax(-1) / temperature
            ids = torch.cat([ids, torch.multinomial(probs, 1, generator=generator)], 1)
        return ids

    def from_logits(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        for _ in range(n):
            z = model(ids[:, -model.config.context_length:])[0][:, -1] / temperature
            ids = torch.cat([ids, torch.multinomial(z, 1, generator=generator)], 1)
        return ids

    def no_crop(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        for _ in range(n):
            z = model(ids)[0][:, -1] / temperature
            ids = torch.cat([ids, torch.multinomial(z.softmax(-1), 1, generator=generator)], 1)
        return ids

    def no_append(model, ids, n, temperature=1.0, top_k=None, top_p=None, generator=None):
        z = model(ids[:, -model.config.context_length:])[0][:, -1] / temperature
        return torch.cat([ids, torch.multinomial(z.softmax(-1), 1, generator=generator)], 1)

    cases = {"temperature changes nothing": after_softmax, "sampled from the logits": from_logits,
             "outgrew the model's window": no_crop, "only one token was added": no_append}
    for expected, fn in cases.items():
        fb = check.sample_loop(fn)
        assert fb.status == "hint" and expected in fb.message, (expected, fb)


# ------------------------------------------------------------------ 8.6 beam search on the cache
def cached_beam_ok(model, prompt, n, k):
    cache = model.new_cache()
    logits = model(prompt[None], cache=cache)[0]
    seqs, scores = prompt[None], torch.zeros(1, dtype=logits.dtype)
    for step in range(n):
        logp = logits[:, -1].log_softmax(-1)
        V = logp.shape[-1]
        scores, flat = (scores[:, None] + logp).flatten().topk(min(k, seqs.shape[0] * V))
        parents, tokens = flat // V, flat % V
        seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
        if step < n - 1:
            cache.reorder(parents)
            logits = model(tokens[:, None], cache=cache)[0]
    return seqs, scores


def test_cached_beam_search():
    assert check.cached_beam_search(cached_beam_ok).passed

    def stub(model, prompt, n, k):
        raise NotImplementedError

    assert check.cached_beam_search(stub).status == "not attempted"

    def companion_beam(model, prompt, n, k):  # the course's own beam search: refused
        from companion.decoding import beam_search

        result = beam_search(model, prompt, n, k=k)
        return (torch.stack([h.tokens for h in result.hypotheses]),
                torch.tensor([h.score for h in result.hypotheses], dtype=torch.float64))

    fb = check.cached_beam_search(companion_beam)
    assert fb.status == "hint" and "course's own" in fb.message, fb


def test_cached_beam_search_accepts_feeding_after_the_last_step():
    """Feeding the tokens chosen at the last step costs one call more but is right by the text (issue 33)."""
    def feeds_after_last(model, prompt, n, k):
        cache = model.new_cache()
        logits, _ = model(prompt[None], cache=cache)
        seqs, scores = prompt[None], torch.zeros(1, dtype=logits.dtype)
        for _ in range(n):
            logp = logits[:, -1].log_softmax(-1)
            V = logp.shape[-1]
            scores, flat = (scores[:, None] + logp).flatten().topk(min(k, logp.numel()))
            parents, tokens = flat // V, flat % V
            seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
            cache.reorder(parents)
            logits, _ = model(tokens[:, None], cache=cache)
        return seqs, scores

    fb = check.cached_beam_search(feeds_after_last)
    assert fb.passed, fb


def test_cached_beam_search_references():
    """Brute force and the uncached beam agree with companion.decoding.beam_search (without its
    cache), and the cases are unambiguous: consecutive scores of the references differ by far more
    than float64 rounding, so comparing tokens exactly is safe."""
    from companion.decoding import beam_search

    g = torch.Generator().manual_seed(860)
    for V, T, n, k in check._BEAM_CASES:
        model = check._tiny_gpt(V, 16, seed=86 if V == 5 else 86 + V)
        prompt = torch.randint(V, (T,), generator=g)
        exhaustive = k >= V ** (n - 1)
        seqs, scores = check._brute_force(model, prompt, n, k) if exhaustive else check._uncached_beam(
            model, prompt, n, k)
        result = beam_search(model, prompt, n, k=k, use_cache=False)
        assert torch.equal(torch.stack([h.tokens for h in result.hypotheses]), seqs)
        torch.testing.assert_close(torch.tensor([h.score for h in result.hypotheses], dtype=torch.float64),
                                   scores)
        if exhaustive:
            _, best = check._brute_force(model, prompt, n, k + 1)
            assert bool((best[:-1] - best[1:] > 1e-7).all()), (T, n, k)
        # at every step of the search, the candidates kept are well apart from each other and from the
        # first one pruned
        beams, beam_scores = prompt[None], torch.zeros(1, dtype=torch.float64)
        for _ in range(n):
            with torch.no_grad():
                cand = (beam_scores[:, None] + model(beams)[0][:, -1].log_softmax(-1)).flatten()
            top, flat = cand.topk(min(k + 1, cand.numel()))
            assert bool((top[:-1] - top[1:] > 1e-7).all()), (T, n, k, top)
            top, flat = top[:k], flat[:k]
            beams = torch.cat([beams[flat // V], (flat % V)[:, None]], 1)
            beam_scores = top


def test_cached_beam_search_hints():
    def no_reorder(model, prompt, n, k):  # k copies of the prompt, never reordered
        cache = model.new_cache()
        logits = model(prompt[None].expand(k, -1), cache=cache)[0]
        seqs = prompt[None].expand(k, -1)
        scores = torch.full((k,), float("-inf"), dtype=logits.dtype)
        scores[0] = 0
        for step in range(n):
            logp = logits[:, -1].log_softmax(-1)
            scores, flat = (scores[:, None] + logp).flatten().topk(k)
            parents, tokens = flat // logp.shape[-1], flat % logp.shape[-1]
            seqs = torch.cat([seqs[parents], tokens[:, None]], 1)
            if step < n - 1:
                logits = model(tokens[:, None], cache=cache)[0]
        return seqs, scores

    def recomputes(model, prompt, n, k):  # right beams, no cache
        seqs, scores = prompt[None], torch.zeros(1, dtype=torch.float64)
        for _ in range(n):
            logp = model(seqs)[0][:, -1].log_softmax(-1)
            scores, flat = (scores[:, None] + logp).flatten().topk(min(k, logp.numel()))
            seqs = torch.cat([seqs[flat // logp.shape[-1]], (flat % logp.shape[-1])[:, None]], 1)
        return seqs, scores

    cases = {"not those of the sequences": no_reorder, "use the KV cache": recomputes}
    for expected, fn in cases.items():
        fb = check.cached_beam_search(fn)
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
              "my_top_p": check.top_p_filter, "my_sample": check.sample_loop,
              "my_cached_attention": check.cached_attention, "my_beam_search": check.cached_beam_search}
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


def test_the_models_logs_survive_the_graders_copy_back():
    """The grader runs the student's code in a kernel, on a copy of the model proxies, and copies a
    module's plain attributes back: the call counter of 8.4 and the call log of 8.6 must be such
    attributes, or the grader would see an empty log and refuse a right answer."""
    import copy

    from companion.grading import kernel, session

    for proxy, run in ((check._Proxy(check._tiny_gpt(11, 8, seed=84)),
                        lambda m: sample_ok(m, torch.tensor([[1, 2, 3]]), 9, generator=torch.Generator())),
                       (check._CachedProxy(check._tiny_gpt(5, 16, seed=86)),
                        lambda m: cached_beam_ok(m, torch.tensor([1, 2, 3]), 3, 4))):
        in_kernel = copy.deepcopy(proxy)
        run(in_kernel)
        session.apply_sync([[0, *kernel._changes(in_kernel, None)]], (proxy,), {})
        if isinstance(proxy, check._Proxy):
            assert proxy.calls == in_kernel.calls == 9
        else:
            assert proxy.log == in_kernel.log
            assert [kind for kind, _ in proxy.log].count("reorder") == 2
            assert proxy.log[1] == ("call", ((1, 3), True))


def test_beam_search_eos():
    """8.7: the book's answer passes; a stub is "not attempted"; a branch left as NotImplementedError is
    reported with its input; junk gets a type message."""
    from test_checker_mutations_ch08 import my_beam_search_eos

    assert check.beam_search_eos(my_beam_search_eos).passed

    def stub(model, prompt, k, max_new, eos_id, alpha=0.0):
        raise NotImplementedError

    assert check.beam_search_eos(stub).status == "not attempted"

    def no_alpha_yet(model, prompt, k, max_new, eos_id, alpha=0.0):
        if alpha:
            raise NotImplementedError
        return my_beam_search_eos(model, prompt, k, max_new, eos_id, alpha)

    fb = check.beam_search_eos(no_alpha_yet)
    assert fb.status == "hint" and "alpha = 1.0" in fb.message and "NotImplementedError" in fb.message, fb

    def without_early_stop(model, prompt, k, max_new, eos_id, alpha=0.0):  # the text asks for the stop
        return check._eos_beam(model, prompt, k, max_new, eos_id, 0.5) if False else _no_stop(
            model, prompt, k, max_new, eos_id, alpha)

    fb = check.beam_search_eos(without_early_stop)  # the text asks for the early stop (issue 33, o2)
    assert fb.status == "hint" and "early stop" in fb.message, fb
    fb = check.beam_search_eos(lambda *a: object())
    assert fb.status == "hint" and "list of (score, tokens) pairs" in fb.message, fb


def _no_stop(model, prompt, k, max_new, eos_id, alpha):
    beams, finished = [(0.0, list(prompt))], []
    for _ in range(max_new):
        logp = model(torch.tensor([t for _, t in beams]))[:, -1].double().log_softmax(-1)
        cands = sorted(((s + logp[b, w].item(), t + [w]) for b, (s, t) in enumerate(beams)
                        for w in range(logp.shape[1])), key=lambda c: -c[0])
        beams = []
        for s, t in cands:
            if len(beams) == k:
                break
            (finished if t[-1] == eos_id else beams).append((s, t))
        if not beams:
            break
    return sorted(finished + beams, key=lambda c: -c[0] / (len(c[1]) - len(prompt)) ** alpha)[:k]


def test_beam_search_eos_reference_is_brute_force_when_the_beam_keeps_everything():
    """The checker's reference equals exhaustive search when k >= V ** max_new, and the companion's
    beam_search on every case without exact ties (the companion breaks exact ties in torch.topk's
    order, not in the (parent, token) order the exercise states: on the tied case it loses a
    hypothesis that ends at the first step)."""
    import itertools

    from companion.decoding import beam_search

    for name, model, prompt, k, n, eos, alpha in check._eos_cases():
        ref = check._eos_beam(model, prompt, k, n, eos, alpha)
        got = beam_search(model, torch.tensor(prompt), n, k=k, eos_id=eos, length_penalty=alpha, n_best=k)
        assert name.startswith("exactly tied") or "integer logits" in name or check._same_hypotheses([(h.score, h.tokens.tolist()) for h in got.hypotheses], ref, alpha,
                                      len(prompt), tol=1e-5), name
        if k < model.vocab_size ** n:
            continue
        every = []
        for L in range(1, n + 1):
            for seq in itertools.product(range(model.vocab_size), repeat=L):
                if eos in seq[:-1] or (seq[-1] != eos and L < n):
                    continue
                ids, score = list(prompt), 0.0
                for w in seq:
                    score += model(torch.tensor([ids]))[0, -1].double().log_softmax(-1)[w].item()
                    ids.append(w)
                every.append((score, ids))
        every.sort(key=lambda c: -c[0] / (len(c[1]) - len(prompt)) ** alpha)
        assert check._same_hypotheses(every[:k], ref, alpha, len(prompt)), name
