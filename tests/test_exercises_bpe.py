"""Chapter 11's checkers: the book's answers and other right answers pass, each wrong answer gets a
hint (never a pass), junk never makes a checker fail inside its own code."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import regex
import torch

from companion import bpe
from companion.exercises import bpe as check


def _merged(parts, pair):
    out, i = [], 0
    while i < len(parts):
        if i + 1 < len(parts) and (parts[i], parts[i + 1]) == pair:
            out.append(parts[i] + parts[i + 1])
            i += 2
        else:
            out.append(parts[i])
            i += 1
    return out


def encode_by_rank(word, merges):
    rank = {m: i for i, m in enumerate(merges)}
    parts = [bytes([b]) for b in word]
    while len(parts) > 1:
        best = min(zip(parts, parts[1:]), key=lambda p: rank.get(p, float("inf")))
        if best not in rank:
            break
        parts = _merged(parts, best)
    return parts


def encode_in_list_order(word, merges):  # each merge once, in rank order: also right
    parts = [bytes([b]) for b in word]
    for m in merges:
        parts = _merged(parts, m)
    return parts


def encode_reversed(word, merges):
    parts = [bytes([b]) for b in word]
    for m in reversed(merges):
        parts = _merged(parts, m)
    return parts


def encode_characters(word, merges):
    parts = [c.encode() for c in word.decode()]
    for m in merges:
        parts = _merged(parts, m)
    return parts


def encode_one_round(word, merges):
    rank = {m: i for i, m in enumerate(merges)}
    parts = [bytes([b]) for b in word]
    if len(parts) < 2:
        return parts
    best = min(zip(parts, parts[1:]), key=lambda p: rank.get(p, float("inf")))
    return _merged(parts, best) if best in rank else parts


def encode_most_frequent(word, merges):
    parts = [bytes([b]) for b in word]
    while True:
        present = [p for p in zip(parts, parts[1:]) if p in merges]
        if not present:
            return parts
        parts = _merged(parts, Counter(present).most_common(1)[0][0])


def merge_first_only(ids, pair, new_id):
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == pair:
            return ids[:i] + [new_id] + ids[i + 2:]
    return list(ids)


def merge_loop_bound(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def merge_in_place(ids, pair, new_id):
    ids[:] = merge_by_hand(ids, pair, new_id)
    return ids


def counts_mutating(ids):
    ids.sort()  # changes the caller's list
    return dict(Counter(zip(ids, ids[1:])))


def table_with(changes):
    def make():
        table = table_by_hand()
        table.update(changes)
        return table
    return make


def table_reversed_shift():
    table = table_by_hand()
    moved = [b for b in range(256) if ord(table[b]) >= 256]
    for i, b in enumerate(reversed(moved)):
        table[b] = chr(256 + i)
    return table


def merge_by_hand(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def table_by_hand():
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table = {b: chr(b) for b in printable}
    for n, b in enumerate(b for b in range(256) if b not in table):
        table[b] = chr(256 + n)
    return table


def pairs_on_string(ids):  # counts on " ".join(map(str, ids)): 11 looks like 1 1
    s = " ".join(map(str, ids))
    out = {}
    for a, b in set(zip(ids, ids[1:])):
        out[(a, b)] = s.count(f"{a} {b}")
    return out


def merge_on_string(ids, pair, new_id):  # replaces on the joined string
    s = " " + " ".join(map(str, ids)) + " "
    s = s.replace(f" {pair[0]} {pair[1]} ", f" {new_id} ")
    return [int(x) for x in s.split()]


def encode_all_present(word, merges):  # every pair present at the start of a round, in rank order
    parts = [bytes([b]) for b in word]
    while True:
        present = sorted({p for p in zip(parts, parts[1:]) if p in merges}, key=merges.index)
        if not present:
            return parts
        for p in present:
            parts = _merged(parts, p)


def encode_rightmost(word, merges):  # merges the best pair's occurrences from the right
    rank = {m: i for i, m in enumerate(merges)}
    parts = [bytes([b]) for b in word]
    while len(parts) > 1:
        best = min(zip(parts, parts[1:]), key=lambda p: rank.get(p, float("inf")))
        if best not in rank:
            break
        out, i = [], len(parts) - 1
        while i >= 0:
            if i > 0 and (parts[i - 1], parts[i]) == best:
                out.append(best[0] + best[1])
                i -= 2
            else:
                out.append(parts[i])
                i -= 1
        parts = out[::-1]
    return parts


def decode_strict_fallback(ids, vocab):
    data = b"".join(vocab[i] for i in ids)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)


ORDER = [*range(33, 127), *range(161, 173), *range(174, 256)]
ORDER += [b for b in range(256) if b not in ORDER]
PATTERN = bpe.GPT2_PATTERN


def train_by_hand(text, n_merges, *, pre=True, order=ORDER, largest=False, reuse=True, distinct=False,
                  no_stop=False):
    words = Counter(regex.findall(PATTERN, text) if pre else ([text] if text else []))
    tokens = [bytes([b]) for b in order]
    ident = {t: i for i, t in enumerate(tokens)}
    seqs = {w: [ident[bytes([b])] for b in w.encode()] for w in words}
    merges = []
    for _ in range(n_merges):
        counts = Counter()
        for w, f in words.items():
            pairs = set(zip(seqs[w], seqs[w][1:])) if distinct else zip(seqs[w], seqs[w][1:])
            for p in pairs:
                counts[p] += f
        if not counts:
            if no_stop:
                merges.append((b"", b""))
                continue
            break
        best = max(counts, key=lambda p: (counts[p], p)) if largest else min(counts, key=lambda p: (-counts[p], p))
        new = tokens[best[0]] + tokens[best[1]]
        new_id = ident.get(new) if reuse else None
        if new_id is None:
            new_id = len(tokens)
            tokens.append(new)
            ident.setdefault(new, new_id)
        merges.append((tokens[best[0]], tokens[best[1]]))
        seqs = {w: merge_by_hand(ids, best, new_id) for w, ids in seqs.items()}
    return merges


def special_by_hand(text, tokenizer, allowed_special):
    allowed = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    out, i = [], 0
    names = sorted(allowed, key=len, reverse=True)
    start = 0
    while i < len(text):
        name = next((n for n in names if text.startswith(n, i)), None)
        if name is None:
            i += 1
            continue
        out += tokenizer.encode_ordinary(text[start:i]) if i > start else []
        out.append(tokenizer.special_tokens[name])
        i += len(name)
        start = i
    return out + (tokenizer.encode_ordinary(text[start:]) if start < len(text) else [])


def special_on_all_names(text, tokenizer, allowed_special):  # cuts at every name, as companion's encode
    allowed = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    names = sorted(tokenizer.special_tokens, key=len, reverse=True)
    out = []
    for k, chunk in enumerate(regex.split("(" + "|".join(map(regex.escape, names)) + ")", text)):
        if k % 2 and chunk in allowed:
            out.append(tokenizer.special_tokens[chunk])
        elif chunk:
            out += tokenizer.encode_ordinary(chunk)
    return out


def special_shortest_first(text, tokenizer, allowed_special):
    allowed = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    if not allowed:
        return tokenizer.encode_ordinary(text)
    out = []
    for k, chunk in enumerate(regex.split("(" + "|".join(map(regex.escape, sorted(allowed, key=len))) + ")", text)):
        if k % 2:
            out.append(tokenizer.special_tokens[chunk])
        elif chunk:
            out += tokenizer.encode_ordinary(chunk)
    return out


def special_always(text, tokenizer, allowed_special):  # ignores allowed_special
    return special_by_hand(text, tokenizer, "all")


def special_after_regex(text, tokenizer, allowed_special):  # pre-tokenizes first, then looks for names
    allowed = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    out = []
    for piece in regex.findall(PATTERN, text):
        if piece in allowed:
            out.append(tokenizer.special_tokens[piece])
        else:
            out += tokenizer.encode_ordinary(piece)
    return out


RIGHT = [
    (check.pair_counts, lambda ids: dict(Counter(zip(ids, ids[1:])))),
    (check.pair_counts, lambda ids: Counter(zip(ids, ids[1:]))),
    (check.pair_counts, lambda ids: {k: np.int64(v) for k, v in Counter(zip(ids, ids[1:])).items()}),
    (check.merge, merge_by_hand),
    (check.merge, lambda ids, pair, n: tuple(merge_by_hand(ids, pair, n))),
    (check.train_bpe, train_by_hand),
    (check.special_tokens, special_by_hand),
    (check.encode_word, encode_by_rank),
    (check.encode_word, encode_in_list_order),
    (check.bytes_to_unicode, table_by_hand),
    (check.bytes_to_unicode, lambda: {b: table_by_hand()[b] for b in reversed(range(256))}),
    (check.decode, lambda ids, v: b"".join(v[i] for i in ids).decode("utf-8", errors="replace")),
    (check.decode, lambda ids, v: bytes(b for i in ids for b in v[i]).decode("utf-8", "replace")),
]

#: The course's own implementation is never an answer (the shared rule of every checker).
COMPANION = [
    (check.pair_counts, lambda ids: bpe.pair_counts(list(ids))),
    (check.merge, lambda ids, pair, n: bpe.merge(ids, pair, n)),
    (check.encode_word, lambda w, m: bpe.BPETokenizer(list(m)).encode_word(w)),
    (check.bytes_to_unicode, bpe.bytes_to_unicode),
]

WRONG = {
    "pairs: non-overlapping": (check.pair_counts, lambda ids: dict(Counter(zip(ids[::2], ids[1::2])))),
    "pairs: ones": (check.pair_counts, lambda ids: {p: 1 for p in zip(ids, ids[1:])}),
    "pairs: wrap around": (check.pair_counts, lambda ids: dict(Counter(zip(ids, ids[1:] + ids[:1]))) if ids else {}),
    "pairs: a list": (check.pair_counts, lambda ids: list(zip(ids, ids[1:]))),
    "pairs: mutates": (check.pair_counts, counts_mutating),
    "pairs: string keys": (check.pair_counts, lambda ids: {f"{a},{b}": c for (a, b), c in Counter(zip(ids, ids[1:])).items()}),
    "pairs: float counts": (check.pair_counts, lambda ids: {k: float(v) for k, v in Counter(zip(ids, ids[1:])).items()}),
    "pairs: reversed pairs": (check.pair_counts, lambda ids: dict(Counter(zip(ids[1:], ids)))),
    "merge: first only": (check.merge, merge_first_only),
    "merge: loop bound": (check.merge, merge_loop_bound),
    "merge: in place": (check.merge, merge_in_place),
    "merge: on a joined string": (check.merge, merge_on_string),
    "pairs: on a joined string": (check.pair_counts, pairs_on_string),
    "encode: all present pairs per round": (check.encode_word, encode_all_present),
    "encode: rightmost first": (check.encode_word, encode_rightmost),
    "decode: utf-8-sig": (check.decode, lambda ids, v: b"".join(v[i] for i in ids).decode("utf-8-sig", "replace")),
    "decode: strict, then per token": (check.decode, decode_strict_fallback),
    "train: no pre-tokenization": (check.train_bpe, lambda t, n: train_by_hand(t, n, pre=False)),
    "train: byte order": (check.train_bpe, lambda t, n: train_by_hand(t, n, order=list(range(256)))),
    "train: largest pair": (check.train_bpe, lambda t, n: train_by_hand(t, n, largest=True)),
    "train: pairs counted once per word": (check.train_bpe, lambda t, n: train_by_hand(t, n, distinct=True)),
    "train: never stops": (check.train_bpe, lambda t, n: train_by_hand(t, n, no_stop=True)),
    "train: merged tokens": (check.train_bpe, lambda t, n: [a + b for a, b in train_by_hand(t, n)]),
    "train: calls bpe.train": (check.train_bpe, lambda t, n: bpe.train(t, 256 + n).merges),
    "special: every name cut": (check.special_tokens, special_on_all_names),
    "special: always allowed": (check.special_tokens, special_always),
    "special: after the regex": (check.special_tokens, special_after_regex),
    "special: ordinary": (check.special_tokens, lambda t, tok, a: tok.encode_ordinary(t)),
    "special: tokenizer.encode": (check.special_tokens, lambda t, tok, a: tok.encode(t, a)),
    "merge: tensor": (check.merge, lambda ids, pair, n: torch.tensor(merge_by_hand(ids, pair, n))),
    "merge: drops the pair": (check.merge, lambda ids, pair, n: [x for x in merge_by_hand(ids, pair, n) if x != n]),
    "encode: reversed ranks": (check.encode_word, encode_reversed),
    "encode: characters": (check.encode_word, encode_characters),
    "encode: str tokens": (check.encode_word, lambda w, m: [t.decode("latin-1") for t in encode_by_rank(w, m)]),
    "encode: ids": (check.encode_word, lambda w, m: list(range(len(encode_by_rank(w, m))))),
    "encode: one round": (check.encode_word, encode_one_round),
    "encode: most frequent": (check.encode_word, encode_most_frequent),
    "bytes: identity": (check.bytes_to_unicode, lambda: {b: chr(b) for b in range(256)}),
    "bytes: all shifted": (check.bytes_to_unicode, lambda: {b: chr(256 + b) for b in range(256)}),
    "bytes: soft hyphen kept": (check.bytes_to_unicode, table_with({173: chr(173)})),
    "bytes: shift reversed": (check.bytes_to_unicode, table_reversed_shift),
    "bytes: a list": (check.bytes_to_unicode, lambda: list(table_by_hand().values())),
    "bytes: str keys": (check.bytes_to_unicode, lambda: {str(b): c for b, c in table_by_hand().items()}),
    "decode: per token": (check.decode, lambda ids, v: "".join(v[i].decode("utf-8", errors="replace") for i in ids)),
    "decode: ignore": (check.decode, lambda ids, v: b"".join(v[i] for i in ids).decode("utf-8", errors="ignore")),
    "decode: strict": (check.decode, lambda ids, v: b"".join(v[i] for i in ids).decode("utf-8")),
    "decode: bytes": (check.decode, lambda ids, v: b"".join(v[i] for i in ids)),
    "decode: latin-1": (check.decode, lambda ids, v: b"".join(v[i] for i in ids).decode("latin-1")),
}

JUNK = [None, "text", 10**400, torch.tensor([]), torch.tensor([1 + 2j]), float("nan"), [], {}, b"", object()]


@pytest.mark.parametrize("checker,answer", RIGHT)
def test_right_answers_pass(checker, answer):
    feedback = checker(answer)
    assert feedback.passed, feedback


@pytest.mark.parametrize("checker,answer", COMPANION)
def test_the_companions_own_code_is_not_an_answer(checker, answer):
    feedback = checker(answer)
    assert feedback.status == "hint" and "companion" in repr(feedback), feedback


@pytest.mark.parametrize("name", sorted(WRONG))
def test_wrong_answers_get_a_hint(name):
    checker, answer = WRONG[name]
    feedback = checker(answer)
    assert feedback.status == "hint", (name, feedback)


@pytest.mark.parametrize("checker", [check.pair_counts, check.merge, check.encode_word, check.bytes_to_unicode,
                                     check.decode, check.train_bpe, check.special_tokens])
@pytest.mark.parametrize("junk", JUNK, ids=["None", "str", "huge int", "empty tensor", "complex tensor", "nan",
                                          "empty list", "empty dict", "empty bytes", "object"])
def test_junk_never_breaks_a_checker(checker, junk):
    feedback = checker(lambda *args: junk)
    assert feedback.status == "hint", feedback
    text = repr(feedback)
    assert all(len(line) <= 78 for line in text.splitlines())


def test_specific_hints_name_the_mistake():
    assert "overlap" in repr(check.pair_counts(WRONG["pairs: non-overlapping"][1]))
    assert "first occurrence" in repr(check.merge(merge_first_only))
    assert "last to the first" in repr(check.encode_word(encode_reversed))
    assert "single bytes" in repr(check.encode_word(encode_characters))
    assert "soft hyphen" in repr(check.bytes_to_unicode(table_with({173: chr(173)})))
    assert "each token on its own" in repr(check.decode(WRONG["decode: per token"][1]))


def encode_leftmost_first(word, merges):  # merges the leftmost mergeable pair, whatever its rank
    parts = [bytes([b]) for b in word]
    while True:
        for i, pair in enumerate(zip(parts, parts[1:])):
            if pair in merges:
                parts = parts[:i] + [pair[0] + pair[1]] + parts[i + 2:]
                break
        else:
            return parts


def test_leftmost_first_is_not_told_it_reversed_the_list():
    feedback = check.encode_word(encode_leftmost_first)
    assert feedback.status == "hint" and "last to the first" not in repr(feedback), feedback


def test_the_special_token_reference_is_tiktokens_encoding():
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks

    files = {name: str(path) for name, path in bpe.gpt2_files().items()}
    ranks = data_gym_to_mergeable_bpe_ranks(files["vocab.bpe"], files["encoder.json"])
    special = {"<|endoftext|>": 50256, "<|fim|>": 50257, "<|pad|>": 50258, "<|end": 50259}
    ref = tiktoken.Encoding("gpt2-local", pat_str=bpe.GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=special)
    ours = bpe.BPETokenizer(bpe.BPETokenizer.gpt2().merges, special_tokens=special)
    import random
    for name, text, allowed in check._special_classes(random.Random(0)):
        if name == "special names that are prefixes of each other":  # tiktoken's order is a hash map's there
            continue
        wanted = set(special) if allowed == "all" else set(allowed)
        assert check.encode_with_special(ours, text, allowed) == ref.encode(
            text, allowed_special=wanted, disallowed_special=()), (text, allowed)


def test_the_edge_classes_are_exercised():
    import random
    classes = check._train_classes(random.Random(116))
    # a tie-break by byte values differs in the class of ties between bytes of different ranges
    text = next(t for name, t, _ in classes if "different ranges" in name)
    assert train_by_hand(text, 5) != train_by_hand(text, 5, order=list(range(256)))
    words = [w for name, w, _ in check._encode_classes(random.Random(113)) if name == "runs of one byte"]
    assert any(encode_rightmost(w, [(b"a", b"a")]) != encode_by_rank(w, [(b"a", b"a")]) for w in words)


def test_a_branch_left_unwritten_is_named_not_not_attempted():
    def half(ids):
        if len(ids) > 3:
            raise NotImplementedError
        return dict(Counter(zip(ids, ids[1:])))
    feedback = check.pair_counts(half)
    assert feedback.status == "hint" and "NotImplementedError" in repr(feedback), feedback

    def stub(ids):
        raise NotImplementedError
    assert check.pair_counts(stub).status == "not attempted"


SET_ORDER_SCAN = '''
from companion.exercises import bpe as check

def my_encode(text, tokenizer, allowed_special):
    names = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    out, start, i = [], 0, 0
    while i < len(text):
        hit = next((n for n in names if text.startswith(n, i)), None)  # a set's order, not longest first
        if hit is None:
            i += 1
            continue
        out += tokenizer.encode_ordinary(text[start:i]) if i > start else []
        out.append(tokenizer.special_tokens[hit])
        i = start = i + len(hit)
    return out + (tokenizer.encode_ordinary(text[start:]) if start < len(text) else [])

fb = check.special_tokens(my_encode)
print("PASSED" if fb.passed else "REJECTED", fb.message[:80])
'''


@pytest.mark.parametrize("hash_seed", ["0", "1", "2", "3", "4"])
def test_a_scan_in_set_order_fails_on_every_hash_seed(hash_seed):
    # Outsider o1's "manual scan" passed 11.7 under PYTHONHASHSEED=0 and failed under others: the set
    # of names decided whether '<|end' was tried before '<|endoftext|>'.
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONHASHSEED": hash_seed, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", SET_ORDER_SCAN], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("REJECTED"), done.stdout
