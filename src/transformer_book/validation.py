"""Argument checks shared by the code of every chapter, written once (by hand, not exported).

One rule for every size and count in the book: Python and NumPy integers are accepted and
returned as ``int``; a bool is refused (``True`` is not a size, though Python counts it as 1), and
so is a float such as ``2.0``. One rule for every other number (a rate, a temperature, a weight):
Python's and NumPy's ints and floats are accepted, a bool is refused, and so are NaN and infinity,
which no formula of the book means. Every error is a ``ValueError`` that names the argument and the
value it got, so a reader sees at once which call was wrong.
"""

from __future__ import annotations

import math
import numbers
import operator

import torch


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


def real(
    value: object,
    name: str,
    *,
    above: float | None = None,
    at_least: float | None = None,
    at_most: float | None = None,
    below: float | None = None,
    infinite: bool = False,
) -> float:
    """Return value as a float; raise ValueError naming the argument unless it is a finite real number in bounds.

    A real number is a Python or NumPy int or float, not a bool. The bounds are optional: ``above < value``,
    ``at_least <= value``, ``value <= at_most``, ``value < below``. NaN is always refused, infinity unless
    ``infinite`` is set (then only the bounds decide).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {name}={value!r}")
    number = float(value)
    wanted = _bounds(above, at_least, at_most, below)
    if math.isnan(number) or (math.isinf(number) and not infinite):
        finite = "a number" if infinite else "finite"  # with infinite set, only NaN lands here
        raise ValueError(f"{name} must be {finite}{' and ' + wanted if wanted else ''}, got {name}={value}")
    if (
        (above is not None and not number > above)
        or (at_least is not None and not number >= at_least)
        or (at_most is not None and not number <= at_most)
        or (below is not None and not number < below)
    ):
        raise ValueError(f"{name} must be {wanted}, got {name}={value}")
    return number


def _bounds(above: float | None, at_least: float | None, at_most: float | None, below: float | None) -> str:
    """The bounds of real() in words: 'positive', 'at least 0', 'in [0, 1]', or '' for none."""
    lower = f"({above}" if above is not None else None if at_least is None else f"[{at_least}"
    upper = f"{below})" if below is not None else None if at_most is None else f"{at_most}]"
    if lower is not None and upper is not None:
        return f"in {lower}, {upper}"
    if above is not None:
        return "positive" if above == 0 else f"greater than {above}"
    if at_least is not None:
        return f"at least {at_least}"
    if below is not None:
        return f"less than {below}"
    return "" if at_most is None else f"at most {at_most}"


def probability(value: float, name: str = "dropout") -> float:
    """Return value as a float; raise ValueError unless it is a probability in [0, 1)."""
    if isinstance(value, bool) or not 0.0 <= value < 1.0:  # written this way round, NaN fails too
        raise ValueError(f"{name} must be a probability in [0, 1), got {name}={value}")
    return float(value)


def token_ids(tokens: object, vocab_size: int, name: str = "tokens") -> None:
    """Raise ValueError, naming the argument, unless tokens is a tensor of integer ids in [0, vocab_size).

    The range is checked for CPU tensors only. Reading ids back from a GPU would make the host wait
    for the device at every call (twice per decoding step); there, the embedding's or the loss's own
    device-side assert stops a bad id instead.
    """
    if not isinstance(tokens, torch.Tensor):
        raise ValueError(f"{name} must be a tensor of integer ids, got {type(tokens).__name__}")
    if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
        raise ValueError(f"{name} must be integer ids, got dtype {tokens.dtype}")
    if tokens.device.type == "cpu" and tokens.numel() and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(
            f"{name} must be token ids in [0, {vocab_size}), got ids from {int(tokens.min())} to {int(tokens.max())}"
        )
