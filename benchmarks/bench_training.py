"""Quality at equal time: train for a fixed wall-clock budget, score on the whole held-out text.

    .venv/bin/python benchmarks/bench_training.py                 # 150 s each, 2 threads
    taskset -c 0,1 .venv/bin/python benchmarks/bench_training.py  # pinned to two cores
    .venv/bin/python benchmarks/bench_training.py --budget 30 --configs tuned-150s

Runs, in the same process and one after the other, nanoGPT's published CPU recipe (4 layers,
4 heads, width 128, context 64, batch 12, 2000 iterations on a step schedule, learning rate 1e-3)
and the tuned configuration (its learning-rate schedule spans the time budget), each for the same
budget. Reports the loss on the whole held-out text (nats and bits per character), tokens per
second, and the fraction of this machine's measured float32 matmul rate that training reaches.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from companion.data import load_corpus
from companion.model import GPT
from companion.train import Trainer, evaluate_text, named_config


def matmul_rate(threads: int, n: int = 512, repeats: int = 30) -> float:
    """Median float32 GFLOP/s of an (n, n) @ (n, n) product on ``threads`` threads."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(5):
        a @ b
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def flops_per_token(model: GPT) -> float:
    """Training FLOPs per token: 6 per weight (forward 2, backward 4) for every matrix a token goes
    through (blocks and the head; embeddings are lookups), plus attention's two T-long products."""
    c = model.config
    d_ff = c.d_ff or 4 * c.d_model
    per_block = 4 * c.d_model * c.d_model + 2 * c.d_model * d_ff
    matrices = c.n_layers * per_block + c.d_model * c.vocab_size
    attention = c.n_layers * 2 * c.context_length * c.d_model  # q.k and weights.v, causal average T/2 each *2
    return 6 * (matrices + attention)


def run(name: str, budget: float, threads: int, corpus, seed: int, **overrides) -> dict:
    mcfg, tcfg = named_config(name, corpus.tokenizer.vocab_size, eval_interval=0, eval_batches=1, threads=threads, seed=seed, **overrides)
    torch.manual_seed(seed)
    model = GPT(mcfg)
    trainer = Trainer(model, corpus, tcfg)
    time_schedule = name != "nanogpt-cpu"  # the recipe keeps its 2000-step schedule and is cut by the clock
    h = trainer.run(time_budget=budget, time_schedule=time_schedule, progress=False)
    t0 = time.perf_counter()
    val = evaluate_text(model, corpus.val_ids)
    return {"name": name, "val": val, "bits": val / math.log(2), "steps": trainer.step, "seconds": h.seconds,
            "tokens_per_s": h.tokens / h.seconds, "flops_per_token": flops_per_token(model),
            "params": model.num_parameters(), "eval_s": time.perf_counter() - t0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=150.0, help="seconds of training per configuration")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", nargs="+", default=["nanogpt-cpu", "tuned-150s"])
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the tuned configurations")
    args = parser.parse_args()
    corpus = load_corpus()
    rate = matmul_rate(args.threads)
    print(f"float32 matmul (512x512 @ 512x512), {args.threads} threads: {rate:.1f} GFLOP/s (median of 30)")
    print(f"budget {args.budget:.0f} s per configuration; held-out plays: {len(corpus.val_ids):,} characters\n")
    results = []
    for name in args.configs:
        extra = {"bf16": True} if args.bf16 and name != "nanogpt-cpu" else {}
        r = run(name, args.budget, args.threads, corpus, args.seed, **extra)
        frac = r["tokens_per_s"] * r["flops_per_token"] / (rate * 1e9)
        results.append(r)
        print(f"{name:>12}: {r['val']:.4f} nats/char = {r['bits']:.4f} bits/char | {r['steps']} steps, "
              f"{r['tokens_per_s']:,.0f} tokens/s, {r['params']:,} parameters, "
              f"{r['tokens_per_s'] * r['flops_per_token'] / 1e9:.1f} GFLOP/s = {frac:.0%} of matmul rate", flush=True)
    if len(results) > 1:
        base = results[0]
        for r in results[1:]:
            print(f"\n{r['name']} / {base['name']}: loss ratio {r['val'] / base['val']:.3f} "
                  f"({r['val'] - base['val']:+.4f} nats/char), throughput ratio {r['tokens_per_s'] / base['tokens_per_s']:.2f}")


if __name__ == "__main__":
    main()
