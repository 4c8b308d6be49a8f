"""The grader of ``verifiable-rewards``' code exercise: ``grade("group_advantages", your_function)``.

Written by hand, like :mod:`transformer_book.exercises`, whose registry it joins when imported, so
``grade`` from either module knows it. It lives apart for the reason
:mod:`transformer_book.exercises_recurrence` does: a new grader in a shared module would change
the fingerprint of every swept chapter that imports it, without changing their experiments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from transformer_book.exercises import _grader, grade
from transformer_book.verifiable_rewards import group_advantages

__all__ = ["grade"]

#: Groups of rewards the grader tries: mixed 0/1 verdicts first (where every mistake below differs),
#: then a group of equal rewards beside a mixed one, then rewards that are not 0 or 1.
CASES = (
    torch.tensor([[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]]),
    torch.tensor([[1.0, 1.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0]]),
    torch.tensor([[0.5, 2.0, -1.0], [3.0, 3.5, 1.0]]),
)


@_grader(
    "group_advantages",
    "verifiable-rewards",
    "your advantages are each reward minus its group's mean, over the group's standard deviation plus 1e-4, "
    "for mixed groups, a group of equal rewards, and rewards that are not 0 or 1.",
)
def _group_advantages(candidate: Callable[..., Any]) -> str | None:
    for rewards in CASES:
        expected = group_advantages(rewards)  # the chapter's own, which the exercise asks for
        result = candidate(rewards.clone())
        if not isinstance(result, torch.Tensor):
            return f"Not yet: return a tensor of advantages; got {type(result).__name__}."
        if result.shape != expected.shape:
            return (
                f"Not quite: the advantages must have the rewards' shape {tuple(rewards.shape)}, one per answer; "
                f"got {tuple(result.shape)}."
            )
        if torch.isnan(result).any():
            return "Not quite: a group of equal rewards gave NaN: its standard deviation is 0, so add 1e-4 to it."
        if torch.allclose(result, expected, atol=1e-5):
            continue
        centred = rewards - rewards.mean(dim=1, keepdim=True)
        mistakes = {
            "centres each reward but does not divide by the group's standard deviation": centred,
            "divides by the standard deviation of the whole batch, not of each group": centred / (rewards.std() + 1e-4),
            "takes the mean of the whole batch, not of each group": (rewards - rewards.mean())
            / (rewards.std(dim=1, keepdim=True) + 1e-4),
            "uses the population standard deviation (correction=0); torch.std's default, as trl uses, divides "
            "by n - 1": centred / (rewards.std(dim=1, keepdim=True, correction=0) + 1e-4),
            "divides by the standard deviation without adding 1e-4, which a group of equal rewards turns into "
            "0 / 0 = NaN": centred / rewards.std(dim=1, keepdim=True),
            "gives each reward divided by its group's standard deviation, without subtracting the mean": rewards
            / (rewards.std(dim=1, keepdim=True) + 1e-4),
        }
        diagnosis = next((why for why, wrong in mistakes.items() if torch.allclose(result, wrong, atol=1e-5)), None)
        where = f"for rewards {rewards.tolist()} the advantages are {[[round(float(a), 3) for a in row] for row in expected]}"
        if diagnosis:
            return f"Not quite: your function {diagnosis} ({where})."
        return f"Not quite: {where}; you gave {[[round(float(a), 3) for a in row] for row in result]}."
    return None
