"""Checking arguments: one helper per kind of argument, shared by every public entry point.

The same mistake gets the same message wherever it is made. Each message names the argument
(in backquotes), says what was expected and what was received, and, where there is one, how to
fix it. The exception says which kind of mistake it is:

* ``TypeError``: the wrong kind of object (a list where a tensor is expected, a float where an
  integer is, a float tensor of token ids);
* ``ValueError``: the right kind with a wrong value (a negative size, a wrong shape, a token id
  outside the vocabulary, a NaN).

**No waiting for the GPU.** Checking the *values* of a tensor (are the token ids below
``vocab_size``? is there a NaN?) means reading them back to the host, which makes the host wait
for the accelerator to finish its queue of work. On the CPU that costs nothing and the checks
raise the clear errors above. On a CUDA device the value checks are queued on the device
instead (``torch._assert_async``): they cost no waiting, and a failure stops the program at the
next synchronization with the same message (printed by the device). Shapes, dtypes and devices
are known on the host and are always checked at once.
"""
from __future__ import annotations

import math
import numbers
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch import Tensor

__all__ = [
    "IGNORE_INDEX",
    "check_int",
    "check_float",
    "check_bool",
    "check_choice",
    "check_instance",
    "check_generator",
    "check_path",
    "check_float_dtype",
    "check_tensor",
    "check_vectors",
    "check_token_ids",
    "check_index",
    "check_logits",
    "check_finite",
    "as_token_ids",
]

#: A target equal to this is left out of the loss (PyTorch's and Hugging Face's convention).
IGNORE_INDEX = -100


# --------------------------------------------------------------------------- plain values
def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, shortened: a message must stay readable whatever was passed."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _got(name: str, value: Any) -> str:
    """``name=value, a type`` for a value of the wrong kind."""
    kind = type(value).__name__
    return f"{name}={_short(value)}, {'an' if kind[0] in 'aeiouAEIOU' else 'a'} {kind}"


def _suffix(hint: str) -> str:
    return f"; {hint}" if hint else ""


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None,
              hint: str = "") -> int:
    """``value`` must be an integer (not a bool) in ``[minimum, maximum]``; returns it as an int.

    Raises TypeError for a non-integer (``2.0`` included) and ValueError for one out of range.
    """
    if minimum is not None and maximum is not None:
        what = f"an integer in [{minimum}, {maximum}]"
    elif minimum == 1:
        what = "a positive integer"
    elif minimum == 0:
        what = "a non-negative integer"
    elif minimum is not None:
        what = f"an integer >= {minimum}"
    elif maximum is not None:
        what = f"an integer <= {maximum}"
    else:
        what = "an integer"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"`{name}` must be {what} (got {_got(name, value)}){_suffix(hint)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"`{name}` must be {what} (got {name}={value}){_suffix(hint)}")
    return value


def check_float(name: str, value: Any, *, low: float | None = None, high: float | None = None,
                low_open: bool = False, high_open: bool = False, finite: bool = True,
                hint: str = "") -> float:
    """``value`` must be a real number (int or float, not a bool, never NaN) within the bounds.

    ``low``/``high`` are included unless ``low_open``/``high_open``; ``finite=False`` allows
    ``inf`` where the bounds do. Returns it as a float.
    """
    if low is not None and high is not None:
        what = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        what = f"{'a finite' if finite else 'a'} number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        what = f"{'a finite' if finite else 'a'} number {'<' if high_open else '<='} {high:g}"
    else:
        what = "a finite number" if finite else "a number (not NaN)"
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"`{name}` must be {what} (got {_got(name, value)}){_suffix(hint)}")
    v = float(value)
    bad = (
        math.isnan(v)
        or (finite and math.isinf(v))
        or (low is not None and (v <= low if low_open else v < low))
        or (high is not None and (v >= high if high_open else v > high))
    )
    if bad:
        raise ValueError(f"`{name}` must be {what} (got {name}={_short(value)}){_suffix(hint)}")
    return v


def check_bool(name: str, value: Any) -> bool:
    """``value`` must be ``True`` or ``False`` (a flag: ``1`` or ``"yes"`` are refused)."""
    if not isinstance(value, bool):
        raise TypeError(f"`{name}` must be True or False (got {_got(name, value)})")
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """``value`` must be one of ``choices``."""
    choices = list(choices)
    try:
        ok = value in choices
    except TypeError:  # an unhashable or uncomparable value
        ok = False
    if not ok:
        raise ValueError(f"`{name}` must be one of {choices} (got {name}={_short(value)})")
    return value


def check_instance(name: str, value: Any, cls: type | tuple[type, ...], what: str,
                   hint: str = "") -> Any:
    """``value`` must be an instance of ``cls``, described to the reader as ``what``."""
    if not isinstance(value, cls):
        raise TypeError(f"`{name}` must be {what} (got {type(value).__name__}){_suffix(hint)}")
    return value


def check_generator(name: str, generator: Any) -> torch.Generator | None:
    """``generator`` must be ``None`` or a ``torch.Generator`` (not a seed)."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"`{name}` must be None or a torch.Generator (got {_got(name, generator)}); "
            f"for a seed s pass {name}=torch.Generator().manual_seed(s)"
        )
    return generator


def check_path(name: str, path: Any) -> Path:
    """``path`` must be a ``str`` or a path-like object; returns a ``pathlib.Path``."""
    if isinstance(path, (bytes, bytearray)) or not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"`{name}` must be a str or pathlib.Path (got {type(path).__name__})")
    if isinstance(path, str) and not path.strip():
        raise ValueError(f"`{name}` must name a file (got {name}={path!r})")
    return Path(path)


def check_float_dtype(name: str, dtype: Any) -> torch.dtype:
    """``dtype`` must be a floating-point ``torch.dtype`` (``torch.float32``, ...)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"`{name}` must be a torch.dtype such as torch.float32 (got {_got(name, dtype)})")
    if not dtype.is_floating_point:
        raise ValueError(f"`{name}` must be a floating-point dtype such as torch.float32 (got {dtype})")
    return dtype


# --------------------------------------------------------------------------- tensors
_KINDS = {
    "float": ("a floating-point tensor", lambda t: t.is_floating_point(), "convert it with .float()"),
    "int": ("an integer tensor", lambda t: not (t.is_floating_point() or t.is_complex() or t.dtype == torch.bool),
            "convert it with .long()"),
    "bool": ("a bool tensor", lambda t: t.dtype == torch.bool, "compare to get one, e.g. lengths > 0"),
    "real": ("a tensor of real numbers", lambda t: not (t.is_complex() or t.dtype == torch.bool),
             "convert it with .float()"),
}


def _shape_text(shape: Sequence[Any]) -> str:
    parts = []
    for entry in shape:
        if isinstance(entry, tuple):
            label, size = entry
            parts.append(f"{label}={size}")
        else:
            parts.append(str(entry))
    return "(" + ", ".join(parts) + (",)" if len(parts) == 1 else ")")


def check_tensor(name: str, x: Any, *, shape: Sequence[Any] | None = None, dtype: str | None = None,
                 nonempty: bool = True, hint: str = "") -> Tensor:
    """``x`` must be a tensor, of dtype kind ``dtype`` and of shape ``shape``; returns it.

    ``dtype`` is ``"float"``, ``"int"`` (integers, not bool), ``"bool"``, ``"real"`` (integers
    or floats) or None (any). ``shape`` lists the dimensions: a label (``"B"``, any size), a
    ``(label, size)`` pair (that size exactly), and ``"..."`` first for any number of leading
    dimensions. With ``nonempty`` every labelled dimension must have size >= 1 (a batch of no
    sequence, or a sequence of no token, has nothing to compute). ``hint`` is added to a shape
    error.
    """
    if not isinstance(x, Tensor):
        where = f" of shape {_shape_text(shape)}" if shape is not None else ""
        raise TypeError(f"`{name}` must be a torch.Tensor{where} (got {type(x).__name__}); "
                        "make one with torch.tensor(...)")
    if dtype is not None:
        what, ok, fix = _KINDS[dtype]
        if not ok(x):
            raise TypeError(f"`{name}` must be {what} (got dtype={x.dtype}); {fix}")
    if shape is not None:
        spec = list(shape)
        leading = bool(spec) and spec[0] == "..."
        named = spec[1:] if leading else spec
        n = len(named)
        got = tuple(x.shape)
        ok = x.ndim >= n if leading else x.ndim == n
        if ok:
            for entry, size in zip(named, got[x.ndim - n:]):
                if isinstance(entry, tuple) and size != entry[1]:
                    ok = False
        if not ok:
            raise ValueError(f"`{name}` must have shape {_shape_text(spec)} (got shape={got}){_suffix(hint)}")
        if nonempty:
            for entry, size in zip(named, got[x.ndim - n:]):
                if size == 0:
                    label = entry[0] if isinstance(entry, tuple) else entry
                    raise ValueError(
                        f"`{name}` must not be empty: shape {_shape_text(spec)} needs {label} >= 1 "
                        f"(got shape={got})"
                    )
    return x


def check_vectors(name: str, x: Any, width: int, *, shape: Sequence[Any] = ("B", "T"),
                  width_name: str = "d_model", like: Tensor | None = None,
                  hint: str = "") -> torch.Size:
    """``x`` must be floating-point vectors of shape ``(*shape, width)``; returns ``x.shape``.

    With ``like`` (a parameter of the module) ``x`` must also be on its device and, outside
    autocast, of its dtype, so that the error comes here and not from inside a matrix product.
    """
    check_tensor(name, x, shape=(*shape, (width_name, width)), dtype="float", hint=hint)
    if like is not None:
        if x.device != like.device:
            raise ValueError(f"`{name}` is on {x.device} but the module's weights are on {like.device}; "
                             f"move one of them, e.g. {name}.to({str(like.device)!r})")
        if x.dtype != like.dtype and not _autocast(x.device.type):
            raise TypeError(f"`{name}` has dtype {x.dtype} but the module's weights have {like.dtype}; "
                            f"convert one of them, e.g. {name}.to({like.dtype})")
    return x.shape


def _autocast(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except (TypeError, RuntimeError):  # pragma: no cover - an old torch or an unknown device
        return torch.is_autocast_enabled()


def _first(mask: Tensor) -> tuple[int, ...]:
    """The index of the first True entry of ``mask`` (on the CPU)."""
    return tuple(int(i) for i in mask.nonzero()[0])


def _device_assert(ok: Tensor, message: str) -> None:
    """Raise ``message`` where ``ok`` is False: at once on the CPU (the caller's job), queued on
    a CUDA device, skipped elsewhere (meta tensors have no values; MPS has no such assert)."""
    if ok.device.type == "cuda":
        torch._assert_async(ok, message)


def _check_range(name: str, t: Tensor, high: int, what: str, allowed: int | None, hint: str) -> None:
    """Every entry of the integer tensor ``t`` must lie in ``[0, high)`` or equal ``allowed``."""
    span = f"[0, {high})" + (f" or {allowed}" if allowed is not None else "")
    if torch.compiler.is_compiling():  # reading values back would break the compiled graph
        return
    if t.device.type != "cpu":
        if t.numel():
            bad = (t < 0) | (t >= high)
            if allowed is not None:
                bad &= t != allowed
            _device_assert(~bad.any(), f"`{name}` must hold {what} in {span}{_suffix(hint)}")
        return
    if not t.numel():
        return
    bad = (t < 0) | (t >= high)
    if allowed is not None:
        bad &= t != allowed
    if bool(bad.any()):
        pos = _first(bad)
        where = f" at position {pos[0] if len(pos) == 1 else pos}" if t.ndim else ""
        raise ValueError(f"`{name}` must hold {what} in {span} (got {int(t[pos])}{where}){_suffix(hint)}")


def check_token_ids(name: str, ids: Any, vocab_size: int, *, shape: Sequence[Any] | None = None,
                    ignore_index: int | None = None, long_only: bool = False,
                    hint: str = "") -> Tensor:
    """``ids`` must be an integer tensor of token ids in ``[0, vocab_size)``; returns it.

    ``ignore_index`` (for targets) is allowed too. The dtype must be ``torch.long`` (or
    ``torch.int32`` unless ``long_only``), the dtypes an embedding accepts. The values are
    checked on the CPU and asynchronously on a CUDA device (see the module's docstring).
    """
    check_tensor(name, ids, shape=shape, dtype="int")
    dtypes = (torch.long,) if long_only else (torch.long, torch.int32)
    if ids.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise TypeError(f"`{name}` must hold token ids of dtype {want} (got dtype={ids.dtype}); "
                        f"convert it with {name}.long()")
    _check_range(name, ids, vocab_size, "token ids", ignore_index, hint)
    return ids


def check_index(name: str, index: Any, size: int, *, what: str = "row indices") -> Tensor:
    """``index`` must be a 1-D integer tensor of indices in ``[0, size)``; returns it."""
    check_tensor(name, index, shape=("n",), dtype="int", nonempty=False)
    _check_range(name, index, size, what, None, "")
    return index


def check_logits(name: str, logits: Tensor, *, what: str | None = None, hint: str = "") -> Tensor:
    """``logits`` (..., V) must hold no NaN and no +inf, and each row at least one finite entry.

    ``-inf`` is a legitimate logit (an impossible token), but a row that is ``-inf``
    everywhere leaves no token to choose and its softmax is NaN. ``what`` names the logits in
    the message (default: the argument ``name``). Checked on the CPU, asynchronously on CUDA.
    """
    what = what or f"`{name}`"
    fix = _suffix(hint)
    if torch.compiler.is_compiling():
        return logits
    if logits.device.type != "cpu":
        if logits.numel():
            ok = ~(logits.isnan().any() | logits.isposinf().any() | (logits == float("-inf")).all(-1).any())
            _device_assert(ok, f"{what} must be finite or -inf, with a finite entry in each row{fix}")
        return logits
    if not logits.numel():
        return logits
    nan = logits.isnan()
    if bool(nan.any()):
        raise ValueError(f"{what} must not hold NaN (got NaN at position {_first(nan)}){fix}")
    posinf = logits.isposinf()
    if bool(posinf.any()):
        raise ValueError(f"{what} must not hold +inf (got +inf at position {_first(posinf)}){fix}")
    dead = (logits == float("-inf")).all(-1)
    if bool(dead.any()):
        where = f"of row {_first(dead)} " if dead.ndim else ""
        raise ValueError(f"{what} must leave at least one possible token, but every entry {where}is -inf{fix}")
    return logits


def check_finite(name: str, x: Tensor, *, hint: str = "") -> Tensor:
    """Every entry of the floating-point tensor ``x`` must be finite (no NaN, no inf); returns it.

    A NaN input to a training loop trains to NaN without a word: refuse it before the first step.
    Checked on the CPU, asynchronously on CUDA (see the module's docstring).
    """
    if torch.compiler.is_compiling() or not x.numel() or not (x.is_floating_point() or x.is_complex()):
        return x
    if x.device.type != "cpu":
        _device_assert(torch.isfinite(x).all(), f"`{name}` must hold finite numbers (no NaN, no inf){_suffix(hint)}")
        return x
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        pos = _first(bad)
        raise ValueError(f"`{name}` must hold finite numbers (got {x[pos].item()} at position "
                         f"{pos[0] if len(pos) == 1 else pos}){_suffix(hint)}")
    return x


def as_token_ids(name: str, value: Any, *, ndims: Sequence[int] = (1, 2), empty_ok: bool = False) -> Tensor:
    """A sequence of token ids (list, tuple, NumPy array or tensor) as a ``torch.long`` tensor.

    Integers only: ``[1.7, 2.2]`` is refused, never truncated to ``[1, 2]``. The number of
    dimensions must be in ``ndims`` (nothing is flattened). With ``empty_ok`` an empty sequence
    is allowed.
    """
    shapes = " or ".join({1: "(T,)", 2: "(B, T)"}.get(n, f"{n} dimensions") for n in ndims)
    if isinstance(value, (str, bytes)):
        raise TypeError(f"`{name}` must be token ids, not text (got a {type(value).__name__}); "
                        "encode the text first, e.g. tokenizer.encode(text)")
    if isinstance(value, Tensor):
        t = value
    else:
        try:
            t = torch.as_tensor(value)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"`{name}` must be a sequence of integer token ids or an integer tensor of shape "
                            f"{shapes} (got {_short(value)})") from None
        if t.numel() == 0 and t.is_floating_point():
            t = t.long()  # [] is float32 to torch
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise TypeError(f"`{name}` must hold integer token ids (got dtype={t.dtype}); token ids are never "
                        "rounded: pass integers")
    if t.ndim not in ndims:
        raise ValueError(f"`{name}` must have shape {shapes} (got shape={tuple(t.shape)})")
    if not empty_ok and (t.numel() == 0 or t.shape[-1] == 0):
        raise ValueError(f"`{name}` must hold at least one token; start from a start-of-text id if you "
                         f"have no text (got shape={tuple(t.shape)})")
    return t.long()
