"""Unit tests for transformer_book.vision_transformer (exported from book/vision-transformer.md)."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from torch_reference import random_transformers_model
from transformer_book.vision_transformer import PatchEmbedding, VisionTransformer, patchify, vit_from_huggingface

BATCH, CHANNELS, SIZE, PATCH, D_MODEL = 3, 3, 12, 4, 16


def images(seed: int = 0, channels: int = CHANNELS, size: int = SIZE) -> torch.Tensor:
    return torch.randn(BATCH, channels, size, size, generator=torch.Generator().manual_seed(seed))


def small_vit(**changes: object) -> VisionTransformer:
    settings: dict[str, object] = {
        "image_size": SIZE,
        "patch_size": PATCH,
        "num_classes": 5,
        "d_model": D_MODEL,
        "num_heads": 4,
        "num_layers": 2,
        "d_ff": 32,
        "in_channels": CHANNELS,
    }
    settings.update(changes)
    torch.manual_seed(0)
    return VisionTransformer(**settings)  # type: ignore[arg-type]


# --- patches -----------------------------------------------------------------------------------------


def test_patchify_reads_patches_row_by_row_channel_first() -> None:
    x = images()
    patches = patchify(x, PATCH)
    assert patches.shape == (BATCH, (SIZE // PATCH) ** 2, CHANNELS * PATCH * PATCH)
    columns = SIZE // PATCH
    for index in [0, 1, columns, patches.shape[1] - 1]:
        row, column = divmod(index, columns)
        block = x[:, :, row * PATCH : (row + 1) * PATCH, column * PATCH : (column + 1) * PATCH]
        assert torch.equal(patches[:, index], block.reshape(BATCH, -1)), index


def test_patchify_of_a_whole_image_patch_is_the_flattened_image() -> None:
    x = images()
    assert torch.equal(patchify(x, SIZE), x.reshape(BATCH, 1, -1))


def test_patch_embedding_equals_a_strided_conv2d_with_the_same_weights() -> None:
    torch.manual_seed(0)
    ours = PatchEmbedding(SIZE, PATCH, CHANNELS, D_MODEL)
    theirs = nn.Conv2d(CHANNELS, D_MODEL, kernel_size=PATCH, stride=PATCH)
    assert theirs.bias is not None
    with torch.no_grad():
        theirs.weight.copy_(ours.projection.weight.reshape(D_MODEL, CHANNELS, PATCH, PATCH))
        theirs.bias.copy_(ours.projection.bias)
        expected = theirs(images()).flatten(2).transpose(1, 2)
        torch.testing.assert_close(ours(images()), expected)
    assert ours.num_patches == 9


# --- the model -----------------------------------------------------------------------------------------


def test_vit_shapes_and_recorded_attention() -> None:
    model = small_vit()
    x = images()
    assert model(x).shape == (BATCH, 5)
    assert model.encode(x).shape == (BATCH, 1 + 9, D_MODEL)
    weights = model.encoder.layers[-1].attention_weights
    assert weights is not None and weights.shape == (BATCH, 4, 10, 10)
    assert model.position_embedding.shape == (1, 10, D_MODEL)


def test_logits_come_from_the_class_token() -> None:
    model = small_vit().eval()
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.head(model.encode(x)[:, 0]))


def test_without_positions_the_logits_ignore_the_order_of_patches() -> None:
    model = small_vit().eval()
    x = images()
    # Swap two patches (top-left and bottom-right) in every image.
    swapped = x.clone()
    swapped[:, :, :PATCH, :PATCH], swapped[:, :, -PATCH:, -PATCH:] = x[:, :, -PATCH:, -PATCH:], x[:, :, :PATCH, :PATCH]
    with torch.no_grad():
        assert not torch.allclose(model(x), model(swapped), atol=1e-5)  # positions tell them apart
        model.position_embedding.zero_()
        torch.testing.assert_close(model(x), model(swapped), atol=1e-5, rtol=1e-5)


def test_every_parameter_learns() -> None:
    model = small_vit()
    model(images()).sum().backward()
    for name in ["class_token", "position_embedding"]:
        grad = getattr(model, name).grad
        assert grad is not None and grad.abs().sum() > 0, name
    assert model.patch_embedding.projection.weight.grad is not None


def test_dropout_is_used_only_in_training() -> None:
    model = small_vit(dropout=0.5)
    x = images()
    with torch.no_grad():
        assert not torch.equal(model.train()(x), model(x))
        assert torch.equal(model.eval()(x), model(x))


# --- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"patch_size": 5}, "does not divide"),
        ({"patch_size": 0}, "patch_size"),
        ({"patch_size": True}, "patch_size"),
        ({"image_size": 12.0}, "image_size"),
        ({"num_classes": 0}, "num_classes"),
        ({"in_channels": -1}, "in_channels"),
        ({"num_heads": 3}, "num_heads"),
        ({"dropout": 1.0}, "dropout"),
    ],
)
def test_bad_settings_raise_a_clear_value_error(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        small_vit(**changes)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (images()[0], "4-D"),
        (images(channels=1), "3 channel"),
        (images(size=16), "12 x 12"),
        (images().long(), "floating"),
    ],
)
def test_bad_images_raise_a_clear_value_error(bad: torch.Tensor, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        small_vit()(bad)


def test_patchify_refuses_a_patch_size_that_does_not_tile_the_image() -> None:
    with pytest.raises(ValueError, match="does not divide"):
        patchify(images(), 5)
    with pytest.raises(ValueError, match="4-D"):
        patchify(images()[0], 4)


def random_hf_vit(**changes: object) -> nn.Module:
    """A random transformers ViT unlike the chapter's: colour, odd head width, random biases and LayerNorms."""
    settings: dict[str, object] = dict(
        image_size=12,
        patch_size=3,
        num_channels=3,
        num_labels=7,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
    )
    return random_transformers_model("ViTForImageClassification", "ViTConfig", **{**settings, **changes})


@pytest.mark.parametrize("eps", [1e-12, 1e-6])
def test_the_loaded_vit_gives_transformers_logits_in_float64(eps: float) -> None:
    theirs = random_hf_vit(layer_norm_eps=eps)
    ours = vit_from_huggingface(theirs)
    x = torch.randn(5, 3, 12, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours(x) - theirs(x).logits).abs().max().item() < 1e-10
    assert not ours.training


@pytest.mark.parametrize(
    ("change", "named"),
    [({"hidden_act": "relu"}, "hidden_act='relu'"), ({"qkv_bias": False}, "qkv_bias=False")],
)
def test_a_vit_the_book_cannot_represent_is_refused_by_name(change: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        vit_from_huggingface(random_hf_vit(**change))
