"""Fit the code a reader sees to the page: no visible code line wider than 80 columns.

At the theme's default width a code cell on the site shows about 80 columns; a wider line makes
the reader scroll sideways. A code cell is *visible* unless it is tagged ``remove-cell``,
``remove-input``, ``hide-input`` or ``hide-cell``, or sits in a folded solution dropdown (between
``{solution-start}`` and ``{solution-end}``); lines of collapsed cells may keep the project's
width (120, pyproject.toml)::

    python scripts/fit_code.py                  # list visible lines over 80 columns, per chapter
    python scripts/fit_code.py --fix            # ruff-format the visible cells that have one
    python scripts/fit_code.py --fix book/x.md  # ... of some chapters only

``--fix`` formats only the visible cells that have a wide line, with ``ruff format --line-length
80`` on the cell's source, keeps the result only if the cell's AST is unchanged (``ast.dump``
before and after are equal: the cell computes the same thing), and writes the new source back
into the MyST file, touching nothing else (cell options, tags, markdown). Cells with IPython
magics or ``!`` lines are left alone. What the formatter cannot shorten (comments, strings,
docstrings) the listing still shows: fix those by hand (re-wrap comments and docstrings, split
strings by implicit concatenation). tests/test_sources.py fails on any visible wide line.
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chapters import ROOT, toc_chapters

WIDTH = 80
HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
FENCE = "```{code-cell} ipython3"
SOLUTION = re.compile(r"^```\{solution-(start|end)\}")


@dataclass(frozen=True)
class Cell:
    first: int  # index of the cell's first source line in the file's lines
    end: int  # index of its closing fence
    tags: frozenset[str]
    in_solution: bool
    source: str

    @property
    def visible(self) -> bool:
        return not (self.in_solution or HIDDEN_TAGS & self.tags)


def cells(lines: list[str]) -> Iterator[Cell]:
    """The code cells of a MyST chapter given as its lines (without line ends), in order."""
    in_solution = False
    index = 0
    while index < len(lines):
        line = lines[index]
        marker = SOLUTION.match(line)
        if marker:
            in_solution = marker.group(1) == "start"
        if line.rstrip() != FENCE:
            index += 1
            continue
        index += 1
        tags: set[str] = set()
        while index < len(lines) and lines[index].startswith(":"):
            option = re.match(r":tags:\s*\[(.*)\]", lines[index])
            if option:
                tags |= {tag.strip().strip("'\"") for tag in option.group(1).split(",") if tag.strip()}
            index += 1
        first = index
        while lines[index].rstrip() != "```":
            index += 1
        yield Cell(first, index, frozenset(tags), in_solution, "\n".join(lines[first:index]))
        index += 1


def wide_lines(chapter: Path, width: int = WIDTH) -> list[tuple[int, int, str]]:
    """(line number in the file, width, text) of each visible code line wider than ``width``."""
    lines = chapter.read_text().splitlines()
    return [
        (cell.first + offset + 1, len(text), text)
        for cell in cells(lines)
        if cell.visible
        for offset, text in enumerate(cell.source.splitlines())
        if len(text) > width
    ]


def has_magic(source: str) -> bool:
    return any(line.lstrip().startswith(("%", "!")) for line in source.splitlines())


def formatted(source: str) -> str | None:
    """The source formatted by ruff at WIDTH columns, or None when ruff fails or the AST changes."""
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", f"--line-length={WIDTH}", "--stdin-filename=cell.py", "-"],
        input=source + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if result.returncode != 0:
        return None
    new = result.stdout.rstrip("\n")
    if ast.dump(ast.parse(source)) != ast.dump(ast.parse(new)):
        return None
    return new


def fix(chapter: Path) -> tuple[int, list[int]]:
    """Format the chapter's visible cells that have a wide line; (cells changed, lines of cells skipped)."""
    text = chapter.read_text()
    lines = text.splitlines()
    changed, skipped = 0, []
    for cell in reversed(list(cells(lines))):  # from the end, so earlier indices stay valid
        if not cell.visible or all(len(line) <= WIDTH for line in cell.source.splitlines()):
            continue
        new = None if has_magic(cell.source) else formatted(cell.source)
        if new is None:
            skipped.append(cell.first + 1)
            continue
        if new != cell.source:
            lines[cell.first : cell.end] = new.splitlines()
            changed += 1
    if changed:
        chapter.write_text("\n".join(lines) + ("\n" if text.endswith("\n") else ""))
    return changed, sorted(skipped)


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", type=Path, help="chapters (default: every chapter in _toc.yml)")
    parser.add_argument("--fix", action="store_true", help="ruff-format the visible cells with a wide line")
    options = parser.parse_args(arguments)
    chapters = [path.resolve() for path in options.chapters] or toc_chapters()
    if options.fix:
        for chapter in chapters:
            changed, skipped = fix(chapter)
            if changed or skipped:
                note = f", skipped (magic or AST change) at lines {skipped}" if skipped else ""
                print(f"{chapter.name}: formatted {changed} cells{note}")
    total = 0
    for chapter in chapters:
        wide = wide_lines(chapter)
        total += len(wide)
        for number, width, _ in wide:
            print(f"{chapter.relative_to(ROOT)}:{number}: {width} columns")
    print(f"{total} visible code lines wider than {WIDTH} columns")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
