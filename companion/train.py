"""Train the chapter 7 GPT on Shakespeare: AdamW, warm-up and cosine decay, clipping, evaluation.

From a terminal::

    python -m companion.train --config small --steps 3000 --out runs/small.safetensors
    python -m companion.train --config tuned-150s --time 150 --threads 2
    python -m companion.train --resume runs/small.safetensors --steps 4000
    python -m companion.train --help

In a notebook: build a :class:`Trainer` and call :meth:`Trainer.run`. For a given seed, thread
count and number of steps, training is deterministic, and a run resumed from a checkpoint continues
exactly as if it had never stopped (the model, the optimizer's moments, the step and the random
state of the batch sampler are all saved). A run limited by a time budget instead of a step count
schedules its learning rate by the fraction of the budget used, so it depends on the machine's speed.
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
from tqdm import tqdm

from companion.checkpoint import load_checkpoint, save_checkpoint
from companion.data import Corpus, get_batch, load_corpus
from companion.model import GPT, GPTConfig


@dataclass(frozen=True)
class TrainConfig:
    """How to train (the model's shape is in :class:`~companion.model.GPTConfig`)."""

    batch_size: int = 12  # sequences per step
    max_steps: int = 2000  # length of the schedule in steps (ignored when a time budget is given)
    learning_rate: float = 1e-3  # peak learning rate, reached at the end of warm-up
    min_lr: float = 1e-4  # learning rate at the end of the cosine decay
    warmup: float = 100  # warm-up length: steps if >= 1, else a fraction of the run
    weight_decay: float = 0.1  # AdamW decay, applied to weight matrices only
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0  # clip the global gradient norm to this (0 = no clipping)
    eval_interval: int = 250  # evaluate on held-out text every this many steps (0 = only at the end)
    eval_batches: int = 20  # held-out windows per evaluation: eval_batches * batch_size sequences
    seed: int = 0
    threads: int | None = None  # torch.set_num_threads; None leaves it as it is
    bf16: bool = False  # bfloat16 autocast for the matrix products


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
}


def named_config(name: str, vocab_size: int, **train_overrides) -> tuple[GPTConfig, TrainConfig]:
    """The model and training configurations called ``name`` in :data:`CONFIGS`."""
    if name not in CONFIGS:
        raise ValueError(f"`name` must be one of {sorted(CONFIGS)} (got {name!r})")
    model_kw, train_kw = CONFIGS[name]
    return GPTConfig(vocab_size=vocab_size, **model_kw), TrainConfig(**{**train_kw, **train_overrides})


def learning_rate(progress: float, cfg: TrainConfig, total_steps: int | None = None) -> float:
    """Linear warm-up to ``cfg.learning_rate``, then cosine decay to ``cfg.min_lr``.

    ``progress`` is the fraction of the run done, in [0, 1]; a warm-up given in steps is converted
    with ``total_steps``.
    """
    warm = cfg.warmup if cfg.warmup < 1 else cfg.warmup / max(total_steps or cfg.max_steps, 1)
    if progress < warm:
        return cfg.learning_rate * (progress + 1e-9) / warm
    t = min(1.0, (progress - warm) / max(1.0 - warm, 1e-9))
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * t)) * (cfg.learning_rate - cfg.min_lr)


def make_optimizer(model: GPT, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the weight matrices (and embeddings) only.

    Biases and norm gains are not decayed: pulling a LayerNorm gain towards 0 would shrink the
    signal, not regularize the model.
    """
    params = list(dict((id(p), p) for p in model.parameters()).values())  # the tied matrix once
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2), fused=False, foreach=False)


@torch.no_grad()
def estimate_loss(model: GPT, ids: torch.Tensor, batches: int, batch_size: int, seed: int = 1234) -> float:
    """Mean loss (nats per token) on ``batches`` random windows; the same windows on every call."""
    was_training = model.training
    model.eval()
    g = torch.Generator().manual_seed(seed)
    losses = [model(*get_batch(ids, batch_size, model.config.context_length, g))[1].item() for _ in range(batches)]
    model.train(was_training)
    return sum(losses) / len(losses)


@torch.no_grad()
def evaluate_text(model: GPT, ids: torch.Tensor, batch_size: int = 64) -> float:
    """Loss in nats per character over a whole text: every character after the first is predicted
    once, from non-overlapping windows of ``context_length`` characters.

    Shapes: ids (N,) -> float.
    """
    if not isinstance(ids, torch.Tensor) or ids.ndim != 1 or len(ids) < 2:
        got = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"`ids` must be a 1-D tensor of at least 2 token ids (got {got})")
    was_training = model.training
    model.eval()
    T = model.config.context_length
    n = (len(ids) - 1) // T
    x = ids[: n * T].view(n, T)  # (n, T)
    y = ids[1 : n * T + 1].view(n, T)  # (n, T) the next character of each
    total, count = 0.0, 0
    for i in range(0, n, batch_size):
        logits, _ = model(x[i : i + batch_size])
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), y[i : i + batch_size].flatten(), reduction="sum").item()
        count += y[i : i + batch_size].numel()
    rest = len(ids) - 1 - n * T  # the last partial window
    if rest > 0:
        logits, _ = model(ids[n * T : n * T + rest][None])
        total += torch.nn.functional.cross_entropy(logits[0].float(), ids[n * T + 1 :], reduction="sum").item()
        count += rest
    model.train(was_training)
    return total / count


@dataclass
class History:
    """What a training run recorded: train loss at every step, held-out loss at each evaluation."""

    steps: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    seconds: float = 0.0
    tokens: int = 0


class Trainer:
    """Owns a model, its optimizer, the batch sampler's random state and the history of one run.

    Shapes: batches are (batch_size, context_length) windows of ``corpus.train_ids``.
    """

    def __init__(self, model: GPT, corpus: Corpus, cfg: TrainConfig):
        if model.config.vocab_size != corpus.tokenizer.vocab_size:
            raise ValueError(f"the model's vocab_size={model.config.vocab_size} does not match the tokenizer's "
                             f"{corpus.tokenizer.vocab_size}")
        self.model, self.corpus, self.cfg = model, corpus, cfg
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.optimizer = make_optimizer(model, cfg)
        self.batch_rng = torch.Generator().manual_seed(cfg.seed)
        self.step = 0
        self.history = History()

    def train_step(self, lr: float) -> float:
        """One optimizer step on one fresh batch; returns its loss."""
        x, y = get_batch(self.corpus.train_ids, self.cfg.batch_size, self.model.config.context_length, self.batch_rng)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.cfg.bf16):
            _, loss = self.model(x, y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.step += 1
        return loss.item()

    def evaluate(self) -> float:
        return estimate_loss(self.model, self.corpus.val_ids, self.cfg.eval_batches, self.cfg.batch_size)

    def run(self, steps: int | None = None, *, time_budget: float | None = None, progress: bool = True,
            time_schedule: bool = True, on_eval=None) -> History:
        """Train until step ``steps`` (default ``cfg.max_steps``) or for ``time_budget`` seconds.

        With a step target the learning rate follows the schedule of ``cfg.max_steps`` steps, so a
        run can stop early and be resumed later. With a time budget the schedule runs over the
        budget (progress = seconds used / budget) and ends when the budget is spent; with
        ``time_schedule=False`` it keeps the step schedule and stops at whichever limit comes first
        (what a step-scheduled recipe achieves in that time).
        """
        cfg, h = self.cfg, self.history
        target = cfg.max_steps if steps is None else steps
        if time_budget is None and target <= self.step:
            return h
        self.model.train()
        bar = tqdm(total=None if time_budget and time_schedule else target, initial=self.step, disable=not progress, desc="training",
                   mininterval=1.0, dynamic_ncols=True, file=sys.stderr)
        start = time.perf_counter()
        tokens_per_step = cfg.batch_size * self.model.config.context_length
        while True:
            used = time.perf_counter() - start
            if time_budget is not None and used >= time_budget:
                break
            if time_budget is not None and time_schedule:
                lr = learning_rate(used / time_budget, cfg, total_steps=None if cfg.warmup < 1 else cfg.max_steps)
            else:
                if self.step >= target:
                    break
                lr = learning_rate(min(1.0, self.step / cfg.max_steps), cfg)
            loss = self.train_step(lr)
            if not math.isfinite(loss):
                raise FloatingPointError(f"the training loss became {loss} at step {self.step}; lower the learning rate")
            h.steps.append(self.step), h.train_loss.append(loss), h.lr.append(lr)
            h.tokens += tokens_per_step
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
            if cfg.eval_interval and self.step % cfg.eval_interval == 0:
                val = self.evaluate()
                h.eval_steps.append(self.step), h.val_loss.append(val)
                bar.write(f"step {self.step}: train {loss:.4f}, held-out {val:.4f} nats/char")
                if on_eval:
                    on_eval(self)
        h.seconds += time.perf_counter() - start
        bar.close()
        finished = time_budget is not None or self.step >= cfg.max_steps  # a paused run evaluates when it ends
        if finished and (not h.eval_steps or h.eval_steps[-1] != self.step):
            h.eval_steps.append(self.step), h.val_loss.append(self.evaluate())
        return h

    # --- checkpoints -------------------------------------------------------------------------
    def save(self, path, *, resumable: bool = True, info: dict | None = None) -> Path:
        """Write the model (and, if ``resumable``, everything needed to continue the run)."""
        if not resumable:
            return save_checkpoint(path, self.model, self.corpus.tokenizer, info=info)
        opt = self.optimizer.state_dict()
        tensors = {"rng.batch": self.batch_rng.get_state(), "rng.torch": torch.get_rng_state()}
        for i, state in opt["state"].items():
            for k, v in state.items():
                tensors[f"{i}.{k}"] = v if isinstance(v, torch.Tensor) else torch.tensor(v)
        groups = [{k: v for k, v in g.items() if k != "params"} for g in opt["param_groups"]]
        train_state = {"step": self.step, "train_config": asdict(self.cfg), "param_groups": groups,
                       "history": asdict(self.history)}
        return save_checkpoint(path, self.model, self.corpus.tokenizer, train_state=train_state,
                               optimizer_tensors=tensors, info=info)

    @classmethod
    def resume(cls, path, corpus: Corpus | None = None, **train_overrides) -> "Trainer":
        """Rebuild a trainer from a resumable checkpoint written by :meth:`save`."""
        model, tokenizer, extra = load_checkpoint(path)
        state = extra["train_state"]
        if state is None:
            raise ValueError(f"checkpoint {str(path)!r} holds only weights; it was not saved with resumable=True")
        corpus = corpus or load_corpus()
        if tokenizer.chars != corpus.tokenizer.chars:
            raise ValueError(f"checkpoint {str(path)!r} was made with another tokenizer than this corpus's")
        cfg = replace(TrainConfig(**state["train_config"]), **train_overrides)
        trainer = cls(model, corpus, cfg)
        tensors = extra["optimizer"]
        opt_state = {}
        for name, v in tensors.items():
            if name.startswith("rng."):
                continue
            i, k = name.split(".", 1)
            opt_state.setdefault(int(i), {})[k] = v
        groups = trainer.optimizer.state_dict()["param_groups"]
        for g, saved in zip(groups, state["param_groups"]):
            g.update({k: tuple(v) if isinstance(v, list) else v for k, v in saved.items()})
        trainer.optimizer.load_state_dict({"state": opt_state, "param_groups": groups})
        trainer.batch_rng.set_state(tensors["rng.batch"])
        torch.set_rng_state(tensors["rng.torch"])
        trainer.step = state["step"]
        trainer.history = History(**state["history"])
        return trainer


def plot_losses(history: History, ax=None, title: str | None = None):
    """Training loss (per step, and smoothed) and held-out loss against the step. Returns the axes."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots()
    ax.plot(history.steps, history.train_loss, color="tab:blue", alpha=0.25, lw=0.8, label="training batch")
    k = max(1, len(history.train_loss) // 50)
    if len(history.train_loss) >= k:
        smooth = torch.tensor(history.train_loss).unfold(0, k, 1).mean(1).tolist()
        ax.plot(history.steps[k - 1 :], smooth, color="tab:blue", label=f"training (mean of {k})")
    ax.plot(history.eval_steps, history.val_loss, "o-", color="tab:orange", label="held-out plays")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats per character)")
    ax.grid(alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return ax


def _parse_set(items: list[str]) -> tuple[dict, dict]:
    model_names = {f.name for f in fields(GPTConfig)}
    train_types = {f.name: f.type for f in fields(TrainConfig)}
    model_kw, train_kw = {}, {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or (key not in model_names and key not in train_types):
            raise SystemExit(f"--set expects KEY=VALUE with KEY a field of GPTConfig or TrainConfig (got {item!r})")
        value = json.loads(raw) if raw not in ("True", "False", "None") else {"True": True, "False": False, "None": None}[raw]
        (model_kw if key in model_names else train_kw)[key] = value
    return model_kw, train_kw


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m companion.train",
        description="Train the chapter 7 character-level GPT on Shakespeare's plays and write a checkpoint.",
        epilog="Example (the shipped model): python -m companion.train --config small --time 1740 --threads 1 --weights-only --out checkpoints/shakespeare_char.safetensors",
    )
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--config", default="tiny", choices=sorted(CONFIGS), help="a named configuration (default: tiny)")
    src.add_argument("--config-file", type=Path, help='a JSON file {"model": {...GPTConfig}, "train": {...TrainConfig}}')
    src.add_argument("--resume", type=Path, help="continue the run saved in this resumable checkpoint")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override fields, e.g. --set d_model=256 learning_rate=2e-3")
    limit = parser.add_mutually_exclusive_group()
    limit.add_argument("--steps", type=int, help="train until this step (default: the configuration's max_steps)")
    limit.add_argument("--time", type=float, help="train for this many seconds; the learning-rate schedule spans the budget")
    parser.add_argument("--threads", type=int, help="torch threads (default: PyTorch's choice)")
    parser.add_argument("--seed", type=int, help="random seed (default: the configuration's)")
    parser.add_argument("--out", type=Path, default=Path("runs/gpt.safetensors"), help="checkpoint to write (default: runs/gpt.safetensors)")
    parser.add_argument("--weights-only", action="store_true", help="write only the weights (small file that cannot be resumed)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)

    corpus = load_corpus()
    model_kw, train_kw = _parse_set(args.set)
    if args.threads:
        train_kw["threads"] = args.threads
    if args.seed is not None:
        train_kw["seed"] = args.seed
    if args.resume:
        if model_kw:
            raise SystemExit("--set cannot change the model of a resumed run")
        trainer = Trainer.resume(args.resume, corpus, **train_kw)
    else:
        if args.config_file:
            spec = json.loads(args.config_file.read_text())
            mcfg = GPTConfig(**{"vocab_size": corpus.tokenizer.vocab_size, **spec.get("model", {}), **model_kw})
            tcfg = TrainConfig(**{**spec.get("train", {}), **train_kw})
        else:
            if args.steps is not None:  # a fresh run's schedule spans the steps asked for
                train_kw.setdefault("max_steps", max(args.steps, 1))
            mcfg, tcfg = named_config(args.config, corpus.tokenizer.vocab_size, **train_kw)
            mcfg = replace(mcfg, **model_kw)
        torch.manual_seed(tcfg.seed)
        trainer = Trainer(GPT(mcfg), corpus, tcfg)
    print(f"model: {trainer.model.config}\ntraining: {trainer.cfg}\nparameters: {trainer.model.num_parameters():,}", flush=True)
    history = trainer.run(args.steps, time_budget=args.time, progress=not args.no_progress)
    val = evaluate_text(trainer.model, corpus.val_ids)
    info = {"command": "python -m companion.train " + " ".join(sys.argv[1:] if argv is None else argv),
            "steps": trainer.step, "seconds": round(history.seconds, 1), "tokens": history.tokens,
            "threads": torch.get_num_threads(), "val_nats_per_char": round(val, 4),
            "val_bits_per_char": round(val / math.log(2), 4)}
    path = trainer.save(args.out, resumable=not args.weights_only, info=info)
    print(f"held-out plays: {val:.4f} nats/char = {val / math.log(2):.4f} bits/char after {trainer.step} steps, "
          f"{history.seconds:.0f} s, {history.tokens / max(history.seconds, 1e-9):.0f} tokens/s")
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
