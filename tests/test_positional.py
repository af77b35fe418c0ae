"""companion.positional against the formula evaluated independently (NumPy, float64, loops)."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.positional import (
    LearnedPositionalEmbedding,
    SinusoidalPositionalEncoding,
    apply_rotary,
    shift_matrix,
    sinusoidal_encoding,
)

SETTINGS = settings(max_examples=20, deadline=None)


def formula_table(T, D, c=10000.0):
    """P[i, 2j] = sin(i / c^(2j/D)), P[i, 2j+1] = cos(i / c^(2j/D)), one entry at a time."""
    P = np.zeros((T, D))
    for i in range(T):
        for j in range(D // 2):
            P[i, 2 * j] = math.sin(i / c ** (2 * j / D))
            P[i, 2 * j + 1] = math.cos(i / c ** (2 * j / D))
    return P


@SETTINGS
@given(T=st.integers(1, 64), half=st.integers(1, 16))
def test_table_equals_formula(T, half):
    D = 2 * half
    ours = sinusoidal_encoding(T, D, dtype=torch.float64).numpy()
    np.testing.assert_allclose(ours, formula_table(T, D), rtol=0, atol=1e-12)


def test_known_values():
    P = sinusoidal_encoding(3, 4, dtype=torch.float64)
    # position 0: sin 0 = 0, cos 0 = 1 in every pair; position 1, pair 0: sin 1, cos 1; pair 1: w = 1/100
    torch.testing.assert_close(P[0], torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(
        P[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)], dtype=torch.float64)
    )


def test_every_position_distinct():
    P = sinusoidal_encoding(2048, 64, dtype=torch.float64)
    d = torch.cdist(P, P)
    d.fill_diagonal_(float("inf"))
    assert d.min() > 1e-3


def test_similarity_depends_on_distance_and_falls():
    """The chapter's claims, for D = 128: p_i . p_j depends on |i - j| only; it falls strictly over the
    first ten positions; beyond that it keeps falling on average but with ripples (not monotone)."""
    P = sinusoidal_encoding(600, 128, dtype=torch.float64)
    G = P @ P.T
    for k in (0, 1, 7, 40):
        diag = torch.diagonal(G, offset=k)
        torch.testing.assert_close(diag, diag[0].expand_as(diag))
    sims = G[0]  # similarity against distance k = 0, 1, 2, ...
    assert (sims[1:11] < sims[:10]).all()
    assert not (sims[1:65] < sims[:64]).all()  # the ripples the chapter points out
    bands = [sims[a:b].mean() for a, b in [(0, 8), (8, 32), (32, 128), (128, 512)]]
    assert all(x > y for x, y in zip(bands, bands[1:]))
    assert (sims[1:] < sims[0]).all()  # no other position is as similar as the position itself


@SETTINGS
@given(k=st.integers(-50, 50), half=st.integers(1, 12))
def test_shift_is_a_linear_map(k, half):
    D = 2 * half
    P = sinusoidal_encoding(200, D, dtype=torch.float64)
    M = shift_matrix(k, D, dtype=torch.float64)
    lo, hi = max(0, -k), min(200, 200 - k)
    torch.testing.assert_close(P[lo:hi] @ M, P[lo + k : hi + k])
    torch.testing.assert_close(M @ M.T, torch.eye(D, dtype=torch.float64))  # a rotation


def test_sinusoidal_module_adds_table_with_offset():
    pe = SinusoidalPositionalEncoding(8, 20)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(pe(x, offset=3), x + sinusoidal_encoding(20, 8)[3:8])
    assert len(list(pe.parameters())) == 0


def test_learned_embedding_adds_rows_and_trains():
    emb = LearnedPositionalEmbedding(10, 4)
    x = torch.zeros(3, 6, 4)
    torch.testing.assert_close(emb(x, offset=2), emb.weight[2:8].expand(3, 6, 4))
    emb(x).sum().backward()
    assert emb.weight.grad[:6].eq(3).all() and emb.weight.grad[6:].eq(0).all()


def rope_complex(x, base=10000.0):
    """RoPE as complex multiplication: pair (a, b) -> (a + ib) * exp(i t theta_j)."""
    T, d = x.shape
    z = x[:, 0::2].double() + 1j * x[:, 1::2].double()
    t = np.arange(T)[:, None]
    theta = base ** (-np.arange(0, d, 2) / d)[None, :]
    z = z.numpy() * np.exp(1j * t * theta)
    out = np.empty((T, d))
    out[:, 0::2], out[:, 1::2] = z.real, z.imag
    return torch.from_numpy(out)


def test_rotary_matches_complex_reference_and_is_relative():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 8, generator=g, dtype=torch.float64)
    torch.testing.assert_close(apply_rotary(x), rope_complex(x))
    # q_i . k_j depends on i - j only: shifting both positions by 5 leaves every score unchanged
    q, k = torch.randn(2, 12, 8, generator=g, dtype=torch.float64)
    s0 = apply_rotary(q) @ apply_rotary(k).T
    s5 = apply_rotary(q, offset=5) @ apply_rotary(k, offset=5).T
    torch.testing.assert_close(s0, s5)
    # and it works on (B, h, T, d_head)
    assert apply_rotary(torch.randn(2, 3, 5, 4)).shape == (2, 3, 5, 4)


def test_bad_input_raises():
    with pytest.raises(ValueError, match=r"`d_model` must be even \(got d_model=7\)"):
        sinusoidal_encoding(10, 7)
    with pytest.raises(ValueError, match=r"`context_length` must be a positive integer \(got context_length=0\)"):
        sinusoidal_encoding(0, 8)
    with pytest.raises(ValueError, match=r"`d_model` must be even \(got d_model=5\)"):
        shift_matrix(1, 5)
    with pytest.raises(TypeError, match=r"`k` must be an integer \(got k=1.5, a float\)"):
        shift_matrix(1.5, 4)
    emb = LearnedPositionalEmbedding(8, 4)
    with pytest.raises(ValueError, match=r"`x` holds positions 0\.\.8, which do not fit the table of context_length=8"):
        emb(torch.zeros(1, 9, 4))
    with pytest.raises(ValueError, match=r"`x` holds positions 5\.\.8, which do not fit"):
        emb(torch.zeros(1, 4, 4), offset=5)
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, T, d_model=4\) \(got shape=\(1, 3, 5\)\)"):
        emb(torch.zeros(1, 3, 5))
    for module in (emb, SinusoidalPositionalEncoding(4, 8)):
        with pytest.raises(ValueError, match=r"`offset` must be a non-negative integer \(got offset=-1\)"):
            module(torch.zeros(1, 2, 4), offset=-1)
    with pytest.raises(ValueError, match=r"do not fit the table of context_length=4"):
        SinusoidalPositionalEncoding(4, 4)(torch.zeros(1, 5, 4))
    with pytest.raises(ValueError, match=r"`d_model` must be even \(got d_model=3\)"):
        apply_rotary(torch.zeros(2, 3))
