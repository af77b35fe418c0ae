"""Tests for companion.validation: each helper's verdicts and messages, and the book's column.

The helpers are the one place where a kind of argument is checked; the modules' own tests and
tests/test_wrong_calls.py check that each public entry point uses them.
"""
from __future__ import annotations

import inspect
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from companion import validation as v


# ---------------------------------------------------------------- plain values
@pytest.mark.parametrize("value, kwargs, kind, message", [
    (2.0, {}, TypeError, r"`n` must be an integer \(got n=2.0, a float\)"),
    (True, {"minimum": 0}, TypeError, r"`n` must be a non-negative integer \(got n=True, a bool\)"),
    ("3", {"minimum": 1}, TypeError, r"`n` must be a positive integer \(got n='3', a str\)"),
    (0, {"minimum": 1}, ValueError, r"`n` must be a positive integer \(got n=0\)"),
    (-1, {"minimum": 0}, ValueError, r"`n` must be a non-negative integer \(got n=-1\)"),
    (1, {"minimum": 2}, ValueError, r"`n` must be an integer >= 2 \(got n=1\)"),
    (5, {"minimum": 0, "maximum": 4}, ValueError, r"`n` must be an integer in \[0, 4\] \(got n=5\)"),
    (5, {"maximum": 4, "hint": "it counts heads"}, ValueError, r"`n` must be an integer <= 4 \(got n=5\); it counts heads"),
])
def test_check_int_refuses(value, kwargs, kind, message):
    with pytest.raises(kind, match=message):
        v.check_int("n", value, **kwargs)


def test_check_int_accepts_and_returns_plain_ints():
    assert v.check_int("n", np.int64(3), minimum=1) == 3 and type(v.check_int("n", np.int64(3))) is int
    assert v.check_int("n", 0, minimum=0, maximum=0) == 0


@pytest.mark.parametrize("value, kwargs, kind, message", [
    (math.nan, {}, ValueError, r"`x` must be a finite number \(got x=nan\)"),
    (math.inf, {}, ValueError, r"`x` must be a finite number \(got x=inf\)"),
    (math.nan, {"finite": False}, ValueError, r"`x` must be a number \(not NaN\) \(got x=nan\)"),
    (0, {"low": 0.0, "low_open": True}, ValueError, r"`x` must be a finite number > 0 \(got x=0\)"),
    (1.0, {"low": 0.0, "high": 1.0, "high_open": True}, ValueError, r"`x` must be a number in \[0, 1\) \(got x=1.0\)"),
    (0.0, {"low": 0.0, "high": 1.0, "low_open": True}, ValueError, r"`x` must be a number in \(0, 1\] \(got x=0.0\)"),
    (2, {"high": 1.0}, ValueError, r"`x` must be a finite number <= 1 \(got x=2\)"),
    (False, {}, TypeError, r"`x` must be a finite number \(got x=False, a bool\)"),
    (torch.tensor(1.0), {}, TypeError, r"`x` must be a finite number \(got x=tensor\(1.\), a Tensor\)"),
])
def test_check_float_refuses(value, kwargs, kind, message):
    with pytest.raises(kind, match=message):
        v.check_float("x", value, **kwargs)


def test_check_float_accepts():
    assert v.check_float("x", 1) == 1.0 and v.check_float("x", np.float32(0.5), low=0, high=1) == 0.5
    assert v.check_float("x", math.inf, low=0.0, finite=False) == math.inf


def test_flags_choices_instances_generators_paths_dtypes():
    assert v.check_bool("f", False) is False
    with pytest.raises(TypeError, match=r"`f` must be True or False \(got f=1, an int\)"):
        v.check_bool("f", 1)
    with pytest.raises(ValueError, match=r"`a` must be one of \['x', 'y'\] \(got a=\[1\]\)"):
        v.check_choice("a", [1], ["x", "y"])  # unhashable: no crash
    with pytest.raises(TypeError, match=r"`m` must be a module \(got int\); build one first"):
        v.check_instance("m", 3, torch.nn.Module, "a module", hint="build one first")
    assert v.check_generator("g", None) is None
    with pytest.raises(TypeError, match=r"pass g=torch.Generator\(\).manual_seed\(s\)"):
        v.check_generator("g", 0)
    assert v.check_path("p", "a/b.txt") == Path("a/b.txt")
    with pytest.raises(TypeError, match=r"`p` must be a str or pathlib.Path \(got bytes\)"):
        v.check_path("p", b"a")
    with pytest.raises(ValueError, match=r"`p` must name a file \(got p='  '\)"):
        v.check_path("p", "  ")
    assert v.check_float_dtype("d", torch.float16) is torch.float16
    with pytest.raises(ValueError, match=r"`d` must be a floating-point dtype"):
        v.check_float_dtype("d", torch.int8)


def test_long_values_are_shortened_in_messages():
    with pytest.raises(TypeError) as info:
        v.check_int("n", "x" * 1000)
    assert len(str(info.value)) < 150


# ---------------------------------------------------------------- tensors
def test_check_tensor_shapes_dtypes_and_emptiness():
    x = torch.zeros(2, 3, 4)
    assert v.check_tensor("x", x, shape=("B", "T", ("d", 4)), dtype="float") is x
    assert v.check_tensor("x", x, shape=("...", ("d", 4))) is x
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, T, d=5\) \(got shape=\(2, 3, 4\)\); a hint"):
        v.check_tensor("x", x, shape=("B", "T", ("d", 5)), hint="a hint")
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, T\) \(got shape=\(2, 3, 4\)\)"):
        v.check_tensor("x", x, shape=("B", "T"))
    with pytest.raises(ValueError, match=r"`x` must have shape \(n,\) \(got shape=\(2, 3, 4\)\)"):
        v.check_tensor("x", x, shape=("n",))
    with pytest.raises(ValueError, match=r"`x` must not be empty: shape \(B, T\) needs T >= 1 \(got shape=\(2, 0\)\)"):
        v.check_tensor("x", torch.zeros(2, 0), shape=("B", "T"))
    v.check_tensor("x", torch.zeros(2, 0), shape=("B", "T"), nonempty=False)
    v.check_tensor("x", torch.zeros(0, 4), shape=("...", ("d", 4)))  # leading "..." dims may be empty
    for dtype, bad in [("float", torch.long), ("int", torch.float32), ("int", torch.bool), ("bool", torch.uint8),
                       ("real", torch.bool), ("real", torch.complex64)]:
        with pytest.raises(TypeError, match=rf"`x` must be .* \(got dtype={bad}\)"):
            v.check_tensor("x", torch.zeros(2, dtype=bad), dtype=dtype)
    with pytest.raises(TypeError, match=r"`x` must be a torch.Tensor of shape \(B, T\) \(got ndarray\)"):
        v.check_tensor("x", np.zeros((2, 3)), shape=("B", "T"))


def test_check_vectors_compares_device_and_dtype_with_the_weights():
    w = torch.zeros(4, 4)
    assert v.check_vectors("x", torch.zeros(2, 3, 4), 4, like=w) == (2, 3, 4)
    with pytest.raises(TypeError, match=r"`x` has dtype torch.float64 but the module's weights have torch.float32"):
        v.check_vectors("x", torch.zeros(2, 3, 4, dtype=torch.float64), 4, like=w)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast mixes dtypes on purpose
        v.check_vectors("x", torch.zeros(2, 3, 4, dtype=torch.bfloat16), 4, like=w)
    with pytest.raises(ValueError, match=r"`x` is on meta but the module's weights are on cpu"):
        v.check_vectors("x", torch.zeros(2, 3, 4, device="meta"), 4, like=w)


def test_token_ids_and_indices():
    ids = torch.tensor([[0, 3], [2, 1]])
    assert v.check_token_ids("ids", ids, 4) is ids
    with pytest.raises(ValueError, match=r"`ids` must hold token ids in \[0, 3\) \(got 3 at position \(0, 1\)\)"):
        v.check_token_ids("ids", ids, 3)
    v.check_token_ids("t", torch.tensor([-100, 2]), 3, ignore_index=-100)
    with pytest.raises(ValueError, match=r"`t` must hold token ids in \[0, 3\) or -100 \(got -99 at position 1\)"):
        v.check_token_ids("t", torch.tensor([-100, -99]), 3, ignore_index=-100)
    with pytest.raises(TypeError, match=r"`t` must hold token ids of dtype torch.int64 \(got dtype=torch.int32\)"):
        v.check_token_ids("t", ids.int(), 4, long_only=True)
    v.check_token_ids("ids", ids.int(), 4)
    v.check_token_ids("ids", torch.zeros(0, dtype=torch.long), 4)
    v.check_token_ids("ids", torch.full((2, 3), 7, device="meta"), 4)  # no values to check: nothing read back
    assert v.check_index("i", torch.tensor([1, 1, 0]), 2).tolist() == [1, 1, 0]
    with pytest.raises(ValueError, match=r"`i` must hold row indices in \[0, 2\) \(got -1 at position 1\)"):
        v.check_index("i", torch.tensor([0, -1]), 2)


def test_check_logits():
    ok = torch.tensor([[0.0, -math.inf], [1.0, 2.0]])
    assert v.check_logits("z", ok) is ok
    with pytest.raises(ValueError, match=r"`z` must not hold NaN \(got NaN at position \(1, 0\)\)"):
        v.check_logits("z", torch.tensor([[0.0, 1.0], [math.nan, 1.0]]))
    with pytest.raises(ValueError, match=r"the model's logits must not hold \+inf"):
        v.check_logits("z", torch.tensor([math.inf, 1.0]), what="the model's logits")
    with pytest.raises(ValueError, match=r"every entry of row \(1,\) is -inf; retry"):
        v.check_logits("z", torch.tensor([[0.0, 1.0], [-math.inf, -math.inf]]), hint="retry")
    v.check_logits("z", torch.full((2, 3), math.nan, device="meta"))


def test_as_token_ids_never_rounds_or_flattens():
    assert v.as_token_ids("p", [1, 2]).dtype == torch.long
    assert v.as_token_ids("p", np.array([[1, 2]], dtype=np.int32)).dtype == torch.long
    assert v.as_token_ids("p", [], ndims=(1,), empty_ok=True).shape == (0,)
    with pytest.raises(TypeError, match=r"`p` must hold integer token ids \(got dtype=torch.float32\)"):
        v.as_token_ids("p", [1.7, 2.2])
    with pytest.raises(TypeError, match=r"`p` must hold integer token ids \(got dtype=torch.bool\)"):
        v.as_token_ids("p", [True])
    with pytest.raises(ValueError, match=r"`p` must have shape \(T,\) \(got shape=\(1, 2\)\)"):
        v.as_token_ids("p", [[1, 2]], ndims=(1,))
    with pytest.raises(ValueError, match=r"`p` must hold at least one token"):
        v.as_token_ids("p", [])
    with pytest.raises(TypeError, match=r"`p` must be a sequence of integer token ids"):
        v.as_token_ids("p", [[1, 2], [3]])
    with pytest.raises(TypeError, match=r"`p` must be token ids, not text"):
        v.as_token_ids("p", "abc")


# ---------------------------------------------------------------- the book's column
def _book_printed():
    from companion import attention, block, decoding, model, norm, positional

    return [attention.SelfAttention.forward, norm.LayerNorm.forward, positional.sinusoidal_encoding,
            block.FeedForward.forward, block.TransformerBlock.forward, model.GPT.forward, model.GPTConfig,
            decoding.filter_logits]


@pytest.mark.parametrize("obj", _book_printed(), ids=lambda o: o.__qualname__)
def test_sources_the_book_prints_fit_its_column(obj):
    """The chapters print these with inspect.getsource, in a column of 78 characters."""
    long = [line for line in inspect.getsource(obj).splitlines() if len(line) > 78]
    assert not long, f"{obj.__qualname__} has lines over 78 characters: {long}"
