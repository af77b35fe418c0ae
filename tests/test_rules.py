"""The shared rule mechanism: canonical names of torch calls, observations, watches, source facts."""
from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F

from companion.exercises import _core, rules
from companion.exercises.rules import Observation, canonical, facts, observe, record, source_of, watch


def _calls(fn, *args):
    _, obs = observe(fn, *args)
    return obs.torch_calls


X = torch.randn(3, 4)
V = torch.randn(4)


@pytest.mark.parametrize("name, fn", [
    ("softmax", lambda: torch.softmax(X, -1)),
    ("softmax", lambda: X.softmax(-1)),
    ("softmax", lambda: F.softmax(X, -1)),
    ("softmax", lambda: torch.special.softmax(X, -1)),
    ("softmax", lambda: torch.nn.Softmax(-1)(X)),
    ("log_softmax", lambda: F.log_softmax(X, -1)),
    ("log_softmax", lambda: X.log_softmax(-1)),
    ("matmul", lambda: X @ V),
    ("matmul", lambda: X.matmul(V)),
    ("matmul", lambda: torch.matmul(X, V)),
    ("matmul", lambda: V.__rmatmul__(X)),
    ("norm", lambda: X.norm()),
    ("norm", lambda: torch.norm(X)),
    ("linalg.vector_norm", lambda: torch.linalg.vector_norm(X)),
    ("linalg.norm", lambda: torch.linalg.norm(X)),
    ("cosine_similarity", lambda: F.cosine_similarity(X, X)),
    ("cosine_similarity", lambda: torch.cosine_similarity(X, X)),
    ("cross_entropy", lambda: F.cross_entropy(X, torch.tensor([0, 1, 2]))),
    ("cross_entropy", lambda: torch.nn.CrossEntropyLoss()(X, torch.tensor([0, 1, 2]))),
    ("div", lambda: X / 2),
    ("div", lambda: torch.divide(X, 2)),
    ("div", lambda: torch.true_divide(X, 2)),
    ("add", lambda: X.clone().add_(1)),
    ("exp", lambda: X.clone().exp_()),
    ("sqrt", lambda: torch.sqrt(X.abs())),
    ("pow", lambda: X ** 2),
    ("dot", lambda: torch.dot(V, V)),
    ("einsum", lambda: torch.einsum("ij,j->i", X, V)),
    ("roll", lambda: X.roll(1)),
    ("roll", lambda: torch.roll(X, 1)),
    ("T", lambda: X.T),
    ("getitem", lambda: X[0]),
    ("cat", lambda: torch.concatenate([X, X])),
])
def test_every_spelling_of_a_call_gets_one_canonical_name(name, fn):
    assert name in _calls(fn)


def test_aliased_imports_are_seen():
    from torch.nn.functional import cosine_similarity as cs
    from torch.nn.functional import cross_entropy as ce
    from torch import softmax as sm

    def student(x):
        return cs(x, x).sum() + ce(x, torch.tensor([0, 1, 2])) + sm(x, -1).sum()

    assert {"cosine_similarity", "cross_entropy", "softmax"} <= _calls(student, X)


def test_calls_inside_a_torch_function_are_not_seen():
    calls = _calls(lambda x: F.cross_entropy(x, torch.tensor([0, 1, 2])), X)
    assert "log_softmax" not in calls and "nll_loss" not in calls


def test_canonical_never_raises_on_odd_callables():
    for odd in (print, len, object(), lambda: 0, functools.partial(print), None, 3):
        assert isinstance(canonical(odd), str)


def test_observe_reraises_and_leaves_no_mode_behind():
    def boom(x):
        x.exp()
        raise KeyError("mine")

    with pytest.raises(KeyError, match="mine"):
        observe(boom, X)
    assert not torch.overrides._is_torch_function_mode_enabled()
    # ... and nothing is recorded outside a call
    with watch() as seen:
        X.exp()
    assert seen.torch_calls == frozenset()


def test_observe_returns_the_result():
    out, obs = observe(lambda a, b=1: a * b, X, b=2)
    assert torch.equal(out, X * 2) and obs.torch_calls == {"mul"}


def test_watch_collects_what_guard_records_and_nests():
    guarded = _core._guard(lambda x: x.softmax(-1))
    with watch() as outer:
        guarded(X)
        with watch() as inner:
            _core._guard(lambda x: x.norm())(X)
    assert outer.torch_calls == {"softmax", "norm"} and inner.torch_calls == {"norm"}
    assert outer.called("norm", "sqrt") == ["norm"] and inner.called("softmax") == []
    record(Observation(frozenset({"x"})))  # outside a watch: a no-op
    with pytest.raises(TypeError):
        record({"torch_calls": []})


def test_guard_still_wraps_student_errors():
    with pytest.raises(_core.StudentError):
        _core._guard(lambda x: x.nonexistent())(X)


def test_observation_json_round_trip():
    obs = Observation(frozenset({"softmax", "matmul"}), frozenset({"numpy", "math"}))
    data = obs.to_json()
    assert data == {"torch_calls": ["matmul", "softmax"], "modules": ["math", "numpy"]}
    assert Observation.from_json(data) == obs
    assert Observation.from_json({"torch_calls": ["x"]}) == Observation(frozenset({"x"}))
    _, seen = observe(lambda x: x.exp(), X)
    assert Observation.from_json(seen.to_json()) == seen


@pytest.mark.parametrize("junk", [
    None, [], "softmax", {"torch_calls": "softmax"}, {"torch_calls": [1]}, {"torch_calls": [""]},
    {"torch_calls": ["a" * 201]}, {"torch_calls": ["a"], "extra": 1}, {"calls": []},
    {"torch_calls": ["a"] * 10_001}, {"torch_calls": [None]}, {"torch_calls": [["a"]]},
    {"torch_calls": [], "modules": "numpy"}, {"torch_calls": [], "modules": [3]}, {"modules": []},
])
def test_observation_from_json_rejects_junk(junk):
    with pytest.raises(ValueError):
        Observation.from_json(junk)


def test_observation_rejects_non_names():
    with pytest.raises(ValueError):
        Observation("softmax")
    with pytest.raises(ValueError):
        Observation(frozenset({1}))


def _student_with_loop(a, b):
    total = 0
    for x, y in zip(a, b):
        total += x * y
    return total


def test_source_of_prefers_course_source_and_follows_wraps():
    assert "for x, y in zip(a, b)" in source_of(_student_with_loop)
    wrapped = _core._guard(_student_with_loop)
    assert "for x, y" in source_of(wrapped)

    def proxy(*args):
        return None

    proxy.__course_source__ = "def f(a):\n    return a"
    assert source_of(proxy) == "def f(a):\n    return a"
    assert source_of(_core._guard(proxy)) == "def f(a):\n    return a"
    assert source_of(print) is None and source_of(None) is None and source_of(3) is None


@pytest.mark.parametrize("source, modules", [
    ("from numpy import dot\ndef f(a, b): return dot(a, b)", {"numpy", "numpy.dot"}),
    ("import numpy as np", {"numpy"}),
    ("import companion.positional", {"companion", "companion.positional"}),
    ("from companion import positional as p", {"companion", "companion.positional"}),
    ("from companion.positional import sinusoidal", {"companion", "companion.positional"}),
    ("m = __import__('numpy')", {"numpy"}),
    ("import importlib\nm = importlib.import_module('companion.positional')",
     {"importlib", "companion", "companion.positional"}),
    ("from importlib import import_module\nm = import_module('numpy.linalg')",
     {"importlib", "importlib.import_module", "numpy", "numpy.linalg"}),
])
def test_facts_imports(source, modules):
    found = facts(source)
    assert found.parsed and modules <= found.modules
    for m in modules:
        assert found.imports(m.split(".")[0])


def test_facts_loops_and_names():
    f = facts(_student_with_loop)
    assert f.loops == {"for"} and "zip" in f.names
    assert facts("while True: pass").loops == {"while"}
    assert facts("x = [i for i in y]").loops == {"comprehension"}
    assert facts("x = sum(i for i in y)").loops == {"comprehension"}
    assert facts("x = {i: 1 for i in y}").loops == {"comprehension"}
    assert facts("def f(q, k): return q @ k.T").loops == frozenset()
    g = facts("import numpy as np\ny = np.linalg.norm(x) + x.norm()")
    assert {"np.linalg.norm", "x.norm"} <= g.chains and "norm" in g.attributes
    assert facts("m = __import__(name)").dynamic_import
    assert facts("exec('import numpy')").dynamic_import


@pytest.mark.parametrize("junk", [None, "", "def (:", "\x00", 3, b"import numpy", "   x = 1\n  y = 2"])
def test_facts_never_raises(junk):
    f = facts(junk)
    assert isinstance(f, rules.SourceFacts)


def test_facts_of_a_syntax_error_says_not_parsed():
    assert not facts("def f(:\n").parsed and not facts(None).parsed


def _numpy_helper(a, b):
    import numpy
    return float(numpy.dot(a, b))


def test_modules_called_are_seen_through_helpers_and_aliases():
    import math

    from numpy import dot as d

    import companion.positional as p

    _, obs = observe(lambda a, b: _numpy_helper(a, b), [1, 2], [3, 4])
    assert obs.used_module("numpy") and not obs.used_module("companion")
    _, obs = observe(lambda a, b: int(d(a, b)), [1, 2], [3, 4])
    assert obs.used_module("numpy")
    _, obs = observe(lambda: math.sqrt(2.0))
    assert obs.used_module("math") and not obs.used_module("numpy")
    _, obs = observe(lambda: p.sinusoidal_encoding(4, 6))
    assert obs.used_module("companion.positional") and obs.used_module("companion")
    _, obs = observe(lambda: sum(x * y for x, y in zip([1, 2], [3, 4])))
    assert not obs.used_module("numpy") and not obs.used_module("torch")
    assert obs.modules <= {"builtins", __name__}
    with watch() as seen:
        _core._guard(lambda a, b: _numpy_helper(a, b))([1], [2])
    assert seen.used_module("numpy") and seen.used_module("numpy._core")


def test_the_profile_function_is_restored():
    import sys
    before = sys.getprofile()
    with pytest.raises(ZeroDivisionError):
        observe(lambda: 1 / 0)
    assert sys.getprofile() is before


def test_called_with_a_prefix():
    with watch() as seen:
        _core._guard(lambda x: torch.linalg.vector_norm(x) + torch.linalg.norm(x))(X)
    assert seen.called("linalg.") == ["linalg.norm", "linalg.vector_norm"]


def test_torch_ops_calls_are_seen():
    assert "_softmax" in _calls(lambda x: torch.ops.aten._softmax(x, -1, False), X)
    assert "_softmax" in _calls(lambda x: torch.ops.aten._softmax.default(x, -1, False), X)
    assert "softmax" in _calls(lambda x: torch.ops.aten.softmax.int(x, -1), X)


def test_is_remote():
    def proxy(*args):
        return None

    assert not rules.is_remote(proxy) and not rules.is_remote(_student_with_loop) and not rules.is_remote(None)
    proxy.__course_remote__ = True
    assert rules.is_remote(proxy) and rules.is_remote(_core._guard(proxy))

    def other(*args):
        return None

    other.__course_source__ = "def f(): pass"
    assert rules.is_remote(other)


def test_require_graph_asks_remote_proxies_for_the_graph_facts():
    """Issue 30: a grader's proxy no longer skips the check: the kernel reports the autograd facts
    of the result (where its graph is); a proxy that reports none is a sign of tampering."""
    def detached(x):
        return x.detach() * 2

    @_core.checker("Exercise 9.8")
    def check(fn):
        _core.require_graph(fn, (torch.randn(3),))
        _core.passed()

    assert "no gradient flows" in check(detached).message
    detached.__course_remote__ = True
    with pytest.raises(rules.Tampered):
        check(detached)

    def reporting(requires_grad, error=None):
        def proxy(x):
            rules.wanted_graph()["facts"] = {"tensor": True, "requires_grad": requires_grad,
                                             "connected": requires_grad, "backward_error": error}
            return x.detach() * 2
        proxy.__course_remote__ = True
        return proxy

    assert "no gradient flows" in check(reporting(False)).message
    assert "backpropagation through your function fails" in check(reporting(True, "modified by an inplace")).message
    assert check(reporting(True)).passed
