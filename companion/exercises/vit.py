"""Checkers for chapter 12, *The Vision Transformer*.

They recognize the classic slips: patches cut as strips by a reshape with no permute, patches
listed column by column, pixels of a patch in the wrong order (channel last, or transposed), a
convolution's output not transposed to ``(B, N, d)`` or a stride of 1, ``[CLS]`` put at the end or
left without its position, a parameter count that forgets ``[CLS]``, a position, a bias or the
channels, a model whose positions were removed in place or only in part, and a forward pass
assembled without the final LayerNorm, with the head on the wrong token, or by calling the model.

Each checker runs the student's function and the reference on inputs drawn from named edge classes
(a batch of one, one patch per image, non-square images, three channels, both float dtypes, caller
tensors that require gradients, calls under ``no_grad``); a failing class names itself. The forbidden
calls are exactly those the texts name (12.1: ``patchify``, ``F.unfold``/``nn.Unfold``; 12.4:
``vit_parameters``; 12.5: the model's own forward, ``embed``, ``features``, ``encoder`` and
``patch_embed``); a companion function the text does not forbid is allowed.
"""
from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from companion.vit import VisionTransformer, ViTConfig, patchify, vit_parameters

from . import rules
from ._core import StudentError, as_count, source_facts, checker, close, describe, first_difference, hint, passed, require_tensor

__all__ = ["patchify_images", "embed_patches", "cls_and_positions", "vit_params", "remove_positions", "vit_forward"]


def _run_all(fn, cases: list[tuple]) -> list:
    """Call ``fn(*args)`` on every case; "not attempted" only when every call raises the stub's
    ``NotImplementedError``, a raise on some inputs only is named with them."""
    results, stub = [], []
    for args in cases:
        try:
            results.append(fn(*args))
        except StudentError as exc:
            if not isinstance(exc.error, NotImplementedError):
                raise
            stub.append((args, exc))
            results.append(None)
    if stub and len(stub) == len(cases):
        raise stub[0][1]
    if stub:
        shapes = ", ".join(describe(a) for a in stub[0][0])
        hint(f"your function raised NotImplementedError for ({shapes}) but not for other inputs: a branch is "
             "still unwritten.")
    return results


def _require_function(fn, name: str) -> None:
    """Hint unless the answer is a function (a student may assign a value where a def is expected)."""
    if not callable(fn) or isinstance(fn, type):
        hint(f"`{name}` should be a function (def {name}(...): ...); it is {describe(fn)}.")


def _images(g: torch.Generator, B: int, C: int, H: int, W: int) -> torch.Tensor:
    return torch.randn(B, C, H, W, generator=g, dtype=torch.float64)


def _patch_mistakes(images: torch.Tensor, p: int) -> list[tuple[torch.Tensor, str]]:
    """Wrong patchifications of ``images`` (B, C, H, W) and what each one did."""
    B, C, H, W = images.shape
    N, k = (H // p) * (W // p), C * p * p
    x = images.reshape(B, C, H // p, p, W // p, p)
    return [
        (images.reshape(B, N, k), "a reshape alone does not cut squares: it takes runs of consecutive pixels "
                                  "(whole rows), not p x p blocks. Reshape to (B, C, H/p, p, W/p, p), permute the "
                                  "grid dimensions to the front, then flatten."),
        (x.permute(0, 4, 2, 1, 3, 5).reshape(B, N, k), "the patches come column by column; list them in "
                                                       "reading order, row by row: patch r * (W/p) + c."),
        (x.permute(0, 2, 4, 3, 5, 1).reshape(B, N, k), "each patch vector lists its pixels channel last "
                                                       "(p, p, C); this course uses the order of a Conv2d kernel "
                                                       "flattened: channel, then row, then column (C, p, p)."),
        (x.permute(0, 2, 4, 1, 5, 3).reshape(B, N, k), "the pixels of each patch are transposed (column by "
                                                       "column); list them row by row, as the image stores them."),
        (x.permute(0, 4, 2, 1, 5, 3).reshape(B, N, k), "both the grid and each patch are read column by column: "
                                                       "you transposed the image. Keep rows first."),
        (F.unfold(images, p, stride=p).reshape(B, N, k), "F.unfold returns (B, C p p, N): transpose it to "
                                                         "(B, N, C p p) instead of reshaping."),
    ]


@checker("Exercise 12.1")
def patchify_images(my_patchify) -> None:
    """``my_patchify(images, patch_size)``: ``(B, C, H, W)`` -> ``(B, N, C p p)``, patches in reading
    order, each flattened channel, row, column (as :func:`companion.vit.patchify`)."""
    _require_function(my_patchify, "my_patchify")
    g = torch.Generator().manual_seed(12)
    classes = [("three channels, not square", _images(g, 2, 3, 4, 8), 2),
               ("the chapter's digits", _images(g, 3, 1, 8, 8), 4),
               ("patches of one pixel", _images(g, 1, 2, 4, 4), 1),
               ("a batch of one", _images(g, 1, 1, 8, 8), 2),
               ("one patch per image", _images(g, 2, 3, 4, 4), 4),
               ("a single row of patches", _images(g, 2, 2, 2, 6), 2),
               ("float32 images", _images(g, 2, 3, 6, 6).float(), 3),
               ("images that require gradients", _images(g, 2, 1, 4, 6).requires_grad_(), 2)]
    with rules.watch() as seen:
        answers = _run_all(my_patchify, [(images, p) for _, images, p in classes])
    facts = source_facts(my_patchify)
    by_source = bool({"F.unfold", "nn.Unfold", "nn.functional.unfold", "torch.nn.functional.unfold",
                      "torch.nn.Unfold"} & facts.chains) or "Unfold" in facts.names
    if (seen.called("unfold") and (seen.used_module("torch.nn.functional") or seen.used_module("torch.nn.modules.fold"))
            or by_source):
        hint("your function calls unfold (F.unfold or nn.Unfold), which the exercise rules out: cut the "
             "patches with reshape and permute.")
    for (name, images, p), answer in zip(classes, answers):
        B, C, H, W = images.shape
        out = require_tensor(answer, "a tensor of patch vectors")
        right = patchify(images.detach(), p)
        N, k = right.shape[1:]
        if tuple(out.shape) == (B, k, N) and close(out, right.transpose(1, 2)):
            hint(f"the result is (B, C p p, N) = {tuple(out.shape)}: transpose it to (B, N, C p p), one row per "
                 "patch.")
        if tuple(out.shape) == (B, H // p, W // p, C, p, p) or tuple(out.shape) == (B, N, C, p, p):
            hint(f"flatten each patch into one vector of C p p = {k} numbers: the result has shape "
                 f"(B, N, C p p) = {(B, N, k)} (you returned {tuple(out.shape)}).")
        if tuple(out.shape) != (B, N, k):
            hint(f"fails on {name}: for {B} images of shape {(C, H, W)} and patch_size={p} the result has shape "
                 f"(B, N, C p p) = {(B, N, k)}: N = (H/p)(W/p) patches of C p p numbers (got "
                 f"{tuple(out.shape)}).", generic=True)
        if out.dtype != images.dtype:
            hint(f"fails on {name}: the patches are {out.dtype}, the images {images.dtype}; keep the dtype.")
        if close(out, right, rtol=1e-10, atol=1e-12):
            continue
        if p > 1 or C > 1:
            for wrong, message in _patch_mistakes(images.detach(), p):
                if close(out, wrong, rtol=1e-10, atol=1e-12):
                    hint(message)
        hint(f"fails on {name}: with patch_size={p} on images of shape {(B, C, H, W)}: "
             f"{first_difference(out, right)}.", generic=True)
    passed("reshape to (B, C, H/p, p, W/p, p), move the grid to the front, flatten each patch.")


@checker("Exercise 12.2", allow=("companion.vit",))  # the text allows patchify
def embed_patches(my_embed_patches) -> None:
    """``my_embed_patches(images, weight, bias, patch_size)`` with a ``Conv2d``'s ``weight`` ``(d, C, p, p)``
    and ``bias`` ``(d,)``: the tokens ``(B, N, d)``, equal to the strided convolution flattened and
    transposed."""
    _require_function(my_embed_patches, "my_embed_patches")
    g = torch.Generator().manual_seed(122)
    classes = [("three channels, not square", (2, 3, 6, 8, 2, 5)), ("the chapter's digits", (3, 1, 8, 8, 4, 7)),
               ("a batch of one", (1, 1, 8, 8, 2, 4)), ("one patch per image", (2, 3, 4, 4, 4, 3)),
               ("a batch of one with one patch", (1, 2, 2, 2, 2, 6)), ("a width d of one", (2, 1, 4, 4, 2, 1))]
    cases = []
    for name, (B, C, H, W, p, d) in classes:
        cases.append((name, _images(g, B, C, H, W), torch.randn(d, C, p, p, generator=g, dtype=torch.float64),
                      torch.randn(d, generator=g, dtype=torch.float64), p))
    images32 = _images(g, 2, 1, 4, 4).float()
    cases.append(("float32 tensors", images32, torch.randn(3, 1, 2, 2, generator=g).float(),
                  torch.randn(3, generator=g).float(), 2))
    w_grad = torch.randn(4, 1, 2, 2, generator=g, dtype=torch.float64).requires_grad_()
    cases.append(("a weight that requires gradients", _images(g, 2, 1, 4, 4), w_grad,
                  torch.randn(4, generator=g, dtype=torch.float64).requires_grad_(), 2))
    answers = _run_all(my_embed_patches, [(images, weight, bias, p) for _, images, weight, bias, p in cases])
    for (name, images, weight, bias, p), answer in zip(cases, answers):
        out = require_tensor(answer, "a tensor of tokens")
        B, C, H, W = images.shape
        d = weight.shape[0]
        if weight.requires_grad and not out.requires_grad:
            hint(f"fails on {name}: the tokens carry no gradient back to `weight`; compute them from it with "
                 "differentiable operations (no .detach(), no torch.no_grad()) so that training can change it.")
        if w_grad.grad is not None:
            hint("your function called .backward() or changed `weight.grad`: only compute the tokens.")
        weight, bias = weight.detach(), bias.detach()
        conv = F.conv2d(images, weight, bias, stride=p)  # (B, d, H/p, W/p)
        right = conv.flatten(2).transpose(1, 2)  # (B, N, d)
        N = right.shape[1]
        if tuple(out.shape) == (B, d, H // p, W // p):
            hint(f"that is the convolution's output (B, d, H/p, W/p) = {tuple(out.shape)}: flatten the grid and "
                 "transpose, .flatten(2).transpose(1, 2), to get one row per patch: (B, N, d).")
        if tuple(out.shape) == (B, d, N) and close(out, right.transpose(1, 2)):
            hint("the result is (B, d, N): transpose it to (B, N, d), one token (row) per patch.")
        full = F.conv2d(images, weight, bias)  # stride 1
        if full.shape[2] * full.shape[3] != N and (tuple(out.shape[1:]) == (full.shape[2] * full.shape[3], d)
                                                   or tuple(out.shape) == tuple(full.shape)):
            hint(f"the kernel moved one pixel at a time (stride 1), so patches overlap; use stride={p}, one "
                 "step per patch.")
        if tuple(out.shape) != (B, N, d) and tuple(out.shape) == tuple(right.squeeze().shape):
            hint(f"fails on {name}: the tokens have shape {tuple(out.shape)}, not (B, N, d) = {(B, N, d)}: a "
                 ".squeeze() drops a batch of one or a single patch as well; flatten and transpose instead.")
        if tuple(out.shape) != (B, N, d):
            hint(f"fails on {name}: the tokens have shape (B, N, d) = {(B, N, d)} (got {tuple(out.shape)}); "
                 "a .squeeze() drops a batch of one or a single patch as well.", generic=True)
        if out.dtype != images.dtype:
            hint(f"fails on {name}: the tokens are {out.dtype}, the images {images.dtype}; keep the dtype.")
        tol = dict(rtol=1e-10, atol=1e-10) if images.dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)
        if close(out.detach(), right, **tol):
            continue
        out = out.detach()
        flat = patchify(images, p)  # (B, N, C p p)
        mistakes = [
            (right - bias, "the bias is missing: add `bias`, one number per output feature."),
            (flat @ weight.reshape(-1, d) + bias if weight.numel() == flat.shape[-1] * d else None,
             "weight.reshape(-1, d) mixes up the features: a Conv2d weight is (d, C, p, p), so the matrix "
             "that multiplies a flattened patch is weight.reshape(d, -1).T."),
            (conv.transpose(2, 3).flatten(2).transpose(1, 2), "the tokens come column by column: flatten the "
                                                              "(H/p, W/p) grid row by row."),
            (F.conv2d(images, weight.transpose(2, 3), bias, stride=p).flatten(2).transpose(1, 2),
             "each kernel is transposed: weight[o, c, i, j] multiplies pixel row i, column j of the patch."),
        ]
        for wrong, message in mistakes:
            if wrong is not None and close(out, wrong, rtol=1e-10, atol=1e-10):
                hint(message)
        hint(f"fails on {name}: on images {(B, C, H, W)} with patch_size={p}: {first_difference(out, right)}.",
             generic=True)
    passed("a kernel the size of a patch and a stride of one patch: each patch meets the kernel once, "
           "which is a linear map of the flattened patch.")


@checker("Exercise 12.3")
def cls_and_positions(my_tokens) -> None:
    """``my_tokens(patch_tokens, cls_token, pos_embed)``: ``(B, N, d)``, ``(1, 1, d)``, ``(1 + N, d)`` ->
    ``(B, 1 + N, d)``: ``[CLS]`` first, then the patches, each row plus its position."""
    _require_function(my_tokens, "my_tokens")
    g = torch.Generator().manual_seed(123)
    for B, N, d in [(3, 4, 6), (1, 9, 4), (2, 16, 8)]:
        patches = torch.randn(B, N, d, generator=g, dtype=torch.float64)
        cls = torch.randn(1, 1, d, generator=g, dtype=torch.float64)
        pos = torch.randn(1 + N, d, generator=g, dtype=torch.float64)
        args = (patches.clone(), cls.clone(), pos.clone())
        out = require_tensor(my_tokens(*args), "a tensor of tokens")
        if not (torch.equal(args[0], patches) and torch.equal(args[1], cls) and torch.equal(args[2], pos)):
            hint("your function changed one of its inputs in place (`+=` on a slice?); compute a new tensor.")
        right = torch.cat([cls.expand(B, 1, d), patches], dim=1) + pos  # (B, 1 + N, d)
        if tuple(out.shape) == (1, 1 + N, d) and B > 1:
            hint(f"the result has a batch of 1: expand [CLS] to every image, cls_token.expand({B}, 1, d), "
                 "before concatenating.")
        cls_b = cls.expand(B, 1, d)
        if tuple(out.shape) == (B, N, d) and N > 1 and close(
                out, torch.cat([cls_b + pos[:1], patches[:, 1:] + pos[1:N]], dim=1), rtol=1e-10, atol=1e-12):
            hint("[CLS] replaced the first patch: it is an extra token, in front of all N patches.")
        if tuple(out.shape) == (B, N, d):
            hint("the result has N rows: [CLS] is an extra token, put in front of the patches (1 + N rows).")
        if tuple(out.shape) != (B, 1 + N, d):
            hint(f"the tokens have shape (B, 1 + N, d) = {(B, 1 + N, d)} (got {tuple(out.shape)}).", generic=True)
        if close(out, right, rtol=1e-10, atol=1e-12):
            continue
        mistakes = [
            (torch.cat([patches, cls_b], dim=1) + pos, "[CLS] goes in front of the patches (row 0), not after them."),
            (torch.cat([cls_b, patches + pos[:N]], dim=1), "positions were added before [CLS] was put in front: "
                                                           "each patch got the position of the row before its own, "
                                                           "and [CLS] none. Concatenate first, then add all 1 + N."),
            (torch.cat([cls_b, patches + pos[1:]], dim=1), "[CLS] has a position vector too (row 0 of pos_embed): "
                                                           "add it to [CLS] as well."),
            (torch.cat([cls_b, patches], dim=1), "the positions are missing: add pos_embed to every token."),
            (torch.cat([cls_b, patches], dim=1) * pos, "positions are added to the tokens, not multiplied."),
        ]
        for wrong, message in mistakes:
            if wrong is not None and close(out, wrong, rtol=1e-10, atol=1e-12):
                hint(message)
        hint(f"with B={B}, N={N}, d={d}: {first_difference(out, right)}.", generic=True)
    passed("[CLS] in front, then every one of the 1 + N tokens plus its own position vector.")


def _count(image_size: int, patch_size: int, d_model: int, n_layers: int, n_classes: int) -> int:
    return vit_parameters(image_size=image_size, patch_size=patch_size, d_model=d_model, n_layers=n_layers,
                          n_classes=n_classes, n_channels=3)["total"]


@checker("Exercise 12.4", allow=("companion.block",))  # chapter 6's block_parameters is not forbidden
def vit_params(my_vit_parameters) -> None:
    """``my_vit_parameters(image_size, patch_size, d_model, n_layers, n_classes)``: RGB images,
    ``d_ff = 4 d_model``, learned positions for ``[CLS]`` and every patch, a final LayerNorm, a head
    with bias on ``[CLS]``; no pooler."""
    _require_function(my_vit_parameters, "my_vit_parameters")
    cases = [(224, 16, 768, 12, 1000), (8, 2, 64, 4, 10), (12, 4, 20, 3, 7), (32, 8, 36, 2, 5)]
    for size, p, d, L, k in cases:
        call = f"my_vit_parameters({size}, {p}, {d}, {L}, {k})"
        got = as_count(my_vit_parameters(size, p, d, L, k), call)
        right = _count(size, p, d, L, k)
        if got == right:
            continue
        N = (size // p) ** 2
        block = 12 * d * d + 13 * d
        if got == right - d:
            hint(f"{call} is one vector of d_model short: count [CLS] (d), its position (the table has 1 + N "
                 "rows) and the patch embedding's bias (d).")
        if got == right - 2 * d:
            hint(f"{call} is two vectors of d_model short: [CLS] (d), the positions of [CLS] and of every patch "
                 "((1 + N) d), the patch embedding's bias (d) and the final LayerNorm (2 d) all count.")
        if got == right - (1 + N) * d or got == right - N * d:
            hint("the learned positions are missing: one vector of d_model for [CLS] and each of the N patches.")
        if got == right - 3 * p * p * d + p * p * d:
            hint("a patch of an RGB image has 3 p^2 numbers: the patch embedding is (3 p^2) x d_model.")
        if got == right - (1 + N) * d + (1 + size // p) * d:
            hint(f"the number of patches is (image_size / patch_size)^2 = {N}, not image_size / patch_size.")
        if got == right - k:
            hint("the head's bias is missing: n_classes of them.")
        if got == right - k * d - k:
            hint("the classification head is missing: d_model x n_classes, plus n_classes biases.")
        if got == right + d * d + d:
            hint("no pooler here: the head reads [CLS]'s final state directly (the exercise says so; Hugging "
                 "Face's ViTModel adds a d x d pooler by default).")
        if got == right - L * 13 * d or got == right - L * 9 * d - L * 4 * d:
            hint("the blocks' biases and LayerNorms are missing: each block has 12 d^2 + 13 d parameters.")
        if got == right - L * block + L * (12 * d * d):
            hint("each block has 12 d^2 + 13 d parameters: 13 d of biases and LayerNorm vectors too.")
        if got == right - L * block:
            hint("the encoder blocks are missing: n_layers x (12 d^2 + 13 d).")
        if got == right - L * block + L * (6 * d * d + 10 * d):
            hint("the feed-forward network is 4 times as wide as the model: d_ff = 4 d_model.")
        if got == right - 2 * d - d:
            hint("the final LayerNorm (2 d) and one more vector of d are missing.")
        hint(f"{call} should not be {got:,}: add the patch embedding, [CLS], the positions, the blocks, the "
             "final LayerNorm and the head.", generic=True)
    passed(f"ViT-B/16 with a 1000-class head: {_count(224, 16, 768, 12, 1000):,} parameters.")


def _remove_model(seed: int = 125) -> tuple[VisionTransformer, torch.Tensor]:
    torch_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = VisionTransformer(ViTConfig(image_size=4, patch_size=2, d_model=8, n_layers=1, n_heads=2, d_ff=16,
                                            n_classes=3)).double().eval()
        with torch.no_grad():  # large positions and [CLS], so that every part changes the logits
            model.pos_embed.copy_(torch.randn(model.pos_embed.shape, dtype=torch.float64))
            model.cls_token.copy_(torch.randn(model.cls_token.shape, dtype=torch.float64))
        images = torch.randn(5, 1, 4, 4, dtype=torch.float64)
    finally:
        torch.random.set_rng_state(torch_state)
    return model, images


@checker("Exercise 12.6", companion_given=True)  # the student edits a given ViT
def remove_positions(my_without_positions) -> None:
    """``my_without_positions(model)``: a copy of a :class:`~companion.vit.VisionTransformer` whose
    position vectors ([CLS]'s included) are gone (zero or ``None``), the original left unchanged."""
    _require_function(my_without_positions, "my_without_positions")
    model, images = _remove_model()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(images)
    out = my_without_positions(model)
    now = model.state_dict()
    changed = set(now) != set(state) or any(not torch.equal(v, now[k]) for k, v in state.items())
    if out is model or changed:
        hint("the original model changed: measure on a copy (copy.deepcopy(model)) and leave the trained model "
             "as it was, positions and all.")
    if isinstance(out, (nn.Parameter, torch.Tensor)):
        hint(f"return the model without positions, not {describe(out)}.")
    # In grading the returned model stays in the student's kernel: the grader gets a proxy that
    # runs it there (companion.grading.wire.Remote), which is called below like the model itself.
    remote = any(c.__name__ == "Remote" and c.__module__ == "companion.grading.wire" for c in type(out).__mro__)
    if not (isinstance(out, nn.Module) or remote) or not callable(out):
        hint(f"return a model (a copy of `model`); you returned {describe(out)}.")
    reference = copy.deepcopy(model)
    reference.pos_embed = None
    with torch.no_grad():
        right = reference(images)
        try:
            got = out(images)
        except Exception as exc:  # noqa: BLE001 - the returned object is the student's
            hint(f"calling the returned model on images raised {type(exc).__name__}: {exc}")
        if not isinstance(got, torch.Tensor):
            hint(f"the returned model's output is {describe(got)}; return a VisionTransformer.")
        if close(got, right, rtol=1e-9, atol=1e-12):
            passed("every token now enters the encoder without its position: the model sees a bag of patches.")
        if close(got, before, rtol=1e-9, atol=1e-12):
            hint("the returned model still adds its positions: set its pos_embed to zero (or to None).")
        mistakes = []
        keep_cls = copy.deepcopy(model)
        keep_cls.pos_embed[:, 1:] = 0
        mistakes.append((keep_cls, "[CLS]'s position (row 0 of pos_embed) is still there: remove every row."))
        no_cls = copy.deepcopy(model)
        no_cls.cls_token.zero_()
        mistakes.append((no_cls, "you zeroed the [CLS] token, not the positions: cls_token is what the head "
                                 "reads; pos_embed holds the positions."))
        no_both = copy.deepcopy(no_cls)
        no_both.pos_embed = None
        mistakes.append((no_both, "the positions are gone, but so is the [CLS] vector: keep cls_token as it was."))
        for wrong, message in mistakes:
            if close(got, wrong(images), rtol=1e-9, atol=1e-12):
                hint(message)
    hint(f"the returned model's logits differ from those of the same model without positions: "
         f"{first_difference(got, right, 'logits')}.", generic=True)


# --------------------------------------------------------------------------- Exercise 12.5
_FORBIDDEN_PARTS = ("forward", "embed", "features", "hidden_states", "attention_maps")


def _watched_model(cfg: ViTConfig, seed: int) -> tuple[VisionTransformer, list[str]]:
    """A float64 ViT with random [CLS] and positions, whose own forward pass and embedding record a call
    (the exercise assembles them from the student's pieces)."""
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = VisionTransformer(cfg).double()
        with torch.no_grad():
            model.cls_token.normal_()
            if isinstance(model.pos_embed, nn.Parameter):
                model.pos_embed.normal_()
            for q in model.encoder.norm.parameters():
                q.add_(torch.randn_like(q) * 0.5)
    finally:
        torch.random.set_rng_state(state)
    calls: list[str] = []
    for name in _FORBIDDEN_PARTS[1:]:
        method = getattr(model, name)

        def watch(*args, _method=method, _name=name, **kwargs):
            calls.append(_name)
            return _method(*args, **kwargs)
        setattr(model, name, watch)
    model.register_forward_pre_hook(lambda m, a: calls.append("forward"))
    model.encoder.register_forward_pre_hook(lambda m, a: calls.append("encoder"))
    model.patch_embed.register_forward_pre_hook(lambda m, a: calls.append("patch_embed"))
    return model, calls


def _reference_logits(model: VisionTransformer, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return VisionTransformer.forward(model, images)


@checker("Exercise 12.5", companion_given=True)  # the student runs a given ViT's blocks and head
def vit_forward(my_vit_logits) -> None:
    """``my_vit_logits(model, images)``: the logits of a :class:`~companion.vit.VisionTransformer`,
    assembled from the patch embedding (as a convolution's weights), ``[CLS]`` and the positions, the
    blocks one by one, the final LayerNorm and the head on ``[CLS]``, without calling the model's own
    forward pass, ``embed``, ``features``, ``encoder`` or ``patch_embed``."""
    _require_function(my_vit_logits, "my_vit_logits")
    g = torch.Generator().manual_seed(126)
    configs = [("the chapter's shape", ViTConfig(image_size=8, patch_size=2, d_model=8, n_layers=2, n_heads=2,
                                                 d_ff=16, n_classes=10), 4),
               ("a batch of one", ViTConfig(image_size=4, patch_size=2, d_model=8, n_layers=1, n_heads=2, n_classes=3), 1),
               ("three channels, one patch per image", ViTConfig(image_size=4, patch_size=4, n_channels=3, d_model=6,
                                                                  n_layers=1, n_heads=3, n_classes=4), 3),
               ("a model without positions (pos_embed is None)",
                ViTConfig(image_size=6, patch_size=3, n_channels=2, d_model=8, n_layers=2, n_heads=4,
                          positions="none", n_classes=5), 2),
               ("fixed 2-D positions (a buffer)", ViTConfig(image_size=8, patch_size=4, d_model=8, n_layers=1,
                                                            n_heads=2, positions="sincos", n_classes=2), 2)]
    cases = []
    for k, (name, cfg, B) in enumerate(configs):
        model, calls = _watched_model(cfg, 1260 + k)
        images = torch.randn(B, cfg.n_channels, cfg.image_size, cfg.image_size, generator=g, dtype=torch.float64)
        cases.append((name, model, calls, images))
    cases[0][1].train()  # a model left in training mode must stay so (dropout is 0: the same logits)
    for name, model, calls, images in cases:
        grad_mode, training = torch.is_grad_enabled(), model.training
        right = _reference_logits(model, images)
        calls.clear()  # the reference ran the model's own pass
        state = {key: v.clone() for key, v in model.state_dict().items()}
        out = _run_all(my_vit_logits, [(model, images)])[0]
        if calls:
            first = min(calls, key=("forward", "features", "encoder", "hidden_states", "attention_maps", "embed",
                                    "patch_embed").index)
            hint(f"your function calls the model's own {first}: assemble the pass yourself, with "
                 "my_embed_patches, my_tokens, the blocks one by one, the final norm and the head.")
        if torch.is_grad_enabled() != grad_mode or model.training != training:
            hint("your function changed the grad mode or the model's train/eval mode; leave both as they were.")
        now = model.state_dict()
        if any(not torch.equal(v, now[key]) for key, v in state.items()):
            hint("your function changed the model's parameters; only compute the logits.")
        out = require_tensor(out, "a tensor of logits")
        B, k = images.shape[0], model.config.n_classes
        if tuple(out.shape) == (B, 1 + model.config.n_patches, k):
            hint("the head ran on every token: it reads only [CLS]'s final state, token 0: h[:, 0].")
        if tuple(out.shape) != (B, k):
            hint(f"fails on {name}: the logits have shape (B, n_classes) = {(B, k)} (got {tuple(out.shape)}).",
                 generic=True)
        if not out.requires_grad:
            hint(f"fails on {name}: the logits carry no gradient to the model's parameters, so the training below "
                 "could not change them; do not detach or run under torch.no_grad().")
        if close(out.detach(), right, rtol=1e-9, atol=1e-10):
            continue
        out = out.detach()
        with torch.no_grad():
            h = VisionTransformer.embed(model, images)
            for block in model.encoder.blocks:
                h = block(h)
            no_norm = model.head(h[:, 0])
            mean_pool = model.head(model.encoder.norm(h)[:, 1:].mean(1))
            last = model.head(model.encoder.norm(h)[:, -1])
        if close(out, no_norm, rtol=1e-9, atol=1e-10):
            hint("the final LayerNorm is missing: after the last block, apply model.encoder.norm, then the head.")
        if close(out, mean_pool, rtol=1e-9, atol=1e-10):
            hint("the head read the mean of the patch tokens; this model reads [CLS]'s final state, token 0.")
        if close(out, last, rtol=1e-9, atol=1e-10):
            hint("the head read the last token; [CLS] is token 0, in front of the patches.")
        hint(f"fails on {name}: {first_difference(out, right, 'logits')}.", generic=True)
    passed("patches, embedding, [CLS] and positions, the blocks, the final norm and the head on [CLS]: the "
           "model's own logits, with a graph for training.")
