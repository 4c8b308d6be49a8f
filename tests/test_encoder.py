"""Unit tests for transformer_book.model (exported from book/encoder.md)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from torch_reference import nudge
from transformer_book.model import Encoder, EncoderLayer, LayerNorm, padding_mask
from transformer_book.torch_loading import load_torch_encoder, load_torch_encoder_layer, load_torch_final_norm

BATCH, N, D_MODEL, HEADS, D_FF, LAYERS = 3, 6, 16, 4, 32, 3
LENGTHS = [6, 4, 1]


def their_layer(norm_first: bool = False, activation: str = "relu") -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )


def their_stack(norm_first: bool = False, activation: str = "relu", layers: int = LAYERS) -> nn.TransformerEncoder:
    final_norm = nn.LayerNorm(D_MODEL) if norm_first else None
    return nn.TransformerEncoder(
        their_layer(norm_first, activation), layers, norm=final_norm, enable_nested_tensor=False
    )


def inputs(seed: int = 1) -> torch.Tensor:
    return torch.randn(BATCH, N, D_MODEL, generator=torch.Generator().manual_seed(seed))


# --- shapes and structure --------------------------------------------------------------------------


def test_layer_and_stack_keep_the_shape_and_record_weights() -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(D_MODEL, HEADS, D_FF)
    stack = Encoder(LAYERS, D_MODEL, HEADS, D_FF)
    x = inputs()
    assert layer(x).shape == (BATCH, N, D_MODEL)
    assert stack(x, mask=padding_mask(LENGTHS, N)).shape == (BATCH, N, D_MODEL)
    assert layer.attention_weights is not None and layer.attention_weights.shape == (BATCH, HEADS, N, N)
    assert not layer.attention_weights.requires_grad
    assert len(stack.layers) == LAYERS and all(isinstance(layer, EncoderLayer) for layer in stack.layers)


def test_post_ln_stack_has_no_final_norm_and_pre_ln_has_one() -> None:
    assert isinstance(Encoder(2, D_MODEL, HEADS, D_FF).norm, nn.Identity)
    assert isinstance(Encoder(2, D_MODEL, HEADS, D_FF, norm_first=True).norm, LayerNorm)


def test_paper_layer_parameter_count() -> None:
    with torch.device("meta"):
        layer = EncoderLayer(512, 8, 2048)
        stack = Encoder(6, 512, 8, 2048)
    assert sum(p.numel() for p in layer.parameters()) == 3_152_384
    assert sum(p.numel() for p in stack.parameters()) == 6 * 3_152_384


def test_layers_of_a_stack_have_their_own_weights() -> None:
    torch.manual_seed(0)
    stack = Encoder(2, D_MODEL, HEADS, D_FF)
    first, second = stack.layers
    assert not torch.equal(first.self_attention.w_q.weight, second.self_attention.w_q.weight)  # type: ignore[arg-type, union-attr]
    assert first.self_attention.w_q.weight.data_ptr() != second.self_attention.w_q.weight.data_ptr()  # type: ignore[operator, union-attr]


def test_post_ln_output_is_normalised_at_every_position() -> None:
    torch.manual_seed(0)
    output = Encoder(LAYERS, D_MODEL, HEADS, D_FF)(3 * inputs() + 1)
    assert torch.allclose(output.mean(-1), torch.zeros(BATCH, N), atol=1e-5)
    assert torch.allclose(output.var(-1, unbiased=False), torch.ones(BATCH, N), atol=1e-3)


# --- masks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_does_not_leak_into_real_positions(norm_first: bool) -> None:
    torch.manual_seed(0)
    stack = Encoder(LAYERS, D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    mask = padding_mask(LENGTHS, N)
    real = mask[:, 0, :]
    x = inputs()
    other = x.clone()
    other[~real] = 100 * torch.randn_like(other[~real])
    with torch.no_grad():
        output, other_output = stack(x, mask=mask), stack(other, mask=mask)
        unmasked, other_unmasked = stack(x), stack(other)
    assert torch.equal(output[real], other_output[real])
    assert not torch.allclose(unmasked[real], other_unmasked[real], atol=1e-2)  # the mask is what protects them


def test_sentence_alone_equals_sentence_in_a_padded_batch() -> None:
    torch.manual_seed(0)
    stack = Encoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    x = inputs()
    with torch.no_grad():
        batched = stack(x, mask=padding_mask(LENGTHS, N))
        alone = stack(x[1:2, : LENGTHS[1]])
    assert torch.allclose(alone[0], batched[1, : LENGTHS[1]], atol=1e-5)


def test_padded_keys_get_zero_attention_weight() -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(D_MODEL, HEADS, D_FF)
    layer(inputs(), mask=padding_mask(LENGTHS, N))
    weights = layer.attention_weights
    assert weights is not None
    for row, length in enumerate(LENGTHS):
        assert (weights[row, :, :, length:] == 0).all()
        assert torch.allclose(weights[row].sum(-1), torch.ones(HEADS, N))


def test_without_positions_the_stack_is_permutation_equivariant() -> None:
    torch.manual_seed(0)
    stack = Encoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    x = inputs()
    shuffle = torch.tensor([3, 0, 5, 1, 4, 2])
    with torch.no_grad():
        assert torch.allclose(stack(x[:, shuffle]), stack(x)[:, shuffle], atol=1e-5)


def test_bad_mask_is_rejected() -> None:
    layer = EncoderLayer(D_MODEL, HEADS, D_FF)
    with pytest.raises(ValueError, match="bool"):
        layer(inputs(), mask=torch.ones(BATCH, 1, N))


# --- agreement with PyTorch ------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("padded", [False, True], ids=["no-mask", "padding"])
@pytest.mark.parametrize("part", ["layer", "stack"])
def test_agrees_with_torch(part: str, norm_first: bool, activation: str, padded: bool) -> None:
    torch.manual_seed(0)
    ours: EncoderLayer | Encoder
    if part == "layer":
        theirs = nudge(their_layer(norm_first, activation)).eval()
        ours = EncoderLayer(D_MODEL, HEADS, D_FF, activation=activation, norm_first=norm_first).eval()
        load_torch_encoder_layer(ours, theirs)
    else:
        theirs = nudge(their_stack(norm_first, activation)).eval()  # type: ignore[assignment]
        ours = Encoder(LAYERS, D_MODEL, HEADS, D_FF, activation=activation, norm_first=norm_first).eval()
        load_torch_encoder(ours, theirs)  # type: ignore[arg-type]
    x = inputs()
    mask = padding_mask(LENGTHS, N) if padded else None
    their_mask = ~mask[:, 0, :] if mask is not None else None
    with torch.no_grad():
        difference = (ours(x, mask=mask) - theirs(x, src_key_padding_mask=their_mask)).abs().max()
    assert difference < 1e-5


def test_stack_agrees_with_torch_fast_path_at_real_positions() -> None:
    torch.manual_seed(0)
    theirs = nudge(nn.TransformerEncoder(their_layer(), LAYERS, norm=None)).eval()  # nested tensors allowed
    ours = Encoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    load_torch_encoder(ours, theirs)
    mask = padding_mask(LENGTHS, N)
    real = mask[:, 0, :]
    x = inputs()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        their_output = theirs(x, src_key_padding_mask=~real)
        assert (ours(x, mask=mask) - their_output)[real].abs().max() < 1e-5


def test_loaded_layers_keep_their_order() -> None:
    # A loader that copied the same layer everywhere, or reversed them, must fail this test.
    torch.manual_seed(0)
    theirs = nudge(their_stack()).eval()
    ours = Encoder(LAYERS, D_MODEL, HEADS, D_FF)
    load_torch_encoder(ours, theirs)
    for our_layer, their_layer_ in zip(ours.layers, theirs.layers):
        assert torch.equal(our_layer.feed_forward.linear_1.weight, their_layer_.linear1.weight)  # type: ignore[arg-type, union-attr]
        assert torch.equal(our_layer.feed_forward_sublayer.norm.bias, their_layer_.norm2.bias)  # type: ignore[arg-type, union-attr]


def test_identity_as_their_final_norm_is_accepted_for_post_ln() -> None:
    torch.manual_seed(0)
    theirs = nudge(their_stack()).eval()
    theirs.norm = nn.Identity()
    ours = Encoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    load_torch_encoder(ours, theirs)
    with torch.no_grad():
        assert (ours(inputs()) - theirs(inputs())).abs().max() < 1e-5


# --- loader errors ---------------------------------------------------------------------------------


def test_loader_rejects_a_different_number_of_layers() -> None:
    with pytest.raises(ValueError, match="theirs has 2 layers, ours has 3"):
        load_torch_encoder(Encoder(3, D_MODEL, HEADS, D_FF), their_stack(layers=2))


def test_loader_rejects_a_different_layer_norm_order() -> None:
    with pytest.raises(ValueError, match="theirs has norm_first=True, ours has norm_first=False"):
        load_torch_encoder_layer(EncoderLayer(D_MODEL, HEADS, D_FF), their_layer(norm_first=True))


def test_loader_rejects_a_different_final_norm() -> None:
    post_ln_theirs_with_norm = nn.TransformerEncoder(
        their_layer(), LAYERS, norm=nn.LayerNorm(D_MODEL), enable_nested_tensor=False
    )
    with pytest.raises(ValueError, match="one encoder stack ends in a LayerNorm and the other does not"):
        load_torch_encoder(Encoder(LAYERS, D_MODEL, HEADS, D_FF), post_ln_theirs_with_norm)
    pre_ln_theirs_without_norm = nn.TransformerEncoder(
        their_layer(norm_first=True), LAYERS, norm=None, enable_nested_tensor=False
    )
    with pytest.raises(ValueError, match="ours ends in LayerNorm"):
        load_torch_encoder(Encoder(LAYERS, D_MODEL, HEADS, D_FF, norm_first=True), pre_ln_theirs_without_norm)


def test_final_norm_loader_copies_the_norm() -> None:
    ours, theirs = LayerNorm(D_MODEL), nudge(nn.LayerNorm(D_MODEL)).eval()
    load_torch_final_norm(ours, theirs, "encoder")
    assert torch.equal(ours.weight, theirs.weight) and torch.equal(ours.bias, theirs.bias)


def test_loader_rejects_a_different_activation() -> None:
    with pytest.raises(ValueError, match="theirs uses activation 'gelu', ours uses 'relu'"):
        load_torch_encoder_layer(EncoderLayer(D_MODEL, HEADS, D_FF), their_layer(activation="gelu"))


def test_loader_rejects_different_sizes() -> None:
    with pytest.raises(ValueError, match="sizes differ"):
        load_torch_encoder_layer(EncoderLayer(D_MODEL, HEADS, 2 * D_FF), their_layer())


# --- constructor errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("num_layers", [0, -1, 2.5])
def test_bad_number_of_layers(num_layers) -> None:
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        Encoder(num_layers, D_MODEL, HEADS, D_FF)


@pytest.mark.parametrize("module", [EncoderLayer, lambda *args: Encoder(2, *args)], ids=["layer", "stack"])
def test_head_count_must_divide_d_model(module) -> None:
    with pytest.raises(ValueError, match="d_model=16 is not divisible by num_heads=3"):
        module(D_MODEL, 3, D_FF)


def test_negative_dropout() -> None:
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got dropout=-0.1"):
        Encoder(2, D_MODEL, HEADS, D_FF, dropout=-0.1)


def test_unknown_activation() -> None:
    with pytest.raises(ValueError, match="unknown activation 'tanh'; choose one of 'relu', 'gelu', 'gelu_tanh'"):
        EncoderLayer(D_MODEL, HEADS, D_FF, activation="tanh")


def test_bad_d_ff() -> None:
    with pytest.raises(ValueError, match="d_ff must be a positive integer"):
        EncoderLayer(D_MODEL, HEADS, 0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_a_layer_without_kept_weights_takes_the_fused_path_to_the_same_output(norm_first: bool) -> None:
    torch.manual_seed(0)
    layer = EncoderLayer(D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    mask = padding_mask(torch.tensor(LENGTHS), N)
    kept = layer(inputs(), mask=mask)
    layer.keep_attention_weights = False
    fused = layer(inputs(), mask=mask)
    assert layer.attention_weights is None
    assert (fused - kept).abs().max() < 1e-5
