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
