"""The exercises of every chapter, read from the book's notebooks once, for the grader.

The grader never trusts a submission's check cells (a student may delete or edit them): it grades
the exercises listed in ``companion/exercises/registry.json``, which this module generates from
the notebooks in ``book/``::

    python -m companion.grading.registry            # (re)write the registry from book/
    python -m companion.grading.registry --check    # exit 1 if it is out of date
    python -m companion.grading.registry --stamp    # also write metadata.course.chapter into book/

For each chapter the registry holds its number, notebook, title and checker module, and for each
exercise its number and title (from the ``{exercise}`` directive), the checker function and the
names the student defines (from the check cell ``check.<checker>(<names>)``). It is checked
against the checkers themselves: the k-th exercise of chapter C must be ``@checker("Exercise C.k")``.
A chapter is a number (``book/07_name.ipynb`` is chapter 7) or, for the appendix
(``book/appendix_name.ipynb``), the letter ``"A"``: its exercises are A.1, A.2, ...
A new chapter needs nothing more than its notebook in ``book/`` and a regeneration; a test fails
while the committed registry differs from what the book gives.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "book"
REGISTRY = Path(__file__).resolve().parents[1] / "exercises" / "registry.json"
_EXERCISE = re.compile(r"`{3,}\{exercise\}[ \t]*(?P<title>[^\n]*)\n(?P<options>(?:[ \t]*:[^\n]*\n)*)")
_LABEL = re.compile(r":label:[ \t]*(\S+)")
_TITLE = re.compile(r"^#[ \t]+(.+?)[ \t]*$", re.MULTILINE)


@dataclass
class Exercise:
    number: str  # "2.1"
    title: str  # "A stable softmax"
    label: str  # "ex-attn-softmax"
    checker: str  # the function in the chapter's checker module: "stable_softmax"
    names: list[str]  # what the student defines and the checker receives: ["my_softmax"]
    call: str  # the book's check call: "check.stable_softmax(my_softmax)"
    module: str = ""  # the checker's module when it is not the chapter's (an exercise added later)

    @property
    def exercise(self) -> str:
        return f"Exercise {self.number}"


#: The chapter "number" of the appendix (``book/appendix_name.ipynb``).
APPENDIX = "A"


def order(chapter: int | str) -> tuple:
    """Sort key of chapter numbers: 1, 2, ..., then the appendix ("A")."""
    return (1, str(chapter)) if isinstance(chapter, str) else (0, chapter)


@dataclass
class Chapter:
    chapter: int | str  # 7, or "A" for the appendix
    notebook: str  # "02_attention.ipynb"
    title: str  # "Attention"
    module: str  # "companion.exercises.attention"
    exercises: list[Exercise] = field(default_factory=list)

    def checker(self, exercise: Exercise):
        """The grader's own checker function for ``exercise``."""
        return getattr(importlib.import_module(exercise.module or self.module), exercise.checker)


class RegistryError(ValueError):
    """The book's notebooks do not give a consistent registry (the message lists why)."""


def _code_cells(nb: Any) -> list:
    return [c for c in nb.cells if c.cell_type == "code"]


def checker_aliases(nb: Any) -> dict[str, str]:
    """``{alias: module}`` for each ``from companion.exercises import X as alias`` in the notebook."""
    found: dict[str, str] = {}
    for cell in _code_cells(nb):
        try:
            tree = ast.parse(_python_only(cell.source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module == "companion.exercises":
                for alias in node.names:
                    if alias.name != "*":
                        found[alias.asname or alias.name] = f"companion.exercises.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("companion.exercises.") and alias.asname:
                        found[alias.asname] = alias.name
    return found


def _python_only(source: str) -> str:
    """The cell without IPython's magics and shell escapes (so that ``ast`` can read it)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def check_calls(source: str, aliases: dict[str, str]) -> list[tuple[str, str, list[str], str]]:
    """``(module, checker, names, call source)`` for each ``alias.checker(name, ...)`` in a cell."""
    try:
        tree = ast.parse(_python_only(source))
    except SyntaxError:
        return []
    calls = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id in aliases):
            names = [a.id for a in node.args if isinstance(a, ast.Name)]
            if len(names) == len(node.args) and not node.keywords:
                calls.append(((node.lineno, node.col_offset), aliases[node.func.value.id], node.func.attr, names, ast.unparse(node)))
    return [c[1:] for c in sorted(calls)]


def title_of(nb: Any) -> str | None:
    """The text of the notebook's first ``# Heading`` (the chapter's title)."""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            match = _TITLE.search(cell.source)
            if match:
                return match.group(1).strip()
    return None


def file_chapter(path: Path) -> int | str:
    """The chapter its file name gives a book notebook: ``07_name`` -> 7, ``appendix_name`` -> "A"."""
    from companion import student

    number = student.chapter_label(Path(path).stem)
    if number is None:
        raise ValueError(f"{Path(path).name} is not a chapter notebook (NN_name.ipynb or appendix_name.ipynb)")
    return number


def is_chapter_key(value: Any) -> bool:
    """True for a chapter number (an int, not a bool) or the appendix's letter."""
    return (isinstance(value, int) and not isinstance(value, bool)) or value == APPENDIX


def chapter_number(path: Path, nb: Any) -> int | str:
    """The chapter of a book notebook: ``metadata.course.chapter``, else what its file name says."""
    course = nb.metadata.get("course", {})
    if isinstance(course, dict) and is_chapter_key(course.get("chapter")):
        return course["chapter"]
    return file_chapter(path)


def stamp(book: Path = BOOK) -> list[Path]:
    """Write ``metadata.course.chapter`` (the number in the file name) into each book notebook
    that lacks it, so that student versions and submissions carry their chapter."""
    import nbformat

    from companion import student

    changed = []
    for path in student.chapters(book):
        nb = nbformat.read(path, as_version=4)
        course = nb.metadata.setdefault("course", {})
        number = file_chapter(path)
        if course.get("chapter") != number:
            course["chapter"] = number
            nbformat.write(nb, path)
            changed.append(path)
    return changed


def chapter_of(path: Path) -> tuple[Chapter | None, list[str]]:
    """The registry entry of one book notebook, and the problems found (empty when sound)."""
    import nbformat

    from companion import student

    nb = nbformat.read(path, as_version=4)
    problems: list[str] = []
    number = chapter_number(path, nb)
    if student.is_chapter(path) and file_chapter(path) != number:
        problems.append(f"{path.name}: metadata.course.chapter is {number}, but the file name says {file_chapter(path)}")
    title = title_of(nb) or ""
    aliases = checker_aliases(nb)
    directives = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for match in _EXERCISE.finditer(cell.source + "\n"):
                label = _LABEL.search(match.group("options"))
                directives.append((match.group("title").strip(), label.group(1) if label else ""))
    calls = []
    for index in student.check_cells(nb):
        calls.extend(check_calls(nb.cells[index].source, aliases))
    if not directives and not calls:
        return None, []
    if len(directives) != len(calls):
        problems.append(f"{path.name}: {len(directives)} exercise directives but {len(calls)} check calls after solution cells")
    # the chapter's module is the one its first exercise uses; an exercise checked by another
    # module (exercises added to a chapter later) names its own
    chapter = Chapter(number, path.name, title, calls[0][0] if calls else "")
    for k, ((ex_title, label), (module, fn_name, names, call)) in enumerate(zip(directives, calls), start=1):
        expected = f"Exercise {number}.{k}"
        try:
            fn = getattr(importlib.import_module(module), fn_name)
            declared = getattr(fn, "exercise", None)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{path.name}: {call}: {exc}")
            declared = None
        if declared is not None and declared != expected:
            problems.append(f"{path.name}: the {k}. exercise is {expected}, but {module}.{fn_name} says {declared!r}")
        if not names:
            problems.append(f"{path.name}: {call} passes no name of the student's")
        own = "" if module == chapter.module else module
        chapter.exercises.append(Exercise(f"{number}.{k}", ex_title, label, fn_name, names, call, own))
    return chapter, problems


def build(book: Path = BOOK) -> dict:
    """The registry, as a JSON-able dict, from the notebooks of ``book``. Raises RegistryError."""
    from companion import student

    chapters, problems = [], []
    for path in student.chapters(book):
        chapter, trouble = chapter_of(path)
        problems += trouble
        if chapter is not None:
            chapters.append(chapter)
    numbers = [c.chapter for c in chapters]
    if len(set(numbers)) != len(numbers):
        problems.append(f"two notebooks claim the same chapter number: {numbers}")
    if problems:
        raise RegistryError("the book's exercises are inconsistent:\n  " + "\n  ".join(problems))
    return {
        "about": "Generated by `python -m companion.grading.registry` from book/*.ipynb; do not edit by hand.",
        "chapters": [_as_dict(c) for c in sorted(chapters, key=lambda c: order(c.chapter))],
    }


def _as_dict(chapter: Chapter) -> dict:
    """The chapter as JSON data; an exercise names its own module only when it has one."""
    data = asdict(chapter)
    for exercise in data["exercises"]:
        if not exercise["module"]:
            del exercise["module"]
    return data


def render(registry: dict) -> str:
    return json.dumps(registry, indent=1, ensure_ascii=False) + "\n"


def load(path: Path = REGISTRY) -> dict[int | str, Chapter]:
    """``{chapter number: Chapter}`` from the registry file."""
    data = json.loads(path.read_text(encoding="utf-8"))
    out = {}
    for entry in data["chapters"]:
        exercises = [Exercise(**e) for e in entry.pop("exercises")]
        out[entry["chapter"]] = Chapter(**entry, exercises=exercises)
    return out


# ----------------------------------------------------------------- which chapter is this?
class UnknownChapter(ValueError):
    """A notebook that is none of the registry's chapters."""


def _normal(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", " ", text.casefold()).strip()


def identify(nb: Any, filename: str, chapters: dict[int | str, Chapter]) -> tuple[Chapter, str]:
    """``(chapter, how it was recognized)``: by the notebook's metadata (``course.chapter``, set
    by the book), else its title, else the checker module it imports, else its file name."""
    course = nb.get("metadata", {}).get("course", {})
    claimed = course.get("chapter") if isinstance(course, dict) else None
    if is_chapter_key(claimed) and claimed in chapters:
        return chapters[claimed], "metadata"
    title = title_of(nb)
    if title:
        by_title = [c for c in chapters.values() if _normal(c.title) == _normal(title)]
        if len(by_title) == 1:
            return by_title[0], "title"
    modules = set(checker_aliases(nb).values())
    by_module = [c for c in chapters.values() if c.module in modules]
    if len(by_module) == 1:
        return by_module[0], "checker import"
    stem = _normal(Path(filename).stem)
    by_name = [c for c in chapters.values() if _normal(Path(c.notebook).stem) in stem]
    if len(by_name) == 1:
        return by_name[0], "file name"
    known = ", ".join(f"{c.chapter} ({c.title})" for c in chapters.values())
    seen = f"its title is {title!r}" if title else "it has no title"
    raise UnknownChapter(f"not a notebook of a known chapter ({seen}; chapters: {known})")


def identify_by_content(nb: Any, chapters: dict[int | str, Chapter]) -> Chapter | None:
    """The chapter the notebook's content says (its title, else the checker module it imports,
    else the exercises' names it defines), ignoring its metadata; None when the content is silent
    or ambiguous."""
    title = title_of(nb)
    if title:
        by_title = [c for c in chapters.values() if _normal(c.title) == _normal(title)]
        if len(by_title) == 1:
            return by_title[0]
    modules = set(checker_aliases(nb).values())
    by_module = [c for c in chapters.values() if c.module in modules]
    if len(by_module) == 1:
        return by_module[0]
    defined: set[str] = set()
    for cell in _code_cells(nb):
        try:
            tree = ast.parse(_python_only(cell.source))
        except (SyntaxError, ValueError):
            continue
        defined |= {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    scores = {c.chapter: sum(name in defined for ex in c.exercises for name in ex.names) for c in chapters.values()}
    best = max(scores.values(), default=0)
    winners = [n for n, score in scores.items() if score == best]
    return chapters[winners[0]] if best > 0 and len(winners) == 1 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m companion.grading.registry", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if the registry differs from what book/ gives")
    parser.add_argument("--book", type=Path, default=BOOK, help="the folder of chapter notebooks (default: book/)")
    parser.add_argument("--stamp", action="store_true",
                        help="first write metadata.course.chapter into every book notebook that lacks it")
    args = parser.parse_args(argv)
    if args.stamp:
        for path in stamp(args.book):
            print(f"stamped {path} with its chapter number")
    try:
        text = render(build(args.book))
    except RegistryError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    current = REGISTRY.read_text(encoding="utf-8") if REGISTRY.is_file() else ""
    if args.check:
        if current != text:
            print(f"{REGISTRY} is out of date: run python -m companion.grading.registry", file=sys.stderr)
            return 1
        print(f"{REGISTRY} is up to date")
        return 0
    REGISTRY.write_text(text, encoding="utf-8")
    print(f"wrote {REGISTRY} ({len(json.loads(text)['chapters'])} chapters)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
