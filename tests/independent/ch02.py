"""Independent red-team cases for chapter 2 (attention).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.attention"
PRELUDE = """
import inspect
import math
import time
import torch
import torch.nn.functional as F
from companion import attention
from companion.exercises import attention as check
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 2.2 ----
def att(name, expect, why, source):
    case("2.2", "attention", name, expect, why, source, "my_attention")


att("scale_dv", "wrong", "scales by sqrt(d_v) instead of sqrt(d_k)", """
def my_attention(Q, K, V):
    w = torch.softmax(Q @ K.T / math.sqrt(V.shape[-1]), dim=-1)
    return w @ V
""")
att("scale_dk_not_sqrt", "wrong", "scales by d_k", """
def my_attention(Q, K, V):
    w = torch.softmax(Q @ K.T / K.shape[-1], dim=-1)
    return w @ V
""")
att("no_scale", "wrong", "forgot the scale", """
def my_attention(Q, K, V):
    return torch.softmax(Q @ K.T, dim=-1) @ V
""")
att("softmax_dim0", "wrong", "softmax over the queries", """
def my_attention(Q, K, V):
    w = torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), dim=0)
    return w @ V
""")
att("returns_weights", "wrong", "forgot to multiply by V", """
def my_attention(Q, K, V):
    return torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), dim=-1)
""")
att("returns_tuple", "wrong", "returns (output, weights)", """
def my_attention(Q, K, V):
    w = torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), dim=-1)
    return w @ V, w
""")
att("sdpa", "wrong", "calls the library's attention, the very thing to write", """
import torch.nn.functional as F
def my_attention(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V)
""")
att("companion_import", "wrong", "imports the answer from companion", """
from companion import attention as A
def my_attention(Q, K, V):
    out = A.scaled_dot_product_attention(Q, K, V)
    return out[0] if isinstance(out, tuple) else out
""")
att("scale_sqrt_m", "wrong", "scales by the number of keys", """
def my_attention(Q, K, V):
    w = torch.softmax(Q @ K.T / math.sqrt(K.shape[0]), dim=-1)
    return w @ V
""")
att("scale_after", "wrong", "scales the output, not the scores", """
def my_attention(Q, K, V):
    w = torch.softmax(Q @ K.T, dim=-1)
    return w @ V / math.sqrt(Q.shape[-1])
""")
att("causal_by_accident", "wrong", "applies a causal mask nobody asked for", """
def my_attention(Q, K, V):
    s = Q @ K.T / math.sqrt(Q.shape[-1])
    mask = torch.ones(s.shape, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ V
""")
att("KQ_transposed", "wrong", "K @ Q.T, then transposes the weights the wrong way",
    """
def my_attention(Q, K, V):
    w = torch.softmax(K @ Q.T / math.sqrt(Q.shape[-1]), dim=-1)
    return w.T @ V
""")
att("sum_not_mean", "wrong", "uses sigmoid instead of softmax", """
def my_attention(Q, K, V):
    return torch.sigmoid(Q @ K.T / math.sqrt(Q.shape[-1])) @ V
""")
att("right_einsum", "right", "einsum everywhere", """
def my_attention(Q, K, V):
    s = torch.einsum("nd,md->nm", Q, K) / K.shape[1] ** 0.5
    return torch.einsum("nm,mv->nv", s.softmax(dim=-1), V)
""")
att("right_own_softmax", "right", "its own stable softmax", """
def _sm(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
def my_attention(Q, K, V):
    d_k = Q.size(-1)
    return _sm(torch.matmul(Q, K.transpose(-2, -1)) / math.sqrt(d_k)) @ V
""")
att("right_prescale_q", "right", "scales Q first", """
def my_attention(Q, K, V):
    q = Q * (1.0 / math.sqrt(Q.shape[-1]))
    return torch.softmax(q @ K.mT, dim=1) @ V
""")


# ---------------------------------------------------------------- 2.3 ----
def causal(name, expect, why, source):
    case("2.3", "causal", name, expect, why, source, "my_causal_mask")


causal("triu", "wrong", "upper triangle: key j >= i (the future)", """
def my_causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).triu()
""")
causal("strict_lower", "wrong", "tril(-1): a token may not see itself", """
def my_causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril(-1)
""")
causal("float_mask", "wrong", "a float 0/1 mask, not boolean", """
def my_causal_mask(T):
    return torch.tril(torch.ones(T, T))
""")
causal("long_mask", "wrong", "an integer mask, not boolean", """
def my_causal_mask(T):
    return torch.tril(torch.ones(T, T, dtype=torch.long))
""")
causal("additive_mask", "wrong", "returns the additive 0/-inf mask", """
def my_causal_mask(T):
    m = torch.zeros(T, T)
    return m.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1),
                         float("-inf"))
""")
causal("inverted", "wrong", "True where the key is masked", """
def my_causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)
""")
causal("numpy", "wrong", "a NumPy array", """
import numpy as np
def my_causal_mask(T):
    return np.tril(np.ones((T, T), dtype=bool))
""")
causal("batched_shape", "wrong", "shape (1, T, T)", """
def my_causal_mask(T):
    return torch.ones(T, T, dtype=torch.bool).tril().unsqueeze(0)
""")
causal("leaks_one", "wrong", "j <= i + 1: one future token leaks", """
def my_causal_mask(T):
    i = torch.arange(T)
    return i[None, :] <= i[:, None] + 1
""")
causal("uint8", "wrong", "old-style uint8 mask", """
def my_causal_mask(T):
    return torch.ones(T, T, dtype=torch.uint8).tril()
""")
causal("companion_import", "wrong", "imports the answer from companion", """
from companion.attention import causal_mask
def my_causal_mask(T):
    return causal_mask(T)
""")
causal("nested_lists", "wrong", "Python lists of bools", """
def my_causal_mask(T):
    return [[j <= i for j in range(T)] for i in range(T)]
""")
causal("off_by_one_size", "wrong", "shape (T + 1, T + 1)", """
def my_causal_mask(T):
    return torch.ones(T + 1, T + 1, dtype=torch.bool).tril()
""")
causal("right_arange", "right", "comparison of two aranges", """
def my_causal_mask(T):
    pos = torch.arange(T)
    return pos.unsqueeze(1) >= pos.unsqueeze(0)
""")
causal("right_not_triu", "right", "complement of the strict upper triangle", """
def my_causal_mask(T):
    return ~torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
""")
causal("right_loop", "right", "a double loop (allowed here)", """
def my_causal_mask(T):
    m = torch.zeros(T, T, dtype=torch.bool)
    for i in range(T):
        for j in range(i + 1):
            m[i, j] = True
    return m
""")


# ---------------------------------------------------------------- 2.4 ----
def pad(name, expect, why, source):
    case("2.4", "padding", name, expect, why, source, "my_padding_mask")


pad("less_equal", "wrong", "<= keeps one padding position", """
def my_padding_mask(lengths, S):
    return torch.arange(S)[None, :] <= lengths[:, None]
""")
pad("inverted", "wrong", "True at the padding", """
def my_padding_mask(lengths, S):
    return torch.arange(S)[None, :] >= lengths[:, None]
""")
pad("transposed", "wrong", "shape (S, B)", """
def my_padding_mask(lengths, S):
    return torch.arange(S)[:, None] < lengths[None, :]
""")
pad("ignores_S", "wrong", "width lengths.max() instead of S", """
def my_padding_mask(lengths, S):
    W = int(lengths.max())
    return torch.arange(W)[None, :] < lengths[:, None]
""")
pad("long_dtype", "wrong", "returns integers, not booleans", """
def my_padding_mask(lengths, S):
    return (torch.arange(S)[None, :] < lengths[:, None]).long()
""")
pad("float_dtype", "wrong", "returns floats, not booleans", """
def my_padding_mask(lengths, S):
    return (torch.arange(S)[None, :] < lengths[:, None]).float()
""")
pad("one_based", "wrong", "positions 1..S: off by one", """
def my_padding_mask(lengths, S):
    return torch.arange(1, S + 1)[None, :] < lengths[:, None]
""")
pad("unsqueeze_in_place", "wrong", "unsqueeze_ changes the caller's lengths", """
def my_padding_mask(lengths, S):
    lengths.unsqueeze_(1)
    return torch.arange(S).unsqueeze(0) < lengths
""")
pad("numpy", "wrong", "a NumPy array", """
import numpy as np
def my_padding_mask(lengths, S):
    return np.arange(S)[None, :] < lengths.numpy()[:, None]
""")
pad("padding_on_left", "wrong", "puts the real tokens at the end", """
def my_padding_mask(lengths, S):
    return torch.arange(S)[None, :] >= (S - lengths)[:, None]
""")
pad("companion_import", "wrong", "imports the answer from companion", """
from companion.attention import padding_mask as my_padding_mask
""")
pad("last_row_only", "wrong", "uses lengths[0] for every row", """
def my_padding_mask(lengths, S):
    row = torch.arange(S) < lengths[0]
    return row.expand(len(lengths), S)
""")
pad("right_cumsum", "right", "cumsum of ones compared with lengths", """
def my_padding_mask(lengths, S):
    counts = torch.ones(len(lengths), S, dtype=torch.long).cumsum(dim=1)
    return counts <= lengths.unsqueeze(1)
""")
pad("right_loop", "right", "a loop over the rows", """
def my_padding_mask(lengths, S):
    mask = torch.zeros(lengths.shape[0], S, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        mask[b, :n] = True
    return mask
""")
pad("right_expand", "right", "expand then compare", """
def my_padding_mask(lengths, S):
    pos = torch.arange(S, device=lengths.device).expand(lengths.numel(), S)
    return pos < lengths.view(-1, 1)
""")


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "2.2": ("attention", "my_attention", "Q, K, V"),
    "2.3": ("causal", "my_causal_mask", "T"),
    "2.4": ("padding", "my_padding_mask", "lengths, S"),
})


# ------------------------------------------------------------- batch 2 ---
att("numpy_roundtrip", "wrong", "computes in NumPy and wraps the result: no gradient, float64", """
import numpy as np
def my_attention(Q, K, V):
    q, k, v = Q.detach().numpy(), K.detach().numpy(), V.detach().numpy()
    s = q @ k.T / np.sqrt(q.shape[-1])
    e = np.exp(s - s.max(-1, keepdims=True))
    return torch.from_numpy((e / e.sum(-1, keepdims=True)) @ v)
""")
causal("T_as_float", "wrong", "torch.ones(T, T) and > instead of >=", """
def my_causal_mask(T):
    i = torch.arange(T)
    return i[:, None] > i[None, :]
""")
pad("lengths_as_last_index", "wrong", "treats lengths as the last real index (j <= L - 0)", """
def my_padding_mask(lengths, S):
    return torch.arange(S).unsqueeze(0) <= lengths.unsqueeze(1) - 0
""")


# --------------------------------------------- issue 28: 2.2, 2.3 and 2.4 replaced ---
# 2.2 now asks for attention over any leading batch axes (after finding the bugs of a 2-D-only
# version), 2.3 for the causal mask of T queries after S - T cached keys, 2.4 for the (B, S, S)
# mask of a padded causal batch. The outside cases above answered the old texts: kept out. The
# cases below were written by the chapters' author, not independently.
CASES = [c for c in CASES if c["exercise"] not in ("2.2", "2.3", "2.4")]


def attn(name, expect, why, source):  # noqa: F811
    case("2.2", "attention", name, expect, why, source, "my_attention")


def causal(name, expect, why, source):  # noqa: F811
    case("2.3", "causal", name, expect, why, source, "my_causal_mask")


def pad(name, expect, why, source):  # noqa: F811
    case("2.4", "padding", name, expect, why, source, "my_padding_mask")


attn("right_mT", "right", "K.mT and d_k ** -0.5", """
def my_attention(Q, K, V):
    return torch.softmax(Q @ K.mT * Q.shape[-1] ** -0.5, dim=-1) @ V
""")
attn("right_einsum", "right", "einsum over '...'", """
def my_attention(Q, K, V):
    s = torch.einsum("...nd,...md->...nm", Q, K) / math.sqrt(Q.size(-1))
    return torch.einsum("...nm,...mv->...nv", s.softmax(-1), V)
""")
attn("buggy_as_given", "wrong", "the chapter's buggy_attention unchanged", """
def my_attention(Q, K, V):
    d_k = V.shape[-1]
    weights = torch.softmax(Q @ K.T / math.sqrt(d_k), dim=1)
    return weights @ V
""")
attn("dim1_fixed_T_only", "wrong", "fixes the transpose, keeps dim=1", """
def my_attention(Q, K, V):
    weights = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=1)
    return weights @ V
""")
attn("transpose_1_2", "wrong", "transpose(1, 2): right for 3-D, wrong for 2-D and 4-D", """
def my_attention(Q, K, V):
    if Q.dim() == 2:
        return torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), -1) @ V
    return torch.softmax(Q @ K.transpose(1, 2) / math.sqrt(Q.shape[-1]), -1) @ V
""")
attn("scale_from_V", "wrong", "keeps V's width as the scale", """
def my_attention(Q, K, V):
    return torch.softmax(Q @ K.mT / math.sqrt(V.shape[-1]), -1) @ V
""")
attn("library", "wrong", "calls the library attention", """
import torch.nn.functional as F
def my_attention(Q, K, V):
    return F.scaled_dot_product_attention(Q, K, V)
""")
causal("right_tril_offset", "right", "tril with a diagonal offset", """
def my_causal_mask(T, S=None):
    S = T if S is None else S
    return torch.ones(T, S, dtype=torch.bool).tril(S - T)
""")
causal("right_last_rows", "right", "the last T rows of the square mask", """
def my_causal_mask(T, S=None):
    S = T if S is None else S
    return torch.ones(S, S, dtype=torch.bool).tril()[S - T:]
""")
causal("top_left", "wrong", "aligned top-left, as is_causal", """
def my_causal_mask(T, S=None):
    S = T if S is None else S
    return torch.ones(T, S, dtype=torch.bool).tril()
""")
causal("first_rows", "wrong", "the first T rows of the square mask", """
def my_causal_mask(T, S=None):
    S = T if S is None else S
    return torch.ones(S, S, dtype=torch.bool).tril()[:T]
""")
causal("square_only", "wrong", "ignores S", """
def my_causal_mask(T, S=None):
    return torch.ones(T, T, dtype=torch.bool).tril()
""")
causal("offset_sign", "wrong", "offset with the wrong sign", """
def my_causal_mask(T, S=None):
    S = T if S is None else S
    return torch.ones(T, S, dtype=torch.bool).tril(T - S)
""")
pad("right_broadcast", "right", "key mask & causal mask, broadcast", """
def my_padding_mask(lengths, S):
    keys = torch.arange(S)[None, :] < lengths[:, None]
    return keys[:, None, :] & torch.ones(S, S, dtype=torch.bool).tril()
""")
pad("right_loop", "right", "a loop over the batch", """
def my_padding_mask(lengths, S):
    rows = []
    for L in lengths.tolist():
        m = torch.ones(S, S, dtype=torch.bool).tril()
        m[:, L:] = False
        rows.append(m)
    return torch.stack(rows)
""")
pad("keys_only", "wrong", "the (B, S) key mask", """
def my_padding_mask(lengths, S):
    return torch.arange(S)[None, :] < lengths[:, None]
""")
pad("queries_too", "wrong", "hides the padded queries' rows too", """
def my_padding_mask(lengths, S):
    real = torch.arange(S)[None, :] < lengths[:, None]
    return real[:, None, :] & real[:, :, None] & torch.ones(S, S, dtype=torch.bool).tril()
""")
pad("max_length", "wrong", "uses lengths.max() instead of S", """
def my_padding_mask(lengths, S):
    S2 = int(lengths.max())
    keys = torch.arange(S2)[None, :] < lengths[:, None]
    return keys[:, None, :] & torch.ones(S2, S2, dtype=torch.bool).tril()
""")
pad("or_instead_of_and", "wrong", "combines the two rules with or", """
def my_padding_mask(lengths, S):
    keys = torch.arange(S)[None, :] <= lengths[:, None] - 1
    return keys[:, None, :] | ~torch.ones(S, S, dtype=torch.bool).tril()
""")

CASES += junk_cases(MODULE, {
    "2.2": ("attention", "my_attention", "Q, K, V"),
    "2.3": ("causal", "my_causal_mask", "T, S=None"),
    "2.4": ("padding", "my_padding_mask", "lengths, S"),
})
