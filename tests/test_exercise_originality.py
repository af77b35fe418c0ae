"""No exercise's answer is shown in its chapter before the exercise (issue 28, point 1).

A student who can copy the answer from a cell a few lines up has built nothing. For every exercise
of every chapter (the code cells tagged ``solution``), two rules, checked on the notebook as stored:

1. No line of the solution appears, as a line, in a code cell or a fenced code block of the chapter
   before the exercise. Lines that say nothing on their own are left out of the comparison: blank
   lines, comments, lines under 16 characters, ``def``/``class`` headers, ``return x`` of a bare
   name, imports, ``raise NotImplementedError``, and boilerplate: unpacking a shape
   (``B, T, V = logits.shape``), calling the model, the header of a loop or a branch.
2. No earlier cell defines a function whose body, with names normalized, is the solution's body
   (a ``naive_*`` reference implementation or a demo cell that *is* the answer).

Reference implementations shown for comparison belong after the exercise's check cell.
"""
from __future__ import annotations

import ast
import copy
import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
NOTEBOOKS = sorted(BOOK.glob("*.ipynb"))
MIN_CHARS = 16


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _tags(cell) -> list[str]:
    return cell.get("metadata", {}).get("tags", [])


_TRIVIAL = re.compile(
    r"^(#.*|def \w+\(.*\)\s*(->.*)?:|class \w+.*:|return \w+|import .*|from \S+ import .*"
    r"|raise NotImplementedError.*|[\])}]+[,:]?|\.\.\.|pass|else:|try:|finally:"
    # boilerplate that gives nothing away: unpacking a shape, calling the model, a loop's header
    r"|[\w*, ()]+ = [\w.]+\.(shape|size\(\))|[\w, ]+ = model\([\w, ]*\)|(for|while|if|elif|with) .*:)$")


def meaningful_lines(code: str) -> set[str]:
    """The lines of ``code`` that could give an answer away, whitespace-normalized."""
    out = set()
    for raw in code.splitlines():
        line = re.sub(r"\s+", " ", raw.split("  #")[0].strip())
        if len(line) < MIN_CHARS or _TRIVIAL.match(line):
            continue
        out.add(line)
    return out


class _Normalize(ast.NodeTransformer):
    """Renames every identifier to its first-seen order, so bodies compare up to names."""

    def __init__(self):
        self.names: dict[str, str] = {}

    def _n(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}")

    def visit_Name(self, node):  # noqa: N802 - ast's API
        return ast.copy_location(ast.Name(id=self._n(node.id), ctx=node.ctx), node)

    def visit_arg(self, node):  # noqa: N802
        node.arg = self._n(node.arg)
        node.annotation = None
        return node


def function_bodies(code: str) -> list[str]:
    """Each function's body in ``code`` (docstring dropped), dumped with names normalized."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    bodies = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = list(node.body)
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                body = body[1:]
            if not body or (len(body) == 1 and isinstance(body[0], (ast.Raise, ast.Pass))):
                continue
            norm = _Normalize()
            for arg in node.args.args:  # the parameters get the first names, in order
                norm._n(arg.arg)
            module = norm.visit(ast.Module(body=copy.deepcopy(body), type_ignores=[]))
            bodies.append(ast.dump(module))
    return bodies


_FENCE = re.compile(r"^(`{3,}|~{3,})(python|py|ipython3?)?\s*$(.*?)^\1\s*$", re.M | re.S)


def _printed(cell) -> str:
    """What a code cell printed: its streams and plain-text results (``inspect.getsource`` of the
    companion's implementation shows code as much as a code cell does)."""
    parts = []
    for out in cell.get("outputs", []):
        text = out.get("text") if out.get("output_type") == "stream" else out.get("data", {}).get("text/plain")
        if text:
            parts.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(parts)


def shown_code(cell) -> str:
    """The code a reader sees in a cell: a code cell's source and what it printed, a Markdown
    cell's fenced blocks."""
    if cell.get("cell_type") == "code":
        return _source(cell) + "\n" + _printed(cell)
    return "\n".join(m.group(3) for m in _FENCE.finditer(_source(cell)))


def exercises(nb: dict) -> list[tuple[str, int, str]]:
    """(label, index of the exercise's Markdown cell, the solution's code) for each exercise."""
    cells = nb["cells"]
    found, label_at = [], {}
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown":
            for match in re.finditer(r"```\{exercise\}[^\n]*\n:label:\s*(\S+)", _source(cell)):
                label_at[match.group(1)] = i
    for label, at in label_at.items():
        solution = []
        for cell in cells[at:]:
            if cell.get("cell_type") == "code" and "solution" in _tags(cell):
                solution.append(_source(cell))
            elif solution and cell.get("cell_type") == "code":
                break
        if solution:
            found.append((label, at, "\n".join(solution)))
    return found


def copied(nb: dict, at: int, solution: str) -> list[str]:
    """What of ``solution`` the chapter shows before cell ``at``: each problem as a sentence."""
    problems = []
    wanted = meaningful_lines(solution)
    bodies = set(function_bodies(solution))
    for i, cell in enumerate(nb["cells"][:at]):
        code = shown_code(cell)
        if not code:
            continue
        for line in sorted(wanted & meaningful_lines(code)):
            problems.append(f"cell {i} already shows the solution's line {line!r}")
        if cell.get("cell_type") == "code" and bodies & set(function_bodies(code)):
            problems.append(f"cell {i} defines a function whose body is the solution's")
    return problems


CASES = [(path, label, at, solution) for path in NOTEBOOKS
         for label, at, solution in exercises(json.loads(path.read_text()))]


def test_every_chapter_has_its_exercises_found():
    """The parser sees the book's exercises (a broken pattern would make every case vanish)."""
    assert len(CASES) >= 60, len(CASES)
    chapters = {path.name for path, *_ in CASES}
    assert len(chapters) >= 13, sorted(chapters)


@pytest.mark.parametrize("path,label,at,solution", CASES, ids=[f"{p.stem[:2]}-{lab}" for p, lab, *_ in CASES])
def test_the_answer_is_not_shown_before_the_exercise(path, label, at, solution):
    nb = json.loads(path.read_text())
    problems = copied(nb, at, solution)
    assert not problems, f"{path.name}, exercise {label}:\n  " + "\n  ".join(problems)


# --- the rule itself can fail -------------------------------------------------------------------------

def _nb(*cells):
    return {"cells": [dict(c, metadata=c.get("metadata", {})) for c in cells]}


EXERCISE_MD = {"cell_type": "markdown", "source": "```{exercise} Softmax\n:label: ex-x\n\nWrite it.\n```"}
SOLUTION = {"cell_type": "code", "metadata": {"tags": ["solution"]},
            "source": "def my_softmax(x):\n    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)\n"
                      "    return e / e.sum(dim=-1, keepdim=True)\n"}


def test_a_line_shown_earlier_is_caught():
    demo = {"cell_type": "code", "source": "e = torch.exp(x - x.max(dim=-1, keepdim=True).values)\nprint(e)"}
    nb = _nb(demo, EXERCISE_MD, SOLUTION)
    [(label, at, solution)] = exercises(nb)
    assert label == "ex-x" and any("already shows" in p for p in copied(nb, at, solution))


def test_a_renamed_reference_implementation_is_caught():
    naive = {"cell_type": "code",
             "source": "def naive_softmax(scores):\n    \"\"\"Reference.\"\"\"\n"
                       "    z = torch.exp(scores - scores.max(dim=-1, keepdim=True).values)\n"
                       "    return z / z.sum(dim=-1, keepdim=True)\n"}
    nb = _nb(naive, EXERCISE_MD, SOLUTION)
    [(_, at, solution)] = exercises(nb)
    assert any("body is the solution's" in p for p in copied(nb, at, solution))


def test_a_fenced_block_in_the_text_is_caught():
    text = {"cell_type": "markdown",
            "source": "The answer:\n\n```python\nreturn e / e.sum(dim=-1, keepdim=True)\n```\n"}
    nb = _nb(text, EXERCISE_MD, SOLUTION)
    [(_, at, solution)] = exercises(nb)
    assert copied(nb, at, solution)


def test_the_same_code_after_the_exercise_is_allowed():
    naive = {"cell_type": "code", "source": SOLUTION["source"].replace("my_", "naive_")}
    nb = _nb(EXERCISE_MD, SOLUTION, {"cell_type": "code", "source": "check.softmax(my_softmax)"}, naive)
    [(_, at, solution)] = exercises(nb)
    assert copied(nb, at, solution) == []


def test_short_and_structural_lines_do_not_count():
    assert meaningful_lines("def f(x):\n    return out\n    # a comment\n    y = x + 1\n") == set()
