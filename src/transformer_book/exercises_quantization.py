"""The grader of ``quantization``'s code exercise: ``grade("absmax_int8", your_function)``.

Written by hand, like :mod:`transformer_book.exercises`, whose registry it joins when imported, so
``grade`` from either module knows it. It lives apart for the reason
:mod:`transformer_book.exercises_recurrence` does: a new grader in a shared module would change
the fingerprint of every swept chapter that imports it, without changing their experiments.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from transformer_book.exercises import _grader, grade

__all__ = ["grade"]


def _weights() -> list[Tensor]:
    """The weights the grader tries: random rows with one large weight each, a row whose largest
    magnitude is negative (a scale from max(w) instead of max|w| overflows there), and a wide one."""
    generator = torch.Generator().manual_seed(0)
    small = torch.randn(5, 16, generator=generator)
    small[torch.arange(5), torch.tensor([0, 3, 7, 11, 15])] *= 6  # one outlier a row
    small[2] = -small[2].abs()  # every weight negative: its largest |w| is a negative weight
    wide = torch.randn(3, 64, generator=generator) * 0.02
    return [small, wide]


def _expected(weight: Tensor) -> tuple[Tensor, Tensor]:
    scale = weight.abs().amax(dim=1) / 127
    return torch.round(weight / scale[:, None]).to(torch.int8), scale


def _rounded(weight: Tensor, scale: Tensor, how: Callable[[Tensor], Tensor]) -> Tensor:
    return how(weight / scale.reshape(-1, 1)).clamp(-128, 127).to(torch.int8)


@_grader(
    "absmax_int8",
    "quantization",
    "your codes and scales are absmax int8 per output channel: one scale per row, max|w| / 127, and w / scale "
    "rounded to the nearest integer, for every weight tried.",
)
def _absmax_int8(candidate: Callable[..., Any]) -> str | None:
    for weight in _weights():
        expected_q, expected_scale = _expected(weight)
        result = candidate(weight.clone())
        if not (isinstance(result, tuple) and len(result) == 2 and all(isinstance(r, Tensor) for r in result)):
            return f"Not yet: return a tuple of two tensors, (q, scale); got {type(result).__name__}."
        q, scale = result
        where = f"for a weight of shape {tuple(weight.shape)}"
        if scale.shape != expected_scale.shape:
            if scale.numel() == weight.shape[1]:
                return (
                    f"Not quite: your scale has one entry per column (input); per output channel is one per row, "
                    f"shape {tuple(expected_scale.shape)} ({where})."
                )
            if scale.numel() == 1:
                return f"Not quite: one scale for the whole matrix; per output channel is one per row ({where})."
            return f"Not quite: the scale should have shape {tuple(expected_scale.shape)}, got {tuple(scale.shape)}."
        if q.shape != weight.shape:
            return f"Not quite: q should have the weight's shape {tuple(weight.shape)}, got {tuple(q.shape)}."
        if q.dtype != torch.int8:
            return f"Not quite: store the codes as torch.int8, one byte each; got {q.dtype}."
        if not torch.allclose(scale.double(), expected_scale.double(), rtol=1e-6, atol=0):
            absmax = weight.abs().amax(dim=1)
            mistakes = {
                "divides the largest |w| by 128; 127 keeps the grid symmetric, so +max|w| and -max|w| both fit": (
                    absmax / 128
                ),
                "divides by 255 or 256, an unsigned byte's range; int8 codes are signed, -127 to 127": absmax / 255,
                "takes the largest weight, not the largest |w|: a row of negative weights overflows": (
                    weight.amax(dim=1) / 127
                ),
                "forgets to divide by 127: the scale is one step of the grid, not the whole range": absmax,
            }
            for why, wrong in mistakes.items():
                if torch.allclose(scale.double(), wrong.double(), rtol=1e-6, atol=0) or (
                    why.startswith("divides by 255") and torch.allclose(scale, absmax / 256, rtol=1e-6, atol=0)
                ):
                    return f"Not quite: your function {why} ({where})."
            return f"Not quite: each row's scale is its largest |w| / 127 ({where})."
        if not torch.equal(q, expected_q):
            ways = {
                "truncates w / scale toward zero; round it to the nearest integer": torch.trunc,
                "takes the floor of w / scale; round it to the nearest integer": torch.floor,
            }
            for why, how in ways.items():
                if torch.equal(q, _rounded(weight, expected_scale, how)):
                    return f"Not quite: your function {why} ({where})."
            differing = int((q != expected_q).sum())
            return f"Not quite: {differing} codes differ from round(w / scale) ({where})."
    return None
