"""The sources agree with each other: package = fresh export, twins = fresh jupytext, chapters follow the anatomy."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import colab_twin
import course_plan
import fit_code
import jupytext
import pytest

import assignments
import chapters
import export
import reading_time
import sync_twins
from chapters import (
    ROOT,
    chapter_code,
    check_calls,
    claim_source,
    colab_bootstrap,
    glued_names,
    toc_chapters,
    toc_files,
)

CHAPTERS = toc_chapters()
ids = [chapter.stem for chapter in CHAPTERS]


def test_each_module_imports_only_earlier_chapters_and_the_hand_written_modules() -> None:
    """The package's dependency order is the reading order: a module may import the modules that
    earlier chapters export to (a concept module such as ``model`` counts from the first chapter that
    writes to it) and the hand-written checks, helpers, progress, runtime, exercises and
    torch_loading, never a module a later chapter starts. And no module imports one that imports it
    back, hand-written ones included."""
    order: dict[str, int] = {}
    for index, chapter in enumerate(CHAPTERS):
        for module in {export.chapter_module(chapter), *export.exported_names(chapter).values()}:
            order.setdefault(module, index)
    hand_written = {"checks", "helpers", "progress", "runtime", "exercises", "torch_loading", "__init__"}
    package = ROOT / "src" / "transformer_book"
    graph = {path.stem: chapters.imported_modules(path.read_text()) - {path.stem} for path in package.glob("*.py")}
    forward = [
        f"{module} imports {imported}"
        for module, index in order.items()
        for imported in graph.get(module, set()) - hand_written
        if order.get(imported, len(order)) > index
    ]
    assert len(set(order) & set(graph)) >= 10, (
        "fewer than 10 exported modules found: the test no longer sees the package"
    )
    assert not forward, f"imports that point forward in the reading order: {forward}"

    def cycle_from(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        return next(
            (
                found
                for imported in sorted(graph.get(module, set()))
                if (found := cycle_from(imported, [*path, module]))
            ),
            None,
        )

    cycles = [" -> ".join(found) for module in sorted(graph) if (found := cycle_from(module, []))]
    assert not cycles, f"modules that import each other: {cycles[0]}"


def test_every_toc_entry_exists() -> None:
    missing = [page.relative_to(ROOT).as_posix() for page in toc_files() if not page.is_file()]
    assert not missing, f"_toc.yml lists pages that do not exist: {missing}"


def test_every_chapter_in_the_book_folder_is_in_the_toc() -> None:
    assert set(sync_twins.chapters()) == set(CHAPTERS), "a chapter in book/ is missing from _toc.yml, or vice versa"


def test_package_equals_a_fresh_export_of_the_chapters() -> None:
    expected = export.expected_modules()
    for path, text in expected.items():
        assert path.exists(), f"{path.name} is not exported: run make sync"
        assert path.read_text() == text, f"{path.name} differs from its chapter: run make sync"
    orphans = [path.name for path in export.generated_modules() if path not in expected]
    assert not orphans, f"generated modules without a chapter: {orphans}"


def test_a_chapters_cache_depends_on_every_module_it_reaches() -> None:
    reached = chapters.reached_modules((ROOT / "book" / "decoding.md").read_text())
    assert {"training", "translation", "model", "data", "helpers"} <= reached
    # A name from the top level counts as the module that defines it, not as the whole library.
    assert chapters.reached_modules("from transformer_book import device\n") == {"helpers", "checks"}
    assert "training" in chapters.reached_modules("from transformer_book import (device,\n    train)\n")
    assert chapters.imported_modules("from transformer_book import make_transformer as build\n") == {"model"}
    assert chapters.imported_modules("import transformer_book as tb\n") == {"__init__"}
    annotations_only = "if TYPE_CHECKING:\n    from transformer_book.decoding import DecoderSide\n\nfrom transformer_book.checks import integer\n"
    assert chapters.imported_modules(annotations_only) == {"checks"}


def test_readme_shows_the_current_reading_times() -> None:
    assert reading_time.main(["--check"]) == 0, "README.md's reading-time table is stale: run make sync"


def test_every_part_has_a_current_assignment() -> None:
    """One otter-grader assignment per Part, as scripts/assignments.py writes it from the chapters
    (tests/test_assignments.py grades them with otter itself)."""
    written = assignments.expected()
    # sorted as paths on both sides: part-10 comes before part-2
    assert sorted(written) == sorted(assignments.assignment_path(n) for n in range(1, len(chapters.parts()) + 1)), (
        "a Part has no graded exercise, so no assignment"
    )
    assert assignments.main(["--check"]) == 0, "an assignment in assignments/ is stale: run make sync"


def test_the_course_plan_is_current_and_holds_every_chapter_once() -> None:
    assert course_plan.main(["--check"]) == 0, "book/course-plan.md's table is stale: run make sync"
    weeks = course_plan.WEEKS
    course_plan.check_weeks(weeks)
    dropped = [(theme, [slug for slug in slugs if slug != "training"]) for theme, slugs in weeks]
    with pytest.raises(ValueError, match=r"missing \['training'\]"):
        course_plan.check_weeks(dropped)
    swapped = [(theme, list(reversed(slugs))) for theme, slugs in weeks]
    with pytest.raises(ValueError, match="in order"):
        course_plan.check_weeks(swapped)


@pytest.mark.parametrize("chapter", toc_chapters(), ids=lambda chapter: chapter.stem)
def test_chapter_reads_within_the_budget(chapter: Path) -> None:
    measured = reading_time.reading_time(chapter)
    assert measured.minutes <= reading_time.BUDGET_MINUTES, (
        f"{chapter.name} reads in {measured.minutes:.1f} minutes ({measured.words:,} words, {measured.statements} "
        f"visible code statements), over the {reading_time.BUDGET_MINUTES}-minute budget: collapse plumbing or split it"
    )


def test_reading_time_counts_prose_and_visible_code_only() -> None:
    assert reading_time.prose_words("Attention is all you need.\n:alt: not read\n```{note}\n```") == 5
    assert reading_time.prose_words("See {doc}`preface` and {glue:text}`sdp_ratio:.0f`.") == 4


def test_code_reads_by_statements_however_it_is_wrapped() -> None:
    one_line = 'def f(a: int, b: int) -> int:\n    """Add them."""\n    return a + b  # the sum\n'
    wrapped = 'def f(\n    a: int,\n    b: int,\n) -> int:\n    """Add\n    them."""\n    # the sum\n    return a + b\n'
    assert reading_time.code_reading(one_line) == reading_time.code_reading(wrapped) == (3, 4)
    assert reading_time.code_reading("%timeit f(1, 2)\nx = 1\ny = 2\n") == (2, 0)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_visible_code_fits_the_page(chapter: Path) -> None:
    """A code cell on the site shows about 80 columns: a wider visible line makes the reader scroll."""
    wide = fit_code.wide_lines(chapter)
    assert not wide, (
        f"visible code lines wider than {fit_code.WIDTH} columns (scripts/fit_code.py --fix): "
        + "; ".join(f"{chapter.name} line {number}, {width} columns" for number, width, _ in wide)
    )


def test_the_width_check_sees_visible_cells_only(tmp_path: Path) -> None:
    wide = "x = " + "1 + " * 30 + "1"
    chapter = tmp_path / "chapter.md"
    chapter.write_text(
        f"# A\n\n```{{code-cell}} ipython3\n{wide}\n```\n\n"
        f"```{{code-cell}} ipython3\n:tags: [hide-input]\n\n{wide}\n```\n\n"
        f"```{{solution-start}} ex\n:class: dropdown\n```\n\n```{{code-cell}} ipython3\n{wide}\n```\n\n"
        f"```{{solution-end}}\n```\n\n```{{code-cell}} ipython3\n:tags: [export]\n\nshort = 1\n{wide}\n```\n"
    )
    assert [(number, width) for number, width, _ in fit_code.wide_lines(chapter)] == [(4, len(wide)), (28, len(wide))]
    assert fit_code.fix(chapter) == (2, [])
    assert fit_code.wide_lines(chapter) == []
    assert chapter.read_text().count(wide) == 2  # the hidden and the folded cells keep their width


def test_export_recognises_a_hand_edited_module(tmp_path: Path) -> None:
    path, text = next(iter(export.expected_modules().items()))
    module = tmp_path / path.name
    module.write_text(text)
    assert not export.edited_by_hand(module)
    module.write_text(text.replace("\n\n\n", "\n\n\n# a fix made in src/ instead of the chapter\n", 1))
    assert export.edited_by_hand(module)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_colab_twins_are_in_sync_and_have_no_outputs(chapter: Path) -> None:
    """Both editions: the instructor's (book/<slug>.ipynb) and the student's (book/student/<slug>.ipynb)."""
    for twin, solutions in [(chapter.with_suffix(".ipynb"), True), (sync_twins.student_twin(chapter), False)]:
        name = twin.relative_to(chapter.parent).as_posix()
        assert twin.exists(), f"{name} is missing: run make sync"
        assert twin.read_text() == sync_twins.twin_text(chapter, solutions=solutions), f"{name} is stale: run make sync"
        cells = json.loads(twin.read_text())["cells"]
        with_outputs = [index for index, cell in enumerate(cells) if cell.get("outputs") or cell.get("execution_count")]
        assert not with_outputs, f"{name} carries outputs in cells {with_outputs}"


def test_every_student_edition_has_its_chapter() -> None:
    assert sorted(path.stem for path in sync_twins.STUDENT.glob("*.ipynb")) == sorted(
        chapter.stem for chapter in CHAPTERS
    )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_colab_twin_shows_no_myst_and_folds_what_the_page_hides(chapter: Path) -> None:
    """Colab renders Markdown, not MyST, and folds only form cells: the twin's text holds no role,
    directive or label, and a code cell is folded exactly when the page collapses or removes it or
    it is a solution; folded or not, it is the chapter's code."""
    twin = json.loads(chapter.with_suffix(".ipynb").read_text())["cells"]
    left = {
        index: colab_twin.myst_left("".join(cell["source"]))
        for index, cell in enumerate(twin)
        if cell["cell_type"] == "markdown"
    }
    assert not any(left.values()), f"{chapter.name}: MyST left in the twin's Markdown: " + str(
        {index: found for index, found in left.items() if found}
    )
    cells = jupytext.read(chapter).cells
    code = [cell for cell in cells if cell.cell_type == "code"]
    twin_code = [cell for cell in twin if cell["cell_type"] == "code" and not colab_twin.is_twin_only(cell)]
    assert [colab_twin.unfolded_source(cell) for cell in twin_code] == [cell.source for cell in code], (
        f"{chapter.name}: the twin's code cells are not the chapter's"
    )
    solutions, inside = set(), False
    for cell in cells:
        if cell.cell_type == "markdown":
            for directive in re.findall(r"^```\{(solution-start|solution-end)\}", cell.source, re.M):
                inside = directive == "solution-start"
        elif inside:
            solutions.add(id(cell))
    for ours, theirs in zip(code, twin_code):
        hidden = bool(set(ours.metadata.get("tags", [])) & {"hide-input", "remove-cell"}) or id(ours) in solutions
        assert colab_twin.is_folded(theirs) == hidden, (
            f"{chapter.name}: a cell that starts {ours.source[:60]!r} is {'not ' if hidden else ''}folded in the twin"
        )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_chapter_starts_with_the_hidden_colab_bootstrap(chapter: Path) -> None:
    first = next(cell for cell in jupytext.read(chapter).cells if cell.cell_type == "code")
    assert first.source.strip() == colab_bootstrap(), f"{chapter.name}: the first code cell is not the Colab bootstrap"
    assert "remove-cell" in first.metadata.get("tags", []), f"{chapter.name}: the bootstrap cell is not hidden"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_chapter_reaches_myst_nb_only_through_the_books_glue(chapter: Path) -> None:
    """Colab has no myst-nb, and the build runs each chapter once (not its twin): only
    transformer_book.glue, whose fallback is unit-tested, may touch it."""
    code = "\n".join(cell.source for cell in jupytext.read(chapter).cells if cell.cell_type == "code")
    assert not re.search(r"^\s*(import|from)\s+myst_nb\b", code, re.M), f"{chapter.name} imports myst_nb directly"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_chapter_follows_the_anatomy(chapter: Path) -> None:
    text = chapter.read_text()
    assert re.search(r"^:::\{admonition\} In this chapter", text, re.M), f"{chapter.name}: no learning goals"
    assert "\n## Summary" in text, f"{chapter.name}: no summary"
    exercises = re.findall(r"^```\{exercise\}.*\n:label: (\S+)", text, re.M)
    solutions = re.findall(r"^```\{solution-start\} (\S+)\n:class: dropdown", text, re.M)
    assert len(exercises) >= 2, f"{chapter.name}: {len(exercises)} exercises, at least 2 expected"
    assert sorted(exercises) == sorted(solutions), (
        f"{chapter.name}: exercises {exercises} vs hidden solutions {solutions}"
    )
    assert text.count("```{solution-start}") == text.count("```{solution-end}"), f"{chapter.name}: unbalanced solutions"
    hidden = [
        ast.parse("\n".join(line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))))
        for cell in jupytext.read(chapter).cells
        if cell.cell_type == "code" and "remove-cell" in cell.metadata.get("tags", [])
    ]
    # A claim is checked by a call of check() or by an assert statement, not by the word "assert" in a comment.
    checking = [
        node
        for tree in hidden
        for node in ast.walk(tree)
        if isinstance(node, ast.Assert)
        or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check")
    ]
    assert checking, f"{chapter.name}: no hidden cell checks its claims (no check() call, no assert statement)"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_claims_are_unique_within_a_chapter(chapter: Path) -> None:
    """The robustness sweep groups records by claim: two checks with one claim would be counted as one.

    A claim written out (a string or an f-string) must appear once. A claim passed in a variable (a
    sentence chosen for the outcome, checked by a small function) is one check call with several texts."""
    claims = [claim_source(call) for call in check_calls(chapter)]
    written = [claim for claim in claims if claim.startswith(("'", '"', "f'", 'f"'))]
    duplicates = sorted({claim for claim in written if written.count(claim) > 1})
    assert not duplicates, f"{chapter.name}: claims checked twice: {duplicates}"


#: A setting that a trained experiment depends on: never chosen by device (CONTRIBUTING.md, "Claims that hold
#: on every machine", "One experiment on every device").
TRAINING_SETTING = re.compile(r"step|batch|epoch|lr|learning|rate|layer|d_model|d_ff|head|dropout|warm|train", re.I)


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_by_device_chooses_only_measured_sizes(chapter: Path) -> None:
    """One experiment on every device: by_device may pick the lengths of a timing or memory sweep,
    assigned to a name of their own, never a training setting nor an argument passed straight on."""
    tree = chapter_code(chapter)
    uses = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "by_device"
    ]
    assigned = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
    ]
    wrong = []
    for call in uses:
        # The call must be the whole right-hand side of "name = by_device(...)" (or inside a plain expression
        # computing that name's value, such as range(...)), never an argument of a model or training call.
        owner = next(
            (node for node in assigned if any(inner is call for inner in ast.walk(node.value))),
            None,
        )
        if owner is None:
            wrong.append(f"line {call.lineno}: by_device(...) outside an assignment to a name")
            continue
        name = owner.targets[0].id  # type: ignore[attr-defined]
        calls_inside = [node for node in ast.walk(owner.value) if isinstance(node, ast.Call) and node is not call]
        passed_on = [node for node in calls_inside if any(inner is call for inner in ast.walk(node))]
        if TRAINING_SETTING.search(name) or any(
            not (isinstance(node.func, ast.Name) and node.func.id in {"range", "list"}) for node in passed_on
        ):
            wrong.append(f"line {call.lineno}: {name} = {ast.unparse(owner.value)}")
    wrong = list(dict.fromkeys(wrong))
    assert not wrong, (
        f"{chapter.name}: by_device chooses a training setting or is passed straight into a call; a GPU must run "
        f"the same experiment as the CPU (by_device is for the sizes of a measurement only): {wrong}"
    )


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_figures_are_glued_with_real_alt_text_and_none_comes_from_the_web(chapter: Path) -> None:
    text = chapter.read_text()
    figures = re.findall(r"^```\{glue:figure\} (\S+)\n((?::\S+:.*\n)*)", text, re.M)
    assert figures, f"{chapter.name}: glues no figure"
    for key, options in figures:
        alt = re.search(r"^:alt: (.+)$", options, re.M)
        assert alt, f"{chapter.name}: figure {key} has no :alt:"
        assert len(alt.group(1).split()) >= 6, f"{chapter.name}: alt text of {key} is too short to describe it"
        assert re.search(r"^:name: fig-", options, re.M), (
            f"{chapter.name}: figure {key} has no :name: fig-... to cite it"
        )
    web_images = re.findall(r"\]\(https?://[^)]*\.(?:png|jpe?g|gif|svg|webp)\)|\{(?:figure|image)\} *https?://", text)
    assert not web_images, f"{chapter.name}: images from the web: {web_images}"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=ids)
def test_glue_keys_are_unique_within_a_chapter(chapter: Path) -> None:
    keys = [key for key in glued_names(chapter_code(chapter)) if not key.endswith("…")]
    duplicates = sorted({key for key in keys if keys.count(key) > 1})
    assert not duplicates, f"{chapter.name}: glue keys used twice: {duplicates}"


def test_glued_names_reads_glue_and_glue_values_in_order() -> None:
    code = ast.parse('glue("a", 1)\nglue_values(b=2, c=3)\nfor i in range(2):\n    glue(f"d_{i}", i)\nglue(name, 4)\n')
    assert glued_names(code) == ["a", "b", "c", "d_…"]


def test_preface_map_lists_every_chapter_of_the_toc() -> None:
    preface = (ROOT / "book" / "preface.md").read_text()
    missing = [chapter.stem for chapter in CHAPTERS[1:] if f'"{chapter.stem}"' not in preface]
    assert not missing, f"the preface's chapter map lacks {missing}"


def test_the_bibliography_parses_and_every_citation_has_an_entry() -> None:
    """A broken entry stops sphinxcontrib-bibtex before any chapter runs; say so in a second, not after the build."""
    from pybtex.database import parse_file

    entries = parse_file(ROOT / "book" / "references.bib").entries
    cited = {
        key.strip()
        for chapter in (ROOT / "book").glob("*.md")
        for keys in re.findall(r"\{cite(?::\w+)?\}`([^`]+)`", chapter.read_text())
        for key in keys.split(",")
    }
    assert len(entries) >= 50, "the bibliography lost its entries"
    missing = sorted(cited - set(entries))
    assert not missing, f"cited but not in book/references.bib: {missing}"


def _chapter(path: Path, title: str, *cells: tuple[str, str]) -> Path:
    """A minimal MyST chapter: a title, then code cells given as (tags, source)."""
    header = (ROOT / "book" / "encoder.md").read_text().split("\n---\n", 1)[0] + "\n---\n\n"  # a real chapter's
    body = "".join(f"```{{code-cell}} ipython3\n:tags: [{tags}]\n\n{source}\n```\n\n" for tags, source in cells)
    path.write_text(f"{header}# {title}\n\n{body}")
    return path


def test_export_routes_cells_by_concept_and_imports_across_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chapter named in CONCEPTS writes to its module, a cell tagged module:<name> elsewhere, with
    the names its neighbours define imported; each chapter's run of cells is marked with its file."""
    first = _chapter(
        tmp_path / "first.md",
        "First",
        ("export", "import torch\n\n\ndef double(x: torch.Tensor) -> torch.Tensor:\n    return 2 * x"),
        ("export, module:extra", "def quadruple(x):\n    return double(double(x))"),
    )
    second = _chapter(tmp_path / "second.md", "Second", ("export", "def triple(x):\n    return 3 * x"))
    monkeypatch.setattr(export, "toc_chapters", lambda: [first, second])
    monkeypatch.setattr(export, "CONCEPTS", {"first": "core", "second": "core"})
    sources = export.module_sources()
    assert sorted(sources) == ["core", "extra"]
    core, extra = sources["core"], sources["extra"]
    assert core.index("# from book/first.md") < core.index("def double") < core.index("# from book/second.md")
    assert "def triple" in core and "def quadruple" not in core and "import torch" in core
    assert "from transformer_book.core import double" in extra and "torch" not in extra  # unused: dropped
    assert 'Code taught in the chapter "First" (book/first.md).' in extra
    assert export.exported_names(first) == {"double": "core", "quadruple": "extra"}


def test_export_refuses_a_name_defined_twice_in_one_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _chapter(tmp_path / "first.md", "First", ("export", "def helper():\n    return 1"))
    second = _chapter(tmp_path / "second.md", "Second", ("export", "def helper():\n    return 2"))
    monkeypatch.setattr(export, "toc_chapters", lambda: [first, second])
    monkeypatch.setattr(export, "CONCEPTS", {"first": "core", "second": "core"})
    with pytest.raises(ValueError, match=r"helper is defined in both book/first.md and book/second.md"):
        export.module_sources()
