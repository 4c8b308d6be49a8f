"""Chapters run top to bottom as an instructor would run them in Google Colab.

Every chapter is executed once per test run, by the book build (tests/test_build.py), in a fresh
kernel and an empty temporary folder (``run_in_temp`` in _config.yml), as in Colab. What else a
Colab twin differs in is covered without executing every chapter a second time:

- the twin holds exactly the chapter's cells (tests/test_sources.py);
- without myst-nb, ``glue`` prints its values (tests/test_helpers.py);
- the package imports from a built wheel (tests/test_wheel.py);
- here, the twins of a few chapters that import from across the package run end to end, in a
  kernel where myst_nb cannot be imported.

``BOOK_ALL_TWINS=1`` runs every chapter's twin; the weekly workflow does, against the newest PyTorch.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import jupytext
import nbformat
import pytest
from colab_twin import glue_sentences

from chapters import ChapterFailed, Execution, execute_like_colab, toc_chapters
from sync_twins import student_twin

pytestmark = pytest.mark.chapter

#: Quick chapters whose code imports from several earlier chapters' modules and glues numbers and figures.
SMOKE_TWINS = ("multi-head-attention", "full-model")


def colab_chapters() -> list[Path]:
    """Every chapter when BOOK_ALL_TWINS=1, else the smoke set."""
    if os.environ.get("BOOK_ALL_TWINS") == "1":
        return toc_chapters()
    return [chapter for chapter in toc_chapters() if chapter.stem in SMOKE_TWINS]


def test_smoke_twins_are_chapters_of_the_book() -> None:
    missing = set(SMOKE_TWINS) - {chapter.stem for chapter in toc_chapters()}
    assert not missing, f"SMOKE_TWINS names chapters that _toc.yml does not list: {sorted(missing)}"


@pytest.mark.parametrize("chapter", colab_chapters(), ids=lambda chapter: chapter.stem)
def test_chapter_runs_like_in_colab(chapter: Path) -> None:
    try:
        execution = execute_like_colab(chapter)
    except ChapterFailed as failure:
        pytest.fail(str(failure), pytrace=False)
    stream = printed(execution)
    # Without myst-nb, the book's glue() prints "key = value": proof that the fallback ran.
    keys = re.findall(r"\bglue\(\s*\"(\w+)\"", chapter.read_text())
    printed_keys = [key for key in keys if re.search(rf"^{key} = ", stream, re.M)]
    assert printed_keys or not keys, f"{chapter.name}: no glued value was printed, so glue's Colab fallback did not run"
    # A number that the page formats (54%, 1,234) prints formatted in Colab too, not as a raw float.
    markdown = [cell.source for cell in jupytext.read(chapter).cells if cell.cell_type == "markdown"]
    formatted = {
        match[1] for text in glue_sentences(markdown) for match in re.finditer(r"\[\[(\w+):([^\]]+)\]\]", text)
    }
    raw = [
        line
        for line in stream.splitlines()
        if re.fullmatch(r"(\w+) = -?\d+\.\d{5,}", line) and line.split()[0] in formatted
    ]
    assert not raw, f"{chapter.name}: Colab printed raw floats where the page formats them: {raw[:5]}"


#: Quick chapters whose exercises have graders: their student's editions run here as a student would.
GRADED_TWINS = ("scaled-dot-product", "batching", "label-smoothing")


def graded_chapters() -> list[Path]:
    return [chapter for chapter in toc_chapters() if chapter.stem in GRADED_TWINS]


def printed(execution: Execution) -> str:
    return "".join(
        output.get("text", "")
        for cell in execution.notebook.cells
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    )


GRADE_CALL = re.compile(r"\bgrade\(\s*\"(\w+)\",\s*(\w+)\s*\)")


def with_solutions_pasted(chapter: Path, student: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The student's edition as a student who pasted each solution in: before each cell that grades
    the reader's function, the solution's code and the reader's name bound to the solution's function."""
    cells = jupytext.read(chapter).cells
    solutions: dict[str, str] = {}  # grader -> the solution cell that defines the function it grades
    for cell in cells:
        for grader, function in GRADE_CALL.findall(cell.source):
            if not function.startswith("my_"):
                defining = next(c.source for c in cells if re.search(rf"^def {function}\(", c.source, re.M))
                solutions[grader] = f"{defining}\n\n{{reader}} = {function}\n"
    pasted = copy.deepcopy(student)
    for index in reversed(range(len(pasted.cells))):
        cell = pasted.cells[index]
        for grader, function in GRADE_CALL.findall(cell.source) if cell.cell_type == "code" else []:
            pasted.cells.insert(index, nbformat.v4.new_code_cell(solutions[grader].format(reader=function)))
    return pasted


@pytest.mark.parametrize("chapter", graded_chapters(), ids=lambda chapter: chapter.stem)
def test_the_students_edition_runs_its_graders_say_not_yet_and_pass_once_the_solutions_are_pasted(
    chapter: Path, tmp_path: Path
) -> None:
    student = student_twin(chapter)
    graders = [call for cell in nbformat.read(student, as_version=4).cells for call in GRADE_CALL.findall(cell.source)]
    assert graders, f"{student.name} grades nothing"
    try:
        blank = printed(execute_like_colab(chapter, twin=student))
        pasted_twin = tmp_path / student.name
        nbformat.write(with_solutions_pasted(chapter, nbformat.read(student, as_version=4)), pasted_twin)
        pasted = printed(execute_like_colab(chapter, twin=pasted_twin))
    except ChapterFailed as failure:
        pytest.fail(str(failure), pytrace=False)
    assert blank.count("Not yet:") == len(graders) and "Passed:" not in blank, blank
    assert pasted.count("Passed:") == len(graders) and "Not yet:" not in pasted, pasted
