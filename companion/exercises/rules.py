"""What the student's code did, as plain data: the rules of the exercises are checked on it.

Two kinds of facts, shared by the notebook checkers and the grader:

* **torch calls**, seen while the student's function runs, through
  :class:`torch.overrides.TorchFunctionMode`. Every torch function, tensor method and operator
  reaches the mode whatever name the student imported it under (``from torch.nn.functional import
  softmax as s`` is still ``softmax``), so a rule cannot be dodged by an alias. Each call is
  recorded under a *canonical name* (:func:`canonical`): ``torch.softmax``, ``Tensor.softmax``,
  ``F.softmax`` and ``torch.special.softmax`` are all ``"softmax"``; ``a @ b``, ``a.matmul(b)``
  and ``torch.matmul`` are all ``"matmul"``; ``x.norm()`` and ``torch.norm`` are ``"norm"``;
  ``torch.linalg.vector_norm`` is ``"linalg.vector_norm"``. A call made *inside* a torch function
  is not seen (``F.cross_entropy`` is one call, not the log-softmax inside it); a call made by a
  torch module's Python code is (``nn.CrossEntropyLoss()(x, y)`` is seen as ``"cross_entropy"``).
* **modules called**, seen while the student's function runs through :func:`sys.setprofile`: the
  module of every Python function and built-in function it calls, directly or through a helper
  (``np.dot`` is ``"numpy._core.multiarray"``, a companion function its companion module), so
  that "no NumPy" or "without the companion" holds whatever name the function was imported under.
* **source facts**, read from the student's source with :mod:`ast` (never executed): loops,
  imported modules (``import numpy as np``, ``from numpy import dot``, ``__import__("numpy")``,
  ``importlib.import_module("numpy")``), names and attribute chains used.

In a notebook, ``_core._guard`` calls the student's function through :func:`observe` and
:func:`record` s what it saw, so that a checker written as::

    with watch() as seen:
        out = fn(x)
    if seen.called("cross_entropy"): ...
    if facts(source_of(fn)).loops: ...

works the same in the notebook and in the grader (whose proxies call :func:`record` with the
:class:`Observation` the sandboxed kernel sent back as JSON, and carry ``__course_source__``).
"""
from __future__ import annotations

import ast
import contextlib
import inspect
import os
import sys
import textwrap
import threading
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch
from torch.overrides import TorchFunctionMode, resolve_name

__all__ = [
    "Observation", "Seen", "SourceFacts", "canonical", "facts", "is_remote", "observe", "record", "source_of",
    "watch",
]

# Canonical names of functions that torch offers under several names.
_ALIASES = {
    "special.softmax": "softmax", "special.log_softmax": "log_softmax", "linalg.matmul": "matmul",
    "divide": "div", "true_divide": "div", "multiply": "mul", "subtract": "sub", "absolute": "abs",
    "clip": "clamp", "negative": "neg", "special.exp2": "exp2", "special.expit": "sigmoid",
    "special.logsumexp": "logsumexp", "special.log1p": "log1p", "special.expm1": "expm1",
    "arccos": "acos", "arcsin": "asin", "arctan": "atan", "arctan2": "atan2", "concatenate": "cat",
    "concat": "cat", "swapaxes": "transpose", "swapdims": "transpose", "greater": "gt", "less": "lt",
    "greater_equal": "ge", "less_equal": "le", "not_equal": "ne", "fix": "trunc", "rsub": "sub",
    "floor_divide": "floordiv", "remainder": "mod", "fmod": "fmod", "moveaxis": "movedim",
    "special.erf": "erf", "functional.norm": "norm", "functional.einsum": "einsum",
    "nn.functional.cosine_similarity": "cosine_similarity",
}
# Operators: the dunder method a tensor operator reaches, and its canonical name.
_DUNDERS = {
    "matmul": "matmul", "rmatmul": "matmul", "imatmul": "matmul", "add": "add", "radd": "add", "iadd": "add",
    "sub": "sub", "rsub": "sub", "isub": "sub", "mul": "mul", "rmul": "mul", "imul": "mul",
    "truediv": "div", "rtruediv": "div", "itruediv": "div", "div": "div", "rdiv": "div", "idiv": "div",
    "floordiv": "floordiv", "rfloordiv": "floordiv", "ifloordiv": "floordiv", "pow": "pow", "rpow": "pow",
    "ipow": "pow", "mod": "mod", "rmod": "mod", "imod": "mod", "neg": "neg", "abs": "abs",
    "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge", "and": "and", "rand": "and",
    "iand": "and", "or": "or", "ror": "or", "ior": "or", "xor": "xor", "rxor": "xor", "invert": "invert",
    "getitem": "getitem", "setitem": "setitem", "len": "len", "iter": "iter", "float": "float",
    "int": "int", "bool": "bool", "index": "index", "contains": "contains", "format": "format",
    "reversed": "reversed", "array": "array", "deepcopy": "deepcopy", "repr": "repr", "hash": "hash",
    "lshift": "lshift", "rshift": "rshift", "complex": "complex", "pos": "pos",
}
_PREFIXES = ("torch.Tensor.", "torch.nn.functional.", "torch.functional.", "torch._C._nn.",
             "torch._C._linalg.", "torch._C._special.", "torch._C._VariableFunctions.", "torch._C.", "torch.")


_CANONICAL: dict = {}


def canonical(func: Any) -> str:
    """:func:`_canonical`, cached per function (a loop of the student's calls it thousands of times)."""
    try:
        return _CANONICAL[func]
    except KeyError:
        name = _CANONICAL[func] = _canonical(func)
        return name
    except TypeError:  # an unhashable callable
        return _canonical(func)


def _canonical(func: Any) -> str:
    """The stable name under which a torch function, method or operator is recorded.

    ``torch.softmax``, ``Tensor.softmax``, ``F.softmax`` -> ``"softmax"``; ``a @ b`` and
    ``torch.matmul`` -> ``"matmul"``; ``x.add_(1)`` -> ``"add"`` (in place or not);
    ``torch.linalg.vector_norm`` -> ``"linalg.vector_norm"``; a tensor attribute such as ``x.T``
    -> ``"T"``. Never raises: an unknown callable gets its module and qualified name.
    """
    try:
        name = resolve_name(func)
    except Exception:  # noqa: BLE001 - a name is never worth a crash
        name = None
    if not name:
        module = getattr(func, "__module__", None) or ""
        qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
        name = f"{module}.{qual}" if module else str(qual)
    if name.endswith(".__get__") or name.endswith(".__set__"):  # a tensor property: x.T, x.shape
        name = name.rsplit(".", 1)[0]
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    if name.startswith("special_") or name.startswith("linalg_"):  # C names of torch.special / linalg
        name = name.replace("_", ".", 1)
    last = name.rsplit(".", 1)[-1]
    if last.startswith("__") and last.endswith("__") and len(last) > 4:
        name = _DUNDERS.get(last[2:-2], last[2:-2])
    elif name.endswith("_") and not name.endswith("__"):  # in place: add_ is add
        name = name[:-1]
    return _ALIASES.get(name, name)


_MAX_NAMES = 10_000


def _names(value: Any, what: str) -> frozenset:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be a collection of names, got {type(value).__name__}")
    value = frozenset(value)
    if not all(isinstance(c, str) for c in value):
        raise ValueError(f"{what} must hold only str names")
    return value


@dataclass(frozen=True)
class Observation:
    """What ONE call of the student's function did, as plain data.

    ``torch_calls``: the canonical names (:func:`canonical`) of the torch functions, tensor
    methods and operators called while it ran.
    ``modules``: the modules of the Python functions and built-in functions called while it ran
    (``"numpy._core.multiarray"`` for ``np.dot``, ``"companion.positional"``, ``"math"``), so that
    a rule such as "no NumPy" or "without the companion" also sees a call made through a helper
    function or a name imported in another cell. Use :meth:`used_module`.
    """

    torch_calls: frozenset = field(default_factory=frozenset)
    modules: frozenset = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "torch_calls", _names(self.torch_calls, "torch_calls"))
        object.__setattr__(self, "modules", _names(self.modules, "modules"))

    def used_module(self, module: str) -> bool:
        """True when a function of ``module`` (or of a module inside it) was called."""
        return any(m == module or m.startswith(module + ".") for m in self.modules)

    def to_json(self) -> dict:
        """Plain data (str keys, sorted lists of str) for sending from the kernel to the grader."""
        return {"torch_calls": sorted(self.torch_calls), "modules": sorted(self.modules)}

    @classmethod
    def from_json(cls, data: Any) -> "Observation":
        """The inverse of :meth:`to_json`; anything else (wrong keys, types, sizes) is a ValueError.

        ``modules`` may be absent (an observation from before it existed).
        """
        if not isinstance(data, dict) or not {"torch_calls"} <= set(data) <= {"torch_calls", "modules"}:
            raise ValueError("an observation is a dict with the key 'torch_calls' (and optionally 'modules')")
        fields = {}
        for key in ("torch_calls", "modules"):
            names = data.get(key, [])
            if not isinstance(names, list) or len(names) > _MAX_NAMES:
                raise ValueError(f"{key} must be a list of at most {_MAX_NAMES} names")
            if not all(type(c) is str and 0 < len(c) <= 200 for c in names):
                raise ValueError(f"{key} must hold non-empty str names of at most 200 characters")
            fields[key] = frozenset(names)
        return cls(**fields)


class _Recorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: set[str] = set()
        self.naming = False  # True while canonical() runs: its own calls are not the student's

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.naming = True
        try:
            self.calls.add(canonical(func))
        finally:
            self.naming = False
        return func(*args, **(kwargs or {}))


def _module_of_builtin(fn: Any) -> str | None:
    module = getattr(fn, "__module__", None)
    if isinstance(module, str):
        return module
    owner = getattr(fn, "__self__", None)
    if owner is None:
        return None
    if isinstance(owner, types.ModuleType):
        return owner.__name__
    module = getattr(type(owner), "__module__", None)
    return module if isinstance(module, str) else None


def _aten_name(op: Any) -> str | None:
    """The canonical name of a ``torch.ops`` operator (``aten::_softmax`` and its ``.default``
    overload are ``"_softmax"``), so that the rules see it as they see ``torch._softmax``."""
    try:
        name = getattr(op, "_qualified_op_name", None) or getattr(op, "__name__", None)
        if not isinstance(name, str):
            return None
        name = name.split("::")[-1].split(".")[0]
        name = name[:-1] if name.endswith("_") and not name.endswith("__") else name
        return _ALIASES.get(name, name) or None
    except Exception:  # noqa: BLE001 - a name is never worth a crash
        return None


_INSTALLED = tuple(sorted({str(Path(p).resolve()) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
                          | {str(Path(__file__).resolve().parents[1]) + os.sep}))


def _installed_module_body(frame: Any) -> bool:
    """True for the body of a module being imported from the course or an installed package (not
    for code given to exec, nor for a module a student wrote elsewhere)."""
    code = frame.f_code
    if code.co_name != "<module>" or frame.f_globals.get("__file__") != code.co_filename:
        return False
    try:
        return str(Path(code.co_filename).resolve()).startswith(_INSTALLED)
    except (OSError, ValueError):
        return False


def observe(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Observation]:
    """Call ``fn(*args, **kwargs)`` while recording its torch calls and the modules of the
    functions it calls: ``(result, Observation)``.

    Whatever ``fn`` raises is re-raised (the observation is lost then).
    """
    recorder = _Recorder()
    modules: set[str] = set()
    importing = [0]  # module bodies being run: an import made by the call is not the call's use

    def profile(frame, event, arg):
        if recorder.naming:
            return
        if event in ("call", "return") and _installed_module_body(frame):
            importing[0] += 1 if event == "call" else -1
            return
        if importing[0] > 0:
            return
        if event == "call":
            name = frame.f_globals.get("__name__")
            if isinstance(name, str):
                modules.add(name)
                if name == "torch._ops" and frame.f_code.co_name == "__call__":
                    op = _aten_name(frame.f_locals.get("self"))  # torch.ops.aten.softmax(...): no mode sees it
                    if op:
                        recorder.calls.add(op)
        elif event == "c_call" and arg is not sys.setprofile:
            name = _module_of_builtin(arg)
            if name:
                modules.add(name)

    previous = sys.getprofile()
    with recorder:
        sys.setprofile(profile)
        try:
            result = fn(*args, **kwargs)
        finally:
            sys.setprofile(previous)
    modules.discard(__name__)
    modules.discard("torch.overrides")
    if len(modules) > _MAX_NAMES:
        modules = set(sorted(modules)[:_MAX_NAMES])
    return result, Observation(frozenset(recorder.calls), frozenset(m for m in modules if 0 < len(m) <= 200))


class Seen:
    """Everything recorded inside one :func:`watch` block: the observations, in order."""

    def __init__(self) -> None:
        self.observations: list[Observation] = []

    @property
    def torch_calls(self) -> frozenset:
        """The union of the canonical names of every recorded torch call."""
        return frozenset().union(*(obs.torch_calls for obs in self.observations))

    @property
    def modules(self) -> frozenset:
        """The union of the modules of every recorded function call."""
        return frozenset().union(*(obs.modules for obs in self.observations))

    def called(self, *names: str) -> list[str]:
        """The given canonical names that were called, sorted (empty: none of them was).

        A name ending in ``.`` is a prefix: ``called("linalg.")`` is every ``torch.linalg`` call.
        """
        calls = self.torch_calls
        found = {c for c in calls for n in names if c == n or (n.endswith(".") and c.startswith(n))}
        return sorted(found)

    def used_module(self, module: str) -> bool:
        """True when a function of ``module`` (or of a module inside it) was called."""
        return any(m == module or m.startswith(module + ".") for m in self.modules)

    def __bool__(self) -> bool:
        return True


_local = threading.local()


def _watches() -> list[Seen]:
    if not hasattr(_local, "watches"):
        _local.watches = []
    return _local.watches


@contextlib.contextmanager
def watch() -> Iterator[Seen]:
    """Collect every :class:`Observation` recorded inside the block (nested watches all collect)."""
    seen = Seen()
    watches = _watches()
    watches.append(seen)
    try:
        yield seen
    finally:
        watches.remove(seen)


def record(obs: Observation) -> None:
    """Add ``obs`` to every active :func:`watch` (a no-op outside one)."""
    if not isinstance(obs, Observation):
        raise TypeError(f"record() takes an Observation, got {type(obs).__name__}")
    for seen in _watches():
        seen.observations.append(obs)


# ---------------------------------------------------------------------------------------------
# Source facts


def source_of(fn: Any) -> str | None:
    """The student's source text, or None when it cannot be had.

    ``fn.__course_source__`` when set (on ``fn`` or along its ``__wrapped__`` chain: the grader's
    proxies carry the text the kernel sent), else :func:`inspect.getsource` of the function (for a
    callable object, of its class). Never raises.
    """
    target, chain = fn, []
    for _ in range(20):  # follow functools.wraps chains by hand (inspect.unwrap may loop)
        if target is None:
            break
        chain.append(target)
        try:
            text = vars(target).get("__course_source__") if hasattr(target, "__dict__") else None
        except TypeError:
            text = None
        if isinstance(text, str):
            return text
        target = getattr(target, "__wrapped__", None) if not isinstance(target, type) else None
    target = chain[-1] if chain else None
    if target is None:
        return None
    if inspect.ismethod(target):
        target = target.__func__
    if not (inspect.isfunction(target) or inspect.isclass(target)):
        if inspect.isbuiltin(target) or not callable(target):
            return None
        target = type(target)
    try:
        return textwrap.dedent(inspect.getsource(target))
    except Exception:  # noqa: BLE001 - OSError, TypeError, ...: no source to read
        return None


class Tampered(BaseException):
    """The grader's helper in the student's kernel did not answer as it must (the student's code
    replaced it): the exercise gets no points. A ``BaseException``, so that no checker's
    ``except Exception`` turns it into a hint."""


_graph_local = threading.local()


@contextlib.contextmanager
def graph_request(grad: tuple[int, ...]) -> Iterator[dict]:
    """Ask a grader's proxy called inside the block for the autograd facts of its result, computed
    where the graph lives (in the student's kernel): ``box["facts"]`` is then a dict with
    ``tensor`` (the result, or its first item, is a tensor), ``requires_grad``, ``connected``
    (gradients reach the inputs at positions ``grad``, or a module argument's parameters) and
    ``backward_error`` (the message of a failed backward pass, or None). Outside the grader the
    box stays empty."""
    box: dict = {"grad": tuple(grad)}
    previous = getattr(_graph_local, "box", None)
    _graph_local.box = box
    try:
        yield box
    finally:
        _graph_local.box = previous


def wanted_graph() -> dict | None:
    """The box of the innermost :func:`graph_request` (for the grader's proxies), or None."""
    return getattr(_graph_local, "box", None)


def is_remote(fn: Any) -> bool:
    """True for a grader's proxy of a function that runs in another process (it sets
    ``__course_remote__ = True``, or carries ``__course_source__``): its results come back as data,
    so what only a local call can show (autograd graphs, object identity) is not checked on it."""
    target = fn
    for _ in range(20):
        if target is None:
            return False
        try:
            own = vars(target) if hasattr(target, "__dict__") else {}
        except TypeError:
            own = {}
        if own.get("__course_remote__") or isinstance(own.get("__course_source__"), str):
            return True
        target = getattr(target, "__wrapped__", None) if not isinstance(target, type) else None
    return False


@dataclass(frozen=True)
class SourceFacts:
    """What the student's source says, read by :mod:`ast` without running it.

    ``parsed`` is False when there was no source, or it did not parse (every other field is then
    empty: a checker must not conclude anything from the absence of a fact then).
    """

    parsed: bool = False
    loops: frozenset = frozenset()          # "for", "while", "comprehension"
    modules: frozenset = frozenset()        # imported modules and every parent: {"numpy", "companion",
                                            # "companion.positional"}
    imported: frozenset = frozenset()       # "module.name" for `from module import name`
    names: frozenset = frozenset()          # every bare name read or written
    attributes: frozenset = frozenset()     # every attribute name (`x.norm` -> "norm")
    chains: frozenset = frozenset()         # dotted chains of names (`np.linalg.norm`, `F.softmax`)
    dynamic_import: bool = False            # __import__/importlib with a name that is not a literal
    loop_iters: frozenset = frozenset()     # the source text of what each loop iterates over

    def imports(self, module: str) -> bool:
        """True when the source imports ``module`` or anything inside it."""
        return module in self.modules or any(m.startswith(module + ".") for m in self.modules)


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _chain(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def facts(source: Any) -> SourceFacts:
    """The :class:`SourceFacts` of a source text (given a function: of its :func:`source_of`).

    Never executes anything and never raises: no source or a syntax error gives ``parsed=False``.
    """
    if source is not None and not isinstance(source, str):
        source = source_of(source)
    if not isinstance(source, str):
        return SourceFacts()
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return SourceFacts()
    loops, modules, imported, names, attributes, chains, iters = set(), set(), set(), set(), set(), set(), set()
    dynamic = False
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.AsyncFor, ast.comprehension)):
            try:
                iters.add(ast.unparse(node.iter)[:200])
            except Exception:  # noqa: BLE001 - a fact we can do without
                pass
        if isinstance(node, (ast.For, ast.AsyncFor)):
            loops.add("for")
        elif isinstance(node, ast.While):
            loops.add("while")
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            loops.add("comprehension")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                modules.update(_parents(alias.name))
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0 and node.module:
                modules.update(_parents(node.module))
                for alias in node.names:
                    imported.add(f"{node.module}.{alias.name}")
                    modules.add(f"{node.module}.{alias.name}")  # may be a submodule
            else:
                dynamic = True  # a relative import: we cannot tell which module
        elif isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            attributes.add(node.attr)
            chain = _chain(node)
            if chain:
                chains.add(chain)
        if isinstance(node, ast.Call):
            target = _chain(node.func)
            if target in {"__import__", "importlib.import_module", "import_module", "builtins.__import__",
                          "importlib.__import__"}:
                arg = node.args[0] if node.args else None
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    modules.update(_parents(arg.value))
                else:
                    dynamic = True
            elif target in {"eval", "exec", "compile"}:
                dynamic = True  # code built at run time: the source does not say what it does
    return SourceFacts(True, frozenset(loops), frozenset(modules), frozenset(imported), frozenset(names),
                       frozenset(attributes), frozenset(chains), dynamic, frozenset(iters))
