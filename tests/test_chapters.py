"""Every chapter in _toc.yml runs top to bottom as an instructor would run it in Google Colab.

The book build (tests/test_build.py) executes the MyST sources with myst-nb; these tests
execute each chapter's ``.ipynb`` twin in a fresh kernel with myst-nb hidden and an empty
working directory, so the two paths a reader can take are both covered.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from chapters import ChapterFailed, execute_like_colab, toc_chapters

pytestmark = pytest.mark.chapter


@pytest.mark.parametrize("chapter", toc_chapters(), ids=lambda chapter: chapter.stem)
def test_chapter_runs_like_in_colab(chapter: Path) -> None:
    try:
        execution = execute_like_colab(chapter)
    except ChapterFailed as failure:
        pytest.fail(str(failure), pytrace=False)
    stream = "".join(
        output.get("text", "") for cell in execution.notebook.cells for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    )
    # Without myst-nb, the book's glue() prints "key = value": proof that the fallback ran.
    keys = re.findall(r"\bglue\(\s*\"(\w+)\"", chapter.read_text())
    printed = [key for key in keys if re.search(rf"^{key} = ", stream, re.M)]
    assert printed or not keys, f"{chapter.name}: no glued value was printed, so glue's Colab fallback did not run"
