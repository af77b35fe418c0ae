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


# --- issue 34: the tokenizer, the ViT and the modern decoder (chapters 11 to 13) -------------------

@pytest.fixture(scope="module")
def t34(tmp_path_factory):
    """A small trained tokenizer, broken GPT-2 files, a tiny ViT and a tiny modern decoder."""
    from companion import bpe, modern, vit

    tmp = tmp_path_factory.mktemp("issue34")
    merges = tmp / "vocab.bpe"
    merges.write_text("#version: 0.2\nĠ t\nh e\n", encoding="utf-8")
    (tmp / "encoder.json").write_text('{"!": 0, "\\"": 1', encoding="utf-8")  # cut short
    (tmp / "list.json").write_text("[1, 2]", encoding="utf-8")
    (tmp / "bad.bpe").write_text("#version: 0.2\nĠ t\nh  e\n", encoding="utf-8")
    (tmp / "latin1.bpe").write_bytes(b"#version: 0.2\n\xe9 t\n")
    images = torch.rand(20, 1, 8, 8)
    nan_images = images.clone()
    nan_images[3, 0, 2, 2] = NAN
    torch.manual_seed(0)
    return SimpleNamespace(
        bpe=bpe, vit=vit, modern=modern, tmp=tmp, merges=merges,
        tok=bpe.train("hello world, hello there " * 5, 270, special_tokens=["<|end|>"]),
        images=images, nan_images=nan_images, labels=torch.arange(20) % 10,
        vit_model=vit.VisionTransformer(vit.ViTConfig(d_model=16, n_layers=1, n_heads=2)),
        gqa=modern.GroupedQueryAttention(16, 4, 2),
        cfg=modern.ModernConfig(vocab_size=20, context_length=8, d_model=16, n_layers=1, n_heads=4, n_kv_heads=2),
    )


# Every case listed in issue 34, as the issue states it (the copy_from_hf cases are tests below).
# Each pattern names the argument in backquotes and the value received.
ISSUE_34 = [
    # silently wrong before
    (lambda t: t.bpe.train("abc abc", 300, special_tokens=["<s>", "<s>"]), ValueError,
     r"`special_tokens` names '<s>' twice \(got \['<s>', '<s>'\]\)"),
    (lambda t: t.bpe.train("abc abc", 300, special_tokens="<s>"), TypeError,
     r"`special_tokens` must be a list of names \(got '<s>', a str\); for one special token pass \['<s>'\]"),
    (lambda t: t.tok.decode(torch.tensor([104.7, 101.2])), TypeError,
     r"`ids` must hold integer token ids \(got dtype=torch.float32\); token ids are never rounded"),
    (lambda t: t.modern.ModernConfig().kv_cache_bytes(-1, 5), ValueError,
     r"`batch_size` must be a non-negative integer \(got batch_size=-1\)"),
    (lambda t: t.vit.train_classifier(t.vit_model, t.nan_images, t.labels, epochs=1), ValueError,
     r"`images` must hold finite numbers \(got nan at position \(3, 0, 2, 2\)\)"),
    # unclear or deep before
    (lambda t: t.bpe.BPETokenizer([], pattern=r"(\p{L}+"), ValueError,
     r"`pattern` must be a valid regular expression \(got pattern='\(\\\\p\{L\}\+': missing \)"),
    (lambda t: t.bpe.BPETokenizer.from_gpt2_files(t.merges, t.tmp / "encoder.json"), ValueError,
     r"`encoder_json` .*encoder\.json is not valid JSON \(Expecting"),
    (lambda t: t.bpe.token_to_printable("abc"), TypeError,
     r"`token` must be bytes, such as b' the' \(got 'abc', a str\); for text, pass text\.encode\('utf-8'\)"),
    (lambda t: t.bpe.merge([1, 2, 3], (1,), 9), ValueError,
     r"`pair` must be a pair of ids \(a, b\) \(got pair=\(1,\), 1 item\)"),
    (lambda t: t.gqa(torch.randn(2, 3, 8)), ValueError,
     r"`x` must have shape \(B, T, d_model=16\) \(got shape=\(2, 3, 8\)\)"),
    (lambda t: t.gqa(torch.randn(3, 16)), ValueError,
     r"`x` must have shape \(B, T, d_model=16\) \(got shape=\(3, 16\)\)"),
    (lambda t: t.tok.encode("hello", allowed_special=None), TypeError,
     r"`allowed_special` must be 'all' or a collection of special-token names .*\(got None, a NoneType\); pass \(\)"),
    (lambda t: t.tok.decode(None), TypeError,
     r"`ids` must be a sequence of integer token ids \(got None, a NoneType\)"),
    (lambda t: t.tok.decode(torch.tensor([[1, 2]])), ValueError,
     r"`ids` must be one sequence of shape \(T,\) \(got shape=\(1, 2\)\); decode each row"),
    (lambda t: t.tok.encode_word("abc"), TypeError,
     r"`word` must be bytes \(got 'abc', a str\); encode it first: word\.encode\('utf-8'\)"),
    (lambda t: t.bpe.pair_counts(5), TypeError, r"`ids` must be a list of integer token ids \(got 5, an int\)"),
    (lambda t: t.bpe.train(None, 300), TypeError,
     r"`text` must be a str or an iterable of str \(got None, a NoneType\)"),
    (lambda t: t.modern.ModernGPT(t.modern.ModernConfig(d_model=30, n_heads=4, d_head=8, n_kv_heads=2)).hf_config(),
     ValueError, r"no Hugging Face config: transformers requires hidden_size to be a multiple of num_attention_heads.*"
     r"\(got d_model=30, n_heads=4, d_head=8 in `self.config`\)"),
]

# Found by trying more wrong calls on the three modules (wrong dtypes, ranks, empty or None
# arguments, negative sizes, NaN): each was silent, deep or unclear before.
EXTRA_34 = [
    # companion.bpe
    (lambda t: t.tok.decode([torch.tensor(104.7)]), TypeError,  # was truncated to 104 in silence
     r"`ids` must hold integer token ids \(got tensor\(104\.7000\) at position 0, a Tensor\)"),
    (lambda t: t.tok.decode(b"hi"), TypeError,  # bytes were read as GPT-2-ordered ids: other text, silently
     r"`ids` must be a sequence of integer token ids \(got b'hi', a bytes\); bytes become text with \.decode"),
    (lambda t: t.tok.decode("hello"), TypeError,
     r"`ids` must be a sequence of integer token ids \(got 'hello', a str\)"),
    (lambda t: t.tok.decode(7), TypeError, r"`ids` must be a sequence of integer token ids \(got 7, an int\)"),
    (lambda t: t.tok.decode([True, 1]), TypeError,
     r"`ids` must hold integer token ids \(got True at position 0, a bool\)"),
    (lambda t: t.tok.decode(torch.tensor(5)), ValueError,
     r"`ids` must be one sequence of shape \(T,\) \(got shape=\(\)\)"),
    (lambda t: t.tok.decode(__import__("numpy").array([1.0, 2.0])), TypeError,
     r"`ids` must hold integer token ids \(got dtype=float64\)"),
    (lambda t: t.tok.decode([t.tok.vocab_size]), ValueError,
     r"`ids` must hold token ids in \[0, 270\) \(got 270 at position 0\): 270 is not a token id"),
    (lambda t: t.tok.encode("hello", allowed_special="<|end|>"), TypeError,  # was split into characters
     r"`allowed_special` must be 'all' or a collection of names \(got the str '<\|end\|>'\); for one name pass "
     r"\{'<\|end\|>'\}"),
    (lambda t: t.tok.encode("hello", allowed_special=[3]), TypeError,
     r"`allowed_special` must hold names of special tokens, strings \(got 3\)"),
    (lambda t: t.tok.encode(None), TypeError, r"`text` must be a str \(got None, a NoneType\)"),
    (lambda t: t.tok.encode(b"hello"), TypeError,
     r"`text` must be a str \(got b'hello', a bytes\); decode bytes first"),
    (lambda t: t.tok.tokens(3), TypeError, r"`text` must be a str \(got 3, an int\)"),
    (lambda t: t.bpe.pre_tokenize("a b", pattern=3), TypeError,
     r"`pattern` must be a str, a regular expression \(got 3, an int\)"),
    (lambda t: t.bpe.pre_tokenize(None), TypeError, r"`text` must be a str \(got None, a NoneType\)"),
    (lambda t: t.bpe.BPETokenizer(None), TypeError,
     r"`merges` must be a list of pairs of bytes .*\(got None, a NoneType\)"),
    (lambda t: t.bpe.BPETokenizer([("l", "o")]), TypeError,
     r"`merges\[0\]` must be a pair of non-empty bytes \(got \('l', 'o'\)\)"),
    (lambda t: t.bpe.BPETokenizer([], special_tokens=["<s>"]), TypeError,  # was an AttributeError
     r"`special_tokens` must be a dict \{name: id\} \(got \['<s>'\], a list\)"),
    (lambda t: t.bpe.BPETokenizer([], special_tokens={"<s>": 1000}), ValueError,  # vocab_size said 257
     r"`special_tokens` must take the ids right after the 256 merged tokens, 256 to 256.*\(got \{'<s>': 1000\}\)"),
    (lambda t: t.bpe.pair_counts([1, 2.5, 3]), TypeError,
     r"`ids` must hold integer token ids \(or tokens as bytes\) \(got 2\.5 at position 1, a float\)"),
    (lambda t: t.bpe.pair_counts("hello"), TypeError, r"`ids` must be a list of token ids, not text \(got a str\)"),
    (lambda t: t.bpe.pair_counts(torch.tensor([[1, 2]])), ValueError,
     r"`ids` must be one sequence of shape \(T,\) \(got shape=\(1, 2\)\)"),
    (lambda t: t.bpe.pair_counts(torch.tensor([1.0, 2.0])), TypeError,
     r"`ids` must hold integer token ids \(got dtype=torch.float32\)"),
    (lambda t: t.bpe.pair_counts([1, 2], counts=[]), TypeError,
     r"`counts` must be None or a dict .*\(got \[\], a list\)"),
    (lambda t: t.bpe.pair_counts([1, 2], weight=0.5), TypeError,
     r"`weight` must be an integer \(got weight=0\.5, a float\)"),
    (lambda t: t.bpe.merge([1, 2], 5, 9), TypeError, r"`pair` must be a pair of ids \(a, b\) \(got 5, an int\)"),
    (lambda t: t.bpe.merge([1, 2], (1, 2), 9.5), TypeError, r"`new_id` must be an integer id .*\(got 9\.5, a float\)"),
    (lambda t: t.bpe.merge([1, 2], (1.0, 2), 9), TypeError,
     r"`pair\[0\]` must be an integer id .*\(got 1\.0, a float\)"),
    (lambda t: t.bpe.train(b"abc", 300), TypeError,
     r"`text` must be a str or an iterable of str \(got b'abc', a bytes\)"),
    (lambda t: t.bpe.train(["abc", 3], 300), TypeError,
     r"`text` must be a str or an iterable of str \(got 3 at position 1"),
    (lambda t: t.bpe.train("abc", True), TypeError,
     r"`vocab_size` must be an integer >= 256 \(got vocab_size=True, a bool\)"),
    (lambda t: t.bpe.train("abc", 256, special_tokens=["<s>"]), ValueError,
     r"`vocab_size` must be an integer >= 257 \(got vocab_size=256\); 256 bytes \+ 1 special tokens"),
    (lambda t: t.bpe.train("abc", 300, special_tokens=[""]), TypeError,
     r"`special_tokens` must hold non-empty strings \(got ''"),
    (lambda t: t.bpe.train("abc", 300, progress="yes"), TypeError,
     r"`progress` must be True or False \(got progress='yes'"),
    (lambda t: t.bpe.train("abc", 300, pattern="[a-"), ValueError,
     r"`pattern` must be a valid regular expression \(got pattern='\[a-'"),
    (lambda t: t.bpe.BPETokenizer.from_gpt2_files(t.tmp / "missing.bpe"), FileNotFoundError,
     r"`vocab_bpe`: no file at .*missing\.bpe"),
    (lambda t: t.bpe.BPETokenizer.from_gpt2_files(t.tmp), ValueError,
     r"`vocab_bpe` must name a file, but .* is a folder"),
    (lambda t: t.bpe.BPETokenizer.from_gpt2_files(t.tmp / "bad.bpe"), ValueError,
     r"`vocab_bpe` .*bad\.bpe, line 3: expected two tokens"),
    (lambda t: t.bpe.BPETokenizer.from_gpt2_files(t.tmp / "latin1.bpe"), ValueError,
     r"`vocab_bpe` .*latin1\.bpe is not UTF-8"),
    (lambda t: t.bpe.BPETokenizer.from_gpt2_files(t.merges, t.tmp / "list.json"), ValueError,
     r"`encoder_json` .*list\.json must hold a JSON object .*\(got a list\)"),
    (lambda t: t.bpe.BPETokenizer.from_gpt2_files(None), TypeError,
     r"`vocab_bpe` must be a str or pathlib.Path \(got NoneType\)"),
    (lambda t: t.bpe.BPETokenizer.load(None), TypeError, r"`path` must be a str or pathlib.Path \(got NoneType\)"),
    (lambda t: t.tok.save(3), TypeError, r"`path` must be a str or pathlib.Path \(got int\)"),
    (lambda t: t.bpe.BPETokenizer.gpt2(check_ids="no"), TypeError,
     r"`check_ids` must be True or False \(got check_ids='no'"),
    (lambda t: t.bpe.printable_to_token(b"the"), TypeError,
     r"`text` must be a str in GPT-2's printable form, such as 'Ġthe' \(got b'the', a bytes\)"),
    # companion.vit
    (lambda t: t.vit.train_classifier(t.vit_model, t.images.masked_fill(t.images > 0.99, INF), t.labels, epochs=1),
     ValueError, r"`images` must hold finite numbers \(got inf at position"),
    (lambda t: t.vit.train_classifier(t.vit_model, t.images, t.labels + 5, epochs=1), ValueError,  # was IndexError
     r"`labels` must hold class labels of the model's 10 outputs in \[0, 10\) \(got 10 at position 5\)"),
    (lambda t: t.vit.train_classifier(t.vit_model, t.images, t.labels - 1, epochs=1), ValueError,
     r"`labels` must hold class labels .* \(got -1 at position 0\)"),
    (lambda t: t.vit.train_classifier(t.vit_model, t.images.double(), t.labels, epochs=1), TypeError,
     r"`images` must have the model's dtype torch.float32 on cpu \(got torch.float64 on cpu\)"),
    (lambda t: t.vit.train_classifier(nn.Identity(), t.images, t.labels, epochs=1), ValueError,
     r"`model` has no parameters to train \(got a Identity\)"),
    (lambda t: t.vit.train_classifier(nn.Sequential(nn.Flatten(0), nn.Linear(64, 3)), t.images, t.labels, epochs=1),
     TypeError, r"`model` must return logits of shape \(B, n_classes\) \(got \(3,\)\)"),
    (lambda t: t.vit.train_classifier(t.vit.DigitsMLP(hidden=8), t.images * 1e4, t.labels, epochs=4, lr=1e6,
                                      warmup_epochs=0), FloatingPointError,
     r"the training loss became (nan|inf) at step \d+ \(epoch \d\); lower the learning rate `lr` "
     r"\(got lr=1000000\.0\)"),
    (lambda t: t.vit.predict(t.vit_model, t.images, batch_size=0), ValueError,  # was range()'s own error
     r"`batch_size` must be a positive integer \(got batch_size=0\)"),
    (lambda t: t.vit.accuracy(t.vit_model, t.images.tolist(), t.labels), TypeError, r"`images` must be a torch.Tensor"),
    (lambda t: t.vit.DigitsMLP(n_classes=0), ValueError, r"`n_classes` must be a positive integer \(got n_classes=0\)"),
    (lambda t: t.vit.DigitsCNN(n_classes=-1), ValueError,
     r"`n_classes` must be a positive integer \(got n_classes=-1\)"),
    (lambda t: t.vit.DigitsCNN()(torch.rand(2, 1, 16, 16)), ValueError,  # was a matrix-product error
     r"`images` must have shape \(B, C=1, H=8, W=8\) \(got shape=\(2, 1, 16, 16\)\)"),
    (lambda t: t.vit.DigitsMLP()(torch.rand(2, 64)), ValueError,
     r"`images` must have shape \(B, C=1, H=8, W=8\) \(got shape=\(2, 64\)\)"),
    (lambda t: t.vit.DigitsMLP()(torch.rand(2, 1, 8, 8).double()), TypeError,
     r"`images` must have the model's dtype torch.float32"),
    (lambda t: t.vit_model.copy_from_hf(nn.Linear(2, 2)), TypeError,  # was an AttributeError
     r"`hf_model` must be a transformers ViTModel or ViTForImageClassification \(got Linear\)"),
    # companion.modern
    (lambda t: t.modern.ModernConfig().kv_cache_bytes(1, -5), ValueError,
     r"`length` must be a non-negative integer \(got length=-5\)"),
    (lambda t: t.modern.ModernConfig().kv_cache_bytes(1.5, 5), TypeError,
     r"`batch_size` must be a non-negative integer \(got batch_size=1\.5"),
    (lambda t: t.modern.ModernConfig().kv_cache_bytes(1, 5, 0), ValueError,
     r"`bytes_per_number` must be a positive integer \(got bytes_per_number=0\)"),
    (lambda t: t.gqa(torch.randn(2, 3, 16).double()), TypeError,
     r"`x` has dtype torch.float64 but the module's weights have"),
    (lambda t: t.gqa(torch.randn(2, 3, 16).long()), TypeError,
     r"`x` must be a floating-point tensor \(got dtype=torch.int64\)"),
    (lambda t: t.gqa(torch.randn(0, 3, 16)), ValueError,
     r"`x` must not be empty: shape \(B, T, d_model=16\) needs B >= 1"),
    (lambda t: t.gqa([[0.0] * 16]), TypeError,
     r"`x` must be a torch.Tensor of shape \(B, T, d_model=16\) \(got list\)"),
    (lambda t: t.modern.GroupedQueryAttention(16, 4, 2, qk_norm="yes"), TypeError,
     r"`qk_norm` must be True or False \(got qk_norm='yes'"),
    (lambda t: t.modern.GroupedQueryAttention(16, 4, 2, rope_base=NAN), ValueError,
     r"`rope_base` must be a finite number > 1 \(got rope_base=nan\)"),
    (lambda t: t.modern.GroupedQueryAttention(16, 4, 2, norm_eps=0.0), ValueError,
     r"`norm_eps` must be a finite number > 0 \(got norm_eps=0\.0\)"),
    (lambda t: t.modern.GroupedQueryAttention(16, 4, 2, bias=1), TypeError,
     r"`bias` must be True or False \(got bias=1, an int\)"),
    (lambda t: t.modern.SwiGLU(16, 40)(torch.randn(2, 8)), ValueError,
     r"`x` must have shape \(\.\.\., d_model=16\) \(got shape=\(2, 8\)\)"),
    (lambda t: t.modern.SwiGLU(16, 40, bias="no"), TypeError, r"`bias` must be True or False \(got bias='no'"),
    (lambda t: t.modern.rope_frequencies(5), ValueError,
     r"`d_head` must be even: features rotate in pairs \(got d_head=5\)"),
    (lambda t: t.modern.rope_frequencies(8, base=NAN), ValueError,
     r"`base` must be a finite number > 1 \(got base=nan\)"),
    (lambda t: t.modern.rope_frequencies(8, dtype=torch.long), ValueError,
     r"`dtype` must be a floating-point dtype such as torch.float32 \(got torch.int64\)"),
    (lambda t: t.gqa(torch.randn(1, 2, 16), cache={}), TypeError,  # was an AttributeError
     r"`cache` must be None or a companion.attention.KVCache \(got dict\); a model's cache holds one per layer"),
    (lambda t: t.vit.VisionTransformer.from_hf(_hf_vit(hidden_act="gelu_new")), ValueError,
     r"`hf_model` must have hidden_act='gelu' and qkv_bias=True, the only ones supported \(got hidden_act='gelu_new'"),
    (lambda t: t.modern.ModernGPT(t.cfg).copy_from_hf(nn.Linear(2, 2)), TypeError,
     r"`hf_model` must be a transformers LlamaForCausalLM or Qwen3ForCausalLM \(got Linear\)"),
]


@pytest.mark.parametrize("call, kind, pattern", ISSUE_34 + EXTRA_34,
                         ids=[f"i{i:02d}" for i in range(len(ISSUE_34))] + [f"x{i:02d}" for i in range(len(EXTRA_34))])
def test_a_wrong_call_on_chapters_11_to_13_raises_a_clear_error(t34, call, kind, pattern):
    with pytest.raises(kind, match=pattern) as info:
        call(t34)
    assert "`" in str(info.value), "the message names the argument in backquotes"


def test_issue_34_tables_hold_every_case():
    assert len(ISSUE_34) == 18 and len(EXTRA_34) >= 60


def test_train_classifier_refuses_nan_images_before_any_step(t34):
    model = t34.vit_model
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"`images` must hold finite numbers"):
        t34.vit.train_classifier(model, t34.nan_images, t34.labels, epochs=1)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items()), "nothing was trained"


def test_train_classifier_takes_labels_of_any_integer_dtype(t34):
    """Legitimate: int32 (or uint8) labels train exactly as int64 labels (they were a deep error)."""
    runs = []
    for dtype in (torch.long, torch.int32, torch.uint8):
        torch.manual_seed(0)
        model = t34.vit.DigitsMLP(hidden=8)
        log = t34.vit.train_classifier(model, t34.images, t34.labels.to(dtype), epochs=2, batch_size=8)
        runs.append((log.epoch_loss, [p.detach().clone() for p in model.parameters()]))
    for losses, weights in runs[1:]:
        assert losses == runs[0][0] and all(torch.equal(a, b) for a, b in zip(weights, runs[0][1]))


def test_a_pattern_that_skips_characters_still_round_trips(t34):
    """Legitimate: `pattern=r"\\p{L}+"` lost the spaces (decode(encode("a b c")) was "abc"). The
    stretches between matches are now pieces of their own, as Hugging Face's Split pre-tokenizer
    keeps them (the reference below), so nothing is lost and words still never merge across."""
    bpe = t34.bpe
    tok = bpe.BPETokenizer([], pattern=r"\p{L}+")
    for text in ["a b c", "  lead and trail  ", "x", "", "123 ab!", "é ü 日本"]:
        assert tok.decode(tok.encode(text)) == text
    assert bpe.pre_tokenize("ab, cd", pattern=r"\p{L}+") == ["ab", ", ", "cd"]
    from tokenizers import Regex, pre_tokenizers

    split = pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="isolated")
    for text in ["ab, cd", "  lead and trail  ", "1 a 2"]:
        assert bpe.pre_tokenize(text, pattern=r"\p{L}+") == [p for p, _ in split.pre_tokenize_str(text)]
    # a trained tokenizer learns within the pieces and round-trips too; its merges never cross a gap
    trained = bpe.train("ab ab ab, cd cd", 262, pattern=r"\p{L}+")
    assert trained.decode(trained.encode("ab, cd ab")) == "ab, cd ab"
    merged = [(a + b).decode() for a, b in trained.merges]
    assert merged and all(t.isalpha() or not any(ch.isalpha() for ch in t) for t in merged), merged
    # a capturing group does not change the pieces (findall returned the group, losing text)
    grouped = bpe.BPETokenizer([], pattern=r"(\p{L})+|\s+")
    assert grouped.decode(grouped.encode("ab cd")) == "ab cd"
    assert bpe.pre_tokenize("ab cd", pattern=r"(\p{L})+|\s+") == ["ab", " ", "cd"]


def test_legitimate_edge_calls_give_the_right_result(t34):
    bpe, tok = t34.bpe, t34.tok
    ids = tok.encode("hello world")
    # tensors, NumPy arrays and 0-d integer tensors as ids: the same text as the list
    import numpy as np

    assert tok.decode(torch.tensor(ids)) == tok.decode(np.array(ids)) == "hello world"
    assert tok.decode([torch.tensor(i) for i in ids]) == tok.decode(iter(ids)) == "hello world"
    assert tok.decode([]) == "" and tok.encode("") == []
    # pair_counts and merge on a tensor, on tokens as bytes, on bytes: as on the list (brute force)
    seq = [5, 5, 5, 1, 5, 5]
    brute = {}
    for i in range(len(seq) - 1):
        brute[(seq[i], seq[i + 1])] = brute.get((seq[i], seq[i + 1]), 0) + 1
    assert bpe.pair_counts(torch.tensor(seq)) == bpe.pair_counts(seq) == brute
    assert bpe.pair_counts(bytes(seq)) == brute and bpe.pair_counts(seq, weight=-1) == {k: -v for k, v in brute.items()}
    assert bpe.merge(torch.tensor(seq), (5, 5), 9) == bpe.merge(tuple(seq), (5, 5), 9) == [9, 5, 1, 9]
    assert bpe.merge([b"l", b"o", b"w"], (b"l", b"o"), b"lo") == [b"lo", b"w"]
    # an empty text trains to the 256 bytes and the special tokens (documented)
    empty = bpe.train("", 300, special_tokens=["<s>"])
    assert empty.merges == [] and empty.vocab_size == 257 and empty.special_tokens == {"<s>": 256}
    # a batch or a length of 0 has a cache of 0 bytes
    cfg = t34.modern.ModernConfig()
    assert cfg.kv_cache_bytes(0, 5) == cfg.kv_cache_bytes(3, 0) == 0
    assert cfg.kv_cache_bytes(2, 5, 4) == 2 * cfg.n_layers * 2 * 5 * cfg.n_kv_heads * cfg.d_head * 4


# --- copy_from_hf: every setting that changes the function is compared, each difference named -----

VIT_HF = dict(image_size=8, patch_size=2, num_channels=1, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=32, num_labels=3, layer_norm_eps=1e-6)
VIT_OURS = dict(image_size=8, patch_size=2, n_channels=1, n_classes=3, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                eps=1e-6)


def _hf_vit(**changes):
    from transformers import ViTConfig as HFConfig, ViTForImageClassification

    torch.manual_seed(1)
    hf = ViTForImageClassification(HFConfig(**{**VIT_HF, **changes}, attn_implementation="eager")).double().eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return hf


def _our_vit():
    from companion.vit import VisionTransformer, ViTConfig

    torch.manual_seed(2)
    return VisionTransformer(ViTConfig(**VIT_OURS)).double().eval()


def test_vit_copy_from_a_matching_hugging_face_model_gives_equal_logits():
    pytest.importorskip("transformers")
    hf, ours = _hf_vit(), _our_vit()
    images = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        assert not torch.allclose(ours(images), hf(images).logits, atol=1e-3)
        ours.copy_from_hf(hf)
        torch.testing.assert_close(ours(images), hf(images).logits, rtol=1e-6, atol=1e-6)


VIT_MISMATCHES = [  # (HF change, the words the message must hold: setting, Hugging Face's value, ours)
    (dict(num_attention_heads=4), r"num_attention_heads: Hugging Face 4, this model n_heads=2"),
    (dict(layer_norm_eps=1e-12), r"layer_norm_eps: Hugging Face 1e-12, this model eps=1e-06"),
    (dict(num_channels=3), r"num_channels: Hugging Face 3, this model n_channels=1"),
    (dict(patch_size=4), r"patch_size: Hugging Face \(4, 4\), this model patch_size=\(2, 2\)"),
    (dict(image_size=16), r"image_size: Hugging Face \(16, 16\), this model image_size=\(8, 8\)"),
    (dict(num_hidden_layers=3), r"num_hidden_layers: Hugging Face 3, this model n_layers=2"),
    (dict(hidden_size=32), r"hidden_size: Hugging Face 32, this model d_model=16"),
    (dict(intermediate_size=64), r"intermediate_size: Hugging Face 64, this model d_ff=32"),
    (dict(hidden_act="gelu_new"), r"hidden_act: Hugging Face 'gelu_new', this model 'gelu'"),
    (dict(qkv_bias=False), r"qkv_bias: Hugging Face False, this model True"),
    (dict(num_labels=5), r"classifier outputs \(num_labels\): Hugging Face 5, this model n_classes=3"),
    (dict(num_attention_heads=4, layer_norm_eps=1e-12), r"2 settings differ: num_attention_heads: .*; layer_norm_eps"),
]


@pytest.mark.parametrize("change, pattern", VIT_MISMATCHES, ids=[",".join(c) for c, _ in VIT_MISMATCHES])
def test_vit_copy_from_hf_refuses_each_setting_that_changes_the_function(change, pattern):
    pytest.importorskip("transformers")
    hf, ours = _hf_vit(**change), _our_vit()
    before = [p.clone() for p in ours.parameters()]
    with pytest.raises(ValueError, match=r"`hf_model` computes another function than this model; .*" + pattern):
        ours.copy_from_hf(hf)
    assert all(torch.equal(a, b) for a, b in zip(before, ours.parameters())), "nothing is copied"


def test_vit_copy_from_hf_refuses_weights_whose_shapes_disagree_with_the_config():
    pytest.importorskip("transformers")
    hf, ours = _hf_vit(), _our_vit()
    hf.vit.layers[1].mlp.fc1 = nn.Linear(16, 24).double()  # the config still says 32
    before = [p.clone() for p in ours.parameters()]
    with pytest.raises(ValueError, match=r"`hf_model`'s layers\.1\.mlp\.fc1\.weight has shape \(24, 16\), this "
                                         r"model's has shape \(32, 16\)"):
        ours.copy_from_hf(hf)
    assert all(torch.equal(a, b) for a, b in zip(before, ours.parameters())), "nothing is copied"


def _our_decoder(**kw):
    from companion.modern import ModernConfig, ModernGPT

    base = dict(vocab_size=40, context_length=16, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, d_ff=48)
    torch.manual_seed(3)
    return ModernGPT(ModernConfig(**{**base, **kw})).double().eval()


def _hf_decoder(model, **changes):
    import transformers

    config = model.hf_config()
    data = {**config.to_dict(), **changes}
    kind = data.pop("_kind", None) or config.model_type
    cls = {"llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
           "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM)}[kind]
    data = {k: v for k, v in data.items() if k not in ("model_type", "transformers_version", "architectures")}
    if kind == "llama":
        data.pop("use_sliding_window", None), data.pop("sliding_window", None), data.pop("layer_types", None)
        data.pop("max_window_layers", None)
    hf_config = cls[0](**data)
    hf_config._attn_implementation = "eager"
    torch.manual_seed(4)
    hf = cls[1](hf_config).double().eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.uniform_(0.5, 1.5)
    return hf


@pytest.mark.parametrize("kw", [dict(), dict(qk_norm=True), dict(tie_embeddings=False, d_head=12, rope_base=5e5),
                                dict(rope_layout="interleaved", norm_eps=1e-5)],
                         ids=["llama", "qwen3", "untied-d12", "interleaved"])
def test_decoder_copy_from_a_matching_hugging_face_model_gives_equal_logits(kw):
    pytest.importorskip("transformers")
    ours = _our_decoder(**kw)
    hf = _hf_decoder(ours)
    idx = torch.randint(0, 40, (2, 7))
    with torch.no_grad():
        ours.copy_from_hf(hf)
        torch.testing.assert_close(ours(idx)[0], hf(idx).logits, rtol=1e-5, atol=1e-6)


DECODER_MISMATCHES = [  # (our config, HF change, the words the message must hold)
    (dict(), dict(num_attention_heads=8, head_dim=8), r"num_attention_heads: Hugging Face 8, this model n_heads=4"),
    (dict(), dict(num_key_value_heads=1), r"num_key_value_heads: Hugging Face 1, this model n_kv_heads=2"),
    (dict(), dict(head_dim=16), r"head_dim: Hugging Face 16, this model d_head=8"),
    (dict(), dict(rms_norm_eps=1e-5), r"rms_norm_eps: Hugging Face 1e-05, this model norm_eps=1e-06"),
    (dict(), dict(rope_parameters={"rope_type": "default", "rope_theta": 500000.0}),
     r"rope_theta: Hugging Face 500000\.0, this model rope_base=10000\.0"),
    (dict(), dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}),
     r"rope_type: Hugging Face 'linear', this model 'default'"),
    (dict(), dict(tie_word_embeddings=False),
     r"tie_word_embeddings: Hugging Face False, this model tie_embeddings=True"),
    (dict(tie_embeddings=False), dict(tie_word_embeddings=True),
     r"tie_word_embeddings: Hugging Face True, this model tie_embeddings=False"),
    (dict(), dict(attention_bias=True), r"attention_bias: Hugging Face True, this model False"),
    (dict(), dict(mlp_bias=True), r"mlp_bias: Hugging Face True, this model False"),
    (dict(), dict(hidden_act="gelu"), r"hidden_act: Hugging Face 'gelu', this model 'silu'"),
    (dict(), dict(intermediate_size=64), r"intermediate_size: Hugging Face 64, this model d_ff=48"),
    (dict(), dict(vocab_size=41), r"vocab_size: Hugging Face 41, this model vocab_size=40"),
    (dict(), dict(num_hidden_layers=3), r"num_hidden_layers: Hugging Face 3, this model n_layers=2"),
    (dict(), dict(hidden_size=64), r"hidden_size: Hugging Face 64, this model d_model=32"),
    (dict(qk_norm=True), dict(_kind="llama"), r"model_type: Hugging Face 'llama', this model qk_norm=True \(a Qwen 3 "
     r"has QK-norm\)"),
    (dict(), dict(_kind="qwen3"),
     r"model_type: Hugging Face 'qwen3', this model qk_norm=False \(a Llama has no QK-norm\)"),
    (dict(qk_norm=True), dict(use_sliding_window=True, sliding_window=4, layer_types=["sliding_attention"] * 2),
     r"layer_types: Hugging Face \['sliding_attention'\], this model None"),
    (dict(), dict(num_key_value_heads=4, rms_norm_eps=1e-5, attention_bias=True), r"3 settings differ"),
]


@pytest.mark.parametrize("ours_kw, change, pattern", DECODER_MISMATCHES,
                         ids=[",".join(c) or "none" for _, c, _ in DECODER_MISMATCHES])
def test_decoder_copy_from_hf_refuses_each_setting_that_changes_the_function(ours_kw, change, pattern):
    pytest.importorskip("transformers")
    ours = _our_decoder(**ours_kw)
    hf = _hf_decoder(ours, **change)
    before = [p.clone() for p in ours.parameters()]
    with pytest.raises(ValueError, match=r"`hf_model` computes another function than this model; .*" + pattern):
        ours.copy_from_hf(hf)
    assert all(torch.equal(a, b) for a, b in zip(before, ours.parameters())), "nothing is copied"


def test_decoder_copy_from_hf_refuses_a_vit_a_headless_model_and_disagreeing_weights():
    pytest.importorskip("transformers")
    import transformers

    ours = _our_decoder()
    with pytest.raises(TypeError, match=r"`hf_model` must be a transformers LlamaForCausalLM or Qwen3ForCausalLM "
                                        r"\(got ViTForImageClassification, model_type='vit'\)"):
        ours.copy_from_hf(_hf_vit())
    untied = _our_decoder(tie_embeddings=False)
    bare = transformers.LlamaModel(_hf_decoder(untied).config)
    with pytest.raises(TypeError, match=r"`hf_model` has no output head \(got LlamaModel\) but this model's head is "
                                        r"untied"):
        untied.copy_from_hf(bare)
    hf = _hf_decoder(ours)
    hf.model.layers[0].mlp.up_proj = nn.Linear(32, 40, bias=False).double()  # the config still says 48
    before = [p.clone() for p in ours.parameters()]
    with pytest.raises(ValueError, match=r"`hf_model`'s model\.layers\.0\.mlp\.up_proj\.weight has shape \(40, 32\), "
                                         r"this model's blocks\.0\.ff\.up_proj\.weight has shape \(48, 32\)"):
        ours.copy_from_hf(hf)
    assert all(torch.equal(a, b) for a, b in zip(before, ours.parameters())), "nothing is copied"
    # a tied model copies from the bare LlamaModel (no head needed): equal hidden states
    tied_hf = _hf_decoder(ours)
    ours.copy_from_hf(tied_hf.model)
    idx = torch.randint(0, 40, (1, 5))
    with torch.no_grad():
        torch.testing.assert_close(ours(idx)[0], tied_hf(idx).logits, rtol=1e-5, atol=1e-6)


# ------------------------------------------------- the outside red team's findings (fix_wrongcalls2)
def test_bpe_refuses_float_special_ids_negative_ids_and_mixed_pairs():
    from companion import bpe

    with pytest.raises(TypeError, match=r"`special_tokens`: the id of '<e>' must be an integer "
                                        r"\(got 256\.0, a float\)"):
        bpe.BPETokenizer([], special_tokens={"<e>": 256.0})
    with pytest.raises(ValueError, match=r"`new_id` must be a token id >= 0 \(got new_id=-1\)"):
        bpe.merge([1, 2], (1, 2), -1)
    with pytest.raises(ValueError, match=r"`pair\[1\]` must be a token id >= 0 \(got pair\[1\]=-2\)"):
        bpe.merge([1, 2], (1, -2), 9)
    with pytest.raises(TypeError, match=r"`pair` must be two integer ids or two tokens as bytes, not a mix of both "
                                        r"\(got pair=\(1, b'b'\)\)"):
        bpe.merge([1, 2], (1, b"b"), 9)
    with pytest.raises(ValueError, match=r"`ids` must hold token ids >= 0 \(got -2 at position 1\)"):
        bpe.pair_counts([1, -2])
    with pytest.raises(ValueError, match=r"`ids` must hold token ids >= 0 \(got -2 at position 1\)"):
        bpe.pair_counts(torch.tensor([1, -2]))
    with pytest.raises(ValueError, match=r"`ids` must hold token ids >= 0 \(got -1 at position 0\)"):
        bpe.merge([-1, 2], (1, 2), 9)
    tok = bpe.BPETokenizer([], special_tokens={"<e>": 256})
    with pytest.raises(ValueError, match=r"`ids` must hold token ids in \[0, 257\) \(got -1 at position 0\)"):
        tok.decode([-1])  # decode refuses negative ids too: consistent
    # the legitimate calls still work: bytes pairs, and ids as before
    assert bpe.merge([b"a", b"b", b"a"], (b"a", b"b"), b"ab") == [b"ab", b"a"]
    assert bpe.merge([5, 5, 5], (5, 5), 9) == [9, 5]
    assert bpe.pair_counts([1, 2, 1, 2]) == {(1, 2): 2, (2, 1): 1}


@pytest.mark.parametrize("dtype", [torch.int64, torch.complex64, torch.bool])
def test_sincos_2d_encoding_refuses_a_dtype_that_is_not_floating(dtype):
    from companion import vit

    with pytest.raises(ValueError, match=rf"`dtype` must be a floating-point dtype such as torch\.float32 "
                                         rf"\(got {re.escape(str(dtype))}\)"):
        vit.sincos_2d_encoding(2, 2, 8, dtype=dtype)
    assert vit.sincos_2d_encoding(2, 2, 8, dtype=torch.float64).dtype == torch.float64


def test_non_finite_inputs_to_the_forwards_and_orthogonalize_are_documented_as_legitimate():
    """Judged legitimate (NaN in, NaN out, as torch.nn modules): a check would sync the GPU in the hot
    path. The docstrings say so, and train_classifier still refuses NaN images up front."""
    from companion import modern, vit

    torch.manual_seed(0)
    m = vit.VisionTransformer(vit.ViTConfig(image_size=8, patch_size=2, n_channels=1, n_classes=10, d_model=16,
                                            n_layers=1, n_heads=2)).eval()
    for bad in (NAN, INF):
        assert torch.isnan(m(torch.full((1, 1, 8, 8), bad))).all()
    attn = modern.GroupedQueryAttention(32, 4, 2)
    assert torch.isnan(attn(torch.full((1, 3, 32), NAN))).all()
    g = torch.rand(3, 3)
    g[0, 0] = NAN
    assert torch.isnan(modern.orthogonalize(g)).all()
    for doc in (vit.VisionTransformer.__doc__, modern.GroupedQueryAttention.__doc__, modern.orthogonalize.__doc__):
        assert "legitimate" in doc and "NaN" in doc
    with pytest.raises(ValueError, match=r"`images`"):
        vit.train_classifier(m, torch.full((4, 1, 8, 8), NAN), torch.zeros(4, dtype=torch.long), epochs=1)


@pytest.mark.parametrize("steps", [0, -1])
def test_orthogonalize_refuses_fewer_than_one_step_as_muon_does(steps):
    from companion import modern

    with pytest.raises(ValueError, match=rf"`steps` must be a positive integer \(got steps={steps}\)"):
        modern.orthogonalize(torch.rand(3, 3), steps=steps)
    with pytest.raises(ValueError, match=rf"`ns_steps` must be a positive integer \(got ns_steps={steps}\)"):
        modern.Muon([nn.Parameter(torch.rand(4, 4))], ns_steps=steps)


def test_muon_with_adamw_refuses_none_swapped_arguments_and_a_foreign_state_dict():
    from companion import modern

    w, b = nn.Parameter(torch.rand(4, 4)), nn.Parameter(torch.rand(4))
    with pytest.raises(TypeError, match=r"`muon` must be a companion\.modern\.Muon \(got NoneType\)"):
        modern.MuonWithAdamW(None, torch.optim.AdamW([b]))
    with pytest.raises(TypeError, match=r"`adamw` must be a torch\.optim\.Optimizer such as AdamW \(got NoneType\)"):
        modern.MuonWithAdamW(modern.Muon([w]), None)
    with pytest.raises(TypeError, match=r"MuonWithAdamW\(muon, adamw\) takes the Muon first, then the AdamW \(got "
                                        r"AdamW, Muon\): swap the two arguments"):
        modern.MuonWithAdamW(torch.optim.AdamW([b]), modern.Muon([w]))
    with pytest.raises(TypeError, match=r"`adamw` must be the optimizer of the vectors .* \(got a second Muon\)"):
        modern.MuonWithAdamW(modern.Muon([w]), modern.Muon([nn.Parameter(torch.rand(3, 3))]))
    o = modern.MuonWithAdamW(modern.Muon([w]), torch.optim.AdamW([b]))
    with pytest.raises(ValueError, match=r"`state` must be a MuonWithAdamW\.state_dict\(\), a dict with keys 'muon' "
                                         r"and 'adamw' \(got keys \['param_groups', 'state'\]\)"):
        o.load_state_dict(torch.optim.AdamW([b]).state_dict())
    o.load_state_dict(o.state_dict())  # its own state still loads


def test_rotate_names_the_last_dimension_and_a_full_cache_says_so():
    from companion import modern

    with pytest.raises(ValueError, match=r"the last dimension of `x` \(d_head\) must be even: features rotate in "
                                         r"pairs \(got d_head=7, x of shape \(1, 3, 7\)\)"):
        modern.rotate(torch.rand(1, 3, 7))
    torch.manual_seed(0)
    m = modern.ModernGPT(modern.ModernConfig(vocab_size=50, context_length=16, d_model=32, n_layers=1, n_heads=4,
                                             n_kv_heads=2)).eval()
    cache = m.new_cache()
    m(torch.randint(0, 50, (1, 16)), cache=cache)
    with pytest.raises(ValueError, match=r"16 cached \+ 1 new positions > context_length=16; the cache is full: "
                                         r"start a new one with model\.new_cache\(\)"):
        m(torch.randint(0, 50, (1, 1)), cache=cache)
    cache = m.new_cache()
    m(torch.randint(0, 50, (1, 10)), cache=cache)
    with pytest.raises(ValueError, match=r"crop `idx` to its last 6 tokens"):
        m(torch.randint(0, 50, (1, 7)), cache=cache)
