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
def ffn(name, expect, why, source):
    case("6.1", "feed_forward", name, expect, why, source, "my_feed_forward")


ffn("gelu", "wrong", "GELU instead of the ReLU the text asks for", """
import torch.nn.functional as F
def my_feed_forward(x, W1, b1, W2, b2):
    return F.gelu(x @ W1 + b1) @ W2 + b2
""")
ffn("relu_on_output", "wrong", "a second ReLU on the output", """
def my_feed_forward(x, W1, b1, W2, b2):
    return torch.relu(torch.relu(x @ W1 + b1) @ W2 + b2)
""")
ffn("forgot_b2", "wrong", "no output bias", """
def my_feed_forward(x, W1, b1, W2, b2):
    return torch.relu(x @ W1 + b1) @ W2
""")
ffn("forgot_b1", "wrong", "no hidden bias", """
def my_feed_forward(x, W1, b1, W2, b2):
    return torch.relu(x @ W1) @ W2 + b2
""")
ffn("relu_before_bias", "wrong", "ReLU before adding b1", """
def my_feed_forward(x, W1, b1, W2, b2):
    return (torch.relu(x @ W1) + b1) @ W2 + b2
""")
ffn("no_activation", "wrong", "no nonlinearity at all", """
def my_feed_forward(x, W1, b1, W2, b2):
    return (x @ W1 + b1) @ W2 + b2
""")
ffn("residual_added", "wrong", "adds the residual x, which belongs to the block", """
def my_feed_forward(x, W1, b1, W2, b2):
    return x + torch.relu(x @ W1 + b1) @ W2 + b2
""")
ffn("leaky_relu", "wrong", "leaky ReLU (slope 0.01) instead of ReLU", """
import torch.nn.functional as F
def my_feed_forward(x, W1, b1, W2, b2):
    return F.leaky_relu(x @ W1 + b1) @ W2 + b2
""")
ffn("relu6", "wrong", "ReLU6 caps the hidden units at 6", """
import torch.nn.functional as F
def my_feed_forward(x, W1, b1, W2, b2):
    return F.relu6(x @ W1 + b1) @ W2 + b2
""")
ffn("sigmoid", "wrong", "sigmoid instead of ReLU", """
def my_feed_forward(x, W1, b1, W2, b2):
    return torch.sigmoid(x @ W1 + b1) @ W2 + b2
""")
ffn("transposed_weights", "wrong", "x @ W1.T: nn.Linear's convention on row-convention weights", """
def my_feed_forward(x, W1, b1, W2, b2):
    return torch.relu(x @ W1.T.T.T + b1) @ W2.T.T.T + b2
""")
ffn("companion_FeedForward", "wrong", "the companion's FeedForward: imports the answer", """
from companion.block import FeedForward
def my_feed_forward(x, W1, b1, W2, b2):
    m = FeedForward(W1.shape[0], W1.shape[1]).to(x.dtype)
    with torch.no_grad():
        m.linear1.weight.copy_(W1.T)
        m.linear1.bias.copy_(b1)
        m.linear2.weight.copy_(W2.T)
        m.linear2.bias.copy_(b2)
    return m(x.unsqueeze(0))[0].detach()
""")
ffn("right_clamp", "right", "clamp(min=0) as the ReLU", """
def my_feed_forward(x, W1, b1, W2, b2):
    h = (x @ W1 + b1).clamp(min=0)
    return h @ W2 + b2
""")
ffn("right_addmm_relu_", "right", "addmm and an in-place ReLU on the hidden layer", """
def my_feed_forward(x, W1, b1, W2, b2):
    h = torch.addmm(b1, x, W1)
    h.relu_()
    return torch.addmm(b2, h, W2)
""")
ffn("right_maximum", "right", "torch.maximum with zero", """
def my_feed_forward(x, W1, b1, W2, b2):
    pre = torch.matmul(x, W1) + b1
    return torch.maximum(pre, torch.zeros_like(pre)) @ W2 + b2
""")


# ---------------------------------------------------------------- 6.2 ----
def pre(name, expect, why, source):
    case("6.2", "pre_norm_block", name, expect, why, source,
         "my_pre_norm_block")


pre("post_norm", "wrong", "post-norm: normalizes after each residual", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = norm1(x + attn(x))
    return norm2(h + ff(h))
""")
pre("norm2_on_x", "wrong", "the feed-forward reads norm2(x), not norm2(h)", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(norm1(x))
    return h + ff(norm2(x))
""")
pre("no_ff_residual", "wrong", "forgot the second residual", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(norm1(x))
    return ff(norm2(h))
""")
pre("residual_from_normalized", "wrong", "residual adds the normalized input", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    n = norm1(x)
    h = n + attn(n)
    m = norm2(h)
    return m + ff(m)
""")
pre("norms_swapped", "wrong", "norm2 before attention, norm1 before feed-forward", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(norm2(x))
    return h + ff(norm1(h))
""")
pre("parallel", "wrong", "parallel sublayers (GPT-J style), not sequential", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    return x + attn(norm1(x)) + ff(norm2(x))
""")
pre("ff_first", "wrong", "feed-forward before attention", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + ff(norm2(x))
    return h + attn(norm1(h))
""")
pre("final_norm", "wrong", "normalizes the block's output too", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(norm1(x))
    return norm2(h + ff(norm2(h)))
""")
pre("no_residuals", "wrong", "no residual connections", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    return ff(norm2(attn(norm1(x))))
""")
pre("attn_unnormalized", "wrong", "attention on x itself", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(x)
    return h + ff(norm2(h))
""")
pre("in_place_residual", "wrong", "x += ...: mutates the caller's x", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    x += attn(norm1(x))
    x += ff(norm2(x))
    return x
""")
pre("returns_tuple", "wrong", "returns (output, hidden)", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(norm1(x))
    return h + ff(norm2(h)), h
""")
pre("right_named_steps", "right", "named intermediate steps", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    a = attn(norm1(x))
    h = torch.add(x, a)
    f = ff(norm2(h))
    return torch.add(h, f)
""")
pre("right_loop_over_sublayers", "right", "a loop over (norm, sublayer) pairs", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    for norm, sub in ((norm1, attn), (norm2, ff)):
        x = x + sub(norm(x))
    return x
""")
pre("right_helper", "right", "a residual helper function", """
def _residual(x, norm, sub):
    return x + sub(norm(x))
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    return _residual(_residual(x, norm1, attn), norm2, ff)
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
    "6.1": ("feed_forward", "my_feed_forward", "x, W1, b1, W2, b2"),
    "6.2": ("pre_norm_block", "my_pre_norm_block", "x, attn, ff, norm1, norm2"),
    "6.3": ("block_params", "my_block_params", "d_model, n_heads, d_ff"),
})


# ------------------------------------------------------------- batch 2 ---
ffn("numpy_roundtrip", "wrong", "NumPy computation wrapped back: float64, no gradient", """
import numpy as np
def my_feed_forward(x, W1, b1, W2, b2):
    h = np.maximum(x.detach().numpy() @ W1.detach().numpy() + b1.detach().numpy(), 0)
    return torch.from_numpy(h @ W2.detach().numpy() + b2.detach().numpy())
""")
pre("norm1_called_twice", "right", "calls norm1(x) twice (redundant but correct)", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    h = x + attn(norm1(x))
    assert h.shape == norm1(x).shape
    return h + ff(norm2(h))
""")
pre("attn_gets_x_and_norm", "wrong", "attention output added to norm1(x) plus x (double residual)", """
def my_pre_norm_block(x, attn, ff, norm1, norm2):
    n = norm1(x)
    h = x + n + attn(n)
    return h + ff(norm2(h))
""")
bp("gpt2_total_not_block", "wrong", "returns the whole GPT-2 small total, not one block", """
def my_block_params(d_model, n_heads, d_ff):
    d = d_model
    block = 4 * d * d + 2 * d * d_ff + 9 * d + d_ff
    return 12 * block + 50257 * d + 1024 * d + 2 * d
""")
