"""Devices, mixed precision and data parallelism for :mod:`companion.train` (the appendix,
*Beyond the laptop*).

* :func:`resolve_device`: ``"auto"`` picks CUDA, then Apple's MPS, then the CPU.
* :func:`autocast_dtype`: which reduced precision the matrix products use on a device (bfloat16
  on GPUs that have it, float16 with a gradient scaler on older ones, float32 on the CPU).
* :func:`init_from_env` / :func:`shutdown`: join the process group that ``torchrun`` describes in
  environment variables (NCCL between GPUs, gloo between CPU processes).
* :func:`rank`, :func:`world_size`, :func:`all_mean`, :func:`agree`: the few collective operations
  the trainer needs.

Data parallelism in one paragraph: every process holds a full copy of the model, computes the loss
and its gradient on its own share of the batch, and ``DistributedDataParallel`` averages the
gradients across processes during the backward pass. Every copy then takes the same optimizer
step from the same averaged gradient, so the copies stay identical, and ``N`` processes with
``b`` windows each train exactly like one process with ``N b`` windows (up to the rounding of
the sums).
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist

__all__ = ["resolve_device", "autocast_dtype", "PRECISIONS", "init_from_env", "shutdown", "is_distributed",
           "rank", "world_size", "all_mean", "agree"]

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
