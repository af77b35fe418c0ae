"""The machinery shared by every checker: feedback objects and the ``@checker`` decorator."""
from __future__ import annotations

import functools
import textwrap
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

PASSED, HINT, NOT_ATTEMPTED = "passed", "hint", "not attempted"
_ICON = {PASSED: "✅", HINT: "❌", NOT_ATTEMPTED: "⏳"}
_VERB = {PASSED: "passed", HINT: "not yet", NOT_ATTEMPTED: "not attempted yet"}


@dataclass(frozen=True)
class Feedback:
    """What a checker says about one attempt. Displayed as one or two lines of text."""

    exercise: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __repr__(self) -> str:
        # Wrapped to 88 columns so that it reads without scrolling in a notebook and on the page.
        text = f"{_ICON[self.status]} {self.exercise} {_VERB[self.status]}: {self.message}"
        return textwrap.fill(text, width=88, subsequent_indent="   ", break_on_hyphens=False)

    __str__ = __repr__


class _Verdict(Exception):
    """Raised inside a checker body to stop at the first verdict."""

    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def passed(message: str = "well done.") -> None:
    """End the check with a pass."""
    raise _Verdict(PASSED, message)


def hint(message: str) -> None:
    """End the check with a hint about the mistake that was recognized."""
    raise _Verdict(HINT, message)


def _untouched(answer: Any) -> bool:
    return answer is Ellipsis or answer is None


def checker(exercise: str) -> Callable[[Callable[..., None]], Callable[..., Feedback]]:
    """Turn a check body into a checker that always returns :class:`Feedback`.

    The body receives the student's answer (a value or a function) and calls :func:`passed` or
    :func:`hint`. The decorator handles the rest:

    * an answer that is still ``...`` or ``None`` gives "not attempted yet";
    * ``NotImplementedError`` raised by the student's function gives "not attempted yet";
    * any other exception from the student's code becomes a hint naming it and the line;
    * a body that ends without a verdict counts as a pass.
    """

    def decorate(body: Callable[..., None]) -> Callable[..., Feedback]:
        @functools.wraps(body)
        def check(*answers: Any) -> Feedback:
            if any(_untouched(a) for a in answers):
                return Feedback(exercise, NOT_ATTEMPTED, "replace the `...` with your answer, then run this cell again.")
            try:
                body(*answers)
            except _Verdict as verdict:
                return Feedback(exercise, verdict.status, verdict.message)
            except NotImplementedError:
                return Feedback(exercise, NOT_ATTEMPTED, "write your code where it says `raise NotImplementedError`, then run this cell again.")
            except Exception as exc:  # the student's code failed: report it, never crash the notebook
                return Feedback(exercise, HINT, f"your code raised {type(exc).__name__}: {exc}{_where(exc)}")
            return Feedback(exercise, PASSED, "well done.")

        check.exercise = exercise  # type: ignore[attr-defined]
        return check

    return decorate


def _where(exc: BaseException) -> str:
    """' (line N of your cell)' for the innermost frame that comes from a notebook cell, if any."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith("<ipython-input") or "ipykernel" in frame.filename or frame.filename == "<IPY-INPUT>":
            return f" (line {frame.lineno} of your cell)"
    return ""


def close(actual: Any, expected: Any, rtol: float = 1e-4, atol: float = 1e-6) -> bool:
    """True when ``actual`` has ``expected``'s shape and values, within tolerance. Never raises."""
    try:
        a = actual.detach().cpu().numpy() if isinstance(actual, torch.Tensor) else np.asarray(actual, dtype=float)
        e = expected.detach().cpu().numpy() if isinstance(expected, torch.Tensor) else np.asarray(expected, dtype=float)
        return a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=atol))
    except Exception:
        return False
