"""The gradebook's integrity (issue 18, "What was measured" 7 and "What to build" 5 and 6):
distinct feedback files, finite points, no formulas in the CSV, a chapter stamp that disagrees
with the content, one time budget per notebook (replays included), the same files from two runs,
a seeded kernel, a log per submission, the Gradescope and learning-platform exports."""
from __future__ import annotations

import csv
import json
import textwrap
import warnings
import zipfile
from pathlib import Path

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from companion.grade import Options, PointsError, file_names, grade, gradescope_results, load_points, main
from companion.grading import registry
from companion.grading.session import Limits

CHAPTERS = registry.load()
RIGHT_DOT = "def my_sparse_dot(a, b):\n    return sum(v * b.get(k, 0) for k, v in a.items())"
WRONG_DOT = "def my_sparse_dot(a, b):\n    return 0"
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _notebook(chapter: int | None, *cells: str, title: str | None = None):
    nb = new_notebook()
    if chapter is not None:
        nb.metadata["course"] = {"chapter": chapter}
    if title:
        nb.cells.append(new_markdown_cell(f"# {title}"))
    nb.cells += [new_code_cell(textwrap.dedent(c).strip()) for c in cells]
    return nb


def _write(nb, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nbformat.write(nb, path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same folder graded twice."""
    folder = tmp_path_factory.mktemp("integrity") / "submissions"
    _write(_notebook(1, RIGHT_DOT), folder / "sub" / "a.ipynb")
    _write(_notebook(1, WRONG_DOT), folder / "sub__a.ipynb")
    _write(_notebook(1, RIGHT_DOT), folder / "=1+2.ipynb")
    # Stamped chapter 1, but its title and answers are chapter 2's.
    _write(_notebook(1, "import torch", "def my_log_softmax(x, dim=-1):\n    m = x.amax(dim, keepdim=True)\n"
                                        "    return x - m - (x - m).exp().sum(dim, keepdim=True).log()", title="Attention"),
           folder / "restamped.ipynb")
    # The kernel is seeded before the student's code: the first random number is torch's after seed 0.
    _write(_notebook(1, "import torch\nfirst = torch.rand(1).item()",
                     "def my_sparse_dot(a, b):\n    raise ValueError(f'FIRST={first!r}')"), folder / "seeded.ipynb")
    # 6 s of CPU time, then the kernel ends: the replay has only what is left of the notebook's 10 s.
    _write(_notebook(1, "import time\nt = time.process_time()\nwhile time.process_time() - t < 6:\n    pass",
                     "import os\nos._exit(0)", RIGHT_DOT), folder / "slow_exit.ipynb")
    out = []
    for k in (1, 2):
        target = folder.parent / f"run{k}"
        options = Options(out=target / "gradebook.csv", feedback_dir=target / "feedback", jobs=2, progress=False,
                          students_csv=target / "students.csv", limits=Limits(notebook=10, cell=10, call=10, exercise=20))
        out.append({"entries": {Path(e["submission"]).name: e for e in grade([str(folder)], options)}, "dir": target})
    return out


def test_feedback_files_never_collide():
    assert file_names([{"submission": "s/sub/a.ipynb"}, {"submission": "s/sub__a.ipynb"}, {"submission": "s/SUB__A.ipynb"}]) \
        == ["sub__a", "sub__a-2", "SUB__A-3"]


def test_two_submissions_with_colliding_names_get_two_feedback_files(runs):
    feedback = runs[0]["dir"] / "feedback"
    texts = {p.name: p.read_text() for p in feedback.glob("*.md")}
    assert "sub__a.md" in texts and "sub__a-2.md" in texts
    pair = sorted(texts["sub__a.md"].splitlines()[0] + " " + texts["sub__a-2.md"].splitlines()[0] for _ in (0,))
    assert "**1 of 5 points**" in texts["sub__a.md"] and "sub/a.ipynb" in texts["sub__a.md"], pair
    assert "**0 of 5 points**" in texts["sub__a-2.md"] and "sub__a.ipynb" in texts["sub__a-2.md"]


def test_points_must_be_finite(tmp_path):
    for text in ('default = inf\n', '[points]\n"1.1" = nan\n', '[points]\n"1.1" = 1e400\n'):
        (tmp_path / "p.toml").write_text(text)
        with pytest.raises(PointsError, match="finite number"):
            load_points(tmp_path / "p.toml", CHAPTERS)
    (tmp_path / "p.json").write_text('{"points": {"1.1": Infinity}}')
    with pytest.raises(PointsError, match="finite number"):
        load_points(tmp_path / "p.json", CHAPTERS)


def test_a_file_name_cannot_put_a_formula_in_the_csv(runs):
    rows = list(csv.DictReader(open(runs[0]["dir"] / "gradebook.csv", encoding="utf-8")))
    cells = [v for r in rows for v in r.values()]
    assert not any(v[:1] in ("=", "+", "-", "@") for v in cells), cells
    assert any(r["submission"].endswith("=1+2.ipynb") and r["submission"].startswith("'") or
               "/=1+2" in r["submission"] for r in rows)
    formula = [r for r in rows if "=1+2" in r["submission"]][0]
    assert formula["student"] == "'=1+2"


def test_a_stamp_that_disagrees_with_the_content_is_warned_about_and_the_content_wins(runs):
    entry = runs[0]["entries"]["restamped.ipynb"]
    assert entry["chapter"] == 2 and "stamped as chapter 1 but its content is chapter 2" in entry["warning"]
    assert entry["exercises"][0]["status"] == "passed"


def test_one_time_budget_covers_the_notebook_and_its_replays(runs):
    """The budget is CPU time of the kernel (6 s, then 6 more in the replay: past the 10 s), so that
    the machine's load cannot change the outcome; the wall-clock time is reported, not asserted."""
    for run in runs:
        entry = run["entries"]["slow_exit.ipynb"]
        assert any("ran out" in n or "no time was left" in n for n in entry["notes"]), entry["notes"]
        print(f"slow_exit: {entry['seconds_notebook']} s of wall-clock time for the notebook")


def test_the_kernel_is_seeded(runs):
    message = runs[0]["entries"]["seeded.ipynb"]["exercises"][0]["message"]
    torch.manual_seed(0)
    assert f"FIRST={torch.rand(1).item()!r}" in message


def test_grading_twice_gives_the_same_files(runs):
    first, second = (sorted(p.relative_to(r["dir"]) for p in r["dir"].rglob("*") if p.is_file() and "-logs" not in str(p))
                     for r in runs)
    assert first == second and len(first) > 5
    for name in first:
        assert (runs[0]["dir"] / name).read_bytes() == (runs[1]["dir"] / name).read_bytes(), name


def test_a_log_per_submission(runs):
    logs = sorted((runs[0]["dir"] / "gradebook-logs").glob("*.log"))
    assert len(logs) == len(runs[0]["entries"])
    text = (runs[0]["dir"] / "gradebook-logs" / "slow_exit.log").read_text()
    assert "seconds_notebook:" in text and "kernel_restarts: 1" in text


def test_a_csv_keyed_by_student_for_a_learning_platform(runs):
    rows = list(csv.DictReader(open(runs[0]["dir"] / "students.csv", encoding="utf-8")))
    by_student = {r["student"]: r for r in rows}
    assert set(by_student) == {"sub", "sub__a", "'=1+2", "restamped", "seeded", "slow_exit"}
    assert by_student["sub"]["chapter 1 (out of 5)"] == "1" and by_student["sub__a"]["total"] == "0"
    assert by_student["restamped"]["chapter 2 (out of 5)"] == "1"


def test_gradescope_results_and_bundle(runs, tmp_path):
    results = gradescope_results(runs[0]["entries"]["a.ipynb"])
    assert results["score"] == 1 and len(results["tests"]) == 5
    assert results["tests"][0] == {"name": "Exercise 1.1: " + CHAPTERS[1].exercises[0].title, "number": "1.1",
                                   "score": 1.0, "max_score": 1.0, "status": "passed",
                                   "output": results["tests"][0]["output"], "visibility": "visible"}
    json.dumps(results, allow_nan=False)
    assert main(["--gradescope-bundle", str(tmp_path / "autograder.zip")]) == 0
    with zipfile.ZipFile(tmp_path / "autograder.zip") as z:
        assert sorted(z.namelist()) == ["run_autograder", "setup.sh"]
        run = z.read("run_autograder").decode()
        assert 'python" -m companion.grade "$ROOT/submission"' in run and '--gradescope "$ROOT/results/results.json"' in run
        assert 'ROOT="${AUTOGRADER_ROOT:-/autograder}"' in run
        assert all((z.getinfo(n).external_attr >> 16) & 0o111 for n in z.namelist())


# ------------------------------------------------------------------------------- issue 30
def test_one_bad_file_never_costs_the_class(tmp_path):
    """A lone surrogate in an exception's message, a file name that is not UTF-8 and 200 kB of
    nested brackets named .ipynb, graded next to a classmate: each is reported, the classmate gets
    full marks, and every output is written (names with escapes)."""
    import os

    folder = tmp_path / "submissions"
    _write(_notebook(1, RIGHT_DOT), folder / "bob.ipynb")
    _write(_notebook(1, "def my_sparse_dot(a, b):\n    raise ValueError('broken \\udcff text \\x1b[31mred')"),
           folder / "surrogate.ipynb")
    (folder / "brackets.ipynb").write_text("[" * 100_000 + "]" * 100_000)
    name = os.path.join(os.fsencode(folder), b"caf\xe9.ipynb")
    fd = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, (folder / "bob.ipynb").read_bytes())
    os.close(fd)
    out = tmp_path / "out" / "gradebook.csv"
    entries = grade([str(folder)], Options(out=out, feedback_dir=tmp_path / "out" / "feedback", jobs=2, progress=False,
                                           gradescope=None, limits=Limits(notebook=60, cell=30, call=10, exercise=30)))
    by_name = {Path(e["submission"]).name: e for e in entries}
    assert by_name["bob.ipynb"]["problem"] is None and by_name["bob.ipynb"]["total"] == 1  # my_sparse_dot, the one answer
    assert "nested too deeply" in by_name["brackets.ipynb"]["problem"]
    weird = by_name["caf\\udce9.ipynb"]
    assert weird["problem"] is None and weird["total"] == 1, weird
    broken = by_name["surrogate.ipynb"]["exercises"][0]
    assert broken["status"] == "error" and "\\udcff" in broken["message"] and "\x1b" not in broken["message"]
    document = json.loads((tmp_path / "out" / "gradebook.json").read_text(encoding="utf-8"))
    assert len(document["submissions"]) == 4
    text = "".join(p.read_text(encoding="utf-8") for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert "\x1b" not in text
    assert len(list((tmp_path / "out" / "feedback").glob("*.md"))) == 4


def test_the_previous_gradebook_survives_a_crash_while_writing(tmp_path):
    from companion.grade import _create

    path = tmp_path / "gradebook.json"
    path.write_text("the previous run\n")
    with pytest.raises(RuntimeError):
        with _create(path) as f:
            f.write("half of it")
            raise RuntimeError("the disk is full")
    assert path.read_text() == "the previous run\n" and [p.name for p in tmp_path.iterdir()] == ["gradebook.json"]


def test_a_submission_swapped_for_a_link_is_never_read_through_it(tmp_path):
    """Each file is opened once, without following a link; the grade comes from those bytes."""
    import os

    from companion.grade import collect, inspect

    folder = tmp_path / "submissions"
    _write(_notebook(1, WRONG_DOT), folder / "mallory.ipynb")
    _write(_notebook(1, RIGHT_DOT), tmp_path / "instructor" / "solution.ipynb")
    found = collect([str(folder)])
    (folder / "mallory.ipynb").unlink()
    os.symlink(tmp_path / "instructor" / "solution.ipynb", folder / "mallory.ipynb")  # after collection
    path, name, problem, _ = found[0]
    sub = inspect(path, name, CHAPTERS)
    assert sub.problem == "a link, not a file (not followed)" and sub.data is None
    # graded from the bytes read once: the file changing afterwards changes nothing
    os.unlink(folder / "mallory.ipynb")
    _write(_notebook(1, WRONG_DOT), folder / "mallory.ipynb")
    sub = inspect(folder / "mallory.ipynb", "mallory.ipynb", CHAPTERS)
    data = sub.data
    _write(_notebook(1, RIGHT_DOT), folder / "mallory.ipynb")
    assert data is not None and b"return 0" in data


def test_the_gradescope_bundle_installs_and_grades_in_a_clean_environment(tmp_path):
    """Issue 30: setup.sh installs the distribution by its real name (with the grade extra) into a
    new virtual environment of a Python >= 3.11, and run_autograder grades a submission there.
    Offline: from this clone (COURSE_SOURCE), the dependencies taken from this environment
    (COURSE_EXTRA_SITE), apt skipped. The image's ``python3`` and ``python3.12`` are too old (a
    stand-in for 3.10 that fails the version test and records being asked), a ``python3.11`` is on
    the PATH: setup.sh must refuse the old one it finds first and take 3.11. Not tested here (no network, no container): Gradescope's image itself, and the
    deadsnakes and uv routes to a Python when none is there."""
    import os
    import subprocess
    import sys
    import sysconfig

    from companion.grading.gradescope import DISTRIBUTION, bundle_files

    root = Path(__file__).resolve().parents[1]
    tomllib = __import__("tomllib")
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION and "grade" in project["optional-dependencies"]
    files = bundle_files()
    assert f'"{DISTRIBUTION}[grade] @ $SOURCE"' in files["setup.sh"] and "companion[grade]" not in files["setup.sh"]
    assert "python3.11" in files["setup.sh"] and "uv python install" in files["setup.sh"]
    autograder = tmp_path / "autograder"
    autograder.mkdir()
    for name, text in files.items():
        (autograder / name).write_text(text)
        (autograder / name).chmod(0o755)
    image = tmp_path / "image-bin"  # what Gradescope's image offers: python3 is 3.10
    image.mkdir()
    asked = tmp_path / "python3.10-asked"
    for name in ("python3", "python3.12"):  # asked before python3.11 (setup.sh tries newer ones first)
        (image / name).write_text(f"#!/bin/sh\necho \"$@\" >> {asked}\nexit 1\n")  # like 3.10: unsupported
        (image / name).chmod(0o755)
    (image / "python3.11").symlink_to(os.path.join(os.path.realpath(sys.base_prefix), "bin", "python3"))
    env = {"PATH": f"{image}:/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "AUTOGRADER_ROOT": str(autograder),
           "COURSE_SKIP_APT": "1",
           "COURSE_SOURCE": root.as_uri(), "COURSE_EXTRA_SITE": sysconfig.get_paths()["purelib"],
           "COURSE_PIP_OPTIONS": "--quiet --no-index --no-deps --no-build-isolation", "TMPDIR": str(tmp_path)}
    done = subprocess.run(["bash", str(autograder / "setup.sh")], env=env, capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "sys.version_info < (3, 11)" in asked.read_text()  # python3 was asked, and refused
    venv_python = autograder / "venv" / "bin" / "python"
    where = subprocess.run([str(venv_python), "-c", "import companion, sys; print(companion.__file__); print(sys.version_info >= (3, 11))"],
                           capture_output=True, text=True, env=env, cwd=tmp_path)
    assert str(autograder / "venv") in where.stdout and "True" in where.stdout, where
    _write(_notebook(1, RIGHT_DOT), autograder / "submission" / "homework.ipynb")
    done = subprocess.run(["bash", str(autograder / "run_autograder")], env=env, capture_output=True, text=True,
                          timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((autograder / "results" / "results.json").read_text())
    assert results["score"] == 1 and len(results["tests"]) == len(CHAPTERS[1].exercises), results


def test_forged_replies_with_many_type_names_cost_the_grader_no_lasting_memory():
    """Issue 30: a reply naming 20,000 distinct types (objects or exceptions) leaves at most 256
    classes behind in the grader (they grew its memory ninefold before)."""
    import tracemalloc

    from companion.grading import session, wire

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    structure = [{"$remote": {"type": f"Forged{i}", "module": "x", "why": "", "callable": False}} for i in range(20_000)]
    values = wire.decode(structure, {})
    assert type(values[-1]).__name__ == "Forged19999"
    for i in range(2_000):
        session.rebuild_exception({"type": f"ForgedError{i}", "mro": ["builtins.ValueError"], "message": "x"})
    del values, structure
    import gc

    gc.collect()
    grown = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(wire._REMOTE_CLASSES) <= 256 and len(session._EXCEPTIONS) <= 256
    assert grown < 8 * 2**20, grown


def test_a_forged_reply_of_millions_of_elements_costs_the_grader_no_memory_or_time():
    """Issue 30: a reply file whose description is 10 million empty lists (30 MB, within the size
    limit of a reply) is refused before it is parsed: the grader's memory grows by less than
    64 MiB and it takes less than a second of CPU time (before, parsing and decoding it grew the
    grader by 1.4 GB and took 9.6 s of CPU time, measured once on the course's 2-core machine,
    counted nowhere)."""
    import time
    import tracemalloc

    from safetensors.torch import save

    from companion.grading import wire

    data = save({}, metadata={wire.META_KEY: "[" + "[]," * 10_000_000 + "[]]"})
    tracemalloc.start()
    started = time.process_time()
    with pytest.raises(wire.WireError, match="more elements than any value"):
        wire.parse_safe(data)
    spent = time.process_time() - started
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 * 2**20 and spent < 1.0, (peak, spent)
    honest = wire.parse_safe(save({}, metadata={wire.META_KEY: json.dumps([[1, 2.5, "a,b"]] * 1000)}))
    assert honest[0] == [1, 2.5, "a,b"]
