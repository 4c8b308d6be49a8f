"""The figures and plumbing of Part IV's chapters (transformer_book.figures_training): each figure draws what it is
given, labelled, and each helper does what the chapters relied on when its code stood in them."""

from __future__ import annotations

from collections.abc import Iterator

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.container import BarContainer
from matplotlib.figure import Figure

from transformer_book import figures_training as ft


@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    yield
    plt.close("all")


def bars(ax: matplotlib.axes.Axes) -> list[BarContainer]:
    return [container for container in ax.containers if isinstance(container, BarContainer)]


def images(fig: Figure) -> int:
    return sum(len(ax.images) for ax in fig.axes)


def xdata(line: matplotlib.lines.Line2D) -> list[float]:
    return [float(value) for value in np.asarray(line.get_xdata())]


def ydata(line: matplotlib.lines.Line2D) -> list[float]:
    return [float(value) for value in np.asarray(line.get_ydata())]


def legend(ax: matplotlib.axes.Axes) -> list[str]:
    drawn = ax.get_legend()
    assert drawn is not None, "the axes have no legend"
    return [text.get_text() for text in drawn.get_texts()]


# ---------------------------------------------------------------------------------------------
# Plumbing


def test_glue_values_glues_each_value_under_its_name_without_showing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    glued: list[tuple[str, object, bool | None]] = []
    monkeypatch.setattr(ft, "glue", lambda name, value, display=None: glued.append((name, value, display)))
    ft.glue_values(dc_steps=120, dc_match=0.875, dc_sentence="All right.")
    assert glued == [("dc_steps", 120, False), ("dc_match", 0.875, False), ("dc_sentence", "All right.", False)]
    with pytest.raises(ValueError, match="at least one"):
        ft.glue_values()


def test_until_target_records_every_few_steps_and_stops_like_an_interrupt() -> None:
    values = iter([0.2, 0.5, 0.9, 1.0])
    curve: dict[int, float] = {}
    handed: list[int] = []
    with pytest.raises(KeyboardInterrupt):
        for batch in ft.until_target(iter(range(100)), lambda: next(values), target=0.85, every=3, curve=curve):
            handed.append(batch)
    assert curve == {3: 0.2, 6: 0.5, 9: 0.9}  # measured after 3, 6 and 9 steps; 0.9 reaches the target
    assert handed == list(range(9))  # batch 9 is never handed out: train stops after 9 steps


def test_until_target_passes_every_batch_on_when_the_target_is_never_reached() -> None:
    curve: dict[int, float] = {}
    assert list(ft.until_target(iter("abcde"), lambda: 0.0, target=1.0, every=2, curve=curve)) == list("abcde")
    assert curve == {2: 0.0, 4: 0.0}
    with pytest.raises(ValueError, match="every must be a positive integer, got every=0"):
        list(ft.until_target(iter("ab"), lambda: 0.0, target=1.0, every=0, curve=curve))
    # Once refused by an ad-hoc isinstance(every, int) check.
    curve = {}
    handed = list(ft.until_target(iter("abcde"), lambda: 0.0, target=1.0, every=np.int64(2), curve=curve))  # type: ignore[arg-type]
    assert handed == list("abcde")
    assert curve == {2: 0.0, 4: 0.0}


def test_score_checkpoints_loads_each_checkpoint_before_scoring_it() -> None:
    layer = torch.nn.Linear(1, 1, bias=False)
    checkpoints = [{"weight": torch.full((1, 1), value)} for value in (1.0, 2.0, 3.0)]
    scores = ft.score_checkpoints(layer, checkpoints, lambda model: model(torch.ones(1, 1)).item())
    assert scores == [1.0, 2.0, 3.0]
    assert layer.weight.item() == 3.0  # the model is left with the last checkpoint's weights


def test_decoding_times_gives_one_row_per_length_on_one_thread_and_restores_the_threads() -> None:
    threads_before = torch.get_num_threads()
    seen: list[tuple[str, int, int]] = []

    def decoder(name: str):  # records which length it decoded, and on how many threads
        return lambda length: seen.append((name, length, torch.get_num_threads()))

    warm: list[int] = []
    rows = ft.decoding_times(
        {"recompute": decoder("recompute"), "cache": decoder("cache")},
        [8, 16],
        repeats={"recompute": [2, 1], "cache": [1, 3]},
        sentences=4,
        warm_up=lambda: warm.append(torch.get_num_threads()),
    )
    assert warm == [1]
    assert seen == [("recompute", 8, 1)] * 2 + [("cache", 8, 1)] + [("recompute", 16, 1)] + [("cache", 16, 1)] * 3
    assert torch.get_num_threads() == threads_before
    assert [row["generated tokens"] for row in rows] == [8, 16]
    assert set(rows[0]) == {"generated tokens", "recompute (ms per sentence)", "cache (ms per sentence)", "speedup"}
    with pytest.raises(ValueError, match="one count per length"):
        ft.decoding_times({"a": len, "b": len}, [8, 16], repeats={"a": [1], "b": [1, 1]}, sentences=1)  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="two decoders"):
        ft.decoding_times({"a": len}, [8], repeats={"a": [1]}, sentences=1)  # type: ignore[dict-item]


# ---------------------------------------------------------------------------------------------
# Figures


def test_batch_masks_draw_one_grid_per_mask_labelled_by_the_tokens() -> None:
    source = torch.tensor([[1, 1, 1], [1, 1, 0]])
    targets = torch.tril(torch.ones(2, 2, 2, dtype=torch.int))  # (batch, m, m), as a Batch holds them
    fig = ft.draw_batch_masks(source, targets, [["<s>", "a"], ["<s>", "b"]])
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == 3 and images(fig) == 3
    assert [label.get_text() for label in heatmaps[0].get_yticklabels()] == ["sequence 1", "sequence 2"]
    assert [label.get_text() for label in heatmaps[2].get_xticklabels()] == ["<s>", "b"]
    assert heatmaps[2].get_title() == "target mask, sequence 2"
    assert heatmaps[1].get_ylabel() == "decoder input (query)"
    with pytest.raises(ValueError, match="one token list per target mask"):
        ft.draw_batch_masks(source, targets, [["<s>", "a"]])


def test_learning_rate_schedules_draw_one_curve_and_one_peak_per_setting() -> None:
    steps = np.arange(1, 101)
    schedules = {(64, 10): [0.1] * 100, (128, 20): [0.2] * 100}
    fig = ft.draw_learning_rate_schedules(steps, schedules, peaks={(64, 10): 0.3, (128, 20): 0.4})
    (ax,) = fig.axes
    assert len(ax.lines) == 4  # a curve and a peak dot each
    assert [xdata(line)[0] for line in ax.lines[1::2]] == [10, 20]
    assert [ydata(line)[0] for line in ax.lines[1::2]] == [0.3, 0.4]
    assert ax.get_xlabel() == "step" and ax.get_ylabel() == "learning rate"
    assert legend(ax)[1] == "$d_{model}$ = 128, warmup = 20"


def test_label_smoothing_draws_the_targets_and_one_loss_curve_per_smoothing() -> None:
    confidence = torch.linspace(0.3, 0.99, 5)
    losses = {0.0: torch.ones(5), 0.1: 2 * torch.ones(5), 0.2: 3 * torch.ones(5)}
    fig = ft.draw_label_smoothing(
        np.eye(5)[2], np.full(5, 0.2), confidence, losses, loss_floor=0.5, best_probability=0.9, vocab_size=13
    )
    targets, loss = fig.axes
    assert [len(container) for container in bars(targets)] == [5, 5]
    assert (
        targets.get_title() == "Target distributions, V = 5" and loss.get_title() == "Loss against confidence, V = 13"
    )
    assert len(loss.lines) == 3 + 2  # the curves, the floor and its point
    assert loss.get_ylabel() == "loss (nats)"
    with pytest.raises(ValueError, match="one shape"):
        ft.draw_label_smoothing(np.eye(4)[2], np.full(5, 0.2), confidence, losses, 0.5, 0.9, 13)


def test_copy_training_draws_three_panels_over_the_same_steps() -> None:
    steps = 30
    fig = ft.draw_copy_training(
        np.linspace(4, 0.6, steps),
        np.linspace(3, 0.1, steps),
        np.linspace(1e-3, 2e-3, steps),
        loss_floor=0.537,
        clip_norm=1.0,
        resumed_step=10,
        checkpoint_steps=[20, 25, 30],
    )
    loss_ax, norm_ax, rate_ax = fig.axes
    assert len(xdata(loss_ax.lines[0])) == steps and len(xdata(rate_ax.lines[-1])) == steps
    assert loss_ax.get_ylabel() == "loss (nats per token)" and norm_ax.get_yscale() == "log"
    assert rate_ax.get_xlabel() == "step"
    assert "0.537" in legend(loss_ax)[1]
    with pytest.raises(ValueError, match="one loss, gradient norm and rate per step"):
        ft.draw_copy_training([1, 2], [1], [1, 2], loss_floor=0.5, clip_norm=1, resumed_step=1, checkpoint_steps=[1, 2])


def test_date_training_loss_draws_the_losses_their_mean_and_the_floor() -> None:
    losses = np.linspace(5, 0.8, 40)
    window = 5
    running_mean = np.convolve(losses, np.ones(window) / window, mode="valid")
    fig = ft.draw_date_training_loss(losses, running_mean, window, loss_floor=0.76, checkpoint_steps=[30, 40])
    (ax,) = fig.axes
    each, mean, floor = ax.lines
    assert len(xdata(each)) == 40 and xdata(mean)[0] == window
    assert ydata(floor)[0] == 0.76 and ax.get_yscale() == "log"
    assert ax.get_ylabel() == "label-smoothed cross-entropy (nats)"
    with pytest.raises(ValueError, match="running mean"):
        ft.draw_date_training_loss(losses, running_mean[1:], window, 0.76, [30, 40])


def test_mistakes_by_style_draw_two_bars_per_style() -> None:
    errors = {"step 200": [30.0, 5.0, 12.0], "average": [0.0, 1.0, 0.5]}
    fig = ft.draw_mistakes_by_style(["long", "dotted", "slashed"], errors)
    (ax,) = fig.axes
    assert [len(container) for container in bars(ax)] == [3, 3]
    assert [patch.get_height() for patch in bars(ax)[0]] == [30.0, 5.0, 12.0]
    assert [label.get_text() for label in ax.get_xticklabels()] == ["long", "dotted", "slashed"]
    assert ax.get_ylabel() == "wrong outputs per 100 test inputs" and legend(ax) == ["step 200", "average"]
    with pytest.raises(ValueError, match="two models"):
        ft.draw_mistakes_by_style(["long", "dotted", "slashed"], {"average": errors["average"]})
    with pytest.raises(ValueError, match="2 numbers for 3 styles"):
        ft.draw_mistakes_by_style(["long", "dotted", "slashed"], {"a": [1.0, 2.0], "b": [1.0, 2.0, 3.0]})


def test_cross_attention_maps_draw_one_labelled_heatmap_per_example() -> None:
    maps = [
        (torch.rand(3, 4), ["1", "9", "</s>"], ["july", "20", ",", "1969"], "July 20, 1969"),
        (torch.rand(3, 2), ["2", "0", "</s>"], ["20", "69"], "20 69"),
    ]
    fig = ft.draw_cross_attention_maps(maps)
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in heatmaps] == ["July 20, 1969", "20 69"]
    assert [label.get_text() for label in heatmaps[0].get_xticklabels()] == ["july", "20", ",", "1969"]
    assert heatmaps[0].get_ylabel() == "output token being produced (query)"
    assert len(fig.axes) == 3  # two maps and one colour bar
    with pytest.raises(ValueError, match="weights of shape"):
        ft.draw_cross_attention_maps([(torch.rand(2, 4), ["1", "9", "</s>"], ["a", "b", "c", "d"], "bad")])


def test_field_alignment_annotates_every_field_and_head() -> None:
    alignment = np.array([[0.9, 0.1], [0.2, 0.7], [0.3, 0.6]])
    fig = ft.draw_field_alignment(alignment, ["year", "month", "day"], ["L1H1", "L1H2"])
    ax = fig.axes[0]
    assert [label.get_text() for label in ax.get_yticklabels()] == ["year digits", "month digits", "day digits"]
    assert sorted(text.get_text() for text in ax.texts) == sorted(f"{value:.2f}" for value in alignment.flat)
    with pytest.raises(ValueError, match="alignment of shape"):
        ft.draw_field_alignment(alignment, ["year", "month"], ["L1H1", "L1H2"])


def test_decoding_times_draw_the_times_and_the_speedup_against_the_lengths() -> None:
    rows = [
        {
            "generated tokens": length,
            "recompute (ms per sentence)": slow,
            "cache (ms per sentence)": fast,
            "speedup": slow / fast,
        }
        for length, slow, fast in [(8, 1.0, 1.0), (16, 4.0, 2.0), (32, 16.0, 4.0)]
    ]
    fig = ft.draw_decoding_times(rows)
    ax_time, ax_speedup = fig.axes
    assert len(ax_time.lines) == 2 and ax_time.get_xscale() == "log" and ax_time.get_yscale() == "log"
    assert ydata(ax_time.lines[0]) == [1.0, 4.0, 16.0] and ydata(ax_time.lines[1]) == [1.0, 2.0, 4.0]
    assert ydata(ax_speedup.lines[0]) == [1.0, 2.0, 4.0]
    assert [label.get_text() for label in ax_time.get_xticklabels()] == ["8", "16", "32"]
    assert ax_time.get_ylabel() == "time per sentence (ms)"
    with pytest.raises(ValueError, match="at least one row"):
        ft.draw_decoding_times([])


def test_length_penalties_draw_a_penalty_and_a_score_curve_per_alpha() -> None:
    lengths = np.arange(1, 11)
    penalties = {0.0: np.ones(10), 0.6: ((5 + lengths) / 6) ** 0.6}
    scores = {alpha: lengths * np.log(0.9) / penalty for alpha, penalty in penalties.items()}
    fig = ft.draw_length_penalties(lengths, penalties, scores)
    ax_penalty, ax_score = fig.axes
    assert len(ax_penalty.lines) == len(ax_score.lines) == 2
    assert legend(ax_penalty) == ["α = 0", "α = 0.6 (paper)"]
    assert ax_score.get_ylabel() == "score log P / lp (nats)"
    with pytest.raises(ValueError, match="one score curve per penalty curve"):
        ft.draw_length_penalties(lengths, penalties, {0.0: scores[0.0]})


def test_temperature_bars_draw_one_group_per_token_and_one_colour_per_temperature() -> None:
    heights = {0.5: [0.8, 0.15, 0.05], 1.0: [0.6, 0.25, 0.15], 2.0: [0.4, 0.3, 0.3]}
    fig = ft.draw_temperature_bars(heights, ["'7'", "'1'", "other 82 tokens"], "next token at step 6")
    (ax,) = fig.axes
    assert [[patch.get_height() for patch in container] for container in bars(ax)] == list(heights.values())
    assert ax.get_title() == "One next-token distribution at three temperatures"
    assert ax.get_xlabel() == "next token at step 6"
    with pytest.raises(ValueError, match="3 heights for 2 labels"):
        ft.draw_temperature_bars(heights, ["'7'", "'1'"], "x")


def test_sampling_tradeoff_draws_a_line_per_top_k_and_greedy_as_a_reference() -> None:
    rows = [
        {"top-k": top_k, "temperature": temperature, "distinct outputs": distinct, "exact match": match}
        for top_k, temperature, distinct, match in [
            ("all tokens", 0.5, 1, 0.9),
            ("all tokens", 2.0, 5, 0.2),
            ("top-3", 0.5, 2, 0.9),
            ("top-3", 2.0, 3, 0.7),
        ]
    ]
    fig = ft.draw_sampling_tradeoff(rows, greedy_accuracy=0.92, samples=20, sentences=300)
    ax_diversity, ax_accuracy = fig.axes
    assert [ydata(line) for line in ax_diversity.lines] == [[1, 5], [2, 3]]
    assert [xdata(line) for line in ax_accuracy.lines[:2]] == [[0.5, 2.0], [0.5, 2.0]]
    assert ydata(ax_accuracy.lines[-1])[0] == 0.92
    assert legend(ax_accuracy) == ["all tokens", "top-3", "greedy decoding"]
    assert ax_diversity.get_ylabel() == "distinct outputs (of 20 samples)"
    assert ax_accuracy.get_ylabel() == "exact match (300 dates)"
