"""The chapter 2 checkers: the right answer passes, each recognized mistake gets its hint."""
import math

import torch

from companion.exercises import attention as check


def stub(*args):
    raise NotImplementedError


def test_stable_softmax():
    right = lambda x: torch.exp(x - x.amax(-1, keepdim=True)) / torch.exp(x - x.amax(-1, keepdim=True)).sum(-1, keepdim=True)
    assert check.stable_softmax(right).passed
    assert check.stable_softmax(stub).status == "not attempted"
    assert check.stable_softmax(...).status == "not attempted"
    naive = lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True)
    assert "overflows" in check.stable_softmax(naive).message
    by_column = lambda x: torch.exp(x - x.amax(0, keepdim=True)) / torch.exp(x - x.amax(0, keepdim=True)).sum(0, keepdim=True)
    assert "columns sum to 1" in check.stable_softmax(by_column).message
    assert "calls the library's softmax" in check.stable_softmax(lambda x: torch.softmax(x, dim=-1)).message
    assert "did not normalize" in check.stable_softmax(lambda x: torch.exp(x - x.amax(-1, keepdim=True))).message
    whole = lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum()
    assert "whole matrix" in check.stable_softmax(whole).message
    global_max = lambda x: torch.exp(x - x.max()) / torch.exp(x - x.max()).sum(-1, keepdim=True)
    assert "own maximum" in check.stable_softmax(global_max).message
    assert "return a tensor" in check.stable_softmax(lambda x: x.tolist()).message
    no_keepdim = lambda x: torch.exp(x - x.amax(-1)) / torch.exp(x - x.amax(-1)).sum(-1)
    assert "keepdim=True" in check.stable_softmax(no_keepdim).message


def test_attention():
    right = lambda Q, K, V: torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), -1) @ V
    assert check.attention(right).passed
    assert check.attention(lambda Q, K, V: torch.softmax(Q @ K.mT / Q.shape[-1] ** 0.5, dim=-1) @ V).passed
    assert check.attention(stub).status == "not attempted"
    assert "forgot the scale" in check.attention(lambda Q, K, V: torch.softmax(Q @ K.T, -1) @ V).message
    assert "square root" in check.attention(lambda Q, K, V: torch.softmax(Q @ K.T / Q.shape[-1], -1) @ V).message
    wrong_axis = lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), 0) @ V
    assert "wrong axis" in check.attention(wrong_axis).message
    weights_only = lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), -1)
    assert "multiply them by V" in check.attention(weights_only).message
    by_d_v = lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(V.shape[-1]), -1) @ V
    assert "sqrt(d_v)" in check.attention(by_d_v).message
    # the bugs of the chapter's buggy_attention, one at a time: each shows only on a batch
    two_d_only = lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(Q.shape[-1]), -1) @ V
    assert "K.T reverses every axis" in check.attention(two_d_only).message
    dim_one = lambda Q, K, V: torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), 1) @ V
    assert "dim=1" in check.attention(dim_one).message
    crash = check.attention(lambda Q, K, V: Q @ K @ V)
    assert crash.status == "hint" and "RuntimeError" in crash.message


def test_causal():
    right = lambda T, S=None: torch.ones(T, S or T, dtype=torch.bool).tril((S or T) - T)
    assert check.causal(right).passed
    assert check.causal(stub).status == "not attempted"
    assert "aligned top-left" in check.causal(lambda T, S=None: torch.ones(T, S or T, dtype=torch.bool).tril()).message
    assert "inverted" in check.causal(lambda T, S=None: ~right(T, S)).message
    additive = lambda T, S=None: torch.zeros(T, S or T).masked_fill(~right(T, S), float("-inf"))
    assert "additive float mask" in check.causal(additive).message
    assert "boolean" in check.causal(lambda T, S=None: right(T, S).float()).message
    assert "you returned str" in check.causal(lambda T: "✅ passed").message  # the grader's cheater


def test_padding():
    right = lambda l, S: (torch.arange(S)[None, None, :] < l[:, None, None]) & torch.ones(S, S, dtype=torch.bool).tril()
    assert check.padding(right).passed
    assert check.padding(stub).status == "not attempted"
    assert "inverted" in check.padding(lambda l, S: ~right(l, S)).message
    assert "key padding mask alone" in check.padding(lambda l, S: torch.arange(S)[None, :] < l[:, None]).message
    assert "boolean" in check.padding(lambda l, S: right(l, S).float()).message
    assert check.padding(lambda l, S: torch.ones(len(l), S, dtype=torch.bool)).status == "hint"


def test_issue_10_cases():
    # 2.2 crashed inside its own code on an unrecognized wrong answer of the right shape.
    odd = check.attention(lambda Q, K, V: torch.softmax(Q @ K.mT / math.sqrt(Q.shape[-1]), -1) @ V + 0.1)
    assert odd.status == "hint" and odd.kind == "generic" and "is " in odd.message
    # 2.1 accepted torch.softmax, which the exercise forbids; every library softmax is noticed.
    for library in (lambda x: torch.softmax(x, -1), lambda x: torch.nn.functional.softmax(x, -1),
                    lambda x: x.softmax(-1), lambda x: torch.special.softmax(x, -1),
                    lambda x: torch.log_softmax(x, -1).exp(), lambda x: torch.nn.Softmax(dim=-1)(x)):
        fb = check.stable_softmax(library)
        assert fb.status == "hint" and "write the softmax yourself" in fb.message, fb
    assert torch.softmax(torch.zeros(2), 0).tolist() == [0.5, 0.5]  # the originals are back
    assert "softmax" not in vars(torch.Tensor)


def test_a_scale_written_as_a_number_fits_one_width_only():
    fb = check.attention(lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(8), -1) @ V)
    assert "not from the example's numbers" in fb.message
