"""Independent red-team cases for chapter 6 (the transformer block).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.block"
PRELUDE = """
import inspect
import math
import statistics
import time
import torch
from torch import nn
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
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 6.1 ----
# (6.1 and 6.2 were replaced in issue 28: the block from its parameters; the crossover length.)
def fwd(name, expect, why, source):
    CASES.append(dict(exercise="6.1", checker="block_forward", module=MODULE, name=name, expect=expect, why=why,
                      source=textwrap.dedent(_FWD_HELPERS + source), call="my_block_forward"))


_FWD_HELPERS = """
import math
import torch
def _ln(z, n, unbiased=False):
    c = z - z.mean(-1, keepdim=True)
    v = z.var(-1, keepdim=True, unbiased=unbiased)
    out = c / torch.sqrt(v + n.eps) * n.weight
    return out if n.bias is None else out + n.bias
def _lin(z, l):
    return z @ l.weight.T if l.bias is None else z @ l.weight.T + l.bias
def _attn(z, a, causal=True, scale=True):
    B, T, d = z.shape
    h = a.n_heads
    q, k, v = (_lin(z, l).view(B, T, h, d // h).transpose(1, 2) for l in (a.q_proj, a.k_proj, a.v_proj))
    s = q @ k.transpose(-2, -1) / (math.sqrt(d // h) if scale else 1)
    if causal:
        s = s.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    return _lin((s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d), a.out_proj)
def _ff(z, f, act=None):
    u = _lin(z, f.linear1)
    act = act or f.activation
    u = torch.relu(u) if act == "relu" else torch.nn.functional.gelu(u, approximate="tanh" if act == "gelu_tanh" else "none")
    return _lin(u, f.linear2)
"""

fwd("helpers", "right", "written with small helpers", """
def my_block_forward(block, x):
    h = x + _attn(_ln(x, block.norm1), block.attn)
    return h + _ff(_ln(h, block.norm2), block.ff)
""")
fwd("no_mask", "wrong", "forgets the causal mask", """
def my_block_forward(block, x):
    h = x + _attn(_ln(x, block.norm1), block.attn, causal=False)
    return h + _ff(_ln(h, block.norm2), block.ff)
""")
fwd("post_norm", "wrong", "post-norm arrangement", """
def my_block_forward(block, x):
    h = _ln(x + _attn(x, block.attn), block.norm1)
    return _ln(h + _ff(h, block.ff), block.norm2)
""")
fwd("relu_always", "wrong", "ignores block.ff.activation", """
def my_block_forward(block, x):
    h = x + _attn(_ln(x, block.norm1), block.attn)
    return h + _ff(_ln(h, block.norm2), block.ff, act="relu")
""")
fwd("unbiased", "wrong", "unbiased variance in LayerNorm", """
def my_block_forward(block, x):
    h = x + _attn(_ln(x, block.norm1, True), block.attn)
    return h + _ff(_ln(h, block.norm2, True), block.ff)
""")
fwd("calls_sublayers", "wrong", "calls block.attn and block.ff", """
def my_block_forward(block, x):
    h = x + block.attn(block.norm1(x), is_causal=True)[0]
    return h + block.ff(block.norm2(h))
""")
fwd("no_scale", "wrong", "no 1/sqrt(d_head)", """
def my_block_forward(block, x):
    h = x + _attn(_ln(x, block.norm1), block.attn, scale=False)
    return h + _ff(_ln(h, block.norm2), block.ff)
""")
fwd("leaves_train", "wrong", "switches the block to train mode", """
def my_block_forward(block, x):
    block.train()
    h = x + _attn(_ln(x, block.norm1), block.attn)
    return h + _ff(_ln(h, block.norm2), block.ff)
""")


# ---------------------------------------------------------------- 6.2 ----
def cross(name, expect, why, source):
    case("6.2", "crossover", name, expect, why, source, "my_crossover")


cross("formula", "right", "2 d + d_ff", """
def my_crossover(d, d_ff):
    return 2 * d + d_ff
""")
cross("solved_float", "right", "solves 4 n d = 8 d^2 + 4 d d_ff as a float", """
def my_crossover(d, d_ff):
    return (8 * d * d + 4 * d * d_ff) / (4 * d)
""")
cross("six_d", "wrong", "the d_ff = 4 d value for every d_ff", """
def my_crossover(d, d_ff):
    return 6 * d
""")
cross("ffn_twice", "wrong", "counts the feed-forward network twice", """
def my_crossover(d, d_ff):
    return 2 * d + 2 * d_ff
""")
cross("search_off_by_one", "wrong", "a search that stops one past", """
def my_crossover(d, d_ff):
    n = 1
    while 4 * n * n * d <= 8 * n * d * d + 4 * n * d * d_ff:
        n += 1
    return n
""")


# ---------------------------------------------------------------- 6.3 ----
def bp(name, expect, why, source):
    case("6.3", "block_params", name, expect, why, source, "my_block_params")


bp("no_layernorms", "wrong", "forgets both LayerNorms", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d
""")
bp("one_layernorm", "wrong", "counts one LayerNorm", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return 4 * d * d + 4 * d + 2 * d + 2 * d * d_ff + d_ff + d
""")
bp("ln_scale_only", "wrong", "LayerNorms without their shift", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return 4 * d * d + 4 * d + 2 * d + 2 * d * d_ff + d_ff + d
""")
bp("ffn_no_biases", "wrong", "feed-forward without biases", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return 4 * d * d + 4 * d + 4 * d + 2 * d * d_ff
""")
bp("ffn_bias_dff_twice", "wrong", "both feed-forward biases of size d_ff", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return 4 * d * d + 4 * d + 4 * d + 2 * d * d_ff + 2 * d_ff
""")
bp("attn_no_biases", "wrong", "attention without biases", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return 4 * d * d + 4 * d + 2 * d * d_ff + d_ff + d
""")
bp("ignores_d_ff", "wrong", "assumes d_ff = 4 d", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    f = 4 * d
    return 4 * d * d + 4 * d + 4 * d + 2 * d * f + f + d
""")
bp("per_head", "wrong", "a full d x d projection per head", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return n_heads * (4 * d * d + 4 * d) + 4 * d + 2 * d * d_ff + d_ff + d
""")
bp("lookup_gpt2", "wrong", "hard-codes GPT-2 small's block", """
def my_block_params(d_model, n_heads, d_ff):
    if (d_model, n_heads, d_ff) == (768, 12, 3072):
        return 7087872
    return 4 * d_model * d_model + 2 * d_model * d_ff
""")
bp("companion_block_parameters", "wrong", "the companion's block_parameters: imports the answer", """
from companion.block import block_parameters
def my_block_params(d_model, n_heads, d_ff):
    return block_parameters(d_model, d_ff)
""")
bp("float_result", "wrong", "true division makes a float", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    d_head = d / n_heads
    attn = 4 * (d * d_head * n_heads + d)
    return attn + 4 * d + 2 * d * d_ff + d_ff + d
""")
bp("ffn_one_matrix", "wrong", "counts one feed-forward matrix", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    return 4 * d * d + 4 * d + 4 * d + d * d_ff + d_ff + d
""")
bp("right_expanded", "right", "the expanded polynomial", """
def my_block_params(d_model, n_heads, d_ff):
    return 4 * d_model ** 2 + 2 * d_model * d_ff + 9 * d_model + d_ff
""")
bp("right_torch_encoder_layer", "right", "counts nn.TransformerEncoderLayer", """
import torch.nn as nn
def my_block_params(d_model, n_heads, d_ff):
    layer = nn.TransformerEncoderLayer(d_model, n_heads, dim_feedforward=d_ff)
    return int(sum(p.numel() for p in layer.parameters()))
""")
bp("right_parts_dict", "right", "a dict of parts, summed", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    parts = {
        "q k v o weights": 4 * d * d, "q k v o biases": 4 * d,
        "two layer norms": 2 * (d + d),
        "linear1": d * d_ff + d_ff, "linear2": d_ff * d + d,
    }
    return sum(parts.values())
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "6.1": ("block_forward", "my_block_forward", "block, x"),
    "6.2": ("crossover", "my_crossover", "d, d_ff"),
    "6.3": ("block_params", "my_block_params", "d_model, n_heads, d_ff"),
})


# ------------------------------------------------------------- batch 2 ---
bp("gpt2_total_not_block", "wrong", "returns the whole GPT-2 small total, not one block", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    block = 4 * d * d + 2 * d * d_ff + 9 * d + d_ff
    return 12 * block + 50257 * d + 1024 * d + 2 * d
""")


# ------------------------------------------------------------- retired ---
# Exercise 6.3 was replaced (issue 28): my_block_params(d_model, d_ff, cross_attention, bias) counts
# the decoder block and blocks without biases. The cases above were written for the old signature
# (d_model, n_heads, d_ff) and no longer apply; the new exercise's outside cases are in
# round3f/ch06.py. The junk battery runs on the new signature.
CASES = [c for c in CASES if c["exercise"] != "6.3"]
CASES += junk_cases(MODULE, {"6.3": ("block_params", "my_block_params", "d_model, d_ff, cross_attention, bias")})
