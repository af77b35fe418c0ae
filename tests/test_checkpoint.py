"""Tests for companion.checkpoint: round trips, and a clear refusal of every damaged byte.

The digest covers the weights, the optimizer state, the configuration and dtype, the tokenizer
and the training state; the header's bytes are checked too. These tests flip bytes across the
whole file, edit each part of the metadata the way a careless user or a broken copy would, and
check that each is refused with a message naming the part.
"""
import json
import struct

import pytest
import torch
from safetensors.torch import load as load_bytes
from safetensors.torch import save as save_bytes
from safetensors.torch import save_file
from torch import nn

from companion.checkpoint import (
    FORMAT,
    load_checkpoint,
    read_checkpoint,
    save_checkpoint,
    shipped_model_path,
    upgrade_checkpoint,
)
from companion.data import CharTokenizer
from companion.model import GPT, GPTConfig

TOK = CharTokenizer("\n !',-.:;?abcdefghijklmnopqrstuvwxyz")


def small_model(**kw) -> GPT:
    torch.manual_seed(0)
    cfg = dict(vocab_size=TOK.vocab_size, context_length=8, d_model=16, n_layers=1, n_heads=2)
    return GPT(GPTConfig(**{**cfg, **kw}))


@pytest.fixture()
def saved(tmp_path):
    model = small_model()
    path = save_checkpoint(tmp_path / "ok.safetensors", model, TOK, info={"note": "test"},
                           train_state={"step": 3}, optimizer_tensors={"0.exp_avg": torch.ones(3)})
    return model, path


def split(data: bytes):
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8 : 8 + n])


def rewrite_meta(path, out, **changes):
    """Rewrite a file with some metadata fields changed, as a hand edit would (digests untouched)."""
    data = path.read_bytes()
    _, header = split(data)
    meta = {**header["__metadata__"], **changes}
    out.write_bytes(save_bytes(load_bytes(data), metadata=meta))
    return out


def test_round_trip_gives_identical_logits_and_eval_mode(saved):
    model, path = saved
    loaded, tok, extra = load_checkpoint(path)
    assert not loaded.training, "a loaded model is ready for inference"
    assert tok.chars == TOK.chars and extra["info"] == {"note": "test"} and extra["train_state"] == {"step": 3}
    assert torch.equal(extra["optimizer"]["0.exp_avg"], torch.ones(3))
    idx = torch.randint(0, TOK.vocab_size, (2, 8))
    model.eval()
    assert torch.equal(loaded(idx)[0], model(idx)[0])
    assert loaded.head.weight is loaded.tok_emb.weight, "the tied head is tied again"


def test_dtype_is_kept():
    model = small_model().double()
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = save_checkpoint(Path(d) / "f64.safetensors", model, TOK)
        loaded, _, _ = load_checkpoint(path)
    assert loaded.tok_emb.weight.dtype == torch.float64
    idx = torch.randint(0, TOK.vocab_size, (1, 8))
    assert torch.equal(loaded(idx)[0], model.eval()(idx)[0])


def test_every_flipped_byte_is_refused(saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    n, _ = split(data)
    positions = sorted(set(range(0, 8 + n, 3)) | set(range(8 + n, len(data), max(1, (len(data) - 8 - n) // 300))))
    bad = tmp_path / "flipped.safetensors"
    accepted = []
    for i in positions:
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        bad.write_bytes(bytes(flipped))
        try:
            load_checkpoint(bad)
            accepted.append(i)
        except ValueError:
            pass
    assert not accepted, f"flipped bytes accepted at {accepted[:10]}"
    assert len(positions) > 500


def test_truncated_appended_and_foreign_files(saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    for name, content in [("truncated", data[:-1]), ("half", data[: len(data) // 2]), ("appended", data + b"\0"),
                          ("garbage", b"not a checkpoint at all"), ("empty", b"")]:
        bad = tmp_path / f"{name}.safetensors"
        bad.write_bytes(content)
        with pytest.raises(ValueError, match="truncated or is not a safetensors file"):
            load_checkpoint(bad)
    save_file({"x": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(ValueError, match="is not a companion checkpoint"):
        read_checkpoint(tmp_path / "foreign.safetensors")
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.safetensors")


@pytest.mark.parametrize("field, value, part", [
    ("config", lambda c: c.replace('"n_heads": 2', '"n_heads": 1'), "configuration"),
    ("dtype", lambda c: "torch.float64", "configuration"),
    ("model", lambda c: "GPT2", "configuration"),
    ("aliases", lambda c: "{}", "configuration"),
    ("tokenizer", lambda c: c.replace("z", "Z"), "tokenizer"),
    ("info", lambda c: c.replace("test", "best"), "training state and info"),
    ("train_state", lambda c: c.replace("3", "4"), "training state and info"),
    ("digests", lambda c: "not json", "list of digests"),
])
def test_each_edited_part_is_named(saved, tmp_path, field, value, part):
    _, path = saved
    meta = split(path.read_bytes())[1]["__metadata__"]
    bad = rewrite_meta(path, tmp_path / "edited.safetensors", **{field: value(meta[field])})
    with pytest.raises(ValueError, match=f"is damaged: its {part}"):
        load_checkpoint(bad)


def test_edited_header_outside_the_parts_is_refused(saved, tmp_path):
    _, path = saved
    data = path.read_bytes()
    n, header = split(data)
    spaced = json.dumps(header, separators=(", ", ":"), ensure_ascii=False).encode()
    spaced += b" " * (-(8 + len(spaced)) % 8)
    bad = tmp_path / "spaced.safetensors"
    bad.write_bytes(struct.pack("<Q", len(spaced)) + spaced + data[8 + n :])
    with pytest.raises(ValueError, match="header was edited"):
        load_checkpoint(bad)


def test_tokenizer_and_vocabulary_must_agree(tmp_path):
    with pytest.raises(ValueError, match="the tokenizer has 5 tokens but the model's vocab_size is 36"):
        save_checkpoint(tmp_path / "x.safetensors", small_model(), CharTokenizer("abcde"))


def test_wrong_arguments(tmp_path, saved):
    with pytest.raises(TypeError, match="`model` must be one of the companion's models"):
        save_checkpoint(tmp_path / "x.safetensors", nn.Linear(2, 2), TOK)
    with pytest.raises(TypeError, match="`tokenizer` must be one of the companion's tokenizers"):
        save_checkpoint(tmp_path / "x.safetensors", small_model(), "abc")
    with pytest.raises(TypeError, match="`info` must be JSON-serializable"):
        save_checkpoint(tmp_path / "x.safetensors", small_model(), TOK, info={"f": object()})
    with pytest.raises(TypeError, match="`path` must be a str or pathlib.Path"):
        save_checkpoint(3, small_model(), TOK)
    _, path = saved
    with pytest.raises(TypeError, match="`model` must be None or a companion model"):
        load_checkpoint(path, "model")
    with pytest.raises(TypeError, match="holds a GPT, not a Linear"):
        load_checkpoint(path, nn.Linear(2, 2))
    with pytest.raises(ValueError, match="made for another configuration: d_model=16 in the file but 32 in the model"):
        load_checkpoint(path, small_model(d_model=32))


def test_old_format_is_refused_and_upgraded(tmp_path):
    """The first format's digest covered only the weights; upgrade_checkpoint converts such a file."""
    import hashlib

    model, tok = small_model(), TOK
    tensors = {f"model.{k}": v.contiguous() for k, v in model.state_dict().items() if k != "head.weight"}
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name]
        h.update(name.encode())
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    meta = {"format": "companion-gpt/1", "config": json.dumps(model.config.to_dict()),
            "tokenizer": json.dumps({"chars": tok.chars}), "sha256": h.hexdigest(), "info": "{}"}
    old = tmp_path / "old.safetensors"
    save_file(tensors, str(old), metadata=meta)
    with pytest.raises(ValueError, match="old format 'companion-gpt/1'.*upgrade_checkpoint"):
        load_checkpoint(old)
    new = upgrade_checkpoint(old, tmp_path / "new.safetensors")
    loaded, _, _ = load_checkpoint(new)
    idx = torch.randint(0, tok.vocab_size, (1, 8))
    assert torch.equal(loaded(idx)[0], model.eval()(idx)[0])


def test_the_shipped_model_loads_verified():
    model, tok, extra = load_checkpoint(shipped_model_path())
    assert split(shipped_model_path().read_bytes())[1]["__metadata__"]["format"] == FORMAT
    assert tok.vocab_size == model.config.vocab_size == 69
    assert extra["info"]["val_nats_per_char"] == pytest.approx(1.4421)


def test_digests_of_another_kind_and_unknown_fields_are_refused(saved, tmp_path):
    """Two holes: a digest list that is valid JSON but not an object crashed with AttributeError,
    and a metadata field added by hand was covered by no digest and went unnoticed."""
    _, path = saved
    for changes, part in [({"digests": "[]"}, "list of digests"), ({"digests": "3"}, "list of digests"),
                          ({"note": "added by hand"}, "metadata holds fields no companion writes")]:
        bad = rewrite_meta(path, tmp_path / "edited.safetensors", **changes)
        with pytest.raises(ValueError, match=f"is damaged: its {part}"):
            load_checkpoint(bad)


def test_control_characters_in_the_tokenizer_round_trip(tmp_path):
    tok = CharTokenizer("\x00\x1b\t\n\u2028é ab")
    model = small_model(vocab_size=tok.vocab_size)
    loaded, tok2, _ = load_checkpoint(save_checkpoint(tmp_path / "ctl.safetensors", model, tok))
    assert tok2.chars == tok.chars


def test_more_wrong_arguments(tmp_path, saved):
    with pytest.raises(ValueError, match=r"`path` must name a file, but .* is a folder"):
        save_checkpoint(tmp_path, small_model(), TOK)
    for arg in ("info", "train_state", "optimizer_tensors"):
        with pytest.raises(TypeError, match=rf"`{arg}` must be a dict or None \(got list\)"):
            save_checkpoint(tmp_path / "x.safetensors", small_model(), TOK, **{arg: [1]})
    with pytest.raises(TypeError, match=r"`path` must be a str or pathlib.Path \(got bytes\)"):
        read_checkpoint(b"model.safetensors")
    with pytest.raises(ValueError, match=r"`path` must name a file \(got path=''\)"):
        load_checkpoint("")
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        upgrade_checkpoint(tmp_path / "missing.safetensors", tmp_path / "new.safetensors")
    _, path = saved
    with pytest.raises(TypeError, match=r"`new_path` must be a str or pathlib.Path \(got int\)"):
        upgrade_checkpoint(path, 3)


# --- files that pass every digest but do not say what their tensors are (issue 19) -------------

def _forge(src, dst, edit):
    """Rewrite a checkpoint with ``edit(tensors, meta)`` applied and every digest recomputed: a file
    a careless tool could write, which no byte check can catch."""
    from companion import checkpoint as ck

    tensors, meta = read_checkpoint(src)
    tensors, meta = dict(tensors), dict(meta)
    edit(tensors, meta)
    meta.pop("digests")
    meta["digests"] = json.dumps(ck._digests(meta, tensors), sort_keys=True)
    dst.write_bytes(save_bytes(tensors, metadata=meta))
    return dst


def test_a_dtype_that_disagrees_with_the_tensors_is_refused(saved, tmp_path):
    saved = saved[1]
    def to_double(tensors, meta):
        for k in list(tensors):
            if k.startswith("model."):
                tensors[k] = tensors[k].double()

    forged = _forge(saved, tmp_path / "double.safetensors", to_double)  # says float32, holds float64
    with pytest.raises(ValueError, match=r"says its dtype is torch.float32 but \d+ of its tensors are not "
                                         r"\(model\.\S+ is torch.float64\)"):
        load_checkpoint(forged)

    def one_half(tensors, meta):
        tensors["model.final_norm.weight"] = tensors["model.final_norm.weight"].half()

    with pytest.raises(ValueError, match=r"model\.final_norm\.weight is torch.float16"):
        load_checkpoint(_forge(saved, tmp_path / "half.safetensors", one_half))


def test_an_alias_the_model_does_not_tie_is_refused(tmp_path):
    """A Seq2SeqTransformer with tie_embeddings=False keeps its head apart: a file that aliases
    the head to the target embedding would load the embedding's values into the head, silently."""
    from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
    from companion.translation import TranslationTokenizer

    tok = TranslationTokenizer.from_texts(["one two", "eins zwei"])
    model = Seq2SeqTransformer(Seq2SeqConfig(vocab_size=tok.vocab_size, pad_id=tok.pad_id, context_length=8,
                                             d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                                             tie_embeddings=False))
    path = save_checkpoint(tmp_path / "untied.safetensors", model, tok)
    load_checkpoint(path)  # as saved: fine

    def alias_head(tensors, meta):
        del tensors["model.head.weight"]
        meta["aliases"] = json.dumps({"head.weight": "tgt_emb.weight"}, sort_keys=True)

    with pytest.raises(ValueError, match=r"it ties head\.weight to tgt_emb\.weight, which this model keeps apart"):
        load_checkpoint(_forge(path, tmp_path / "forged.safetensors", alias_head))


def test_a_tied_weight_stored_twice_is_refused(saved, tmp_path):
    saved = saved[1]
    def untie(tensors, meta):
        tensors["model.head.weight"] = torch.randn_like(tensors["model.tok_emb.weight"])
        meta["aliases"] = json.dumps({}, sort_keys=True)

    with pytest.raises(ValueError, match=r"it stores head\.weight apart from tok_emb\.weight, which this model ties"):
        load_checkpoint(_forge(saved, tmp_path / "twice.safetensors", untie))


def test_an_alias_between_two_unrelated_weights_is_refused(saved, tmp_path):
    saved = saved[1]
    def alias_norm(tensors, meta):
        del tensors["model.final_norm.bias"]
        meta["aliases"] = json.dumps({"head.weight": "tok_emb.weight", "final_norm.bias": "final_norm.weight"},
                                     sort_keys=True)

    with pytest.raises(ValueError, match=r"ties final_norm\.bias to final_norm\.weight, which this model keeps apart"):
        load_checkpoint(_forge(saved, tmp_path / "norm.safetensors", alias_norm))


def test_the_shipped_models_tie_what_their_files_say():
    from companion import checkpoint as ck
    from companion.data import asset_path

    for name in ("shakespeare_char", "numbers_en_de", "shakespeare_mlm"):
        model, _, _ = load_checkpoint(asset_path(f"{name}.safetensors"))
        assert len(ck._ties(model)) == 1


def test_a_modern_decoder_round_trips_and_a_tampered_file_is_refused(tmp_path):
    """Chapter 13's ModernGPT (grouped-query attention, a tied head) saves, loads to the same logits,
    and gets the GPT's integrity checks: a flipped weight byte, an edited configuration, a file
    loaded into a GPT."""
    from companion.modern import ModernConfig, ModernGPT
    torch.manual_seed(0)
    model = ModernGPT(ModernConfig(vocab_size=TOK.vocab_size, context_length=8, d_model=16, n_layers=1, n_heads=4,
                                   n_kv_heads=2))
    path = save_checkpoint(tmp_path / "modern.safetensors", model, TOK, info={"recipe": "modern-muon"})
    loaded, tok, extra = load_checkpoint(path)
    assert type(loaded) is ModernGPT and loaded.config == model.config and tok.chars == TOK.chars
    assert loaded.head.weight is loaded.tok_emb.weight and extra["info"] == {"recipe": "modern-muon"}
    idx = torch.tensor([[1, 5, 9, 2, 0, 3, 7, 4]])
    model.eval()
    assert torch.equal(loaded(idx)[0], model(idx)[0])
    data = path.read_bytes()
    n, _ = split(data)
    bad = tmp_path / "bad.safetensors"
    for i in (8 + n + 5, len(data) - 3):  # a byte of the first tensor and of the last
        flipped = bytearray(data)
        flipped[i] ^= 0x01
        bad.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match="damaged"):
            load_checkpoint(bad)
    rewrite_meta(path, bad, config=json.dumps({**model.config.to_dict(), "n_kv_heads": 4}, sort_keys=True))
    with pytest.raises(ValueError, match="configuration"):
        load_checkpoint(bad)
    with pytest.raises(TypeError, match="must be a ModernGPT"):
        load_checkpoint(path, model=small_model())
