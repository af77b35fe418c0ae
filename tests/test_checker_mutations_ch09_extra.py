"""Mutation registry of exercises 9.7, 9.8 and 9.9 (the wrong answers of tests/test_exercises_seq2seq_extra.py)."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutation_harness import Exercise, Mutant, make_tests  # noqa: E402
from test_exercises_seq2seq_extra import (SMOOTHED_WRONG, STEP_WRONG, WRONG, right_find, right_smoothed,  # noqa: E402
                                          right_step)

from companion.exercises import seq2seq_extra as check  # noqa: E402

EXERCISES = [Exercise(check.next_chars, right_find, [Mutant(fn.__name__, fn, words) for fn, words in WRONG]),
             Exercise(check.smoothed_loss, right_smoothed,
                      [Mutant(words, fn, words) for fn, words in SMOOTHED_WRONG]),
             Exercise(check.seq2seq_step, right_step, [Mutant(words, fn, words) for fn, words in STEP_WRONG])]

(test_reference_passes_and_enough_mutants, test_mutant_is_caught,
 test_specific_hints_name_their_mistake) = make_tests(EXERCISES)
