"""companion.norm against torch.nn.LayerNorm / torch.nn.RMSNorm, in values and gradients."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from companion.norm import LayerNorm, RMSNorm

SETTINGS = settings(max_examples=25, deadline=None)


def _copy_params(ours, ref):
    with torch.no_grad():
        ref.weight.copy_(ours.weight)
        if getattr(ours, "bias", None) is not None:
            ref.bias.copy_(ours.bias)


@SETTINGS
@given(
    shape=st.lists(st.integers(1, 5), min_size=0, max_size=3),
    d_model=st.integers(1, 48),
    bias=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_layernorm_matches_torch_values_and_gradients(shape, d_model, bias, seed):
    g = torch.Generator().manual_seed(seed)
    ours = LayerNorm(d_model, bias=bias)
    ref = torch.nn.LayerNorm(d_model, bias=bias)
    with torch.no_grad():  # random affine parameters, so the scale and shift are really tested
        ours.weight.copy_(torch.randn(d_model, generator=g))
        if bias:
            ours.bias.copy_(torch.randn(d_model, generator=g))
    _copy_params(ours, ref)
    x = (torch.randn(*shape, d_model, generator=g, dtype=torch.float64) * 3 + 1).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    ours, ref = ours.double(), ref.double()
    y, y_ref = ours(x), ref(x_ref)
    torch.testing.assert_close(y, y_ref)
    upstream = torch.randn(y.shape, generator=g, dtype=torch.float64)
    (y * upstream).sum().backward()
    (y_ref * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
    torch.testing.assert_close(ours.weight.grad, ref.weight.grad)
    if bias:
        torch.testing.assert_close(ours.bias.grad, ref.bias.grad)


@pytest.mark.parametrize("mean,std", [(1e3, 1e-2), (1e4, 1.0), (-500.0, 1e-3), (1e4, 1e-2)])
def test_layernorm_large_mean_tiny_variance(mean, std):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 7, 32, generator=g) * std + mean
    ours, ref = LayerNorm(32), torch.nn.LayerNorm(32)
    exact = ref.double()(x.double())  # the same float32 inputs, normalized in float64
    # In float64 the two agree to rounding.
    torch.testing.assert_close(ours.double()(x.double()), exact)
    # In float32, torch's own kernel loses digits here (up to ~0.1 for mean 1e4, std 1e-2);
    # ours re-centres once and stays within 1e-5 of the exact answer, so it is never further
    # from torch than torch is from the truth.
    y = LayerNorm(32)(x)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y.double(), exact, rtol=0, atol=1e-5)
    torch_err = (torch.nn.LayerNorm(32)(x).double() - exact).abs().max()
    assert (y.double() - torch.nn.LayerNorm(32)(x).double()).abs().max() <= torch_err + 1e-5


def test_layernorm_constant_row_gives_bias_not_nan():
    ln = LayerNorm(5)
    with torch.no_grad():
        ln.bias.fill_(0.5)
    y = ln(torch.full((2, 5), 3.0))
    torch.testing.assert_close(y, torch.full((2, 5), 0.5))


def test_layernorm_seed_example_rows():
    """The worked example of chapter 4: every row of this matrix normalizes to about [-1.22, 0, 1.22]."""
    x = torch.tensor([[1.5, 3.0, 4.5], [6.0, 7.5, 9.0], [10.5, 12.0, 13.5]])
    expected = torch.tensor([-1.5, 0.0, 1.5]) / 1.5 * (1.5**0.5)  # (x - mean) / sqrt(1.5), var = 1.5
    y = LayerNorm(3, eps=0.0 + 1e-12)(x)
    torch.testing.assert_close(y, expected.expand(3, 3), rtol=0, atol=1e-5)


@SETTINGS
@given(d_model=st.integers(1, 40), seed=st.integers(0, 2**31 - 1))
def test_rmsnorm_matches_torch(d_model, seed):
    g = torch.Generator().manual_seed(seed)
    ours, ref = RMSNorm(d_model, eps=1e-6), torch.nn.RMSNorm(d_model, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(torch.randn(d_model, generator=g))
        ref.weight.copy_(ours.weight)
    x = torch.randn(3, 4, d_model, generator=g, dtype=torch.float64).requires_grad_()
    x_ref = x.detach().clone().requires_grad_()
    y, y_ref = ours.double()(x), ref.double()(x_ref)
    torch.testing.assert_close(y, y_ref)
    y.sum().backward()
    y_ref.sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)


def test_layernorm_parameters_named_as_torch():
    assert set(dict(LayerNorm(8).named_parameters())) == {"weight", "bias"}
    assert set(dict(LayerNorm(8, bias=False).named_parameters())) == {"weight"}
    sd = torch.nn.LayerNorm(8).state_dict()
    LayerNorm(8).load_state_dict(sd)  # the same names, so weights load either way


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_wrong_last_dimension_raises(cls):
    with pytest.raises(ValueError, match=r"`x` must have shape \(\.\.\., d_model=8\) \(got shape=\(2, 8, 3\)\); .*normalizes the last dimension"):
        cls(8)(torch.randn(2, 8, 3))


@pytest.mark.parametrize("cls", [LayerNorm, RMSNorm])
def test_bad_arguments_raise(cls):
    with pytest.raises(ValueError, match=r"`d_model` must be a positive integer \(got d_model=0\)"):
        cls(0)
    with pytest.raises(ValueError, match=r"`eps` must be a finite number > 0 \(got eps=0.0\)"):
        cls(4, eps=0.0)
    with pytest.raises(TypeError, match=r"`x` must be a torch.Tensor of shape \(\.\.\., d_model=3\) \(got list\)"):
        cls(3)([1.0, 2.0, 3.0])
