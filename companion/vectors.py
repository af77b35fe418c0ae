"""Chapter 1: vectors and the dot product, the score at the heart of attention.

Everything here works on PyTorch tensors (lists and NumPy arrays are accepted and converted).
Row-vector convention, as in the whole book: a set of ``n`` vectors of width ``d`` is a matrix
of shape ``(n, d)``, one vector per row.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor

ArrayLike = Tensor | Sequence[float]


def _as_vector(x: ArrayLike, name: str) -> Tensor:
    if isinstance(x, Tensor):
        t = x
    else:
        try:
            t = torch.as_tensor(x, dtype=torch.float64)
        except (TypeError, ValueError):
            raise TypeError(f"`{name}` must be a vector of numbers (a list or a tensor), got {x!r}") from None
    if t.dim() != 1:
        raise ValueError(f"`{name}` must be a vector (1 dimension), got shape {tuple(t.shape)}")
    if not (t.is_floating_point() or t.dtype in (torch.int32, torch.int64)):
        raise TypeError(f"`{name}` must hold real numbers, got dtype {t.dtype}")
    return t if t.is_floating_point() else t.to(torch.float64)


def _pair(a: ArrayLike, b: ArrayLike) -> tuple[Tensor, Tensor]:
    a, b = _as_vector(a, "a"), _as_vector(b, "b")
    if a.shape != b.shape:
        raise ValueError(f"`a` and `b` must have the same length, got {a.shape[0]} and {b.shape[0]}")
    dtype = torch.promote_types(a.dtype, b.dtype)
    return a.to(dtype), b.to(dtype)


def dot(a: ArrayLike, b: ArrayLike) -> Tensor:
    """The dot product ``a · b = sum_i a_i b_i``.

    Shapes: ``a``: (d,), ``b``: (d,) -> a scalar tensor.
    """
    a, b = _pair(a, b)
    return (a * b).sum()


def length(a: ArrayLike) -> Tensor:
    """The Euclidean length ``|a| = sqrt(a · a)``.

    Shapes: ``a``: (d,) -> a scalar tensor.
    """
    a = _as_vector(a, "a")
    return torch.sqrt(dot(a, a))


def cosine_similarity(a: ArrayLike, b: ArrayLike) -> Tensor:
    """``cos θ = a · b / (|a| |b|)``, in [-1, 1]: the dot product with the lengths divided out.

    Shapes: ``a``: (d,), ``b``: (d,) -> a scalar tensor.
    Raises ValueError for a zero vector, whose direction (and so angle) is undefined.
    """
    a, b = _pair(a, b)
    la, lb = length(a), length(b)
    if la == 0 or lb == 0:
        raise ValueError("cosine similarity is undefined for a zero vector (it has no direction)")
    return (dot(a, b) / (la * lb)).clamp(-1.0, 1.0)


def angle(a: ArrayLike, b: ArrayLike) -> Tensor:
    """The angle between ``a`` and ``b`` in degrees, from ``arccos`` of the cosine similarity."""
    return torch.rad2deg(torch.arccos(cosine_similarity(a, b)))


def project(a: ArrayLike, onto: ArrayLike) -> Tensor:
    """The vector projection of ``a`` onto the line of ``onto``: ``(a · u) u`` with ``u = onto / |onto|``.

    Shapes: ``a``: (d,), ``onto``: (d,) -> (d,).
    """
    a, onto = _pair(a, onto)
    squared = dot(onto, onto)
    if squared == 0:
        raise ValueError("cannot project onto a zero vector")
    return dot(a, onto) / squared * onto


def all_scores(queries: Tensor, keys: Tensor, *, scale: bool = False) -> Tensor:
    """Every query against every key at once: ``S = Q K^T`` (optionally divided by ``sqrt(d)``).

    ``S[i, j] = queries[i] · keys[j]``.

    Shapes: ``queries``: (n, d), ``keys``: (m, d) -> (n, m).
    """
    for name, t in (("queries", queries), ("keys", keys)):
        if not isinstance(t, Tensor):
            raise TypeError(f"`{name}` must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2:
            raise ValueError(f"`{name}` must have shape (n, d), got shape {tuple(t.shape)}")
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"queries and keys must have the same width d, got {queries.shape[1]} and {keys.shape[1]}"
        )
    scores = queries @ keys.T  # (n, d) @ (d, m) -> (n, m)
    return scores / math.sqrt(queries.shape[1]) if scale else scores


def random_dot_products(d: int, n_samples: int, *, generator: torch.Generator | None = None) -> Tensor:
    """Dot products ``q · k`` of ``n_samples`` independent pairs of random vectors of width ``d``.

    Every component of ``q`` and ``k`` is drawn from the standard normal distribution, so each
    product ``q_i k_i`` has mean 0 and variance 1, and the sum of ``d`` of them has variance ``d``.

    Shapes: -> (n_samples,), float64.
    """
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"`d` must be a positive integer, got {d!r}")
    if not isinstance(n_samples, int) or n_samples < 2:
        raise ValueError(f"`n_samples` must be an integer of at least 2, got {n_samples!r}")
    q = torch.randn(n_samples, d, generator=generator, dtype=torch.float64)
    k = torch.randn(n_samples, d, generator=generator, dtype=torch.float64)
    return (q * k).sum(dim=1)  # (n_samples, d) -> (n_samples,)
