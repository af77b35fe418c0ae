"""Save and load a trained GPT: weights in safetensors, configuration and tokenizer beside them.

One file holds everything. Its tensors are the model's weights (and, for a resumable checkpoint,
the optimizer's moment estimates); its text metadata holds the :class:`~companion.model.GPTConfig`,
the tokenizer's characters, the training state and a SHA-256 digest of every tensor. safetensors
stores only raw numbers and JSON, so loading a file can never run code (unlike ``torch.load`` of a
pickle), and the digest turns a silently flipped byte into a clear error.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from companion.data import CharTokenizer
from companion.model import GPT, GPTConfig

FORMAT = "companion-gpt/1"


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        h.update(name.encode())
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def save_checkpoint(path, model: GPT, tokenizer: CharTokenizer, *, train_state: dict | None = None,
                    optimizer_tensors: dict[str, torch.Tensor] | None = None, info: dict | None = None) -> Path:
    """Write ``model`` (and optionally what is needed to resume training) to one ``.safetensors`` file.

    ``info`` is free JSON-able metadata (the command that trained the model, its score, ...).
    The tied head is stored once, as ``tok_emb.weight``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k != "head.weight"}
    for k, v in (optimizer_tensors or {}).items():
        tensors[f"optimizer.{k}"] = v.detach().cpu().contiguous()
    meta = {
        "format": FORMAT,
        "config": json.dumps(model.config.to_dict()),
        "tokenizer": json.dumps({"chars": tokenizer.chars}),
        "sha256": _digest(tensors),
        "info": json.dumps(info or {}),
    }
    if train_state is not None:
        meta["train_state"] = json.dumps(train_state)
    tmp = path.with_name(path.name + ".tmp")
    save_file(tensors, str(tmp), metadata=meta)
    tmp.replace(path)  # a crash while writing never leaves a half-written checkpoint under the real name
    return path


def read_checkpoint(path) -> tuple[dict[str, torch.Tensor], dict]:
    """The raw tensors and metadata of a checkpoint, verified against its digest.

    Raises FileNotFoundError for a missing file and ValueError, naming the file, for one that is
    truncated, corrupted or not a companion checkpoint.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {str(path)!r}")
    try:
        tensors = load_file(str(path))
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ValueError(f"checkpoint {str(path)!r} is truncated or corrupted and cannot be read ({exc})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{str(path)!r} is not a companion GPT checkpoint (format {meta.get('format')!r}, expected {FORMAT!r})")
    if _digest(tensors) != meta.get("sha256"):
        raise ValueError(f"checkpoint {str(path)!r} is corrupted: its weights do not match the SHA-256 digest stored with them")
    return tensors, meta


def load_checkpoint(path, model: GPT | None = None) -> tuple[GPT, CharTokenizer, dict]:
    """Load a checkpoint into a new GPT (or into ``model``, which must have the saved configuration).

    Returns ``(model, tokenizer, metadata)``, where metadata holds ``info`` and, for a resumable
    checkpoint, ``train_state`` and ``optimizer`` tensors (both as loaded).
    """
    tensors, meta = read_checkpoint(path)
    try:
        config = GPTConfig(**json.loads(meta["config"]))
        tokenizer = CharTokenizer(json.loads(meta["tokenizer"])["chars"])
    except (KeyError, TypeError, ValueError, json.JSONDecodeError) as exc:
        raise ValueError(f"checkpoint {str(path)!r} has a damaged configuration or tokenizer ({exc})") from None
    if model is None:
        model = GPT(config)
    elif model.config != config:
        diff = {k: (v, getattr(model.config, k)) for k, v in config.to_dict().items() if getattr(model.config, k) != v}
        raise ValueError(f"checkpoint {str(path)!r} was made for another configuration: "
                         + ", ".join(f"{k}={a} in the file but {b} in the model" for k, (a, b) in diff.items()))
    weights = {k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}
    weights["head.weight"] = weights.get("tok_emb.weight")
    expected = model.state_dict()
    if set(weights) != set(expected) or any(weights[k].shape != expected[k].shape for k in expected):
        raise ValueError(f"checkpoint {str(path)!r} does not match its configuration: its tensors have other names or shapes")
    model.load_state_dict(weights)
    extra = {
        "info": json.loads(meta.get("info", "{}")),
        "train_state": json.loads(meta["train_state"]) if "train_state" in meta else None,
        "optimizer": {k[len("optimizer."):]: v for k, v in tensors.items() if k.startswith("optimizer.")},
    }
    return model, tokenizer, extra


#: The model that chapters 7 and 8 use, shipped inside the package (``companion/assets``).
SHIPPED_MODEL = "shakespeare_char.safetensors"


def shipped_model_path() -> Path:
    """Path of the shipped chapter 7 model (trained as the README records); load it with
    ``load_checkpoint(shipped_model_path())``."""
    from companion.data import asset_path

    return asset_path(SHIPPED_MODEL)
