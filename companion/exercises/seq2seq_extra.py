"""Checkers for chapter 9: those of :mod:`companion.exercises.seq2seq` (9.1, 9.4 and 9.6) and
:mod:`companion.exercises.seq2seq_model` (9.2, 9.3 and 9.5), and

* Exercise 9.7 :func:`next_chars` — what follows a prefix in a list of texts, counted: the tool
  that finds the cause of the translation model's errors on numbers ending in 76.
* Exercise 9.8 :func:`smoothed_loss` — label-smoothed cross-entropy by hand, with the smoothing
  mass kept off the padding token and the padded positions left out of the mean (PyTorch's
  ``label_smoothing`` puts eps / V on the padding token too).

The chapter imports this module as ``check``, so that one module serves the whole chapter (the
grader's registry wants one per chapter). The check of 9.7 recognizes the classic slips:
occurrences that may not overlap (``re.finditer``, ``str.count``), the texts joined into one (an
occurrence across two texts), the character one place off, the prefix's own last character, an
occurrence at the end of a text counted, the counts dropped (a set or a list), the caller's list
changed, and a prefix used as a regular expression without ``re.escape`` (the cases hold ``.``, ``(``
and ``?``).
"""
from __future__ import annotations

import os
import random
import re
from collections import Counter

import torch

from .rules import is_remote, watch

from . import seq2seq as _seq2seq
from . import seq2seq_model as _seq2seq_model
from ._core import unseeded_rng, checker, close, describe, first_difference, hint, passed, require_graph
from .seq2seq import *  # noqa: F401,F403 - exercises 9.1, 9.4 and 9.6
from .seq2seq_model import *  # noqa: F401,F403 - exercises 9.2, 9.3 and 9.5

__all__ = [*_seq2seq.__all__, *_seq2seq_model.__all__, "next_chars", "smoothed_loss", "seq2seq_step"]


# ------------------------------------------------------------------------------- Exercise 9.7
def _reference(texts, prefix):
    counts = Counter()
    for text in texts:
        start = text.find(prefix)
        while start != -1:
            end = start + len(prefix)
            if end < len(text):
                counts[text[end]] += 1
            start = text.find(prefix, start + 1)
    return dict(counts)


def _non_overlapping(texts, prefix):
    return dict(Counter(t[m.end()] for t in texts for m in re.finditer(re.escape(prefix), t) if m.end() < len(t)))


def _joined(texts, prefix):
    return _reference(["".join(texts)], prefix)


def _shifted(offset):
    def wrong(texts, prefix):
        counts = Counter()
        for text in texts:
            for start in range(len(text) - len(prefix) + 1):
                at = start + len(prefix) + offset
                if text.startswith(prefix, start) and 0 <= at < len(text):
                    counts[text[at]] += 1
        return dict(counts)

    return wrong


def _end_counted(texts, prefix):
    counts = Counter(_reference(texts, prefix))
    for text in texts:
        if text.endswith(prefix):
            counts[""] += 1
    return dict(counts)


def _cases():
    """``(texts, prefix)`` pairs: the edge cases first, then random ones over a small alphabet."""
    cases = [
        (["aaaa"], "aa"),  # overlapping: a at 2, a at 3; the last occurrence ends the text
        (["sechsundsechzig", "vierundsechzig", "vierundsiebzig"], "unds"),
        (["abcab", "cab"], "ab"),  # one occurrence at the end of each text
        (["ab", "cd"], "bc"),  # only across the two texts: nothing
        (["xyz"], "q"),  # never found
        ([], "a"),  # no texts
        (["abab", "ba"], "bab"),
        (["a b\ta\nb"], "a"),  # whitespace is a character like any other
        (["ab ", " ab\n", "a b"], "b"),  # ... at the ends of a text too
        (["a b a b"], " "),
        (["a.bxaxc", "ya.", "a+b"], "a."),  # regex metacharacters are plain characters: 'ax' is no 'a.'
        (["f(x) = (x+1)", "(("], "("),
        (["a?b", "ab?", "b"], "?"),
    ]
    rng = random.Random(9)
    for _ in range(12):
        texts = ["".join(rng.choice("abc") for _ in range(rng.randint(0, 12))) for _ in range(rng.randint(1, 4))]
        prefix = "".join(rng.choice("abc") for _ in range(rng.randint(1, 3)))
        cases.append((texts, prefix))
    return cases


def _as_counts(got, call):
    """The answer as a plain ``{str: int}`` dict, or a hint that says what is wrong with it."""
    if isinstance(got, (set, frozenset, list, tuple, str)):
        hint(f"{call} returned {describe(got)}: return a dict that maps each character to how many times "
             "it follows the prefix (a collections.Counter is fine).")
    if not isinstance(got, dict):
        hint(f"{call} returned {describe(got)}: return a dict {{character: count}}.")
    counts = {}
    for key, value in got.items():
        if not isinstance(key, str):
            hint(f"{call}: the keys must be the characters (strings), got the key {describe(key)}.")
        if isinstance(value, bool) or not isinstance(value, int):
            hint(f"{call}: the values must be counts (ints), got {describe(value)} for {key!r}.")
        if value != 0:  # a Counter may hold zeros; they change nothing
            counts[key] = value
    return counts


@checker("Exercise 9.7")
def next_chars(my_next_chars) -> None:
    """``my_next_chars(texts, prefix)``: a list of strings and a non-empty string -> ``{char: count}``
    of the characters right after every occurrence of ``prefix`` (overlapping ones included; an
    occurrence at the end of a text is not counted; the texts are separate)."""
    answers = []
    for texts, prefix in _cases():
        given = list(texts)
        call = f"my_next_chars({texts!r}, {prefix!r})"
        got = my_next_chars(given, prefix)
        if given != texts:
            hint(f"{call} changed the list it was given; leave `texts` as it is.")
        answers.append((texts, prefix, call, _as_counts(got, call)))
    if all(got == _reference(texts, prefix) for texts, prefix, _, got in answers):
        passed("every occurrence counted, overlapping ones too, inside each text: "
               "'sechsunds' is always followed by 'e' in the training targets.")
    mistakes = [
        (_non_overlapping, "occurrences may overlap ('aa' occurs 3 times in 'aaaa'): re.finditer and "
                           "str.count skip the overlapping ones; search again from the next position."),
        (_joined, "an occurrence must lie inside one text: joining the texts creates occurrences across "
                  "two of them. Search each text on its own."),
        (_shifted(-1), "you counted the prefix's own last character; count the character right AFTER it, "
                       "text[start + len(prefix)]."),
        (_shifted(1), "you counted the character two places after the prefix; count the one right after it, "
                      "text[start + len(prefix)]."),
        (_end_counted, "an occurrence at the very end of a text is followed by nothing: do not count it "
                       "(not even as '')."),
    ]
    for wrong, message in mistakes:
        if all(got == wrong(texts, prefix) for texts, prefix, _, got in answers):
            hint(message)
    for texts, prefix, call, got in answers:
        expected = _reference(texts, prefix)
        if got != expected:
            hint(f"{call} gave {dict(sorted(got.items()))}, expected {dict(sorted(expected.items()))}.",
                 generic=True)


# ------------------------------------------------------------------------------- Exercise 9.8
def _smoothed(logits, targets, pad_id, eps, *, spread="text", mean="tokens", on_target=True):
    """The loss of the text (``spread="text"``), or one of the classic variants of it."""
    B, T, V = logits.shape
    logp = logits.log_softmax(-1)  # (B, T, V)
    onehot = torch.nn.functional.one_hot(targets, V).to(logp.dtype)  # (B, T, V)
    others = torch.ones(V, dtype=logp.dtype)
    if spread == "text":  # eps over the V - 1 tokens that are not padding, the target included
        others[pad_id] = 0
        q = (1 - eps) * onehot + eps * others / (V - 1)
    elif spread == "all":  # eps / V on every token, padding included: F.cross_entropy's label_smoothing
        q = (1 - eps) * onehot + eps * others / V
    elif spread == "not target":  # eps / (V - 2) on the tokens that are neither padding nor the target
        others[pad_id] = 0
        q = (1 - eps) * onehot + eps * (others - onehot).clamp(min=0) / (V - 2)
    elif spread == "none":
        q = onehot
    per = -(q * logp).sum(-1)  # (B, T)
    real = targets != pad_id
    if mean == "all":
        return per.mean()
    if mean == "sum":
        return per[real].sum()
    if mean == "rows":
        return torch.stack([per[b][real[b]].mean() for b in range(B) if real[b].any()]).mean()
    return per[real].mean()


def _smoothed_cases():
    """(logits, targets, pad_id, eps, the class of input): every class the text names, then fresh draws."""
    g = torch.Generator().manual_seed(98)

    def draw(B, T, V, pad_id, eps, what, dtype=torch.float64, scale=2.0, pad_share=0.3):
        logits = torch.randn(B, T, V, generator=g, dtype=dtype) * scale
        targets = torch.randint(V, (B, T), generator=g)
        targets[targets == pad_id] = (pad_id + 1) % V  # real tokens first...
        targets[torch.rand(B, T, generator=g) < pad_share] = pad_id  # ...then some padding
        targets[0, 0] = (pad_id + 1) % V  # at least one real target
        return logits, targets, pad_id, eps, what

    cases = [draw(2, 5, 6, 0, 0.1, "a batch of padded targets (pad_id 0)"),
             draw(2, 5, 6, 0, 0.1, "a second call with the same shapes and new values"),
             draw(1, 1, 3, 0, 0.1, "a batch of one target of one position", pad_share=0.0),
             draw(3, 7, 11, 10, 0.1, "odd sizes, pad_id the last id"),
             draw(2, 4, 5, 2, 0.1, "pad_id in the middle of the vocabulary"),
             draw(2, 6, 7, 3, 0.0, "eps = 0 (the plain cross-entropy)"),
             draw(2, 6, 7, 3, 0.5, "eps = 0.5"),
             draw(3, 5, 9, 1, 0.1, "float32 logits", dtype=torch.float32)]
    logits, targets, pad_id, eps, _ = draw(3, 4, 6, 0, 0.1, "")
    targets[1] = 0  # a row of padding only
    cases.append((logits, targets, pad_id, eps, "a row of padding only"))
    far = torch.tensor([[[1000.0, -1000.0, 0.0, 999.0], [-1000.0, -1001.0, -999.0, -1000.0]]], dtype=torch.float64)
    cases.append((far, torch.tensor([[1, 3]]), 0, 0.1, "logits near +1000 and -1000"))
    seed = int.from_bytes(os.urandom(4), "little")  # fresh draws: a new seed at every check
    g = torch.Generator().manual_seed(seed)
    for k in range(2):
        V = int(torch.randint(3, 12, (1,), generator=g))
        cases.append(draw(int(torch.randint(1, 4, (1,), generator=g)), int(torch.randint(1, 8, (1,), generator=g)),
                          V, int(torch.randint(V, (1,), generator=g)), 0.1, f"random sizes (seed {seed}, draw {k})"))
    return cases


@checker("Exercise 9.8")
def smoothed_loss(my_smoothed_loss) -> None:
    """``my_smoothed_loss(logits, targets, pad_id, eps)``: logits ``(B, T, V)``, targets ``(B, T)``
    with ``pad_id`` at padded positions -> the mean over the real positions of
    ``-sum_v q(v) log softmax(logits)[v]``, ``q = (1 - eps) [v = target] + eps / (V - 1)`` on every
    ``v != pad_id`` and 0 on ``pad_id``; F.cross_entropy is not to be called."""
    state = unseeded_rng()
    grad_mode = torch.is_grad_enabled()
    for k, (logits, targets, pad_id, eps, what) in enumerate(_smoothed_cases()):
        given_logits, given_targets = logits.clone(), targets.clone()
        if k == 0:  # the caller's logits require a gradient: the loss must carry the graph
            given_logits.requires_grad_(True)
        with watch() as seen:
            if k == 2:  # called under no_grad, as in an evaluation loop
                with torch.no_grad():
                    got = my_smoothed_loss(given_logits, given_targets, pad_id, eps)
            else:
                got = my_smoothed_loss(given_logits, given_targets, pad_id, eps)
        if torch.is_grad_enabled() != grad_mode:
            torch.set_grad_enabled(grad_mode)
            hint("your function changed torch's grad mode (torch.set_grad_enabled or a bare no_grad().__enter__()) "
                 "and left it so: the caller's training would stop computing gradients.")
        if seen.called("cross_entropy", "nll_loss", "CrossEntropyLoss", "NLLLoss"):
            hint("your function calls F.cross_entropy or F.nll_loss (or their modules), which the exercise asks "
                 "you not to call: take torch.log_softmax and build the smoothed target q yourself.")
        if not torch.equal(given_targets, targets) or not torch.equal(given_logits.detach(), logits):
            hint(f"on {what} your function changed its inputs in place (logits or targets): work on copies, or "
                 "with out-of-place operations.")
        if given_logits.grad is not None:
            hint("your function called backward(): the caller's logits got a .grad. Return the loss; the "
                 "training loop calls backward.")
        if isinstance(got, (float, int)) and not isinstance(got, bool):
            hint(f"return a scalar tensor (so that loss.backward() can follow it); on {what} you returned "
                 f"{describe(got)}.")
        if not isinstance(got, torch.Tensor) or got.numel() != 1 or got.is_complex() or \
                not got.dtype.is_floating_point or got.device.type != "cpu":
            hint(f"return one number, a real scalar tensor; on {what} you returned {describe(got)}.")
        if got.dim() != 0:
            hint(f"return a scalar tensor of shape (), as F.cross_entropy does; yours has shape {tuple(got.shape)}.")
        value = got.detach()
        expected = _smoothed(logits, targets, pad_id, eps)
        rtol, atol = (1e-5, 1e-6) if logits.dtype == torch.float32 else (1e-10, 1e-12)
        if close(value, expected, rtol=rtol, atol=atol):
            if value.dtype != logits.dtype:
                hint(f"the value is right, but on {what} the loss has dtype {value.dtype}: keep the logits' dtype "
                     f"({logits.dtype}).")
            continue
        if not bool(torch.isfinite(value)):
            if "1000" in what:
                hint(f"on {what} your loss is {float(value)}: use torch.log_softmax (it subtracts each row's "
                     "maximum) rather than log(softmax(...)), and never multiply 0 by log 0.")
            hint(f"on {what} (pad_id {pad_id}) your loss is {float(value)}, the exact one {float(expected):.6f}: "
                 "check which positions you keep (those whose target is not pad_id; a mean over zero positions "
                 "is 0/0), and never multiply 0 by log 0 (torch.log_softmax, not log(softmax(...))).")
        if logits.dtype == torch.float64 and close(value, expected, rtol=1e-4, atol=1e-6):
            hint(f"on {what} your loss is {float(value):.10f}, the exact one {float(expected):.10f}: close, but "
                 "not to float64's precision. Compute in the logits' dtype (no .float(), no float32 constants).")
        variants = [
            (dict(spread="all"), "you spread eps over all V tokens, the padding token too: that is what "
                                 "F.cross_entropy(..., label_smoothing=eps) does. The text keeps q(pad_id) = 0 "
                                 "and spreads eps over the V - 1 other tokens."),
            (dict(spread="not target"), "you spread eps over the V - 2 tokens that are neither padding nor the "
                                        "target; the text spreads it over the V - 1 tokens that are not padding, "
                                        "the target included: q(target) = 1 - eps + eps / (V - 1)."),
            (dict(spread="none"), "no smoothing: with eps > 0 the target is not one-hot; q gives eps / (V - 1) to "
                                  "every token that is not padding."),
            (dict(mean="all"), "you averaged over every position, padding included: average over the positions "
                               "whose target is not pad_id."),
            (dict(mean="sum"), "you summed over the real positions; take their mean."),
            (dict(mean="rows"), "you averaged each row, then the rows: every real position weighs the same, "
                                "whatever its row."),
        ]
        for options, message in variants:
            if close(value, _smoothed(logits, targets, pad_id, eps, **options), rtol=rtol, atol=atol):
                hint(f"on {what}: {message}")
        if close(value, -expected, rtol=rtol, atol=atol):
            hint(f"on {what} the sign is wrong: the loss is MINUS the sum of q(v) log p(v).")
        hint(f"on {what} (B, T, V = {tuple(logits.shape)}, pad_id {pad_id}, eps {eps}) the loss should be "
             f"{float(expected):.6f}; yours is {float(value):.6f}.", generic=True)
    if not torch.equal(state, torch.get_rng_state()):
        torch.set_rng_state(state)
        hint("your function changed torch's global random state: the loss draws nothing at random.")
    logits, targets, pad_id, eps, _ = _smoothed_cases()[0]
    require_graph(my_smoothed_loss, (logits, targets, pad_id, eps), grad=(0,))
    if is_remote(my_smoothed_loss):  # in the grader the loss comes back as data, without its graph
        passed("eps spread over the V - 1 tokens that are not padding, the padded positions left out of the mean.")
    again = logits.clone().requires_grad_(True)
    loss = my_smoothed_loss(again, targets, pad_id, eps)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        hint(f"called again on the first input, your function returned {describe(loss)}, not a scalar tensor.")
    try:
        loss.backward()
    except RuntimeError as exc:
        hint(f"loss.backward() failed on the loss your function returned ({str(exc).splitlines()[0][:120]}): "
             "return a new loss computed from the logits of each call, never a tensor kept from an earlier one.")
    if again.grad is None:
        hint("the loss your function returned does not lead back to the logits it was given: compute it from "
             "those logits, at every call.")
    reference = logits.clone().requires_grad_(True)
    _smoothed(reference, targets, pad_id, eps).backward()
    if not close(again.grad, reference.grad, rtol=1e-8, atol=1e-10):
        hint("the values are right but the gradient is not: does part of the loss go through .detach(), .item() "
             "or a NumPy copy?")
    passed("eps spread over the V - 1 tokens that are not padding, the padded positions left out of the mean.")


# ------------------------------------------------------------------------------- Exercise 9.9
class _PatternDropout(torch.nn.Module):
    """Dropout without random draws: in training mode ``x`` times a fixed pattern of zeros (one
    entry in five) and ``1 / 0.8``, in evaluation mode ``x`` itself.

    The check puts it in place of every ``nn.Dropout`` of the model (and sets the attention's
    dropout to 0), so that the model is different in training and in evaluation mode, as with real
    dropout, while a step gives one answer that can be compared, in the notebook and in the
    grader's kernel alike, and any change of torch's random state is the step's own.
    """

    def forward(self, x):
        if not self.training:
            return x
        keep = (torch.arange(x.numel()) * 7 + 3) % 5 != 0  # 4 entries in 5 kept
        return x * keep.reshape(x.shape).to(x.dtype) / 0.8


def _step_model(seed, pad_id):
    """A small float64 Seq2SeqTransformer whose dropouts are :class:`_PatternDropout` (training mode)."""
    from companion.seq2seq import Seq2SeqConfig, Seq2SeqTransformer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Seq2SeqTransformer(Seq2SeqConfig(vocab_size=13, context_length=16, d_model=8, n_heads=2,
                                                 n_encoder_layers=1, n_decoder_layers=2, d_ff=16, dropout=0.1,
                                                 pad_id=pad_id)).double()
        with torch.no_grad():
            for name, param in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    param.copy_(1 + 0.5 * torch.randn_like(param))
                elif "norm" in name and name.endswith("bias"):
                    param.copy_(0.3 * torch.randn_like(param))
    for name, module in list(model.named_modules()):
        if isinstance(getattr(module, "dropout", None), float):
            module.dropout = 0.0  # the attention weights: no dropout (it would draw at random)
        for child_name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Dropout):
                setattr(module, child_name, _PatternDropout())
    return model.train()


def _step_batch(seed, pad_id, src_lens, src_width, tgt_lens):
    """Sources padded on the right to ``src_width`` and targets ``<s> y </s>`` padded on the right
    (``tgt_lens``: the lengths of the ``y``), ids drawn in [3, 13) without ``pad_id``, as
    ``tokenizer.encode_batch(..., bos=True, eos=True)`` gives them."""
    g = torch.Generator().manual_seed(seed)

    def ids(n):
        out = torch.randint(3, 13, (n,), generator=g)
        return torch.where(out == pad_id, torch.full_like(out, 12 if pad_id != 12 else 4), out)

    src = torch.full((len(src_lens), src_width), pad_id)
    for b, n in enumerate(src_lens):
        src[b, :n] = ids(n)
    tgt = torch.full((len(tgt_lens), max(tgt_lens) + 2), pad_id)
    for b, n in enumerate(tgt_lens):
        tgt[b, : n + 2] = torch.cat([torch.tensor([1]), ids(n), torch.tensor([2])])  # <s> y </s>
    return src, tgt


#: The step's cases: what each tests (named in the hints), the model's seed and padding id, each step's
#: (source lengths, source width, target lengths, eps, max_norm), and the mode the model arrives in.
_STEP_CASES = [
    dict(what="a batch of three rows of different lengths, every source padded, the model arriving in "
              "evaluation mode", seed=91, pad_id=0, train=False,
         steps=[((4, 2, 3), 5, (3, 1, 5), 0.1, 0.05), ((2, 3, 1), 4, (2, 4, 2), 0.1, 1e4)]),
    dict(what="a batch of one, with no padding", seed=92, pad_id=0, train=True,
         steps=[((3,), 3, (4,), 0.1, 0.05)]),
    dict(what="pad_id 3 (not 0), a source row and a target row with no padding, eps = 0", seed=93, pad_id=3,
         train=False, steps=[((4, 2), 4, (2, 4), 0.0, 0.05)]),
]


def _step_variant(model, optimizer, src, tgt, eps, max_norm, mistake=None):
    """The step of the text (``mistake=None``), or one of its classic mistakes."""
    pad = 0 if mistake == "pad 0" else model.config.pad_id
    if mistake != "no train":
        model.train()
    if mistake == "no shift":
        tgt_in, tgt_out = tgt, tgt
    elif mistake in ("shift reversed", "shift reversed, target mask"):
        tgt_in, tgt_out = tgt[:, 1:], tgt[:, :-1]
    else:
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]  # <s> y, and y </s>
    if mistake not in ("no zero", "zero at end"):
        optimizer.zero_grad()
    src_mask = src == pad if mistake == "inverted mask" else src != pad  # True = a real token
    # the target mask changes only padded positions, which the loss leaves out (but not with a reversed shift)
    tgt_mask = None if mistake in ("shift reversed", "mean over all") else tgt_in != pad
    logits, _ = model(src, tgt_in, src_key_mask=src_mask, tgt_key_mask=tgt_mask)  # (B, T, V)
    options = {"torch smoothing": dict(spread="all"), "no smoothing": dict(spread="none"),
               "mean over all": dict(mean="all"), "mean over all, target mask": dict(mean="all"),
               "sum": dict(mean="sum")}.get(mistake, {})
    loss = _smoothed(logits, tgt_out, pad, eps, **options)
    loss.backward()
    if mistake not in ("no clip", "clip after"):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0 if mistake == "clip 1" else max_norm)
    if mistake != "no step":
        optimizer.step()
    if mistake == "clip after":
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if mistake == "zero at end":
        optimizer.zero_grad()
    return loss.item()


_STEP_MISTAKES = {
    "no train": "the model came in evaluation mode and your step trained it so, without dropout: call "
                "model.train() first (translate() and every evaluation leave the model in evaluation mode).",
    "no shift": "teacher forcing shifts the target: the decoder reads tgt[:, :-1] (<s> y) and is scored on "
                "tgt[:, 1:] (y </s>); you used the whole tgt for both.",
    "shift reversed": "the shift is the wrong way round: the decoder reads tgt[:, :-1] (<s> y) and is scored on "
                      "tgt[:, 1:] (y </s>), the next token at every position.",
    "shift reversed, target mask": "the shift is the wrong way round: the decoder reads tgt[:, :-1] (<s> y) and is "
                                   "scored on tgt[:, 1:] (y </s>), the next token at every position.",
    "pad 0": "on pad_id 3 your step treats 0 as the padding: take the padding id from model.config.pad_id, "
             "for the source mask and for the loss.",
    "inverted mask": "your source mask is True at the padding: the companion's masks are True at the REAL "
                     "tokens (src != pad_id); torch.nn's key_padding_mask is the opposite.",
    "torch smoothing": "your loss spreads eps over the padding token too (F.cross_entropy's label_smoothing, "
                       "or translation.smoothed_cross_entropy): use exercise 9.8's loss, which gives <pad> "
                       "nothing.",
    "no smoothing": "eps was not used: the loss is exercise 9.8's label-smoothed one, with the eps given.",
    "mean over all": "your loss averages over every target position, padding included: only the positions "
                     "whose target is not pad_id count (exercise 9.8's loss).",
    "mean over all, target mask": "your loss averages over every target position, padding included: only the "
                                  "positions whose target is not pad_id count (exercise 9.8's loss).",
    "sum": "your loss sums over the real target positions; take their mean (exercise 9.8's loss).",
    "no zero": "the gradients accumulate: call optimizer.zero_grad() before backward(); otherwise the "
               "gradients left by earlier code are added to this step's.",
    "zero at end": "zero the gradients at the START of the step (before backward): this step began with "
                   "gradients left over from earlier code, and they were added to yours.",
    "no clip": "the gradients were not clipped: call torch.nn.utils.clip_grad_norm_(model.parameters(), "
               "max_norm) after backward() and before optimizer.step().",
    "clip after": "you clipped after optimizer.step(), when the update was already made with the unclipped "
                  "gradients: clip between backward() and step().",
    "clip 1": "clip to the max_norm you are given, not to a fixed 1.0.",
    "no step": "the parameters did not change: call optimizer.step() after clipping.",
}


def _steps(step, case, stale):
    """Run ``step`` on a fresh model of ``case`` (stale gradients in it, SGD), one batch after the other;
    yield after each step the parameters, the gradients (0 where None), the value returned and the
    facts the check reads (inputs unchanged, random state untouched, training mode)."""
    model = _step_model(case["seed"], case["pad_id"])
    for p, s in zip(model.parameters(), stale):
        p.grad = s.clone()  # gradients left over from earlier code
    model.train(case["train"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for n, (src_lens, width, tgt_lens, eps, max_norm) in enumerate(case["steps"]):
        src, tgt = _step_batch(case["seed"] * 10 + n, case["pad_id"], src_lens, width, tgt_lens)
        given_src, given_tgt = src.clone(), tgt.clone()
        state = unseeded_rng()
        try:
            returned = step(model, optimizer, given_src, given_tgt, eps, max_norm)
        finally:
            rng = torch.equal(state, torch.get_rng_state())
            torch.set_rng_state(state)
        facts = dict(inputs=torch.equal(given_src, src) and torch.equal(given_tgt, tgt), rng=rng,
                     training=all(m.training for m in model.modules()))
        params = torch.cat([p.detach().flatten() for p in model.parameters()]).clone()
        grads = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).detach().flatten()
                           for p in model.parameters()]).clone()
        yield params, grads, returned, facts


def _variant_at(case, stale, n, mistake):
    """Parameters, gradients and loss after step ``n`` of the mistake ``mistake``, or None if it fails there."""
    try:
        for k, (params, grads, loss, _) in enumerate(_steps(lambda *a: _step_variant(*a, mistake=mistake), case,
                                                            stale)):
            if k == n:
                return params, grads, loss
    except (RuntimeError, ValueError):  # an inverted mask on a row without padding: nothing to compare
        return None
    return None


def _same(a, b, *, grads=True):
    """Equal parameters (and gradients), to float64's precision give or take a float32 loss."""
    return b is not None and close(a[0], b[0], rtol=1e-5, atol=1e-7) and (not grads or close(a[1], b[1], rtol=1e-5,
                                                                                               atol=1e-7))


@checker("Exercise 9.9", companion_given=True)
def seq2seq_step(my_seq2seq_step) -> None:
    """``my_seq2seq_step(model, optimizer, src, tgt, eps, max_norm) -> float``: one training step of the
    encoder-decoder on a padded batch: model.train(); teacher forcing (``tgt[:, :-1]`` in,
    ``tgt[:, 1:]`` scored); the source mask ``src != pad_id``; exercise 9.8's smoothed loss over the
    real target positions; zero_grad, backward, clip_grad_norm_(max_norm), step; the loss as a float.

    Checked against the step of the text on generated padded batches (three rows of different
    lengths, a batch of one, ``pad_id`` 3 with rows that have no padding; the model arriving in
    evaluation or training mode; stale gradients in it; a step that clips and one that does not;
    two steps in a row), with a fixed pattern in place of dropout: the parameters after each step
    and the loss returned; the caller's tensors unchanged, the model left in training mode,
    torch's random state untouched (the dropout is the model's; the step draws nothing)."""
    g = torch.Generator().manual_seed(99)
    stale = [torch.randn(p.shape, generator=g, dtype=p.dtype) * 0.5 for p in _step_model(0, 0).parameters()]
    for case in _STEP_CASES:
        what = case["what"]
        right = list(_steps(_step_variant, case, stale))
        for n, (params, grads, got_loss, fact) in enumerate(_steps(my_seq2seq_step, case, stale)):
            call = f"on {what}" + (f", step {n + 1}" if len(case["steps"]) > 1 else "")
            want = right[n]
            if not fact["inputs"]:
                hint(f"{call}: your step changed the src or tgt it was given (tgt[:, :-1] is a view of tgt: "
                     "changing it in place changes the caller's batch). Work on copies.")
            if not _same((params, grads), want, grads=False):
                wrong = {m: _variant_at(case, stale, n, m) for m in _STEP_MISTAKES}
                for mistake, message in _STEP_MISTAKES.items():  # parameters and gradients as the mistake's
                    if _same((params, grads), wrong[mistake]):
                        hint(f"{call}: {message}")
                for mistake, message in _STEP_MISTAKES.items():  # the parameters alone
                    if _same((params, grads), wrong[mistake], grads=False):
                        hint(f"{call}: {message}")
                if n > 0:
                    hint(f"{call}: the first step is right but the second is not: each call must do the whole "
                         "step on the batch it is given.", generic=True)
                hint(f"{call}: the parameters after your step differ from those of the step of the text "
                     f"(model.train(); the loss of exercise 9.8 on model(src, tgt[:, :-1]) against tgt[:, 1:]; "
                     f"zero_grad, backward, clip, step): {first_difference(params, want[0], 'parameters')}.",
                     generic=True)
            if not fact["rng"]:
                hint(f"{call}: your step changed torch's global random state (torch.manual_seed, or a draw): "
                     "the step draws nothing at random itself, and must not reseed the caller's generator.")
            if not fact["training"]:
                hint(f"{call}: the model was left in evaluation mode: the step trains it, and leaves it in "
                     "training mode (model.train()).")
            if isinstance(got_loss, torch.Tensor):
                hint("return the loss as a Python float, loss.item(): a tensor keeps the whole computation "
                     "graph of the step alive (and the training log needs plain numbers).")
            if not isinstance(got_loss, (float, int)) or isinstance(got_loss, bool):
                hint(f"return the loss of the step as a float; you returned {describe(got_loss)}.")
            if not close(got_loss, want[2], rtol=1e-5, atol=1e-7):
                for mistake in ("sum", "mean over all", "mean over all, target mask", "torch smoothing",
                                "no smoothing", "no shift", "pad 0"):
                    other = _variant_at(case, stale, n, mistake)
                    if other is not None and close(got_loss, other[2], rtol=1e-5, atol=1e-7):
                        hint(f"{call}: {_STEP_MISTAKES[mistake]}")
                hint(f"{call}: the parameters are updated right, but the returned loss {got_loss!r} is not this "
                     f"step's loss {want[2]:.6f}: return the loss computed on the batch, before the update.")
    passed("teacher forcing, the source mask, the smoothed loss over the real targets, zero_grad, "
           "backward, clip, step: the update is exactly the step of the text.")
