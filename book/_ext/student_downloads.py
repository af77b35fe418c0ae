"""Offer each chapter's student version (no solutions, plain Markdown) for download on its page.

At the end of an HTML build, the student version of every chapter notebook (``book/NN_*.ipynb``,
written by :func:`companion.student.write`, the same code as ``python -m companion.student``) is
saved under ``student/`` in the output, and each chapter page carries a link to its own, right
under the page title:

    <p class="student-download"><a href="../student/02_attention.ipynb" download>Download the
    student version (no solutions)</a></p>

A chapter whose student version cannot be written (a solution cell without a stub, MyST syntax the
student build does not know) fails the build, with the reason.
"""
from __future__ import annotations

import html
import posixpath
from pathlib import Path

from docutils import nodes
from sphinx.errors import ExtensionError

FOLDER = "student"  # in the HTML output
LINK_TEXT = "Download the student version (no solutions)"
CLASS = "student-download"


def chapter_sources(app) -> dict[str, Path]:
    """docname -> source notebook, for every chapter notebook (``NN_name.ipynb``) of the project."""
    found = {}
    for docname in sorted(app.env.found_docs):
        path = Path(app.env.doc2path(docname))
        if path.suffix == ".ipynb" and path.name[:2].isdigit() and "_" in path.name:
            found[docname] = path
    return found


def download_path(docname: str) -> str:
    """Where the chapter's student notebook lies in the HTML output (a path relative to its root)."""
    return f"{FOLDER}/{posixpath.basename(docname)}.ipynb"


def link_html(page_uri: str, docname: str) -> str:
    """The link paragraph for the page at ``page_uri`` (such as ``book/02_attention.html``)."""
    href = posixpath.relpath(download_path(docname), posixpath.dirname(page_uri) or ".")
    return (f'<p class="{CLASS}"><a class="reference download" href="{html.escape(href)}" download>'
            f"{html.escape(LINK_TEXT)}</a></p>\n")


def write_student_notebooks(sources: dict[str, Path], outdir: Path) -> list[Path]:
    """Write the student version of each chapter into ``outdir/student/``; return the files."""
    from companion import student

    written = []
    by_folder: dict[Path, list[Path]] = {}
    for path in sources.values():
        by_folder.setdefault(path.parent, []).append(path)
    for paths in by_folder.values():
        try:
            written += student.write(sorted(paths), Path(outdir) / FOLDER)
        except ValueError as exc:  # no stub, or MyST syntax the student build does not know
            raise ExtensionError(f"student versions: {exc}") from exc
    return written


def _add_link(app, doctree, docname) -> None:
    if app.builder.format != "html" or docname not in chapter_sources(app):
        return
    section = next(iter(doctree.findall(nodes.section)), None)
    if section is None:
        return
    raw = nodes.raw("", link_html(app.builder.get_target_uri(docname), docname), format="html")
    at = 1 if section.children and isinstance(section.children[0], nodes.title) else 0
    section.insert(at, raw)


def _write(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        write_student_notebooks(chapter_sources(app), Path(app.outdir))


def setup(app):
    app.connect("doctree-resolved", _add_link)
    app.connect("build-finished", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
