"""Red-team cases, chapter 6 (exercises 6.1 and 6.2), from the student notebook only."""
import textwrap

from _junk import junk_cases

MODULE = "companion.exercises.block"
PRELUDE = """
import inspect
import math
import statistics
import time

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
from torch import nn

from companion import example
from companion.block import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    TransformerBlock,
    block_parameters,
    count_parameters,
    parameter_breakdown,
)
from companion.exercises import block as check
from companion.model import GPT, GPTConfig
from companion.multihead import MultiHeadAttention
from companion.norm import LayerNorm
from companion.notebook import THREADS
"""

CASES = []


def C(ex, checker, fname, name, expect, why, source):
    CASES.append(dict(exercise=ex, checker=checker, module=MODULE, name=name,
                      expect=expect, why=why,
                      source=textwrap.dedent(source).lstrip("\n"), call=fname))


# ---------------------------------------------------------------- 6.1
BASE = '''
import math
import torch
import torch.nn.functional as F


def _linear(x, lin):
    y = x @ lin.weight.T
    return y if lin.bias is None else y + lin.bias


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + norm.eps) * norm.weight
    return y if norm.bias is None else y + norm.bias


def _act(h, name):
    if name == "relu":
        return torch.relu(h)
    if name == "gelu":
        return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))
    raise ValueError(name)


def _attention(x, attn):
    B, T, C = x.shape
    h = attn.n_heads
    dh = C // h
    q = _linear(x, attn.q_proj).view(B, T, h, dh).transpose(1, 2)
    k = _linear(x, attn.k_proj).view(B, T, h, dh).transpose(1, 2)
    v = _linear(x, attn.v_proj).view(B, T, h, dh).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(dh)
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    o = (w @ v).transpose(1, 2).reshape(B, T, C)
    return _linear(o, attn.out_proj)


def _ffn(x, ff):
    return _linear(_act(_linear(x, ff.linear1), ff.activation), ff.linear2)


def _forward(block, x):
    h = x + _attention(_layer_norm(x, block.norm1), block.attn)
    return h + _ffn(_layer_norm(h, block.norm2), block.ff)


def my_block_forward(block, x):
    return _forward(block, x)
'''


def B(name, expect, why, *repl, count=1):
    src = BASE
    for old, new in repl:
        n = src.count(old)
        if n == 0 or (count == 1 and n != 1):
            raise ValueError(f"6.1 {name}: {old!r} found {n} times")
        src = src.replace(old, new)
    C("6.1", "block_forward", "my_block_forward", name, expect, why, src)


B("right_obvious", "right", "obvious: own LayerNorm, batched heads, masked_fill(-inf), own activations")
B("right_head_loop", "right", "a loop over heads with slices of the projections",
  ('''    q = _linear(x, attn.q_proj).view(B, T, h, dh).transpose(1, 2)
    k = _linear(x, attn.k_proj).view(B, T, h, dh).transpose(1, 2)
    v = _linear(x, attn.v_proj).view(B, T, h, dh).transpose(1, 2)
    s = q @ k.transpose(-2, -1) / math.sqrt(dh)
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    o = (w @ v).transpose(1, 2).reshape(B, T, C)
''', '''    q, k, v = _linear(x, attn.q_proj), _linear(x, attn.k_proj), _linear(x, attn.v_proj)
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    outs = []
    for i in range(h):
        sl = slice(i * dh, (i + 1) * dh)
        s = q[..., sl] @ k[..., sl].transpose(-2, -1) / math.sqrt(dh)
        s = s.masked_fill(~mask, float("-inf"))
        outs.append(torch.softmax(s, dim=-1) @ v[..., sl])
    o = torch.cat(outs, dim=-1)
'''))
B("right_F_ops", "right", "F.linear, F.gelu (approximate='tanh' for gelu_tanh), F.softmax: torch functions, not the library's layers",
  ('''    y = x @ lin.weight.T
    return y if lin.bias is None else y + lin.bias''', '''    return F.linear(x, lin.weight, lin.bias)'''),
  ('''    if name == "gelu":
        return 0.5 * h * (1 + torch.erf(h / math.sqrt(2)))
    if name == "gelu_tanh":
        return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h ** 3)))''',
   '''    if name == "gelu":
        return F.gelu(h)
    if name == "gelu_tanh":
        return F.gelu(h, approximate="tanh")'''),
  ("w = torch.softmax(s, dim=-1)", "w = F.softmax(s, dim=-1)"))
B("right_additive_mask", "right", "an additive float mask (0 / -inf) built with triu, reshape+permute for the heads",
  ("    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()\n    s = s.masked_fill(~mask, float(\"-inf\"))",
   "    s = s + torch.full((T, T), float(\"-inf\"), dtype=s.dtype, device=x.device).triu(1)"))
B("right_var_mean_rsqrt", "right", "torch.var_mean(correction=0) and rsqrt in the LayerNorm",
  ('''    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + norm.eps) * norm.weight''',
   '''    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    y = (x - mean) * torch.rsqrt(var + norm.eps) * norm.weight'''))

B("post_norm", "wrong", "post-norm arrangement; the block is pre-norm",
  ('''    h = x + _attention(_layer_norm(x, block.norm1), block.attn)
    return h + _ffn(_layer_norm(h, block.norm2), block.ff)''',
   '''    h = _layer_norm(x + _attention(x, block.attn), block.norm1)
    return _layer_norm(h + _ffn(h, block.ff), block.norm2)'''))
B("no_causal_mask", "wrong", "forgets the causal mask",
  ('    s = s.masked_fill(~mask, float("-inf"))\n', ''))
B("mask_inverted", "wrong", "triu instead of tril: every query sees the future and not the past",
  ("dtype=torch.bool, device=x.device).tril()", "dtype=torch.bool, device=x.device).triu()"))
B("mask_strict", "wrong", "tril(-1): hides the diagonal; the first query sees nothing (nan)",
  ("dtype=torch.bool, device=x.device).tril()", "dtype=torch.bool, device=x.device).tril(-1)"))
B("scale_d_model", "wrong", "divides by sqrt(d_model) instead of sqrt(d_head)",
  ("/ math.sqrt(dh)", "/ math.sqrt(C)"))
B("no_scale", "wrong", "forgets 1/sqrt(d_head)",
  (" / math.sqrt(dh)", ""))
B("single_head", "wrong", "ignores n_heads: one head of width d_model",
  ("    h = attn.n_heads\n", "    h = 1\n"))
B("head_split_order", "wrong", "splits the features as (d_head, h) instead of (h, d_head)",
  (".view(B, T, h, dh).transpose(1, 2)", ".view(B, T, dh, h).permute(0, 3, 1, 2)"), count=3)
B("merge_without_transpose", "wrong", "merges the heads with reshape(B, T, C) before transposing back",
  ("o = (w @ v).transpose(1, 2).reshape(B, T, C)", "o = (w @ v).reshape(B, T, C)"))
B("no_out_proj", "wrong", "forgets the output projection",
  ("    return _linear(o, attn.out_proj)", "    return o"))
B("out_proj_no_bias", "wrong", "output projection without its bias",
  ("    return _linear(o, attn.out_proj)", "    return o @ attn.out_proj.weight.T"))
B("relu_always", "wrong", "ignores block.ff.activation: always ReLU",
  ('    if name == "relu":', '    if True:'))
B("gelu_tanh_as_exact", "wrong", "uses the exact GELU for 'gelu_tanh'",
  ('    if name == "gelu":', '    if name in ("gelu", "gelu_tanh"):'))
B("gelu_tanh_wrong_constant", "wrong", "GPT-2's GELU with sqrt(2)/pi instead of sqrt(2/pi)",
  ("math.sqrt(2 / math.pi)", "math.sqrt(2) / math.pi"))
B("eps_hardcoded", "wrong", "ignores norm.eps: always 1e-5",
  ("var + norm.eps", "var + 1e-5"))
B("eps_outside", "wrong", "eps outside the square root",
  ("torch.sqrt(var + norm.eps)", "(torch.sqrt(var) + norm.eps)"))
B("unbiased_var", "wrong", "LayerNorm with the unbiased variance",
  ("    var = ((x - mean) ** 2).mean(-1, keepdim=True)", "    var = x.var(-1, keepdim=True)"))
B("norm_no_affine", "wrong", "LayerNorm without its weight and bias",
  (" * norm.weight\n", "\n"), ("    return y if norm.bias is None else y + norm.bias", "    return y"))
B("norm1_twice", "wrong", "uses norm1's parameters for the second LayerNorm too",
  ("_layer_norm(h, block.norm2)", "_layer_norm(h, block.norm1)"))
B("no_ffn_residual", "wrong", "forgets the residual around the feed-forward network",
  ("    return h + _ffn(", "    return _ffn("))
B("no_attn_residual", "wrong", "forgets the residual around attention",
  ("    h = x + _attention(", "    h = _attention("))
B("qkv_not_transposed", "wrong", "x @ W instead of x @ W.T for the (square) query, key and value matrices",
  ("    q = _linear(x, attn.q_proj)", "    q = (x @ attn.q_proj.weight + (0 if attn.q_proj.bias is None else attn.q_proj.bias))"),
  ("    k = _linear(x, attn.k_proj)", "    k = (x @ attn.k_proj.weight + (0 if attn.k_proj.bias is None else attn.k_proj.bias))"),
  ("    v = _linear(x, attn.v_proj)", "    v = (x @ attn.v_proj.weight + (0 if attn.v_proj.bias is None else attn.v_proj.bias))"))
B("bias_none_crash", "wrong", "assumes every nn.Linear has a bias: TypeError when bias is None (the text says it may be)",
  ('''    y = x @ lin.weight.T
    return y if lin.bias is None else y + lin.bias''', '''    return x @ lin.weight.T + lin.bias'''))
B("norm_bias_none_crash", "wrong", "assumes the LayerNorm has a bias",
  ("    return y if norm.bias is None else y + norm.bias", "    return y + norm.bias"))
B("calls_block", "wrong", "calls the block itself: forbidden",
  ("    return _forward(block, x)", "    return block(x, is_causal=True)"))
B("calls_attn_module", "wrong", "calls block.attn: forbidden",
  ("_attention(_layer_norm(x, block.norm1), block.attn)", "block.attn(_layer_norm(x, block.norm1), is_causal=True)[0]"))
B("calls_norm_modules", "wrong", "calls block.norm1 and block.norm2: forbidden",
  ("_layer_norm(x, block.norm1)", "block.norm1(x)"), ("_layer_norm(h, block.norm2)", "block.norm2(h)"))
B("calls_ff_module", "wrong", "calls block.ff: forbidden",
  ("_ffn(_layer_norm(h, block.norm2), block.ff)", "block.ff(_layer_norm(h, block.norm2))"))
B("torch_sdpa", "wrong", "debatable: F.scaled_dot_product_attention for the attention step ('your own causal multi-head attention')",
  ('''    s = q @ k.transpose(-2, -1) / math.sqrt(dh)
    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    s = s.masked_fill(~mask, float("-inf"))
    w = torch.softmax(s, dim=-1)
    o = (w @ v).transpose(1, 2).reshape(B, T, C)''',
   '''    o = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)'''))
B("F_layer_norm", "wrong", "debatable: F.layer_norm ('your own LayerNorm')",
  ('''    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + norm.eps) * norm.weight
    return y if norm.bias is None else y + norm.bias''',
   '''    return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)'''))
B("returns_float32", "wrong", "returns float32 whatever x's dtype",
  ("    return _forward(block, x)", "    return _forward(block, x).float()"))
B("softmax_over_queries", "wrong", "softmax over dim=-2",
  ("w = torch.softmax(s, dim=-1)", "w = torch.softmax(s, dim=-2)"))
B("extra_final_norm", "wrong", "adds a final LayerNorm (that belongs to the stack, not the block)",
  ("    return _forward(block, x)", "    return _layer_norm(_forward(block, x), block.norm2)"))
B("no_activation", "wrong", "forgets the activation",
  ("_linear(_act(_linear(x, ff.linear1), ff.activation), ff.linear2)", "_linear(_linear(x, ff.linear1), ff.linear2)"))
B("activation_after_linear2", "wrong", "applies the activation after the second layer too",
  ("    return _linear(_act(_linear(x, ff.linear1), ff.activation), ff.linear2)",
   "    return _act(_linear(_act(_linear(x, ff.linear1), ff.activation), ff.linear2), ff.activation)"))
B("no_grad", "wrong", "debatable: computed under torch.no_grad(): the block's output is meant to be trained",
  ("    return _forward(block, x)", "    with torch.no_grad():\n        return _forward(block, x)"))
B("params_detached", "wrong", "debatable: detaches every weight: no gradient reaches the block's parameters",
  ("    y = x @ lin.weight.T\n    return y if lin.bias is None else y + lin.bias",
   "    y = x @ lin.weight.detach().T\n    return y if lin.bias is None else y + lin.bias.detach()"))
B("sets_train_mode", "wrong", "calls block.train(): leaves the caller's block in training mode",
  ("    return _forward(block, x)", "    block.train()\n    return _forward(block, x)"))
B("mutates_x", "wrong", "h = x; h += ...: the residual sum is written into the caller's x",
  ("    h = x + _attention(_layer_norm(x, block.norm1), block.attn)",
   "    a = _attention(_layer_norm(x, block.norm1), block.attn)\n    h = x\n    h += a"))
B("cache_by_block_id", "wrong", "caches the output per (block id, shape): stale after the weights or x change",
  ("    return _forward(block, x)",
   "    global _CACHE\n    try:\n        _CACHE\n    except NameError:\n        _CACHE = {}\n    key = (id(block), tuple(x.shape), x.dtype)\n    if key not in _CACHE:\n        _CACHE[key] = _forward(block, x)\n    return _CACHE[key]"))
B("mask_size_from_batch", "wrong", "builds the causal mask with x.shape[0] (B) instead of T",
  ("    mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()",
   "    mask = torch.ones(B, B, dtype=torch.bool, device=x.device).tril()"))
B("norm1_eps_for_both", "wrong", "uses norm1's eps in both LayerNorms",
  ("    return h + _ffn(_layer_norm(h, block.norm2), block.ff)",
   "    n2 = type('N', (), dict(weight=block.norm2.weight, bias=block.norm2.bias, eps=block.norm1.eps))\n    return h + _ffn(_layer_norm(h, n2), block.ff)"))
B("ignores_linear1_bias", "wrong", "drops the first feed-forward layer's bias",
  ("    return _linear(_act(_linear(x, ff.linear1), ff.activation), ff.linear2)",
   "    return _linear(_act(x @ ff.linear1.weight.T, ff.activation), ff.linear2)"))
B("right_d_head_attr", "right", "reads the head width from block.attn.d_head (a public attribute) instead of computing C // h",
  ("    dh = C // h\n", "    dh = attn.d_head\n"))
B("grad_mode_left_off", "wrong", "computes right, then torch.set_grad_enabled(False): the caller's grad mode is left off",
  ("    return _forward(block, x)", "    y = _forward(block, x)\n    torch.set_grad_enabled(False)\n    return y"))
B("params_frozen", "wrong", "sets requires_grad=False on every parameter of the caller's block",
  ("    return _forward(block, x)", "    for p in block.parameters():\n        p.requires_grad_(False)\n    return _forward(block, x)"))
B("consumes_global_rng", "wrong", "right values, but draws from torch's global random generator",
  ("    return _forward(block, x)", "    _ = torch.rand(1)\n    return _forward(block, x)"))
B("right_minus_1e9", "right", "masks with -1e9 instead of -inf (exact zero weights after the softmax in float32 and float64)",
  ('s.masked_fill(~mask, float("-inf"))', 's.masked_fill(~mask, -1e9)'))

# ---------------------------------------------------------------- 6.2
def X(name, expect, why, body, pre=""):
    C("6.2", "crossover", "my_crossover", name, expect, why,
      "import math\n" + pre + "\ndef my_crossover(d, d_ff):\n"
      "    # 4 n^2 d = 8 n d^2 + 4 n d d_ff  ->  n = 2 d + d_ff\n"
      + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n")


X("right_obvious", "right", "obvious: 2 d + d_ff", "return 2 * d + d_ff")
X("right_floor_div", "right", "the FLOP equation divided out with //", "return (8 * d * d + 4 * d * d_ff) // (4 * d)")
X("right_true_div_float", "right", "debatable: the same number as a float ((8 d^2 + 4 d d_ff) / (4 d)); the text asks for 'the length n'",
  "return (8 * d * d + 4 * d * d_ff) / (4 * d)")
X("right_numpy_int", "right", "returns a NumPy int64", "return np.int64(2 * d + d_ff)", pre="import numpy as np\n")
X("right_search", "right", "searches the smallest n where attention's FLOPs reach the dense layers'",
  "n = 1\nwhile 4 * n * n * d < 8 * n * d * d + 4 * n * d * d_ff:\n    n += 1\nreturn n")

X("right_int_cast", "right", "int(...) of the float formula", "return int((8 * d * d + 4 * d * d_ff) / (4 * d))")
X("six_d", "wrong", "6 d: ignores d_ff", "return 6 * d")
X("forgets_factor_2", "wrong", "d + d_ff: projections counted as 4 n d^2", "return d + d_ff")
X("ffn_double", "wrong", "2 d + 2 d_ff: feed-forward counted twice", "return 2 * d + 2 * d_ff")
X("ffn_half", "wrong", "2 d + d_ff / 2: one product for the feed-forward network", "return 2 * d + d_ff / 2")
X("three_projections", "wrong", "1.5 d + d_ff: forgets the output projection", "return 1.5 * d + d_ff")
X("scores_only", "wrong", "attention counted as 2 n^2 d (scores only): 4 d + 2 d_ff", "return 4 * d + 2 * d_ff")
X("not_divided", "wrong", "returns the dense FLOPs per token, 8 d^2 + 4 d d_ff", "return 8 * d * d + 4 * d * d_ff")
X("scaled_six_d", "wrong", "scales 6d by d_ff / 4d: 1.5 d_ff", "return 6 * d * d_ff / (4 * d)")
X("hardcoded_table", "wrong", "games the check: a table of the book's values, 6 d otherwise",
  "return {(768, 3072): 4608, (4096, 11008): 19200}.get((d, d_ff), 6 * d)")
X("ignores_d_ff", "wrong", "overwrites d_ff with 4 d", "d_ff = 4 * d\nreturn 2 * d + d_ff")
X("off_by_one_plus", "wrong", "2 d + d_ff + 1: the first length where attention dominates, not where they are equal",
  "return 2 * d + d_ff + 1")
X("off_by_one_minus", "wrong", "2 d + d_ff - 1", "return 2 * d + d_ff - 1")
X("shift_precedence", "wrong", "d << 1 + d_ff: << binds looser than +", "return d << 1 + d_ff")
X("zero_root", "wrong", "returns the other root of 4 n^2 d = n (8 d^2 + 4 d d_ff): n = 0", "return 0")
X("returns_string", "wrong", "returns the answer as a string", "return str(2 * d + d_ff)")
X("returns_tuple", "wrong", "returns (n, flops)", "n = 2 * d + d_ff\nreturn n, 4 * n * n * d")
X("sqrt_formula", "wrong", "solves 4 n^2 d = 24 n d^2 wrongly as n = sqrt(6) d", "return math.sqrt(6) * d")
X("roles_swapped", "wrong", "swaps the roles of d and d_ff: 2 d_ff + d", "return 2 * d_ff + d")
X("int_rounded_hundreds", "wrong", "rounds to the nearest hundred", "return round(2 * d + d_ff, -2)")
X("not_implemented_non4", "wrong", "raises NotImplementedError unless d_ff == 4 d",
  "if d_ff != 4 * d:\n    raise NotImplementedError('only d_ff = 4 d')\nreturn 6 * d")
X("heads_in_formula", "wrong", "divides by a head count of d / 64", "return (2 * d + d_ff) / max(1, d // 64)")

CASES += junk_cases(MODULE, {
    "6.1": ("block_forward", "my_block_forward", "block, x"),
    "6.2": ("crossover", "my_crossover", "d, d_ff"),
})

# Cases that leave global state changed (grad mode, the block's flags) run last, so that
# they cannot leak into other cases of the same process (the runner does not reset them).
_LAST = {"grad_mode_left_off", "params_frozen"}
CASES = ([c for c in CASES if c["name"] not in _LAST] + [c for c in CASES if c["name"] == "params_frozen"]
         + [c for c in CASES if c["name"] == "grad_mode_left_off"])
