"""Grade students' notebooks of any chapter into a gradebook.

    python -m companion.grade submissions/ --out gradebook.csv
    python -m companion.grade alice.ipynb bob.ipynb --points points.toml --feedback-dir feedback/

Each notebook runs in a fresh kernel in a bubblewrap sandbox of its own (its own notebook copy,
the course and Python read-only, private /tmp and /dev/shm, no network or host sockets, no other
process visible, a cleared environment, time, process and memory limits; as root, a user of its
own); without bubblewrap the grader says so, and what is then not guaranteed. Then the grader's
own checkers, in the grader's own process, call the functions the student defined, through a
wire that carries data only. What the notebook printed, and anything it redefined (``check``,
the checkers, the companion, torch), decides nothing. Writes a CSV gradebook (one row per
submission, one column of points per exercise, the total), a JSON file with every result and hint
(``--feedback``; by default the CSV's name with ``.json``) and a log per submission
(``--log-dir``); on request, a Markdown feedback file per submission (``--feedback-dir``), a CSV
keyed by student (``--students-csv``) and Gradescope's ``results.json`` (``--gradescope``;
``--gradescope-bundle`` writes an autograder bundle that runs this command). Files that are not
notebooks, corrupted notebooks and notebooks of no known chapter are reported and listed in the
gradebook with the reason; they never stop the others.

Points per exercise are 1 unless a points file (TOML or JSON) says otherwise::

    default = 1          # every exercise not listed below
    [points]
    "2.1" = 2
    "7.1" = 0.5

The design and its guarantees are described in :mod:`companion.grading`.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import json
import math
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from companion.grading import registry
from companion.grading.sandbox import SandboxRefused
from companion.grading.session import Limits, Sandbox, release

NOTEBOOK_MAX_BYTES = 50 * 2**20


@dataclass
class Submission:
    """One file to grade, and what is known about it before it runs."""

    path: Path
    name: str  # as shown in the gradebook
    student: str = ""  # the first folder below the submissions folder, else the file's name
    chapter: registry.Chapter | None = None
    identified_by: str = ""
    problem: str | None = None  # why it cannot be graded (not a notebook, corrupted, ...)
    result: dict | None = None
    seconds: float = 0.0
    warning: str | None = None  # graded, but the instructor should know (a wrong chapter stamp)
    data: bytes | None = field(default=None, repr=False)  # the file's bytes, read once (graded from these)


# ---------------------------------------------------------------------------- collecting
def collect(paths: list[str]) -> list[tuple[Path, str, str | None, str]]:
    """``(path, name, problem, student)`` for every file named or found (recursively) in a folder
    named. Links are not followed (a link in a submissions folder is reported, not read)."""
    found: list[tuple[Path, str, str | None, str]] = []
    for arg in paths:
        path = Path(arg)
        if path.is_dir() and not path.is_symlink():
            for file in sorted(path.rglob("*")):
                parts = file.relative_to(path).parts
                if any(p.startswith(".") for p in parts) or "__MACOSX" in parts:
                    continue
                student = parts[0] if len(parts) > 1 else Path(parts[0]).stem
                if file.is_symlink():
                    found.append((file, str(Path(arg) / file.relative_to(path)), "a link, not a file (not followed)", student))
                elif file.is_file():
                    found.append((file, str(Path(arg) / file.relative_to(path)), None, student))
        elif path.is_file():
            found.append((path, arg, None, path.stem))
        else:
            found.append((path, arg, "no such file or folder", path.stem))
    seen: set[Path] = set()
    unique = []
    for path, name, problem, student in found:
        key = path.resolve() if problem is None else path.absolute()
        if key not in seen:
            seen.add(key)
            unique.append((path, name, problem, student))
    return unique


class _TooLarge(Exception):
    pass


def read_once(path: Path, limit: int = NOTEBOOK_MAX_BYTES) -> bytes:
    """The bytes of a submitted file, opened once and never through a link (``O_NOFOLLOW``): a file
    swapped for a link after it was collected is refused, and what is graded is what was read here."""
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if info.st_size > limit:
            raise _TooLarge(info.st_size)
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > limit:
                raise _TooLarge(total)
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def inspect(path: Path, name: str, chapters: dict[int | str, registry.Chapter], chapter: int | str | None = None) -> Submission:
    """Read a file enough to know whether it can be graded, and as which chapter."""
    import nbformat

    sub = Submission(path, name)
    try:
        raw = read_once(path)
    except _TooLarge as exc:
        sub.problem = f"too large for a notebook ({exc.args[0] / 2**20:.0f} MB)"
        return sub
    except OSError as exc:
        sub.problem = (f"cannot be read ({exc.strerror})" if exc.errno != errno.ELOOP
                       else "a link, not a file (not followed)")
        return sub
    sub.data = raw
    is_ipynb = path.suffix.lower() == ".ipynb"
    try:
        data = json.loads(raw.decode("utf-8"))
    except RecursionError:
        sub.problem = "a corrupted notebook: its JSON is nested too deeply"
        return sub
    except (UnicodeDecodeError, ValueError) as exc:
        sub.problem = (f"a corrupted notebook: it is not valid JSON ({str(exc)[:80]})" if is_ipynb
                       else f"not a notebook (a {path.suffix or 'file without extension'} file; submit the .ipynb)")
        return sub
    if not isinstance(data, dict) or "cells" not in data:
        sub.problem = "a corrupted notebook: no cells" if is_ipynb else "not a notebook (JSON without cells)"
        return sub
    try:
        with warnings.catch_warnings():  # a notebook without cell ids (older front ends) is fine
            warnings.simplefilter("ignore")
            nb = nbformat.reads(raw.decode("utf-8"), as_version=4)
        if not all(isinstance(c.get("source", ""), str) for c in nb.cells):
            raise ValueError("a cell's source is not text")
    except Exception as exc:
        sub.problem = f"a corrupted notebook: {type(exc).__name__}: {str(exc)[:120]}"
        return sub
    if chapter is not None:
        if chapter not in chapters:
            sub.problem = f"chapter {chapter} has no exercises in the registry"
            return sub
        sub.chapter, sub.identified_by = chapters[chapter], "--chapter"
        return sub
    try:
        sub.chapter, sub.identified_by = registry.identify(nb, path.name, chapters)
    except registry.UnknownChapter as exc:
        sub.problem = str(exc)
        return sub
    if sub.identified_by == "metadata":  # a stamp can be copied from another chapter: the content wins
        content = registry.identify_by_content(nb, chapters)
        if content is not None and content is not sub.chapter:
            sub.warning = (f"the notebook is stamped as chapter {sub.chapter.chapter} but its content is chapter "
                           f"{content.chapter} ({content.title}): graded as chapter {content.chapter}")
            sub.chapter, sub.identified_by = content, "content (the stamp disagreed)"
    return sub


# --------------------------------------------------------------------------------- points
class PointsError(ValueError):
    pass


def load_points(path: Path | None, chapters: dict[int | str, registry.Chapter]) -> dict[str, float]:
    """``{"2.1": points}`` for every exercise of the registry, from a TOML or JSON points file."""
    numbers = [ex.number for c in chapters.values() for ex in c.exercises]
    if path is None:
        return {n: 1.0 for n in numbers}
    try:
        text = path.read_text(encoding="utf-8")
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import tomllib

            data = tomllib.loads(text)
    except OSError as exc:
        raise PointsError(f"cannot read the points file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise PointsError(f"the points file {path} is not valid {'JSON' if path.suffix.lower() == '.json' else 'TOML'}: {exc}") from None
    if not isinstance(data, dict) or set(data) - {"default", "points"}:
        raise PointsError(f"the points file {path} may hold `default = N` and a [points] table only (found {sorted(data)})")

    def number(value: Any, where: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise PointsError(f"{where} in {path} must be a finite number >= 0, got {value!r}")
        return float(value)

    default = number(data.get("default", 1), "default")
    table = data.get("points", {})
    if not isinstance(table, dict):
        raise PointsError(f"[points] in {path} must be a table of \"C.k\" = points")
    points = {n: default for n in numbers}
    for key, value in table.items():
        n = str(key).removeprefix("Exercise").strip()
        if n not in points:
            raise PointsError(f"{path} gives points to exercise {key!r}, which no chapter has "
                              f"(exercises: {', '.join(numbers)})")
        points[n] = number(value, f"points for {key}")
    return points


# -------------------------------------------------------------------------------- workers
def _context(chapters: dict[int | str, registry.Chapter]):
    ctx = multiprocessing.get_context("forkserver")
    # Imported once by the fork server, before any notebook runs; each submission then gets a
    # fresh process forked from it, with the checkers already loaded from the files as they were.
    ctx.set_forkserver_preload(["companion.grading.runner", *sorted({c.module for c in chapters.values()})])
    return ctx


@contextlib.contextmanager
def _without_main_module():
    """Start workers without the caller's ``__main__``: multiprocessing would import it again in
    each worker, which fails for a script read from stdin and, for a script without an
    ``if __name__ == "__main__":`` guard, would start the grading again in every worker."""
    main = sys.modules.get("__main__")
    saved = {k: main.__dict__.pop(k) for k in ("__file__",) if main is not None and k in main.__dict__}
    spec = getattr(main, "__spec__", None)
    if main is not None:
        main.__spec__ = None
    try:
        yield
    finally:
        if main is not None:
            main.__dict__.update(saved)
            main.__spec__ = spec


def run_all(subs: list[Submission], limits: Limits, sandbox: Sandbox, jobs: int, progress: Any = None) -> None:
    """Grade every submission that has a chapter, ``jobs`` at a time, each in its own process."""
    # The worker is a function of an importable module (never of __main__, which the fork server
    # does not have under `python -m companion.grade`); importing it here fails once, not per worker.
    from companion.grading import runner

    todo = [s for s in subs if s.problem is None and s.chapter is not None]
    if not todo:
        return
    ctx = _context({s.chapter.chapter: s.chapter for s in todo})  # type: ignore[union-attr]
    free = list(range(jobs))
    running: dict[Any, tuple[Submission, Any, int, float]] = {}
    queue = list(todo)
    try:
        _run_queue(queue, running, free, ctx, limits, sandbox, progress)
    finally:  # SIGTERM, Ctrl-C, a bug: every worker ends, closing its kernel (copies, cgroups) first
        for sub, process, slot, _ in running.values():
            if process.is_alive():
                process.terminate()
        for sub, process, slot, _ in running.values():
            process.join(timeout=20)
            if process.is_alive():
                process.kill()
                process.join(timeout=5)
            sandbox.kill_all(slot)


def _run_queue(queue, running, free, ctx, limits, sandbox, progress) -> None:
    from companion.grading import runner

    while queue or running:
        while queue and free:
            sub, slot = queue.pop(0), free.pop(0)
            receive, send = ctx.Pipe(duplex=False)
            process = ctx.Process(target=runner.work, args=(send, sub.data, asdict(sub.chapter), limits, sandbox, slot), daemon=True)
            with _without_main_module():
                process.start()
            send.close()
            running[receive] = (sub, process, slot, time.monotonic())
        ready = multiprocessing.connection.wait(list(running), timeout=1.0)
        now = time.monotonic()
        for receive in list(running):
            sub, process, slot, started = running[receive]
            hard_limit = hard_cap(limits, len(sub.chapter.exercises))  # type: ignore[union-attr]
            result = None
            if receive in ready:
                try:
                    result = receive.recv()
                except (EOFError, OSError):
                    process.join(timeout=30)
                    result = {"ok": False, "error": f"the grading process ended without a result (exit code {process.exitcode})"}
            elif now - started > hard_limit:
                process.kill()
                result = {"ok": False, "error": f"grading took longer than {hard_limit:.0f} s and was stopped"}
            if result is None:
                continue
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
            sandbox.kill_all(slot)
            receive.close()
            del running[receive]
            free.append(slot)
            sub.seconds = round(now - started, 2)
            if result.get("ok"):
                result.pop("ok")
                sub.result = result
            else:
                sub.problem = f"could not be graded: {result.get('error')}"
                _say(f"{sub.name}: {sub.problem}", progress)
            if progress is not None:
                progress.update(1)


class Terminated(SystemExit):
    """SIGTERM: the grading stops, after every kernel and its files are cleaned up."""


def _on_sigterm():
    """Turn SIGTERM into an exception, so that cleanup runs (in the main thread only)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum, frame):
        raise Terminated(128 + signum)

    return signal.signal(signal.SIGTERM, stop)


def _restore_sigterm(previous) -> None:
    import signal
    import threading

    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)


def hard_cap(limits: Limits, exercises: int) -> float:
    """Seconds after which a submission's worker is killed, whatever it is doing: the notebook's
    budget (its first run and every replay), each exercise's twice (a time-out is graded once
    more), a minute per kernel start; budgets are CPU time, so their wall-clock limits count."""
    from companion.grading.session import wall_limit

    return (wall_limit(limits.notebook, limits) + 2 * exercises * wall_limit(limits.exercise, limits)
            + 60 * (limits.restarts + 1) + 30)


def printable(text: Any) -> str:
    """``text`` safe to write anywhere: a lone surrogate (a file name that is not UTF-8, a forged
    message) as ``\\udcxx``, and control characters (terminal escapes included) as ``\\x1b``; line
    breaks and tabs stay."""
    text = text if isinstance(text, str) else str(text)
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return "".join(ch if ch.isprintable() or ch in "\n\t" else ch.encode("unicode_escape").decode("ascii")
                   for ch in text) if not text.isprintable() else text


def clean(value: Any) -> Any:
    """Every string of a JSON-like value made :func:`printable` (keys included)."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {clean(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def _say(message: str, progress: Any = None) -> None:
    message = printable(message)
    if progress is not None:
        progress.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr)


# --------------------------------------------------------------------------------- output
def records(subs: list[Submission], points: dict[str, float]) -> list[dict]:
    """Every submission's results, points included, as plain data (the JSON file's entries)."""
    out = []
    for sub in subs:
        entry: dict[str, Any] = {"submission": sub.name, "student": sub.student, "chapter": None, "title": None, "identified_by": None,
                                 "problem": sub.problem, "warning": sub.warning, "total": None, "out_of": None,
                                 "exercises": [], "notes": [], "seconds": sub.seconds}
        if sub.chapter is not None:
            entry.update(chapter=sub.chapter.chapter, title=sub.chapter.title, identified_by=sub.identified_by)
        if sub.result is not None and sub.problem is None:
            total = out_of = 0.0
            for ex in sub.result["exercises"]:
                ex["out_of"] = points.get(ex["number"], 1.0)
                ex["points"] = ex["out_of"] if ex["status"] == "passed" else 0.0
                total += ex["points"]
                out_of += ex["out_of"]
            entry.update(total=total, out_of=out_of, exercises=sub.result["exercises"], notes=sub.result["notes"],
                         seconds_start=sub.result["seconds_start"], seconds_notebook=sub.result["seconds_notebook"],
                         seconds_checks=sub.result["seconds_checks"],
                         kernel_restarts=sub.result["restarts"], kernel_log=sub.result.get("kernel_log", ""))
        out.append(clean(entry))
    return out


def _number(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def cell(text: Any) -> str:
    """A CSV cell that a spreadsheet will not read as a formula (a leading = + - @, tab or return
    gets a ``'`` in front)."""
    text = "" if text is None else str(text)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


#: Per-submission data that differs between two runs (times): kept out of the gradebook files,
#: written to the per-submission logs.
TIMINGS = ("seconds", "seconds_start", "seconds_notebook", "seconds_checks", "kernel_log")


def write_csv(path: Path, entries: list[dict], chapters: dict[int | str, registry.Chapter]) -> None:
    """One row per submission; one column of points per exercise of the chapters present."""
    present = sorted({e["chapter"] for e in entries if e["chapter"] is not None}, key=registry.order)
    columns = [ex.number for c in present for ex in chapters[c].exercises]
    with _create(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "student", "chapter", *columns, "total", "out_of", "problem", "warning"])
        for e in entries:
            earned = {ex["number"]: ex["points"] for ex in e["exercises"]}
            writer.writerow([cell(e["submission"]), cell(e["student"]), e["chapter"] if e["chapter"] is not None else "",
                             *(_number(earned.get(n)) for n in columns), _number(e["total"]), _number(e["out_of"]),
                             cell(e["problem"]), cell(e.get("warning"))])


def write_students_csv(path: Path, entries: list[dict], chapters: dict[int | str, registry.Chapter]) -> None:
    """For a learning platform's import: one row per student (the first folder below the
    submissions folder, else the file's name), the points of each chapter present, the total."""
    present = sorted({e["chapter"] for e in entries if e["chapter"] is not None}, key=registry.order)
    out_of = {c: len(chapters[c].exercises) for c in present}
    rows: dict[str, dict[int, float]] = {}
    maxima: dict[int, float] = {}
    for e in entries:
        row = rows.setdefault(e["student"], {})
        if e["chapter"] is not None and e["total"] is not None:
            row[e["chapter"]] = max(row.get(e["chapter"], 0.0), e["total"])
            maxima[e["chapter"]] = e["out_of"]
    with _create(path, newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *(f"chapter {c} (out of {_number(maxima.get(c, out_of[c]))})" for c in present), "total"])
        for student in sorted(rows):
            points = rows[student]
            writer.writerow([cell(student), *(_number(points.get(c, 0.0)) for c in present), _number(sum(points.values()))])


def gradescope_results(entry: dict) -> dict:
    """One submission's results in the format of Gradescope's autograder (``results.json``)."""
    if entry["problem"]:
        return {"score": 0, "output": f"This file could not be graded: {entry['problem']}.", "tests": [],
                "visibility": "visible", "stdout_visibility": "hidden"}
    tests = [{"name": f"Exercise {ex['number']}: {ex['title']}", "number": ex["number"], "score": ex["points"],
              "max_score": ex["out_of"], "status": "passed" if ex["status"] == "passed" else "failed",
              "output": f"{ex['status']}: {ex['message']}", "visibility": "visible"} for ex in entry["exercises"]]
    notes = [n for n in entry["notes"] if not n.startswith("Traceback")]
    output = f"Chapter {entry['chapter']}, {entry['title']}: {_number(entry['total'])} of {_number(entry['out_of'])} points."
    if entry.get("warning"):
        output += f"\nNote: {entry['warning']}."
    if notes:
        output += "\nWhile your notebook ran:\n" + "\n".join(f"- {n}" for n in notes)
    return {"score": entry["total"], "output": output, "tests": tests, "visibility": "visible",
            "stdout_visibility": "hidden"}


def feedback_text(entry: dict) -> str:
    """The Markdown feedback for one student: their points and every hint."""
    lines = [f"# Feedback on {entry['submission']}", ""]
    if entry["problem"]:
        return "\n".join(lines + [f"This file could not be graded: {entry['problem']}.", ""])
    lines += [f"Chapter {entry['chapter']}, *{entry['title']}*: **{_number(entry['total'])} of "
              f"{_number(entry['out_of'])} points**.", ""]
    if entry.get("warning"):
        lines += [f"Note: {entry['warning']}.", ""]
    for ex in entry["exercises"]:
        lines.append(f"- **Exercise {ex['number']}, {ex['title']}** ({_number(ex['points'])}/{_number(ex['out_of'])}, "
                     f"{ex['status']}): {ex['message']}")
    notes = [n for n in entry["notes"] if not n.startswith("Traceback")]
    if notes:
        lines += ["", "While your notebook ran:", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def log_text(entry: dict) -> str:
    """What happened to one submission, for the instructor: times, restarts, every note (tracebacks
    of the grader included) and the end of the kernel's own log."""
    lines = [f"submission: {entry['submission']}", f"student: {entry['student']}",
             f"chapter: {entry['chapter']} (recognized by {entry['identified_by']})"]
    if entry["problem"]:
        lines.append(f"problem: {entry['problem']}")
    if entry.get("warning"):
        lines.append(f"warning: {entry['warning']}")
    for key in ("seconds", "seconds_start", "seconds_notebook", "seconds_checks", "kernel_restarts"):
        if key in entry:
            lines.append(f"{key}: {entry[key]}")
    for ex in entry["exercises"]:
        lines.append(f"exercise {ex['number']}: {ex['status']} in {ex.get('seconds', 0)} s: {ex['message']}")
    lines += [f"note: {n}" for n in entry["notes"]]
    if entry.get("kernel_log"):
        lines += ["--- the kernel's log (its last 20000 characters) ---", entry["kernel_log"]]
    return "\n".join(lines) + "\n"


def file_names(entries: list[dict]) -> list[str]:
    """A distinct file stem per submission, from its path below the submissions' common folder
    (``sub/a.ipynb`` and ``sub__a.ipynb`` get ``sub__a`` and ``sub__a-2``; case is ignored, for
    file systems that ignore it)."""
    names = [Path(e["submission"]).as_posix() for e in entries]
    try:  # name the files after the submissions' paths below their common folder
        common = os.path.commonpath([str(Path(n).parent) for n in names]) if names else ""
    except ValueError:  # absolute and relative paths mixed
        common = ""
    used: set[str] = set()
    stems = []
    for name in names:
        relative = os.path.relpath(name, common) if common else name
        stem = relative.replace("\\", "/").strip("/").replace("/", "__").removesuffix(".ipynb")
        stem = "".join(ch if ch.isalnum() or ch in "._-=+@ ," else "_" for ch in stem).lstrip(".") or "submission"
        candidate, k = stem, 1
        while candidate.casefold() in used:
            k += 1
            candidate = f"{stem}-{k}"
        used.add(candidate.casefold())
        stems.append(candidate)
    return stems


@contextlib.contextmanager
def _create(path: Path, newline: str | None = None):
    """Write ``path`` as text: into a new temporary file next to it, renamed over it once complete
    (the previous file survives a crash; a link at ``path`` is replaced, never written through)."""
    import tempfile

    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        os.fchmod(fd, 0o644)
        with open(fd, "w", encoding="utf-8", newline=newline, errors="backslashreplace") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_outputs(out: Path, feedback: Path, entries: list[dict], chapters, sandbox: Sandbox, limits: Limits,
                  points: dict[str, float], options: "Options") -> None:
    write_csv(out, entries, chapters)
    import companion

    stable = [{**{k: v for k, v in e.items() if k not in TIMINGS}, "exercises": [dict(ex) for ex in e["exercises"]]}
              for e in entries]  # copies: the logs keep each exercise's seconds
    for e in stable:
        for ex in e["exercises"]:
            ex.pop("seconds", None)
    document = {
        "companion": companion.__version__,
        "sandbox": sandbox.describe(),
        "limits_seconds": {k: v for k, v in asdict(limits).items() if k != "restarts"},
        "statuses": ["passed", "not yet", "not attempted", "error", "timed out"],
        "points": points,
        "submissions": stable,
    }
    with _create(feedback) as f:
        f.write(json.dumps(document, indent=1, ensure_ascii=False, allow_nan=False) + "\n")
    stems = file_names(entries)
    if options.feedback_dir is not None:
        for entry, stem in zip(stable, stems):
            with _create(options.feedback_dir / f"{stem}.md") as f:
                f.write(feedback_text(entry))
    if options.log_dir is not None:
        for entry, stem in zip(entries, stems):
            with _create(options.log_dir / f"{stem}.log") as f:
                f.write(log_text(entry))
    if options.students_csv is not None:
        write_students_csv(options.students_csv, entries, chapters)
    if options.gradescope is not None:
        graded = [e for e in stable]
        with _create(options.gradescope) as f:
            if len(graded) == 1:
                f.write(json.dumps(gradescope_results(graded[0]), indent=1, ensure_ascii=False, allow_nan=False) + "\n")
            else:
                f.write(json.dumps({"score": 0, "output": f"Submit exactly one notebook; found {len(graded)} files: "
                                    + ", ".join(e["submission"] for e in graded), "tests": []}, indent=1) + "\n")


# ------------------------------------------------------------------------------------ API
@dataclass
class Options:
    out: Path = Path("gradebook.csv")
    feedback: Path | None = None
    feedback_dir: Path | None = None
    points: Path | None = None
    chapter: int | str | None = None
    jobs: int = 0  # 0: the number of CPUs
    limits: Limits = field(default_factory=Limits)
    sandbox: bool = True
    memory_gib: float | None = 8.0
    progress: bool = True
    log_dir: Path | None = None  # one log per submission (default: the gradebook's name + "-logs")
    students_csv: Path | None = None  # one row per student, for a learning platform
    gradescope: Path | None = None  # Gradescope's results.json (for exactly one submission)


def _chapter_argument(text: str) -> int | str:
    """``--chapter``: a number, or the appendix's letter."""
    if text.strip().upper() == registry.APPENDIX:
        return registry.APPENDIX
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a chapter number or {registry.APPENDIX} (got {text!r})") from None


def grade(paths: list[str], options: Options | None = None, chapters: dict[int | str, registry.Chapter] | None = None) -> list[dict]:
    """Grade ``paths`` (files or folders), write the gradebook and return its entries."""
    options = options or Options()
    chapters = chapters if chapters is not None else registry.load()
    points = load_points(options.points, chapters)
    sandbox = Sandbox.detect(options.sandbox, options.memory_gib)
    if sandbox.warning():
        print(sandbox.warning(), file=sys.stderr)
    subs = []
    for p, n, problem, student in collect(paths):
        try:
            sub = Submission(p, n, problem=problem) if problem else inspect(p, n, chapters, options.chapter)
        except Exception as exc:  # noqa: BLE001 - one bad file never stops the others
            sub = Submission(p, n, problem=f"could not be graded: {type(exc).__name__}: {str(exc)[:200]}")
        except RecursionError:
            sub = Submission(p, n, problem="could not be graded: nested too deeply")
        sub.student = student
        subs.append(sub)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, min(options.jobs or cpus, len(subs) or 1))
    progress = None
    if options.progress:
        from tqdm import tqdm

        progress = tqdm(total=len(subs), desc="grading", unit="notebook", file=sys.stderr, dynamic_ncols=True)
    try:
        for sub in subs:
            if sub.warning:
                _say(f"{sub.name}: {sub.warning}", progress)
            if sub.problem:
                _say(f"{sub.name}: {sub.problem}", progress)
                if progress is not None:
                    progress.update(1)
        reserved = sandbox.reserve(jobs)
        previous = _on_sigterm()
        try:
            run_all(subs, options.limits, reserved, jobs, progress)
        finally:
            release(reserved)
            _restore_sigterm(previous)
    finally:
        if progress is not None:
            progress.close()
    entries = records(subs, points)
    feedback = options.feedback or options.out.with_suffix(".json")
    if options.log_dir is None:
        options.log_dir = options.out.with_name(options.out.stem + "-logs")
    write_outputs(options.out, feedback, entries, chapters, sandbox, options.limits, points, options)
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion.grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="*", help="notebooks, or folders searched for files (recursively)")
    parser.add_argument("--out", type=Path, default=Path("gradebook.csv"), help="the CSV gradebook (default: gradebook.csv)")
    parser.add_argument("--feedback", type=Path, help="the JSON file of every result and hint (default: the CSV's name with .json)")
    parser.add_argument("--feedback-dir", type=Path, help="also write one Markdown feedback file per submission here")
    parser.add_argument("--points", type=Path, help="points per exercise, a TOML or JSON file (default: 1 each)")
    parser.add_argument("--chapter", type=_chapter_argument,
                        help="grade every notebook as this chapter: a number, or A for the appendix (default: recognize each)")
    parser.add_argument("--jobs", type=int, default=0, help="notebooks graded at once (default: the number of CPUs)")
    parser.add_argument("--timeout", type=float, default=600, help="CPU seconds for all of a notebook's cells (default: 600)")
    parser.add_argument("--cell-timeout", type=float, default=300, help="CPU seconds for one cell (default: 300)")
    parser.add_argument("--call-timeout", type=float, default=30, help="CPU seconds for one call of a student's function (default: 30)")
    parser.add_argument("--exercise-timeout", type=float, default=120, help="CPU seconds for one exercise's check, the kernel's and the checker's (default: 120)")
    parser.add_argument("--wall-factor", type=float, default=4.0,
                        help="the time limits are CPU time of the kernel; this many times a limit (+30 s) of wall-clock "
                             "time stops a kernel that hangs (default: 4)")
    parser.add_argument("--memory", type=float, default=8.0, help="GiB of memory per kernel (default: 8; 0: no limit)")
    parser.add_argument("--no-sandbox", action="store_true", help="grade without the bubblewrap sandbox (see the warning it prints)")
    parser.add_argument("--log-dir", type=Path, help="one log per submission here (default: the gradebook's name + -logs)")
    parser.add_argument("--students-csv", type=Path, help="also write one row per student (for a learning platform)")
    parser.add_argument("--gradescope", type=Path, help="also write Gradescope's results.json (one submission)")
    parser.add_argument("--gradescope-bundle", type=Path, help="write a Gradescope autograder bundle (.zip) and exit")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if args.gradescope_bundle:
        from companion.grading.gradescope import write_bundle

        write_bundle(args.gradescope_bundle)
        print(f"wrote {args.gradescope_bundle}: upload it as the autograder of a Gradescope programming assignment",
              file=sys.stderr)
        return 0
    if not args.submissions:
        parser.error("name the notebooks or folders to grade")
    for name in ("timeout", "cell_timeout", "call_timeout", "exercise_timeout"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be a positive number of seconds, got {getattr(args, name)}")
    if args.jobs < 0:
        parser.error(f"--jobs must be >= 0, got {args.jobs}")
    limits = Limits(notebook=args.timeout, cell=min(args.cell_timeout, args.timeout), call=args.call_timeout,
                    exercise=max(args.exercise_timeout, args.call_timeout), wall_factor=max(args.wall_factor, 1.0))
    options = Options(out=args.out, feedback=args.feedback, feedback_dir=args.feedback_dir, points=args.points,
                      chapter=args.chapter, jobs=args.jobs, limits=limits, sandbox=not args.no_sandbox,
                      memory_gib=args.memory or None, progress=not args.quiet, log_dir=args.log_dir,
                      students_csv=args.students_csv, gradescope=args.gradescope)
    start = time.monotonic()
    try:
        entries = grade(args.submissions, options)
    except (PointsError, registry.RegistryError, SandboxRefused) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    graded = [e for e in entries if not e["problem"]]
    trouble = len(entries) - len(graded)
    feedback = options.feedback or options.out.with_suffix(".json")
    print(f"graded {len(graded)} notebook{'s' * (len(graded) != 1)} in {time.monotonic() - start:.0f} s"
          + (f"; {trouble} file{'s' * (trouble != 1)} could not be graded (see the problem column)" if trouble else "")
          + f"\n  gradebook: {options.out}\n  results and hints: {feedback}"
          + (f"\n  feedback per student: {options.feedback_dir}/" if options.feedback_dir else ""), file=sys.stderr)
    return 1 if trouble else 0


if __name__ == "__main__":
    sys.exit(main())
