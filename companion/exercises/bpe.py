"""Checkers for chapter 11, *Tokenization: byte-level BPE*.

* Exercise 11.1, counting adjacent pairs (overlapping occurrences count: ``[5, 5, 5]`` has two).
* Exercise 11.2, one merge: every occurrence, left to right, without overlaps.
* Exercise 11.3, GPT-2's map from bytes to printable characters.
* Exercise 11.4, encoding one word with a list of merges in rank order.
* Exercise 11.5, decoding ids to text, bytes first (a character may be split between tokens).
* Exercise 11.6, the BPE trainer: pre-tokenize, count, merge the most frequent pair with the stated
  tie-break, equal to :func:`companion.bpe.train`.
* Exercise 11.7, special tokens: split on the allowed names before the regular expression, as
  tiktoken does (the reference is :func:`encode_with_special` below).

Every checker is a differential test: the student's function and the reference run on inputs drawn
by construction from named edge classes (multi-digit and repeated ids, runs of one value, ties, ...)
plus fresh random draws, and a failing class names itself in the hint. The arguments must come back
unchanged; "not attempted" only when every call stops at ``NotImplementedError``; junk gets a
"wrong type" hint. Acceptance: a list or a tuple where a sequence is asked for, Python or NumPy
integers where a whole number is.
"""
from __future__ import annotations

import numbers
import random
from collections import Counter

import regex

from .. import bpe
from . import rules
from ._core import StudentError, checker, describe, hint, passed, source_facts

__all__ = ["pair_counts", "merge", "encode_word", "bytes_to_unicode", "decode", "train_bpe", "special_tokens",
           "encode_with_special"]


def _random_ids(rng: random.Random, n: int, alphabet: int) -> list[int]:
    return [rng.randrange(alphabet) for _ in range(n)]


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, bool)


def _run_all(fn, cases: list[tuple]) -> list:
    """Call ``fn(*args)`` on every case. "Not attempted" (the stub's ``NotImplementedError``) only when
    every call raises it; a raise on some inputs only is that branch's mistake, with its input."""
    results, stub = [], []
    for args in cases:
        try:
            results.append(fn(*args))
        except StudentError as exc:
            if not isinstance(exc.error, NotImplementedError):
                raise
            stub.append((args, exc))
            results.append(None)
    if stub and len(stub) == len(cases):
        raise stub[0][1]
    if stub:
        shown = ", ".join(repr(a) if len(repr(a)) < 60 else repr(a)[:57] + "..." for a in stub[0][0])
        hint(f"your function raised NotImplementedError for ({shown}) but not for other inputs: a branch "
             "is still unwritten.")
    return results


def _ids_of(got, call: str) -> list[int]:
    """A list (or tuple) of whole numbers, as Python ints; any other value gets a wrong-type hint."""
    if got is None:
        hint(f"{call} returned None: return the new list (list methods such as .append return None).")
    if not isinstance(got, (list, tuple)):
        hint(f"{call} should return a list of ids; you returned {describe(got)} (wrong type).")
    if not all(_is_int(x) for x in got):
        bad = next(x for x in got if not _is_int(x))
        hint(f"{call} should return a list of whole numbers (ids); one item is {describe(bad)} (wrong type).")
    return [int(x) for x in got]


def _as_counts(got, call: str) -> dict:
    """The student's dict as {(int, int): int}; NumPy integers are accepted, anything else is named."""
    if not isinstance(got, dict):
        hint(f"{call} should return a dict mapping each pair (a tuple of two ids) to its count; "
             f"you returned {describe(got)} (wrong type).")
    out = {}
    try:
        items = list(got.items())
    except Exception:  # noqa: BLE001 - an odd dict subclass
        hint(f"{call} returned a dict whose items cannot be read; return a plain dict (wrong type).")
    for key, value in items:
        if not (isinstance(key, tuple) and len(key) == 2 and all(_is_int(k) for k in key)):
            hint(f"the keys must be pairs, tuples of two ids such as (1, 2); one key is {describe(key)}.")
        if not _is_int(value):
            hint(f"the counts must be whole numbers (int); the count of {key!r} is {describe(value)}.")
        if int(value) != 0:
            out[(int(key[0]), int(key[1]))] = out.get((int(key[0]), int(key[1])), 0) + int(value)
    return out


def _joined_counts(ids: list[int]) -> dict:
    """The mistake of counting on the joined string: str.count of "a b" in " ".join(map(str, ids))."""
    text = " ".join(map(str, ids))
    return {p: text.count(f"{p[0]} {p[1]}") for p in set(zip(ids, ids[1:])) if text.count(f"{p[0]} {p[1]}")}


def _joined_merges(ids: list[int], pair: tuple, new_id: int) -> list[list[int]]:
    """The mistake of replacing on the joined string, with and without spaces around it."""
    out = []
    for pad in ("", " "):
        text = pad + " ".join(map(str, ids)) + pad
        text = text.replace(f"{pad}{pair[0]} {pair[1]}{pad}", f"{pad}{new_id}{pad}")
        out.append([int(x) for x in text.split()])
    return out


def _joined_string_ids(rng: random.Random) -> list[int]:
    """Ids whose decimal strings run into each other: 1, 11, 111, 21 ... (a count or a merge done on
    " ".join(map(str, ids)) sees a pair (1, 1) inside 11 1 or 1 11)."""
    return [rng.choice([1, 11, 111, 12, 21, 2, 10, 101]) for _ in range(rng.randrange(3, 14))]


# --------------------------------------------------------------------------- Exercise 11.1
@checker("Exercise 11.1")
def pair_counts(my_pair_counts) -> None:
    """``my_pair_counts(ids)`` -> {(a, b): number of positions i with ids[i] = a, ids[i+1] = b}."""
    rng = random.Random(111)
    classes = [("ids of several digits", [1, 11, 1, 1, 11, 111]), ("ids of several digits", [12, 1, 2, 21, 12])]
    classes += [("ids of several digits", _joined_string_ids(rng)) for _ in range(8)]
    classes += [("the examples", [1, 2, 1, 2]), ("a run of one id", [5, 5, 5]), ("a list of one id", [7]),
                ("an empty list", []), ("a run of one id", [3, 3, 3, 3, 4, 3, 3])]
    classes += [("a run of one id", [rng.randrange(300)] * rng.randrange(2, 9)) for _ in range(3)]
    classes += [("random ids", _random_ids(rng, rng.randrange(2, 40), rng.choice([2, 3, 10, 300])))
                for _ in range(12)]
    fresh = random.Random()
    classes += [("random ids", _random_ids(fresh, fresh.randrange(2, 30), 400)) for _ in range(4)]
    answers = _run_all(my_pair_counts, [(list(ids),) for _, ids in classes])
    for (name, ids), answer in zip(classes, answers):
        got = _as_counts(answer, f"my_pair_counts({ids})")
        expected = bpe.pair_counts(ids)
        if got == expected:
            continue
        if got == _joined_counts(ids):
            hint(f"fails on ids of several digits: for {ids} you returned {got}, expected {expected}. Count "
                 "pairs of list items, not of characters or of a joined string (11 is one id, not 1 and 1).")
        if got == {p: c for p, c in Counter(zip(ids[::2], ids[1::2])).items()}:
            hint("you counted the pairs (0, 1), (2, 3), ... only: every adjacent pair counts, "
                 "overlapping ones too (ids[i], ids[i+1]) for every i.")
        if got == {p: 1 for p in expected}:
            hint("each pair should map to how many times it occurs, not to 1.")
        if any(k[0] == k[1] and got.get(k, 0) < c for k, c in expected.items()):
            hint(f"for {ids} you returned {got}, expected {expected}: a run such as 5, 5, 5 holds the "
                 "pair (5, 5) twice, at positions 0 and 1 (overlaps count).")
        if any(got.get(k, 0) != c for k, c in expected.items()) and sum(got.values()) == len(ids):
            hint("you counted one pair too many: the last id has no right neighbour (there are len(ids) - 1 "
                 "adjacent pairs).")
        hint(f"fails on {name}: for ids={ids} you returned {got}, expected {expected}.", generic=True)
    passed("every adjacent pair counted, overlaps included.")


# --------------------------------------------------------------------------- Exercise 11.2
@checker("Exercise 11.2")
def merge(my_merge) -> None:
    """``my_merge(ids, pair, new_id)`` -> ids with each occurrence of ``pair`` (left to right, no
    overlaps) replaced by ``new_id``."""
    rng = random.Random(112)
    classes = [("ids of several digits", [11, 1, 1, 11], (1, 1), 5), ("ids of several digits", [1, 11, 1], (1, 1), 300),
               ("ids of several digits", [111, 1, 11], (11, 1), 7)]
    for _ in range(8):
        ids = _joined_string_ids(rng)
        classes.append(("ids of several digits", ids, (rng.choice(ids), rng.choice(ids)), 1000 + rng.randrange(5)))
    classes += [("the examples", [1, 2, 3, 1, 2], (1, 2), 4), ("a run of one id", [5, 5, 5], (5, 5), 9),
                ("a run of one id", [5, 5, 5, 5], (5, 5), 9), ("no occurrence", [1, 2], (2, 1), 7),
                ("an empty list", [], (1, 2), 3), ("a list of one id", [1], (1, 1), 3),
                ("the pair at the end", [2, 1, 2], (1, 2), 8)]
    for _ in range(3):
        v = rng.randrange(256)
        classes.append(("a run of one id", [v] * rng.randrange(2, 9), (v, v), 256 + rng.randrange(50)))
    fresh = random.Random()
    for gen in [rng] * 20 + [fresh] * 5:
        ids = _random_ids(gen, gen.randrange(0, 30), gen.choice([2, 3]))
        classes.append(("random ids", ids, (gen.randrange(3), gen.randrange(3)), 100 + gen.randrange(5)))
    answers = _run_all(my_merge, [(list(ids), pair, new_id) for _, ids, pair, new_id in classes])
    for (name, before, pair, new_id), answer in zip(classes, answers):
        got = _ids_of(answer, f"my_merge({before}, {pair}, {new_id})")
        expected = bpe.merge(before, pair, new_id)
        if got == expected:
            continue
        if got in _joined_merges(before, pair, new_id):
            hint(f"fails on ids of several digits: for {before}, pair {pair} you returned {got}, expected "
                 f"{expected}. Compare list items, not characters of a joined string (11 is one id).")
        if pair[0] == pair[1] and len(got) < len(expected):
            hint(f"for {before} and pair {pair} you returned {got}: occurrences must not overlap. After a "
                 f"merge, skip both ids of the pair, so {before} gives {expected}.")
        first_only = next((before[:i] + [new_id] + before[i + 2:] for i in range(len(before) - 1)
                           if (before[i], before[i + 1]) == tuple(pair)), before)
        if got == first_only and got != expected:
            hint(f"only the first occurrence was merged: for {before} and pair {pair} every occurrence "
                 f"becomes {new_id}, giving {expected}.")
        if pair[0] == pair[1] and name == "a run of one id":
            hint(f"fails on a run of one id: for {before} and pair {pair} you returned {got}, expected "
                 f"{expected}: read from the left, and skip both ids of each merged pair.")
        if len(got) == len(before) - 1 and before[-2:] == list(pair) and got[-1] != new_id:
            hint("the last pair of the list was not merged: check the loop's bound (the pair at the very "
                 "end counts too).")
        if got == [x for x in before if x not in pair] or new_id not in got and expected != before:
            hint(f"the new id {new_id} should take the place of each pair; you returned {got}.")
        hint(f"fails on {name}: for ids={before}, pair={pair}, new_id={new_id} you returned {got}, expected "
             f"{expected}.", generic=True)
    passed("every occurrence merged, left to right, without overlaps.")


# --------------------------------------------------------------------------- Exercise 11.4
_MERGES = [(b"l", b"o"), (b"lo", b"w"), (b"e", b"r"), (b"low", b"er"), (b"e", b"s"), (b"es", b"t"),
           (b"n", b"e"), (b"ne", b"w"), (b"\xc3", b"\xa9"), (b"w", b"e")]


def _tokens_of(got, call: str) -> list[bytes]:
    if isinstance(got, (list, tuple)) and got and all(isinstance(t, str) for t in got):
        hint("return the tokens as bytes (b'low'), not str: BPE works on the bytes of the word.")
    if isinstance(got, (list, tuple)) and got and all(_is_int(t) for t in got):
        hint("return the tokens themselves (bytes such as b'low'), not ids.")
    if not isinstance(got, (list, tuple)) or not all(isinstance(t, bytes) for t in got):
        hint(f"{call}: return a list of tokens, each a bytes object; you returned {describe(got)} (wrong type).")
    return list(got)


def _encode_classes(rng: random.Random) -> list[tuple[str, bytes, list]]:
    """(class, word, merges): the chapter's examples, runs of one byte, a merge that a lower-ranked one
    makes possible in the same round, non-ASCII bytes, and words encoded with merges learned by
    :func:`companion.bpe.train` from generated texts."""
    cases = [("the examples", w, list(_MERGES)) for w in
             [b"lower", b"lowest", b"newer", b"low", b"l", b"", b"owl", b"we", b"caf\xc3\xa9", b"weer", b"newest",
              b"lo\xe6\x97\xa5w", b"\xc3\xa9t", b"lowly"]]
    runs = [(b"a", b"a"), (b"aa", b"a"), (b"aa", b"aa"), (b"b", b"a")]
    cases += [("runs of one byte", b"a" * n, list(runs)) for n in (2, 3, 5, 7)]
    cases += [("runs of one byte", w, list(runs)) for w in (b"baaa", b"aaab", b"abaaab", b"aaaba")]
    chain = [(b"a", b"b"), (b"ab", b"c"), (b"c", b"d"), (b"b", b"c")]  # (ab, c) is made possible by rank 0
    cases += [("a merge made possible in the same round", w, list(chain)) for w in (b"abcd", b"abcdabcd", b"xabcd")]
    for _ in range(20):
        text = "".join(rng.choice("aab cab\u00e9\u65e5 ") for _ in range(rng.randrange(20, 80)))
        merges = bpe.train(text, 256 + rng.randrange(3, 20)).merges
        word = "".join(rng.choice("aabbc\u00e9\u65e5") for _ in range(rng.randrange(1, 12))).encode("utf-8")
        cases.append(("merges learned from a generated text", word, merges))
    return cases


@checker("Exercise 11.4")
def encode_word(my_encode_word) -> None:
    """``my_encode_word(word, merges)`` -> the word's tokens (bytes), merges applied by rank."""
    classes = _encode_classes(random.Random(113))
    answers = _run_all(my_encode_word, [(word, list(merges)) for _, word, merges in classes])
    wrong = []
    for (name, word, merges), answer in zip(classes, answers):
        got = _tokens_of(answer, f"my_encode_word({word!r}, merges)")
        expected = bpe.BPETokenizer(list(merges)).encode_word(word)
        if got != expected:
            wrong.append((name, word, merges, got, expected))
    if not wrong:
        passed("merges applied in rank order until none applies.")
    name, word, merges, got, expected = wrong[0]
    if b"".join(got) != word:
        hint(f"the tokens of {word!r} must join back into the word; yours join into {b''.join(got)!r}.")
    if all(w[3] == _apply_in_order(w[1], list(reversed(w[2]))) for w in wrong):
        hint("you applied the merges from the last to the first: the first merge in the list has the "
             "lowest rank and is applied first.")
    if any(len(t) > 1 and t not in {a + b for a, b in merges} for t in got):
        hint(f"for {word!r} you returned {got}: start from single bytes, one token per byte, not one per "
             "character (a character outside ASCII is several bytes: 日 is b'\\xe6\\x97\\xa5').")
    if name == "runs of one byte":
        hint(f"fails on runs of one byte: {word!r} with merges {merges} gives {expected}, you returned {got}. "
             "Merge every occurrence of the best pair from the left, without overlaps (b'aaa' with (a, a) "
             "gives [b'aa', b'a']).")
    if name == "a merge made possible in the same round":
        hint(f"fails when a merge makes a better-ranked pair: {word!r} with merges {merges} gives {expected}, "
             f"you returned {got}. Merge one pair per round, the lowest-ranked among the pairs present now, "
             "then look again.")
    if len(got) < len(expected):
        hint(f"{word!r} became {got}, more merged than the merges allow ({expected}): only a pair that "
             "is in the list may be merged, and only once both halves exist.")
    if len(got) > len(expected):
        hint(f"{word!r} became {got}, less merged than it should be ({expected}): keep merging until no "
             "adjacent pair of tokens is in the list.")
    hint(f"fails on {name}: for {word!r} you returned {got}, expected {expected}: at each round, merge the "
         "pair of lowest rank (earliest in the list) among the adjacent pairs.", generic=True)


def _apply_in_order(word: bytes, merges: list) -> list:
    parts = [bytes([b]) for b in word]
    for a, b in merges:
        parts = bpe.merge(parts, (a, b), a + b)
    return parts


# --------------------------------------------------------------------------- Exercise 11.3
@checker("Exercise 11.3")
def bytes_to_unicode(my_bytes_to_unicode) -> None:
    """``my_bytes_to_unicode()`` -> {byte: printable character} for the 256 bytes, as GPT-2."""
    got = _run_all(my_bytes_to_unicode, [()])[0]
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
    if 160 in wrong and got[160] == chr(160):
        hint("byte 160 is the no-break space, which prints as a blank: it is not in the printable ranges "
             "('¡', byte 161, starts the second one) and moves like the space.")
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
def _decode_classes(rng: random.Random) -> list[tuple[str, list[int], dict]]:
    vocab = {0: b"T", 1: b"o ", 2: b"caf", 3: b"\xc3", 4: b"\xa9", 5: b"\xc3\xa9", 6: b" \xe6\x97",
             7: b"\xa5", 8: b"!", 9: b"\n", 10: b"\xef\xbb\xbf", 11: b"\xef\xbb", 12: b"\xbfa", 13: b"\xff"}
    cases = [("the examples", ids, vocab) for ids in ([0, 1, 2, 5, 8], [2, 3, 4], [6, 7, 9], [])]
    cases += [("a character cut at the end", ids, vocab) for ids in ([2, 3], [3], [6])]
    cases += [("a cut character inside valid text", ids, vocab) for ids in ([3, 4, 3], [3, 0, 3, 4], [7, 7], [6, 7, 6])]
    cases += [("bytes that are never UTF-8", ids, vocab) for ids in ([13, 2, 3, 4], [0, 13])]
    cases += [("a byte-order mark at the start", ids, vocab) for ids in ([10, 0, 1], [11, 12], [10])]
    texts = ["T\u00e9mp\u00eate \u65e5\u672c \U0001F917!", "Ångström\n", "\ufeffBOM first", "plain text"]
    for _ in range(12):
        data = rng.choice(texts).encode("utf-8")
        cuts = sorted(rng.sample(range(1, len(data)), rng.randrange(1, 6)))
        pieces = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
        ids = [20 + 7 * k for k in range(len(pieces))]  # ids of two digits and more
        drop = rng.random() < 0.5 and len(ids) > 2
        cases.append(("a text cut at random bytes", ids[:-1] if drop else ids, dict(zip(ids, pieces))))
    return cases


@checker("Exercise 11.5")
def decode(my_decode) -> None:
    """``my_decode(ids, vocab)`` -> the text: join the tokens' bytes, then decode UTF-8 once, with
    errors="replace"."""
    classes = _decode_classes(random.Random(115))
    answers = _run_all(my_decode, [(list(ids), dict(vocab)) for _, ids, vocab in classes])
    for (name, ids, vocab), got in zip(classes, answers):
        data = b"".join(vocab[i] for i in ids)
        expected = data.decode("utf-8", errors="replace")
        if isinstance(got, (bytes, bytearray)):
            hint("return the text as a str: decode the joined bytes with .decode('utf-8', errors='replace').")
        if not isinstance(got, str):
            hint(f"return the text, a str; you returned {describe(got)} (wrong type).")
        if got == expected:
            continue
        per_token = "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)
        if got == per_token:
            hint(f"for ids={ids} you decoded each token on its own: {got!r}. A character's bytes may be "
                 "split between tokens (é is b'\\xc3' + b'\\xa9'): join all the bytes first, then decode once.")
        if got == data.decode("utf-8", errors="ignore"):
            hint("errors='ignore' drops a cut character silently; use errors='replace', which shows it as "
                 "'\ufffd', as GPT-2 does.")
        if got == data.decode("utf-8-sig", errors="replace"):
            hint("fails on a byte-order mark at the start: 'utf-8-sig' drops it, but it is text the tokens hold "
                 "(U+FEFF); decode with plain 'utf-8'.")
        hint(f"fails on {name}: for ids={ids} you returned {got!r}, expected {expected!r}.", generic=True)
    passed("the bytes joined first, then decoded once.")


# --------------------------------------------------------------------------- Exercise 11.6
def _train_classes(rng: random.Random) -> list[tuple[str, str, int]]:
    """(class, text, n_merges). Each class is a situation the stated rules decide."""
    cases = [("the chapter's toy text", " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6 + ["widest"] * 3), 10),
             ("runs of one byte", "aaaaaaa aaaa bbb aaaaa", 6), ("runs of one byte", "zzzzzzzzzz", 4),
             ("ties: every pair once", "abcdef ghij", 6), ("ties: every pair once", "xy yx", 3),
             ("ties between bytes of different ranges", "\u00e9a a\u00e9 \u00e9a a\u00e9 \n\n \t\t", 5),
             ("spaces and punctuation (pre-tokenization)", "the cat, the hat; the mat!  the\n\nthe", 8),
             ("non-ASCII characters", "caf\u00e9 caf\u00e9 \u65e5\u672c \u65e5\u672c \U0001F917\U0001F917", 10),
             ("repeated words", "ab ab ab abc abc bc bc bc bcx abcx", 8),
             ("more merges asked than pairs exist", "ab ab", 5), ("an empty text", "", 3),
             ("contractions", "don't I'll we're it's 's 's", 6),
             ("the same text again with fewer merges", " ".join(["low"] * 5 + ["lower"] * 2 + ["newest"] * 6
                                                                  + ["widest"] * 3), 4),
             ("the same text again with more merges", "aaaaaaa aaaa bbb aaaaa", 9)]
    for _ in range(10):
        text = "".join(rng.choice(["a", "a", "b", "ab", " ", "c", "\u00e9", ".", "aa"]) for _ in range(rng.randrange(8, 40)))
        cases.append(("generated texts", text, rng.randrange(1, 15)))
    fresh = random.Random()
    for _ in range(3):
        text = "".join(fresh.choice(["x", "y", "xy", " ", "zz", "!"]) for _ in range(fresh.randrange(8, 40)))
        cases.append(("generated texts", text, fresh.randrange(1, 12)))
    return cases


def _train_wrong(text: str, n: int, *, pre: bool = True, order: str = "gpt2", reuse: bool = True,
                 overlap: bool = True) -> list:
    """A trainer with one rule changed, to name a mistake: no pre-tokenization, another tie-break, a
    new id for a token that already exists, or pairs counted without overlaps (a run a, a, a counts
    (a, a) once)."""
    words = Counter(regex.findall(bpe.GPT2_PATTERN, text) if pre else ([text] if text else []))
    base = list(range(256)) if order == "bytes" else list(bpe.bytes_to_unicode())
    tokens = [bytes([b]) for b in base]
    ident = {t: i for i, t in enumerate(tokens)}
    seqs = {w: [ident[bytes([b])] for b in w.encode("utf-8")] for w in words}
    merges = []
    for _ in range(n):
        counts = Counter()
        for w, f in words.items():
            ids, i = seqs[w], 0
            while i + 1 < len(ids):
                counts[(ids[i], ids[i + 1])] += f
                i += 2 if not overlap and ids[i] == ids[i + 1] else 1
        if not counts:
            break
        if order == "largest":
            best = max(counts, key=lambda p: (counts[p], p))
        else:
            best = min(counts, key=lambda p: (-counts[p], p))
        new = tokens[best[0]] + tokens[best[1]]
        new_id = ident.get(new) if reuse else None
        if new_id is None:
            new_id = len(tokens)
            tokens.append(new)
            ident.setdefault(new, new_id)
        merges.append((tokens[best[0]], tokens[best[1]]))
        seqs = {w: bpe.merge(ids, best, new_id) for w, ids in seqs.items()}
    return merges


def _merges_of(got, call: str) -> list[tuple[bytes, bytes]]:
    if not isinstance(got, (list, tuple)):
        hint(f"{call} should return the merges, a list of pairs of bytes such as (b' ', b't'); you returned "
             f"{describe(got)} (wrong type).")
    out = []
    for m in got:
        if not (isinstance(m, (tuple, list)) and len(m) == 2 and all(isinstance(t, bytes) for t in m)):
            if isinstance(m, (tuple, list)) and len(m) == 2 and all(_is_int(t) for t in m):
                hint("return each merge as the bytes of its two tokens, (b'e', b's'), not as their ids.")
            if isinstance(m, bytes):
                hint("return each merge as the pair of tokens it joins, (b'e', b's'), not the new token b'es'.")
            hint(f"each merge is a pair of bytes such as (b'e', b's'); one item is {describe(m)} (wrong type).")
        out.append((m[0], m[1]))
    return out


@checker("Exercise 11.6", allow=("companion.bpe",))  # the text allows every bpe function but train
def train_bpe(my_train) -> None:
    """``my_train(text, n_merges)`` -> the list of merges (pairs of bytes) that
    ``companion.bpe.train(text, 256 + n_merges)`` learns: GPT-2's pre-tokenization, counts over the
    pre-tokens, the most frequent pair, ties to the smallest pair of ids (the bytes numbered in GPT-2's
    order, merged tokens in creation order, a recreated token keeps its id); stop early without pairs."""
    classes = _train_classes(random.Random(116))
    original = bpe.train
    used = []

    def watched(*args, **kwargs):
        used.append(True)
        return original(*args, **kwargs)

    bpe.train = watched
    try:
        answers = _run_all(my_train, [(text, n) for _, text, n in classes])
    finally:
        bpe.train = original
    facts = source_facts(my_train)
    if used or "bpe.train" in facts.chains or "companion.bpe.train" in facts.imported:
        hint("your function calls bpe.train, the trainer the exercise asks you to write.")
    for (name, text, n), answer in zip(classes, answers):
        call = f"my_train({text!r}, {n})" if len(text) < 40 else f"my_train({text[:37]!r}..., {n})"
        got = _merges_of(answer, call)
        expected = bpe.train(text, 256 + n).merges
        if got == expected:
            continue
        if len(got) > len(expected) and got[:len(expected)] == expected:
            hint(f"fails on {name}: {call} returned {len(got)} merges; after {len(expected)} no pair is left "
                 "(every pre-token is one token): stop there.")
        if name.startswith("the same text again") and got in ([], *(bpe.train(t, 256 + m).merges
                                                               for _, t, m in classes if t == text and m != n)):
            hint(f"fails on {name}: {call} returned the merges of an earlier call with the same text and "
                 "another n_merges: compute them again at every call, for the n_merges asked.")
        # each mistake's trainer; a hint names one only when it alone gives this answer
        mistakes = [(dict(pre=False), f"merged across pre-tokens ({got[:4]}...). Cut the text with GPT-2's "
                                      "regular expression first and count pairs inside each piece only."),
                    (dict(overlap=False), "counted the pairs of a run of one token without overlaps: in a, a, a "
                                          "the pair (a, a) occurs twice (positions 0 and 1), as in exercise 11.1."),
                    (dict(order="bytes"), "broke a tie by byte values. Number the bytes in GPT-2's order (the "
                                          "printable ones first), then take the smallest pair of ids among the "
                                          "most frequent."),
                    (dict(order="largest"), "broke a tie toward the largest pair; take the smallest pair of ids."),
                    (dict(reuse=False), "gave a new id to a token that already existed. When a merge makes bytes "
                                        "that are already a token, reuse that token's id.")]
        named = [message for options, message in mistakes if got == _train_wrong(text, n, **options) != expected]
        if len(named) == 1:
            hint(f"fails on {name}: {call} {named[0]}")
        k = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
        hint(f"fails on {name}: {call} differs at merge {k}: you have "
             f"{got[k] if k < len(got) else 'nothing'}, expected {expected[k] if k < len(expected) else 'nothing'} "
             f"(expected {expected[:k + 1]}).", generic=True)
    passed("pre-tokens counted with their frequencies, the most frequent pair merged, ties to the smallest "
           "pair of ids: the companion's merges, one for one.")


# --------------------------------------------------------------------------- Exercise 11.7
END_OF_TEXT = "<|endoftext|>"


def encode_with_special(tokenizer: "bpe.BPETokenizer", text: str, allowed_special) -> list[int]:
    """The reference of exercise 11.7, as tiktoken encodes: the text is cut at the names of the
    *allowed* special tokens only, each becomes its id, and each piece between
    them is encoded as ordinary text (a name that is not allowed stays ordinary text)."""
    allowed = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    if not allowed:
        return tokenizer.encode_ordinary(text)
    cut = regex.compile("(" + "|".join(regex.escape(t) for t in sorted(allowed, key=len, reverse=True)) + ")")
    out: list[int] = []
    for i, chunk in enumerate(cut.split(text)):
        if i % 2 == 1:
            out.append(tokenizer.special_tokens[chunk])
        elif chunk:
            out.extend(tokenizer.encode_ordinary(chunk))
    return out


def _cut_at_every_name(tokenizer: "bpe.BPETokenizer", text: str, allowed_special) -> list[int]:
    """A mistake: cutting at every special name, allowed or not (a name not allowed becomes a piece of
    ordinary text on its own, which changes how the text around it is cut)."""
    allowed = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    cut = regex.compile("(" + "|".join(regex.escape(t) for t in tokenizer.special_tokens) + ")")
    out: list[int] = []
    for i, chunk in enumerate(cut.split(text)):
        if i % 2 == 1 and chunk in allowed:
            out.append(tokenizer.special_tokens[chunk])
        elif chunk:
            out.extend(tokenizer.encode_ordinary(chunk))
    return out


class _Watched(bpe.BPETokenizer):
    """The tokenizer handed to the student: records a call of ``encode`` (the method the exercise
    rebuilds); ``encode_ordinary`` is the student's to use."""

    def encode(self, text, allowed_special=()):  # type: ignore[override]
        self.__dict__.setdefault("_encode_calls", []).append(text)
        return super().encode(text, allowed_special)


def _special_tokenizer(watched: bool = True, nested: int = 0) -> bpe.BPETokenizer:
    """The tokenizer of the check: a :class:`_Watched` one in a notebook; in the grader, whose wire
    carries only the course's own classes, a plain one (the source is read for ``.encode`` there).
    ``nested`` adds that many more pairs of names, one a prefix of the other (``<|n0`` and ``<|n0|>``)."""
    merges = bpe.train("the cat sat on the mat. <|endoftext|> hello world! " * 3, 256 + 40).merges
    n = len(bpe.BPETokenizer(merges).id_to_token)
    kind = _Watched if watched else bpe.BPETokenizer
    # "<|end" is a prefix of END_OF_TEXT: where both match at one place, the longer name wins (the text says so)
    specials = {END_OF_TEXT: n, "<|fim|>": n + 1, "<|pad|>": n + 2, "<|end": n + 3}
    for i in range(nested):
        specials[f"<|n{i}"], specials[f"<|n{i}|>"] = n + 4 + 2 * i, n + 5 + 2 * i
    return kind(merges, special_tokens=specials)


def _calls_encode(fn) -> bool:
    """Whether the student's source calls ``<its tokenizer argument>.encode(`` (read without running it)."""
    import ast
    import textwrap

    source = rules.source_of(fn)
    try:
        tree = ast.parse(textwrap.dedent(source or ""))
    except SyntaxError:
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and len(node.args.args) >= 2:
            name = node.args.args[1].arg
            for call in ast.walk(node):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "encode"
                        and isinstance(call.func.value, ast.Name) and call.func.value.id == name):
                    return True
    return False


def _special_classes(rng: random.Random) -> list[tuple[str, str, object]]:
    eot = END_OF_TEXT
    docs = ["the cat sat.", "hello world!", "on the mat", "x"]
    cases = [("no special token in the text", "the cat sat on the mat", {eot}),
             ("documents joined by the end-of-text token", eot.join(docs), {eot}),
             ("documents joined by the end-of-text token", eot.join(docs[:2]) + eot, {eot}),
             ("a name in a user's text, not allowed", "hello " + eot + " world", set()),
             ("a name in a user's text, not allowed", eot + eot, ()),
             ("an allowed name right after a space", "the cat " + eot + "the mat", {eot}),
             ("a name that is not allowed beside an allowed one", "a <|fim|> b" + eot + "c", [eot]),
             ("a name that is not allowed beside an allowed one", "hello <|endoftext|>!<|fim|>", ["<|fim|>"]),
             ("two different allowed names", "a<|fim|>b<|pad|><|fim|>", {"<|fim|>", "<|pad|>"}),
             ("every name allowed: 'all'", "x<|fim|>x" + eot + " <|fim|>", "all"),
             ("an empty text", "", {eot}),
             ("the same text again with another allowed_special", "hello " + eot + " world", {eot}),
             ("the same text again with another allowed_special", eot + eot, "all"),
             ("special names that are prefixes of each other", "a<|end b" + eot + "<|end", {eot, "<|end"}),
             ("special names that are prefixes of each other", eot + "<|end" + eot, ["<|end", eot]),
             ("special names that are prefixes of each other", "x" + eot, ("<|end",))]
    parts = ["the", " cat", eot, "<|fim|>", "<|pad|>", " ", "!", "hello", "\n", "x"]
    for gen in [rng] * 10 + [random.Random()] * 3:
        text = "".join(gen.choice(parts) for _ in range(gen.randrange(1, 12)))
        allowed = gen.choice([set(), {eot}, {"<|fim|>"}, {eot, "<|pad|>"}, "all"])
        cases.append(("generated texts", text, allowed))
    return cases


@checker("Exercise 11.7", companion_given=True)  # the student uses the given tokenizer's encode_ordinary
def special_tokens(my_encode) -> None:
    """``my_encode(text, tokenizer, allowed_special)``: split on the allowed special-token names before the regular expression; each allowed name is its id; the pieces between are
    encoded with ``tokenizer.encode_ordinary``; names that are not allowed are ordinary text."""
    remote = rules.is_remote(my_encode)
    tokenizer = _special_tokenizer(watched=not remote)
    classes = _special_classes(random.Random(117))
    answers = _run_all(my_encode, [(text, tokenizer, (allowed if isinstance(allowed, str) else type(allowed)(allowed)))
                                   for _, text, allowed in classes])
    if tokenizer.__dict__.get("_encode_calls") or (remote and _calls_encode(my_encode)):
        hint("your function calls tokenizer.encode, the method the exercise asks you to write: use "
             "tokenizer.encode_ordinary for the pieces between special tokens.")
    for (name, text, allowed), answer in zip(classes, answers):
        call = f"my_encode({text!r}, tokenizer, {allowed!r})"
        got = _ids_of(answer, call)
        expected = encode_with_special(tokenizer, text, allowed)
        if got == expected:
            continue
        if name.startswith("the same text again") and any(
                got == encode_with_special(tokenizer, t, a) for n2, t, a in classes if t == text and a != allowed):
            hint(f"fails on {name}: {call} returned the ids of an earlier call with the same text and another "
                 "allowed_special: encode again at every call, with the names allowed in that call.")
        if name == "special names that are prefixes of each other":
            hint(f"fails on {name}: {call} gave {got}, expected {expected}. Where two allowed names both "
                 "match at one place ('<|end' is a prefix of '<|endoftext|>'), the longer one wins: try the "
                 "names longest first.")
        ids = set(tokenizer.special_tokens.values())
        allowed_set = set(tokenizer.special_tokens) if allowed == "all" else set(allowed)
        if got == tokenizer.encode_ordinary(text) and allowed_set:
            hint(f"fails on {name}: {call} read the allowed names as ordinary text; each allowed name must "
                 "become its one id: look for the names before the regular expression runs (it cuts "
                 "'<|endoftext|>' into '<|', 'endoftext', '|>').")
        if got == _cut_at_every_name(tokenizer, text, allowed):
            hint(f"fails on {name}: {call} gave {got}, expected {expected}. Cut only at the allowed names; a "
                 "name that is not allowed stays inside the ordinary text around it.")
        if any(i in ids for i in got) and not allowed_set:
            hint(f"fails on {name}: {call} turned a name into a special id although allowed_special is empty: "
                 "a user's text must not be able to smuggle in a control token.")
        if name == "a name that is not allowed beside an allowed one":
            hint(f"fails on {name}: {call} gave {got}, expected {expected}. Cut only at the allowed names; a "
                 "name that is not allowed stays inside the ordinary text around it.")
        if name == "an allowed name right after a space":
            hint(f"fails on {name}: {call} gave {got}, expected {expected}. Cut at the special names before "
                 "the regular expression runs, then encode each piece between them on its own.")
        hint(f"fails on {name}: {call} gave {got}, expected {expected}.", generic=True)
    # A scan that tries the names in a set's order picks the shorter of two nested names on some hash
    # seeds only (outsider o1's "manual scan" passed under PYTHONHASHSEED=0 and failed under others);
    # with 16 nested pairs, every order but one in 65,536 puts a shorter name first somewhere.
    nested = _special_tokenizer(watched=not remote, nested=16)
    longs = [f"<|n{i}|>" for i in range(16)]
    text = "a" + "".join(longs) + " b"
    for allowed in ("all", set(longs) | {name[:-2] for name in longs}):
        shown = "'all'" if allowed == "all" else "all 32 names, as a set"
        call = f"my_encode('a<|n0|><|n1|>...<|n15|> b', tokenizer, {shown})"
        got = _ids_of(_run_all(my_encode, [(text, nested, allowed)])[0], call)
        expected = encode_with_special(nested, text, allowed)
        if got != expected:
            hint(f"fails on many special names that are prefixes of each other (a tokenizer with '<|n0' and "
                 f"'<|n0|>', ... '<|n15' and '<|n15|>'): {call} gave {got[:6]}..., expected {expected[:6]}... "
                 "Where two allowed names both match at one place, the longer one wins: try the names longest "
                 "first (a set has no order you can rely on).")
    passed("allowed names cut out first and written as their ids, everything else ordinary text, as tiktoken "
           "encodes.")
