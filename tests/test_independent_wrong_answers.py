"""The independent red-team cases (tests/independent/, written from the student notebooks alone by
someone who never read the checkers) run against the checkers.

Every wrong case must get a hint (never a pass, never "could not be checked"), every right case
must pass. The counts of the closing report (tried, specific, generic, raised, false passes,
crashes): ``python tests/test_independent_wrong_answers.py`` (``-v`` lists every specific hint next
to what the case says is wrong, for reading them: a hint that names another mistake is misleading).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import linecache
import sys
import warnings
from collections import Counter
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent / "independent"
CHAPTERS = sorted(HERE.glob("ch[0-9][0-9].py")) + sorted(HERE.glob("chA.py"))  # chapters 1-10, appendix A
#: Round 3 (outside red team o1, issue 33): exercises 1.3, 1.4, 2.2-2.4, 4.1-4.3, 6.1, 6.2, kept as written.
ROUND3 = sorted((HERE / "round3").glob("ch*.py"))

#: Cases whose verdict rests on a reading the checkers do not follow, with the reason.
JUDGEMENT = {
    ("10.1", "random_excludes_original"): "shifts the shares by 0.1 / n_chars = 0.14 points, below what a "
                                          "million draws can tell (the case itself says so)",
    # Round 3 (o1). Debatable cases where the exercise's text is silent: accepted until the text says otherwise.
    ("2.2", "naive_softmax"): "exp(s) / sum(exp(s)) without the row maximum; 2.2's text lists what the check tries "
                              "and large scores are not among them (2.1 is the stable softmax); the outsider marks it "
                              "debatable. Rejecting needs a line in the text (book/02, h1's) and a large-score class",
    ("2.3", "shared_cached_tensor"): "returns the same bool tensor object for the same (T, S): the values are right "
                                     "on every call; the text does not ask for a fresh tensor per call",
    ("2.4", "shared_cached_tensor"): "same as 2.3's, keyed by (lengths, S)",
    # Two outsiders disagree on 4.3's order of the weight: round 2 marked weight-in-float32 right, round 3 wrong.
    # The text decides: "cast the normalized tokens back to x's dtype, multiply by weight ... (Llama's RMSNorm
    # does exactly this)", so the check now rejects it (one rounding apart, on about a quarter of 4,096 outputs).
    ("4.3", "weight_in_float32"): "round 2 labelled it right; the text prescribes Llama's order, the check rejects it",
    ("11.7", "right_manual_scan"): "labelled right, but it tries the names in a set's order: where '<|end' and "
                                   "'<|endoftext|>' both match, the text says the longer wins, and the set puts the "
                                   "shorter first on some hash seeds (the case passed under PYTHONHASHSEED=0 and "
                                   "failed under others); with 16 more nested pairs the check rejects it on every seed",
}

#: Round 3 false passes left open this round, with why (each is a failing case the test tolerates and prints).
OPEN: dict = {}  # (exercise, case) -> why a known false pass is not fixed yet; none today


def _load(path: Path):
    if str(path.parent) not in sys.path:  # the case files import their folder's _junk.py
        sys.path.insert(0, str(path.parent))
    sys.modules.pop("_junk", None)  # each folder's own copy
    spec = importlib.util.spec_from_file_location(f"_independent_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(source: str, filename: str):
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


def run(case: dict, prelude: str, index: int):
    """``(feedback or None, problem or None)`` for one case."""
    import torch

    torch.manual_seed(0)
    namespace = {"__name__": "__main__"}
    filename = f"<independent-{case['exercise']}-{case['name']}-{index}>"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(_compile(prelude, filename + "-prelude"), namespace)
            exec(_compile(case["source"], filename), namespace)
            args = eval(f"({case['call']},)", namespace)
        checker = getattr(importlib.import_module(case["module"]), case["checker"])
    except Exception as exc:  # noqa: BLE001 - a broken case, reported as such
        return None, f"CASE ERROR: {exc!r}"
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fb = checker(*args)
    except BaseException as exc:  # noqa: BLE001 - a checker must never raise
        return None, f"CHECKER RAISED {exc!r}"
    if fb.status == "internal error":
        return fb, f"CHECKER CRASH: {fb.message}"
    if case["expect"] == "wrong" and fb.passed:
        if (case["exercise"], case["name"]) in JUDGEMENT:
            return fb, None
        if (case["exercise"], case["name"]) in OPEN:
            return fb, "OPEN"
        return fb, "FALSE PASS"
    if case["expect"] == "right" and not fb.passed:
        if (case["exercise"], case["name"]) in JUDGEMENT:
            return fb, None
        return fb, f"FALSE REJECT: {fb.message}"
    if case["expect"] == "wrong" and fb.status not in ("hint", "not attempted"):  # None, a stub: not attempted
        return fb, f"a wrong case got {fb.status!r}: {fb.message}"
    return fb, None


@pytest.mark.parametrize("path", CHAPTERS + ROUND3,
                         ids=[p.stem for p in CHAPTERS] + [f"round3-{p.stem}" for p in ROUND3])
def test_independent_cases(path):
    module = _load(path)
    problems = []
    for i, case in enumerate(module.CASES):
        _, problem = run(case, module.PRELUDE, i)
        if problem == "OPEN":
            print(f"open false pass: {case['exercise']} {case['name']}: {OPEN[case['exercise'], case['name']]}")
        elif problem:
            problems.append(f"{case['exercise']} {case['name']} ({case['expect']}: {case['why']}): {problem}")
    assert not problems, "\n".join(problems)


def test_enough_independent_cases():
    cases = [c for p in CHAPTERS for c in _load(p).CASES]
    assert sum(c["expect"] == "wrong" for c in cases) >= 300
    assert len({c["exercise"] for c in cases}) >= 37


def test_round3_cases_kept():
    """o1's 490 cases for 10 exercises, kept as the outsider wrote them (moved only into JUDGEMENT or OPEN)."""
    cases = [c for p in ROUND3 for c in _load(p).CASES]
    assert len(cases) >= 490
    assert {c["exercise"] for c in cases} == {"1.3", "1.4", "2.2", "2.3", "2.4", "4.1", "4.2", "4.3", "6.1", "6.2"}


def main(verbose: bool = False) -> int:
    counts, problems = Counter(), []
    for path in CHAPTERS + ROUND3:
        module = _load(path)
        for i, case in enumerate(module.CASES):
            fb, problem = run(case, module.PRELUDE, i)
            counts["tried"] += 1
            counts[case["expect"]] += 1
            if problem:
                problems.append(f"{case['exercise']} {case['name']}: {problem}")
                counts["false passes" if problem in ("FALSE PASS", "OPEN") else "crashes" if "CHECKER" in problem
                       else "other problems"] += 1
            if fb is not None and case["expect"] == "wrong":
                counts["judgement: passed" if fb.passed else f"hint: {fb.kind}" if fb.kind else fb.status] += 1
                if verbose and fb.kind == "specific":
                    print(f"{case['exercise']:>5} {case['name']:<28} {case['why'][:60]}\n      -> {fb.message[:150]}")
    for key in ("tried", "wrong", "right", "hint: specific", "hint: generic", "hint: raised", "not attempted",
                "judgement: passed",
                "false passes", "crashes", "other problems"):
        print(f"{key}: {counts[key]}")
    for problem in problems:
        print("PROBLEM", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent.parent))
    sys.exit(main("-v" in sys.argv))
