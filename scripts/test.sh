#!/usr/bin/env bash
# Every test: the companion's unit tests, the checks on the book, and nbval over every notebook
# in book/ (strict: each stored output must be reproduced). Extra arguments go to pytest.
#   bash scripts/test.sh           # everything (what CI runs)
#   bash scripts/test.sh --quick   # the unit and checker tests only: no notebooks, no browser, nothing
#                                  # marked slow (no Debian packages needed)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--quick" ]; then
  shift
  bash scripts/setup.sh
  export PYTHONHASHSEED=0 MPLBACKEND=Agg IPYKERNEL_CELL_NAME='<IPY-INPUT>' OMP_WAIT_POLICY=PASSIVE COMPANION_THREADS=2
  exec .venv/bin/python -m pytest tests -m "not slow and not browser" -p no:cacheprovider -n 2 --dist loadfile "$@"
fi
bash scripts/setup.sh --browser
# OMP_WAIT_POLICY=PASSIVE: idle OpenMP threads sleep instead of spinning. With two test workers on
# two cores, spinning threads starve each other (a forward pass measured 100x slower).
# COMPANION_THREADS=2: the thread count the stored outputs were computed with (companion.notebook.setup).
export PYTHONHASHSEED=0 MPLBACKEND=Agg IPYKERNEL_CELL_NAME='<IPY-INPUT>' OMP_WAIT_POLICY=PASSIVE COMPANION_THREADS=2
.venv/bin/python -m pytest tests book \
  --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
  -p no:cacheprovider -n 2 --dist loadfile "$@"
