"""companion.translation: the number-words task, its tokenizer, chrF against sacrebleu, training
and translating."""
import math
import random
import string
from dataclasses import replace

import pytest
import torch

from companion import translation as tr
from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer
from companion.translation import TranslationTokenizer

pytestmark = pytest.mark.usefixtures("one_thread")


def test_number_words_reorder_units_and_tens():
    assert (tr.english(97), tr.german(97)) == ("ninety-seven", "siebenundneunzig")
    assert (tr.english(342), tr.german(342)) == ("three hundred and forty-two", "dreihundertzweiundvierzig")
    assert tr.german(1) == "eins" and tr.german(21) == "einundzwanzig"  # "eins" alone, "ein" in compounds
    assert (tr.english(9999), tr.german(9999)) == ("nine thousand, nine hundred and ninety-nine",
                                                   "neuntausendneunhundertneunundneunzig")
    assert tr.pairs([16, 70]) == [("sixteen", "sechzehn"), ("seventy", "siebzig")]


@pytest.mark.parametrize("bad", [-1, 10000, 3.0, "7", True])
def test_number_out_of_range(bad):
    with pytest.raises(ValueError, match=r"`n` must be an integer in \[0, 9999\]"):
        tr.german(bad)


def test_splits_cover_every_number_once_and_are_deterministic():
    s = tr.number_splits()
    parts = [s.train, s.valid, s.test, s.unseen_endings]
    assert sum(map(len, parts)) == 10000 and len(set().union(*map(set, parts))) == 10000
    assert (len(s.test), len(s.valid), len(s.unseen_endings)) == (200, 200, 300)
    assert tr.number_splits() == s
    assert tr.number_splits(seed=1).test != s.test


def test_held_out_numbers_are_unseen_but_their_pieces_are_seen():
    s = tr.number_splits()
    train = set(s.train)
    endings = {n % 100 for n in train}
    leading = {n // 100 for n in train}
    for n in s.test:
        assert n not in train
        assert n % 100 in endings and n // 100 in leading  # the pattern of each piece occurs in training
    train_german = " ".join(tr.german(n) for n in s.train)
    for e in tr.HELD_OUT_ENDINGS:
        assert e not in endings
        assert tr.german(e) not in train_german  # "vierunddreißig" never occurs in training
    assert all(n % 100 in tr.HELD_OUT_ENDINGS for n in s.unseen_endings)


def test_split_errors():
    with pytest.raises(ValueError, match="`test_size` must be a non-negative integer"):
        tr.number_splits(test_size=-1)
    with pytest.raises(ValueError, match=r"`max_number` must be in \[99, 9999\]"):
        tr.number_splits(20000)
    with pytest.raises(ValueError, match="`held_out_endings` must be two-digit numbers"):
        tr.number_splits(held_out_endings=(30,))
    with pytest.raises(ValueError, match="must leave numbers to train on"):
        tr.number_splits(99, test_size=90, valid_size=10)
    with pytest.raises(TypeError, match="`numbers` must be a sequence of integers"):
        tr.pairs(5)


# ------------------------------------------------------------------ tokens
def test_tokenizer_round_trip_and_specials():
    tok = TranslationTokenizer.from_texts(["ninety-seven", "siebenundneunzig"])
    assert tok.itos[:3] == ["<pad>", "<s>", "</s>"] and (tok.pad_id, tok.bos_id, tok.eos_id) == (0, 1, 2)
    ids = tok.encode("neun", bos=True, eos=True)
    assert ids[0] == 1 and ids[-1] == 2 and len(ids) == 6
    assert tok.decode(ids) == "neun"
    assert tok.decode([1, *tok.encode("sie").tolist(), 2, 5, 6]) == "sie"  # stops at </s>
    assert TranslationTokenizer.from_dict(tok.to_dict()).chars == tok.chars
    batch = tok.encode_batch(["neun", "sieben"], eos=True)
    assert batch.shape == (2, 7) and batch[0, 5:].tolist() == [0, 0]


def test_tokenizer_errors():
    tok = TranslationTokenizer("abc")
    with pytest.raises(ValueError, match="contains the character 'z' at position 1"):
        tok.encode("az")
    with pytest.raises(TypeError, match="`text` must be a str"):
        tok.encode(5)
    with pytest.raises(ValueError, match="must not repeat a character"):
        TranslationTokenizer("aab")
    with pytest.raises(TypeError, match="`chars` must be a non-empty str"):
        TranslationTokenizer("")
    with pytest.raises(ValueError, match=r"`ids` must lie in \[0, 6\)"):
        tok.decode([9])
    with pytest.raises(ValueError, match=r"`ids` must be one sequence of shape \(L,\)"):
        tok.decode(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(TypeError, match="`ids` must be integers"):
        tok.decode([1.5])
    with pytest.raises(TypeError, match="`texts` must be a sequence of strings"):
        TranslationTokenizer.from_texts("abc")
    with pytest.raises(TypeError, match="`texts` must be a non-empty list of strings"):
        tok.encode_batch([])
    with pytest.raises(ValueError, match="a TranslationTokenizer is stored as"):
        TranslationTokenizer.from_dict({"letters": "abc"})


def test_make_batch_is_teacher_forcing():
    tok = TranslationTokenizer.from_texts(["one", "eins", "twelve", "zwölf"])
    src, tgt_in, tgt_out = tr.make_batch(tok, [("one", "eins"), ("twelve", "zwölf")])
    assert src.shape == (2, 6) and tgt_in.shape == tgt_out.shape == (2, 6)
    assert tok.decode(src[0]) == "one" and src[0, 3:].tolist() == [0, 0, 0]
    assert tgt_in[:, 0].tolist() == [tok.bos_id] * 2  # every decoder input starts with <s>
    real = (tgt_out[:, :-1] != tok.pad_id) & (tgt_out[:, :-1] != tok.eos_id)
    assert torch.equal(tgt_in[:, 1:][real], tgt_out[:, :-1][real])  # the same target, shifted by one
    assert tgt_out[0].tolist() == tok.encode("eins", eos=True).tolist() + [0]
    assert tok.eos_id not in tgt_in.tolist()[0]  # </s> is only ever a target
    with pytest.raises(TypeError, match="`tokenizer` must be a TranslationTokenizer"):
        tr.make_batch(None, [("a", "b")])
    with pytest.raises(TypeError, match="`batch` must be a non-empty list of"):
        tr.make_batch(tok, ["one"])


# ------------------------------------------------------------------ chrF against sacrebleu
def _random_corpus(rng, n):
    alphabet = "abcdeßü -"
    def text():
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
    refs = [text() for _ in range(n)]
    hyps = [r if rng.random() < 0.3 else text() for r in refs]
    return hyps, refs


def test_chrf_equals_sacrebleu():
    sacrebleu = pytest.importorskip("sacrebleu")
    metric = sacrebleu.metrics.CHRF()  # the default: 6 character orders, beta 2, whitespace ignored
    rng = random.Random(0)
    cases = [(["siebenundneunzig"], ["siebenundneunzig"]), (["neunundsiebzig"], ["siebenundneunzig"]),
             (["ab"], ["abcdefgh"]), ([""], ["abc"]), (["abc"], [""]), (["a b c"], ["abc"]),
             (["eins", "zwei drei"], ["eins", "zweidrei"]), (["xyz"], ["abc"])]
    cases += [_random_corpus(rng, n) for n in (1, 3, 10, 40) for _ in range(5)]
    for hyps, refs in cases:
        want = metric.corpus_score(hyps, [refs]).score
        assert tr.chrf(hyps, refs) == pytest.approx(want, abs=1e-9), (hyps, refs)
    hyps, refs = _random_corpus(rng, 20)
    metric3 = sacrebleu.metrics.CHRF(char_order=3, beta=1)
    assert tr.chrf(hyps, refs, n=3, beta=1) == pytest.approx(metric3.corpus_score(hyps, [refs]).score, abs=1e-9)


def test_chrf_and_exact_match_basics():
    assert tr.chrf(["abcdef"], ["abcdef"]) == pytest.approx(100.0)
    assert tr.chrf(["xyz"], ["abc"]) == 0.0
    assert tr.exact_match(["a", "b", "c", "d"], ["a", "x", "c", "y"]) == 0.5
    with pytest.raises(ValueError, match="must have the same length"):
        tr.chrf(["a"], ["a", "b"])
    with pytest.raises(TypeError, match="`hypotheses` must be a list of strings"):
        tr.chrf("abc", ["abc"])
    with pytest.raises(ValueError, match="`hypotheses` must not be empty"):
        tr.exact_match([], [])
    with pytest.raises(ValueError, match="`n` must be a positive integer"):
        tr.chrf(["a"], ["a"], n=0)
    with pytest.raises(ValueError, match="`beta` must be a positive number"):
        tr.chrf(["a"], ["a"], beta=0)


# ------------------------------------------------------------------ training and translating
def _tiny_setup(numbers=range(1, 60)):
    data = tr.pairs(list(numbers))
    tok = TranslationTokenizer.from_texts([t for p in data for t in p])
    torch.manual_seed(0)
    config = Seq2SeqConfig(vocab_size=tok.vocab_size, context_length=40, d_model=16, n_heads=2,
                           n_encoder_layers=1, n_decoder_layers=1)
    return data, tok, Seq2SeqTransformer(config)


def test_training_lowers_the_loss_and_is_deterministic():
    data, tok, model = _tiny_setup()
    cfg = replace(tr.TRAIN_CONFIG, batch_size=16, max_steps=30, warmup=5, eval_interval=10)
    history = tr.train(model, tok, data, cfg, valid=data[:10])
    assert len(history.train_loss) == 30 and history.eval_steps == [10, 20, 30]
    assert sum(history.train_loss[-5:]) / 5 < sum(history.train_loss[:5]) / 5 - 0.5
    _, _, again = _tiny_setup()
    tr.train(again, tok, data, cfg)
    for a, b in zip(model.parameters(), again.parameters()):
        assert torch.equal(a, b)


def test_train_errors():
    data, tok, model = _tiny_setup()
    with pytest.raises(TypeError, match="`model` must be a Seq2SeqTransformer"):
        tr.train(None, tok, data, tr.TRAIN_CONFIG)
    with pytest.raises(TypeError, match="`cfg` must be a companion.train.TrainConfig"):
        tr.train(model, tok, data, {"max_steps": 3})
    with pytest.raises(ValueError, match="`data` must be a non-empty list"):
        tr.train(model, tok, [], tr.TRAIN_CONFIG)
    with pytest.raises(ValueError, match="the model's vocab_size is"):
        tr.train(model, TranslationTokenizer("ab"), data, tr.TRAIN_CONFIG)


def test_translate_greedy_equals_beam_of_one_and_evaluate_scores():
    data, tok, model = _tiny_setup()
    tr.train(model, tok, data, replace(tr.TRAIN_CONFIG, batch_size=16, max_steps=40, warmup=5))
    sources = [s for s, _ in data[:6]]
    greedy = tr.translate(model, tok, sources, max_new_tokens=12)
    assert greedy == tr.translate(model, tok, sources, k=1, max_new_tokens=12)  # no length normalization
    assert greedy == [tr.translate(model, tok, [s], max_new_tokens=12)[0] for s in sources]  # batching
    table = tr.evaluate(model, tok, data[:6], {"greedy": {"max_new_tokens": 12}})
    refs = [t for _, t in data[:6]]
    assert table["greedy"]["chrf"] == pytest.approx(tr.chrf(greedy, refs))
    assert table["greedy"]["exact"] == pytest.approx(100 * tr.exact_match(greedy, refs))
    assert "exact %" in tr.format_table({"test": table})
    with pytest.raises(ValueError, match="`k` must be None"):
        tr.translate(model, tok, sources, k=0)
    with pytest.raises(TypeError, match="`sources` must be a list of strings"):
        tr.translate(model, tok, "one")
    with pytest.raises(ValueError, match="`max_new_tokens` must be None or an integer >= 1"):
        tr.translate(model, tok, sources, max_new_tokens=0)
    with pytest.raises(TypeError, match="`decoders` must map names to keyword arguments"):
        tr.evaluate(model, tok, data[:2], {"greedy": None})


def test_command_line_trains_and_saves(tmp_path, capsys):
    from companion.checkpoint import load_checkpoint

    out = tmp_path / "m.safetensors"
    assert tr.main(["train", "--steps", "2", "--no-eval", "--out", str(out)]) == 0
    model, tok, extra = load_checkpoint(out)
    assert isinstance(model, Seq2SeqTransformer) and isinstance(tok, TranslationTokenizer)
    assert extra["info"]["steps"] == 2 and extra["info"]["command"].startswith("python -m companion.translation train")
    with pytest.raises(SystemExit):
        tr.main(["train", "--steps", "0", "--out", str(out)])


def test_shipped_model_translates_held_out_numbers():
    from companion.checkpoint import load_checkpoint
    from companion.data import asset_path

    try:
        path = asset_path(tr.SHIPPED_MODEL)
    except FileNotFoundError:
        pytest.skip("the chapter 9 model is not shipped in this checkout")
    model, tok, extra = load_checkpoint(path)
    splits = tr.number_splits()
    test = tr.pairs(splits.test)
    hyps = tr.translate(model, tok, [s for s, _ in test])
    exact = 100 * tr.exact_match(hyps, [t for _, t in test])
    assert exact == pytest.approx(extra["info"]["scores"]["test"]["greedy"]["exact"], abs=1.0)
    assert exact > 90


def test_command_line_evaluates_and_stores_the_table(tmp_path, monkeypatch, capsys):
    from companion.checkpoint import load_checkpoint

    out = tmp_path / "m.safetensors"
    assert tr.main(["train", "--steps", "1", "--no-eval", "--out", str(out)]) == 0
    monkeypatch.setattr(tr, "DECODERS", {"greedy": {"max_new_tokens": 3}})  # a quick table
    assert tr.main(["evaluate", str(out), "--sets", "unseen", "--write"]) == 0
    assert tr.main(["evaluate", str(out), "--sets", "test", "--write"]) == 0
    scores = load_checkpoint(out)[2]["info"]["scores"]
    assert set(scores) == {"test", "unseen endings"} and set(scores["test"]) == {"greedy"}
    assert "exact %" in capsys.readouterr().out


# ------------------------------------------------------------------ label smoothing, a forward hook, confidence
def test_smoothed_cross_entropy_is_the_smoothed_target_by_hand():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 4, 7, generator=g)
    targets = torch.tensor([[3, 4, 0, 0], [5, 6, 2, 0]])  # 0 = padding
    eps = 0.1
    logp = logits.log_softmax(-1)
    q = torch.full_like(logp, eps / 7)
    q.scatter_add_(-1, targets[..., None], torch.full((2, 4, 1), 1 - eps))  # (1 - eps) one-hot + eps / V
    per_token = -(q * logp).sum(-1)  # (B, T)
    keep = targets != 0
    assert tr.smoothed_cross_entropy(logits, targets, 0, eps) == pytest.approx(per_token[keep].mean().item(), rel=1e-5)
    plain = torch.nn.functional.cross_entropy(logits.reshape(8, 7), targets.reshape(8), ignore_index=0)
    assert tr.smoothed_cross_entropy(logits, targets, 0) == pytest.approx(plain.item())
    with pytest.raises(ValueError, match="`label_smoothing` must be"):
        tr.smoothed_cross_entropy(logits, targets, 0, 1.0)
    with pytest.raises(ValueError, match=r"`logits` must have shape \(B, T, V\)"):
        tr.smoothed_cross_entropy(logits[0], targets, 0)


def test_train_with_a_forward_hook_and_label_smoothing():
    data, tok, model = _tiny_setup()
    cfg = replace(tr.TRAIN_CONFIG, batch_size=16, max_steps=8, warmup=2, eval_interval=0)
    calls = []

    def forward(m, src, tgt_in):
        calls.append(tuple(src.shape))
        return m(src, tgt_in)[0]

    _, _, plain = _tiny_setup()
    tr.train(plain, tok, data, cfg)
    tr.train(model, tok, data, cfg, forward=forward)  # the same computation through the hook
    assert len(calls) == 8
    for a, b in zip(model.parameters(), plain.parameters()):
        torch.testing.assert_close(a, b)
    _, _, smooth = _tiny_setup()
    history = tr.train(smooth, tok, data, cfg, label_smoothing=0.1)
    assert not torch.equal(smooth.head.weight, plain.head.weight)
    assert all(math.isfinite(x) for x in history.train_loss)
    with pytest.raises(ValueError, match="`label_smoothing` must be"):
        tr.train(model, tok, data, cfg, label_smoothing=-0.1)
    with pytest.raises(TypeError, match="`forward` must be a function"):
        tr.train(model, tok, data, cfg, forward="model")


def test_token_confidence_by_hand():
    data, tok, model = _tiny_setup()
    model.eval()
    got = tr.token_confidence(model, tok, data[:5])
    conf, right, p_right, nll, n = 0.0, 0, 0.0, 0.0, 0
    with torch.no_grad():
        for source, target in data[:5]:
            src, tgt_in, tgt_out = tr.make_batch(tok, [(source, target)])
            p = model(src, tgt_in)[0][0].softmax(-1)  # (T, V)
            for t, y in enumerate(tgt_out[0].tolist()):
                conf += p[t].max().item()
                right += int(p[t].argmax()) == y
                p_right += p[t, y].item()
                nll -= math.log(p[t, y].item())
                n += 1
    assert got == pytest.approx({"confidence": conf / n, "accuracy": right / n, "p_right": p_right / n,
                                 "nll": nll / n}, rel=1e-4)
    with pytest.raises(TypeError, match="`model` must be a Seq2SeqTransformer"):
        tr.token_confidence(None, tok, data)


def test_the_live_run_settings():
    splits = tr.number_splits(**tr.LIVE_SPLIT)
    assert (len(splits.train), len(splits.test), len(splits.unseen_endings)) == (870, 100, 30)
    assert tr.LIVE_TRAIN_CONFIG.max_steps == 300 and tr.LIVE_TRAIN_CONFIG.batch_size == 32
