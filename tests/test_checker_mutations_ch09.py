"""Mutation registry of chapter 9 (the encoder-decoder): see tests/mutation_harness.py.

The wrong answers are those of tests/test_exercises_seq2seq.py, each with the hint it must get
(``None`` where the checker's answer is its generic description of the difference).
"""
from companion.exercises import seq2seq as check
from mutation_harness import Exercise, Mutant, make_tests
from test_exercises_seq2seq import (ATTENTION_WRONG, FORCING_WRONG, PRF_WRONG, attention_variant, forcing_ok,
                                    prf_variant)

#: Messages of the generic fallbacks: any hint is right for these mutants.
GENERIC = {"for targets=", "the output is not", "the answer is", "the answer is (precision", "for hypothesis="}


def mutants(table):
    return [Mutant(expect, fn, None if expect in GENERIC else expect, raised=expect == "your code raised")
            for expect, fn in table.items()]


EXERCISES = [
    Exercise(check.teacher_forcing, forcing_ok, mutants(FORCING_WRONG)),
    Exercise(check.masked_cross_attention, attention_variant(), mutants(ATTENTION_WRONG)),
    Exercise(check.char_ngram_precision_recall, prf_variant(), mutants(PRF_WRONG)),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
