"""Independent red-team cases for chapter 4 (layer normalization).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md. (Exercises 4.1-4.3 were
replaced in issue 28: LayerNorm of a (B, d, T) tensor, BatchNorm over the
real tokens of a padded batch, RMSNorm of float16 tokens computed in float32.)
"""
import textwrap

MODULE = "companion.exercises.norm"
PRELUDE = """
import inspect
import torch
from companion.attention import softmax
from companion.exercises import norm as check
from companion.norm import LayerNorm, RMSNorm
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 4.1 ----
def ln(name, expect, why, source):
    case("4.1", "layer_norm_channels_first", name, expect, why, source, "my_layer_norm_channels_first")


ln("permute_and_back", "right", "moves the features last, normalizes, moves them back", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    h = x.permute(0, 2, 1)
    mu = h.mean(-1, keepdim=True)
    var = ((h - mu) ** 2).mean(-1, keepdim=True)
    return ((h - mu) / torch.sqrt(var + eps) * weight + bias).permute(0, 2, 1)
""")
ln("view_broadcast", "right", "weight.view(1, -1, 1) and rsqrt", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    c = x - x.mean(1, keepdim=True)
    return c * torch.rsqrt(c.pow(2).mean(1, keepdim=True) + eps) * weight.view(1, -1, 1) + bias.view(1, -1, 1)
""")
ln("last_axis", "wrong", "normalizes over T, the last axis, out of habit", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]
""")
ln("unbiased", "wrong", "x.var over dim 1 is unbiased by default", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    return (x - x.mean(1, keepdim=True)) / torch.sqrt(x.var(1, keepdim=True) + eps) * weight[:, None] + bias[:, None]
""")
ln("whole_sequence", "wrong", "one mean per sequence over dims 1 and 2", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    mu = x.mean((1, 2), keepdim=True)
    var = ((x - mu) ** 2).mean((1, 2), keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]
""")
ln("weight_last_axis", "wrong", "weight broadcast along T (only works when d == T)", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    mu = x.mean(1, keepdim=True)
    var = ((x - mu) ** 2).mean(1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
""")
ln("group_norm", "wrong", "F.group_norm with one group per channel set", """
import torch.nn.functional as F
def my_layer_norm_channels_first(x, weight, bias, eps):
    return F.layer_norm(x.transpose(1, 2), (x.shape[1],), weight, bias, eps).transpose(1, 2)
""")
ln("float32_inside", "wrong", "computes in float32 for a float64 input", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    h = x.float()
    mu = h.mean(1, keepdim=True)
    var = ((h - mu) ** 2).mean(1, keepdim=True)
    return ((h - mu) / torch.sqrt(var + eps) * weight.float()[:, None] + bias.float()[:, None]).to(x.dtype)
""")
ln("no_grad", "wrong", "computes under no_grad: nothing to train", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    with torch.no_grad():
        mu = x.mean(1, keepdim=True)
        var = ((x - mu) ** 2).mean(1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]
""")
ln("t1_branch", "wrong", "a special case for T = 1 left unwritten", """
def my_layer_norm_channels_first(x, weight, bias, eps):
    if x.shape[2] == 1:
        raise NotImplementedError
    mu = x.mean(1, keepdim=True)
    var = ((x - mu) ** 2).mean(1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]
""")


# ---------------------------------------------------------------- 4.2 ----
def bn(name, expect, why, source):
    case("4.2", "masked_batch_norm", name, expect, why, source, "my_masked_batch_norm")


bn("masked_sums", "right", "sums weighted by the mask, divided by the count", """
def my_masked_batch_norm(x, mask, eps):
    m = mask.unsqueeze(-1).to(x.dtype)
    n = m.sum((0, 1))
    mean = (x * m).sum((0, 1)) / n
    var = (((x - mean) * m) ** 2).sum((0, 1)) / n
    return (x - mean) / torch.sqrt(var + eps) * m
""")
bn("where", "right", "torch.where with the real tokens' statistics", """
def my_masked_batch_norm(x, mask, eps):
    real = x[mask]
    y = (x - real.mean(0)) / torch.sqrt(real.var(0, unbiased=False) + eps)
    return torch.where(mask[..., None], y, torch.zeros_like(y))
""")
bn("padding_counted", "wrong", "ordinary batch statistics over all B * T positions", """
def my_masked_batch_norm(x, mask, eps):
    mean = x.mean((0, 1))
    var = x.var((0, 1), unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * mask[..., None]
""")
bn("divide_by_all", "wrong", "masked sums divided by B * T", """
def my_masked_batch_norm(x, mask, eps):
    m = mask[..., None].to(x.dtype)
    N = x.shape[0] * x.shape[1]
    mean = (x * m).sum((0, 1)) / N
    var = (((x - mean) * m) ** 2).sum((0, 1)) / N
    return (x - mean) / torch.sqrt(var + eps) * m
""")
bn("pad_not_zero", "wrong", "forgets to zero the padded positions", """
def my_masked_batch_norm(x, mask, eps):
    real = x[mask]
    return (x - real.mean(0)) / torch.sqrt(real.var(0, unbiased=False) + eps)
""")
bn("per_position", "wrong", "statistics per position over the batch", """
def my_masked_batch_norm(x, mask, eps):
    m = mask[..., None].to(x.dtype)
    n = m.sum(0)
    mean = (x * m).sum(0) / n
    var = (((x - mean) * m) ** 2).sum(0) / n
    return (x - mean) / torch.sqrt(var + eps) * m
""")
bn("unbiased", "wrong", "x[mask].var(0) is unbiased", """
def my_masked_batch_norm(x, mask, eps):
    real = x[mask]
    return (x - real.mean(0)) / torch.sqrt(real.var(0) + eps) * mask[..., None]
""")
bn("in_place_zero", "wrong", "zeros the caller's padding in place", """
def my_masked_batch_norm(x, mask, eps):
    x[~mask] = 0
    real = x[mask]
    return (x - real.mean(0)) / torch.sqrt(real.var(0, unbiased=False) + eps) * mask[..., None]
""")
bn("layer_norm", "wrong", "normalizes each token over its features", """
def my_masked_batch_norm(x, mask, eps):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * mask[..., None]
""")
bn("only_real_rows", "wrong", "returns only the real tokens, (N, d)", """
def my_masked_batch_norm(x, mask, eps):
    real = x[mask]
    return (real - real.mean(0)) / torch.sqrt(real.var(0, unbiased=False) + eps)
""")


# ---------------------------------------------------------------- 4.3 ----
def rms(name, expect, why, source):
    case("4.3", "rms_norm_half", name, expect, why, source, "my_rms_norm_half")


rms("weight_in_float32", "right", "multiplies by weight in float32, then casts", """
def my_rms_norm_half(x, weight, eps):
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)
""")
rms("float64_inside", "right", "computes in float64 (more than asked, still right)", """
def my_rms_norm_half(x, weight, eps):
    h = x.double()
    return weight * (h / torch.sqrt((h * h).mean(-1, keepdim=True) + eps)).to(x.dtype)
""")
rms("in_half", "wrong", "computes in float16: the squares overflow", """
def my_rms_norm_half(x, weight, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight
""")
rms("returns_float32", "wrong", "forgets to cast back", """
def my_rms_norm_half(x, weight, eps):
    h = x.float()
    return h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
""")
rms("always_half", "wrong", "casts to float16 whatever the input (bfloat16 comes back float16)", """
def my_rms_norm_half(x, weight, eps):
    h = x.float()
    return (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).half()
""")
rms("no_weight", "wrong", "forgets the scale", """
def my_rms_norm_half(x, weight, eps):
    h = x.float()
    return (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
""")
rms("eps_outside", "wrong", "eps added to the root", """
def my_rms_norm_half(x, weight, eps):
    h = x.float()
    return weight * (h / (h.pow(2).mean(-1, keepdim=True).sqrt() + eps)).to(x.dtype)
""")
rms("prescaled", "wrong", "divides by 16 in float16 to dodge the overflow: still float16 arithmetic", """
def my_rms_norm_half(x, weight, eps):
    s = x / 16
    return s / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + eps / 256) * weight
""")
rms("max_abs", "wrong", "divides by the largest |x| instead of the root mean square", """
def my_rms_norm_half(x, weight, eps):
    h = x.float()
    return weight * (h / (h.abs().amax(-1, keepdim=True) + eps)).to(x.dtype)
""")
rms("centred", "wrong", "subtracts the mean (LayerNorm without shift)", """
def my_rms_norm_half(x, weight, eps):
    h = x.float()
    h = h - h.mean(-1, keepdim=True)
    return weight * (h / torch.sqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "4.1": ("layer_norm_channels_first", "my_layer_norm_channels_first", "x, weight, bias, eps"),
    "4.2": ("masked_batch_norm", "my_masked_batch_norm", "x, mask, eps"),
    "4.3": ("rms_norm_half", "my_rms_norm_half", "x, weight, eps"),
})
