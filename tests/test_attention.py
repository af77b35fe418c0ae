"""companion.attention against independent references: torch's own softmax and
scaled_dot_product_attention, hand-computed values and brute-force loops."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.attention import (
    KVCache,
    SelfAttention,
    causal_mask,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
)

DTYPES = [torch.float32, torch.float64]


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- softmax


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_matches_torch(dtype, dim):
    x = torch.randn(4, 5, 6, dtype=dtype, generator=torch.Generator().manual_seed(1)) * 5
    torch.testing.assert_close(softmax(x, dim=dim), torch.softmax(x, dim=dim), **tol(dtype))


def test_softmax_hand_computed():
    x = torch.tensor([1.0, 2.0, 3.0])
    e = [math.exp(1), math.exp(2), math.exp(3)]
    expected = torch.tensor([v / sum(e) for v in e])
    torch.testing.assert_close(softmax(x), expected)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_large_scores_do_not_overflow(dtype):
    x = torch.tensor([[1e4, 1e4 - 1.0, 0.0]], dtype=dtype)
    naive = torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    assert torch.isnan(naive).any()  # the naive formula really does fail here
    y = softmax(x)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, torch.softmax(x, -1))
    torch.testing.assert_close(y[0, 0] / y[0, 1], torch.tensor(math.e, dtype=dtype))


def test_softmax_all_minus_inf_row_is_zero_forward_and_backward():
    x = torch.tensor([[0.5, float("-inf"), 1.0], [float("-inf")] * 3], requires_grad=True)
    y = softmax(x)
    torch.testing.assert_close(y[1], torch.zeros(3))
    torch.testing.assert_close(y[0], torch.softmax(x[0].detach(), -1))
    (y * torch.arange(3.0)).sum().backward()
    assert torch.isfinite(x.grad).all()
    torch.testing.assert_close(x.grad[1], torch.zeros(3))


def test_softmax_gradient_matches_torch():
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 4, dtype=torch.float64)
    (gx,) = torch.autograd.grad((softmax(x) * g).sum(), x)
    (gt,) = torch.autograd.grad((torch.softmax(x, -1) * g).sum(), x)
    torch.testing.assert_close(gx, gt)


def test_softmax_rejects_bad_input():
    with pytest.raises(TypeError, match=r"`x` must be a torch.Tensor"):
        softmax([1.0, 2.0])
    with pytest.raises(TypeError, match=r"`x` must be a floating-point tensor \(got dtype=torch.int64\)"):
        softmax(torch.tensor([1, 2]))


# ---------------------------------------------------------------- masks


def test_causal_mask_square_rule_is_j_greater_than_i():
    m = causal_mask(4)
    expected = torch.tensor([[j <= i for j in range(4)] for i in range(4)])
    assert m.dtype == torch.bool and torch.equal(m, expected)
    assert m.diagonal().all()  # a token sees itself


def test_causal_mask_offset_when_more_keys_than_queries():
    m = causal_mask(2, 5)
    expected = torch.tensor([[True, True, True, True, False], [True] * 5])
    assert torch.equal(m, expected)


def test_causal_mask_rejects_bad_sizes():
    with pytest.raises(ValueError, match=r"`S` must be at least `T`.*T=3, S=2"):
        causal_mask(3, 2)
    with pytest.raises(ValueError, match=r"`T` must be a positive integer \(got T=0\)"):
        causal_mask(0)
    with pytest.raises(TypeError, match=r"`T` must be a positive integer \(got T=2.0, a float\)"):
        causal_mask(2.0)


def test_padding_mask():
    m = padding_mask(torch.tensor([3, 1, 0]), 4)
    expected = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(m, expected)
    assert torch.equal(padding_mask([2], 2), torch.tensor([[True, True]]))


def test_padding_mask_rejects_bad_input():
    with pytest.raises(ValueError, match=r"`lengths` must lie in \[0, S=3\] \(got \[4\]\)"):
        padding_mask([4], 3)
    with pytest.raises(TypeError, match=r"`lengths` must be an integer tensor \(got dtype=torch.float32\)"):
        padding_mask(torch.tensor([1.5]), 3)
    with pytest.raises(ValueError, match=r"`S` must be a positive integer \(got S=0\)"):
        padding_mask([1], 0)


# ---------------------------------------------------------------- scaled dot-product attention


def rand(*shape, dtype=torch.float32, seed=0):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


@settings(max_examples=40, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), min_size=0, max_size=2),
    T=st.integers(1, 9),
    S=st.integers(1, 9),
    d_k=st.integers(1, 16),
    d_v=st.integers(1, 16),
    mask_kind=st.sampled_from(["none", "causal", "bool", "float"]),
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
)
def test_sdpa_matches_torch(batch, T, S, d_k, d_v, mask_kind, dtype, seed):
    if mask_kind == "causal":
        S = T  # torch aligns its causal mask top-left; ours bottom-right; equal when S == T
    q = rand(*batch, T, d_k, dtype=dtype, seed=seed)
    k = rand(*batch, S, d_k, dtype=dtype, seed=seed + 1)
    v = rand(*batch, S, d_v, dtype=dtype, seed=seed + 2)
    kwargs: dict = {}
    if mask_kind == "causal":
        kwargs["is_causal"] = True
    elif mask_kind == "bool":
        mask = rand(T, S, seed=seed + 3) > 0
        mask[:, 0] = True  # torch's reference gives NaN or 0 for an empty row depending on the kernel
        kwargs["attn_mask"] = mask
    elif mask_kind == "float":
        kwargs["attn_mask"] = rand(*batch, T, S, dtype=dtype, seed=seed + 3)
    out, w = scaled_dot_product_attention(q, k, v, **kwargs)
    expected = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert out.shape == (*batch, T, d_v) and w.shape == (*batch, T, S)
    torch.testing.assert_close(out, expected, **tol(dtype))
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)), **tol(dtype))


def test_sdpa_weights_by_hand():
    # two keys; query equal to the first key: scores q.k / sqrt(2)
    q = torch.tensor([[1.0, 0.0]])
    k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    v = torch.tensor([[10.0], [20.0]])
    out, w = scaled_dot_product_attention(q, k, v)
    a = math.exp(1 / math.sqrt(2))
    torch.testing.assert_close(w, torch.tensor([[a / (a + 1), 1 / (a + 1)]]))
    torch.testing.assert_close(out, torch.tensor([[10 * a / (a + 1) + 20 / (a + 1)]]))


def test_sdpa_equals_brute_force_loop():
    T, S, d = 4, 6, 3
    q, k, v = rand(T, d, dtype=torch.float64), rand(S, d, dtype=torch.float64, seed=1), rand(S, 2, dtype=torch.float64, seed=2)
    out, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
    for i in range(T):
        visible = [j for j in range(S) if j <= i + S - T]
        scores = torch.tensor([float(q[i] @ k[j]) / math.sqrt(d) for j in visible], dtype=torch.float64)
        w = torch.exp(scores) / torch.exp(scores).sum()
        torch.testing.assert_close(out[i], sum(w[n] * v[j] for n, j in enumerate(visible)))


def test_sdpa_scale_is_sqrt_d_k():
    q, k, v = rand(1, 3, 8), rand(1, 5, 8, seed=1), rand(1, 5, 4, seed=2)
    _, w = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(w, torch.softmax(q @ k.mT / math.sqrt(8), -1))


def test_sdpa_large_scores_no_overflow():
    q = torch.tensor([[100.0, 0.0]])
    k = torch.tensor([[100.0, 0.0], [99.0, 0.0]])  # scores 1e4/sqrt(2) and 9.9e3/sqrt(2)
    v = torch.tensor([[1.0], [2.0]])
    out, w = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_sdpa_fully_masked_row_gives_zero_and_finite_gradients():
    q = rand(2, 3, 4).requires_grad_()
    k = rand(2, 5, 4, seed=1).requires_grad_()
    v = rand(2, 5, 4, seed=2).requires_grad_()
    mask = torch.ones(2, 3, 5, dtype=torch.bool)
    mask[0, 1] = False  # query 1 of batch 0 may attend to nothing
    out, w = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out[0, 1], torch.zeros(4))
    torch.testing.assert_close(w[0, 1], torch.zeros(5))
    assert torch.isfinite(out).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    torch.testing.assert_close(q.grad[0, 1], torch.zeros(4))
    # the other rows are untouched by the empty one
    torch.testing.assert_close(out[1], F.scaled_dot_product_attention(q[1], k[1], v[1]))


def test_sdpa_fully_masked_row_float_mask():
    q, k, v = rand(2, 3), rand(4, 3, seed=1), rand(4, 3, seed=2)
    mask = torch.zeros(2, 4)
    mask[1] = float("-inf")
    out, w = scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out[1], torch.zeros(3))
    assert not torch.isnan(w).any()


def test_sdpa_length_one():
    q, k, v = rand(2, 1, 4), rand(2, 1, 4, seed=1), rand(2, 1, 5, seed=2)
    out, w = scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(w, torch.ones(2, 1, 1))
    torch.testing.assert_close(out, v)


def test_sdpa_permutation_equivariance():
    x = rand(6, 4, dtype=torch.float64)
    perm = torch.randperm(6, generator=torch.Generator().manual_seed(3))
    out, _ = scaled_dot_product_attention(x, x, x)
    out_p, _ = scaled_dot_product_attention(x[perm], x[perm], x[perm])
    torch.testing.assert_close(out_p, out[perm])


def test_sdpa_causal_future_tokens_do_not_matter():
    x = rand(7, 4, dtype=torch.float64)
    t = 3
    y = x.clone()
    y[t + 1 :] = rand(7 - t - 1, 4, dtype=torch.float64, seed=9)
    out_x, _ = scaled_dot_product_attention(x, x, x, is_causal=True)
    out_y, _ = scaled_dot_product_attention(y, y, y, is_causal=True)
    torch.testing.assert_close(out_x[: t + 1], out_y[: t + 1])
    assert not torch.allclose(out_x[t + 1 :], out_y[t + 1 :])


def test_sdpa_dropout_only_in_training():
    q, k, v = rand(1, 4, 8), rand(1, 6, 8, seed=1), rand(1, 6, 8, seed=2)
    ref, w_ref = scaled_dot_product_attention(q, k, v)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5, training=False)
    torch.testing.assert_close(out, ref)
    torch.manual_seed(0)
    out, w = scaled_dot_product_attention(q, k, v, dropout_p=0.5, training=True)
    kept = w != 0
    assert not kept.all() and kept.any()
    torch.testing.assert_close(w[kept], 2 * w_ref[kept])  # inverted dropout: kept weights scaled by 1/(1-p)
    torch.testing.assert_close(out, w @ v)


def test_sdpa_bad_input_messages():
    q, k, v = rand(2, 3, 4), rand(2, 5, 4), rand(2, 5, 6)
    with pytest.raises(TypeError, match=r"`q` must be a torch.Tensor of shape \(\.\.\., T, d_k\) \(got list\)"):
        scaled_dot_product_attention([1.0], k, v)
    with pytest.raises(TypeError, match=r"`k` must be a floating-point tensor \(got dtype=torch.int64\)"):
        scaled_dot_product_attention(q, torch.ones(2, 5, 4, dtype=torch.long), v)
    with pytest.raises(ValueError, match=r"`q` must have shape \(\.\.\., T, d_k\) \(got shape=\(4,\)\)"):
        scaled_dot_product_attention(rand(4), k, v)
    with pytest.raises(ValueError, match=r"same number of dimensions \(got 3, 2, 3\)"):
        scaled_dot_product_attention(q, k[0], v)
    with pytest.raises(ValueError, match=r"`q` and `k` must have the same width d_k \(got q: 4, k: 3\)"):
        scaled_dot_product_attention(q, rand(2, 5, 3), v)
    with pytest.raises(ValueError, match=r"`k` and `v` must have the same length S \(got k: 5, v: 4\)"):
        scaled_dot_product_attention(q, k, rand(2, 4, 6))
    with pytest.raises(ValueError, match=r"same leading \(batch, head\) dimensions"):
        scaled_dot_product_attention(q, rand(3, 5, 4), rand(3, 5, 6))
    with pytest.raises(ValueError, match=r"`attn_mask` must have shape \(T, S\) = \(3, 5\).*got shape=\(5, 3\)"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(5, 3, dtype=torch.bool))
    with pytest.raises(TypeError, match=r"`attn_mask` must be bool .* \(got dtype=torch.int64\)"):
        scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(3, 5, dtype=torch.long))
    with pytest.raises(TypeError, match=r"`attn_mask` must be a torch.Tensor \(got list\)"):
        scaled_dot_product_attention(q, k, v, attn_mask=[[True]])
    with pytest.raises(ValueError, match=r"`dropout_p` must be a number in \[0, 1\) \(got dropout_p=1.5\)"):
        scaled_dot_product_attention(q, k, v, dropout_p=1.5)
    with pytest.raises(ValueError, match=r"`is_causal` needs at least as many keys as queries \(got T=3, S=2\)"):
        scaled_dot_product_attention(q, rand(2, 2, 4), rand(2, 2, 6), is_causal=True)


# ---------------------------------------------------------------- SelfAttention


def test_self_attention_equals_projections_then_torch_sdpa():
    torch.manual_seed(0)
    sa = SelfAttention(8, 4)
    x = rand(2, 5, 8)
    out, w = sa(x, is_causal=True)
    q, k, v = x @ sa.q_proj.weight.T, x @ sa.k_proj.weight.T, x @ sa.v_proj.weight.T  # no bias by default
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert w.shape == (2, 5, 5)
    assert torch.all(w.triu(1) == 0)


def test_self_attention_bad_input():
    with pytest.raises(ValueError, match=r"`d_model` must be a positive integer \(got d_model=0\)"):
        SelfAttention(0)
    sa = SelfAttention(8)
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, T, d_model=8\) \(got shape=\(5, 8\)\)"):
        sa(rand(5, 8))


# ---------------------------------------------------------------- KVCache


def test_kv_cache_append_len_and_reorder():
    cache = KVCache()
    assert len(cache) == 0
    k1, v1 = rand(2, 3, 4, 5), rand(2, 3, 4, 5, seed=1)
    k, v = cache.append(k1, v1)
    assert len(cache) == 4 and torch.equal(k, k1)
    k2, v2 = rand(2, 3, 1, 5, seed=2), rand(2, 3, 1, 5, seed=3)
    k, v = cache.append(k2, v2)
    assert len(cache) == 5
    torch.testing.assert_close(k, torch.cat([k1, k2], dim=2))
    torch.testing.assert_close(v, torch.cat([v1, v2], dim=2))
    cache.reorder(torch.tensor([1, 1, 0]))
    assert cache.k.shape == (3, 3, 5, 5)
    torch.testing.assert_close(cache.k[0], k[1])
    torch.testing.assert_close(cache.k[1], k[1])
    torch.testing.assert_close(cache.v[2], v[0])
    assert len(cache) == 5


def test_kv_cache_bad_input():
    cache = KVCache()
    with pytest.raises(ValueError, match=r"`k` must have shape \(B, h, T, d_head\) \(got shape=\(2, 3, 4\)\)"):
        cache.append(rand(2, 3, 4), rand(2, 3, 4))
    with pytest.raises(ValueError, match=r"`k` and `v` must have the same shape"):
        cache.append(rand(1, 2, 3, 4), rand(1, 2, 3, 5))
    cache.append(rand(1, 2, 3, 4), rand(1, 2, 3, 4))
    with pytest.raises(ValueError, match=r"must match the cache's \(B, h, d_head\) = \(1, 2, 4\)"):
        cache.append(rand(1, 3, 1, 4), rand(1, 3, 1, 4))
    with pytest.raises(TypeError, match=r"`index` must be an integer tensor \(got dtype=torch.float32\)"):
        cache.reorder(torch.tensor([0.0]))
