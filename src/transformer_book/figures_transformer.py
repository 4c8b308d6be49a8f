"""Figures and plumbing of Part III (block-anatomy, encoder, decoder, full-model). Written by hand.

Each ``draw_*`` function draws one figure of a chapter from numbers the chapter computed and passes
in; none trains or measures anything. The other helpers are the chapters' plumbing: the shape
recorder of the encoder chapter, the comparisons with PyTorch's modules of the encoder and decoder
chapters (shown in full once, in full-model), and small table builders. matplotlib and pandas are
imported inside the functions that use them, so importing this module loads neither.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import Tensor, nn

import transformer_book.model as model_module
from transformer_book.runtime import PALETTE, diagram_arrow, diagram_box, plot_heatmap

if TYPE_CHECKING:
    import pandas as pd  # type: ignore[import-untyped]
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _check_curves(curves: Mapping[str, Sequence[float]], what: str) -> None:
    if not curves or any(len(values) == 0 for values in curves.values()):
        raise ValueError(
            f"{what}: every curve needs at least one value, got lengths "
            f"{ {name: len(values) for name, values in curves.items()} }"
        )


# ---------------------------------------------------------------------------------------------
# Plumbing shared by several chapters


def pad_token_ids(
    sentences: Sequence[str], token_id: Mapping[str, int], pad_id: int, *, device: torch.device | None = None
) -> tuple[Tensor, Tensor]:
    """Split each sentence at its spaces and look up its words: the ids, (batch, longest), padded
    with pad_id after each sentence's end, and each sentence's length in words, (batch,).

    Raises:
        ValueError: if there is no sentence, a sentence is empty, or a word is not in token_id.
    """
    words = [sentence.split() for sentence in sentences]
    if not words or any(not sentence for sentence in words):
        raise ValueError(f"pad_token_ids needs at least one sentence and no empty one, got {list(sentences)!r}")
    unknown = sorted({word for sentence in words for word in sentence} - set(token_id))
    if unknown:
        raise ValueError(f"pad_token_ids: words not in the vocabulary: {unknown}")
    longest = max(len(sentence) for sentence in words)
    ids = [[token_id[word] for word in sentence] + [pad_id] * (longest - len(sentence)) for sentence in words]
    return torch.tensor(ids, device=device), torch.tensor([len(sentence) for sentence in words], device=device)


def draw_heatmap_pair(
    matrices: Sequence[Any],
    titles: Sequence[str],
    *,
    row_labels: Sequence[Sequence[str]],
    col_labels: Sequence[Sequence[str]],
    xlabel: str,
    ylabel: str,
    colorbar_label: str,
    figsize: tuple[float, float],
    sharey: bool = False,
    rotate_xticks: bool = False,
    fmt: str = "{:.2f}",
    vmin: float = 0.0,
    vmax: float = 1.0,
) -> Figure:
    """Two annotated heatmaps side by side (attention weights, changes of outputs), in the book's
    style: one title and one set of labels per panel, the y label on the left panel and the colour
    bar on the right one."""
    if len(matrices) != 2 or len(titles) != 2 or len(row_labels) != 2 or len(col_labels) != 2:
        raise ValueError(
            f"draw_heatmap_pair draws two panels: got {len(matrices)} matrices, {len(titles)} titles, "
            f"{len(row_labels)} row labels and {len(col_labels)} column labels"
        )
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=figsize, sharey=sharey)
    for index, ax in enumerate(axes):
        plot_heatmap(
            ax,
            matrices[index],
            row_labels=list(row_labels[index]),
            col_labels=list(col_labels[index]),
            annotate=True,
            fmt=fmt,
            vmin=vmin,
            vmax=vmax,
            colorbar_label=colorbar_label if index == 1 else None,
        )
        ax.set_title(titles[index])
        ax.set_xlabel(xlabel)
        if rotate_xticks:
            ax.tick_params(axis="x", labelrotation=45)
    axes[0].set_ylabel(ylabel)
    return fig


# ---------------------------------------------------------------------------------------------
# block-anatomy


def draw_residual_gradients(residual: Sequence[float], plain: Sequence[float]) -> Figure:
    """Gradient norm per layer of a stack of feed-forward layers, with and without residual
    connections, on a logarithmic axis; layer 1 is nearest the input."""
    _check_curves({"residual": residual, "plain": plain}, "draw_residual_gradients")
    if len(residual) != len(plain):
        raise ValueError(f"draw_residual_gradients: {len(residual)} residual layers but {len(plain)} plain ones")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    layer_numbers = range(1, len(plain) + 1)
    ax.semilogy(layer_numbers, residual, marker="o", label="residual: x + F(x)")
    ax.semilogy(layer_numbers, plain, marker="s", label="plain: F(x)")
    ax.set_xlabel("layer (1 = nearest the input)")
    ax.set_ylabel("gradient norm of the layer's parameters")
    ax.set_title(f"{len(plain)} feed-forward layers, at initialisation")
    ax.legend()
    return fig


def compare_feed_forward_with_pytorch(ffn: nn.Module, x: Tensor, num_heads: int = 4) -> float:
    """Copy the feed-forward network of a fresh nn.TransformerEncoderLayer (dropout 0, the sizes of
    ``ffn``, a PositionwiseFeedForward) into ``ffn`` with load_torch_feed_forward, and return the
    largest |ffn(x) - PyTorch's linear2(activation(linear1(x)))|."""
    from transformer_book.torch_loading import load_torch_feed_forward

    parts: Any = ffn
    their_layer = nn.TransformerEncoderLayer(
        d_model=parts.d_model, nhead=num_heads, dim_feedforward=parts.d_ff, dropout=0.0, batch_first=True
    ).to(x.device)
    load_torch_feed_forward(parts, their_layer)
    with torch.no_grad():
        theirs = their_layer.linear2(their_layer.activation(their_layer.linear1(x)))
        return float((ffn(x) - theirs).abs().max().item())


def compare_layer_norms(shapes: Iterable[tuple[int, ...]], device: torch.device) -> float:
    """For each shape: an nn.LayerNorm over its last dimension with a random gain and shift, copied
    into the book's LayerNorm (load_torch_layer_norm), both applied to inputs 3 N(0, 1) + 1 of that
    shape. Returns the largest |difference| over all shapes."""
    from transformer_book.model import LayerNorm
    from transformer_book.torch_loading import load_torch_layer_norm

    differences = []
    for shape in shapes:
        theirs = nn.LayerNorm(shape[-1]).to(device)
        with torch.no_grad():
            theirs.weight.normal_()
            theirs.bias.normal_()
        ours = LayerNorm(shape[-1]).to(device)
        load_torch_layer_norm(ours, theirs)
        x = 3 * torch.randn(shape, device=device) + 1
        with torch.no_grad():
            differences.append((ours(x) - theirs(x)).abs().max().item())
    if not differences:
        raise ValueError("compare_layer_norms needs at least one shape")
    return float(max(differences))


def layer_norm_variant_table(
    variant: Callable[[Tensor, Tensor, Tensor], Tensor], cases: Iterable[tuple[str, int, float]], device: torch.device
) -> pd.DataFrame:
    """Compare a LayerNorm variant, variant(x, gamma, beta), with nn.LayerNorm on 1000 inputs
    5 + spread N(0, 1) per case (name, d_model, spread): the largest |difference| and the mean
    spread (biased standard deviation over the features) of each one's outputs, a row per case."""
    import pandas as pd

    variant_rows = []
    for name, d_model, spread in cases:
        reference = nn.LayerNorm(d_model).to(device)
        x = 5 + spread * torch.randn(1000, d_model, device=device)
        with torch.no_grad():
            expected = reference(x)
            varied = variant(x, reference.weight, reference.bias)
        variant_rows.append(
            {
                "inputs": name,
                "max |variant - nn.LayerNorm|": (varied - expected).abs().max().item(),
                "output std, variant": varied.std(dim=-1, unbiased=False).mean().item(),
                "output std, nn.LayerNorm": expected.std(dim=-1, unbiased=False).mean().item(),
            }
        )
    if not variant_rows:
        raise ValueError("layer_norm_variant_table needs at least one case")
    return pd.DataFrame(variant_rows).set_index("inputs")


#: The steps of one sub-layer, bottom to top, in the paper's order and in the pre-LN order.
POST_LN_STEPS = ("Sublayer", "Dropout", "+", "LayerNorm")
PRE_LN_STEPS = ("LayerNorm", "Sublayer", "Dropout", "+")


def _draw_sublayer(ax: Axes, steps: Sequence[str], title: str) -> None:
    """Draw one sub-layer as boxes from bottom to top, with the residual path as a line on the left."""
    from matplotlib.patches import Circle, FancyBboxPatch

    colours = {"Sublayer": PALETTE[0], "Dropout": PALETTE[4], "LayerNorm": PALETTE[2], "+": "#999999"}
    ys = {step: 1.4 * (index + 1) for index, step in enumerate(steps)}
    top = 1.4 * (len(steps) + 1)
    ax.annotate("", xy=(0, ys[steps[0]] - 0.35), xytext=(0, 0.2), arrowprops={"arrowstyle": "->"})
    ax.text(0, 0, "x", ha="center", va="top", fontsize=12)
    for index, step in enumerate(steps):
        y = ys[step]
        if step == "+":
            ax.add_patch(Circle((0, y), 0.3, facecolor="white", edgecolor="#333333"))
            ax.text(0, y, "+", ha="center", va="center", fontsize=14)
        else:
            ax.add_patch(
                FancyBboxPatch(
                    (-1.1, y - 0.35),
                    2.2,
                    0.7,
                    boxstyle="round,pad=0.05",
                    facecolor=colours[step],
                    alpha=0.3,
                    edgecolor=colours[step],
                )
            )
            ax.text(0, y, step, ha="center", va="center", fontsize=10.5)
        if index + 1 < len(steps):
            following = ys[steps[index + 1]] - (0.3 if steps[index + 1] == "+" else 0.35)
        else:
            following = top
        start = y + (0.3 if step == "+" else 0.35)
        ax.annotate("", xy=(0, following), xytext=(0, start), arrowprops={"arrowstyle": "->"})
    # The residual path: from just above x, around the left, into the "+".
    plus = ys["+"]
    ax.plot([0, -1.8, -1.8], [0.5, 0.5, plus], color=PALETTE[1], linewidth=1.8)
    ax.annotate(
        "", xy=(-0.3, plus), xytext=(-1.8, plus), arrowprops={"arrowstyle": "->", "color": PALETTE[1], "lw": 1.8}
    )
    ax.text(-1.9, (0.5 + plus) / 2, "residual\n(identity)", ha="right", va="center", fontsize=9, color=PALETTE[1])
    ax.text(0, top + 0.05, "output", ha="center", va="bottom", fontsize=11)
    ax.set_title(title)
    ax.set_xlim(-3.6, 1.6)
    ax.set_ylim(-0.6, top + 0.6)
    ax.set_aspect("equal")
    ax.set_axis_off()


def draw_sublayer_orders() -> Figure:
    """One sub-layer with its residual connection, post-LN (the paper, left) and pre-LN (right),
    as boxes read from bottom to top."""
    import matplotlib.pyplot as plt

    fig, (post_ax, pre_ax) = plt.subplots(1, 2, figsize=(7.5, 4.6))
    _draw_sublayer(post_ax, POST_LN_STEPS, "post-LN (the paper)")
    _draw_sublayer(pre_ax, PRE_LN_STEPS, "pre-LN")
    return fig


def draw_block_gradients(gradients: Mapping[str, Tensor], mean_gradients: Mapping[str, Tensor]) -> Figure:
    """Gradient norm per block, log scale: for each name (post-LN, pre-LN) a thin line per
    initialisation (a row of ``gradients[name]``, shape (seeds, blocks)) and a thick line for
    ``mean_gradients[name]``."""
    if set(gradients) != set(mean_gradients) or not gradients:
        raise ValueError(
            f"draw_block_gradients: gradients and means name different stacks: "
            f"{sorted(gradients)} and {sorted(mean_gradients)}"
        )
    shapes = {name: tuple(norms.shape) for name, norms in gradients.items()}
    if len(set(shapes.values())) != 1 or len(next(iter(shapes.values()))) != 2:
        raise ValueError(f"draw_block_gradients: each stack needs (seeds, blocks) norms of one shape, got {shapes}")
    import matplotlib.pyplot as plt

    seeds, blocks = next(iter(shapes.values()))
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    block_numbers = range(1, blocks + 1)
    for colour, (name, norms) in zip(PALETTE, gradients.items()):
        for seed_norms in norms:
            ax.semilogy(block_numbers, seed_norms, color=colour, alpha=0.25, linewidth=1)
        ax.semilogy(block_numbers, mean_gradients[name], color=colour, marker="o", label=f"{name}, mean of {seeds}")
    ax.set_xlabel("block (1 = nearest the input)")
    ax.set_ylabel("gradient norm of the block's parameters")
    ax.set_title(f"{blocks} blocks at initialisation")
    ax.legend()
    return fig


def draw_warmup_losses(
    runs: Mapping[tuple[str, str], Sequence[float]], *, vocab_size: int, num_blocks: int, learning_rate: float
) -> Figure:
    """Training loss per step of each (order, warm-up) run, keyed ("post-LN" or "pre-LN",
    "no warm-up" or "warm-up"), with the loss of uniform guessing, ln(vocab_size), dotted."""
    _check_curves({f"{order}, {warmup}": losses for (order, warmup), losses in runs.items()}, "draw_warmup_losses")
    styles = {"no warm-up": "-", "warm-up": "--"}
    unknown = [key for key in runs if key[1] not in styles or key[0] not in ("post-LN", "pre-LN")]
    if unknown:
        raise ValueError(
            f"draw_warmup_losses: unknown runs {unknown}; keys are (post-LN or pre-LN, no warm-up or warm-up)"
        )
    import matplotlib.pyplot as plt

    steps = max(len(losses) for losses in runs.values())
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for (order, warmup_name), losses in runs.items():
        colour = PALETTE[0] if order == "post-LN" else PALETTE[1]
        ax.plot(range(1, len(losses) + 1), losses, styles[warmup_name], color=colour, label=f"{order}, {warmup_name}")
    chance = math.log(vocab_size)
    ax.axhline(chance, color="#777777", linewidth=1, linestyle=":")
    ax.text(steps, chance + 0.05, f"chance: ln {vocab_size}", ha="right", va="bottom", fontsize=9, color="#555555")
    ax.set_xlabel("training step")
    ax.set_ylabel("cross-entropy loss (nats)")
    ax.set_title(f"{num_blocks} blocks, Adam at learning rate {learning_rate:g}")
    ax.set_ylim(0, 3.0)
    ax.legend(ncols=2, fontsize=9, loc="lower left")
    return fig


# ---------------------------------------------------------------------------------------------
# encoder

#: The colour (index into PALETTE) of each step of the shape flow; attention steps are blue (0).
_SHAPE_STEP_COLOURS = {
    "token ids": 7,
    "token embeddings": 7,
    "+ positional encoding": 7,
    "add & norm": 2,
    "add & norm, layer output": 2,
    "FFN hidden layer, x W_1 + b_1": 4,
    "FFN output": 4,
    "memory, after N layers": 7,
}
#: The first and the last step of one encoder layer, which the shape flow brackets.
_FIRST_LAYER_STEP, _LAST_LAYER_STEP = "queries Q = x W^Q (K, V alike)", "add & norm, layer output"


@contextlib.contextmanager
def _recording_function(
    module: Any, name: str, steps: Callable[[Any], Iterable[tuple[str, Tensor]]], record: Callable[[str, Tensor], None]
) -> Iterator[None]:
    """Replace module.<name> by a wrapper that records the shapes it returns, for one ``with``."""
    original = getattr(module, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        for step, tensor in steps(result):
            record(step, tensor)
        return result

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, original)


def record_encoder_shapes(
    encoder: nn.Module, embedding: nn.Module, positional_encoding: nn.Module, ids: Tensor, mask: Tensor
) -> dict[str, tuple[int, ...]]:
    """Encode ``ids`` once and return the shape of every step of the first layer, in order.

    Forward hooks record the outputs of the modules (the embedding, the projections, each
    sub-layer, the whole encoder); ``split_heads`` and ``scaled_dot_product_attention``, plain
    functions, are wrapped for the one call. Hooks and wrappers are removed afterwards.
    """
    recorded: dict[str, tuple[int, ...]] = {}

    def record(step: str, tensor: Tensor) -> None:
        recorded.setdefault(step, tuple(tensor.shape))  # the first call: layer 1

    def record_output(step: str) -> Callable[[nn.Module, Any, Tensor], None]:
        return lambda module, inputs, output: record(step, output)

    stack: Any = encoder
    layer = stack.layers[0]
    hooks = [
        embedding.register_forward_hook(lambda module, inputs, output: record("token ids", inputs[0])),
        embedding.register_forward_hook(record_output("token embeddings")),
        positional_encoding.register_forward_hook(record_output("+ positional encoding")),
        layer.self_attention.w_q.register_forward_hook(record_output(_FIRST_LAYER_STEP)),
        layer.self_attention.w_o.register_forward_hook(record_output("merged heads, times W^O")),
        layer.attention_sublayer.register_forward_hook(record_output("add & norm")),
        layer.feed_forward.linear_1.register_forward_hook(record_output("FFN hidden layer, x W_1 + b_1")),
        layer.feed_forward.linear_2.register_forward_hook(record_output("FFN output")),
        layer.feed_forward_sublayer.register_forward_hook(record_output(_LAST_LAYER_STEP)),
        encoder.register_forward_hook(record_output("memory, after N layers")),
    ]
    try:
        with (
            torch.no_grad(),
            _recording_function(model_module, "split_heads", lambda q: [("split into heads", q)], record),
            _recording_function(
                model_module,
                "scaled_dot_product_attention",
                lambda result: [("attention weights, per head", result[1]), ("heads' outputs", result[0])],
                record,
            ),
        ):
            encoder(positional_encoding(embedding(ids)), mask=mask)
    finally:
        for hook in hooks:
            hook.remove()
    return recorded


def draw_shape_flow(shapes: Mapping[str, tuple[int, ...]], size_names: Mapping[int, str], num_layers: int) -> Figure:
    """The recorded steps of an encoder as a vertical flow of boxes, each with its shape in names
    (``size_names`` maps each size to its name) and in numbers, and a bracket around one layer."""
    steps = list(shapes)
    missing = [step for step in (_FIRST_LAYER_STEP, _LAST_LAYER_STEP) if step not in shapes]
    if missing:
        raise ValueError(f"draw_shape_flow: the shapes lack the steps {missing}, which bound one layer")
    unnamed = sorted({size for shape in shapes.values() for size in shape} - set(size_names))
    if unnamed:
        raise ValueError(f"draw_shape_flow: sizes without a name: {unnamed}")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    first_in_layer, last_in_layer = steps.index(_FIRST_LAYER_STEP), steps.index(_LAST_LAYER_STEP)
    row_height, box_height = 1.0, 0.72
    fig, ax = plt.subplots(figsize=(8.2, 9.2))
    ax.set_axis_off()
    for row, step in enumerate(steps):
        top = -row * row_height
        colour = PALETTE[_SHAPE_STEP_COLOURS.get(step, 0)]
        ax.add_patch(
            FancyBboxPatch(
                (0, top - box_height),
                10,
                box_height,
                boxstyle="round,pad=0.02,rounding_size=0.12",
                facecolor=colour,
                alpha=0.16,
                edgecolor=colour,
                linewidth=1.4,
            )
        )
        shape = shapes[step]
        names = ", ".join(size_names[size] for size in shape)
        numbers = ", ".join(str(size) for size in shape)
        ax.text(0.25, top - box_height / 2, step, va="center", fontsize=10)
        ax.text(
            9.75,
            top - box_height / 2,
            f"({names}) = ({numbers})",
            va="center",
            ha="right",
            fontsize=9,
            family="monospace",
        )
        if row < len(steps) - 1:
            ax.annotate(
                "",
                xy=(5, top - row_height),
                xytext=(5, top - box_height),
                arrowprops={"arrowstyle": "->", "color": "#333333", "linewidth": 1.0},
            )
    # A bracket around the steps of one layer.
    bracket_top = -first_in_layer * row_height + 0.05
    bracket_bottom = -last_in_layer * row_height - box_height - 0.05
    ax.plot(
        [10.25, 10.45, 10.45, 10.25],
        [bracket_top, bracket_top, bracket_bottom, bracket_bottom],
        color="#333333",
        linewidth=1.2,
    )
    ax.text(
        10.6,
        (bracket_top + bracket_bottom) / 2,
        f"one encoder layer,\nrepeated N = {num_layers} times",
        va="center",
        fontsize=10,
    )
    ax.set_xlim(-0.1, 13.2)
    ax.set_ylim(-len(steps) * row_height + 0.1, 0.15)
    return fig


def compare_encoders(
    cases: Mapping[str, tuple[nn.Module, nn.Module, Callable[[Any, Any], None]]], x: Tensor, mask: Tensor
) -> pd.DataFrame:
    """For each case name -> (ours, theirs, loader): move ours to x's device and dtype, load theirs
    into it, run both on x with the padding mask (the book's, and PyTorch's inverted key padding
    mask) and return the largest absolute differences at the real positions and at all positions,
    one row per case."""
    import pandas as pd

    if mask.dim() != 3 or mask.shape[1] != 1:
        raise ValueError(f"compare_encoders needs a padding mask of shape (batch, 1, n), got {tuple(mask.shape)}")
    is_real = mask[:, 0, :]
    their_mask = ~is_real  # PyTorch: True = blocked
    rows = {}
    with torch.no_grad():
        for name, (ours, theirs, load) in cases.items():
            ours = ours.to(x.device, x.dtype).eval()
            load(ours, theirs)
            their_output = theirs(x, src_key_padding_mask=their_mask)
            difference = (ours(x, mask=mask) - their_output).abs()
            rows[name] = {
                "max |difference|, real positions": difference[is_real].max().item(),
                "max |difference|, all positions": difference.max().item(),
            }
    return pd.DataFrame(rows).T


def compare_encoders_with_pytorch(
    pytorch_stack: nn.TransformerEncoder, x: Tensor, mask: Tensor, *, num_heads: int, d_ff: int, nudge: float = 0.02
) -> pd.DataFrame:
    """Compare the book's encoder with PyTorch's on x's device and dtype: one post-LN ReLU layer,
    ``pytorch_stack`` (post-LN, ReLU, no final LayerNorm) and a pre-LN GELU stack with a final
    LayerNorm, built here. A little noise is added to every parameter of PyTorch's modules first
    (their attention biases start at 0, their LayerNorms at the identity, a stack's layers as
    copies), and they run in training mode with dropout 0, deterministic and off the inference
    fast path. Returns compare_encoders' table, one row per case."""
    from transformer_book.helpers import nudge_parameters
    from transformer_book.model import Encoder, EncoderLayer
    from transformer_book.torch_loading import load_torch_encoder, load_torch_encoder_layer

    num_layers, d_model = len(pytorch_stack.layers), x.shape[-1]

    def nudged(module: nn.Module) -> nn.Module:
        return nudge_parameters(module, nudge).to(x.device, x.dtype).train()

    def their_layer(norm_first: bool = False, activation: str = "relu") -> nn.TransformerEncoderLayer:
        return nn.TransformerEncoderLayer(
            d_model, num_heads, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
        )

    # A pre-LN stack ends in a LayerNorm. (Without enable_nested_tensor=False, PyTorch warns that pre-LN cannot use it.)
    pytorch_pre_ln_stack = nn.TransformerEncoder(
        their_layer(norm_first=True, activation="gelu"),
        num_layers,
        norm=nn.LayerNorm(d_model),
        enable_nested_tensor=False,
    )
    cases: dict[str, tuple[nn.Module, nn.Module, Callable[[Any, Any], None]]] = {  # name: (ours, theirs, loader)
        "one layer, post-LN, ReLU": (
            EncoderLayer(d_model, num_heads, d_ff),
            nudged(their_layer()),
            load_torch_encoder_layer,
        ),
        f"stack of {num_layers}, post-LN, ReLU": (
            Encoder(num_layers, d_model, num_heads, d_ff),
            nudged(pytorch_stack),
            load_torch_encoder,
        ),
        f"stack of {num_layers}, pre-LN, GELU": (
            Encoder(num_layers, d_model, num_heads, d_ff, activation="gelu", norm_first=True),
            nudged(pytorch_pre_ln_stack),
            load_torch_encoder,
        ),
    }
    return compare_encoders(cases, x, mask)


# ---------------------------------------------------------------------------------------------
# decoder


def teacher_forcing_table(input_words: Sequence[str], target_words: Sequence[str]) -> pd.DataFrame:
    """Teacher forcing position by position: the decoder's input word, the inputs the causal mask
    lets position i see (inputs 0..i), and the target it must predict."""
    import pandas as pd

    if len(input_words) != len(target_words):
        raise ValueError(f"teacher_forcing_table: {len(input_words)} input words but {len(target_words)} targets")
    return pd.DataFrame(
        {
            "decoder input": list(input_words),
            "inputs position i may see": [" ".join(input_words[: i + 1]) for i in range(len(input_words))],
            "target to predict": list(target_words),
        }
    ).rename_axis("position i")


def compare_decoders(
    x: Tensor, memory: Tensor, source_mask: Tensor, *, num_layers: int, d_model: int, num_heads: int, d_ff: int
) -> tuple[float, pd.DataFrame]:
    """Compare the book's decoder with PyTorch's, on x's device and dtype, every parameter of
    PyTorch's nudged first (its attention biases start at 0, its LayerNorms at the identity, and its
    stack's layers as copies). Returns the largest |difference| of one post-LN layer, and a table of
    those of num_layers-stacks, post-LN (no final LayerNorm) and pre-LN (with one), each with ReLU
    and GELU, indexed by (LayerNorm, activation)."""
    import pandas as pd

    from transformer_book.helpers import nudge_parameters
    from transformer_book.model import Decoder, DecoderLayer, causal_mask
    from transformer_book.torch_loading import load_torch_decoder, load_torch_decoder_layer

    m, where, dtype = x.shape[1], x.device, x.dtype
    pytorch_masks = {"tgt_mask": ~causal_mask(m, device=where), "memory_key_padding_mask": ~source_mask[:, 0]}
    their_layer = nn.TransformerDecoderLayer(d_model, num_heads, d_ff, dropout=0.0, batch_first=True)
    their_layer = cast(nn.TransformerDecoderLayer, nudge_parameters(their_layer, 0.1).to(where, dtype))
    our_layer = DecoderLayer(d_model, num_heads, d_ff).to(where, dtype)
    load_torch_decoder_layer(our_layer, their_layer)
    with torch.no_grad():
        layer_difference = (
            (our_layer(x, memory, source_mask=source_mask) - their_layer(x, memory, **pytorch_masks)).abs().max().item()
        )

    stack_rows = []
    for norm_first in [False, True]:
        for activation in ["relu", "gelu"]:
            their_decoder_layer = nn.TransformerDecoderLayer(
                d_model, num_heads, d_ff, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
            )
            # The paper's post-LN stack has no final LayerNorm; a pre-LN stack needs one.
            their_norm = nn.LayerNorm(d_model) if norm_first else None
            theirs = nn.TransformerDecoder(their_decoder_layer, num_layers, norm=their_norm)
            theirs = cast(nn.TransformerDecoder, nudge_parameters(theirs, 0.1).to(where, dtype))
            ours = Decoder(num_layers, d_model, num_heads, d_ff, activation=activation, norm_first=norm_first)
            ours = ours.to(where, dtype)
            load_torch_decoder(ours, theirs)
            with torch.no_grad():
                difference = (ours(x, memory, source_mask=source_mask) - theirs(x, memory, **pytorch_masks)).abs().max()
            stack_rows.append(
                {
                    "LayerNorm": "pre-LN" if norm_first else "post-LN (paper)",
                    "activation": activation,
                    "max |ours - nn.TransformerDecoder|": difference.item(),
                }
            )
    return layer_difference, pd.DataFrame(stack_rows).set_index(["LayerNorm", "activation"])


# ---------------------------------------------------------------------------------------------
# full-model


def draw_embedding_scale(lengths: pd.DataFrame) -> Figure:
    """Average vector length against d_model (log-log): a token's row as stored, times
    sqrt(d_model), and a row of the positional encoding. ``lengths`` is indexed by d_model, with
    the columns "table row length", "scaled row length" and "positional row length"."""
    needed = ["table row length", "scaled row length", "positional row length"]
    missing = [column for column in needed if column not in lengths.columns]
    if missing or len(lengths) == 0:
        raise ValueError(f"draw_embedding_scale needs rows and the columns {needed}; missing {missing}")
    import matplotlib.pyplot as plt

    widths = [int(width) for width in lengths.index]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    ax.plot(
        widths, lengths["scaled row length"], "o-", color=PALETTE[0], label="token, times √d_model (the model's input)"
    )
    ax.plot(
        widths, lengths["positional row length"], "s--", color=PALETTE[2], label="positional encoding, √(d_model / 2)"
    )
    ax.plot(widths, lengths["table row length"], "^-", color=PALETTE[1], label="token, as stored in the table")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(widths, [str(w) for w in widths])
    ax.set_yticks([1, 2, 4, 8, 16, 32], ["1", "2", "4", "8", "16", "32"])
    ax.set_xlabel("d_model (width of the vectors)")
    ax.set_ylabel("vector length (Euclidean norm)")
    ax.set_title("A token's vector next to its position's")
    ax.legend(loc="upper left", fontsize=9)
    return fig


_FILLS = {
    "attention": "#F5D9A8",
    "norm": "#FFF5B0",
    "feed_forward": "#BFDFF2",
    "embedding": "#F2C9DF",
    "output": "#C8E6D6",
}
_BOX_WIDTH, _BOX_HEIGHT, _STEP = 2.7, 0.62, 0.92


def _millions(count: int) -> str:
    return f"{count / 1e6:.1f}M"


def _draw_box(ax: Axes, x: float, y: float, title: str, class_name: str, kind: str) -> None:
    diagram_box(ax, (x, y), (_BOX_WIDTH, _BOX_HEIGHT), title, class_name, _FILLS[kind], fontsize=9)


def _draw_stack(
    ax: Axes, x: float, sublayers: Sequence[tuple[str, str, str]], y0: float
) -> tuple[list[float], float, float]:
    """Sub-layers, each followed by Add & norm with its residual path, in a grey frame.

    Returns the centre heights of the sub-layers and the frame's bottom and top."""
    from matplotlib.patches import FancyBboxPatch

    residual_ink = "#777777"
    centres = []
    y = y0
    for index, (title, class_name, kind) in enumerate(sublayers):
        _draw_box(ax, x, y, title, class_name, kind)
        _draw_box(ax, x, y + _STEP, "Add & norm", "SublayerConnection", "norm")
        diagram_arrow(ax, (x, y + _BOX_HEIGHT / 2), (x, y + _STEP - _BOX_HEIGHT / 2))
        # the residual path: leave the stream below the sub-layer, rejoin it at Add & norm
        branch_y, left = y - _BOX_HEIGHT / 2 - 0.14, x - _BOX_WIDTH / 2 - 0.22
        ax.plot([x, left, left], [branch_y, branch_y, y + _STEP], color=residual_ink, lw=0.9, zorder=1)
        diagram_arrow(ax, (left, y + _STEP), (x - _BOX_WIDTH / 2, y + _STEP), color=residual_ink, lw=0.9)
        if index < len(sublayers) - 1:
            diagram_arrow(ax, (x, y + _STEP + _BOX_HEIGHT / 2), (x, y + 2 * _STEP - _BOX_HEIGHT / 2))
        centres.append(y)
        y += 2 * _STEP
    bottom, top = y0 - _BOX_HEIGHT / 2 - 0.3, y - _STEP + _BOX_HEIGHT / 2 + 0.15
    ax.add_patch(
        FancyBboxPatch(
            (x - _BOX_WIDTH / 2 - 0.42, bottom),
            _BOX_WIDTH + 0.84,
            top - bottom,
            boxstyle="round,pad=0.02,rounding_size=0.15",
            facecolor="#F4F4F4",
            edgecolor="#888888",
            linewidth=1.0,
            zorder=0,
        )
    )
    return centres, bottom, top


def draw_transformer_architecture(encoder_parameters: int, decoder_parameters: int, shared_parameters: int) -> Figure:
    """The paper's Figure 1 redrawn with the book's classes: the paper's names in bold, the classes
    below, residual paths in grey, the memory in orange, the tied matrix dashed; the encoder,
    decoder and shared matrix labelled with their parameter counts, in millions."""
    counts = {"encoder": encoder_parameters, "decoder": decoder_parameters, "shared matrix": shared_parameters}
    wrong = {part: count for part, count in counts.items() if isinstance(count, bool) or count <= 0}
    if wrong:
        raise ValueError(f"draw_transformer_architecture: parameter counts must be positive, got {wrong}")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Circle

    memory_ink, tie_ink = PALETTE[1], PALETTE[3]
    fig, ax = plt.subplots(figsize=(10.5, 11.5))
    encoder_x, decoder_x = 2.9, 7.9
    embedding_y, position_y, stack_y = 0.9, 1.9, 3.05

    for x, title, text_below in [
        (encoder_x, "Input embedding", "source tokens"),
        (decoder_x, "Output embedding", "target tokens, shifted right"),
    ]:
        ax.text(x, 0.1, text_below, ha="center", va="center", fontsize=9, style="italic")
        diagram_arrow(ax, (x, 0.25), (x, embedding_y - _BOX_HEIGHT / 2))
        _draw_box(ax, x, embedding_y, title, "TokenEmbedding (×√d_model)", "embedding")
        diagram_arrow(ax, (x, embedding_y + _BOX_HEIGHT / 2), (x, position_y - 0.2))
        ax.add_patch(Circle((x, position_y), 0.2, facecolor="white", edgecolor="#444444", zorder=2))
        ax.text(x, position_y, "+", ha="center", va="center", fontsize=13, zorder=3)
        ax.text(
            x + 0.3,
            position_y,
            "PositionalEncoding\n(sinusoids, dropout)",
            ha="left",
            va="center",
            fontsize=7.5,
            family="monospace",
        )
        diagram_arrow(ax, (x, position_y + 0.2), (x, stack_y - _BOX_HEIGHT / 2))

    _, encoder_bottom, encoder_top = _draw_stack(
        ax,
        encoder_x,
        [
            ("Multi-head attention", "MultiHeadAttention", "attention"),
            ("Feed forward", "PositionwiseFeedForward", "feed_forward"),
        ],
        stack_y,
    )
    decoder_centres, decoder_bottom, decoder_top = _draw_stack(
        ax,
        decoder_x,
        [
            ("Masked multi-head attention", "MultiHeadAttention", "attention"),
            ("Multi-head attention", "MultiHeadAttention", "attention"),
            ("Feed forward", "PositionwiseFeedForward", "feed_forward"),
        ],
        stack_y,
    )
    ax.text(
        encoder_x - _BOX_WIDTH / 2 - 0.55,
        (encoder_bottom + encoder_top) / 2,
        f"N ×\n\nEncoder\n{_millions(encoder_parameters)}",
        ha="right",
        va="center",
        fontsize=10,
    )
    ax.text(
        decoder_x - _BOX_WIDTH / 2 - 0.55,
        (decoder_bottom + decoder_centres[1]) / 2,
        f"× N\n\nDecoder\n{_millions(decoder_parameters)}",
        ha="right",
        va="center",
        fontsize=10,
    )

    # the encoder's output, the memory, goes to the cross-attention of every decoder layer
    memory_y, gap_x = encoder_top + 0.75, (encoder_x + decoder_x) / 2 + 0.25
    ax.plot(
        [encoder_x, encoder_x, gap_x, gap_x],
        [encoder_top, memory_y, memory_y, decoder_centres[1]],
        color=memory_ink,
        lw=1.6,
        zorder=1,
    )
    diagram_arrow(
        ax, (gap_x, decoder_centres[1]), (decoder_x - _BOX_WIDTH / 2, decoder_centres[1]), color=memory_ink, lw=1.6
    )
    ax.text(
        encoder_x,
        memory_y + 0.12,
        "memory (encoder output): keys and values\nfor every decoder layer's cross-attention",
        ha="center",
        va="bottom",
        fontsize=8,
        color=memory_ink,
    )

    # generator and softmax on top of the decoder
    generator_y = decoder_top + 0.75
    _draw_box(ax, decoder_x, generator_y, "Linear", "Generator", "output")
    _draw_box(ax, decoder_x, generator_y + _STEP, "Softmax", "in the loss, or in decoding", "output")
    diagram_arrow(ax, (decoder_x, decoder_top), (decoder_x, generator_y - _BOX_HEIGHT / 2))
    diagram_arrow(ax, (decoder_x, generator_y + _BOX_HEIGHT / 2), (decoder_x, generator_y + _STEP - _BOX_HEIGHT / 2))
    diagram_arrow(ax, (decoder_x, generator_y + _STEP + _BOX_HEIGHT / 2), (decoder_x, generator_y + _STEP + 0.55))
    ax.text(
        decoder_x,
        generator_y + _STEP + 0.68,
        "output probabilities",
        ha="center",
        va="center",
        fontsize=9,
        style="italic",
    )

    # weight tying: one matrix for both embeddings and the generator
    tie_style: dict[str, Any] = dict(color=tie_ink, lw=1.3, linestyle=(0, (4, 3)), zorder=1)
    ax.plot([encoder_x + _BOX_WIDTH / 2, decoder_x - _BOX_WIDTH / 2], [embedding_y, embedding_y], **tie_style)
    tie_x = decoder_x + _BOX_WIDTH / 2 + 0.7
    ax.plot(
        [decoder_x + _BOX_WIDTH / 2, tie_x, tie_x, decoder_x + _BOX_WIDTH / 2],
        [embedding_y, embedding_y, generator_y, generator_y],
        **tie_style,
    )
    ax.text(
        (encoder_x + decoder_x) / 2,
        embedding_y + 0.12,
        f"one shared matrix\n{_millions(shared_parameters)} (tie_weights)",
        ha="center",
        va="bottom",
        fontsize=8,
        color=tie_ink,
    )
    ax.text(
        tie_x + 0.1,
        (embedding_y + generator_y) / 2,
        "same matrix: no new parameters",
        rotation=90,
        ha="left",
        va="center",
        fontsize=8,
        color=tie_ink,
    )

    ax.set_xlim(0, 11.2)
    ax.set_ylim(-0.2, generator_y + _STEP + 1.0)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig


def vocabulary_matrices(model: nn.Module) -> dict[str, Tensor]:
    """The three (vocab_size, d_model) matrices of a book Transformer: the source and target
    embeddings and the generator's weight (one tensor three times when the weights are tied)."""
    parts: Any = model
    return {
        "source embedding": parts.source_embedding.embedding.weight,
        "target embedding": parts.target_embedding.embedding.weight,
        "generator": parts.generator.projection.weight,
    }


def parameter_count_table(
    models: Mapping[str, tuple[nn.Module, nn.Module]], paper_millions: Mapping[str, float]
) -> pd.DataFrame:
    """One row per model name -> (tied, untied): the paper's count in millions (quoted, from
    paper_millions), the book's counts tied and untied, and the share that tying saves."""
    import pandas as pd

    from transformer_book.helpers import count_parameters

    missing = sorted(set(models) - set(paper_millions))
    if missing:
        raise ValueError(f"parameter_count_table: no paper count for {missing}")
    count_rows = []
    for name, (tied, untied) in models.items():
        tied_count, untied_count = count_parameters(tied), count_parameters(untied)
        count_rows.append(
            {
                "model": name,
                "paper, Table 3 (millions)": paper_millions[name],
                "book, tied": f"{tied_count:,}",
                "book, untied": f"{untied_count:,}",
                "saved by tying": f"{(untied_count - tied_count) / untied_count:.1%}",
            }
        )
    return pd.DataFrame(count_rows).set_index("model")


#: The roles of parameter_breakdown, in the order of its table.
PARAMETER_ROLES = (
    "shared embedding",
    "encoder self-attention",
    "encoder feed-forward",
    "decoder self-attention",
    "decoder cross-attention",
    "decoder feed-forward",
    "LayerNorms",
)


def parameter_breakdown(model: nn.Module) -> dict[str, int]:
    """Parameters of a book Transformer by role (PARAMETER_ROLES). named_parameters() lists a tied
    matrix once, under its first name."""
    parts = dict.fromkeys(PARAMETER_ROLES, 0)
    for name, parameter in model.named_parameters():
        stack = name.split(".")[0]
        if "embedding" in name or "generator" in name:
            role = "shared embedding"
        elif ".norm." in name or name.startswith(("encoder.norm", "decoder.norm")):
            role = "LayerNorms"
        elif "cross_attention" in name:
            role = "decoder cross-attention"
        elif "self_attention" in name:
            role = f"{stack} self-attention"
        else:
            role = f"{stack} feed-forward"
        if role not in parts:
            raise ValueError(f"parameter_breakdown: {name!r} is not a parameter of the book's Transformer")
        parts[role] += parameter.numel()
    return parts


def draw_parameter_breakdown(breakdown: pd.DataFrame, vocab_size: int) -> Figure:
    """Horizontal bars of parameters in millions by role (the rows of ``breakdown``), one bar per
    model (its columns, at most two), for a shared vocabulary of vocab_size tokens."""
    if not 1 <= len(breakdown.columns) <= 2 or len(breakdown) == 0:
        raise ValueError(
            f"draw_parameter_breakdown draws one or two models over at least one role, got "
            f"{len(breakdown.columns)} models and {len(breakdown)} roles"
        )
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    positions = np.arange(len(breakdown))
    for offset, name, colour in zip([-0.2, 0.2], breakdown.columns, [PALETTE[0], PALETTE[1]]):
        ax.barh(positions + offset, breakdown[name] / 1e6, height=0.38, color=colour, label=f"{name} model")
    ax.set_yticks(positions, breakdown.index)
    ax.invert_yaxis()
    ax.set_xlabel("parameters (millions)")
    ax.set_title(f"Where the parameters live (shared {vocab_size:,}-token vocabulary)")
    ax.legend(loc="lower right")
    return fig
