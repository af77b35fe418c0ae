"""Mutation registry of chapter 12 (the Vision Transformer): see tests/mutation_harness.py."""
import copy

import torch
import torch.nn.functional as F

from companion.exercises import vit as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 12.1 --------------------------------------------------------------------------------------------
def my_patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)  # (B, C, rows, p, cols, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    return x.reshape(B, (H // p) * (W // p), C * p * p)


def _perm(order):
    def patchify(images, p):
        B, C, H, W = images.shape
        x = images.reshape(B, C, H // p, p, W // p, p).permute(*order)
        return x.reshape(B, (H // p) * (W // p), C * p * p)
    return patchify


PATCHIFY = [
    Mutant("reshape only", lambda im, p: im.reshape(im.shape[0], -1, im.shape[1] * p * p), "a reshape alone"),
    Mutant("grid column by column", _perm((0, 4, 2, 1, 3, 5)), "column by column"),
    Mutant("channel last", _perm((0, 2, 4, 3, 5, 1)), "channel last"),
    Mutant("patch transposed", _perm((0, 2, 4, 1, 5, 3)), "transposed"),
    Mutant("image transposed", _perm((0, 4, 2, 1, 5, 3)), "you transposed the image"),
    Mutant("unfold without transpose", lambda im, p: F.unfold(im, p, stride=p), "calls unfold"),
    Mutant("unfold reshaped", lambda im, p: F.unfold(im, p, stride=p).reshape(my_patchify(im, p).shape),
           "calls unfold"),
    Mutant("unfold, right", lambda im, p: F.unfold(im, p, stride=p).transpose(1, 2), "calls unfold"),
    Mutant("nn.Unfold, right", lambda im, p: torch.nn.Unfold(p, stride=p)(im).transpose(1, 2), "calls unfold"),
    Mutant("not flattened", lambda im, p: im.reshape(im.shape[0], im.shape[1], im.shape[2] // p, p, im.shape[3] // p,
                                                    p).permute(0, 2, 4, 1, 3, 5), "flatten each patch"),
    Mutant("first image only", lambda im, p: my_patchify(im[:1], p)),
    Mutant("overlapping patches", lambda im, p: F.unfold(im, p, stride=1).transpose(1, 2), "calls unfold"),
    Mutant("returns None", lambda im, p: None, "return a tensor"),
    Mutant("returns a list", lambda im, p: my_patchify(im, p).tolist(), "return a tensor"),
    Mutant("in place", lambda im, p: my_patchify(im.mul_(1.0).add_(0.0).mul_(2.0), p) / 2, "in place"),
    Mutant("pixels scaled", lambda im, p: my_patchify(im, p) / 16),
    Mutant("raises", lambda im, p: im.reshape(-1, 7, 3), "RuntimeError", raised=True),
]


# --- 12.2 --------------------------------------------------------------------------------------------
def my_embed_patches(images, weight, bias, patch_size):
    out = F.conv2d(images, weight, bias, stride=patch_size)  # (B, d, H/p, W/p)
    return out.flatten(2).transpose(1, 2)  # (B, N, d)


EMBED = [
    Mutant("no transpose", lambda im, w, b, p: F.conv2d(im, w, b, stride=p).flatten(2), "transpose it"),
    Mutant("not flattened", lambda im, w, b, p: F.conv2d(im, w, b, stride=p), "flatten the grid"),
    Mutant("stride 1", lambda im, w, b, p: F.conv2d(im, w, b).flatten(2).transpose(1, 2), "stride"),
    Mutant("stride 1, not flattened", lambda im, w, b, p: F.conv2d(im, w, b), "stride"),
    Mutant("no bias", lambda im, w, b, p: my_embed_patches(im, w, None, p), "bias is missing"),
    Mutant("weight reshaped the wrong way", lambda im, w, b, p: my_patchify(im, p) @ w.reshape(-1, w.shape[0]) + b,
           "reshape(d, -1).T"),
    Mutant("grid column by column", lambda im, w, b, p: F.conv2d(im, w, b, stride=p).transpose(2, 3).flatten(2)
           .transpose(1, 2), "column by column"),
    Mutant("kernels transposed", lambda im, w, b, p: my_embed_patches(im, w.transpose(2, 3), b, p),
           "each kernel is transposed"),
    Mutant("channel-last patches", lambda im, w, b, p: _perm((0, 2, 4, 3, 5, 1))(im, p) @ w.reshape(w.shape[0], -1).T
           + b),
    Mutant("bias twice", lambda im, w, b, p: my_embed_patches(im, w, b, p) + b),
    Mutant("ReLU added", lambda im, w, b, p: torch.relu(my_embed_patches(im, w, b, p))),
    Mutant("squeezed", lambda im, w, b, p: my_embed_patches(im, w, b, p).squeeze(), "batch of one"),
    Mutant("detached", lambda im, w, b, p: my_embed_patches(im, w.detach(), b.detach(), p), "no gradient"),
    Mutant("float64 always", lambda im, w, b, p: my_embed_patches(im.double(), w.double(), b.double(), p), "dtype"),
    Mutant("returns None", lambda *a: None, "return a tensor"),
    Mutant("wrong stride argument", lambda im, w, b, p: F.conv2d(im, w, b, stride=(p, 1)).flatten(2).transpose(1, 2)),
]


# --- 12.3 --------------------------------------------------------------------------------------------
def my_tokens(patch_tokens, cls_token, pos_embed):
    B = patch_tokens.shape[0]
    tokens = torch.cat([cls_token.expand(B, -1, -1), patch_tokens], dim=1)  # (B, 1 + N, d)
    return tokens + pos_embed  # (B, 1 + N, d) + (1 + N, d)


def _cls(x, c):
    return c.expand(x.shape[0], -1, -1)


TOKENS = [
    Mutant("[CLS] at the end", lambda x, c, pos: torch.cat([x, _cls(x, c)], 1) + pos, "in front of the patches"),
    Mutant("positions before [CLS]", lambda x, c, pos: torch.cat([_cls(x, c), x + pos[:-1]], 1), "before [CLS]"),
    Mutant("[CLS] without position", lambda x, c, pos: torch.cat([_cls(x, c), x + pos[1:]], 1), "row 0 of pos_embed"),
    Mutant("no positions", lambda x, c, pos: torch.cat([_cls(x, c), x], 1), "positions are missing"),
    Mutant("positions multiplied", lambda x, c, pos: torch.cat([_cls(x, c), x], 1) * pos, "not multiplied"),
    Mutant("[CLS] replaces a patch", lambda x, c, pos: torch.cat([_cls(x, c), x[:, 1:]], 1) + pos[:-1],
           "replaced the first patch"),
    Mutant("[CLS] not expanded", lambda x, c, pos: torch.cat([c, x], 1) + pos, "RuntimeError", raised=True),
    Mutant("only the first image", lambda x, c, pos: torch.cat([c, x[:1]], 1) + pos, "expand [CLS]"),
    Mutant("no [CLS]", lambda x, c, pos: x + pos[1:], "extra token"),
    Mutant("positions reversed", lambda x, c, pos: torch.cat([_cls(x, c), x], 1) + pos.flip(0)),
    Mutant("in place", lambda x, c, pos: my_tokens(x.add_(0.0).mul_(2.0), c, pos) - torch.cat(
        [torch.zeros_like(_cls(x, c)), x / 2], 1), "in place"),
    Mutant("returns a tuple", lambda x, c, pos: (my_tokens(x, c, pos), pos), "not a tuple"),
    Mutant("[CLS] added, not prepended", lambda x, c, pos: x + c + pos[1:], "extra token"),
]


# --- 12.4 --------------------------------------------------------------------------------------------
def my_vit_parameters(image_size, patch_size, d_model, n_layers, n_classes):
    d, N = d_model, (image_size // patch_size) ** 2
    patch_embedding = 3 * patch_size**2 * d + d
    cls_and_positions = d + (1 + N) * d
    blocks = n_layers * (12 * d * d + 13 * d)
    return patch_embedding + cls_and_positions + blocks + 2 * d + d * n_classes + n_classes


def _minus(f):
    return lambda s, p, d, L, k: my_vit_parameters(s, p, d, L, k) - f(s, p, d, L, k)


COUNT = [
    Mutant("no [CLS]", _minus(lambda s, p, d, L, k: d), "one vector of d_model short"),
    Mutant("N positions", _minus(lambda s, p, d, L, k: d), "one vector of d_model short"),
    Mutant("no positions", _minus(lambda s, p, d, L, k: (1 + (s // p) ** 2) * d), "learned positions are missing"),
    Mutant("grey patches", _minus(lambda s, p, d, L, k: 2 * p * p * d), "3 p^2 numbers"),
    Mutant("N = size / patch", _minus(lambda s, p, d, L, k: ((s // p) ** 2 - s // p) * d), "not image_size / patch"),
    Mutant("no head bias", _minus(lambda s, p, d, L, k: k), "head's bias"),
    Mutant("no head", _minus(lambda s, p, d, L, k: d * k + k), "head is missing"),
    Mutant("with a pooler", _minus(lambda s, p, d, L, k: -(d * d + d)), "no pooler"),
    Mutant("blocks without biases", _minus(lambda s, p, d, L, k: 13 * d * L), "12 d^2 + 13 d"),
    Mutant("no blocks", _minus(lambda s, p, d, L, k: L * (12 * d * d + 13 * d)), "blocks are missing"),
    Mutant("d_ff = d", _minus(lambda s, p, d, L, k: L * (6 * d * d + 3 * d)), "d_ff = 4 d_model"),
    Mutant("no [CLS] nor patch bias", _minus(lambda s, p, d, L, k: 2 * d), "two vectors of d_model short"),
    Mutant("a float", lambda *a: my_vit_parameters(*a) + 0.5, "not a whole number"),
    Mutant("millions", lambda *a: my_vit_parameters(*a) / 1e6, "not a whole number"),
    Mutant("returns None", lambda *a: None, "whole number"),
    Mutant("returns a string", lambda *a: f"{my_vit_parameters(*a):,}", "whole number"),
    Mutant("BERT's block count", _minus(lambda s, p, d, L, k: L * (12 * d * d + 13 * d) - 12 * (12 * d * d + 13 * d))),
]


# --- 12.6 --------------------------------------------------------------------------------------------
def my_without_positions(model):
    blind = copy.deepcopy(model)
    blind.pos_embed = None  # the tokens enter the encoder without positions
    return blind


def _in_place_none(model):
    model.pos_embed = None
    return model


def _in_place_zero(model):
    with torch.no_grad():
        model.pos_embed.zero_()
    return model


def _copy_then(edit):
    def without(model):
        m = copy.deepcopy(model)
        with torch.no_grad():
            edit(m)
        return m
    return without


def _keep_cls_row(m):
    m.pos_embed[:, 1:] = 0


def _zero_cls(m):
    m.cls_token.zero_()


def _zero_both(m):
    m.cls_token.zero_()
    m.pos_embed = None


def _shuffle(m):
    m.pos_embed.copy_(m.pos_embed.flip(1))


def _half(m):
    m.pos_embed.mul_(0.5)


def _zero_patch_embed(m):
    m.patch_embed.proj.weight.zero_()


REMOVE = [
    Mutant("in place, None", _in_place_none, "original model changed"),
    Mutant("in place, zeros", _in_place_zero, "original model changed"),
    Mutant("unchanged copy", lambda m: copy.deepcopy(m), "still adds its positions"),
    Mutant("keeps [CLS]'s position", _copy_then(_keep_cls_row), "row 0 of pos_embed"),
    Mutant("zeros [CLS] instead", _copy_then(_zero_cls), "zeroed the [CLS] token"),
    Mutant("zeros [CLS] too", _copy_then(_zero_both), "so is the [CLS] vector"),
    Mutant("positions reversed", _copy_then(_shuffle)),
    Mutant("positions halved", _copy_then(_half)),
    Mutant("patch embedding zeroed", _copy_then(_zero_patch_embed)),
    Mutant("returns the table", lambda m: torch.zeros_like(m.pos_embed), "not a tensor"),
    Mutant("returns None", lambda m: None, "return a model"),
    Mutant("returns the encoder", lambda m: copy.deepcopy(m.encoder), "raised"),
    Mutant("returns a number", lambda m: 0.9, "return a model"),
]


# --- 12.5 --------------------------------------------------------------------------------------------
def my_vit_logits(model, images, *, norm=True, token=0, pos=True):
    p, d = model.config.patch_size, model.config.d_model
    C = images.shape[1]
    tokens = my_embed_patches(images, model.patch_embed.proj.weight.reshape(d, C, p, p), model.patch_embed.proj.bias, p)
    N = tokens.shape[1]
    table = model.pos_embed[0] if (model.pos_embed is not None and pos) else torch.zeros(1 + N, d, dtype=tokens.dtype)
    h = my_tokens(tokens, model.cls_token, table)
    for block in model.encoder.blocks:
        h = block(h)
    if norm:
        h = model.encoder.norm(h)
    return model.head(h[:, token] if token is not None else h[:, 1:].mean(1))


def _no_grad_logits(model, images):
    with torch.no_grad():
        return my_vit_logits(model, images)


FORWARD = [
    Mutant("calls the model", lambda m, x: m(x), "own forward"),
    Mutant("calls features", lambda m, x: m.head(m.features(x)[:, 0]), "own features"),
    Mutant("calls embed", lambda m, x: m.head(m.encoder(m.embed(x))[:, 0]), "own encoder"),
    Mutant("calls patch_embed", lambda m, x: m.head(m.encoder.norm(torch.nn.Sequential(*m.encoder.blocks)(
        my_tokens(m.patch_embed(x), m.cls_token, m.pos_embed[0] if m.pos_embed is not None else 0)))[:, 0]),
        "own patch_embed"),
    Mutant("no final norm", lambda m, x: my_vit_logits(m, x, norm=False), "final LayerNorm"),
    Mutant("mean of the patches", lambda m, x: my_vit_logits(m, x, token=None), "mean of the patch"),
    Mutant("last token", lambda m, x: my_vit_logits(m, x, token=-1), "last token"),
    Mutant("no positions", lambda m, x: my_vit_logits(m, x, pos=False)),
    Mutant("under no_grad", _no_grad_logits, "no gradient"),
    Mutant("detached", lambda m, x: my_vit_logits(m, x).detach(), "no gradient"),
    Mutant("every token", lambda m, x: my_vit_logits(m, x, token=slice(None)), "every token"),
    Mutant("eval mode forced", lambda m, x: (m.eval(), my_vit_logits(m, x))[1], "train/eval"),
    Mutant("returns None", lambda m, x: None, "return a tensor"),
]


EXERCISES = [
    Exercise(check.patchify_images, my_patchify, PATCHIFY),
    Exercise(check.embed_patches, my_embed_patches, EMBED),
    Exercise(check.cls_and_positions, my_tokens, TOKENS),
    Exercise(check.vit_params, my_vit_parameters, COUNT),
    Exercise(check.remove_positions, my_without_positions, REMOVE),
    Exercise(check.vit_forward, my_vit_logits, FORWARD),
]

(test_reference_passes_and_enough_mutants, test_mutant_is_caught,
 test_specific_hints_name_their_mistake) = make_tests(EXERCISES)
