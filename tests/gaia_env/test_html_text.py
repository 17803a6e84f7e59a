"""readweb's main-text extraction (trafilatura) on pages this test saves to disk: the facts stay,
the page chrome goes, whatever tags the chrome hides in."""

from __future__ import annotations

from pathlib import Path

from aworld_gaia_env.tools.html_text import html_to_text

RELATED = "".join(f'<li><a href="/news/{i}">Related story number {i} you may like</a></li>' for i in range(12))

# chrome in <div>s with class names, not in <nav>/<aside>/<footer>: a tag list cannot see it
NEWS_PAGE = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Glacier retreat measured | The Daily Planet</title>
<script>window.dataLayer = [{{"tracking": "abc"}}];</script></head>
<body>
<div class="cookie-consent">We use cookies to improve your experience. Accept all cookies or manage preferences.</div>
<div class="site-menu"><ul>
  <li><a href="/">Home</a></li><li><a href="/world">World</a></li><li><a href="/science">Science</a></li>
  <li><a href="/sport">Sport</a></li><li><a href="/weather">Weather</a></li></ul></div>
<div class="layout">
 <div class="story-body">
  <h1>Glacier retreat measured</h1>
  <p class="byline">By A. Reporter, 3 March 2024</p>
  <p>The Rhone Glacier lost 1.7 kilometres of length between 1880 and 2020, according to a survey published
     on Tuesday by the Swiss Federal Institute for Forest, Snow and Landscape Research.</p>
  <p>Researchers combined historical photographs with drone measurements taken in the summer of 2023, and found
     that the rate of retreat doubled after 1990.</p>
  <h2>What the survey found</h2>
  <ul><li>Ice thickness fell by 40 metres at the tongue</li><li>Meltwater volume rose by 12 percent</li></ul>
  <table><tr><th>Year</th><th>Length (km)</th></tr><tr><td>1880</td><td>10.9</td></tr>
         <tr><td>2020</td><td>9.2</td></tr></table>
  <p>The team expects the glacier to lose a further third of its volume by 2050 under current emissions.</p>
 </div>
 <div class="sidebar"><h3>Most read</h3><ul>{RELATED}</ul></div>
</div>
<div id="comments"><h3>Comments</h3><div class="comment">First! Great article lol</div></div>
<div class="site-footer">Copyright 2024 The Daily Planet. All rights reserved. Terms | Privacy | Contact</div>
</body></html>"""

REFERENCE_PAGE = """<html><head><title>List of tallest penguins - Encyclopedia</title></head><body>
<main><h1>List of tallest penguins</h1>
<p>This list ranks living penguin species by the standing height of adults, as measured in the field.</p>
<table class="wikitable"><tr><th>Rank</th><th>Species</th><th>Height (cm)</th></tr>
<tr><td>1</td><td>Emperor penguin</td><td>122</td></tr>
<tr><td>2</td><td>King penguin</td><td>95</td></tr>
<tr><td>3</td><td>Gentoo penguin</td><td>90</td></tr></table>
<p>Heights of extinct species such as Palaeeudyptes klekowskii, estimated at 200 cm, are not ranked here.</p>
</main></body></html>"""


def _saved(tmp_path: Path, name: str, html: str) -> str:
    path = tmp_path / name
    path.write_text(html, encoding="utf-8")
    return path.read_text(encoding="utf-8")


def test_a_news_page_keeps_the_story_and_drops_div_chrome(tmp_path: Path) -> None:
    title, text = html_to_text(_saved(tmp_path, "news.html", NEWS_PAGE))
    assert title == "Glacier retreat measured | The Daily Planet"
    for fact in ("1.7 kilometres", "drone measurements", "rate of retreat doubled after 1990",
                 "a further third of its volume by 2050"):
        assert fact in text, fact
    assert "# Glacier retreat measured" in text and "## What the survey found" in text
    assert "- Ice thickness fell by 40 metres at the tongue" in text
    assert "| 1880 | 10.9 |" in text
    for chrome in ("cookies", "Related story number", "Most read", "First! Great article", "All rights reserved",
                   "dataLayer", "Weather"):
        assert chrome not in text, chrome


def test_a_reference_table_keeps_every_row(tmp_path: Path) -> None:
    title, text = html_to_text(_saved(tmp_path, "list.html", REFERENCE_PAGE))
    assert title == "List of tallest penguins - Encyclopedia"
    for row in ("| 1 | Emperor penguin | 122 |", "| 2 | King penguin | 95 |", "| 3 | Gentoo penguin | 90 |"):
        assert row in text, row
    assert "Palaeeudyptes klekowskii" in text


def test_a_tiny_or_non_html_page_is_never_empty(tmp_path: Path) -> None:
    assert html_to_text(_saved(tmp_path, "tiny.html", "<html><body><p>The answer is 42.</p></body></html>")) == (
        "",
        "The answer is 42.",
    )
    assert html_to_text("plain words, no markup") == ("", "plain words, no markup")
