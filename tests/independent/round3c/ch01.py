"""Chapter 1 red-team cases: 1.1 sparse_dot, 1.2 cosine_batch."""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases

MODULE = "companion.exercises.vectors"
PRELUDE = """import math

import matplotlib.pyplot as plt
import numpy as np
import torch

from companion import example, vectors
from companion.exercises import early_extra as check_more
from companion.exercises import vectors as check
"""

def _c(ex, checker, call, name, expect, why, source):
    return dict(exercise=ex, checker=checker, module=MODULE, name=name,
                expect=expect, why=why, source=source.strip("\n") + "\n", call=call)

S = lambda name, expect, why, src: _c("1.1", "sparse_dot", "my_sparse_dot", name, expect, why, src)
C = lambda name, expect, why, src: _c("1.2", "cosine_batch", "my_cosine", name, expect, why, src)

CASES = [
# ---------------- 1.1 right
S("right_get", "right", "obvious: sum over a's items with b.get(k, 0)", """
def my_sparse_dot(a, b):
    # only features stored in both can add something
    return sum(v * b.get(k, 0) for k, v in a.items())
"""),
S("right_smaller_first", "right", "iterates over the smaller dict, looks up in the larger", """
def my_sparse_dot(a, b):
    if len(a) > len(b):
        a, b = b, a
    total = 0
    for k, v in a.items():
        if k in b:
            total += v * b[k]
    return total
"""),
S("right_key_intersection", "right", "keys view intersection a.keys() & b.keys()", """
def my_sparse_dot(a, b):
    return sum(a[k] * b[k] for k in a.keys() & b.keys())
"""),
S("right_fsum", "right", "math.fsum: exactly rounded sum (plain Python)", """
import math
def my_sparse_dot(a, b):
    return math.fsum(a[k] * b[k] for k in a if k in b)
"""),
S("right_skip_falsy", "right", "skips zero values explicitly (they add nothing)", """
def my_sparse_dot(a, b):
    total = 0.0
    for k in b:
        if b[k] and k in a and a[k]:
            total += a[k] * b[k]
    return total
"""),
S("right_nested_loops", "right", "O(n*m) nested loops comparing keys; slow but correct", """
def my_sparse_dot(a, b):
    total = 0
    for ka, va in a.items():
        for kb, vb in b.items():
            if ka == kb:
                total += va * vb
    return total
"""),
# ---------------- 1.1 wrong
S("keyerror_missing", "wrong", "b[k] for every key of a: KeyError for features only a stores", """
def my_sparse_dot(a, b):
    return sum(v * b[k] for k, v in a.items())
"""),
S("zip_values", "wrong", "zips values in storage order: wrong when keys differ or are ordered differently", """
def my_sparse_dot(a, b):
    return sum(x * y for x, y in zip(a.values(), b.values()))
"""),
S("zip_sorted_items", "wrong", "zips sorted items ignoring keys that only one dict stores; crashes on mixed key types", """
def my_sparse_dot(a, b):
    return sum(va * vb for (ka, va), (kb, vb) in zip(sorted(a.items()), sorted(b.items())))
"""),
S("sorted_keys_mixed_types", "wrong", "sorts the common keys: TypeError on keys of several types", """
def my_sparse_dot(a, b):
    total = 0
    for k in sorted(set(a) & set(b)):
        total += a[k] * b[k]
    return total
"""),
S("setdefault_mutates", "wrong", "b.setdefault(k, 0) inserts missing keys into the caller's dict", """
def my_sparse_dot(a, b):
    total = 0
    for k, v in a.items():
        total += v * b.setdefault(k, 0)
    return total
"""),
S("pop_mutates", "wrong", "pops the matched keys out of a (consumes the caller's dict)", """
def my_sparse_dot(a, b):
    total = 0
    for k in list(b):
        if k in a:
            total += a.pop(k) * b[k]
    return total
"""),
S("fills_zeros_mutates", "wrong", "densifies both dicts in place: adds 0 entries to the caller's dicts", """
def my_sparse_dot(a, b):
    for k in list(a):
        b.setdefault(k, 0)
    for k in list(b):
        a.setdefault(k, 0)
    return sum(a[k] * b[k] for k in a)
"""),
S("numpy_dense", "wrong", "builds dense NumPy vectors (forbidden: plain Python), int keys only", """
import numpy as np
def my_sparse_dot(a, b):
    keys = list(set(a) | set(b))
    x = np.array([a.get(k, 0) for k in keys], dtype=float)
    y = np.array([b.get(k, 0) for k in keys], dtype=float)
    return float(np.dot(x, y))
"""),
S("torch_dense", "wrong", "uses PyTorch for the sum (forbidden)", """
import torch
def my_sparse_dot(a, b):
    common = [k for k in a if k in b]
    return torch.tensor([float(a[k] * b[k]) for k in common], dtype=torch.float64).sum().item()
"""),
S("dense_list_int_keys", "wrong", "dense Python list indexed by key: only non-negative int keys work", """
def my_sparse_dot(a, b):
    n = max(list(a) + list(b) + [-1]) + 1
    x = [0] * n
    y = [0] * n
    for k, v in a.items():
        x[k] = v
    for k, v in b.items():
        y[k] = v
    return sum(p * q for p, q in zip(x, y))
"""),
S("int_truncation", "wrong", "int() of each product: fractions dropped", """
def my_sparse_dot(a, b):
    return sum(int(v * b[k]) for k, v in a.items() if k in b)
"""),
S("rounded", "wrong", "rounds the result to 2 decimals", """
def my_sparse_dot(a, b):
    return round(sum(v * b.get(k, 0) for k, v in a.items()), 2)
"""),
S("empty_none", "wrong", "returns None for an empty dict instead of 0", """
def my_sparse_dot(a, b):
    if not a or not b:
        return None
    return sum(v * b.get(k, 0) for k, v in a.items())
"""),
S("adds_values", "wrong", "adds the two values instead of multiplying", """
def my_sparse_dot(a, b):
    return sum(v + b[k] for k, v in a.items() if k in b)
"""),
S("double_counts", "wrong", "loops over both dicts: each common feature counted twice", """
def my_sparse_dot(a, b):
    total = 0
    for k in a:
        if k in b:
            total += a[k] * b[k]
    for k in b:
        if k in a:
            total += a[k] * b[k]
    return total
"""),
S("str_keys", "wrong", "normalizes keys with str(): 1 and '1' collide", """
def my_sparse_dot(a, b):
    bs = {str(k): v for k, v in b.items()}
    return sum(v * bs.get(str(k), 0) for k, v in a.items())
"""),
S("default_one", "wrong", "missing feature counted as 1, not 0", """
def my_sparse_dot(a, b):
    keys = set(a) | set(b)
    return sum(a.get(k, 1) * b.get(k, 1) for k in keys)
"""),
S("abs_products", "wrong", "sums absolute values of the products", """
def my_sparse_dot(a, b):
    return sum(abs(v * b[k]) for k, v in a.items() if k in b)
"""),
S("skip_negative", "wrong", "skips negative values", """
def my_sparse_dot(a, b):
    return sum(v * b[k] for k, v in a.items() if k in b and v > 0 and b[k] > 0)
"""),
S("start_one", "wrong", "off by one: total starts at 1", """
def my_sparse_dot(a, b):
    total = 1
    for k, v in a.items():
        total += v * b.get(k, 0)
    return total
"""),
S("global_total", "wrong", "accumulates in a module-level total that is never reset between calls", """
TOTAL = [0]
def my_sparse_dot(a, b):
    for k, v in a.items():
        TOTAL[0] += v * b.get(k, 0)
    return TOTAL[0]
"""),
S("cache_by_len", "wrong", "caches results keyed on the dicts' sizes", """
_cache = {}
def my_sparse_dot(a, b):
    key = (len(a), len(b))
    if key not in _cache:
        _cache[key] = sum(v * b.get(k, 0) for k, v in a.items())
    return _cache[key]
"""),
S("first_100_only", "wrong", "only looks at the first 100 features of a (for speed)", """
def my_sparse_dot(a, b):
    total = 0
    for i, (k, v) in enumerate(a.items()):
        if i >= 100:
            break
        total += v * b.get(k, 0)
    return total
"""),
S("returns_list", "wrong", "returns [total], not one number", """
def my_sparse_dot(a, b):
    return [sum(v * b.get(k, 0) for k, v in a.items())]
"""),
S("returns_string", "wrong", "returns the number formatted as a string", """
def my_sparse_dot(a, b):
    return f"{sum(v * b.get(k, 0) for k, v in a.items())}"
"""),
S("squares_a", "wrong", "typo: a[k] * a[k]", """
def my_sparse_dot(a, b):
    return sum(v * v for k, v in a.items() if k in b)
"""),
S("hardcoded_activities", "wrong", "hard-codes the two activities' answers by length, computes zero otherwise", """
def my_sparse_dot(a, b):
    if len(a) == 2 and len(b) == 2:
        return 14
    if len(a) == 4 or len(b) == 4 or len(a) == 3:
        return 22
    return 0
"""),
S("notimpl_empty", "wrong", "raises NotImplementedError for empty dicts only", """
def my_sparse_dot(a, b):
    if not a or not b:
        raise NotImplementedError("empty")
    return sum(v * b.get(k, 0) for k, v in a.items())
"""),
S("companion_call", "wrong", "calls the course's implementation in companion.vectors (if it has one; falls back)", """
from companion import vectors
def my_sparse_dot(a, b):
    f = getattr(vectors, "sparse_dot", None)
    if f is not None:
        return f(a, b)
    return sum(v * b.get(k, 0) for k, v in a.items()) + 0.5
"""),

S("right_union_get", "right", "sums over the union of the keys with get(k, 0) on both sides", """
def my_sparse_dot(a, b):
    return sum(a.get(k, 0) * b.get(k, 0) for k in a.keys() | b.keys())
"""),
S("right_float_total", "right", "debatable: always returns a float (float(total)), also for int inputs", """
def my_sparse_dot(a, b):
    total = 0
    for k in a:
        if k in b:
            total += a[k] * b[k]
    return float(total)
"""),
S("cache_by_id", "wrong", "caches results keyed on id(a), id(b): stale after the caller changes a dict or ids are reused", """
_memo = {}
def my_sparse_dot(a, b):
    key = (id(a), id(b))
    if key not in _memo:
        _memo[key] = sum(v * b.get(k, 0) for k, v in a.items())
    return _memo[key]
"""),
S("lowercase_keys", "wrong", "lower-cases string keys (text habit): 'Cat' and 'cat' become one feature", """
def my_sparse_dot(a, b):
    norm = lambda k: k.lower() if isinstance(k, str) else k
    bb = {}
    for k, v in b.items():
        bb[norm(k)] = v
    return sum(v * bb.get(norm(k), 0) for k, v in a.items())
"""),
S("values_to_float_inplace", "wrong", "debatable: converts the caller's values to float in place (== still holds, the types change)", """
def my_sparse_dot(a, b):
    for d in (a, b):
        for k in d:
            d[k] = float(d[k])
    return sum(v * b.get(k, 0) for k, v in a.items())
"""),
S("reorders_inplace", "wrong", "debatable: sorts the caller's dict in place by value (clear + update): equal under ==, order changed", """
def my_sparse_dot(a, b):
    items = sorted(a.items(), key=lambda kv: kv[1])
    a.clear()
    a.update(items)
    return sum(v * b.get(k, 0) for k, v in a.items())
"""),
S("deletes_stored_zeros", "wrong", "removes explicitly stored zeros from the caller's dicts", """
def my_sparse_dot(a, b):
    for d in (a, b):
        for k in [k for k, v in d.items() if v == 0]:
            del d[k]
    return sum(v * b.get(k, 0) for k, v in a.items())
"""),
S("early_return", "wrong", "return indented inside the loop: only the first feature counts", """
def my_sparse_dot(a, b):
    total = 0
    for k, v in a.items():
        total += v * b.get(k, 0)
        return total
    return total
"""),
S("break_on_missing", "wrong", "stops at the first feature that b does not store", """
def my_sparse_dot(a, b):
    total = 0
    for k, v in a.items():
        if k not in b:
            break
        total += v * b[k]
    return total
"""),
S("is_instead_of_eq", "wrong", "compares keys with `is`: works for small ints and interned strings only", """
def my_sparse_dot(a, b):
    total = 0
    for ka, va in a.items():
        for kb, vb in b.items():
            if ka is kb:
                total += va * vb
    return total
"""),
S("hash_compare", "wrong", "matches keys by hash(): colliding keys (hash(-1) == hash(-2)) pair up", """
def my_sparse_dot(a, b):
    hb = {}
    for k, v in b.items():
        hb[hash(k)] = hb.get(hash(k), 0) + v
    return sum(v * hb.get(hash(k), 0) for k, v in a.items())
"""),
S("int_total", "wrong", "int() of the total", """
def my_sparse_dot(a, b):
    return int(sum(v * b.get(k, 0) for k, v in a.items()))
"""),
# ---------------- 1.2 right
C("right_clamp", "right", "obvious: sqrt of sum of squares clamped at eps", """
import torch
def my_cosine(a, b, eps=1e-8):
    # zero vector -> 0; lengths 0.2 and 10 with eps 0.5 -> dot / (0.5 * 10)
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("right_maximum", "right", "torch.maximum with an eps tensor of the right dtype", """
import torch
def my_cosine(a, b, eps=1e-8):
    e = torch.tensor(eps, dtype=torch.result_type(a, b))
    na = torch.maximum(torch.sqrt((a * a).sum(dim=-1)), e)
    nb = torch.maximum(torch.sqrt((b * b).sum(dim=-1)), e)
    return (a * b).sum(dim=-1) / na / nb
"""),
C("right_normalize_first", "right", "normalizes each side first, then the dot product", """
import torch
def my_cosine(a, b, eps=1e-8):
    ua = a / torch.sqrt((a * a).sum(-1, keepdim=True)).clamp(min=eps)
    ub = b / torch.sqrt((b * b).sum(-1, keepdim=True)).clamp(min=eps)
    return (ua * ub).sum(-1)
"""),
C("right_clamp_squared", "right", "clamps the squared length at eps**2 before sqrt (same value)", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1).clamp(min=eps * eps))
    nb = torch.sqrt((b * b).sum(-1).clamp(min=eps * eps))
    return (a * b).sum(-1) / (na * nb)
"""),
C("right_broadcast_first", "right", "broadcasts the inputs explicitly first", """
import torch
def my_cosine(a, b, eps=1e-8):
    a, b = torch.broadcast_tensors(a, b)
    dot = (a * b).sum(-1)
    return dot / (torch.sqrt((a * a).sum(-1)).clamp(min=eps) * torch.sqrt((b * b).sum(-1)).clamp(min=eps))
"""),
# ---------------- 1.2 wrong
C("no_eps", "wrong", "no eps: a zero vector gives nan", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1)) * torch.sqrt((b * b).sum(-1)))
"""),
C("nan_to_num", "wrong", "no eps, then nan_to_num: zero vectors give 0 but short vectors are not clamped", """
import torch
def my_cosine(a, b, eps=1e-8):
    c = (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1)) * torch.sqrt((b * b).sum(-1)))
    return torch.nan_to_num(c, nan=0.0)
"""),
C("eps_added", "wrong", "adds eps to the product of the norms instead of max", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1)) * torch.sqrt((b * b).sum(-1)) + eps)
"""),
C("eps_on_product", "wrong", "clamps the product of the norms at eps (old PyTorch rule), not each norm", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1)) * torch.sqrt((b * b).sum(-1))).clamp(min=eps)
"""),
C("eps_in_sqrt", "wrong", "sqrt(sum of squares + eps)", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1) + eps) * torch.sqrt((b * b).sum(-1) + eps))
"""),
C("eps_one_side", "wrong", "clamps only a's norm", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1)).clamp(min=eps) * torch.sqrt((b * b).sum(-1)))
"""),
C("eps_ignored", "wrong", "hard-codes 1e-8 and ignores the eps argument", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=1e-8)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=1e-8)
    return (a * b).sum(-1) / (na * nb)
"""),
C("clamp_max_typo", "wrong", "clamp(max=eps) instead of min", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(max=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(max=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("F_cosine", "wrong", "calls F.cosine_similarity (forbidden)", """
import torch.nn.functional as F
def my_cosine(a, b, eps=1e-8):
    return F.cosine_similarity(a, b, dim=-1, eps=eps)
"""),
C("linalg_norm", "wrong", "uses torch.linalg.vector_norm (a library norm, forbidden)", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.linalg.vector_norm(a, dim=-1).clamp(min=eps)
    nb = torch.linalg.vector_norm(b, dim=-1).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("tensor_norm_method", "wrong", "uses a.norm(dim=-1) (a library norm, forbidden)", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum(-1) / (a.norm(dim=-1).clamp(min=eps) * b.norm(dim=-1).clamp(min=eps))
"""),
C("axis0", "wrong", "sums over axis 0 instead of the last", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(0)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(0)).clamp(min=eps)
    return (a * b).sum(0) / (na * nb)
"""),
C("keepdim", "wrong", "keeps the last axis: shape (..., 1)", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1, keepdim=True)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1, keepdim=True)).clamp(min=eps)
    return (a * b).sum(-1, keepdim=True) / (na * nb)
"""),
C("squeeze_result", "wrong", "squeezes the result: size-1 axes of the broadcast shape disappear", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return ((a * b).sum(-1) / (na * nb)).squeeze()
"""),
C("matmul_transpose", "wrong", "a @ b.T: a matrix of all pairs, not broadcast pairs", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1, keepdim=True)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1, keepdim=True)).clamp(min=eps)
    return (a / na) @ (b / nb).transpose(-1, -2)
"""),
C("sum_all", "wrong", "sum() over every axis: one number for the whole batch", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum() / (torch.sqrt((a * a).sum()).clamp(min=eps) * torch.sqrt((b * b).sum()).clamp(min=eps))
"""),
C("expand_as", "wrong", "expands a to b's shape: fails when a is the larger or both broadcast", """
import torch
def my_cosine(a, b, eps=1e-8):
    a = a.expand_as(b)
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("inplace_normalize", "wrong", "normalizes a and b in place (changes the caller's tensors)", """
import torch
def my_cosine(a, b, eps=1e-8):
    with torch.no_grad():
        a.div_(torch.sqrt((a * a).sum(-1, keepdim=True)).clamp(min=eps))
        b.div_(torch.sqrt((b * b).sum(-1, keepdim=True)).clamp(min=eps))
    return (a * b).sum(-1)
"""),
C("detached", "wrong", "detaches the inputs: no gradient flows", """
import torch
def my_cosine(a, b, eps=1e-8):
    a, b = a.detach(), b.detach()
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("grad_mode_off", "wrong", "turns grad mode off globally and leaves it off", """
import torch
def my_cosine(a, b, eps=1e-8):
    torch.set_grad_enabled(False)
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("always_float32", "wrong", "casts to float32: float64 inputs lose precision and dtype", """
import torch
def my_cosine(a, b, eps=1e-8):
    a, b = a.float(), b.float()
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("always_float64", "wrong", "returns float64 for float32 inputs", """
import torch
def my_cosine(a, b, eps=1e-8):
    a, b = a.double(), b.double()
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("half_precision", "wrong", "computes in float16 for speed", """
import torch
def my_cosine(a, b, eps=1e-8):
    dt = a.dtype
    a, b = a.half(), b.half()
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return ((a * b).sum(-1) / (na * nb)).to(dt)
"""),
C("no_sqrt", "wrong", "divides by the squared lengths (forgot sqrt)", """
import torch
def my_cosine(a, b, eps=1e-8):
    return (a * b).sum(-1) / ((a * a).sum(-1).clamp(min=eps) * (b * b).sum(-1).clamp(min=eps))
"""),
C("abs_cosine", "wrong", "returns |cos|", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return ((a * b).sum(-1) / (na * nb)).abs()
"""),
C("item_for_pair", "wrong", "returns a Python float (.item()) for a single pair instead of a 0-d tensor", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    c = (a * b).sum(-1) / (na * nb)
    return c.item() if c.ndim == 0 else c
"""),
C("zero_special_one", "wrong", "no eps; zero vectors special-cased to 1 (same direction)", """
import torch
def my_cosine(a, b, eps=1e-8):
    c = (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1)) * torch.sqrt((b * b).sum(-1)))
    return torch.where(torch.isnan(c), torch.ones_like(c), c)
"""),
C("clamped_to_unit", "wrong", "no eps; clamps the result to [-1, 1] and nan to 0: short vectors give 1 not the eps rule", """
import torch
def my_cosine(a, b, eps=1e-8):
    c = (a * b).sum(-1) / (torch.sqrt((a * a).sum(-1)) * torch.sqrt((b * b).sum(-1)))
    return torch.nan_to_num(c, nan=0.0).clamp(-1, 1)
"""),
C("cache_by_shape", "wrong", "caches the result by input shape", """
import torch
_cache = {}
def my_cosine(a, b, eps=1e-8):
    key = (tuple(a.shape), tuple(b.shape), a.dtype)
    if key not in _cache:
        na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
        nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
        _cache[key] = (a * b).sum(-1) / (na * nb)
    return _cache[key]
"""),
C("width1_squeeze_inputs", "wrong", "squeezes the inputs first: width-1 vectors lose their vector axis", """
import torch
def my_cosine(a, b, eps=1e-8):
    a, b = a.squeeze(), b.squeeze()
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("requires_grad_set", "wrong", "sets requires_grad on the caller's inputs", """
import torch
def my_cosine(a, b, eps=1e-8):
    if a.is_leaf and not a.requires_grad and torch.is_grad_enabled():
        a.requires_grad_(True)
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),

C("right_pow", "right", "uses .pow(2) and torch.where for the floor", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt(a.pow(2).sum(-1))
    nb = torch.sqrt(b.pow(2).sum(-1))
    na = torch.where(na < eps, torch.full_like(na, eps), na)
    nb = torch.where(nb < eps, torch.full_like(nb, eps), nb)
    return (a * b).sum(-1) / (na * nb)
"""),
C("right_single_sqrt", "right", "one sqrt of the product of the floored squared lengths", """
import torch
def my_cosine(a, b, eps=1e-8):
    sa = (a * a).sum(-1).clamp(min=eps ** 2)
    sb = (b * b).sum(-1).clamp(min=eps ** 2)
    return (a * b).sum(-1) / torch.sqrt(sa * sb)
"""),
C("right_rsqrt", "right", "debatable: torch.rsqrt of the floored squared length (not a library norm; the text names sqrt)", """
import torch
def my_cosine(a, b, eps=1e-8):
    ra = torch.rsqrt((a * a).sum(-1).clamp(min=eps * eps))
    rb = torch.rsqrt((b * b).sum(-1).clamp(min=eps * eps))
    return (a * b).sum(-1) * ra * rb
"""),
C("inplace_own_intermediates", "wrong", "written as a right answer: in-place sqrt_/clamp_ on its own intermediates, but clamp_ overwrites sqrt's output that autograd needs: backward raises", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = (a * a).sum(-1)
    na.sqrt_().clamp_(min=eps)
    nb = (b * b).sum(-1)
    nb.sqrt_().clamp_(min=eps)
    out = (a * b).sum(-1)
    return out / (na * nb)
"""),
C("default_eps_1e6", "wrong", "default eps=1e-6 instead of the text's 1e-8", """
import torch
def my_cosine(a, b, eps=1e-6):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("zero_only_special", "wrong", "no eps floor; only exact zero vectors are special-cased to 0", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1))
    nb = torch.sqrt((b * b).sum(-1))
    den = na * nb
    return torch.where(den == 0, torch.zeros_like(den), (a * b).sum(-1) / torch.where(den == 0, torch.ones_like(den), den))
"""),
C("reshape_to_a", "wrong", "reshapes the result to a.shape[:-1] (forgets that b may be the larger)", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return ((a * b).sum(-1) / (na * nb)).reshape(a.shape[:-1])
"""),
C("enable_grad_inside", "wrong", "debatable: computes under torch.enable_grad(), so a call under no_grad still builds a graph", """
import torch
def my_cosine(a, b, eps=1e-8):
    with torch.enable_grad():
        na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
        nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
        return (a * b).sum(-1) / (na * nb)
"""),
C("backward_inside", "wrong", "calls backward inside to 'test' the gradient: leaves .grad on the caller's inputs", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    out = (a * b).sum(-1) / (na * nb)
    if out.requires_grad:
        out.sum().backward(retain_graph=True)
    return out
"""),
C("eps_squared_floor", "wrong", "floors each length at eps**2 instead of eps", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps * eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps * eps)
    return (a * b).sum(-1) / (na * nb)
"""),
C("float_eps_tensor_float32", "wrong", "eps as a float32 tensor in torch.maximum, and the norms cast to float32 first (float64 precision lost)", """
import torch
def my_cosine(a, b, eps=1e-8):
    e = torch.tensor(eps)
    na = torch.maximum(torch.sqrt((a * a).sum(-1)).float(), e)
    nb = torch.maximum(torch.sqrt((b * b).sum(-1)).float(), e)
    return ((a * b).sum(-1) / (na * nb)).to(a.dtype)
"""),
]


CASES += junk_cases(MODULE, {
    "1.1": ("sparse_dot", "my_sparse_dot", "a, b"),
    "1.2": ("cosine_batch", "my_cosine", "a, b, eps=1e-8"),
})

# Cases that leave torch's grad mode off go last, after the junk battery (the runner does not restore it, and neither
# does the checker, so every later case would be checked with grad mode off), followed by one
# right answer checked after them: what a student sees after fixing such a cell in a notebook.
_MOVE = {'grad_mode_off'}
CASES = [c for c in CASES if c["name"] not in _MOVE] + [c for c in CASES if c["name"] in _MOVE]
CASES.append(C("right_after_grad_off", "right", "right_clamp again, checked right after grad_mode_off left grad mode off in the kernel (a notebook where the student then fixed the cell)", """
import torch
def my_cosine(a, b, eps=1e-8):
    na = torch.sqrt((a * a).sum(-1)).clamp(min=eps)
    nb = torch.sqrt((b * b).sum(-1)).clamp(min=eps)
    return (a * b).sum(-1) / (na * nb)
"""))

