"""Mutation registry of chapter 11's checkers (the wrong answers of tests/test_exercises_bpe.py):
every reference passes, every mutant gets a hint, each specific hint names its own mistake."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutation_harness import Exercise, Mutant, make_tests  # noqa: E402
from test_exercises_bpe import RIGHT, WRONG  # noqa: E402

from companion.exercises import bpe as check  # noqa: E402

_EXPECT = {  # the words of the specific hint each mutant must get, where the checker names it
    "pairs: non-overlapping": "overlap", "pairs: ones": "how many times", "pairs: mutates": "in place",
    "merge: first only": "first occurrence", "merge: in place": "in place",
    "encode: reversed ranks": "last to the first", "encode: characters": "single bytes",
    "bytes: identity": "must not stand for itself", "bytes: soft hyphen kept": "soft hyphen",
    "decode: per token": "each token on its own", "decode: ignore": "errors='ignore'",
}
_EXTRA = {  # more wrong answers, so that every checker has at least ten
    check.pair_counts: [Mutant("pairs: counts of ids", lambda ids: {(i, i): 1 for i in ids}),
                        Mutant("pairs: None", lambda ids: None),
                        Mutant("pairs: only the first pair", lambda ids: {tuple(ids[:2]): 1} if len(ids) > 1 else {})],
    check.merge: [Mutant("merge: the input back", lambda ids, pair, n: list(ids)),
                  Mutant("merge: appends the new id", lambda ids, pair, n: list(ids) + [n]),
                  Mutant("merge: reversed", lambda ids, pair, n: RIGHT[2][1](ids, pair, n)[::-1]),
                  Mutant("merge: None", lambda ids, pair, n: None)],
    check.encode_word: [Mutant("encode: the word", lambda w, m: [w]),
                        Mutant("encode: single bytes", lambda w, m: [bytes([b]) for b in w]),
                        Mutant("encode: None", lambda w, m: None),
                        Mutant("encode: reversed tokens", lambda w, m: RIGHT[3][1](w, m)[::-1])],
    check.bytes_to_unicode: [Mutant("bytes: None", lambda: None),
                             Mutant("bytes: 255 keys", lambda: {b: RIGHT[5][1]()[b] for b in range(255)}),
                             Mutant("bytes: two-character values", lambda: {b: c * 2 for b, c in RIGHT[5][1]().items()}),
                             Mutant("bytes: latin-1 for all", lambda: {b: bytes([b]).decode("latin-1") for b in range(256)},
                                    "must not stand for itself")],
    check.decode: [Mutant("decode: None", lambda ids, v: None),
                   Mutant("decode: reversed", lambda ids, v: RIGHT[7][1](ids, v)[::-1]),
                   Mutant("decode: the ids", lambda ids, v: str(ids)),
                   Mutant("decode: utf-16", lambda ids, v: b"".join(v[i] for i in ids).decode("utf-16", "replace")),
                   Mutant("decode: no last token", lambda ids, v: RIGHT[7][1](ids[:-1], v))],
}

EXERCISES = []
for checker in (check.pair_counts, check.merge, check.bytes_to_unicode, check.encode_word, check.decode):
    reference = next(answer for c, answer in RIGHT if c is checker)
    mutants = [Mutant(name, answer, _EXPECT.get(name)) for name, (c, answer) in WRONG.items() if c is checker]
    EXERCISES.append(Exercise(checker, reference, mutants + _EXTRA[checker]))

(test_reference_passes_and_enough_mutants, test_mutant_is_caught,
 test_specific_hints_name_their_mistake) = make_tests(EXERCISES)
