"""Write the student version of the chapters: the same notebooks without their solutions.

    python -m companion.student                 # every chapter in book/ -> student/
    python -m companion.student 2 07            # chapters 2 and 7 (numbers, names or paths)
    python -m companion.student --out handout 3 # another output folder
    python -m companion.student --times         # write the measured run times into book/instructors.md

A student notebook is the book's notebook with exactly two changes:

* every code cell tagged ``solution`` has its source replaced by the stub stored in its cell
  metadata (``metadata.course.stub``);
* every output is cleared (outputs, execution counts and the execution timestamps).

Everything else (markdown, the other code cells, tags, the check cells) stays as it is, so the
check cells report "not attempted yet" until the student writes an answer. The notebooks import the
installed ``companion`` package (``bash scripts/setup.sh``), and chapters 7 and 8 also read the
shipped model at ``../checkpoints/``: keep the student folder beside ``book/`` in a clone of the
repository (the default, ``student/``, is).
"""
from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
SOLUTION_TAG = "solution"
#: Where the tests record how long nbval took to run each notebook (see tests/conftest.py).
TIMINGS = ROOT / "_build" / "notebook_times.json"
INSTRUCTORS = BOOK / "instructors.md"
_TIMES_START, _TIMES_END = "<!-- measured-times:start -->", "<!-- measured-times:end -->"


def chapters(book: Path = BOOK) -> list[Path]:
    """Every chapter notebook of the book, in reading order (``book/NN_name.ipynb``)."""
    return sorted(p for p in book.glob("[0-9]*.ipynb"))


def is_solution(cell) -> bool:
    """True for a code cell tagged ``solution``."""
    return cell.cell_type == "code" and SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])


def stub_of(cell) -> str | None:
    """The student's starting code stored with a solution cell, or None when there is none."""
    course = cell.get("metadata", {}).get("course", {})
    stub = course.get("stub") if isinstance(course, dict) else None
    return stub if isinstance(stub, str) else None


def check_cells(nb) -> list[int]:
    """Indices of the exercise check cells: the first code cell after each run of solution cells."""
    found: list[int] = []
    after_solution = False
    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            after_solution = True
        elif cell.cell_type == "code" and after_solution:
            found.append(i)
            after_solution = False
    return found


def problems(nb, name: str = "notebook") -> list[str]:
    """What keeps a notebook from giving a sound student version (empty when it is fine)."""
    found = []
    for i, cell in enumerate(nb.cells):
        if not is_solution(cell):
            continue
        stub = stub_of(cell)
        if stub is None:
            found.append(f"{name}, cell {i}: solution cell without a stub (cell metadata course.stub)")
        elif _normalized(stub) == _normalized(cell.source):
            found.append(f"{name}, cell {i}: the stub is the same as the solution")
        elif not stub.strip():
            found.append(f"{name}, cell {i}: the stub is empty; give the names the check cell needs")
    if any(is_solution(c) for c in nb.cells) and len(check_cells(nb)) == 0:
        found.append(f"{name}: solution cells but no check cell after them")
    return found


def _normalized(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines())


def student_version(nb, name: str = "notebook"):
    """A copy of ``nb`` with each solution replaced by its stub and every output cleared.

    Raises ValueError when a solution cell has no stub or a stub that equals its solution.
    """
    trouble = problems(nb, name)
    if trouble:
        raise ValueError("cannot write a student version:\n  " + "\n  ".join(trouble))
    out = copy.deepcopy(nb)
    for cell in out.cells:
        if cell.cell_type != "code":
            continue
        if is_solution(cell):
            cell.source = stub_of(cell).rstrip("\n")
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    return out


def resolve(names: list[str], book: Path = BOOK) -> list[Path]:
    """Chapter notebooks named by number (``2``, ``02``), name (``02_attention``) or path."""
    every = chapters(book)
    if not names:
        return every
    picked = []
    for name in names:
        path = Path(name)
        if path.suffix == ".ipynb" and path.is_file():
            picked.append(path.resolve())
            continue
        stem = path.stem if path.suffix else name
        match = [p for p in every if p.stem == stem or (stem.isdigit() and p.stem.split("_")[0] == f"{int(stem):02d}")]
        if not match:
            known = ", ".join(p.stem for p in every) or "none"
            raise ValueError(f"no chapter notebook matches {name!r} (chapters in {book}: {known})")
        picked.extend(match)
    return list(dict.fromkeys(picked))


def write(paths: list[Path], out: Path) -> list[Path]:
    """Write the student version of each notebook into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        target = out / path.name
        nbformat.write(student_version(nb, path.name), target)
        written.append(target)
    return written


# --- measured times for the instructors' page --------------------------------------------------

WORDS_PER_MINUTE = 150  # technical prose with code and formulas reads slower than a novel
MINUTES_PER_EXERCISE = 15


def chapter_facts(path: Path) -> dict:
    """Words, exercises and code cells of one chapter notebook (for the instructors' page)."""
    nb = nbformat.read(path, as_version=4)
    words = sum(len(re.findall(r"\w+", c.source)) for c in nb.cells if c.cell_type == "markdown")
    code_lines = sum(len(c.source.splitlines()) for c in nb.cells if c.cell_type == "code" and not is_solution(c))
    exercises = sum(len(re.findall(r"```\{exercise\}", c.source)) for c in nb.cells if c.cell_type == "markdown")
    return {"words": words, "code_lines": code_lines, "exercises": exercises}


def times_table(timings: dict, book: Path = BOOK) -> str:
    """The Markdown table of per-chapter times written into the instructors' page."""
    rows = [
        "| chapter | words | reading (min) | exercises | exercises (min) | run time, measured (s) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    notebooks = {p.stem: p for p in chapters(book)}
    dates: set[str] = set()
    pending = sorted(p.stem for p in book.glob("[0-9]*.md") if p.stem not in notebooks)
    for stem in sorted([*notebooks, *pending]):
        if stem not in notebooks:
            rows.append(f"| {{doc}}`{stem}` | not written yet | | | | |")
            continue
        path = notebooks[stem]
        facts = chapter_facts(path)
        # Code is read more slowly than prose: count a line of code as 3 words.
        reading = max(1, round((facts["words"] + 3 * facts["code_lines"]) / WORDS_PER_MINUTE))
        entry = timings.get(f"book/{path.name}")
        seconds = f"{entry['seconds']:.0f}" if entry else "not measured yet"
        if entry:
            dates.add(entry["measured"][:10])
        rows.append(
            f"| {{doc}}`{path.stem}` | {facts['words']} | {reading} | {facts['exercises']} "
            f"| {facts['exercises'] * MINUTES_PER_EXERCISE} | {seconds} |"
        )
    if dates:
        rows += ["", f"Run times measured on {', '.join(sorted(dates))}."]
    return "\n".join(rows)


def write_times(page: Path = INSTRUCTORS, timings_file: Path = TIMINGS) -> str:
    """Replace the table between the measured-times markers of the instructors' page."""
    timings = json.loads(timings_file.read_text()) if timings_file.is_file() else {}
    text = page.read_text()
    if _TIMES_START not in text or _TIMES_END not in text:
        raise ValueError(f"{page} has no {_TIMES_START} ... {_TIMES_END} markers to write the table between")
    head, rest = text.split(_TIMES_START, 1)
    _, tail = rest.split(_TIMES_END, 1)
    table = times_table(timings, page.parent)
    page.write_text(f"{head}{_TIMES_START}\n{table}\n{_TIMES_END}{tail}")
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m companion.student", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("chapters", nargs="*", help="chapter numbers, names or notebook paths (default: all)")
    parser.add_argument("--out", type=Path, default=ROOT / "student", help="output folder (default: student/)")
    parser.add_argument("--times", action="store_true", help=f"write the run times measured by the tests ({TIMINGS.relative_to(ROOT)}) into {INSTRUCTORS.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    try:
        if args.times:
            print(write_times())
            return 0
        paths = resolve(args.chapters)
        if not paths:
            parser.error(f"no chapter notebooks in {BOOK}")
        for target in write(paths, args.out):
            print(target)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
