"""Print the built book into one PDF: every page of _toc.yml, in order, with a title page, a
contents page, page numbers and bookmarks; and an instructors' edition with the solutions.

    .venv/bin/python scripts/build_pdf.py                # after jupyter-book build: _build/html
    .venv/bin/python scripts/build_pdf.py --html DIR     # another built site

(``bash scripts/build_book.sh`` runs it after the HTML build.) It writes, inside the built site,

    pdf/transformers-built-by-hand.pdf               every chapter, the appendix, the references;
                                                     no solutions (as a printed page)
    pdf/transformers-built-by-hand-instructors.pdf   the same with every solution shown, and the
                                                     instructors' page

which the footer of every page links (book/_ext/page_assets.py).

How: the site is served on 127.0.0.1 and each page is opened in Debian's Chromium (the browser
the test of the book uses; nothing is downloaded, set CHROMIUM to use another Chrome or
Chromium), MathJax is awaited, and the page is printed with its print stylesheet
(book/_static/course.css: no sidebars, no solutions, no "Click to show", equations and tables
whole). Links to other pages of the book become plain text (a PDF has no server to follow them
to); links to the web stay links. pypdf then joins the pages after a title page and a contents
page (both printed by Chromium from HTML written here), stamps page numbers and running titles,
and adds bookmarks: one per page of the book, one per section.

Jupyter Book's own ``pdfhtml`` builder downloads a browser of its own (impossible offline), and
its ``singlehtml`` builder crashes on this book (sphinx-exercise with the ``hide-input`` tag):
printing the built pages avoids both, and the PDF shows exactly what the site shows.
"""
from __future__ import annotations

import argparse
import functools
import html
import http.server
import io
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox", "--headless=new", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
STUDENT_PDF = "pdf/transformers-built-by-hand.pdf"  # paths in the built site (page_assets.py)
INSTRUCTORS_PDF = "pdf/transformers-built-by-hand-instructors.pdf"
INSTRUCTORS_PAGE = "book/instructors"  # in the instructors' edition only
PAGE_FORMAT = "A4"
MARGIN = {"top": "16mm", "bottom": "20mm", "left": "15mm", "right": "15mm"}
TIMEOUT_MS = 180_000

# Run in each page before printing: wait for MathJax and the images, show the solutions (for
# the instructors' edition), unlink links to other pages, and list the sections for bookmarks.
PREPARE = r"""
async ([solutions]) => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  if (document.fonts && document.fonts.ready) await document.fonts.ready;
  await Promise.all([...document.images].map((i) => i.complete ? null
    : new Promise((done) => { i.addEventListener('load', done); i.addEventListener('error', done); })));
  const root = document.documentElement;
  root.classList.add('book-pdf');
  if (solutions) {
    root.classList.add('print-solutions');
    document.querySelectorAll('div.solution, div.solution .toggle-hidden').forEach((e) => e.classList.remove('toggle-hidden'));
  }
  for (const a of document.querySelectorAll('a[href]')) {
    const url = new URL(a.href, location.href);
    if (url.origin === location.origin && url.pathname !== location.pathname) a.removeAttribute('href');
  }
  // An equation, table or output wider than the paper is scaled down to fit (a PDF cannot scroll).
  let fitted = 0;
  for (const box of document.querySelectorAll(
      '.bd-article div.math > mjx-container, .bd-article div.pst-scrollable-table-container, '
      + '.bd-article div.cell_output div.output')) {
    if (box.scrollWidth > box.clientWidth + 1) {
      box.style.zoom = (box.clientWidth / box.scrollWidth).toFixed(3);
      fitted += 1;
    }
  }
  const article = document.querySelector('article.bd-article') || document.body;
  const h1 = article.querySelector('h1');
  const text = (e) => [...e.childNodes].filter((n) => !(n.classList && n.classList.contains('headerlink')))
                                      .map((n) => n.textContent).join('').replace(/\s+/g, ' ').trim();
  const problems = [...document.querySelectorAll('mjx-merror')].map((e) => e.textContent.slice(0, 80))
    .concat([...document.images].filter((i) => !i.naturalWidth).map((i) => `image not loaded: ${i.src}`));
  return {title: h1 ? text(h1) : document.title, problems, fitted};
}
"""


@dataclass
class Part:
    path: str  # in the site, e.g. "book/02_attention.html"
    title: str = ""
    pdf: bytes = b""
    pages: int = 0
    sections: list[tuple[str, int]] = field(default_factory=list)  # (title, page within the part)


def toc_pages(root: Path = ROOT) -> list[str]:
    """The site paths of every page of _toc.yml, in order."""
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("root", "file") and isinstance(value, str):
                    found.append(f"{Path(value).with_suffix('').as_posix()}.html")
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(yaml.safe_load((root / "_toc.yml").read_text(encoding="utf-8")))
    return found


def book_config(root: Path = ROOT) -> dict:
    return yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8")) or {}


class _Server:
    def __init__(self, directory: Path):
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(directory)))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_port}/"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _sections(pdf: bytes) -> list[tuple[str, int]]:
    """The second-level bookmarks Chromium wrote from the page's headings: (title, page)."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    found = []

    def walk(items, depth):
        for item in items:
            if isinstance(item, list):
                walk(item, depth + 1)
            elif depth == 1:  # depth 0: the page's own title (h1); 1: its sections (h2)
                try:
                    found.append((str(item.title).strip(), reader.get_destination_page_number(item)))
                except Exception:  # noqa: BLE001 - a bookmark without a page: skip it
                    pass

    try:
        walk(reader.outline, 0)
    except Exception:  # noqa: BLE001 - no outline: the part gets no section bookmarks
        return []
    return found


def print_parts(base: str, paths: list[str], solutions: bool, browser) -> list[Part]:
    parts = []
    # The width of the paper's text column (A4 less the margins: 180 mm = 680 CSS px), so that the
    # page is laid out in the browser as it will be on paper.
    context = browser.new_context(viewport={"width": 680, "height": 960})
    context.set_default_timeout(TIMEOUT_MS)
    tab = context.new_page()
    tab.emulate_media(media="print")
    for path in paths:
        tab.goto(base + path, wait_until="load")
        info = tab.evaluate(PREPARE, [solutions])
        if info["problems"]:
            raise SystemExit(f"build_pdf: {path}: {info['problems'][:3]}")
        pdf = tab.pdf(format=PAGE_FORMAT, margin=MARGIN, print_background=True, outline=True, tagged=True)
        part = Part(path, info["title"], pdf)
        from pypdf import PdfReader

        part.pages = len(PdfReader(io.BytesIO(pdf)).pages)
        part.sections = _sections(pdf)
        parts.append(part)
    context.close()
    return parts


FRONT_CSS = """
@page { size: A4; margin: 25mm 22mm; }
body { font-family: "DejaVu Sans", "Liberation Sans", Arial, sans-serif; color: #222832; }
.title { page-break-after: always; text-align: center; padding-top: 60mm; }
.title h1 { font-size: 30pt; margin: 0 0 8mm; }
.title .edition { font-size: 15pt; margin: 0 0 30mm; }
.title p { font-size: 11pt; line-height: 1.5; }
h2 { font-size: 18pt; margin: 0 0 8mm; }
ol { list-style: none; padding: 0; margin: 0; font-size: 11.5pt; }
li { display: flex; align-items: baseline; margin: 0 0 3.2mm; }
li .name { flex: 0 1 auto; }
li .dots { flex: 1 1 auto; border-bottom: 1px dotted #888; margin: 0 2mm; }
li .page { flex: 0 0 auto; }
"""


def front_matter_html(title: str, edition: str, about: list[str], contents: list[tuple[str, int]]) -> str:
    items = "".join(
        f'<li><span class="name">{html.escape(name)}</span><span class="dots"></span>'
        f'<span class="page">{page}</span></li>'
        for name, page in contents
    )
    lines = "".join(f"<p>{line}</p>" for line in about)
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{FRONT_CSS}</style></head><body>"
            f"<section class='title'><h1>{html.escape(title)}</h1><p class='edition'>{html.escape(edition)}</p>{lines}</section>"
            f"<section><h2>Contents</h2><ol>{items}</ol></section></body></html>")


STAMP_CSS = """
@page { size: A4; margin: 0; }
html, body { margin: 0; padding: 0; }
.sheet { position: relative; width: 210mm; height: 297mm; page-break-after: always; overflow: hidden; }
.foot { position: absolute; left: 15mm; right: 15mm; bottom: 8mm; display: flex;
        justify-content: space-between; font: 8.5pt "DejaVu Sans", "Liberation Sans", Arial, sans-serif;
        color: #555; border-top: 0.3pt solid #bbb; padding-top: 1.5mm; }
"""


def stamps_html(footers: list[tuple[str, str]]) -> str:
    sheets = "".join(
        f'<div class="sheet"><div class="foot"><span>{html.escape(left)}</span><span>{html.escape(right)}</span></div></div>'
        if (left or right) else '<div class="sheet"></div>'
        for left, right in footers
    )
    return f"<!doctype html><html><head><meta charset='utf-8'><style>{STAMP_CSS}</style></head><body>{sheets}</body></html>"


def _print_html(browser, document: str) -> bytes:
    context = browser.new_context()
    tab = context.new_page()
    tab.set_content(document, wait_until="load")
    pdf = tab.pdf(format=PAGE_FORMAT, print_background=True, prefer_css_page_size=True)
    context.close()
    return pdf


def assemble(parts: list[Part], browser, title: str, edition: str, about: list[str], out: Path) -> int:
    """Join front matter and parts, stamp page numbers, add bookmarks; returns the page count."""
    from pypdf import PdfReader, PdfWriter

    front_pages = 2
    for _ in range(3):  # the contents' page numbers depend on how many pages the front matter takes
        starts, page = [], front_pages + 1
        for part in parts:
            starts.append(page)
            page += part.pages
        contents = [(part.title, start) for part, start in zip(parts, starts)]
        front = _print_html(browser, front_matter_html(title, edition, about, contents))
        pages = len(PdfReader(io.BytesIO(front)).pages)
        if pages == front_pages:
            break
        front_pages = pages
    writer = PdfWriter()
    writer.append(PdfReader(io.BytesIO(front)))
    footers: list[tuple[str, str]] = [("", "")] * front_pages
    for part, start in zip(parts, starts):
        writer.append(PdfReader(io.BytesIO(part.pdf)), import_outline=False)
        footers += [(f"{title} · {part.title}", str(start + i)) for i in range(part.pages)]
    stamps = PdfReader(io.BytesIO(_print_html(browser, stamps_html(footers))))
    for page, stamp, (left, right) in zip(writer.pages, stamps.pages, footers):
        if left or right:
            page.merge_page(stamp)
    contents_item = writer.add_outline_item(title="Contents", page_number=1)
    del contents_item
    for part, start in zip(parts, starts):
        item = writer.add_outline_item(title=part.title, page_number=start - 1)
        for name, page in part.sections:
            writer.add_outline_item(title=name, page_number=start - 1 + page, parent=item)
    writer.add_metadata({"/Title": f"{title} ({edition})", "/Author": str(book_config().get("author", ""))})
    writer.page_mode = "/UseOutlines"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("wb") as f:
        writer.write(f)
    return len(writer.pages)


def build(html_dir: Path, editions: list[str] | None = None, quiet: bool = False) -> dict[str, Path]:
    """Write the PDF editions ("student", "instructors") into ``html_dir``; returns their paths."""
    from playwright.sync_api import sync_playwright

    html_dir = Path(html_dir).resolve()
    if not (html_dir / "search.html").is_file():
        raise SystemExit(f"build_pdf: {html_dir} is not a built book (no search.html): run scripts/build_book.sh")
    if not CHROMIUM.is_file():
        raise SystemExit(f"build_pdf: {CHROMIUM} not found: install Debian's chromium "
                         "(sudo bash scripts/setup.sh --browser) or set CHROMIUM to a Chrome or Chromium")
    config = book_config()
    title = str(config.get("title", "The book"))
    repo = str((config.get("repository") or {}).get("url", "")).rstrip("/")
    about = [html.escape(str(config.get("author", "")))]
    about.append("Text and figures: CC BY 4.0 · code: MIT")
    if repo:
        about.append(f"Source, notebooks and the companion package: {html.escape(repo)}")
    pages = [p for p in toc_pages() if (html_dir / p).is_file()]
    missing = [p for p in toc_pages() if not (html_dir / p).is_file()]
    if missing:
        raise SystemExit(f"build_pdf: pages of _toc.yml missing from {html_dir}: {missing}")
    editions = editions or ["student", "instructors"]
    written = {}
    start = time.perf_counter()
    with _Server(html_dir) as base, __import__("contextlib").ExitStack() as stack:
        pw = stack.enter_context(sync_playwright())
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        stack.callback(browser.close)
        for edition in editions:
            if edition == "student":
                paths = [p for p in pages if not p.startswith(INSTRUCTORS_PAGE)]
                parts = print_parts(base, paths, solutions=False, browser=browser)
                out = html_dir / STUDENT_PDF
                label = "Without the solutions"
            elif edition == "instructors":
                parts = print_parts(base, pages, solutions=True, browser=browser)
                out = html_dir / INSTRUCTORS_PDF
                label = "Instructors' edition, with the solutions"
            else:
                raise SystemExit(f"build_pdf: unknown edition {edition!r} (student, instructors)")
            count = assemble(parts, browser, title, label, about, out)
            written[edition] = out
            if not quiet:
                print(f"build_pdf: {out.relative_to(html_dir.parent) if html_dir.parent in out.parents else out}: "
                      f"{count} pages, {out.stat().st_size / 1e6:.1f} MB "
                      f"({time.perf_counter() - start:.0f} s so far)")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--html", type=Path, default=ROOT / "_build" / "html", help="the built site (default: _build/html)")
    parser.add_argument("--edition", choices=["student", "instructors"], action="append",
                        help="only this edition (may be repeated; default: both)")
    args = parser.parse_args(argv)
    build(args.html, args.edition)
    return 0


if __name__ == "__main__":
    sys.exit(main())
