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

Readers on a phone, on paper and with a keyboard (issue 21): every page is opened again at 390 px
(a phone) and checked, as at 1280 px (a desktop), for a page wider than the screen, a figure wider
than its column, a display equation cut off (at 1280 px none may even scroll; on a phone one may
scroll inside its own box, which is then a tab stop), and serious or critical axe-core violations
(WCAG 2.0/2.1 A and AA; the colour-contrast rule, the slow one, only at 1280 px, since colours
do not depend on the width). Formulas are not tab stops; a figure opens full size on a tap; the
contents drawer closes after a tap on an entry; header buttons show a focus ring; printing hides
the solutions; and the book's PDF (scripts/build_pdf.py, which the fixture runs after building)
holds every page of the book, without the solutions, and its instructors' edition with them.

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
sys.path.insert(0, str(ROOT / "scripts"))
import build_pdf  # noqa: E402  (scripts/build_pdf.py: the book's PDF)

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
    # Chromium asks for the favicon after the load event; a page closed right after its checks
    # aborts that request (the favicon itself is served: the other pages load it).
    re.compile(r"request failed: \S+/_static/favicon\.svg \(net::ERR_ABORTED\)"),
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
    # The PDF, as scripts/build_book.sh makes it (every page's footer links it).
    start = time.perf_counter()
    build_pdf.build(html, quiet=True)
    print(f"\nbrowser test: printed the book's two PDF editions in {time.perf_counter() - start:.0f} s")
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
    // MathJax's menu makes formulas tab stops unless told not to (_config.yml: inTabOrder)
    // (a formula too wide for the column, which scrolls in its box, is one on purpose: course.js)
    formula_tab_stops: document.querySelectorAll('mjx-container[tabindex]:not([tabindex="-1"]):not([data-scroll-box])').length,
    launch_student: [...document.querySelectorAll('p.student-download a.launch-student')].map((a) => a.href),
    solutions: [...document.querySelectorAll('div.solution')].map((s) => ({
      id: s.id,
      text: s.textContent,
      hidden: [...s.children].filter((c) => !c.classList.contains('admonition-title')).every((c) => !visible(c)),
    })),
  };
}
"""


# Runs in the page once MathJax is done: what a reader of this window width would find cut off.
LAYOUT = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  const vw = document.documentElement.clientWidth;
  const shown = (e) => e.checkVisibility({visibilityProperty: true, opacityProperty: true})
                       && e.getBoundingClientRect().width > 0;
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
                      + [...e.classList].slice(0, 3).map((c) => '.' + c).join('');
  const scrolled = (e) => {  // inside a box that scrolls or clips: it cannot widen the page
    for (let p = e.parentElement; p && p !== document.body; p = p.parentElement) {
      if (['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(p).overflowX)) return true;
    }
    return false;
  };
  const overflow = document.documentElement.scrollWidth - vw;
  const wide = overflow <= 0 ? [] : [...document.querySelectorAll('body *')]
    .filter((e) => shown(e) && e.getBoundingClientRect().right > vw + 1 && !scrolled(e))
    .slice(0, 4)
    .map((e) => `${name(e)} reaches ${Math.round(e.getBoundingClientRect().right)} px: `
                + `${(e.textContent || '').replace(/\s+/g, ' ').trim().slice(0, 60)}`);
  const article = document.querySelector('article.bd-article');
  const column = article ? article.getBoundingClientRect() : null;
  const figures = !article ? [] : [...article.querySelectorAll('figure img, div.cell_output img')]
    .filter(shown).map((i) => {
      const r = i.getBoundingClientRect();
      return {src: (i.getAttribute('src') || '').split('/').pop(), width: Math.round(r.width),
              column: Math.round(column.width), fits: r.left >= column.left - 1 && r.right <= column.right + 1};
    });
  const source = new Map();  // the TeX of each display formula, to name the ones cut off
  try {
    for (const item of MathJax.startup.document.math) {
      if (item.display && item.typesetRoot) source.set(item.typesetRoot, item.math);
    }
  } catch (e) { /* no MathJax on this page */ }
  // A display equation: div.math holds the formula (mjx-container, the box that scrolls) and its
  // number; it is cut when either is wider than what shows of it.
  const equations = !article ? [] : [...article.querySelectorAll('div.math')].filter(shown).map((outer) => {
    const box = outer.querySelector(':scope > mjx-container') || outer;
    const overflowX = getComputedStyle(box).overflowX;
    return {tex: (source.get(box) || outer.textContent).replace(/\s+/g, ' ').trim().slice(0, 70),
            cut: box.scrollWidth > box.clientWidth + 1 || outer.scrollWidth > outer.clientWidth + 1,
            width: box.scrollWidth, column: outer.clientWidth,
            scrolls: overflowX === 'auto' || overflowX === 'scroll', focusable: box.tabIndex >= 0};
  });
  return {width: vw, overflow, wide, figures, equations};
}
"""
PHONE = (390, 844)
DESKTOP = (1280, 800)
# axe-core's rules for WCAG 2.0 and 2.1, levels A and AA; only these impacts fail the test.
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]
AXE_FAILING = ("serious", "critical")


@functools.lru_cache(maxsize=1)
def _axe():
    from axe_playwright_python.sync_playwright import Axe

    return Axe()


def _axe_violations(tab, contrast: bool = True) -> list[str]:
    """Serious and critical axe-core violations on the open page, one line each."""
    # preload: False: axe-core otherwise fetches every stylesheet itself and resolves theme.css's
    # `@import "../basic.css"` against the page instead of the stylesheet, a 404 that the console
    # test would report (only css-orientation-lock needs those fetched sheets).
    options = {"runOnly": {"type": "tag", "values": AXE_TAGS}, "resultTypes": ["violations"], "preload": False}
    if not contrast:
        options["rules"] = {"color-contrast": {"enabled": False}}
    response = _axe().run(tab, options=options).response
    return [
        f"{v['id']} ({v['impact']}): {v['help']}; {len(v['nodes'])} element(s), e.g. "
        f"{v['nodes'][0]['target'] if v['nodes'] else '?'}"
        for v in response["violations"] if v.get("impact") in AXE_FAILING
    ]


@dataclass
class Page:
    path: str  # relative to the site root, e.g. "book/01_dot_products.html"
    survey: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # console errors, page errors, failed requests
    redirect: str | None = None
    layout: dict = field(default_factory=dict)  # width -> LAYOUT's report at that window width
    axe: dict = field(default_factory=dict)  # width -> serious/critical axe-core violations


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
    context = browser.new_context(viewport={"width": DESKTOP[0], "height": DESKTOP[1]})
    context.set_default_timeout(PAGE_TIMEOUT_MS)
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
        page.layout[DESKTOP[0]] = tab.evaluate(LAYOUT)
        page.axe[DESKTOP[0]] = _axe_violations(tab, contrast=True)
        tab.close()
    context.close()
    seconds = time.perf_counter() - start
    print(f"\nbrowser test: opened {len(pages)} pages in {seconds:.1f} s")
    return pages


@pytest.fixture(scope="session")
def phone_site(site, server, browser) -> dict[str, Page]:
    """Every page again, on a phone (390 px): layout and axe-core (without colour contrast)."""
    start = time.perf_counter()
    context = browser.new_context(viewport={"width": PHONE[0], "height": PHONE[1]}, has_touch=True)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    tab = context.new_page()
    for page in _visited(site):
        tab.goto(server + page.path, wait_until="load")
        page.layout[PHONE[0]] = tab.evaluate(LAYOUT)
        page.axe[PHONE[0]] = _axe_violations(tab, contrast=False)
    context.close()
    print(f"\nbrowser test: opened {len(_visited(site))} pages on a phone in {time.perf_counter() - start:.1f} s")
    return site


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
    # The theme's print-only title and contents list ("...Decoding and beam search Contents 8.1.")
    # once came first in every snippet: snippets must come from the page's own text.
    listed = [s for s in snippets if re.search(r"\bContents\b", s)]
    assert not listed, f"{len(listed)} of {len(snippets)} snippets quote the print-only contents list, e.g. {listed[0][:200]!r}"


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
    """The theme's launch buttons (full notebooks) only with a configured repository and service;
    the student versions' launch links (Colab, and a JupyterHub when configured) only with a GitHub
    repository, opening that repository's student notebook of the very chapter."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text()) or {}
    url = ((config.get("repository") or {}).get("url") or "").rstrip("/")
    launch = config.get("launch_buttons") or {}
    settings = ((config.get("sphinx") or {}).get("config") or {}).get("student_launch") or {}
    configured = bool(url) and JB_DEFAULT_REPOSITORY not in url and bool(launch.get("binderhub_url") or launch.get("colab_url"))
    github = url.startswith("https://github.com/") and JB_DEFAULT_REPOSITORY not in url
    repo_path = urlsplit(url).path.strip("/")
    problems = {}
    for rel in _notebook_pages(build):
        survey = site[rel].survey
        student_links = set(survey["launch_student"])
        links = [h for h in survey["links"] if any(host in h for host in LAUNCH_HOSTS) and h not in student_links]
        placeholder = [h for h in survey["links"] if JB_DEFAULT_REPOSITORY in h]
        found = [f"link to jupyter-book's placeholder repository: {h}" for h in placeholder]
        if not configured:
            found += [f"launch button although no repository URL is configured: {h}" for h in links]
        else:
            if not links:
                found.append("no launch button although repository.url and a launch service are configured")
            found += [f"launch button not for {url}: {h}" for h in links if repo_path not in h]
        chapter = Path(rel).stem
        if rel.startswith("book/") and chapter[:2].isdigit():
            if not github:
                found += [f"student launch link without a GitHub repository: {h}" for h in student_links]
            else:
                colab = [h for h in student_links if h.startswith("https://colab.research.google.com/github/")]
                if settings.get("colab", True) and not colab:
                    found.append("no 'Open it in Colab' link for the student version")
                for h in student_links:
                    if f"{repo_path}" not in h or f"student/{chapter}.ipynb" not in unquote(h):
                        found.append(f"student launch link not to {repo_path}'s student/{chapter}.ipynb: {h}")
                if (settings.get("jupyterhub_url") or "").strip() and not any("git-pull" in h for h in student_links):
                    found.append("jupyterhub_url is configured but no 'Open it on JupyterHub' link")
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


# --- readers on a phone, on paper and with a keyboard (issue 21) ------------------------------------

def test_no_page_wider_than_a_phone(phone_site):
    """At 390 px nothing widens the page: inline code wraps, tables and equations scroll in their box."""
    problems = {}
    for page in _visited(phone_site):
        layout = page.layout[PHONE[0]]
        if layout["overflow"] > 0:
            problems[page.path] = [f"the page is {layout['overflow']} px wider than the {layout['width']} px screen"]
            problems[page.path] += layout["wide"] or ["(no single element found)"]
    _fail_if(problems, f"pages wider than a phone ({PHONE[0]} px)")


@pytest.mark.parametrize("width", [PHONE[0], DESKTOP[0]], ids=["phone", "desktop"])
def test_every_figure_within_its_column(phone_site, width):
    problems = {
        page.path: [f"{f['src']}: {f['width']} px wide in a {f['column']} px column"
                    for f in page.layout[width]["figures"] if not f["fits"]]
        for page in _visited(phone_site)
    }
    _fail_if(problems, f"figures wider than their column at {width} px")


def test_no_display_equation_cut_on_a_desktop(site):
    """At 1280 px every display equation is whole (the chapters split the long ones)."""
    problems = {
        page.path: [f"{e['tex']!r}: {e['width']} px in a {e['column']} px column" for e in page.layout[DESKTOP[0]]["equations"] if e["cut"]]
        for page in _visited(site)
    }
    _fail_if(problems, f"display equations cut off at {DESKTOP[0]} px")


def test_long_equations_scroll_on_a_phone(phone_site):
    """On a phone an equation wider than the column scrolls inside its own box (with a shadow at the
    edge, course.css), and the keyboard can reach that box."""
    problems, wide = {}, 0
    for page in _visited(phone_site):
        found = []
        for e in page.layout[PHONE[0]]["equations"]:
            if e["cut"]:
                wide += 1
                if not e["scrolls"]:
                    found.append(f"{e['tex']!r} is cut off and its box does not scroll")
                elif not e["focusable"]:
                    found.append(f"{e['tex']!r} scrolls but its box is not a tab stop")
        problems[page.path] = found
    _fail_if(problems, f"equations on a phone ({PHONE[0]} px)")
    print(f"\nbrowser test: {wide} display equations scroll in their box at {PHONE[0]} px")


@pytest.mark.parametrize("width", [PHONE[0], DESKTOP[0]], ids=["phone", "desktop"])
def test_no_serious_accessibility_violations(phone_site, width):
    problems = {page.path: page.axe[width] for page in _visited(phone_site)}
    _fail_if(problems, f"serious or critical axe-core violations (WCAG 2 A/AA) at {width} px")


def test_formulas_are_not_tab_stops(site):
    problems = {
        p.path: [f"{p.survey['formula_tab_stops']} formulas are tab stops"]
        for p in _visited(site) if p.survey["formula_tab_stops"]
    }
    _fail_if(problems, "formulas in the keyboard's tab order")


def _first_chapter_with(build, selector_text: str) -> str:
    for rel in sorted(_notebook_pages(build)):
        if selector_text in (build.html / rel).read_text(errors="replace"):
            return rel
    pytest.skip(f"no chapter has {selector_text!r}")


def test_a_figure_opens_full_size_on_a_tap(build, server, browser):
    """On a phone a figure fits the column; a tap opens it at its own (larger) size in a viewer
    that scrolls, and Escape closes it."""
    rel = _first_chapter_with(build, 'src="../_images/encoder_decoder.svg"')
    context = browser.new_context(viewport={"width": PHONE[0], "height": PHONE[1]}, has_touch=True)
    context.set_default_timeout(PAGE_TIMEOUT_MS)
    try:
        tab = context.new_page()
        tab.goto(server + rel, wait_until="load")
        figure = tab.locator("a.figure-zoom img[src$='encoder_decoder.svg']")
        assert figure.count() == 1, "the diagram is not wrapped in a full-size link (course.js)"
        small = figure.bounding_box()
        assert small["width"] <= PHONE[0], f"the diagram is {small['width']} px wide on a {PHONE[0]} px phone"
        figure.tap()
        viewer = tab.locator("dialog.figure-viewer[open]")
        viewer.wait_for(state="visible", timeout=10_000)
        big = viewer.locator("img").bounding_box()
        assert big["width"] > 1.5 * small["width"], f"the viewer shows it {big['width']} px wide, not larger than the page's {small['width']}"
        scrolls = tab.evaluate("() => { const s = document.querySelector('dialog.figure-viewer .figure-viewer__scroll');"
                               " return s.scrollWidth > s.clientWidth; }")
        assert scrolls, "the full-size figure is wider than the phone but its viewer does not scroll"
        tab.keyboard.press("Escape")
        viewer.wait_for(state="detached", timeout=10_000)
    finally:
        context.close()


def test_the_contents_drawer_closes_after_a_tap(build, server, browser):
    """On a phone, a tap on an entry of the page's contents closes the drawer and shows the section."""
    context, tab, errors = _open_at(browser, server, *PHONE)
    try:
        toggle = _visible_toggle(tab, ".secondary-toggle")
        assert toggle is not None, "no contents toggle on a phone"
        toggle.click()
        assert _wait_panel(tab, PAGE_CONTENTS, open_=True)["open"], "the contents drawer did not open"
        entry = tab.locator("dialog[open] a.nav-link[href^='#']").nth(2)
        target = entry.get_attribute("href")[1:]
        entry.click()
        tab.wait_for_function("() => !document.querySelector('dialog#pst-secondary-sidebar-modal[open]')", timeout=5_000)
        tab.wait_for_function(
            "(id) => { const r = document.getElementById(id).getBoundingClientRect();"
            " return r.top >= -2 && r.top < window.innerHeight / 2; }", arg=target, timeout=5_000)
    finally:
        context.close()


def test_header_buttons_show_a_focus_ring(server, browser):
    """Tabbing through the page's header, each button shows a visible outline."""
    context, tab, _ = _open_at(browser, server, *DESKTOP)
    try:
        seen = {}
        for _ in range(40):
            tab.keyboard.press("Tab")
            state = tab.evaluate("""() => { const e = document.activeElement;
                if (!e || !e.closest('.bd-header-article')) return null;
                const s = getComputedStyle(e);
                return {name: e.getAttribute('title') || e.getAttribute('aria-label') || e.className,
                        outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2}; }""")
            if state:
                seen[state["name"]] = state["outline"]
        assert seen, "tabbing never reached the page's header buttons"
        missing = [name for name, ok in seen.items() if not ok]
        assert not missing, f"header buttons without a visible focus ring: {missing}"
    finally:
        context.close()


def test_printing_hides_the_solutions(build, server, browser):
    """Printed (print media), a chapter shows no solution and no "Click to show/hide" toggle."""
    rel = next((r for r, nb in sorted(_notebook_pages(build).items()) if _solution_sources(nb)), None)
    if rel is None:
        pytest.skip("no notebook has a solution cell yet")
    context = _new_context(browser)
    try:
        tab = context.new_page()
        tab.emulate_media(media="print")
        tab.goto(server + rel, wait_until="load")
        shown = tab.evaluate("""() => {
            const visible = (e) => e.checkVisibility() && e.getBoundingClientRect().height > 0;
            return {solutions: [...document.querySelectorAll('div.solution')].filter(visible).length,
                    toggles: [...document.querySelectorAll('.toggle-button, .toggle-hint')].filter(visible).length,
                    text: document.body.innerText.includes('Click to')}; }""")
    finally:
        context.close()
    assert shown == {"solutions": 0, "toggles": 0, "text": False}, f"printing {rel} shows {shown}"


def _pdf_text(path: Path) -> list[str]:
    import unicodedata

    from pypdf import PdfReader

    return [" ".join(unicodedata.normalize("NFKC", p.extract_text() or "").split()) for p in PdfReader(path).pages]


def test_the_book_pdf(build, server, browser):
    """Both editions exist, hold every page of the book (its title on the part's first page, a
    bookmark for it), every figure, and the student edition no solution and no toggle text."""
    import unicodedata

    from pypdf import PdfReader

    student, instructors = build.html / build_pdf.STUDENT_PDF, build.html / build_pdf.INSTRUCTORS_PDF
    missing = [p for p in (student, instructors) if not p.is_file()]
    assert not missing, f"no PDF at {missing}: run bash scripts/build_book.sh (it runs scripts/build_pdf.py)"
    context = _new_context(browser)
    tab = context.new_page()
    titles, images = {}, 0
    for rel in build_pdf.toc_pages(ROOT):
        tab.goto(server + rel, wait_until="domcontentloaded")
        titles[rel] = tab.evaluate("""() => { const h = document.querySelector('article h1');
            return [...h.childNodes].filter((n) => !(n.classList && n.classList.contains('headerlink')))
                   .map((n) => n.textContent).join('').replace(/\\s+/g, ' ').trim(); }""")
        if not rel.startswith(build_pdf.INSTRUCTORS_PAGE):
            images += tab.evaluate("() => [...document.querySelectorAll('article figure img, article div.cell_output img')]"
                                   ".filter((i) => !i.closest('div.solution') && !/\\.svg$/.test(i.getAttribute('src'))).length")
    context.close()
    norm = lambda t: " ".join(unicodedata.normalize("NFKC", t).split())  # noqa: E731
    for path, edition in ((student, "student"), (instructors, "instructors")):
        reader = PdfReader(path)
        bookmarks = [norm(str(o.title)) for o in reader.outline if not isinstance(o, list)]
        text = _pdf_text(path)
        expected = {r: t for r, t in titles.items() if edition == "instructors" or not r.startswith(build_pdf.INSTRUCTORS_PAGE)}
        absent = [t for t in expected.values() if norm(t) not in bookmarks]
        assert not absent, f"{path.name}: no bookmark for {absent}"
        for title in expected.values():
            first = bookmarks.index(norm(title))
            destination = [o for o in reader.outline if not isinstance(o, list)][first]
            page = reader.get_destination_page_number(destination)
            assert norm(title) in text[page], f"{path.name}: page {page + 1} does not start {title!r}"
        full = "\n".join(text)
        assert "Click to" not in full, f"{path.name} prints a toggle's 'Click to show/hide'"
        solutions = full.count("Solution to")
        if edition == "student":
            assert solutions == 0, f"{path.name} (no solutions) prints {solutions} solutions"
        else:
            assert solutions > 0, f"{path.name} (instructors' edition) prints no solution"
        # Chromium prints the SVG diagrams as vector drawings, the notebooks' PNG figures as images.
        drawn = sum(
            1 for p in reader.pages
            for x in (p.get("/Resources") or {}).get("/XObject", {}).values()
            if x.get_object().get("/Subtype") == "/Image"
        )
        assert drawn >= images, f"{path.name} holds {drawn} images; the pages show {images} figures"
    print(f"\nbrowser test: PDF {len(PdfReader(student).pages)} pages ({student.stat().st_size / 1e6:.1f} MB), "
          f"instructors' edition {len(PdfReader(instructors).pages)} pages ({instructors.stat().st_size / 1e6:.1f} MB)")


def _pdf_fonts(reader) -> set[str]:
    """The base names of every font the PDF's pages use."""
    names = set()
    for page in reader.pages:
        fonts = ((page.get("/Resources") or {}).get("/Font") or {})
        for font in fonts.get_object().values():
            font = font.get_object()
            names.add(str(font.get("/BaseFont", "")))
            for descendant in font.get("/DescendantFonts") or []:
                names.add(str(descendant.get_object().get("/BaseFont", "")))
    return names


def test_the_pdf_prints_non_latin_text_with_a_font_that_has_it(build):
    """Chapter 11 prints Japanese (日本); Chromium draws empty boxes unless some font has the
    glyphs, and scripts/setup.sh --pdf installs one (WenQuanYi Micro Hei)."""
    from pypdf import PdfReader

    reader = PdfReader(build.html / build_pdf.STUDENT_PDF)
    assert "日本" in "".join(p.extract_text() or "" for p in reader.pages), "the PDF lost chapter 11's 日本"
    fonts = _pdf_fonts(reader)
    assert any("WenQuanYi" in f or "wqy" in f.lower() or "CJK" in f for f in fonts), (
        f"no CJK font in the PDF (fonts: {sorted(fonts)}): sudo apt-get install fonts-wqy-microhei")


def test_reference_list_is_sorted_by_label(site):
    refs = next((p for p in _visited(site) if p.survey["labels"]), None)
    assert refs is not None, "no page lists the references (div.citation)"
    labels = [" ".join(e["label"].strip("[] \n").split()) for e in refs.survey["labels"]]

    def key(label):
        names, _, year = label.rpartition(", ")
        return names.casefold(), year

    out_of_order = [f"{a!r} before {b!r}" for a, b in zip(labels, labels[1:]) if key(a) > key(b)]
    assert not out_of_order, f"the reference list is not sorted by its labels: {out_of_order}"


# --- the book's extensions, without a browser --------------------------------------------------------

def _ext(name: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"book_ext_{name}", ROOT / "book" / "_ext" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_student_launch_links():
    ext = _ext("student_downloads")
    repo = "https://github.com/owner/course"
    links = dict(ext.launch_links("book/02_attention", repo, {"colab": True, "jupyterhub_url": "", "branch": "student-notebooks"}))
    assert links == {"Open it in Colab": "https://colab.research.google.com/github/owner/course/blob/student-notebooks/student/02_attention.ipynb"}
    hub = dict(ext.launch_links("book/02_attention", repo + "/", {"colab": False, "jupyterhub_url": "https://hub.example.edu/"}))
    assert list(hub) == ["Open it on JupyterHub"]
    url = hub["Open it on JupyterHub"]
    assert url.startswith("https://hub.example.edu/hub/user-redirect/git-pull?")
    assert "repo=https%3A%2F%2Fgithub.com%2Fowner%2Fcourse" in url and "branch=student-notebooks" in url
    assert "urlpath=lab%2Ftree%2Fcourse%2Fstudent%2F02_attention.ipynb" in url
    for bad in (None, "", "https://gitlab.com/owner/course", "https://github.com/executablebooks/jupyter-book",
                "https://github.com/owner"):
        assert ext.launch_links("book/02_attention", bad, {"colab": True}) == [], bad
    html = ext.link_html("book/02_attention.html", "book/02_attention", list(links.items()))
    assert 'class="reference external launch-student" href="https://colab.research.google.com/' in html


def test_reference_list_order_and_labels():
    from pybtex.database import parse_string

    ext = _ext("citations")
    bib = parse_string("""
        @misc{z, author = {Zhang, Biao and Sennrich, Rico}, title = {Z}, year = {2019}}
        @misc{o, author = {{OpenAI}}, title = {gpt-2}, year = {2019}}
        @misc{v18, author = {Vaswani, Ashish and Bengio, Samy and others}, title = {T2T}, year = {2018}}
        @misc{v17, author = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki}, title = {Attention}, year = {2017}}
        @misc{p, author = {Popovi{\\'c}, Maja}, title = {chrF}, year = {2015}}
        @misc{a, author = {Ott, Myle}, title = {A}, year = {2019}}
    """, "bibtex")
    order = [ext.author_year_label(e) for e in sorted(bib.entries.values(), key=ext.sorting_key)]
    assert order == ["OpenAI, 2019", "Ott, 2019", "Popović, 2015", "Vaswani et al., 2017", "Vaswani et al., 2018",
                     "Zhang and Sennrich, 2019"]


def test_theme_repairs():
    ext = _ext("page_assets")
    page = f'<body>{ext.SIDEBAR_OLD}<div role="list"><div class="citation" {ext.BIBLIO_OLD}>x</div></div>'
    fixed, sidebar, biblio = ext.repair_html(page)
    assert sidebar and biblio
    assert 'role="complementary" aria-label="The book"' in fixed and 'role="listitem"' in fixed
    assert ext.BIBLIO_OLD not in fixed
    assert ext.repair_html(fixed)[0] == fixed  # a page kept from an earlier build stays as it is
    footer = ext.pdf_footer("book/02_attention.html")
    assert 'href="../pdf/transformers-built-by-hand.pdf"' in footer and "instructors" in footer
    assert 'href="pdf/transformers-built-by-hand.pdf"' in ext.pdf_footer("search.html")
    assert (ext.PDF_STUDENT, ext.PDF_INSTRUCTORS) == (build_pdf.STUDENT_PDF, build_pdf.INSTRUCTORS_PDF)
