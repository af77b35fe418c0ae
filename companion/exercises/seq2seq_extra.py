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
from ._core import checker, close, describe, hint, passed, require_graph
from .seq2seq import *  # noqa: F401,F403 - exercises 9.1, 9.4 and 9.6
from .seq2seq_model import *  # noqa: F401,F403 - exercises 9.2, 9.3 and 9.5

__all__ = [*_seq2seq.__all__, *_seq2seq_model.__all__, "next_chars", "smoothed_loss"]


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
    state = torch.get_rng_state()
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
