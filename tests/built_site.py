"""The pages of the built website, shared by the tests that read it (``test_site_*.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chapters import ROOT, colab_url, is_notebook, parts, toc_files


@dataclass(frozen=True)
class Page:
    """One HTML page of the site: a page of ``_toc.yml`` (with its source) or one Sphinx generates."""

    path: str  # relative to the html folder, for example "book/preface.html"
    source: Path | None = None  # book/<slug>.md for a page of _toc.yml

    @property
    def name(self) -> str:
        """A short name for test ids and screenshot files: the slug, or the generated page's stem."""
        return Path(self.path).stem

    @property
    def is_chapter(self) -> bool:
        """A page of ``_toc.yml``."""
        return self.source is not None

    @property
    def is_notebook(self) -> bool:
        """A chapter that executes, so it has a notebook to download and open in Colab."""
        return self.source is not None and is_notebook(self.source)

    def html_file(self, html_root: Path) -> Path:
        return html_root / self.path

    def colab_url(self, *, student: bool = False) -> str:
        assert self.source is not None, f"{self.path} has no notebook"
        return colab_url(self.source, student=student)


#: Every page of _toc.yml, in reading order.
CHAPTERS: list[Page] = [Page(page.relative_to(ROOT).with_suffix(".html").as_posix(), page) for page in toc_files()]
#: The chapters that execute: each has glued figures, a Colab link and a notebook download.
NOTEBOOKS: list[Page] = [page for page in CHAPTERS if page.is_notebook]
#: Pages Sphinx writes itself.
GENERATED: list[Page] = [Page("genindex.html"), Page("search.html")]
#: ``index.html`` only redirects to the first chapter.
REDIRECT = Page("index.html")
#: The slides of each numbered Part, which _ext/slides.py makes from the built chapters.
SLIDES: list[Page] = [Page(f"slides/part-{number}.html") for number in range(1, len(parts()) + 1)]
#: Every page a reader can open, redirect aside.
PAGES: list[Page] = CHAPTERS + GENERATED + SLIDES

#: Folders of the html output that hold assets, not pages (the theme ships two HTML templates there).
ASSET_FOLDERS = ("_static", "_sources", "_images")


def built_pages(html_root: Path) -> set[str]:
    """Every HTML page in the built site, as paths relative to ``html_root``."""
    return {
        path.relative_to(html_root).as_posix()
        for path in html_root.rglob("*.html")
        if path.relative_to(html_root).parts[0] not in ASSET_FOLDERS
    }


def page_id(page: Page) -> str:
    return page.name
