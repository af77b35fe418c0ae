"""Data parallelism on the CPU: ``torchrun --nproc_per_node 2 -m companion.train`` with gloo.

Two processes with ``b`` windows each train exactly like one process with ``2b``: each draws the
same global batch of ``2b`` window starts from its own copy of the seeded generator and keeps its
half (rows ``r*b`` to ``(r+1)*b - 1``), DistributedDataParallel averages the two half-batch
gradients (the mean of two means of ``b`` rows is the mean of ``2b`` rows), and the logged loss is
averaged the same way. Only the order of the sums differs, so the curves agree to float tolerance.
The two-process checkpoint then resumes in one process and continues that same curve.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from companion.checkpoint import load_checkpoint
from companion.data import load_corpus
from companion.model import GPT
from companion.train import Trainer, named_config

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.usefixtures("one_thread")

B, STEPS, SCHEDULE = 4, 6, 12  # per-process batch; the two-process run stops half-way through its schedule
CLOSE = dict(rtol=2e-5, atol=2e-5)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_process(corpus, steps: int, batch_size: int) -> Trainer:
    mcfg, tcfg = named_config("tiny", corpus.tokenizer.vocab_size, batch_size=batch_size, max_steps=SCHEDULE,
                              eval_interval=3, device="cpu", threads=1)
    torch.manual_seed(tcfg.seed)
    trainer = Trainer(GPT(mcfg), corpus, tcfg)
    trainer.run(steps, progress=False)
    return trainer


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "ddp.safetensors"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(free_port()), "-m", "companion.train", "--config", "tiny", "--device", "cpu",
           "--threads", "1", "--steps", str(STEPS), "--no-progress", "--no-score", "--out", str(out),
           "--set", f"batch_size={B}", f"max_steps={SCHEDULE}", "eval_interval=3"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


def test_two_processes_follow_one_process_with_the_doubled_batch(two_process_run):
    path, log = two_process_run
    corpus = load_corpus()
    one = one_process(corpus, STEPS, 2 * B)
    model, _, extra = load_checkpoint(path)
    two = extra["train_state"]["history"]
    assert two["steps"] == one.history.steps == list(range(1, STEPS + 1))
    torch.testing.assert_close(torch.tensor(two["train_loss"]), torch.tensor(one.history.train_loss), **CLOSE)
    torch.testing.assert_close(torch.tensor(two["val_loss"]), torch.tensor(one.history.val_loss), **CLOSE)
    torch.testing.assert_close(torch.tensor(two["eval_train_loss"]), torch.tensor(one.history.eval_train_loss), **CLOSE)
    for name, p in one.model.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], p, **CLOSE)
    # the log says how the global batch is made, once (only process 0 prints)
    assert f"batch: 2 processes x {B} windows of 32 characters = a global batch of {2 * B} windows" in log
    assert log.count("held-out plays: not scored") == 1 and log.count(f"step {STEPS}: train") == 1
    info = extra["info"]
    assert info["processes"] == 2 and info["global_batch"] == 2 * B and extra["train_state"]["world_size"] == 2


def test_two_process_checkpoint_continues_in_one_process(two_process_run):
    path, _ = two_process_run
    corpus = load_corpus()
    resumed = Trainer.resume(path, corpus, batch_size=2 * B)  # one process now: the same global batch
    assert resumed.world_size == 1 and resumed.step == STEPS
    resumed.run(progress=False)
    straight = one_process(corpus, SCHEDULE, 2 * B)
    assert resumed.history.steps == straight.history.steps
    torch.testing.assert_close(torch.tensor(resumed.history.train_loss), torch.tensor(straight.history.train_loss), **CLOSE)
    torch.testing.assert_close(torch.tensor(resumed.history.val_loss), torch.tensor(straight.history.val_loss), **CLOSE)
