"""Red-team cases, chapter 4 (exercises 4.1, 4.2, 4.3), from the student notebook only."""
import textwrap

from _junk import junk_cases

MODULE = "companion.exercises.norm"
PRELUDE = """
import inspect

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from companion import example
from companion.attention import softmax
from companion.exercises import early_extra as check_more
from companion.exercises import norm as check
from companion.norm import LayerNorm, RMSNorm
"""

CASES = []


def C(ex, checker, fname, name, expect, why, source):
    CASES.append(dict(exercise=ex, checker=checker, module=MODULE, name=name,
                      expect=expect, why=why,
                      source=textwrap.dedent(source).lstrip("\n"), call=fname))


def make(ex, checker, fname, params):
    def add(name, expect, why, body, pre=""):
        C(ex, checker, fname, name, expect, why,
          "import math\nimport torch\nimport torch.nn.functional as F\n" + pre
          + f"\ndef {fname}({params}):\n"
          + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n")
    return add


# ---------------------------------------------------------------- 4.1
L = make("4.1", "layer_norm_channels_first", "my_layer_norm_channels_first", "x, weight, bias, eps")
OK41 = "mean = x.mean(dim=1, keepdim=True)\nvar = ((x - mean) ** 2).mean(dim=1, keepdim=True)\n"
L("right_obvious", "right", "obvious: statistics over dim=1, weight[:, None]",
  OK41 + "return (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("right_transpose_back", "right", "transposes to (B, T, d), normalizes over -1, transposes back",
  "y = x.transpose(1, 2)\nc = y - y.mean(-1, keepdim=True)\ny = c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + eps) * weight + bias\nreturn y.transpose(1, 2)")
L("right_var_mean", "right", "torch.var_mean with correction=0, view(1, -1, 1)",
  "var, mean = torch.var_mean(x, dim=1, keepdim=True, correction=0)\nreturn (x - mean) / (var + eps).sqrt() * weight.view(1, -1, 1) + bias.view(1, -1, 1)")
L("right_two_pass", "right", "centres twice, like the companion, to remove the float32 rounding of the mean",
  "c = x - x.mean(1, keepdim=True)\nc = c - c.mean(1, keepdim=True)\nreturn c * torch.rsqrt(c.pow(2).mean(1, keepdim=True) + eps) * weight[:, None] + bias[:, None]")
L("right_einsum_affine", "right", "scale via einsum, shift via unsqueeze",
  OK41 + "xh = (x - mean) / torch.sqrt(var + eps)\nreturn torch.einsum('bdt,d->bdt', xh, weight) + bias.unsqueeze(-1)")

L("mean_over_time", "wrong", "statistics over dim=-1 (positions) instead of the features",
  "mean = x.mean(dim=-1, keepdim=True)\nvar = ((x - mean) ** 2).mean(dim=-1, keepdim=True)\nreturn (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("mean_over_batch", "wrong", "statistics over dim=0",
  "mean = x.mean(dim=0, keepdim=True)\nvar = ((x - mean) ** 2).mean(dim=0, keepdim=True)\nreturn (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("unbiased_var", "wrong", "unbiased variance (divides by d - 1)",
  "mean = x.mean(dim=1, keepdim=True)\nvar = x.var(dim=1, keepdim=True)\nreturn (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("eps_outside", "wrong", "eps added to the standard deviation, outside the root",
  OK41 + "return (x - mean) / (torch.sqrt(var) + eps) * weight[:, None] + bias[:, None]")
L("no_eps", "wrong", "no eps at all: nan on a constant token",
  OK41 + "return (x - mean) / torch.sqrt(var) * weight[:, None] + bias[:, None]")
L("no_sqrt", "wrong", "divides by var + eps, forgets the square root",
  OK41 + "return (x - mean) / (var + eps) * weight[:, None] + bias[:, None]")
L("weight_not_reshaped", "wrong", "weight (d,) multiplies the last axis (positions); same shape when T == d",
  OK41 + "return (x - mean) / torch.sqrt(var + eps) * weight + bias")
L("bias_not_reshaped", "wrong", "weight reshaped, bias not: bias added along the positions",
  OK41 + "return (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias")
L("no_bias", "wrong", "forgets the shift",
  OK41 + "return (x - mean) / torch.sqrt(var + eps) * weight[:, None]")
L("no_affine", "wrong", "forgets scale and shift",
  OK41 + "return (x - mean) / torch.sqrt(var + eps)")
L("weight_bias_swapped", "wrong", "scale by bias, shift by weight",
  OK41 + "return (x - mean) / torch.sqrt(var + eps) * bias[:, None] + weight[:, None]")
L("F_layer_norm", "wrong", "F.layer_norm on the transposed tensor: forbidden by the text",
  "return F.layer_norm(x.transpose(1, 2), (x.shape[1],), weight, bias, eps).transpose(1, 2)")
L("F_group_norm", "wrong", "F.group_norm with one group: forbidden, and pools over features and positions",
  "return F.group_norm(x, 1, weight, bias, eps)")
L("nn_LayerNorm", "wrong", "builds torch.nn.LayerNorm (which calls F.layer_norm): not tensor arithmetic",
  "ln = torch.nn.LayerNorm(x.shape[1], eps=eps).to(x.dtype)\nwith torch.no_grad():\n    ln.weight.copy_(weight)\n    ln.bias.copy_(bias)\nreturn ln(x.transpose(1, 2)).transpose(1, 2)")
L("companion_LayerNorm", "wrong", "the companion's LayerNorm on the transposed tensor",
  "from companion.norm import LayerNorm\nln = LayerNorm(x.shape[1], eps=eps).to(x.dtype)\nwith torch.no_grad():\n    ln.weight.copy_(weight)\n    ln.bias.copy_(bias)\nreturn ln(x.transpose(1, 2)).transpose(1, 2)")
L("over_d_and_T", "wrong", "statistics over features and positions together (dims 1 and 2)",
  "mean = x.mean(dim=(1, 2), keepdim=True)\nvar = ((x - mean) ** 2).mean(dim=(1, 2), keepdim=True)\nreturn (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("returns_BTd", "wrong", "returns the (B, T, d) layout",
  "y = x.transpose(1, 2)\nmean = y.mean(-1, keepdim=True)\nvar = ((y - mean) ** 2).mean(-1, keepdim=True)\nreturn (y - mean) / torch.sqrt(var + eps) * weight + bias")
L("always_float32", "wrong", "computes and returns float32 whatever x's dtype",
  "x = x.float()\n" + OK41 + "return (x - mean) / torch.sqrt(var + eps) * weight.float()[:, None] + bias.float()[:, None]")
L("inplace_sub", "wrong", "x -= mean changes the caller's x",
  "mean = x.mean(dim=1, keepdim=True)\nx -= mean\nvar = (x ** 2).mean(dim=1, keepdim=True)\nreturn x / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("inplace_chain", "wrong", "x.sub_().div_() in place on the caller's tensor (through .data)",
  OK41 + "x.data.sub_(mean).div_(torch.sqrt(var + eps))\nreturn x * weight[:, None] + bias[:, None]")
L("weight_unsqueeze_", "wrong", "weight.unsqueeze_(-1) changes the caller's weight shape",
  OK41 + "weight.data = weight.data.unsqueeze(-1)\nbias.data = bias.data.unsqueeze(-1)\nreturn (x - mean) / torch.sqrt(var + eps) * weight + bias")
L("detached", "wrong", "detaches x, weight, bias: no gradient to the parameters",
  "x, weight, bias = x.detach(), weight.detach(), bias.detach()\n" + OK41 + "return (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("no_grad", "wrong", "computed under torch.no_grad()",
  "with torch.no_grad():\n" + textwrap.indent(OK41 + "return (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]", "    "))
L("one_pass_variance", "wrong", "debatable: E[x^2] - E[x]^2, which cancels catastrophically for a large mean (chapter 4 discusses this case)",
  "mean = x.mean(dim=1, keepdim=True)\nvar = (x * x).mean(dim=1, keepdim=True) - mean ** 2\nreturn (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]")
L("half_internally", "wrong", "computes in float16 and casts back",
  "y = x.half()\nmean = y.mean(dim=1, keepdim=True)\nvar = ((y - mean) ** 2).mean(dim=1, keepdim=True)\nreturn ((y - mean) / torch.sqrt(var + eps)).to(x.dtype) * weight[:, None] + bias[:, None]")
L("eps_hardcoded", "wrong", "ignores the eps argument (always 1e-5)",
  OK41 + "return (x - mean) / torch.sqrt(var + 1e-5) * weight[:, None] + bias[:, None]")
L("squeezed", "wrong", "squeeze(): a batch of one (or T = 1) loses an axis",
  OK41 + "return ((x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]).squeeze()")
L("cache_by_shape_and_grad", "wrong", "caches the output per (shape, dtype, eps) when no gradient is needed: stale output for new values",
  "global _c\ntry:\n    _c\nexcept NameError:\n    _c = {}\nkey = (tuple(x.shape), x.dtype, eps)\nif (x.requires_grad or weight.requires_grad or bias.requires_grad) or key not in _c:\n    _c[key] = ((x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True, unbiased=False) + eps) * weight[:, None] + bias[:, None])\nreturn _c[key]")
L("grad_mode_left_off", "wrong", "computes right, then torch.set_grad_enabled(False): the caller's grad mode is left off",
  "y = ((x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True, unbiased=False) + eps) * weight[:, None] + bias[:, None])\ntorch.set_grad_enabled(False)\nreturn y")
L("sets_requires_grad", "wrong", "x.requires_grad_(True) on the caller's tensor (to 'check the gradient')",
  "if x.is_leaf and x.dtype.is_floating_point:\n    x.requires_grad_(True)\nreturn ((x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True, unbiased=False) + eps) * weight[:, None] + bias[:, None])")
L("consumes_global_rng", "wrong", "right values, but draws from torch's global random generator",
  "_ = torch.rand(1)\nreturn ((x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True, unbiased=False) + eps) * weight[:, None] + bias[:, None])")
L("std_unbiased", "wrong", "x.std() (unbiased) + eps inside: two mistakes at once",
  "mean = x.mean(dim=1, keepdim=True)\nstd = x.std(dim=1, keepdim=True)\nreturn (x - mean) / torch.sqrt(std ** 2 + eps) * weight[:, None] + bias[:, None]")

# ---------------------------------------------------------------- 4.2
N = make("4.2", "masked_batch_norm", "my_masked_batch_norm", "x, mask, eps")
N("right_index", "right", "obvious: x[mask] gives the real tokens; torch.where zeroes the padding",
  "real = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nout = (x - mean) / torch.sqrt(var + eps)\nreturn torch.where(mask[..., None], out, torch.zeros_like(out))")
N("right_masked_sums", "right", "masked sums divided by the count of real tokens",
  "m = mask[..., None].to(x.dtype)\ncount = m.sum()\nmean = (x * m).sum((0, 1)) / count\nvar = (((x - mean) ** 2) * m).sum((0, 1)) / count\nreturn (x - mean) / torch.sqrt(var + eps) * m")
N("right_var_mean", "right", "torch.var_mean(correction=0) on the real tokens, masked_fill for the padding",
  "var, mean = torch.var_mean(x[mask], dim=0, correction=0)\nout = (x - mean) * torch.rsqrt(var + eps)\nreturn out.masked_fill(~mask[..., None], 0.0)")
N("right_scatter_back", "right", "normalizes the real tokens and scatters them into zeros",
  "real = x[mask]\nmean = real.mean(0, keepdim=True)\nvar = (real - mean).pow(2).mean(0, keepdim=True)\nout = torch.zeros_like(x)\nout[mask] = (real - mean) / (var + eps).sqrt()\nreturn out")

N("all_positions", "wrong", "plain BatchNorm: statistics over all positions, padding included",
  "mean = x.mean((0, 1))\nvar = ((x - mean) ** 2).mean((0, 1))\nreturn (x - mean) / torch.sqrt(var + eps) * mask[..., None]")
N("per_sequence", "wrong", "statistics per sequence (over its real positions), not over the batch",
  "m = mask[..., None].to(x.dtype)\ncount = m.sum(1, keepdim=True)\nmean = (x * m).sum(1, keepdim=True) / count\nvar = (((x - mean) ** 2) * m).sum(1, keepdim=True) / count\nreturn torch.nan_to_num((x - mean) / torch.sqrt(var + eps)) * m")
N("per_token", "wrong", "LayerNorm (over the features of each token) instead of per feature",
  "mean = x.mean(-1, keepdim=True)\nvar = ((x - mean) ** 2).mean(-1, keepdim=True)\nreturn (x - mean) / torch.sqrt(var + eps) * mask[..., None]")
N("unbiased", "wrong", "unbiased variance over the real tokens",
  "real = x[mask]\nmean = real.mean(0)\nvar = real.var(0)\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("padding_not_zeroed", "wrong", "normalizes the padded positions too instead of returning 0 there",
  "real = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn (x - mean) / torch.sqrt(var + eps)")
N("padding_kept", "wrong", "leaves the padded positions as they were in x",
  "real = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), x)")
N("count_all", "wrong", "masked sums divided by B*T (every position) instead of the real count",
  "m = mask[..., None].to(x.dtype)\nmean = (x * m).mean((0, 1))\nvar = (((x - mean) ** 2) * m).mean((0, 1))\nreturn (x - mean) / torch.sqrt(var + eps) * m")
N("count_times_d", "wrong", "counts the expanded mask (B, T, d): the count is d times too large",
  "m = mask[..., None].expand_as(x).to(x.dtype)\ncount = m.sum()\nmean = (x * m).sum((0, 1)) / count\nvar = (((x - mean) ** 2) * m).sum((0, 1)) / count\nreturn (x - mean) / torch.sqrt(var + eps) * m")
N("eps_outside", "wrong", "eps added outside the square root",
  "real = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(mask[..., None], (x - mean) / (torch.sqrt(var) + eps), 0.0)")
N("var_over_all", "wrong", "mean over the real tokens, variance over all positions",
  "mean = x[mask].mean(0)\nvar = ((x - mean) ** 2).mean((0, 1))\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("mask_inverted", "wrong", "treats True as padding",
  "real = x[~mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(~mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("inplace_zero_padding", "wrong", "x[~mask] = 0 writes into the caller's x",
  "x[~mask] = 0\nm = mask[..., None].to(x.dtype)\ncount = m.sum()\nmean = x.sum((0, 1)) / count\nvar = (((x - mean) ** 2) * m).sum((0, 1)) / count\nreturn (x - mean) / torch.sqrt(var + eps) * m")
N("inplace_masked_fill_", "wrong", "x.masked_fill_ in place (through .data) on the caller's x",
  "x.data.masked_fill_(~mask[..., None], 0.0)\nreal = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("inplace_mask_unsqueeze_", "wrong", "mask.unsqueeze_(-1) changes the caller's mask shape",
  "mask.unsqueeze_(-1)\nm = mask.to(x.dtype)\ncount = m.sum()\nmean = (x * m).sum((0, 1)) / count\nvar = (((x - mean) ** 2) * m).sum((0, 1)) / count\nreturn (x - mean) / torch.sqrt(var + eps) * m")
N("returns_real_only", "wrong", "returns only the real tokens, shape (N, d)",
  "real = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn (real - mean) / torch.sqrt(var + eps)")
N("detached", "wrong", "detached result: no gradient",
  "x = x.detach()\nreal = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("F_batch_norm", "wrong", "debatable: F.batch_norm on the real tokens; the text says 'tensor arithmetic only'",
  "real = x[mask]\nout = torch.zeros_like(x)\nout[mask] = F.batch_norm(real, None, None, training=True, eps=eps)\nreturn out")
N("always_float32", "wrong", "computes and returns float32 whatever x's dtype",
  "x = x.float()\nreal = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("mean_of_sequence_means", "wrong", "averages per-sequence means: every sequence weighs the same whatever its length",
  "m = mask[..., None].to(x.dtype)\nseq_mean = (x * m).sum(1) / m.sum(1).clamp(min=1)\nmean = seq_mean.mean(0)\nseq_var = (((x - mean) ** 2) * m).sum(1) / m.sum(1).clamp(min=1)\nvar = seq_var.mean(0)\nreturn (x - mean) / torch.sqrt(var + eps) * m")
N("eps_hardcoded", "wrong", "ignores the eps argument (always 1e-5)",
  "real = x[mask]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + 1e-5), 0.0)")
N("scalar_stats", "wrong", "one mean and variance over all real entries (not per feature)",
  "real = x[mask]\nmean = real.mean()\nvar = ((real - mean) ** 2).mean()\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("one_pass_variance", "wrong", "debatable: E[x^2] - E[x]^2 over the real tokens (cancellation for a large mean)",
  "real = x[mask]\nmean = real.mean(0)\nvar = (real * real).mean(0) - mean ** 2\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")
N("cache_by_shape_and_grad", "wrong", "caches the output per (shape, dtype, eps) when no gradient is needed: stale output for new values",
  "global _c\ntry:\n    _c\nexcept NameError:\n    _c = {}\nkey = (tuple(x.shape), x.dtype, eps)\nif x.requires_grad or key not in _c:\n    _c[key] = torch.where(mask[..., None], (x - x[mask].mean(0)) / torch.sqrt(x[mask].var(0, unbiased=False) + eps), torch.zeros_like(x))\nreturn _c[key]")
N("grad_mode_left_off", "wrong", "computes right, then torch.set_grad_enabled(False): the caller's grad mode is left off",
  "y = torch.where(mask[..., None], (x - x[mask].mean(0)) / torch.sqrt(x[mask].var(0, unbiased=False) + eps), torch.zeros_like(x))\ntorch.set_grad_enabled(False)\nreturn y")
N("first_sequence_stats", "wrong", "statistics from sequence 0's real tokens only",
  "real = x[0][mask[0]]\nmean = real.mean(0)\nvar = ((real - mean) ** 2).mean(0)\nreturn torch.where(mask[..., None], (x - mean) / torch.sqrt(var + eps), 0.0)")

# ---------------------------------------------------------------- 4.3
R = make("4.3", "rms_norm_half", "my_rms_norm_half", "x, weight, eps")
R("right_llama", "right", "obvious (Llama): float32 mean square and rsqrt, cast back, times weight",
  "xf = x.float()\ny = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")
R("right_sqrt_div", "right", "torch.sqrt and a division; x.to(torch.float32)",
  "xf = x.to(torch.float32)\nrms = torch.sqrt((xf * xf).mean(dim=-1, keepdim=True) + eps)\nreturn weight * (xf / rms).to(x.dtype)")
R("right_mean_dtype", "right", "mean(dtype=torch.float32) of the squares computed in float32",
  "xf = x.float()\nms = torch.mean(xf ** 2, dim=1, keepdim=True, dtype=torch.float32)\nreturn (xf / torch.sqrt(ms + eps)).type(x.dtype) * weight")
R("right_float_product_then_cast", "right", "casts back, then multiplies weight in float32 and rounds: same as a half product",
  "xf = x.float()\ny = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)\nreturn (y.float() * weight.float()).to(x.dtype)")
R("right_float64", "right", "debatable: computes in float64 instead of float32 (more precise; the text says float32)",
  "xf = x.double()\ny = xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")

R("all_half", "wrong", "the formula in x's dtype: the squares overflow in float16",
  "return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight")
R("weight_before_cast", "wrong", "multiplies by weight in float32, then casts (Gemma's order, not the text's)",
  "xf = x.float()\ny = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()\nreturn y.to(x.dtype)")
R("returns_float32", "wrong", "forgets to cast back: returns float32",
  "xf = x.float()\nreturn xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()")
R("eps_outside", "wrong", "eps outside the square root",
  "xf = x.float()\ny = xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + eps)\nreturn y.to(x.dtype) * weight")
R("rsqrt_plus_eps", "wrong", "rsqrt(ms) + eps",
  "xf = x.float()\ny = xf * (torch.rsqrt(xf.pow(2).mean(-1, keepdim=True)) + eps)\nreturn y.to(x.dtype) * weight")
R("no_eps", "wrong", "no eps: inf/nan for an all-zero token",
  "xf = x.float()\ny = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True))\nreturn y.to(x.dtype) * weight")
R("mean_over_tokens", "wrong", "mean square over dim 0 (the tokens)",
  "xf = x.float()\ny = xf * torch.rsqrt(xf.pow(2).mean(0, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")
R("sum_not_mean", "wrong", "sum of squares instead of the mean",
  "xf = x.float()\ny = xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")
R("centred", "wrong", "subtracts the mean (LayerNorm without shift), not RMSNorm",
  "xf = x.float()\nc = xf - xf.mean(-1, keepdim=True)\ny = c * torch.rsqrt(c.pow(2).mean(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")
R("no_weight", "wrong", "forgets the weight",
  "xf = x.float()\nreturn (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)")
R("always_float16", "wrong", "casts back to float16 whatever x's dtype (bfloat16 inputs come back float16)",
  "xf = x.float()\ny = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)\nreturn y.half() * weight.half()")
R("std_not_rms", "wrong", "divides by the standard deviation instead of the RMS",
  "xf = x.float()\ny = xf / torch.sqrt(xf.var(-1, keepdim=True, unbiased=False) + eps)\nreturn y.to(x.dtype) * weight")
R("square_in_half", "wrong", "squares in half precision, then converts: already inf",
  "ms = x.pow(2).float().mean(-1, keepdim=True)\ny = x.float() * torch.rsqrt(ms + eps)\nreturn y.to(x.dtype) * weight")
R("mean_in_half", "wrong", "float32 squares, but the mean taken after a cast to half",
  "xf = x.float()\nms = xf.pow(2).to(x.dtype).mean(-1, keepdim=True).float()\ny = xf * torch.rsqrt(ms + eps)\nreturn y.to(x.dtype) * weight")
R("F_rms_norm", "wrong", "F.rms_norm: the text says tensor arithmetic only",
  "y = F.rms_norm(x.float(), (x.shape[-1],), eps=eps)\nreturn y.to(x.dtype) * weight")
R("companion_RMSNorm", "wrong", "the companion's RMSNorm module",
  "from companion.norm import RMSNorm\nnorm = RMSNorm(x.shape[-1], eps=eps)\nwith torch.no_grad():\n    norm.weight.fill_(1.0)\nreturn norm(x.float()).to(x.dtype) * weight")
R("inplace_x", "wrong", "x.mul_ in place (through .data): the caller's x changes",
  "xf = x.float()\ninv = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)\nx.data.copy_((xf * inv).to(x.dtype))\nreturn x * weight")
R("prescaled_by_max", "wrong", "divides by the max |x| first to avoid overflow: eps is then applied at the wrong scale",
  "a = x.abs().amax(-1, keepdim=True).float().clamp(min=1e-12)\nxs = x.float() / a\ny = xs * torch.rsqrt(xs.pow(2).mean(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")
R("compute_in_bf16", "wrong", "computes in bfloat16 (no overflow, but not float32 and imprecise)",
  "xb = x.bfloat16()\ny = xb * torch.rsqrt(xb.pow(2).mean(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")
R("no_keepdim", "wrong", "mean without keepdim: (n,) against (n, d) fails unless n == d, then wrong",
  "xf = x.float()\ny = xf * torch.rsqrt(xf.pow(2).mean(-1) + eps)\nreturn y.to(x.dtype) * weight")
R("mean_abs", "wrong", "mean |x| instead of the root mean square",
  "xf = x.float()\ny = xf / (xf.abs().mean(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight")
R("detached", "wrong", "detaches: no gradient to x or weight",
  "xf = x.detach().float()\ny = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)\nreturn y.to(x.dtype) * weight.detach()")
R("cache_by_shape_and_grad", "wrong", "caches the output per (shape, dtype, eps) when no gradient is needed: stale output for new values",
  "global _c\ntry:\n    _c\nexcept NameError:\n    _c = {}\nkey = (tuple(x.shape), x.dtype, eps)\nif (x.requires_grad or weight.requires_grad) or key not in _c:\n    _c[key] = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight\nreturn _c[key]")
R("consumes_global_rng", "wrong", "right values, but draws from torch's global random generator",
  "_ = torch.rand(1)\nreturn (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight")
R("sets_requires_grad", "wrong", "weight.requires_grad_(True) on the caller's tensor",
  "if weight.is_leaf:\n    weight.requires_grad_(True)\nreturn (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight")
R("weight_in_float32_returned_half", "wrong", "weight multiplied in float32 before the cast (same as weight_before_cast, via .to at the end of a product chain)",
  "xf = x.to(torch.float32)\nreturn (weight.float() * (xf / torch.sqrt(xf.pow(2).mean(-1, keepdim=True) + eps))).to(x.dtype)")

CASES += junk_cases(MODULE, {
    "4.1": ("layer_norm_channels_first", "my_layer_norm_channels_first", "x, weight, bias, eps"),
    "4.2": ("masked_batch_norm", "my_masked_batch_norm", "x, mask, eps"),
    "4.3": ("rms_norm_half", "my_rms_norm_half", "x, weight, eps"),
})

# Cases that leave global state changed (grad mode, the block's flags) run last, so that
# they cannot leak into other cases of the same process (the runner does not reset them).
_LAST = {"grad_mode_left_off", "params_frozen"}
CASES = ([c for c in CASES if c["name"] not in _LAST] + [c for c in CASES if c["name"] == "params_frozen"]
         + [c for c in CASES if c["name"] == "grad_mode_left_off"])
