#!/usr/bin/env bash
# Builds the book into _build/html from the stored (nbval-checked) notebook outputs, then prints
# it into _build/html/pdf/ (scripts/build_pdf.py: the whole book, and an instructors' edition with
# the solutions; every page's footer links both).
# Warnings are errors (-W) and every cross-reference must resolve (-n).
#   bash scripts/build_book.sh            # HTML and PDF
#   BOOK_PDF=0 bash scripts/build_book.sh # HTML only
# The PDF needs Chromium and fonts for the non-Latin text of chapter 11: as root, the set-up below
# installs Debian's chromium, fonts-wqy-microhei and fonts-noto-color-emoji; as another user it
# prints the apt-get command (or set CHROMIUM to another Chrome/Chromium). Without a browser the PDF
# step is skipped with a message, except in CI (CI=true), where it fails.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${BOOK_PDF:-1}" != "0" ]; then bash scripts/setup.sh --pdf; else bash scripts/setup.sh; fi
.venv/bin/jupyter-book build . --path-output . -W -n --keep-going "$@"
if [ "${BOOK_PDF:-1}" != "0" ]; then
  chromium_path=${CHROMIUM:-/usr/bin/chromium}
  if [ -x "$chromium_path" ]; then
    .venv/bin/python scripts/build_pdf.py --html _build/html
  elif [ "${CI:-}" = "true" ]; then
    echo "book: no browser at $chromium_path to print the PDF (set CHROMIUM)" >&2
    exit 1
  else
    echo "book: PDF skipped: no browser at $chromium_path (sudo bash scripts/setup.sh --pdf)" >&2
  fi
fi
echo "book: open _build/html/index.html"
