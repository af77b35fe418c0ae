"""Write the student version of the chapters: the same notebooks without their solutions.

    python -m companion.student                 # every chapter in book/ -> student/
    python -m companion.student 2 07 A          # chapters 2 and 7, the appendix (numbers, names or paths)
    python -m companion.student --out handout 3 # another output folder
    python -m companion.student --times         # write the measured run times into book/instructors.md

A student notebook is the book's notebook with:

* every code cell tagged ``solution`` holding the stub stored in its cell metadata
  (``metadata.course.stub``) instead of the solution;
* every output cleared (outputs, execution counts and the execution timestamps);
* plain Markdown (CommonMark) instead of MyST, so that it reads right in Jupyter, JupyterLab,
  VS Code and Colab: each exercise is a heading "Exercise C.k — title" with its task, the
  hidden-solution markers are gone, figures show their image (a cell attachment) and caption,
  admonitions are block quotes, cross-references are links or text, citations are author-year
  text with a reference list at the end (see :func:`plain_markdown`). MyST syntax it does not know
  stops the build (:class:`UnknownSyntax`) instead of reaching a student as raw text.

Links to other chapters and pages are absolute addresses of the published book
(``companion.BOOK_URL``), so that a chapter downloaded alone still links to the others.

The code cells (imports, check cells, tags) stay as they are, so the check cells report "not
attempted yet" until the student writes an answer; only the install cell that opens each chapter
is written afresh from ``companion.REPOSITORY`` and ``companion.DISTRIBUTION``
(:func:`companion.notebook.install_cell_source`). The notebooks import the ``companion`` package;
with it installed (``pip install "transformers-built-by-hand @ git+<companion.REPOSITORY>"``) they
run from any folder, with no network: the Shakespeare text and the shipped models are package data.

An installed companion carries no chapter notebooks: there, ``--book`` names the ``book/`` folder
of a clone of the course, and without it the command says what it needs (:func:`needs_message`).
"""
from __future__ import annotations

import argparse
import base64
import copy
import json
import re
import sys
from pathlib import Path

try:
    import nbformat
except ImportError:  # an installed companion without the "student" extra: main() says what to install
    nbformat = None

ROOT = Path(__file__).resolve().parents[1]
#: The book's chapters in a checkout of the course (an installed companion has none: see main()).
BOOK = ROOT / "book"
SOLUTION_TAG = "solution"
#: Where the tests record how long nbval took to run each notebook (see tests/conftest.py).
TIMINGS = ROOT / "_build" / "notebook_times.json"
INSTRUCTORS = BOOK / "instructors.md"
_TIMES_START, _TIMES_END = "<!-- measured-times:start -->", "<!-- measured-times:end -->"


#: The file-name prefix of an appendix notebook (``book/appendix_name.ipynb``): chapter ``"A"``.
APPENDIX = "appendix_"


def chapter_label(stem: str) -> int | str | None:
    """The chapter a notebook's name gives: 7 for ``07_name``, ``"A"`` for the appendix
    (``appendix_name``), None for any other page."""
    if stem[:2].isdigit() and "_" in stem and stem.split("_")[0].isdigit():
        return int(stem.split("_")[0])
    return "A" if stem.startswith(APPENDIX) else None


def is_chapter(path: Path) -> bool:
    """True for a chapter notebook: ``NN_name.ipynb``, or the appendix, ``appendix_name.ipynb``."""
    name = Path(path).name
    return name.endswith(".ipynb") and "_" in name and (name.split("_")[0].isdigit() or name.startswith(APPENDIX))


def chapters(book: Path = BOOK) -> list[Path]:
    """Every chapter notebook of the book, in reading order (``book/NN_name.ipynb``, then the
    appendix, ``book/appendix_name.ipynb``)."""
    return sorted(p for p in book.glob("*.ipynb") if is_chapter(p))


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


def shown_error(source: str) -> str:
    """A cell that raises on purpose, rewritten to print its error and let the notebook go on.

    The book tags such cells ``raises-exception``; JupyterLab honours the tag, but other front ends
    (Colab, VS Code) stop "Run all" at the error. The student version catches and prints it.
    """
    body = "\n".join("    " + line if line.strip() else "" for line in source.rstrip("\n").splitlines())
    return ("# This cell raises an error on purpose: it is printed, and the notebook goes on.\n"
            f"try:\n{body}\nexcept Exception as error:\n"
            '    print(f"{type(error).__name__}: {error}")')


def student_version(nb, name: str = "notebook", book: "Path | Book | None" = None, plain: bool = True):
    """A copy of ``nb`` for students: solutions replaced by stubs, outputs cleared, plain Markdown.

    ``plain=True`` also turns every MyST construct of the Markdown cells into CommonMark that
    Jupyter, JupyterLab, VS Code and Colab render (see :func:`plain_markdown`): exercises become
    numbered headings, the hidden-solution markers disappear, figures carry their image as a cell
    attachment and their caption as text, cross-references and citations become links and
    readable text. ``book`` is the folder of the chapters (for cross-references, figures and the
    bibliography; by default the notebook's own ``name`` must be found in :data:`BOOK`).

    A cell that raises an error on purpose (tag ``raises-exception``) is rewritten by
    :func:`shown_error` to print the error, so that "Run all" goes through in every front end.

    Raises ValueError when a solution cell has no stub or a stub that equals its solution, and
    :class:`UnknownSyntax` for MyST syntax the conversion does not know.
    """
    trouble = problems(nb, name)
    if trouble:
        raise ValueError("cannot write a student version:\n  " + "\n  ".join(trouble))
    from companion.notebook import install_cell_source, is_install_cell

    out = copy.deepcopy(nb)
    first_code = True
    for cell in out.cells:
        if cell.cell_type != "code":
            continue
        if first_code and is_install_cell(cell):
            # Written from companion.REPOSITORY and DISTRIBUTION, whatever the book's copy says.
            cell.source = install_cell_source()
        first_code = False
        if is_solution(cell):
            cell.source = stub_of(cell).rstrip("\n")
        elif "raises-exception" in cell.metadata.get("tags", []):
            cell.source = shown_error(cell.source)
            cell.metadata["tags"] = [t for t in cell.metadata["tags"] if t != "raises-exception"]
        cell.outputs = []
        cell.execution_count = None
        cell.metadata.pop("execution", None)
    if plain:
        out = _plain_notebook(out, name, book if isinstance(book, Book) else Book(BOOK if book is None else book))
    return out


def resolve(names: list[str], book: Path = BOOK) -> list[Path]:
    """Chapter notebooks named by number (``2``, ``02``), ``A`` (the appendix), name (``02_attention``)
    or path."""
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
        match = [p for p in every if p.stem == stem or (stem.isdigit() and p.stem.split("_")[0] == f"{int(stem):02d}")
                 or (stem.upper() == "A" and chapter_label(p.stem) == "A")]
        if not match:
            known = ", ".join(p.stem for p in every) or "none"
            raise ValueError(f"no chapter notebook matches {name!r} (chapters in {book}: {known})")
        picked.extend(match)
    return list(dict.fromkeys(picked))


def write(paths: list[Path], out: Path) -> list[Path]:
    """Write the student version of each notebook into ``out``; return the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    books: dict[Path, Book] = {}  # one index per book folder, shared by its chapters
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        target = out / path.name
        book = books.setdefault(path.parent, Book(path.parent))
        nbformat.write(student_version(nb, path.name, book=book), target)
        written.append(target)
    return written


# --- plain Markdown for Jupyter, JupyterLab, VS Code and Colab -----------------------------------

class UnknownSyntax(ValueError):
    """MyST syntax that the student build does not know how to turn into plain Markdown.

    The build fails rather than leave raw directive or role text in a student's notebook: teach
    :func:`plain_markdown` the new construct (and its test in tests/test_student.py).
    """


#: Admonition directives and the bold title they get as a block quote.
ADMONITIONS = {
    "note": "Note", "tip": "Tip", "hint": "Hint", "important": "Important", "warning": "Warning",
    "caution": "Caution", "attention": "Attention", "danger": "Danger", "error": "Error",
    "seealso": "See also", "admonition": None, "dropdown": None, "margin": None, "sidebar": None,
    "topic": None, "epigraph": "", "pull-quote": "",
}
#: Directives that disappear from a student notebook (with their body: a solution stays hidden).
DROPPED = {"solution-start", "solution-end", "solution", "exercise-end"}
IMAGE_TYPES = {".svg": "image/svg+xml", ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".gif": "image/gif"}
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,}|:{3,})\s*(?P<info>.*?)\s*$")
_DIRECTIVE = re.compile(r"^\{(?P<name>[A-Za-z][\w-]*(?::[\w-]+)?)\}\s*(?P<arg>.*)$")
_OPTION = re.compile(r"^:(?P<key>[\w-]+):\s*(?P<value>.*)$")
_TARGET = re.compile(r"^\((?P<label>[^()\s]+)\)=\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_EQ_LABEL = re.compile(r"^(?P<math>.*)\$\$\s*\((?P<label>[^()\s]+)\)\s*$")
_IMAGE = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<src>[^)\s]+)(?P<title>\s+\"[^\"]*\")?\)")
_ROLE_NAME = re.compile(r"\{(?P<name>[A-Za-z][\w:+.-]*)\}$")


class Book:
    """What the student build knows about the whole book: chapter titles, labels, bibliography.

    Labels come from every chapter notebook (section targets ``(label)=``, exercises, figures of
    Markdown cells and of code cells, labelled equations) and every Markdown page of ``folder``.
    """

    def __init__(self, folder: Path, base_url: str | None = None):
        from companion import BOOK_URL

        self.folder = Path(folder)
        #: The published book's address (links in student notebooks are absolute: see :meth:`url`).
        self.base_url = base_url or BOOK_URL
        self.titles: dict[str, str] = {}  # page stem -> title ("Attention")
        self.numbers: dict[str, int | str] = {}  # chapter stem -> chapter number (or "A")
        self.labels: dict[str, dict] = {}  # label -> {"page", "text", "number"}
        self._bib = None
        self._target = None
        for path in sorted(self.folder.glob("*.md")):
            self._index_markdown(path.stem, path.read_text(encoding="utf-8").splitlines(), None, {})
        for path in chapters(self.folder):
            self._index_notebook(path)

    # -- indexing
    def _index_notebook(self, path: Path) -> None:
        self.index(nbformat.read(path, as_version=4), path.stem)

    def index(self, nb, stem: str) -> None:
        """Add (or replace) the labels and title of chapter ``stem`` from its notebook ``nb``."""
        number = chapter_label(stem)
        if number is None:
            return
        self.labels = {k: v for k, v in self.labels.items() if v["page"] != stem}
        self.titles.pop(stem, None)
        self.numbers[stem] = number
        counters = {"exercise": 0, "figure": 0, "equation": 0}
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                self._index_markdown(stem, cell.source.splitlines(), number, counters)
            elif cell.cell_type == "code":
                figure = (cell.metadata.get("mystnb") or {}).get("figure") or {}
                if figure.get("name"):
                    counters["figure"] += 1
                    self.labels[figure["name"]] = {"page": stem, "kind": "figure",
                                                   "number": f"{number}.{counters['figure']}",
                                                   "text": figure.get("caption", "")}

    def _index_markdown(self, stem: str, lines: list[str], number: int | None, counters: dict) -> None:
        """Labels and title of Markdown lines (recursing into directives' bodies)."""
        i = 0
        while i < len(lines):
            line = lines[i]
            m = _FENCE.match(line)
            if m:
                end = _Converter._closing(lines, i + 1, m["fence"])
                directive = _DIRECTIVE.match(m["info"])
                if directive is not None:
                    self._index_directive(stem, directive["name"], directive["arg"], lines[i + 1: end], number, counters)
                i, self._target = end + 1, None
                continue
            target = _TARGET.match(line.strip())
            heading = _HEADING.match(line)
            eq = _EQ_LABEL.match(line)
            if target:
                self._target = target["label"]
            elif heading:
                if len(heading.group(1)) == 1 and stem not in self.titles:
                    self.titles[stem] = heading.group(2)
                if self._target:
                    self.labels[self._target] = {"page": stem, "kind": "section", "number": None, "text": heading.group(2)}
                self._target = None
            elif eq and number is not None:
                counters["equation"] += 1
                self.labels[eq["label"]] = {"page": stem, "kind": "equation", "number": f"{number}.{counters['equation']}",
                                            "text": ""}
            elif line.strip():
                self._target = None
            i += 1

    def _index_directive(self, stem, name, arg, body, number, counters) -> None:
        options, content = _Converter._options(body)
        if number is not None and name in ("exercise", "exercise-start"):
            counters["exercise"] += 1  # every exercise is numbered, labelled or not
            if options.get("label"):
                self.labels[options["label"]] = {"page": stem, "kind": "exercise",
                                                 "number": f"{number}.{counters['exercise']}", "text": arg.strip()}
        elif number is not None and name == "figure" and options.get("name"):
            counters["figure"] += 1
            self.labels[options["name"]] = {"page": stem, "kind": "figure", "number": f"{number}.{counters['figure']}",
                                            "text": "\n".join(content).strip()}
        elif number is not None and name == "math" and options.get("label"):
            counters["equation"] += 1
            self.labels[options["label"]] = {"page": stem, "kind": "equation",
                                             "number": f"{number}.{counters['equation']}", "text": ""}
        if name not in DROPPED:
            self._index_markdown(stem, content, number, counters)

    # -- lookups
    def url(self, stem: str, anchor: str = "") -> str:
        """The absolute address of a page of the published book (and of an anchor in it).

        Absolute, so that a chapter downloaded alone still links to the others: a relative link
        to a sibling notebook breaks as soon as the notebook leaves the book's folder.
        """
        return f"{self.base_url}book/{stem}.html" + (f"#{anchor}" if anchor else "")

    def page_link(self, stem: str, text: str | None, here: str) -> str:
        """A link to a page of the published book (plain text for the page itself)."""
        title = self.titles.get(stem, stem.replace("_", " "))
        if stem in self.numbers:
            number = self.numbers[stem]
            label = text or (f"Chapter {number}, {title}" if isinstance(number, int) else f"Appendix, {title}")
        else:
            label = text or f"*{title}*"
        return label if stem == here else f"[{label}]({self.url(stem)})"

    def reference(self, label: str, text: str | None, here: str, numbered: bool) -> str:
        """A {ref} or {numref} as readable text: 'Figure 2.1', 'Exercise 3.2', a section title."""
        entry = self.labels.get(label)
        if entry is None:
            return text or label.replace("-", " ")
        kind, number = entry["kind"], entry["number"]
        if kind in ("figure", "exercise", "equation") and number:
            name = {"figure": "Figure", "exercise": "Exercise", "equation": "Equation"}[kind]
            if text and "%s" in text:
                shown = text.replace("%s", number)
            elif text and not numbered:
                shown = text
            elif kind == "equation":
                shown = f"({number})"
            else:
                shown = f"{name} {number}"
        else:
            shown = (text.replace("%s", "") if text else None) or entry["text"]
        if entry["page"] == here:
            return shown
        anchor = f"equation-{label}" if kind == "equation" else _html_id(label)
        link = f"[{shown}]({self.url(entry['page'], anchor)})"
        if entry["page"] in self.numbers or text:  # the author's own words already say where it is
            return link
        return f"{link} (in *{self.titles.get(entry['page'], entry['page'])}*)"

    def equation_number(self, label: str) -> str | None:
        entry = self.labels.get(label)
        return entry["number"] if entry and entry["kind"] == "equation" else None

    # -- bibliography
    @property
    def bibliography(self) -> dict[str, dict]:
        """key -> {"label": "Vaswani et al.", "year": "2017", "entry": "Vaswani, ... (2017). *Title*. Venue."}"""
        if self._bib is None:
            self._bib = _read_bibliography(self.folder / "references.bib")
        return self._bib

    def cite(self, keys: list[str], style: str) -> str:
        found = []
        for key in keys:
            if key not in self.bibliography:
                raise UnknownSyntax(f"citation key {key!r} is not in {self.folder / 'references.bib'}")
            found.append(self.bibliography[key])
        if style == "t":
            return "; ".join(f"{e['label']} ({e['year']})" for e in found)
        if style == "author":
            return "; ".join(e["label"] for e in found)
        if style == "year":
            return "; ".join(e["year"] for e in found)
        text = "; ".join(f"{e['label']}, {e['year']}" for e in found)
        return f"({text})"


def _html_id(label: str) -> str:
    """The HTML id Sphinx gives a label (docutils' ``make_id``: lower case, runs of other
    characters as one hyphen)."""
    try:
        from docutils.nodes import make_id
    except ImportError:  # pragma: no cover - the book's toolchain has docutils
        pass
    else:
        return make_id(label)
    import unicodedata

    text = unicodedata.normalize("NFKD", label.lower()).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"^[^a-z]+|[^a-z0-9]+$", "", re.sub(r"[^a-z0-9]+", "-", text))


def _read_bibliography(path: Path) -> dict[str, dict]:
    """Author-year labels and reference-list entries from a BibTeX file (needs pybtex, a dependency of
    the book's toolchain; the installed companion never calls this)."""
    try:
        import codecs

        import latexcodec  # noqa: F401 - registers the "ulatex" codec
        from pybtex.database import parse_file
    except ImportError as exc:  # pragma: no cover - the book's environment has them
        raise RuntimeError("the student build needs pybtex and latexcodec to read the bibliography: "
                           "pip install -r requirements.txt") from exc

    def plain(latex: str) -> str:
        latex = re.sub(r"\\url\{([^{}]*)\}", r"<\1>", latex)
        return codecs.decode(latex, "ulatex").replace("{", "").replace("}", "")

    out = {}
    for key, entry in parse_file(str(path)).entries.items():
        people = entry.persons.get("author") or entry.persons.get("editor") or []
        names = [plain(" ".join(p.last_names)) for p in people]
        if "others" in names:
            names = names[: names.index("others")] + ["others"]
        if len(names) == 1:
            label = names[0]
        elif len(names) == 2 and names[1] != "others":
            label = f"{names[0]} and {names[1]}"
        else:
            label = f"{names[0]} et al." if names else key
        year = entry.fields.get("year", "n.d.")
        authors = ", ".join(n for n in names[:3] if n != "others") + (" et al." if len(names) > 3 or "others" in names else "")
        venue = next((plain(entry.fields[f]) for f in ("booktitle", "journal", "institution", "publisher", "howpublished")
                      if f in entry.fields), "")
        title = plain(entry.fields.get("title", key))
        url = entry.fields.get("url", "")
        text = f"{authors} ({year}). *{title}*." + (f" {venue}." if venue else "") + (f" <{url}>" if url else "")
        out[key] = {"label": label, "year": year, "entry": text}
    return out


def _attachment(path: Path) -> tuple[str, dict]:
    """The name and mime bundle of an image embedded in a cell (base64, as Jupyter stores it)."""
    mime = IMAGE_TYPES.get(path.suffix.lower())
    if mime is None:
        raise UnknownSyntax(f"image {path.name}: only {', '.join(sorted(IMAGE_TYPES))} can be embedded")
    if not path.is_file():
        raise UnknownSyntax(f"image {path} not found")
    return path.name, {mime: base64.b64encode(path.read_bytes()).decode("ascii")}


class _Converter:
    """Turns the Markdown of one chapter into plain CommonMark (one instance per notebook)."""

    def __init__(self, book: Book, stem: str):
        self.book, self.stem = book, stem
        self.number = book.numbers.get(stem, chapter_label(stem) or 0)
        self.exercises = 0
        self.figures = 0
        self.cited: list[str] = []
        self.attachments: dict[str, dict] = {}

    # -- blocks
    def markdown(self, text: str) -> str:
        lines = text.splitlines()
        out: list[str] = []
        i = 0
        while i < len(lines):
            line = lines[i]
            m = _FENCE.match(line)
            if m:
                directive = _DIRECTIVE.match(m["info"])
                end = self._closing(lines, i + 1, m["fence"])
                if directive is None:
                    if m["fence"].startswith(":"):
                        raise UnknownSyntax(f"a colon fence without a directive: {line!r}")
                    out.extend(lines[i: end + 1])  # a code block, verbatim
                else:
                    out.extend(self.directive(directive["name"], directive["arg"], lines[i + 1: end], line).splitlines())
                i = end + 1
                continue
            if _TARGET.match(line.strip()):
                i += 1  # a label for cross-references: nothing to show
                continue
            if line.startswith("%"):
                i += 1  # a MyST comment
                continue
            eq = _EQ_LABEL.match(line)
            if eq:
                number = self.book.equation_number(eq["label"])
                tag = f" \\tag{{{number}}}" if number else ""
                line = f"{eq['math']}{tag}$$"
            out.append(self.inline(line))
            i += 1
        return "\n".join(out)

    @staticmethod
    def _closing(lines: list[str], start: int, fence: str) -> int:
        for j in range(start, len(lines)):
            stripped = lines[j].strip()
            if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
                return j
        return len(lines)  # an unclosed fence runs to the end of the cell (as in CommonMark)

    @staticmethod
    def _options(body: list[str]) -> tuple[dict[str, str], list[str]]:
        options: dict[str, str] = {}
        rest = list(body)
        if rest and rest[0].strip() == "---":  # YAML options
            end = next((k for k in range(1, len(rest)) if rest[k].strip() == "---"), None)
            if end is None:
                raise UnknownSyntax("a directive's YAML options are not closed by ---")
            for option in rest[1:end]:
                key, _, value = option.partition(":")
                options[key.strip()] = value.strip()
            rest = rest[end + 1:]
        while rest and _OPTION.match(rest[0].strip()):
            m = _OPTION.match(rest[0].strip())
            options[m["key"]] = m["value"].strip()
            rest = rest[1:]
        while rest and not rest[0].strip():
            rest = rest[1:]
        return options, rest

    def directive(self, name: str, arg: str, body: list[str], line: str) -> str:
        options, content = self._options(body)
        text = "\n".join(content)
        allowed = {
            "exercise": {"label", "class", "nonumber", "hidden"}, "exercise-start": {"label", "class", "nonumber", "hidden"},
            "figure": {"name", "alt", "width", "height", "align", "class", "scale", "figwidth", "figclass", "target"},
            "image": {"name", "alt", "width", "height", "align", "class", "scale", "target"},
            "math": {"label", "name", "class", "nowrap"},
            "code-block": {"linenos", "emphasize-lines", "caption", "name", "class", "lineno-start", "dedent", "force"},
            "code": {"linenos", "emphasize-lines", "caption", "name", "class", "number-lines"},
        }
        if name in DROPPED:
            return ""
        if name in ADMONITIONS:
            return self._admonition(name, arg, options, text)
        if name not in allowed:
            raise UnknownSyntax(f"the student build does not know the directive {{{name}}} ({line.strip()!r}); "
                                "teach companion.student.plain_markdown how to write it as plain Markdown")
        unknown = set(options) - allowed[name]
        if unknown:
            raise UnknownSyntax(f"unknown option(s) {sorted(unknown)} of {{{name}}} ({line.strip()!r})")
        if name in ("exercise", "exercise-start"):
            if "nonumber" in options:
                raise UnknownSyntax(f"an exercise without a number ({line.strip()!r}): the checkers name every "
                                    "exercise 'Exercise C.k'")
            self.exercises += 1
            title = f" — {self.inline(arg)}" if arg.strip() else ""
            heading = f"### Exercise {self.number}.{self.exercises}{title}"
            return heading + ("\n\n" + self.markdown(text) if text.strip() else "")
        if name in ("figure", "image"):
            return self._figure(name, arg, options, text)
        if name == "math":
            number = self.book.equation_number(options.get("label", "")) if options.get("label") else None
            tag = f" \\tag{{{number}}}" if number else ""
            return f"$$\n{text.strip()}{tag}\n$$"
        if name in ("code-block", "code"):
            return f"```{arg.strip()}\n{text}\n```"
        raise AssertionError(name)  # pragma: no cover

    def _admonition(self, name: str, arg: str, options: dict, text: str) -> str:
        unknown = set(options) - {"class", "name", "open"}
        if unknown:
            raise UnknownSyntax(f"unknown option(s) {sorted(unknown)} of {{{name}}}")
        title = ADMONITIONS[name]
        if title is None:  # the argument is the title
            if not arg.strip() and name == "admonition":
                raise UnknownSyntax("{admonition} needs a title")
            title = arg.strip()
        elif arg.strip():  # {note} Text: the argument is the first line of the body
            text = f"{arg.strip()}\n{text}"
        body = self.markdown(text).strip("\n")
        quoted = [f"> {line}" if line.strip() else ">" for line in body.splitlines()]
        if title:
            head = f"> **{self.inline(title)}{'' if title.endswith(('.', ':', '?', '!')) else '.'}**"
            if quoted and not quoted[0].startswith(("> -", "> *", "> 1", "> |", "> $$", "> ```")):
                quoted[0] = f"{head} {quoted[0][2:]}"
            else:
                quoted = [head, ">", *quoted]
        return "\n".join(quoted)

    def _figure(self, name: str, arg: str, options: dict, text: str) -> str:
        src = arg.strip()
        if not src:
            raise UnknownSyntax(f"{{{name}}} without an image path")
        if re.match(r"^[a-z]+://", src):
            raise UnknownSyntax(f"{{{name}}} {src}: a student notebook must not need the network; ship the image")
        path = (self.book.folder / src).resolve()
        key, bundle = _attachment(path)
        self.attachments[key] = bundle
        alt = options.get("alt") or (text.strip().splitlines()[0] if text.strip() else path.stem)
        image = f"![{alt}](attachment:{key})"
        if name == "image" or not text.strip():
            return image
        caption = self.markdown(text).strip()
        label = ""
        if options.get("name"):
            self.figures += 1
            entry = self.book.labels.get(options["name"])
            label = f"Figure {entry['number'] if entry else f'{self.number}.{self.figures}'}. "
        return f"{image}\n\n**{label.strip()}** {caption}" if label else f"{image}\n\n{caption}"

    # -- inline
    def inline(self, text: str) -> str:
        out: list[str] = []
        i = 0
        n = len(text)
        while i < n:
            c = text[i]
            if c == "\\" and i + 1 < n:
                out.append(text[i: i + 2])
                i += 2
                continue
            if c == "`":
                run = len(text[i:]) - len(text[i:].lstrip("`"))
                close = self._closing_backticks(text, i + run, run)
                if close < 0:
                    out.append(text[i: i + run])
                    i += run
                    continue
                before = "".join(out)
                role = _ROLE_NAME.search(before)
                if role:
                    out = [before[: role.start()], self.role(role["name"], text[i + run: close])]
                else:
                    out.append(text[i: close + run])  # a code span, verbatim
                i = close + run
                continue
            out.append(c)
            i += 1
        return "".join(out)

    @staticmethod
    def _closing_backticks(text: str, start: int, run: int) -> int:
        j = start
        while True:
            j = text.find("`" * run, j)
            if j < 0:
                return -1
            end = j + run
            if (j == 0 or text[j - 1] != "`") and (end >= len(text) or text[end] != "`"):
                return j
            j = end
            while j < len(text) and text[j] == "`":
                j += 1

    def role(self, name: str, content: str) -> str:
        explicit = re.match(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", content, re.S)
        text, target = (explicit["text"], explicit["target"]) if explicit else (None, content)
        if name == "doc":
            stem = Path(target.strip()).name
            stem = stem[: -len(".ipynb")] if stem.endswith(".ipynb") else stem[: -3] if stem.endswith(".md") else stem
            return self.book.page_link(stem, self.inline(text) if text else None, self.stem)
        if name in ("ref", "numref"):
            return self.book.reference(target.strip(), text, self.stem, numbered=name == "numref")
        if name == "eq":
            number = self.book.equation_number(target.strip())
            return f"({number})" if number else (text or target)
        if name == "math":
            return f"${content}$"
        if name in ("cite", "cite:p", "cite:t", "cite:ps", "cite:ts", "cite:author", "cite:year"):
            keys = [k.strip() for k in content.split(",") if k.strip()]
            self.cited.extend(k for k in keys if k not in self.cited)
            style = {"cite:t": "t", "cite:ts": "t", "cite:author": "author", "cite:year": "year"}.get(name, "p")
            return self.book.cite(keys, style)
        if name in ("sub", "sup"):
            return f"<{name}>{content}</{name}>"
        if name in ("kbd", "code", "literal", "samp", "file", "command", "program", "envvar", "py:func",
                    "py:class", "py:mod", "py:meth", "func", "class", "mod", "meth", "attr", "py:attr"):
            return f"`{content}`"
        if name in ("term", "abbr", "dfn", "emphasis"):
            return f"*{re.sub(r' *<[^>]*>$', '', content)}*" if name != "abbr" else re.sub(r"\s*\(.*\)$", "", content)
        if name == "strong":
            return f"**{content}**"
        raise UnknownSyntax(f"the student build does not know the role {{{name}}}`{content}`; teach "
                            "companion.student.plain_markdown how to write it as plain Markdown")

    def images(self, text: str) -> str:
        """Plain Markdown images with a local path become attachments (they show outside the repository)."""
        def embed(m: re.Match) -> str:
            src = m["src"]
            if re.match(r"^([a-z]+:|attachment:|#)", src):
                return m.group(0)
            key, bundle = _attachment((self.book.folder / src).resolve())
            self.attachments[key] = bundle
            return f"![{m['alt']}](attachment:{key}{m['title'] or ''})"
        return _IMAGE.sub(embed, text)


def plain_markdown(text: str, stem: str, book: Book | None = None) -> str:
    """One Markdown cell of chapter ``stem`` as plain CommonMark (see :func:`student_version`)."""
    converter = _Converter(book or Book(BOOK), stem)
    return converter.images(converter.markdown(text))


def _cell_id(base: str, suffix: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "", f"{base}-{suffix}")[:64]


def _plain_notebook(nb, name: str, book: Book):
    stem = Path(name).stem
    book.index(nb, stem)  # this very notebook, as it is now (it may differ from the file in the book)
    converter = _Converter(book, stem)
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            converter.attachments = {}
            try:
                source = converter.images(converter.markdown(cell.source))
            except UnknownSyntax as exc:
                raise UnknownSyntax(f"{name}: {exc}") from None
            if not source.strip():
                continue  # a cell that held only hidden-solution markers
            cell.source = "\n".join(line.rstrip() for line in source.strip("\n").splitlines())
            if converter.attachments:
                cell.attachments = {**cell.get("attachments", {}), **converter.attachments}
            cells.append(cell)
            continue
        cells.append(cell)
        figure = (cell.metadata.get("mystnb") or {}).get("figure") or {}
        if cell.cell_type == "code" and figure.get("caption"):
            entry = book.labels.get(figure.get("name", ""))
            number = f"Figure {entry['number']}. " if entry else ""
            caption = converter.images(converter.markdown(figure["caption"]))
            cells.append(nbformat.v4.new_markdown_cell(f"**{number.strip()}** {caption}" if number else caption,
                                                       id=_cell_id(cell.get("id", "figure"), "caption")))
    if cells and cells[0].cell_type == "markdown":
        lines = cells[0].source.split("\n")
        at = next((k + 1 for k, line in enumerate(lines) if line.startswith("# ")), 0)
        lines[at:at] = ["", STUDENT_NOTE]
        cells[0].source = "\n".join(lines)
    if converter.cited:
        entries = [f"- {book.bibliography[key]['entry']}" for key in converter.cited]
        cells.append(nbformat.v4.new_markdown_cell("## References\n\n" + "\n".join(entries),
                                                   id=_cell_id(f"{stem}", "references")))
    nb.cells = cells
    return nb


#: The line under the title of every student notebook.
STUDENT_NOTE = ("> *Student version: the exercises' solutions are left out. Write your answer\n"
                "> where a cell says `raise NotImplementedError` (or `...`), then run the\n"
                "> check cell below it.*")


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


def needs_message(book: Path | None = None) -> str:
    """What ``python -m companion.student`` needs where no chapter notebooks are found (an
    installed companion carries none: they are 2 MB of executed notebooks, figures and
    bibliography that only this command reads, while the book serves every student version)."""
    from companion import BOOK_URL, DISTRIBUTION, REPOSITORY

    where = f"no chapter notebooks (NN_name.ipynb) in {book}" if book else "no chapter notebooks found"
    return (f"{where}.\n"
            "python -m companion.student writes student versions from the book's chapter notebooks, which\n"
            "the installed package does not carry. Either:\n"
            f"  * download a chapter's student version from its page of the book, {BOOK_URL}\n"
            "    (the link 'Download the student version (no solutions)' under the title), or\n"
            "  * clone the course and point the command at its book/ folder:\n"
            f"      git clone {REPOSITORY} course\n"
            f"      pip install \"{DISTRIBUTION}[student] @ git+{REPOSITORY}\"\n"
            "      python -m companion.student --book course/book --out student 3")


def main(argv: list[str] | None = None) -> int:
    in_checkout = bool(chapters(BOOK))
    parser = argparse.ArgumentParser(
        prog="python -m companion.student", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("chapters", nargs="*", help="chapter numbers, names or notebook paths (default: all)")
    parser.add_argument("--book", type=Path, default=BOOK if in_checkout else None,
                        help="the folder of the book's chapter notebooks (default: book/ of this checkout)")
    parser.add_argument("--out", type=Path, default=ROOT / "student" if in_checkout else Path("student"),
                        help="output folder (default: student/ of the checkout, or of the current folder)")
    parser.add_argument("--times", action="store_true",
                        help="write the run times measured by the tests (_build/notebook_times.json) into "
                             "book/instructors.md")
    args = parser.parse_args(argv)
    if nbformat is None:
        from companion import DISTRIBUTION, REPOSITORY

        print("error: python -m companion.student needs nbformat, pybtex and latexcodec: "
              f"pip install \"{DISTRIBUTION}[student] @ git+{REPOSITORY}\"", file=sys.stderr)
        return 2
    try:
        if args.times:
            if not in_checkout:
                print(f"error: --times writes {INSTRUCTORS.name} of a checkout of the course; {needs_message()}",
                      file=sys.stderr)
                return 2
            print(write_times())
            return 0
        given = [name for name in args.chapters if Path(name).suffix == ".ipynb"]
        if args.book is None and (not args.chapters or len(given) < len(args.chapters)):
            print(f"error: {needs_message()}", file=sys.stderr)
            return 2
        if args.book is not None and not chapters(args.book):
            print(f"error: {needs_message(args.book)}", file=sys.stderr)
            return 2
        paths = resolve(args.chapters, args.book) if args.book is not None else [Path(p).resolve() for p in given]
        missing = [p for p in paths if not p.is_file()]
        if missing:
            print(f"error: no such notebook: {', '.join(map(str, missing))}", file=sys.stderr)
            return 2
        for target in write(paths, args.out):
            print(target)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
