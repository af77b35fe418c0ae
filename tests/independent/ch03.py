"""Independent red-team cases for chapter 3 (multi-head attention).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.multihead"
PRELUDE = """
import math
import time
import torch
import torch.nn as nn
from companion import attention
from companion.exercises import multihead as check
from companion.multihead import MultiHeadAttention
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 3.1 ----
def cnt(name, expect, why, source):
    case("3.1", "parameter_count", name, expect, why, source, "my_count")


cnt("per_head_matrices", "wrong", "counts a full (d, d) matrix per head", """
def my_count(d_model, n_heads, bias):
    n = 4 * d_model * d_model * n_heads
    return n + (4 * d_model if bias else 0)
""")
cnt("no_output_projection", "wrong", "forgets W_O", """
def my_count(d_model, n_heads, bias):
    return 3 * d_model * d_model + (3 * d_model if bias else 0)
""")
cnt("bias_always", "wrong", "adds the biases even when bias is False", """
def my_count(d_model, n_heads, bias):
    return 4 * d_model * d_model + 4 * d_model
""")
cnt("bias_never", "wrong", "never adds the biases", """
def my_count(d_model, n_heads, bias):
    return 4 * d_model * d_model
""")
cnt("bias_per_head", "wrong", "one bias number per head", """
def my_count(d_model, n_heads, bias):
    return 4 * d_model * d_model + (4 * n_heads if bias else 0)
""")
cnt("one_head_size", "wrong", "4 d d_head: the size of one head only", """
def my_count(d_model, n_heads, bias):
    d_head = d_model // n_heads
    return 4 * d_model * d_head + (4 * d_head if bias else 0)
""")
cnt("float_result", "wrong", "true division makes the count a float", """
def my_count(d_model, n_heads, bias):
    d_head = d_model / n_heads
    return 4 * n_heads * d_model * d_head + (4 * d_model if bias else 0)
""")
cnt("lookup_table", "wrong", "hard-codes the chapter's configurations", """
def my_count(d_model, n_heads, bias):
    table = {(512, 8, True): 1050624, (512, 8, False): 1048576,
             (768, 12, True): 2362368, (768, 12, False): 2359296}
    return table.get((d_model, n_heads, bias), 0)
""")
cnt("companion_module", "wrong", "counts the companion's module: imports the answer", """
from companion.multihead import MultiHeadAttention
def my_count(d_model, n_heads, bias):
    m = MultiHeadAttention(d_model, n_heads, bias=bias)
    return sum(p.numel() for p in m.parameters())
""")
cnt("returns_tuple", "wrong", "returns (weights, biases) separately", """
def my_count(d_model, n_heads, bias):
    return 4 * d_model * d_model, (4 * d_model if bias else 0)
""")
cnt("bias_d_squared", "wrong", "counts a (d, d) bias", """
def my_count(d_model, n_heads, bias):
    return 4 * d_model * d_model * (2 if bias else 1)
""")
cnt("string_bias", "wrong", "treats bias as a string flag", """
def my_count(d_model, n_heads, bias):
    extra = 4 * d_model if bias == "True" else 0
    return 4 * d_model * d_model + extra
""")
cnt("right_bool_arith", "right", "bool arithmetic", """
def my_count(d_model, n_heads, bias):
    return 4 * (d_model * d_model + d_model * bool(bias))
""")
cnt("right_per_head_blocks", "right", "sums the per-head blocks", """
def my_count(d_model, n_heads, bias):
    d_head = d_model // n_heads
    per_head = 3 * (d_model * d_head + (d_head if bias else 0))
    return n_heads * per_head + d_model * d_model + (d_model if bias else 0)
""")
cnt("right_torch_module", "right", "counts PyTorch's nn.MultiheadAttention", """
import torch.nn as nn
def my_count(d_model, n_heads, bias):
    m = nn.MultiheadAttention(d_model, n_heads, bias=bias)
    return int(sum(p.numel() for p in m.parameters()))
""")


# ---------------------------------------------------------------- 3.2 ----
def split(name, expect, why, source):
    case("3.2", "split_heads", name, expect, why, source, "my_split_heads")


split("view_no_transpose", "wrong", "views (B, T, d) straight as (B, h, T, d_head)", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, n_heads, T, d // n_heads)
""")
split("strided_heads", "wrong", "head r gets features r, r + h, ...", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.reshape(B, T, d // n_heads, n_heads).permute(0, 3, 1, 2)
""")
split("forgot_transpose", "wrong", "returns (B, T, h, d_head)", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads)
""")
split("inclusive_slice", "wrong", "slices r*dh : (r+1)*dh - 1, reading the text's inclusive end as exclusive", """
def my_split_heads(x, n_heads):
    dh = x.shape[-1] // n_heads
    return torch.stack([x[..., r * dh:(r + 1) * dh - 1]
                        for r in range(n_heads)], dim=1)
""")
split("last_two_swapped", "wrong", "returns (B, h, d_head, T)", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).permute(0, 2, 3, 1)
""")
split("heads_last", "wrong", "returns (B, T, d_head, h)", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(2, 3)
""")
split("numpy", "wrong", "a NumPy array", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.numpy().reshape(B, T, n_heads, d // n_heads).transpose(0, 2, 1, 3)
""")
split("right_transpose_reshape_transpose", "right",
      "transpose T and d, reshape, transpose back: a correct detour", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.transpose(1, 2).reshape(B, n_heads, d // n_heads, T).transpose(2, 3)
""")
split("d_head_as_heads", "wrong", "swaps n_heads and d_head", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, d // n_heads, n_heads).transpose(1, 2)
""")
split("time_split", "wrong", "splits the sequence into heads instead of features", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return torch.stack(x.chunk(n_heads, dim=1), dim=1)
""")
split("tuple_of_heads", "wrong", "returns a tuple of n_heads tensors", """
def my_split_heads(x, n_heads):
    return x.chunk(n_heads, dim=-1)
""")
split("right_view_transpose", "right", "view then transpose(1, 2)", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.view(B, T, n_heads, d // n_heads).transpose(1, 2)
""")
split("right_chunk_stack", "right", "chunk along features, stack on dim 1", """
def my_split_heads(x, n_heads):
    return torch.stack(torch.chunk(x, n_heads, dim=-1), dim=1)
""")
split("right_unflatten_permute", "right", "unflatten then permute, contiguous", """
def my_split_heads(x, n_heads):
    y = x.unflatten(-1, (n_heads, -1))
    return y.permute(0, 2, 1, 3).contiguous()
""")


# ---------------------------------------------------------------- 3.3 ----
def mh(name, expect, why, source):
    case("3.3", "multi_head", name, expect, why, source,
         "my_multi_head")


_SPLIT = """
def _split(t, h):
    B, T, d = t.shape
    return t.view(B, T, h, d // h).transpose(1, 2)
def _merge(t):
    B, h, T, dh = t.shape
    return t.transpose(1, 2).reshape(B, T, h * dh)
"""

mh("scale_sqrt_d", "wrong", "scales by sqrt(d_model), not sqrt(d_head)", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), -1)
    return _merge(w @ v) @ W_O
""")
mh("column_convention", "wrong", "x @ W.T: the column convention", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W.T, n_heads) for W in (W_Q, W_K, W_V))
    dh = q.shape[-1]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), -1)
    return _merge(w @ v) @ W_O.T
""")
mh("no_output_projection", "wrong", "forgets W_O", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    dh = q.shape[-1]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), -1)
    return _merge(w @ v)
""")
mh("merge_without_transpose", "wrong", "reshapes (B, h, T, dh) straight to (B, T, d)",
   _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, d = x.shape
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    dh = q.shape[-1]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), -1)
    return (w @ v).reshape(B, T, d) @ W_O
""")
mh("strided_split", "wrong", "splits heads with a stride", """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, d = x.shape
    def split(t):
        return t.reshape(B, T, d // n_heads, n_heads).permute(0, 3, 1, 2)
    q, k, v = split(x @ W_Q), split(x @ W_K), split(x @ W_V)
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // n_heads), -1)
    return (w @ v).transpose(1, 2).reshape(B, T, d) @ W_O
""")
mh("softmax_over_queries", "wrong", "softmax over dim -2", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    dh = q.shape[-1]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), -2)
    return _merge(w @ v) @ W_O
""")
mh("causal_mask_added", "wrong", "adds a causal mask the text excludes", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    T, dh = q.shape[-2], q.shape[-1]
    s = q @ k.transpose(-2, -1) / math.sqrt(dh)
    s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    return _merge(torch.softmax(s, -1) @ v) @ W_O
""")
mh("single_head", "wrong", "ignores n_heads: one head of width d", """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-1]), -1)
    return (w @ v) @ W_O
""")
mh("loop_over_heads", "wrong", "a Python loop over heads; the text asks for all heads at once",
   """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    d = x.shape[-1]
    dh = d // n_heads
    q, k, v = x @ W_Q, x @ W_K, x @ W_V
    outs = []
    for r in range(n_heads):
        sl = slice(r * dh, (r + 1) * dh)
        w = torch.softmax(q[..., sl] @ k[..., sl].transpose(-2, -1) / math.sqrt(dh), -1)
        outs.append(w @ v[..., sl])
    return torch.cat(outs, dim=-1) @ W_O
""")
mh("returns_tuple", "wrong", "returns (out, weights)", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    return _merge(w @ v) @ W_O, w
""")
mh("companion_module", "wrong", "loads the weights into the companion's module", """
from companion.multihead import MultiHeadAttention
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    m = MultiHeadAttention(x.shape[-1], n_heads, bias=False)
    with torch.no_grad():
        m.q_proj.weight.copy_(W_Q.T)
        m.k_proj.weight.copy_(W_K.T)
        m.v_proj.weight.copy_(W_V.T)
        m.out_proj.weight.copy_(W_O.T)
    return m(x)[0]
""")
mh("W_O_before_merge", "wrong", "applies W_O's first d_head rows to every head", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    dh = q.shape[-1]
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dh), -1)
    return ((w @ v) @ W_O[:dh]).sum(dim=1)
""")
mh("right_einsum", "right", "einsum for every step", """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    B, T, d = x.shape
    dh = d // n_heads
    q = (x @ W_Q).view(B, T, n_heads, dh)
    k = (x @ W_K).view(B, T, n_heads, dh)
    v = (x @ W_V).view(B, T, n_heads, dh)
    s = torch.einsum("bqhe,bkhe->bhqk", q, k) / dh ** 0.5
    o = torch.einsum("bhqk,bkhe->bqhe", s.softmax(-1), v)
    return o.reshape(B, T, d) @ W_O
""")
mh("right_sdpa_per_head", "right", "PyTorch's attention on the split heads", _SPLIT + """
import torch.nn.functional as F
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    return _merge(F.scaled_dot_product_attention(q, k, v)) @ W_O
""")
mh("right_chunk", "right", "chunk/stack split and cat merge", """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    def split(t):
        return torch.stack(t.chunk(n_heads, dim=-1), dim=1)
    q, k, v = split(x @ W_Q), split(x @ W_K), split(x @ W_V)
    scale = 1 / math.sqrt(q.size(-1))
    o = torch.softmax(q @ k.mT * scale, dim=-1) @ v
    return torch.cat(o.unbind(dim=1), dim=-1) @ W_O
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "3.1": ("parameter_count", "my_count", "d_model, n_heads, bias"),
    "3.2": ("split_heads", "my_split_heads", "x, n_heads"),
    "3.3": ("multi_head", "my_multi_head", "x, W_Q, W_K, W_V, W_O, n_heads"),
})


# ------------------------------------------------------------- batch 2 ---
cnt("bias_as_int_flag_times_heads", "wrong", "multiplies the bias count by n_heads", """
def my_count(d_model, n_heads, bias):
    return 4 * d_model * d_model + 4 * d_model * n_heads * int(bias)
""")
split("reshape_no_contiguous_wrong_order", "wrong", "reshape(B, h, T, dh) after transpose(1, 2) of x", """
def my_split_heads(x, n_heads):
    B, T, d = x.shape
    return x.transpose(1, 2).reshape(B, n_heads, T, d // n_heads)
""")
mh("sdpa_scale_d", "wrong", "torch attention on split heads, with scale 1/sqrt(d_model)", _SPLIT + """
import torch.nn.functional as F
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    o = F.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(x.shape[-1]))
    return _merge(o) @ W_O
""")
mh("W_O_transposed", "wrong", "merged @ W_O.T", _SPLIT + """
def my_multi_head(x, W_Q, W_K, W_V, W_O, n_heads):
    q, k, v = (_split(x @ W, n_heads) for W in (W_Q, W_K, W_V))
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), -1)
    return _merge(w @ v) @ W_O.T
""")


# ------------------------------------------------------------- retired ---
# Exercises 3.1 and 3.2 were replaced (issue 28): 3.1 now counts heads of any width,
# my_count(d_model, n_heads, d_head, bias), and 3.2 splits a fused projection,
# my_split_qkv(qkv, n_heads). The cases above were written for the old signatures and no longer
# apply; the new exercises' outside cases are in round3f/ch03.py. The junk battery runs on the new ones.
CASES = [c for c in CASES if c["exercise"] not in ("3.1", "3.2")]
CASES += junk_cases(MODULE, {
    "3.1": ("parameter_count", "my_count", "d_model, n_heads, d_head, bias"),
    "3.2": ("split_qkv", "my_split_qkv", "qkv, n_heads"),
})
