"""The whole book builds with Sphinx warnings as errors and nitpicky references, and every page links to Colab."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from chapters import ROOT, colab_url, is_notebook, toc_files

pytestmark = pytest.mark.build


def test_book_builds_without_warnings(book_build) -> None:
    warnings = [line for line in book_build.log.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line)]
    assert book_build.returncode == 0 and not warnings, (
        "the book build failed or warned:\n" + "\n".join(warnings or book_build.log.splitlines()[-40:])
    )


@pytest.mark.parametrize("page", toc_files(), ids=lambda page: page.stem)
def test_every_toc_page_is_built(book_build, page: Path) -> None:
    html = book_build.html / page.relative_to(ROOT).with_suffix(".html")
    assert html.is_file(), f"{page.name} is in _toc.yml but {html.name} was not built"


@pytest.mark.parametrize("chapter", [page for page in toc_files() if is_notebook(page)], ids=lambda page: page.stem)
def test_colab_button_opens_the_chapters_notebook(book_build, chapter: Path) -> None:
    html = book_build.html / chapter.relative_to(ROOT).with_suffix(".html")
    soup = BeautifulSoup(html.read_text(), "html.parser")
    links = [anchor["href"] for anchor in soup.find_all("a", href=True) if "colab.research.google.com" in anchor["href"]]
    expected = colab_url(chapter)
    assert links == [expected], f"{chapter.name}: Colab links {links}, expected [{expected}]"
