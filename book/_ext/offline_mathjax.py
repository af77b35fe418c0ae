"""Serve MathJax 3 from the installed `django-static-mathjax` package, so formulas render offline.

MathJax's own files are copied into the built site (``_build/html/_static/_mathjax``; ``mathjax_path`` is relative to ``_static``) and Sphinx's
``mathjax_path`` points there. Nothing is fetched from a CDN.
"""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

TARGET = "_mathjax"


def _mathjax_es5() -> Path:
    spec = importlib.util.find_spec("mathjax")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("MathJax files not found: install django-static-mathjax (requirements.txt)")
    es5 = Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax" / "es5"
    if not (es5 / "tex-chtml.js").is_file():
        raise RuntimeError(f"MathJax's tex-chtml.js is missing under {es5}")
    return es5


def _set_path(app, config):
    config.mathjax_path = f"{TARGET}/tex-chtml.js"


def _copy(app, exception):
    if exception is None and app.builder.format == "html":
        shutil.copytree(_mathjax_es5(), Path(app.outdir) / "_static" / TARGET, dirs_exist_ok=True)


def setup(app):
    _mathjax_es5()  # fail early, with a clear message, if the package is missing
    app.connect("config-inited", _set_path, priority=900)
    app.connect("build-finished", _copy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
