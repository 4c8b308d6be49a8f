"""The grader of Part I's code exercise (``sequential-bottleneck``): ``grade("batched_rnn", your_function)``.

Written by hand, like :mod:`transformer_book.exercises`, whose registry it joins when imported, so
``grade`` from either module knows it. It lives apart because the graders of Parts II to VIII were
swept with the chapters that import them: a new grader in their module would change what those
chapters run, and so the fingerprint of their sweeps, without changing their experiments.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from transformer_book.exercises import _first_match, _grader, _same, _shape, grade

__all__ = ["grade"]


def _rnn_states(x: Tensor, w_x: Tensor, w_h: Tensor, b: Tensor, *, squash: bool = True, carry: bool = False) -> Tensor:
    """The recurrence of sequential-bottleneck's rnn_layer, h_t = tanh(x_t W_x + h_{t-1} W_h + b), run
    on each sequence of x (B, n, d) from h_0 = 0: all states (B, n, d). With carry, each sequence
    starts from the last state of the one before (a state not reset); without squash, no tanh."""
    h = x.new_zeros(w_h.shape[0])
    sequences = []
    for sequence in x:
        h = h if carry else x.new_zeros(w_h.shape[0])
        states = []
        for x_t in sequence:
            h = x_t @ w_x + h @ w_h + b
            h = torch.tanh(h) if squash else h
            states.append(h)
        sequences.append(torch.stack(states))
    return torch.stack(sequences)


@_grader(
    "batched_rnn", "sequential-bottleneck", "your batched recurrence gives rnn_layer's states for all 3 sequences."
)
def _batched_rnn(candidate: Callable[..., Any]) -> str | None:
    generator = torch.Generator().manual_seed(0)
    batch, n, d = 3, 5, 4  # all different, so that a swapped axis shows up as a wrong shape
    x = torch.randn(batch, n, d, generator=generator, dtype=torch.float64)
    w_x, w_h = (torch.randn(d, d, generator=generator, dtype=torch.float64) / math.sqrt(d) for _ in range(2))
    b = torch.randn(d, generator=generator, dtype=torch.float64)
    expected = _rnn_states(x, w_x, w_h, b)
    states = candidate(x, w_x, w_h, b)
    if _shape(states) == (batch, d):
        return f"Wrong shape: that is the last state alone; return every state, {(batch, n, d)}."
    if _shape(states) == (n, batch, d):
        return f"Wrong shape: the states are stacked along the batch; stack them along time, {(batch, n, d)}."
    if _shape(states) != (batch, n, d):
        return f"Wrong shape: the states should be (batch, n, d) = {(batch, n, d)}, got {_shape(states)}."
    mistakes = {
        "leaves out the tanh": _rnn_states(x, w_x, w_h, b, squash=False),
        "carries the state from one sequence into the next: each starts from h_0 = 0": _rnn_states(
            x, w_x, w_h, b, carry=True
        ),
        "leaves out the bias b": _rnn_states(x, w_x, w_h, torch.zeros_like(b)),
        "swaps the weights: x_t goes through W_x, the state through W_h": _rnn_states(x, w_h, w_x, b),
    }
    if not _same(states, expected):
        return f"Not quite: your recurrence {_first_match(states, mistakes) or 'differs from rnn_layer'}."
    return None
