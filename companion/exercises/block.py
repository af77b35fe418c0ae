"""Checkers for chapter 6, *The transformer block*.

They recognize the classic slips: a feed-forward network without its activation or its biases,
a block that forgets a residual connection or normalizes after the sum instead of before, and a
parameter count with the wrong ``d_ff``, without biases or LayerNorms, without the output
projection, or multiplied by the number of heads.
"""
from __future__ import annotations

import torch

import torch.nn.functional as F

from ._core import require_graph, as_count, checker, close, first_difference, hint, passed, require_tensor

__all__ = ["feed_forward", "pre_norm_block", "block_params"]


@checker("Exercise 6.1")
def feed_forward(my_feed_forward) -> None:
    """``my_feed_forward(x, W1, b1, W2, b2)``: ``relu(x @ W1 + b1) @ W2 + b2``, x ``(n, d)`` -> ``(n, d)``."""
    g = torch.Generator().manual_seed(6)
    n, d, d_ff = 5, 4, 16
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    W1, W2 = torch.randn(d, d_ff, generator=g, dtype=torch.float64), torch.randn(d_ff, d, generator=g, dtype=torch.float64)
    b1, b2 = torch.randn(d_ff, generator=g, dtype=torch.float64), torch.randn(d, generator=g, dtype=torch.float64)
    out = require_tensor(my_feed_forward(x.clone(), W1.clone(), b1.clone(), W2.clone(), b2.clone()))
    if close(out, torch.relu(x @ W1 + b1)):
        hint("that is the hidden layer (n, d_ff); apply the second layer to it: hidden @ W2 + b2.")
    if tuple(out.shape) != (n, d):
        hint(f"the output has one row per token and d = {d} columns, shape ({n}, {d}) (got {tuple(out.shape)}).",
             generic=True)
    right = torch.relu(x @ W1 + b1) @ W2 + b2
    if close(out, right):
        for n, d, d_ff, scale, dtype in ((1, 3, 2, 1.0, torch.float64), (6, 8, 5, 10.0, torch.float32)):
            x = torch.randn(n, d, generator=g, dtype=dtype) * scale  # scale 10: hidden units far above 6
            W1, W2 = torch.randn(d, d_ff, generator=g, dtype=dtype), torch.randn(d_ff, d, generator=g, dtype=dtype)
            b1, b2 = torch.randn(d_ff, generator=g, dtype=dtype), torch.randn(d, generator=g, dtype=dtype)
            out = require_tensor(my_feed_forward(x.clone(), W1.clone(), b1.clone(), W2.clone(), b2.clone()))
            right = torch.relu(x @ W1 + b1) @ W2 + b2
            if not close(out, right, rtol=1e-4, atol=1e-4):
                if close(out, torch.clamp(x @ W1 + b1, 0, 6) @ W2 + b2, rtol=1e-4, atol=1e-4):
                    hint("the ReLU has no upper bound: max(0, h), not ReLU6's min(max(0, h), 6).")
                hint(f"right on the first example, but not for x of shape {(n, d)} and d_ff = {d_ff} ({dtype}): "
                     f"{first_difference(out, right)}.", generic=True)
        require_graph(my_feed_forward, (x, W1, b1, W2, b2))
        passed("two linear layers with a ReLU between them, applied to every token alike.")
    mistakes = [
        ((x @ W1 + b1) @ W2 + b2, "the ReLU between the two layers is missing: without it the two layers "
                                  "collapse into one linear map."),
        (torch.relu(right), "no activation after the second layer: the output is added to the residual "
                            "stream and may be negative."),
        (torch.relu(x @ W1) @ W2, "the biases b1 and b2 are missing."),
        (torch.relu(x @ W1) @ W2 + b2, "one of the two biases is missing: relu(x @ W1 + b1) @ W2 + b2."),
        (torch.relu(x @ W1 + b1) @ W2, "one of the two biases is missing: relu(x @ W1 + b1) @ W2 + b2."),
        ((torch.relu(x @ W1) + b1) @ W2 + b2, "add b1 before the ReLU: relu(x @ W1 + b1), then @ W2 + b2."),
        (x + right, "return the sublayer's output only; the residual connection is added by the block "
                    "(next exercise)."),
        (F.gelu(x @ W1 + b1) @ W2 + b2, "this exercise uses the ReLU, max(0, h); you used the GELU (GPT-2's "
                                        "choice, the companion's option)."),
        (torch.sigmoid(x @ W1 + b1) @ W2 + b2, "the activation is the ReLU, max(0, h), not the sigmoid."),
        (torch.tanh(x @ W1 + b1) @ W2 + b2, "the activation is the ReLU, max(0, h), not tanh."),
        (torch.relu(-(x @ W1 + b1)) @ W2 + b2, "the ReLU keeps the positive part: torch.relu(h) = max(0, h), "
                                               "not max(0, -h)."),
    ]
    for wrong, message in mistakes:
        if close(out, wrong):
            hint(message)
    hint(f"compute relu(x @ W1 + b1) @ W2 + b2: {first_difference(out, right)}.", generic=True)


def _pieces():
    g = torch.Generator().manual_seed(7)
    d = 6
    Wa = torch.randn(d, d, generator=g, dtype=torch.float64) / d**0.5
    W1, W2 = torch.randn(d, 4 * d, generator=g, dtype=torch.float64) / d**0.5, torch.randn(4 * d, d, generator=g, dtype=torch.float64) / d
    g1, g2 = torch.rand(d, generator=g, dtype=torch.float64) + 0.5, torch.rand(d, generator=g, dtype=torch.float64) + 0.5

    def make_norm(gamma):
        def norm(h):
            mean = h.mean(-1, keepdim=True)
            return (h - mean) / torch.sqrt(h.var(-1, keepdim=True, unbiased=False) + 1e-5) * gamma
        return norm

    def attn(h):  # a stand-in sublayer that mixes tokens: (n, d) -> (n, d)
        return torch.softmax(h @ h.T / d**0.5, dim=-1) @ h @ Wa

    def ff(h):
        return torch.relu(h @ W1) @ W2

    x = torch.randn(5, d, generator=g, dtype=torch.float64) * 2 + 1
    return x, attn, ff, make_norm(g1), make_norm(g2)


@checker("Exercise 6.2")
def pre_norm_block(my_pre_norm_block) -> None:
    """``my_pre_norm_block(x, attn, ff, norm1, norm2)``: ``h = x + attn(norm1(x))``; return ``h + ff(norm2(h))``."""
    x, attn, ff, n1, n2 = _pieces()
    out = require_tensor(my_pre_norm_block(x.clone(), attn, ff, n1, n2))
    if out.shape != x.shape:
        hint(f"return a tensor of the input's shape {tuple(x.shape)} (got {tuple(out.shape)}).", generic=True)
    h = x + attn(n1(x))
    right = h + ff(n2(h))
    if close(out, right):
        require_graph(my_pre_norm_block, (x, attn, ff, n1, n2), grad=(0,))
        passed("normalize, transform, add: the input passes to the output unchanged along the residual path.")
    post_h = n1(x + attn(x))
    if close(out, n2(post_h + ff(post_h))):
        hint("that is the post-norm block (the original transformer): normalize after the sum. Pre-norm "
             "normalizes the sublayer's input, x + attn(norm1(x)), and leaves the sum unnormalized.")
    if close(out, ff(n2(attn(n1(x))))) or close(out, h + ff(n2(attn(n1(x))))) or close(out, ff(n2(h))) or close(
            out, attn(n1(x)) + ff(n2(attn(n1(x))))):
        hint("a residual connection is missing: each sublayer's output is ADDED to its input (x + ...).")
    if close(out, x + attn(n1(x)) + ff(n2(x))):
        hint("the feed-forward sublayer works on the output of the attention step h = x + attn(norm1(x)), not on x.")
    hn = n1(x) + attn(n1(x))
    if close(out, hn + ff(n2(hn))) or close(out, h + ff(n2(h)) - h + n2(h)):
        hint("the residual adds the un-normalized input: x + attn(norm1(x)), not norm1(x) + attn(norm1(x)).")
    if close(out, h + ff(n1(h))) or close(out, x + attn(n2(x)) + ff(n1(x + attn(n2(x))))):
        hint("use norm1 before attention and norm2 (its own scale and shift) before the feed-forward network.")
    if close(out, h + ff(h)) or close(out, x + attn(x) + ff(n2(x + attn(x)))) or close(out, x + attn(x) + ff(x + attn(x))):
        hint("a norm is missing: each sublayer reads the normalized input, attn(norm1(x)) and ff(norm2(h)).")
    hf = x + ff(n2(x))
    if close(out, hf + attn(n1(hf))):
        hint("attention comes first, then the feed-forward network.")
    hint(f"h = x + attn(norm1(x)); return h + ff(norm2(h)): {first_difference(out, right)}.", generic=True)


def _right_count(d_model: int, d_ff: int) -> int:
    return 4 * d_model * d_model + 4 * d_model + 2 * d_model * d_ff + d_ff + d_model + 4 * d_model


_D_FF = "use the d_ff you are given, not 4 * d_model: the ratio is a choice of configuration."
_HIDDEN = "the hidden layer of the feed-forward network has d_ff units: linear1 is d_model x d_ff, linear2 d_ff x d_model."
_FOUR_D = ("4 d_model parameters are missing: either the two LayerNorms' scales and shifts (2 d_model each) or "
           "the biases of the four attention projections (d_model each).")
_LN = "the two LayerNorms have parameters too: a scale and a shift of size d_model each (4 d_model)."
_ALL_BIASES = ("the biases are missing: d_model for each of the four projections, d_ff and d_model in the "
               "feed-forward network.")
_BOTH = "both the biases and the LayerNorm parameters are missing."
_W_O = "the output projection W_O (d_model x d_model, plus its bias) is missing: four projections, not three."
_SHARED = ("the heads share the projections: each head uses d_model/n_heads columns of W_Q, W_K, W_V, so "
           "attention has 4 d_model^2 (+ 4 d_model) parameters whatever n_heads is.")
_PER_HEAD = "each head's W_Q is d_model x d_head, and there are n_heads of them: together d_model x d_model."
_ONE_VECTOR = "each LayerNorm has two vectors of size d_model, a scale and a shift: 4 d_model for the two."
_FF_BIASES = "the feed-forward biases are missing: d_ff for the first layer and d_model for the second."
_BLOCK_MESSAGES = [_D_FF, _HIDDEN, _FOUR_D, _ALL_BIASES, _BOTH, _W_O, _SHARED, _PER_HEAD, _ONE_VECTOR, _FF_BIASES]


def _block_mistakes(d, h, d_ff, right):
    return [
        (lambda got: got == _right_count(d, 4 * d) and d_ff != 4 * d, _D_FF),
        (lambda got: got == _right_count(d, d) and d_ff != d, _HIDDEN),
        (lambda got: got == right - 4 * d, _FOUR_D),
        (lambda got: got == right - 4 * d - d_ff - d, _ALL_BIASES),
        (lambda got: got == right - 4 * d - d_ff - d - 4 * d, _BOTH),
        (lambda got: got == right - d * d - d, _W_O),
        (lambda got: h > 1 and (got == right + (h - 1) * (4 * d * d + 4 * d) or got == right + (h - 1) * (3 * d * d + 3 * d)),
         _SHARED),
        (lambda got: h > 1 and (got == right + (h - 1) * 3 * (d * d // h) or got == right - 3 * d * d + 3 * d * (d // h)),
         _PER_HEAD),
        (lambda got: got == right - 2 * d, _ONE_VECTOR),
        (lambda got: got == right - d_ff - d, _FF_BIASES),
    ]


@checker("Exercise 6.3")
def block_params(my_block_params) -> None:
    """``my_block_params(d_model, n_heads, d_ff)``: parameters of one block (attention with biases,
    two LayerNorms with scale and shift, feed-forward with biases)."""
    cases = [(768, 12, 3072), (64, 4, 100), (30, 3, 7), (16, 16, 1), (100, 5, 60)]
    answers = [as_count(my_block_params(d, h, d_ff), f"my_block_params({d}, {h}, {d_ff})") for d, h, d_ff in cases]
    rights = [_right_count(d, d_ff) for d, h, d_ff in cases]
    if answers == rights:
        passed("one block has 4d² + 2 d d_ff weights plus 9d + d_ff biases and norm parameters; 12d² + 13d with "
               "d_ff = 4d.")
    if len(set(answers)) == 1:
        hint(f"you returned {answers[0]} whatever the arguments: compute the count from d_model, n_heads and d_ff.")
    # a mistake is named only when it explains every case
    explained = {}
    for (d, h, d_ff), got, right in zip(cases, answers, rights):
        if got == right:
            continue  # a mistake may give the right count for some arguments (d_ff = 4 d_model)
        found = set()
        for test, message in _block_mistakes(d, h, d_ff, right):
            if test(got):
                found.add(message)
        explained[(d, h, d_ff)] = found
    common = set.intersection(*explained.values())
    for message in _BLOCK_MESSAGES:
        if message in common:
            hint(message)
    for (d, h, d_ff), got, right in zip(cases, answers, rights):
        if got == right:
            continue
        hint(f"for d_model={d}, n_heads={h}, d_ff={d_ff} the count is not {got}: add attention (four "
             "d_model x d_model matrices with biases), two LayerNorms and the two feed-forward layers with biases.",
             generic=True)
    raise AssertionError  # unreachable: the answers differ from the right counts somewhere
