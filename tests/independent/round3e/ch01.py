"""Red-team cases for exercise 1.5 (saturation)."""
from _junk import junk_cases

MODULE = "companion.exercises.early_extra"
PRELUDE = """
import math
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from companion import example, vectors
from companion.exercises import early_extra as check_more
from companion.exercises import vectors as check
"""

def C(name, expect, why, source):
    return dict(exercise="1.5", checker="saturation", module=MODULE, name=name,
                expect=expect, why=why, source=source.lstrip("\n"), call="my_saturation")

GOOD = """
import torch
def my_saturation(q, K, V, scale):
    with torch.enable_grad():
        qq = q.detach().requires_grad_(True)
        Kd, Vd = K.detach(), V.detach()
        s = torch.einsum('nd,njd->nj', qq, Kd) / scale
        w = torch.softmax(s, dim=-1)
        L = (w[..., None] * Vd).sum()
        L.backward()
    return w.max(dim=-1).values.detach(), qq.grad.norm(dim=-1)
"""

def variant(old, new, src=GOOD):
    assert old in src, old
    return src.replace(old, new)

CASES = [
    C("right_bmm_autograd_grad", "right", "bmm for the scores, torch.autograd.grad instead of backward", """
import torch
def my_saturation(q, K, V, scale):
    with torch.enable_grad():
        x = q.detach().clone().requires_grad_(True)
        s = torch.bmm(K.detach(), x.unsqueeze(-1)).squeeze(-1) / scale
        w = s.softmax(-1)
        L = torch.bmm(w.unsqueeze(1), V.detach()).sum()
        (g,) = torch.autograd.grad(L, x)
    return w.detach().amax(-1), torch.linalg.vector_norm(g, dim=-1)
"""),
    C("right_analytic", "right", "closed-form gradient of softmax (no autograd; text suggests autograd but does not require it)", """
import torch
def my_saturation(q, K, V, scale):
    with torch.no_grad():
        s = (K * q[:, None, :]).sum(-1) / scale
        w = torch.softmax(s, -1)
        u = V.sum(-1)                       # dL/dw_ij
        ds = w * (u - (w * u).sum(-1, keepdim=True))
        g = (ds[..., None] * K).sum(1) / scale
    return w.max(-1).values, g.norm(dim=-1)
"""),
    C("right_float64_loop", "right", "float64 inside, one query at a time, cast back", """
import torch
def my_saturation(q, K, V, scale):
    ws, gs = [], []
    with torch.enable_grad():
        for i in range(q.shape[0]):
            qi = q[i].detach().double().requires_grad_(True)
            w = torch.softmax(K[i].detach().double() @ qi / scale, dim=0)
            (w @ V[i].detach().double()).sum().backward()
            ws.append(w.max().detach()); gs.append(qi.grad.norm())
    return torch.stack(ws).to(q.dtype), torch.stack(gs).to(q.dtype)
"""),
    C("right_matmul_set_grad_enabled", "right", "torch.set_grad_enabled(True) as a context manager, matmul", """
import torch
def my_saturation(q, K, V, scale):
    with torch.set_grad_enabled(True):
        leaf = q.detach().requires_grad_()
        scores = (K.detach() @ leaf[..., None])[..., 0] / scale
        w = torch.nn.functional.softmax(scores, dim=1)
        loss = (w[:, :, None] * V.detach()).sum()
        loss.backward()
    return w.detach().max(1)[0], leaf.grad.pow(2).sum(1).sqrt()
"""),
    C("right_logsumexp", "right", "weights from exp(s - logsumexp)", """
import torch
def my_saturation(q, K, V, scale):
    with torch.enable_grad():
        qq = q.detach().requires_grad_(True)
        s = (qq.unsqueeze(1) * K.detach()).sum(-1) / scale
        w = torch.exp(s - torch.logsumexp(s, -1, keepdim=True))
        (w.unsqueeze(-1) * V.detach()).sum().backward()
    return w.detach().max(-1).values, qq.grad.norm(dim=-1)
"""),
    # ---- wrong
    C("multiplies_by_scale", "wrong", "scores multiplied by scale instead of divided", variant("/ scale", "* scale")),
    C("sqrt_of_scale", "wrong", "divides by sqrt(scale) (scale already is sqrt(d))", variant("/ scale", "/ scale ** 0.5")),
    C("softmax_wrong_axis", "wrong", "softmax over the queries (dim 0)", variant("torch.softmax(s, dim=-1)", "torch.softmax(s, dim=0)")),
    C("min_weight", "wrong", "returns the smallest weight", variant("w.max(dim=-1).values", "w.min(dim=-1).values")),
    C("argmax_index", "wrong", "returns the index of the largest weight", variant("w.max(dim=-1).values.detach()", "w.argmax(dim=-1).float()")),
    C("grad_norm_squared", "wrong", "squared norm of the gradient", variant("qq.grad.norm(dim=-1)", "qq.grad.pow(2).sum(-1)")),
    C("grad_l1_norm", "wrong", "L1 norm of the gradient", variant("qq.grad.norm(dim=-1)", "qq.grad.abs().sum(-1)")),
    C("loss_without_V", "wrong", "L = sum of the weights (always N): zero gradient", variant("L = (w[..., None] * Vd).sum()", "L = w.sum()")),
    C("loss_mean", "wrong", "L is the mean, not the sum", variant("L = (w[..., None] * Vd).sum()", "L = (w[..., None] * Vd).mean()")),
    C("loss_of_max_weight", "wrong", "gradient of the max weights instead of L", variant("L = (w[..., None] * Vd).sum()", "L = w.max(-1).values.sum()")),
    C("grad_global_norm", "wrong", "one norm over all queries, broadcast to (N,)", variant("qq.grad.norm(dim=-1)", "qq.grad.norm().expand(q.shape[0])")),
    C("first_query_keys", "wrong", "uses K[0] and V[0] for every query", variant("s = torch.einsum('nd,njd->nj', qq, Kd) / scale\n        w = torch.softmax(s, dim=-1)\n        L = (w[..., None] * Vd).sum()",
        "s = qq @ Kd[0].T / scale\n        w = torch.softmax(s, dim=-1)\n        L = (w[..., None] * Vd[0]).sum()")),
    C("mutates_caller_q_requires_grad", "wrong", "q.requires_grad_(True) on the caller's q (text forbids)", """
import torch
def my_saturation(q, K, V, scale):
    with torch.enable_grad():
        q.requires_grad_(True)
        s = torch.einsum('nd,njd->nj', q, K) / scale
        w = torch.softmax(s, -1)
        (w[..., None] * V).sum().backward()
    g = q.grad.norm(dim=-1)
    return w.max(-1).values.detach(), g
"""),
    C("leaves_grad_on_caller_q", "wrong", "uses caller's q as leaf, resets requires_grad but leaves q.grad", """
import torch
def my_saturation(q, K, V, scale):
    with torch.enable_grad():
        q.requires_grad_(True)
        w = torch.softmax(torch.einsum('nd,njd->nj', q, K) / scale, -1)
        (w[..., None] * V).sum().backward()
    q.requires_grad_(False)
    return w.max(-1).values.detach(), q.grad.norm(dim=-1)
"""),
    C("no_enable_grad", "wrong", "forgets enable_grad: fails under torch.no_grad()", variant("with torch.enable_grad():", "if True:")),
    C("set_grad_enabled_leaks", "wrong", "torch.set_grad_enabled(True) as a call, never restored (grad mode left changed)", variant("    with torch.enable_grad():\n", "    torch.set_grad_enabled(True)\n    if True:\n")),
    C("K_not_detached", "wrong", "K, V used as they are: if the caller's K/V require grad, .grad is left in them", variant("Kd, Vd = K.detach(), V.detach()", "Kd, Vd = K, V")),
    C("inplace_divides_q", "wrong", "q /= scale in place on the caller's tensor", """
import torch
def my_saturation(q, K, V, scale):
    q /= scale
    with torch.enable_grad():
        qq = q.detach().requires_grad_(True)
        w = torch.softmax(torch.einsum('nd,njd->nj', qq, K.detach()), -1)
        (w[..., None] * V.detach()).sum().backward()
    return w.max(-1).values.detach(), qq.grad.norm(dim=-1) / scale
"""),
    C("squeeze_batch_of_one", "wrong", ".squeeze() on the results: shape () when N == 1", variant("return w.max(dim=-1).values.detach(), qq.grad.norm(dim=-1)", "return w.max(dim=-1).values.detach().squeeze(), qq.grad.norm(dim=-1).squeeze()")),
    C("hardcoded_8_keys", "wrong", "view(-1, 8): assumes 8 keys per query", variant("w = torch.softmax(s, dim=-1)", "w = torch.softmax(s.reshape(-1, 8), dim=-1).reshape(s.shape)")),
    C("ignores_scale_uses_sqrt_d", "wrong", "uses sqrt(d) whenever scale != 1 (wrong for any other scale)", variant("/ scale\n", "/ (1.0 if scale == 1 else q.shape[-1] ** 0.5)\n")),
    C("finite_difference_coarse", "wrong", "gradient by forward differences with eps=1e-2", """
import torch
def my_saturation(q, K, V, scale):
    def L(qq):
        w = torch.softmax(torch.einsum('nd,njd->nj', qq, K) / scale, -1)
        return (w[..., None] * V).sum(dim=(1, 2)), w
    with torch.no_grad():
        base, w = L(q)
        g = torch.zeros_like(q)
        for t in range(q.shape[1]):
            e = torch.zeros_like(q); e[:, t] = 1e-2
            g[:, t] = (L(q + e)[0] - base) / 1e-2
    return w.max(-1).values, g.norm(dim=-1)
"""),
    C("half_precision", "wrong", "computes in float16: weights and gradients off by ~1e-3", """
import torch
def my_saturation(q, K, V, scale):
    with torch.enable_grad():
        qq = q.detach().half().requires_grad_(True)
        w = torch.softmax(torch.einsum('nd,njd->nj', qq, K.detach().half()) / scale, -1)
        (w[..., None] * V.detach().half()).sum().backward()
    return w.max(-1).values.detach().float(), qq.grad.float().norm(dim=-1)
"""),
    C("cached_by_shape", "wrong", "caches the result by shape: a second call with new data returns the old numbers", """
import torch
_cache = {}
def my_saturation(q, K, V, scale):
    key = (tuple(q.shape), tuple(K.shape), float(scale))
    if key in _cache:
        return _cache[key]
    with torch.enable_grad():
        qq = q.detach().requires_grad_(True)
        w = torch.softmax(torch.einsum('nd,njd->nj', qq, K.detach()) / scale, -1)
        (w[..., None] * V.detach()).sum().backward()
    _cache[key] = (w.max(-1).values.detach(), qq.grad.norm(dim=-1))
    return _cache[key]
"""),
    C("grad_of_scaled_q", "wrong", "leaf is q / scale: gradient w.r.t. q/scale, a factor scale too large", """
import torch
def my_saturation(q, K, V, scale):
    with torch.enable_grad():
        qs = (q / scale).detach().requires_grad_(True)
        w = torch.softmax(torch.einsum('nd,njd->nj', qs, K.detach()), -1)
        (w[..., None] * V.detach()).sum().backward()
    return w.max(-1).values.detach(), qs.grad.norm(dim=-1)
"""),
    C("sum_V_first_wrong", "wrong", "L uses the norm of each value instead of the sum of its components", variant("L = (w[..., None] * Vd).sum()", "L = (w * Vd.norm(dim=-1)).sum()")),
    C("reseeds_global_rng", "wrong", "torch.manual_seed(0) inside (global RNG state changed); else right -- debatable, text does not name RNG", variant("    with torch.enable_grad():\n", "    torch.manual_seed(0)\n    with torch.enable_grad():\n")),
    C("right_torch_func", "right", "torch.func.grad + vmap per query (works under no_grad without enable_grad)", """
import torch
from torch.func import grad, vmap
def my_saturation(q, K, V, scale):
    def L(qi, Ki, Vi):
        w = torch.softmax(Ki @ qi / scale, dim=0)
        return (w @ Vi).sum()
    g = vmap(grad(L))(q.detach(), K.detach(), V.detach())
    w = torch.softmax(torch.einsum('nd,njd->nj', q.detach(), K.detach()) / scale, -1)
    return w.max(-1).values, g.norm(dim=-1)
"""),
    C("scale_after_softmax", "wrong", "divides the weights by scale instead of the scores", variant("s = torch.einsum('nd,njd->nj', qq, Kd) / scale\n        w = torch.softmax(s, dim=-1)", "s = torch.einsum('nd,njd->nj', qq, Kd)\n        w = torch.softmax(s, dim=-1) / scale")),
    C("sigmoid_weights", "wrong", "sigmoid of the scores instead of a softmax", variant("w = torch.softmax(s, dim=-1)", "w = torch.sigmoid(s)")),
]

CASES += junk_cases(MODULE, {"1.5": ("saturation", "my_saturation", "q, K, V, scale")})
