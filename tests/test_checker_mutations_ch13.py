"""Mutation registry of chapter 13 (today's decoder): see tests/mutation_harness.py.

The wrong answers are those of tests/test_exercises_modern.py, each with the hint it must get
(``expect=None`` where only the generic description of the difference catches it), and a few that
raise inside the student's own code."""
import torch

from companion.exercises import modern as check
from mutation_harness import Exercise, Mutant, make_tests
from test_exercises_modern import (REPEAT_WRONG, RMS_WRONG, ROTATE_WRONG, SWIGLU_WRONG, repeat_right, rms_right,
                                   rotate_right, swiglu_right)

#: Table entries whose message is a generic description of the difference: any hint is right.
GENERIC = {"differ from", "shape", "i // groups", "base"}


def mutants(table):
    return [Mutant(expect, fn, None if expect in GENERIC else expect) for expect, fn in table.items()]


EXERCISES = [
    Exercise(check.rms_norm_heads, rms_right, mutants(RMS_WRONG) + [
        Mutant("returns None", lambda x, w, eps: None, "return a tensor"),
        Mutant("keepdim forgotten", lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1) + eps) * w, "RuntimeError",
               raised=True),
    ]),
    Exercise(check.swiglu, swiglu_right, mutants(SWIGLU_WRONG) + [
        Mutant("untransposed nn.Linear convention", lambda x, wg, wu, wd: (torch.nn.functional.silu(x @ wg.T) * (x @ wu.T)) @ wd.T,
               "RuntimeError", raised=True),
    ]),
    Exercise(check.rotate_at_offset, rotate_right, mutants(ROTATE_WRONG) + [
        Mutant("returns the input", lambda x, offset: x.clone()),
        Mutant("returns a NumPy array", lambda x, offset: rotate_right(x, offset).numpy(), "return a tensor"),
    ]),
    Exercise(check.repeat_heads, repeat_right, mutants(REPEAT_WRONG) + [
        Mutant("expands the wrong axis", lambda k, g: k[:, None].expand(k.shape[0], g, *k.shape[1:]).reshape(
            k.shape[0], -1, *k.shape[2:]), "You tiled the heads"),  # the same order as k.repeat
        Mutant("returns None", lambda k, g: None, "return a tensor"),
    ]),
]

(test_reference_passes_and_enough_mutants, test_mutant_is_caught,
 test_specific_hints_name_their_mistake) = make_tests(EXERCISES)
