"""companion.block against torch.nn.TransformerEncoderLayer / TransformerDecoderLayer with copied weights,
and the parameter counter against built models and published sizes."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from companion.attention import KVCache
from companion.block import (
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    TransformerBlock,
    block_parameters,
    count_parameters,
    parameter_breakdown,
)

SETTINGS = settings(max_examples=12, deadline=None)


def copy_mha(ours, theirs: nn.MultiheadAttention):
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)


def copy_common(ours, theirs, norms):
    with torch.no_grad():
        for name in ["linear1", "linear2"]:
            getattr(theirs, name).weight.copy_(getattr(ours.ff, name).weight)
            getattr(theirs, name).bias.copy_(getattr(ours.ff, name).bias)
        for name in norms:
            getattr(theirs, name).weight.copy_(getattr(ours, name).weight)
            getattr(theirs, name).bias.copy_(getattr(ours, name).bias)


def randomize(module, g):
    with torch.no_grad():  # LayerNorm starts at (1, 0): random values make sure the norms are really compared
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


@SETTINGS
@given(
    B=st.integers(1, 3), T=st.integers(1, 7), n_heads=st.sampled_from([1, 2, 4]), d_head=st.integers(1, 6),
    norm_first=st.booleans(), padded=st.booleans(), seed=st.integers(0, 2**31 - 1),
)
def test_encoder_block_equals_torch(B, T, n_heads, d_head, norm_first, padded, seed):
    g = torch.Generator().manual_seed(seed)
    d_model = n_heads * d_head
    d_ff = 2 * d_model + 3
    ours = EncoderBlock(d_model, n_heads, d_ff, norm_first=norm_first).eval()
    randomize(ours, g)
    theirs = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=norm_first).eval()
    copy_mha(ours.attn, theirs.self_attn)
    copy_common(ours, theirs, ["norm1", "norm2"])
    x = torch.randn(B, T, d_model, generator=g)
    key_mask = None
    if padded:  # every sequence keeps at least one real token
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        key_mask = torch.arange(T)[None, :] < lengths[:, None]
    with torch.no_grad():
        y = ours(x, key_mask=key_mask)
        y_ref = theirs(x, src_key_padding_mask=None if key_mask is None else ~key_mask)  # torch: True = padding
    if key_mask is not None:  # torch's fast path may zero padded rows: compare the real tokens
        y, y_ref = y[key_mask], y_ref[key_mask]
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_gradients_equal_torch(norm_first):
    g = torch.Generator().manual_seed(1)
    ours = EncoderBlock(8, 2, 16, norm_first=norm_first, activation="gelu")
    randomize(ours, g)
    theirs = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, activation="gelu", batch_first=True, norm_first=norm_first)
    copy_mha(ours.attn, theirs.self_attn)
    copy_common(ours, theirs, ["norm1", "norm2"])
    x = torch.randn(2, 5, 8, generator=g, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    ours(x).square().sum().backward()
    theirs(x2).square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.ff.linear1.weight.grad, theirs.linear1.weight.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.norm1.weight.grad, theirs.norm1.weight.grad, rtol=1e-4, atol=1e-5)


@SETTINGS
@given(
    B=st.integers(1, 3), T=st.integers(1, 6), S=st.integers(1, 6), n_heads=st.sampled_from([1, 2, 3]),
    norm_first=st.booleans(), memory_padded=st.booleans(), seed=st.integers(0, 2**31 - 1),
)
def test_decoder_block_equals_torch(B, T, S, n_heads, norm_first, memory_padded, seed):
    g = torch.Generator().manual_seed(seed)
    d_model = 4 * n_heads
    ours = DecoderBlock(d_model, n_heads, 3 * d_model, norm_first=norm_first).eval()
    randomize(ours, g)
    theirs = nn.TransformerDecoderLayer(d_model, n_heads, 3 * d_model, dropout=0.0, activation="relu",
                                        batch_first=True, norm_first=norm_first).eval()
    copy_mha(ours.attn, theirs.self_attn)
    copy_mha(ours.cross_attn, theirs.multihead_attn)
    copy_common(ours, theirs, ["norm1", "norm2", "norm3"])
    x = torch.randn(B, T, d_model, generator=g)
    memory = torch.randn(B, S, d_model, generator=g)
    mem_mask = None
    if memory_padded:
        lengths = torch.randint(1, S + 1, (B,), generator=g)
        mem_mask = torch.arange(S)[None, :] < lengths[:, None]
    causal_float = nn.Transformer.generate_square_subsequent_mask(T)  # -inf above the diagonal
    with torch.no_grad():
        y = ours(x, memory, is_causal=True, memory_key_mask=mem_mask)
        y_ref = theirs(x, memory, tgt_mask=causal_float, tgt_is_causal=True,
                       memory_key_padding_mask=None if mem_mask is None else ~mem_mask)
    torch.testing.assert_close(y, y_ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_copy_from_torch(norm_first):
    enc = nn.TransformerEncoderLayer(8, 2, 12, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    dec = nn.TransformerDecoderLayer(8, 2, 12, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
    with torch.no_grad():
        for p in [*enc.parameters(), *dec.parameters()]:
            p.add_(torch.randn(p.shape) * 0.1)  # move the norms off (1, 0)
    x, memory = torch.randn(2, 5, 8), torch.randn(2, 3, 8)
    ours_enc = EncoderBlock(8, 2, 12, norm_first=norm_first).eval().copy_from_torch(enc)
    ours_dec = DecoderBlock(8, 2, 12, norm_first=norm_first).eval().copy_from_torch(dec)
    with torch.no_grad():
        torch.testing.assert_close(ours_enc(x), enc(x), rtol=1e-4, atol=1e-5)
        causal = nn.Transformer.generate_square_subsequent_mask(5)
        torch.testing.assert_close(ours_dec(x, memory), dec(x, memory, tgt_mask=causal), rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match=r"`layer` must have d_model=8, nhead=2, dim_feedforward=32"):
        EncoderBlock(8, 2).copy_from_torch(enc)
    with pytest.raises(TypeError, match=r"`layer` must be a torch.nn.TransformerDecoderLayer \(got TransformerEncoderLayer\)"):
        DecoderBlock(8, 2, 12, norm_first=norm_first).copy_from_torch(enc)


def test_decoder_is_causal():
    """Changing a later target token leaves earlier outputs unchanged; changing memory changes all."""
    block = DecoderBlock(8, 2).eval()
    x, memory = torch.randn(1, 6, 8), torch.randn(1, 4, 8)
    x2 = x.clone()
    x2[:, 4] += 1.0
    with torch.no_grad():
        y, y2 = block(x, memory), block(x2, memory)
        y3 = block(x, memory + 1.0)
    torch.testing.assert_close(y[:, :4], y2[:, :4])
    assert not torch.allclose(y[:, 4:], y2[:, 4:])
    assert not torch.allclose(y[:, 0], y3[:, 0])


@pytest.mark.parametrize("norm_first", [False, True])
def test_block_kv_cache_matches_full_causal_pass(norm_first):
    block = TransformerBlock(8, 2, norm_first=norm_first).eval()
    x = torch.randn(2, 7, 8)
    with torch.no_grad():
        full = block(x, is_causal=True)
        cache = KVCache()
        first = block(x[:, :4], is_causal=True, kv_cache=cache)
        rest = [block(x[:, t : t + 1], is_causal=True, kv_cache=cache) for t in range(4, 7)]
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), full, rtol=1e-5, atol=1e-5)
    assert len(cache) == 7


def test_feed_forward_by_hand_and_default_d_ff():
    ff = FeedForward(6, 10)
    x = torch.randn(2, 3, 6)
    by_hand = torch.relu(x @ ff.linear1.weight.T + ff.linear1.bias) @ ff.linear2.weight.T + ff.linear2.bias
    torch.testing.assert_close(ff(x), by_hand)
    assert TransformerBlock(16, 4).ff.linear1.out_features == 64  # d_ff defaults to 4 * d_model
    gpt2_ff = FeedForward(6, 10, activation="gelu_tanh")
    with torch.no_grad():
        gpt2_ff.load_state_dict(ff.state_dict())
    h = x @ ff.linear1.weight.T + ff.linear1.bias
    gelu_tanh = 0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h**3)))
    torch.testing.assert_close(gpt2_ff(x), gelu_tanh @ ff.linear2.weight.T + ff.linear2.bias)


def test_dropout_only_in_training():
    block = TransformerBlock(8, 2, dropout=0.5)
    x = torch.randn(2, 5, 8)
    block.eval()
    torch.testing.assert_close(block(x), block(x))
    block.train()
    assert not torch.allclose(block(x), block(x))


# ------------------------------------------------------------------ parameter counting


class TinyGPT(nn.Module):
    """A decoder-only model built only to be counted: embeddings, pre-norm blocks, final norm, head."""

    def __init__(self, vocab_size, context_length, d_model, n_layers, n_heads, d_ff, bias, tied):
        super().__init__()
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(context_length, d_model)
        self.blocks = nn.ModuleList(TransformerBlock(d_model, n_heads, d_ff, norm_first=True, bias=bias) for _ in range(n_layers))
        self.final_norm = nn.LayerNorm(d_model, bias=bias)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        if tied:
            self.head.weight = self.tok.weight


def n_params(model):
    return sum(p.numel() for p in model.parameters())  # parameters() counts a tied tensor once


@SETTINGS
@given(
    vocab_size=st.integers(1, 50), context_length=st.integers(1, 20), n_heads=st.integers(1, 3),
    d_head=st.integers(1, 5), n_layers=st.integers(1, 3), d_ff=st.one_of(st.none(), st.integers(1, 30)),
    bias=st.booleans(), tied=st.booleans(),
)
def test_count_matches_built_decoder_only(vocab_size, context_length, n_heads, d_head, n_layers, d_ff, bias, tied):
    d_model = n_heads * d_head
    model = TinyGPT(vocab_size, context_length, d_model, n_layers, n_heads, d_ff, bias, tied)
    assert count_parameters(vocab_size=vocab_size, context_length=context_length, d_model=d_model,
                            n_layers=n_layers, n_heads=n_heads, d_ff=d_ff, bias=bias,
                            tied_embeddings=tied) == n_params(model)


@SETTINGS
@given(d_model=st.sampled_from([4, 6, 8]), n_enc=st.integers(1, 2), n_dec=st.integers(1, 2),
       d_ff=st.integers(1, 20), vocab_size=st.integers(1, 30))
def test_count_matches_built_encoder_decoder(d_model, n_enc, n_dec, d_ff, vocab_size):
    model = nn.ModuleDict({
        "emb": nn.Embedding(vocab_size, d_model),  # shared by both stacks and the head; sinusoidal positions
        "enc": nn.ModuleList(EncoderBlock(d_model, 2, d_ff) for _ in range(n_enc)),
        "dec": nn.ModuleList(DecoderBlock(d_model, 2, d_ff) for _ in range(n_dec)),
        "enc_norm": nn.LayerNorm(d_model), "dec_norm": nn.LayerNorm(d_model),
    })
    assert count_parameters(vocab_size=vocab_size, d_model=d_model, n_layers=n_enc, n_decoder_layers=n_dec,
                            d_ff=d_ff) == n_params(model)
    assert block_parameters(d_model, d_ff, cross_attention=True) == n_params(model["dec"][0])


def test_count_matches_torch_encoder_layer_and_bert_style():
    layer = nn.TransformerEncoderLayer(32, 4, 128, batch_first=True)
    assert block_parameters(32, 128) == n_params(layer) == n_params(EncoderBlock(32, 4, 128))
    assert block_parameters(32, 128, bias=False) == n_params(EncoderBlock(32, 4, 128, bias=False))
    # a BERT-shaped model in miniature: word, position and segment tables, embedding norm, pooler
    bert = nn.ModuleDict({
        "word": nn.Embedding(50, 16), "pos": nn.Embedding(12, 16), "seg": nn.Embedding(2, 16),
        "emb_norm": nn.LayerNorm(16), "layers": nn.ModuleList(EncoderBlock(16, 2, 64, activation="gelu") for _ in range(3)),
        "pooler": nn.Linear(16, 16),
    })
    assert count_parameters(vocab_size=50, context_length=12, n_segments=2, d_model=16, n_layers=3, n_heads=2,
                            embedding_norm=True, final_norm=False, pooler=True) == n_params(bert)


def test_published_sizes():
    gpt2 = count_parameters(vocab_size=50257, context_length=1024, d_model=768, n_layers=12, n_heads=12)
    assert gpt2 == 124_439_808  # GPT-2 small with its head tied to the token embedding
    assert count_parameters(vocab_size=50257, context_length=1024, d_model=768, n_layers=12, n_heads=12,
                            tied_embeddings=False) == 124_439_808 + 50257 * 768
    bert_large = count_parameters(vocab_size=30522, context_length=512, n_segments=2, d_model=1024, n_layers=24,
                                  n_heads=16, embedding_norm=True, final_norm=False, pooler=True)
    assert bert_large == 335_141_888  # "340M" in the paper; the masked-LM head adds about 1.1M more
    assert abs(bert_large - 340e6) / 340e6 < 0.02
    gpt3 = count_parameters(vocab_size=50257, context_length=2048, d_model=12288, n_layers=96, n_heads=96)
    assert abs(gpt3 - 175e9) / 175e9 < 0.01
    base = parameter_breakdown(vocab_size=37000, d_model=512, n_layers=6, n_decoder_layers=6, n_heads=8, d_ff=2048)
    assert abs(base["total"] - 65e6) / 65e6 < 0.05  # the original "base" model: 65M


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"`memory` must have shape \(B, S, d_model=8\) \(got shape=\(1, 4, 6\)\); `memory` is the encoder's output"):
        DecoderBlock(8, 2)(torch.randn(1, 3, 8), torch.randn(1, 4, 6))
    with pytest.raises(ValueError, match=r"decoder's batch size B=2 \(got 1\)"):
        DecoderBlock(8, 2)(torch.randn(2, 3, 8), torch.randn(1, 4, 8))
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, T, d_model=8\) \(got shape=\(2, 3, 6\)\)"):
        TransformerBlock(8, 2)(torch.randn(2, 3, 6))
    with pytest.raises(TypeError, match=r"`x` must be a torch.Tensor of shape \(B, T, d_model=2\) \(got list\)"):
        FeedForward(2, 4)([[1.0, 2.0]])
    with pytest.raises(ValueError, match=r"`activation` must be one of .* \(got activation='tanh'\)"):
        FeedForward(8, 32, activation="tanh")
    with pytest.raises(ValueError, match=r"`d_ff` must be a positive integer \(got d_ff=0\); use d_ff=None for 4 \* d_model"):
        TransformerBlock(8, 2, 0)
    with pytest.raises(ValueError, match=r"`d_model` must be divisible by `n_heads` \(got d_model=10, n_heads=3\)"):
        count_parameters(d_model=10, n_layers=2, n_heads=3)
    with pytest.raises(ValueError, match=r"`n_layers` must be a positive integer \(got n_layers=0\)"):
        count_parameters(d_model=8, n_layers=0)
    with pytest.raises(ValueError, match=r"`vocab_size` must be a non-negative integer \(got vocab_size=-1\)"):
        count_parameters(d_model=8, n_layers=1, vocab_size=-1)
