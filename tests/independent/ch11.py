"""Independent red-team cases for chapter 11 (byte-level BPE).

Written from the student notebook only: the exercise texts and the check cells (the outside red
team's false passes of issue 33 among them), never the checkers' code. See README.md.
"""
import textwrap

MODULE = "companion.exercises.bpe"
PRELUDE = """
import time
from collections import Counter
import regex
from companion import bpe
from companion.exercises import bpe as check
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE, name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 11.1 ---
case("11.1", "pair_counts", "joined_string_count", "wrong", "counts 'a b' in ' '.join(map(str, ids)): 11 looks like 1 1", """
def my_pair_counts(ids):
    s = " ".join(map(str, ids))
    return {p: s.count(f"{p[0]} {p[1]}") for p in set(zip(ids, ids[1:]))}
""", "my_pair_counts")
case("11.1", "pair_counts", "joined_string_regex", "right", "overlapping regex count on the padded joined string: each match is two whole ids", """
def my_pair_counts(ids):
    s = " " + " ".join(map(str, ids)) + " "
    return {p: len(regex.findall(f" {p[0]} {p[1]} ", s, overlapped=True)) for p in set(zip(ids, ids[1:]))}
""", "my_pair_counts")
case("11.1", "pair_counts", "numpy_counts", "right", "counts as NumPy integers", """
import numpy as np
def my_pair_counts(ids):
    out = {}
    for p in zip(ids, ids[1:]):
        out[p] = out.get(p, np.int64(0)) + np.int64(1)
    return out
""", "my_pair_counts")
case("11.1", "pair_counts", "branch_stub", "wrong", "raises NotImplementedError for long lists only", """
def my_pair_counts(ids):
    if len(ids) > 10:
        raise NotImplementedError
    return dict(Counter(zip(ids, ids[1:])))
""", "my_pair_counts")

# ---------------------------------------------------------------- 11.2 ---
case("11.2", "merge", "joined_string_replace", "wrong", "replaces on the joined string", """
def my_merge(ids, pair, new_id):
    s = " " + " ".join(map(str, ids)) + " "
    s = s.replace(f" {pair[0]} {pair[1]} ", f" {new_id} ")
    return [int(x) for x in s.split()]
""", "my_merge")
case("11.2", "merge", "tuple_result", "right", "returns a tuple of the right ids", """
def my_merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i:i + 2]) == tuple(pair):
            out.append(new_id); i += 2
        else:
            out.append(ids[i]); i += 1
    return tuple(out)
""", "my_merge")

# ---------------------------------------------------------------- 11.4 ---
case("11.4", "encode_word", "all_present_per_round", "wrong", "merges every pair present at the round's start, by rank", """
def my_encode_word(word, merges):
    parts = [bytes([b]) for b in word]
    while True:
        present = sorted({p for p in zip(parts, parts[1:]) if p in merges}, key=merges.index)
        if not present:
            return parts
        for a, b in present:
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b); i += 2
                else:
                    out.append(parts[i]); i += 1
            parts = out
""", "my_encode_word")
case("11.4", "encode_word", "rightmost_first", "wrong", "merges the best pair's occurrences from the right", """
def my_encode_word(word, merges):
    rank = {m: r for r, m in enumerate(merges)}
    parts = [bytes([b]) for b in word]
    while len(parts) > 1:
        best = min(zip(parts, parts[1:]), key=lambda p: rank.get(p, 10**9))
        if best not in rank:
            break
        out, i = [], len(parts) - 1
        while i >= 0:
            if i > 0 and (parts[i - 1], parts[i]) == best:
                out.append(parts[i - 1] + parts[i]); i -= 2
            else:
                out.append(parts[i]); i -= 1
        parts = out[::-1]
    return parts
""", "my_encode_word")

# ---------------------------------------------------------------- 11.5 ---
case("11.5", "decode", "utf8_sig", "wrong", "utf-8-sig drops a byte-order mark", """
def my_decode(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode("utf-8-sig", errors="replace")
""", "my_decode")
case("11.5", "decode", "strict_then_per_token", "wrong", "strict decoding, per-token fallback", """
def my_decode(ids, vocab):
    data = b"".join(vocab[i] for i in ids)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(vocab[i].decode("utf-8", "replace") for i in ids)
""", "my_decode")
case("11.5", "decode", "bytearray_join", "right", "joins into a bytearray first", """
def my_decode(ids, vocab):
    data = bytearray()
    for i in ids:
        data += vocab[i]
    return bytes(data).decode("utf-8", errors="replace")
""", "my_decode")

# ---------------------------------------------------------------- 11.6 ---
_TRAIN = '''
def my_train(text, n_merges):
    order = {order}
    token = [bytes([b]) for b in order]
    ident = {{t: i for i, t in enumerate(token)}}
    freq = Counter({pieces})
    seqs = {{w: [ident[bytes([b])] for b in w.encode()] for w in freq}}
    merges = []
    while len(merges) < n_merges:
        counts = Counter()
        for w, s in seqs.items():
            for p in {pairs}:
                counts[p] += freq[w]
        if not counts:
            break
        best = {best}
        new = token[best[0]] + token[best[1]]
        if new not in ident:
            ident[new] = len(token)
            token.append(new)
        merges.append((token[best[0]], token[best[1]]))
        seqs = {{w: bpe.merge(s, best, ident[new]) for w, s in seqs.items()}}
    return merges
'''
_RIGHT = dict(order="list(bpe.bytes_to_unicode())", pieces="regex.findall(bpe.GPT2_PATTERN, text)",
              pairs="zip(s, s[1:])", best="min(counts, key=lambda p: (-counts[p], p))")
case("11.6", "train_bpe", "right_with_companion_helpers", "right", "uses bpe.merge and bpe.bytes_to_unicode (allowed)",
     _TRAIN.format(**_RIGHT), "my_train")
case("11.6", "train_bpe", "byte_value_ties", "wrong", "ties broken by byte value", _TRAIN.format(**{**_RIGHT, "order": "range(256)"}), "my_train")
case("11.6", "train_bpe", "no_pretokenization", "wrong", "whole text as one piece",
     _TRAIN.format(**{**_RIGHT, "pieces": "[text] if text else []"}), "my_train")
case("11.6", "train_bpe", "split_on_spaces", "wrong", "pre-tokenizes with str.split", _TRAIN.format(**{**_RIGHT, "pieces": "text.split()"}), "my_train")
case("11.6", "train_bpe", "distinct_pairs", "wrong", "counts each pair once per piece",
     _TRAIN.format(**{**_RIGHT, "pairs": "set(zip(s, s[1:]))"}), "my_train")
case("11.6", "train_bpe", "max_tie_last", "wrong", "max() keeps the first maximum in insertion order",
     _TRAIN.format(**{**_RIGHT, "best": "max(counts, key=counts.get)"}), "my_train")
case("11.6", "train_bpe", "calls_train", "wrong", "calls bpe.train", """
def my_train(text, n_merges):
    return bpe.train(text, 256 + n_merges).merges
""", "my_train")

# ---------------------------------------------------------------- 11.7 ---
case("11.7", "special_tokens", "right_manual_scan", "right", "scans for names by hand", """
def my_encode(text, tokenizer, allowed_special):
    names = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    out, start, i = [], 0, 0
    while i < len(text):
        hit = next((n for n in names if text.startswith(n, i)), None)
        if hit is None:
            i += 1
            continue
        if i > start:
            out += tokenizer.encode_ordinary(text[start:i])
        out.append(tokenizer.special_tokens[hit])
        i = start = i + len(hit)
    if start < len(text):
        out += tokenizer.encode_ordinary(text[start:])
    return out
""", "my_encode")
case("11.7", "special_tokens", "every_name_cut", "wrong", "cuts at every special name, allowed or not", """
def my_encode(text, tokenizer, allowed_special):
    allowed = set(tokenizer.special_tokens) if allowed_special == "all" else set(allowed_special)
    out = []
    pattern = "(" + "|".join(regex.escape(n) for n in tokenizer.special_tokens) + ")"
    for k, piece in enumerate(regex.split(pattern, text)):
        if k % 2 and piece in allowed:
            out.append(tokenizer.special_tokens[piece])
        elif piece:
            out += tokenizer.encode_ordinary(piece)
    return out
""", "my_encode")
case("11.7", "special_tokens", "ignores_allowed", "wrong", "every name becomes its id", """
def my_encode(text, tokenizer, allowed_special):
    pattern = "(" + "|".join(regex.escape(n) for n in tokenizer.special_tokens) + ")"
    out = []
    for k, piece in enumerate(regex.split(pattern, text)):
        if k % 2:
            out.append(tokenizer.special_tokens[piece])
        elif piece:
            out += tokenizer.encode_ordinary(piece)
    return out
""", "my_encode")
case("11.7", "special_tokens", "uses_encode", "wrong", "calls tokenizer.encode", """
def my_encode(text, tokenizer, allowed_special):
    return tokenizer.encode(text, allowed_special)
""", "my_encode")

# ---------------------------------------------------------------- junk ---
import pathlib as _pathlib  # noqa: E402
import sys as _sys  # noqa: E402

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "11.1": ("pair_counts", "my_pair_counts", "ids"),
    "11.2": ("merge", "my_merge", "ids, pair, new_id"),
    "11.3": ("bytes_to_unicode", "my_bytes_to_unicode", ""),
    "11.4": ("encode_word", "my_encode_word", "word, merges"),
    "11.5": ("decode", "my_decode", "ids, vocab"),
    "11.6": ("train_bpe", "my_train", "text, n_merges"),
    "11.7": ("special_tokens", "my_encode", "text, tokenizer, allowed_special"),
})
