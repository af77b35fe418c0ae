"""Checkers for the exercises of chapter 7 (training a language model)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._core import require_graph, as_number, checker, close, describe, first_difference, hint, passed, require_tensor, source_facts
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


def _ids(x) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_floating_point() and not x.is_complex()


@checker("Exercise 7.2")
def shift(my_shift) -> None:
    """``my_shift(window)``: window (B, T+1) of token ids -> (x, y), each (B, T), y the next token of x."""
    window = torch.arange(24).view(2, 12) * 7 % 23  # distinct ids in an order that is not sorted
    _check_shift(my_shift, window)
    g = torch.Generator().manual_seed(72)
    for B, T1 in ((1, 2), (3, 9), (5, 33)):
        _check_shift(my_shift, torch.randint(1000, (B, T1), generator=g), random=True)
    passed("x = window[:, :-1] and y = window[:, 1:]: every position is trained at once, on the true previous tokens.")


def _check_shift(my_shift, window: torch.Tensor, random: bool = False) -> None:
    B, T1 = window.shape
    given = window.clone()
    out = my_shift(given)
    if not torch.equal(given, window):
        hint("your function changed the window it was given; return new tensors (slices) and leave the "
             "input as it was.")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"return a pair (x, y); you returned {describe(out)}.")
    x, y = out
    if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
        hint(f"x and y must be tensors of token ids; you returned {describe(x)} and {describe(y)}.")
    if tuple(x.shape) != (B, T1 - 1) or tuple(y.shape) != (B, T1 - 1):
        if tuple(x.shape) == (B, T1) or tuple(y.shape) == (B, T1):
            hint("x and y should each be ONE shorter than the window: x drops the last token, y the first.")
        if B > 1 and (tuple(x.shape) == (B - 1, T1) or tuple(y.shape) == (B - 1, T1)):
            hint("you cut along the batch dimension (dim 0); shift along time, dim 1: window[:, :-1] and window[:, 1:].")
        hint(f"for a window of shape {(B, T1)} expected x and y of shape {(B, T1 - 1)}, got {tuple(x.shape)} "
             f"and {tuple(y.shape)}.", generic=True)
    if not (_ids(x) and _ids(y)):
        hint("keep the token ids as integers (dtype torch.long): slicing the window keeps its dtype.")
    if x.dtype != window.dtype or y.dtype != window.dtype:
        hint(f"keep the window's dtype, {window.dtype} (a LongTensor, as the embedding and the loss expect); "
             f"yours are {x.dtype} and {y.dtype}. Slicing keeps the dtype: window[:, :-1], window[:, 1:].")
    if T1 > 2 and torch.equal(x, window[:, 1:]) and torch.equal(y, window[:, :-1]):
        hint("x and y are swapped: the input is the window without its LAST token, the target the window "
             "without its FIRST token (the next character at each position).")
    if torch.equal(x, y) and not torch.equal(window[:, :-1], window[:, 1:]):
        hint("x and y are the same: the target at position t must be the token at t+1 (shift by one).")
    if torch.equal(x, window[:, :-1]) and torch.equal(y, window[:, 1:]):
        return
    if torch.equal(x.flatten(), window.flatten()[:-2]) or torch.equal(y.flatten(), window.flatten()[1:-1]) or torch.equal(
            y.flatten(), window.flatten()[2:]):
        hint("shift along the time dimension (dim 1) of each row, not along the flattened batch.")
    if torch.equal(x, window[:, :-1]) and torch.equal(y, window[:, :-1].roll(-1, 1)):
        hint("torch.roll wraps around: the last target becomes the first token. Slice instead: y = window[:, 1:].")
    where = f" (for a random window of shape {(B, T1)})" if random else ""
    hint(f"y[:, t] should equal x[:, t + 1] inside the window{where}: x = window without its last column, y "
         "without its first.", generic=True)


@checker("Exercise 7.3")
def bits_per_char(my_bits) -> None:
    """``my_bits(nats)``: a loss in nats per character (a float) -> the same loss in bits per character."""
    cases = (1.0, 1.5, 2.75, 0.0137, 4.2)
    answers = [as_number(my_bits(nats), f"my_bits({nats})") for nats in cases]
    expected = [nats / math.log(2) for nats in cases]
    if close(answers, expected):
        passed("bits = nats / ln 2; 1.5 nats/char ≈ 2.164 bits/char.")
    # A mistake is named only when it explains all three answers.
    mistakes = [
        (lambda n: n * math.log(2), "you multiplied by ln 2; one bit is ln 2 ≈ 0.693 nats, so DIVIDE by ln 2 "
                                    "(bits are smaller units)."),
        (math.log2, "log2(loss) is not a change of unit: the loss is already a logarithm; divide it by ln 2."),
        (math.exp, "that is the perplexity (e to the loss), not bits: bits per character = nats / ln 2."),
        (lambda n: 2 ** (n / math.log(2)), "that is the perplexity (e to the loss), not bits: bits per character "
                                           "= nats / ln 2."),
        (lambda n: n / math.log(10), "dividing by ln 10 gives decimal digits (bans); for bits divide by ln 2."),
        (lambda n: n, "your result is the loss in nats, unchanged: divide by the natural log of 2, math.log(2) "
                      "(math.log2(2) is 1, which changes nothing)."),
        (lambda n: n / 2, "divide by ln 2 ≈ 0.693 (math.log(2)), not by 2."),
        *[(rounding, "you rounded or truncated the result; return the exact value nats / ln 2.") for rounding in (
            lambda n: math.floor(n / math.log(2)), lambda n: round(n / math.log(2)),
            lambda n: round(n / math.log(2), 1), lambda n: round(n / math.log(2), 2))],
    ]
    for wrong, message in mistakes:
        if close(answers, [wrong(n) for n in cases]):
            hint(message)
    nats, got, right = next((n, g, e) for n, g, e in zip(cases, answers, expected) if not close(g, e))
    hint(f"my_bits({nats}) returned {got!r}, expected {right:.4f}.", generic=True)


# ---------------------------------------------------- Exercise 7.5 (the training loop comes after the model)
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


# ---------------------------------------------------- Exercise 7.4 (where the chapter introduces the GPT)
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


@checker("Exercise 7.4", companion_given=True)
def gpt_forward(my_gpt_forward) -> None:
    """``my_gpt_forward(model, idx)``: logits (B, T, V) from the GPT's parts, equal to ``model(idx)[0]``.

    The parts: ``model.tok_emb``, ``model.pos_emb`` (positions 0..T-1), every block of
    ``model.blocks`` with ``is_causal=True``, ``model.final_norm``, ``model.head``.
    """
    # vocab_size == d_model, so that even "head before the final norm" runs and can be recognized;
    # context_length >= vocab_size, so that even "positions looked up by token id" runs.
    model = _tiny_gpt(75, vocab_size=16, context_length=16, d_model=16, n_layers=2, n_heads=2).eval()
    g = torch.Generator().manual_seed(75)
    idx = torch.randint(16, (2, 7), generator=g)
    with torch.no_grad():
        expected = model(idx)[0]
    model.__class__ = _watched(type(model))  # model(idx) and type(model).forward(...) leave a mark
    model._course_forward_calls = 0
    with torch.no_grad():
        got = my_gpt_forward(model, idx.clone())
    if model._course_forward_calls or _names_forward(source_facts(my_gpt_forward)):
        hint("you called the model itself, model(idx), which the check compares with: build the forward "
             "pass from its parts (tok_emb, pos_emb, blocks, final_norm, head).")
    if isinstance(got, tuple) and got and close(got[0], expected):
        hint("return only the logits (B, T, V), not a tuple.")
    got = require_tensor(got, "the logits, a tensor of shape (B, T, V)")
    if close(got, expected, rtol=1e-4, atol=1e-5):
        require_graph(my_gpt_forward, (model, idx), grad=())
        passed("token + position embeddings, the causal blocks in order, the final norm, the head: the "
               "GPT's forward pass, equal to model(idx).")
    if close(got, expected.softmax(-1), rtol=1e-4, atol=1e-5):
        hint("you returned probabilities; return the logits (no softmax): the loss and the sampler apply it.")
    if tuple(got.shape) != tuple(expected.shape):
        hint(f"the logits should have shape (B, T, V) = {tuple(expected.shape)}, got {tuple(got.shape)}.", generic=True)
    blocks = list(model.blocks)
    mistakes = [
        (dict(pos=None), "the position embeddings are missing: x = tok_emb(idx) + pos_emb(positions), "
                         "positions = torch.arange(T)."),
        (dict(start=1), "positions start at 0: pos_emb(torch.arange(T)), not arange(1, T + 1)."),
        (dict(pos="ids"), "the position embedding is looked up by position (0, 1, ..., T - 1), not by token id."),
        (dict(final_norm=False), "the final LayerNorm is missing: apply model.final_norm after the last block, "
                                 "before the head."),
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
        (dict(scale_tokens=True), "the GPT adds the embeddings as they are; do not scale the token embeddings "
                                  "by sqrt(d_model)."),
    ]
    with torch.no_grad():
        for flags, message in mistakes:
            if close(got, _gpt_forward(model, idx, **flags), rtol=1e-4, atol=1e-5):
                hint(message)
    hint(f"the logits differ from model(idx)[0]: {first_difference(got, expected, 'logits')}.", generic=True)
