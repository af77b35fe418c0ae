"""The course's rules hold in grading exactly as in the notebook (issue 18, "What was measured" 6).

The student's function runs in the sandboxed kernel; the kernel's helper calls it through
``rules.observe`` and sends the Observation and the function's source as data; the grader's proxy
records them, so that the grader's checker reaches the same verdict as the notebook's check cell.
Each case is graded by the command's code and checked in this process as a notebook would check
it (the function defined here, the checker called on it), and the two must agree word for word.
"""
from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from companion.exercises import attention as attention_checks
from companion.grade import Options, grade
from companion.grading.session import Limits

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CASES = {
    "library_softmax": ["import torch", """
def my_softmax(x):
    return torch.softmax(x, dim=-1)
"""],
    "aliased_import": ["from torch import softmax as s", """
def my_softmax(x):
    return s(x, -1)
"""],
    "method_alias": ["import torch.nn.functional as nnf", """
def my_softmax(x):
    return nnf.softmax(x, dim=1)
"""],
    "from_the_companion": ["from companion.attention import softmax as stable", """
def my_softmax(x):
    return stable(x)
"""],
    "companion_inside": ["import torch", """
def my_softmax(x):
    from companion import attention
    return attention.softmax(x, -1)
"""],
    "by_hand": ["import torch", """
def my_softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)
"""],
}


CALLS_THE_MODEL = """
def my_gpt_forward(model, idx):
    logits = model(idx)
    return logits[0] if isinstance(logits, tuple) else logits
"""


def _notebook_verdict(cells: list[str]):
    """What the check cell says in a notebook: the checker called on the function defined here."""
    namespace: dict = {"__name__": "notebook"}
    for source in cells:
        exec(compile(textwrap.dedent(source), "<IPY-INPUT>", "exec"), namespace)
    return attention_checks.stable_softmax(namespace["my_softmax"])


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("rules") / "submissions"
    folder.mkdir()
    for name, cells in CASES.items():
        nb = new_notebook(cells=[new_code_cell(textwrap.dedent(c).strip()) for c in cells])
        nb.metadata["course"] = {"chapter": 2}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.write(nb, folder / f"{name}.ipynb")
    # 7.2: the checker hands the student a model whose class counts its forward calls; the model
    # is rebuilt in the kernel from data, and the count comes back as data.
    nb = new_notebook(cells=[new_code_cell(CALLS_THE_MODEL)])
    nb.metadata["course"] = {"chapter": 7}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nbformat.write(nb, folder / "calls_the_model.ipynb")
    entries = grade([str(folder)], Options(out=folder.parent / "gb.csv", jobs=2, progress=False,
                                           limits=Limits(notebook=120, cell=60, call=20, exercise=60)))
    out = {Path(e["submission"]).stem: e["exercises"][0] for e in entries}
    exercises = next(e for e in entries if "calls_the_model" in e["submission"])["exercises"]
    out["calls_the_model"] = next(x for x in exercises if x["number"] == "7.2")  # the GPT's forward pass
    return out


@pytest.mark.parametrize("case", sorted(CASES))
def test_grading_and_the_notebook_agree(graded, case):
    verdict = _notebook_verdict(CASES[case])
    got = graded[case]
    assert got["status"] == ("passed" if verdict.passed else "not yet"), (got, verdict)
    assert got["message"] == verdict.message


@pytest.mark.parametrize("case", ["library_softmax", "aliased_import", "method_alias", "from_the_companion",
                                  "companion_inside"])
def test_the_library_or_the_companion_is_flagged_in_grading(graded, case):
    got = graded[case]
    assert got["status"] == "not yet" and "write the softmax yourself" in got["message"], got


def test_a_softmax_by_hand_passes(graded):
    assert graded["by_hand"]["status"] == "passed"


def test_calling_the_model_itself_is_seen_in_grading_as_in_the_notebook(graded):
    from companion.exercises import lm

    namespace: dict = {}
    exec(CALLS_THE_MODEL, namespace)
    verdict = lm.gpt_forward(namespace["my_gpt_forward"])
    got = graded["calls_the_model"]
    assert not verdict.passed and "you called the model itself" in verdict.message
    assert got["status"] == "not yet" and got["message"] == verdict.message, got
