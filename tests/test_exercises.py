"""Each grader passes the book's solution, fails plausible buggy versions with the right diagnosis, and says
"Not yet" to the unfilled template; every grader is called from its chapter and every call names a grader."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import jupytext
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import transformer_book.exercises_quantization  # noqa: F401  (quantization's grader joins the registry on import)
import transformer_book.exercises_reasoning  # noqa: F401  (Part IX's grader joins the registry on import)
import transformer_book.exercises_recurrence  # noqa: F401  (Part I's grader joins the registry on import)
import transformer_book.exercises_rewards  # noqa: F401  (verifiable-rewards' grader joins the registry on import)
import transformer_book.exercises_sampling  # noqa: F401  (test-time-compute's grader joins the registry on import)
import transformer_book.exercises_speculative  # noqa: F401  (speculative-decoding's grader joins the registry on import)
from chapters import ROOT, is_notebook
from transformer_book.exercises import GRADERS, grade
from transformer_book.model import apply_rope, causal_mask, padding_mask, sinusoidal_encoding
from transformer_book.tokenization import merge_pair
from transformer_book.training import smoothed_targets


def absmax_int8(
    w: torch.Tensor,
    divisor: float = 127,
    signed_max: bool = False,
    per: str = "row",
    rounding: Callable[[torch.Tensor], torch.Tensor] = torch.round,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Int8 absmax quantization per row, and the usual ways to get it wrong."""
    largest = {"row": w.abs().amax(1), "matrix": w.abs().max(), "column": w.abs().amax(0)}[per]
    scale = (w.amax(1) if signed_max else largest) / divisor
    q = rounding(w / (scale[:, None] if per == "row" else scale)).clamp(-128, 127).to(torch.int8)
    return q, scale


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    result: np.ndarray = e / e.sum(axis=axis, keepdims=True)
    return result


def attention(Q: np.ndarray, K: np.ndarray, V: np.ndarray, scale: float | None = None, axis: int = -1) -> Any:
    weights = softmax(Q @ K.T / (math.sqrt(Q.shape[-1]) if scale is None else scale), axis)
    return weights @ V, weights


def mean_square(x: torch.Tensor) -> torch.Tensor:
    return x.square().mean(-1, keepdim=True)


def rate(step: int, d_model: int, warmup: int, scaled: bool = True, warm_power: float = -1.5) -> float:
    return float((d_model**-0.5 if scaled else 1.0) * min(step**-0.5, step * warmup**warm_power))


def smoothed_loss(
    logits: torch.Tensor, targets: torch.Tensor, smoothing: float, ignore_index: int, skip: bool = True
) -> torch.Tensor:
    keep = targets != ignore_index if skip else torch.ones_like(targets, dtype=torch.bool)
    distribution = smoothed_targets(targets[keep], logits.shape[-1], smoothing)
    return -(distribution * F.log_softmax(logits[keep], dim=-1)).sum(-1).mean()


def encoding(num_positions: int, d_model: int, base: float, swap: bool = False, fixed_base: bool = False) -> Any:
    table = sinusoidal_encoding(num_positions, d_model, dtype=torch.float64)
    if not fixed_base:
        angles = torch.arange(num_positions, dtype=torch.float64)[:, None] / base ** (
            torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
        )
        table = torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(-2)
    return table.view(num_positions, -1, 2).flip(-1).flatten(-2) if swap else table


def batched_rnn(
    x: torch.Tensor, w_x: torch.Tensor, w_h: torch.Tensor, b: torch.Tensor, tanh: bool = True, carry: bool = False
) -> torch.Tensor:
    """The recurrence h_t = tanh(x_t W_x + h_{t-1} W_h + b) over time, all sequences of x (B, n, d) at once."""
    h, states = x.new_zeros(x.shape[0], w_h.shape[0]), []
    for t in range(x.shape[1]):
        h = x[:, t] @ w_x + h @ w_h + b
        h = torch.tanh(h) if tanh else h
        states.append(h)
    return torch.stack(states, dim=1)


def unbatched_carrying_rnn(x: torch.Tensor, w_x: torch.Tensor, w_h: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """One sequence at a time, forgetting to reset the state between them."""
    h, states = x.new_zeros(w_h.shape[0]), []
    for sequence in x:
        for x_t in sequence:
            h = torch.tanh(x_t @ w_x + h @ w_h + b)
            states.append(h)
    return torch.stack(states).view(x.shape)


def weekday_steps(start: int, days: tuple[int, ...], from_start: bool = False, modulo: int = 7) -> list[int]:
    """The weekday (0 = Monday) after each move of a meeting first on weekday start."""
    weekday, steps = start, []
    for move in days:
        weekday = ((start if from_start else weekday) + move) % modulo
        steps.append(weekday)
    return steps


def unfilled(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError("fill in step 1")


# name: (the solution, [(a buggy version, words its diagnosis must contain), ...])
CASES: dict[str, tuple[Callable[..., Any], list[tuple[Callable[..., Any], str]]]] = {
    "batched_rnn": (
        batched_rnn,
        [
            (lambda x, w_x, w_h, b: batched_rnn(x, w_x, w_h, b, tanh=False), "tanh"),
            (unbatched_carrying_rnn, "carries the state"),
            (lambda x, w_x, w_h, b: batched_rnn(x, w_x, w_h, b)[:, -1], "last state alone"),
            (lambda x, w_x, w_h, b: batched_rnn(x, w_x, w_h, b).transpose(0, 1), "along time"),
            (lambda x, w_x, w_h, b: batched_rnn(x, w_x, w_h, 0 * b), "bias"),
            (lambda x, w_x, w_h, b: batched_rnn(x, w_h, w_x, b), "swaps the weights"),
        ],
    ),
    "attention": (
        attention,
        [
            (lambda Q, K, V: attention(Q, K, V, scale=1.0), "not divided by sqrt(d_k)"),
            (lambda Q, K, V: attention(Q, K, V, axis=0), "over the queries"),
            (lambda Q, K, V: (attention(Q, K, V)[0].T, attention(Q, K, V)[1]), "Wrong shape"),
        ],
    ),
    "target_mask": (
        lambda lengths, m: padding_mask(lengths, m) & causal_mask(m),
        [
            (lambda lengths, m: padding_mask(lengths, m), "(batch, 1, m) is the padding mask alone"),
            (lambda lengths, m: padding_mask(lengths, m).expand(len(lengths), m, m), "see the future"),
            (lambda lengths, m: causal_mask(m).expand(len(lengths), m, m), "attend to the padding"),
            (lambda lengths, m: ~(padding_mask(lengths, m) & causal_mask(m)), "Inverted"),
            (lambda lengths, m: padding_mask(lengths, m) & causal_mask(m).tril(-1), "attend to itself"),
            (lambda lengths, m: (padding_mask(lengths, m) & causal_mask(m)).float(), "bool tensor"),
        ],
    ),
    "sinusoidal_encoding": (
        encoding,
        [
            (lambda p, d, base: encoding(p, d, base, swap=True), "swaps sine and cosine"),
            (lambda p, d, base: encoding(p, d, base, fixed_base=True), "ignores base"),
            (lambda p, d, base: encoding(p, d, base)[:, : d // 2], "Wrong shape"),
        ],
    ),
    "rms_norm": (
        lambda x, w, eps: w * x / torch.sqrt(mean_square(x) + eps),
        [
            (lambda x, w, eps: F.layer_norm(x, x.shape[-1:], w, eps=eps), "LayerNorm"),
            (lambda x, w, eps: x / torch.sqrt(mean_square(x) + eps), "gain"),
            (lambda x, w, eps: w * x / (torch.sqrt(mean_square(x)) + eps), "outside the square root"),
            (lambda x, w, eps: w * x / torch.sqrt(x.square().mean() + eps), "last dimension"),
        ],
    ),
    "learning_rate": (
        rate,
        [
            (lambda step, d, w: rate(step, d, w, scaled=False), "Off by the scale"),
            (lambda step, d, w: rate(step, d, w, warm_power=-1.0), "during the warm-up"),
            (lambda step, d, w: d**-0.5 * (step * w**-1.5 if step <= w else w**0.5 / step), "after the warm-up"),
        ],
    ),
    "label_smoothing": (
        smoothed_loss,
        [
            (lambda logits, targets, s, pad: smoothed_loss(logits, targets, s, pad, skip=False), "padding"),
            (
                lambda logits, targets, s, pad: F.cross_entropy(logits[targets != pad], targets[targets != pad]),
                "does not smooth",
            ),
            (lambda logits, targets, s, pad: smoothed_loss(logits, targets, s, pad) * 2, "differs"),
        ],
    ),
    "merge_pair": (
        merge_pair,
        [
            (lambda ids, pair, new: merge_pair(ids[::-1], pair[::-1], new)[::-1], "scan from the left"),
            (lambda ids, pair, new: merge_pair(ids, pair[::-1], new), "ordered"),
            (lambda ids, pair, new: merge_pair(ids[:2], pair, new) + ids[2:], "not only the first"),
        ],
    ),
    "repeat_kv_heads": (
        lambda x, h: x.repeat_interleave(h // x.shape[1], dim=1),
        [
            (lambda x, h: x.repeat(1, h // x.shape[1], 1, 1), "repeat_interleave"),
            (lambda x, h: x, "Wrong shape"),
            (lambda x, h: x.repeat_interleave(h // x.shape[1], dim=1).flip(1), "other numbers"),
        ],
    ),
    "lora": (
        lambda x, w, b, A, B, alpha: x @ w.T + b + alpha / A.shape[0] * (x @ A.T @ B.T),
        [
            (lambda x, w, b, A, B, alpha: x @ w.T + b + alpha * (x @ A.T @ B.T), "not by alpha"),
            (lambda x, w, b, A, B, alpha: x @ w.T + alpha / A.shape[0] * (x @ A.T @ B.T), "bias"),
            (lambda x, w, b, A, B, alpha: x @ w.T + b + alpha / A.shape[0] * (x @ B @ A), "Your function raised"),
        ],
    ),
    "weekday_steps": (
        weekday_steps,
        [
            (lambda start, days: weekday_steps(start, days, from_start=True), "adds each move to the first weekday"),
            (lambda start, days: weekday_steps(start, days)[-1:], "answer alone"),
            (lambda start, days: [start, *weekday_steps(start, days)], "starts with the first weekday"),
            (lambda start, days: weekday_steps(start, days, modulo=10**6), "modulo"),
            (lambda start, days: weekday_steps(start, days, modulo=6), "you wrote"),
            (lambda start, days: tuple(weekday_steps(start, days))[0], "return a list"),
        ],
    ),
    "pass_at_k": (
        lambda n, c, k: 1.0 - math.comb(n - c, k) / math.comb(n, k),
        [
            (lambda n, c, k: 1.0 - (1.0 - c / n) ** k, "with replacement"),
            (lambda n, c, k: c / n, "gives pass@1"),
            (lambda n, c, k: math.comb(n - c, k) / math.comb(n, k), "all k are wrong"),
            (lambda n, c, k: math.comb(c, k) / math.comb(n, k), "every one of the k"),
            (lambda n, c, k: 1.0 - math.comb(n - c, k - 1) / math.comb(n, k - 1) if k > 1 else c / n, "you gave"),
            (lambda n, c, k: f"{1.0 - math.comb(n - c, k) / math.comb(n, k):.3f}", "return a number"),
        ],
    ),
    "residual": (
        lambda p, q: (p - q).clamp(min=0) / (p - q).clamp(min=0).sum(),
        [
            (lambda p, q: p, "returns p itself"),
            (lambda p, q: (p - q).clamp(min=0), "is not normalised"),
            (lambda p, q: (q - p).clamp(min=0) / (q - p).clamp(min=0).sum(), "max(0, q - p)"),
            (lambda p, q: torch.minimum(p, q) / torch.minimum(p, q).sum(), "accepted part"),
            (lambda p, q: q, "the residual is"),
            (lambda p, q: ((p - q).clamp(min=0) / (p - q).clamp(min=0).sum()).tolist(), "return a tensor"),
            (lambda p, q: (p - q).clamp(min=0)[:2], "one probability per token"),
        ],
    ),
    "group_advantages": (
        lambda r: (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-4),
        [
            (lambda r: r - r.mean(dim=1, keepdim=True), "does not divide"),
            (lambda r: (r - r.mean(dim=1, keepdim=True)) / (r.std() + 1e-4), "of the whole batch, not of each group"),
            (lambda r: (r - r.mean()) / (r.std(dim=1, keepdim=True) + 1e-4), "mean of the whole batch"),
            (
                lambda r: (r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True, correction=0) + 1e-4),
                "population standard deviation",
            ),
            (lambda r: r / (r.std(dim=1, keepdim=True) + 1e-4), "without subtracting the mean"),
            (lambda r: (r - r.mean(dim=1, keepdim=True)) / r.std(dim=1, keepdim=True), "without adding 1e-4"),
            (lambda r: (r - r.mean(dim=1, keepdim=True)).flatten(), "shape"),
            (
                lambda r: ((r - r.mean(dim=1, keepdim=True)) / (r.std(dim=1, keepdim=True) + 1e-4)).tolist(),
                "return a tensor",
            ),
        ],
    ),
    "absmax_int8": (
        lambda w: absmax_int8(w),
        [
            (lambda w: absmax_int8(w, divisor=128), "divides the largest |w| by 128"),
            (lambda w: absmax_int8(w, divisor=255), "unsigned byte"),
            (lambda w: absmax_int8(w, signed_max=True), "largest weight, not the largest |w|"),
            (lambda w: absmax_int8(w, divisor=1), "forgets to divide by 127"),
            (lambda w: absmax_int8(w, per="matrix"), "one scale for the whole matrix"),
            (lambda w: absmax_int8(w, per="column"), "one entry per column"),
            (lambda w: absmax_int8(w, rounding=torch.trunc), "truncates"),
            (lambda w: absmax_int8(w, rounding=torch.floor), "floor"),
            (lambda w: (absmax_int8(w)[0].float(), absmax_int8(w)[1]), "torch.int8"),
            (lambda w: absmax_int8(w)[0], "tuple of two tensors"),
        ],
    ),
    "rope": (
        apply_rope,
        [
            (lambda x, positions, base: apply_rope(x, -positions, base), "wrong way"),
            (lambda x, positions, base: apply_rope(x, positions), "ignores base"),
            (lambda x, positions, base: x, "differs"),
        ],
    ),
}


def test_every_grader_has_cases() -> None:
    assert set(CASES) == set(GRADERS)
    assert len(GRADERS) >= 8, sorted(GRADERS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_grader_passes_the_solution(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert grade(name, CASES[name][0])
    assert capsys.readouterr().out.startswith("Passed: ")


@pytest.mark.parametrize("name", sorted(CASES))
def test_grader_fails_buggy_versions_and_says_why(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    buggy = CASES[name][1]
    assert len(buggy) >= 2
    for function, diagnosis in buggy:
        assert not grade(name, function)
        said = capsys.readouterr().out
        assert diagnosis in said, f"{name}: expected {diagnosis!r} in {said!r}"
        assert said.count("\n") == 1, "one sentence, one line"


@pytest.mark.parametrize("name", sorted(CASES))
def test_grader_says_not_yet_to_the_template(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert not grade(name, unfilled)
    assert capsys.readouterr().out == "Not yet: fill in step 1.\n"


def test_an_error_in_the_readers_function_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert not grade("target_mask", lambda lengths, m: 1 / 0)
    assert capsys.readouterr().out == "Your function raised ZeroDivisionError: division by zero\n"


def test_bad_names_and_arguments_raise_clear_errors() -> None:
    with pytest.raises(KeyError, match="the graders are: absmax_int8, attention, batched_rnn, group_advantages"):
        grade("atention", attention)
    with pytest.raises(TypeError, match="the function itself"):
        grade("attention", attention(np.ones((1, 1)), np.ones((1, 1)), np.ones((1, 1))))


def test_chapters_call_exactly_the_registered_graders() -> None:
    calls: dict[str, set[str]] = {}
    for chapter in filter(is_notebook, sorted((ROOT / "book").glob("*.md"))):
        code = "\n".join(cell.source for cell in jupytext.read(chapter).cells if cell.cell_type == "code")
        for name in re.findall(r"\bgrade\(\s*[\"']([^\"']*)[\"']", code):  # calls, not the prose that names grade
            calls.setdefault(name, set()).add(chapter.stem)
    unknown = sorted(set(calls) - set(GRADERS))
    assert not unknown, f"chapters call graders that do not exist: {unknown}"
    uncalled = sorted(set(GRADERS) - set(calls))
    assert not uncalled, f"graders no chapter calls: {uncalled}"
    elsewhere = {name: sorted(stems) for name, stems in calls.items() if stems != {GRADERS[name].chapter}}
    assert not elsewhere, f"graders called outside the chapter they belong to: {elsewhere}"
