"""Run nbval over notebooks under other CPU kernels and thread counts of this machine.

The stored outputs of the book were computed on one CPU. Another CPU runs other vector kernels
(AVX-512, AVX2, or none), which change float32 results in the last digits; a training run or a
probe can turn such a difference into a different printed figure. PyTorch lets one machine run the
kernels of another: ``ATEN_CPU_CAPABILITY=default`` (no vector instructions), ``=avx2``, ``=avx512``
(where the CPU has it); ``MKL_ENABLE_INSTRUCTIONS=AVX2`` does the same for MKL. This script runs the
test command's nbval check of each notebook under each setting and prints a table::

    .venv/bin/python scripts/capability_sweep.py                 # the training and probing chapters
    .venv/bin/python scripts/capability_sweep.py --threads 1 2   # ... with 1 and with 2 threads
    .venv/bin/python scripts/capability_sweep.py book/10_masked_language_model.ipynb --capabilities avx2

It exits with 1 when any run fails, and prints the failing cells. ``tests/test_capability_*.py``
run two settings of this sweep inside the test command (see there for which).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
#: The chapters whose outputs come from training, probing or long float reductions.
SWEPT = ["07_training_a_language_model", "09_encoder_decoder", "10_masked_language_model",
         "11_tokenization", "12_vision_transformer", "13_modern_decoder", "appendix_beyond_the_laptop"]
#: The environment of scripts/test.sh, in which the stored outputs were made.
TEST_ENV = {"PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "IPYKERNEL_CELL_NAME": "<IPY-INPUT>",
            "OMP_WAIT_POLICY": "PASSIVE", "COMPANION_THREADS": "2"}


def cpu_capabilities() -> list[str]:
    """The ATEN_CPU_CAPABILITY values this CPU can run, from plainest to widest."""
    flags = ""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        pass
    found = ["default"]
    if " avx2" in flags:
        found.append("avx2")
    if " avx512f" in flags and " avx512bw" in flags and " avx512vl" in flags and " avx512dq" in flags:
        found.append("avx512")
    return found


@dataclass
class Run:
    notebook: str
    capability: str
    threads: int
    passed: bool
    seconds: float
    report: str

    def row(self) -> str:
        verdict = "pass" if self.passed else "FAIL"
        return f"{self.notebook:<34} {self.capability:<8} {self.threads:>7} {verdict:>6} {self.seconds:>8.0f}"


def run_one(notebook: Path, capability: str, threads: int, python: str = sys.executable) -> Run:
    """nbval over ``notebook`` (strict, as the test command runs it) under one setting."""
    env = {**os.environ, **TEST_ENV, "ATEN_CPU_CAPABILITY": capability, "COMPANION_THREADS": str(threads),
           "OMP_NUM_THREADS": str(threads)}
    if capability != "avx512":
        env["MKL_ENABLE_INSTRUCTIONS"] = "AVX2"
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_CURRENT_TEST", None)
    cmd = [python, "-m", "pytest", str(notebook), "--nbval", "--nbval-current-env", "--nbval-sanitize-with",
           str(ROOT / "tests" / "nbval_sanitize.cfg"), "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
           "-o", "addopts=", "--tb=short", "-x"]
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    report = done.stdout[-6000:] + done.stderr[-2000:]
    return Run(notebook.stem, capability, threads, done.returncode == 0, seconds, report)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path, help="notebooks (default: the training and probing chapters)")
    parser.add_argument("--capabilities", nargs="+", default=None,
                        help=f"ATEN_CPU_CAPABILITY values (default: all this CPU has: {' '.join(cpu_capabilities())})")
    parser.add_argument("--threads", nargs="+", type=int, default=[2], help="thread counts (default: 2)")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or [BOOK / f"{name}.ipynb" for name in SWEPT]
    capabilities = args.capabilities or cpu_capabilities()
    unknown = sorted(set(capabilities) - {"default", "avx2", "avx512"})
    if unknown:
        parser.error(f"--capabilities: unknown value(s) {unknown}; expected default, avx2 or avx512")
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'notebook':<34} {'kernels':<8} {'threads':>7} {'nbval':>6} {'seconds':>8}")
    runs = []
    for notebook in notebooks:
        for capability in capabilities:
            for threads in args.threads:
                run = run_one(notebook, capability, threads)
                runs.append(run)
                print(run.row(), flush=True)
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    failed = [r for r in runs if not r.passed]
    for run in failed:
        print(f"\n--- {run.notebook} under ATEN_CPU_CAPABILITY={run.capability}, {run.threads} thread(s):")
        print(run.report)
    print(f"\n{len(runs) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
