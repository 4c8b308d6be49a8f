"""Utilities for any program that uses the book's models: the device to run on, a parameter count
and a timer.

This module and :mod:`transformer_book.runtime` (what the chapters need to run: seeds, checks of
claims, progress bars, figure style, ``glue``) are written by hand. Everything else in the package
is exported from the chapters (see ``scripts/export.py``), so a reader meets each idea once, in the
chapter that teaches it; :mod:`transformer_book.models` and :mod:`transformer_book.utils` name
what a program would import from them.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
import warnings
from collections.abc import Callable

import torch

from transformer_book.checks import integer, positive_int, real


def device() -> torch.device:
    """The fastest device available: CUDA, then Apple's MPS if it computes attention correctly, then the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available() and _mps_works():
        return torch.device("mps")
    return torch.device("cpu")


@functools.cache
def _mps_works() -> bool:
    """Run one small attention step, forward and backward, on MPS and on the CPU; True if they agree.

    MPS lacks some operations and dtypes in some PyTorch releases; a chapter should then run on the
    CPU with a message, not fail halfway or print wrong numbers. Checked once per process.
    """
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(2, 4, 8, 16, generator=generator) for _ in range(3))
    mask = torch.ones(8, 8, dtype=torch.bool).tril()

    def attend(where: str) -> tuple[torch.Tensor, torch.Tensor]:
        q = query.to(where).requires_grad_()
        output = torch.nn.functional.scaled_dot_product_attention(q, key.to(where), value.to(where), mask.to(where))
        output.square().sum().backward()
        assert q.grad is not None
        return output.detach().cpu(), q.grad.cpu()

    try:
        (output, grad), (expected_output, expected_grad) = attend("mps"), attend("cpu")
        agree = torch.allclose(output, expected_output, atol=1e-4) and torch.allclose(grad, expected_grad, atol=1e-3)
        problem = "" if agree else "its result differs from the CPU's"
    except Exception as error:  # any failure of the backend means: do not use it
        agree, problem = False, f"{type(error).__name__}: {error}"
    if not agree:
        warnings.warn(
            f"Apple's MPS is available but failed a small attention check ({problem}); the book runs on the CPU.",
            stacklevel=3,
        )
    return agree


def on_accelerator() -> bool:
    """True when :func:`device` is not the CPU."""
    return device().type != "cpu"


def count_parameters(module: torch.nn.Module) -> int:
    """The number of distinct trainable numbers in module.

    ``module.parameters()`` yields a tensor shared by several layers once, so a tied matrix
    counts once; frozen parameters (``requires_grad=False``) are left out.
    """
    return sum(parameter.numel() for parameter in module.parameters() if parameter.requires_grad)


def seconds_per_call(
    run: Callable[[], object],
    *,
    calls: int = 3,
    warmup: int = 2,
    min_seconds: float = 0.0,
    threads: int | None = None,
) -> float:
    """The median wall-clock seconds of one call of ``run()``: the book's one timer.

    ``warmup`` untimed calls pay one-off costs (memory, caches, kernel choice); then at least
    ``calls`` timed calls, and more until they add up to ``min_seconds``, so that a call of a few
    microseconds is timed often enough for a steady median. Each call is timed alone, between two
    waits for the accelerator (CUDA or MPS), so the time is the work's and not the launch's. It runs
    on ``threads`` CPU threads, PyTorch's current setting by default, which is restored afterwards.

    Raises:
        ValueError: if calls or threads is not a positive integer, warmup is negative, or
            min_seconds is negative or not finite.
    """
    calls = positive_int(calls, "calls")
    warmup = integer(warmup, "warmup", minimum=0)
    min_seconds = real(min_seconds, "min_seconds", at_least=0)
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(previous_threads if threads is None else positive_int(threads, "threads"))
    try:
        for _ in range(warmup):
            run()
        times: list[float] = []
        while len(times) < calls or sum(times) < min_seconds:
            _wait_for_accelerator()
            start = time.perf_counter()
            run()
            _wait_for_accelerator()
            times.append(time.perf_counter() - start)
    finally:
        torch.set_num_threads(previous_threads)
    return float(statistics.median(times))


def _wait_for_accelerator() -> None:
    """Block until the GPU (or Apple's MPS) has finished the work queued so far; nothing on the CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    elif device().type == "mps":
        torch.mps.synchronize()


def nudge_parameters(module: torch.nn.Module, scale: float) -> torch.nn.Module:
    """Add Gaussian noise of standard deviation ``scale`` to every parameter of ``module``, in
    place, and return the module.

    A freshly built layer has zero biases, LayerNorms at the identity and, in PyTorch's stacks,
    identical clones of one layer, so a comparison of two implementations could not see a
    misplaced bias or layer; after the nudge, no two of them are alike. The noise is drawn from
    torch's global generator, one parameter after another in ``module.parameters()`` order.
    """
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"nudge_parameters needs a torch.nn.Module, got {type(module).__name__}")
    if not (isinstance(scale, (int, float)) and scale > 0 and math.isfinite(scale)):
        raise ValueError(f"nudge_parameters: scale must be a positive finite number, got {scale!r}")
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    return module
