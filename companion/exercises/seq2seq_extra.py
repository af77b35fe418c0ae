"""Checkers for chapter 9: those of :mod:`companion.exercises.seq2seq` (9.1, 9.4 and 9.6) and
:mod:`companion.exercises.seq2seq_model` (9.2, 9.3 and 9.5), and

* Exercise 9.7 :func:`next_chars` — what follows a prefix in a list of texts, counted: the tool
  that finds the cause of the translation model's errors on numbers ending in 76.

The chapter imports this module as ``check``, so that one module serves the whole chapter (the
grader's registry wants one per chapter). The check of 9.7 recognizes the classic slips:
occurrences that may not overlap (``re.finditer``, ``str.count``), the texts joined into one (an
occurrence across two texts), the character one place off, the prefix's own last character, an
occurrence at the end of a text counted, the counts dropped (a set or a list), the caller's list
changed, and a prefix used as a regular expression without ``re.escape`` (the cases hold ``.``, ``(``
and ``?``).
"""
from __future__ import annotations

import random
import re
from collections import Counter

from . import seq2seq as _seq2seq
from . import seq2seq_model as _seq2seq_model
from ._core import checker, describe, hint, passed
from .seq2seq import *  # noqa: F401,F403 - exercises 9.1, 9.4 and 9.6
from .seq2seq_model import *  # noqa: F401,F403 - exercises 9.2, 9.3 and 9.5

__all__ = [*_seq2seq.__all__, *_seq2seq_model.__all__, "next_chars"]


# ------------------------------------------------------------------------------- Exercise 9.7
def _reference(texts, prefix):
    counts = Counter()
    for text in texts:
        start = text.find(prefix)
        while start != -1:
            end = start + len(prefix)
            if end < len(text):
                counts[text[end]] += 1
            start = text.find(prefix, start + 1)
    return dict(counts)


def _non_overlapping(texts, prefix):
    return dict(Counter(t[m.end()] for t in texts for m in re.finditer(re.escape(prefix), t) if m.end() < len(t)))


def _joined(texts, prefix):
    return _reference(["".join(texts)], prefix)


def _shifted(offset):
    def wrong(texts, prefix):
        counts = Counter()
        for text in texts:
            for start in range(len(text) - len(prefix) + 1):
                at = start + len(prefix) + offset
                if text.startswith(prefix, start) and 0 <= at < len(text):
                    counts[text[at]] += 1
        return dict(counts)

    return wrong


def _end_counted(texts, prefix):
    counts = Counter(_reference(texts, prefix))
    for text in texts:
        if text.endswith(prefix):
            counts[""] += 1
    return dict(counts)


def _cases():
    """``(texts, prefix)`` pairs: the edge cases first, then random ones over a small alphabet."""
    cases = [
        (["aaaa"], "aa"),  # overlapping: a at 2, a at 3; the last occurrence ends the text
        (["sechsundsechzig", "vierundsechzig", "vierundsiebzig"], "unds"),
        (["abcab", "cab"], "ab"),  # one occurrence at the end of each text
        (["ab", "cd"], "bc"),  # only across the two texts: nothing
        (["xyz"], "q"),  # never found
        ([], "a"),  # no texts
        (["abab", "ba"], "bab"),
        (["a b\ta\nb"], "a"),  # whitespace is a character like any other
        (["ab ", " ab\n", "a b"], "b"),  # ... at the ends of a text too
        (["a b a b"], " "),
        (["a.bxaxc", "ya.", "a+b"], "a."),  # regex metacharacters are plain characters: 'ax' is no 'a.'
        (["f(x) = (x+1)", "(("], "("),
        (["a?b", "ab?", "b"], "?"),
    ]
    rng = random.Random(9)
    for _ in range(12):
        texts = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 4))]
        prefix = "".join(rng.choice("abc") for _ in range(rng.randint(1, 3)))
        cases.append((texts, prefix))
    return cases


def _as_counts(got, call):
    """The answer as a plain ``{str: int}`` dict, or a hint that says what is wrong with it."""
    if isinstance(got, (set, frozenset, list, tuple, str)):
        hint(f"{call} returned {describe(got)}: return a dict that maps each character to how many times "
             "it follows the prefix (a collections.Counter is fine).")
    if not isinstance(got, dict):
        hint(f"{call} returned {describe(got)}: return a dict {{character: count}}.")
    counts = {}
    for key, value in got.items():
        if not isinstance(key, str):
            hint(f"{call}: the keys must be the characters (strings), got the key {describe(key)}.")
        if isinstance(value, bool) or not isinstance(value, int):
            hint(f"{call}: the values must be counts (ints), got {describe(value)} for {key!r}.")
        if value != 0:  # a Counter may hold zeros; they change nothing
            counts[key] = value
    return counts


@checker("Exercise 9.7")
def next_chars(my_next_chars) -> None:
    """``my_next_chars(texts, prefix)``: a list of strings and a non-empty string -> ``{char: count}``
    of the characters right after every occurrence of ``prefix`` (overlapping ones included; an
    occurrence at the end of a text is not counted; the texts are separate)."""
    answers = []
    for texts, prefix in _cases():
        given = list(texts)
        call = f"my_next_chars({texts!r}, {prefix!r})"
        got = my_next_chars(given, prefix)
        if given != texts:
            hint(f"{call} changed the list it was given; leave `texts` as it is.")
        answers.append((texts, prefix, call, _as_counts(got, call)))
    if all(got == _reference(texts, prefix) for texts, prefix, _, got in answers):
        passed("every occurrence counted, overlapping ones too, inside each text: "
               "'sechsunds' is always followed by 'e' in the training targets.")
    mistakes = [
        (_non_overlapping, "occurrences may overlap ('aa' occurs 3 times in 'aaaa'): re.finditer and "
                           "str.count skip the overlapping ones; search again from the next position."),
        (_joined, "an occurrence must lie inside one text: joining the texts creates occurrences across "
                  "two of them. Search each text on its own."),
        (_shifted(-1), "you counted the prefix's own last character; count the character right AFTER it, "
                       "text[start + len(prefix)]."),
        (_shifted(1), "you counted the character two places after the prefix; count the one right after it, "
                      "text[start + len(prefix)]."),
        (_end_counted, "an occurrence at the very end of a text is followed by nothing: do not count it "
                       "(not even as '')."),
    ]
    for wrong, message in mistakes:
        if all(got == wrong(texts, prefix) for texts, prefix, _, got in answers):
            hint(message)
    for texts, prefix, call, got in answers:
        expected = _reference(texts, prefix)
        if got != expected:
            hint(f"{call} gave {dict(sorted(got.items()))}, expected {dict(sorted(expected.items()))}.",
                 generic=True)
