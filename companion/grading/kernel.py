"""The grader's side of the wire *inside the student's kernel* (imported there, never by the grader).

The grader drives the kernel with ordinary ``execute_request`` messages whose code is one call,
``handle('<request name>')``. A request (written by the grader, in a folder the kernel can only
read) names an operation: look a name up in the student's namespace, call a student's function
with the grader's arguments, read an attribute of an object that stayed in the kernel. The reply
is written with :func:`companion.grading.wire.write_safe`, the format whose loading runs no code,
into the only folder the kernel shares with the grader for writing.

**Data only, both ways.** The grader's arguments arrive as data: tensors, containers, models
and optimizers rebuilt from a class named on an allow-list (:data:`ALLOWED`) and their state, and
the checkers' helper functions (a stand-in attention, a norm) rebuilt here from their code and
captured values. Nothing in the kernel refers to an object of the grader's: there is no way back
but the reply. The one thing a checker may need to learn besides the result, whether the
student's code called a function the checker watches (``_core.recording``), comes back as the
numbers of the watched functions that were called.

**Rules.** A student's function is called through :func:`companion.exercises.rules.observe`, and
the :class:`~companion.exercises.rules.Observation` travels back as JSON with the result, so that
the grader's checkers see the torch calls made in the kernel exactly as a notebook's check does.
With the function itself (a ``get``) comes its source text, preceded by an ``import`` line for
each global name it uses that refers to a module or to a function of a module (so that an answer
imported from ``companion`` in another cell shows in the source the checkers read).

Nothing here is trusted by the grader: the student's code runs in this process and may have
replaced any of it. A student who tampers with it can only spoil what their own functions
appear to return or do, which is no more than a wrong answer.
"""
from __future__ import annotations

import errno
import dis
import inspect
import itertools
import os
import pickle
import socket
import time
import traceback
import types
from typing import Any

from companion.grading import wire

_handles: dict[int, Any] = {}
_next_handle = itertools.count(1)
_in, _out = ".", "."
_called: set[int] = set()  # the watched functions (recorders) called during the current request

#: Modules whose classes and functions a request may name (everything else is refused).
ALLOWED = ("torch", "companion", "numpy", "collections", "cloudpickle", "copyreg", "functools", "_codecs",
           "types", "math", "operator", "_operator", "typing", "enum", "dataclasses", "builtins", "copy",
           "itertools", "string", "re", "random", "_collections_abc", "abc", "__builtin__", "copy_reg")
_FORBIDDEN_BUILTINS = {"eval", "exec", "compile", "open", "__import__", "input", "breakpoint", "exit", "quit"}


# --------------------------------------------------------------------------------- set-up
def prelude(in_dir: str, out_dir: str, block_network: bool = True, seed: int | None = 0) -> None:
    """Run once, before any of the student's code: remember where files are, cut the network,
    seed the random generators, and die with the grader."""
    global _in, _out
    _in, _out = in_dir, out_dir
    if block_network:
        _block_network()
    if seed is not None:
        import random

        import numpy
        import torch

        random.seed(seed)
        numpy.random.seed(seed)
        torch.manual_seed(seed)
    try:  # PR_SET_PDEATHSIG = 1: SIGKILL this kernel when its parent ends
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))
    except Exception:
        pass


def _block_network() -> None:
    """Refuse internet sockets (inside the sandbox there is no network anyway; this is the
    fallback for a grader without one)."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENETUNREACH, "network access is disabled while grading")

    internet = (socket.AF_INET, getattr(socket, "AF_INET6", socket.AF_INET))

    def guard(name: str) -> None:
        original = getattr(socket.socket, name)

        def method(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if self.family in internet:
                refuse()
            return original(self, *args, **kwargs)

        setattr(socket.socket, name, method)

    for name in ("connect", "connect_ex", "sendto", "sendmsg", "bind"):
        guard(name)
    for name in ("create_connection", "getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        setattr(socket, name, refuse)


# ------------------------------------------------------------------------------- requests
class _Missing(Exception):
    pass


def _new_handle(obj: Any) -> int:
    n = next(_next_handle)
    _handles[n] = obj
    return n


def _handle(n: int) -> Any:
    """Unpickling hook: the kernel object behind a placeholder the grader sends back."""
    if type(n) is not int or n not in _handles:
        raise LookupError(f"the object {n!r} is no longer in this kernel")
    return _handles[n]


def _recorder(number: int, original: Any) -> Any:
    """Unpickling hook: a function the checker watches (``_core.recording``): calls ``original``
    and notes that watched function ``number`` was called."""
    def watched(*args: Any, **kwargs: Any) -> Any:
        _called.add(number)
        return original(*args, **kwargs)

    return watched


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.split(".")[0] not in ALLOWED or (module in ("builtins", "__builtin__") and name in _FORBIDDEN_BUILTINS):
            raise pickle.UnpicklingError(f"{module}.{name} is not on the grader's list of allowed classes")
        return super().find_class(module, name)


_PICKLE = types.SimpleNamespace(Unpickler=_Unpickler, load=lambda f, **kw: _Unpickler(f, **kw).load(),
                                loads=pickle.loads, __name__="pickle")


def _user_ns() -> dict:
    return get_ipython().user_ns  # type: ignore[name-defined]  # noqa: F821


def handle(request_name: str) -> None:
    """Serve one request of the grader (see the module docstring)."""
    import torch

    name = os.path.basename(request_name)
    request = torch.load(os.path.join(_in, name), weights_only=False, pickle_module=_PICKLE)
    reply_path = os.path.join(_out, os.path.basename(str(request["reply"])))
    _called.clear()
    try:
        value, extra = _dispatch(request)
        out: dict = {"ok": True, "value": value, **extra}
    except _Missing:
        out = {"ok": False, "missing": True}
    except BaseException as exc:  # the student's exception (or SystemExit, KeyboardInterrupt)
        out = {"ok": False, "error": describe(exc)}
    out["recorders"] = sorted(_called)
    try:
        wire.write_safe(reply_path, out, handle=_new_handle, params=_params_of(request), leaves=_leaves_of(request))
    except BaseException as exc:
        wire.write_safe(reply_path, {"ok": False, "error": describe(exc), "unsendable": True})


def _leaves_of(request: dict) -> set[int] | None:
    """The ids of a call's tensor arguments and of its module arguments' parameters (None: not a call)."""
    import torch

    if request.get("op") != "call":
        return None
    found: set[int] = set()
    for a in [*request.get("args", ()), *request.get("kwargs", {}).values()]:
        if isinstance(a, torch.Tensor):
            found.add(id(a))
        elif isinstance(a, torch.nn.Module):
            found.update(id(p) for p in a.parameters())
    return found


def _params_of(request: dict) -> dict[int, list]:
    """The parameters of a call's module arguments: id -> [argument, name]."""
    import torch

    if request.get("op") != "call":
        return {}
    found: dict[int, list] = {}
    args, kwargs = request.get("args", ()), request.get("kwargs", {})
    for key, a in [*enumerate(args), *kwargs.items()]:
        if isinstance(a, torch.nn.Module):
            for name, param in a.named_parameters():
                found.setdefault(id(param), [key, name])
    return found


_relays: dict[int, tuple] = {}  # relayed results: number -> (result, the inputs of its backward pass)
_MAX_RELAYS = 16


def _relay_backward(request: dict) -> list:
    """The gradients of a relayed result for its inputs, through the student's graph (once)."""
    import torch

    kept = _relays.pop(request.get("relay"), None)  # type: ignore[arg-type]
    if kept is None:
        raise LookupError("that result is no longer in this kernel")
    value, inputs = kept
    grad = request.get("grad")
    if not isinstance(grad, torch.Tensor) or grad.shape != value.shape:
        raise ValueError("a gradient of the wrong shape")
    # the graph is kept: the items of one tuple result may share parts of it, each relayed on its own
    grads = torch.autograd.grad([value], inputs, [grad.to(value.dtype)], allow_unused=True, retain_graph=True)
    return [None if g is None else g.detach() for g in grads]


def _keep_for_relay(value: Any, args: tuple, kwargs: dict, wanted: Any) -> int | list | None:
    """Keep a call's result and the kernel's copies of the inputs the grader names, for a relayed
    backward pass; its number (None: no graph to relay). A tuple or list of up to four results
    (a pair of rotated queries and keys, q, k and v): a list of numbers, one per item (None for an
    item without a graph)."""
    import torch

    if isinstance(value, (tuple, list)) and 0 < len(value) <= 4 and isinstance(wanted, list):
        kept = [_keep_for_relay(v, args, kwargs, wanted) if isinstance(v, torch.Tensor) else None for v in value]
        return kept if any(k is not None for k in kept) else None
    if not (isinstance(value, torch.Tensor) and value.requires_grad and isinstance(wanted, list)):
        return None
    inputs = []
    for where in wanted:
        key, name = where
        a = args[key] if isinstance(key, int) else kwargs[key]
        t = dict(a.named_parameters())[name] if name is not None else a
        if not isinstance(t, torch.Tensor):
            raise TypeError("not a tensor")
        inputs.append(t)
    while len(_relays) >= _MAX_RELAYS:
        _relays.pop(next(iter(_relays)))
    n = next(_next_handle)
    _relays[n] = (value, inputs)
    return n


def _dispatch(request: dict) -> tuple[Any, dict]:
    op = request["op"]
    if op == "backward":
        return _relay_backward(request), {}
    if op == "get":
        ns = _user_ns()
        if request["name"] not in ns:
            raise _Missing
        value = ns[request["name"]]
        return value, {"source": source(value), "origin": _origin(value)}
    target = request["target"]
    if op == "call":
        import torch

        rng = request.get("rng")
        if isinstance(rng, torch.Tensor):  # the grader's global generator, as the student's code would share it
            torch.set_rng_state(rng)
        args, kwargs = request.get("args", ()), request.get("kwargs", {})
        for key, grads in request.get("grads") or []:  # the gradients the grader's modules hold
            module = args[key] if isinstance(key, int) else kwargs[key]
            for name, param in module.named_parameters():
                if name in grads:
                    param.grad = grads[name]
        value, extra = _call(target, args, kwargs)
        extra["rng"] = torch.get_rng_state()
        if request.get("graph") is not None:
            extra["graph"] = graph_facts(value, args, kwargs, request["graph"])
        if request.get("relay") is not None:
            relay = _keep_for_relay(value, args, kwargs, request["relay"])
            if relay is not None:
                extra["relay"] = relay
        return value, extra
    if op == "getattr":
        return getattr(target, request["name"]), {}
    if op == "list":
        return list(target), {}
    if op == "len":
        return len(target), {}
    if op == "getitem":
        return target[request["key"]], {}
    raise ValueError(f"unknown operation {op!r}")


def _call(target: Any, args: tuple, kwargs: dict) -> tuple[Any, dict]:
    import torch

    from companion.exercises import rules

    tracked = [(i, a) for i, a in enumerate(args)] + list(kwargs.items())
    versions = {}
    for key, a in tracked:
        if isinstance(a, torch.Tensor):
            versions[key] = (a._version, a.grad)
    started = time.process_time()
    result, observation = rules.observe(target, *args, **kwargs)
    spent = time.process_time() - started  # the student's function alone (the wire's work is the grader's)
    sync = []
    for key, a in tracked:
        change = _changes(a, versions.get(key))
        if change is not None:
            sync.append([key, *change])
    return result, {"sync": sync, "observation": observation.to_json(), "cpu": spent}


def graph_facts(value: Any, args: tuple, kwargs: dict, grad: Any) -> dict:
    """What ``require_graph`` checks in a notebook, for the result of a call made here (where its
    autograd graph is): a tensor? requiring a gradient? does a backward pass reach the inputs at
    positions ``grad`` (and the parameters of module arguments), or does it fail?"""
    import torch

    out = value[0] if isinstance(value, (tuple, list)) and value else value
    if not isinstance(out, torch.Tensor):
        return {"tensor": False}
    facts: dict = {"tensor": True, "requires_grad": bool(out.requires_grad), "connected": False,
                   "backward_error": None}
    if not out.requires_grad:
        return facts
    positions = {g for g in grad if type(g) is int} if isinstance(grad, (list, tuple)) else set()
    inputs = [a for i, a in enumerate(args) if i in positions and isinstance(a, torch.Tensor) and a.requires_grad]
    for a in [*args, *kwargs.values()]:
        if isinstance(a, torch.nn.Module):
            inputs += [p for p in a.parameters() if p.requires_grad]
    if not inputs:
        return facts
    try:
        weights = torch.linspace(0.5, 1.5, out.numel(), dtype=torch.float64).reshape(out.shape)
        grads = torch.autograd.grad((out.double() * weights).sum(), inputs, allow_unused=True)
        facts["connected"] = any(g is not None for g in grads)
    except RuntimeError as exc:
        facts["backward_error"] = str(exc)[:300]
    return facts


def _changes(a: Any, before: Any) -> tuple[str, Any] | None:
    """What the grader needs to copy the in-place changes made to one argument."""
    import torch

    if isinstance(a, torch.Tensor):
        version, grad = before
        if a._version != version or a.grad is not grad:
            return "tensor", {"value": a, "grad": a.grad}
        return None
    if isinstance(a, torch.nn.Module):
        return "module", {
            "state": a.state_dict(),
            "grads": {name: p.grad for name, p in a.named_parameters() if p.grad is not None},
            "training": [[name, m.training] for name, m in a.named_modules()],
            # plain attributes (a checker's call counter on the model, say), as data
            "attributes": {k: v for k, v in vars(a).items() if type(v) in (int, float, bool, str)
                           and k != "training" and not k.startswith("__")},
        }
    if isinstance(a, torch.Generator):  # the draws it made move the caller's generator on too
        return "generator", a.get_state()
    if callable(getattr(a, "state_dict", None)) and callable(getattr(a, "load_state_dict", None)):
        return "state", a.state_dict()
    if type(a) in (list, dict, set, bytearray):
        return type(a).__name__, a
    return None


# --------------------------------------------------------------------------------- sources
def _origin(value: Any) -> str | None:
    """The module a callable comes from, under its wrappers (a cached companion function is the
    companion's, whatever its cache makes a call do)."""
    try:
        if not callable(value):
            return None
        module = getattr(inspect.unwrap(value), "__module__", None)
        return module if isinstance(module, str) else None
    except Exception:  # noqa: BLE001
        return None


def source(fn: Any, limit: int = 200_000) -> str | None:
    """The source of the student's function (or callable object's class), preceded by an import
    line for each global name it uses that is a module or a module's function or class."""
    target = fn
    if not (inspect.isfunction(target) or inspect.isclass(target) or inspect.ismethod(target)):
        if not callable(target) or inspect.isbuiltin(target):
            return None
        target = type(target)
    try:
        text = inspect.getsource(target)
    except Exception:  # noqa: BLE001 - OSError, TypeError: no source
        return None
    preamble = []
    code = getattr(inspect.unwrap(target) if inspect.isfunction(target) else target, "__code__", None)
    env = getattr(target, "__globals__", None) or {}
    names: set[str] = set()
    stack = [code] if code is not None else []
    while stack:  # the names read as globals (co_names also holds attribute names: cfg.learning_rate)
        c = stack.pop()
        names.update(i.argval for i in dis.get_instructions(c)
                     if i.opname in ("LOAD_GLOBAL", "LOAD_NAME") and isinstance(i.argval, str))
        stack.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    for name in sorted(names):
        if name not in env:
            continue
        value = env[name]
        if isinstance(value, types.ModuleType):
            preamble.append(f"import {value.__name__} as {name}")
            continue
        module = getattr(value, "__module__", None)
        qual = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
        if (isinstance(module, str) and isinstance(qual, str) and module not in ("__main__", "builtins")
                and not module.startswith("<") and module.replace(".", "").replace("_", "").isalnum()
                and qual.split(".")[0].isidentifier()):
            preamble.append(f"from {module} import {qual.split('.')[0]} as {name}")
    out = "\n".join(preamble + [text])
    return out[:limit]


def _line(exc: BaseException) -> int | None:
    """The line of the student's cell where ``exc`` was raised (as the checkers report it)."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename
        if name.startswith("<ipython-input") or "ipykernel" in name or name == "<IPY-INPUT>":
            return frame.lineno
    return None


def describe(exc: BaseException) -> dict:
    """An exception as plain data: its type, the names of its classes, its message and line."""
    try:
        message = str(exc)
    except BaseException:
        message = "(the exception's message could not be printed)"
    return {
        "type": type(exc).__name__,
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in type(exc).__mro__],
        "message": message[:4000],
        "line": _line(exc),
    }


