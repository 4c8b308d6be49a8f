"""The quizzes: the helper refuses questions it cannot show honestly, writes self-contained accessible HTML,
and every chapter of Parts I-VIII ends with at least three questions that answer back."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jupytext
import pytest

from chapters import ROOT, part_chapters
from transformer_book import quiz
from transformer_book.quiz import Choice, Number, Option, Quiz, show_quiz, shown_order

PART_CHAPTERS = part_chapters()
MIN_QUESTIONS = 3


def sample() -> list[Choice | Number]:
    return [
        Choice(
            "Why divide by `√d_k`?",
            [
                Option(
                    "To keep the scores' variance near 1", "The softmax stays out of its flat regions.", correct=True
                ),
                Option("To save time", "The division costs one multiply per score & saves nothing."),
            ],
        ),
        Number("d_model / h for 512 and 8?", answer=64, feedback="512 / 8 = 64.", hint="Divide.", tolerance=0.5),
    ]


# ---------------------------------------------------------------------------------------------
# The helper


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Choice("q?", [Option("a", "fa"), Option("b", "fb")]), "exactly one correct option, got 0"),
        (
            lambda: Choice("q?", [Option("a", "fa", correct=True), Option("b", "fb", correct=True)]),
            "exactly one correct option, got 2",
        ),
        (lambda: Choice("q?", [Option("a", "fa", correct=True)]), "at least two options"),
        (lambda: Choice("q?", [Option("a", "fa", correct=True), Option("a", "fb")]), "same text"),
        (lambda: Choice("q?", ["a", "b"]), "must be Option objects"),  # type: ignore[list-item]
        (lambda: Option("a", "", correct=True), "feedback of option 'a' must be a non-empty string"),
        (lambda: Option("a", "f", correct=1), "correct must be True or False"),  # type: ignore[arg-type]
        (lambda: Option("$x^2$", "f"), "TeX math"),
        (lambda: Number("q?", answer=float("nan"), feedback="f", hint="h"), "answer of 'q?' must be a finite number"),
        (lambda: Number("q?", answer=1, feedback="f", hint="h", tolerance=-1), "tolerance of 'q?' must be at least 0"),
        (lambda: Number("q?", answer=True, feedback="f", hint="h"), "must be a finite number"),
        (lambda: Number("q?", answer=1, feedback="f", hint=" "), "hint of 'q?' must be a non-empty string"),
        (lambda: Quiz([]), "at least one question"),
        (lambda: Quiz(["q?"]), "must be a Choice or a Number"),  # type: ignore[list-item]
    ],
)
def test_bad_questions_are_refused_with_a_clear_error(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make()


class Elements(HTMLParser):
    """The start tags of an HTML fragment, with their attributes, and the text inside each <label>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.labels: dict[str, str] = {}
        self._label: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        self.tags.append((tag, attributes))
        if tag == "label":
            self._label = attributes.get("for", "")
            self.labels[self._label] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "label":
            self._label = None

    def handle_data(self, data: str) -> None:
        if self._label is not None:
            self.labels[self._label] += data

    def all(self, tag: str) -> list[dict[str, str]]:
        return [attributes for name, attributes in self.tags if name == tag]


def test_html_is_self_contained_and_every_control_has_a_label() -> None:
    html = Quiz(sample())._repr_html_()
    elements = Elements()
    elements.feed(html)
    assert not re.search(r"https?://|\bsrc=|@import", html), "the quiz must load nothing from elsewhere"
    assert len(elements.all("script")) == 1 and len(elements.all("style")) == 1
    inputs = elements.all("input")
    radios = [field for field in inputs if field["type"] == "radio"]
    numbers = [field for field in inputs if field["type"] == "text"]
    assert len(radios) == 2 and len(numbers) == 1
    for field in inputs:
        assert elements.labels.get(field["id"], "").strip(), f"input {field['id']} has no label"
    shown = shown_order(sample()[0])  # type: ignore[arg-type]
    assert [radio["data-correct"] for radio in radios] == [str(option.correct).lower() for option in shown]
    assert len({radio["name"] for radio in radios}) == 1, "one question's options are one radio group"
    # Feedback is plain text made HTML: escaped, with code in backticks as <code>.
    wrong = next(radio for radio in radios if radio["data-correct"] == "false")
    right = next(radio for radio in radios if radio["data-correct"] == "true")
    assert wrong["data-feedback"] == "The division costs one multiply per score &amp; saves nothing."
    assert elements.labels[right["id"]] == "To keep the scores' variance near 1"
    assert "<code>√d_k</code>" in html
    assert numbers[0]["data-answer"] == "64" and numbers[0]["data-tolerance"] == "0.5"
    assert len(elements.all("fieldset")) == len(elements.all("legend")) == 2
    statuses = [p for p in elements.all("p") if p.get("role") == "status"]
    assert len(statuses) == 2 and all(p["aria-live"] == "polite" for p in statuses)
    assert [tag for tag, _ in elements.tags if re.fullmatch(r"h\d", tag)] == [], (
        "headings would break the page's outline"
    )


def test_ids_are_stable_and_differ_between_quizzes() -> None:
    first, again = Quiz(sample()), Quiz(sample())
    other = Quiz(sample()[:1])
    assert first.id == again.id and first._repr_html_() == again._repr_html_()
    assert first.id != other.id
    assert json.dumps(first.id) in first._repr_html_(), "the script finds its own quiz by id"


def test_plain_text_shows_the_questions_and_options() -> None:
    assert repr(Quiz(sample())) == (
        "1. Why divide by `√d_k`?\n   (a) To keep the scores' variance near 1\n   (b) To save time\n"
        "2. d_model / h for 512 and 8?"
    )


def test_show_quiz_displays_html(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    shown: list[Any] = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    show_quiz(sample())
    assert len(shown) == 1 and isinstance(shown[0], Quiz) and 'class="tb-quiz"' in shown[0]._repr_html_()


# ---------------------------------------------------------------------------------------------
# The chapters' quizzes


def quiz_cells(notebook: Any) -> list[Any]:
    return [cell for cell in notebook.cells if cell.cell_type == "code" and "show_quiz(" in cell.source]


def test_parts_are_found() -> None:
    names = [chapter.stem for chapter in PART_CHAPTERS]
    assert names[0] == "sequential-bottleneck" and "preface" not in names and "glossary" not in names
    assert all(chapter.is_file() for chapter in PART_CHAPTERS)


@pytest.mark.parametrize("chapter", PART_CHAPTERS, ids=[chapter.stem for chapter in PART_CHAPTERS])
def test_chapter_ends_with_a_quiz_that_answers_back(chapter: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At least three questions, in a collapsed code cell of the Self-check section just before the
    exercises; each multiple-choice question has one correct option and feedback for every option."""
    cells = quiz_cells(jupytext.read(chapter))
    assert len(cells) == 1, f"{chapter.name}: {len(cells)} quiz cells (show_quiz), expected 1"
    cell = cells[0]
    assert cell.metadata.get("tags") == ["hide-input"], f"{chapter.name}: the quiz cell must be tagged hide-input"
    text = chapter.read_text()
    start = text.index(cell.source)
    headings = re.findall(r"^## (.+)$", text[:start], re.M)
    after = re.search(r"^## (.+)$", text[start:], re.M)
    assert headings and headings[-1] == "Self-check", f"{chapter.name}: the quiz is not in the Self-check section"
    assert after and after.group(1) == "Exercises", f"{chapter.name}: the exercises must follow the quiz"

    shown: list[Quiz] = []
    monkeypatch.setattr(quiz, "show_quiz", lambda questions: shown.append(Quiz(questions)))
    exec(compile(cell.source, f"{chapter.name} (quiz cell)", "exec"), {})
    assert len(shown) == 1, f"{chapter.name}: the quiz cell showed {len(shown)} quizzes"
    questions = shown[0].questions
    assert len(questions) >= MIN_QUESTIONS, f"{chapter.name}: {len(questions)} questions, at least {MIN_QUESTIONS}"
    for question in questions:
        if isinstance(question, Choice):
            assert sum(option.correct for option in question.options) == 1, f"{chapter.name}: {question.question}"
            feedback = [option.feedback for option in question.options]
            assert len(set(feedback)) == len(feedback), f"{chapter.name}: {question.question!r} repeats a feedback"
        else:
            assert question.feedback != question.hint, f"{chapter.name}: {question.question!r}"


@pytest.mark.parametrize("chapter", PART_CHAPTERS, ids=[chapter.stem for chapter in PART_CHAPTERS])
def test_colab_twin_runs_the_quiz_as_a_code_cell(chapter: Path) -> None:
    """In Colab the quiz is a code cell (folded, like every collapsed cell) that the reader runs; the
    package it imports from is installed by the notebook's first cell."""
    twin = jupytext.read(chapter.with_suffix(".ipynb"))
    cells = quiz_cells(twin)
    assert len(cells) == 1, f"{chapter.with_suffix('.ipynb').name}: no code cell runs show_quiz"
    assert "from transformer_book.quiz import" in cells[0].source
    first = twin.cells[0]
    assert first.cell_type == "code" and "pip" in first.source and "transformer-book" in first.source, (
        f"{chapter.name}: the twin's first cell does not install the package that the quiz imports"
    )


def test_quizzes_cover_every_part_chapter_and_nothing_else() -> None:
    """Pages outside the Parts (preface, appendices) have no quiz: a stray one would go untested."""
    with_quiz = {
        path.stem
        for path in sorted((ROOT / "book").glob("*.md"))
        if "show_quiz(" in path.read_text() and path.read_text().startswith("---\njupytext:")
    }
    assert with_quiz == {chapter.stem for chapter in PART_CHAPTERS}


def test_the_right_option_is_not_always_shown_in_the_same_place(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chapters list the right option first; the page shuffles (the same way on every build), so
    over the book's questions it is shown first in well under all of them, and the shuffle keeps
    every option."""
    positions = []
    for chapter in PART_CHAPTERS:
        shown: list[Quiz] = []
        monkeypatch.setattr(quiz, "show_quiz", lambda questions: shown.append(Quiz(questions)))
        exec(compile(quiz_cells(jupytext.read(chapter))[0].source, chapter.name, "exec"), {})
        for question in shown[0].questions:
            if isinstance(question, Choice):
                order = shown_order(question)
                assert sorted(option.text for option in order) == sorted(option.text for option in question.options)
                positions.append(next(index for index, option in enumerate(order) if option.correct))
    first = positions.count(0) / len(positions)
    assert 0.15 < first < 0.6, f"the right option is shown first in {first:.0%} of {len(positions)} questions"
