"""Tests for the chapter 7 checkers: right answers pass, each recognized mistake gets its hint,
untouched stubs are "not attempted"."""
import math

import torch
import torch.nn.functional as F

from companion.exercises import lm as check


def stub(*args):
    raise NotImplementedError


def test_cross_entropy():
    good = lambda logits, t: -logits.log_softmax(-1).gather(-1, t[..., None]).mean()
    assert check.cross_entropy(good).passed
    library = check.cross_entropy(lambda l, t: F.cross_entropy(l.flatten(0, 1), t.flatten()))
    assert library.status == "hint" and "calls F.cross_entropy" in library.message
    naive = lambda l, t: -torch.log(l.softmax(-1).gather(-1, t[..., None])).mean()
    naive_by_exp = lambda l, t: -torch.log(torch.exp(l) / torch.exp(l).sum(-1, keepdim=True)).gather(-1, t[..., None]).mean()
    assert "log_softmax" in check.cross_entropy(naive_by_exp).message
    cases = {
        "sign is wrong": lambda l, t: -good(l, t),
        "summed over the positions": lambda l, t: -l.log_softmax(-1).gather(-1, t[..., None]).sum(),
        "probability of the target, not its logarithm": lambda l, t: -l.softmax(-1).gather(-1, t[..., None]).mean(),
        "raw logit": lambda l, t: -l.gather(-1, t[..., None]).mean(),
        "over the vocabulary": lambda l, t: -l.log_softmax(1).gather(-1, t[..., None]).mean(),
        "one loss per position": lambda l, t: -l.log_softmax(-1).gather(-1, t[..., None])[..., 0],
    }
    for text, fn in cases.items():
        fb = check.cross_entropy(fn)
        assert fb.status == "hint" and text in fb.message, (text, fb)
    assert check.cross_entropy(stub).status == "not attempted"
    assert check.cross_entropy(...).status == "not attempted"
    del naive


def test_shift():
    assert check.shift(lambda w: (w[:, :-1], w[:, 1:])).passed
    cases = {
        "swapped": lambda w: (w[:, 1:], w[:, :-1]),
        "are the same": lambda w: (w[:, :-1], w[:, :-1]),
        "ONE shorter": lambda w: (w, w),
        "return a pair": lambda w: w,
    }
    for text, fn in cases.items():
        fb = check.shift(fn)
        assert fb.status == "hint" and text in fb.message, (text, fb)
    assert check.shift(stub).status == "not attempted"


def test_bits_per_char():
    assert check.bits_per_char(lambda n: n / math.log(2)).passed
    cases = {
        "multiplied by ln 2": lambda n: n * math.log(2),
        "log2(loss)": lambda n: math.log2(n),
        "perplexity": lambda n: math.exp(n),
        "ln 10": lambda n: n / math.log(10),
        "in nats, unchanged": lambda n: n,
    }
    for text, fn in cases.items():
        fb = check.bits_per_char(fn)
        assert fb.status == "hint" and text in fb.message, (text, fb)
    assert check.bits_per_char(stub).status == "not attempted"
    assert "1 line" not in str(check.bits_per_char(lambda n: n / math.log(2)))


# ------------------------------------------------------------------ 7.4 the training step
def train_step_ok(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()
    logits, _ = model(x)  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def test_train_step():
    assert check.train_step(train_step_ok).passed
    assert check.train_step(lambda model, optimizer, x, y, max_norm: model(x, y)[1].item()).status == "hint"

    def using_the_models_loss(model, optimizer, x, y, max_norm):  # the GPT computes the same loss
        optimizer.zero_grad()
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        return loss.item()

    # the text asks for model(x) alone and F.cross_entropy: the model's own loss is told
    assert "call the model on x alone" in check.train_step(using_the_models_loss).message

    def variant(skip=(), targets_x=False, clip_after=False, returns_tensor=False):
        def step(model, optimizer, x, y, max_norm):
            if "zero" not in skip:
                optimizer.zero_grad()
            logits, _ = model(x)
            loss = F.cross_entropy(logits.flatten(0, 1), (x if targets_x else y).flatten())
            loss.backward()
            if "clip" not in skip and not clip_after:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if "step" not in skip:
                optimizer.step()
            if clip_after:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            return loss if returns_tensor else loss.item()
        return step

    cases = {
        "gradients accumulate": variant(skip=("zero",)),
        "were not clipped": variant(skip=("clip",)),
        "clipped after optimizer.step()": variant(clip_after=True),
        "unshifted text": variant(targets_x=True),
        "call optimizer.step()": variant(skip=("step",)),
        "Python float": variant(returns_tensor=True),
    }
    for expected, fn in cases.items():
        fb = check.train_step(fn)
        assert fb.status == "hint" and fb.kind == "specific" and expected in fb.message, (expected, fb)


# ------------------------------------------------------------------ 7.5 the GPT's forward pass
def gpt_forward_ok(model, idx):
    B, T = idx.shape
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))  # (B, T, d_model)
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))


def test_gpt_forward():
    assert check.gpt_forward(gpt_forward_ok).passed
    assert check.gpt_forward(lambda model, idx: model.head(model.final_norm(
        _blocks(model, model.embed(idx))))).passed  # model.embed is token + position embedding

    def forward(pos=True, start=0, norm=True, causal=True, head_first=False):
        def fn(model, idx):
            T = idx.shape[1]
            x = model.tok_emb(idx) + (model.pos_emb(torch.arange(start, start + T)) if pos else 0)
            for block in model.blocks:
                x = block(x, is_causal=causal)
            if head_first:
                return model.final_norm(model.head(x))
            return model.head(model.final_norm(x) if norm else x)
        return fn

    cases = {
        "position embeddings are missing": forward(pos=False),
        "positions start at 0": forward(start=1),
        "final LayerNorm is missing": forward(norm=False),
        "is_causal=True": forward(causal=False),
        "final norm comes before the head": forward(head_first=True),
        "called the model itself": lambda model, idx: model(idx)[0],
    }
    for expected, fn in cases.items():
        fb = check.gpt_forward(fn)
        assert fb.status == "hint" and fb.kind == "specific" and expected in fb.message, (expected, fb)


def _blocks(model, x):
    for block in model.blocks:
        x = block(x, is_causal=True)
    return x


def test_numbers_follow_the_chapter():
    """Exercises are numbered in the order the chapter sets them: the GPT's forward pass where the
    model is introduced (7.4), the training step in the training loop after it (7.5)."""
    order = [check.cross_entropy, check.shift, check.bits_per_char, check.gpt_forward, check.train_step]
    assert [c.exercise for c in order] == [f"Exercise 7.{k}" for k in range(1, 6)]
    assert str(check.gpt_forward(gpt_forward_ok)).startswith("✅ Exercise 7.4 passed")
    assert str(check.train_step(train_step_ok)).startswith("✅ Exercise 7.5 passed")


# --- rules and cases beyond the worked example -------------------------------------------------------
def _ce_alias(logits, targets):
    from torch.nn.functional import cross_entropy
    return cross_entropy(logits.flatten(0, 1), targets.flatten())


def _ce_module(logits, targets):
    return torch.nn.CrossEntropyLoss()(logits.flatten(0, 1), targets.flatten())


def _ce_global_max(logits, targets):
    shifted = logits - logits.max()
    logp = shifted - shifted.exp().sum(-1, keepdim=True).log()
    return -logp.gather(-1, targets[..., None]).mean()


def test_cross_entropy_rules_and_edge_cases():
    for fn in (_ce_alias, _ce_module):
        fb = check.cross_entropy(fn)
        assert not fb.passed and "calls F.cross_entropy" in fb.message, fb
    fb = check.cross_entropy(_ce_global_max)
    assert not fb.passed and "each row's own maximum" in fb.message, fb
    for junk in (torch.tensor([]), torch.tensor(1 + 1j), 10**400, torch.zeros(0, 3)):
        fb = check.cross_entropy(lambda l, t, junk=junk: junk)
        assert fb.status == "hint", (junk, fb)


def test_shift_types_and_roll():
    fb = check.shift(lambda w: (w[:, :-1].int(), w[:, 1:].int()))
    assert not fb.passed and "LongTensor" in fb.message, fb
    fb = check.shift(lambda w: (w[:, :-1], w[:, :-1].roll(-1, 1)))
    assert not fb.passed and "roll wraps around" in fb.message, fb
    fb = check.shift(lambda w: (w[:, :-1].numpy(), w[:, 1:].numpy()))
    assert not fb.passed, fb

    def in_place(w):
        x, y = w[:, :-1].clone(), w[:, 1:].clone()
        w.zero_()
        return x, y

    fb = check.shift(in_place)
    assert not fb.passed and "in place, an input" in fb.message, fb


def _forward_by_type(model, idx):
    return type(model).forward(model, idx)[0]


def _forward_by_class(model, idx):
    from companion.model import GPT
    return GPT.forward(model, idx)[0]


def _forward_by_method(model, idx):
    return model.forward(idx)[0]


def test_gpt_forward_never_calls_the_model():
    for fn in (_forward_by_type, _forward_by_class, _forward_by_method, lambda model, idx: model(idx)[0]):
        fb = check.gpt_forward(fn)
        assert not fb.passed and "you called the model itself" in fb.message, (fn, fb)


def test_bits_junk():
    for junk in (10**400, 1 + 2j, "1.44", None, torch.tensor([])):
        fb = check.bits_per_char(lambda n, junk=junk: junk)
        assert fb.status == "hint", (junk, fb)
