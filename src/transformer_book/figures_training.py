"""The figures and the plumbing of Part IV's chapters (batching to decoding), out of the chapters' collapsed cells.

Each ``draw_...`` function draws one figure of one chapter from data the chapter computed and
returns the figure, for ``glue(key, fig, display=False)``: it trains and measures nothing. The
other helpers are the plumbing those chapters repeat: gluing several values at once, stopping
``train`` at a target, timing decoders, and collecting the messages of calls that must fail.

matplotlib is imported inside the functions, so importing this module loads no plotting.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from transformer_book.checks import positive_int
from transformer_book.helpers import seconds_per_call
from transformer_book.runtime import glue, plot_heatmap

if TYPE_CHECKING:
    from matplotlib.figure import Figure

T = TypeVar("T")
M = TypeVar("M", bound=torch.nn.Module)


# ---------------------------------------------------------------------------------------------
# Plumbing


def glue_values(**values: Any) -> None:
    """Glue each keyword's value under its name for the prose, without showing it:
    ``glue_values(dc_steps=steps, dc_match=match)`` is ``glue("dc_steps", steps, display=False)``
    and ``glue("dc_match", match, display=False)``."""
    if not values:
        raise ValueError("glue_values needs at least one name=value to glue")
    for name, value in values.items():
        glue(name, value, display=False)


def until_target(
    batches: Iterable[T], measure: Callable[[], float], target: float, every: int, curve: dict[int, float]
) -> Iterator[T]:
    """Pass the batches on; every ``every`` steps, record ``measure()`` in ``curve`` (step -> value),
    and once it reaches ``target``, stop ``train`` the way an interrupt does (KeyboardInterrupt).

    ``train`` asks for batch k after k optimizer steps, so the value recorded at step k is that
    of the model after k steps.
    """
    every = positive_int(every, "every")
    for step, batch in enumerate(batches):
        if step > 0 and step % every == 0:
            curve[step] = measure()
            if curve[step] >= target:
                raise KeyboardInterrupt
        yield batch


def score_checkpoints(model: M, checkpoints: Iterable[Mapping[str, torch.Tensor]], score: Callable[[M], T]) -> list[T]:
    """Load each checkpoint in turn into ``model``, whose weights it overwrites, and score it:
    ``score(model)`` once per checkpoint, in order."""
    scores = []
    for weights in checkpoints:
        model.load_state_dict(weights)
        scores.append(score(model))
    return scores


def decoding_times(
    decoders: Mapping[str, Callable[[int], object]],
    lengths: Sequence[int],
    repeats: Mapping[str, Sequence[int]],
    sentences: int,
    warm_up: Callable[[], object] | None = None,
) -> list[dict[str, float]]:
    """Time two decoders on one CPU thread: one row per length, with the generated tokens, each
    decoder's median milliseconds per sentence (``"NAME (ms per sentence)"``) and the speedup,
    the first decoder's time over the second's.

    ``decoders`` maps a name to a call that decodes a batch of ``sentences`` sentences, generating
    the given number of tokens; ``repeats[name][i]`` is how many runs the median of
    ``lengths[i]`` takes. ``warm_up``, if given, runs first, to pay one-off costs. The thread
    count is restored afterwards.
    """
    if len(decoders) != 2:
        raise ValueError(f"decoding_times compares two decoders, got {len(decoders)}: {list(decoders)}")
    for name in decoders:
        if len(repeats.get(name, ())) != len(lengths):
            raise ValueError(f"repeats[{name!r}] must give one count per length ({len(lengths)})")
    if sentences < 1:
        raise ValueError(f"sentences must be positive, got {sentences}")
    (slow_name, slow), (fast_name, fast) = decoders.items()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if warm_up is not None:
            warm_up()
        rows = []
        for index, length in enumerate(lengths):
            slow_seconds = seconds_per_call(lambda: slow(length), calls=repeats[slow_name][index], warmup=0)
            fast_seconds = seconds_per_call(lambda: fast(length), calls=repeats[fast_name][index], warmup=0)
            rows.append(
                {
                    "generated tokens": length,
                    f"{slow_name} (ms per sentence)": 1000 * slow_seconds / sentences,
                    f"{fast_name} (ms per sentence)": 1000 * fast_seconds / sentences,
                    "speedup": slow_seconds / fast_seconds,
                }
            )
    finally:
        torch.set_num_threads(threads)
    return rows


# ---------------------------------------------------------------------------------------------
# Batching


def draw_batch_masks(source_masks: Any, target_masks: Any, target_tokens: Sequence[Sequence[str]]) -> Figure:
    """The masks of a batch: its source masks (batch, n), one row per sequence, and beside them
    each sequence's target mask (batch, m, m), labelled by the decoder input's tokens."""
    if len(target_masks) != len(target_tokens):
        raise ValueError(f"one token list per target mask: {len(target_masks)} masks, {len(target_tokens)} lists")
    import matplotlib.pyplot as plt

    batch, n = np.asarray(source_masks).shape
    fig, axes = plt.subplots(
        1, 1 + len(target_masks), figsize=(12.5, 3.6), gridspec_kw={"width_ratios": [5] + [6] * len(target_masks)}
    )
    plot_heatmap(
        axes[0],
        source_masks,
        row_labels=[f"sequence {row + 1}" for row in range(batch)],
        col_labels=[str(position) for position in range(n)],
        annotate=True,
        fmt="{:.0f}",
    )
    axes[0].set_title("source masks")
    axes[0].set_xlabel("source position (key)")
    for sequence, (ax, mask, tokens) in enumerate(zip(axes[1:], target_masks, target_tokens)):
        last = sequence == len(target_masks) - 1
        plot_heatmap(
            ax,
            mask,
            row_labels=list(tokens),
            col_labels=list(tokens),
            annotate=True,
            fmt="{:.0f}",
            colorbar_label="may attend (1) or not (0)" if last else None,
        )
        ax.set_title(f"target mask, sequence {sequence + 1}")
        ax.set_xlabel("decoder input (key)")
        ax.tick_params(axis="x", labelrotation=90)
    axes[1].set_ylabel("decoder input (query)")
    return fig


# ---------------------------------------------------------------------------------------------
# Learning rate


def draw_learning_rate_schedules(
    steps: Any, schedules: Mapping[tuple[int, int], Sequence[float]], peaks: Mapping[tuple[int, int], float]
) -> Figure:
    """The learning rate against the step for each (d_model, warmup) setting, with a dot at its
    peak, at step = warmup."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    for (d_model, warmup), rates in schedules.items():
        (line,) = ax.plot(steps, rates, label=f"$d_{{model}}$ = {d_model}, warmup = {warmup:,}")
        ax.plot([warmup], [peaks[d_model, warmup]], "o", color=line.get_color())
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    ax.set_title("The paper's learning-rate schedule")
    ax.legend()
    return fig


# ---------------------------------------------------------------------------------------------
# Label smoothing


def draw_label_smoothing(
    one_hot: Any,
    smoothed: Any,
    confidence: Any,
    losses: Mapping[float, Any],
    loss_floor: float,
    best_probability: float,
    vocab_size: int,
) -> Figure:
    """Left: a one-hot target and its smoothed version over a few tokens (the true token is token 2).
    Right: the loss against the probability the model gives the true token, one curve per
    smoothing, with the floor H(q) and the point where a model reaches it."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11.0, 3.8))
    ax = axes[0]
    one_hot, smoothed = np.asarray(one_hot), np.asarray(smoothed)
    if one_hot.shape != smoothed.shape:
        raise ValueError(f"one_hot and smoothed must have one shape, got {one_hot.shape} and {smoothed.shape}")
    positions = np.arange(len(one_hot))
    ax.bar(positions - 0.2, one_hot, width=0.4, label="one-hot")
    ax.bar(positions + 0.2, smoothed, width=0.4, label=r"smoothed, $\epsilon_{ls}$ = 0.1")
    for position, probability in enumerate(smoothed.tolist()):
        ax.text(position + 0.2, probability + 0.02, f"{probability:.3f}", ha="center", fontsize=9)
    ax.set_xticks(positions, labels=[f"token {token}" for token in range(len(one_hot))])
    ax.set_xlabel("token (the true token is token 2)")
    ax.set_ylabel("target probability")
    ax.set_ylim(0, 1.12)
    ax.set_title(f"Target distributions, V = {len(one_hot)}")
    ax.legend(loc="upper left")

    ax = axes[1]
    for smoothing, curve in losses.items():
        ax.plot(confidence, curve, label=rf"$\epsilon_{{ls}}$ = {smoothing}")
    ax.axhline(loss_floor, color="#555555", linestyle=":", linewidth=1.2, label=f"floor $H(q)$ = {loss_floor:.3f}")
    ax.plot([best_probability], [loss_floor], "o", color="#D55E00")
    ax.set_xlabel("probability the model gives the true token")
    ax.set_ylabel("loss (nats)")
    ax.set_ylim(0, 2.0)
    ax.set_title(f"Loss against confidence, V = {vocab_size}")
    ax.legend()
    return fig


# ---------------------------------------------------------------------------------------------
# Training


def draw_copy_training(
    losses: Any,
    gradient_norms: Any,
    rates: Any,
    *,
    loss_floor: float,
    clip_norm: float,
    resumed_step: int,
    checkpoint_steps: Sequence[int],
) -> Figure:
    """Three panels over the steps: the loss with the label-smoothing floor, the gradient norm
    before clipping with the clipping threshold, and the learning rate; a dotted line where
    training was interrupted and resumed, and a band over the averaged checkpoints."""
    losses, gradient_norms, rates = np.asarray(losses), np.asarray(gradient_norms), np.asarray(rates)
    if not len(losses) == len(gradient_norms) == len(rates):
        raise ValueError(
            f"one loss, gradient norm and rate per step, got {len(losses)}, {len(gradient_norms)} and {len(rates)}"
        )
    import matplotlib.pyplot as plt

    fig, (loss_ax, norm_ax, rate_ax) = plt.subplots(3, 1, figsize=(7.0, 6.6), sharex=True, height_ratios=[2, 1.3, 1])
    steps = np.arange(1, len(losses) + 1)
    loss_ax.plot(steps, losses, linewidth=1.2, label="training loss")
    loss_ax.axhline(
        loss_floor,
        color="#D55E00",
        linestyle="--",
        linewidth=1.4,
        label=f"label-smoothing floor $H(q)$ = {loss_floor:.3f}",
    )
    norm_ax.plot(steps, gradient_norms, linewidth=1.0, color="#CC79A7", label="gradient norm, before clipping")
    norm_ax.axhline(clip_norm, color="#555555", linestyle="--", linewidth=1.2, label="clipped to this norm")
    for ax in (loss_ax, norm_ax, rate_ax):
        ax.axvline(resumed_step, color="#777777", linestyle=":", linewidth=1.2)
        ax.axvspan(
            checkpoint_steps[0],
            checkpoint_steps[-1],
            color="#009E73",
            alpha=0.15,
            label="checkpoints averaged" if ax is loss_ax else None,
        )
    loss_ax.text(resumed_step + 10, losses.max() * 0.95, "interrupted,\nrestored from checkpoint", fontsize=9, va="top")
    loss_ax.set_ylabel("loss (nats per token)")
    loss_ax.set_ylim(0, losses.max() * 1.05)
    loss_ax.set_title("Training the Transformer to copy")
    loss_ax.legend(loc="upper right")
    norm_ax.set_yscale("log")
    norm_ax.set_ylabel("gradient norm")
    norm_ax.legend(loc="upper right")
    rate_ax.plot(steps, rates, color="#009E73")
    rate_ax.set_xlabel("step")
    rate_ax.set_ylabel("learning rate")
    rate_ax.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    return fig


# ---------------------------------------------------------------------------------------------
# Translation


def draw_date_training_loss(
    losses: Any, running_mean: Any, window: int, loss_floor: float, checkpoint_steps: Sequence[int]
) -> Figure:
    """The loss of every step (pale) and its running mean over ``window`` steps, on a log axis,
    against the label-smoothing floor, with a band over the averaged checkpoints."""
    losses = np.asarray(losses)
    if len(running_mean) != len(losses) - window + 1:
        raise ValueError(
            f"a running mean of {window} steps over {len(losses)} losses has {len(losses) - window + 1} values, "
            f"got {len(running_mean)}"
        )
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    steps = np.arange(1, len(losses) + 1)
    ax.plot(steps, losses, color="#0072B2", alpha=0.3, linewidth=1.0, label="loss of each batch")
    ax.plot(steps[window - 1 :], running_mean, color="#0072B2", label=f"mean of {window} steps")
    ax.axhline(loss_floor, color="#D55E00", linestyle="--", linewidth=1.4, label="floor set by label smoothing")
    ax.axvspan(checkpoint_steps[0], checkpoint_steps[-1], color="#009E73", alpha=0.15, label="checkpoints averaged")
    ax.set_yscale("log")
    ax.set_yticks([0.75, 1, 2, 4, 6], labels=["0.75", "1", "2", "4", "6"])
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("training step")
    ax.set_ylabel("label-smoothed cross-entropy (nats)")
    ax.set_title("Training on dates")
    ax.legend(loc="upper center", bbox_to_anchor=(0.42, 1.0))
    return fig


def draw_mistakes_by_style(styles: Sequence[str], errors_per_100: Mapping[str, Sequence[float]]) -> Figure:
    """Grouped bars of wrong outputs per 100 test inputs: one group per input style, one bar per
    model (the two keys of ``errors_per_100``, each with one number per style)."""
    if len(errors_per_100) != 2:
        raise ValueError(f"draw_mistakes_by_style draws two models side by side, got {list(errors_per_100)}")
    for model, errors in errors_per_100.items():
        if len(errors) != len(styles):
            raise ValueError(f"{model}: {len(errors)} numbers for {len(styles)} styles")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    positions = np.arange(len(styles))
    for offset, (model, errors) in zip((-0.2, 0.2), errors_per_100.items()):
        ax.bar(positions + offset, errors, width=0.4, label=model)
    ax.set_xticks(positions, labels=list(styles), rotation=20)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("input style")
    ax.set_ylabel("wrong outputs per 100 test inputs")
    ax.set_title("Mistakes by style")
    ax.legend()
    return fig


def draw_cross_attention_maps(maps: Sequence[tuple[Any, Sequence[str], Sequence[str], str]]) -> Figure:
    """Cross-attention weights side by side, one heatmap per (weights (output, source), output
    tokens, source tokens, title); the colour bar beside the last."""
    if not maps:
        raise ValueError("draw_cross_attention_maps needs at least one map")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(maps), figsize=(10.5, 4.6), gridspec_kw={"width_ratios": [1] * len(maps)})
    axes = np.atleast_1d(axes)
    for ax, (weights, produced, source_tokens, title) in zip(axes, maps):
        if tuple(np.asarray(weights).shape) != (len(produced), len(source_tokens)):
            raise ValueError(
                f"weights of shape {tuple(np.asarray(weights).shape)} for {len(produced)} output and "
                f"{len(source_tokens)} source tokens"
            )
        plot_heatmap(
            ax,
            weights,
            row_labels=list(produced),
            col_labels=list(source_tokens),
            colorbar_label="attention weight" if ax is axes[-1] else None,
        )
        ax.tick_params(axis="x", labelrotation=60)
        ax.set_xlabel("source token (key)")
        ax.set_title(title)
    axes[0].set_ylabel("output token being produced (query)")
    return fig


def draw_field_alignment(alignment: Any, fields: Sequence[str], heads: Sequence[str]) -> Figure:
    """An annotated heatmap of the share of each output field's attention that each decoder head
    puts on the same field of the source: rows ``fields``, columns ``heads``."""
    matrix = np.asarray(alignment)
    if matrix.shape != (len(fields), len(heads)):
        raise ValueError(f"alignment of shape {matrix.shape} for {len(fields)} fields and {len(heads)} heads")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.0, 2.8))
    plot_heatmap(
        ax,
        matrix,
        row_labels=[f"{field} digits" for field in fields],
        col_labels=list(heads),
        annotate=True,
        colorbar_label="share of attention",
    )
    ax.set_xlabel("decoder layer (L) and head (H)")
    ax.set_ylabel("output field")
    ax.set_title("Attention on the matching source field")
    return fig


# ---------------------------------------------------------------------------------------------
# Decoding


def draw_decoding_times(rows: Sequence[Mapping[str, float]]) -> Figure:
    """Left: milliseconds per sentence against generated tokens, log-log, for recomputing the
    prefix and for the key-value cache. Right: the speedup, recomputation's time over the cache's.

    ``rows``: the rows of ``decoding_times`` for the decoders "recompute" and "cache".
    """
    if not rows:
        raise ValueError("draw_decoding_times needs at least one row of timings")
    lengths = [int(row["generated tokens"]) for row in rows]
    import matplotlib.pyplot as plt

    def column(name: str) -> list[float]:
        return [row[name] for row in rows]

    fig, (ax_time, ax_speedup) = plt.subplots(1, 2, figsize=(10, 3.8))
    ax_time.loglog(lengths, column("recompute (ms per sentence)"), "o-", label="recompute the prefix")
    ax_time.loglog(lengths, column("cache (ms per sentence)"), "s-", label="key-value cache")
    ax_time.set_xlabel("generated tokens")
    ax_time.set_ylabel("time per sentence (ms)")
    ax_time.set_title("Greedy decoding time")
    ax_time.legend()
    ax_speedup.semilogx(lengths, column("speedup"), "o-", color="C2")
    ax_speedup.axhline(1.0, color="#777777", linewidth=1, linestyle="--")
    ax_speedup.set_xlabel("generated tokens")
    ax_speedup.set_ylabel("speedup (recompute time / cache time)")
    ax_speedup.set_title("What the cache saves")
    for ax in (ax_time, ax_speedup):
        ax.set_xticks(lengths, labels=[str(length) for length in lengths])
        ax.minorticks_off()
    return fig


def draw_length_penalties(
    lengths: Any, penalties: Mapping[float, Any], scores: Mapping[float, Any], *, paper_alpha: float = 0.6
) -> Figure:
    """Left: the length penalty lp(Y) against the hypothesis length, one line per alpha. Right:
    the score log P / lp of hypotheses whose tokens all have one probability."""
    if set(penalties) != set(scores):
        raise ValueError(f"one score curve per penalty curve: alphas {sorted(penalties)} and {sorted(scores)}")
    import matplotlib.pyplot as plt

    fig, (ax_penalty, ax_score) = plt.subplots(1, 2, figsize=(10, 3.8))
    for alpha, penalty in penalties.items():
        label = f"α = {alpha:g}" + (" (paper)" if alpha == paper_alpha else "")
        ax_penalty.plot(lengths, penalty, label=label)
        ax_score.plot(lengths, scores[alpha], label=label)
    ax_penalty.set_xlabel("hypothesis length |Y| (tokens)")
    ax_penalty.set_ylabel("length penalty lp(Y)")
    ax_penalty.set_title("The penalty")
    ax_score.set_xlabel("hypothesis length |Y| (tokens)")
    ax_score.set_ylabel("score log P / lp (nats)")
    ax_score.set_title("Score, every token at probability 0.9")
    ax_penalty.legend()
    return fig


def draw_temperature_bars(heights: Mapping[float, Sequence[float]], labels: Sequence[str], xlabel: str) -> Figure:
    """Grouped bars of one next-token distribution at several temperatures: ``heights[T]`` holds
    the probabilities of the tokens named by ``labels`` (the last may add up all other tokens)."""
    for temperature, row in heights.items():
        if len(row) != len(labels):
            raise ValueError(f"T = {temperature:g}: {len(row)} heights for {len(labels)} labels")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8))
    positions = np.arange(len(labels))
    width = 0.27
    middle = (len(heights) - 1) // 2
    for offset, (temperature, row) in enumerate(heights.items()):
        ax.bar(positions + (offset - middle) * width, row, width, label=f"T = {temperature:g}")
    ax.set_xticks(positions, labels=list(labels))
    ax.set_xlabel(xlabel)
    ax.set_ylabel("probability")
    ax.set_title(f"One next-token distribution at {_count_word(len(heights))} temperatures")
    ax.legend()
    return fig


def _count_word(count: int) -> str:
    words = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
    return words.get(count, str(count))


def draw_sampling_tradeoff(
    rows: Sequence[Mapping[str, Any]], greedy_accuracy: float, samples: int, sentences: int
) -> Figure:
    """Left: distinct outputs among ``samples`` samples of one date against the temperature.
    Right: exact match on ``sentences`` dates, with greedy decoding's as a dashed line.

    ``rows``: one per (top-k, temperature), with the keys "top-k" (a label), "temperature",
    "distinct outputs" and "exact match"; one line per top-k label, in the order of the rows.
    """
    curves: dict[str, list[Mapping[str, Any]]] = {}
    for row in rows:
        curves.setdefault(str(row["top-k"]), []).append(row)
    if not curves:
        raise ValueError("draw_sampling_tradeoff needs at least one row")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax_diversity, ax_accuracy) = plt.subplots(1, 2, figsize=(10, 3.8))
    for (label, curve), marker in zip(curves.items(), ["o", "s", "^", "D"]):
        temperatures = [row["temperature"] for row in curve]
        ax_diversity.plot(temperatures, [row["distinct outputs"] for row in curve], marker=marker, label=label)
        ax_accuracy.plot(temperatures, [row["exact match"] for row in curve], marker=marker, label=label)
    ax_accuracy.axhline(greedy_accuracy, color="#777777", linestyle="--", linewidth=1, label="greedy decoding")
    ax_diversity.set_xlabel("temperature T")
    ax_diversity.set_ylabel(f"distinct outputs (of {samples} samples)")
    ax_diversity.set_title("Diversity on one date")
    ax_diversity.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax_accuracy.set_xlabel("temperature T")
    ax_accuracy.set_ylabel(f"exact match ({sentences} dates)")
    ax_accuracy.set_title("Accuracy")
    ax_accuracy.legend()
    return fig
