"""The grader of ``test-time-compute``'s code exercise: ``grade("pass_at_k", your_function)``.

Written by hand, like :mod:`transformer_book.exercises`, whose registry it joins when imported, so
``grade`` from either module knows it. It lives apart for the reason
:mod:`transformer_book.exercises_recurrence` does: a new grader in a shared module would change
the fingerprint of every swept chapter that imports it, without changing their experiments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from transformer_book.exercises import _grader, grade

__all__ = ["grade"]

#: (samples, right, k) the grader tries: between first (where every mistake below differs),
#: then none right, all right, k = 1 and k = samples.
CASES = ((16, 3, 4), (8, 3, 2), (16, 4, 1), (16, 0, 4), (16, 16, 4), (16, 1, 16), (10, 2, 8), (20, 5, 10))


@_grader(
    "pass_at_k",
    "test-time-compute",
    "your estimate is 1 - C(n - c, k) / C(n, k) for every case tried, from none right to all right, k = 1 to k = n.",
)
def _pass_at_k(candidate: Callable[..., Any]) -> str | None:
    for samples, right, k in CASES:
        expected = 1.0 - math.comb(samples - right, k) / math.comb(samples, k)
        result = candidate(samples, right, k)
        if not isinstance(result, int | float) or isinstance(result, bool):
            return f"Not yet: return a number, the estimate of pass@k; got {type(result).__name__}."
        if math.isclose(result, expected, rel_tol=1e-9, abs_tol=1e-12):
            continue
        where = f"with {right} right of {samples} samples, pass@{k} = {expected:.4f}"
        mistakes = {
            "draws with replacement, 1 - (1 - c/n)^k: a sample drawn once cannot be drawn again": 1.0
            - (1.0 - right / samples) ** k,
            "gives pass@1, c/n, whatever k is": right / samples,
            "returns the chance that all k are wrong: pass@k is one minus it": 1.0 - expected,
            "needs every one of the k to be right: pass@k needs at least one": (
                math.comb(right, k) / math.comb(samples, k) if k <= right else 0.0
            ),
        }
        diagnosis = next(
            (why for why, wrong in mistakes.items() if math.isclose(result, wrong, rel_tol=1e-9, abs_tol=1e-12)),
            None,
        )
        if diagnosis:
            return f"Not quite: your function {diagnosis} ({where}; you gave {result:.4f})."
        return f"Not quite: {where}; you gave {result:.4f}."
    return None
