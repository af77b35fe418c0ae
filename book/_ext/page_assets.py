"""The book's own look: its stylesheet and scripts, and one repair of the pages' script list.

* ``book/_static`` is served as the site's ``_static`` (logo, favicon, ``course.css``,
  ``course.js``, ``search_snippets.js``); the stylesheet and the scripts are added to every page.
* ``course.js``: figures open full size on a tap, wide equations/tables/outputs that scroll are
  tab stops, the narrow-screen drawers close after a tap on an entry (issue 21).
* The footer of every page links the whole book as a PDF (``scripts/build_pdf.py`` writes it into
  ``pdf/`` of the built site) and its instructors' edition with the solutions.
* Two repairs of the theme's HTML, made in the written files at the end of the build (and
  checked by axe-core in tests/test_browser.py): the sidebar that holds the logo becomes a
  landmark (``<div id="pst-primary-sidebar" role="complementary" aria-label="The book">``), so
  the logo is no longer outside every landmark; and the reference list's entries, which docutils
  marks ``role="doc-biblioentry"`` (a role ARIA 1.3 deprecates) inside a ``role="list"``, become
  ``role="listitem"`` (axe-core's aria-required-children).
* ``search_snippets.js``: Sphinx 7's search page builds each result's snippet from the text of
  the result's HTML page, where a formula is still its TeX source (``\\(Q K^\\top\\)``): the
  snippet showed raw TeX. The script drops formulas from that text first.
* Every page declared sphinx-thebe's ``const THEBE_JS_URL`` (and sphinx-togglebutton's
  settings) twice, which browsers report as ``SyntaxError: Identifier 'THEBE_JS_URL' has
  already been declared``: those extensions add their inline scripts again after the HTML
  builder has started, and Sphinx 7 (which jupyter-book 1.0.4 requires) does not drop a
  repeated inline script. Each page's script list keeps the first copy of each.
"""
from __future__ import annotations

import posixpath
from pathlib import Path

from sphinx.util import logging

logger = logging.getLogger(__name__)

# The book's PDF, written by scripts/build_pdf.py into the built site (paths from its root).
PDF_STUDENT = "pdf/transformers-built-by-hand.pdf"
PDF_INSTRUCTORS = "pdf/transformers-built-by-hand-instructors.pdf"

# (file, old, new): exact strings of the theme's output, replaced in every written page.
SIDEBAR_OLD = '<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar">'
SIDEBAR_NEW = ('<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar" '
               'role="complementary" aria-label="The book">')
BIBLIO_OLD = 'role="doc-biblioentry"'
BIBLIO_NEW = 'role="listitem"'

STATIC = Path(__file__).resolve().parents[1] / "_static"


def _add_static_path(app, config):
    path = str(STATIC)
    if path not in config.html_static_path:
        config.html_static_path.append(path)


def _script_key(script):
    filename = getattr(script, "filename", script) or ""  # an inline script: None or "", as added
    attributes = getattr(script, "attributes", {})
    return filename, tuple(sorted((k, str(v)) for k, v in attributes.items()))


def _drop_repeated_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        key = _script_key(script)
        if key not in seen:
            seen.add(key)
            kept.append(script)
    scripts[:] = kept


def pdf_footer(page_uri: str) -> str:
    """The footer paragraph that links the book's PDF (both editions) from the page at ``page_uri``."""
    here = posixpath.dirname(page_uri) or "."
    student = posixpath.relpath(PDF_STUDENT, here)
    instructors = posixpath.relpath(PDF_INSTRUCTORS, here)
    return (f'<p class="book-pdf">The whole book as a PDF: <a href="{student}">for reading and printing</a> '
            f'(no solutions) · <a href="{instructors}">instructors\' edition</a> (with the solutions).</p>')


def _add_pdf_link(app, pagename, templatename, context, doctree):
    if app.builder.format != "html":
        return
    footer = context.get("theme_extra_footer") or ""
    context["theme_extra_footer"] = footer + "\n" + pdf_footer(app.builder.get_target_uri(pagename))


def repair_html(text: str) -> tuple[str, bool, bool]:
    """The page's HTML with the two repairs; and whether each repair found its target."""
    sidebar = SIDEBAR_OLD in text or SIDEBAR_NEW in text  # (a page kept from an earlier build)
    biblio = BIBLIO_OLD in text or BIBLIO_NEW in text
    return text.replace(SIDEBAR_OLD, SIDEBAR_NEW).replace(BIBLIO_OLD, BIBLIO_NEW), sidebar, biblio


def _repair_pages(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    sidebars = 0
    for path in Path(app.outdir).rglob("*.html"):
        if path.relative_to(app.outdir).parts[0] in ("_static", "_sources", "_images"):
            continue
        text = path.read_text(encoding="utf-8")
        new, sidebar, _ = repair_html(text)
        sidebars += sidebar
        if new != text:
            path.write_text(new, encoding="utf-8")
    if sidebars == 0:
        logger.warning("page_assets: no page has the theme's primary sidebar as expected: "
                       "the logo's landmark was not added (did the theme change?)")


def setup(app):
    app.connect("config-inited", _add_static_path)
    app.add_css_file("course.css")
    app.add_js_file("search_snippets.js", defer="defer")
    app.add_js_file("course.js", defer="defer")
    app.connect("html-page-context", _add_pdf_link)
    app.connect("build-finished", _repair_pages)
    # Last, after the extensions that add their scripts while a page is being written.
    app.connect("html-page-context", _drop_repeated_scripts, priority=990)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
