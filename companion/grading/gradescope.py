"""A Gradescope autograder bundle that runs this grader.

``python -m companion.grade --gradescope-bundle autograder.zip`` writes a zip with the two files
Gradescope's autograder expects at its top level:

* ``setup.sh``: installs the course (``pip install "companion[grade] @ git+<course>"``) and
  bubblewrap, once, when Gradescope builds the autograder's image;
* ``run_autograder``: for each submission, grades the notebook(s) in ``/autograder/submission``
  with ``python -m companion.grade`` and writes ``/autograder/results/results.json`` in
  Gradescope's format (:func:`companion.grade.gradescope_results`), plus the usual gradebook, JSON
  and log next to it.

Gradescope runs the autograder as root in a container, where user namespaces may not be allowed:
the grader then says so in the submission's log and grades without the sandbox (see
:mod:`companion.grading.sandbox`); one submission per container keeps students apart there.
"""
from __future__ import annotations

import zipfile
from pathlib import Path

COURSE = "https://github.com/transformers-built-by-hand/course"

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image.
set -euo pipefail
apt-get update
apt-get install -y --no-install-recommends bubblewrap python3 python3-venv python3-pip git
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
/autograder/venv/bin/pip install "companion[grade] @ git+{course}"
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for each submission; the results go to /autograder/results/results.json.
set -uo pipefail
mkdir -p /autograder/results
cd /autograder/results
/autograder/venv/bin/python -m companion.grade /autograder/submission \\
    --out /autograder/results/gradebook.csv --gradescope /autograder/results/results.json \\
    --jobs 1 --quiet {options}
status=$?
if [ ! -s /autograder/results/results.json ]; then
    echo '{{"score": 0, "output": "The grader could not run; please tell the instructors."}}' \\
        > /autograder/results/results.json
fi
exit 0  # the points are in results.json; a file that could not be graded is reported there ($status)
"""


def bundle_files(course: str = COURSE, options: str = "") -> dict[str, str]:
    """The bundle's files and their text."""
    return {"setup.sh": SETUP.format(course=course), "run_autograder": RUN.format(options=options)}


def write_bundle(path: Path, course: str = COURSE, options: str = "") -> Path:
    """Write the autograder bundle (a zip, both scripts executable) to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, text in bundle_files(course, options).items():
            info = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            info.external_attr = 0o100755 << 16
            z.writestr(info, text)
    return path
