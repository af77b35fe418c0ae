"""Mutation registry of chapter 4 (layer normalization): see tests/mutation_harness.py.

Wrong answers must get a hint and never pass; the right variants (RIGHT_*) must pass."""
import pytest
import torch
import torch.nn.functional as F

from companion.exercises import norm as check
from mutation_harness import Exercise, Mutant, make_tests


def _ln(x, dim, eps, unbiased=False, eps_outside=False):
    mean = x.mean(dim, keepdim=True)
    var = x.var(dim, keepdim=True, unbiased=unbiased)
    return (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)


# --- 4.1: LayerNorm of a (B, d, T) tensor -------------------------------------------------------------
def my_layer_norm_channels_first(x, weight, bias, eps):
    mean = x.mean(dim=1, keepdim=True)  # (B, 1, T): one mean per token
    var = ((x - mean) ** 2).mean(dim=1, keepdim=True)  # (B, 1, T), biased
    x_hat = (x - mean) / torch.sqrt(var + eps)
    return x_hat * weight[:, None] + bias[:, None]  # (d, 1): per feature


def _via_permute(x, w, b, eps):  # right: move the features last, normalize, move them back
    h = x.transpose(1, 2)
    return (_ln(h, -1, eps) * w + b).transpose(1, 2)


def _with_grad_on(x, w, b, eps):  # wrong: switches gradients on under no_grad
    torch.set_grad_enabled(True)
    return my_layer_norm_channels_first(x, w, b, eps)


def _flag_on_caller(x, w, b, eps):  # wrong: requires_grad_ on the caller's tensor
    x.requires_grad_(True)
    return my_layer_norm_channels_first(x, w, b, eps)


def _draws(x, w, b, eps):  # wrong: draws from the global generator
    torch.rand(1)
    return my_layer_norm_channels_first(x, w, b, eps)


def _raises_on_t1(x, w, b, eps):  # a branch left unwritten
    if x.shape[-1] == 1:
        raise NotImplementedError
    return my_layer_norm_channels_first(x, w, b, eps)


LAYER_NORM_CF = [
    Mutant("no eps", lambda x, w, b, eps: _ln(x, 1, 0.0) * w[:, None] + b[:, None], "`eps` is missing"),
    Mutant("eps fixed at 1e-5", lambda x, w, b, eps: _ln(x, 1, 1e-5) * w[:, None] + b[:, None], "fixed in your code"),
    Mutant("over the positions (dim=-1)", lambda x, w, b, eps: _ln(x, -1, eps) * w[:, None] + b[:, None],
           "features are axis 1"),
    Mutant("over the batch", lambda x, w, b, eps: _ln(x, 0, eps) * w[:, None] + b[:, None], "batch normalization"),
    Mutant("per sequence (GroupNorm of one group)", lambda x, w, b, eps: _ln(x, (1, 2), eps) * w[:, None] + b[:, None],
           "one mean and variance per sequence"),
    Mutant("eps outside the sqrt", lambda x, w, b, eps: _ln(x, 1, eps, eps_outside=True) * w[:, None] + b[:, None],
           "inside the square root"),
    Mutant("unbiased variance", lambda x, w, b, eps: _ln(x, 1, eps, unbiased=True) * w[:, None] + b[:, None],
           "biased variance"),
    Mutant("scale along T", lambda x, w, b, eps: _ln(x, 1, eps) * w + b if x.shape[1] == x.shape[2]
           else _ln(x, 1, eps) * w[:, None] + b[:, None] + (x.shape[1] == 0)),
    Mutant("no scale and shift", lambda x, w, b, eps: _ln(x, 1, eps), "missing"),
    Mutant("no shift", lambda x, w, b, eps: _ln(x, 1, eps) * w[:, None], "shift `bias` is missing"),
    Mutant("no scale", lambda x, w, b, eps: _ln(x, 1, eps) + b[:, None], "scale `weight` is missing"),
    Mutant("not permuted back", lambda x, w, b, eps: _ln(x.transpose(1, 2), -1, eps) * w + b, "transposed"),
    Mutant("F.layer_norm after a permute", lambda x, w, b, eps: F.layer_norm(
        x.transpose(1, 2), (x.shape[1],), w, b, eps).transpose(1, 2), "calls the library's layer_norm"),
    Mutant("F.group_norm", lambda x, w, b, eps: F.group_norm(x, 1, w, b, eps), "calls the library's"),
    Mutant("switches grad on", _with_grad_on, "switched gradients back on"),
    Mutant("requires_grad_ on the caller's x", _flag_on_caller, "requires_grad"),
    Mutant("draws random numbers", _draws, "random numbers"),
    Mutant("NotImplementedError for T = 1", _raises_on_t1, "one position (T = 1)"),
    Mutant("returns None", lambda x, w, b, eps: None, "wrong type"),
    Mutant("returns a list", lambda x, w, b, eps: my_layer_norm_channels_first(x, w, b, eps).tolist(), "wrong type"),
    Mutant("returns a meta tensor", lambda x, w, b, eps: torch.empty(x.shape, device="meta"), "wrong type"),
    Mutant("float32 inside, always", lambda x, w, b, eps: my_layer_norm_channels_first(
        x.float(), w.float(), b.float(), eps).to(x.dtype), "float32 precision only"),
    Mutant("in place on x", lambda x, w, b, eps: x.sub_(x.mean(1, keepdim=True)), "in place"),
]

RIGHT_LAYER_NORM_CF = [
    _via_permute,
    lambda x, w, b, eps: (x - x.mean(1, keepdim=True)) * torch.rsqrt(x.var(1, keepdim=True, unbiased=False) + eps)
    * w.view(1, -1, 1) + b.view(1, -1, 1),
    lambda x, w, b, eps: torch.einsum("bdt,d->bdt", _ln(x, 1, eps), w) + b[:, None],
]


# --- 4.2: BatchNorm over the real tokens of a padded batch -----------------------------------------------
def my_masked_batch_norm(x, mask, eps):
    real = x[mask]  # (N, d): the real tokens of every sequence
    mean = real.mean(dim=0)  # (d,): one mean per feature
    var = ((real - mean) ** 2).mean(dim=0)  # (d,), biased
    out = (x - mean) / torch.sqrt(var + eps)
    return out * mask[..., None]  # 0 at padding


def _pooled(x, mask, eps, count_pad=False, keep_pad=False, unbiased=False, eps_outside=False, per_position=False,
            divide_all=False):
    m = torch.ones_like(x[..., :1]) if count_pad else mask[..., None].to(x.dtype)
    dims = (0,) if per_position else (0, 1)
    n = m.sum(dims, keepdim=True)
    if divide_all:
        n = torch.full_like(n, x.shape[0] * (1 if per_position else x.shape[1]))
    mean = (x * m).sum(dims, keepdim=True) / n
    var = (((x - mean) * m) ** 2).sum(dims, keepdim=True) / (n - (1 if unbiased else 0))
    y = (x - mean) / (var.sqrt() + eps) if eps_outside else (x - mean) / torch.sqrt(var + eps)
    return y if keep_pad else y * mask[..., None]


def _one_pass(x, mask, eps):  # var = E[x**2] - E[x]**2 over the real tokens: cancels for a large mean
    real = x[mask]
    mean = real.mean(dim=0)
    var = (real * real).mean(dim=0) - mean ** 2
    return (x - mean) / torch.sqrt(var + eps) * mask[..., None]


MASKED = [
    Mutant("one-pass variance E[x**2] - E[x]**2", _one_pass, "loses its digits"),
    Mutant("padding in the statistics", lambda x, m, eps: _pooled(x, m, eps, count_pad=True), "real tokens only"),
    Mutant("plain BatchNorm over B and T", lambda x, m, eps: _pooled(x, m, eps, count_pad=True, keep_pad=True),
           "are not set to 0"),
    Mutant("divides by B * T", lambda x, m, eps: _pooled(x, m, eps, divide_all=True), "B * T"),
    Mutant("padding not zeroed", lambda x, m, eps: _pooled(x, m, eps, keep_pad=True), "padded positions are not 0"),
    Mutant("per position", lambda x, m, eps: _pooled(x, m, eps, per_position=True), "each position separately"),
    Mutant("unbiased variance", lambda x, m, eps: _pooled(x, m, eps, unbiased=True), "minus one"),
    Mutant("eps outside the sqrt", lambda x, m, eps: _pooled(x, m, eps, eps_outside=True), "inside the square root"),
    Mutant("LayerNorm instead", lambda x, m, eps: _ln(x, -1, eps) * m[..., None], "that is LayerNorm"),
    Mutant("F.batch_norm on the real tokens", lambda x, m, eps: torch.zeros_like(x).index_put(
        torch.where(m), F.batch_norm(x[m], None, None, training=True, eps=eps)), "calls the library's batch_norm"),
    Mutant("mask inverted", lambda x, m, eps: _pooled(x, ~m, eps) if (~m).any() else my_masked_batch_norm(x, m, eps) + 1),
    Mutant("returns None", lambda x, m, eps: None, "wrong type"),
    Mutant("returns a bool tensor", lambda x, m, eps: m, "wrong type"),
    Mutant("drops the padding rows", lambda x, m, eps: _pooled(x, m, eps)[m]),
    Mutant("mask applied in place", lambda x, m, eps: my_masked_batch_norm(x.mul_(m[..., None]), m, eps), "in place"),
    Mutant("sets requires_grad", lambda x, m, eps: my_masked_batch_norm(x.requires_grad_(True), m, eps)
           if x.is_leaf else my_masked_batch_norm(x, m, eps), "requires_grad"),
]

RIGHT_MASKED = [
    lambda x, m, eps: _pooled(x, m, eps),
    lambda x, m, eps: torch.where(m[..., None], (x - x[m].mean(0)) / torch.sqrt(x[m].var(0, unbiased=False) + eps),
                                  torch.zeros((), dtype=x.dtype)),
]


# --- 4.3: RMSNorm of float16 / bfloat16 tokens, computed in float32 ---------------------------------------
def my_rms_norm_half(x, weight, eps):
    h = x.float()  # float32: the squares of features above 256 overflow float16
    h = h / torch.sqrt(h.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)  # back to the input's dtype, then scale


def _in_dtype(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


HALF = [
    Mutant("no eps", lambda x, w, eps: w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True))).to(
        x.dtype)),  # its hint (eps inside, in float32) is shared with the float16 pre-scale below: no own text
    Mutant("computed in float16", _in_dtype, "overflow"),
    Mutant("returns float32", lambda x, w, eps: x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
           * w.float(), "input's dtype"),
    Mutant("no weight", lambda x, w, eps: (x.float() / torch.sqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(
        x.dtype), "`weight` is missing"),
    Mutant("eps outside", lambda x, w, eps: w * (x.float() / (x.float().pow(2).mean(-1, keepdim=True).sqrt() + eps)).to(
        x.dtype), "inside the square root"),
    Mutant("subtracts the mean", lambda x, w, eps: (w.float() * _ln(x.float(), -1, eps)).to(x.dtype),
           "does not subtract the mean"),
    Mutant("over the tokens", lambda x, w, eps: (w.float() * x.float() * torch.rsqrt(
        x.float().pow(2).mean(0, keepdim=True) + eps)).to(x.dtype), "not over the tokens"),
    Mutant("float16 with a pre-scale by 1/16 only for float16", lambda x, w, eps: _in_dtype(x / 16, w, eps / 256)
           if x.dtype == torch.float16 else _in_dtype(x, w, eps)),
    Mutant("always casts to float16", lambda x, w, eps: my_rms_norm_half(x, w, eps).half(), "input's dtype"),
    Mutant("torch's rms_norm", lambda x, w, eps: F.rms_norm(x.float(), (x.shape[-1],), w.float(), eps).to(x.dtype),
           "calls the library's rms_norm"),
    Mutant("sum of squares", lambda x, w, eps: w * (x.float() * torch.rsqrt(x.float().pow(2).sum(-1, keepdim=True)
                                                                           + eps)).to(x.dtype)),
    Mutant("returns None", lambda x, w, eps: None, "wrong type"),
    Mutant("returns a string", lambda x, w, eps: "x", "wrong type"),
    # The text prescribes Llama's order (cast, then multiply by weight in x's dtype): one rounding apart.
    Mutant("weight applied in float32, cast once", lambda x, w, eps: (x.float() * torch.rsqrt(
        x.float().pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype), "Llama's"),
    Mutant("uses backward", lambda x, w, eps: (my_rms_norm_half(x, w, eps).float().sum().backward()
                                               if x.requires_grad else None) or my_rms_norm_half(x, w, eps), ".grad"),
]

RIGHT_HALF = [
    lambda x, w, eps: w * (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype),
    lambda x, w, eps: (x.double() / torch.sqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w,
]


EXERCISES = [
    Exercise(check.layer_norm_channels_first, my_layer_norm_channels_first, LAYER_NORM_CF),
    Exercise(check.masked_batch_norm, my_masked_batch_norm, MASKED),
    Exercise(check.rms_norm_half, my_rms_norm_half, HALF),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)


@pytest.mark.parametrize("checker,right", [(check.layer_norm_channels_first, r) for r in RIGHT_LAYER_NORM_CF]
                         + [(check.masked_batch_norm, r) for r in RIGHT_MASKED]
                         + [(check.rms_norm_half, r) for r in RIGHT_HALF])
def test_right_variants_pass(checker, right):
    fb = checker(right)
    assert fb.passed, fb


def test_stub_is_not_attempted_and_junk_is_a_wrong_type():
    def stub(*args):
        raise NotImplementedError

    for checker in (check.layer_norm_channels_first, check.masked_batch_norm, check.rms_norm_half):
        assert checker(stub).status == "not attempted"
        for junk in (None, "text", 10**400, 1j, [], object(), torch.empty(2, device="meta")):
            fb = checker(lambda *args, junk=junk: junk)
            assert fb.status == "hint" and "wrong type" in fb.message, (checker.exercise, junk, fb)
