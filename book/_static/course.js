// The course's reader aids (added to every page by book/_ext/page_assets.py; issue 21).
//
// 1. Figures: every figure fits its column (course.css); a click or tap opens it in a viewer at
//    its own size (the width the notebook or the diagram was drawn for), scrolling both ways, so
//    that a multi-panel plot's tick labels are as large on a phone as on a desktop. The viewer is
//    a modal <dialog>: Escape or its "Close" button closes it, and focus returns to the figure.
//    Without JavaScript, the image is still a link to the image file.
// 2. Scroll boxes: a display equation, table or output wider than its column scrolls inside its
//    own box (course.css draws a shadow at the edge that has more). Such a box becomes a tab stop
//    with a label, so that keyboard users can scroll it too (WCAG 2.1.1; axe-core's
//    scrollable-region-focusable); a box that fits is not a tab stop.
// 3. The chapter list and the page's contents, opened as drawers on narrow screens, close once
//    the reader taps an entry: the page then shows the section the entry leads to.
(() => {
  "use strict";

  // --- 1. figures ---------------------------------------------------------------------------
  const FIGURES = ".bd-article figure img, .bd-article div.cell_output img";

  function logicalWidth(img) {
    // myst-nb writes the notebook figure's logical size into the style (PNG stored at twice its
    // pixels); an SVG diagram has its own width.
    const styled = parseFloat(img.style.width);
    if (styled > 0) return styled;
    const attr = parseFloat(img.getAttribute("width"));
    if (attr > 0) return attr;
    return img.naturalWidth || img.getBoundingClientRect().width;
  }

  let viewer = null;

  function buildViewer() {
    const dialog = document.createElement("dialog");
    dialog.className = "figure-viewer";
    dialog.setAttribute("aria-label", "Figure at full size");
    dialog.innerHTML =
      '<div class="figure-viewer__bar"><p>Full size: scroll or drag to move around.</p>' +
      '<button type="button" class="figure-viewer__close">Close</button></div>' +
      '<div class="figure-viewer__scroll" tabindex="0" role="region" aria-label="Figure, scrollable"></div>';
    dialog.querySelector(".figure-viewer__close").addEventListener("click", () => dialog.close());
    dialog.addEventListener("close", () => {
      dialog.querySelector(".figure-viewer__scroll").replaceChildren();
    });
    document.body.appendChild(dialog);
    return dialog;
  }

  function openViewer(img) {
    viewer = viewer || buildViewer();
    const big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    big.style.width = `${Math.round(logicalWidth(img))}px`;
    viewer.querySelector(".figure-viewer__scroll").replaceChildren(big);
    viewer.showModal();
    viewer.querySelector(".figure-viewer__close").focus();
  }

  function wrapFigures() {
    document.querySelectorAll(FIGURES).forEach((img) => {
      if (img.closest("a")) return;
      const link = document.createElement("a");
      link.className = "figure-zoom";
      link.href = img.getAttribute("src");
      link.title = "Open the figure at full size";
      img.replaceWith(link);
      link.appendChild(img);
      link.addEventListener("click", (event) => {
        if (typeof HTMLDialogElement !== "function") return; // old browser: follow the link
        event.preventDefault();
        openViewer(img);
      });
    });
  }

  // --- 2. scroll boxes ----------------------------------------------------------------------
  const BOXES = [
    [".bd-article div.math > mjx-container", "Equation"],
    [".bd-article div.pst-scrollable-table-container", "Table"],
    [".bd-article div.cell_output div.output", "Output"],
  ];

  function markScrollBoxes() {
    for (const [selector, what] of BOXES) {
      document.querySelectorAll(selector).forEach((box) => {
        box.classList.add("scroll-box");
        const overflows = box.scrollWidth > box.clientWidth + 1;
        if (overflows && box.getAttribute("tabindex") !== "0") {
          // (MathJax marks a formula tabindex="-1" when formulas are kept out of the tab order)
          box.dataset.scrollBoxTabindex = box.getAttribute("tabindex") || "";
          box.setAttribute("tabindex", "0");
          box.setAttribute("role", "region");
          box.setAttribute("aria-label", `${what}, scrolls sideways`);
          box.dataset.scrollBox = "marked";
        } else if (!overflows && box.dataset.scrollBox === "marked") {
          if (box.dataset.scrollBoxTabindex) box.setAttribute("tabindex", box.dataset.scrollBoxTabindex);
          else box.removeAttribute("tabindex");
          delete box.dataset.scrollBoxTabindex;
          box.removeAttribute("role");
          box.removeAttribute("aria-label");
          delete box.dataset.scrollBox;
        }
      });
    }
  }

  // --- 3. drawers ---------------------------------------------------------------------------
  function closeDrawerOnTap(event) {
    const link = event.target.closest && event.target.closest("a[href]");
    if (!link) return;
    const drawer = link.closest("dialog#pst-primary-sidebar-modal, dialog#pst-secondary-sidebar-modal");
    if (drawer && drawer.open) drawer.close();
  }

  // --- start ----------------------------------------------------------------------------------
  function start() {
    wrapFigures();
    markScrollBoxes();
    document.addEventListener("click", closeDrawerOnTap);
    let pending = null;
    window.addEventListener("resize", () => {
      clearTimeout(pending);
      pending = setTimeout(markScrollBoxes, 150);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
  // Formulas have their width only once MathJax has typeset them. course.js runs before MathJax
  // (both are deferred; the page lists this script first), while window.MathJax is still the
  // configuration: add a step to MathJax's own page-ready promise, so that anyone who awaits
  // MathJax.startup.promise finds the boxes marked.
  const config = window.MathJax;
  if (config && !config.version) {
    config.startup = config.startup || {};
    const ready = config.startup.pageReady;
    config.startup.pageReady = () => {
      const typeset = ready ? ready() : MathJax.startup.defaultPageReady();
      return Promise.resolve(typeset).then(markScrollBoxes);
    };
  } else if (config && config.startup && config.startup.promise) {
    config.startup.promise.then(markScrollBoxes);
  }
  window.addEventListener("load", markScrollBoxes);
})();
