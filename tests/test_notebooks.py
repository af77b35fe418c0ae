"""The chapter notebooks are committed executed, so that nbval's comparison means something.

nbval (run by scripts/test.sh over book/) re-executes every notebook and compares each stored
output; a cell saved without outputs would pass it trivially. These tests fail when a notebook
was saved unexecuted, partly executed, or executed out of order, and when the table of contents
and the files in book/ disagree.
"""
from pathlib import Path

import nbformat
import pytest
import yaml

from companion.notebook import install_cell_source

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "book").glob("*.ipynb"))


def toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [chapter["file"] for chapter in part["chapters"]]
    return files


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code" and c.source.strip()]


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks found in book/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_saved_executed_in_order(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    counts = [c.execution_count for c in code_cells(nb)]
    unrun = sum(count is None for count in counts)
    assert unrun == 0, f"{path.name}: {unrun} of {len(counts)} code cells were saved without being run"
    assert counts == list(range(1, len(counts) + 1)), (
        f"{path.name}: execution counts {counts} are not 1..{len(counts)} in order; "
        "re-run with scripts/execute_notebooks.py"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_errors_only_where_expected(path):
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(code_cells(nb)):
        errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
        expected = "raises-exception" in cell.metadata.get("tags", [])
        assert bool(errors) == expected, (
            f"{path.name}, code cell {i + 1}: "
            + ("raised an error but is not tagged raises-exception" if errors else "is tagged raises-exception but raised nothing")
        )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_opens_with_the_install_cell_then_the_set_up(path):
    nb = nbformat.read(path, as_version=4)
    first, second = code_cells(nb)[:2]
    assert first.source == install_cell_source(), (
        f"{path.name}: the first code cell must be companion.notebook.install_cell_source() "
        "(it installs the companion on Colab and does nothing where it is installed)"
    )
    assert "remove-cell" in first.metadata.get("tags", []), f"{path.name}: tag the install cell remove-cell"
    assert "setup(" in second.source, f"{path.name}: the second code cell must call companion.notebook.setup()"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_errors_shown_on_purpose_are_stored_as_one_line(path):
    """The reader sees `ValueError: message`, not a traceback through this machine's files."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(code_cells(nb)):
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                assert out.traceback == [f"{out.ename}: {out.evalue}"], (
                    f"{path.name}, code cell {i + 1}: re-run scripts/execute_notebooks.py, which trims it"
                )


def test_every_toc_entry_has_exactly_one_source():
    for entry in toc_files():
        sources = [s for s in (ROOT / f"{entry}.md", ROOT / f"{entry}.ipynb") if s.exists()]
        assert len(sources) == 1, f"{entry}: expected one of .md/.ipynb, found {[s.name for s in sources]}"


def test_every_notebook_is_in_the_toc():
    listed = {Path(f).name for f in toc_files()}
    for path in NOTEBOOKS:
        assert path.stem in listed, f"{path.name} is not listed in _toc.yml"


# --- What readers see: figures described, nothing cut off at the column's edge ---------------------

#: Chapters not yet converted to the conventions checked below (every figure with a caption, a name
#: and an alt text; long plotting code folded; code and printed lines within WIDTH columns). They
#: belong to other branches; the lead converts them at integration and then deletes this set. The
#: tests below skip these chapters (by number), and so does the browser test's alt-text check.
NOT_YET_CONVERTED = {5, 6, 7, 8, 9}

#: The column of the book's pages shows about 80 characters of code before scrolling sideways.
WIDTH = 78
#: A cell whose output is a figure and whose code is longer than this is folded (`hide-input`).
LONG_PLOT = 8
IMAGE_TYPES = ("image/png", "image/svg+xml", "image/jpeg", "image/gif")
# What the book shows of an output: the first of these it has (myst-nb's priority for HTML).
SHOWN_FIRST = ("text/html", "image/svg+xml", "image/png", "image/jpeg", "text/markdown", "text/latex", "text/plain")


def chapter_number(path: Path) -> int | None:
    prefix = path.name.split("_", 1)[0]
    return int(prefix) if prefix.isdigit() else None


def _converted_only(path: Path) -> None:
    if chapter_number(path) in NOT_YET_CONVERTED:
        pytest.skip(f"{path.name}: chapter {chapter_number(path)} is in NOT_YET_CONVERTED")


def image_cells(nb):
    return [
        (i, c) for i, c in enumerate(code_cells(nb))
        if any(t in o.get("data", {}) for o in c.get("outputs", []) for t in IMAGE_TYPES)
    ]


def shown_cells(nb):
    """Code cells that appear on the page (the install cell, tagged remove-cell, does not)."""
    return [(i, c) for i, c in enumerate(code_cells(nb)) if "remove-cell" not in c.metadata.get("tags", [])]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_figure_has_a_caption_a_name_and_an_alt_text(path):
    """mystnb.figure.caption and .name give the numbered figure; mystnb.image.alt describes it for a
    reader who cannot see it (myst-nb writes it into the <img>; without it the alt is a file name)."""
    _converted_only(path)
    nb = nbformat.read(path, as_version=4)
    problems = []
    for i, cell in image_cells(nb):
        meta = cell.metadata.get("mystnb", {})
        caption = meta.get("figure", {}).get("caption", "")
        name = meta.get("figure", {}).get("name", "")
        alt = meta.get("image", {}).get("alt", "")
        where = f"code cell {i + 1} ({cell.source.strip().splitlines()[0][:40]!r})"
        if len(caption.split()) < 4:
            problems.append(f"{where}: no caption (metadata mystnb.figure.caption)")
        if not name.startswith("fig-"):
            problems.append(f"{where}: no name fig-... (metadata mystnb.figure.name), got {name!r}")
        if len(alt.split()) < 6:
            problems.append(f"{where}: the alt text (metadata mystnb.image.alt) must describe the figure "
                            f"in a sentence, got {alt!r}")
        if len(cell.source.splitlines()) > LONG_PLOT and "hide-input" not in cell.metadata.get("tags", []):
            problems.append(f"{where}: {len(cell.source.splitlines())} lines of plotting code: tag it hide-input")
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_code_lines_fit_the_column(path):
    _converted_only(path)
    nb = nbformat.read(path, as_version=4)
    long = [
        f"code cell {i + 1}, line {k + 1} ({len(line)} characters): {line.strip()[:60]}"
        for i, cell in shown_cells(nb)
        for k, line in enumerate(cell.source.splitlines())
        if len(line) > WIDTH
    ]
    assert not long, f"{path.name}: {len(long)} code lines longer than {WIDTH} characters:\n  " + "\n  ".join(long)


def printed_lines(cell):
    """The lines of text the book shows below a code cell. An error shown on purpose is left out:
    it is stored as one line (scripts/execute_notebooks.py) and the page wraps it (course.css)."""
    for out in cell.get("outputs", []):
        if out.output_type == "stream":
            yield from out.text.splitlines()
        elif out.output_type in ("execute_result", "display_data"):
            shown = next((t for t in SHOWN_FIRST if t in out.data), None)
            if shown == "text/plain":
                yield from out.data["text/plain"].splitlines()


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_printed_lines_fit_the_column(path):
    """What a cell prints: its own output, a checker's message, companion source shown with
    inspect.getsource. (A long checker message is fixed in companion/exercises/_core.py, long
    companion source in the companion's module; then the chapter is re-executed.)"""
    _converted_only(path)
    nb = nbformat.read(path, as_version=4)
    long = [
        f"code cell {i + 1} ({len(line)} characters): {line.strip()[:60]}"
        for i, cell in shown_cells(nb)
        for line in printed_lines(cell)
        if len(line) > WIDTH
    ]
    assert not long, f"{path.name}: {len(long)} printed lines longer than {WIDTH} characters:\n  " + "\n  ".join(long)


def test_figure_names_are_unique():
    names = [
        cell.metadata["mystnb"]["figure"]["name"]
        for path in NOTEBOOKS
        for _, cell in image_cells(nbformat.read(path, as_version=4))
        if cell.metadata.get("mystnb", {}).get("figure", {}).get("name")
    ]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    assert not duplicates, f"figure names used twice: {duplicates}"
