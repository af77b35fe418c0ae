"""Mutation registry of chapter 10 (the masked language model): see tests/mutation_harness.py.

The wrong answers are those of tests/test_exercises_mlm.py, each with the hint it must get, and a
few more that only the generic descriptions of the difference catch (``expect=None``) or that
raise inside the student's own code (``raised=True``). The masking mutants of 10.1 are random;
each lies far outside the checker's Hoeffding margins (see companion.exercises.mlm), so the
chance that one passes is far below the 1e-10 at which a right answer fails.
"""
import torch
from torch.nn.utils.rnn import pad_sequence

from companion.exercises import mlm as check
from mutation_harness import Exercise, Mutant, make_tests
from test_exercises_mlm import (CLS_STEP_WRONG, LOSS_WRONG, MASK_WRONG, MLM_STEP_WRONG, PAD_WRONG, SWAP_WRONG,
                                _cls_step_with, _mlm_step_with, letter_pairs, right_cls_step, right_loss, right_mask,
                                right_mlm_step, right_pad, right_swap, rule, swap_at)


#: Table entries whose message is a generic description of the difference: any hint is right.
GENERIC = {"probability 0.15", "only the chosen positions may change"}


def mutants(table):
    return [Mutant(expect, fn, None if expect in GENERIC else expect) for expect, fn in table.items()]


def _mask_every_position(ids, n_chars, mask_id, g):
    """Every character is chosen (and masked 80/10/10)."""
    return rule(ids, n_chars, mask_id, g, p=1.0)


MASK_EXTRA = [
    Mutant("chooses 20%", lambda i, n, m, g: rule(i, n, m, g, p=0.2)),
    Mutant("chooses 10%", lambda i, n, m, g: rule(i, n, m, g, p=0.1)),
    Mutant("chooses every character", _mask_every_position),
    Mutant("70/15/15", lambda i, n, m, g: rule(i, n, m, g, shares=(0.7, 0.15))),
    Mutant("labels as float", lambda i, n, m, g: (rule(i, n, m, g)[0], rule(i, n, m, g)[1].float()),
           "integer token ids"),
    Mutant("returns None", lambda i, n, m, g: None, "return a pair"),
    Mutant("returns three tensors", lambda i, n, m, g: (*rule(i, n, m, g), i), "return a pair"),
    Mutant("uses numpy's global generator", lambda i, n, m, g: i.numpy().choose(), "your code raised",
           raised=True),
]


LOSS_EXTRA = [
    Mutant("log base 10", lambda l, y: right_loss(l, y) / torch.log(torch.tensor(10.0, dtype=l.dtype))),
    Mutant("label smoothing", lambda l, y: torch.nn.functional.cross_entropy(
        l.reshape(-1, l.shape[-1]), y.reshape(-1), ignore_index=-100, label_smoothing=0.1)),
    Mutant("loss of the argmax", lambda l, y: -l.log_softmax(-1).max(-1).values[y != -100].mean()),
    Mutant("returns None", lambda l, y: None, "return a scalar tensor"),
    Mutant("indexes with -100", lambda l, y: -l.log_softmax(-1).gather(-1, y[..., None]).mean(), "your code raised",
           raised=True),
]


def _pad_with(value):
    def pad(seqs, pad_id):
        return right_pad(seqs, value)
    return pad


PAD_EXTRA = [
    Mutant("pads with pad_id + 1", _pad_with(check.PAD_ID + 1)),
    Mutant("pads with -100", _pad_with(-100)),
    Mutant("mask True only at the first token", lambda s, p: (right_pad(s, p)[0],
                                                            torch.arange(6)[None, :].expand(len(s), 6) == 0)),
    Mutant("mask all True", lambda s, p: (right_pad(s, p)[0], torch.ones(len(s), 6, dtype=torch.bool))),
    Mutant("returns None", lambda s, p: None, "return a pair"),
    Mutant("torch.stack of lines of different lengths", lambda s, p: (torch.stack(s), None), "your code raised",
           raised=True),
    Mutant("mask of the (T, B) padding", lambda s, p: (right_pad(s, p)[0], pad_sequence(
        [torch.ones(len(x), dtype=torch.bool) for x in s])), None),
]

def _swap_upper_only(line, g):
    pairs = letter_pairs(line, letters=str.isupper)
    if not pairs:
        raise ValueError("nothing to swap")
    return swap_at(line, pairs[int(torch.randint(len(pairs), (1,), generator=g))])


def _swap_first_letter_pair(line, g):  # draws the first letter, then swaps it with the next one
    letters = [i for i in range(len(line) - 1) if line[i].isalpha()]
    if not letters:
        raise ValueError("nothing to swap")
    return swap_at(line, letters[int(torch.randint(len(letters), (1,), generator=g))])


def _doubled_then_next(line, g):  # draws among letter pairs, equal ones too; an equal pair moves on to the next
    pairs, letter = letter_pairs(line), letter_pairs(line, differ=False)
    if not pairs:
        raise ValueError("nothing to swap")
    i = letter[int(torch.randint(len(letter), (1,), generator=g))]
    return swap_at(line, next((p for p in pairs if p >= i), pairs[0]))


def _doubled_redraw_once(line, g):  # an equal pair is drawn again once, then the first pair is taken
    pairs, letter = letter_pairs(line), letter_pairs(line, differ=False)
    if not pairs:
        raise ValueError("nothing to swap")
    for _ in range(2):
        i = letter[int(torch.randint(len(letter), (1,), generator=g))]
        if i in pairs:
            return swap_at(line, i)
    return swap_at(line, pairs[0])


def _doubled_weighted(line, g):  # a pair next to a doubled letter is listed twice
    pairs = letter_pairs(line)
    if not pairs:
        raise ValueError("nothing to swap")
    listed = pairs + [i for i in pairs if (i > 0 and line[i - 1] == line[i])
                      or (i + 2 < len(line) and line[i + 2] == line[i + 1])]
    return swap_at(line, listed[int(torch.randint(len(listed), (1,), generator=g))])


SWAP_EXTRA = [
    Mutant("doubled letters drawn, then the next pair", _doubled_then_next, "not equally likely"),
    Mutant("doubled letters drawn again once, then the first pair", _doubled_redraw_once, "not equally likely"),
    Mutant("pairs next to a doubled letter listed twice", _doubled_weighted, "not equally likely"),
    Mutant("only capital letters", _swap_upper_only),
    Mutant("a letter and whatever follows it", _swap_first_letter_pair, "swap two LETTERS"),
    Mutant("returns None", lambda line, g: None, "return the new line as a str"),
    Mutant("returns bytes", lambda line, g: right_swap(line, g).encode(), "return the new line as a str"),
    Mutant("reversed line", lambda line, g: line[::-1]),
    Mutant("the global generator", lambda line, g: right_swap(line, None), "the same seed gave another swap"),
]

MLM_STEP_EXTRA = [
    Mutant("never zeroes, never steps", _mlm_step_with(zero="never", step=False), "call optimizer.step()"),
    Mutant("returns None every time", lambda *a: None, "never drew from the generator it is given"),
    Mutant("the unmasked ids, scored everywhere", _mlm_step_with(masked=False, labels_of="ids")),
    Mutant("raises on purpose", lambda *a: 1 / 0, "ZeroDivisionError", raised=True),
]

CLS_STEP_EXTRA = [
    Mutant("the max over the line", _cls_step_with(where="max")),
    Mutant("never zeroes, never steps", _cls_step_with(zero=False, step=False), "call optimizer.step()"),
    Mutant("returns None", _cls_step_with(ret="none")),
    Mutant("indexes a missing row", lambda b, h, o, i, k, y: b.hidden(i, k)[len(i)], "IndexError", raised=True),
    Mutant("no key mask and the mean", lambda b, h, o, i, k, y: _cls_step_with(where="mean", key=False)(b, h, o, i, k, y)),
]

EXERCISES = [
    Exercise(check.mask_tokens, right_mask, mutants(MASK_WRONG) + MASK_EXTRA),
    Exercise(check.mlm_loss, right_loss, mutants(LOSS_WRONG) + LOSS_EXTRA),
    Exercise(check.pad_batch, right_pad, mutants(PAD_WRONG) + PAD_EXTRA),
    Exercise(check.mlm_step, right_mlm_step, mutants(MLM_STEP_WRONG) + MLM_STEP_EXTRA),
    Exercise(check.swap_letters, right_swap, mutants(SWAP_WRONG) + SWAP_EXTRA),
    Exercise(check.cls_step, right_cls_step, mutants(CLS_STEP_WRONG) + CLS_STEP_EXTRA),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)
