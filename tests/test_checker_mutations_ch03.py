"""Mutation registry of chapter 3 (multi-head attention): see tests/mutation_harness.py."""
import math

import torch

from companion.exercises import multihead as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 3.1 ---------------------------------------------------------------------------------------------
def my_count(d_model, n_heads, d_head, bias):
    inner = n_heads * d_head  # the heads side by side
    return 3 * d_model * inner + inner * d_model + (3 * inner + d_model if bias else 0)


def _usual(d, h, dh, b):
    return 4 * d * d + (4 * d if b else 0)


COUNT = [
    Mutant("the usual 4 d^2 whatever d_head", _usual, "width d_model // n_heads"),
    Mutant("d_model // n_heads as the width", lambda d, h, dh, b: my_count(d, h, d // h, b), "width d_model // n_heads"),
    Mutant("W_O counted d x d", lambda d, h, dh, b: 3 * d * h * dh + d * d + (3 * h * dh + d if b else 0),
           "W_O reads the concatenated heads"),
    Mutant("no output projection", lambda d, h, dh, b: 3 * d * h * dh + (3 * h * dh if b else 0),
           "forgot the output projection"),
    Mutant("d biases per layer", lambda d, h, dh, b: 4 * d * h * dh + (4 * d if b else 0),
           "only W_O has d_model"),
    Mutant("h d_head biases for W_O too", lambda d, h, dh, b: 4 * d * h * dh + (4 * h * dh if b else 0),
           "outputs d_model"),
    Mutant("forgets the biases", lambda d, h, dh, b: 4 * d * h * dh, "also has one bias"),
    Mutant("biases always", lambda d, h, dh, b: my_count(d, h, dh, True), "no biases to count"),
    Mutant("one head", lambda d, h, dh, b: my_count(d, 1, dh, b), "that is one head"),
    Mutant("d x d per head", lambda d, h, dh, b: 4 * d * d * h + (4 * d if b else 0), "not d_model x d_model"),
    Mutant("a fraction", lambda d, h, dh, b: my_count(d, h, dh, b) + 0.5, "not a whole number"),
    Mutant("a float", lambda d, h, dh, b: float(my_count(d, h, dh, b)), "a float"),
    Mutant("returns a string", lambda d, h, dh, b: str(my_count(d, h, dh, b)), "whole number"),
    Mutant("returns None", lambda d, h, dh, b: None, "whole number"),
    Mutant("returns a bool", lambda d, h, dh, b: True, "a bool"),
    Mutant("off by one", lambda d, h, dh, b: my_count(d, h, dh, b) + 1),
    Mutant("right only for the usual shape", lambda d, h, dh, b: _usual(d, h, dh, b) if h * dh == d else 0),
]


# --- 3.2 ---------------------------------------------------------------------------------------------
def my_split_qkv(qkv, n_heads):
    B, T, three_d = qkv.shape
    parts = qkv.view(B, T, 3, n_heads, three_d // (3 * n_heads)).permute(2, 0, 3, 1, 4)
    return parts[0], parts[1], parts[2]


def _layout(view, perm):
    def split(qkv, h):
        B, T, three_d = qkv.shape
        dh = three_d // (3 * h)
        return tuple(qkv.reshape(*view(B, T, h, dh)).permute(*perm))
    return split


SPLIT = [
    Mutant("head by head (q, k, v of each head)", _layout(lambda B, T, h, dh: (B, T, h, 3, dh), (3, 0, 2, 1, 4)),
           "head by head"),
    Mutant("head index the faster one", _layout(lambda B, T, h, dh: (B, T, 3, dh, h), (2, 0, 4, 1, 3)),
           "slower one"),
    Mutant("part index the fastest", _layout(lambda B, T, h, dh: (B, T, h, dh, 3), (4, 0, 2, 1, 3)),
           "slowest index"),
    Mutant("reshape straight", lambda qkv, h: tuple(qkv.reshape(qkv.shape[0], 3, h, qkv.shape[1], -1).transpose(0, 1)),
           "mixes the tokens"),
    Mutant("no transpose", _layout(lambda B, T, h, dh: (B, T, 3, h, dh), (2, 0, 1, 3, 4)), "heads before tokens"),
    Mutant("q and k swapped", lambda qkv, h: (lambda q, k, v: (k, q, v))(*my_split_qkv(qkv, h)), "swapped"),
    Mutant("v, k, q", lambda qkv, h: my_split_qkv(qkv, h)[::-1], "wrong order"),
    Mutant("(T, d_head) swapped", lambda qkv, h: tuple(t.transpose(-2, -1) for t in my_split_qkv(qkv, h)),
           "last two axes"),
    Mutant("stacked", lambda qkv, h: torch.stack(my_split_qkv(qkv, h)), "unbind"),
    Mutant("returns a list of lists", lambda qkv, h: [t.tolist() for t in my_split_qkv(qkv, h)], "wrong type"),
    Mutant("returns None", lambda qkv, h: None, "wrong type"),
    Mutant("detached", lambda qkv, h: tuple(t.detach() for t in my_split_qkv(qkv, h)), "stay connected"),
    Mutant("float32 always", lambda qkv, h: tuple(t.float() for t in my_split_qkv(qkv, h)), "dtype"),
    Mutant("changes qkv in place", lambda qkv, h: my_split_qkv(qkv.detach().mul_(2), h), "in place"),
    Mutant("heads in reverse order", lambda qkv, h: tuple(t.flip(1) for t in my_split_qkv(qkv, h))),
    Mutant("doubled", lambda qkv, h: tuple(2 * t for t in my_split_qkv(qkv, h))),
    Mutant("the example's heads", lambda qkv, h: my_split_qkv(qkv, 4)),
]


# --- 3.3 ---------------------------------------------------------------------------------------------
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, d = x.shape
    d_head = d // n_heads
    q, k, v = my_split_qkv(x @ torch.cat([W_Q, W_K, W_V], dim=1), n_heads)  # each (B, h, T, d_head)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d_head), dim=-1)  # (B, h, T, T)
    heads = w @ v  # (B, h, T, T) @ (B, h, T, d_head) -> (B, h, T, d_head)
    merged = heads.transpose(1, 2).reshape(B, T, d)  # (B, T, h, d_head) -> (B, T, d)
    return merged @ W_O


def _mha(scale=None, dim=-1, out_proj=True, heads=True, transposed=False, merge="transpose", split="view",
         returns=None):
    """The reference with one mistake, chosen by the arguments."""
    def mha(x, W_Q, W_K, W_V, W_O, n_heads):
        B, T, d = x.shape
        h = n_heads if heads else 1
        d_head = d // h
        if transposed:
            W_Q, W_K, W_V, W_O = W_Q.T, W_K.T, W_V.T, W_O.T

        def split_(t):
            if split == "reshape":
                return t.reshape(B, h, T, d_head)
            return t.view(B, T, h, d_head).transpose(1, 2)

        q, k, v = (split_(x @ W) for W in (W_Q, W_K, W_V))
        s = math.sqrt(d_head) if scale is None else scale(d, n_heads, d_head)
        w = torch.softmax(q @ k.transpose(-2, -1) / s, dim=dim)
        out = w @ v  # (B, h, T, d_head)
        if returns == "heads":
            return out
        merged = out.reshape(B, T, d) if merge == "reshape" else out.transpose(1, 2).reshape(B, T, d)
        result = merged @ W_O if out_proj else merged
        return (result, w) if returns == "pair" else result
    return mha


MULTI_HEAD = [
    Mutant("scale sqrt(d_model)", _mha(scale=lambda d, h, dh: math.sqrt(d)), "sqrt(d_model)"),
    Mutant("no output projection", _mha(out_proj=False), "forgot the output projection"),
    Mutant("both", _mha(scale=lambda d, h, dh: math.sqrt(d), out_proj=False), "two things"),
    Mutant("softmax over the queries", _mha(dim=-2), "wrong axis"),
    Mutant("one head", _mha(heads=False), "one full-width head"),
    Mutant("no scale", _mha(scale=lambda d, h, dh: 1.0), "forgot the scale"),
    Mutant("scale sqrt(n_heads)", _mha(scale=lambda d, h, dh: math.sqrt(h)), "sqrt(n_heads)"),
    Mutant("transposed matrices", _mha(transposed=True), "transposed matrices"),
    Mutant("merge without transpose", _mha(merge="reshape"), "merging the heads"),
    Mutant("split without transpose", _mha(split="reshape", merge="reshape"), "splitting into heads"),
    Mutant("the example's sqrt(4)", _mha(scale=lambda d, h, dh: 2.0), "not from the example's numbers"),
    Mutant("returns (output, weights)", _mha(returns="pair"), "not a tuple"),
    Mutant("returns the heads", _mha(returns="heads")),
    Mutant("returns None", lambda *a: None, "return a tensor"),
    Mutant("queries from W_K", lambda x, W_Q, W_K, W_V, W_O, h: my_multi_head(x, W_K, W_K, W_V, W_O, h)),
    Mutant("NaN", lambda *a: my_multi_head(*a) * float("nan")),
]


EXERCISES = [
    Exercise(check.parameter_count, my_count, COUNT),
    Exercise(check.split_qkv, my_split_qkv, SPLIT),
    Exercise(check.multi_head, my_multi_head, MULTI_HEAD),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
