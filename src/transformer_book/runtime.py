"""What the chapters need to run: seeds, ``by_device``, checks of claims, figure style, heatmaps
and ``glue`` (and, from :mod:`transformer_book.progress`, the training loop's progress bar). Written
by hand. This is the book's side of the package: no library module (models, data, training,
generation, loaders) imports it, and ``tests/test_package_layers.py`` keeps it so. Plotting is
imported only when first used.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import platform
import random
import re
import sys
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import torch

from transformer_book.checks import refusal
from transformer_book.helpers import device, on_accelerator
from transformer_book.progress import (
    progress as progress,  # re-exported: the chapters draw their own loops' bars with it
)

if TYPE_CHECKING:  # plotting is imported where it is used, not with the models
    from matplotlib.axes import Axes

T = TypeVar("T")


#: Okabe-Ito colours: distinguishable with every common colour-vision deficiency.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000"]


#: Perceptually uniform colour map for heatmaps, readable in greyscale print.
HEATMAP_CMAP = "viridis"


def by_device(cpu: T, accelerator: T) -> T:
    """Pick a size that is measured, not trained: the CPU value is the book's.

    Only for the sizes of a measurement, such as the lengths of a timing or memory sweep, where an
    accelerator can afford longer inputs and no claim depends on the choice beyond what is
    measured. Never for the settings of an experiment whose result a claim checks (steps, batch
    size, model size, learning rate, data): a GPU must run the same experiment as the CPU, only
    faster. A bigger training budget on a GPU once turned a chapter's lesson round (a model
    without positions learned them from the causal mask). ``tests/test_sources.py`` refuses
    ``by_device`` anywhere but the right-hand side of a plain assignment to a measured size.
    """
    return accelerator if on_accelerator() else cpu


#: The environment variable that picks the run: 0 (or unset) is the book's own run.
SEED_VARIABLE = "BOOK_SEED"


#: When set, :func:`check` appends each claim to this file (one JSON object a line) instead of
#: raising, so that ``make robustness`` sees every claim of a run, passed or not. Since that turns
#: every check off, it is honoured only in a kernel that ``scripts/robustness.py`` started itself:
#: :data:`SWEEP_PARENT_VARIABLE` must name this process's parent. Set anywhere else (a shell's
#: leftover export, a CI variable, ``make book``), :func:`check` refuses it.
CLAIMS_LOG_VARIABLE = "BOOK_CLAIMS_LOG"


#: The sweep's process id, which the sweep gives the kernels it starts: a kernel honours the claims
#: log only when its own parent is that process.
SWEEP_PARENT_VARIABLE = "BOOK_SWEEP_PARENT"


#: Where a reader reports a check that failed on their machine.
ISSUES_URL = "https://github.com/transformer-book/transformer-book/issues"


def book_seed(seed: int = 0) -> int:
    """The seed a chapter's ``seed`` stands for in this run.

    Chapters write ``book_seed(1)`` where they would write ``1``. In the book's own run
    (``BOOK_SEED`` unset or 0) that is 1; with ``BOOK_SEED=k`` it is ``1 + 1000 k``, so every
    seed of the chapter (weights, data, sampling) moves together and never collides with
    another of its seeds. ``make robustness`` re-runs the chapters over many values of k.
    """
    text = os.environ.get(SEED_VARIABLE, "0").strip() or "0"
    try:
        run = int(text)
    except ValueError:
        raise ValueError(f"{SEED_VARIABLE} must be a whole number such as 0 or 3, got {text!r}") from None
    if run < 0:
        raise ValueError(f"{SEED_VARIABLE} must be 0 or more, got {run}")
    return seed + 1000 * run


def seed_everything(seed: int = 0) -> None:
    """Seed Python, NumPy and PyTorch with ``book_seed(seed)``.

    Two runs on the same hardware, thread count and PyTorch build then print identical numbers.
    Another CPU, thread count, GPU or PyTorch version rounds differently, so a training run can
    end elsewhere: that is why every claim about a trained result goes through :func:`check`.
    """
    seed = book_seed(seed)
    random.seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


class ClaimFailed(AssertionError):
    """A claim the text makes about a computed result does not hold in this run."""


def show_refusal(call: Callable[[], object], *, label: str | None = None, width: int = 100) -> str:
    """Run ``call``, which the book's code should refuse; print its ValueError, wrapped to ``width``
    columns (after ``label``, naming the problem, if given), and return the message.

    The chapters show a refused call with it, and their checks then read the message. Any other
    exception propagates.

    Raises:
        AssertionError: if ``call`` raises nothing, so the text's "this is refused" is false.
    """
    message = refusal(call)
    if message is None:
        raise AssertionError(f"{label or 'the call'} raised no ValueError, but the text shows it refused")
    prefix = f"{label}: " if label else ""
    print(textwrap.fill(f"{prefix}ValueError: {message}", width=width, subsequent_indent="    "))
    return message


def describe_run() -> str:
    """The facts that make runs differ: seed, device, threads, PyTorch version and processor."""
    run = book_seed(0) // 1000
    where = device()
    name = torch.cuda.get_device_name(where) if where.type == "cuda" else processor_name()
    return (
        f"{SEED_VARIABLE}={run}, device {where.type} ({name}), {torch.get_num_threads()} CPU threads, "
        f"PyTorch {torch.__version__}, Python {platform.python_version()}"
    )


def processor_name() -> str:
    """The CPU's model name where the system tells it (Linux), else its architecture."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def check(
    claim: str,
    value: float | bool,
    *,
    at_least: float | None = None,
    at_most: float | None = None,
    family: str | None = None,
) -> None:
    """Check a claim the text makes about a computed result; explain it to the reader if it fails.

    ``value`` is the measured number, held to ``at_least`` and/or ``at_most`` (both inclusive),
    or a bool that must be true. A failed claim raises :class:`ClaimFailed` with the claim, the
    value, the threshold, the run (seed, device, threads, versions) and what to do.

    A sentence the text chooses by the result ("beats" or "falls behind") is one conclusion with
    several branches: give each branch's check the same ``family``, naming the conclusion. The
    sweep records which branch every run took, and ``tests/test_robustness_summary.py`` fails when
    runs of a chapter took different branches, since a lesson that flips with the seed is not one.

    With ``BOOK_CLAIMS_LOG`` set by ``make robustness`` the claim is appended to that file instead
    and nothing is raised, so one run reports all of its claims. Set anywhere else it would
    silently turn every check into a log line, so it is refused (see :data:`CLAIMS_LOG_VARIABLE`).
    """
    if not claim:
        raise ValueError("check needs the claim in words, for the reader who sees it fail")
    if isinstance(value, (torch.Tensor, np.ndarray, np.generic)):
        value = _plain(claim, value)
    bounded = at_least is not None or at_most is not None
    if not bounded and not isinstance(value, bool):
        raise TypeError(f"check {claim!r}: give a bool, or a number with at_least and/or at_most")
    if bounded and isinstance(value, bool):
        raise TypeError(f"check {claim!r}: a bool takes no bounds")
    for name, bound in (("at_least", at_least), ("at_most", at_most)):
        if bound is not None and not math.isfinite(float(bound)):
            raise ValueError(f"check {claim!r}: {name}={bound} is not a finite bound, so nothing could fail it")
    if family is not None and not family:
        raise ValueError(f"check {claim!r}: a family names the conclusion its branches share; give it words")
    number = float(value)
    if bounded:
        margins = [
            number - at_least if at_least is not None else math.inf,
            at_most - number if at_most is not None else math.inf,
        ]
        margin: float | None = min(margins)
        passed = not math.isnan(number) and margin >= 0  # type: ignore[operator]
    else:
        margin, passed = None, bool(value)

    log = _sweep_log()
    if log:
        record = {
            "claim": claim,
            "value": number,
            "at_least": at_least,
            "at_most": at_most,
            "margin": margin,
            "passed": passed,
            "family": family,
        }
        with open(log, "a", encoding="utf-8") as file:
            file.write(json.dumps(record) + "\n")
        return
    if passed:
        return
    if bounded:
        bounds = " and ".join(
            text
            for text in (
                f"at least {at_least:.6g}" if at_least is not None else "",
                f"at most {at_most:.6g}" if at_most is not None else "",
            )
            if text
        )
        obtained = f"this run measured {number:.6g}; the text needs {bounds}"
    else:
        obtained = "this run found it false"
    raise ClaimFailed(
        f"The text claims: {claim}.\n"
        f"But {obtained}.\n"
        f"Run: {describe_run()}.\n"
        "Results of training differ a little between machines, so a claim can fail on yours although "
        f"it held when the book was built. Re-run the chapter with another seed ({SEED_VARIABLE}=1 in "
        f"the environment, or os.environ['{SEED_VARIABLE}'] = '1' in the first cell), and please report "
        f"this message at {ISSUES_URL}."
    )


def _sweep_log() -> str | None:
    """The robustness sweep's claims log, or None in every other run; refuses a stray setting."""
    log = os.environ.get(CLAIMS_LOG_VARIABLE)
    if not log:
        return None
    if os.environ.get(SWEEP_PARENT_VARIABLE, "").strip() != str(os.getppid()):
        raise RuntimeError(
            f"{CLAIMS_LOG_VARIABLE} is set to {log!r}, which would turn every check of the book into a "
            f"log line. Only make robustness (scripts/robustness.py) may set it, in the kernels it starts; "
            f"unset it (unset {CLAIMS_LOG_VARIABLE}) and run again."
        )
    return log


def use_book_style() -> None:
    """Apply the book's figure style: one look for every figure in the book.

    Figures keep an opaque white background so they stay readable on the
    theme's dark mode, use colour-blind-safe colours, and are sized for a
    page column.
    """
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update(
        {
            "figure.figsize": (6.4, 3.8),
            "figure.dpi": 110,
            "figure.facecolor": "white",
            "figure.constrained_layout.use": True,
            "savefig.facecolor": "white",
            "savefig.bbox": "tight",
            "font.size": 10.5,
            "axes.titlesize": 11.5,
            "axes.labelsize": 10.5,
            "axes.facecolor": "white",
            "axes.edgecolor": "#333333",
            "axes.grid": True,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "axes.prop_cycle": cycler(color=PALETTE),
            "grid.color": "#dddddd",
            "grid.linewidth": 0.6,
            "image.cmap": HEATMAP_CMAP,
            "legend.frameon": False,
            "lines.linewidth": 2.0,
            "lines.markersize": 5,
        }
    )


def plot_heatmap(
    ax: Axes,
    values: Any,
    *,
    row_labels: list[str] | None = None,
    col_labels: list[str] | None = None,
    annotate: bool = False,
    fmt: str = "{:.2f}",
    vmin: float | None = 0.0,
    vmax: float | None = 1.0,
    colorbar_label: str | None = None,
) -> None:
    """Draw a matrix (attention weights, an encoding table) in the book's style."""
    matrix = _to_numpy(values)
    if matrix.ndim != 2:
        raise ValueError(f"plot_heatmap needs a 2-D matrix, got shape {tuple(matrix.shape)}")
    image = ax.imshow(matrix, cmap=HEATMAP_CMAP, vmin=vmin, vmax=vmax, aspect="auto")
    ax.grid(False)
    if row_labels is not None:
        ax.set_yticks(range(len(row_labels)), labels=row_labels)
    if col_labels is not None:
        ax.set_xticks(range(len(col_labels)), labels=col_labels)
    if annotate:
        low = matrix.min() if vmin is None else vmin
        high = matrix.max() if vmax is None else vmax
        middle = (low + high) / 2
        for (row, col), value in np.ndenumerate(matrix):
            colour = "black" if value > middle else "white"
            ax.text(col, row, fmt.format(value), ha="center", va="center", color=colour, fontsize=9)
    if colorbar_label is not None:
        ax.figure.colorbar(image, ax=ax, label=colorbar_label)


#: The ink of the arrows and outlines of the book's diagrams, and of the labels beside them.
DIAGRAM_INK, LABEL_INK = "#333333", "#555555"


def diagram_arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    label: str | None = None,
    *,
    side: str = "right",
    color: str = DIAGRAM_INK,
    lw: float = 1.2,
) -> None:
    """Draw an arrow of a diagram from ``start`` to ``end`` (data coordinates).

    ``label``, if given, is written beside the arrow's middle on ``side`` ("right" or "left"),
    in the monospaced grey of the book's diagrams: the shape of the tensor the arrow carries.
    """
    if side not in ("right", "left"):
        raise ValueError(f"diagram_arrow: side must be 'right' or 'left', got {side!r}")
    if lw <= 0:
        raise ValueError(f"diagram_arrow: lw must be positive, got {lw}")
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        zorder=1,
        arrowprops={"arrowstyle": "-|>", "color": color, "lw": lw, "shrinkA": 0, "shrinkB": 0},
    )
    if label is not None:
        shift = 0.12 if side == "right" else -0.12
        ax.text(
            start[0] + shift,
            (start[1] + end[1]) / 2,
            label,
            ha="left" if side == "right" else "right",
            va="center",
            fontsize=9,
            color=LABEL_INK,
            family="monospace",
        )


def diagram_box(
    ax: Axes,
    xy: tuple[float, float],
    size: tuple[float, float],
    title: str,
    code: str,
    fill: str,
    *,
    copies: int = 0,
    dashed: bool = False,
    fontsize: float = 10,
) -> None:
    """Draw a rounded box of a diagram centred at ``xy``, of ``size`` (width, height): the
    paper's name of the step in bold, and below it, in monospace, the book's code for it.

    ``copies`` > 0 draws that many boxes behind it, each offset up and right by 0.1: one per
    head, or per layer. ``dashed`` outlines an optional step.
    """
    width, height = size
    if width <= 0 or height <= 0:
        raise ValueError(f"diagram_box: size must be positive, got {size}")
    if copies < 0:
        raise ValueError(f"diagram_box: copies must be at least 0, got {copies}")
    from matplotlib.patches import FancyBboxPatch

    x, y = xy
    for copy in range(copies, -1, -1):
        offset = 0.1 * copy
        ax.add_patch(
            FancyBboxPatch(
                (x - width / 2 + offset, y - height / 2 + offset),
                width,
                height,
                boxstyle="round,pad=0.02,rounding_size=0.1",
                facecolor=fill,
                edgecolor="#444444",
                linewidth=1.0,
                linestyle="--" if dashed else "-",
                zorder=2 + 0.1 * (copies - copy),
            )
        )
    ax.text(x, y + 0.13, title, ha="center", va="center", fontsize=fontsize, fontweight="bold", zorder=4)
    ax.text(
        x,
        y - 0.15,
        code,
        ha="center",
        va="center",
        fontsize=fontsize - 1,
        family="monospace",
        color=DIAGRAM_INK,
        zorder=4,
    )


def number_cells(
    ax: Axes,
    numbers: Any,
    left: float,
    top: float,
    colour: str | Callable[[Any], str],
    *,
    fmt: str = "{:g}",
    width: float = 1.0,
    alpha: float = 0.35,
    fontsize: float = 10,
) -> None:
    """Draw a vector or a matrix as a grid of shaded cells, each ``width`` by 1 and showing its
    number formatted by ``fmt``, the grid's top-left corner at (``left``, ``top``).

    A vector is drawn as one row. ``colour`` is one colour for every cell, or a function of
    the cell's number that returns its colour.
    """
    grid = _to_numpy(numbers)
    if grid.ndim == 1:
        grid = grid[None]
    if grid.ndim != 2:
        raise ValueError(f"number_cells needs a vector or a matrix, got shape {tuple(grid.shape)}")
    if width <= 0:
        raise ValueError(f"number_cells: width must be positive, got {width}")
    from matplotlib.patches import Rectangle

    for (row, column), number in np.ndenumerate(grid):
        corner = (left + column * width, top - row - 1)
        fill = colour(number) if callable(colour) else colour
        ax.add_patch(Rectangle(corner, width, 1, facecolor=fill, alpha=alpha, edgecolor="none"))
        ax.add_patch(Rectangle(corner, width, 1, fill=False, edgecolor="white", linewidth=1.5))
        ax.text(
            left + (column + 0.5) * width,
            top - row - 0.5,
            fmt.format(number),
            ha="center",
            va="center",
            fontsize=fontsize,
        )


def glue(name: str, value: Any, display: bool | None = None) -> None:
    """Glue a computed value into the book's prose, or show it where myst-nb is absent.

    - Tensors and NumPy scalars holding one number become plain Python numbers,
      because ``{glue:text}`` parses the value's text form.
    - In the book (myst-nb installed) the value is stored under ``name``. Whether
      the cell also shows it: ``display`` if given, else yes for tables and other
      rich values, and no for numbers and strings, which exist for the prose (a
      column of bare numbers under a code cell teaches nothing). A figure glued
      with ``display=False`` is shown only where the text places it.
    - In Colab (no myst-nb) the value is displayed, with its name for numbers and
      strings, so the reader sees what the website would have inserted.
    - Figures are closed afterwards so they are not drawn a second time.
    """
    value = _plain(name, value)
    if isinstance(value, str):
        log = _sweep_log()
        if log:  # the sweep compares each sentence's wording, numbers aside, across its runs
            with open(log, "a", encoding="utf-8") as file:
                file.write(json.dumps({"glued": name, "wording": wording(value)}) + "\n")
    try:
        from myst_nb import glue as myst_glue
    except ImportError:  # Colab, or a bare Python environment
        myst_glue = None

    if myst_glue is not None:
        if display is None:
            display = not isinstance(value, (numbers.Number, str))
        myst_glue(name, value, display=display)
    else:
        from IPython.display import display as show

        if isinstance(value, (numbers.Number, str)):
            print(f"{name} = {value}")
        else:
            show(value)
    if "matplotlib" in sys.modules:  # a figure can only come from a loaded matplotlib
        import matplotlib.pyplot as plt
        from matplotlib.figure import Figure

        if isinstance(value, Figure):
            plt.close(value)


#: A number as prose writes it: a sign, digits with thousands separators, decimals, an exponent, a percent.
_NUMBER = re.compile(r"[-+\u2212]?\d[\d,]*(?:\.\d+)?(?:[eE][-+]?\d+)?%?")


def wording(text: str) -> str:
    """A glued sentence with every number replaced by ``#``: two runs whose sentences differ only in
    their numbers say the same thing; a different wording is a different conclusion."""
    return _NUMBER.sub("#", text)


def _plain(name: str, value: Any) -> Any:
    """Turn one-number tensors and NumPy scalars into Python numbers; refuse arrays."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"glue {name!r}: glue numbers, not tensors of shape {tuple(value.shape)}")
        return value.item()
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise TypeError(f"glue {name!r}: glue numbers, not arrays of shape {value.shape}")
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _to_numpy(values: Any) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        return values.detach().cpu().numpy()
    return np.asarray(values)
