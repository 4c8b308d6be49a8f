"""The whole book builds with Sphinx warnings as errors and nitpicky references, and every page links to Colab."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from chapters import ROOT, colab_url, is_notebook, toc_files

pytestmark = pytest.mark.build


def test_book_builds_without_warnings(book_build) -> None:
    """Everything but the chapters' own warnings, which test_chapter_builds_cleanly reports per chapter."""
    chapters = {warning for page in toc_files() for warning in book_build.warnings_of(page)}
    others = [warning for warning in book_build.warnings if warning not in chapters]
    if book_build.failed_chapters:  # a timed-out chapter's kernel is killed, and logs its death: part of that failure
        others = [warning for warning in others if not warning.startswith("[IPKernelApp] ERROR")]
    # First the build's own failure, with the end of its log (Sphinx's reason is there), then the warnings.
    assert book_build.returncode == 0 or chapters, "the book build failed without a chapter's warning;\n" + (
        book_build.log_tail()
    )
    assert not others, (
        "the book build warned outside its chapters:\n" + "\n".join(others) + "\n\n" + book_build.log_tail()
    )


@pytest.mark.parametrize("page", toc_files(), ids=lambda page: page.stem)
def test_chapter_builds_cleanly(book_build, page: Path) -> None:
    """A chapter executes without error and renders without a warning: one test per chapter, so
    a chapter that fails (a check of a trained result, say) names itself and nothing else fails."""
    warnings = book_build.warnings_of(page)
    if page.stem in book_build.failed_chapters:
        reason = next(warning for warning in warnings if "Executing notebook failed" in warning)
        claim = re.search(r"^\w*(?:Error|Failed): [\s\S]*?(?=\n\S*Traceback|\Z)", reason, re.M)
        pytest.fail(
            f"{page.name} failed to execute in the build:\n{claim.group(0) if claim else reason}", pytrace=False
        )
    assert not warnings, f"{page.name} built with warnings:\n" + "\n".join(warnings)


@pytest.mark.parametrize("page", toc_files(), ids=lambda page: page.stem)
def test_every_toc_page_is_built(book_build, page: Path) -> None:
    html = book_build.html / page.relative_to(ROOT).with_suffix(".html")
    assert html.is_file(), f"{page.name} is in _toc.yml but {html.name} was not built" + (
        f" (the build failed: see test_book_builds_without_warnings, or its log {book_build.log_path})"
        if book_build.returncode
        else ""
    )


@pytest.mark.parametrize("chapter", [page for page in toc_files() if is_notebook(page)], ids=lambda page: page.stem)
def test_colab_button_opens_the_chapters_notebook(book_build, chapter: Path) -> None:
    html = book_build.html / chapter.relative_to(ROOT).with_suffix(".html")
    soup = BeautifulSoup(html.read_text(), "html.parser")
    links = [
        anchor["href"] for anchor in soup.find_all("a", href=True) if "colab.research.google.com" in anchor["href"]
    ]
    expected = [colab_url(chapter), colab_url(chapter, student=True)]  # the instructor's and the student's editions
    assert links == expected, f"{chapter.name}: Colab links {links}, expected {expected}"
