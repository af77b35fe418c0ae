"""Independent red-team cases for chapter 5 (positional encoding).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.positional"
PRELUDE = """
import inspect
import math
import torch
from companion.exercises import positional as check
from companion.multihead import MultiHeadAttention
from companion.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    shift_matrix,
    sinusoidal_encoding,
)
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 5.1 ----
def sin(name, expect, why, source):
    case("5.1", "sinusoidal", name, expect, why, source, "my_sinusoidal")


sin("sin_cos_swapped", "wrong", "cos in the even columns, sin in the odd", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = 10000 ** (-torch.arange(0, D, 2, dtype=torch.float32) / D)
    P = torch.zeros(T, D)
    P[:, 0::2] = torch.cos(pos * freq)
    P[:, 1::2] = torch.sin(pos * freq)[:, : D // 2]
    return P
""")
sin("exponent_j_not_2j", "wrong", "10000 ** (j / D) instead of 10000 ** (2j / D)", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    j = torch.arange((D + 1) // 2, dtype=torch.float32)
    freq = 1 / 10000 ** (j / D)
    P = torch.zeros(T, D)
    P[:, 0::2] = torch.sin(pos * freq)
    P[:, 1::2] = torch.cos(pos * freq)[:, : D // 2]
    return P
""")
sin("halves_not_interleaved", "wrong", "sin in the first half, cos in the second", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = 1 / 10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=1)[:, :D]
""")
sin("positions_from_one", "wrong", "positions 1..T", """
def my_sinusoidal(T, D):
    pos = torch.arange(1, T + 1, dtype=torch.float32)[:, None]
    freq = 1 / 10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    P = torch.zeros(T, D)
    P[:, 0::2] = torch.sin(pos * freq)
    P[:, 1::2] = torch.cos(pos * freq)[:, : D // 2]
    return P
""")
sin("base_1000", "wrong", "base 1000 instead of 10000", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = 1 / 1000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    P = torch.zeros(T, D)
    P[:, 0::2] = torch.sin(pos * freq)
    P[:, 1::2] = torch.cos(pos * freq)[:, : D // 2]
    return P
""")
sin("multiplies", "wrong", "i * 10000 ** (2j / D)", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = 10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    P = torch.zeros(T, D)
    P[:, 0::2] = torch.sin(pos * freq)
    P[:, 1::2] = torch.cos(pos * freq)[:, : D // 2]
    return P
""")
sin("column_index_exponent", "wrong", "exponent k / D with k the column: pairs get different frequencies", """
def my_sinusoidal(T, D):
    P = torch.zeros(T, D)
    for i in range(T):
        for k in range(D):
            angle = i / 10000 ** (k / D)
            P[i, k] = math.sin(angle) if k % 2 == 0 else math.cos(angle)
    return P
""")
sin("integer_exponent", "wrong", "2 * j // D is integer division: exponent 0", """
def my_sinusoidal(T, D):
    P = torch.zeros(T, D)
    for i in range(T):
        for j in range((D + 1) // 2):
            angle = i / 10000 ** (2 * j // D)
            P[i, 2 * j] = math.sin(angle)
            if 2 * j + 1 < D:
                P[i, 2 * j + 1] = math.cos(angle)
    return P
""")
sin("odd_D_crash", "wrong", "only works for even D (shape error on odd D)", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    freq = 1 / 10000 ** (torch.arange(0, D, 2, dtype=torch.float32) / D)
    P = torch.zeros(T, D)
    P[:, 0::2] = torch.sin(pos * freq)
    P[:, 1::2] = torch.cos(pos * freq)
    return P
""")
sin("companion_call", "wrong", "calls the companion, which the text excludes", """
from companion.positional import sinusoidal_encoding as se
def my_sinusoidal(T, D):
    return se(T, D)
""")
sin("transposed", "wrong", "returns (D, T)", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[None, :]
    j2 = torch.arange(D)[:, None] // 2 * 2
    ang = pos / 10000 ** (j2 / D)
    return torch.where(torch.arange(D)[:, None] % 2 == 0, torch.sin(ang), torch.cos(ang))
""")
sin("numpy", "wrong", "returns a NumPy array", """
import numpy as np
def my_sinusoidal(T, D):
    pos = np.arange(T)[:, None]
    j2 = (np.arange(D) // 2 * 2)[None, :]
    ang = pos / 10000 ** (j2 / D)
    return np.where(np.arange(D) % 2 == 0, np.sin(ang), np.cos(ang))
""")
sin("degrees", "wrong", "treats the angle as degrees", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float32)[:, None]
    j2 = (torch.arange(D) // 2 * 2).float()
    ang = torch.deg2rad(pos / 10000 ** (j2 / D))
    return torch.where(torch.arange(D) % 2 == 0, torch.sin(ang), torch.cos(ang))
""")
sin("right_loops", "right", "plain loops with math.sin/math.cos", """
def my_sinusoidal(T, D):
    P = torch.zeros(T, D)
    for i in range(T):
        for c in range(D):
            j = c // 2
            angle = i / (10000 ** (2 * j / D))
            P[i, c] = math.sin(angle) if c % 2 == 0 else math.cos(angle)
    return P
""")
sin("right_exp_log", "right", "frequencies as exp(-ln(10000) 2j / D), where()", """
def my_sinusoidal(T, D):
    i = torch.arange(T, dtype=torch.float32).unsqueeze(1)
    col = torch.arange(D)
    freq = torch.exp(-math.log(10000.0) * (col - col % 2).float() / D)
    ang = i * freq
    return torch.where(col % 2 == 0, ang.sin(), ang.cos())
""")
sin("right_stack_interleave", "right", "stack (sin, cos) on a new last dim, flatten", """
def my_sinusoidal(T, D):
    half = (D + 1) // 2
    i = torch.arange(T, dtype=torch.float64)[:, None]
    w = 10000.0 ** (-2 * torch.arange(half, dtype=torch.float64) / D)
    P = torch.stack([torch.sin(i * w), torch.cos(i * w)], dim=-1).reshape(T, 2 * half)
    return P[:, :D].float()
""")


# ---------------------------------------------------------------- 5.2 ----
def shift(name, expect, why, source):
    case("5.2", "shift_block", name, expect, why, source, "my_shift_block")


shift("column_convention", "wrong", "the transpose: the column-vector rotation", """
def my_shift_block(k, w):
    c, s = math.cos(k * w), math.sin(k * w)
    return torch.tensor([[c, s], [-s, c]])
""")
shift("forgot_k", "wrong", "angle w instead of k w", """
def my_shift_block(k, w):
    c, s = math.cos(w), math.sin(w)
    return torch.tensor([[c, -s], [s, c]])
""")
shift("forgot_w", "wrong", "angle k instead of k w", """
def my_shift_block(k, w):
    c, s = math.cos(k), math.sin(k)
    return torch.tensor([[c, -s], [s, c]])
""")
shift("negative_angle", "wrong", "shifts by -k", """
def my_shift_block(k, w):
    c, s = math.cos(-k * w), math.sin(-k * w)
    return torch.tensor([[c, -s], [s, c]])
""")
shift("sin_cos_swapped", "wrong", "sin on the diagonal", """
def my_shift_block(k, w):
    c, s = math.cos(k * w), math.sin(k * w)
    return torch.tensor([[s, -c], [c, s]])
""")
shift("nested_list", "wrong", "returns a Python list", """
def my_shift_block(k, w):
    c, s = math.cos(k * w), math.sin(k * w)
    return [[c, -s], [s, c]]
""")
shift("numpy", "wrong", "returns a NumPy array", """
import numpy as np
def my_shift_block(k, w):
    a = k * w
    return np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
""")
shift("identity_for_k1_only", "wrong", "hard-codes the example k = 1, w = 1", """
def my_shift_block(k, w):
    return torch.tensor([[math.cos(1.0), -math.sin(1.0)], [math.sin(1.0), math.cos(1.0)]])
""")
shift("flattened", "wrong", "returns shape (4,)", """
def my_shift_block(k, w):
    c, s = math.cos(k * w), math.sin(k * w)
    return torch.tensor([c, -s, s, c])
""")
shift("angle_over_k", "wrong", "angle w / k", """
def my_shift_block(k, w):
    a = w / k if k else 0.0
    return torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
""")
shift("both_minus", "wrong", "a reflection, not a rotation", """
def my_shift_block(k, w):
    c, s = math.cos(k * w), math.sin(k * w)
    return torch.tensor([[c, -s], [-s, -c]])
""")
shift("right_stack", "right", "built with torch.stack from tensors", """
def my_shift_block(k, w):
    a = torch.tensor(k * w, dtype=torch.float64)
    return torch.stack([torch.stack([a.cos(), -a.sin()]),
                        torch.stack([a.sin(), a.cos()])])
""")
shift("right_solve", "right", "solves for R from two positions", """
def my_shift_block(k, w):
    i = torch.tensor([0.0, 1.0], dtype=torch.float64)
    A = torch.stack([torch.sin(w * i), torch.cos(w * i)], dim=1)
    B = torch.stack([torch.sin(w * (i + k)), torch.cos(w * (i + k))], dim=1)
    if abs(torch.linalg.det(A)) < 1e-9:
        i = torch.tensor([0.3, 1.7], dtype=torch.float64)
        A = torch.stack([torch.sin(w * i), torch.cos(w * i)], dim=1)
        B = torch.stack([torch.sin(w * (i + k)), torch.cos(w * (i + k))], dim=1)
    return torch.linalg.solve(A, B)
""")
shift("right_matrix_power", "right", "the one-step block raised to the k-th power", """
def my_shift_block(k, w):
    c, s = math.cos(w), math.sin(w)
    one = torch.tensor([[c, -s], [s, c]], dtype=torch.float64)
    return torch.linalg.matrix_power(one, k)
""")


# ---------------------------------------------------------------- 5.3 ----
def terms(name, expect, why, source):
    case("5.3", "score_terms", name, expect, why, source, "my_score_terms")


terms("middle_terms_swapped", "wrong", "position-content before content-position", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    return ((x_i @ W_q) @ (x_j @ W_k), (p_i @ W_q) @ (x_j @ W_k),
            (x_i @ W_q) @ (p_j @ W_k), (p_i @ W_q) @ (p_j @ W_k))
""")
terms("W_q_both_sides", "wrong", "uses W_q for the keys too", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    return ((x_i @ W_q) @ (x_j @ W_q), (x_i @ W_q) @ (p_j @ W_q),
            (p_i @ W_q) @ (x_j @ W_q), (p_i @ W_q) @ (p_j @ W_q))
""")
terms("sum_only", "wrong", "returns the total q . k, not the four terms", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    return ((x_i + p_i) @ W_q) @ ((x_j + p_j) @ W_k)
""")
terms("stacked_tensor", "wrong", "a (4,) tensor instead of a tuple", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    qs = torch.stack([x_i @ W_q, p_i @ W_q])
    ks = torch.stack([x_j @ W_k, p_j @ W_k])
    return (qs @ ks.T).flatten()
""")
terms("transposed_W", "wrong", "x @ W.T: the wrong convention", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    q = lambda v: W_q.T @ v if False else v @ W_q.T
    k = lambda v: v @ W_k.T
    return (q(x_i) @ k(x_j), q(x_i) @ k(p_j), q(p_i) @ k(x_j), q(p_i) @ k(p_j))
""")
terms("i_j_swapped", "wrong", "queries from j, keys from i", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    return ((x_j @ W_q) @ (x_i @ W_k), (x_j @ W_q) @ (p_i @ W_k),
            (p_j @ W_q) @ (x_i @ W_k), (p_j @ W_q) @ (p_i @ W_k))
""")
terms("scaled", "wrong", "divides every term by sqrt(d_k)", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    s = math.sqrt(W_q.shape[1])
    return ((x_i @ W_q) @ (x_j @ W_k) / s, (x_i @ W_q) @ (p_j @ W_k) / s,
            (p_i @ W_q) @ (x_j @ W_k) / s, (p_i @ W_q) @ (p_j @ W_k) / s)
""")
terms("three_terms", "wrong", "drops the position-position term", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    return ((x_i @ W_q) @ (x_j @ W_k), (x_i @ W_q) @ (p_j @ W_k),
            (p_i @ W_q) @ (x_j @ W_k))
""")
terms("elementwise_vectors", "wrong", "elementwise products: forgot to sum", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    return ((x_i @ W_q) * (x_j @ W_k), (x_i @ W_q) * (p_j @ W_k),
            (p_i @ W_q) * (x_j @ W_k), (p_i @ W_q) * (p_j @ W_k))
""")
terms("positions_unprojected", "wrong", "adds the raw p_i . p_j without the projections", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    return ((x_i @ W_q) @ (x_j @ W_k), (x_i @ W_q) @ (p_j @ W_k),
            (p_i @ W_q) @ (x_j @ W_k), p_i @ p_j)
""")
terms("reversed_order", "wrong", "the four terms in reverse order", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    t = ((x_i @ W_q) @ (x_j @ W_k), (x_i @ W_q) @ (p_j @ W_k),
         (p_i @ W_q) @ (x_j @ W_k), (p_i @ W_q) @ (p_j @ W_k))
    return t[::-1]
""")
terms("right_bilinear", "right", "one bilinear form A = W_q W_k^T", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    A = W_q @ W_k.T
    return (x_i @ A @ x_j, x_i @ A @ p_j, p_i @ A @ x_j, p_i @ A @ p_j)
""")
terms("right_floats", "right", "Python floats via .item()", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    qx, qp = x_i @ W_q, p_i @ W_q
    kx, kp = x_j @ W_k, p_j @ W_k
    return tuple(float(torch.dot(a, b)) for a, b in
                 ((qx, kx), (qx, kp), (qp, kx), (qp, kp)))
""")
terms("right_einsum", "right", "einsum over a 2x2 grid of (query, key) parts", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    Q = torch.stack([x_i, p_i]) @ W_q
    K = torch.stack([x_j, p_j]) @ W_k
    g = torch.einsum("ad,bd->ab", Q, K)
    return (g[0, 0], g[0, 1], g[1, 0], g[1, 1])
""")


# ---------------------------------------------------------------- 5.4 ----
def rot(name, expect, why, source):
    case("5.4", "rotate_pair", name, expect, why, source, "my_rotate_pair")


rot("clockwise", "wrong", "turns clockwise (signs of sin flipped)", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    c, s = math.cos(a), math.sin(a)
    return torch.stack([x[0] * c + x[1] * s, -x[0] * s + x[1] * c])
""")
rot("forgot_position", "wrong", "angle theta, not position * theta", """
def my_rotate_pair(x, position, theta):
    c, s = math.cos(theta), math.sin(theta)
    return torch.stack([x[0] * c - x[1] * s, x[0] * s + x[1] * c])
""")
rot("sequential_update", "wrong", "updates x0 first and uses the new x0 for x1", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    x0, x1 = x[0].item(), x[1].item()
    x0 = x0 * math.cos(a) - x1 * math.sin(a)
    x1 = x0 * math.sin(a) + x1 * math.cos(a)
    return torch.tensor([x0, x1], dtype=x.dtype)
""")
rot("in_place", "wrong", "writes the result into x and returns it", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    c, s = math.cos(a), math.sin(a)
    x0, x1 = x[0].clone(), x[1].clone()
    x[0] = x0 * c - x1 * s
    x[1] = x0 * s + x1 * c
    return x
""")
rot("in_place_sequential", "wrong", "in place and sequential: both bugs at once", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    x[0] = x[0] * math.cos(a) - x[1] * math.sin(a)
    x[1] = x[0] * math.sin(a) + x[1] * math.cos(a)
    return x
""")
rot("returns_tuple", "wrong", "returns a tuple of floats", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    x0, x1 = float(x[0]), float(x[1])
    return (x0 * math.cos(a) - x1 * math.sin(a), x0 * math.sin(a) + x1 * math.cos(a))
""")
rot("position_over_theta", "wrong", "reads theta as a period: angle t / theta", """
def my_rotate_pair(x, position, theta):
    a = position / theta
    c, s = math.cos(a), math.sin(a)
    return torch.stack([x[0] * c - x[1] * s, x[0] * s + x[1] * c])
""")
rot("companion_apply_rotary", "wrong", "companion apply_rotary: ignores theta", """
from companion.positional import apply_rotary
def my_rotate_pair(x, position, theta):
    return apply_rotary(x.view(1, 2), offset=position).view(2)
""")
rot("swapped_components", "wrong", "returns (x1', x0')", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    c, s = math.cos(a), math.sin(a)
    return torch.stack([x[0] * s + x[1] * c, x[0] * c - x[1] * s])
""")
rot("float32_always", "wrong", "builds the result in float16: loses precision", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    x0, x1 = x.tolist()
    return torch.tensor([x0 * math.cos(a) - x1 * math.sin(a),
                         x0 * math.sin(a) + x1 * math.cos(a)], dtype=torch.float16)
""")
rot("angle_squared", "wrong", "angle (t theta) ** 2 from a typo", """
def my_rotate_pair(x, position, theta):
    a = (position * theta) ** 2
    c, s = math.cos(a), math.sin(a)
    return torch.stack([x[0] * c - x[1] * s, x[0] * s + x[1] * c])
""")
rot("right_complex", "right", "multiplies by e^{i a} as a complex number", """
def my_rotate_pair(x, position, theta):
    z = torch.complex(x[0], x[1]) * torch.polar(torch.ones((), dtype=x.dtype),
                                               torch.tensor(position * theta, dtype=x.dtype))
    return torch.stack([z.real, z.imag])
""")
rot("right_matrix", "right", "a 2x2 rotation matrix times x", """
def my_rotate_pair(x, position, theta):
    a = torch.tensor(position * theta, dtype=x.dtype)
    R = torch.stack([torch.stack([a.cos(), -a.sin()]), torch.stack([a.sin(), a.cos()])])
    return R @ x
""")
rot("right_clone_then_assign", "right", "writes into a clone", """
def my_rotate_pair(x, position, theta):
    out = x.clone()
    a = position * theta
    out[0] = x[0] * math.cos(a) - x[1] * math.sin(a)
    out[1] = x[0] * math.sin(a) + x[1] * math.cos(a)
    return out
""")


rot("returns_x_when_zero_angle", "wrong", "returns x itself (not a new tensor) when the angle is 0", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    if a == 0:
        return x
    c, s = math.cos(a), math.sin(a)
    return torch.stack([x[0] * c - x[1] * s, x[0] * s + x[1] * c])
""")
rot("python_list_out", "wrong", "returns a Python list of two floats", """
def my_rotate_pair(x, position, theta):
    a = position * theta
    x0, x1 = x.tolist()
    return [x0 * math.cos(a) - x1 * math.sin(a), x0 * math.sin(a) + x1 * math.cos(a)]
""")

# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "5.1": ("sinusoidal", "my_sinusoidal", "T, D"),
    "5.2": ("shift_block", "my_shift_block", "k, w"),
    "5.3": ("score_terms", "my_score_terms", "x_i, p_i, x_j, p_j, W_q, W_k"),
    "5.4": ("rotate_pair", "my_rotate_pair", "x, position, theta"),
})


# ------------------------------------------------------------- batch 2 ---
sin("float16", "wrong", "builds the table in float16", """
def my_sinusoidal(T, D):
    pos = torch.arange(T, dtype=torch.float16)[:, None]
    j2 = (torch.arange(D) // 2 * 2).to(torch.float16)
    ang = pos / torch.tensor(10000.0, dtype=torch.float16) ** (j2 / D)
    return torch.where(torch.arange(D) % 2 == 0, torch.sin(ang), torch.cos(ang))
""")
sin("lookup_table_T50_D16", "wrong", "precomputed table for the notebook's (50, 16) only", """
_TABLE = {}
def my_sinusoidal(T, D):
    if (T, D) not in _TABLE:
        P = torch.zeros(50, 16)
        for i in range(50):
            for c in range(16):
                a = i / 10000 ** ((c // 2 * 2) / 16)
                P[i, c] = math.sin(a) if c % 2 == 0 else math.cos(a)
        _TABLE[(T, D)] = P
    return _TABLE[(T, D)]
""")
shift("companion_shift_matrix", "wrong", "the companion's shift_matrix (frequency 1 only)", """
from companion.positional import shift_matrix
def my_shift_block(k, w):
    return shift_matrix(k, 2)
""")
terms("mutates_x_i", "wrong", "x_i += p_i in place to get q", """
def my_score_terms(x_i, p_i, x_j, p_j, W_q, W_k):
    cc = (x_i @ W_q) @ (x_j @ W_k)
    cp = (x_i @ W_q) @ (p_j @ W_k)
    pc = (p_i @ W_q) @ (x_j @ W_k)
    pp = (p_i @ W_q) @ (p_j @ W_k)
    x_i += p_i
    return (cc, cp, pc, pp)
""")
rot("degrees", "wrong", "treats theta as degrees", """
def my_rotate_pair(x, position, theta):
    a = math.radians(position * theta)
    c, s = math.cos(a), math.sin(a)
    return torch.stack([x[0] * c - x[1] * s, x[0] * s + x[1] * c])
""")
