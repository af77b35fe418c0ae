"""companion.seq2seq: the encoder-decoder against torch.nn.Transformer (values and gradients),
its cache against the plain forward pass, chapter 8's decoders on p(y | x), and its errors."""
import math

import pytest
import torch
from torch import nn

from companion import decoding
from companion.attention import KVCache
from companion.checkpoint import load_checkpoint, save_checkpoint
from companion.seq2seq import ConditionalLM, Decoder, DecoderCache, Seq2SeqConfig, Seq2SeqTransformer
from companion.translation import TranslationTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

PAD = 0


def make_pair(norm_first=False, n_enc=2, n_dec=2, d_model=8, n_heads=2, d_ff=12, vocab=11, activation="relu", seed=0):
    """Our model and a torch.nn.Transformer with the same (random, non-trivial) weights."""
    g = torch.Generator().manual_seed(seed)
    config = Seq2SeqConfig(vocab_size=vocab, context_length=16, d_model=d_model, n_heads=n_heads, n_encoder_layers=n_enc,
                           n_decoder_layers=n_dec, d_ff=d_ff, norm_first=norm_first, activation=activation)
    torch.manual_seed(seed)
    ours = Seq2SeqTransformer(config).eval()
    theirs = nn.Transformer(d_model, n_heads, n_enc, n_dec, d_ff, dropout=0.0, activation=activation,
                            batch_first=True, norm_first=norm_first).eval()
    with torch.no_grad():  # norms start at (1, 0): random values make sure every parameter is compared
        for p in theirs.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    ours.copy_from_torch(theirs)
    return ours, theirs


def batch(B=3, S=7, T=5, vocab=11, src_lengths=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, vocab, (B, S), generator=g)
    tgt = torch.randint(1, vocab, (B, T), generator=g)
    if src_lengths is not None:
        for b, n in enumerate(src_lengths):
            src[b, n:] = PAD
    return src, tgt


def torch_reference(ours, theirs, src, tgt, tgt_key_mask=None):
    """torch.nn.Transformer on our embeddings, then our head: logits (B, T, V)."""
    T = tgt.shape[1]
    src_pad = src == PAD  # torch: True = padding
    out = theirs(ours.embed_source(src), ours.embed_target(tgt),
                 tgt_mask=nn.Transformer.generate_square_subsequent_mask(T), tgt_is_causal=True,
                 src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad,
                 tgt_key_padding_mask=None if tgt_key_mask is None else ~tgt_key_mask)
    return ours.head(out)


CONFIGS = [  # (norm_first, n_enc, n_dec, d_model, n_heads, S, T, source lengths, target padding)
    (False, 1, 1, 8, 2, 7, 5, None, False),
    (True, 1, 1, 8, 2, 4, 9, None, False),
    (False, 2, 3, 12, 3, 7, 5, [7, 3, 5], True),
    (True, 3, 2, 12, 4, 6, 8, [2, 6, 4], True),
    (False, 3, 1, 16, 4, 9, 3, [9, 1, 4], False),
    (True, 2, 2, 16, 2, 5, 5, [5, 5, 2], True),
]


@pytest.mark.parametrize("norm_first, n_enc, n_dec, d, h, S, T, lengths, tgt_pad", CONFIGS)
def test_logits_equal_torch_transformer(norm_first, n_enc, n_dec, d, h, S, T, lengths, tgt_pad):
    ours, theirs = make_pair(norm_first, n_enc, n_dec, d, h, 2 * d + 3)
    src, tgt = batch(3, S, T, src_lengths=lengths)
    tgt_mask = None
    if tgt_pad:  # right-padded targets: rows of length T, T - 2, T - 1
        tgt_mask = torch.arange(T)[None] < torch.tensor([T, T - 2, T - 1])[:, None]
    with torch.no_grad():
        got, _ = ours(src, tgt, tgt_key_mask=tgt_mask)
        want = torch_reference(ours, theirs, src, tgt, tgt_mask)
    keep = tgt_mask if tgt_mask is not None else torch.ones(3, T, dtype=torch.bool)
    torch.testing.assert_close(got[keep], want[keep], rtol=1e-4, atol=1e-5)


def _torch_grads_by_our_names(theirs: nn.Transformer, d: int) -> dict[str, torch.Tensor]:
    """The gradients of torch's parameters, renamed (and split) to our parameter names."""
    grads = {}
    for stack, ours_stack in (("encoder", "encoder"), ("decoder", "decoder")):
        for i, layer in enumerate(getattr(theirs, stack).layers):
            attns = [("self_attn", "attn")] + ([("multihead_attn", "cross_attn")] if stack == "decoder" else [])
            for t_name, o_name in attns:
                mha = getattr(layer, t_name)
                for part, w, b in zip("qkv", mha.in_proj_weight.grad.chunk(3), mha.in_proj_bias.grad.chunk(3)):
                    grads[f"{ours_stack}.blocks.{i}.{o_name}.{part}_proj.weight"] = w
                    grads[f"{ours_stack}.blocks.{i}.{o_name}.{part}_proj.bias"] = b
                grads[f"{ours_stack}.blocks.{i}.{o_name}.out_proj.weight"] = mha.out_proj.weight.grad
                grads[f"{ours_stack}.blocks.{i}.{o_name}.out_proj.bias"] = mha.out_proj.bias.grad
            for lin in ("linear1", "linear2"):
                grads[f"{ours_stack}.blocks.{i}.ff.{lin}.weight"] = getattr(layer, lin).weight.grad
                grads[f"{ours_stack}.blocks.{i}.ff.{lin}.bias"] = getattr(layer, lin).bias.grad
            for norm in ("norm1", "norm2") + (("norm3",) if stack == "decoder" else ()):
                grads[f"{ours_stack}.blocks.{i}.{norm}.weight"] = getattr(layer, norm).weight.grad
                grads[f"{ours_stack}.blocks.{i}.{norm}.bias"] = getattr(layer, norm).bias.grad
        grads[f"{ours_stack}.norm.weight"] = getattr(theirs, stack).norm.weight.grad
        grads[f"{ours_stack}.norm.bias"] = getattr(theirs, stack).norm.bias.grad
    return grads


@pytest.mark.parametrize("norm_first, n_enc, n_dec, d, h, S, T, lengths, tgt_pad", CONFIGS[1:4])
def test_gradients_equal_torch_transformer(norm_first, n_enc, n_dec, d, h, S, T, lengths, tgt_pad):
    ours, theirs = make_pair(norm_first, n_enc, n_dec, d, h, 2 * d + 3)
    src, tgt = batch(3, S, T, src_lengths=lengths)
    with torch.no_grad():
        x_src, x_tgt = ours.embed_source(src), ours.embed_target(tgt)  # the same inputs for both
    weights = torch.randn(3, T, d, generator=torch.Generator().manual_seed(5))  # a loss that reads every output
    inputs = {}
    outputs = {}
    for name, run in (("ours", lambda a, b: ours.decoder(b, ours.encoder(a, key_mask=src != PAD),
                                                          memory_key_mask=src != PAD)),
                      ("theirs", lambda a, b: theirs(a, b, tgt_mask=nn.Transformer.generate_square_subsequent_mask(T),
                                                     src_key_padding_mask=src == PAD,
                                                     memory_key_padding_mask=src == PAD))):
        a, b = x_src.clone().requires_grad_(), x_tgt.clone().requires_grad_()
        out = run(a, b)  # (B, T, d)
        (out * weights).sum().backward()
        inputs[name], outputs[name] = (a.grad, b.grad), out.detach()
    torch.testing.assert_close(outputs["ours"], outputs["theirs"], rtol=1e-4, atol=1e-5)
    real = (src != PAD)[..., None]  # padded source positions get no gradient in ours; torch's may differ
    torch.testing.assert_close(inputs["ours"][0] * real, inputs["theirs"][0] * real, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(inputs["ours"][1], inputs["theirs"][1], rtol=1e-4, atol=1e-5)
    theirs_grads = _torch_grads_by_our_names(theirs, d)
    ours_grads = {n: p.grad for n, p in ours.named_parameters() if n.startswith(("encoder.", "decoder."))}
    assert set(ours_grads) == set(theirs_grads)
    for name, g in ours_grads.items():
        torch.testing.assert_close(g, theirs_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def test_gelu_is_copied_and_compared_too():
    ours, theirs = make_pair(False, 1, 2, activation="gelu")
    src, tgt = batch()
    with torch.no_grad():
        torch.testing.assert_close(ours(src, tgt)[0], torch_reference(ours, theirs, src, tgt), rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ the model's own behaviour
def tiny(norm_first=False, tie=True, n_dec=2, seed=0, **kw):
    torch.manual_seed(seed)
    config = Seq2SeqConfig(vocab_size=13, context_length=20, d_model=16, n_heads=4, n_encoder_layers=2,
                           n_decoder_layers=n_dec, norm_first=norm_first, tie_embeddings=tie, **kw)
    return Seq2SeqTransformer(config).eval()


def test_embeddings_are_scaled_by_sqrt_d_model_and_positions_added():
    model = tiny()
    src = torch.tensor([[3, 4, 5]])
    want = model.src_emb.weight[src] * 4.0 + model.pos.table[:3]  # sqrt(16) = 4
    torch.testing.assert_close(model.embed_source(src), want)
    torch.testing.assert_close(model.embed_target(src, offset=2), model.tgt_emb.weight[src] * 4.0 + model.pos.table[2:5])


def test_tied_head_shares_the_target_embedding():
    tied, untied = tiny(tie=True), tiny(tie=False)
    assert tied.head.weight is tied.tgt_emb.weight
    assert untied.head.weight is not untied.tgt_emb.weight
    assert untied.num_parameters() - tied.num_parameters() == 13 * 16


def test_initial_loss_is_near_log_vocab():
    model = tiny()
    src, tgt = torch.randint(3, 13, (8, 9)), torch.randint(3, 13, (8, 7))
    _, loss = model(src, tgt, torch.randint(3, 13, (8, 7)))
    assert abs(loss.item() - math.log(13)) < 0.6


def test_loss_ignores_padded_targets():
    model = tiny()
    src, tgt = torch.randint(3, 13, (2, 6)), torch.randint(3, 13, (2, 5))
    targets = torch.randint(3, 13, (2, 5))
    targets[1, 3:] = PAD
    logits, loss = model(src, tgt, targets)
    keep = targets != PAD
    want = nn.functional.cross_entropy(logits[keep], targets[keep])
    torch.testing.assert_close(loss, want)


@pytest.mark.parametrize("norm_first", [False, True])
def test_source_padding_is_masked(norm_first):
    """Appending padding to a source changes nothing; the same padding unmasked does change the output."""
    model = tiny(norm_first)
    src, tgt = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[1, 9, 10]])
    padded = torch.tensor([[5, 6, 7, 8, PAD, PAD, PAD]])
    with torch.no_grad():
        plain, _ = model(src, tgt)
        masked, _ = model(padded, tgt)
        unmasked, _ = model(padded, tgt, src_key_mask=torch.ones(1, 7, dtype=torch.bool))
    torch.testing.assert_close(masked, plain, rtol=1e-5, atol=1e-5)
    assert (unmasked - plain).abs().max() > 1e-3


def test_decoder_is_causal_and_reads_the_source():
    model = tiny()
    src, tgt = batch(2, 6, 5, vocab=13)
    with torch.no_grad():
        out, _ = model(src, tgt)
        changed = tgt.clone()
        changed[:, 3] = (changed[:, 3] % 12) + 1
        out2, _ = model(src, changed)
        out3, _ = model((src % 12) + 1, tgt)
    torch.testing.assert_close(out[:, :3], out2[:, :3])
    assert (out[:, 3:] - out2[:, 3:]).abs().amax() > 1e-4
    assert ((out - out3).abs().amax(-1) > 1e-4).all()  # every target position reads the source


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("chunks", [[1, 1, 1, 1, 1, 1], [2, 3, 1], [6]])
def test_cached_decoding_equals_the_plain_forward(norm_first, chunks):
    model = tiny(norm_first, n_dec=3)
    src, tgt = batch(3, 7, 6, vocab=13, src_lengths=[7, 2, 5])
    with torch.no_grad():
        want, _ = model(src, tgt)
        memory = model.encode(src)
        cache = model.new_cache(memory, model.source_key_mask(src))
        got, start = [], 0
        for n in chunks:
            got.append(model.decode(tgt[:, start:start + n], cache=cache))
            start += n
        assert len(cache) == 6
    torch.testing.assert_close(torch.cat(got, 1), want, rtol=1e-4, atol=1e-5)


def test_cross_keys_and_values_are_computed_once():
    model = tiny()
    calls = []
    model.decoder.blocks[0].cross_attn.k_proj.register_forward_hook(lambda *a: calls.append(1))
    cond = model.conditioned_on(torch.tensor([[4, 5, 6]]))
    decoding.greedy(cond, [1], 8)
    assert len(calls) == 1


def test_reorder_moves_source_rows_with_the_beams():
    model = tiny()
    src, tgt = batch(2, 5, 3, vocab=13, src_lengths=[5, 2])
    with torch.no_grad():
        cache = model.new_cache(model.encode(src), model.source_key_mask(src))
        model.decode(tgt[:, :2], cache=cache)
        index = torch.tensor([1, 1, 0])
        cache.reorder(index)
        step = model.decode(tgt[index, 2:3], cache=cache)
        want, _ = model(src[index], tgt[index])
    torch.testing.assert_close(step[:, 0], want[:, 2], rtol=1e-4, atol=1e-5)
    assert cache.memory_key_mask.tolist() == (src != PAD)[index].tolist()


def test_cross_attention_weights_equal_the_blocks_own_attention():
    """Reference: run the chapter 6 blocks and ask each block's cross-attention for its weights."""
    for norm_first in (False, True):
        model = tiny(norm_first)
        src, tgt = batch(2, 6, 4, vocab=13, src_lengths=[6, 3])
        mask = src != PAD
        got = model.cross_attention_weights(src, tgt)  # (L, B, h, T, S)
        with torch.no_grad():
            memory = model.encode(src)
            x, want = model.embed_target(tgt), []
            for block in model.decoder.blocks:
                h = block.norm1(x) if norm_first else None
                if norm_first:
                    h = x + block.attn(h, is_causal=True)[0]
                    q_in = block.norm2(h)
                else:
                    q_in = block.norm1(x + block.attn(x, is_causal=True)[0])
                _, w = block.cross_attn(q_in, memory, memory, key_mask=mask, need_weights=True, average_weights=False)
                want.append(w)
                x = block(x, memory, memory_key_mask=mask)
        torch.testing.assert_close(got, torch.stack(want), rtol=1e-4, atol=1e-6)
        assert got.shape == (2, 2, 4, 4, 6)
        torch.testing.assert_close(got.sum(-1), torch.ones(2, 2, 4, 4))
        assert (got[:, 1, :, :, 3:] == 0).all()  # no weight on the padding of source 1


# ------------------------------------------------------------------ chapter 8's decoders on p(y | x)
def test_decoders_with_and_without_cache_agree():
    model = tiny(seed=3)
    cond = model.conditioned_on(torch.tensor([[4, 5, 6, 7, 8]]))
    for use_cache in (True, False):
        assert isinstance(cond(torch.tensor([[1, 4]])), torch.Tensor)
    a = decoding.greedy(cond, [1], 12, use_cache=True)
    b = decoding.greedy(cond, [1], 12, use_cache=False)
    assert a.tolist() == b.tolist()
    ra = decoding.beam_search(cond, [1], 10, k=3, eos_id=2, use_cache=True)
    rb = decoding.beam_search(cond, [1], 10, k=3, eos_id=2, use_cache=False)
    assert [h.tokens.tolist() for h in ra.hypotheses] == [h.tokens.tolist() for h in rb.hypotheses]
    for h in ra.hypotheses:  # beam scores are the log-probabilities p(y | x), recomputed from scratch
        assert math.isclose(h.score, decoding.sequence_log_prob(cond, [1], h.generated), abs_tol=1e-4)
    g1 = torch.Generator().manual_seed(0)
    g2 = torch.Generator().manual_seed(0)
    s1 = decoding.sample(cond, [1], 10, generator=g1, use_cache=True)
    s2 = decoding.sample(cond, [1], 10, generator=g2, use_cache=False)
    assert s1.tolist() == s2.tolist()


def test_beam_search_with_wide_beam_finds_the_exhaustive_best():
    """With 5 tokens and 3 steps, a beam as wide as all prefixes is exhaustive search."""
    torch.manual_seed(1)
    config = Seq2SeqConfig(vocab_size=5, context_length=8, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1)
    model = Seq2SeqTransformer(config).eval()
    cond = model.conditioned_on(torch.tensor([[3, 4, 3]]))
    best = max(((a, b, c) for a in range(5) for b in range(5) for c in range(5)),
               key=lambda y: decoding.sequence_log_prob(cond, [1], list(y)))
    result = decoding.beam_search(cond, [1], 3, k=125)
    assert tuple(result.best.generated.tolist()) == best


def test_batched_greedy_with_padded_sources_equals_one_by_one():
    model = tiny(seed=4)
    sources = [[4, 5, 6, 7, 8], [9, 3], [5, 5, 10, 11]]
    src = torch.zeros(3, 5, dtype=torch.long)
    for b, s in enumerate(sources):
        src[b, : len(s)] = torch.tensor(s)
    batched = decoding.greedy(model.conditioned_on(src), torch.ones(3, 1, dtype=torch.long), 8)
    for b, s in enumerate(sources):
        alone = decoding.greedy(model.conditioned_on(torch.tensor([s])), [1], 8)
        assert batched[b].tolist() == alone.tolist()


def test_one_source_row_serves_many_target_rows():
    model = tiny()
    cond = model.conditioned_on(torch.tensor([[4, 5, 6]]))
    ids = torch.tensor([[1, 4], [1, 7]])
    with torch.no_grad():
        want = model.decode(ids, model.encode(torch.tensor([[4, 5, 6], [4, 5, 6]])))
    torch.testing.assert_close(cond(ids), want)
    cache = cond.new_cache()
    torch.testing.assert_close(cond(ids, cache), want)  # the cache of one row is copied to both
    assert cache.batch_size == 2


def test_checkpoint_round_trip(tmp_path):
    model = tiny(norm_first=True)
    tok = TranslationTokenizer("abcdefghij")
    path = save_checkpoint(tmp_path / "m.safetensors", model, tok)
    loaded, tok2, _ = load_checkpoint(path)
    assert isinstance(loaded, Seq2SeqTransformer) and loaded.config == model.config
    assert loaded.head.weight is loaded.tgt_emb.weight  # the tie survives loading
    assert tok2.chars == tok.chars
    src, tgt = batch(2, 5, 4, vocab=13)
    with torch.no_grad():
        torch.testing.assert_close(loaded(src, tgt)[0], model(src, tgt)[0])


def test_dropout_acts_only_in_training():
    model = tiny(dropout=0.3)
    src, tgt = batch(2, 5, 4, vocab=13)
    with torch.no_grad():
        a, b = model(src, tgt)[0], model(src, tgt)[0]
        model.train()
        c = model(src, tgt)[0]
    torch.testing.assert_close(a, b)
    assert (a - c).abs().max() > 1e-4


# ------------------------------------------------------------------ errors that name the argument
def _bad_calls():
    m = tiny()
    src, tgt = batch(2, 5, 4, vocab=13)
    memory = m.encode(src)
    cache = m.new_cache(memory)
    cond = m.conditioned_on(src)
    return [
        (lambda: Seq2SeqConfig(d_model=30, n_heads=4), ValueError, "`d_model` must be divisible by `n_heads`"),
        (lambda: Seq2SeqConfig(d_model=7, n_heads=7), ValueError, "`d_model` must be even"),
        (lambda: Seq2SeqConfig(vocab_size=0), ValueError, "`vocab_size` must be a positive integer"),
        (lambda: Seq2SeqConfig(n_encoder_layers=True), ValueError, "`n_encoder_layers` must be a positive integer"),
        (lambda: Seq2SeqConfig(d_ff=0), ValueError, "`d_ff` must be a positive integer or None"),
        (lambda: Seq2SeqConfig(dropout=1.0), ValueError, r"`dropout` must be a number in \[0, 1\)"),
        (lambda: Seq2SeqConfig(norm_first="yes"), TypeError, "`norm_first` must be True or False"),
        (lambda: Seq2SeqConfig(activation="tanh"), ValueError, "`activation` must be one of"),
        (lambda: Seq2SeqConfig(vocab_size=5, pad_id=5), ValueError, r"`pad_id` must be a token id in \[0, vocab_size=5\)"),
        (lambda: Seq2SeqTransformer({"d_model": 8}), TypeError, "`config` must be a Seq2SeqConfig"),
        (lambda: m(src.float(), tgt), TypeError, "`src` must hold integer token ids"),
        (lambda: m([[1, 2]], tgt), TypeError, "`src` must be a torch.Tensor"),
        (lambda: m(src[0], tgt), ValueError, r"`src` must have shape \(B, length\)"),
        (lambda: m(src, tgt + 20), ValueError, r"`tgt` must hold token ids in \[0, vocab_size=13\)"),
        (lambda: m(torch.ones(2, 21, dtype=torch.long), tgt), ValueError, "longer than the model's position table"),
        (lambda: m(src, tgt[:1]), ValueError, "`src` and `tgt` must have the same batch size"),
        (lambda: m(src, tgt, tgt[:, :2]), ValueError, "`targets` must be integer ids of the same shape"),
        (lambda: m(torch.zeros(2, 5, dtype=torch.long), tgt), ValueError, r"source rows \[0, 1\] hold only padding"),
        (lambda: m(src, tgt, src_key_mask=torch.ones(2, 5)), TypeError, "`src_key_mask` must be a bool tensor"),
        (lambda: m(src, tgt, src_key_mask=torch.ones(2, 4, dtype=torch.bool)), ValueError,
         r"`src_key_mask` must have shape \(B, length\) = \(2, 5\)"),
        (lambda: m(src, tgt, tgt_key_mask=torch.ones(2, 3, dtype=torch.bool)), ValueError, "`tgt_key_mask` must have shape"),
        (lambda: m.decode(tgt, memory[:, :, :8]), ValueError, r"`memory` must be the encoder's output"),
        (lambda: m.decode(tgt, None), ValueError, r"`memory` must be the encoder's output"),
        (lambda: m.decode(tgt, memory, memory_key_mask=torch.ones(2, 3, dtype=torch.bool)), ValueError,
         "`memory_key_mask` must have shape"),
        (lambda: m.decode(tgt, memory, cache=cache), ValueError, "pass either `memory`"),
        (lambda: m.decode(tgt, cache=KVCache()), TypeError, "`cache` must be a DecoderCache"),
        (lambda: m.decode(torch.ones(2, 21, dtype=torch.long), cache=m.new_cache(memory)), ValueError,
         "21 positions > context_length=20"),
        (lambda: m.new_cache(memory[0]), ValueError, r"`memory` must be the encoder's output"),
        (lambda: m.new_cache(memory, torch.ones(2, 5)), TypeError, "`memory_key_mask` must be a bool tensor"),
        (lambda: m.copy_from_torch(nn.Linear(2, 2)), TypeError, "`transformer` must be a torch.nn.Transformer"),
        (lambda: m.copy_from_torch(nn.Transformer(16, 4, 2, 2, 32, batch_first=True)), ValueError,
         r"`transformer` must have \(d_model, nhead"),
        (lambda: m.cross_attention_weights(src, tgt[:1]), ValueError, "`src` and `tgt` must have the same batch size"),
        (lambda: m.source_key_mask(src.float()), TypeError, "`src` must hold integer token ids"),
        (lambda: m.embed_target(tgt, offset=19), ValueError, "19 cached"),
        (lambda: Decoder(0, 8, 2), ValueError, "`n_layers` must be an integer >= 1"),
        (lambda: m.decoder(torch.randn(2, 4, 8), memory), ValueError, r"`x` must have shape \(B, T, d_model=16\)"),
        (lambda: m.decoder.copy_from_torch(nn.Linear(2, 2)), TypeError, "`decoder` must be a torch.nn.TransformerDecoder"),
        (lambda: m.decoder.copy_from_torch(nn.TransformerDecoder(nn.TransformerDecoderLayer(16, 4, 64, batch_first=True), 3)),
         ValueError, "`decoder` must have 2 layers and a final norm"),
        (lambda: m.decoder.forward_cached(torch.randn(2, 1, 16), "cache"), TypeError, "`cache` must be a DecoderCache"),
        (lambda: m.decoder.forward_cached(torch.randn(3, 1, 16), m.new_cache(memory)), ValueError,
         r"`cache` holds 2 source rows but the target has batch size B=3"),
        (lambda: m.decoder.cross_kv(torch.randn(2, 5)), ValueError, r"`memory` must have shape \(B, T, d_model=16\)"),
        (lambda: DecoderCache([]), TypeError, "`cross_kv` must be a non-empty list"),
        (lambda: DecoderCache(m.decoder.cross_kv(memory), torch.ones(2, 4, dtype=torch.bool)), ValueError,
         r"`memory_key_mask` must be a bool tensor of shape \(B, S\) = \(2, 5\)"),
        (lambda: m.new_cache(memory).reorder(torch.tensor([0.0])), TypeError, "`index` must be a 1-D integer tensor"),
        (lambda: m.new_cache(memory).reorder(torch.tensor([0, 2])), ValueError, r"`index` must hold rows in \[0, 2\)"),
        (lambda: ConditionalLM(nn.Linear(2, 2), memory), TypeError, "`model` must be a Seq2SeqTransformer"),
        (lambda: ConditionalLM(m, memory[0]), ValueError, r"`memory` must have shape \(B, S, d_model=16\)"),
        (lambda: ConditionalLM(m, memory, torch.ones(2, 5, dtype=torch.long)), TypeError, "`memory_key_mask` must be a bool"),
        (lambda: cond(torch.ones(3, 2, dtype=torch.long)), ValueError, r"`ids` must have as many rows as the source \(B=2\)"),
        (lambda: cond(torch.ones(2, 2)), TypeError, "`ids` must hold integer token ids"),
        (lambda: cond(torch.ones(2, 2, dtype=torch.long), cache=[]), TypeError, "`cache` must be a DecoderCache"),
    ]


def test_bad_input_raises_a_clear_error():
    for call, kind, match in _bad_calls():
        with pytest.raises(kind, match=match):
            call()
