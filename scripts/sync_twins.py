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

from chapters import write_or_check

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def chapters() -> list[Path]:
    """The executable chapters: MyST text notebooks with a jupytext header."""
    return [path for path in sorted(BOOK.glob("*.md")) if path.read_text().startswith("---\njupytext:")]


def twin_text(chapter: Path) -> str:
    notebook = jupytext.read(chapter)
    # Stable cell ids (nbformat draws random ones), so a twin changes only when its chapter does.
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"
    return jupytext.writes(notebook, fmt="ipynb")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale twins instead of writing them")
    args = parser.parse_args()
    expected = {chapter.with_suffix(".ipynb"): twin_text(chapter) for chapter in chapters()}
    orphans = [twin for twin in BOOK.glob("*.ipynb") if not twin.with_suffix(".md").exists()]
    return write_or_check(expected, orphans, args.check, fix="run python scripts/sync_twins.py")

if __name__ == "__main__":
    sys.exit(main())
