"""Checkers for chapter 9's exercises on the model itself (the chapter imports them through
:mod:`companion.exercises.seq2seq_extra`):

* Exercise 9.2 :func:`decoder_block` — a post-norm decoder block from the parts of a
  :class:`~companion.block.DecoderBlock`, checked against ``torch.nn.TransformerDecoderLayer``
  (``norm_first=False``) with the same weights, in evaluation mode and, with dropout masks fixed
  in advance, in training mode;
* Exercise 9.3 :func:`seq2seq_forward` — the encoder-decoder's forward pass from its parts,
  checked against :class:`~companion.seq2seq.Seq2SeqTransformer` itself given the same weights:
  the logits at every target position that is not padding (the targets end in padding, as a
  teacher-forced batch does; the loss ignores those positions), the gradient of every parameter
  (of a fixed random linear function of those logits), and the weights left unchanged, a second
  call giving the same logits. The stacks ``model.encoder(...)`` and ``model.decoder(...)`` are
  allowed (the text bans only ``model(...)``, ``encode``, ``decode`` and ``embed_*``);
* Exercise 9.5 :func:`batched_greedy` — greedy decoding of a padded batch of sources, each row
  stopping at its own ``</s>``, checked against decoding each source alone, unpadded, with a
  plain loop over the model's forward pass.

They recognize the classic slips: pre-norm instead of post-norm, a missing residual, the causal
mask forgotten or put on cross-attention, a padding mask forgotten or inverted, cross-attention
reading its keys and values from the decoder, dropout active at evaluation or misplaced in
training; embeddings without ``sqrt(d_model)`` or positions, the source padding mask forgotten,
a final LayerNorm skipped, the wrong table as the head, a graph cut before some weights (``detach``,
``torch.no_grad()``), weights changed in place; rows that do not stop at ``</s>``, a
batch that stops at the first row's ``</s>`` or runs on after the last, padding with the wrong
token, the source padding mask left out of cross-attention while decoding, ``<s>``, ``</s>`` or ``<pad>``
hard-coded (one case has ``bos_id=5``, ``eos_id=4``, another ``pad_id=3``).
"""
from __future__ import annotations

import math
from functools import lru_cache

import torch
from torch import nn

from . import rules
from ._core import (checker, close, describe, first_difference, hint, passed, require_graph, require_tensor,
                    source_facts)

__all__ = ["decoder_block", "seq2seq_forward", "batched_greedy"]


# ------------------------------------------------------------------------------- Exercise 9.2
class _FixedDropout(nn.Module):
    """Dropout whose mask was drawn in advance: ``x * mask`` in training, ``x`` in evaluation.

    The check swaps it for the block's ``dropout1..3`` (and the same object into the torch layer),
    so that training mode gives one answer that can be compared, and a misplaced dropout shows.
    """

    def __init__(self, mask: torch.Tensor, p: float):
        super().__init__()
        self.mask, self.p = mask, p

    def forward(self, x):
        return x * self.mask if self.training else x


def _block_case(seed, B, T, S, d, h, d_ff, t_lens, s_lens, p=0.25):
    """A torch decoder layer, a companion DecoderBlock with its weights, inputs and masks (float64)."""
    from companion.block import DecoderBlock

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = nn.TransformerDecoderLayer(d, h, d_ff, dropout=p, batch_first=True, norm_first=False,
                                           dtype=torch.float64)
        with torch.no_grad():
            for name, param in layer.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    param.copy_(1 + 0.5 * torch.randn_like(param))  # norms that are not the identity
                elif name.endswith("bias"):
                    param.copy_(0.3 * torch.randn_like(param))
        block = DecoderBlock(d, h, d_ff, dropout=p).double().copy_from_torch(layer)
        x = torch.randn(B, T, d, dtype=torch.float64) * 2 + 0.5
        memory = torch.randn(B, S, d, dtype=torch.float64)
    tk = torch.arange(T)[None, :] < torch.tensor(t_lens)[:, None]  # (B, T): True = a real token
    sk = torch.arange(S)[None, :] < torch.tensor(s_lens)[:, None]  # (B, S)
    return layer, block, x, memory, tk, sk


def _torch_reference(layer, x, memory, tk, sk):
    T = x.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool).triu(1)  # torch: True = may NOT attend
    with torch.no_grad():
        return layer(x, memory, tgt_mask=causal, tgt_key_padding_mask=~tk, memory_key_padding_mask=~sk)


def _fix_dropout(layer, block, seed, shape, p=0.25):
    """Training mode with dropout masks drawn here, the same in the torch layer and the block."""
    g = torch.Generator().manual_seed(seed)
    masks = [(torch.rand(shape, generator=g, dtype=torch.float64) > p).double() / (1 - p) for _ in range(3)]
    fixed = [_FixedDropout(m, p) for m in masks]
    layer.self_attn.dropout = layer.multihead_attn.dropout = 0.0  # attention weights: no dropout here
    layer.dropout = nn.Identity()  # inside the feed-forward network
    layer.dropout1, layer.dropout2, layer.dropout3 = fixed
    block.attn.dropout = block.cross_attn.dropout = 0.0
    block.ff.dropout = nn.Identity()
    block.dropout1, block.dropout2, block.dropout3 = fixed
    layer.train()
    block.train()


def _block_variant(x, memory, block, tk, sk, variant=None):
    """The block from its parts, and its classic mistakes (by ``variant``)."""
    inverted = variant == "inverted masks"

    def sa(h):
        mask = None if variant == "no target mask" else (~tk if inverted else tk)
        out, _ = block.attn(h, key_mask=mask, is_causal=variant != "not causal")
        return out if variant == "no dropout" else block.dropout1(out)

    def ca(h):
        kv = h if variant == "cross from decoder" else memory
        mask = None if variant in ("no source mask", "cross from decoder") else (~sk if inverted else sk)
        out, _ = block.cross_attn(h, kv, kv, key_mask=mask, is_causal=variant == "causal cross")
        return out if variant == "no dropout" else block.dropout2(out)

    def ff(h):
        out = block.ff(h)
        return out if variant == "no dropout" else block.dropout3(out)

    n1, n2, n3 = block.norm1, block.norm2, block.norm3
    if variant == "pre-norm":
        x = x + sa(n1(x))
        x = x + ca(n2(x))
        return x + ff(n3(x))
    if variant == "no residual":
        return n3(ff(n2(ca(n1(sa(x))))))
    if variant == "no residual self":
        a = n1(sa(x))
        c = n2(a + ca(a))
        return n3(c + ff(c))
    if variant == "no residual cross":
        a = n1(x + sa(x))
        c = n2(ca(a))
        return n3(c + ff(c))
    if variant == "no residual ff":
        a = n1(x + sa(x))
        c = n2(a + ca(a))
        return n3(ff(c))
    if variant == "residual from input":
        a = n1(x + sa(x))
        c = n2(x + ca(a))
        return n3(x + ff(c))
    if variant == "cross first":
        a = n1(x + ca(x))
        c = n2(a + sa(a))
        return n3(c + ff(c))
    if variant == "ffn before cross":
        a = n1(x + sa(x))
        c = n2(a + ff(a))
        return n3(c + ca(c))
    if variant == "one norm":
        a = n1(x + sa(x))
        c = n1(a + ca(a))
        return n1(c + ff(c))
    if variant == "dropout after the sum":
        def sub(norm, drop, f, h):
            return norm(drop(h + f(h)))
        raw_sa = lambda h: block.attn(h, key_mask=tk, is_causal=True)[0]  # noqa: E731
        raw_ca = lambda h: block.cross_attn(h, memory, memory, key_mask=sk)[0]  # noqa: E731
        a = sub(n1, block.dropout1, raw_sa, x)
        c = sub(n2, block.dropout2, raw_ca, a)
        return sub(n3, block.dropout3, block.ff, c)
    if variant == "dropout on the input":
        a = n1(x + block.attn(block.dropout1(x), key_mask=tk, is_causal=True)[0])
        c = n2(a + block.cross_attn(block.dropout2(a), memory, memory, key_mask=sk)[0])
        return n3(c + block.ff(block.dropout3(c)))
    a = n1(x + sa(x))  # the right block (and the mask and keys variants, inside sa and ca)
    c = n2(a + ca(a))
    return n3(c + ff(c))


_BLOCK_MISTAKES = [
    ("pre-norm", "that is the pre-norm block (GPT-2 and later): LayerNorm before each sublayer, x + f(norm(x)). "
                 "The original decoder is post-norm: normalize after the sum, x = norm(x + f(x))."),
    ("no residual", "the residual connections are missing: each sublayer's output is ADDED to its input before "
                    "the LayerNorm, norm(x + f(x)), not norm(f(x))."),
    ("no residual self", "a residual connection is missing: each sublayer's output is ADDED to its input before "
                         "the LayerNorm, norm(x + f(x)), not norm(f(x))."),
    ("no residual cross", "a residual connection is missing: each sublayer's output is ADDED to its input before "
                          "the LayerNorm, norm(x + f(x)), not norm(f(x))."),
    ("no residual ff", "a residual connection is missing: each sublayer's output is ADDED to its input before "
                       "the LayerNorm, norm(x + f(x)), not norm(f(x))."),
    ("residual from input", "each residual adds the input of ITS sublayer (the output of the previous one), not "
                            "the block's input x every time."),
    ("not causal", "the self-attention has no causal mask: position t would read the targets after it, which do "
                   "not exist yet when the decoder writes. Pass is_causal=True to block.attn."),
    ("causal cross", "cross-attention has no causal mask: the whole source is known before the first target "
                     "token is written. Only the source padding is masked there."),
    ("no source mask", "the source padding mask is missing from cross-attention: pass key_mask=src_key_mask to "
                       "block.cross_attn, or the padded source positions get attention."),
    ("no target mask", "the target padding mask is missing from the self-attention: pass "
                       "key_mask=tgt_key_mask to block.attn along with is_causal=True."),
    ("inverted masks", "the masks are inverted: in the companion's masks True marks a real token, to be KEPT "
                       "(torch.nn's key_padding_mask is the opposite: True = padding). Pass them as they are."),
    ("cross from decoder", "cross-attention takes its keys and values from the encoder's output: "
                           "block.cross_attn(h, memory, memory, ...), queries from the decoder, keys and values "
                           "from `memory` (with the source mask)."),
    ("cross first", "the order is masked self-attention, then cross-attention, then the feed-forward network "
                    "(norm1, norm2, norm3)."),
    ("ffn before cross", "the order is masked self-attention, then cross-attention, then the feed-forward network "
                         "(norm1, norm2, norm3)."),
    ("one norm", "each sublayer has its own LayerNorm: norm1 after self-attention, norm2 after "
                 "cross-attention, norm3 after the feed-forward network."),
]
_TRAIN_MISTAKES = [
    ("no dropout", "right in evaluation mode, but in training mode no dropout is applied: pass each sublayer's "
                   "output through its dropout module (block.dropout1, dropout2, dropout3) before the residual "
                   "sum."),
    ("dropout after the sum", "dropout goes on the sublayer's output, before the residual sum: "
                              "norm(x + dropout(f(x))), not norm(dropout(x + f(x))), which drops the residual "
                              "path too."),
    ("dropout on the input", "dropout goes on the sublayer's output, norm(x + dropout(f(x))), not on its input."),
]


class _Watched:
    """Records calls of a module's own forward (the one the check compares with)."""

    def __init__(self):
        self.calls = 0

    def wrap(self, module):
        cls = type(module)
        watcher = self

        class Watched(cls):
            def forward(self, *args, **kwargs):
                watcher.calls += 1
                return super().forward(*args, **kwargs)

        Watched.__name__ = Watched.__qualname__ = cls.__name__
        module.__class__ = Watched
        return module


def _nan_seen(t):
    return torch.nan_to_num(t.double(), nan=7.0) if isinstance(t, torch.Tensor) else t


@checker("Exercise 9.2", companion_given=True)
def decoder_block(my_decoder_block) -> None:
    """``my_decoder_block(x, memory, block, tgt_key_mask, src_key_mask) -> (B, T, d_model)``: the
    post-norm decoder block of the original transformer, built from ``block``'s parts
    (``attn``, ``cross_attn``, ``ff``, ``norm1..3``, ``dropout1..3``)."""
    shape = dict(B=3, T=5, S=7, d=8, h=2, d_ff=16, t_lens=(5, 3, 4), s_lens=(7, 4, 2))
    layer, block, x, memory, tk, sk = _block_case(92, **shape)
    want = _torch_reference(layer.eval(), x, memory, tk, sk)
    block.eval()
    watch = _Watched()
    watch.wrap(block)
    with rules.watch() as seen:
        got = my_decoder_block(x.clone(), memory.clone(), block, tk.clone(), sk.clone())
        again = my_decoder_block(x.clone(), memory.clone(), block, tk.clone(), sk.clone())
    facts = source_facts(my_decoder_block)
    if watch.calls or "DecoderBlock" in facts.names:
        hint("you called the block itself, block(x, memory, ...), which the check compares with: write the "
             "three sublayers from its parts (block.attn, block.cross_attn, block.ff, the norms, the dropouts).")
    if seen.called("multi_head_attention_forward") or {"TransformerDecoderLayer", "MultiheadAttention"} & (
            facts.attributes | facts.names):
        hint("you used torch.nn's own decoder layer or attention, which the check compares with: compose the "
             "block from the parts of `block` (block.attn, block.cross_attn, block.ff, norms, dropouts).")
    got = require_tensor(got, "a tensor of shape (B, T, d_model)")
    B, T, S, d = shape["B"], shape["T"], shape["S"], shape["d"]
    if tuple(got.shape) == (B, S, d):
        hint("the output has the source's length S: in cross-attention the queries come from the decoder "
             "(the target, length T) and the keys and values from `memory`.")
    if tuple(got.shape) != (B, T, d):
        hint(f"return one vector per target position, shape (B, T, d_model) = {(B, T, d)} "
             f"(got {tuple(got.shape)}).", generic=True)
    if got.is_complex() or got.dtype == torch.bool or not got.is_floating_point():
        hint(f"return real numbers, a float tensor (got dtype {got.dtype}).")
    if isinstance(again, torch.Tensor) and again.shape == got.shape and not torch.equal(
            torch.nan_to_num(again.detach()), torch.nan_to_num(got.detach())):
        hint("your block gives a different output each time it is called in evaluation mode: dropout is "
             "active. Use the block's dropout modules (block.dropout1 ...), which do nothing after "
             "block.eval(); F.dropout(x, p) drops at random unless given training=block.training.")
    if not close(got, want, rtol=1e-6, atol=1e-8):
        seen_got = _nan_seen(got)
        for variant, message in _BLOCK_MISTAKES:
            try:
                wrong = _block_variant(x, memory, block, tk, sk, variant)
            except Exception:  # noqa: BLE001 - a variant that cannot run on this case is not the answer
                continue
            if close(seen_got, _nan_seen(wrong), rtol=1e-6, atol=1e-8):
                hint(message)
        if bool(torch.isnan(got).any()):
            hint("your output holds NaN: some query had every key masked. In the companion's masks True marks "
                 "a real token; pass tgt_key_mask and src_key_mask as they are (no ~).")
        real = tk[..., None].expand_as(want)
        if close(got[real], want[real], rtol=1e-6, atol=1e-8):
            hint("right at the real target positions but not at the padded ones: the check compares every "
                 "position with torch.nn.TransformerDecoderLayer given the target padding mask; pass "
                 "key_mask=tgt_key_mask to the self-attention.")
        hint(f"compared with torch.nn.TransformerDecoderLayer (post-norm) given the same weights and masks: "
             f"{first_difference(got, want)}.", generic=True)
    # A second shape: no padding, a source shorter than the target, another width.
    shape2 = dict(B=2, T=6, S=3, d=12, h=3, d_ff=20, t_lens=(6, 6), s_lens=(3, 3))
    layer2, block2, x2, memory2, tk2, sk2 = _block_case(93, **shape2)
    want2 = _torch_reference(layer2.eval(), x2, memory2, tk2, sk2)
    got2 = require_tensor(my_decoder_block(x2.clone(), memory2.clone(), block2.eval(), tk2.clone(), sk2.clone()),
                          "a tensor of shape (B, T, d_model)")
    if not close(got2, want2, rtol=1e-6, atol=1e-8):
        hint(f"right on the first example but not with d_model=12, 3 heads, T=6, S=3 and no padding: "
             f"{first_difference(got2, want2)}.", generic=True)
    # Training mode, with dropout masks drawn in advance (the same in torch's layer and the block).
    _fix_dropout(layer, block, 94, (B, T, d))
    want_train = _torch_reference(layer, x, memory, tk, sk)
    with rules.watch() as seen_train:
        got_train = my_decoder_block(x.clone(), memory.clone(), block, tk.clone(), sk.clone())
    got_train = require_tensor(got_train, "a tensor of shape (B, T, d_model)")
    if not close(got_train, want_train, rtol=1e-6, atol=1e-8):
        for variant, message in _TRAIN_MISTAKES:
            if close(got_train, _block_variant(x, memory, block, tk, sk, variant), rtol=1e-6, atol=1e-8):
                hint(message)
        if seen_train.called("dropout", "feature_dropout", "alpha_dropout"):
            hint("right in evaluation mode, but in training mode use the block's own dropout modules, "
                 "block.dropout1(...), dropout2 and dropout3 (the check gives them fixed masks), not "
                 "dropout functions of your own.")
        hint(f"right in evaluation mode, but not in training mode (block.train()): each sublayer's output goes "
             f"through its dropout module before the residual sum: {first_difference(got_train, want_train)}.",
             generic=True)
    block.eval()
    require_graph(my_decoder_block, (x, memory, block, tk, sk), grad=(0, 1))
    passed("norm(x + dropout(f(x))) three times: equal to torch.nn.TransformerDecoderLayer with the same "
           "weights, masks and (in training) dropout masks.")


# ------------------------------------------------------------------------------- Exercise 9.3
def _tiny_seq2seq(seed, **shape):
    """A small Seq2SeqTransformer with LayerNorms that are not the identity (float32, evaluation mode)."""
    from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Seq2SeqTransformer(Seq2SeqConfig(**shape))
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    param.copy_(1 + 0.5 * torch.randn_like(param))
                elif "norm" in name and name.endswith("bias"):
                    param.copy_(0.3 * torch.randn_like(param))
    return model.eval()


def _ids(g, shape, vocab, avoid):
    """Random token ids in [3, vocab) (no special token), never ``avoid`` (the padding id)."""
    ids = torch.randint(3, vocab, shape, generator=g)
    return torch.where(ids == avoid, torch.full_like(ids, vocab - 1 if avoid != vocab - 1 else 3), ids)


def _forward_case(seed, lens, T, pad_id, t_lens=None, **shape):
    """A model, sources padded on the right to the lengths ``lens`` and decoder inputs ``<s> ...`` of
    width ``T``, padded on the right too where ``t_lens`` says (as in a batch from teacher forcing)."""
    model = _tiny_seq2seq(seed, pad_id=pad_id, **shape)
    g = torch.Generator().manual_seed(seed)
    V, S = shape["vocab_size"], max(lens)
    src = _ids(g, (len(lens), S), V, pad_id)
    for b, n in enumerate(lens):
        src[b, n:] = pad_id  # padded on the right
    tgt = _ids(g, (len(lens), T), V, pad_id)
    tgt[:, 0] = 1  # <s>
    for b, n in enumerate(t_lens or ()):
        tgt[b, n:] = pad_id  # a shorter target: padding after its last real token
    return model, src, tgt


def _forward_variant(model, src, tgt, variant=None):
    """The forward pass from the model's parts, and its classic mistakes (by ``variant``)."""
    from companion.positional import sinusoidal_encoding

    c = model.config
    d = c.d_model
    keep = src != (0 if variant == "pad 0" else c.pad_id)  # (B, S): True = a real source token

    def embed(table, ids):
        e = table(ids)  # (B, L, d)
        L = ids.shape[1]
        P = sinusoidal_encoding(L + 1, d)[1:] if variant == "positions from 1" else sinusoidal_encoding(L, d)
        if variant == "no scale":
            return e + P
        if variant == "scale after":
            return (e + P) * math.sqrt(d)
        if variant == "scale d":
            return e * d + P
        if variant == "no positions":
            return e * math.sqrt(d)
        return e * math.sqrt(d) + P

    h = embed(model.src_emb, src)
    if variant != "no encoder":
        for block in model.encoder.blocks:
            h = block(h, key_mask=None if variant == "no encoder mask" else keep, is_causal=variant == "causal encoder")
    memory = h if variant in ("no encoder norm", "no encoder") else model.encoder.norm(h)
    g = embed(model.src_emb if variant == "source table for target" else model.tgt_emb, tgt)
    for block in model.decoder.blocks:
        g = block(g, memory, is_causal=variant != "not causal",
                  memory_key_mask=None if variant == "no memory mask" else keep)
    if variant != "no decoder norm":
        g = model.decoder.norm(g)
    if variant == "source head":
        return g @ model.src_emb.weight.T
    logits = model.head(g)  # (B, T, V)
    if variant == "softmax":
        return logits.softmax(-1)
    if variant == "log-softmax":
        return logits.log_softmax(-1)
    return logits


_FORWARD_MISTAKES = [
    ("no scale", "multiply the token embeddings by sqrt(d_model) before adding the positions: E[x] * sqrt(d) + P "
                 "(the original's scale, which the model's embeddings were initialized for)."),
    ("scale after", "scale the token embeddings only, then add the positions: E[x] * sqrt(d) + P, not "
                    "(E[x] + P) * sqrt(d)."),
    ("scale d", "the scale is sqrt(d_model), not d_model."),
    ("no positions", "the sinusoidal positions are missing: add sinusoidal_encoding(length, d_model) to both the "
                     "source and the target embeddings (attention alone does not see the order)."),
    ("positions from 1", "positions start at 0: the first token gets row 0 of the sinusoidal table."),
    ("no encoder mask", "the encoder's self-attention must not look at the source padding: pass "
                        "key_mask=(src != model.config.pad_id) to every encoder block."),
    ("no memory mask", "cross-attention must not look at the source padding either: pass "
                       "memory_key_mask=(src != model.config.pad_id) to every decoder block."),
    ("pad 0", "the padding id is model.config.pad_id (here not 0): build the mask as src != model.config.pad_id."),
    ("causal encoder", "the encoder has no causal mask: every source token sees every other real source token."),
    ("not causal", "the decoder blocks need is_causal=True: position t must not read the targets after it."),
    ("no encoder norm", "the memory is the encoder's output after its final LayerNorm, model.encoder.norm."),
    ("no decoder norm", "apply the decoder's final LayerNorm, model.decoder.norm, before the head."),
    ("no encoder", "the memory is the source run through the encoder blocks (and model.encoder.norm), not the "
                   "embedded source itself."),
    ("source table for target", "the target has its own embedding table, model.tgt_emb; model.src_emb is for the "
                                "source."),
    ("source head", "the head reuses the TARGET embedding (model.head, whose weight is model.tgt_emb.weight): "
                    "the logits score target tokens."),
    ("softmax", "return the logits, before any softmax: the loss and the decoders take logits."),
    ("log-softmax", "return the logits themselves, before any (log-)softmax: the loss applies its own."),
]
_FORWARD_NAMES = ("forward", "encode", "decode", "embed_source", "embed_target", "_encode", "conditioned_on")


def _at_real(t, real):
    """``t`` with the logits of the padded target positions set to 0: the loss ignores those positions
    (their target is padding too), and a mask on the padded target keys changes only them."""
    return torch.where(real[..., None], t, torch.zeros((), dtype=t.dtype))


def _same_at_real(got, want, real):
    return (isinstance(got, torch.Tensor) and got.shape == want.shape and not got.is_complex()
            and close(_at_real(got, real), _at_real(want, real), rtol=1e-4, atol=1e-5))


def _snapshot(model):
    return {name: t.detach().clone() for name, t in [*model.named_parameters(), *model.named_buffers()]}


def _changed(model, before):
    """The first parameter or buffer of ``model`` that no longer equals its snapshot, or None."""
    now = dict([*model.named_parameters(), *model.named_buffers()])
    for name, old in before.items():
        new = now.get(name)
        if not isinstance(new, torch.Tensor) or new.shape != old.shape or not torch.equal(new.detach(), old):
            return name
    return None


def _gradients(model, run, weight):
    """``run()``'s output and the gradient of ``sum(weight * output)`` for every parameter of ``model``
    (None where none arrives): a fixed random linear function of the logits, zero at the padded
    target positions, like the loss."""
    model.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad():
            out = run()
            if not isinstance(out, torch.Tensor) or not out.requires_grad or out.shape != weight.shape:
                return out, None
            (out * weight.to(out.dtype)).sum().backward()
        return out, {name: None if p.grad is None else p.grad.detach().clone() for name, p in model.named_parameters()}
    finally:
        model.zero_grad(set_to_none=True)


def _module_of(name):
    return "model." + name.rsplit(".", 1)[0]


def _compare_gradients(got, want):
    """A hint if a parameter that the reference's loss reaches gets no gradient or another one."""
    reached = [n for n, g in want.items() if g is not None and bool(g.abs().max() > 0)]
    missing = [n for n in reached if got.get(n) is None or not bool(got[n].abs().max() > 0)]
    if missing:
        groups = {}  # top-level module -> its parameters that get no gradient
        for name in missing:
            groups.setdefault(name.split(".")[0], []).append(name)
        parts = []
        for top, names in groups.items():
            every = [n for n in reached if n.split(".")[0] == top]
            parts.append(f"model.{top}" if len(names) == len(every) else
                         f"part of model.{top} ({', '.join(_module_of(n) for n in names[:2])}"
                         f"{' ...' if len(names) > 2 else ''})")
        where = ", ".join(parts)
        hint(f"the values are right, but no gradient reaches {where}: torch.no_grad(), .detach() or .item() "
             "cut the graph there, and those weights would never train with your forward pass.")
    for name in reached:
        g, w = got[name], want[name]
        if g.shape != w.shape or not close(g, w, rtol=1e-3, atol=1e-5 + 1e-4 * float(w.abs().max())):
            hint(f"the values are right, but the gradient that reaches {_module_of(name)} ({name}) is not the one "
                 "the model's own forward pass gives: something between that weight and the logits is computed "
                 f"differently ({first_difference(g, w, 'grad', rtol=1e-3, atol=1e-5)}).")


@checker("Exercise 9.3", companion_given=True, allow=("companion.positional",))  # the text allows sinusoidal_encoding
def seq2seq_forward(my_seq2seq_forward) -> None:
    """``my_seq2seq_forward(model, src, tgt) -> logits (B, T, V)`` from the model's parts, equal to
    ``model(src, tgt)[0]`` at every target position that is not padding (the loss ignores the padded
    ones, and a mask on the padded target keys, which the text does not ask for, changes only them);
    every parameter gets the model's own gradient; the model's weights stay as they are."""
    shape = dict(vocab_size=13, context_length=16, d_model=8, n_heads=2, n_encoder_layers=2, n_decoder_layers=2,
                 d_ff=16)
    model, src, tgt = _forward_case(93, (7, 4, 2), 5, 0, t_lens=(5, 3, 4), **shape)
    real = tgt != model.config.pad_id  # (B, T): the positions the loss counts
    with torch.no_grad():
        want = model(src, tgt)[0]
    weight = torch.randn(want.shape, generator=torch.Generator().manual_seed(95)) * real[..., None]
    _, want_grads = _gradients(model, lambda: model(src, tgt)[0], weight)
    watch = _Watched()
    watch.wrap(model)  # model.encoder(...) and model.decoder(...), the stacks, are parts the text allows
    used = []
    for name in _FORWARD_NAMES[1:]:
        method = getattr(model, name)

        def note(*args, __method=method, __name=name, **kwargs):
            used.append(__name)
            return __method(*args, **kwargs)

        object.__setattr__(model, name, note)
    before = _snapshot(model)
    with torch.no_grad():
        got = my_seq2seq_forward(model, src.clone(), tgt.clone())
    facts = source_facts(my_seq2seq_forward)
    if watch.calls or used or "Seq2SeqTransformer" in facts.names or {"encode", "decode", "embed_source",
                                                                        "embed_target"} & facts.attributes:
        what = used[0] if used else "the model's own forward pass"
        hint(f"you called {what} (model(src, tgt), encode, decode and embed_* are the model's own), which the "
             "check compares with: build the pass from the parts (src_emb, tgt_emb, the positions, the encoder "
             "and decoder stacks or their blocks and norms, head).")
    changed = _changed(model, before)
    if changed:
        hint(f"your function changed the model's {changed} in place: compute with the weights, never write into "
             "them (torch.no_grad() with mul_, copy_ or an assignment): the model would change at every call.")
    if isinstance(got, (tuple, list)) and got and isinstance(got[0], torch.Tensor):
        hint("return the logits alone, a tensor (B, T, V), not a tuple.")
    got = require_tensor(got, "the logits, a tensor of shape (B, T, V)")
    B, T = tgt.shape
    V = shape["vocab_size"]
    if tuple(got.shape) == (B, src.shape[1], V):
        hint("one row of logits per TARGET position: the decoder reads the target, the encoder the source.")
    if tuple(got.shape) == (B, T, shape["d_model"]):
        hint("that is the decoder's output (B, T, d_model): apply model.head to get logits over the vocabulary.")
    if tuple(got.shape) != (B, T, V):
        hint(f"the logits have shape (B, T, V) = {(B, T, V)} (got {tuple(got.shape)}).", generic=True)
    if not _same_at_real(got, want, real):
        for variant, message in _FORWARD_MISTAKES:
            if variant != "pad 0" and _same_at_real(got, _forward_variant(model, src, tgt, variant), real):
                hint(message)
        hint(f"compared with model(src, tgt), the same weights, at the target positions that are not padding: "
             f"{first_difference(_at_real(got, real), _at_real(want, real), rtol=1e-4, atol=1e-5)}.", generic=True)
    if got.is_complex() or not bool(torch.isfinite(got).all()):
        hint("the logits at the padded target positions are NaN or infinite: the loss ignores those positions, "
             "but a NaN there still turns every gradient into NaN. Leave them finite.")
    with torch.no_grad():
        again = my_seq2seq_forward(model, src.clone(), tgt.clone())
    if not _same_at_real(again, want, real):
        hint("the first call gave the right logits, a second call with the same inputs other ones: does your "
             "function change the model or keep something between calls?")
    # Another model: pad_id 3, one layer in the encoder, three heads, longer targets.
    shape2 = dict(vocab_size=11, context_length=12, d_model=12, n_heads=3, n_encoder_layers=1, n_decoder_layers=2,
                  d_ff=24)
    model2, src2, tgt2 = _forward_case(94, (3, 6, 5, 1), 7, 3, t_lens=(7, 4, 6, 2), **shape2)
    real2 = tgt2 != 3
    before2 = _snapshot(model2)
    with torch.no_grad():
        want2 = model2(src2, tgt2)[0]
        got2 = require_tensor(my_seq2seq_forward(model2, src2.clone(), tgt2.clone()),
                              "the logits, a tensor of shape (B, T, V)")
    changed = _changed(model2, before2)
    if changed:
        hint(f"your function changed the model's {changed} in place: compute with the weights, never write into "
             "them: the model would change at every call.")
    if tuple(got2.shape) != tuple(want2.shape):
        hint(f"right on the first model, but on one with pad_id=3, d_model=12, 3 heads, one encoder layer the "
             f"logits have shape {tuple(got2.shape)}, not (B, T, V) = {tuple(want2.shape)}.", generic=True)
    if not _same_at_real(got2, want2, real2):
        for variant, message in _FORWARD_MISTAKES:
            if _same_at_real(got2, _forward_variant(model2, src2, tgt2, variant), real2):
                hint(message)
        hint(f"right on the first model but not on one with pad_id=3, d_model=12, 3 heads, one encoder layer: "
             f"{first_difference(_at_real(got2, real2), _at_real(want2, real2), rtol=1e-4, atol=1e-5)}.",
             generic=True)
    # In the grader too: a backward pass through the result is relayed to the student's kernel, where its
    # graph is, so the per-weight gradients are compared exactly as in the notebook.
    out, got_grads = _gradients(model, lambda: my_seq2seq_forward(model, src.clone(), tgt.clone()), weight)
    changed = _changed(model, before)
    if changed:
        hint(f"your function changed the model's {changed} in place when gradients are on: compute with the "
             "weights, never write into them.")
    if got_grads is None:
        hint("the values are right, but no gradient reaches the model's weights: torch.no_grad(), .detach() "
             "or .item() cut the graph, and the model could not be trained with your forward pass.")
    _compare_gradients(got_grads, want_grads)
    passed("embeddings * sqrt(d) + positions, encoder, decoder, tied head: the model's own logits.")


# ------------------------------------------------------------------------------- Exercise 9.5
@lru_cache(maxsize=1)
def _shipped():
    """The chapter's trained model and tokenizer (read once)."""
    from companion.checkpoint import load_checkpoint
    from companion.translation import shipped_model_path

    with torch.random.fork_rng(devices=[]):  # building the model draws initial weights: not from the caller's RNG
        model, tok, _ = load_checkpoint(shipped_model_path())
    return model.eval(), tok


def _greedy_alone(model, src_row, bos_id, eos_id, n):
    """Greedy decoding of ONE unpadded source with the model's plain forward pass: the reference."""
    ys = [bos_id]
    with torch.no_grad():
        for _ in range(n):
            logits, _ = model(src_row[None], torch.tensor([ys]))  # (1, t, V): the whole model again
            ys.append(int(logits[0, -1].argmax()))
            if ys[-1] == eos_id:
                break
    return ys[1:]


def _pack(rows, pad_id):
    out = torch.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=torch.long)
    for b, r in enumerate(rows):
        out[b, :len(r)] = torch.tensor(r, dtype=torch.long)
    return out


def _greedy_variant(model, src, bos_id, eos_id, n, variant):
    """Batched greedy decoding with one classic mistake (by ``variant``)."""
    pad = 0 if variant == "pad 0" else model.config.pad_id
    keep = src != pad
    B = src.shape[0]
    with torch.no_grad():
        memory = model.encode(src)
        ys = torch.full((B, 1), eos_id if variant == "start with eos" else 1 if variant == "bos 1" else bos_id)
        done = torch.zeros(B, dtype=torch.bool)
        steps = n + 1 if variant == "one too many" else n - 1 if variant == "one too few" else n
        for _ in range(steps):
            inp = ys[:, -1:] if variant == "last token only" else ys
            if variant == "last token only":
                logits = model.decode(inp, memory, memory_key_mask=keep)
            else:
                logits = model.decode(inp, memory, memory_key_mask=None if variant == "no memory mask" else keep)
            nxt = logits[:, 0 if variant == "first position" else -1].argmax(-1)  # (B,)
            if variant not in ("no stop",):
                fill = eos_id if variant == "pad with eos" else pad
                nxt = torch.where(done, torch.full_like(nxt, fill), nxt)
            ys = torch.cat([ys, nxt[:, None]], dim=1)
            done = done | (nxt == (2 if variant == "eos 2" else eos_id))
            if variant == "stop at first" and bool(done.any()):
                break
            if variant == "stop with row 0" and bool(done[0]):
                break
            if variant not in ("full length", "no stop") and bool(done.all()):
                break
    out = ys if variant == "keeps bos" else ys[:, 1:]
    if variant == "drops eos":
        out = out.masked_fill(out == eos_id, pad)
        while out.shape[1] > 1 and bool((out[:, -1] == pad).all()):
            out = out[:, :-1]
    return out


_GREEDY_MISTAKES = [
    ("no stop", "a row that has written </s> must stop: every position after its </s> is pad_id "
                "(model.config.pad_id), whatever the model would write there."),
    ("stop at first", "the batch stopped when the FIRST row wrote </s>: each row stops at its own </s>, and the "
                      "loop runs until every row has finished (or max_new_tokens)."),
    ("stop with row 0", "the batch stopped when row 0 finished: each row stops at its own </s>, and the loop "
                        "runs until every row has finished (or max_new_tokens)."),
    ("full length", "stop the loop as soon as every row has written its </s>: the result has as many columns as "
                    "the longest translation needs, not always max_new_tokens."),
    ("pad 0", "the padding id is model.config.pad_id (3 in one of the check's models), not 0: mask the source "
              "with src != model.config.pad_id and fill the finished rows with model.config.pad_id."),
    ("no memory mask", "the padded sources decode differently from the same sources alone: pass the source's "
                       "padding mask to every decoding step, model.decode(ys, memory, "
                       "memory_key_mask=src != model.config.pad_id) (the pad id is model.config.pad_id, not "
                       "always 0)."),
    ("keeps bos", "return the generated tokens only, without the <s> column in front."),
    ("drops eos", "keep each row's </s> in the result: it says where the translation ended (max_new_tokens "
                  "may cut a row before its </s>)."),
    ("pad with eos", "after a row's </s>, fill with pad_id (model.config.pad_id), not with more </s>."),
    ("first position", "the next token comes from the logits of the LAST position, logits[:, -1]: position t "
                       "predicts token t + 1."),
    ("one too many", "generate at most max_new_tokens tokens per row (the <s> does not count)."),
    ("one too few", "generate up to max_new_tokens tokens per row, not one fewer (the <s> does not count)."),
    ("last token only", "at each step give the decoder the whole prefix written so far, <s> y_1 .. y_t, not the "
                        "last token alone (without a cache the decoder needs all of it)."),
    ("bos 1", "start every row with the bos_id you are given, not 1: the check also uses a model whose <s> is "
              "another id."),
    ("eos 2", "a row ends with the eos_id you are given, not 2: the check also uses a model whose </s> is "
              "another id."),
    ("start with eos", "start every row with <s> (bos_id), the first input the decoder was trained on."),
]


@lru_cache(maxsize=1)
def _greedy_cases():
    """(model, src, bos, eos, max_new_tokens): the trained model on English numbers (rows that end at
    different steps; one case cut short by max_new_tokens), and a random model (float64) whose rows
    end at different steps or never."""
    from companion.translation import english

    model, tok = _shipped()
    numbers = (7, 342, 21, 8, 1042, 97)
    src = tok.encode_batch([english(n) for n in numbers])  # (6, S), padded
    cases = [(model, src, tok.bos_id, tok.eos_id, 40), (model, src[[3, 0, 2]], tok.bos_id, tok.eos_id, 7)]
    cases.append(_random_greedy_case())
    cases.append(_other_ids_greedy_case())
    return cases


@lru_cache(maxsize=1)
def _random_greedy_case():
    """A random model (float64, pad_id 3) whose head never writes <s> or <pad>: its six padded sources
    decode, alone, to rows that end after 2, 3, 4, 4 and 9 tokens, and one that never ends (seed
    chosen for that spread)."""
    small = _tiny_seq2seq(11, vocab_size=7, context_length=16, d_model=16, n_heads=2, n_encoder_layers=1,
                          n_decoder_layers=1, d_ff=32, pad_id=3, tie_embeddings=False).double()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        small.head = nn.Linear(16, 7, dtype=torch.float64)
        small.head.weight.copy_(small.tgt_emb.weight)
        small.head.bias.copy_(torch.tensor([0.0, -50.0, 0.0, -50.0, 0.0, 0.0, 0.0]))  # no <s>, no <pad>
    g = torch.Generator().manual_seed(11)
    lens = (6, 2, 4, 5, 1, 3)
    src = _ids(g, (len(lens), 6), 7, 3)
    for b, n in enumerate(lens):
        src[b, n:] = 3
    return small.eval(), src, 1, 2, 9


@lru_cache(maxsize=1)
def _other_ids_greedy_case():
    """A random model (float64, pad_id 0) whose <s> is 5 and </s> 4 (not 1 and 2), and whose head never
    writes <s> or <pad>: its six padded sources decode, alone, to rows that end after 2, 2, 2 and 3
    tokens and two that never end; token 2 comes before some </s> (seed chosen for that)."""
    small = _tiny_seq2seq(4, vocab_size=8, context_length=16, d_model=16, n_heads=2, n_encoder_layers=1,
                          n_decoder_layers=1, d_ff=32, pad_id=0, tie_embeddings=False).double()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        small.head = nn.Linear(16, 8, dtype=torch.float64)
        small.head.weight.copy_(small.tgt_emb.weight)
        small.head.bias.copy_(torch.tensor([-50.0, 0.0, 0.0, 0.0, 1.0, -50.0, 0.0, 0.0]))  # no <pad>, no <s>
    g = torch.Generator().manual_seed(4)
    lens = (6, 2, 4, 5, 1, 3)
    src = _ids(g, (len(lens), 6), 8, 0)
    for b, n in enumerate(lens):
        src[b, n:] = 0
    return small.eval(), src, 5, 4, 9


@lru_cache(maxsize=None)
def _greedy_reference(case: int) -> torch.Tensor:
    """What each source of case ``case`` gives decoded alone, packed and padded (computed once)."""
    model, src, bos, eos, n = _greedy_cases()[case]
    pad = model.config.pad_id
    return _pack([_greedy_alone(model, row[row != pad], bos, eos, n) for row in src], pad)


@checker("Exercise 9.5", companion_given=True)
def batched_greedy(my_greedy_translate) -> None:
    """``my_greedy_translate(model, src, bos_id, eos_id, max_new_tokens) -> (B, L)`` ids: greedy decoding
    of a padded batch, each row stopping at its own ``</s>``, then ``pad_id``."""
    for case, (model, src, bos, eos, n) in enumerate(_greedy_cases()):
        pad = model.config.pad_id
        want = _greedy_reference(case)
        watch = []
        original = model.conditioned_on

        def note(*args, **kwargs):
            watch.append("conditioned_on")
            return original(*args, **kwargs)

        object.__setattr__(model, "conditioned_on", note)
        try:
            with rules.watch() as seen:
                got = my_greedy_translate(model, src.clone(), bos, eos, n)
        finally:
            del model.__dict__["conditioned_on"]
        facts = source_facts(my_greedy_translate)
        if watch or seen.used_module("companion.decoding") or seen.used_module("companion.translation") or (
                {"greedy", "translate", "conditioned_on", "beam_search"} & (facts.names | facts.attributes)):
            hint("you used the course's own decoder (greedy, translate, conditioned_on or beam_search), which "
                 "the check compares with: write the loop yourself with model.encode and model.decode.")
        if isinstance(got, (list, tuple)):
            hint(f"return one LongTensor of shape (B, L), padded with pad_id, not a {type(got).__name__}.")
        got = require_tensor(got, "a LongTensor of shape (B, L)")
        if got.is_floating_point() or got.is_complex() or got.dtype == torch.bool:
            hint(f"return token ids, a LongTensor (got dtype {got.dtype}).")
        if got.dim() != 2 or got.shape[0] != src.shape[0]:
            hint(f"return one row per source, shape (B, L) with B = {src.shape[0]} (got {tuple(got.shape)}).",
                 generic=True)
        if got.shape == want.shape and torch.equal(got.long(), want):
            if got.dtype != torch.long:
                hint(f"the ids are right, but return a LongTensor (dtype torch.long), not {got.dtype}.")
            continue
        for variant, message in _GREEDY_MISTAKES:
            try:
                wrong = _greedy_variant(model, src, bos, eos, n, variant)
            except Exception:  # noqa: BLE001 - a variant that cannot run on this case is not the answer
                continue
            if wrong.shape == got.shape and torch.equal(got.long(), wrong) and not torch.equal(wrong, want):
                hint(message)
        where = ("the trained model on English numbers" if case < 2 else
                 f"a small random model with pad_id={pad}, bos_id={bos}, eos_id={eos}")
        rows = [b for b in range(min(got.shape[0], want.shape[0]))
                if got.shape[1] != want.shape[1] or not torch.equal(got[b].long(), want[b])]
        b = rows[0] if rows else 0
        alone = want[b][: (want[b] != pad).sum()].tolist() if want.shape[1] else []
        hint(f"with {where} and max_new_tokens={n}: row {b} decoded alone gives {alone}, padded to width "
             f"{want.shape[1]}; your row {b} is {got[b].tolist() if got.dim() == 2 else describe(got)}.",
             generic=True)
    passed("each row stops at its own </s> and is padded after it: the same translations as decoding each "
           "source alone.")
