"""RoPE's two layouts (interleaved pairs and Hugging Face's rotate_half) and RoPE inside
companion.multihead.MultiHeadAttention (per head, queries and keys, offset under a KV cache).

References are written independently here: complex multiplication for the interleaved layout,
Hugging Face's ``rotate_half`` formula for the halves layout, and a loop over heads for attention.
"""
import math

import pytest
import torch

from companion.attention import KVCache
from companion.multihead import MultiHeadAttention
from companion.positional import apply_rotary


def rotate_half(x):
    """Hugging Face's helper: (x1, x2) -> (-x2, x1) over the two halves of the features."""
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def hf_rope(x, offset=0, base=10000.0):
    """x * cos + rotate_half(x) * sin, with cos/sin repeated over both halves, as HF Llama does."""
    T, d = x.shape[-2:]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * inv_freq  # (T, d/2)
    emb = torch.cat((angles, angles), dim=-1).to(x.dtype)  # (T, d)
    return x * emb.cos() + rotate_half(x) * emb.sin()


def complex_rope(x, offset=0, base=10000.0):
    T, d = x.shape[-2:]
    inv_freq = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angles = torch.arange(offset, offset + T, dtype=torch.float64)[:, None] * inv_freq
    z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(angles), angles)).reshape(x.shape).to(x.dtype)


@pytest.mark.parametrize("d,offset", [(2, 0), (8, 0), (16, 5), (64, 1000)])
def test_halves_layout_equals_hugging_face_rotate_half(d, offset):
    x = torch.randn(2, 3, 7, d, dtype=torch.float64, generator=torch.Generator().manual_seed(d))
    torch.testing.assert_close(apply_rotary(x, offset=offset, layout="halves"), hf_rope(x, offset))
    torch.testing.assert_close(apply_rotary(x, offset=offset), complex_rope(x, offset))


@pytest.mark.parametrize("d", [2, 6, 32])
def test_layouts_differ_by_a_permutation_of_features(d):
    x = torch.randn(5, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    perm = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # pair j -> features j, j + d/2
    torch.testing.assert_close(apply_rotary(x[..., perm], layout="halves"), apply_rotary(x)[..., perm])
    if d > 2:  # with one pair the layouts coincide
        assert not torch.allclose(apply_rotary(x, layout="halves"), apply_rotary(x))


def test_layout_is_checked():
    with pytest.raises(ValueError, match="layout"):
        apply_rotary(torch.randn(3, 4), layout="rotate_half")


def loop_rotary_attention(mha, x, start=0):
    """Per head: rotate q and k by absolute position start.., causal softmax, then W_O."""
    B, T, d = x.shape
    h, dh = mha.n_heads, mha.d_head
    q, k, v = mha.q_proj(x), mha.k_proj(x), mha.v_proj(x)
    heads = []
    for r in range(h):
        sl = slice(r * dh, (r + 1) * dh)
        qr, kr = apply_rotary(q[..., sl], offset=start), apply_rotary(k[..., sl], offset=start)
        scores = qr @ kr.transpose(-2, -1) / math.sqrt(dh)
        scores = scores.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
        heads.append(torch.softmax(scores, -1) @ v[..., sl])
    return mha.out_proj(torch.cat(heads, -1))


@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_rotary_attention_equals_loop_over_heads_and_is_shift_invariant(n_heads):
    torch.manual_seed(n_heads)
    mha = MultiHeadAttention(16, n_heads, rotary=True).double().eval()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    out, _ = mha(x, is_causal=True)
    torch.testing.assert_close(out, loop_rotary_attention(mha, x))
    torch.testing.assert_close(mha(x, is_causal=True, need_weights=True)[0], out)
    # scores depend on i - j only: the same tokens at positions 100.. give the same output
    torch.testing.assert_close(loop_rotary_attention(mha, x, start=100), out)
    plain = MultiHeadAttention(16, n_heads).double().eval()
    plain.load_state_dict(mha.state_dict())
    assert not torch.allclose(plain(x, is_causal=True)[0], out)


@pytest.mark.parametrize("cuts", [[1] * 7, [3, 1, 1, 2], [7]])
def test_rotary_with_kv_cache_equals_full_pass(cuts):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4, rotary=True).double().eval()
    x = torch.randn(2, sum(cuts), 16, dtype=torch.float64)
    full, _ = mha(x, is_causal=True)
    cache, start = KVCache(), 0
    for n in cuts:
        out, _ = mha(x[:, start : start + n], is_causal=True, kv_cache=cache)
        torch.testing.assert_close(out, full[:, start : start + n])
        start += n


def test_rotary_arguments_are_checked():
    with pytest.raises(TypeError, match="rotary"):
        MultiHeadAttention(8, 2, rotary="yes")
    with pytest.raises(ValueError, match="even head width"):
        MultiHeadAttention(6, 2, rotary=True)
    assert "rotary=True" in repr(MultiHeadAttention(8, 2, rotary=True))
    assert "rotary" not in repr(MultiHeadAttention(8, 2))
