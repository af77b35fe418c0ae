"""Independent red-team cases for chapter 4 (layer normalization).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
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
    case("4.1", "layer_norm", name, expect, why, source, "my_layer_norm")


ln("unbiased_var", "wrong", "x.var() is the unbiased (n - 1) variance", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
""")
ln("eps_outside_sqrt", "wrong", "adds eps to the std, not the variance", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / (torch.sqrt(var) + eps) * weight + bias
""")
ln("over_rows", "wrong", "normalizes each column (batch norm)", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(dim=0, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=0, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias
""")
ln("F_layer_norm", "wrong", "the banned torch.nn.functional.layer_norm", """
import torch.nn.functional as F
def my_layer_norm(x, weight, bias, eps):
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)
""")
ln("aliased_layer_norm", "wrong", "the banned call under an alias", """
from torch.nn.functional import layer_norm as ln
def my_layer_norm(x, weight, bias, eps):
    return ln(x, (x.shape[-1],), weight=weight, bias=bias, eps=eps)
""")
ln("torch_layer_norm", "wrong", "torch.layer_norm is the same banned op", """
def my_layer_norm(x, weight, bias, eps):
    return torch.layer_norm(x, [x.shape[1]], weight, bias, eps)
""")
ln("nn_LayerNorm", "wrong", "nn.LayerNorm with the weights copied in", """
import torch.nn as nn
def my_layer_norm(x, weight, bias, eps):
    m = nn.LayerNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        m.weight.copy_(weight)
        m.bias.copy_(bias)
    return m(x).detach()
""")
ln("nn_LayerNorm_dtype", "wrong", "nn.LayerNorm built in x's dtype, weights copied in", """
import torch.nn as nn
def my_layer_norm(x, weight, bias, eps):
    m = nn.LayerNorm(x.shape[-1], eps=eps, dtype=x.dtype)
    with torch.no_grad():
        m.weight.copy_(weight)
        m.bias.copy_(bias)
    return m(x).detach()
""")
ln("companion_LayerNorm", "wrong", "the companion's LayerNorm: imports the answer", """
from companion.norm import LayerNorm
def my_layer_norm(x, weight, bias, eps):
    m = LayerNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        m.weight.copy_(weight)
        m.bias.copy_(bias)
    return m(x).detach()
""")
ln("forgot_bias", "wrong", "no shift", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight
""")
ln("forgot_weight", "wrong", "no scale", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) + bias
""")
ln("weight_bias_swapped", "wrong", "multiplies by bias and adds weight", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * bias + weight
""")
ln("std_unbiased", "wrong", "x.std() is unbiased, and eps is outside", """
def my_layer_norm(x, weight, bias, eps):
    return (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) * weight + bias
""")
ln("no_eps", "wrong", "ignores eps: divides by zero on a constant row", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var) * weight + bias
""")
ln("hard_coded_eps", "wrong", "uses 1e-5 whatever eps is given", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + 1e-5) * weight + bias
""")
ln("centers_in_place", "wrong", "x -= mean mutates the caller's tensor", """
def my_layer_norm(x, weight, bias, eps):
    x -= x.mean(-1, keepdim=True)
    var = (x ** 2).mean(-1, keepdim=True)
    return x / torch.sqrt(var + eps) * weight + bias
""")
ln("returns_stats", "wrong", "returns (y, mean, var)", """
def my_layer_norm(x, weight, bias, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight + bias, mu, var
""")
ln("right_var_mean", "right", "torch.var_mean with correction=0", """
def my_layer_norm(x, weight, bias, eps):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return weight * (x - mean) / (var + eps).sqrt() + bias
""")
ln("right_rsqrt", "right", "rsqrt and unbiased=False", """
def my_layer_norm(x, weight, bias, eps):
    centered = x - x.mean(dim=1, keepdim=True)
    inv = torch.rsqrt(x.var(dim=1, unbiased=False, keepdim=True) + eps)
    return centered * inv * weight + bias
""")
ln("right_addcmul", "right", "torch.addcmul for the affine step", """
def my_layer_norm(x, weight, bias, eps):
    m = x.mean(-1).unsqueeze(-1)
    v = (x - m).pow(2).mean(-1).unsqueeze(-1)
    return torch.addcmul(bias, (x - m) / torch.sqrt(v + eps), weight)
""")


# ---------------------------------------------------------------- 4.2 ----
def bn(name, expect, why, source):
    case("4.2", "batch_norm", name, expect, why, source, "my_batch_norm")


bn("over_features", "wrong", "normalizes each row: layer norm", """
def my_batch_norm(x, eps):
    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps)
""")
bn("unbiased", "wrong", "unbiased variance", """
def my_batch_norm(x, eps):
    return (x - x.mean(0)) / torch.sqrt(x.var(0) + eps)
""")
bn("eps_outside", "wrong", "eps added to the std", """
def my_batch_norm(x, eps):
    mu = x.mean(0)
    return (x - mu) / (((x - mu) ** 2).mean(0).sqrt() + eps)
""")
bn("no_centering", "wrong", "forgot to subtract the mean", """
def my_batch_norm(x, eps):
    var = ((x - x.mean(0)) ** 2).mean(0)
    return x / torch.sqrt(var + eps)
""")
bn("divide_by_var", "wrong", "divides by the variance, not its root", """
def my_batch_norm(x, eps):
    mu = x.mean(0)
    return (x - mu) / (((x - mu) ** 2).mean(0) + eps)
""")
bn("global_stats", "wrong", "one mean and variance for the whole tensor", """
def my_batch_norm(x, eps):
    mu = x.mean()
    return (x - mu) / torch.sqrt(((x - mu) ** 2).mean() + eps)
""")
bn("ignores_eps", "wrong", "no eps", """
def my_batch_norm(x, eps):
    mu = x.mean(0)
    return (x - mu) / ((x - mu) ** 2).mean(0).sqrt()
""")
bn("in_place", "wrong", "normalizes x in place: mutates the input", """
def my_batch_norm(x, eps):
    mu = x.mean(0)
    var = ((x - mu) ** 2).mean(0)
    x.sub_(mu).div_(torch.sqrt(var + eps))
    return x
""")
bn("returns_tuple", "wrong", "returns (y, mean, var)", """
def my_batch_norm(x, eps):
    mu = x.mean(0)
    var = ((x - mu) ** 2).mean(0)
    return (x - mu) / torch.sqrt(var + eps), mu, var
""")
bn("hard_coded_eps", "wrong", "eps fixed at 1e-5", """
def my_batch_norm(x, eps):
    mu = x.mean(0)
    return (x - mu) / torch.sqrt(((x - mu) ** 2).mean(0) + 1e-5)
""")
bn("transposed_output", "wrong", "works on x.T and forgets to transpose back", """
def my_batch_norm(x, eps):
    t = x.T
    mu = t.mean(-1, keepdim=True)
    var = ((t - mu) ** 2).mean(-1, keepdim=True)
    return (t - mu) / torch.sqrt(var + eps)
""")
bn("median_center", "wrong", "centers on the median", """
def my_batch_norm(x, eps):
    med = x.median(dim=0).values
    var = ((x - x.mean(0)) ** 2).mean(0)
    return (x - med) / torch.sqrt(var + eps)
""")
bn("right_var_mean", "right", "var_mean over dim 0, correction 0", """
def my_batch_norm(x, eps):
    var, mean = torch.var_mean(x, dim=0, correction=0)
    return (x - mean) * torch.rsqrt(var + eps)
""")
bn("right_F_batch_norm", "right", "F.batch_norm in training mode (not banned here)", """
import torch.nn.functional as F
def my_batch_norm(x, eps):
    return F.batch_norm(x, None, None, training=True, eps=eps)
""")
bn("right_transpose_roundtrip", "right", "layer norm of x.T, transposed back", """
def my_batch_norm(x, eps):
    t = x.transpose(0, 1)
    c = t - t.mean(dim=1, keepdim=True)
    return (c / torch.sqrt(c.pow(2).mean(dim=1, keepdim=True) + eps)).transpose(0, 1)
""")


# ---------------------------------------------------------------- 4.3 ----
def rms(name, expect, why, source):
    case("4.3", "rms_norm", name, expect, why, source, "my_rms_norm")


rms("subtracts_mean", "wrong", "centers the row: that is layer norm", """
def my_rms_norm(x, weight, eps):
    c = x - x.mean(-1, keepdim=True)
    return c / torch.sqrt((c ** 2).mean(-1, keepdim=True) + eps) * weight
""")
rms("eps_outside", "wrong", "eps added after the square root", """
def my_rms_norm(x, weight, eps):
    return x / (torch.sqrt((x ** 2).mean(-1, keepdim=True)) + eps) * weight
""")
rms("sum_not_mean", "wrong", "square root of the sum of squares (the norm)", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt((x ** 2).sum(-1, keepdim=True) + eps) * weight
""")
rms("forgot_weight", "wrong", "no scale", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps)
""")
rms("norm_no_eps", "wrong", "norm / sqrt(d) with no eps", """
def my_rms_norm(x, weight, eps):
    rms = x.norm(dim=-1, keepdim=True) / x.shape[-1] ** 0.5
    return x / rms * weight
""")
rms("over_rows", "wrong", "mean over dim 0", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt((x ** 2).mean(0, keepdim=True) + eps) * weight
""")
rms("weight_added", "wrong", "adds weight instead of multiplying", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps) + weight
""")
rms("mean_abs", "wrong", "mean absolute value, not the root mean square", """
def my_rms_norm(x, weight, eps):
    return x / (x.abs().mean(-1, keepdim=True) + eps) * weight
""")
rms("weight_first", "wrong", "scales by weight before measuring the RMS", """
def my_rms_norm(x, weight, eps):
    y = x * weight
    return y / torch.sqrt((y ** 2).mean(-1, keepdim=True) + eps)
""")
rms("companion_RMSNorm", "wrong", "the companion's RMSNorm: imports the answer", """
from companion.norm import RMSNorm
def my_rms_norm(x, weight, eps):
    m = RMSNorm(x.shape[-1], eps=eps)
    with torch.no_grad():
        m.weight.copy_(weight)
    return m(x).detach()
""")
rms("in_place", "wrong", "divides x in place", """
def my_rms_norm(x, weight, eps):
    x /= torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps)
    return x * weight
""")
rms("eps_squared_inside", "wrong", "adds eps ** 2 (confuses eps on the RMS with eps on its square)", """
def my_rms_norm(x, weight, eps):
    return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + eps ** 2) * weight
""")
rms("right_rsqrt", "right", "x * rsqrt(mean(x^2) + eps) * weight", """
def my_rms_norm(x, weight, eps):
    return weight * x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + eps)
""")
rms("right_vector_norm", "right", "vector_norm squared over d", """
def my_rms_norm(x, weight, eps):
    d = x.shape[-1]
    ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True) ** 2 / d
    return x / torch.sqrt(ms + eps) * weight
""")
rms("right_einsum", "right", "einsum for the mean square", """
def my_rms_norm(x, weight, eps):
    ms = torch.einsum("nd,nd->n", x, x) / x.shape[1]
    return x / (ms + eps).sqrt()[:, None] * weight[None, :]
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "4.1": ("layer_norm", "my_layer_norm", "x, weight, bias, eps"),
    "4.2": ("batch_norm", "my_batch_norm", "x, eps"),
    "4.3": ("rms_norm", "my_rms_norm", "x, weight, eps"),
})


# ------------------------------------------------------------- batch 2 ---
ln("getattr_layer_norm", "wrong", "the banned layer_norm fetched with getattr", """
import torch.nn.functional as F
def my_layer_norm(x, weight, bias, eps):
    fn = getattr(F, "layer" + "_norm")
    return fn(x, (x.shape[-1],), weight, bias, eps)
""")
ln("group_norm_one_group", "wrong", "F.group_norm with one group: a library normalization in disguise", """
import torch.nn.functional as F
def my_layer_norm(x, weight, bias, eps):
    return F.group_norm(x, 1, eps=eps) * weight + bias
""")
ln("no_grad", "wrong", "computes under torch.no_grad(): no gradient reaches weight or bias (the text does not ask for gradients; medium severity)", """
def my_layer_norm(x, weight, bias, eps):
    with torch.no_grad():
        mu = x.mean(-1, keepdim=True)
        var = ((x - mu) ** 2).mean(-1, keepdim=True)
        return (x - mu) / torch.sqrt(var + eps) * weight + bias
""")
ln("float32_cast", "wrong", "casts to float32: a float64 input comes back float32 (low severity)", """
def my_layer_norm(x, weight, bias, eps):
    x = x.float()
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * weight.float() + bias.float()
""")
bn("instance_norm", "wrong", "F.instance_norm over rows: layer norm again", """
import torch.nn.functional as F
def my_batch_norm(x, eps):
    return F.instance_norm(x.unsqueeze(0), eps=eps).squeeze(0)
""")
rms("F_rms_norm", "right", "torch.nn.functional.rms_norm (not banned in 4.3)", """
import torch.nn.functional as F
def my_rms_norm(x, weight, eps):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
""")
