"""Differential checking shared by the checkers of chapters 1 to 3 (issue 33).

A checker lists *cases*: a label naming the edge class ("a batch of one", "float64", "under
torch.no_grad()") and the arguments. :func:`call` runs the student's function on copies of them,
as the class asks (tensors with ``requires_grad``, a call under ``no_grad``), and checks the state
it leaves behind: grad mode as it was, torch's global random state untouched, the caller's tensors
still without ``.grad`` and with their ``requires_grad`` as they were. :func:`real_tensor` turns a
junk return into a clear "wrong type" hint, and :func:`same_values` compares with the reference
at the precision of the dtype, with a hint for a float32 computation inside a float64 check.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

from ._core import unseeded_rng, StudentError, close, describe, first_difference, hint


def _copy(a: Any, grad: bool) -> Any:  # noqa: D103
    if isinstance(a, torch.Tensor):
        c = a.detach().clone()
        return c.requires_grad_(True) if grad and c.is_floating_point() else c
    return a


def call(fn: Callable[..., Any], args: tuple, label: str, *, grad: bool | tuple = False, no_grad: bool = False,
         name: str = "your function", first: bool = False, keep: list | None = None) -> Any:
    """``fn(*copies of args)`` with the state checks of every case; returns the result.

    ``first``: the checker's first call. A ``NotImplementedError`` there is the untouched stub (not
    attempted yet); on any later call it is a branch the student left unwritten, named with its case.
    ``keep``: a list that receives the copies the student's function was given (to check them for
    changes, or to take gradients with respect to them).
    """
    wanted = [bool(grad) if isinstance(grad, bool) else i in grad for i in range(len(args))]
    args = tuple(_copy(a, w) for a, w in zip(args, wanted))
    if keep is not None:
        keep.extend(args)
    before_mode = torch.is_grad_enabled()
    before_dtype = torch.get_default_dtype()
    rng = unseeded_rng()
    with torch.no_grad() if no_grad else contextlib.nullcontext():
        inside = torch.is_grad_enabled()
        try:
            out = fn(*args)
        except StudentError as exc:
            if isinstance(exc.error, NotImplementedError) and not first:
                hint(f"{name} raised NotImplementedError on {label}, after the earlier cases worked: a branch "
                     "of your code is not written yet.")
            raise
        if torch.is_grad_enabled() != inside:
            hint(f"{name} changed the grad mode ({label}): torch.set_grad_enabled(...) or "
                 "torch.enable_grad() left on after it returns changes the caller's setting; a function "
                 "leaves it as it found it.")
    if torch.is_grad_enabled() != before_mode:
        hint(f"{name} changed the grad mode ({label}); leave it as you found it.")
    if torch.get_default_dtype() != before_dtype:
        after = torch.get_default_dtype()
        torch.set_default_dtype(before_dtype)  # the caller's setting back, before any later cell runs
        hint(f"{name} changed torch's default dtype to {after} ({label}): torch.set_default_dtype changes "
             "every later torch.tensor(...) and torch.zeros(...) of the caller; pass dtype= where you need "
             "one.")
    if not torch.equal(torch.get_rng_state(), rng):
        hint(f"{name} drew from torch's global random generator ({label}); nothing here is random, "
             "and a function that moves the caller's random state changes every later draw.")
    for a, w in zip(args, wanted):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            if a.requires_grad != w:
                hint(f"{name} changed requires_grad of an input ({label}): requires_grad_() on the "
                     "caller's tensor changes it for every later use; detach a copy instead.")
            if a.grad is not None:
                hint(f"{name} left a .grad on an input tensor ({label}): backward() through the "
                     "caller's own tensor accumulates gradients into it, call after call.")
    return out


def real_tensor(got: Any, call_text: str, what: str = "a tensor") -> torch.Tensor:
    """``got`` when it is a real (or boolean, if ``allow_bool``) CPU tensor with values, else a hint."""
    if not isinstance(got, torch.Tensor):
        if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor):
            hint(f"{call_text} should return {what}, not a tuple of {len(got)} values.")
        hint(f"wrong type: {call_text} should return {what}; you returned {describe(got)}.")
    if got.is_meta or got.layout != torch.strided or got.device.type != "cpu":
        hint(f"wrong type: {call_text} returned a tensor without values on the CPU "
             f"({got.device.type}, {got.layout}); compute on the tensors you are given.")
    return got


def same_values(got: torch.Tensor, expected: torch.Tensor, label: str, call_text: str,
                name: str = "out", precision_hint: bool = True) -> bool:
    """True when ``got`` equals ``expected`` to the precision of expected's dtype. A float64 result
    that matches only to float32 precision gets a precision hint (unless ``precision_hint`` is False:
    the caller then names its known mistakes first, and :func:`precision` afterwards); a wrong dtype,
    a dtype hint."""
    if got.is_complex():
        hint(f"wrong type: {call_text} returned complex numbers ({describe(got)}).")
    if tuple(got.shape) != tuple(expected.shape):
        return False
    if expected.is_floating_point():
        if got.dtype != expected.dtype:
            if close(got, expected, rtol=1e-4, atol=1e-5):
                hint(f"the values are right ({label}), but the result has dtype {got.dtype} for inputs of "
                     f"dtype {expected.dtype}: keep the inputs' dtype (no .float(), .double() or NumPy).")
            return False
        if expected.dtype == torch.float64:
            if close(got, expected, rtol=1e-9, atol=1e-12):
                return True
            if precision_hint and close(got, expected, rtol=1e-4, atol=1e-6):
                hint(f"{call_text} ({label}) agrees only to about 7 digits: part of your computation runs in "
                     "float32 (a torch.tensor(...) or torch.ones(...) without dtype=, or a .float()). Keep "
                     "the inputs' dtype all the way.")
            return False
        return close(got, expected, rtol=1e-4, atol=1e-5)
    return got.dtype == expected.dtype and torch.equal(got, expected)


def precision(got: torch.Tensor, expected: torch.Tensor, label: str, call_text: str) -> None:
    """The precision hint of :func:`same_values`, for a float64 case that matched to float32 precision."""
    if expected.dtype == torch.float64 and got.dtype == expected.dtype and close(got, expected, rtol=1e-4, atol=1e-6):
        hint(f"{call_text} ({label}) agrees only to about 7 digits: part of your computation runs in "
             "float32 (a torch.tensor(...) or torch.ones(...) without dtype=, or a .float()). Keep "
             "the inputs' dtype all the way.")


def generic(got: Any, expected: torch.Tensor, label: str, call_text: str, name: str = "out") -> None:
    """The fallback hint: how the answer differs, naming the edge class of the case."""
    if isinstance(got, torch.Tensor) and tuple(got.shape) != tuple(expected.shape):
        hint(f"{call_text} fails on {label}: the result should have shape {tuple(expected.shape)}, "
             f"got {tuple(got.shape)}.", generic=True)
    hint(f"{call_text} fails on {label}: {first_difference(got, expected, name)}.", generic=True)
