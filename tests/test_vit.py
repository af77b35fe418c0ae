"""companion.vit: patches, the patch embedding as a linear map and as a strided convolution,
2-D positions, the model checked against Hugging Face's ViT (float64, weights copied in), the
parameter count against Hugging Face's models of ViT-B/16, L/16 and H/14, the digits splits and
the training loop."""
import copy
import math

import pytest
import torch
from torch import nn

from companion.block import EncoderBlock
from companion.encoder import Encoder
from companion.positional import sinusoidal_encoding
from companion.vit import (
    DigitsCNN,
    DigitsMLP,
    PatchEmbedding,
    VisionTransformer,
    ViTConfig,
    accuracy,
    digits_splits,
    patchify,
    predict,
    sincos_2d_encoding,
    train_classifier,
    unpatchify,
    vit_parameters,
)

transformers = pytest.importorskip("transformers")


# --------------------------------------------------------------------------- patches
def brute_patchify(images, p):
    """Patch by patch, pixel by pixel: the definition, with loops."""
    B, C, H, W = images.shape
    rows = []
    for b in range(B):
        patches = []
        for r in range(H // p):
            for c in range(W // p):
                patches.append([images[b, ch, r * p + i, c * p + j].item()
                                for ch in range(C) for i in range(p) for j in range(p)])
        rows.append(patches)
    return torch.tensor(rows, dtype=images.dtype)


@pytest.mark.parametrize("shape,p", [((2, 1, 8, 8), 2), ((2, 1, 8, 8), 4), ((1, 3, 6, 4), 2), ((2, 2, 3, 6), 3),
                                     ((1, 1, 5, 5), 1), ((1, 3, 4, 4), 4)])
def test_patchify_equals_the_loops_and_unpatchify_inverts_it(shape, p):
    images = torch.randn(*shape, dtype=torch.float64)
    patches = patchify(images, p)
    B, C, H, W = shape
    assert patches.shape == (B, (H // p) * (W // p), C * p * p)
    assert torch.equal(patches, brute_patchify(images, p))
    if H == W:
        assert torch.equal(unpatchify(patches, p, H, C), images)
    assert torch.equal(unpatchify(patches, p, (H, W), C), images)


def test_patch_of_a_digit_by_hand():
    image = torch.arange(64.0).reshape(1, 1, 8, 8)
    patches = patchify(image, 4)  # 4 patches of 16 pixels
    assert patches[0, 0, :4].tolist() == [0, 1, 2, 3] and patches[0, 0, 4:8].tolist() == [8, 9, 10, 11]
    assert patches[0, 1, 0] == 4 and patches[0, 2, 0] == 32 and patches[0, 3, -1] == 63


@pytest.mark.parametrize("call,error,match", [
    (lambda: patchify(torch.zeros(1, 1, 8, 8), 3), ValueError, r"multiples of patch_size=3"),
    (lambda: patchify(torch.zeros(8, 8), 2), ValueError, r"`images` must have shape \(B, C, H, W\).*image\[None, None\]"),
    (lambda: patchify(torch.zeros(1, 1, 8, 8, dtype=torch.long), 2), TypeError, r"`images` must be a floating"),
    (lambda: patchify([[0.0]], 2), TypeError, r"`images` must be a torch.Tensor"),
    (lambda: patchify(torch.zeros(1, 1, 8, 8), 0), ValueError, r"`patch_size` must be"),
    (lambda: patchify(torch.zeros(1, 1, 8, 8), 2.0), TypeError, r"`patch_size` must be"),
    (lambda: unpatchify(torch.zeros(1, 15, 4), 2, 8), ValueError, r"`patches` must have shape"),
    (lambda: unpatchify(torch.zeros(1, 16, 4), 3, 8), ValueError, r"multiple of patch_size=3"),
    (lambda: unpatchify(torch.zeros(1, 16, 4), 2, (8, 8, 8)), ValueError, r"`image_size` must be an int or a pair"),
])
def test_patch_errors_name_the_argument(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("C,p,d,H,W", [(1, 2, 16, 8, 8), (3, 4, 10, 8, 12), (2, 1, 5, 3, 3), (3, 16, 8, 32, 32)])
def test_linear_patch_embedding_equals_a_strided_convolution(C, p, d, H, W):
    torch.manual_seed(0)
    embed = PatchEmbedding(p, d, C).double()
    images = torch.randn(2, C, H, W, dtype=torch.float64)
    conv = embed.to_conv()
    assert (conv.kernel_size, conv.stride, conv.padding) == ((p, p), (p, p), (0, 0))
    by_conv = conv(images).flatten(2).transpose(1, 2)  # (B, d, H/p, W/p) -> (B, N, d)
    torch.testing.assert_close(embed(images), by_conv, rtol=1e-12, atol=1e-12)
    # and the other way: an independent Conv2d read into a fresh module
    other = nn.Conv2d(C, d, p, stride=p).double()
    fresh = PatchEmbedding(p, d, C).double().copy_from_conv(other)
    torch.testing.assert_close(fresh(images), other(images).flatten(2).transpose(1, 2), rtol=1e-12, atol=1e-12)


def test_patch_embedding_errors():
    embed = PatchEmbedding(2, 8, 1)
    with pytest.raises(ValueError, match=r"n_channels=1 channels"):
        embed(torch.zeros(1, 3, 8, 8))
    with pytest.raises(TypeError, match=r"`conv` must be a torch.nn.Conv2d"):
        embed.copy_from_conv(nn.Linear(4, 8))
    with pytest.raises(ValueError, match=r"`conv` must be Conv2d\(1, 8, kernel_size=2, stride=2"):
        embed.copy_from_conv(nn.Conv2d(1, 8, 2, stride=1))


# --------------------------------------------------------------------------- 2-D positions
def test_sincos_2d_is_chapter_5s_table_for_row_and_column():
    table = sincos_2d_encoding(3, 4, 16, dtype=torch.float64)
    rows, cols = sinusoidal_encoding(3, 8, dtype=torch.float64), sinusoidal_encoding(4, 8, dtype=torch.float64)
    assert table.shape == (12, 16)
    for r in range(3):
        for c in range(4):
            torch.testing.assert_close(table[r * 4 + c], torch.cat([rows[r], cols[c]]))
    # same row: first half equal; same column: second half equal; all positions distinct
    assert torch.equal(table[0, :8], table[3, :8]) and torch.equal(table[1, 8:], table[5, 8:])
    assert torch.cdist(table, table).add(torch.eye(12)).min() > 0.1
    with pytest.raises(ValueError, match=r"`d_model` must be a multiple of 4"):
        sincos_2d_encoding(2, 2, 6)


# --------------------------------------------------------------------------- the model
def small(**overrides):
    torch.manual_seed(0)
    cfg = dict(image_size=8, patch_size=2, d_model=16, n_layers=2, n_heads=2, d_ff=32)
    cfg.update(overrides)
    return VisionTransformer(ViTConfig(**cfg)).double().eval()


def test_model_reuses_chapter_6s_encoder_blocks():
    model = small()
    assert type(model.encoder) is Encoder and all(type(b) is EncoderBlock for b in model.encoder.blocks)
    assert all(b.norm_first and b.ff.activation == "gelu" for b in model.encoder.blocks)
    assert model.encoder.norm is not None
    images = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    assert model(images).shape == (3, 10)
    assert model.embed(images).shape == (3, 17, 16)
    # by hand: [CLS] first, positions added, the encoder, the head on row 0
    tokens = torch.cat([model.cls_token.expand(3, 1, 16), model.patch_embed(images)], 1) + model.pos_embed
    torch.testing.assert_close(model.embed(images), tokens)
    torch.testing.assert_close(model(images), model.head(model.encoder(tokens)[:, 0]))
    states = model.hidden_states(images)
    assert len(states) == 3
    torch.testing.assert_close(model.encoder.norm(states[-1]), model.features(images))


def shuffle_patches(images, p, perm):
    patches = patchify(images, p)[:, perm]
    return unpatchify(patches, p, images.shape[-1], images.shape[1])


def test_without_positions_the_model_cannot_see_where_a_patch_is():
    images = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(1))
    shuffled = shuffle_patches(images, 2, perm)
    blind = small(positions="none")
    torch.testing.assert_close(blind(shuffled), blind(images), rtol=1e-10, atol=1e-10)
    for positions in ("learned", "sincos"):
        model = small(positions=positions)
        with torch.no_grad():
            if positions == "learned":
                model.pos_embed.normal_()
        assert (model(shuffled) - model(images)).abs().max() > 1e-3, positions


def test_sincos_positions_are_a_buffer_not_parameters():
    model = small(positions="sincos")
    assert "pos_embed" not in dict(model.named_parameters())
    assert torch.equal(model.pos_embed[0, 0], torch.zeros(16))
    torch.testing.assert_close(model.pos_embed[0, 1:], sincos_2d_encoding(4, 4, 16, dtype=torch.float64))
    assert small(positions="learned").num_parameters() - model.num_parameters() == 17 * 16


def test_attention_maps_are_the_blocks_weights():
    model = small()
    images = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    maps = model.attention_maps(images)
    assert maps.shape == (2, 2, 2, 17, 17)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, 2, 17, dtype=torch.float64))
    # block 0 by hand: softmax(q k^T / sqrt(d_head)) on the normalized tokens
    block = model.encoder.blocks[0]
    x = block.norm1(model.embed(images))
    q = block.attn.q_proj(x).view(2, 17, 2, 8).transpose(1, 2)
    k = block.attn.k_proj(x).view(2, 17, 2, 8).transpose(1, 2)
    torch.testing.assert_close(maps[0], torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), -1))


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(image_size=8, patch_size=3), ValueError, r"`image_size` must be a multiple of `patch_size`"),
    (dict(d_model=30, n_heads=4), ValueError, r"`d_model` must be divisible by `n_heads`"),
    (dict(positions="rope"), ValueError, r"`positions` must be one of"),
    (dict(positions="sincos", d_model=18, n_heads=2), ValueError, r"multiple of 4 for positions='sincos'"),
    (dict(n_layers=0), ValueError, r"`n_layers` must be"),
    (dict(dropout=1.0), ValueError, r"`dropout` must be"),
    (dict(d_model=16.0), TypeError, r"`d_model` must be"),
])
def test_config_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        ViTConfig(**kwargs)


def test_model_input_errors():
    model = small()
    with pytest.raises(ValueError, match=r"must have shape \(B, 1, 8, 8\) for this model"):
        model(torch.zeros(1, 1, 12, 12, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"the model's dtype torch.float64"):
        model(torch.zeros(1, 1, 8, 8))
    with pytest.raises(TypeError, match=r"`config` must be a companion.vit.ViTConfig"):
        VisionTransformer({"d_model": 8})
    with pytest.raises(TypeError, match=r"either a ViTConfig or keyword arguments"):
        VisionTransformer(ViTConfig(), d_model=8)


# --------------------------------------------------------------------------- Hugging Face
CONFIGS = [
    dict(image_size=8, patch_size=2, num_channels=1, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
         intermediate_size=64, num_labels=10),
    dict(image_size=12, patch_size=4, num_channels=3, hidden_size=48, num_hidden_layers=3, num_attention_heads=6,
         intermediate_size=100, num_labels=7),
    dict(image_size=16, patch_size=8, num_channels=3, hidden_size=24, num_hidden_layers=1, num_attention_heads=2,
         intermediate_size=96, num_labels=3, layer_norm_eps=1e-6),
    dict(image_size=8, patch_size=1, num_channels=2, hidden_size=16, num_hidden_layers=2, num_attention_heads=1,
         intermediate_size=16, num_labels=2),
]


def hf_classifier(config, attn="eager", seed=0):
    from transformers import ViTConfig as HFConfig, ViTForImageClassification

    torch.manual_seed(seed)
    hf = ViTForImageClassification(HFConfig(**config, attn_implementation=attn)).double().eval()
    with torch.no_grad():  # off the initial values (zero biases, unit norms), so that every weight matters
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    return hf


# Hugging Face's eager attention computes the softmax in float32 even for a float64 model
# (softmax(..., dtype=torch.float32)), so it agrees with ours to float32 rounding (measured: about
# 6e-8); its SDPA path stays in float64 and agrees to about 1e-15.
TOLERANCE = {"eager": dict(rtol=1e-6, atol=1e-6), "sdpa": dict(rtol=1e-12, atol=1e-12)}


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("config", CONFIGS, ids=[f"{c['image_size']}px-p{c['patch_size']}-d{c['hidden_size']}"
                                                 for c in CONFIGS])
def test_equal_to_hugging_face_vit_for_image_classification(config, attn):
    hf = hf_classifier(config, attn)
    ours = VisionTransformer.from_hf(hf).eval()
    assert ours.config.eps == hf.config.layer_norm_eps and ours.num_parameters() == hf.num_parameters()
    images = torch.randn(3, config["num_channels"], config["image_size"], config["image_size"], dtype=torch.float64)
    with torch.no_grad():
        out = hf(images, output_hidden_states=True)
        torch.testing.assert_close(ours(images), out.logits, **TOLERANCE[attn])
        states = ours.hidden_states(images)
        assert len(states) == len(out.hidden_states) == config["num_hidden_layers"] + 1
        for mine, theirs in zip(states, out.hidden_states):
            torch.testing.assert_close(mine, theirs, **TOLERANCE[attn])
    # a wrong weight is noticed: the comparison is not vacuous
    with torch.no_grad():
        ours.encoder.blocks[-1].ff.linear2.bias[0] += 1e-3
        assert not torch.allclose(ours(images), out.logits, **TOLERANCE[attn])


def test_equal_to_hugging_face_vit_model_last_hidden_state():
    from transformers import ViTConfig as HFConfig, ViTModel

    config = CONFIGS[1]
    torch.manual_seed(3)
    hf = ViTModel(HFConfig(**{k: v for k, v in config.items() if k != "num_labels"},
                           attn_implementation="eager")).double().eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    ours = VisionTransformer.from_hf(hf).eval()
    images = torch.randn(2, 3, 12, 12, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ours.features(images), hf(images).last_hidden_state, **TOLERANCE["eager"])
    # the pooler (d x d + d) is the only part left out
    d = config["hidden_size"]
    assert hf.num_parameters() - (ours.num_parameters() - ours.head.weight.numel() - 1) == d * d + d


def test_from_hf_errors():
    with pytest.raises(TypeError, match=r"`hf_model` must be a transformers ViTModel"):
        VisionTransformer.from_hf(nn.Linear(2, 2))
    hf = hf_classifier(CONFIGS[0])
    blind = VisionTransformer(ViTConfig(patch_size=2, d_model=32, n_heads=4, n_layers=2, d_ff=64,
                                        positions="none")).double()
    with pytest.raises(ValueError, match=r"build this model with positions='learned'"):
        blind.copy_from_hf(hf)
    other = VisionTransformer(ViTConfig(patch_size=2, d_model=32, n_heads=4, n_layers=3, d_ff=64)).double()
    with pytest.raises(ValueError, match=r"`hf_model` computes another function than this model; 2 settings differ: "
                                         r"num_hidden_layers: Hugging Face 2, this model n_layers=3; layer_norm_eps: "
                                         r"Hugging Face 1e-12, this model eps=1e-05"):
        other.copy_from_hf(hf)


# --------------------------------------------------------------------------- parameter counts
@pytest.mark.parametrize("cfg", [dict(image_size=8, patch_size=2, d_model=64, n_layers=4, n_heads=4, d_ff=128),
                                 dict(image_size=8, patch_size=4, d_model=32, n_layers=2, n_heads=2),
                                 dict(image_size=12, patch_size=3, d_model=24, n_layers=1, n_heads=3, n_channels=3,
                                      n_classes=5)])
@pytest.mark.parametrize("positions", ["learned", "sincos", "none"])
def test_vit_parameters_counts_the_built_model(cfg, positions):
    model = VisionTransformer(ViTConfig(**cfg, positions=positions))
    counted = vit_parameters(**{"n_channels": 1, "n_classes": 10, **{k: v for k, v in cfg.items() if k != "n_heads"}},
                             positions=positions)
    assert counted["total"] == model.num_parameters()


PAPER = {  # Dosovitskiy et al. (2021), Table 1: layers, width, MLP, heads, reported size
    "ViT-B/16": (16, 12, 768, 3072, 12, 86e6),
    "ViT-L/16": (16, 24, 1024, 4096, 16, 307e6),
    "ViT-H/14": (14, 32, 1280, 5120, 16, 632e6),
}


@pytest.mark.parametrize("name", PAPER)
def test_paper_sizes_equal_hugging_faces_models_built_on_the_meta_device(name):
    from transformers import ViTConfig as HFConfig, ViTForImageClassification, ViTModel

    p, L, d, d_ff, h, reported = PAPER[name]
    config = HFConfig(image_size=224, patch_size=p, hidden_size=d, num_hidden_layers=L, num_attention_heads=h,
                      intermediate_size=d_ff, num_labels=1000)
    with torch.device("meta"):
        classifier = ViTForImageClassification(config)
        base = ViTModel(config)  # with its pooler
    ours = vit_parameters(image_size=224, patch_size=p, d_model=d, n_layers=L, d_ff=d_ff, n_classes=1000)
    assert ours["total"] == classifier.num_parameters()
    assert vit_parameters(image_size=224, patch_size=p, d_model=d, n_layers=L, pooler=True)["total"] == \
        base.num_parameters()
    assert abs(ours["total"] / reported - 1) < 0.015, (name, ours["total"])


def test_vit_b16_by_hand():
    parts = vit_parameters(image_size=224, patch_size=16, d_model=768, n_layers=12, n_classes=1000)
    assert parts["patch_embedding"] == 3 * 16 * 16 * 768 + 768 == 590_592
    assert parts["positions"] == 197 * 768
    assert parts["blocks"] == 12 * (12 * 768**2 + 13 * 768)
    assert parts["total"] == 86_567_656


# --------------------------------------------------------------------------- data and training
def test_digits_splits_are_fixed_stratified_and_disjoint():
    a, b = digits_splits(), digits_splits()
    everything = torch.cat([a.train_labels, a.val_labels, a.test_labels])
    assert len(everything) == 1797
    share = torch.bincount(everything, minlength=10).float() / 1797
    assert a.sizes == {"train": 1257, "val": 180, "test": 360}
    for name in ("train", "val", "test"):
        x, y = getattr(a, f"{name}_images"), getattr(a, f"{name}_labels")
        assert torch.equal(x, getattr(b, f"{name}_images")) and torch.equal(y, getattr(b, f"{name}_labels"))
        assert x.shape[1:] == (1, 8, 8) and x.dtype == torch.float32 and 0 <= x.min() and x.max() <= 1
        counts = torch.bincount(y, minlength=10).float()
        expected = len(y) * share  # each digit as often as in the whole data set
        assert (counts - expected).abs().max() <= 1.5, (name, counts, expected)
    flat, labels = a.flat("test")
    assert flat.shape == (360, 64) and labels.shape == (360,)
    c = digits_splits(seed=1)
    assert not torch.equal(c.test_labels, a.test_labels)
    with pytest.raises(ValueError, match=r"`split` must be one of"):
        a.flat("validation")


def test_training_is_reproducible_and_learns(monkeypatch):
    torch.set_num_threads(1)
    data = digits_splits()
    results = []
    for _ in range(2):
        torch.manual_seed(0)
        model = VisionTransformer(patch_size=4, d_model=32, n_layers=1, n_heads=2)
        log = train_classifier(model, data.train_images[:256], data.train_labels[:256], epochs=3, batch_size=64)
        results.append((log.epoch_loss, [p.detach().clone() for p in model.parameters()]))
    assert results[0][0] == results[1][0]
    assert all(torch.equal(a, b) for a, b in zip(results[0][1], results[1][1]))
    assert results[0][0][-1] < results[0][0][0] < math.log(10) + 0.2
    assert log.steps == 12 and not model.training


def test_baselines_and_accuracy():
    data = digits_splits()
    torch.manual_seed(0)
    for model in (DigitsMLP(), DigitsCNN()):
        assert model(data.test_images[:5]).shape == (5, 10)
    mlp = DigitsMLP()
    assert sum(p.numel() for p in mlp.parameters()) == 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    acc = accuracy(mlp, data.test_images, data.test_labels)
    assert acc == (predict(mlp, data.test_images) == data.test_labels).float().mean().item()
    with pytest.raises(TypeError, match=r"`model` must be a torch.nn.Module"):
        train_classifier(lambda x: x, data.train_images, data.train_labels)
    with pytest.raises(ValueError, match=r"`labels` must have shape"):
        train_classifier(mlp, data.train_images, data.train_labels[:10])
