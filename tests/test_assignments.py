"""Each Part's assignment, graded by otter-grader itself: ``otter assign`` builds the student's notebook
and the autograder, and with ``run_tests`` runs every test on the instructor's notebook, failing unless
all pass; then ``otter run`` grades two notebooks with that autograder: the student's as handed out (no
point) and the student's with the book's solutions pasted in below each template, as a student would
(every point). The Parts are graded side by side, one per core: each step is mostly a kernel starting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

import assignments
from chapters import parts

pytestmark = pytest.mark.assignments

#: make installs otter-grader here, outside the book's environment (requirements-otter.txt says why).
OTTER_FOLDER = Path(sys.prefix) / "otter"
OTTER = [sys.executable, "-m", "otter"]


def otter(*arguments: str) -> subprocess.CompletedProcess[str]:
    """Run otter with its folder on the path (the kernels it starts inherit it)."""
    assert (OTTER_FOLDER / "otter").is_dir(), f"otter-grader is not in {OTTER_FOLDER}: run make test, which installs it"
    path = os.pathsep.join(filter(None, [str(OTTER_FOLDER), os.environ.get("PYTHONPATH")]))
    return subprocess.run([*OTTER, *arguments], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": path})


PARTS = [number for number, chapters in enumerate(parts(), start=1) if assignments.assignment(number, chapters)]


def otter_run(autograder: Path, notebook: Path, out: Path) -> tuple[float, float, str]:
    """otter run's total score, the most it could be, and its feedback on notebook."""
    out.mkdir()
    run = otter("run", "-a", str(autograder), "-o", str(out), str(notebook))
    assert run.returncode == 0, f"otter run failed on {notebook}:\n{run.stderr}"
    results = json.loads((out / "results.json").read_text())
    questions = [test for test in results["tests"] if "max_score" in test and test["name"] != "Public Tests"]
    feedback = "\n".join(str(test.get("output", "")) for test in questions)
    return sum(t["score"] for t in questions), sum(t["max_score"] for t in questions), feedback


def with_solutions_pasted(student: nbformat.NotebookNode, number: int) -> nbformat.NotebookNode:
    """The student's notebook after a student pasted each book solution into a cell below its template."""
    solutions = {q.function: q.solution for chapter in parts()[number - 1] for q in assignments.questions(chapter)}
    pasted: nbformat.NotebookNode = nbformat.from_dict(json.loads(json.dumps(student)))
    for index in reversed(range(len(pasted.cells))):
        cell = pasted.cells[index]
        defined = next((name for name in solutions if cell.source.startswith(f"def {name}(")), None)
        if cell.cell_type == "code" and defined:
            pasted.cells.insert(index + 1, nbformat.v4.new_code_cell(solutions.pop(defined)))
    assert not solutions, f"no template found for {sorted(solutions)}"
    return pasted


@dataclass(frozen=True)
class Graded:
    """What otter made of one Part's assignment."""

    assign: subprocess.CompletedProcess[str]
    student: str  # the text of the student's notebook otter assign wrote
    handed_out: tuple[float, float, str]  # otter run's score, most and feedback on it as handed out
    filled: tuple[float, float, str]  # and with the solutions pasted in


def grade_part(number: int, folder: Path) -> Graded:
    master = assignments.assignment_path(number)
    dist = folder / "dist"
    assign = otter("assign", str(master), str(dist))
    if assign.returncode != 0:
        return Graded(assign, "", (0, 0, ""), (0, 0, ""))
    (autograder,) = (dist / "autograder").glob("*.zip")
    student = dist / "student" / master.name
    handed_out = otter_run(autograder, student, folder / "student")
    filled = folder / "filled" / master.name
    filled.parent.mkdir()
    nbformat.write(with_solutions_pasted(nbformat.read(student, as_version=4), number), filled)
    return Graded(assign, student.read_text(), handed_out, otter_run(autograder, filled, folder / "filled-out"))


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Graded]:
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        futures = {n: pool.submit(grade_part, n, tmp_path_factory.mktemp(f"part-{n}")) for n in PARTS}
        return {n: future.result() for n, future in futures.items()}


@pytest.mark.parametrize("number", PARTS, ids=[f"part-{n}" for n in PARTS])
def test_otter_grades_the_assignment(number: int, graded: dict[int, Graded]) -> None:
    result = graded[number]
    assert result.assign.returncode == 0, (
        f"otter assign failed on part-{number} (the instructor's notebook must pass every test):\n{result.assign.stderr}"
    )
    assert "BEGIN SOLUTION" not in result.student and "NotImplementedError" in result.student

    score, most, feedback = result.handed_out
    assert most == sum(len(assignments.questions(chapter)) for chapter in parts()[number - 1])
    assert score == 0, f"the student's notebook as handed out scored {score}/{most}:\n{feedback}"
    assert "Not yet" in feedback, "otter's feedback should carry the book grader's sentence"

    score, most, feedback = result.filled
    assert score == most, f"the student's notebook with the solutions pasted in scored {score}/{most}:\n{feedback}"
