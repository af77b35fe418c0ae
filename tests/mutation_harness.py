"""The mutation harness for the exercise checkers: wrong solutions that must never pass.

Each chapter has a registry file ``tests/test_checker_mutations_chNN.py`` that defines

    EXERCISES = [
        Exercise(check.stable_log_softmax, reference=my_log_softmax, mutants=[
            Mutant("no shift by the maximum", lambda x: ..., expect="overflow"),
            ...
        ]),
    ]

and turns it into tests with :func:`make_tests`. A mutant is a plausible wrong solution: the reference
with one mistake (wrong axis, missing or wrong scale, transposes, off-by-one masks, sign flips,
sampling instead of argmax, integer truncation, forbidden library calls, wrong return type, None,
NaN, ...). For every mutant the checker must

* not pass it (no false pass),
* not fail inside its own code (no "internal error"),
* give the specific hint named by ``expect`` (a substring of the message) when the mutant is a
  mistake the checker claims to recognize; ``expect=None`` accepts any hint, specific or generic.

A new chapter adds its own registry file; ``tests/test_checker_mutations.py`` checks that every
checker of ``companion.exercises`` has a registry entry with at least 10 mutants, and prints the
totals (also: ``python tests/mutation_harness.py``).
"""
from __future__ import annotations

import importlib
import inspect
import json
import pkgutil
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MIN_MUTANTS = 10
SUMMARY = ROOT / "_build" / "checker_mutations.json"


@dataclass
class Mutant:
    """One wrong solution. ``expect``: a substring of the specific hint it must get (None: any hint);
    with ``raised=True`` the hint must be the report of an exception raised by the mutant's own code."""

    name: str
    fn: Callable[..., Any]
    expect: str | None = None
    raised: bool = False


@dataclass
class Exercise:
    """A checker, the reference solution that must pass it, and the wrong solutions that must not."""

    checker: Callable[..., Any]
    reference: Callable[..., Any]
    mutants: list[Mutant] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.checker.exercise


@dataclass
class Outcome:
    exercise: str
    mutant: str
    status: str  # passed / hint / not attempted / internal error
    kind: str  # specific / generic / raised / internal / ""
    message: str
    problem: str | None  # why this outcome is wrong, or None


def run_mutant(exercise: Exercise, mutant: Mutant) -> Outcome:
    """Run one mutant through its checker and judge the feedback."""
    try:
        fb = exercise.checker(mutant.fn)
    except BaseException as exc:  # noqa: BLE001 - a checker must never raise; report it
        return Outcome(exercise.name, mutant.name, "internal error", "internal", repr(exc), f"the checker raised {exc!r}")
    problem = None
    if fb.passed:
        problem = "FALSE PASS: the checker passed a wrong solution"
    elif fb.status == "internal error":
        problem = f"CHECKER CRASH: {fb.message}"
    elif fb.status != "hint":
        problem = f"a wrong solution got {fb.status!r}: {fb.message}"
    elif mutant.raised:
        if fb.kind != "raised" or (mutant.expect and mutant.expect not in fb.message):
            problem = f"expected the report of the mutant's own exception ({mutant.expect!r}), got: {fb.message}"
    elif mutant.expect is not None:
        if fb.kind != "specific":
            problem = f"expected the specific hint {mutant.expect!r}, got a {fb.kind} hint: {fb.message}"
        elif mutant.expect not in fb.message:
            problem = f"expected the specific hint {mutant.expect!r}, got: {fb.message}"
    return Outcome(exercise.name, mutant.name, fb.status, fb.kind, fb.message, problem)


#: Outcomes already computed in this run: (exercise, mutant) -> Outcome (the specificity test reuses them).
_OUTCOMES: dict[tuple[str, str], Outcome] = {}


def outcome_of(exercise: Exercise, mutant: Mutant) -> Outcome:
    key = (exercise.name, mutant.name)
    if key not in _OUTCOMES:
        _OUTCOMES[key] = run_mutant(exercise, mutant)
    return _OUTCOMES[key]


def misnamed(exercise: Exercise) -> list[str]:
    """Specific hints that fire for a mistake they do not name: mutant B gets word for word the hint
    that mutant A expects, where B expects another hint or none (neither text inside the other)."""
    owner = {}  # message -> a mutant that expects it
    for mutant in exercise.mutants:
        outcome = outcome_of(exercise, mutant)
        if mutant.expect and not mutant.raised and outcome.kind == "specific" and mutant.expect in outcome.message:
            owner.setdefault(outcome.message, mutant)
    problems = []
    for mutant in exercise.mutants:
        outcome = outcome_of(exercise, mutant)
        other = owner.get(outcome.message)
        if outcome.kind != "specific" or other is None or other is mutant:
            continue
        if mutant.expect and (mutant.expect in other.expect or other.expect in mutant.expect
                              or mutant.expect in outcome.message):
            continue
        problems.append(f"{exercise.name}: mutant {mutant.name!r} got the hint meant for {other.name!r}: "
                        f"{outcome.message}")
    return problems


def make_tests(exercises: list[Exercise]):
    """Three pytest test functions for a chapter's registry: the references pass, the mutants do not,
    and each specific hint fires only for the mistake it names."""

    @pytest.mark.parametrize("exercise", exercises, ids=[e.name for e in exercises])
    def test_reference_passes_and_enough_mutants(exercise):
        fb = exercise.checker(exercise.reference)
        assert fb.passed, f"{exercise.name}: the reference solution does not pass: {fb}"
        assert len(exercise.mutants) >= MIN_MUTANTS, f"{exercise.name}: only {len(exercise.mutants)} mutants"
        names = [m.name for m in exercise.mutants]
        assert len(set(names)) == len(names), f"{exercise.name}: mutant names repeat"

    cases = [(e, m) for e in exercises for m in e.mutants]

    @pytest.mark.parametrize("exercise,mutant", cases, ids=[f"{e.name}: {m.name}" for e, m in cases])
    def test_mutant_is_caught(exercise, mutant):
        outcome = outcome_of(exercise, mutant)
        assert outcome.problem is None, f"{exercise.name}, mutant {mutant.name!r}: {outcome.problem}"

    @pytest.mark.parametrize("exercise", exercises, ids=[e.name for e in exercises])
    def test_specific_hints_name_their_mistake(exercise):
        problems = misnamed(exercise)
        assert not problems, "\n".join(problems)

    return test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake


# --- every registry, every checker ----------------------------------------------------------------

def registries() -> dict[str, list[Exercise]]:
    """Every chapter's registry: module name -> EXERCISES (from tests/test_checker_mutations_*.py)."""
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    found = {}
    for path in sorted(HERE.glob("test_checker_mutations_*.py")):
        module = importlib.import_module(path.stem)
        found[path.stem] = list(getattr(module, "EXERCISES", []))
    return found


def all_checkers() -> dict[str, Callable[..., Any]]:
    """Every checker in companion.exercises: 'Exercise C.k' -> the checker function."""
    import companion.exercises as package

    checkers = {}
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"companion.exercises.{info.name}")
        for _, obj in inspect.getmembers(module, callable):
            name = getattr(obj, "exercise", None)
            if isinstance(name, str) and obj.__module__ == module.__name__:
                checkers[name] = obj
    return checkers


def summary(exercises: list[Exercise]) -> dict:
    """Run every mutant; the counts of the closing report and every problem found."""
    outcomes = [run_mutant(e, m) for e in exercises for m in e.mutants]
    kinds = Counter(o.kind for o in outcomes if o.status == "hint")
    return {
        "exercises": len(exercises),
        "wrong solutions tried": len(outcomes),
        "specific hints": kinds["specific"],
        "generic hints": kinds["generic"],
        "errors of the wrong solution reported with their line": kinds["raised"],
        "false passes": sum(o.status == "passed" for o in outcomes),
        "checker crashes": sum(o.status == "internal error" for o in outcomes),
        "other problems": [f"{o.exercise}, {o.mutant}: {o.problem}" for o in outcomes if o.problem],
        "per exercise": {e.name: len(e.mutants) for e in exercises},
    }


def main() -> int:
    exercises = [e for group in registries().values() for e in group]
    result = summary(exercises)
    SUMMARY.parent.mkdir(parents=True, exist_ok=True)
    SUMMARY.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    for key, value in result.items():
        if key != "per exercise" and not isinstance(value, list):
            print(f"{key}: {value}")
    for problem in result["other problems"]:
        print("PROBLEM", problem)
    return 0 if not result["other problems"] else 1


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
