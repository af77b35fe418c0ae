"""The outside red team's wrong calls (tests/independent/wrong_calls_outside.py), as a permanent test.

Every case runs in this process, in a fresh namespace made from the cases' prelude, and its outcome is
classified by the runner's own rules (run_wrong_calls_outside.classify, imported, not copied); the hand
verdicts of the cases file decide where they are set. Each case must end CLEAR (a clear error naming
the argument) or OK (a correct result where the call is legitimate).
"""
from __future__ import annotations

import sys
import traceback
import warnings
from pathlib import Path

import pytest

INDEPENDENT = Path(__file__).resolve().parent / "independent"
sys.path.insert(0, str(INDEPENDENT))
import run_wrong_calls_outside as RUNNER  # noqa: E402
import wrong_calls_outside as W  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: see tests/conftest.py


@pytest.fixture(scope="module")
def prelude():
    """The prelude's namespace, run once (its imports are the slow part); each case gets a copy."""
    pytest.importorskip("transformers")  # a third of the cases compare with Hugging Face models
    base: dict = {}
    with warnings.catch_warnings():
        exec(compile(W.PRELUDE, "<prelude>", "exec"), base)
    return base


def _run(case: dict, base: dict) -> dict:
    """The runner's worker, for one case, in this process: the same record it prints."""
    ns = dict(base)
    base["torch"].manual_seed(0)
    out: dict = {"id": case["id"]}
    with warnings.catch_warnings():
        try:
            exec(compile(case["code"], f"<case {case['id']}>", "exec"), ns)
            out["raised"] = None
            r = ns.get("r")
            out["result"] = repr(r)[:300] if r is not None else None
        except Exception as e:  # noqa: BLE001 - classified below, as the runner does
            tb = traceback.extract_tb(e.__traceback__)
            last = tb[-1] if tb else None
            out["raised"] = type(e).__name__
            out["message"] = str(e)[:600]
            out["where"] = f"{last.filename}:{last.lineno}" if last else ""
    return out


@pytest.mark.parametrize("case", W.CASES, ids=[c["id"] for c in W.CASES])
def test_outside_wrong_call_ends_clear_or_ok(case, prelude):
    auto, text = RUNNER.classify(case, _run(case, prelude))
    final = case["verdict"] or auto
    assert final in ("CLEAR", "OK"), f"{case['id']} ({case['why']}): {final}: {text}\n{case['code']}"


def test_every_hand_verdict_is_clear_or_ok_and_names_a_case():
    ids = {c["id"] for c in W.CASES}
    assert len(ids) == len(W.CASES) == 229
    assert set(W.VERDICTS) <= ids
    assert {v for v, _ in W.VERDICTS.values()} <= {"CLEAR", "OK"}
