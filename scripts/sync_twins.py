"""Write each chapter's Colab twin: ``book/<slug>.ipynb`` from ``book/<slug>.md``.

The twin carries no outputs (it is regenerated from the text notebook), so
Colab opens a clean notebook and git diffs stay small::

    python scripts/sync_twins.py          # write the twins
    python scripts/sync_twins.py --check  # exit 1 if a twin is stale or missing
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext

from chapters import BOOK, book_chapters, write_or_check


def chapters() -> list[Path]:
    """The executable chapters in book/, whether or not _toc.yml lists them yet."""
    return book_chapters()


def twin_text(chapter: Path) -> str:
    notebook = jupytext.read(chapter)
    # Stable cell ids (nbformat draws random ones), so a twin changes only when its chapter does.
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"
    text: str = jupytext.writes(notebook, fmt="ipynb")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale twins instead of writing them")
    args = parser.parse_args()
    expected = {chapter.with_suffix(".ipynb"): twin_text(chapter) for chapter in chapters()}
    orphans = [twin for twin in BOOK.glob("*.ipynb") if not twin.with_suffix(".md").exists()]
    return write_or_check(expected, orphans, args.check, fix="run make sync")

if __name__ == "__main__":
    sys.exit(main())
