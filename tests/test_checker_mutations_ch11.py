"""Mutation registry of chapter 11's checkers (the wrong answers of tests/test_exercises_bpe.py):
every reference passes, every mutant gets a hint, each specific hint names its own mistake."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from mutation_harness import Exercise, Mutant, make_tests  # noqa: E402
from test_exercises_bpe import (RIGHT, WRONG, encode_by_rank, merge_by_hand, special_by_hand,  # noqa: E402
                                table_by_hand, train_by_hand)


def _decode(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


from companion.exercises import bpe as check  # noqa: E402

_EXPECT = {  # the words of the specific hint each mutant must get, where the checker names it
    "pairs: non-overlapping": "overlap", "pairs: ones": "how many times", "pairs: mutates": "in place",
    "merge: first only": "first occurrence", "merge: in place": "in place",
    "encode: reversed ranks": "last to the first", "encode: characters": "single bytes",
    "bytes: identity": "must not stand for itself", "bytes: soft hyphen kept": "soft hyphen",
    "decode: per token": "each token on its own", "decode: ignore": "errors='ignore'",
    "pairs: on a joined string": "several digits", "merge: on a joined string": "several digits",
    "encode: all present pairs per round": "better-ranked", "encode: rightmost first": "runs of one byte",
    "decode: utf-8-sig": "byte-order mark", "decode: strict, then per token": "each token on its own",
    "train: no pre-tokenization": "pre-tokens", "train: byte order": "GPT-2's order",
    "train: largest pair": "largest", "train: never stops": "stop there", "train: merged tokens": "not the new token",
    "train: calls bpe.train": "bpe.train",
    "special: every name cut": "not allowed stays", "special: always allowed": "smuggle",
    "special: ordinary": "before the regular expression", "special: after the regex": "before the regular expression", "special: tokenizer.encode": "tokenizer.encode",
}
_EXTRA = {  # more wrong answers, so that every checker has at least ten
    check.pair_counts: [Mutant("pairs: counts of ids", lambda ids: {(i, i): 1 for i in ids}),
                        Mutant("pairs: None", lambda ids: None),
                        Mutant("pairs: only the first pair", lambda ids: {tuple(ids[:2]): 1} if len(ids) > 1 else {})],
    check.merge: [Mutant("merge: the input back", lambda ids, pair, n: list(ids)),
                  Mutant("merge: appends the new id", lambda ids, pair, n: list(ids) + [n]),
                  Mutant("merge: reversed", lambda ids, pair, n: merge_by_hand(ids, pair, n)[::-1]),
                  Mutant("merge: None", lambda ids, pair, n: None)],
    check.encode_word: [Mutant("encode: the word", lambda w, m: [w]),
                        Mutant("encode: single bytes", lambda w, m: [bytes([b]) for b in w]),
                        Mutant("encode: None", lambda w, m: None),
                        Mutant("encode: reversed tokens", lambda w, m: encode_by_rank(w, m)[::-1])],
    check.bytes_to_unicode: [Mutant("bytes: None", lambda: None),
                             Mutant("bytes: 255 keys", lambda: {b: table_by_hand()[b] for b in range(255)}),
                             Mutant("bytes: two-character values", lambda: {b: c * 2 for b, c in table_by_hand().items()}),
                             Mutant("bytes: latin-1 for all", lambda: {b: bytes([b]).decode("latin-1") for b in range(256)},
                                    "must not stand for itself")],
    check.decode: [Mutant("decode: None", lambda ids, v: None),
                   Mutant("decode: reversed", lambda ids, v: _decode(ids, v)[::-1]),
                   Mutant("decode: the ids", lambda ids, v: str(ids)),
                   Mutant("decode: utf-16", lambda ids, v: b"".join(v[i] for i in ids).decode("utf-16", "replace")),
                   Mutant("decode: no last token", lambda ids, v: _decode(ids[:-1], v))],
    check.train_bpe: [Mutant("train: None", lambda t, n: None),
                      Mutant("train: one merge too few", lambda t, n: train_by_hand(t, n)[:-1]),
                      Mutant("train: ids", lambda t, n: [(len(a), len(b)) for a, b in train_by_hand(t, n)]),
                      Mutant("train: str pairs", lambda t, n: [(a.decode("latin-1"), b.decode("latin-1"))
                                                               for a, b in train_by_hand(t, n)])],
    check.special_tokens: [Mutant("special: None", lambda t, tok, a: None),
                           Mutant("special: drops the special ids",
                                  lambda t, tok, a: [i for i in special_by_hand(t, tok, a)
                                                     if i not in tok.special_tokens.values()]),
                           Mutant("special: the names' bytes", lambda t, tok, a: list(t.encode())),
                           Mutant("special: a str", lambda t, tok, a: str(special_by_hand(t, tok, a))),
                           Mutant("special: end-of-text appended",
                                  lambda t, tok, a: special_by_hand(t, tok, a) + [tok.special_tokens["<|endoftext|>"]]),
                           Mutant("special: allowed ignored when a list",
                                  lambda t, tok, a: special_by_hand(t, tok, a if isinstance(a, (set, str)) else ()))],
}

EXERCISES = []
for checker in (check.pair_counts, check.merge, check.bytes_to_unicode, check.encode_word, check.decode,
                check.train_bpe, check.special_tokens):
    reference = next(answer for c, answer in RIGHT if c is checker)
    mutants = [Mutant(name, answer, _EXPECT.get(name)) for name, (c, answer) in WRONG.items() if c is checker]
    EXERCISES.append(Exercise(checker, reference, mutants + _EXTRA[checker]))

(test_reference_passes_and_enough_mutants, test_mutant_is_caught,
 test_specific_hints_name_their_mistake) = make_tests(EXERCISES)
