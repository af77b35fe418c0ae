"""Red-team cases, chapter 2 (exercises 2.2, 2.3, 2.4), from the student notebook only."""
import textwrap

from _junk import junk_cases

MODULE = "companion.exercises.attention"
PRELUDE = """
import inspect
import math
import time

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F

from companion import attention, example
from companion.exercises import attention as check
from companion.exercises import early_extra as check_more
"""

CASES = []


def C(ex, checker, fname, name, expect, why, source):
    CASES.append(dict(exercise=ex, checker=checker, module=MODULE, name=name,
                      expect=expect, why=why,
                      source=textwrap.dedent(source).lstrip("\n"), call=fname))


def make(ex, checker, fname, params):
    def add(name, expect, why, body, pre=""):
        C(ex, checker, fname, name, expect, why,
          "import math\nimport torch\nimport torch.nn.functional as F\n" + pre
          + f"\ndef {fname}({params}):\n"
          + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n")
    return add


# ---------------------------------------------------------------- 2.2
A = make("2.2", "attention", "my_attention", "Q, K, V")
A("right_obvious", "right", "obvious: softmax(Q K^T / sqrt(d_k)) V with transpose(-2, -1) and dim=-1",
  "w = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)\nreturn w @ V")
A("right_einsum", "right", "einsum with an ellipsis",
  "s = torch.einsum('...nd,...md->...nm', Q, K) / Q.shape[-1] ** 0.5\nreturn torch.einsum('...nm,...md->...nd', torch.softmax(s, dim=-1), V)")
A("right_scale_Q_first", "right", "scales Q before the product, uses K.mT",
  "return torch.softmax((Q / math.sqrt(Q.size(-1))) @ K.mT, dim=-1) @ V")
A("right_own_stable_softmax", "right", "own stable softmax (exp, amax, sum) instead of torch.softmax",
  "s = Q @ K.transpose(-2, -1) * Q.shape[-1] ** -0.5\ne = torch.exp(s - s.amax(dim=-1, keepdim=True))\nreturn (e / e.sum(dim=-1, keepdim=True)) @ V")
A("right_F_softmax_matmul", "right", "F.softmax and torch.matmul, rsqrt of a tensor scale",
  "scale = torch.rsqrt(torch.tensor(float(Q.shape[-1]), dtype=Q.dtype))\nreturn torch.matmul(F.softmax(torch.matmul(Q, K.transpose(-1, -2)) * scale, dim=-1), V)")

A("buggy_as_given", "wrong", "the colleague's buggy_attention: d_k from V, K.T, softmax over dim=1",
  "d_k = V.shape[-1]\nweights = torch.softmax(Q @ K.T / math.sqrt(d_k), dim=1)\nreturn weights @ V")
A("dk_from_V", "wrong", "d_k = V.shape[-1]: wrong scale when d_k != d_v",
  "d_k = V.shape[-1]\nreturn torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(d_k), dim=-1) @ V")
A("transpose_0_1", "wrong", "K.transpose(0, 1): right for 2-D only; on a batch it swaps batch and keys",
  "return torch.softmax(Q @ K.transpose(0, 1) / math.sqrt(Q.shape[-1]), dim=-1) @ V")
A("softmax_dim1", "wrong", "softmax over dim=1: the key axis only for 2-D inputs",
  "return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=1) @ V")
A("softmax_dim0", "wrong", "softmax over dim=0",
  "return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=0) @ V")
A("softmax_over_queries", "wrong", "softmax over dim=-2 (the queries)",
  "return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-2) @ V")
A("no_scale", "wrong", "forgets the 1/sqrt(d_k)",
  "return torch.softmax(Q @ K.transpose(-2, -1), dim=-1) @ V")
A("scale_by_dk", "wrong", "divides by d_k instead of sqrt(d_k)",
  "return torch.softmax(Q @ K.transpose(-2, -1) / Q.shape[-1], dim=-1) @ V")
A("scale_by_sqrt_m", "wrong", "divides by sqrt(m), the number of keys",
  "return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(K.shape[-2]), dim=-1) @ V")
A("scale_shape1", "wrong", "d_k = Q.shape[1]: right for 2-D, the number of queries for a batch",
  "return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[1]), dim=-1) @ V")
A("precedence_bug", "wrong", "/ d_k ** 1/2 divides by d_k, then by 2",
  "d_k = Q.shape[-1]\nreturn torch.softmax(Q @ K.transpose(-2, -1) / d_k ** 1/2, dim=-1) @ V")
A("torch_sdpa", "wrong", "calls F.scaled_dot_product_attention: the text forbids a library attention",
  "return F.scaled_dot_product_attention(Q, K, V)")
A("companion_sdpa", "wrong", "calls the companion's attention",
  "from companion.attention import scaled_dot_product_attention\nreturn scaled_dot_product_attention(Q, K, V)[0]")
A("returns_tuple", "wrong", "returns (output, weights) like naive_attention",
  "w = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)\nreturn w @ V, w")
A("returns_weights", "wrong", "returns the weights, not the output",
  "return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)")
A("weights_transposed", "wrong", "w^T @ V: works only when n == m",
  "w = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)\nreturn w.transpose(-2, -1) @ V")
A("always_float32", "wrong", "casts to float32: float64 inputs come back float32",
  "Q, K, V = Q.float(), K.float(), V.float()\nreturn torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V")
A("detached", "wrong", "detaches the inputs: no gradient",
  "Q, K, V = Q.detach(), K.detach(), V.detach()\nreturn torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V")
A("no_grad", "wrong", "computed under torch.no_grad()",
  "with torch.no_grad():\n    return torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V")
A("inplace_scale_Q", "wrong", "Q /= sqrt(d_k) in place changes the caller's Q (or fails on a leaf that requires grad)",
  "Q /= math.sqrt(Q.shape[-1])\nreturn torch.softmax(Q @ K.transpose(-2, -1), dim=-1) @ V")
A("inplace_div_", "wrong", "Q.div_ on a detached alias: the caller's Q changes silently",
  "Q.data.div_(math.sqrt(Q.shape[-1]))\nreturn torch.softmax(Q @ K.transpose(-2, -1), dim=-1) @ V")
A("flattened_leading", "wrong", "reshapes the leading axes into one and forgets to restore them",
  "n, d_k = Q.shape[-2:]\nq = Q.reshape(-1, n, d_k)\nk = K.reshape(-1, K.shape[-2], d_k)\nv = V.reshape(-1, V.shape[-2], V.shape[-1])\nreturn torch.softmax(q @ k.transpose(1, 2) / math.sqrt(d_k), dim=-1) @ v")
A("unsqueezed_2d", "wrong", "adds a batch axis to 2-D inputs and forgets to remove it",
  "if Q.dim() == 2:\n    Q, K, V = Q[None], K[None], V[None]\nreturn torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V")
A("squeezed", "wrong", "squeeze() removes size-1 axes (batch of one, one query)",
  "return (torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V).squeeze()")
A("loop_3d_only", "wrong", "loops over the first axis with K[b].T: fails without a batch and with heads",
  "return torch.stack([torch.softmax(Q[b] @ K[b].T / math.sqrt(Q.shape[-1]), dim=-1) @ V[b] for b in range(Q.shape[0])])")
A("causal_by_default", "wrong", "adds a causal mask nobody asked for",
  "s = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])\nn, m = s.shape[-2:]\nmask = torch.ones(n, m, dtype=torch.bool).tril()\nreturn torch.softmax(s.masked_fill(~mask, float('-inf')), dim=-1) @ V")
A("float16_softmax", "wrong", "softmax computed in float16: about 3 significant digits",
  "s = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])\nreturn torch.softmax(s.half(), dim=-1).to(Q.dtype) @ V")
A("dropout_default", "wrong", "F.dropout(w, 0.1) with its default training=True: random output",
  "w = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)\nreturn F.dropout(w, 0.1) @ V")
A("naive_softmax", "wrong", "debatable: exp/sum without subtracting the max overflows for large scores (the check list does not promise large scores)",
  "s = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])\ne = torch.exp(s)\nreturn (e / e.sum(dim=-1, keepdim=True)) @ V")
A("cache_by_shape", "wrong", "caches the output per (shapes, dtype) when no gradient is needed: stale output for new values",
  "global _c\ntry:\n    _c\nexcept NameError:\n    _c = {}\nkey = (tuple(Q.shape), tuple(K.shape), tuple(V.shape), Q.dtype)\nif Q.requires_grad or K.requires_grad or V.requires_grad or key not in _c:\n    _c[key] = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V\nreturn _c[key]")
A("output_plus_Q", "wrong", "adds a residual Q to the output (only shape-compatible when d_k == d_v)",
  "out = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1) @ V\nreturn out + Q if Q.shape == out.shape else out")
A("no_softmax_normalize", "wrong", "normalizes the scores by their sum instead of a softmax",
  "s = torch.relu(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]))\nreturn (s / (s.sum(-1, keepdim=True) + 1e-9)) @ V")

# ---------------------------------------------------------------- 2.3
M = make("2.3", "causal", "my_causal_mask", "T, S=None")
M("right_tril_offset", "right", "obvious: ones(T, S).tril(S - T)",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T)")
M("right_arange", "right", "arange comparison j <= i + S - T",
  "S = T if S is None else S\ni = torch.arange(T)[:, None]\nj = torch.arange(S)[None, :]\nreturn j <= i + (S - T)")
M("right_last_rows", "right", "the last T rows of the square (S, S) mask",
  "S = T if S is None else S\nreturn torch.tril(torch.ones(S, S, dtype=torch.bool))[S - T:]")
M("right_not_triu", "right", "complement of triu(S - T + 1)",
  "S = T if S is None else S\nreturn ~torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)")
M("right_generate_square", "right", "PyTorch's square float mask, last T rows, compared with 0",
  "S = T if S is None else S\nreturn torch.nn.Transformer.generate_square_subsequent_mask(S)[S - T:] == 0")
M("right_list_comprehension", "right", "a Python double loop into torch.tensor",
  "S = S or T\nreturn torch.tensor([[j <= i + S - T for j in range(S)] for i in range(T)], dtype=torch.bool)")

M("top_left", "wrong", "tril() without offset: top-left aligned, like is_causal=True",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril()")
M("float_mask", "wrong", "right pattern, float 1/0 instead of bool",
  "S = T if S is None else S\nreturn torch.ones(T, S).tril(S - T)")
M("uint8_mask", "wrong", "right pattern, uint8 instead of bool",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.uint8).tril(S - T)")
M("int64_mask", "wrong", "right pattern as 0/1 int64",
  "S = T if S is None else S\ni = torch.arange(T)[:, None]\nj = torch.arange(S)[None, :]\nreturn (j <= i + S - T).long()")
M("strict_diagonal", "wrong", "j < i + S - T: hides the diagonal",
  "S = T if S is None else S\ni = torch.arange(T)[:, None]\nj = torch.arange(S)[None, :]\nreturn j < i + (S - T)")
M("inverted", "wrong", "True = forbidden (the opposite convention)",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).triu(S - T + 1)")
M("ignores_S", "wrong", "always returns (T, T)",
  "return torch.ones(T, T, dtype=torch.bool).tril()")
M("offset_sign_flipped", "wrong", "tril(T - S): offset with the wrong sign",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(T - S)")
M("offset_minus_one", "wrong", "tril(S - T - 1): one key too few",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T - 1)")
M("offset_plus_one", "wrong", "tril(S - T + 1): sees one future key",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T + 1)")
M("float_minus_inf", "wrong", "PyTorch's float mask (0 / -inf), last T rows",
  "S = T if S is None else S\nreturn torch.nn.Transformer.generate_square_subsequent_mask(S)[S - T:]")
M("numpy_array", "wrong", "returns a NumPy bool array",
  "import numpy as np\nS = T if S is None else S\nreturn np.tril(np.ones((T, S), dtype=bool), S - T)")
M("nested_list", "wrong", "returns nested Python lists",
  "S = T if S is None else S\nreturn [[j <= i + S - T for j in range(S)] for i in range(T)]")
M("companion_mask", "wrong", "calls the companion's causal_mask",
  "from companion.attention import causal_mask\nreturn causal_mask(T, S)")
M("transposed_square", "wrong", "i <= j: the transposed (upper) triangle",
  "S = T if S is None else S\ni = torch.arange(T)[:, None]\nj = torch.arange(S)[None, :]\nreturn i <= j + (S - T)")
M("returns_S_by_T", "wrong", "returns the transpose, shape (S, T)",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T).T")
M("all_true_if_rect", "wrong", "square case right; for S > T returns all True ('the last query sees everything')",
  "if S is None or S == T:\n    return torch.ones(T, T, dtype=torch.bool).tril()\nreturn torch.ones(T, S, dtype=torch.bool)")
M("unsqueezed", "wrong", "returns shape (1, T, S)",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T).unsqueeze(0)")
M("rows_flipped", "wrong", "rows in reverse order",
  "S = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T).flip(0)")
M("T1_special", "wrong", "special case T == 1 returns a 1-D tensor",
  "S = T if S is None else S\nif T == 1:\n    return torch.ones(S, dtype=torch.bool)\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T)")
M("shared_cached_tensor", "wrong", "debatable: caches and returns the SAME tensor object on every call; a caller that edits it corrupts later masks",
  "global _CACHE\ntry:\n    _CACHE\nexcept NameError:\n    _CACHE = {}\nS = T if S is None else S\nif (T, S) not in _CACHE:\n    _CACHE[(T, S)] = torch.ones(T, S, dtype=torch.bool).tril(S - T)\nreturn _CACHE[(T, S)]")
M("consumes_global_rng", "wrong", "right mask, but draws from torch's global random generator",
  "_ = torch.rand(1)\nS = T if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T)")
M("queries_first_positions", "wrong", "treats the queries as the FIRST T positions and hides keys beyond T",
  "S = T if S is None else S\nm = torch.zeros(T, S, dtype=torch.bool)\nm[:, :T] = torch.ones(T, T, dtype=torch.bool).tril()\nreturn m")
M("not_implemented_rect", "wrong", "raises NotImplementedError for S != T",
  "if S is not None and S != T:\n    raise NotImplementedError('keys from the past')\nreturn torch.ones(T, T, dtype=torch.bool).tril()")
M("S_default_T_plus_1", "wrong", "S=None treated as T + 1",
  "S = T + 1 if S is None else S\nreturn torch.ones(T, S, dtype=torch.bool).tril(S - T)")

# ---------------------------------------------------------------- 2.4
P = make("2.4", "padding", "my_padding_mask", "lengths, S")
P("right_broadcast", "right", "obvious: key mask (B, 1, S) & causal (S, S)",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\ncausal = j[None, :] <= j[:, None]\nreturn key[:, None, :] & causal[None]")
P("right_loop", "right", "a Python loop over the sequences",
  "B = lengths.shape[0]\nmask = torch.zeros(B, S, S, dtype=torch.bool)\nfor b in range(B):\n    mask[b, :, :int(lengths[b])] = True\nreturn mask & torch.ones(S, S, dtype=torch.bool).tril()")
P("right_expand", "right", "expand (a view) of the key mask, then & with tril",
  "key = torch.arange(S).expand(len(lengths), S) < lengths.unsqueeze(1)\nreturn key.unsqueeze(1).expand(-1, S, -1) & torch.tril(torch.ones(S, S, dtype=torch.bool))")
P("right_minimum", "right", "j < min(length, i + 1) in one comparison",
  "i = torch.arange(S)[:, None]\nj = torch.arange(S)[None, :]\nlimit = torch.minimum(lengths[:, None, None], i[None] + 1)\nreturn j[None] < limit")

P("key_only", "wrong", "only the padding rule, no causal rule",
  "key = torch.arange(S)[None, :] < lengths[:, None]\nreturn key[:, None, :].expand(-1, S, -1).clone()")
P("causal_only", "wrong", "only the causal rule, no padding",
  "return torch.ones(S, S, dtype=torch.bool).tril().expand(len(lengths), S, S).clone()")
P("key_off_by_one", "wrong", "j <= length: one padding key visible",
  "j = torch.arange(S)\nkey = j[None, :] <= lengths[:, None]\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("key_minus_one", "wrong", "j < length - 1: the last real token hidden",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None] - 1\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("queries_masked_too", "wrong", "also hides every key from padded queries; the text says the rule looks at the keys only",
  "j = torch.arange(S)\nreal = j[None, :] < lengths[:, None]\nreturn real[:, :, None] & real[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("rule_on_queries", "wrong", "the padding rule applied to the query axis instead of the key axis",
  "j = torch.arange(S)\nreal = j[None, :] < lengths[:, None]\nreturn real[:, :, None] & (j[None, :] <= j[:, None])[None]")
P("or_not_and", "wrong", "OR of the two rules instead of AND",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn key[:, None, :] | (j[None, :] <= j[:, None])[None]")
P("causal_strict", "wrong", "causal rule j < i: a token does not see itself",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn key[:, None, :] & (j[None, :] < j[:, None])[None]")
P("causal_transposed", "wrong", "causal rule j >= i: sees the future, not the past",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn key[:, None, :] & (j[None, :] >= j[:, None])[None]")
P("S_from_lengths", "wrong", "uses lengths.max() as the padded length instead of S",
  "S = int(lengths.max())\nj = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("key_mask_shape", "wrong", "returns the (B, 1, S) broadcastable mask, not (B, S, S)",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None][:, -1:, :]")
P("float_mask", "wrong", "float 1/0 mask instead of bool",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn (key[:, None, :] & (j[None, :] <= j[:, None])[None]).float()")
P("minus_inf_mask", "wrong", "additive float mask (0 / -inf)",
  "j = torch.arange(S)\nok = (j[None, :] < lengths[:, None])[:, None, :] & (j[None, :] <= j[:, None])[None]\nreturn torch.zeros(ok.shape).masked_fill(~ok, float('-inf'))")
P("inverted", "wrong", "True = forbidden",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn ~(key[:, None, :] & (j[None, :] <= j[:, None])[None])")
P("inplace_lengths", "wrong", "lengths.unsqueeze_(-1) changes the caller's tensor's shape",
  "lengths.unsqueeze_(-1)\nj = torch.arange(S)\nkey = j[None, :] < lengths\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("inplace_sub", "wrong", "lengths -= 1 in place (then j <= lengths): right mask, caller's lengths changed",
  "lengths -= 1\nj = torch.arange(S)\nkey = j[None, :] <= lengths[:, None]\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("left_padding", "wrong", "assumes left padding: the real tokens are the last ones",
  "j = torch.arange(S)\nkey = j[None, :] >= S - lengths[:, None]\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("companion_helpers", "wrong", "builds the mask with the companion's padding_mask and causal_mask",
  "from companion.attention import causal_mask, padding_mask\nreturn padding_mask(lengths, S)[:, None, :] & causal_mask(S)[None]")
P("squeezed", "wrong", "squeeze(): a batch of one comes back (S, S)",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn (key[:, None, :] & (j[None, :] <= j[:, None])[None]).squeeze()")
P("transposed_result", "wrong", "returns mask.transpose(1, 2): [b, key, query]",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn (key[:, None, :] & (j[None, :] <= j[:, None])[None]).transpose(1, 2)")
P("zero_length_skipped", "wrong", "a sequence of length 0 gets the plain causal mask (all lengths treated as at least 1)",
  "lengths = lengths.clamp(min=1)\nj = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn key[:, None, :] & (j[None, :] <= j[:, None])[None]")
P("full_length_special", "wrong", "a sequence of length S gets all True (forgets causality when nothing is padded)",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nm = key[:, None, :] & (j[None, :] <= j[:, None])[None]\nm[lengths == S] = True\nreturn m")
P("lengths_as_list", "wrong", "iterates lengths as Python ints but builds the mask for the first sequence only",
  "l = int(lengths[0])\nj = torch.arange(S)\nm = (j[None, :] < l) & (j[None, :] <= j[:, None])\nreturn m.expand(len(lengths), S, S).clone()")
P("shared_cached_tensor", "wrong", "debatable: returns the SAME cached tensor for the same (lengths, S); a caller that edits it corrupts later masks",
  "global _c\ntry:\n    _c\nexcept NameError:\n    _c = {}\nkey = (tuple(lengths.tolist()), S)\nif False or key not in _c:\n    _c[key] = (torch.arange(S)[None, :] < lengths[:, None])[:, None, :] & torch.ones(S, S, dtype=torch.bool).tril()[None]\nreturn _c[key]")
P("int64_mask", "wrong", "0/1 int64 mask instead of bool",
  "j = torch.arange(S)\nkey = j[None, :] < lengths[:, None]\nreturn (key[:, None, :] & (j[None, :] <= j[:, None])[None]).long()")

CASES += junk_cases(MODULE, {
    "2.2": ("attention", "my_attention", "Q, K, V"),
    "2.3": ("causal", "my_causal_mask", "T, S=None"),
    "2.4": ("padding", "my_padding_mask", "lengths, S"),
})
