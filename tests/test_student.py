"""Student versions (``python -m companion.student``) and the exercise pattern of every chapter.

For every chapter notebook in book/:

* every solution cell has a stub, and the stub differs from the solution;
* the stored output of every check cell in the book says the exercise passed;
* the student version keeps no solution code, no output, and no other code changes;
* its Markdown is plain CommonMark (no MyST directive or role survives; every exercise a check
  cell names is a numbered heading), so that Jupyter, JupyterLab, VS Code and Colab render it;
* the student version runs top to bottom without an error, and each check says "not attempted yet";
* a student's own error shows a full traceback (nothing in ``setup()`` shortens it);
* the book's chapter pages link to their student version (book/_ext/student_downloads.py).

The student notebooks run with the kernel's working directory in book/, as the book's own notebooks
do under nbval (``student/`` is a sibling of book/, so a path such as ``../x`` means the same file
from both). Running them takes about as long as running the book (chapter 7 trains for minutes).
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import companion
from companion import student
from companion.notebook import install_cell_source, is_install_cell

BOOK = companion.BOOK_URL + "book/"
ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = student.chapters()
IDS = [p.stem for p in CHAPTERS]
ENV = {"PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "IPYKERNEL_CELL_NAME": "<IPY-INPUT>"}
PASSED = re.compile(r"✅ Exercise (?:\d+|A)\.\d+ passed")
NOT_ATTEMPTED = re.compile(r"⏳ Exercise (?:\d+|A)\.\d+ not attempted yet")


def _text(cell) -> str:
    """Everything a code cell printed or displayed, as text."""
    parts = []
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            parts.append(out.text)
        elif out.output_type in ("execute_result", "display_data"):
            parts.append(out.data.get("text/plain", ""))
        elif out.output_type == "error":
            parts.append(f"{out.ename}: {out.evalue}")
    return "".join(parts)


def _read(path: Path):
    return nbformat.read(path, as_version=4)


@pytest.fixture(scope="module")
def student_dir(tmp_path_factory) -> Path:
    """The student version of every chapter that has a sound one (the others fail their own tests)."""
    out = tmp_path_factory.mktemp("student")
    for path in CHAPTERS:
        try:
            student.write([path], out)
        except ValueError:
            pass  # reported by test_every_solution_has_a_stub_that_differs
    return out


def _student_version(student_dir: Path, path: Path):
    target = student_dir / path.name
    if not target.is_file():
        pytest.fail(f"no student version of {path.name}: {student.problems(_read(path), path.name)}", pytrace=False)
    return _read(target)


def test_the_command_writes_student_versions(tmp_path):
    if not CHAPTERS:
        pytest.skip("no chapter notebook yet")
    first = CHAPTERS[0]
    done = subprocess.run([sys.executable, "-m", "companion.student", "--out", str(tmp_path), first.stem],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, f"python -m companion.student failed:\n{done.stderr}"
    assert (tmp_path / first.name).is_file()
    done = subprocess.run([sys.executable, "-m", "companion.student", "--out", str(tmp_path), "99"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and "no chapter notebook matches '99'" in done.stderr


# --- the command itself, on a small notebook made here --------------------------------------------

def _toy_notebook():
    nb = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell("def f(x):\n    return 2 * x", metadata={
        "tags": ["solution"], "course": {"stub": "def f(x):\n    raise NotImplementedError  # your code here\n"}})
    solution.outputs = [nbformat.v4.new_output("stream", text="hi")]
    solution.execution_count = 3
    nb.cells = [nbformat.v4.new_markdown_cell("# Toy"), nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["keep"]}),
                solution, nbformat.v4.new_code_cell("check(f)")]
    return nb


def test_student_version_replaces_solutions_and_clears_outputs():
    nb = _toy_notebook()
    out = student.student_version(nb)
    assert out.cells[2].source == "def f(x):\n    raise NotImplementedError  # your code here"
    assert all(c.get("outputs", []) == [] and c.get("execution_count") is None for c in out.cells if c.cell_type == "code")
    assert out.cells[1].source == "x = 1" and out.cells[1].metadata["tags"] == ["keep"]
    assert out.cells[0].source.startswith("# Toy\n\n> *Student version:")
    assert nb.cells[2].source == "def f(x):\n    return 2 * x", "the book's notebook must not be modified"


def test_an_error_shown_on_purpose_is_printed_so_run_all_goes_on(capsys):
    """Colab and VS Code ignore the raises-exception tag: "Run all" would stop at such a cell."""
    nb = _toy_notebook()
    nb.cells.insert(2, nbformat.v4.new_code_cell("y = [1, 2]\n\ny[5]", metadata={"tags": ["raises-exception", "keep"]}))
    cell = student.student_version(nb).cells[2]
    assert cell.metadata["tags"] == ["keep"]
    exec(compile(cell.source, "<cell>", "exec"), {})  # must not raise
    assert capsys.readouterr().out == "IndexError: list index out of range\n"
    assert "    y[5]" in cell.source and cell.source.startswith("# This cell raises an error on purpose")


def test_student_version_refuses_a_missing_or_unchanged_stub():
    nb = _toy_notebook()
    del nb.cells[2].metadata["course"]
    with pytest.raises(ValueError, match=r"cell 2: solution cell without a stub"):
        student.student_version(nb)
    nb.cells[2].metadata["course"] = {"stub": "def f(x):\n    return 2 * x\n"}
    with pytest.raises(ValueError, match=r"cell 2: the stub is the same as the solution"):
        student.student_version(nb)


def test_chapters_are_named_by_number_name_or_path():
    if not CHAPTERS:
        pytest.skip("no chapter notebook yet")
    first = CHAPTERS[0]
    number = first.stem.split("_")[0]
    assert student.resolve([str(int(number))]) == [first]
    assert student.resolve([first.stem]) == [first]
    assert student.resolve([str(first)]) == [first.resolve()]
    appendix = [p for p in CHAPTERS if p.stem.startswith("appendix_")]
    assert student.resolve(["A"]) == student.resolve(["a"]) == appendix and len(appendix) == 1
    with pytest.raises(ValueError, match=r"no chapter notebook matches '99'"):
        student.resolve(["99"])


def test_check_cells_are_the_first_code_cell_after_the_solutions():
    nb = _toy_notebook()
    assert student.check_cells(nb) == [3]


# --- every chapter of the book --------------------------------------------------------------------

@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_every_solution_has_a_stub_that_differs(path):
    assert student.problems(_read(path), path.name) == []


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_the_book_passes_every_check(path):
    nb = _read(path)
    checks = student.check_cells(nb)
    if not checks:
        pytest.skip(f"{path.name} has no exercise yet")
    failing = {i: _text(nb.cells[i]) for i in checks if not PASSED.search(_text(nb.cells[i]))}
    assert not failing, f"{path.name}: check cells whose stored output is not '✅ Exercise N.M passed': {failing}"


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_no_solution_code_survives_and_no_other_code_changed(path, student_dir):
    book, mine = _read(path), _student_version(student_dir, path)
    assert mine.metadata == book.metadata
    book_code = [c for c in book.cells if c.cell_type == "code"]
    mine_code = [c for c in mine.cells if c.cell_type == "code"]
    assert len(mine_code) == len(book_code), "code cells were added or removed"
    assert {c.cell_type for c in mine.cells} <= {"code", "markdown"}
    # Lines that only the solutions hold: none of them may appear anywhere in the student version.
    elsewhere = {line.strip() for c in book.cells if not student.is_solution(c) for line in c.source.splitlines()}
    for i, (b, s) in enumerate(zip(book_code, mine_code)):
        assert s.outputs == [] and s.execution_count is None, f"code cell {i}: output not cleared"
        tags = b.metadata.get("tags", [])
        expected = {k: v for k, v in b.metadata.items() if k != "execution"}
        if "raises-exception" in tags:  # printed instead of raised (student.shown_error)
            expected["tags"] = [t for t in tags if t != "raises-exception"]
        assert {k: v for k, v in s.metadata.items()} == expected
        if i == 0 and is_install_cell(b):  # written afresh from companion.REPOSITORY and DISTRIBUTION
            assert s.source == install_cell_source(), "the install cell is not install_cell_source()"
        elif student.is_solution(b):
            assert s.source == student.stub_of(b).rstrip("\n"), f"code cell {i}: not the stub"
        elif "raises-exception" in tags:
            assert s.source == student.shown_error(b.source), f"code cell {i}: the error is not printed"
        else:
            assert s.source == b.source, f"code cell {i}: a code cell that is not a solution changed"
    stub_lines = {line.strip() for c in book.cells if student.is_solution(c) for line in student.stub_of(c).splitlines()}
    secret = {line.strip() for c in book.cells if student.is_solution(c) for line in c.source.splitlines()}
    secret -= elsewhere | stub_lines | {""}
    secret = {line for line in secret if not line.startswith("#") and len(line) > 3}
    # A line the book also shows outside the solutions (a later cell, the task's text) is no leak.
    shown = "\n".join(c.source for c in book.cells if not student.is_solution(c))
    leaked = [line for line in secret for c in mine.cells if line in c.source and line not in shown]
    assert not leaked, f"solution code left in the student version of {path.name}: {leaked}"


# --- plain Markdown -------------------------------------------------------------------------------

_ROLE_BEFORE_CODE = re.compile(r"\{[A-Za-z][\w:+.-]*\}$")
_LEFTOVER_LINE = re.compile(r"^(:[\w-]+:|\(\S+\)=$|:{3,}|`{3,}\{|~{3,}\{|%)")


def _markdown_problems(source: str) -> list[str]:
    """MyST syntax that a CommonMark renderer (markdown-it-py, commonmark mode) would show as raw text."""
    from markdown_it import MarkdownIt

    found = []
    for token in MarkdownIt("commonmark").parse(source):
        if token.type == "fence" and token.info.strip().startswith("{"):
            found.append(f"directive ```{token.info.strip()}")
        if token.type != "inline":
            continue
        children = token.children or []
        for a, b in zip(children, children[1:]):
            if a.type == "text" and b.type == "code_inline" and _ROLE_BEFORE_CODE.search(a.content):
                found.append(f"role {_ROLE_BEFORE_CODE.search(a.content).group(0)}`{b.content}`")
        for line in token.content.splitlines():
            if _LEFTOVER_LINE.match(line.strip()):
                found.append(f"line {line.strip()!r}")
    return found


def _headings(source: str) -> list[str]:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").parse(source)
    return [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]


def _checked_exercises(nb) -> list[str]:
    """'Exercise C.k' of the checker called in each check cell, in order (from the imports cell)."""
    import importlib

    imports = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    found = []
    for i in student.check_cells(nb):
        call = re.match(r"\s*(\w+)\.(\w+)\(", nb.cells[i].source)
        assert call, f"check cell {i} does not call a checker: {nb.cells[i].source!r}"
        alias, name = call.groups()
        module = re.search(rf"from companion\.exercises import (\w+) as {alias}\b", imports)
        assert module, f"no 'from companion.exercises import ... as {alias}' in the notebook"
        checker = getattr(importlib.import_module(f"companion.exercises.{module.group(1)}"), name)
        found.append(checker.exercise)
    return found


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_student_markdown_is_plain_commonmark(path, student_dir):
    mine = _student_version(student_dir, path)
    problems = {i: _markdown_problems(c.source) for i, c in enumerate(mine.cells) if c.cell_type == "markdown"}
    problems = {i: p for i, p in problems.items() if p}
    assert not problems, f"{path.name}: MyST syntax left in the student version (cell: what): {problems}"
    for i, cell in enumerate(mine.cells):
        for name in re.findall(r"\(attachment:([^)\s]+)", cell.source) if cell.cell_type == "markdown" else []:
            assert name in cell.get("attachments", {}), f"cell {i}: image attachment {name} missing"


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_every_checked_exercise_is_a_heading_in_order(path, student_dir):
    mine = _student_version(student_dir, path)
    number = student.chapter_label(path.stem)  # 7, or "A" for the appendix
    checked = _checked_exercises(mine)
    headings = [re.match(r"Exercise (?:\d+|A)\.\d+", h).group(0) for c in mine.cells if c.cell_type == "markdown"
                for h in _headings(c.source) if re.match(r"Exercise (?:\d+|A)\.\d+", h)]
    assert checked == [f"Exercise {number}.{k}" for k in range(1, len(checked) + 1)], (
        f"{path.name}: the checkers of the check cells are not numbered {number}.1, {number}.2, ... in order: {checked}")
    assert headings == checked, f"{path.name}: exercise headings {headings}, checkers {checked}"


def _toy_book(tmp_path):
    """A small book folder: two chapters, a Markdown page, a bibliography and a figure."""
    book = tmp_path / "book"
    (book / "figures").mkdir(parents=True)
    (book / "figures" / "arrow.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>')
    (book / "references.bib").write_text(
        "@article{smith2020a, title={A {Title}}, author={Smith, Ann and Jones, Bob and Lee, Cy}, journal={J}, year={2020}}\n"
        "@book{doe2019, title={Book}, author={Doe, Jo and Roe, Max}, publisher={P}, year={2019}}\n")
    (book / "intro.md").write_text("# Welcome\n\n(notation)=\n## Notation\n\nSymbols.\n")
    other = nbformat.v4.new_notebook()
    other.cells = [nbformat.v4.new_markdown_cell("# Second thoughts\n\n(sec-more)=\n## More\n\nText.")]
    nbformat.write(other, book / "03_second.ipynb")
    return book


TOY_MARKDOWN = """\
# Toy chapter

See {doc}`03_second`, {doc}`the intro <intro>`, {ref}`sec-more`, {ref}`notation`, {numref}`fig-arrow`,
{numref}`Fig. %s <fig-arrow>`, {ref}`ex-toy` and {eq}`eq-sum`; {cite:p}`smith2020a`, {cite:t}`doe2019`,
{cite:p}`smith2020a,doe2019` and {math}`x^2`. Code stays code: ``{doc}`x` `` and `{ref}`.

(sec-here)=
## Here

$$ a + b $$ (eq-sum)

```{figure} figures/arrow.svg
:name: fig-arrow
:alt: An arrow.
:width: 50%

An arrow, with {math}`y`.
```

```{note}
Remember this.
```

```{admonition} A title
Body text.
```

:::{tip}
Colon fence.
:::

```{exercise} A toy exercise
:label: ex-toy

Write `f(x)`.
```

````{solution-start} ex-toy
:class: dropdown
````

```python
print("{doc}`not a role`")
```
"""


def test_plain_markdown_of_every_construct(tmp_path):
    book = student.Book(_toy_book(tmp_path))
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(TOY_MARKDOWN)]
    out = student.student_version(nb, "02_toy.ipynb", book=book.folder)
    text = out.cells[0].source
    assert _markdown_problems(text) == []
    for expected in [
        f"[Chapter 3, Second thoughts]({BOOK}03_second.html)", f"[the intro]({BOOK}intro.html),",
        f"[More]({BOOK}03_second.html#sec-more)", f"[Notation]({BOOK}intro.html#notation) (in *Welcome*)", "Figure 2.1,", "Fig. 2.1,", "Exercise 2.1 and (2.1)",
        "(Smith et al., 2020)", "Doe and Roe (2019)", "(Smith et al., 2020; Doe and Roe, 2019)", "$x^2$",
        "``{doc}`x` ``", "`{ref}`", "$$ a + b  \\tag{2.1}$$", "![An arrow.](attachment:arrow.svg)",
        "**Figure 2.1.** An arrow, with $y$.", "> **Note.** Remember this.", "> **A title.** Body text.",
        "> **Tip.** Colon fence.", "### Exercise 2.1 — A toy exercise\n\nWrite `f(x)`.",
        'print("{doc}`not a role`")',
    ]:
        assert expected in text, f"{expected!r} not in:\n{text}"
    assert "solution-start" not in text and "(sec-here)=" not in text and "## Here" in text
    assert set(out.cells[0].attachments) == {"arrow.svg"}
    assert "image/svg+xml" in out.cells[0].attachments["arrow.svg"]
    assert out.cells[-1].source.startswith("## References") and "Smith, Jones, Lee (2020). *A Title*. J." in out.cells[-1].source


@pytest.mark.parametrize("markdown,what", [
    ("```{glue:figure} x\n```", "directive {glue:figure}"),
    ("```{list-table}\n* - a\n```", "directive {list-table}"),
    ("See {footcite}`smith2020a`.", "role {footcite}"),
    ("```{exercise} Title\n:nonumber:\n\nText\n```", "without a number"),
    ("```{figure} figures/missing.svg\n:name: fig-x\n\nCaption\n```", "not found"),
    ("{cite:p}`nobody2000`", "citation key 'nobody2000'"),
    ("```{note}\n:unknown: 1\n\nText\n```", "unknown option"),
])
def test_unknown_syntax_fails_loudly(tmp_path, markdown, what):
    book = _toy_book(tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell(markdown)]
    with pytest.raises(student.UnknownSyntax, match=re.escape(what)):
        student.student_version(nb, "02_toy.ipynb", book=book)


def test_figures_of_code_cells_get_their_caption(tmp_path):
    book = _toy_book(tmp_path)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Toy"),
                nbformat.v4.new_code_cell("plt.plot([1, 2])\nplt.show()", metadata={
                    "mystnb": {"figure": {"caption": "A line, see {doc}`03_second`.", "name": "fig-line"}}})]
    nbformat.write(nb, book / "02_toy.ipynb")
    out = student.student_version(nb, "02_toy.ipynb", book=book)
    assert [c.cell_type for c in out.cells] == ["markdown", "code", "markdown"]
    assert out.cells[2].source == f"**Figure 2.1.** A line, see [Chapter 3, Second thoughts]({BOOK}03_second.html)."
    nbformat.validate(out)


@pytest.mark.slow
@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_student_notebook_runs_and_every_check_says_not_attempted(path, student_dir, monkeypatch):
    from test_install import CHAPTERS as RUN_FROM_A_PLAIN_INSTALL

    if path.stem[:2] in RUN_FROM_A_PLAIN_INSTALL:
        pytest.skip("run by tests/test_install.py, from a non-editable install outside the checkout")
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    nb = _student_version(student_dir, path)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    error = None
    try:
        client.execute()
    except Exception as exc:  # noqa: BLE001 - nbclient raises CellExecutionError and timeouts
        error = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))  # without the traceback's terminal colours
    if error is not None:
        where = [i for i, c in enumerate(nb.cells) if "raises-exception" not in c.metadata.get("tags", [])
                 and any(o.output_type == "error" for o in c.get("outputs", []))]
        pytest.fail(f"the student version of {path.name} does not run top to bottom (cell {where[:1]}):\n{error[-3000:]}\n"
                    "(only the exercise's check cell may use the names a solution defines: the student's "
                    "stub raises NotImplementedError until it is written)", pytrace=False)
    checks = student.check_cells(nb)
    said = {i: _text(nb.cells[i]).strip() for i in checks}
    wrong = {i: text for i, text in said.items() if not NOT_ATTEMPTED.search(text)}
    assert not wrong, f"{path.name}: check cells that do not say '⏳ Exercise N.M not attempted yet': {wrong}"


# --- the measured times on the instructors' page ---------------------------------------------------

def test_times_are_written_between_the_markers(tmp_path):
    book = tmp_path / "book"
    book.mkdir()
    nbformat.write(_toy_notebook(), book / "01_toy.ipynb")
    (book / "02_later.md").write_text("# Later\n")
    page = book / "instructors.md"
    page.write_text(f"# Page\n\n{student._TIMES_START}\nold\n{student._TIMES_END}\n\nafter\n")
    timings = tmp_path / "times.json"
    timings.write_text('{"book/01_toy.ipynb": {"seconds": 12.34, "measured": "2026-01-02T03:04:05+00:00"}}')
    student.write_times(page, timings)
    text = page.read_text()
    assert "old" not in text and text.endswith("\n\nafter\n")
    assert "| {doc}`01_toy` | 1 | 1 | 0 | 0 | 12 |" in text and "Run times measured on 2026-01-02." in text
    assert "| {doc}`02_later` | not written yet |" in text
    page.write_text("# no markers\n")
    with pytest.raises(ValueError, match=r"has no <!-- measured-times:start --> \.\.\. <!-- measured-times:end --> markers"):
        student.write_times(page, timings)


def test_the_instructors_page_has_the_times_markers():
    text = student.INSTRUCTORS.read_text()
    assert student._TIMES_START in text and student._TIMES_END in text


# --- tracebacks: a student's own error keeps its frames -----------------------------------------------

def test_a_students_error_shows_a_full_traceback(tmp_path, monkeypatch):
    """setup() leaves error reports alone: an error in a student's function shows every frame and
    the failing line (the book's own one-line errors are made when the book is saved, not here)."""
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    # A student's kernel has no IPYKERNEL_CELL_NAME (the tests set it to keep warnings path-free; with
    # it, every cell has the same file name and IPython cannot quote the source lines).
    monkeypatch.delenv("IPYKERNEL_CELL_NAME", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from companion.notebook import setup\n\nsetup()"),
        nbformat.v4.new_code_cell("def my_softmax(x):\n    total = sum(x)\n    return [v / (total - total) for v in x]"),
        nbformat.v4.new_code_cell("my_softmax([1.0, 2.0])"),
    ]
    client = NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    errors = [o for o in nb.cells[2].outputs if o.output_type == "error"]
    assert errors and errors[0].ename == "ZeroDivisionError"
    frames = [re.sub(r"\x1b\[[0-9;]*m", "", entry) for entry in errors[0].traceback]
    text = "\n".join(frames)
    assert "my_softmax([1.0, 2.0])" in text, text  # the calling line, in the cell that failed
    assert "return [v / (total - total) for v in x]" in text, text  # the failing line of the function
    assert len([f for f in frames if "line" in f.lower() or "---->" in f]) >= 2, f"a one-frame traceback: {text}"


# --- the download link on each chapter page (book/_ext/student_downloads.py) --------------------------

def _extension():
    import importlib.util

    spec = importlib.util.spec_from_file_location("student_downloads", ROOT / "book" / "_ext" / "student_downloads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_download_link_points_at_the_student_notebook():
    ext = _extension()
    assert ext.download_path("book/02_attention") == "student/02_attention.ipynb"
    link = ext.link_html("book/02_attention.html", "book/02_attention")
    assert 'href="../student/02_attention.ipynb" download>Download the student version (no solutions)</a>' in link
    assert 'href="student/01_x.ipynb"' in ext.link_html("01_x.html", "01_x")


@pytest.mark.slow
def test_a_built_chapter_page_links_to_its_student_notebook(tmp_path):
    """A small Sphinx project (MyST-NB, sphinx-exercise, bibtex, the extension) with one chapter:
    the built page has the link under its title, and the file it names is a valid student notebook."""
    from sphinx.application import Sphinx

    src = tmp_path / "src"
    book = src / "book"
    book.mkdir(parents=True)
    (book / "references.bib").write_text("@article{smith2020a, title={T}, author={Smith, Ann}, journal={J}, year={2020}}\n")
    nb = _toy_notebook()
    nb.cells[0].source = "# Toy\n\nAs {cite:p}`smith2020a` says.\n\n```{exercise} Double it\n:label: ex-double\n\nWrite `f`.\n```"
    nb.cells.insert(2, nbformat.v4.new_markdown_cell("````{solution-start} ex-double\n:class: dropdown\n````"))
    nb.cells.insert(4, nbformat.v4.new_markdown_cell("```{solution-end}\n```"))
    nbformat.write(nb, book / "01_toy.ipynb")
    (src / "index.md").write_text("# Index\n\n```{toctree}\nbook/01_toy\n```\n")
    (src / "conf.py").write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'book' / '_ext')!r})\n"
        "extensions = ['myst_nb', 'sphinx_exercise', 'sphinxcontrib.bibtex', 'student_downloads']\n"
        "bibtex_bibfiles = ['book/references.bib']\nbibtex_reference_style = 'author_year'\n"
        "nb_execution_mode = 'off'\nexclude_patterns = ['_build']\n")
    out = tmp_path / "html"
    app = Sphinx(str(src), str(src), str(out), str(tmp_path / "doctrees"), "html", status=None, warning=None,
                 freshenv=True)
    app.build()
    page = (out / "book" / "01_toy.html").read_text()
    link = re.search(r'</h1>\s*<p class="student-download"><a [^>]*href="([^"]+)"[^>]*\bdownload>'
                     r"Download the student version \(no solutions\)</a></p>", page)
    assert link, "no download link right under the chapter's title"
    attrs = {"href": link.group(1)}
    target = (out / "book" / attrs["href"]).resolve()
    assert target.is_file(), f"the link names {attrs['href']}, which the build did not write"
    mine = nbformat.read(target, as_version=4)
    nbformat.validate(mine)
    assert any("raise NotImplementedError" in c.source for c in mine.cells) and "return 2 * x" not in str(mine)
    assert mine.cells[0].source.startswith("# Toy") and "### Exercise 1.1 — Double it" in mine.cells[0].source
    assert "(Smith, 2020)" in mine.cells[0].source
    assert all(not _markdown_problems(c.source) for c in mine.cells if c.cell_type == "markdown")


# --- the student path: links, the install cell, the repository address, threads ------------------

_LINK = re.compile(r"\]\(([^)\s]+)")
PLACEHOLDER = "OWNER" + "/REPOSITORY"  # jupyter-book's example address, once left in a page


@pytest.mark.parametrize("path", CHAPTERS, ids=IDS)
def test_links_to_other_pages_are_absolute_addresses_of_the_book(path, student_dir):
    """A chapter downloaded alone (as every chapter page offers it) still links to the others."""
    mine = _student_version(student_dir, path)
    pages = {p.stem for p in (ROOT / "book").glob("*.ipynb")} | {p.stem for p in (ROOT / "book").glob("*.md")}
    for i, cell in enumerate(mine.cells):
        if cell.cell_type != "markdown":
            continue
        for target in _LINK.findall(cell.source):
            if target.startswith("attachment:"):
                continue
            assert re.match(r"^https?://", target), f"cell {i}: a relative link {target!r} breaks outside book/"
            if target.startswith(BOOK):
                page = target[len(BOOK):].split("#")[0]
                assert page.endswith(".html") and page[:-5] in pages, f"cell {i}: {target} names no page of the book"


def test_the_student_versions_have_no_relative_links_at_all(student_dir):
    links = [t for p in student_dir.glob("*.ipynb") for c in _read(p).cells if c.cell_type == "markdown"
             for t in _LINK.findall(c.source) if not t.startswith("attachment:")]
    assert links and all(t.startswith(("https://", "http://")) for t in links), [t for t in links if "://" not in t]
    assert sum(t.startswith(BOOK) for t in links) >= 40  # 48 relative links before


def test_anchors_are_the_ids_sphinx_gives_labels():
    book = student.Book(ROOT / "book")
    assert student._html_id("sec-x") == "sec-x" and student._html_id("Fig_Attention 2") == "fig-attention-2"
    ref = book.reference("eq-sum", None, "01_dot_products", numbered=False) if "eq-sum" in book.labels else ""
    assert ref == "" or "#equation-eq-sum" in ref
    other = next(k for k, v in book.labels.items() if v["page"] == "02_attention" and v["kind"] != "equation")
    assert f"{BOOK}02_attention.html#{other}" in book.reference(other, None, "03_multi_head_attention", numbered=True)


def test_the_install_cell_is_written_from_the_constants(tmp_path):
    nb = nbformat.v4.new_notebook()
    old = ('import importlib.util\n\nif importlib.util.find_spec("companion") is None:\n'
           '    %pip install --quiet "git+https://github.com/someone/else"')
    nb.cells = [nbformat.v4.new_markdown_cell("# Toy"), nbformat.v4.new_code_cell(old, metadata={"tags": ["remove-cell"]}),
                nbformat.v4.new_code_cell("print('%pip install companion')")]
    out = student.student_version(nb, "02_toy.ipynb", book=_toy_book(tmp_path))
    assert out.cells[1].source == install_cell_source()
    assert out.cells[2].source == "print('%pip install companion')"  # only the first code cell
    source = install_cell_source()
    assert f'"{companion.DISTRIBUTION}"' in source and f"git+{companion.REPOSITORY}" in source
    assert all(len(line) <= 78 for line in source.splitlines())
    assert companion.DISTRIBUTION != "companion"


def _run_install_cell(tmp_path, monkeypatch, fake_companion: str | None) -> list[str]:
    """Run the install cell in an IPython shell whose %pip only records its arguments."""
    from IPython.core.interactiveshell import InteractiveShell

    calls: list[str] = []
    source = install_cell_source()
    shell = InteractiveShell.instance()
    shell.register_magic_function(calls.append, "line", "pip")
    if fake_companion is not None:
        site = tmp_path / "site"
        (site / "companion").mkdir(parents=True)
        (site / "companion" / "__init__.py").write_text(fake_companion)
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delitem(sys.modules, "companion", raising=False)
    try:
        result = shell.run_cell(source)
        assert result.success, result.error_in_exec
    finally:
        shell.magics_manager.magics["line"].pop("pip", None)
        InteractiveShell.clear_instance()
    return calls


def test_the_install_cell_installs_only_where_the_course_is_missing(tmp_path, monkeypatch):
    assert _run_install_cell(tmp_path, monkeypatch, None) == []  # the course is importable here
    # The unrelated "companion" of the package index (no companion/notebook.py): install the course.
    calls = _run_install_cell(tmp_path, monkeypatch, '"""Companion robot"""\n')
    assert calls == [f'install --quiet "{companion.install_requirement()}"']


def test_the_repository_address_lives_in_the_configuration():
    """_config.yml's repository url is the source; companion.REPOSITORY says the same, every other
    copy is the same address (scripts/stamp_repository.py rewrites them), no placeholder is left."""
    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    assert config["repository"]["url"] == companion.REPOSITORY
    assert companion.BOOK_URL == companion.book_url(config["repository"]["url"])
    owner = companion.REPOSITORY.split("/")[3]
    copies = re.compile(rf"github\.com/{re.escape(owner)}/[\w.-]*|{re.escape(owner.lower())}\.github\.io/[\w.-]*", re.I)
    stamp = _stamp_script()
    wrong = []
    for path in stamp.tracked_text_files(ROOT):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        if PLACEHOLDER in text:
            wrong.append(f"{path.relative_to(ROOT)}: the placeholder {PLACEHOLDER}")
        for m in copies.finditer(text):
            if m.group(0) not in (companion.REPOSITORY.removeprefix("https://"), companion.BOOK_URL[8:-1]):
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not wrong, "copies of the address that are not companion.REPOSITORY:\n" + "\n".join(wrong)
    assert stamp.plan(ROOT) == {}


def _stamp_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("stamp_repository", ROOT / "scripts" / "stamp_repository.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_stamp_script_rewrites_every_copy(tmp_path):
    repo = tmp_path / "repo"
    (repo / "companion").mkdir(parents=True)
    (repo / "_config.yml").write_text("repository:\n  url: https://github.com/New-Owner/new-course\n")
    (repo / "companion" / "__init__.py").write_text('REPOSITORY = "https://github.com/old/course"\n')
    (repo / "README.md").write_text("pip install git+https://github.com/old/course\nhttps://old.github.io/course/\n")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "."], cwd=repo, check=True)
    stamp = _stamp_script()
    changes = stamp.plan(repo)
    assert set(changes) == {repo / "README.md", repo / "companion" / "__init__.py"}
    assert changes[repo / "README.md"] == ("pip install git+https://github.com/New-Owner/new-course\n"
                                           "https://new-owner.github.io/new-course/\n")


def test_the_command_from_an_installed_package_says_what_it_needs(tmp_path, monkeypatch, capsys):
    """An installed companion has no book/ beside it: the command names what it needs, exactly."""
    monkeypatch.setattr(student, "BOOK", tmp_path / "no-book")
    assert student.main(["3"]) == 2
    said = capsys.readouterr().err
    for needed in (companion.BOOK_URL, f"git clone {companion.REPOSITORY}", f"{companion.DISTRIBUTION}[student]",
                   "--book"):
        assert needed in said, said
    assert student.main(["--book", str(tmp_path), "3"]) == 2
    assert f"no chapter notebooks (NN_name.ipynb) in {tmp_path}" in capsys.readouterr().err
    out = tmp_path / "out"
    assert student.main(["--book", str(ROOT / "book"), "--out", str(out), "2"]) == 0
    assert (out / "02_attention.ipynb").is_file()


@pytest.mark.parametrize("environ,expected", [
    ({}, None), ({"OMP_NUM_THREADS": "1"}, 1), ({"MKL_NUM_THREADS": "3"}, 3), ({"OMP_NUM_THREADS": "4,2"}, 4),
    ({"OMP_NUM_THREADS": "1", "COMPANION_THREADS": "2"}, 2), ({"OMP_NUM_THREADS": " "}, None),
])
def test_setup_takes_the_thread_count_from_the_environment(environ, expected):
    from companion.notebook import threads_wanted

    assert threads_wanted(None, environ) == expected
    assert threads_wanted(3, environ) == 3


@pytest.mark.parametrize("bad,variable", [(0, "0"), (-1, "-1"), (1.5, "1.5"), ("2", "two"), (True, "all")])
def test_setup_refuses_a_bad_thread_count(bad, variable):
    from companion.notebook import threads_wanted

    with pytest.raises(ValueError, match="threads must be a positive int"):
        threads_wanted(bad, {})
    with pytest.raises(ValueError, match="OMP_NUM_THREADS="):
        threads_wanted(None, {"OMP_NUM_THREADS": variable})


def test_setup_keeps_a_count_the_reader_chose(monkeypatch):
    import torch

    from companion.notebook import setup

    before = torch.get_num_threads()
    for name in ("COMPANION_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    try:
        torch.set_num_threads(1)
        setup()
        assert torch.get_num_threads() == 1
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        setup()
        assert torch.get_num_threads() == 2
        setup(threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


def test_the_command_without_nbformat_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setattr(student, "nbformat", None)
    assert student.main(["3"]) == 2
    said = capsys.readouterr().err
    assert "nbformat" in said and f'"{companion.DISTRIBUTION}[student] @ git+{companion.REPOSITORY}"' in said


def test_the_footer_takes_the_address_from_the_configuration():
    """_config.yml writes the address once: the footer says {repository}, which
    book/_ext/repository_links.py fills from repository: url: when the book is built."""
    import importlib.util

    import yaml

    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    footer = config["html"]["extra_footer"]
    assert "{repository}" in footer and "github.com" not in footer
    assert config["sphinx"]["local_extensions"].get("repository_links") == "book/_ext"
    spec = importlib.util.spec_from_file_location("repository_links", ROOT / "book" / "_ext" / "repository_links.py")
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    filled = ext.fill_footer({"extra_footer": footer, "repository_url": config["repository"]["url"]})
    assert "{repository}" not in filled["extra_footer"]
    assert f'href="{companion.REPOSITORY}/graphs/contributors"' in filled["extra_footer"]
    from sphinx.errors import ConfigError

    with pytest.raises(ConfigError, match="no repository: url:"):
        ext.fill_footer({"extra_footer": footer})
    assert ext.fill_footer({"extra_footer": "plain"}) == {"extra_footer": "plain"}
