"""companion.vectors against hand-computed values and NumPy."""
import math

import numpy as np
import pytest
import torch

from companion import vectors


@pytest.mark.parametrize(
    "a, b, expected",
    [([1, 2, 3], [4, 5, 6], 32.0), ([3, 5], [-2, 4], 14.0), ([1, 2, 3, 4], [-4, 0, 2, 5], 22.0)],
)
def test_dot_matches_hand_computed_values(a, b, expected):
    assert vectors.dot(a, b).item() == expected


def test_dot_length_cosine_projection_match_numpy():
    rng = np.random.default_rng(0)
    for d in (1, 2, 7, 64):
        a, b = rng.normal(size=d), rng.normal(size=d)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        assert vectors.dot(ta, tb).item() == pytest.approx(np.dot(a, b), rel=1e-12, abs=1e-12)
        assert vectors.length(ta).item() == pytest.approx(np.linalg.norm(a), rel=1e-12)
        cos = np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b))
        assert vectors.cosine_similarity(ta, tb).item() == pytest.approx(cos, rel=1e-10, abs=1e-12)
        assert vectors.angle(ta, tb).item() == pytest.approx(np.degrees(np.arccos(np.clip(cos, -1, 1))), abs=1e-6)
        proj = np.dot(a, b) / np.dot(b, b) * b
        np.testing.assert_allclose(vectors.project(ta, tb).numpy(), proj, rtol=1e-10, atol=1e-12)


def test_geometry_by_hand():
    assert vectors.length([3, 4]).item() == 5.0
    assert vectors.angle([1, 0], [0, 2]).item() == pytest.approx(90.0)
    assert vectors.angle([1, 1], [2, 2]).item() == pytest.approx(0.0, abs=1e-5)
    assert vectors.cosine_similarity([1, 0], [-3, 0]).item() == -1.0
    # projection of (2, 3) onto the x axis keeps only x; the remainder is orthogonal to the axis
    p = vectors.project([2.0, 3.0], [5.0, 0.0])
    assert p.tolist() == [2.0, 0.0]
    rest = torch.tensor([2.0, 3.0], dtype=torch.float64) - p
    assert vectors.dot(rest, [5.0, 0.0]).item() == 0.0


def test_all_scores_equals_loop_and_numpy():
    gen = torch.Generator().manual_seed(0)
    Q, K = torch.randn(5, 8, generator=gen, dtype=torch.float64), torch.randn(3, 8, generator=gen, dtype=torch.float64)
    S = vectors.all_scores(Q, K)
    loop = torch.tensor([[vectors.dot(q, k).item() for k in K] for q in Q], dtype=torch.float64)
    torch.testing.assert_close(S, loop)
    np.testing.assert_allclose(S.numpy(), Q.numpy() @ K.numpy().T, rtol=1e-12)
    torch.testing.assert_close(vectors.all_scores(Q, K, scale=True), S / math.sqrt(8))


def test_variance_of_random_dot_products_grows_like_d():
    gen = torch.Generator().manual_seed(0)
    for d in (4, 64, 512):
        s = vectors.random_dot_products(d, 20_000, generator=gen)
        # the sample variance of 20,000 draws is within about 3% of d (a wrong formula is far off)
        assert s.var().item() == pytest.approx(d, rel=0.05)
        assert (s / math.sqrt(d)).var().item() == pytest.approx(1.0, rel=0.05)
        assert abs(s.mean().item()) < 4 * math.sqrt(d / 20_000)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: vectors.dot([1, 2, 3], [1, 2]), ValueError, "same length, got 3 and 2"),
        (lambda: vectors.dot([[1, 2]], [1, 2]), ValueError, r"`a` must be a vector .* shape \(1, 2\)"),
        (lambda: vectors.dot(torch.tensor([True]), torch.tensor([True])), TypeError, "real numbers"),
        (lambda: vectors.cosine_similarity([0, 0], [1, 2]), ValueError, "zero vector"),
        (lambda: vectors.project([1, 2], [0, 0]), ValueError, "zero vector"),
        (lambda: vectors.all_scores(torch.ones(2, 3), torch.ones(2, 4)), ValueError, "same width d, got 3 and 4"),
        (lambda: vectors.all_scores(torch.ones(3), torch.ones(2, 3)), ValueError, r"`queries` must have shape \(n, d\)"),
        (lambda: vectors.all_scores([[1.0]], torch.ones(1, 1)), TypeError, "`queries` must be a torch.Tensor"),
        (lambda: vectors.random_dot_products(0, 10), ValueError, "`d` must be a positive integer"),
        (lambda: vectors.random_dot_products(3, 1), ValueError, "`n_samples`"),
    ],
)
def test_bad_input_is_named(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_non_numbers_are_refused_clearly():
    import pytest as _pytest

    with _pytest.raises(TypeError, match="`a` must be a vector of numbers"):
        vectors.dot("abc", "def")
