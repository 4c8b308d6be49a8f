"""Argument checks shared by the code of every chapter, written once (by hand, not exported).

One rule for every size and count in the book: Python and NumPy integers are accepted and
returned as ``int``; a bool is refused (``True`` is not a size, though Python counts it as 1), and
so is a float such as ``2.0``. Every error is a ``ValueError`` that names the argument and the
value it got, so a reader sees at once which call was wrong.
"""

from __future__ import annotations

import operator


def integer(value: object, name: str, *, minimum: int | None = None) -> int:
    """Return value as an int; raise ValueError naming the argument unless it is an integer >= minimum."""
    number = _as_int(value, name, "an integer")
    if minimum is not None and number < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {name}={number}")
    return number


def positive_int(value: object, name: str) -> int:
    """Return value as an int; raise ValueError naming the argument unless it is an integer >= 1."""
    number = _as_int(value, name, "a positive integer")
    if number < 1:
        raise ValueError(f"{name} must be a positive integer, got {name}={number}")
    return number


def _as_int(value: object, name: str, what: str) -> int:
    """value as an int if it is an integer (Python's or NumPy's) and not a bool; else ValueError."""
    if not isinstance(value, bool):
        try:
            return operator.index(value)  # type: ignore[arg-type]  # any object: index() says if it fits
        except TypeError:
            pass
    raise ValueError(f"{name} must be {what}, got {name}={value!r}")


def probability(value: float, name: str = "dropout") -> float:
    """Return value as a float; raise ValueError unless it is a probability in [0, 1)."""
    if isinstance(value, bool) or not 0.0 <= value < 1.0:  # written this way round, NaN fails too
        raise ValueError(f"{name} must be a probability in [0, 1), got {name}={value}")
    return float(value)
