"""Unit tests for transformer_book.model (exported from book/positional-encoding.md)."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_book.model import PositionalEncoding, rotation_matrix, sinusoidal_encoding


def paper_formula(pos: int, dimension: int, d_model: int) -> float:
    """Section 3.5 of the paper, written with math.sin and math.cos, independent of the package."""
    i = dimension // 2
    angle = pos / 10000 ** (2 * i / d_model)
    return math.sin(angle) if dimension % 2 == 0 else math.cos(angle)


# --- the table -----------------------------------------------------------------------------------


@pytest.mark.parametrize("d_model", [4, 64, 512])
def test_table_matches_the_papers_formula(d_model: int) -> None:
    table = sinusoidal_encoding(5000, d_model, dtype=torch.float64)
    dimensions = sorted({0, 1, 2, 3, d_model // 2, d_model // 2 + 1, d_model - 2, d_model - 1})
    for pos in [0, 1, 7, 99, 4999]:
        for dimension in dimensions:
            expected = paper_formula(pos, dimension, d_model)
            assert table[pos, dimension].item() == pytest.approx(expected, abs=1e-12), (pos, dimension)


def test_float32_table_is_the_float64_table_rounded_once() -> None:
    table32 = sinusoidal_encoding(5000, 512)
    table64 = sinusoidal_encoding(5000, 512, dtype=torch.float64)
    assert torch.equal(table32, table64.to(torch.float32))
    # So even position 4999 is right to float32 precision, which angles computed in float32 are not.
    assert table32[4999, 0].item() == pytest.approx(math.sin(4999), abs=1e-7)


def test_shape_and_dtype() -> None:
    table = sinusoidal_encoding(10, 6)
    assert table.shape == (10, 6) and table.dtype == torch.float32
    assert sinusoidal_encoding(3, 8, dtype=torch.float64).dtype == torch.float64
    assert sinusoidal_encoding(0, 8).shape == (0, 8)


def test_first_row_alternates_zero_and_one() -> None:
    assert sinusoidal_encoding(1, 8)[0].tolist() == [0.0, 1.0] * 4


def test_each_pair_lies_on_the_unit_circle() -> None:
    table = sinusoidal_encoding(1000, 32, dtype=torch.float64)
    torch.testing.assert_close(table[:, 0::2] ** 2 + table[:, 1::2] ** 2, torch.ones(1000, 16, dtype=torch.float64))


@pytest.mark.parametrize("d_model", [7, 1, 0, -4])
def test_bad_d_model_is_refused(d_model: int) -> None:
    message = "d_model must be even" if d_model > 0 else "d_model must be at least 1"
    with pytest.raises(ValueError, match=message):
        sinusoidal_encoding(10, d_model)
    with pytest.raises(ValueError, match=message):
        rotation_matrix(1, d_model)


def test_bad_num_positions_and_dtype_are_refused() -> None:
    with pytest.raises(ValueError, match="num_positions must be at least 0, got num_positions=-1"):
        sinusoidal_encoding(-1, 8)
    with pytest.raises(ValueError, match="num_positions must be an integer"):
        sinusoidal_encoding(2.5, 8)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dtype must be a floating-point dtype"):
        sinusoidal_encoding(4, 8, dtype=torch.int64)


# --- the rotation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("offset", [1, 2, 7, 100, 1000])
def test_rotation_shifts_every_position_by_the_offset(offset: int) -> None:
    table = sinusoidal_encoding(3000, 64, dtype=torch.float64)
    shifted = table[:-offset] @ rotation_matrix(offset, 64, dtype=torch.float64).T
    assert (shifted - table[offset:]).abs().max() < 1e-11


def test_rotation_in_float32_is_accurate_to_float32() -> None:
    table = sinusoidal_encoding(3000, 64)
    shifted = table[:-5] @ rotation_matrix(5, 64).T
    assert rotation_matrix(5, 64).dtype == torch.float32
    assert (shifted - table[5:]).abs().max() < 1e-6


def test_rotation_block_has_the_signs_of_the_angle_addition_formulas() -> None:
    d_model, offset = 8, 3
    matrix = rotation_matrix(offset, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        angle = offset / 10000 ** (2 * i / d_model)
        block = matrix[2 * i : 2 * i + 2, 2 * i : 2 * i + 2]
        expected = torch.tensor(
            [[math.cos(angle), math.sin(angle)], [-math.sin(angle), math.cos(angle)]], dtype=torch.float64
        )
        torch.testing.assert_close(block, expected)
    off_diagonal = matrix.clone()
    for i in range(d_model // 2):
        off_diagonal[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = 0
    assert (off_diagonal == 0).all()


def test_rotation_group_properties() -> None:
    m3 = rotation_matrix(3, 16, dtype=torch.float64)
    torch.testing.assert_close(m3 @ m3.T, torch.eye(16, dtype=torch.float64))
    torch.testing.assert_close(rotation_matrix(-3, 16, dtype=torch.float64), m3.T)
    torch.testing.assert_close(
        rotation_matrix(2, 16, dtype=torch.float64) @ m3, rotation_matrix(5, 16, dtype=torch.float64)
    )
    torch.testing.assert_close(rotation_matrix(0, 16, dtype=torch.float64), torch.eye(16, dtype=torch.float64))


def test_rotation_refuses_a_non_integer_offset() -> None:
    with pytest.raises(ValueError, match="offset must be an integer"):
        rotation_matrix(1.5, 8)  # type: ignore[arg-type]


def test_similarity_depends_only_on_the_distance() -> None:
    table = sinusoidal_encoding(200, 64, dtype=torch.float64)
    for k in [0, 1, 13, 150]:
        dots = (table[: 200 - k] * table[k:]).sum(dim=-1)
        expected = sum(math.cos(k / 10000 ** (2 * i / 64)) for i in range(32))
        torch.testing.assert_close(dots, torch.full_like(dots, expected))


# --- the module --------------------------------------------------------------------------------------


def test_module_adds_exactly_the_first_rows_of_the_table() -> None:
    module = PositionalEncoding(d_model=16, max_len=50)
    x = torch.randn(3, 11, 16)
    assert torch.equal(module(x), x + sinusoidal_encoding(50, 16)[:11])
    assert torch.equal(module.table, sinusoidal_encoding(50, 16))
    assert module(torch.zeros(1, 50, 16)).shape == (1, 50, 16)  # exactly max_len is fine


def test_module_table_is_a_non_persistent_buffer() -> None:
    module = PositionalEncoding(d_model=8, max_len=20)
    assert "table" in dict(module.named_buffers())
    assert "table" not in module.state_dict()
    assert not list(module.parameters())


def test_module_keeps_the_input_dtype() -> None:
    module = PositionalEncoding(d_model=8, max_len=20)
    assert module(torch.zeros(2, 5, 8, dtype=torch.float64)).dtype == torch.float64


def test_sequence_longer_than_the_table_is_refused_with_advice() -> None:
    module = PositionalEncoding(d_model=8, max_len=10)
    expected = (
        r"a sequence of length 11 is longer than the positional table \(max_len=10\); "
        r"build PositionalEncoding with max_len >= 11"
    )
    with pytest.raises(ValueError, match=expected):
        module(torch.zeros(2, 11, 8))
    assert PositionalEncoding(d_model=8, max_len=11)(torch.zeros(2, 11, 8)).shape == (2, 11, 8)


def test_wrong_last_dimension_is_refused() -> None:
    module = PositionalEncoding(d_model=8, max_len=10)
    with pytest.raises(
        ValueError, match=r"x must have shape \(batch, n, d_model\) with d_model=8, got shape \(2, 5, 6\)"
    ):
        module(torch.zeros(2, 5, 6))


def test_integer_input_is_refused() -> None:
    # Once silent: the table was cast to int64 (sin and cos truncated to 0 and 1) and ints came back.
    with pytest.raises(ValueError, match="x must be floating-point vectors, got dtype torch.int64"):
        PositionalEncoding(d_model=6)(torch.zeros(2, 5, 6, dtype=torch.long))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"d_model": 9}, "d_model must be even"),
        ({"d_model": 8, "max_len": 0}, "max_len must be at least 1"),
        ({"d_model": 8, "dropout": 1.0}, r"dropout must be a probability in \[0, 1\)"),
        ({"d_model": 8, "dropout": -0.1}, r"dropout must be a probability in \[0, 1\)"),
    ],
)
def test_bad_constructor_arguments_are_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PositionalEncoding(**kwargs)  # type: ignore[arg-type]


def test_dropout_acts_in_training_only() -> None:
    torch.manual_seed(0)
    module = PositionalEncoding(d_model=32, max_len=64, dropout=0.5)
    x = torch.randn(4, 64, 32)
    exact = x + module.table
    module.eval()
    assert torch.equal(module(x), exact)
    module.train()
    dropped = module(x)
    zeroed = dropped == 0
    assert 0.4 < zeroed.float().mean().item() < 0.6
    torch.testing.assert_close(dropped[~zeroed], 2 * exact[~zeroed])  # kept entries are scaled by 1 / (1 - p)


def test_module_moves_its_table_with_it() -> None:
    module = PositionalEncoding(d_model=8, max_len=10).to(torch.float64)
    assert module.table.dtype == torch.float64
