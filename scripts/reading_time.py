"""How long each chapter takes to read: prose words at 200 a minute plus visible code statements at 12.

A chapter should read in 30 minutes or less. Prose is every word of the markdown cells (solutions
and answers in dropdowns included: a careful reader opens them), without directive options such as
``:alt:`` text, which the eye does not read. Code is what the code cells the page shows hold;
cells tagged ``remove-cell``, ``remove-input``, ``hide-input`` or ``hide-cell`` are hidden or
collapsed, and do not count. Code is counted in statements (a ``def`` line, an assignment, a call:
one each, however many lines it is wrapped over to fit the page's 80 columns), and the words of
its comments and docstrings are read as prose; IPython ``%`` and ``!`` lines are left out::

    python scripts/reading_time.py                  # print the table
    python scripts/reading_time.py --update-readme  # write it into README.md (make sync does)
    python scripts/reading_time.py --check          # exit 1 if README.md's table is stale
"""

from __future__ import annotations

import argparse
import ast
import io
import math
import re
import sys
import tokenize
from dataclasses import dataclass
from pathlib import Path

import jupytext

from chapters import ROOT, toc_chapters

WORDS_PER_MINUTE = 200
STATEMENTS_PER_MINUTE = 12
BUDGET_MINUTES = 30
HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
README = ROOT / "README.md"
BEGIN, END = "<!-- reading-time: begin -->", "<!-- reading-time: end -->"
WORD = re.compile(r"[A-Za-z0-9]+(?:['’-][A-Za-z0-9]+)*")


@dataclass(frozen=True)
class ReadingTime:
    chapter: str
    words: int
    statements: int

    @property
    def minutes(self) -> float:
        return self.words / WORDS_PER_MINUTE + self.statements / STATEMENTS_PER_MINUTE


def prose_words(markdown: str) -> int:
    lines = [
        line for line in markdown.splitlines() if not re.match(r"^\s*(:\w[\w-]*:|```|:::|\(\w[\w-]*\)=)", line)
    ]  # options, fences, labels
    text = re.sub(r"<!--.*?-->", " ", "\n".join(lines), flags=re.S)
    text = re.sub(r"\{[\w:-]+\}`[^`]*`", "x", text)  # {doc}`x`, {glue:text}`key:.2f`: one word each
    return len(WORD.findall(text))


def code_reading(source: str) -> tuple[int, int]:
    """(statements, words of comments and docstrings) of a code cell's source: the same however
    its lines are wrapped."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    text = "\n".join(lines) + "\n"
    statements = words = 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.NEWLINE:
            statements += 1
        elif token.type == tokenize.COMMENT:
            words += len(WORD.findall(token.string))
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            words += len(WORD.findall(node.value.value))  # a docstring
    return statements, words


def reading_time(chapter: Path) -> ReadingTime:
    notebook = jupytext.read(chapter)
    words = statements = 0
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            words += prose_words(cell.source)
        elif cell.cell_type == "code" and not HIDDEN_TAGS & set(cell.metadata.get("tags", [])):
            cell_statements, cell_words = code_reading(cell.source)
            statements += cell_statements
            words += cell_words
    return ReadingTime(chapter.stem, words, statements)


def table(times: list[ReadingTime]) -> str:
    rows = ["| chapter | prose words | visible code statements | minutes to read |", "|---|---:|---:|---:|"]
    for time in times:
        minutes = math.ceil(time.minutes)  # rounded up, as reading times are
        flag = "" if minutes <= BUDGET_MINUTES else f" (over {BUDGET_MINUTES})"
        rows.append(f"| {time.chapter} | {time.words:,} | {time.statements:,} | {minutes}{flag} |")
    total = sum(time.minutes for time in times)
    rows.append(
        f"| **all {len(times)}** | {sum(t.words for t in times):,} | {sum(t.statements for t in times):,} "
        f"| {math.ceil(total)} ({total / 60:.1f} h) |"
    )
    return "\n".join(rows)


def readme_with(table_text: str) -> str:
    readme = README.read_text()
    if BEGIN not in readme or END not in readme:
        raise SystemExit(f"README.md has no {BEGIN} ... {END} block to hold the table")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{table_text}\n{END}{tail}"


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--update-readme", action="store_true", help="write the table into README.md")
    parser.add_argument("--check", action="store_true", help="exit 1 if README.md's table is stale")
    options = parser.parse_args(arguments)
    table_text = table([reading_time(chapter) for chapter in toc_chapters()])
    if options.check:
        if README.read_text() != readme_with(table_text):
            print("README.md's reading-time table is stale: run make sync")
            return 1
        return 0
    if options.update_readme:
        updated = readme_with(table_text)
        if updated != README.read_text():
            README.write_text(updated)
            print("wrote the reading-time table into README.md")
        return 0
    print(table_text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
