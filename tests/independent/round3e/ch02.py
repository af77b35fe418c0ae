"""Red-team cases for exercise 2.5 (permutation-equivariance test)."""
from _junk import junk_cases

MODULE = "companion.exercises.early_extra"
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

def C(name, expect, why, source):
    return dict(exercise="2.5", checker="equivariance_test", module=MODULE, name=name,
                expect=expect, why=why, source=source.lstrip("\n"), call="my_is_equivariant")

GOOD = """
import torch
def my_is_equivariant(f, X):
    n = X.shape[0]
    with torch.no_grad():
        Y = f(X)
        for _ in range(10):
            perm = torch.randperm(n)
            if not torch.allclose(f(X[perm]), Y[perm], rtol=1e-4, atol=1e-5):
                return False
    return True
"""

def variant(old, new, src=GOOD):
    assert old in src, old
    return src.replace(old, new)

CASES = [
    C("right_own_generator_scaled_tol", "right", "own torch.Generator, tolerance scaled by dtype eps and output size", """
import torch
def my_is_equivariant(f, X):
    n = X.shape[0]
    g = torch.Generator().manual_seed(1234)
    Y = f(X)
    tol = 1000 * torch.finfo(Y.dtype).eps * (1 + Y.abs().max().item())
    for _ in range(20):
        perm = torch.randperm(n, generator=g)
        if (f(X[perm]) - Y[perm]).abs().max().item() > tol:
            return False
    return True
"""),
    C("right_inverse_perm", "right", "compares f(X[perm])[inverse] with f(X)", """
import torch
def my_is_equivariant(f, X):
    Y = f(X)
    for _ in range(8):
        perm = torch.randperm(X.shape[0])
        inv = torch.argsort(perm)
        if not torch.allclose(f(X[perm])[inv], Y, rtol=1e-4, atol=1e-5):
            return False
    return True
"""),
    C("right_perm_matrix", "right", "permutation as a one-hot matrix product, testing.assert_close", """
import torch
def my_is_equivariant(f, X):
    n = X.shape[0]
    Y = f(X)
    for _ in range(6):
        P = torch.eye(n, dtype=X.dtype)[torch.randperm(n)]
        try:
            torch.testing.assert_close(f(P @ X), P @ Y)
        except AssertionError:
            return False
    return True
"""),
    C("right_transpositions_and_random", "right", "every adjacent swap plus random permutations", """
import torch
def my_is_equivariant(f, X):
    n = X.shape[0]
    Y = f(X)
    perms = []
    for i in range(n - 1):
        p = list(range(n)); p[i], p[i + 1] = p[i + 1], p[i]
        perms.append(torch.tensor(p))
    perms += [torch.randperm(n) for _ in range(5)]
    return all(torch.allclose(f(X[p]), Y[p], rtol=1e-4, atol=1e-5) for p in perms)
"""),
    C("right_cyclic_plus_random", "right", "rolls plus random perms, Python bool via bool()", """
import torch
def my_is_equivariant(f, X):
    n = X.shape[0]
    Y = f(X)
    ok = True
    for s in range(1, n):
        p = torch.roll(torch.arange(n), s)
        ok = ok and bool(torch.allclose(f(X[p]), Y[p], rtol=1e-4, atol=1e-5))
    for _ in range(10):
        p = torch.randperm(n)
        ok = ok and bool(torch.allclose(f(X[p]), Y[p], rtol=1e-4, atol=1e-5))
    return bool(ok)
"""),
    # ---- wrong
    C("identity_perm", "wrong", "uses arange(n): the test cannot fail", variant("perm = torch.randperm(n)", "perm = torch.arange(n)")),
    C("flip_only", "wrong", "one permutation: the reversal", variant("perm = torch.randperm(n)", "perm = torch.arange(n).flip(0)")),
    C("roll_only", "wrong", "cyclic shift by 1 only: a circular convolution commutes with it", variant("perm = torch.randperm(n)", "perm = torch.roll(torch.arange(n), 1)")),
    C("all_rolls", "wrong", "every cyclic shift, no other permutation: misses circular convolution", variant("perm = torch.randperm(n)", "perm = torch.roll(torch.arange(n), _ % max(n - 1, 1) + 1)")),
    C("single_randperm", "wrong", "only one random permutation (text: try several)", variant("range(10)", "range(1)")),
    C("exact_equality", "wrong", "torch.equal: fails on an equivariant layer by rounding", variant("torch.allclose(f(X[perm]), Y[perm], rtol=1e-4, atol=1e-5)", "torch.equal(f(X[perm]), Y[perm])")),
    C("zero_tolerance", "wrong", "allclose with rtol=0, atol=0", variant("rtol=1e-4, atol=1e-5", "rtol=0, atol=0")),
    C("loose_tolerance", "wrong", "atol=1.0: small position vectors go unnoticed", variant("rtol=1e-4, atol=1e-5", "rtol=0.5, atol=1.0")),
    C("compares_same_side", "wrong", "compares f(X[perm]) with itself: always True", variant("Y[perm], rtol", "f(X[perm]), rtol")),
    C("inverse_mixup", "wrong", "compares f(X[perm]) with f(X)[argsort(perm)]", variant("Y[perm], rtol", "Y[torch.argsort(perm)], rtol")),
    C("permutes_columns", "wrong", "permutes the features (columns) instead of the tokens", """
import torch
def my_is_equivariant(f, X):
    d = X.shape[1]
    Y = f(X)
    for _ in range(10):
        perm = torch.randperm(d)
        if not torch.allclose(f(X[:, perm]), Y[:, perm], rtol=1e-4, atol=1e-5):
            return False
    return True
"""),
    C("mutates_X", "wrong", "permutes X in place (X[:] = X[perm]) and leaves it permuted", """
import torch
def my_is_equivariant(f, X):
    Y = f(X.clone())
    perm = torch.randperm(X.shape[0])
    X[:] = X[perm]
    ok = torch.allclose(f(X), Y[perm], rtol=1e-4, atol=1e-5)
    for _ in range(5):
        p = torch.randperm(X.shape[0])
        ok = ok and torch.allclose(f(X[p]), f(X)[p], rtol=1e-4, atol=1e-5)
    return bool(ok)
"""),
    C("any_instead_of_all", "wrong", "True if any permutation matches (identity draws make it True)", """
import torch
def my_is_equivariant(f, X):
    n = X.shape[0]
    Y = f(X)
    results = []
    for _ in range(10):
        perm = torch.randperm(n)
        results.append(torch.allclose(f(X[perm]), Y[perm], rtol=1e-4, atol=1e-5))
    results.append(True)  # the identity trivially works
    return any(results)
"""),
    C("first_row_only", "wrong", "compares only row 0 of the outputs", variant("f(X[perm]), Y[perm]", "f(X[perm])[0], Y[perm][0]")),
    C("last_row_skipped", "wrong", "off-by-one: compares rows [:-1] only (debatable: any permutation that moves the last token still reveals most faults)", variant("f(X[perm]), Y[perm]", "f(X[perm])[:-1], Y[perm][:-1]")),
    C("returns_tensor", "wrong", "returns a 0-d bool tensor, not True/False (debatable: truthy)", """
import torch
def my_is_equivariant(f, X):
    Y = f(X)
    ok = torch.tensor(True)
    for _ in range(10):
        p = torch.randperm(X.shape[0])
        ok = ok & ((f(X[p]) - Y[p]).abs().max() < 1e-4)
    return ok
"""),
    C("returns_string", "wrong", "returns 'True'/'False' strings", variant("return False", "return 'False'", variant("return True", "return 'True'"))),
    C("inverted_answer", "wrong", "returns the opposite verdict", """
import torch
def my_is_equivariant(f, X):
    Y = f(X)
    for _ in range(10):
        p = torch.randperm(X.shape[0])
        if not torch.allclose(f(X[p]), Y[p], rtol=1e-4, atol=1e-5):
            return True
    return False
"""),
    C("returns_after_first_match", "wrong", "returns True as soon as one permutation matches (identity draws, small n)", """
import torch
def my_is_equivariant(f, X):
    Y = f(X)
    for _ in range(10):
        p = torch.randperm(X.shape[0])
        if torch.allclose(f(X[p]), Y[p], rtol=1e-4, atol=1e-5):
            return True
    return False
"""),
    C("right_allclose_defaults", "right", "torch.allclose with its default tolerances, 12 permutations", """
import torch
def my_is_equivariant(f, X):
    Y = f(X)
    return all(torch.allclose(f(X[p]), Y[p]) for p in (torch.randperm(len(X)) for _ in range(12)))
"""),
    C("shape_only", "wrong", "checks only that shapes match", """
import torch
def my_is_equivariant(f, X):
    perm = torch.randperm(X.shape[0])
    return f(X[perm]).shape == f(X)[perm].shape
"""),
    C("batched_input", "wrong", "calls f on X[None] (a batch of one) and compares", """
import torch
def my_is_equivariant(f, X):
    Y = f(X[None])[0]
    for _ in range(10):
        p = torch.randperm(X.shape[0])
        if not torch.allclose(f(X[p][None])[0], Y[p], rtol=1e-4, atol=1e-5):
            return False
    return True
"""),
    C("swallows_exceptions_true", "wrong", "try/except that returns True on any error", """
import torch
def my_is_equivariant(f, X):
    try:
        Y = f(X)
        for _ in range(10):
            p = torch.randperm(X.shape[0])
            if not torch.allclose(f(X[p]), Y[p], rtol=1e-4, atol=1e-5):
                return False
        return True
    except Exception:
        return True
"""),
    C("fixed_derangement_pairs", "wrong", "swaps (0,1),(2,3),... only, one fixed perm", """
import torch
def my_is_equivariant(f, X):
    n = X.shape[0]
    p = torch.arange(n)
    for i in range(0, n - 1, 2):
        p[i], p[i + 1] = i + 1, i
    return bool(torch.allclose(f(X[p]), f(X)[p], rtol=1e-4, atol=1e-5))
"""),
    C("sorted_rows_invariance", "wrong", "tests invariance of the sorted outputs (set of rows), not equivariance", """
import torch
def my_is_equivariant(f, X):
    Y = f(X)
    for _ in range(10):
        p = torch.randperm(X.shape[0])
        a = f(X[p]).sum(0); b = Y.sum(0)
        if not torch.allclose(a, b, rtol=1e-4, atol=1e-5):
            return False
    return True
"""),
    C("reseeds_global_rng", "wrong", "torch.manual_seed(0) inside: changes the caller's RNG state (debatable: text says use torch.randperm)", variant("    n = X.shape[0]\n", "    n = X.shape[0]\n    torch.manual_seed(0)\n")),
    C("mean_diff_tol", "wrong", "mean absolute difference < 1e-3: a change on one token is averaged away", variant("if not torch.allclose(f(X[perm]), Y[perm], rtol=1e-4, atol=1e-5):", "if (f(X[perm]) - Y[perm]).abs().mean() > 1e-2:")),
    C("single_perm_fixed_generator", "wrong", "ONE permutation from an own fixed-seed Generator (text: try several; one can leave a token in place)", """
import torch
def my_is_equivariant(f, X):
    g = torch.Generator().manual_seed(7)
    perm = torch.randperm(X.shape[0], generator=g)
    return bool(torch.allclose(f(X[perm]), f(X)[perm], rtol=1e-4, atol=1e-5))
"""),
    C("single_perm_global_seed", "wrong", "torch.manual_seed(456) then ONE randperm: defeats the checker's seed variation", """
import torch
def my_is_equivariant(f, X):
    torch.manual_seed(456)
    perm = torch.randperm(X.shape[0])
    return bool(torch.allclose(f(X[perm]), f(X)[perm], rtol=1e-4, atol=1e-5))
"""),
    C("max_abs_1e-2", "wrong", "max |diff| < 1e-2: not 'within rounding' (debatable)", variant("if not torch.allclose(f(X[perm]), Y[perm], rtol=1e-4, atol=1e-5):", "if (f(X[perm]) - Y[perm]).abs().max() > 1e-2:")),
    C("two_perms_fixed_generator", "wrong", "two permutations from a fixed-seed Generator: passes or fails by the seed it picked, not by design (debatable)", """
import torch
def my_is_equivariant(f, X):
    g = torch.Generator().manual_seed(3)
    Y = f(X)
    for _ in range(2):
        p = torch.randperm(X.shape[0], generator=g)
        if not torch.allclose(f(X[p]), Y[p], rtol=1e-4, atol=1e-5):
            return False
    return True
"""),
]

CASES += junk_cases(MODULE, {"2.5": ("equivariance_test", "my_is_equivariant", "f, X")})
