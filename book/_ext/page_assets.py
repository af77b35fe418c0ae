"""The book's own look: its stylesheet and scripts, and one repair of the pages' script list.

* ``book/_static`` is served as the site's ``_static`` (logo, favicon, ``course.css``,
  ``search_snippets.js``); the stylesheet and the script are added to every page.
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

from pathlib import Path

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


def setup(app):
    app.connect("config-inited", _add_static_path)
    app.add_css_file("course.css")
    app.add_js_file("search_snippets.js", defer="defer")
    # Last, after the extensions that add their scripts while a page is being written.
    app.connect("html-page-context", _drop_repeated_scripts, priority=990)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
