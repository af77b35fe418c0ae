"""The training and probing chapters reproduce their stored outputs under ATEN_CPU_CAPABILITY=default:
no vector instructions at all, with the thread count the outputs were stored with.
(scripts/capability_sweep.py runs the whole grid by hand.)"""
from __future__ import annotations

import pytest

from capability_sweep_cases import NOTEBOOKS, check


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem[:2] for p in NOTEBOOKS])
def test_outputs_do_not_depend_on_the_cpu(notebook):
    check(notebook, "default", 2)
