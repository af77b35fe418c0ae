"""Execute notebooks in place, in the same conditions as the tests, and save their outputs.

    .venv/bin/python scripts/execute_notebooks.py book/01_dot_products.ipynb [more.ipynb ...]
    .venv/bin/python scripts/execute_notebooks.py --all

Run it after editing a chapter, then commit the notebook: nbval compares every stored output with
a fresh run. Cells tagged ``raises-exception`` may raise; any other error stops with a message.

The errors a chapter raises on purpose are stored as one line, ``ValueError: <message>``: the
kernel's full traceback runs through the companion's files and this machine's paths, which a reader
does not need (nbval compares the exception's type and message, never the traceback). Only the
stored copy is trimmed; whoever runs the notebook sees Python's ordinary traceback.

Streams are stored as a terminal would show them: a cell's stdout pieces become one output, its
stderr pieces another, and a line redrawn with carriage returns (a progress bar: one piece per
refresh) keeps only its last frame. Whoever runs the notebook still sees the live bar; the stored
notebook and the book show one box with the finished bar instead of dozens. This is exactly what
nbval does to both sides before comparing (its ``coalesce_streams``), so the verdicts do not change.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
# The same environment as scripts/test.sh (OMP_WAIT_POLICY and COMPANION_THREADS: see there).
ENV = {"PYTHONHASHSEED": "0", "MPLBACKEND": "Agg", "IPYKERNEL_CELL_NAME": "<IPY-INPUT>", "OMP_WAIT_POLICY": "PASSIVE",
       "COMPANION_THREADS": "2"}


def trim_expected_errors(nb) -> int:
    """Store each error of a cell tagged ``raises-exception`` as its one-line message."""
    trimmed = 0
    for cell in nb.cells:
        if cell.cell_type != "code" or "raises-exception" not in cell.metadata.get("tags", []):
            continue
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                out.traceback = [f"{out.ename}: {out.evalue}"]
                trimmed += 1
    return trimmed


_CARRIAGE_RETURN = re.compile(r"^.*\r(?=[^\n])", re.MULTILINE)  # a line up to its last redraw


def collapse_streams(outputs: list) -> list:
    """One stream output per name (stdout, stderr) at the place of its first piece, with each
    carriage-return-redrawn line reduced to its final frame: the same result as nbval's
    ``coalesce_streams`` (tested equal), so that stored and re-run outputs still match. (nbval 0.11
    means to apply backspaces too, but its loop never runs; neither do we, to stay equal.)"""
    merged, first = [], {}
    for out in outputs:
        if out.get("output_type") != "stream":
            merged.append(out)
        elif out["name"] in first:
            first[out["name"]]["text"] += out["text"]
        else:
            out = nbformat.from_dict({**out, "text": out["text"]})
            first[out["name"]] = out
            merged.append(out)
    for out in first.values():
        out["text"] = _CARRIAGE_RETURN.sub("", out["text"])
    return merged


def collapse_all_streams(nb) -> int:
    """Apply :func:`collapse_streams` to every code cell; returns the number of outputs removed."""
    removed = 0
    for cell in nb.cells:
        if cell.cell_type == "code" and cell.get("outputs"):
            before = len(cell.outputs)
            cell.outputs = collapse_streams(cell.outputs)
            removed += before - len(cell.outputs)
    return removed


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    start = time.perf_counter()
    NotebookClient(nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    trim_expected_errors(nb)
    collapse_all_streams(nb)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--all", action="store_true", help="every notebook in book/")
    args = parser.parse_args()
    paths = sorted((ROOT / "book").glob("*.ipynb")) if args.all else args.notebooks
    if not paths:
        parser.error("name notebooks, or --all")
    os.environ.update(ENV)
    for path in paths:
        print(f"{path}: {execute(path.resolve()):.1f} s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
