"""Grade students' notebooks of any chapter into a gradebook.

    python -m companion.grade submissions/ --out gradebook.csv
    python -m companion.grade alice.ipynb bob.ipynb --points points.toml --feedback-dir feedback/

Each notebook runs in a fresh, sandboxed kernel (time limits, no network); then the grader's own
checkers, in the grader's own process, call the functions the student defined. What the notebook
printed, and anything it redefined (``check``, the checkers, the companion, torch), decides
nothing. Writes a CSV gradebook (one row per submission, one column of points per exercise, the
total) and a JSON file with every result and hint (``--feedback``; by default the CSV's name with
``.json``). Files that are not notebooks, corrupted notebooks and notebooks of no known chapter
are reported and listed in the gradebook with the reason; they never stop the others.

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
import json
import multiprocessing
import multiprocessing.connection
import os
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from companion.grading import registry
from companion.grading.session import Limits, Sandbox, release

NOTEBOOK_MAX_BYTES = 50 * 2**20


@dataclass
class Submission:
    """One file to grade, and what is known about it before it runs."""

    path: Path
    name: str  # as shown in the gradebook
    chapter: registry.Chapter | None = None
    identified_by: str = ""
    problem: str | None = None  # why it cannot be graded (not a notebook, corrupted, ...)
    result: dict | None = None
    seconds: float = 0.0


# ---------------------------------------------------------------------------- collecting
def collect(paths: list[str]) -> list[tuple[Path, str, str | None]]:
    """``(path, name, problem)`` for every file named or found (recursively) in a folder named."""
    found: list[tuple[Path, str, str | None]] = []
    for arg in paths:
        path = Path(arg)
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                parts = file.relative_to(path).parts
                if file.is_file() and not any(p.startswith(".") for p in parts) and "__MACOSX" not in parts:
                    found.append((file, str(Path(arg) / file.relative_to(path)), None))
        elif path.is_file():
            found.append((path, arg, None))
        else:
            found.append((path, arg, "no such file or folder"))
    seen: set[Path] = set()
    unique = []
    for path, name, problem in found:
        key = path.resolve()
        if key not in seen:
            seen.add(key)
            unique.append((path, name, problem))
    return unique


def inspect(path: Path, name: str, chapters: dict[int, registry.Chapter], chapter: int | None = None) -> Submission:
    """Read a file enough to know whether it can be graded, and as which chapter."""
    import nbformat

    sub = Submission(path, name)
    try:
        size = path.stat().st_size
        if size > NOTEBOOK_MAX_BYTES:
            sub.problem = f"too large for a notebook ({size / 2**20:.0f} MB)"
            return sub
        raw = path.read_bytes()
    except OSError as exc:
        sub.problem = f"cannot be read ({exc.strerror})"
        return sub
    is_ipynb = path.suffix.lower() == ".ipynb"
    try:
        data = json.loads(raw.decode("utf-8"))
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


# --------------------------------------------------------------------------------- points
class PointsError(ValueError):
    pass


def load_points(path: Path | None, chapters: dict[int, registry.Chapter]) -> dict[str, float]:
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
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
            raise PointsError(f"{where} in {path} must be a number >= 0, got {value!r}")
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
def _context(chapters: dict[int, registry.Chapter]):
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
    while queue or running:
        while queue and free:
            sub, slot = queue.pop(0), free.pop(0)
            receive, send = ctx.Pipe(duplex=False)
            process = ctx.Process(target=runner.work, args=(send, str(sub.path), asdict(sub.chapter), limits, sandbox, slot), daemon=True)
            with _without_main_module():
                process.start()
            send.close()
            running[receive] = (sub, process, slot, time.monotonic())
        ready = multiprocessing.connection.wait(list(running), timeout=1.0)
        now = time.monotonic()
        for receive in list(running):
            sub, process, slot, started = running[receive]
            hard_limit = limits.notebook * (limits.restarts + 2) + limits.exercise * len(sub.chapter.exercises) + 120  # type: ignore[union-attr]
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


def _say(message: str, progress: Any = None) -> None:
    if progress is not None:
        progress.write(message, file=sys.stderr)
    else:
        print(message, file=sys.stderr)


# --------------------------------------------------------------------------------- output
def records(subs: list[Submission], points: dict[str, float]) -> list[dict]:
    """Every submission's results, points included, as plain data (the JSON file's entries)."""
    out = []
    for sub in subs:
        entry: dict[str, Any] = {"submission": sub.name, "chapter": None, "title": None, "identified_by": None,
                                 "problem": sub.problem, "total": None, "out_of": None, "exercises": [], "notes": [],
                                 "seconds": sub.seconds}
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
                         kernel_restarts=sub.result["restarts"])
        out.append(entry)
    return out


def _number(x: float | None) -> str:
    if x is None:
        return ""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def write_csv(path: Path, entries: list[dict], chapters: dict[int, registry.Chapter]) -> None:
    """One row per submission; one column of points per exercise of the chapters present."""
    present = sorted({e["chapter"] for e in entries if e["chapter"] is not None})
    columns = [ex.number for c in present for ex in chapters[c].exercises]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "chapter", *columns, "total", "out_of", "problem"])
        for e in entries:
            earned = {ex["number"]: ex["points"] for ex in e["exercises"]}
            writer.writerow([e["submission"], e["chapter"] if e["chapter"] is not None else "",
                             *(_number(earned.get(n)) for n in columns), _number(e["total"]), _number(e["out_of"]),
                             e["problem"] or ""])


def feedback_text(entry: dict) -> str:
    """The Markdown feedback for one student: their points and every hint."""
    lines = [f"# Feedback on {entry['submission']}", ""]
    if entry["problem"]:
        return "\n".join(lines + [f"This file could not be graded: {entry['problem']}.", ""])
    lines += [f"Chapter {entry['chapter']}, *{entry['title']}*: **{_number(entry['total'])} of "
              f"{_number(entry['out_of'])} points**.", ""]
    for ex in entry["exercises"]:
        lines.append(f"- **Exercise {ex['number']}, {ex['title']}** ({_number(ex['points'])}/{_number(ex['out_of'])}, "
                     f"{ex['status']}): {ex['message']}")
    notes = [n for n in entry["notes"] if not n.startswith("Traceback")]
    if notes:
        lines += ["", "While your notebook ran:", *(f"- {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, feedback: Path, feedback_dir: Path | None, entries: list[dict], chapters, sandbox: Sandbox,
                  limits: Limits, points: dict[str, float]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    write_csv(out, entries, chapters)
    import companion

    document = {
        "graded": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "companion": companion.__version__,
        "sandbox": sandbox.describe(),
        "limits_seconds": {k: v for k, v in asdict(limits).items() if k != "restarts"},
        "statuses": ["passed", "not yet", "not attempted", "error", "timed out"],
        "points": points,
        "submissions": entries,
    }
    feedback.parent.mkdir(parents=True, exist_ok=True)
    feedback.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    if feedback_dir is not None:
        feedback_dir.mkdir(parents=True, exist_ok=True)
        names = [Path(e["submission"]).as_posix() for e in entries]
        try:  # name the files after the submissions' paths below their common folder
            common = os.path.commonpath([str(Path(n).parent) for n in names]) if names else ""
        except ValueError:  # absolute and relative paths mixed
            common = ""
        for entry, name in zip(entries, names):
            relative = os.path.relpath(name, common) if common else name
            stem = relative.replace("\\", "/").strip("/").replace("/", "__").removesuffix(".ipynb")
            (feedback_dir / f"{stem}.md").write_text(feedback_text(entry), encoding="utf-8")


# ------------------------------------------------------------------------------------ API
@dataclass
class Options:
    out: Path = Path("gradebook.csv")
    feedback: Path | None = None
    feedback_dir: Path | None = None
    points: Path | None = None
    chapter: int | None = None
    jobs: int = 0  # 0: the number of CPUs
    limits: Limits = field(default_factory=Limits)
    sandbox: bool = True
    memory_gib: float | None = 8.0
    progress: bool = True


def grade(paths: list[str], options: Options | None = None, chapters: dict[int, registry.Chapter] | None = None) -> list[dict]:
    """Grade ``paths`` (files or folders), write the gradebook and return its entries."""
    options = options or Options()
    chapters = chapters if chapters is not None else registry.load()
    points = load_points(options.points, chapters)
    sandbox = Sandbox.detect(options.sandbox, options.memory_gib)
    subs = [Submission(p, n, problem=problem) if problem else inspect(p, n, chapters, options.chapter)
            for p, n, problem in collect(paths)]
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    jobs = max(1, min(options.jobs or cpus, len(subs) or 1))
    progress = None
    if options.progress:
        from tqdm import tqdm

        progress = tqdm(total=len(subs), desc="grading", unit="notebook", file=sys.stderr, dynamic_ncols=True)
    try:
        for sub in subs:
            if sub.problem:
                _say(f"{sub.name}: {sub.problem}", progress)
                if progress is not None:
                    progress.update(1)
        reserved = sandbox.reserve(jobs)
        try:
            run_all(subs, options.limits, reserved, jobs, progress)
        finally:
            release(reserved)
    finally:
        if progress is not None:
            progress.close()
    entries = records(subs, points)
    feedback = options.feedback or options.out.with_suffix(".json")
    write_outputs(options.out, feedback, options.feedback_dir, entries, chapters, sandbox, options.limits, points)
    return entries


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion.grade", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("submissions", nargs="+", help="notebooks, or folders searched for files (recursively)")
    parser.add_argument("--out", type=Path, default=Path("gradebook.csv"), help="the CSV gradebook (default: gradebook.csv)")
    parser.add_argument("--feedback", type=Path, help="the JSON file of every result and hint (default: the CSV's name with .json)")
    parser.add_argument("--feedback-dir", type=Path, help="also write one Markdown feedback file per submission here")
    parser.add_argument("--points", type=Path, help="points per exercise, a TOML or JSON file (default: 1 each)")
    parser.add_argument("--chapter", type=int, help="grade every notebook as this chapter (default: recognize each)")
    parser.add_argument("--jobs", type=int, default=0, help="notebooks graded at once (default: the number of CPUs)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds for all of a notebook's cells (default: 600)")
    parser.add_argument("--cell-timeout", type=float, default=300, help="seconds for one cell (default: 300)")
    parser.add_argument("--call-timeout", type=float, default=30, help="seconds for one call of a student's function (default: 30)")
    parser.add_argument("--exercise-timeout", type=float, default=120, help="seconds for all calls of one exercise's check (default: 120)")
    parser.add_argument("--memory", type=float, default=8.0, help="GiB of memory per kernel (default: 8; 0: no limit)")
    parser.add_argument("--no-sandbox", action="store_true", help="do not use a network namespace or separate users (sockets are still refused)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    for name in ("timeout", "cell_timeout", "call_timeout", "exercise_timeout"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be a positive number of seconds, got {getattr(args, name)}")
    if args.jobs < 0:
        parser.error(f"--jobs must be >= 0, got {args.jobs}")
    limits = Limits(notebook=args.timeout, cell=min(args.cell_timeout, args.timeout), call=args.call_timeout,
                    exercise=max(args.exercise_timeout, args.call_timeout))
    options = Options(out=args.out, feedback=args.feedback, feedback_dir=args.feedback_dir, points=args.points,
                      chapter=args.chapter, jobs=args.jobs, limits=limits, sandbox=not args.no_sandbox,
                      memory_gib=args.memory or None, progress=not args.quiet)
    start = time.monotonic()
    try:
        entries = grade(args.submissions, options)
    except (PointsError, registry.RegistryError) as exc:
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
