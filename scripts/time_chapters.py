"""Print each chapter's execution time on this machine, and the total.

    python scripts/time_chapters.py                 # every chapter in _toc.yml
    python scripts/time_chapters.py book/preface.md # just these

Each chapter runs in a fresh kernel, as in a test or in Colab. The budgets are
those of CONTRIBUTING.md: 30 s for a chapter without training, 120 s with.
"""

from __future__ import annotations

import sys
from pathlib import Path

from chapters import ROOT, execute_chapter, toc_chapters


def main(arguments: list[str]) -> int:
    chapters = [Path(argument).resolve() for argument in arguments] or toc_chapters()
    total = 0.0
    print(f"{'chapter':<32} {'seconds':>8}")
    for chapter in chapters:
        execution = execute_chapter(chapter)
        total += execution.seconds
        print(f"{chapter.relative_to(ROOT / 'book').as_posix():<32} {execution.seconds:>8.1f}", flush=True)
    print(f"{'total':<32} {total:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
