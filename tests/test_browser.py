"""The rendered book, opened page by page in a real browser (headless Chromium via Playwright).

The book is built inside the test (``jupyter-book build -W -n --keep-going`` into a temporary
folder), or taken from ``COURSE_BOOK_HTML=_build/html`` when that variable names a built site.
It is served on 127.0.0.1 and every HTML page is opened once; the tests then check, for every
page: the math is typeset by MathJax (no raw ``$$``/``\\(``/``\\[`` left, no MathJax error),
every image loaded, no console or page error beyond the known harmless ones listed below, every
internal link and anchor resolves; and for the book as a whole: search finds "attention", every
notebook can be downloaded as ``.ipynb``, launch buttons appear only for a configured repository,
and every exercise's solution sits in a closed dropdown that opens on a click.

Navigation is checked as a reader on a phone (390 px), a tablet (768 px), a small laptop
(1024 px) and a desktop (1280 px) would use it: the chapter list (the ☰ toggle) and the page's
contents (its own toggle) open on a click, visible, on screen and holding links; on a desktop,
where the chapter list is shown already, the ☰ toggle hides it and shows it again; and there is
never more than one search bar. (sphinx-book-theme 1.3.0 with pydata-sphinx-theme 0.17.1 broke
all of these: sphinx-book-theme issues #986 and #999.)

Chromium is Debian's (``bash scripts/setup.sh --browser``, as root); no test tool downloads a
browser. Without it the tests skip, except in CI (``CI=true``), where they fail.
"""
from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

import nbformat
import pytest
import yaml

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
# As the machine notes say: without the background-networking flags Chromium tries to reach
# Google's servers at every start, and the closed network refuses each connection.
CHROMIUM_ARGS = [
    "--no-sandbox", "--headless=new", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# Console and page errors that are known and harmless. Each must say why it is harmless.
# (The "Identifier 'THEBE_JS_URL' has already been declared" error that Sphinx 7 caused on every
# page is gone: book/_ext/page_assets.py drops the repeated inline scripts. The book has a
# favicon, so Chromium no longer asks for a missing /favicon.ico.)
KNOWN_HARMLESS = [
    # pydata-sphinx-theme on a fresh browser profile: no light/dark mode saved yet, so it logs
    # this and falls back to "auto", which is the default anyway.
    re.compile(r"Got invalid theme mode: \. Resetting to auto\."),
]
# The repository URL jupyter-book uses when _config.yml names none: a placeholder, never ours.
JB_DEFAULT_REPOSITORY = "executablebooks/jupyter-book"
# Generous: the machines that run the tests may be busy with other work (2 shared cores).
PAGE_TIMEOUT_MS = 120_000
LAUNCH_HOSTS = ("mybinder.org", "colab.research.google.com", "/v2/gh/")


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def _need_chromium() -> None:
    """Skip (or, in CI, fail) with a clear reason when Chromium or Playwright is missing."""
    reason = None
    if not CHROMIUM.is_file():
        reason = f"{CHROMIUM} not found: install Debian's chromium with `sudo bash scripts/setup.sh --browser`"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            reason = "playwright is not installed in this environment: run `bash scripts/setup.sh`"
    if reason:
        if _in_ci():
            pytest.fail(f"browser test cannot run in CI: {reason}", pytrace=False)
        pytest.skip(reason)


# --- the built book ------------------------------------------------------------------------------

@dataclass
class Build:
    html: Path
    returncode: int
    log: str


@pytest.fixture(scope="session")
def build(tmp_path_factory) -> Build:
    _need_chromium()
    given = os.environ.get("COURSE_BOOK_HTML")
    if given:
        html = Path(given).resolve()
        if not (html / "search.html").is_file():
            pytest.fail(f"COURSE_BOOK_HTML={given} is not a built book (no search.html in it)", pytrace=False)
        return Build(html, 0, f"(using the book already built in {html})")
    out = tmp_path_factory.mktemp("book")
    cmd = [str(Path(sys.executable).parent / "jupyter-book"), "build", str(ROOT), "--path-output", str(out),
           "-W", "-n", "--keep-going"]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    html = out / "_build" / "html"
    if not (html / "search.html").is_file():
        pytest.fail(f"the book did not build:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}", pytrace=False)
    return Build(html, done.returncode, done.stdout + done.stderr)


@pytest.fixture(scope="session")
def server(build):
    """Serve the built book on 127.0.0.1 (a free port); yields the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(build.html)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser(build):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def _new_context(browser):
    context = browser.new_context()
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    return context


# --- one visit per page --------------------------------------------------------------------------

# Runs in the page once it has loaded: waits for MathJax, then reports what the tests check.
SURVEY = r"""
async () => {
  let mathjax = 'absent';
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
    mathjax = 'done';
  }
  const visible = (e) => e.checkVisibility({visibilityProperty: true, opacityProperty: true})
                         && e.getBoundingClientRect().height > 0;
  const prose = document.querySelector('main') || document.body;
  const clone = prose.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, textarea, mjx-container, .highlight, .output')
       .forEach((e) => e.remove());
  return {
    mathjax,
    text: clone.textContent,
    untypeset: [...document.querySelectorAll('span.math, div.math')]
      .filter((e) => !e.querySelector('mjx-container')).map((e) => e.textContent.slice(0, 80)),
    merrors: [...document.querySelectorAll('mjx-merror, [data-mjx-error]')]
      .map((e) => (e.getAttribute('data-mjx-error') || e.textContent).slice(0, 120)),
    images: [...document.images].map((i) => ({src: i.getAttribute('src'), alt: i.getAttribute('alt') || '',
                                             ok: i.complete && i.naturalWidth > 0})),
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
    ids: [...document.querySelectorAll('[id]')].map((e) => e.id)
      .concat([...document.querySelectorAll('a[name]')].map((e) => e.getAttribute('name'))),
    // citations in the text ("[Vaswani et al., 2017]") and, on the References page, the list's labels
    citations: [...document.querySelectorAll('a.reference.internal[href*="references.html#"]')]
      .filter((a) => a.closest('.cite, [role="doc-biblioref"]') || /\d{4}/.test(a.textContent))
      .map((a) => ({href: a.href, text: a.textContent})),
    labels: [...document.querySelectorAll('div.citation')]
      .map((d) => ({id: d.id, label: (d.querySelector('.label') || d).textContent})),
    solutions: [...document.querySelectorAll('div.solution')].map((s) => ({
      id: s.id,
      text: s.textContent,
      hidden: [...s.children].filter((c) => !c.classList.contains('admonition-title')).every((c) => !visible(c)),
    })),
  };
}
"""


@dataclass
class Page:
    path: str  # relative to the site root, e.g. "book/01_dot_products.html"
    survey: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # console errors, page errors, failed requests
    redirect: str | None = None


def _pages(html: Path) -> list[str]:
    return sorted(
        p.relative_to(html).as_posix()
        for p in html.rglob("*.html")
        if p.relative_to(html).parts[0] not in {"_static", "_sources", "_images"}
    )


def _redirect_target(file: Path) -> str | None:
    match = re.search(r'http-equiv="Refresh" content="\d+;\s*url=([^"]+)"', file.read_text(errors="replace"), re.I)
    return match.group(1) if match else None


@pytest.fixture(scope="session")
def site(build, server, browser) -> dict[str, Page]:
    """Open every page of the book once and record what the tests check."""
    start = time.perf_counter()
    pages: dict[str, Page] = {}
    context = _new_context(browser)
    for rel in _pages(build.html):
        page = Page(rel)
        pages[rel] = page
        target = _redirect_target(build.html / rel)
        if target is not None:  # jupyter-book's index.html only redirects to the first page
            page.redirect = target
            continue
        tab = context.new_page()

        def on_console(msg, page=page):
            if msg.type == "error":
                where = msg.location.get("url", "") if msg.location else ""
                page.errors.append(f"console: {msg.text} (at {where})")

        tab.on("console", on_console)
        tab.on("pageerror", lambda exc, page=page: page.errors.append(f"page error: {exc}"))
        tab.on("requestfailed", lambda req, page=page: page.errors.append(f"request failed: {req.url} ({req.failure})"))
        tab.goto(server + rel, wait_until="load")  # images and scripts are in by now
        page.survey = tab.evaluate(SURVEY)
        tab.close()
    context.close()
    seconds = time.perf_counter() - start
    print(f"\nbrowser test: opened {len(pages)} pages in {seconds:.1f} s")
    return pages


def _fail_if(problems: dict[str, list[str]], title: str) -> None:
    """Fail with every problem of every page listed (each once), or pass when there are none."""
    report = "\n".join(
        f"  {page}:\n      " + "\n      ".join(dict.fromkeys(items)) for page, items in problems.items() if items
    )
    if report:
        pytest.fail(f"{title}:\n{report}", pytrace=False)


def _visited(site: dict[str, Page]) -> list[Page]:
    return [p for p in site.values() if p.redirect is None]


# --- the tests -----------------------------------------------------------------------------------

def test_book_builds_without_warnings(build):
    log = re.sub(r"\x1b\[[0-9;]*m", "", build.log)  # without terminal colours
    warnings = [line for line in log.splitlines() if re.search(r"WARNING|ERROR", line)]
    if build.returncode != 0:
        pytest.fail("jupyter-book build -W -n failed:\n" + "\n".join(warnings[:40] or log.splitlines()[-40:]), pytrace=False)


def _toc_files(node) -> list[str]:
    """Every `file:` (and the root) named in _toc.yml, in order."""
    found = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("root", "file") and isinstance(value, str):
                found.append(value)
            else:
                found += _toc_files(value)
    elif isinstance(node, list):
        for item in node:
            found += _toc_files(item)
    return found


def test_every_page_of_the_toc_was_opened(build, site):
    toc = _toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    assert toc, "no files found in _toc.yml"
    missing = [f for f in toc if f"{Path(f).with_suffix('')}.html" not in site]
    assert not missing, f"pages of _toc.yml that were not built or not opened: {missing}"
    for page in site.values():
        if page.redirect is not None:
            assert (build.html / Path(page.path).parent / page.redirect).is_file(), f"{page.path} redirects to a missing {page.redirect}"


def test_math_is_typeset(site):
    raw = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]")
    problems = {}
    for page in _visited(site):
        s, found = page.survey, []
        if s["untypeset"] and s["mathjax"] != "done":
            found.append(f"MathJax did not run but the page has math: {s['untypeset'][:3]}")
        found += [f"formula not typeset: {m!r}" for m in s["untypeset"][:5]]
        found += [f"MathJax error: {m!r}" for m in s["merrors"][:5]]
        text = " ".join(s["text"].split())
        found += [f"raw TeX left in the text: …{text[max(0, m.start() - 30):m.end() + 30]}…" for m in list(raw.finditer(text))[:3]]
        problems[page.path] = found
    _fail_if(problems, "math problems")


def test_every_image_loaded(site):
    problems = {p.path: [f"image did not load: {i['src']}" for i in p.survey["images"] if not i["ok"]] for p in _visited(site)}
    _fail_if(problems, "broken images")


def _not_yet_converted(page_path: str) -> bool:
    """Pages built from the chapters that tests/test_notebooks.py lists in NOT_YET_CONVERTED."""
    from test_notebooks import NOT_YET_CONVERTED, chapter_number

    return page_path.startswith("book/") and chapter_number(Path(page_path)) in NOT_YET_CONVERTED


def test_every_image_has_a_description(site):
    """An <img> whose alt text is empty or a file name (myst-nb's default for a notebook figure)
    tells a reader who cannot see it nothing: figures carry mystnb.image.alt, diagrams :alt:."""
    file_name = re.compile(r"(^|/)[\w.-]+\.(png|jpe?g|svg|gif)$", re.I)
    problems = {
        p.path: [f"{i['src']}: alt {i['alt']!r}" for i in p.survey["images"]
                 if len(i["alt"].split()) < 3 or file_name.search(i["alt"].strip())]
        for p in _visited(site) if not _not_yet_converted(p.path)
    }
    _fail_if(problems, "images without a description (alt text)")


def test_no_console_or_page_errors(site):
    problems = {
        p.path: [e for e in p.errors if not any(k.search(e) for k in KNOWN_HARMLESS)] for p in _visited(site)
    }
    _fail_if(problems, "errors in the browser console")


def test_internal_links_and_anchors_resolve(build, server, site):
    ids = {p.path: set(p.survey["ids"]) for p in _visited(site)}
    problems: dict[str, list[str]] = {}
    checked = 0
    for page in _visited(site):
        found = []
        for href in dict.fromkeys(page.survey["links"]):
            if not href.startswith(server):
                continue  # external (not reachable offline) or javascript:
            parts = urlsplit(href)
            rel = unquote(parts.path)[1:] or "index.html"
            if rel.endswith("/"):
                rel += "index.html"
            checked += 1
            if not (build.html / rel).is_file():
                found.append(f"link to a missing file: {rel}")
            elif parts.fragment and rel.endswith(".html") and rel in ids and unquote(parts.fragment) not in ids[rel]:
                found.append(f"link to a missing anchor: {rel}#{parts.fragment}")
        problems[page.path] = found
    assert checked > 0, "no internal links found: is the survey working?"
    _fail_if(problems, "broken internal links")


def test_search_finds_attention(server, browser):
    context = _new_context(browser)
    tab = context.new_page()
    tab.goto(server + "search.html?q=attention", wait_until="load")
    tab.wait_for_function("document.querySelector('#search-results .search-summary') !== null", timeout=PAGE_TIMEOUT_MS)
    summary = tab.inner_text("#search-results .search-summary")
    hits = tab.eval_on_selector_all("#search-results ul.search li a", "els => els.map(a => a.getAttribute('href'))")
    context.close()
    assert hits, f"searching for 'attention' found nothing ({summary!r})"
    assert any(h.startswith("book/") for h in hits), f"no chapter among the results: {hits}"


def _squash_label(text: str) -> str:
    """A citation label without its brackets and spacing: "[Vaswani et al., 2017]" -> "Vaswanietal.,2017"."""
    return re.sub(r"[\s\[\]()]", "", text)


def test_citations_match_the_reference_list(server, site):
    """The text cites "[Vaswani et al., 2017]": the References page must list it under that label."""
    refs = next((p for p in _visited(site) if p.survey["labels"]), None)
    assert refs is not None, "no page lists the references (div.citation)"
    labels = {entry["id"]: _squash_label(entry["label"]) for entry in refs.survey["labels"]}
    problems, checked = {}, 0
    for page in _visited(site):
        found = []
        for cite in page.survey["citations"]:
            anchor = unquote(urlsplit(cite["href"]).fragment)
            if anchor not in labels:
                continue  # a link to the page or a heading, not to an entry
            checked += 1
            text = _squash_label(cite["text"])
            if re.fullmatch(r"\d{4}", text):  # {cite:t}: "Holtzman et al. [2020]", only the year is a link
                text_ok = labels[anchor].endswith(f",{text}")
            else:
                text_ok = text == labels[anchor]
            if not text_ok:
                found.append(f"cited as {cite['text']!r} but listed as {labels[anchor]!r}")
        problems[page.path] = found
    assert checked > 0, "no citation found in the text: is the survey working?"
    _fail_if(problems, "citations that do not match their label in the reference list")


# Search result snippets must not show TeX source: a formula's text on the page is "\(Q K^\top\)".
RAW_TEX = re.compile(r"\\\(|\\\)|\\\[|\\\]|\$\$|\\(frac|sqrt|top|mathrm|operatorname|sum|exp|left|right)\b")


def test_search_snippets_show_no_tex(server, browser):
    context = _new_context(browser)
    tab = context.new_page()
    tab.goto(server + "search.html?q=softmax", wait_until="load")
    tab.wait_for_function("document.querySelectorAll('#search-results ul.search li').length > 0", timeout=PAGE_TIMEOUT_MS)
    # Snippets arrive one by one (each is cut from the fetched page): wait until every result has one.
    tab.wait_for_function(
        "[...document.querySelectorAll('#search-results ul.search li')].every((li) => li.querySelector('p.context'))",
        timeout=PAGE_TIMEOUT_MS,
    )
    snippets = tab.eval_on_selector_all("#search-results ul.search li p.context", "els => els.map(p => p.textContent)")
    context.close()
    assert snippets, "searching for 'softmax' gave no snippets"
    raw = [s for s in snippets if RAW_TEX.search(s)]
    assert not raw, f"{len(raw)} of {len(snippets)} search snippets show raw TeX, e.g. {raw[0][:200]!r}"


def _notebook_pages(build) -> dict[str, Path]:
    """Page path -> the notebook it was built from (as copied into _sources/ by the build)."""
    return {
        nb.relative_to(build.html / "_sources").with_suffix(".html").as_posix(): nb
        for nb in (build.html / "_sources").rglob("*.ipynb")
    }


def test_every_notebook_can_be_downloaded(build, server, browser, site):
    pages = _notebook_pages(build)
    assert pages, "no notebook was built into the book"
    context = _new_context(browser)
    problems = {}
    for rel, source in pages.items():
        found = []
        links = [h for h in site[rel].survey["links"] if h.split("?")[0].endswith(f"/_sources/{rel[:-5]}.ipynb")]
        if not links:
            found.append(f"no download link to {source.name}")
        else:
            response = context.request.get(links[0])
            if response.status != 200:
                found.append(f"download link {links[0]} answers HTTP {response.status}")
            else:
                try:
                    nbformat.reads(response.text(), as_version=4)
                except Exception as exc:  # noqa: BLE001 - report any parse failure
                    found.append(f"the downloaded file is not a notebook: {exc}")
        problems[rel] = found
    context.close()
    _fail_if(problems, "notebook downloads")


def test_launch_buttons_only_for_a_configured_repository(build, site):
    config = yaml.safe_load((ROOT / "_config.yml").read_text()) or {}
    url = ((config.get("repository") or {}).get("url") or "").rstrip("/")
    launch = config.get("launch_buttons") or {}
    configured = bool(url) and JB_DEFAULT_REPOSITORY not in url and bool(launch.get("binderhub_url") or launch.get("colab_url"))
    problems = {}
    for rel in _notebook_pages(build):
        links = [h for h in site[rel].survey["links"] if any(host in h for host in LAUNCH_HOSTS)]
        placeholder = [h for h in site[rel].survey["links"] if JB_DEFAULT_REPOSITORY in h]
        found = [f"link to jupyter-book's placeholder repository: {h}" for h in placeholder]
        if not configured:
            found += [f"launch button although no repository URL is configured: {h}" for h in links]
        else:
            repo_path = urlsplit(url).path.strip("/")
            if not links:
                found.append("no launch button although repository.url and a launch service are configured")
            found += [f"launch button not for {url}: {h}" for h in links if repo_path not in h]
        problems[rel] = found
    _fail_if(problems, "launch buttons")


def _solution_sources(notebook: Path) -> list[str]:
    nb = nbformat.read(notebook, as_version=4)
    return [c.source for c in nb.cells if c.cell_type == "code" and "solution" in c.metadata.get("tags", [])]


def _squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def test_solutions_are_hidden_in_closed_dropdowns(build, site):
    problems = {}
    total = 0
    for rel, notebook in _notebook_pages(build).items():
        solutions = site[rel].survey["solutions"]
        found = [f"solution {s['id']} is visible before the reader opens it" for s in solutions if not s["hidden"]]
        hidden_text = [_squash(s["text"]) for s in solutions if s["hidden"]]
        for source in _solution_sources(notebook):
            total += 1
            if not any(_squash(source) in text for text in hidden_text):
                first = source.strip().splitlines()[0] if source.strip() else "(empty)"
                found.append(f"solution code not inside a closed solution dropdown: {first!r}")
        problems[rel] = found
    _fail_if(problems, "solutions")
    if total == 0:
        pytest.skip("no notebook has a solution cell yet")


def test_a_solution_opens_on_click(build, server, browser):
    """The dropdown really opens: click the first solution's toggle and its code becomes visible."""
    rel = next((r for r, nb in sorted(_notebook_pages(build).items()) if _solution_sources(nb)), None)
    if rel is None:
        pytest.skip("no notebook has a solution cell yet")
    context = _new_context(browser)
    tab = context.new_page()
    tab.goto(server + rel, wait_until="load")
    solution = tab.locator("div.solution").first
    code = solution.locator("div.cell").first
    assert not code.is_visible() or code.bounding_box()["height"] == 0, "the solution is visible before the click"
    toggle = solution.locator("button.toggle-button")
    assert toggle.count() > 0, f"the first solution on {rel} has no toggle button (is `:class: dropdown` missing?)"
    toggle.first.click()
    code.wait_for(state="visible", timeout=10_000)
    assert code.bounding_box()["height"] > 0
    context.close()


# --- navigation on a phone, a tablet and a desktop -------------------------------------------------

# (name, width, height): the widths readers use; 768 and 1024 sit on either side of the theme's
# 960 px breakpoint, where the chapter list stops being shown beside the text.
SCREENS = [("phone", 390, 844), ("tablet", 768, 1024), ("small laptop", 1024, 768), ("desktop", 1280, 800)]
SCREEN_IDS = [f"{name} {width}px" for name, width, _ in SCREENS]
# What "open" means for each panel: the element, and the least number of links a reader must see.
CHAPTER_LIST = (".bd-sidebar-primary", 5)  # the table of contents of the book (every chapter)
PAGE_CONTENTS = (".bd-sidebar-secondary", 3)  # the sections of the page

# Is a panel open: displayed, inside the window (not pushed off the edge), and showing links?
PANEL_STATE = r"""
([selector, minLinks]) => {
  const vw = window.innerWidth, vh = window.innerHeight;
  const shown = (e) => e.checkVisibility({visibilityProperty: true, opacityProperty: true});
  const states = [...document.querySelectorAll(selector)].map((e) => {
    const r = e.getBoundingClientRect();
    const links = [...e.querySelectorAll('a[href]')].filter((a) => {
      const q = a.getBoundingClientRect();
      return shown(a) && q.width > 0 && q.height > 0 && q.left >= -1 && q.right <= vw + 1
             && q.top < vh && q.bottom > 0;
    }).length;
    const visible = shown(e) && r.width > 50 && r.height > 50;
    const onScreen = r.left >= -1 && r.right <= vw + 1 && r.top < vh && r.bottom > 0;
    return {visible, onScreen, links, left: Math.round(r.left), right: Math.round(r.right),
            open: visible && onScreen && links >= minLinks};
  });
  return states.find((s) => s.open) || states[0] || {open: false, missing: true};
}
"""
# The search bars a reader sees (fields, not the icon buttons that open the same search dialog).
SEARCH_BARS = r"""
() => {
  const shown = (e) => e.checkVisibility({visibilityProperty: true, opacityProperty: true})
                       && e.getBoundingClientRect().width > 0;
  const bars = [...document.querySelectorAll('.search-button-field, form.bd-search, input[type=search]')]
    .filter((e) => shown(e) && !e.closest('dialog:not([open])') && !e.closest('.search-button__wrapper'));
  const fields = [...new Set(bars.map((e) => e.closest('.search-button-field, form.bd-search') || e))];
  const buttons = [...document.querySelectorAll('.search-button, .search-button__button')].filter(shown);
  return {fields: fields.map((e) => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')}`
                          + ` at x=${Math.round(e.getBoundingClientRect().left)}`
                          + ` (${Math.round(e.getBoundingClientRect().width)} px wide)`),
          buttons: buttons.length};
}
"""


def _chapter_page() -> str:
    """The first chapter of _toc.yml (a page with sections, so that it has a contents list)."""
    files = _toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))
    return f"{Path(files[1]).with_suffix('')}.html"


def _open_at(browser, server, width: int, height: int):
    """A fresh tab of the first chapter at this window size; returns (context, tab, errors)."""
    context = browser.new_context(viewport={"width": width, "height": height})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    tab.goto(server + _chapter_page(), wait_until="load")
    return context, tab, errors


def _panel(tab, panel) -> dict:
    return tab.evaluate(PANEL_STATE, list(panel))


def _wait_panel(tab, panel, open_: bool, timeout_ms: int = 5_000) -> dict:
    """Wait until the panel is open (or closed); return its state either way."""
    try:
        tab.wait_for_function(f"(arg) => ({PANEL_STATE})(arg).open === {str(open_).lower()}",
                              arg=list(panel), timeout=timeout_ms)
    except Exception:  # noqa: BLE001 - a timeout: the state below says what went wrong
        pass
    return _panel(tab, panel)


def _visible_toggle(tab, selector: str):
    toggles = [t for t in tab.locator(selector).all() if t.is_visible()]
    return toggles[0] if toggles else None


@pytest.mark.parametrize("screen", SCREENS, ids=SCREEN_IDS)
def test_the_chapter_list_opens(browser, server, screen):
    """The ☰ toggle opens the chapter list; where the list is already shown, it hides and shows it."""
    name, width, height = screen
    context, tab, errors = _open_at(browser, server, width, height)
    try:
        toggle = _visible_toggle(tab, ".primary-toggle")
        before = _panel(tab, CHAPTER_LIST)
        assert toggle is not None, f"{name} ({width}px): no visible ☰ toggle for the chapter list ({before})"
        if before["open"]:  # a wide screen: the list is shown beside the text; the toggle hides it
            toggle.click()
            hidden = _wait_panel(tab, CHAPTER_LIST, open_=False)
            assert not hidden["open"], f"{name} ({width}px): the ☰ toggle does not hide the chapter list ({hidden})"
            toggle = _visible_toggle(tab, ".primary-toggle")
            assert toggle is not None, f"{name} ({width}px): the ☰ toggle is gone once the chapter list is hidden"
        toggle.click()
        after = _wait_panel(tab, CHAPTER_LIST, open_=True)
        assert after["open"], (
            f"{name} ({width}px): the ☰ toggle does not open the chapter list: it must be visible, on screen "
            f"and show at least {CHAPTER_LIST[1]} links; found {after}"
        )
        errors = [e for e in errors if not any(k.search(e) for k in KNOWN_HARMLESS)]
        assert not errors, f"{name} ({width}px): errors while using the navigation: {errors}"
    finally:
        context.close()


@pytest.mark.parametrize("screen", SCREENS, ids=SCREEN_IDS)
def test_the_page_contents_open(browser, server, screen):
    """The page's contents are shown, or their toggle opens them on screen."""
    name, width, height = screen
    context, tab, errors = _open_at(browser, server, width, height)
    try:
        state = _panel(tab, PAGE_CONTENTS)
        if not state["open"]:
            toggle = _visible_toggle(tab, ".secondary-toggle")
            assert toggle is not None, (
                f"{name} ({width}px): the page's contents are not shown and no toggle opens them ({state})"
            )
            toggle.click()
            state = _wait_panel(tab, PAGE_CONTENTS, open_=True)
        assert state["open"], (
            f"{name} ({width}px): the contents toggle does not open the page's contents: they must be visible, "
            f"on screen and show at least {PAGE_CONTENTS[1]} links; found {state}"
        )
        errors = [e for e in errors if not any(k.search(e) for k in KNOWN_HARMLESS)]
        assert not errors, f"{name} ({width}px): errors while using the navigation: {errors}"
    finally:
        context.close()


@pytest.mark.parametrize("screen", SCREENS, ids=SCREEN_IDS)
def test_one_search_bar(browser, server, screen):
    """At most one search bar on the page (the theme once added a second one across the top), and search
    stays reachable (a bar, or the search button of narrow screens)."""
    name, width, height = screen
    context, tab, _ = _open_at(browser, server, width, height)
    try:
        found = tab.evaluate(SEARCH_BARS)
    finally:
        context.close()
    assert len(found["fields"]) <= 1, f"{name} ({width}px): {len(found['fields'])} search bars: {found['fields']}"
    assert found["fields"] or found["buttons"], f"{name} ({width}px): no search bar and no search button"


def test_every_chapter_offers_its_student_version(server, browser, site):
    """Near the top of each chapter page, a visible link downloads the student notebook: plain
    Markdown (exercise headings, no MyST directives) and no solution code."""
    from companion import student

    context = _new_context(browser)
    problems = {}
    for path in student.chapters():
        rel = f"book/{path.stem}.html"
        tab = context.new_page()
        tab.set_viewport_size({"width": 390, "height": 844})
        tab.goto(server + rel)
        link = tab.locator("p.student-download a[download]")
        found = []
        if link.count() != 1:
            found.append(f"{link.count()} student-download links (expected 1)")
        else:
            box = link.bounding_box()
            if box is None or box["y"] > 2 * 844:
                found.append(f"the student-download link is not near the top of the page (box {box})")
            href = tab.evaluate("() => document.querySelector('p.student-download a[download]').href")
            response = context.request.get(href)
            if response.status != 200:
                found.append(f"the student version answers HTTP {response.status}")
            else:
                nb = nbformat.reads(response.text(), as_version=4)
                markdown = "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
                if "```{exercise}" in markdown or "{solution-start}" in markdown:
                    found.append("the student version still holds MyST exercise directives")
                if student.check_cells(nb) and "### Exercise" not in markdown:
                    found.append("the student version has no '### Exercise' heading")
                solutions = {c.source for c in nbformat.read(path, as_version=4).cells if student.is_solution(c)}
                if any(c.source in solutions for c in nb.cells):
                    found.append("a solution survived in the student version")
        tab.close()
        problems[rel] = found
    context.close()
    _fail_if(problems, "student-version downloads")
