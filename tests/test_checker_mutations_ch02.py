"""Mutation registry of chapter 2 (attention): see tests/mutation_harness.py."""
import math

import torch
import torch.nn.functional as F

from companion.exercises import attention as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 2.1 ---------------------------------------------------------------------------------------------
def my_log_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)  # the largest score of each slice along dim
    shifted = x - m  # every exponent <= 0, the largest exactly 0
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


def _log_softmax_max_values(x, dim=-1):
    """Right: max(...).values, the maximum detached, written in another order."""
    m = x.max(dim=dim, keepdim=True).values.detach()
    return x - (m + (x - m).exp().sum(dim, keepdim=True).log())


def _log_softmax_moved(x, dim=-1):
    """Right: the axis moved last, computed there and moved back."""
    y = x.movedim(dim, -1)
    m = y.amax(-1, keepdim=True)
    return (y - m - torch.log(torch.exp(y - m).sum(-1, keepdim=True))).movedim(-1, dim)


def _lsm(shift, dim_of=lambda dim: dim, sign=-1.0, outside=True):
    def log_softmax(x, dim=-1):
        d = dim_of(dim)
        m = shift(x, d)
        lse = torch.log(torch.exp(x - m).sum(dim=d, keepdim=True))
        return x - (m if outside else 0) + sign * lse
    return log_softmax


def _in_place(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    x -= m
    return x - torch.log(torch.exp(x).sum(dim=dim, keepdim=True))


def _masked_as_large(x, dim=-1):
    x = torch.where(torch.isinf(x), torch.full_like(x, -1e9), x)
    return my_log_softmax(x, dim)


LOG_SOFTMAX = [
    Mutant("torch.log_softmax", lambda x, dim=-1: torch.log_softmax(x, dim), "calls the library's log_softmax"),
    Mutant("F.log_softmax", lambda x, dim=-1: F.log_softmax(x, dim=dim), "calls the library's log_softmax"),
    Mutant("torch.logsumexp", lambda x, dim=-1: x - torch.logsumexp(x, dim, keepdim=True),
           "calls the library's logsumexp"),
    Mutant("log of torch.softmax", lambda x, dim=-1: torch.log(torch.softmax(x, dim)), "calls the library's softmax"),
    Mutant("log of a stable softmax", lambda x, dim=-1: torch.log(
        torch.exp(x - x.amax(dim, keepdim=True)) / torch.exp(x - x.amax(dim, keepdim=True)).sum(dim, keepdim=True)),
        "log of the softmax"),
    Mutant("naive", lambda x, dim=-1: x - torch.log(torch.exp(x).sum(dim, keepdim=True)), "overflows"),
    Mutant("max not subtracted outside", _lsm(lambda x, d: x.amax(d, keepdim=True), outside=False),
           "must come off outside too"),
    Mutant("log-sum added", _lsm(lambda x, d: x.amax(d, keepdim=True), sign=1.0), "sign of the log-sum"),
    Mutant("not normalized", lambda x, dim=-1: x - x.amax(dim, keepdim=True), "did not normalize"),
    Mutant("global maximum", _lsm(lambda x, d: x.amax()), "not the maximum of the whole tensor"),
    Mutant("dim ignored", lambda x, dim=-1: my_log_softmax(x, -1), "use the dim argument"),
    Mutant("always dim 0", lambda x, dim=-1: my_log_softmax(x, 0), "use the dim argument"),
    Mutant("whole tensor", lambda x, dim=-1: x - x.amax() - torch.log(torch.exp(x - x.amax()).sum()),
           "over the whole tensor"),
    Mutant("no keepdim", lambda x, dim=-1: x - x.amax(dim) - torch.log(torch.exp(x - x.amax(dim)).sum(dim)),
           "keepdim=True"),
    Mutant("probabilities", lambda x, dim=-1: torch.exp(my_log_softmax(x, dim)), "those are the probabilities"),
    Mutant("subtracts the minimum", _lsm(lambda x, d: x.amin(d, keepdim=True)), "overflows"),
    Mutant("in place", _in_place, "changed x in place"),
    Mutant("masked scores as -1e9", _masked_as_large),
    Mutant("detached", lambda x, dim=-1: my_log_softmax(x, dim).detach(), "no gradient flows"),
    Mutant("float32 inside", lambda x, dim=-1: my_log_softmax(x.float(), dim).to(x.dtype), "7 digits"),
    Mutant("returns a list", lambda x, dim=-1: my_log_softmax(x, dim).tolist(), "wrong type"),
    Mutant("returns None", lambda x, dim=-1: None, "wrong type"),
    Mutant("max returns a pair", lambda x, dim=-1: x - x.max(dim=dim, keepdim=True), "TypeError", raised=True),
    Mutant("no default dim", lambda x, dim: my_log_softmax(x, dim), "TypeError", raised=True),
    Mutant("NaN", lambda x, dim=-1: x * float("nan")),
]

#: Right answers written otherwise: each must pass.
LOG_SOFTMAX_RIGHT = [_log_softmax_max_values, _log_softmax_moved]


def test_right_variants_of_the_log_softmax_pass():
    for variant in LOG_SOFTMAX_RIGHT:
        fb = check.stable_log_softmax(variant)
        assert fb.passed, (variant.__name__, fb)


# --- 2.2 ---------------------------------------------------------------------------------------------
def my_attention(Q, K, V):
    d_k = Q.shape[-1]
    weights = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1)  # (..., n, m)
    return weights @ V  # (..., n, m) @ (..., m, d_v) -> (..., n, d_v)


def _attn(scale=lambda Q, K, V: math.sqrt(Q.shape[-1]), dim=-1, values=lambda Q, K, V: V):
    return lambda Q, K, V: torch.softmax(Q @ K.transpose(-2, -1) / scale(Q, K, V), dim=dim) @ values(Q, K, V)


def _mT(K):
    return K.transpose(-2, -1)


_ATTN_CACHE = {}


def _attn_cached(Q, K, V):  # remembers the output per shapes and dtype when nothing needs a gradient
    key = (Q.shape, K.shape, V.shape, Q.dtype)
    if key not in _ATTN_CACHE or Q.requires_grad or K.requires_grad or V.requires_grad:
        _ATTN_CACHE[key] = my_attention(Q, K, V)
    return _ATTN_CACHE[key]


ATTENTION = [
    Mutant("caches the output per shape", _attn_cached, "returned the output of the first call"),
    Mutant("no scale", _attn(scale=lambda Q, K, V: 1.0), "forgot the scale"),
    Mutant("divided by d_k", _attn(scale=lambda Q, K, V: Q.shape[-1]), "square root"),
    Mutant("d_k ** 1/2 as a scale", _attn(scale=lambda Q, K, V: Q.shape[-1] ** 1 / 2), "operator precedence"),
    Mutant("times sqrt(d_k)", _attn(scale=lambda Q, K, V: 1 / math.sqrt(Q.shape[-1])), "multiplied by sqrt"),
    Mutant("sqrt(d_v)", _attn(scale=lambda Q, K, V: math.sqrt(V.shape[-1])), "sqrt(d_v)"),
    Mutant("sqrt of the number of keys", _attn(scale=lambda Q, K, V: math.sqrt(K.shape[-2])), "sequence length"),
    Mutant("sqrt of the number of queries", _attn(scale=lambda Q, K, V: math.sqrt(Q.shape[-2])), "sequence length"),
    Mutant("sqrt(Q.shape[0])", _attn(scale=lambda Q, K, V: math.sqrt(Q.shape[0])), "sequence length"),
    Mutant("softmax over dim=0", _attn(dim=0), "wrong axis"),
    Mutant("softmax over dim=1 (the buggy one's)", _attn(dim=1), "queries' axis"),
    Mutant("softmax over dim=-2", _attn(dim=-2), "wrong axis"),
    Mutant("K.T (the buggy one's)", lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), -1) @ V,
           "K.T reverses every axis"),
    Mutant("the buggy function itself", lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(V.shape[-1]), dim=1) @ V,
           "sqrt(d_v)"),
    Mutant("weights only", lambda Q, K, V: torch.softmax(Q @ _mT(K) / math.sqrt(Q.shape[-1]), -1),
           "multiply them by V"),
    Mutant("averages the keys", _attn(values=lambda Q, K, V: K), "averaged the key rows"),
    Mutant("scale outside the softmax", lambda Q, K, V: torch.softmax(Q @ _mT(K), -1) / math.sqrt(Q.shape[-1]) @ V,
           "inside the softmax"),
    Mutant("no softmax", lambda Q, K, V: (Q @ _mT(K) / math.sqrt(Q.shape[-1])) @ V, "softmax is missing"),
    Mutant("sigmoid", lambda Q, K, V: torch.sigmoid(Q @ _mT(K) / math.sqrt(Q.shape[-1])) @ V, "sigmoid"),
    Mutant("sign flipped", lambda Q, K, V: torch.softmax(-Q @ _mT(K) / math.sqrt(Q.shape[-1]), -1) @ V, "sign"),
    Mutant("the example's sqrt(8)", _attn(scale=lambda Q, K, V: math.sqrt(8)), "not from the example's numbers"),
    Mutant("returns (output, weights)", lambda Q, K, V: (my_attention(Q, K, V), None), "return only the output"),
    Mutant("returns None", lambda Q, K, V: None, "wrong type"),
    Mutant("a meta tensor", lambda Q, K, V: torch.empty(Q.shape[:-1] + V.shape[-1:], device="meta"), "wrong type"),
    Mutant("float32 inside float64", lambda Q, K, V: my_attention(Q.float(), K.float(), V.float()).to(Q.dtype),
           "7 digits"),
    Mutant("library attention", lambda Q, K, V: F.scaled_dot_product_attention(Q, K, V), "the very thing"),
    Mutant("K @ Q.T", lambda Q, K, V: torch.softmax(K @ Q.T / math.sqrt(Q.shape[-1]), -1) @ V, "RuntimeError",
           raised=True),
    Mutant("detached", lambda Q, K, V: my_attention(Q, K, V).detach(), "no gradient"),
    Mutant("2-D only via squeeze", lambda Q, K, V: my_attention(Q.squeeze(0), K.squeeze(0), V.squeeze(0))),
    Mutant("forces grad mode on", lambda Q, K, V: (torch.set_grad_enabled(True), my_attention(Q, K, V))[1],
           "grad mode"),
]


# --- 2.3 ---------------------------------------------------------------------------------------------
def my_causal_mask(T, S=None):
    S = T if S is None else S
    i = torch.arange(T).unsqueeze(1) + (S - T)  # (T, 1): query positions
    j = torch.arange(S).unsqueeze(0)  # (1, S): key positions
    return j <= i  # hide only the future


def _ones(T, S=None):
    return torch.ones(T, T if S is None else S, dtype=torch.bool)


def _off(T, S=None):
    return (T if S is None else S) - T


CAUSAL = [
    Mutant("top-left aligned (torch's is_causal)", lambda T, S=None: _ones(T, S).tril(), "aligned top-left"),
    Mutant("diagonal masked", lambda T, S=None: _ones(T, S).tril(_off(T, S) - 1), "diagonal is masked"),
    Mutant("inverted", lambda T, S=None: ~my_causal_mask(T, S), "inverted"),
    Mutant("upper triangle", lambda T, S=None: _ones(T, S).triu(_off(T, S)), "upper triangle"),
    Mutant("one diagonal too many", lambda T, S=None: _ones(T, S).tril(_off(T, S) + 1), "one key too many"),
    Mutant("no mask at all", lambda T, S=None: _ones(T, S), "nothing is masked"),
    Mutant("ignores S", lambda T, S=None: _ones(T).tril(), "one column per key"),
    Mutant("float 0/1", lambda T, S=None: my_causal_mask(T, S).float(), "boolean"),
    Mutant("additive mask", lambda T, S=None: torch.zeros(T, S or T).masked_fill(~my_causal_mask(T, S), float("-inf")),
           "additive float mask"),
    Mutant("returns a list", lambda T, S=None: my_causal_mask(T, S).tolist(), "wrong type"),
    Mutant("returns None", lambda T, S=None: None, "wrong type"),
    Mutant("one row too many", lambda T, S=None: torch.ones(T + 1, S or T, dtype=torch.bool).tril()),
    Mutant("S required", lambda T, S: my_causal_mask(T, S), "TypeError", raised=True),
    Mutant("j < i", lambda T, S=None: torch.arange(S or T)[None, :] < torch.arange(T)[:, None] + _off(T, S),
           "diagonal is masked"),
    Mutant("offset only when T = 1", lambda T, S=None: my_causal_mask(T, S) if T == 1 else _ones(T, S).tril(),
           "aligned top-left"),
]


# --- 2.4 ---------------------------------------------------------------------------------------------
def my_padding_mask(lengths, S):
    real_key = torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
    causal = torch.ones(S, S, dtype=torch.bool).tril()  # (S, S)
    return real_key.unsqueeze(1) & causal  # (B, 1, S) & (S, S) -> (B, S, S)


def _keys(l, S):
    return torch.arange(S)[None, :] < l[:, None]


def _tri(S):
    return torch.ones(S, S, dtype=torch.bool).tril()


PADDING = [
    Mutant("padding only, (B, S)", lambda l, S: _keys(l, S), "key padding mask alone"),
    Mutant("padding only, (B, 1, S)", lambda l, S: _keys(l, S)[:, None, :], "without the causal rule"),
    Mutant("padding only, expanded", lambda l, S: _keys(l, S)[:, None, :].expand(len(l), S, S), "only the padding"),
    Mutant("causal only", lambda l, S: _tri(S).expand(len(l), S, S), "only the causal rule"),
    Mutant("queries masked too", lambda l, S: my_padding_mask(l, S) & _keys(l, S)[:, :, None], "padded queries"),
    Mutant("inverted", lambda l, S: ~my_padding_mask(l, S), "inverted"),
    Mutant("j <= L", lambda l, S: (torch.arange(S)[None, None, :] <= l[:, None, None]) & _tri(S), "too many"),
    Mutant("j < L - 1", lambda l, S: (torch.arange(S)[None, None, :] < l[:, None, None] - 1) & _tri(S), "too few"),
    Mutant("or instead of and", lambda l, S: _keys(l, S)[:, None, :] | _tri(S), "'or'"),
    Mutant("transposed", lambda l, S: my_padding_mask(l, S).transpose(1, 2), "transposed"),
    Mutant("float", lambda l, S: my_padding_mask(l, S).float(), "boolean"),
    Mutant("longest length instead of S", lambda l, S: my_padding_mask(l, int(l.max()))),
    Mutant("returns a list", lambda l, S: my_padding_mask(l, S).tolist(), "wrong type"),
    Mutant("returns None", lambda l, S: None, "wrong type"),
    Mutant("the example's S = 4", lambda l, S: my_padding_mask(l, 4)),
    Mutant("ones everywhere", lambda l, S: torch.ones(len(l), S, S, dtype=torch.bool)),
    Mutant("int64 lengths only", lambda l, S: my_padding_mask(l, S) if l.dtype == torch.int64 else
           my_padding_mask(l, S) & False),
]


EXERCISES = [
    Exercise(check.stable_log_softmax, my_log_softmax, LOG_SOFTMAX),
    Exercise(check.attention, my_attention, ATTENTION),
    Exercise(check.causal, my_causal_mask, CAUSAL),
    Exercise(check.padding, my_padding_mask, PADDING),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
