"""Speed side by side: a training step of the companion's GPT and of nanoGPT's model, on a GPU.

    git clone https://github.com/karpathy/nanoGPT /tmp/nanoGPT      # outside this repository
    .venv/bin/python benchmarks/bench_gpu.py --nanogpt /tmp/nanoGPT  # on a CUDA GPU: every column
    .venv/bin/python benchmarks/bench_gpu.py --nanogpt /tmp/nanoGPT --device cpu --small --compile no
                                                                     # the script itself, on a CPU

nanoGPT's ``model.py`` is the reference. It is imported from the folder given with ``--nanogpt``
(a clone outside this repository), never copied into the project.

What is timed, for both models in one run: GPT-2-small size (12 layers, 12 heads, width 768,
context 1024, biases as GPT-2, vocabulary 50,304: GPT-2's 50,257 padded to a multiple of 64, as
nanoGPT's benchmark does), batch 8, one fixed batch of random tokens on the device, and the same
loop: forward with the targets (autocast in bf16 where asked), backward, fused AdamW step, zero the
gradients. Columns: float32 and bf16, each without and with ``torch.compile``. The two models hold
the same weights (nanoGPT's are copied into the companion's) and their losses are checked equal
first, so both compute the same function. Timing: ``--warmup`` steps, then ``--repeats`` rounds of
``--steps`` steps, the two models alternating round by round (so that a change in the GPU's clock
hits both), the device synchronized only at the end of a round; the median round is reported,
as tokens per second and the ratio companion / nanoGPT. float32 is plain float32 unless ``--tf32``.

Recorded results (fill in from a run on a lent GPU: hardware, date, the printed table): none yet;
this session had no GPU. The GPU profile in /work/shared/NOTEBOOKS.md (H100, bf16, before the
changes below) measured companion 209k against nanoGPT 274k tokens/s.

What the companion changed for this (companion/model.py and companion/multihead.py, the same
function and the same state_dict names):
- the loss: no float32 copy of the (B*T, 50,304) logits before ``cross_entropy`` under autocast
  (autocast already runs the log-softmax in float32); the profile measured this softmax at 4x
  nanoGPT's time;
- self-attention computes q, k, v with one matrix product from the three weights stacked
  (``torch.cat``), one weight cast under autocast instead of three;
- the forward pass never reads a value back to the host on a GPU (the id range check runs on the
  CPU only), so the CPU can queue kernels ahead of the GPU;
- attention already used ``F.scaled_dot_product_attention(..., is_causal=True)`` (flash attention).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import importlib.util
import io
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from companion.model import GPT, GPTConfig

ROOT = Path(__file__).resolve().parents[1]


def load_nanogpt(folder: Path):
    """nanoGPT's model.py, imported from a clone outside this repository."""
    path = Path(folder).resolve() / "model.py"
    if not path.is_file():
        raise SystemExit(f"--nanogpt {folder}: no model.py there; clone https://github.com/karpathy/nanoGPT "
                         "outside this repository and pass its folder")
    if ROOT in path.parents:
        raise SystemExit(f"--nanogpt {folder} is inside this repository; nanoGPT's code stays outside it")
    spec = importlib.util.spec_from_file_location("nanogpt_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_pair(nano, size: dict, device: torch.device):
    """nanoGPT's GPT and the companion's, holding the same weights (float32, on ``device``)."""
    with contextlib.redirect_stdout(io.StringIO()):  # nanoGPT prints its parameter count
        theirs = nano.GPT(nano.GPTConfig(block_size=size["context_length"], vocab_size=size["vocab_size"],
                                         n_layer=size["n_layers"], n_head=size["n_heads"], n_embd=size["d_model"],
                                         dropout=0.0, bias=size["bias"]))
    ours = GPT(GPTConfig(**size, dropout=0.0))
    copy_weights(theirs, ours)
    return ours.to(device), theirs.to(device)


@torch.no_grad()
def copy_weights(theirs, ours: GPT) -> None:
    """nanoGPT's parameters into the companion's (names differ; nanoGPT's fused c_attn is split)."""
    t, C = theirs.transformer, ours.config.d_model
    pairs = [(ours.tok_emb.weight, t.wte.weight), (ours.pos_emb.weight, t.wpe.weight),
             (ours.final_norm.weight, t.ln_f.weight)]
    if ours.config.bias:
        pairs.append((ours.final_norm.bias, t.ln_f.bias))
    for block, h in zip(ours.blocks, t.h):
        a, f = block.attn, block.ff
        for i, proj in enumerate((a.q_proj, a.k_proj, a.v_proj)):
            pairs.append((proj.weight, h.attn.c_attn.weight[i * C : (i + 1) * C]))
            if ours.config.bias:
                pairs.append((proj.bias, h.attn.c_attn.bias[i * C : (i + 1) * C]))
        for mine, other in ((a.out_proj, h.attn.c_proj), (f.linear1, h.mlp.c_fc), (f.linear2, h.mlp.c_proj),
                            (block.norm1, h.ln_1), (block.norm2, h.ln_2)):
            pairs.append((mine.weight, other.weight))
            if ours.config.bias:
                pairs.append((mine.bias, other.bias))
    for mine, other in pairs:
        mine.copy_(other)


def check_same_function(ours, theirs, x, y) -> float:
    """The two losses (float32) on one batch; raises if they differ. Returns the loss."""
    with torch.no_grad():
        (_, a), (_, b) = ours(x, y), theirs(x, y)
    if not torch.allclose(a, b, rtol=1e-4, atol=1e-4):
        raise SystemExit(f"the two models disagree: companion loss {a.item():.6f}, nanoGPT {b.item():.6f}")
    return a.item()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()
    elif device.type == "mps":
        torch.mps.synchronize()


class Runner:
    """One model, its fused AdamW and one training step in the shared loop."""

    def __init__(self, model, device: torch.device, amp_dtype, compile_backend: str | None):
        self.model, self.device, self.amp_dtype = model.train(), device, amp_dtype
        fused = dict(fused=True) if device.type == "cuda" else {}
        self.opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, betas=(0.9, 0.95), **fused)
        self.forward = torch.compile(model, backend=compile_backend) if compile_backend else model

    def step(self, x, y) -> torch.Tensor:
        with torch.autocast(self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None):
            _, loss = self.forward(x, y)
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def time(self, x, y, steps: int) -> float:
        """Seconds for ``steps`` steps, the device synchronized before and after."""
        sync(self.device)
        t0 = time.perf_counter()
        for _ in range(steps):
            loss = self.step(x, y)
        sync(self.device)
        seconds = time.perf_counter() - t0
        if not torch.isfinite(loss):
            raise SystemExit("the loss is not finite")
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nanogpt", type=Path, required=True, help="a clone of github.com/karpathy/nanoGPT, outside this repository")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="steps per timed round")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds per model (median reported)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    parser.add_argument("--precision", nargs="+", default=["float32", "bf16"], choices=["float32", "bf16", "fp16"])
    parser.add_argument("--compile", nargs="+", default=["no", "yes"], choices=["no", "yes"])
    parser.add_argument("--compile-backend", default="inductor", help="torch.compile backend (inductor; eager to test the script)")
    parser.add_argument("--vocab-size", type=int, default=50304, help="50304 (padded, nanoGPT's choice) or 50257 (GPT-2's)")
    parser.add_argument("--no-bias", action="store_true", help="no biases (nanoGPT's bench.py default), instead of GPT-2's")
    parser.add_argument("--tf32", action="store_true", help="let float32 matrix products use TF32 tensor cores (nanoGPT's train.py does)")
    parser.add_argument("--small", action="store_true", help="a 2-layer, width-64 model: to try the script on a CPU")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    nano = load_nanogpt(args.nanogpt)
    device = torch.device(args.device)
    if args.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    size = dict(vocab_size=args.vocab_size, context_length=1024, d_model=768, n_layers=12, n_heads=12, bias=not args.no_bias)
    if args.small:
        size.update(vocab_size=512, context_length=64, d_model=64, n_layers=2, n_heads=4)
    B, T = args.batch, size["context_length"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else device.type
    print(f"{name}; torch {torch.__version__}" + (f", CUDA {torch.version.cuda}" if device.type == "cuda" else "")
          + f"; {datetime.date.today().isoformat()}; float32 matmul: {'TF32' if args.tf32 else 'full float32'}")

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(size["vocab_size"], (B, T), generator=gen).to(device)
    y = torch.randint(size["vocab_size"], (B, T), generator=gen).to(device)
    ours, theirs = build_pair(nano, size, device)
    loss = check_same_function(ours, theirs, x, y)
    print(f"model: {size['n_layers']} layers, width {size['d_model']}, {size['n_heads']} heads, context {T}, "
          f"vocabulary {size['vocab_size']:,}, bias {size['bias']}; {ours.num_parameters():,} parameters "
          f"(nanoGPT counts {theirs.get_num_params(non_embedding=False):,}); batch {B}; same loss {loss:.4f}")
    del ours, theirs

    dtypes = {"float32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
    rows = []
    print(f"\n{'precision':>9} {'compile':>7} | {'companion tok/s':>15} {'nanoGPT tok/s':>14} | {'ratio':>5} | peak GiB (c / n)")
    for precision in args.precision:
        for comp in args.compile:
            torch.manual_seed(0)
            ours, theirs = build_pair(nano, size, device)
            backend = args.compile_backend if comp == "yes" else None
            runners = {"companion": Runner(ours, device, dtypes[precision], backend),
                       "nanoGPT": Runner(theirs, device, dtypes[precision], backend)}
            peak = {}
            for key, r in runners.items():
                if device.type == "cuda":
                    torch.cuda.reset_peak_memory_stats(device)
                for _ in range(args.warmup):
                    r.step(x, y)
                sync(device)
                peak[key] = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else float("nan")
            seconds = {key: [] for key in runners}
            for _ in range(args.repeats):  # alternate: a drift in the GPU's clock affects both
                for key, r in runners.items():
                    seconds[key].append(r.time(x, y, args.steps))
            tps = {key: B * T * args.steps / statistics.median(s) for key, s in seconds.items()}
            ratio = tps["companion"] / tps["nanoGPT"]
            rows.append({"precision": precision, "compile": comp, "companion_tokens_per_s": tps["companion"],
                         "nanogpt_tokens_per_s": tps["nanoGPT"], "ratio": ratio, "peak_gib": peak})
            print(f"{precision:>9} {comp:>7} | {tps['companion']:>15,.0f} {tps['nanoGPT']:>14,.0f} | {ratio:>5.2f} | "
                  f"{peak['companion']:.1f} / {peak['nanoGPT']:.1f}", flush=True)
            del runners, ours, theirs
            if device.type == "cuda":
                torch.cuda.empty_cache()
    worst = min(r["ratio"] for r in rows)
    print(f"\nlowest ratio companion / nanoGPT: {worst:.2f} (goal: at least 1.00 in every column)")
    if args.json:
        args.json.write_text(json.dumps({"device": name, "torch": torch.__version__, "date": datetime.date.today().isoformat(),
                                         "batch": B, "size": size, "tf32": args.tf32, "rows": rows}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
