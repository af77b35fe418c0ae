"""Offer each chapter's student version (no solutions, plain Markdown) for download on its page.

At the end of an HTML build, the student version of every chapter notebook (``book/NN_*.ipynb``
and the appendix, ``book/appendix_*.ipynb``; written by :func:`companion.student.write`, the same
code as ``python -m companion.student``) is
saved under ``student/`` in the output, and each chapter page carries a link to its own, right
under the page title:

    <p class="student-download"><a href="../student/02_attention.ipynb" download>Download the
    student version (no solutions)</a></p>

Beside it, launch links open the same student version in Colab and (when configured) on a
JupyterHub, configured in ``_config.yml`` under ``sphinx: config: student_launch:``::

    student_launch:
      colab: true                    # "Open in Colab"
      jupyterhub_url: ""             # e.g. https://hub.example.edu: "Open on JupyterHub"
      branch: student-notebooks      # the branch that holds student/NN_name.ipynb

Colab opens notebooks only from GitHub (or Drive), never from an arbitrary address, so the
publishing workflow (``.github/workflows/pages.yml``) pushes the built ``student/`` folder to that
branch of the repository named by ``repository: url:`` (the one place the address is
configured). The Colab link is
``https://colab.research.google.com/github/OWNER/NAME/blob/BRANCH/student/NN_name.ipynb``; the
JupyterHub link is an nbgitpuller link (the hub needs ``nbgitpuller`` installed), which clones the
branch into the student's home and opens the chapter there. Without a GitHub repository address,
no launch link is shown.

A chapter whose student version cannot be written (a solution cell without a stub, MyST syntax the
student build does not know) fails the build, with the reason.
"""
from __future__ import annotations

import html
import posixpath
from pathlib import Path
from urllib.parse import quote, urlencode

from docutils import nodes
from sphinx.errors import ExtensionError

FOLDER = "student"  # in the HTML output
LINK_TEXT = "Download the student version (no solutions)"
CLASS = "student-download"


def chapter_sources(app) -> dict[str, Path]:
    """docname -> source notebook, for every chapter notebook (``NN_name.ipynb``, and the appendix,
    ``appendix_name.ipynb``) of the project."""
    from companion import student

    found = {}
    for docname in sorted(app.env.found_docs):
        path = Path(app.env.doc2path(docname))
        if student.is_chapter(path):
            found[docname] = path
    return found


def download_path(docname: str) -> str:
    """Where the chapter's student notebook lies in the HTML output (a path relative to its root)."""
    return f"{FOLDER}/{posixpath.basename(docname)}.ipynb"


def _github(repository_url: str | None) -> tuple[str, str] | None:
    """(owner, name) of a https://github.com/OWNER/NAME address, or None."""
    url = (repository_url or "").strip().rstrip("/")
    if url.endswith(".git"):
        url = url[:-4]
    prefix = "https://github.com/"
    if not url.startswith(prefix):
        return None
    parts = url[len(prefix):].split("/")
    if len(parts) != 2 or not all(parts) or "executablebooks" in parts[0]:
        return None  # jupyter-book's placeholder is not ours
    return parts[0], parts[1]


def launch_links(docname: str, repository_url: str | None, settings: dict | None) -> list[tuple[str, str]]:
    """[(text, url)] of the launch links for the chapter's student version."""
    repo = _github(repository_url)
    settings = settings or {}
    if repo is None:
        return []
    owner, name = repo
    branch = settings.get("branch") or "student-notebooks"
    notebook = download_path(docname)
    links = []
    if settings.get("colab", True):
        links.append(("Open it in Colab", f"https://colab.research.google.com/github/{owner}/{name}/blob/"
                                          f"{quote(branch)}/{quote(notebook)}"))
    hub = (settings.get("jupyterhub_url") or "").strip().rstrip("/")
    if hub:
        query = urlencode({"repo": f"https://github.com/{owner}/{name}", "branch": branch,
                           "urlpath": f"lab/tree/{name}/{notebook}"})
        links.append(("Open it on JupyterHub", f"{hub}/hub/user-redirect/git-pull?{query}"))
    return links


def link_html(page_uri: str, docname: str, launch: list[tuple[str, str]] = ()) -> str:
    """The link paragraph for the page at ``page_uri`` (such as ``book/02_attention.html``)."""
    href = posixpath.relpath(download_path(docname), posixpath.dirname(page_uri) or ".")
    extra = "".join(
        f'<span class="launch-sep" aria-hidden="true">·</span><a class="reference external launch-student" '
        f'href="{html.escape(url)}">{html.escape(text)}</a>'
        for text, url in launch
    )
    return (f'<p class="{CLASS}"><a class="reference download" href="{html.escape(href)}" download>'
            f"{html.escape(LINK_TEXT)}</a>{extra}</p>\n")


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
    theme = app.config.html_theme_options or {}
    launch = launch_links(docname, theme.get("repository_url"), app.config.student_launch)
    raw = nodes.raw("", link_html(app.builder.get_target_uri(docname), docname, launch), format="html")
    at = 1 if section.children and isinstance(section.children[0], nodes.title) else 0
    section.insert(at, raw)


def _write(app, exception) -> None:
    if exception is None and app.builder.format == "html":
        write_student_notebooks(chapter_sources(app), Path(app.outdir))


def setup(app):
    app.add_config_value("student_launch", {"colab": True, "jupyterhub_url": "", "branch": "student-notebooks"},
                         "html", types=[dict])
    app.connect("doctree-resolved", _add_link)
    app.connect("build-finished", _write)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
