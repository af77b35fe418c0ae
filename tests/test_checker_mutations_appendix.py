"""Mutation registry of the appendix (activation memory, data parallelism by hand): see
tests/mutation_harness.py. The references are the appendix's solution cells (checked below)."""
import inspect
import re
from pathlib import Path

import nbformat
import torch

from companion.exercises import distributed as check
from mutation_harness import Exercise, Mutant, make_tests


# --- A.1 -------------------------------------------------------------------------------------------
def my_activation_bytes(B, T, d_model, n_heads, n_layers, bytes_per_number):
    d, h = d_model, n_heads
    per_token = (2 * d + 2  # block input; LayerNorm 1: output, mean, 1/sigma
                 + 3 * d  # queries, keys, values
                 + d + h  # attention output, a logsumexp per head
                 + 2 * d + 2  # residual; LayerNorm 2: output, mean, 1/sigma
                 + 4 * d + 4 * d)  # feed-forward: before and after the GELU
    return n_layers * B * T * per_token * bytes_per_number


def _per(numbers):
    return lambda B, T, d, h, n, s: n * B * T * numbers(T, d, h) * s


ACTIVATIONS = [
    Mutant("16 d only", _per(lambda T, d, h: 16 * d), "small terms are missing"),
    Mutant("no LayerNorm statistics", _per(lambda T, d, h: 16 * d + h), "mean and 1/sigma are missing"),
    Mutant("no logsumexp", _per(lambda T, d, h: 16 * d + 4), "logsumexp is missing"),
    Mutant("one LayerNorm's statistics", _per(lambda T, d, h: 16 * d + h + 2), "one LayerNorm's mean"),
    Mutant("attention weights kept", _per(lambda T, d, h: 16 * d + h * T + 4), "keeps no T x T weights"),
    Mutant("one feed-forward tensor", _per(lambda T, d, h: 12 * d + h + 4), "before and 4d"),
    Mutant("no residual sum, no input", _per(lambda T, d, h: 14 * d + h + 4), "two d-sized tensors"),
    Mutant("heads multiply d", _per(lambda T, d, h: 16 * d * h + h + 4), "heads split d_model"),
    Mutant("Korthikanti's 34", _per(lambda T, d, h: 34 * d + 5 * h * T), "Korthikanti"),
    Mutant("numbers, not bytes", lambda B, T, d, h, n, s: my_activation_bytes(B, T, d, h, n, 1), "count of numbers"),
    Mutant("always 4 bytes", lambda B, T, d, h, n, s: my_activation_bytes(B, T, d, h, n, 4), "as 4 bytes"),
    Mutant("bits", lambda B, T, d, h, n, s: 8 * my_activation_bytes(B, T, d, h, n, s), "that is bits"),
    Mutant("one layer", lambda B, T, d, h, n, s: my_activation_bytes(B, T, d, h, 1, s), "n_layers"),
    Mutant("one sequence", lambda B, T, d, h, n, s: my_activation_bytes(1, T, d, h, n, s), "batch size B"),
    Mutant("one token", lambda B, T, d, h, n, s: my_activation_bytes(1, 1, d, h, n, s), "B T tokens"),
    Mutant("megabytes", lambda *a: my_activation_bytes(*a) / 1e6, "not megabytes"),
    Mutant("returns None", lambda *a: None, "return a number"),
    Mutant("returns a string", lambda *a: f"{my_activation_bytes(*a):,} bytes", "return a number"),
    Mutant("off by one d", _per(lambda T, d, h: 17 * d + h + 4)),
    Mutant("d_model squared", _per(lambda T, d, h: 16 * d * d)),
]


# --- A.2 -------------------------------------------------------------------------------------------
def my_data_parallel(model, optimizer, loss_fn, batches, dist):
    world = dist.get_world_size()
    with torch.no_grad():  # every copy starts from process 0's weights
        for p in model.parameters():
            dist.broadcast(p, src=0)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()  # the gradient of this share
        for p in model.parameters():
            dist.all_reduce(p.grad)  # the sum over the processes ...
            p.grad /= world  # ... divided: the average
        optimizer.step()  # the same step in every process


def _variant(broadcast=True, src=0, reduce=True, divide=True, step_first=False, params=False, only=None,
             divisor=None, loss_scale=1.0, reduce_loss=False):
    def fn(model, optimizer, loss_fn, batches, dist):
        world = dist.get_world_size()
        ps = list(model.parameters())
        if broadcast:
            with torch.no_grad():
                for p in ps:
                    dist.broadcast(p, src=src)
        for x, y in batches:
            optimizer.zero_grad()
            loss = loss_fn(model, x, y) * loss_scale
            if reduce_loss:
                dist.all_reduce(loss.detach())
            loss.backward()
            if step_first:
                optimizer.step()
            if reduce:
                for p in (ps if only is None else ps[:only]):
                    t = p.data if params else p.grad
                    dist.all_reduce(t)
                    if divide:
                        t /= divisor or world
            if not step_first:
                optimizer.step()
    return fn


def _no_reduce_after_zero(model, optimizer, loss_fn, batches, dist):
    """Reduces, then zeroes the gradients before stepping (steps with nothing)."""
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    for x, y in batches:
        loss_fn(model, x, y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= dist.get_world_size()
        optimizer.zero_grad()
        optimizer.step()


def _rank_dependent(model, optimizer, loss_fn, batches, dist):
    """Only process 0 broadcasts (a real run would hang)."""
    if dist.get_rank() == 0:
        for p in model.parameters():
            dist.broadcast(p.data, src=0)
    my_data_parallel(model, optimizer, loss_fn, batches, dist)


def _avg_op(model, optimizer, loss_fn, batches, dist):
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.AVG)
            p.grad /= dist.get_world_size()
        optimizer.step()


def _async_no_wait(model, optimizer, loss_fn, batches, dist):
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, async_op=True)  # never waited for
            p.grad /= dist.get_world_size()
        optimizer.step()


def _ddp(model, optimizer, loss_fn, batches, dist):
    model = torch.nn.parallel.DistributedDataParallel(model)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()
        optimizer.step()


def _max_op(model, optimizer, loss_fn, batches, dist):
    for p in model.parameters():
        dist.broadcast(p.data, src=0)
    for x, y in batches:
        optimizer.zero_grad()
        loss_fn(model, x, y).backward()
        for p in model.parameters():
            dist.all_reduce(p.grad, op=dist.ReduceOp.MAX)
        optimizer.step()


DATA_PARALLEL = [
    Mutant("no broadcast", _variant(broadcast=False), "never broadcast process 0's"),
    Mutant("broadcast from process 1", _variant(src=1), "broadcast from process 0"),
    Mutant("sum without dividing", _variant(divide=False), "divide the sum by dist.get_world_size()"),
    Mutant("divides by 2 whatever the world", _variant(divisor=2), "by 2 whatever their number"),
    Mutant("loss divided too", _variant(loss_scale=0.5), None),
    Mutant("summed loss of the share", lambda m, o, lf, b, d: _variant()(m, o, lambda mm, x, y: lf(mm, x, y) * len(x), b, d),
           "summed loss over the rows"),
    Mutant("all-reduces the loss, not the gradients", _variant(reduce=False, reduce_loss=True), "one number (the loss?)"),
    Mutant("never all-reduces", _variant(reduce=False), "never all-reduced"),
    Mutant("all-reduces the weights after stepping", _variant(params=True, step_first=True), "only for SGD"),
    Mutant("only the first two parameters", _variant(only=2), "only some gradients"),
    Mutant("steps before reducing", _variant(step_first=True), "before optimizer.step()"),
    Mutant("zeroes the reduced gradients", _no_reduce_after_zero),
    Mutant("only process 0 broadcasts", _rank_dependent, "different collective calls"),
    Mutant("ReduceOp.AVG, then divided again", _avg_op, None),
    Mutant("async all-reduce never waited for", _async_no_wait, "never called .wait()"),
    Mutant("DistributedDataParallel itself", _ddp, "by hand with the `dist` it is given"),
    Mutant("ReduceOp.MAX", _max_op),
    Mutant("does nothing", lambda *a: None, "never calls dist.broadcast or dist.all_reduce"),
]

EXERCISES = [
    Exercise(check.activation_bytes, my_activation_bytes, ACTIVATIONS),
    Exercise(check.data_parallel, my_data_parallel, DATA_PARALLEL),
]

test_reference_passes_and_enough_mutants, test_mutant_is_caught, test_specific_hints_name_their_mistake = make_tests(EXERCISES)

NOTEBOOK = Path(__file__).resolve().parents[1] / "book" / "appendix_beyond_the_laptop.ipynb"


def test_the_references_are_the_appendix_solutions():
    """Each reference above is, character for character, the solution cell of the appendix."""
    nb = nbformat.read(NOTEBOOK, as_version=4)
    solutions = {}
    for cell in nb.cells:
        if cell.cell_type == "code" and "solution" in cell.metadata.get("tags", []):
            solutions[re.match(r"def (\w+)\(", cell.source).group(1)] = cell.source.strip()
    assert set(solutions) == {ex.reference.__name__ for ex in EXERCISES}
    for exercise in EXERCISES:
        assert inspect.getsource(exercise.reference).strip() == solutions[exercise.reference.__name__]
