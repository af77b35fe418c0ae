"""Reproducible set-up shared by every chapter notebook.

Stored notebook outputs are compared by nbval on other machines, so each notebook starts with
:func:`setup`: fixed seeds, short printed floats, and a matplotlib style that does not depend on
the reader's configuration. The thread count is the reader's own (see :func:`threads_wanted`):
the book's scripts pin it to :data:`THREADS` with ``COMPANION_THREADS``, because a large sum
differs in its last digits between 1 and 2 threads.
"""
from __future__ import annotations

import os
import random
import warnings

import numpy as np
import torch

#: Threads the book's stored outputs were computed with (scripts/test.sh and
#: scripts/execute_notebooks.py set ``COMPANION_THREADS`` to this).
THREADS = 2
#: Environment variables that set the thread count, in the order :func:`threads_wanted` reads them.
THREAD_VARIABLES = ("COMPANION_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def threads_wanted(threads: int | None = None, environ=None) -> int | None:
    """The thread count ``setup`` sets: ``threads`` if given, else the first of
    ``COMPANION_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` that is set, else None (torch's
    own count stays, including one the reader chose with ``torch.set_num_threads`` before).

    Raises ValueError for a count that is not a positive whole number.
    """
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be a positive int or None (the environment's count), got {threads!r}")
        return threads
    environ = os.environ if environ is None else environ
    for name in THREAD_VARIABLES:
        value = environ.get(name, "").strip()
        if not value:
            continue
        try:
            count = int(value.split(",")[0])  # OpenMP allows a list per nesting level
        except ValueError:
            raise ValueError(f"{name}={value!r}: expected a positive whole number of threads") from None
        if count < 1:
            raise ValueError(f"{name}={value!r}: expected a positive whole number of threads")
        return count
    return None


def setup(seed: int = 0, threads: int | None = None, precision: int = 4) -> None:
    """Seed Python, NumPy and PyTorch, set the thread count and the print precision.

    Call it once, in the first code cell of a notebook. ``threads=None`` takes the count from the
    environment (:func:`threads_wanted`): ``COMPANION_THREADS``, then ``OMP_NUM_THREADS`` and
    ``MKL_NUM_THREADS``; with none of them set, torch keeps its own count. On a busy machine with
    few cores, ``OMP_NUM_THREADS=1`` is often the fastest.
    """
    count = threads_wanted(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if count is not None and count != torch.get_num_threads():
        torch.set_num_threads(count)
    torch.set_printoptions(precision=precision, sci_mode=False)
    np.set_printoptions(precision=precision, suppress=True)
    import matplotlib

    try:
        shell = get_ipython()  # type: ignore[name-defined]  # noqa: F821
    except NameError:  # plain Python: draw off-screen
        shell = None
        os.environ.setdefault("MPLBACKEND", "Agg")
    if shell is not None:  # in a notebook: figures are stored in it (MPLBACKEND=Agg shows nothing)
        shell.run_line_magic("matplotlib", "inline")
        # Figures sharp on high-resolution screens: a PNG of twice the pixels, stored with its
        # logical size, at which Jupyter and the book show it (see _sharp_png). PNG, not SVG:
        # nbval compares an SVG's text, which varies between matplotlib builds; never PNG bytes.
        try:
            from matplotlib_inline.config import InlineBackend
        except ImportError:  # a kernel without matplotlib-inline: ordinary PNG
            pass
        else:
            from matplotlib.figure import Figure

            InlineBackend.instance().figure_formats = {"retina"}
            shell.display_formatter.formatters["image/png"].for_type(Figure, _sharp_png)
        # Error reports are left as they are: a student's own mistake shows a full traceback. The
        # book shows the errors it raises on purpose as one line by another route
        # (scripts/execute_notebooks.py trims the stored tracebacks of cells tagged
        # raises-exception), which never touches a student's kernel.
    matplotlib.rcdefaults()
    matplotlib.rcParams.update({"figure.dpi": 100, "savefig.dpi": 100, "figure.figsize": (6.4, 4.0)})
    # Warnings print the kernel's temporary file names, which differ from run to run.
    warnings.filterwarnings("ignore", category=UserWarning)


def _sharp_png(fig):
    """A figure as the notebook stores it: a PNG of twice its pixels in at most 256 colours.

    Twice the pixels (IPython's "retina" format, stored with the figure's logical width and
    height) keeps lines and text sharp on high-resolution screens; 256 colours, chosen for each
    figure, make the file about a third of the size of a full-colour one and smaller than a
    plain single-resolution PNG, with no difference the eye can see on plots and heatmaps.
    """
    import io
    from binascii import b2a_base64

    from IPython.core.pylabtools import retina_figure
    from PIL import Image

    shown = retina_figure(fig, base64=False, bbox_inches="tight")
    if shown is None:  # an empty figure shows nothing
        return None
    png, size = shown
    image = Image.open(io.BytesIO(png))
    if image.mode == "RGBA" and image.getextrema()[3][0] == 255:  # opaque: drop the alpha
        image = image.convert("RGB")
    method = Image.Quantize.MEDIANCUT if image.mode == "RGB" else Image.Quantize.FASTOCTREE
    out = io.BytesIO()
    image.quantize(256, method=method, dither=Image.Dither.NONE).save(out, "PNG", optimize=True)
    return b2a_base64(out.getvalue(), newline=False).decode("ascii"), size


#: The first code cell of every chapter: on Colab or in any fresh environment it installs the
#: course (once); where the companion is installed already, as in the book's own environment and
#: in the tests, it does nothing. It installs by the distribution's name (``companion`` on the
#: package index is an unrelated project, which it also tells apart by the missing
#: ``companion/notebook.py``). The book's pages leave it out (tag ``remove-cell``).
INSTALL_CELL = """\
# On Colab or in a fresh environment, install the course's companion package
# first (once); where it is installed already, this cell does nothing.
import importlib
import importlib.util
from pathlib import Path

COURSE = ("{distribution}"
          " @ git+{repository}")
spec = importlib.util.find_spec("companion")
if spec is None or not spec.origin or not Path(
        spec.origin).with_name("notebook.py").is_file():
    # Missing, or the unrelated package called "companion" on the index.
    %pip install --quiet "{{COURSE}}"
    importlib.invalidate_caches()
"""


def install_cell_source() -> str:
    """The source of the install cell that opens every chapter notebook."""
    from companion import DISTRIBUTION, REPOSITORY

    return INSTALL_CELL.format(distribution=DISTRIBUTION, repository=REPOSITORY).rstrip("\n")


def is_install_cell(cell) -> bool:
    """True for a chapter's install cell, in its current form or an earlier one."""
    source = cell.get("source", "") if isinstance(cell, dict) else ""
    return cell.get("cell_type") == "code" and "%pip install" in source and "companion" in source
