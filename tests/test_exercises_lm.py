"""Tests for the chapter 7 checkers: right answers pass, each recognized mistake gets its hint,
untouched stubs are "not attempted"."""
import math

import torch
import torch.nn.functional as F

from companion.exercises import lm as check


def stub(*args):
    raise NotImplementedError


def test_cross_entropy():
    good = lambda logits, t: -logits.log_softmax(-1).gather(-1, t[..., None]).mean()
    assert check.cross_entropy(good).passed
    library = check.cross_entropy(lambda l, t: F.cross_entropy(l.flatten(0, 1), t.flatten()))
    assert library.status == "hint" and "calls F.cross_entropy" in library.message
    naive = lambda l, t: -torch.log(l.softmax(-1).gather(-1, t[..., None])).mean()
    naive_by_exp = lambda l, t: -torch.log(torch.exp(l) / torch.exp(l).sum(-1, keepdim=True)).gather(-1, t[..., None]).mean()
    assert "log_softmax" in check.cross_entropy(naive_by_exp).message
    cases = {
        "sign is wrong": lambda l, t: -good(l, t),
        "summed over the positions": lambda l, t: -l.log_softmax(-1).gather(-1, t[..., None]).sum(),
        "probability of the target, not its logarithm": lambda l, t: -l.softmax(-1).gather(-1, t[..., None]).mean(),
        "raw logit": lambda l, t: -l.gather(-1, t[..., None]).mean(),
        "over the vocabulary": lambda l, t: -l.log_softmax(1).gather(-1, t[..., None]).mean(),
        "one loss per position": lambda l, t: -l.log_softmax(-1).gather(-1, t[..., None])[..., 0],
    }
    for text, fn in cases.items():
        fb = check.cross_entropy(fn)
        assert fb.status == "hint" and text in fb.message, (text, fb)
    assert check.cross_entropy(stub).status == "not attempted"
    assert check.cross_entropy(...).status == "not attempted"
    del naive


def test_shift():
    assert check.shift(lambda w: (w[:, :-1], w[:, 1:])).passed
    cases = {
        "swapped": lambda w: (w[:, 1:], w[:, :-1]),
        "are the same": lambda w: (w[:, :-1], w[:, :-1]),
        "ONE shorter": lambda w: (w, w),
        "return a pair": lambda w: w,
    }
    for text, fn in cases.items():
        fb = check.shift(fn)
        assert fb.status == "hint" and text in fb.message, (text, fb)
    assert check.shift(stub).status == "not attempted"


def test_bits_per_char():
    assert check.bits_per_char(lambda n: n / math.log(2)).passed
    cases = {
        "multiplied by ln 2": lambda n: n * math.log(2),
        "log2(loss)": lambda n: math.log2(n),
        "perplexity": lambda n: math.exp(n),
        "ln 10": lambda n: n / math.log(10),
        "in nats, unchanged": lambda n: n,
    }
    for text, fn in cases.items():
        fb = check.bits_per_char(fn)
        assert fb.status == "hint" and text in fb.message, (text, fb)
    assert check.bits_per_char(stub).status == "not attempted"
    assert "1 line" not in str(check.bits_per_char(lambda n: n / math.log(2)))
