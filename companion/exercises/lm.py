"""Checkers for the exercises of chapter 7 (training a language model)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._core import (StudentError, as_number, checker, close, describe, first_difference, hint, passed,
                    require_graph, require_tensor, safe_float, source_facts)
from .rules import watch

#: Exercises 7.1 and 10.2 ask for the loss by hand; the check compares with this library call
#: (canonical name of rules.canonical: F.cross_entropy, nn.CrossEntropyLoss, any alias).
_LIBRARY_CROSS_ENTROPY = ("cross_entropy",)


def _ce_cases():
    """(logits, targets, what) beyond the first case: shapes, dtypes, rows far apart, one position."""
    g = torch.Generator().manual_seed(71)
    cases = []
    for (B, T, V), dtype in (((1, 1, 2), torch.float32), ((3, 4, 10), torch.float64), ((2, 9, 3), torch.float32)):
        logits = torch.randn(B, T, V, generator=g, dtype=dtype) * 3
        cases.append((logits, torch.randint(V, (B, T), generator=g), f"logits of shape {(B, T, V)} ({dtype})"))
    # two rows thousands apart: subtracting one maximum for the whole tensor sends one row to -inf
    far = torch.tensor([[[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -999.0]]])
    cases.append((far, torch.tensor([[0, 2]]), "two rows of logits near +1000 and -1000"))
    return cases


def _ce_case(seed: int = 7):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(2, 5, 6, generator=g) * 2  # (B, T, V)
    targets = torch.randint(6, (2, 5), generator=g)  # (B, T)
    return logits, targets


@checker("Exercise 7.1")
def cross_entropy(my_cross_entropy) -> None:
    """``my_cross_entropy(logits, targets)``: logits (B, T, V), targets (B, T) -> the mean over all
    B*T positions of -log softmax(logits)[target], a scalar tensor."""
    logits, targets = _ce_case()
    with watch() as seen:
        got = my_cross_entropy(logits.clone(), targets.clone())
    if seen.called(*_LIBRARY_CROSS_ENTROPY):
        hint("your function calls F.cross_entropy, which the check compares with: compute the loss "
             "yourself, -log_softmax(logits)[target] averaged over all positions.")
    expected = F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1))
    if isinstance(got, (float, int)) and not isinstance(got, bool) and close(got, expected):
        hint("return the loss as a tensor (a scalar, so that .backward() works), not a Python number.")
    got = require_tensor(got, "a tensor (a scalar)")
    if got.is_complex() or got.dtype == torch.bool:
        hint(f"return the loss as a real scalar tensor; you returned {describe(got)}.")
    if close(got, expected) or (got.numel() == 1 and close(got.reshape(()), expected)):
        big = torch.tensor([[[1000.0, 0.0, -1000.0]]])
        with watch() as seen:
            value = require_tensor(my_cross_entropy(big, torch.tensor([[2]])), "a tensor (a scalar)")
        if value.is_complex() or value.numel() != 1:
            hint(f"return one number, a scalar tensor; for logits (1, 1, 3) you returned {describe(value)}.")
        if not torch.isfinite(value).all():
            hint("right on ordinary logits, but logits of ±1000 give inf or nan: take the log-softmax with "
                 "torch.log_softmax (or subtract the row maximum) instead of log(softmax(...)).")
        if not close(value.reshape(-1)[:1], torch.tensor([2000.0])):
            hint("right on ordinary logits, but wrong for logits of ±1000: use torch.log_softmax, which "
                 "subtracts the row maximum, for -log p.")
        for case_logits, case_targets, what in _ce_cases():
            with watch() as seen_case:
                value = require_tensor(my_cross_entropy(case_logits.clone(), case_targets.clone()),
                                       "a tensor (a scalar)")
            if seen_case.called(*_LIBRARY_CROSS_ENTROPY):
                seen = seen_case
                break
            right = F.cross_entropy(case_logits.flatten(0, 1), case_targets.flatten())
            if value.is_complex() or value.numel() != 1:
                hint(f"return one number, a scalar tensor; for {what} you returned {describe(value)}.")
            if close(value.reshape(()), right, rtol=1e-4, atol=1e-5):
                continue
            if not torch.isfinite(value).all():
                hint(f"right on one row of ±1000, but for {what} your loss is {float(value.reshape(())):g}: "
                     "subtract each row's own maximum (torch.log_softmax does), not one maximum for the "
                     "whole tensor.")
            hint(f"for {what} the loss should be {float(right):.4f}, yours is {float(value.reshape(())):.4f}.",
                 generic=True)
        if seen.called(*_LIBRARY_CROSS_ENTROPY):
            hint("your function calls F.cross_entropy, which the check compares with: compute the loss "
                 "yourself, -log_softmax(logits)[target] averaged over all positions.")
        require_graph(my_cross_entropy, (logits, targets), grad=(0,))
        passed(f"{float(got.reshape(())):.4f} nats, the same as torch.nn.functional.cross_entropy.")
    if got.numel() == 0:
        hint(f"return one number, the mean over positions (got an empty tensor of shape {tuple(got.shape)}).")
    probs = logits.softmax(-1)
    picked_logp = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # (B, T)
    if got.numel() > 1:
        if close(got, -picked_logp):
            hint("you returned one loss per position (B, T); return their mean, one number.")
        if close(got, -picked_logp.mean(-1)) or close(got, -picked_logp.mean(0)):
            hint("you averaged over one dimension only; take the mean over all B*T positions (both dimensions).")
        hint(f"return one number, the mean over positions (got a tensor of shape {tuple(got.shape)}).")
    mistakes = [
        (-expected, "the sign is wrong: the loss is MINUS the log-probability of the target (a positive number)."),
        (-picked_logp.sum(), "you summed over the positions; take the mean over all B*T positions instead."),
        (-probs.gather(-1, targets[..., None]).mean(), "you used the probability of the target, not its logarithm: "
                                                       "the loss is -log p."),
        (1 - probs.gather(-1, targets[..., None]).mean(), "you used the probability of the target, not its "
                                                          "logarithm: the loss is -log p."),
        (-logits.gather(-1, targets[..., None]).mean(), "you took the raw logit of the target; normalize first: "
                                                        "log_softmax(logits)[target]."),
        (-logits.log_softmax(1).gather(-1, targets[..., None]).mean(), "the softmax must run over the vocabulary "
                                                                       "(the last dimension, V), not over the positions."),
        (expected / math.log(2), "that is the loss in bits (log base 2); the loss is in nats: the natural log."),
        (-logits.log_softmax(-1).mean(), "you averaged the log-probabilities of every token of the vocabulary; "
                                         "pick the target's: log_softmax(logits).gather(-1, targets[..., None])."),
    ]
    for wrong, message in mistakes:
        if close(got.reshape(()), wrong):
            hint(message)
    hint(f"expected {float(expected):.4f}, got {float(got.reshape(())):.4f}: the mean over all positions of "
         "-log softmax(logits)[target].", generic=True)


# ---------------------------------------------------- Exercise 7.5 (the training step, between the groups and the evaluation)
def _tiny_gpt(seed: int, **overrides):
    """A small companion GPT with every parameter drawn at random (seeded; the global RNG is untouched)."""
    from companion.model import GPT, GPTConfig

    config = dict(vocab_size=11, context_length=10, d_model=8, n_layers=1, n_heads=2, dropout=0.0)
    config.update(overrides)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(**config))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    p.copy_(1 + 0.3 * torch.randn_like(p))
                else:
                    p.copy_(0.4 * torch.randn_like(p))
    return model


def _loss(model, x, targets) -> torch.Tensor:
    logits, _ = model(x)  # (B, T, V)
    B, T, V = logits.shape
    return F.cross_entropy(logits.reshape(B * T, V), targets.reshape(B * T))


def _train_step_variant(model, optimizer, x, y, max_norm, mistake=None):
    """The right training step (``mistake=None``) and its classic mistakes, for comparison."""
    if mistake not in ("no_zero", "zero_at_end"):
        optimizer.zero_grad()
    loss = _loss(model, x, x if mistake == "targets_x" else y)
    if mistake != "no_backward":
        loss.backward()
    if mistake == "zero_after_backward":
        optimizer.zero_grad()
    if mistake not in ("no_clip", "clip_after"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 if mistake == "clip_fixed" else max_norm)
    if mistake != "no_step":
        optimizer.step()
    if mistake == "clip_after":
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if mistake == "zero_at_end":
        optimizer.zero_grad()
    return loss.item()


def _state(model) -> tuple[torch.Tensor, torch.Tensor]:
    """All parameters and all gradients (0 where None) of a model, each flattened into one vector."""
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten()
                       for p in model.parameters()])
    return params.clone(), grads.clone()


_TRAIN_MISTAKES = {
    "no_zero": "the gradients accumulate: call optimizer.zero_grad() at the start of the step, before "
               "backward(); otherwise the gradients left by earlier steps are added to this step's.",
    "zero_at_end": "zero the gradients at the START of the step (before backward): this step began with "
                   "gradients left over from earlier code, and they were added to yours.",
    "no_clip": "the gradients were not clipped: call torch.nn.utils.clip_grad_norm_(model.parameters(), "
               "max_norm) after backward() and before optimizer.step().",
    "clip_after": "you clipped after optimizer.step(), when the update was already made with the unclipped "
                  "gradients: clip between backward() and step().",
    "clip_fixed": "clip to the max_norm you are given, not to a fixed 1.0.",
    "targets_x": "the targets are y, the next token at every position; you compared the logits with the "
                 "input x itself (the unshifted text).",
    "no_step": "the parameters did not change: call optimizer.step() after clipping.",
    "zero_after_backward": "no gradient reached the update: call loss.backward() before clipping and "
                           "stepping, and optimizer.zero_grad() before backward() (not between backward() "
                           "and step()).",
}
#: Mistakes recognized from the parameters alone (whatever the student leaves in .grad afterwards).
_BY_PARAMETERS = ("no_zero", "targets_x", "clip_fixed")


@checker("Exercise 7.5", companion_given=True)
def train_step(my_train_step) -> None:
    """``my_train_step(model, optimizer, x, y, max_norm) -> float``: one step of training.

    zero_grad, forward, cross-entropy of the logits (B, T, V) against y (B, T), backward,
    clip_grad_norm_(max_norm), step; return the loss (a float). The check runs two steps (the first
    with stale gradients left in the model and a small max_norm that clips, the second with a
    large max_norm that does not) and compares the parameters, gradients and returned losses with
    the right step and with each classic mistake.
    """
    g = torch.Generator().manual_seed(74)
    windows = [torch.randint(11, (3, 7), generator=g) for _ in range(2)]  # (B, T + 1) each
    batches = [(w[:, :-1], w[:, 1:]) for w in windows]
    norms = (0.05, 1e4)  # the first step clips (its gradient norm is far above 0.05), the second does not
    stale = [torch.randn(p.shape, generator=g) * 0.5 for p in _tiny_gpt(7).parameters()]

    with_targets = []

    def run(step, watched=False):
        model = _tiny_gpt(7)
        if watched:
            model.__class__ = _watched(type(model))
            model._course_forward_calls, model._course_targets = 0, with_targets
        for p, s in zip(model.parameters(), stale):
            p.grad = s.clone()  # gradients left over from earlier code
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        states, returned = [_state(model)], []
        for (x, y), max_norm in zip(batches, norms):
            returned.append(step(model, optimizer, x.clone(), y.clone(), max_norm))
            states.append(_state(model))
        return states, returned

    def same(a, b):
        return all(close(pa, pb, rtol=1e-4, atol=1e-6) and close(ga, gb, rtol=1e-4, atol=1e-6)
                   for (pa, ga), (pb, gb) in zip(a, b))

    def same_params(a, b):
        return all(close(pa, pb, rtol=1e-4, atol=1e-6) for (pa, _), (pb, _) in zip(a, b))

    right, right_losses = run(_train_step_variant)
    states, returned = run(my_train_step, watched=True)
    if with_targets:
        hint("call the model on x alone, model(x), as the exercise asks, and compute the loss yourself with "
             "F.cross_entropy on the logits reshaped to (B*T, V) and the targets to (B*T,).")
    if not same_params(states, right):
        wrong = {m: run(lambda *a, m=m: _train_step_variant(*a, mistake=m))[0] for m in _TRAIN_MISTAKES}
        for mistake, message in _TRAIN_MISTAKES.items():
            if same(states, wrong[mistake]):
                hint(message)
        for mistake in _BY_PARAMETERS:
            if same_params(states, wrong[mistake]):
                hint(_TRAIN_MISTAKES[mistake])
        if same_params(states[:2], right[:2]):
            hint("the first step is right but the second is not: each call must do the whole step "
                 "(zero_grad, forward, loss, backward, clip, step) on the batch it is given.", generic=True)
        if close(states[1][0], states[0][0]):
            hint("the parameters did not change: after backward() and clipping, call optimizer.step().")
        hint("after your step the parameters differ from those of zero_grad, forward, loss, backward, "
             f"clip_grad_norm_(max_norm), step: {first_difference(states[1][0], right[1][0], 'parameters')}.",
             generic=True)
    for got, expected in zip(returned, right_losses):
        if isinstance(got, torch.Tensor):
            hint("return the loss as a Python float, loss.item(): a tensor keeps the whole computation "
                 "graph of the step alive (and the training log needs plain numbers).")
        if not isinstance(got, (float, int)) or isinstance(got, bool):
            hint(f"return the loss of the step as a float; you returned {describe(got)}.")
        if not close(got, expected):
            hint(f"the parameters are updated right, but the returned loss {got!r} is not this step's loss "
                 f"{expected:.4f}: return the loss computed on (x, y) before the update.")
    passed("zero_grad, forward, loss, backward, clip, step: the update is exactly the right one, and the "
           "returned loss is a float for the training log.")


# ---------------------------------------------------- Exercise 7.2 (where the chapter introduces the GPT)
def _gpt_forward(model, idx, *, pos="arange", start=0, final_norm=True, causal=True, head_first=False,
                 blocks=None, scale_tokens=False, norm_first=False):
    """The GPT's forward pass from its parts, and its classic mistakes (selected by the flags)."""
    B, T = idx.shape
    x = model.tok_emb(idx)  # (B, T, d_model)
    if scale_tokens:
        x = x * math.sqrt(model.config.d_model)
    if pos == "arange":
        x = x + model.pos_emb(torch.arange(start, start + T))  # (B, T, d) + (T, d)
    elif pos == "ids":
        x = x + model.pos_emb(idx)
    if norm_first:
        x = model.final_norm(x)
    for block in (model.blocks if blocks is None else blocks):
        x = block(x, is_causal=causal)
    if head_first:
        return model.final_norm(model.head(x))
    if final_norm and not norm_first:
        x = model.final_norm(x)
    return model.head(x)  # (B, T, V)


def _watched(cls):
    """A subclass of the model's class whose forward counts its calls (model(idx) reaches it too)."""

    class Watched(cls):
        def forward(self, *args, **kwargs):
            self._course_forward_calls += 1
            targets = kwargs.get("targets", args[1] if len(args) > 1 else None)
            if targets is not None and hasattr(self, "_course_targets"):
                self._course_targets.append(True)  # model(x, y): the loss computed by the model
            return super().forward(*args, **kwargs)

    Watched.__name__ = Watched.__qualname__ = cls.__name__
    return Watched


def _names_forward(facts) -> bool:
    """The source calls the model's forward by name: model.forward, GPT.forward, type(model).forward."""
    chains = [c for c in facts.chains if c.endswith(".forward") or c.endswith(".__call__")]
    rooted_elsewhere = [c for c in chains if c.split(".")[0] not in ("model", "GPT", "self", "m", "gpt", "net")]
    return bool(set(chains) - set(rooted_elsewhere)) or (
        ("forward" in facts.attributes or "__call__" in facts.attributes) and not chains)


@checker("Exercise 7.2", companion_given=True)
def gpt_forward(my_gpt_forward) -> None:
    """``my_gpt_forward(model, idx)``: logits (B, T, V) from the GPT's parts, equal to ``model(idx)[0]``.

    The parts: ``model.tok_emb``, ``model.pos_emb`` (positions 0..T-1), every block of
    ``model.blocks`` with ``is_causal=True``, ``model.final_norm``, ``model.head``.
    """
    # vocab_size == d_model, so that even "head before the final norm" runs and can be recognized;
    # context_length >= vocab_size, so that even "positions looked up by token id" runs.
    model = _tiny_gpt(75, vocab_size=16, context_length=16, d_model=16, n_layers=2, n_heads=2).eval()
    g = torch.Generator().manual_seed(75)
    # lengths 7 (odd), 1, 8 (even), 16 (the full context) and 5, batches of one among them: a length
    # written into the code (positions arange(8), a mask of fixed size) fails on the others, and the
    # hint names the length it failed on
    cases = [(2, 7), (1, 1), (3, 8), (2, 16), (1, 5)]
    cases = [(B, T, torch.randint(16, (B, T), generator=g)) for B, T in cases]
    with torch.no_grad():
        expected_all = [model(idx)[0] for _, _, idx in cases]
    model.__class__ = _watched(type(model))  # model(idx) and type(model).forward(...) leave a mark
    model._course_forward_calls = 0
    results = []
    for (B, T, idx), expected in zip(cases, expected_all):
        try:
            with torch.no_grad():
                got = my_gpt_forward(model, idx.clone())
        except StudentError as exc:
            if not results or not isinstance(exc.error, NotImplementedError):
                raise
            hint(f"on ids of shape (B, T) = ({B}, {T}), your code raised NotImplementedError, although it "
                 "answered the lengths before: a branch of it is not written yet.")
        if model._course_forward_calls or _names_forward(source_facts(my_gpt_forward)):
            hint("you called the model itself, model(idx), which the check compares with: build the forward "
                 "pass from its parts (tok_emb, pos_emb, blocks, final_norm, head).")
        if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor) and close(got[0], expected):
            hint("return only the logits (B, T, V), not a tuple.")
        got = require_tensor(got, "the logits, a tensor of shape (B, T, V)")
        results.append((got, close(got, expected, rtol=1e-4, atol=1e-5)))
        if not results[-1][1]:
            break
    right_at = [case[:2] for case, (_, ok) in zip(cases, results) if ok]
    if not results[-1][1]:  # which later lengths are right (quietly: an error there is not the point)
        for (B, T, idx), expected in list(zip(cases, expected_all))[len(results):]:
            try:
                with torch.no_grad():
                    later = my_gpt_forward(model, idx.clone())
                if isinstance(later, torch.Tensor) and close(later, expected, rtol=1e-4, atol=1e-5):
                    right_at.append((B, T))
            except Exception:  # noqa: BLE001 - the student's code on a length it does not handle
                pass
    for (B, T, idx), expected, (got, ok) in zip(cases, expected_all, results):
        if ok:
            continue
        where = f"on ids of shape (B, T) = ({B}, {T})" + (" (a single position)" if T == 1 else "")
        if right_at:
            where += (f", although it is right for (B, T) = {right_at[0]} (do not write a length or a batch "
                      "size into the code)")
        if close(got, expected.softmax(-1), rtol=1e-4, atol=1e-5):
            hint("you returned probabilities; return the logits (no softmax): the loss and the sampler apply it.")
        if tuple(got.shape) != tuple(expected.shape):
            hint(f"{where}, the logits should have shape (B, T, V) = {tuple(expected.shape)}, got "
                 f"{tuple(got.shape)}.", generic=True)
        blocks = list(model.blocks)
        mistakes = [
            (dict(pos=None), "the position embeddings are missing: x = tok_emb(idx) + pos_emb(positions), "
                             "positions = torch.arange(T)."),
            (dict(start=1), "positions start at 0: pos_emb(torch.arange(T)), not arange(1, T + 1)."),
            (dict(pos="ids"), "the position embedding is looked up by position (0, 1, ..., T - 1), not by "
                              "token id."),
            (dict(final_norm=False), "the final LayerNorm is missing: apply model.final_norm after the last "
                                     "block, before the head."),
            (dict(causal=False), "call every block with is_causal=True: without the causal mask each position "
                                 "sees the tokens after it."),
            (dict(head_first=True), "the final norm comes before the head: head(final_norm(x)), not "
                                    "final_norm(head(x))."),
            (dict(norm_first=True), "the final norm comes after the last block, not before the first."),
            (dict(blocks=blocks[:1]), "run the input through every block of model.blocks, in order."),
            (dict(blocks=blocks[-1:]), "run the input through every block of model.blocks, in order."),
            (dict(blocks=blocks[::-1]), "run the blocks in their order, model.blocks[0] first."),
            (dict(blocks=[]), "the transformer blocks are missing: x = block(x, is_causal=True) for each block "
                              "of model.blocks."),
            (dict(scale_tokens=True), "the GPT adds the embeddings as they are; do not scale the token "
                                      "embeddings by sqrt(d_model)."),
        ]
        with torch.no_grad():
            for flags, message in mistakes:
                try:
                    wrong = _gpt_forward(model, idx, **flags)
                except (IndexError, RuntimeError):  # e.g. positions 1..T beyond the table
                    continue
                if close(got, wrong, rtol=1e-4, atol=1e-5):
                    hint(f"{where}: {message}")
        hint(f"{where}, the logits differ from model(idx)[0]: {first_difference(got, expected, 'logits')}.",
             generic=not right_at)
    B, T, idx = cases[0]
    require_graph(my_gpt_forward, (model, idx), grad=())
    passed("token + position embeddings, the causal blocks in order, the final norm, the head: the "
           "GPT's forward pass, equal to model(idx) for every length tried (1, 5, 7, 8 and 16).")


# ---------------------------------------------------- Exercises 7.3 to 7.7: the pieces of a training loop, then the loop
def _refuse_companion(seen) -> None:
    """A hint when the student's function called companion.train (``seen``: a rules.watch of its
    calls), however it reached it: the exercises ask for the companion's own versions of 7.3 to 7.7."""
    if seen.used_module("companion.train"):
        hint("your code calls companion.train, the course's own implementation: the exercise is to write it "
             "yourself.")


def _reference_lrs(n: int, max_steps: int, warmup: int, peak: float, floor: float) -> list[float]:
    """The rates of steps 0..n-1 from PyTorch's own schedulers: LinearLR (the ramp (step + 1) /
    warmup) then CosineAnnealingLR (half a cosine over max_steps - warmup steps), chained by
    SequentialLR; after max_steps, where the cosine would climb again, the floor."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=peak)
    sched = torch.optim.lr_scheduler
    # a one-step warm-up is the peak itself (LinearLR needs total_iters >= 1)
    ramp = (sched.LinearLR(opt, start_factor=1 / warmup, end_factor=1.0, total_iters=warmup - 1) if warmup > 1
             else sched.LambdaLR(opt, lambda _: 1.0))
    schedule = sched.SequentialLR(opt, [ramp, sched.CosineAnnealingLR(opt, max_steps - warmup, floor)],
                                  milestones=[warmup])
    rates = []
    for step in range(n):
        rates.append(opt.param_groups[0]["lr"] if step < max_steps else floor)
        opt.step()
        schedule.step()
    return rates


#: (max_steps, warmup, peak_lr, min_lr): the chapter's demonstration, a short run, a one-step warm-up
_LR_CASES = ((40, 5, 1e-3, 1e-4), (600, 30, 3e-3, 3e-4), (12, 1, 0.5, 0.05), (10, 4, 2.0, 0.0))


def _lr_variant(step, S, W, peak, floor, mistake):
    """The schedule with one classic mistake (for naming it)."""
    cos = lambda t: floor + 0.5 * (1 + math.cos(math.pi * t)) * (peak - floor)
    if mistake == "no_warmup":
        return cos(min(step, S) / S)
    if step < W or (mistake == "warmup_inclusive" and step <= W):
        if mistake == "ramp_from_zero":
            return peak * step / W
        if mistake == "ramp_w_plus_1":
            return peak * (step + 1) / (W + 1)
        if mistake == "ramp_from_floor":
            return floor + (peak - floor) * (step + 1) / W
        return peak * (step + 1) / W
    if step >= S and mistake not in ("after_cosine", "after_zero", "after_peak"):
        return floor
    if step >= S and mistake == "after_zero":
        return 0.0
    if step >= S and mistake == "after_peak":
        return peak
    t = (step - W) / (S - W)
    if mistake == "to_zero":
        return 0.5 * (1 + math.cos(math.pi * t)) * peak
    if mistake == "cosine_from_0":
        return cos(step / S)
    if mistake == "linear":
        return peak - (peak - floor) * t
    if mistake == "full_cosine":
        return floor + 0.5 * (1 + math.cos(2 * math.pi * t)) * (peak - floor)
    if mistake == "off_by_one_decay":
        return cos((step - W + 1) / (S - W))
    return cos(t)


_LR_MISTAKES = {
    "ramp_from_zero": "step 0 gets a learning rate of 0, so the first step changes nothing: the ramp is "
                      "peak_lr * (step + 1) / warmup, which reaches peak_lr at step warmup - 1.",
    "ramp_w_plus_1": "the ramp is peak_lr * (step + 1) / warmup, so that it reaches peak_lr at step warmup - 1 "
                     "(you divide by warmup + 1).",
    "ramp_from_floor": "the warm-up climbs from 0 (peak_lr * (step + 1) / warmup), not from min_lr.",
    "warmup_inclusive": "the warm-up is the steps 0 to warmup - 1 (step < warmup); at step warmup the cosine "
                        "starts, at peak_lr.",
    "no_warmup": "the warm-up is missing: for step < warmup the rate climbs linearly, peak_lr * (step + 1) / "
                 "warmup.",
    "to_zero": "the cosine decays to 0; it should end at the floor min_lr: min_lr + (peak_lr - min_lr) * "
               "(1 + cos(pi t)) / 2.",
    "cosine_from_0": "the cosine's clock starts at the end of warm-up: t = (step - warmup) / (max_steps - "
                     "warmup), 0 at step warmup and 1 at max_steps.",
    "off_by_one_decay": "at step warmup the cosine starts at t = 0 (the peak): t = (step - warmup) / "
                        "(max_steps - warmup).",
    "linear": "after the warm-up the rate follows half a cosine, not a straight line: min_lr + (peak_lr - "
              "min_lr) * (1 + cos(pi t)) / 2.",
    "full_cosine": "half a cosine, from the peak down to the floor: cos(pi t) with t from 0 to 1, not cos(2 pi t).",
    "after_cosine": "after max_steps the cosine climbs back up; the schedule stays at min_lr from step max_steps on.",
    "after_zero": "after max_steps the rate stays at the floor, min_lr, not 0.",
    "after_peak": "after max_steps the rate stays at the floor, min_lr, not at peak_lr.",
}


def _lr_number(value, step, S, W, peak, floor) -> float:
    """my_lr's value as a float: a Python float (or int); a tensor, NumPy number or bool gets a hint."""
    call = f"my_lr({step}, {S}, {W}, {peak:g}, {floor:g})"
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
        hint(f"return the learning rate as a Python float, as the exercise asks; {call} returned "
             f"{describe(value)}. Compute it with math.cos (not torch.cos), or convert with float(...).")
    number = as_number(value, call)  # None, a string, a list, several numbers...: their own hint
    if isinstance(value, bool) or not isinstance(value, (float, int)):
        hint(f"return the learning rate as a Python float; {call} returned {describe(value)}.")
    return number


@checker("Exercise 7.3")
def lr_schedule(my_lr) -> None:
    """``my_lr(step, max_steps, warmup, peak_lr, min_lr) -> float``: linear warm-up from
    ``peak_lr / warmup`` at step 0 to ``peak_lr`` at step ``warmup - 1``, then half a cosine from
    ``peak_lr`` at step ``warmup`` to ``min_lr`` at step ``max_steps``, and ``min_lr`` after it.
    Compared with PyTorch's LinearLR + CosineAnnealingLR (SequentialLR) on four schedules."""
    for S, W, peak, floor in _LR_CASES:
        n = S + 5
        got = []
        for step in range(n):
            value = my_lr(step, S, W, peak, floor)
            got.append(_lr_number(value, step, S, W, peak, floor))
        right = _reference_lrs(n, S, W, peak, floor)
        if close(got, right, rtol=1e-6, atol=1e-12):
            # long after max_steps: the floor for good (a cosine carried on, or clamped for a while, climbs back)
            late = [2 * S, 2 * S + 1, 3 * S, 3 * S + W, 10 * S, 10 * S + 1]
            for step in late:
                value = _lr_number(my_lr(step, S, W, peak, floor), step, S, W, peak, floor)
                if not close(value, floor, rtol=1e-6, atol=1e-12):
                    hint(f"after max_steps the rate stays at the floor for good: my_lr({step}, max_steps={S}, "
                         f"warmup={W}, peak_lr={peak:g}, min_lr={floor:g}) returned {value:.6g}, expected the "
                         f"floor {floor:g} (every step >= max_steps).")
            continue
        for mistake, message in _LR_MISTAKES.items():
            wrong = [_lr_variant(s, S, W, peak, floor, mistake) for s in range(n)]
            if close(got[:S + 2], wrong[:S + 2], rtol=1e-6, atol=1e-12) and not close(wrong, right, rtol=1e-6,
                                                                                         atol=1e-12):
                hint(message)
        if close(got[:S], right[:S], rtol=1e-6, atol=1e-12):
            hint(f"right up to step max_steps - 1 = {S - 1}, but from step max_steps on the rate is "
                 f"{got[S]:.3g} instead of the floor min_lr = {floor:g}.")
        step = next(s for s in range(n) if not close(got[s], right[s], rtol=1e-6, atol=1e-12))
        phase = "warm-up" if step < W else "cosine decay" if step < S else "after max_steps"
        hint(f"my_lr({step}, max_steps={S}, warmup={W}, peak_lr={peak:g}, min_lr={floor:g}) returned "
             f"{got[step]:.6g}, expected {right[step]:.6g} (in the {phase}).", generic=True)
    # max_steps == warmup: no cosine at all; the formula gives the ramp up to the peak, then the floor
    for S, W, peak, floor in ((6, 6, 0.3, 0.03), (1, 1, 1.0, 0.1)):
        for step in range(S + 4):
            right = peak * (step + 1) / W if step < W else floor
            value = _lr_number(my_lr(step, S, W, peak, floor), step, S, W, peak, floor)
            if not close(value, right, rtol=1e-6, atol=1e-12):
                hint(f"with max_steps == warmup (no cosine at all) the formula still holds: the ramp, then the "
                     f"floor from step max_steps on. my_lr({step}, max_steps={S}, warmup={W}, peak_lr={peak:g}, "
                     f"min_lr={floor:g}) returned {value:.6g}, expected {right:.6g}.")
    passed("equal to PyTorch's LinearLR then CosineAnnealingLR: step 0 already learns (peak_lr / warmup), "
           "the peak at steps warmup - 1 and warmup, the floor from max_steps on (for good), and "
           "max_steps == warmup.")


# ---------------------------------------------------- Exercise 7.4: AdamW's parameter groups
class _HFNamedLM(torch.nn.Module):
    """A small language model with GPT-2's names (wte, wpe, ln_1, c_attn, ln_f, lm_head), a tied head
    and a bias-free projection: a rule on names written for the companion's GPT does not carry over."""

    def __init__(self):
        super().__init__()
        self.wte = torch.nn.Embedding(13, 6)
        self.wpe = torch.nn.Embedding(9, 6)
        self.ln_1 = torch.nn.LayerNorm(6)
        self.c_attn = torch.nn.Linear(6, 18)
        self.c_proj = torch.nn.Linear(6, 6, bias=False)
        self.ln_f = torch.nn.LayerNorm(6, bias=False)
        self.lm_head = torch.nn.Linear(6, 13, bias=False)
        self.lm_head.weight = self.wte.weight  # tied


class _Conv1D(torch.nn.Module):
    """GPT-2's Conv1D: a linear layer stored as (in, out), neither nn.Linear nor nn.Embedding."""

    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_in, n_out) * 0.02)
        self.bias = torch.nn.Parameter(torch.zeros(n_out))


class _Gate(torch.nn.Module):
    """A custom module whose names do not tell the kind: a 1-D "weight" (no norm), a 2-D "scale_bias",
    a 0-d gain "alpha", and a 3-D "mix" tensor."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(6))
        self.scale_bias = torch.nn.Parameter(torch.randn(6, 6) * 0.1)
        self.alpha = torch.nn.Parameter(torch.tensor(1.0))
        self.mix = torch.nn.Parameter(torch.randn(2, 3, 6) * 0.1)


class _OddLM(torch.nn.Module):
    """Parameters whose names and module types do not reveal their number of dimensions: a Conv1D
    (2-D weight, not nn.Linear), a 4-D conv kernel, a 3-D tensor, a 0-d gain, a 1-D "weight" outside
    any norm, a 2-D "scale_bias", and a frozen matrix (requires_grad=False) and frozen bias."""

    def __init__(self):
        super().__init__()
        self.tokens = torch.nn.Embedding(13, 6)
        self.c_fc = _Conv1D(6, 12)
        self.conv = torch.nn.Conv2d(2, 3, kernel_size=3)
        self.gate = _Gate()
        self.frozen = torch.nn.Linear(6, 6)
        self.frozen.requires_grad_(False)
        self.norm = torch.nn.LayerNorm(6)


def _expected_decay(model) -> dict[int, bool]:
    """id(parameter) -> decayed?, by the chapter's rule: every parameter with two or more dimensions
    (weight matrices, embedding tables, conv kernels, whatever their module or name) is decayed; the
    others (1-D biases and norm gains, 0-d scalars) are not."""
    return {id(p): p.ndim >= 2 for p in model.parameters()}


def _group_models():
    from companion.model import GPT, GPTConfig

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(76)
        models = [("the companion's GPT (2 layers, with biases)", GPT(GPTConfig(vocab_size=11, context_length=10,
                                                                              d_model=8, n_layers=2, n_heads=2))),
                  ("a GPT without biases (bias=False)", GPT(GPTConfig(vocab_size=11, context_length=10, d_model=8,
                                                                     n_layers=1, n_heads=2, bias=False))),
                  ("a model with GPT-2's names (wte, ln_1, c_attn, ln_f, lm_head tied to wte)", _HFNamedLM()),
                  ("a model of odd parameters (a Conv1D, a 4-D conv kernel, a 3-D tensor, a 0-d gain, a 1-D "
                   "'weight' outside any norm, a 2-D 'scale_bias', a frozen Linear)", _OddLM())]
        return models


def _param_ids(model: torch.nn.Module):
    """``resolve(tensor)``: the id of the model's parameter that ``tensor`` is (the same object; the
    grader sends a parameter back as a reference to its own), or None for any other tensor, a copy
    included."""
    params = {id(p) for p in model.parameters()}
    return lambda t: id(t) if id(t) in params else None


@checker("Exercise 7.4", companion_given=True)
def param_groups(my_param_groups) -> None:
    """``my_param_groups(model, weight_decay) -> [dict, dict]``: AdamW's groups, ``{"params": [...],
    "weight_decay": weight_decay}`` for every parameter with two dimensions or more (the weight
    matrices and the embedding tables, so the tied head) and ``{"params": [...], "weight_decay": 0.0}``
    for the rest (biases, LayerNorm gains). Every parameter of ``model.named_parameters()`` in
    exactly one group. Checked against the module each parameter belongs to, on three models."""
    for what, model in _group_models():
        names = {id(p): n for n, p in model.named_parameters()}
        resolve = _param_ids(model)
        expected = _expected_decay(model)
        with watch() as seen:
            groups = my_param_groups(model, 0.07)
        _refuse_companion(seen)
        if isinstance(groups, dict):
            hint("return a LIST of groups (two dicts), not one dict.")
        if isinstance(groups, torch.Tensor) or not isinstance(groups, (list, tuple)):
            hint(f"return a list of two dicts, {{'params': [...], 'weight_decay': ...}}; you returned "
                 f"{describe(groups)}.")
        groups = list(groups)
        if groups and all(isinstance(g, torch.Tensor) for g in groups):
            hint("you returned a list of parameters; return two groups, dicts {'params': [...], "
                 "'weight_decay': ...}, one decayed and one not.")
        seen_ids: dict[int, float] = {}
        for k, group in enumerate(groups):
            if not isinstance(group, dict) or "params" not in group:
                hint(f"each group is a dict with the keys 'params' and 'weight_decay'; group {k} is "
                     f"{describe(group)}.")
            if "weight_decay" not in group:
                hint(f"group {k} has no 'weight_decay': AdamW would use its default (0.01) for it. Give each "
                     "group its own: weight_decay for the matrices, 0.0 for the rest.")
            params = group["params"]
            if isinstance(params, (set, frozenset)):
                hint("keep the parameters of a group in a list (a set has no fixed order: AdamW refuses it).")
            params = [params] if isinstance(params, torch.Tensor) else list(params)
            group["params"] = params  # a generator is consumed once: keep the list for AdamW below
            decay = safe_float(group["weight_decay"])
            if decay is None:
                hint(f"the 'weight_decay' of group {k} should be a number; it is {describe(group['weight_decay'])}.")
            for p in params:
                if not isinstance(p, torch.Tensor):
                    hint(f"a group's 'params' holds parameters (tensors); group {k} holds {describe(p)}.")
                pid = resolve(p)
                if pid is None:
                    hint(f"group {k} holds a tensor that is not a parameter of the model ({describe(p)}): take "
                         "the parameters from model.named_parameters() (or model.parameters()).")
                if pid in seen_ids:
                    tied = pid in {id(getattr(getattr(model, m, None), "weight", None)) for m in ("tok_emb", "wte")}
                    if tied:
                        hint("the tied matrix (the token embedding, which is also the head's weight) is listed "
                             "twice: it is ONE parameter and must be in one group once. model.parameters() and "
                             "model.named_parameters() list it once; walking the modules finds it twice.")
                    hint(f"{names[pid]} is listed twice: every parameter belongs to exactly one group.")
                seen_ids[pid] = decay
        missing = [n for i, n in names.items() if i not in seen_ids]
        frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
        if missing and set(missing) <= set(frozen):
            hint(f"for {what}, the frozen parameters (requires_grad=False) are in no group, such as "
                 f"{missing[0]}: the exercise asks for EVERY parameter of model.named_parameters(), frozen "
                 "or not; do not filter on requires_grad (AdamW skips a parameter without a gradient).")
        if missing:
            hint(f"for {what}, {len(missing)} parameters are in no group, such as {missing[0]}: AdamW would "
                 "never update them. Every parameter of model.named_parameters() goes in one group.")
        decayed = {i for i, d in seen_ids.items() if d and d > 0}
        want = {i for i, m in expected.items() if m}
        if decayed != want or any(d not in (0.0, 0.07) for d in seen_ids.values()):
            values = {d for d in seen_ids.values()}
            one_d = {i for i, n in names.items() if not expected[i]}
            norms = {id(p) for m in model.modules() if isinstance(m, torch.nn.LayerNorm)
                     for p in m.parameters(recurse=False) if p.ndim == 1}
            embeddings = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
            params_by_id = {id(p): p for p in model.parameters()}
            if values - {0.0, 0.07, None}:
                hint(f"the decayed group's weight_decay should be the weight_decay you are given (0.07 in "
                     f"this check); yours are {sorted(values)}.")
            if not decayed:
                hint("nothing is decayed: the weight matrices and embedding tables (every parameter with two "
                     "or more dimensions) get weight_decay.")
            if decayed == set(names):
                hint("every parameter is decayed: biases and LayerNorm gains (the 1-D parameters) go in a "
                     "second group with weight_decay 0.0.")
            if decayed == one_d:
                hint("the groups are swapped: the matrices (p.ndim >= 2) get weight_decay, the biases and "
                     "norm gains 0.0.")
            if want - decayed and (want - decayed) <= embeddings:
                hint("the embedding tables are not decayed. Some codebases spare them; this chapter (like "
                     "nanoGPT) decays every parameter with two or more dimensions, the embeddings too, and "
                     "so the tied head: sort by p.ndim.")
            if want - decayed and all(params_by_id[i].ndim > 2 for i in want - decayed) and not decayed - want:
                hint(f"for {what}, a parameter with more than two dimensions (a conv kernel) is not decayed: "
                     "the rule is p.ndim >= 2 (two dimensions OR MORE), not p.ndim == 2.")
            spared = sorted(names[i] for i in want - decayed if i not in embeddings)
            if spared and decayed and not decayed - want:
                hint(f"for {what}, {spared[0]} ({params_by_id[[i for i, n in names.items() if n == spared[0]][0]].ndim}"
                     "-D) is not decayed: every parameter with two or more dimensions is, whatever its module "
                     "(not only nn.Linear and nn.Embedding) or its name. Sort by p.ndim >= 2.")
            if any(params_by_id[i].ndim == 0 for i in decayed - want) and not want - decayed:
                hint(f"for {what}, a 0-d parameter (a scalar gain) is decayed: only parameters with two or "
                     "more dimensions are; the others (1-D and 0-d) go in the group without decay. Sort by "
                     "p.ndim >= 2, not p.ndim != 1.")
            if decayed & norms and not decayed & (one_d - norms):
                hint("the LayerNorm gains are decayed: they are 1-D, like the biases, and go in the group "
                     "without decay (a gain pulled towards 0 shrinks the signal). Sort by p.ndim, not by "
                     "the name 'bias'.")
            extra = sorted(names[i] for i in decayed - want)
            if decayed & (one_d - norms) and not decayed & norms and all(n.endswith("bias") for n in extra):
                hint("the biases are decayed: every 1-D parameter (biases and norm gains) goes in the group "
                     "without decay. Sort by p.ndim, not by name.")
            if extra and not want - decayed:
                hint(f"for {what}, {extra[0]} "
                     f"({params_by_id[[i for i, n in names.items() if n == extra[0]][0]].ndim}-D) is decayed, "
                     "although it has fewer than two dimensions: whatever its name or module, only parameters "
                     "with two or more dimensions are decayed. Sort by p.ndim >= 2.")
            wrong = sorted(names[i] for i in set(names) if (i in decayed) != (i in want))
            hint(f"for {what}, {wrong[0]} (a {params_by_id[[i for i, n in names.items() if n == wrong[0]][0]].ndim}"
                 f"-D parameter) is in the wrong group: decay every parameter with two or more "
                 "dimensions, none with one.", generic=True)
        if len(groups) != 2:
            hint(f"return exactly two groups, as the exercise asks: one with every parameter of two or more "
                 f"dimensions (weight_decay), one with the others (0.0); you returned {len(groups)} groups.")
        decays = sorted(safe_float(g["weight_decay"]) for g in groups)
        if decays != [0.0, 0.07]:
            hint(f"one group has weight_decay = the weight_decay you are given (0.07 here), the other 0.0; "
                 f"yours are {decays}.")
        try:
            torch.optim.AdamW(groups, lr=1e-3)
        except (TypeError, ValueError) as exc:
            hint(f"torch.optim.AdamW refuses your groups: {exc}")
    passed("the weight matrices and embedding tables (the tied head with them, once) decayed; biases and "
           "LayerNorm gains not; every parameter in exactly one group.")


# ---------------------------------------------------- Exercise 7.6: the held-out evaluation
def _recording(cls):
    """A subclass whose forward records (training mode, gradients on) at every call."""

    class Recording(cls):
        def forward(self, *args, **kwargs):
            # a str, which the grader copies back from the student's kernel (a list it would not)
            self._course_calls += ("T" if self.training else "E") + ("G" if torch.is_grad_enabled() else "N")
            return super().forward(*args, **kwargs)

    Recording.__name__ = Recording.__qualname__ = cls.__name__
    return Recording


def _calls_of(model) -> list[tuple[bool, bool]]:
    """The recorded forward calls: (training mode, gradients on) for each."""
    record = model._course_calls
    return [(record[i] == "T", record[i + 1] == "G") for i in range(0, len(record) - 1, 2)]


def _eval_batches(seed: int, shapes, vocab: int = 11):
    g = torch.Generator().manual_seed(seed)
    out = []
    for B, T in shapes:
        w = torch.randint(vocab, (B, T + 1), generator=g)
        out.append((w[:, :-1], w[:, 1:]))
    return out


def _token_losses(model, batches) -> list[torch.Tensor]:
    """The loss of every token of every batch, -log_softmax(logits)[target], in evaluation mode."""
    was = model.training
    model.eval()
    with torch.no_grad():
        out = [-model(x)[0].log_softmax(-1).gather(-1, y[..., None])[..., 0] for x, y in batches]  # (B, T) each
    model.train(was)
    return out


@checker("Exercise 7.6", companion_given=True)
def evaluate(my_evaluate) -> None:
    """``my_evaluate(model, batches) -> float``: the mean loss per token over a list of ``(x, y)``
    batches of different sizes (every token weighs the same), under ``torch.no_grad()`` with the
    model in evaluation mode, leaving the model in the mode it was in."""
    shapes = ((4, 6), (1, 9), (2, 3))  # unequal sizes: the mean of the batch means is not the answer
    batches = _eval_batches(77, shapes)
    model = _tiny_gpt(77, dropout=0.5)
    tokens = _token_losses(model, batches)
    right = float(torch.cat([t.flatten() for t in tokens]).mean())
    # the caller's grad mode both ways: a function that forces it on (or off) at the end is caught
    for start_training, caller_grad in ((True, True), (False, True), (True, False)):
        model = _tiny_gpt(77, dropout=0.5)
        model.train(start_training)
        model.__class__ = _recording(type(model))
        model._course_calls = ""
        given = [(x.clone(), y.clone()) for x, y in batches]
        # the second time, the caller has gradients in the model (mid-training): evaluation leaves them alone
        caller_grads = None
        if not start_training:
            g = torch.Generator().manual_seed(770)
            for p in model.parameters():
                p.grad = torch.randn(p.shape, generator=g)
            caller_grads = [p.grad.clone() for p in model.parameters()]
        grad_was = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(caller_grad)
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                with watch() as seen:
                    got = my_evaluate(model, given)
        finally:
            grad_after = torch.is_grad_enabled()
            torch.set_grad_enabled(grad_was)
        _refuse_companion(seen)
        if grad_after != caller_grad:
            if caller_grad:
                hint("after your function gradients are switched off for the caller's code too "
                     "(torch.set_grad_enabled(False) stays on): use the context manager `with torch.no_grad():`, "
                     "which switches them back on when the block ends.")
            hint("called under torch.no_grad() (gradients off), your function switched gradients ON for the "
                 "caller: it must leave the grad mode as it found it, not force torch.set_grad_enabled(True) "
                 "at the end; the context manager `with torch.no_grad():` restores whatever mode was on.")
        calls = _calls_of(model)
        if not calls:
            hint("your function never called the model: run model(x) on every batch.")
        if any(training for training, _ in calls):
            hint("the model ran in training mode, with dropout on: call model.eval() before evaluating "
                 "(and put the model back in its mode afterwards).")
        if any(grad for _, grad in calls):
            hint("the forward passes ran with gradients on, which keeps every activation for a backward "
                 "pass that never comes: evaluate under torch.no_grad().")
        if model.training != start_training:
            before, after = ("training", "evaluation") if start_training else ("evaluation", "training")
            hint(f"the model was in {before} mode before your function and is in {after} mode after it: "
                 "remember model.training before calling model.eval(), and restore it with "
                 "model.train(was_training).")
        if not all(m.training == start_training for m in model.modules()):
            hint("the model itself is back in its mode, but not all its submodules (its dropout layers "
                 "among them): setting model.training = was changes one flag; call model.train(was), which "
                 "sets the mode of every submodule.")
        if caller_grads is None and any(p.grad is not None for p in model.parameters()):
            hint("your function left gradients in the parameters: evaluation computes no gradients "
                 "(torch.no_grad(), no backward()).")
        if caller_grads is not None and not all(p.grad is not None and p.grad.shape == c.shape and
                                                torch.equal(p.grad, c)
                                                for p, c in zip(model.parameters(), caller_grads)):
            hint("your function changed the gradients the caller had in the model (model.zero_grad() or a "
                 "backward()): evaluation must leave .grad alone; under torch.no_grad() there is nothing "
                 "to clear.")
        if isinstance(got, torch.Tensor):
            if got.numel() == 1 and close(got.reshape(()).detach(), torch.tensor(right)):
                hint("return the mean loss as a Python float (.item()), not a tensor.")
        value = as_number(got, "my_evaluate(model, batches)")
        if close(value, right, rtol=1e-4, atol=1e-6):
            continue
        sums = [float(t.sum()) for t in tokens]
        means = [float(t.mean()) for t in tokens]
        rows = [float(t.mean(1).sum()) for t in tokens]
        n_tok = sum(t.numel() for t in tokens)
        mistakes = [
            (sum(means) / len(means), "you averaged the batches' mean losses, which weighs a batch of 9 tokens "
                                      "as much as one of 24: add up the loss of every token (reduction='sum') "
                                      "and divide by the number of tokens."),
            (sum(rows) / sum(B for B, _ in shapes), "you weighted each batch by its number of windows (each "
                                                    "window counts once), but the windows have different "
                                                    "lengths: every TOKEN counts once; add up every token's "
                                                    "loss and divide by the number of tokens."),
            (sum(sums), "that is the summed loss of all tokens; divide it by the number of tokens."),
            (sum(sums) / len(shapes), "divide the summed loss by the number of tokens, not of batches."),
            (sum(sums) / sum(B for B, _ in shapes), "divide the summed loss by the number of tokens, not of "
                                                    "windows."),
            (means[-1], "that is the last batch's loss only: every batch counts."),
            (means[0], "that is the first batch's loss only: every batch counts."),
            (right / math.log(2), "that is the loss in bits; return it in nats, as the training loss."),
            (math.exp(right), "that is the perplexity, e to the mean loss; return the mean loss itself."),
        ]
        for wrong, message in mistakes:
            if close(value, wrong, rtol=1e-4, atol=1e-6):
                hint(message)
        hint(f"expected a mean loss of {right:.4f} nats per token over the {n_tok} tokens, got {value:.4f}.",
             generic=True)
    passed(f"{right:.4f} nats per token: every token weighs the same, evaluation mode, no gradients, and the "
           "model is back in the mode it was in.")


# ---------------------------------------------------- Exercise 7.7: the loop, from the student's pieces
def _loop_config():
    from companion.train import TrainConfig

    # decay, a floor, the chapter's betas (not PyTorch's defaults), and a clipping norm of 2: some steps
    # clip, some do not (clipping EVERY step would scale every gradient, which Adam's update ignores)
    return TrainConfig(max_steps=12, warmup=3, learning_rate=0.02, min_lr=0.002, weight_decay=0.1, beta1=0.9,
                       beta2=0.99, grad_clip=2.0, eval_interval=4, batch_size=3, device="cpu")


def _reference_loop(model, batches, val_batches, cfg, mistake=None):
    """The loop with PyTorch's schedulers, groups by module type and a brute-force evaluation; or one of
    its classic mistakes. Returns (losses, evals, final parameters as one vector)."""
    decay = _expected_decay(model)
    params = list(model.parameters())
    betas = (0.9, 0.999) if mistake == "default_betas" else (cfg.beta1, cfg.beta2)
    W, S = int(cfg.warmup), cfg.max_steps

    def make():
        if mistake == "no_groups":
            return torch.optim.AdamW(params, lr=cfg.learning_rate, betas=betas, weight_decay=cfg.weight_decay)
        groups = [{"params": [p for p in params if decay[id(p)]], "weight_decay": cfg.weight_decay},
                  {"params": [p for p in params if not decay[id(p)]], "weight_decay": 0.0}]
        kind = torch.optim.Adam if mistake == "adam" else torch.optim.AdamW
        return kind(groups, lr=cfg.learning_rate, betas=betas)

    rates = _reference_lrs(S + 1, S, W, cfg.learning_rate, cfg.min_lr)
    optimizer = make()
    losses, evals, k = [], [], 0
    for step in range(S):
        if mistake == "new_optimizer":
            optimizer = make()
        lr = {"constant_lr": cfg.learning_rate, "lr_step_plus_one": rates[step + 1]}.get(mistake, rates[step])
        if mistake != "lr_after_step":
            for group in optimizer.param_groups:
                group["lr"] = lr
        if mistake == "reseed":
            torch.manual_seed(0)
        x, y = batches[0 if mistake == "same_batch" else k]
        k += 1
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x)[0].flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
        optimizer.step()
        if mistake == "lr_after_step":
            for group in optimizer.param_groups:
                group["lr"] = rates[step]
        losses.append(loss.item())
        due = step % cfg.eval_interval == 0 if mistake == "eval_at_start" else (step + 1) % cfg.eval_interval == 0
        if due:
            if mistake == "eval_train_mode":
                with torch.no_grad():
                    tokens = [-model(x)[0].log_softmax(-1).gather(-1, y[..., None])[..., 0] for x, y in val_batches]
            else:
                tokens = _token_losses(model, val_batches)
            value = float(torch.cat([t.flatten() for t in tokens]).mean())
            evals.append((step if mistake in ("eval_at_start", "eval_step_from_0") else step + 1, value))
    return losses, evals, torch.cat([p.detach().flatten() for p in params])


_LOOP_MISTAKES = {
    "constant_lr": "the learning rate stayed at its peak: before each step set every group's 'lr' to "
                   "my_lr(step, ...) (for group in optimizer.param_groups: group['lr'] = lr).",
    "lr_after_step": "each step used the previous step's learning rate: set group['lr'] BEFORE "
                     "my_train_step, not after it.",
    "lr_step_plus_one": "the schedule is one step ahead: the first step (step 0) uses my_lr(0, ...), and "
                        "step k uses my_lr(k, ...).",
    "new_optimizer": "the optimizer was made anew at every step, which throws away AdamW's moving averages: "
                     "make it once, before the loop.",
    "adam": "that is Adam with weight decay added to the gradient (L2), not AdamW's decoupled decay: use "
            "torch.optim.AdamW.",
    "default_betas": "AdamW ran with PyTorch's default betas (0.9, 0.999); pass the configuration's, "
                     "betas=(cfg.beta1, cfg.beta2).",
    "no_groups": "every parameter was decayed: build AdamW on my_param_groups(model, cfg.weight_decay), "
                 "not on model.parameters().",
    "same_batch": "every step trained on the same batch: call next_batch() at every step.",
    "eval_at_start": "evaluate AFTER every cfg.eval_interval steps ((step + 1) % cfg.eval_interval == 0), "
                     "not at step 0, 4, 8, ...",
}


class _NextBatch:
    """next_batch() for the loop: the batches in order, copies, counting the calls. An object with
    state_dict/load_state_dict, so that the grader copies the count back from the student's kernel."""

    def __init__(self, batches):
        self.batches, self.calls = batches, 0

    def __call__(self):
        x, y = self.batches[self.calls % len(self.batches)]
        self.calls += 1
        return x.clone(), y.clone()

    def state_dict(self) -> dict:
        return {"calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.calls = int(state["calls"])

    def __getitem__(self, key: str) -> int:  # state["calls"], as the checks below read it
        return self.calls


def _counting_batches(batches):
    next_batch = _NextBatch(batches)
    return next_batch, next_batch


def _loop_model(dropout: float = 0.0):
    """The loop's tiny GPT, in float64: Adam's update divides by sqrt(v), which turns float32 rounding
    differences (a loss computed on (B, V, T) logits instead of (B*T, V)) into visible weight
    differences; in float64 they stay far below the tolerance."""
    return _tiny_gpt(78, dropout=dropout).double()


def _second_loop_config():
    """Another configuration: a floor that is not a tenth of the peak, a decay that is not 0.1, and
    max_steps not a multiple of eval_interval (the last evaluation is not at the last step)."""
    from companion.train import TrainConfig

    return TrainConfig(max_steps=10, warmup=2, learning_rate=0.03, min_lr=0.0007, weight_decay=0.25, beta1=0.85,
                       beta2=0.98, grad_clip=1.5, eval_interval=4, batch_size=3, device="cpu")


def _seeded_loop(fn, *args, seed=0):
    """fn(*args) with torch's global RNG seeded (dropout draws from it), the caller's RNG restored after;
    also returns whether fn left the RNG where an untouched generator would be."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        out = fn(*args)
        state = torch.get_rng_state()
    return out, state


def _check_second_loop(my_train, first_cfg) -> None:
    """The loop once more, with another configuration and dropout (0.3) in the model: read every setting
    from cfg, evaluate in evaluation mode, and leave torch's random generator to the dropout layers."""
    import dataclasses

    cfg = _second_loop_config()
    batches = _eval_batches(88, [(3, 6)] * (cfg.max_steps + 2))
    val_batches = _eval_batches(89, ((2, 6), (1, 4)))

    def reference(config, mistake=None):
        return _seeded_loop(lambda: _reference_loop(_loop_model(0.3), batches, val_batches, config, mistake))

    (ref_losses, ref_evals, ref_params), ref_rng = reference(cfg)
    model = _loop_model(0.3)
    next_batch, state = _counting_batches(batches)
    with watch() as seen:
        out, rng = _seeded_loop(lambda: my_train(model, next_batch, [(x.clone(), y.clone()) for x, y in val_batches],
                                                 cfg))
    _refuse_companion(seen)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    settings = (f"a second configuration (max_steps={cfg.max_steps}, warmup={cfg.warmup}, learning_rate="
                f"{cfg.learning_rate:g}, min_lr={cfg.min_lr:g}, weight_decay={cfg.weight_decay:g}, betas=("
                f"{cfg.beta1:g}, {cfg.beta2:g}), grad_clip={cfg.grad_clip:g}, eval_interval={cfg.eval_interval}, "
                "and a model with dropout 0.3)")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"with {settings}, return the pair (losses, evals); you returned {describe(out)}.")
    losses, evals = out
    if not isinstance(losses, (list, tuple)) or len(losses) != cfg.max_steps:
        hint(f"with {settings}, run exactly cfg.max_steps = {cfg.max_steps} steps and return one loss per step; "
             f"you returned {describe(losses)}.")
    evals = list(evals) if isinstance(evals, (list, tuple)) else evals
    if not isinstance(evals, list) or not all(isinstance(e, (tuple, list)) and len(e) == 2 for e in evals):
        hint(f"evals should be a list of pairs (steps done, held-out loss); you returned {describe(evals)}.")
    steps, ref_steps = [s for s, _ in evals], [s for s, _ in ref_evals]
    if steps != ref_steps:
        extra = (" (no extra evaluation at the end: max_steps is not always a multiple of eval_interval)"
                 if steps[:len(ref_steps)] == ref_steps else "")
        hint(f"with max_steps={cfg.max_steps} and eval_interval={cfg.eval_interval} the evaluations come after "
             f"steps {ref_steps} only, every eval_interval steps{extra}; yours after {steps}.")
    tol = dict(rtol=1e-4, atol=1e-6)
    if close(params, ref_params, **tol) and close(list(losses), ref_losses, **tol):
        for (s, got), (_, right) in zip(evals, ref_evals):
            if not close(safe_float(got), right, **tol):
                hint(f"with {settings}, the held-out loss after step {s} should be {right:.4f}, yours is {got!r}: "
                     "evaluate with my_evaluate (evaluation mode: no dropout).", generic=True)
        if not torch.equal(rng, ref_rng):
            hint("the results are right, but your loop changed torch's global random generator differently from "
                 "a loop that leaves it to the dropout layers: do not reseed (torch.manual_seed) or draw random "
                 "numbers in the loop.")
        return
    variants = [
        (dataclasses.replace(cfg, min_lr=cfg.learning_rate / 10),
         f"the floor is cfg.min_lr ({cfg.min_lr:g} in {settings}), not a tenth of the peak: pass cfg.min_lr to "
         "my_lr."),
        (dataclasses.replace(cfg, weight_decay=first_cfg.weight_decay),
         f"the weight decay is cfg.weight_decay ({cfg.weight_decay:g} in {settings}), not a constant "
         f"{first_cfg.weight_decay:g}: pass cfg.weight_decay to my_param_groups."),
        (dataclasses.replace(cfg, min_lr=first_cfg.min_lr),
         f"the floor is cfg.min_lr ({cfg.min_lr:g} in {settings}): pass cfg.min_lr to my_lr, no constant."),
        (dataclasses.replace(cfg, beta1=first_cfg.beta1, beta2=first_cfg.beta2),
         f"the betas are (cfg.beta1, cfg.beta2) (({cfg.beta1:g}, {cfg.beta2:g}) in {settings}), not constants."),
        (dataclasses.replace(cfg, grad_clip=first_cfg.grad_clip),
         f"clip to cfg.grad_clip ({cfg.grad_clip:g} in {settings}), not a constant."),
    ]
    for config, message in variants:
        (m_losses, _, m_params), _ = reference(config)
        if close(params, m_params, **tol) and close(list(losses), m_losses, **tol):
            hint(message)
    for mistake, message in (("eval_train_mode", "the held-out loss was computed with the model in training "
                                                 "mode (dropout on): my_evaluate must call model.eval() first, "
                                                 "and restore the mode after."),
                             ("reseed", "your loop reseeds torch's random generator (torch.manual_seed) at every "
                                        "step, so every step draws the same dropout masks: leave the global "
                                        "generator alone in the loop.")):
        (m_losses, _, m_params), _ = reference(cfg, mistake)
        if close(params, m_params, **tol) and close(list(losses), m_losses, **tol):
            hint(message)
    step = next((k for k, (a, b) in enumerate(zip(losses, ref_losses)) if not close(a, b, **tol)), None)
    where = (f"from step {step} ({losses[step]!r} instead of {ref_losses[step]:.4f})" if step is not None else
             "in the final weights")
    hint(f"right on the first configuration, but with {settings} your loop differs from the reference {where}: "
         "read every setting from cfg (no constants), evaluate in evaluation mode (dropout draws random numbers "
         "in training mode), and leave torch's random generator alone (no torch.manual_seed in the loop).",
         generic=True)


@checker("Exercise 7.7", companion_given=True)
def train_loop(my_train) -> None:
    """``my_train(model, next_batch, val_batches, cfg) -> (losses, evals)``: ``cfg.max_steps`` steps of
    AdamW on the student's parameter groups, the learning rate of their schedule set before each step,
    a batch from ``next_batch()``, their training step, and their evaluation on ``val_batches`` after
    every ``cfg.eval_interval`` steps. Compared with a reference loop (PyTorch's schedulers, groups
    by module type) on a tiny GPT: the losses, the evaluations and the final weights."""
    cfg = _loop_config()
    batches = _eval_batches(78, [(3, 6)] * (cfg.max_steps + 2))
    val_batches = _eval_batches(79, ((2, 6), (1, 4)))
    ref_losses, ref_evals, ref_params = _reference_loop(_loop_model(), batches, val_batches, cfg)

    model = _loop_model()
    model.__class__ = _recording(type(model))
    model._course_calls = ""
    next_batch, state = _counting_batches(batches)
    with watch() as seen:
        out = my_train(model, next_batch, [(x.clone(), y.clone()) for x, y in val_batches], cfg)
    _refuse_companion(seen)
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"return the pair (losses, evals); you returned {describe(out)}.")
    losses, evals = out
    if not isinstance(losses, (list, tuple)) or not all(isinstance(v, (float, int)) and not isinstance(v, bool)
                                                        for v in losses):
        hint(f"losses should be a list of floats, one per step (what my_train_step returns); you returned "
             f"{describe(losses)}.")
    if len(losses) != cfg.max_steps:
        hint(f"run exactly cfg.max_steps = {cfg.max_steps} steps (for step in range(cfg.max_steps)); your "
             f"losses hold {len(losses)}.")
    if state["calls"] == 1 and cfg.max_steps > 1:
        hint(_LOOP_MISTAKES["same_batch"])
    if state["calls"] != cfg.max_steps:
        hint(f"call next_batch() once per step: {cfg.max_steps} steps, {state['calls']} calls.")
    training = [t for t, grad in _calls_of(model) if grad]
    if any(not t for t in training):
        hint("some training steps ran with the model in evaluation mode: put it back in training mode after "
             "evaluating (your my_evaluate should restore the mode it found), or call model.train() "
             "before the loop.")
    same_params = close(params, ref_params, rtol=1e-4, atol=1e-6)
    if not (same_params and close(list(losses), ref_losses, rtol=1e-4, atol=1e-6)):
        for mistake, message in _LOOP_MISTAKES.items():
            if mistake in ("eval_at_start",):
                continue
            m_losses, _, m_params = _reference_loop(_loop_model(), batches, val_batches, cfg, mistake)
            if close(params, m_params, rtol=1e-4, atol=1e-6) and close(list(losses), m_losses, rtol=1e-4,
                                                                       atol=1e-6):
                hint(message)
        if close(list(losses)[:1], ref_losses[:1], rtol=1e-4, atol=1e-6):
            step = next((k for k, (a, b) in enumerate(zip(losses, ref_losses))
                         if not close(a, b, rtol=1e-4, atol=1e-6)), None)
            if step is None:
                hint("every step's loss is right, but the final weights differ from the reference loop's: "
                     "the last step's update (its learning rate, clipping to max_norm=cfg.grad_clip) is off.",
                     generic=True)
            hint(f"the first {step} losses are right, then yours differ ({losses[step]:.4f} instead of "
                 f"{ref_losses[step]:.4f} at step {step}): check the learning rate you set before each step, "
                 "the optimizer (AdamW on my_param_groups, betas=(cfg.beta1, cfg.beta2), made once) and "
                 "max_norm=cfg.grad_clip. If my_lr, my_param_groups or my_train_step has not passed its "
                 "own check yet, start there.", generic=True)
        hint(f"the losses differ from the reference loop's from the first step ({losses[0]!r} instead of "
             f"{ref_losses[0]:.4f}): train on next_batch()'s batches with my_train_step. If one of your "
             "pieces has not passed its own check yet, start there.", generic=True)
    evals = list(evals) if isinstance(evals, (list, tuple)) else evals
    if not isinstance(evals, list) or not all(isinstance(e, (tuple, list)) and len(e) == 2 for e in evals):
        hint(f"evals should be a list of pairs (steps done, held-out loss); you returned {describe(evals)}.")
    ref_steps = [s for s, _ in ref_evals]
    steps = [s for s, _ in evals]
    if steps != ref_steps:
        if steps == [s - cfg.eval_interval for s in ref_steps] or steps == [s - 1 for s in ref_steps]:
            _, m_evals, _ = _reference_loop(_loop_model(), batches, val_batches, cfg, "eval_at_start")
            if close([v for _, v in evals], [v for _, v in m_evals], rtol=1e-4, atol=1e-6):
                hint(_LOOP_MISTAKES["eval_at_start"])
            hint("count the steps done from 1: after the first cfg.eval_interval steps the pair is "
                 f"({cfg.eval_interval}, loss), i.e. (step + 1, my_evaluate(...)).")
        if not evals:
            hint("evaluate on val_batches after every cfg.eval_interval steps and collect the pairs "
                 "(steps done, held-out loss) in evals.")
        hint(f"with max_steps={cfg.max_steps} and eval_interval={cfg.eval_interval} the evaluations come after "
             f"steps {ref_steps}; yours after {steps}.", generic=True)
    for (s, got), (_, right) in zip(evals, ref_evals):
        if not close(safe_float(got), right, rtol=1e-4, atol=1e-6):
            hint(f"the held-out loss after step {s} should be {right:.4f} (my_evaluate on val_batches), yours "
                 f"is {got!r}.", generic=True)
    _check_second_loop(my_train, cfg)
    passed(f"{cfg.max_steps} steps equal to the reference loop's (PyTorch's LinearLR + CosineAnnealingLR, "
           "AdamW's two groups, clipping), and the held-out loss after every eval_interval steps; the same on a "
           "second configuration with dropout (every setting read from cfg).")
