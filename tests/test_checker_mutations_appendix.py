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


# --- A.3 and A.4: gradient accumulation, then in mixed precision -------------------------------------------
def my_accumulated_step(model, opt, loss_fn, micro_batches):
    n_rows = sum(len(y) for _, y in micro_batches)  # N: the whole batch
    opt.zero_grad()  # once: the gradients then add up
    total = 0.0
    for x, y in micro_batches:
        mean_loss = loss_fn(model, x, y)  # the mean over this micro-batch
        # its share of the mean over all N rows
        (mean_loss * len(y) / n_rows).backward()
        total += mean_loss.item() * len(y)
    opt.step()  # one step, on the whole batch's gradient
    return total / n_rows


def my_amp_step(model, opt, scaler, loss_fn, x, y, max_norm,
                dtype=torch.bfloat16):
    opt.zero_grad()
    with torch.autocast("cpu", dtype=dtype):  # 16-bit matrix products
        loss = loss_fn(model, x, y)  # float32: autocast's rule for losses
    scaler.scale(loss).backward()  # scaled: small gradients survive
    scaler.unscale_(opt)  # the true gradients, in float32 ...
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # clipped
    scaler.step(opt)  # skipped if a gradient is inf or NaN
    scaler.update()  # halve the scale after an overflow
    return loss.item()


def _acc(weigh="share", step="once", zero="once", whole=False, returns="mean", amp=False, scale=True,
         unscale=True, scaler_step=True, update=True, clip=True, amp_dtype=None):
    """The references above with one mistake, chosen by the arguments."""
    def run(model, optimizer, *args):
        if amp:
            scaler, loss_fn, micro, max_norm, dtype = args[0], args[1], args[2], args[3], amp_dtype or args[4]
        else:
            scaler, (loss_fn, micro), dtype = None, args, None
        if whole:
            micro = [(torch.cat([x for x, _ in micro]), torch.cat([y for _, y in micro]))]
        N = sum(len(y) for _, y in micro)
        if zero == "once":
            optimizer.zero_grad()
        total = 0.0
        for x, y in micro:
            if zero == "each":
                optimizer.zero_grad()
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=amp and dtype is not None):
                loss = loss_fn(model, x, y)
            w = {"share": len(y) / N, "mean of means": 1 / len(micro), "sum": 1.0}[weigh]
            (scaler.scale(loss * w) if amp and scale else loss * w).backward()
            total += loss.item() * len(y)
            if step == "each":
                (scaler.step(optimizer) if amp else optimizer.step())
                optimizer.zero_grad()
        if amp and unscale:
            scaler.unscale_(optimizer)
        if amp and clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if step == "once":
            scaler.step(optimizer) if amp and scaler_step else optimizer.step()
        if amp and update:
            scaler.update()
        return {"mean": total / N, "sum": total, "tensor": torch.tensor(total / N), "none": None}[returns]
    return run


ACCUMULATION = [
    Mutant("mean of the micro-batch means", _acc(weigh="mean of means"), "averaged the micro-batches' mean losses"),
    Mutant("gradients summed, not weighted", _acc(weigh="sum"), "without weighting them"),
    Mutant("a step per micro-batch", _acc(step="each"), "stepped after every micro-batch"),
    Mutant("no zero_grad", _acc(zero="never"), "the caller left"),
    Mutant("zero_grad in the loop", _acc(zero="each"), "only the last one counted"),
    Mutant("the whole batch at once", _acc(whole=True), "all the rows at once"),
    Mutant("returns the summed loss", _acc(returns="sum"), "expected the mean loss"),
    Mutant("returns None", _acc(returns="none"), "should return one number"),
    Mutant("no step", lambda m, o, lf, mb: (o.zero_grad(), 0.0)[1], "did not change"),
    Mutant("model.eval() left on", lambda m, o, lf, mb: (m.eval(), my_accumulated_step(m, o, lf, mb))[1],
           "evaluation mode"),
    Mutant("changes the micro-batches", lambda m, o, lf, mb: (mb[0][0].mul_(2), my_accumulated_step(m, o, lf, mb))[1],
           "in place"),
    Mutant("grad mode left off (o2)", lambda m, o, lf, mb: (my_accumulated_step(m, o, lf, mb),
                                                           torch.set_grad_enabled(False))[0], "grad mode"),
    Mutant("reseeds torch (o2)", lambda m, o, lf, mb: (torch.manual_seed(0), my_accumulated_step(m, o, lf, mb))[1],
           "random state"),
    Mutant("returns a tensor (o2)", lambda m, o, lf, mb: torch.tensor(my_accumulated_step(m, o, lf, mb)),
           "Python float"),
]

def _amp(scale=True, unscale=True, scaler_step=True, update=True, clip=True, autocast=True, dtype=None,
         zero=True, returns="item"):
    """The mixed-precision reference with one mistake, chosen by the arguments."""
    def run(model, opt, scaler, loss_fn, x, y, max_norm, dt=torch.bfloat16):
        if zero:
            opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype or dt, enabled=autocast):
            loss = loss_fn(model, x, y)
            if returns == "backward under autocast":
                scaler.scale(loss).backward()
        if returns != "backward under autocast":
            (scaler.scale(loss) if scale else loss * 65536.0 if returns == "65536" else loss).backward()
        if unscale:
            scaler.unscale_(opt)
        if clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if returns == "update first":
            scaler.update()
        scaler.step(opt) if scaler_step else opt.step()
        if update and returns != "update first":
            scaler.update()
        return {"item": loss.item(), "tensor": loss, "none": None}.get(returns, loss.item())
    return run


AMP = [
    Mutant("loss not scaled", _amp(scale=False), "scaler.scale", raised=True),
    Mutant("clip before unscale_", _amp(unscale=False), "clipped the scaled gradients"),
    Mutant("optimizer's step() itself", _amp(scaler_step=False), "step() yourself"),
    Mutant("no scaler.update()", _amp(update=False), "scaler.update()"),
    Mutant("no autocast", _amp(autocast=False), "without autocast"),
    Mutant("float16 autocast", _amp(dtype=torch.float16), "another dtype"),
    Mutant("no zero_grad", _amp(zero=False), "the caller left"),
    Mutant("no clipping", _amp(clip=False), None),
    Mutant("autocast left on", lambda *a: (torch.set_autocast_enabled("cpu", True), my_amp_step(*a))[1], "still on"),
    Mutant("returns None", _amp(returns="none"), "should return one number"),
    Mutant("backward under autocast (o2)", _amp(returns="backward under autocast"), "ran under autocast"),
    Mutant("a constant 65536 instead of the scale (o2)", _amp(scale=False, returns="65536"), None),
    Mutant("update before step (o2)", _amp(returns="update first"), "before scaler.step"),
    Mutant("returns the loss tensor (o2)", _amp(returns="tensor"), "Python float"),
    Mutant("eval mode left (o2)", lambda m, *a: (m.eval(), my_amp_step(m, *a))[1], "evaluation mode"),
    Mutant("returns the scaled loss", lambda m, o, s, lf, x, y, mn, dt=torch.bfloat16: my_amp_step(m, o, s, lf, x, y, mn,
           dt) * s.get_scale(), "expected the mean loss"),
]

EXERCISES = [
    Exercise(check.activation_bytes, my_activation_bytes, ACTIVATIONS),
    Exercise(check.data_parallel, my_data_parallel, DATA_PARALLEL),
    Exercise(check.accumulation, my_accumulated_step, ACCUMULATION),
    Exercise(check.amp_step, my_amp_step, AMP),
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
