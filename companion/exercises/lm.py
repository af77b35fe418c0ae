"""Checkers for the exercises of chapter 7 (training a language model)."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._core import checker, close, hint, passed


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
    got = my_cross_entropy(logits.clone(), targets.clone())
    expected = F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1))
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor (a scalar), got {type(got).__name__}.")
    if close(got, expected):
        big = torch.tensor([[[1000.0, 0.0, -1000.0]]])
        value = my_cross_entropy(big, torch.tensor([[2]]))
        if not torch.isfinite(torch.as_tensor(value)).all():
            hint("right on ordinary logits, but logits of ±1000 give inf or nan: take the log-softmax with "
                 "torch.log_softmax (or subtract the row maximum) instead of log(softmax(...)).")
        passed(f"{float(got):.4f} nats, the same as torch.nn.functional.cross_entropy.")
    probs = logits.softmax(-1)
    picked_logp = logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0]  # (B, T)
    if close(got, -expected):
        hint("the sign is wrong: the loss is MINUS the log-probability of the target (a positive number).")
    if close(got, -picked_logp.sum()):
        hint("you summed over the positions; take the mean over all B*T positions instead.")
    if close(got, -probs.gather(-1, targets[..., None]).mean()) or close(got, 1 - probs.gather(-1, targets[..., None]).mean()):
        hint("you used the probability of the target, not its logarithm: the loss is -log p.")
    if close(got, -logits.gather(-1, targets[..., None]).mean()):
        hint("you took the raw logit of the target; normalize first: log_softmax(logits)[target].")
    wrong_dim = -logits.log_softmax(1).gather(-1, targets[..., None]).mean()
    if close(got, wrong_dim):
        hint("the softmax must run over the vocabulary (the last dimension, V), not over the positions.")
    if isinstance(got, torch.Tensor) and got.numel() > 1:
        hint(f"return one number, the mean over positions (got a tensor of shape {tuple(got.shape)}).")
    hint(f"expected {float(expected):.4f}, got {float(got):.4f}: the mean over all positions of -log softmax(logits)[target].")


@checker("Exercise 7.2")
def shift(my_shift) -> None:
    """``my_shift(window)``: window (B, T+1) of token ids -> (x, y), each (B, T), y the next token of x."""
    window = torch.arange(24).view(2, 12)
    out = my_shift(window.clone())
    if not isinstance(out, tuple) or len(out) != 2:
        hint("return a pair (x, y).")
    x, y = out
    if x.shape != (2, 11) or y.shape != (2, 11):
        if x.shape == (2, 12) or y.shape == (2, 12):
            hint("x and y should each be ONE shorter than the window: x drops the last token, y the first.")
        hint(f"expected x and y of shape (2, 11), got {tuple(x.shape)} and {tuple(y.shape)}.")
    if torch.equal(x, window[:, 1:]) and torch.equal(y, window[:, :-1]):
        hint("x and y are swapped: the input is the window without its LAST token, the target the window "
             "without its FIRST token (the next character at each position).")
    if torch.equal(x, y):
        hint("x and y are the same: the target at position t must be the token at t+1 (shift by one).")
    if torch.equal(x, window[:, :-1]) and torch.equal(y, window[:, 1:]):
        passed("x = window[:, :-1] and y = window[:, 1:]: every position is trained at once, on the true previous tokens.")
    if torch.equal(x.flatten(), window.flatten()[:-2]) or torch.equal(y.flatten(), window.flatten()[1:-1]):
        hint("shift along the time dimension (dim 1) of each row, not along the flattened batch.")
    hint("y[:, t] should equal x[:, t + 1] inside the window: x = window without its last column, y without its first.")


@checker("Exercise 7.3")
def bits_per_char(my_bits) -> None:
    """``my_bits(nats)``: a loss in nats per character (a float) -> the same loss in bits per character."""
    for nats in (1.0, 1.5, 2.75):
        got = my_bits(nats)
        expected = nats / math.log(2)
        if close(got, expected):
            continue
        if close(got, nats * math.log(2)):
            hint("you multiplied by ln 2; one bit is ln 2 ≈ 0.693 nats, so DIVIDE by ln 2 (bits are smaller units).")
        if close(got, math.log2(nats)):
            hint("log2(loss) is not a change of unit: the loss is already a logarithm; divide it by ln 2.")
        if close(got, math.exp(nats)):
            hint("exp(loss) is the perplexity, not bits: bits per character = nats / ln 2.")
        if close(got, nats / math.log(10)):
            hint("dividing by ln 10 gives decimal digits (bans); for bits divide by ln 2.")
        hint(f"my_bits({nats}) returned {got!r}, expected {expected:.4f}.")
    passed("bits = nats / ln 2; 1.5 nats/char ≈ 2.164 bits/char.")
