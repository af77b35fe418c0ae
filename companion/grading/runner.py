"""Grade one submission: run the student's notebook in a sandboxed kernel, then run the
grader's own checkers, in this process, against proxies of the functions the student defined.

:func:`grade_notebook` is what a worker process runs for each submission; it returns plain data
(see :class:`ExerciseResult`), so that the parent process never meets anything of the student's.
"""
from __future__ import annotations

import os
import random
import re
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import numpy as np
import torch

from companion.exercises._core import HINT, INTERNAL, NOT_ATTEMPTED, PASSED, RAISED, Feedback
from companion.exercises import rules
from companion.grading import registry, wire
from companion.grading.source import Notebook
from companion.grading.session import (
    MISSING,
    CallTimedOut,
    HelperFailed,
    KernelDied,
    Limits,
    NoKernel,
    SendFailed,
    Sandbox,
    StudentKernel,
    kernel_env,
)

#: The five results of an exercise.
STATUSES = ("passed", "not yet", "not attempted", "error", "timed out")
# INTERNAL: the checker itself failed (a bug of the course): graded "error", with its message.
_FROM_FEEDBACK = {PASSED: "passed", HINT: "not yet", NOT_ATTEMPTED: "not attempted", INTERNAL: "error"}


@dataclass
class ExerciseResult:
    number: str  # "2.1"
    title: str
    status: str  # one of STATUSES
    message: str  # the hint, the error or what happened, as the student should read it
    feedback: str  # the line the check cell would print ("✅ Exercise 2.1 passed: ...")
    points: float = 0.0
    out_of: float = 1.0
    seconds: float = 0.0


@dataclass
class NotebookResult:
    exercises: list[ExerciseResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds_start: float = 0.0  # starting the sandboxed kernel
    seconds_notebook: float = 0.0  # running the student's cells (restarts and replays included)
    seconds_checks: float = 0.0
    restarts: int = 0
    kernel_log: str = ""  # the end of the last kernel's own log (for the instructor's log file)


def _is_check_cell(source: str, calls: set[str]) -> bool:
    """A cell that holds nothing but the book's check calls (the grader runs its own instead)."""
    lines = [line.strip() for line in source.strip().splitlines() if line.strip() and not line.strip().startswith("#")]
    return bool(lines) and all(re.sub(r"\s+", "", line) in calls for line in lines)


def _defining_cells(name: str, cells: list[tuple[int, str]]) -> list[int]:
    pattern = re.compile(rf"^\s*(?:async\s+)?(?:def|class)\s+{re.escape(name)}\b|^\s*{re.escape(name)}\s*(?::[^=]*)?=[^=]", re.MULTILINE)
    return [i for i, src in cells if pattern.search(src)]


def _seed() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def _feedback_line(number: str, status: str, message: str) -> str:
    icon = {"passed": "✅", "not yet": "❌", "not attempted": "⏳", "error": "❌", "timed out": "⌛"}[status]
    verb = {"passed": "passed", "not yet": "not yet", "not attempted": "not attempted yet",
            "error": "not yet", "timed out": "timed out"}[status]
    return f"{icon} Exercise {number} {verb}: {message}"


def merged_source(static: str | None, reported: Any) -> str | None:
    """The source the rules read: the one the grader parsed from the file, with the import lines of
    the kernel's own report added (a second signal: it can add facts, never hide one)."""
    reported = reported if isinstance(reported, str) else None
    if static is None:
        return reported
    if reported is None:
        return static
    extra = []
    for line in reported.splitlines():
        if not line.startswith(("import ", "from ")):
            break
        if line not in static.splitlines():
            extra.append(line)
    return "\n".join([*extra, static])


def grade_exercise(sk: StudentKernel, chapter: registry.Chapter, ex: registry.Exercise, limits: Limits,
                   cells: list[tuple[int, str]], notebook: Notebook | None = None,
                   tampered: str | None = None) -> ExerciseResult:
    """Run the grader's checker for one exercise against the student's definitions."""
    start = time.monotonic()
    notebook = notebook if notebook is not None else Notebook(cells)

    def result(status: str, message: str, feedback: str | None = None) -> ExerciseResult:
        return ExerciseResult(ex.number, ex.title, status, message, feedback or _feedback_line(ex.number, status, message),
                              seconds=round(time.monotonic() - start, 2))

    checker = chapter.checker(ex)
    sk.begin_exercise()
    sk.raised.clear()
    try:
        answers = []
        for name in ex.names:
            value = sk.lookup(name)
            if value is MISSING:
                return _missing(name, ex, sk, cells, result)
            if isinstance(value, wire.Remote):  # the rules read the file's source, not the kernel's word
                own = object.__getattribute__(value, "__dict__")
                text = merged_source(notebook.source_for(name), own.get("__course_source__"))
                if text is not None:
                    own["__course_source__"] = text[:200_000]
            answers.append(value)
        _seed()
        feedback = checker(*answers)
    except rules.Tampered as exc:
        return result("error", f"the grader's helper in your notebook's kernel did not answer as it must ({exc}): "
                               "your code changed it, so this exercise gets no points.")
    except CallTimedOut as exc:
        names = ", ".join(f"`{n}`" for n in ex.names)
        what = (f"{names} did not return within {limits.call:.0f} s of CPU time (an endless loop?)"
                if exc.seconds >= limits.call - 0.5 else
                f"the checks of {names} used more than {limits.exercise:.0f} s of CPU time in all")
        return result("timed out", what + "; it was stopped.")
    except NoKernel:
        return result("error", "the notebook's kernel was lost too many times (see the notes): this exercise could not be checked.")
    except KernelDied as exc:
        why = str(exc) if "exit()" in str(exc) else "the kernel stopped (exit(), os._exit() or a crash)"
        return result("error", f"your code ended the notebook's kernel while being checked: {why}.")
    except SendFailed as exc:
        return result("error", f"the grader could not send this exercise's arguments to the kernel (a bug in "
                               f"the grader: please report it): {exc}")
    except HelperFailed as exc:
        return result("error", f"your notebook's kernel could not run the check (did the notebook change "
                               f"`torch`, `open` or `companion`?): {exc}")
    finally:
        sk.end_exercise()
    if not isinstance(feedback, Feedback) or feedback.exercise != ex.exercise:
        return result("error", f"the grader's checker returned {feedback!r} (a bug in the grader: please report it)")
    status = _FROM_FEEDBACK[feedback.status]
    raised = feedback.kind == RAISED or any(
        feedback.message.startswith(f"your code raised {e.get('type')}:") for e in sk.raised)
    if status == "not yet" and raised:
        status = "error"
    if tampered:
        message = (f"your notebook reaches for the grader's machinery ({tampered}), which no answer needs: "
                   f"this exercise gets no points. (The check said: {feedback.message})")
        return result("error", message)
    return result(status, feedback.message, str(feedback).replace("\n   ", " "))


def _missing(name: str, ex: registry.Exercise, sk: StudentKernel, cells: list[tuple[int, str]], result) -> ExerciseResult:
    """The result for an exercise whose name is not defined: why not, as precisely as we can."""
    defining = _defining_cells(name, cells)
    for index in reversed(defining):
        run = sk.runs.get(index)
        if run is None:
            continue
        if run.status == "skipped":
            return result("timed out", f"the notebook ran out of time before the cell that defines `{name}` (cell {index}) could run.")
        if run.status == "timed out":
            return result("timed out", f"the cell that defines `{name}` (cell {index}) ran past its time limit.")
        if run.status == "killed the kernel":
            return result("error", f"the cell that defines `{name}` (cell {index}) ended the kernel, so it was skipped.")
        if run.status == "error":
            return result("error", f"`{name}` is not defined: its cell (cell {index}) raised {run.ename}: {run.evalue}")
    return result("not attempted", f"`{name}` is not defined: write it in the exercise's code cell"
                                   + (" (that cell seems to be missing)." if not defining else "."))


def grade_notebook(data: bytes, chapter: registry.Chapter, limits: Limits, sandbox: Sandbox, slot: int) -> dict:
    """Grade one notebook of ``chapter``, from the bytes the grader read (once) from its file;
    plain data (see :class:`NotebookResult`)."""
    if isinstance(data, (str, os.PathLike)):  # a path: read once here, never through a link
        from companion.grade import read_once

        data = read_once(Path(data))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
    calls = {re.sub(r"\s+", "", ex.call) for ex in chapter.exercises}
    cells = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.strip()]
    to_run = [(i, src) for i, src in cells if not _is_check_cell(src, calls)]
    out = NotebookResult()
    sk = StudentKernel(to_run, sandbox, slot, kernel_env(), limits, notebook=data)
    try:
        start = time.monotonic()
        sk.run()
        out.seconds_start = round(sk.seconds_start, 2)
        out.seconds_notebook = round(time.monotonic() - start - sk.seconds_start, 2)
        start = time.monotonic()
        parsed = Notebook(to_run)
        tampered = parsed.tampering()
        if tampered:
            out.notes.append(f"{tampered}, which reaches for the grader's machinery: every exercise gets no points")
        for ex in chapter.exercises:
            try:
                graded = grade_exercise(sk, chapter, ex, limits, to_run, parsed, tampered)
                if graded.status == "timed out":  # reported as such, and graded once more
                    out.notes.append(f"exercise {ex.number} timed out ({graded.message}); it was graded once more")
                    graded = grade_exercise(sk, chapter, ex, limits, to_run, parsed, tampered)
                out.exercises.append(graded)
            except Exception as exc:  # a bug of the grader: keep grading the other exercises
                out.exercises.append(ExerciseResult(ex.number, ex.title, "error", f"internal error of the grader: {exc!r}",
                                                    f"❌ Exercise {ex.number}: internal error of the grader"))
                out.notes.append(traceback.format_exc(limit=5))
        out.seconds_checks = round(time.monotonic() - start, 2)
    finally:
        out.notes += sk.notes
        out.restarts = sk.restarts
        if sk.kernel is not None:
            out.kernel_log = sk.kernel.log_tail(20_000)
        sk.close()
    return asdict(out)


def work(conn, path: bytes, chapter: dict, limits: Limits, sandbox: Sandbox, slot: int) -> None:
    """A worker process: grade one notebook and send the plain-data result to the parent.

    It lives here, in an importable module, so that the fork server finds it whatever the
    grader's ``__main__`` is (``python -m companion.grade``, a script, a notebook). It holds no
    secret of the instructor's: its environment is emptied first (but for what a kernel is given,
    :data:`~companion.grading.session.PASSED_ON`, and ``PATH``)."""
    from companion.grading.session import PASSED_ON

    import signal

    def stop(signum, frame):  # the grader was stopped: end the kernel and remove its files first
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    keep = {k: os.environ[k] for k in (*PASSED_ON, "PATH") if k in os.environ}
    os.environ.clear()
    os.environ.update(keep)
    torch.set_num_threads(1)
    chapter = dict(chapter)
    exercises = [registry.Exercise(**e) for e in chapter.pop("exercises")]
    try:
        result: dict = {"ok": True, **grade_notebook(path, registry.Chapter(**chapter, exercises=exercises), limits, sandbox, slot)}
    except BaseException as exc:  # the kernel did not start, the disk is full, ...
        result = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
    try:
        conn.send(result)
    except BaseException as exc:  # noqa: BLE001 - a result that cannot be sent is still a result
        conn.send({"ok": False, "error": f"the result could not be sent to the grader ({type(exc).__name__})"})
    conn.close()
