#!/usr/bin/env bash
# Builds the book into _build/html from the stored (nbval-checked) notebook outputs.
# Warnings are errors (-W) and every cross-reference must resolve (-n).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/jupyter-book build . --path-output . -W -n --keep-going "$@"
echo "book: open _build/html/index.html"
