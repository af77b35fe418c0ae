"""Wrong calls across the whole public API, as a careless user makes them (issue 14).

Each row: the call, the exception it must raise, and a pattern the message must match, which
names the argument in backquotes. None may end in a NaN, a silently wrong result or an error
from deep inside PyTorch. The first block holds the cases the issue listed; the others were
tried module by module. Other test files hold more (each module's own error tests).
"""
from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from companion import attention, block, checkpoint, data, decoding, encoder, model, multihead, norm, positional, vectors
from companion.data import CharTokenizer
from companion.decoding import beam_search, greedy, sample, sequence_log_prob, yes_ok_model
from companion.model import GPT, GPTCache, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py

CFG = GPTConfig(vocab_size=11, context_length=16, d_model=16, n_layers=2, n_heads=2)
NAN = float("nan")
INF = float("inf")


@pytest.fixture(scope="module")
def c(tmp_path_factory):
    """The objects the calls need, built once."""
    torch.manual_seed(0)
    gpt = GPT(CFG).eval()
    cache3 = gpt.new_cache()
    gpt(torch.zeros(3, 2, dtype=torch.long), cache=cache3)
    mha = multihead.MultiHeadAttention(16, 4)
    kv3 = attention.KVCache()
    mha(torch.randn(3, 2, 16), kv_cache=kv3)
    kv8 = attention.KVCache()
    multihead.MultiHeadAttention(16, 8)(torch.randn(2, 2, 16), kv_cache=kv8)
    kv_small = attention.KVCache()
    kv_small.append(torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4))
    tok = CharTokenizer("abcdefghijk")
    tmp = tmp_path_factory.mktemp("wrong_calls")
    path = checkpoint.save_checkpoint(tmp / "gpt.safetensors", gpt, tok)

    def nan_lm(ids):
        out = torch.zeros(*ids.shape, 4)
        out[..., 1] = NAN
        return out

    return SimpleNamespace(
        gpt=gpt, cache3=cache3, mha=mha, kv3=kv3, kv8=kv8, kv_small=kv_small, tok=tok, tmp=tmp, path=path,
        ids=torch.zeros(2, 4, dtype=torch.long), x=torch.randn(2, 5, 16), lm=yes_ok_model(), nan_lm=nan_lm,
        result=beam_search(yes_ok_model(), [0], 3, k=2, eos_id=3, return_trace=True),
        text_ids=torch.arange(60) % 11,
    )


def _targets(value):
    t = torch.zeros(2, 4, dtype=torch.long)
    t[1, 3] = value
    return t


# (call, exception, pattern): the pattern names the argument
ISSUE_14 = [
    # silently wrong before
    (lambda c: c.gpt(torch.zeros(2, 0, dtype=torch.long), torch.zeros(2, 0, dtype=torch.long)),
     ValueError, r"`idx` must not be empty: shape \(B, T\) needs T >= 1"),
    (lambda c: c.gpt.generate(c.ids, 3, temperature=INF), ValueError, r"`temperature` must be a finite number > 0"),
    (lambda c: sequence_log_prob(c.lm, [0], [1.7, 2.2]), TypeError, r"`continuation` must hold integer token ids"),
    (lambda c: sequence_log_prob(c.lm, [0], [[1, 2]]), ValueError, r"`continuation` must have shape \(T,\)"),
    (lambda c: greedy(c.nan_lm, [0], 3), ValueError, r"the logits returned by `model` .*must not hold NaN"),
    (lambda c: beam_search(c.nan_lm, [0], 3, k=2), ValueError, r"the logits returned by `model` .*must not hold NaN"),
    # crashes deep in PyTorch before
    (lambda c: c.gpt(torch.zeros(0, 4, dtype=torch.long)), ValueError, r"`idx` must not be empty.*needs B >= 1"),
    (lambda c: c.mha(torch.zeros(0, 4, 16)), ValueError, r"`query` must not be empty.*needs B >= 1"),
    (lambda c: attention.SelfAttention(16)(torch.zeros(0, 4, 16)), ValueError, r"`x` must not be empty"),
    (lambda c: c.gpt(c.ids, cache={}), TypeError, r"`cache` must be a GPTCache \(got dict\)"),
    (lambda c: c.gpt.generate(c.ids, 3, temperature=NAN), ValueError, r"`temperature` must be a finite number > 0"),
    (lambda c: c.gpt.generate(torch.zeros(1, 1, 3, dtype=torch.long), 3), ValueError,
     r"`idx` must have shape \(T,\) or \(B, T\)"),
    (lambda c: decoding.filter_logits([1.0, 2.0]), TypeError, r"`logits` must be a torch.Tensor"),
    (lambda c: sequence_log_prob(lambda ids: c.lm(ids), [0], [1, 4]), ValueError,
     r"`continuation` must hold token ids in \[0, 4\) \(got 4 at position 1\)"),
    (lambda c: checkpoint.save_checkpoint(c.tmp / "l.safetensors", nn.Linear(2, 2), c.tok), TypeError,
     r"`model` must be one of the companion's models"),
    (lambda c: checkpoint.load_checkpoint(c.path, nn.Linear(2, 2)), TypeError, r"`model` must be a GPT to load .* not a Linear"),
    # unclear before
    (lambda c: c.gpt(c.ids, _targets(11)), ValueError, r"`targets` must hold token ids in \[0, 11\) or -100"),
    (lambda c: c.gpt(c.ids, _targets(-1)), ValueError, r"`targets` must hold token ids in \[0, 11\) or -100 \(got -1"),
    (lambda c: c.gpt(c.ids[:, :1], cache=c.cache3), ValueError,
     r"`cache` holds 3 sequences but `idx` has batch size B=2"),
    (lambda c: c.mha(c.x, kv_cache=c.kv3), ValueError, r"`kv_cache` holds 3 sequences but `query` has batch size B=2"),
    (lambda c: sample(c.nan_lm, [0], 3), ValueError, r"the logits returned by `model` .*must not hold NaN"),
    (lambda c: c.kv3.reorder(torch.tensor([0, 5])), ValueError, r"`index` must hold rows of the cache's batch of B=3"),
    (lambda c: norm.LayerNorm(4)(torch.ones(2, 4, dtype=torch.long)), TypeError,
     r"`x` must be a floating-point tensor \(got dtype=torch.int64\)"),
]

VECTORS = [
    (lambda c: vectors.dot([1.0, NAN], [1.0, 2.0]), ValueError, r"`a` must hold finite numbers"),
    (lambda c: vectors.dot([], []), ValueError, r"`a` must hold at least one number"),
    (lambda c: vectors.angle([1, 0], "ab"), TypeError, r"`b` must be a vector of numbers"),
    (lambda c: vectors.length([[1.0, 2.0]]), ValueError, r"`a` must be a vector \(1 dimension\)"),
    (lambda c: vectors.all_scores(torch.ones(2, 3), torch.ones(2, 3), scale="yes"), TypeError,
     r"`scale` must be True or False"),
    (lambda c: vectors.all_scores(torch.ones(0, 3), torch.ones(2, 3)), ValueError, r"`queries` must not be empty"),
    (lambda c: vectors.all_scores(torch.ones(2, 3, dtype=torch.bool), torch.ones(2, 3)), TypeError,
     r"`queries` must be a tensor of real numbers"),
    (lambda c: vectors.random_dot_products(3.0, 10), TypeError, r"`d` must be a positive integer \(got d=3.0, a float\)"),
    (lambda c: vectors.random_dot_products(3, 10, generator=0), TypeError, r"`generator` must be None or a torch.Generator"),
]

ATTENTION = [
    (lambda c: attention.softmax(torch.ones(2, 3), dim=2), ValueError, r"`dim` must be an integer in \[-2, 1\]"),
    (lambda c: attention.causal_mask(True), TypeError, r"`T` must be a positive integer \(got T=True, a bool\)"),
    (lambda c: attention.padding_mask([1, 2], 2.5), TypeError, r"`S` must be a positive integer"),
    (lambda c: attention.padding_mask([[1, 2]], 3), ValueError, r"`lengths` must have shape \(B,\)"),
    (lambda c: attention.padding_mask("ab", 3), TypeError, r"`lengths` must be a 1-D tensor \(or list\) of integers"),
    (lambda c: attention.scaled_dot_product_attention(c.x, c.x, c.x, is_causal=1), TypeError,
     r"`is_causal` must be True or False"),
    (lambda c: attention.scaled_dot_product_attention(c.x, c.x, c.x, dropout_p=NAN), ValueError,
     r"`dropout_p` must be a number in \[0, 1\)"),
    (lambda c: attention.scaled_dot_product_attention(c.x, c.x[:, :, :0], c.x), ValueError, r"`k` must not be empty"),
    (lambda c: attention.SelfAttention(16)(c.x.double()), TypeError,
     r"`x` has dtype torch.float64 but the module's weights have torch.float32"),
    (lambda c: attention.SelfAttention(16, bias=1), TypeError, r"`bias` must be True or False"),
    (lambda c: attention.SelfAttention(16, d_head=0), ValueError, r"`d_head` must be a positive integer"),
    (lambda c: attention.KVCache().reorder([0]), TypeError, r"`index` must be a torch.Tensor"),
    (lambda c: c.kv_small.append(torch.randn(3, 1, 1, 4), torch.randn(3, 1, 1, 4)), ValueError,
     r"new `k`, `v` must match the cache's \(B, h, d_head\) = \(2, 1, 4\)"),
    (lambda c: c.kv_small.append(torch.randn(2, 1, 1, 4).double(), torch.randn(2, 1, 1, 4).double()), ValueError,
     r"new `k`, `v` must have the cache's device and dtype"),
]

MULTIHEAD = [
    (lambda c: multihead.MultiHeadAttention(16, 4)(c.x, kv_cache=c.kv8), ValueError,
     r"`kv_cache` was filled by another layer \(h=8, d_head=2; this one has h=4, d_head=4\)"),
    (lambda c: multihead.MultiHeadAttention(16, 4, dropout=-0.1), ValueError, r"`dropout` must be a number in \[0, 1\)"),
    (lambda c: multihead.MultiHeadAttention(16, 4, bias=None), TypeError, r"`bias` must be True or False"),
    (lambda c: c.mha(c.x, need_weights="yes"), TypeError, r"`need_weights` must be True or False"),
    (lambda c: c.mha(c.x.double()), TypeError, r"`query` has dtype torch.float64"),
    (lambda c: c.mha(torch.zeros(2, 0, 16)), ValueError, r"`query` must not be empty.*needs T >= 1"),
    (lambda c: c.mha(c.x, c.x[:, :, :8]), ValueError, r"`key` must have shape \(B, S, d_model=16\)"),
    (lambda c: c.mha(c.x, key_mask=[[True] * 5] * 2), TypeError, r"`key_mask` must be a bool tensor"),
]

NORM = [
    (lambda c: norm.LayerNorm(8, eps=NAN), ValueError, r"`eps` must be a finite number > 0 \(got eps=nan\)"),
    (lambda c: norm.LayerNorm(8.0), TypeError, r"`d_model` must be a positive integer \(got d_model=8.0, a float\)"),
    (lambda c: norm.LayerNorm(4, bias="no"), TypeError, r"`bias` must be True or False"),
    (lambda c: norm.RMSNorm(4)(torch.ones(2, 4, dtype=torch.int32)), TypeError, r"`x` must be a floating-point tensor"),
    (lambda c: norm.LayerNorm(4)(torch.tensor(1.0)), ValueError, r"`x` must have shape \(\.\.\., d_model=4\)"),
]

POSITIONAL = [
    (lambda c: positional.sinusoidal_encoding(10, 8, c=1.0), ValueError, r"`c` must be a finite number > 1"),
    (lambda c: positional.sinusoidal_encoding(10, 8, dtype=torch.long), ValueError,
     r"`dtype` must be a floating-point dtype"),
    (lambda c: positional.sinusoidal_encoding(10, 8, dtype="float32"), TypeError, r"`dtype` must be a torch.dtype"),
    (lambda c: positional.sinusoidal_encoding(10.0, 8), TypeError, r"`context_length` must be a positive integer"),
    (lambda c: positional.apply_rotary(torch.zeros(2, 4), offset=-1), ValueError,
     r"`offset` must be a non-negative integer \(got offset=-1\)"),
    (lambda c: positional.apply_rotary(torch.zeros(2, 4, dtype=torch.long)), TypeError,
     r"`x` must be a floating-point tensor"),
    (lambda c: positional.apply_rotary([[1.0, 2.0]]), TypeError, r"`x` must be a torch.Tensor"),
    (lambda c: positional.SinusoidalPositionalEncoding(8, 16)(torch.zeros(1, 3, 8), offset=2.0), TypeError,
     r"`offset` must be a non-negative integer \(got offset=2.0, a float\)"),
    (lambda c: positional.SinusoidalPositionalEncoding(8, 16)(torch.zeros(1, 3, 8), offset=15), ValueError,
     r"`x` holds positions 15\.\.17, which do not fit the table of context_length=16"),
    (lambda c: positional.LearnedPositionalEmbedding(0, 8), ValueError, r"`context_length` must be a positive integer"),
    (lambda c: positional.shift_matrix(1, 8, c=0.5), ValueError, r"`c` must be a finite number > 1"),
]

BLOCK = [
    (lambda c: block.FeedForward(8, 32, dropout=1.0), ValueError, r"`dropout` must be a number in \[0, 1\)"),
    (lambda c: block.FeedForward(8, 32)(torch.randn(2, 3, 8).double()), TypeError, r"`x` has dtype torch.float64"),
    (lambda c: block.FeedForward(8, None), TypeError, r"`d_ff` must be a positive integer"),
    (lambda c: block.TransformerBlock(8, 2, norm_first="pre"), TypeError, r"`norm_first` must be True or False"),
    (lambda c: block.TransformerBlock(8, 3), ValueError, r"`d_model` must be divisible by `n_heads`"),
    (lambda c: block.TransformerBlock(8, 2)(torch.zeros(0, 3, 8)), ValueError, r"`x` must not be empty"),
    (lambda c: block.DecoderBlock(8, 2)(torch.randn(2, 3, 8), [[1.0]]), TypeError, r"`memory` must be a torch.Tensor"),
    (lambda c: block.DecoderBlock(8, 2)(torch.randn(2, 3, 8), torch.randn(2, 4, 8).long()), TypeError,
     r"`memory` must be a floating-point tensor"),
    (lambda c: block.count_parameters(d_model=8, n_layers=1, bias="yes"), TypeError, r"`bias` must be True or False"),
    (lambda c: block.count_parameters(d_model=8, n_layers=1, n_heads=0), ValueError, r"`n_heads` must be a positive integer"),
    (lambda c: block.block_parameters(8, 0), ValueError, r"`d_ff` must be a positive integer"),
    (lambda c: block.EncoderBlock(8, 2)(torch.randn(2, 3, 8), key_mask=torch.ones(2, 3)), TypeError,
     r"`key_mask` must be a bool tensor"),
]

ENCODER = [
    (lambda c: encoder.Encoder(2.0, 8, 2), TypeError, r"`n_layers` must be a positive integer \(got n_layers=2.0"),
    (lambda c: encoder.Encoder(1, 8, 2, final_norm=None), TypeError, r"`final_norm` must be True or False"),
    (lambda c: encoder.Encoder(1, 8, 2)(torch.randn(2, 5, 8), key_mask=torch.ones(2, 4, dtype=torch.bool)), ValueError,
     r"`key_mask` must have shape \(B, S\) = \(2, 5\)"),
    (lambda c: encoder.Encoder(1, 8, 2)(torch.zeros(0, 5, 8)), ValueError, r"`x` must not be empty.*needs B >= 1"),
    (lambda c: encoder.Encoder(1, 8, 2)(torch.randn(2, 5, 8), attn_mask=torch.ones(5, 5, dtype=torch.int32)),
     TypeError, r"`attn_mask` must be bool"),
    (lambda c: encoder.Encoder(1, 8, 2)(torch.randn(2, 5, 8).tolist()), TypeError, r"`x` must be a torch.Tensor"),
    (lambda c: encoder.Encoder(1, 8, 2, activation="swish"), ValueError, r"`activation` must be one of"),
]

MODEL = [
    (lambda c: GPTConfig(vocab_size=69.0), TypeError, r"`vocab_size` must be a positive integer"),
    (lambda c: GPTConfig(d_ff=0), ValueError, r"`d_ff` must be a positive integer"),
    (lambda c: GPTConfig(bias="no"), TypeError, r"`bias` must be True or False"),
    (lambda c: GPTConfig(dropout=NAN), ValueError, r"`dropout` must be a number in \[0, 1\)"),
    (lambda c: c.gpt(c.ids, c.ids.float()), TypeError, r"`targets` must be an integer tensor"),
    (lambda c: c.gpt(c.ids, c.ids.int()), TypeError, r"`targets` must hold token ids of dtype torch.int64"),
    (lambda c: c.gpt(c.ids, c.ids[:, :3]), ValueError, r"`targets` must have the shape of `idx` \(2, 4\)"),
    (lambda c: c.gpt(c.ids.to(torch.uint8)), TypeError, r"`idx` must hold token ids of dtype torch.int64 or torch.int32"),
    (lambda c: c.gpt(c.ids, cache=GPTCache(1)), ValueError, r"`cache` was made for a model of 1 layers"),
    (lambda c: c.gpt.generate(c.ids, 5, top_k=0.5), TypeError, r"`top_k` must be a positive integer"),
    (lambda c: c.gpt.generate(c.ids, 5, generator=0), TypeError, r"`generator` must be None or a torch.Generator"),
    (lambda c: c.gpt.generate(c.ids, 5.0), TypeError, r"`max_new_tokens` must be a non-negative integer"),
    (lambda c: c.gpt.generate(torch.tensor([0, 11]), 2), ValueError, r"`idx` must hold token ids in \[0, 11\)"),
    (lambda c: c.gpt.generate([0, 1], 2), TypeError, r"`idx` must be a torch.Tensor"),
    (lambda c: c.gpt.num_parameters(include_position="yes"), TypeError, r"`include_position` must be True or False"),
    (lambda c: c.gpt.attention_weights(torch.zeros(1, 17, dtype=torch.long)), ValueError,
     r"crop `idx` to its last 16 tokens"),
]

DECODING = [
    (lambda c: greedy(c.lm, "hello", 3), TypeError, r"`prompt` must be token ids, not text"),
    (lambda c: greedy(c.lm, [0], 3, eos_id=True), TypeError, r"`eos_id` must be a non-negative integer"),
    (lambda c: greedy(c.lm, [0], 3, use_cache="yes"), TypeError, r"`use_cache` must be True or False"),
    (lambda c: greedy("gpt2", [0], 3), TypeError, r"`model` must be callable"),
    (lambda c: greedy(c.lm, [0], 3, repetition_penalty=0), ValueError, r"`repetition_penalty` must be a finite number > 0"),
    (lambda c: greedy(c.lm, [0], 3, repetition_penalty=NAN), ValueError, r"`repetition_penalty` must be"),
    (lambda c: greedy(c.lm, [0], 3, no_repeat_ngram_size=1.5), TypeError, r"`no_repeat_ngram_size` must be"),
    (lambda c: greedy(c.lm, [0], 6, no_repeat_ngram_size=1), ValueError, r"`no_repeat_ngram_size`=1 leaves sequence 0"),
    (lambda c: greedy(c.gpt, [0, 11], 3), ValueError, r"`prompt` must hold token ids in \[0, 11\)"),
    (lambda c: greedy(c.lm, [0], 0, eos_id=9), ValueError, r"`eos_id` must be an integer in \[0, 3\]"),
    (lambda c: sample(c.lm, [0], 3, generator=42), TypeError, r"`generator` must be None or a torch.Generator"),
    (lambda c: sample(c.lm, [0], 3, temperature=INF), ValueError, r"`temperature` must be a finite number > 0"),
    (lambda c: sample(c.lm, [0], 3, top_p=NAN), ValueError, r"`top_p` must be a number in \(0, 1\]"),
    (lambda c: sample(c.lm, [0], 3, top_k=True), TypeError, r"`top_k` must be a positive integer"),
    (lambda c: beam_search(c.lm, [0], 3, k=2, no_repeat_ngram_size=-1), ValueError, r"`no_repeat_ngram_size` must be"),
    (lambda c: beam_search(c.lm, [0], 3, k=2, length_penalty=INF), ValueError, r"`length_penalty` must be a finite"),
    (lambda c: beam_search(c.lm, [0], 3, k=2.0), TypeError, r"`k` must be a positive integer"),
    (lambda c: beam_search(c.lm, [0], 3, k=2, return_trace=1), TypeError, r"`return_trace` must be True or False"),
    (lambda c: beam_search(c.lm, [0], 3, k=2, n_best=0), ValueError, r"`n_best` must be a positive integer"),
    (lambda c: c.result.tokens, AttributeError, r"a BeamSearchResult has no `tokens`.*result\.best\.tokens"),
    (lambda c: decoding.filter_logits(torch.tensor([1.0, NAN])), ValueError, r"`logits` must not hold NaN"),
    (lambda c: decoding.filter_logits(torch.full((3,), -INF)), ValueError,
     r"`logits` must leave at least one possible token, but every entry is -inf"),
    (lambda c: decoding.filter_logits(torch.tensor([1.0, INF])), ValueError, r"`logits` must not hold \+inf"),
    (lambda c: decoding.next_token_probs(torch.tensor([True, False])), TypeError, r"`logits` must be a tensor of real"),
    (lambda c: decoding.filter_logits(torch.tensor([1.0, 2.0]), temperature=1e-40), ValueError,
     r"`temperature`=1e-40 must not hold \+inf"),
    (lambda c: decoding.next_token_probs(torch.zeros(2, 0)), ValueError, r"`logits` must not be empty"),
    (lambda c: sequence_log_prob(c.lm, [0], "yes"), TypeError, r"`continuation` must be token ids, not text"),
    (lambda c: sequence_log_prob(c.lm, [[0], [0]], [1]), ValueError, r"`prompt` must be one sequence of shape \(T,\)"),
    (lambda c: decoding.plot_beam_tree(c.result), TypeError, r"`trace` must be the trace of a search, result\.trace"),
    (lambda c: decoding.plot_beam_tree(None), TypeError, r"`trace` must be a list of BeamStep"),
    (lambda c: decoding.TableLM({(0,): [0.5, 0.5]}, vocab_size=2.0), TypeError, r"`vocab_size` must be a positive integer"),
    (lambda c: decoding.TableLM({(0,): [NAN, 1.0]}, vocab_size=2), ValueError, r"each row of `table` must hold 2"),
    (lambda c: decoding.TableLM({(0,): [0.5, 0.5]}, vocab_size=2, itos=["a"]), ValueError, r"`itos` must name each"),
    (lambda c: c.lm.encode("yes maybe"), ValueError, r"`words` holds 'maybe'"),
    (lambda c: c.lm.decode([5]), ValueError, r"`ids` must hold token ids in \[0, 4\)"),
    (lambda c: c.lm(torch.tensor([[0, 9]])), ValueError, r"`ids` must hold token ids in \[0, 4\)"),
]

DATA = [
    (lambda c: CharTokenizer(["a", "b"]), TypeError, r"`chars` must be a str"),
    (lambda c: CharTokenizer(""), ValueError, r"`chars` must hold at least one character"),
    (lambda c: CharTokenizer.from_text(b"bytes"), TypeError, r"`text` must be a str"),
    (lambda c: c.tok.decode([True]), TypeError, r"`ids` must hold integer token ids"),
    (lambda c: c.tok.decode([[0, 1]]), ValueError, r"`ids` must be one sequence of shape \(T,\)"),
    (lambda c: c.tok.encode(None), TypeError, r"`text` must be a str"),
    (lambda c: data.get_batch(c.text_ids.float(), 2, 8), TypeError, r"`ids` must be an integer tensor"),
    (lambda c: data.get_batch(c.text_ids, 0, 8), ValueError, r"`batch_size` must be a positive integer"),
    (lambda c: data.get_batch(c.text_ids, 2, 60), ValueError, r"`ids` must be longer than context_length=60"),
    (lambda c: data.get_batch(c.text_ids.tolist(), 2, 8), TypeError, r"`ids` must be a torch.Tensor"),
    (lambda c: data.play_text(3), TypeError, r"`name` must be a play's name"),
    (lambda c: data.load_split(None), ValueError, r"`split` must be 'train' or 'val'"),
]

CHECKPOINT = [
    (lambda c: checkpoint.save_checkpoint(c.tmp, c.gpt, c.tok), ValueError, r"`path` must name a file, but .* is a folder"),
    (lambda c: checkpoint.save_checkpoint(c.tmp / "i.safetensors", c.gpt, c.tok, info=[1]), TypeError,
     r"`info` must be a dict or None"),
    (lambda c: checkpoint.save_checkpoint(c.tmp / "t.safetensors", c.gpt, CharTokenizer("ab")), ValueError,
     r"`tokenizer` and `model` disagree: the tokenizer has 2 tokens but the model's vocab_size is 11"),
    (lambda c: checkpoint.save_checkpoint(c.tmp / "t.safetensors", c.gpt, "abc"), TypeError, r"`tokenizer` must be one"),
    (lambda c: checkpoint.read_checkpoint(3), TypeError, r"`path` must be a str or pathlib.Path \(got int\)"),
    (lambda c: checkpoint.load_checkpoint(b"gpt.safetensors"), TypeError, r"`path` must be a str or pathlib.Path"),
    (lambda c: checkpoint.load_checkpoint(""), ValueError, r"`path` must name a file"),
    (lambda c: checkpoint.load_checkpoint(c.path, model="gpt"), TypeError, r"`model` must be None or a companion model"),
    (lambda c: checkpoint.upgrade_checkpoint(c.path, None), TypeError, r"`new_path` must be a str or pathlib.Path"),
]

# --- issue 19: the modules of chapters 9 and 10 ----------------------------------------------------

@pytest.fixture(scope="module")
def s2s():
    """A tiny translation model, its tokenizer, a tiny encoder and the chapter 10 tokenizer."""
    from companion import mlm, translation
    from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    torch.manual_seed(0)
    model = Seq2SeqTransformer(Seq2SeqConfig(vocab_size=12, pad_id=0, context_length=16, d_model=16, n_heads=2,
                                             n_encoder_layers=1, n_decoder_layers=1)).eval()
    src, tgt = torch.randint(1, 12, (2, 5)), torch.randint(1, 12, (2, 4))
    mtok = mlm.MaskedCharTokenizer("abc ")
    enc = mlm.EncoderLM(mlm.EncoderLMConfig(vocab_size=mtok.vocab_size, context_length=8, d_model=16, n_layers=1,
                                            n_heads=2))
    return SimpleNamespace(m=model, src=src, tgt=tgt, cond=model.conditioned_on(src), mtok=mtok, enc=enc,
                           tok=translation.TranslationTokenizer.from_texts(["one two", "eins zwei"]),
                           tr=translation, mlm=mlm)


def _left_padded(s):
    return s.m(s.src, s.tgt, tgt_key_mask=torch.tensor([[False, True, True, True], [True] * 4]))


ISSUE_19 = [
    (lambda s: greedy(s.m, [1], 3), TypeError, r"`model` is an encoder-decoder \(Seq2SeqTransformer\).*"
     r"`model\.conditioned_on\(src\)`"),
    (lambda s: beam_search(s.m, [1], 3, k=2), TypeError, r"Pass `model\.conditioned_on\(src\)`"),
    (lambda s: sequence_log_prob(s.m, [1], [2]), TypeError, r"`model` is an encoder-decoder"),
    (lambda s: s.tr.translate(s.m, s.tok, ["one"], batch_size=0), ValueError, r"`batch_size` must be a positive integer"),
    (lambda s: s.tr.evaluate(s.m, s.tok, [("one",)], decoders={"greedy": {}}), ValueError,
     r"`data` must be a list of \(source, reference\) pairs of strings.*\('one',\) at index 0"),
    (lambda s: s.tr.number_splits(held_out_endings=None), TypeError, r"`held_out_endings` must be a sequence"),
    (lambda s: s.tr.chrf(["abc"], ["abd"], beta=INF), ValueError, r"`beta` must be a positive number, finite"),
    (lambda s: s.tr.chrf(["abc"], ["abd"], beta=NAN), ValueError, r"`beta` must be a positive number"),
    (lambda s: s.mlm.mlm_loss(torch.full((2, 3, 5), NAN), torch.tensor([[1, -100, 2], [0, 1, -100]])), ValueError,
     r"`logits` must not hold NaN .*makes the loss NaN"),
    (lambda s: _left_padded(s), ValueError, r"`tgt_key_mask` must mark right padding.*rows \[0\]"),
    (lambda s: greedy(s.cond, torch.ones(3, 1, dtype=torch.long), 3), ValueError,
     r"`ids` must have as many rows as the source \(B=2\).*conditioned_on\(src\[i:i\+1\]\)"),
    (lambda s: beam_search(s.cond, [1], 3, k=2), ValueError, r"the 2 source rows given to conditioned_on\(\)"),
    (lambda s: s.m(s.src, s.tgt, torch.full((2, 4), 12)), ValueError,
     r"`targets` must hold token ids in \[0, 12\) or -100 \(got 12 .*pad_id=0 and -100"),
    (lambda s: s.m(s.src, s.tgt, torch.full((2, 4), -3)), ValueError, r"`targets` must hold token ids .* \(got -3"),
]

# --- tried afresh on the modules of chapters 7 to 10 (the ones that were not clear before) ---------
CHAPTERS_7_TO_10 = [
    (lambda s: s.tr.evaluate(s.m, s.tok, [("one", "eins")], decoders={"x": {"beam": 3}}), ValueError,
     r"`decoders\['x'\]` names \['beam'\], which translate\(\) does not take"),
    (lambda s: s.tr.translate(s.m, s.mtok, ["one"]), TypeError, r"`tokenizer` must be a TranslationTokenizer"),
    (lambda s: s.tr.translate(s.m, s.tok, ["one"], k=2, length_penalty=NAN), ValueError, r"`length_penalty` must be"),
    (lambda s: s.tr.chrf(["a"], ["a"], beta="2"), ValueError, r"`beta` must be a positive number"),
    (lambda s: s.mlm.mlm_loss(torch.full((1, 3, 5), INF), torch.tensor([[1, 2, 3]])), ValueError,
     r"`logits` must not hold \+inf"),
    (lambda s: __import__("companion.train").train.learning_rate(NAN, __import__("companion.train").train.TrainConfig()),
     ValueError, r"`progress` must be a finite number >= 0"),
    (lambda s: __import__("companion.train").train.learning_rate(-0.5, __import__("companion.train").train.TrainConfig()),
     ValueError, r"`progress` must be a finite number >= 0"),
    (lambda s: __import__("companion.train").train.learning_rate(0.5, {"learning_rate": 1}), TypeError,
     r"`cfg` must be a companion.train.TrainConfig"),
    (lambda s: __import__("companion.train").train.estimate_loss(GPT(CFG), torch.arange(60) % 11, 2, 0), ValueError,
     r"`batch_size` must be a positive integer"),
    (lambda s: __import__("companion.train").train.estimate_loss(GPT(CFG), torch.arange(60) % 11, 0, 2), ValueError,
     r"`batches` must be a positive integer"),
    (lambda s: __import__("companion.train").train.plot_losses(None), TypeError,
     r"`history` must be the History that Trainer.run returns"),
    (lambda s: __import__("companion.train").train.windows(torch.arange(20), torch.tensor([15]), 8), ValueError,
     r"`starts` must leave a window of context_length=8 .* each in \[0, 11\]"),
    (lambda s: __import__("companion.train").train.windows(torch.arange(20), torch.tensor([-1]), 8), ValueError,
     r"`starts` must leave a window"),
    (lambda s: s.m.decode(s.tgt[:1], cache=s.m.new_cache(s.m.encode(s.src))), ValueError,
     r"`cache` holds 2 source rows but the target has batch size B=1"),
    (lambda s: s.tok.encode("one", bos="yes"), TypeError, r"`bos` must be True or False"),
    (lambda s: greedy(s.enc, [1], 3), TypeError, r"`model` is chapter 10's encoder \(EncoderLM\).*cannot generate"),
    (lambda s: sequence_log_prob(s.enc, [1], [2]), TypeError, r"`model` is chapter 10's encoder"),
    (lambda s: s.tr.train(s.m, s.tok, [("one", "eins")], __import__("companion.train").train.TrainConfig(max_steps=1),
                          valid=[("one",)]), ValueError, r"`valid` must be a list of \(source, target\) pairs"),
    (lambda s: s.tr.train(s.m, s.tok, [("one", "eins", "x")], __import__("companion.train").train.TrainConfig(
        max_steps=1)), ValueError, r"`data` must be a list of \(source, target\) pairs .* at index 0"),
]

TABLE = ISSUE_14 + VECTORS + ATTENTION + MULTIHEAD + NORM + POSITIONAL + BLOCK + ENCODER + MODEL + DECODING + DATA \
    + CHECKPOINT


@pytest.mark.parametrize("call, kind, pattern", TABLE, ids=[f"{i:03d}" for i in range(len(TABLE))])
def test_a_wrong_call_raises_a_clear_error_naming_the_argument(c, call, kind, pattern):
    with pytest.raises(kind, match=pattern) as info:
        call(c)
    assert "`" in str(info.value), "the message names the argument in backquotes"


def test_the_table_is_large():
    assert len(ISSUE_14) >= 23 and len(TABLE) - len(ISSUE_14) >= 40


S2S_TABLE = ISSUE_19 + CHAPTERS_7_TO_10


@pytest.mark.parametrize("call, kind, pattern", S2S_TABLE, ids=[f"s{i:02d}" for i in range(len(S2S_TABLE))])
def test_a_wrong_call_on_chapters_7_to_10_raises_a_clear_error(s2s, call, kind, pattern):
    with pytest.raises(kind, match=pattern) as info:
        call(s2s)
    assert "`" in str(info.value), "the message names the argument in backquotes"


def test_the_seq2seq_loss_agrees_with_the_gpt_on_ignored_targets(s2s):
    """-100 (the GPT's ignore_index) and pad_id both leave a position out; nothing left gives 0
    with a zero gradient, as the GPT's loss does, never NaN."""
    m, src, tgt = s2s.m, s2s.src, s2s.tgt
    y = torch.randint(1, 12, (2, 4))
    with_pad, with_ignore = y.clone(), y.clone()
    with_pad[0, 2], with_ignore[0, 2] = 0, -100
    assert torch.equal(m(src, tgt, with_pad)[1], m(src, tgt, with_ignore)[1])
    logits = m(src, tgt)[0]
    kept = with_pad != 0
    expected = torch.nn.functional.cross_entropy(logits[kept], y[kept])
    torch.testing.assert_close(m(src, tgt, with_ignore)[1], expected)
    model = s2s.m.train()
    try:
        loss = model(src, tgt, torch.full((2, 4), -100))[1]
        loss.backward()
        assert loss.item() == 0.0 and all(p.grad is None or not p.grad.any() for p in model.parameters())
        gpt = GPT(CFG)
        assert gpt(torch.zeros(2, 4, dtype=torch.long), torch.full((2, 4), -100))[1].item() == 0.0
        assert model(src, tgt, torch.zeros(2, 4, dtype=torch.long))[1].item() == 0.0
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()


def test_chrf_with_a_huge_or_tiny_beta_tends_to_recall_or_precision(s2s):
    chrf = s2s.tr.chrf
    hyp, ref = ["abcdef ghi"], ["abcdxf gh"]
    recall, precision = chrf(hyp, ref, beta=1e300), chrf(hyp, ref, beta=1e-300)
    assert recall == pytest.approx(chrf(hyp, ref, beta=1e6), rel=1e-9)
    assert precision == pytest.approx(chrf(hyp, ref, beta=1e-6), rel=1e-9)
    assert precision < chrf(hyp, ref, beta=1.0) < recall  # here recall is the larger
    assert chrf(hyp, ref, beta=1e154) == pytest.approx(recall)  # no overflow to inf on the way


def test_a_float64_seq2seq_model_has_the_float64_sinusoid_table():
    from companion.positional import sinusoidal_encoding
    from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    cfg = Seq2SeqConfig(vocab_size=12, pad_id=0, context_length=512, d_model=16, n_heads=2, n_encoder_layers=1,
                        n_decoder_layers=1)
    exact = sinusoidal_encoding(512, 16, dtype=torch.float64)
    for model in (Seq2SeqTransformer(cfg).double(), Seq2SeqTransformer(cfg).float().double(),
                  Seq2SeqTransformer(cfg).to(torch.float64)):
        assert model.pos.table.dtype == torch.float64
        assert torch.equal(model.pos.table, exact)  # rounded from float64, not widened from float32
    assert not torch.equal(exact.float().double(), exact)  # (which would differ)
    half = Seq2SeqTransformer(cfg).half()
    assert torch.equal(half.pos.table, exact.half())


# --- the command lines: every argument checked before training, one line, no traceback -------------

CLI = [
    ("companion.translation", ["evaluate", "{tmp}/missing.safetensors"], r"evaluate: error: no checkpoint at"),
    ("companion.translation", ["evaluate", "{tmp}/damaged.safetensors"], r"evaluate: error: checkpoint .* is truncated"),
    ("companion.translation", ["evaluate", "{shipped_gpt}"], r"holds a GPT, not the translation model"),
    ("companion.translation", ["evaluate", "x", "--threads", "0"], r"--threads must be an integer >= 1"),
    ("companion.translation", ["train", "--steps", "1", "--out", "{tmp}"], r"train: error: --out must name a file, "
     r"but .* is a folder"),
    ("companion.translation", ["train", "--steps", "1", "--out", "{tmp}/a_file/x.safetensors"],
     r"--out cannot be written: .*a_file' is a file"),
    ("companion.translation", ["train", "--seed", "-1", "--out", "x.safetensors"], r"--seed must be an integer >= 0"),
    ("companion.mlm", ["--threads", "0"], r"companion.mlm: error: --threads must be an integer >= 1 \(got 0\)"),
    ("companion.mlm", ["--positions", "0"], r"--positions must be an integer >= 1 \(got 0\)"),
    ("companion.mlm", ["--positions", "100000000", "--out", "{tmp}/m.safetensors"],
     r"--positions 100000000: it must be between 1 and \d+"),
    ("companion.mlm", ["--steps", "1", "--out", "{tmp}"], r"--out must name a file, but .* is a folder"),
    ("companion.mlm", ["--steps", "0"], r"--steps must be an integer >= 1"),
    ("companion.train", ["--device", "cuda", "--out", "{tmp}/g.safetensors"], r"companion.train: error: --device is "
     r"'cuda' but this PyTorch sees no CUDA GPU"),
    ("companion.train", ["--out", "{tmp}"], r"--out must name a file, but .* is a folder"),
    ("companion.train", ["--steps", "0"], r"--steps must be an integer >= 1"),
    ("companion.train", ["--time", "-1"], r"--time must be a number of seconds > 0"),
    ("companion.train", ["--time", "nan"], r"--time must be a number of seconds > 0"),
    ("companion.train", ["--threads", "0"], r"--threads must be an integer >= 1"),
    ("companion.train", ["--resume", "{tmp}/missing.safetensors"], r"--resume .*missing.safetensors: no such file"),
    ("companion.train", ["--resume", "{tmp}/damaged.safetensors", "--out", "{tmp}/g.safetensors"],
     r"checkpoint .* is truncated"),
    ("companion.train", ["--config-file", "{tmp}/bad.json"], r"--config-file .* must hold"),
    ("companion.train", ["--set", "n_heads=5", "--out", "{tmp}/g.safetensors"], r"`d_model` must be divisible by "
     r"`n_heads`"),
    ("companion.train", ["--out", "{shipped_gpt}"], r"is the shipped model"),
]


@pytest.fixture(scope="module")
def cli_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    (tmp / "damaged.safetensors").write_bytes(b"not a checkpoint")
    (tmp / "a_file").write_text("x")
    (tmp / "bad.json").write_text('{"model": 3}')
    return {"tmp": str(tmp), "shipped_gpt": str(checkpoint.shipped_model_path())}


@pytest.mark.parametrize("module, args, pattern", CLI, ids=[f"{m.split('.')[1]}-{i}" for i, (m, *_) in enumerate(CLI)])
def test_a_command_line_refuses_a_bad_argument_in_one_line_before_training(module, args, pattern, cli_files,
                                                                           monkeypatch, capsys):
    """In-process, so that no training could hide behind a subprocess: each is refused before any
    step (Trainer.run, train_mlm and translation.train are replaced by a function that fails)."""
    import importlib

    from companion import mlm, translation
    from companion import train as train_module

    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")

    def never(*a, **k):
        raise AssertionError("training started before the arguments were checked")

    monkeypatch.setattr(train_module.Trainer, "run", never)
    monkeypatch.setattr(mlm, "train_mlm", never)
    monkeypatch.setattr(translation, "train", never)
    main = importlib.import_module(module).main
    with pytest.raises(SystemExit) as info:
        main([a.format(**cli_files) for a in args])
    message = str(info.value.code)
    assert re.search(pattern, message), message
    assert "\n" not in message and "Traceback" not in message


def test_a_command_line_error_is_one_line_on_stderr(cli_files):
    """As a user sees it: a subprocess, exit status 1, one line on stderr, nothing on stdout."""
    import subprocess
    import sys

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    done = subprocess.run([sys.executable, "-m", "companion.train", "--device", "cuda", "--steps", "1"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("python -m companion.train: error:")
