"""How long does grading a class take? Grades N varied submissions of one chapter.

    .venv/bin/python benchmarks/bench_grading.py                     # 20 notebooks of chapter 2, 2 jobs
    .venv/bin/python benchmarks/bench_grading.py --chapter 6 --n 10  # a heavier chapter
    .venv/bin/python benchmarks/bench_grading.py --jobs 4 --json bench.json

The submissions are made from the book's notebook of the chapter: for each exercise, at random
(seeded), the book's answer, the untouched stub, a wrong answer (returns 0) or one that raises;
one in five also has its check cells deleted. They are graded with ``companion.grade.grade``
exactly as ``python -m companion.grade`` does (default limits), twice in the same run: in the
bubblewrap sandbox and without it (``--no-sandbox``; ``--only-sandbox`` skips that), so that the
sandbox's cost is measured under the same load. For each, the script prints the wall-clock time
of the whole run and a per-notebook breakdown:

* ``kernel start``: starting the sandboxed kernel;
* ``notebook``: running the student's cells;
* ``checks``: the grader's checks (calls into the kernel included);
* ``overhead``: the rest of the time from the worker's start to its result: forking the worker
  process, stopping the kernel, removing its folder.

Measure on an idle machine: on a busy one every figure grows with the load (the load averages
at the start and the end are printed with the results).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from companion import student  # noqa: E402
from companion.grade import Options, grade  # noqa: E402
from companion.grading import registry  # noqa: E402


def submissions(chapter: registry.Chapter, n: int, folder: Path, seed: int = 0) -> list[Path]:
    """``n`` varied student notebooks of ``chapter`` written into ``folder``."""
    rng = random.Random(seed)
    book = nbformat.read(ROOT / "book" / chapter.notebook, as_version=4)
    solutions = [i for i, c in enumerate(book.cells) if student.is_solution(c)]
    checks = set(student.check_cells(book))
    paths = []
    for k in range(n):
        nb = student.student_version(book, chapter.notebook)
        for index, ex in zip(solutions, chapter.exercises):
            kind = rng.choice(["right", "right", "stub", "wrong", "raises"])
            if kind == "right":
                nb.cells[index].source = book.cells[index].source
            elif kind == "wrong":
                nb.cells[index].source = "\n\n".join(f"def {name}(*args, **kwargs):\n    return 0" for name in ex.names)
            elif kind == "raises":
                nb.cells[index].source = "\n\n".join(
                    f"def {name}(*args, **kwargs):\n    raise ValueError('not finished')" for name in ex.names)
        if k % 5 == 4:
            nb.cells = [c for i, c in enumerate(nb.cells) if i not in checks]
        nb.cells.append(new_code_cell(f"# submission {k}"))
        path = folder / f"student_{k:02d}_{chapter.notebook}"
        nbformat.write(nb, path)
        paths.append(path)
    return paths


def run(chapter: registry.Chapter, chapters: dict, n: int, jobs: int, sandbox: bool) -> dict:
    """Grade ``n`` submissions; the figures of the run."""
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-grading-") as tmp:
        folder = Path(tmp) / "submissions"
        folder.mkdir()
        submissions(chapter, n, folder)
        options = Options(out=Path(tmp) / "gradebook.csv", jobs=jobs, progress=True, sandbox=sandbox)
        start = time.perf_counter()
        entries = grade([str(folder)], options, chapters)
        wall = time.perf_counter() - start
    load_after = os.getloadavg()
    graded = [e for e in entries if not e["problem"]]
    rows = [{"submission": Path(e["submission"]).name, "seconds": e["seconds"], "kernel start": e["seconds_start"],
             "notebook": e["seconds_notebook"], "checks": e["seconds_checks"],
             "overhead": round(e["seconds"] - e["seconds_start"] - e["seconds_notebook"] - e["seconds_checks"], 2),
             "total": e["total"], "out_of": e["out_of"]} for e in graded]
    return {"sandbox": sandbox, "wall_seconds": round(wall, 2), "per_notebook": round(wall / max(len(entries), 1), 2),
            "graded": len(graded), "n": len(entries), "load_before": load_before, "load_after": load_after,
            "problems": [f"{e['submission']}: {e['problem']}" for e in entries if e["problem"]], "notebooks": rows,
            "points": {r["submission"]: r["total"] for r in rows}}


def report(chapter: registry.Chapter, jobs: int, r: dict) -> None:
    label = "in the bubblewrap sandbox" if r["sandbox"] else "without the sandbox (--no-sandbox)"
    print(f"\nchapter {chapter.chapter} ({chapter.title}), {label}: {r['graded']} of {r['n']} notebooks graded, "
          f"{jobs} at a time, on {os.cpu_count()} CPUs")
    print(f"wall clock: {r['wall_seconds']:.1f} s ({r['per_notebook']:.2f} s per notebook)")
    print(f"load average before {r['load_before'][0]:.1f}, after {r['load_after'][0]:.1f} "
          f"(an idle machine reads about 0; each unit of load slows the figures)")
    print("per notebook (seconds)   median    mean     max")
    for key in ("seconds", "kernel start", "notebook", "checks", "overhead"):
        values = [row[key] for row in r["notebooks"]]
        if values:
            name = {"seconds": "total in its worker"}.get(key, key)
            print(f"  {name:<22}{statistics.median(values):8.2f}{statistics.mean(values):8.2f}{max(values):8.2f}")
    for problem in r["problems"]:
        print(f"  PROBLEM {problem}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chapter", type=int, default=2, help="the chapter (default: 2)")
    parser.add_argument("--n", type=int, default=20, help="number of submissions (default: 20)")
    parser.add_argument("--jobs", type=int, default=2, help="notebooks graded at once (default: 2)")
    parser.add_argument("--only-sandbox", action="store_true", help="do not also grade without the sandbox")
    parser.add_argument("--json", type=Path, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    chapters = registry.load()
    chapter = chapters[args.chapter]
    results = [run(chapter, chapters, args.n, args.jobs, sandbox=True)]
    if not args.only_sandbox:
        from companion.grading.sandbox import SandboxRefused

        try:
            results.append(run(chapter, chapters, args.n, args.jobs, sandbox=False))
        except SandboxRefused as exc:  # as root, where no unprivileged user could run this Python
            print(f"\nwithout the sandbox: not measured ({exc})")
    for r in results:
        report(chapter, args.jobs, r)
    if len(results) == 2:
        with_, without = results
        print(f"\nthe sandbox costs {with_['per_notebook'] - without['per_notebook']:+.2f} s per notebook "
              f"({with_['per_notebook']:.2f} against {without['per_notebook']:.2f}); same points: "
              f"{with_['points'] == without['points']}")
    if args.json:
        args.json.write_text(json.dumps({"chapter": chapter.chapter, "jobs": args.jobs, "cpus": os.cpu_count(),
                                         "runs": results}, indent=1) + "\n")
    return 1 if any(r["problems"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
