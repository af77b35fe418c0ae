"""The training and probing chapters reproduce their stored outputs under ATEN_CPU_CAPABILITY=avx2:
the kernels of a CPU with AVX2 and no AVX-512 (the CPU of last round's failure), on one thread.
(scripts/capability_sweep.py runs the whole grid by hand.)"""
from __future__ import annotations

import pytest

from capability_sweep_cases import NOTEBOOKS, check


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_outputs_do_not_depend_on_the_cpu(notebook):
    check(notebook, "avx2", 1)
