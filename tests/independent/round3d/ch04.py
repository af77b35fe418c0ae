from _junk import junk_cases
MODULE = "companion.exercises.early_extra"
PRELUDE = """import inspect
import matplotlib.pyplot as plt
import torch
from companion import example
from companion.attention import softmax
from companion.exercises import early_extra as check_more
from companion.exercises import norm as check
from companion.norm import LayerNorm, RMSNorm
"""
M = MODULE
def C(name, expect, why, source):
    return dict(exercise="4.4", checker="dependency_map", module=M, name=name,
                expect=expect, why=why, source=source, call="my_dependency_map")

GOOD = '''
def my_dependency_map(f, x):
    import torch
    B, T, d = x.shape
    with torch.no_grad():
        y0 = f(x.clone())
        D = torch.zeros(T, T, dtype=torch.bool)
        for u in range(T):
            x2 = x.clone()
            x2[:, u, :] = x2[:, u, :] + torch.arange(1, B*d+1, dtype=x.dtype).reshape(B, d) * 0.37 + 1.0
            y = f(x2)
            D[:, u] = (y != y0).any(dim=2).any(dim=0)
    return D
'''
CASES = [
    C("right_perturb", "right", "perturb a copy of position u with a non-constant change in every sequence", GOOD),
    C("right_jacobian", "right", "autograd Jacobian instead of perturbation", '''
def my_dependency_map(f, x):
    import torch
    J = torch.autograd.functional.jacobian(f, x.clone())
    B, T, d = x.shape
    return (J != 0).any(dim=5).any(dim=3).any(dim=2).any(dim=0)
'''),
    C("right_random_perturb_own_gen", "right", "random change from own generator, compares with ==", '''
def my_dependency_map(f, x):
    import torch
    g = torch.Generator().manual_seed(1)
    B, T, d = x.shape
    y0 = f(x.clone()).detach()
    rows = []
    D = torch.zeros(T, T, dtype=torch.bool)
    for u in range(T):
        x2 = x.clone()
        x2[:, u] += torch.randn(B, d, generator=g, dtype=x.dtype)
        D[:, u] = (f(x2).detach() != y0).flatten(2).any(2).any(0)
    return D
'''),
    C("wrong_constant_shift", "wrong", "adds the same constant to every feature: LayerNorm cannot see it, map is wrong", GOOD.replace("torch.arange(1, B*d+1, dtype=x.dtype).reshape(B, d) * 0.37 + 1.0", "1.0")),
    C("wrong_first_seq_only", "wrong", "changes position u only in sequence 0, BatchNorm across batch missed differently", GOOD.replace("x2[:, u, :] = x2[:, u, :]", "x2[0, u, :] = x2[0, u, :]").replace("torch.arange(1, B*d+1, dtype=x.dtype).reshape(B, d)", "torch.arange(1, d+1, dtype=x.dtype)")),
    C("wrong_transposed", "wrong", "returns D transposed (D[u, s])", GOOD.replace("return D", "return D.T")),
    C("wrong_tolerance", "wrong", "uses a tolerance 1e-2: misses the 0.001 trap", GOOD.replace("(y != y0)", "((y - y0).abs() > 1e-2)")),
    C("wrong_mutates_x", "wrong", "perturbs x in place and does not restore it", GOOD.replace("x2 = x.clone()", "x2 = x")),
    C("wrong_float_dtype", "wrong", "returns a float 0/1 tensor instead of booleans", GOOD.replace("return D", "return D.float()")),
    C("wrong_lower_tri_hardcoded", "wrong", "returns lower triangular ones always (guesses causal)", '''
def my_dependency_map(f, x):
    import torch
    T = x.shape[1]
    return torch.ones(T, T, dtype=torch.bool).tril()
'''),
    C("wrong_diag_hardcoded", "wrong", "returns the identity always (guesses per-position)", '''
def my_dependency_map(f, x):
    import torch
    return torch.eye(x.shape[1], dtype=torch.bool)
'''),
    C("wrong_off_by_one_range", "wrong", "loops range(T-1): last position never probed", GOOD.replace("for u in range(T):", "for u in range(T - 1):")),
    C("wrong_any_over_u_axis", "wrong", "reduces over the wrong axis: D[s,u] from the change at row u", GOOD.replace("D[:, u] = (y != y0).any(dim=2).any(dim=0)", "D[u, :] = (y != y0).any(dim=2).any(dim=0)")),
    C("wrong_numpy_return", "wrong", "returns a NumPy array", GOOD.replace("return D", "return D.numpy()")),
    C("wrong_list_return", "wrong", "returns a nested list", GOOD.replace("return D", "return D.tolist()")),
    C("wrong_tiny_perturb", "wrong", "perturbation 1e-12: lost in float32 rounding, misses dependencies", GOOD.replace("* 0.37 + 1.0", "* 1e-12")),
    C("wrong_zero_input", "wrong", "probes on zeros instead of x (ignores x)", GOOD.replace("y0 = f(x.clone())", "x = torch.zeros_like(x); y0 = f(x.clone())")),
    C("wrong_batch0_output", "wrong", "looks only at outputs of sequence 0", GOOD.replace("(y != y0).any(dim=2).any(dim=0)", "(y[0] != y0[0]).any(dim=1)")),
    C("wrong_mean_compare", "wrong", "compares output means per position: centered layers hide the change", GOOD.replace("(y != y0).any(dim=2).any(dim=0)", "(y.mean(dim=(0,2)) != y0.mean(dim=(0,2)))")),
    C("wrong_grad_sum", "wrong", "gradient of the sum of outputs: cancels in normalizations (sum of LN outputs is constant)", '''
def my_dependency_map(f, x):
    import torch
    B, T, d = x.shape
    D = torch.zeros(T, T, dtype=torch.bool)
    for s in range(T):
        xx = x.clone().requires_grad_(True)
        f(xx)[:, s].sum().backward()
        D[s] = (xx.grad != 0).any(dim=2).any(dim=0)
    return D
'''),
    C("wrong_shape_T1_squeeze", "wrong", "squeezes the result: one token gives a 0-d tensor", GOOD.replace("return D", "return D.squeeze()")),
    C("wrong_int_cast_compare", "wrong", "compares rounded outputs: misses the 0.001 trap", GOOD.replace("(y != y0)", "(y.round(decimals=1) != y0.round(decimals=1))")),
    C("wrong_global_rng", "wrong", "draws the perturbation from torch's global RNG (debatable: text does not forbid it for 4.4)", GOOD.replace("torch.arange(1, B*d+1, dtype=x.dtype).reshape(B, d) * 0.37 + 1.0", "torch.randn(B, d, dtype=x.dtype)").replace("# dummy","")),
    C("wrong_eval_mode", "wrong", "calls f.eval() if it has one: changes the layer's mode", GOOD.replace("B, T, d = x.shape", "B, T, d = x.shape\n    getattr(f, 'eval', lambda: None)()")),
]
CASES[-2]["expect"] = "right"
CASES[-2]["why"] = "debatable: global RNG perturbation; 4.4's text does not forbid touching the global RNG"
CASES += junk_cases(M, {"4.4": ("dependency_map", "my_dependency_map", "f, x")})
