"""Tests for chapter 9's model exercises: 9.2 (a post-norm decoder block), 9.3 (the forward pass)
and 9.5 (batched greedy decoding), in ``companion.exercises.seq2seq_model``.

Right answers written differently from the book's pass; wrong answers as students write them
(the mutation registry, tests/test_checker_mutations_ch09_model.py, holds them with the hint each
must get) never pass; the checkers' own references agree with independent ones (torch.nn's
decoder layer and transformer, decoding each source alone); junk never crashes a checker.
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from companion.exercises import seq2seq_extra, seq2seq_model as check
from companion.positional import sinusoidal_encoding


# ------------------------------------------------------------------ 9.2 the decoder block
def block_ok(x, memory, block, tgt_key_mask, src_key_mask):
    out, _ = block.attn(x, key_mask=tgt_key_mask, is_causal=True)
    x = block.norm1(x + block.dropout1(out))
    out, _ = block.cross_attn(x, memory, memory, key_mask=src_key_mask)
    x = block.norm2(x + block.dropout2(out))
    return block.norm3(x + block.dropout3(block.ff(x)))


def block_with_attn_mask(x, memory, block, tgt_key_mask, src_key_mask):
    """Right too: the causal mask as an explicit (T, T) mask, F.dropout obeying block.training."""
    T = x.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # True = may attend
    a = block.attn(x, attn_mask=causal, key_mask=tgt_key_mask)[0]
    x = block.norm1(x + block.dropout1(a))
    c = block.cross_attn(x, memory, memory, key_mask=src_key_mask)[0]
    x = block.norm2(x + block.dropout2(c))
    return block.norm3(x + block.dropout3(block.ff(x)))


def test_block_right_answers_pass():
    for fn in (block_ok, block_with_attn_mask):
        fb = check.decoder_block(fn)
        assert fb.passed, fb


def test_block_reference_is_torchs_layer():
    """The checker's hand-written block (variant None) equals torch's decoder layer, in both modes."""
    layer, block, x, memory, tk, sk = check._block_case(7, 2, 4, 6, 8, 2, 16, (4, 2), (6, 3))
    want = check._torch_reference(layer.eval(), x, memory, tk, sk)
    torch.testing.assert_close(check._block_variant(x, memory, block.eval(), tk, sk), want)
    check._fix_dropout(layer, block, 1, (2, 4, 8))
    want = check._torch_reference(layer, x, memory, tk, sk)
    torch.testing.assert_close(check._block_variant(x, memory, block, tk, sk), want)
    assert not torch.allclose(check._block_variant(x, memory, block, tk, sk, "no dropout"), want)


def test_block_variants_all_differ_from_the_right_answer():
    layer, block, x, memory, tk, sk = check._block_case(92, 3, 5, 7, 8, 2, 16, (5, 3, 4), (7, 4, 2))
    right = check._block_variant(x, memory, block.eval(), tk, sk)
    for variant, _ in check._BLOCK_MISTAKES:
        wrong = check._block_variant(x, memory, block, tk, sk, variant)
        assert not torch.allclose(torch.nan_to_num(wrong, nan=7.0), right), variant


def test_block_stub_is_not_attempted():
    def stub(x, memory, block, tgt_key_mask, src_key_mask):
        raise NotImplementedError

    assert check.decoder_block(stub).status == "not attempted"
    assert check.decoder_block(...).status == "not attempted"


def test_checks_leave_the_callers_random_numbers_alone():
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    assert check.decoder_block(block_ok).passed and check.seq2seq_forward(forward_ok).passed
    assert check.batched_greedy(greedy_ok).passed
    assert torch.equal(torch.rand(3), expected)  # the cases are built on forked generators


# ------------------------------------------------------------------ 9.3 the forward pass
def forward_ok(model, src, tgt):
    d = model.config.d_model
    keep = src != model.config.pad_id
    h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(src.shape[1], d)
    for block in model.encoder.blocks:
        h = block(h, key_mask=keep)
    memory = model.encoder.norm(h)
    g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(tgt.shape[1], d)
    for block in model.decoder.blocks:
        g = block(g, memory, is_causal=True, memory_key_mask=keep)
    return model.head(model.decoder.norm(g))


def forward_with_pos_module(model, src, tgt):
    """Right too: model.pos adds the table; the head written as a product with the tied table."""
    d = model.config.d_model
    keep = src != model.config.pad_id
    h = model.pos(model.src_emb.weight[src] * d ** 0.5)
    for block in model.encoder.blocks:
        h = block(h, key_mask=keep)
    memory = model.encoder.norm(h)
    g = model.pos(model.tgt_emb.weight[tgt] * d ** 0.5)
    for block in model.decoder.blocks:
        g = block(g, memory, memory_key_mask=keep, is_causal=True)
    return model.decoder.norm(g) @ model.tgt_emb.weight.T


def forward_with_stacks(model, src, tgt):
    """Right too: the stacks model.encoder(...) and model.decoder(...) (blocks and final norm inside),
    which the text does not ban; the embeddings, scale, positions, masks and head are still written."""
    d = model.config.d_model
    keep = src != model.config.pad_id
    memory = model.encoder(model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(src.shape[1], d), key_mask=keep)
    g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(tgt.shape[1], d)
    return model.head(model.decoder(g, memory, memory_key_mask=keep))


def forward_with_target_key_mask(model, src, tgt):
    """Right too: the padded target keys masked as well. Targets are padded on the right, so with the
    causal mask only the padded positions change, and the loss ignores those."""
    d = model.config.d_model
    keep = src != model.config.pad_id
    memory = model.encoder(model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(src.shape[1], d), key_mask=keep)
    g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(tgt.shape[1], d)
    tk = tgt != model.config.pad_id
    return model.head(model.decoder(g, memory, key_mask=tk, memory_key_mask=keep))


def test_forward_checks_padded_targets_at_their_real_positions():
    """The check's targets end in padding (as a teacher-forced batch does); a target key mask changes
    the logits there, and only there: the check compares the positions the loss counts."""
    shape = dict(vocab_size=13, context_length=16, d_model=8, n_heads=2, n_encoder_layers=2, n_decoder_layers=2,
                 d_ff=16)
    model, src, tgt = check._forward_case(93, (7, 4, 2), 5, 0, t_lens=(5, 3, 4), **shape)
    real = tgt != 0
    assert not bool(real.all())
    with torch.no_grad():
        plain, masked = forward_ok(model, src, tgt), forward_with_target_key_mask(model, src, tgt)
    assert not torch.allclose(plain[~real], masked[~real], atol=1e-4)
    torch.testing.assert_close(plain[real], masked[real], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(masked, model(src, tgt, tgt_key_mask=real)[0], rtol=1e-4, atol=1e-5)


def test_forward_right_answers_pass():
    for fn in (forward_ok, forward_with_pos_module, forward_with_stacks, forward_with_target_key_mask):
        fb = check.seq2seq_forward(fn)
        assert fb.passed, fb


def test_forward_reference_is_torchs_transformer():
    """The model the check compares with equals torch.nn.Transformer (same weights) plus the embeddings
    and the tied head, so the check's reference is not the companion's word alone."""
    shape = dict(vocab_size=13, context_length=16, d_model=8, n_heads=2, n_encoder_layers=2, n_decoder_layers=2,
                 d_ff=16)
    model, src, tgt = check._forward_case(93, (7, 4, 2), 5, 0, **shape)
    ref = nn.Transformer(d_model=8, nhead=2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16,
                         dropout=0.0, batch_first=True).eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    model.encoder.copy_from_torch(ref.encoder)
    model.decoder.copy_from_torch(ref.decoder)
    pad = src == 0
    with torch.no_grad():
        theirs = ref(model.embed_source(src), model.embed_target(tgt),
                     tgt_mask=nn.Transformer.generate_square_subsequent_mask(5), src_key_padding_mask=pad,
                     memory_key_padding_mask=pad) @ model.tgt_emb.weight.T
        torch.testing.assert_close(forward_ok(model, src, tgt), theirs, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(model(src, tgt)[0], theirs, rtol=1e-4, atol=1e-5)


def test_forward_variants_all_differ():
    shape = dict(vocab_size=11, context_length=12, d_model=12, n_heads=3, n_encoder_layers=1, n_decoder_layers=2,
                 d_ff=24)
    model, src, tgt = check._forward_case(94, (3, 6, 5, 1), 7, 3, **shape)
    with torch.no_grad():
        right = model(src, tgt)[0]
        for variant, _ in check._FORWARD_MISTAKES:
            assert not torch.allclose(check._forward_variant(model, src, tgt, variant), right, atol=1e-4), variant


def test_forward_stub_is_not_attempted():
    def stub(model, src, tgt):
        raise NotImplementedError

    assert check.seq2seq_forward(stub).status == "not attempted"


# ------------------------------------------------------------------ 9.5 batched greedy decoding
def greedy_ok(model, src, bos_id, eos_id, max_new_tokens):
    pad_id = model.config.pad_id
    keep = src != pad_id
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model.decode(ys, memory, memory_key_mask=keep)
        nxt = logits[:, -1].argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done = done | (nxt == eos_id)
        if done.all():
            break
    return ys[:, 1:]


def greedy_lists(model, src, bos_id, eos_id, max_new_tokens):
    """Right too: Python lists for the rows still running, the model's forward pass at every step."""
    pad = model.config.pad_id
    rows = [[bos_id] for _ in range(src.shape[0])]
    running = list(range(src.shape[0]))
    with torch.no_grad():
        for _ in range(max_new_tokens):
            if not running:
                break
            ys = torch.tensor([rows[b] for b in running])
            logits, _ = model(src[running], ys)
            for b, t in zip(running, logits[:, -1].argmax(-1).tolist()):
                rows[b].append(t)
            running = [b for b in running if rows[b][-1] != eos_id]
    width = max(len(r) for r in rows) - 1
    return torch.tensor([r[1:] + [pad] * (width - len(r) + 1) for r in rows])


def test_greedy_right_answers_pass():
    for fn in (greedy_ok, greedy_lists):
        fb = check.batched_greedy(fn)
        assert fb.passed, fb


def test_greedy_cases_are_worth_checking():
    """The cases have rows that end at different steps, and one that does not end; the reference
    (each source alone) equals the companion's decoders, an independent implementation."""
    from companion.decoding import greedy

    for model, src, bos, eos, n in check._greedy_cases():
        pad = model.config.pad_id
        rows = [check._greedy_alone(model, row[row != pad], bos, eos, n) for row in src]
        ends = [len(r) for r in rows if r[-1] == eos]
        assert len(set(ends)) >= 2
        for row, got in zip(src, rows):
            ids = greedy(model.conditioned_on(row[row != pad][None]), [bos], n, eos_id=eos)[1:].tolist()
            assert ids[:len(got)] == got
    model, src, bos, eos, n = check._random_greedy_case()
    rows = [check._greedy_alone(model, row[row != 3], bos, eos, n) for row in src]
    assert any(r[-1] != eos for r in rows)  # a row that never ends
    model, src, bos, eos, n = check._other_ids_greedy_case()
    assert (bos, eos) != (1, 2)  # ids given as arguments, not hard-coded
    rows = [check._greedy_alone(model, row[row != 0], bos, eos, n) for row in src]
    assert any(r[-1] != eos for r in rows) and any(2 in r for r in rows)


def test_greedy_variants_all_differ_somewhere():
    for variant, _ in check._GREEDY_MISTAKES:
        differs = False
        for model, src, bos, eos, n in check._greedy_cases():
            pad = model.config.pad_id
            want = check._pack([check._greedy_alone(model, row[row != pad], bos, eos, n) for row in src], pad)
            wrong = check._greedy_variant(model, src, bos, eos, n, variant)
            differs |= wrong.shape != want.shape or not torch.equal(wrong, want)
        assert differs, variant


def test_greedy_stub_is_not_attempted():
    def stub(model, src, bos_id, eos_id, max_new_tokens):
        raise NotImplementedError

    assert check.batched_greedy(stub).status == "not attempted"


# ------------------------------------------------------------------ all three
@pytest.mark.parametrize("answer", [None, "text", 3, (1,), [torch.zeros(2)], torch.zeros(0), torch.zeros(3, 5, 8),
                                    torch.full((3, 5, 13), float("nan")), torch.zeros(6, 2, dtype=torch.complex64),
                                    torch.ones(6, 3, dtype=torch.bool), {"a": 1}, float("inf")])
def test_no_checker_fails_inside_its_own_code(answer):
    for checker in (check.decoder_block, check.seq2seq_forward, check.batched_greedy):
        fb = checker(lambda *args: answer)
        assert fb.status in ("hint", "not attempted"), (checker.exercise, answer, fb)
        assert not fb.message.startswith("your code raised"), (checker.exercise, answer, fb)


def test_exercise_numbers_and_the_chapter_module():
    assert [c.exercise for c in (check.decoder_block, check.seq2seq_forward, check.batched_greedy)] == [
        "Exercise 9.2", "Exercise 9.3", "Exercise 9.5"]
    for name in check.__all__:
        assert getattr(seq2seq_extra, name) is getattr(check, name)


def test_a_students_exception_is_reported_as_theirs():
    def broken(x, memory, block, tgt_key_mask, src_key_mask):
        return block.attn(x, memory)[0] @ torch.zeros(3, 3)

    fb = check.decoder_block(broken)
    assert fb.status == "hint" and fb.kind == "raised", fb
