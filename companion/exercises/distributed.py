"""Checkers for the appendix, *Beyond the laptop*: activation memory and data parallelism by hand.

* A.1 ``activation_bytes``: the bytes that the blocks of the course's GPT keep for the backward
  pass, from the shapes. Reference: the count written out term by term below (the notebook checks
  it against a measurement with ``torch.autograd.graph.saved_tensors_hooks``).
* A.2 ``data_parallel``: one process's part of data-parallel training written with
  ``dist.broadcast`` and ``dist.all_reduce``. The checker runs every process of a small run *in this
  process*, one after the other, with :class:`SimulatedGroup` standing in for ``torch.distributed``
  (see there: the collectives are solved for by running the processes again until their calls
  agree, which needs no threads, no sockets and no second process, so the check is the same in a
  notebook and in the grader's sandbox). The reference is independent of the student's code and of
  the companion: one process training on the whole batch.
"""
from __future__ import annotations

import math
import numbers
from typing import Any

import torch
import torch.distributed as _dist
import torch.nn.functional as F
from torch import nn

from ._core import StudentError, _answers_elsewhere, _one_branch_missing, checker, close, describe, hint, passed

__all__ = ["activation_bytes", "data_parallel", "SimulatedGroup", "accumulation", "amp_step"]


# --------------------------------------------------------------------- A.1 activation memory
def _activation_bytes(B: int, T: int, d: int, h: int, n: int, size: int) -> int:
    """The count the exercise asks for (per layer and token: 16 d + h + 4 numbers)."""
    per_token = (d + 2 + d  # the block's input, LayerNorm 1's mean and 1/sigma, its output
                 + 3 * d + d + h  # queries, keys, values; attention's output; a logsumexp per head
                 + d + 2 + d  # the residual sum (LayerNorm 2's input), its mean and 1/sigma, output
                 + 4 * d + 4 * d)  # the feed-forward hidden values, before and after the GELU
    return n * B * T * per_token * size


_SHAPES = [  # (B, T, d_model, n_heads, n_layers, bytes per number)
    (8, 128, 128, 4, 4, 4), (1, 1, 8, 1, 1, 4), (2, 16, 32, 4, 1, 2), (3, 7, 48, 6, 5, 8),
    (8, 1024, 768, 12, 12, 4), (8, 1024, 768, 12, 12, 2), (16, 64, 64, 8, 2, 4), (5, 33, 96, 3, 3, 2),
    (1, 2048, 4096, 32, 32, 2), (4, 256, 256, 16, 6, 1),
]


def _value(x: Any) -> "int | float | None":
    """A returned count as a Python int (exact) or float; None when it is not a real number.
    Python and NumPy numbers and one-element real tensors count; bools do not."""
    if isinstance(x, bool) or (isinstance(x, torch.Tensor) and (x.numel() != 1 or x.is_complex()
                                                                or x.dtype == torch.bool)):
        return None
    if isinstance(x, torch.Tensor):
        x = x.item()
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return float(x)
    return None


def _near(got: "int | float", want: "int | float", tol: float) -> bool:
    """|got - want| <= tol, False for inf, NaN or a number too large for a float."""
    try:
        return math.isfinite(got) and abs(got - want) <= tol
    except OverflowError:
        return False


def _per_token(numbers_per_token):
    """A mistake that counts other numbers per token and layer, the rest right."""
    return lambda B, T, d, h, n, size: n * B * T * numbers_per_token(T, d, h) * size


_A1_MISTAKES = [  # (what the wrong answer computes, the hint)
    (_per_token(lambda T, d, h: 16 * d), "the small terms are missing: a logsumexp per head (h numbers) "
     "and each LayerNorm's mean and 1/sigma (2 numbers per norm, 4 per layer)"),
    (_per_token(lambda T, d, h: 16 * d + h), "each LayerNorm's mean and 1/sigma are missing (2 numbers "
     "per norm and token, 4 per layer)"),
    (_per_token(lambda T, d, h: 16 * d + 4), "the attention's logsumexp is missing (one number per head "
     "and token: h)"),
    (_per_token(lambda T, d, h: 16 * d + 2 + h), "one LayerNorm's mean and 1/sigma are missing (2 numbers "
     "for each of the two norms)"),
    (_per_token(lambda T, d, h: 16 * d + h * T + 4), "the fused attention keeps no T x T weights: per "
     "head and token it keeps one logsumexp (h numbers), not T (a hand-written softmax would)"),
    (_per_token(lambda T, d, h: 16 * d + h * T + h + 4), "the fused attention keeps no T x T weights, "
     "only a logsumexp (h numbers per token)"),
    (_per_token(lambda T, d, h: 12 * d + h + 4), "the feed-forward layer keeps 4d numbers before and 4d "
     "after the GELU; count both"),
    (_per_token(lambda T, d, h: 14 * d + h + 4), "two d-sized tensors are missing: the block's input and "
     "the residual sum (LayerNorm 2's input) are kept too"),
    (_per_token(lambda T, d, h: 15 * d + h + 4), "one d-sized tensor is missing (the block's input, the "
     "residual sum and the attention's output are all kept)"),
    (_per_token(lambda T, d, h: 34 * d + 5 * h * T), "34 d + 5 h T is Korthikanti et al.'s count in "
     "bytes of 16-bit numbers with dropout masks and a stored softmax; count the numbers of this GPT"),
    (_per_token(lambda T, d, h: 16 * d * h + h + 4), "the heads split d_model, they do not multiply it: "
     "queries, keys and values take 3 d numbers in all"),
    (lambda B, T, d, h, n, size: _activation_bytes(B, T, d, h, n, 1), "that is the count of numbers: "
     "multiply by bytes_per_number"),
    (lambda B, T, d, h, n, size: _activation_bytes(B, T, d, h, n, 8 * size), "that is bits: count bytes "
     "(a float32 number is 4 bytes)"),
    (lambda B, T, d, h, n, size: _activation_bytes(B, T, d, h, n, 4), "that takes every number as 4 "
     "bytes: use bytes_per_number"),
    (lambda B, T, d, h, n, size: _activation_bytes(B, T, d, h, 1, size), "that is one layer: multiply "
     "by n_layers"),
    (lambda B, T, d, h, n, size: _activation_bytes(1, T, d, h, n, size), "that is one sequence: multiply "
     "by the batch size B"),
    (lambda B, T, d, h, n, size: _activation_bytes(B, 1, d, h, n, size), "that is one position: "
     "multiply by the context length T"),
    (lambda B, T, d, h, n, size: _activation_bytes(1, 1, d, h, n, size), "that is one token: multiply "
     "by the B T tokens"),
    (lambda B, T, d, h, n, size: _activation_bytes(B, T, d, h, n, size) / 1e6, "return bytes, not "
     "megabytes"),
    (lambda B, T, d, h, n, size: _activation_bytes(B, T, d, h, n, size) / 2**20, "return bytes, not MiB"),
]


def _shown(x: "int | float") -> str:
    try:
        return f"{x:,.6g}"
    except OverflowError:
        return f"a number of {len(str(x))} digits"


@checker("Exercise A.1")
def activation_bytes(fn):
    """Exercise A.1: ``fn(B, T, d_model, n_heads, n_layers, bytes_per_number)`` returns the bytes
    the blocks keep for the backward pass: ``n_layers B T (16 d + h + 4) bytes_per_number``."""
    answers = []
    for B, T, d, h, n, size in _SHAPES:
        got = _value(fn(B, T, d, h, n, size))
        if got is None:
            hint(f"return a number (of bytes); for B={B}, T={T} you returned {describe(fn(B, T, d, h, n, size))}.")
        answers.append(got)
    wrong = [(shape, got) for shape, got in zip(_SHAPES, answers) if not _near(got, _activation_bytes(*shape), 0.5)]
    if not wrong:
        passed("your count matches the course's on every shape tried, up to GPT-2 small and the "
               "layers of a 7B model.")
    for mistake, message in _A1_MISTAKES:
        if all(_near(got, mistake(*shape), 0.5 + 1e-9 * abs(mistake(*shape))) for shape, got in zip(_SHAPES, answers)):
            hint(f"{message}.")
    (B, T, d, h, n, size), got = wrong[0]
    hint(f"for B={B}, T={T}, d_model={d}, n_heads={h}, n_layers={n}, {size} bytes a number, the blocks "
         f"keep {_activation_bytes(B, T, d, h, n, size):,} bytes; you return {_shown(got)}. Count per layer "
         "and token 16 d + h + 4 numbers (the list in the exercise).", generic=True)


# --------------------------------------------------------------------- A.2 data parallelism
class _Work:
    """What an ``async_op=True`` collective returns: the result lands in the tensor on ``wait()``,
    not before (on real processes it may land at any moment until then, so code that reads the
    tensor before waiting is wrong; the stand-in makes that visible)."""

    def __init__(self, tensor: torch.Tensor | None = None, result: torch.Tensor | None = None):
        self.tensor, self.result = tensor, result

    def wait(self, *args: Any, **kwargs: Any) -> bool:
        if self.tensor is not None:
            with torch.no_grad():
                self.tensor.copy_(self.result)
            self.tensor = None
        return True

    def is_completed(self) -> bool:
        return self.tensor is None


class _Groups:
    WORLD = None  # dist.group.WORLD: the default group, the only one here


_OPS = ("SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR", "PREMUL_SUM")


def _op_name(op: Any) -> str:
    for name in _OPS:
        if hasattr(_dist.ReduceOp, name) and op == getattr(_dist.ReduceOp, name):
            return name
    return "?"


class SimulatedGroup:
    """A stand-in for ``torch.distributed`` seen from process ``rank`` of ``world_size``.

    It has what a data-parallel loop needs: ``get_rank``, ``get_world_size``, ``broadcast``,
    ``all_reduce`` (``ReduceOp.SUM``, ``PRODUCT``, ``MIN``, ``MAX`` and ``AVG``, which gloo has
    since PyTorch 2.x), ``barrier``, ``ReduceOp``, ``group.WORLD``; with ``async_op=True`` the result
    lands on ``wait()``. It records every collective call with this process's
    contribution (``calls``), and computes each result from the contributions of the other
    processes recorded in ``others`` by an earlier run of theirs (its own contribution where none
    is recorded yet). Running the processes in turn until their recorded calls no longer change
    gives exactly the results of running them together: the k-th contribution of a process
    depends only on the results of its earlier collectives, so each round fixes at least one more
    call. ``state_dict``/``load_state_dict`` carry ``calls``, so that the grader copies them back.
    """

    ReduceOp = _dist.ReduceOp
    group = _Groups

    def __init__(self, rank: int, world_size: int, others: list | None = None):
        self.rank, self.world = rank, world_size
        self.others = others if others is not None else [None] * world_size
        self.calls: list[list] = []  # [kind, argument, contribution]
        self.pending: list[_Work] = []  # async collectives, to see that each was waited for

    # what the student's code may ask
    def get_rank(self, group: Any = None) -> int:
        return self.rank

    def get_world_size(self, group: Any = None) -> int:
        return self.world

    def is_initialized(self) -> bool:
        return True

    def is_available(self) -> bool:
        return True

    def get_backend(self, group: Any = None) -> str:
        return "gloo"

    def barrier(self, group: Any = None, async_op: bool = False, device_ids: Any = None) -> Any:
        self.calls.append(["barrier", 0, torch.zeros(())])
        return _Work() if async_op else None

    def _contributions(self, kind: str, argument: Any, mine: torch.Tensor) -> list[torch.Tensor]:
        k, found = len(self.calls), []
        for q in range(self.world):
            record = self.others[q] if q != self.rank else None
            if (record is not None and k < len(record) and record[k][0] == kind and record[k][1] == argument
                    and record[k][2].shape == mine.shape):
                found.append(record[k][2].to(mine.dtype))
            else:
                found.append(mine)
        return found

    def broadcast(self, tensor: torch.Tensor, src: int = 0, group: Any = None, async_op: bool = False,
                  group_src: Any = None) -> Any:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"broadcast(): argument 'tensor' must be Tensor, not {type(tensor).__name__}")
        if not isinstance(src, int) or not 0 <= src < self.world:
            raise ValueError(f"broadcast(): src must be a rank from 0 to {self.world - 1} (got {src!r})")
        mine = tensor.detach().clone()
        result = self._contributions("broadcast", src, mine)[src]
        self.calls.append(["broadcast", src, mine])
        return self._deliver(tensor, result, async_op)

    def _deliver(self, tensor: torch.Tensor, result: torch.Tensor, async_op: bool) -> Any:
        if async_op:
            work = _Work(tensor, result)
            self.pending.append(work)
            return work
        with torch.no_grad():
            tensor.copy_(result)
        return None

    def all_reduce(self, tensor: torch.Tensor, op: Any = _dist.ReduceOp.SUM, group: Any = None,
                   async_op: bool = False) -> Any:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"all_reduce(): argument 'tensor' must be Tensor, not {type(tensor).__name__}")
        name = _op_name(op)
        if name not in ("SUM", "PRODUCT", "MIN", "MAX", "AVG"):
            raise RuntimeError(f"Cannot use ReduceOp.{name} with Gloo")
        mine = tensor.detach().clone()
        parts = torch.stack(self._contributions("all_reduce", name, mine))
        result = {"SUM": lambda p: p.sum(0), "PRODUCT": lambda p: p.prod(0), "AVG": lambda p: p.mean(0),
                  "MIN": lambda p: p.min(0).values, "MAX": lambda p: p.max(0).values}[name](parts)
        self.calls.append(["all_reduce", name, mine])
        return self._deliver(tensor, result.to(tensor.dtype), async_op)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"the checker's stand-in for torch.distributed has get_rank, get_world_size, "
                             f"broadcast, all_reduce, barrier, ReduceOp and group.WORLD; not {name!r}")

    # the grader copies these back from the student's kernel
    def state_dict(self) -> dict:
        return {"calls": [[kind, arg, t] for kind, arg, t in self.calls]}

    def load_state_dict(self, state: dict) -> None:
        self.calls = [[str(kind), arg if isinstance(arg, int) else str(arg), torch.as_tensor(t)]
                      for kind, arg, t in state["calls"]]


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(model(x), y)


def _model(seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3))
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return net


def _optimizer(kind: str, params: Any) -> torch.optim.Optimizer:
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.5)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=0.3, momentum=0.9)
    return torch.optim.Adam(params, lr=0.05)


def _batches(seed: int, world: int, steps: int, rows: int) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """``[step][rank] -> (x, y)``: each step's global batch, cut into equal shares."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(steps):
        x = torch.randn(world * rows, 4, generator=g)
        y = torch.randint(3, (world * rows,), generator=g)
        out.append([(x[r * rows:(r + 1) * rows].clone(), y[r * rows:(r + 1) * rows].clone()) for r in range(world)])
    return out


def _flat(net: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in net.parameters()])


def _single_process(init_seed: int, kind: str, batches: list, scale: float = 1.0) -> torch.Tensor:
    """The reference: one process, the whole batch of every step (its gradient times ``scale``)."""
    net = _model(init_seed)
    opt = _optimizer(kind, net.parameters())
    for shares in batches:
        x = torch.cat([s[0] for s in shares])
        y = torch.cat([s[1] for s in shares])
        opt.zero_grad()
        _loss(net, x, y).backward()
        if scale != 1.0:
            for p in net.parameters():
                p.grad.mul_(scale)
        opt.step()
    return _flat(net)


_MAX_ROUNDS = 60


def _same_calls(a: list | None, b: list) -> bool:
    return (a is not None and len(a) == len(b)
            and all(x[0] == y[0] and x[1] == y[1] and x[2].shape == y[2].shape and torch.equal(x[2], y[2])
                    for x, y in zip(a, b)))


def _run(fn, world: int, kind: str, steps: int, rows: int, seed: int):
    """Run ``fn`` as every process of a world, in turn, until the collectives settle.

    Process ``r`` starts from its own random weights (``_model(seed + r)``), as processes do
    before DDP broadcasts process 0's. Returns ``(final weights per process, calls per process)``.
    """
    batches = _batches(seed, world, steps, rows)
    records: list = [None] * world
    for _ in range(_MAX_ROUNDS):
        settled, finals = True, []
        for r in range(world):
            net = _model(seed + r)
            opt = _optimizer(kind, net.parameters())
            group = SimulatedGroup(r, world, list(records))
            try:
                fn(net, opt, _loss, [batches[s][r] for s in range(steps)], group)
            except StudentError as exc:
                if "process group" in str(exc.error) and "initialized" in str(exc.error):
                    hint("your code needs torch's default process group (DistributedDataParallel, or "
                         "torch.distributed called directly?): this exercise writes data parallelism by "
                         "hand with the `dist` it is given: dist.broadcast and dist.all_reduce.")
                raise
            if any(not work.is_completed() for work in group.pending):
                hint("you started a collective with async_op=True and never called .wait() on what it "
                     "returned: on real processes the reduced gradient may not have arrived when you "
                     "divide or step. Call work.wait() first (or leave async_op out).")
            settled = settled and _same_calls(records[r], group.calls)
            records[r] = group.calls
            finals.append(_flat(net))
        if settled:
            return batches, finals, records
    hint(f"your processes made {len(records[0])} collective calls for {steps} steps of a model with 4 "
         "parameter tensors, too many to follow: broadcast each parameter once, then all-reduce each "
         "gradient tensor once per step.")


def _shapes(net: nn.Module) -> list[tuple]:
    return [tuple(p.shape) for p in net.parameters()]


def _diagnose_apart(records: list, world: int, steps: int) -> None:
    """The processes ended with different weights: say why."""
    params = _shapes(_model(0))
    n_numbers = sum(math.prod(s) for s in params)
    calls = records[0]
    broadcasts = [c for c in calls if c[0] == "broadcast"]
    reduces = [c for c in calls if c[0] == "all_reduce"]
    if not calls:
        hint("your function never calls dist.broadcast or dist.all_reduce: each process trains its own "
             "copy alone, and the copies drift apart.")
    if not broadcasts:
        hint("the processes start from different random weights and you never broadcast process 0's: "
             "call dist.broadcast(p.data, src=0) for every parameter before training, as "
             "DistributedDataParallel does when it wraps the model.")
    if sum(c[2].numel() for c in broadcasts) < n_numbers:
        hint("only some parameters are broadcast: the others keep each process's own random values. "
             "Broadcast every parameter from process 0.")
    if not reduces:
        hint("the gradients are never all-reduced: each process steps with the gradient of its own "
             "share, and the copies drift apart. After loss.backward(), all-reduce every p.grad.")
    if all(c[2].numel() == 1 for c in reduces):
        hint("you all-reduce one number (the loss?), not the gradients: autograd does not go through "
             "all_reduce, so each process's gradient stays its own. All-reduce every p.grad after "
             "loss.backward().")
    if sum(c[2].numel() for c in reduces) < steps * n_numbers:
        hint("only some gradients are all-reduced: every parameter's gradient must be, at every step, "
             "or the copies drift apart.")
    hint("the processes end with different weights although you broadcast and all-reduce: all-reduce "
         "every gradient after loss.backward() and before optimizer.step(), and step with the reduced "
         "gradient.")


@checker("Exercise A.2")
def data_parallel(fn):
    """Exercise A.2: ``fn(model, optimizer, loss_fn, batches, dist)`` trains one process's copy:
    broadcast process 0's weights, then for each share ``(x, y)`` of a step, the gradient of
    ``loss_fn(model, x, y)``, all-reduced and divided by the number of processes, and a step."""
    cases = [  # world, optimizer, steps, rows per process, seed
        (2, "sgd", 1, 3, 10),
        (3, "momentum", 2, 2, 20),
        (2, "adam", 3, 4, 30),
    ]
    for world, kind, steps, rows, seed in cases:
        batches, finals, records = _run(fn, world, kind, steps, rows, seed)
        calls = [[c[0:2] + [tuple(c[2].shape)] for c in rec] for rec in records]
        if any(c != calls[0] for c in calls[1:]):
            hint("your processes make different collective calls (another order, other tensors, or a "
                 "call only one process makes): every process must make the same calls in the same "
                 "order, or a real run hangs.")
        if any(not close(f, finals[0], rtol=1e-5, atol=1e-6) for f in finals[1:]):
            _diagnose_apart(records, world, steps)
        got = finals[0]
        what = f"{world} processes, {dict(sgd='SGD', momentum='SGD with momentum', adam='Adam')[kind]}, {steps} steps"
        if not torch.isfinite(got).all():
            hint(f"with {what} the weights became inf or NaN.")
        want = _single_process(seed, kind, batches)
        if close(got, want, rtol=1e-4, atol=1e-5):
            continue
        if close(got, _single_process(seed + 1, kind, batches), rtol=1e-4, atol=1e-5):
            hint("the copies agree, but on process 1's weights: broadcast from process 0 (src=0), "
                 "whose weights a checkpoint or DDP keeps.")
        if kind == "adam":
            hint("with SGD your processes train like one process on the whole batch, but with Adam "
                 "not: averaging the weights after each process stepped with its own gradient equals "
                 "averaging the gradients only for SGD. All-reduce the gradients before "
                 "optimizer.step().")
        if kind != "adam":  # SGD with or without momentum: a scaled gradient is a scaled step
            for c, message in [
                (world, "your step is as many times too large as there are processes: all_reduce sums "
                        "the gradients; divide the sum by dist.get_world_size() to average them."),
                (1 / world, f"your step is {world} times too small: the gradient is divided by the number "
                            "of processes twice (the loss divided by it, and the sum divided again?)."),
                (world / 2, "your processes divide the summed gradients by 2 whatever their number: "
                            "divide by dist.get_world_size()."),
                (rows, "your gradient is the one of the summed loss over the rows: average each share's "
                       "loss (loss_fn returns the mean), then average the processes' gradients."),
                (rows * world, "your gradient is the one of the summed loss of all rows: loss_fn returns "
                               "each share's mean; all-reduce its gradients and divide by the world size."),
            ]:
                if c != 1 and close(got, _single_process(seed, kind, batches, scale=c), rtol=1e-4, atol=1e-5):
                    hint(message)
        hint(f"with {what}, your copies agree but do not train like one process on the whole batch "
             "(the average of the shares' gradients is the gradient of the whole batch's mean loss).",
             generic=True)
    passed("your processes train exactly like one process on the whole batch, with SGD, momentum "
           "and Adam, on 2 and 3 processes.")


# --------------------------------------------------------------------- A.3 gradient accumulation
class _Recorder(nn.Module):
    """The check's model: a small MLP (no dropout) whose forward notes, in a plain string (the
    grader copies plain attributes back), the number of rows and whether autocast was on and in
    which dtype: "rows:autocast-dtype;"."""

    def __init__(self, seed: int, overflow: bool = False):
        super().__init__()
        self.net = _model(seed)
        self.log_text = ""
        self.overflow = overflow  # the first layer's gradients 1e38 times too large: scaled, they overflow

    def forward(self, x):
        on = torch.is_autocast_enabled("cpu")
        self.log_text += f"{x.shape[0]}:{str(torch.get_autocast_dtype('cpu')) if on else 'off'};"
        h = _GradTimes.apply(self.net[0](x), self, 1e38 if self.overflow else 1.0)
        return self.net[2](self.net[1](h))

    def under_autocast(self) -> list[str]:
        """What ran under autocast besides the forward pass ("backward", "step", "update"), as noted."""
        return sorted({e[:-3] for e in self.log_text.split(";") if e.endswith("=on")})

    def calls(self) -> list:
        return [e.split(":") for e in self.log_text.split(";")[:-1] if ":" in e]

    def scale_after(self, scaler) -> float:
        """The scale after the student's scaler.update() (noted by :class:`_LoggedScaler`, so that it
        comes back from the grader's kernel with the model), else the scaler's own."""
        noted = [e for e in self.log_text.split(";") if e.startswith("scale=")]
        return float(noted[-1][6:]) if noted else scaler.get_scale()


class _GradTimes(torch.autograd.Function):
    """The identity, whose backward multiplies the gradient by ``factor`` (1e38: it overflows once
    scaled) and notes in the owner's log whether autocast was on during backward ("backward=on;")."""

    @staticmethod
    def forward(ctx, h, owner, factor):
        ctx.owner, ctx.factor = owner, factor
        return h.view_as(h)

    @staticmethod
    def backward(ctx, g):
        if torch.is_autocast_enabled("cpu"):
            ctx.owner.log_text += "backward=on;"
        return (g * ctx.factor if ctx.factor != 1.0 else g), None, None


class _LoggedScaler(torch.amp.GradScaler):
    """``torch.amp.GradScaler("cpu")`` that notes its scale in the model's log after each update."""

    def __init__(self, owner: nn.Module, init_scale: float):
        super().__init__("cpu", init_scale=init_scale)
        self.owner = owner

    def update(self, new_scale=None):
        if torch.is_autocast_enabled("cpu"):
            self.owner.log_text += "update=on;"
        super().update(new_scale)
        self.owner.log_text += f"scale={self.get_scale()};"


def _micro_batches(seed: int, sizes) -> list:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(n, 4, generator=g), torch.randint(3, (n,), generator=g)) for n in sizes]


def _accumulated(seed, kind, micro, *, mistake=None, amp=None, max_norm=None, scaler=None, overflow=False):
    """The reference step (or one mistake) on a fresh model: returns (weights, returned loss, scaler)."""
    model = _Recorder(seed, overflow)
    opt = _optimizer(kind, model.parameters())
    _stale(model)
    N = sum(len(y) for _, y in micro)
    if mistake != "no zero_grad":
        opt.zero_grad()
    total = 0.0
    for i, (x, y) in enumerate(micro):
        if mistake == "zero_grad inside":
            opt.zero_grad()
        with torch.autocast("cpu", dtype=amp, enabled=amp is not None and mistake != "no autocast"):
            loss = _loss(model, x, y)
        weight = {"mean of means": 1 / len(micro), "summed": 1.0}.get(mistake, len(y) / N)
        scaled = loss * weight
        (scaler.scale(scaled) if scaler is not None and mistake != "no scale" else scaled).backward()
        total += loss.item() * len(y)
        if mistake == "step each":
            opt.step()
            opt.zero_grad()
    if scaler is not None and mistake not in ("no unscale",):
        scaler.unscale_(opt)
    if max_norm is not None:
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if mistake == "update before step":
        scaler.update()
    if mistake != "step each":
        if scaler is not None and mistake != "optimizer step":
            scaler.step(opt)
        else:
            opt.step()
    if scaler is not None and mistake not in ("no update", "update before step"):
        scaler.update()
    return _flat(model.net), total / N, scaler


def _stale(model) -> None:
    """The caller's leftover gradients (a step must start by clearing them)."""
    g = torch.Generator().manual_seed(99)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)


_ACCUMULATION_MISTAKES = [
    ("mean of means", "you averaged the micro-batches' mean losses (each weighs 1 / number of micro-batches): "
                      "with micro-batches of different sizes that weighs their rows unequally. Weight each mean "
                      "loss by its share of the rows, len(y) / N, before backward()."),
    ("summed", "you added the micro-batches' gradients without weighting them: the step's gradient is that of "
               "the mean over all N rows, so scale each micro-batch's mean loss by len(y) / N."),
    ("step each", "you stepped after every micro-batch: accumulate the gradients of all of them, then take ONE "
                  "optimizer step."),
    ("no zero_grad", "the gradients the caller left in .grad were added to yours: call optimizer.zero_grad() "
                     "(or model.zero_grad()) once, before the first backward()."),
    ("zero_grad inside", "you cleared the gradients before every micro-batch, so only the last one counted: clear "
                         "them once, before the loop."),
]


def _returned_loss(got, want, call, how="each micro-batch's mean loss times its number of rows, summed, "
                                         "divided by the total"):
    from ._core import as_number
    if isinstance(got, torch.Tensor):
        hint(f"{call} returned {describe(got)}: the text asks for the loss as a Python float "
             "(loss.item()), which keeps no graph and no tensor alive.")
    value = as_number(got, call)
    if not math.isclose(value, want, rel_tol=1e-4, abs_tol=1e-6):
        hint(f"{call} returned {value:.6g}; expected the mean loss over all the rows of the step, {want:.6g} "
             f"({how}).")


class _State:
    """Grad mode, autocast and torch's global random state around one call of the student's function:
    :meth:`restore` puts back whatever the call changed (so that the checks after it, and the next
    cells, run as they should), then :meth:`check` names the change."""

    def __init__(self):
        self.grad = torch.is_grad_enabled()
        self.rng = torch.get_rng_state()
        self.changed: list[str] = []

    def restore(self) -> None:
        if torch.is_autocast_enabled("cpu"):
            torch.set_autocast_enabled("cpu", False)
            self.changed.append("autocast")
        if torch.is_grad_enabled() != self.grad:
            torch.set_grad_enabled(self.grad)
            self.changed.append("grad")
        if not torch.equal(torch.get_rng_state(), self.rng):
            torch.set_rng_state(self.rng)
            self.changed.append("rng")

    def check(self) -> None:
        if "autocast" in self.changed:
            hint("autocast is still on after your function: use it as a context manager, "
                 "`with torch.autocast('cpu', dtype=dtype):`, around the forward pass only.")
        if "grad" in self.changed:
            hint("your function changed the grad mode it was called in (torch.set_grad_enabled) and left it "
                 "so: leave it as it was.")
        if "rng" in self.changed:
            hint("your function changed torch's global random state (torch.manual_seed, or drawing random "
                 "numbers): a training step with this model draws none, so leave it as it was.")


_ACC_CASES = [  # micro-batch sizes, optimizer, seed
    ((2, 5, 1), "sgd", 40),  # the first micro-batch's share (2/8) is not 1 / number of micro-batches
    ((7,), "sgd", 41),  # one micro-batch: the plain step
    ((1, 1, 1, 1), "momentum", 42),
    ((2, 6, 3), "adam", 43),
    ((4, 4), "sgd", 44),
]


@checker("Exercise A.3")
def accumulation(fn):
    """``fn(model, optimizer, loss_fn, micro_batches) -> float``: one optimizer step on the gradient of
    the mean loss over all the rows of the micro-batches, equal to one step on their concatenation."""
    for sizes, kind, seed in _ACC_CASES:
        micro = _micro_batches(seed, sizes)
        model = _Recorder(seed)
        opt = _optimizer(kind, model.parameters())
        _stale(model)
        given = [(x.clone(), y.clone()) for x, y in micro]
        model.train()
        state = _State()
        try:
            got = fn(model, opt, _loss, given)
        except StudentError as exc:
            state.restore()
            if (sizes, kind, seed) == _ACC_CASES[0]:
                _answers_elsewhere(exc, lambda c: fn(_Recorder(c[2]), _optimizer(c[1], _Recorder(c[2]).parameters()),
                                                      _loss, _micro_batches(c[2], c[0])), _ACC_CASES[1:], None,
                                   f"on micro-batches of {', '.join(map(str, sizes))} rows ({kind})")
            _one_branch_missing(exc, f"on micro-batches of {', '.join(map(str, sizes))} rows ({kind})")
        where = f"on micro-batches of {', '.join(map(str, sizes))} rows ({kind})"
        state.restore()
        state.check()
        if any(not (torch.equal(a, c) and torch.equal(b, d)) for (a, b), (c, d) in zip(given, micro)):
            hint("your function changed the micro-batches it was given: leave x and y as they are.")
        if not model.training:
            hint("the model was left in evaluation mode: an accumulated step changes no mode.")
        want_w, want_loss, _ = _accumulated(seed, kind, micro)
        # the reference: one step on the whole batch, independent of the accumulation written above
        whole = _Recorder(seed)
        whole_opt = _optimizer(kind, whole.parameters())
        whole_opt.zero_grad()
        _loss(whole, torch.cat([x for x, _ in micro]), torch.cat([y for _, y in micro])).backward()
        whole_opt.step()
        assert close(want_w, _flat(whole.net), rtol=1e-5, atol=1e-6)
        rows = [int(c[0]) for c in model.calls()]
        if sorted(rows) == [sum(sizes)] and len(sizes) > 1:
            hint("you ran the model on all the rows at once: the point of accumulation is to run one "
                 "micro-batch at a time (the whole batch would not fit), and add their gradients.")
        got_w = _flat(model.net)
        if not torch.isfinite(got_w).all():
            hint(f"{where}, the weights became inf or NaN.")
        if not close(got_w, want_w, rtol=1e-4, atol=1e-6):
            for mistake, message in _ACCUMULATION_MISTAKES:
                if close(got_w, _accumulated(seed, kind, micro, mistake=mistake)[0], rtol=1e-4, atol=1e-6):
                    hint(f"{where}: {message}")
            if close(got_w, _flat(_Recorder(seed).net)):
                hint(f"{where}, the weights did not change: take one optimizer step after the micro-batches.")
            hint(f"{where}, the weights after your step differ from one step on the whole batch of "
                 f"{sum(sizes)} rows.", generic=True)
        _returned_loss(got, want_loss, "my_accumulated_step(...)")
    passed("one step on micro-batches of 1 to 7 rows equals one step on the whole batch, with SGD, momentum "
           "and Adam, the caller's old gradients cleared, and the mean loss over all rows returned.")


# --------------------------------------------------------------------- A.4 a mixed-precision step
_AMP_MISTAKES = [
    ("update before step", "you called scaler.update() before scaler.step(optimizer): update() forgets "
                           "that the gradients were unscaled, so the step divides them by the scale a second "
                           "time. Call scaler.step(optimizer), then scaler.update()."),
    ("no scale", "the loss was not scaled before backward(): call scaler.scale(loss).backward(), or "
                 "scaler.unscale_ divides gradients that were never multiplied."),
    ("no unscale", "you clipped the scaled gradients: call scaler.unscale_(optimizer) before "
                   "clip_grad_norm_, so that max_norm applies to the true gradient."),
    ("optimizer step", "you called the optimizer's step() yourself: scaler.step(optimizer) skips the step when "
                       "a gradient overflowed to inf or NaN (and unscales if you did not)."),
    ("no update", "scaler.update() is missing: after an overflow the scale must be halved (and grown after a "
                  "run of good steps), once per step, after scaler.step."),
    ("no autocast", "the forward pass ran without autocast: run model(x) and the loss under "
                    "torch.autocast('cpu', dtype=dtype)."),
    ("no zero_grad", _ACCUMULATION_MISTAKES[3][1]),
]

_AMP_CASES = [  # rows, optimizer, seed, initial scale (None: a gradient overflows), max_norm
    (5, "sgd", 50, 2.0 ** 10, 0.5),
    (1, "momentum", 51, 2.0 ** 16, 10.0),
    (7, "adam", 52, 2.0 ** 8, 1.0),
    (4, "sgd", 54, 2.0 ** 12, 1e6),  # the clip does not bind: a wrong factor in the gradient shows
    (3, "sgd", 53, None, 1.0),  # a scaled gradient overflows: the step must be skipped, the scale halved
]


@checker("Exercise A.4")
def amp_step(fn):
    """``fn(model, opt, scaler, loss_fn, x, y, max_norm, dtype=torch.bfloat16) -> float``: one training
    step in mixed precision: forward under autocast, scaled backward, unscale_, clip, scaler.step,
    scaler.update; returns the loss."""
    ambiguous = None
    for rows, kind, seed, scale, max_norm in _AMP_CASES:
        micro = _micro_batches(seed, (rows,))
        overflow = scale is None
        if overflow:
            scale = 2.0 ** 16
        model = _Recorder(seed, overflow)
        opt = _optimizer(kind, model.parameters())
        _stale(model)
        scaler = _LoggedScaler(model, scale)
        where = (f"on a batch of {rows} rows ({kind}, initial scale {scale:g}"
                 + (", where a scaled gradient overflows to inf" if overflow else "") + ")")
        model.train()
        opt.register_step_pre_hook(
            lambda o, a, k: setattr(model, "log_text", model.log_text + "step=on;")
            if torch.is_autocast_enabled("cpu") else None)
        state = _State()
        try:
            got = fn(model, opt, scaler, _loss, micro[0][0].clone(), micro[0][1].clone(), max_norm, torch.bfloat16)
        except StudentError as exc:
            state.restore()
            if seed == _AMP_CASES[0][2]:
                raise
            _one_branch_missing(exc, where)
        state.restore()
        state.check()
        if not model.training:
            hint("the model was left in evaluation mode: a training step changes no mode.")
        calls = model.calls()
        got_scale = model.scale_after(scaler)
        if not calls:
            hint("your function never called the model.")
        if any(dtype == "off" for _, dtype in calls):
            hint(dict(_AMP_MISTAKES)["no autocast"])
        if any(dtype != str(torch.bfloat16) for _, dtype in calls):
            hint("the forward pass ran under autocast in another dtype: use the `dtype` argument "
                 "(torch.autocast('cpu', dtype=dtype)).")
        if model.under_autocast():
            hint(f"{' and '.join(model.under_autocast())} ran under autocast: only the forward pass and the "
                 "loss belong inside `with torch.autocast(...)`; backward(), the optimizer's step and the "
                 "scaler's calls come after the block.")
        ref_scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        want_w, want_loss, _ = _accumulated(seed, kind, micro, amp=torch.bfloat16, max_norm=max_norm,
                                            scaler=ref_scaler, overflow=overflow)
        got_w = _flat(model.net)
        if not (close(got_w, want_w, rtol=1e-4, atol=1e-6) and got_scale == ref_scaler.get_scale()):
            matches = []
            for mistake, message in _AMP_MISTAKES:
                s = torch.amp.GradScaler("cpu", init_scale=scale)
                try:
                    w, _, s = _accumulated(seed, kind, micro, mistake=mistake, amp=torch.bfloat16,
                                           max_norm=max_norm, scaler=s, overflow=overflow)
                except (AssertionError, RuntimeError):  # a mistake the scaler itself refuses
                    continue
                if close(got_w, w, rtol=1e-4, atol=1e-6, equal_nan=True) and got_scale == s.get_scale():
                    matches.append(message)
            if len(matches) == 1:
                hint(f"{where}: {matches[0]}")
            if len(matches) > 1:  # two mistakes give this step (a binding clip hides which): a later case tells
                ambiguous = ambiguous or (where, matches)
                continue
            if not torch.isfinite(got_w).all():
                hint(f"{where}, the weights became inf or NaN: a step whose gradients overflowed must be "
                     "skipped, which scaler.step(optimizer) does.")
            if got_scale != ref_scaler.get_scale():
                hint(f"{where}, the scaler's scale is {got_scale:g} after your step, expected "
                     f"{ref_scaler.get_scale():g}: scaler.update() once, after scaler.step(optimizer).")
            hint(f"{where}, the weights after your step differ from the reference mixed-precision step.",
                 generic=True)
        if not overflow:
            _returned_loss(got, want_loss, "my_amp_step(...)", "the unscaled loss of the forward pass, .item()")
    if ambiguous:
        hint(f"{ambiguous[0]}, your step equals one of these mistakes: " + " Or: ".join(ambiguous[1]))
    passed("autocast around the forward pass, the scaled loss, unscale_ before clipping, scaler.step and "
           "scaler.update: the reference step under SGD, momentum and Adam, and a step skipped (scale halved) "
           "on overflow.")
