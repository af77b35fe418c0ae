"""The grading command (``python -m companion.grade``) and its registry, wire format and sandbox.

Three grading runs are shared by the tests below (module-scoped fixtures):

* ``graded``: the book's chapters 1 to 4 (full marks), the untouched student versions of
  chapters 1 and 2 (zero, "not attempted"), and crafted submissions (one right and one wrong
  answer; a notebook that prints "passed" and monkeypatches the checkers; deleted check cells and
  renamed cells), with a points file, in one run over one folder of mixed chapters (the book's
  chapters 5 and later get their own run, marked slow: chapter 7 trains a model);
* ``hostile``: small notebooks that loop forever, exit the kernel, raise, and are graded with short
  time limits;
* a run with a 4-second notebook limit.

The other tests need no kernel (registry, wire format, points file, chapter recognition) or one
kernel driven directly (network, sandbox user, arguments changed in place, callbacks).
"""
from __future__ import annotations

import csv
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from companion import student
from companion.grade import Options, grade, inspect, load_points, PointsError
from companion.grading import registry, wire
from companion.grading.session import (
    MISSING,
    CallTimedOut,
    Limits,
    Sandbox,
    StudentKernel,
    kernel_env,
    rebuild_exception,
    release,
)

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CHAPTERS = registry.load()
FAST = [c for c in CHAPTERS.values() if isinstance(c.chapter, int) and c.chapter <= 4]  # graded with the crafted submissions
SLOW = [c for c in CHAPTERS.values() if c not in FAST]  # 5, 6, ... and the appendix (A)
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _notebook(chapter: int | None, *cells: str, title: str | None = None) -> nbformat.NotebookNode:
    nb = new_notebook()
    if chapter is not None:
        nb.metadata["course"] = {"chapter": chapter}
    if title:
        nb.cells.append(new_markdown_cell(f"# {title}"))
    nb.cells += [new_code_cell(textwrap.dedent(c).strip()) for c in cells]
    return nb


def _write(nb, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # a notebook without cell ids, on purpose
        warnings.simplefilter("ignore")
        nbformat.write(nb, path)
    return path


def _student(chapter: int):
    path = next(p for p in student.chapters() if p.name == CHAPTERS[chapter].notebook)
    book = nbformat.read(path, as_version=4)
    return book, student.student_version(book, path.name)


def _by_name(entries: list[dict]) -> dict[str, dict]:
    return {Path(e["submission"]).name: e for e in entries}


def _status(entry: dict) -> dict[str, str]:
    return {ex["number"]: ex["status"] for ex in entry["exercises"]}


# --------------------------------------------------------------------------- the registry
def test_registry_is_up_to_date_with_the_book():
    expected = registry.render(registry.build(BOOK))
    assert registry.REGISTRY.read_text(encoding="utf-8") == expected, (
        "companion/exercises/registry.json is out of date: run python -m companion.grading.registry")


def test_registry_lists_every_exercise_of_every_chapter():
    notebooks = {p.name: p for p in student.chapters()}
    for chapter in CHAPTERS.values():
        path = notebooks[chapter.notebook]
        nb = nbformat.read(path, as_version=4)
        assert len(chapter.exercises) == student.chapter_facts(path)["exercises"]
        assert registry.title_of(nb) == chapter.title
        solutions = "\n".join(c.source for c in nb.cells if student.is_solution(c))
        for k, ex in enumerate(chapter.exercises, start=1):
            assert ex.number == f"{chapter.chapter}.{k}"
            assert chapter.checker(ex).exercise == ex.exercise
            for name in ex.names:
                assert f"def {name}(" in solutions or f"{name} =" in solutions


def _copy_unstamped(source: Path, target: Path) -> None:
    """A copy of a chapter without metadata.course.chapter: a new notebook, not yet stamped."""
    nb = nbformat.read(source, as_version=4)
    nb.metadata.get("course", {}).pop("chapter", None)
    nbformat.write(nb, target)


def test_registry_picks_up_a_new_chapter_and_checks_its_numbering(tmp_path):
    shutil.copy(BOOK / CHAPTERS[2].notebook, tmp_path / CHAPTERS[2].notebook)
    built = registry.build(tmp_path)
    assert [c["chapter"] for c in built["chapters"]] == [2]
    # A new chapter 9 whose check cells call checkers numbered for chapter 2: caught, with the reason.
    _copy_unstamped(BOOK / CHAPTERS[2].notebook, tmp_path / "09_new_chapter.ipynb")
    with pytest.raises(registry.RegistryError, match=r"the 1\. exercise is Exercise 9\.1, but companion\.exercises\.attention\.stable_log_softmax says 'Exercise 2\.1'"):
        registry.build(tmp_path)


def test_stamping_the_chapter_into_the_metadata(tmp_path):
    _copy_unstamped(BOOK / CHAPTERS[3].notebook, tmp_path / CHAPTERS[3].notebook)
    assert registry.stamp(tmp_path) == [tmp_path / CHAPTERS[3].notebook]
    nb = nbformat.read(tmp_path / CHAPTERS[3].notebook, as_version=4)
    assert nb.metadata["course"]["chapter"] == 3 and registry.identify(nb, "x", CHAPTERS)[1] == "metadata"
    assert registry.stamp(tmp_path) == []  # once is enough
    assert registry.build(tmp_path)["chapters"][0]["chapter"] == 3
    nb.metadata["course"]["chapter"] = 4
    nbformat.write(nb, tmp_path / CHAPTERS[3].notebook)
    with pytest.raises(registry.RegistryError, match="metadata.course.chapter is 4, but the file name says 3"):
        registry.build(tmp_path)


def test_the_registry_command_says_it_is_up_to_date():
    done = subprocess.run([sys.executable, "-m", "companion.grading.registry", "--check"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------ recognizing a chapter
def test_a_chapter_is_recognized_by_metadata_title_import_or_file_name():
    def nb_with(**kw):
        nb = _notebook(kw.get("chapter"), *kw.get("cells", ()), title=kw.get("title"))
        return nb

    assert registry.identify(nb_with(chapter=3, title="Attention"), "x.ipynb", CHAPTERS) == (CHAPTERS[3], "metadata")
    assert registry.identify(nb_with(title="Attention"), "x.ipynb", CHAPTERS) == (CHAPTERS[2], "title")
    assert registry.identify(nb_with(title="attention!"), "x.ipynb", CHAPTERS)[0] is CHAPTERS[2]
    imports = "from companion.exercises import norm as check\n"
    assert registry.identify(nb_with(cells=[imports]), "x.ipynb", CHAPTERS) == (CHAPTERS[4], "checker import")
    assert registry.identify(nb_with(), "Alice - 05_positional_encoding.ipynb", CHAPTERS) == (CHAPTERS[5], "file name")
    with pytest.raises(registry.UnknownChapter, match="not a notebook of a known chapter .its title is 'My holidays'"):
        registry.identify(nb_with(title="My holidays"), "holidays.ipynb", CHAPTERS)


def test_files_that_cannot_be_graded_say_why(tmp_path):
    (tmp_path / "essay.pdf").write_bytes(b"%PDF-1.4 \x00\x01")
    (tmp_path / "notes.txt").write_text("my answers")
    (tmp_path / "broken.ipynb").write_text('{"cells": [')
    (tmp_path / "nocells.ipynb").write_text('{"metadata": {}}')
    _write(_notebook(None, "x = 1", title="My holidays"), tmp_path / "holidays.ipynb")
    problems = {p.name: inspect(p, p.name, CHAPTERS).problem for p in tmp_path.iterdir()}
    assert problems["essay.pdf"] == "not a notebook (a .pdf file; submit the .ipynb)"
    assert problems["notes.txt"] == "not a notebook (a .txt file; submit the .ipynb)"
    assert problems["broken.ipynb"].startswith("a corrupted notebook: it is not valid JSON")
    assert problems["nocells.ipynb"] == "a corrupted notebook: no cells"
    assert problems["holidays.ipynb"].startswith("not a notebook of a known chapter")
    assert inspect(tmp_path / "holidays.ipynb", "h", CHAPTERS, chapter=2).chapter is CHAPTERS[2]


def test_the_command_reports_bad_files_and_still_writes_the_gradebook(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "notes.txt").write_text("my answers")
    (tmp_path / "in" / "broken.ipynb").write_text("{")
    done = subprocess.run([sys.executable, "-m", "companion.grade", str(tmp_path / "in"), str(tmp_path / "missing.ipynb"),
                           "--out", str(tmp_path / "gb.csv"), "--quiet"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1
    assert "notes.txt: not a notebook" in done.stderr and "broken.ipynb: a corrupted notebook" in done.stderr
    assert "missing.ipynb: no such file or folder" in done.stderr
    assert "3 files could not be graded" in done.stderr
    rows = list(csv.DictReader(open(tmp_path / "gb.csv", encoding="utf-8")))
    assert len(rows) == 3 and all(r["problem"] for r in rows)
    assert json.loads((tmp_path / "gb.json").read_text())["submissions"][0]["problem"]


# --------------------------------------------------------------------------------- points
def test_points_file_toml_and_json(tmp_path):
    toml = tmp_path / "points.toml"
    toml.write_text('default = 2\n[points]\n"2.1" = 3\n"Exercise 7.1" = 0.5\n')
    points = load_points(toml, CHAPTERS)
    assert points["2.1"] == 3 and points["7.1"] == 0.5 and points["1.1"] == 2
    js = tmp_path / "points.json"
    js.write_text('{"points": {"1.2": 0}}')
    assert load_points(js, CHAPTERS)["1.2"] == 0 and load_points(js, CHAPTERS)["1.1"] == 1
    assert set(load_points(None, CHAPTERS).values()) == {1.0}
    for text, message in [('[points]\n"2.9" = 1\n', "gives points to exercise '2.9', which no chapter has"),
                          ('[points]\n"2.1" = -1\n', "must be a finite number >= 0"),
                          ('pointz = 1\n', "may hold `default = N` and a \\[points\\] table only"),
                          ('[points\n', "is not valid TOML")]:
        toml.write_text(text)
        with pytest.raises(PointsError, match=message):
            load_points(toml, CHAPTERS)


# ----------------------------------------------------------------------------- the wire format
def test_values_travel_back_whole(tmp_path):
    import numpy as np

    value = {
        "t": torch.arange(6.0).view(2, 3).T, "b": torch.tensor([True, False]), "i": 2**70, "f": float("nan"),
        "nested": [1, (2.5, "x"), {3, 4}, frozenset({5})], "none": None, "ell": ..., "c": 1 + 2j, "bytes": b"\x00\xff",
        "dtype": torch.float16, "size": torch.Size([2, 3]), "np": np.arange(4, dtype=np.int16), "np1": np.float32(1.5),
        7: "int key", "topk": torch.tensor([3.0, 1.0, 2.0]).topk(2), "empty": torch.zeros(0, 4),
    }
    wire.write_safe(tmp_path / "v.st", value)
    back = wire.read_safe(tmp_path / "v.st")
    assert torch.equal(back["t"], value["t"]) and back["b"].dtype == torch.bool
    assert back["i"] == 2**70 and back["f"] != back["f"] and back["nested"] == value["nested"]
    assert back["none"] is None and back["ell"] is Ellipsis and back["c"] == 1 + 2j and back["bytes"] == b"\x00\xff"
    assert back["dtype"] is torch.float16 and back["size"] == torch.Size([2, 3]) and back[7] == "int key"
    assert back["np"].dtype == np.int16 and back["np"].tolist() == [0, 1, 2, 3] and type(back["np1"]) is np.float32
    assert torch.equal(back["topk"].values, torch.tensor([3.0, 2.0])) and back["topk"][1].tolist() == [0, 2]
    assert back["empty"].shape == (0, 4)


def test_objects_that_are_not_data_stay_behind_as_named_placeholders(tmp_path, monkeypatch):
    class Student:
        pass

    monkeypatch.setattr(wire, "MAX_BYTES", 2**20 + 1000)  # leaves 1000 bytes for tensors
    wire.write_safe(tmp_path / "big.st", [torch.zeros(10), torch.zeros(1000)])
    small, big = wire.read_safe(tmp_path / "big.st")
    assert torch.equal(small, torch.zeros(10)) and not isinstance(big, torch.Tensor) and type(big).__name__ == "Tensor"
    monkeypatch.undo()

    wire.write_safe(tmp_path / "v.st", [Student(), lambda x: x])
    obj, fn = wire.read_safe(tmp_path / "v.st")
    assert type(obj).__name__ == "Student" and type(fn).__name__ == "function"
    assert not isinstance(obj, torch.Tensor)
    with pytest.raises(TypeError, match="cannot be used by the grader"):
        fn(1)


def test_a_forged_or_dangerous_reply_runs_no_code_and_is_refused(tmp_path):
    from safetensors.torch import save_file

    class Boom:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    (tmp_path / "pickle.st").write_bytes(pickle.dumps(Boom()))
    torch.save({"x": Boom()}, tmp_path / "torch.st")
    for name in ("pickle.st", "torch.st"):
        with pytest.raises(wire.WireError, match="unreadable reply file|truncated reply file"):
            wire.read_safe(tmp_path / name)
    assert not (tmp_path / "pwned").exists()
    for structure in ['{"$tensor": "t9"}', '{"$eval": "1"}', '{"$dtype": "__class__"}', '{"$ndarray": "t0", "dtype": "O"}',
                      '{"$dict": [[[1], 2]]}', '{"$float": "1e309x"}', '"' + "x" * 10 + '"' + "]"]:
        save_file({"t0": torch.zeros(2)}, tmp_path / "f.st", metadata={wire.META_KEY: structure})
        with pytest.raises(wire.WireError):
            wire.read_safe(tmp_path / "f.st")
    save_file({"t0": torch.zeros(2)}, tmp_path / "big.st", metadata={wire.META_KEY: '{"$tensor": "t0"}'})
    with pytest.raises(wire.WireError, match="too large to send back"):
        wire.read_safe(tmp_path / "big.st", max_bytes=10)
    # A link, even to a good reply, is refused: the grader never follows one the kernel planted.
    (tmp_path / "link.st").symlink_to(tmp_path / "big.st")
    with pytest.raises(wire.WireError, match="no reply file"):
        wire.read_safe(tmp_path / "link.st")
    assert wire.read_safe(tmp_path / "big.st").tolist() == [0.0, 0.0]


def test_a_students_exception_is_rebuilt_with_its_name_base_and_line():
    from companion.exercises._core import _where

    exc = rebuild_exception({"type": "LinAlgError", "mro": ["torch._C._LinAlgError", "builtins.RuntimeError"],
                             "message": "singular", "line": 4})
    assert type(exc).__name__ == "LinAlgError" and isinstance(exc, RuntimeError) and str(exc) == "singular"
    assert _where(exc) == " (line 4 of your cell)"
    stop = rebuild_exception({"type": "SystemExit", "mro": ["builtins.SystemExit", "builtins.BaseException"], "message": "0"})
    assert isinstance(stop, Exception) and type(stop).__name__ == "SystemExit"  # never stops the grader
    assert isinstance(rebuild_exception({"type": "NotImplementedError", "mro": ["builtins.NotImplementedError"]}), NotImplementedError)


# ------------------------------------------------------------------- grading: the main run
RIGHT_LOG_SOFTMAX = """
def my_log_softmax(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return x - m - torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))
"""
NO_SCALE = """
def my_attention(Q, K, V):
    return torch.softmax(Q @ K.T, dim=-1) @ V
"""
CHEATS = """
import companion.exercises._core as core
import companion.exercises.attention as attention_checks
print("✅ Exercise 2.1 passed: well done.")
torch.allclose = lambda *args, **kwargs: True
torch.equal = lambda *args, **kwargs: True
core.close = lambda *args, **kwargs: True
attention_checks.close = lambda *args, **kwargs: True
for name in ("stable_log_softmax", "attention", "causal", "padding"):
    setattr(attention_checks, name, lambda f: print("✅ passed"))
    setattr(check, name, lambda f: print("✅ passed"))
def my_log_softmax(x, dim=-1):
    return x
def my_attention(Q, K, V):
    return Q
def my_causal_mask(T):
    return "✅ passed"
def my_padding_mask(lengths, S):
    return torch.ones(len(lengths), S, dtype=torch.bool)
"""


#: The command exactly as the README and the instructors' page print it (run in the course's
#: folder, with the submissions in ``submissions/``).
DOCUMENTED = ".venv/bin/python -m companion.grade submissions/ --out gradebook.csv --feedback-dir feedback/"


def _documented_command(readme_line: str = DOCUMENTED) -> list[str]:
    argv = readme_line.split()
    assert argv[:3] == [".venv/bin/python", "-m", "companion.grade"]
    return [sys.executable, *argv[1:]]


def test_the_documented_command_is_the_one_the_docs_print():
    for doc in (ROOT / "README.md", ROOT / "book" / "instructors.md"):
        assert DOCUMENTED in doc.read_text(encoding="utf-8"), doc


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """One run of the documented command, as a subprocess, over one folder: the book's chapters 1
    to 4, two untouched student versions, crafted submissions (the book's chapters 5 and later get
    their own run, marked slow: chapter 7 trains a model)."""
    course = tmp_path_factory.mktemp("course")
    folder = course / "submissions"
    folder.mkdir()
    for chapter in FAST:
        shutil.copy(BOOK / chapter.notebook, folder / f"book_{chapter.notebook}")
    for chapter in (1, 2):
        _write(_student(chapter)[1], folder / "students" / f"untouched_{CHAPTERS[chapter].notebook}")
    # Exercise 2.1 right, exercise 2.2 wrong (no scale): a student version, two cells edited.
    book, nb = _student(2)
    sol = [i for i, c in enumerate(book.cells) if student.is_solution(c)]
    nb.cells[sol[0]].source, nb.cells[sol[1]].source = RIGHT_LOG_SOFTMAX.strip(), NO_SCALE.strip()
    _write(nb, folder / "students" / "one_right_one_wrong.ipynb")
    # Wrong answers, a fake "passed" and monkeypatched checkers (in the cell after the imports).
    book, nb = _student(2)
    nb.cells.append(new_code_cell(CHEATS.strip()))
    _write(nb, folder / "students" / "cheater.ipynb")
    # The book's answers, but every check cell deleted, cell ids, tags and metadata stripped,
    # the title changed and the solutions moved into one cell at the end: still recognized
    # (metadata) and graded from the registry.
    book = nbformat.read(BOOK / CHAPTERS[2].notebook, as_version=4)
    checks = set(student.check_cells(book))
    sols = [c.source for c in book.cells if student.is_solution(c)]
    cells = [c for i, c in enumerate(book.cells) if i not in checks and not student.is_solution(c)]
    nb = new_notebook(cells=cells + [new_code_cell("\n\n".join(sols))])
    for c in nb.cells:
        c.metadata = {}
        c.pop("id", None)
    nb.metadata["course"] = {"chapter": 2}
    nb.cells[0].source = "# My attention homework"
    _write(nb, folder / "students" / "renamed.ipynb")
    (folder / "students" / "readme.txt").write_text("not a notebook")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # a safety net against a hung run only: the grader's budgets are CPU time, so load changes no grade
    done = subprocess.run(_documented_command(), cwd=course, env=env, capture_output=True, text=True, timeout=3600)
    assert done.returncode == 1, done.stderr  # 1: one file (readme.txt) could not be graded
    assert "graded 9 notebooks" in done.stderr and "1 file could not be graded" in done.stderr, done.stderr
    entries = json.loads((course / "gradebook.json").read_text(encoding="utf-8"))["submissions"]
    return {"entries": entries, "by_name": _by_name(entries), "out": course, "stderr": done.stderr}


def _full_marks(by_name: dict, chapters: list) -> None:
    for chapter in chapters:
        entry = by_name[f"book_{chapter.notebook}"]
        assert entry["problem"] is None, entry
        assert entry["chapter"] == chapter.chapter and entry["identified_by"] in ("metadata", "title")
        failing = [ex["feedback"] for ex in entry["exercises"] if ex["status"] != "passed"]
        assert not failing, f"{chapter.notebook}: {failing}\n{entry['notes']}"
        assert entry["total"] == entry["out_of"] == len(chapter.exercises)


def test_the_books_own_notebooks_get_full_marks(graded):
    _full_marks(graded["by_name"], FAST)


@pytest.mark.slow
def test_the_books_later_chapters_get_full_marks_too(tmp_path):
    for chapter in SLOW:
        shutil.copy(BOOK / chapter.notebook, tmp_path / f"book_{chapter.notebook}")
    entries = grade([str(tmp_path)], Options(out=tmp_path / "out" / "gb.csv", jobs=2, progress=False))
    _full_marks(_by_name(entries), SLOW)


def test_untouched_student_versions_get_zero(graded):
    for chapter in (1, 2):
        entry = graded["by_name"][f"untouched_{CHAPTERS[chapter].notebook}"]
        assert entry["total"] == 0 and entry["out_of"] == len(CHAPTERS[chapter].exercises)
        assert set(_status(entry).values()) == {"not attempted"}
        assert all("raise NotImplementedError" in ex["message"] for ex in entry["exercises"])


def test_one_right_and_one_wrong_answer_get_exactly_their_points(graded):
    entry = graded["by_name"]["one_right_one_wrong.ipynb"]
    assert _status(entry) == {"2.1": "passed", "2.2": "not yet", "2.3": "not attempted", "2.4": "not attempted",
                              "2.5": "not attempted"}
    assert (entry["total"], entry["out_of"]) == (1, 5)
    wrong = entry["exercises"][1]
    assert "forgot the scale" in wrong["message"]
    assert wrong["feedback"].startswith("❌ Exercise 2.2 not yet: ") and wrong["message"] in wrong["feedback"]


def test_printing_passed_or_monkeypatching_the_checkers_gains_nothing(graded):
    entry = graded["by_name"]["cheater.ipynb"]
    assert entry["total"] == 0, entry
    # it imports the checkers' core to monkeypatch it: a sign of tampering (issue 30), no points,
    # with what the checks said still in the message
    assert set(_status(entry).values()) == {"error"}
    assert all("grader's machinery" in ex["message"] for ex in entry["exercises"])
    assert "you returned str" in entry["exercises"][2]["message"]


def test_deleted_check_cells_and_renamed_cells_are_still_graded(graded):
    entry = graded["by_name"]["renamed.ipynb"]
    assert entry["identified_by"] == "metadata" and entry["total"] == entry["out_of"] == 5, entry


def test_a_folder_of_mixed_chapters_gives_one_csv_row_per_submission(graded):
    rows = list(csv.DictReader(open(graded["out"] / "gradebook.csv", encoding="utf-8")))
    numbers = [ex.number for c in FAST for ex in c.exercises]
    assert list(rows[0]) == ["submission", "student", "chapter", *numbers, "total", "out_of", "problem", "warning"]
    assert len(rows) == len(graded["entries"]) == len(FAST) + 6
    by_name = {Path(r["submission"]).name: r for r in rows}
    mixed = by_name["one_right_one_wrong.ipynb"]
    assert (mixed["chapter"], mixed["2.1"], mixed["2.2"], mixed["total"], mixed["out_of"]) == ("2", "1", "0", "1", "5")
    assert mixed["1.1"] == "" and mixed["problem"] == ""
    assert by_name["readme.txt"]["problem"] == "not a notebook (a .txt file; submit the .ipynb)"
    assert by_name["readme.txt"]["total"] == ""
    assert by_name["book_03_multi_head_attention.ipynb"]["3.3"] == "1"
    assert {r["chapter"] for r in rows} == {"1", "2", "3", "4", ""}


def test_the_json_file_has_every_result_and_hint(graded):
    document = json.loads((graded["out"] / "gradebook.json").read_text(encoding="utf-8"))
    assert document["statuses"] == ["passed", "not yet", "not attempted", "error", "timed out"]
    assert document["points"]["2.1"] == 1 and document["sandbox"]
    entry = next(e for e in document["submissions"] if e["submission"].endswith("one_right_one_wrong.ipynb"))
    assert [ex["number"] for ex in entry["exercises"]] == ["2.1", "2.2", "2.3", "2.4", "2.5"]
    assert {"number", "title", "status", "message", "feedback", "points", "out_of"} <= set(entry["exercises"][0])
    assert entry["exercises"][0]["title"] == "A stable log-softmax"
    feedback = (graded["out"] / "feedback").glob("*one_right_one_wrong.md")
    text = next(feedback).read_text(encoding="utf-8")
    assert "**1 of 5 points**" in text and "you forgot the scale" in text


# ----------------------------------------------------------------- grading: hostile notebooks
HOSTILE = {
    "loop_in_a_cell": [
        "import time",
        "while True:\n    pass",
        "def my_sparse_dot(a, b):\n    return sum(v * b.get(k, 0) for k, v in a.items())",
    ],
    "loop_in_a_function": [
        "def my_sparse_dot(a, b):\n    while True:\n        pass",
        "def my_cosine(a, b, eps=1e-8):\n    import torch\n    n = torch.sqrt((a * a).sum(-1)).clamp_min(eps) * torch.sqrt((b * b).sum(-1)).clamp_min(eps)\n    return (a * b).sum(-1) / n",
    ],
    "ignores_interrupts": [
        "def my_cosine(a, b, eps=1e-8):\n    import torch\n    n = torch.sqrt((a * a).sum(-1)).clamp_min(eps) * torch.sqrt((b * b).sum(-1)).clamp_min(eps)\n    return (a * b).sum(-1) / n",
        "while True:\n    try:\n        while True:\n            pass\n    except KeyboardInterrupt:\n        pass",
        "def my_sparse_dot(a, b):\n    return sum(v * b.get(k, 0) for k, v in a.items())",
    ],
    "exits_the_kernel": [
        "def my_sparse_dot(a, b):\n    return sum(v * b.get(k, 0) for k, v in a.items())",
        "import os\nos._exit(0)",
        "exit()",
        "def my_cosine(a, b, eps=1e-8):\n    import torch\n    n = torch.sqrt((a * a).sum(-1)).clamp_min(eps) * torch.sqrt((b * b).sum(-1)).clamp_min(eps)\n    return (a * b).sum(-1) / n",
    ],
    "exits_while_checked": [
        "def my_sparse_dot(a, b):\n    import os\n    os._exit(1)",
        "def my_cosine(a, b, eps=1e-8):\n    import torch\n    n = torch.sqrt((a * a).sum(-1)).clamp_min(eps) * torch.sqrt((b * b).sum(-1)).clamp_min(eps)\n    return (a * b).sum(-1) / n",
    ],
    "raises": [
        "def my_sparse_dot(a, b):\n    total = 0\n    raise KeyError('oops')",
        "def my_cosine(a, b)\n    return 1",
    ],
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile")
    for name, cells in HOSTILE.items():
        _write(_notebook(1, *cells), folder / f"{name}.ipynb")
    options = Options(out=tmp_path_factory.mktemp("hostile_out") / "gb.csv", jobs=2, progress=False,
                      limits=Limits(notebook=120, cell=6, call=4, exercise=15))
    return _by_name(grade([str(folder)], options))


def test_an_endless_loop_in_a_cell_is_stopped_and_the_rest_graded(hostile):
    entry = hostile["loop_in_a_cell.ipynb"]
    assert _status(entry)["1.1"] == "passed" and entry["total"] == 1
    assert any("used more than the cell's 6 s of CPU time" in n for n in entry["notes"]), entry["notes"]


def test_an_endless_loop_in_a_function_times_out(hostile):
    entry = hostile["loop_in_a_function.ipynb"]
    assert _status(entry) == {"1.1": "timed out", "1.2": "passed", "1.3": "not attempted", "1.4": "not attempted",
                              "1.5": "not attempted"}
    assert "`my_sparse_dot` did not return within 4 s" in entry["exercises"][0]["message"]


def test_a_loop_that_ignores_interrupts_is_killed_and_the_notebook_replayed(hostile):
    entry = hostile["ignores_interrupts.ipynb"]
    assert _status(entry)["1.1"] == "passed" and _status(entry)["1.2"] == "passed", entry
    assert entry["kernel_restarts"] == 1


def test_a_cell_that_ends_the_kernel_is_skipped_and_the_rest_graded(hostile):
    entry = hostile["exits_the_kernel.ipynb"]
    assert _status(entry)["1.1"] == "passed" and _status(entry)["1.2"] == "passed", entry
    assert entry["kernel_restarts"] == 2
    assert any("ended the kernel" in n for n in entry["notes"]) and any("called exit()" in n for n in entry["notes"])


def test_a_function_that_ends_the_kernel_while_checked_is_an_error(hostile):
    entry = hostile["exits_while_checked.ipynb"]
    assert _status(entry)["1.1"] == "error" and "ended the notebook's kernel" in entry["exercises"][0]["message"]
    assert _status(entry)["1.2"] == "passed"  # the kernel was restarted and the notebook replayed


def test_a_students_exception_is_an_error_with_the_students_line(hostile):
    entry = hostile["raises.ipynb"]
    first, second = entry["exercises"][:2]
    assert first["status"] == "error" and first["message"] == "your code raised KeyError: 'oops' (line 3 of your cell)"
    assert second["status"] == "error" and second["message"].startswith("`my_cosine` is not defined: its cell (cell 1) raised SyntaxError")


def test_the_notebook_time_limit_stops_the_notebook_and_grades_what_ran(tmp_path):
    nb = _notebook(1, "def my_sparse_dot(a, b):\n    return sum(v * b.get(k, 0) for k, v in a.items())",
                   "import time\ntime.sleep(60)", "def my_cosine(a, b, eps=1e-8):\n    import torch\n    n = torch.sqrt((a * a).sum(-1)).clamp_min(eps) * torch.sqrt((b * b).sum(-1)).clamp_min(eps)\n    return (a * b).sum(-1) / n")
    _write(nb, tmp_path / "in" / "slow.ipynb")
    options = Options(out=tmp_path / "gb.csv", jobs=1, progress=False, limits=Limits(notebook=4, cell=4, call=4, exercise=8))
    [entry] = grade([str(tmp_path / "in")], options)
    assert _status(entry)["1.1"] == "passed"
    assert _status(entry)["1.2"] == "timed out" and "ran out of time" in entry["exercises"][1]["message"]


# --------------------------------------------------------------- one kernel, driven directly
KERNEL_CELLS = [
    "import os, socket, torch",
    "try:\n    socket.create_connection(('1.1.1.1', 80), timeout=3)\n    network = 'open'\nexcept OSError as exc:\n    network = str(exc)",
    "try:\n    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n    s.settimeout(3)\n    s.connect(('1.1.1.1', 80))\n    raw = 'open'\nexcept OSError as exc:\n    raw = str(exc)",
    "import companion\npath = os.path.join(os.path.dirname(companion.__file__), '.grade-write-test')\n"
    "try:\n    open(path, 'w').close()\n    os.remove(path)\n    writable = True\nexcept OSError:\n    writable = False",
    "uid = os.getuid()",
    """
def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()
    """,
    "def fill(t, items, table):\n    t.fill_(7.0)\n    items.append('new')\n    table['k'] = 1\n    return None",
    "def block(x, f, g):\n    return f(x) + g(x)",
    "def hang():\n    while True:\n        pass",
    "import subprocess\nuserns = subprocess.run(['unshare', '--user', 'true'], capture_output=True).returncode\n"
    "threads = __import__('threading').Thread(target=lambda: None)\nthreads.start()\nthreads.join()",
    "def make():\n    class Layer:\n        def __init__(self):\n            self.w = torch.ones(3)\n        def __call__(self, x):\n            return x * self.w\n    return Layer()",
]


@pytest.fixture(scope="module")
def kernel():
    sandbox = Sandbox.detect().reserve(1)
    sk = StudentKernel([(i, textwrap.dedent(s).strip()) for i, s in enumerate(KERNEL_CELLS)], sandbox, 0, kernel_env(),
                       Limits(call=20))
    sk.run()
    yield sk, sandbox
    sk.close()
    release(sandbox)


def test_the_kernel_has_no_network(kernel):
    sk, sandbox = kernel
    assert sk.lookup("network") != "open" and sk.lookup("raw") != "open"
    assert "network access is disabled while grading" in sk.lookup("network")


def test_without_bwrap_the_grader_says_what_is_not_guaranteed(monkeypatch):
    import companion.grading.sandbox as sandbox_module

    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    if os.geteuid() == 0:  # no setpriv either: a student's code would run as root, which is refused
        with pytest.raises(sandbox_module.SandboxRefused, match="refusing to run students' code as root"):
            Sandbox.detect()
        monkeypatch.setattr(Sandbox, "checked", lambda self: self)
    sandbox = Sandbox.detect()
    assert sandbox.kind == "none" and "bwrap" in sandbox.why_not
    assert sandbox.warning().startswith("warning: grading without a sandbox.")
    assert "NOT guaranteed" in sandbox.describe() and "other submissions included" in sandbox.describe()
    # no unshare: said plainly, not "sockets are refused"
    assert "NO network isolation" in sandbox.describe() and "a child process" in sandbox.describe()
    assert Sandbox.detect(enabled=False).why_not == "--no-sandbox was given"


def test_no_sandbox_as_root_never_runs_student_code_as_root():
    """Issue 30: --no-sandbox as root drops to an unprivileged user, or refuses where that user
    could not run this Python."""
    if os.geteuid() != 0:
        pytest.skip("not root")
    from companion.grading.sandbox import SandboxRefused, _unreachable, python_executable

    if _unreachable(python_executable()):
        with pytest.raises(SandboxRefused):
            Sandbox.detect(enabled=False)
        return
    sandbox = Sandbox.detect(enabled=False).reserve(1)
    try:
        assert sandbox.root and "--reuid=" in " ".join(sandbox.wrap(["true"], 0, []))
    finally:
        release(sandbox)


def test_without_the_sandbox_sockets_are_still_refused():
    if os.geteuid() == 0:
        pytest.skip("as root without a sandbox the kernel runs as another user (tested as an ordinary user in "
                    "test_grade_attacks)")
    sk = StudentKernel([(0, KERNEL_CELLS[0]), (1, KERNEL_CELLS[1])], Sandbox.detect(enabled=False), 0, kernel_env())
    try:
        sk.run()
        assert "network access is disabled while grading" in sk.lookup("network")
    finally:
        sk.close()


def test_only_what_the_kernel_needs_of_python_is_mounted():
    """Issue 30: a pip.conf (with an index token) next to the environment is not in the sandbox."""
    import sys

    from companion.grading.sandbox import _python_paths

    mounted = _python_paths()
    for prefix in {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix)}:
        if prefix.startswith("/usr"):
            continue
        conf = os.path.join(prefix, "pip.conf")
        assert not any(conf == m or conf.startswith(m.rstrip("/") + "/") for m in mounted), mounted
    assert any(m.endswith("/lib") for m in mounted)


@pytest.mark.skipif(not (hasattr(os, "geteuid") and os.geteuid() == 0), reason="separate users need root")
def test_as_root_the_kernel_is_an_unprivileged_user_that_cannot_write_the_course(kernel):
    sk, sandbox = kernel
    assert sandbox.root and sandbox.kind == "bwrap"
    assert sk.lookup("uid") == sandbox.uids[0] != 0
    assert sk.lookup("writable") is False


def test_the_kernel_cannot_make_a_user_namespace(kernel):
    """Issue 30: nested user namespaces are refused, as root (seccomp) and as a user (--disable-userns);
    threads still start (clone3 falls back to clone)."""
    sk, _ = kernel
    assert sk.lookup("userns") != 0


def test_arguments_changed_in_place_are_copied_back(kernel):
    sk, _ = kernel
    torch.manual_seed(0)
    model, x, y = torch.nn.Linear(3, 2), torch.randn(4, 3), torch.randn(4, 2)
    reference = torch.nn.Linear(3, 2)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    ref_optimizer = torch.optim.AdamW(reference.parameters(), lr=0.1)
    weight = model.weight
    for _ in range(2):
        loss = sk.lookup("train_step")(model, optimizer, x, y)
        ref_optimizer.zero_grad()
        ref_loss = torch.nn.functional.mse_loss(reference(x), y)
        ref_loss.backward()
        ref_optimizer.step()
        assert loss == pytest.approx(ref_loss.item(), rel=1e-5)
    assert model.weight is weight  # the same parameter objects, so the optimizer still holds them
    torch.testing.assert_close(model.weight, reference.weight)
    torch.testing.assert_close(model.weight.grad, reference.weight.grad)
    assert optimizer.state_dict()["state"][0]["step"] == 2
    torch.testing.assert_close(optimizer.state[model.weight]["exp_avg"], ref_optimizer.state[reference.weight]["exp_avg"])
    t, items, table = torch.zeros(2), [1], {}
    assert sk.lookup("fill")(t, items, table) is None
    assert t.tolist() == [7.0, 7.0] and items == [1, "new"] and table == {"k": 1}


def test_the_checkers_closures_are_rebuilt_in_the_kernel_from_data(kernel):
    sk, _ = kernel
    scale = torch.tensor(3.0)
    out = sk.lookup("block")(torch.ones(2), lambda v: v * scale, lambda v: v + 1)
    assert out.tolist() == [5.0, 5.0]
    assert not hasattr(sk, "refs") and not hasattr(sk, "_callback")  # nothing is kept by reference


def test_an_object_of_the_students_stays_in_the_kernel_and_can_be_called(kernel):
    sk, _ = kernel
    layer = sk.lookup("make")()
    assert type(layer).__name__ == "Layer"
    assert layer(torch.full((3,), 2.0)).tolist() == [2.0, 2.0, 2.0]
    assert layer.w.tolist() == [1.0, 1.0, 1.0]
    assert sk.lookup("nothing_of_that_name") is MISSING


def test_a_call_that_hangs_is_stopped(kernel):
    sk, _ = kernel
    sk.limits.call = 2
    try:
        with pytest.raises(CallTimedOut):
            sk.lookup("hang")()
    finally:
        sk.limits.call = 20
    assert sk.lookup("block")(torch.ones(1), lambda v: v, lambda v: v).tolist() == [2.0]  # still there
