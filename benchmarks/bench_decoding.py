"""Decoding speed: tokens per second with and without the KV cache, and beam search time against k.

    .venv/bin/python benchmarks/bench_decoding.py [--threads 2] [--repeats 5] [--new-tokens 256]

Uses the shipped Shakespeare checkpoint (``companion/assets/shakespeare_char.safetensors``) when there is one, otherwise a
randomly initialised GPT of the same size (speed does not depend on the weights; the output says
which). Prints medians over ``--repeats`` runs and the ratios, measured in the same run.

One thread by default: generation multiplies tiny matrices (one new token), and on a busy 2-core
machine waking a second thread for each of them costs more than the product itself (we measured
5 tokens/s with 2 threads against 900 with 1). ``--threads 2`` shows it.

Generating 256 tokens goes past a 128-token context window. Both runs then use the same window
policy, ``refill_to = context_length // 2`` (the window jumps forward by half when full, see
:mod:`companion.decoding`), so they produce the same tokens, which is checked. The run without
the cache is also shown with the exact sliding window (every step recomputes the full window).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from companion.decoding import beam_search, greedy
from companion.model import GPT, GPTConfig


def load_model() -> tuple[GPT, str, torch.Tensor]:
    from companion.checkpoint import load_checkpoint, shipped_model_path

    try:
        path = shipped_model_path()
    except FileNotFoundError:
        path = None
    if path is not None:
        model, tokenizer, _ = load_checkpoint(path)
        prompt = tokenizer.encode("ROMEO:\nBut soft, what light")
        return model.eval(), f"shipped checkpoint {path.name}", prompt
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=69, context_length=128, d_model=128, n_layers=6, n_heads=4, bias=False)
    return GPT(config).eval(), "NO CHECKPOINT FOUND: randomly initialised GPT (ctx 128, d 128, 6 layers)", torch.arange(25) % 65


def median_time(fn, repeats: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--beam-tokens", type=int, default=64)
    parser.add_argument("--skip-wide", action="store_true", help="skip the wider random model (about a minute)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, what, prompt = load_model()
    c = model.config
    n = args.new_tokens
    print(f"model: {what}")
    print(f"  {model.num_parameters():,} parameters, context_length={c.context_length}, d_model={c.d_model}, "
          f"n_layers={c.n_layers}; torch {torch.__version__}, {args.threads} threads, median of {args.repeats}")
    refill = c.context_length // 2 if len(prompt) + n > c.context_length else None
    with torch.no_grad():
        greedy(model, prompt, 8)  # warm-up
        t_cache, out_cache = median_time(lambda: greedy(model, prompt, n, use_cache=True, refill_to=refill), args.repeats)
        t_plain, out_plain = median_time(lambda: greedy(model, prompt, n, use_cache=False, refill_to=refill), args.repeats)
        t_slide, _ = median_time(lambda: greedy(model, prompt, n, use_cache=False), args.repeats)
    assert torch.equal(out_cache, out_plain), "cached and uncached generation differ"
    print(f"\ngreedy, {n} new tokens after a {len(prompt)}-token prompt (refill_to={refill}):")
    print(f"  with KV cache         {n / t_cache:9.1f} tokens/s  ({t_cache * 1e3:7.1f} ms)")
    print(f"  without cache         {n / t_plain:9.1f} tokens/s  ({t_plain * 1e3:7.1f} ms)   speed-up with cache: {t_plain / t_cache:.1f}x")
    print(f"  without, exact slide  {n / t_slide:9.1f} tokens/s  ({t_slide * 1e3:7.1f} ms)   speed-up with cache: {t_slide / t_cache:.1f}x")
    within = c.context_length - len(prompt)
    with torch.no_grad():
        t_wc, _ = median_time(lambda: greedy(model, prompt, within, use_cache=True), args.repeats)
        t_wp, _ = median_time(lambda: greedy(model, prompt, within, use_cache=False), args.repeats)
    print(f"greedy, {within} new tokens (filling the window exactly): cache {within / t_wc:.1f} tokens/s, "
          f"no cache {within / t_wp:.1f} tokens/s, speed-up {t_wp / t_wc:.1f}x")

    if not args.skip_wide:
        # The gain grows with the work per token: a wider random model, all 256 tokens inside its window.
        torch.manual_seed(0)
        wide = GPT(GPTConfig(vocab_size=c.vocab_size, context_length=512, d_model=384, n_layers=6, n_heads=6, bias=False)).eval()
        reps = min(args.repeats, 3)
        with torch.no_grad():
            t_wc, out_c = median_time(lambda: greedy(wide, prompt, n, use_cache=True), reps)
            t_wp, out_p = median_time(lambda: greedy(wide, prompt, n, use_cache=False), reps)
        assert torch.equal(out_c, out_p)
        print(f"wider random GPT ({wide.num_parameters():,} parameters, d_model=384, 6 layers, context 512), {n} new tokens: "
              f"cache {n / t_wc:.1f} tokens/s, no cache {n / t_wp:.1f} tokens/s, speed-up {t_wp / t_wc:.1f}x")

    m = args.beam_tokens
    print(f"\nbeam search, {m} new tokens, no end of sequence (every step runs), median seconds:")
    print(f"  {'k':>3} {'with cache':>11} {'without':>9} {'ratio':>6}  {'per step (cache)':>16}")
    for k in (1, 2, 4, 8):
        with torch.no_grad():
            tc, rc = median_time(lambda: beam_search(model, prompt, m, k=k, use_cache=True), args.repeats)
            tp, rp = median_time(lambda: beam_search(model, prompt, m, k=k, use_cache=False), args.repeats)
        assert rc.best.tokens.tolist() == rp.best.tokens.tolist()
        print(f"  {k:>3} {tc:11.3f} {tp:9.3f} {tp / tc:5.1f}x  {tc / m * 1e3:13.2f} ms")


if __name__ == "__main__":
    main()
