"""Records how long nbval takes to run each notebook, for the instructors' page.

When the tests run notebooks (``scripts/test.sh`` runs nbval over book/), the time of every cell
(set-up, run, tear-down, so kernel start included) is summed per notebook and written to
``_build/notebook_times.json``: ``{"book/01_dot_products.ipynb": {"seconds": 4.2, "cells": 12,
"measured": "2026-11-22T01:30:00+00:00", "threads": 2}}``. Notebooks not run this time keep their
earlier entry. ``python -m companion.student --times`` writes these figures into
book/instructors.md. Under pytest-xdist the controller process receives every worker's reports
and writes the file once.
"""
from __future__ import annotations

import json
import os
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TIMINGS = ROOT / "_build" / "notebook_times.json"


class NotebookTimes:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cells: dict[str, set[str]] = defaultdict(set)
        self.failed: set[str] = set()

    def pytest_runtest_logreport(self, report) -> None:
        path = report.nodeid.split("::")[0]
        if not path.endswith(".ipynb"):
            return
        self.seconds[path] += report.duration
        self.cells[path].add(report.nodeid)
        if report.failed:
            self.failed.add(path)

    def pytest_sessionfinish(self, session) -> None:
        if hasattr(session.config, "workerinput") or not self.seconds:
            return  # an xdist worker: the controller writes the file
        try:
            times = json.loads(TIMINGS.read_text()) if TIMINGS.is_file() else {}
        except (OSError, ValueError):
            times = {}
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        for path, seconds in self.seconds.items():
            times[path] = {
                "seconds": round(seconds, 1),
                "cells": len(self.cells[path]),
                "passed": path not in self.failed,
                "measured": now,
                "cpus": os.cpu_count(),
            }
        TIMINGS.parent.mkdir(parents=True, exist_ok=True)
        TIMINGS.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")


def pytest_configure(config) -> None:
    # Registered as a plugin (not a conftest hook) so that it also sees the notebooks in book/,
    # which lie outside this folder.
    if not config.pluginmanager.has_plugin("course-notebook-times"):
        config.pluginmanager.register(NotebookTimes(), "course-notebook-times")


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a module of tiny models: faster, and on a busy 2-core machine far
    faster (a second thread waits for a core for longer than the product takes)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
