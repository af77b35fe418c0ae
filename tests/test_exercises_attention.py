"""The chapter 2 checkers: the right answer passes, each recognized mistake gets its hint."""
import math

import torch

from companion.exercises import attention as check


def stub(*args):
    raise NotImplementedError


def _log_softmax_right(x, dim=-1):
    m = x.amax(dim=dim, keepdim=True)
    return x - m - torch.log(torch.exp(x - m).sum(dim=dim, keepdim=True))


def test_stable_log_softmax():
    assert check.stable_log_softmax(_log_softmax_right).passed
    assert check.stable_log_softmax(stub).status == "not attempted"
    assert check.stable_log_softmax(...).status == "not attempted"
    naive = lambda x, dim=-1: x - torch.log(torch.exp(x).sum(dim, keepdim=True))
    assert "overflows" in check.stable_log_softmax(naive).message
    stable_then_log = lambda x, dim=-1: torch.log(torch.exp(_log_softmax_right(x, dim)))
    assert "log of the softmax" in check.stable_log_softmax(stable_then_log).message
    assert "calls the library's log_softmax" in check.stable_log_softmax(lambda x, dim=-1: torch.log_softmax(x, dim)).message
    assert "use the dim argument" in check.stable_log_softmax(lambda x, dim=-1: _log_softmax_right(x)).message
    global_max = lambda x, dim=-1: x - x.max() - torch.log(torch.exp(x - x.max()).sum(dim, keepdim=True))
    assert "whole tensor" in check.stable_log_softmax(global_max).message
    assert "wrong type" in check.stable_log_softmax(lambda x, dim=-1: x.tolist()).message
    no_keepdim = lambda x, dim=-1: x - x.amax(dim) - torch.log(torch.exp(x - x.amax(dim)).sum(dim))
    assert "keepdim=True" in check.stable_log_softmax(no_keepdim).message


def test_log_softmax_cases_cover_what_the_text_names():
    # The underflow case is one where the log of a (correct) softmax is -inf and the answer is not.
    cases = {label: (x, dim) for label, x, dim in check._log_softmax_cases()}
    x, _ = next(v for k, v in cases.items() if k.startswith("a probability that underflows"))
    assert x.dtype == torch.float32
    assert torch.isinf(torch.log(torch.softmax(x, -1))).any() and torch.isfinite(torch.log_softmax(x, -1)).all()
    x, _ = cases["masked scores (-inf)"]
    assert torch.isinf(x).any() and torch.isfinite(x).any(dim=-1).all()  # one finite score per row
    assert any(dim not in (None, -1) for _, dim in cases.values())
    assert {x.dim() for x, _ in cases.values()} >= {1, 2, 3}


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
    # 2.1 accepted torch.softmax, which the exercise forbids; every library (log-)softmax is noticed.
    for library in (lambda x, dim=-1: torch.log_softmax(x, dim), lambda x, dim=-1: torch.nn.functional.log_softmax(x, dim),
                    lambda x, dim=-1: x.log_softmax(dim), lambda x, dim=-1: torch.special.log_softmax(x, dim),
                    lambda x, dim=-1: x - torch.logsumexp(x, dim, keepdim=True),
                    lambda x, dim=-1: x - x.logsumexp(dim, keepdim=True),
                    lambda x, dim=-1: torch.nn.LogSoftmax(dim=dim)(x)):
        fb = check.stable_log_softmax(library)
        assert fb.status == "hint" and "write the log-softmax yourself" in fb.message, fb
    assert torch.softmax(torch.zeros(2), 0).tolist() == [0.5, 0.5]  # the originals are back
    assert "softmax" not in vars(torch.Tensor)


def test_a_scale_written_as_a_number_fits_one_width_only():
    fb = check.attention(lambda Q, K, V: torch.softmax(Q @ K.T / math.sqrt(8), -1) @ V)
    assert "not from the example's numbers" in fb.message
