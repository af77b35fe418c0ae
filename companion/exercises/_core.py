"""The machinery shared by every checker: feedback objects and the ``@checker`` decorator."""
from __future__ import annotations

import contextlib
import functools
import inspect
import math
import sysconfig
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from . import rules

PASSED, HINT, NOT_ATTEMPTED, INTERNAL = "passed", "hint", "not attempted", "internal error"
_ICON = {PASSED: "✅", HINT: "❌", NOT_ATTEMPTED: "⏳", INTERNAL: "⚠️"}
_VERB = {PASSED: "passed", HINT: "not yet", NOT_ATTEMPTED: "not attempted yet", INTERNAL: "could not be checked"}

#: The kinds of a hint: a mistake the checker recognized and names (``SPECIFIC``), a description
#: of how the answer differs without naming a cause (``GENERIC``), or an exception raised by the
#: student's own code, reported with its line (``RAISED``).
SPECIFIC, GENERIC, RAISED = "specific", "generic", "raised"

#: Width of the feedback text: a check cell's output fits a 78-column notebook without scrolling.
WIDTH = 78


@dataclass(frozen=True)
class Feedback:
    """What a checker says about one attempt. Displayed as a few lines of at most 78 columns.

    ``status`` is one of ``"passed"``, ``"hint"``, ``"not attempted"`` and ``"internal error"`` (the
    checker itself failed: a bug of the course, never the student's). For a hint, ``kind`` says
    whether the checker recognized the mistake (``"specific"``), only describes the difference
    (``"generic"``), or reports an exception of the student's code (``"raised"``).
    """

    exercise: str
    status: str
    message: str
    kind: str = ""
    #: For a ``raised`` hint: the traceback of the student's own frames (the checker's are left
    #: out), lines of at most 78 columns, shown before the hint.
    details: str = ""

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def __repr__(self) -> str:
        text = f"{_ICON[self.status]} {self.exercise} {_VERB[self.status]}: {self.message}"
        text = textwrap.fill(text, width=WIDTH, subsequent_indent="   ", break_on_hyphens=False)
        return f"{self.details}\n{text}" if self.details else text

    __str__ = __repr__


class _Verdict(Exception):
    """Raised inside a checker body to stop at the first verdict."""

    def __init__(self, status: str, message: str, kind: str = ""):
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


class StudentError(Exception):
    """An exception raised inside the student's code (``.error`` is the original exception).

    The ``@checker`` decorator wraps every function the student gives, so that an exception that
    comes out of the student's code can be told apart from one raised by the checker's own code.
    A checker that expects a particular exception of the student's code catches this class and
    looks at ``.error`` (see :func:`attempt`).
    """

    def __init__(self, error: BaseException, call: str = ""):
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error
        #: The call that raised, as a hint quotes it: ``my_fn(a tensor of shape (1, 3) ..., 5)``.
        self.call = call


def passed(message: str = "well done.") -> None:
    """End the check with a pass."""
    raise _Verdict(PASSED, message)


def hint(message: str, *, generic: bool = False) -> None:
    """End the check with a hint.

    ``generic=False`` (the default) for a recognized mistake that the hint names; ``generic=True``
    for a fallback that only describes how the answer differs from the right one.
    """
    raise _Verdict(HINT, message, GENERIC if generic else SPECIFIC)


#: One caller's state per running check, kept by :func:`unseeded_rng` (None until a site calls it).
_CALLER_RNG: list[torch.Tensor | None] = []


def _unseeded_state() -> torch.Tensor:
    g = torch.Generator().manual_seed(0x5EED)
    torch.rand(3, generator=g)  # three draws in: no torch.manual_seed(k) leaves a generator here
    return g.get_state()


_UNSEEDED = _unseeded_state()


def unseeded_rng() -> torch.Tensor:
    """Set torch's global generator to a state that no ``torch.manual_seed(k)`` gives, and return it.

    A check compares the global state before and after a call of the student's code to see whether
    the code drew from it or re-seeded it; from the caller's own state a re-seed is invisible when
    the caller had just seeded with the same number (the outsiders' ``torch.manual_seed(0)`` inside
    9.9's step). From this state it is always seen. The running check puts the caller's state back
    when it ends, so the notebook's random numbers do not depend on the check."""
    if _CALLER_RNG and _CALLER_RNG[-1] is None:
        _CALLER_RNG[-1] = torch.get_rng_state()
    torch.set_rng_state(_UNSEEDED)
    return _UNSEEDED.clone()


def source_facts(fn: Any) -> rules.SourceFacts:
    """The :class:`rules.SourceFacts` of the student's function (``parsed=False`` when no source)."""
    return rules.facts(rules.source_of(fn))


def uses_numpy(seen: rules.Seen, facts: rules.SourceFacts) -> bool:
    """True when the student's code called NumPy, or its source imports or names it."""
    return seen.used_module("numpy") or facts.imports("numpy") or bool({"np", "numpy"} & facts.names)


def uses_torch(seen: rules.Seen, facts: rules.SourceFacts) -> bool:
    """True when the student's code called PyTorch, or its source imports or names it."""
    return (bool(seen.torch_calls) or seen.used_module("torch") or facts.imports("torch")
            or bool({"torch", "F", "nn"} & facts.names))


def uses_companion(seen: rules.Seen, facts: rules.SourceFacts, *modules: str) -> list[str]:
    """The companion modules (of ``modules``, default: any but the checkers) the student's code
    called or imported, sorted."""
    wanted = modules or ("companion",)
    found = {m for m in seen.modules | facts.modules if m.startswith("companion")
             and not m.startswith("companion.exercises") and any(m == w or m.startswith(w + ".") for w in wanted)}
    helpers = {"companion", "companion.validation", "companion._compat"}  # reached through the others
    return sorted(found - helpers) or sorted(found)


def library(name: str) -> str:
    """How a hint names a call the rules saw: 'the library's softmax' (whatever import reached it:
    torch.softmax, F.softmax, x.softmax, nn.Softmax), or a companion module as it is."""
    return name if name.startswith("companion") else f"the library's {name}"


def _untouched(answer: Any) -> bool:
    return answer is Ellipsis or answer is None


_UNTRACKED = object()


def _snapshot(value: Any, depth: int = 0) -> Any:
    """A copy of an argument, to tell afterwards whether the student's code changed it in place.

    Tensors, NumPy arrays and lists (also nested, and lists inside tuples) are copied; dicts (the
    KV cache of exercise 8.5 is changed on purpose), modules and other objects are not tracked.
    """
    if depth > 4:
        return _UNTRACKED
    if isinstance(value, torch.Tensor):
        if value.is_meta or value.layout != torch.strided:
            return _UNTRACKED
        return ("tensor", value.detach().clone(), value.shape, value.dtype)
    if isinstance(value, np.ndarray):
        return ("array", value.copy(), value.shape, value.dtype)
    if isinstance(value, (list, tuple)):
        if len(value) > 10_000:
            return _UNTRACKED
        return (type(value).__name__, len(value), [_snapshot(v, depth + 1) if isinstance(
            v, (torch.Tensor, np.ndarray, list, tuple)) else ("value", v) for v in value])
    return _UNTRACKED


def _unchanged(value: Any, snap: Any) -> bool:
    if snap is _UNTRACKED:
        return True
    kind = snap[0]
    try:
        if kind == "tensor":
            _, copy, shape, dtype = snap
            if not isinstance(value, torch.Tensor) or value.shape != shape or value.dtype != dtype:
                return False
            now = value.detach()
            same = now == copy
            if now.is_floating_point() or now.is_complex():
                same = same | (torch.isnan(now) & torch.isnan(copy))
            return bool(same.all())
        if kind == "array":
            _, copy, shape, dtype = snap
            return (isinstance(value, np.ndarray) and value.shape == shape and value.dtype == dtype
                    and bool(np.array_equal(value, copy, equal_nan=value.dtype.kind in "fc")))
        if kind == "value":
            v = snap[1]
            return value is v or value == v or (isinstance(v, float) and v != v and value != value)
        _, length, items = snap
        return len(value) == length and all(_unchanged(v, s) for v, s in zip(value, items))
    except Exception:  # noqa: BLE001 - an odd object: never blame the student for our comparison
        return True


def _argument_names(answer: Any, args: tuple, kwargs: dict) -> list[str]:
    try:
        bound = inspect.signature(answer).bind_partial(*args, **kwargs)
        names = list(bound.arguments)
    except (TypeError, ValueError):
        names = []
    return names + [f"argument {i + 1}" for i in range(len(names), len(args))] + list(kwargs)


def _guard(answer: Any) -> Any:
    """The student's function, wrapped so that whatever it raises arrives as a StudentError.

    Each call runs through :func:`rules.observe` and its :class:`rules.Observation` is recorded
    into every active :func:`rules.watch` block of the checker. A tensor, array or list argument
    that the call changes in place ends the check with a hint: the caller's data would change
    under it (the exercises hand out copies, so the checker's own data is safe either way).
    """
    if not callable(answer) or isinstance(answer, type):
        return answer

    @functools.wraps(answer)
    def call(*args: Any, **kwargs: Any) -> Any:
        values = list(args) + list(kwargs.values())
        snaps = [_snapshot(v) for v in values]
        try:
            result, observation = rules.observe(answer, *args, **kwargs)
            rules.record(observation)
        except (_Verdict, StudentError):
            raise
        except Exception as exc:  # noqa: BLE001 - anything the student's code raises
            raise StudentError(exc, _call_text(answer, args, kwargs)) from exc
        _returned(result)
        changed = [i for i, (v, snap) in enumerate(zip(values, snaps)) if not _unchanged(v, snap)]
        if changed:
            names = _argument_names(answer, args, kwargs)
            name = names[changed[0]] if changed[0] < len(names) else f"argument {changed[0] + 1}"
            hint(f"your function changed {name} in place, an input it was given: x -= m, x /= s, x[i] = v, x.exp_() or "
                 "lst.append(v) write into the caller's data. Compute new values instead (x = x - m, "
                 "a new list), and leave the inputs as they were.")
        return result

    return call


#: What the student's functions returned during the check now running (one list per check; a
#: checker may call a checker, so they stack): read when the checker's own code fails afterwards.
_RETURNED: list[list[Any]] = []


def _returned(result: Any) -> None:
    if _RETURNED and len(_RETURNED[-1]) < 10_000:
        _RETURNED[-1].append(result)


def _call_text(answer: Any, args: tuple, kwargs: dict) -> str:
    """``name(description of each argument)``, at most about 160 characters. Never raises."""
    try:
        name = getattr(answer, "__name__", "your function")
        parts = [_short(a) for a in args] + [f"{k}={_short(v)}" for k, v in kwargs.items()]
        text = f"{name}({', '.join(parts)})"
        return text if len(text) <= 160 else text[:157] + "..."
    except Exception:  # noqa: BLE001 - a description must never fail
        return "your function"


def _short(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"<tensor {tuple(x.shape)} {str(x.dtype).replace('torch.', '')}>"
    if isinstance(x, np.ndarray):
        return f"<array {x.shape}>"
    if isinstance(x, (list, tuple)) and len(x) > 6:
        return f"<{type(x).__name__} of {len(x)}>"
    if isinstance(x, torch.nn.Module):
        return f"<{type(x).__name__}>"
    try:
        text = repr(x)
    except Exception:  # noqa: BLE001
        text = f"<{type(x).__name__}>"
    return text if len(text) <= 40 else text[:37] + "..."


_PLAIN = (bool, int, float, complex, str, bytes, type(None), np.number, np.bool_, slice, range)


def _junk(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is something no exercise asks for (a meta or sparse tensor, a tensor subclass,
    an object of the student's own class...), or None for ordinary values. Never raises."""
    try:
        if depth > 3:
            return None
        if isinstance(value, torch.Tensor):
            if type(value) not in (torch.Tensor, torch.nn.Parameter):
                return f"a {type(value).__name__}, a subclass of torch.Tensor"
            if value.is_meta:
                return "a tensor on the meta device, which holds no values"
            if value.layout != torch.strided:
                return f"a {value.layout} tensor"
            if value.device.type != "cpu":
                return f"a tensor on {value.device}"
            if value.is_quantized:
                return "a quantized tensor"
            return None
        if isinstance(value, _PLAIN) or isinstance(value, np.ndarray):
            return None if not isinstance(value, np.ndarray) or value.dtype.kind in "biufc" else \
                f"a NumPy array of dtype {value.dtype}"
        if isinstance(value, (list, tuple)):
            for item in list(value)[:1000]:
                why = _junk(item, depth + 1)
                if why:
                    return f"a {type(value).__name__} holding {why}"
            return None
        if isinstance(value, dict):
            for item in list(value.values())[:1000]:
                why = _junk(item, depth + 1)
                if why:
                    return f"a dict holding {why}"
            return None
        if isinstance(value, (torch.nn.Module, torch.dtype, torch.Size, torch.device, torch.Generator)):
            return None
        if any(k.__name__ == "Remote" and k.__module__ == "companion.grading.wire" for k in type(value).__mro__):
            return None  # in the grader: an object that stayed in the kernel (a model, say); its checks decide
        module = type(value).__module__ or ""
        if module.split(".")[0] in ("torch", "numpy", "builtins", "collections", "companion", "itertools",
                                    "functools", "types", "fractions", "decimal"):
            return None
        return f"an object of class {type(value).__name__}"
    except Exception:  # noqa: BLE001 - an object that breaks on inspection is junk itself
        return f"an object of class {type(value).__name__} that breaks when inspected"


def _first_junk() -> str | None:
    """Why the first junk value the student's functions returned in this check is junk, if any."""
    return next((why for why in map(_junk, _RETURNED[-1] if _RETURNED else []) if why), None)


def _junk_message(junk: str) -> str:
    return (f"the wrong type: your function returned {junk}, which this exercise never asks for. Return "
            "the type its text names (a plain tensor on the CPU, a number, a list...).")


def _stub_functions(answer: Any) -> set[str] | None:
    """Names of the functions in the answer's source that can only raise NotImplementedError: a
    ``raise NotImplementedError`` among the body's own statements and no ``return`` or ``yield``.
    None when the source cannot be read."""
    import ast

    source = rules.source_of(answer)
    if not source:
        return None
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    names = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        raises = any(isinstance(stmt, ast.Raise) and "NotImplementedError" in ast.unparse(stmt) for stmt in node.body)
        own, stack = [], list(node.body)
        while stack:  # the function's own statements, not those of functions defined inside it
            item = stack.pop()
            if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            own.append(item)
            stack.extend(ast.iter_child_nodes(item))
        returns = any(isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)) for n in own)
        if raises and not returns:
            names.add(node.name)
    return names


def _defined_functions(answer: Any) -> set[str]:
    """Names of the functions defined in the answer's source (empty when it cannot be read)."""
    import ast

    source = rules.source_of(answer)
    try:
        tree = ast.parse(textwrap.dedent(source or ""))
    except SyntaxError:
        return set()
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


_RETURNS = {"RETURN_VALUE", "RETURN_CONST", "YIELD_VALUE", "RETURN_GENERATOR"}


def _can_return(code: Any) -> bool:
    """Whether a function's bytecode can end other than by raising (a stub cannot)."""
    import dis

    try:
        return any(ins.opname in _RETURNS for ins in dis.get_instructions(code))
    except Exception:  # noqa: BLE001 - unknown code: assume it is the student's own
        return True


def _why_not_implemented(answers: tuple, raised: StudentError, returned_before: bool) -> str:
    """What a NotImplementedError from the student's code means: ``"stub"`` (nothing the student
    wrote ran yet: not attempted), ``"branch"`` (a case left unwritten in code that otherwise
    answers) or ``"library"`` (a library refused an operation: an ordinary error of their code).

    Decided from the function that raised: the stub's ``raise`` sits in a function that cannot
    return at all. For a grader's proxy, whose exception comes back without the student's frames,
    from the source the grader read: a function that only raises.
    """
    if returned_before:
        return "branch"
    if not any(rules.is_remote(a) for a in answers):
        entries = []
        tb = raised.error.__traceback__
        while tb is not None:
            entries.append(tb)
            tb = tb.tb_next
        if entries:
            innermost = entries[-1].tb_frame.f_code
            if not _is_student_frame(innermost.co_filename):
                return "library"
            # A stub is the untouched exercise function: every function of the student's on the way to
            # the raise can only raise. A helper that raises under a function that does other work (and
            # can return) is a case the student left unwritten, not an exercise not attempted.
            own = [e.tb_frame.f_code for e in entries if _is_student_frame(e.tb_frame.f_code.co_filename)]
            return "branch" if any(map(_can_return, own)) else "stub"
    stubs: set[str] = set()
    for answer in answers:
        names = _stub_functions(answer)
        if names is None:
            return "stub"  # no source to read: believe the stub
        name = getattr(inspect.unwrap(answer), "__name__", None) if callable(answer) else None
        if isinstance(name, str) and name in _defined_functions(answer):
            names &= {name}  # only the exercise's own function being a stub means "not attempted"
        stubs |= names
    return "stub" if stubs else "branch"


# Two helpers for checks that call the student's function case by case (8.7, A.3, A.4): they name
# the case where a NotImplementedError left in one branch was raised.
def _answers_elsewhere(exc, call, others, _names, first: str) -> None:
    """The first case raised NotImplementedError: if the function answers any other case, the raise is
    one branch not written yet (reported with the first case's input); if not, it is "not attempted"."""
    if not isinstance(getattr(exc, "error", None), NotImplementedError):
        raise exc
    for case in others:
        try:
            call(case)
        except Exception:  # noqa: BLE001 - the student's code on another case: only whether it answers
            continue
        hint(f"{first}, your code raised NotImplementedError, although it answers other cases: a branch of "
             "it is not written yet.")
    raise exc


def _one_branch_missing(exc, where: str) -> None:
    """A ``NotImplementedError`` after the student's function already answered other cases: a branch
    not written yet, reported with its input (not "not attempted"). Re-raises anything else."""
    if isinstance(getattr(exc, "error", None), NotImplementedError):
        hint(f"{where}, your code raised NotImplementedError, although it answered the cases before: "
             "a branch of it is not written yet.")
    raise exc


def attempt(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, BaseException | None]:
    """Call the student's (guarded) function: ``(result, None)``, or ``(None, the exception)``.

    For checks that expect the student's code to raise (a ``ValueError`` for bad input, say).
    ``NotImplementedError`` still means "not attempted yet".
    """
    try:
        return fn(*args, **kwargs), None
    except StudentError as exc:
        if isinstance(exc.error, NotImplementedError):
            raise
        return None, exc.error


def _companion_verdict(answers: tuple, seen: rules.Seen, companion_given: bool,
                       allow: tuple[str, ...] = ()) -> _Verdict | None:
    """A hint when the student's code uses the course's own implementation (any exercise).

    Seen from the source (imports in the function) and, unless the checker hands the student
    companion objects itself (``companion_given``: a GPT to run), from the modules called.
    """
    used: set[str] = set()
    empty = rules.Seen()
    for answer in answers:
        used.update(uses_companion(empty if companion_given else seen, source_facts(answer)))
        # The answer may be a companion function itself (``my_fn = companion.bpe.fn``); a cached
        # one (functools.lru_cache) runs no code of its module once its result is cached.
        own = getattr(inspect.unwrap(answer), "__module__", None) if callable(answer) else None
        if (isinstance(own, str) and own.startswith("companion.") and not rules.is_remote(answer)
                and not own.startswith(("companion.exercises", "companion.grading"))):
            used.add(own)
    used = {m for m in used if not any(m == a or m.startswith(a + ".") for a in allow)}
    if not used:
        return None
    names = ", ".join(sorted(used)[:2])
    return _Verdict(HINT, f"the values are right, but your code uses {names}, the course's own implementation: "
                          "the exercise is to write it yourself, without the companion.", SPECIFIC)


def checker(exercise: str, *, companion_given: bool = False,
            allow: tuple[str, ...] = ()) -> Callable[[Callable[..., None]], Callable[..., Feedback]]:
    """Turn a check body into a checker that always returns :class:`Feedback`.

    The body receives the student's answer (a function) and calls :func:`passed` or :func:`hint`.
    The decorator handles the rest:

    * an answer that is still ``...`` or ``None`` gives "not attempted yet";
    * ``NotImplementedError`` raised by the student's function gives "not attempted yet";
    * any other exception from the student's code becomes a hint naming it and the line;
    * an exception raised by the checker's own code is reported as an internal error that asks the
      student to tell the instructors (it is a bug of the course, not of the student's answer);
    * a body that ends without a verdict counts as a pass.

    ``allow`` names companion modules that the exercise's text lets the student use (a shift
    matrix, ``apply_rotary``, ``patchify``); every other use of the course's code is refused.
    """

    def decorate(body: Callable[..., None]) -> Callable[..., Feedback]:
        @functools.wraps(body)
        def check(*answers: Any) -> Feedback:
            if any(_untouched(a) for a in answers):
                return Feedback(exercise, NOT_ATTEMPTED, "replace the `...` with your answer, then run this cell again.")
            for a in answers:
                if not callable(a):
                    return Feedback(exercise, HINT, "pass your function itself to the check, without calling it "
                                    f"(its name, no parentheses); you passed {describe(a)}.", SPECIFIC)
            _RETURNED.append([])
            # An answer that leaves grad mode changed gets its hint, and the mode is put back here, so
            # that the next check in the same kernel is not judged under it. A check always starts with
            # gradients on, whatever a cell before it left (its own no_grad cases say so explicitly).
            grad_before = torch.is_grad_enabled()
            torch.set_grad_enabled(True)
            _CALLER_RNG.append(None)
            try:
                with rules.watch() as seen:
                    try:
                        body(*(_guard(a) for a in answers))
                    except _Verdict as verdict:
                        if verdict.status != PASSED:
                            raise
                        final = verdict
                    else:
                        final = _Verdict(PASSED, "well done.")
                raise _companion_verdict(answers, seen, companion_given, allow) or final
            except _Verdict as verdict:
                junk = _first_junk()
                if junk:  # what it returned decides first: an object that fakes comparisons never passes
                    return Feedback(exercise, HINT, _junk_message(junk), SPECIFIC)
                return Feedback(exercise, verdict.status, verdict.message, verdict.kind)
            except StudentError as raised:
                exc = raised.error
                why = _why_not_implemented(answers, raised, bool(_RETURNED and _RETURNED[-1])) \
                    if isinstance(exc, NotImplementedError) else ""
                if why == "stub":
                    return Feedback(exercise, NOT_ATTEMPTED,
                                    "write your code where it says `raise NotImplementedError`, then run this cell again.")
                if why == "branch":
                    return Feedback(exercise, HINT, f"your code still raises NotImplementedError{_where(exc)} when called "
                                    f"as {raised.call or 'the check calls it'}: that case is not written yet.",
                                    RAISED, _student_traceback(exc))
                return Feedback(exercise, HINT, f"your code raised {type(exc).__name__}: {_text(exc)}{_where(exc)}",
                                RAISED, _student_traceback(exc))
            except Exception as exc:  # noqa: BLE001 - the checker's own code failed: a bug of ours...
                junk = _first_junk()
                if junk:  # ...unless the student's function returned something no exercise asks for
                    return Feedback(exercise, HINT, _junk_message(junk), SPECIFIC)
                return Feedback(exercise, INTERNAL, _internal_message(exc), "internal")
            finally:
                torch.set_grad_enabled(grad_before)
                caller_rng = _CALLER_RNG.pop()
                if caller_rng is not None:
                    torch.set_rng_state(caller_rng)
                if _RETURNED:
                    _RETURNED.pop()

        check.exercise = exercise  # type: ignore[attr-defined]
        return check

    return decorate


def _internal_message(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return (f"the checker itself failed ({type(exc).__name__}: {exc}{where}). This is a bug in the "
            "course, not in your code: please tell the instructors, with this message.")


_HERE = str(Path(__file__).resolve().parent)
_LIBRARIES = tuple({str(Path(p).resolve()) for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"],
                                                     sysconfig.get_paths()["platlib"], Path(torch.__file__).parent.parent,
                                                     Path(np.__file__).parent.parent)})


def _text(exc: BaseException, limit: int = 300) -> str:
    """``str(exc)``, never failing and never longer than ``limit`` characters."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - a message that cannot be printed
        text = f"<{type(exc).__name__} whose message cannot be printed>"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _is_student_frame(filename: str) -> bool:
    """A frame of the student's code: not the checkers' and not a library's (torch, numpy, Python)."""
    if filename.startswith("<") and not filename.startswith("<ipython-input") and filename != "<IPY-INPUT>":
        return filename not in ("<frozen importlib._bootstrap>",) and "frozen" not in filename
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    if path.startswith(_HERE):
        return False
    return not any(path.startswith(lib + "/") for lib in _LIBRARIES) or "ipykernel" in filename


def _student_traceback(exc: BaseException, frames_shown: int = 6) -> str:
    """The student's own frames of ``exc``'s traceback, innermost last, at most 78 columns a line."""
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if _is_student_frame(f.filename)]
    except Exception:  # noqa: BLE001 - a traceback is a courtesy: never fail on it
        return ""
    if not frames:
        return ""
    lines = ["Traceback of your code (most recent call last):"]
    if len(frames) > frames_shown:
        lines.append(f"  ... {len(frames) - frames_shown} earlier calls not shown")
        frames = frames[-frames_shown:]
    for frame in frames:
        cell = (frame.filename.startswith("<ipython-input") or "ipykernel" in frame.filename
                or frame.filename == "<IPY-INPUT>")
        where = "your cell" if cell else Path(frame.filename).name
        lines.append(_clip(f"  {where}, line {frame.lineno}, in {frame.name}"))
        if frame.line:
            lines.append(_clip(f"    {frame.line.strip()}"))
    return "\n".join(lines)  # the exception itself is in the hint that follows


def _clip(line: str) -> str:
    return line if len(line) <= WIDTH else line[: WIDTH - 3] + "..."


def _where(exc: BaseException) -> str:
    """' (line N of your cell)' for the innermost frame that comes from a notebook cell, if any."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        if frame.filename.startswith("<ipython-input") or "ipykernel" in frame.filename or frame.filename == "<IPY-INPUT>":
            return f" (line {frame.lineno} of your cell)"
    return ""


def close(actual: Any, expected: Any, rtol: float = 1e-4, atol: float = 1e-6, equal_nan: bool = False) -> bool:
    """True when ``actual`` has ``expected``'s shape and values, within tolerance. Never raises.

    ``equal_nan=True`` for comparing with a mistake whose result holds NaN where the student's does.
    """
    try:
        a = _array(actual)
        e = _array(expected)
        return a.shape == e.shape and bool(np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan))
    except Exception:  # noqa: BLE001 - anything that is not an array of numbers is not close
        return False


def _array(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        if x.is_complex() or x.dtype == torch.bool:
            raise TypeError("not a real-valued tensor")
        return x.double().numpy()
    if isinstance(x, (bool, np.bool_)):
        raise TypeError("a bool is not a number")
    if isinstance(x, (list, tuple)) and any(isinstance(v, torch.Tensor) and v.dim() > 0 for v in x):
        return np.stack([_array(v) for v in x])  # a list of tensors of equal shape
    if isinstance(x, (list, tuple)):
        return np.asarray([float(v) if isinstance(v, torch.Tensor) else v for v in x], dtype=float)
    return np.asarray(x, dtype=float)


def describe(x: Any) -> str:
    """A short description of what the student returned: type, and shape/dtype for a tensor."""
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, np.ndarray):
        return f"a NumPy array of shape {x.shape}"
    if isinstance(x, int) and not isinstance(x, bool) and abs(x) > 10**30:
        digits = int(abs(x).bit_length() * 0.30103)
        return f"int {'-' if x < 0 else ''}10**{digits} or so, far too large"
    try:
        text = repr(x)
    except Exception:  # noqa: BLE001 - a description must never fail
        text = f"<a {type(x).__name__}>"
    return f"{type(x).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def safe_float(x: Any) -> float | None:
    """``x`` as a float when it is one real number (int, float, NumPy scalar, one-element real
    tensor or array), else None: never raises (``10**400``, complex, a bool, a string give None)."""
    try:
        if isinstance(x, (bool, np.bool_)):
            return None
        if isinstance(x, (int, np.integer)):
            return float(x) if abs(int(x)) < 2**1000 else None
        if isinstance(x, (float, np.floating)):
            return float(x)
        if isinstance(x, torch.Tensor) and x.numel() == 1 and not x.is_complex() and x.dtype != torch.bool:
            return float(x.detach().reshape(()).double())
        if isinstance(x, np.ndarray) and x.size == 1 and x.dtype.kind in "iuf":
            return float(x.reshape(()))
    except Exception:  # noqa: BLE001 - anything odd is not a number
        return None
    return None


def require_tensor(got: Any, what: str = "a tensor") -> torch.Tensor:
    """Hint unless ``got`` is a torch tensor (specific: the wrong type is the recognized mistake)."""
    if isinstance(got, torch.Tensor):
        return got
    if isinstance(got, tuple) and got and isinstance(got[0], torch.Tensor):
        hint(f"return {what}, not a tuple (you returned {len(got)} values).")
    hint(f"return {what}; you returned {describe(got)}.")
    raise AssertionError  # unreachable: hint() raises


def require_shape(got: torch.Tensor, shape: tuple, what: str = "the result") -> None:
    """Hint (generic) unless ``got`` has ``shape``."""
    if tuple(got.shape) != tuple(shape):
        hint(f"{what} should have shape {tuple(shape)}, got {tuple(got.shape)}.", generic=True)


def first_difference(got: Any, expected: Any, name: str = "out", rtol: float = 1e-4, atol: float = 1e-6) -> str:
    """Where two arrays of the same shape first differ, for a generic hint: 'out[1, 2] is 0.5, expected 0.25'.

    Quoting the first entry that differs (never one that agrees) keeps a generic hint honest.
    """
    try:
        a, e = _array(got), _array(expected)
        if a.shape != e.shape:
            return f"{name} has shape {a.shape}, expected {e.shape}"
        bad = ~np.isclose(a, e, rtol=rtol, atol=atol)
        if not bad.any():
            return f"{name} matches"
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f"{name}[{', '.join(map(str, index))}]" if index else name
        return f"{where} is {_num(a[index])}, expected {_num(e[index])}"
    except Exception:  # noqa: BLE001 - a description must never fail
        return f"{name} differs from the expected values"


def _num(v: Any) -> str:
    v = float(v)
    if math.isnan(v) or math.isinf(v):
        return str(v)
    return f"{v:.4g}"


def as_number(got: Any, call: str) -> float:
    """The student's answer as a float when it is one number (int, float, 0-d or 1-element tensor), or a hint."""
    if isinstance(got, (bool, np.bool_, str, bytes)):
        hint(f"{call} should return a number; it returned {describe(got)}.")
    if isinstance(got, (int, float, np.integer, np.floating)) or (
            isinstance(got, torch.Tensor) and got.numel() == 1 and not got.is_complex() and got.dtype != torch.bool):
        value = safe_float(got)
        if value is None:
            hint(f"{call} returned {describe(got)}, too large to be a float.", generic=True)
        return value
    hint(f"{call} should return one number; it returned {describe(got)}.")
    raise AssertionError  # unreachable


def as_count(got: Any, call: str) -> int:
    """The student's answer as an exact whole number, or a hint (never truncates: 12.7 is not 12)."""
    if (isinstance(got, torch.Tensor) and got.numel() == 1 and not got.is_floating_point() and not got.is_complex()
            and got.dtype != torch.bool):
        return int(got.item())
    if isinstance(got, (bool, np.bool_)):
        hint(f"{call} returned {got!r}, a bool; return the number of parameters, an int.")
    if isinstance(got, (int, np.integer)):
        return int(got)
    if isinstance(got, (float, np.floating)) or (
            isinstance(got, torch.Tensor) and got.numel() == 1 and not got.is_complex()):
        value = float(got)
        if math.isfinite(value) and value == int(value):
            hint(f"{call} returned {value!r}, a float: a count of parameters is an int. Use // for integer "
                 "division (d_model // n_heads), not /, which always gives a float.")
        hint(f"{call} returned {value!r}, which is not a whole number: a count of parameters is an "
             "integer. Use // for integer division, or check where a fraction comes from.")
    hint(f"{call} should return a whole number; it returned {describe(got)}.")
    raise AssertionError  # unreachable


def require_graph(fn: Callable[..., Any], args: tuple, *, grad: tuple[int, ...] | None = None,
                  pick: Callable[[Any], Any] | None = None) -> None:
    """Hint unless gradients flow from ``fn(*args)`` back to its float tensor inputs, and unless
    the result keeps the inputs' floating dtype.

    Called once the values are right: a result computed under ``torch.no_grad()``, detached, or
    computed in NumPy and wrapped again has the right numbers but cannot train anything, and an
    in-place operation on a tensor autograd saved (``e /= e.sum()``) makes ``backward()`` fail.
    ``grad``: the positions of the arguments that get ``requires_grad`` (default: every float
    tensor); ``pick``: the tensor of the result to test (default: the result, or its first item).
    """
    grad = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.is_floating_point()) \
        if grad is None else grad
    args = tuple(a.detach().clone().requires_grad_(i in grad) if isinstance(a, torch.Tensor) and i in grad
                 else a for i, a in enumerate(args))
    remote = rules.is_remote(fn)
    if remote:  # a grader's proxy: the graph stays in the student's kernel, which reports its facts
        with torch.enable_grad(), rules.graph_request(grad) as box:
            out = fn(*args)
    else:
        out = fn(*args)
    out = pick(out) if pick else (out[0] if isinstance(out, (tuple, list)) and out else out)
    if not isinstance(out, torch.Tensor):
        return
    dtypes = {a.dtype for i, a in enumerate(args) if i in grad}
    if len(dtypes) == 1 and out.dtype != next(iter(dtypes)):
        hint(f"the values are right, but the result has dtype {out.dtype} for inputs of dtype "
             f"{next(iter(dtypes))}: keep the inputs' dtype (no .float(), .double() or NumPy round trip).")
    if remote:
        facts = box.get("facts")
        if not isinstance(facts, dict) or pick is not None:
            raise rules.Tampered("the notebook's kernel sent no autograd facts for the result")
        if facts.get("requires_grad") is not True:
            hint("the values are right, but no gradient flows back to the inputs: torch.no_grad(), .detach(), "
                 ".item(), .numpy() or torch.tensor(...) of a result cut the graph. Compute with torch operations on "
                 "the tensors you are given, so that the result can be trained.")
        if isinstance(facts.get("backward_error"), str):
            hint("the values are right, but backpropagation through your function fails: an in-place operation "
                 "(such as e /= s or x[...] = v) changed a tensor that autograd saved. Write e = e / s instead "
                 f"({_text(facts['backward_error'], 90)}).")
        return
    if not out.requires_grad:
        hint("the values are right, but no gradient flows back to the inputs: torch.no_grad(), .detach(), "
             ".item(), .numpy() or torch.tensor(...) of a result cut the graph. Compute with torch operations on "
             "the tensors you are given, so that the result can be trained.")
    try:
        weights = torch.linspace(0.5, 1.5, out.numel(), dtype=torch.float64).reshape(out.shape)
        (out.double() * weights).sum().backward()
    except RuntimeError as exc:
        hint("the values are right, but backpropagation through your function fails: an in-place operation "
             "(such as e /= s or x[...] = v) changed a tensor that autograd saved. Write e = e / s instead "
             f"({_text(exc, 90)}).")


@contextlib.contextmanager
def recording(names: dict[str, tuple[Any, str]]) -> Iterator[list[str]]:
    """Record the calls of some library functions while the student's code runs.

    ``names`` maps a label (such as ``"torch.softmax"``) to ``(owner, attribute)``; each attribute is
    replaced by a wrapper that notes the label and calls the original. The originals are restored
    on exit, whatever happens.
    """
    calls: list[str] = []
    saved = []
    try:
        for label, (owner, attr) in names.items():
            original = getattr(owner, attr)
            saved.append((owner, attr, original, attr in vars(owner)))

            def wrapper(*args, __original=original, __label=label, **kwargs):
                calls.append(__label)
                return __original(*args, **kwargs)

            setattr(owner, attr, wrapper)
        yield calls
    finally:
        for owner, attr, original, own in reversed(saved):
            if own:
                setattr(owner, attr, original)
            else:  # inherited (Tensor.softmax comes from torch._C.TensorBase): remove the shadow
                delattr(owner, attr)
