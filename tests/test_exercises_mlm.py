"""The chapter 10 checkers: right answers pass, at least ten plausible wrong answers per exercise
fail (most with their own hint), odd returns never crash a checker, untouched stubs are "not
attempted"."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

from companion.exercises import mlm as check
from companion.mlm import MaskedCharTokenizer, mask_tokens, swap_letters


def stub(*args):
    raise NotImplementedError  # your code here


ODD_RETURNS = [None, 3, 2.5, "text", (), [1, 2, 3], torch.tensor(float("nan")), torch.zeros(0),
               torch.zeros(3, 3, dtype=torch.complex64), torch.ones(2, dtype=torch.bool), {"a": 1}, ...]


# --------------------------------------------------------------------------- Exercise 10.1


def rule(ids, n_chars, mask_id, g, *, p=0.15, shares=(0.8, 0.1), specials_ok=False, rand_high=None,
         same_rows=False, label_fill=-100, labels_from_inputs=False, rng=None):
    """The right rule, and (through its options) many wrong ones."""
    shape = (1, ids.shape[1]) if same_rows else ids.shape
    u = torch.rand(shape, generator=g).expand(ids.shape) if same_rows else torch.rand(shape, generator=g)
    chosen = u < p
    if not specials_ok:
        chosen &= ids < n_chars
    kind = torch.rand(ids.shape, generator=g)
    rand = torch.randint(rand_high or n_chars, ids.shape, generator=rng or g)
    inputs = ids.clone()
    inputs[chosen & (kind < shares[0])] = mask_id
    sw = chosen & (kind >= shares[0]) & (kind < shares[0] + shares[1])
    inputs[sw] = rand[sw]
    labels = torch.where(chosen, inputs if labels_from_inputs else ids, torch.full_like(ids, label_fill))
    return inputs, labels


def right_mask(ids, n_chars, mask_id, g):
    return rule(ids, n_chars, mask_id, g)


def test_mask_right_answers_pass():
    assert check.mask_tokens(right_mask).passed
    # the companion's own function, through the chapter's tokenizer: the same ids and draws
    tok = MaskedCharTokenizer("".join(chr(32 + i) for i in range(check.N_CHARS)))
    assert (tok.pad_id, tok.mask_id, tok.cls_id) == (check.PAD_ID, check.MASK_ID, check.CLS_ID)
    # (its values are right, but using it is not doing the exercise)
    fb = check.mask_tokens(lambda ids, n, m, g: mask_tokens(ids, tok, generator=g))
    assert "the values are right, but your code uses companion.mlm" in fb.message, fb

    def exclude_original(ids, n_chars, mask_id, g):  # a random character never equal to the original
        inputs, labels = rule(ids, n_chars, mask_id, g)
        same = (labels != -100) & (inputs == ids) & (torch.rand(ids.shape, generator=g) < 0.2)
        inputs[same] = (ids[same] + 1) % n_chars  # turns part of the "unchanged" share into random
        return inputs, labels

    # (a variant that draws 0.1 random characters all different from the original: accepted)
    def different_random(ids, n_chars, mask_id, g):
        u, kind = torch.rand(ids.shape, generator=g), torch.rand(ids.shape, generator=g)
        chosen = (u < 0.15) & (ids < n_chars)
        shift = torch.randint(1, n_chars, ids.shape, generator=g)
        inputs = ids.clone()
        inputs[chosen & (kind < 0.8)] = mask_id
        sw = chosen & (kind >= 0.8) & (kind < 0.9)
        inputs[sw] = (ids[sw] + shift[sw]) % n_chars
        return inputs, torch.where(chosen, ids, -100)

    assert check.mask_tokens(different_random).passed
    del exclude_original


def _global_rng(ids, n_chars, mask_id, g):
    return rule(ids, n_chars, mask_id, None)


def _first_positions(ids, n_chars, mask_id, g):
    chosen = (torch.arange(ids.shape[1])[None, :] % 100 < 15) & (ids < n_chars)
    chosen = chosen & (torch.arange(ids.shape[1])[None, :] < ids.shape[1] // 2 + 400)
    inputs, labels = ids.clone(), torch.where(chosen, ids, -100)
    kind = torch.rand(ids.shape, generator=g)
    inputs[chosen & (kind < 0.8)] = mask_id
    return inputs, labels


def _front_loaded(ids, n_chars, mask_id, g):  # chooses 30% in the first half, none in the second
    half = ids.shape[1] // 2
    u = torch.rand(ids.shape, generator=g)
    chosen = (u < 0.3) & (ids < n_chars) & (torch.arange(ids.shape[1])[None, :] < half)
    kind = torch.rand(ids.shape, generator=g)
    rand = torch.randint(n_chars, ids.shape, generator=g)
    inputs = ids.clone()
    inputs[chosen & (kind < 0.8)] = mask_id
    sw = chosen & (kind >= 0.8) & (kind < 0.9)
    inputs[sw] = rand[sw]
    return inputs, torch.where(chosen, ids, -100)


def _in_place(ids, n_chars, mask_id, g):
    inputs, labels = rule(ids, n_chars, mask_id, g)
    ids.copy_(inputs)
    return ids, labels


def _unchosen_changed(ids, n_chars, mask_id, g):
    inputs, labels = rule(ids, n_chars, mask_id, g)
    inputs[(labels == -100) & (ids < n_chars) & (torch.rand(ids.shape, generator=g) < 0.05)] = mask_id
    return inputs, labels


def _only_masked_labelled(ids, n_chars, mask_id, g):
    inputs, labels = rule(ids, n_chars, mask_id, g)
    return inputs, torch.where(inputs == mask_id, ids, -100)


MASK_WRONG = {
    "every chosen position became [MASK]": lambda i, n, m, g: rule(i, n, m, g, shares=(1.0, 0.0)),
    "no chosen position kept its token": lambda i, n, m, g: rule(i, n, m, g, shares=(0.8, 0.2)),
    "no chosen position got a random character": lambda i, n, m, g: rule(i, n, m, g, shares=(0.9, 0.0)),
    "swapped": lambda i, n, m, g: rule(i, n, m, g, shares=(0.1, 0.8)),
    "a special token": lambda i, n, m, g: rule(i, n, m, g, specials_ok=True),
    "not a character": lambda i, n, m, g: rule(i, n, m, g, rand_high=n + 3),
    "probability 0.15": lambda i, n, m, g: rule(i, n, m, g, p=0.5),
    "wrong way round": lambda i, n, m, g: rule(i, n, m, g, p=0.85),
    "only the [MASK]ed ones": _only_masked_labelled,
    "rows share their chosen positions": lambda i, n, m, g: rule(i, n, m, g, same_rows=True),
    "labelled -100, not 0": lambda i, n, m, g: rule(i, n, m, g, label_fill=0),
    "labelled -100, not -1": lambda i, n, m, g: rule(i, n, m, g, label_fill=-1),
    "input after masking": lambda i, n, m, g: rule(i, n, m, g, labels_from_inputs=True),
    "hold the token at every position": lambda i, n, m, g: (rule(i, n, m, g)[0], i.clone()),
    "are swapped": lambda i, n, m, g: rule(i, n, m, g)[::-1],
    "return two tensors": lambda i, n, m, g: rule(i, n, m, g)[0],
    "the same seed gave other masks": _global_rng,
    "changed ids in place": _in_place,
    "only the chosen positions may change": _unchosen_changed,
    "half of the positions": _front_loaded,
    "no position was chosen": lambda i, n, m, g: (i.clone(), torch.full_like(i, -100)),
    "integer token ids": lambda i, n, m, g: tuple(t.float() for t in rule(i, n, m, g)),
    "shape": lambda i, n, m, g: tuple(t[:, 1:] for t in rule(i, n, m, g)),
}


@pytest.mark.parametrize("text", list(MASK_WRONG))
def test_mask_wrong_answers_get_their_hint(text):
    fb = check.mask_tokens(MASK_WRONG[text])
    assert fb.status == "hint" and text in fb.message, (text, fb)


def test_mask_fixed_positions_never_pass():
    assert not check.mask_tokens(_first_positions).passed


@pytest.mark.parametrize("odd", ODD_RETURNS, ids=repr)
def test_mask_odd_returns(odd):
    fb = check.mask_tokens(lambda *a: odd)
    assert not fb.passed
    fb2 = check.mask_tokens(lambda *a: (odd, odd))
    assert not fb2.passed


def test_mask_stub_and_raising_answer():
    assert check.mask_tokens(stub).status == "not attempted"
    assert check.mask_tokens(...).status == "not attempted"
    fb = check.mask_tokens(lambda *a: 1 / 0)
    assert fb.status == "hint" and "ZeroDivisionError" in fb.message


def test_mask_margins_are_below_the_promised_error():
    """Seven tests at DELTA each: a right answer fails with probability < 1e-10 < 1e-9; each
    margin is small enough that the recognized wrong shares lie far outside it."""
    assert 7 * check.DELTA < 1e-9
    ids, special = check._mask_case()
    n_real = int((~special).sum())
    assert n_real > 100_000
    assert check._margin(n_real) < 0.011  # 15% against 12% or 20%: more than 2 margins apart
    assert check._margin(int(0.14 * n_real)) < 0.03  # among the chosen: 80% against 90% or 100%


# --------------------------------------------------------------------------- Exercise 10.2


def right_loss(logits, labels):
    scored = labels != -100
    return -logits[scored].log_softmax(-1).gather(-1, labels[scored][:, None]).mean()


def test_loss_refuses_the_library_cross_entropy():
    for fn in (lambda l, y: F.cross_entropy(l.flatten(0, 1), y.flatten(), ignore_index=-100),
               lambda l, y: torch.nn.CrossEntropyLoss()(l.flatten(0, 1), y.flatten())):
        fb = check.mlm_loss(fn)
        assert not fb.passed and "calls F.cross_entropy" in fb.message, fb


def by_hand_loss(logits, labels):
    chosen = labels != -100
    logp = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    picked = logp[chosen].gather(-1, labels[chosen][:, None])[:, 0]  # (n_chosen,)
    return -picked.mean()


def _picked(logits, labels):
    return logits.log_softmax(-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]


LOSS_WRONG = {
    "averaged over every position": lambda l, y: -_picked(l, y).mean(),
    "summed over the scored positions": lambda l, y: -_picked(l, y)[y != -100].sum(),
    "divided by all B*T positions": lambda l, y: -_picked(l, y)[y != -100].sum() / y.numel(),
    "sign is wrong": lambda l, y: -right_loss(l, y),
    "probability of the label": lambda l, y: -l.softmax(-1).gather(-1, y.clamp(min=0)[..., None])[..., 0][y != -100].mean(),
    "raw logit": lambda l, y: -l.gather(-1, y.clamp(min=0)[..., None])[..., 0][y != -100].mean(),
    "over the vocabulary": lambda l, y: -l.log_softmax(1).gather(-1, y.clamp(min=0)[..., None])[..., 0][y != -100].mean(),
    "averaged each row": lambda l, y: -torch.stack([_picked(l, y)[b][y[b] != -100].mean() for b in range(len(y))]).mean(),
    "the other way round": lambda l, y: -_picked(l, y)[y == -100].mean(),
    "in bits": lambda l, y: right_loss(l, y) / math.log(2),
    "whole vocabulary": lambda l, y: -l.log_softmax(-1).mean(-1)[y != -100].mean(),
    "one loss per position": lambda l, y: -_picked(l, y) * (y != -100),
    "return a tensor": lambda l, y: right_loss(l, y).item(),
    "logits of ±1000": lambda l, y: -torch.log(l.softmax(-1)[y != -100].gather(-1, y[y != -100][:, None])).mean(),
}


def test_loss_right_answers_pass():
    assert check.mlm_loss(right_loss).passed
    assert check.mlm_loss(by_hand_loss).passed
    from companion.mlm import mlm_loss
    assert "calls F.cross_entropy" in check.mlm_loss(mlm_loss).message  # the companion calls it


@pytest.mark.parametrize("text", list(LOSS_WRONG))
def test_loss_wrong_answers_get_their_hint(text):
    fb = check.mlm_loss(LOSS_WRONG[text])
    assert fb.status == "hint" and text in fb.message, (text, fb)


@pytest.mark.parametrize("odd", ODD_RETURNS, ids=repr)
def test_loss_odd_returns(odd):
    assert not check.mlm_loss(lambda *a: odd).passed


def test_loss_stub():
    assert check.mlm_loss(stub).status == "not attempted"


# --------------------------------------------------------------------------- Exercise 10.3


def right_pad(seqs, pad_id):
    lengths = torch.tensor([len(s) for s in seqs])
    ids = pad_sequence(seqs, batch_first=True, padding_value=pad_id)
    return ids, torch.arange(ids.shape[1])[None, :] < lengths[:, None]


def _left_pad(seqs, pad_id):
    T = max(len(s) for s in seqs)
    ids = torch.stack([torch.cat([torch.full((T - len(s),), pad_id), s]) for s in seqs])
    return ids, ids != pad_id


PAD_WRONG = {
    "inverted": lambda s, p: (right_pad(s, p)[0], ~right_pad(s, p)[1]),
    "on the left": _left_pad,
    "padding is 0": lambda s, p: right_pad(s, 0),
    "not from ids != 0": lambda s, p: (right_pad(s, p)[0], right_pad(s, p)[0] != 0),
    "must be a bool tensor": lambda s, p: (right_pad(s, p)[0], right_pad(s, p)[1].float()),
    "no longer than needed": lambda s, p: (torch.stack([torch.cat([x, torch.full((8 - len(x),), p)]) for x in s]),
                                           torch.stack([torch.arange(8) < len(x) for x in s])),
    "longer lines were cut": lambda s, p: (torch.stack([x[:1] for x in s]), torch.ones(len(s), 1, dtype=torch.bool)),
    "the attention module broadcasts": lambda s, p: (right_pad(s, p)[0], right_pad(s, p)[1][:, None, None, :]),
    "return two tensors": lambda s, p: right_pad(s, p)[0],
    "batch first": lambda s, p: (pad_sequence(s, padding_value=p), right_pad(s, p)[1]),
    "are swapped": lambda s, p: right_pad(s, p)[::-1],
    "off by one": lambda s, p: (right_pad(s, p)[0],
                                torch.arange(6)[None, :] <= torch.tensor([len(x) for x in s])[:, None]),
    "integer token ids": lambda s, p: (right_pad(s, p)[0].float(), right_pad(s, p)[1]),
}


def test_pad_right_answers_pass():
    assert check.pad_batch(right_pad).passed
    # a mask read from the ids is wrong when a real token has the id pad_id (the text does not exclude it)
    fb = check.pad_batch(lambda s, p: (lambda ids: (ids, ids != p))(right_pad(s, p)[0]))
    assert "not from ids != pad_id" in fb.message, fb
    from companion.mlm import pad_batch
    assert "the values are right, but your code uses companion.mlm" in check.pad_batch(pad_batch).message


@pytest.mark.parametrize("text", list(PAD_WRONG))
def test_pad_wrong_answers_get_their_hint(text):
    fb = check.pad_batch(PAD_WRONG[text])
    assert fb.status == "hint" and text in fb.message, (text, fb)


@pytest.mark.parametrize("odd", ODD_RETURNS, ids=repr)
def test_pad_odd_returns(odd):
    assert not check.pad_batch(lambda *a: odd).passed
    assert not check.pad_batch(lambda *a: (odd, odd)).passed


def test_pad_stub():
    assert check.pad_batch(stub).status == "not attempted"


def test_pass_messages_fit_78_columns():
    for fb in (check.mask_tokens(right_mask), check.mlm_loss(right_loss), check.pad_batch(right_pad),
               check.swap_letters(right_swap)):
        assert fb.passed
        assert all(len(line) <= 78 for line in str(fb).splitlines()), str(fb)


# --------------------------------------------------------------------------- Exercise 10.5


def letter_pairs(line, *, letters=str.isalpha, differ=True, stop=1):
    """The pairs to swap (brute force), and through its options wrong lists of them."""
    return [i for i in range(len(line) - stop)
            if letters(line[i]) and letters(line[i + 1]) and (line[i] != line[i + 1] or not differ)]


def swap_at(line, i, j=None):
    j = i + 1 if j is None else j
    chars = list(line)
    chars[i], chars[j] = chars[j], chars[i]
    return "".join(chars)


def right_swap(line, generator):
    pairs = letter_pairs(line)
    if not pairs:
        raise ValueError("no pair of adjacent, different letters")
    return swap_at(line, pairs[int(torch.randint(len(pairs), (1,), generator=generator))])


def _permuted_swap(line, generator):  # another right answer: the first of a random permutation
    pairs = letter_pairs(line)
    if not pairs:
        raise ValueError("nothing to swap")
    return swap_at(line, pairs[int(torch.randperm(len(pairs), generator=generator)[0])])


def _rejection_swap(line, generator):  # another right answer: draw any i until it is a pair
    if not letter_pairs(line):
        raise ValueError("nothing to swap")
    while True:
        i = int(torch.randint(len(line) - 1, (1,), generator=generator))
        if i in letter_pairs(line):
            return swap_at(line, i)


def _swap_with(pairs_of, *, draw=None, move=None, empty="raise"):
    """A swap with one mistake: which pairs are listed, how one is drawn, what is moved."""
    def swap(line, generator):
        pairs = pairs_of(line)
        if not pairs:
            if empty == "raise":
                raise ValueError("nothing to swap")
            if empty == "index":
                return line[pairs[0]]
            return line
        k = draw(len(pairs), generator) if draw else int(torch.randint(len(pairs), (1,), generator=generator))
        return move(line, pairs[k]) if move else swap_at(line, pairs[k])
    return swap


def _next_valid(line, generator):  # any i, then the next pair from there: not uniform
    pairs = letter_pairs(line)
    if not pairs:
        raise ValueError("nothing to swap")
    i = int(torch.randint(len(line) - 1, (1,), generator=generator))
    later = [p for p in pairs if p >= i]
    return swap_at(line, later[0] if later else pairs[0])


def _python_random(line, generator):
    import random
    pairs = letter_pairs(line)
    if not pairs:
        raise ValueError("nothing to swap")
    return swap_at(line, random.choice(pairs))


def _swap_two(line, generator):
    pairs = letter_pairs(line)
    if not pairs:
        raise ValueError("nothing to swap")
    out = swap_at(line, pairs[int(torch.randint(len(pairs), (1,), generator=generator))])
    if len(pairs) > 2:  # a second pair that does not overlap the first
        i = [p for p in pairs if line[p:p + 2] == out[p:p + 2]][-1]
        out = swap_at(out, i)
    return out


def _randint_high(n, g):  # randint(0, n - 1): never the last pair
    return int(torch.randint(max(n - 1, 1), (1,), generator=g)) if n > 1 else 0


SWAP_WRONG = {
    "came back unchanged": _swap_with(lambda l: letter_pairs(l, differ=False)),
    "swap two LETTERS": _swap_with(lambda l: [i for i in range(len(l) - 1) if l[i] != l[i + 1]]),
    "which are not neighbours": _swap_with(lambda l: [i for i in range(len(l) - 2) if l[i].isalpha()
                                                      and l[i + 2].isalpha() and l[i] != l[i + 2]],
                                           move=lambda l, i: swap_at(l, i, i + 2)),
    "adds or removes none": _swap_with(letter_pairs, move=lambda l, i: l[:i] + l[i + 1] + l[i + 2:]),
    "other characters than the original": _swap_with(letter_pairs, move=lambda l, i: l[:i] + l[i + 1] * 2 + l[i + 2:]),
    "not several": _swap_two,
    "raise a ValueError that says so (the line cannot change)": _swap_with(letter_pairs, empty="return"),
    "your code raised IndexError": _swap_with(letter_pairs, empty="index"),
    "the last pair": _swap_with(letter_pairs, draw=_randint_high),
    "not equally likely": _next_valid,
    "the same swap every time": _swap_with(letter_pairs, draw=lambda n, g: 0),
    "the same seed gave another swap": _python_random,
    "return a str": lambda line, g: list(right_swap(line, g)),
    "do not re-seed it": lambda line, g: right_swap(line, torch.Generator().manual_seed(0)),
}


def test_swap_right_answers_pass():
    for answer in (right_swap, _permuted_swap, _rejection_swap):
        assert check.swap_letters(answer).passed, answer
    fb = check.swap_letters(swap_letters)  # right, but the companion's own
    assert "the values are right, but your code uses companion.mlm" in fb.message, fb


def test_swap_checker_cases_agree_with_the_companion():
    """The checker's brute-force list of pairs, and its fixed lines, agree with companion.mlm."""
    from companion.exercises.mlm import _DENSE_LINE, _NO_PAIR, _SWAP_LINES, _TWO_PAIR_LINES, _WORDS_LINE, _pairs
    for line in _SWAP_LINES + _NO_PAIR + list(_TWO_PAIR_LINES.values()) + [_WORDS_LINE, _DENSE_LINE]:
        assert _pairs(line) == letter_pairs(line)
    assert all(_pairs(line) for line in _SWAP_LINES) and not any(_pairs(line) for line in _NO_PAIR)
    assert _pairs("Good night, sweet prince;")[-1] == len("Good night, sweet prince") - 2  # the last pair
    g = torch.Generator().manual_seed(0)
    for line in _SWAP_LINES:
        assert swap_letters(line, g) in {swap_at(line, i) for i in _pairs(line)}


@pytest.mark.parametrize("text", list(SWAP_WRONG))
def test_swap_wrong_answers_get_their_hint(text):
    fb = check.swap_letters(SWAP_WRONG[text])
    assert fb.status == "hint" and text in fb.message, (text, fb)


@pytest.mark.parametrize("odd", ODD_RETURNS, ids=repr)
def test_swap_odd_returns(odd):
    assert not check.swap_letters(lambda *a: odd).passed


def test_swap_stub():
    assert check.swap_letters(stub).status == "not attempted"
    assert check.swap_letters(...).status == "not attempted"


def _counted(fn):
    calls = []

    def counted(line, generator):
        calls.append(line)
        return fn(line, generator)
    return counted, calls


def test_swap_check_is_cheap_for_the_grader():
    """Each call is a round trip to the grader's kernel: the book's draw gets about a hundred calls,
    any other right draw (checked for uniformity) at most 700 (the check made 7,640 before)."""
    for answer, most in ((right_swap, 120), (_permuted_swap, 700), (_rejection_swap, 700)):
        counted, calls = _counted(answer)
        assert check.swap_letters(counted).passed
        assert len(calls) <= most, (answer, len(calls))


def test_swap_not_implemented_in_one_branch_is_named():
    def no_pair_branch_missing(line, generator):
        if not letter_pairs(line):
            raise NotImplementedError
        return right_swap(line, generator)

    def pair_branch_missing(line, generator):
        if line == "Ahemm":
            raise NotImplementedError
        return right_swap(line, generator)

    for answer, where in ((no_pair_branch_missing, "which has no two adjacent"), (pair_branch_missing, "'Ahemm'")):
        fb = check.swap_letters(answer)
        assert fb.status == "hint" and "NotImplementedError" in fb.message and where in fb.message, fb


# --------------------------------------------------------------------------- Exercise 10.4


def right_mlm_step(model, optimizer, ids, key_mask, tokenizer, generator):
    inputs, labels = mask_tokens(ids, tokenizer, generator=generator)
    if not (labels != -100).any():
        return None  # nothing chosen: nothing to learn from
    _, loss = model(inputs, labels, key_mask=key_mask)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _own_loss_step(model, optimizer, ids, key_mask, tokenizer, generator):
    """Another right answer: the logits, then the loss by hand (exercise 10.2), zero_grad at the start."""
    optimizer.zero_grad(set_to_none=False)
    inputs, labels = mask_tokens(ids, tokenizer, generator=generator)
    scored = labels != -100
    if int(scored.sum()) == 0:
        return None
    logits, _ = model(inputs, key_mask=key_mask)
    logp = torch.log_softmax(logits[scored], dim=-1)
    loss = -logp.gather(1, labels[scored][:, None]).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return float(loss)


def _mlm_step_with(*, masked=True, key=True, labels_of="labels", zero="start", step=True, none=True,
                   generator_of="given", ret="item", extra_draw=False, row_mean=False, draw_first=False):
    """A masked-LM step with one mistake at a time."""
    def fn(model, optimizer, ids, key_mask, tokenizer, generator):
        g = {"given": generator, "global": None, "own": torch.Generator().manual_seed(0)}[generator_of]
        if zero == "start":
            optimizer.zero_grad()
        if draw_first:
            torch.randperm(len(ids), generator=generator)
        inputs, labels = mask_tokens(ids, tokenizer, generator=g)
        if extra_draw:
            torch.rand(1, generator=generator)
        chosen = labels != -100
        if none and not chosen.any():
            return None
        logits, _ = model(inputs if masked else ids, key_mask=key_mask if key else None)
        target = {"labels": labels, "ids": ids, "inputs": torch.where(chosen, inputs, -100)}[labels_of]
        if row_mean:
            logp = logits.log_softmax(-1).gather(-1, labels.clamp(min=0)[..., None])[..., 0]
            loss = -((logp * chosen).sum(1) / chosen.sum(1)).mean()
        else:
            loss = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=-100)
        loss.backward()
        if step:
            optimizer.step()
        if zero == "end":
            optimizer.zero_grad()
        return {"item": loss.item(), "tensor": loss, "first": 0.0}[ret]
    return fn


#: Wrong steps and the hint each must get.
MLM_STEP_WRONG = {
    "zero them BEFORE": _mlm_step_with(zero="end"),
    "call optimizer.zero_grad() before": _mlm_step_with(zero="never"),
    "feed it the masked inputs": _mlm_step_with(masked=False),
    "pass key_mask=key_mask": _mlm_step_with(key=False),
    "score only the chosen positions": _mlm_step_with(labels_of="ids"),
    "the labels are the ORIGINAL tokens": _mlm_step_with(labels_of="inputs"),
    "call optimizer.step()": _mlm_step_with(step=False),
    "return None (and make no update)": _mlm_step_with(none=False),
    "drew from torch's global random generator": _mlm_step_with(generator_of="global"),
    "never drew from the generator": _mlm_step_with(generator_of="own"),
    "your masks are not those of mask_tokens": _mlm_step_with(draw_first=True),
    "draw nothing else from the generator": _mlm_step_with(extra_draw=True),
    "you averaged the loss of each row": _mlm_step_with(row_mean=True),
    "return the loss as a Python float": _mlm_step_with(ret="tensor"),
    "is not this step's loss": _mlm_step_with(ret="first"),
}


def test_mlm_step_right_answers_pass():
    for answer in (right_mlm_step, _own_loss_step):
        fb = check.mlm_step(answer)
        assert fb.passed, fb


@pytest.mark.parametrize("expect", list(MLM_STEP_WRONG))
def test_mlm_step_wrong_answers_get_their_hint(expect):
    fb = check.mlm_step(MLM_STEP_WRONG[expect])
    assert not fb.passed and expect in fb.message, fb


def test_mlm_step_state_and_companion():
    def leaves_eval(model, *args):
        out = right_mlm_step(model, *args)
        model.eval()
        return out

    def calls_companion(model, optimizer, ids, key_mask, tokenizer, generator):
        from companion.mlm import mlm_step
        return mlm_step(model, optimizer, ids, tokenizer, key_mask=key_mask, generator=generator)

    def no_grad_left(model, optimizer, ids, key_mask, tokenizer, generator):
        out = right_mlm_step(model, optimizer, ids, key_mask, tokenizer, generator)
        torch.set_grad_enabled(False)
        return out

    try:
        for answer, expect in ((leaves_eval, "mode"), (calls_companion, "companion's mlm_step"),
                               (no_grad_left, "grad mode")):
            fb = check.mlm_step(answer)
            assert not fb.passed and expect in fb.message, (answer, fb)
    finally:
        torch.set_grad_enabled(True)
    assert check.mlm_step(stub).status == "not attempted"
    for odd in ODD_RETURNS:
        fb = check.mlm_step(lambda *a, odd=odd: odd)
        assert not fb.passed and fb.kind != "internal", (odd, fb)


# --------------------------------------------------------------------------- Exercise 10.6


def right_cls_step(body, head, optimizer, ids, key_mask, labels):
    h = body.hidden(ids, key_mask)  # (B, T, d)
    logits = head(h[:, 0])  # the [CLS] position
    loss = F.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def _log_softmax_cls_step(body, head, optimizer, ids, key_mask, labels):
    """Another right answer: zero_grad first, the loss by hand with log_softmax and gather."""
    optimizer.zero_grad()
    cls_state = body.hidden(ids, key_mask=key_mask)[:, 0, :]
    logp = torch.log_softmax(head(cls_state), dim=-1)
    loss = -logp.gather(1, labels[:, None]).mean()
    loss.backward()
    optimizer.step()
    return float(loss)


def _cls_step_with(*, where="cls", key=True, softmax=False, reduction="mean", zero=True, step=True, ret="item"):
    def fn(body, head, optimizer, ids, key_mask, labels):
        if zero:
            optimizer.zero_grad()
        h = body.hidden(ids, key_mask if key else None)
        if where == "cls":
            s = h[:, 0]
        elif where == "last":
            s = h[torch.arange(len(ids)), key_mask.sum(1) - 1]
        elif where == "mean":
            m = key_mask[..., None].to(h.dtype)
            s = (h * m).sum(1) / m.sum(1)
        elif where == "max":
            s = h.masked_fill(~key_mask[..., None], -1e9).max(1).values
        else:
            s = h[:, where]
        logits = head(s)
        loss = F.cross_entropy(logits.softmax(-1) if softmax else logits, labels, reduction=reduction)
        loss.backward()
        if step:
            optimizer.step()
        return {"item": loss.item(), "tensor": loss, "none": None}[ret]
    return fn


CLS_STEP_WRONG = {
    "pass key_mask to body.hidden": _cls_step_with(key=False),
    "last real token": _cls_step_with(where="last"),
    "you averaged the hidden states": _cls_step_with(where="mean"),
    "you read position 1": _cls_step_with(where=1),
    "you read the last column": _cls_step_with(where=-1),
    "F.cross_entropy takes the raw logits": _cls_step_with(softmax=True),
    "not the sum": _cls_step_with(reduction="sum"),
    "call optimizer.zero_grad() before": _cls_step_with(zero=False),
    "call optimizer.step()": _cls_step_with(step=False),
    "return the loss as a Python float": _cls_step_with(ret="tensor"),
}


def test_cls_step_right_answers_pass():
    for answer in (right_cls_step, _log_softmax_cls_step):
        fb = check.cls_step(answer)
        assert fb.passed, fb


@pytest.mark.parametrize("expect", list(CLS_STEP_WRONG))
def test_cls_step_wrong_answers_get_their_hint(expect):
    fb = check.cls_step(CLS_STEP_WRONG[expect])
    assert not fb.passed and expect in fb.message, fb


def test_cls_step_refuses_the_companion_and_odd_returns():
    def with_summary(body, head, optimizer, ids, key_mask, labels):
        loss = F.cross_entropy(head(body.summary(ids, key_mask)), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.item()

    fb = check.cls_step(with_summary)
    assert not fb.passed and "summary" in fb.message, fb
    fb = check.cls_step(_cls_step_with(where="max"))
    assert not fb.passed, fb
    assert check.cls_step(stub).status == "not attempted"
    for odd in ODD_RETURNS:
        fb = check.cls_step(lambda *a, odd=odd: odd)
        assert not fb.passed and fb.kind != "internal", (odd, fb)


# ---------------------------------------------------- 10.4 and 10.6: right answers that round otherwise


def _rounded_otherwise_mlm(scale):
    """A right 10.4 step whose gradients differ from the reference's by rounding only: the loss is
    scaled by 1 + ``scale`` before backward (AdamW ignores the scale; a different order of a sum, another
    CPU's vector instructions or another thread count change the same last bits)."""
    def fn(model, optimizer, ids, key_mask, tokenizer, generator):
        inputs, labels = mask_tokens(ids, tokenizer, generator=generator)
        if not (labels != -100).any():
            return None
        _, loss = model(inputs, labels, key_mask=key_mask)
        optimizer.zero_grad()
        (loss * (1 + scale)).backward()
        optimizer.step()
        return loss.item()
    return fn


def _rounded_otherwise_cls(scale):
    def fn(body, head, optimizer, ids, key_mask, labels):
        loss = F.cross_entropy(head(body.hidden(ids, key_mask)[:, 0]), labels)
        optimizer.zero_grad()
        (loss * (1 + scale)).backward()
        optimizer.step()
        return loss.item()
    return fn


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("scale", [2.0 ** -23, 2.0 ** -20])  # SGD is not scale-free: keep it to rounding
def test_steps_that_round_otherwise_still_pass(threads, scale):
    # The grader's kernel once failed the book's own 10.4 and 10.6: the key bias (whose gradient is 0
    # but for rounding) and a GELU unit deep in its tail took AdamW steps set by rounding noise.
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        fb = check.mlm_step(_rounded_otherwise_mlm(scale))
        assert fb.passed, fb
        fb = check.cls_step(_rounded_otherwise_cls(scale))
        assert fb.passed, fb
    finally:
        torch.set_num_threads(before)
