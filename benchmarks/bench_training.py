"""Quality at equal time: train for a fixed wall-clock budget, score on the whole held-out text.

    .venv/bin/python benchmarks/bench_training.py                 # 150 s each, 2 threads
    taskset -c 0,1 .venv/bin/python benchmarks/bench_training.py  # pinned to two cores
    .venv/bin/python benchmarks/bench_training.py --budget 30 --configs tuned-150s
    .venv/bin/python benchmarks/bench_training.py --device cuda --budget 180 --configs nanogpt-gpu gpu-180s

Runs, in the same process and one after the other, nanoGPT's published CPU recipe (4 layers,
4 heads, width 128, context 64, batch 12, 2000 iterations on a step schedule, learning rate 1e-3)
and the tuned configuration (its learning-rate schedule spans the time budget), each for the same
budget. Reports the loss on the whole held-out text (nats and bits per character), tokens per
second, and the fraction of this machine's measured float32 matmul rate that training reaches.

Measured on 2 idle cores (matmul 325 GFLOP/s): nanoGPT recipe 1.888 nats/char (2.723 bits/char;
it completes its 2000 steps in about 64 s, 24,000 tokens/s, 38% of the matmul rate); tuned
1.627 nats/char (2.347 bits/char; 26,400 tokens/s, 45% of the matmul rate).

What moved the figure:
- the learning-rate schedule spans the time budget (warm-up 2%, cosine to 1e-4), so the run ends
  with a decayed learning rate instead of being cut mid-schedule;
- a higher peak learning rate, 6e-3 instead of 1e-3 (3e-3 was clearly worse);
- throughput: 16 windows of 128 characters (2,048 tokens) per step instead of 12 of 64 (768)
  amortizes the per-step Python and optimizer overhead over 2.7x more tokens and gives the
  matrix products better shapes: 1.1x more tokens per second on an idle machine (2.3x on a busy
  one) for the same model size, and a longer context to learn from;
- torch's fused LayerNorm in the model (companion.model swaps it in): about 2x per step;
- not used: bfloat16 autocast (several times slower on this CPU, which has no bf16 matrix units),
  a second thread when the machine is busy (two threads then wait on each other and a step gets
  up to 5x slower than with one; on an idle machine two threads are 1.75x faster).

Chapter 13's speedrun (issue 24: reach ``nanogpt-cpu-fill``'s loss in at most half its time) is
NOT measured yet at 150 s. One development run on a shared machine (load 9-20), 2026-11-25:
``--budget 20 --threads 1 --clock process --fraction 0.5 --configs nanogpt-cpu-fill nanogpt-cpu
tuned-150s modern-adamw modern-muon gpt-muon`` (CPU seconds of this process): nanogpt-cpu-fill
2.4412 nats/char (274 steps); in 10 s: nanogpt-cpu 2.5605 (133 steps), tuned-150s 3.1089 (50),
modern-adamw 2.9901 (46), modern-muon 2.5172 (41), gpt-muon 2.5362 (45): none reaches it in half
the time at this budget; Muon is the largest gain (-0.47 nats on the same model). The matmul
fractions of that run are wrong (it timed the matmul on the wall clock; fixed since).

On a GPU (``--device cuda``): nanoGPT's GPU recipe (``nanogpt-gpu``, its
config/train_shakespeare_char.py: 6 layers of width 384, context 256, batch 64, dropout 0.2, 5000
steps at 1e-3; its README reports 1.4697 on its own, smaller split after about 3 minutes on an
A100) against ``gpu-180s``, designed from it and from the CPU findings above: the same model, the
schedule over the whole budget, 128 windows per step (a model this small leaves a big GPU waiting
between kernels, so twice the rows cost far less than twice the time), peak learning rate 2e-3 for
the larger batch, dropout 0.1 (this split has four times nanoGPT's text, so less to memorize).
Both compile before the clock starts (reported), use bf16 autocast and fused AdamW. Not measured
yet: no GPU was lent to the session that wrote it. Record the command, GPU, date and both scores
here when it runs.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

import companion.train as train_module
from companion.data import load_corpus
from companion.model import GPT, GPTConfig
from companion.modern import ModernConfig, ModernGPT
from companion.train import CONFIGS, TrainConfig, Trainer, evaluate_text, named_config

#: The speedrun's candidate recipes (chapter 13), besides the named configurations of
#: companion.train: (model keywords, training keywords). ``modern`` builds a ModernGPT.
SPEEDRUN: dict[str, tuple[dict, dict]] = {
    # chapter 13's decoder at tuned-150s's shape and schedule, AdamW everywhere
    "modern-adamw": (dict(modern=True, context_length=128, d_model=128, n_layers=4, n_heads=4),
                     dict(batch_size=16, learning_rate=6e-3, min_lr=1e-4, warmup=0.02)),
    # the same with Muon for the blocks' matrices (AdamW for embeddings, head and gains)
    "modern-muon": (dict(modern=True, context_length=128, d_model=128, n_layers=4, n_heads=4),
                    dict(batch_size=16, learning_rate=6e-3, min_lr=1e-4, warmup=0.02, optimizer="muon",
                         muon_lr=0.02)),
    # chapter 7's GPT (tuned-150s) with Muon for its blocks' matrices
    "gpt-muon": (dict(context_length=128, d_model=128, n_layers=4, n_heads=4, dropout=0.0, bias=False),
                 dict(batch_size=16, learning_rate=6e-3, min_lr=1e-4, warmup=0.02, optimizer="muon", muon_lr=0.02)),
    # Muon with twice the windows per step
    "modern-muon-b32": (dict(modern=True, context_length=128, d_model=128, n_layers=4, n_heads=4),
                        dict(batch_size=32, learning_rate=6e-3, min_lr=1e-4, warmup=0.02, optimizer="muon",
                             muon_lr=0.02)),
}


def configs_for(name: str, vocab_size: int, **overrides):
    """Model and training configurations of a named configuration or a speedrun recipe.
    ``nanogpt-cpu-fill`` is nanoGPT's CPU recipe with as many iterations as fill the budget (its
    schedule spread over the budget); ``nanogpt-cpu`` keeps its fixed 2,000 iterations."""
    base = "nanogpt-cpu" if name == "nanogpt-cpu-fill" else name
    if base in CONFIGS:
        return named_config(base, vocab_size, **overrides)
    model_kw, train_kw = SPEEDRUN[name]
    model_kw = dict(model_kw)
    modern = model_kw.pop("modern", False)
    mcfg = (ModernConfig if modern else GPTConfig)(vocab_size=vocab_size, **model_kw)
    return mcfg, TrainConfig(**{**train_kw, **overrides})


CLOCK = time.perf_counter  # time.process_time with --clock process


def matmul_rate(threads: int, n: int = 512, repeats: int = 30) -> float:
    """Median float32 GFLOP/s of an (n, n) @ (n, n) product on ``threads`` threads, timed by CLOCK."""
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(5):
        a @ b
    times = []
    for _ in range(repeats):
        t0 = CLOCK()
        a @ b
        times.append(CLOCK() - t0)
    return 2 * n**3 / statistics.median(times) / 1e9


def flops_per_token(model: GPT) -> float:
    """Training FLOPs per token: 6 per weight (forward 2, backward 4) for every matrix a token goes
    through (blocks and the head; embeddings are lookups), plus attention's two T-long products."""
    c = model.config
    d_ff = c.d_ff or 4 * c.d_model
    per_block = 4 * c.d_model * c.d_model + 2 * c.d_model * d_ff
    if isinstance(c, ModernConfig):  # smaller k, v projections with GQA; three feed-forward matrices
        per_block = 2 * c.d_model * c.n_heads * c.d_head + 2 * c.d_model * c.n_kv_heads * c.d_head + 3 * c.d_model * d_ff
    matrices = c.n_layers * per_block + c.d_model * c.vocab_size
    attention = c.n_layers * 2 * c.context_length * c.d_model  # q.k and weights.v, causal average T/2 each *2
    return 6 * (matrices + attention)


def run(name: str, budget: float, threads: int, corpus, seed: int, **overrides) -> dict:
    mcfg, tcfg = configs_for(name, corpus.tokenizer.vocab_size, eval_interval=0, eval_batches=1, threads=threads,
                             seed=seed, **overrides)
    torch.manual_seed(seed)
    model = ModernGPT(mcfg) if isinstance(mcfg, ModernConfig) else GPT(mcfg)
    trainer = Trainer(model, corpus, tcfg)
    # nanoGPT's fixed recipes keep their step schedule, cut by the clock; every other spans the budget
    time_schedule = name not in ("nanogpt-cpu", "nanogpt-gpu")
    h = trainer.run(time_budget=budget, time_schedule=time_schedule, progress=False)
    t0 = time.perf_counter()
    val = evaluate_text(model, corpus.val_ids)
    return {"name": name, "val": val, "bits": val / math.log(2), "steps": trainer.step, "seconds": h.seconds,
            "tokens_per_s": h.tokens / h.seconds, "flops_per_token": flops_per_token(model),
            "params": model.num_parameters(), "eval_s": time.perf_counter() - t0, "compile_s": trainer.compile_seconds,
            "device": str(trainer.device)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=150.0, help="seconds of training per configuration")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--configs", nargs="+", default=["nanogpt-cpu", "tuned-150s"])
    parser.add_argument("--bf16", action="store_true", help="bfloat16 autocast for the tuned configurations")
    parser.add_argument("--device", default="cpu", help="cpu (default), cuda, mps or auto")
    parser.add_argument("--clock", choices=["wall", "process"], default="wall",
                        help="budgets in wall-clock seconds (default) or in this process's CPU seconds "
                             "(time.process_time; use with --threads 1 on a shared machine)")
    parser.add_argument("--fraction", type=float, default=1.0,
                        help="every configuration after the first trains for this fraction of the budget; "
                             "0.5 asks whether it reaches the first one's loss in half its time")
    args = parser.parse_args()
    if args.clock == "process":  # the trainer reads time.perf_counter: point it at the CPU clock
        import types
        global CLOCK
        CLOCK = time.process_time
        train_module.time = types.SimpleNamespace(perf_counter=time.process_time)
    corpus = load_corpus()
    on_cpu = args.device == "cpu"
    rates = [matmul_rate(args.threads)] if on_cpu else []
    if on_cpu:
        print(f"float32 matmul (512x512 @ 512x512), {args.threads} threads: {rates[0]:.1f} GFLOP/s (median of 30)")
    else:
        print(f"device {args.device}: {torch.cuda.get_device_name() if torch.cuda.is_available() else ''}; torch {torch.__version__}")
    print(f"budget {args.budget:.0f} s per configuration; held-out plays: {len(corpus.val_ids):,} characters\n")
    results = []
    for i, name in enumerate(args.configs):
        extra = {"precision": "bf16"} if args.bf16 and not name.startswith("nanogpt") else {}
        budget = args.budget * (args.fraction if i else 1.0)
        r = run(name, budget, args.threads, corpus, args.seed, device=args.device, **extra)
        r["budget"] = budget
        results.append(r)
        gflops = r["tokens_per_s"] * r["flops_per_token"] / 1e9
        if on_cpu:
            rates.append(matmul_rate(args.threads))  # measured again after each run: the machine may be shared
            use = f" = {gflops / max(rates):.0%} of matmul rate"  # the best measurement: closest to what the cores can do
        else:
            use = f"; compiled in {r['compile_s']:.0f} s before the clock" if r["compile_s"] else ""
        print(f"{name:>16} ({budget:.0f} {args.clock} s): {r['val']:.4f} nats/char = {r['bits']:.4f} bits/char | {r['steps']} steps, "
              f"{r['tokens_per_s']:,.0f} tokens/s, {r['params']:,} parameters, {gflops:.1f} GFLOP/s{use}", flush=True)
    if on_cpu:
        print(f"\nmatmul rate measurements: {', '.join(f'{x:.1f}' for x in rates)} GFLOP/s; fractions use the best")
    if len(results) > 1:
        base = results[0]
        for r in results[1:]:
            reached = "reaches" if r["val"] <= base["val"] else "does not reach"
            print(f"\n{r['name']} / {base['name']}: loss ratio {r['val'] / base['val']:.3f} "
                  f"({r['val'] - base['val']:+.4f} nats/char), throughput ratio {r['tokens_per_s'] / base['tokens_per_s']:.2f}; "
                  f"in {r['budget'] / base['budget']:.2f} of the time it {reached} {base['name']}'s loss "
                  f"(time-to-loss ratio {'<=' if r['val'] <= base['val'] else '>'} {r['budget'] / base['budget']:.2f})")


if __name__ == "__main__":
    main()
