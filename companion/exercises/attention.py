"""Checkers for the exercises of chapter 2 (attention)."""
from __future__ import annotations

import math

import torch

from companion.attention import causal_mask, padding_mask, softmax

from ._core import checker, close, hint, passed


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@checker("Exercise 2.1")
def stable_softmax(my_softmax) -> None:
    """``my_softmax(x)``: softmax over the last axis of a 2-D tensor, safe for large scores."""
    x = torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0], [2.0, -3.0, 0.0], [1.0, 1.0, 1.0]])
    expected = torch.softmax(x, dim=-1)
    try:
        got = my_softmax(x.clone())
    except RuntimeError as exc:  # NotImplementedError is a RuntimeError too: re-raised below
        if "must match the size" in str(exc):
            hint("the shapes do not broadcast: a reduction over the last axis needs keepdim=True "
                 "(x.amax(dim=-1, keepdim=True), e.sum(dim=-1, keepdim=True)), so that the (n, 1) "
                 "result lines up with the rows of the (n, m) input.")
        raise
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor, got {type(got).__name__}.")
    if got.shape != x.shape:
        hint(f"the output must have the input's shape {tuple(x.shape)}, got {tuple(got.shape)}.")
    if not close(got, expected):
        if close(got, torch.softmax(x, dim=0)):
            hint("your columns sum to 1, not your rows: the softmax runs over the last axis (dim=-1), "
                 "one distribution over the keys for each query row.")
        if close(got, torch.exp(x - x.amax(-1, keepdim=True))) or close(got, torch.exp(x)):
            hint("you exponentiated but did not normalize: divide each row by its sum.")
        if close(got, torch.exp(x) / torch.exp(x).sum()) or close(got, torch.exp(x - x.max()) / torch.exp(x - x.max()).sum()):
            hint("the whole matrix sums to 1: sum over the last axis only, with keepdim=True.")
        hint(f"for x = {x.tolist()} the result differs from the softmax of each row.")
    big = torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -2000.0]])
    got_big = my_softmax(big.clone())
    shifted = torch.exp(big - big.max())  # the maximum of the whole tensor, not of each row
    if isinstance(got_big, torch.Tensor) and got_big.shape == big.shape and torch.allclose(
        got_big, shifted / shifted.sum(-1, keepdim=True), equal_nan=True
    ):
        hint("with scores around ±1000 some rows come out wrong: subtract each row's own maximum "
             "(x.amax(dim=-1, keepdim=True)), not the maximum of the whole tensor.")
    if not torch.isfinite(got_big).all():
        hint("scores of 1000 give inf or nan: exp(1000) overflows. Subtract each row's maximum "
             "before exponentiating; the softmax does not change when a constant is subtracted.")
    if not close(got_big, torch.softmax(big, -1)):
        hint("with scores around ±1000 some rows come out wrong: subtract each row's own maximum "
             "(x.amax(dim=-1, keepdim=True)), not the maximum of the whole tensor.")
    passed("stable: subtracting the row maximum keeps every exponent at or below 0.")


@checker("Exercise 2.2")
def attention(my_attention) -> None:
    """``my_attention(Q, K, V)`` -> ``softmax(Q K^T / sqrt(d_k)) V`` for Q (n, d_k), K (m, d_k), V (m, d_v)."""
    g = _gen(2)
    Q, K, V = torch.randn(4, 8, generator=g), torch.randn(6, 8, generator=g), torch.randn(6, 3, generator=g)
    d_k = Q.shape[-1]
    scores = Q @ K.T
    expected = torch.softmax(scores / math.sqrt(d_k), -1) @ V
    got = my_attention(Q.clone(), K.clone(), V.clone())
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor, got {type(got).__name__}.")
    if close(got, expected):
        passed("softmax(Q K^T / sqrt(d_k)) V: one weighted average of the value rows per query.")
    if close(got, torch.softmax(scores / math.sqrt(d_k), -1)):
        hint("you returned the attention weights (n, m); multiply them by V to get the output (n, d_v).")
    if got.shape != expected.shape:
        hint(f"the output should have shape (n, d_v) = {tuple(expected.shape)}, got {tuple(got.shape)}.")
    if close(got, torch.softmax(scores, -1) @ V):
        hint("you forgot the scale: divide the scores by sqrt(d_k) before the softmax.")
    if close(got, torch.softmax(scores / d_k, -1) @ V):
        hint("you divided by d_k; the scale is its square root, sqrt(d_k) (chapter 1 measured why).")
    if close(got, torch.softmax(scores * math.sqrt(d_k), -1) @ V):
        hint("you multiplied by sqrt(d_k); divide by it.")
    n, m, d_v = Q.shape[0], K.shape[0], V.shape[-1]
    if close(got, torch.softmax(scores / math.sqrt(d_v), -1) @ V):
        hint("you divided by sqrt(d_v), the width of the values; the scale is sqrt(d_k), the width of the "
             "queries and keys (Q.shape[-1]).")
    if close(got, torch.softmax(scores / math.sqrt(m), -1) @ V) or close(got, torch.softmax(scores / math.sqrt(n), -1) @ V):
        hint("you divided by the square root of a sequence length (the number of rows); the scale is "
             "sqrt(d_k), the width of each query and key (Q.shape[-1]).")
    if close(got, torch.softmax(scores / math.sqrt(d_k), 0) @ V):
        hint("softmax over the wrong axis: each query row must sum to 1 over the keys (dim=-1), not each column.")
    if close(got, torch.softmax(scores / math.sqrt(d_k), -1) @ K[:, :3]) or close(got, torch.softmax(scores / math.sqrt(d_k), -1) @ Q[:, :3]):
        hint("the weighted average must be of the value rows V.")
    hint("the output does not match softmax(Q K^T / sqrt(d_k)) V.")


@checker("Exercise 2.3")
def causal(my_causal_mask) -> None:
    """``my_causal_mask(T)`` -> bool (T, T), True where query i may attend to key j (j <= i)."""
    for T in (4, 6, 1):  # T = 1 last: there, several mistakes look alike
        got = my_causal_mask(T)
        expected = causal_mask(T)
        if not isinstance(got, torch.Tensor):
            hint(f"return a tensor, got {type(got).__name__}.")
        if got.shape != (T, T):
            hint(f"my_causal_mask({T}) should have shape ({T}, {T}), got {tuple(got.shape)}.")
        if got.dtype != torch.bool:
            if close(got, torch.zeros(T, T).masked_fill(~expected, float("-inf"))):
                hint("that is the additive float mask (0 and -inf); the exercise asks for the boolean mask, True = may attend.")
            hint(f"return a boolean tensor (True = may attend), got dtype {got.dtype}.")
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
        hint(f"my_causal_mask({T}) is not the lower triangle including the diagonal.")
    passed("query i sees keys 0..i, itself included; the future (j > i) is hidden.")


@checker("Exercise 2.4")
def padding(my_padding_mask) -> None:
    """``my_padding_mask(lengths, S)`` -> bool (B, S), True where ``j < lengths[b]`` (a real token)."""
    lengths = torch.tensor([3, 1, 4])
    S = 4
    expected = padding_mask(lengths, S)
    got = my_padding_mask(lengths.clone(), S)
    if not isinstance(got, torch.Tensor):
        hint(f"return a tensor, got {type(got).__name__}.")
    if got.shape != expected.shape:
        if got.shape == expected.T.shape:
            hint(f"the shape is (S, B); it should be (B, S) = {tuple(expected.shape)}, one row per sequence.")
        hint(f"the mask should have shape (B, S) = {tuple(expected.shape)}, got {tuple(got.shape)}.")
    if got.dtype != torch.bool:
        hint(f"return a boolean tensor (True = a real token), got dtype {got.dtype}.")
    if torch.equal(got, expected):
        passed("positions 0..length-1 are real tokens; the padding after them is hidden.")
    if torch.equal(got, ~expected):
        hint("inverted: True must mean 'a real token that may be attended', as the rest of the companion uses.")
    if torch.equal(got, torch.arange(S)[None, :] <= lengths[:, None]):
        hint("one position too many: a sequence of length L holds positions 0..L-1, so use j < L, not j <= L.")
    hint(f"for lengths {lengths.tolist()} and S={S} the mask should be {expected.int().tolist()}.")
