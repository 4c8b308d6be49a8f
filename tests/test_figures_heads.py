"""The figures and small harnesses of the multi-head-attention and positional-encoding chapters
draw what they are given: as many cells, marks, lines and panels as the input has, with the
labels that say what they show."""

from __future__ import annotations

import math
from collections.abc import Iterator

import matplotlib
import numpy as np
import pytest
import torch
from matplotlib.axes import Axes
from matplotlib.colors import to_hex
from matplotlib.patches import FancyBboxPatch, Rectangle
from matplotlib.text import Annotation

from transformer_book.figures_heads import (
    compare_with_torch_attention,
    count_multiply_adds,
    describe_entries,
    draw_encoding_columns,
    draw_mean_attention_maps,
    draw_multi_head_flow,
    draw_partner_heatmaps,
    draw_rotation_circle,
    draw_similarity_by_distance,
    draw_sinusoidal_table,
    draw_split_and_merge,
)
from transformer_book.model import (
    MultiHeadAttention,
    causal_mask,
    merge_heads,
    rotation_matrix,
    sinusoidal_encoding,
    split_heads,
)
from transformer_book.runtime import PALETTE
from transformer_book.torch_loading import load_torch_weights

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def close_figures() -> Iterator[None]:
    import matplotlib.pyplot as plt

    yield
    plt.close("all")


def texts(ax: Axes) -> list[str]:
    return [text.get_text() for text in ax.texts]


def test_split_and_merge_draws_every_number_once_per_stage_tinted_by_its_head() -> None:
    x = torch.arange(2 * 6).reshape(1, 2, 6)  # n = 2, d_model = 6
    split = split_heads(x, 3)  # three heads of width 2
    fig = draw_split_and_merge(x, split, merge_heads(split))
    (ax,) = fig.axes
    numbers = [text for text in texts(ax) if text.isdigit()]
    assert sorted(numbers, key=int) == sorted([str(i) for i in range(12)] * 3, key=int)  # x, heads, merged
    assert [text for text in texts(ax) if text.startswith("head ")] == ["head 0", "head 1", "head 2"]
    assert "x: (n, d_model) = (2, 6)" in texts(ax) and "(h, n, d_head) = (3, 2, 2)" in texts(ax)
    filled = [patch for patch in ax.patches if isinstance(patch, Rectangle) and patch.get_fill()]
    assert len(filled) == 36
    # x's cell for number 3 (column 3) belongs to head 1: PALETTE[1]
    assert to_hex(filled[3].get_facecolor(), keep_alpha=False) == PALETTE[1].lower()
    assert to_hex(filled[0].get_facecolor(), keep_alpha=False) == PALETTE[0].lower()


def test_split_and_merge_refuses_shapes_that_do_not_fit() -> None:
    x = torch.arange(12).reshape(1, 2, 6)
    with pytest.raises(ValueError, match="merged"):
        draw_split_and_merge(x, split_heads(x, 3), x[:, :1])
    with pytest.raises(ValueError, match="not x"):
        draw_split_and_merge(x, split_heads(torch.arange(16).reshape(1, 2, 8), 2), x)


@pytest.mark.parametrize("heads_drawn", [1, 3])
def test_multi_head_flow_stacks_one_box_per_head_drawn_and_names_the_code(heads_drawn: int) -> None:
    fig = draw_multi_head_flow(heads_drawn)
    (ax,) = fig.axes
    boxes = [patch for patch in ax.patches if isinstance(patch, FancyBboxPatch)]
    # three projections and the attention, heads_drawn boxes each; concat and output once
    assert len(boxes) == 4 * heads_drawn + 2
    for code in [
        "w_q, split_heads",
        "w_k, split_heads",
        "w_v, split_heads",
        "merge_heads",
        "w_o",
        "scaled_dot_product_attention(q, k, v, mask)",
    ]:
        assert code in texts(ax), code
    assert "weights\n(batch, h, n, m)" in texts(ax)


def test_multi_head_flow_refuses_no_heads() -> None:
    with pytest.raises(ValueError, match="heads_drawn must be a positive integer, got heads_drawn=0"):
        draw_multi_head_flow(0)
    with pytest.raises(ValueError, match="heads_drawn must be a positive integer, got heads_drawn=2.5"):
        draw_multi_head_flow(2.5)  # type: ignore[arg-type]


def test_multi_head_flow_takes_a_numpy_integer() -> None:
    # Once refused by an ad-hoc isinstance(heads_drawn, int) check.
    (ax,) = draw_multi_head_flow(np.int64(2)).axes  # type: ignore[arg-type]
    assert len([patch for patch in ax.patches if isinstance(patch, FancyBboxPatch)]) == 4 * 2 + 2


def test_count_multiply_adds_matches_the_formula_for_any_number_of_heads() -> None:
    n, d = 5, 8
    x = torch.randn(1, n, d)
    for heads in [1, 2, 4]:
        counted = count_multiply_adds(MultiHeadAttention(d, heads), x)
        assert counted == {
            "projections": 4 * n * d**2,
            "scores and weighted sum": 2 * n**2 * d,
            "total": 4 * n * d**2 + 2 * n**2 * d,
        }


def test_compare_with_torch_attention_finds_agreement_only_where_the_weights_agree() -> None:
    torch.manual_seed(0)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    ours = MultiHeadAttention(8, 2)
    load_torch_weights(ours, theirs)
    x = torch.randn(2, 5, 8)
    causal = causal_mask(5)[None]
    cases = {"no mask": (None, {}), "causal": (causal, {"attn_mask": ~causal[0]})}
    rows, weights = compare_with_torch_attention(ours, theirs, x, cases)
    assert [row["mask"] for row in rows] == ["no mask", "causal"]
    assert all(
        float(row[column]) < 1e-6 for row in rows for column in ["max |output difference|", "max |weight difference|"]
    )
    assert weights["causal"].shape == (2, 2, 5, 5) and (weights["causal"].triu(diagonal=1) == 0).all()
    # the book's mask and PyTorch's arguments disagree: the difference shows it
    rows, _ = compare_with_torch_attention(ours, theirs, x, {"mismatched": (causal, {})})
    assert float(rows[0]["max |weight difference|"]) > 1e-3
    with torch.no_grad():
        ours.w_k.weight.add_(0.5)  # now the scores differ
    rows, _ = compare_with_torch_attention(ours, theirs, x, cases)
    assert all(float(row["max |weight difference|"]) > 1e-3 for row in rows)


def test_describe_entries_tells_nan_zero_and_other_rows_apart() -> None:
    assert describe_entries(torch.full((3,), float("nan"))) == "NaN in every entry"
    assert describe_entries(torch.zeros(2, 3)) == "zeros in every entry"
    assert describe_entries(torch.tensor([0.0, 1.0])) == "finite numbers"
    assert describe_entries(torch.tensor([0.0, float("nan")])) == "finite numbers"


def test_partner_heatmaps_mark_each_query_s_partners_and_colour_the_ticks() -> None:
    weights = np.array([[0.1, 0.8, 0.1], [0.2, 0.1, 0.7], [0.9, 0.05, 0.05]])
    letter, colour = [1, 2, 0], [2, 0, 1]
    inks = ["#0072B2", "#D55E00", "#009E73"]
    fig = draw_partner_heatmaps([("first", weights), ("second", weights.T)], ["a", "b", "c"], letter, colour, inks)
    heatmaps = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in heatmaps] == ["first", "second"]
    assert len(fig.axes) == 3  # one colour bar, beside the last panel
    for ax, matrix in zip(heatmaps, [weights, weights.T]):
        marks = {(int(text.get_position()[1]), text.get_text()): int(text.get_position()[0]) for text in ax.texts}
        assert marks == {**{(q, "L"): letter[q] for q in range(3)}, **{(q, "C"): colour[q] for q in range(3)}}
        for text in ax.texts:  # black ink on bright cells, white on dark ones
            key, query = (int(coordinate) for coordinate in text.get_position())
            assert text.get_color() == ("black" if matrix[query, key] > 0.5 else "white")
        assert [to_hex(label.get_color()) for label in ax.get_xticklabels()] == [ink.lower() for ink in inks]
        assert ax.get_xlabel() == "key (token attended to)"
    # the panels share their rows: the first one names them, in the tokens' inks
    assert [label.get_text() for label in heatmaps[0].get_yticklabels()] == ["a", "b", "c"]
    assert [to_hex(label.get_color()) for label in heatmaps[0].get_yticklabels()] == [ink.lower() for ink in inks]
    assert heatmaps[0].get_ylabel() == "query (token attending)"


def test_partner_heatmaps_refuse_inputs_of_the_wrong_length() -> None:
    weights = np.eye(3)
    with pytest.raises(ValueError, match="two panels"):
        draw_partner_heatmaps([("only", weights)], ["a", "b", "c"], [1, 2, 0], [2, 0, 1], ["k"] * 3)
    with pytest.raises(ValueError, match="letter_partner"):
        draw_partner_heatmaps([("a", weights)] * 2, ["a", "b", "c"], [1, 2], [2, 0, 1], ["k"] * 3)
    with pytest.raises(ValueError, match="weights must be"):
        draw_partner_heatmaps([("a", weights), ("b", np.eye(4))], ["a", "b", "c"], [1, 2, 0], [2, 0, 1], ["k"] * 3)


def test_sinusoidal_table_heatmap_shows_the_table_with_units() -> None:
    table = sinusoidal_encoding(10, 8)
    fig = draw_sinusoidal_table(table)
    ax = fig.axes[0]
    np.testing.assert_array_equal(ax.images[0].get_array(), table.numpy())
    assert ax.images[0].get_clim() == (-1.0, 1.0)
    assert "(tokens)" in ax.get_ylabel() and "sine" in ax.get_xlabel()
    assert "= 8" in ax.get_title()
    assert "(unitless)" in fig.axes[1].get_ylabel()  # the colour bar
    with pytest.raises(ValueError, match="even"):
        draw_sinusoidal_table(torch.zeros(4, 3))


def test_encoding_columns_draw_a_curve_and_the_table_s_dots_per_pair() -> None:
    table = sinusoidal_encoding(20, 16)
    fig = draw_encoding_columns(table, pairs=[0, 2])
    (ax,) = fig.axes
    assert len(ax.lines) == 4
    np.testing.assert_allclose(np.asarray(ax.lines[3].get_ydata()), table[:, 4].numpy())
    legend = ax.get_legend()
    assert legend is not None
    assert [text.get_text() for text in legend.get_texts()] == [
        f"$j = 0$ ($i = 0$), wavelength {2 * math.pi:.1f}",
        f"$j = 4$ ($i = 2$), wavelength {2 * math.pi * 10000 ** (4 / 16):.1f}",
    ]
    assert "(tokens)" in ax.get_xlabel() and "(unitless)" in ax.get_ylabel()
    with pytest.raises(ValueError, match="pairs"):
        draw_encoding_columns(table, pairs=[8])


def test_rotation_circle_numbers_each_position_and_lands_each_arrow_on_the_rotated_point() -> None:
    d_model, pair, offset = 8, 1, 2
    points = sinusoidal_encoding(14, d_model, dtype=torch.float64)[:, 2 * pair : 2 * pair + 2].numpy()
    block = rotation_matrix(offset, d_model, dtype=torch.float64)[2 * pair : 2 * pair + 2, 2 * pair : 2 * pair + 2]
    fig = draw_rotation_circle(points, block.numpy(), 12, pair, offset, starts=[0, 4])
    (ax,) = fig.axes
    assert len(np.asarray(ax.collections[0].get_offsets())) == 12
    numbers = [text for text in ax.texts if isinstance(text, Annotation) and text.get_text()]
    assert [text.get_text() for text in numbers] == [str(pos) for pos in range(12)]
    arrows = [text for text in ax.texts if isinstance(text, Annotation) and not text.get_text()]
    assert len(arrows) == 2
    for arrow, start in zip(arrows, [0, 4]):
        np.testing.assert_allclose(arrow.xy, points[start + offset] * 0.97, atol=1e-12)  # M_k lands k later
    assert "\\sin" in ax.get_xlabel() and "\\cos" in ax.get_ylabel() and f"${offset}$" in ax.get_title()
    with pytest.raises(ValueError, match="turn_positions"):
        draw_rotation_circle(points, block.numpy(), 20, pair, offset)


def test_similarity_by_distance_draws_the_curve_and_the_sampled_pairs() -> None:
    table = sinusoidal_encoding(30, 8, dtype=torch.float64)
    dot_products = table @ table.T
    similarity = torch.stack([dot_products.diagonal(k).mean() for k in range(30)])
    sample = torch.tensor([[0, 3, 29, 5], [2, 3, 0, 20]])
    fig = draw_similarity_by_distance(similarity, dot_products, sample, d_model=8, near=10)
    near_ax, far_ax = fig.axes
    assert len(np.asarray(near_ax.lines[0].get_xdata())) == 10 and len(np.asarray(far_ax.lines[0].get_xdata())) == 30
    assert np.asarray(near_ax.lines[1].get_xdata()).tolist() == [2, 0]  # only pairs closer than 10 on the left
    assert sorted(np.asarray(far_ax.lines[1].get_xdata()).tolist()) == [0, 2, 15, 29]
    assert [near_ax.get_title(), far_ax.get_title()] == ["Distances 0 to 9", "Distances 0 to 29"]
    legend = far_ax.get_legend()
    assert legend is not None and "4 random pairs $(p, q)$" in [text.get_text() for text in legend.get_texts()]
    assert np.asarray(near_ax.lines[2].get_ydata())[0] == 4  # d_model / 2
    with pytest.raises(ValueError, match="near"):
        draw_similarity_by_distance(similarity, dot_products, sample, d_model=8, near=31)


def test_mean_attention_maps_annotate_every_cell_and_share_one_colour_bar() -> None:
    maps = {"with": torch.eye(4), "without": torch.full((4, 4), 0.25)}
    fig = draw_mean_attention_maps(maps)
    heatmaps = [ax for ax in fig.axes if ax.get_title()]
    assert [ax.get_title() for ax in heatmaps] == ["with", "without"]
    assert len(fig.axes) == 3
    for ax, matrix in zip(heatmaps, maps.values()):
        assert len(ax.texts) == 16
        assert ax.texts[5].get_text() == f"{matrix[1, 1].item():.2f}"
        assert "(attended to)" in ax.get_xlabel() and "(attending)" in ax.get_ylabel()
    with pytest.raises(ValueError, match="square"):
        draw_mean_attention_maps({"a": torch.eye(3), "b": torch.zeros(3, 4)})
    with pytest.raises(ValueError, match="two maps"):
        draw_mean_attention_maps({"a": torch.eye(3)})
