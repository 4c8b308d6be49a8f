"""Write each chapter's Colab twins from ``book/<slug>.md``: the instructor's edition
``book/<slug>.ipynb`` (solutions folded; the page's Colab button opens it) and the student's edition
``book/student/<slug>.ipynb`` (no solutions: the graders say "Not yet" until the reader's function
passes).

First, each chapter's hidden bootstrap cell is brought up to date (it installs the package release
named by pyproject.toml's version, from the repository of _config.yml). The twin carries no outputs (it is regenerated from the text notebook), so
Colab opens a clean notebook and git diffs stay small. Its text is Markdown that Colab renders and
the cells the page collapses are folded (scripts/colab_twin.py)::

    python scripts/sync_twins.py          # write the twins
    python scripts/sync_twins.py --check  # exit 1 if a twin is stale or missing
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import jupytext
from colab_twin import colab_notebook

from chapters import BOOK, book_chapters, colab_bootstrap, write_or_check


def chapters() -> list[Path]:
    """The executable chapters in book/, whether or not _toc.yml lists them yet."""
    return book_chapters()


BOOTSTRAP_CELL = re.compile(r"(```\{code-cell\} ipython3\n:tags: \[remove-cell\]\n\n)# Colab only:.*?\n(```)", re.S)


def with_current_bootstrap(chapter: Path) -> str:
    """The chapter's text with its bootstrap cell as colab_bootstrap() writes it today."""
    return BOOTSTRAP_CELL.sub(
        lambda match: match[1] + colab_bootstrap() + "\n" + match[2], chapter.read_text(), count=1
    )


STUDENT = BOOK / "student"


def student_twin(chapter: Path) -> Path:
    return STUDENT / f"{chapter.stem}.ipynb"


def twin_text(chapter: Path, *, solutions: bool = True) -> str:
    notebook = colab_notebook(jupytext.read(chapter), solutions=solutions)
    # Stable cell ids (nbformat draws random ones), so a twin changes only when its chapter does.
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"
    text: str = jupytext.writes(notebook, fmt="ipynb")
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report stale twins instead of writing them")
    args = parser.parse_args()
    bootstraps = {chapter: with_current_bootstrap(chapter) for chapter in chapters()}
    if write_or_check(bootstraps, [], args.check, fix="run make sync") != 0:
        return 1
    expected = {chapter.with_suffix(".ipynb"): twin_text(chapter) for chapter in chapters()}
    expected |= {student_twin(chapter): twin_text(chapter, solutions=False) for chapter in chapters()}
    orphans = [twin for twin in BOOK.glob("*.ipynb") if not twin.with_suffix(".md").exists()]
    orphans += [twin for twin in STUDENT.glob("*.ipynb") if not (BOOK / f"{twin.stem}.md").exists()]
    return write_or_check(expected, orphans, args.check, fix="run make sync")


if __name__ == "__main__":
    sys.exit(main())
