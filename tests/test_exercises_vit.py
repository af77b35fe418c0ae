"""The chapter 12 checkers: right answers written in other ways pass, wrong ones never do, an
untouched stub is "not attempted", and junk gets a hint, never a crash of the checker.

The wrong solutions themselves (10 or more per exercise, each with the hint it must get) are in
tests/test_checker_mutations_ch12.py; this file adds the answers that are right in another way and
the junk.
"""
import copy
import math

import pytest
import torch
import torch.nn.functional as F

from companion.exercises import vit as check
from companion.vit import vit_parameters
from test_checker_mutations_ch12 import EXERCISES, my_embed_patches, my_patchify, my_tokens, my_vit_logits, \
    my_vit_parameters, my_without_positions

CHECKERS = [check.patchify_images, check.embed_patches, check.cls_and_positions, check.vit_params,
            check.remove_positions, check.vit_forward]


def stub(*args):
    raise NotImplementedError  # your code here


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.exercise)
def test_untouched_stub_is_not_attempted(checker):
    for answer in (stub, ..., None):
        fb = checker(answer)
        assert fb.status == "not attempted", fb


JUNK = [
    "a string", 10**30, 1j, [], {}, 3.5, torch.zeros(3), object(),
    lambda *a: None, lambda *a: "text", lambda *a: 10**40, lambda *a: 1j, lambda *a: float("nan"),
    lambda *a: [], lambda *a: torch.zeros(0), lambda *a: torch.full((2, 2), float("nan")),
    lambda *a: torch.zeros(2, 2, dtype=torch.complex64), lambda *a: torch.ones(3, dtype=torch.bool),
    lambda *a: (lambda: 1), lambda *a: torch.nn.Linear(2, 2), lambda *a: 1 / 0,
    lambda *a: a[0], lambda *a: -(10**30), lambda *a: torch.tensor(float("inf")),
]


@pytest.mark.parametrize("checker", CHECKERS, ids=lambda c: c.exercise)
@pytest.mark.parametrize("junk", JUNK, ids=range(len(JUNK)))
def test_junk_gets_a_hint_never_a_pass_nor_a_crash(checker, junk):
    fb = checker(junk)
    assert fb.status == "hint", fb
    assert fb.kind in ("specific", "generic", "raised"), fb
    for line in repr(fb).splitlines():
        assert len(line) <= 78, line


# --- right answers written another way --------------------------------------------------------------
def patchify_by_unfold(images, p):
    return F.unfold(images, p, stride=p).transpose(1, 2)  # (B, C p p, N) -> (B, N, C p p)


def patchify_by_loops(images, p):
    B, C, H, W = images.shape
    rows = [images[:, :, r:r + p, c:c + p].reshape(B, -1) for r in range(0, H, p) for c in range(0, W, p)]
    return torch.stack(rows, dim=1)


def embed_by_matrix(images, weight, bias, p):
    d = weight.shape[0]
    return my_patchify(images, p) @ weight.reshape(d, -1).T + bias


def embed_by_permute(images, weight, bias, p):
    out = F.conv2d(images, weight, bias, stride=p)  # (B, d, H/p, W/p)
    return out.permute(0, 2, 3, 1).reshape(images.shape[0], -1, weight.shape[0])  # (B, N, d)


def tokens_positions_first(patches, cls, pos):
    B = patches.shape[0]
    return torch.cat([(cls + pos[0]).expand(B, 1, -1), patches + pos[1:]], dim=1)


def tokens_by_repeat(patches, cls, pos):
    return torch.cat([cls.repeat(patches.shape[0], 1, 1), patches], dim=1) + pos[None]


def count_with_companion(size, p, d, L, k):
    return vit_parameters(image_size=size, patch_size=p, d_model=d, n_layers=L, n_classes=k)["total"]


def count_as_tensor(size, p, d, L, k):
    return torch.tensor(my_vit_parameters(size, p, d, L, k))


def count_as_whole_float(size, p, d, L, k):
    return float(my_vit_parameters(size, p, d, L, k))


def without_by_zeros(model):
    blind = copy.deepcopy(model)
    with torch.no_grad():
        blind.pos_embed.zero_()
    return blind


def without_by_new_parameter(model):
    blind = copy.deepcopy(model)
    blind.pos_embed = torch.nn.Parameter(torch.zeros_like(model.pos_embed))
    return blind


def patchify_by_tensor_unfold(images, p):  # Tensor.unfold (a sliding window), not F.unfold: allowed
    B, C, H, W = images.shape
    x = images.unfold(2, p, p).unfold(3, p, p)  # (B, C, H/p, W/p, p, p)
    return x.permute(0, 2, 3, 1, 4, 5).reshape(B, (H // p) * (W // p), C * p * p)


def count_with_block_parameters(image_size, patch_size, d_model, n_layers, n_classes):  # chapter 6's helper
    from companion.block import block_parameters
    d, N = d_model, (image_size // patch_size) ** 2
    return (3 * patch_size ** 2 * d + d + d + (1 + N) * d + n_layers * block_parameters(d, 4 * d) + 2 * d
            + d * n_classes + n_classes)


def count_as_numpy(image_size, patch_size, d_model, n_layers, n_classes):
    import numpy as np
    return np.int64(my_vit_parameters(image_size, patch_size, d_model, n_layers, n_classes))


def logits_by_conv(model, images):
    p, d = model.config.patch_size, model.config.d_model
    weight = model.patch_embed.proj.weight.reshape(d, images.shape[1], p, p)
    tokens = F.conv2d(images, weight, model.patch_embed.proj.bias, stride=p).flatten(2).transpose(1, 2)
    B = images.shape[0]
    h = torch.cat([model.cls_token.expand(B, 1, d), tokens], 1)
    if model.pos_embed is not None:
        h = h + model.pos_embed
    for block in model.encoder.blocks:
        h = block(h)
    return model.head(model.encoder.norm(h[:, :1]))[:, 0]


RIGHT = [
    (check.patchify_images, my_patchify), (check.patchify_images, patchify_by_tensor_unfold),
    (check.patchify_images, patchify_by_loops),
    (check.embed_patches, my_embed_patches), (check.embed_patches, embed_by_matrix),
    (check.embed_patches, embed_by_permute),
    (check.cls_and_positions, my_tokens), (check.cls_and_positions, tokens_positions_first),
    (check.cls_and_positions, tokens_by_repeat),
    (check.vit_params, my_vit_parameters), (check.vit_params, count_as_tensor),
    (check.remove_positions, my_without_positions), (check.remove_positions, without_by_zeros),
    (check.remove_positions, without_by_new_parameter),
    (check.vit_params, count_with_block_parameters), (check.vit_params, count_as_numpy),
    (check.vit_forward, my_vit_logits), (check.vit_forward, logits_by_conv),
]


@pytest.mark.parametrize("checker,answer", RIGHT, ids=[f"{c.exercise}: {a.__name__}" for c, a in RIGHT])
def test_right_answers_pass(checker, answer):
    fb = checker(answer)
    assert fb.passed, fb


def test_every_exercise_has_at_least_eight_wrong_answers_in_the_registry():
    assert [e.checker for e in EXERCISES] == CHECKERS
    assert all(len(e.mutants) >= 8 for e in EXERCISES)


def test_checkers_leave_the_global_random_state_alone():
    state = torch.random.get_rng_state()
    for checker, answer in RIGHT:
        checker(answer)
    assert torch.equal(state, torch.random.get_rng_state())


def test_the_vit_b_count_in_the_pass_message():
    fb = check.vit_params(my_vit_parameters)
    assert "86,567,656" in fb.message
    assert math.isclose(86_567_656 / 86e6, 1, rel_tol=0.01)


def test_a_count_by_the_companion_or_as_a_float_is_told():
    # the course's own code is never an answer; a count of parameters is an int (the shared rules)
    assert "companion" in check.vit_params(count_with_companion).message
    assert "int" in check.vit_params(count_as_whole_float).message
