"""Unit tests for transformer_book.model (exported from book/block-anatomy.md)."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from transformer_book.checks import check_features
from transformer_book.model import LayerNorm, PositionwiseFeedForward, SublayerConnection, check_activation
from transformer_book.torch_loading import load_torch_feed_forward, load_torch_layer_norm


def torch_layer_norm(d_model: int, eps: float = 1e-5, seed: int = 0) -> nn.LayerNorm:
    """nn.LayerNorm with a random gain and shift, so that a swapped or missed copy shows."""
    torch.manual_seed(seed)
    theirs = nn.LayerNorm(d_model, eps=eps)
    with torch.no_grad():
        theirs.weight.normal_()
        theirs.bias.normal_()
    return theirs


# --- feed-forward network ---------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(16,), (3, 16), (2, 5, 16), (2, 3, 4, 16)])
def test_feed_forward_keeps_the_shape(shape: tuple[int, ...]) -> None:
    ffn = PositionwiseFeedForward(16, 40)
    assert ffn(torch.randn(shape)).shape == shape


def test_feed_forward_is_the_paper_formula() -> None:
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 32)
    x = torch.randn(2, 5, 8)
    w_1, b_1 = ffn.linear_1.weight.T, ffn.linear_1.bias
    w_2, b_2 = ffn.linear_2.weight.T, ffn.linear_2.bias
    expected = torch.clamp(x @ w_1 + b_1, min=0) @ w_2 + b_2
    assert torch.allclose(ffn(x), expected, atol=1e-6)


def test_feed_forward_is_position_wise() -> None:
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 32, activation="gelu")
    x = torch.randn(3, 7, 8)
    order = torch.randperm(7)
    output = ffn(x)
    assert torch.allclose(ffn(x[:, order]), output[:, order], atol=1e-6)
    changed = x.clone()
    changed[:, 3] += 1.0  # changing one position changes only that position's output
    difference = (ffn(changed) - output).abs().amax(dim=(0, 2))
    assert difference[3] > 0 and torch.all(difference[torch.arange(7) != 3] == 0)


def test_feed_forward_parameter_count() -> None:
    ffn = PositionwiseFeedForward(512, 2048)
    assert sum(p.numel() for p in ffn.parameters()) == 2 * 512 * 2048 + 2048 + 512


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_matches_pytorch_encoder_layer(activation: str) -> None:
    torch.manual_seed(0)
    theirs = nn.TransformerEncoderLayer(12, 3, 20, dropout=0.0, activation=activation, batch_first=True)
    ours = PositionwiseFeedForward(12, 20, activation=activation)
    load_torch_feed_forward(ours, theirs)
    x = torch.randn(2, 4, 12)
    expected = theirs.linear2(theirs.activation(theirs.linear1(x)))
    assert (ours(x) - expected).abs().max() < 1e-6


def test_load_torch_feed_forward_rejects_other_sizes_and_activations() -> None:
    theirs = nn.TransformerEncoderLayer(12, 3, 20, dropout=0.0, batch_first=True)
    with pytest.raises(
        ValueError, match=re.escape("sizes differ: theirs maps 12 -> 20 -> 12, ours maps 12 -> 24 -> 12")
    ):
        load_torch_feed_forward(PositionwiseFeedForward(12, 24), theirs)
    with pytest.raises(ValueError, match="theirs uses activation 'relu', ours uses 'gelu'"):
        load_torch_feed_forward(PositionwiseFeedForward(12, 20, activation="gelu"), theirs)


def test_feed_forward_rejects_a_wrong_width() -> None:
    with pytest.raises(
        ValueError, match=re.escape("x must have shape (..., d_model) with d_model=8, got shape (2, 7)")
    ):
        PositionwiseFeedForward(8, 16)(torch.randn(2, 7))


# --- LayerNorm --------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "eps"), [((4,), 1e-5), ((3, 5), 1e-5), ((2, 6, 512), 1e-6), ((2, 3, 4, 7), 1e-3)])
def test_layer_norm_matches_pytorch(shape: tuple[int, ...], eps: float) -> None:
    theirs = torch_layer_norm(shape[-1], eps)
    ours = LayerNorm(shape[-1], eps=eps)
    load_torch_layer_norm(ours, theirs)
    x = 4 * torch.randn(shape) - 2
    assert (ours(x) - theirs(x)).abs().max() < 1e-5


def test_layer_norm_uses_biased_variance_and_eps_inside_the_root() -> None:
    norm = LayerNorm(2, eps=0.5)
    # x = (1, 3): mean 2, biased variance 1, so (x - mean) / sqrt(1 + 0.5).
    expected = torch.tensor([-1.0, 1.0]) / 1.5**0.5
    assert torch.allclose(norm(torch.tensor([1.0, 3.0])), expected)


def test_layer_norm_runs_as_written_on_the_cpu_and_fused_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    # On a GPU the written-out lines are one kernel launch each; there forward calls F.layer_norm once.
    calls: list[str] = []
    fused = torch.nn.functional.layer_norm

    def counting_layer_norm(x: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        calls.append(x.device.type)
        return fused(x, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(torch.nn.functional, "layer_norm", counting_layer_norm)
    norm = LayerNorm(8)
    norm(torch.randn(2, 8))
    assert calls == []
    output = norm.to("meta")(torch.randn(2, 8, device="meta"))
    assert calls == ["meta"] and output.shape == (2, 8)


def test_layer_norm_starts_as_identity_gain_and_zero_shift() -> None:
    norm = LayerNorm(6)
    assert torch.equal(norm.weight, torch.ones(6)) and torch.equal(norm.bias, torch.zeros(6))


def test_load_torch_layer_norm_errors() -> None:
    with pytest.raises(ValueError, match="elementwise_affine=False"):
        load_torch_layer_norm(LayerNorm(8), nn.LayerNorm(8, elementwise_affine=False))
    with pytest.raises(ValueError, match=re.escape("theirs normalises (8,) with eps=1e-05; ours normalises (6,)")):
        load_torch_layer_norm(LayerNorm(6), nn.LayerNorm(8))
    with pytest.raises(ValueError, match="sizes differ"):
        load_torch_layer_norm(LayerNorm(8, eps=1e-6), nn.LayerNorm(8))


def test_layer_norm_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="eps must be positive, got eps=0"):
        LayerNorm(8, eps=0)
    with pytest.raises(ValueError, match="d_model must be a positive integer, got d_model=-3"):
        LayerNorm(-3)
    with pytest.raises(ValueError, match=re.escape("got shape (3, 5)")):
        LayerNorm(8)(torch.randn(3, 5))


# --- SublayerConnection -------------------------------------------------------------------------


def by_hand_layer_norm(x: torch.Tensor, norm: LayerNorm) -> torch.Tensor:
    mean = x.mean(-1, keepdim=True)
    variance = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(variance + norm.eps) * norm.weight + norm.bias


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_connection_formulas(norm_first: bool) -> None:
    torch.manual_seed(0)
    connection = SublayerConnection(10, dropout=0.0, norm_first=norm_first)
    norm = connection.norm
    assert isinstance(norm, LayerNorm)  # the default, norm="layer"
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    sublayer = nn.Linear(10, 10)
    x = torch.randn(2, 4, 10)
    with torch.no_grad():
        got = connection(x, sublayer)
        if norm_first:  # pre-LN: x + Sublayer(LayerNorm(x))
            expected = x + sublayer(by_hand_layer_norm(x, norm))
        else:  # post-LN, the paper: LayerNorm(x + Sublayer(x))
            expected = by_hand_layer_norm(x + sublayer(x), norm)
    assert (got - expected).abs().max() < 1e-5


def test_dropout_acts_on_the_sublayer_output_in_training_only() -> None:
    torch.manual_seed(0)
    x = torch.randn(50, 20, 64)
    for norm_first in [False, True]:
        connection = SublayerConnection(64, dropout=0.25, norm_first=norm_first)
        # pre-LN with a constant sub-layer isolates the dropout: x + Dropout(ones).
        if norm_first:
            connection.train()
            added = connection(x, torch.ones_like) - x
            zeroed = (added.abs() < 1e-6).float().mean().item()
            assert abs(zeroed - 0.25) < 0.02
            kept = added[added.abs() > 1e-6]
            assert torch.allclose(kept, torch.full_like(kept, 1 / 0.75), atol=1e-5)
        connection.eval()
        first, second = connection(x, torch.tanh), connection(x, torch.tanh)
        assert torch.equal(first, second)  # eval: dropout is the identity, so the call is deterministic
        expected = x + torch.tanh(connection.norm(x)) if norm_first else connection.norm(x + torch.tanh(x))
        assert torch.allclose(first, expected, atol=1e-6)


def test_dropout_is_not_applied_to_the_residual_path() -> None:
    connection = SublayerConnection(16, dropout=0.5, norm_first=True).train()
    x = torch.randn(4, 16)
    assert torch.equal(connection(x, torch.zeros_like), x)  # only the sub-layer's output is dropped


# --- validators -----------------------------------------------------------------------------------


def test_validators_raise_clear_errors() -> None:
    with pytest.raises(
        ValueError, match=re.escape("unknown activation 'tanh'; choose one of 'relu', 'gelu', 'gelu_tanh'")
    ):
        check_activation("tanh")
    with pytest.raises(ValueError, match=re.escape("unknown activation 'tanh'")):
        PositionwiseFeedForward(8, 16, activation="tanh")
    with pytest.raises(ValueError, match=re.escape("got dropout=1.0")):
        SublayerConnection(8, dropout=1.0)
    with pytest.raises(ValueError, match="d_ff must be a positive integer, got d_ff=0"):
        PositionwiseFeedForward(8, 0)
    with pytest.raises(ValueError, match="got shape \\(\\)"):
        check_features(torch.tensor(1.0), 4)
