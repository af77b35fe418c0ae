"""Every checker has its mutation registry (the mutants themselves run in test_checker_mutations_chNN.py).

The totals of the closing report (wrong solutions tried, specific and generic hints, false passes,
checker crashes): ``python tests/mutation_harness.py`` (also written to _build/checker_mutations.json).
"""
import re

import pytest

import mutation_harness as harness
from companion.exercises import _core


def test_every_checker_has_a_registry_with_enough_mutants():
    registered = {e.name: e for group in harness.registries().values() for e in group}
    checkers = harness.all_checkers()
    missing = sorted(set(checkers) - set(registered), key=lambda s: [int(p) for p in re.findall(r"\d+", s)])
    assert not missing, (f"checkers without a mutation registry: {missing}; add them to "
                         "tests/test_checker_mutations_chNN.py (see tests/mutation_harness.py)")
    for name, exercise in registered.items():
        assert exercise.checker is checkers.get(name), f"{name}: the registry names another checker"
        assert len(exercise.mutants) >= harness.MIN_MUTANTS, f"{name}: {len(exercise.mutants)} mutants"


def test_checker_names_are_exercise_numbers():
    for name in harness.all_checkers():
        assert re.fullmatch(r"Exercise (?:\d+|A)\.\d+", name), name  # A: the appendix


def test_the_harness_notices_a_false_pass_and_a_crash():
    @_core.checker("Exercise 0.1")
    def lenient(fn):
        fn(1)

    @_core.checker("Exercise 0.2")
    def buggy(fn):
        fn(1)
        return {}["missing"]

    wrong = harness.Mutant("wrong", lambda x: x + 1)
    assert "FALSE PASS" in harness.run_mutant(harness.Exercise(lenient, lambda x: x, [wrong]), wrong).problem
    assert "CHECKER CRASH" in harness.run_mutant(harness.Exercise(buggy, lambda x: x, [wrong]), wrong).problem
    @_core.checker("Exercise 0.3")
    def vague(fn):
        _core.hint("something differs.", generic=True)

    specific = harness.Mutant("wrong", lambda x: x + 1, expect="something differs")
    outcome = harness.run_mutant(harness.Exercise(vague, lambda x: x, []), specific)
    assert "expected the specific hint" in outcome.problem and "generic hint" in outcome.problem


@pytest.mark.slow
def test_summary_script_counts(tmp_path, monkeypatch):
    """The counts of the report, on one small registry (the full run is the script's job)."""
    exercises = harness.registries()["test_checker_mutations_ch01"][:1]
    result = harness.summary(exercises)
    assert result["wrong solutions tried"] == len(exercises[0].mutants)
    assert result["false passes"] == 0 and result["checker crashes"] == 0
    assert result["specific hints"] + result["generic hints"] + result[
        "errors of the wrong solution reported with their line"] == result["wrong solutions tried"]
