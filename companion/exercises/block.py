"""Checkers for chapter 6, *The transformer block*.

* 6.1 ``my_block_forward(block, x)``: the causal forward pass of a pre-norm ``TransformerBlock``,
  written from its parameters (the student's own LayerNorm, multi-head attention and
  feed-forward network), compared with ``block(x, is_causal=True)`` on blocks and inputs generated
  per class (one head, one position, a batch of one, odd sizes, GELU, no biases, float64, an x that
  requires grad, a call under ``no_grad``, a fresh draw). The call must not run the block or its
  sublayers, nor the library's attention or normalization, and must leave the block's mode, its
  parameters and gradients, x, the grad mode and torch's random state as they were. Wrong outputs
  are matched against the classic slips (post-norm, no causal mask, no 1/sqrt(d_head), heads not
  split, the residual adding the normalized input, the unbiased variance, the activation ignored,
  weights used untransposed, the output projection forgotten), named with the class that showed them.
* 6.2 ``my_crossover(d, d_ff)``: the length at which attention's scores cost as many FLOPs as the
  block's dense layers, derived for any ``d_ff``.
* 6.3 ``my_block_params(d_model, n_heads, d_ff)``: the parameter count of one block (the wrong
  ``d_ff``, no biases or LayerNorms, no output projection, multiplied by the number of heads).
"""
from __future__ import annotations

import math

import torch

import torch.nn.functional as F

from ._core import (unseeded_rng, StudentError, as_count, as_number, checker, close, describe, first_difference, hint, passed,
                    require_graph)
from .rules import is_remote, watch

__all__ = ["block_forward", "crossover", "block_params"]


_FORBIDDEN = ("scaled_dot_product_attention", "multi_head_attention_forward", "layer_norm", "native_layer_norm",
              "group_norm", "rms_norm", "transformer_encoder_layer_fwd", "_transformer_encoder_layer_fwd")


def _ln(x, norm, unbiased=False, eps=None):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, keepdim=True, unbiased=unbiased)
    out = (x - mean) / torch.sqrt(var + (norm.eps if eps is None else eps)) * norm.weight
    return out if norm.bias is None else out + norm.bias


def _linear(x, layer, transpose=True):
    W = layer.weight.T if transpose else layer.weight
    return x @ W if layer.bias is None else x @ W + layer.bias


def _act(h, name):
    if name == "relu":
        return torch.relu(h)
    return F.gelu(h, approximate="tanh" if name == "gelu_tanh" else "none")


def _block_ref(block, x, *, post=False, causal=True, scale=True, split=True, residual_normed=False, unbiased=False,
               activation=None, transpose=True, out_proj=True, eps1=None, eps2=None):
    """The pre-norm block's causal forward from its parameters, with one switch per classic slip."""
    a = block.attn
    h_heads = a.n_heads if split else 1
    activation = block.ff.activation if activation is None else activation

    def attention(z):
        B, T, d = z.shape
        dh = d // h_heads
        q, k, v = (_linear(z, lin, transpose).view(B, T, h_heads, dh).transpose(1, 2)
                   for lin in (a.q_proj, a.k_proj, a.v_proj))
        scores = q @ k.transpose(-2, -1) / (math.sqrt(dh) if scale else 1.0)
        if causal:
            scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, T, d)
        return _linear(out, a.out_proj, transpose) if out_proj else out

    def ff(z):
        return _linear(_act(_linear(z, block.ff.linear1, transpose), activation), block.ff.linear2, transpose)

    n1 = lambda z: _ln(z, block.norm1, unbiased, eps1)  # noqa: E731
    n2 = lambda z: _ln(z, block.norm2, unbiased, eps2)  # noqa: E731
    if post:
        h = n1(x + attention(x))
        return n2(h + ff(h))
    h = (n1(x) if residual_normed else x) + attention(n1(x))
    return (n2(h) if residual_normed else h) + ff(n2(h))


def _block_cases():
    from companion.block import TransformerBlock

    cases = []
    table = [
        ("a block of width 8 with 2 heads", (2, 5, 8, 2), 0, {}, ""),
        ("one head", (2, 4, 6, 1), 1, {}, ""),
        ("a batch of one", (1, 6, 8, 4), 2, {}, ""),
        ("one position (T = 1)", (3, 1, 8, 2), 3, {}, ""),
        ("odd sizes (T = 7, d = 6, 3 heads)", (2, 7, 6, 3), 4, {}, ""),
        ("a GELU block", (2, 5, 8, 2), 5, {"activation": "gelu"}, ""),
        ("GPT-2's tanh GELU", (2, 5, 8, 2), 6, {"activation": "gelu_tanh"}, ""),
        ("a block without biases", (2, 5, 8, 2), 7, {"bias": False}, ""),
        ("a float64 block", (2, 6, 8, 2), 8, {}, "double"),
        ("an x that requires grad", (2, 5, 8, 2), 9, {}, "grad"),
        ("a call under torch.no_grad()", (2, 5, 8, 2), 10, {}, "no_grad"),
        ("LayerNorms with their own eps (block.norm1.eps = 0.3, block.norm2.eps = 0.05)", (2, 5, 8, 2), 11, {},
         "eps"),
        ("a fresh random draw", (2, 9, 12, 3), None, {}, ""),
    ]
    for name, (B, T, d, h), seed, kw, extra in table:
        g = torch.Generator()
        if seed is None:
            g.seed()
        else:
            g.manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=g)))
            block = TransformerBlock(d, h, d_ff=3 * d, norm_first=True, **kw).eval()
            with torch.no_grad():  # LayerNorm scales and shifts away from 1 and 0
                for norm in (block.norm1, block.norm2):
                    norm.weight.add_(0.5 * torch.randn(d))
                    if norm.bias is not None:
                        norm.bias.add_(0.5 * torch.randn(d))
        if extra == "eps":  # x near constant per token: its variance is comparable to eps
            block.norm1.eps, block.norm2.eps = 0.3, 0.05
        dtype = torch.float64 if extra == "double" else torch.float32
        block = block.to(dtype)
        x = torch.randn(B, T, d, generator=g, dtype=dtype) * (0.3 if extra == "eps" else 2) + 1
        if extra == "grad":
            x.requires_grad_(True)
        cases.append((name, block, x, extra == "no_grad", None))
    # The first block again, after a training step changed its weights, with a new x of the same shape:
    # an answer that remembers earlier outputs (per block, per shape) gives the old ones.
    name0, block0, x0, _, _ = cases[0]
    g = torch.Generator().manual_seed(12)
    step = {n: 0.1 * torch.randn(p.shape, generator=g, dtype=p.dtype) for n, p in block0.named_parameters()}

    def train_step(block=block0, step=step):
        with torch.no_grad():
            for n, p in block.named_parameters():
                p.add_(step[n])

    cases.append(("the first block again, after its weights changed, with a new x of the same shape", block0,
                  torch.randn(x0.shape, generator=g, dtype=x0.dtype) * 2 + 1, False, train_step))
    return cases


def _calls_modules(block):
    """Forward hooks on the block and its sublayers: the names of those the student's code runs."""
    ran: list[str] = []
    handles = [m.register_forward_pre_hook(lambda mod, args, name=n: ran.append(name or "the block"))
               for n, m in block.named_modules() if n in ("", "attn", "norm1", "norm2", "ff", "ff.linear1", "ff.linear2",
                                                          "attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj")]
    return ran, handles


def _check_parameter_gradients(my_block_forward, block, x) -> None:
    """The output's gradient reaches every parameter of the block, equal to the block's own: training
    the block through the student's forward pass must work (no ``.detach()`` of a weight)."""
    if is_remote(my_block_forward):  # a grader's proxy: the graph stays in the student's kernel
        return
    params = [p for _, p in block.named_parameters()]
    names = [n for n, _ in block.named_parameters()]
    weight = torch.randn(x.shape, generator=torch.Generator().manual_seed(13), dtype=x.dtype)
    out = my_block_forward(block, x.detach())
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        hint("no gradient reaches the block's parameters: the output does not require grad. Compute with the "
             "parameters themselves (no .detach(), .data or torch.no_grad()).")
    got = torch.autograd.grad((out * weight).sum(), params, allow_unused=True)
    right = torch.autograd.grad((block(x.detach(), is_causal=True) * weight).sum(), params)
    for n, g, r in zip(names, got, right):
        if g is None:
            hint(f"no gradient reaches block.{n}: your code cuts it (.detach() or .data of the parameter, or a "
                 "copy made with torch.tensor). Training the block through your forward pass would not move it.")
        if not close(g, r, rtol=1e-3, atol=1e-5):
            hint(f"the gradient of block.{n} differs from the block's own: {first_difference(g, r)}.", generic=True)


@checker("Exercise 6.1")
def block_forward(my_block_forward) -> None:
    """``my_block_forward(block, x)``: ``block(x, is_causal=True)`` for a pre-norm ``TransformerBlock`` in
    evaluation mode, from its parameters and tensor arithmetic."""
    attempted, unwritten, outputs = [], [], []
    for name, block, x, no_grad, before in _block_cases():
        if before is not None:
            before()
        x_in = x.detach().clone().requires_grad_(x.requires_grad)
        params = {n: p.detach().clone() for n, p in block.named_parameters()}
        wants_grad = {n: p.requires_grad for n, p in block.named_parameters()}
        ran, handles = _calls_modules(block)
        rng, grad_mode = unseeded_rng(), torch.is_grad_enabled()
        try:
            with watch() as seen:
                if no_grad:
                    with torch.no_grad():
                        out = my_block_forward(block, x_in)
                        inside = torch.is_grad_enabled()
                else:
                    out = my_block_forward(block, x_in)
                    inside = torch.is_grad_enabled()
        except StudentError as raised:
            if isinstance(raised.error, NotImplementedError):
                if attempted:
                    hint(f"your function raised NotImplementedError on {name}: that branch is not written yet.")
                unwritten.append((name, raised))
                continue
            raise
        finally:
            for handle in handles:
                handle.remove()
        attempted.append(name)
        if ran:
            where = "the block itself, block(x)" if ran[0] == "the block" else f"block.{ran[0]}(...)"
            hint(f"your function runs {where}; the exercise is to compute the block from its "
                 "parameters (block.attn.q_proj.weight, block.norm1.weight, ...) with tensor arithmetic.")
        calls = seen.called(*_FORBIDDEN)
        if calls:
            hint(f"your function calls the library's {calls[0]}; write attention and LayerNorm with tensor "
                 "arithmetic (softmax and matrix products; mean, var, sqrt).")
        if block.training:
            hint(f"on {name} your function left the block in training mode: leave its mode as it was (eval).")
        if no_grad and inside:
            hint(f"on {name}, called under torch.no_grad(), your function switched gradients back on.")
        if torch.is_grad_enabled() != grad_mode:
            hint(f"on {name} your function left the grad mode changed: restore it.")
        if not torch.equal(rng, torch.get_rng_state()):
            hint(f"on {name} your function drew from torch's global random generator; the block in evaluation "
                 "mode is deterministic.")
        for n, p in block.named_parameters():
            if p.dtype != params[n].dtype or not torch.equal(p.detach(), params[n]):
                hint(f"on {name} your function changed the block's parameter {n}: read the parameters, never write them.")
            if p.grad is not None:
                hint(f"on {name} your function left a gradient in block.{n}.grad (a backward() inside): "
                     "a forward pass only computes the output.")
            if p.requires_grad != wants_grad[n]:
                hint(f"on {name} your function changed block.{n}.requires_grad (to {p.requires_grad}): the block "
                     "could no longer be trained. Read the parameters, never change them.")
        if x.requires_grad != x_in.requires_grad or x_in.grad is not None:
            hint(f"on {name} your function changed requires_grad or .grad of x: leave the caller's tensor as it was.")
        if not isinstance(out, torch.Tensor) or out.is_meta or out.is_complex() or out.dtype == torch.bool:
            hint(f"your function should return a real tensor; on {name} it returned {describe(out)} (wrong type).")
        if tuple(out.shape) != tuple(x.shape):
            hint(f"on {name} the output must have x's shape {tuple(x.shape)} (got {tuple(out.shape)}).", generic=True)
        if out.dtype != x.dtype:
            hint(f"on {name} the output is {out.dtype} for a {x.dtype} block and x: keep x's dtype.")
        with torch.no_grad():
            right = block(x.detach(), is_causal=True)
        tol = dict(rtol=1e-4, atol=1e-5) if x.dtype == torch.float32 else dict(rtol=1e-9, atol=1e-10)
        got = out.detach()
        outputs.append(got)
        if close(got, right, **tol):
            continue
        if before is not None and outputs[0].shape == got.shape and close(got, outputs[0], **tol):
            hint(f"on {name}, your function returned what it returned for the first call with this block and "
                 "shape: it remembers earlier outputs, but the weights and x are new. Compute every call from the "
                 "block and the x it is given.")
        with torch.no_grad():
            xd = x.detach()
            mistakes = [
                ("that is the post-norm block: normalize after each sum. This block is pre-norm: "
                 "h = x + attention(norm1(x)), out = h + ff(norm2(h)).", dict(post=True)),
                ("the causal mask is missing: position t must not see the positions after t "
                 "(scores above the diagonal set to -inf).", dict(causal=False)),
                ("the scores are not divided by sqrt(d_head) (the width of one head, d / n_heads).", dict(scale=False)),
                ("the heads are not split: the block has block.attn.n_heads heads, each of width d / n_heads, "
                 "each with its own softmax.", dict(split=False)),
                ("the residual adds the normalized input: h = x + attention(norm1(x)), with x itself, not norm1(x).",
                 dict(residual_normed=True)),
                ("LayerNorm uses the biased variance (divide by d, unbiased=False).", dict(unbiased=True)),
                ("the feed-forward activation is block.ff.activation ('relu', 'gelu' exact, or 'gelu_tanh'); "
                 "you always used the ReLU.", dict(activation="relu")),
                ("the feed-forward activation is block.ff.activation; 'gelu_tanh' is GPT-2's tanh approximation, "
                 "F.gelu(h, approximate='tanh').", dict(activation="gelu")),
                ("nn.Linear stores its weight as (out, in): a layer computes x @ weight.T + bias; you used weight "
                 "without the transpose.", dict(transpose=False)),
                ("the attention output goes through the output projection block.attn.out_proj before the residual sum.",
                 dict(out_proj=False)),
                (f"each LayerNorm adds its own eps: block.norm1.eps ({block.norm1.eps:g}) and block.norm2.eps "
                 f"({block.norm2.eps:g}); you used 1e-5.", dict(eps1=1e-5, eps2=1e-5)),
                (f"each LayerNorm adds its own eps: block.norm2.eps ({block.norm2.eps:g}) in the second one; you "
                 f"used block.norm1.eps ({block.norm1.eps:g}) for both.", dict(eps2=block.norm1.eps)),
            ]
            for message, switch in mistakes:
                try:
                    wrong = _block_ref(block, xd, **switch)
                except Exception:  # noqa: BLE001 - a slip that does not apply to this block
                    continue
                if wrong.shape == got.shape and close(got, wrong, **tol):
                    hint(f"on {name}: {message}")
            if x.dtype == torch.float64 and close(got, right, rtol=1e-4, atol=1e-5):
                hint(f"on {name} your values are right to float32 precision only: compute in x's dtype (float64).")
        hint(f"on {name} the output differs from block(x, is_causal=True): {first_difference(got, right)}.",
             generic=True)
    if unwritten:
        raise unwritten[0][1]
    name, block, x, _, _ = _block_cases()[0]
    require_graph(lambda x: my_block_forward(block, x), (x,))
    _check_parameter_gradients(my_block_forward, block, x)
    passed("LayerNorm, causal multi-head attention, residual, LayerNorm, feed-forward, residual: the block "
           "is yours, equal to TransformerBlock(norm_first=True).")


@checker("Exercise 6.2")
def crossover(my_crossover) -> None:
    """``my_crossover(d, d_ff)``: the length n at which attention's scores and weighted sum (4 n^2 d FLOPs)
    cost as much as the block's four projections and feed-forward network (8 n d^2 + 4 n d d_ff)."""
    for d, d_ff in ((64, 256), (512, 2048), (7, 3), (1, 1), (768, 3072), (4096, 14336), (100, 0), (33, 1000)):
        call = f"my_crossover({d}, {d_ff})"
        got = as_number(my_crossover(d, d_ff), call)
        right = 2 * d + d_ff
        if got == right or (math.isfinite(got) and abs(got - right) <= 1e-9 * right):
            continue
        wrong = {6 * d: f"{call}: 6 d is the crossover for d_ff = 4 d only; derive it for any d_ff.",
                 2 * d + 2 * d_ff: f"{call}: the feed-forward network costs 4 n d d_ff FLOPs (two products of "
                                   "2 n d d_ff each), not 8 n d d_ff.",
                 4 * d + d_ff: f"{call}: the four projections cost 8 n d^2 FLOPs, so they add 2 d to n, not 4 d.",
                 d + d_ff: f"{call}: four projections (Q, K, V and the output), 8 n d^2 FLOPs: 2 d, not d.",
                 1.5 * d_ff: f"{call}: scaling 6 d by d_ff / 4 d also scales the projections' share; only the "
                             "feed-forward term depends on d_ff.",
                 (2 * d + d_ff) / 2: f"{call}: attention costs 4 n^2 d FLOPs (scores and weighted sum, 2 n^2 d "
                                     "each), not 8 n^2 d: set 4 n^2 d = 8 n d^2 + 4 n d d_ff.",
                 2 * (2 * d + d_ff): f"{call}: attention costs 4 n^2 d FLOPs (scores and weighted sum, 2 n^2 d "
                                     "each); set 4 n^2 d = 8 n d^2 + 4 n d d_ff and divide by 4 n d."}
        for value, message in wrong.items():
            if got == value:
                hint(message)
        hint(f"{call} returned {got}, which is not the length where 4 n^2 d = 8 n d^2 + 4 n d d_ff.", generic=True)
    passed("n = 2 d + d_ff: 6 d for GPT-2's d_ff = 4 d, less for a narrower feed-forward network.")


def _right_count(d: int, d_ff: int, cross: bool, bias: bool) -> int:
    """One pre-norm block: self-attention, cross-attention (if asked) and the feed-forward network, each
    with its own LayerNorm; bias=False: no bias anywhere, LayerNorms without their shift."""
    b = 1 if bias else 0
    attention = 4 * d * d + b * 4 * d
    norm = d + b * d
    ff = 2 * d * d_ff + b * (d_ff + d)
    n = 2 if cross else 1
    return n * attention + (n + 1) * norm + ff


# (label, d_model, d_ff, cross_attention, bias): the edge classes of the input space
_BLOCK_CASES = [
    ("GPT-2 small's block (d_model 768, d_ff 3072, biases)", 768, 3072, False, True),
    ("a decoder block of the original transformer (512, 2048, cross-attention, biases)", 512, 2048, True, True),
    ("a block without biases (bias=False)", 768, 3072, False, False),
    ("a decoder block without biases", 64, 256, True, False),
    ("d_ff that is not 4 d_model", 30, 7, False, True),
    ("a decoder block with d_ff that is not 4 d_model", 30, 7, True, True),
    ("d_model = d_ff = 1", 1, 1, True, True),
    ("odd sizes without biases", 33, 100, False, False),
]


def _block_mistakes(d, d_ff, cross, bias):
    """(count, hint) for the counting mistakes a student can make, on one case."""
    b = 1 if bias else 0
    right = _right_count(d, d_ff, cross, bias)
    attention, norm = 4 * d * d + b * 4 * d, d + b * d
    out = [
        (_right_count(d, 4 * d, cross, bias), "use the d_ff you are given, not 4 * d_model: the ratio is a choice "
         "of configuration."),
        (_right_count(d, d, cross, bias), "the hidden layer of the feed-forward network has d_ff units: linear1 is "
         "d_model x d_ff, linear2 d_ff x d_model."),
    ]
    if cross:
        out += [
            (_right_count(d, d_ff, False, bias), "with cross_attention=True the block has a second attention "
             "sublayer (queries from the target, keys and values from the encoder), with its own four projections "
             "and its own LayerNorm."),
            (right - norm, "the cross-attention sublayer has its own LayerNorm: three LayerNorms in a decoder "
             "block, one before each sublayer."),
            (right - attention, "the cross-attention has its own four projections (W_Q, W_K, W_V and W_O); it "
             "shares nothing with the self-attention."),
            (right - d * d - b * d, "the cross-attention has four projections too, W_O included."),
            (right - 2 * d * d - 2 * b * d, "the cross-attention's keys and values read the encoder's output with "
             "their own d_model x d_model projections: count all four of its projections."),
        ]
    if bias:
        out += [
            (right - (2 + cross) * d, "each LayerNorm has a scale and a shift, d_model each."),
            (right - (4 * (1 + cross) + 1) * d - d_ff, "with bias=True every linear layer has one bias per output "
             "feature: d_model for each attention projection, d_ff and d_model in the feed-forward network."),
            (right - d_ff - d, "the feed-forward biases are missing: d_ff for the first layer and d_model for the "
             "second."),
            (right - 4 * (1 + cross) * d, "the attention projections' biases are missing: d_model for each of W_Q, "
             "W_K, W_V and W_O."),
        ]
    else:
        out += [
            (right + (2 + cross) * d, "with bias=False the LayerNorms have no shift either (nn.LayerNorm(d, "
             "bias=False)): only their scale, d_model each."),
            (right - (2 + cross) * d, "with bias=False the LayerNorms keep their scale, d_model each; only the "
             "shift goes."),
            (_right_count(d, d_ff, cross, True) - (2 + cross) * d, "with bias=False no linear layer has a bias "
             "either: the attention projections and the feed-forward layers lose theirs."),
            (_right_count(d, d_ff, cross, True), "with bias=False there are no biases to count, and the LayerNorms "
             "have no shift."),
        ]
    out.append((right - norm * (2 + cross), "the LayerNorms have parameters too: one before each sublayer."))
    return out


@checker("Exercise 6.3")
def block_params(my_block_params) -> None:
    """``my_block_params(d_model, d_ff, cross_attention, bias)``: parameters of one pre-norm block: self-attention,
    cross-attention with its own LayerNorm when asked, the feed-forward network; ``bias=False``: no bias anywhere,
    LayerNorms without their shift."""
    calls = [f"my_block_params({d}, {d_ff}, {cross}, {bias})" for _, d, d_ff, cross, bias in _BLOCK_CASES]
    answers = [as_count(my_block_params(*case[1:]), call) for case, call in zip(_BLOCK_CASES, calls)]
    rights = [_right_count(*case[1:]) for case in _BLOCK_CASES]
    if answers != rights and len(set(answers)) == 1:
        hint(f"you returned {answers[0]:,} whatever the arguments: compute the count from d_model, d_ff, "
             "cross_attention and bias.")
    # a mistake is named only when it explains every case that fails (counts of two mistakes can coincide)
    failing = [(case, call, got) for case, call, got, right in zip(_BLOCK_CASES, calls, answers, rights)
               if got != right]
    if failing:
        explained = [[m for wrong, m in _block_mistakes(*case[1:]) if got == wrong] for case, _, got in failing]
        common = [m for m in explained[0] if all(m in e for e in explained[1:])]
        (label, *_), call, got = failing[0]
        if common:
            hint(f"{call} ({label}) returned {got:,}: {common[0]}")
        hint(f"{call} returned {got:,}: that is not the number of parameters, on {label}. Add each sublayer: "
             "attention's four d_model x d_model projections, the feed-forward network's two layers, one LayerNorm "
             "per sublayer, and the biases only when bias is True.", generic=True)
    passed("a decoder block adds one attention and one LayerNorm, 4 d^2 + 6 d with biases; bias=False drops "
           "every bias and the LayerNorms' shifts.")
