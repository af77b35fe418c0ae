"""Checkers for the exercises added to chapters 2, 4 and 5 in which students build and test.

* 1.5 ``my_saturation(q, K, V, scale)``: the largest softmax weight and the query's gradient, per row.
* 2.5 ``my_is_equivariant(f, X)``: a test, written by the student, of permutation equivariance.
* 4.4 ``my_dependency_map(f, x)``: which input positions each output position of a layer reads.
* 5.5 ``my_three_back(d)``: the matrix ``A = W_Q W_K^T`` of a head that attends three tokens back.
* 5.6 ``my_rotary_qk(q, k, offset)``: RoPE on the queries and keys of every head, from ``offset``.

The "write a test" checkers run the student's test on layers whose answer is known. 2.5: some
equivariant, some not, and a few traps (a circular convolution that survives a cyclic shift). 4.4:
layers whose dependency maps are written out by hand (BatchNorm with running statistics, which reads
one position; layers that read one future position only, or by 0.001; layers whose output is 0
whatever the input, on a batch of one sequence or one token). An answer passes only if it gets every
one of them right, and leaves its input untouched.
Every checker keeps to plain data: whatever the student's code returns (None, a string, a complex
tensor, a huge int) gives a hint, never an error of the checker.
"""
from __future__ import annotations

import math
import random
from typing import Any, Callable

import torch

from . import _diff
from ._core import StudentError, checker, describe, hint, passed
from .rules import watch

__all__ = ["saturation", "equivariance_test", "dependency_map", "three_back", "rotary_qk"]


# --------------------------------------------------------------------------- shared helpers
def _verdict(got: Any, call: str) -> bool:
    """The student's answer as a Python bool, or a hint: a test answers True or False."""
    if isinstance(got, bool):
        return got
    try:
        import numpy as np

        if isinstance(got, np.bool_):
            return bool(got)
    except ImportError:  # pragma: no cover - numpy is installed with torch
        pass
    if isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.numel() == 1:
        return bool(got.item())
    if isinstance(got, torch.Tensor) and got.dtype == torch.bool:
        hint(f"{call} returned a tensor of {got.numel()} booleans, one per entry; a test answers with one "
             "True or False: use torch.allclose (one bool) rather than torch.isclose (a tensor of them).")
    hint(f"{call} should return True or False; it returned {describe(got)}.")
    raise AssertionError  # unreachable: hint() raises


def _real_tensor(got: Any, call: str) -> torch.Tensor:
    if not isinstance(got, torch.Tensor):
        hint(f"{call} should return a tensor; it returned {describe(got)}.")
    if got.is_complex() or got.dtype == torch.bool:
        hint(f"{call} should return real numbers; it returned {describe(got)}.")
    return got.detach().double()


def _attention(X: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """softmax(X X^T / sqrt(d)) X over the token axis (-2), optionally causal."""
    scores = X @ X.transpose(-2, -1) / math.sqrt(X.shape[-1])
    if causal:
        T = X.shape[-2]
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ X


def _sinusoids(T: int, d: int) -> torch.Tensor:
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    omega = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    P = torch.zeros(T, d, dtype=torch.float64)
    P[:, 0::2], P[:, 1::2] = torch.sin(pos * omega), torch.cos(pos * omega)
    return P


# --------------------------------------------------------------------------- 1.5
def _saturation(q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, scale: float, *, weights_of=None):
    """Reference: largest weight per row and ||dL/dq_i|| for L = sum of every output."""
    q = q.detach().clone().requires_grad_(True)
    scores = (K @ q.unsqueeze(-1)).squeeze(-1) / scale  # (N, n)
    w = torch.softmax(scores, dim=-1)
    (w.unsqueeze(1) @ V).sum().backward()  # (N, 1, n) @ (N, n, d_v)
    return w.max(dim=-1).values.detach(), q.grad.norm(dim=-1)


def _saturation_inputs(N: int, n: int, d: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(N, d, generator=g, dtype=torch.float64), torch.randn(N, n, d, generator=g, dtype=torch.float64),
            torch.randn(N, n, 4, generator=g, dtype=torch.float64))


def _pair_of_vectors(out: Any, call: str, N: int) -> tuple[torch.Tensor, torch.Tensor]:
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"{call} should return a pair (largest weights, gradient norms); it returned {describe(out)}.")
    largest, grads = (_real_tensor(v, call) for v in out)
    for name, v in (("largest weights", largest), ("gradient norms", grads)):
        if tuple(v.shape) != (N,):
            hint(f"the {name} should have one number per query, shape ({N},); got {tuple(v.shape)}.")
    return largest, grads


def _close_rel(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-3, atol=1e-9))


@checker("Exercise 1.5")
def saturation(my_saturation) -> None:
    """``my_saturation(q, K, V, scale)`` -> (largest softmax weight per row, ||dL/dq|| per row)."""
    first = True
    for N, n, d, seed, label in ((32, 8, 16, 15, "32 queries of width 16"),
                                 (32, 8, 256, 16, "32 queries of width 256"),
                                 (32, 8, 16, 18, "32 queries of width 16 again, with new values"),
                                 (1, 8, 5, 17, "one query (N = 1) of odd width 5"),
                                 (6, 5, 12, 19, "5 keys per query"),
                                 (4, 1, 6, 20, "one key per query")):
        q, K, V = _saturation_inputs(N, n, d, seed)
        variants = ((1.0, "", False, False), (math.sqrt(d), "", False, False), (2.5, ", scale 2.5", False, False))
        if n == 8 and N == 32 and d == 16 and seed == 15:
            variants += ((math.sqrt(d), ", q with requires_grad", (0,), False),
                         (math.sqrt(d), ", called under torch.no_grad()", False, True),
                         (math.sqrt(d), ", q, K and V with requires_grad", (0, 1, 2), False))
        elif seed == 17:
            variants += ((math.sqrt(d), ", q with requires_grad", (0,), False),
                         (math.sqrt(d), ", called under torch.no_grad()", False, True))
        for scale, extra, grad, no_grad in variants:
            call = f"my_saturation(q, K, V, scale={scale:g})"
            try:
                out = _diff.call(my_saturation, (q, K, V, scale), label + extra, grad=grad,
                                 no_grad=no_grad, name="my_saturation", first=first)
            except StudentError as exc:
                if no_grad and isinstance(exc.error, RuntimeError) and "grad" in str(exc.error):
                    hint("my_saturation fails when called under torch.no_grad(): there autograd records nothing, "
                         "so backward() has no graph. Compute the gradient inside `with torch.enable_grad():`.")
                raise
            first = False
            largest, grads = _pair_of_vectors(out, call, N)
            want_w, want_g = _saturation(q, K, V, scale)
            if _close_rel(largest, want_w) and _close_rel(grads, want_g):
                continue
            if not _close_rel(largest, want_w):
                if scale != 1.0 and _close_rel(largest, _saturation(q, K, V, 1.0)[0]):
                    hint(f"{call}: the scores were not divided by scale: the weights are those of the raw "
                         "scores.")
                if scale != 1.0 and _close_rel(largest, _saturation(q, K, V, 1.0 / scale)[0]):
                    hint(f"{call}: the scores were multiplied by scale; divide them.")
                if scale != 1.0 and _close_rel(largest, _saturation(q, K, V, math.sqrt(scale))[0]):
                    hint(f"{call}: divide by scale itself; you divided by its square root (scale is already "
                         "sqrt(d) when the scores are scaled).")
                scores = (K @ q.unsqueeze(-1)).squeeze(-1) / scale
                if _close_rel(largest, torch.softmax(scores, dim=0).max(dim=-1).values):
                    hint("the softmax ran over the queries (dim=0): each query's weights over its n keys "
                         "must sum to 1, so take the softmax over the last axis.")
                if _close_rel(largest, torch.softmax(scores, dim=-1).min(dim=-1).values):
                    hint("you returned the smallest weight of each row; the question is the largest.")
                if _close_rel(largest, scores.max(dim=-1).values):
                    hint("you returned the largest score; return the largest weight, after the softmax.")
                hint(f"{call}: the largest weights differ from the softmax of q . k / scale.", generic=True)
            if _close_rel(grads, want_g ** 2):
                hint("you returned the squared norm of the gradient; take its square root (.norm()).")
            if _close_rel(grads, want_g / (N * V.shape[-1])):
                hint("L must be the sum of every output, not the mean: the mean divides the gradients by "
                     "the number of outputs.")
            if _close_rel(grads.sum(), want_g.sum()) is False and grads.numel() == N:
                kq = K.detach().clone().requires_grad_(True)
                w = torch.softmax((kq @ q.unsqueeze(-1)).squeeze(-1) / scale, dim=-1)
                (w.unsqueeze(1) @ V).sum().backward()
                if _close_rel(grads, kq.grad.norm(dim=(-2, -1))):
                    hint("that is the gradient with respect to the keys; the question is the query's, "
                         "dL/dq.")
            hint(f"{call}: the gradient norms differ from ||dL/dq|| for L = the sum of every output.",
                 generic=True)
    # the measurement, with the student's own function (fixed inputs: the same message every run)
    n = 8
    lines = []
    for d in (16, 1024):
        q, K, V = _saturation_inputs(512, n, d, 1)
        raw_w, raw_g = _pair_of_vectors(my_saturation(q, K, V, 1.0), "my_saturation", 512)
        s_w, s_g = _pair_of_vectors(my_saturation(q, K, V, math.sqrt(d)), "my_saturation", 512)
        ratio = float(s_g.median() / raw_g.median().clamp_min(1e-300))
        times = f"over {10 ** int(math.floor(math.log10(ratio))):,}" if ratio >= 10 else "about 1 to 10"
        lines.append(f"d = {d}: median largest weight {float(raw_w.median()):.2f} unscaled, "
                     f"{float(s_w.median()):.2f} scaled; median gradient {times} times smaller unscaled")
    passed("measured with your function: " + "; ".join(lines) + ".")


# --------------------------------------------------------------------------- 2.5
def _equivariance_cases(d: int) -> list[tuple[str, Callable, bool]]:
    g = torch.Generator().manual_seed(25)
    W_Q, W_K, W_V = (torch.randn(d, d, generator=g, dtype=torch.float64) / math.sqrt(d) for _ in range(3))
    W1 = torch.randn(d, 2 * d, generator=g, dtype=torch.float64) / math.sqrt(d)
    kernel = torch.randn(3, generator=g, dtype=torch.float64)

    def projected(X):
        q, k, v = X @ W_Q, X @ W_K, X @ W_V
        return torch.softmax(q @ k.T / math.sqrt(d), dim=-1) @ v

    marker = torch.zeros(d, dtype=torch.float64)
    marker[0] = 1.0

    def mark_last(X):  # treats the last position differently from the others
        out = X.clone()
        out[-1] += marker
        return out

    def circular_conv(X):  # mixes each token with its neighbours, wrapping around: not a set function
        return kernel[0] * X.roll(1, 0) + kernel[1] * X + kernel[2] * X.roll(-1, 0)

    return [
        ("f(X) = 2 X", lambda X: 2 * X, True),
        ("parameter-free attention softmax(X X^T / sqrt(d)) X", _attention, True),
        ("attention with learned W_Q, W_K, W_V", projected, True),
        ("the same small network on every token", lambda X: torch.relu(X @ W1) @ W1.T, True),
        ("subtracting the mean over the tokens", lambda X: X - X.mean(0, keepdim=True), True),
        ("attention after adding sinusoidal positions", lambda X: _attention(X + _sinusoids(*X.shape)), False),
        ("causal attention", lambda X: _attention(X, causal=True), False),
        ("a circular convolution along the tokens", circular_conv, False),
        ("a running sum over the tokens", lambda X: X.cumsum(0), False),
        ("adding a marker to the last token", mark_last, False),
        ("adding the first token to every token", lambda X: X + X[:1], False),
        ("sorting the tokens by their first feature", lambda X: X[X[:, 0].argsort()], False),
        ("adding the mirrored sequence, X + X.flip(0)", lambda X: X + X.flip(0), False),
        ("adding a small position signal (0.05 x position)",
         lambda X: 2 * X + 0.05 * torch.arange(X.shape[0], dtype=X.dtype)[:, None], False),
        ("adding a tiny position signal (0.001 x position)",
         lambda X: X + 0.001 * torch.arange(X.shape[0], dtype=X.dtype)[:, None], False),
        # order-aware layers that keep every column's sum: a test that sums or averages sees nothing
        ("reversing the tokens, X.flip(0)", lambda X: X.flip(0), False),
        ("rolling the tokens by one, X.roll(1, 0)", lambda X: X.roll(1, 0), False),
        ("swapping the first two tokens", lambda X: X[torch.tensor([1, 0] + list(range(2, X.shape[0])))], False),
    ]


@checker("Exercise 2.5")
def equivariance_test(my_is_equivariant) -> None:
    """``my_is_equivariant(f, X)`` -> True iff ``f(X[perm])`` equals ``f(X)[perm]`` for permutations.

    The student's test runs on every layer for several seeds of torch's global generator (fixed ones
    and a fresh one each run), on sequences of 10 tokens and on short ones (2 and 3 tokens, where one
    random permutation is often the identity), so that one lucky permutation cannot pass.
    """
    d = 4
    draw = random.Random()
    # fixed seeds: under seed 2 the first random permutation of 2 tokens is the identity and the second
    # a swap (a test that draws one permutation fails there, one that draws several passes); plus a
    # fresh seed each run
    seeds_long, seeds_short = [2, draw.randrange(2**31)], [2, 7, draw.randrange(2**31)]
    inputs = [torch.randn(n, d, generator=torch.Generator().manual_seed(5 + n), dtype=torch.float64)
              for n in (10, 2, 3)]
    answers: dict[str, tuple[bool, bool]] = {}
    with watch() as seen:
        _equivariance_answers(my_is_equivariant, inputs, d, seeds_long, seeds_short, answers)
    reseeds = seen.called(*_RESEEDS) or (["torch.manual_seed (torch.random)"] if seen.used_module("torch.random")
                                         else [])
    if reseeds:
        hint(f"your test calls {reseeds[0]}: seeding inside the test makes it draw the same permutations "
             "every time, so whatever luck they have is fixed for good. Leave torch's generator to the caller "
             "and draw fresh permutations (torch.randperm) on every call.")
    _equivariance_verdict(answers)


#: Calls that reseed or reset torch's global generator (canonical names of the rules module).
_RESEEDS = ("manual_seed", "random.manual_seed", "seed", "random.seed", "set_rng_state", "random.set_rng_state",
            "random.fork_rng")


def _equivariance_answers(my_is_equivariant, inputs, d, seeds_long, seeds_short, answers) -> None:
    """Run the student's test on every layer, input size and seed; record (said, expected) per case."""
    for X in inputs:
        n = X.shape[0]
        for name, f, expected in _equivariance_cases(d):
            if n < 10 and name not in _SHORT_OK:
                continue
            label = f"{name}, {n} tokens"
            for seed in seeds_long if n == 10 else seeds_short:
                X_in = X.clone()
                with torch.random.fork_rng(devices=[]):  # the student's own random state is left as it was
                    torch.manual_seed(seed)
                    got = _verdict(my_is_equivariant(f, X_in), f"my_is_equivariant(<{name}>, X)")
                if not torch.equal(X_in, X):
                    hint("your test changed X itself (an in-place assignment such as X[...] = ... or X += ...): "
                         "permute a copy, X[perm], and leave the caller's tensor as it was.")
                if got != expected:
                    answers.setdefault(label, (got, expected))
                else:
                    answers.setdefault(label + " (right)", (got, expected))


def _equivariance_verdict(answers) -> None:
    """2.5's verdict from the recorded answers: a pass, the hint for a recognized mistake, or generic."""
    wrong = [name for name, (got, expected) in answers.items() if got != expected]
    if not wrong:
        passed("your test says True for every layer that treats its input as a set, and False for "
               "the ones that look at the order (a circular convolution, a mirror image, a small position "
               "signal, sequences of 2 and 3 tokens), whatever the random seed.")
    said = {name.replace(" (right)", ""): got for name, (got, _) in answers.items()}
    def says(layer: str, n: int = 10) -> bool:
        return said.get(f"{layer}, {n} tokens", True)
    if all(said.values()):
        hint("your test says True for every layer, even a running sum and causal attention. Does it "
             "really permute the rows? Compare f(X[perm]) with f(X)[perm] for a permutation that is not "
             "the identity.")
    if not any(said.values()):
        hint("your test says False for every layer, even f(X) = 2 X, which is equivariant. Compare "
             "f(X[perm]) with f(X)[perm] (the same perm on both sides), within a tolerance "
             "(torch.allclose).")
    ten = [got != expected for name, (got, expected) in answers.items() if ", 10 tokens" in name]
    if ten and all(ten):
        hint("your test gives the opposite answer on every layer: True for each layer that looks at the order, "
             "False for each that treats its input as a set. Check what it returns when the two sides agree.")
    if not says("f(X) = 2 X"):
        hint("for f(X) = 2 X your test says False, yet 2 X[perm] is exactly (2 X)[perm]. Apply the same "
             "permutation on both sides: f(X[perm]) against f(X)[perm] (not against f(X), which tests "
             "invariance, and not against the inverse permutation).")
    if not says("attention with learned W_Q, W_K, W_V") and not says(
            "the same small network on every token") and says("a running sum over the tokens"):
        hint("your test says True for a running sum over the tokens and False for attention and for a network "
             "applied to each token: it permutes the features, not the tokens. The tokens are the rows of X: "
             "permute them with X[perm] (not X[:, perm]).")
    if (not says("parameter-free attention softmax(X X^T / sqrt(d)) X") or not says(
            "attention with learned W_Q, W_K, W_V")) and says("the same small network on every token"):
        hint("your test says attention is not equivariant. Summing the keys in another order rounds "
             "differently in the last bits: compare with torch.allclose, not torch.equal or ==.")
    if says("reversing the tokens, X.flip(0)") and says("rolling the tokens by one, X.roll(1, 0)") \
            and not says("a running sum over the tokens"):
        hint("your test says True for reversing the tokens and for rolling them by one: both move tokens but keep "
             "every column's sum, so a comparison of sums or means sees nothing. Compare f(X[perm]) with "
             "f(X)[perm] entry by entry (torch.allclose).")
    if says("adding a small position signal (0.05 x position)") and not says("a running sum over the tokens") \
            and not says("reversing the tokens, X.flip(0)"):
        hint("your test says True for a layer that adds 0.05 × position to every token: its tolerance is "
             "far too loose. Rounding differs in the last bits (torch.allclose's defaults); a difference of "
             "0.05 is a real one.")
    if says("adding the mirrored sequence, X + X.flip(0)") and not says("a circular convolution along the tokens"):
        hint("your test says True for X + X.flip(0), which mixes token i with token n-1-i: it passes the "
             "reversal, the one permutation you seem to try. Use random permutations (torch.randperm).")
    if says("a circular convolution along the tokens") and not says("adding the mirrored sequence, X + X.flip(0)"):
        hint("your test says True for a circular convolution along the tokens: it mixes each token with "
             "its neighbours, so it is not a set function, but a cyclic shift (torch.roll) does not "
             "reveal it. Use random permutations (torch.randperm) rather than a shift.")
    short = [name for name in wrong if not name.endswith("10 tokens")]
    if short and all(not says(layer) for layer in ("a running sum over the tokens", "causal attention")):
        hint(f"your test misses {short[0]} for some random seeds: with 2 or 3 tokens one random permutation "
             "is often the identity (or leaves the last token in place), which proves nothing. Try several "
             "permutations and require every one of them to agree (not just the first that does), or one that "
             "moves every token (a shift by one) besides random ones.")
    name = wrong[0]
    hint(f"for {name} your test says {said[name]} (for at least one random seed); the right answer is "
         f"{not said[name]}.", generic=True)


#: The layers also tried on 2 and 3 tokens: any permutation that moves a token reveals the order-aware ones.
_SHORT_OK = {"f(X) = 2 X", "parameter-free attention softmax(X X^T / sqrt(d)) X",
             "attention with learned W_Q, W_K, W_V", "a running sum over the tokens", "causal attention",
             "adding a marker to the last token", "subtracting the mean over the tokens"}


# --------------------------------------------------------------------------- 4.4
class _RunningBatchNorm:
    """BatchNorm at evaluation: fixed statistics collected beforehand (no dependence on the batch)."""

    def __init__(self, d: int):
        g = torch.Generator().manual_seed(44)
        self.mean = torch.randn(d, generator=g, dtype=torch.float64)
        self.var = torch.rand(d, generator=g, dtype=torch.float64) + 0.5

    def __call__(self, x):
        return (x - self.mean) / torch.sqrt(self.var + 1e-5)


def _map_cases(B: int, T: int, d: int) -> list[tuple[str, Callable, torch.Tensor]]:
    """(name, layer, its dependency map) for inputs of shape (B, T, d); maps built by hand, by reading
    each layer (tests/test_exercises_early_extra.py checks them against the layers' Jacobians)."""
    def layer_norm(x):
        return torch.nn.functional.layer_norm(x, (x.shape[-1],))

    def batch_norm_time(x):  # statistics over batch and time, as nn.BatchNorm1d in training
        mean = x.mean(dim=(0, 1), keepdim=True)
        var = x.var(dim=(0, 1), keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + 1e-5)

    def batch_norm_per_step(x):  # statistics over the batch only, one set per position
        mean = x.mean(dim=0, keepdim=True)
        var = x.var(dim=0, keepdim=True, unbiased=False)
        return (x - mean) / torch.sqrt(var + 1e-5)

    def causal_running_norm(x):  # position t normalized by the statistics of positions 0..t
        count = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[None, :, None]
        mean = x.cumsum(1) / count
        var = (x * x).cumsum(1) / count - mean * mean
        return (x - mean) / torch.sqrt(var.clamp_min(0) + 1e-5)

    eye = torch.eye(T, dtype=torch.bool)
    ones = torch.ones(T, T, dtype=torch.bool)
    nothing = torch.zeros(T, T, dtype=torch.bool)
    last = eye.clone()
    last[:, -1] = True
    previous = eye | eye.roll(-1, dims=1)  # s reads s - 1, and 0 reads T - 1 (wrap-around)
    following = eye | torch.ones(T, T, dtype=torch.bool).triu(1).tril(1)  # s reads s + 1
    running = ones.tril()
    running[0] = False  # position 0 is normalized by itself alone: always 0
    cases = [
        ("f(x) = 2 x", lambda x: 2 * x, eye),
        ("LayerNorm over the features", layer_norm, eye),
        # one sequence of one token: every output is 0, whatever the input
        ("BatchNorm over batch and time (training statistics)", batch_norm_time, ones if B * T > 1 else nothing),
        ("BatchNorm with running statistics (evaluation)", _RunningBatchNorm(d), eye),
        # a batch of one sequence: every output is 0
        ("BatchNorm over the batch, separately at each position", batch_norm_per_step, eye if B > 1 else nothing),
        ("a normalization by the statistics of positions 0..s", causal_running_norm, running),
        ("causal attention", lambda x: _attention(x, causal=True), ones.tril()),
        ("attention without a mask", _attention, ones),
        ("adding the last token to every position", lambda x: x + x[:, -1:], last),
        ("adding the previous token, wrapping around", lambda x: x + x.roll(1, dims=1), previous),
        ("adding the next token (position s + 1) to position s", _add_next, following),
        ("adding 0.001 times the last token", lambda x: x + 1e-3 * x[:, -1:], last),
        ("adding 0.001 times the next token", lambda x: x + 1e-3 * (_add_next(x) - x), following),
    ]
    # only the sequences after the first read ahead: a map read off sequence 0 alone misses it
    cases.append(("adding the next token, in every sequence but the first", _add_next_after_first,
                  following if B > 1 else eye))
    # the change a token makes has mean 0 over the features: comparing means misses it
    cases.append(("adding the last token, centred over its features", _add_last_centred, last))
    if T > 4:
        four = eye.clone()
        four[:, 4] = True
        cases.append(("adding token 4 to every position", lambda x: x + x[:, 4:5], four))
    return cases


def _add_next_after_first(x):
    """Sequences 1, 2, ... get x[s] + x[s + 1]; sequence 0 is left as it is."""
    return torch.cat([x[:1], _add_next(x[1:])], dim=0)


def _add_last_centred(x):
    """Every position gets the last token minus its own mean over the features."""
    last = x[:, -1:]
    return x + (last - last.mean(dim=-1, keepdim=True))


def _add_next(x):
    """Position s gets x[s] + x[s + 1] (the last position gets nothing more)."""
    return x + torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], dim=1)


#: (B, T, d, dtype, x requires grad, under no_grad): six positions; one sequence of one token; a batch of
#: one sequence in float32 whose tokens require grad; an odd number of positions under no_grad.
_MAP_INPUTS = [
    (3, 6, 4, torch.float64, False, False),
    (1, 1, 4, torch.float64, False, False),
    (1, 5, 4, torch.float32, True, False),
    (2, 7, 3, torch.float64, False, True),
]


def _bool_map(got: Any, call: str, T: int) -> torch.Tensor:
    """The student's map as a (T, T) bool tensor, or a hint."""
    if got is None:
        hint(f"{call} returned None: did you forget the `return`?")
    if isinstance(got, bool) or (isinstance(got, torch.Tensor) and got.numel() == 1 and T > 1):
        hint(f"{call} returned one answer ({describe(got)}); return the whole map, a ({T}, {T}) tensor of "
             "booleans with one entry per (output position, input position).")
    if not isinstance(got, torch.Tensor):
        hint(f"{call} should return a ({T}, {T}) tensor of booleans; it returned {describe(got)}.")
    if tuple(got.shape) != (T, T):
        hint(f"{call} should return a ({T}, {T}) map, one row per output position and one column per input "
             f"position; it has shape {tuple(got.shape)}.")
    if got.dtype != torch.bool:
        hint(f"{call} returned a map of dtype {got.dtype}; return booleans (torch.bool): for instance "
             "D = torch.zeros(T, T, dtype=torch.bool), then D[s, u] = True.")
    return got.detach()


@checker("Exercise 4.4")
def dependency_map(my_dependency_map) -> None:
    """``my_dependency_map(f, x)`` -> ``(T, T)`` bool: ``D[s, u]`` iff outputs at ``s`` change with inputs at ``u``."""
    said: dict[tuple[str, int], torch.Tensor] = {}
    expected: dict[tuple[str, int], torch.Tensor] = {}
    for B, T, d, dtype, grad, no_grad in _MAP_INPUTS:
        x = torch.randn(B, T, d, generator=torch.Generator().manual_seed(40 + T), dtype=torch.float64).to(dtype)
        for name, f, want in _map_cases(B, T, d):
            x_in = x.clone().requires_grad_(grad)
            call = f"my_dependency_map(<{name}>, x of shape {(B, T, d)})"
            with torch.random.fork_rng(devices=[]):  # the same draws on every run; the caller's state kept
                torch.manual_seed(2025)
                if no_grad:
                    with torch.no_grad():
                        got = my_dependency_map(f, x_in)
                else:
                    got = my_dependency_map(f, x_in)
            if not torch.equal(x_in.detach(), x) or x_in.requires_grad != grad or x_in.grad is not None:
                hint("your function changed x (its values, its requires_grad or its .grad): change a copy "
                     "(x.clone()) and compare outputs without backward().")
            said[name, T] = _bool_map(got, call, T)
            expected[name, T] = want
    wrong = [key for key in said if not torch.equal(said[key], expected[key])]
    if not wrong:
        passed("every map is right: LayerNorm and BatchNorm with running statistics read one position, causal "
               "attention the past, BatchNorm over time and unmasked attention everything, and a layer whose "
               "output never moves reads nothing. No True above the diagonal: the layer never sees the future.")
    maps = list(said.items())
    if all(bool(m.all()) for _, m in maps):
        hint("your map is all True for every layer, even f(x) = 2 x, whose output at s reads only position s. "
             "Change only the inputs at position u, and compare the outputs at each position s separately.")
    if not any(bool(m.any()) for _, m in maps):
        hint("your map is all False for every layer, even f(x) = 2 x. Change the inputs at position u by a "
             "visible amount (add 1, or draw new random values) and compare f's outputs before and after.")
    if all(torch.equal(m, torch.eye(m.shape[0], dtype=torch.bool)) for _, m in maps):
        hint("your map says every layer reads each position alone, even unmasked attention. Compute each "
             "entry: change position u, then look at every output position s.")
    if all(torch.equal(said[k].T, expected[k]) for k in wrong):
        hint("your map is transposed: row s is the output position, column u the input position you change. "
             "For causal attention the map is lower triangular (position s reads u <= s).")
    absorbed = ("LayerNorm over the features", "BatchNorm over the batch, separately at each position",
                "adding the last token, centred over its features")
    if all(k[0] in absorbed and not bool((said[k] & ~expected[k]).any()) for k in wrong):
        hint(f"your map misses that the output at s reads position s for {wrong[0][0]}: adding the same number "
             "to every feature of a token, or to every sequence (x[:, u] + 1), leaves a normalization unchanged, "
             "since its mean absorbs it. Change the inputs at u by different amounts (new random values).")
    small = [k for k in wrong if "0.001" in k[0]]
    if small and len(small) == len(wrong):
        hint(f"your map misses a small dependence ({small[0][0]}): an output that moves by 0.001 has changed. "
             "Compare exactly (torch.equal) or with torch.allclose's tight defaults, not with a loose tolerance.")
    constant = [k for k in wrong if not bool(expected[k].any())]
    if constant and len(constant) == len(wrong):
        name, T = constant[0]
        hint(f"for {name}, on {'one token' if T == 1 else 'a batch of one sequence'}, every output is 0 "
             "whatever the input (each value is normalized by itself alone): that layer reads nothing, its map "
             "is all False. Do not assume that a position reads itself; measure the diagonal too.")
    if all(torch.equal(said[k], expected[k] | torch.eye(k[1], dtype=torch.bool)) for k in wrong):
        hint("the diagonal of your map is always True, but a position does not always read itself (BatchNorm "
             "over a batch of one sequence outputs 0 whatever the input): measure the diagonal like every other "
             "entry.")
    name, T = wrong[0]
    bad = (said[name, T] != expected[name, T]).nonzero()[0].tolist()
    s, u = bad
    hint(f"for {name} (T = {T}) your map says D[{s}, {u}] = {bool(said[name, T][s, u])}; the outputs at position "
         f"{s} {'do' if bool(expected[name, T][s, u]) else 'do not'} change when only the inputs at position {u} "
         "change.", generic=True)


# --------------------------------------------------------------------------- 5.5
def _shift(k: int, d: int) -> torch.Tensor:
    """The block rotation M_k with p_{i+k} = p_i M_k (row vectors), built here from its formula."""
    M = torch.zeros(d, d, dtype=torch.float64)
    for j in range(d // 2):
        a = k * 10000.0 ** (-2 * j / d)
        M[2 * j, 2 * j], M[2 * j, 2 * j + 1] = math.cos(a), -math.sin(a)
        M[2 * j + 1, 2 * j], M[2 * j + 1, 2 * j + 1] = math.sin(a), math.cos(a)
    return M


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=1e-4, atol=1e-5))


@checker("Exercise 5.5", allow=("companion.positional",))  # the text allows shift_matrix
def three_back(my_three_back) -> None:
    """``my_three_back(d)`` -> ``(d, d)`` tensor ``A`` with which query ``i`` attends most to key ``i - 3``."""
    T = 200  # far past the positions an answer might special-case
    for d in (32, 64):
        A = _real_tensor(my_three_back(d), f"my_three_back({d})")
        if tuple(A.shape) != (d, d):
            hint(f"my_three_back({d}) should be a ({d}, {d}) matrix, the product W_Q W_K^T that sits "
                 f"between p_i and p_j; it has shape {tuple(A.shape)}.")
        if not bool(torch.isfinite(A).all()):
            hint(f"my_three_back({d}) holds inf or NaN.")
        if A.abs().max() == 0:
            hint("A = 0 gives every key the same score: the head attends evenly, not three tokens back.")
        P = _sinusoids(T, d)
        scores = P @ A @ P.T  # (T, T): the position-position term p_i A p_j^T
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        best = scores.argmax(dim=-1)[3:]  # queries 3.. have a key three back
        want = torch.arange(T)[3:] - 3
        if torch.equal(best, want):
            continue
        for k, what in ((3, "M_3 moves every position 3 forward (p_i M_3 = p_(i+3)): query i then looks "
                            "for the token 3 ahead, which the causal mask hides, so it settles on itself"),
                        (0, "the identity (M_0) makes each query look for its own position"),
                        (-2, "M_(-2) looks two tokens back"), (-4, "M_(-4) looks four tokens back")):
            if _close(A, _shift(k, d)):
                hint(f"{what}. You need p_i A = p_(i-3).")
        if _close(A, -_shift(-3, d)):
            hint("-M_(-3) turns the best match into the worst: the minus sign sends each query as far "
                 "as possible from i - 3.")
        offsets = (torch.arange(T)[3:] - best).tolist()
        common = max(set(offsets), key=offsets.count)
        hint(f"with your A, query i attends most to key i - {common} for {offsets.count(common)} of the "
             f"{T - 3} queries (d = {d}); it should be i - 3 for all of them. Use the shift matrix: "
             "p_i M_k = p_(i+k).", generic=True)
    passed(f"with your A, every query i from 3 to {T - 1} attends most to key i - 3, for d = 32 and 64 (M_(-3) "
           "does it because p_i M_(-3) p_j^T = p_(i-3) . p_j, largest at j = i - 3).")


# --------------------------------------------------------------------------- 5.6
def _rope(x: torch.Tensor, offset: int, layout: str = "interleaved", start: int = 0, sign: float = 1.0,
          width: int | None = None) -> torch.Tensor:
    """Reference RoPE over the last axis with positions offset + start + t along axis -2."""
    T, d = x.shape[-2:]
    width = d if width is None else width
    pos = torch.arange(offset + start, offset + start + T, dtype=torch.float64)[:, None]
    angles = sign * pos * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / width)  # (T, d/2)
    cos, sin = torch.cos(angles), torch.sin(angles)
    x = x.double()
    if layout == "halves":
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)
    out = torch.empty_like(x)
    a, b = x[..., 0::2], x[..., 1::2]
    out[..., 0::2], out[..., 1::2] = a * cos - b * sin, a * sin + b * cos
    return out


def _merged_heads(x: torch.Tensor, offset: int) -> torch.Tensor:
    """The mistake of rotating (B, T, h * d_head) with frequencies over the whole width."""
    B, h, T, dh = x.shape
    merged = x.transpose(1, 2).reshape(B, T, h * dh)
    return _rope(merged, offset).reshape(B, T, h, dh).transpose(1, 2)


@checker("Exercise 5.6", allow=("companion.positional",))  # the text allows apply_rotary
def rotary_qk(my_rotary_qk) -> None:
    """``my_rotary_qk(q, k, offset)`` -> ``(q', k')``: every head's queries and keys rotated from ``offset``."""
    g = torch.Generator().manual_seed(56)
    f64, f32 = torch.float64, torch.float32
    cases = [((2, 3, 5, 8), 0, f64, "the first example, offset 0", True),
             ((1, 2, 4, 6), 7, f64, "offset 7", False),
             ((2, 4, 1, 8), 12, f64, "one new token at offset 12", False),
             ((2, 3, 5, 8), 3, f64, "the first example's shape again, at offset 3", False),
             ((1, 2, 5, 8), 40, f64, "positions 40 to 44", False),
             ((1, 1, 3, 8), 1000, f64, "positions past 1000", False),
             ((2, 2, 3, 8), 5, f32, "float32 queries and keys", True),
             ((2, 3, 4, 6), 2, f64, "queries and keys as a layer makes them (transposed views, not contiguous)",
              False)]
    for index, ((B, h, T, dh), offset, dtype, label, classes) in enumerate(cases):
        if label.startswith("queries and keys as a layer"):
            q = torch.randn(B, T, h, dh, generator=g, dtype=dtype).transpose(1, 2)
            k = torch.randn(B, T, h, dh, generator=g, dtype=dtype).transpose(1, 2)
        else:
            q = torch.randn(B, h, T, dh, generator=g, dtype=torch.float64).to(dtype)
            k = torch.randn(B, h, T, dh, generator=g, dtype=torch.float64).to(dtype)
        for extra, grad, no_grad in ((("", False, False), (", with inputs that require gradients", True, False),
                                      (", under torch.no_grad()", False, True)) if classes else (("", False, False),)):
            where = label + extra
            call = f"my_rotary_qk(q, k, offset={offset})"
            given: list = []
            out = _diff.call(my_rotary_qk, (q, k, offset), where, grad=(0, 1) if grad else False, no_grad=no_grad,
                             name="my_rotary_qk", first=index == 0 and not extra, keep=given)
            if not torch.equal(given[0].detach(), q) or not torch.equal(given[1].detach(), k):
                hint("your function changed q or k in place; return new tensors and leave the inputs as they were "
                     "(a cache may hold them).")
            _rotary_pair(out, call, where, q, k, offset, grad, given)
    passed("every head's queries and keys turn by their absolute position, offset + t: with a cache, "
           "a new token continues where the cached ones stopped.")


def _rotary_pair(out, call, where, q, k, offset, grad, given) -> None:
    """5.6's verdict on one call: the pair's type, dtype, shape, gradients and values."""
    B, h, T, dh = q.shape
    if not isinstance(out, (tuple, list)) or len(out) != 2:  # a tuple or a list, as 1.5 and 8.6
        hint(f"{call} should return a pair (q_rotated, k_rotated); it returned {describe(out)}.")
    for part, name in zip(out, ("[0]", "[1]")):
        _real_tensor(part, call + name)
        if part.dtype != q.dtype:
            hint(f"{call}{name} has dtype {part.dtype} for inputs of dtype {q.dtype} ({where}): keep the "
                 "inputs' dtype (build the angles in it, or convert them with .to(q.dtype)).")
    shape = (B, h, T, dh)
    if tuple(out[0].shape) != shape or tuple(out[1].shape) != shape:
        hint(f"{call} should keep the shape (B, h, T, d_head) = {shape}; got {tuple(out[0].shape)} and "
             f"{tuple(out[1].shape)} ({where}).", generic=True)
    q_out, k_out = out[0].detach().double(), out[1].detach().double()
    q, k = q.double(), k.double()
    q_ref, k_ref = _rope(q, offset), _rope(k, offset)
    strict = dict(rtol=1e-9, atol=1e-12) if out[0].dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5)
    if bool(torch.allclose(q_out, q_ref, **strict)) and bool(torch.allclose(k_out, k_ref, **strict)):
        if grad:  # in the grader each item of the pair comes back with its backward pass relayed to the kernel
            if not (out[0].requires_grad and out[1].requires_grad):
                hint(f"no gradient reaches q and k through {call} ({where}): .detach(), .data, NumPy or "
                     "torch.no_grad() inside cut the graph, and a model trains through RoPE.")
            weights = torch.randn(shape, generator=torch.Generator().manual_seed(560), dtype=torch.float64)
            try:
                got = torch.autograd.grad((out[0] * weights.to(out[0].dtype)).sum()
                                          + (out[1] * weights.to(out[1].dtype)).sum(), given[:2], allow_unused=True)
            except RuntimeError as exc:
                hint(f"backward through the result of {call} fails ({where}): {str(exc).splitlines()[0]}")
            back = _rope(weights, offset, sign=-1.0)  # a rotation's transpose turns the other way
            for grad_got, name in zip(got, ("q", "k")):
                if grad_got is None or not _close(grad_got.double(), back):
                    hint(f"the gradient with respect to {name} through {call} is not RoPE's ({where}): compute "
                         "the rotation from q and k with differentiable tensor operations.")
        return
    if _close(q_out, q_ref) and _close(k_out, k_ref):
        hint(f"{call} ({where}) agrees only to about 7 digits: part of your computation (the positions, the "
             "angles or their table) runs in float32. Keep the inputs' dtype all the way.")
    if _close(q_out, q_ref) and _close(k_out, k):
        hint("the queries are rotated but the keys are not: RoPE turns both, or q_i . k_j would depend on "
             "i alone.")
    if _close(q_out, q) and _close(k_out, k_ref):
        hint("the keys are rotated but the queries are not: RoPE turns both.")
    if offset and _close(q_out, _rope(q, 0)) and _close(k_out, _rope(k, 0)):
        hint(f"the new tokens were turned as if they stood at positions 0, 1, ...; after a cache of "
             f"{offset} tokens they stand at positions {offset}, {offset + 1}, ...: add the offset.")
    if _close(q_out, _rope(q, offset, start=1)) and _close(k_out, _rope(k, offset, start=1)):
        hint("positions start at offset, not offset + 1: the first token of a fresh sequence is not "
             "rotated at all.")
    if _close(q_out, _rope(q, offset, layout="halves")) and _close(k_out, _rope(k, offset, layout="halves")):
        hint("you paired feature j with feature j + d_head/2 (Hugging Face's rotate_half layout). That is "
             "a valid convention, a permutation of this one, but here the pairs are (2j, 2j + 1), as in "
             "the chapter and in apply_rotary.")
    if _close(q_out, _rope(q, offset, sign=-1.0)) and _close(k_out, _rope(k, offset, sign=-1.0)):
        hint("you turned clockwise (the angle -t w): it works as long as queries and keys agree, but "
             "this exercise follows the chapter, counterclockwise: (x0 cos a - x1 sin a, x0 sin a + x1 cos a).")
    if h > 1 and _close(q_out, _merged_heads(q, offset)) and _close(k_out, _merged_heads(k, offset)):
        hint("you rotated the merged width h * d_head with its frequencies: RoPE works inside each head, "
             "with the frequencies 10000**(-2j/d_head) of d_head features, the same in every head.")
    if T > 1 and _close(q_out, _rope(q, offset, width=h * dh)):
        hint("the frequencies must come from the head's width d_head, 10000**(-2j/d_head), not from "
             "the model's width.")
    if T > 1 and T != h and _close(q_out, _rope(q.transpose(1, 2), offset).transpose(1, 2)):
        hint("you counted positions along the heads axis: in (B, h, T, d_head) the positions are axis 2 "
             "(T), the third axis.")
    hint(f"{call} fails on {where}: it differs from RoPE applied in every head from position {offset}.",
         generic=True)
