"""Figures and small harnesses of the multi-head-attention and positional-encoding chapters.

Written by hand, not exported: the chapters compute what a figure shows and pass it in; these
functions only draw (or, for ``count_multiply_adds``, measure, and for ``describe_entries``, say
in words). Matplotlib is imported inside each function, never when the
package is imported.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor, nn

from transformer_book.checks import positive_int
from transformer_book.runtime import (
    LABEL_INK,
    PALETTE,
    diagram_arrow,
    diagram_box,
    number_cells,
    plot_heatmap,
)

if TYPE_CHECKING:  # plotting is imported where it is used, not with the package
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


# -- multi-head-attention ------------------------------------------------------------------------


def _draw_head_grid(ax: Axes, matrix: Tensor, left: float, top: float, d_head: int, d_model: int) -> None:
    """Draw an integer matrix as labelled cells, each tinted by the head its number came from in x."""
    number_cells(ax, matrix, left, top, lambda number: PALETTE[(number % d_model) // d_head], fontsize=8)


def draw_split_and_merge(x: Tensor, split: Tensor, merged: Tensor) -> Figure:
    """Draw the three stages of the head reshape: x, its heads stacked, and the merged result.

    ``x`` is (1, n, d_model) with entries that say where they came from (such as ``arange``),
    ``split`` is ``split_heads(x, h)``, (1, h, n, d_head), and ``merged`` is ``merge_heads(split)``;
    only the first batch element is drawn. Each cell shows its number, tinted by the head its
    column of x belongs to.

    Raises:
        ValueError: if the shapes do not fit together as above.
    """
    if x.dim() != 3 or split.dim() != 4 or merged.shape != x.shape:
        raise ValueError(
            "draw_split_and_merge needs x (batch, n, d_model), split (batch, h, n, d_head) and merged "
            f"of x's shape, got x {tuple(x.shape)}, split {tuple(split.shape)}, merged {tuple(merged.shape)}"
        )
    _, num_heads, n, d_head = split.shape
    d_model = x.shape[-1]
    if num_heads * d_head != d_model or n != x.shape[1]:
        raise ValueError(
            f"split {tuple(split.shape)} is not x {tuple(x.shape)} cut into heads: "
            f"h * d_head must equal d_model and the positions must agree"
        )
    import matplotlib.pyplot as plt

    gap = 1.0  # between stacked heads
    stack_height = num_heads * n + (num_heads - 1) * gap
    middle = -stack_height / 2  # vertical centre of the figure
    arrow = 4.5  # horizontal room for an arrow
    fig, ax = plt.subplots(figsize=(9.5, 4.3))
    ax.set_axis_off()
    ax.set_aspect("equal")
    # Left: x; middle: the stacked heads; right: the merged matrix.
    _draw_head_grid(ax, x[0], 0, middle + n / 2, d_head, d_model)
    heads_left = d_model + arrow
    for head in range(num_heads):
        top = -head * (n + gap)
        _draw_head_grid(ax, split[0, head], heads_left, top, d_head, d_model)
        ax.text(heads_left + d_head + 0.3, top - n / 2, f"head {head}", va="center", fontsize=9)
    merged_left = heads_left + d_head + arrow + 2.5  # room for the "head i" labels
    _draw_head_grid(ax, merged[0], merged_left, middle + n / 2, d_head, d_model)
    # Arrows and titles.
    for start, end, label in [
        (d_model + 0.3, heads_left - 0.3, "split_heads"),
        (heads_left + d_head + 3.0, merged_left - 0.3, "merge_heads"),
    ]:
        ax.annotate("", xy=(end, middle), xytext=(start, middle), arrowprops={"arrowstyle": "->", "color": "#333333"})
        ax.text((start + end) / 2, middle + 0.4, label, ha="center", va="bottom", fontsize=9, family="monospace")
    title_y = middle + n / 2 + 0.6
    for left in [0, merged_left]:
        ax.text(
            left + d_model / 2,
            middle - n / 2 - 0.5,
            "rows: positions, columns: features",
            ha="center",
            va="top",
            fontsize=8.5,
            color="#555555",
        )
    ax.text(d_model / 2, title_y, f"x: (n, d_model) = ({n}, {d_model})", ha="center", va="bottom", fontsize=10)
    ax.text(
        heads_left + d_head / 2,
        1.0,
        f"(h, n, d_head) = ({num_heads}, {n}, {d_head})",
        ha="center",
        va="bottom",
        fontsize=10,
    )
    ax.text(
        merged_left + d_model / 2,
        title_y,
        f"merged: (n, d_model) = ({n}, {d_model})",
        ha="center",
        va="bottom",
        fontsize=10,
    )
    ax.set_xlim(-0.2, merged_left + d_model + 0.2)
    ax.set_ylim(-stack_height - 0.3, 2.2)
    return fig


#: Fill colours of the flow diagram's boxes, by kind of step.
MHA_FILLS = {"linear": "#BFDFF2", "attention": "#F5D9A8", "concat": "#FFF5B0", "output": "#C8E6D6"}


def draw_multi_head_flow(heads_drawn: int = 3) -> Figure:
    """Draw ``MultiHeadAttention`` as the paper's Figure 2 (right), bottom to top, with the
    module's names under the paper's and the tensor shapes beside the arrows.

    ``heads_drawn`` boxes are stacked behind each per-head step to picture the h heads.

    Raises:
        ValueError: if heads_drawn is not a positive integer.
    """
    heads_drawn = positive_int(heads_drawn, "heads_drawn")
    import matplotlib.pyplot as plt

    def mha_box(ax: Axes, x: float, y: float, width: float, title: str, code: str, kind: str, copies: int = 0) -> None:
        diagram_box(ax, (x, y), (width, 0.66), title, code, MHA_FILLS[kind], copies=copies)

    linear_y, attention_y, concat_y, output_y = 1.4, 3.0, 4.45, 5.55
    input_y = 0.15
    columns = [
        (1.9, "V", "value", "w_v", "(batch, m, d_model)", "(batch, h, m, d_head)"),
        (4.7, "K", "key", "w_k", "(batch, m, d_model)", "(batch, h, m, d_head)"),
        (7.5, "Q", "query", "w_q", "(batch, n, d_model)", "(batch, h, n, d_head)"),
    ]
    centre_x = 4.7

    fig, ax = plt.subplots(figsize=(9.5, 6.0))
    for x, letter, name, layer, shape_in, shape_split in columns:
        ax.text(x, input_y, f"{letter} = {name}", ha="center", va="center", fontsize=10, fontweight="bold")
        ax.text(x, input_y - 0.3, shape_in, ha="center", va="center", fontsize=9, family="monospace", color=LABEL_INK)
        diagram_arrow(ax, (x, input_y + 0.2), (x, linear_y - 0.33))
        mha_box(ax, x, linear_y, 2.1, "Linear", f"{layer}, split_heads", "linear", copies=heads_drawn - 1)
        diagram_arrow(ax, (x, linear_y + 0.33 + 0.1 * (heads_drawn - 1)), (x, attention_y - 0.33), shape_split)

    mha_box(
        ax,
        centre_x,
        attention_y,
        6.4,
        "Scaled dot-product attention",
        "scaled_dot_product_attention(q, k, v, mask)",
        "attention",
        copies=heads_drawn - 1,
    )
    attention_top = attention_y + 0.33 + 0.1 * (heads_drawn - 1)
    diagram_arrow(ax, (centre_x, attention_top), (centre_x, concat_y - 0.33), "(batch, h, n, d_head)")
    attention_right = centre_x + 3.2 + 0.1 * (heads_drawn - 1)
    diagram_arrow(ax, (attention_right, attention_y + 0.1), (attention_right + 0.45, attention_y + 0.1))
    ax.text(
        attention_right + 0.55,
        attention_y + 0.1,
        "weights\n(batch, h, n, m)",
        ha="left",
        va="center",
        fontsize=9,
        color=LABEL_INK,
        family="monospace",
    )
    mha_box(ax, centre_x, concat_y, 2.6, "Concat", "merge_heads", "concat")
    diagram_arrow(ax, (centre_x, concat_y + 0.33), (centre_x, output_y - 0.33), "(batch, n, d_model)")
    mha_box(ax, centre_x, output_y, 2.6, "Linear", "w_o", "output")
    diagram_arrow(ax, (centre_x, output_y + 0.33), (centre_x, output_y + 0.85), "(batch, n, d_model)")
    ax.text(centre_x, output_y + 1.0, "output", ha="center", va="center", fontsize=10, style="italic")

    # the heads: h boxes in the paper, one wide layer and a reshape in the book
    ax.text(centre_x - 3.35, attention_y, "h heads,\none call", ha="right", va="center", fontsize=9)
    ax.text(
        8.85,
        linear_y,
        "the paper's h matrices\n$W_i^Q$ side by side are\none layer, w_q (w_k and\n"
        "w_v likewise); split_heads\nhands head i its columns",
        ha="left",
        va="center",
        fontsize=9,
    )

    ax.set_xlim(0.3, 11.6)
    ax.set_ylim(-0.35, output_y + 1.2)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def count_multiply_adds(module: nn.Module, x: Tensor) -> dict[str, int]:
    """Multiply-adds of one self-attention call ``module(x, x, x)``, measured by PyTorch's
    ``FlopCounterMode`` (two FLOPs per multiply-add; it counts matrix products only).

    Returns the projections' share, the per-head batched products' share (scores and weighted
    sum, ``aten.bmm``) and the total.
    """
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(x, x, x)
    by_operator = {str(op): flops // 2 for op, flops in counter.get_flop_counts()["Global"].items()}
    total: int = counter.get_total_flops() // 2
    batched = by_operator.get("aten.bmm", 0)  # per-head products: scores and weighted sum
    return {"projections": total - batched, "scores and weighted sum": batched, "total": total}


def compare_with_torch_attention(
    ours: nn.Module,
    theirs: nn.MultiheadAttention,
    x: Tensor,
    cases: Mapping[str, tuple[Tensor | None, Mapping[str, Tensor]]],
) -> tuple[list[dict[str, str | float]], dict[str, Tensor]]:
    """Run the book's module and PyTorch's ``nn.MultiheadAttention`` on self-attention over ``x``,
    once per case, and measure how far apart they are.

    ``cases`` maps a case's name to the book's mask (True = may attend, or None) and the keyword
    arguments that say the same to PyTorch (``key_padding_mask``, ``attn_mask``: True = blocked).
    Returns one row per case, ``{"mask": name, "max |output difference|": ..., "max |weight
    difference|": ...}`` (every head's weights compared, not their average), and the book's
    weights for each case.
    """
    rows: list[dict[str, str | float]] = []
    our_weights_by_case: dict[str, Tensor] = {}
    with torch.no_grad():
        for name, (our_mask, their_masks) in cases.items():
            our_output, our_weights = ours(x, x, x, mask=our_mask)
            their_output, their_weights = theirs(x, x, x, need_weights=True, average_attn_weights=False, **their_masks)
            assert their_weights is not None  # need_weights=True
            rows.append(
                {
                    "mask": name,
                    "max |output difference|": (our_output - their_output).abs().max().item(),
                    "max |weight difference|": (our_weights - their_weights).abs().max().item(),
                }
            )
            our_weights_by_case[name] = our_weights
    return rows, our_weights_by_case


def describe_entries(row: Tensor) -> str:
    """Say in words what a tensor of numbers holds: NaN everywhere, zeros everywhere, or neither."""
    if torch.isnan(row).all():
        return "NaN in every entry"
    if (row == 0).all():
        return "zeros in every entry"
    return "finite numbers"


def draw_partner_heatmaps(
    panels: Sequence[tuple[str, Any]],
    labels: Sequence[str],
    letter_partner: Sequence[int],
    colour_partner: Sequence[int],
    tick_inks: Sequence[str],
) -> Figure:
    """Draw attention-weight maps of one sequence side by side, one panel per ``(title, weights)``.

    Each weights matrix is (n, n), queries down the rows and keys across. In row i the cell of
    ``letter_partner[i]`` is marked L and that of ``colour_partner[i]`` C, in ink legible on the
    cell; ``labels`` name the n tokens on both axes, and the tick labels take ``tick_inks``.

    Raises:
        ValueError: if there are fewer than two panels, or a matrix or list does not have n entries.
    """
    n = len(labels)
    if len(panels) < 2:
        raise ValueError(f"draw_partner_heatmaps draws two panels or more, got {len(panels)}")
    for name, items in [("letter_partner", letter_partner), ("colour_partner", colour_partner)]:
        if len(items) != n:
            raise ValueError(f"{name} has {len(items)} entries for {n} labels")
    if len(tick_inks) != n:
        raise ValueError(f"tick_inks has {len(tick_inks)} entries for {n} labels")
    for title, weights in panels:
        if np.shape(weights) != (n, n):
            raise ValueError(f"panel {title!r}: weights must be ({n}, {n}), got shape {np.shape(weights)}")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(11, 4.3), sharey=True)
    for index, (ax, (title, weights)) in enumerate(zip(axes, panels)):
        plot_heatmap(
            ax,
            weights,
            row_labels=list(labels),
            col_labels=list(labels),
            colorbar_label="attention weight" if index == len(panels) - 1 else None,
        )
        for query in range(n):  # L on the letter partner, C on the colour partner
            for key, mark in [(letter_partner[query], "L"), (colour_partner[query], "C")]:
                ink = "black" if weights[query, key] > 0.5 else "white"
                ax.text(key, query, mark, ha="center", va="center", fontsize=9, fontweight="bold", color=ink)
        for label, ink in zip(ax.get_xticklabels(), tick_inks):
            label.set_color(ink)
        for label, ink in zip(ax.get_yticklabels(), tick_inks):
            label.set_color(ink)
        ax.tick_params(axis="x", labelrotation=90)
        ax.set_title(title)
        ax.set_xlabel("key (token attended to)")
    axes[0].set_ylabel("query (token attending)")
    return fig


# -- positional-encoding -------------------------------------------------------------------------

_PE_LABEL = "$\\mathrm{PE}_{(pos, j)}$ (unitless)"
_POSITION_LABEL = "position $pos$ (tokens)"


def _check_table(table: Tensor) -> None:
    if table.dim() != 2 or table.shape[1] % 2 != 0:
        raise ValueError(f"table must be (positions, d_model) with an even d_model, got shape {tuple(table.shape)}")


def draw_sinusoidal_table(table: Tensor) -> Figure:
    """Draw a sinusoidal encoding table (positions, d_model) as a heatmap from -1 to 1.

    Raises:
        ValueError: if table is not 2-D with an even number of columns.
    """
    _check_table(table)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    plot_heatmap(ax, table, vmin=-1.0, vmax=1.0, colorbar_label=_PE_LABEL)
    ax.set_xlabel("dimension $j$ (even: sine, odd: cosine)")
    ax.set_ylabel(_POSITION_LABEL)
    ax.set_title(f"Sinusoidal encoding, $d_\\mathrm{{model}} = {table.shape[1]}$")
    return fig


def draw_encoding_columns(table: Tensor, pairs: Sequence[int] = (0, 8, 16, 24)) -> Figure:
    """Draw the sine column 2i of ``table`` for each pair i in ``pairs``: the table's values as
    dots at integer positions, over the continuous sine they sample (wavelength
    2 pi 10000^(2i / d_model), in the legend).

    Raises:
        ValueError: if table is not 2-D with an even number of columns, or a pair is out of range.
    """
    _check_table(table)
    num_positions, d_model = table.shape
    bad = [pair for pair in pairs if not 0 <= pair < d_model // 2]
    if bad or not pairs:
        raise ValueError(f"pairs must be a non-empty list of pairs 0 to {d_model // 2 - 1}, got {list(pairs)}")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.2, 3.6))
    positions = np.arange(num_positions)
    continuous = np.linspace(0, num_positions - 1, 2000)  # the sine between integer positions, for the eye
    for pair in pairs:
        wavelength = 2 * math.pi * 10000 ** (2 * pair / d_model)  # the paper's base, 10000
        (line,) = ax.plot(continuous, np.sin(2 * np.pi * continuous / wavelength), linewidth=0.8, alpha=0.5)
        ax.plot(
            positions,
            table[:, 2 * pair],
            ".",
            markersize=4,
            color=line.get_color(),
            label=f"$j = {2 * pair}$ ($i = {pair}$), wavelength {wavelength:.1f}",
        )
    ax.set_xlabel(_POSITION_LABEL)
    ax.set_ylabel(_PE_LABEL)
    ax.set_title("A few columns of the table")
    ax.legend(loc="lower left", fontsize=8.5, ncols=2, markerscale=2)
    ax.set_ylim(-1.6, 1.15)
    return fig


def draw_rotation_circle(
    points: np.ndarray,
    block: np.ndarray,
    turn_positions: int,
    pair: int,
    offset: int,
    starts: Sequence[int] = (0, 5, 10),
) -> Figure:
    """Draw one (sin, cos) pair of the encoding on the unit circle, and a shift as a rotation.

    ``points`` holds the pair's (sin, cos) at positions 0, 1, ... (at least ``turn_positions``
    rows; the first ``turn_positions`` are drawn and numbered), ``block`` the pair's 2 x 2 block of
    M_offset. From each position in ``starts`` an arrow goes to ``block @ points[start]``.

    Raises:
        ValueError: if the shapes do not fit, or a start is not among the drawn positions.
    """
    if points.ndim != 2 or points.shape[1] != 2 or block.shape != (2, 2):
        raise ValueError(f"points must be (positions, 2) and block (2, 2), got {points.shape} and {block.shape}")
    if not 0 < turn_positions <= len(points) or any(not 0 <= start < turn_positions for start in starts):
        raise ValueError(
            f"turn_positions={turn_positions} must be at most the {len(points)} points given, "
            f"and every start in {list(starts)} among them"
        )
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.4, 5.2))
    angle = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.sin(angle), np.cos(angle), color="#bbbbbb", linewidth=1)
    ax.scatter(points[:turn_positions, 0], points[:turn_positions, 1], color="#0072B2", zorder=3)
    for pos in range(turn_positions):
        ax.annotate(str(pos), points[pos] * 1.12, ha="center", va="center", fontsize=8.5)
    for start in starts:
        rotated = block @ points[start]  # M_k applied to this pair, no position involved
        ax.annotate(
            "",
            xy=rotated * 0.97,
            xytext=points[start] * 0.97,
            arrowprops=dict(arrowstyle="->", color="#D55E00", linewidth=1.6, connectionstyle=f"arc3,rad={-0.25}"),
        )
    ax.plot([], [], color="#D55E00", label=f"$M_{offset}$: $pos \\to pos + {offset}$")
    ax.set_aspect("equal")
    ax.set_xlim(-1.3, 1.3)
    ax.set_ylim(-1.3, 1.3)
    ax.set_xlabel(f"$\\mathrm{{PE}}_{{(pos, {2 * pair})}} = \\sin(\\omega_{{{pair}}}\\, pos)$")
    ax.set_ylabel(f"$\\mathrm{{PE}}_{{(pos, {2 * pair + 1})}} = \\cos(\\omega_{{{pair}}}\\, pos)$")
    ax.set_title(f"Pair $i = {pair}$: a shift by ${offset}$ is a rotation")
    ax.legend(loc="lower right")
    return fig


def draw_similarity_by_distance(
    similarity: Tensor, dot_products: Tensor, sample: Tensor, d_model: int, near: int = 101
) -> Figure:
    """Draw PE_p . PE_q against the distance |p - q|: the curve ``similarity`` (one value per
    distance 0, 1, ...) and, as dots, the pairs (p, q) of ``sample`` (2, count) read from
    ``dot_products``. Left panel: the first ``near`` distances; right: all of them. A dotted line
    marks the maximum, d_model / 2.

    Raises:
        ValueError: if the shapes do not fit together.
    """
    count = len(similarity)
    if similarity.dim() != 1 or dot_products.shape != (count, count) or sample.dim() != 2 or sample.shape[0] != 2:
        raise ValueError(
            "similarity must be (positions,), dot_products (positions, positions) and sample (2, count), got "
            f"{tuple(similarity.shape)}, {tuple(dot_products.shape)} and {tuple(sample.shape)}"
        )
    if not 0 < near <= count:
        raise ValueError(f"near must be between 1 and {count}, got {near}")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9.5, 3.8), width_ratios=[1, 2], sharey=True)
    for ax, shown in zip(axes, [near, count]):
        ax.plot(
            range(shown), similarity[:shown], color="#0072B2", linewidth=1.2, label="$\\sum_i \\cos(\\omega_i |p - q|)$"
        )
        in_range = (sample[0] - sample[1]).abs() < shown
        ax.plot(
            (sample[0] - sample[1]).abs()[in_range],
            dot_products[sample[0], sample[1]][in_range],
            ".",
            markersize=3,
            color="#D55E00",
            label=f"{sample.shape[1]} random pairs $(p, q)$",
        )
        ax.axhline(d_model / 2, color="#555555", linestyle=":", label="$d_\\mathrm{model}/2$")
        ax.set_xlabel("distance $|p - q|$ (positions)")
    axes[0].set_ylabel("$\\mathrm{PE}_p \\cdot \\mathrm{PE}_q$ (unitless)")
    axes[0].set_ylim(0, d_model / 2 + 14)
    axes[0].set_title(f"Distances 0 to {near - 1}")
    axes[1].set_title(f"Distances 0 to {count - 1}")
    axes[1].legend(loc="center right")
    return fig


def draw_mean_attention_maps(maps: Mapping[str, Tensor]) -> Figure:
    """Draw mean attention maps side by side, one annotated heatmap per ``name: (n, n) matrix``,
    output positions down the rows and input positions across, with one shared colour bar.

    Raises:
        ValueError: if there are fewer than two maps, or a map is not square.
    """
    if len(maps) < 2:
        raise ValueError(f"draw_mean_attention_maps draws two maps or more, got {len(maps)}")
    for name, matrix in maps.items():
        if matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError(f"map {name!r} must be a square (n, n) matrix, got shape {tuple(matrix.shape)}")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(maps), figsize=(9.6, 4.4))
    for ax, (name, matrix) in zip(axes, maps.items()):
        labels = [str(position) for position in range(matrix.shape[0])]
        plot_heatmap(ax, matrix, row_labels=labels, col_labels=labels, annotate=True, fmt="{:.2f}")
        ax.set_title(name)
        ax.set_xlabel("input position $j$ (attended to)")
        ax.set_ylabel("output position $i$ (attending)")
    fig.colorbar(axes[0].images[0], ax=axes, shrink=0.9, label="mean attention weight")
    return fig
