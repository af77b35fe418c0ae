"""Mutation registry of chapter 4 (layer normalization): see tests/mutation_harness.py."""
import torch
import torch.nn.functional as F

from companion.exercises import norm as check
from mutation_harness import Exercise, Mutant, make_tests


def _norm(x, dim=-1, eps=1e-5, unbiased=False, eps_outside=False, sqrt=True, center=True):
    mean = x.mean(dim=dim, keepdim=True) if center else 0
    var = ((x - x.mean(dim=dim, keepdim=True)) ** 2).sum(dim=dim, keepdim=True) / (x.shape[dim] - (1 if unbiased else 0))
    if eps_outside:
        return (x - mean) / (var.sqrt() + eps)
    return (x - mean) / (torch.sqrt(var + eps) if sqrt else var + eps)


# --- 4.1 ---------------------------------------------------------------------------------------------
def my_layer_norm(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)  # (n, 1)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # (n, 1), biased
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


LAYER_NORM = [
    Mutant("over the batch", lambda x, w, b, eps: _norm(x, 0, eps) * w + b, "batch normalization"),
    Mutant("whole tensor", lambda x, w, b, eps: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps) * w + b,
           "whole tensor"),
    Mutant("eps outside the sqrt", lambda x, w, b, eps: _norm(x, eps=eps, eps_outside=True) * w + b,
           "inside the square root"),
    Mutant("unbiased variance", lambda x, w, b, eps: _norm(x, eps=eps, unbiased=True) * w + b, "biased variance"),
    Mutant("no eps", lambda x, w, b, eps: _norm(x, eps=0.0) * w + b, "`eps` is missing"),
    Mutant("divides by the variance", lambda x, w, b, eps: _norm(x, eps=eps, sqrt=False) * w + b,
           "not by the variance"),
    Mutant("no scale and shift", lambda x, w, b, eps: _norm(x, eps=eps), "`weight` and shift `bias` are missing"),
    Mutant("no shift", lambda x, w, b, eps: _norm(x, eps=eps) * w, "shift `bias` is missing"),
    Mutant("no scale", lambda x, w, b, eps: _norm(x, eps=eps) + b, "scale `weight` is missing"),
    Mutant("shift then scale", lambda x, w, b, eps: (_norm(x, eps=eps) + b) * w, "scale first, then shift"),
    Mutant("only centred", lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) * w + b, "did not divide"),
    Mutant("F.layer_norm", lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps), "calls the library's layer_norm"),
    Mutant("nn.LayerNorm", lambda x, w, b, eps: torch.nn.LayerNorm(x.shape[-1], eps=eps, dtype=x.dtype)(x) * w + b,
           "calls the library's layer_norm"),
    Mutant("transposed", lambda x, w, b, eps: my_layer_norm(x, w, b, eps).T, "transposed"),
    Mutant("returns None", lambda x, w, b, eps: None, "return a tensor"),
    Mutant("keepdim forgotten", lambda x, w, b, eps: (x - x.mean(-1)) / torch.sqrt(x.var(-1, unbiased=False) + eps) * w + b,
           "RuntimeError", raised=True),
    Mutant("eps squared", lambda x, w, b, eps: _norm(x, eps=eps**2) * w + b),
]


# --- 4.2 ---------------------------------------------------------------------------------------------
def my_batch_norm(x, eps):
    mean = x.mean(dim=0, keepdim=True)  # (1, d): one mean per feature
    var = ((x - mean) ** 2).mean(dim=0, keepdim=True)  # (1, d)
    return (x - mean) / torch.sqrt(var + eps)


BATCH_NORM = [
    Mutant("over the features", lambda x, eps: _norm(x, -1, eps), "that is LayerNorm"),
    Mutant("whole tensor", lambda x, eps: (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + eps), "whole tensor"),
    Mutant("eps outside the sqrt", lambda x, eps: _norm(x, 0, eps, eps_outside=True), "inside the square root"),
    Mutant("unbiased variance", lambda x, eps: _norm(x, 0, eps, unbiased=True), "biased variance"),
    Mutant("no eps", lambda x, eps: _norm(x, 0, 0.0), "`eps` is missing"),
    Mutant("divides by the variance", lambda x, eps: _norm(x, 0, eps, sqrt=False), "not by the variance"),
    Mutant("only centred", lambda x, eps: x - x.mean(0, keepdim=True), "did not divide"),
    Mutant("transposed", lambda x, eps: my_batch_norm(x, eps).T, "transposed"),
    Mutant("returns None", lambda x, eps: None, "return a tensor"),
    Mutant("returns a list", lambda x, eps: my_batch_norm(x, eps).tolist(), "return a tensor"),
    Mutant("not centred", lambda x, eps: _norm(x, 0, eps, center=False)),
    Mutant("F.batch_norm with running stats", lambda x, eps: F.batch_norm(
        x, torch.zeros(x.shape[1], dtype=x.dtype), torch.ones(x.shape[1], dtype=x.dtype), eps=eps)),
]


# --- 4.3 ---------------------------------------------------------------------------------------------
def my_rms_norm(x, weight, eps):
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (n, 1)
    return x / torch.sqrt(mean_square + eps) * weight


def _ms(x):
    return x.pow(2).mean(-1, keepdim=True)


RMS_NORM = [
    Mutant("subtracts the mean", lambda x, w, eps: _norm(x, -1, eps) * w, "does not subtract the mean"),
    Mutant("eps outside the sqrt", lambda x, w, eps: x / (_ms(x).sqrt() + eps) * w, "inside the square root"),
    Mutant("sum of squares", lambda x, w, eps: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + eps) * w, "not their sum"),
    Mutant("over the batch", lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + eps) * w,
           "not over the batch"),
    Mutant("whole tensor", lambda x, w, eps: x / torch.sqrt(x.pow(2).mean() + eps) * w, "whole tensor"),
    Mutant("no scale", lambda x, w, eps: x / torch.sqrt(_ms(x) + eps), "learned scale"),
    Mutant("no sqrt", lambda x, w, eps: x / (_ms(x) + eps) * w, "not by the mean square itself"),
    Mutant("mean of |x|", lambda x, w, eps: x / torch.sqrt(x.abs().mean(-1, keepdim=True) + eps) * w, "square first"),
    Mutant("square of the mean", lambda x, w, eps: x / torch.sqrt(x.mean(-1, keepdim=True) ** 2 + eps) * w,
           "square first"),
    Mutant("no eps", lambda x, w, eps: x / torch.sqrt(_ms(x)) * w, "`eps` is missing"),
    Mutant("transposed", lambda x, w, eps: my_rms_norm(x, w, eps).T, "transposed"),
    Mutant("returns None", lambda x, w, eps: None, "return a tensor"),
    Mutant("keepdim forgotten", lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1) + eps) * w, "RuntimeError",
           raised=True),
    Mutant("multiplies by the rms", lambda x, w, eps: x * torch.sqrt(_ms(x) + eps) * w),
]


EXERCISES = [
    Exercise(check.layer_norm, my_layer_norm, LAYER_NORM),
    Exercise(check.batch_norm, my_batch_norm, BATCH_NORM),
    Exercise(check.rms_norm, my_rms_norm, RMS_NORM),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
