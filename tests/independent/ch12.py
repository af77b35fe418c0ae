"""Independent red-team cases for chapter 12 (the Vision Transformer).

Written from the student notebook only: the exercise texts and the check cells (the outside red
team's false passes and false rejects of issue 33 among them), never the checkers' code. See
README.md.
"""
import textwrap

MODULE = "companion.exercises.vit"
PRELUDE = """
import copy
import math
import torch
import torch.nn.functional as F
from companion.block import block_parameters
from companion.vit import patchify, VisionTransformer, ViTConfig
from companion.exercises import vit as check
"""
CASES = []


def case(exercise, checker, name, expect, why, source, call):
    CASES.append(dict(exercise=exercise, checker=checker, module=MODULE, name=name, expect=expect, why=why,
                      source=textwrap.dedent(source), call=call))


# ---------------------------------------------------------------- 12.1 ---
case("12.1", "patchify_images", "f_unfold", "wrong", "F.unfold, which the text forbids", """
def my_patchify(images, patch_size):
    return F.unfold(images, patch_size, stride=patch_size).transpose(1, 2)
""", "my_patchify")
case("12.1", "patchify_images", "nn_unfold", "wrong", "nn.Unfold, which the text forbids", """
def my_patchify(images, patch_size):
    return torch.nn.Unfold(kernel_size=patch_size, stride=patch_size)(images).transpose(1, 2)
""", "my_patchify")
case("12.1", "patchify_images", "tensor_unfold", "right", "Tensor.unfold windows, then permute (the text forbids F.unfold only)", """
def my_patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.unfold(2, p, p).unfold(3, p, p)
    return x.permute(0, 2, 3, 1, 4, 5).reshape(B, -1, C * p * p)
""", "my_patchify")
case("12.1", "patchify_images", "squeeze", "wrong", "squeezes the result: a batch of one loses its batch axis", """
def my_patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(B, -1, C * p * p).squeeze()
""", "my_patchify")

# ---------------------------------------------------------------- 12.2 ---
case("12.2", "embed_patches", "squeeze", "wrong", ".squeeze() after the convolution (batch of one)", """
def my_embed_patches(images, weight, bias, patch_size):
    out = F.conv2d(images, weight, bias, stride=patch_size)
    return out.flatten(2).transpose(1, 2).squeeze()
""", "my_embed_patches")
case("12.2", "embed_patches", "view_d_first", "right", "einsum on patchify", """
def my_embed_patches(images, weight, bias, patch_size):
    return torch.einsum("bnk,dk->bnd", patchify(images, patch_size), weight.flatten(1)) + bias
""", "my_embed_patches")
case("12.2", "embed_patches", "detached", "wrong", "computes under no_grad: no gradient to the weight", """
def my_embed_patches(images, weight, bias, patch_size):
    with torch.no_grad():
        return F.conv2d(images, weight, bias, stride=patch_size).flatten(2).transpose(1, 2)
""", "my_embed_patches")

# ---------------------------------------------------------------- 12.4 ---
case("12.4", "vit_params", "block_parameters", "right", "uses chapter 6's block_parameters (not forbidden)", """
def my_vit_parameters(image_size, patch_size, d_model, n_layers, n_classes):
    d, N = d_model, (image_size // patch_size) ** 2
    return (3 * patch_size ** 2 * d + d + d + (1 + N) * d + n_layers * block_parameters(d, 4 * d)
            + 2 * d + d * n_classes + n_classes)
""", "my_vit_parameters")

# ---------------------------------------------------------------- 12.5 ---
_FORWARD = '''
def my_vit_logits(model, images):
    d, p = model.config.d_model, model.config.patch_size
    C = images.shape[1]
    tokens = patchify(images, p) @ model.patch_embed.proj.weight.T + model.patch_embed.proj.bias
    B, N = tokens.shape[:2]
    h = torch.cat([model.cls_token.expand(B, 1, d), tokens], 1)
    if model.pos_embed is not None:
        h = h + model.pos_embed
    for block in model.encoder.blocks:
        h = block(h)
    {tail}
'''
case("12.5", "vit_forward", "right_linear", "right", "the patch embedding as a matrix product on patchify",
     _FORWARD.format(tail="return model.head(model.encoder.norm(h)[:, 0])"), "my_vit_logits")
case("12.5", "vit_forward", "no_norm", "wrong", "no final LayerNorm", _FORWARD.format(tail="return model.head(h[:, 0])"), "my_vit_logits")
case("12.5", "vit_forward", "gap", "wrong", "mean of all tokens", _FORWARD.format(tail="return model.head(model.encoder.norm(h).mean(1))"), "my_vit_logits")
case("12.5", "vit_forward", "calls_model", "wrong", "calls the model", """
def my_vit_logits(model, images):
    return model(images)
""", "my_vit_logits")
case("12.5", "vit_forward", "calls_encoder", "wrong", "calls model.encoder instead of the blocks", """
def my_vit_logits(model, images):
    return model.head(model.encoder(model.embed(images))[:, 0])
""", "my_vit_logits")
case("12.5", "vit_forward", "no_pos_crash", "wrong", "always adds pos_embed (None for a model without positions)", """
def my_vit_logits(model, images):
    d, p = model.config.d_model, model.config.patch_size
    tokens = patchify(images, p) @ model.patch_embed.proj.weight.T + model.patch_embed.proj.bias
    h = torch.cat([model.cls_token.expand(len(images), 1, d), tokens], 1) + model.pos_embed
    for block in model.encoder.blocks:
        h = block(h)
    return model.head(model.encoder.norm(h)[:, 0])
""", "my_vit_logits")

# ---------------------------------------------------------------- junk ---
import pathlib as _pathlib  # noqa: E402
import sys as _sys  # noqa: E402

_sys.path.insert(0, str(_pathlib.Path(__file__).resolve().parent))
from _junk import junk_cases  # noqa: E402

CASES += junk_cases(MODULE, {
    "12.1": ("patchify_images", "my_patchify", "images, patch_size"),
    "12.2": ("embed_patches", "my_embed_patches", "images, weight, bias, patch_size"),
    "12.3": ("cls_and_positions", "my_tokens", "patch_tokens, cls_token, pos_embed"),
    "12.4": ("vit_params", "my_vit_parameters", "image_size, patch_size, d_model, n_layers, n_classes"),
    "12.5": ("vit_forward", "my_vit_logits", "model, images"),
    "12.6": ("remove_positions", "my_without_positions", "model"),
})
