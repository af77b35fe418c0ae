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


# ---------------------------------------------------------------- 1.1 ----
def dot(name, expect, why, source):
    case("1.1", "dot_by_hand", name, expect, why, source, "my_dot")


dot("zip_no_length_check", "wrong",
    "never raises ValueError on lists of different lengths", """
def my_dot(a, b):
    total = 0
    for x, y in zip(a, b):
        total += x * y
    return total
""")
dot("assert_not_valueerror", "wrong",
    "raises AssertionError, not ValueError, on different lengths", """
def my_dot(a, b):
    assert len(a) == len(b), "lengths differ"
    total = 0
    for x, y in zip(a, b):
        total += x * y
    return total
""")
dot("numpy_dot", "wrong", "uses NumPy, which the text bans", """
import numpy as np
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    return float(np.dot(a, b))
""")
dot("torch_dot", "wrong", "uses PyTorch, which the text bans", """
import torch
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    return torch.dot(torch.tensor(a, dtype=torch.float64),
                     torch.tensor(b, dtype=torch.float64)).item()
""")
dot("off_by_one_range", "wrong", "range(len(a) - 1) drops the last term", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    total = 0
    for i in range(len(a) - 1):
        total += a[i] * b[i]
    return total
""")
dot("starts_at_one", "wrong", "accumulator starts at 1", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    total = 1
    for x, y in zip(a, b):
        total += x * y
    return total
""")
dot("returns_products_list", "wrong", "forgot to add the products", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    products = []
    for x, y in zip(a, b):
        products.append(x * y)
    return products
""")
dot("lookup_table", "wrong", "hard-codes the three worked examples", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    answers = {((1, 2, 3), (4, 5, 6)): 32, ((3, 5), (-2, 4)): 14,
               ((1, 2, 3, 4), (-4, 0, 2, 5)): 22}
    return answers.get((tuple(a), tuple(b)), 0)
""")
dot("companion_import", "wrong", "imports the answer from companion", """
from companion.vectors import dot as _dot
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    return float(_dot(a, b))
""")
dot("returns_string", "wrong", "returns the number formatted as a string", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    total = 0
    for x, y in zip(a, b):
        total += x * y
    return f"{total}"
""")
dot("abs_value", "wrong", "returns |a . b|: wrong for negative dot products", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    total = 0
    for x, y in zip(a, b):
        total += x * y
    return abs(total)
""")
dot("pops_inputs", "wrong", "empties the caller's lists while summing", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    total = 0
    while a:
        total += a.pop() * b.pop()
    return total
""")
dot("one_direction_check", "wrong", "raises only when a is shorter than b", """
def my_dot(a, b):
    if len(a) < len(b):
        raise ValueError("different lengths")
    total = 0
    for i in range(len(b)):
        total += a[i] * b[i]
    return total
""")
dot("int_truncation", "wrong", "int() of the total truncates float inputs", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    total = 0
    for x, y in zip(a, b):
        total += int(x * y)
    return total
""")
dot("empty_returns_none", "wrong", "empty lists give None instead of 0", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    if not a:
        return None
    total = 0
    for x, y in zip(a, b):
        total += x * y
    return total
""")
dot("right_index_loop", "right", "while loop over indices", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError(f"lengths {len(a)} and {len(b)} differ")
    i, total = 0, 0
    while i < len(a):
        total = total + a[i] * b[i]
        i += 1
    return total
""")
dot("right_zip_strict", "right", "zip(strict=True) raises ValueError itself", """
def my_dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))
""")
dot("right_enumerate_float", "right", "enumerate, float accumulator", """
def my_dot(a, b):
    if len(b) != len(a):
        raise ValueError("a and b must have the same length")
    acc = 0.0
    for i, x in enumerate(a):
        acc += x * b[i]
    return acc
""")


# ---------------------------------------------------------------- 1.2 ----
def cos(name, expect, why, source):
    case("1.2", "cosine", name, expect, why, source, "my_cosine")


cos("no_sqrt", "wrong", "divides by the squared lengths", """
def my_cosine(a, b):
    return (a @ b) / ((a @ a) * (b @ b))
""")
cos("one_length", "wrong", "divides by the length of a only", """
def my_cosine(a, b):
    return (a @ b) / torch.sqrt(a @ a)
""")
cos("F_cosine_similarity", "wrong", "calls the banned library function", """
import torch.nn.functional as F
def my_cosine(a, b):
    return F.cosine_similarity(a, b, dim=0)
""")
cos("aliased_cosine_similarity", "wrong", "banned call under an alias", """
from torch.nn.functional import cosine_similarity as cs
def my_cosine(a, b):
    return cs(a.unsqueeze(0), b.unsqueeze(0))[0]
""")
cos("linalg_norm", "wrong", "uses torch.linalg.norm; the text allows @ and sqrt only",
    """
def my_cosine(a, b):
    return (a @ b) / (torch.linalg.norm(a) * torch.linalg.norm(b))
""")
cos("numpy_version", "wrong", "computes in NumPy and returns a NumPy float", """
import numpy as np
def my_cosine(a, b):
    a, b = a.numpy(), b.numpy()
    return np.dot(a, b) / np.sqrt(np.dot(a, a) * np.dot(b, b))
""")
cos("returns_angle", "wrong", "returns the angle (acos) instead of its cosine", """
def my_cosine(a, b):
    c = (a @ b) / torch.sqrt((a @ a) * (b @ b))
    return torch.acos(c)
""")
cos("cosine_distance", "wrong", "returns 1 - cosine", """
def my_cosine(a, b):
    return 1 - (a @ b) / torch.sqrt((a @ a) * (b @ b))
""")
cos("abs_value", "wrong", "abs() hides opposite directions", """
def my_cosine(a, b):
    return torch.abs(a @ b) / torch.sqrt((a @ a) * (b @ b))
""")
cos("companion_import", "wrong", "imports the answer from companion", """
from companion.vectors import cosine_similarity
def my_cosine(a, b):
    return cosine_similarity(a, b)
""")
cos("normalizes_in_place", "wrong", "divides a and b in place: mutates the inputs",
    """
def my_cosine(a, b):
    a /= torch.sqrt(a @ a)
    b /= torch.sqrt(b @ b)
    return a @ b
""")
cos("half_precision", "wrong", "computes in float16: off in the third digit", """
def my_cosine(a, b):
    a, b = a.half(), b.half()
    return ((a @ b) / torch.sqrt((a @ a) * (b @ b))).float()
""")
cos("int_cast", "wrong", "casts to int, truncating the components", """
def my_cosine(a, b):
    a, b = a.long(), b.long()
    return (a @ b) / torch.sqrt(((a @ a) * (b @ b)).float())
""")
cos("right_item", "right", "returns a Python float via .item()", """
def my_cosine(a, b):
    na = torch.sqrt(torch.dot(a, a))
    nb = torch.sqrt(torch.dot(b, b))
    return (torch.dot(a, b) / (na * nb)).item()
""")
cos("right_unit_vectors", "right", "normalizes copies, then one dot product", """
def my_cosine(a, b):
    ua = a / torch.sqrt(a @ a)
    ub = b / torch.sqrt(b @ b)
    return ua @ ub
""")
cos("right_single_sqrt", "right", "one sqrt of the product of squared lengths", """
def my_cosine(a, b):
    return a @ b / torch.sqrt((a @ a) * (b @ b))
""")


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
    "1.1": ("dot_by_hand", "my_dot", "a, b"),
    "1.2": ("cosine", "my_cosine", "a, b"),
    "1.3": ("all_pairs", "my_all_scores", "Q, K"),
    "1.4": ("scaled_scores", "my_scaled_scores", "Q, K"),
})


# ------------------------------------------------------------- batch 2 ---
dot("right_map_operator_mul", "right", "sum(map(operator.mul, a, b)): a loop in disguise, no NumPy or PyTorch", """
import operator
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("different lengths")
    return sum(map(operator.mul, a, b))
""")
dot("recursion", "right", "recursive (a loop in disguise, no library)", """
def my_dot(a, b):
    if len(a) != len(b):
        raise ValueError("lengths differ")
    if not a:
        return 0
    return a[0] * b[0] + my_dot(a[1:], b[1:])
""")
cos("zero_division_guard_wrong", "wrong", "returns 1.0 when the dot product is 0 (mistaken guard)", """
def my_cosine(a, b):
    d = a @ b
    if d == 0:
        return 1.0
    return d / torch.sqrt((a @ a) * (b @ b))
""")
cos("squared_cosine", "wrong", "returns cos squared (forgot one sqrt on the numerator side)", """
def my_cosine(a, b):
    return (a @ b) ** 2 / ((a @ a) * (b @ b))
""")
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
