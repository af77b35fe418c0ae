"""Forward + backward time of companion.multihead.MultiHeadAttention against torch.nn.MultiheadAttention.

Run:  .venv/bin/python benchmarks/bench_attention.py [--threads N] [--repeats R]

Both modules hold the same weights and see the same input; each timing is one forward pass of
self-attention (without a mask, and causal; no weights returned: the training configuration) plus
a backward pass.
Prints the median over several runs for each and the ratio companion / torch (goal: <= 1.1).
A second table times the explicit math path (need_weights=True), which returns the weights and
cannot use the fused kernel, to show what the fast path buys.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn

from companion.attention import causal_mask
from companion.multihead import MultiHeadAttention

SIZES = [  # (B, T, d_model, n_heads)
    (8, 256, 256, 8),
    (8, 512, 512, 8),
]


def time_fwd_bwd(fn, x: torch.Tensor, repeats: int, warmup: int = 3) -> list[float]:
    times = []
    for i in range(warmup + repeats):
        x.grad = None
        start = time.perf_counter()
        out = fn(x)
        out.sum().backward()
        elapsed = time.perf_counter() - start
        if i >= warmup:
            times.append(elapsed)
    return times


def bench(B: int, T: int, d_model: int, n_heads: int, causal: bool, repeats: int) -> dict[str, float]:
    torch.manual_seed(0)
    ref = nn.MultiheadAttention(d_model, n_heads, batch_first=True)
    ours = MultiHeadAttention(d_model, n_heads).copy_from_torch(ref)
    x = torch.randn(B, T, d_model, requires_grad=True)
    torch_mask = ~causal_mask(T)  # torch: True = NOT allowed

    def run_torch(x):
        if causal:
            return ref(x, x, x, attn_mask=torch_mask, need_weights=False, is_causal=True)[0]
        return ref(x, x, x, need_weights=False)[0]

    def run_ours(x):
        return ours(x, is_causal=causal)[0]

    def run_ours_math(x):
        return ours(x, is_causal=causal, need_weights=True)[0]

    torch.testing.assert_close(run_ours(x), run_torch(x), rtol=1e-4, atol=1e-4)
    # interleave the candidates so that background load hits them alike
    t_torch, t_ours, t_math = [], [], []
    for _ in range(repeats):
        t_torch += time_fwd_bwd(run_torch, x, 1, warmup=1)
        t_ours += time_fwd_bwd(run_ours, x, 1, warmup=1)
        t_math += time_fwd_bwd(run_ours_math, x, 1, warmup=1)
    return {"torch": statistics.median(t_torch), "ours": statistics.median(t_ours), "math": statistics.median(t_math)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per module (default 15)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, forward+backward, median of {args.repeats} runs")
    print(f"{'B':>3} {'T':>5} {'d':>5} {'h':>3} {'mask':>6} | {'torch MHA':>10} {'companion':>10} {'ratio':>6} | {'math path':>10} {'ratio':>6}")
    for (B, T, d, h), causal in [(size, causal) for size in SIZES for causal in (False, True)]:
        r = bench(B, T, d, h, causal, args.repeats)
        print(
            f"{B:>3} {T:>5} {d:>5} {h:>3} {'causal' if causal else 'none':>6} | {r['torch'] * 1e3:>8.1f}ms {r['ours'] * 1e3:>8.1f}ms {r['ours'] / r['torch']:>6.2f} "
            f"| {r['math'] * 1e3:>8.1f}ms {r['math'] / r['torch']:>6.2f}"
        )


if __name__ == "__main__":
    main()
