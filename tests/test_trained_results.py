"""The trained results that chapters 7, 10 and 12 load with ``TRAIN = False`` (issue 28, point 4).

A reader who sets ``TRAIN = False`` in a chapter's set-up cell loads what the book's own run trained
and measured instead of training. These tests check that the shipped files load into the chapters'
models and hold the very numbers the stored book notebooks show (so the two cannot drift apart),
and that the ViT's save/load functions round-trip and refuse bad input.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from companion.checkpoint import load_checkpoint
from companion.data import asset_path
from companion.model import GPT, GPTConfig
from companion.train import History
from companion.vit import (TRAINED_ASSET, TrainLog, ViTConfig, VisionTransformer, accuracy, digits_splits,
                           load_trained, save_trained)

BOOK = Path(__file__).resolve().parents[1] / "book"
VIT_CONFIG = ViTConfig(image_size=8, patch_size=2, d_model=64, n_layers=4, n_heads=4, d_ff=128)


def _printed(path: Path, marker: str) -> str:
    """The text the one code cell of ``path`` whose source holds ``marker`` printed."""
    cells = [c for c in json.loads(path.read_text())["cells"]
             if c["cell_type"] == "code" and marker in "".join(c["source"])]
    assert len(cells) == 1, f"{len(cells)} cells of {path.name} hold {marker!r}"
    return "".join("".join(o.get("text", "")) for o in cells[0]["outputs"] if o.get("output_type") == "stream")


# --- chapter 12 ------------------------------------------------------------------------------------

def test_the_shipped_vits_load_and_hold_the_books_accuracies():
    states, record = load_trained()
    assert set(states) == {"vit", "no_pos"}
    vit = VisionTransformer(VIT_CONFIG)
    vit.load_state_dict(states["vit"])  # strict: every tensor, no other
    no_pos = VisionTransformer(ViTConfig(**{**vars(VIT_CONFIG), "positions": "none"}))
    no_pos.load_state_dict(states["no_pos"])
    log = TrainLog(**record["vit_log"])
    assert log.steps == 600 and len(log.epoch_loss) == 30
    data = digits_splits()
    acc = accuracy(vit, data.test_images, data.test_labels)
    per_seed = record["per_seed"]
    assert set(per_seed) == {"ViT", "CNN", "MLP", "GAP"} and all(len(v) == 5 for v in per_seed.values())
    assert per_seed["ViT"][0] == pytest.approx(acc, abs=1e-9)  # the stored ViT is seed 0's
    assert 0.6 < accuracy(no_pos, data.test_images, data.test_labels) < acc - 0.05


def test_the_recorded_seeds_are_the_ones_the_book_prints():
    _, record = load_trained()
    printed = _printed(BOOK / "12_vision_transformer.ipynb", "def train_seed")
    for name, accs in record["per_seed"].items():
        mean = sum(accs) / len(accs)
        line = f"{name}: {mean:.1%} over {len(accs)} seeds ({', '.join(f'{a:.1%}' for a in accs)})"
        assert line in printed, (line, printed)
    training = _printed(BOOK / "12_vision_transformer.ipynb", "vit_log = train_classifier(")
    assert f"last epoch's loss {record['vit_log']['epoch_loss'][-1]:.3f}" in training


def test_the_shipped_file_is_small():
    assert asset_path(TRAINED_ASSET).stat().st_size < 1_000_000


def test_save_and_load_round_trip(tmp_path):
    torch.manual_seed(0)
    a, b = VisionTransformer(VIT_CONFIG), VisionTransformer(VIT_CONFIG)
    path = save_trained(tmp_path / "x.safetensors", {"a": a, "b": b}, {"n": [1, 2.5]}, half=("b",))
    states, record = load_trained(path)
    assert record == {"n": [1, 2.5]}
    for key, value in a.state_dict().items():
        assert torch.equal(states["a"][key], value)
    for key, value in b.state_dict().items():
        assert states["b"][key].dtype == torch.float16
        torch.testing.assert_close(states["b"][key].float(), value, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("models,record,half,error,match", [
    ({"a": "not a model"}, {}, (), TypeError, "models"),
    ({"a": torch.nn.Linear(2, 2)}, [1], (), TypeError, "record"),
    ({"a": torch.nn.Linear(2, 2)}, {}, ("b",), ValueError, "half"),
])
def test_save_trained_refuses_bad_input(tmp_path, models, record, half, error, match):
    with pytest.raises(error, match=match):
        save_trained(tmp_path / "x.safetensors", models, record, half=half)


# --- chapter 7 -------------------------------------------------------------------------------------

def test_the_live_run_loads_and_holds_the_books_measurements():
    path = BOOK / "07_training_a_language_model.ipynb"
    live, _, extra = load_checkpoint(asset_path("shakespeare_live.safetensors"))
    assert isinstance(live, GPT)
    assert live.config == GPTConfig(vocab_size=69, context_length=64, d_model=64, n_layers=2, n_heads=4)
    info = extra["info"]
    history = History(**info["history"])
    assert len(history.train_loss) == len(info["norms"]) == 600
    printed = _printed(path, "history = trainer.run()")
    for at, train, val in zip(history.eval_steps, history.eval_train_loss, history.val_loss):
        assert f"step {at}: train {train:.4f}, held-out {val:.4f} nats/char" in printed
    clipping = _printed(path, "def update_sizes")
    for c, size, grad in info["by_clip"]:
        name = f"clipped at {c}" if c else "not clipped"
        assert f"{name:>14}: steps 150-199, update / lr {size:5.1f}, gradient norm {grad:.2f}" in clipping


# --- chapter 10 ------------------------------------------------------------------------------------

def _genre_test_labels():
    """The 2,000 test labels of chapter 10's genre task, drawn as its cell draws them."""
    from companion.mlm import labelled_lines

    _, test_y = labelled_lines(["twelfth-night", "much-ado-about-nothing", "macbeth", "othello"],
                               ("comedies", "tragedies"))
    g = torch.Generator().manual_seed(0)
    pick = [rows[torch.randperm(len(rows), generator=g)[:1000]]
            for rows in (torch.nonzero(test_y == k)[:, 0] for k in (0, 1))]
    return test_y[torch.cat(pick)]


def test_the_recorded_fine_tuning_holds_the_books_numbers():
    import math

    from companion.mlm import recorded_fine_tuning

    path = BOOK / "10_masked_language_model.ipynb"
    genre = recorded_fine_tuning()["genre"]
    assert len(genre["history"].train_loss) == len(genre["scratch_history"].train_loss) == 100
    test_y = _genre_test_labels()
    printed = _printed(path, "scratch_history = fine_tune(")
    for name, pred in (("pre-trained", genre["pred"]), ("from scratch", genre["scratch_pred"])):
        acc = (pred == test_y).float().mean().item()
        half = 1.96 * math.sqrt(acc * (1 - acc) / len(test_y))
        assert f"{name:12s}: {acc:.1%} ± {half:.1%} of 2,000 test lines" in printed, (name, printed)
    comedies = int((genre["scratch_pred"] == 0).sum())
    assert f"from scratch: {comedies:,} of 2,000 lines called comedies" in printed
    seeds = _printed(path, "def run_seed")
    for key, value in recorded_fine_tuning()["swap_seed_0"].items():
        row = next(line for line in seeds.splitlines() if line.strip().startswith(key))
        assert row.startswith(f"{key:>24s}{value:9.1%}"), (row, value)


def test_fine_tuning_record_round_trip_and_bad_input(tmp_path):
    from companion.mlm import record_fine_tuning, recorded_fine_tuning

    h = History(steps=[0, 1], train_loss=[0.7, 0.69])
    seed_0 = {"fine-tuned, pre-trained": 0.5, "fine-tuned, random": 0.4975}
    path = record_fine_tuning(tmp_path / "r.json", pred=torch.tensor([0, 1, 1]), scratch_pred=torch.zeros(3, dtype=torch.long),
                              history=h, scratch_history=h, swap_seed_0=seed_0)
    back = recorded_fine_tuning(path)
    assert back["genre"]["pred"].tolist() == [0, 1, 1] and back["genre"]["history"] == h
    assert back["swap_seed_0"] == seed_0
    with pytest.raises(ValueError, match="0s and 1s"):
        record_fine_tuning(tmp_path / "x.json", pred=torch.tensor([0, 2]), scratch_pred=torch.tensor([0, 1]),
                           history=h, scratch_history=h, swap_seed_0=seed_0)
    with pytest.raises(TypeError, match="History"):
        record_fine_tuning(tmp_path / "x.json", pred=torch.tensor([0]), scratch_pred=torch.tensor([0]),
                           history={"train_loss": []}, scratch_history=h, swap_seed_0=seed_0)
    for broken in ('{"genre": {}}', "not json", '{"genre": {"pred": "01", "scratch_pred": "0x"}, "swap_seed_0": {}}'):
        (tmp_path / "bad.json").write_text(broken)
        with pytest.raises(ValueError, match="chapter 10|0s and 1s"):
            recorded_fine_tuning(tmp_path / "bad.json")
