"""Tests for companion.decoding: greedy, sampling, beam search, the cache fast path and errors.

References are independent of the decoders: hand-computed probabilities of the toy model,
brute-force enumeration of every sequence, log-probabilities recomputed from scratch in float64,
and the nucleus/top-k sets computed with plain Python sorting.
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from companion import decoding
from companion.decoding import TableLM, beam_search, greedy, next_token_probs, sample, sequence_log_prob, yes_ok_model

S, YES, OK, END = 0, 1, 2, 3


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


# ---------------------------------------------------------------- helpers and reference models
class RandomLM:
    """A causal model with explicit random next-token probabilities for every prefix (a hash of it)."""

    def __init__(self, vocab_size: int, seed: int = 0, sharpness: float = 2.0):
        self.vocab_size, self.seed, self.sharpness = vocab_size, seed, sharpness

    def probs(self, prefix: tuple[int, ...]) -> torch.Tensor:
        g = torch.Generator().manual_seed(hash((self.seed,) + prefix) % (2**31))
        return (self.sharpness * torch.randn(self.vocab_size, generator=g, dtype=torch.float64)).softmax(-1)

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        B, T = ids.shape
        return torch.stack([torch.stack([self.probs(tuple(ids[b, : t + 1].tolist())).log() for t in range(T)]) for b in range(B)]).float()


class RunningSumLM(torch.nn.Module):
    """A tiny causal model with a cache of its own: logits_t = E[x_t] + P[t] + sum_{s<=t} G[x_s].

    It lets the cache machinery be tested independently of the companion GPT.
    """

    def __init__(self, vocab_size=7, context_length=12, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.E, self.G = (torch.nn.Parameter(torch.randn(vocab_size, vocab_size, generator=g)) for _ in range(2))
        self.P = torch.nn.Parameter(torch.randn(context_length, vocab_size, generator=g))
        self.context_length, self.calls = context_length, []

    class Cache:
        def __init__(self):
            self.total, self.n = None, 0

        def __len__(self):
            return self.n

        def reorder(self, index):
            self.total = self.total[index]

    def new_cache(self):
        return self.Cache()

    def forward(self, ids, cache=None):
        B, T = ids.shape
        start = len(cache) if cache is not None else 0
        assert start + T <= self.context_length, "fed more than the context"
        self.calls.append(T)
        running = self.G[ids].cumsum(1)  # (B, T, V)
        if cache is not None:
            if cache.total is not None:
                running = running + cache.total[:, None]
            cache.total, cache.n = running[:, -1], start + T
        return self.E[ids] + self.P[start:start + T] + running, None


def all_sequences(model, prompt, max_new, eos):
    """Every continuation of up to max_new tokens (ending at eos), with its log-probability in float64."""
    out = []
    for n in range(1, max_new + 1):
        for seq in itertools.product(range(model.vocab_size), repeat=n):
            if eos in seq[:-1]:
                continue  # nothing follows the end
            if seq[-1] != eos and n != max_new:
                continue  # unfinished hypotheses compete only at the length limit
            prefix, lp = tuple(prompt), 0.0
            for t in seq:
                p = float(model.probs(prefix)[t])
                lp += math.log(p) if p > 0 else -math.inf
                prefix += (t,)
            out.append((seq, lp))
    return out


def tiny_gpt(seed=0, **kw):
    model_mod = pytest.importorskip("companion.model", exc_type=ImportError)
    cfg = dict(vocab_size=13, context_length=24, d_model=32, n_layers=2, n_heads=4)
    cfg.update(kw)
    torch.manual_seed(seed)
    return model_mod.GPT(model_mod.GPTConfig(**cfg)).eval()


# ---------------------------------------------------------------- the toy example of the chapter
def test_toy_model_returns_its_table():
    m = yes_ok_model()
    probs = m(torch.tensor([[S, YES, YES]])).softmax(-1)[0]  # (3, V)
    torch.testing.assert_close(probs.double(), torch.tensor([[0, .5, .4, .1], [0, .4, .3, .3], [0, .06, .04, .9]], dtype=torch.float64))


def test_greedy_says_yes_yes_and_beam_of_two_says_ok_ok():
    m = yes_ok_model()
    assert m.decode(greedy(m, [S], 10, eos_id=END)) == "<s> yes yes </s>"
    result = beam_search(m, [S], 10, k=2, eos_id=END)
    assert m.decode(result.best.tokens) == "<s> ok ok </s>"
    # the chapter's numbers: 0.4 * 0.7 * 0.9 = 0.252 against 0.5 * 0.4 * 0.9 = 0.18
    assert result.best.score == pytest.approx(math.log(0.252), abs=1e-6)
    assert result.hypotheses[1].score == pytest.approx(math.log(0.18), abs=1e-6)
    assert sequence_log_prob(m, [S], [YES, YES, END]) == pytest.approx(math.log(0.18), abs=1e-6)


def test_toy_trace_matches_the_hand_computed_steps():
    m = yes_ok_model()
    trace = beam_search(m, [S], 10, k=2, eos_id=END, return_trace=True).trace
    assert [(p, t, s) for p, t, _, s in trace[0].kept] == [(0, YES, "alive"), (0, OK, "alive")]
    # step 2: ok ok 0.28 beats yes yes 0.20; yes ok 0.15 and yes </s> 0.15 are pruned
    assert [(trace[1].beams[p] + (t,), round(math.exp(sc), 4)) for p, t, sc, _ in trace[1].kept] == [((OK, OK), 0.28), ((YES, YES), 0.2)]
    finished = [(trace[2].beams[p] + (t,), round(math.exp(sc), 4)) for p, t, sc, st in trace[2].kept if st == "finished"]
    assert finished == [((OK, OK, END), 0.252), ((YES, YES, END), 0.18)]
    torch.testing.assert_close(trace[0].candidate_scores[0, 1:].double().exp(), torch.tensor([.5, .4, .1], dtype=torch.float64))
    assert len(trace) == 3  # stopped early: no beam can beat the finished ones


def test_length_normalization_changes_the_ranking():
    m = yes_ok_model()
    raw = beam_search(m, [S], 3, k=8, eos_id=END, n_best=8)
    norm = beam_search(m, [S], 3, k=8, eos_id=END, n_best=8, length_penalty=1.0)
    rank_raw = [m.decode(h.generated) for h in raw.hypotheses]
    rank_norm = [m.decode(h.generated) for h in norm.hypotheses]
    # raw sums: yes </s> (0.15) before yes ok </s> (0.12); per token: 0.12 ** (1/3) > 0.15 ** (1/2)
    assert rank_raw.index("yes </s>") < rank_raw.index("yes ok </s>")
    assert rank_norm.index("yes ok </s>") < rank_norm.index("yes </s>")
    for h in norm.hypotheses:
        assert h.normalized_score == pytest.approx(h.score / len(h.generated))


# ---------------------------------------------------------------- beam search against brute force
def test_beam_width_one_equals_greedy():
    for seed in range(5):
        m = RandomLM(5, seed)
        g = greedy(m, [0], 6)
        b = beam_search(m, [0], 6, k=1)
        assert b.best.tokens.tolist() == g.tolist()
        g_eos = greedy(m, [0], 6, eos_id=4)
        b_eos = beam_search(m, [0], 6, k=1, eos_id=4)
        assert b_eos.best.tokens.tolist() == g_eos.tolist()[: len(b_eos.best.tokens)]


@pytest.mark.parametrize("seed", range(4))
def test_wide_beam_equals_exhaustive_search_and_scores_are_recomputed_log_probs(seed):
    V, T, eos = 3, 4, 2
    m = RandomLM(V, seed, sharpness=1.0)
    everything = sorted(all_sequences(m, [0], T, eos), key=lambda sl: -sl[1])
    result = beam_search(m, [0], T, k=V**T, eos_id=eos, n_best=5)
    assert tuple(result.best.generated.tolist()) == everything[0][0]
    for h, (seq, lp) in zip(result.hypotheses, everything):
        assert tuple(h.generated.tolist()) == seq
        assert h.score == pytest.approx(lp, abs=1e-4)
        assert h.score == pytest.approx(sequence_log_prob(m, [0], h.generated), abs=1e-5)
        assert h.finished == (seq[-1] == eos)


def test_narrow_beam_scores_are_log_probs_and_never_beat_exhaustive():
    m = RandomLM(6, 3)
    best_exhaustive = max(lp for _, lp in all_sequences(m, [1], 4, 5))
    for k in (1, 2, 3):
        res = beam_search(m, [1], 4, k=k, eos_id=5, n_best=k)
        for h in res.hypotheses:
            assert h.score == pytest.approx(sequence_log_prob(m, [1], h.generated), abs=1e-5)
            assert h.score <= best_exhaustive + 1e-6
        scores = [h.score for h in res.hypotheses]
        assert scores == sorted(scores, reverse=True)


def test_beam_search_batches_all_beams_in_one_forward_per_step():
    m = RunningSumLM(vocab_size=7, context_length=12)
    res = beam_search(m, [1, 2], 6, k=3, use_cache=False, return_trace=True)
    assert len(m.calls) == len(res.trace) == 6  # one call per step, whatever the number of beams
    m.calls.clear()
    beam_search(m, [1, 2], 6, k=3, use_cache=True)
    assert m.calls == [2, 1, 1, 1, 1, 1]  # the prompt once, then one new token per beam


# ---------------------------------------------------------------- the cache fast path
def test_cached_and_uncached_agree_on_a_model_with_a_cache_including_past_the_window():
    m = RunningSumLM(vocab_size=7, context_length=12)
    with torch.no_grad():
        for prompt in ([3], [1, 2, 3, 4, 5], list(range(7)) * 2):  # the last one is longer than the context
            a, b = greedy(m, prompt, 20, use_cache=True), greedy(m, prompt, 20, use_cache=False)
            assert a.tolist() == b.tolist()
            ra = beam_search(m, prompt, 15, k=3, eos_id=0, use_cache=True)
            rb = beam_search(m, prompt, 15, k=3, eos_id=0, use_cache=False)
            assert [h.tokens.tolist() for h in ra.hypotheses] == [h.tokens.tolist() for h in rb.hypotheses]
            for x, y in zip(ra.hypotheses, rb.hypotheses):
                assert x.score == pytest.approx(y.score, abs=1e-4)


def test_refill_keeps_the_cache_useful_past_the_window_and_agrees_with_no_cache():
    m = RunningSumLM(vocab_size=7, context_length=8)
    a = greedy(m, [1, 2, 3], 20, use_cache=True, refill_to=4)
    calls = list(m.calls)
    assert a.tolist() == greedy(m, [1, 2, 3], 20, use_cache=False, refill_to=4).tolist()
    # prompt 3, then 1-token steps; at length 9 the window (8) overflows: rebuild from the last 4, and so on
    assert calls == [3] + [1] * 5 + [4] + [1] * 4 + [4] + [1] * 4 + [4] + [1] * 3
    ra = beam_search(m, [1, 2, 3], 14, k=3, use_cache=True, refill_to=5)
    rb = beam_search(m, [1, 2, 3], 14, k=3, use_cache=False, refill_to=5)
    assert [h.tokens.tolist() for h in ra.hypotheses] == [h.tokens.tolist() for h in rb.hypotheses]
    # refill_to = context_length is the exact sliding window, the default
    assert greedy(m, [1, 2, 3], 20, refill_to=8).tolist() == greedy(m, [1, 2, 3], 20, use_cache=False).tolist()


def test_cached_and_uncached_agree_for_the_gpt_over_many_steps():
    gpt = tiny_gpt(vocab_size=13, context_length=24)
    prompt = torch.tensor([1, 5, 2, 7])
    a, b = greedy(gpt, prompt, 36, use_cache=True), greedy(gpt, prompt, 36, use_cache=False)  # past the window too
    assert a.tolist() == b.tolist()
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    s1 = sample(gpt, prompt, 20, temperature=0.9, top_k=5, generator=g1, use_cache=True)
    s2 = sample(gpt, prompt, 20, temperature=0.9, top_k=5, generator=g2, use_cache=False)
    assert s1.tolist() == s2.tolist()
    r1 = beam_search(gpt, prompt, 16, k=3, eos_id=0, use_cache=True)
    r2 = beam_search(gpt, prompt, 16, k=3, eos_id=0, use_cache=False)
    assert [h.tokens.tolist() for h in r1.hypotheses] == [h.tokens.tolist() for h in r2.hypotheses]
    for x, y in zip(r1.hypotheses, r2.hypotheses):
        assert x.score == pytest.approx(y.score, abs=1e-3)
        assert x.score == pytest.approx(sequence_log_prob(gpt, prompt, x.generated), abs=1e-3)
    c1 = greedy(gpt, prompt, 40, use_cache=True, refill_to=12)
    assert c1.tolist() == greedy(gpt, prompt, 40, use_cache=False, refill_to=12).tolist()


def test_cached_logits_equal_uncached_logits_for_the_gpt():
    gpt = tiny_gpt()
    ids = torch.randint(0, 13, (2, 20), generator=torch.Generator().manual_seed(0))
    full, _ = gpt(ids)
    cache = gpt.new_cache()
    with torch.no_grad():
        parts = [gpt(ids[:, :5], cache=cache)[0]] + [gpt(ids[:, t:t + 1], cache=cache)[0] for t in range(5, 20)]
    torch.testing.assert_close(torch.cat(parts, 1), full, atol=1e-5, rtol=1e-4)


def test_gpt_batched_greedy_equals_one_by_one():
    gpt = tiny_gpt()
    prompts = torch.tensor([[1, 2, 3], [4, 5, 6]])
    batch = greedy(gpt, prompts, 10)
    for row, p in zip(batch, prompts):
        assert row.tolist() == greedy(gpt, p, 10).tolist()


# ---------------------------------------------------------------- sampling
def test_top_k_one_equals_greedy():
    m = RandomLM(6, 1)
    for seed in range(3):
        s = sample(m, [0, 1], 8, top_k=1, generator=torch.Generator().manual_seed(seed))
        assert s.tolist() == greedy(m, [0, 1], 8).tolist()


def test_top_p_gives_zero_probability_outside_the_nucleus():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        logits = 3 * torch.randn(12, generator=g, dtype=torch.float64)
        p = float(torch.rand(1, generator=g)) * 0.95 + 0.05
        probs = logits.softmax(-1).tolist()
        order = sorted(range(12), key=lambda i: -probs[i])
        nucleus, mass = [], 0.0
        for i in order:  # smallest set of most probable tokens with mass >= p
            nucleus.append(i)
            mass += probs[i]
            if mass >= p:
                break
        filtered = next_token_probs(logits, top_p=p)
        outside = [i for i in range(12) if i not in nucleus]
        assert filtered[outside].abs().max().item() == 0 if outside else True
        expected = torch.zeros(12, dtype=torch.float64)
        expected[nucleus] = torch.tensor([probs[i] for i in nucleus], dtype=torch.float64) / mass
        torch.testing.assert_close(filtered.double(), expected, atol=1e-6, rtol=1e-5)


def test_top_k_and_temperature_on_the_distribution():
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 3.0]])
    probs = next_token_probs(logits, top_k=2)
    expected = torch.zeros(1, 5)
    expected[0, [0, 4]] = torch.tensor([2.0, 3.0]).softmax(-1)
    torch.testing.assert_close(probs, expected)
    torch.testing.assert_close(next_token_probs(logits, temperature=0.5), (logits / 0.5).softmax(-1))
    assert next_token_probs(logits, temperature=1e-3).argmax().item() == 4
    torch.testing.assert_close(next_token_probs(logits, top_p=1.0, top_k=10), logits.softmax(-1))


def test_sampling_frequencies_follow_the_filtered_distribution():
    m = yes_ok_model()
    g = torch.Generator().manual_seed(0)
    firsts = sample(m, torch.zeros(4000, 1, dtype=torch.long), 1, generator=g, top_p=0.85)[:, 1]
    counts = torch.bincount(firsts, minlength=4).double() / 4000
    assert counts[END] == 0  # 0.5 + 0.4 >= 0.85: </s> is outside the nucleus
    assert counts[YES] == pytest.approx(0.5 / 0.9, abs=0.03)


def test_same_generator_seed_gives_the_same_sample():
    m = RandomLM(8, 2)
    a = sample(m, [0], 12, generator=torch.Generator().manual_seed(7))
    b = sample(m, [0], 12, generator=torch.Generator().manual_seed(7))
    c = sample(m, [0], 12, generator=torch.Generator().manual_seed(8))
    assert a.tolist() == b.tolist()
    assert a.tolist() != c.tolist()


def test_eos_ends_greedy_and_pads_finished_rows():
    m = yes_ok_model()
    out = sample(m, torch.zeros(6, 1, dtype=torch.long), 10, eos_id=END, generator=torch.Generator().manual_seed(0))
    assert out.shape[1] <= 5  # everything ends after at most 4 tokens
    for row in out.tolist():
        first = row.index(END)
        assert all(t == END for t in row[first:])


# ---------------------------------------------------------------- context window
def test_prompt_longer_than_the_context_is_cropped():
    m = RunningSumLM(vocab_size=7, context_length=6)
    long_prompt = [1, 2, 3, 4, 5, 6, 0, 1, 2]
    out = greedy(m, long_prompt, 4, use_cache=False)
    assert out.tolist()[:9] == long_prompt  # the whole prompt is returned
    # the model only saw the last 6 tokens: same continuation as from those alone
    assert out.tolist()[9:] == greedy(m, long_prompt[-6:], 4, use_cache=False).tolist()[6:]
    assert greedy(m, long_prompt, 4, use_cache=True).tolist() == out.tolist()


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("call, kind, match", [
    (lambda m: beam_search(m, [S], 3, k=0), ValueError, r"`k` must be a positive integer \(got k=0\)"),
    (lambda m: beam_search(m, [S], 3, k=2, n_best=3), ValueError, r"`n_best` must be at most the beam width"),
    (lambda m: sample(m, [S], 3, temperature=0), ValueError, r"`temperature` must be a finite number > 0 \(got temperature=0\)"),
    (lambda m: sample(m, [S], 3, temperature=-1.0), ValueError, r"`temperature` must be"),
    (lambda m: sample(m, [S], 3, top_p=0.0), ValueError, r"`top_p` must be a number in \(0, 1\] \(got top_p=0.0\)"),
    (lambda m: sample(m, [S], 3, top_p=1.5), ValueError, r"`top_p` must be a number in \(0, 1\]"),
    (lambda m: sample(m, [S], 3, top_k=0), ValueError, r"`top_k` must be a positive integer \(got top_k=0\)"),
    (lambda m: greedy(m, [], 3), ValueError, r"`prompt` must hold at least one token"),
    (lambda m: beam_search(m, torch.zeros(1, 0, dtype=torch.long), 3, k=2), ValueError, r"`prompt` must hold at least one token"),
    (lambda m: greedy(m, [S], 3, eos_id=7), ValueError, r"`eos_id` must be an integer in \[0, 3\] \(got eos_id=7\); .*vocab_size=4"),
    (lambda m: beam_search(m, [S], 3, k=2, eos_id=-1), ValueError, r"`eos_id` must be a non-negative integer \(got eos_id=-1\)"),
    (lambda m: greedy(m, [S], 3, eos_id="</s>"), TypeError, r"`eos_id` must be a non-negative integer \(got eos_id='</s>', a str\)"),
    (lambda m: greedy(m, [0.5], 3), TypeError, r"`prompt` must hold integer token ids"),
    (lambda m: greedy(m, [S], -1), ValueError, r"`max_new_tokens` must be a non-negative integer \(got max_new_tokens=-1\)"),
    (lambda m: greedy(m, [S], 3, use_cache=True), ValueError, r"`use_cache=True` needs a model with a `new_cache\(\)`"),
    (lambda m: beam_search(m, [[S], [S]], 3, k=2), ValueError, r"`prompt` must be one sequence of shape \(T,\) for beam search"),
    (lambda m: greedy(m, [9], 3), ValueError, r"`prompt` must hold token ids in \[0, 4\) \(got 9 at position \(0, 0\)\)"),
    (lambda m: greedy(m, [S], 3, refill_to=2), ValueError, r"`refill_to` needs a context length"),
    (lambda m: greedy(m, [S], 3, context_length=4, refill_to=5), ValueError, r"`refill_to` must be an integer in \[1, 4\] \(got refill_to=5\); at most context_length=4"),
    (lambda m: greedy(m, [S], 3, context_length=0), ValueError, r"`context_length` must be a positive integer \(got context_length=0\)"),
    (lambda m: greedy(lambda ids: ids.float(), [S], 3), TypeError, r"`model` must map ids \(B, T\) to floating-point logits \(B, T, V\)"),
])
def test_bad_input_raises_a_clear_error(call, kind, match):
    with pytest.raises(kind, match=match):
        call(yes_ok_model())


def test_table_lm_rejects_bad_rows():
    with pytest.raises(ValueError, match=r"each row of `table` must hold 3 probabilities summing to 1"):
        TableLM({(0,): [0.5, 0.4, 0.2]}, vocab_size=3)


def test_zero_new_tokens_returns_the_prompt():
    m = yes_ok_model()
    assert sequence_log_prob(m, [S], []) == 0.0
    assert greedy(m, [S], 0).tolist() == [S]
    res = beam_search(m, [S], 0, k=2)
    assert res.best.tokens.tolist() == [S] and res.best.score == 0.0


def test_plot_beam_tree_draws_every_kept_node():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = yes_ok_model()
    res = beam_search(m, [S], 5, k=2, eos_id=END, return_trace=True)
    ax = decoding.plot_beam_tree(res.trace, lambda t: m.itos[t], best=res.best.generated, show_pruned=3)
    labels = [t.get_text() for t in ax.texts]
    pairs = list(zip(labels, labels[1:]))  # each node: its token, then its score
    assert ("ok", "-0.92") in pairs and ("</s>", "-1.38") in pairs
    token = next(t for t in ax.texts if t.get_text() == "ok")
    assert token.get_bbox_patch() is not None  # boxed, so that "," and "." are visible too
    plt.close("all")


# ---------------------------------------------------------------- repetition controls (issue 15, chapter 8)
# References written from Hugging Face's documented semantics, one token and one n-gram at a time:
# repetition_penalty (RepetitionPenaltyLogitsProcessor): every token in the sequence, prompt included,
# once: score * p if score < 0 else score / p. no_repeat_ngram_size (NoRepeatNGramLogitsProcessor):
# the tokens that complete an n-gram already in the sequence get -inf.
def reference_penalty(seqs: torch.Tensor, scores: torch.Tensor, penalty: float) -> torch.Tensor:
    out = scores.clone()
    for b, row in enumerate(seqs.tolist()):
        for token in set(row):
            s = scores[b, token].item()
            out[b, token] = s * penalty if s < 0 else s / penalty
    return out


def reference_no_repeat(seqs: torch.Tensor, scores: torch.Tensor, n: int) -> torch.Tensor:
    out = scores.clone()
    if n == 0:  # Hugging Face adds no processor for no_repeat_ngram_size=0
        return out
    for b, row in enumerate(seqs.tolist()):
        L = len(row)
        if L + 1 < n:
            continue
        following: dict[tuple[int, ...], list[int]] = {}
        for i in range(L - n + 1):
            following.setdefault(tuple(row[i:i + n - 1]), []).append(row[i + n - 1])
        for token in following.get(tuple(row[L + 1 - n:]), []):
            out[b, token] = float("-inf")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_repetition_controls_match_the_reference(seed):
    g = torch.Generator().manual_seed(seed)
    V, B = 6, 3
    for L in (1, 2, 3, 5, 12):
        seqs = torch.randint(V, (B, L), generator=g)
        scores = torch.randn(B, V, generator=g, dtype=torch.float64) * 3
        scores[0, 0] = float("-inf")
        for penalty in (0.5, 1.0, 1.3, 2.0):
            torch.testing.assert_close(decoding.penalize_repetitions(scores, seqs, penalty),
                                       reference_penalty(seqs, scores, penalty), rtol=0, atol=0)
        for n in (1, 2, 3, 4):
            assert torch.equal(decoding.ban_repeated_ngrams(scores, seqs, n), reference_no_repeat(seqs, scores, n))


def has_repeated_ngram(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def reference_greedy(model, prompt: list[int], steps: int, penalty: float, n: int) -> list[int]:
    seq = list(prompt)
    for _ in range(steps):
        ids = torch.tensor([seq])
        logits = model(ids)[0][:, -1].double() if isinstance(model, torch.nn.Module) else model(ids)[:, -1].double()
        logits = reference_no_repeat(ids, reference_penalty(ids, logits, penalty), n)
        seq.append(int(logits.argmax(-1)))
    return seq


@pytest.mark.parametrize("penalty, n", [(1.0, 0), (1.5, 0), (1.0, 2), (1.3, 3), (0.7, 0)])
def test_greedy_with_repetition_controls_matches_a_step_by_step_reference(penalty, n):
    from companion.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=5, context_length=40, d_model=16, n_layers=1, n_heads=2)).eval()
    prompt = [0, 1, 2, 1]
    expected = reference_greedy(model, prompt, 20, penalty, n)
    for use_cache in (False, True):
        got = greedy(model, prompt, 20, repetition_penalty=penalty, no_repeat_ngram_size=n, use_cache=use_cache)
        assert got.tolist() == expected
    if n:
        assert not has_repeated_ngram(expected, n)
    plain = greedy(model, prompt, 20).tolist()
    if penalty == 1.0 and n == 0:
        assert plain == expected
    if n:
        assert has_repeated_ngram(plain, n), "this model loops without the control"


def test_sampling_applies_the_controls_before_the_temperature_and_filters():
    m = RandomLM(vocab_size=6, seed=3)
    prompt, steps = [0, 1, 2], 12
    got = sample(m, prompt, steps, temperature=0.7, top_k=4, repetition_penalty=1.4, no_repeat_ngram_size=2,
                 generator=torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    seq = list(prompt)
    for _ in range(steps):
        ids = torch.tensor([seq])
        logits = reference_no_repeat(ids, reference_penalty(ids, m(ids)[:, -1], 1.4), 2)
        probs = next_token_probs(logits, temperature=0.7, top_k=4)
        seq.append(int(torch.multinomial(probs.float(), 1, generator=g)))
    assert got.tolist() == seq
    assert not has_repeated_ngram(seq, 2)


@pytest.mark.parametrize("penalty, n", [(1.0, 2), (1.5, 0), (1.2, 3)])
def test_beam_search_scores_are_the_controlled_log_probabilities(penalty, n):
    m = RandomLM(vocab_size=5, seed=1, sharpness=3.0)
    prompt = [0, 1]
    res = beam_search(m, prompt, 8, k=3, eos_id=4, repetition_penalty=penalty, no_repeat_ngram_size=n)
    assert len(res.hypotheses) == 3
    for h in res.hypotheses:
        tokens = h.tokens.tolist()
        if n:
            assert not has_repeated_ngram(tokens, n)
        # the score is the sum, along the path, of each step's controlled log-probability
        total = 0.0
        for t in range(len(prompt), len(tokens)):
            ids = torch.tensor([tokens[:t]])
            logp = m(ids)[:, -1].double().log_softmax(-1)
            logp = reference_no_repeat(ids, reference_penalty(ids, logp, penalty), n)
            total += logp[0, tokens[t]].item()
        assert h.score == pytest.approx(total, abs=1e-9)
    same = beam_search(m, prompt, 8, k=3, eos_id=4, repetition_penalty=1.0, no_repeat_ngram_size=0)
    default = beam_search(m, prompt, 8, k=3, eos_id=4)
    assert [h.tokens.tolist() for h in same.hypotheses] == [h.tokens.tolist() for h in default.hypotheses]


def test_a_beam_whose_every_extension_is_banned_ends_unfinished():
    m = yes_ok_model()
    res = beam_search(m, [S], 6, k=2, no_repeat_ngram_size=1)  # no eos: every token may be used once
    assert res.hypotheses and all(not h.finished for h in res.hypotheses)
    for h in res.hypotheses:
        assert len(set(h.tokens.tolist())) == len(h.tokens), "no token twice"
    with pytest.raises(ValueError, match=r"`no_repeat_ngram_size`=1 leaves sequence 0 no token at step 3"):
        greedy(m, [S], 6, no_repeat_ngram_size=1)


# ---------------------------------------------------------------- issue 14: bad model output, bad ids
def nan_model(ids: torch.Tensor) -> torch.Tensor:
    out = torch.zeros(*ids.shape, 4)
    out[..., 2] = float("nan")
    return out


@pytest.mark.parametrize("call", [
    lambda: greedy(nan_model, [0], 3),
    lambda: beam_search(nan_model, [0], 3, k=2),
    lambda: sample(nan_model, [0], 3, generator=torch.Generator().manual_seed(0)),
    lambda: sequence_log_prob(nan_model, [0], [1, 2]),
])
def test_nan_logits_from_the_model_are_refused(call):
    with pytest.raises(ValueError, match=r"the logits returned by `model`.* must not hold NaN"):
        call()


def test_sequence_log_prob_never_rounds_or_flattens_a_continuation():
    m = yes_ok_model()
    with pytest.raises(TypeError, match=r"`continuation` must hold integer token ids \(got dtype=torch.float32\)"):
        sequence_log_prob(m, [S], [1.7, 2.2])
    with pytest.raises(ValueError, match=r"`continuation` must have shape \(T,\) \(got shape=\(1, 2\)\)"):
        sequence_log_prob(m, [S], [[1, 2]])
    with pytest.raises(ValueError, match=r"`continuation` must hold token ids in \[0, 4\) \(got 4 at position 1\)"):
        sequence_log_prob(m, [S], [1, 4])
    # a plain function does not say its vocabulary: the last id (never fed to it) is still checked
    with pytest.raises(ValueError, match=r"`continuation` must hold token ids in \[0, 4\) \(got 9 at position 1\)"):
        sequence_log_prob(lambda ids: m(ids), [S], [1, 9])


def test_beam_search_result_points_to_best_tokens():
    res = beam_search(yes_ok_model(), [S], 3, k=2, eos_id=END)
    for name in ("tokens", "score", "generated"):
        with pytest.raises(AttributeError, match=rf"a BeamSearchResult has no `{name}`.*result\.best\.{name}"):
            getattr(res, name)
    with pytest.raises(AttributeError, match="has no attribute 'nonsense'"):
        res.nonsense
    assert res.best.tokens.tolist() == [S, OK, OK, END]
