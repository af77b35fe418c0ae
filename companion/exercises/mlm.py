"""Checkers for chapter 10, *Encoder-only: filling in the blanks*.

* Exercise 10.1, the masking rule: 15% of the positions chosen (never a special token), of those
  80% ``[MASK]``, 10% a random character, 10% unchanged; labels ``-100`` where not chosen. The
  answer is random, so the check is statistical: it calls the student's function on 1,049,088
  positions (about 975,000 characters) and compares each share with its expected value, with
  margins from Bernstein's inequality (which uses the variance p(1 - p) of each draw) set so that
  a right answer fails with probability below 1e-10 (each test at ``DELTA`` = 1e-12). A million
  draws put the margin of the 15% near 0.26 points and those of the 80/10/10 shares near 0.8
  points, so 14.5% or 15.5% chosen, and 78/12/10, 82/8/10, 80/12/8 or 77.5/10/12.5 are told
  apart from the rule. It also checks that the number chosen varies from row to row as
  independent draws do (exactly 15% of each row is not the rule) and that every character, the
  last one included, can be the random replacement.
* Exercise 10.2, the loss over the chosen positions only (deterministic).
* Exercise 10.3, padding a batch of lines and its key mask (deterministic).
* Exercise 10.4, one masked-LM pre-training step (mask_tokens with the caller's generator, the model
  on the masked inputs with the key mask, the loss over the chosen positions, zero_grad, backward,
  step; None when nothing is chosen): differential, against the reference step, on generated edge
  classes, with the parameters, the returned losses and the generator's state compared.
* Exercise 10.5, one swap of two adjacent, different letters (the probe's task): every answer on
  fixed lines must be one of the swaps listed by brute force; lines with no such pair must raise
  ValueError; 4,000 draws on one line must spread over its 7 pairs uniformly (Bernstein margins
  at ``DELTA``), and the same seed must give the same swap.
* Exercise 10.6, one fine-tuning step of a linear head on the ``[CLS]`` hidden state: differential,
  against the reference step, on generated edge classes (padding, a batch of one, three classes,
  float64), with the parameters and the returned losses compared.
"""
from __future__ import annotations

import inspect
import math
import re

import torch
import torch.nn.functional as F

from ._core import unseeded_rng, StudentError, attempt, checker, close, first_difference, hint, passed, require_graph, source_facts
from .rules import watch

__all__ = ["mask_tokens", "mlm_loss", "pad_batch", "mlm_step", "swap_letters", "cls_step", "N_CHARS", "PAD_ID", "MASK_ID", "CLS_ID"]

#: The chapter's vocabulary: 69 characters, then [PAD], [MASK], [CLS].
N_CHARS, PAD_ID, MASK_ID, CLS_ID = 69, 69, 70, 71
#: Chance that one statistical test rejects a right answer (there are fewer than 100 tests).
DELTA = 1e-12


def _margin(n: int, p: float = 0.5, delta: float = DELTA) -> float:
    """Bernstein: a mean of ``n`` independent 0/1 draws of probability ``p`` is within this of ``p``
    with probability at least ``1 - delta`` (variance p(1 - p); p = 0.5 is the worst case)."""
    n = max(n, 1)
    log_term = math.log(2 / delta)
    return log_term / (3 * n) + math.sqrt((log_term / (3 * n)) ** 2 + 2 * p * (1 - p) * log_term / n)


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"a tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    return type(x).__name__


def _int_tensor(x, shape: tuple, what: str) -> torch.Tensor:
    """``x`` as a long tensor of ``shape``, or a hint that says what is wrong."""
    if not isinstance(x, torch.Tensor):
        hint(f"{what} should be a tensor of shape {shape}; you returned {_describe(x)}.")
    if tuple(x.shape) != tuple(shape):
        hint(f"{what} should have shape {shape}, the shape of `ids`; got {tuple(x.shape)}.")
    if x.is_floating_point() or x.is_complex() or x.dtype == torch.bool:
        hint(f"{what} should hold integer token ids (dtype torch.long); got dtype {x.dtype}.")
    return x.long()


# --------------------------------------------------------------------------- Exercise 10.1


def _mask_case() -> tuple[torch.Tensor, torch.Tensor]:
    """512 rows of [CLS] + 2048 characters, some rows ending in [PAD]s. Returns ids, special."""
    g = torch.Generator().manual_seed(1010)
    B, T = 512, 2049
    ids = torch.randint(N_CHARS, (B, T), generator=g)  # (B, T) characters
    ids[:, 0] = CLS_ID
    lengths = T - (torch.arange(B) % 4) * 96  # (B,): rows 1, 2, 3 of every 4 end with padding
    ids[torch.arange(T)[None, :] >= lengths[:, None]] = PAD_ID
    return ids, ids >= N_CHARS


_ONLY_MASKED = ("{share} of the positions have a label: only the [MASK]ed ones. The 10% replaced by a "
                "random character and the 10% left unchanged are chosen too, and are scored.")


def _near(share: float, expected: float, n: int) -> bool:
    return abs(share - expected) <= _margin(n, expected)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


@checker("Exercise 10.1")
def mask_tokens(my_mask_tokens) -> None:
    """``my_mask_tokens(ids, n_chars, mask_id, generator)`` -> ``(inputs, labels)``: ids ``(B, T)``;
    ids ``>= n_chars`` are special and never chosen; every draw from ``generator``."""
    ids, special = _mask_case()
    given = ids.clone()
    out = my_mask_tokens(given, N_CHARS, MASK_ID, torch.Generator().manual_seed(10))
    if isinstance(out, torch.Tensor):
        hint("return two tensors, (inputs, labels): the model's input and the labels of the chosen positions.")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"return a pair (inputs, labels); you returned {_describe(out)}"
             f"{f' of length {len(out)}' if isinstance(out, (tuple, list)) else ''}.")
    inputs = _int_tensor(out[0], tuple(ids.shape), "inputs")
    labels = _int_tensor(out[1], tuple(ids.shape), "labels")
    if not torch.equal(given, ids):
        hint("your function changed `ids` in place; work on a copy (ids.clone()), the caller still needs it.")
    real = ~special
    if (inputs == -100).any() and not (labels == -100).any():
        hint("(inputs, labels) are swapped: the -100s belong to the labels, the second tensor you return.")
    if (inputs == -100).any():
        hint("the inputs hold -100, which is not a token: -100 marks a position in the LABELS only.")
    if torch.equal(labels, ids):
        hint("the labels hold the token at every position; positions that are not chosen get the label "
             "-100, which cross_entropy(..., ignore_index=-100) skips.")
    if (labels == -100).all():
        hint("every label is -100: no position was chosen. Choose each character with probability 0.15.")
    scored = labels != -100
    wrong_label = scored & (labels != ids)
    if wrong_label.any():
        if torch.equal(labels, inputs) or bool((labels[scored] == inputs[scored]).all()):
            hint("the labels hold the input after masking (often [MASK]); they must hold the ORIGINAL token, "
                 "the answer the model has to find.")
        values = labels[wrong_label]
        if bool((values == values[0]).all()) and bool((~scored | (labels == ids) | (labels == values[0])).all()):
            hint(f"positions that are not chosen must be labelled -100, not {int(values[0])}.")
        hint("at a chosen position the label is the original token (ids), and -100 everywhere else.",
             generic=True)
    chosen = scored
    if (chosen & special).any():
        hint("a special token ([CLS], [PAD], ids >= n_chars) was chosen; choose only characters (ids < n_chars).")
    if ((~chosen) & (inputs != ids)).any():
        if torch.equal(chosen, inputs == MASK_ID):
            hint(_ONLY_MASKED.format(share=_pct(float(chosen.sum()) / float(real.sum()))))
        hint("a position with label -100 changed in the input: only the chosen positions may change.",
             generic=True)
    changed = chosen & (inputs != ids) & (inputs != MASK_ID)
    if changed.any() and bool(((inputs[changed] < 0) | (inputs[changed] >= N_CHARS)).any()):
        hint("a random replacement is not a character: draw it from the n_chars characters "
             "(torch.randint(n_chars, ...)), never a special token.")

    half = ids.shape[1] // 2
    halves = (("first", slice(0, half)), ("second", slice(half, None)))
    for part, cols in halves:  # within each half, pairs of rows must be chosen independently
        both = real[0::2, cols] & real[1::2, cols]  # disjoint pairs of rows
        n_both = int(both.sum())
        together = float((chosen[0::2, cols] & chosen[1::2, cols] & both).sum()) / n_both
        alone = (float((chosen[0::2, cols] & both).sum()) / n_both) * (
            float((chosen[1::2, cols] & both).sum()) / n_both)
        if together > alone + 2 * _margin(n_both, max(alone, 0.15**2)):
            hint("the rows share their chosen positions: draw a separate number for every position of every "
                 "row (torch.rand(ids.shape, ...)), not one per column.")
    rates = []
    for part, cols in halves:
        n_part = int(real[:, cols].sum())
        rates.append((part, float(chosen[:, cols].sum()) / n_part, n_part))
    (_, r1, n1), (_, r2, n2) = rates
    if abs(r1 - r2) > _margin(n1, max(r1, r2, 0.15)) + _margin(n2, max(r1, r2, 0.15)):
        hint(f"{_pct(r1)} of the first half of the positions were chosen and {_pct(r2)} of the second: choose "
             "every position with the same probability, wherever it is in the row.")

    n_real = int(real.sum())
    rate = float(chosen.sum()) / n_real
    if not _near(rate, 0.15, n_real):
        if _near(rate, 0.15 * 0.8, n_real):
            hint(_ONLY_MASKED.format(share=_pct(rate)))
        if _near(rate, 0.85, n_real):
            hint(f"{_pct(rate)} of the positions were chosen: the comparison is the wrong way round; choose "
                 "a position when its uniform draw is BELOW 0.15.")
        hint(f"{_pct(rate)} of the characters were chosen; choose each one with probability 0.15.",
             generic=True)
    m = int(chosen.sum())
    to_mask = float((inputs[chosen] == MASK_ID).float().mean())
    kept = float((inputs[chosen] == ids[chosen]).float().mean())
    randomized = 1.0 - to_mask - kept
    ok_mask = _near(to_mask, 0.8, m)
    ok_kept = 0.1 - _margin(m, 0.1) <= kept <= 0.1 + 0.1 / N_CHARS + _margin(m, 0.1)
    ok_random = 0.1 * (1 - 1 / N_CHARS) - _margin(m, 0.1) <= randomized <= 0.1 + _margin(m, 0.1)
    if not (ok_mask and ok_kept and ok_random):
        shares = f"{_pct(to_mask)} [MASK], {_pct(randomized)} random, {_pct(kept)} unchanged"
        if to_mask > 0.95:
            hint(f"every chosen position became [MASK] ({shares}); BERT masks 80% of them, replaces 10% by a "
                 "random character and leaves 10% unchanged, so that the model cannot rely on seeing [MASK].")
        if kept < 0.05:
            hint(f"no chosen position kept its token ({shares}): 10% of the chosen positions stay as they "
                 "are (and are still scored).")
        if randomized < 0.05:
            hint(f"no chosen position got a random character ({shares}): 10% of them are replaced by a "
                 "character drawn at random.")
        if to_mask < 0.3 and randomized > 0.6:
            hint(f"the 80% and the 10% are swapped ({shares}): 80% [MASK], 10% random, 10% unchanged.")
        hint(f"of the chosen positions, {shares}; expected 80%, 10%, 10%. Draw one uniform number per "
             "position: below 0.8 [MASK], from 0.8 to 0.9 random, above 0.9 unchanged.", generic=True)

    # independent draws: the number chosen in a row varies like a binomial; a fixed count does not
    n_row = real.sum(1).double()  # (B,)
    spread = float(((chosen.sum(1).double() - 0.15 * n_row) ** 2).sum() / (n_row * 0.15 * 0.85).sum())
    if spread < 0.5:  # about 1 for independent draws; below 0.5 has probability < 1e-13 over 512 rows
        hint("every row has (almost) exactly the same share of chosen positions: choose each position "
             "independently, with its own uniform draw below 0.15, not a fixed number per row (randperm, topk).")
    swapped = changed & (inputs != ids)
    drawn = torch.bincount(inputs[swapped], minlength=N_CHARS).double()[:N_CHARS]  # (n_chars,)
    n_drawn = int(drawn.sum())
    if n_drawn > 5000:
        if drawn[-1] == 0:
            hint(f"the random character is never the last one, id {N_CHARS - 1}: torch.randint(n_chars, ...) "
                 "draws 0 .. n_chars - 1 (its upper bound is excluded), so randint(0, n_chars - 1) never "
                 "gives the last character.")
        # a draw equal to the original counts as unchanged: each character's share is 1/(n_chars - 1) at most
        worst = max(abs(float(c) / n_drawn - 1 / N_CHARS) for c in drawn)
        if worst > 1 / (N_CHARS - 1) - 1 / N_CHARS + _margin(n_drawn, 1 / N_CHARS, DELTA / N_CHARS):
            hint("the random characters are not uniform over 0 .. n_chars - 1: draw them with "
                 "torch.randint(n_chars, ids.shape, generator=generator).", generic=True)
    again = my_mask_tokens(ids.clone(), N_CHARS, MASK_ID, torch.Generator().manual_seed(10))
    same = (isinstance(again, (tuple, list)) and len(again) == 2
            and all(isinstance(a, torch.Tensor) and a.shape == ids.shape for a in again)
            and torch.equal(again[0].long(), inputs) and torch.equal(again[1].long(), labels))
    if not same:
        hint("the same seed gave other masks: make every draw with the `generator` you are given "
             "(torch.rand(..., generator=generator)), so that a run can be repeated.")
    other = my_mask_tokens(ids.clone(), N_CHARS, MASK_ID, torch.Generator().manual_seed(11))
    if (isinstance(other, (tuple, list)) and len(other) == 2 and isinstance(other[1], torch.Tensor)
            and other[1].shape == labels.shape and torch.equal(other[1].long(), labels)):
        hint("two different seeds gave the same masks: draw from the `generator` you are given as it is; "
             "do not create your own or re-seed it (generator.manual_seed(...) inside your function).")
    for name, t in (("inputs", out[0]), ("labels", out[1])):
        if t.dtype != ids.dtype:
            hint(f"the shares are right, but `{name}` has dtype {t.dtype}: keep the dtype of `ids`, "
                 f"{ids.dtype} (a LongTensor: the embedding and the loss index with it).")
    passed("15% chosen (never a special), then 80/10/10.")


# --------------------------------------------------------------------------- Exercise 10.2


def _loss_case():
    g = torch.Generator().manual_seed(102)
    logits = torch.randn(2, 6, 5, generator=g, dtype=torch.float64) * 2  # (B, T, V)
    targets = torch.randint(5, (2, 6), generator=g)
    targets[0, 0] = 0  # a target of id 0, which a label of -100 clamped to 0 would also give
    labels = torch.full((2, 6), -100)
    labels[0, 2] = targets[0, 2]  # row 0: one chosen position
    labels[1, [0, 1, 3, 5]] = targets[1, [0, 1, 3, 5]]  # row 1: four
    return logits, labels


def _loss_cases():
    """(logits, labels, what) beyond the first case: shapes, dtypes, rows far apart."""
    g = torch.Generator().manual_seed(1021)
    cases = []
    for (B, T, V), dtype in (((1, 1, 3), torch.float32), ((3, 7, 11), torch.float64), ((2, 4, 2), torch.float32)):
        logits = torch.randn(B, T, V, generator=g, dtype=dtype) * 3
        labels = torch.randint(V, (B, T), generator=g)
        labels[torch.rand(B, T, generator=g) < 0.5] = -100
        labels.view(-1)[0] = 0  # at least one scored position
        cases.append((logits, labels, f"logits of shape {(B, T, V)} ({dtype})"))
    far = torch.tensor([[[1000.0, 999.0, 998.0], [-1000.0, -1001.0, -999.0], [5.0, 0.0, 0.0]]])
    cases.append((far, torch.tensor([[0, 2, -100]]), "two scored rows of logits near +1000 and -1000"))
    return cases


@checker("Exercise 10.2")
def mlm_loss(my_mlm_loss) -> None:
    """``my_mlm_loss(logits, labels)``: logits ``(B, T, V)``, labels ``(B, T)`` with ``-100`` where a
    position is not scored -> the mean of ``-log softmax(logits)[label]`` over the scored positions."""
    logits, labels = _loss_case()
    with watch() as seen:
        got = my_mlm_loss(logits.clone(), labels.clone())
    if seen.called("cross_entropy"):
        hint("your function calls F.cross_entropy (or nn.CrossEntropyLoss), which the exercise asks you not to "
             "call: take torch.log_softmax of the scored positions' logits and average -log p of the labels.")
    B, T, V = logits.shape
    expected = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), ignore_index=-100)
    if isinstance(got, (float, int)) and not isinstance(got, bool) and close(got, expected):
        hint("right value, but return a tensor (a scalar), so that loss.backward() can follow it.")
    if not isinstance(got, torch.Tensor):
        hint(f"return a scalar tensor; you returned {_describe(got)}.")
    if got.is_complex() or got.dtype == torch.bool:
        hint(f"return a real-valued scalar tensor (got dtype {got.dtype}).")
    logp = logits.log_softmax(-1)  # (B, T, V)
    chosen = labels != -100
    safe = labels.clamp(min=0)  # (B, T): -100 read as id 0
    picked = logp.gather(-1, safe[..., None])[..., 0]  # (B, T) log p of each label
    if got.numel() > 1:
        if close(got, -picked * chosen) or close(got, -picked[chosen]):
            hint("you returned one loss per position; return their mean over the scored positions, one number.")
        hint(f"return one number (a scalar tensor), not a tensor of shape {tuple(got.shape)}.")
    if got.dim() != 0:
        hint(f"return a scalar tensor (shape ()), as F.cross_entropy does; yours has shape {tuple(got.shape)}: "
             "drop keepdim=True, or index the single value with [0] / .squeeze().")
    value = got
    if close(value, expected):
        big = torch.zeros(1, 2, 3, dtype=torch.float64)
        big[0, 0] = torch.tensor([1000.0, 0.0, -1000.0])
        lab = torch.tensor([[2, -100]])
        again = my_mlm_loss(big, lab)
        if not isinstance(again, torch.Tensor) or again.numel() != 1 or not close(again.reshape(()), 2000.0):
            hint("right on ordinary logits, but logits of ±1000 give inf, nan or a wrong value: use "
                 "torch.log_softmax (it subtracts the row maximum) rather than log(softmax(...)).")
        for case_logits, case_labels, what in _loss_cases():
            with watch() as seen:
                again = my_mlm_loss(case_logits.clone(), case_labels.clone())
            if seen.called("cross_entropy"):
                hint("your function calls F.cross_entropy (or nn.CrossEntropyLoss), which the exercise asks you "
                     "not to call: take torch.log_softmax and average -log p of the labels.")
            right = F.cross_entropy(case_logits.flatten(0, 1), case_labels.flatten(), ignore_index=-100)
            if not isinstance(again, torch.Tensor) or again.numel() != 1 or again.is_complex():
                hint(f"return one number, a scalar tensor; for {what} you returned {_describe(again)}.")
            if close(again.reshape(()), right, rtol=1e-4, atol=1e-5):
                continue
            if not bool(torch.isfinite(again).all()):
                hint(f"for {what} your loss is {float(again.reshape(()).real):g}: subtract each row's own "
                     "maximum (torch.log_softmax does), not one maximum for the whole tensor.")
            hint(f"for {what} the loss should be {float(right):.4f}, yours is {float(again.reshape(())):.4f}.",
                 generic=True)
        require_graph(my_mlm_loss, (logits, labels), grad=(0,))
        passed(f"{float(value):.4f} nats: the mean over the 5 scored positions.")
    mistakes = [
        (-picked.mean(), "you averaged over every position: the positions labelled -100 are not scored; "
                         "average over the chosen positions only (ignore_index=-100)."),
        (-picked[chosen].sum(), "you summed over the scored positions; take their mean."),
        (-picked[chosen].sum() / (B * T), "you divided by all B*T positions; divide by the number of scored "
                                          "positions (here 5)."),
        (picked[chosen].mean(), "the sign is wrong: the loss is MINUS the log-probability of the label."),
        (-logp.exp().gather(-1, safe[..., None])[..., 0][chosen].mean(),
         "you used the probability of the label, not its logarithm: the loss is -log p."),
        (-logits.gather(-1, safe[..., None])[..., 0][chosen].mean(),
         "you took the raw logit of the label; normalize first: log_softmax(logits)[label]."),
        (-logits.log_softmax(1).gather(-1, safe[..., None])[..., 0][chosen].mean(),
         "the softmax must run over the vocabulary (the last dimension, V), not over the positions."),
        (-torch.stack([picked[b][chosen[b]].mean() for b in range(B)]).mean(),
         "you averaged each row, then the rows: rows with more scored positions must weigh more. Take one "
         "mean over all scored positions."),
        (-picked[~chosen].mean(), "you scored the positions labelled -100 and skipped the chosen ones: the "
                                  "other way round."),
        (expected / math.log(2), "that is the loss in bits (log base 2); the loss is in nats: the natural log."),
        (-logp.mean(-1)[chosen].mean(), "you averaged the log-probabilities of the whole vocabulary; pick the "
                                        "one of the label: log_softmax(logits)[label]."),
    ]
    for wrong, message in mistakes:
        if close(value, wrong):
            hint(message)
    hint(f"expected {float(expected):.4f}: the mean of -log_softmax(logits)[label] over the positions whose "
         "label is not -100.", generic=True)


# --------------------------------------------------------------------------- Exercise 10.3


def _pad_case() -> list[torch.Tensor]:
    # Real tokens include id 0 (the newline character), so "ids != 0" is not a key mask.
    return [torch.tensor([CLS_ID, 5, 0]), torch.tensor([CLS_ID, 0, 8, 0, 3, 2]), torch.tensor([CLS_ID]),
            torch.tensor([CLS_ID, 44, 1, 0])]


@checker("Exercise 10.3")
def pad_batch(my_pad_batch) -> None:
    """``my_pad_batch(seqs, pad_id)``: a list of 1-D id tensors -> ``(ids, key_mask)``, each
    ``(B, T_max)``, padded on the right with ``pad_id``; key_mask bool, True at real tokens."""
    g = torch.Generator().manual_seed(103)
    cases = [(_pad_case(), PAD_ID),
             # a real token equal to pad_id: the mask must come from the lengths, not from ids != pad_id
             ([torch.tensor([CLS_ID, 5, 7]), torch.tensor([CLS_ID, 5]), torch.tensor([CLS_ID, 3, 5, 5, 9])], 5)]
    for B in (1, 5):
        seqs = [torch.cat([torch.tensor([CLS_ID]), torch.randint(N_CHARS, (int(n),), generator=g)])
                for n in torch.randint(0, 9, (B,), generator=g)]
        cases.append((seqs, PAD_ID))
    for seqs, pad_id in cases:
        _check_pad(my_pad_batch, seqs, pad_id)
    passed("padded on the right; the mask marks the real tokens.")


def _check_pad(my_pad_batch, seqs, PAD_ID) -> None:
    B, T = len(seqs), max(len(s) for s in seqs)
    lengths = torch.tensor([len(s) for s in seqs])
    want_mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
    want_ids = torch.full((B, T), PAD_ID)
    for b, s in enumerate(seqs):
        want_ids[b, : len(s)] = s
    out = my_pad_batch([s.clone() for s in seqs], PAD_ID)
    if isinstance(out, torch.Tensor):
        hint("return two tensors, (ids, key_mask): the padded ids and the mask of the real tokens.")
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        hint(f"return a pair (ids, key_mask); you returned {_describe(out)}.")
    ids, key_mask = out
    if (isinstance(ids, torch.Tensor) and isinstance(key_mask, torch.Tensor) and ids.dtype == torch.bool
            and key_mask.dtype != torch.bool):
        hint("(ids, key_mask) are swapped: return the ids first, then the mask.")
    if isinstance(ids, torch.Tensor) and tuple(ids.shape) == (T, B) and B != T:
        hint(f"ids has shape (T, B) = {(T, B)}: put the batch first, shape (B, T) = {(B, T)} "
             "(pad_sequence needs batch_first=True).")
    if isinstance(ids, torch.Tensor) and ids.ndim == 2 and ids.shape[0] == B and ids.shape[1] != T:
        hint(f"pad every line to the longest one, T = {T} positions (got {ids.shape[1]}): "
             + ("longer lines were cut." if ids.shape[1] < T else "no longer than needed."))
    ids = _int_tensor(ids, (B, T), "ids")
    if not isinstance(key_mask, torch.Tensor):
        hint(f"key_mask should be a bool tensor of shape {(B, T)}; you returned {_describe(key_mask)}.")
    if key_mask.numel() == B * T and tuple(key_mask.shape) != (B, T):
        hint(f"key_mask should have shape (B, T) = {(B, T)}, the shape of ids (got {tuple(key_mask.shape)}); "
             "the attention module broadcasts it itself.")
    if tuple(key_mask.shape) != (B, T):
        hint(f"key_mask should have shape (B, T) = {(B, T)} (got {tuple(key_mask.shape)}).", generic=True)
    if not torch.equal(ids, want_ids):
        left_ids = torch.full((B, T), PAD_ID)
        for b, s in enumerate(seqs):
            left_ids[b, T - len(s):] = s
        if torch.equal(ids, left_ids):
            hint("you padded on the left; pad on the right, so that every line starts at position 0 with its "
                 "[CLS] (the summary vector is read there).")
        zero_ids = torch.where(want_mask, want_ids, torch.zeros_like(want_ids))
        if torch.equal(ids, zero_ids):
            hint("the padding is 0, which is a real token (the newline character); fill with `pad_id`.")
        hint("ids should hold each line's tokens from position 0, then `pad_id` up to the longest line's length.",
             generic=True)
    if key_mask.dtype != torch.bool:
        if close(key_mask, want_mask.double()):
            hint(f"right values, but key_mask must be a bool tensor (True = real token); got dtype "
                 f"{key_mask.dtype}. Comparisons such as < give bools.")
        hint(f"key_mask must be a bool tensor, True at real tokens (got dtype {key_mask.dtype}).")
    if not torch.equal(key_mask, want_mask):
        if torch.equal(key_mask, ~want_mask):
            hint("key_mask is inverted: True marks a REAL token (the companion's convention), False the padding. "
                 "(torch.nn.MultiheadAttention's key_padding_mask is the opposite.)")
        if torch.equal(key_mask, ids != 0):
            hint("a real token can have id 0 (the newline character): build the mask from the lengths, not from "
                 "ids != 0.")
        if torch.equal(key_mask, ids != PAD_ID):
            hint(f"a real token can have the id `pad_id` (here {PAD_ID}): build the mask from the lengths of the "
                 "lines, not from ids != pad_id.")
        shifted = torch.arange(T)[None, :] <= lengths[:, None]
        if torch.equal(key_mask, shifted) or torch.equal(key_mask, torch.arange(T)[None, :] < (lengths[:, None] - 1)):
            hint("the mask is off by one: a line of length L has real tokens at positions 0 .. L-1.")
        hint("key_mask[b, t] should be True exactly when t < the length of line b.", generic=True)
    if out[0].dtype != seqs[0].dtype:
        hint(f"the values are right, but ids has dtype {out[0].dtype}: keep the dtype of the lines, "
             f"{seqs[0].dtype} (a LongTensor: the embedding indexes with it).")


# --------------------------------------------------------------------------- Exercise 10.4


def _tokenizer():
    """A tokenizer of the chapter's shape (69 characters, then [PAD], [MASK], [CLS]), no corpus needed."""
    from companion.mlm import MaskedCharTokenizer

    return MaskedCharTokenizer("".join(chr(0x21 + i) for i in range(N_CHARS)))


def _tiny_encoder(seed: int, dtype: torch.dtype = torch.float32):
    """A small companion EncoderLM with every parameter drawn at random (seeded; the global RNG is
    untouched), no dropout."""
    from companion.mlm import EncoderLM, EncoderLMConfig

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = EncoderLM(EncoderLMConfig(vocab_size=N_CHARS + 3, context_length=12, d_model=8, n_layers=1,
                                          n_heads=2, dropout=0.0, bias=True))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    p.copy_(1 + 0.3 * torch.randn_like(p))
                else:
                    p.copy_(0.4 * torch.randn_like(p))
    # Softmax ignores a number added to every score of a row, so the key bias's gradient is 0 up to
    # rounding; Adam divides a gradient by its own size and would turn that rounding into a full step
    # whose sign depends on the order of a sum: two right answers would differ there. Frozen, it is
    # left out of every step (its gradient stays None).
    for block in model.encoder.blocks:
        if block.attn.k_proj.bias is not None:
            block.attn.k_proj.bias.requires_grad_(False)
    return model.to(dtype)


def _lines(lengths: list[int], seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[CLS] + random characters, one row per length, padded with [PAD]: ids and key mask (B, T)."""
    g = torch.Generator().manual_seed(seed)
    T = max(lengths)
    ids = torch.full((len(lengths), T), PAD_ID)
    for b, n in enumerate(lengths):
        ids[b, 0] = CLS_ID
        ids[b, 1:n] = torch.randint(N_CHARS, (n - 1,), generator=g)
    key_mask = torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]
    return ids, key_mask


def _chosen_by(ids: torch.Tensor, seed: int, steps: int) -> list[torch.Tensor]:
    """Which positions mask_tokens chooses in ``ids`` at each of ``steps`` calls in a row, with one
    generator seeded ``seed``."""
    from companion.mlm import mask_tokens

    g, tok = torch.Generator().manual_seed(seed), _tokenizer()
    return [mask_tokens(ids, tok, generator=g)[1] != -100 for _ in range(steps)]


def _seed_where(ids: torch.Tensor, want, start: int, steps: int) -> int:
    """The first generator seed from ``start`` whose masks at the ``steps`` calls satisfy ``want`` (a
    fixed search)."""
    return next(s for s in range(start, start + 5000) if want(_chosen_by(ids, s, steps)))


#: How far parameters after the student's steps may sit from the reference's: AdamW divides by
#: sqrt(v) + eps, so a weight whose gradient is rounding noise moves by an amount that noise sets, and
#: another CPU kernel (AVX2 against AVX-512) or thread count moved one by 1e-5 (10.6, seen in the grader).
#: Every mistake the checks name moves many weights by 1e-3 or more (lr 0.05).
_STEP_ATOL = 1e-4


class _StepCase:
    """One edge class of a training step: the lines, whether the key mask is given, the generator's seed,
    the optimizer, the dtype and the number of steps in a row."""

    def __init__(self, label, lengths, *, padded, want=None, optimizer="adamw", dtype=torch.float32, steps=2,
                 seed=0, n_classes=2):
        self.label, self.optimizer, self.dtype, self.steps, self.n_classes = label, optimizer, dtype, steps, n_classes
        self.ids, mask = _lines(lengths, 410 + seed)
        self.key_mask = mask if padded else None
        self.seed = seed
        self.gen_seed = _seed_where(self.ids, want, 100 * seed, steps) if want is not None else 4000 + seed

    def optimizer_for(self, params):
        if self.optimizer == "adamw":
            # eps 1e-3, not 1e-8: Adam divides a gradient by its own size, so a gradient near 0 (a GELU
            # unit deep in its tail, where the tail's rounding differs between CPUs) would take a step
            # set by its rounding error. With eps 1e-3 such a gradient moves its weight by nothing.
            return torch.optim.AdamW(params, lr=0.05, weight_decay=0.1, eps=1e-3)
        return torch.optim.SGD(params, lr=0.3, momentum=0.9)


def _step_cases() -> list[_StepCase]:
    def every_row(chosen):  # every row has a chosen position, at every step
        return all(bool(c.any(1).all()) for c in chosen)

    def one_row_without(chosen):  # the last row has none at the first step; the others always have some
        return not bool(chosen[0][-1].any()) and all(bool(c[:-1].any(1).all()) for c in chosen)

    return [
        _StepCase("a batch of three windows of 11 tokens", [11, 11, 11], padded=False, want=every_row, seed=1),
        _StepCase("a batch of one window", [9], padded=False, want=every_row, seed=2),
        _StepCase("lines of different lengths, padded, with their key mask", [11, 5, 8, 7], padded=True,
                  want=every_row, seed=3),
        _StepCase("a batch with a row where no position is chosen", [11, 10, 4], padded=True,
                  want=one_row_without, seed=4),
        _StepCase("a float64 model, with SGD and momentum", [10, 10], padded=False, want=every_row,
                  optimizer="sgd", dtype=torch.float64, seed=5),
        _StepCase("a batch where no position at all is chosen", [3, 2], padded=True,
                  want=lambda c: not bool(c[0].any()), steps=1, seed=6),
    ]


def _mlm_step_variant(model, optimizer, ids, key_mask, tokenizer, generator, mistake=None):
    """The right masked-LM step (``mistake=None``) and its classic mistakes, for comparison."""
    from companion.mlm import mask_tokens, mlm_loss

    inputs, labels = mask_tokens(ids, tokenizer, generator=generator)
    chosen = labels != -100
    if not bool(chosen.any()):
        return None
    if mistake not in ("no_zero", "zero_at_end"):
        optimizer.zero_grad()
    read = ids if mistake == "unmasked" else inputs
    logits, _ = model(read, key_mask=None if mistake == "no_key_mask" else key_mask)
    if mistake == "every_position":
        loss = mlm_loss(logits, ids)
    elif mistake == "only_masked":
        loss = mlm_loss(logits, torch.where(inputs == tokenizer.mask_id, labels, -100))
    elif mistake == "masked_labels":
        loss = mlm_loss(logits, torch.where(chosen, inputs, -100))
    elif mistake == "row_mean":
        logp = logits.float().log_softmax(-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]  # (B, T)
        rows = chosen.any(1)
        loss = -((logp * chosen).sum(1)[rows] / chosen.sum(1)[rows]).mean()
    else:
        loss = mlm_loss(logits, labels)
    loss.backward()
    if mistake == "zero_after_backward":
        optimizer.zero_grad()
    if mistake != "no_step":
        optimizer.step()
    if mistake == "zero_at_end":
        optimizer.zero_grad()
    return loss.item()


_MLM_STEP_MISTAKES = {
    "no_zero": "the gradients the model arrived with were added to this step's: call optimizer.zero_grad() "
               "before loss.backward() (PyTorch adds every backward pass into .grad).",
    "zero_at_end": "the gradients the model arrived with were added to this step's: zero them BEFORE "
                   "loss.backward(), at the start of the step, not only after optimizer.step().",
    "unmasked": "the model read the original ids, so every answer was in its input: feed it the masked "
                "inputs that mask_tokens returns.",
    "no_key_mask": "the model was called without the key mask, so real positions attended to the [PAD]s: pass "
                   "key_mask=key_mask to the model.",
    "every_position": "the loss scored every position against the original ids; score only the chosen "
                      "positions: the labels of mask_tokens (-100 elsewhere).",
    "only_masked": "the loss scored only the positions that became [MASK]; the chosen positions that got a "
                   "random character or stayed unchanged are scored too: use the labels of mask_tokens as they are.",
    "masked_labels": "the loss compared the predictions with the masked inputs (often [MASK]); the labels are "
                     "the ORIGINAL tokens, the second tensor mask_tokens returns.",
    "row_mean": "you averaged the loss of each row, then the rows: a row with more chosen positions must weigh "
                "more. Take one mean over all the chosen positions of the batch.",
    "no_step": "the parameters did not change: call optimizer.step() after loss.backward().",
    "zero_after_backward": "no gradient reached the update: optimizer.zero_grad() goes before loss.backward(), "
                           "not between backward() and step().",
}


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).clone()


def _run_steps(step, case: _StepCase, make_model, call_args, *, student: bool = False):
    """Run ``step`` ``case.steps`` times on a fresh model (with gradients left from earlier code) and
    optimizer: (parameters after, returned values, generator state after, problems seen)."""
    model = make_model(case)
    g_stale = torch.Generator().manual_seed(99)
    for p in model.parameters():
        stale = (torch.randn(p.shape, generator=g_stale, dtype=torch.float64) * 0.5).to(p.dtype)
        if p.requires_grad:  # a frozen weight (the key bias) gets no gradient from earlier code either
            p.grad = stale
    optimizer = case.optimizer_for(model.parameters())
    generator = torch.Generator().manual_seed(case.gen_seed)
    returned, problems = [], []
    for _ in range(case.steps):
        args = call_args(model, optimizer, case, generator)
        given = [a.clone() for a in args if isinstance(a, torch.Tensor)]
        mode, rng, training = torch.is_grad_enabled(), unseeded_rng(), model.training
        if student:
            try:
                out = step(*args)
            except StudentError as raised:  # reported by the checker (a ValueError it expects gets a hint)
                return None, returned, None, problems + [("raised", raised)]
        else:
            out = step(*args)
        returned.append(out)
        if student:
            if torch.is_grad_enabled() != mode:
                problems.append(("grad mode", None))
            if not torch.equal(torch.get_rng_state(), rng):
                torch.set_rng_state(rng)
                problems.append(("global rng", None))
            if model.training != training:
                problems.append(("mode", None))
            if any(not torch.equal(a, b) for a, b in zip([a for a in args if isinstance(a, torch.Tensor)], given)):
                problems.append(("changed input", None))
    return _params(model), returned, generator.get_state(), problems


def _forbidden_call(fn, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` that the student's function calls, read from its source. A source that
    does not define the function itself is not read: with one cell name for every cell (as the
    notebook tests run them), ``inspect.getsource`` can return the lines of another cell."""
    from .rules import facts as read_facts, source_of

    text = source_of(fn)
    own = getattr(inspect.unwrap(fn), "__name__", "") if callable(fn) else ""
    if not text or not own.isidentifier() or not re.search(rf"\bdef\s+{re.escape(own)}\s*\(", text):
        return None
    facts = read_facts(text)
    for name in names:
        if name in facts.names or name in facts.attributes or any(c.endswith("." + name) for c in facts.chains):
            return name
    return None


def _check_returned(returned, expected, label: str) -> None:
    for got, want in zip(returned, expected):
        if want is None:
            continue
        if isinstance(got, torch.Tensor):
            hint(f"return the loss as a Python float, loss.item(), not a tensor ({label}): a tensor keeps the "
                 "whole graph of the step alive, and the training log wants plain numbers.")
        if not isinstance(got, (float, int)) or isinstance(got, bool):
            hint(f"return the step's loss as a float ({label}); you returned {_describe(got)}.")
        if not close(got, want, rtol=1e-4, atol=1e-6):
            hint(f"the parameters are updated right, but the returned loss {got!r} is not this step's loss "
                 f"{want:.4f} ({label}): return loss.item() of the loss you called backward() on.")


def _state_problems(problems, label: str, what: str) -> None:
    for kind, _ in problems:
        if kind == "grad mode":
            hint(f"your step changed the grad mode ({label}): leave torch.is_grad_enabled() as you found it.")
        if kind == "global rng":
            hint(f"your step drew from torch's global random generator ({label}): {what}")
        if kind == "mode":
            hint(f"your step changed the model's mode (train or eval) ({label}); leave it as it was.")
        if kind == "changed input":
            hint(f"your step changed `ids` or `key_mask` in place ({label}); the caller still needs them: "
                 "mask_tokens returns new tensors.")


def _mlm_call_args(model, optimizer, case, generator):
    return (model, optimizer, case.ids.clone(), None if case.key_mask is None else case.key_mask.clone(),
            _tokenizer(), generator)


@checker("Exercise 10.4", companion_given=True, allow=("companion.mlm",))
def mlm_step(my_mlm_step) -> None:
    """``my_mlm_step(model, optimizer, ids, key_mask, tokenizer, generator)`` -> the loss (a float), or
    None when no position is chosen: one masked-LM pre-training step.

    Differential: on each edge class (a batch of windows, a batch of one, padded lines with their
    key mask, a row with no chosen position, a float64 model with SGD, a batch with no chosen position
    at all) two steps in a row of the student's function and of the reference, each from the same
    model (arriving with gradients left by earlier code), optimizer and generator, must leave the
    same parameters and the same generator state, return the same losses, and leave the global
    random state, the grad mode, the model's mode and the caller's tensors as they were.
    """
    used = _forbidden_call(my_mlm_step, ("mlm_step", "train_mlm", "mlm_batch"))
    if used:
        hint(f"your step calls the companion's {used}, which does the step the exercise asks you to write; "
             "use mask_tokens and the model, and write the rest yourself.")
    from companion.mlm import EncoderLM

    def make(case):
        return _tiny_encoder(40 + case.seed, case.dtype)

    for case in _step_cases():
        label = case.label
        right, right_returned, right_gen, _ = _run_steps(_mlm_step_variant, case, make, _mlm_call_args)
        got, returned, gen, problems = _run_steps(my_mlm_step, case, make, _mlm_call_args, student=True)
        _state_problems(problems, label, "draw the masks with mask_tokens(ids, tokenizer, generator=generator), "
                                         "from the generator you are given, so that a run can be repeated.")
        if problems and problems[-1][0] == "raised":
            raised = problems[-1][1]
            if right_returned[0] is None and isinstance(raised.error, ValueError):
                hint(f"your step raised ValueError on {label}: when mask_tokens chooses no position there is "
                     "nothing to score (mlm_loss refuses it); return None there and leave the model as it is.")
            if isinstance(raised.error, NotImplementedError) and returned:
                hint(f"your step raised NotImplementedError on {label}, after the earlier calls worked: a branch "
                     "of your code is not written yet.")
            raise raised  # the student's own error, with its traceback
        if right_returned[0] is None:
            if returned[0] is not None:
                hint(f"on {label} your step returned {returned[0]!r}; with no position chosen there is no loss: "
                     "return None (and make no update).")
            if not close(got, right, rtol=0, atol=0):
                hint(f"on {label} your step changed the parameters; with no position chosen there is nothing to "
                     "learn from: return None before the update (an optimizer step with AdamW would still "
                     "decay the weights).")
        same_gen = torch.equal(gen, right_gen)
        if not same_gen and torch.equal(gen, torch.Generator().manual_seed(case.gen_seed).get_state()):
            hint(f"on {label} your step never drew from the generator it is given: mask the batch with "
                 "mask_tokens(ids, tokenizer, generator=generator), so that the caller's generator decides the masks.")
        if not close(got, right, rtol=1e-4, atol=_STEP_ATOL):
            if not bool(torch.isfinite(got).all()):
                hint(f"on {label} the parameters became NaN: a mean over the chosen positions of a row with "
                     "none divides 0 by 0. Average over all the chosen positions of the batch at once (the "
                     "model's loss, mlm_loss, does).")
            if not same_gen:
                hint(f"on {label} your masks are not those of mask_tokens(ids, tokenizer, generator=generator) "
                     "with the generator you are given (its state after your step differs): mask the batch "
                     "with mask_tokens, exactly once per step, and draw nothing else from the generator.")
            for mistake, message in _MLM_STEP_MISTAKES.items():
                wrong, _, _, _ = _run_steps(lambda *a, m=mistake: _mlm_step_variant(*a, mistake=m), case, make,
                                            _mlm_call_args)
                if close(got, wrong, rtol=1e-4, atol=_STEP_ATOL):
                    hint(f"on {label}: {message}")
            hint(f"on {label} the parameters after your step differ from those of the reference step (mask_tokens, "
                 f"the model on the masked inputs with the key mask, the loss over the chosen positions, "
                 f"zero_grad, backward, step): {first_difference(got, right, 'parameters')}.", generic=True)
        if not same_gen:
            hint(f"on {label} the parameters are right, but your step drew more numbers from the generator than "
                 "mask_tokens does: draw nothing else from it, so that the next step's masks are the right ones.")
        _check_returned(returned, right_returned, label)
    passed("mask_tokens with the caller's generator, the loss over the chosen positions, zero_grad, backward, "
           "step: the same update as the reference on every edge class.")


# --------------------------------------------------------------------------- Exercise 10.5


def _pairs(line: str) -> list[int]:
    """Brute force: every i where line[i], line[i + 1] are two different letters."""
    return [i for i in range(len(line) - 1)
            if line[i].isalpha() and line[i + 1].isalpha() and line[i] != line[i + 1]]


def _swapped(line: str, i: int) -> str:
    return line[:i] + line[i + 1] + line[i] + line[i + 2:]


#: Lines with at least one pair to swap, by the class of line each stands for (a failing class
#: names itself in the hint): first and last pairs, capitals, apostrophes, doubled letters
#: (``"ee"`` is no pair), a single pair, letters with accents (``str.isalpha``).
_SWAP_CLASSES = {
    "a line with doubled letters": ["Good night, sweet prince;", "aab", "I'll ha't, ay", "Hmm, deep sleep"],
    "a line whose first pair starts it": ["It's", "Be  it.", "ab"],
    "a line whose last pair ends it": ["O, woe!", "tell me, Iago", "Ñu!"],
    "a line with capital and small forms of one letter": ["Xx", "Oo, ah"],
    "a line with accented letters": ["café au lait", "é, fé"],
    "a line with spaces at its ends": ["  to be  "],
    "a line of letters only": ["abcdefghij"],
}
_SWAP_LINES = [line for lines in _SWAP_CLASSES.values() for line in lines]
#: Lines with no pair to swap: the function must raise ValueError.
_NO_PAIR = ["", "a", "aa", "O, I!", "a b-c", "1234", "A, a; B"]
#: The lines of the statistical tests, each drawn from ONE generator, and the draws on each: two
#: pairs after (or before) a run of one doubled letter, so that an answer that draws a position,
#: or a pair of letters that may be equal, and then falls back to a neighbouring pair is far from
#: 50/50; two pairs far apart among non-letters (random positions with a fallback); one short word
#: and one long (a word drawn first favours the short one); three pairs in a row (a letter drawn
#: first, or a rounded draw, gives one pair half the weight of another: the subtlest bias, hence
#: the most draws); and 192 pairs (a draw of 0..255 taken modulo the count gives the first 64 twice the weight).
_TWO_PAIR_LINES = {
    "a run of doubled letters before its pairs": "a" * 30 + "b cd",
    "a run of doubled letters after its pairs": "ab c" + "d" * 30,
    "two pairs far apart among non-letters": "ab" + " ." * 100 + " cd",
}
_WORDS_LINE = "ab cdefghijklmnopqrstuvwxyz"
_CHAIN_LINE = "Ahemm"
_DENSE_LINE = "ab" * 96 + "a"
_TWO_PAIR_DRAWS, _WORDS_DRAWS, _CHAIN_DRAWS, _DENSE_DRAWS = 36, 30, 240, 260
#: Draws per line that every answer gets; the rest only an answer that does not draw as
#: torch.randint(len(pairs), (1,), generator=...) over the pairs in order (the text's example).
_FIRST_DRAWS = 8
#: A right answer fails one of the statistical tests with probability below this, in all.
_SWAP_ALPHA = 1e-5
#: Lines with seeds that must give the same swap twice.
_REPEAT_LINE = "Now is the winter of our discontent made glorious summer"


def _binomial_p(k: int, n: int, p: float) -> float:
    """Two-sided exact binomial test: the chance of a count at least as far in its tail as ``k``."""
    pmf = [math.comb(n, j) * p ** j * (1 - p) ** (n - j) for j in range(n + 1)]
    return min(1.0, 2 * min(sum(pmf[:k + 1]), sum(pmf[k:])))


def _reference_swap(line: str, generator: torch.Generator) -> str:
    pairs = _pairs(line)
    return _swapped(line, pairs[int(torch.randint(len(pairs), (1,), generator=generator))])


def _describe_swap(line: str, out: str) -> str | None:
    """The specific mistake that turns ``line`` into ``out``, if it is one we recognize."""
    if out == line:
        return ("the line came back unchanged: swap two adjacent letters that DIFFER (swapping the two e's of "
                "\"sweet\" changes nothing), and never return the line as it was.")
    if len(out) != len(line):
        return (f"the line had {len(line)} characters and yours has {len(out)}: a swap moves two characters, it "
                "adds or removes none.")
    diff = [k for k in range(len(line)) if line[k] != out[k]]
    if sorted(out) != sorted(line):
        return ("your line holds other characters than the original: swap two of its characters, do not "
                "replace one (line[i + 1] + line[i], both kept).")
    if len(diff) == 2 and diff[1] - diff[0] > 1:
        return (f"you swapped positions {diff[0]} and {diff[1]}, which are not neighbours: swap line[i] with "
                "line[i + 1].")
    if len(diff) == 2:
        i = diff[0]
        if not (line[i].isalpha() and line[i + 1].isalpha()):
            return (f"you swapped {line[i]!r} and {line[i + 1]!r}: swap two LETTERS (str.isalpha()), never a "
                    "space, a punctuation mark or a digit.")
    if len(diff) > 2:
        return (f"{len(diff)} characters moved: swap exactly ONE pair of adjacent letters (one draw, one "
                "swap), not several.")
    return None


class _Swaps:
    """The student's calls, each checked to be one of the line's swaps, and compared with the
    reference drawn from the same generator state (``same`` stays True while every answer and the
    generator's state after it are those of torch.randint(len(pairs), (1,), generator=...))."""

    def __init__(self, my_swap_letters):
        self.fn, self.same, self.calls, self.answered = my_swap_letters, True, 0, False

    def __call__(self, line: str, generator: torch.Generator, where: str) -> str:
        before = generator.get_state()
        self.calls += 1
        try:
            out = self.fn(line, generator)
        except StudentError as raised:
            if isinstance(raised.error, NotImplementedError) and self.answered:
                hint(f"for {line!r} ({where}) your code raised NotImplementedError: that branch is not written "
                     "yet (other lines got an answer).")
            raise
        self.answered = True
        if not isinstance(out, str):
            if isinstance(out, (list, tuple)) and out and all(isinstance(c, str) for c in out):
                hint(f"return a str (\"\".join(chars)); you returned a {type(out).__name__} of characters.")
            hint(f"return the new line as a str; you returned {_describe(out)}.")
        if out not in {_swapped(line, i) for i in _pairs(line)}:
            mistake = _describe_swap(line, out)
            if mistake:
                hint(f"for {line!r} ({where}) you returned {out!r}: {mistake}")
            hint(f"for {line!r} ({where}) you returned {out!r}; the possible answers are "
                 f"{sorted(_swapped(line, i) for i in _pairs(line))}.", generic=True)
        if self.same:
            ref = torch.Generator()
            ref.set_state(before)
            self.same = out == _reference_swap(line, ref) and torch.equal(ref.get_state(), generator.get_state())
        return out


def _not_uniform(line: str, where: str, counts: dict[int, int], n: int) -> None:
    shares = ", ".join(f"{line[i:i + 2]!r} {c / n:.0%}" for i, c in counts.items())
    hint(f"on {where} ({line!r}) the pairs are not equally likely ({shares} of {n} draws from one generator; "
         f"each should be {1 / len(counts):.0%}): list every pair of adjacent, different letters first, then draw "
         "ONE index among them uniformly, torch.randint(len(pairs), (1,), generator=...): no fallback to a "
         "neighbouring pair, no retries with a limit, no modulo of a draw from another range.")


@checker("Exercise 10.5")
def swap_letters(my_swap_letters) -> None:
    """``my_swap_letters(line, generator)`` -> ``line`` with one pair of adjacent, different letters
    swapped, the pair chosen uniformly by draws from ``generator``; ValueError if there is none.

    Cheap for the grader (each call is a round trip to its kernel): 103 calls for an answer
    that draws as the text's example does (its answers are then compared one for one with the
    reference's, drawn from the same generator state), 693 for one that draws otherwise
    (exact binomial tests on lines built to show the known biases, from one generator each).
    """
    swap = _Swaps(my_swap_letters)
    state = unseeded_rng()
    for k, (where, lines) in enumerate(_SWAP_CLASSES.items()):  # each answer: one of the swaps by brute force
        for j, line in enumerate(lines):
            for seed in range(2):
                swap(line, torch.Generator().manual_seed(1000 * k + 10 * j + seed), where)
    for line in _NO_PAIR:
        swap.calls += 1
        try:
            out, exc = attempt(my_swap_letters, line, torch.Generator().manual_seed(7))
        except StudentError as raised:  # NotImplementedError: "not attempted" only if nothing answered
            if swap.answered:
                hint(f"for {line!r}, which has no two adjacent, different letters, your code raised "
                     "NotImplementedError: that branch is not written yet (lines with a pair got an answer); "
                     "raise a ValueError there.")
            raise
        if exc is None:
            hint(f"for {line!r}, which has no two adjacent, different letters, you returned {_describe(out) if not isinstance(out, str) else repr(out)}: "
                 "raise a ValueError that says so (the line cannot change).")
        if not isinstance(exc, ValueError):
            hint(f"for {line!r}, which has no two adjacent, different letters, your code raised "
                 f"{type(exc).__name__} ({str(exc)[:60]}); check for that case first and raise a ValueError "
                 "that says so.")
    # draws from one generator per line: a few for every answer, all of them if it draws otherwise
    plan = [(where, line, _TWO_PAIR_DRAWS) for where, line in _TWO_PAIR_LINES.items()]
    plan += [("a line of one short word and one long", _WORDS_LINE, _WORDS_DRAWS),
             ("a word of three pairs in a row", _CHAIN_LINE, _CHAIN_DRAWS),
             (f"a line with {len(_pairs(_DENSE_LINE))} pairs", _DENSE_LINE, _DENSE_DRAWS)]
    gens = [torch.Generator().manual_seed(104 + k) for k in range(len(plan))]
    drawn: list[list[str]] = [[] for _ in plan]
    for k, (where, line, _) in enumerate(plan):
        drawn[k] += [swap(line, gens[k], where) for _ in range(_FIRST_DRAWS)]
    first = [swap(_REPEAT_LINE, torch.Generator().manual_seed(seed), "a line with seeds") for seed in range(8)]
    again = [swap(_REPEAT_LINE, torch.Generator().manual_seed(seed), "a line with seeds") for seed in range(8)]
    changed_global = not torch.equal(state, torch.get_rng_state())
    torch.set_rng_state(state)
    if not swap.same:  # it draws otherwise: test the distribution itself
        for k, (where, line, n) in enumerate(plan):
            drawn[k] += [swap(line, gens[k], where) for _ in range(n - _FIRST_DRAWS)]
        for k in (3, 5):  # many pairs: one generator never gives one swap every time
            if len(set(drawn[k])) == 1:
                hint(f"{len(drawn[k])} calls with one generator gave the same swap every time: draw the pair at "
                     "random, from the `generator` you are given as it is (do not re-seed it or make your own).")
        counts = []  # per line: the number of draws of each pair, in order
        for k, (where, line, n) in enumerate(plan):
            at = {_swapped(line, i): j for j, i in enumerate(_pairs(line))}
            c = [0] * len(at)
            for out in drawn[k]:
                c[at[out]] += 1
            counts.append(c)
        two = counts[:len(_TWO_PAIR_LINES)]
        if all(c[-1] == 0 for c in two):
            hint(f"on lines of two pairs the last pair was never swapped ({_TWO_PAIR_DRAWS} draws each): "
                 "torch.randint(n, ...) draws 0 .. n - 1, its upper bound excluded; randint(n - 1) leaves the "
                 "last pair out.")
        if all(c[0] == 0 for c in two):
            hint(f"on lines of two pairs the first pair was never swapped ({_TWO_PAIR_DRAWS} draws each): a "
                 "line can change at its very start (i = 0).")
        alpha = _SWAP_ALPHA / len(plan)
        for k, (where, line, n) in enumerate(plan):
            c = counts[k]
            if len(c) == 3:  # chi-square with 2 degrees of freedom: its tail is exp(-x / 2)
                x = sum((m - n / 3) ** 2 / (n / 3) for m in c)
                p_value = math.exp(-x / 2)
            elif k == len(plan) - 1:  # the first 256 - 192 pairs, favoured by a draw of 0..255 modulo 192
                low = 256 - len(c)
                p_value = _binomial_p(sum(c[:low]), n, low / len(c))
                if p_value < alpha:
                    hint(f"on {where} the draws are not uniform: the first {low} pairs got {sum(c[:low]) / n:.0%} "
                         f"of {n} draws, {low / len(c):.0%} expected. List every pair first, then draw ONE index "
                         "uniformly, torch.randint(len(pairs), (1,), generator=...): no retries with a fallback, "
                         "no modulo of a draw from another range.")
            else:  # the first pair: one of two, or the short word's one among 24
                p_value = _binomial_p(c[0], n, 1 / len(c))
            if p_value < alpha:
                _not_uniform(line, where, dict(zip(_pairs(line), c)), n)
    if first != again:
        hint("the same seed gave another swap: make every draw with the `generator` you are given "
             "(torch.randint(n, (1,), generator=generator)), not with Python's random or torch's global one.")
    if len(set(first)) == 1:
        hint("eight different seeds gave the same swap: draw from the `generator` you are given as it is; do "
             "not create your own or re-seed it inside your function.")
    if changed_global:
        hint("your function changed torch's global random state (torch.manual_seed, or a draw without "
             "generator=): a caller's other random numbers would change. Draw only from the `generator` given.")
    passed("one pair of adjacent, different letters, drawn uniformly.")


# --------------------------------------------------------------------------- Exercise 10.6


def _cls_step_variant(body, head, optimizer, ids, key_mask, labels, mistake=None):
    """The right fine-tuning step (``mistake=None``) and its classic mistakes, for comparison."""
    if mistake != "no_zero":
        optimizer.zero_grad()
    h = body.hidden(ids, None if mistake == "no_key_mask" else key_mask)  # (B, T, d)
    if mistake == "last_position":
        summary = h[torch.arange(len(ids)), key_mask.sum(1) - 1]
    elif mistake == "mean":
        m = key_mask[..., None].to(h.dtype)
        summary = (h * m).sum(1) / m.sum(1)
    elif mistake == "first_character":
        summary = h[:, 1]
    elif mistake == "last_column":
        summary = h[:, -1]
    else:
        summary = h[:, 0]  # the [CLS] position
    logits = head(summary)  # (B, n_classes)
    if mistake == "softmax_first":
        logits = logits.softmax(-1)
    loss = F.cross_entropy(logits, labels, reduction="sum" if mistake == "sum" else "mean")
    loss.backward()
    if mistake != "no_step":
        optimizer.step()
    return loss.item()


_CLS_STEP_MISTAKES = {
    "no_key_mask": "the encoder was called without the key mask, so [CLS] attended to the [PAD]s: pass "
                   "key_mask to body.hidden.",
    "last_position": "you read the hidden state of each line's last real token; the summary is the state of "
                     "[CLS], position 0 of every line.",
    "mean": "you averaged the hidden states over the line (as the probes do); the head reads the state of "
            "[CLS], position 0.",
    "first_character": "you read position 1, the first character; [CLS] sits at position 0.",
    "last_column": "you read the last column, which is [PAD] for the shorter lines; [CLS] sits at position 0.",
    "softmax_first": "F.cross_entropy takes the raw logits (it applies log_softmax itself); a softmax before "
                     "it squashes the loss and its gradients.",
    "sum": "take the mean of the cross-entropy over the lines of the batch (F.cross_entropy's default), not "
           "the sum.",
    "no_zero": "the gradients the model arrived with were added to this step's: call optimizer.zero_grad() "
               "before loss.backward().",
    "no_step": "the parameters did not change: call optimizer.step() after loss.backward().",
}


def _cls_cases() -> list[_StepCase]:
    return [
        _StepCase("lines of different lengths, padded", [9, 3, 6, 2], padded=True, seed=11),
        _StepCase("a batch of one line", [7], padded=True, seed=12),
        _StepCase("three classes, with SGD and momentum", [5, 8, 8, 4, 6], padded=True, optimizer="sgd",
                  seed=13, n_classes=3),
        _StepCase("a float64 model", [6, 4, 5], padded=True, dtype=torch.float64, seed=14),
        _StepCase("lines of one length (no padding)", [8, 8, 8], padded=True, seed=15),
    ]


class _BodyAndHead(torch.nn.Module):
    """The encoder and a new linear head, held together so that one optimizer and one parameter
    vector cover both."""

    def __init__(self, case):
        super().__init__()
        self.body = _tiny_encoder(60 + case.seed, case.dtype)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(70 + case.seed)
            self.head = torch.nn.Linear(8, case.n_classes).to(case.dtype)
        g = torch.Generator().manual_seed(80 + case.seed)
        self.labels = torch.randint(case.n_classes, (len(case.ids),), generator=g)
        if len(case.ids) > 2:
            self.labels[:2] = torch.tensor([0, 1])  # both classes in the batch


def _cls_call_args(model, optimizer, case, generator):
    return (model.body, model.head, optimizer, case.ids.clone(), case.key_mask.clone(), model.labels.clone())


@checker("Exercise 10.6", companion_given=True, allow=("companion.mlm",))
def cls_step(my_cls_step) -> None:
    """``my_cls_step(body, head, optimizer, ids, key_mask, labels)`` -> the loss (a float): one
    fine-tuning step of a linear head on the ``[CLS]`` hidden state.

    Differential: on each edge class (padded lines of different lengths, a batch of one, three
    classes with SGD, a float64 model, lines of one length) two steps in a row of the student's
    function and of the reference, from the same encoder and head (arriving with gradients left by
    earlier code) and optimizer, must leave the same parameters, return the same losses, and leave
    the global random state, the grad mode, the modes and the caller's tensors as they were.
    """
    used = _forbidden_call(my_cls_step, ("summary", "EncoderClassifier", "classifier_step", "fine_tune"))
    if used:
        hint(f"your step calls the companion's {used}, which reads the [CLS] state (or does the whole step) for "
             "you; read it yourself from body.hidden(ids, key_mask).")

    for case in _cls_cases():
        label = case.label
        right, right_returned, _, _ = _run_steps(_cls_step_variant, case, _BodyAndHead, _cls_call_args)
        got, returned, _, problems = _run_steps(my_cls_step, case, _BodyAndHead, _cls_call_args, student=True)
        _state_problems(problems, label, "nothing in a fine-tuning step of a model without dropout is random.")
        if problems and problems[-1][0] == "raised":
            raise problems[-1][1]  # the student's own error, with its traceback
        if not close(got, right, rtol=1e-4, atol=_STEP_ATOL):
            for mistake, message in _CLS_STEP_MISTAKES.items():
                wrong, _, _, _ = _run_steps(lambda *a, m=mistake: _cls_step_variant(*a, mistake=m), case,
                                            _BodyAndHead, _cls_call_args)
                if close(got, wrong, rtol=1e-4, atol=_STEP_ATOL):
                    hint(f"on {label}: {message}")
            hint(f"on {label} the parameters after your step differ from those of the reference step (the head "
                 "on the [CLS] state of body.hidden(ids, key_mask), the mean cross-entropy, zero_grad, backward, "
                 f"step): {first_difference(got, right, 'parameters')}.", generic=True)
        _check_returned(returned, right_returned, label)
    passed("the head reads [CLS] with the key mask; mean cross-entropy, zero_grad, backward, step: the same "
           "update as the reference on every edge class.")
