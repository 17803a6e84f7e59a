"""Main text of an HTML page, by trafilatura (boilerplate removal GAIA answers depend on).

Why a library: pages hide their chrome in ``<div class="sidebar">``, cookie banners, related
links and comment threads as often as in ``<nav>``/``<footer>``; trafilatura scores blocks by
text and link density (with readability and jusText as fallbacks) instead of trusting tag names.
The text comes as Markdown: headings as ``#``, list items as ``- ``, tables as ``|`` rows.
A page too small or too odd for it to find a main part is given whole as plain text, never as
nothing.
"""

from __future__ import annotations

import re


def html_to_text(html: str) -> tuple[str, str]:
    """``(title, main text)`` of an HTML document; the title is the page's ``<title>``."""
    from trafilatura import extract, html2txt, load_html

    tree = load_html(html)
    if tree is None:  # not HTML at all: the text as it came
        return "", html.strip()
    title = re.sub(r"\s+", " ", tree.findtext(".//title") or "").strip()
    main = extract(
        tree,
        output_format="markdown",
        include_tables=True,
        include_comments=False,
        include_images=False,
        include_links=False,
        favor_recall=True,  # GAIA questions turn on details: rather a little chrome than a lost fact
        deduplicate=False,
        with_metadata=False,
    )
    if not main:
        main = html2txt(html)
    return title, main.strip()
