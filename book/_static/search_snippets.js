// Search results without raw TeX. Sphinx's search page (searchtools.js) builds each result's
// snippet from the text of the page's HTML, in which a formula is still its TeX source; drop the
// formulas (MathJax typesets them only on the page itself) before the snippet is cut.
// Loaded with `defer`: it runs after searchtools.js and before the search starts.
(() => {
  if (typeof Search === "undefined" || typeof Search.htmlToText !== "function") return;
  const htmlToText = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const page = new DOMParser().parseFromString(htmlString, "text/html");
    page.querySelectorAll("div.math").forEach((e) => e.remove());
    page.querySelectorAll("span.math").forEach((e) => e.replaceWith("…"));
    return htmlToText(page.documentElement.outerHTML, anchor);
  };
})();
