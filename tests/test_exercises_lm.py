"""Tests for the chapter 7 checkers: right answers pass, each recognized mistake gets its hint,
untouched stubs are "not attempted"."""
import math

import pytest
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


# ------------------------------------------------------------------ 7.5 the training step
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
    """Exercises are numbered in the order the chapter sets them: the loss (7.1), the GPT's forward
    pass where the model is introduced (7.2), then the training loop's pieces in the order the loop
    uses them: schedule, groups, step, evaluation (7.3 to 7.6), and the loop itself (7.7)."""
    order = [check.cross_entropy, check.gpt_forward, check.lr_schedule, check.param_groups, check.train_step,
             check.evaluate, check.train_loop]
    assert [c.exercise for c in order] == [f"Exercise 7.{k}" for k in range(1, 8)]
    assert str(check.gpt_forward(gpt_forward_ok)).startswith("✅ Exercise 7.2 passed")
    assert str(check.train_step(train_step_ok)).startswith("✅ Exercise 7.5 passed")
    assert not hasattr(check, "shift") and not hasattr(check, "bits_per_char")  # transcriptions, removed


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




# ------------------------------------------------------------------ 7.3 to 7.7: the loop and its pieces
# Independent references: the schedule written out by hand from its definition (a brute-force loop over
# phases) and nanoGPT's get_lr, groups from each parameter's module type, the evaluation token by token.
def lr_by_hand(step, max_steps, warmup, peak_lr, min_lr):
    if step >= max_steps:
        return min_lr
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    angle = math.pi * (step - warmup) / (max_steps - warmup)
    return min_lr + (peak_lr - min_lr) * (math.cos(angle) + 1) / 2


def test_lr_schedule_against_its_definition_and_torch():
    assert check.lr_schedule(lr_by_hand).passed
    for S, W, peak, floor in ((40, 5, 1e-3, 1e-4), (12, 1, 0.5, 0.05)):
        rates = check._reference_lrs(S + 3, S, W, peak, floor)
        assert rates == pytest.approx([lr_by_hand(s, S, W, peak, floor) for s in range(S + 3)], rel=1e-9, abs=1e-15)
    # the chapter's numbers: a first step that already learns, the floor at the end
    assert lr_by_hand(0, 600, 30, 3e-3, 3e-4) == pytest.approx(1e-4)
    assert check.lr_schedule(stub).status == "not attempted"


def test_lr_schedule_mistakes():
    cases = {
        "first step changes nothing": lambda s, S, W, p, f: p * s / W if s < W else lr_by_hand(s, S, W, p, f),
        "decays to 0": lambda s, S, W, p, f: lr_by_hand(s, S, W, p, 0.0) if s < S else f,
        "climbs back up": lambda s, S, W, p, f: lr_by_hand(min(s, S - 1), S, W, p, f) if s < S else
        f + (p - f) * (math.cos(math.pi * (s - W) / (S - W)) + 1) / 2,
        "should return a number": lambda *a: "0.001",
    }
    for text, fn in cases.items():
        fb = check.lr_schedule(fn)
        assert fb.status == "hint" and text in fb.message, (text, fb)
    for junk in (float("nan"), None, torch.ones(3), 1 + 1j):
        assert check.lr_schedule(lambda *a, junk=junk: junk).status == "hint"


def groups_by_module(model, weight_decay):
    decay, rest = [], []
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if any(p is q for q in decay + rest):
                continue  # the tied matrix, met again through the head
            matrix = isinstance(module, (torch.nn.Linear, torch.nn.Embedding)) and name == "weight"
            (decay if matrix else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def groups_by_shape(model, weight_decay):
    """The rule on dimensions written differently: walk the modules, skip what was met (the tied matrix)."""
    decay, rest = [], []
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if any(p is q for q in decay + rest):
                continue  # the tied matrix, met again through the head
            (decay if len(p.shape) >= 2 else rest).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def test_param_groups():
    assert check.param_groups(groups_by_shape).passed
    # by module type is not the chapter's rule: a Conv1D's 2-D weight or a conv kernel is decayed too
    fb = check.param_groups(groups_by_module)
    assert not fb.passed and "whatever its module" in fb.message, fb
    everything = lambda m, w: [{"params": list(m.parameters()), "weight_decay": w}]
    assert "every parameter is decayed" in check.param_groups(everything).message
    twice = lambda m, w: [{"params": [p for mod in m.modules() for p in mod.parameters(recurse=False)
                                      if p.ndim >= 2], "weight_decay": w},
                          {"params": [p for p in m.parameters() if p.ndim < 2], "weight_decay": 0.0}]
    assert "listed twice" in check.param_groups(twice).message
    assert check.param_groups(stub).status == "not attempted"
    for junk in (None, 3, [None], [{"params": None}], [{"params": [1.0], "weight_decay": 0.1}]):
        assert check.param_groups(lambda m, w, junk=junk: junk).status == "hint", junk


def evaluate_by_token(model, batches):
    was = model.training
    model.eval()
    losses = []
    with torch.no_grad():
        for x, y in batches:
            for b in range(x.shape[0]):
                logp = model(x[b:b + 1])[0][0].log_softmax(-1)  # (T, V), one window at a time
                losses += [-logp[t, y[b, t]].item() for t in range(x.shape[1])]
    model.train(was)
    return sum(losses) / len(losses)


def test_evaluate():
    assert check.evaluate(evaluate_by_token).passed
    def means(model, batches):
        model.eval()
        with torch.no_grad():
            out = [F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten()).item() for x, y in batches]
        model.train()
        return sum(out) / len(out)
    assert "averaged the batches' mean losses" in check.evaluate(means).message
    assert check.evaluate(stub).status == "not attempted"
    for junk in (None, "1.0", torch.ones(2), float("inf")):
        assert check.evaluate(lambda m, b, junk=junk: junk).status == "hint", junk


def loop_by_hand(model, next_batch, val_batches, cfg):
    """The loop with torch's schedulers driving the rate (scheduler.step() after each step)."""
    opt = torch.optim.AdamW(groups_by_module(model, cfg.weight_decay), lr=cfg.learning_rate,
                            betas=(cfg.beta1, cfg.beta2))
    W = int(cfg.warmup)
    sched = torch.optim.lr_scheduler
    ramp = sched.LinearLR(opt, 1 / W, 1.0, W - 1)
    schedule = sched.SequentialLR(opt, [ramp, sched.CosineAnnealingLR(opt, cfg.max_steps - W, cfg.min_lr)], [W])
    losses, evals = [], []
    for step in range(cfg.max_steps):
        x, y = next_batch()
        opt.zero_grad()
        loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        schedule.step()
        losses.append(loss.item())
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, evaluate_by_token(model, val_batches)))
    return losses, evals


def test_train_loop():
    assert check.train_loop(loop_by_hand).passed
    from companion.train import short_run
    fb = check.train_loop(short_run)
    assert not fb.passed and "companion.train" in fb.message, fb
    assert check.train_loop(stub).status == "not attempted"
    for junk in (None, ([], []), ([1.0] * 12, None)):
        assert check.train_loop(lambda *a, junk=junk: junk).status == "hint", junk


def test_companion_versions_agree_with_the_references():
    """companion.train's plain versions (the student version's fallbacks) pass their own checks when
    imported under another name only through the source; here: same values as the references."""
    from companion.train import held_out_loss, param_groups, step_learning_rate
    assert [step_learning_rate(s, 40, 5, 1e-3, 1e-4) for s in range(45)] == pytest.approx(
        [lr_by_hand(s, 40, 5, 1e-3, 1e-4) for s in range(45)], rel=1e-12)
    for _, model in check._group_models():
        ours, theirs = param_groups(model, 0.1), groups_by_shape(model, 0.1)
        for a, b in zip(ours, theirs):
            assert {id(p) for p in a["params"]} == {id(p) for p in b["params"]}
            assert a["weight_decay"] == b["weight_decay"]
    model = check._tiny_gpt(3, dropout=0.3)
    batches = check._eval_batches(3, ((2, 5), (1, 7)))
    assert held_out_loss(model, batches) == pytest.approx(evaluate_by_token(model, batches), rel=1e-5)
    assert model.training


def test_gpt_forward_and_evaluate_catch_what_the_red_team_passed():
    """Issue 33: 7.2 with positions written for one length, 7.6 forcing grad mode on at the end."""
    import torch
    from test_checker_mutations_ch07 import _fixed_positions, my_evaluate, my_gpt_forward

    assert check.gpt_forward(my_gpt_forward).passed
    fb = check.gpt_forward(lambda m, i: _fixed_positions(m, i, 8))
    assert fb.status == "hint" and "(B, T) = (2, 7)" in fb.message and "do not write a length" in fb.message, fb

    def forces_grad_on(model, batches):
        value = my_evaluate(model, batches)
        torch.set_grad_enabled(True)
        return value

    assert check.evaluate(my_evaluate).passed
    fb = check.evaluate(forces_grad_on)
    assert fb.status == "hint" and "switched gradients ON" in fb.message, fb
    assert torch.is_grad_enabled()
