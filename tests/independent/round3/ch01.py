"""Red-team cases, chapter 1 (exercises 1.3 and 1.4), from the student notebook only."""
import textwrap

from _junk import junk_cases

MODULE = "companion.exercises.vectors"
PRELUDE = """
import math

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch

from companion import example, vectors
from companion.exercises import early_extra as check_more
from companion.exercises import vectors as check
"""

CASES = []


def C(ex, checker, fname, name, expect, why, source):
    CASES.append(dict(exercise=ex, checker=checker, module=MODULE, name=name,
                      expect=expect, why=why,
                      source=textwrap.dedent(source).lstrip("\n"), call=fname))


# ---------------------------------------------------------------- 1.3
def A(name, expect, why, body):
    C("1.3", "all_pairs", "my_all_scores", name, expect, why,
      "import torch\nimport math\n\ndef my_all_scores(Q, K):\n"
      + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n")


A("right_permute", "right", "obvious: permute to batch first and matmul",
  "return Q.permute(1, 0, 2) @ K.permute(1, 2, 0)")
A("right_einsum", "right", "einsum instead of permute",
  "return torch.einsum('nbd,mbd->bnm', Q, K)")
A("right_bmm", "right", "torch.bmm on transposed, contiguous copies",
  "Qb = Q.transpose(0, 1).contiguous()\nKb = K.transpose(0, 1).contiguous()\nreturn torch.bmm(Qb, Kb.transpose(1, 2))")
A("right_broadcast_sum", "right", "elementwise product and sum over d, no matmul",
  "return (Q.permute(1, 0, 2)[:, :, None, :] * K.permute(1, 0, 2)[:, None, :, :]).sum(-1)")
A("right_loop_stack", "right", "a Python loop over the batch (the text says no loop is NEEDED, not forbidden)",
  "return torch.stack([Q[:, b] @ K[:, b].T for b in range(Q.shape[1])])")
A("right_movedim", "right", "movedim instead of permute",
  "return torch.matmul(Q.movedim(0, 1), K.movedim(0, 2))")

A("plain_transpose", "wrong", "Q @ K.transpose(-2,-1) on sequence-first tensors: (n, B, B), the prediction asked about",
  "return Q @ K.transpose(-2, -1)")
A("einsum_out_nbm", "wrong", "einsum with output order (n, B, m) instead of (B, n, m)",
  "return torch.einsum('nbd,mbd->nbm', Q, K)")
A("einsum_out_bmn", "wrong", "output transposed: (B, m, n), same shape when n == m",
  "return torch.einsum('nbd,mbd->bmn', Q, K)")
A("keys_times_queries", "wrong", "K Q^T instead of Q K^T: S transposed",
  "return K.permute(1, 0, 2) @ Q.permute(1, 2, 0)")
A("reshape_not_permute", "wrong", "reshape (n,B,d)->(B,n,d) scrambles tokens and sequences instead of permuting",
  "n, B, d = Q.shape\nm = K.shape[0]\nreturn Q.reshape(B, n, d) @ K.reshape(B, m, d).transpose(1, 2)")
A("reshape_K_only", "wrong", "K.reshape(B, d, m) instead of a transpose",
  "n, B, d = Q.shape\nm = K.shape[0]\nreturn Q.transpose(0, 1) @ K.reshape(B, d, m)")
A("K_axes_mixed", "wrong", "K.transpose(1, 2) on (m,B,d): batch of K is m, keys are B; right shape when m == B",
  "return Q.transpose(0, 1) @ K.transpose(1, 2)")
A("scaled_by_sqrt_d", "wrong", "divides by sqrt(d): the exercise asks for plain dot products",
  "return Q.permute(1, 0, 2) @ K.permute(1, 2, 0) / math.sqrt(Q.shape[-1])")
A("cosine_not_dot", "wrong", "normalizes the vectors: cosine similarities, not dot products",
  "Qn = Q / Q.norm(dim=-1, keepdim=True)\nKn = K / K.norm(dim=-1, keepdim=True)\nreturn Qn.permute(1, 0, 2) @ Kn.permute(1, 2, 0)")
A("always_float32", "wrong", "casts to float32: float64 inputs come back float32",
  "return (Q.float().permute(1, 0, 2) @ K.float().permute(1, 2, 0))")
A("always_float64", "wrong", "computes and returns float64 for float32 inputs",
  "return Q.double().permute(1, 0, 2) @ K.double().permute(1, 2, 0)")
A("half_precision", "wrong", "computes in float16 and casts back: loses precision",
  "return (Q.half().permute(1, 0, 2) @ K.half().permute(1, 2, 0)).to(Q.dtype)")
A("bfloat16_precision", "wrong", "computes in bfloat16 and casts back: 3 significant digits",
  "return (Q.bfloat16().permute(1, 0, 2) @ K.bfloat16().permute(1, 2, 0)).to(Q.dtype)")
A("detached", "wrong", "detaches: no gradient flows to Q and K",
  "return Q.detach().permute(1, 0, 2) @ K.detach().permute(1, 2, 0)")
A("no_grad", "wrong", "computed under torch.no_grad(): no graph",
  "with torch.no_grad():\n    return Q.permute(1, 0, 2) @ K.permute(1, 2, 0)")
A("via_numpy", "wrong", "through NumPy: breaks autograd (and fails on requires_grad)",
  "import numpy as np\nq = Q.detach().numpy().transpose(1, 0, 2)\nk = K.detach().numpy().transpose(1, 2, 0)\nreturn torch.from_numpy(q @ k)")
A("inplace_transpose", "wrong", "Q.transpose_(0, 1) changes the caller's tensor in place",
  "Q.transpose_(0, 1)\nK.transpose_(0, 1)\nreturn Q @ K.transpose(1, 2)")
A("squeezed", "wrong", "squeeze() drops size-1 axes: a batch of one or one query loses its axis",
  "return (Q.permute(1, 0, 2) @ K.permute(1, 2, 0)).squeeze()")
A("batch_from_n", "wrong", "loops over Q.shape[0] (n) as if it were the batch",
  "return torch.stack([Q[:, b] @ K[:, b].T for b in range(Q.shape[0])])")
A("list_of_tensors", "wrong", "returns a list of B matrices, not a tensor",
  "return [Q[:, b] @ K[:, b].T for b in range(Q.shape[1])]")
A("numpy_result", "wrong", "returns a NumPy array",
  "return (Q.permute(1, 0, 2) @ K.permute(1, 2, 0)).detach().numpy()")
A("cache_by_shape", "wrong", "caches the first result per shape: later calls with new values get stale scores",
  "global _cache\ntry:\n    _cache\nexcept NameError:\n    _cache = {}\nkey = (tuple(Q.shape), tuple(K.shape), Q.dtype)\nif key not in _cache:\n    _cache[key] = Q.permute(1, 0, 2) @ K.permute(1, 2, 0)\nreturn _cache[key]")
A("cache_by_shape_and_grad", "wrong", "caches the result per (shapes, dtype, requires_grad): stale scores when new values come with the same shapes",
  "global _cache2\ntry:\n    _cache2\nexcept NameError:\n    _cache2 = {}\nkey = (tuple(Q.shape), tuple(K.shape), Q.dtype, Q.requires_grad, K.requires_grad)\nif key not in _cache2 or Q.requires_grad or K.requires_grad:\n    _cache2[key] = Q.permute(1, 0, 2) @ K.permute(1, 2, 0)\nreturn _cache2[key]")
A("drops_last_query", "wrong", "off by one: Q[:-1] drops the last query",
  "return Q[:-1].permute(1, 0, 2) @ K.permute(1, 2, 0)")
A("first_batch_only", "wrong", "computes sequence 0 and repeats it for every sequence",
  "S0 = Q[:, 0] @ K[:, 0].T\nreturn S0.unsqueeze(0).expand(Q.shape[1], -1, -1)")
A("rebuilt_tensor", "wrong", "rebuilds the result with torch.tensor(...tolist()): no gradient, float32 always",
  "S = Q.permute(1, 0, 2) @ K.permute(1, 2, 0)\nreturn torch.tensor(S.tolist())")
A("consumes_global_rng", "wrong", "debatable: right values but draws from the global RNG (a side effect a pure function should not have)",
  "noise = torch.randn(1) * 0\nreturn Q.permute(1, 0, 2) @ K.permute(1, 2, 0) + noise.to(Q.dtype)")

# ---------------------------------------------------------------- 1.4
def S(name, expect, why, body, imports="import math\n"):
    C("1.4", "scaled_scores", "my_scale", name, expect, why,
      imports + "\ndef my_scale(d, var_q, var_k):\n"
      + "    # Var(q_i k_i) = var_q var_k, so Var(q . k) = d var_q var_k\n"
      + textwrap.indent(textwrap.dedent(body).strip("\n"), "    ") + "\n")


S("right_sqrt", "right", "obvious: sqrt(d var_q var_k)", "return math.sqrt(d * var_q * var_k)")
S("right_pow", "right", "** 0.5 instead of math.sqrt", "return (d * var_q * var_k) ** 0.5")
S("right_product_of_roots", "right", "product of three square roots", "return math.sqrt(d) * math.sqrt(var_q) * math.sqrt(var_k)")
S("right_numpy_float", "right", "returns a NumPy float64", "return np.sqrt(np.float64(d) * var_q * var_k)", imports="import numpy as np\n")
S("right_logs", "right", "through logarithms: exp((log d + log var_q + log var_k) / 2)",
  "return math.exp(0.5 * (math.log(d) + math.log(var_q) + math.log(var_k)))")
S("right_lru_cache", "right", "the right formula behind functools.lru_cache (pure, so caching is harmless)",
  "return _scale(d, var_q, var_k)\n", imports="import math\nimport functools\n\n@functools.lru_cache(maxsize=None)\ndef _scale(d, a, b):\n    return math.sqrt(d * a * b)\n")
S("right_tensor_0d", "right", "debatable: a 0-d float64 tensor instead of a Python number (the text says 'the number')",
  "return torch.sqrt(torch.tensor(d * var_q * var_k, dtype=torch.float64))", imports="import torch\n")

S("sqrt_d_only", "wrong", "ignores the variances: sqrt(d)", "return math.sqrt(d)")
S("vars_not_rooted", "wrong", "sqrt(d) var_q var_k: the variances not under the root", "return math.sqrt(d) * var_q * var_k")
S("no_sqrt", "wrong", "d var_q var_k: the variance itself, not its root", "return d * var_q * var_k")
S("adds_variances", "wrong", "sqrt(d (var_q + var_k)): adds the variances", "return math.sqrt(d * (var_q + var_k))")
S("mean_of_variances", "wrong", "sqrt(d (var_q + var_k) / 2)", "return math.sqrt(d * (var_q + var_k) / 2)")
S("ignores_var_k", "wrong", "sqrt(d var_q): forgets the keys' variance", "return math.sqrt(d * var_q)")
S("d_minus_one", "wrong", "sqrt((d - 1) var_q var_k): off by one", "return math.sqrt((d - 1) * var_q * var_k)")
S("reciprocal", "wrong", "returns the multiplier 1/sqrt(...) instead of the divisor", "return 1 / math.sqrt(d * var_q * var_k)")
S("int_truncated", "wrong", "int() truncates the scale", "return int(math.sqrt(d * var_q * var_k))")
S("rounded_2dp", "wrong", "rounds to 2 decimals: small variances give 0 or far off", "return round(math.sqrt(d * var_q * var_k), 2)")
S("std_confusion", "wrong", "treats the variances as standard deviations: sqrt(d sqrt(var_q var_k))", "return math.sqrt(d * math.sqrt(var_q * var_k))")
S("d1_special", "wrong", "special case d == 1 returns 1 whatever the variances", "if d == 1:\n    return 1.0\nreturn math.sqrt(d * var_q * var_k)")
S("monte_carlo", "wrong", "estimates the variance from 2,000 random pairs: noisy, and draws from the global RNG",
  "q = torch.randn(2000, d, dtype=torch.float64) * math.sqrt(var_q)\nk = torch.randn(2000, d, dtype=torch.float64) * math.sqrt(var_k)\nreturn (q * k).sum(-1).var().sqrt().item()", imports="import math\nimport torch\n")
S("isqrt", "wrong", "math.isqrt: integer square root of d, wrong for non-square d",
  "return math.isqrt(d) * math.sqrt(var_q * var_k)")
S("precedence_bug", "wrong", "(x) ** 1/2 is x / 2, not sqrt(x)", "return (d * var_q * var_k) ** 1/2")
S("negative_scale", "wrong", "debatable: -sqrt(...) also gives variance 1, but a negative divisor flips every score",
  "return -math.sqrt(d * var_q * var_k)")
S("eps_added", "wrong", "adds 1e-5 under the root: far off for tiny variances (0.02**2 each)",
  "return math.sqrt(d * var_q * var_k + 1e-5)")
S("var_q_twice", "wrong", "typo: var_q * var_q", "return math.sqrt(d * var_q * var_q)")
S("float16_result", "wrong", "debatable: the right value rounded to float16 (3 significant digits)",
  "return float(np.float16(math.sqrt(d * var_q * var_k)))", imports="import math\nimport numpy as np\n")
S("hardcoded_cases", "wrong", "games the check: sqrt(d) for unit variances, sqrt(d)/3 otherwise (the nn.Linear case)",
  "if var_q == 1 and var_k == 1:\n    return math.sqrt(d)\nreturn math.sqrt(d) / 3")
S("unequal_vars_ignored", "wrong", "sqrt(d var_q var_k) only when var_q == var_k, sqrt(d) otherwise",
  "if var_q == var_k:\n    return math.sqrt(d * var_q * var_k)\nreturn math.sqrt(d)")
S("mean_variance_linear", "wrong", "sqrt(d) * (var_q + var_k) / 2: right only when var_q == var_k == 1/3... or the product is 1 with equal variances",
  "return math.sqrt(d) * (var_q + var_k) / 2")
S("max_variance", "wrong", "sqrt(d) * max(var_q, var_k)", "return math.sqrt(d) * max(var_q, var_k)")
S("returns_tuple", "wrong", "returns (scale, variance) instead of the scale", "return math.sqrt(d * var_q * var_k), d * var_q * var_k")
S("string_result", "wrong", "returns the formatted number as a string", "return f'{math.sqrt(d * var_q * var_k):.6f}'")
S("not_implemented_branch", "wrong", "raises NotImplementedError when the variances differ",
  "if var_q != var_k:\n    raise NotImplementedError('different variances')\nreturn math.sqrt(d) * var_q")

CASES += junk_cases(MODULE, {
    "1.3": ("all_pairs", "my_all_scores", "Q, K"),
    "1.4": ("scaled_scores", "my_scale", "d, var_q, var_k"),
})
