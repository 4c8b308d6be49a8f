"""Unit tests for transformer_book.model (exported from book/decoder.md)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_reference import nudge
from transformer_book.model import Decoder, DecoderLayer, LayerNorm, causal_mask, padding_mask, shift_right
from transformer_book.torch_loading import load_torch_decoder, load_torch_decoder_layer

BATCH, M, N, D_MODEL, HEADS, D_FF, LAYERS = 2, 5, 7, 16, 4, 32, 2
SOURCE_LENGTHS = [7, 4]


def inputs(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Decoder input x (BATCH, M, D_MODEL), memory (BATCH, N, D_MODEL) and the source padding mask."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(BATCH, M, D_MODEL, generator=generator)
    memory = torch.randn(BATCH, N, D_MODEL, generator=generator)
    return x, memory, padding_mask(torch.tensor(SOURCE_LENGTHS), N)


def torch_masks(source_mask: torch.Tensor) -> dict[str, torch.Tensor]:
    """The book's masks in PyTorch's convention (True = blocked)."""
    return {"tgt_mask": ~causal_mask(M), "memory_key_padding_mask": ~source_mask[:, 0]}


# --- shift_right -------------------------------------------------------------------------------


def test_shift_right_puts_the_start_token_first_and_drops_the_last_target() -> None:
    targets = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    shifted = shift_right(targets, start_token=1)
    assert torch.equal(shifted, torch.tensor([[1, 5, 6, 7], [1, 8, 2, 0]]))
    assert shifted.shape == targets.shape and shifted.dtype == targets.dtype
    assert torch.equal(targets, torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]]))  # the input is not modified


def test_shift_right_of_a_single_token_is_the_start_token() -> None:
    assert torch.equal(shift_right(torch.tensor([[9], [4]]), 3), torch.tensor([[3], [3]]))


@pytest.mark.parametrize("targets", [torch.tensor([1, 2, 3]), torch.ones(2, 3, 4, dtype=torch.long)])
def test_shift_right_rejects_targets_that_are_not_batch_by_length(targets: torch.Tensor) -> None:
    with pytest.raises(ValueError, match=r"targets must have shape \(batch, m\)"):
        shift_right(targets, 1)


def test_shift_right_rejects_float_targets() -> None:
    with pytest.raises(ValueError, match="targets must hold integer token ids, got dtype torch.float32"):
        shift_right(torch.ones(2, 3), 1)


@pytest.mark.parametrize(
    ("start_token", "message"),
    [
        (1.5, "start_token must be an integer token id, got 1.5"),
        (-1, "start_token must be a non-negative token id, got -1"),
    ],
)
def test_shift_right_rejects_a_bad_start_token(start_token: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        shift_right(torch.ones(2, 3, dtype=torch.long), start_token)  # type: ignore[arg-type]


# --- shapes ------------------------------------------------------------------------------------


def test_decoder_layer_shapes_and_stored_weights() -> None:
    x, memory, source_mask = inputs()
    layer = DecoderLayer(D_MODEL, HEADS, D_FF)
    output = layer(x, memory, source_mask=source_mask)
    assert output.shape == (BATCH, M, D_MODEL)
    assert layer.self_attention_weights is not None and layer.cross_attention_weights is not None
    assert layer.self_attention_weights.shape == (BATCH, HEADS, M, M)
    assert layer.cross_attention_weights.shape == (BATCH, HEADS, M, N)
    assert not layer.cross_attention_weights.requires_grad
    # Default self-attention mask is causal; the memory mask hides the padded source positions.
    assert (layer.self_attention_weights.triu(diagonal=1) == 0).all()
    assert (layer.cross_attention_weights[1, ..., SOURCE_LENGTHS[1] :] == 0).all()
    assert (layer.cross_attention_weights[1, ..., : SOURCE_LENGTHS[1]] > 0).all()


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_stack_shapes_and_final_norm(norm_first: bool) -> None:
    x, memory, source_mask = inputs()
    decoder = Decoder(3, D_MODEL, HEADS, D_FF, norm_first=norm_first)
    assert len(decoder.layers) == 3
    assert isinstance(decoder.norm, LayerNorm if norm_first else nn.Identity)
    assert decoder(x, memory, source_mask=source_mask).shape == (BATCH, M, D_MODEL)


def test_decoder_handles_a_target_longer_than_the_source() -> None:
    decoder = Decoder(1, D_MODEL, HEADS, D_FF)
    x, memory = torch.randn(1, 9, D_MODEL), torch.randn(1, 3, D_MODEL)
    assert decoder(x, memory).shape == (1, 9, D_MODEL)


def test_parameter_count_of_a_paper_size_layer() -> None:
    with torch.device("meta"):
        layer = DecoderLayer(512, 8, 2048)
    assert sum(parameter.numel() for parameter in layer.parameters()) == 4_204_032


# --- causality and padding ---------------------------------------------------------------------


@pytest.mark.parametrize("keep_weights", [True, False], ids=["from scratch", "fused"])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("t", range(M))
def test_changing_a_later_input_leaves_every_earlier_output_identical(
    t: int, norm_first: bool, keep_weights: bool
) -> None:
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF, norm_first=norm_first).eval()
    for layer in decoder.layers:  # the fused path gets the default causal mask as is_causal=True
        assert isinstance(layer, DecoderLayer)
        layer.keep_attention_weights = keep_weights
    changed = x.clone()
    changed[:, t] += torch.randn(D_MODEL)
    with torch.no_grad():
        difference = (
            decoder(changed, memory, source_mask=source_mask) - decoder(x, memory, source_mask=source_mask)
        ).abs()
    assert (difference[:, :t] == 0).all()  # exactly: masked weights are exactly zero
    assert (difference[:, t:].amax(dim=-1) > 1e-4).all()


def test_without_the_causal_mask_earlier_outputs_do_change() -> None:
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    changed = x.clone()
    changed[:, -1] += 1.0
    everywhere = torch.ones(1, M, M, dtype=torch.bool)
    with torch.no_grad():
        difference = (
            decoder(changed, memory, source_mask=source_mask, target_mask=everywhere, is_causal=False)
            - decoder(x, memory, source_mask=source_mask, target_mask=everywhere, is_causal=False)
        ).abs()
    assert difference[:, 0].max() > 1e-4


def test_a_padding_only_target_mask_narrows_the_causal_mask_and_never_replaces_it() -> None:
    """A target mask that hides only the padding (no causal part) still lets no position see a later
    one: given the last position's change, outputs 0 .. m-2 stay exactly as they were."""
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    padding_only = padding_mask(torch.tensor([M, M - 1]), M).expand(2, M, M)  # (batch, m, m), no causal part
    changed = x.clone()
    changed[:, M - 2] += 1.0  # a real token of both sequences
    with torch.no_grad():
        difference = (
            decoder(changed, memory, source_mask=source_mask, target_mask=padding_only)
            - decoder(x, memory, source_mask=source_mask, target_mask=padding_only)
        ).abs()
    assert (difference[:, : M - 2] == 0).all(), "an earlier output saw a later position"
    assert (difference[:, M - 2].amax(dim=-1) > 1e-4).all()
    with torch.no_grad():
        narrowed = decoder(x, memory, source_mask=source_mask, target_mask=padding_only)
        both = decoder(x, memory, source_mask=source_mask, target_mask=padding_only & causal_mask(M))
    assert torch.equal(narrowed, both)


def test_prediction_i_never_depends_on_target_i_after_the_shift() -> None:
    torch.manual_seed(0)
    embedding = nn.Embedding(10, D_MODEL)
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    targets = torch.randint(3, 10, (1, M))
    memory = torch.randn(1, N, D_MODEL)
    with torch.no_grad():
        original = decoder(embedding(shift_right(targets, 1)), memory)
        for t in range(M):
            changed = targets.clone()
            changed[0, t] = 2
            output = decoder(embedding(shift_right(changed, 1)), memory)
            assert torch.equal(output[:, : t + 1], original[:, : t + 1])


def test_memory_padding_does_not_leak() -> None:
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    changed = memory.clone()
    changed[1, SOURCE_LENGTHS[1] :] = torch.randn(N - SOURCE_LENGTHS[1], D_MODEL)  # padded positions only
    with torch.no_grad():
        original = decoder(x, memory, source_mask=source_mask)
        assert torch.equal(decoder(x, changed, source_mask=source_mask), original)
        # Without the memory mask the padding is read: the test can tell the difference.
        assert not torch.allclose(decoder(x, changed), decoder(x, memory))


def test_every_real_source_position_reaches_the_first_target_position() -> None:
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    with torch.no_grad():
        original = decoder(x, memory, source_mask=source_mask)
        for j in range(SOURCE_LENGTHS[1]):
            changed = memory.clone()
            changed[1, j] += 1.0
            assert (decoder(x, changed, source_mask=source_mask) - original)[1, 0].abs().max() > 1e-4


def test_target_padding_needs_no_extra_mask() -> None:
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    real = 3  # positions 3.. are padding
    changed = x.clone()
    changed[:, real:] = torch.randn(BATCH, M - real, D_MODEL)
    with torch.no_grad():
        difference = decoder(changed, memory, source_mask=source_mask) - decoder(x, memory, source_mask=source_mask)
    assert (difference[:, :real] == 0).all()


# --- agreement with PyTorch --------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_layer_agrees_with_nn_transformer_decoder_layer(norm_first: bool, activation: str) -> None:
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    theirs = nudge(
        nn.TransformerDecoderLayer(
            D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
        )
    )
    ours = DecoderLayer(D_MODEL, HEADS, D_FF, activation=activation, norm_first=norm_first)
    load_torch_decoder_layer(ours, theirs)
    with torch.no_grad():
        expected = theirs(x, memory, **torch_masks(source_mask))
        assert (ours(x, memory, source_mask=source_mask) - expected).abs().max() < 1e-5


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_decoder_agrees_with_nn_transformer_decoder(norm_first: bool, activation: str) -> None:
    torch.manual_seed(0)
    x, memory, source_mask = inputs()
    layer = nn.TransformerDecoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    )
    theirs = nudge(nn.TransformerDecoder(layer, LAYERS, norm=nn.LayerNorm(D_MODEL) if norm_first else None))
    ours = Decoder(LAYERS, D_MODEL, HEADS, D_FF, activation=activation, norm_first=norm_first)
    load_torch_decoder(ours, theirs)
    with torch.no_grad():
        expected = theirs(x, memory, **torch_masks(source_mask))
        difference = (ours(x, memory, source_mask=source_mask) - expected).abs().max()
        assert difference < 1e-5
        # The layers are not interchangeable: swapping two of them breaks the agreement.
        ours.layers = nn.ModuleList(reversed(list(ours.layers)))
        assert (ours(x, memory, source_mask=source_mask) - expected).abs().max() > 1e-3


def test_load_torch_decoder_layer_rejects_a_different_layernorm_order() -> None:
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="theirs has norm_first=True, ours has norm_first=False"):
        load_torch_decoder_layer(DecoderLayer(D_MODEL, HEADS, D_FF), theirs)


def test_load_torch_decoder_layer_rejects_a_different_activation() -> None:
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, activation="gelu")
    with pytest.raises(ValueError, match="theirs uses activation 'gelu', ours uses 'relu'"):
        load_torch_decoder_layer(DecoderLayer(D_MODEL, HEADS, D_FF), theirs)


def test_load_torch_decoder_layer_rejects_different_sizes() -> None:
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, 2 * D_FF, batch_first=True)
    with pytest.raises(ValueError, match="sizes differ"):
        load_torch_decoder_layer(DecoderLayer(D_MODEL, HEADS, D_FF), theirs)


def test_load_torch_decoder_rejects_a_different_number_of_layers() -> None:
    theirs = nn.TransformerDecoder(nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, batch_first=True), 3)
    with pytest.raises(ValueError, match="theirs has 3 layers, ours has 2"):
        load_torch_decoder(Decoder(2, D_MODEL, HEADS, D_FF), theirs)


def test_load_torch_decoder_rejects_a_final_norm_on_one_side_only() -> None:
    layer = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, batch_first=True)
    theirs = nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(D_MODEL))  # post-LN layers, yet a final norm
    with pytest.raises(ValueError, match="one decoder stack ends in a LayerNorm and the other does not"):
        load_torch_decoder(Decoder(2, D_MODEL, HEADS, D_FF), theirs)


# --- constructor and input errors --------------------------------------------------------------


@pytest.mark.parametrize("num_layers", [0, -1, 2.5])
def test_decoder_rejects_a_bad_number_of_layers(num_layers: int) -> None:
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        Decoder(num_layers, D_MODEL, HEADS, D_FF)


@pytest.mark.parametrize("build", [lambda: DecoderLayer(D_MODEL, 3, D_FF), lambda: Decoder(2, D_MODEL, 3, D_FF)])
def test_a_head_count_that_does_not_divide_d_model_is_rejected(build) -> None:
    with pytest.raises(ValueError, match="d_model=16 is not divisible by num_heads=3"):
        build()


def test_negative_dropout_is_rejected() -> None:
    with pytest.raises(ValueError, match=r"dropout must be a probability in \[0, 1\), got dropout=-0.1"):
        DecoderLayer(D_MODEL, HEADS, D_FF, dropout=-0.1)


def test_an_unknown_activation_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown activation 'tanh'; choose one of 'relu', 'gelu', 'gelu_tanh'"):
        Decoder(2, D_MODEL, HEADS, D_FF, activation="tanh")


@pytest.mark.parametrize("module", [DecoderLayer(D_MODEL, HEADS, D_FF), Decoder(2, D_MODEL, HEADS, D_FF)])
def test_inputs_of_the_wrong_shape_are_rejected(module: nn.Module) -> None:
    x, memory, _ = inputs()
    with pytest.raises(ValueError, match=r"x must have shape \(batch, m, d_model=16\), got \(2, 5, 8\)"):
        module(x[..., :8], memory)
    with pytest.raises(ValueError, match=r"x must have shape \(batch, m, d_model=16\), got \(5, 16\)"):
        module(x[0], memory)
    with pytest.raises(ValueError, match=r"memory must have shape \(batch, n, d_model=16\), got \(2, 7, 8\)"):
        module(x, memory[..., :8])
    with pytest.raises(ValueError, match="x and memory must have the same batch size"):
        module(x, memory[:1])


@pytest.mark.parametrize("module", [DecoderLayer(D_MODEL, HEADS, D_FF), Decoder(2, D_MODEL, HEADS, D_FF)])
def test_masks_of_the_wrong_shape_or_dtype_are_rejected(module: nn.Module) -> None:
    x, memory, source_mask = inputs()
    with pytest.raises(ValueError, match=r"mask of shape \(1, 4, 4\) does not broadcast"):
        module(x, memory, source_mask=source_mask, target_mask=causal_mask(4)[None])
    with pytest.raises(ValueError, match=r"mask must have 3 dimensions"):
        module(x, memory, source_mask=source_mask, target_mask=causal_mask(M))
    with pytest.raises(ValueError, match=r"mask of shape \(2, 1, 5\) does not broadcast"):
        module(x, memory, source_mask=padding_mask(torch.tensor([5, 3]), 5))  # padded to M, not N
    with pytest.raises(ValueError, match="give one mask for all heads"):
        module(x, memory, source_mask=source_mask[:, None])  # with a head dimension
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        module(x, memory, target_mask=causal_mask(M)[None].float())


# --- a decoder without cross-attention (decoder-only models) ---------------------------------------


def test_a_decoder_without_cross_attention_has_two_sub_layers_and_takes_no_memory() -> None:
    x, memory, _ = inputs()
    decoder = Decoder(LAYERS, D_MODEL, HEADS, D_FF, cross_attention=False).eval()
    with_cross = Decoder(LAYERS, D_MODEL, HEADS, D_FF).eval()
    assert all(layer.cross_attention is None for layer in decoder.layers)
    # One attention of 4 d^2 + 4 d parameters and one LayerNorm of 2 d fewer per layer.
    missing = sum(p.numel() for p in with_cross.parameters()) - sum(p.numel() for p in decoder.parameters())
    assert missing == LAYERS * (4 * D_MODEL**2 + 4 * D_MODEL + 2 * D_MODEL)
    assert decoder(x, None).shape == x.shape
    with pytest.raises(ValueError, match="takes no memory"):
        decoder(x, memory)


def test_a_decoder_with_cross_attention_needs_the_memory() -> None:
    x, _, _ = inputs()
    with pytest.raises(ValueError, match="needs the encoder's memory"):
        Decoder(LAYERS, D_MODEL, HEADS, D_FF)(x, None)
    with pytest.raises(ValueError, match="needs the encoder's memory"):
        DecoderLayer(D_MODEL, HEADS, D_FF)(x, None)


def test_a_decoder_only_layer_is_still_causal() -> None:
    x, _, _ = inputs()
    layer = DecoderLayer(D_MODEL, HEADS, D_FF, cross_attention=False).eval()
    changed = x.clone()
    changed[:, 3] += 1.0
    with torch.no_grad():
        assert torch.equal(layer(x, None)[:, :3], layer(changed, None)[:, :3])


def test_loading_pytorchs_decoder_layer_refuses_a_layer_without_cross_attention() -> None:
    theirs = nn.TransformerDecoderLayer(D_MODEL, HEADS, D_FF, batch_first=True)
    with pytest.raises(ValueError, match="no cross-attention"):
        load_torch_decoder_layer(DecoderLayer(D_MODEL, HEADS, D_FF, cross_attention=False), theirs)


@pytest.mark.parametrize("cross_attention", [True, False])
def test_a_layer_without_kept_weights_takes_the_fused_path_to_the_same_output(cross_attention: bool) -> None:
    torch.manual_seed(0)
    layer = DecoderLayer(D_MODEL, HEADS, D_FF, cross_attention=cross_attention).eval()
    x, memory, source_mask = inputs()
    memory_or_none = memory if cross_attention else None
    kept = layer(x, memory_or_none, source_mask=source_mask if cross_attention else None)
    layer.keep_attention_weights = False
    fused = layer(x, memory_or_none, source_mask=source_mask if cross_attention else None)
    assert layer.self_attention_weights is None and layer.cross_attention_weights is None
    assert (fused - kept).abs().max() < 1e-5
