"""Chapter 13's ablations: each change of today's decoder undone, one at a time, at equal CPU time.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/bench_modern_ablations.py --budget 24 --seeds 0 1 2 \\
        --out ablations.jsonl                      # train every variant for every seed
    .venv/bin/python benchmarks/bench_modern_ablations.py --report ablations.jsonl   # the table

Every run trains one model on the training plays for ``--budget`` seconds of this process's CPU
time (``time.process_time``, one torch thread: other programs on the machine slow the wall clock
far more than the CPU time a run receives, but not only it: at load 10-17 on the 2-core machine a
CPU second did 2.6x less work than idle, so the steps each run took are recorded), with the learning-rate schedule spread over that budget, then
scores it on the same 40,960 held-out characters (160 windows of 256 characters from the held-out
plays, evenly spaced). A seed fixes the initial weights (as far as the shapes agree) and the
training batches, so the variants of one seed see the same windows in the same order: the
comparison is paired by seed, and the report gives each variant's mean difference from the modern
decoder with its paired t-based 95% interval over the seeds.

The variants (all 3 layers of width 96, 4 query heads, context 64, 16 windows per step):

* ``modern``: RMSNorm, SwiGLU (d_ff 256), rotary positions, 4 key/value heads;
* ``layernorm``: LayerNorm (with its shift) instead of RMSNorm;
* ``gelu``: a GELU feed-forward of width 384 instead of SwiGLU: the same 73,728 weights per block;
* ``learned``: a learned table of 64 positions added to the input instead of rotary positions;
* ``kv2``, ``kv1``: 2 or 1 key/value heads shared by the 4 query heads (a 2x or 4x smaller cache);
* ``gpt2``: LayerNorm, GELU and a learned table at once: three of the four changes undone. The
  fourth, grouped-query attention, is not: ``modern`` itself keeps 4 key/value heads for its 4
  query heads (plain multi-head attention), and so does ``gpt2``; ``kv2``/``kv1`` measure it.

Besides the loss at the training length (positions 0-63 of each window, every variant), the
rotary models are scored on the whole 256-character windows: the loss at positions 64-255, which
no training window reached. A learned table has no row for position 64.

Recorded 2026-11-25 (chapter 13 shows these figures): ``--budget 20`` for seeds 0, 1, 2 (one
process per seed) and ``--variants modern layernorm gelu learned kv1 gpt2``, on the shared 2-core
machine at load 13-20 (a 20 CPU-second run took 300-410 s of wall clock). Held-out loss at
positions 0-63, difference from the modern decoder (mean ± standard error over the 3 seeds; the
report now prints 95% t intervals, e.g. kv1 -0.135 to +0.319, learned +0.348 to +0.616):
modern 2.036 (360 steps); layernorm -0.004 ± 0.006 (379 steps); gelu +0.060 ± 0.014 (345);
learned +0.482 ± 0.031 (387); kv1 +0.092 ± 0.053 (367); gpt2 +0.236 ± 0.016 (426). The modern
decoder at positions 0-63 / 64-127 / 128-255 of 256: 2.023 / 2.117 / 2.572.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from companion.data import load_corpus
from companion.modern import GroupedQueryAttention, ModernConfig, ModernGPT, repeat_kv

#: Two-sided 95% quantiles of Student's t by degrees of freedom (scipy is not a dependency).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}

VARIANTS = ("modern", "layernorm", "gelu", "learned", "kv2", "kv1", "gpt2")
TRAIN_T, EVAL_T, EVAL_WINDOWS, BATCH = 64, 256, 160, 16
SHAPE = dict(d_model=96, n_layers=3, n_heads=4)


class GELUFeedForward(nn.Module):
    """GPT-2's feed-forward without biases: ``down(gelu(up(x)))``."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.up_proj(x)))


class UnrotatedAttention(GroupedQueryAttention):
    """The same attention with no rotation: positions come from a table added to the input."""

    def forward(self, x, *, cache=None):
        B, T, _ = x.shape
        h, h_kv, d = self.n_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).view(B, T, h, d).transpose(1, 2)  # (B, h, T, d)
        k = self.k_proj(x).view(B, T, h_kv, d).transpose(1, 2)  # (B, h_kv, T, d)
        v = self.v_proj(x).view(B, T, h_kv, d).transpose(1, 2)
        k, v = repeat_kv(k, h // h_kv), repeat_kv(v, h // h_kv)  # (B, h, T, d)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, h, T, d)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, h * d))


class LearnedPositionsGPT(ModernGPT):
    """ModernGPT with a learned position table added to the token embeddings (GPT-2's way)."""

    def __init__(self, config: ModernConfig):
        super().__init__(config)
        self.pos_emb = nn.Embedding(config.context_length, config.d_model)
        nn.init.normal_(self.pos_emb.weight, std=0.02)

    def forward(self, idx, targets=None):
        B, T = idx.shape
        x = self.tok_emb(idx) + self.pos_emb(torch.arange(T))  # (B, T, d_model)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.final_norm(x))  # (B, T, V)
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss


def build(variant: str, vocab_size: int, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    kv = {"kv2": 2, "kv1": 1}.get(variant, 4)
    learned = variant in ("learned", "gpt2")
    c = ModernConfig(vocab_size=vocab_size, context_length=TRAIN_T if learned else EVAL_T, n_kv_heads=kv, **SHAPE)
    model = (LearnedPositionsGPT if learned else ModernGPT)(c)
    for block in model.blocks:
        if learned:
            old = block.attn
            block.attn = UnrotatedAttention(c.d_model, c.n_heads, c.n_kv_heads)
            block.attn.load_state_dict(old.state_dict())
        if variant in ("gelu", "gpt2"):
            block.ff = GELUFeedForward(c.d_model, 4 * c.d_model)
            nn.init.normal_(block.ff.up_proj.weight, std=0.02)
            nn.init.normal_(block.ff.down_proj.weight, std=0.02 / math.sqrt(2 * c.n_layers))
        if variant in ("layernorm", "gpt2"):
            block.norm1, block.norm2 = nn.LayerNorm(c.d_model), nn.LayerNorm(c.d_model)
    if variant in ("layernorm", "gpt2"):
        model.final_norm = nn.LayerNorm(c.d_model)
    return model


def lr_at(progress: float, peak: float = 3e-3, floor: float = 1e-4, warm: float = 0.02) -> float:
    if progress < warm:
        return peak * progress / warm
    return floor + 0.5 * (1 + math.cos(math.pi * min(1.0, (progress - warm) / (1 - warm)))) * (peak - floor)


def train(model: nn.Module, train_ids: torch.Tensor, seed: int, budget: float) -> dict:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    other = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.99), foreach=False)
    g = torch.Generator().manual_seed(1000 + seed)  # the same batches for every variant of a seed
    offsets = torch.arange(TRAIN_T + 1)
    steps, start = 0, time.process_time()
    model.train()
    while (used := time.process_time() - start) < budget:
        for group in opt.param_groups:
            group["lr"] = lr_at(used / budget)
        starts = torch.randint(len(train_ids) - TRAIN_T - 1, (BATCH,), generator=g)
        w = train_ids[starts[:, None] + offsets]  # (B, T+1)
        _, loss = model(w[:, :-1], w[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        steps += 1
    return {"steps": steps, "train_cpu_s": time.process_time() - start, "last_train_loss": loss.item()}


@torch.no_grad()
def score(model: nn.Module, val_ids: torch.Tensor, rotary: bool) -> dict:
    model.eval()
    starts = torch.linspace(0, len(val_ids) - EVAL_T - 1, EVAL_WINDOWS).long()
    w = val_ids[starts[:, None] + torch.arange(EVAL_T + 1)]  # (N, 257)
    x, y = w[:, :-1], w[:, 1:]
    short_x, short_y = x.reshape(-1, TRAIN_T), y.reshape(-1, TRAIN_T)  # every position within 0..63
    logits, _ = model(short_x)
    out = {"val_64": F.cross_entropy(logits.flatten(0, 1), short_y.flatten()).item()}
    if rotary:
        logits, _ = model(x)  # (N, 256, V)
        nll = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(len(x), EVAL_T)
        out["val_by_position"] = {f"{a}-{b - 1}": nll[:, a:b].mean().item() for a, b in
                                  [(0, 64), (64, 128), (128, 256)]}
    return out


def kv_cache_kib(variant: str) -> float:
    kv = {"kv2": 2, "kv1": 1}.get(variant, 4)
    c = ModernConfig(vocab_size=69, n_kv_heads=kv, **SHAPE)
    return c.kv_cache_bytes(batch_size=1, length=TRAIN_T, bytes_per_number=4) / 1024


def report(path: Path) -> None:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    by = {(r["variant"], r["seed"]): r for r in rows}
    seeds = sorted({r["seed"] for r in rows if r["variant"] == "modern"})
    print(f"{len(seeds)} seeds {seeds}; budget {rows[0]['budget']:.0f} CPU s per run, one thread; "
          f"held-out loss at positions 0-63 (nats/char)")
    print(f"{'variant':>10} {'loss':>7} {'diff vs modern [95% CI]':>33} {'steps':>6} {'params':>8} {'cache KiB':>9}")
    base = {s: by[("modern", s)]["val_64"] for s in seeds}
    for v in VARIANTS:
        have = [s for s in seeds if (v, s) in by]
        if not have:
            continue
        losses = [by[(v, s)]["val_64"] for s in have]
        diffs = [by[(v, s)]["val_64"] - base[s] for s in have]
        half = (T95[len(diffs) - 1] * statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1
                else float("nan"))
        m = statistics.mean(diffs)
        steps = statistics.mean(by[(v, s)]["steps"] for s in have)
        diff = f"{m:+.4f} [{m - half:+.3f}, {m + half:+.3f}]" if v != "modern" else "-"
        print(f"{v:>10} {statistics.mean(losses):7.4f} {diff:>33} {steps:6.0f} {by[(v, have[0])]['params']:8,} "
              f"{kv_cache_kib(v):9.1f}")
    print("\nrotary models beyond the training length (mean loss by position, nats/char):")
    for v in VARIANTS:
        have = [s for s in seeds if (v, s) in by and "val_by_position" in by[(v, s)]]
        if have:
            parts = []
            for k in by[(v, have[0])]["val_by_position"]:
                xs = [by[(v, s)]["val_by_position"][k] for s in have]
                se = statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else float("nan")
                parts.append(f"{k}: {statistics.mean(xs):.3f} ± {se:.3f}")
            print(f"{v:>10}  " + ", ".join(parts))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--budget", type=float, default=24.0, help="CPU seconds of training per run")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--out", type=Path, default=Path("ablations.jsonl"))
    p.add_argument("--report", type=Path, help="print the table of a finished --out file and stop")
    args = p.parse_args()
    if args.report:
        return report(args.report)
    torch.set_num_threads(1)
    corpus = load_corpus()
    for seed in args.seeds:
        for variant in args.variants:
            model = build(variant, corpus.tokenizer.vocab_size, seed)
            wall = time.perf_counter()
            r = {"variant": variant, "seed": seed, "budget": args.budget,
                 "params": sum(p.numel() for p in model.parameters())}
            r.update(train(model, corpus.train_ids, seed, args.budget))
            r["train_wall_s"] = time.perf_counter() - wall
            r.update(score(model, corpus.val_ids, rotary=variant not in ("learned", "gpt2")))
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
