"""Checkers for chapter 11, *Tokenization: byte-level BPE*.

* Exercise 11.1, counting adjacent pairs (overlapping occurrences count: ``[5, 5, 5]`` has two).
* Exercise 11.2, one merge: every occurrence, left to right, without overlaps.
* Exercise 11.3, GPT-2's map from bytes to printable characters.
* Exercise 11.4, encoding one word with a list of merges in rank order.
* Exercise 11.5, decoding ids to text, bytes first (a character may be split between tokens).

Every checker compares with :mod:`companion.bpe` on the chapter's examples and on random cases,
checks that the student's function leaves its arguments unchanged, and never raises.
"""
from __future__ import annotations

import random
from collections import Counter

from .. import bpe
from ._core import checker, describe, hint, passed

__all__ = ["pair_counts", "merge", "encode_word", "bytes_to_unicode", "decode"]


def _random_ids(rng: random.Random, n: int, alphabet: int) -> list[int]:
    return [rng.randrange(alphabet) for _ in range(n)]


def _as_counts(got, call: str) -> dict:
    if not isinstance(got, dict):
        hint(f"{call} should return a dict mapping each pair (a tuple of two ids) to its count; "
             f"you returned {describe(got)}.")
    for key, value in got.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            hint(f"the keys must be pairs, tuples of two ids such as (1, 2); one key is {key!r}.")
        if isinstance(value, bool) or not isinstance(value, int):
            hint(f"the counts must be whole numbers (int); the count of {key!r} is {value!r}.")
    return got


# --------------------------------------------------------------------------- Exercise 11.1
@checker("Exercise 11.1")
def pair_counts(my_pair_counts) -> None:
    """``my_pair_counts(ids)`` -> {(a, b): number of positions i with ids[i] = a, ids[i+1] = b}."""
    rng = random.Random(111)
    cases = [[1, 2, 1, 2], [5, 5, 5], [7], [], [3, 3, 3, 3, 4, 3, 3]]
    cases += [_random_ids(rng, rng.randrange(2, 40), rng.choice([2, 3, 10])) for _ in range(20)]
    for ids in cases:
        before = list(ids)
        got = _as_counts(my_pair_counts(ids), f"my_pair_counts({ids})")
        if ids != before:
            hint("your function changed the list it was given; count without modifying `ids`.")
        expected = bpe.pair_counts(before)
        got = {k: v for k, v in got.items() if v != 0}
        if got == expected:
            continue
        if got == {p: c for p, c in Counter(zip(before[::2], before[1::2])).items()}:
            hint("you counted the pairs (0, 1), (2, 3), ... only: every adjacent pair counts, "
                 "overlapping ones too (ids[i], ids[i+1]) for every i.")
        if got == {p: 1 for p in expected}:
            hint("each pair should map to how many times it occurs, not to 1.")
        if any(k[0] == k[1] and got.get(k, 0) < c for k, c in expected.items()):
            hint(f"for {before} you returned {got}, expected {expected}: a run such as 5, 5, 5 holds the "
                 "pair (5, 5) twice, at positions 0 and 1 (overlaps count).")
        if any(got.get(k, 0) != c for k, c in expected.items()) and sum(got.values()) == len(before):
            hint("you counted one pair too many: the last id has no right neighbour (there are len(ids) - 1 "
                 "adjacent pairs).")
        hint(f"for ids={before} you returned {got}, expected {expected}.", generic=True)
    passed("every adjacent pair counted, overlaps included.")


# --------------------------------------------------------------------------- Exercise 11.2
@checker("Exercise 11.2")
def merge(my_merge) -> None:
    """``my_merge(ids, pair, new_id)`` -> ids with each occurrence of ``pair`` (left to right, no
    overlaps) replaced by ``new_id``."""
    rng = random.Random(112)
    cases = [([1, 2, 3, 1, 2], (1, 2), 4), ([5, 5, 5], (5, 5), 9), ([5, 5, 5, 5], (5, 5), 9),
             ([1, 2], (2, 1), 7), ([], (1, 2), 3), ([1], (1, 1), 3), ([2, 1, 2], (1, 2), 8)]
    for _ in range(30):
        ids = _random_ids(rng, rng.randrange(0, 30), rng.choice([2, 3]))
        cases.append((ids, (rng.randrange(3), rng.randrange(3)), 100 + rng.randrange(5)))
    for ids, pair, new_id in cases:
        before = list(ids)
        got = my_merge(ids, pair, new_id)
        if ids != before:
            hint("your function changed the list it was given; build a new list instead.")
        if got is None:
            hint("my_merge returned None: return the new list (list.replace-style methods return None).")
        if not isinstance(got, list):
            hint(f"return a list of ids; you returned {describe(got)}.")
        expected = bpe.merge(before, pair, new_id)
        if got == expected:
            continue
        if pair[0] == pair[1] and len(got) < len(expected):
            hint(f"for {before} and pair {pair} you returned {got}: occurrences must not overlap. After a "
                 f"merge, skip both ids of the pair, so {before} gives {expected}.")
        first_only = next((before[:i] + [new_id] + before[i + 2:] for i in range(len(before) - 1)
                           if (before[i], before[i + 1]) == tuple(pair)), before)
        if got == first_only and got != expected:
            hint(f"only the first occurrence was merged: for {before} and pair {pair} every occurrence "
                 f"becomes {new_id}, giving {expected}.")
        if len(got) == len(before) - 1 and before[-2:] == list(pair) and got[-1] != new_id:
            hint("the last pair of the list was not merged: check the loop's bound (the pair at the very "
                 "end counts too).")
        if got == [x for x in before if x not in pair] or new_id not in got and expected != before:
            hint(f"the new id {new_id} should take the place of each pair; you returned {got}.")
        hint(f"for ids={before}, pair={pair}, new_id={new_id} you returned {got}, expected {expected}.",
             generic=True)
    passed("every occurrence merged, left to right, without overlaps.")


# --------------------------------------------------------------------------- Exercise 11.4
_MERGES = [(b"l", b"o"), (b"lo", b"w"), (b"e", b"r"), (b"low", b"er"), (b"e", b"s"), (b"es", b"t"),
           (b"n", b"e"), (b"ne", b"w"), (b"\xc3", b"\xa9"), (b"w", b"e")]


@checker("Exercise 11.4")
def encode_word(my_encode_word) -> None:
    """``my_encode_word(word, merges)`` -> the word's tokens (bytes), merges applied by rank."""
    rng = random.Random(113)
    words = [b"lower", b"lowest", b"newer", b"low", b"l", b"", b"owl", b"we", b"caf\xc3\xa9", b"weer",
             b"newest", b"lo\xe6\x97\xa5w", b"\xc3\xa9t"]
    words += [bytes(rng.choice(b"lowerwnst") for _ in range(rng.randrange(1, 12))) for _ in range(25)]
    tok = bpe.BPETokenizer(list(_MERGES))
    answers = {}
    for word in words:
        merges = list(_MERGES)
        got = my_encode_word(word, merges)
        if merges != _MERGES:
            hint("your function changed the list of merges it was given; read it, do not modify it.")
        if not isinstance(got, list) or not all(isinstance(t, bytes) for t in got):
            if isinstance(got, list) and all(isinstance(t, str) for t in got):
                hint("return the tokens as bytes (b'low'), not str: BPE works on the bytes of the word.")
            if isinstance(got, list) and all(isinstance(t, int) for t in got):
                hint("return the tokens themselves (bytes such as b'low'), not ids.")
            hint(f"return a list of tokens, each a bytes object; you returned {describe(got)}.")
        answers[word] = got
    wrong = [w for w in words if answers[w] != tok.encode_word(w)]
    if not wrong:
        passed("merges applied in rank order until none applies.")
    word, got, expected = wrong[0], answers[wrong[0]], tok.encode_word(wrong[0])
    if b"".join(got) != word:
        hint(f"the tokens of {word!r} must join back into the word; yours join into {b''.join(got)!r}.")
    if all(answers[w] == _apply_in_order(w, list(reversed(_MERGES))) for w in words):
        hint("you applied the merges from the last to the first: the first merge in the list has the "
             "lowest rank and is applied first.")
    if any(len(t) > 1 and t not in {a + b for a, b in _MERGES} for t in got):
        hint(f"for {word!r} you returned {got}: start from single bytes, one token per byte, not one per "
             "character (a character outside ASCII is several bytes: 日 is b'\\xe6\\x97\\xa5').")
    if len(got) < len(expected):
        hint(f"{word!r} became {got}, more merged than the merges allow ({expected}): only a pair that "
             "is in the list may be merged, and only once both halves exist.")
    if len(got) > len(expected):
        hint(f"{word!r} became {got}, less merged than it should be ({expected}): keep merging until no "
             "adjacent pair of tokens is in the list.")
    hint(f"for {word!r} you returned {got}, expected {expected}: at each round, merge the pair of lowest "
         "rank (earliest in the list) among the adjacent pairs.", generic=True)


def _apply_in_order(word: bytes, merges: list) -> list:
    parts = [bytes([b]) for b in word]
    for a, b in merges:
        parts = bpe.merge(parts, (a, b), a + b)
    return parts


# --------------------------------------------------------------------------- Exercise 11.3
@checker("Exercise 11.3")
def bytes_to_unicode(my_bytes_to_unicode) -> None:
    """``my_bytes_to_unicode()`` -> {byte: printable character} for the 256 bytes, as GPT-2."""
    got = my_bytes_to_unicode()
    expected = bpe.bytes_to_unicode()
    if not isinstance(got, dict):
        hint(f"return a dict from each byte (an int 0-255) to a one-character string; you returned {describe(got)}.")
    if sorted(k for k in got if isinstance(k, int) and not isinstance(k, bool)) != list(range(256)) or len(got) != 256:
        hint("the dict must have exactly the 256 keys 0, 1, ..., 255 (ints, one per byte).")
    if not all(isinstance(v, str) and len(v) == 1 for v in got.values()):
        hint("each byte must map to a string of exactly one character.")
    if len(set(got.values())) != 256:
        hint("two bytes map to the same character: the map must be one-to-one, or decoding is impossible.")
    if got == dict(expected):
        passed("space is 'Ġ', a new line 'Ċ', and every other byte a visible character.")
    wrong = sorted(b for b in range(256) if got[b] != expected[b])
    if got[ord(" ")] == " ":
        hint("a space must not stand for itself: vocab.bpe separates the two tokens of a merge with a "
             "space. Bytes outside the three printable ranges move to chr(256), chr(257), ...")
    if all(got[b] == chr(256 + b) for b in range(256)) or all(got[b] == chr(b + 256) for b in wrong):
        hint("only the bytes that are not printable move to chr(256 + n); the printable ones ('!' to "
             "'~', '¡' to '¬', '®' to 'ÿ') stand for themselves.")
    if 173 in wrong and got[173] == chr(173):
        hint("byte 173 is the soft hyphen, which is invisible: it is not in the printable ranges "
             "('¡' to '¬' stops at 172; '®' starts at 174).")
    shifted = [b for b in range(256) if ord(expected[b]) >= 256]
    if all(got[b] != expected[b] for b in shifted) and {ord(got[b]) for b in shifted} == set(range(256, 256 + 68)):
        hint("the 68 bytes that are not printable go to chr(256), chr(257), ... in increasing byte order: "
             "byte 0 to chr(256), byte 1 to chr(257), ...")
    first = wrong[0]
    hint(f"byte {first} maps to {got[first]!r}; GPT-2's table maps it to {expected[first]!r}.", generic=True)


# --------------------------------------------------------------------------- Exercise 11.5
@checker("Exercise 11.5")
def decode(my_decode) -> None:
    """``my_decode(ids, vocab)`` -> the text: join the tokens' bytes, then decode UTF-8 once, with
    errors="replace"."""
    vocab = {0: b"T", 1: b"o ", 2: b"caf", 3: b"\xc3", 4: b"\xa9", 5: b"\xc3\xa9", 6: b" \xe6\x97",
             7: b"\xa5", 8: b"!", 9: b"\n"}
    cases = [[0, 1, 2, 5, 8], [2, 3, 4], [6, 7, 9], [2, 3], [], [3], [7, 7], [0, 9, 9, 1]]
    for ids in cases:
        before, vocab_before = list(ids), dict(vocab)
        got = my_decode(ids, vocab)
        if ids != before or vocab != vocab_before:
            hint("your function changed its arguments; read them, do not modify them.")
        expected = b"".join(vocab[i] for i in before).decode("utf-8", errors="replace")
        if isinstance(got, bytes):
            hint("return the text as a str: decode the joined bytes with .decode('utf-8', errors='replace').")
        if not isinstance(got, str):
            hint(f"return the text, a str; you returned {describe(got)}.")
        if got == expected:
            continue
        per_token = "".join(vocab[i].decode("utf-8", errors="replace") for i in before)
        if got == per_token:
            hint(f"for ids={before} you decoded each token on its own: {got!r}. A character's bytes may be "
                 "split between tokens (é is b'\\xc3' + b'\\xa9'): join all the bytes first, then decode once.")
        if got == b"".join(vocab[i] for i in before).decode("utf-8", errors="ignore"):
            hint("errors='ignore' drops a cut character silently; use errors='replace', which shows it as "
                 "'\ufffd', as GPT-2 does.")
        hint(f"for ids={before} you returned {got!r}, expected {expected!r}.", generic=True)
    passed("the bytes joined first, then decoded once.")
