"""The grader of ``speculative-decoding``'s code exercise: ``grade("residual", your_function)``.

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

__all__ = ["grade"]


def _cases() -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(p, q) pairs the grader tries: a small hand-made pair, where every mistake below differs, then
    random pairs over 5 and 50 tokens, and a draft that gives one token almost everything."""
    generator = torch.Generator().manual_seed(0)
    cases = [
        (
            torch.tensor([0.5, 0.3, 0.2, 0.0], dtype=torch.float64),
            torch.tensor([0.2, 0.5, 0.1, 0.2], dtype=torch.float64),
        )
    ]
    for size in (5, 50):
        p = torch.rand(size, generator=generator, dtype=torch.float64).softmax(0)
        q = (3 * torch.rand(size, generator=generator, dtype=torch.float64)).softmax(0)
        cases.append((p, q))
    p = torch.full((6,), 1 / 6, dtype=torch.float64)
    q = torch.tensor([0.9, 0.02, 0.02, 0.02, 0.02, 0.02], dtype=torch.float64)
    return [*cases, (p, q)]


@_grader(
    "residual",
    "speculative-decoding",
    "your residual is max(0, p - q) normalised, for every pair tried, small and large.",
)
def _residual(candidate: Callable[..., Any]) -> str | None:
    for p, q in _cases():
        excess = (p - q).clamp(min=0)
        expected = excess / excess.sum()
        result = candidate(p.clone(), q.clone())
        if not isinstance(result, torch.Tensor):
            return f"Not yet: return a tensor, one probability per token; got {type(result).__name__}."
        if result.shape != p.shape:
            return f"Not quite: return one probability per token, shape {tuple(p.shape)}; got {tuple(result.shape)}."
        result = result.double()
        if torch.allclose(result, expected.to(result.dtype), rtol=1e-6, atol=1e-9):
            continue
        mistakes = {
            "returns p itself: the accepted draws already gave each token min(p, q), so the tokens with "
            "q >= p would get more than p": p,
            "is not normalised: divide max(0, p - q) by its sum": excess,
            "uses max(0, q - p): that adds to the tokens the draft already proposes too often": (q - p).clamp(min=0)
            / (q - p).clamp(min=0).sum(),
            "returns the accepted part min(p, q): the residual is what it leaves out": torch.minimum(p, q)
            / torch.minimum(p, q).sum(),
        }
        diagnosis = next(
            (why for why, wrong in mistakes.items() if torch.allclose(result, wrong.double(), rtol=1e-6, atol=1e-9)),
            None,
        )
        where = (
            f"for p = {p.tolist()[:4]}... and q = {q.tolist()[:4]}..."
            if len(p) > 4
            else f"for p = {p.tolist()} and q = {q.tolist()}"
        )
        if diagnosis:
            return f"Not quite: your function {diagnosis} ({where})."
        return f"Not quite: {where} the residual is {[round(v, 4) for v in expected.tolist()[:6]]}, you gave {[round(v, 4) for v in result.tolist()[:6]]}."
    return None
