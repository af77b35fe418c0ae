"""Checkers for the exercises of chapter 2 (attention)."""
from __future__ import annotations

import math

import torch

from companion.attention import causal_mask, padding_mask

from ._core import (require_graph, StudentError, attempt, checker, close, first_difference, hint, library, passed, require_tensor,
                    source_facts,
                    uses_companion)
from .rules import watch


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


#: The library softmaxes that exercise 2.1 asks the student to do without (canonical names of
#: rules.canonical: torch.softmax, Tensor.softmax, F.softmax, nn.Softmax, torch.special.softmax, ...).
_LIBRARY_SOFTMAX = ("softmax", "log_softmax", "_softmax", "_log_softmax")


@checker("Exercise 2.1")
def stable_softmax(my_softmax) -> None:
    """``my_softmax(x)``: softmax over the last axis of a 2-D tensor, safe for large scores."""
    x = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0], [2.0, -3.0, 0.0], [1.0, 1.0, 1.0]])
    expected = torch.softmax(x, dim=-1)
    big = torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -2000.0]])
    with watch() as seen:
        got, error = attempt(my_softmax, x.clone())
        if error is None:
            got_big, error = attempt(my_softmax, big.clone())
    calls = seen.called(*_LIBRARY_SOFTMAX) + uses_companion(seen, source_facts(my_softmax), "companion.attention")
    if calls:
        hint(f"your function calls {library(calls[0])}; the exercise is to write the softmax yourself, with "
             "torch.exp, amax and sum (subtract each row's maximum, exponentiate, divide by the row sum).")
    if error is not None:
        if isinstance(error, RuntimeError) and "must match the size" in str(error):
            hint("the shapes do not broadcast: a reduction over the last axis needs keepdim=True "
                 "(x.amax(dim=-1, keepdim=True), e.sum(dim=-1, keepdim=True)), so that the (n, 1) "
                 "result lines up with the rows of the (n, m) input.")
        raise StudentError(error)
    got = require_tensor(got)
    if got.shape != x.shape:
        hint(f"the output must have the input's shape {tuple(x.shape)}, got {tuple(got.shape)}.", generic=True)
    if not close(got, expected):
        if close(got, torch.softmax(x, dim=0)):
            hint("your columns sum to 1, not your rows: the softmax runs over the last axis (dim=-1), "
                 "one distribution over the keys for each query row.")
        if close(got, torch.exp(x - x.amax(-1, keepdim=True))) or close(got, torch.exp(x)) or close(
                got, torch.exp(x - x.max())):
            hint("you exponentiated but did not normalize: divide each row by its sum.")
        if close(got, torch.exp(x) / torch.exp(x).sum()) or close(got, torch.exp(x - x.max()) / torch.exp(x - x.max()).sum()):
            hint("the whole matrix sums to 1: sum over the last axis only, with keepdim=True.")
        if close(got, torch.log_softmax(x, -1)):
            hint("that is the log of the softmax (x - max - log of the sum); return the probabilities "
                 "themselves: exp(x - max) / sum of exp(x - max).")
        if close(got, (x - x.amax(-1, keepdim=True)) / (x - x.amax(-1, keepdim=True)).sum(-1, keepdim=True),
                 equal_nan=True):
            hint("exponentiate before normalizing: e = torch.exp(x - max), then e / e.sum(...).")
        hint(f"each row should be the softmax of that row of x: {first_difference(got, expected)}.", generic=True)
    got_big = require_tensor(got_big)
    shifted = torch.exp(big - big.max())  # the maximum of the whole tensor, not of each row
    if got_big.shape == big.shape and torch.allclose(got_big, shifted / shifted.sum(-1, keepdim=True), equal_nan=True):
        hint("with scores around ±1000 some rows come out wrong: subtract each row's own maximum "
             "(x.amax(dim=-1, keepdim=True)), not the maximum of the whole tensor.")
    if got_big.shape == big.shape and not torch.isfinite(got_big).all():
        hint("scores of 1000 give inf or nan: exp(1000) overflows. Subtract each row's maximum "
             "before exponentiating; the softmax does not change when a constant is subtracted.")
    if not close(got_big, torch.softmax(big, -1)):
        hint("with scores around ±1000 some rows come out wrong: subtract each row's own maximum "
             "(x.amax(dim=-1, keepdim=True)) before exponentiating.")
    g = _gen(21)
    for shape, dtype, scale in (((1, 1), torch.float32, 1.0), ((3, 7), torch.float64, 50.0),
                                ((6, 2), torch.float32, 300.0), ((2, 5), torch.float64, 1e-3)):
        x = torch.randn(*shape, generator=g, dtype=dtype) * scale
        x[0] += 500.0 if shape[0] > 1 else 0.0  # rows far apart: one global maximum does not do
        with watch() as seen:
            out = require_tensor(my_softmax(x.clone()))
        calls = seen.called(*_LIBRARY_SOFTMAX)
        if calls:
            hint(f"your function calls {library(calls[0])}; the exercise is to write the softmax yourself, with "
                 "torch.exp, amax and sum.")
        if not close(out, torch.softmax(x, -1), rtol=1e-4, atol=1e-6):
            hint(f"right on the examples, but not on a random {shape[0]}×{shape[1]} {dtype} input: "
                 f"{first_difference(out, torch.softmax(x, -1))}.", generic=True)
    require_graph(my_softmax, (torch.randn(3, 4, dtype=torch.float64),))
    passed("stable: subtracting the row maximum keeps every exponent at or below 0.")


@checker("Exercise 2.2")
def attention(my_attention) -> None:
    """``my_attention(Q, K, V)`` -> ``softmax(Q K^T / sqrt(d_k)) V`` for Q (n, d_k), K (m, d_k), V (m, d_v)."""
    g = _gen(2)
    for n, m, d_k, d_v in ((4, 6, 8, 3), (3, 5, 5, 2)):  # two widths: a scale written as a number fits only one
        Q, K, V = torch.randn(n, d_k, generator=g), torch.randn(m, d_k, generator=g), torch.randn(m, d_v, generator=g)
        scores = Q @ K.T  # (n, m)
        weights = torch.softmax(scores / math.sqrt(d_k), -1)  # (n, m)
        expected = weights @ V  # (n, d_v)
        got = my_attention(Q.clone(), K.clone(), V.clone())
        if isinstance(got, tuple) and len(got) == 2 and close(got[0], expected):
            hint("return only the output (n, d_v), not a pair; the weights are not part of the answer here.")
        got = require_tensor(got)
        if close(got, expected):
            continue
        if close(got, weights):
            hint("you returned the attention weights (n, m); multiply them by V to get the output (n, d_v).")
        if close(got, weights @ K):
            hint("you averaged the key rows; the weighted average is of the value rows: weights @ V.")
        if got.shape != expected.shape:
            hint(f"the output should have shape (n, d_v) = {tuple(expected.shape)}, got {tuple(got.shape)}.",
                 generic=True)
        mistakes = [
            (torch.softmax(scores, -1) @ V, "you forgot the scale: divide the scores by sqrt(d_k) before the softmax."),
            (torch.softmax(scores / d_k, -1) @ V,
             "you divided by d_k; the scale is its square root, sqrt(d_k) (chapter 1 measured why)."),
            (torch.softmax(scores / (d_k / 2), -1) @ V,
             "operator precedence: d_k ** 1/2 is (d_k ** 1) / 2. Write math.sqrt(d_k) or d_k ** 0.5."),
            (torch.softmax(scores / d_k / 2, -1) @ V,
             "operator precedence: x / d_k ** 1/2 is (x / d_k) / 2. Write math.sqrt(d_k) or d_k ** 0.5."),
            (torch.softmax(scores * math.sqrt(d_k), -1) @ V, "you multiplied by sqrt(d_k); divide by it."),
            (torch.softmax(scores / math.sqrt(d_v), -1) @ V,
             "you divided by sqrt(d_v), the width of the values; the scale is sqrt(d_k), the width of the "
             "queries and keys (Q.shape[-1])."),
            (torch.softmax(scores / math.sqrt(m), -1) @ V,
             "you divided by the square root of a sequence length (the number of rows); the scale is "
             "sqrt(d_k), the width of each query and key (Q.shape[-1])."),
            (torch.softmax(scores / math.sqrt(n), -1) @ V,
             "you divided by the square root of a sequence length (the number of rows); the scale is "
             "sqrt(d_k), the width of each query and key (Q.shape[-1])."),
            (torch.softmax(scores / math.sqrt(d_k), 0) @ V,
             "softmax over the wrong axis: each query row must sum to 1 over the keys (dim=-1), not each column."),
            (torch.softmax(scores, -1) / math.sqrt(d_k) @ V,
             "the scale goes inside the softmax: softmax(Q K^T / sqrt(d_k)), not softmax(Q K^T) / sqrt(d_k)."),
            ((scores / math.sqrt(d_k)) @ V, "the softmax is missing: the scaled scores must become weights "
                                            "that are positive and sum to 1 in each row."),
            (torch.sigmoid(scores / math.sqrt(d_k)) @ V,
             "a sigmoid gives each weight separately; the weights of a row must sum to 1: use the softmax over "
             "the keys."),
            (torch.softmax(-scores / math.sqrt(d_k), -1) @ V,
             "the sign of the scores is flipped: a larger q · k must give a larger weight."),
            (torch.softmax(scores / math.sqrt(8), -1) @ V if d_k != 8 else expected,
             f"for queries of width d_k = {d_k} the scale is sqrt({d_k}): compute it from the input, "
             "Q.shape[-1], not from the example's numbers."),
        ]
        for wrong, message in mistakes:
            if close(got, wrong):
                hint(message)
        hint(f"the output does not match softmax(Q K^T / sqrt(d_k)) V: {first_difference(got, expected)}.",
             generic=True)
    with watch() as seen:
        my_attention(Q.clone(), K.clone(), V.clone())
    shortcuts = seen.called("scaled_dot_product_attention", "multi_head_attention_forward",
                            "_scaled_dot_product_attention")
    if shortcuts:
        hint(f"the values are right, but your function calls {library(shortcuts[0])}, the very thing the "
             "exercise asks you to write: compute the scores, the softmax (torch.softmax or your my_softmax) "
             "and the weighted sum yourself.")
    require_graph(my_attention, (Q, K, V))
    passed("softmax(Q K^T / sqrt(d_k)) V: one weighted average of the value rows per query.")


@checker("Exercise 2.3")
def causal(my_causal_mask) -> None:
    """``my_causal_mask(T)`` -> bool (T, T), True where query i may attend to key j (j <= i)."""
    for T in (4, 6, 1):  # T = 1 last: there, several mistakes look alike
        got = require_tensor(my_causal_mask(T), "a boolean tensor")
        expected = causal_mask(T)
        if tuple(got.shape) != (T, T):
            hint(f"my_causal_mask({T}) should have shape ({T}, {T}), got {tuple(got.shape)}.", generic=True)
        if got.dtype != torch.bool:
            if close(got, torch.zeros(T, T).masked_fill(~expected, float("-inf"))):
                hint("that is the additive float mask (0 and -inf); the exercise asks for the boolean mask, True = may attend.")
            hint(f"return a boolean tensor (True = may attend), got dtype {got.dtype}. Comparisons such "
                 "as j <= i give one; so does torch.ones(T, T, dtype=torch.bool).tril().")
        if torch.equal(got, expected):
            continue
        if torch.equal(got, torch.ones(T, T, dtype=torch.bool).tril(-1)):
            hint("the diagonal is masked: you hid key j for j >= i, so a token cannot see itself. "
                 "The rule is j > i; query i sees keys 0..i.")
        if torch.equal(got, ~expected):
            hint("inverted: you marked the hidden keys. True must mean 'may attend' (the lower triangle, j <= i), "
                 "as in torch's scaled_dot_product_attention.")
        if torch.equal(got, expected.T):
            hint("you kept the upper triangle: query i (a row) may only look back, at keys j <= i (the lower triangle).")
        if torch.equal(got, torch.ones(T, T, dtype=torch.bool).tril(1)):
            hint("one diagonal too many: query i may see keys j <= i, not j <= i + 1.")
        if got.all():
            hint("nothing is masked: query i must not see the keys after it (j > i).")
        hint(f"my_causal_mask({T}) is not the lower triangle including the diagonal: "
             f"{first_difference(got.int(), expected.int(), 'mask')}.", generic=True)
    passed("query i sees keys 0..i, itself included; the future (j > i) is hidden.")


@checker("Exercise 2.4")
def padding(my_padding_mask) -> None:
    """``my_padding_mask(lengths, S)`` -> bool (B, S), True where ``j < lengths[b]`` (a real token)."""
    # S larger than every length in the second case: a mask built from lengths.max() is too narrow.
    for lengths, S in ((torch.tensor([3, 1, 4]), 4), (torch.tensor([2, 0, 5, 1]), 6)):
        expected = padding_mask(lengths, S)
        got = require_tensor(my_padding_mask(lengths.clone(), S), "a boolean tensor")
        if got.shape != expected.shape:
            if got.shape == expected.T.shape:
                hint(f"the shape is (S, B); it should be (B, S) = {tuple(expected.shape)}, one row per sequence.")
            if got.dim() == 2 and got.shape[0] == expected.shape[0] and got.shape[1] == int(lengths.max()):
                hint("the mask must have S columns, the padded length you are given, even when every "
                     "sequence is shorter than S: use torch.arange(S), not the longest length.")
            hint(f"the mask should have shape (B, S) = {tuple(expected.shape)}, got {tuple(got.shape)}.", generic=True)
        if got.dtype != torch.bool:
            hint(f"return a boolean tensor (True = a real token), got dtype {got.dtype}.")
        if torch.equal(got, expected):
            continue
        arange = torch.arange(S)[None, :]
        if torch.equal(got, ~expected):
            hint("inverted: True must mean 'a real token that may be attended', as the rest of the companion uses.")
        if torch.equal(got, arange <= lengths[:, None]):
            hint("one position too many: a sequence of length L holds positions 0..L-1, so use j < L, not j <= L.")
        if torch.equal(got, arange < lengths[:, None] - 1):
            hint("one position too few: a sequence of length L holds positions 0..L-1, so use j < L.")
        if torch.equal(got, arange > lengths[:, None]) or torch.equal(got, arange >= lengths[:, None]):
            hint("inverted: True must mean 'a real token that may be attended', as the rest of the companion uses.")
        hint(f"for lengths {lengths.tolist()} and S={S} the mask should be {expected.int().tolist()}; "
             f"{first_difference(got.int(), expected.int(), 'mask')}.", generic=True)
    passed("positions 0..length-1 are real tokens; the padding after them is hidden.")
