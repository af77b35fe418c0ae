"""companion.mlm: the masking rule (exact counts and a large-sample bound), the loss against a
hand computation, the model against a forward pass written out by hand, no causal mask, padding
invariance, the classifier, the training loops, the scores from both sides and from the left,
the checkpoint and the command line, and every error message."""
import math

import pytest
import torch
import torch.nn.functional as F

from companion.block import parameter_breakdown
from companion.checkpoint import load_checkpoint, save_checkpoint
from companion.data import CharTokenizer, load_corpus
from companion.mlm import (
    IGNORE_INDEX,
    EncoderClassifier,
    EncoderLM,
    EncoderLMConfig,
    MaskedCharTokenizer,
    classify,
    encode_lines,
    estimate_mlm_loss,
    fine_tune,
    held_out_positions,
    labelled_lines,
    main,
    classifier_step,
    mask_tokens,
    mlm_batch,
    mlm_loss,
    mlm_step,
    pad_batch,
    swap_letters,
    score_both_sides,
    score_left_only,
    spoken_lines,
    train_mlm,
)
from companion.model import GPT, GPTConfig
from companion.train import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tok():
    return MaskedCharTokenizer.from_char_tokenizer(load_corpus().tokenizer)


def tiny_model(tok, context_length=17, d_model=16, n_layers=2, n_heads=2, seed=0, **kw):
    torch.manual_seed(seed)
    return EncoderLM(EncoderLMConfig(vocab_size=tok.vocab_size, context_length=context_length, d_model=d_model,
                                     n_layers=n_layers, n_heads=n_heads, **kw)).eval()


# --------------------------------------------------------------------------- tokenizer


def test_tokenizer_keeps_chapter_7_ids_and_adds_specials(tok):
    ch7 = load_corpus().tokenizer
    text = "To be, or not to be"
    assert torch.equal(tok.encode(text), ch7.encode(text))
    assert (tok.n_chars, tok.vocab_size) == (69, 72)
    assert (tok.pad_id, tok.mask_id, tok.cls_id) == (69, 70, 71)
    assert tok.specials == {"[PAD]": 69, "[MASK]": 70, "[CLS]": 71}
    ids = tok.encode("ab", cls=True)
    assert ids.tolist() == [71] + ch7.encode("ab").tolist()
    assert tok.decode(torch.tensor([71, tok.stoi["a"], 70, 69])) == "[CLS]a[MASK][PAD]"
    assert tok.is_special(torch.tensor([0, 68, 69, 70, 71])).tolist() == [False, False, True, True, True]
    assert tok.encode("[MASK]").max() < tok.n_chars  # text never becomes a special token
    again = MaskedCharTokenizer.from_dict(tok.to_dict())
    assert again.chars == tok.chars and again.vocab_size == tok.vocab_size
    assert "vocab_size=72" in repr(tok)


def test_tokenizer_errors(tok):
    with pytest.raises(TypeError, match="`tokenizer` must be a companion.data.CharTokenizer"):
        MaskedCharTokenizer.from_char_tokenizer("abc")
    with pytest.raises(TypeError, match="`chars` must be a non-empty str"):
        MaskedCharTokenizer("")
    with pytest.raises(ValueError, match="`chars` must not repeat"):
        MaskedCharTokenizer("aa")
    with pytest.raises(ValueError, match="a MaskedCharTokenizer is stored as"):
        MaskedCharTokenizer.from_dict({"chars": "ab"})
    with pytest.raises(ValueError, match="a MaskedCharTokenizer is stored as"):
        MaskedCharTokenizer.from_dict({"chars": "ab", "specials": ["[MASK]"]})
    with pytest.raises(ValueError, match=r"`ids` must lie in \[0, 72\)"):
        tok.decode([72])
    with pytest.raises(ValueError, match=r"`ids` must be one sequence of shape \(T,\)"):
        tok.decode(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="`ids` must be integers"):
        tok.decode([1.5])
    with pytest.raises(ValueError, match="contains the character"):
        tok.encode("Café")
    with pytest.raises(TypeError, match="`ids` must hold integer token ids"):
        tok.is_special(torch.zeros(3))


# --------------------------------------------------------------------------- the masking rule


def naive_mask_tokens(ids, tok, p, g):
    """The rule position by position, from the same three draws as mask_tokens."""
    u = torch.rand(ids.shape, generator=g)
    kind = torch.rand(ids.shape, generator=g)
    rand = torch.randint(tok.n_chars, ids.shape, generator=g)
    inputs, labels = ids.clone(), torch.full_like(ids, -100)
    for index in torch.cartesian_prod(*[torch.arange(n) for n in ids.shape]):
        i = tuple(index.tolist())
        if ids[i] >= tok.n_chars or u[i] >= p:
            continue
        labels[i] = ids[i]
        if kind[i] < 0.8:
            inputs[i] = tok.mask_id
        elif kind[i] < 0.9:
            inputs[i] = rand[i]
    return inputs, labels


def test_mask_tokens_equals_the_rule_written_out(tok):
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(tok.n_chars, (4, 50), generator=g)
    ids[:, 0] = tok.cls_id
    ids[2, 40:] = tok.pad_id
    got = mask_tokens(ids, tok, generator=torch.Generator().manual_seed(5))
    want = naive_mask_tokens(ids, tok, 0.15, torch.Generator().manual_seed(5))
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


def test_mask_tokens_exact_counts_under_a_fixed_generator(tok):
    """A regression pin: the CPU generator is the same on every machine, so these counts are exact."""
    ids = torch.arange(10_000) % tok.n_chars
    inputs, labels = mask_tokens(ids, tok, generator=torch.Generator().manual_seed(0))
    chosen = labels != IGNORE_INDEX
    counts = (int(chosen.sum()), int((inputs == tok.mask_id).sum()), int((chosen & (inputs == ids)).sum()))
    assert counts == (1491, 1202, 149), counts
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])


def test_mask_tokens_large_sample_bound(tok):
    """2^20 positions (9% special). Each share is compared with its expectation using Hoeffding's
    bound at 1e-11 per test (six tests: a right rule fails with probability below 1e-10); the
    margins (0.3% for the chosen share, 0.9% among the chosen) are far smaller than any mistake."""
    delta = 1e-11
    g = torch.Generator().manual_seed(2024)
    ids = torch.randint(tok.n_chars, (256, 4096), generator=g)
    ids[:, 0] = tok.cls_id
    ids[::8, 3700:] = tok.pad_id
    ids[1::16, 100:130] = tok.mask_id  # an input that already holds a [MASK] is not chosen again
    special = ids >= tok.n_chars
    inputs, labels = mask_tokens(ids, tok, generator=g)
    chosen = labels != -100
    assert not (chosen & special).any()
    assert torch.equal(labels[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])

    def margin(n):
        return math.sqrt(math.log(2 / delta) / (2 * n))

    n = int((~special).sum())
    assert abs(chosen.sum().item() / n - 0.15) < margin(n)
    half = ids.shape[1] // 2
    for cols in (slice(0, half), slice(half, None)):
        n_part = int((~special[:, cols]).sum())
        assert abs(chosen[:, cols].sum().item() / n_part - 0.15) < margin(n_part)
    m = int(chosen.sum())
    masked = (inputs[chosen] == tok.mask_id).float().mean().item()
    kept = (inputs[chosen] == ids[chosen]).float().mean().item()
    randomized = 1 - masked - kept
    assert abs(masked - 0.8) < margin(m)
    assert abs(kept - (0.1 + 0.1 / tok.n_chars)) < margin(m)  # a random draw may equal the original
    assert abs(randomized - 0.1 * (1 - 1 / tok.n_chars)) < margin(m)
    replaced = inputs[chosen & (inputs != ids) & (inputs != tok.mask_id)]
    assert replaced.max() < tok.n_chars and len(replaced.unique()) == tok.n_chars  # every character drawn


def test_mask_tokens_mask_prob_and_shapes(tok):
    ids = torch.randint(tok.n_chars, (3, 7, 50))
    inputs, labels = mask_tokens(ids, tok, mask_prob=0.5, generator=torch.Generator().manual_seed(1))
    assert inputs.shape == labels.shape == ids.shape and inputs.dtype == labels.dtype == torch.long
    one = mask_tokens(ids, tok, generator=torch.Generator().manual_seed(1))
    two = mask_tokens(ids, tok, generator=torch.Generator().manual_seed(1))
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])


def test_mask_tokens_errors(tok):
    ids = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(TypeError, match="`tokenizer` must be a companion.mlm.MaskedCharTokenizer"):
        mask_tokens(ids, CharTokenizer("ab"))
    with pytest.raises(TypeError, match="`ids` must be a torch.Tensor"):
        mask_tokens([[1, 2]], tok)
    with pytest.raises(TypeError, match="`ids` must hold integer token ids"):
        mask_tokens(torch.zeros(2, 5), tok)
    with pytest.raises(ValueError, match=r"`ids` must hold token ids in \[0, 72\)"):
        mask_tokens(ids + 80, tok)
    with pytest.raises(ValueError, match=r"`mask_prob` must be a number in \(0, 1\)"):
        mask_tokens(ids, tok, mask_prob=1.5)
    with pytest.raises(ValueError, match=r"`mask_prob` must be a number in \(0, 1\)"):
        mask_tokens(ids, tok, mask_prob=True)
    with pytest.raises(TypeError, match="`generator` must be None or a torch.Generator"):
        mask_tokens(ids, tok, generator=0)


# --------------------------------------------------------------------------- the loss


def test_mlm_loss_against_a_hand_computation():
    logits = torch.tensor([[[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [5.0, 5.0, 5.0]]])  # (1, 3, 3)
    labels = torch.tensor([[0, -100, 2]])  # positions 0 and 2 are scored
    l0 = -(2.0 - math.log(math.exp(2.0) + 2.0))  # -log softmax([2, 0, 0])[0]
    l2 = math.log(3.0)  # uniform over three
    assert mlm_loss(logits, labels).item() == pytest.approx((l0 + l2) / 2, abs=1e-6)
    # only the chosen positions count: changing an unscored logit changes nothing
    other = logits.clone()
    other[0, 1] = torch.tensor([9.0, -9.0, 3.0])
    assert mlm_loss(other, labels).item() == pytest.approx((l0 + l2) / 2, abs=1e-6)


def test_mlm_loss_equals_cross_entropy_with_ignore_index():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 8, 10, generator=g)
    labels = torch.where(torch.rand(3, 8, generator=g) < 0.3, torch.randint(10, (3, 8), generator=g), -100)
    want = F.cross_entropy(logits.reshape(-1, 10), labels.reshape(-1), ignore_index=-100)
    torch.testing.assert_close(mlm_loss(logits, labels), want)


def test_mlm_loss_errors():
    logits = torch.zeros(2, 3, 5)
    with pytest.raises(ValueError, match=r"`logits` must be a floating-point tensor of shape \(B, T, V\)"):
        mlm_loss(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`logits` must be a floating-point tensor"):
        mlm_loss("logits", torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`labels` must have shape \(B, T\) = \(2, 3\)"):
        mlm_loss(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="`labels` must hold integer token ids"):
        mlm_loss(logits, torch.zeros(2, 3))
    with pytest.raises(ValueError, match="`labels` chooses no position"):
        mlm_loss(logits, torch.full((2, 3), -100))
    with pytest.raises(ValueError, match=r"`labels` must be token ids in \[0, 5\) or -100"):
        mlm_loss(logits, torch.tensor([[7, -100, -100], [-100, -100, -100]]))
    with pytest.raises(ValueError, match=r"`labels` must be token ids in \[0, 5\) or -100"):
        mlm_loss(logits, torch.tensor([[-1, -100, -100], [-100, -100, 0]]))


# --------------------------------------------------------------------------- padding


def test_pad_batch_and_encode_lines(tok):
    ids, key_mask = pad_batch([torch.tensor([5, 0, 7]), torch.tensor([1])], pad_id=69)
    assert ids.tolist() == [[5, 0, 7], [1, 69, 69]]
    assert key_mask.tolist() == [[True, True, True], [True, False, False]]
    ids, key_mask = encode_lines(["abc", "a"], tok, context_length=3)
    assert tok.decode(ids[0]) == "[CLS]ab" and tok.decode(ids[1]) == "[CLS]a[PAD]"
    assert key_mask.tolist() == [[True, True, True], [True, True, False]]


def test_pad_batch_errors(tok):
    with pytest.raises(TypeError, match="`seqs` must be a non-empty list"):
        pad_batch([], 0)
    with pytest.raises(TypeError, match="`seqs` must be a non-empty list"):
        pad_batch(torch.zeros(2, 3, dtype=torch.long), 0)
    with pytest.raises(ValueError, match="`pad_id` must be a non-negative int"):
        pad_batch([torch.tensor([1])], -1)
    with pytest.raises(ValueError, match=r"`seqs\[1\]` must have shape \(T,\)"):
        pad_batch([torch.tensor([1]), torch.zeros(2, 2, dtype=torch.long)], 0)
    with pytest.raises(TypeError, match=r"`seqs\[0\]` must hold integer token ids"):
        pad_batch([torch.tensor([1.0])], 0)
    with pytest.raises(ValueError, match=r"`seqs\[0\]` is empty"):
        pad_batch([torch.tensor([], dtype=torch.long)], 0)
    with pytest.raises(TypeError, match="`lines` must be a non-empty list of non-empty strings"):
        encode_lines(["ok", ""], tok, 8)
    with pytest.raises(ValueError, match="`context_length` must be an int >= 2"):
        encode_lines(["ok"], tok, 1)
    with pytest.raises(TypeError, match="`tokenizer` must be a companion.mlm.MaskedCharTokenizer"):
        encode_lines(["ok"], CharTokenizer("ok"), 8)


# --------------------------------------------------------------------------- the model


def by_hand(model, idx):
    """The forward pass written out from the model's own parameters."""
    B, T = idx.shape
    h = model.tok_emb.weight[idx] + model.pos_emb.weight[:T]  # (B, T, d)
    for block in model.encoder.blocks:
        a = F.layer_norm(h, (h.shape[-1],), block.norm1.weight, block.norm1.bias)
        h = h + block.attn(a)[0]  # no mask at all
        f = F.layer_norm(h, (h.shape[-1],), block.norm2.weight, block.norm2.bias)
        h = h + block.ff.linear2(F.gelu(block.ff.linear1(f)))
    h = F.layer_norm(h, (h.shape[-1],), model.encoder.norm.weight, model.encoder.norm.bias)
    return h @ model.tok_emb.weight.T  # (B, T, V): the tied head


@pytest.mark.parametrize("bias", [True, False])
def test_model_equals_the_forward_pass_by_hand(tok, bias):
    model = tiny_model(tok, bias=bias)
    with torch.no_grad():  # norms start at (1, 0): make them count
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(torch.randn(p.shape) * 0.3)
    idx = torch.randint(tok.vocab_size, (3, 11))
    logits, loss = model(idx)
    assert loss is None and logits.shape == (3, 11, tok.vocab_size)
    torch.testing.assert_close(logits, by_hand(model, idx), rtol=1e-5, atol=1e-5)
    assert model.head.weight is model.tok_emb.weight
    config = model.config
    count = parameter_breakdown(vocab_size=config.vocab_size, context_length=config.context_length,
                                d_model=config.d_model, n_layers=config.n_layers, n_heads=config.n_heads,
                                bias=bias)["total"]
    assert model.num_parameters() == count


def test_no_causal_mask_a_later_token_changes_an_earlier_output(tok):
    model = tiny_model(tok)
    idx = torch.randint(tok.n_chars, (1, 12))
    edited = idx.clone()
    edited[0, -1] = (idx[0, -1] + 1) % tok.n_chars
    with torch.no_grad():
        first, later = model(idx)[0][0, 0], model(edited)[0][0, 0]
    assert (first - later).abs().max() > 1e-4
    maps = model.attention_weights(idx)
    assert maps.shape == (2, 1, 2, 12, 12)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 1, 2, 12))
    assert maps.triu(1).sum() > 0.5  # weight above the diagonal: later keys are seen


def test_padding_invariance(tok):
    """A padded batch gives each sequence's real positions the outputs it has on its own."""
    model = tiny_model(tok, context_length=33)
    seqs = [tok.encode(s, cls=True) for s in ("Good morrow", "Ay", "What say you, sir?")]
    ids, key_mask = pad_batch(seqs, tok.pad_id)
    with torch.no_grad():
        batched, _ = model(ids, key_mask=key_mask)
        for b, s in enumerate(seqs):
            alone, _ = model(s[None])
            torch.testing.assert_close(batched[b, : len(s)], alone[0], rtol=1e-5, atol=1e-5)
        # without the key mask the padding leaks into the real positions
        leaky, _ = model(ids)
    assert (leaky[1, :3] - batched[1, :3]).abs().max() > 1e-4
    maps = model.attention_weights(ids, key_mask)
    assert maps[:, 1, :, :, 3:].abs().max() == 0  # no weight on the padding of the short line
    torch.testing.assert_close(model.summary(ids, key_mask), model.hidden(ids, key_mask)[:, 0])


def test_model_loss_is_the_loss_over_chosen_positions(tok):
    model = tiny_model(tok)
    g = torch.Generator().manual_seed(0)
    inputs, labels = mlm_batch(load_corpus().train_ids, tok, 4, 17, g)
    assert (inputs[:, 0] == tok.cls_id).all() and (labels[:, 0] == -100).all()
    logits, loss = model(inputs, labels)
    torch.testing.assert_close(loss, mlm_loss(logits, labels))
    assert abs(loss.item() - math.log(tok.vocab_size)) < 0.3  # near-uniform at initialization


def test_model_errors(tok):
    with pytest.raises(TypeError, match="`config` must be an EncoderLMConfig"):
        EncoderLM(GPTConfig())
    with pytest.raises(ValueError, match="`d_model` must be divisible by `n_heads`"):
        EncoderLMConfig(d_model=10, n_heads=4)
    model = tiny_model(tok)
    with pytest.raises(ValueError, match=r"`idx` must have shape \(B, T\)"):
        model(torch.zeros(5, dtype=torch.long))
    with pytest.raises(TypeError, match="`idx` must hold integer token ids"):
        model(torch.zeros(1, 5))
    with pytest.raises(ValueError, match=r"`idx` must hold token ids in \[0, 72\)"):
        model(torch.full((1, 5), 72))
    with pytest.raises(ValueError, match="`idx` has 18 positions but the model reads at most context_length=17"):
        model(torch.zeros(1, 18, dtype=torch.long))
    with pytest.raises(ValueError, match=r"`idx` has no positions"):
        model(torch.zeros(1, 0, dtype=torch.long))
    idx = torch.zeros(2, 5, dtype=torch.long)
    with pytest.raises(ValueError, match=r"`key_mask` must be a bool tensor of shape \(B, T\) = \(2, 5\)"):
        model(idx, key_mask=torch.ones(2, 5))
    with pytest.raises(ValueError, match=r"`key_mask` must be a bool tensor of shape \(B, T\) = \(2, 5\)"):
        model(idx, key_mask=torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="`key_mask` has a row with no real token"):
        model(idx, key_mask=torch.tensor([[True] * 5, [False] * 5]))
    with pytest.raises(ValueError, match=r"`labels` must have shape \(B, T\)"):
        model(idx, torch.zeros(2, 4, dtype=torch.long))


# --------------------------------------------------------------------------- the classifier


def test_classifier(tok):
    body = tiny_model(tok)
    clf = EncoderClassifier(body, 2).eval()
    ids, key_mask = encode_lines(["O Romeo, Romeo!", "Good morrow"], tok, 17)
    logits, loss = clf(ids, torch.tensor([1, 0]), key_mask=key_mask)
    with torch.no_grad():
        summary = body.summary(ids, key_mask)
    torch.testing.assert_close(logits, clf.classifier(summary))
    torch.testing.assert_close(loss, F.cross_entropy(logits, torch.tensor([1, 0])))
    assert clf(ids, key_mask=key_mask)[1] is None
    with pytest.raises(TypeError, match="`body` must be a companion.mlm.EncoderLM"):
        EncoderClassifier(GPT(GPTConfig()), 2)
    with pytest.raises(ValueError, match="`n_classes` must be an int >= 2"):
        EncoderClassifier(body, 1)
    with pytest.raises(ValueError, match=r"`labels` must hold token ids in \[0, 2\)"):
        clf(ids, torch.tensor([2, 0]), key_mask=key_mask)
    with pytest.raises(ValueError, match=r"`labels` must have shape \(T,\)"):
        clf(ids, torch.tensor([[1, 0]]), key_mask=key_mask)
    with pytest.raises(ValueError, match="`labels` must have one class per sequence"):
        clf(ids, torch.tensor([1]), key_mask=key_mask)


def test_lines_of_plays():
    lines = spoken_lines("macbeth")
    assert lines[0] == "When shall we three meet again"
    assert not any(line.endswith(":") and line.isupper() for line in lines[:50])
    assert all(len(line) >= 30 for line in spoken_lines("macbeth", 30))
    lines, labels = labelled_lines(["macbeth", "the-tempest", "as-you-like-it"])
    assert set(labels.tolist()) == {0, 1} and len(lines) == len(labels)
    assert labels[0] == 1 and labels[-1] == 0  # macbeth a tragedy (1), as-you-like-it a comedy (0)
    with pytest.raises(ValueError, match="`min_chars` must be an int >= 1"):
        spoken_lines("macbeth", 0)
    with pytest.raises(ValueError, match="`name` must be one of the 38 plays"):
        labelled_lines(["not-a-play"])
    with pytest.raises(TypeError, match="`plays` must be a non-empty list of play names"):
        labelled_lines("macbeth")
    with pytest.raises(TypeError, match="`groups` must be a list of at least two play groups"):
        labelled_lines(["macbeth"], groups=("tragedies",))
    with pytest.raises(ValueError, match="none of `plays` belongs to `groups`"):
        labelled_lines(["the-tempest"])


# --------------------------------------------------------------------------- training


def tiny_train_config(**kw):
    return TrainConfig(**{**dict(batch_size=8, max_steps=40, learning_rate=3e-3, min_lr=3e-4, warmup=4,
                                 eval_interval=20, eval_batches=2), **kw})


def test_train_mlm_learns_and_repeats(tok):
    corpus = load_corpus()
    runs = []
    for _ in range(2):
        model = tiny_model(tok)
        h = train_mlm(model, corpus.train_ids, tok, tiny_train_config(), val_ids=corpus.val_ids[:5000])
        runs.append(h)
    assert runs[0].train_loss == runs[1].train_loss  # same seed, same steps: the same run
    assert h.eval_steps == [20, 40] and len(h.train_loss) == 40
    assert sum(h.train_loss[-10:]) / 10 < sum(h.train_loss[:5]) / 5 - 0.4
    assert h.val_loss[-1] == pytest.approx(estimate_mlm_loss(model, corpus.val_ids[:5000], tok, 2, 8))
    assert not model.training


def test_train_mlm_errors(tok):
    model = tiny_model(tok)
    ids = load_corpus().train_ids[:2000]
    cfg = tiny_train_config()
    with pytest.raises(TypeError, match="`model` must be a companion.mlm.EncoderLM"):
        train_mlm(GPT(GPTConfig()), ids, tok, cfg)
    with pytest.raises(TypeError, match="`cfg` must be a companion.train.TrainConfig"):
        train_mlm(model, ids, tok, {"batch_size": 8})
    with pytest.raises(ValueError, match="`steps` must be None or an int >= 0"):
        train_mlm(model, ids, tok, cfg, steps=-1)
    with pytest.raises(ValueError, match=r"`train_ids` must hold token ids in \[0, 69\)"):
        train_mlm(model, ids.clone().fill_(70), tok, cfg)
    other = MaskedCharTokenizer("abc")
    with pytest.raises(ValueError, match="the model's vocab_size=72 does not match the tokenizer's 6"):
        train_mlm(model, torch.zeros(100, dtype=torch.long), other, cfg)
    with pytest.raises(ValueError, match="`batch_size` must be a positive int"):
        mlm_batch(ids, tok, 0, 17)
    with pytest.raises(TypeError, match="`model` must be an EncoderLM"):
        estimate_mlm_loss(GPT(GPTConfig()), ids, tok, 1, 2)


def test_fine_tune_and_classify(tok):
    lines = ["O, I am fortune's fool!", "Hey ho, the wind and the rain", "Out, out, brief candle!",
             "Journeys end in lovers meeting"] * 8
    labels = torch.tensor([1, 0, 1, 0] * 8)
    ids, key_mask = encode_lines(lines, tok, 33)
    clf = EncoderClassifier(tiny_model(tok, context_length=33), 2)
    h = fine_tune(clf, ids, key_mask, labels, tiny_train_config(max_steps=60, learning_rate=1e-2))
    assert len(h.train_loss) == 60 and not clf.training
    pred = classify(clf, ids, key_mask, batch_size=5)
    assert pred.shape == (32,) and (pred == labels).float().mean() == 1.0  # four lines: learned by heart
    # classify sorts by length and cuts each batch to its longest line: the same as one padded batch
    with torch.no_grad():
        assert torch.equal(pred, clf(ids, key_mask=key_mask)[0].argmax(-1))
    with pytest.raises(ValueError, match="`key_mask` is required"):
        fine_tune(clf, ids, None, labels, tiny_train_config())
    with pytest.raises(ValueError, match="`labels` must have one class per line"):
        fine_tune(clf, ids, key_mask, labels[:3], tiny_train_config())
    with pytest.raises(TypeError, match="`model` must be a companion.mlm.EncoderClassifier"):
        fine_tune(tiny_model(tok), ids, key_mask, labels, tiny_train_config())
    with pytest.raises(ValueError, match="`batch_size` must be a positive int"):
        classify(clf, ids, key_mask, batch_size=0)
    with pytest.raises(TypeError, match="`model` must be an EncoderClassifier"):
        classify(tiny_model(tok), ids, key_mask)


# --------------------------------------------------------------------------- both sides, left only


def test_held_out_positions():
    pos = held_out_positions(1000, 50, left=100, right=20, seed=1)
    assert len(pos) == 50 and len(pos.unique()) == 50 and torch.equal(pos, pos.sort().values)
    assert pos.min() >= 100 and pos.max() < 980
    assert torch.equal(pos, held_out_positions(1000, 50, left=100, right=20, seed=1))
    with pytest.raises(ValueError, match="`n` must be between 1 and 880"):
        held_out_positions(1000, 881, left=100, right=20)
    with pytest.raises(ValueError, match="`left` must be a non-negative int"):
        held_out_positions(1000, 5, left=-1, right=0)


def test_scores_equal_one_window_at_a_time(tok):
    corpus = load_corpus()
    ids = corpus.val_ids[:3000]
    model = tiny_model(tok)
    pos = held_out_positions(len(ids), 7, left=10, right=5, seed=0)
    got = score_both_sides(model, ids, pos, tok, left=10, right=5, batch_size=3)
    for k, j in enumerate(pos.tolist()):
        window = ids[j - 10 : j + 6].clone()
        window[10] = tok.mask_id
        x = torch.cat([torch.tensor([tok.cls_id]), window])[None]
        with torch.no_grad():
            logp = torch.log_softmax(model(x)[0][0, 11], -1)
        assert got[k].item() == pytest.approx(-logp[ids[j]].item(), abs=1e-5)
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=69, context_length=16, d_model=16, n_layers=1, n_heads=2)).eval()
    left = score_left_only(gpt, ids, pos, left=10, batch_size=4)
    for k, j in enumerate(pos.tolist()):
        with torch.no_grad():
            logp = torch.log_softmax(gpt(ids[j - 10 : j][None])[0][0, -1], -1)
        assert left[k].item() == pytest.approx(-logp[ids[j]].item(), abs=1e-5)


def test_score_errors(tok):
    ids = load_corpus().val_ids[:500]
    model = tiny_model(tok)
    pos = torch.tensor([100, 200])
    with pytest.raises(ValueError, match=r"`left` \+ `right` \+ 2 .* must be at most context_length=17"):
        score_both_sides(model, ids, pos, tok, left=10, right=6)
    with pytest.raises(ValueError, match="`positions` must leave 10 characters before and 5 after"):
        score_both_sides(model, ids, torch.tensor([3]), tok, left=10, right=5)
    with pytest.raises(ValueError, match="`positions` is empty"):
        score_both_sides(model, ids, torch.tensor([], dtype=torch.long), tok, left=1, right=1)
    with pytest.raises(TypeError, match="`model` must be an EncoderLM"):
        score_both_sides(GPT(GPTConfig()), ids, pos, tok, left=1, right=1)
    with pytest.raises(TypeError, match="`model` must be a companion.model.GPT"):
        score_left_only(model, ids, pos, left=5)
    gpt = GPT(GPTConfig(vocab_size=69, context_length=16, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match=r"`left` must be an int in \[1, context_length=16\]"):
        score_left_only(gpt, ids, pos, left=17)


# --------------------------------------------------------------------------- checkpoint and command


def test_checkpoint_round_trip(tok, tmp_path):
    model = tiny_model(tok)
    path = save_checkpoint(tmp_path / "enc.safetensors", model, tok, info={"note": "test"})
    loaded, loaded_tok, extra = load_checkpoint(path)
    assert isinstance(loaded, EncoderLM) and isinstance(loaded_tok, MaskedCharTokenizer)
    assert loaded.config == model.config and loaded_tok.chars == tok.chars and extra["info"] == {"note": "test"}
    idx = torch.randint(tok.vocab_size, (2, 9))
    torch.testing.assert_close(loaded(idx)[0], model(idx)[0])
    assert loaded.head.weight is loaded.tok_emb.weight


def test_main_tiny(tmp_path, capsys):
    out = tmp_path / "mlm.safetensors"
    assert main(["--config", "tiny", "--steps", "3", "--positions", "20", "--out", str(out)]) == 0
    model, tok, extra = load_checkpoint(out)
    info = extra["info"]
    assert isinstance(model, EncoderLM) and info["steps"] == 3 and info["positions"] == 20
    assert {"both_sides_nats_per_char", "encoder_left_only_nats_per_char", "gpt_left_only_nats_per_char"} <= set(info)
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--config", "tiny", "--steps", "0"])


def test_the_shipped_encoder_loads_verified_and_matches_its_record():
    """The chapter 10 encoder: the chapter 7 GPT's shape, trained by the recorded command, small."""
    from companion.checkpoint import shipped_model_path
    from companion.mlm import shipped_mlm_path

    path = shipped_mlm_path()
    assert path.stat().st_size < 3.4e6
    model, tok, extra = load_checkpoint(path)
    gpt, _, _ = load_checkpoint(shipped_model_path())
    assert isinstance(model, EncoderLM) and isinstance(tok, MaskedCharTokenizer)
    assert not model.training
    for field in ("d_model", "n_layers", "n_heads", "d_ff", "bias"):
        assert getattr(model.config, field) == getattr(gpt.config, field)
    assert model.config.context_length == gpt.config.context_length + 1
    info = extra["info"]
    assert info["steps"] == 4000 and info["threads"] == 1
    assert info["command"] == ("python -m companion.mlm --config small --steps 4000 --threads 1 "
                               "--positions 4000 --progress --out runs/shakespeare_mlm.safetensors")
    assert info["val_mlm_nats_per_char"] == pytest.approx(1.5941)
    assert info["both_sides_nats_per_char"] < info["gpt_left_only_nats_per_char"]


def test_fine_tuning_from_scratch_answers_comedy_for_every_line(tok):
    """Chapter 10 fine-tunes the pre-trained encoder live and compares it with the same recipe
    started from random weights. That second run is made here (it would double the notebook's
    longest cell): with the chapter's split, seeds and configuration, the classifier trained from
    scratch ends up answering class 0 ("comedies") for every test line, so it scores exactly 50%,
    and the chapter compares with that answer line by line."""
    from companion.data import VALIDATION_PLAYS, play_group, play_names
    from companion.mlm import EncoderLMConfig, shipped_mlm_path

    torch.set_num_threads(2)  # as companion.notebook.setup() does
    groups = ("comedies", "tragedies")
    test_plays = ["twelfth-night", "much-ado-about-nothing", "macbeth", "othello"]
    train_plays = [p for p in play_names() if play_group(p) in groups
                   and p not in test_plays and p not in VALIDATION_PLAYS]
    train_lines, train_y = labelled_lines(train_plays, groups)
    test_lines, test_y = labelled_lines(test_plays, groups)
    g = torch.Generator().manual_seed(0)
    pick = torch.cat([(rows := torch.nonzero(test_y == k)[:, 0])[torch.randperm(len(rows), generator=g)[:1000]]
                      for k in (0, 1)])
    test_lines, test_y = [test_lines[i] for i in pick.tolist()], test_y[pick]
    train_x, train_mask = encode_lines(train_lines, tok, context_length=65)
    test_x, test_mask = encode_lines(test_lines, tok, context_length=65)
    config = load_checkpoint(shipped_mlm_path())[0].config
    assert isinstance(config, EncoderLMConfig)
    torch.manual_seed(0)
    clf = EncoderClassifier(EncoderLM(config), n_classes=2)  # random weights: from scratch
    cfg = TrainConfig(batch_size=16, max_steps=100, learning_rate=1e-3, min_lr=1e-4, warmup=10, seed=0)
    history = fine_tune(clf, train_x, train_mask, train_y, cfg)
    pred = classify(clf, test_x, test_mask)
    assert (pred == 0).all(), f"{int((pred != 0).sum())} lines classified as tragedies"
    assert (pred == test_y).float().mean().item() == 0.5
    assert abs(sum(history.train_loss[-20:]) / 20 - math.log(2)) < 0.03  # the loss of a coin toss


def test_swap_letters_against_brute_force():
    """Every result is one of the swaps listed by brute force, each pair is reached, the same seed
    gives the same swap, and a line with no pair of adjacent, different letters is refused."""
    line = "O, it's a 'tis eel"
    pairs = [i for i in range(len(line) - 1)
             if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]
    assert pairs == [3, 11, 12, 16]  # "ti" and "is" overlap; "ee" is no pair
    allowed = {line[:i] + line[i + 1] + line[i] + line[i + 2:]: i for i in pairs}
    g = torch.Generator().manual_seed(0)
    seen = {allowed[swap_letters(line, g)] for _ in range(200)}
    assert seen == set(pairs)
    one = [swap_letters(line, torch.Generator().manual_seed(s)) for s in range(20)]
    assert one == [swap_letters(line, torch.Generator().manual_seed(s)) for s in range(20)]
    assert swap_letters("ab", torch.Generator()) == "ba"
    for bad in ("", "aa", "O, I!", "12"):
        with pytest.raises(ValueError, match="no two adjacent, different letters"):
            swap_letters(bad, torch.Generator())
    with pytest.raises(TypeError, match="`line` must be a str"):
        swap_letters(["a", "b"], torch.Generator())
    with pytest.raises(TypeError, match="`generator` must be None or a torch.Generator"):
        swap_letters("ab", 0)


# --------------------------------------------------------------------------- the two steps


def test_mlm_step_equals_the_steps_written_out(tok):
    """mlm_step against the same step written out with torch alone: the masks of mask_tokens from the
    caller's generator, cross_entropy over the chosen positions, zero_grad, backward, step."""
    ids, key_mask = encode_lines(["O, that way madness lies;", "Ay, sir.", "Now is the winter"], tok, 33)
    runs = []
    for manual in (False, True):
        model = tiny_model(tok, context_length=33).train()
        for p in model.parameters():
            p.grad = torch.ones_like(p)  # stale gradients: they must not count
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(3)
        before = torch.get_rng_state()
        if manual:
            inputs, labels = mask_tokens(ids, tok, generator=g)
            logits, _ = model(inputs, key_mask=key_mask)
            loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = loss.item()
        else:
            value = mlm_step(model, opt, ids, tok, key_mask=key_mask, generator=g)
        assert torch.equal(torch.get_rng_state(), before)
        runs.append((value, [p.detach().clone() for p in model.parameters()], g.get_state()))
    (v1, p1, g1), (v2, p2, g2) = runs
    assert v1 == pytest.approx(v2, rel=1e-6) and torch.equal(g1, g2)
    for a, b in zip(p1, p2):
        torch.testing.assert_close(a, b)


def test_mlm_step_with_nothing_chosen_changes_nothing(tok):
    ids = torch.tensor([[tok.cls_id, 5, tok.pad_id]])
    seed = next(s for s in range(100) if (mask_tokens(ids, tok, generator=torch.Generator().manual_seed(s))[1]
                                          == -100).all())
    model = tiny_model(tok)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    assert mlm_step(model, opt, ids, tok, generator=torch.Generator().manual_seed(seed)) is None
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())) and not opt.state


def test_classifier_step_equals_the_steps_written_out(tok):
    ids, key_mask = encode_lines(["O, that way madness lies;", "Ay, sir."], tok, 33)
    labels = torch.tensor([1, 0])
    runs = []
    for manual in (False, True):
        torch.manual_seed(0)
        clf = EncoderClassifier(tiny_model(tok, context_length=33), n_classes=2)
        opt = torch.optim.SGD(clf.parameters(), lr=0.1)
        if manual:
            loss = F.cross_entropy(clf.classifier(clf.body.hidden(ids, key_mask)[:, 0]), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            value = loss.item()
        else:
            value = classifier_step(clf, opt, ids, key_mask, labels)
        runs.append((value, [p.detach().clone() for p in clf.parameters()]))
    assert runs[0][0] == pytest.approx(runs[1][0], rel=1e-6)
    for a, b in zip(runs[0][1], runs[1][1]):
        torch.testing.assert_close(a, b)


def test_step_errors(tok):
    model = tiny_model(tok)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.tensor([[tok.cls_id, 5, 6]])
    with pytest.raises(TypeError, match="`optimizer` must be a torch.optim.Optimizer"):
        mlm_step(model, "adam", ids, tok)
    with pytest.raises(TypeError, match="`model` must be a companion.mlm.EncoderLM"):
        mlm_step(GPT(GPTConfig()), opt, ids, tok)
    with pytest.raises(ValueError, match="`max_norm` must be a number >= 0"):
        mlm_step(model, opt, ids, tok, max_norm=-1)
    with pytest.raises(TypeError, match="`model` must be a companion.mlm.EncoderClassifier"):
        classifier_step(model, opt, ids, None, torch.tensor([0]))
