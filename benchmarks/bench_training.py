"""Quality at equal time, measured side by side: recipes interleaved over seeds, with the load.

    .venv/bin/python benchmarks/bench_training.py --threads 1 --seeds 0 1 2 --out runs/speedrun.jsonl
    .venv/bin/python benchmarks/bench_training.py --threads 1 2 --seeds 0 1 2 --nanogpt /tmp/nanoGPT
    .venv/bin/python benchmarks/bench_training.py --report runs/speedrun.jsonl      # the tables again
    .venv/bin/python benchmarks/bench_training.py --clock wall --budget 150 --fraction 1 \\
        --baseline nanogpt-cpu --candidates tuned-150s                  # chapter 7's comparison
    .venv/bin/python benchmarks/bench_training.py --device cuda --clock wall --budget 180 --fraction 1 \\
        --baseline nanogpt-gpu --candidates gpu-180s

The question (chapter 13's laptop speedrun): does a candidate recipe reach, in at most half the
time, the held-out loss that nanoGPT's CPU recipe reaches in 150 s? The baseline is
``nanogpt-cpu-fill``: nanoGPT's recipe (4 layers of width 128, context 64, 12 windows per step,
learning rate 1e-3, warm-up 100 of 2,000 steps, cosine to 1e-4) with its schedule spread over the
budget, so its iterations fill it. Each candidate (``modern-muon`` by default: chapter 13's decoder
with Muon, ``python -m companion.train --config modern-muon --time 75``) trains for ``--fraction``
of the budget with its schedule over that time. For every thread count and every seed the recipes
run one after the other in this process (baseline, [nanoGPT's own train.py], candidate, then the
next seed: A, B, A, B...), so a change of the machine's load hits both sides of a pair.

Every run records a loss curve: ``--evals`` times over its budget (and at its end) the clock stops
and the model is scored on the first 32,768 characters of the held-out plays (the "curve" loss);
at the end it is also scored on all 407,806 (the "final" loss, nats per character). The report
gives, per pair, the final losses and their difference (candidate - baseline), and the
**time-to-loss ratio**: the time at which the candidate's curve, linearly interpolated, first
reaches the baseline's last curve loss, divided by the baseline's time ("not reached" if it never
does). The candidate's curve before its end was measured with the learning rate not yet decayed,
so the ratio is an upper bound on what a run scheduled to end there would need. Over the seeds:
the mean difference with a t-based 95% interval (paired by seed) and the ratio that holds on
every seed (the largest).

The clock. ``--clock process`` (default) counts this process's CPU seconds (``time.process_time``),
``--clock wall`` wall-clock seconds; both are recorded for every run, with the machine's 1-minute
load average (``os.getloadavg``) at the start, at each evaluation and at the end, and the share of a
core the run received (CPU seconds / wall seconds per thread). Neither clock is load-proof: on a
busy machine the wall clock counts time the process waited for a core, and a CPU second does less
work (shared caches and memory bandwidth, hyper-threads): at load 10-17 on this course's 2-core
machine a CPU second did 2.6x less work than on an idle one. Interleaving makes the pair see the
same load; the steps each run took are printed, so a reader can see how much work a budget bought.

``--nanogpt DIR`` adds nanoGPT's own ``train.py`` (a clone outside this repository, never copied
into it: ``git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT``) as a second baseline: its
README's CPU recipe, run as a subprocess on this course's split (written as its ``train.bin`` /
``val.bin`` into a temporary folder, not into the clone), with ``max_iters`` set to the steps the
companion's ``nanogpt-cpu-fill`` took in the same budget just before, so that its iterations fill
the budget. Its checkpoint is copied into the companion's GPT and scored the same way. nanoGPT's
train.py has no seed option (it always seeds 1337), so its rows differ only by the steps.

What made the tuned chapter 7 recipe (``tuned-150s``) faster than nanoGPT's, on 2 idle cores: the
schedule spans the time budget (warm-up 2%, cosine to 1e-4), a peak learning rate of 6e-3, 16
windows of 128 characters per step (1.1x more tokens per second idle, 2.3x busy), torch's fused
LayerNorm (about 2x per step); not bfloat16 autocast (several times slower on a CPU without bf16
matrix units), not a second thread on a busy machine (two threads wait on each other: up to 5x
slower per step). Chapter 13's speedrun adds the modern decoder and Muon.

The results recorded in README.md ("The laptop speedrun") were printed by this script; GPU figures
(``--device cuda``: ``nanogpt-gpu`` against ``gpu-180s``) are not measured: no GPU was lent to the
sessions that wrote it.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from companion.data import load_corpus
from companion.model import GPT, GPTConfig
from companion.modern import ModernConfig, ModernGPT
from companion.train import CONFIGS, Trainer, evaluate_text, learning_rate, named_config

ROOT = Path(__file__).resolve().parents[1]
CURVE_CHARS = 32_768  # the held-out prefix scored along the curve (a few CPU seconds per point)

#: Two-sided 95% quantiles of Student's t, by degrees of freedom (scipy is not a dependency).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def t95(df: int) -> float:
    """The 97.5% quantile of t with ``df`` degrees of freedom (the next smaller tabulated df: wider)."""
    return T95[max(k for k in T95 if k <= df)]


def paired_interval(diffs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the mean of paired differences and its t-based 95% interval."""
    m = statistics.mean(diffs)
    if len(diffs) < 2:
        return m, float("nan"), float("nan")
    half = t95(len(diffs) - 1) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    return m, m - half, m + half


def time_to_loss(curve: list[dict], target: float, key: str = "clock") -> float | None:
    """The time (``key`` of the points) at which the curve, linearly interpolated between its
    points, first reaches ``target``; None if it never does."""
    prev = None
    for point in curve:
        if point["loss"] <= target:
            if prev is None:
                return point[key]
            t0, l0, t1, l1 = prev[key], prev["loss"], point[key], point["loss"]
            return t0 + (t1 - t0) * (l0 - target) / (l0 - l1) if l0 != l1 else t1
        prev = point
    return None


def configs_for(name: str, vocab_size: int, **overrides):
    """Model and training configurations of a named configuration of companion.train;
    ``nanogpt-cpu-fill`` is ``nanogpt-cpu`` with its schedule spread over the budget."""
    return named_config("nanogpt-cpu" if name == "nanogpt-cpu-fill" else name, vocab_size, **overrides)


class Clocks:
    """Process CPU seconds and wall seconds, paused while the model is scored."""

    def __init__(self, kind: str):
        self.kind, self.cpu, self.wall = kind, 0.0, 0.0

    def __enter__(self):
        self._c, self._w = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu += time.process_time() - self._c
        self.wall += time.perf_counter() - self._w

    @property
    def used(self) -> float:
        return self.cpu if self.kind == "process" else self.wall


def run(name: str, budget: float, threads: int, corpus, seed: int, clock: str, evals: int, device: str) -> dict:
    """Train recipe ``name`` for ``budget`` seconds of ``clock``, scoring a curve along the way."""
    mcfg, tcfg = configs_for(name, corpus.tokenizer.vocab_size, eval_interval=0, threads=threads, seed=seed,
                             device=device)
    torch.manual_seed(seed)
    model = ModernGPT(mcfg) if isinstance(mcfg, ModernConfig) else GPT(mcfg)
    trainer = Trainer(model, corpus, tcfg)
    fixed = name in ("nanogpt-cpu", "nanogpt-gpu")  # nanoGPT's step schedule, cut by the clock
    warm_steps = None if tcfg.warmup < 1 else tcfg.max_steps
    curve_ids = corpus.val_ids[:CURVE_CHARS]
    clocks, curve, loads = Clocks(clock), [], [os.getloadavg()[0]]

    def score():
        loads.append(os.getloadavg()[0])
        curve.append({"clock": clocks.used, "cpu": clocks.cpu, "wall": clocks.wall, "step": trainer.step,
                      "loss": evaluate_text(model, curve_ids)})

    score()
    model.train()
    while clocks.used < budget and not (fixed and trainer.step >= tcfg.max_steps):
        with clocks:
            progress = min(1.0, trainer.step / tcfg.max_steps) if fixed else clocks.used / budget
            lr = learning_rate(progress, tcfg, total_steps=None if fixed else warm_steps)
            loss = trainer.train_step(lr).item()
        if not math.isfinite(loss):
            raise FloatingPointError(f"{name}, seed {seed}: the loss became {loss} at step {trainer.step}")
        if clocks.used >= budget * len(curve) / evals and clocks.used < budget:
            score()
    score()
    final = evaluate_text(model, corpus.val_ids)
    return {"name": name, "seed": seed, "threads": threads, "clock": clock, "budget": budget, "final": final,
            "steps": trainer.step, "cpu_s": clocks.cpu, "wall_s": clocks.wall, "core_share": clocks.cpu / clocks.wall / threads,
            "load": loads, "curve": curve, "params": model.num_parameters(),
            "tokens": trainer.step * tcfg.batch_size * mcfg.context_length}


def run_nanogpt(folder: Path, steps: int, threads: int, corpus, workdir: Path) -> dict:
    """nanoGPT's train.py, its README's CPU recipe for ``steps`` iterations, on this course's split;
    its checkpoint scored as the companion's runs are."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_gpu import copy_weights, load_nanogpt

    folder = Path(folder).resolve()
    if ROOT in folder.parents or folder == ROOT:
        raise SystemExit(f"--nanogpt {folder} is inside this repository; nanoGPT's code stays outside it")
    if not (folder / "train.py").is_file():
        raise SystemExit(f"--nanogpt {folder}: no train.py there; clone https://github.com/karpathy/nanoGPT")
    data = workdir / "data" / "companion_plays"
    if not data.is_dir():
        data.mkdir(parents=True)
        corpus.train_ids.numpy().astype("uint16").tofile(data / "train.bin")
        corpus.val_ids.numpy().astype("uint16").tofile(data / "val.bin")
        with open(data / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": corpus.tokenizer.vocab_size}, f)
        (workdir / "configurator.py").write_bytes((folder / "configurator.py").read_bytes())
    out = workdir / "out"
    # nanoGPT's README, "I only have a macbook": its shakespeare_char config with these overrides
    cmd = [sys.executable, str(folder / "train.py"), str(folder / "config" / "train_shakespeare_char.py"),
           "--device=cpu", "--compile=False", "--eval_iters=20", "--log_interval=100", "--block_size=64",
           "--batch_size=12", "--n_layer=4", "--n_head=4", "--n_embd=128", f"--max_iters={steps}",
           f"--lr_decay_iters={steps}", "--dropout=0.0", "--dataset=companion_plays", f"--out_dir={out}",
           f"--eval_interval={steps}", "--always_save_checkpoint=True", "--dtype=float32"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    before, loads = resource.getrusage(resource.RUSAGE_CHILDREN), [os.getloadavg()[0]]
    wall = time.perf_counter()
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    loads.append(os.getloadavg()[0])
    if proc.returncode:
        raise SystemExit(f"nanoGPT's train.py failed:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    ckpt = torch.load(out / "ckpt.pt", map_location="cpu", weights_only=True)
    nano = load_nanogpt(folder)
    import contextlib
    import io
    with contextlib.redirect_stdout(io.StringIO()):
        theirs = nano.GPT(nano.GPTConfig(**ckpt["model_args"]))
    theirs.load_state_dict(ckpt["model"])
    a = ckpt["model_args"]
    ours = GPT(GPTConfig(vocab_size=a["vocab_size"], context_length=a["block_size"], d_model=a["n_embd"],
                         n_layers=a["n_layer"], n_heads=a["n_head"], dropout=0.0, bias=a["bias"]))
    copy_weights(theirs, ours)
    curve_loss = evaluate_text(ours, corpus.val_ids[:CURVE_CHARS])
    return {"name": "nanoGPT train.py", "steps": int(ckpt["iter_num"]), "cpu_s": cpu, "wall_s": wall,
            "core_share": cpu / wall / threads, "load": loads, "final": evaluate_text(ours, corpus.val_ids),
            "curve": [{"clock": None, "loss": curve_loss}], "threads": threads}


def describe_load(r: dict) -> str:
    return f"load {min(r['load']):.1f}-{max(r['load']):.1f} (mean {statistics.mean(r['load']):.1f})"


def print_run(r: dict) -> None:
    print(f"  {r['name']:>18} seed {r.get('seed', '-')}: final {r['final']:.4f} nats/char, curve end "
          f"{r['curve'][-1]['loss']:.4f} | {r['steps']:,} steps | {r['cpu_s']:.0f} CPU s, {r['wall_s']:.0f} wall s, "
          f"{r['core_share']:.0%} of a core per thread | {describe_load(r)}", flush=True)


def report(rows: list[dict]) -> None:
    """The paired comparison of every candidate with the baseline, per thread count."""
    for threads in sorted({r["threads"] for r in rows}):
        mine = [r for r in rows if r["threads"] == threads]
        base_name = next(r["baseline"] for r in mine if "baseline" in r)
        base = {r["seed"]: r for r in mine if r["name"] == base_name and r.get("role") == "baseline"}
        clock = next(iter(base.values()))["clock"]
        loads = [x for r in mine for x in r["load"]]
        print(f"\n== {threads} thread{'s' * (threads > 1)}, budget in {clock} seconds; 1-minute load during the runs "
              f"{min(loads):.1f}-{max(loads):.1f} (mean {statistics.mean(loads):.1f}) ==")
        names = [n for n in dict.fromkeys(r["name"] for r in mine if r.get("role") == "candidate")]
        nano = {r["seed"]: r for r in mine if r["name"] == "nanoGPT train.py"}
        if nano:
            d = [nano[s]["final"] - base[s]["final"] for s in sorted(nano) if s in base]
            m, lo, hi = paired_interval(d)
            print(f"nanoGPT's own train.py with the same iterations - {base_name}: {m:+.4f} nats/char "
                  f"(95% CI {lo:+.4f} to {hi:+.4f}, n={len(d)}); its CPU s: "
                  + ", ".join(f"{nano[s]['cpu_s']:.0f}" for s in sorted(nano)))
        for name in names:
            cand = {r["seed"]: r for r in mine if r["name"] == name and r.get("role") == "candidate"}
            seeds = sorted(set(cand) & set(base))
            print(f"\n{name} ({cand[seeds[0]]['budget']:.0f} s) against {base_name} "
                  f"({base[seeds[0]]['budget']:.0f} s):")
            print(f"{'seed':>4} {'baseline':>9} {'candidate':>9} {'diff':>8} {'time-to-loss':>13} {'steps b/c':>11} "
                  f"{'CPU s b/c':>9} {'wall s b/c':>11} {'core share b/c':>14} {'load b/c':>10}")
            diffs, ratios = [], []
            for s in seeds:
                b, c = base[s], cand[s]
                target = b["curve"][-1]["loss"]
                t = time_to_loss(c["curve"], target)
                ratio = None if t is None else t / b["curve"][-1]["clock"]
                ratios.append(ratio)
                diffs.append(c["final"] - b["final"])
                print(f"{s:>4} {b['final']:9.4f} {c['final']:9.4f} {diffs[-1]:+8.4f} "
                      f"{'not reached' if ratio is None else f'{ratio:.3f}':>13} {b['steps']:>5}/{c['steps']:<5} "
                      f"{b['cpu_s']:4.0f}/{c['cpu_s']:<4.0f} {b['wall_s']:5.0f}/{c['wall_s']:<5.0f} "
                      f"{b['core_share']:6.0%}/{c['core_share']:<7.0%} "
                      f"{statistics.mean(b['load']):4.1f}/{statistics.mean(c['load']):<4.1f}")
            m, lo, hi = paired_interval(diffs)
            print(f"final loss, candidate - baseline: {m:+.4f} nats/char, 95% CI {lo:+.4f} to {hi:+.4f} "
                  f"(paired t, n={len(diffs)})")
            if all(r is not None for r in ratios):
                print(f"time-to-loss ratio: {', '.join(f'{r:.3f}' for r in ratios)}; on every seed <= "
                      f"{max(ratios):.3f} ({'holds' if max(ratios) <= 0.5 else 'does not hold'} at 0.5)")
            else:
                print(f"time-to-loss ratio: not reached on {sum(r is None for r in ratios)} of {len(ratios)} seeds "
                      f"within the candidate's budget")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=150.0, help="the baseline's seconds of training (default 150)")
    parser.add_argument("--fraction", type=float, default=0.5, help="the candidates train for this fraction of it")
    parser.add_argument("--baseline", default="nanogpt-cpu-fill", help="a named configuration, or nanogpt-cpu-fill")
    parser.add_argument("--candidates", nargs="+", default=["modern-muon"], choices=list(CONFIGS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts, each a full set of runs")
    parser.add_argument("--clock", choices=["process", "wall"], default="process",
                        help="budgets in this process's CPU seconds (default) or in wall-clock seconds")
    parser.add_argument("--evals", type=int, default=10, help="points on each run's loss curve")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--nanogpt", type=Path, help="a clone of github.com/karpathy/nanoGPT outside this repository")
    parser.add_argument("--out", type=Path, help="append every run as a JSON line here")
    parser.add_argument("--report", type=Path, help="print the tables of a finished --out file and stop")
    args = parser.parse_args()
    if args.report:
        return report([json.loads(line) for line in args.report.read_text().splitlines() if line.strip()])
    corpus = load_corpus()
    print(f"torch {torch.__version__}; {os.cpu_count()} CPUs; held-out plays {len(corpus.val_ids):,} characters "
          f"(curve: the first {CURVE_CHARS:,}); baseline {args.baseline} for {args.budget:g} {args.clock} s, "
          f"candidates {', '.join(args.candidates)} for {args.budget * args.fraction:g}", flush=True)
    rows = []
    workdir = Path(tempfile.mkdtemp(prefix="nanogpt_run_")) if args.nanogpt else None

    def keep(r: dict) -> None:
        rows.append(r)
        print_run(r)
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")

    for threads in args.threads:
        for seed in args.seeds:
            b = run(args.baseline, args.budget, threads, corpus, seed, args.clock, args.evals, args.device)
            keep({**b, "role": "baseline", "baseline": args.baseline})
            if args.nanogpt:
                keep({**run_nanogpt(args.nanogpt, b["steps"], threads, corpus, workdir), "seed": seed,
                      "role": "nanogpt", "baseline": args.baseline})
            for name in args.candidates:
                c = run(name, args.budget * args.fraction, threads, corpus, seed, args.clock, args.evals, args.device)
                keep({**c, "role": "candidate", "baseline": args.baseline})
    report(rows)


if __name__ == "__main__":
    main()
