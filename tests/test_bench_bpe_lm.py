"""The README's command for chapter 11's comparison runs as printed, on a tiny budget.

The README prints one command per seed (``bench_bpe_lm.py ... --control --seeds $s --out ...``);
chapter 11 records its figures. This test takes that line from the README itself, so that a change
of flags in one place and not the other fails here, shrinks only the budget and the merges, and runs
it as a subprocess. It checks what the chapter reads from the output: three models per seed, the
control's window equal to the characters that 128 BPE tokens cover, finite bits per character, and
the paired differences.
"""
from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def readme_command() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = [line for line in text.splitlines() if "benchmarks/bench_bpe_lm.py" in line and "--control" in line]
    assert len(lines) == 1, f"expected one bench_bpe_lm.py command with --control in the README, found {lines}"
    match = re.search(r"do (.*) & done", lines[0])
    assert match, f"the README's loop over seeds changed shape: {lines[0]}"
    return shlex.split(match.group(1))


@pytest.mark.slow
def test_the_readme_command_runs_and_writes_three_models(tmp_path):
    argv = readme_command()
    assert argv[0] == ".venv/bin/python" and argv[1] == "benchmarks/bench_bpe_lm.py"
    for flag, value in (("--budget", "2"), ("--merges", "8"), ("--seeds", "0"), ("--out", str(tmp_path / "r.json"))):
        i = argv.index(flag)
        argv[i + 1] = value
    argv[0] = sys.executable
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "0"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads((tmp_path / "r.json").read_text())
    names = list(out["results"])
    assert names[0] == "characters" and names[1] == "BPE 8 merges" and len(names) == 3
    chars, bpe, control = (out["results"][n][0] for n in names)
    assert control["context"] == round(128 * bpe["chars_per_token"]) > 128
    assert names[2] == f"characters, {control['context']}-char window"
    for run in (chars, bpe, control):
        assert run["seed"] == 0 and run["steps"] >= 1
        # barely trained: near a uniform guess over the vocabulary, never NaN
        assert math.isfinite(run["bits_per_char"]) and 1 < run["bits_per_char"] < 12
    assert set(out["paired"]) == {f"{names[1]} minus characters", f"{names[2]} minus characters",
                                  f"{names[1]} minus {names[2]}"}
    got = out["paired"][f"{names[1]} minus characters"][0]
    assert got == pytest.approx(bpe["bits_per_char"] - chars["bits_per_char"], abs=1e-12)
    assert "bits/char" in proc.stdout
