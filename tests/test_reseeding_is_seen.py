"""A step or a function that re-seeds torch's global generator is caught even when the caller had
just seeded it with the same number (outsider o3's ``torch.manual_seed(0)`` inside 9.9's step passed:
the check compared the state before and after the call, which were equal). The checks now start the
student's call from a state that no ``torch.manual_seed(k)`` gives, and put the caller's state back."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_exercises_mlm import right_mlm_step  # noqa: E402

from companion.exercises import mlm, norm  # noqa: E402


def _reseeding(fn, seed):
    def wrapped(*args):
        torch.manual_seed(seed)
        return fn(*args)
    return wrapped


def _layer_norm_channels_first(x, weight, bias, eps):
    mean = x.mean(1, keepdim=True)
    var = ((x - mean) ** 2).mean(1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * weight[:, None] + bias[:, None]


@pytest.mark.parametrize("seed", [0, 1234])
def test_a_step_that_reseeds_is_caught_whatever_the_caller_seeded(seed):
    torch.manual_seed(seed)  # the caller's state is the one the step re-seeds to
    fb = mlm.mlm_step(_reseeding(right_mlm_step, seed))
    assert not fb.passed and "global random" in fb.message, fb


@pytest.mark.parametrize("seed", [0, 7])
def test_a_layer_norm_that_reseeds_is_caught(seed):
    torch.manual_seed(seed)
    assert norm.layer_norm_channels_first(_layer_norm_channels_first).passed
    torch.manual_seed(seed)
    fb = norm.layer_norm_channels_first(_reseeding(_layer_norm_channels_first, seed))
    assert not fb.passed and "random" in fb.message, fb


def test_a_check_leaves_the_callers_random_state_as_it_was():
    torch.manual_seed(3)
    torch.rand(5)
    before = torch.get_rng_state()
    assert mlm.mlm_step(right_mlm_step).passed
    assert torch.equal(torch.get_rng_state(), before)
    fb = mlm.mlm_step(_reseeding(right_mlm_step, 0))
    assert not fb.passed
    assert torch.equal(torch.get_rng_state(), before)  # a wrong answer's re-seed does not leak either
