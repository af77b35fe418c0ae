"""Save and load a trained model: weights, dtype, configuration and tokenizer in one verified file.

A checkpoint is one ``.safetensors`` file. Its tensors are the model's weights (and, for a
resumable checkpoint, the optimizer's state); its text metadata holds which model class it is,
the configuration, the dtype, the tokenizer, the training state and free ``info``. safetensors
stores only raw numbers and JSON, so loading a file never runs code from it (unlike
``torch.load`` of a pickle), and the file cannot pick what is built: the model and tokenizer
classes come from a fixed list (:data:`MODELS`, :data:`TOKENIZERS`) of the companion's own.

Everything that decides what the loaded model computes is covered by a SHA-256 digest stored
with it, one per part (weights, optimizer, configuration and dtype, tokenizer, training state
and info). On loading, each part is checked against its digest, and then the whole file against
the bytes that saving its content would write: a changed, truncated or appended byte anywhere is
refused with a message that names the part and says what to do. The tokenizer and the model's
vocabulary must agree, at saving and at loading.

``load_checkpoint`` returns the model in evaluation mode, in the dtype it was saved in; whoever
resumes training switches it back (:meth:`companion.train.Trainer.resume` does).
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes
from torch import nn

from companion.validation import check_instance, check_path

__all__ = [
    "FORMAT",
    "MODELS",
    "TOKENIZERS",
    "save_checkpoint",
    "load_checkpoint",
    "read_checkpoint",
    "upgrade_checkpoint",
    "shipped_model_path",
    "check_output_path",
    "SHIPPED_MODEL",
]

FORMAT = "companion-checkpoint/2"
_OLD_FORMAT = "companion-gpt/1"  # digest of the weights only; upgrade_checkpoint() converts it

#: The model classes a checkpoint may name: name -> (module, model class, configuration class).
#: Only these are ever built; a file cannot name anything else. A new model joins the list here.
MODELS: dict[str, tuple[str, str, str]] = {
    "GPT": ("companion.model", "GPT", "GPTConfig"),
    "ModernGPT": ("companion.modern", "ModernGPT", "ModernConfig"),
    "Seq2SeqTransformer": ("companion.seq2seq", "Seq2SeqTransformer", "Seq2SeqConfig"),
    "EncoderLM": ("companion.mlm", "EncoderLM", "EncoderLMConfig"),
}

#: The tokenizer classes a checkpoint may name: name -> (module, class). Each has ``to_dict()``
#: and a ``from_dict(d)`` class method.
TOKENIZERS: dict[str, tuple[str, str]] = {
    "CharTokenizer": ("companion.data", "CharTokenizer"),
    "TranslationTokenizer": ("companion.translation", "TranslationTokenizer"),
    "MaskedCharTokenizer": ("companion.mlm", "MaskedCharTokenizer"),
}

_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)}


def _resolve(kind: str, table: dict, name: Any) -> tuple:
    if not isinstance(name, str) or name not in table:
        raise ValueError(f"names an unknown {kind} {name!r} (known: {sorted(table)})")
    module, *attrs = table[name]
    mod = importlib.import_module(module)  # a module of the companion's, from the fixed table
    return tuple(getattr(mod, a) for a in attrs)


def _model_name(model: Any) -> str:
    for name, (module, cls, _) in MODELS.items():
        if type(model).__module__ == module and type(model).__name__ == cls:
            return name
    known = ", ".join(f"{m}.{c}" for m, c, _ in MODELS.values())
    raise TypeError(f"`model` must be one of the companion's models ({known}) (got {type(model).__name__}); "
                    "save other modules with torch.save(module.state_dict(), path)")


def _tokenizer_name(tokenizer: Any) -> str:
    for name, (module, cls) in TOKENIZERS.items():
        if type(tokenizer).__module__ == module and type(tokenizer).__name__ == cls:
            return name
    known = ", ".join(f"{m}.{c}" for m, c in TOKENIZERS.values())
    raise TypeError(f"`tokenizer` must be one of the companion's tokenizers ({known}) "
                    f"(got {type(tokenizer).__name__})")


def _check_vocab(config: Any, tokenizer: Any, where: str) -> None:
    v_model = getattr(config, "vocab_size", None)
    v_tok = getattr(tokenizer, "vocab_size", None)
    if v_model is not None and v_tok is not None and v_model != v_tok:
        raise ValueError(f"{where}: the tokenizer has {v_tok} tokens but the model's vocab_size is {v_model}; "
                         "a model must be saved with the tokenizer it was trained with")


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))  # length-prefixed: parts cannot shift into each other
        h.update(p)
    return h.hexdigest()


def _tensor_digest(tensors: dict[str, torch.Tensor]) -> str:
    parts = []
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        parts += [name.encode(), f"{t.dtype}{tuple(t.shape)}".encode(), raw]
    return _sha(*parts)


def _digests(meta: dict[str, str], tensors: dict[str, torch.Tensor]) -> dict[str, str]:
    """One digest per part; the keys name the parts in error messages."""
    weights = {k: v for k, v in tensors.items() if k.startswith("model.")}
    optim = {k: v for k, v in tensors.items() if not k.startswith("model.")}
    return {
        "weights": _tensor_digest(weights),
        "optimizer state": _tensor_digest(optim),
        "configuration": _sha(*(meta.get(k, "").encode() for k in ("format", "model", "config", "dtype", "aliases"))),
        "tokenizer": _sha(meta.get("tokenizer", "").encode()),
        "training state and info": _sha(meta.get("train_state", "").encode(), meta.get("info", "").encode()),
    }


def _jsonable(name: str, value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"`{name}` must be JSON-serializable (numbers, strings, lists, dicts) ({exc})") from None


def _ties(model: nn.Module) -> dict[str, str]:
    """``{alias: first name}`` of the state-dict entries that share their storage (a tied head),
    as save_checkpoint records them."""
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for key, value in model.state_dict().items():
        ident = (value.data_ptr(), value.dtype, tuple(value.shape), value.stride())
        if value.numel() and ident in seen:
            aliases[key] = seen[ident]
            continue
        seen[ident] = key
    return aliases


def check_output_path(path, name: str = "path") -> Path:
    """``path`` must be a place a checkpoint can be written to; returns it as a Path.

    Command lines call it before training, so that a bad ``--out`` is found in a second, not
    after the run: it must not be a folder, nor lie in a "folder" that is a file, nor be one of
    the models shipped with the course (chapters 7 to 10 read them).
    """
    path = check_path(name, path)
    if str(path) in ("", ".") or path.is_dir():
        raise ValueError(f"`{name}` must name a file, but {str(path)!r} is a folder; add a file name such as "
                         f"{Path(path) / 'model.safetensors'}")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise ValueError(f"`{name}` cannot be written: {str(parent)!r} is a file, not a folder")
    from companion.data import asset_path

    assets = Path(asset_path(SHIPPED_MODEL)).resolve().parent
    if path.resolve().parent == assets and path.suffix == ".safetensors":
        raise ValueError(f"`{name}` {str(path)!r} is the shipped model of the course, which the chapters read; "
                         "write elsewhere, e.g. runs/model.safetensors")
    return path


def save_checkpoint(path, model: nn.Module, tokenizer, *, train_state: dict | None = None,
                    optimizer_tensors: dict[str, torch.Tensor] | None = None, info: dict | None = None) -> Path:
    """Write ``model`` and its ``tokenizer`` (and optionally what resuming training needs) to one file.

    ``info`` is free JSON metadata (the command that trained the model, its score, ...). Tensors
    that share storage (a tied output head) are stored once. The file is written under a temporary
    name and renamed, so a crash never leaves a half-written checkpoint under the real name.
    """
    path = check_path("path", path)
    if path.is_dir():
        raise ValueError(f"`path` must name a file, but {str(path)!r} is a folder; add a file name such as "
                         "model.safetensors")
    name = _model_name(model)
    tok_name = _tokenizer_name(tokenizer)
    config = model.config
    _check_vocab(config, tokenizer, "`tokenizer` and `model` disagree")
    for arg, value in (("train_state", train_state), ("info", info), ("optimizer_tensors", optimizer_tensors)):
        if value is not None:
            check_instance(arg, value, dict, "a dict or None")
    floats = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(floats) != 1:
        raise ValueError(f"`model` must have one floating-point dtype to be saved (got {sorted(map(str, floats))}); "
                         "convert it first, e.g. model.float()")
    (dtype,) = floats
    tensors: dict[str, torch.Tensor] = {}
    aliases = _ties(model)  # a tied weight is stored once, with its alias recorded
    for key, value in model.state_dict().items():
        if key not in aliases:
            tensors[f"model.{key}"] = value.detach().cpu().contiguous()
    for key, value in (optimizer_tensors or {}).items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"`optimizer_tensors[{key!r}]` must be a tensor (got {type(value).__name__})")
        tensors[f"optimizer.{key}"] = value.detach().cpu().contiguous()
    meta = {
        "format": FORMAT,
        "model": name,
        "config": _jsonable("config", dataclasses.asdict(config)),
        "dtype": str(dtype),
        "aliases": _jsonable("aliases", aliases),
        "tokenizer": _jsonable("tokenizer", {"class": tok_name, **tokenizer.to_dict()}),
        "info": _jsonable("info", info or {}),
    }
    if train_state is not None:
        meta["train_state"] = _jsonable("train_state", train_state)
    meta["digests"] = json.dumps(_digests(meta, tensors), sort_keys=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(save_bytes(tensors, metadata=meta))
    tmp.replace(path)
    return path


#: Every metadata field save_checkpoint writes; read_checkpoint refuses any other.
_META_KEYS = frozenset({"format", "model", "config", "dtype", "aliases", "tokenizer", "info", "train_state",
                        "digests"})


def _damaged(path: Path, what: str) -> ValueError:
    return ValueError(
        f"checkpoint {str(path)!r} is damaged: {what}. It was changed after it was written (a "
        "flipped, truncated or appended byte, or an edit by hand). Restore the file from where it "
        "came from (for the shipped model: reinstall the course) or train the model again."
    )


def read_checkpoint(path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The raw tensors and metadata of a checkpoint, every part verified.

    Raises FileNotFoundError for a missing file, and ValueError naming the file and the damaged
    part for one that is truncated, corrupted, extended, or not a companion checkpoint.
    """
    path = check_path("path", path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}")
    data = path.read_bytes()
    try:
        (n,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + n])  # dicts keep the file's key order
        meta = header.get("__metadata__") or {}
        tensors = load_bytes(data)
    except (SafetensorError, ValueError, struct.error, AttributeError, RuntimeError, UnicodeDecodeError) as exc:
        raise ValueError(f"checkpoint {str(path)!r} is truncated or is not a safetensors file and cannot be read "
                         f"({type(exc).__name__}: {exc})") from None
    fmt = meta.get("format")
    if fmt == _OLD_FORMAT:
        raise ValueError(f"checkpoint {str(path)!r} has the old format {fmt!r}, whose digest covers the weights but "
                         "not the configuration or tokenizer; convert it once with "
                         "companion.checkpoint.upgrade_checkpoint(path, new_path)")
    if fmt != FORMAT:
        raise ValueError(f"{str(path)!r} is not a companion checkpoint (format {fmt!r}, expected {FORMAT!r})")
    try:
        stored = json.loads(meta["digests"])
    except (KeyError, ValueError):
        raise _damaged(path, "its list of digests is missing or unreadable") from None
    if not isinstance(stored, dict):
        raise _damaged(path, "its list of digests is missing or unreadable")
    unknown = set(meta) - _META_KEYS
    if unknown:
        raise _damaged(path, f"its metadata holds fields no companion writes ({', '.join(sorted(unknown))})")
    for part, digest in _digests(meta, tensors).items():
        if stored.get(part) != digest:
            verb = "do not match the digest written with them" if part == "weights" else "does not match the digest written with it"
            raise _damaged(path, f"its {part} {verb}")
    # Every byte outside the digested parts: the header must be exactly the compact JSON that
    # safetensors writes (plus its padding of spaces), so no byte can change unnoticed there either.
    raw_header = data[8 : 8 + n]
    canonical = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    if raw_header.rstrip(b" ") != canonical or len(raw_header) - len(canonical) >= 8:
        raise _damaged(path, "its header was edited outside the digested parts")
    return tensors, meta


def load_checkpoint(path, model: nn.Module | None = None) -> tuple[nn.Module, Any, dict]:
    """Load a checkpoint into a new model (or into ``model``, which must have the saved class and
    configuration). The model comes back in evaluation mode and in the dtype it was saved in.

    Returns ``(model, tokenizer, extra)``, where ``extra`` holds ``info`` and, for a resumable
    checkpoint, ``train_state`` and the ``optimizer`` tensors.
    """
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be None or a companion model to load into (got {type(model).__name__})")
    tensors, meta = read_checkpoint(path)
    path = check_path("path", path)
    try:
        model_cls, config_cls = _resolve("model", MODELS, meta.get("model"))
        config = config_cls(**json.loads(meta["config"]))
        tok_spec = json.loads(meta["tokenizer"])
        (tok_cls,) = _resolve("tokenizer", TOKENIZERS, tok_spec.pop("class", None))
        tokenizer = tok_cls.from_dict(tok_spec)
        dtype = _DTYPES[meta["dtype"]]
        aliases = json.loads(meta["aliases"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint {str(path)!r} has a configuration or tokenizer this companion cannot use "
                         f"({type(exc).__name__}: {exc})") from None
    _check_vocab(config, tokenizer, f"checkpoint {str(path)!r}")
    if model is None:
        model = model_cls(config)
    else:
        if type(model) is not model_cls:
            raise TypeError(f"`model` must be a {meta['model']} to load checkpoint {str(path)!r} into: it holds a "
                            f"{meta['model']}, not a {type(model).__name__} (pass model=None to build one)")
        if model.config != config:
            mine, saved = dataclasses.asdict(model.config), dataclasses.asdict(config)
            diff = ", ".join(f"{k}={saved[k]} in the file but {mine[k]} in the model" for k in saved if mine.get(k) != saved[k])
            raise ValueError(f"checkpoint {str(path)!r} was made for another configuration: {diff}")
    model = model.to(dtype)
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    wrong = {k: str(v.dtype) for k, v in weights.items() if v.is_floating_point() and v.dtype != dtype}
    if wrong:
        first = next(iter(wrong))
        raise ValueError(f"checkpoint {str(path)!r} says its dtype is {meta['dtype']} but {len(wrong)} of its tensors "
                         f"are not (model.{first} is {wrong[first]}): the file was not written by save_checkpoint; "
                         "save the model again with save_checkpoint")
    ties = _ties(model)
    if not isinstance(aliases, dict) or aliases != ties:
        said = aliases if isinstance(aliases, dict) else {}
        extra_ties = {a: t for a, t in said.items() if ties.get(a) != t}
        missing = {a: t for a, t in ties.items() if said.get(a) != t}
        what = "; ".join(filter(None, [
            f"it ties {', '.join(f'{a} to {t}' for a, t in extra_ties.items())}, which this model keeps apart"
            if extra_ties else "",
            f"it stores {', '.join(f'{a} apart from {t}' for a, t in missing.items())}, which this model ties"
            if missing else ""]))
        raise ValueError(f"checkpoint {str(path)!r} does not match its configuration: {what or aliases!r}. "
                         "Save the model again with save_checkpoint")
    for alias, target in aliases.items():
        weights[alias] = weights.get(target)
    expected = model.state_dict()
    if set(weights) != set(expected) or any(weights[k] is None or weights[k].shape != expected[k].shape for k in expected):
        raise ValueError(f"checkpoint {str(path)!r} does not match its configuration: its tensors have other names or shapes")
    model.load_state_dict(weights)
    model.eval()
    extra = {
        "info": json.loads(meta.get("info", "{}")),
        "train_state": json.loads(meta["train_state"]) if "train_state" in meta else None,
        "optimizer": {k[len("optimizer."):]: v for k, v in tensors.items() if k.startswith("optimizer.")},
    }
    return model, tokenizer, extra


def upgrade_checkpoint(path, new_path) -> Path:
    """Convert a checkpoint of the old format ``companion-gpt/1`` (a GPT whose digest covered its
    weights only) to the current one, after verifying those weights. Returns ``new_path``."""
    from companion.data import CharTokenizer
    from companion.model import GPT, GPTConfig

    path = check_path("path", path)
    check_path("new_path", new_path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}")
    data = path.read_bytes()
    try:
        (n,) = struct.unpack("<Q", data[:8])
        meta = json.loads(data[8 : 8 + n]).get("__metadata__") or {}
        tensors = load_bytes(data)
    except (SafetensorError, ValueError, struct.error, AttributeError, UnicodeDecodeError) as exc:
        raise ValueError(f"checkpoint {str(path)!r} cannot be read ({exc})") from None
    if meta.get("format") != _OLD_FORMAT:
        raise ValueError(f"{str(path)!r} is not an old-format checkpoint (format {meta.get('format')!r})")
    old = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        old.update(name.encode())
        old.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        old.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    if old.hexdigest() != meta.get("sha256"):
        raise _damaged(path, "its weights do not match the digest written with them")
    model = GPT(GPTConfig(**json.loads(meta["config"])))
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    weights["head.weight"] = weights["tok_emb.weight"]
    model.load_state_dict(weights)
    tokenizer = CharTokenizer(json.loads(meta["tokenizer"])["chars"])
    optimizer = {k[len("optimizer."):]: v for k, v in tensors.items() if k.startswith("optimizer.")}
    train_state = json.loads(meta["train_state"]) if "train_state" in meta else None
    return save_checkpoint(new_path, model, tokenizer, train_state=train_state,
                           optimizer_tensors=optimizer or None, info=json.loads(meta.get("info", "{}")))


#: The model that chapters 7 and 8 use, shipped inside the package (``companion/assets``).
SHIPPED_MODEL = "shakespeare_char.safetensors"


def shipped_model_path() -> Path:
    """Path of the shipped chapter 7 model (trained as the README records); load it with
    ``load_checkpoint(shipped_model_path())``."""
    from companion.data import asset_path

    return asset_path(SHIPPED_MODEL)
