"""Tests for companion.train and companion.checkpoint: schedule, optimizer groups, determinism,
resuming, checkpoint round trips and the errors for damaged or mismatched files, the command line."""
import math
import subprocess
import sys

import pytest
import torch

from companion.checkpoint import load_checkpoint
from companion.data import load_corpus
from companion.model import GPT, GPTConfig
from companion.train import (CONFIGS, TrainConfig, Trainer, evaluate_text, learning_rate, main, make_optimizer,
                             named_config, plot_losses)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def tiny_trainer(corpus, **overrides):
    mcfg, tcfg = named_config("tiny", corpus.tokenizer.vocab_size, **{"max_steps": 12, "eval_interval": 6, **overrides})
    torch.manual_seed(tcfg.seed)
    return Trainer(GPT(mcfg), corpus, tcfg)


def test_learning_rate_schedule():
    cfg = TrainConfig(learning_rate=1e-3, min_lr=1e-4, warmup=100, max_steps=1000)
    assert learning_rate(0.0, cfg) < 1e-7
    assert learning_rate(0.05, cfg) == pytest.approx(0.5e-3)  # halfway through warm-up
    assert learning_rate(0.1, cfg) == pytest.approx(1e-3)  # peak at the end of warm-up
    assert learning_rate(0.55, cfg) == pytest.approx(0.55e-3)  # half-way down the cosine: the mean of peak and floor
    assert learning_rate(1.0, cfg) == pytest.approx(1e-4)
    frac = TrainConfig(learning_rate=1e-3, min_lr=0.0, warmup=0.2)
    assert learning_rate(0.2, frac) == pytest.approx(1e-3)
    assert learning_rate(0.6, frac) == pytest.approx(0.5e-3)


def test_weight_decay_on_matrices_only():
    model = GPT(GPTConfig(vocab_size=11, context_length=8, d_model=16, n_layers=2, n_heads=2))
    opt = make_optimizer(model, TrainConfig(weight_decay=0.1))
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim == 2 for p in decay["params"]) and all(p.ndim == 1 for p in no_decay["params"])
    ids = {id(p) for g in opt.param_groups for p in g["params"]}
    assert len(ids) == len(list(model.parameters()))  # the tied head is one parameter, listed once


def test_training_lowers_the_loss_and_is_deterministic(corpus):
    a = tiny_trainer(corpus, max_steps=30, eval_interval=0)
    ha = a.run(progress=False)
    b = tiny_trainer(corpus, max_steps=30, eval_interval=0)
    hb = b.run(progress=False)
    assert ha.train_loss == hb.train_loss  # same seed, same thread count: the same run
    assert ha.val_loss[-1] < math.log(corpus.tokenizer.vocab_size) - 0.6
    assert len(ha.steps) == 30 and ha.lr[0] < ha.lr[4]


def test_resume_equals_uninterrupted_training(corpus, tmp_path):
    straight = tiny_trainer(corpus)
    straight.run(progress=False)
    first = tiny_trainer(corpus)
    first.run(7, progress=False)  # stop in the middle of the schedule, between evaluations
    path = first.save(tmp_path / "mid.safetensors")
    torch.manual_seed(999)  # disturb the global random state: resume must restore what it needs
    resumed = Trainer.resume(path, corpus)
    assert resumed.step == 7
    resumed.run(progress=False)
    assert resumed.history.train_loss == straight.history.train_loss
    assert resumed.history.val_loss == straight.history.val_loss
    for (n, p), q in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(p, q), n


def test_checkpoint_round_trip_gives_identical_logits(corpus, tmp_path):
    trainer = tiny_trainer(corpus)
    trainer.run(5, progress=False)
    path = trainer.save(tmp_path / "w.safetensors", resumable=False, info={"note": "test"})
    model, tok, extra = load_checkpoint(path)
    assert tok.chars == corpus.tokenizer.chars and extra["info"] == {"note": "test"} and extra["train_state"] is None
    idx = corpus.val_ids[:64].view(2, 32)
    trainer.model.eval(), model.eval()
    assert torch.equal(model(idx)[0], trainer.model(idx)[0])
    assert model.head.weight is model.tok_emb.weight
    with pytest.raises(ValueError, match="holds only weights"):
        Trainer.resume(path, corpus)


def test_evaluate_text_equals_mean_cross_entropy_by_hand():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=7, context_length=8, d_model=16, n_layers=1, n_heads=2)).eval()
    ids = torch.randint(7, (29,))  # 3 full windows of 8 and a partial one of 4
    total = 0.0
    for s in range(0, 28, 8):
        x, y = ids[s : min(s + 8, 28)], ids[s + 1 : min(s + 9, 29)]
        total += torch.nn.functional.cross_entropy(model(x[None])[0][0], y, reduction="sum").item()
    assert evaluate_text(model, ids, batch_size=2) == pytest.approx(total / 28, rel=1e-5)
    with pytest.raises(ValueError, match=r"`ids` must be a 1-D tensor of at least 2 token ids \(got \(1,\)\)"):
        evaluate_text(model, ids[:1])


def test_trainer_and_config_errors(corpus):
    with pytest.raises(ValueError, match="`name` must be one of"):
        named_config("huge", 69)
    with pytest.raises(ValueError, match="vocab_size=5 does not match the tokenizer's"):
        Trainer(GPT(GPTConfig(vocab_size=5, context_length=8, d_model=8, n_layers=1, n_heads=2)), corpus, TrainConfig())
    assert {"nanogpt-cpu", "tuned-150s", "small", "tiny"} <= set(CONFIGS)


def test_plot_losses(corpus):
    import matplotlib

    matplotlib.use("Agg")
    trainer = tiny_trainer(corpus, max_steps=6, eval_interval=3)
    ax = plot_losses(trainer.run(progress=False))
    assert ax.get_ylabel() == "loss (nats per character)" and len(ax.lines) == 3


def test_command_line(tmp_path, capsys):
    out = tmp_path / "cli.safetensors"
    assert main(["--config", "tiny", "--steps", "3", "--threads", "1", "--no-progress", "--out", str(out),
                 "--set", "d_model=16", "eval_interval=0"]) == 0
    text = capsys.readouterr().out
    assert "held-out plays:" in text and "bits/char" in text
    model, _, extra = load_checkpoint(out)
    assert model.config.d_model == 16 and extra["train_state"]["step"] == 3
    assert extra["info"]["command"].startswith("python -m companion.train --config tiny")
    with pytest.raises(SystemExit):
        main(["--set", "colour=3"])
    help_text = subprocess.run([sys.executable, "-m", "companion.train", "--help"], capture_output=True, text=True, check=True).stdout
    assert "--time" in help_text and "--resume" in help_text
