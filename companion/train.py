"""Train the chapter 7 GPT (or chapter 13's ModernGPT) on Shakespeare: AdamW or Muon, warm-up and
cosine decay, clipping, evaluation, on a CPU, a GPU or several processes.

From a terminal::

    python -m companion.train --config small --steps 3000 --out runs/small.safetensors
    python -m companion.train --config tuned-150s --time 150 --threads 2
    python -m companion.train --resume runs/small.safetensors --steps 4000
    python -m companion.train --config modern-muon --time 75 --threads 1   # chapter 13's speedrun
    python -m companion.train --config gpu-180s --time 180 --device cuda
    torchrun --nproc_per_node 2 -m companion.train --config tiny --device cpu
    python -m companion.train --help

In a notebook: build a :class:`Trainer` and call :meth:`Trainer.run`. For a given seed, thread
count and number of steps, training on the CPU is deterministic, and a run resumed from a
checkpoint continues exactly as if it had never stopped (the model, the optimizer's moments, the
step and the random state of the batch sampler are all saved). A run limited by a time budget
instead of a step count schedules its learning rate by the fraction of the budget used, so it
depends on the machine's speed.

Devices (the appendix *Beyond the laptop*): ``TrainConfig.device`` (``--device``) is ``"auto"``
(CUDA, then MPS, then the CPU) or one of them; batches are gathered on that device, and on a GPU
the matrix products run in bfloat16 (float16 with a gradient scaler on GPUs without bfloat16) and
AdamW is the fused kernel. Under ``torchrun`` every process trains a copy of the model on its
share of each batch and the gradients are averaged (:mod:`companion.distributed`).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from companion import distributed
from companion.checkpoint import load_checkpoint, save_checkpoint
from companion.data import Corpus, load_corpus
from companion.model import GPT, GPTConfig
from companion.validation import check_bool, check_float, check_int


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model's shape is in :class:`~companion.model.GPTConfig`)."""

    batch_size: int = 12  # sequences per step and per process (global batch: times the processes)
    max_steps: int = 2000  # length of the schedule in steps (a time budget replaces it)
    learning_rate: float = 1e-3  # peak learning rate, reached at the end of warm-up
    min_lr: float = 1e-4  # learning rate at the end of the cosine decay
    warmup: float = 100  # warm-up length: steps if >= 1, else a fraction of the run
    weight_decay: float = 0.1  # AdamW decay, applied to weight matrices only
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # clip the global gradient norm to this (0 = no clipping)
    eval_interval: int = 250  # evaluate every this many steps (0 = only at the end); a time-limited
    # run evaluates as many times (max_steps // eval_interval), spread over its budget
    eval_batches: int = 20  # windows per evaluation: eval_batches * batch_size, from each text
    seed: int = 0
    threads: int | None = None  # torch.set_num_threads; None leaves it as it is
    device: str = "auto"  # "auto" (CUDA, then MPS, then CPU), "cpu", "cuda", "cuda:N" or "mps"
    precision: str = "auto"  # "auto", "float32", "bf16" or "fp16" (see companion.distributed.autocast_dtype)
    compile: bool = False  # torch.compile the model (worth it on a GPU; compiling takes a minute)
    optimizer: str = "adamw"  # "adamw", or "muon": Muon for the blocks' matrices, AdamW for the rest
    muon_lr: float = 0.02  # Muon's peak learning rate (follows the same schedule, scaled)

    def __post_init__(self):
        # every field checked here, so that a wrong value fails now, with its name, and not as a
        # NaN loss or a stack trace from inside the optimizer many steps later
        if self.precision not in distributed.PRECISIONS:
            raise ValueError(f"`precision` must be one of {distributed.PRECISIONS} (got {self.precision!r})")
        if not isinstance(self.device, str):
            raise TypeError(f"`device` must be a string such as 'auto', 'cpu', 'cuda' or 'mps' (got {self.device!r})")
        for name in ("batch_size", "max_steps", "eval_batches"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("eval_interval", self.eval_interval, minimum=0, hint="0 evaluates only at the end")
        check_int("seed", self.seed)
        if self.threads is not None:
            check_int("threads", self.threads, minimum=1, hint="or None to leave torch's setting as it is")
        check_float("learning_rate", self.learning_rate, low=0, low_open=True)
        check_float("min_lr", self.min_lr, low=0)
        if self.min_lr > self.learning_rate:
            raise ValueError(f"`min_lr` must be <= learning_rate (got min_lr={self.min_lr:g}, "
                             f"learning_rate={self.learning_rate:g}): the schedule decays to it")
        check_float("warmup", self.warmup, low=0, hint="a number of steps if >= 1, else a fraction of the run")
        check_float("weight_decay", self.weight_decay, low=0)
        check_float("beta1", self.beta1, low=0, high=1, high_open=True)
        check_float("beta2", self.beta2, low=0, high=1, high_open=True)
        check_float("grad_clip", self.grad_clip, low=0, hint="0 turns clipping off")
        check_bool("compile", self.compile)
        if self.optimizer not in ("adamw", "muon"):
            raise ValueError(f"`optimizer` must be 'adamw' or 'muon' (got {self.optimizer!r})")
        check_float("muon_lr", self.muon_lr, low=0, low_open=True)


#: Named configurations: (model, training). Vocabulary size is filled in from the tokenizer.
CONFIGS: dict[str, tuple[dict, dict]] = {
    # nanoGPT's README recipe for a CPU ("shakespeare_char" config with these overrides)
    "nanogpt-cpu": (dict(context_length=64, d_model=128, n_layers=4, n_heads=4, dropout=0.0, bias=False),
                    dict(batch_size=12, max_steps=2000, learning_rate=1e-3, min_lr=1e-4, warmup=100)),
    # tuned for 150 s on 2 cores (benchmarks/bench_training.py)
    "tuned-150s": (dict(context_length=128, d_model=128, n_layers=4, n_heads=4, dropout=0.0, bias=False),
                   dict(batch_size=16, max_steps=2000, learning_rate=6e-3, min_lr=1e-4, warmup=0.02)),
    # the shipped model: <= 10 MB, trained for 29 minutes on one thread (the command is in its checkpoint)
    "small": (dict(context_length=128, d_model=128, n_layers=4, n_heads=4, dropout=0.0, bias=False),
              dict(batch_size=16, max_steps=6000, learning_rate=3e-3, min_lr=1e-4, warmup=0.02, eval_interval=250)),
    # a few-second configuration for tests and the chapter's live demonstration
    "tiny": (dict(context_length=32, d_model=32, n_layers=2, n_heads=2, dropout=0.0),
             dict(batch_size=8, max_steps=50, learning_rate=3e-3, min_lr=3e-4, warmup=5, eval_interval=25, eval_batches=2)),
    # nanoGPT's GPU recipe, config/train_shakespeare_char.py: 6 layers of width 384, 256 characters
    # of context, 64 windows per step, dropout 0.2, 5000 steps at 1e-3 (about 3 minutes on an A100)
    "nanogpt-gpu": (dict(context_length=256, d_model=384, n_layers=6, n_heads=6, dropout=0.2, bias=False),
                    dict(batch_size=64, max_steps=5000, learning_rate=1e-3, min_lr=1e-4, warmup=100, eval_interval=250,
                         compile=True)),
    # chapter 13's speedrun (benchmarks/bench_training.py): chapter 13's decoder (RMSNorm, SwiGLU,
    # rotary positions; companion.modern.ModernGPT) at tuned-150s's shape, with Muon for the blocks'
    # matrices and AdamW for the embedding and the gains; meant for --time 75 (half nanoGPT's 150 s)
    "modern-muon": (dict(modern=True, context_length=128, d_model=128, n_layers=4, n_heads=4),
                    dict(batch_size=16, max_steps=2000, learning_rate=6e-3, min_lr=1e-4, warmup=0.02,
                         optimizer="muon", muon_lr=0.02)),
    # the same decoder with AdamW everywhere
    "modern-adamw": (dict(modern=True, context_length=128, d_model=128, n_layers=4, n_heads=4),
                     dict(batch_size=16, max_steps=2000, learning_rate=6e-3, min_lr=1e-4, warmup=0.02)),
    # chapter 7's GPT (tuned-150s) with Muon for its blocks' matrices
    "gpt-muon": (dict(context_length=128, d_model=128, n_layers=4, n_heads=4, dropout=0.0, bias=False),
                 dict(batch_size=16, max_steps=2000, learning_rate=6e-3, min_lr=1e-4, warmup=0.02,
                      optimizer="muon", muon_lr=0.02)),
    # designed (not yet measured) to beat nanoGPT's GPU recipe on this course's split in 180 s on one
    # GPU: the same model, the schedule spans the budget, twice the windows per step (a small model
    # leaves a GPU idle between kernels: more rows cost little time), a higher peak learning rate
    # for the larger batch, and half the dropout (this split has four times nanoGPT's text)
    "gpu-180s": (dict(context_length=256, d_model=384, n_layers=6, n_heads=6, dropout=0.1, bias=False),
                 dict(batch_size=128, max_steps=5000, learning_rate=2e-3, min_lr=1e-4, warmup=0.02, eval_interval=250,
                      compile=True)),
}

#: One line per named configuration, for ``--help`` and the book.
CONFIG_HELP: dict[str, str] = {
    "tiny": "2 layers of width 32, 50 steps: a few seconds, for tests and demonstrations",
    "nanogpt-cpu": "nanoGPT's CPU recipe (4 layers x 128, context 64, 2000 steps at 1e-3): the baseline",
    "tuned-150s": "4 layers x 128, context 128, tuned for --time 150 on 2 cores (1.63 nats/char)",
    "modern-muon": "chapter 13's speedrun: ModernGPT (RMSNorm, SwiGLU, RoPE) 4 x 128, context 128, Muon; --time 75",
    "modern-adamw": "ModernGPT 4 x 128, context 128, AdamW (the speedrun's control without Muon)",
    "gpt-muon": "chapter 7's GPT at tuned-150s's shape, Muon for the blocks' matrices",
    "small": "the shipped model's configuration (--time 1740 --threads 1: 29 minutes, 1.44 nats/char)",
    "nanogpt-gpu": "nanoGPT's GPU recipe (6 layers x 384, context 256, batch 64, 5000 steps): the GPU baseline",
    "gpu-180s": "6 layers x 384, batch 128, schedule over the budget: for --time 180 on one GPU (unmeasured)",
}


def named_config(name: str, vocab_size: int, **train_overrides) -> tuple[GPTConfig, TrainConfig]:
    """The model and training configurations called ``name`` in :data:`CONFIGS`."""
    if name not in CONFIGS:
        raise ValueError(f"`name` must be one of {sorted(CONFIGS)} (got {name!r})")
    model_kw, train_kw = CONFIGS[name]
    if model_kw.get("modern"):  # chapter 13's decoder (companion.modern)
        from companion.modern import ModernConfig
        model_cfg = ModernConfig(vocab_size=vocab_size, **{k: v for k, v in model_kw.items() if k != "modern"})
    else:
        model_cfg = GPTConfig(vocab_size=vocab_size, **model_kw)
    return model_cfg, TrainConfig(**{**train_kw, **train_overrides})


def build_model(config) -> nn.Module:
    """A fresh model of ``config``: a :class:`~companion.model.GPT` for a ``GPTConfig``, a
    :class:`~companion.modern.ModernGPT` (chapter 13) for a ``ModernConfig``."""
    from companion.modern import ModernConfig, ModernGPT
    if isinstance(config, ModernConfig):
        return ModernGPT(config)
    if isinstance(config, GPTConfig):
        return GPT(config)
    raise TypeError(f"`config` must be a GPTConfig or a ModernConfig (got {type(config).__name__})")


def learning_rate(progress: float, cfg: TrainConfig, total_steps: int | None = None) -> float:
    """Linear warm-up to ``cfg.learning_rate``, then cosine decay to ``cfg.min_lr``.

    ``progress`` is the fraction of the run done, in [0, 1]; a warm-up given in steps is converted
    with ``total_steps``.
    """
    check_float("progress", progress, low=0.0, hint="the fraction of the run done, 0 at the start and 1 at the end")
    if not isinstance(cfg, TrainConfig):
        raise TypeError(f"`cfg` must be a companion.train.TrainConfig (got {type(cfg).__name__})")
    warm = cfg.warmup if cfg.warmup < 1 else cfg.warmup / max(total_steps or cfg.max_steps, 1)
    if progress < warm:
        return cfg.learning_rate * (progress + 1e-9) / warm
    t = min(1.0, (progress - warm) / max(1.0 - warm, 1e-9))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * t)) * (cfg.learning_rate - cfg.min_lr)


def make_optimizer(model: GPT, cfg: TrainConfig, device_type: str | None = None) -> torch.optim.AdamW:
    """AdamW with weight decay on the weight matrices (and embeddings) only.

    Biases and norm gains are not decayed: pulling a LayerNorm gain towards 0 would shrink the
    signal, not regularize the model. On CUDA the update is torch's fused kernel (a few launches
    for all parameters); on the CPU the plain loop, the fastest there for these small models; on
    other devices torch's default.
    ``device_type`` defaults to the device of the model's parameters.
    """
    params = list(dict((id(p), p) for p in model.parameters()).values())  # the tied matrix once
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    device_type = device_type or params[0].device.type
    fast = {"cuda": dict(fused=True), "cpu": dict(fused=False, foreach=False)}.get(device_type, {})
    if cfg.optimizer == "muon":  # the blocks' matrices to Muon (chapter 13), the rest to AdamW
        from companion.modern import Muon, MuonWithAdamW
        blocks = {id(p) for p in model.blocks.parameters() if p.ndim == 2}
        matrices = [p for p in params if id(p) in blocks]
        rest = [p for p in params if id(p) not in blocks]
        adamw = torch.optim.AdamW([{"params": [p for p in rest if p.ndim >= 2], "weight_decay": cfg.weight_decay},
                                   {"params": [p for p in rest if p.ndim < 2], "weight_decay": 0.0}],
                                  lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), **fast)
        muon = Muon(matrices, lr=cfg.muon_lr)
        for group in muon.param_groups:
            group["lr_scale"] = cfg.muon_lr / cfg.learning_rate
        return MuonWithAdamW(muon, adamw)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), **fast)


def windows(ids: torch.Tensor, starts: torch.Tensor, context_length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The windows of ``ids`` that begin at ``starts``, and the same windows shifted by one
    character (the targets), gathered on ``ids``'s device.

    ``starts`` is drawn on the CPU (so a seed gives the same windows on every device) and copied
    without waiting: on CUDA from pinned memory with ``non_blocking``, so that the CPU goes on
    queuing work while the GPU computes. The same windows as :func:`companion.data.get_batch`.

    Shapes: ids (N,), starts (B,) -> x (B, T), y (B, T), with y[:, t] = x[:, t + 1] inside the text.
    """
    if starts.numel() and starts.device.type == "cpu" and (int(starts.min()) < 0
                                                            or int(starts.max()) + context_length >= len(ids)):
        raise ValueError(f"`starts` must leave a window of context_length={context_length} and its next character "
                         f"inside the {len(ids)} ids: each in [0, {len(ids) - context_length - 1}] (got "
                         f"{int(starts.min())} to {int(starts.max())})")
    if ids.device.type == "cuda":
        starts = starts.pin_memory()
    starts = starts.to(ids.device, non_blocking=True)  # (B,)
    idx = starts[:, None] + torch.arange(context_length, device=ids.device)  # (B, 1) + (T,) -> (B, T)
    return ids[idx], ids[idx + 1]


def _autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


@torch.no_grad()
def estimate_loss(model: GPT, ids: torch.Tensor, batches: int, batch_size: int, seed: int = 1234, *,
                  chunk: int | None = None, amp_dtype: torch.dtype | None = None) -> float:
    """Mean loss (nats per token) on ``batches * batch_size`` random windows of ``ids``; the same
    windows on every call (a fresh generator seeded with ``seed``), on the model's device.

    ``chunk`` rows at a time (default: a whole batch); ``amp_dtype``: autocast's dtype, None for
    float32. The result is read back from the device once, at the end.

    Shapes: ids (N,) -> float.
    """
    T = model.config.context_length
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1 or len(ids) <= T:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"`ids` must be a 1-D tensor longer than context_length={T} (got {got})")
    check_int("batches", batches, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    if chunk is not None:
        check_int("chunk", chunk, minimum=1)
    chunk = chunk or batch_size
    if batch_size % chunk:
        raise ValueError(f"`chunk` must divide `batch_size` (got chunk={chunk}, batch_size={batch_size})")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    ids = ids.to(device)
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(batches):
        starts = torch.randint(len(ids) - T, (batch_size,), generator=g)  # (batch_size,)
        for part in starts.split(chunk):  # equal parts: the mean of their means is the mean
            x, y = windows(ids, part, T)
            with _autocast(device, amp_dtype):
                losses.append(model(x, y)[1].float())
    model.train(was_training)
    values = torch.stack(losses).tolist()  # one wait for the device
    return sum(values) / len(values)


@torch.no_grad()
def evaluate_text(model: GPT, ids: torch.Tensor, batch_size: int = 64) -> float:
    """Loss in nats per character over a whole text: every character after the first is predicted
    once, from non-overlapping windows of ``context_length`` characters, on the model's device.

    Shapes: ids (N,) -> float.
    """
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1 or len(ids) < 2:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"`ids` must be a 1-D tensor of at least 2 token ids (got {got})")
    was_training = model.training
    model.eval()
    ids = ids.to(next(model.parameters()).device)
    T = model.config.context_length
    n = (len(ids) - 1) // T
    x = ids[: n * T].view(n, T)  # (n, T)
    y = ids[1 : n * T + 1].view(n, T)  # (n, T) the next character of each
    ce = torch.nn.functional.cross_entropy
    sums = []
    for i in range(0, n, batch_size):
        logits, _ = model(x[i : i + batch_size])
        sums.append(ce(logits.flatten(0, 1).float(), y[i : i + batch_size].flatten(), reduction="sum"))
    rest = len(ids) - 1 - n * T  # the last partial window
    if rest > 0:
        logits, _ = model(ids[n * T : n * T + rest][None])
        sums.append(ce(logits[0].float(), ids[n * T + 1 :], reduction="sum"))
    model.train(was_training)
    return sum(torch.stack(sums).tolist()) / (len(ids) - 1)


@dataclass
class History:
    """What a training run recorded.

    ``train_loss``: the loss of each step's own batch (raw, noisy: for plotting). At each
    evaluation (``eval_steps``): ``eval_train_loss`` and ``val_loss``, the mean loss on the same
    number of random windows of the training text and of the held-out plays, drawn the same way,
    so the two are comparable.
    """

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    eval_train_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0  # over all processes


class Trainer:
    """Owns a model, its optimizer, the batch sampler's random state and the history of one run.

    The model is moved to ``cfg.device``. Inside a process group (``torchrun``) every process
    builds its own Trainer: the model is wrapped in ``DistributedDataParallel``, each process
    trains on its rows of every batch (:meth:`next_batch`), and only process 0 evaluates.

    Shapes: batches are (batch_size, context_length) windows of ``corpus.train_ids`` per process;
    the global batch is ``batch_size * world_size`` windows.
    """

    def __init__(self, model: GPT, corpus: Corpus, cfg: TrainConfig):
        from companion.modern import ModernGPT
        if not isinstance(model, (GPT, ModernGPT)):
            raise TypeError(f"`model` must be a companion.model.GPT or companion.modern.ModernGPT "
                            f"(got {type(model).__name__})")
        if not isinstance(corpus, Corpus):
            raise TypeError(f"`corpus` must be a companion.data.Corpus, e.g. load_corpus() (got {type(corpus).__name__})")
        if not isinstance(cfg, TrainConfig):
            raise TypeError(f"`cfg` must be a TrainConfig (got {type(cfg).__name__})")
        if model.config.vocab_size != corpus.tokenizer.vocab_size:
            raise ValueError(f"the model's vocab_size={model.config.vocab_size} does not match the tokenizer's "
                             f"{corpus.tokenizer.vocab_size}")
        self.model, self.corpus, self.cfg = model, corpus, cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.rank, self.world_size = distributed.rank(), distributed.world_size()
        self.device = distributed.resolve_device(cfg.device)
        model.to(self.device)
        self.amp_dtype = distributed.autocast_dtype(self.device.type, cfg.precision)
        # float16 gradients can underflow to 0: the scaler multiplies the loss first (off otherwise)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.amp_dtype == torch.float16)
        self.optimizer = make_optimizer(model, cfg, self.device.type)
        self.train_ids = corpus.train_ids.to(self.device)  # (N_train,) on the device, once
        self.val_ids = corpus.val_ids.to(self.device)
        self.batch_rng = torch.Generator().manual_seed(cfg.seed)  # on the CPU: the same on every device
        # what train_step calls: the model, compiled and/or wrapped so that backward() averages
        # the gradients of all processes
        self.train_model = torch.compile(model) if cfg.compile else model
        if self.world_size > 1:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.train_model, device_ids=ids)
        self.compile_seconds = 0.0
        self.step = 0
        self.history = History()
        # reading a loss back waits for the GPU: read them in groups there
        self._read_every = 1 if self.device.type == "cpu" else 16
        self._bar_in_seconds = False  # set by run()

    @property
    def global_batch(self) -> int:
        """Windows per step over all processes: ``batch_size * world_size``."""
        return self.cfg.batch_size * self.world_size

    def autocast(self):
        """The mixed-precision context of this trainer (does nothing in float32)."""
        return _autocast(self.device, self.amp_dtype)

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """This process's rows of the next global batch, on the model's device.

        Every process draws the same ``global_batch`` window starts from its own copy of the
        seeded generator, and process ``r`` keeps rows ``r*b`` to ``(r+1)*b - 1``: together the
        processes train on exactly the batch that one process with ``global_batch`` windows would,
        and the generator's state is the same everywhere (a checkpoint resumes with any number of
        processes). In one process: the windows of :func:`companion.data.get_batch`.

        Shapes: -> x, y (batch_size, context_length).
        """
        b, T = self.cfg.batch_size, self.model.config.context_length
        starts = torch.randint(len(self.train_ids) - T, (self.global_batch,), generator=self.batch_rng)  # (G,)
        return windows(self.train_ids, starts[self.rank * b : (self.rank + 1) * b], T)  # (b, T) each

    def train_step(self, lr: float) -> torch.Tensor:
        """One optimizer step on one fresh batch; returns its mean loss.

        The loss stays on the device: reading it (.item()) makes the CPU
        wait for the GPU, so run() reads the losses in groups.
        """
        x, y = self.next_batch()  # (b, T) each, on the model's device
        for group in self.optimizer.param_groups:
            # Muon's groups have their own peak, on the same schedule
            group["lr"] = lr * group.get("lr_scale", 1.0)
        with self.autocast():  # bf16 or fp16 matrix products on a GPU
            _, loss = self.train_model(x, y)  # mean over this process's rows
        self.optimizer.zero_grad(set_to_none=True)
        # with several processes, backward() also averages their gradients
        self.scaler.scale(loss).backward()  # fp16 only: scaled, no underflow
        if self.cfg.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(),
                                     self.cfg.grad_clip)
        self.scaler.step(self.optimizer)  # fp16 only: skipped on overflow
        self.scaler.update()
        self.step += 1
        return distributed.all_mean(loss.detach())  # over all processes

    def estimate_losses(self) -> tuple[float, float]:
        """``(train, held_out)``: the mean loss on ``eval_batches`` batches of ``global_batch``
        random windows of the training text and of the held-out plays, drawn the same way (the same
        seed, so the same windows at every evaluation), in the training precision."""
        kw = dict(batches=self.cfg.eval_batches, batch_size=self.global_batch, chunk=self.cfg.batch_size,
                  amp_dtype=self.amp_dtype)
        return estimate_loss(self.model, self.train_ids, **kw), estimate_loss(self.model, self.val_ids, **kw)

    def evaluate(self) -> float:
        """The held-out estimate of :meth:`estimate_losses`."""
        return self.estimate_losses()[1]

    def _warm_up(self) -> None:
        """Compile before the clock starts: one forward and backward pass on the first windows of
        the text, gradients dropped, the batch sampler untouched."""
        start = time.perf_counter()
        T = self.model.config.context_length
        x, y = windows(self.train_ids, torch.arange(self.cfg.batch_size) * T, T)
        with self.autocast():
            _, loss = self.train_model(x, y)
        loss.backward()
        self.optimizer.zero_grad(set_to_none=True)
        self.compile_seconds += time.perf_counter() - start

    def _record(self, pending: list, bar) -> None:
        """Read the pending losses back from the device (one wait) into the history."""
        if not pending:
            return
        h = self.history
        for (step, lr, _), loss in zip(pending, torch.stack([p[2] for p in pending]).float().tolist()):
            if not math.isfinite(loss):
                raise FloatingPointError(f"the training loss became {loss} at step {step}; lower the learning rate")
            h.steps.append(step), h.train_loss.append(loss), h.lr.append(lr)
        # a bar in steps shows the step itself; one in seconds (a time budget) needs it in the postfix.
        # Short, so that a notebook's stored bar fits the book's 78 columns.
        step = f"step {pending[-1][0]}, batch " if self._bar_in_seconds else ""
        bar.set_postfix_str(f"{step}loss {h.train_loss[-1]:.3f}", refresh=False)
        pending.clear()

    def _evaluate_and_log(self, bar=None) -> None:
        train, val = self.estimate_losses()
        h = self.history
        h.eval_steps.append(self.step), h.eval_train_loss.append(train), h.val_loss.append(val)
        line = f"step {self.step}: train {train:.4f}, held-out {val:.4f} nats/char"
        (bar.write if bar is not None else tqdm.write)(line)

    def run(self, steps: int | None = None, *, time_budget: float | None = None, progress: bool = True,
            time_schedule: bool = True, on_eval=None) -> History:
        """Train until step ``steps`` (default ``cfg.max_steps``) or for ``time_budget`` seconds.

        With a step target the learning rate follows the schedule of ``cfg.max_steps`` steps, so a
        run can stop early and be resumed later; it evaluates every ``cfg.eval_interval`` steps.
        With a time budget the schedule runs over the budget (progress = seconds used / budget),
        the run ends when the budget is spent, and it evaluates ``max_steps // eval_interval``
        times, evenly over the budget; with ``time_schedule=False`` it keeps the step schedule and
        stops at whichever limit comes first (what a step-scheduled recipe achieves in that time).
        Compiling (``cfg.compile``) happens before the clock starts. Several processes agree on
        process 0's clock; only process 0 evaluates, logs and calls ``on_eval(trainer)``.
        """
        if steps is not None:
            check_int("steps", steps, minimum=0)
        if time_budget is not None:
            check_float("time_budget", time_budget, low=0, low_open=True, hint="seconds")
        cfg, h = self.cfg, self.history
        target = cfg.max_steps if steps is None else steps
        if time_budget is None and target <= self.step:
            return h
        timed = time_budget is not None and time_schedule
        n_evals = cfg.max_steps // cfg.eval_interval if cfg.eval_interval else 0
        main = self.rank == 0
        self.model.train()
        if cfg.compile and self.compile_seconds == 0.0:
            self._warm_up()
        self._bar_in_seconds = time_budget is not None
        if time_budget is not None:  # a bar in seconds: its total is the budget
            bar = tqdm(total=time_budget, disable=not progress or not main, desc="training", mininterval=1.0,
                       dynamic_ncols=True, file=sys.stderr, bar_format="{desc}: {percentage:3.0f}%|{bar}| "
                       "{n:.0f}/{total:.0f} s{postfix}")
        else:
            bar = tqdm(total=target, initial=self.step, disable=not progress or not main, desc="training",
                       unit="step", mininterval=1.0, dynamic_ncols=True, file=sys.stderr)
        start = time.perf_counter()
        tokens_per_step = self.global_batch * self.model.config.context_length
        pending: list = []  # (step, lr, loss on the device) not read back yet
        done_evals = 0
        while True:
            used = distributed.agree(time.perf_counter() - start) if time_budget is not None else 0.0
            if time_budget is not None and used >= time_budget:
                break
            if timed:
                lr = learning_rate(used / time_budget, cfg, total_steps=None if cfg.warmup < 1 else cfg.max_steps)
            else:
                if self.step >= target:
                    break
                lr = learning_rate(min(1.0, self.step / cfg.max_steps), cfg)
            pending.append((self.step + 1, lr, self.train_step(lr)))
            h.tokens += tokens_per_step
            if timed:
                now = (time.perf_counter() - start) / time_budget
                due = done_evals + 1 < n_evals and now >= (done_evals + 1) / n_evals
                bar.update(min(now, 1.0) * time_budget - bar.n)
            else:
                due = bool(cfg.eval_interval) and self.step % cfg.eval_interval == 0
                bar.update(1)
            if due or len(pending) >= self._read_every:
                self._record(pending, bar)
            if due and main:
                done_evals += 1
                self._evaluate_and_log(bar)
                if on_eval:
                    on_eval(self)
        self._record(pending, bar)
        h.seconds += time.perf_counter() - start
        bar.close()
        finished = time_budget is not None or self.step >= cfg.max_steps  # a paused run evaluates when it ends
        if main and finished and (not h.eval_steps or h.eval_steps[-1] != self.step):
            self._evaluate_and_log()
        return h

    # --- checkpoints -------------------------------------------------------------------------
    def save(self, path, *, resumable: bool = True, info: dict | None = None) -> Path:
        """Write the model (and, if ``resumable``, everything needed to continue the run). Tensors
        are copied to the CPU, so a checkpoint written on a GPU loads anywhere. In a multi-process
        run, call it on process 0 only (every process holds the same state)."""
        if not resumable:
            return save_checkpoint(path, self.model, self.corpus.tokenizer, info=info)
        tensors = {"rng.batch": self.batch_rng.get_state(), "rng.torch": torch.get_rng_state()}
        groups: dict | list = {}
        for prefix, part in _optimizer_parts(self.optimizer).items():  # AdamW, or Muon and AdamW
            opt = part.state_dict()
            for i, state in opt["state"].items():
                for k, v in state.items():
                    tensors[f"{prefix}{i}.{k}"] = v if isinstance(v, torch.Tensor) else torch.tensor(v)
            groups[prefix] = [{k: v for k, v in g.items() if k != "params"} for g in opt["param_groups"]]
        groups = groups[""] if "" in groups else {k.rstrip("."): v for k, v in groups.items()}
        train_state = {"step": self.step, "train_config": asdict(self.cfg), "param_groups": groups,
                       "history": asdict(self.history), "world_size": self.world_size}
        return save_checkpoint(path, self.model, self.corpus.tokenizer, train_state=train_state,
                               optimizer_tensors=tensors, info=info)

    @classmethod
    def resume(cls, path, corpus: Corpus | None = None, **train_overrides) -> "Trainer":
        """Rebuild a trainer from a resumable checkpoint written by :meth:`save`, on this machine's
        device (``device=...`` overrides) and with any number of processes."""
        model, tokenizer, extra = load_checkpoint(path)
        state = extra["train_state"]
        if state is None:
            raise ValueError(f"checkpoint {str(path)!r} holds only weights; it was not saved with resumable=True")
        corpus = corpus or load_corpus()
        if tokenizer.chars != corpus.tokenizer.chars:
            raise ValueError(f"checkpoint {str(path)!r} was made with another tokenizer than this corpus's")
        cfg = replace(_train_config(state["train_config"]), **train_overrides)
        trainer = cls(model, corpus, cfg)
        tensors = extra["optimizer"]
        parts = _optimizer_parts(trainer.optimizer)
        saved_groups = state["param_groups"]
        if isinstance(saved_groups, dict) != ("" not in parts):
            raise ValueError(f"checkpoint {str(path)!r} holds the state of another optimizer than "
                             f"optimizer={cfg.optimizer!r}; resume without changing `optimizer`")
        for prefix, part in parts.items():
            opt_state = {}
            for name, v in tensors.items():
                if name.startswith("rng.") or not name.startswith(prefix):
                    continue
                i, k = name[len(prefix):].split(".", 1)
                opt_state.setdefault(int(i), {})[k] = v
            groups = part.state_dict()["param_groups"]
            mine = saved_groups if not prefix else saved_groups[prefix.rstrip(".")]
            for g, saved in zip(groups, mine):
                saved = {k: v for k, v in saved.items() if k not in ("fused", "foreach")}  # this device's choice
                g.update({k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
            part.load_state_dict({"state": opt_state, "param_groups": groups})  # moved to the device
        trainer.batch_rng.set_state(tensors["rng.batch"])
        torch.set_rng_state(tensors["rng.torch"])
        trainer.step = state["step"]
        trainer.history = History(**state["history"])
        return trainer


def _optimizer_parts(optimizer) -> dict:
    """``{prefix: torch optimizer}``: ``{"": AdamW}``, or Muon's and AdamW's halves of a
    :class:`companion.modern.MuonWithAdamW` under ``"muon."`` and ``"adamw."`` (checkpoint names)."""
    if hasattr(optimizer, "muon") and hasattr(optimizer, "adamw"):
        return {"muon.": optimizer.muon, "adamw.": optimizer.adamw}
    return {"": optimizer}


def _train_config(saved: dict) -> TrainConfig:
    """A TrainConfig from a checkpoint's dict; older checkpoints had ``bf16: bool``."""
    saved = dict(saved)
    if "bf16" in saved:
        saved["precision"] = "bf16" if saved.pop("bf16") else "auto"
    return TrainConfig(**saved)


def plot_losses(history: History, ax=None, title: str | None = None):
    """Training loss (each step's batch, and smoothed), the training-text and held-out estimates at
    each evaluation, against the step. Returns the axes."""
    import matplotlib.pyplot as plt

    if not all(hasattr(history, a) for a in ("steps", "train_loss", "eval_steps", "eval_train_loss")):
        raise TypeError(f"`history` must be the History that Trainer.run returns (got {type(history).__name__})")
    if ax is None:
        _, ax = plt.subplots()
    ax.plot(history.steps, history.train_loss, color="tab:blue", alpha=0.25, lw=0.8, label="training batch")
    k = max(1, len(history.train_loss) // 50)
    if len(history.train_loss) >= k:
        smooth = torch.tensor(history.train_loss).unfold(0, k, 1).mean(1).tolist()
        ax.plot(history.steps[k - 1 :], smooth, color="tab:blue", label=f"training batches (mean of {k})")
    if len(history.eval_train_loss) == len(history.eval_steps) and history.eval_train_loss:
        ax.plot(history.eval_steps, history.eval_train_loss, "s--", color="tab:blue", mfc="white",
                label="training text (estimate)")
    ax.plot(history.eval_steps, history.val_loss, "o-", color="tab:orange", label="held-out plays (estimate)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per character)")
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return ax


# --------------------------------------------------------------------------- command line

def _parse_set(items: list[str]) -> tuple[dict, dict]:
    from companion.modern import ModernConfig
    model_names = {f.name for f in fields(GPTConfig)} | {f.name for f in fields(ModernConfig)}
    train_types = {f.name: f.type for f in fields(TrainConfig)}
    model_kw, train_kw = {}, {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or (key not in model_names and key not in train_types):
            raise SystemExit(f"--set expects KEY=VALUE with KEY a field of GPTConfig, ModernConfig or TrainConfig "
                             f"(got {item!r})")
        try:
            value = json.loads(raw) if raw not in ("True", "False", "None") else {"True": True, "False": False, "None": None}[raw]
        except json.JSONDecodeError:
            value = raw  # a bare string, e.g. --set precision=bf16
        (model_kw if key in model_names else train_kw)[key] = value
    return model_kw, train_kw


def _saved_train_config(path: Path) -> TrainConfig | None:
    """The training configuration stored in a checkpoint, read from its metadata only."""
    try:
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        return _train_config(json.loads(meta["train_state"])["train_config"])
    except Exception:  # noqa: BLE001 - Trainer.resume reports a bad file properly
        return None


def _epilog() -> str:
    names = "\n".join(f"  {name:<12} {CONFIG_HELP[name]}" for name in CONFIGS)
    return f"""named configurations (--config):
{names}

examples:
  python -m companion.train                       # tiny, a few seconds
  python -m companion.train --config small --time 1740 --threads 1 --out runs/small.safetensors
      (the shipped model's recipe; the shipped file itself is companion/assets/shakespeare_char.safetensors)
  python -m companion.train --resume runs/small.safetensors --steps 8000
  python -m companion.train --config modern-muon --time 75 --threads 1 --out runs/speedrun.safetensors
      (chapter 13's laptop speedrun: today's decoder with Muon; --time counts wall-clock seconds, and
      benchmarks/bench_training.py compares it with nanoGPT's recipe, interleaved over seeds)
  python -m companion.train --config modern-adamw --optimizer muon --set n_kv_heads=2 --time 75
      (any configuration with Muon; --set changes the model's or the training's fields)
  python -m companion.train --config gpu-180s --time 180 --device cuda --out runs/gpu.safetensors
  torchrun --nproc_per_node 2 -m companion.train --config tiny --device cpu --threads 1
      (two processes, each with its share of every batch: the global batch is twice --set batch_size)
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m companion.train",
        description="Train a character-level model on Shakespeare's plays and write a checkpoint: chapter 7's GPT, "
                    "or chapter 13's decoder (companion.modern.ModernGPT: the modern-* configurations) with AdamW "
                    "or Muon.",
        epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", default="tiny", choices=list(CONFIGS), help="a named configuration, listed below (default: tiny)")
    src.add_argument("--config-file", type=Path, help='a JSON file {"model": {...GPTConfig}, "train": {...TrainConfig}}')
    src.add_argument("--resume", type=Path, help="continue the run saved in this resumable checkpoint")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override fields, e.g. --set d_model=256 learning_rate=2e-3")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--steps", type=int, help="train until this step (default: the configuration's max_steps)")
    limit.add_argument("--time", type=float, help="train for this many seconds; the learning-rate schedule spans the budget")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda", "mps"], help="where to train (default: the configuration's, auto = CUDA, then MPS, then CPU)")
    parser.add_argument("--precision", choices=list(distributed.PRECISIONS), help="matrix products: auto = bf16 on recent GPUs, fp16 on older ones, float32 on CPU and MPS")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None, help="torch.compile the model (default: the configuration's)")
    parser.add_argument("--optimizer", choices=["adamw", "muon"], help="adamw, or muon: Muon (chapter 13) for the "
                        "blocks' weight matrices and AdamW for embeddings, head and gains (default: the configuration's)")
    parser.add_argument("--threads", type=int, help="torch threads per process (default: PyTorch's choice)")
    parser.add_argument("--seed", type=int, help="random seed (default: the configuration's)")
    parser.add_argument("--out", type=Path, default=Path("runs/gpt.safetensors"), help="checkpoint to write (default: runs/gpt.safetensors)")
    parser.add_argument("--weights-only", action="store_true", help="write only the weights (small file that cannot be resumed)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--no-score", action="store_true", help="skip the final score on the whole held-out text (quicker; "
                        "the checkpoint then records only the last estimate)")
    return parser


def describe(trainer: Trainer, steps: int | None = None, time_budget: float | None = None) -> str:
    """What a run is about to do, in a few lines (the command line prints it first)."""
    m, cfg = trainer.model.config, trainer.cfg
    threads = torch.get_num_threads()
    procs = trainer.world_size
    per = f"{cfg.batch_size} windows of {m.context_length} characters"
    if procs > 1:
        batch = (f"batch: {procs} processes x {per} = a global batch of {trainer.global_batch} windows "
                 f"({trainer.global_batch * m.context_length:,} characters) per step")
    else:
        batch = f"batch: {per} ({cfg.batch_size * m.context_length:,} characters) per step"
    precision = {None: "float32", torch.bfloat16: "bfloat16 autocast", torch.float16: "float16 autocast + gradient scaler"}[trainer.amp_dtype]
    where = f"device: {trainer.device}, {precision}" + (f", {threads} thread{'s' * (threads > 1)}" if trainer.device.type == "cpu" else "")
    where += f", {procs} processes" if procs > 1 else ""
    where += ", compiled" if cfg.compile else ""
    n_evals = cfg.max_steps // cfg.eval_interval if cfg.eval_interval else 0
    windows_each = f"{cfg.eval_batches} x {trainer.global_batch} windows of the training text and of the held-out plays"
    if time_budget is not None:
        warm = cfg.warmup if cfg.warmup < 1 else cfg.warmup / cfg.max_steps
        schedule = (f"schedule: a {time_budget:g} s budget, starting at step {trainer.step}; the learning rate follows "
                    f"the fraction of the budget used (warm-up over the first {warm:.0%} to {cfg.learning_rate:g}, "
                    f"cosine to {cfg.min_lr:g}); the number of steps is whatever fits")
        evals = f"evaluation: {max(n_evals, 1)} times over the budget, each on {windows_each}"
    else:
        end = cfg.max_steps if steps is None else steps
        warm = f"{cfg.warmup:g} steps" if cfg.warmup >= 1 else f"{cfg.warmup:.0%} of the steps"
        schedule = (f"schedule: steps {trainer.step} to {end} of a {cfg.max_steps}-step schedule (warm-up {warm} to "
                    f"{cfg.learning_rate:g}, cosine to {cfg.min_lr:g})")
        evals = (f"evaluation: every {cfg.eval_interval} steps and at the end" if cfg.eval_interval else "evaluation: at the end") + f", on {windows_each}"
    other = (f"other settings: weight_decay={cfg.weight_decay:g}, betas=({cfg.beta1:g}, {cfg.beta2:g}), "
             f"grad_clip={cfg.grad_clip:g}, dropout={getattr(m, 'dropout', 0.0):g}, seed={cfg.seed}")
    if cfg.optimizer == "muon":
        other += f", optimizer=muon (Muon at peak {cfg.muon_lr:g} for the blocks' matrices, AdamW for the rest)"
    kind = "ModernGPT (RMSNorm, SwiGLU, rotary positions), " if not hasattr(m, "dropout") else ""
    model = (f"model: {kind}{m.n_layers} layers, d_model {m.d_model}, {m.n_heads} heads, context {m.context_length}, "
             f"{trainer.model.num_parameters():,} parameters")
    return "\n".join([model, where, batch, schedule, evals, other])


def next_steps(path: Path, resumable: bool) -> str:
    """What to do with a freshly written checkpoint (printed at the end of a run)."""
    path = Path(path).resolve()
    lines = ["next:"]
    if resumable:
        lines.append(f"  train on: python -m companion.train --resume {path} --steps N")
    lines += [
        "  sample from it, in Python:",
        "    from companion.checkpoint import load_checkpoint",
        "    import torch",
        "    from companion.decoding import sample",
        f"    model, tok, _ = load_checkpoint({str(path)!r})",
        '    out = sample(model, tok.encode("ROMEO:"), 300, top_k=10, generator=torch.Generator().manual_seed(0))',
        "    print(tok.decode(out))",
        f"  chapter 8 on this model: in its set-up cell, replace shipped_model_path() with {str(path)!r}",
    ]
    return "\n".join(lines)


class _Refused(Exception):
    """A command-line argument that cannot work, found before training: printed as one line."""


def _check_args(args) -> None:
    """Everything about the arguments that can be checked before the (long) run starts."""
    from companion.checkpoint import check_output_path

    try:
        check_output_path(args.out, "--out")
    except (TypeError, ValueError) as exc:
        raise _Refused(str(exc).replace("`--out`", "--out")) from None
    for flag, value, low in (("--steps", args.steps, 1), ("--threads", args.threads, 1), ("--seed", args.seed, 0)):
        if value is not None and value < low:
            raise _Refused(f"{flag} must be an integer >= {low} (got {value})")
    if args.time is not None and not 0 < args.time < math.inf:
        raise _Refused(f"--time must be a number of seconds > 0 (got {args.time:g})")
    for flag, path in (("--resume", args.resume), ("--config-file", args.config_file)):
        if path is not None and not path.is_file():
            raise _Refused(f"{flag} {path}: no such file")
    if args.config_file is not None:
        try:
            spec = json.loads(args.config_file.read_text())
        except (ValueError, UnicodeDecodeError) as exc:
            raise _Refused(f"--config-file {args.config_file} is not JSON ({exc})") from None
        if not isinstance(spec, dict) or set(spec) - {"model", "train"} \
                or not all(isinstance(v, dict) for v in spec.values()):
            raise _Refused(f'--config-file {args.config_file} must hold {{"model": {{...}}, "train": {{...}}}}')


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args, argv)
    except _Refused as exc:  # one line on stderr, exit status 1, no traceback
        raise SystemExit(f"python -m companion.train: error: {exc}") from None


def _main(args, argv) -> int:
    _check_args(args)
    model_kw, train_kw = _parse_set(args.set)
    for key in ("threads", "seed", "device", "precision", "compile", "optimizer"):
        if getattr(args, key) is not None:
            train_kw[key] = getattr(args, key)
    if args.resume and model_kw:
        raise SystemExit("--set cannot change the model of a resumed run")
    # the device decides how processes talk (NCCL or gloo): known before joining the group
    device = train_kw.get("device")
    if device is None and args.resume:
        saved = _saved_train_config(args.resume)
        device = saved.device if saved else None
    elif device is None and args.config_file:
        device = json.loads(args.config_file.read_text()).get("train", {}).get("device")
    try:
        distributed.init_from_env(device or "auto")
    except (TypeError, ValueError) as exc:  # a device this machine does not have
        raise _Refused(str(exc).replace("`device` is", "--device is").replace("device='auto'", "--device auto")
                       .replace("'cpu'", "cpu")) from None
    try:
        code = _run(args, argv, model_kw, train_kw)
    except BaseException:
        if distributed.is_distributed():  # no barrier: the other processes may never reach it
            torch.distributed.destroy_process_group()
        raise
    distributed.shutdown()
    return code


def _run(args, argv, model_kw: dict, train_kw: dict) -> int:
    main_process = distributed.rank() == 0
    say = print if main_process else (lambda *a, **k: None)
    corpus = load_corpus()
    try:
        trainer = _trainer(args, corpus, model_kw, train_kw)
    except (TypeError, ValueError, FileNotFoundError) as exc:  # a bad --set, --config-file or --resume
        raise _Refused(str(exc)) from None
    say(describe(trainer, args.steps, args.time), flush=True)
    return _finish(args, argv, trainer, corpus, say, main_process)


def _trainer(args, corpus, model_kw: dict, train_kw: dict) -> Trainer:
    """The Trainer the arguments ask for: resumed, from a configuration file or a named one."""
    if args.resume:
        return Trainer.resume(args.resume, corpus, **train_kw)
    else:
        if args.config_file:
            spec = json.loads(args.config_file.read_text())
            model_spec = {"vocab_size": corpus.tokenizer.vocab_size, **spec.get("model", {}), **model_kw}
            if model_spec.pop("modern", False):  # chapter 13's decoder
                from companion.modern import ModernConfig
                mcfg = ModernConfig(**model_spec)
            else:
                mcfg = GPTConfig(**model_spec)
            tcfg = TrainConfig(**{**spec.get("train", {}), **train_kw})
        else:
            if args.steps is not None:  # a fresh run's schedule spans the steps asked for
                train_kw.setdefault("max_steps", max(args.steps, 1))
            mcfg, tcfg = named_config(args.config, corpus.tokenizer.vocab_size, **train_kw)
            mcfg = replace(mcfg, **model_kw)
        torch.manual_seed(tcfg.seed)  # the same initial weights in every process
        trainer = Trainer(build_model(mcfg), corpus, tcfg)
    return trainer


def _finish(args, argv, trainer, corpus, say, main_process) -> int:
    history = trainer.run(args.steps, time_budget=args.time, progress=not args.no_progress)
    if trainer.compile_seconds:
        say(f"compiling took {trainer.compile_seconds:.0f} s (before the clock started)")
    if not main_process:
        return 0
    info = {"command": "python -m companion.train " + " ".join(sys.argv[1:] if argv is None else argv),
            "steps": trainer.step, "seconds": round(history.seconds, 1), "tokens": history.tokens,
            "threads": torch.get_num_threads(), "device": str(trainer.device), "processes": trainer.world_size,
            "global_batch": trainer.global_batch}
    speed = f"after {trainer.step} steps, {history.seconds:.0f} s, {history.tokens / max(history.seconds, 1e-9):,.0f} tokens/s"
    if args.no_score:
        last = f"; last estimate {history.val_loss[-1]:.4f} nats/char" if history.val_loss else ""
        say(f"held-out plays: not scored (--no-score){last} {speed}")
    else:
        val = evaluate_text(trainer.model, corpus.val_ids)
        info.update(val_nats_per_char=round(val, 4), val_bits_per_char=round(val / math.log(2), 4))
        say(f"held-out plays: {val:.4f} nats/char = {val / math.log(2):.4f} bits/char {speed}")
    path = trainer.save(args.out, resumable=not args.weights_only, info=info)
    say(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    say(next_steps(path, resumable=not args.weights_only))
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- chapter 7's exercises 7.3 to 7.7, as the companion writes them -------------------------------------
# A plain loop built from four small functions, counted in steps (the Trainer above counts its schedule
# in the fraction of the run done). The student version of chapter 7 falls back on these until the
# student's own pass their checks.
def step_learning_rate(step: int, max_steps: int, warmup: int, peak_lr: float, min_lr: float) -> float:
    """The learning rate of step ``step`` (0, 1, ..., counted from 0): ``peak_lr * (step + 1) /
    warmup`` for the first ``warmup`` steps (so step 0 already learns), then half a cosine from
    ``peak_lr`` at step ``warmup`` down to ``min_lr`` at step ``max_steps``, and ``min_lr`` after it.
    """
    if step < warmup:
        return peak_lr * (step + 1) / warmup
    if step >= max_steps:
        return min_lr
    t = (step - warmup) / max(max_steps - warmup, 1)  # 0 at the end of warm-up, 1 at max_steps
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * t)) * (peak_lr - min_lr)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW's two groups: weight decay on every parameter with two dimensions or more (the weight
    matrices and the embedding tables, so the tied head too), none on biases and norm gains. Each
    parameter once (a tied matrix is one parameter)."""
    params = list(model.parameters())  # parameters() lists a tied matrix once
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


@torch.no_grad()
def held_out_loss(model: nn.Module, batches) -> float:
    """The mean loss per token over ``batches``, a list of ``(x, y)`` pairs of any sizes (every
    token counts once, whatever its batch), in evaluation mode, without gradients; the model is
    left in the mode it was in."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    for x, y in batches:
        logits, _ = model(x)  # (B, T, V)
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum").item()
        count += y.numel()
    model.train(was_training)
    return total / count


def plain_train_step(model: nn.Module, optimizer, x: torch.Tensor, y: torch.Tensor, max_norm: float) -> float:
    """Chapter 7's training step: zero_grad, forward, loss, backward, clip, step; the loss as a float."""
    optimizer.zero_grad()
    logits, _ = model(x)  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten())
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()


def short_run(model: nn.Module, next_batch, val_batches, cfg: TrainConfig) -> tuple[list[float], list[tuple]]:
    """``cfg.max_steps`` steps of chapter 7's plain loop: AdamW on :func:`param_groups`, the learning
    rate of :func:`step_learning_rate` set before each step (``cfg.warmup`` in steps), a batch from
    ``next_batch()``, :func:`plain_train_step`, and :func:`held_out_loss` on ``val_batches`` after
    every ``cfg.eval_interval`` steps. Returns ``(losses, evals)``: the loss of every step, and
    ``(steps done, held-out loss)`` at each evaluation."""
    optimizer = torch.optim.AdamW(param_groups(model, cfg.weight_decay), lr=cfg.learning_rate,
                                  betas=(cfg.beta1, cfg.beta2))
    model.train()
    losses, evals = [], []
    for step in range(cfg.max_steps):
        lr = step_learning_rate(step, cfg.max_steps, int(cfg.warmup), cfg.learning_rate, cfg.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next_batch()
        losses.append(plain_train_step(model, optimizer, x, y, cfg.grad_clip))
        if cfg.eval_interval and (step + 1) % cfg.eval_interval == 0:
            evals.append((step + 1, held_out_loss(model, val_batches)))
    return losses, evals
