"""companion.encoder.Encoder against torch.nn.TransformerEncoder with the same weights."""
import pytest
import torch
from torch import nn

from companion.encoder import Encoder


def randomize(module, g):
    with torch.no_grad():  # norms start at (1, 0): random values make sure they are really compared
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("n_layers, n_heads, d_model, padded", [(1, 1, 4, False), (3, 2, 8, True), (2, 4, 12, True)])
def test_encoder_equals_torch(norm_first, n_layers, n_heads, d_model, padded):
    g = torch.Generator().manual_seed(n_layers * 10 + d_model)
    layer = nn.TransformerEncoderLayer(d_model, n_heads, 2 * d_model + 1, dropout=0.0, batch_first=True,
                                       norm_first=norm_first)
    theirs = nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False).eval()
    randomize(theirs, g)
    ours = Encoder(n_layers, d_model, n_heads, 2 * d_model + 1, norm_first=norm_first).eval()
    ours.copy_from_torch(theirs)
    x = torch.randn(3, 5, d_model, generator=g)
    lengths = torch.tensor([5, 2, 4]) if padded else torch.tensor([5, 5, 5])
    key_mask = torch.arange(5)[None, :] < lengths[:, None]  # (B, S), True = a real token
    got = ours(x, key_mask=key_mask)
    want = theirs(x, src_key_padding_mask=~key_mask)  # torch: True = padding
    torch.testing.assert_close(got[key_mask], want[key_mask], rtol=1e-5, atol=1e-5)


def test_no_final_norm_is_the_blocks_alone():
    enc = Encoder(2, 8, 2, final_norm=False).eval()
    assert enc.norm is None
    x = torch.randn(2, 3, 8)
    torch.testing.assert_close(enc(x), enc.blocks[1](enc.blocks[0](x)))


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"`n_layers` must be a positive integer \(got n_layers=0\)"):
        Encoder(0, 8, 2)
    enc = Encoder(1, 8, 2)
    with pytest.raises(ValueError, match=r"`x` must have shape \(B, S, d_model=8\)"):
        enc(torch.randn(2, 3, 6))
    with pytest.raises(TypeError, match="must be a torch.nn.TransformerEncoder"):
        enc.copy_from_torch(nn.Linear(2, 2))
    layer = nn.TransformerEncoderLayer(8, 2, 32, batch_first=True)
    with pytest.raises(ValueError, match="must have 1 layers and a final norm"):
        enc.copy_from_torch(nn.TransformerEncoder(layer, 2, enable_nested_tensor=False))
