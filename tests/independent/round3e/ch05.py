"""Red-team cases for exercises 5.5 (three back) and 5.6 (rotary q, k)."""
from _junk import junk_cases

MODULE = "companion.exercises.early_extra"
PRELUDE = """
import inspect
import math

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch

from companion import example
from companion.exercises import early_extra as check_more
from companion.exercises import positional as check
from companion.multihead import MultiHeadAttention
from companion.notebook import THREADS
from companion.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    shift_matrix,
    sinusoidal_encoding,
)
"""

def C5(name, expect, why, source):
    return dict(exercise="5.5", checker="three_back", module=MODULE, name=name,
                expect=expect, why=why, source=source.lstrip("\n"), call="my_three_back")

def C6(name, expect, why, source):
    return dict(exercise="5.6", checker="rotary_qk", module=MODULE, name=name,
                expect=expect, why=why, source=source.lstrip("\n"), call="my_rotary_qk")

def blocks(sign_sin, kexpr="-3", freq="10000.0 ** (-2 * j / d)", layout="inter"):
    return f"""
import math, torch
def my_three_back(d):
    A = torch.zeros(d, d, dtype=torch.float64)
    for j in range(d // 2):
        th = ({kexpr}) * {freq}
        a, b = (2 * j, 2 * j + 1) if "{layout}" == "inter" else (j, j + d // 2)
        A[a, a] = math.cos(th); A[b, b] = math.cos(th)
        A[b, a] = {sign_sin}math.sin(th); A[a, b] = -({sign_sin}math.sin(th))
    return A
"""

CASES_55 = [
    C5("right_shift_matrix", "right", "the obvious one, as a baseline", """
def my_three_back(d):
    return shift_matrix(-3, d)
"""),
    C5("right_by_hand_blocks", "right", "block diagonal built by hand, float64", blocks("")),
    C5("right_inverse_of_M3", "right", "inverse of M_3 (a rotation: its transpose)", """
import torch
def my_three_back(d):
    return torch.linalg.inv(shift_matrix(3, d, dtype=torch.float64))
"""),
    C5("right_scaled_positive", "right", "4 * M_-3 (a positive multiple sharpens, argmax unchanged)", """
def my_three_back(d):
    return 4.0 * shift_matrix(-3, d)
"""),
    C5("right_lstsq_from_table", "right", "fitted from a long table: P[:-3] = P[3:] @ A by least squares", """
import torch
def my_three_back(d):
    P = sinusoidal_encoding(400, d, dtype=torch.float64)
    return torch.linalg.lstsq(P[3:], P[:-3]).solution
"""),
    C5("right_M3_transposed", "right", "M_3 transposed (= M_-3)", """
def my_three_back(d):
    return shift_matrix(3, d).T.contiguous()
"""),
    # wrong
    C5("forward_shift", "wrong", "M_+3: looks three ahead (masked away)", """
def my_three_back(d):
    return shift_matrix(3, d)
"""),
    C5("transposed_wrong", "wrong", "M_-3 transposed = M_+3", """
def my_three_back(d):
    return shift_matrix(-3, d).T
"""),
    C5("identity", "wrong", "identity: each query looks at itself", """
import torch
def my_three_back(d):
    return torch.eye(d)
"""),
    C5("off_by_one_2", "wrong", "M_-2", """
def my_three_back(d):
    return shift_matrix(-2, d)
"""),
    C5("off_by_one_4", "wrong", "M_-4", """
def my_three_back(d):
    return shift_matrix(-4, d)
"""),
    C5("negated", "wrong", "-M_-3: the least attention three back", """
def my_three_back(d):
    return -shift_matrix(-3, d)
"""),
    C5("hardcoded_64", "wrong", "ignores d, always width 64", """
def my_three_back(d):
    return shift_matrix(-3, 64)
"""),
    C5("numpy_array", "wrong", "returns a numpy array, not a tensor", """
def my_three_back(d):
    return shift_matrix(-3, d).numpy()
"""),
    C5("zeros_ties", "wrong", "all-zero matrix: every score ties", """
import torch
def my_three_back(d):
    return torch.zeros(d, d)
"""),
    C5("only_for_tested_widths", "wrong", "right only for d = 32 and 64 (the widths the text says the check uses), identity otherwise (debatable: text announces the widths)", """
import torch
def my_three_back(d):
    if d in (32, 64):
        return shift_matrix(-3, d)
    return torch.eye(d)
"""),
    C5("hand_blocks_transposed", "wrong", "blocks written in the column convention: this is M_+3", blocks("-")),
    C5("freq_missing_2", "wrong", "frequencies 10000^(-j/d)", blocks("", freq="10000.0 ** (-j / d)")),
    C5("halves_layout", "wrong", "rotation on pairs (j, j + d/2): the halves layout, not the interleaved table", blocks("", layout="halves")),
    C5("wrong_base_100", "wrong", "shift matrix for base 100, not 10000", """
def my_three_back(d):
    return shift_matrix(-3, d, c=100.0)
"""),
    C5("plus_identity", "wrong", "M_-3 + I: a mixture of self and three back", """
import torch
def my_three_back(d):
    return shift_matrix(-3, d) + torch.eye(d)
"""),
    C5("cached_first_width", "wrong", "caches the first matrix and returns it for every later d", """
_A = []
def my_three_back(d):
    if not _A:
        _A.append(shift_matrix(-3, d))
    return _A[0]
"""),
    C5("M3_squared_wrong", "wrong", "M_-3 @ M_-3 = M_-6", """
def my_three_back(d):
    M = shift_matrix(-3, d)
    return M @ M
"""),
    C5("fast_pairs_only", "right", "keeps only the fastest quarter of the pairs (rest zeroed); first written as wrong, but sum_j cos((i-3-j) w_j) over any subset of pairs is still largest at j = i-3 (verified T up to 2000, d 8..128)", """
def my_three_back(d):
    A = shift_matrix(-3, d).clone()
    A[d // 4:, :] = 0
    A[:, d // 4:] = 0
    return A
"""),
    C5("slow_pairs_only", "right", "keeps only the slowest half of the pairs; first written as wrong, but any subset of pairs still peaks at j = i-3 (verified)", """
def my_three_back(d):
    A = shift_matrix(-3, d).clone()
    A[: d // 2, :] = 0
    A[:, : d // 2] = 0
    return A
"""),
    C5("permuted_columns", "wrong", "columns of M_-3 in halves order", """
import torch
def my_three_back(d):
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    return shift_matrix(-3, d)[:, perm]
"""),
    C5("outer_product", "wrong", "p_{i-3} style outer product from a row of the table: rank one", """
import torch
def my_three_back(d):
    P = sinusoidal_encoding(40, d)
    return torch.outer(P[0], P[3])
"""),
    C5("shape_d_minus_1", "wrong", "(d-1, d-1) off-by-one shape", """
def my_three_back(d):
    return shift_matrix(-3, d)[:-1, :-1]
"""),
    C5("rounded_int_matrix", "right", "round(M_-3) as an int64 tensor; first written as wrong, but its argmax is i-3 for every i tested (T up to 2000, d 8..128); debatable: the text asks for 'that (d, d) tensor'", """
import torch
def my_three_back(d):
    return shift_matrix(-3, d).round().long()
"""),
    C5("ghost_term_beyond_40", "wrong", "M_-3 + M_-40: right on the 40 positions the check builds, wrong from about i = 40 on (text: 'wherever i is'); contrived", """
def my_three_back(d):
    return shift_matrix(-3, d, dtype=torch.float64) + shift_matrix(-40, d, dtype=torch.float64)
"""),
]

GOOD6 = """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset), apply_rotary(k, offset=offset)
"""

HAND6 = """
import torch
def my_rotary_qk(q, k, offset):
    B, h, T, dk = q.shape
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    freq = 10000.0 ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)
    ang = pos[:, None] * freq[None, :]
    cos, sin = ang.cos(), ang.sin()
    def rot(x):
        x1, x2 = x[..., 0::2].double(), x[..., 1::2].double()
        out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
        return out.flatten(-2).to(x.dtype)
    return rot(q), rot(k)
"""

def v6(old, new, src=HAND6):
    assert old in src, old
    return src.replace(old, new)

CASES_56 = [
    C6("right_hand_float64", "right", "by hand, angles and products in float64, stack/flatten", HAND6),
    C6("right_complex", "right", "complex multiplication via view_as_complex", """
import torch
def my_rotary_qk(q, k, offset):
    T, dk = q.shape[-2], q.shape[-1]
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    inv = 1.0 / (10000.0 ** (torch.arange(0, dk, 2, dtype=torch.float64) / dk))
    rot = torch.polar(torch.ones(T, dk // 2, dtype=torch.float64), torch.outer(pos, inv))
    def f(x):
        z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], dk // 2, 2).contiguous())
        return torch.view_as_real(z * rot).reshape(x.shape).to(x.dtype)
    return f(q), f(k)
"""),
    C6("right_per_head_loop", "right", "apply_rotary on each (T, d_k) slice, stacked back", """
import torch
def my_rotary_qk(q, k, offset):
    def f(x):
        return torch.stack([torch.stack([apply_rotary(x[b, i], offset=offset)
                                         for i in range(x.shape[1])]) for b in range(x.shape[0])])
    return f(q), f(k)
"""),
    C6("right_rotation_matrices", "right", "2x2 rotation matrices per (position, pair) via einsum", """
import torch
def my_rotary_qk(q, k, offset):
    T, dk = q.shape[-2:]
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    w = 10000.0 ** (-2 * torch.arange(dk // 2, dtype=torch.float64) / dk)
    a = pos[:, None] * w
    R = torch.stack([torch.stack([a.cos(), -a.sin()], -1), torch.stack([a.sin(), a.cos()], -1)], -2)  # (T, d/2, 2, 2)
    def f(x):
        xp = x.double().reshape(*x.shape[:-1], dk // 2, 2)
        return torch.einsum('tjab,...tjb->...tja', R, xp).reshape(x.shape).to(x.dtype)
    return f(q), f(k)
"""),
    C6("right_flatten_batch_heads", "right", "reshape to (B*h, T, d_k), apply_rotary, reshape back", """
def my_rotary_qk(q, k, offset):
    B, h, T, dk = q.shape
    f = lambda x: apply_rotary(x.reshape(B * h, T, dk), offset=offset).reshape(B, h, T, dk)
    return f(q), f(k)
"""),
    # wrong
    C6("ignores_offset", "wrong", "positions from 0 whatever the offset", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q), apply_rotary(k)
"""),
    C6("only_q", "wrong", "rotates q only, k returned as is", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset), k
"""),
    C6("clockwise", "wrong", "turns by -t w", v6("x1 * cos - x2 * sin, x1 * sin + x2 * cos", "x1 * cos + x2 * sin, -x1 * sin + x2 * cos")),
    C6("model_width_frequencies", "wrong", "frequencies from the model width h * d_k (heads merged before rotating)", """
def my_rotary_qk(q, k, offset):
    B, h, T, dk = q.shape
    def f(x):
        y = x.transpose(1, 2).reshape(B, T, h * dk)
        y = apply_rotary(y, offset=offset)
        return y.reshape(B, T, h, dk).transpose(1, 2)
    return f(q), f(k)
"""),
    C6("halves_layout", "wrong", "pairs (j, j + d_k/2) instead of (2j, 2j+1)", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset, layout="halves"), apply_rotary(k, offset=offset, layout="halves")
"""),
    C6("heads_as_positions", "wrong", "forgets the head axis: rotates by head index (transposed to (B, T, h, d_k))", """
def my_rotary_qk(q, k, offset):
    f = lambda x: apply_rotary(x.transpose(1, 2), offset=offset)
    return f(q), f(k)
"""),
    C6("offset_on_k_only", "wrong", "q from position 0, k from offset", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q), apply_rotary(k, offset=offset)
"""),
    C6("offset_plus_one", "wrong", "positions offset+1 ... offset+T", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset + 1), apply_rotary(k, offset=offset + 1)
"""),
    C6("inplace_q", "wrong", "writes the rotation into q and k in place", """
import torch
def my_rotary_qk(q, k, offset):
    q.copy_(apply_rotary(q, offset=offset))
    k.copy_(apply_rotary(k, offset=offset))
    return q, k
"""),
    C6("freq_missing_2", "wrong", "angle t / 10000^(j/d_k)", v6("-torch.arange(0, dk, 2, dtype=torch.float64) / dk", "-torch.arange(0, dk // 2, dtype=torch.float64) / dk")),
    C6("sin_cos_swapped", "wrong", "sin and cos swapped in the rotation", v6("cos, sin = ang.cos(), ang.sin()", "sin, cos = ang.cos(), ang.sin()")),
    C6("cache_by_T", "wrong", "caches cos/sin by (T, d_k): a later call with another offset reuses the old angles", """
import torch
_tables = {}
def my_rotary_qk(q, k, offset):
    T, dk = q.shape[-2:]
    if (T, dk) not in _tables:
        pos = torch.arange(offset, offset + T, dtype=torch.float64)
        ang = pos[:, None] * 10000.0 ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)
        _tables[(T, dk)] = (ang.cos(), ang.sin())
    cos, sin = _tables[(T, dk)]
    def rot(x):
        x1, x2 = x[..., 0::2].double(), x[..., 1::2].double()
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2).to(x.dtype)
    return rot(q), rot(k)
"""),
    C6("first_batch_only", "wrong", "rotates q[0] and k[0] and broadcasts them over the batch", """
def my_rotary_qk(q, k, offset):
    return (apply_rotary(q[:1], offset=offset).expand_as(q).clone(),
            apply_rotary(k[:1], offset=offset).expand_as(k).clone())
"""),
    C6("hardcoded_4_heads", "wrong", "reshape(B * 4, ...): assumes 4 heads", """
def my_rotary_qk(q, k, offset):
    B, h, T, dk = q.shape
    f = lambda x: apply_rotary(x.reshape(B * 4, -1, dk), offset=offset).reshape(B, h, T, dk)
    return f(q), f(k)
"""),
    C6("scaled_not_rotation", "wrong", "multiplies by 1.01 after rotating (not a rotation)", """
def my_rotary_qk(q, k, offset):
    return 1.01 * apply_rotary(q, offset=offset), 1.01 * apply_rotary(k, offset=offset)
"""),
    C6("double_angle", "wrong", "rotates twice (angle 2 t w)", """
def my_rotary_qk(q, k, offset):
    r = lambda x: apply_rotary(apply_rotary(x, offset=offset), offset=offset)
    return r(q), r(k)
"""),
    C6("base_500000", "wrong", "Llama 3's base 500000 instead of 10000", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset, base=500000.0), apply_rotary(k, offset=offset, base=500000.0)
"""),
    C6("swapped_outputs", "wrong", "returns (k_rotated, q_rotated)", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(k, offset=offset), apply_rotary(q, offset=offset)
"""),
    C6("squeeze_batch", "wrong", ".squeeze(0): a batch of one loses its batch axis", """
def my_rotary_qk(q, k, offset):
    return apply_rotary(q, offset=offset).squeeze(0), apply_rotary(k, offset=offset).squeeze(0)
"""),
    C6("positions_end_at_offset", "wrong", "positions offset - T + 1 ... offset (offset read as the last position)", """
def my_rotary_qk(q, k, offset):
    T = q.shape[-2]
    s = max(offset - T + 1, 0)
    return apply_rotary(q, offset=s), apply_rotary(k, offset=s)
"""),
    C6("float64_output", "wrong", "returns float64 for float32 inputs (debatable: text does not name the dtype)", v6(".to(x.dtype)", "")),
    C6("float16_inside", "wrong", "computes the rotation in float16 and casts back: ~1e-3 errors", """
import torch
def my_rotary_qk(q, k, offset):
    f = lambda x: apply_rotary(x.half(), offset=offset).to(x.dtype)
    return f(q), f(k)
"""),
    C6("angles_float32_large_offset", "wrong", "positions and angles in float32 (debatable: loses digits only at large offsets)", """
import torch
def my_rotary_qk(q, k, offset):
    T, dk = q.shape[-2:]
    pos = torch.arange(offset, offset + T, dtype=torch.float32)
    ang = pos[:, None] * 10000.0 ** (-torch.arange(0, dk, 2, dtype=torch.float32) / dk)
    cos, sin = ang.cos().to(q.dtype), ang.sin().to(q.dtype)
    def rot(x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)
    return rot(q), rot(k)
"""),
    C6("requires_grad_on_inputs", "wrong", "q.requires_grad_() on the caller's tensors", """
def my_rotary_qk(q, k, offset):
    q.requires_grad_(); k.requires_grad_()
    return apply_rotary(q, offset=offset).detach(), apply_rotary(k, offset=offset).detach()
"""),
    C6("positions_mod_16", "wrong", "positions wrap modulo 16 (a fixed table of 16 rows reused): wrong from position 16 on", """
import torch
def my_rotary_qk(q, k, offset):
    T, dk = q.shape[-2:]
    pos = (torch.arange(offset, offset + T) % 16).double()
    ang = pos[:, None] * 10000.0 ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)
    cos, sin = ang.cos(), ang.sin()
    def rot(x):
        x1, x2 = x[..., 0::2].double(), x[..., 1::2].double()
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2).to(x.dtype)
    return rot(q), rot(k)
"""),
    C6("float32_inputs_break", "wrong", "builds the cos/sin tables in float64 and multiplies without casting back: float32 q gives float64 output, float16 q too (debatable)", """
import torch
def my_rotary_qk(q, k, offset):
    T, dk = q.shape[-2:]
    pos = torch.arange(offset, offset + T, dtype=torch.float64)
    ang = pos[:, None] * 10000.0 ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)
    cos, sin = ang.cos(), ang.sin()
    def rot(x):
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)
    return rot(q), rot(k)
"""),
    C6("fixed_table_16", "wrong", "cos/sin precomputed once for a context of 16 positions and sliced: fails (shape error) as soon as offset + T > 16", """
import torch
_CTX = 16
def _tables(dk):
    pos = torch.arange(_CTX, dtype=torch.float64)
    ang = pos[:, None] * 10000.0 ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)
    return ang.cos(), ang.sin()
def my_rotary_qk(q, k, offset):
    T, dk = q.shape[-2:]
    cos, sin = _tables(dk)
    cos, sin = cos[offset:offset + T], sin[offset:offset + T]
    def rot(x):
        x1, x2 = x[..., 0::2].double(), x[..., 1::2].double()
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2).to(x.dtype)
    return rot(q), rot(k)
"""),
    C6("view_requires_contiguous", "wrong", "x.view(B*h, T, d_k): crashes on the non-contiguous q of a real layer (split heads = a transpose); debatable", """
def my_rotary_qk(q, k, offset):
    B, h, T, dk = q.shape
    f = lambda x: apply_rotary(x.view(B * h, T, dk), offset=offset).view(B, h, T, dk)
    return f(q), f(k)
"""),
]

CASES = CASES_55 + CASES_56
CASES += junk_cases(MODULE, {"5.5": ("three_back", "my_three_back", "d"),
                             "5.6": ("rotary_qk", "my_rotary_qk", "q, k, offset")})
