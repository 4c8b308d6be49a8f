"""Every chapter in _toc.yml executes top to bottom in a fresh kernel, on this machine's device."""

from __future__ import annotations

from pathlib import Path

import pytest

from chapters import ChapterFailed, execute_chapter, toc_chapters

pytestmark = pytest.mark.chapter


@pytest.mark.parametrize("chapter", toc_chapters(), ids=lambda chapter: chapter.stem)
def test_chapter_executes(chapter: Path) -> None:
    try:
        execute_chapter(chapter)
    except ChapterFailed as failure:
        pytest.fail(str(failure), pytrace=False)
