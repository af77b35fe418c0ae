"""The Vision Transformer (chapter 12, *The Vision Transformer*): an image read as a sequence of patches.

An image has no words, so ViT (Dosovitskiy et al., 2021) makes its own tokens: it cuts the image
into square patches, flattens each patch into a vector and maps it to ``d_model`` features with one
learned linear map. A learned ``[CLS]`` vector is put in front, a position vector is added to every
token, and the sequence goes through the encoder of chapter 6 (pre-norm, GELU). The head reads the
``[CLS]`` token's final state.

* :func:`patchify` / :func:`unpatchify`: ``(B, C, H, W)`` images <-> ``(B, N, C p p)`` patch vectors,
  patches in reading order (row by row), each patch flattened channel, row, column.
* :class:`PatchEmbedding`: the linear map on flattened patches; :meth:`PatchEmbedding.to_conv`
  gives the same map as a strided ``nn.Conv2d`` (kernel = stride = patch size), as ViT's code and
  Hugging Face's write it.
* :func:`sincos_2d_encoding`: fixed 2-D positions (half the features encode the row, half the column).
* :class:`ViTConfig`, :class:`VisionTransformer`: the model. With the same weights it computes what
  Hugging Face's ``ViTForImageClassification`` computes (:meth:`VisionTransformer.from_hf`; the
  tests check logits and hidden states in float64).
* :func:`vit_parameters`: the size of a configuration, by part, without building it.
* The chapter's data and baselines: :func:`digits_splits` (scikit-learn's bundled 8 x 8 digits,
  fixed stratified splits), :func:`train_classifier`, :func:`accuracy`, :class:`DigitsMLP`,
  :class:`DigitsCNN`.
* :func:`save_trained` / :func:`load_trained`: the chapter's trained ViTs and recorded results
  (``companion/assets/vit_digits.safetensors``), so that a reader can load them instead of training
  (``TRAIN = False`` in the chapter's set-up cell).
"""
from __future__ import annotations

import json
import math
import time
from operator import attrgetter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from companion.block import block_parameters
from companion.encoder import Encoder
from companion.positional import sinusoidal_encoding
from companion.validation import (check_bool, check_choice, check_finite, check_float, check_float_dtype,
                                  check_index, check_int, check_tensor)

__all__ = [
    "patchify",
    "unpatchify",
    "PatchEmbedding",
    "sincos_2d_encoding",
    "ViTConfig",
    "VisionTransformer",
    "vit_parameters",
    "DigitsSplits",
    "digits_splits",
    "TrainLog",
    "train_classifier",
    "predict",
    "accuracy",
    "DigitsMLP",
    "DigitsCNN",
    "TRAINED_ASSET",
    "save_trained",
    "load_trained",
]

POSITIONS = ("learned", "sincos", "none")


# --------------------------------------------------------------------------- patches
def _check_images(name: str, images: Any, patch_size: int) -> tuple[int, int, int, int]:
    check_tensor(name, images, shape=("B", "C", "H", "W"), dtype="float",
                 hint="a single image needs its batch and channel dimensions: image[None, None]")
    B, C, H, W = images.shape
    if H % patch_size or W % patch_size:
        raise ValueError(f"`{name}` of height {H} and width {W} cannot be cut into {patch_size} x {patch_size} "
                         f"patches: both must be multiples of patch_size={patch_size}")
    return B, C, H, W


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into non-overlapping square patches and flatten each patch.

    Patch ``n = r * (W / p) + c`` is the one in grid row ``r`` and grid column ``c`` (reading order);
    its vector lists channel 0's ``p x p`` pixels row by row, then channel 1's, and so on: the order
    of a ``Conv2d`` kernel ``weight[:, c, i, j]`` flattened.

    Shapes:
        images ``(B, C, H, W)`` -> ``(B, N, C * p * p)`` with ``N = (H / p) (W / p)``.
    """
    p = check_int("patch_size", patch_size, minimum=1)
    B, C, H, W = _check_images("images", images, p)
    x = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, rows, p, cols, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p): the grid first, then one patch
    return x.reshape(B, (H // p) * (W // p), C * p * p)  # (B, N, C p p)


def unpatchify(patches: Tensor, patch_size: int, image_size: int | tuple[int, int], n_channels: int = 1) -> Tensor:
    """The inverse of :func:`patchify`: put the patches back in their places.

    Shapes:
        patches ``(B, N, C * p * p)`` -> ``(B, C, H, W)``.
    """
    p = check_int("patch_size", patch_size, minimum=1)
    C = check_int("n_channels", n_channels, minimum=1)
    H, W = _pair("image_size", image_size)
    if H % p or W % p:
        raise ValueError(f"`image_size` ({H}, {W}) must be a multiple of patch_size={p}")
    N = (H // p) * (W // p)
    check_tensor("patches", patches, shape=("B", ("N", N), ("C * p * p", C * p * p)), dtype="float")
    B = patches.shape[0]
    x = patches.reshape(B, H // p, W // p, C, p, p)  # (B, rows, cols, C, p, p)
    return x.permute(0, 3, 1, 4, 2, 5).reshape(B, C, H, W)  # (B, C, rows, p, cols, p) -> (B, C, H, W)


def _pair(name: str, value: Any) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"`{name}` must be an int or a pair (height, width) (got {value!r})")
        return check_int(name, value[0], minimum=1), check_int(name, value[1], minimum=1)
    size = check_int(name, value, minimum=1, hint="or a pair (height, width)")
    return size, size


class PatchEmbedding(nn.Module):
    """The learned map from a flattened patch to a token: ``patchify(images) @ W + b``.

    ``proj`` is an ``nn.Linear(C p p, d_model)``. The same map is a ``Conv2d`` whose kernel is one
    patch and whose stride is one patch (the kernel never overlaps two patches and visits each
    once): :meth:`to_conv` builds it, :meth:`copy_from_conv` reads one.

    Shapes:
        images ``(B, C, H, W)`` -> ``(B, N, d_model)``.
    """

    def __init__(self, patch_size: int, d_model: int, n_channels: int = 1):
        super().__init__()
        self.patch_size = check_int("patch_size", patch_size, minimum=1)
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.n_channels = check_int("n_channels", n_channels, minimum=1)
        self.proj = nn.Linear(n_channels * patch_size * patch_size, d_model)

    def forward(self, images: Tensor) -> Tensor:
        p = self.patch_size
        B, C, H, W = _check_images("images", images, p)
        if C != self.n_channels:
            raise ValueError(f"`images` must have n_channels={self.n_channels} channels (got shape={tuple(images.shape)})")
        return self.proj(patchify(images, p))  # (B, N, C p p) @ (C p p, d) -> (B, N, d)

    @torch.no_grad()
    def to_conv(self) -> nn.Conv2d:
        """An ``nn.Conv2d(C, d_model, kernel_size=p, stride=p)`` computing the same map.

        Its output ``(B, d, H/p, W/p)``, flattened to ``(B, d, N)`` and transposed, equals this
        module's ``(B, N, d)``.
        """
        p, C, d = self.patch_size, self.n_channels, self.d_model
        conv = nn.Conv2d(C, d, kernel_size=p, stride=p).to(self.proj.weight)
        # nn.Linear's weight (d, C p p) is the kernel (d, C, p, p), flattened
        conv.weight.copy_(self.proj.weight.view(d, C, p, p))
        conv.bias.copy_(self.proj.bias)
        return conv

    @torch.no_grad()
    def copy_from_conv(self, conv: nn.Conv2d) -> "PatchEmbedding":
        """Copy the weights of a patch ``Conv2d`` (kernel = stride = patch size). Returns ``self``."""
        if not isinstance(conv, nn.Conv2d):
            raise TypeError(f"`conv` must be a torch.nn.Conv2d (got {type(conv).__name__})")
        p, C, d = self.patch_size, self.n_channels, self.d_model
        want = (C, d, (p, p), (p, p), (0, 0), True)
        got = (conv.in_channels, conv.out_channels, tuple(conv.kernel_size), tuple(conv.stride),
               tuple(conv.padding), conv.bias is not None)
        if got != want:
            raise ValueError(f"`conv` must be Conv2d({C}, {d}, kernel_size={p}, stride={p}, padding=0, bias=True) "
                             f"(got in={got[0]}, out={got[1]}, kernel={got[2]}, stride={got[3]}, padding={got[4]}, "
                             f"bias={got[5]})")
        self.proj.weight.copy_(conv.weight.reshape(d, C * p * p))
        self.proj.bias.copy_(conv.bias)
        return self


# --------------------------------------------------------------------------- 2-D positions
def sincos_2d_encoding(grid_height: int, grid_width: int, d_model: int, *, c: float = 10000.0,
                       dtype: torch.dtype = torch.float32) -> Tensor:
    """Fixed 2-D positions: chapter 5's sinusoidal table for the row, and for the column, side by side.

    The first ``d_model / 2`` features of patch ``(r, c)`` are ``sinusoidal_encoding`` of ``r`` at
    width ``d_model / 2`` (sine and cosine interleaved, as in chapter 5); the last half is the
    same for ``c``. Two patches in the same row share the first half exactly. (MAE writes each half
    as all sines, then all cosines: the same numbers, with the columns permuted. "Simple ViT" also
    spaces its frequencies as ``c ** (-k / (d/4 - 1))``, so its numbers differ a little.)

    Shapes:
        returns ``(grid_height * grid_width, d_model)``, patches in reading order.
    """
    gh = check_int("grid_height", grid_height, minimum=1)
    gw = check_int("grid_width", grid_width, minimum=1)
    d = check_int("d_model", d_model, minimum=1)
    dtype = check_float_dtype("dtype", dtype)  # an integer or complex table would be sines truncated or cast
    if d % 4:
        raise ValueError(f"`d_model` must be a multiple of 4 (got d_model={d}): half the features for the row, "
                         "half for the column, each in (sin, cos) pairs")
    rows = sinusoidal_encoding(gh, d // 2, c=c, dtype=torch.float64)  # (gh, d/2)
    cols = sinusoidal_encoding(gw, d // 2, c=c, dtype=torch.float64)  # (gw, d/2)
    table = torch.cat([rows[:, None, :].expand(gh, gw, d // 2),  # (gh, gw, d/2): the row's code
                       cols[None, :, :].expand(gh, gw, d // 2)], dim=-1)  # (gh, gw, d)
    return table.reshape(gh * gw, d).to(dtype)


# --------------------------------------------------------------------------- the model
@dataclass
class ViTConfig:
    """The shape of a :class:`VisionTransformer`."""

    image_size: int = 8  # height = width of the input, pixels
    patch_size: int = 2  # side of a square patch; image_size must be a multiple of it
    n_channels: int = 1  # 1 for grey digits, 3 for RGB
    n_classes: int = 10  # outputs of the head
    d_model: int = 64  # token width (Hugging Face: hidden_size)
    n_layers: int = 4  # encoder blocks (num_hidden_layers)
    n_heads: int = 4  # attention heads per block (num_attention_heads)
    d_ff: int | None = None  # feed-forward hidden width; None for 4 * d_model (intermediate_size)
    dropout: float = 0.0  # in the blocks and on the embeddings
    positions: str = "learned"  # "learned" table, fixed 2-D "sincos", or "none"
    eps: float = 1e-5  # LayerNorm epsilon (Hugging Face's ViT: 1e-12)

    def __post_init__(self) -> None:
        for name in ("image_size", "patch_size", "n_channels", "n_classes", "d_model", "n_layers", "n_heads"):
            check_int(name, getattr(self, name), minimum=1)
        if self.d_ff is None:
            self.d_ff = 4 * self.d_model
        check_int("d_ff", self.d_ff, minimum=1, hint="use d_ff=None for 4 * d_model")
        if self.image_size % self.patch_size:
            raise ValueError(f"`image_size` must be a multiple of `patch_size` (got image_size={self.image_size}, "
                             f"patch_size={self.patch_size})")
        if self.d_model % self.n_heads:
            raise ValueError(f"`d_model` must be divisible by `n_heads` (got d_model={self.d_model}, "
                             f"n_heads={self.n_heads})")
        check_float("dropout", self.dropout, low=0.0, high=1.0, high_open=True)
        check_choice("positions", self.positions, POSITIONS)
        if self.positions == "sincos" and self.d_model % 4:
            raise ValueError(f"`d_model` must be a multiple of 4 for positions='sincos' (got {self.d_model})")
        check_float("eps", self.eps, low=0.0, low_open=True)

    @property
    def grid(self) -> int:
        """Patches along each side."""
        return self.image_size // self.patch_size

    @property
    def n_patches(self) -> int:
        return self.grid * self.grid


class VisionTransformer(nn.Module):
    """ViT for classification: patches -> tokens, ``[CLS]`` in front, positions added, encoder, head.

    ::

        tokens = cat([cls_token, patch_embed(images)])   # (B, 1 + N, d)
        tokens = tokens + pos_embed                       # learned, 2-D sin-cos, or none
        h = encoder(tokens)                               # chapter 6 blocks, pre-norm, GELU; final LayerNorm
        logits = head(h[:, 0])                            # the [CLS] token's final state

    Submodules: ``patch_embed`` (:class:`PatchEmbedding`), ``cls_token`` ``(1, 1, d)``,
    ``pos_embed`` ``(1, 1 + N, d)`` (a parameter, a buffer for ``"sincos"``, or None),
    ``encoder`` (:class:`~companion.encoder.Encoder`), ``head`` (``nn.Linear(d, n_classes)``).

    Shapes:
        images ``(B, C, H, W)`` -> logits ``(B, n_classes)``.

    Non-finite pixels (NaN, inf) are legitimate input to the forward and give NaN logits, as in
    ``torch.nn`` modules: checking them would cost a host-device synchronization on every batch of a
    training loop on a GPU. :func:`train_classifier` refuses non-finite images once, before training.
    """

    def __init__(self, config: ViTConfig | None = None, **overrides: Any):
        super().__init__()
        if config is None:
            config = ViTConfig(**overrides)
        elif overrides:
            raise TypeError("give either a ViTConfig or keyword arguments, not both")
        if not isinstance(config, ViTConfig):
            raise TypeError(f"`config` must be a companion.vit.ViTConfig (got {type(config).__name__})")
        self.config = cfg = config
        d = cfg.d_model
        self.patch_embed = PatchEmbedding(cfg.patch_size, d, cfg.n_channels)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        if cfg.positions == "learned":
            self.pos_embed = nn.Parameter(torch.randn(1, 1 + cfg.n_patches, d) * 0.02)
        elif cfg.positions == "sincos":  # [CLS] gets the zero vector: it has no place in the grid
            table = torch.cat([torch.zeros(1, d), sincos_2d_encoding(cfg.grid, cfg.grid, d)])
            self.register_buffer("pos_embed", table[None], persistent=False)  # (1, 1 + N, d)
        else:
            self.pos_embed = None
        self.dropout = nn.Dropout(cfg.dropout)
        self.encoder = Encoder(cfg.n_layers, d, cfg.n_heads, cfg.d_ff, dropout=cfg.dropout, norm_first=True,
                               activation="gelu", eps=cfg.eps, final_norm=True)
        self.head = nn.Linear(d, cfg.n_classes)

    def _check(self, images: Any) -> tuple[int, int, int, int]:
        cfg = self.config
        B, C, H, W = _check_images("images", images, cfg.patch_size)
        if (C, H, W) != (cfg.n_channels, cfg.image_size, cfg.image_size):
            raise ValueError(f"`images` must have shape (B, {cfg.n_channels}, {cfg.image_size}, {cfg.image_size}) "
                             f"for this model (got shape={tuple(images.shape)})")
        weight = self.head.weight
        if images.dtype != weight.dtype or images.device != weight.device:
            raise TypeError(f"`images` must have the model's dtype {weight.dtype} on {weight.device} "
                            f"(got {images.dtype} on {images.device}); convert with images.to(...)")
        return B, C, H, W

    def embed(self, images: Tensor) -> Tensor:
        """The encoder's input: ``[CLS]`` and the patch tokens, positions added. ``(B, 1 + N, d)``."""
        B, C, H, W = self._check(images)
        patches = self.patch_embed(images)  # (B, N, d)
        cls = self.cls_token.expand(B, -1, -1)  # (1, 1, d) -> (B, 1, d)
        tokens = torch.cat([cls, patches], dim=1)  # (B, 1 + N, d)
        if self.pos_embed is not None:
            tokens = tokens + self.pos_embed  # (B, 1 + N, d) + (1, 1 + N, d)
        return self.dropout(tokens)

    def features(self, images: Tensor) -> Tensor:
        """Every token's final state, after the final LayerNorm. ``(B, 1 + N, d)``."""
        return self.encoder(self.embed(images))

    def forward(self, images: Tensor) -> Tensor:
        cls_state = self.features(images)[:, 0]  # (B, 1 + N, d) -> (B, d)
        return self.head(cls_state)  # (B, d) -> (B, n_classes)

    def hidden_states(self, images: Tensor) -> list[Tensor]:
        """The encoder's input and each block's output, as Hugging Face's ``output_hidden_states``.

        ``n_layers + 1`` tensors of shape ``(B, 1 + N, d)``; the last is before the final LayerNorm.
        """
        states = [self.embed(images)]
        for block in self.encoder.blocks:
            states.append(block(states[-1]))  # (B, 1 + N, d)
        return states

    @torch.no_grad()
    def attention_maps(self, images: Tensor) -> Tensor:
        """The attention weights of every block and head. ``(n_layers, B, n_heads, 1 + N, 1 + N)``.

        Row ``i`` of a map is how token ``i`` (0 = ``[CLS]``) spreads its attention over the tokens.
        """
        x = self.embed(images)
        maps = []
        for block in self.encoder.blocks:  # pre-norm blocks: attention reads norm1(x)
            _, w = block.attn(block.norm1(x), need_weights=True, average_weights=False)  # (B, h, T, T)
            maps.append(w)
            x = block(x)
        return torch.stack(maps)

    def num_parameters(self) -> int:
        """Trained parameters (a fixed sin-cos table is a buffer and does not count)."""
        return sum(p.numel() for p in self.parameters())

    # --------------------------------------------------------------- Hugging Face
    @classmethod
    def from_hf(cls, hf_model: nn.Module) -> "VisionTransformer":
        """A model with the configuration and weights of Hugging Face's ``ViTForImageClassification``
        or ``ViTModel`` (whose pooler is left out; a ``ViTModel`` gets a head of ``n_classes=1`` with
        zero weights, so compare its :meth:`features`)."""
        vit = getattr(hf_model, "vit", hf_model)
        config = getattr(vit, "config", None)
        if config is None or getattr(config, "model_type", None) != "vit":
            raise TypeError(f"`hf_model` must be a transformers ViTModel or ViTForImageClassification "
                            f"(got {type(hf_model).__name__})")
        if config.hidden_act != "gelu" or not config.qkv_bias:
            raise ValueError(f"`hf_model` must have hidden_act='gelu' and qkv_bias=True, the only ones supported "
                             f"(got hidden_act={config.hidden_act!r}, qkv_bias={config.qkv_bias})")
        size, patch = _pair("image_size", config.image_size), _pair("patch_size", config.patch_size)
        if size[0] != size[1] or patch[0] != patch[1]:
            raise ValueError(f"`hf_model` must have square images and patches, the only ones supported (got "
                             f"image_size={config.image_size}, patch_size={config.patch_size})")
        classifier = getattr(hf_model, "classifier", None)
        n_classes = classifier.out_features if isinstance(classifier, nn.Linear) else 1
        ours = cls(ViTConfig(image_size=size[0], patch_size=patch[0], n_channels=config.num_channels,
                             n_classes=n_classes, d_model=config.hidden_size, n_layers=config.num_hidden_layers,
                             n_heads=config.num_attention_heads, d_ff=config.intermediate_size,
                             eps=config.layer_norm_eps))
        ours = ours.to(vit.layernorm.weight.dtype)
        ours.copy_from_hf(hf_model)
        return ours

    @torch.no_grad()
    def copy_from_hf(self, hf_model: nn.Module) -> "VisionTransformer":
        """Copy the weights of a Hugging Face ViT of the same configuration (see :meth:`from_hf`).
        Returns ``self``.

        Every setting that changes the function is compared first, and each difference is named
        (nothing is copied then): image and patch size, channels, width, layers, heads, feed-forward
        width, LayerNorm eps, activation, query/key/value biases, the number of classes. Dropout
        rates are not compared (they act only in training mode).
        """
        vit = getattr(hf_model, "vit", hf_model)
        config = getattr(vit, "config", None)
        if not isinstance(hf_model, nn.Module) or getattr(config, "model_type", None) != "vit":
            raise TypeError(f"`hf_model` must be a transformers ViTModel or ViTForImageClassification "
                            f"(got {type(hf_model).__name__}"
                            f"{', model_type=' + repr(config.model_type) if hasattr(config, 'model_type') else ''})")
        emb = vit.embeddings
        if self.pos_embed is None or not isinstance(self.pos_embed, nn.Parameter):
            raise ValueError("Hugging Face's ViT has learned positions: build this model with positions='learned' "
                             f"(got positions={self.config.positions!r})")
        differences = _hf_differences(config, self.config, getattr(hf_model, "classifier", None))
        if differences:
            raise ValueError(f"`hf_model` computes another function than this model; {len(differences)} setting"
                             f"{'s differ' if len(differences) > 1 else ' differs'}: " + "; ".join(differences)
                             + ". Build a matching model with VisionTransformer.from_hf(hf_model)")
        if tuple(emb.position_embeddings.shape) != tuple(self.pos_embed.shape) or len(vit.layers) != len(
                self.encoder.blocks):
            raise ValueError(f"`hf_model` has another shape: positions {tuple(emb.position_embeddings.shape)} and "
                             f"{len(vit.layers)} layers; this model has {tuple(self.pos_embed.shape)} and "
                             f"{len(self.encoder.blocks)}")
        cfg, conv = self.config, emb.patch_embeddings.projection
        d, C, p = cfg.d_model, cfg.n_channels, cfg.patch_size
        tensors = [("embeddings.cls_token", self.cls_token, emb.cls_token),
                   ("embeddings.position_embeddings", self.pos_embed, emb.position_embeddings),
                   ("embeddings.patch_embeddings.projection.weight", self.patch_embed.proj.weight.view(d, C, p, p),
                    conv.weight),
                   ("embeddings.patch_embeddings.projection.bias", self.patch_embed.proj.bias, conv.bias)]
        modules = [(self.encoder.norm, vit.layernorm, "layernorm")]
        for i, (block, layer) in enumerate(zip(self.encoder.blocks, vit.layers)):
            names = [(block.norm1, "layernorm_before"), (block.norm2, "layernorm_after"),
                     (block.attn.q_proj, "attention.q_proj"), (block.attn.k_proj, "attention.k_proj"),
                     (block.attn.v_proj, "attention.v_proj"), (block.attn.out_proj, "attention.o_proj"),
                     (block.ff.linear1, "mlp.fc1"), (block.ff.linear2, "mlp.fc2")]
            modules += [(mine, attrgetter(a)(layer), f"layers.{i}.{a}") for mine, a in names]
        classifier = getattr(hf_model, "classifier", None)
        if isinstance(classifier, nn.Linear):
            modules.append((self.head, classifier, "classifier"))
        for mine, theirs, name in modules:
            tensors += [(f"{name}.weight", mine.weight, theirs.weight), (f"{name}.bias", mine.bias, theirs.bias)]
        for name, mine, theirs in tensors:  # all checked before anything is copied
            if theirs is None or tuple(theirs.shape) != tuple(mine.shape):
                got = "no such tensor" if theirs is None else f"shape {tuple(theirs.shape)}"
                raise ValueError(f"`hf_model`'s {name} has {got}, this model's has shape {tuple(mine.shape)}: its "
                                 "weights do not have the shapes its config gives")
        for name, mine, theirs in tensors:
            mine.copy_(theirs)
        if not isinstance(classifier, nn.Linear):
            self.head.weight.zero_()
            self.head.bias.zero_()
        return self


def _size_pair(value: Any) -> Any:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _hf_differences(hf: Any, cfg: ViTConfig, classifier: Any) -> list[str]:
    """Each setting in which a Hugging Face ViT config differs from ours, as ``name: HF x, ours y``."""
    pairs = [
        ("image_size", _size_pair(hf.image_size), (cfg.image_size, cfg.image_size), "image_size"),
        ("patch_size", _size_pair(hf.patch_size), (cfg.patch_size, cfg.patch_size), "patch_size"),
        ("num_channels", hf.num_channels, cfg.n_channels, "n_channels"),
        ("hidden_size", hf.hidden_size, cfg.d_model, "d_model"),
        ("num_hidden_layers", hf.num_hidden_layers, cfg.n_layers, "n_layers"),
        ("num_attention_heads", hf.num_attention_heads, cfg.n_heads, "n_heads"),
        ("intermediate_size", hf.intermediate_size, cfg.d_ff, "d_ff"),
        ("layer_norm_eps", hf.layer_norm_eps, cfg.eps, "eps"),
        ("hidden_act", hf.hidden_act, "gelu", "its GELU, always"),
        ("qkv_bias", hf.qkv_bias, True, "its query/key/value biases, always"),
    ]
    if isinstance(classifier, nn.Linear):
        pairs.append(("classifier outputs (num_labels)", classifier.out_features, cfg.n_classes, "n_classes"))
    out = []
    for hf_name, theirs, ours, our_name in pairs:
        if theirs != ours:
            mine = (f"this model {our_name}={ours!r}" if "always" not in our_name
                    else f"this model {ours!r} ({our_name})")
            out.append(f"{hf_name}: Hugging Face {theirs!r}, {mine}")
    return out


def vit_parameters(*, image_size: int, patch_size: int, d_model: int, n_layers: int, d_ff: int | None = None,
                   n_channels: int = 3, n_classes: int = 0, positions: str = "learned",
                   pooler: bool = False) -> dict[str, int]:
    """The parameters of a ViT configuration, by part, without building it.

    * ``patch_embedding``: ``(C p^2) d + d``, the linear map of a flattened patch;
    * ``cls_token``: ``d``; ``positions``: ``(1 + N) d`` for a learned table (``N = (H/p)^2``), 0 for
      fixed or no positions;
    * ``blocks``: ``n_layers (12 d^2 + 13 d)`` with ``d_ff = 4 d`` (chapter 6's
      :func:`~companion.block.block_parameters`); ``final_norm``: ``2 d``;
    * ``head``: ``d n_classes + n_classes`` (0 classes: no head); ``pooler``: ``d^2 + d`` (Hugging
      Face's ``ViTModel`` has one by default; the paper's "pre-logits" layer).

    Returns:
        a dict with those keys and ``total``.
    """
    p = check_int("patch_size", patch_size, minimum=1)
    size = check_int("image_size", image_size, minimum=1)
    if size % p:
        raise ValueError(f"`image_size` must be a multiple of `patch_size` (got {size} and {p})")
    d = check_int("d_model", d_model, minimum=1)
    L = check_int("n_layers", n_layers, minimum=1)
    C = check_int("n_channels", n_channels, minimum=1)
    k = check_int("n_classes", n_classes, minimum=0)
    check_choice("positions", positions, POSITIONS)
    check_bool("pooler", pooler)
    n_patches = (size // p) ** 2
    parts = {
        "patch_embedding": C * p * p * d + d,
        "cls_token": d,
        "positions": (1 + n_patches) * d if positions == "learned" else 0,
        "blocks": L * block_parameters(d, d_ff),
        "final_norm": 2 * d,
        "pooler": d * d + d if pooler else 0,
        "head": d * k + k,
    }
    parts["total"] = sum(parts.values())
    return parts


# --------------------------------------------------------------------------- data
@dataclass
class DigitsSplits:
    """scikit-learn's 8 x 8 digits, split once. Images ``(n, 1, 8, 8)`` in [0, 1], labels ``(n,)``."""

    train_images: Tensor
    train_labels: Tensor
    val_images: Tensor
    val_labels: Tensor
    test_images: Tensor
    test_labels: Tensor
    seed: int = 0
    sizes: dict = field(default_factory=dict)

    def flat(self, split: str) -> tuple[Any, Any]:
        """NumPy ``(n, 64)`` pixels and ``(n,)`` labels of ``"train"``, ``"val"`` or ``"test"`` (for scikit-learn)."""
        check_choice("split", split, ("train", "val", "test"))
        images, labels = getattr(self, f"{split}_images"), getattr(self, f"{split}_labels")
        return images.reshape(len(images), -1).numpy(), labels.numpy()


def digits_splits(*, seed: int = 0, test_size: int = 360, val_size: int = 180) -> DigitsSplits:
    """The 1,797 digits of ``sklearn.datasets.load_digits`` (bundled: nothing is downloaded), split
    into train, validation and test sets, each with the same share of every digit (stratified).

    Pixels (0 to 16 in the data) are divided by 16. The defaults give 1,257 / 180 / 360 images.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    seed = check_int("seed", seed, minimum=0)
    test_size = check_int("test_size", test_size, minimum=10)
    val_size = check_int("val_size", val_size, minimum=10)
    digits = load_digits()
    x = digits.images.astype("float32") / 16.0  # (1797, 8, 8)
    y = digits.target
    if test_size + val_size > len(y) - 10:
        raise ValueError(f"`test_size` + `val_size` must leave training images (got {test_size} + {val_size} "
                         f"of {len(y)})")
    rest_x, test_x, rest_y, test_y = train_test_split(x, y, test_size=test_size, stratify=y, random_state=seed)
    train_x, val_x, train_y, val_y = train_test_split(rest_x, rest_y, test_size=val_size, stratify=rest_y,
                                                      random_state=seed)

    def t(a, b):
        return torch.from_numpy(a).unsqueeze(1).contiguous(), torch.from_numpy(b).long()

    splits = DigitsSplits(*t(train_x, train_y), *t(val_x, val_y), *t(test_x, test_y), seed=seed)
    splits.sizes = {"train": len(train_y), "val": len(val_y), "test": len(test_y)}
    return splits


# --------------------------------------------------------------------------- training
@dataclass
class TrainLog:
    """What :func:`train_classifier` did: the mean loss of each epoch, the steps, and the time taken:
    ``seconds`` on the clock, ``cpu_seconds`` of processor time (the two agree on an idle machine;
    on a busy one the clock runs slower than the work)."""

    epoch_loss: list[float] = field(default_factory=list)
    steps: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0


def train_classifier(model: nn.Module, images: Tensor, labels: Tensor, *, epochs: int = 100, batch_size: int = 64,
                     lr: float = 1e-3, weight_decay: float = 0.05, warmup_epochs: int = 5,
                     label_smoothing: float = 0.0, seed: int = 0) -> TrainLog:
    """Train any image classifier with AdamW, a linear warm-up and a cosine decay of the learning rate.

    The same loop trains the ViT and the MLP and CNN baselines, so that they differ only in the
    model. Batches are drawn from their own generator seeded with ``seed``: the same seed gives the
    same run (on one thread).

    Every argument is checked before the first step: ``images`` must be finite (a NaN would train
    the model to NaN) and of the model's dtype, ``labels`` classes of the model's output (read from
    one forward pass on one image, in evaluation mode: it draws no random number). Labels of any
    integer dtype are legitimate (they are used as ``torch.long``). A loss that becomes NaN or
    infinite during training (a learning rate too large) stops it with a FloatingPointError.

    Shapes:
        images ``(n, C, H, W)``, labels ``(n,)`` integers.
    """
    check_instance_module(model)
    check_tensor("images", images, shape=("n", "C", "H", "W"), dtype="float")
    check_tensor("labels", labels, shape=(("n", len(images)),), dtype="int")
    check_finite("images", images, hint="a NaN pixel makes every loss and weight NaN")
    named = list(model.named_parameters())
    if not named:
        raise ValueError(f"`model` has no parameters to train (got a {type(model).__name__})")
    weight = named[0][1]
    if images.dtype != weight.dtype or images.device != weight.device:
        raise TypeError(f"`images` must have the model's dtype {weight.dtype} on {weight.device} "
                        f"(got {images.dtype} on {images.device}); convert with images.to(...)")
    epochs = check_int("epochs", epochs, minimum=1)
    batch_size = check_int("batch_size", batch_size, minimum=1)
    check_float("lr", lr, low=0.0, low_open=True)
    check_float("weight_decay", weight_decay, low=0.0)
    warmup_epochs = check_int("warmup_epochs", warmup_epochs, minimum=0)
    check_float("label_smoothing", label_smoothing, low=0.0, high=1.0, high_open=True)
    seed = check_int("seed", seed, minimum=0)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        probe = model(images[:1])  # (1, n_classes)
    model.train(was_training)
    if not isinstance(probe, Tensor) or probe.ndim != 2 or not probe.is_floating_point():
        raise TypeError(f"`model` must return logits of shape (B, n_classes) (got "
                        f"{tuple(probe.shape) if isinstance(probe, Tensor) else type(probe).__name__})")
    check_index("labels", labels, probe.shape[1], what=f"class labels of the model's {probe.shape[1]} outputs")
    labels = labels.long()
    g = torch.Generator().manual_seed(seed)
    n = len(images)
    steps_per_epoch = math.ceil(n / batch_size)
    total, warmup = epochs * steps_per_epoch, warmup_epochs * steps_per_epoch
    # no weight decay on biases, norms, [CLS] and positions (vectors), as in ViT's and BERT's recipes
    decay = [p for name, p in named if name.endswith("weight") and p.ndim >= 2]  # matrices and kernels
    keep = [p for name, p in named if not (name.endswith("weight") and p.ndim >= 2)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay},
                                   {"params": keep, "weight_decay": 0.0}], lr=lr)
    log = TrainLog()
    start, cpu_start = time.perf_counter(), time.process_time()
    model.train()
    for epoch in range(epochs):
        order = torch.randperm(n, generator=g)
        losses = []
        for i in range(0, n, batch_size):
            step = log.steps
            scale = (step + 1) / warmup if step < warmup else 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(
                1, total - warmup)))
            for group in optimizer.param_groups:
                group["lr"] = lr * scale
            idx = order[i:i + batch_size]
            loss = F.cross_entropy(model(images[idx]), labels[idx], label_smoothing=label_smoothing)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if not math.isfinite(losses[-1]):
                raise FloatingPointError(f"the training loss became {losses[-1]} at step {log.steps} (epoch {epoch}); "
                                         f"lower the learning rate `lr` (got lr={lr})")
            log.steps += 1
        log.epoch_loss.append(sum(losses) / len(losses))
    model.eval()
    log.seconds = time.perf_counter() - start
    log.cpu_seconds = time.process_time() - cpu_start
    return log


def check_instance_module(model: Any) -> None:
    if not isinstance(model, nn.Module):
        raise TypeError(f"`model` must be a torch.nn.Module (got {type(model).__name__})")


@torch.no_grad()
def predict(model: nn.Module, images: Tensor, batch_size: int = 512) -> Tensor:
    """The predicted class of each image (argmax of the logits), in evaluation mode. ``(n,)``."""
    check_instance_module(model)
    check_tensor("images", images, shape=("n", "C", "H", "W"), dtype="float")
    batch_size = check_int("batch_size", batch_size, minimum=1)
    was_training = model.training
    model.eval()
    out = torch.cat([model(images[i:i + batch_size]).argmax(-1) for i in range(0, len(images), batch_size)])
    model.train(was_training)
    return out


def accuracy(model: nn.Module, images: Tensor, labels: Tensor) -> float:
    """The share of ``images`` whose predicted class is the label."""
    check_instance_module(model)
    check_tensor("images", images, shape=("n", "C", "H", "W"), dtype="float")
    check_tensor("labels", labels, shape=(("n", len(images)),), dtype="int")
    return (predict(model, images) == labels).float().mean().item()


# --------------------------------------------------------------------------- baselines
class DigitsMLP(nn.Module):
    """A multilayer perceptron on the 64 pixels: ``64 -> hidden -> hidden -> 10``, GELU.

    Shapes:
        images ``(B, 1, 8, 8)`` -> logits ``(B, 10)``.
    """

    def __init__(self, hidden: int = 256, n_classes: int = 10, image_size: int = 8):
        super().__init__()
        hidden = check_int("hidden", hidden, minimum=1)
        n_classes = check_int("n_classes", n_classes, minimum=1)
        size = self.image_size = check_int("image_size", image_size, minimum=1)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(size * size, hidden), nn.GELU(),
                                 nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, n_classes))

    def forward(self, images: Tensor) -> Tensor:
        _check_baseline_images(images, self.image_size, self.net[1].weight)
        return self.net(images)  # (B, 1, H, W) -> (B, H W) -> (B, n_classes)


class DigitsCNN(nn.Module):
    """A small convolutional network: two 3 x 3 convolutions, a 2 x 2 max-pool, two dense layers.

    ``conv(1 -> c) -> conv(c -> 2c) -> pool -> dense(2c * 16 -> hidden) -> dense(hidden -> 10)``.

    Shapes:
        images ``(B, 1, 8, 8)`` -> logits ``(B, 10)``.
    """

    def __init__(self, channels: int = 32, hidden: int = 100, n_classes: int = 10):
        super().__init__()
        c = check_int("channels", channels, minimum=1)
        hidden = check_int("hidden", hidden, minimum=1)
        n_classes = check_int("n_classes", n_classes, minimum=1)
        self.net = nn.Sequential(
            nn.Conv2d(1, c, 3, padding=1), nn.GELU(),  # (B, c, 8, 8)
            nn.Conv2d(c, 2 * c, 3, padding=1), nn.GELU(),  # (B, 2c, 8, 8)
            nn.MaxPool2d(2),  # (B, 2c, 4, 4)
            nn.Flatten(), nn.Linear(2 * c * 16, hidden), nn.GELU(), nn.Linear(hidden, n_classes))

    def forward(self, images: Tensor) -> Tensor:
        _check_baseline_images(images, 8, self.net[0].weight)
        return self.net(images)


def _check_baseline_images(images: Any, size: int, weight: Tensor) -> None:
    """``images`` must be ``(B, 1, size, size)`` floats of the model's dtype and device."""
    check_tensor("images", images, shape=("B", ("C", 1), ("H", size), ("W", size)), dtype="float",
                 hint="a single image needs its batch and channel dimensions: image[None, None]")
    if images.dtype != weight.dtype or images.device != weight.device:
        raise TypeError(f"`images` must have the model's dtype {weight.dtype} on {weight.device} "
                        f"(got {images.dtype} on {images.device}); convert with images.to(...)")


# --------------------------------------------------------------------------- the trained results
#: The chapter's trained ViTs and recorded results, shipped in ``companion/assets``.
TRAINED_ASSET = "vit_digits.safetensors"


def save_trained(path: str | Path, models: dict[str, nn.Module], record: dict, *,
                 half: tuple[str, ...] = ()) -> Path:
    """Write the weights of ``models`` (each under its name) and the JSON ``record`` to one file.

    The models named in ``half`` are stored in float16 (half the bytes; a float32 model loads them
    back with its own dtype). The shipped file was written this way from the book's own run of
    chapter 12 with ``TRAIN = True``: the ViT of the chapter and the one trained without
    positions, their training logs, and the test accuracy of every seed of the comparison.
    """
    from safetensors.torch import save_file

    if not isinstance(models, dict) or not all(isinstance(m, nn.Module) for m in models.values()):
        raise TypeError("`models` must be a dict of names to torch.nn.Module")
    if not isinstance(record, dict):
        raise TypeError(f"`record` must be a dict (got {type(record).__name__})")
    unknown = sorted(set(half) - set(models))
    if unknown:
        raise ValueError(f"`half` names models that are not in `models`: {unknown} (models: {sorted(models)})")
    tensors = {}
    for name, model in models.items():
        for key, value in model.state_dict().items():
            value = value.detach().cpu().contiguous()
            tensors[f"{name}.{key}"] = value.half() if name in half and value.is_floating_point() else value
    path = Path(path)
    save_file(tensors, str(path), metadata={"record": json.dumps(record, sort_keys=True)})
    return path


def load_trained(path: str | Path | None = None) -> tuple[dict[str, dict[str, Tensor]], dict]:
    """The state dicts (by model name) and the record written by :func:`save_trained`; by default
    the shipped file :data:`TRAINED_ASSET`. Load a state dict with ``model.load_state_dict(...)``."""
    from safetensors import safe_open

    if path is None:
        from companion.data import asset_path

        path = asset_path(TRAINED_ASSET)
    states: dict[str, dict[str, Tensor]] = {}
    with safe_open(str(path), framework="pt") as f:
        record = json.loads((f.metadata() or {}).get("record", "{}"))
        for key in f.keys():
            name, _, rest = key.partition(".")
            states.setdefault(name, {})[rest] = f.get_tensor(key)
    return states, record
