"""Independent red-team cases for chapter 5 (positional encoding).

Written from the student notebook only: the exercise texts and the check
cells, never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.positional"
PRELUDE = """
import inspect
import math
import torch
from companion.exercises import positional as check
from companion.multihead import MultiHeadAttention
from companion.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    shift_matrix,
    sinusoidal_encoding,
)
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE,
                      name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# The cases written for the transcription exercises 5.1 (my_sinusoidal), 5.2 (my_shift_block),
# 5.3 (my_score_terms of one query and one key) and 5.4 (my_rotate_pair) were removed with those
# exercises (issue 28): 5.1-5.4 now ask for other functions (my_read_table, my_shift_table,
# my_score_terms of a whole layer, my_rope_bug), for which no outside cases exist yet.


# ---------------------------------------------------------------- junk ---
# The same battery of junk answers for every exercise (see _junk.py).
import pathlib as _pathlib
import sys as _sys

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "5.1": ("read_table", "my_read_table", "P"),
    "5.2": ("shift_table", "my_shift_table", "P, k"),
    "5.3": ("score_terms", "my_score_terms", "mha, x, P"),
    "5.4": ("rope_bug", "my_rope_bug", "rope, d"),
})
