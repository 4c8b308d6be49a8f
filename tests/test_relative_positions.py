"""Tests for the chapter "Relative positions: RoPE and ALiBi" (transformer_book.relative_positions)."""

from __future__ import annotations

import math

import pytest
import torch

from transformer_book.model import apply_rope, rotation_matrix
from transformer_book.relative_positions import alibi_bias, alibi_slopes


def test_rope_keeps_shape_dtype_and_norm() -> None:
    x = torch.randn(2, 3, 7, 8)
    rotated = apply_rope(x, torch.arange(7))
    assert rotated.shape == x.shape and rotated.dtype == x.dtype
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths


def test_rope_at_position_zero_is_the_identity() -> None:
    x = torch.randn(4, 6)
    torch.testing.assert_close(apply_rope(x, torch.zeros(4, dtype=torch.long)), x)


def test_rope_equals_the_positional_encoding_rotation() -> None:
    x = torch.randn(3, 10)
    positions = torch.tensor([2, 9, 50])
    expected = torch.stack([x[i] @ rotation_matrix(int(p), 10) for i, p in enumerate(positions)])
    torch.testing.assert_close(apply_rope(x, positions), expected)


def test_rope_scores_depend_only_on_the_offset() -> None:
    q, k = torch.randn(2, 1, 32)
    scores = [
        (apply_rope(q, torch.tensor([n + 4])) @ apply_rope(k, torch.tensor([n])).T).item() for n in range(0, 500, 50)
    ]
    assert max(scores) - min(scores) < 1e-4
    other = (apply_rope(q, torch.tensor([6])) @ apply_rope(k, torch.tensor([0])).T).item()
    assert abs(other - scores[0]) > 1e-3


@pytest.mark.parametrize(
    ("x", "positions", "message"),
    [
        (torch.randn(4, 5), torch.arange(4), "even"),
        (torch.randn(4, 6), torch.arange(3), "one entry per row"),
        (torch.randn(4, 6), torch.arange(4.0), "integer"),
        (torch.randn(4, 6), torch.arange(4)[None], "1-D"),
        (torch.randn(6), torch.arange(6), "shape"),
        (torch.ones(4, 6, dtype=torch.long), torch.arange(4), "floating-point"),
    ],
)
def test_rope_refuses_bad_input(x: torch.Tensor, positions: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        apply_rope(x, positions)


def test_alibi_slopes_follow_the_paper() -> None:
    torch.testing.assert_close(alibi_slopes(8), 2.0 ** -torch.arange(1.0, 9.0))
    torch.testing.assert_close(alibi_slopes(4), torch.tensor([0.25, 0.0625, 0.015625, 2.0**-8]))
    six = alibi_slopes(6)  # four from 2**(-8h/4), then the 1st and 3rd of 2**(-8h/8)
    torch.testing.assert_close(six, torch.cat([alibi_slopes(4), alibi_slopes(8)[[0, 2]]]))
    assert alibi_slopes(1).tolist() == [2.0**-8]


def test_alibi_bias_shape_and_values() -> None:
    bias = alibi_bias(8, 5)
    assert bias.shape == (8, 5, 5)
    assert bias[0, 4, 1].item() == -0.5 * 3 and bias[7, 1, 4].item() == -3 / 256
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    torch.testing.assert_close(bias, bias.transpose(-2, -1))
    assert alibi_bias(2, 0).shape == (2, 0, 0)


def test_alibi_bias_matches_torch_attention_with_a_float_mask() -> None:
    q, k, v = torch.randn(3, 1, 4, 6, 8)
    bias = alibi_bias(4, 6).masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -math.inf)
    ours = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8) + bias, dim=-1) @ v
    torch.testing.assert_close(ours, torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias))


@pytest.mark.parametrize(("heads", "n"), [(0, 4), (2.5, 4), (4, -1)])
def test_alibi_refuses_bad_sizes(heads: int, n: int) -> None:
    with pytest.raises(ValueError):
        alibi_bias(heads, n)


def test_alibi_bias_carries_distance_not_direction() -> None:
    bias = alibi_bias(4, 6)  # without a causal mask, a key two to the left and two to the right score alike
    torch.testing.assert_close(bias, bias.transpose(-1, -2), rtol=0, atol=0)


def test_the_look_back_experiment_trains_alike_on_every_device() -> None:
    from pathlib import Path

    chapter = (Path(__file__).resolve().parents[1] / "book" / "relative-positions.md").read_text()
    assert "by_device(" not in chapter  # a bigger GPU budget once inverted the chapter's lesson


def test_rope_creates_no_float64_tensor_on_the_device_of_its_input() -> None:
    # Apple's MPS has no float64: RoPE once built its float64 angles on x's device. The meta device
    # stands in for an accelerator here; every float64 tensor must stay on the CPU.
    from torch.utils._python_dispatch import TorchDispatchMode

    created: list[tuple[torch.dtype, str]] = []

    class RecordOutputs(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            result = func(*args, **(kwargs or {}))
            for value in result if isinstance(result, (tuple, list)) else [result]:
                if isinstance(value, torch.Tensor):
                    created.append((value.dtype, value.device.type))
            return result

    x = torch.empty(2, 5, 8, device="meta")
    with RecordOutputs():
        rotated = apply_rope(x, torch.arange(5))
    assert rotated.device.type == "meta" and rotated.dtype == torch.float32
    assert (torch.float64, "meta") not in created, created
    assert (torch.float64, "cpu") in created  # the angles are still computed in float64
