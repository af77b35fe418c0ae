"""Independent red-team cases for chapter 1 (dot products).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.vectors"
PRELUDE = """
import math
import numpy as np
import torch
from companion import vectors
from companion.exercises import vectors as check
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 1.3 ----
def allp(name, expect, why, source):
    case("1.3", "all_pairs", name, expect, why, source, "my_all_scores")


allp("transposed_result", "wrong", "K @ Q.T: the (m, n) transpose", """
def my_all_scores(Q, K):
    return K @ Q.T
""")
allp("QT_K", "wrong", "Q.T @ K: a (d, d) table", """
def my_all_scores(Q, K):
    return Q.T @ K
""")
allp("no_transpose", "wrong", "Q @ K without transposing K", """
def my_all_scores(Q, K):
    return Q @ K
""")
allp("diagonal_only", "wrong", "row-by-row products: only the diagonal", """
def my_all_scores(Q, K):
    return (Q * K).sum(dim=-1)
""")
allp("list_comprehension_loop", "wrong", "Python loops, which the text forbids", """
def my_all_scores(Q, K):
    return torch.stack([torch.stack([q @ k for k in K]) for q in Q])
""")
allp("for_loop_rows", "wrong", "a Python loop over the queries", """
def my_all_scores(Q, K):
    out = torch.empty(Q.shape[0], K.shape[0])
    for i in range(Q.shape[0]):
        out[i] = K @ Q[i]
    return out
""")
allp("already_scaled", "wrong", "divides by sqrt(d): that is exercise 1.4", """
def my_all_scores(Q, K):
    return Q @ K.T / math.sqrt(Q.shape[1])
""")
allp("numpy_array", "wrong", "returns a NumPy array", """
def my_all_scores(Q, K):
    return Q.numpy() @ K.numpy().T
""")
allp("companion_import", "wrong", "imports the answer from companion", """
from companion import vectors as v
def my_all_scores(Q, K):
    return v.all_scores(Q, K)
""")
allp("self_scores", "wrong", "Q @ Q.T: forgot K", """
def my_all_scores(Q, K):
    return Q @ Q.T
""")
allp("cdist", "wrong", "Euclidean distances, not dot products", """
def my_all_scores(Q, K):
    return torch.cdist(Q, K)
""")
allp("long_dtype", "wrong", "casts to integers", """
def my_all_scores(Q, K):
    return Q.long() @ K.long().T
""")
allp("tolist", "wrong", "returns nested Python lists", """
def my_all_scores(Q, K):
    return (Q @ K.T).tolist()
""")
allp("right_einsum", "right", "einsum", """
def my_all_scores(Q, K):
    return torch.einsum("nd,md->nm", Q, K)
""")
allp("right_matmul_transpose", "right", "torch.matmul with transpose(0, 1)", """
def my_all_scores(Q, K):
    return torch.matmul(Q, K.transpose(0, 1))
""")
allp("right_broadcast", "right", "broadcast product then sum over d", """
def my_all_scores(Q, K):
    return (Q[:, None, :] * K[None, :, :]).sum(dim=-1)
""")


# ---------------------------------------------------------------- 1.4 ----
def scaled(name, expect, why, source):
    case("1.4", "scaled_scores", name, expect, why, source,
         "my_scaled_scores")


scaled("divide_by_d", "wrong", "divides by d, not sqrt(d)", """
def my_scaled_scores(Q, K):
    return Q @ K.T / Q.shape[1]
""")
scaled("sqrt_n", "wrong", "sqrt of the number of queries n", """
def my_scaled_scores(Q, K):
    return Q @ K.T / math.sqrt(Q.shape[0])
""")
scaled("sqrt_m", "wrong", "sqrt of the number of keys m", """
def my_scaled_scores(Q, K):
    return Q @ K.T / math.sqrt(K.shape[0])
""")
scaled("times_sqrt_d", "wrong", "multiplies by sqrt(d)", """
def my_scaled_scores(Q, K):
    return Q @ K.T * math.sqrt(Q.shape[-1])
""")
scaled("unscaled", "wrong", "forgot the scale", """
def my_scaled_scores(Q, K):
    return Q @ K.T
""")
scaled("floor_division", "wrong", "// floors the scores", """
def my_scaled_scores(Q, K):
    return (Q @ K.T) // math.sqrt(Q.shape[1])
""")
scaled("sqrt_numel", "wrong", "sqrt of Q.numel()", """
def my_scaled_scores(Q, K):
    return Q @ K.T / math.sqrt(Q.numel())
""")
scaled("hard_coded_8", "wrong", "hard-codes sqrt(64) = 8", """
def my_scaled_scores(Q, K):
    return Q @ K.T / 8.0
""")
scaled("len_Q", "wrong", "len(Q) is n, not d", """
def my_scaled_scores(Q, K):
    return Q @ K.T / len(Q) ** 0.5
""")
scaled("scales_Q_in_place", "wrong", "scales Q in place: mutates the input", """
def my_scaled_scores(Q, K):
    Q /= math.sqrt(Q.shape[1])
    return Q @ K.T
""")
scaled("returns_tuple", "wrong", "returns (scores, d)", """
def my_scaled_scores(Q, K):
    d = Q.shape[1]
    return Q @ K.T / math.sqrt(d), d
""")
scaled("transposed", "wrong", "K @ Q.T scaled: (m, n)", """
def my_scaled_scores(Q, K):
    return K @ Q.T / math.sqrt(K.shape[1])
""")
scaled("scaled_twice", "wrong", "scales Q and K each by sqrt(d): divides by d",
       """
def my_scaled_scores(Q, K):
    s = math.sqrt(Q.shape[1])
    return (Q / s) @ (K / s).T
""")
scaled("right_scale_Q_first", "right", "scales a copy of Q before the product", """
def my_scaled_scores(Q, K):
    return (Q / Q.shape[-1] ** 0.5) @ K.T
""")
scaled("right_torch_sqrt_int", "right", "torch.sqrt of an int tensor", """
def my_scaled_scores(Q, K):
    d = torch.tensor(K.shape[1])
    return torch.matmul(Q, K.T) / torch.sqrt(d)
""")
scaled("right_einsum_rsqrt", "right", "einsum times d ** -0.5", """
def my_scaled_scores(Q, K):
    return torch.einsum("id,jd->ij", Q, K) * K.size(-1) ** -0.5
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "1.3": ("all_pairs", "my_all_scores", "Q, K"),
    "1.4": ("scaled_scores", "my_scaled_scores", "Q, K"),
})


# ------------------------------------------------------------- batch 2 ---
allp("matmul_on_numpy_back", "wrong", "NumPy product turned back into a tensor: float64 for float32 input, no gradient", """
def my_all_scores(Q, K):
    return torch.from_numpy(Q.numpy() @ K.numpy().T).double()
""")
allp("map_loop", "wrong", "a loop hidden in map()", """
def my_all_scores(Q, K):
    return torch.stack(list(map(lambda q: K @ q, Q)))
""")
scaled("sqrt_of_tensor_shape", "wrong", "divides by sqrt(n * d) from Q.shape product", """
def my_scaled_scores(Q, K):
    n, d = Q.shape
    return Q @ K.T / math.sqrt(n * d)
""")


# ------------------------------------------------- issue 28: 1.3 and 1.4 replaced ---
# Exercise 1.3 now asks for the scores of a sequence-first batch, (n, B, d) -> (B, n, m), and 1.4
# for the scale derived for any variances, my_scale(d, var_q, var_k). The outside cases above
# answered the old texts; they are kept out. The cases below were written by the chapters'
# author, not independently: an outside red team should replace them.
CASES = [c for c in CASES if c["exercise"] not in ("1.3", "1.4")]


def allp(name, expect, why, source):  # noqa: F811 - the new 1.3
    case("1.3", "all_pairs", name, expect, why, source, "my_all_scores")


def scale(name, expect, why, source):
    case("1.4", "scaled_scores", name, expect, why, source, "my_scale")


allp("right_einsum", "right", "einsum with the layout spelled out", """
def my_all_scores(Q, K):
    return torch.einsum("nbd,mbd->bnm", Q, K)
""")
allp("right_permute_bmm", "right", "permute both, then torch.bmm", """
def my_all_scores(Q, K):
    return torch.bmm(Q.permute(1, 0, 2), K.permute(1, 2, 0))
""")
allp("right_loop_over_batch", "right", "a loop over the batch, stacked", """
def my_all_scores(Q, K):
    return torch.stack([Q[:, b] @ K[:, b].T for b in range(Q.shape[1])])
""")
allp("batch_first_assumed", "wrong", "treats the first axis as the batch", """
def my_all_scores(Q, K):
    return Q @ K.transpose(1, 2)
""")
allp("nbm_order", "wrong", "leaves the batch axis in the middle", """
def my_all_scores(Q, K):
    return torch.einsum("nbd,mbd->nbm", Q, K)
""")
allp("keys_rows", "wrong", "(B, m, n): keys as rows", """
def my_all_scores(Q, K):
    return torch.einsum("nbd,mbd->bmn", Q, K)
""")
allp("view_instead_of_transpose", "wrong", "reshapes (n, B, d) to (B, n, d) with view: mixes sequences", """
def my_all_scores(Q, K):
    n, B, d = Q.shape
    m = K.shape[0]
    return Q.reshape(B, n, d) @ K.reshape(B, m, d).transpose(1, 2)
""")
allp("float32_inside", "wrong", "computes in float32 and casts back", """
def my_all_scores(Q, K):
    return torch.einsum("nbd,mbd->bnm", Q.float(), K.float()).to(Q.dtype)
""")
allp("requires_grad_on_input", "wrong", "sets requires_grad on the caller's tensor", """
def my_all_scores(Q, K):
    Q.requires_grad_(True)
    return torch.einsum("nbd,mbd->bnm", Q, K)
""")
allp("squeeze_batch", "wrong", "squeezes: a batch of one loses its axis", """
def my_all_scores(Q, K):
    return torch.einsum("nbd,mbd->bnm", Q, K).squeeze()
""")
scale("right_sqrt", "right", "math.sqrt of the product", """
def my_scale(d, var_q, var_k):
    return math.sqrt(d * var_q * var_k)
""")
scale("right_powers", "right", "products of square roots", """
def my_scale(d, var_q, var_k):
    return d ** 0.5 * var_q ** 0.5 * var_k ** 0.5
""")
scale("sqrt_d_only", "wrong", "ignores the variances", """
def my_scale(d, var_q, var_k):
    return math.sqrt(d)
""")
scale("variance_not_std", "wrong", "returns the variance", """
def my_scale(d, var_q, var_k):
    return d * var_q * var_k
""")
scale("sum_of_variances", "wrong", "adds the variances", """
def my_scale(d, var_q, var_k):
    return math.sqrt(d * (var_q + var_k))
""")
scale("int_sqrt", "wrong", "integer square root", """
def my_scale(d, var_q, var_k):
    return math.isqrt(int(d * var_q * var_k))
""")
scale("multiplier", "wrong", "returns the factor to multiply by", """
def my_scale(d, var_q, var_k):
    return 1 / math.sqrt(d * var_q * var_k)
""")

CASES += junk_cases(MODULE, {
    "1.3": ("all_pairs", "my_all_scores", "Q, K"),
    "1.4": ("scaled_scores", "my_scale", "d, var_q, var_k"),
})
