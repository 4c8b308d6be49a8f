"""Questions that answer back: the short quiz at the end of each chapter (written by hand, not exported).

A chapter lists its questions in a code cell and calls :func:`show_quiz`::

    show_quiz([
        Choice("Why divide the scores by √d_k?", [
            Option("To keep their variance near 1", "Right: ...", correct=True),
            Option("To make attention cheaper", "No: the division costs ..."),
        ]),
        Number("How many parameters has ...?", answer=1_050_624, feedback="4·512² + 4·512.", hint="Count ..."),
    ])

The output is one block of HTML with its own small script and style, and nothing loaded from elsewhere,
so the same cell works on the built website (myst-nb keeps the HTML output, also from ``file://``), in
Colab and in Jupyter. Options are native radio buttons and the numeric answer a labelled text field with
a button, so the quiz works from the keyboard; each question's feedback is a live region that a screen
reader announces, and says in words, not only in colour, whether the answer was right.

Text is plain: it is escaped, and `backticks` become code. Write math in Unicode (√d_k, d², ·), not
TeX: feedback appears after the page's MathJax has run, and a Colab output has no MathJax, so a ``$``
would show as it is. The helper refuses TeX.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Choice", "Number", "Option", "Quiz", "show_quiz", "shown_order"]


@dataclass(frozen=True)
class Option:
    """One answer of a multiple-choice question, with the feedback a reader sees on choosing it."""

    text: str
    feedback: str
    correct: bool = False

    def __post_init__(self) -> None:
        _text(self.text, "Option text")
        _text(self.feedback, f"the feedback of option {self.text!r}")
        if not isinstance(self.correct, bool):
            raise ValueError(f"Option correct must be True or False, got correct={self.correct!r}")


@dataclass(frozen=True)
class Choice:
    """A multiple-choice question: at least two options, exactly one of them correct."""

    question: str
    options: Sequence[Option]

    def __post_init__(self) -> None:
        _text(self.question, "Choice question")
        options = tuple(self.options)
        if not all(isinstance(option, Option) for option in options):
            raise ValueError(f"the options of {self.question!r} must be Option objects, got {options!r}")
        if len(options) < 2:
            raise ValueError(f"{self.question!r} needs at least two options, got {len(options)}")
        right = sum(option.correct for option in options)
        if right != 1:
            raise ValueError(f"{self.question!r} needs exactly one correct option, got {right}")
        if len({option.text for option in options}) != len(options):
            raise ValueError(f"{self.question!r} has two options with the same text")
        object.__setattr__(self, "options", options)


@dataclass(frozen=True)
class Number:
    """A numeric question: an answer within ``tolerance`` (absolute) of ``answer`` is right.

    ``feedback`` explains the answer and shows once it is found; ``hint`` shows after a wrong answer.
    """

    question: str
    answer: float
    feedback: str
    hint: str
    tolerance: float = 0.0

    def __post_init__(self) -> None:
        _text(self.question, "Number question")
        _text(self.feedback, f"the feedback of {self.question!r}")
        _text(self.hint, f"the hint of {self.question!r}")
        for name in ("answer", "tolerance"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{name} of {self.question!r} must be a finite number, got {name}={value!r}")
        if self.tolerance < 0:
            raise ValueError(f"tolerance of {self.question!r} must be at least 0, got tolerance={self.tolerance!r}")


Question = Choice | Number

#: The quiz's look: the page's own colours for text, green or red only on the border of feedback that
#: also says "Right" or "Not quite" in words.
STYLE = """\
.tb-quiz{margin:1em 0;font-size:1rem;line-height:1.5}
.tb-quiz fieldset{border:1px solid #8a8a8a;border-radius:.4em;margin:0 0 1em;padding:.6em 1em}
.tb-quiz legend{float:none;width:auto;margin:0;padding:0 .3em;font-size:1rem;font-weight:600;line-height:1.5}
.tb-quiz .tb-option{display:flex;gap:.5em;align-items:baseline;margin:.25em 0}
.tb-quiz .tb-option input{flex:none}
.tb-quiz input[type=text]{font:inherit;width:12em;margin:0 .5em;padding:.1em .3em}
.tb-quiz button{font:inherit;padding:.1em .8em;cursor:pointer}
.tb-quiz .tb-feedback:empty{display:none}
.tb-quiz .tb-feedback{margin:.5em 0 0;padding:.3em .7em;border-left:.3em solid #8a8a8a}
.tb-quiz .tb-feedback.tb-right{border-left-color:#2e7d32}
.tb-quiz .tb-feedback.tb-wrong{border-left-color:#c62828}
"""

#: Wires one quiz (found by id): a radio button shows its option's feedback when chosen (by mouse,
#: or by arrow keys), the Check button or Enter in a numeric field compares the number typed.
SCRIPT = """\
(function () {
  var quiz = document.getElementById(%s);
  if (!quiz || quiz.dataset.ready) return;
  quiz.dataset.ready = "1";
  function say(question, right, text) {
    var box = question.querySelector(".tb-feedback");
    box.className = "tb-feedback " + (right ? "tb-right" : "tb-wrong");
    box.innerHTML = "<strong>" + (right ? "Right." : "Not quite.") + "</strong> " + text;
  }
  function checkNumber(question) {
    var field = question.querySelector("input[type=text]");
    var typed = field.value.replace(/[\\s,_]/g, "");
    var value = typed === "" ? NaN : Number(typed);
    if (!isFinite(value)) {
      var box = question.querySelector(".tb-feedback");
      box.className = "tb-feedback tb-wrong";
      box.textContent = "Type a number, for example 512 or 6.99e-4.";
      return;
    }
    var answer = Number(field.dataset.answer);
    var right = Math.abs(value - answer) <= Number(field.dataset.tolerance) + 1e-9 * Math.abs(answer);
    say(question, right, right ? field.dataset.feedback : field.dataset.hint);
  }
  quiz.addEventListener("change", function (event) {
    var option = event.target;
    if (option.type !== "radio") return;
    say(option.closest("fieldset"), option.dataset.correct === "true", option.dataset.feedback);
  });
  quiz.addEventListener("click", function (event) {
    if (event.target.tagName === "BUTTON") checkNumber(event.target.closest("fieldset"));
  });
  quiz.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && event.target.type === "text") {
      event.preventDefault();
      checkNumber(event.target.closest("fieldset"));
    }
  });
})();
"""


def shown_order(question: Choice) -> tuple[Option, ...]:
    """The options in the order the quiz shows them: shuffled, the same way on every build, so that
    the right one is not always where the chapter's source happens to list it."""

    def key(option: Option) -> str:
        return hashlib.sha256(f"{question.question}\n{option.text}".encode()).hexdigest()

    return tuple(sorted(question.options, key=key))


class Quiz:
    """A list of questions that shows as an interactive quiz in HTML (and as plain text elsewhere)."""

    def __init__(self, questions: Sequence[Question]) -> None:
        questions = tuple(questions)
        if not questions:
            raise ValueError("a quiz needs at least one question, got none")
        for question in questions:
            if not isinstance(question, Choice | Number):
                raise ValueError(f"each question must be a Choice or a Number, got {question!r}")
        self.questions = questions
        # The same questions give the same ids, so a rebuilt page is the same page.
        digest = hashlib.sha256(repr(questions).encode()).hexdigest()[:10]
        self.id = f"tb-quiz-{digest}"

    def _repr_html_(self) -> str:
        parts = [f'<div class="tb-quiz" id="{self.id}">', f"<style>{STYLE}</style>"]
        for number, question in enumerate(self.questions, start=1):
            name = f"{self.id}-{number}"
            legend = f"Question {number} of {len(self.questions)}. {_html(question.question)}"
            parts.append(f'<fieldset class="tb-question"><legend>{legend}</legend>')
            if isinstance(question, Choice):
                for index, option in enumerate(shown_order(question), start=1):
                    parts.append(
                        f'<div class="tb-option"><input type="radio" name="{name}" id="{name}-{index}" '
                        f'data-correct="{"true" if option.correct else "false"}" '
                        f'data-feedback="{html.escape(_html(option.feedback))}">'
                        f'<label for="{name}-{index}">{_html(option.text)}</label></div>'
                    )
            else:
                parts.append(
                    f'<div class="tb-number"><label for="{name}-answer">Your answer</label>'
                    f'<input type="text" inputmode="decimal" autocomplete="off" id="{name}-answer" '
                    f'data-answer="{question.answer!r}" data-tolerance="{question.tolerance!r}" '
                    f'data-feedback="{html.escape(_html(question.feedback))}" '
                    f'data-hint="{html.escape(_html(question.hint))}">'
                    f'<button type="button">Check</button></div>'
                )
            parts.append('<p class="tb-feedback" role="status" aria-live="polite"></p></fieldset>')
        parts.append(f"<script>{SCRIPT % json.dumps(self.id)}</script></div>")
        return "\n".join(parts)

    def __repr__(self) -> str:
        lines = []
        for number, question in enumerate(self.questions, start=1):
            lines.append(f"{number}. {question.question}")
            if isinstance(question, Choice):
                lines += [
                    f"   ({chr(ord('a') + index)}) {option.text}" for index, option in enumerate(shown_order(question))
                ]
        return "\n".join(lines)


def show_quiz(questions: Sequence[Question]) -> None:
    """Display the questions as an interactive quiz: in a notebook, on the book's pages and in Colab."""
    from IPython.display import display

    display(Quiz(questions))


TEX = re.compile(r"\$|\\\(|\\\[")
CODE = re.compile(r"`([^`]+)`")


def _text(value: object, name: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    if TEX.search(value):
        raise ValueError(
            f"{name} has TeX math ({value!r}), which would show raw on the website: write it in Unicode (√d_k, d²)"
        )
    return value


def _html(text: str) -> str:
    """Plain text as HTML: escaped, with `code` in backticks as <code>."""
    return CODE.sub(r"<code>\1</code>", html.escape(text, quote=False))
