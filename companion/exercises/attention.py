"""Checkers for the exercises of chapter 2 (attention)."""
from __future__ import annotations

import math
import random

import torch

from companion.attention import causal_mask, padding_mask

from ._core import (StudentError, checker, close, hint, library, passed, require_graph, source_facts,
                    uses_companion)
from . import _diff, rules
from .rules import watch


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


#: The library functions that exercise 2.1 asks the student to do without (canonical names of
#: rules.canonical: torch.softmax, Tensor.log_softmax, F.log_softmax, nn.LogSoftmax, torch.logsumexp, ...).
_LIBRARY_SOFTMAX = ("softmax", "log_softmax", "_softmax", "_log_softmax", "logsumexp", "special.logsumexp")


def _log_softmax_cases():
    """(label, x, dim or None for the default): each an edge class that a known mistake fails."""
    g = _gen(21)
    inf = float("inf")
    far = torch.randn(3, 5, generator=g, dtype=torch.float64) * 3
    far[0] += 800.0  # rows far apart: one maximum for the whole tensor does not do
    draw = random.Random()  # a fresh draw each run, beside the fixed classes
    shape = tuple(draw.randint(1, 4) for _ in range(draw.randint(1, 3)))
    fresh = torch.Generator().manual_seed(draw.randrange(2**31))
    return [
        ("small scores, 2-D", torch.tensor([[1.0, 2.0, 3.0], [0.5, 0.5, -1.0], [2.0, -3.0, 0.0], [1.0, 1.0, 1.0]]),
         None),
        ("scores of ±1000", torch.tensor([[1000.0, 999.0, 0.0], [-1000.0, -1001.0, -2000.0]]), None),
        ("a probability that underflows to 0 (scores 0 and -200, float32)",
         torch.tensor([[0.0, -200.0, 1.0], [-150.0, 0.0, -3.0]]), None),
        ("rows far apart, float64", far, None),
        ("masked scores (-inf)", torch.tensor([[2.0, -inf, 1.0, 0.5], [-inf, -inf, 3.0, -inf]]), None),
        ("a square input", torch.randn(4, 4, generator=g, dtype=torch.float64) * 2, None),
        ("one dimension (n,)", torch.randn(6, generator=g, dtype=torch.float64), None),
        ("dim=0 of a (3, 5) input", torch.randn(3, 5, generator=g, dtype=torch.float64) * 4, 0),
        ("dim=1 of a (2, 3, 4) input", torch.randn(2, 3, 4, generator=g, dtype=torch.float64), 1),
        ("dim=-2 of a (2, 4, 3) input, scores of ±500", torch.randn(2, 4, 3, generator=g, dtype=torch.float64) * 500,
         -2),
        ("size 1 along dim", torch.randn(3, 1, generator=g, dtype=torch.float64) * 50, -1),
        ("ties", torch.full((2, 5), 7.0, dtype=torch.float64), None),
        (f"a fresh random draw of shape {shape}, dim={len(shape) - 1}",
         torch.randn(*shape, generator=fresh, dtype=torch.float64) * draw.choice([1.0, 30.0, 300.0]),
         len(shape) - 1),
    ]


def _log_softmax_mistakes(got: torch.Tensor, x: torch.Tensor, dim: int, label: str) -> None:
    """Hints for the results that a known mistake gives on this case."""
    right = torch.log_softmax(x.double(), dim)
    tol = dict(rtol=1e-4, atol=1e-5, equal_nan=True)
    g = got.detach().double()
    if tuple(got.shape) != tuple(x.shape):
        return
    x64 = x.double()
    m = x64.amax(dim, keepdim=True)
    with torch.no_grad():
        sums = torch.exp(x64 - m).sum(dim, keepdim=True)
        candidates = [
            (torch.log(torch.softmax(x64.float(), dim).double()) if x.dtype == torch.float32
             else torch.log(torch.softmax(x64, dim)),
             "that is the log of the softmax: a probability that underflows to 0 gives log 0 = -inf, although its "
             "log-probability is an ordinary number. Stay in logs: x - m - log(sum(exp(x - m))), m the maximum."),
            (torch.softmax(x64, dim), "those are the probabilities; return their logarithm, computed without "
                                      "forming them: x - m - log(sum(exp(x - m)))."),
            (x64 - m, "you subtracted the maximum but did not normalize: subtract log(sum(exp(x - m))) too."),
            (x64 - torch.log(sums), "the maximum you subtracted inside the exponential must come off outside too: "
                                    "log softmax(x) = x - m - log(sum(exp(x - m)))."),
            (x64 - m + torch.log(sums), "the sign of the log-sum is wrong: x - m - log(sum(exp(x - m)))."),
            (x64 - x64.amax() - torch.log(torch.exp(x64 - x64.amax()).sum(dim, keepdim=True)),
             "subtract the maximum of each slice along dim (x.amax(dim=dim, keepdim=True)), not the maximum of the "
             "whole tensor: far from it, every exponential underflows to 0."),
            (x64 - x64.amax() - torch.log(torch.exp(x64 - x64.amax()).sum()),
             "you normalized over the whole tensor: sum over dim only, with keepdim=True."),
        ]
        if x.dim() > 1:
            for other in range(x.dim()):
                if other != dim % x.dim():
                    candidates.append((torch.log_softmax(x64, other),
                                       f"you normalized over axis {other}, not over dim={dim}: pass dim to every "
                                       "reduction (amax, sum), and use the dim argument you are given."))
        if x.dim() == 2 and dim % 2 == 1 and x.shape[0] == x.shape[1]:
            candidates.append((x64 - torch.logsumexp(x64, -1).unsqueeze(0),
                               "a reduction without keepdim=True drops the axis, and the (n,) result then lines up "
                               "with the columns of a square (n, n) input: reduce with keepdim=True."))
    for wrong, message in candidates:
        if close(g, wrong, **tol) and not close(wrong, right, **tol):
            hint(f"on {label}: {message}")
    if bool((~torch.isfinite(g) & torch.isfinite(right)).any()):
        hint(f"nan or ±inf on {label}, where the answer is finite: exp of a large score overflows (exp(1000) is "
             "inf in float64 as in float32). "
             "Subtract each slice's maximum before exponentiating; the log-softmax does not change when a "
             "constant is subtracted from every score.")


@checker("Exercise 2.1")
def stable_log_softmax(my_log_softmax) -> None:
    """``my_log_softmax(x, dim=-1)``: the log of the softmax along ``dim``, computed without overflow or
    underflow, for any number of axes; masked (-inf) scores give -inf."""
    classes = [("", False, False), (", with requires_grad", True, False), (", under torch.no_grad()", False, True)]
    facts = source_facts(my_log_softmax)
    with watch() as seen:
        for index, (label, x, dim) in enumerate(_log_softmax_cases()):
            args = (x,) if dim is None else (x, dim)
            dim = -1 if dim is None else dim
            for extra, grad, no_grad in classes if index in (0, 8) else classes[:1]:
                where = label + extra
                text = f"my_log_softmax(x {tuple(x.shape)}" + (")" if len(args) == 1 else f", dim={dim})")
                try:
                    got = _diff.call(my_log_softmax, args, where, grad=grad, no_grad=no_grad, name="my_log_softmax",
                                     first=index == 0 and not extra)
                except StudentError as exc:
                    if isinstance(exc.error, RuntimeError) and "must match the size" in str(exc.error):
                        hint(f"the shapes do not broadcast ({where}): a reduction along dim needs keepdim=True "
                             "(x.amax(dim=dim, keepdim=True)), so that its result lines up with x.")
                    raise
                calls = seen.called(*_LIBRARY_SOFTMAX) + uses_companion(seen, facts, "companion.attention")
                if calls:  # first: what a library call gives says nothing about the student's own code
                    hint(f"your function calls {library(calls[0])}; the exercise is to write the log-softmax "
                         "yourself, with torch.exp, torch.log, amax and sum.")
                got = _diff.real_tensor(got, text)
                expected = torch.log_softmax(x, dim)
                if _diff.same_values(got, expected, where, text):
                    continue
                _log_softmax_mistakes(got, x, dim, where)
                _diff.generic(got, expected, where, text)
    own = torch.Generator().manual_seed(2026)  # the checker's own draws: the verdict is the same every run
    with torch.enable_grad():  # the caller's grad mode comes back when the block ends
        require_graph(my_log_softmax, (torch.randn(3, 4, dtype=torch.float64, generator=own),))
        if not rules.is_remote(my_log_softmax):
            x = torch.randn(3, 5, dtype=torch.float64, generator=own) * 4
            w = torch.randn(3, 5, dtype=torch.float64, generator=own)
            mine = x.clone().requires_grad_(True)
            out = my_log_softmax(mine)
            if isinstance(out, torch.Tensor) and out.requires_grad and out.shape == x.shape:
                (got,) = torch.autograd.grad((out * w).sum(), mine, allow_unused=True)
                ref = x.clone().requires_grad_(True)
                (want,) = torch.autograd.grad((torch.log_softmax(ref, -1) * w).sum(), ref)
                if got is None or not torch.allclose(got, want, rtol=1e-6, atol=1e-9):
                    hint("the values are right, but the gradient is not the log-softmax's: a .detach() (or .item(), "
                         "torch.no_grad()) on the max is fine, but on the log-sum-exp term or the sum it cuts part of "
                         "the gradient. Detach nothing but (at most) m.")
    passed("x - m - log(sum(exp(x - m))) along dim: every exponent at most 0, the sum at least 1, and no "
           "probability formed, so none can underflow before its log is taken.")


def _attention_cases():
    """(label, Q, K, V): 2-D first (the chapter's layout), then batches of any rank and size."""
    g = _gen(2)
    draw = random.Random()  # a fresh draw each run, beside the fixed classes
    shapes = [
        ("a 2-D example", (), 4, 6, 8, 3, torch.float32),
        ("a 2-D example of another width", (), 3, 5, 5, 2, torch.float32),
        ("a batch (B, n, d_k), float64", (3,), 4, 5, 6, 2, torch.float64),
        ("a batch with n = m and d_k = d_v", (2,), 5, 5, 4, 4, torch.float64),
        ("a batch of one", (1,), 3, 4, 5, 3, torch.float64),
        ("one query", (2,), 1, 6, 3, 2, torch.float64),
        ("one key", (2,), 4, 1, 3, 5, torch.float64),
        ("heads as a second batch axis (B, h, n, d_k)", (2, 3), 4, 5, 2, 3, torch.float32),
        ("a fresh random draw", (draw.randint(1, 3), draw.randint(1, 3)), draw.randint(1, 6), draw.randint(1, 6),
         draw.randint(1, 6), draw.randint(1, 6), torch.float64),
    ]
    fresh = torch.Generator().manual_seed(draw.randrange(2**31))
    cases = []
    for label, lead, n, m, d_k, d_v, dtype in shapes:
        gen = fresh if label.startswith("a fresh") else g
        cases.append((label, torch.randn(*lead, n, d_k, generator=gen, dtype=dtype),
                      torch.randn(*lead, m, d_k, generator=gen, dtype=dtype),
                      torch.randn(*lead, m, d_v, generator=gen, dtype=dtype)))
    # The first example's shapes again with new values: an answer that remembers outputs per shape fails.
    first = cases[0]
    cases.append((_AGAIN, *(torch.randn(t.shape, generator=g, dtype=t.dtype) for t in first[1:])))
    return cases


_AGAIN = "the first example's shapes again, with new values"


def _sdpa(Q, K, V, *, scale=None, dim=-1, sign=1.0, values=None, after=False, func=torch.softmax):
    scores = sign * (Q @ K.transpose(-2, -1))
    scale = math.sqrt(Q.shape[-1]) if scale is None else scale
    if after:
        return func(scores, dim) / scale @ V
    return func(scores / scale, dim) @ (V if values is None else values)


@checker("Exercise 2.2")
def attention(my_attention) -> None:
    """``my_attention(Q, K, V)`` -> ``softmax(Q K^T / sqrt(d_k)) V`` for any number of leading batch axes."""
    classes = [("", False, False), (", with requires_grad", True, False), (", under torch.no_grad()", False, True)]
    for index, (label, Q, K, V) in enumerate(_attention_cases()):
        for extra, grad, no_grad in classes if index in (2, 4) else classes[:1]:
            where = label + extra
            text = f"my_attention(Q {tuple(Q.shape)}, K {tuple(K.shape)}, V {tuple(V.shape)})"
            try:
                with watch() as seen:
                    got = _diff.call(my_attention, (Q, K, V), where, grad=grad, no_grad=no_grad,
                                     name="my_attention", first=index == 0 and not extra)
            except StudentError as exc:
                error = str(exc.error)
                if Q.dim() > 2 and isinstance(exc.error, RuntimeError) and ("size" in error or "dimension" in error):
                    hint(f"{text} fails on {where}: K.T reverses every axis of a batched tensor ((B, m, d_k) "
                         "becomes (d_k, m, B)); transpose only the last two, K.transpose(-2, -1).")
                raise
            shortcuts = seen.called("scaled_dot_product_attention", "multi_head_attention_forward",
                                    "_scaled_dot_product_attention")
            if shortcuts:
                hint(f"your function calls {library(shortcuts[0])}, the very thing the exercise asks you to "
                     "write: compute the scores, the softmax and the weighted sum yourself.")
            expected = _sdpa(Q, K, V)
            if isinstance(got, tuple) and len(got) == 2 and close(got[0], expected):
                hint("return only the output (..., n, d_v), not a pair; the weights are not part of the answer here.")
            got = _diff.real_tensor(got, text)
            if label == _AGAIN and got.shape == expected.shape and not close(got, expected):
                Q0, K0, V0 = _attention_cases()[0][1:]
                if close(got, _sdpa(Q0, K0, V0)):
                    hint(f"on {where}, your function returned the output of the first call: it remembers earlier "
                         "results by shape, but these are new values. Compute every call from the Q, K and V it "
                         "is given.")
            if _diff.same_values(got, expected, where, text):
                if grad and not got.requires_grad and not rules.is_remote(my_attention):
                    hint("the values are right, but no gradient flows back to the inputs: compute with torch "
                         "operations on the tensors you are given (no .detach(), .numpy(), torch.tensor(...)).")
                continue
            _attention_mistakes(got, Q, K, V, where)
            _diff.generic(got, expected, where, text)
    Q, K, V = _attention_cases()[2][1:]
    require_graph(my_attention, (Q, K, V))
    passed("softmax(Q Kᵀ / sqrt(d_k)) V over the last two axes: one weighted average of the value rows per "
           "query, for every sequence and head of a batch.")


def _attention_mistakes(got, Q, K, V, where):
    n, d_k = Q.shape[-2:]
    m, d_v = V.shape[-2:]
    weights = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(d_k), -1)
    if close(got, weights):
        hint("you returned the attention weights (..., n, m); multiply them by V to get the output.")
    if close(got, weights @ K):
        hint("you averaged the key rows; the weighted average is of the value rows: weights @ V.")
    mistakes = [
        (dict(scale=1.0), "you forgot the scale: divide the scores by sqrt(d_k) before the softmax."),
        (dict(scale=d_k), "you divided by d_k; the scale is its square root, sqrt(d_k) (chapter 1 measured why)."),
        (dict(scale=d_k / 2), "operator precedence: d_k ** 1/2 is (d_k ** 1) / 2. Write math.sqrt(d_k) or d_k ** 0.5."),
        (dict(scale=2 * d_k), "operator precedence: x / d_k ** 1/2 is (x / d_k) / 2. Write math.sqrt(d_k) or d_k ** 0.5."),
        (dict(scale=1 / math.sqrt(d_k)), "you multiplied by sqrt(d_k); divide by it."),
        (dict(scale=math.sqrt(d_v)), "you divided by sqrt(d_v), the width of the values; the scale is sqrt(d_k), "
                                     "the width of the queries and keys (Q.shape[-1])."),
        (dict(scale=math.sqrt(m)), "you divided by the square root of a sequence length; the scale is sqrt(d_k), "
                                   "the width of each query and key (Q.shape[-1])."),
        (dict(scale=math.sqrt(n)), "you divided by the square root of a sequence length; the scale is sqrt(d_k), "
                                   "the width of each query and key (Q.shape[-1])."),
        (dict(scale=math.sqrt(Q.shape[0])), f"you divided by sqrt(Q.shape[0]), which is a batch size on {where}: "
                                            "the scale is sqrt(Q.shape[-1])."),
        (dict(dim=1), "softmax over dim=1: on a batch (B, n, m) that is the queries' axis, not the keys'. "
                      "Count from the end, dim=-1, so that any number of leading axes works."),
        (dict(dim=0), "softmax over the wrong axis: on 2-D scores dim=0 (or dim=-2) is the queries, on a batch "
                      "dim=0 is the batch; the weights of each query sum to 1 over the keys, dim=-1."),
        (dict(dim=-2), "softmax over the queries' axis: on scores (..., n, m) the keys are the last axis; each "
                       "query's weights must sum to 1 over the keys, dim=-1 (dim=1 is the queries on a batch)."),
        (dict(after=True), "the scale goes inside the softmax: softmax(Q Kᵀ / sqrt(d_k)), not "
                           "softmax(Q Kᵀ) / sqrt(d_k)."),
        (dict(func=lambda x, dim: x), "the softmax is missing: the scaled scores must become weights that are "
                                      "positive and sum to 1 in each row."),
        (dict(func=lambda x, dim: torch.sigmoid(x)), "a sigmoid gives each weight separately; the weights of a "
                                                     "row must sum to 1: use the softmax over the keys."),
        (dict(sign=-1.0), "the sign of the scores is flipped: a larger q · k must give a larger weight."),
        (dict(scale=math.sqrt(8)), f"for queries of width d_k = {d_k} the scale is sqrt({d_k}): compute it from "
                                   "the input, Q.shape[-1], not from the example's numbers."),
    ]
    expected = _sdpa(Q, K, V)
    for kwargs, message in mistakes:
        try:
            wrong = _sdpa(Q, K, V, **kwargs)
        except (RuntimeError, IndexError):
            continue
        if close(got, wrong) and not close(wrong, expected):
            hint(message if "where" in message or Q.dim() == 2 else f"{message} (fails on {where})")


@checker("Exercise 2.3")
def causal(my_causal_mask) -> None:
    """``my_causal_mask(T, S=None)`` -> bool (T, S): the T queries are the last T of S positions."""
    draw = random.Random()
    S_fresh = draw.randint(2, 12)
    cases = [((4,), "a square mask, T = 4"), ((1,), "T = 1"), ((7,), "an odd T = 7"),
             ((3, 5), "3 queries after 2 cached keys, (T, S) = (3, 5)"),
             ((1, 6), "one new query after 5 cached keys (T = 1, S = 6)"), ((4, 4), "T = S given twice"),
             ((1, 1), "T = S = 1"), ((2, 9), "(T, S) = (2, 9)"),
             ((draw.randint(1, S_fresh), S_fresh), "a fresh random (T, S)")]
    for index, (args, label) in enumerate(cases):
        T = args[0]
        S = args[1] if len(args) > 1 else T
        text = f"my_causal_mask({', '.join(map(str, args))})"
        got = _diff.call(my_causal_mask, args, label, name="my_causal_mask", first=index == 0)
        got = _diff.real_tensor(got, text, "a boolean tensor")
        expected = causal_mask(T, S)
        if got.dtype != torch.bool:
            if tuple(got.shape) == (T, S) and close(got, torch.zeros(T, S).masked_fill(~expected, float("-inf"))):
                hint("that is the additive float mask (0 and -inf); the exercise asks for the boolean mask, "
                     "True = may attend.")
            hint(f"wrong type: return a boolean tensor (True = may attend), got dtype {got.dtype}. Comparisons such "
                 "as j <= i give one.")
        if tuple(got.shape) != (T, S):
            if tuple(got.shape) == (T, T) and S != T:
                hint(f"{text} has shape ({T}, {T}): the second argument S is the number of keys, so the mask is "
                     f"({T}, {S}), one column per key, cached ones included.")
            hint(f"{text} ({label}) should have shape ({T}, {S}), got {tuple(got.shape)}.", generic=True)
        if torch.equal(got, expected):
            continue
        ones = torch.ones(T, S, dtype=torch.bool)
        if torch.equal(got, ones.tril()) and S != T:
            hint(f"{text}: your mask is aligned top-left (as torch's is_causal=True is for T < S), so the last "
                 f"query sees only {T} keys. The queries are the LAST {T} positions: query i sits at position "
                 f"i + {S - T} and sees keys j <= i + S - T.")
        if torch.equal(got, ones.tril(S - T - 1)):
            hint(f"{text}: the diagonal is masked: a token cannot see itself. Query i sees keys j <= i + S - T.")
        if torch.equal(got, ones.tril(S - T + 1)) and S - T + 1 < S:
            hint(f"{text}: one key too many: query i sees keys j <= i + S - T, not one more.")
        if torch.equal(got, ~expected):
            hint("inverted: you marked the hidden keys. True must mean 'may attend', as in torch's "
                 "scaled_dot_product_attention.")
        if torch.equal(got, ones.triu(S - T)) or torch.equal(got, ones.triu()):
            hint("you kept the upper triangle: query i may only look back, at keys j <= i + S - T (the lower "
                 "triangle).")
        if got.all():
            hint("nothing is masked: a query must not see the keys after its own position.")
        _diff.generic(got.int(), expected.int(), label, text, "mask")
    passed("query i, at position i + S - T, sees keys 0..i + S - T: itself and the past, cached keys "
           "included, never the future.")


@checker("Exercise 2.4")
def padding(my_padding_mask) -> None:
    """``my_padding_mask(lengths, S)`` -> bool (B, S, S): causal and padding combined, True = may attend."""
    draw = random.Random()
    S_fresh = draw.randint(1, 8)
    cases = [
        ("lengths [3, 1, 4], S = 4", torch.tensor([3, 1, 4]), 4),
        ("S larger than every length", torch.tensor([2, 0, 5, 1]), 6),
        ("a batch of one", torch.tensor([2]), 5),
        ("an empty sequence (length 0)", torch.tensor([0, 3]), 3),
        ("S = 1", torch.tensor([1, 0]), 1),
        ("int32 lengths", torch.tensor([4, 2, 3], dtype=torch.int32), 5),
        ("a fresh random batch", torch.tensor([draw.randint(0, S_fresh) for _ in range(draw.randint(1, 4))]), S_fresh),
    ]
    for index, (label, lengths, S) in enumerate(cases):
        text = f"my_padding_mask({lengths.tolist()}, {S})"
        got = _diff.call(my_padding_mask, (lengths, S), label, name="my_padding_mask", first=index == 0)
        got = _diff.real_tensor(got, text, "a boolean tensor")
        B = lengths.shape[0]
        keys = padding_mask(lengths, S)  # (B, S)
        expected = keys[:, None, :] & causal_mask(S)  # (B, S, S)
        if got.dtype != torch.bool:
            hint(f"wrong type: return a boolean tensor (True = may attend), got dtype {got.dtype}.")
        if tuple(got.shape) != (B, S, S):
            if tuple(got.shape) == (B, S):
                hint(f"{text} has shape (B, S): that is the key padding mask alone. The exercise asks for the "
                     f"whole (B, S, S) mask, one (S, S) table per sequence, combining it with the causal mask.")
            if tuple(got.shape) == (B, 1, S):
                hint(f"{text} has shape (B, 1, S): the padding mask broadcast over the queries, without the causal "
                     "rule. Combine it with the (S, S) causal mask (&) into (B, S, S).")
            hint(f"{text} ({label}) should have shape (B, S, S) = {(B, S, S)}, got {tuple(got.shape)}.",
                 generic=True)
        if torch.equal(got, expected):
            continue
        causal_only = causal_mask(S).expand(B, S, S)
        ar = torch.arange(S)
        if torch.equal(got, causal_only):
            hint(f"{text}: only the causal rule: the padding keys (j >= lengths[b]) must be hidden too.")
        if torch.equal(got, keys[:, None, :].expand(B, S, S)):
            hint(f"{text}: only the padding rule: a query must not see the keys after it (j > i) either.")
        if torch.equal(got, expected & keys[:, :, None]):
            hint(f"{text}: you hid every key from the padded queries too (their rows are all False). The rule "
                 "looks at the keys only: a padded query's output is thrown away later, and a row with "
                 "nothing to see needs the special care of the next section.")
        if torch.equal(got, (ar[None, None, :] <= lengths[:, None, None]) & causal_mask(S)):
            hint(f"{text}: one position too many: a sequence of length L holds positions 0..L-1, so j < L.")
        if torch.equal(got, (ar[None, None, :] < lengths[:, None, None] - 1) & causal_mask(S)):
            hint(f"{text}: one position too few: a sequence of length L holds positions 0..L-1, so j < L.")
        if torch.equal(got, ~expected):
            hint("inverted: True must mean 'may attend'.")
        if torch.equal(got, keys[:, None, :] | causal_mask(S)):
            hint(f"{text}: you combined the rules with 'or'; a key may be attended only when both allow it (&).")
        if torch.equal(got, expected.transpose(1, 2)):
            hint(f"{text}: transposed: the rows are the queries i, the columns the keys j.")
        _diff.generic(got.int(), expected.int(), label, text, "mask")
    passed("key j is visible to query i of sequence b only when j <= i and j < lengths[b]: both rules, "
           "one (B, S, S) mask.")
