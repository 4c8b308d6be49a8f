"""The figures and measuring tools of sequential-bottleneck, attention-as-lookup, scaled-dot-product and
self-attention (transformer_book.figures_attention): each draws what it is given, labelled, and refuses
input it cannot draw."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation

from transformer_book import figures_attention as fa
from transformer_book.runtime import use_book_style


@pytest.fixture(autouse=True)
def _book_style_and_no_open_figures():
    use_book_style()
    yield
    plt.close("all")


def arrows(ax):
    return [child for child in ax.get_children() if isinstance(child, Annotation) and child.arrow_patch is not None]


def texts(ax):
    """The words on an axes, without the empty texts of its arrows."""
    return [text.get_text() for text in ax.texts if text.get_text()]


def ydata(line):
    return np.asarray(line.get_ydata()).tolist()


# ---------------------------------------------------------------------------------------------
# sequential-bottleneck


@pytest.mark.parametrize("n", [2, 5])
def test_layer_graphs_draw_every_dependency_once(n: int) -> None:
    fig = fa.draw_layer_graphs(n)
    ax_rnn, ax_att = fig.axes
    assert len(arrows(ax_rnn)) == n + (n - 1)  # x_t -> h_t, and h_{t-1} -> h_t
    assert len(arrows(ax_att)) == n * n  # every input to every output
    assert f"then {n - 1} steps to $h_{n}$" in ax_rnn.get_title() and f"$y_{n}$" in ax_att.get_title()
    assert sorted(texts(ax_att)) == sorted(
        [f"$x_{i}$" for i in range(1, n + 1)] + [f"$y_{i}$" for i in range(1, n + 1)]
    )


@pytest.mark.parametrize(
    ("n", "message"),
    [
        (1, "n must be at least 2, got n=1"),
        (0, "n must be at least 2, got n=0"),
        (2.0, "n must be an integer, got n=2.0"),
        (True, "n must be an integer, got n=True"),
    ],
)
def test_layer_graphs_refuse_fewer_than_two_positions(n: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fa.draw_layer_graphs(n)  # type: ignore[arg-type]


def test_layer_graphs_take_a_numpy_integer() -> None:
    # Once refused by an ad-hoc isinstance(n, int) check.
    assert len(arrows(fa.draw_layer_graphs(np.int64(3)).axes[1])) == 9  # type: ignore[arg-type]


def test_one_thread_runs_on_one_thread_and_restores_the_count() -> None:
    before = torch.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with fa.one_thread():
            assert torch.get_num_threads() == 1
            raise RuntimeError("inside")
    assert torch.get_num_threads() == before


def test_multiply_adds_counts_every_product_of_a_call() -> None:
    a, b, c = torch.randn(3, 4), torch.randn(4, 5), torch.randn(5, 2)
    assert fa.multiply_adds(lambda x, y, z: (x @ y) @ z, a, b, c) == 3 * 4 * 5 + 3 * 5 * 2
    assert fa.multiply_adds(torch.matmul, a, b) == 3 * 4 * 5
    assert fa.multiply_adds(lambda x: x + 1, a) == 0  # no product, no multiply-adds


def test_multiply_adds_refuses_batched_products() -> None:
    with pytest.raises(ValueError, match="2-D products only"):
        fa.multiply_adds(torch.matmul, torch.randn(2, 3, 4), torch.randn(4, 5))


@pytest.mark.parametrize("crossover", [None, 300.0])
def test_work_and_time_plots_both_layers_on_log_axes(crossover: float | None) -> None:
    sizes = [16, 32, 64, 128, 256, 512]
    rnn_ms, attention_ms = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0], [0.1, 0.2, 0.6, 2.0, 8.0, 30.0]
    fig = fa.draw_work_and_time(
        sizes,
        [2 * n * 64**2 for n in sizes],
        [2 * n**2 * 64 for n in sizes],
        rnn_ms,
        attention_ms,
        d=64,
        crossover=crossover,
        device_name="cpu",
    )
    ax_work, ax_time = fig.axes
    for ax in (ax_work, ax_time):
        assert ax.get_xscale() == ax.get_yscale() == "log"
        assert ax.get_xlabel() == "sequence length n (tokens)" and "n = d" in texts(ax)
    assert ax_time.get_ylabel() == "median time per call (ms)" and ax_time.get_title() == "Time, measured on cpu"
    assert ax_work.get_title() == "Work, counted (d = 64)"
    time_lines = {line.get_label(): line for line in ax_time.get_lines()}
    assert ydata(time_lines["recurrent (Python loop)"]) == rnn_ms
    assert ydata(time_lines["self-attention"]) == attention_ms
    assert ("measured crossover" in time_lines) == (crossover is not None)


def test_work_and_time_refuses_series_of_different_lengths() -> None:
    with pytest.raises(ValueError, match="same length"):
        fa.draw_work_and_time([16, 32], [1, 2], [1, 2], [1.0], [1.0, 2.0], d=8, crossover=None, device_name="cpu")


def test_path_lengths_draw_one_labelled_line_per_layer() -> None:
    sizes = [16, 32, 64]
    lengths = {"recurrent": [15, 31, 63], "conv": [8, 16, 32], "dilated": [3, 4, 4], "self-attention": [1, 1, 1]}
    ax = fa.draw_path_lengths(sizes, lengths).axes[0]
    assert {line.get_label(): ydata(line) for line in ax.get_lines()} == lengths
    assert ax.get_xlabel() == "sequence length n (tokens)" and "path length" in ax.get_ylabel()
    with pytest.raises(ValueError, match="4 layer types"):
        fa.draw_path_lengths(sizes, {"recurrent": [15, 31, 63]})


def test_table_1_puts_the_measurements_beside_the_papers_columns() -> None:
    columns = fa.table_1_columns(
        exponents=(1.91, 1.02), steps=(1, 2048, 1), paths=(1, 2047, 7, 1024), kernel=3, n_max=2048
    )
    assert all(len(column) == len(fa.TABLE_1_LAYERS) for column in columns.values())
    assert columns["time exponent, measured"][:2] == ["1.91", "1.02"]
    assert columns["sequential steps at n = 2048, measured"] == ["1", "2048", "1", "not built"]
    assert columns["path length at n = 2048, measured"][2] == "7 dilated, 1024 contiguous (k = 3)"


# ---------------------------------------------------------------------------------------------
# attention-as-lookup

KEYS = torch.tensor([[1.0, -1.0, -1.0], [1.0, 1.0, -1.0], [-1.0, 1.0, 1.0]])
VALUES = torch.tensor([[4.0, 15.0], [4.0, 12.0], [2.0, 8.0]])


def test_lookup_table_has_one_row_per_entry() -> None:
    scores = KEYS @ torch.tensor([-1.0, 1.0, 0.5])
    weights = torch.softmax(scores, dim=0)
    columns = fa.lookup_table_columns(KEYS, VALUES, scores, weights, key_names=["a", "b", "c"], value_names=["u", "v"])
    assert list(columns) == ["key (a, b, c)", "value (u, v)", "score q·k", "weight"]
    assert columns["key (a, b, c)"][0] == "(1, -1, -1)" and columns["value (u, v)"][2] == "(2, 8)"
    assert columns["score q·k"] == scores.tolist()
    assert columns["weight"] == pytest.approx([round(w, 3) for w in weights.tolist()], abs=1e-7)
    with pytest.raises(ValueError, match="keys"):
        fa.lookup_table_columns(KEYS, VALUES, scores, weights, key_names=["a", "b"], value_names=["u", "v"])


def test_lookup_flow_draws_each_weight_to_scale() -> None:
    query = torch.tensor([-1.0, 1.0, 0.5])
    scores = KEYS @ query
    weights = torch.softmax(scores, dim=0)
    weighted = weights[:, None] * VALUES
    ax = fa.draw_lookup_flow(
        ["cat", "dog", "duck"], query, "a query", KEYS, scores, weights, VALUES, weighted, weighted.sum(0)
    ).axes[0]
    bars = [patch for patch in ax.patches if isinstance(patch, Rectangle) and patch.get_alpha() == 0.8]
    assert [bar.get_width() for bar in bars] == pytest.approx([2.0 * w for w in weights.tolist()])
    words = texts(ax)
    assert {"cat", "dog", "duck", "a query", "the weights sum to 1.000"} <= set(words)
    assert f"{weighted.sum(0)[0].item():.2f}" in words  # the output's legs, in the sum's cell
    with pytest.raises(ValueError, match="same length"):
        fa.draw_lookup_flow(["cat", "dog"], query, "q", KEYS, scores, weights, VALUES, weighted, weighted.sum(0))


def test_hard_and_soft_weights_show_the_given_matrices() -> None:
    soft = torch.softmax(torch.randn(2, 3), dim=-1)
    hard = torch.nn.functional.one_hot(soft.argmax(-1), 3).float()
    fig = fa.draw_hard_and_soft_weights(hard, soft, query_names=["q1", "q2"], key_names=["a", "b", "c"])
    ax_hard, ax_soft = fig.axes[:2]
    assert np.array_equal(np.asarray(ax_hard.images[0].get_array()), hard.numpy())
    assert np.allclose(np.asarray(ax_soft.images[0].get_array()), soft.numpy())
    assert [label.get_text() for label in ax_hard.get_yticklabels()] == ["q1", "q2"]
    assert [label.get_text() for label in ax_soft.get_xticklabels()] == ["a", "b", "c"]
    assert "hard" in ax_hard.get_title() and "soft" in ax_soft.get_title()
    with pytest.raises(ValueError, match="shape"):
        fa.draw_hard_and_soft_weights(hard, soft, query_names=["q1"], key_names=["a", "b", "c"])


def test_temperature_path_draws_one_line_per_key_and_the_entropy() -> None:
    betas = torch.linspace(0.0, 4.0, 9)
    weights = torch.softmax(betas[:, None] * torch.tensor([2.0, 1.0, 0.0])[None], dim=-1)
    entropies = -torch.special.xlogy(weights, weights).sum(-1) / math.log(2)
    ax_weights, ax_entropy = fa.draw_temperature_path(betas, weights, entropies, key_names=["a", "b", "c"]).axes
    keyed = {line.get_label(): ydata(line) for line in ax_weights.get_lines() if str(line.get_label()) in "abc"}
    assert keyed == {"a": weights[:, 0].tolist(), "b": weights[:, 1].tolist(), "c": weights[:, 2].tolist()}
    assert ydata(ax_entropy.get_lines()[0]) == entropies.tolist()
    assert ax_entropy.get_ylabel() == "entropy of the weights (bits)" and "β" in ax_weights.get_xlabel()
    assert ax_entropy.get_ylim()[1] == pytest.approx(math.log2(3) + 0.15)
    with pytest.raises(ValueError, match="shape"):
        fa.draw_temperature_path(betas, weights[:, :2], entropies, key_names=["a", "b", "c"])


def test_central_differences_find_the_gradient_of_a_quadratic() -> None:
    point = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    gradient = fa.central_difference_gradient(lambda x: (x**2).sum() + 3 * x[0], point)
    assert torch.allclose(gradient, 2 * point + torch.tensor([3.0, 0.0, 0.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="vector"):
        fa.central_difference_gradient(lambda x: x.sum(), torch.ones(2, 2))
    with pytest.raises(ValueError, match="step"):
        fa.central_difference_gradient(lambda x: x.sum(), point, step=0.0)


# ---------------------------------------------------------------------------------------------
# scaled-dot-product


def test_dot_product_variance_plots_the_measurements_beside_the_theory() -> None:
    dims, variance, scaled = [1, 2, 4, 8], [1.1, 1.9, 4.2, 7.7], [1.1, 0.95, 1.05, 0.96]
    ax = fa.draw_dot_product_variance(dims, variance, scaled).axes[0]
    lines = {str(line.get_label()): ydata(line) for line in ax.get_lines()}
    assert lines["theory: $d_k$"] == dims and lines["theory: 1"] == [1.0] * 4
    assert lines[r"measured $\mathrm{Var}(q \cdot k)$"] == variance
    assert lines[r"measured $\mathrm{Var}(q \cdot k / \sqrt{d_k})$"] == scaled
    assert ax.get_xscale() == ax.get_yscale() == "log" and "$d_k$" in ax.get_xlabel() and "variance" in ax.get_ylabel()
    with pytest.raises(ValueError, match="same length"):
        fa.draw_dot_product_variance(dims, variance[:3], scaled)


def saturation_curves(dims: list[int]) -> dict[str, dict[str, list[float]]]:
    curves = {}
    for scaling, factor in [("scaled", 1.0), ("unscaled", 10.0)]:
        curve = {"largest weight": [min(1.0, 0.1 * factor * (i + 1)) for i in range(len(dims))]}
        for place in fa.GRADIENT_PLACES:
            median = [factor / (i + 1) for i in range(len(dims))]
            curve |= {
                f"{place} median": median,
                f"{place} q25": [m / 2 for m in median],
                f"{place} q75": [m * 2 for m in median],
            }
        curves[scaling] = curve
    return curves


def test_softmax_saturation_draws_the_largest_weight_and_three_gradients() -> None:
    dims = [1, 4, 16]
    curves = saturation_curves(dims)
    fig = fa.draw_softmax_saturation(dims, curves, num_keys=8)
    ax_weight, *gradient_axes = fig.axes
    weight_lines = {str(line.get_label()): ydata(line) for line in ax_weight.get_lines()}
    assert weight_lines[r"$QK^\top/\sqrt{d_k}$"] == curves["scaled"]["largest weight"]
    assert weight_lines[r"$QK^\top$ (no scaling)"] == curves["unscaled"]["largest weight"]
    assert "uniform over 8 keys" in weight_lines
    for place, ax in zip(["scores", "queries", "keys"], gradient_axes):
        assert ax.get_title() == f"gradient at the {place}" and ax.get_yscale() == "log"
        assert [ydata(line) for line in ax.get_lines()] == [
            curves["scaled"][f"{place} median"],
            curves["unscaled"][f"{place} median"],
        ]
        assert len(ax.collections) == 2  # one quartile band per scaling
    with pytest.raises(ValueError, match="'scaled' and 'unscaled'"):
        fa.draw_softmax_saturation(dims, {"scaled": curves["scaled"]}, num_keys=8)
    del curves["unscaled"]["keys q75"][-1]
    with pytest.raises(ValueError, match="same length"):
        fa.draw_softmax_saturation(dims, curves, num_keys=8)


def test_attention_flow_shows_the_code_of_the_books_function() -> None:
    import inspect

    from transformer_book.model import scaled_dot_product_attention

    source = inspect.getsource(scaled_dot_product_attention)
    words = texts(fa.draw_attention_flow().axes[0])
    for title, code, _, shape in fa.ATTENTION_FLOW_STEPS:
        assert code in source, f"the figure shows {code!r}, which the function no longer runs"
        assert {title, code, shape} <= set(words)


def test_masks_and_weights_show_one_sentence_of_the_batch() -> None:
    tokens = ["a", "b", "<pad>"]
    masks = {
        "padding": torch.tensor([[[True, True, True]], [[True, True, False]]]),
        "causal": torch.ones(3, 3, dtype=torch.bool).tril(),
    }
    weights = {
        name: torch.softmax(torch.randn(2, 3, 3).masked_fill(~mask, float("-inf")), -1) for name, mask in masks.items()
    }
    fig = fa.draw_masks_and_weights(masks, weights, tokens, sentence=1)
    heatmaps = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert len(heatmaps) == 4
    tops = [ax for ax in heatmaps if ax.get_title() in masks]
    bottoms = [ax for ax in heatmaps if ax.get_title() == "attention weights"]
    assert np.array_equal(np.asarray(tops[0].images[0].get_array()), [[1, 1, 0]] * 3)
    assert np.array_equal(np.asarray(tops[1].images[0].get_array()), np.tril(np.ones((3, 3))))
    assert np.allclose(np.asarray(bottoms[0].images[0].get_array()), weights["padding"][1].numpy())
    assert all(ax.get_xlabel() == "key" and ax.get_ylabel() == "query" for ax in heatmaps)
    with pytest.raises(ValueError, match="sentence 2"):
        fa.draw_masks_and_weights(masks, weights, tokens, sentence=2)


def test_describe_row_says_what_a_row_holds() -> None:
    assert fa.describe_row(torch.full((3,), float("nan"))) == "NaN in every entry"
    assert fa.describe_row(torch.zeros(4)) == "zeros in every entry"
    assert fa.describe_row(torch.tensor([0.5, 0.25])) == "the values [0.5  0.25]"


def test_agreement_rows_hold_the_largest_difference_of_each_case() -> None:
    ours = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    rows = fa.agreement_rows(
        {"same": (ours, ours.clone()), "off": (ours, ours + torch.tensor([[0.0, 0.5], [0.0, -2.0]]))}
    )
    assert rows == [{"mask": "same", "max |ours - PyTorch|": 0.0}, {"mask": "off", "max |ours - PyTorch|": 2.0}]
    with pytest.raises(ValueError, match="shape"):
        fa.agreement_rows({"bad": (ours, ours[0])})


# ---------------------------------------------------------------------------------------------
# self-attention


def test_projection_example_shows_each_matrix_and_its_product() -> None:
    x = torch.tensor([1.0, -2.0, 0.0, 2.0])
    matrices = {
        name: torch.arange(4 * width, dtype=torch.float32).reshape(4, width) - 3
        for name, width in [("Q", 3), ("K", 3), ("V", 2)]
    }
    products = {name: x @ matrix for name, matrix in matrices.items()}
    words = texts(fa.draw_projection_example(x, matrices, products).axes[0])
    assert {"token $x_i$", "$W^Q$", "$W^K$", "$W^V$", "d_model × d_v = 4 × 2", "$v_i = x_i W^V$, 1 × d_v"} <= set(words)
    for product in products.values():  # every entry of every product is written in its cell
        assert all(f"{entry:g}" in words for entry in product.tolist())
    with pytest.raises(ValueError, match="W\\^V"):
        fa.draw_projection_example(x, {**matrices, "V": torch.ones(3, 2)}, products)


def test_tied_scores_outline_each_rows_largest_score() -> None:
    scores = {"separate": torch.randn(4, 4), "tied": torch.randn(4, 4)}
    fig = fa.draw_tied_scores(scores)
    for ax, name in zip([ax for ax in fig.axes if ax.images], ["separate", "tied"]):
        outlined = [patch for patch in ax.patches if isinstance(patch, Rectangle)]
        corners = [(round(patch.get_y() + 0.5), round(patch.get_x() + 0.5)) for patch in outlined]
        assert corners == [(row, int(column)) for row, column in enumerate(scores[name].argmax(-1))]
        assert ax.get_xlabel() == "key $j$" and ax.get_ylabel() == "query $i$"
    with pytest.raises(ValueError, match="same shape"):
        fa.draw_tied_scores({"separate": torch.randn(4, 4), "tied": torch.randn(3, 3)})


def test_outline_cells_refuses_rows_and_columns_of_different_lengths() -> None:
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="rows and columns"):
        fa.outline_cells(ax, [0, 1], [1])


def test_sentence_weights_title_each_heatmap_with_its_sentence() -> None:
    sentences = [["dog", "bites", "man"], ["man", "bites", "dog"]]
    weights = torch.softmax(torch.randn(2, 3, 3), dim=-1)
    heatmaps = [ax for ax in fa.draw_sentence_weights(sentences, weights).axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == ['"dog bites man"', '"man bites dog"']
    assert np.allclose(np.asarray(heatmaps[1].images[0].get_array()), weights[1].numpy())
    assert [label.get_text() for label in heatmaps[1].get_yticklabels()] == sentences[1]
    with pytest.raises(ValueError, match="shape"):
        fa.draw_sentence_weights(sentences, weights[:1])


def test_memory_growth_draws_an_n_squared_line_through_the_last_point() -> None:
    lengths, peaks, matrix = [256, 512, 1024], [0.6, 2.1, 8.2], [0.25, 1.0, 4.0]
    ax = fa.draw_memory_growth(lengths, peaks, matrix).axes[0]
    lines = {str(line.get_label()): ydata(line) for line in ax.get_lines()}
    assert lines["measured peak, forward pass"] == peaks
    assert lines["$\\propto n^2$"] == pytest.approx([8.2 / 16, 8.2 / 4, 8.2])
    assert lines["one $n \\times n$ float32 matrix"] == matrix
    assert ax.get_ylabel() == "peak memory (MiB)" and "(tokens)" in ax.get_xlabel()
    with pytest.raises(ValueError, match="same length"):
        fa.draw_memory_growth(lengths, peaks[:2], matrix)


def test_partner_attention_outlines_every_partner_before_and_after() -> None:
    labels, partners = ["A1", "B2", "A3", "B4"], [2, 3, 0, 1]
    before, after = torch.full((4, 4), 0.25), torch.nn.functional.one_hot(torch.tensor(partners), 4).float()
    fig = fa.draw_partner_attention(labels, before, after, partners)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == ["before training", "after training"]
    for ax in heatmaps:
        outlined = [patch for patch in ax.patches if isinstance(patch, Rectangle)]
        corners = [(round(patch.get_y() + 0.5), round(patch.get_x() + 0.5)) for patch in outlined]
        assert corners == list(enumerate(partners))
    assert np.array_equal(np.asarray(heatmaps[1].images[0].get_array()), after.numpy())
    with pytest.raises(ValueError, match="must be \\(4, 4\\)"):
        fa.draw_partner_attention(labels, before[:3], after, partners)
