"""Checkers for the exercises of chapter 3 (multi-head attention)."""
from __future__ import annotations

import math
import re

import torch

from . import _diff
from ._core import require_graph, describe, as_count, checker, close, first_difference, hint, passed, require_tensor, source_facts


def _count(d, h, dh, bias):
    """Multi-head attention with n_heads heads of width d_head: three projections d -> h d_head, one back."""
    inner = h * dh
    return 3 * (d * inner + (inner if bias else 0)) + inner * d + (d if bias else 0)


# (label, d_model, n_heads, d_head, bias): the edge classes of the input space
_COUNT_CASES = [
    ("the usual shape, d_head = d_model / n_heads, with biases", 512, 8, 64, True),
    ("the usual shape without biases", 768, 12, 64, False),
    ("one head", 64, 1, 64, True),
    ("heads wider than d_model / n_heads (Gemma 7B: 16 heads of 256 on d = 3072)", 3072, 16, 256, False),
    ("heads wider than d_model / n_heads, with biases", 3072, 16, 256, True),
    ("heads narrower than d_model / n_heads", 96, 4, 8, True),
    ("heads of width 1", 10, 3, 1, True),
    ("odd sizes (n_heads does not divide d_model)", 7, 3, 5, True),
    ("odd sizes without biases", 7, 3, 5, False),
    ("one head narrower than d_model", 6, 1, 2, False),
]


def _count_mistakes(d, h, dh, bias):
    """(count, hint) for the mistakes a student can make in counting, on one case."""
    inner, usual = h * dh, d // h
    w = 4 * d * inner  # every weight of the right answer
    b = 3 * inner + d if bias else 0
    usual_width = ("that is the count for heads of width d_model // n_heads (the usual layer's 4 d_model^2, "
                   "+ 4 d_model): here each head has the width d_head that the call passes, so the query, key and "
                   "value projections are d_model x (n_heads * d_head), and W_O is (n_heads * d_head) x d_model; "
                   "they are d_model x d_model only when n_heads * d_head = d_model.")
    return [
        (4 * d * d + (4 * d if bias else 0), usual_width),
        (4 * d * h * usual + (3 * h * usual + d if bias else 0), usual_width),
        (3 * d * inner + d * d + (3 * inner + d if bias else 0), "W_O reads the concatenated heads, "
         "n_heads * d_head features, and writes d_model: it is (n_heads * d_head) x d_model, not d_model x d_model."),
        (3 * d * inner + (3 * inner if bias else 0), "you counted W_Q, W_K and W_V but forgot the output "
         "projection W_O (and its biases)."),
        (w + (4 * d if bias else 0), "the biases: the query, key and value layers each have one bias per output "
         "feature, n_heads * d_head of them; only W_O has d_model."),
        (w + (4 * inner if bias else 0), "the biases: W_O has one bias per output feature, and it outputs d_model "
         "features, not n_heads * d_head."),
        (w, "with bias=True each of the four layers also has one bias per output feature."),
        (w + 3 * inner + d, "with bias=False there are no biases to count."),
        (4 * d * dh + (3 * dh + d if bias else 0), "that is one head: the n_heads heads each have their own "
         "d_model x d_head slices of W_Q, W_K and W_V, and W_O reads all of them."),
        (w + (3 * dh + d if bias else 0), "the biases: the query, key and value layers have n_heads * d_head "
         "outputs each (all heads together), so n_heads * d_head biases each."),
        (4 * d * d * h + (4 * d if bias else 0), "each head is d_model x d_head, not d_model x d_model."),
    ]


@checker("Exercise 3.1")
def parameter_count(my_count) -> None:
    """``my_count(d_model, n_heads, d_head, bias)``: parameters of multi-head attention whose heads have width
    ``d_head`` (queries, keys and values d -> n_heads d_head, output n_heads d_head -> d)."""
    for label, d, h, dh, bias in _COUNT_CASES:
        call = f"my_count({d}, {h}, {dh}, {bias})"
        got = as_count(my_count(d, h, dh, bias), call)
        expected = _count(d, h, dh, bias)
        if got == expected:
            continue
        for wrong, message in _count_mistakes(d, h, dh, bias):
            if got == wrong:
                hint(f"{call} ({label}) returned {got:,}: {message}")
        hint(f"{call} returned {got:,}: that is not the number of parameters, on {label}. Count each of the four "
             "linear layers as (inputs x outputs) weights plus one bias per output.", generic=True)
    passed("3 d (h d_head) + (h d_head) d weights, 3 h d_head + d biases: equal to 4 d^2 + 4 d only when "
           "h d_head = d.")


# (label, B, T, d_model, n_heads, dtype): the edge classes of the input space
_QKV_CASES = [
    ("the example's shape (2, 5, 3 x 16), 4 heads", 2, 5, 16, 4, torch.float32),
    ("a batch of one", 1, 4, 12, 3, torch.float32),
    ("a single token", 3, 1, 8, 2, torch.float32),
    ("one head", 2, 3, 6, 1, torch.float32),
    ("heads of width 1", 2, 3, 5, 5, torch.float32),
    ("odd sizes (B = 3, T = 7, 5 heads of 3)", 3, 7, 15, 5, torch.float32),
    ("float64", 2, 4, 12, 2, torch.float64),
]


def _qkv_reference(qkv, h):
    B, T, three_d = qkv.shape
    return tuple(qkv.reshape(B, T, 3, h, three_d // (3 * h)).permute(2, 0, 3, 1, 4))


def _qkv_mistakes(qkv, h):
    """(q, k, v, hint) for the mistakes of the layout a student can make."""
    B, T, three_d = qkv.shape
    d = three_d // 3
    dh = d // h
    ref = _qkv_reference(qkv, h)
    per_head = qkv.reshape(B, T, h, 3, dh).permute(3, 0, 2, 1, 4)
    fast_head = qkv.reshape(B, T, 3, dh, h).permute(2, 0, 4, 1, 3)
    parts_fast = qkv.reshape(B, T, h, dh, 3).permute(4, 0, 2, 1, 3)
    straight = qkv.reshape(B, 3, h, T, dh).transpose(0, 1)
    straight2 = qkv.reshape(3, B, h, T, dh)
    no_transpose = qkv.reshape(B, T, 3, h, dh).permute(2, 0, 1, 3, 4)
    return [
        (tuple(per_head), "you read the features head by head (the queries, keys and values of head 0, then of head "
         "1, ...), a layout some libraries use; here all d queries come first, then the d keys, then the d values, "
         "and within each part head r holds features r * d_head to (r + 1) * d_head - 1."),
        (tuple(fast_head), "within each part the head index must be the slower one: feature f of the queries belongs "
         "to head f // d_head, so view each part as (h, d_head), not (d_head, h)."),
        (tuple(parts_fast), "the part (query, key or value) is the slowest index of the last axis: the first d "
         "features are the queries; it is not the fastest one."),
        (tuple(straight), "reshaping straight to (B, 3, h, T, d_head) mixes the tokens: view as (B, T, 3, h, d_head) "
         "first, then move the axes."),
        (tuple(straight2), "reshaping straight to (3, B, h, T, d_head) mixes the tokens: view as (B, T, 3, h, d_head) "
         "first, then move the axes."),
        (tuple(no_transpose), "each of q, k, v should be (B, n_heads, T, d_head), heads before tokens: you left them "
         "as (B, T, n_heads, d_head)."),
        ((ref[1], ref[0], ref[2]), "queries and keys are swapped: the first d features are the queries."),
        ((ref[2], ref[1], ref[0]), "the parts are in the wrong order: queries first, then keys, then values."),
        (tuple(t.transpose(-2, -1) for t in ref), "the last two axes are swapped: each head holds (T, d_head), one "
         "row per token."),
    ]


def _three(got, text):
    """The student's (q, k, v): a tuple or a list of three tensors."""
    if isinstance(got, torch.Tensor):
        if got.dim() == 5 and got.shape[0] == 3:
            hint(f"{text} returned one stacked tensor of shape {tuple(got.shape)}: return the three tensors "
                 "(q, k, v), for example with .unbind(0).")
        hint(f"wrong type: {text} should return three tensors (q, k, v); it returned one tensor of shape "
             f"{tuple(got.shape)}.")
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        hint(f"wrong type: {text} should return three tensors (q, k, v), as a tuple; it returned {describe(got)}.")
    return [_diff.real_tensor(t, text, "three tensors (q, k, v)") for t in got]


def _same_triple(got, expected, label, text, precision_hint=True):
    return all(_diff.same_values(g, e, label, text, name, precision_hint=precision_hint)
               for g, e, name in zip(got, expected, "qkv"))


@checker("Exercise 3.2")
def split_qkv(my_split_qkv) -> None:
    """``my_split_qkv(qkv, n_heads)``: the output of one fused projection, (B, T, 3 d) laid out as
    [queries | keys | values], -> (q, k, v), each (B, n_heads, T, d / n_heads)."""
    g = torch.Generator().manual_seed(32)
    runs = [(label, B, T, d, h, dtype, False, False, True) for label, B, T, d, h, dtype in _QKV_CASES]
    runs.append(("random values", 2, 3, 12, 3, torch.float32, False, False, False))
    runs.append(("an input with requires_grad", 2, 3, 12, 3, torch.float32, True, False, False))
    runs.append(("a call under torch.no_grad()", 2, 3, 12, 3, torch.float32, False, True, False))
    for index, (label, B, T, d, h, dtype, grad, no_grad, counting) in enumerate(runs):
        if counting:  # every number tells where it came from
            qkv = torch.arange(B * T * 3 * d, dtype=dtype).reshape(B, T, 3 * d)
        else:
            qkv = torch.randn(B, T, 3 * d, generator=g, dtype=dtype)
        text = f"my_split_qkv(qkv of shape {(B, T, 3 * d)}, n_heads={h})"
        kept = []
        got = _diff.call(my_split_qkv, (qkv, h), label, grad=grad, no_grad=no_grad, name="my_split_qkv",
                         first=index == 0, keep=kept)
        got = _three(got, text)
        if not torch.equal(kept[0].detach(), qkv):
            hint(f"my_split_qkv changed qkv in place ({label}): the caller's tensor must stay as it was.")
        expected = _qkv_reference(qkv, h)
        if _same_triple(got, expected, label, text, precision_hint=False):
            if grad:  # in the grader q, k and v come back with their backward passes relayed to the kernel
                if not all(t.requires_grad for t in got):
                    hint(f"{text} ({label}): q, k and v must stay connected to qkv (no .detach(), no "
                         "torch.no_grad() inside, no NumPy), or no gradient reaches the projection.")
                weights = [torch.randn(t.shape, generator=g) for t in got]
                (grad_in,) = torch.autograd.grad(sum((t * w).sum() for t, w in zip(got, weights)), kept[0])
                wanted = torch.stack([w.transpose(1, 2) for w in weights], dim=2).reshape(B, T, 3 * d)
                if not close(grad_in, wanted, rtol=1e-5, atol=1e-6):
                    hint(f"{text} ({label}): the gradient does not reach each feature of qkv exactly once: "
                         f"{first_difference(grad_in, wanted, 'd qkv')}.", generic=True)
            continue
        for wrong, message in _qkv_mistakes(qkv, h):
            if all(g_.shape == w.shape and close(g_.to(w.dtype), w) for g_, w in zip(got, wrong)):
                hint(f"{text} fails on {label}: {message}")
        for g_, e in zip(got, expected):
            _diff.precision(g_, e, label, text)
        names = [n for n, g_, e in zip("qkv", got, expected)
                 if not _diff.same_values(g_, e, label, text, n, precision_hint=False)]
        for n, g_, e in zip("qkv", got, expected):
            if n == names[0]:
                _diff.generic(g_, e, label, text, n)
    passed("view as (B, T, 3, h, d_head), then move the part to the front and the heads before the tokens: "
           "one fused projection feeds every head.")


def _reference(x, W_q, W_k, W_v, W_o, n_heads, *, scale_by=None, out_proj=True, dim=-1, heads=True):
    B, T, d = x.shape
    h = n_heads if heads else 1
    d_head = d // h

    def split(t):
        return t.view(B, T, h, d_head).transpose(1, 2)  # (B, h, T, d_head)

    q, k, v = split(x @ W_q), split(x @ W_k), split(x @ W_v)
    scale = math.sqrt(d_head if scale_by is None else scale_by)
    w = torch.softmax(q @ k.transpose(-2, -1) / scale, dim=dim)  # (B, h, T, T)
    out = (w @ v).transpose(1, 2).reshape(B, T, d)  # (B, T, d)
    return out @ W_o if out_proj else out


@checker("Exercise 3.3")
def multi_head(my_multi_head) -> None:
    """``my_multi_head(x, W_q, W_k, W_v, W_o, n_heads)``: batched multi-head self-attention, no biases.

    Row convention: ``q = x @ W_q`` with ``W_*`` of shape (d, d); output (B, T, d).
    """
    g = torch.Generator().manual_seed(3)
    # d_head differs from n_heads (so that sqrt(n_heads) is not the right scale by chance), and two
    # configurations (so that a scale or a shape written as a number fits at most one). A mistake is
    # named only when it explains the answers of both configurations.
    cases, answers = [], []
    for B, T, d, h in ((2, 5, 24, 4), (1, 4, 12, 3)):
        x = torch.randn(B, T, d, generator=g)
        W_q, W_k, W_v, W_o = (torch.randn(d, d, generator=g) / math.sqrt(d) for _ in range(4))
        args = (x, W_q, W_k, W_v, W_o, h)
        got = require_tensor(my_multi_head(*(a.clone() if isinstance(a, torch.Tensor) else a for a in args)))
        cases.append(args)
        answers.append(got)
    expected = [_reference(*args) for args in cases]
    if all(close(got, e, rtol=1e-4, atol=1e-5) for got, e in zip(answers, expected)):
        for B, T, d, h, dtype in ((3, 1, 8, 8, torch.float64), (2, 7, 10, 2, torch.float64)):
            x = torch.randn(B, T, d, generator=g, dtype=dtype)
            Ws = [torch.randn(d, d, generator=g, dtype=dtype) / math.sqrt(d) for _ in range(4)]
            got = require_tensor(my_multi_head(x.clone(), *(W.clone() for W in Ws), h))
            right = _reference(x, *Ws, h)
            if not close(got, right, rtol=1e-4, atol=1e-6):
                hint(f"right on the first examples, but not for x of shape {(B, T, d)} with {h} heads ({dtype}): "
                     f"{first_difference(got, right)}.", generic=True)
        over_heads = [it for it in source_facts(my_multi_head).loop_iters
                      if re.search(r"head|\brange\(\s*h\b|unbind|chunk|split", it)]
        if over_heads:
            hint(f"the values are right, but your code loops over the heads (`for ... in {over_heads[0]}`): the "
                 "exercise asks to attend in all heads at once, with one batched matrix product over the "
                 "(B, h, T, d_head) tensors.")
        require_graph(my_multi_head, cases[0])
        passed("project, split into heads, attend in every head at once, merge, project back with W_O.")
    for got, e in zip(answers, expected):
        if got.shape != e.shape:
            hint(f"the output should have shape (B, T, d) = {tuple(e.shape)}, got {tuple(got.shape)}.", generic=True)
    for variant, message in _MULTI_HEAD_MISTAKES:
        if all(close(got, variant(*args), rtol=1e-4, atol=1e-5) for got, args in zip(answers, cases)):
            hint(message)
    got, e = next((got, e) for got, e in zip(answers, expected) if not close(got, e, rtol=1e-4, atol=1e-5))
    hint("the output does not match multi-head attention; compare one head with chapter 2's attention "
         f"first: {first_difference(got, e)}.", generic=True)


def _merged_without_transpose(x, W_q, W_k, W_v, W_o, h):
    B, T, d = x.shape
    q, k, v = ((x @ W).view(B, T, h, d // h).transpose(1, 2) for W in (W_q, W_k, W_v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), -1) @ v  # (B, h, T, d_head)
    return heads.reshape(B, T, d) @ W_o  # merged without transposing back


def _split_without_transpose(x, W_q, W_k, W_v, W_o, h, merge_back=False):
    B, T, d = x.shape
    q, k, v = ((x @ W).reshape(B, h, T, d // h) for W in (W_q, W_k, W_v))  # split without the transpose
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), -1) @ v
    return (heads.transpose(1, 2) if merge_back else heads).reshape(B, T, d) @ W_o


def _flags(**flags):
    return lambda x, W_q, W_k, W_v, W_o, h: _reference(x, W_q, W_k, W_v, W_o, h, **{
        k: (v(x.shape[-1], h) if callable(v) else v) for k, v in flags.items()})


_MULTI_HEAD_MISTAKES = [
    (_flags(scale_by=lambda d, h: d), "you scaled by sqrt(d_model); each head's queries and keys have "
                                      "d_head = d / h features, so divide by sqrt(d_head)."),
    (_flags(out_proj=False), "you forgot the output projection: multiply the merged heads by W_O."),
    (_flags(scale_by=lambda d, h: d, out_proj=False), "two things: scale by sqrt(d_head), not sqrt(d_model), and "
                                                       "apply the output projection W_O."),
    (_flags(dim=-2), "softmax over the wrong axis: each query's weights must sum to 1 over the keys (dim=-1)."),
    (_flags(heads=False), "that is one full-width head: split the projections into n_heads heads of d_head "
                          "features and attend in each separately."),
    (_flags(scale_by=1), "you forgot the scale: divide the scores by sqrt(d_head)."),
    (_flags(scale_by=lambda d, h: h), "you scaled by sqrt(n_heads); the scale is sqrt(d_head), the width of each "
                                      "head's queries and keys."),
    (lambda x, W_q, W_k, W_v, W_o, h: _reference(x, W_q.T, W_k.T, W_v.T, W_o.T, h),
     "you multiplied by the transposed matrices: in the row convention q = x @ W_Q (shape (d, d)); "
     "x @ W.T is what nn.Linear does with its stored (out, in) weight."),
    (_merged_without_transpose, "merging the heads: transpose (B, h, T, d_head) back to (B, T, h, d_head) "
                                "before reshaping to (B, T, d)."),
    (_split_without_transpose, "splitting into heads: view as (B, T, h, d_head) and then transpose(1, 2); "
                               "reshaping straight to (B, h, T, d_head) mixes the tokens."),
    (lambda *a: _split_without_transpose(*a, merge_back=True),
     "splitting into heads: view as (B, T, h, d_head) and then transpose(1, 2); reshaping straight to "
     "(B, h, T, d_head) mixes the tokens."),
    *[(_flags(scale_by=c * c), "the scale is sqrt(d_head) with d_head = d_model // n_heads: compute it from the "
                               "inputs, not from the example's numbers.") for c in (2.0, 3.0, 4.0, 6.0)],
]
