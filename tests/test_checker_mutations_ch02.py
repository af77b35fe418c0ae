"""Mutation registry of chapter 2 (attention): see tests/mutation_harness.py."""
import math

import torch
import torch.nn.functional as F

from companion.exercises import attention as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 2.1 ---------------------------------------------------------------------------------------------
def my_softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))  # every exponent <= 0
    return e / e.sum(dim=-1, keepdim=True)


def _shifted(shift, dim=-1):
    def softmax(x):
        e = torch.exp(x - shift(x))
        return e / e.sum(dim=dim, keepdim=True)
    return softmax


SOFTMAX = [
    Mutant("torch.softmax", lambda x: torch.softmax(x, dim=-1), "calls the library's softmax"),
    Mutant("F.softmax", lambda x: F.softmax(x, dim=-1), "calls the library's softmax"),
    Mutant("Tensor.softmax", lambda x: x.softmax(-1), "calls the library's softmax"),
    Mutant("exp of log_softmax", lambda x: torch.log_softmax(x, -1).exp(), "calls the library's log_softmax"),
    Mutant("over the columns", _shifted(lambda x: x.amax(0, keepdim=True), dim=0), "columns sum to 1"),
    Mutant("not normalized", lambda x: torch.exp(x - x.amax(-1, keepdim=True)), "did not normalize"),
    Mutant("whole matrix sums to 1", lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(), "whole matrix"),
    Mutant("global maximum", _shifted(lambda x: x.max()), "own maximum"),
    Mutant("naive", lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), "overflows"),
    Mutant("subtracts the minimum", _shifted(lambda x: x.amin(-1, keepdim=True)), "overflows"),
    Mutant("subtracts the mean", _shifted(lambda x: x.mean(-1, keepdim=True)), "overflows"),
    Mutant("no keepdim", lambda x: torch.exp(x - x.amax(-1)) / torch.exp(x - x.amax(-1)).sum(-1), "keepdim=True"),
    Mutant("log-softmax by hand", lambda x: (x - x.amax(-1, keepdim=True)) - torch.exp(
        x - x.amax(-1, keepdim=True)).sum(-1, keepdim=True).log(), "log of the softmax"),
    Mutant("no exponential", lambda x: (x - x.amax(-1, keepdim=True)) / (x - x.amax(-1, keepdim=True)).sum(
        -1, keepdim=True), "exponentiate before normalizing"),
    Mutant("returns a list", lambda x: my_softmax(x).tolist(), "return a tensor"),
    Mutant("returns None", lambda x: None, "return a tensor"),
    Mutant("divides by the max", lambda x: torch.exp(x) / torch.exp(x).amax(-1, keepdim=True), "did not normalize"),
    Mutant("max returns a pair", lambda x: torch.exp(x - x.max(dim=-1, keepdim=True)), "TypeError", raised=True),
    Mutant("NaN", lambda x: x * float("nan")),
]


# --- 2.2 ---------------------------------------------------------------------------------------------
def my_attention(Q, K, V):
    d_k = Q.shape[-1]
    weights = torch.softmax(Q @ K.T / math.sqrt(d_k), dim=-1)  # (n, m), rows sum to 1
    return weights @ V  # (n, m) @ (m, d_v) -> (n, d_v)


def _attn(scale=lambda Q, K, V: math.sqrt(Q.shape[-1]), dim=-1, values=lambda Q, K, V: V):
    return lambda Q, K, V: torch.softmax(Q @ K.T / scale(Q, K, V), dim=dim) @ values(Q, K, V)


ATTENTION = [
    Mutant("no scale", _attn(scale=lambda Q, K, V: 1.0), "forgot the scale"),
    Mutant("divided by d_k", _attn(scale=lambda Q, K, V: Q.shape[-1]), "square root"),
    Mutant("d_k ** 1/2 as a scale", _attn(scale=lambda Q, K, V: Q.shape[-1] ** 1 / 2), "operator precedence"),
    Mutant("times sqrt(d_k)", _attn(scale=lambda Q, K, V: 1 / math.sqrt(Q.shape[-1])), "multiplied by sqrt"),
    Mutant("sqrt(d_v)", _attn(scale=lambda Q, K, V: math.sqrt(V.shape[-1])), "sqrt(d_v)"),
    Mutant("sqrt of the number of keys", _attn(scale=lambda Q, K, V: math.sqrt(K.shape[0])), "sequence length"),
    Mutant("sqrt of the number of queries", _attn(scale=lambda Q, K, V: math.sqrt(Q.shape[0])), "sequence length"),
    Mutant("softmax over the queries", _attn(dim=0), "wrong axis"),
    Mutant("weights only", lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), -1), "multiply them by V"),
    Mutant("averages the keys", _attn(values=lambda Q, K, V: K), "averaged the key rows"),
    Mutant("scale outside the softmax", lambda Q, K, V: torch.softmax(Q @ K.T, -1) / math.sqrt(Q.shape[-1]) @ V,
           "inside the softmax"),
    Mutant("no softmax", lambda Q, K, V: (Q @ K.T / math.sqrt(Q.shape[-1])) @ V, "softmax is missing"),
    Mutant("sigmoid", lambda Q, K, V: torch.sigmoid(Q @ K.T / math.sqrt(Q.shape[-1])) @ V, "sigmoid"),
    Mutant("sign flipped", lambda Q, K, V: torch.softmax(-Q @ K.T / math.sqrt(Q.shape[-1]), -1) @ V, "sign"),
    Mutant("the example's sqrt(8)", _attn(scale=lambda Q, K, V: math.sqrt(8)), "not from the example's numbers"),
    Mutant("returns (output, weights)", lambda Q, K, V: (my_attention(Q, K, V), None), "return only the output"),
    Mutant("returns None", lambda Q, K, V: None, "return a tensor"),
    Mutant("K @ Q.T", lambda Q, K, V: torch.softmax(K @ Q.T / math.sqrt(Q.shape[-1]), -1) @ V, "RuntimeError", raised=True),
    Mutant("values transposed", lambda Q, K, V: (torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), -1) @ V).T),
]


# --- 2.3 ---------------------------------------------------------------------------------------------
def my_causal_mask(T):
    i = torch.arange(T).unsqueeze(1)  # (T, 1): query positions
    j = torch.arange(T).unsqueeze(0)  # (1, T): key positions
    return j <= i  # hide only the future, j > i


def _ones(T):
    return torch.ones(T, T, dtype=torch.bool)


CAUSAL = [
    Mutant("diagonal masked", lambda T: _ones(T).tril(-1), "diagonal is masked"),
    Mutant("inverted", lambda T: ~my_causal_mask(T), "inverted"),
    Mutant("upper triangle", lambda T: _ones(T).triu(), "upper triangle"),
    Mutant("strict upper triangle", lambda T: _ones(T).triu(1), "inverted"),
    Mutant("one diagonal too many", lambda T: _ones(T).tril(1), "one diagonal too many"),
    Mutant("no mask at all", lambda T: _ones(T), "nothing is masked"),
    Mutant("float 0/1", lambda T: torch.ones(T, T).tril(), "boolean"),
    Mutant("additive mask", lambda T: torch.zeros(T, T).masked_fill(~my_causal_mask(T), float("-inf")), "additive float mask"),
    Mutant("integers", lambda T: my_causal_mask(T).int(), "boolean"),
    Mutant("returns a list", lambda T: my_causal_mask(T).tolist(), "boolean tensor"),
    Mutant("returns None", lambda T: None, "boolean tensor"),
    Mutant("one row too many", lambda T: torch.ones(T + 1, T, dtype=torch.bool).tril()),
    Mutant("the example's T = 4", lambda T: _ones(4).tril()),
    Mutant("j < i", lambda T: torch.arange(T)[None, :] < torch.arange(T)[:, None], "diagonal is masked"),
]


# --- 2.4 ---------------------------------------------------------------------------------------------
def my_padding_mask(lengths, S):
    return torch.arange(S).unsqueeze(0) < lengths.unsqueeze(1)  # (1, S) < (B, 1) -> (B, S)


PADDING = [
    Mutant("inverted", lambda l, S: ~my_padding_mask(l, S), "inverted"),
    Mutant("j <= L", lambda l, S: torch.arange(S)[None, :] <= l[:, None], "j < L, not j <= L"),
    Mutant("j < L - 1", lambda l, S: torch.arange(S)[None, :] < l[:, None] - 1, "one position too few"),
    Mutant("j >= L", lambda l, S: torch.arange(S)[None, :] >= l[:, None], "inverted"),
    Mutant("(S, B)", lambda l, S: torch.arange(S)[:, None] < l[None, :], "(S, B)"),
    Mutant("float", lambda l, S: my_padding_mask(l, S).float(), "boolean"),
    Mutant("longest length instead of S", lambda l, S: my_padding_mask(l, int(l.max())), "S columns"),
    Mutant("no unsqueeze", lambda l, S: torch.arange(S) < l, "RuntimeError", raised=True),
    Mutant("returns a list", lambda l, S: my_padding_mask(l, S).tolist(), "boolean tensor"),
    Mutant("returns None", lambda l, S: None, "boolean tensor"),
    Mutant("one column too many", lambda l, S: my_padding_mask(l, S + 1)),
    Mutant("the example's S = 4", lambda l, S: my_padding_mask(l, 4)),
    Mutant("ones everywhere", lambda l, S: torch.ones(len(l), S, dtype=torch.bool)),
]


EXERCISES = [
    Exercise(check.stable_softmax, my_softmax, SOFTMAX),
    Exercise(check.attention, my_attention, ATTENTION),
    Exercise(check.causal, my_causal_mask, CAUSAL),
    Exercise(check.padding, my_padding_mask, PADDING),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
