"""Shared by tests/test_capability_default.py and tests/test_capability_avx2.py (two files, so that
pytest-xdist's --dist loadfile runs the two halves of the sweep on both workers)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("capability_sweep", ROOT / "scripts" / "capability_sweep.py")
sweep = importlib.util.module_from_spec(_spec)
sys.modules["capability_sweep"] = sweep  # dataclasses look their module up there
_spec.loader.exec_module(sweep)

NOTEBOOKS = [ROOT / "book" / f"{name}.ipynb" for name in sweep.SWEPT]


def check(notebook: Path, capability: str, threads: int) -> None:
    # The appendix runs PyTorch's fused bfloat16 attention, which PyTorch 2.13 refuses on an AVX-512 CPU run
    # under a lower ATEN_CPU_CAPABILITY ("pack_vnni2 is only supported when avx512 is supported"); the
    # companion then falls back to the math kernel, and the appendix's memory cell says so instead of
    # asserting the fused kernel's bytes (companion.multihead.math_fallbacks). No notebook is skipped.
    run = sweep.run_one(notebook, capability, threads)
    print(f"\n{run.row()}")
    assert run.passed, (f"{notebook.name} fails nbval under ATEN_CPU_CAPABILITY={capability} with {threads} "
                        f"thread(s): its stored outputs depend on this CPU's vector kernels\n{run.report}")
