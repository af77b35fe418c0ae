"""Mutation registry of exercises 9.2 (a post-norm decoder block), 9.3 (the forward pass) and 9.5
(batched greedy decoding): see tests/mutation_harness.py.

The references are the book's solutions, character for character: the last test reads them from
book/09_encoder_decoder.ipynb, so that what the harness proves is about the solution students see.
"""
import inspect
import math
import re
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from companion.exercises import seq2seq_extra as check
from companion.exercises import seq2seq_model
from companion.positional import sinusoidal_encoding
from mutation_harness import Exercise, Mutant, make_tests


# --- 9.2 ---------------------------------------------------------------------------------------------
def my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask):
    # masked self-attention: position t reads the targets up to t
    a, _ = block.attn(x, key_mask=tgt_key_mask, is_causal=True)
    x = block.norm1(x + block.dropout1(a))  # (B, T, d)
    # cross-attention: queries from the target, keys and values from memory
    c, _ = block.cross_attn(x, memory, memory, key_mask=src_key_mask)
    x = block.norm2(x + block.dropout2(c))  # (B, T, d)
    return block.norm3(x + block.dropout3(block.ff(x)))  # (B, T, d)


def _block(order="sa ca ff", *, norm_first=False, residual=(True, True, True), causal=True, cross_causal=False,
           tgt_mask="tk", src_mask="sk", kv="memory", drop="module", norms=(1, 2, 3)):
    """A block from its parts with one mistake (by keyword)."""

    def block_fn(x, memory, block, tk, sk):
        masks = {"tk": tk, "sk": sk, "~tk": ~tk if tk is not None else None, "~sk": ~sk, None: None}

        def dropout(module, h):
            if drop == "module":
                return module(h)
            if drop == "F.dropout":
                return F.dropout(h, p=0.25)  # training=True by default: drops in eval too
            return h

        def sa(h):
            return dropout(block.dropout1, block.attn(h, key_mask=masks[tgt_mask], is_causal=causal)[0])

        def ca(h):
            source = memory if kv == "memory" else h
            return dropout(block.dropout2, block.cross_attn(h, source, source, key_mask=masks[src_mask],
                                                            is_causal=cross_causal)[0])

        def ff(h):
            return dropout(block.dropout3, block.ff(h))

        subs = {"sa": sa, "ca": ca, "ff": ff}
        all_norms = [block.norm1, block.norm2, block.norm3]
        for k, name in enumerate(order.split()):
            norm = all_norms[norms[k] - 1]
            if norm_first:
                x = x + subs[name](norm(x))
            else:
                x = norm(x + subs[name](x)) if residual[k] else norm(subs[name](x))
        return x

    return block_fn


def _dropout_after_sum(x, memory, block, tk, sk):
    a = block.attn(x, key_mask=tk, is_causal=True)[0]
    x = block.norm1(block.dropout1(x + a))
    c = block.cross_attn(x, memory, memory, key_mask=sk)[0]
    x = block.norm2(block.dropout2(x + c))
    return block.norm3(block.dropout3(x + block.ff(x)))


def _residual_from_input(x, memory, block, tk, sk):
    a = block.norm1(x + block.dropout1(block.attn(x, key_mask=tk, is_causal=True)[0]))
    c = block.norm2(x + block.dropout2(block.cross_attn(a, memory, memory, key_mask=sk)[0]))
    return block.norm3(x + block.dropout3(block.ff(c)))


def _calls_the_block(x, memory, block, tk, sk):
    return block(x, memory, key_mask=tk, memory_key_mask=sk)


def _torch_layer(x, memory, block, tk, sk):
    layer = nn.TransformerDecoderLayer(block.d_model, block.n_heads, block.d_ff, dropout=0.0, batch_first=True,
                                       dtype=x.dtype)
    with torch.no_grad():
        for mine, theirs in ((block.attn, layer.self_attn), (block.cross_attn, layer.multihead_attn)):
            theirs.in_proj_weight.copy_(torch.cat([mine.q_proj.weight, mine.k_proj.weight, mine.v_proj.weight]))
            theirs.in_proj_bias.copy_(torch.cat([mine.q_proj.bias, mine.k_proj.bias, mine.v_proj.bias]))
            theirs.out_proj.weight.copy_(mine.out_proj.weight)
            theirs.out_proj.bias.copy_(mine.out_proj.bias)
        for name in ("linear1", "linear2"):
            getattr(layer, name).load_state_dict(getattr(block.ff, name).state_dict())
        for name in ("norm1", "norm2", "norm3"):
            getattr(layer, name).weight.copy_(getattr(block, name).weight)
            getattr(layer, name).bias.copy_(getattr(block, name).bias)
    T = x.shape[1]
    return layer.eval()(x, memory, tgt_mask=torch.ones(T, T, dtype=torch.bool).triu(1),
                        tgt_key_padding_mask=~tk, memory_key_padding_mask=~sk)


def _nan_rows(x, memory, block, tk, sk):
    return my_decoder_block(x, memory, block, tk, sk) * float("nan")


BLOCK = [
    Mutant("pre-norm", _block(norm_first=True), "pre-norm"),
    Mutant("no residuals", _block(residual=(False, False, False)), "residual"),
    Mutant("no residual around self-attention", _block(residual=(False, True, True)), "residual"),
    Mutant("no residual around cross-attention", _block(residual=(True, False, True)), "residual"),
    Mutant("no residual around the feed-forward network", _block(residual=(True, True, False)), "residual"),
    Mutant("residual from the block's input", _residual_from_input, "input of ITS sublayer"),
    Mutant("self-attention not causal", _block(causal=False), "no causal mask"),
    Mutant("causal cross-attention", _block(cross_causal=True), "cross-attention has no causal mask"),
    Mutant("no source mask", _block(src_mask=None), "source padding mask is missing"),
    Mutant("no target mask", _block(tgt_mask=None), "target padding mask is missing"),
    Mutant("masks inverted (torch's convention)", _block(tgt_mask="~tk", src_mask="~sk"), "inverted"),
    Mutant("cross-attention keys and values from the decoder", _block(kv="decoder", src_mask=None), "from `memory`"),
    Mutant("cross-attention from the decoder, source mask kept", _block(kv="decoder"), "ValueError", raised=True),
    Mutant("cross-attention before self-attention", _block(order="ca sa ff"), "the order is"),
    Mutant("feed-forward before cross-attention", _block(order="sa ff ca"), "the order is"),
    Mutant("one LayerNorm for all three", _block(norms=(1, 1, 1)), "its own LayerNorm"),
    Mutant("F.dropout: active in eval", _block(drop="F.dropout"), "dropout is active"),
    Mutant("no dropout", _block(drop=None), "no dropout is applied"),
    Mutant("dropout after the residual sum", _dropout_after_sum, "before the residual sum"),
    Mutant("calls the block itself", _calls_the_block, "called the block itself"),
    Mutant("torch's own decoder layer", _torch_layer, "torch.nn's own decoder layer"),
    Mutant("NaN", _nan_rows),
]


# --- 9.3 ---------------------------------------------------------------------------------------------
def my_seq2seq_forward(model, src, tgt):
    c = model.config
    keep = src != c.pad_id  # (B, S): True = a real source token

    def embed(table, ids):  # E[ids] * sqrt(d) + P, (B, L, d)
        P = sinusoidal_encoding(ids.shape[1], c.d_model)  # (L, d)
        return table(ids) * math.sqrt(c.d_model) + P

    h = embed(model.src_emb, src)  # (B, S, d)
    for block in model.encoder.blocks:  # every source token sees every other
        h = block(h, key_mask=keep)
    memory = model.encoder.norm(h)  # (B, S, d)
    g = embed(model.tgt_emb, tgt)  # (B, T, d)
    for block in model.decoder.blocks:  # causal self-, then cross-attention
        g = block(g, memory, is_causal=True, memory_key_mask=keep)
    return model.head(model.decoder.norm(g))  # (B, T, V): tied to tgt_emb


def _forward(**mistake):
    def forward_fn(model, src, tgt):
        return seq2seq_model._forward_variant(model, src, tgt, mistake.get("variant"))

    return forward_fn


def _calls_model(model, src, tgt):
    return model(src, tgt)[0]


def _encode_decode(model, src, tgt):
    memory = model.encode(src)
    return model.decode(tgt, memory, memory_key_mask=src != model.config.pad_id)


def _detached(model, src, tgt):
    return my_seq2seq_forward(model, src, tgt).detach()


def _tuple(model, src, tgt):
    return my_seq2seq_forward(model, src, tgt), None


def _decoder_output(model, src, tgt):
    logits = my_seq2seq_forward(model, src, tgt)  # (B, T, V)
    return logits @ torch.linalg.pinv(model.tgt_emb.weight.T)  # (B, T, d): forgot the head


def _detached_memory(model, src, tgt):
    """Right values, but memory.detach(): no gradient reaches the encoder or src_emb (red team)."""
    d = model.config.d_model
    keep = src != model.config.pad_id
    h = model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(src.shape[1], d)
    for block in model.encoder.blocks:
        h = block(h, key_mask=keep)
    memory = model.encoder.norm(h).detach()
    g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(tgt.shape[1], d)
    for block in model.decoder.blocks:
        g = block(g, memory, is_causal=True, memory_key_mask=keep)
    return model.head(model.decoder.norm(g))


def _encoder_no_grad(model, src, tgt):
    """Right values, the encoder under torch.no_grad(): no encoder weight trains (red team)."""
    d = model.config.d_model
    keep = src != model.config.pad_id
    with torch.no_grad():
        memory = model.encoder(model.src_emb(src) * math.sqrt(d) + sinusoidal_encoding(src.shape[1], d),
                               key_mask=keep)
    g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(tgt.shape[1], d)
    return model.head(model.decoder(g, memory, memory_key_mask=keep))


def _detached_source_embeddings(model, src, tgt):
    """Right values, model.src_emb(src).detach(): the source table never trains (red team)."""
    d = model.config.d_model
    keep = src != model.config.pad_id
    memory = model.encoder(model.src_emb(src).detach() * math.sqrt(d) + sinusoidal_encoding(src.shape[1], d),
                           key_mask=keep)
    g = model.tgt_emb(tgt) * math.sqrt(d) + sinusoidal_encoding(tgt.shape[1], d)
    return model.head(model.decoder(g, memory, memory_key_mask=keep))


def _scales_tables_once(model, src, tgt):
    """Multiplies the embedding tables by sqrt(d) in place and never restores them: right once (red team)."""
    d = model.config.d_model
    with torch.no_grad():
        model.src_emb.weight.mul_(math.sqrt(d))
        model.tgt_emb.weight.mul_(math.sqrt(d))
    keep = src != model.config.pad_id
    memory = model.encoder(model.src_emb(src) + sinusoidal_encoding(src.shape[1], d), key_mask=keep)
    g = model.decoder(model.tgt_emb(tgt) + sinusoidal_encoding(tgt.shape[1], d), memory, memory_key_mask=keep)
    return g @ model.tgt_emb.weight.T / math.sqrt(d)


def _scales_and_restores(model, src, tgt):
    """Scales the tables in place and divides them back: the weights drift by rounding (red team's variant)."""
    d = model.config.d_model
    with torch.no_grad():
        model.src_emb.weight.mul_(math.sqrt(d))
        model.tgt_emb.weight.mul_(math.sqrt(d))
    keep = src != model.config.pad_id
    memory = model.encoder(model.src_emb(src) + sinusoidal_encoding(src.shape[1], d), key_mask=keep)
    g = model.decoder(model.tgt_emb(tgt) + sinusoidal_encoding(tgt.shape[1], d), memory, memory_key_mask=keep)
    out = g @ (model.tgt_emb.weight / math.sqrt(d)).T
    with torch.no_grad():
        model.src_emb.weight.div_(math.sqrt(d) ** 0.5)
        model.tgt_emb.weight.div_(math.sqrt(d) ** 0.5)
    return out


def _nan_at_padding(model, src, tgt):
    """Right at the real target positions, NaN at the padded ones: NaN gradients in training."""
    out = my_seq2seq_forward(model, src, tgt)
    return out.masked_fill((tgt == model.config.pad_id)[..., None], float("nan"))


def _tail_grad_scaled(model, src, tgt):
    """Right values, but the decoder's last norm gets twice its gradient (a straight-through trick gone wrong)."""
    out = my_seq2seq_forward(model, src, tgt)
    return out + (out - out.detach())


FORWARD = [Mutant(variant, _forward(variant=variant), words) for variant, words in [
    ("no scale", "sqrt(d_model)"), ("scale after", "(E[x] + P) * sqrt(d)"), ("scale d", "not d_model"),
    ("no positions", "positions are missing"), ("positions from 1", "start at 0"),
    ("no encoder mask", "encoder's self-attention"), ("no memory mask", "cross-attention must not"),
    ("pad 0", "model.config.pad_id (here not 0)"), ("causal encoder", "encoder has no causal mask"),
    ("not causal", "is_causal=True"), ("no encoder norm", "model.encoder.norm"),
    ("no decoder norm", "model.decoder.norm"), ("no encoder", "not the embedded source"),
    ("source table for target", "its own embedding table"), ("source head", "TARGET embedding"),
    ("softmax", "before any softmax"), ("log-softmax", "(log-)softmax"),
]] + [
    Mutant("calls the model", _calls_model, "which the check compares with"),
    Mutant("encode and decode", _encode_decode, "which the check compares with"),
    Mutant("detached", _detached, "no gradient"),
    Mutant("returns a tuple", _tuple, "not a tuple"),
    Mutant("the decoder's output", _decoder_output, "apply model.head"),
    Mutant("memory detached", _detached_memory, "no gradient reaches model.src_emb, model.encoder"),
    Mutant("encoder under no_grad", _encoder_no_grad, "no gradient reaches model.src_emb, model.encoder"),
    Mutant("source embeddings detached", _detached_source_embeddings, "no gradient reaches model.src_emb:"),
    Mutant("tables scaled in place, once", _scales_tables_once, "changed the model's src_emb.weight in place"),
    Mutant("tables scaled in place and back", _scales_and_restores, "in place"),
    Mutant("NaN at the padded positions", _nan_at_padding, "NaN or infinite"),
    Mutant("gradients doubled", _tail_grad_scaled, "gradient that reaches"),
]


# --- 9.5 ---------------------------------------------------------------------------------------------
def my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens):
    pad_id = model.config.pad_id
    keep = src != pad_id  # (B, S): the source's padding mask
    memory = model.encode(src)  # (B, S, d): the source, encoded once
    ys = torch.full((src.shape[0], 1), bos_id)  # (B, 1): <s>
    done = torch.zeros(src.shape[0], dtype=torch.bool)  # (B,)
    for _ in range(max_new_tokens):
        logits = model.decode(ys, memory, memory_key_mask=keep)  # (B, t, V)
        nxt = logits[:, -1].argmax(dim=-1)  # (B,): the last position's best
        nxt = nxt.masked_fill(done, pad_id)  # finished rows get padding
        ys = torch.cat([ys, nxt[:, None]], dim=1)  # (B, t + 1)
        done = done | (nxt == eos_id)
        if done.all():  # every row has written its </s>
            break
    return ys[:, 1:]  # (B, L): without the <s> column


def _greedy(variant):
    def greedy_fn(model, src, bos_id, eos_id, max_new_tokens):
        return seq2seq_model._greedy_variant(model, src, bos_id, eos_id, max_new_tokens, variant)

    return greedy_fn


def _uses_companion_greedy(model, src, bos_id, eos_id, max_new_tokens):
    from companion.decoding import greedy

    out = greedy(model.conditioned_on(src), torch.full((src.shape[0], 1), bos_id), max_new_tokens, eos_id=eos_id)
    return out[:, 1:]


def _sampling(model, src, bos_id, eos_id, max_new_tokens):
    pad_id = model.config.pad_id
    memory = model.encode(src)
    ys = torch.full((src.shape[0], 1), bos_id)
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        probs = model.decode(ys, memory, memory_key_mask=src != pad_id)[:, -1].softmax(-1)
        nxt = torch.multinomial(probs, 1)[:, 0].masked_fill(done, pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done = done | (nxt == eos_id)
        if done.all():
            break
    return ys[:, 1:]


def _lists(model, src, bos_id, eos_id, max_new_tokens):
    return my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens).tolist()


GREEDY = [Mutant(variant, _greedy(variant), words) for variant, words in [
    ("no stop", "must stop"), ("stop at first", "FIRST row"), ("stop with row 0", "row 0 finished"),
    ("full length", "as soon as every row"), ("no memory mask", "padding mask"), ("keeps bos", "without the <s>"),
    ("drops eos", "keep each row's </s>"), ("pad with eos", "not with more </s>"),
    ("first position", "LAST position"), ("one too many", "at most max_new_tokens"),
    ("one too few", "not one fewer"), ("last token only", "whole prefix"), ("start with eos", "start every row"),
]] + [
    Mutant("the companion's greedy", _uses_companion_greedy, "course's own decoder"),
    Mutant("sampling", _sampling),
    Mutant("a list of lists", _lists, "not a list"),
    Mutant("float ids", lambda *a: my_greedy_translate(*a).float(), "LongTensor"),
    Mutant("bos hard-coded 1", lambda m, s, b, e, n: my_greedy_translate(m, s, 1, e, n), "bos_id you are given"),
    Mutant("eos hard-coded 2", _greedy("eos 2"), "eos_id you are given"),
    Mutant("pad hard-coded 0", _greedy("pad 0"), "model.config.pad_id"),
]

EXERCISES = [
    Exercise(check.decoder_block, my_decoder_block, BLOCK),
    Exercise(check.seq2seq_forward, my_seq2seq_forward, FORWARD),
    Exercise(check.batched_greedy, my_greedy_translate, GREEDY),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "09_encoder_decoder.ipynb"


def test_references_are_the_notebooks_solutions():
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    solutions = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            solutions[re.search(r"^def (\w+)\(", cell.source, re.M).group(1)] = cell.source.strip()
    for exercise in EXERCISES:
        name = exercise.reference.__name__
        assert inspect.getsource(exercise.reference).strip() == solutions[name], (
            f"{exercise.name}: the registry's {name} differs from the solution cell of {NOTEBOOK.name}")
