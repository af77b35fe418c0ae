"""Shared by tests/test_capability_default.py and tests/test_capability_avx2.py (two files, so that
pytest-xdist's --dist loadfile runs the two halves of the sweep on both workers)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("capability_sweep", ROOT / "scripts" / "capability_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
sys.modules["capability_sweep"] = sweep  # dataclasses look their module up there
_spec.loader.exec_module(sweep)

NOTEBOOKS = [ROOT / "book" / f"{name}.ipynb" for name in sweep.SWEPT]


#: Notebooks that run PyTorch's fused bfloat16 attention (the appendix's autocast measurements).
_BFLOAT16_ATTENTION = {"appendix_beyond_the_laptop"}

_PROBE = """
import torch, torch.nn.functional as F
q = torch.randn(8, 4, 128, 32, dtype=torch.bfloat16, requires_grad=True)
F.scaled_dot_product_attention(q, q, q, is_causal=True).sum().backward()
"""


def _fused_bfloat16_refused(capability: str) -> str | None:
    """PyTorch's own error when its fused bfloat16 attention cannot run under ``capability`` here, else None.

    On a CPU with AVX-512, PyTorch 2.13 run with ATEN_CPU_CAPABILITY=avx2 or default refuses that kernel
    ("pack_vnni2 is only supported when avx512 is supported"); a real AVX2 CPU runs it. The appendix then
    measures the memory of another kernel (the companion falls back to the math kernel), which is not
    what an AVX2 machine would print."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"} | {"ATEN_CPU_CAPABILITY": capability}
    proc = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300)
    return proc.stderr.strip().splitlines()[-1] if proc.returncode and "pack_vnni" in proc.stderr else None


def check(notebook: Path, capability: str, threads: int) -> None:
    if notebook.stem in _BFLOAT16_ATTENTION:
        refused = _fused_bfloat16_refused(capability)
        if refused:
            pytest.skip(f"this CPU cannot emulate {capability} for bfloat16 attention: {refused}")
    run = sweep.run_one(notebook, capability, threads)
    print(f"\n{run.row()}")
    assert run.passed, (f"{notebook.name} fails nbval under ATEN_CPU_CAPABILITY={capability} with {threads} "
                        f"thread(s): its stored outputs depend on this CPU's vector kernels\n{run.report}")
