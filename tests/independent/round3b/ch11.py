"""Exercises 11.6 (a BPE trainer equal to bpe.train) and 11.7 (special tokens)."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from _util import Maker, junk, sub  # noqa: E402

MODULE = "companion.exercises.bpe"
PRELUDE = """
import time
from collections import Counter

import matplotlib.pyplot as plt
import regex

from companion import bpe
from companion.data import load_corpus
from companion.exercises import bpe as check
from companion.notebook import setup
from companion.translation import german
"""

# ----------------------------------------------------------------------------- 11.6
TRAIN = '''
import regex
from collections import Counter
from companion import bpe

def my_train(text, n_merges):
    pieces = Counter(regex.findall(bpe.GPT2_PATTERN, text))
    order = list(bpe.bytes_to_unicode())
    byte_id = {b: i for i, b in enumerate(order)}
    vocab = [bytes([b]) for b in order]
    token_id = {t: i for i, t in enumerate(vocab)}
    words = [[byte_id[b] for b in piece.encode("utf-8")] for piece in pieces]
    freqs = list(pieces.values())
    merges = []
    for _ in range(n_merges):
        counts = {}
        for ids, f in zip(words, freqs):
            for pair in zip(ids, ids[1:]):
                counts[pair] = counts.get(pair, 0) + f
        if not counts:
            break
        best = min(counts, key=lambda p: (-counts[p], p))
        a, b = best
        new_token = vocab[a] + vocab[b]
        new_id = token_id.get(new_token)
        if new_id is None:
            new_id = len(vocab)
            vocab.append(new_token)
            token_id[new_token] = new_id
        merges.append((vocab[a], vocab[b]))
        words = [bpe.merge(ids, best, new_id) for ids in words]
    return merges
'''

t = Maker("11.6", "train_bpe", MODULE, "my_train")
TW = lambda name, why, *pairs: t.add(name, "wrong", why, sub(TRAIN, *pairs))  # noqa: E731

t.add("right_base", "right", "recounts every round, tie by the smallest (id_a, id_b)", TRAIN)
t.add("right_companion_helpers", "right",
      "uses bpe.pair_counts with its counts/weight arguments and bpe.pre_tokenize (allowed helpers)",
      sub(TRAIN,
          ("        counts = {}\n        for ids, f in zip(words, freqs):\n            for pair in zip(ids, ids[1:]):\n                counts[pair] = counts.get(pair, 0) + f\n",
           "        counts = {}\n        for ids, f in zip(words, freqs):\n            bpe.pair_counts(ids, counts, weight=f)\n"),
          ("        best = min(counts, key=lambda p: (-counts[p], p))",
           "        top = max(counts.values())\n        best = min(p for p, c in counts.items() if c == top)")))
t.add("right_bytes_tokens", "right",
      "works on tokens as bytes (pieces as lists of bytes), ties broken through an id table",
      '''
import regex
from collections import Counter
from companion import bpe

def my_train(text, n_merges):
    freq = Counter(regex.findall(bpe.GPT2_PATTERN, text))
    ids = {bytes([b]): i for i, b in enumerate(bpe.bytes_to_unicode().keys())}
    words = {w: [bytes([c]) for c in w.encode("utf-8")] for w in freq}
    merges = []
    while len(merges) < n_merges:
        counts = Counter()
        for w, toks in words.items():
            for a, b in zip(toks, toks[1:]):
                counts[a, b] += freq[w]
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], -ids[p[0]], -ids[p[1]]))
        merges.append(best)
        ids.setdefault(best[0] + best[1], len(ids))
        for w, toks in words.items():
            out, i = [], 0
            while i < len(toks):
                if i + 1 < len(toks) and (toks[i], toks[i + 1]) == best:
                    out.append(best[0] + best[1]); i += 2
                else:
                    out.append(toks[i]); i += 1
            words[w] = out
    return merges
''')
t.add("right_stop_by_vocab_size", "right",
      "debatable: loops until the vocabulary has 256 + n_merges tokens, as bpe.train itself does "
      "(differs from 'stop after n_merges merges' only when a merge rebuilds an existing token)",
      sub(TRAIN, ("    for _ in range(n_merges):\n", "    while len(vocab) < 256 + n_merges:\n")))

TW("raw_byte_ids", "numbers bytes by their value instead of GPT-2's order (ties go another way)",
   ("    order = list(bpe.bytes_to_unicode())", "    order = list(range(256))"))
TW("tie_largest_pair", "among equal counts takes the largest pair",
   ("key=lambda p: (-counts[p], p))", "key=lambda p: (-counts[p], tuple(-i for i in p)))"))
TW("tie_first_seen", "among equal counts takes the pair seen first (dict order)",
   ("        best = min(counts, key=lambda p: (-counts[p], p))", "        best = max(counts, key=counts.get)"))
TW("tie_by_bytes", "breaks ties by the tokens' bytes instead of their ids",
   ("key=lambda p: (-counts[p], p))", "key=lambda p: (-counts[p], vocab[p[0]], vocab[p[1]]))"))
TW("tie_reversed_components", "among equal counts compares (id_b, id_a)",
   ("key=lambda p: (-counts[p], p))", "key=lambda p: (-counts[p], p[1], p[0]))"))
TW("unweighted_pieces", "counts each distinct piece once, ignoring its frequency",
   ("                counts[pair] = counts.get(pair, 0) + f", "                counts[pair] = counts.get(pair, 0) + 1"))
TW("no_pretokenization", "merges across the whole text (no pre-tokenization)",
   ("    pieces = Counter(regex.findall(bpe.GPT2_PATTERN, text))", "    pieces = Counter([text])"))
TW("split_on_whitespace", "pre-tokenizes with str.split() instead of GPT-2's pattern (spaces lost)",
   ("    pieces = Counter(regex.findall(bpe.GPT2_PATTERN, text))", "    pieces = Counter(text.split())"))
TW("pairs_no_overlap", "counts pairs without overlaps (aaa counts (a, a) once; 11.1 counts overlaps)",
   ("            for pair in zip(ids, ids[1:]):\n                counts[pair] = counts.get(pair, 0) + f\n",
    "            i = 0\n            while i + 1 < len(ids):\n                pair = (ids[i], ids[i + 1])\n                counts[pair] = counts.get(pair, 0) + f\n                i += 2 if ids[i] == ids[i + 1] else 1\n"))
TW("merge_right_to_left", "replaces occurrences from right to left (aaa -> a, aa)",
   ("        words = [bpe.merge(ids, best, new_id) for ids in words]",
    "        words = [bpe.merge(ids[::-1], best[::-1], new_id)[::-1] for ids in words]"))
TW("duplicate_token_new_id", "a merge that rebuilds an existing token's bytes gets a fresh id",
   ("        new_id = token_id.get(new_token)\n", "        new_id = None\n"))
TW("one_merge_short", "stops one merge early (off by one)",
   ("    for _ in range(n_merges):\n", "    for _ in range(n_merges - 1):\n"))
TW("one_merge_long", "makes one merge too many",
   ("    for _ in range(n_merges):\n", "    for _ in range(n_merges + 1):\n"))
TW("returns_id_pairs", "returns the merged pairs as ids, not bytes",
   ("        merges.append((vocab[a], vocab[b]))", "        merges.append(best)"))
TW("returns_tokens", "returns the merged tokens' bytes (a + b), not pairs",
   ("        merges.append((vocab[a], vocab[b]))", "        merges.append(new_token)"))
TW("chars_not_utf8", "writes each piece as code points mod 256 instead of its UTF-8 bytes",
   ("[byte_id[b] for b in piece.encode(\"utf-8\")]", "[byte_id[ord(c) % 256] for c in piece]"))
TW("cache_by_text", "caches the result by text only, across calls (ignores n_merges on a repeat)",
   ("def my_train(text, n_merges):\n", "_CACHE = {}\n\ndef my_train(text, n_merges):\n    if text in _CACHE:\n        return list(_CACHE[text])\n    _CACHE[text] = _train(text, n_merges)\n    return list(_CACHE[text])\n\ndef _train(text, n_merges):\n"))
TW("calls_bpe_train", "calls bpe.train (forbidden by the text)",
   ("    pieces = Counter(", "    return list(bpe.train(text, 256 + n_merges).merges)\n    pieces = Counter("))
TW("min_count_two", "stops when the best pair occurs only once (bpe.train also merges pairs seen once)",
   ("        if not counts:\n            break\n", "        if not counts or max(counts.values()) < 2:\n            break\n"))
TW("strips_text", "strips the text first (loses leading and trailing spaces)",
   ("regex.findall(bpe.GPT2_PATTERN, text)", "regex.findall(bpe.GPT2_PATTERN, text.strip())"))
t.add("right_ids_sorted_by_char", "right", "numbers bytes by sorting them by their printable character: the same order as bytes_to_unicode's keys (printable bytes keep their code point, the others map to 256+n in increasing order)", sub(TRAIN,
   ("    order = list(bpe.bytes_to_unicode())",
    "    table = bpe.bytes_to_unicode()\n    order = sorted(table, key=lambda b: table[b])")))
TW("lowercases", "lowercases the text before training",
   ("regex.findall(bpe.GPT2_PATTERN, text)", "regex.findall(bpe.GPT2_PATTERN, text.lower())"))

# ----------------------------------------------------------------------------- 11.7
ENC = '''
import regex

def my_encode(text, tokenizer, allowed_special):
    if allowed_special == "all":
        allowed = set(tokenizer.special_tokens)
    else:
        allowed = set(allowed_special)
    if not allowed:
        return tokenizer.encode_ordinary(text)
    names = sorted(allowed, key=len, reverse=True)
    pattern = "(" + "|".join(regex.escape(n) for n in names) + ")"
    out = []
    for i, chunk in enumerate(regex.split(pattern, text)):
        if i % 2 == 1:
            out.append(tokenizer.special_tokens[chunk])
        elif chunk:
            out.extend(tokenizer.encode_ordinary(chunk))
    return out
'''

e = Maker("11.7", "special_tokens", MODULE, "my_encode")
EW = lambda name, why, *pairs: e.add(name, "wrong", why, sub(ENC, *pairs))  # noqa: E731

e.add("right_base", "right", "split on the allowed names (escaped, longest first), then encode_ordinary", ENC)
e.add("right_find_loop", "right",
      "scans with str.find for the leftmost allowed name (longest at a tie), no regex",
      '''
def my_encode(text, tokenizer, allowed_special):
    names = list(tokenizer.special_tokens) if allowed_special == "all" else list(allowed_special)
    out, start = [], 0
    while True:
        best = None
        for n in names:
            j = text.find(n, start)
            if j >= 0 and (best is None or j < best[0] or (j == best[0] and len(n) > len(best[1]))):
                best = (j, n)
        if best is None:
            break
        j, n = best
        out += tokenizer.encode_ordinary(text[start:j])
        out.append(tokenizer.special_tokens[n])
        start = j + len(n)
    return out + tokenizer.encode_ordinary(text[start:])
''')
e.add("right_re_module_tuple", "right",
      "standard-library re with re.escape, 'all' via .keys(), accepts tuples as well",
      '''
import re

def my_encode(text, tokenizer, allowed_special):
    specials = tokenizer.special_tokens
    allowed = tuple(specials.keys()) if isinstance(allowed_special, str) else tuple(allowed_special)
    if len(allowed) == 0:
        return list(tokenizer.encode_ordinary(text))
    rx = re.compile("|".join(re.escape(n) for n in sorted(allowed, key=lambda n: -len(n))))
    ids, pos = [], 0
    for mt in rx.finditer(text):
        ids.extend(tokenizer.encode_ordinary(text[pos:mt.start()]))
        ids.append(specials[mt.group(0)])
        pos = mt.end()
    ids.extend(tokenizer.encode_ordinary(text[pos:]))
    return ids
''')

EW("ignores_specials", "encodes everything as ordinary text",
   ("    if not allowed:\n", "    if True:\n"))
EW("all_always", "treats every special name as allowed, whatever allowed_special says",
   ("        allowed = set(allowed_special)", "        allowed = set(tokenizer.special_tokens)"))
EW("all_as_chars", "set('all') for 'all': no name matches, so nothing is allowed",
   ("    if allowed_special == \"all\":\n        allowed = set(tokenizer.special_tokens)\n    else:\n        allowed = set(allowed_special)",
    "    allowed = set(allowed_special) & set(tokenizer.special_tokens)"))
EW("first_name_only", "handles only one allowed name (the first), the others stay text",
   ("    names = sorted(allowed, key=len, reverse=True)", "    names = sorted(allowed)[:1]"))
EW("strips_chunks", "strips the whitespace around each piece",
   ("            out.extend(tokenizer.encode_ordinary(chunk))", "            out.extend(tokenizer.encode_ordinary(chunk.strip()))"))
EW("special_id_off_by_one", "uses the id one past the special token's",
   ("            out.append(tokenizer.special_tokens[chunk])", "            out.append(tokenizer.special_tokens[chunk] + 1)"))
EW("split_all_names", "cuts at every special name, allowed or not, and encodes a not-allowed name as a separate piece",
   ("    names = sorted(allowed, key=len, reverse=True)", "    names = sorted(tokenizer.special_tokens, key=len, reverse=True)"),
   ("        if i % 2 == 1:\n", "        if i % 2 == 1 and chunk in allowed:\n"),
   ("        elif chunk:\n", "        elif chunk:  # includes a name that is not allowed\n"))
EW("unescaped_names", "builds the pattern without escaping the names: '|' in <|endoftext|> becomes alternation",
   ("regex.escape(n)", "n"))
EW("shortest_first", "debatable: alternation with the shortest names first (differs only when one name is a prefix of another, where tiktoken's own set-ordered alternation is unspecified)",
   ("    names = sorted(allowed, key=len, reverse=True)", "    names = sorted(allowed, key=len)"))
EW("mutates_allowed", "sorts the caller's allowed_special list in place / removes names from the caller's set",
   ("    else:\n        allowed = set(allowed_special)",
    "    else:\n        if isinstance(allowed_special, list):\n            allowed_special.sort()\n        if isinstance(allowed_special, set):\n            allowed_special.clear()\n            allowed = set()\n        else:\n            allowed = set(allowed_special)"))
EW("calls_encode", "calls tokenizer.encode (forbidden)",
   ("    if allowed_special == \"all\":", "    return tokenizer.encode(text, allowed_special=allowed_special)\n    if allowed_special == \"all\":"))
EW("returns_tuple", "returns a tuple of ids instead of the list tiktoken gives (debatable)",
   ("    return out\n", "    return tuple(out)\n"))
EW("returns_tensor", "returns a tensor of ids",
   ("import regex\n", "import regex\nimport torch\n"), ("    return out\n", "    return torch.tensor(out)\n"))
EW("cache_by_text", "caches results by text alone across calls (ignores allowed_special on a repeat)",
   ("def my_encode(text, tokenizer, allowed_special):\n", "_SEEN = {}\n\ndef my_encode(text, tokenizer, allowed_special):\n    if text in _SEEN:\n        return list(_SEEN[text])\n    _SEEN[text] = _enc(text, tokenizer, allowed_special)\n    return list(_SEEN[text])\n\ndef _enc(text, tokenizer, allowed_special):\n"))
EW("empty_group_split", "no guard for an empty allowed set: splits on '()', one piece per character",
   ("    if not allowed:\n        return tokenizer.encode_ordinary(text)\n", ""))
EW("whole_text_then_replace", "encodes the whole text ordinarily, then replaces the name's token run by the id",
   ("    names = sorted(allowed, key=len, reverse=True)",
    "    ids = tokenizer.encode_ordinary(text)\n    for n in allowed:\n        seq = tokenizer.encode_ordinary(n)\n        i = 0\n        while i + len(seq) <= len(ids):\n            if ids[i:i + len(seq)] == seq:\n                ids[i:i + len(seq)] = [tokenizer.special_tokens[n]]\n            i += 1\n    return ids\n    names = sorted(allowed, key=len, reverse=True)"))
EW("space_joins_name", "cuts the name together with one space in front of it (the space is dropped)",
   ("    pattern = \"(\" + \"|\".join(regex.escape(n) for n in names) + \")\"",
    "    pattern = \" ?(\" + \"|\".join(regex.escape(n) for n in names) + \")\""))
EW("drops_last_piece", "forgets the text after the last special name",
   ("    for i, chunk in enumerate(regex.split(pattern, text)):", "    for i, chunk in enumerate(regex.split(pattern, text)[:-1]):"))
EW("duplicates_adjacent", "emits a name's id twice when two names are adjacent (empty piece handled wrong)",
   ("        elif chunk:\n", "        elif not chunk and i > 0:\n            out.append(out[-1])\n        elif chunk:\n"))
EW("not_implemented_all", "raises NotImplementedError for allowed_special == 'all' (one branch unfinished)",
   ("        allowed = set(tokenizer.special_tokens)", "        raise NotImplementedError(\"'all' not done yet\")"))
EW("wrong_lookup_vocab", "takes the id of a special name as vocab_size - 1 for every name",
   ("            out.append(tokenizer.special_tokens[chunk])", "            out.append(tokenizer.vocab_size - 1)"))

CASES = (t.cases + e.cases
         + junk(MODULE, {"11.6": ("train_bpe", "my_train", "text, n_merges"),
                         "11.7": ("special_tokens", "my_encode", "text, tokenizer, allowed_special")}))
