"""Mutation registry of chapter 7 (training a language model): see tests/mutation_harness.py."""
import dataclasses
import inspect
import math
import re
from pathlib import Path

import nbformat
import torch
import torch.nn.functional as F

from companion.exercises import lm as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 7.1 ---------------------------------------------------------------------------------------------
def my_cross_entropy(logits, targets):
    # (B, T, V): log-probabilities over the vocabulary
    logp = torch.log_softmax(logits, dim=-1)
    # (B, T): the log-probability of each target
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return -picked.mean()


def _picked(logits, targets, logp=lambda l: torch.log_softmax(l, -1)):
    return logp(logits).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)


CROSS_ENTROPY = [
    Mutant("sign", lambda l, t: _picked(l, t).mean(), "sign is wrong"),
    Mutant("sum", lambda l, t: -_picked(l, t).sum(), "summed over the positions"),
    Mutant("probability", lambda l, t: -_picked(l, t, lambda l: l.softmax(-1)).mean(), "not its logarithm"),
    Mutant("one minus probability", lambda l, t: 1 - _picked(l, t, lambda l: l.softmax(-1)).mean(), "not its logarithm"),
    Mutant("raw logit", lambda l, t: -_picked(l, t, lambda l: l).mean(), "raw logit"),
    Mutant("softmax over the positions", lambda l, t: -_picked(l, t, lambda l: l.log_softmax(1)).mean(),
           "over the vocabulary"),
    Mutant("bits", lambda l, t: -_picked(l, t).mean() / math.log(2), "in bits"),
    Mutant("every token of the vocabulary", lambda l, t: -torch.log_softmax(l, -1).mean(), "every token of the vocabulary"),
    Mutant("no mean", lambda l, t: -_picked(l, t), "one loss per position"),
    Mutant("mean over time only", lambda l, t: -_picked(l, t).mean(-1), "one dimension only"),
    Mutant("F.cross_entropy", lambda l, t: F.cross_entropy(l.flatten(0, 1), t.flatten()), "calls F.cross_entropy"),
    Mutant("nn.CrossEntropyLoss", lambda l, t: torch.nn.CrossEntropyLoss()(l.flatten(0, 1), t.flatten()),
           "calls F.cross_entropy"),
    Mutant("log of the softmax", lambda l, t: -_picked(l, t, lambda l: l.softmax(-1).log()).mean(), "±1000"),
    Mutant("a Python float", lambda l, t: my_cross_entropy(l, t).item(), "not a Python number"),
    Mutant("returns None", lambda l, t: None, "return a tensor"),
    Mutant("gather without unsqueeze", lambda l, t: -torch.log_softmax(l, -1).gather(-1, t).mean(), "RuntimeError",
           raised=True),
    Mutant("NaN", lambda l, t: my_cross_entropy(l, t) * float("nan")),
]


# --- 7.5 (the training step, between the parameter groups and the evaluation) ------------------------
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()  # clear what the previous step left in .grad
    logits, _ = model(x)  # (B, T, V)
    B, T, V = logits.shape
    # (B*T, V) against (B*T,): the mean of -log p(next token)
    loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))
    loss.backward()  # the gradients, into each parameter's .grad
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()  # update the weights
    return loss.item()


def _step(zero="start", targets="y", backward=True, clip="before", clip_to=None, step=True, steps=1,
          returns="item", reduction="mean", clip_value=False):
    """The reference training step with one mistake, chosen by the arguments."""
    def train_step(model, optimizer, x, y, max_norm):
        if zero == "start":
            optimizer.zero_grad()
        logits, _ = model(x)
        B, T, V = logits.shape
        loss = F.cross_entropy(logits.reshape(B * T, V), (x if targets == "x" else y).reshape(B * T), reduction=reduction)
        if backward:
            loss.backward()
        if zero == "after backward":
            optimizer.zero_grad()

        def clip_():
            if clip_value:
                torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm if clip_to is None else clip_to)

        if clip == "before":
            clip_()
        if step:
            for _ in range(steps):
                optimizer.step()
        if clip == "after":
            clip_()
        if zero == "end":
            optimizer.zero_grad()
        if returns == "tensor":
            return loss
        if returns == "after":
            with torch.no_grad():
                return F.cross_entropy(model(x)[0].reshape(B * T, V), y.reshape(B * T)).item()
        return loss.item()
    return train_step


TRAIN_STEP = [
    Mutant("no zero_grad", _step(zero=None), "gradients accumulate"),
    Mutant("zero_grad at the end", _step(zero="end"), "at the START of the step"),
    Mutant("zero_grad after backward", _step(zero="after backward"), "no gradient reached the update"),
    Mutant("no backward", _step(backward=False), "no gradient reached the update"),
    Mutant("no clipping", _step(clip=None), "were not clipped"),
    Mutant("clipping after the step", _step(clip="after"), "clipped after optimizer.step()"),
    Mutant("clips to 1.0", _step(clip_to=1.0), "not to a fixed 1.0"),
    Mutant("unshifted targets", _step(targets="x"), "unshifted text"),
    Mutant("no step", _step(step=False), "call optimizer.step()"),
    Mutant("two steps", _step(steps=2)),
    Mutant("returns the loss tensor", _step(returns="tensor"), "Python float"),
    Mutant("returns None", lambda *a: (my_train_step(*a), None)[1], "as a float"),
    Mutant("returns the loss after the update", _step(returns="after"), "before the update"),
    Mutant("summed loss", _step(reduction="sum")),
    Mutant("clip_grad_value_", _step(clip_value=True)),
    Mutant("logits not flattened", lambda m, o, x, y, n: F.cross_entropy(m(x)[0], y), "RuntimeError", raised=True),
]


# --- 7.2 (the GPT's forward pass, where the chapter introduces the model) ---------------------------
def my_gpt_forward(model, idx):
    B, T = idx.shape
    # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)  # (B, T, d_model)
    return model.head(model.final_norm(x))  # (B, T, V)


def _forward(pos="arange", start=0, norm=True, causal=True, head_first=False, blocks=lambda bs: bs, scale=1.0,
             returns="logits"):
    def forward(model, idx):
        B, T = idx.shape
        x = model.tok_emb(idx) * scale
        if pos == "arange":
            x = x + model.pos_emb(torch.arange(start, start + T))
        elif pos == "ids":
            x = x + model.pos_emb(idx)
        for block in blocks(list(model.blocks)):
            x = block(x, is_causal=causal)
        logits = model.final_norm(model.head(x)) if head_first else model.head(model.final_norm(x) if norm else x)
        if returns == "probs":
            return logits.softmax(-1)
        if returns == "pair":
            return logits, None
        return logits
    return forward


GPT_FORWARD = [
    Mutant("no position embedding", _forward(pos=None), "position embeddings are missing"),
    Mutant("positions from 1", _forward(start=1), "positions start at 0"),
    Mutant("positions from the ids", _forward(pos="ids"), "not by token id"),
    Mutant("no final norm", _forward(norm=False), "final LayerNorm is missing"),
    Mutant("no causal mask", _forward(causal=False), "is_causal=True"),
    Mutant("head before the norm", _forward(head_first=True), "final norm comes before the head"),
    Mutant("first block only", _forward(blocks=lambda bs: bs[:1]), "every block"),
    Mutant("blocks in reverse", _forward(blocks=lambda bs: bs[::-1]), "in their order"),
    Mutant("no blocks", _forward(blocks=lambda bs: []), "blocks are missing"),
    Mutant("scaled token embeddings", lambda m, i: _forward(scale=math.sqrt(m.config.d_model))(m, i), "do not scale"),
    Mutant("probabilities", _forward(returns="probs"), "probabilities"),
    Mutant("returns (logits, None)", _forward(returns="pair"), "not a tuple"),
    Mutant("calls the model", lambda m, i: m(i)[0], "called the model itself"),
    Mutant("returns None", lambda m, i: None, "return the logits"),
    Mutant("head weight transposed", lambda m, i: my_gpt_forward(m, i) @ torch.eye(16) * 2),
    Mutant("blocks without is_causal keyword", lambda m, i: _blocks_positional(m, i), "TypeError", raised=True),
    # the outside red team's false pass (issue 33): positions written for one length
    Mutant("positions hard-coded to 8", lambda m, i: _fixed_positions(m, i, 8), "(B, T) = (2, 7)"),
    Mutant("positions hard-coded to 7", lambda m, i: _fixed_positions(m, i, 7), "do not write a length"),
    Mutant("a length-1 input skips the blocks", lambda m, i: _forward(blocks=lambda bs: [])(m, i)
           if i.shape[1] == 1 else my_gpt_forward(m, i), "a single position"),
]


def _fixed_positions(model, idx, n):
    """Positions arange(n)[:T] broadcast wrongly, or taken from a table of n rows."""
    pos = model.pos_emb(torch.arange(n))[: idx.shape[1]]  # right only while T <= n ...
    if idx.shape[1] != n:
        pos = model.pos_emb(torch.arange(n)).mean(0)  # ... and written for T == n
    x = model.tok_emb(idx) + pos
    for block in model.blocks:
        x = block(x, is_causal=True)
    return model.head(model.final_norm(x))


def _blocks_positional(model, idx):
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))
    for block in model.blocks:
        x = block(x, None, None, True, None, "extra")  # too many positional arguments
    return model.head(model.final_norm(x))


# --- 7.3 (the learning-rate schedule) ------------------------------------------------------------------
def my_lr(step, max_steps, warmup, peak_lr, min_lr):
    if step < warmup:  # linear warm-up: step 0 already learns
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:  # after the schedule: stay at the floor
        return min_lr
    t = (step - warmup) / (max_steps - warmup)  # 0 -> 1 over the decay
    return min_lr + 0.5 * (1 + math.cos(math.pi * t)) * (peak_lr - min_lr)


def _lr(ramp="right", after="floor", floor=True, clock="warmup", shape="cosine", inclusive=False):
    """The reference schedule with one mistake, chosen by the arguments."""
    def lr(step, S, W, peak, low):
        low_ = low if floor else 0.0
        if step < W or (inclusive and step <= W):
            if step >= W:  # the inclusive mistake: step warmup still on the ramp
                return peak * (step + 1) / W
            return {"right": peak * (step + 1) / W, "zero": peak * step / W, "w+1": peak * (step + 1) / (W + 1),
                    "floor": low + (peak - low) * (step + 1) / W}[ramp]
        if step >= S and after != "cosine":
            return {"floor": low, "zero": 0.0, "peak": peak}[after]
        t = {"warmup": (step - W) / (S - W), "start": step / S, "plus one": (step - W + 1) / (S - W)}[clock]
        if shape == "linear":
            return peak - (peak - low_) * t
        turns = 2 if shape == "full" else 1
        return low_ + 0.5 * (1 + math.cos(turns * math.pi * t)) * (peak - low_)
    return lr


def _no_warmup(step, S, W, peak, low):
    return low + 0.5 * (1 + math.cos(math.pi * min(step, S) / S)) * (peak - low)


LR_SCHEDULE = [
    Mutant("ramp from zero", _lr(ramp="zero"), "first step changes nothing"),
    Mutant("ramp over warmup + 1", _lr(ramp="w+1"), "you divide by warmup + 1"),
    Mutant("ramp from the floor", _lr(ramp="floor"), "not from min_lr"),
    Mutant("warm-up includes step warmup", _lr(inclusive=True), "(step < warmup)"),
    Mutant("no warm-up", _no_warmup, "warm-up is missing"),
    Mutant("decays to zero", _lr(floor=False), "decays to 0"),
    Mutant("cosine clock from step 0", _lr(clock="start"), "clock starts at the end of warm-up"),
    Mutant("cosine one step ahead", _lr(clock="plus one"), "starts at t = 0"),
    Mutant("linear decay", _lr(shape="linear"), "not a straight line"),
    Mutant("a whole cosine", _lr(shape="full"), "not cos(2 pi t)"),
    Mutant("cosine after max_steps", _lr(after="cosine"), "climbs back up"),
    Mutant("zero after max_steps", _lr(after="zero"), "not 0"),
    Mutant("peak after max_steps", _lr(after="peak"), "not at peak_lr"),
    Mutant("cosine in degrees", lambda s, S, W, p, f: my_lr(s, S, W, p, f) if s < W or s >= S else
           f + 0.5 * (1 + math.cos(180 * (s - W) / (S - W))) * (p - f)),
    Mutant("a tensor with two numbers", lambda s, S, W, p, f: torch.tensor([my_lr(s, S, W, p, f)] * 2), "one number"),
    Mutant("returns None", lambda s, S, W, p, f: None, "one number"),
    Mutant("the companion's schedule", lambda s, S, W, p, f: _companion_lr(s, S, W, p, f), "companion.train"),
    # the outside red team's false passes (tests/independent/ch07.py)
    Mutant("floor only until 2 * max_steps", lambda s, S, W, p, f: my_lr(s, S, W, p, f) if s < 2 * S else
           _lr(after="cosine")(s, S, W, p, f), "for good"),
    Mutant("a 0-d tensor", lambda s, S, W, p, f: torch.tensor(my_lr(s, S, W, p, f)), "Python float"),
    Mutant("progress computed first", lambda s, S, W, p, f: (lambda t: my_lr(s, S, W, p, f))((s - W) / (S - W)),
           "ZeroDivisionError", raised=True),
]


def _companion_lr(step, max_steps, warmup, peak_lr, min_lr):
    from companion.train import step_learning_rate
    return step_learning_rate(step, max_steps, warmup, peak_lr, min_lr)


# --- 7.4 (AdamW's parameter groups) --------------------------------------------------------------------
def my_param_groups(model, weight_decay):
    params = list(model.parameters())  # the tied matrix once
    # weight matrices and embedding tables (2-D): decayed
    decay = [p for p in params if p.ndim >= 2]
    # biases and LayerNorm gains (1-D): not decayed
    no_decay = [p for p in params if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def _groups(rule, wd=lambda w: w, params=lambda m: list(m.parameters()), key="weight_decay"):
    def groups(model, weight_decay):
        named = dict((id(p), n) for n, p in model.named_parameters())
        ps = params(model)
        yes = [p for p in ps if rule(named.get(id(p), ""), p)]
        no = [p for p in ps if not rule(named.get(id(p), ""), p)]
        return [{"params": yes, key: wd(weight_decay)}, {"params": no, key: 0.0}]
    return groups


def _every_module_weight(model):
    return [p for m in model.modules() for p in m.parameters(recurse=False)]  # the tied matrix twice


PARAM_GROUPS = [
    Mutant("everything decayed", lambda m, w: [{"params": list(m.parameters()), "weight_decay": w}],
           "every parameter is decayed"),
    Mutant("nothing decayed", _groups(lambda n, p: p.ndim >= 2, wd=lambda w: 0.0), "nothing is decayed"),
    Mutant("ndim > 2", _groups(lambda n, p: p.ndim > 2), "nothing is decayed"),
    Mutant("groups swapped", _groups(lambda n, p: p.ndim < 2), "swapped"),
    Mutant("by the name 'bias'", _groups(lambda n, p: not n.endswith("bias")), "LayerNorm gains are decayed"),
    Mutant("by the name 'norm'", _groups(lambda n, p: "norm" not in n), "biases are decayed"),
    Mutant("embeddings spared", _groups(lambda n, p: p.ndim >= 2 and "emb" not in n and "wte" not in n
                                        and "wpe" not in n), "embedding tables are not decayed"),
    Mutant("tied matrix twice", _groups(lambda n, p: p.ndim >= 2, params=_every_module_weight), "listed twice"),
    Mutant("fixed decay 0.1", _groups(lambda n, p: p.ndim >= 2, wd=lambda w: 0.1), "the weight_decay you are given"),
    Mutant("no weight_decay key", lambda m, w: [{"params": [p for p in m.parameters() if p.ndim >= 2]},
                                                {"params": [p for p in m.parameters() if p.ndim < 2]}],
           "has no 'weight_decay'"),
    Mutant("one group only (matrices)", lambda m, w: [{"params": [p for p in m.parameters() if p.ndim >= 2],
                                                       "weight_decay": w}], "in no group"),
    Mutant("a list of parameters", lambda m, w: list(m.parameters()), "list of parameters"),
    Mutant("a single dict", lambda m, w: {"params": list(m.parameters()), "weight_decay": w}, "not one dict"),
    Mutant("sets of parameters", lambda m, w: [{"params": {p for p in m.parameters() if p.ndim >= 2},
                                                "weight_decay": w},
                                               {"params": {p for p in m.parameters() if p.ndim < 2},
                                                "weight_decay": 0.0}], "a set has no fixed order"),
    Mutant("names instead of tensors", lambda m, w: [{"params": [n for n, p in m.named_parameters() if p.ndim >= 2],
                                                      "weight_decay": w},
                                                     {"params": [n for n, p in m.named_parameters() if p.ndim < 2],
                                                      "weight_decay": 0.0}], "holds parameters (tensors)"),
    Mutant("make_optimizer's groups", lambda m, w: _companion_groups(m, w), "companion"),
    # the outside red team's false passes (tests/independent/ch07.py)
    Mutant("one group per parameter", lambda m, w: [{"params": [p], "weight_decay": w if p.ndim >= 2 else 0.0}
                                                    for p in m.parameters()], "exactly two groups"),
    Mutant("a third group for the embeddings", lambda m, w: _three_groups(m, w), "exactly two groups"),
    Mutant("frozen parameters left out", _groups(lambda n, p: p.ndim >= 2,
                                                 params=lambda m: [p for p in m.parameters() if p.requires_grad]),
           "frozen"),
    Mutant("ndim == 2", _groups(lambda n, p: p.ndim == 2), "not p.ndim == 2"),
    Mutant("ndim != 1", _groups(lambda n, p: p.ndim != 1), "0-d parameter"),
    Mutant("by the names ln, norm, bias", _groups(lambda n, p: not any(k in n for k in ("ln", "norm", "bias")))),
    Mutant("by module type (Linear, Embedding)", lambda m, w: _by_module_type(m, w), "whatever its module"),
]


def _three_groups(model, weight_decay):
    emb = {id(mod.weight) for mod in model.modules() if isinstance(mod, torch.nn.Embedding)}
    ps = list(model.parameters())
    return [{"params": [p for p in ps if p.ndim >= 2 and id(p) not in emb], "weight_decay": weight_decay},
            {"params": [p for p in ps if id(p) in emb], "weight_decay": weight_decay},
            {"params": [p for p in ps if p.ndim < 2], "weight_decay": 0.0}]


def _by_module_type(model, weight_decay):
    decay = {id(mod.weight) for mod in model.modules() if isinstance(mod, (torch.nn.Linear, torch.nn.Embedding))}
    ps = list(model.parameters())
    return [{"params": [p for p in ps if id(p) in decay], "weight_decay": weight_decay},
            {"params": [p for p in ps if id(p) not in decay], "weight_decay": 0.0}]


def _companion_groups(model, weight_decay):
    from companion.train import TrainConfig, make_optimizer
    return make_optimizer(model, TrainConfig(weight_decay=weight_decay)).param_groups


# --- 7.6 (the held-out evaluation) ----------------------------------------------------------------------
def my_evaluate(model, batches):
    was_training = model.training
    model.eval()  # no dropout
    total, count = 0.0, 0
    with torch.no_grad():  # no graph: nothing will call backward()
        for x, y in batches:
            logits, _ = model(x)  # (B, T, V)
            B, T, V = logits.shape
            loss = F.cross_entropy(logits.reshape(B * T, V),
                                   y.reshape(B * T), reduction="sum")
            total += loss.item()  # the summed loss of the B*T tokens
            count += B * T
    model.train(was_training)  # back to the mode it was in
    return total / count  # every token weighs the same


def _forced_grad(model, batches):
    torch.set_grad_enabled(False)
    value = _evaluate(grad=None)(model, batches) if False else my_evaluate(model, batches)
    torch.set_grad_enabled(True)
    return value


def _evaluate(mode="eval", grad=False, restore="was", weigh="tokens", returns="item", only=None):
    """The reference evaluation with one mistake, chosen by the arguments."""
    def evaluate(model, batches):
        was = model.training
        if mode == "eval":
            model.eval()
        sums, means, sizes = [], [], []
        with torch.set_grad_enabled(grad):
            for x, y in (batches if only is None else [batches[only]]):
                logits, _ = model(x)
                loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum")
                sums.append(loss), means.append(loss / y.numel()), sizes.append(y.shape)
        if restore == "was":
            model.train(was)
        elif restore == "train":
            model.train()
        n_tokens = sum(s[0] * s[1] for s in sizes)
        value = {"tokens": lambda: sum(sums) / n_tokens,
                 "batches": lambda: sum(means) / len(means),
                 "windows": lambda: sum(m * s[0] for m, s in zip(means, sizes)) / sum(s[0] for s in sizes),
                 "sum": lambda: sum(sums),
                 "per batch": lambda: sum(sums) / len(sums),
                 "bits": lambda: sum(sums) / n_tokens / math.log(2),
                 "perplexity": lambda: torch.exp(sum(sums) / n_tokens)}[weigh]()
        return value if returns == "tensor" else value.item()
    return evaluate


EVALUATE = [
    Mutant("mean of the batch means", _evaluate(weigh="batches"), "averaged the batches' mean losses"),
    Mutant("batches weighted by windows", _evaluate(weigh="windows"), "number of windows"),
    Mutant("summed, not averaged", _evaluate(weigh="sum"), "divide it by the number of tokens"),
    Mutant("divided by the batches", _evaluate(weigh="per batch"), "not of batches"),
    Mutant("no model.eval()", _evaluate(mode="train"), "call model.eval()"),
    Mutant("gradients on", _evaluate(grad=True), "torch.no_grad()"),
    Mutant("mode not restored", _evaluate(restore=None), "model.train(was_training)"),
    Mutant("always back to training", _evaluate(restore="train"), "model.train(was_training)"),
    Mutant("a tensor", _evaluate(returns="tensor"), "Python float"),
    Mutant("the last batch only", _evaluate(only=-1), "last batch's loss only"),
    Mutant("the first batch only", _evaluate(only=0), "first batch's loss only"),
    Mutant("in bits", _evaluate(weigh="bits"), "in bits"),
    Mutant("perplexity", _evaluate(weigh="perplexity", returns="tensor"), "perplexity"),
    Mutant("never calls the model", lambda m, b: 0.0, "never called the model"),
    Mutant("loss of model(x, y) averaged per batch",
           lambda m, b: _evaluate(weigh="batches")(m, b), "averaged the batches' mean losses"),
    Mutant("held_out_loss", lambda m, b: _companion_eval(m, b), "companion"),
    # the outside red team's false passes (tests/independent/ch07.py), and gradients left off
    Mutant("restores model.training only", lambda m, b: _flag_only(m, b), "model.train(was)"),
    Mutant("forces grad mode on at the end", lambda m, b: (my_evaluate(m, b), torch.set_grad_enabled(True))[0],
           "switched gradients ON"),
    Mutant("torch.set_grad_enabled(False) then True", lambda m, b: _forced_grad(m, b), "switched gradients ON"),
    Mutant("model.zero_grad(set_to_none=True)", lambda m, b: (m.zero_grad(set_to_none=True), my_evaluate(m, b))[1],
           "changed the gradients"),
    Mutant("torch.set_grad_enabled(False) left on", lambda m, b: (torch.set_grad_enabled(False), my_evaluate(m, b))[1],
           "switched off"),
]


def _flag_only(model, batches):
    was = model.training
    value = my_evaluate(model, batches)
    model.eval()
    model.training = was  # one flag: the submodules stay in evaluation mode
    return value


def _companion_eval(model, batches):
    from companion.train import held_out_loss
    return held_out_loss(model, batches)


# --- 7.7 (the loop, from the student's pieces) ----------------------------------------------------------
def my_train(model, next_batch, val_batches, cfg):
    groups = my_param_groups(model, cfg.weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=cfg.learning_rate,
                                  betas=(cfg.beta1, cfg.beta2))
    losses, evals = [], []
    for step in range(cfg.max_steps):
        lr = my_lr(step, cfg.max_steps, cfg.warmup, cfg.learning_rate,
                   cfg.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr  # this step's rate, in both groups
        x, y = next_batch()
        losses.append(my_train_step(model, optimizer, x, y, cfg.grad_clip))
        if (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, my_evaluate(model, val_batches)))
    return losses, evals


def _loop(lr_when="before", lr_shift=0, optimizer="adamw", groups=True, betas="cfg", once=True, batch="each",
          eval_when="after", eval_step="done", steps=0, clip="cfg", train_mode=True, evaluate=None,
          returns="pair"):
    """The reference loop with one mistake, chosen by the arguments."""
    def train(model, next_batch, val_batches, cfg):
        def make():
            params = my_param_groups(model, cfg.weight_decay) if groups else model.parameters()
            kind = torch.optim.AdamW if optimizer == "adamw" else torch.optim.Adam
            b = (cfg.beta1, cfg.beta2) if betas == "cfg" else (0.9, 0.999)
            extra = {} if groups else {"weight_decay": cfg.weight_decay}
            return kind(params, lr=cfg.learning_rate, betas=b, **extra)

        opt = make()
        losses, evals = [], []
        first = next_batch() if batch == "once" else None
        for step in range(cfg.max_steps + steps):
            if not once:
                opt = make()
            lr = my_lr(step + lr_shift, cfg.max_steps, cfg.warmup, cfg.learning_rate, cfg.min_lr)
            if lr_when == "before":
                for g in opt.param_groups:
                    g["lr"] = lr
            x, y = first if first is not None else next_batch()
            losses.append(my_train_step(model, opt, x, y, cfg.grad_clip if clip == "cfg" else 1.0))
            if lr_when == "after":
                for g in opt.param_groups:
                    g["lr"] = lr
            due = (step + 1) % cfg.eval_interval == 0 if eval_when == "after" else step % cfg.eval_interval == 0
            if due and eval_when != "never":
                value = (evaluate or my_evaluate)(model, val_batches)
                evals.append((step + 1 if eval_step == "done" else step, value))
                if not train_mode:
                    model.eval()
        return (losses, evals) if returns == "pair" else losses
    return train


def _leaves_eval_mode(model, batches):
    model.eval()
    with torch.no_grad():
        return sum(F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten(), reduction="sum").item()
                   for x, y in batches) / sum(y.numel() for _, y in batches)


TRAIN_LOOP = [
    Mutant("learning rate never set", _loop(lr_when=None), "stayed at its peak"),
    Mutant("learning rate set after the step", _loop(lr_when="after"), "previous step's learning rate"),
    Mutant("schedule one step ahead", _loop(lr_shift=1), "one step ahead"),
    Mutant("optimizer made at every step", _loop(once=False), "made anew at every step"),
    Mutant("Adam, not AdamW", _loop(optimizer="adam"), "not AdamW's decoupled decay"),
    Mutant("PyTorch's default betas", _loop(betas="default"), "default betas"),
    Mutant("no parameter groups", _loop(groups=False), "every parameter was decayed"),
    Mutant("the same batch every step", _loop(batch="once"), "same batch"),
    Mutant("evaluation at steps 0, 4, 8", _loop(eval_when="before", eval_step="index"), "not at step 0, 4, 8"),
    Mutant("evaluation steps counted from 0", _loop(eval_step="index"), "count the steps done from 1"),
    Mutant("never evaluates", _loop(eval_when="never")),
    Mutant("one step too many", _loop(steps=1), "exactly cfg.max_steps"),
    Mutant("clips to 1.0", _loop(clip=1.0)),
    Mutant("left in evaluation mode", _loop(evaluate=_leaves_eval_mode), "evaluation mode"),
    Mutant("returns the losses only", _loop(returns="losses"), "return the pair"),
    Mutant("the companion's loop", lambda m, nb, vb, cfg: _companion_loop(m, nb, vb, cfg), "companion"),
    # the outside red team's false passes (tests/independent/ch07.py)
    Mutant("floor hard-coded to a tenth of the peak",
           lambda m, nb, vb, cfg: my_train(m, nb, vb, _with(cfg, min_lr=cfg.learning_rate / 10)),
           "not a tenth of the peak"),
    Mutant("weight decay hard-coded to 0.1",
           lambda m, nb, vb, cfg: my_train(m, nb, vb, _with(cfg, weight_decay=0.1)), "not a constant"),
    Mutant("an extra evaluation at the end", lambda m, nb, vb, cfg: _eval_at_end(m, nb, vb, cfg), "no extra evaluation"),
    Mutant("evaluation in training mode", _loop(evaluate=lambda m, b: _evaluate(mode="train")(m, b)), "training mode"),
    Mutant("reseeds the global RNG every step", lambda m, nb, vb, cfg: my_train(m, _reseeding(nb), vb, cfg),
           "reseeds"),
]


def _with(cfg, **changes):
    """cfg with some fields changed (a plain namespace: dataclasses.replace would run companion.train's code)."""
    import types
    return types.SimpleNamespace(**{**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}, **changes})


def _eval_at_end(model, next_batch, val_batches, cfg):
    losses, evals = my_train(model, next_batch, val_batches, cfg)
    if not evals or evals[-1][0] != cfg.max_steps:
        evals.append((cfg.max_steps, my_evaluate(model, val_batches)))
    return losses, evals


def _reseeding(next_batch):
    def batch():
        torch.manual_seed(0)
        return next_batch()
    return batch


def _companion_loop(model, next_batch, val_batches, cfg):
    from companion.train import short_run
    return short_run(model, next_batch, val_batches, cfg)


EXERCISES = [
    Exercise(check.cross_entropy, my_cross_entropy, CROSS_ENTROPY),
    Exercise(check.gpt_forward, my_gpt_forward, GPT_FORWARD),
    Exercise(check.lr_schedule, my_lr, LR_SCHEDULE),
    Exercise(check.param_groups, my_param_groups, PARAM_GROUPS),
    Exercise(check.train_step, my_train_step, TRAIN_STEP),
    Exercise(check.evaluate, my_evaluate, EVALUATE),
    Exercise(check.train_loop, my_train, TRAIN_LOOP),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "07_training_a_language_model.ipynb"


def test_the_references_are_the_chapters_solutions():
    """Each reference above is, character for character, the solution cell of the chapter: the
    mutants are mistakes made on the code the students see."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    solutions = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            name = re.match(r"def (\w+)\(", cell.source).group(1)
            solutions[name] = cell.source.strip()
    assert set(solutions) == {ex.reference.__name__ for ex in EXERCISES}
    for exercise in EXERCISES:
        ref = exercise.reference
        assert inspect.getsource(ref).strip() == solutions[ref.__name__], ref.__name__
