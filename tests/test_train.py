"""Tests for companion.train and companion.checkpoint: schedule, optimizer groups, determinism,
resuming, checkpoint round trips and the errors for damaged or mismatched files, the command line;
device and precision choice (GPUs simulated: none is needed), the GPU compute path of the model,
the train/held-out estimates, and how notebooks store a progress bar. Several processes:
tests/test_distributed.py."""
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch.nn.functional as F

from companion import distributed
from companion.checkpoint import load_checkpoint, shipped_model_path
from companion.data import get_batch, load_corpus
from companion.model import GPT, GPTConfig
from companion.multihead import MultiHeadAttention
from companion.train import (CONFIG_HELP, CONFIGS, TrainConfig, Trainer, _train_config, build_model, estimate_loss, evaluate_text,
                             learning_rate, main, make_optimizer, named_config, plot_losses, windows)

ROOT = Path(__file__).resolve().parents[1]


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
    assert ax.get_ylabel() == "loss (nats per character)" and len(ax.lines) == 4
    labels = [line.get_label() for line in ax.lines]
    assert "training text (estimate)" in labels and "held-out plays (estimate)" in labels


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
    assert "--time" in help_text and "--resume" in help_text and "--device" in help_text
    for name, line in CONFIG_HELP.items():  # every named configuration is described
        assert f"{name:<12} {line}" in help_text
    assert set(CONFIG_HELP) == set(CONFIGS)
    assert "--out checkpoints/" not in help_text and "--out runs/small.safetensors" in help_text
    with pytest.raises(SystemExit, match="is the shipped model"):
        main(["--steps", "1", "--out", str(shipped_model_path())])


def test_command_line_reports_what_it_does_and_what_next(tmp_path, capsys):
    out = tmp_path / "timed.safetensors"
    assert main(["--config", "tiny", "--time", "1.5", "--threads", "1", "--out", str(out), "--device", "cpu"]) == 0
    captured = capsys.readouterr()
    text, bar = captured.out, captured.err
    assert "max_steps" not in text  # a time-limited run does not print a step count it will not keep
    assert "schedule: a 1.5 s budget" in text and "the number of steps is whatever fits" in text
    assert "device: cpu, float32, 1 thread" in text and "batch: 8 windows of 32 characters" in text
    # tiny evaluates every 25 of its 50 steps: a time-limited run evaluates as often, over its budget
    assert text.count("held-out ") - text.count("held-out plays") <= 2
    assert "/2 s" in bar or "/1 s" in bar  # the bar of a time-limited run counts seconds to its budget
    assert "next:" in text and "--resume" in text and "load_checkpoint(" in text and "replace shipped_model_path()" in text
    info = load_checkpoint(out)[2]["info"]
    assert info["device"] == "cpu" and info["processes"] == 1 and info["global_batch"] == 8


# ---------------------------------------------------------------- devices and precision (no GPU needed)


def test_device_auto_picks_cuda_then_mps_then_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert distributed.resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert distributed.resolve_device("auto") == torch.device("mps")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert distributed.resolve_device("auto") == torch.device("cuda", 0)
    assert distributed.resolve_device("cuda", local_rank=3) == torch.device("cuda", 3)  # a process's own GPU
    assert distributed.resolve_device("cpu") == torch.device("cpu")


def test_device_errors_say_what_to_do(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"`device` is 'cuda' but this PyTorch sees no CUDA GPU .* use device='auto' or 'cpu'"):
        distributed.resolve_device("cuda")
    with pytest.raises(ValueError, match="`device` is 'mps' but MPS is not available"):
        distributed.resolve_device("mps")
    with pytest.raises(ValueError, match=r"`device` must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps' \(got 'gpu'\)"):
        distributed.resolve_device("gpu")
    with pytest.raises(TypeError, match="`device` must be a string"):
        distributed.resolve_device(0)


def test_autocast_dtype_rules():
    auto = distributed.autocast_dtype
    assert auto("cuda", capability=(9, 0)) == torch.bfloat16  # H100
    assert auto("cuda", capability=(8, 0)) == torch.bfloat16  # A100
    assert auto("cuda", capability=(7, 5)) == torch.float16  # T4 (Colab): float16 and a gradient scaler
    assert auto("cpu") is None and auto("mps") is None  # float32
    assert auto("cpu", "bf16") == torch.bfloat16 and auto("cuda", "float32", capability=(9, 0)) is None
    assert auto("mps", "fp16") == torch.float16
    with pytest.raises(ValueError, match="`precision='fp16'` needs a GPU"):
        auto("cpu", "fp16")
    with pytest.raises(ValueError, match=r"`precision` must be one of \('auto', 'float32', 'bf16', 'fp16'\) \(got 'half'\)"):
        TrainConfig(precision="half")
    assert _train_config({"bf16": True}).precision == "bf16"  # older checkpoints stored a bool
    assert _train_config({"bf16": False}).precision == "auto"


def test_optimizer_is_fused_on_cuda_only():
    model = GPT(GPTConfig(vocab_size=11, context_length=8, d_model=16, n_layers=1, n_heads=2))
    opt = make_optimizer(model, TrainConfig())
    assert opt.defaults["fused"] is False and opt.defaults["foreach"] is False  # CPU: the plain loop
    assert make_optimizer(model, TrainConfig(), device_type="mps").defaults["fused"] is None


def test_batches_are_gathered_like_get_batch(corpus):
    ids = corpus.train_ids
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    x, y = get_batch(ids, 6, 16, g1)
    starts = torch.randint(len(ids) - 16, (6,), generator=g2)
    x2, y2 = windows(ids, starts, 16)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    trainer = tiny_trainer(corpus, device="cpu")
    assert trainer.device == torch.device("cpu") and trainer.global_batch == 8 and trainer.amp_dtype is None
    x3, y3 = trainer.next_batch()
    x4, y4 = get_batch(ids, 8, 32, torch.Generator().manual_seed(trainer.cfg.seed))
    assert torch.equal(x3, x4) and torch.equal(y3, y4)  # one process: the windows of get_batch


def test_bf16_autocast_trains_on_the_cpu(corpus):
    trainer = tiny_trainer(corpus, precision="bf16", max_steps=4, eval_interval=0)
    h = trainer.run(progress=False)
    assert trainer.amp_dtype == torch.bfloat16 and all(math.isfinite(v) for v in h.train_loss + h.val_loss)


# ---------------------------------------------------------------- the GPU compute path of the model


def test_fused_qkv_equals_three_products_and_trains_all_three():
    torch.manual_seed(0)
    mha = MultiHeadAttention(24, 4)
    x = torch.randn(2, 5, 24)
    q, k, v = mha._project(x, x, x)  # self-attention: one (24, 72) product
    for got, proj in zip((q, k, v), (mha.q_proj, mha.k_proj, mha.v_proj)):
        torch.testing.assert_close(got, proj(x), rtol=1e-6, atol=1e-6)
    (q.sum() + 2 * k.sum() + 3 * v.sum()).backward()
    for scale, proj in zip((1, 2, 3), (mha.q_proj, mha.k_proj, mha.v_proj)):
        torch.testing.assert_close(proj.weight.grad, scale * x.sum((0, 1)).expand(24, 24))
    mem = torch.randn(2, 3, 24)
    _, k2, _ = mha._project(x, mem, mem)  # cross-attention: three separate products
    torch.testing.assert_close(k2, mha.k_proj(mem))
    assert set(mha.state_dict()) == {f"{n}_proj.{p}" for n in "qkv" + "out"[:0] for p in ("weight", "bias")} | {
        "out_proj.weight", "out_proj.bias"}  # the names chapter 3 teaches and checkpoints store


def test_loss_under_autocast_is_float32_and_equals_the_cast_logits():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=50, context_length=16, d_model=32, n_layers=2, n_heads=4))
    x, y = torch.randint(50, (3, 16)), torch.randint(50, (3, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits, loss = model(x, y)
    assert logits.dtype == torch.bfloat16 and loss.dtype == torch.float32
    torch.testing.assert_close(loss, F.cross_entropy(logits.flatten(0, 1).float(), y.flatten()))
    half = GPT(GPTConfig(vocab_size=50, context_length=16, d_model=32, n_layers=2, n_heads=4)).to(torch.bfloat16)
    assert half(x, y)[1].dtype == torch.float32  # half-precision weights: the softmax still in float32


def test_forward_compiles_into_one_graph():
    """No graph break, hence no host sync hidden in the forward pass: torch.compile's fullgraph mode
    refuses any (the CPU's id range check is skipped while compiling, as it is on a GPU)."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=30, context_length=8, d_model=16, n_layers=1, n_heads=2))
    x, y = torch.randint(30, (2, 8)), torch.randint(30, (2, 8))
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x, y)[1], model(x, y)[1])
    with pytest.raises(ValueError, match="token ids in"):
        model(torch.full((1, 4), 30), None)  # eager on the CPU: the clear message stays


# ---------------------------------------------------------------- evaluation: train and held-out alike


def test_train_and_held_out_are_estimated_the_same_way(corpus):
    trainer = tiny_trainer(corpus, max_steps=6, eval_interval=3)
    h = trainer.run(progress=False)
    assert h.eval_steps == [3, 6] and len(h.eval_train_loss) == len(h.val_loss) == 2
    assert len(h.train_loss) == 6  # the raw per-step batch losses are kept for plotting
    cfg = trainer.cfg
    train = estimate_loss(trainer.model, corpus.train_ids, cfg.eval_batches, cfg.batch_size)
    val = estimate_loss(trainer.model, corpus.val_ids, cfg.eval_batches, cfg.batch_size)
    assert (h.eval_train_loss[-1], h.val_loss[-1]) == (train, val) == trainer.estimate_losses()
    assert h.eval_train_loss[-1] != h.train_loss[-1]  # an estimate on 2 x 8 windows, not the step's batch
    chunked = estimate_loss(trainer.model, corpus.val_ids, 2, 8, chunk=4)
    assert chunked == pytest.approx(val, rel=1e-6)  # in parts of 4 rows: the same windows, the same mean


def test_time_limited_run_evaluates_as_often_as_its_step_schedule(corpus, capsys):
    trainer = tiny_trainer(corpus, max_steps=50, eval_interval=10)  # 5 evaluations per run
    h = trainer.run(time_budget=2.0, progress=False)
    assert trainer.step > 5 and 1 <= len(h.eval_steps) <= 5
    assert capsys.readouterr().out.count("held-out") == len(h.eval_steps)


# ---------------------------------------------------------------- notebooks: one frame of a progress bar


def _execute_notebooks_module():
    spec = importlib.util.spec_from_file_location("execute_notebooks", ROOT / "scripts" / "execute_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_progress_bar_is_stored_as_its_last_frame_as_nbval_compares_it():
    import nbformat

    stream = lambda name, text: nbformat.v4.new_output("stream", name=name, text=text)  # noqa: E731
    bar = [stream("stderr", f"\rtraining:  {p:>3}%|   | {p}/100 [00:01<00:01, 9.0it/s]") for p in (0, 30, 60)]
    outputs = bar + [stream("stderr", "\r" + " " * 20 + "\r"), stream("stdout", "step 60: train 2.1\n"),
                     stream("stderr", "\rtraining: 100%|###| 100/100 [00:02<00:00, 9.1it/s]"), stream("stderr", "\n"),
                     stream("stdout", "100 steps in 2 s\n"), nbformat.v4.new_output("display_data", data={"text/plain": "x"})]
    stored = _execute_notebooks_module().collapse_streams([nbformat.from_dict(o) for o in outputs])
    assert [o.output_type for o in stored] == ["stream", "stream", "display_data"]
    assert stored[0].text == "training: 100%|###| 100/100 [00:02<00:00, 9.1it/s]\n"
    assert stored[1].text == "step 60: train 2.1\n100 steps in 2 s\n"
    nbval = pytest.importorskip("nbval.plugin")
    fresh = nbval.coalesce_streams([nbformat.from_dict(o) for o in outputs])
    assert [dict(o) for o in fresh] == [dict(o) for o in stored]  # what nbval compares: unchanged
    again = nbval.coalesce_streams([nbformat.from_dict(dict(o)) for o in stored])
    assert [dict(o) for o in again] == [dict(o) for o in stored]


@pytest.mark.parametrize("field,value,error,message", [
    ("batch_size", 0, ValueError, "`batch_size` must be a positive integer"),
    ("batch_size", 2.5, TypeError, "`batch_size` must be a positive integer"),
    ("max_steps", True, TypeError, "`max_steps` must be a positive integer"),
    ("eval_interval", -1, ValueError, "`eval_interval` must be a non-negative integer"),
    ("threads", 0, ValueError, "`threads` must be a positive integer"),
    ("learning_rate", 0.0, ValueError, "`learning_rate` must be a finite number > 0"),
    ("learning_rate", float("nan"), ValueError, "`learning_rate` must be"),
    ("learning_rate", "3e-3", TypeError, "`learning_rate` must be"),
    ("min_lr", 1.0, ValueError, "`min_lr` must be <= learning_rate"),
    ("warmup", -5, ValueError, "`warmup` must be"),
    ("weight_decay", float("inf"), ValueError, "`weight_decay` must be"),
    ("beta1", 1.0, ValueError, r"`beta1` must be a number in \[0, 1\)"),
    ("beta2", -0.1, ValueError, "`beta2` must be"),
    ("grad_clip", -1.0, ValueError, "`grad_clip` must be"),
    ("compile", "yes", TypeError, "`compile` must be True or False"),
    ("seed", 1.5, TypeError, "`seed` must be an integer"),
])
def test_train_config_refuses_a_wrong_field_by_name(field, value, error, message):
    with pytest.raises(error, match=message):
        TrainConfig(**{field: value})


def test_trainer_refuses_wrong_arguments(corpus):
    model = GPT(GPTConfig(vocab_size=corpus.tokenizer.vocab_size, context_length=8, d_model=8, n_layers=1, n_heads=2))
    with pytest.raises(TypeError, match="`model` must be a companion.model.GPT"):
        Trainer(torch.nn.Linear(2, 2), corpus, TrainConfig())
    with pytest.raises(TypeError, match="`corpus` must be a companion.data.Corpus"):
        Trainer(model, corpus.train_ids, TrainConfig())
    with pytest.raises(TypeError, match="`cfg` must be a TrainConfig"):
        Trainer(model, corpus, {"batch_size": 4})
    trainer = Trainer(model, corpus, TrainConfig(batch_size=2, max_steps=2, eval_interval=0, eval_batches=1))
    with pytest.raises(ValueError, match="`steps` must be a non-negative integer"):
        trainer.run(-1, progress=False)
    with pytest.raises(ValueError, match="`time_budget` must be a finite number > 0"):
        trainer.run(time_budget=0, progress=False)
    assert trainer.step == 0  # nothing ran


# ---------------------------------------------------------------- chapter 13's decoder and Muon in the trainer

def modern_trainer(corpus, optimizer="muon", **overrides):
    """A small ModernGPT (grouped-query attention: 4 query heads, 2 key/value heads), trained with
    ``optimizer``, from the ``modern-muon`` configuration's training settings."""
    from companion.modern import ModernConfig
    mcfg, tcfg = named_config("modern-muon", corpus.tokenizer.vocab_size,
                              **{"max_steps": 12, "eval_interval": 6, "eval_batches": 1, "batch_size": 4,
                                 "optimizer": optimizer, **overrides})
    mcfg = ModernConfig(**{**mcfg.to_dict(), "context_length": 24, "d_model": 32, "n_layers": 2, "n_kv_heads": 2,
                           "d_ff": None, "d_head": None})
    torch.manual_seed(tcfg.seed)
    return Trainer(build_model(mcfg), corpus, tcfg)


def test_named_modern_and_muon_configurations():
    from companion.modern import ModernConfig, ModernGPT, MuonWithAdamW
    for name, optimizer in (("modern-muon", "muon"), ("modern-adamw", "adamw"), ("gpt-muon", "muon")):
        mcfg, tcfg = named_config(name, 65)
        assert tcfg.optimizer == optimizer
        assert isinstance(mcfg, ModernConfig) == name.startswith("modern")
        model = build_model(mcfg)
        assert isinstance(model, ModernGPT) == name.startswith("modern")
        opt = make_optimizer(model, tcfg)
        assert isinstance(opt, MuonWithAdamW) == (optimizer == "muon")
        if optimizer == "muon":  # every parameter once: the blocks' matrices to Muon, the rest to AdamW
            muon = [p for g in opt.muon.param_groups for p in g["params"]]
            rest = [p for g in opt.adamw.param_groups for p in g["params"]]
            assert all(p.ndim == 2 for p in muon) and len(muon) == len({id(p) for p in model.blocks.parameters()
                                                                        if p.ndim == 2})
            assert len({id(p) for p in muon + rest}) == len(list(model.parameters()))
    mcfg, _ = named_config("modern-muon", 65)
    assert (mcfg.d_model, mcfg.n_layers, mcfg.context_length) == (128, 4, 128)
    with pytest.raises(TypeError, match="GPTConfig or a ModernConfig"):
        build_model(TrainConfig())


def test_modern_muon_resume_equals_uninterrupted_training(corpus, tmp_path):
    straight = modern_trainer(corpus)
    straight.run(progress=False)
    first = modern_trainer(corpus)
    first.run(5, progress=False)
    path = first.save(tmp_path / "mid.safetensors")
    torch.manual_seed(999)
    resumed = Trainer.resume(path, corpus)
    assert resumed.step == 5 and type(resumed.model).__name__ == "ModernGPT"
    assert resumed.cfg.optimizer == "muon"
    resumed.run(progress=False)
    assert resumed.history.train_loss == straight.history.train_loss  # Muon's momentum came back too
    assert resumed.history.val_loss == straight.history.val_loss
    for (n, p), q in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        assert torch.equal(p, q), n
    # the saved state is really used: a run whose Muon momentum is dropped goes elsewhere
    dropped = Trainer.resume(path, corpus)
    dropped.optimizer.muon.state.clear()
    dropped.run(progress=False)
    assert dropped.history.train_loss != straight.history.train_loss
    with pytest.raises(ValueError, match="another optimizer"):
        Trainer.resume(path, corpus, optimizer="adamw")


def test_modern_adamw_resume_equals_uninterrupted_training(corpus, tmp_path):
    straight = modern_trainer(corpus, optimizer="adamw")
    straight.run(progress=False)
    first = modern_trainer(corpus, optimizer="adamw")
    first.run(7, progress=False)
    resumed = Trainer.resume(first.save(tmp_path / "a.safetensors"), corpus)
    resumed.run(progress=False)
    assert resumed.history.train_loss == straight.history.train_loss


def test_modern_checkpoint_round_trip_and_decoding(corpus, tmp_path):
    from companion.decoding import beam_search, greedy, sample
    trainer = modern_trainer(corpus)
    trainer.run(6, progress=False)
    path = trainer.save(tmp_path / "m.safetensors", resumable=False)
    model, tok, _ = load_checkpoint(path)
    assert type(model).__name__ == "ModernGPT" and model.config == trainer.model.config and not model.training
    assert model.head.weight is model.tok_emb.weight
    idx = corpus.val_ids[:48].view(2, 24)
    trainer.model.eval()
    assert torch.equal(model(idx)[0], trainer.model(idx)[0])
    prompt = tok.encode("ROMEO:")
    # chapter 8's decoders: with the KV cache equal to without, past the context (the window refills)
    g_cache = greedy(model, prompt, 30)
    g_plain = greedy(model, prompt, 30, use_cache=False)
    assert torch.equal(g_cache, g_plain) and len(g_cache) == len(prompt) + 30
    s = sample(model, prompt, 20, top_k=5, generator=torch.Generator().manual_seed(0))
    assert torch.equal(s, sample(model, prompt, 20, top_k=5, generator=torch.Generator().manual_seed(0)))
    out = model.generate(prompt[None], 10, generator=torch.Generator().manual_seed(0))
    assert out.shape == (1, len(prompt) + 10)
    beams = beam_search(model, prompt, 8, k=3)
    assert beams.best.generated.shape[-1] == 8


def test_modern_command_line_trains_resumes_and_samples(tmp_path, capsys):
    out = tmp_path / "speedrun.safetensors"
    small = ["--set", "d_model=32", "n_layers=1", "context_length=24", "batch_size=4", "eval_interval=0",
             "eval_batches=1"]
    assert main(["--config", "modern-muon", "--steps", "3", "--threads", "1", "--no-progress", "--no-score",
                 "--out", str(out), *small]) == 0
    text = capsys.readouterr().out
    assert "ModernGPT" in text and "optimizer=muon" in text and "from companion.decoding import sample" in text
    model, tok, extra = load_checkpoint(out)
    assert type(model).__name__ == "ModernGPT" and extra["train_state"]["train_config"]["optimizer"] == "muon"
    assert main(["--resume", str(out), "--steps", "4", "--threads", "1", "--no-progress", "--no-score",
                 "--out", str(out)]) == 0
    assert load_checkpoint(out)[2]["train_state"]["step"] == 4
    # the printed way to sample runs as printed
    snippet = [line[4:] for line in capsys.readouterr().out.splitlines() if line.startswith("    ")]
    namespace: dict = {}
    exec("\n".join(line.replace("300", "20") for line in snippet if not line.startswith("print")), namespace)
    assert namespace["out"].shape[-1] == len(tok.encode("ROMEO:")) + 20
    assert main(["--config", "tiny", "--optimizer", "muon", "--steps", "2", "--threads", "1", "--no-progress",
                 "--no-score", "--out", str(tmp_path / "g.safetensors"), "--set", "eval_interval=0"]) == 0
    assert load_checkpoint(tmp_path / "g.safetensors")[2]["train_state"]["train_config"]["optimizer"] == "muon"
    help_text = subprocess.run([sys.executable, "-m", "companion.train", "--help"], capture_output=True, text=True,
                               check=True).stdout
    assert "--optimizer {adamw,muon}" in help_text and "--config modern-muon --time 75" in help_text
