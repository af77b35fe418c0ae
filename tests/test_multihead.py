"""companion.multihead.MultiHeadAttention against torch.nn.MultiheadAttention (same weights copied
in), against a loop-over-heads reference written here, and against its own properties."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.attention import KVCache, causal_mask, padding_mask
from companion.multihead import MultiHeadAttention


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def pair(d_model=16, n_heads=4, bias=True, dtype=torch.float32, seed=0):
    """A torch MHA and a companion MHA holding the same weights."""
    torch.manual_seed(seed)
    ref = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, dtype=dtype)
    if bias:  # torch zeroes its biases at init; make them count
        with torch.no_grad():
            ref.in_proj_bias.normal_()
            ref.out_proj.bias.normal_()
    ours = MultiHeadAttention(d_model, n_heads, bias=bias).to(dtype).copy_from_torch(ref)
    return ref.eval(), ours.eval()


def tol(dtype):
    return dict(rtol=1e-5, atol=2e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- parity with torch


@settings(max_examples=25, deadline=None)
@given(
    B=st.integers(1, 3),
    T=st.integers(1, 7),
    S=st.integers(1, 7),
    n_heads=st.sampled_from([1, 2, 4]),
    d_head=st.sampled_from([1, 3, 4]),
    cross=st.booleans(),
    use_key_mask=st.booleans(),
    need_weights=st.booleans(),
    bias=st.booleans(),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 1000),
)
def test_matches_torch_multihead(B, T, S, n_heads, d_head, cross, use_key_mask, need_weights, bias, dtype, seed):
    d_model = n_heads * d_head
    ref, ours = pair(d_model, n_heads, bias=bias, dtype=dtype, seed=seed)
    x = rand(B, T, d_model, dtype=dtype, seed=seed)
    mem = rand(B, S, d_model, dtype=dtype, seed=seed + 1) if cross else x
    S = mem.shape[1]
    key_mask = None
    if use_key_mask:
        lengths = torch.randint(1, S + 1, (B,), generator=torch.Generator().manual_seed(seed))
        key_mask = padding_mask(lengths, S)
    out, w = ours(x, mem, mem, key_mask=key_mask, need_weights=need_weights)
    out_ref, w_ref = ref(x, mem, mem, key_padding_mask=None if key_mask is None else ~key_mask, need_weights=need_weights)
    torch.testing.assert_close(out, out_ref, **tol(dtype))
    if need_weights:
        torch.testing.assert_close(w, w_ref, **tol(dtype))
    else:
        assert w is None


def test_cross_attention_different_lengths_and_per_head_weights():
    ref, ours = pair(24, 6)
    x, mem = rand(2, 3, 24), rand(2, 8, 24, seed=1)
    out, w = ours(x, mem, need_weights=True, average_weights=False)  # value defaults to key
    out_ref, w_ref = ref(x, mem, mem, average_attn_weights=False)
    assert out.shape == (2, 3, 24) and w.shape == (2, 6, 3, 8)
    torch.testing.assert_close(out, out_ref, **tol(torch.float32))
    torch.testing.assert_close(w, w_ref, **tol(torch.float32))


@pytest.mark.parametrize("kind", ["bool", "float", "bool3d", "causal"])
@pytest.mark.parametrize("need_weights", [False, True])
def test_attn_mask_matches_torch(kind, need_weights):
    ref, ours = pair(16, 4)
    B, T = 2, 5
    x = rand(B, T, 16)
    torch_mask = None
    kwargs = {}
    if kind == "bool":
        mask = rand(T, T, seed=2) > -0.5
        mask[:, 0] = True
        kwargs["attn_mask"], torch_mask = mask, ~mask  # torch: True = NOT allowed
    elif kind == "float":
        mask = rand(T, T, seed=2)
        kwargs["attn_mask"], torch_mask = mask, mask
    elif kind == "bool3d":
        mask = rand(B, T, T, seed=2) > -0.5
        mask[..., 0] = True
        kwargs["attn_mask"] = mask
        torch_mask = (~mask).repeat_interleave(4, dim=0)  # torch wants (B*h, T, S)
    else:
        kwargs["is_causal"] = True
        torch_mask = ~causal_mask(T)
    out, w = ours(x, need_weights=need_weights, **kwargs)
    out_ref, w_ref = ref(x, x, x, attn_mask=torch_mask, need_weights=need_weights)
    torch.testing.assert_close(out, out_ref, **tol(torch.float32))
    if need_weights:
        torch.testing.assert_close(w, w_ref, **tol(torch.float32))


def test_float_attn_mask_combined_with_key_mask():
    ref, ours = pair(16, 4)
    x = rand(2, 5, 16)
    mask = rand(5, 5, seed=3)
    km = padding_mask([5, 3], 5)
    out, _ = ours(x, attn_mask=mask, key_mask=km)
    kpm = torch.zeros(2, 5).masked_fill(~km, float("-inf"))  # same dtype as the float attn_mask
    out_ref, _ = ref(x, x, x, attn_mask=mask, key_padding_mask=kpm)
    torch.testing.assert_close(out, out_ref, **tol(torch.float32))


def test_gradients_match_torch():
    ref, ours = pair(16, 4, dtype=torch.float64)
    x = rand(2, 5, 16, dtype=torch.float64)
    g = rand(2, 5, 16, dtype=torch.float64, seed=1)
    (ours(x, is_causal=True)[0] * g).sum().backward()
    (ref(x, x, x, attn_mask=~causal_mask(5), need_weights=False)[0] * g).sum().backward()
    for proj, w, b in zip((ours.q_proj, ours.k_proj, ours.v_proj), ref.in_proj_weight.grad.chunk(3), ref.in_proj_bias.grad.chunk(3)):
        torch.testing.assert_close(proj.weight.grad, w)
        torch.testing.assert_close(proj.bias.grad, b)
    torch.testing.assert_close(ours.out_proj.weight.grad, ref.out_proj.weight.grad)
    torch.testing.assert_close(ours.out_proj.bias.grad, ref.out_proj.bias.grad)


def test_fast_and_explicit_paths_agree():
    _, ours = pair(16, 4)
    x, mem = rand(2, 5, 16), rand(2, 7, 16, seed=1)
    km = padding_mask([7, 2], 7)
    for kwargs in ({}, {"key_mask": km}):
        fast, _ = ours(x, mem, **kwargs)
        explicit, _ = ours(x, mem, need_weights=True, **kwargs)
        torch.testing.assert_close(fast, explicit)
    fast, _ = ours(x, is_causal=True)
    explicit, _ = ours(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(fast, explicit)


# ---------------------------------------------------------------- the loop-over-heads reference


def loop_over_heads(mha: MultiHeadAttention, query, key, value):
    """One head at a time, each with its own slices of the projection matrices: the teaching version."""
    d_head = mha.d_head
    heads = []
    for i in range(mha.n_heads):
        rows = slice(i * d_head, (i + 1) * d_head)
        q = query @ mha.q_proj.weight[rows].T + mha.q_proj.bias[rows]  # (B, T, d_head)
        k = key @ mha.k_proj.weight[rows].T + mha.k_proj.bias[rows]  # (B, S, d_head)
        v = value @ mha.v_proj.weight[rows].T + mha.v_proj.bias[rows]
        w = torch.softmax(q @ k.mT / math.sqrt(d_head), dim=-1)  # (B, T, S)
        heads.append(w @ v)  # (B, T, d_head)
    return mha.out_proj(torch.cat(heads, dim=-1))  # (B, T, d_model)


@pytest.mark.parametrize("n_heads", [1, 2, 8])
def test_loop_over_heads_equals_batched(n_heads):
    _, ours = pair(32, n_heads)
    x, mem = rand(3, 6, 32), rand(3, 4, 32, seed=1)
    torch.testing.assert_close(ours(x)[0], loop_over_heads(ours, x, x, x), **tol(torch.float32))
    torch.testing.assert_close(ours(x, mem)[0], loop_over_heads(ours, x, mem, mem), **tol(torch.float32))


# ---------------------------------------------------------------- properties and edge cases


def test_permutation_equivariance_without_mask():
    _, ours = pair(16, 4, dtype=torch.float64)
    x = rand(2, 7, 16, dtype=torch.float64)
    perm = torch.randperm(7, generator=torch.Generator().manual_seed(1))
    out, _ = ours(x)
    out_p, _ = ours(x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])


def test_causal_outputs_do_not_depend_on_later_tokens():
    _, ours = pair(16, 4, dtype=torch.float64)
    x = rand(2, 8, 16, dtype=torch.float64)
    for t in range(8):
        y = x.clone()
        y[:, t + 1 :] = rand(2, 8 - t - 1, 16, dtype=torch.float64, seed=10 + t)
        torch.testing.assert_close(ours(x, is_causal=True)[0][:, : t + 1], ours(y, is_causal=True)[0][:, : t + 1])


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_query_gives_bias_only_and_finite_gradients(need_weights):
    _, ours = pair(16, 4)
    x, mem = rand(2, 3, 16).requires_grad_(), rand(2, 4, 16, seed=1).requires_grad_()
    km = torch.tensor([[True, True, False, False], [False, False, False, False]])  # row 1: no key at all
    out, w = ours(x, mem, key_mask=km, need_weights=need_weights)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out[1], ours.out_proj.bias.expand(3, 16))  # zero attention output, then W_O
    if need_weights:
        torch.testing.assert_close(w[1], torch.zeros(3, 4))
    out.sum().backward()
    assert torch.isfinite(x.grad).all() and torch.isfinite(mem.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in ours.parameters())
    torch.testing.assert_close(mem.grad[1], torch.zeros(4, 16))


def test_large_inputs_do_not_overflow():
    _, ours = pair(8, 2)
    with torch.no_grad():
        ours.q_proj.weight.copy_(torch.eye(8) * 100)
        ours.k_proj.weight.copy_(torch.eye(8) * 100)
    x = torch.ones(1, 3, 8)  # every score is 1e4 * 8 / sqrt(4) = 4e4
    x[0, 0] *= 1.01
    out, w = ours(x, need_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


def test_sequence_of_length_one():
    ref, ours = pair(16, 4)
    x = rand(3, 1, 16)
    out, w = ours(x, is_causal=True, need_weights=True)
    torch.testing.assert_close(w, torch.ones(3, 1, 1))
    torch.testing.assert_close(out, ref(x, x, x)[0], **tol(torch.float32))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, dropout=0.5)
    x = rand(2, 6, 16)
    mha.eval()
    a, wa = mha(x, need_weights=True)
    b, _ = mha(x)
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(wa.sum(-1), torch.ones(2, 6))
    mha.train()
    _, w = mha(x, need_weights=True, average_weights=False)
    assert (w == 0).any()  # some weights dropped
    c, _ = mha(x)
    assert not torch.allclose(c, a)


def test_parameter_count_does_not_depend_on_heads():
    d = 64
    counts = {h: sum(p.numel() for p in MultiHeadAttention(d, h).parameters()) for h in (1, 2, 4, 8, 64)}
    assert set(counts.values()) == {4 * d * d + 4 * d}
    assert sum(p.numel() for p in MultiHeadAttention(d, 4, bias=False).parameters()) == 4 * d * d
    ref = nn.MultiheadAttention(d, 4)
    assert counts[4] == sum(p.numel() for p in ref.parameters())


# ---------------------------------------------------------------- KV cache


@pytest.mark.parametrize("chunks", [[1] * 6, [3, 1, 2], [6]])
def test_kv_cache_incremental_equals_full_causal(chunks):
    _, ours = pair(16, 4, dtype=torch.float64)
    x = rand(2, 6, 16, dtype=torch.float64)
    full, _ = ours(x, is_causal=True)
    cache, outs, start = KVCache(), [], 0
    for n in chunks:
        out, _ = ours(x[:, start : start + n], is_causal=True, kv_cache=cache)
        outs.append(out)
        start += n
        assert len(cache) == start
    torch.testing.assert_close(torch.cat(outs, dim=1), full)


def test_kv_cache_with_weights_and_key_mask_and_reorder():
    _, ours = pair(16, 4, dtype=torch.float64)
    x = rand(3, 5, 16, dtype=torch.float64)
    km = padding_mask([5, 5, 5], 5)
    full, w_full = ours(x, is_causal=True, key_mask=km, need_weights=True)
    cache = KVCache()
    ours(x[:, :4], is_causal=True, kv_cache=cache)
    cache.reorder(torch.tensor([2, 0]))  # keep rows 2 and 0, in that order
    last, w_last = ours(x[[2, 0], 4:], is_causal=True, kv_cache=cache, key_mask=km[:2], need_weights=True)
    torch.testing.assert_close(last[:, 0], full[[2, 0], 4])
    torch.testing.assert_close(w_last[:, 0], w_full[[2, 0], 4])


def test_kv_cache_untouched_when_a_call_fails():
    mha = MultiHeadAttention(16, 4)
    cache = KVCache()
    mha(rand(2, 3, 16), is_causal=True, kv_cache=cache)
    k_before = cache.k.clone()
    with pytest.raises(ValueError, match=r"`key_mask` must have shape \(B, S\) = \(2, 5\) \(got shape=\(2, 2\)\)"):
        mha(rand(2, 2, 16), kv_cache=cache, key_mask=torch.ones(2, 2, dtype=torch.bool))  # S counts the cache
    assert len(cache) == 3 and torch.equal(cache.k, k_before)


# ---------------------------------------------------------------- bad input


def test_constructor_errors():
    with pytest.raises(ValueError, match=r"`d_model` must be divisible by `n_heads` \(got d_model=10, n_heads=3\)"):
        MultiHeadAttention(10, 3)
    with pytest.raises(TypeError, match=r"`n_heads` must be a positive integer \(got n_heads=2.0, a float\)"):
        MultiHeadAttention(8, 2.0)
    with pytest.raises(ValueError, match=r"`d_model` must be a positive integer \(got d_model=0\)"):
        MultiHeadAttention(0, 1)
    with pytest.raises(ValueError, match=r"`dropout` must be a number in \[0, 1\) \(got dropout=1.0\)"):
        MultiHeadAttention(8, 2, dropout=1.0)


def test_forward_errors():
    mha = MultiHeadAttention(16, 4)
    x = rand(2, 5, 16)
    with pytest.raises(TypeError, match=r"`query` must be a torch.Tensor of shape \(B, T, d_model=16\) \(got list\)"):
        mha([1.0])
    with pytest.raises(TypeError, match=r"`query` must be a floating-point tensor \(got dtype=torch.int64\)"):
        mha(torch.ones(2, 5, 16, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`query` must have shape \(B, T, d_model=16\) \(got shape=\(5, 16\)\)"):
        mha(rand(5, 16))
    with pytest.raises(ValueError, match=r"`query` must have shape \(B, T, d_model=16\) \(got shape=\(2, 5, 12\)\)"):
        mha(rand(2, 5, 12))
    with pytest.raises(ValueError, match=r"`key` must have shape \(B, S, d_model=16\) \(got shape=\(2, 5, 8\)\)"):
        mha(x, rand(2, 5, 8))
    with pytest.raises(ValueError, match=r"`value` must have the batch size of `query` B=2 \(got shape=\(3, 5, 16\)\)"):
        mha(x, x, rand(3, 5, 16))
    with pytest.raises(ValueError, match=r"`key` and `value` must have the same length S \(got 5 and 4\)"):
        mha(x, x, rand(2, 4, 16))
    with pytest.raises(TypeError, match=r"`key_mask` must be a bool tensor, True = a real token \(got torch.int64\)"):
        mha(x, key_mask=torch.ones(2, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`key_mask` must have shape \(B, S\) = \(2, 5\) \(got shape=\(2, 4\)\)"):
        mha(x, key_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"`attn_mask` must have shape \(T, S\) = \(5, 5\).*got shape=\(4, 5\)"):
        mha(x, attn_mask=torch.ones(4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"`attn_mask` must have shape \(T, S\), \(B, T, S\) or \(B, h, T, S\).*got shape=\(3, 5, 5\)"):
        mha(x, attn_mask=torch.ones(3, 5, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"`attn_mask` must be bool .*\(got dtype=torch.int32\)"):
        mha(x, attn_mask=torch.ones(5, 5, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"`kv_cache` works with self-attention only"):
        mha(x, rand(2, 3, 16), kv_cache=KVCache())
    with pytest.raises(TypeError, match=r"`kv_cache` must be a companion.attention.KVCache \(got dict\)"):
        mha(x, kv_cache={})
    with pytest.raises(ValueError, match=r"`is_causal` needs at least as many keys as queries \(got T=5, S=3\)"):
        mha(x, rand(2, 3, 16), is_causal=True)


def test_copy_from_torch_errors():
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(TypeError, match=r"`mha` must be a torch.nn.MultiheadAttention \(got Linear\)"):
        mha.copy_from_torch(nn.Linear(2, 2))
    with pytest.raises(ValueError, match=r"`mha` must have embed_dim=16, num_heads=4"):
        mha.copy_from_torch(nn.MultiheadAttention(16, 2))
    with pytest.raises(ValueError, match=r"must use biases exactly when this module does"):
        mha.copy_from_torch(nn.MultiheadAttention(16, 4, bias=False))


@settings(max_examples=15, deadline=None)
@given(
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    B=st.integers(1, 3),
    n_heads=st.sampled_from([1, 2, 4]),
    seed=st.integers(0, 1000),
)
def test_kv_cache_any_chunking_equals_full_causal(cuts, B, n_heads, seed):
    _, ours = pair(8, n_heads, dtype=torch.float64, seed=seed)
    T = sum(cuts)
    x = rand(B, T, 8, dtype=torch.float64, seed=seed)
    full, w_full = ours(x, is_causal=True, need_weights=True)
    cache, start = KVCache(), 0
    for n in cuts:
        out, w = ours(x[:, start : start + n], is_causal=True, kv_cache=cache, need_weights=True)
        torch.testing.assert_close(out, full[:, start : start + n])
        torch.testing.assert_close(w, w_full[:, start : start + n, : start + n])
        start += n
    assert len(cache) == T


def test_fused_attention_counts_its_fallbacks_to_the_math_kernel(monkeypatch):
    """On an AVX-512 CPU run as an older one, PyTorch refuses its fused bfloat16 kernel; the companion
    then computes the same attention with the math kernel and counts it (the appendix's memory cell
    asserts the fused kernel's bytes only when the count did not move)."""
    import torch.nn.functional as F

    from companion import multihead

    q, k, v = torch.randn(3, 2, 2, 5, 4).unbind(0)
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    real = F.scaled_dot_product_attention
    calls = []

    def refusing(*args, **kwargs):  # refuses once, as PyTorch does outside the math kernel
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("pack_vnni2 is only supported when avx512 is supported")
        return real(*args, **kwargs)

    before = multihead.math_fallbacks
    assert torch.equal(multihead.fused_attention(q, k, v, is_causal=True), want)
    assert multihead.math_fallbacks == before  # the fused kernel ran: nothing counted
    monkeypatch.setattr(F, "scaled_dot_product_attention", refusing)
    torch.testing.assert_close(multihead.fused_attention(q, k, v, is_causal=True), want)
    assert multihead.math_fallbacks == before + 1
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("another error")))
    with pytest.raises(RuntimeError, match="another error"):
        multihead.fused_attention(q, k, v)
    assert multihead.math_fallbacks == before + 1
