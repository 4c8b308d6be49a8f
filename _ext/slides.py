"""Slides for each Part of the book, made from its pages as they were just built.

When the HTML build ends, each numbered Part of ``_toc.yml`` gets ``slides/part-<n>.html``: a
title slide that lists the Part's chapters, then for each chapter its "In this chapter" list, one
slide per figure of its text (exercises and solutions aside) with the figure's caption, and its
summary. Everything is taken from the built pages, so the figures and the numbers in captions and
summaries are the ones this build computed, never a copy. The slides are one HTML page that
scrolls a slide at a time (CSS scroll snapping); the arrow keys, Page Up/Down and the space bar
move between slides. Math is rendered by the site's own MathJax, and links point back into the
chapters. The preface links the slides of every Part.
"""

from __future__ import annotations

import copy
import html
from pathlib import Path
from typing import Any

import yaml
from bs4 import BeautifulSoup, Tag
from sphinx.application import Sphinx

SLIDES_FOLDER = "slides"

STYLE = """
html { scroll-snap-type: y mandatory; }
body { margin: 0; font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1a1a1a;
       background: #fff; }
main { margin: 0; }
section.slide { box-sizing: border-box; min-height: 100vh; scroll-snap-align: start; padding: 5vh 7vw;
                display: flex; flex-direction: column; justify-content: center; border-bottom: 1px solid #ccc; }
h1 { font-size: 2.4rem; margin: 0 0 1rem; }
h2 { font-size: 1.7rem; margin: 0 0 1rem; }
p, li, figcaption { font-size: 1.15rem; line-height: 1.45; }
figure { margin: 0; display: flex; flex-direction: column; align-items: center; }
figure img { max-width: 100%; max-height: 60vh; object-fit: contain; }
figcaption { max-width: 60rem; margin-top: 0.8rem; }
a { color: #0b5cad; }
.source { font-size: 0.95rem; color: #444; margin-top: 1.2rem; }
"""

KEYS = """
document.addEventListener('keydown', (event) => {
  const forward = ['ArrowRight', 'ArrowDown', 'PageDown', ' '].includes(event.key);
  const back = ['ArrowLeft', 'ArrowUp', 'PageUp'].includes(event.key);
  if (!forward && !back) return;
  const slides = Array.from(document.querySelectorAll('section.slide'));
  const current = slides.findIndex((slide) => slide.getBoundingClientRect().top > -10);
  const target = slides[Math.max(0, Math.min(slides.length - 1, (current < 0 ? 0 : current) + (forward ? 1 : -1)))];
  event.preventDefault();
  target.scrollIntoView({behavior: 'instant', block: 'start'});
});
"""

#: The configuration Sphinx gives MathJax on every page: only math that Sphinx wrote is typeset.
MATHJAX_CONFIG = (
    'window.MathJax = {"options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"}}'
)


def parts(toc_file: Path) -> list[tuple[str, list[str]]]:
    """The numbered Parts of ``_toc.yml``: each caption, and its chapters' page names (``book/<slug>``)."""
    toc = yaml.safe_load(toc_file.read_text())
    return [
        (str(part["caption"]), [str(chapter["file"]) for chapter in part.get("chapters", [])])
        for part in toc.get("parts", [])
        if str(part.get("caption", "")).startswith("Part ")
    ]


def _plain_links(element: Tag, page: str) -> Tag:
    """A copy of element whose links work from the slides' folder: a link inside the chapter (``#x``)
    or to a sibling page (``x.html``) is rewritten to ``../book/...``; heading anchors ("#") go."""
    element = copy.copy(element)
    for anchor in element.select("a.headerlink"):
        anchor.decompose()
    for link in element.find_all("a", href=True):
        href = str(link["href"])
        if href.startswith("#"):
            link["href"] = f"../{page}.html{href}"
        elif not href.startswith(("http:", "https:", "mailto:", "../", "/")):
            link["href"] = f"../{Path(page).parent.as_posix()}/{href}"
    return element


def _outside_exercises(element: Tag) -> bool:
    """Not inside an exercise or a solution (whose figures belong to the reader's work)."""
    return not any({"exercise", "solution"} & set(parent.get_attribute_list("class")) for parent in element.parents)


def chapter_slides(page: str, built: str) -> list[str]:
    """The slides of one chapter, from its built page (``page`` is ``book/<slug>``)."""
    soup = BeautifulSoup(built, "html.parser")
    article = soup.select_one("article.bd-article")
    if article is None or article.find("h1") is None:
        raise ValueError(f"{page}.html has no article with a title: the theme's layout changed")
    title = _plain_links(article.find("h1"), page).get_text(" ", strip=True)  # type: ignore[arg-type]
    link = f'<p class="source"><a href="../{page}.html">Read the chapter: {html.escape(title)}</a></p>'
    slides = []
    overview = next(
        (
            admonition
            for admonition in article.select("div.admonition")
            if admonition.find(class_="admonition-title")
            and admonition.find(class_="admonition-title").get_text(strip=True) == "In this chapter"  # type: ignore[union-attr]
        ),
        None,
    )
    listed = overview.find(["ul", "ol"]) if overview is not None else None
    slides.append(f"<h2>{html.escape(title)}</h2>" + (str(_plain_links(listed, page)) if listed else "") + link)
    for figure in article.select("figure"):
        image = figure.find("img")
        if image is None or not _outside_exercises(figure):
            continue
        shown = _plain_links(figure, page)
        shown.attrs.pop("id", None)  # the chapter's page keeps the anchor
        slides.append(f"<h2>{html.escape(title)}</h2>{shown}")
    summary = article.select_one("section#summary")
    points = summary.find(["ul", "ol"]) if summary is not None else None
    if points is not None:
        slides.append(f"<h2>{html.escape(title)}: summary</h2>{_plain_links(points, page)}{link}")
    return slides


def part_slides(caption: str, chapters: list[tuple[str, str]], mathjax: str) -> str:
    """The slides page of one Part: ``chapters`` holds each chapter's page name and built HTML."""
    titles = []
    body = []
    for page, built in chapters:
        slides = chapter_slides(page, built)
        titles.append(BeautifulSoup(slides[0], "html.parser").find("h2").get_text())  # type: ignore[union-attr]
        body += slides
    contents = "".join(
        f'<li><a href="../{page}.html">{html.escape(title)}</a></li>'
        for (page, _), title in zip(chapters, titles, strict=True)
    )
    first = (
        f"<h1>{html.escape(caption)}</h1><p>Slides made from the chapters as this site was built: every "
        f"figure and number is the book's own, computed in the build. Use the arrow keys, or scroll.</p>"
        f"<ul>{contents}</ul>"
    )
    sections = "\n".join(f'<section class="slide">{slide}</section>' for slide in [first, *body])
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(caption)}: slides</title>
<link rel="icon" href="../_static/favicon.svg">
<style>{STYLE}</style>
<script>{MATHJAX_CONFIG}</script>
<script defer src="../{mathjax}"></script>
</head>
<body>
<main>
{sections}
</main>
<script>{KEYS}</script>
</body>
</html>
"""


def write_slides(app: Sphinx, exception: Exception | None) -> None:
    if exception is not None or app.builder.name != "html":
        return
    outdir = Path(app.outdir)
    mathjax = "_static/" + str(app.config.mathjax_path)
    folder = outdir / SLIDES_FOLDER
    folder.mkdir(exist_ok=True)
    for number, (caption, pages) in enumerate(parts(Path(app.srcdir) / "_toc.yml"), start=1):
        built = [(page, (outdir / f"{page}.html").read_text(encoding="utf-8")) for page in pages]
        (folder / f"part-{number}.html").write_text(part_slides(caption, built, mathjax), encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    # after site_assets copies MathJax into _static (both run when the build finishes)
    app.connect("build-finished", write_slides, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
