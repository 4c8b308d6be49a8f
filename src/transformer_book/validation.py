"""Argument checks shared by the code of every chapter, written once (by hand, not exported).

One rule for every size and count in the book: Python and NumPy integers are accepted and
returned as ``int``; a bool is refused (``True`` is not a size, though Python counts it as 1), and
so is a float such as ``2.0``. Every error is a ``ValueError`` that names the argument and the
value it got, so a reader sees at once which call was wrong.
"""

from __future__ import annotations

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
