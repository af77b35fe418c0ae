"""companion.modern against Hugging Face's Llama and Qwen 3 (random weights, eager attention,
float64), against brute force, and against chapter 5's rotary embedding.

Hugging Face computes RMSNorm and the rotary angles in float32 even in a float64 model, so the two
models agree to about 1e-7 relative, not 1e-15: the tolerances below allow that and nothing more
(a wrong layout, scale or mask is off by more than 1e-2)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from companion import decoding
from companion.attention import KVCache
from companion.modern import (GroupedQueryAttention, ModernConfig, ModernGPT, SwiGLU, halves_order, repeat_kv,
                              rope_frequencies, rotate)
from companion.positional import apply_rotary

transformers = pytest.importorskip("transformers")
TOL = dict(rtol=1e-5, atol=1e-6)


def hf_model(model: ModernGPT, seed: int = 0):
    """A Hugging Face model of the same shape as ``model``, random weights, and ``model`` given them."""
    torch.manual_seed(seed)
    config = model.hf_config()
    config._attn_implementation = "eager"
    cls = transformers.Qwen3ForCausalLM if model.config.qk_norm else transformers.LlamaForCausalLM
    hf = cls(config).double().eval()
    with torch.no_grad():  # HF starts norms at 1: give them random values so they are tested too
        for name, p in hf.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.uniform_(0.5, 1.5)
    model.double().eval().copy_from_hf(hf)
    return hf


CONFIGS = [
    dict(n_heads=4, n_kv_heads=4),  # multi-head attention
    dict(n_heads=4, n_kv_heads=2),  # GQA, 2 query heads per key/value head
    dict(n_heads=8, n_kv_heads=2, d_model=64),  # 4 per group
    dict(n_heads=4, n_kv_heads=1),  # multi-query attention
    dict(n_heads=4, n_kv_heads=2, rope_layout="interleaved"),
    dict(n_heads=4, n_kv_heads=2, tie_embeddings=False, d_head=12, rope_base=500000.0),
    dict(n_heads=4, n_kv_heads=2, qk_norm=True),  # Qwen 3
    dict(n_heads=4, n_kv_heads=1, qk_norm=True, rope_layout="interleaved"),
]


def small(**kw) -> ModernConfig:
    base = dict(vocab_size=50, context_length=32, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2)
    base.update(kw)
    return ModernConfig(**base)


# ------------------------------------------------------------------------------ rotary
def test_the_two_layouts_differ_by_a_permutation():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 16, dtype=torch.float64)
    p = halves_order(16)
    assert p.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]
    torch.testing.assert_close(rotate(x[..., p], offset=5, layout="halves"),
                               rotate(x, offset=5, layout="interleaved")[..., p])
    assert (rotate(x, layout="halves") - rotate(x, layout="interleaved")).abs().max() > 0.1


def test_interleaved_is_chapter_5s_apply_rotary():
    x = torch.randn(3, 9, 8, dtype=torch.float64)
    torch.testing.assert_close(rotate(x, offset=4, layout="interleaved"), apply_rotary(x, offset=4))


def test_halves_is_hf_rotate_half():
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    x = torch.randn(1, 2, 6, 8, dtype=torch.float64)
    angles = torch.arange(6, dtype=torch.float64)[:, None] * rope_frequencies(8)[None]
    emb = torch.cat([angles, angles], dim=-1)[None]  # (1, T, d)
    q, _ = apply_rotary_pos_emb(x, x, emb.cos(), emb.sin())
    torch.testing.assert_close(rotate(x, layout="halves"), q)


@pytest.mark.parametrize("layout", ["halves", "interleaved"])
def test_scores_depend_on_relative_position_only(layout):
    torch.manual_seed(1)
    q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)

    def score(i, j):
        qi = rotate(q.expand(i + 1, 16).clone(), layout=layout)[i]
        kj = rotate(k.expand(j + 1, 16).clone(), layout=layout)[j]
        return float(qi @ kj)

    assert score(7, 3) == pytest.approx(score(14, 10), rel=1e-12)
    assert score(3, 3) == pytest.approx(score(0, 0), rel=1e-12)
    assert abs(score(7, 3) - score(7, 5)) > 1e-3


def test_offset_is_the_position_of_the_first_token():
    x = torch.randn(2, 10, 8, dtype=torch.float64)
    for layout in ("halves", "interleaved"):
        torch.testing.assert_close(rotate(x[:, 4:], offset=4, layout=layout), rotate(x, layout=layout)[:, 4:])


# ------------------------------------------------------------------------------ parts
def test_repeat_kv_is_repeat_interleave():
    x = torch.randn(2, 3, 5, 4)
    torch.testing.assert_close(repeat_kv(x, 4), x.repeat_interleave(4, dim=1))
    assert repeat_kv(x, 1) is not None and repeat_kv(x, 1).shape == x.shape


def test_swiglu_is_hf_llama_mlp():
    from transformers.models.llama.modeling_llama import LlamaMLP
    config = transformers.LlamaConfig(hidden_size=16, intermediate_size=40, num_attention_heads=4,
                                        num_key_value_heads=4, mlp_bias=False)
    theirs = LlamaMLP(config).double()
    ours = SwiGLU(16, 40).double()
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(3, 5, 16, dtype=torch.float64)
    torch.testing.assert_close(ours(x), theirs(x))


def test_grouped_query_attention_against_brute_force():
    torch.manual_seed(2)
    attn = GroupedQueryAttention(24, n_heads=6, n_kv_heads=2).double()
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    out = attn(x)
    B, T, _ = x.shape
    q = attn.q_proj(x).view(B, T, 6, 4)
    k = attn.k_proj(x).view(B, T, 2, 4)
    v = attn.v_proj(x).view(B, T, 2, 4)
    heads = []
    for head in range(6):  # query head `head` reads key/value head head // 3
        qh = rotate(q[:, :, head], layout="halves")  # (B, T, 4)
        kh = rotate(k[:, :, head // 3], layout="halves")
        rows = []
        for t in range(T):  # query t sees keys 0..t
            w = torch.softmax(qh[:, t:t + 1] @ kh[:, :t + 1].transpose(1, 2) / 2.0, dim=-1)  # (B, 1, t+1)
            rows.append(w @ v[:, :t + 1, head // 3])  # (B, 1, 4)
        heads.append(torch.cat(rows, dim=1))
    expected = attn.o_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(out, expected)


# ------------------------------------------------------------------------------ the model against HF
@pytest.mark.parametrize("kw", CONFIGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_logits_loss_and_gradients_equal_hf(kw):
    torch.manual_seed(3)
    model = ModernGPT(small(**kw))
    hf = hf_model(model)
    idx = torch.randint(0, 50, (3, 20))
    targets = torch.randint(0, 50, (3, 20))
    targets[0, :5] = -100
    logits, loss = model(idx, targets)
    out = hf(input_ids=idx, labels=None)
    torch.testing.assert_close(logits, out.logits, **TOL)
    ref_loss = F.cross_entropy(out.logits.reshape(-1, 50), targets.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(loss, ref_loss, **TOL)
    loss.backward()
    ref_loss.backward()
    c = model.config
    inverse = torch.argsort(halves_order(c.d_head)) if c.rope_layout == "interleaved" else None
    for ours, theirs in zip(model.blocks, hf.model.layers):
        for name in ("gate_proj", "up_proj", "down_proj"):
            torch.testing.assert_close(getattr(ours.ff, name).weight.grad, getattr(theirs.mlp, name).weight.grad, **TOL)
        torch.testing.assert_close(ours.attn.v_proj.weight.grad, theirs.self_attn.v_proj.weight.grad, **TOL)
        for name, heads in (("q_proj", c.n_heads), ("k_proj", c.n_kv_heads)):
            g = getattr(theirs.self_attn, name).weight.grad
            if inverse is not None:
                g = g.view(heads, c.d_head, -1)[:, inverse].reshape_as(g)
            torch.testing.assert_close(getattr(ours.attn, name).weight.grad, g, **TOL)
        torch.testing.assert_close(ours.norm1.weight.grad, theirs.input_layernorm.weight.grad, **TOL)
    torch.testing.assert_close(model.tok_emb.weight.grad, hf.model.embed_tokens.weight.grad, **TOL)


@pytest.mark.parametrize("kw", [CONFIGS[1], CONFIGS[4], CONFIGS[6]], ids=["gqa", "interleaved", "qk_norm"])
def test_kv_cache_gives_the_logits_of_the_whole_sequence(kw):
    torch.manual_seed(4)
    model = ModernGPT(small(**kw)).double().eval()
    idx = torch.randint(0, 50, (2, 12))
    full, _ = model(idx)
    cache = model.new_cache()
    parts = [model(idx[:, :5], cache=cache)[0], model(idx[:, 5:6], cache=cache)[0], model(idx[:, 6:], cache=cache)[0]]
    torch.testing.assert_close(torch.cat(parts, dim=1), full)
    k = cache.layers[0].k
    assert k.shape == (2, model.config.n_kv_heads, 12, model.config.d_head)  # only the shared heads


def test_kv_cache_memory_formula_and_measurement():
    mha = ModernGPT(small(n_heads=8, n_kv_heads=8, d_model=64)).eval()
    gqa = ModernGPT(small(n_heads=8, n_kv_heads=2, d_model=64)).eval()
    idx = torch.randint(0, 50, (3, 20))
    measured = {}
    for name, model in (("mha", mha), ("gqa", gqa)):
        cache = model.new_cache()
        with torch.no_grad():
            model(idx, cache=cache)
        measured[name] = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.k, layer.v))
        assert measured[name] == model.config.kv_cache_bytes(3, 20, bytes_per_number=4)
    assert measured["mha"] == 4 * measured["gqa"]


def test_greedy_generation_equals_hf_generate():
    torch.manual_seed(5)
    model = ModernGPT(small(n_heads=4, n_kv_heads=2, context_length=40))
    hf = hf_model(model, seed=5)
    prompt = torch.randint(0, 50, (3, 6))
    ref = hf.generate(prompt, max_new_tokens=15, do_sample=False, min_new_tokens=15, eos_token_id=None,
                      pad_token_id=0, attention_mask=torch.ones_like(prompt))
    ours = decoding.greedy(model, prompt, 15)
    ours = ours if isinstance(ours, torch.Tensor) else ours[0]
    assert torch.equal(ours[:, -15:], ref[:, -15:])
    assert torch.equal(decoding.greedy(model, prompt, 15, use_cache=False)[:, -15:], ref[:, -15:])


# ------------------------------------------------------------------------------ errors
@pytest.mark.parametrize("kw,match", [
    (dict(n_heads=4, n_kv_heads=3), "multiple of `n_kv_heads`"),
    (dict(d_model=30, n_heads=4), "divisible by `n_heads`"),
    (dict(d_head=7), "even"),
    (dict(rope_layout="rotate_half"), "rope_layout"),
    (dict(n_kv_heads=0), "n_kv_heads"),
])
def test_bad_configs_are_clear_errors(kw, match):
    with pytest.raises((ValueError, TypeError), match=match):
        small(**kw)


def test_bad_calls_are_clear_errors():
    model = ModernGPT(small())
    with pytest.raises(ValueError, match="longer than the model's context"):
        model(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises((ValueError, TypeError), match="idx"):
        model(torch.zeros(5, dtype=torch.long))
    cache = model.new_cache()
    model(torch.zeros(2, 3, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="batch size"):
        model(torch.zeros(1, 1, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="even"):
        rotate(torch.randn(3, 5))
    with pytest.raises(ValueError, match="offset"):
        rotate(torch.randn(3, 4), offset=-1)
    with pytest.raises(TypeError, match="ModernConfig"):
        ModernGPT(dict(vocab_size=3))


# ------------------------------------------------------------------------------ Muon
def test_orthogonalize_is_near_the_polar_factor_in_both_orientations():
    from companion.modern import orthogonalize

    g = torch.randn(24, 80, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for m in (g, g.T):
        u, _, vt = torch.linalg.svd(m, full_matrices=False)
        polar = u @ vt  # the nearest matrix with singular values 1
        o = orthogonalize(m)
        s = torch.linalg.svdvals(o)
        assert o.shape == m.shape and 0.6 < s.min() and s.max() < 1.25
        assert (o - polar).norm() / polar.norm() < 0.3  # the same directions, singular values near 1
        assert torch.allclose(orthogonalize(m * 1e3), o, atol=1e-6)  # the scale of the gradient does not matter


def test_muon_first_step_moves_by_the_scaled_orthogonalized_gradient():
    from companion.modern import Muon, orthogonalize

    w = torch.nn.Parameter(torch.randn(12, 5, dtype=torch.float64))
    g = torch.randn(12, 5, dtype=torch.float64)
    w.grad = g.clone()
    before = w.detach().clone()
    Muon([w], lr=0.1, momentum=0.9).step()
    # from a zero buffer the Nesterov update is (1 - b)(1 + b) g: the same direction as g
    expected = before - 0.1 * math.sqrt(12 / 5) * orthogonalize(g)
    torch.testing.assert_close(w.detach(), expected)
    with pytest.raises(ValueError, match="matrices only"):
        Muon([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises((ValueError, TypeError), match="momentum"):
        Muon([w], momentum=1.0)


def test_trainer_trains_a_modern_gpt_with_muon():
    from companion.data import load_corpus
    from companion.train import TrainConfig, Trainer

    corpus = load_corpus()
    torch.manual_seed(0)
    model = ModernGPT(ModernConfig(vocab_size=corpus.tokenizer.vocab_size, context_length=32, d_model=32, n_layers=2,
                                   n_heads=4, n_kv_heads=2))
    cfg = TrainConfig(batch_size=8, max_steps=40, learning_rate=3e-3, min_lr=3e-4, warmup=4, eval_interval=0,
                      eval_batches=2, optimizer="muon", muon_lr=0.02, threads=1, device="cpu")
    trainer = Trainer(model, corpus, cfg)
    muon_params = {id(p) for g in trainer.optimizer.muon.param_groups for p in g["params"]}
    assert id(model.tok_emb.weight) not in muon_params and id(model.blocks[0].attn.q_proj.weight) in muon_params
    h = trainer.run(progress=False)
    assert h.train_loss[-1] < h.train_loss[0] - 0.5  # from ln(69) = 4.2 towards 3
    with pytest.raises(ValueError, match="optimizer"):
        TrainConfig(optimizer="sgd")
