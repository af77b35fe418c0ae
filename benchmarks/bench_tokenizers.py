"""companion.bpe against the compiled tokenizers: training on the plays and encoding them.

Run:  .venv/bin/python benchmarks/bench_tokenizers.py [--merges 1000] [--repeats 3]

Three measurements, each the median of ``--repeats`` runs, all in this one process so that the
ratios compare like with like on a busy machine:

* training ``--merges`` merges on the training plays: companion.bpe.train against Hugging Face
  ``tokenizers``' BpeTrainer (Rust, several threads unless RAYON_NUM_THREADS=1);
* encoding all the plays with GPT-2's real merges: the companion cold (an empty per-word cache) and
  warm (every distinct word already cached), against tiktoken and ``tokenizers`` built from the same
  files;
* the same split into its two stages for the companion: the pre-tokenization regex alone, and BPE on
  the distinct words alone, which is where the remaining gap comes from.

The ratios are companion / library (above 1: the companion is slower). Nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from companion import bpe, data


def timed(fn, repeats: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--merges", type=int, default=1000, help="merges to train (default 1000)")
    parser.add_argument("--repeats", type=int, default=3, help="runs per measurement (median)")
    args = parser.parse_args()
    if args.merges < 1 or args.repeats < 1:
        parser.error("--merges and --repeats must be at least 1")

    import tiktoken
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    train_text = data.load_split("train")
    plays = train_text + data.load_split("val")
    print(f"text: {len(plays):,} characters; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")

    # ---- training
    size = 256 + args.merges
    ours_s, ours_tok = timed(lambda: bpe.train(train_text, size), args.repeats)

    def hf_train():
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        trainer = trainers.BpeTrainer(vocab_size=size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator([train_text], trainer)
        return tok

    hf_s, hf_tok = timed(hf_train, args.repeats)
    hf_merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m)
                 for m in json.loads(hf_tok.to_str())["model"]["merges"]]
    same = hf_merges == [(bpe.token_to_printable(a), bpe.token_to_printable(b)) for a, b in ours_tok.merges]
    print(f"\ntraining {args.merges} merges on {len(train_text):,} characters (merges identical: {same})")
    print(f"  companion.bpe.train     {ours_s:7.2f} s")
    print(f"  tokenizers BpeTrainer   {hf_s:7.2f} s   ratio {ours_s / hf_s:5.1f}x")

    # ---- encoding with GPT-2's merges
    paths = bpe.gpt2_files()
    gpt2 = bpe.BPETokenizer.gpt2()
    ranks = data_gym_to_mergeable_bpe_ranks(str(paths["vocab.bpe"]), str(paths["encoder.json"]))
    tk = tiktoken.Encoding("gpt2-local", pat_str=bpe.GPT2_PATTERN, mergeable_ranks=ranks,
                           special_tokens={bpe.GPT2_END_OF_TEXT: 50256})
    hf = Tokenizer(models.BPE.from_file(str(paths["encoder.json"]), str(paths["vocab.bpe"])))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)

    def cold():
        gpt2._cache.clear()
        return gpt2.encode_ordinary(plays)

    cold_s, ids = timed(cold, args.repeats)
    warm_s, _ = timed(lambda: gpt2.encode_ordinary(plays), args.repeats)
    tk_s, tk_ids = timed(lambda: tk.encode_ordinary(plays), args.repeats)
    hf_s, hf_enc = timed(lambda: hf.encode(plays).ids, args.repeats)
    assert ids == tk_ids == hf_enc, "the three encoders disagree"
    words = bpe.pre_tokenize(plays)
    distinct = sorted(set(words))
    regex_s, _ = timed(lambda: bpe.pre_tokenize(plays), args.repeats)
    bpe_s, _ = timed(lambda: [gpt2.encode_word(w.encode("utf-8")) for w in distinct], args.repeats)
    print(f"\nencoding the plays with GPT-2's merges: {len(ids):,} tokens, "
          f"{len(words):,} pre-tokens, {len(distinct):,} distinct")
    print(f"  companion, cold cache   {cold_s:7.2f} s   ratio to tiktoken {cold_s / tk_s:5.1f}x, "
          f"to tokenizers {cold_s / hf_s:5.1f}x")
    print(f"  companion, warm cache   {warm_s:7.2f} s   ratio to tiktoken {warm_s / tk_s:5.1f}x, "
          f"to tokenizers {warm_s / hf_s:5.1f}x")
    print(f"  tiktoken                {tk_s:7.2f} s")
    print(f"  tokenizers              {hf_s:7.2f} s")
    print(f"  companion stages: regex {regex_s:.2f} s, BPE on the distinct words {bpe_s:.2f} s, "
          f"the rest (cache look-ups, list building) {max(cold_s - regex_s - bpe_s, 0):.2f} s")


if __name__ == "__main__":
    main()
