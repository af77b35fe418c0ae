"""Exercises 13.5 (GQA under a KV cache), 13.6 (Newton-Schulz), 13.7 (one Muon step)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _util import Maker, junk, sub  # noqa: E402

MODULE = "companion.exercises.modern"
PRELUDE = """
import importlib.util
import inspect
import math
import statistics

import matplotlib.pyplot as plt
import torch
import torch.nn as nn
import torch.nn.functional as F

from companion import modern
from companion.exercises import modern as check
from companion.model import GPT, GPTConfig
from companion.modern import (GroupedQueryAttention, ModernConfig, ModernGPT,
                              SwiGLU, halves_order, orthogonalize,
                              repeat_kv, rotate)
from companion.norm import RMSNorm
from companion.notebook import setup
"""

# ----------------------------------------------------------------------------- 13.5
GQA = '''
import math
import torch

def my_rotate(x, offset):
    d = x.shape[-1]
    half = d // 2
    j = torch.arange(half, dtype=torch.float64)
    freq = 10000.0 ** (-2 * j / d)
    pos = torch.arange(offset, offset + x.shape[-2], dtype=torch.float64)
    ang = (pos[:, None] * freq[None, :]).to(x.dtype)
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

def my_repeat_kv(k, groups):
    return k.repeat_interleave(groups, dim=1)

def my_gqa_cached(attn, x, past):
    B, T, _ = x.shape
    h, hk, d = attn.n_heads, attn.n_kv_heads, attn.d_head
    q = attn.q_proj(x).view(B, T, h, d).transpose(1, 2)
    k = attn.k_proj(x).view(B, T, hk, d).transpose(1, 2)
    v = attn.v_proj(x).view(B, T, hk, d).transpose(1, 2)
    S = 0 if past is None else past[0].shape[2]
    q = my_rotate(q, S)
    k = my_rotate(k, S)
    if past is not None:
        k = torch.cat([past[0], k], dim=2)
        v = torch.cat([past[1], v], dim=2)
    kk = my_repeat_kv(k, h // hk)
    vv = my_repeat_kv(v, h // hk)
    scores = q @ kk.transpose(-2, -1) / math.sqrt(d)
    L = S + T
    mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=S)
    scores = scores.masked_fill(~mask, float("-inf"))
    y = scores.softmax(dim=-1) @ vv
    y = y.transpose(1, 2).reshape(B, T, h * d)
    return attn.o_proj(y), (k, v)
'''

g = Maker("13.5", "gqa_with_cache", MODULE, "my_gqa_cached")
GW = lambda name, why, *pairs: g.add(name, "wrong", why, sub(GQA, *pairs))  # noqa: E731

g.add("right_base", "right", "explicit scores, boolean mask offset by S, repeat_interleave", GQA)
g.add("right_sdpa_expand", "right",
      "F.scaled_dot_product_attention with a boolean mask; heads repeated with expand + reshape",
      sub(GQA,
          ("    return k.repeat_interleave(groups, dim=1)",
           "    B, hk, S, d = k.shape\n    return k[:, :, None].expand(B, hk, groups, S, d).reshape(B, hk * groups, S, d)"),
          ("    scores = q @ kk.transpose(-2, -1) / math.sqrt(d)\n    L = S + T\n    mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=S)\n    scores = scores.masked_fill(~mask, float(\"-inf\"))\n    y = scores.softmax(dim=-1) @ vv\n",
           "    L = S + T\n    mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=S)\n    y = torch.nn.functional.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)\n")))
g.add("right_sdpa_enable_gqa", "right",
      "lets scaled_dot_product_attention(enable_gqa=True) share the key/value heads (query head i reads i // g)",
      sub(GQA,
          ("    scores = q @ kk.transpose(-2, -1) / math.sqrt(d)\n    L = S + T\n    mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=S)\n    scores = scores.masked_fill(~mask, float(\"-inf\"))\n    y = scores.softmax(dim=-1) @ vv\n",
           "    L = S + T\n    mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=S)\n    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)\n")))
g.add("right_companion_pieces", "right",
      "debatable: uses the companion's rotate and repeat_kv (imported by the notebook) as the pieces; the text bans only attn(...)",
      sub(GQA, ("    q = my_rotate(q, S)\n    k = my_rotate(k, S)\n", "    q = rotate(q, offset=S)\n    k = rotate(k, offset=S)\n"),
          ("    kk = my_repeat_kv(k, h // hk)\n    vv = my_repeat_kv(v, h // hk)\n",
           "    kk = repeat_kv(k, h // hk)\n    vv = repeat_kv(v, h // hk)\n")))

GW("no_offset", "rotates the new tokens at positions 0 .. T-1 whatever the cache holds",
   ("    q = my_rotate(q, S)\n    k = my_rotate(k, S)\n", "    q = my_rotate(q, 0)\n    k = my_rotate(k, 0)\n"))
GW("offset_plus_one", "rotates at positions S+1 .. S+T (off by one)",
   ("    q = my_rotate(q, S)\n    k = my_rotate(k, S)\n", "    q = my_rotate(q, S + 1)\n    k = my_rotate(k, S + 1)\n"))
GW("tiled_heads", "repeats the key/value heads by tiling (head i reads i % h_kv)",
   ("    return k.repeat_interleave(groups, dim=1)", "    return k.repeat(1, groups, 1, 1)"))
GW("no_mask", "no causal mask: new tokens see the later new tokens",
   ("    scores = scores.masked_fill(~mask, float(\"-inf\"))\n", ""))
GW("mask_not_shifted", "causal mask tril(0) on (T, S+T): ignores the S cached positions' offset",
   ("tril(diagonal=S)", "tril(diagonal=0)"))
GW("scale_d_model", "scales by 1/sqrt(d_model) instead of 1/sqrt(d_head)",
   ("/ math.sqrt(d)", "/ math.sqrt(x.shape[-1])"))
GW("no_scale", "forgets the 1/sqrt(d_head) scale",
   ("/ math.sqrt(d)", ""))
GW("cache_repeated_heads", "returns the cache with the repeated heads (h instead of h_kv)",
   ("    return attn.o_proj(y), (k, v)", "    return attn.o_proj(y), (kk, vv)"))
GW("cache_unrotated", "keeps unrotated keys in the cache and rotates all keys at 0..S+T-1 each call (text: cache holds rotated keys)",
   ("    q = my_rotate(q, S)\n    k = my_rotate(k, S)\n    if past is not None:\n        k = torch.cat([past[0], k], dim=2)\n        v = torch.cat([past[1], v], dim=2)\n    kk = my_repeat_kv(k, h // hk)",
    "    q = my_rotate(q, S)\n    if past is not None:\n        k = torch.cat([past[0], k], dim=2)\n        v = torch.cat([past[1], v], dim=2)\n    kk = my_repeat_kv(my_rotate(k, 0), h // hk)"))
GW("interleaved_layout", "rotates pairs (2j, 2j+1) instead of the halves layout",
   ("    x1, x2 = x[..., :half], x[..., half:]\n    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)",
    "    x1, x2 = x[..., 0::2], x[..., 1::2]\n    out = torch.empty_like(x)\n    out[..., 0::2] = x1 * cos - x2 * sin\n    out[..., 1::2] = x1 * sin + x2 * cos\n    return out"))
GW("rotates_values", "also rotates the values",
   ("    k = my_rotate(k, S)\n", "    k = my_rotate(k, S)\n    v = my_rotate(v, S)\n"))
GW("keys_not_rotated", "rotates the queries only",
   ("    k = my_rotate(k, S)\n", ""))
GW("new_keys_first", "puts the new keys before the cached ones",
   ("        k = torch.cat([past[0], k], dim=2)\n        v = torch.cat([past[1], v], dim=2)",
    "        k = torch.cat([k, past[0]], dim=2)\n        v = torch.cat([v, past[1]], dim=2)"))
GW("view_without_transpose", "reshapes (B, T, h*d) straight to (B, h, T, d): heads and tokens mixed",
   ("    q = attn.q_proj(x).view(B, T, h, d).transpose(1, 2)", "    q = attn.q_proj(x).reshape(B, h, T, d)"))
GW("softmax_wrong_dim", "softmax over the query axis (dim=-2)",
   ("scores.softmax(dim=-1)", "scores.softmax(dim=-2)"))
GW("ignores_past", "attends only to the new tokens (positions right, cache ignored, returned as new)",
   ("    if past is not None:\n        k = torch.cat", "    if False:\n        k = torch.cat"),
   ("    L = S + T\n    mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=S)",
    "    L = T\n    mask = torch.ones(T, L, dtype=torch.bool).tril(diagonal=0)"))
GW("base_1000", "rotary base 1000 instead of 10000",
   ("    freq = 10000.0 ** (-2 * j / d)", "    freq = 1000.0 ** (-2 * j / d)"))
GW("freq_without_two", "frequency 10000^(-j/d) instead of 10000^(-2j/d)",
   ("    freq = 10000.0 ** (-2 * j / d)", "    freq = 10000.0 ** (-j / d)"))
GW("no_o_proj", "returns the heads' concatenation without o_proj",
   ("    return attn.o_proj(y), (k, v)", "    return y, (k, v)"))
GW("cache_swapped", "returns the cache as (v, k)",
   ("    return attn.o_proj(y), (k, v)", "    return attn.o_proj(y), (v, k)"))
GW("calls_attn_first", "calls attn(x) itself when there is no cache (forbidden), by hand afterwards",
   ("    S = 0 if past is None else past[0].shape[2]\n",
    "    S = 0 if past is None else past[0].shape[2]\n    if past is None:\n        return attn(x), (my_rotate(k, 0), v)\n"))
GW("batch_hardcoded", "hard-codes a batch of one in the reshape",
   ("    y = y.transpose(1, 2).reshape(B, T, h * d)", "    y = y.transpose(1, 2).reshape(1, T, h * d)"))
GW("mask_additive_wrong_sign", "adds the boolean mask as +inf/0 instead of -inf: future positions dominate",
   ("    scores = scores.masked_fill(~mask, float(\"-inf\"))\n", "    scores = scores.masked_fill(~mask, 1e4)\n"))
GW("float64_output", "computes in float64 and returns float64 outputs and cache",
   ("    B, T, _ = x.shape\n", "    B, T, _ = x.shape\n    x = x.double()\n    attn = __import__('copy').deepcopy(attn).double()\n    if past is not None:\n        past = (past[0].double(), past[1].double())\n"))

GW("cache_by_shape", "remembers (y, cache) per (x shape, cache length) across calls and returns it again for new values",
   ("def my_gqa_cached(attn, x, past):\n", "_MEMO = {}\n\ndef my_gqa_cached(attn, x, past):\n    key = (tuple(x.shape), None if past is None else past[0].shape[2], attn.n_kv_heads)\n    if key not in _MEMO:\n        _MEMO[key] = _gqa(attn, x, past)\n    return _MEMO[key]\n\ndef _gqa(attn, x, past):\n"))

# ----------------------------------------------------------------------------- 13.6
NS = '''
import torch

def my_orthogonalize(g, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = g.shape[0] > g.shape[1]
    X = g.T if tall else g
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X
'''

n = Maker("13.6", "newton_schulz", MODULE, "my_orthogonalize")
NW = lambda name, why, *pairs: n.add(name, "wrong", why, sub(NS, *pairs))  # noqa: E731

n.add("right_base", "right", "the text's iteration, tall matrices transposed", NS)
n.add("right_right_gram", "right",
      "keeps the tall orientation but uses A = X^T X on the right: X p(X^T X) = p(X X^T) X, the same matrix",
      '''
import torch

def my_orthogonalize(g, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    wide = g.shape[0] <= g.shape[1]
    X = g / (torch.linalg.matrix_norm(g) + 1e-7)
    for _ in range(steps):
        if wide:
            A = X @ X.mT
            X = a * X + (b * A + c * (A @ A)) @ X
        else:
            A = X.mT @ X
            X = a * X + X @ (b * A + c * (A @ A))
    return X.clone()
''')
n.add("right_float64_inside", "right",
      "iterates in float64 for accuracy and casts back to g's dtype; torch.mm and torch.addmm",
      '''
import torch

def my_orthogonalize(g, steps):
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = g.size(0) > g.size(1)
    X = (g.t() if tall else g).double()
    X = X / (X.pow(2).sum().sqrt() + 1e-7)
    for _ in range(steps):
        A = torch.mm(X, X.t())
        B = torch.addmm(A, A, A, beta=b, alpha=c)
        X = torch.addmm(X, B, X, beta=a)
    X = X.t() if tall else X
    return X.to(g.dtype).contiguous()
''')
n.add("right_square_transposed", "right",
      "transposes square matrices too (m >= n); the same matrix up to rounding",
      sub(NS, ("    tall = g.shape[0] > g.shape[1]", "    tall = g.shape[0] >= g.shape[1]")))

NW("no_transpose_tall", "debatable: never transposes (A is the large square); the same matrix up to rounding, but not the orientation the text asks for",
   ("    tall = g.shape[0] > g.shape[1]", "    tall = False"))
NW("no_normalize", "forgets to divide by the Frobenius norm",
   ("    X = X / (X.norm() + 1e-7)\n", ""))
NW("normalize_no_eps", "divides by the norm without + 1e-7 (nan for a zero matrix, tiny change otherwise)",
   ("(X.norm() + 1e-7)", "X.norm()"))
NW("normalize_spectral_like", "divides by the largest absolute entry instead of the Frobenius norm",
   ("(X.norm() + 1e-7)", "(X.abs().max() + 1e-7)"))
NW("norm_per_row", "normalizes each row by its own norm",
   ("(X.norm() + 1e-7)", "(X.norm(dim=1, keepdim=True) + 1e-7)"))
NW("coefficients_swapped", "uses (a, b, c) = (3.4445, 2.0315, -4.7750)",
   ("    a, b, c = 3.4445, -4.7750, 2.0315", "    a, c, b = 3.4445, -4.7750, 2.0315"))
NW("b_sign", "b = +4.7750",
   ("-4.7750", "4.7750"))
NW("elementwise_square", "A * A elementwise instead of A @ A",
   ("c * A @ A", "c * A * A"))
NW("steps_minus_one", "runs steps - 1 iterations",
   ("    for _ in range(steps):", "    for _ in range(steps - 1):"))
NW("fixed_five_steps", "always runs 5 iterations whatever steps says",
   ("    for _ in range(steps):", "    for _ in range(5):"))
NW("tall_not_transposed_back", "forgets to transpose a tall result back (returns (n, m))",
   ("    return X.T if tall else X", "    return X"))
NW("normalize_every_step", "renormalizes by the Frobenius norm at every step",
   ("        A = X @ X.T\n", "        X = X / (X.norm() + 1e-7)\n        A = X @ X.T\n"))
NW("inplace_on_g", "divides the caller's g in place",
   ("    X = g.T if tall else g\n    X = X / (X.norm() + 1e-7)\n", "    g /= (g.norm() + 1e-7)\n    X = g.T if tall else g\n"))
NW("returns_float64", "iterates in float64 and returns float64",
   ("    X = g.T if tall else g\n", "    X = (g.T if tall else g).double()\n"))
NW("uses_svd", "exact U V^T from an SVD (forbidden, and not what 5 steps give)",
   ("    a, b, c = 3.4445, -4.7750, 2.0315\n", "    U, S, Vh = torch.linalg.svd(g, full_matrices=False)\n    return U @ Vh\n    a, b, c = 3.4445, -4.7750, 2.0315\n"))
NW("uses_companion", "calls companion.modern.orthogonalize (forbidden)",
   ("    a, b, c = 3.4445, -4.7750, 2.0315\n", "    from companion.modern import orthogonalize\n    return orthogonalize(g, steps)\n    a, b, c = 3.4445, -4.7750, 2.0315\n"))
NW("cache_by_shape", "caches the first result for each shape and steps (returns a stale matrix for new values)",
   ("def my_orthogonalize(g, steps):\n", "_MEMO = {}\n\ndef my_orthogonalize(g, steps):\n    key = (tuple(g.shape), steps)\n    if key not in _MEMO:\n        _MEMO[key] = _ortho(g, steps)\n    return _MEMO[key].clone()\n\ndef _ortho(g, steps):\n"))
NW("c_term_linear", "forgets the square: (b A + c A) X instead of (b A + c A^2) X",
   ("c * A @ A", "c * A"))
NW("wrong_a_coeff", "a = 3.0 (a typo)",
   ("    a, b, c = 3.4445, -4.7750, 2.0315", "    a, b, c = 3.0, -4.7750, 2.0315"))
NW("norm_after_transpose_bug", "divides by the squared Frobenius norm",
   ("(X.norm() + 1e-7)", "(X.norm() ** 2 + 1e-7)"))
NW("not_implemented_tall", "raises NotImplementedError for tall matrices (one branch unfinished)",
   ("    X = g.T if tall else g\n", "    if tall:\n        raise NotImplementedError(\"tall matrices: todo\")\n    X = g\n"))

# ----------------------------------------------------------------------------- 13.7
MUON = '''
import torch

def _ns(g, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = g.shape[0] > g.shape[1]
    X = g.T if tall else g
    X = X / (X.norm() + 1e-7)
    for _ in range(steps):
        A = X @ X.T
        X = a * X + (b * A + c * A @ A) @ X
    return X.T if tall else X

def my_muon_step(w, grad, buf, lr, momentum, weight_decay):
    new_buf = momentum * buf + (1 - momentum) * grad
    u = (1 - momentum) * grad + momentum * new_buf
    rows, cols = w.shape
    scale = max(1.0, rows / cols) ** 0.5
    new_w = w * (1 - lr * weight_decay) - lr * scale * _ns(u, 5)
    return new_w, new_buf
'''

u = Maker("13.7", "muon_step", MODULE, "my_muon_step")
UW = lambda name, why, *pairs: u.add(name, "wrong", why, sub(MUON, *pairs))  # noqa: E731

u.add("right_base", "right", "the text's formulas, written out", MUON)
u.add("right_lerp", "right", "buffer and look-ahead with torch.lerp, math.sqrt for the scale",
      sub(MUON, ("    new_buf = momentum * buf + (1 - momentum) * grad\n    u = (1 - momentum) * grad + momentum * new_buf\n",
                 "    new_buf = torch.lerp(buf, grad, 1 - momentum)\n    u = torch.lerp(grad, new_buf, momentum)\n"),
          ("    scale = max(1.0, rows / cols) ** 0.5", "    scale = __import__('math').sqrt(max(1, rows / cols))")))
u.add("right_clone_inplace", "right",
      "clones the arguments, then updates the clones in place (mul_, add_) as an optimizer would",
      sub(MUON, ("    new_buf = momentum * buf + (1 - momentum) * grad\n",
                 "    new_buf = buf.clone().mul_(momentum).add_(grad, alpha=1 - momentum)\n"),
          ("    new_w = w * (1 - lr * weight_decay) - lr * scale * _ns(u, 5)",
           "    new_w = w.detach().clone()\n    new_w.mul_(1 - lr * weight_decay)\n    new_w.add_(_ns(u, 5), alpha=-lr * scale)")))

UW("no_nesterov", "uses the buffer as the update (no Nesterov look-ahead)",
   ("    u = (1 - momentum) * grad + momentum * new_buf", "    u = new_buf"))
UW("buffer_without_one_minus_beta", "m' = beta m + g (no (1 - beta))",
   ("    new_buf = momentum * buf + (1 - momentum) * grad", "    new_buf = momentum * buf + grad"))
UW("nesterov_sgd_style", "u = g + beta m' (SGD's Nesterov)",
   ("    u = (1 - momentum) * grad + momentum * new_buf", "    u = grad + momentum * new_buf"))
UW("nesterov_old_buffer", "look-ahead with the old buffer m instead of m'",
   ("    u = (1 - momentum) * grad + momentum * new_buf", "    u = (1 - momentum) * grad + momentum * buf"))
UW("beta_roles_swapped", "m' = (1 - beta) m + beta g",
   ("    new_buf = momentum * buf + (1 - momentum) * grad", "    new_buf = (1 - momentum) * buf + momentum * grad"))
UW("no_shape_scale", "forgets sqrt(max(1, rows/cols))",
   ("    scale = max(1.0, rows / cols) ** 0.5", "    scale = 1.0"))
UW("scale_without_max", "sqrt(rows/cols) without the max: wide matrices move less",
   ("    scale = max(1.0, rows / cols) ** 0.5", "    scale = (rows / cols) ** 0.5"))
UW("scale_cols_over_rows", "sqrt(max(1, cols/rows)): the ratio inverted",
   ("    scale = max(1.0, rows / cols) ** 0.5", "    scale = max(1.0, cols / rows) ** 0.5"))
UW("scale_no_sqrt", "max(1, rows/cols) without the square root",
   ("    scale = max(1.0, rows / cols) ** 0.5", "    scale = max(1.0, rows / cols)"))
UW("coupled_weight_decay", "adds weight_decay * w to the gradient (L2) instead of the decoupled decay",
   ("    new_buf = momentum * buf + (1 - momentum) * grad", "    grad = grad + weight_decay * w\n    new_buf = momentum * buf + (1 - momentum) * grad"),
   ("w * (1 - lr * weight_decay)", "w"))
UW("decay_after_update", "applies the decay after the update: (w - lr s NS(u)) (1 - lr wd)",
   ("    new_w = w * (1 - lr * weight_decay) - lr * scale * _ns(u, 5)",
    "    new_w = (w - lr * scale * _ns(u, 5)) * (1 - lr * weight_decay)"))
UW("no_weight_decay", "ignores weight_decay",
   ("w * (1 - lr * weight_decay)", "w"))
UW("three_ns_steps", "3 Newton-Schulz steps instead of 5",
   ("_ns(u, 5)", "_ns(u, 3)"))
UW("inplace_w", "updates the caller's w in place and returns it",
   ("    new_w = w * (1 - lr * weight_decay) - lr * scale * _ns(u, 5)",
    "    with torch.no_grad():\n        w.mul_(1 - lr * weight_decay).sub_(lr * scale * _ns(u, 5))\n    new_w = w"))
UW("inplace_buf", "updates the caller's momentum buffer in place",
   ("    new_buf = momentum * buf + (1 - momentum) * grad", "    new_buf = buf.mul_(momentum).add_((1 - momentum) * grad)"))
UW("returns_old_buf", "returns the old buffer",
   ("    return new_w, new_buf", "    return new_w, buf"))
UW("returns_swapped", "returns (new_buf, new_w)",
   ("    return new_w, new_buf", "    return new_buf, new_w"))
UW("orthogonalize_grad", "orthogonalizes the raw gradient instead of u",
   ("_ns(u, 5)", "_ns(grad, 5)"))
UW("uses_companion_muon", "calls companion.modern.orthogonalize (forbidden)",
   ("_ns(u, 5)", "__import__('companion.modern', fromlist=['x']).orthogonalize(u, 5)"))
UW("ascent", "adds the update instead of subtracting it",
   ("- lr * scale * _ns(u, 5)", "+ lr * scale * _ns(u, 5)"))
UW("returns_float64", "computes in float64 and returns float64",
   ("    new_buf = momentum * buf + (1 - momentum) * grad", "    w, grad, buf = w.double(), grad.double(), buf.double()\n    new_buf = momentum * buf + (1 - momentum) * grad"))
UW("ns_no_transpose_back", "its Newton-Schulz forgets to transpose a tall result back (shape error on tall)",
   ("    return X.T if tall else X\n", "    return X\n"))
UW("first_step_plain_sgd", "special-cases the first step (zero buffer): plain SGD step on the gradient",
   ("    rows, cols = w.shape\n", "    rows, cols = w.shape\n    if not bool(buf.any()):\n        return w - lr * grad, new_buf\n"))

UW("cache_by_shape", "remembers (new_w, new_buf) per (shape, lr, momentum, weight_decay) and returns it again for new values",
   ("def my_muon_step(w, grad, buf, lr, momentum, weight_decay):\n", "_MEMO = {}\n\ndef my_muon_step(w, grad, buf, lr, momentum, weight_decay):\n    key = (tuple(w.shape), lr, momentum, weight_decay, w.dtype)\n    if key not in _MEMO:\n        _MEMO[key] = _step(w, grad, buf, lr, momentum, weight_decay)\n    return tuple(t.clone() for t in _MEMO[key])\n\ndef _step(w, grad, buf, lr, momentum, weight_decay):\n"))

CASES = (g.cases + n.cases + u.cases
         + junk(MODULE, {"13.5": ("gqa_with_cache", "my_gqa_cached", "attn, x, past"),
                         "13.6": ("newton_schulz", "my_orthogonalize", "g, steps"),
                         "13.7": ("muon_step", "my_muon_step", "w, grad, buf, lr, momentum, weight_decay")}))
