"""Mutation registry of chapter 7 (training a language model): see tests/mutation_harness.py."""
import inspect
import math
import re
from pathlib import Path

import nbformat
import numpy as np
import torch
import torch.nn.functional as F

from companion.exercises import lm as check
from mutation_harness import Exercise, Mutant, make_tests


# --- 7.1 ---------------------------------------------------------------------------------------------
def my_cross_entropy(logits, targets):
    # (B, T, V): log-probabilities over the vocabulary
    logp = torch.log_softmax(logits, dim=-1)
    # (B, T): the log-probability of each target
    picked = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return -picked.mean()


def _picked(logits, targets, logp=lambda l: torch.log_softmax(l, -1)):
    return logp(logits).gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T)


CROSS_ENTROPY = [
    Mutant("sign", lambda l, t: _picked(l, t).mean(), "sign is wrong"),
    Mutant("sum", lambda l, t: -_picked(l, t).sum(), "summed over the positions"),
    Mutant("probability", lambda l, t: -_picked(l, t, lambda l: l.softmax(-1)).mean(), "not its logarithm"),
    Mutant("one minus probability", lambda l, t: 1 - _picked(l, t, lambda l: l.softmax(-1)).mean(), "not its logarithm"),
    Mutant("raw logit", lambda l, t: -_picked(l, t, lambda l: l).mean(), "raw logit"),
    Mutant("softmax over the positions", lambda l, t: -_picked(l, t, lambda l: l.log_softmax(1)).mean(),
           "over the vocabulary"),
    Mutant("bits", lambda l, t: -_picked(l, t).mean() / math.log(2), "in bits"),
    Mutant("every token of the vocabulary", lambda l, t: -torch.log_softmax(l, -1).mean(), "every token of the vocabulary"),
    Mutant("no mean", lambda l, t: -_picked(l, t), "one loss per position"),
    Mutant("mean over time only", lambda l, t: -_picked(l, t).mean(-1), "one dimension only"),
    Mutant("F.cross_entropy", lambda l, t: F.cross_entropy(l.flatten(0, 1), t.flatten()), "calls F.cross_entropy"),
    Mutant("nn.CrossEntropyLoss", lambda l, t: torch.nn.CrossEntropyLoss()(l.flatten(0, 1), t.flatten()),
           "calls F.cross_entropy"),
    Mutant("log of the softmax", lambda l, t: -_picked(l, t, lambda l: l.softmax(-1).log()).mean(), "±1000"),
    Mutant("a Python float", lambda l, t: my_cross_entropy(l, t).item(), "not a Python number"),
    Mutant("returns None", lambda l, t: None, "return a tensor"),
    Mutant("gather without unsqueeze", lambda l, t: -torch.log_softmax(l, -1).gather(-1, t).mean(), "RuntimeError",
           raised=True),
    Mutant("NaN", lambda l, t: my_cross_entropy(l, t) * float("nan")),
]


# --- 7.2 ---------------------------------------------------------------------------------------------
def my_shift(window):
    return window[:, :-1], window[:, 1:]


def _flattened(window):
    flat = window.flatten()
    B, T1 = window.shape
    return flat[: B * (T1 - 1)].view(B, T1 - 1), flat[1: B * (T1 - 1) + 1].view(B, T1 - 1)


SHIFT = [
    Mutant("swapped", lambda w: (w[:, 1:], w[:, :-1]), "swapped"),
    Mutant("no shift", lambda w: (w[:, :-1], w[:, :-1]), "the same"),
    Mutant("whole window twice", lambda w: (w, w), "ONE shorter"),
    Mutant("along the batch", lambda w: (w[:-1], w[1:]), "batch dimension"),
    Mutant("flattened", _flattened, "flattened batch"),
    Mutant("torch.roll", lambda w: (w[:, :-1], w[:, :-1].roll(-1, 1)), "torch.roll wraps around"),
    Mutant("float ids", lambda w: (w[:, :-1].float(), w[:, 1:].float()), "integers"),
    Mutant("returns x only", lambda w: w[:, :-1], "pair"),
    Mutant("returns None", lambda w: None, "pair"),
    Mutant("returns a dict", lambda w: {"x": w[:, :-1], "y": w[:, 1:]}, "pair"),
    Mutant("numpy arrays", lambda w: (w[:, :-1].numpy(), w[:, 1:].numpy()), "must be tensors"),
    Mutant("shift by two", lambda w: (w[:, :-2], w[:, 2:])),
    Mutant("targets shifted the wrong way", lambda w: (w[:, 1:], w[:, 1:]), "the same"),
    Mutant("targets reversed in time", lambda w: (w[:, :-1], w[:, 1:].flip(1))),
]


# --- 7.3 ---------------------------------------------------------------------------------------------
def my_bits(nats):
    return nats / math.log(2)


BITS = [
    Mutant("times ln 2", lambda n: n * math.log(2), "multiplied by ln 2"),
    Mutant("log2 of the loss", lambda n: math.log2(n), "not a change of unit"),
    Mutant("perplexity", lambda n: math.exp(n), "perplexity"),
    Mutant("2 ** bits", lambda n: 2 ** (n / math.log(2)), "perplexity"),
    Mutant("ln 10", lambda n: n / math.log(10), "bans"),
    Mutant("log2(2)", lambda n: n / math.log2(2), "unchanged"),
    Mutant("divided by 2", lambda n: n / 2, "not by 2"),
    Mutant("truncated", lambda n: int(n / math.log(2)), "rounded or truncated"),
    Mutant("rounded", lambda n: round(n / math.log(2), 2), "rounded or truncated"),
    Mutant("returns a string", lambda n: f"{n / math.log(2):.3f} bits", "should return a number"),
    Mutant("returns None", lambda n: None, "should return one number"),
    Mutant("plus one", lambda n: n / math.log(2) + 1),
    Mutant("numpy array", lambda n: np.array([n, n]) / math.log(2), "one number"),
]


# --- 7.5 (the training step; it comes after the model, 7.4, in the chapter) -----------------------------
def my_train_step(model, optimizer, x, y, max_norm):
    optimizer.zero_grad()  # clear what the previous step left in .grad
    logits, _ = model(x)  # (B, T, V)
    B, T, V = logits.shape
    # (B*T, V) against (B*T,): the mean of -log p(next token)
    loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))
    loss.backward()  # the gradients, into each parameter's .grad
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()  # update the weights
    return loss.item()


def _step(zero="start", targets="y", backward=True, clip="before", clip_to=None, step=True, steps=1,
          returns="item", reduction="mean", clip_value=False):
    """The reference training step with one mistake, chosen by the arguments."""
    def train_step(model, optimizer, x, y, max_norm):
        if zero == "start":
            optimizer.zero_grad()
        logits, _ = model(x)
        B, T, V = logits.shape
        loss = F.cross_entropy(logits.reshape(B * T, V), (x if targets == "x" else y).reshape(B * T), reduction=reduction)
        if backward:
            loss.backward()
        if zero == "after backward":
            optimizer.zero_grad()

        def clip_():
            if clip_value:
                torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)
            else:
                torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm if clip_to is None else clip_to)

        if clip == "before":
            clip_()
        if step:
            for _ in range(steps):
                optimizer.step()
        if clip == "after":
            clip_()
        if zero == "end":
            optimizer.zero_grad()
        if returns == "tensor":
            return loss
        if returns == "after":
            with torch.no_grad():
                return F.cross_entropy(model(x)[0].reshape(B * T, V), y.reshape(B * T)).item()
        return loss.item()
    return train_step


TRAIN_STEP = [
    Mutant("no zero_grad", _step(zero=None), "gradients accumulate"),
    Mutant("zero_grad at the end", _step(zero="end"), "at the START of the step"),
    Mutant("zero_grad after backward", _step(zero="after backward"), "no gradient reached the update"),
    Mutant("no backward", _step(backward=False), "no gradient reached the update"),
    Mutant("no clipping", _step(clip=None), "were not clipped"),
    Mutant("clipping after the step", _step(clip="after"), "clipped after optimizer.step()"),
    Mutant("clips to 1.0", _step(clip_to=1.0), "not to a fixed 1.0"),
    Mutant("unshifted targets", _step(targets="x"), "unshifted text"),
    Mutant("no step", _step(step=False), "call optimizer.step()"),
    Mutant("two steps", _step(steps=2)),
    Mutant("returns the loss tensor", _step(returns="tensor"), "Python float"),
    Mutant("returns None", lambda *a: (my_train_step(*a), None)[1], "as a float"),
    Mutant("returns the loss after the update", _step(returns="after"), "before the update"),
    Mutant("summed loss", _step(reduction="sum")),
    Mutant("clip_grad_value_", _step(clip_value=True)),
    Mutant("logits not flattened", lambda m, o, x, y, n: F.cross_entropy(m(x)[0], y), "RuntimeError", raised=True),
]


# --- 7.4 (the GPT's forward pass, where the chapter introduces the model) ---------------------------
def my_gpt_forward(model, idx):
    B, T = idx.shape
    # (B, T, d_model) + (T, d_model) -> (B, T, d_model)
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(T))
    for block in model.blocks:
        x = block(x, is_causal=True)  # (B, T, d_model)
    return model.head(model.final_norm(x))  # (B, T, V)


def _forward(pos="arange", start=0, norm=True, causal=True, head_first=False, blocks=lambda bs: bs, scale=1.0,
             returns="logits"):
    def forward(model, idx):
        B, T = idx.shape
        x = model.tok_emb(idx) * scale
        if pos == "arange":
            x = x + model.pos_emb(torch.arange(start, start + T))
        elif pos == "ids":
            x = x + model.pos_emb(idx)
        for block in blocks(list(model.blocks)):
            x = block(x, is_causal=causal)
        logits = model.final_norm(model.head(x)) if head_first else model.head(model.final_norm(x) if norm else x)
        if returns == "probs":
            return logits.softmax(-1)
        if returns == "pair":
            return logits, None
        return logits
    return forward


GPT_FORWARD = [
    Mutant("no position embedding", _forward(pos=None), "position embeddings are missing"),
    Mutant("positions from 1", _forward(start=1), "positions start at 0"),
    Mutant("positions from the ids", _forward(pos="ids"), "not by token id"),
    Mutant("no final norm", _forward(norm=False), "final LayerNorm is missing"),
    Mutant("no causal mask", _forward(causal=False), "is_causal=True"),
    Mutant("head before the norm", _forward(head_first=True), "final norm comes before the head"),
    Mutant("first block only", _forward(blocks=lambda bs: bs[:1]), "every block"),
    Mutant("blocks in reverse", _forward(blocks=lambda bs: bs[::-1]), "in their order"),
    Mutant("no blocks", _forward(blocks=lambda bs: []), "blocks are missing"),
    Mutant("scaled token embeddings", lambda m, i: _forward(scale=math.sqrt(m.config.d_model))(m, i), "do not scale"),
    Mutant("probabilities", _forward(returns="probs"), "probabilities"),
    Mutant("returns (logits, None)", _forward(returns="pair"), "not a tuple"),
    Mutant("calls the model", lambda m, i: m(i)[0], "called the model itself"),
    Mutant("returns None", lambda m, i: None, "return the logits"),
    Mutant("head weight transposed", lambda m, i: my_gpt_forward(m, i) @ torch.eye(16) * 2),
    Mutant("blocks without is_causal keyword", lambda m, i: _blocks_positional(m, i), "TypeError", raised=True),
]


def _blocks_positional(model, idx):
    x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))
    for block in model.blocks:
        x = block(x, None, None, True, None, "extra")  # too many positional arguments
    return model.head(model.final_norm(x))


EXERCISES = [
    Exercise(check.cross_entropy, my_cross_entropy, CROSS_ENTROPY),
    Exercise(check.shift, my_shift, SHIFT),
    Exercise(check.bits_per_char, my_bits, BITS),
    Exercise(check.gpt_forward, my_gpt_forward, GPT_FORWARD),
    Exercise(check.train_step, my_train_step, TRAIN_STEP),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "07_training_a_language_model.ipynb"


def test_the_references_are_the_chapters_solutions():
    """Each reference above is, character for character, the solution cell of the chapter: the
    mutants are mistakes made on the code the students see."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    solutions = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            name = re.match(r"def (\w+)\(", cell.source).group(1)
            solutions[name] = cell.source.strip()
    assert set(solutions) == {ex.reference.__name__ for ex in EXERCISES}
    for exercise in EXERCISES:
        ref = exercise.reference
        assert inspect.getsource(ref).strip() == solutions[ref.__name__], ref.__name__
