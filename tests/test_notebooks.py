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
