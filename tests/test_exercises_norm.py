"""The chapter 4 checkers: the book's answers pass, each classic mistake gets its own hint naming
the class of input that showed it (the full registry is tests/test_checker_mutations_ch04.py)."""
import torch

from companion.exercises import norm as check
from test_checker_mutations_ch04 import my_layer_norm_channels_first, my_masked_batch_norm, my_rms_norm_half


def test_book_answers_pass_and_repeat():
    for _ in range(2):  # fresh draws each time
        assert check.layer_norm_channels_first(my_layer_norm_channels_first).passed
        assert check.masked_batch_norm(my_masked_batch_norm).passed
        assert check.rms_norm_half(my_rms_norm_half).passed


def test_hints_name_the_class_of_input():
    fb = check.layer_norm_channels_first(
        lambda x, w, b, eps: (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps)
        * w[:, None] + b[:, None])
    assert fb.status == "hint" and "features are axis 1" in fb.message and fb.message.count("on ") >= 1
    fb = check.masked_batch_norm(lambda x, m, eps: (x - x.mean((0, 1))) / torch.sqrt(
        x.var((0, 1), unbiased=False) + eps) * m[..., None])
    assert fb.status == "hint" and "real tokens only" in fb.message and "padded batch" in fb.message
    fb = check.rms_norm_half(lambda x, w, eps: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w)
    assert fb.status == "hint" and "overflow" in fb.message and "near 300" in fb.message


def test_a_branch_left_unwritten_is_not_reported_as_not_attempted():
    def half_done(x, mask, eps):
        if not mask.all():
            raise NotImplementedError
        return my_masked_batch_norm(x, mask, eps)

    fb = check.masked_batch_norm(half_done)
    assert fb.status == "hint" and "NotImplementedError" in fb.message


def test_the_checks_leave_torch_state_alone():
    rng, grad = torch.get_rng_state(), torch.is_grad_enabled()
    check.layer_norm_channels_first(my_layer_norm_channels_first)
    check.masked_batch_norm(my_masked_batch_norm)
    assert torch.equal(rng, torch.get_rng_state()) and torch.is_grad_enabled() == grad
