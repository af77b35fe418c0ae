// Search results without raw TeX. Sphinx's search page (searchtools.js) builds each result's
// snippet from the text of the page's HTML, in which a formula is still its TeX source; drop the
// formulas (MathJax typesets them only on the page itself) before the snippet is cut. The page's
// print-only title and contents list (sphinx-book-theme's #jb-print-docs-body, shown only on
// paper) came first in that text, so every snippet read "...Attention Contents 2.1. ...": drop
// it, and the links under the title (student version, launch buttons), so that snippets come
// from the page's own text.
// Loaded with `defer`: it runs after searchtools.js and before the search starts.
(() => {
  if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    page.querySelectorAll("#jb-print-docs-body, .onlyprint, p.student-download, a.headerlink")
      .forEach((e) => e.remove());
    page.querySelectorAll("div.math").forEach((e) => e.remove());
    page.querySelectorAll("span.math").forEach((e) => e.replaceWith("…"));
    return htmlToText(page.documentElement.outerHTML, anchor);
  };
})();
