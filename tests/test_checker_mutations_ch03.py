"""Mutation registry of chapter 3 (multi-head attention): see tests/mutation_harness.py."""
import math

import torch

from companion.exercises import multihead as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 3.1 ---------------------------------------------------------------------------------------------
def my_count(d_model, n_heads, bias):
    d_head = d_model // n_heads
    qkv = 3 * n_heads * d_model * d_head  # = 3 d^2, whatever n_heads is
    out = d_model * d_model  # W_O: (h d_head) x d = d x d
    biases = 4 * d_model if bias else 0
    return qkv + out + biases


COUNT = [
    Mutant("no output projection", lambda d, h, b: 3 * d * d + (3 * d if b else 0), "output projection W_O"),
    Mutant("full width per head", lambda d, h, b: h * 4 * d * d + (4 * d if b else 0), "does not depend on h"),
    Mutant("forgets the biases", lambda d, h, b: 4 * d * d, "also has d"),
    Mutant("biases always", lambda d, h, b: 4 * d * d + 4 * d, "no biases to count"),
    Mutant("one bias per layer", lambda d, h, b: 4 * d * d + (4 if b else 0), "one bias per output feature"),
    Mutant("d biases in all", lambda d, h, b: 4 * d * d + (d if b else 0), "one bias per output feature"),
    Mutant("one head's slices", lambda d, h, b: 4 * d * (d // h) + (4 * d // h if b else 0), "one head's slices"),
    Mutant("weights of 2 d", lambda d, h, b: 4 * 2 * d + (4 * d if b else 0), "d x d weight matrix"),
    Mutant("a fraction", lambda d, h, b: my_count(d, h, b) + 0.5, "not a whole number"),
    Mutant("returns a string", lambda d, h, b: str(my_count(d, h, b)), "whole number"),
    Mutant("returns None", lambda d, h, b: None, "whole number"),
    Mutant("returns a bool", lambda d, h, b: True, "a bool"),
    Mutant("off by one", lambda d, h, b: my_count(d, h, b) + 1),
    Mutant("returns the parts", lambda d, h, b: [4 * d * d, 4 * d if b else 0], "whole number"),
    Mutant("d_head squared", lambda d, h, b: 4 * h * (d // h) ** 2 + (4 * d if b else 0), "one head's slices"),  # 4 h d_head^2 = 4 d d_head
]


# --- 3.2 ---------------------------------------------------------------------------------------------
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)  # (B, T, h, d_head) -> (B, h, T, d_head)


def _split(fn):
    def split(x, h):
        B, T, d = x.shape
        return fn(x, B, T, d, h, d // h)
    return split


SPLIT = [
    Mutant("no transpose", _split(lambda x, B, T, d, h, dh: x.view(B, T, h, dh)), "also transpose dims 1 and 2"),
    Mutant("reshape straight", _split(lambda x, B, T, d, h, dh: x.reshape(B, h, T, dh)), "mixes tokens"),
    Mutant("head index the faster one", _split(lambda x, B, T, d, h, dh: x.view(B, T, dh, h).permute(0, 3, 1, 2)),
           "head index must be the slower one"),
    Mutant("(B, h, d_head, T)", _split(lambda x, B, T, d, h, dh: x.view(B, T, h, dh).permute(0, 2, 3, 1)),
           "last two dimensions are swapped"),
    Mutant("batch and heads merged", _split(lambda x, B, T, d, h, dh: x.view(B, T, h, dh).transpose(1, 2).reshape(
        B * h, T, dh)), "keep the batch and head dimensions apart"),
    Mutant("returns a list", lambda x, h: my_split_heads(x, h).tolist(), "return a tensor"),
    Mutant("returns None", lambda x, h: None, "return a tensor"),
    Mutant("the example's shape", lambda x, h: x.view(2, 3, 4, 2).transpose(1, 2), "RuntimeError", raised=True),
    Mutant("float d_head", _split(lambda x, B, T, d, h, dh: x.view(B, T, h, d / h).transpose(1, 2)), "TypeError",
           raised=True),
    Mutant("heads in reverse order", lambda x, h: my_split_heads(x, h).flip(1)),
    Mutant("transpose(0, 2)", _split(lambda x, B, T, d, h, dh: x.view(B, T, h, dh).transpose(0, 2))),
    Mutant("doubled", lambda x, h: 2 * my_split_heads(x, h)),
]


# --- 3.3 ---------------------------------------------------------------------------------------------
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, d = x.shape
    d_head = d // n_heads
    q, k, v = (my_split_heads(x @ W, n_heads) for W in (W_Q, W_K, W_V))  # each (B, h, T, d_head)
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
    Exercise(check.split_heads, my_split_heads, SPLIT),
    Exercise(check.multi_head, my_multi_head, MULTI_HEAD),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
