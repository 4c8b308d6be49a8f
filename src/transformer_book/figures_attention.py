"""Figures and measuring tools of Parts I and II's first chapters: sequential-bottleneck,
attention-as-lookup, scaled-dot-product and self-attention.

Written by hand, not exported from a chapter. Each ``draw_*`` function draws one figure of a chapter
from data the chapter computed and passes in: it computes no result of its own and returns the
figure, for ``glue(name, figure, display=False)``. The measuring tools (``one_thread``,
``multiply_adds``, ``central_difference_gradient``; the timer is :func:`transformer_book.helpers.seconds_per_call`) and the table helpers are the
plumbing the chapters used to repeat in collapsed cells. Matplotlib is imported inside the
functions, so importing this module does not load it.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

from transformer_book.checks import integer
from transformer_book.runtime import LABEL_INK, PALETTE, diagram_arrow, diagram_box, number_cells, plot_heatmap

if TYPE_CHECKING:  # plotting is imported where it is used, not with the module
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _subplots(*args: Any, **kwargs: Any) -> tuple[Figure, Any]:
    """``plt.subplots``, with pyplot imported on first use."""
    import matplotlib.pyplot as plt

    return plt.subplots(*args, **kwargs)


def _positive_length(name: str, values: Sequence[Any] | Tensor | np.ndarray) -> int:
    """The number of entries of ``values``; a ValueError naming ``name`` if there are none."""
    length = len(values)
    if length == 0:
        raise ValueError(f"{name} is empty: a figure needs at least one entry")
    return length


def _same_length(names: str, *sequences: Sequence[Any] | Tensor | np.ndarray) -> int:
    """The common length of ``sequences``; a ValueError naming them if the lengths differ or are 0."""
    lengths = [len(sequence) for sequence in sequences]
    if len(set(lengths)) != 1 or lengths[0] == 0:
        raise ValueError(f"{names} must be non-empty and of the same length, got lengths {lengths}")
    return lengths[0]


# ---------------------------------------------------------------------------------------------
# sequential-bottleneck


def draw_layer_graphs(n: int) -> Figure:
    """Who depends on whom in a recurrent layer and in a self-attention layer of ``n`` positions.

    Inputs on the bottom row, outputs on the top row, one arrow per direct dependency. The route
    from the first input to the last output is drawn in orange: ``n`` arrows through the
    recurrence, one through self-attention.
    """
    n = integer(n, "n", minimum=2)  # a route needs two positions
    fig, axes = _subplots(1, 2, figsize=(9.0, 2.9))
    grey, route = "#9a9a9a", "#D55E00"

    def arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], colour: str, width: float) -> None:
        ax.annotate(
            "",
            xy=end,
            xytext=start,
            arrowprops={
                "arrowstyle": "-|>",
                "color": colour,
                "lw": width,
                "shrinkA": 11,
                "shrinkB": 11,
                "mutation_scale": 9,
            },
        )

    def nodes(ax: Axes, y: float, letter: str, colour: str) -> None:
        for position in range(n):
            ax.scatter(position, y, s=520, color="white", edgecolor=colour, linewidth=1.6, zorder=3)
            ax.text(position, y, f"${letter}_{position + 1}$", ha="center", va="center", fontsize=10, zorder=4)

    ax_rnn, ax_att = axes
    for position in range(n):
        arrow(ax_rnn, (position, 0), (position, 1), route if position == 0 else grey, 1.6 if position == 0 else 1.0)
        if position > 0:
            arrow(ax_rnn, (position - 1, 1), (position, 1), route, 1.6)
    nodes(ax_rnn, 0, "x", "#555555")
    nodes(ax_rnn, 1, "h", "#0072B2")
    ax_rnn.set_title(f"recurrent layer: $x_1$ enters $h_1$, then {n - 1} steps to $h_{n}$")

    for source, target in itertools.product(range(n), range(n)):
        if (source, target) != (0, n - 1):
            arrow(ax_att, (source, 0), (target, 1), grey, 0.6)
    arrow(ax_att, (0, 0), (n - 1, 1), route, 1.8)
    nodes(ax_att, 0, "x", "#555555")
    nodes(ax_att, 1, "y", "#009E73")
    ax_att.set_title(f"self-attention layer: 1 step from $x_1$ to $y_{n}$")

    for ax in axes:
        ax.set_xlim(-0.6, n - 0.4)
        ax.set_ylim(-0.45, 1.45)
        ax.set_axis_off()
    return fig


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run PyTorch on one CPU thread: for thousands of tiny operations in a row, a second thread
    adds only the cost of keeping the two in step (the sequential bottleneck once more)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class MultiplyAddCounter(TorchFunctionMode):
    """Adds up the multiply-adds of every 2-D (m x k) @ (k x p) product run inside it: m * k * p each."""

    def __init__(self) -> None:
        super().__init__()
        self.multiply_adds = 0

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        if getattr(func, "__name__", "") in {"matmul", "__matmul__"}:
            left, right = args
            if left.dim() != 2 or right.dim() != 2:
                raise ValueError(
                    f"MultiplyAddCounter counts 2-D products only, got shapes {tuple(left.shape)} "
                    f"and {tuple(right.shape)}"
                )
            self.multiply_adds += left.shape[0] * left.shape[1] * right.shape[1]
        return func(*args, **(kwargs or {}))


def multiply_adds(layer: Callable[..., Tensor], *args: Tensor) -> int:
    """Multiply-adds of the (2-D) matrix products in one call ``layer(*args)``."""
    counter = MultiplyAddCounter()
    with counter:
        layer(*args)
    return counter.multiply_adds


def draw_work_and_time(
    sizes: Sequence[int],
    rnn_work: Sequence[float],
    attention_work: Sequence[float],
    rnn_ms: Sequence[float],
    attention_ms: Sequence[float],
    *,
    d: int,
    crossover: float | None,
    device_name: str,
) -> Figure:
    """Two log-log panels against the sequence length: multiply-adds counted (left) and median
    times measured on ``device_name`` (right) of the recurrent and the self-attention layer.

    A dashed fan of slopes n and n² sits in the right panel's upper left, a dotted line marks
    n = ``d`` in both, and a green line the measured ``crossover`` of the times (None: none).
    """
    _same_length(
        "sizes, rnn_work, attention_work, rnn_ms and attention_ms",
        sizes,
        rnn_work,
        attention_work,
        rnn_ms,
        attention_ms,
    )
    fig, (ax_work, ax_time) = _subplots(1, 2, figsize=(9.6, 3.9))
    sizes_array = np.array(sizes)
    ax_work.plot(sizes_array, rnn_work, "o-", label="recurrent, $2nd^2$")
    ax_work.plot(sizes_array, attention_work, "s-", label="self-attention, $2n^2d$")
    ax_work.set_ylabel("multiply-adds per call")
    ax_work.set_title(f"Work, counted (d = {d})")

    ax_time.plot(sizes_array, rnn_ms, "o-", label="recurrent (Python loop)")
    ax_time.plot(sizes_array, attention_ms, "s-", label="self-attention")
    # Reference slopes as a fan in the empty upper left: what n and n^2 growth look like here.
    fan = sizes_array[sizes_array <= 4 * sizes_array[0]]
    fan_start = max(np.max(np.asarray(rnn_ms)), np.max(np.asarray(attention_ms))) / 16  # the n^2 line ends level
    for exponent, label in [(1, "$\\propto n$"), (2, "$\\propto n^2$")]:  # with the slowest call
        reference = fan_start * (fan / fan[0]) ** exponent
        ax_time.plot(fan, reference, "--", color="#555555", linewidth=0.8)
        ax_time.text(fan[-1] * 1.1, reference[-1], label, va="center", fontsize=9.5, color="#555555")
    if crossover is not None:
        ax_time.axvline(crossover, color="#009E73", linewidth=1.0, label="measured crossover")
    ax_time.set_ylabel("median time per call (ms)")
    ax_time.set_title(f"Time, measured on {device_name}")

    for ax in (ax_work, ax_time):
        ax.set_xscale("log", base=2)
        ax.set_xticks(list(sizes)[::2], labels=[str(n) for n in list(sizes)[::2]])
        ax.set_yscale("log")
        ax.axvline(d, color="#777777", linestyle=":", linewidth=1.2)
        ax.text(d * 1.08, ax.get_ylim()[1], "n = d", va="top", fontsize=9, color="#555555")
        ax.set_xlabel("sequence length n (tokens)")
        ax.legend(loc="lower right", fontsize=9)
    return fig


def draw_path_lengths(sizes: Sequence[int], path_lengths: Mapping[str, Sequence[int]]) -> Figure:
    """Measured maximum path length against the sequence length, log-log, one line per layer type.

    ``path_lengths`` maps each layer's name, in the order recurrent, contiguous convolution,
    dilated convolution, self-attention, to its path length at each of ``sizes``.
    """
    markers = ["o", "^", "D", "s"]
    if len(path_lengths) != len(markers):
        raise ValueError(f"draw_path_lengths needs {len(markers)} layer types, got {list(path_lengths)}")
    _same_length("sizes and every path length", sizes, *path_lengths.values())
    fig, ax = _subplots(figsize=(6.4, 3.9))
    for (column, lengths), marker in zip(path_lengths.items(), markers):
        ax.plot(sizes, lengths, marker=marker, label=column)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(list(sizes)[::2], labels=[str(n) for n in list(sizes)[::2]])
    ticks = [4**power for power in range(7) if 4**power <= sizes[-1]]
    ax.set_yticks(ticks, labels=[str(tick) for tick in ticks])
    ax.set_xlabel("sequence length n (tokens)")
    ax.set_ylabel("maximum path length (steps or layers)")
    ax.set_title("Steps from the first position to the last")
    ax.legend(fontsize=9)
    return fig


#: The rows of the paper's Table 1, in its order.
TABLE_1_LAYERS = ["Self-Attention", "Recurrent", "Convolutional", "Self-Attention (restricted)"]


def table_1_columns(
    *,
    exponents: tuple[float, float],
    steps: tuple[int, int, int],
    paths: tuple[int, int, int, int],
    kernel: int,
    n_max: int,
) -> dict[str, list[str]]:
    """The columns of the paper's Table 1 (rows :data:`TABLE_1_LAYERS`) beside measured ones.

    ``exponents``: fitted time exponents of self-attention and the recurrent layer; ``steps``:
    sequential steps at ``n_max`` of self-attention, the recurrent layer and one convolution;
    ``paths``: path lengths at ``n_max`` of self-attention, the recurrent layer, the dilated and
    the contiguous convolution stacks of kernel ``kernel``. The restricted layer is not built.
    """
    attention_exponent, rnn_exponent = exponents
    attention_path, rnn_path, dilated_path, contiguous_path = paths
    return {
        "complexity per layer": ["O(n²·d)", "O(n·d²)", "O(k·n·d²)", "O(r·n·d)"],
        "sequential operations": ["O(1)", "O(n)", "O(1)", "O(1)"],
        "maximum path length": ["O(1)", "O(n)", "O(log_k(n))", "O(n/r)"],
        "time exponent, measured": [f"{attention_exponent:.2f}", f"{rnn_exponent:.2f}", "not timed", "not built"],
        f"sequential steps at n = {n_max}, measured": [*(str(step) for step in steps), "not built"],
        f"path length at n = {n_max}, measured": [
            str(attention_path),
            str(rnn_path),
            f"{dilated_path} dilated, {contiguous_path} contiguous (k = {kernel})",
            "not built",
        ],
    }


# ---------------------------------------------------------------------------------------------
# attention-as-lookup


def lookup_table_columns(
    keys: Tensor,
    values: Tensor,
    scores: Tensor,
    weights: Tensor,
    *,
    key_names: Sequence[str],
    value_names: Sequence[str],
) -> dict[str, list[Any]]:
    """The columns of a worked soft lookup, one row per entry: its key and value (whole numbers,
    headed by ``key_names`` and ``value_names``), its score q·k and its weight to 3 decimals."""
    entries = _same_length("keys, values, scores and weights", keys, values, scores, weights)
    if keys.dim() != 2 or values.dim() != 2 or keys.shape[1] != len(key_names) or values.shape[1] != len(value_names):
        raise ValueError(
            f"lookup_table_columns needs keys ({entries}, {len(key_names)}) and values ({entries}, "
            f"{len(value_names)}), got {tuple(keys.shape)} and {tuple(values.shape)}"
        )
    return {
        f"key ({', '.join(key_names)})": [str(tuple(int(x) for x in key.tolist())) for key in keys],
        f"value ({', '.join(value_names)})": [str(tuple(int(x) for x in value.tolist())) for value in values],
        "score q·k": scores.cpu().tolist(),
        "weight": weights.cpu().round(decimals=3).tolist(),
    }


def draw_lookup_flow(
    names: Sequence[str],
    query: Tensor,
    query_name: str,
    keys: Tensor,
    scores: Tensor,
    weights: Tensor,
    values: Tensor,
    weighted_values: Tensor,
    output: Tensor,
) -> Figure:
    """One soft lookup as a flow, one row per entry: its key, the score q·k, the softmax weight
    drawn as a bar in a frame of length 1, times its value, and the weighted value; under the
    last column the weighted values add up to the ``output``. The ``query`` (called
    ``query_name``) stands above the keys. Keys of 3 numbers and values of 2 fit the layout.
    """
    from matplotlib.patches import Rectangle

    rows = _same_length(
        "names, keys, scores, weights, values and weighted_values",
        names,
        keys,
        scores,
        weights,
        values,
        weighted_values,
    )
    colours = {"key": PALETTE[0], "value": PALETTE[2], "weight": PALETTE[1]}
    fig, ax = _subplots(figsize=(9.5, 5.6))
    key_x, score_x, weight_x, value_x, product_x = 1.6, 6.0, 8.4, 12.4, 16.2  # left edges of the columns
    bar_length = 2.0  # a weight of 1, drawn as a bar
    rows_y = [4.6 - 1.3 * index for index in range(rows)]
    header_y = rows_y[0] + 1.1

    # the query, above the keys it is compared with
    query_y = header_y + 1.4
    ax.text(key_x - 0.3, query_y, "query q", ha="right", va="center", fontsize=10, fontweight="bold")
    number_cells(ax, query, key_x, query_y + 0.5, colours["key"])
    ax.text(key_x + 3.3, query_y, query_name, ha="left", va="center", fontsize=10, style="italic")
    column_titles = [
        (key_x + 1.5, "key $k_j$\n(fur, swims, flies)"),
        (score_x + 0.7, "score\n$q \\cdot k_j$"),
        (weight_x + 1.2, "weight $a_j$\n(softmax of the scores)"),
        (value_x + 1.0, "value $v_j$\n(legs, years)"),
        (product_x + 1.2, "$a_j v_j$"),
    ]
    for x, text in column_titles:
        ax.text(x, header_y, text, ha="center", va="center", fontsize=10)

    for name, y, key, score, weight, value, product in zip(
        names, rows_y, keys.tolist(), scores.tolist(), weights.tolist(), values.tolist(), weighted_values.tolist()
    ):
        ax.text(key_x - 0.3, y, name, ha="right", va="center", fontsize=10)
        number_cells(ax, key, key_x, y + 0.5, colours["key"])
        diagram_arrow(ax, (key_x + 3.15, y), (score_x - 0.15, y), lw=1.1)
        number_cells(ax, [score], score_x, y + 0.5, "#BBBBBB", width=1.4)
        diagram_arrow(ax, (score_x + 1.55, y), (weight_x - 0.15, y), lw=1.1)
        ax.add_patch(Rectangle((weight_x, y - 0.3), bar_length * weight, 0.6, facecolor=colours["weight"], alpha=0.8))
        ax.add_patch(Rectangle((weight_x, y - 0.3), bar_length, 0.6, fill=False, edgecolor="#BBBBBB", lw=0.8))
        ax.text(weight_x + bar_length + 0.1, y, f"{weight:.3f}", ha="left", va="center", fontsize=10)
        ax.text(value_x - 0.45, y, "×", ha="center", va="center", fontsize=12)
        number_cells(ax, value, value_x, y + 0.5, colours["value"])
        diagram_arrow(ax, (value_x + 2.15, y), (product_x - 0.15, y), lw=1.1)
        number_cells(ax, product, product_x, y + 0.5, colours["value"], fmt="{:.2f}", width=1.2)
    ax.text(
        key_x + 1.5,
        query_y - 0.75,
        "q is compared with every key: one dot product per row",
        ha="left",
        va="center",
        fontsize=9,
        color="#555555",
    )

    # the weighted values add up to the output
    sum_y = rows_y[-1] - 1.0
    ax.plot([product_x, product_x + 2.4], [sum_y + 0.35, sum_y + 0.35], color="#333333", lw=1.2)
    ax.text(product_x - 0.2, sum_y - 0.35, "Σ =", ha="right", va="center", fontsize=11)
    number_cells(ax, output, product_x, sum_y + 0.15, colours["value"], fmt="{:.2f}", width=1.2)
    ax.add_patch(Rectangle((product_x, sum_y - 0.85), 2.4, 1, fill=False, edgecolor="#333333", lw=1.4))
    ax.text(
        product_x + 1.2, sum_y - 1.15, "output (legs, years)", ha="center", va="top", fontsize=10, fontweight="bold"
    )
    ax.text(
        weight_x + 1.2,
        sum_y - 0.35,
        f"the weights sum to {weights.sum().item():.3f}",
        ha="center",
        va="center",
        fontsize=9,
        color="#555555",
    )

    ax.set_xlim(-0.3, product_x + 2.6)
    ax.set_ylim(sum_y - 1.8, query_y + 0.7)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def draw_hard_and_soft_weights(
    hard_weights: Tensor, soft_weights: Tensor, *, query_names: Sequence[str], key_names: Sequence[str]
) -> Figure:
    """Two annotated heatmaps side by side, one row per query and one column per key: the weights
    of the hard lookup (argmax) and of the soft one (softmax)."""
    if hard_weights.shape != soft_weights.shape or hard_weights.shape != (len(query_names), len(key_names)):
        raise ValueError(
            f"the weights must both have shape (queries, keys) = ({len(query_names)}, {len(key_names)}), got "
            f"{tuple(hard_weights.shape)} and {tuple(soft_weights.shape)}"
        )
    fig, (ax_hard, ax_soft) = _subplots(1, 2, figsize=(9.4, 3.4), sharey=True)
    plot_heatmap(ax_hard, hard_weights, row_labels=list(query_names), col_labels=list(key_names), annotate=True)
    plot_heatmap(ax_soft, soft_weights, col_labels=list(key_names), annotate=True, colorbar_label="attention weight")
    ax_hard.set_title("hard lookup (argmax)")
    ax_soft.set_title("soft lookup (softmax)")
    ax_hard.set_ylabel("query")
    for ax in (ax_hard, ax_soft):
        ax.set_xlabel("key")
    return fig


def draw_temperature_path(betas: Tensor, weights: Tensor, entropies: Tensor, *, key_names: Sequence[str]) -> Figure:
    """The weights of one query (left, one line per key) and their entropy in bits (right) as its
    scores are multiplied by each of ``betas``; a dotted line marks β = 1, the unscaled lookup,
    and a dashed one the entropy of uniform weights."""
    steps = _same_length("betas, weights and entropies", betas, weights, entropies)
    if weights.shape != (steps, len(key_names)):
        raise ValueError(
            f"weights must have shape (betas, keys) = ({steps}, {len(key_names)}), got {tuple(weights.shape)}"
        )
    fig, (ax_weights, ax_entropy) = _subplots(1, 2, figsize=(9.4, 3.4))
    for index, name in enumerate(key_names):
        ax_weights.plot(betas.cpu(), weights[:, index].cpu(), label=name)
    ax_weights.axvline(1.0, color="#777777", linestyle=":", linewidth=1.2)
    ax_weights.text(1.08, 0.45, "β = 1\n(the table)", color="#555555", fontsize=9)
    ax_weights.set(xlabel="score scale β (dimensionless)", ylabel="attention weight", title="weights")
    ax_weights.legend(title="key", loc="center right")
    uniform = math.log2(len(key_names))
    ax_entropy.plot(betas.cpu(), entropies.cpu(), color="black")
    ax_entropy.axhline(uniform, color="#777777", linestyle="--", linewidth=1.2)
    ax_entropy.text(betas.max().item(), uniform - 0.05, "uniform", ha="right", va="top", color="#555555")
    ax_entropy.set(
        xlabel="score scale β (dimensionless)",
        ylabel="entropy of the weights (bits)",
        title="uncertainty",
        ylim=(0, uniform + 0.15),
    )
    return fig


def central_difference_gradient(loss: Callable[[Tensor], Tensor], point: Tensor, step: float = 1e-2) -> Tensor:
    """The gradient of ``loss`` at ``point`` (a vector) by central differences, one coordinate at a
    time: (loss(point + step e_i) - loss(point - step e_i)) / (2 step). No autograd involved."""
    if point.dim() != 1:
        raise ValueError(f"central_difference_gradient needs a vector, got shape {tuple(point.shape)}")
    if not step > 0:
        raise ValueError(f"central_difference_gradient: step must be positive, got {step}")
    gradient = torch.zeros_like(point)
    for index in range(point.numel()):
        nudge = torch.zeros_like(point)
        nudge[index] = step
        gradient[index] = (loss(point + nudge) - loss(point - nudge)) / (2 * step)
    return gradient


# ---------------------------------------------------------------------------------------------
# scaled-dot-product


def draw_dot_product_variance(
    dims: Sequence[int], variance: Sequence[float], scaled_variance: Sequence[float]
) -> Figure:
    """The measured variance of q·k (circles) and of q·k/√d_k (squares) against d_k, log-log,
    beside the theory: d_k (dashed) and 1 (dotted)."""
    _same_length("dims, variance and scaled_variance", dims, variance, scaled_variance)
    fig, ax = _subplots(figsize=(6.0, 3.9))
    ax.loglog(dims, dims, color="#555555", linestyle="--", label="theory: $d_k$")
    ax.loglog(dims, variance, "o", label=r"measured $\mathrm{Var}(q \cdot k)$")
    ax.loglog(dims, [1.0] * len(dims), color="#555555", linestyle=":", label="theory: 1")
    ax.loglog(dims, scaled_variance, "s", label=r"measured $\mathrm{Var}(q \cdot k / \sqrt{d_k})$")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("$d_k$ (components of each query and key)")
    ax.set_ylabel("variance of the score (unitless)")
    ax.set_title("Dot products grow with $d_k$; scaled ones do not")
    ax.legend()
    return fig


#: Where the saturation figure follows the gradient, in the order of its panels.
GRADIENT_PLACES = ["scores", "queries", "keys"]


def draw_softmax_saturation(dims: Sequence[int], curves: Mapping[str, Any], *, num_keys: int) -> Figure:
    """Softmax saturation against d_k, with and without the factor 1/√d_k: the mean largest
    weight (top left), and the median gradient norm at the scores, the queries and the keys,
    each with a band between the quartiles.

    ``curves["scaled"]`` and ``curves["unscaled"]`` each map "largest weight" and, for each
    place of :data:`GRADIENT_PLACES`, "<place> q25", "<place> median" and "<place> q75" to one
    number per d_k (a DataFrame with these columns will do).
    """
    if set(curves) != {"scaled", "unscaled"}:
        raise ValueError(f"curves needs exactly the keys 'scaled' and 'unscaled', got {sorted(curves)}")
    columns = ["largest weight"] + [f"{place} {stat}" for place in GRADIENT_PLACES for stat in ("q25", "median", "q75")]
    for scaling, curve in curves.items():
        _same_length(f"dims and every column of curves[{scaling!r}]", dims, *(curve[column] for column in columns))
    fig, axes = _subplots(2, 2, figsize=(9.5, 7.4))
    ax_weight, gradient_axes = axes[0, 0], {"scores": axes[0, 1], "queries": axes[1, 0], "keys": axes[1, 1]}
    for scaling, marker in [("scaled", "s"), ("unscaled", "o")]:
        curve = curves[scaling]
        label = r"$QK^\top/\sqrt{d_k}$" if scaling == "scaled" else r"$QK^\top$ (no scaling)"
        ax_weight.plot(dims, curve["largest weight"], marker=marker, label=label)
        for place, ax in gradient_axes.items():
            ax.plot(dims, curve[f"{place} median"], marker=marker, label=label)
            ax.fill_between(dims, curve[f"{place} q25"], curve[f"{place} q75"], alpha=0.2)
    ax_weight.axhline(1.0, color="#555555", linestyle=":", label="one-hot")
    ax_weight.axhline(1 / num_keys, color="#555555", linestyle="--", label=f"uniform over {num_keys} keys")
    ax_weight.set_ylim(0, 1.05)
    ax_weight.set_ylabel("mean largest weight (unitless)")
    ax_weight.set_title("Without scaling, attention turns one-hot")
    ax_weight.legend(loc="center left", fontsize=9)
    for place, ax in gradient_axes.items():
        ax.set_yscale("log")
        ax.set_ylabel("gradient norm (unitless)")
        ax.set_title(f"gradient at the {place}")
    gradient_axes["scores"].legend(loc="lower left", fontsize=9)
    for ax in axes.flat:
        ax.set_xscale("log", base=2)
        ax.set_xlabel("$d_k$ (components of each query and key)")
    return fig


#: The steps of scaled dot-product attention, bottom to top: (the paper's step, the book's code
#: for it in ``scaled_dot_product_attention``, fill, shape after the step).
ATTENTION_FLOW_STEPS = [
    ("MatMul: Q Kᵀ", "query @ key.transpose(-2, -1)", "#F5D9A8", "(n, m) scores"),
    ("Scale: 1/√d_k", "/ math.sqrt(query.shape[-1])", "#F5D9A8", "(n, m)"),
    ("Mask (optional)", 'masked_fill(~mask, float("-inf"))', "#F2C9DF", "(n, m)"),
    ("SoftMax", "torch.softmax(scores, dim=-1)", "#FFF5B0", "(n, m) weights"),
    ("MatMul", "weights @ value", "#C8E6D6", "(n, d_v) output"),
]


def draw_attention_flow() -> Figure:
    """Scaled dot-product attention as a flow from bottom to top, after the paper's Figure 2
    (left): one box per step of :data:`ATTENTION_FLOW_STEPS` with the book's code in it, the
    shapes beside the arrows, and notes on the mask and the rows that sum to 1."""
    flow_width, flow_height = 3.6, 0.62
    flow_x, value_x = 5.0, 8.7  # the main column, and the path of the values on the right
    step_y = [1.35 + 1.05 * index for index in range(len(ATTENTION_FLOW_STEPS))]

    fig, ax = _subplots(figsize=(9.5, 6.0))
    # the inputs: queries and keys meet in the first MatMul, values wait on the right for the last one
    input_y = 0.1
    inputs = [
        (flow_x - 0.9, "Q = query", "(n, d_k)"),
        (flow_x + 0.9, "K = key", "(m, d_k)"),
        (value_x, "V = value", "(m, d_v)"),
    ]
    for x, name, shape in inputs:
        ax.text(x, input_y, name, ha="center", va="center", fontsize=10, fontweight="bold")
        ax.text(x, input_y - 0.3, shape, ha="center", va="center", fontsize=9, family="monospace", color=LABEL_INK)
    for x, _, _ in inputs[:2]:
        diagram_arrow(ax, (x, input_y + 0.2), (x, step_y[0] - flow_height / 2))
    ax.plot([value_x, value_x], [input_y + 0.2, step_y[-1]], color="#333333", lw=1.2, zorder=1)
    diagram_arrow(ax, (value_x, step_y[-1]), (flow_x + flow_width / 2, step_y[-1]))

    for index, ((title, code, fill, shape), y) in enumerate(zip(ATTENTION_FLOW_STEPS, step_y)):
        diagram_box(ax, (flow_x, y), (flow_width, flow_height), title, code, fill, dashed=title.startswith("Mask"))
        top = y + flow_height / 2
        end = step_y[index + 1] - flow_height / 2 if index + 1 < len(ATTENTION_FLOW_STEPS) else top + 0.45
        diagram_arrow(ax, (flow_x, top), (flow_x, end), shape)
    ax.text(
        flow_x,
        step_y[-1] + flow_height / 2 + 0.62,
        "returns (output, weights)",
        ha="center",
        va="center",
        fontsize=10,
        style="italic",
    )

    # notes on the left: what the mask means, and what happens to a row with nothing to attend to
    notes = [
        (
            step_y[2],
            "dashed: only with a mask\nTrue = may attend;\na row that may attend to\nnothing gets zero weights",
        ),
        (step_y[3], "each row sums to 1"),
        (step_y[0], "one score per query-key pair"),
        (input_y - 0.15, "leading (batch, head) dimensions\nride along: (..., n, d_k) and so on"),
    ]
    for y, note in notes:
        ax.text(flow_x - flow_width / 2 - 0.25, y, note, ha="right", va="center", fontsize=9, color=LABEL_INK)

    ax.set_xlim(0, 10.4)
    ax.set_ylim(-0.45, step_y[-1] + 1.0)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def draw_masks_and_weights(
    masks: Mapping[str, Tensor], weights: Mapping[str, Tensor], tokens: Sequence[str], *, sentence: int
) -> Figure:
    """For one ``sentence`` of a batch: each mask (top row, 1 = may attend) above the attention
    weights it produces (bottom row), as annotated heatmaps over ``tokens``.

    ``weights[name]`` has shape (batch, n, n); ``masks[name]`` broadcasts to it.
    """
    if list(masks) != list(weights):
        raise ValueError(f"masks and weights must name the same masks, got {list(masks)} and {list(weights)}")
    _positive_length("masks", list(masks))
    length = len(tokens)
    fig, axes = _subplots(2, len(masks), figsize=(10.5, 6.6), squeeze=False)
    for column, (name, mask) in enumerate(masks.items()):
        batch = weights[name].shape[0]
        if weights[name].shape != (batch, length, length) or not 0 <= sentence < batch:
            raise ValueError(
                f"weights[{name!r}] must have shape (batch, {length}, {length}) with sentence {sentence} in the batch, "
                f"got {tuple(weights[name].shape)}"
            )
        sentence_mask = mask.expand(batch, length, length)[sentence]
        plot_heatmap(
            axes[0, column],
            sentence_mask.float(),
            row_labels=list(tokens),
            col_labels=list(tokens),
            annotate=True,
            fmt="{:.0f}",
        )
        plot_heatmap(
            axes[1, column], weights[name][sentence], row_labels=list(tokens), col_labels=list(tokens), annotate=True
        )
        axes[0, column].set_title(name)
        axes[1, column].set_title("attention weights")
        for ax in axes[:, column]:
            ax.set_xlabel("key")
            ax.tick_params(axis="x", labelrotation=45)
        axes[0, column].set_ylabel("query")
        axes[1, column].set_ylabel("query")
    mask_bar = fig.colorbar(axes[0, 0].images[0], ax=axes[0, :], ticks=[0, 1], shrink=0.8)
    mask_bar.ax.set_yticklabels(["blocked\n(False)", "may attend\n(True)"])
    fig.colorbar(axes[1, 0].images[0], ax=axes[1, :], shrink=0.8, label="attention weight")
    return fig


def describe_row(row: Tensor) -> str:
    """Say in words what a row of numbers holds: NaN everywhere, zeros everywhere, or its values."""
    if torch.isnan(row).all():
        return "NaN in every entry"
    if (row == 0).all():
        return "zeros in every entry"
    return "the values " + np.array2string(row.cpu().numpy(), precision=3)


def agreement_rows(
    pairs: Mapping[str, tuple[Tensor, Tensor]], *, case: str = "mask", column: str = "max |ours - PyTorch|"
) -> list[dict[str, Any]]:
    """One row per case of an agreement table: the case's name under ``case``, and the largest
    absolute difference between its two results (ours, the reference's) under ``column``."""
    rows = []
    for name, (ours, theirs) in pairs.items():
        if ours.shape != theirs.shape:
            raise ValueError(f"{name}: ours has shape {tuple(ours.shape)}, the reference {tuple(theirs.shape)}")
        rows.append({case: name, column: (ours - theirs).abs().max().item()})
    return rows


# ---------------------------------------------------------------------------------------------
# self-attention


def draw_projection_example(x: Tensor, matrices: Mapping[str, Tensor], projections: Mapping[str, Tensor]) -> Figure:
    """One token's query, key and value: the token ``x`` (a vector of d_model numbers) on top,
    an arrow to each of ``matrices["Q"]``, ``["K"]`` and ``["V"]`` (d_model x d_k, d_k, d_v), and
    under each matrix the product ``projections[name]``, entry j under column j. Small whole
    numbers fit the cells."""
    if set(matrices) != {"Q", "K", "V"} or set(projections) != {"Q", "K", "V"}:
        raise ValueError(
            f"matrices and projections need the keys Q, K and V, got {list(matrices)}, {list(projections)}"
        )
    d_model = _positive_length("x", x)
    for name, matrix in matrices.items():
        if matrix.dim() != 2 or matrix.shape[0] != d_model or projections[name].shape != (matrix.shape[1],):
            raise ValueError(
                f"W^{name} must be ({d_model}, width) and its product (width,), got {tuple(matrix.shape)} and "
                f"{tuple(projections[name].shape)}"
            )
    d_k, d_v = matrices["Q"].shape[1], matrices["V"].shape[1]
    colours = {"x": "#AAAAAA", "Q": PALETTE[0], "K": PALETTE[1], "V": PALETTE[2]}

    fig, ax = _subplots(figsize=(9.5, 5.6))
    first_left, gap = 5.5, 2.6  # where W^Q starts, and the room between two matrices
    matrix_top = 6.6
    row_top = matrix_top - d_model - 1.1  # the results q_i, k_i, v_i
    lefts = {"Q": first_left, "K": first_left + d_k + gap, "V": first_left + 2 * (d_k + gap)}
    # the token, once, at the top: it goes into all three products
    x_left, x_top = lefts["K"] + d_k / 2 - d_model / 2, matrix_top + 3.4
    number_cells(ax, x, x_left, x_top, colours["x"], alpha=0.4)
    ax.text(x_left - 0.3, x_top - 0.5, "token $x_i$", ha="right", va="center", fontsize=11)
    ax.text(
        x_left + d_model + 0.3,
        x_top - 0.5,
        f"1 × d_model = 1 × {d_model}",
        ha="left",
        va="center",
        fontsize=9,
        color="#555555",
    )
    for name, left in lefts.items():
        matrix, projection = matrices[name], projections[name]
        width, inner, letter = matrix.shape[1], "d_k" if name != "V" else "d_v", name.lower()
        centre = left + width / 2
        diagram_arrow(ax, (x_left + d_model / 2, x_top - 1.1), (centre, matrix_top + 1.35))
        number_cells(ax, matrix, left, matrix_top, colours[name], alpha=0.4)
        ax.text(centre, matrix_top + 0.7, f"$W^{name}$", ha="center", va="bottom", fontsize=12)
        ax.text(
            centre,
            matrix_top + 0.12,
            f"d_model × {inner} = {d_model} × {width}",
            ha="center",
            va="bottom",
            fontsize=9,
            color="#555555",
        )
        # entry j of x_i W is the dot product of x_i with column j of W: drawn under that column
        diagram_arrow(ax, (centre, matrix_top - d_model - 0.1), (centre, row_top + 0.1))
        number_cells(ax, projection, left, row_top, colours[name], alpha=0.4)
        ax.text(centre, row_top - 1.15, f"${letter}_i = x_i W^{name}$, 1 × {inner}", ha="center", va="top", fontsize=10)
    ax.text(
        0.0,
        matrix_top - d_model / 2,
        "Every token $x_1, \\dots, x_n$\nis multiplied by the same\n"
        "three matrices: only $x_i$\nchanges from token to token,\nand so do $q_i$, $k_i$, $v_i$.",
        ha="left",
        va="center",
        fontsize=10,
    )

    ax.set_xlim(-0.2, lefts["V"] + d_v + 0.3)
    ax.set_ylim(row_top - 1.8, x_top + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def outline_cells(ax: Axes, rows: Sequence[int], columns: Sequence[int], color: str = "white") -> None:
    """Draw a square around the cells (rows[k], columns[k]) of a heatmap."""
    from matplotlib.patches import Rectangle

    _same_length("rows and columns", rows, columns)
    for row, column in zip(rows, columns):
        ax.add_patch(Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, edgecolor=color, linewidth=2.2))


def draw_tied_scores(scores: Mapping[str, Tensor]) -> Figure:
    """The scores q_i·k_j/√d_k of the same tokens with separate projections (``scores["separate"]``)
    and with tied ones (``scores["tied"]``), as annotated heatmaps with each row's largest score
    outlined in white."""
    titles = {"separate": "separate, $W^Q \\neq W^K$", "tied": "tied, $W^Q = W^K$"}
    if set(scores) < set(titles) or scores["separate"].shape != scores["tied"].shape or scores["tied"].dim() != 2:
        raise ValueError("scores needs two square matrices of the same shape, 'separate' and 'tied'")
    n = scores["tied"].shape[0]
    token_labels = [f"$x_{i + 1}$" for i in range(n)]
    fig, axes = _subplots(1, 2, figsize=(9.4, 3.9))
    for ax, (name, title) in zip(axes, titles.items()):
        example = scores[name]
        plot_heatmap(
            ax,
            example,
            row_labels=token_labels,
            col_labels=token_labels,
            annotate=True,
            fmt="{:.1f}",
            vmin=None,
            vmax=None,
            colorbar_label="score $q_i \\cdot k_j / \\sqrt{d_k}$",
        )
        outline_cells(ax, range(n), example.argmax(-1).tolist())
        ax.set_title(title)
        ax.set_xlabel("key $j$")
        ax.set_ylabel("query $i$")
    return fig


def draw_sentence_weights(sentences: Sequence[Sequence[str]], weights: Tensor) -> Figure:
    """The attention weights of each sentence (one row of ``weights`` per sentence, each n x n),
    as annotated heatmaps side by side, titled with the sentence."""
    count = _positive_length("sentences", sentences)
    if weights.dim() != 3 or weights.shape[0] != count or any(weights.shape[1:] != (len(s), len(s)) for s in sentences):
        raise ValueError(
            f"weights must have shape ({count}, n, n) for sentences of n words, got {tuple(weights.shape)}"
        )
    fig, axes = _subplots(1, count, figsize=(8.4, 3.5), squeeze=False)
    for ax, sentence, weights_of_sentence in zip(axes[0], sentences, weights.cpu()):
        plot_heatmap(ax, weights_of_sentence, row_labels=list(sentence), col_labels=list(sentence), annotate=True)
        ax.set_title('"' + " ".join(sentence) + '"')
        ax.set_xlabel("key")
        ax.set_ylabel("query")
    fig.colorbar(axes[0, 0].images[0], ax=axes[0], shrink=0.9, label="attention weight")
    return fig


def draw_memory_growth(lengths: Sequence[int], peak_mib: Sequence[float], matrix_mib: Sequence[float]) -> Figure:
    """Measured peak memory (MiB) of a forward pass against the sequence length, log-log, with a
    dashed n² line through the largest measurement and a dotted line for one n x n matrix
    (``matrix_mib``)."""
    _same_length("lengths, peak_mib and matrix_mib", lengths, peak_mib, matrix_mib)
    lengths_array, peaks = np.asarray(lengths), np.asarray(peak_mib)
    fig, ax = _subplots(figsize=(6.2, 4.0))
    ax.loglog(lengths_array, peaks, "o", markersize=7, label="measured peak, forward pass")
    reference = peaks[-1] * (lengths_array / lengths_array[-1]) ** 2
    ax.loglog(lengths_array, reference, "--", color="#555555", label="$\\propto n^2$")
    ax.loglog(lengths_array, matrix_mib, ":", color="#555555", label="one $n \\times n$ float32 matrix")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length $n$ (tokens)")
    ax.set_ylabel("peak memory (MiB)")
    ax.set_title("The weight matrix makes memory grow as $n^2$")
    ax.legend()
    return fig


def draw_partner_attention(
    labels: Sequence[str], weights_before: Tensor, weights_after: Tensor, partners: Sequence[int]
) -> Figure:
    """The attention weights over one sequence of tokens (``labels``) before and after training,
    as annotated heatmaps, with each token's partner (``partners[i]``, a position) outlined in
    orange."""
    n = _same_length("labels and partners", labels, partners)
    if weights_before.shape != (n, n) or weights_after.shape != (n, n):
        raise ValueError(
            f"the weights must be ({n}, {n}), got {tuple(weights_before.shape)} and {tuple(weights_after.shape)}"
        )
    fig, axes = _subplots(1, 2, figsize=(10.5, 4.6))
    for ax, title, example_weights in [
        (axes[0], "before training", weights_before),
        (axes[1], "after training", weights_after),
    ]:
        plot_heatmap(ax, example_weights, row_labels=list(labels), col_labels=list(labels), annotate=True, fmt="{:.1f}")
        outline_cells(ax, range(n), partners, color="#D55E00")
        ax.set_title(title)
        ax.set_xlabel("key (token attended to)")
        ax.set_ylabel("query (token attending)")
    fig.colorbar(axes[0].images[0], ax=axes, shrink=0.9, label="attention weight")
    return fig
