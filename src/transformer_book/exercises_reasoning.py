"""The grader of Part IX's code exercise (``worked-steps``): ``grade("weekday_steps", your_function)``.

Written by hand, like :mod:`transformer_book.exercises`, whose registry it joins when imported, so
``grade`` from either module knows it. It lives apart for the reason
:mod:`transformer_book.exercises_recurrence` does: a new grader in the shared module would change
the fingerprint of every swept chapter that imports it, without changing their experiments.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from transformer_book.exercises import _grader, grade

__all__ = ["grade"]


def _steps(start: int, days: tuple[int, ...], *, from_start: bool = False) -> list[int]:
    """The weekday (0 = Monday) after each move; with from_start, each move wrongly added to the start."""
    weekday, steps = start, []
    for move in days:
        weekday = ((start if from_start else weekday) + move) % 7
        steps.append(weekday)
    return steps


@_grader(
    "weekday_steps",
    "worked-steps",
    "your steps are the calendar's for every start and chain of moves tried, one to eight moves long.",
)
def _weekday_steps(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.worked_steps import MOST_DAYS, MOST_MOVES, Moves

    rng = random.Random(0)
    for trial in range(60):
        start = date(2026, 12, 7) + timedelta(days=trial % 7)  # a Monday, then every other weekday
        days = tuple(rng.randint(1, MOST_DAYS) for _ in range(1 + trial % MOST_MOVES))
        names = Moves(start, days).weekdays()  # the calendar's, for the message
        right = _steps(start.weekday(), days)
        result = candidate(start.weekday(), days)
        if not isinstance(result, list | tuple):
            return f"Not yet: return a list of weekday numbers, one per move; got {type(result).__name__}."
        result = list(result)
        if result == right:
            continue
        where = f"for a meeting on weekday {start.weekday()} moved {list(days)} days, the steps are {right}"
        mistakes = {
            "adds each move to the first weekday: add it to the weekday the move before reached": _steps(
                start.weekday(), days, from_start=True
            ),
            "writes the answer alone: write the weekday after every move, the answer last": right[-1:],
            "starts with the first weekday: write only the weekdays after each move": [start.weekday(), *right],
            "leaves out the modulo: a weekday is 0 to 6": [
                start.weekday() + sum(days[: i + 1]) for i in range(len(days))
            ],
        }
        diagnosis = next((why for why, wrong in mistakes.items() if wrong == result and wrong != right), None)
        if diagnosis:
            return f"Not quite: your function {diagnosis} ({where} = {names}; you wrote {result})."
        return f"Not quite: {where} = {names}; you wrote {result}."
    return None
