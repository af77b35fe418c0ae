"""Mutation registry of chapter 6 (the transformer block): see tests/mutation_harness.py."""
import torch
import torch.nn.functional as F

from companion.exercises import block as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 6.1: the pre-norm block from its parameters ------------------------------------------------------
from companion.exercises.block import _block_ref  # the reference with one switch per slip  # noqa: E402


def my_block_forward(block, x):
    return _block_ref(block, x)


def _slip(**switch):
    return lambda block, x: _block_ref(block, x, **switch)


def _train_mode(block, x):
    block.train()
    return _block_ref(block, x)


def _writes_param(block, x):
    with torch.no_grad():
        block.norm1.weight.mul_(1.0)
        block.norm1.weight.add_(0.0)
        block.norm2.bias is not None and block.norm2.bias.add_(1e-3)
    return _block_ref(block, x)


def _eps_hardcoded(block, x):
    eps1, eps2 = block.norm1.eps, block.norm2.eps
    block.norm1.eps = block.norm2.eps = 1e-5
    try:
        return _block_ref(block, x)
    finally:
        block.norm1.eps, block.norm2.eps = eps1, eps2


_CACHE = {}


def _cache_by_block(block, x):  # remembers the output per block and shape: stale after a training step
    key = (id(block), tuple(x.shape), x.dtype)
    if key not in _CACHE or x.requires_grad:
        _CACHE[key] = _block_ref(block, x)
    return _CACHE[key]


def _frozen(block, x):
    for p in block.parameters():
        p.requires_grad_(False)
    return _block_ref(block, x)


class _Detached:  # the block's parameters read through .detach(): x keeps its gradient, the weights do not
    def __init__(self, module):
        self.module = module

    def __getattr__(self, name):
        value = getattr(self.module, name)
        if isinstance(value, torch.nn.Parameter):
            return value.detach()
        return _Detached(value) if isinstance(value, torch.nn.Module) else value


BLOCK_FORWARD = [
    Mutant("eps hard-coded to 1e-5", _eps_hardcoded, "eps"),
    Mutant("caches the output per block and shape", _cache_by_block, "after its weights changed"),
    Mutant("freezes the block's parameters", _frozen, "requires_grad"),
    Mutant("detached weights", lambda block, x: _block_ref(_Detached(block), x), "no gradient reaches"),
    Mutant("post-norm", _slip(post=True), "post-norm block"),
    Mutant("no causal mask", _slip(causal=False), "causal mask is missing"),
    Mutant("no 1/sqrt(d_head)", _slip(scale=False), "sqrt(d_head)"),
    Mutant("heads not split", _slip(split=False), "heads are not split"),
    Mutant("residual adds the normalized input", _slip(residual_normed=True), "adds the normalized input"),
    Mutant("unbiased variance", _slip(unbiased=True), "biased variance"),
    Mutant("always ReLU", _slip(activation="relu"), "you always used the ReLU"),
    Mutant("exact GELU for gelu_tanh", _slip(activation="gelu"), "gelu_tanh"),
    Mutant("weights untransposed", _slip(transpose=False), "RuntimeError", raised=True),
    Mutant("no output projection", _slip(out_proj=False), "out_proj"),
    Mutant("calls the block", lambda block, x: block(x, is_causal=True), "the block itself"),
    Mutant("calls the sublayers", lambda block, x: x + block.attn(block.norm1(x), is_causal=True)[0]
           + 0 * x, "block.attn"),
    Mutant("SDPA", lambda block, x: x + 0 * F.scaled_dot_product_attention(x[:, None], x[:, None], x[:, None])[:, 0]
           + _block_ref(block, x) - x, "scaled_dot_product_attention"),
    Mutant("leaves train mode", _train_mode, "training mode"),
    Mutant("writes a parameter", _writes_param, "changed the block's parameter"),
    Mutant("float32 inside", lambda block, x: _block_ref(block.float(), x.float()).to(x.dtype),
           "changed the block's parameter"),
    Mutant("returns None", lambda block, x: None, "wrong type"),
    Mutant("returns a string", lambda block, x: "out", "wrong type"),
]


# --- 6.2: the crossover length ------------------------------------------------------------------------
def my_crossover(d, d_ff):
    return 2 * d + d_ff


CROSSOVER = [
    Mutant("6 d", lambda d, f: 6 * d, "for d_ff = 4 d only"),
    Mutant("FFN counted twice", lambda d, f: 2 * d + 2 * f, "not 8 n d d_ff"),
    Mutant("4 d from the projections", lambda d, f: 4 * d + f, "add 2 d to n"),
    Mutant("d from the projections", lambda d, f: d + f, "2 d, not d"),
    Mutant("6 d scaled", lambda d, f: 1.5 * f, "scales the projections' share"),
    Mutant("attention 8 n^2 d", lambda d, f: (2 * d + f) / 2, "not 8 n^2 d"),
    Mutant("attention 2 n^2 d", lambda d, f: 2 * (2 * d + f), "divide by 4 n d"),
    Mutant("off by one", lambda d, f: 2 * d + f + 1),
    Mutant("returns a string", lambda d, f: str(2 * d + f), "should return a number"),
    Mutant("returns None", lambda d, f: None, "should return one number"),
    Mutant("square root", lambda d, f: (d * (2 * d + f)) ** 0.5),
]


# --- 6.3 ---------------------------------------------------------------------------------------------
def my_block_params(d_model, d_ff, cross_attention, bias):
    b = 1 if bias else 0
    attention = 4 * d_model * d_model + 4 * d_model * b  # W_Q, W_K, W_V, W_O
    norm = d_model * (1 + b)  # scale, and shift with biases
    feed_forward = 2 * d_model * d_ff + (d_ff + d_model) * b
    n = 2 if cross_attention else 1
    return n * (attention + norm) + norm + feed_forward


def _count(attention=lambda d, b: 4 * d * d + 4 * d * b, norm=lambda d, b: d * (1 + b),
           ff=lambda d, f, b: 2 * d * f + (f + d) * b, n_norms=lambda c: 3 if c else 2, n_attn=lambda c: 2 if c else 1):
    return lambda d, f, c, bias: (n_attn(c) * attention(d, int(bias)) + n_norms(c) * norm(d, int(bias))
                                  + ff(d, f, int(bias)))


BLOCK_PARAMS = [
    Mutant("d_ff = 4 d", _count(ff=lambda d, f, b: 2 * d * 4 * d + (5 * d) * b), "use the d_ff you are given"),
    Mutant("d_ff = d", _count(ff=lambda d, f, b: 2 * d * d + 2 * d * b), "hidden layer of the feed-forward network"),
    Mutant("ignores cross_attention", lambda d, f, c, b: my_block_params(d, f, False, b), "second attention sublayer"),
    Mutant("no third LayerNorm", _count(n_norms=lambda c: 2), "its own LayerNorm: three LayerNorms"),
    Mutant("cross-attention without W_O", lambda d, f, c, b: my_block_params(d, f, c, b) - (d * d + d * b if c else 0),
           "W_O included"),
    Mutant("cross-attention with Q and O only", lambda d, f, c, b: my_block_params(d, f, c, b)
           - (2 * d * d + 2 * d * b if c else 0), "their own d_model x d_model projections"),
    Mutant("LayerNorm shift kept without biases", _count(norm=lambda d, b: 2 * d), "no shift either"),
    Mutant("LayerNorm scale dropped too", _count(norm=lambda d, b: d * b), None),
    Mutant("linear biases kept without biases", _count(attention=lambda d, b: 4 * d * d + 4 * d,
                                                       ff=lambda d, f, b: 2 * d * f + f + d), "no linear layer"),
    Mutant("ignores bias", lambda d, f, c, b: my_block_params(d, f, c, True), "no biases to count"),
    Mutant("norms scale only", _count(norm=lambda d, b: d), "a scale and a shift"),
    Mutant("no feed-forward biases", _count(ff=lambda d, f, b: 2 * d * f), "feed-forward biases are missing"),
    Mutant("no attention biases", _count(attention=lambda d, b: 4 * d * d), "projections' biases are missing"),
    Mutant("no LayerNorms", _count(n_norms=lambda c: 0), "one before each sublayer"),
    Mutant("12 d^2 + 13 d", lambda d, f, c, b: 12 * d * d + 13 * d),
    Mutant("a fraction", lambda d, f, c, b: my_block_params(d, f, c, b) + 0.5, "not a whole number"),
    Mutant("returns a string", lambda d, f, c, b: f"{my_block_params(d, f, c, b):,}", "whole number"),
    Mutant("returns None", lambda d, f, c, b: None, "whole number"),
    Mutant("off by one", lambda d, f, c, b: my_block_params(d, f, c, b) - 1),
    Mutant("returns a tensor of floats", lambda d, f, c, b: torch.tensor(my_block_params(d, f, c, b) + 0.25),
           "a float"),
    Mutant("a constant", lambda d, f, c, b: 7, None),
]


EXERCISES = [
    Exercise(check.block_forward, my_block_forward, BLOCK_FORWARD),
    Exercise(check.crossover, my_crossover, CROSSOVER),
    Exercise(check.block_params, my_block_params, BLOCK_PARAMS),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)


def test_right_variants_pass():
    import numpy as np
    assert check.crossover(lambda d, f: float(2 * d + f)).passed
    assert check.crossover(lambda d, f: np.int64(2 * d + f)).passed
    assert check.crossover(lambda d, f: torch.tensor(2 * d + f)).passed
