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
def my_block_params(d_model, n_heads, d_ff):
    attention = 4 * d_model * d_model + 4 * d_model  # W_Q, W_K, W_V, W_O and biases, whatever n_heads
    feed_forward = 2 * d_model * d_ff + d_ff + d_model
    norms = 2 * 2 * d_model
    return attention + feed_forward + norms


def _count(attention=lambda d, h: 4 * d * d + 4 * d, ff=lambda d, f: 2 * d * f + f + d, norms=lambda d: 4 * d):
    return lambda d, h, f: attention(d, h) + ff(d, f) + norms(d)


BLOCK_PARAMS = [
    Mutant("d_ff = 4 d", _count(ff=lambda d, f: 2 * d * 4 * d + 4 * d + d), "use the d_ff you are given"),
    Mutant("d_ff = d", _count(ff=lambda d, f: 2 * d * d + 2 * d), "hidden layer of the feed-forward network"),
    Mutant("no LayerNorms", _count(norms=lambda d: 0), "4 d_model parameters are missing"),
    Mutant("no biases", _count(attention=lambda d, h: 4 * d * d, ff=lambda d, f: 2 * d * f), "biases are missing"),
    Mutant("no biases nor norms", _count(attention=lambda d, h: 4 * d * d, ff=lambda d, f: 2 * d * f, norms=lambda d: 0),
           "both the biases and the LayerNorm"),
    Mutant("no W_O", _count(attention=lambda d, h: 3 * d * d + 3 * d), "output projection W_O"),
    Mutant("per head full width", _count(attention=lambda d, h: h * (4 * d * d + 4 * d)), "heads share the projections"),
    Mutant("norms scale only", _count(norms=lambda d: 2 * d), "a scale and a shift"),
    Mutant("no feed-forward biases", _count(ff=lambda d, f: 2 * d * f), "feed-forward biases are missing"),
    Mutant("a fraction (true division by n_heads)", lambda d, h, f: my_block_params(d, h, f) + (d / h) % 1 + 0.5,
           "not a whole number"),
    Mutant("truncated d_head", _count(attention=lambda d, h: 3 * h * d * int(d / h * 0.9) + d * d + 4 * d)),
    Mutant("returns a string", lambda d, h, f: f"{my_block_params(d, h, f):,}", "whole number"),
    Mutant("returns None", lambda d, h, f: None, "whole number"),
    Mutant("off by one", lambda d, h, f: my_block_params(d, h, f) - 1),
    Mutant("returns a tensor of floats", lambda d, h, f: torch.tensor(my_block_params(d, h, f) + 0.25),
           "a float"),
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
