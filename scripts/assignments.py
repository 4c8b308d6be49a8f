"""Write one graded assignment per Part into ``assignments/``, in otter-grader's format, from the chapters.

Each numbered Part of ``_toc.yml`` gets ``assignments/part-<n>.ipynb``: an Otter Assign master notebook
(https://otter-grader.readthedocs.io) holding the Part's code exercises that have a grader. For each
exercise it takes from the chapter, and never from a copy:

- the exercise's text, as Markdown that Jupyter and Colab render;
- the template the student completes (the cell that defines ``my_...``), as otter's prompt;
- the book's solution (the function that the chapter's hidden ``solution_passed = grade(...)`` call
  grades), renamed to the template's name, as otter's solution;
- a visible cell that runs the book's grader, so a student sees "Not yet" or "Passed" at once;
- a hidden otter test: the same grader, which must print its success sentence.

The names the template and the solution read (``np``, ``softmax_numpy``, ``causal_mask``, ...) are
bound in a setup cell: the chapter's own import of each, or the chapter's definition of it.
``otter assign assignments/part-<n>.ipynb dist`` writes the student's notebook and the autograder
(``tests/test_assignments.py`` runs it on every Part, then grades two copies with ``otter run``)::

    python scripts/assignments.py          # write the assignments (make sync does)
    python scripts/assignments.py --check  # exit 1 if one is stale
"""

from __future__ import annotations

import argparse
import ast
import builtins
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat
from colab_twin import colab_markdown, page_url

import export
from chapters import ROMAN_NUMERALS, ROOT, colab_bootstrap, parts, write_or_check

ASSIGNMENTS = ROOT / "assignments"
READER_CALL = re.compile(r'^reader_passed = grade\("(\w+)", (\w+)\)', re.M)
SOLUTION_CALL = re.compile(r'^solution_passed = grade\("(\w+)", (\w+)\)', re.M)
GRADE_IMPORT = re.compile(r"^from transformer_book\.\w+ import grade$", re.M)
EXERCISE = re.compile(r"^(`{3,})\{exercise\}[^\n]*\n.*?^\1$", re.M | re.S)


@dataclass(frozen=True)
class Question:
    """One graded exercise of a chapter, as an assignment needs it."""

    chapter: str
    grader: str  # the name grade() knows it by
    function: str  # the template's name, my_...
    text: str  # the exercise, as Markdown
    template: str  # the cell the student completes
    solution: str  # the book's solution, renamed to function
    setup: list[str]  # imports and definitions the template and the solution read
    success: str  # the sentence the grader prints on a pass


def _top_level(chapter: Path, cells: list[nbformat.NotebookNode]) -> dict[str, tuple[str, ast.stmt]]:
    """Each name a chapter's code cells bind at top level by an import or a def: the cell and the
    statement. A def of a cell the chapter exports to the package is bound by importing it from the
    module scripts/export.py writes it to."""
    bound: dict[str, tuple[str, ast.stmt]] = {}
    for cell in cells:
        exported = "export" in cell.metadata.get("tags", [])
        for node in ast.parse(cell.source).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                if exported:
                    statement = f"from transformer_book.{export.cell_module(chapter, cell)} import {node.name}"
                    bound.setdefault(node.name, (statement, ast.parse(statement).body[0]))
                else:
                    bound.setdefault(node.name, (cell.source, node))
            elif isinstance(node, ast.Import | ast.ImportFrom):
                for alias in node.names:
                    bound.setdefault(alias.asname or alias.name.split(".")[0], (cell.source, node))
    return bound


def _free_names(tree: ast.AST) -> set[str]:
    """The names tree reads that it neither binds nor gets from builtins."""
    bound = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    bound |= {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}
    bound |= {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.ClassDef)}
    loaded = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return loaded - bound - set(dir(builtins))


def _import_of(node: ast.Import | ast.ImportFrom, name: str) -> str:
    """The one import of node that binds name."""
    alias = next(a for a in node.names if (a.asname or a.name.split(".")[0]) == name)
    spelled = alias.name + (f" as {alias.asname}" if alias.asname else "")
    if isinstance(node, ast.ImportFrom):
        return f"from {'.' * node.level}{node.module} import {spelled}"
    return f"import {spelled}"


def _setup(template: ast.AST, solution: ast.AST, bound: dict[str, tuple[str, ast.stmt]], chapter: str) -> list[str]:
    """The imports and definitions that bind the names the solution reads (and those of the template
    that the chapter binds: a template also reads the local names its blanks leave unassigned), the
    names those definitions read, and so on."""
    imports: list[str] = []
    definitions: list[str] = []
    seen: set[str] = set()
    pending = sorted(_free_names(solution) | (_free_names(template) & set(bound)))
    while pending:
        name = pending.pop(0)
        if name in seen:
            continue
        seen.add(name)
        if name not in bound:
            raise ValueError(f"{chapter}: an exercise reads {name!r}, which no import or def of the chapter binds")
        source, node = bound[name]
        if isinstance(node, ast.Import | ast.ImportFrom):
            imports.append(_import_of(node, name))
        else:
            definitions.insert(0, ast.get_source_segment(source, node) or "")
            pending.extend(sorted(_free_names(node) - seen))
    return sorted(set(imports), key=imports.index) + definitions


def questions(chapter: Path) -> list[Question]:
    """The graded exercises of chapter, in reading order."""
    from transformer_book import (
        exercises_quantization,  # noqa: F401  (registers quantization's grader)
        exercises_reasoning,  # noqa: F401  (registers Part IX's grader)
        exercises_recurrence,  # noqa: F401  (registers Part I's grader)
        exercises_rewards,  # noqa: F401  (registers verifiable-rewards' grader)
        exercises_sampling,  # noqa: F401  (registers test-time-compute's grader)
        exercises_speculative,  # noqa: F401  (registers speculative-decoding's grader)
    )
    from transformer_book.exercises import GRADERS

    cells = jupytext.read(chapter).cells
    code = [cell.source for cell in cells if cell.cell_type == "code"]
    bound = _top_level(chapter, [cell for cell in cells if cell.cell_type == "code"])
    found = []
    for index, cell in enumerate(cells):
        call = READER_CALL.search(cell.source) if cell.cell_type == "code" else None
        if call is None:
            continue
        grader, function = call.groups()
        template = next(c.source for c in reversed(cells[:index]) if re.search(rf"^def {function}\(", c.source, re.M))
        text = next(
            match.group(0)
            for c in reversed(cells[:index])
            if c.cell_type == "markdown"
            for match in EXERCISE.finditer(c.source)
        )
        solved = next(m.group(2) for c in code if (m := SOLUTION_CALL.search(c)) and m.group(1) == grader)
        source, node = next(
            (c, n) for c in code for n in ast.parse(c).body if isinstance(n, ast.FunctionDef) and n.name == solved
        )
        solution = re.sub(rf"^def {solved}\(", f"def {function}(", ast.get_source_segment(source, node) or "")
        grade_import = GRADE_IMPORT.search(cell.source)
        if grade_import is None:
            raise ValueError(f"{chapter.name}: the cell that grades {function} does not import grade")
        setup = [grade_import.group(0), *_setup(ast.parse(template), node, bound, chapter.name)]
        # in the assignment the grading cell is shown, not collapsed as on the page
        markdown = re.sub(r"\(?collapsed\)? (?=cell)", "", colab_markdown(text)[0])
        found.append(
            Question(chapter.stem, grader, function, markdown, template, solution, setup, GRADERS[grader].success)
        )
    return found


def _raw(source: str) -> nbformat.NotebookNode:
    cell: nbformat.NotebookNode = nbformat.v4.new_raw_cell(source)
    return cell


def _config(number: int) -> str:
    return "\n".join(
        [
            "# ASSIGNMENT CONFIG",
            f"name: part-{number}",
            # Students check their work with the book's own grader, which prints a sentence; otter's
            # check cells, and its Colab test files, are not needed for that.
            "init_cell: false",
            "check_all_cell: false",
            "export_cell: false",
            "run_tests: true",
            "requirements: null",
        ]
    )


def _solution_cell(question: Question) -> str:
    """otter's solution cell: the book's solution for the autograder's notebook, the template for the student's."""
    return "\n".join(
        [
            "# BEGIN SOLUTION NO PROMPT",
            question.solution,
            "# END SOLUTION",
            "''' # BEGIN PROMPT",
            question.template,
            "''' # END PROMPT",
        ]
    )


def _test_cell(question: Question) -> nbformat.NotebookNode:
    """otter's hidden test: the book's grader must print its success sentence and return True (otter
    compares a test's output with the output its cell shows here)."""
    cell: nbformat.NotebookNode = nbformat.v4.new_code_cell(
        f'""" # BEGIN TEST CONFIG\nhidden: true\n""" # END TEST CONFIG\ngrade("{question.grader}", {question.function})'
    )
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text=f"Passed: {question.success}\n"),
        nbformat.v4.new_output("execute_result", data={"text/plain": "True"}, execution_count=None),
    ]
    return cell


def _introduction(number: int, found: list[Question]) -> str:
    """The assignment's title and what a student does with it."""
    titles = ", ".join(dict.fromkeys(f"[`{q.chapter}`]({page_url(q.chapter)})" for q in found))
    source = f"from {titles} in *The Transformer, Built Up*"
    if len(found) == 1:
        what = f"One exercise with a grader, {source}, worth one point. It uses the names its chapter defines"
        task = "Complete the function"
    else:
        what = (
            f"{len(found)} exercises with a grader, {source}, one point each. Each uses the names its chapter defines"
        )
        task = "Complete each function"
    return (
        f"# Part {ROMAN_NUMERALS[number - 1]}: assignment\n\n{what}, so read the chapter first. {task} where it says "
        "`raise NotImplementedError`, then run the cell below it: the book's grader says what passed, or what is "
        "still wrong. Run every cell from the top before you hand the notebook in."
    )


def assignment(number: int, chapters: list[Path]) -> nbformat.NotebookNode | None:
    """Part number's master notebook, or None when its chapters have no graded exercise."""
    found = [question for chapter in chapters for question in questions(chapter)]
    if not found:
        return None
    setup = [line for question in found for line in question.setup]
    imports = sorted({line for line in setup if line.startswith(("import ", "from "))}, key=setup.index)
    definitions = [line for line in dict.fromkeys(setup) if line not in imports]
    cells = [
        _raw(_config(number)),
        nbformat.v4.new_markdown_cell(_introduction(number, found)),
        nbformat.v4.new_code_cell(colab_bootstrap()),  # the chapters' own: the book's package
        nbformat.v4.new_code_cell("\n".join(imports) + ("\n\n\n" + "\n\n\n".join(definitions) if definitions else "")),
    ]
    for question in found:
        cells += [
            _raw(f"# BEGIN QUESTION\nname: {question.grader}\npoints: 1"),
            nbformat.v4.new_markdown_cell(
                f"*From [`{question.chapter}`]({page_url(question.chapter)}).*\n\n{question.text}"
            ),
            _raw("# BEGIN SOLUTION"),
            nbformat.v4.new_code_cell(_solution_cell(question)),
            _raw("# END SOLUTION"),
            nbformat.v4.new_code_cell(f'grade("{question.grader}", {question.function})'),
            _raw("# BEGIN TESTS"),
            _test_cell(question),
            _raw("# END TESTS"),
            _raw("# END QUESTION"),
        ]
    notebook: nbformat.NotebookNode = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.metadata["language_info"] = {"name": "python"}
    for index, cell in enumerate(notebook.cells):
        cell.id = f"cell-{index}"  # stable ids: the file changes only when its chapters do
    return notebook


def assignment_path(number: int) -> Path:
    return ASSIGNMENTS / f"part-{number}.ipynb"


def expected() -> dict[Path, str]:
    """Each Part's assignment file and the text it must hold."""
    texts = {}
    for number, chapters in enumerate(parts(), start=1):
        notebook = assignment(number, chapters)
        if notebook is not None:
            texts[assignment_path(number)] = nbformat.writes(notebook) + "\n"
    return texts


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if an assignment is stale or missing")
    options = parser.parse_args(arguments)
    ASSIGNMENTS.mkdir(exist_ok=True)
    texts = expected()
    orphans = [path for path in ASSIGNMENTS.glob("part-*.ipynb") if path not in texts]
    return write_or_check(texts, orphans, options.check, fix="run make sync")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
