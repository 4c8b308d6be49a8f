"""The figures and plumbing of Part III (transformer_book.figures_transformer), on small inputs."""

from __future__ import annotations

import math
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd  # type: ignore[import-untyped]
import pytest
import torch
from matplotlib.patches import FancyBboxPatch, Rectangle
from matplotlib.text import Text
from torch import nn

import transformer_book.model as model_module
from transformer_book import count_parameters
from transformer_book import figures_transformer as figures
from transformer_book.model import (
    SMALL_CONFIG,
    Encoder,
    PositionalEncoding,
    PositionwiseFeedForward,
    TransformerConfig,
    make_transformer,
    padding_mask,
)


@pytest.fixture(autouse=True)
def close_figures() -> Any:
    yield
    plt.close("all")


def xs(line: Any) -> list[float]:
    return [float(value) for value in np.asarray(line.get_xdata(), dtype=float)]


def ys(line: Any) -> list[float]:
    return [float(value) for value in np.asarray(line.get_ydata(), dtype=float)]


def texts(fig: Any) -> list[str]:
    return [text.get_text() for text in fig.findobj(Text) if text.get_text()]


# ---------------------------------------------------------------------------------------------
# Shared plumbing


def test_pad_token_ids_pads_after_each_sentence_and_names_unknown_words() -> None:
    token_id = {"<pad>": 0, "a": 1, "b": 2, "c": 3}
    ids, lengths = figures.pad_token_ids(["a b c", "c", "b a"], token_id, 0)
    assert ids.tolist() == [[1, 2, 3], [3, 0, 0], [2, 1, 0]]
    assert lengths.tolist() == [3, 1, 2] and ids.dtype == lengths.dtype == torch.int64
    with pytest.raises(ValueError, match=r"not in the vocabulary: \['d'\]"):
        figures.pad_token_ids(["a d"], token_id, 0)
    with pytest.raises(ValueError, match="no empty one"):
        figures.pad_token_ids(["a", " "], token_id, 0)


def test_heatmap_pair_labels_each_panel_and_annotates_every_cell() -> None:
    left, right = torch.rand(2, 3), torch.rand(2, 3)
    fig = figures.draw_heatmap_pair(
        [left, right],
        ["left title", "right title"],
        row_labels=[["q0", "q1"], ["r0", "r1"]],
        col_labels=[["k0", "k1", "k2"], ["l0", "l1", "l2"]],
        xlabel="key",
        ylabel="query",
        colorbar_label="attention weight",
        figsize=(6, 3),
        rotate_xticks=True,
    )
    panels, colorbar = fig.axes[:2], fig.axes[2:]
    assert [ax.get_title() for ax in panels] == ["left title", "right title"]
    assert [ax.get_xlabel() for ax in panels] == ["key", "key"]
    assert panels[0].get_ylabel() == "query" and panels[1].get_ylabel() == ""
    assert [label.get_text() for label in panels[1].get_yticklabels()] == ["r0", "r1"]
    assert len(colorbar) == 1 and colorbar[0].get_ylabel() == "attention weight"
    assert [len(ax.texts) for ax in panels] == [6, 6]  # one number per cell
    assert panels[0].texts[0].get_text() == f"{left[0, 0].item():.2f}"
    assert panels[0].get_xticklabels()[0].get_rotation() == 45
    with pytest.raises(ValueError, match="draws two panels"):
        figures.draw_heatmap_pair(
            [left],
            ["one"],
            row_labels=[["q0", "q1"]],
            col_labels=[["k0", "k1", "k2"]],
            xlabel="",
            ylabel="",
            colorbar_label="",
            figsize=(3, 3),
        )


# ---------------------------------------------------------------------------------------------
# block-anatomy


def test_residual_gradients_draws_both_curves_on_a_log_axis_with_the_depth_in_the_title() -> None:
    fig = figures.draw_residual_gradients([1.0, 0.9, 1.1], [1e-6, 1e-3, 1.0])
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and ax.get_title() == "3 feed-forward layers, at initialisation"
    assert [line.get_label() for line in ax.lines] == ["residual: x + F(x)", "plain: F(x)"]
    assert xs(ax.lines[1]) == [1, 2, 3] and ys(ax.lines[1]) == [1e-6, 1e-3, 1.0]
    assert "gradient norm" in ax.get_ylabel() and "layer" in ax.get_xlabel()
    with pytest.raises(ValueError, match="3 residual layers but 2 plain"):
        figures.draw_residual_gradients([1.0, 1.0, 1.0], [1.0, 1.0])


def test_sublayer_orders_put_layer_norm_after_the_sum_in_post_ln_and_first_in_pre_ln() -> None:
    fig = figures.draw_sublayer_orders()
    post, pre = fig.axes
    assert (post.get_title(), pre.get_title()) == ("post-LN (the paper)", "pre-LN")

    def heights(ax: Any) -> dict[str, float]:
        return {text.get_text(): text.get_position()[1] for text in ax.texts}

    post_y, pre_y = heights(post), heights(pre)
    for ax_heights, order in [(post_y, figures.POST_LN_STEPS), (pre_y, figures.PRE_LN_STEPS)]:
        assert [ax_heights[step] for step in order] == sorted(ax_heights[step] for step in order)
        assert ax_heights["x"] < ax_heights[order[0]] < ax_heights[order[-1]] < ax_heights["output"]
    assert post_y["LayerNorm"] > post_y["+"] and pre_y["LayerNorm"] < pre_y["Sublayer"]


def test_block_gradients_draws_a_thin_line_per_seed_and_a_mean_per_stack() -> None:
    gradients = {"post-LN": torch.rand(3, 5) + 0.1, "pre-LN": torch.rand(3, 5) + 0.1}
    means = {name: norms.mean(dim=0) for name, norms in gradients.items()}
    ax = figures.draw_block_gradients(gradients, means).axes[0]
    assert len(ax.lines) == 2 * (3 + 1)
    legend = ax.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == ["post-LN, mean of 3", "pre-LN, mean of 3"]
    assert ax.get_title() == "5 blocks at initialisation" and ax.get_yscale() == "log"
    assert ys(ax.lines[3]) == pytest.approx(means["post-LN"].tolist())
    with pytest.raises(ValueError, match="one shape"):
        figures.draw_block_gradients(
            {"a": torch.rand(3, 5), "b": torch.rand(2, 5)}, {"a": torch.rand(5), "b": torch.rand(5)}
        )


def test_warmup_losses_draws_each_run_and_the_chance_level() -> None:
    runs = {
        (order, warmup): [2.0, 1.5, 1.0, 0.5] for order in ["post-LN", "pre-LN"] for warmup in ["no warm-up", "warm-up"]
    }
    ax = figures.draw_warmup_losses(runs, vocab_size=7, num_blocks=3, learning_rate=0.02).axes[0]
    curves, chance = ax.lines[:4], ax.lines[4]
    assert [line.get_label() for line in curves] == [f"{order}, {warmup}" for order, warmup in runs]
    assert [line.get_linestyle() for line in curves] == ["-", "--", "-", "--"]
    assert ys(chance) == [math.log(7), math.log(7)]
    assert "chance: ln 7" in [text.get_text() for text in ax.texts]
    assert ax.get_title() == "3 blocks, Adam at learning rate 0.02" and "nats" in ax.get_ylabel()
    with pytest.raises(ValueError, match="unknown runs"):
        figures.draw_warmup_losses({("post-LN", "slow start"): [1.0]}, vocab_size=7, num_blocks=3, learning_rate=0.1)


def test_block_anatomy_agreements_are_small_for_the_books_modules_and_large_for_a_wrong_variant() -> None:
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 16)
    assert figures.compare_feed_forward_with_pytorch(ffn, torch.randn(2, 3, 8)) < 1e-6
    assert figures.compare_layer_norms([(2, 3, 8), (5, 4)], torch.device("cpu")) < 1e-5

    def exact(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        return nn.functional.layer_norm(x, x.shape[-1:], gamma, beta)

    def unbiased(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        return gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5) + beta

    cases = [("width 4", 4, 1.0), ("width 64", 64, 1.0)]
    same = figures.layer_norm_variant_table(exact, cases, torch.device("cpu"))
    assert list(same.index) == ["width 4", "width 64"] and (same.iloc[:, 0] < 1e-5).all()
    off = figures.layer_norm_variant_table(unbiased, cases, torch.device("cpu"))
    assert off.loc["width 4", "max |variant - nn.LayerNorm|"] > 0.1
    assert off.loc["width 4", "output std, variant"] == pytest.approx(math.sqrt(3 / 4), rel=1e-3)


# ---------------------------------------------------------------------------------------------
# encoder


def small_encoder_batch() -> tuple[Encoder, nn.Embedding, PositionalEncoding, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    encoder = Encoder(2, 16, 4, 24).eval()
    ids = torch.tensor([[1, 2, 3, 4, 5], [2, 3, 0, 0, 0]])
    return encoder, nn.Embedding(6, 16), PositionalEncoding(16), ids, padding_mask(torch.tensor([5, 2]), 5)


def test_record_encoder_shapes_records_every_step_in_order_and_leaves_nothing_behind() -> None:
    encoder, embedding, positions, ids, mask = small_encoder_batch()
    split_heads = model_module.split_heads
    shapes = figures.record_encoder_shapes(encoder, embedding, positions, ids, mask)
    assert shapes == {
        "token ids": (2, 5),
        "token embeddings": (2, 5, 16),
        "+ positional encoding": (2, 5, 16),
        "queries Q = x W^Q (K, V alike)": (2, 5, 16),
        "split into heads": (2, 4, 5, 4),
        "attention weights, per head": (2, 4, 5, 5),
        "heads' outputs": (2, 4, 5, 4),
        "merged heads, times W^O": (2, 5, 16),
        "add & norm": (2, 5, 16),
        "FFN hidden layer, x W_1 + b_1": (2, 5, 24),
        "FFN output": (2, 5, 16),
        "add & norm, layer output": (2, 5, 16),
        "memory, after N layers": (2, 5, 16),
    }
    assert model_module.split_heads is split_heads
    assert not embedding._forward_hooks and not encoder._forward_hooks
    assert not any(module._forward_hooks for module in encoder.modules())


def test_shape_flow_draws_a_box_per_step_with_names_and_numbers() -> None:
    encoder, embedding, positions, ids, mask = small_encoder_batch()
    shapes = figures.record_encoder_shapes(encoder, embedding, positions, ids, mask)
    names = {2: "batch", 5: "n", 16: "d_model", 4: "h", 24: "d_ff"}
    fig = figures.draw_shape_flow(shapes, names, num_layers=2)
    ax = fig.axes[0]
    assert sum(isinstance(patch, FancyBboxPatch) for patch in ax.patches) == len(shapes) == 13
    shown = texts(fig)
    assert "(batch, n) = (2, 5)" in shown and "(batch, h, n, n) = (2, 4, 5, 5)" in shown
    assert "one encoder layer,\nrepeated N = 2 times" in shown
    with pytest.raises(ValueError, match=r"sizes without a name: \[24\]"):
        figures.draw_shape_flow(shapes, {size: name for size, name in names.items() if size != 24}, 2)
    with pytest.raises(ValueError, match="lack the steps"):
        figures.draw_shape_flow({"token ids": (2, 5)}, names, 2)


def test_compare_encoders_with_pytorch_agrees_and_a_loader_that_copies_nothing_does_not() -> None:
    encoder, embedding, positions, ids, mask = small_encoder_batch()
    x = positions(embedding(ids)).detach()
    theirs = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 24, dropout=0.0, batch_first=True), 2, norm=None)
    agreement = figures.compare_encoders_with_pytorch(theirs, x, mask, num_heads=4, d_ff=24)
    assert list(agreement.index) == [
        "one layer, post-LN, ReLU",
        "stack of 2, post-LN, ReLU",
        "stack of 2, pre-LN, GELU",
    ]
    assert (agreement.to_numpy() < 1e-5).all()
    broken = figures.compare_encoders(
        {"not loaded": (Encoder(2, 16, 4, 24), theirs, lambda ours, their: None)}, x, mask
    )
    assert broken.loc["not loaded", "max |difference|, real positions"] > 1e-2


# ---------------------------------------------------------------------------------------------
# decoder


def test_teacher_forcing_table_shows_each_position_its_prefix_and_its_target() -> None:
    table = figures.teacher_forcing_table(["<s>", "a", "b"], ["a", "b", "</s>"])
    assert table.index.name == "position i" and list(table.index) == [0, 1, 2]
    assert list(table["inputs position i may see"]) == ["<s>", "<s> a", "<s> a b"]
    assert list(table["target to predict"]) == ["a", "b", "</s>"]
    with pytest.raises(ValueError, match="3 input words but 2 targets"):
        figures.teacher_forcing_table(["<s>", "a", "b"], ["a", "b"])


def test_compare_decoders_agrees_in_every_variant() -> None:
    torch.manual_seed(0)
    x, memory = torch.randn(2, 4, 16), torch.randn(2, 5, 16)
    source_mask = padding_mask(torch.tensor([5, 3]), 5)
    layer_difference, table = figures.compare_decoders(
        x, memory, source_mask, num_layers=2, d_model=16, num_heads=4, d_ff=24
    )
    assert layer_difference < 1e-5
    assert list(table.index) == [
        ("post-LN (paper)", "relu"),
        ("post-LN (paper)", "gelu"),
        ("pre-LN", "relu"),
        ("pre-LN", "gelu"),
    ]
    assert (table["max |ours - nn.TransformerDecoder|"] < 1e-5).all()


# ---------------------------------------------------------------------------------------------
# full-model


def test_embedding_scale_plots_the_three_lengths_against_the_widths() -> None:
    lengths = pd.DataFrame(
        {"table row length": [1.0, 1.0], "scaled row length": [8.0, 16.0], "positional row length": [5.7, 11.3]},
        index=pd.Index([64, 256], name="d_model"),
    )
    ax = figures.draw_embedding_scale(lengths).axes[0]
    assert len(ax.lines) == 3 and all(xs(line) == [64, 256] for line in ax.lines)
    assert ys(ax.lines[0]) == [8.0, 16.0]
    assert ax.get_xscale() == ax.get_yscale() == "log"
    assert "d_model" in ax.get_xlabel() and "length" in ax.get_ylabel()
    with pytest.raises(ValueError, match="missing"):
        figures.draw_embedding_scale(lengths.drop(columns="positional row length"))


def test_architecture_figure_names_the_classes_and_the_counts() -> None:
    fig = figures.draw_transformer_architecture(18_914_304, 25_224_192, 18_944_000)
    shown = texts(fig)
    assert "N ×\n\nEncoder\n18.9M" in shown and "× N\n\nDecoder\n25.2M" in shown
    assert "one shared matrix\n18.9M (tie_weights)" in shown
    for name in ["MultiHeadAttention", "PositionwiseFeedForward", "SublayerConnection", "Generator"]:
        assert name in shown
    assert shown.count("Masked multi-head attention") == 1 and shown.count("Add & norm") == 5
    with pytest.raises(ValueError, match="must be positive"):
        figures.draw_transformer_architecture(0, 1, 1)


def test_parameter_breakdown_adds_up_and_counts_a_tied_matrix_once() -> None:
    config = TransformerConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0)
    tied = make_transformer(50, 50, config, pad_id=0)
    untied = make_transformer(50, 50, config, tie_weights=False, pad_id=0)
    parts = figures.parameter_breakdown(tied)
    assert list(parts) == list(figures.PARAMETER_ROLES) and sum(parts.values()) == count_parameters(tied)
    assert parts["shared embedding"] == 50 * 16
    assert figures.parameter_breakdown(untied)["shared embedding"] == 3 * 50 * 16
    assert parts["LayerNorms"] == (2 * 2 + 2 * 3) * 2 * 16
    matrices = figures.vocabulary_matrices(tied)
    assert len({matrix.data_ptr() for matrix in matrices.values()}) == 1
    assert len({matrix.data_ptr() for matrix in figures.vocabulary_matrices(untied).values()}) == 3

    table = figures.parameter_count_table({"small": (tied, untied)}, {"small": 0.1})
    row = table.loc["small"]
    assert row["book, tied"] == f"{count_parameters(tied):,}" and row["book, untied"] == f"{count_parameters(untied):,}"
    saved = (count_parameters(untied) - count_parameters(tied)) / count_parameters(untied)
    assert row["saved by tying"] == f"{saved:.1%}"
    with pytest.raises(ValueError, match="no paper count"):
        figures.parameter_count_table({"small": (tied, untied)}, {})


def test_parameter_breakdown_figure_draws_a_bar_per_role_and_model() -> None:
    model = make_transformer(100, 100, SMALL_CONFIG, pad_id=0)
    breakdown = pd.DataFrame({"base": figures.parameter_breakdown(model), "big": figures.parameter_breakdown(model)})
    ax = figures.draw_parameter_breakdown(breakdown, 37_000).axes[0]
    assert len(ax.patches) == 2 * len(figures.PARAMETER_ROLES)
    first_bar = ax.patches[0]
    assert isinstance(first_bar, Rectangle) and first_bar.get_width() == pytest.approx(breakdown.iloc[0, 0] / 1e6)
    assert [label.get_text() for label in ax.get_yticklabels()] == list(figures.PARAMETER_ROLES)
    assert ax.get_title() == "Where the parameters live (shared 37,000-token vocabulary)"
    assert ax.get_xlabel() == "parameters (millions)"
    with pytest.raises(ValueError, match="one or two models"):
        figures.draw_parameter_breakdown(pd.DataFrame({"a": [1], "b": [1], "c": [1]}), 10)
