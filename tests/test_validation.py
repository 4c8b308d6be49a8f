"""One rule for sizes everywhere (transformer_book.checks): integers, Python's or NumPy's, pass;
bools, floats and strings do not; every error names the argument."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from transformer_book.checks import integer, positive_int, probability, real, token_ids
from transformer_book.model import (
    EncoderLayer,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    TransformerConfig,
    make_transformer,
)
from transformer_book.self_attention import SelfAttention
from transformer_book.training import transformer_learning_rate


@pytest.mark.parametrize("value", [3, np.int64(3), np.int32(3), np.uint8(3)])
def test_integers_of_every_kind_are_sizes(value: object) -> None:
    assert positive_int(value, "n") == 3 and type(positive_int(value, "n")) is int
    assert integer(value, "n", minimum=3) == 3


@pytest.mark.parametrize("value", [True, False, 2.0, 2.5, "4", None, np.float64(2.0)])
def test_bools_floats_and_strings_are_not_sizes(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"n must be a positive integer, got n={value!r}")):
        positive_int(value, "n")
    with pytest.raises(ValueError, match=re.escape(f"n must be an integer, got n={value!r}")):
        integer(value, "n")


@pytest.mark.parametrize("value", [0, -1, np.int64(-7)])
def test_sizes_start_at_one(value: object) -> None:
    with pytest.raises(ValueError, match="n must be a positive integer"):
        positive_int(value, "n")


def test_integer_checks_its_minimum() -> None:
    assert integer(-2, "offset") == -2
    with pytest.raises(ValueError, match="max_len must be at least 1, got max_len=0"):
        integer(0, "max_len", minimum=1)


@pytest.mark.parametrize("value", [-0.1, 1.0, float("nan"), True])
def test_a_rate_is_a_probability_below_one(value: float) -> None:
    with pytest.raises(ValueError, match=re.escape(f"dropout must be a probability in [0, 1), got dropout={value}")):
        probability(value)
    assert probability(0) == 0.0 and probability(0.1) == 0.1


@pytest.mark.parametrize("value", [2, 2.5, np.int64(2), np.float32(2.5), np.float64(2.5), -1e300])
def test_ints_and_floats_of_every_kind_are_real_numbers(value: object) -> None:
    assert real(value, "x") == float(value) and type(real(value, "x")) is float  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [True, np.bool_(True), "1.0", None, torch.tensor(1.0), 1j])
def test_bools_strings_and_tensors_are_not_real_numbers(value: object) -> None:
    with pytest.raises(ValueError, match=re.escape(f"x must be a real number, got x={value!r}")):
        real(value, "x")


@pytest.mark.parametrize(
    ("value", "bounds", "message"),
    [
        (math.nan, {}, "x must be finite, got x=nan"),
        (math.inf, {}, "x must be finite, got x=inf"),
        (-math.inf, {"above": 0}, "x must be finite and positive, got x=-inf"),
        (np.float64("nan"), {"at_least": 0, "at_most": 1}, "x must be finite and in [0, 1], got x=nan"),
        (0, {"above": 0}, "x must be positive, got x=0"),
        (-0.5, {"above": 0}, "x must be positive, got x=-0.5"),
        (0.5, {"above": 1}, "x must be greater than 1, got x=0.5"),
        (-1, {"at_least": 0}, "x must be at least 0, got x=-1"),
        (2, {"at_most": 1}, "x must be at most 1, got x=2"),
        (1, {"below": 1}, "x must be less than 1, got x=1"),
        (2, {"at_least": 0, "at_most": 1}, "x must be in [0, 1], got x=2"),
        (0, {"above": 0, "below": 1}, "x must be in (0, 1), got x=0"),
        (math.nan, {"infinite": True}, "x must be a number, got x=nan"),
        (-math.inf, {"at_least": 0, "infinite": True}, "x must be at least 0, got x=-inf"),
    ],
)
def test_real_names_the_argument_its_bounds_and_the_value(value: float, bounds: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        real(value, "x", **bounds)  # type: ignore[arg-type]


def test_real_keeps_the_edges_of_closed_bounds_and_infinity_when_allowed() -> None:
    assert real(0, "x", at_least=0, at_most=1) == 0.0 and real(1, "x", at_least=0, at_most=1) == 1.0
    assert real(math.inf, "x", above=0, infinite=True) == math.inf


# The rule reaches every constructor: a bool is refused where it used to mean 1 (or crash nn.Linear),
# a NumPy integer is accepted where it used to be refused.
BUILDERS = {
    "MultiHeadAttention": lambda size: MultiHeadAttention(size, 2),
    "MultiHeadAttention heads": lambda size: MultiHeadAttention(8, size),
    "SelfAttention": lambda size: SelfAttention(size),
    "PositionwiseFeedForward": lambda size: PositionwiseFeedForward(8, size),
    "EncoderLayer": lambda size: EncoderLayer(8, 2, size),
    "PositionalEncoding": lambda size: PositionalEncoding(8, size),
    "make_transformer": lambda size: make_transformer(
        10, 10, TransformerConfig(d_model=8, num_heads=2, num_layers=size, d_ff=16, dropout=0.1), pad_id=0
    ),
    "transformer_learning_rate": lambda size: transformer_learning_rate(size, d_model=8, warmup=4),
}


@pytest.mark.parametrize("name", BUILDERS)
def test_every_constructor_refuses_a_bool_size(name: str) -> None:
    with pytest.raises(ValueError, match="must be .*integer, got .*=True"):
        BUILDERS[name](True)


@pytest.mark.parametrize("name", BUILDERS)
def test_every_constructor_accepts_a_numpy_size(name: str) -> None:
    built = BUILDERS[name](np.int64(2))
    assert isinstance(built, (nn.Module, float))


def test_multi_head_attention_stores_plain_ints() -> None:
    module = MultiHeadAttention(np.int64(8), np.int64(2))  # type: ignore[arg-type]
    assert type(module.d_model) is int and type(module.num_heads) is int and module.d_head == 4


def test_a_rate_is_checked_by_every_layer_with_dropout() -> None:
    with pytest.raises(ValueError, match="dropout must be a probability"):
        SublayerConnection(8, dropout=True)


def test_token_ids_accepts_integer_ids_in_range() -> None:
    token_ids(torch.tensor([[0, 3], [4, 1]]), 5)
    token_ids(torch.zeros(0, dtype=torch.long), 5)  # no ids, nothing out of range


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        ([1, 2], "targets must be a tensor of integer ids, got list"),
        (torch.tensor([1.0]), "targets must be integer ids, got dtype torch.float32"),
        (torch.tensor([True]), "targets must be integer ids, got dtype torch.bool"),
        (torch.tensor([0, 5]), r"targets must be token ids in \[0, 5\), got ids from 0 to 5"),
        (torch.tensor([-1, 2]), r"targets must be token ids in \[0, 5\), got ids from -1 to 2"),
    ],
)
def test_token_ids_names_the_argument_and_the_problem(tokens: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        token_ids(tokens, 5, "targets")


def test_refusal_returns_the_value_errors_message_or_none() -> None:
    from transformer_book.checks import refusal

    def refused() -> None:
        raise ValueError("d_model must be positive")

    assert refusal(refused) == "d_model must be positive"
    assert refusal(lambda: None) is None
    with pytest.raises(TypeError):
        refusal(lambda: int([]))  # type: ignore[call-overload]
