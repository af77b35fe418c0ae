"""Normalization layers written from their formulas (chapter 4, *Layer normalization*).

:class:`LayerNorm` normalizes each token over its own features: for a row ``x`` of width ``d_model``

    y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias

with the biased variance (divide by ``d_model``) and ``eps`` *inside* the square root, exactly as
``torch.nn.LayerNorm``. :class:`RMSNorm` drops the centring and the bias and divides by the root
mean square instead (used by LLaMA and most recent models).
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from companion.validation import check_bool, check_float, check_int, check_vectors

__all__ = ["LayerNorm", "RMSNorm"]


def _check_input(x: Tensor, d_model: int, norm: str) -> None:
    check_vectors("x", x, d_model, shape=("...",), hint=(
        f"{norm} normalizes the last dimension: put the features last "
        "(normalize over the features, not the batch or time axis)"))


def _check_args(d_model: int, eps: float, bias: bool = True) -> None:
    check_int("d_model", d_model, minimum=1)
    check_float("eps", eps, low=0.0, low_open=True)
    check_bool("bias", bias)


class LayerNorm(nn.Module):
    """Layer normalization over the last dimension, with a learned scale and shift.

    Args:
        d_model: width of the features normalized (the last dimension of the input).
        eps: added to the variance *inside* the square root, so a constant row gives 0, not NaN.
        bias: learn a shift ``bias`` (GPT-2 and BERT do); ``False`` gives a scale only.

    Parameters: ``weight`` (ones at start) and ``bias`` (zeros at start, or ``None``).

    Shapes:
        x: ``(..., d_model)`` -> output ``(..., d_model)``; every leading position is normalized
        on its own, so a batch of one and a batch of many give the same rows.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        _check_args(d_model, eps, bias)
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.d_model, "LayerNorm")
        *_, C = x.shape  # (..., d_model): each position normalized on its own
        centred = x - x.mean(dim=-1, keepdim=True)  # minus each token's mean
        # A second, cheap pass removes the rounding left in the mean when the
        # mean is large and the spread tiny (float32 rows such as
        # 1000 + 0.01 * noise); mathematically it subtracts zero.
        centred = centred - centred.mean(dim=-1, keepdim=True)
        var = centred.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): biased
        x_hat = centred * torch.rsqrt(var + self.eps)  # eps inside the root
        y = x_hat * self.weight  # (..., d_model) * (d_model,) over tokens
        return y + self.bias if self.bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """Root-mean-square normalization: ``x / sqrt(mean(x**2) + eps) * weight`` (no centring, no shift).

    Args:
        d_model: width of the features normalized (the last dimension of the input).
        eps: added to the mean square inside the square root.

    Shapes:
        x: ``(..., d_model)`` -> output ``(..., d_model)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        _check_args(d_model, eps)
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        _check_input(x, self.d_model, "RMSNorm")
        *_, C = x.shape  # (..., d_model)
        ms = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1): mean square per token
        return x * torch.rsqrt(ms + self.eps) * self.weight  # (..., d_model)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"
