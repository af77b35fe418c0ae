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

from companion.validation import check_bool, check_generator, check_int, check_tensor

ArrayLike = Tensor | Sequence[float]


def _as_vector(x: ArrayLike, name: str) -> Tensor:
    if isinstance(x, Tensor):
        t = x
    else:
        if isinstance(x, (str, bytes)):
            raise TypeError(f"`{name}` must be a vector of numbers (a list or a tensor), got {x!r}")
        try:
            t = torch.as_tensor(x, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise TypeError(f"`{name}` must be a vector of numbers (a list or a tensor), got {x!r:.60}") from None
    if t.dim() != 1:
        raise ValueError(f"`{name}` must be a vector (1 dimension), got shape {tuple(t.shape)}")
    if t.shape[0] == 0:
        raise ValueError(f"`{name}` must hold at least one number, got an empty vector")
    if not (t.is_floating_point() or t.dtype in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)):
        raise TypeError(f"`{name}` must hold real numbers, got dtype {t.dtype}")
    t = t if t.is_floating_point() else t.to(torch.float64)
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"`{name}` must hold finite numbers, got {t.tolist()!r:.60}")
    return t


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
    check_tensor("queries", queries, shape=("n", "d"), dtype="real")
    check_tensor("keys", keys, shape=("m", "d"), dtype="real")
    if queries.shape[1] != keys.shape[1]:
        raise ValueError(
            f"`queries` and `keys` must have the same width d, got {queries.shape[1]} and {keys.shape[1]}"
        )
    check_bool("scale", scale)
    dtype = torch.promote_types(queries.dtype, keys.dtype)
    scores = queries.to(dtype) @ keys.to(dtype).T  # (n, d) @ (d, m) -> (n, m)
    return scores / math.sqrt(queries.shape[1]) if scale else scores


def random_dot_products(d: int, n_samples: int, *, generator: torch.Generator | None = None) -> Tensor:
    """Dot products ``q · k`` of ``n_samples`` independent pairs of random vectors of width ``d``.

    Every component of ``q`` and ``k`` is drawn from the standard normal distribution, so each
    product ``q_i k_i`` has mean 0 and variance 1, and the sum of ``d`` of them has variance ``d``.

    Shapes: -> (n_samples,), float64.
    """
    d = check_int("d", d, minimum=1)
    n_samples = check_int("n_samples", n_samples, minimum=2, hint="a variance needs at least two samples")
    check_generator("generator", generator)
    q = torch.randn(n_samples, d, generator=generator, dtype=torch.float64)
    k = torch.randn(n_samples, d, generator=generator, dtype=torch.float64)
    return (q * k).sum(dim=1)  # (n_samples, d) -> (n_samples,)
