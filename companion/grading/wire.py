"""How values travel between the grader and a student's kernel.

Two directions, two formats:

* **kernel -> grader** (untrusted: the student's code produced it): a *safetensors* file whose
  header metadata holds a JSON description of the value. Loading it runs no code: JSON gives
  only ``None``, booleans, numbers, strings, lists and dicts, safetensors gives only tensors,
  and :func:`decode` builds nothing but plain containers, tensors, NumPy arrays and scalars,
  and placeholders (:class:`Remote`) for objects that stay in the kernel.
* **grader -> kernel** (the grader's own arguments): ``torch.save`` with a pickler that sends
  every function *by value* (:mod:`cloudpickle`: its code and the values it captured), so that a
  model, an optimizer, the tensors they share and a checker's helper functions arrive as one
  object graph rebuilt in the kernel from classes on an allow-list
  (:data:`companion.grading.kernel.ALLOWED`). Nothing is sent by reference: no object of the
  grader's can be reached from the kernel. Two things are sent as numbers: a placeholder of a
  kernel object (:class:`Remote`) goes back as its handle, and a function a checker watches
  (``_core.recording``) as the number under which the reply says whether it was called.

The kernel-side encoder never fails: a value it cannot describe becomes a *handle*, a reference
to the object kept in the kernel, which the grader sees as a :class:`Remote` placeholder.
"""
from __future__ import annotations

import base64
import io
import json
import math
import os
import pickle
import sys
import types
from typing import Any, Callable

import torch

#: The safetensors metadata key that holds the JSON description.
META_KEY = "course-grader"
#: Results larger than this are refused (a student's function could return 100 GB).
MAX_BYTES = 256 * 2**20
_MAX_DEPTH = 64
_MAX_ITEMS = 1_000_000  # elements of all containers together
_MAX_STR = 10_000_000


class WireError(Exception):
    """A file from the kernel could not be read as a value (too large, malformed, forged)."""


# --------------------------------------------------------------------------------- encoding
class _TooLarge(Exception):
    pass


class _Encoder:
    """Turns a value into (JSON-able structure, {name: tensor}); unknown objects become handles."""

    def __init__(self, handle: Callable[[Any], int] | None, params: dict[int, list] | None = None,
                 leaves: set[int] | None = None):
        self.handle = handle
        # a call's inputs: a result's tensor "requires grad" when it carries a graph, or is one of
        # them (a leaf made inside the call, x.detach().requires_grad_(), carries no gradient back)
        self.leaves = leaves
        self.params = params or {}  # id of a parameter of the call's module arguments -> [argument, name]
        self.tensors: dict[str, torch.Tensor] = {}
        self.items = 0
        self.bytes = 0
        self.active: set[int] = set()  # containers being encoded (to detect cycles)

    def _tensor(self, t: torch.Tensor) -> str:
        size = t.numel() * t.element_size()
        if self.bytes + size > MAX_BYTES - 2**20:
            raise _TooLarge(size)
        self.bytes += size
        name = f"t{len(self.tensors)}"
        plain = t.detach()
        if type(plain) is not torch.Tensor:
            plain = plain.as_subclass(torch.Tensor)
        self.tensors[name] = plain.cpu().contiguous().clone()
        return name

    def _opaque(self, obj: Any, why: str) -> dict:
        kind = type(obj)
        info = {"type": kind.__name__, "module": getattr(kind, "__module__", "?") or "?", "why": why}
        try:
            info["callable"] = bool(callable(obj))
        except Exception:
            info["callable"] = False
        if self.handle is not None:
            try:
                info["id"] = self.handle(obj)
            except Exception:
                pass
        return {"$remote": info}

    def encode(self, obj: Any, depth: int = 0) -> Any:
        self.items += 1
        if depth > _MAX_DEPTH or self.items > _MAX_ITEMS:
            return self._opaque(obj, "too deeply nested or too large")
        kind = type(obj)
        if obj is None or kind is bool or kind is str and len(obj) <= _MAX_STR:
            return obj
        if kind is int:
            return obj if abs(obj) < 2**53 else {"$int": str(obj)}
        if kind is float:
            return obj if math.isfinite(obj) else {"$float": repr(obj)}
        if obj is Ellipsis:
            return {"$ellipsis": True}
        if isinstance(obj, torch.Tensor) and id(obj) in self.params:  # the argument's own parameter
            return {"$param": list(self.params[id(obj)])}
        if isinstance(obj, torch.Tensor):
            try:
                if obj.is_sparse or obj.is_quantized or obj.is_meta or obj.is_nested:
                    return self._opaque(obj, "a sparse, quantized, meta or nested tensor")
                name = self._tensor(obj)
                grad = bool(obj.requires_grad) and (self.leaves is None or obj.grad_fn is not None
                                                    or id(obj) in self.leaves)
                return {"$tensor": name, "requires_grad": grad}
            except _TooLarge as exc:
                return self._opaque(obj, f"a tensor too large to send back ({exc.args[0] / 2**20:.0f} MB)")
            except Exception:
                return self._opaque(obj, "a tensor that could not be copied")
        if kind is complex:
            return {"$complex": [self.encode(obj.real), self.encode(obj.imag)]}
        if kind in (bytes, bytearray) and len(obj) <= _MAX_STR:
            return {"$bytes": base64.b64encode(bytes(obj)).decode(), "bytearray": kind is bytearray}
        if isinstance(obj, torch.dtype):
            return {"$dtype": str(obj).removeprefix("torch.")}
        if isinstance(obj, torch.device):
            return {"$device": str(obj)}
        if kind is torch.Size:
            return {"$size": [int(n) for n in obj]}
        if kind is range:
            return {"$range": [obj.start, obj.stop, obj.step]}
        if kind is slice:
            return {"$slice": [self.encode(obj.start, depth + 1), self.encode(obj.stop, depth + 1), self.encode(obj.step, depth + 1)]}
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray):
            if obj.dtype.kind in "biufc":
                try:
                    return {"$ndarray": self._tensor(torch.from_numpy(numpy.ascontiguousarray(obj))), "dtype": obj.dtype.str}
                except _TooLarge:
                    return self._opaque(obj, "an array too large to send back")
                except Exception:
                    pass
            return self._opaque(obj, f"a NumPy array of dtype {obj.dtype}")
        if numpy is not None and isinstance(obj, numpy.generic) and obj.dtype.kind in "biufc":
            value = obj.item()
            return {"$npscalar": self.encode(value, depth + 1), "dtype": obj.dtype.str}
        base = next((b for b in (list, tuple, set, frozenset, dict) if isinstance(obj, b)), None)
        if base is not None:
            if id(obj) in self.active:
                return self._opaque(obj, "a container that contains itself")
            self.active.add(id(obj))
            try:
                if base is dict:  # OrderedDict, defaultdict, ... arrive as plain dicts
                    return {"$dict": [[self.encode(k, depth + 1), self.encode(v, depth + 1)] for k, v in list(dict.items(obj))]}
                items = [self.encode(x, depth + 1) for x in list(base.__iter__(obj))]
                if base is list:
                    return items
                out = {"$" + base.__name__: items}
                fields = getattr(kind, "_fields", None) or getattr(kind, "__match_args__", None)
                if base is tuple and kind is not tuple and isinstance(fields, tuple) and len(fields) == len(items):
                    out["fields"] = [str(f) for f in fields]  # a named tuple, or torch.return_types.*
                    out["name"] = kind.__name__
                return out
            finally:
                self.active.discard(id(obj))
        return self._opaque(obj, "not plain data")


def encode(obj: Any, handle: Callable[[Any], int] | None = None,
           params: dict[int, list] | None = None, leaves: set[int] | None = None) -> tuple[Any, dict[str, torch.Tensor]]:
    """``(structure, tensors)`` describing ``obj``; objects that are not plain data become
    ``{"$remote": {...}}``, with an ``id`` from ``handle(obj)`` when ``handle`` is given; a parameter
    of a module argument of the call (``params``: its id -> ``[argument, name]``) becomes
    ``{"$param": [argument, name]}``, which the grader reads as its own module's parameter."""
    enc = _Encoder(handle, params, leaves)
    return enc.encode(obj), enc.tensors


def write_safe(path: str | os.PathLike, obj: Any, handle: Callable[[Any], int] | None = None,
               params: dict[int, list] | None = None, leaves: set[int] | None = None) -> None:
    """Write ``obj`` in the safe format (safetensors + JSON), for the grader to read."""
    from safetensors.torch import save_file

    structure, tensors = encode(obj, handle, params, leaves)
    text = json.dumps(structure, allow_nan=False)
    tmp = f"{path}.part"
    save_file(tensors, tmp, metadata={META_KEY: text})
    os.replace(tmp, path)


# --------------------------------------------------------------------------------- decoding
class Remote:
    """A placeholder for an object that stayed in the student's kernel.

    The grader sees one where the student's code returned something that is not plain data (a
    function, a module, an object of the student's own class). Its class is named after the
    student's type, so that a checker's ``type(got).__name__`` reads naturally; the session gives
    it behaviour (calling it calls the object in the kernel). Without a session it only answers
    ``repr``.
    """

    __slots__ = ("_remote_info", "_remote_session", "__dict__")  # __dict__: ``__course_source__``

    def __init__(self, info: dict, session: Any = None):
        object.__setattr__(self, "_remote_info", info)
        object.__setattr__(self, "_remote_session", session)

    def __repr__(self) -> str:
        info = self._remote_info
        return f"<{info.get('type', 'object')} object in the student's kernel>"

    def _remote(self, op: str, **payload: Any) -> Any:
        # The checker may be watching the student's function (rules.observe): the grader's own
        # work from here on is not the student's, so neither the torch-function recorder nor the
        # module profiler sees it; what the student's code did comes back from the kernel.
        profiler = sys.getprofile()
        sys.setprofile(None)
        try:
            with torch._C.DisableTorchFunction():
                session = self._remote_session
                if session is None or "id" not in self._remote_info:
                    raise TypeError(f"a {self._remote_info.get('type', 'object')} object "
                                    f"({self._remote_info.get('why', 'not plain data')}) cannot be used by the grader")
                return session.remote(self, op, **payload)
        finally:
            sys.setprofile(profiler)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._remote_info.get("callable"):
            raise TypeError(f"'{self._remote_info.get('type', 'object')}' object is not callable")
        return self._remote("call", args=args, kwargs=kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._remote("getattr", name=name)

    def __iter__(self):
        return iter(self._remote("list"))

    def __len__(self) -> int:
        value = self._remote("len")
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError("__len__ of the student's object did not return a non-negative int")
        return value

    def __getitem__(self, key: Any) -> Any:
        return self._remote("getitem", key=key)

    def __bool__(self) -> bool:
        return True

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("objects of the student's kernel cannot be changed by the grader")


def _outside_the_rules(fn: Any) -> Any:
    """``fn`` with globals named ``grader-proxy``: the rules' module profiler notes the module of
    each Python function the student's code calls, and a placeholder's entry points (reached
    before :meth:`Remote._remote` can pause the profiler) must not read as ``companion.grading``."""
    return types.FunctionType(fn.__code__, {**fn.__globals__, "__name__": "grader-proxy"}, fn.__name__,
                              fn.__defaults__, fn.__closure__)


for _name in ("__call__", "__getattr__", "__iter__", "__len__", "__getitem__", "_remote"):
    setattr(Remote, _name, _outside_the_rules(Remote.__dict__[_name]))
del _name

_REMOTE_CLASSES: dict[str, type] = {}


_MAX_CLASSES = 256  # distinct type names remembered (a forged reply may name millions)


def remote_class(type_name: str) -> type:
    """The :class:`Remote` subclass named ``type_name`` (so ``type(x).__name__`` is the student's).

    At most :data:`_MAX_CLASSES` names are kept: past that, a reply naming ever new types costs the
    grader no memory that outlives it (the oldest class is forgotten, not the objects' names)."""
    name = type_name if type_name.isidentifier() else "object"
    kind = _REMOTE_CLASSES.pop(name, None)
    if kind is None:
        kind = type(name, (Remote,), {"__slots__": (), "__module__": "student"})
        while len(_REMOTE_CLASSES) >= _MAX_CLASSES:
            _REMOTE_CLASSES.pop(next(iter(_REMOTE_CLASSES)))
    _REMOTE_CLASSES[name] = kind
    return kind


_NAMED_TUPLES: dict[tuple, type] = {}


def named_tuple(name: str, fields: list[str]) -> type:
    """A named tuple class like the student's (so that ``result.values`` works), made safely."""
    import collections
    import keyword

    name = name if name.isidentifier() and not keyword.iskeyword(name) else "result"
    ok = all(f.isidentifier() and not keyword.iskeyword(f) and not f.startswith("_") for f in fields)
    fields = fields if ok and len(set(fields)) == len(fields) else [f"field{i}" for i in range(len(fields))]
    key = (name, tuple(fields))
    kind = _NAMED_TUPLES.pop(key, None) or collections.namedtuple(name, fields)
    while len(_NAMED_TUPLES) >= _MAX_CLASSES:
        _NAMED_TUPLES.pop(next(iter(_NAMED_TUPLES)))
    _NAMED_TUPLES[key] = kind
    return kind


def _dtype(name: Any) -> torch.dtype:
    value = getattr(torch, str(name), None)
    if not isinstance(value, torch.dtype):
        raise WireError(f"unknown dtype {name!r}")
    return value


class ParamRef:
    """A parameter of one of the call's module arguments, by argument and name (the grader puts
    its own module's parameter in its place, so that ``p is model.weight`` holds as in the notebook)."""

    __slots__ = ("key", "name")

    def __init__(self, key: "int | str", name: str):
        self.key, self.name = key, name


def resolve_params(value: Any, args: tuple, kwargs: dict, depth: int = 0) -> Any:
    """``value`` with every :class:`ParamRef` replaced by the grader's parameter it names."""
    if depth > _MAX_DEPTH + 2:
        return value
    if isinstance(value, ParamRef):
        try:
            module = args[value.key] if isinstance(value.key, int) else kwargs[value.key]
            return module.get_parameter(value.name)
        except (IndexError, KeyError, AttributeError, TypeError) as exc:
            raise WireError(f"a reference to a parameter the grader does not have: {value.name!r}") from exc
    if type(value) is list:
        return [resolve_params(v, args, kwargs, depth + 1) for v in value]
    if isinstance(value, tuple):
        items = [resolve_params(v, args, kwargs, depth + 1) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)
    if type(value) is dict:
        return {k: resolve_params(v, args, kwargs, depth + 1) for k, v in value.items()}
    return value


class _Decoder:
    def __init__(self, tensors: dict[str, torch.Tensor], session: Any):
        self.tensors, self.session = tensors, session

    def _tensor(self, name: Any) -> torch.Tensor:
        if not isinstance(name, str) or name not in self.tensors:
            raise WireError(f"a reference to a missing tensor {name!r}")
        return self.tensors[name]

    def decode(self, x: Any, depth: int = 0) -> Any:
        if depth > _MAX_DEPTH + 2:
            raise WireError("too deeply nested")
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        if isinstance(x, list):
            return [self.decode(v, depth + 1) for v in x]
        if not isinstance(x, dict) or len(x) == 0:
            raise WireError(f"unexpected {type(x).__name__} in the description")
        tag = next(iter(x))
        v = x[tag]
        if tag == "$tensor":
            t = self._tensor(v)
            if x.get("requires_grad") is True and (t.is_floating_point() or t.is_complex()):
                t = t.requires_grad_(True)
            return t
        if tag == "$param":
            if not (isinstance(v, list) and len(v) == 2 and type(v[0]) in (int, str) and type(v[1]) is str):
                raise WireError("a malformed parameter reference")
            return ParamRef(v[0], v[1])
        if tag == "$tuple":
            items = tuple(self.decode(e, depth + 1) for e in self._list(v))
            fields = x.get("fields")
            if isinstance(fields, list) and len(fields) == len(items):
                return named_tuple(str(x.get("name", "result")), [str(f) for f in fields])(*items)
            return items
        if tag == "$set":
            return {self.decode(e, depth + 1) for e in self._list(v)}
        if tag == "$frozenset":
            return frozenset(self.decode(e, depth + 1) for e in self._list(v))
        if tag == "$dict":
            out = {}
            for pair in self._list(v):
                if not isinstance(pair, list) or len(pair) != 2:
                    raise WireError("a malformed dict entry")
                out[self.decode(pair[0], depth + 1)] = self.decode(pair[1], depth + 1)
            return out
        if tag == "$int":
            return int(str(v))
        if tag == "$float":
            if v not in ("nan", "inf", "-inf"):
                raise WireError(f"a malformed float {v!r}")
            return float(v)
        if tag == "$ellipsis":
            return Ellipsis
        if tag == "$complex":
            re_, im = self._list(v)
            return complex(float(self.decode(re_)), float(self.decode(im)))
        if tag == "$bytes":
            data = base64.b64decode(str(v), validate=True)
            return bytearray(data) if x.get("bytearray") is True else data
        if tag == "$dtype":
            return _dtype(v)
        if tag == "$device":
            return torch.device(str(v))
        if tag == "$size":
            return torch.Size([int(n) for n in self._list(v)])
        if tag == "$range":
            start, stop, step = (int(n) for n in self._list(v))
            return range(start, stop, step)
        if tag == "$slice":
            return slice(*(self.decode(e, depth + 1) for e in self._list(v)[:3]))
        if tag == "$ndarray":
            import numpy

            dtype = numpy.dtype(str(x.get("dtype")))
            if dtype.kind not in "biufc":
                raise WireError(f"an array of dtype {dtype}")
            return self._tensor(v).numpy().astype(dtype, copy=True)
        if tag == "$npscalar":
            import numpy

            dtype = numpy.dtype(str(x.get("dtype")))
            if dtype.kind not in "biufc":
                raise WireError(f"a scalar of dtype {dtype}")
            return dtype.type(self.decode(v, depth + 1))
        if tag == "$remote":
            if not isinstance(v, dict):
                raise WireError("a malformed remote object")
            info = {
                "type": str(v.get("type", "object"))[:100],
                "module": str(v.get("module", "?"))[:200],
                "why": str(v.get("why", ""))[:200],
                "callable": v.get("callable") is True,
            }
            if isinstance(v.get("id"), int) and not isinstance(v.get("id"), bool):
                info["id"] = v["id"]
            return remote_class(info["type"])(info, self.session)
        raise WireError(f"an unknown tag {tag!r}")

    @staticmethod
    def _list(v: Any) -> list:
        if not isinstance(v, list):
            raise WireError("a malformed container")
        return v


def decode(structure: Any, tensors: dict[str, torch.Tensor], session: Any = None) -> Any:
    """The value described by ``structure`` (see :func:`encode`). Raises :class:`WireError`."""
    try:
        return _Decoder(tensors, session).decode(structure)
    except WireError:
        raise
    except (Exception, RecursionError) as exc:  # forged or malformed: never crash the grader
        raise WireError(f"a malformed description ({type(exc).__name__}: {exc})") from None


def read_bytes(path: str | os.PathLike, max_bytes: int, dir_fd: int | None = None) -> bytes:
    """The bytes of a regular file the kernel wrote, opened without following a link (a link the
    kernel planted fails here instead of leading the grader elsewhere); with ``dir_fd``, ``path``
    is a name in the folder that descriptor holds."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0), dir_fd=dir_fd)
    except OSError as exc:
        raise WireError(f"no reply file ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        import stat

        if not stat.S_ISREG(info.st_mode):
            raise WireError("the reply is not a regular file")
        if info.st_size > max_bytes:
            raise WireError(f"the value is too large to send back ({info.st_size / 2**20:.0f} MB; the limit is "
                            f"{max_bytes / 2**20:.0f} MB)")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:
                raise WireError("the reply file grew while it was read")
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _check_elements(text: "str | bytes") -> None:
    """Refuse, before parsing it, a JSON text with more elements than an honest reply can have (at
    most :data:`_MAX_ITEMS`, as the kernel's encoder counts them): a forged reply of millions of
    empty lists would otherwise cost the grader gigabytes and seconds to parse and decode. Counted
    with ``count`` (commas and openings bound the elements; brackets inside strings only make the
    bound looser)."""
    if isinstance(text, str):
        counts = text.count(",") + text.count("[") + text.count("{")
    else:
        counts = text.count(b",") + text.count(b"[") + text.count(b"{")
    if counts > 4 * _MAX_ITEMS:
        raise WireError(f"a reply with more elements than any value the grader asks for ({counts:,} > "
                        f"{4 * _MAX_ITEMS:,})")


def parse_safe(data: bytes, session: Any = None) -> Any:
    """The value in the bytes of a file written by :func:`write_safe`. Raises :class:`WireError`."""
    from safetensors.torch import load

    try:
        if len(data) < 8:
            raise WireError("a truncated reply file")
        n = int.from_bytes(data[:8], "little")
        if n > len(data) - 8:
            raise WireError("a truncated reply file")
        raw = data[8:8 + n]
        _check_elements(raw)
        header = json.loads(raw.decode("utf-8"))
        meta = header.get("__metadata__") if isinstance(header, dict) else None
        text = meta.get(META_KEY) if isinstance(meta, dict) else None
        if not isinstance(text, str):
            raise WireError("the reply file has no description")
        _check_elements(text)
        tensors = load(data)
        structure = json.loads(text)
    except WireError:
        raise
    except Exception as exc:
        raise WireError(f"an unreadable reply file ({type(exc).__name__}: {exc})") from None
    return decode(structure, tensors, session)


def read_safe(path: str | os.PathLike, session: Any = None, max_bytes: int = MAX_BYTES,
              dir_fd: int | None = None) -> Any:
    """Read a value written by :func:`write_safe`. Raises :class:`WireError`; runs no code and
    never follows a link."""
    return parse_safe(read_bytes(path, max_bytes, dir_fd), session)


# ----------------------------------------------------------------- grader -> kernel (pickle)
def is_recorder(obj: Any) -> bool:
    """True for a wrapper made by ``companion.exercises._core.recording`` (a watched function)."""
    return (isinstance(obj, types.FunctionType) and getattr(obj, "__module__", None) == "companion.exercises._core"
            and getattr(obj, "__qualname__", "") == "recording.<locals>.wrapper")


def make_pickle_module(remote: Callable[[Remote], tuple], recorder: Callable[[Any], tuple]) -> types.SimpleNamespace:
    """A ``pickle_module`` for ``torch.save``: functions by value (cloudpickle), a placeholder of a
    kernel object as its handle (``remote(obj)``), a watched function as a number (``recorder(obj)``)."""
    import cloudpickle

    class Pickler(cloudpickle.Pickler):
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, Remote):
                return remote(obj)
            if is_recorder(obj):
                return recorder(obj)
            return super().reducer_override(obj)

    return types.SimpleNamespace(Pickler=Pickler, Unpickler=pickle.Unpickler, load=pickle.load, dump=pickle.dump,
                                 loads=pickle.loads, dumps=pickle.dumps, __name__="pickle")


def write_pickle(path: str | os.PathLike, obj: Any, pickle_module: types.SimpleNamespace) -> None:
    """``torch.save`` ``obj`` into a new file (never through a link, never over an existing file)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer, pickle_module=pickle_module)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    with os.fdopen(fd, "wb") as f:
        os.fchmod(f.fileno(), 0o644)  # readable by the kernel's user, whatever the umask
        f.write(buffer.getbuffer())
