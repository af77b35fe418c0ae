"""Tests for companion.model: the GPT's loss at initialization, causality, the KV cache, bad input."""
import math

import pytest
import torch

from companion.model import GPT, GPTCache, GPTConfig

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


TINY = GPTConfig(vocab_size=11, context_length=16, d_model=32, n_layers=2, n_heads=4)


@pytest.fixture
def model():
    torch.manual_seed(0)
    return GPT(TINY).eval()


def test_shapes_and_loss_matches_cross_entropy(model):
    idx = torch.randint(11, (3, 9))
    targets = torch.randint(11, (3, 9))
    logits, loss = model(idx, targets)
    assert logits.shape == (3, 9, 11)
    # the loss is the mean of -log softmax(logits)[target], computed here by hand
    logp = logits.log_softmax(-1)
    by_hand = -logp.gather(-1, targets[..., None]).mean()
    torch.testing.assert_close(loss, by_hand)
    assert model(idx)[1] is None
    assert model(idx)[0].shape == (3, 9, 11)  # every position, with or without targets


def test_loss_at_initialization_is_close_to_log_vocab():
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=69, context_length=32, d_model=64, n_layers=3, n_heads=4)
    model = GPT(config)
    idx, targets = torch.randint(69, (8, 32)), torch.randint(69, (8, 32))
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(69)) < 0.05  # small logits: an almost uniform prediction


def test_gpt2_initialization_and_tied_head(model):
    assert model.head.weight is model.tok_emb.weight
    n = sum(p.numel() for p in model.parameters())
    assert model.num_parameters() == n
    # residual projections are scaled by 1/sqrt(2 * n_layers)
    big = torch.manual_seed(1) and GPT(GPTConfig(vocab_size=11, context_length=16, d_model=256, n_layers=8, n_heads=4))
    std_q = big.blocks[0].attn.q_proj.weight.std().item()
    std_out = big.blocks[0].attn.out_proj.weight.std().item()
    std_ff2 = big.blocks[0].ff.linear2.weight.std().item()
    assert abs(std_q - 0.02) < 0.001
    assert abs(std_out - 0.02 / 4) < 0.0005 and abs(std_ff2 - 0.02 / 4) < 0.0005
    assert torch.all(big.blocks[0].attn.q_proj.bias == 0)
    assert torch.all(big.blocks[0].norm1.weight == 1)


def test_causality_of_the_whole_model(model):
    idx = torch.randint(11, (2, 12))
    logits, _ = model(idx)
    for t in range(12):
        changed = idx.clone()
        changed[:, t:] = (changed[:, t:] + 1 + torch.randint(10, changed[:, t:].shape)) % 11
        logits2, _ = model(changed)
        torch.testing.assert_close(logits2[:, :t], logits[:, :t])  # earlier positions never see later tokens
        if t < 12:
            assert not torch.allclose(logits2[:, t], logits[:, t])


def test_cached_incremental_logits_equal_full_recomputation(model):
    idx = torch.randint(11, (3, 16))
    full, _ = model(idx)
    cache = model.new_cache()
    assert isinstance(cache, GPTCache) and len(cache) == 0
    pieces = []
    for a, b in [(0, 5), (5, 6), (6, 7), (7, 16)]:
        logits, _ = model(idx[:, a:b], cache=cache)
        pieces.append(logits)
        assert len(cache) == b
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-5, atol=1e-5)


def test_cache_reorder_keeps_and_duplicates_rows(model):
    idx = torch.randint(11, (3, 8))
    cache = model.new_cache()
    model(idx[:, :6], cache=cache)
    order = torch.tensor([2, 2, 0])
    cache.reorder(order)
    step, _ = model(idx[order, 6:7], cache=cache)
    full, _ = model(idx[order, :7])
    torch.testing.assert_close(step[:, 0], full[:, 6], rtol=1e-5, atol=1e-5)


def test_attention_weights_are_causal_distributions(model):
    w = model.attention_weights(torch.randint(11, (2, 7)))
    assert w.shape == (2, 2, 4, 7, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 4, 7))
    assert torch.all(w.triu(1) == 0)


def test_overfits_one_batch():
    torch.manual_seed(0)
    model = GPT(TINY)
    idx = torch.randint(11, (4, 16))
    x, y = idx[:, :-1], idx[:, 1:]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(100):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 0.05


def test_bad_input_raises_clear_errors(model):
    with pytest.raises(ValueError, match=r"`idx` must hold token ids in \[0, 11\) \(got 11 at position \(0, 1\)\)"):
        model(torch.tensor([[0, 11]]))
    with pytest.raises(ValueError, match=r"`idx` must hold token ids in \[0, 11\) \(got -1 at position \(0, 0\)\)"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(ValueError, match="longer than the model's context: 0 cached \\+ 17 new positions > context_length=16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(TypeError, match=r"`idx` must be an integer tensor \(got dtype=torch.float32\)"):
        model(torch.zeros(1, 4))
    with pytest.raises(TypeError, match="`idx` must be a torch.Tensor"):
        model([[1, 2]])
    with pytest.raises(ValueError, match=r"`idx` must have shape \(B, T\) \(got shape=\(4,\)\); for one sequence of shape \(T,\) pass idx\[None\]"):
        model(torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`targets` must have the shape of `idx` \(1, 4\)"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 3, dtype=torch.long))
    cache = model.new_cache()
    model(torch.zeros(1, 10, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="10 cached \\+ 7 new positions > context_length=16"):
        model(torch.zeros(1, 7, dtype=torch.long), cache=cache)


def test_config_errors():
    with pytest.raises(ValueError, match=r"`d_model` must be divisible by `n_heads` \(got d_model=10, n_heads=3\)"):
        GPTConfig(d_model=10, n_heads=3)
    with pytest.raises(ValueError, match="`n_layers` must be a positive integer"):
        GPTConfig(n_layers=0)
    with pytest.raises(ValueError, match=r"`dropout` must be a number in \[0, 1\) \(got dropout=1.0\)"):
        GPTConfig(dropout=1.0)
    with pytest.raises(TypeError, match="`config` must be a GPTConfig"):
        GPT({"d_model": 8})


def test_generate_is_seeded_and_extends(model):
    start = torch.zeros(2, 3, dtype=torch.long)
    a = model.generate(start, 20, generator=torch.Generator().manual_seed(0))
    b = model.generate(start, 20, generator=torch.Generator().manual_seed(0))
    assert a.shape == (2, 23) and torch.equal(a, b) and torch.equal(a[:, :3], start)
    with pytest.raises(ValueError, match=r"`temperature` must be a finite number > 0 \(got temperature=0\)"):
        model.generate(start, 1, temperature=0)
    with pytest.raises(ValueError, match=r"`top_k` must be a positive integer \(got top_k=0\); use top_k=None"):
        model.generate(start, 1, top_k=0)
    with pytest.raises(ValueError, match=r"`max_new_tokens` must be a non-negative integer \(got max_new_tokens=-1\)"):
        model.generate(start, -1)
    assert torch.equal(model.generate(start, 0), start)
    # top_k=1 keeps only the most probable token: sampling becomes greedy, whatever the seed
    greedy_pick = model(start)[0][:, -1].argmax(-1)  # (2,)
    picked = model.generate(start, 1, top_k=1, generator=torch.Generator().manual_seed(3))[:, -1]
    assert torch.equal(picked, greedy_pick)


# ---------------------------------------------------------------- issue 14: targets, empty input, caches
def test_targets_of_minus_100_are_left_out_of_the_mean(model):
    """PyTorch's ignore_index convention: the loss averages the other positions only."""
    idx = torch.randint(11, (2, 6))
    targets = torch.randint(11, (2, 6))
    ignored = targets.clone()
    ignored[0, :4] = -100
    logits, loss = model(idx, ignored)
    keep = ignored != -100
    by_hand = -logits.log_softmax(-1).gather(-1, targets[..., None])[..., 0][keep].mean()
    torch.testing.assert_close(loss, by_hand)
    # without any -100 the loss is exactly torch's mean cross-entropy
    _, full = model(idx, targets)
    assert torch.equal(full, torch.nn.functional.cross_entropy(logits.reshape(12, 11), targets.reshape(12)))


def test_an_all_ignored_batch_gives_zero_loss_and_zero_gradient_not_nan():
    torch.manual_seed(0)
    model = GPT(TINY)
    idx = torch.randint(11, (2, 5))
    _, loss = model(idx, torch.full((2, 5), -100))
    assert loss.item() == 0.0
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.all(g == 0) for g in grads)


@pytest.mark.parametrize("bad, where", [(11, r"\(got 11 at position \(0, 2\)\)"), (-1, r"\(got -1 at position \(0, 2\)\)"),
                                        (-5, r"\(got -5 at position \(0, 2\)\)")])
def test_target_ids_outside_the_vocabulary_are_named(model, bad, where):
    targets = torch.zeros(1, 4, dtype=torch.long)
    targets[0, 2] = bad
    with pytest.raises(ValueError, match=r"`targets` must hold token ids in \[0, 11\) or -100 " + where):
        model(torch.zeros(1, 4, dtype=torch.long), targets)


@pytest.mark.parametrize("shape, label", [((0, 4), "B"), ((2, 0), "T")])
def test_empty_batches_and_sequences_are_refused(model, shape, label):
    idx = torch.zeros(shape, dtype=torch.long)
    with pytest.raises(ValueError, match=rf"`idx` must not be empty: shape \(B, T\) needs {label} >= 1"):
        model(idx, torch.zeros(shape, dtype=torch.long))
    with pytest.raises(ValueError, match=rf"`idx` must not be empty"):
        model(idx)


def test_cache_errors_name_the_cache_and_the_batch_sizes(model):
    with pytest.raises(TypeError, match=r"`cache` must be a GPTCache \(got dict\); make one with model.new_cache\(\)"):
        model(torch.zeros(1, 2, dtype=torch.long), cache={})
    cache = model.new_cache()
    model(torch.zeros(3, 2, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match=r"`cache` holds 3 sequences but `idx` has batch size B=2"):
        model(torch.zeros(2, 1, dtype=torch.long), cache=cache)
    assert len(cache) == 2, "a refused call leaves the cache as it was"
    with pytest.raises(ValueError, match=r"`cache` was made for a model of 1 layers, this one has n_layers=2"):
        model(torch.zeros(1, 2, dtype=torch.long), cache=GPTCache(1))
    other = GPT(GPTConfig(vocab_size=11, context_length=16, d_model=32, n_layers=2, n_heads=2)).eval()
    foreign = other.new_cache()
    other(torch.zeros(1, 2, dtype=torch.long), cache=foreign)
    with pytest.raises(ValueError, match=r"`cache` was filled by another model \(n_heads=2, d_head=16"):
        model(torch.zeros(1, 1, dtype=torch.long), cache=foreign)
    with pytest.raises(ValueError, match=r"`index` must hold rows of the cache's batch of B=3 in \[0, 3\) \(got 3 at position 1\)"):
        cache.reorder(torch.tensor([0, 3]))


def test_forward_reads_no_value_back_from_the_device():
    """On a GPU, reading a value back (int(idx.max()), bool(mask.any())) makes the host wait.

    Meta tensors have shapes but no values: any such read raises, so a forward pass that runs on
    the meta device, with targets and a cache, reads none."""
    with torch.device("meta"):
        model = GPT(TINY)
        idx = torch.zeros(2, 5, dtype=torch.long)
        targets = torch.zeros(2, 5, dtype=torch.long)
    cache = model.new_cache()
    logits, loss = model(idx, targets, cache=cache)
    assert logits.shape == (2, 5, 11) and logits.device.type == "meta" and loss.shape == ()
    step, _ = model(idx[:, :1], cache=cache)
    assert step.shape == (2, 1, 11)


def test_idx_on_another_device_than_the_model_is_named():
    with torch.device("meta"):
        model = GPT(TINY)
    with pytest.raises(ValueError, match=r"`idx` is on cpu but the model is on meta"):
        model(torch.zeros(1, 3, dtype=torch.long))


# ---------------------------------------------------------------- issue 14 and 15: generate
def test_generate_accepts_one_sequence(model):
    one = torch.tensor([1, 2, 3])
    out = model.generate(one, 4, generator=torch.Generator().manual_seed(0))
    batch = model.generate(one[None], 4, generator=torch.Generator().manual_seed(0))
    assert out.shape == (7,) and torch.equal(out, batch[0])


def test_generate_samples_in_eval_mode_and_restores_the_mode():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, context_length=16, d_model=32, n_layers=2, n_heads=4, dropout=0.5))
    start = torch.zeros(2, 3, dtype=torch.long)
    model.train()
    a = model.generate(start, 10, generator=torch.Generator().manual_seed(0))
    assert model.training, "the model is back in training mode"
    model.eval()
    b = model.generate(start, 10, generator=torch.Generator().manual_seed(0))
    assert not model.training
    assert torch.equal(a, b), "no dropout while generating: the same tokens in either mode"


@pytest.mark.parametrize("temperature, kind", [(float("inf"), ValueError), (float("nan"), ValueError),
                                               (-1.0, ValueError), ("hot", TypeError), (True, TypeError)])
def test_generate_refuses_temperatures_that_are_not_positive_finite_numbers(model, temperature, kind):
    with pytest.raises(kind, match="`temperature` must be a finite number > 0"):
        model.generate(torch.zeros(1, 2, dtype=torch.long), 3, temperature=temperature)


def test_generate_refuses_a_model_that_outputs_nan_and_a_temperature_that_overflows(model):
    start = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(ValueError, match=r"`temperature`=1e-40 must not hold \+inf"):
        model.generate(start, 3, temperature=1e-40)
    broken = GPT(TINY)
    with torch.no_grad():
        broken.final_norm.weight.fill_(float("nan"))
    with pytest.raises(ValueError, match=r"the model's output \(its logits\) must not hold NaN"):
        broken.generate(start, 3)
    with pytest.raises(ValueError, match=r"`idx` must have shape \(T,\) or \(B, T\) \(got shape=\(1, 1, 2\)\)"):
        model.generate(start[None], 3)
