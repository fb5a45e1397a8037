// nbconvert's notebook template loads MathJax from a CDN; mkdocs.yml points it here instead, so a notebook page
// makes no request outside site/. KaTeX (katex-init.js) renders the notebooks' mathematics.
