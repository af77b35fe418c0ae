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
* Exercise 10.4, one swap of two adjacent, different letters (the probe's task): every answer on
  fixed lines must be one of the swaps listed by brute force; lines with no such pair must raise
  ValueError; 4,000 draws on one line must spread over its 7 pairs uniformly (Bernstein margins
  at ``DELTA``), and the same seed must give the same swap.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ._core import StudentError, attempt, checker, close, hint, passed, require_graph
from .rules import watch

__all__ = ["mask_tokens", "mlm_loss", "pad_batch", "swap_letters", "N_CHARS", "PAD_ID", "MASK_ID", "CLS_ID"]

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


@checker("Exercise 10.4")
def swap_letters(my_swap_letters) -> None:
    """``my_swap_letters(line, generator)`` -> ``line`` with one pair of adjacent, different letters
    swapped, the pair chosen uniformly by draws from ``generator``; ValueError if there is none.

    Cheap for the grader (each call is a round trip to its kernel): 103 calls for an answer
    that draws as the text's example does (its answers are then compared one for one with the
    reference's, drawn from the same generator state), 693 for one that draws otherwise
    (exact binomial tests on lines built to show the known biases, from one generator each).
    """
    swap = _Swaps(my_swap_letters)
    state = torch.get_rng_state()
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
