"""The book's argument checks, in one module, written once by hand (not exported from the chapters).

The chapters' code calls these checks on its first lines, so that a wrong argument fails at once with
a ValueError that names the argument and the problem, rather than deep inside a computation, or not
at all where a wrong shape would broadcast silently. They are plumbing, not the lesson: the chapters
import them from here.

First the rules for every number. One rule for every size and count in the book: Python and NumPy
integers are accepted and returned as ``int``; a bool is refused (``True`` is not a size, though
Python counts it as 1), and so is a float such as ``2.0``. One rule for every other number (a rate, a
temperature, a weight): Python's and NumPy's ints and floats are accepted, a bool is refused, and so
are NaN and infinity, which no formula of the book means. Every error is a ``ValueError`` that names
the argument and the value it got, so a reader sees at once which call was wrong. Then the checks of
shapes, masks and decoding inputs, chapter by chapter.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Sequence
from typing import Protocol

import torch
from torch import Tensor, nn

# The rules for every number.


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


def refusal(call: Callable[[], object]) -> str | None:
    """The message of the ValueError that call() raises, or None if it raises none; any other
    exception propagates. The chapters show their refused calls with it."""
    try:
        call()
    except ValueError as error:
        return str(error)
    return None


# Checks of the code of the scaled-dot-product chapter.


def padding_max_len(lengths: Tensor, max_len: int | None) -> int:
    """Raise ValueError unless lengths and max_len fit padding_mask; return max_len (default: the longest length)."""
    if lengths.dim() != 1 or lengths.dtype.is_floating_point or lengths.dtype.is_complex or lengths.dtype == torch.bool:
        raise ValueError(
            f"lengths must be a 1-D tensor of integers, one per sequence, "
            f"got dtype {lengths.dtype} and shape {tuple(lengths.shape)}"
        )
    if (lengths < 0).any():
        raise ValueError(f"lengths must be non-negative, got {lengths.tolist()}")
    longest = int(lengths.max()) if len(lengths) > 0 else 0
    if max_len is None:
        return longest
    max_len = integer(max_len, "max_len", minimum=0)  # refuses 2.5 and True
    if max_len < longest:
        raise ValueError(f"a sequence of length {longest} is longer than max_len={max_len}")
    return max_len


def check_attention_inputs(query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None) -> None:
    """Raise ValueError, naming the problem, unless the arguments fit scaled_dot_product_attention."""
    for name, tensor in [("query", query), ("key", key), ("value", value)]:
        if tensor.dim() < 2:
            raise ValueError(
                f"{name} needs at least 2 dimensions (..., length, features), got shape {tuple(tensor.shape)}"
            )
    if query.shape[-1] != key.shape[-1]:
        raise ValueError(
            f"query and key must have the same last dimension d_k, got query "
            f"{tuple(query.shape)} and key {tuple(key.shape)}"
        )
    if key.shape[-2] != value.shape[-2]:
        raise ValueError(
            f"key and value must have the same length m (dimension -2), got key "
            f"{tuple(key.shape)} and value {tuple(value.shape)}"
        )
    try:
        batch_shape = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dimensions of query {tuple(query.shape)}, key "
            f"{tuple(key.shape)} and value {tuple(value.shape)} do not broadcast"
        ) from None
    if mask is not None:
        check_mask(mask, (*batch_shape, query.shape[-2], key.shape[-2]))


def check_mask(mask: Tensor, scores_shape: tuple[int, ...]) -> None:
    """Raise ValueError, naming the problem, unless mask is a bool tensor that broadcasts to scores_shape."""
    if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
        found = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool tensor, True where a query may attend to a key; got {found}")
    try:
        fits = torch.broadcast_shapes(mask.shape, scores_shape) == scores_shape
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
            f"shape {tuple(scores_shape)} (..., n, m)"
        )


# Checks of the code of the multi-head-attention chapter.


def check_head_count(d_model: int, num_heads: int) -> tuple[int, int]:
    """Return (d_model, num_heads) as ints; raise ValueError unless num_heads divides d_model."""
    d_model, num_heads = positive_int(d_model, "d_model"), positive_int(num_heads, "num_heads")
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}: "
            f"every head needs d_model / num_heads features"
        )
    return d_model, num_heads


def check_kv_heads(num_heads: int, d_head: int, num_kv_heads: int | None, rope_theta: float | None) -> int:
    """MultiHeadAttention's num_kv_heads (num_heads when None), checked with rope_theta."""
    num_kv_heads = num_heads if num_kv_heads is None else positive_int(num_kv_heads, "num_kv_heads")
    if num_heads % num_kv_heads != 0:
        raise ValueError(
            f"num_kv_heads={num_kv_heads} does not divide num_heads={num_heads}: "
            f"every key-value head serves the same number of query heads"
        )
    if rope_theta is not None and (isinstance(rope_theta, bool) or not rope_theta > 0 or d_head % 2 != 0):
        raise ValueError(
            f"RoPE needs a positive rope_theta and an even d_head, got rope_theta={rope_theta} and d_head={d_head}"
        )
    return num_kv_heads


def check_repeated_heads(kv_heads: int, num_heads: int) -> None:
    """repeat_kv_heads's argument check: num_heads a positive multiple of the kv_heads it repeats."""
    if positive_int(num_heads, "num_heads") % kv_heads:
        raise ValueError(
            f"num_heads must be a positive multiple of x's {kv_heads} key-value heads, got num_heads={num_heads}"
        )


def check_multi_head_inputs(
    d_model: int, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None, is_causal: bool = False
) -> None:
    """Raise ValueError, naming the problem, unless the arguments fit MultiHeadAttention.forward."""
    for name, tensor in [("query", query), ("key", key), ("value", value)]:
        if tensor.dim() != 3 or tensor.shape[-1] != d_model:
            raise ValueError(f"{name} must have shape (batch, length, d_model={d_model}), got {tuple(tensor.shape)}")
    if key.shape != value.shape:
        raise ValueError(
            f"key and value must have the same shape (batch, m, d_model), "
            f"got key {tuple(key.shape)} and value {tuple(value.shape)}"
        )
    if query.shape[0] != key.shape[0]:
        raise ValueError(
            f"query and key must have the same batch size, got query {tuple(query.shape)} and key {tuple(key.shape)}"
        )
    if mask is not None:
        check_attention_mask(mask, (query.shape[0], query.shape[1], key.shape[1]))
    if is_causal and (mask is not None or query.shape[1] != key.shape[1]):
        raise ValueError(
            f"is_causal=True stands for the causal mask, so give no mask with it and as many queries as keys; "
            f"got a mask: {mask is not None}, {query.shape[1]} queries and {key.shape[1]} keys"
        )


def check_attention_mask(mask: Tensor, scores_shape: tuple[int, int, int], name: str = "mask") -> None:
    """Raise ValueError, naming the argument, unless mask is a bool tensor of 3 dimensions that
    broadcasts to scores_shape = (batch, n, m): one rule, and one message, for every module that
    takes a mask, from MultiHeadAttention up to the whole Transformer."""
    if isinstance(mask, Tensor) and mask.dtype == torch.bool and mask.dim() < 3:
        # A (batch, m) key-padding mask would broadcast as an (n, m) pattern when batch == n.
        raise ValueError(
            f"{name} must have 3 dimensions (batch, n, m), got shape {tuple(mask.shape)}: "
            f"a 2-D mask is ambiguous; use causal_mask(n)[None] for one (n, m) pattern "
            f"or key_padding[:, None] for a (batch, m) mask of keys"
        )
    try:
        check_mask(mask, scores_shape)
    except ValueError as problem:
        # The scores here are (batch, n, m): one mask serves every head.
        prefix = "" if name == "mask" else f"{name}: "
        raise ValueError(
            f"{prefix}{problem}; give one mask for all heads, the module adds the head dimension"
        ) from None


# Checks of the code of the positional-encoding chapter.


def check_d_model(d_model: int) -> int:
    """d_model must be positive and even: the encoding is made of (sin, cos) pairs."""
    d_model = integer(d_model, "d_model", minimum=1)
    if d_model % 2 != 0:
        raise ValueError(
            f"d_model must be even, because the encoding is made of (sin, cos) pairs; got odd d_model={d_model}"
        )
    return d_model


def check_float_dtype(dtype: torch.dtype) -> None:
    if not dtype.is_floating_point:
        raise ValueError(f"dtype must be a floating-point dtype, got {dtype}")


# Checks of the code of the block-anatomy chapter.


def check_features(x: Tensor, d_model: int, name: str = "x") -> None:
    """Raise ValueError unless x has shape (..., d_model)."""
    if x.dim() == 0 or x.shape[-1] != d_model:
        raise ValueError(f"{name} must have shape (..., d_model) with d_model={d_model}, got shape {tuple(x.shape)}")


# Checks of the code of the decoder chapter.


def check_target_and_memory(x: Tensor, memory: Tensor | None, d_model: int, cross_attention: bool) -> None:
    """Raise ValueError, naming the tensor, unless x is (batch, m, d_model) and memory (batch, n, d_model).

    A decoder without cross-attention (decoder-only) takes no memory; one with it needs one.
    """
    if cross_attention != (memory is not None):
        raise ValueError(
            "this decoder has cross-attention and needs the encoder's memory"
            if cross_attention
            else "this decoder has no cross-attention (decoder-only), so it takes no memory"
        )
    if memory is None:
        memory = x  # nothing more to check than x itself
    for name, tensor, length in [("x", x, "m"), ("memory", memory, "n")]:
        if tensor.dim() != 3 or tensor.shape[-1] != d_model:
            raise ValueError(f"{name} must have shape (batch, {length}, d_model={d_model}), got {tuple(tensor.shape)}")
    if x.shape[0] != memory.shape[0]:
        raise ValueError(
            f"x and memory must have the same batch size, got x {tuple(x.shape)} and memory {tuple(memory.shape)}"
        )


# Checks of the code of the full-model chapter. The model's parts are described by what the checks
# read of them, not imported: the model's module imports this one.


class _Part(Protocol):
    @property
    def d_model(self) -> int: ...


class _Embedding(_Part, Protocol):
    @property
    def vocab_size(self) -> int: ...


class _Generator(Protocol):
    @property
    def projection(self) -> nn.Linear: ...


def check_parts_fit(
    source_embedding: _Embedding,
    target_embedding: _Embedding,
    positional_encoding: _Part,
    encoder: _Part,
    decoder: _Part,
    generator: _Generator,
) -> None:
    """Raise ValueError, naming the parts, unless they share one d_model and the generator fits the vocabulary."""
    widths = {
        "source_embedding": source_embedding.d_model,
        "target_embedding": target_embedding.d_model,
        "positional_encoding": positional_encoding.d_model,
        "encoder": encoder.d_model,
        "decoder": decoder.d_model,
        "generator": generator.projection.in_features,
    }
    if len(set(widths.values())) > 1:
        found = ", ".join(f"{part} {width}" for part, width in widths.items())
        raise ValueError(f"every part must have the same d_model, got {found}")
    if generator.projection.out_features != target_embedding.vocab_size:
        raise ValueError(
            f"the generator predicts {generator.projection.out_features} tokens but "
            f"the target vocabulary has {target_embedding.vocab_size}"
        )


def check_source_mask(source_mask: Tensor, batch: int, n: int) -> None:
    """Raise ValueError unless source_mask is a source's padding mask: bool (batch or 1, 1, n).

    One row serves every query, so a mask with a query dimension, (·, m, n), is refused: it is a
    target mask given as the source's (the two have one shape when m == n).
    """
    if isinstance(source_mask, Tensor) and source_mask.dim() == 3 and source_mask.shape[1] != 1:
        raise ValueError(
            f"source_mask must be a padding mask of shape (batch, 1, n={n}), as "
            f"padding_mask(lengths, n) gives, got {tuple(source_mask.shape)}: a mask with a row "
            f"per query is a target mask; are source_mask and target_mask swapped?"
        )
    check_attention_mask(source_mask, (batch, 1, n), "source_mask")


# Checks of the code of the batching chapter.


def check_lengths(sequences: Sequence[Sequence[int]]) -> list[int]:
    """The sequences' lengths; raise ValueError unless there is at least one and none is empty."""
    if len(sequences) == 0:
        raise ValueError("a batch needs at least one sequence, got none")
    lengths = [len(sequence) for sequence in sequences]
    if min(lengths) == 0:
        raise ValueError(f"sequence {lengths.index(0)} of the batch is empty; every sequence needs a token")
    return lengths


# Checks of the code of the training chapter.


def check_decoding_inputs(source: Tensor, max_new_tokens: int) -> None:
    """Raise a ValueError naming the problem if a decoder cannot run on these inputs."""
    if source.dim() != 2 or source.shape[0] == 0:
        raise ValueError(f"source must be a (batch, n) tensor of token ids, got shape {tuple(source.shape)}")
    if source.shape[1] == 0:
        raise ValueError("the source is empty: it needs at least one token to translate")
    positive_int(max_new_tokens, "max_new_tokens")


# Checks of the code of the decoding chapter.


def check_step_inputs(tokens: Tensor, batch_size: int, position: int, table_length: int) -> None:
    """IncrementalDecoder.step's argument checks: one id per row, and a position left in the table."""
    if tokens.dim() != 1 or tokens.shape[0] != batch_size:
        raise ValueError(f"tokens must hold one id per row, shape ({batch_size},), got shape {tuple(tokens.shape)}")
    if position >= table_length:
        raise ValueError(f"cannot decode past the positional table's {table_length} positions")


class _PositionalTable(Protocol):
    @property
    def table(self) -> Tensor: ...


class _Positioned(Protocol):
    """A model as the decoding checks read it: its positional table bounds the positions it can decode."""

    @property
    def positional_encoding(self) -> _PositionalTable: ...


def check_positions(model: _Positioned, needed: int, what: str) -> None:
    """Refuse, before the model runs, a decoding that needs more positions than the positional table has."""
    table_length = model.positional_encoding.table.shape[0]
    if needed > table_length:
        raise ValueError(f"{what} needs {needed} positions, more than the model's {table_length}")


def check_beam_search_inputs(
    model: _Positioned, source: Tensor, source_mask: Tensor | None, max_new_tokens: int, beam_size: int, alpha: float
) -> int:
    """beam_search's argument checks, before the model runs; returns beam_size as an int."""
    check_decoding_inputs(source, max_new_tokens)
    if source_mask is not None and (source_mask.dim() != 3 or source_mask.shape[0] not in (1, source.shape[0])):
        raise ValueError(
            f"source_mask must have shape (batch, 1, n), one row per source or one for all, "
            f"got shape {tuple(source_mask.shape)}"
        )
    check_positions(model, max_new_tokens, f"a search for {max_new_tokens} new tokens")
    beam_size = positive_int(beam_size, "beam_size")
    if isinstance(alpha, bool) or not alpha >= 0:  # written this way round, NaN fails too
        raise ValueError(f"alpha must be a non-negative number, got alpha={alpha}")
    return beam_size


def check_sampling_inputs(
    temperature: float, top_k: int | None, top_p: float | None = None
) -> tuple[int | None, float | None]:
    """sample_token's argument checks (temperature finite and > 0, top_p in (0, 1]); returns top_k as
    an int and top_p as a float, or None for either left out."""
    real(temperature, "temperature", above=0)
    top_k = None if top_k is None else positive_int(top_k, "top_k")
    return top_k, None if top_p is None else real(top_p, "top_p", above=0, at_most=1)
