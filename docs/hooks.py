"""A MkDocs hook (docs/mkdocs.yml, `hooks:`): the notebook pages' contents point at their own headings.

mkdocs-jupyter (0.26) makes a notebook page's table of contents with Python-Markdown's slugs, which drop a code
span (a heading "The same numbers through `MultiHeadAttention`" gets `#the-same-numbers-through`), while the
page's headings get ids from nbconvert's text, code included (`the-same-numbers-through-multiheadattention`).
The contents and the headings list the same headings in the same order, so each entry takes its heading's id
(and its full text, which the contents had also cut short).
"""

import html as html_text
import re

_HEADING = re.compile(r"<h[1-6][^>]*\sid=\"([^\"]+)\"[^>]*>(.*?)</h[1-6]>", re.S)
_TAG = re.compile(r"<[^>]+>")


def _entries(toc):
    for item in toc:
        yield item
        yield from _entries(item.children)


def on_page_content(html, page, config, files):
    if page.file.src_path.endswith(".ipynb"):
        headings = _HEADING.findall(html)
        entries = list(_entries(page.toc))
        if len(headings) == len(entries):
            for entry, (heading_id, inner) in zip(entries, headings):
                entry.id = heading_id
                entry.title = html_text.unescape(_TAG.sub("", inner)).rstrip("¶").strip()
    return html
