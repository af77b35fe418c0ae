"""Characters against BPE tokens for chapter 7's GPT, at equal CPU time, in bits per character.

    .venv/bin/python benchmarks/bench_bpe_lm.py --budget 180 --seeds 0 1 2 --merges 1024 --out runs/bpe_lm.json

Trains the GPT of chapter 7's shipped model (width 128, 4 layers, 4 heads, context 128 tokens,
batch 16, the ``small`` schedule stretched over the budget) once per seed on each tokenization of
the training plays: characters, and byte-level BPE with ``--merges`` merges learned from the
training plays (companion.bpe.train). Every run gets the same budget of **CPU seconds** of its
own process on one thread (``time.process_time``), so that other work on a busy machine changes
the wall-clock time, not the comparison. Each model is then scored on the whole held-out plays,
and the loss is converted to the one unit in which tokenizations compare fairly: bits per
character of text (total nats over the held-out tokens / characters / ln 2).

``--control`` adds a third model per seed: characters again, with a context of as many characters
as the BPE model's 128 tokens cover on the held-out plays (128 x characters per BPE token, about
315), so that the two models see windows of equal text; it separates "BPE tokens" from "a longer
window of text".

Prints one line per run, then each model's mean over seeds with its standard error, and each
paired difference (same seed) against the character model with a t-based 95% interval. Nothing
is asserted; chapter 11 quotes the figures with this command.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

from companion import bpe
from companion.data import Corpus, load_corpus
from companion.model import GPT
from companion.train import Trainer, evaluate_text, learning_rate, named_config


def bpe_corpus(merges: int) -> Corpus:
    chars = load_corpus()
    tok = bpe.train(chars.train_text, 256 + merges)
    train_ids = torch.tensor(tok.encode(chars.train_text), dtype=torch.long)
    val_ids = torch.tensor(tok.encode(chars.val_text), dtype=torch.long)
    return Corpus(chars.train_text, chars.val_text, tok, train_ids, val_ids)


#: Two-sided 95% quantiles of Student's t distribution, by degrees of freedom (scipy is not a
#: dependency of the course).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def run(corpus: Corpus, seed: int, budget: float, context: int | None = None) -> dict:
    model_cfg, train_cfg = named_config("small", corpus.tokenizer.vocab_size, seed=seed, threads=1, device="cpu",
                                        eval_interval=0)
    if context is not None:
        model_cfg = dataclasses.replace(model_cfg, context_length=context)
    torch.manual_seed(seed)
    model = GPT(model_cfg)
    trainer = Trainer(model, corpus, train_cfg)
    start = time.process_time()
    wall = time.perf_counter()
    while (used := time.process_time() - start) < budget:
        trainer.train_step(learning_rate(used / budget, train_cfg))
    wall = time.perf_counter() - wall
    nats_per_token = evaluate_text(model, corpus.val_ids)
    total_nats = nats_per_token * (len(corpus.val_ids) - 1)
    return {"seed": seed, "steps": trainer.step, "tokens_seen": trainer.step * train_cfg.batch_size *
            model_cfg.context_length, "cpu_seconds": budget, "wall_seconds": round(wall, 1),
            "parameters": model.num_parameters(), "context": model_cfg.context_length,
            "load_average": round(os.getloadavg()[0], 2), "nats_per_token": nats_per_token,
            "bits_per_char": total_nats / len(corpus.val_text) / math.log(2),
            "chars_per_token": len(corpus.val_text) / len(corpus.val_ids)}


def mean_se(values: list[float]) -> tuple[float, float]:
    m = statistics.mean(values)
    return m, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=180.0, help="CPU seconds per run (default 180)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--merges", type=int, default=1024, help="BPE merges (vocabulary 256 + merges)")
    parser.add_argument("--control", action="store_true",
                        help="also train characters with a window of as many characters as the BPE model's")
    parser.add_argument("--out", type=Path, help="write every run's figures here as JSON")
    args = parser.parse_args()
    if args.budget <= 0 or args.merges < 1:
        parser.error("--budget must be positive and --merges at least 1")
    if args.out is not None and args.out.is_dir():
        parser.error(f"--out {args.out} is a folder; give a file name such as runs/bpe_lm.json")
    torch.set_num_threads(1)
    bpe_name = f"BPE {args.merges} merges"
    corpora = {"characters": load_corpus(), bpe_name: bpe_corpus(args.merges)}
    contexts: dict[str, int | None] = {name: None for name in corpora}
    if args.control:
        per_token = len(corpora[bpe_name].val_text) / len(corpora[bpe_name].val_ids)
        window = round(128 * per_token)
        contexts[f"characters, {window}-char window"] = window
        corpora[f"characters, {window}-char window"] = corpora["characters"]
    print(f"CPU budget {args.budget:g} s per run, seeds {args.seeds}, load average {os.getloadavg()[0]:.1f}")
    results: dict[str, list[dict]] = {}
    for seed in args.seeds:  # interleaved, so that a change in the machine's state hits both alike
        for name, corpus in corpora.items():
            r = run(corpus, seed, args.budget, contexts[name])
            results.setdefault(name, []).append(r)
            print(f"{name:<18} seed {seed}: {r['bits_per_char']:.4f} bits/char ({r['steps']} steps, "
                  f"{r['chars_per_token']:.2f} chars/token, {r['parameters']:,} parameters, "
                  f"{r['wall_seconds']:.0f} s wall, load {r['load_average']:.1f})", flush=True)
    print()
    for name, runs in results.items():
        m, se = mean_se([r["bits_per_char"] for r in runs])
        print(f"{name:<18} {m:.4f} ± {se:.4f} bits/char (mean ± standard error over {len(runs)} seeds)")
    names = list(results)
    paired = {}
    pairs = [(names[0], other) for other in names[1:]] + [(c, names[1]) for c in names[2:]]
    for base, other in pairs:
        diffs = [b["bits_per_char"] - a["bits_per_char"] for a, b in zip(results[base], results[other])]
        m, se = mean_se(diffs)
        half = T95.get(len(diffs) - 1, 1.96) * se
        paired[f"{other} minus {base}"] = [m, se, m - half, m + half]
        print(f"{other} minus {base}: {m:+.4f} ± {se:.4f} bits/char (paired by seed; "
              f"95% t interval {m - half:+.4f} to {m + half:+.4f})")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": "benchmarks/bench_bpe_lm.py", "args": vars(args) | {"out": str(args.out)},
                                        "results": results, "paired": paired}, indent=1))


if __name__ == "__main__":
    main()
