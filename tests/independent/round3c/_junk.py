"""A battery of junk answers, the same for every exercise.

A checker must reject each of them with a hint, never crash, never pass
and never hang. ``junk_cases(module, table)`` returns case dicts in the
format of ``CASES`` (see README.md); ``table`` maps an exercise number to
``(checker, function name, parameter list)``.
"""

JUNK = [
    ("junk_none", "returns None (forgot the return)", """
def {f}({p}):
    result = 0
"""),
    ("junk_string", "returns a string", """
def {f}({p}):
    return "42"
"""),
    ("junk_huge_int", "returns 10**400, too big for any float", """
def {f}({p}):
    return 10 ** 400
"""),
    ("junk_complex", "returns a complex tensor", """
import torch
def {f}({p}):
    return torch.ones(3, 3, dtype=torch.complex64) * (1 + 2j)
"""),
    ("junk_empty_tensor", "returns an empty tensor", """
import torch
def {f}({p}):
    return torch.empty(0)
"""),
    ("junk_nan", "returns nan", """
def {f}({p}):
    return float("nan")
"""),
    ("junk_meta_tensor", "returns a tensor on the meta device (no data)", """
import torch
def {f}({p}):
    return torch.empty(2, 3, device="meta")
"""),
    ("junk_generator", "returns a generator, not a value", """
def {f}({p}):
    return (i for i in range(3))
"""),
    ("junk_recursion", "calls itself by mistake: RecursionError", """
def {f}({p}):
    return {f}({p})
"""),
    ("junk_one_param_short", "defined with too few parameters: TypeError on call", """
def {f}():
    return 0
"""),
    ("junk_not_implemented_deep", "a helper raises NotImplementedError after real work (not the stub)", """
def _helper(*args):
    raise NotImplementedError("this case is not handled yet")
def {f}({p}):
    total = 1 + 1
    return _helper({p})
"""),
    ("junk_zero_division", "raises ZeroDivisionError", """
def {f}({p}):
    return 1 / 0
"""),
]

CALLS = [
    ("junk_pass_result", "passes a value (the function's result) instead of the function",
     "", "0.5"),
    ("junk_pass_string", "passes the function's name as a string", "", "'{f}'"),
    ("junk_pass_none", "passes None", "", "None"),
]


def junk_cases(module, table):
    cases = []
    for exercise, (checker, f, p) in table.items():
        for name, why, src in JUNK:
            cases.append(dict(exercise=exercise, checker=checker, module=module,
                              name=name, expect="wrong", why=why,
                              source=src.format(f=f, p=p).lstrip("\n"),
                              call=f))
        for name, why, src, call in CALLS:
            cases.append(dict(exercise=exercise, checker=checker, module=module,
                              name=name, expect="wrong", why=why,
                              source=src, call=call.format(f=f)))
    return cases
