"""Tests for exercise 9.7 (what follows a prefix) and for ``companion.translation.next_characters``.

The right answers pass; wrong answers written from the exercise's text (not from the checker) do
not, each classic one with its own hint; junk never crashes the checker; the chapter's module still
serves exercises 9.1 to 9.6."""
from __future__ import annotations

import re
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.exercises import seq2seq, seq2seq_extra as check
from companion.translation import german, next_characters, number_splits


def right_find(texts, prefix):
    counts = Counter()
    for text in texts:
        for start in range(len(text) - len(prefix)):
            if text[start:start + len(prefix)] == prefix:
                counts[text[start + len(prefix)]] += 1
    return counts


def right_regex(texts, prefix):  # a lookahead finds overlapping occurrences
    counts = defaultdict(int)
    for text in texts:
        for m in re.finditer(f"(?={re.escape(prefix)})", text):
            end = m.start() + len(prefix)
            if end < len(text):
                counts[text[end]] += 1
    return dict(counts)


def test_right_answers_pass():
    for fn in (right_find, right_regex):
        fb = check.next_chars(fn)
        assert fb.passed, fb
    # the course's own function is never an answer (the shared rules of every checker)
    assert "companion" in check.next_chars(next_characters).message


def test_untouched_stub_is_not_attempted():
    def stub(texts, prefix):
        raise NotImplementedError

    assert check.next_chars(stub).status == "not attempted"
    assert check.next_chars(...).status == "not attempted"


# Wrong answers, as students write them from the exercise's text, with the hint each must get
# (None: any hint, as long as it does not pass and the checker does not fail).
def finditer(texts, prefix):
    return Counter(t[m.end()] for t in texts for m in re.finditer(re.escape(prefix), t) if m.end() < len(t))


def joined(texts, prefix):
    return right_find(["".join(texts)], prefix)


def joined_with_space(texts, prefix):
    return right_find([" ".join(texts)], prefix)


def last_of_prefix(texts, prefix):
    return Counter(t[i + len(prefix) - 1] for t in texts for i in range(len(t) - len(prefix) + 1)
                   if t.startswith(prefix, i))


def two_after(texts, prefix):
    return Counter(t[i + len(prefix) + 1] for t in texts for i in range(len(t) - len(prefix) - 1)
                   if t.startswith(prefix, i))


def end_as_empty(texts, prefix):
    counts = right_find(texts, prefix)
    for t in texts:
        if t.endswith(prefix):
            counts[""] += 1
    return counts


def as_set(texts, prefix):
    return set(right_find(texts, prefix))


def as_list(texts, prefix):
    return [t[i + len(prefix)] for t in texts for i in range(len(t) - len(prefix)) if t.startswith(prefix, i)]


def occurrences_only(texts, prefix):
    return sum(t.count(prefix) for t in texts)


def first_only(texts, prefix):
    counts = Counter()
    for t in texts:
        i = t.find(prefix)
        if i != -1 and i + len(prefix) < len(t):
            counts[t[i + len(prefix)]] += 1
    return counts


def mutating(texts, prefix):
    result = right_find(texts, prefix)
    texts.append("")
    return result


def float_counts(texts, prefix):
    return {c: float(n) for c, n in right_find(texts, prefix).items()}


def lower_cased(texts, prefix):
    return right_find([t.lower() for t in texts], prefix.lower()) | Counter({"?": 0})


def stripped(texts, prefix):
    return right_find([t.strip() for t in texts], prefix)


def no_whitespace(texts, prefix):
    return right_find(["".join(t.split()) for t in texts], prefix)


def probabilities(texts, prefix):
    counts = right_find(texts, prefix)
    total = sum(counts.values())
    return {c: n / total for c, n in counts.items()} if total else {}


def regex_unescaped(texts, prefix):
    """The prefix used as a pattern without re.escape: '.' matches any character, '(' or '?' break it
    (red team)."""
    counts = Counter()
    for text in texts:
        for m in re.finditer("(?=" + prefix + "(.))", text, flags=re.S):
            counts[m.group(1)] += 1
    return counts


def regex_unescaped_safe(texts, prefix):
    """The same, falling back to plain search where the pattern does not compile: only '.' shows."""
    try:
        re.compile(prefix)
    except re.error:
        return right_find(texts, prefix)
    return regex_unescaped(texts, prefix)


WRONG = [
    (finditer, "overlap"),
    (joined, "inside one text"),
    (joined_with_space, None),
    (last_of_prefix, "AFTER"),
    (two_after, "two places"),
    (end_as_empty, "end of a text"),
    (as_set, "dict"),
    (as_list, "dict"),
    (occurrences_only, "dict"),
    (first_only, None),
    (mutating, "changed texts in place"),
    (float_counts, "counts (ints)"),
    (stripped, None),
    (no_whitespace, None),
    (probabilities, "counts (ints)"),
    (regex_unescaped, None),  # raises re.error on "(": the report of its own exception
    (regex_unescaped_safe, None),
]


@pytest.mark.parametrize("wrong, words", WRONG, ids=[w.__name__ for w, _ in WRONG])
def test_wrong_answers_get_their_hint(wrong, words):
    fb = check.next_chars(wrong)
    assert fb.status == "hint", fb
    if words is not None:
        assert words in fb.message, fb.message
        assert fb.kind == "specific", fb


def test_lower_casing_changes_nothing_here():
    # The cases use lower-case letters only, so lower-casing is harmless, and the explicit zero
    # count of a Counter is ignored: the answer is right.
    assert check.next_chars(lower_cased).passed


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.none(), st.text(max_size=5), st.integers(), st.integers(min_value=10**300),
                 st.complex_numbers(), st.floats(), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=2), st.one_of(st.integers(), st.floats(), st.text(max_size=2)),
                                 max_size=3),
                 st.just(10**400), st.just({"a": 10**400}), st.just({1: 1}), st.just({}),
                 st.just(Counter())))
def test_junk_never_passes_and_never_crashes_the_checker(junk):
    fb = check.next_chars(lambda texts, prefix: junk)
    assert fb.status == "hint", fb
    assert "internal" not in fb.status


def test_a_student_exception_is_reported_as_theirs():
    def broken(texts, prefix):
        return texts[0][len(prefix) + 1000]

    fb = check.next_chars(broken)
    assert fb.status == "hint" and fb.kind == "raised", fb


def test_the_chapter_module_serves_every_exercise_of_chapter_9():
    from companion.exercises import seq2seq_model

    for module in (seq2seq, seq2seq_model):
        for name in module.__all__:
            assert getattr(check, name) is getattr(module, name)
            assert name in check.__all__
    assert check.next_chars.exercise == "Exercise 9.7"
    numbers = sorted(getattr(check, name).exercise for name in check.__all__)
    assert numbers == [f"Exercise 9.{k}" for k in range(1, 10)]
    assert check.__all__[-3:] == ["next_chars", "smoothed_loss", "seq2seq_step"]


# ------------------------------------------------------------------ companion.translation.next_characters
def test_next_characters_against_a_brute_force_count():
    texts = ["aaaa", "abab", "ba", "", "b"]
    for prefix in ("a", "aa", "ab", "bab", "b", "c"):
        expected = Counter()
        for t in texts:
            for i in range(len(t)):
                for j in range(i + len(prefix), len(t)):
                    if j == i + len(prefix) and t[i:j] == prefix:
                        expected[t[j]] += 1
        assert next_characters(texts, prefix) == dict(sorted(expected.items()))


def test_next_characters_finds_the_prefix_clash_of_chapter_9():
    train = [german(n) for n in number_splits().train]
    assert next_characters(train, "sechsunds") == {"e": 93}
    assert set(next_characters(train, "vierunds")) == {"e", "i"}


@pytest.mark.parametrize("texts, prefix, error, words", [
    ("abc", "a", TypeError, "`texts` must be a list of strings"),
    (["abc", 3], "a", TypeError, "`texts[1]` must be a string"),
    (["abc"], "", ValueError, "`prefix` must be a non-empty string"),
    (["abc"], None, ValueError, "`prefix` must be a non-empty string"),
    (None, "a", TypeError, "`texts` must be a list of strings"),
])
def test_next_characters_rejects_bad_input_clearly(texts, prefix, error, words):
    with pytest.raises(error, match=re.escape(words)):
        next_characters(texts, prefix)


# ------------------------------------------------------------------------------- Exercise 9.8
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def right_smoothed(logits, targets, pad_id, eps):
    V = logits.shape[-1]
    logp = logits.log_softmax(-1)  # (B, T, V)
    q = torch.full_like(logp, eps / (V - 1))
    q[..., pad_id] = 0
    q = q + (1 - eps) * F.one_hot(targets, V).to(logp.dtype)
    per = -(q * logp).sum(-1)  # (B, T)
    return per[targets != pad_id].mean()


def _right_loop(logits, targets, pad_id, eps):  # another right answer: position by position
    B, T, V = logits.shape
    total, n = logits.new_zeros(()), 0
    for b in range(B):
        for t in range(T):
            y = int(targets[b, t])
            if y == pad_id:
                continue
            logp = logits[b, t].log_softmax(-1)
            keep = torch.arange(V) != pad_id
            total = total - (1 - eps) * logp[y] - eps / (V - 1) * logp[keep].sum()
            n += 1
    return total / n


def _smoothed_wrong(**options):
    def wrong(logits, targets, pad_id, eps):
        return check._smoothed(logits, targets, pad_id, eps, **options)
    return wrong


def _torch_smoothing(logits, targets, pad_id, eps):
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=pad_id, label_smoothing=eps)


def _unstable(logits, targets, pad_id, eps):
    V = logits.shape[-1]
    logp = logits.softmax(-1).log()
    q = torch.full_like(logp, eps / (V - 1))
    q[..., pad_id] = 0
    q = q + (1 - eps) * F.one_hot(targets, V).to(logp.dtype)
    return (-(q * logp).sum(-1))[targets != pad_id].mean()


def _float32(logits, targets, pad_id, eps):
    return right_smoothed(logits.float(), targets, pad_id, eps)


def _in_place(logits, targets, pad_id, eps):
    targets[targets == pad_id] = pad_id  # harmless, but then the mask is changed in place:
    out = right_smoothed(logits, targets, pad_id, eps)
    logits.zero_() if not logits.requires_grad else None
    return out


SMOOTHED_WRONG = [
    (_smoothed_wrong(spread="all"), "the padding token too"),
    (_smoothed_wrong(spread="not target"), "V - 2 tokens"),
    (_smoothed_wrong(spread="none"), "no smoothing"),
    (_smoothed_wrong(mean="all"), "padding included"),
    (_smoothed_wrong(mean="sum"), "take their mean"),
    (_smoothed_wrong(mean="rows"), "then the rows"),
    (lambda l, t, p, e: -right_smoothed(l, t, p, e), "the sign is wrong"),
    (_torch_smoothing, "not to call"),
    (_unstable, "log_softmax"),
    (_float32, "precision"),
    (_in_place, "in place"),
    (lambda l, t, p, e: float(right_smoothed(l, t, p, e)), "return a scalar tensor"),
    (lambda l, t, p, e: right_smoothed(l, t, p, e).detach(), "gradient"),
]


def test_smoothed_reference_is_pytorchs_loss_with_eps_over_the_non_padding_tokens():
    """Independent of the checker: the checker's spread='all' variant IS F.cross_entropy's label
    smoothing, and the text's loss equals a position-by-position loop."""
    g = torch.Generator().manual_seed(0)
    for B, T, V, pad_id, eps in ((2, 5, 7, 0, 0.1), (1, 1, 3, 2, 0.3), (3, 4, 11, 5, 0.0)):
        logits = torch.randn(B, T, V, generator=g, dtype=torch.float64)
        targets = torch.randint(V, (B, T), generator=g)
        targets[0, 0] = (pad_id + 1) % V
        torch.testing.assert_close(check._smoothed(logits, targets, pad_id, eps, spread="all"),
                                   _torch_smoothing(logits, targets, pad_id, eps))
        torch.testing.assert_close(check._smoothed(logits, targets, pad_id, eps),
                                   _right_loop(logits, targets, pad_id, eps))


def test_pytorchs_label_smoothing_puts_mass_on_the_padding_token():
    """The target a loss implies is softmax - gradient (per position): PyTorch's gives pad_id eps / V."""
    V, pad_id, eps = 6, 0, 0.1
    logits = torch.zeros(1, 1, V, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([[3]])
    _torch_smoothing(logits, targets, pad_id, eps).backward()
    implied = (logits.softmax(-1) - logits.grad).detach()
    assert abs(float(implied[0, 0, pad_id]) - eps / V) < 1e-12
    logits.grad = None
    right_smoothed(logits, targets, pad_id, eps).backward()
    implied = (logits.softmax(-1) - logits.grad).detach()
    assert abs(float(implied[0, 0, pad_id])) < 1e-12 and abs(float(implied.sum()) - 1) < 1e-12


def test_smoothed_right_answers_pass():
    for answer in (right_smoothed, _right_loop):
        fb = check.smoothed_loss(answer)
        assert fb.passed, fb


@pytest.mark.parametrize("wrong,words", SMOOTHED_WRONG, ids=[w for _, w in SMOOTHED_WRONG])
def test_smoothed_wrong_answers_get_their_hint(wrong, words):
    fb = check.smoothed_loss(wrong)
    assert fb.status == "hint" and words in fb.message, fb


def test_smoothed_stub_is_not_attempted():
    def stub(logits, targets, pad_id, eps):
        raise NotImplementedError
    assert check.smoothed_loss(stub).status == "not attempted"
    assert check.smoothed_loss(...).status == "not attempted"


# ------------------------------------------------------------------------------- Exercise 9.9
from companion.train import learning_rate, make_optimizer, TrainConfig  # noqa: E402
from companion.translation import MODEL_CONFIG, TranslationTokenizer, make_batch, pairs, train  # noqa: E402


def right_step(model, optimizer, src, tgt, eps, max_norm):
    pad = model.config.pad_id
    model.train()
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # <s> y in, y </s> out
    optimizer.zero_grad(set_to_none=True)
    logits, _ = model(src, tgt_in, src_key_mask=src != pad, tgt_key_mask=tgt_in != pad)
    loss = right_smoothed(logits, tgt_out, pad, eps)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def _step_with(*, train=True, shift="right", pad=None, mask="right", loss="right", zero="start", clip="right",
               update=True, returned="item", in_place=False, reseed=False, end_eval=False):
    """A student's step with one thing changed (written here, independent of the checker's variants)."""
    def step(model, optimizer, src, tgt, eps, max_norm):
        pad_id = model.config.pad_id if pad is None else pad
        if train:
            model.train()
        if reseed:
            torch.manual_seed(0)
        if shift == "none":
            tgt_in, tgt_out = tgt, tgt
        elif shift == "reversed":
            tgt_in, tgt_out = tgt[:, 1:], tgt[:, :-1]
        else:
            tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        if in_place:
            tgt_in[tgt_in == 2] = pad_id  # a shorter row's </s> is no input: but tgt_in is a view of tgt
        if zero == "start":
            optimizer.zero_grad()
        keep = {"right": src != pad_id, "torch": src == pad_id, "none": None}[mask]
        logits, _ = model(src, tgt_in, src_key_mask=keep)
        V = logits.shape[-1]
        if loss == "torch":
            value = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=pad_id,
                                    label_smoothing=eps)
        elif loss == "all positions":
            value = check._smoothed(logits, tgt_out, pad_id, eps, mean="all")
        elif loss == "sum":
            value = right_smoothed(logits, tgt_out, pad_id, eps) * (tgt_out != pad_id).sum()
        elif loss == "eps ignored":
            value = right_smoothed(logits, tgt_out, pad_id, 0.0)
        else:
            value = right_smoothed(logits, tgt_out, pad_id, eps)
        value.backward()
        if clip == "right":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        elif clip == "one":
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if update:
            optimizer.step()
        if clip == "after":
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if zero == "end":
            optimizer.zero_grad()
        if end_eval:
            model.eval()
        if returned == "tensor":
            return value
        if returned == "after":
            with torch.no_grad():
                logits, _ = model(src, tgt_in)
                return right_smoothed(logits, tgt_out, pad_id, eps).item()
        return value.item()

    return step


STEP_WRONG = [
    (_step_with(train=False), "model.train() first"),
    (_step_with(shift="none"), "you used the whole tgt for both"),
    (_step_with(shift="reversed"), "the wrong way round"),
    (_step_with(pad=0), "treats 0 as the padding"),
    (_step_with(mask="torch"), "True at the REAL"),
    (_step_with(loss="torch"), "over the padding token too"),
    (_step_with(loss="all positions"), "padding included"),
    (_step_with(loss="sum"), "sums over the real target positions"),
    (_step_with(loss="eps ignored"), "eps was not used"),
    (_step_with(zero="none"), "the gradients accumulate"),
    (_step_with(zero="end"), "at the START of the step"),
    (_step_with(clip="none"), "were not clipped"),
    (_step_with(clip="after"), "clipped after optimizer.step()"),
    (_step_with(clip="one"), "not to a fixed 1.0"),
    (_step_with(update=False), "did not change"),
    (_step_with(returned="tensor"), "as a Python float"),
    (_step_with(returned="after"), "before the update"),
    (_step_with(in_place=True), "changed tgt in place"),
    (_step_with(reseed=True), "random state"),
    (_step_with(end_eval=True), "left in evaluation mode"),
]


def _step_own_forward_loss(model, optimizer, src, tgt, eps, max_norm):
    """Right, written otherwise: encode/decode, the model's own loss when eps = 0, grads set to zero."""
    model.train()
    optimizer.zero_grad(set_to_none=False)
    pad = model.config.pad_id
    tgt_in, tgt_out = tgt[:, :-1].clone(), tgt[:, 1:].clone()
    tgt_in[tgt_in == 2] = pad  # on a copy: harmless, that position's target is padding
    if eps == 0:
        _, loss = model(src, tgt_in, tgt_out)
    else:
        memory = model.encode(src, src != pad)
        loss = right_smoothed(model.decode(tgt_in, memory, memory_key_mask=src != pad), tgt_out, pad, eps)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=True)
    optimizer.step()
    return float(loss)


STEP_RIGHT = [right_step, _step_with(mask="none"), _step_own_forward_loss]


@pytest.mark.parametrize("answer", STEP_RIGHT, ids=["book", "no masks (the model builds them)", "encode/decode"])
def test_step_right_answers_pass(answer):
    fb = check.seq2seq_step(answer)
    assert fb.passed, fb


@pytest.mark.parametrize("wrong,words", STEP_WRONG, ids=[w for _, w in STEP_WRONG])
def test_step_wrong_answers_get_their_hint(wrong, words):
    fb = check.seq2seq_step(wrong)
    assert fb.status == "hint" and words in fb.message, fb


def test_step_stub_is_not_attempted():
    def stub(model, optimizer, src, tgt, eps, max_norm):
        raise NotImplementedError
    assert check.seq2seq_step(stub).status == "not attempted"


def test_step_leaves_the_callers_random_state_alone():
    state = torch.get_rng_state()
    check.seq2seq_step(_step_with(reseed=True))
    check.seq2seq_step(right_step)
    assert torch.equal(state, torch.get_rng_state())


def test_the_pattern_dropout_acts_in_training_only_and_draws_nothing():
    model = check._step_model(0, 0)
    assert not any(isinstance(m, torch.nn.Dropout) for m in model.modules())
    x = torch.ones(4, 5, dtype=torch.float64)
    drop = check._PatternDropout()
    state = torch.get_rng_state()
    out = drop(x)
    assert torch.equal(state, torch.get_rng_state())
    assert 0.15 <= float((out == 0).double().mean()) <= 0.25 and torch.equal(out.unique(), torch.tensor([0, 1.25]))
    assert torch.equal(drop.eval()(x), x)


def test_the_checkers_step_with_pytorchs_smoothing_is_translation_trains_step():
    """Independent of the checker's own cases: two steps of companion.translation.train (AdamW, its
    schedule, make_batch's tensors, PyTorch's label smoothing, clipping) equal the checker's reference
    step, with the loss swapped for PyTorch's, on the tensors that encode_batch(bos=True, eos=True) gives."""
    from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    data = pairs([3, 17, 21, 342, 1042, 97, 7, 2023])
    tok = TranslationTokenizer.from_texts([t for p in data for t in p])
    config = dict(MODEL_CONFIG, d_model=16, d_ff=32, n_heads=2)
    cfg = TrainConfig(batch_size=4, max_steps=2, learning_rate=1e-2, min_lr=1e-3, warmup=0, weight_decay=0.01,
                      grad_clip=0.05, eval_interval=0, eval_batches=1, seed=3)
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(Seq2SeqTransformer(Seq2SeqConfig(vocab_size=tok.vocab_size, **config)))
    train(models[0], tok, data, cfg, label_smoothing=0.1)
    model = models[1]
    optimizer = make_optimizer(model, cfg)
    g = torch.Generator().manual_seed(cfg.seed)
    for step in range(cfg.max_steps):
        for group in optimizer.param_groups:
            group["lr"] = learning_rate(step / cfg.max_steps, cfg, cfg.max_steps)
        batch = [data[i] for i in torch.randint(len(data), (cfg.batch_size,), generator=g).tolist()]
        src = tok.encode_batch([s for s, _ in batch])
        tgt = tok.encode_batch([t for _, t in batch], bos=True, eos=True)
        loss = check._step_variant(model, optimizer, src, tgt, 0.1, cfg.grad_clip, mistake="torch smoothing")
        src_b, tgt_in, tgt_out = make_batch(tok, batch)
        assert torch.equal(tgt[:, 1:], tgt_out) and torch.equal(src, src_b) and isinstance(loss, float)
    for (name, a), b in zip(models[0].named_parameters(), model.parameters()):
        if name.endswith("k_proj.bias"):  # its gradient is 0 up to rounding (a softmax ignores a constant added
            continue  # to every score), and AdamW's update g / (|g| + 1e-8) turns that noise into +-lr
        torch.testing.assert_close(a, b, rtol=0, atol=2e-4, msg=lambda m: f"{name}: {m}")  # 2% of the lr
