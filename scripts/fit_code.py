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
import io
import re
import subprocess
import sys
import tokenize
from collections.abc import Callable, Iterator
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
        opening = index
        tags: set[str] = set()
        while index < len(lines) and lines[index].startswith(":"):
            option = re.match(r":tags:\s*\[(.*)\]", lines[index])
            if option:
                tags |= {tag.strip().strip("'\"") for tag in option.group(1).split(",") if tag.strip()}
            index += 1
        if index > opening and not lines[index].strip():
            index += 1  # the blank line that ends the options belongs to the fence, not the source
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


def normalised_dump(source: str) -> str:
    """``ast.dump`` of the source with every docstring's whitespace collapsed: re-wrapping a
    docstring changes its line breaks, never its words."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str):
                    first.value.value = " ".join(first.value.value.split())
    return ast.dump(tree)


PRAGMA = re.compile(r"#\s*(type:|noqa|pragma|fmt:|pyright:)")


def comment_lines_above(source: str) -> str:
    """Move each trailing comment of a wide line onto its own line above it, at its indentation."""
    lines = source.split("\n")
    moves = []
    for token in tokenize.generate_tokens(io.StringIO(source + "\n").readline):
        if token.type != tokenize.COMMENT:
            continue
        row, column = token.start
        line = lines[row - 1]
        if line[:column].strip() and len(line) > WIDTH:
            if PRAGMA.match(token.string):  # a pragma stays on its line; a comment after it moves
                column = line.find("  # ", column + 1) + 2
                if column < 2:
                    continue
            moves.append((row - 1, column))
    for index, column in reversed(moves):
        line = lines[index]
        indent = line[: len(line) - len(line.lstrip())]
        lines[index : index + 1] = [indent + line[column:].strip(), line[:column].rstrip()]
    return "\n".join(lines)


def break_point(line: str, start: int) -> int:
    """The last space after ``start`` and within WIDTH at which to break ``line``: preferably one
    outside brackets and ``literals``, so that a shape such as (batch, n, m) stays on one line."""
    depth, literal, spaces, outside = 0, False, [], []
    for column, character in enumerate(line[: WIDTH + 1]):
        if line.startswith("``", column):
            literal = not literal
        elif character in "([{":
            depth += 1
        elif character in ")]}":
            depth = max(depth - 1, 0)
        elif character == " " and column > start:
            spaces.append(column)
            if depth == 0 and not literal:
                outside.append(column)
    return (outside or spaces or [-1])[-1]


def wrap(lines: list[str], index: int, indent: str, prefix: str, joinable: Callable[[str], bool]) -> None:
    """Break the wide line ``lines[index]`` at spaces; each overflow starts the next line when that
    line continues the same paragraph (``joinable``), or a new line ``indent + prefix`` otherwise."""
    while len(lines[index]) > WIDTH:
        line = lines[index]
        start = len(line) - len(line.lstrip()) + len(prefix) + (3 if line.lstrip().startswith('"""') else 0)
        cut = break_point(line, start)
        if cut <= start:
            return  # one word wider than the page: leave it to a person
        head, tail = line[:cut].rstrip(), line[cut + 1 :].strip()
        lines[index] = head
        following = lines[index + 1] if index + 1 < len(lines) else None
        if following is not None and joinable(following):
            lines[index + 1] = indent + prefix + tail + " " + following.strip()[len(prefix) :].lstrip()
        else:
            lines.insert(index + 1, indent + prefix + tail)
        index += 1


def wrap_comments(source: str) -> str:
    """Re-wrap wide full-line comments, carrying the overflow into the comment line below when it
    has the same indentation."""
    lines = source.split("\n")
    index = 0
    while index < len(lines):
        line = lines[index]
        if len(line) > WIDTH and line.lstrip().startswith(("# ", "#: ")):
            indent = line[: len(line) - len(line.lstrip())]
            prefix = "#: " if line.lstrip().startswith("#: ") else "# "

            def joinable(following: str, indent: str = indent, prefix: str = prefix) -> bool:
                rest = following[len(indent + prefix) :]
                return following.startswith(indent + prefix) and rest[:1] not in ("", " ", "-", "*")

            wrap(lines, index, indent, prefix, joinable)
        index += 1
    return "\n".join(lines)


SECTION = re.compile(r"^(\s*)(Args|Arguments|Parameters|Returns|Raises|Yields|Attributes|Examples?|Notes?):\s*$")
LABEL = re.compile(r"^[A-Za-z_`*][\w`*]{0,30}: ")
ITEM_SECTIONS = {"Args", "Arguments", "Parameters", "Raises", "Attributes"}


def wrap_docstrings(source: str) -> str:
    """Re-wrap wide docstring lines (Google style: an item of Args or Raises continues 4 columns in)."""
    lines = source.split("\n")
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                if isinstance(first.value.value, str) and first.end_lineno is not None:
                    spans.append((first.lineno - 1, first.end_lineno - 1))
    for start, end in sorted(spans, reverse=True):
        body = lines[start : end + 1]
        section: tuple[str, int] | None = None
        index = 0
        while index < len(body):
            line = body[index]
            depth = len(line) - len(line.lstrip())
            header = SECTION.match(line)
            if header:
                section = (header.group(2), len(header.group(1)))
            elif line.strip() and section and depth <= section[1]:
                section = None
            if len(line) > WIDTH and not header:
                item = section is not None and section[0] in ITEM_SECTIONS and depth == section[1] + 4
                indent = " " * (depth + 4 if item else depth)
                # "source: ..." outside Args and Raises: one entry of a list; the next entry, or a
                # sentence after the list, stays on its own line
                one_liners = not item and LABEL.match(line.lstrip()) is not None

                def joinable(following: str, indent: str = indent, one_liners: bool = one_liners) -> bool:
                    rest = following[len(indent) :]
                    return (
                        following.startswith(indent)
                        and rest[:1] not in ("", " ")
                        and not rest.startswith(('"""', "- ", "* "))
                        and not SECTION.match(following)
                        and not LABEL.match(rest)
                        and not (one_liners and rest[:1].isupper())
                    )

                before = len(body)
                wrap(body, index, indent, "", joinable)
                index += len(body) - before
            index += 1
        lines[start : end + 1] = body
    return "\n".join(lines)


STRING_LINE = re.compile(r"^(\s*)([fF]?)([\"'])(.*)\3([,)]*)$")


def split_string(line: str) -> list[str] | None:
    """A wide line holding one string literal, split at spaces into implicitly concatenated
    literals that fit (never inside an f-string's braces), or None if it cannot be split."""
    match = STRING_LINE.match(line)
    if not match or '"""' in line or "\\" in match.group(4):
        return None
    indent, prefix, quote, text, closing = match.groups()
    parts = []
    while len(indent) + len(prefix) + len(text) + 2 + len(closing) > WIDTH:
        room = WIDTH - len(indent) - len(prefix) - 2
        depth, cut = 0, -1
        for column, character in enumerate(text[:room]):
            depth += {"{": 1, "}": -1}.get(character, 0)
            if character == " " and depth == 0:
                cut = column
        if cut <= 0:
            return None
        head, text = text[: cut + 1], text[cut + 1 :]
        parts.append(head)
    parts.append(text)
    return [
        indent + (prefix if "{" in part else "") + quote + part + quote + (closing if last else "")
        for last, part in ((index == len(parts) - 1, part) for index, part in enumerate(parts))
    ]


def split_strings(source: str) -> str:
    """Split the wide string literals of the source (see split_string), where the AST stays the same."""
    lines = source.split("\n")
    for index in reversed(range(len(lines))):
        if len(lines[index]) <= WIDTH:
            continue
        pieces = split_string(lines[index])
        if pieces is None:
            continue
        candidate = lines[:index] + pieces + lines[index + 1 :]
        try:
            same = normalised_dump("\n".join(candidate)) == normalised_dump(source)
        except SyntaxError:
            same = False
        if same:
            lines = candidate
    return "\n".join(lines)


def formatted(source: str) -> str | None:
    """The source fitted to WIDTH columns, or None when ruff fails or the AST changes.

    Trailing comments of wide lines move above them, wide comments and docstrings are re-wrapped,
    and, if a line is still too wide, ruff formats the cell at WIDTH columns."""
    new = wrap_docstrings(wrap_comments(comment_lines_above(source)))
    if any(len(line) > WIDTH for line in new.splitlines()):
        result = subprocess.run(
            [sys.executable, "-m", "ruff", "format", f"--line-length={WIDTH}", "--stdin-filename=cell.py", "-"],
            input=new + "\n",
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        if result.returncode != 0:
            return None
        new = result.stdout.rstrip("\n")
    new = split_strings(new)
    if normalised_dump(source) != normalised_dump(new):
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
