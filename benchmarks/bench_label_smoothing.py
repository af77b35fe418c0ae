"""Chapter 9's label smoothing, measured: the live run on the numbers 0-999, with and without it.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_label_smoothing.py --seeds 0 1 2 3 4 5 6 7 \\
        --steps 300 150 --out companion/assets/label_smoothing_runs.jsonl   # train every run
    .venv/bin/python benchmarks/bench_label_smoothing.py --report companion/assets/label_smoothing_runs.jsonl

Every run is the chapter's live run (``companion.translation.LIVE_SPLIT`` and
``LIVE_TRAIN_CONFIG``: the model of ``MODEL_CONFIG``, 870 training numbers of 0-999, batches of
32, AdamW with warm-up and cosine decay) for a given seed and number of steps, trained once with
the plain cross-entropy and once with label smoothing 0.1 (the original transformer's value). A
seed fixes the initial weights and the batches, so the two runs of a seed differ in the loss
only: the comparison is paired by seed. Each run is scored on the 100 held-out numbers (``test``)
and on the 30 numbers ending in 34, 58 or 76 (``unseen``): exact match and chrF of greedy
decoding, and, teacher-forced on ``test``, the model's mean confidence (the probability of its most
probable token) against its token accuracy, and the mean negative log-likelihood of the reference.

Recorded 2026-11-25 on the shared 2-core machine (one torch thread, 6-15 CPU seconds a run) with
the first command above; the file ships with the companion and chapter 9 reads it back, prints
this table and asserts what its text says. Means over seeds 0-7, paired difference (0.1 minus 0)
± its standard error:

* 300 steps: test exact 98.13 / 98.00 (-0.13 ± 0.55), test chrF 99.54 / 99.56 (+0.02 ± 0.11),
  unseen exact 64.17 / 65.83 (+1.67 ± 1.41), unseen chrF 87.23 / 88.89 (+1.66 ± 0.46),
  confidence 0.9949 / 0.8966 (-0.0984 ± 0.0003), accuracy 0.9992 / 0.9991, NLL 0.0064 / 0.1112;
* 150 steps: test exact 83.38 / 79.38 (-4.00 ± 1.66), test chrF 96.38 / 95.44 (-0.94 ± 0.53),
  unseen exact 43.75 / 44.17 (+0.42 ± 5.10), confidence 0.9605 / 0.8694, accuracy 0.9912 /
  0.9887, NLL 0.0552 / 0.1588.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from companion.translation import (LIVE_SPLIT, LIVE_TRAIN_CONFIG, MODEL_CONFIG, TranslationTokenizer, chrf,
                                   exact_match, number_splits, pairs, token_confidence, train, translate)

METRICS = ("test_exact", "test_chrf", "unseen_exact", "unseen_chrf", "confidence", "accuracy", "nll")


def chapter_tokenizer() -> TranslationTokenizer:
    """The chapter's character table (every character of the 0-9999 training numbers)."""
    return TranslationTokenizer.from_texts([t for p in pairs(number_splits().train[::50]) for t in p])


def run(seed: int, label_smoothing: float, steps: int) -> dict:
    """One live run; its scores."""
    from dataclasses import replace

    tok = chapter_tokenizer()
    splits = number_splits(**LIVE_SPLIT)
    torch.manual_seed(seed)
    model = Seq2SeqTransformer(Seq2SeqConfig(vocab_size=tok.vocab_size, **MODEL_CONFIG))
    start = time.process_time()
    train(model, tok, pairs(splits.train), replace(LIVE_TRAIN_CONFIG, seed=seed, max_steps=steps),
          label_smoothing=label_smoothing)
    seconds = time.process_time() - start
    out = {"seed": seed, "label_smoothing": label_smoothing, "steps": steps, "cpu_seconds": round(seconds, 1)}
    for name, numbers in (("test", splits.test), ("unseen", splits.unseen_endings)):
        data = pairs(numbers)
        hyps = translate(model, tok, [s for s, _ in data])
        refs = [r for _, r in data]
        out[f"{name}_exact"] = 100 * exact_match(hyps, refs)
        out[f"{name}_chrf"] = chrf(hyps, refs)
    out.update(token_confidence(model, tok, pairs(splits.test)))
    return out


def report(rows: list[dict]) -> str:
    """Means per (steps, smoothing), and the paired difference (0.1 minus 0) with its standard error."""
    lines = []
    for steps in sorted({r["steps"] for r in rows}):
        by = {(r["seed"], r["label_smoothing"]): r for r in rows if r["steps"] == steps}
        seeds = sorted({s for s, ls in by if (s, 0.0) in by and (s, 0.1) in by})
        lines.append(f"{steps} steps, seeds {seeds}: mean (paired difference 0.1 - 0, ± standard error)")
        for metric in METRICS:
            plain = [by[s, 0.0][metric] for s in seeds]
            smooth = [by[s, 0.1][metric] for s in seeds]
            diff = [b - a for a, b in zip(plain, smooth)]
            se = statistics.stdev(diff) / len(diff) ** 0.5 if len(diff) > 1 else float("nan")
            lines.append(f"  {metric:<13} eps=0: {statistics.mean(plain):8.4f}   eps=0.1: {statistics.mean(smooth):8.4f}"
                         f"   diff {statistics.mean(diff):+.4f} ± {se:.4f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4, 5, 6, 7])
    parser.add_argument("--steps", type=int, nargs="+", default=[LIVE_TRAIN_CONFIG.max_steps])
    parser.add_argument("--out", type=Path, help="append one JSON line per run to this file")
    parser.add_argument("--report", type=Path, help="print the table of a file written by --out, and stop")
    args = parser.parse_args()
    if args.report:
        print(report([json.loads(line) for line in args.report.read_text().splitlines() if line.strip()]))
        return
    torch.set_num_threads(1)
    rows = []
    for steps in args.steps:
        for seed in args.seeds:
            for ls in (0.0, 0.1):
                row = run(seed, ls, steps)
                rows.append(row)
                print(json.dumps(row), flush=True)
                if args.out:
                    with args.out.open("a") as f:
                        f.write(json.dumps(row) + "\n")
    print(report(rows))


if __name__ == "__main__":
    main()
