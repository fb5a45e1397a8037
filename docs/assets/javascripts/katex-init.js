// Renders the mathematics with the copy of KaTeX in site/assets/katex (no CDN).
// Markdown pages: pymdownx.arithmatex wraps each formula in an element of class "arithmatex" as \( \) or \[ \].
// Notebook pages: the markdown cells keep their $ and $$ delimiters.
(function () {
  function renderAll(root) {
    root.querySelectorAll(".arithmatex").forEach(function (element) {
      var tex = element.textContent.trim();
      var display = tex.startsWith("\\[");
      tex = tex.replace(/^\\[\[(]/, "").replace(/\\[\])]$/, "");
      katex.render(tex, element, { displayMode: display, throwOnError: false });
    });
    root.querySelectorAll(".jp-MarkdownOutput").forEach(function (element) {
      renderMathInElement(element, {
        delimiters: [
          { left: "$$", right: "$$", display: true },
          { left: "$", right: "$", display: false },
          { left: "\\(", right: "\\)", display: false },
          { left: "\\[", right: "\\]", display: true },
        ],
        throwOnError: false,
      });
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(function () { renderAll(document); });   // Material's "page loaded" signal
  } else {
    document.addEventListener("DOMContentLoaded", function () { renderAll(document); });
  }
})();
