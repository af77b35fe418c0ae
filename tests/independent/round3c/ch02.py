"""Chapter 2 red-team cases: 2.1 stable_log_softmax."""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases

MODULE = "companion.exercises.attention"
PRELUDE = """import inspect
import math
import time

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from companion import attention, example
from companion.exercises import attention as check
from companion.exercises import early_extra as check_more
"""

def L(name, expect, why, src):
    return dict(exercise="2.1", checker="stable_log_softmax", module=MODULE, name=name,
                expect=expect, why=why, source=src.strip("\n") + "\n", call="my_log_softmax")

CASES = [
L("right_obvious", "right", "x - c - log(sum(exp(x - c))) with c = amax(keepdim)", """
import torch
def my_log_softmax(x, dim=-1):
    # log softmax_j = x_j - c - log(sum_k exp(x_k - c))
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("right_detached_max", "right", "detaches c (the result does not depend on c)", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True).detach()
    z = x - c
    return z - torch.log(torch.exp(z).sum(dim=dim, keepdim=True))
"""),
L("right_movedim", "right", "moves dim to the end, computes along -1, moves it back", """
import torch
def my_log_softmax(x, dim=-1):
    y = x.movedim(dim, -1)
    c = y.amax(-1, keepdim=True)
    out = y - c - torch.log(torch.exp(y - c).sum(-1, keepdim=True))
    return out.movedim(-1, dim)
"""),
L("right_max_values", "right", "torch.max(...).values instead of amax (not forbidden)", """
import torch
def my_log_softmax(x, dim=-1):
    c = torch.max(x, dim=dim, keepdim=True).values
    return (x - c) - torch.log(torch.sum(torch.exp(x - c), dim=dim, keepdim=True))
"""),
L("right_unsqueeze", "right", "amax without keepdim, then unsqueeze", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim).unsqueeze(dim)
    lse = torch.log(torch.exp(x - c).sum(dim)).unsqueeze(dim)
    return x - (c + lse)
"""),
# wrong
L("log_of_softmax", "wrong", "log of the shifted softmax: underflow gives -inf for -200", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    e = torch.exp(x - c)
    return torch.log(e / e.sum(dim=dim, keepdim=True))
"""),
L("no_shift", "wrong", "x - log(sum(exp(x))): overflows at 1000", """
import torch
def my_log_softmax(x, dim=-1):
    return x - torch.log(torch.exp(x).sum(dim=dim, keepdim=True))
"""),
L("forgot_c", "wrong", "forgets to subtract c outside the log: x - log(sum exp(x - c))", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    return x - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("sign_c", "wrong", "x + c - log(...) (sign slip)", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    return x + c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("ignores_dim", "wrong", "always along the last axis, ignores dim", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(-1, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(-1, keepdim=True))
"""),
L("no_keepdim", "wrong", "reductions without keepdim: wrong broadcast for dim != last", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim))
"""),
L("global_max", "wrong", "c = max of the whole tensor: rows far apart underflow", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.max()
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("mean_shift", "wrong", "shifts by the mean instead of the max: overflow for +-1000", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.mean(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("mean_in_log", "wrong", "log(mean(exp)) instead of log(sum(exp))", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).mean(dim=dim, keepdim=True))
"""),
L("eps_in_log", "wrong", "adds 1e-4 inside the log 'for safety'", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True) + 1e-4)
"""),
L("torch_log_softmax", "wrong", "calls torch.log_softmax (forbidden)", """
import torch
def my_log_softmax(x, dim=-1):
    return torch.log_softmax(x, dim=dim)
"""),
L("F_log_softmax", "wrong", "calls F.log_softmax (the forbidden function under another name)", """
import torch.nn.functional as F
def my_log_softmax(x, dim=-1):
    return F.log_softmax(x, dim=dim)
"""),
L("logsumexp", "wrong", "calls torch.logsumexp (forbidden)", """
import torch
def my_log_softmax(x, dim=-1):
    return x - torch.logsumexp(x, dim=dim, keepdim=True)
"""),
L("tensor_logsumexp_method", "wrong", "calls x.logsumexp (the forbidden function as a method)", """
import torch
def my_log_softmax(x, dim=-1):
    return x - x.logsumexp(dim, keepdim=True)
"""),
L("softmax_then_log", "wrong", "torch.softmax then log (forbidden, and underflows)", """
import torch
def my_log_softmax(x, dim=-1):
    return torch.log(torch.softmax(x, dim=dim))
"""),
L("masked_fill_finite", "wrong", "replaces -inf by -1e9 first: a masked score gives a finite value, not -inf", """
import torch
def my_log_softmax(x, dim=-1):
    x = x.masked_fill(torch.isinf(x) & (x < 0), -1e9)
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("nan_to_num", "wrong", "nan_to_num on the result: -inf becomes the most negative float", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    return torch.nan_to_num(x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True)))
"""),
L("clamp_min", "wrong", "clamps the result at -100 to avoid -inf", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    return (x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))).clamp(min=-100)
"""),
L("inplace_sub", "wrong", "subtracts c in place: changes the caller's tensor", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    with torch.no_grad():
        x.sub_(c)
    return x - torch.log(torch.exp(x).sum(dim=dim, keepdim=True))
"""),
L("detached", "wrong", "detaches the input: no gradient", """
import torch
def my_log_softmax(x, dim=-1):
    x = x.detach()
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("numpy", "wrong", "computes in NumPy and converts back: no gradient", """
import numpy as np
import torch
def my_log_softmax(x, dim=-1):
    a = x.detach().numpy()
    c = a.max(axis=dim, keepdims=True)
    out = a - c - np.log(np.exp(a - c).sum(axis=dim, keepdims=True))
    return torch.from_numpy(out)
"""),
L("float64_always", "wrong", "upcasts to float64 and returns float64 for float32 input", """
import torch
def my_log_softmax(x, dim=-1):
    x = x.double()
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("float32_always", "wrong", "casts to float32: float64 inputs lose precision and dtype", """
import torch
def my_log_softmax(x, dim=-1):
    x = x.float()
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("float32_inside", "wrong", "computes in float32, casts back: float64 precision lost, dtype kept", """
import torch
def my_log_softmax(x, dim=-1):
    dt = x.dtype
    y = x.float()
    c = y.amax(dim=dim, keepdim=True)
    return (y - c - torch.log(torch.exp(y - c).sum(dim=dim, keepdim=True))).to(dt)
"""),
L("size1_identity", "wrong", "returns x itself when the axis has size 1 (should be 0)", """
import torch
def my_log_softmax(x, dim=-1):
    if x.shape[dim] == 1:
        return x
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("dim_neg2_as_0", "wrong", "maps dim=-2 to 0 (thinks of 2-D only)", """
import torch
def my_log_softmax(x, dim=-1):
    if dim == -2:
        dim = 0
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("flatten", "wrong", "flattens: one softmax over the whole tensor", """
import torch
def my_log_softmax(x, dim=-1):
    y = x.flatten()
    c = y.amax()
    return (y - c - torch.log(torch.exp(y - c).sum())).view_as(x)
"""),
L("grad_mode_off", "wrong", "torch.set_grad_enabled(False) and never restores it", """
import torch
def my_log_softmax(x, dim=-1):
    torch.set_grad_enabled(False)
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("requires_grad_on_input", "wrong", "sets requires_grad on the caller's input", """
import torch
def my_log_softmax(x, dim=-1):
    if x.is_leaf and torch.is_grad_enabled():
        x.requires_grad_(True)
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("ties_first_only", "wrong", "one-hot at argmax for the shift and drops the others (ties mishandled)", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    z = x - c
    e = torch.exp(z)
    others = e.sum(dim=dim, keepdim=True) - 1
    return z - torch.log1p(others.clamp(min=0) * (others > 0.5))
"""),
L("rng_noise", "wrong", "adds 0 * torch.rand_like(x) (draws from the global RNG)", """
import torch
def my_log_softmax(x, dim=-1):
    x = x + 0 * torch.rand_like(x)
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("cache_by_shape", "wrong", "caches the result by shape", """
import torch
_cache = {}
def my_log_softmax(x, dim=-1):
    key = (tuple(x.shape), dim, x.dtype)
    if key not in _cache:
        c = x.amax(dim=dim, keepdim=True)
        _cache[key] = x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
    return _cache[key]
"""),
L("companion_softmax", "wrong", "uses the course's attention.softmax then log", """
import torch
from companion import attention
def my_log_softmax(x, dim=-1):
    return torch.log(attention.softmax(x, dim=dim))
"""),
L("notimpl_3d", "wrong", "raises NotImplementedError for 3-D inputs only", """
import torch
def my_log_softmax(x, dim=-1):
    if x.ndim > 2:
        raise NotImplementedError("3-D later")
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),

L("right_float64_inside", "right", "debatable: computes in float64 and casts back to the input dtype (more precise, dtype kept)", """
import torch
def my_log_softmax(x, dim=-1):
    y = x.double()
    c = y.amax(dim=dim, keepdim=True)
    return (y - c - torch.log(torch.exp(y - c).sum(dim=dim, keepdim=True))).to(x.dtype)
"""),
L("right_transpose", "right", "transposes dim with the last axis and back", """
import torch
def my_log_softmax(x, dim=-1):
    y = x.transpose(dim, -1)
    c = y.amax(-1, keepdim=True)
    z = y - c
    return (z - z.exp().sum(-1, keepdim=True).log()).transpose(dim, -1)
"""),
L("right_log1p", "right", "log1p(sum - 1) for the log of the sum (the sum is at least 1)", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    s = torch.exp(x - c).sum(dim=dim, keepdim=True)
    return x - c - torch.log1p(s - 1)
"""),
L("detach_lse", "wrong", "detaches the whole log-sum-exp term: values right, gradient wrong", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    lse = c + torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
    return x - lse.detach()
"""),
L("detach_sum", "wrong", "detaches the sum of exponentials: values right, gradient wrong", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    s = torch.exp(x - c).sum(dim=dim, keepdim=True).detach()
    return x - c - torch.log(s)
"""),
L("mask_as_zero", "wrong", "replaces -inf scores by 0 first", """
import torch
def my_log_softmax(x, dim=-1):
    x = torch.where(torch.isinf(x), torch.zeros_like(x), x)
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""),
L("special_logsumexp", "wrong", "torch.special.logsumexp: the forbidden logsumexp under another name", """
import torch
def my_log_softmax(x, dim=-1):
    return x - torch.special.logsumexp(x, dim=dim, keepdim=True)
"""),
L("method_softmax_log", "wrong", "x.softmax(dim).log(): forbidden softmax as a method, and it underflows", """
import torch
def my_log_softmax(x, dim=-1):
    return x.softmax(dim).log()
"""),
L("nn_LogSoftmax", "wrong", "torch.nn.LogSoftmax module: the forbidden function as a module", """
import torch
def my_log_softmax(x, dim=-1):
    return torch.nn.LogSoftmax(dim=dim)(x)
"""),
L("special_log_softmax", "wrong", "torch.special.log_softmax: the forbidden function under another name", """
import torch
def my_log_softmax(x, dim=-1):
    return torch.special.log_softmax(x, dim)
"""),
L("half_inside", "wrong", "computes in float16 and casts back", """
import torch
def my_log_softmax(x, dim=-1):
    y = x.half()
    c = y.amax(dim=dim, keepdim=True)
    return (y - c - torch.log(torch.exp(y - c).sum(dim=dim, keepdim=True))).to(x.dtype)
"""),
]


CASES += junk_cases(MODULE, {"2.1": ("stable_log_softmax", "my_log_softmax", "x, dim=-1")})

# Cases that leave torch's grad mode off go last, after the junk battery (the runner does not restore it, and neither
# does the checker, so every later case would be checked with grad mode off), followed by one
# right answer checked after them: what a student sees after fixing such a cell in a notebook.
_MOVE = {'grad_mode_off'}
CASES = [c for c in CASES if c["name"] not in _MOVE] + [c for c in CASES if c["name"] in _MOVE]
CASES.append(L("right_after_grad_off", "right", "right_obvious again, checked right after grad_mode_off left grad mode off in the kernel (a notebook where the student then fixed the cell)", """
import torch
def my_log_softmax(x, dim=-1):
    c = x.amax(dim=dim, keepdim=True)
    return x - c - torch.log(torch.exp(x - c).sum(dim=dim, keepdim=True))
"""))

