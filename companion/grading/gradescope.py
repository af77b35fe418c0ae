"""A Gradescope autograder bundle that runs this grader.

``python -m companion.grade --gradescope-bundle autograder.zip`` writes a zip with the two files
Gradescope's autograder expects at its top level:

* ``setup.sh``: installs bubblewrap, a Python >= 3.11 (Gradescope's base image, Ubuntu 22.04, has
  3.10: an existing newer one, else deadsnakes, else uv's standalone Python), a virtual environment
  and the course (``pip install "transformers-built-by-hand[grade] @ git+<course>"``), once, when
  Gradescope builds the autograder's image;
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
#: The distribution's name on the package index (the import name is ``companion``).
DISTRIBUTION = "transformers-built-by-hand"

SETUP = r"""#!/usr/bin/env bash
# Gradescope runs this once, when it builds the autograder's image (Ubuntu 22.04, whose Python is
# 3.10; the course needs 3.11 or later). The route to a supported Python, in order:
#   1. a python3.13, python3.12 or python3.11 already on the image;
#   2. Ubuntu's deadsnakes archive (apt: software-properties-common, then python3.11-venv);
#   3. uv's standalone Python (pip install uv into the system Python, then uv python install 3.11).
# COURSE_SOURCE (default: the course's git repository) and AUTOGRADER_ROOT (default: /autograder)
# may be set to install from a local clone into another folder (the course's tests do, offline);
# COURSE_SKIP_APT=1 skips apt-get.
set -euo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
SOURCE="${{COURSE_SOURCE:-git+{course}}}"
if [ "${{COURSE_SKIP_APT:-0}}" != 1 ]; then
    apt-get update
    apt-get install -y --no-install-recommends bubblewrap ca-certificates git python3 python3-pip
fi
supported() {{ "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }}
PYTHON="${{COURSE_PYTHON:-}}"
if [ -z "$PYTHON" ]; then
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null && supported "$(command -v "$candidate")"; then
            PYTHON="$(command -v "$candidate")"; break
        fi
    done
fi
if [ -z "$PYTHON" ] && [ "${{COURSE_SKIP_APT:-0}}" != 1 ]; then  # 2. deadsnakes
    if apt-get install -y --no-install-recommends software-properties-common gpg-agent \
        && add-apt-repository -y ppa:deadsnakes/ppa && apt-get update \
        && apt-get install -y --no-install-recommends python3.11 python3.11-venv; then
        PYTHON="$(command -v python3.11)"
    fi
fi
if [ -z "$PYTHON" ]; then  # 3. uv's standalone Python
    python3 -m pip install --quiet uv
    python3 -m uv python install 3.11
    PYTHON="$(python3 -m uv python find 3.11)"
fi
supported "$PYTHON" || {{ echo "no Python >= 3.11 could be installed" >&2; exit 1; }}
"$PYTHON" -m venv "$ROOT/venv"
if [ -n "${{COURSE_EXTRA_SITE:-}}" ]; then  # tests only: the dependencies of an offline machine
    echo "$COURSE_EXTRA_SITE" > "$("$ROOT/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/course-extra.pth"
fi
"$ROOT/venv/bin/python" -m pip install ${{COURSE_PIP_OPTIONS:-}} "{distribution}[grade] @ $SOURCE"
"$ROOT/venv/bin/python" -c "import companion.grade"
"""

RUN = r"""#!/usr/bin/env bash
# Gradescope runs this for each submission; the results go to /autograder/results/results.json.
set -uo pipefail
ROOT="${{AUTOGRADER_ROOT:-/autograder}}"
mkdir -p "$ROOT/results"
cd "$ROOT/results"
"$ROOT/venv/bin/python" -m companion.grade "$ROOT/submission" \
    --out "$ROOT/results/gradebook.csv" --gradescope "$ROOT/results/results.json" \
    --jobs 1 --quiet {options}
status=$?
if [ ! -s "$ROOT/results/results.json" ]; then
    echo '{{"score": 0, "output": "The grader could not run; please tell the instructors."}}' \
        > "$ROOT/results/results.json"
fi
exit 0  # the points are in results.json; a file that could not be graded is reported there ($status)
"""


def bundle_files(course: str = COURSE, options: str = "") -> dict[str, str]:
    """The bundle's files and their text."""
    return {"setup.sh": SETUP.format(course=course, distribution=DISTRIBUTION), "run_autograder": RUN.format(options=options)}


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
