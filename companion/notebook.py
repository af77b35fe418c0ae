"""Reproducible set-up shared by every chapter notebook.

Stored notebook outputs are compared by nbval on other machines, so each notebook starts with
:func:`setup`: fixed seeds, a fixed number of threads (a large sum differs in its last digits
between 1 and 2 threads), short printed floats, and a matplotlib style that does not depend on
the reader's configuration.
"""
from __future__ import annotations

import os
import random
import warnings

import numpy as np
import torch

#: Threads used by every notebook; 2 is the CI machine's core count.
THREADS = 2


def setup(seed: int = 0, threads: int = THREADS, precision: int = 4) -> None:
    """Seed Python, NumPy and PyTorch, fix the thread count and the print precision.

    Call it once, in the first code cell of a notebook.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    torch.set_printoptions(precision=precision, sci_mode=False)
    np.set_printoptions(precision=precision, suppress=True)
    import matplotlib

    try:  # in a notebook: figures are stored in the notebook (MPLBACKEND=Agg would show nothing)
        shell = get_ipython()  # type: ignore[name-defined]  # noqa: F821
        shell.run_line_magic("matplotlib", "inline")
        # Error reports are left as they are: a student's own mistake shows a full traceback. The
        # book shows the errors it raises on purpose as one line by another route
        # (scripts/execute_notebooks.py trims the stored tracebacks of cells tagged
        # raises-exception), which never touches a student's kernel.
    except NameError:  # plain Python: draw off-screen
        os.environ.setdefault("MPLBACKEND", "Agg")
    matplotlib.rcdefaults()
    matplotlib.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (6.4, 4.0)})
    # Warnings print the kernel's temporary file names, which differ from run to run.
    warnings.filterwarnings("ignore", category=UserWarning)


#: The first code cell of every chapter: on Colab or in any fresh environment it installs the
#: course (once); where the companion is installed already, as in the book's own environment and
#: in the tests, it does nothing. The book's pages leave it out (tag ``remove-cell``).
INSTALL_CELL = """\
# On Colab or in a fresh environment, install the course's companion package
# first (once); where it is installed already, this cell does nothing.
import importlib.util

if importlib.util.find_spec("companion") is None:
    %pip install --quiet "git+{repository}"
"""


def install_cell_source() -> str:
    """The source of the install cell that opens every chapter notebook."""
    from companion import REPOSITORY

    return INSTALL_CELL.format(repository=REPOSITORY).rstrip("\n")
