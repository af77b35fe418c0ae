"""Devices, mixed precision and data parallelism for :mod:`companion.train` (the appendix,
*Beyond the laptop*).

* :func:`resolve_device`: ``"auto"`` picks CUDA, then Apple's MPS, then the CPU.
* :func:`autocast_dtype`: which reduced precision the matrix products use on a device (bfloat16
  on GPUs that have it, float16 with a gradient scaler on older ones, float32 on the CPU).
* :func:`init_from_env` / :func:`shutdown`: join the process group that ``torchrun`` describes in
  environment variables (NCCL between GPUs, gloo between CPU processes).
* :func:`rank`, :func:`world_size`, :func:`all_mean`, :func:`agree`: the few collective operations
  the trainer needs.
* :func:`activation_bytes`: the memory a GPT's blocks keep for the backward pass, from the shapes.
* :func:`launch`: run a function of a notebook on several CPU processes joined by gloo (the
  appendix's data parallelism by hand), without ``torchrun``.

Data parallelism in one paragraph: every process holds a full copy of the model, computes the loss
and its gradient on its own share of the batch, and ``DistributedDataParallel`` averages the
gradients across processes during the backward pass. Every copy then takes the same optimizer
step from the same averaged gradient, so the copies stay identical, and ``N`` processes with
``b`` windows each train exactly like one process with ``N b`` windows (up to the rounding of
the sums).
"""
from __future__ import annotations

import inspect
import os
import socket
import tempfile
import traceback
import types
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.distributed as dist

__all__ = ["resolve_device", "autocast_dtype", "PRECISIONS", "init_from_env", "shutdown", "is_distributed",
           "rank", "world_size", "all_mean", "agree", "launch", "lm_loss", "activation_bytes"]

#: Values of ``TrainConfig.precision`` and ``--precision``.
PRECISIONS = ("auto", "float32", "bf16", "fp16")


def resolve_device(device: str | torch.device = "auto", *, local_rank: int | None = None) -> torch.device:
    """The device to train on.

    ``"auto"`` picks CUDA if a GPU is visible, then MPS (Apple silicon), then the CPU. ``"cuda"``
    in a multi-process run means this process's own GPU, ``cuda:<local_rank>``. A device that
    this PyTorch cannot use raises ``ValueError`` saying what to do instead.

    Shapes: none (a string in, a ``torch.device`` out).
    """
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise TypeError(f"`device` must be a string such as 'auto', 'cpu', 'cuda' or 'mps' (got {type(device).__name__})")
    if device == "auto":
        if torch.cuda.is_available():
            device = "cuda"
        elif torch.backends.mps.is_available():
            device = "mps"
        else:
            device = "cpu"
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ValueError(f"`device` must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps' (got {device!r})") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"`device` is {device!r} but this PyTorch sees no CUDA GPU "
                             f"(torch.cuda.is_available() is False); use device='auto' or 'cpu'")
        if dev.index is None:
            dev = torch.device("cuda", local_rank if local_rank is not None else torch.cuda.current_device())
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"`device` is {device!r} but MPS is not available here "
                             f"(torch.backends.mps.is_available() is False); use device='auto' or 'cpu'")
    elif dev.type != "cpu":
        raise ValueError(f"`device` must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps' (got {device!r})")
    return dev


def autocast_dtype(device_type: str, precision: str = "auto", *, capability: tuple[int, int] | None = None) -> torch.dtype | None:
    """The dtype of autocast's matrix products, or None for plain float32.

    ``precision="auto"``: on CUDA, bfloat16 if the GPU computes in it natively (compute capability
    8.0 or later: A100, H100, RTX 30xx and newer), else float16 (which then needs a gradient
    scaler, see :class:`torch.amp.GradScaler`); float32 on the CPU (whose bfloat16 is slower unless
    it has bf16 matrix units) and on MPS (as nanoGPT). ``"float32"``, ``"bf16"``, ``"fp16"`` ask
    for one explicitly. ``capability`` is the CUDA compute capability (read from the GPU when
    None); it exists so that the rule can be tested without a GPU.

    Shapes: none (strings in, a dtype out).
    """
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {PRECISIONS} (got {precision!r})")
    if precision == "float32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if precision == "fp16":
        if device_type == "cpu":
            raise ValueError("`precision='fp16'` needs a GPU (float16 autocast with a gradient scaler); "
                             "on the CPU use 'float32' or 'bf16'")
        return torch.float16
    if device_type != "cuda":
        return None
    if capability is None:
        capability = torch.cuda.get_device_capability()
    return torch.bfloat16 if tuple(capability) >= (8, 0) else torch.float16


def activation_bytes(batch: int, context: int, d_model: int, n_heads: int, n_layers: int,
                     bytes_per_number: int = 4) -> int:
    """The bytes that ``n_layers`` pre-norm blocks of the course's GPT keep for the backward pass.

    Per layer and token, in numbers: the block's input and LayerNorm 1's output (``2 d``) with its
    mean and 1/sigma (2); queries, keys and values (``3 d``); the attention's output (``d``) and,
    from the fused attention, one logsumexp per head (``h``); the residual sum and LayerNorm 2's
    output (``2 d``) with its mean and 1/sigma (2); the feed-forward hidden values before and after
    the GELU (``4 d + 4 d``): ``16 d + h + 4``. Not counted: the embeddings, the final LayerNorm
    and the logits (outside the blocks), and the companion's concatenated query-key-value weight
    (``3 d^2`` numbers a layer, whatever the batch: see the appendix).

    Shapes: integers in, an integer out.
    """
    return n_layers * batch * context * (16 * d_model + n_heads + 4) * bytes_per_number


# --------------------------------------------------------------------------- processes

_control = None  # a gloo group for small CPU-side agreements when the main group is NCCL


def is_distributed() -> bool:
    """True inside an initialized process group of more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    """This process's number, 0 to ``world_size() - 1`` (0 outside a process group)."""
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    """The number of processes training together (1 outside a process group)."""
    return dist.get_world_size() if is_distributed() else 1


def init_from_env(device: str = "auto") -> torch.device:
    """Join the process group described by ``torchrun``'s environment variables and return this
    process's device; without them (a plain ``python -m companion.train``) just resolve ``device``.

    ``torchrun --nproc_per_node N`` starts N copies of the program with ``RANK``, ``LOCAL_RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set. GPUs talk through NCCL (process ``r``
    on a machine uses GPU ``LOCAL_RANK``), CPU processes through gloo.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or "RANK" not in os.environ:
        return resolve_device(device)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank=local_rank)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
    _control_group()  # every process creates it now, together (creating a group is collective)
    return dev


def shutdown() -> None:
    """Leave the process group (every process calls it at the end of the run)."""
    global _control
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    _control = None


def _control_group():
    """The group for :func:`agree`: the main group if it is gloo, else an extra gloo group, so that
    agreeing on a Python number never waits for a GPU."""
    global _control
    if _control is None:
        _control = dist.group.WORLD if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")
    return _control


def all_mean(x: torch.Tensor) -> torch.Tensor:
    """The mean of ``x`` over all processes (``x`` itself in a single process). On GPUs the
    reduction is queued on the device: nothing waits for it here.

    Shapes: any -> the same.
    """
    if not is_distributed():
        return x
    x = x.detach().clone()
    dist.all_reduce(x, op=dist.ReduceOp.SUM)  # gloo has no AVG
    return x / dist.get_world_size()


def agree(value: float) -> float:
    """Process 0's ``value`` on every process (``value`` itself in a single process). Used for the
    clock of a time-limited run: every process must use the same learning rate and stop at the
    same step, and their clocks differ slightly.

    Shapes: a Python float in and out.
    """
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.float64)
    dist.broadcast(t, src=0, group=_control_group())
    return t.item()


# --------------------------------------------------------------------- processes from a notebook

def lm_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean cross-entropy of a GPT on windows ``x`` with targets ``y`` (a function that
    :func:`launch` can send to its processes).

    Shapes: x, y (B, T) -> a scalar.
    """
    return model(x, y)[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _portable(fn: Callable[..., Any], depth: int = 0) -> tuple[bytes, str, list, tuple | None]:
    """``(code, name, imports, defaults)``: enough to build ``fn`` again in a new process.

    A function defined in a notebook cannot be imported by another process, so its compiled code
    travels (``marshal``: the same Python reads it back in the process it spawns), and each global
    name it uses that is a module (``torch``) or a function or class of an importable module
    (``DistributedDataParallel``) is imported again there; a function of the same notebook that it
    calls travels the same way. Other globals (a number defined in another cell) are not carried:
    pass them as arguments.
    """
    import marshal

    if not inspect.isfunction(fn):
        raise TypeError(f"`fn` must be a function defined with def (got {type(fn).__name__})")
    if fn.__closure__:
        raise ValueError(f"{fn.__name__} uses variables of an enclosing function; define it at the top "
                         "level of a cell or a module")
    imports: list = []
    for name in fn.__code__.co_names:
        if name not in fn.__globals__:
            continue
        value = fn.__globals__[name]
        if inspect.isfunction(value) and value.__module__ == fn.__module__ and value is not fn and depth < 8:
            imports.append((name, None, _portable(value, depth + 1)))  # another function of the notebook
        elif isinstance(value, types.ModuleType):
            imports.append((name, value.__name__, None))
        elif (getattr(value, "__module__", "__main__") not in ("__main__", None)
              and "<" not in getattr(value, "__qualname__", "<")):
            imports.append((name, value.__module__, value.__qualname__))
    return marshal.dumps(fn.__code__), fn.__name__, imports, fn.__defaults__


def _launched(rank_: int, world: int, port: int, fn: tuple, folder: str) -> None:
    """The entry point of each process that :func:`launch` starts (importable: spawn-safe)."""
    import importlib
    import marshal

    out = Path(folder)
    try:
        torch.set_num_threads(1)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank_),
                          WORLD_SIZE=str(world), LOCAL_RANK=str(rank_))
        namespace: dict[str, Any] = {"__name__": "__launched__", "__builtins__": __builtins__}

        def build(portable: tuple) -> Any:
            code, name, imports, defaults = portable
            for alias, module, what in imports:
                if module is None:  # another function of the notebook
                    namespace[alias] = build(what)
                    continue
                value: Any = importlib.import_module(module)
                for part in what.split(".") if what else ():
                    value = getattr(value, part)
                namespace[alias] = value
            return types.FunctionType(marshal.loads(code), namespace, name, defaults)

        function = build(fn)
        args = torch.load(out / "args.pt", weights_only=False)[rank_]
        dist.init_process_group("gloo", rank=rank_, world_size=world)
        try:
            function(*args, dist)
        finally:
            dist.destroy_process_group()
        torch.save(args, out / f"rank{rank_}.pt")
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        (out / f"rank{rank_}.error").write_text(traceback.format_exc())
        raise SystemExit(1)


def launch(fn: Callable[..., Any], args: Sequence[tuple], *, timeout: float = 300) -> list[tuple]:
    """Run ``fn`` on ``len(args)`` CPU processes joined by gloo, as ``torchrun`` would.

    Process ``r`` calls ``fn(*args[r], torch.distributed)`` after joining the process group
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` set as ``torchrun`` sets them),
    with one thread. The processes are *spawned* (a fresh Python each, as on macOS and Windows),
    so this works from a notebook on any system: ``fn`` travels as its compiled code and is built
    again in each process (see :func:`_portable`), the arguments are pickled with ``torch.save``
    (a model and its optimizer in one tuple stay linked). Returns each process's arguments as
    ``fn`` left them: a model trained in place comes back trained. An error in any process is
    raised here with that process's traceback.
    """
    import multiprocessing

    if not args:
        raise ValueError("`args` must hold one tuple of arguments per process (got none)")
    portable = _portable(fn)
    world, port = len(args), _free_port()
    with tempfile.TemporaryDirectory() as folder:
        torch.save([tuple(a) for a in args], Path(folder) / "args.pt")
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=_launched, args=(r, world, port, portable, folder)) for r in range(world)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
        errors = sorted(Path(folder).glob("rank*.error"))
        if errors:
            raise RuntimeError(f"process {errors[0].stem[4:]} failed:\n{errors[0].read_text()}")
        if any(p.exitcode != 0 for p in procs):
            raise RuntimeError(f"the processes ended with codes {[p.exitcode for p in procs]} "
                               f"(a timeout of {timeout} s, or killed)")
        return [torch.load(Path(folder) / f"rank{r}.pt", weights_only=False) for r in range(world)]
