"""The grader's side of the wire *inside the student's kernel* (imported there, never by the grader).

The grader drives the kernel with ordinary ``execute_request`` messages whose code is one call,
``handle('<request file>')``. A request (written by the grader with ``torch.save``) names an
operation: look a name up in the student's namespace, call a student's function with the
grader's arguments, read an attribute of an object that stayed in the kernel. The reply is
written with :func:`companion.grading.wire.write_safe`, the format whose loading runs no code.

Nothing here is trusted by the grader: the student's code runs in this process and may have
replaced any of it. A student who tampers with it can only spoil the values their own functions
appear to return, which is no more than a wrong answer.

After a call, every argument the function may have changed in place (a tensor, a model's
parameters, gradients and train/eval mode, an optimizer's or scheduler's state, a list, a dict)
is sent back too, so that checkers which inspect side effects see them.

Functions the grader passes that cannot be pickled (a checker's closures) arrive as
:class:`GraderObject` proxies: calling one sends the arguments back to the grader over the
kernel's stdin channel (an ``input_request``), which runs the real function and answers.
"""
from __future__ import annotations

import errno
import itertools
import os
import socket
import traceback
from typing import Any

from companion.grading import wire

CALLBACK_PROMPT = "\x00course-grader-callback"

_handles: dict[int, Any] = {}
_next_handle = itertools.count(1)
_next_callback = itertools.count(1)
_dir: str = "."


# --------------------------------------------------------------------------------- set-up
def prelude(transfer_dir: str, block_network: bool = True) -> None:
    """Run once, before any of the student's code: remember where files go, cut the network,
    and die with the grader (a kernel must never outlive the process that grades it)."""
    global _dir
    _dir = transfer_dir
    if block_network:
        _block_network()
    try:  # PR_SET_PDEATHSIG = 1: SIGKILL this kernel when its parent (the grader) ends
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, int(signal.SIGKILL))
    except Exception:
        pass


def _block_network() -> None:
    """Refuse internet sockets (the sandbox may also have put the kernel in an empty network
    namespace; this is the fallback that works everywhere)."""
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
    """Unpickling hook: the kernel object behind a grader's placeholder."""
    if n not in _handles:
        raise LookupError(f"the object {n} is no longer in this kernel")
    return _handles[n]


def _user_ns() -> dict:
    return get_ipython().user_ns  # type: ignore[name-defined]  # noqa: F821


def handle(request_path: str) -> None:
    """Serve one request of the grader (see the module docstring)."""
    import torch

    request = torch.load(request_path, weights_only=False)
    reply_path = request["reply"]
    try:
        value, sync = _dispatch(request)
        out: dict = {"ok": True, "value": value, "sync": sync}
    except _Missing:
        out = {"ok": False, "missing": True}
    except BaseException as exc:  # the student's exception (or SystemExit, KeyboardInterrupt)
        out = {"ok": False, "error": describe(exc)}
    try:
        wire.write_safe(reply_path, out, handle=_new_handle)
    except BaseException as exc:
        wire.write_safe(reply_path, {"ok": False, "error": describe(exc), "unsendable": True})


def _dispatch(request: dict) -> tuple[Any, list]:
    op = request["op"]
    if op == "get":
        ns = _user_ns()
        if request["name"] not in ns:
            raise _Missing
        return ns[request["name"]], []
    target = request["target"]
    if op == "call":
        return _call(target, request.get("args", ()), request.get("kwargs", {}))
    if op == "getattr":
        return getattr(target, request["name"]), []
    if op == "list":
        return list(target), []
    if op == "len":
        return len(target), []
    if op == "getitem":
        return target[request["key"]], []
    raise ValueError(f"unknown operation {op!r}")


def _call(target: Any, args: tuple, kwargs: dict) -> tuple[Any, list]:
    import torch

    tracked = [(i, a) for i, a in enumerate(args)] + list(kwargs.items())
    versions = {}
    for key, a in tracked:
        if isinstance(a, torch.Tensor):
            versions[key] = (a._version, a.grad)
    result = target(*args, **kwargs)
    sync = []
    for key, a in tracked:
        change = _changes(a, versions.get(key))
        if change is not None:
            sync.append([key, *change])
    return result, sync


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
        }
    if callable(getattr(a, "state_dict", None)) and callable(getattr(a, "load_state_dict", None)):
        return "state", a.state_dict()
    if type(a) in (list, dict, set, bytearray):
        return type(a).__name__, a
    return None


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


# ------------------------------------------------------------------------------ callbacks
class GraderObject:
    """A function or object of the grader's, used by the student's code through callbacks."""

    def __init__(self, ref: int, type_name: str, is_callable: bool):
        self._ref, self._type, self._callable = ref, type_name, is_callable

    def __repr__(self) -> str:
        return f"<{self._type} of the grader>"

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _callback({"op": "call", "ref": self._ref, "args": args, "kwargs": kwargs})

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _callback({"op": "getattr", "ref": self._ref, "name": name})


def _grader_ref(ref: int, type_name: str, is_callable: bool) -> GraderObject:
    """Unpickling hook: a proxy for an object the grader kept by reference."""
    return GraderObject(ref, type_name, is_callable)


def _callback(message: dict) -> Any:
    import torch

    n = next(_next_callback)
    request = os.path.join(_dir, f"cb-{n}.st")
    reply = os.path.join(_dir, f"cbr-{n}.pt")
    wire.write_safe(request, message, handle=_new_handle)
    kernel = get_ipython().kernel  # type: ignore[name-defined]  # noqa: F821
    kernel.raw_input(f"{CALLBACK_PROMPT} {n}")
    answer = torch.load(reply, weights_only=False)
    for path in (request, reply):
        try:
            os.remove(path)
        except OSError:
            pass
    if answer.get("ok"):
        return answer["value"]
    type_name, text = answer["error"]
    import builtins

    cls = getattr(builtins, type_name, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls = RuntimeError
    raise cls(text)
