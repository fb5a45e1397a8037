"""A MkDocs hook (docs/mkdocs.yml, `hooks:`): the notebook pages' contents point at their own headings.

mkdocs-jupyter (0.26) makes a notebook page's table of contents with Python-Markdown's slugs, which drop a code
span (a heading "The same numbers through `MultiHeadAttention`" gets `#the-same-numbers-through`), while the
page's headings get ids from nbconvert's text, code included (`the-same-numbers-through-multiheadattention`).
The contents and the headings list the same headings in the same order, so each entry takes its heading's id.
"""

import re

_HEADING_ID = re.compile(r"<h[1-6][^>]*\sid=\"([^\"]+)\"")


def _entries(toc):
    for item in toc:
        yield item
        yield from _entries(item.children)


def on_page_content(html, page, config, files):
    if page.file.src_path.endswith(".ipynb"):
        ids = _HEADING_ID.findall(html)
        entries = list(_entries(page.toc))
        if len(ids) == len(entries):
            for entry, heading_id in zip(entries, ids):
                entry.id = heading_id
    return html
