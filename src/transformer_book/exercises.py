"""Graders for the book's code exercises: ``grade("name", your_function)``.

Written by hand, not exported from a chapter. Each grader runs your function on small fixed
inputs, compares the result with the book's own implementation, and prints one sentence: what
passed, or what failed and where to look (a blank still to fill, an error, a wrong shape, an
ignored mask, padding that was attended, a result off by the scale, ...). It returns True or False.
Where a result is wrong, the grader compares it with the usual mistakes to name the one you made.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

Check = Callable[[Callable[..., Any]], "str | None"]  # None when the function passes, else what failed


@dataclass(frozen=True)
class Grader:
    check: Check
    success: str  # the sentence printed when the function passes
    chapter: str  # the slug of the chapter whose exercise it grades


GRADERS: dict[str, Grader] = {}


def _grader(name: str, chapter: str, success: str) -> Callable[[Check], Check]:
    def register(check: Check) -> Check:
        GRADERS[name] = Grader(check, success, chapter)
        return check

    return register


def grade(name: str, function: Callable[..., Any]) -> bool:
    """Run the grader called name on function, print one sentence saying what passed or failed, return True on a pass.

    Raises:
        KeyError: if no grader has that name (the message lists the names).
        TypeError: if function is not callable.
    """
    if name not in GRADERS:
        raise KeyError(f"there is no grader called {name!r}; the graders are: {', '.join(sorted(GRADERS))}")
    if not callable(function):
        raise TypeError(f"grade needs the function itself, got {type(function).__name__}")
    grader = GRADERS[name]
    try:
        problem = grader.check(function)
    except NotImplementedError as blank:
        problem = f"Not yet: {blank}" + ("" if str(blank).endswith(".") else ".")
    except Exception as error:  # the reader's error, in one line rather than a traceback
        problem = f"Your function raised {type(error).__name__}: {error}"
    print(problem or f"Passed: {grader.success}")
    return problem is None


def _same(ours: Any, theirs: Any) -> bool:
    """Whether two arrays or tensors have the same shape and values (float32 rounding allowed)."""
    a = np.asarray(ours.detach().cpu() if isinstance(ours, Tensor) else ours, dtype=np.float64)
    b = np.asarray(theirs.detach().cpu() if isinstance(theirs, Tensor) else theirs, dtype=np.float64)
    return a.shape == b.shape and bool(np.allclose(a, b, rtol=1e-5, atol=1e-6))


def _shape(value: Any) -> tuple[int, ...]:
    return tuple(np.shape(value.detach().cpu() if isinstance(value, Tensor) else value))


def _first_match(result: Any, mistakes: dict[str, Any]) -> str | None:
    """The diagnosis of the first known mistake whose result equals result, if any."""
    return next((diagnosis for diagnosis, wrong in mistakes.items() if _same(result, wrong)), None)


def _bool_mask(mask: Any, expected: Tensor, what: str, mistakes: dict[str, Tensor]) -> str | None:
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        return f"Not quite: {what} should be a bool tensor (True where a query may attend), got {kind}."
    if tuple(mask.shape) != tuple(expected.shape):
        return f"Wrong shape: {what} should have shape {tuple(expected.shape)}, got {tuple(mask.shape)}."
    if torch.equal(mask, expected):
        return None
    if torch.equal(mask, ~expected):
        return f"Inverted: {what} is True where attention is blocked; the book's True means 'may attend'."
    diagnosis = _first_match(mask, {key: value.double() for key, value in mistakes.items()})
    return f"Not quite: {what} {diagnosis or 'differs from what the book computes'}."


# Part II: attention


@_grader("attention", "scaled-dot-product", "your attention matches the book's for 3 queries over 5 keys.")
def _attention(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.model import scaled_dot_product_attention

    rng = np.random.default_rng(1)
    n, m, d_k, d_v = 3, 5, 4, 2  # all different, so that a transposed matrix shows up as a wrong shape
    Q, K, V = rng.normal(size=(n, d_k)), rng.normal(size=(m, d_k)), rng.normal(size=(m, d_v))
    output, weights = candidate(Q, K, V)
    expected_output, expected_weights = scaled_dot_product_attention(*(torch.from_numpy(a) for a in (Q, K, V)))
    if _shape(weights) != (n, m) or _shape(output) != (n, d_v):
        return (
            f"Wrong shape: the weights should be {(n, m)} and the output {(n, d_v)}, "
            f"got {_shape(weights)} and {_shape(output)}."
        )
    scores = Q @ K.T
    mistakes = {
        "off by the scale: the scores were not divided by sqrt(d_k)": torch.softmax(torch.from_numpy(scores), -1),
        "off by the scale: divide the scores by sqrt(d_k), not by d_k": torch.softmax(
            torch.from_numpy(scores / d_k), -1
        ),
        "the softmax ran over the queries (axis 0); each row must sum to one over the keys": torch.softmax(
            torch.from_numpy(scores / math.sqrt(d_k)), 0
        ),
    }
    if not _same(weights, expected_weights):
        diagnosis = _first_match(weights, mistakes)
        return f"Not quite: {diagnosis or 'the weights differ from what the book computes; check steps 1 to 3'}."
    if not _same(output, expected_output):
        return "Not quite: the weights are right but the output is not; it is the weights times the values."
    return None


@_grader("target_mask", "batching", "your target mask is the book's: causal, and blind to the padding.")
def _target_mask(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.model import causal_mask, padding_mask

    lengths, m = torch.tensor([3, 1, 5]), 6  # the longest sequence is shorter than m: every row has padding
    expected = padding_mask(lengths, m) & causal_mask(m)
    mask = torch.as_tensor(candidate(lengths, m))
    if isinstance(mask, Tensor) and tuple(mask.shape) == (3, 1, m):
        return f"Wrong shape: (batch, 1, m) is the padding mask alone; the target mask is (batch, m, m) = {(3, m, m)}."
    mistakes = {
        "lets each query see the future: combine the padding mask with causal_mask": padding_mask(lengths, m).expand(
            3, m, m
        ),
        "lets the queries attend to the padding: combine causal_mask with the padding mask": causal_mask(m).expand(
            3, m, m
        ),
        "blocks the diagonal: a position must be able to attend to itself": expected & ~torch.eye(m, dtype=torch.bool),
    }
    return _bool_mask(mask, expected, "your target mask", mistakes)


def _encoding_with_base(num_positions: int, d_model: int, base: float, two_i: bool = True) -> Tensor:
    positions = torch.arange(num_positions, dtype=torch.float64)[:, None]
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model
    angles = positions / base ** (exponents if two_i else exponents / 2)
    return torch.stack([torch.sin(angles), torch.cos(angles)], dim=-1).flatten(-2)


@_grader(
    "sinusoidal_encoding", "positional-encoding", "your table is the book's with base 10000 and follows base 100 too."
)
def _sinusoidal_encoding(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.model import sinusoidal_encoding

    num_positions, d_model = 12, 8
    for base in [10000.0, 100.0]:
        table = candidate(num_positions, d_model, base)
        expected = (
            sinusoidal_encoding(num_positions, d_model, dtype=torch.float64)
            if base == 10000.0
            else _encoding_with_base(num_positions, d_model, base)
        )
        if _shape(table) != (num_positions, d_model):
            return f"Wrong shape: the table should be (num_positions, d_model) = {(num_positions, d_model)}, got {_shape(table)}."
        swapped = expected.view(num_positions, -1, 2).flip(-1).flatten(-2)
        mistakes = {
            "swaps sine and cosine: the even columns 2i take the sine, the odd columns 2i + 1 the cosine": swapped,
            "puts the sines in the first half and the cosines in the second: the paper interleaves them": torch.cat(
                [expected[:, 0::2], expected[:, 1::2]], dim=-1
            ),
            "divides by base**(i / d_model); the exponent is 2i / d_model, i counting the pairs": _encoding_with_base(
                num_positions, d_model, base, two_i=False
            ),
            "ignores base and always uses 10000": _encoding_with_base(num_positions, d_model, 10000.0),
        }
        if not _same(table, expected):
            diagnosis = _first_match(table, mistakes) or "differs from the book's"
            return f"Not quite: with base {base:g} your table {diagnosis}."
    return None


# Part III: the Transformer


@_grader("rms_norm", "block-anatomy", "your RMSNorm matches the book's RMSNorm, gain and eps included.")
def _rms_norm(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.model import RMSNorm

    generator = torch.Generator().manual_seed(0)
    x = 2 * torch.randn(2, 3, 8, generator=generator, dtype=torch.float64) + 1  # mean 1: RMSNorm keeps it
    weight = torch.randn(8, generator=generator, dtype=torch.float64)
    eps = 0.5  # large, so that where eps goes shows in the result
    reference = RMSNorm(8, eps=eps).double()
    with torch.no_grad():
        reference.weight.copy_(weight)
        expected = reference(x)
    result = candidate(x, weight, eps)
    if _shape(result) != tuple(x.shape):
        return f"Wrong shape: RMSNorm keeps the shape of x, {tuple(x.shape)}, got {_shape(result)}."
    mean_square = x.square().mean(-1, keepdim=True)
    centred = x - x.mean(-1, keepdim=True)
    mistakes = {
        "subtracts the mean, which is LayerNorm; RMSNorm divides x itself by its root mean square": (
            weight * centred / torch.sqrt(centred.square().mean(-1, keepdim=True) + eps)
        ),
        "leaves out the gain: multiply by weight": x / torch.sqrt(mean_square + eps),
        "adds eps outside the square root; it belongs inside, sqrt(mean(x**2) + eps)": weight
        * x
        / (torch.sqrt(mean_square) + eps),
        "leaves out eps": weight * x / torch.sqrt(mean_square),
        "takes the mean over the whole tensor; take it over the last dimension, the features": (
            weight * x / torch.sqrt(x.square().mean() + eps)
        ),
    }
    if not _same(result, expected):
        return f"Not quite: your RMSNorm {_first_match(result, mistakes) or 'differs from what the book computes'}."
    return None


# Part IV: training and inference


@_grader(
    "learning_rate", "learning-rate", "your schedule is the book's at every step tried, for two models and warm-ups."
)
def _learning_rate(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.training import transformer_learning_rate

    for d_model, warmup in [(512, 400), (64, 4000)]:
        steps = [1, 2, warmup // 2, warmup, 2 * warmup, 10 * warmup]
        rates = np.array([float(candidate(step, d_model, warmup)) for step in steps])
        expected = np.array([transformer_learning_rate(step, d_model, warmup) for step in steps])
        if np.allclose(rates, expected, rtol=1e-9, atol=0):
            continue
        where = f"d_model = {d_model}, warmup = {warmup}"
        if np.allclose(rates, expected * math.sqrt(d_model), rtol=1e-9, atol=0):
            return f"Off by the scale: multiply by d_model**-0.5 (with {where} your rates are sqrt(d_model) times the book's)."
        warming = np.array(steps) < warmup
        if not np.allclose(rates[warming], expected[warming], rtol=1e-9, atol=0):
            return f"Not quite: during the warm-up ({where}) the rate should grow as step * warmup**-1.5."
        return f"Not quite: after the warm-up ({where}) the rate should decay as step**-0.5."
    return None


@_grader("label_smoothing", "label-smoothing", "your loss equals LabelSmoothingLoss, padding and all.")
def _label_smoothing(candidate: Callable[..., Any]) -> str | None:
    import torch.nn.functional as F

    from transformer_book.data import PAD_ID
    from transformer_book.training import LabelSmoothingLoss

    generator = torch.Generator().manual_seed(0)
    vocab, smoothing = 7, 0.2
    logits = torch.randn(2, 4, vocab, generator=generator, dtype=torch.float64)
    targets = torch.tensor([[3, 5, 4, PAD_ID], [6, 3, PAD_ID, PAD_ID]])
    loss = candidate(logits, targets, smoothing, PAD_ID)
    if _shape(loss) != ():
        return f"Wrong shape: the loss is one number, the mean over the real tokens, got shape {_shape(loss)}."
    expected = LabelSmoothingLoss(smoothing, ignore_index=PAD_ID)(logits, targets)
    real = targets != PAD_ID
    log_p = F.log_softmax(logits, dim=-1)
    t2t = torch.full_like(logits, smoothing / (vocab - 1)).scatter(-1, targets[..., None], 1 - smoothing)
    per_token = -(
        torch.full_like(logits, smoothing / vocab).scatter_add(
            -1, targets[..., None], torch.full_like(logits[..., :1], 1 - smoothing)
        )
        * log_p
    ).sum(-1)
    mistakes = {
        "counts the padding: leave out the targets equal to ignore_index": per_token.mean(),
        "adds up the tokens' losses; take their mean over the real tokens": per_token[real].sum(),
        "does not smooth: the target puts 1 - smoothing on the true token plus smoothing / V on every token": (
            F.nll_loss(log_p[real], targets[real])
        ),
        "gives the true token 1 - smoothing and the others smoothing / (V - 1); the book spreads smoothing over all V": (
            -(t2t * log_p).sum(-1)[real].mean()
        ),
    }
    if not _same(loss, expected):
        return f"Not quite: your loss {_first_match(loss, mistakes) or 'differs from LabelSmoothingLoss'}."
    return None


# Part V: the three families


@_grader(
    "merge_pair", "tokenization", "your merge is the book's merge_pair on every sequence tried, overlaps included."
)
def _merge_pair(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.tokenization import merge_pair

    cases = [  # (ids, pair): a plain case, a pair at the end, a run of three (merged left to right), a reversed pair
        ([5, 6, 7, 5, 6], (5, 6)),
        ([1, 2, 3, 2, 3], (2, 3)),
        ([4, 4, 4, 9], (4, 4)),
        ([6, 5, 5, 6], (5, 6)),
        ([], (1, 2)),
    ]
    for ids, pair in cases:
        result, expected = candidate(list(ids), pair, 99), merge_pair(ids, pair, 99)
        if list(result) == expected:
            continue
        where = f"merging {pair} in {ids} should give {expected}, got {list(result)}"
        first = ids.index(pair[0]) if pair[0] in ids else len(ids)
        mistakes = {
            "scan from the left and go on after each merged pair: a run of three merges its first two": (
                merge_pair(ids[::-1], pair[::-1], 99)[::-1]
            ),
            f"the pair is ordered, {pair} is not {pair[::-1]}": merge_pair(ids, pair[::-1], 99),
            "merge every occurrence, not only the first": merge_pair(ids[: first + 2], pair, 99) + ids[first + 2 :],
        }
        diagnosis = next((text for text, wrong in mistakes.items() if list(result) == wrong), None)
        return f"Not quite: {where}" + (f"; {diagnosis}." if diagnosis else ".")
    return None


# Part VI: attention at scale
# Part VI: attention at scale


def _rope_halves(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """RoPE in the rotate-half layout: feature i turns with feature i + d/2."""
    half = x.shape[-1] // 2
    angles = positions.double()[:, None] * base ** (-torch.arange(0, 2 * half, 2, dtype=torch.float64) / (2 * half))
    cos, sin, first, second = torch.cos(angles), torch.sin(angles), x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], dim=-1)


@_grader("rope", "relative-positions", "your rotation is the book's apply_rope with bases 10000 and 100.")
def _rope(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.model import apply_rope

    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    positions = torch.arange(3, 8)
    for base in [10000.0, 100.0]:
        result, expected = candidate(x, positions, base), apply_rope(x, positions, base)
        if _shape(result) != tuple(x.shape):
            return f"Wrong shape: RoPE keeps the shape of x, {tuple(x.shape)}, got {_shape(result)}."
        mistakes = {
            "turns the wrong way: (x_2i, x_2i+1) becomes (x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos)": apply_rope(
                x, -positions, base
            ),
            "ignores base and always uses 10000": apply_rope(x, positions),
            "pairs feature i with i + d/2 (the rotate-half layout); the book pairs 2i with 2i + 1": _rope_halves(
                x, positions, base
            ),
        }
        if not _same(result, expected):
            return f"Not quite: with base {base:g} your rotation {_first_match(result, mistakes) or 'differs from apply_rope'}."
    return None


# Part VII: real models


@_grader(
    "repeat_kv_heads",
    "modern-decoder",
    "your repeat gives query head i the key-value head i * g // h, as the book does.",
)
def _repeat_kv_heads(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.model import repeat_kv_heads

    x = torch.arange(2 * 2 * 3 * 4, dtype=torch.float64).view(2, 2, 3, 4)  # batch 2, 2 key-value heads, m 3, d_head 4
    for num_heads in [6, 2]:
        result, expected = candidate(x, num_heads), repeat_kv_heads(x, num_heads)
        if _shape(result) != tuple(expected.shape):
            return (
                f"Wrong shape: for {num_heads} query heads it should be {tuple(expected.shape)}, got {_shape(result)}."
            )
        if not _same(result, expected):
            if _same(result, x.repeat(1, num_heads // 2, 1, 1)):
                return (
                    "Not quite: your repeat cycles through the key-value heads (0, 1, 0, 1, ...); each one serves "
                    "a block of g adjacent query heads (0, 0, 0, 1, 1, 1): use repeat_interleave."
                )
            return (
                f"Not quite: for {num_heads} query heads your repeat puts other numbers in the heads than the book's."
            )
    return None


# Part VIII: adapting a model


@_grader("lora", "fine-tuning", "your LoRA forward equals the book's LoRALinear, scale and bias included.")
def _lora(candidate: Callable[..., Any]) -> str | None:
    from transformer_book.fine_tuning import LoRALinear

    generator = torch.Generator().manual_seed(0)
    d_in, d_out, rank, alpha = 6, 5, 2, 8.0  # alpha / rank = 4: a forgotten or wrong scale shows
    base = torch.nn.Linear(d_in, d_out).double()
    layer = LoRALinear(base, rank, alpha)
    with torch.no_grad():
        layer.lora_B.normal_(generator=generator)  # B starts at zero; a non-zero B makes the update visible
        x = torch.randn(3, d_in, generator=generator, dtype=torch.float64)
        expected = layer(x)
    weight, bias, A, B = base.weight.detach(), base.bias.detach(), layer.lora_A.detach(), layer.lora_B.detach()
    result = candidate(x, weight, bias, A, B, alpha)
    if _shape(result) != tuple(expected.shape):
        return f"Wrong shape: the output is (tokens, d_out) = {tuple(expected.shape)}, got {_shape(result)}."
    frozen, update = x @ weight.T + bias, x @ A.T @ B.T
    mistakes = {
        "is off by the scale: multiply the update by alpha / rank, not by alpha": frozen + alpha * update,
        "is off by the scale: the update is multiplied by alpha / rank": frozen + update,
        "leaves out the bias of the frozen layer": x @ weight.T + alpha / rank * update,
        "leaves out the frozen layer: h = W0 x + b + (alpha / rank) B A x": alpha / rank * update,
    }
    if not _same(result, expected):
        return f"Not quite: your forward {_first_match(result, mistakes) or 'differs from LoRALinear'}."
    return None
