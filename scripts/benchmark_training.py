"""Print the training throughput of the book's Transformer against PyTorch's nn.Transformer.

    python scripts/benchmark_training.py            # the default configuration, on the CPU and any GPU
    python scripts/benchmark_training.py --steps 40 --d-model 512
    python scripts/benchmark_training.py --devices cuda   # the GPU rows alone

Both models get the same configuration, the same batches (with padding and masks), the same
loss (label smoothing 0.1) and the same optimizer (Adam), and are timed over full training steps:
forward, backward and update. The book's model runs twice: as the chapters use it, computing and
keeping every attention map for plotting, and with ``keep_attention_weights = False`` in every
layer, so that MultiHeadAttention takes its fused path (F.scaled_dot_product_attention). The point
is a ratio, not a record: it tells a reader whether the from-scratch code is needlessly slow.
Then the book's attention on its fused causal path (``is_causal=True``) is timed against the same
projections around a direct call of ``F.scaled_dot_product_attention(..., is_causal=True)``, with
the peak memory of each. Every device runs: the CPU, then CUDA or MPS where present.
Timings are printed, never asserted; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable

os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # set before torch starts: the memory profiler logs no lines

import torch  # noqa: E402
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_book import seconds_per_call
from transformer_book.data import Batch, make_batch
from transformer_book.model import (
    DecoderLayer,
    EncoderLayer,
    MultiHeadAttention,
    PositionalEncoding,
    TokenEmbedding,
    TransformerConfig,
    make_transformer,
    merge_heads,
    split_heads,
)
from transformer_book.runtime import seed_everything
from transformer_book.self_attention import peak_memory_bytes
from transformer_book.training import LabelSmoothingLoss


class TorchTransformer(nn.Module):
    """nn.Transformer with the same embeddings, positions and output layer as the book's model."""

    def __init__(
        self, vocab_size: int, d_model: int, num_heads: int, num_layers: int, d_ff: int, dropout: float
    ) -> None:
        super().__init__()
        self.embedding = TokenEmbedding(vocab_size, d_model)
        self.positional_encoding = PositionalEncoding(d_model, dropout=dropout)
        self.transformer = nn.Transformer(d_model, num_heads, num_layers, num_layers, d_ff, dropout, batch_first=True)
        # The paper's post-LN stacks end without a final LayerNorm, as the book's do.
        self.transformer.encoder.norm = nn.Identity()
        self.transformer.decoder.norm = nn.Identity()
        self.generator = nn.Linear(d_model, vocab_size, bias=False)
        self.generator.weight = self.embedding.embedding.weight

    def forward(self, batch: Batch) -> Tensor:
        # nn.Transformer's masks say True = blocked, the book's True = may attend.
        source_padding = ~batch.source_mask[:, 0, :]
        target_length = batch.target_input.shape[1]
        causal = torch.ones(target_length, target_length, dtype=torch.bool, device=batch.source.device).triu(1)
        hidden = self.transformer(
            self.positional_encoding(self.embedding(batch.source)),
            self.positional_encoding(self.embedding(batch.target_input)),
            tgt_mask=causal,
            src_key_padding_mask=source_padding,
            memory_key_padding_mask=source_padding,
            tgt_key_padding_mask=batch.target_input == 0,
            tgt_is_causal=True,
        )
        logits: Tensor = self.generator(hidden)
        return logits


def keep_attention_weights(model: nn.Module, keep: bool) -> None:
    """Set every encoder and decoder layer of the model to keep its attention weights, or not."""
    for module in model.modules():
        if isinstance(module, EncoderLayer | DecoderLayer):
            module.keep_attention_weights = keep


def random_batch(
    vocab_size: int, batch_size: int, max_length: int, generator: torch.Generator, on: torch.device
) -> Batch:
    lengths = torch.randint(max_length // 2, max_length + 1, (2, batch_size), generator=generator)
    sources = [torch.randint(3, vocab_size, (int(n),), generator=generator).tolist() for n in lengths[0]]
    targets = [torch.randint(3, vocab_size, (int(n),), generator=generator).tolist() for n in lengths[1]]
    return make_batch(sources, targets, device=on)


def tokens_per_second(
    model: nn.Module, forward: Callable[[Batch], Tensor], batches: list[Batch], warmup_steps: int
) -> float:
    """Time full training steps (after warm-up steps that are not counted); return target tokens/s."""
    loss_function = LabelSmoothingLoss(0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    tokens = 0
    for index, batch in enumerate(batches):
        if index == warmup_steps:
            if batch.source.is_cuda:
                torch.cuda.synchronize()
            start = time.perf_counter()
            tokens = 0
        loss = loss_function(forward(batch), batch.target_output)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        tokens += batch.num_target_tokens
    if batches[0].source.is_cuda:
        torch.cuda.synchronize()
    return tokens / (time.perf_counter() - start)


def benchmark_devices() -> list[torch.device]:
    """The CPU always, then CUDA and Apple's MPS where this machine has them."""
    found = [torch.device("cpu")]
    if torch.cuda.is_available():
        found.append(torch.device("cuda"))
    if torch.backends.mps.is_available():
        found.append(torch.device("mps"))
    return found


def compare_training(args: argparse.Namespace, on: torch.device) -> None:
    """Rounds of the book's model (weights kept, then fused) against nn.Transformer on one device."""
    seed_everything(0)
    config = TransformerConfig(
        d_model=args.d_model, num_heads=args.heads, num_layers=args.layers, d_ff=args.d_ff, dropout=args.dropout
    )
    book_model = make_transformer(args.vocab, args.vocab, config, pad_id=0).to(on)
    torch_model = TorchTransformer(args.vocab, args.d_model, args.heads, args.layers, args.d_ff, args.dropout).to(on)
    generator = torch.Generator().manual_seed(0)
    steps = timed_steps(args, on)
    batches = [random_batch(args.vocab, args.batch, args.length, generator, on) for _ in range(args.warmup + steps)]

    def book_forward(batch: Batch) -> Tensor:
        logits: Tensor = book_model(**batch.model_inputs())
        return logits

    def book_fused(batches: list[Batch]) -> float:
        keep_attention_weights(book_model, False)
        try:
            return tokens_per_second(book_model, book_forward, batches, args.warmup)
        finally:
            keep_attention_weights(book_model, True)

    print(f"\n{on.type}: {describe(on)}, torch {torch.__version__}")
    print(
        f"config: {config}, vocab {args.vocab}, batch {args.batch}, length <= {args.length}, {steps} timed steps a round"
    )
    # A ratio is how many times longer the book's model takes per token than nn.Transformer: 1.0 is parity.
    print(
        f"{'round':>5} {'book tokens/s':>14} {'book, fused tokens/s':>21} {'nn.Transformer tokens/s':>24} "
        f"{'ratio':>6} {'ratio, fused':>13}"
    )
    best_book, best_fused, best_torch = 0.0, 0.0, 0.0
    for round_index in range(args.rounds):
        # Alternating the models spreads any slowdown of the machine over all of them.
        book = tokens_per_second(book_model, book_forward, batches, args.warmup)
        fused = book_fused(batches)
        theirs = tokens_per_second(torch_model, torch_model, batches, args.warmup)
        best_book, best_fused, best_torch = max(best_book, book), max(best_fused, fused), max(best_torch, theirs)
        print(
            f"{round_index + 1:>5} {book:>14,.0f} {fused:>21,.0f} {theirs:>24,.0f} "
            f"{theirs / book:>6.2f} {theirs / fused:>13.2f}"
        )
    print(
        f"{on.type}, best of {args.rounds}: book {best_book:,.0f} tokens/s, book with the fused path "
        f"{best_fused:,.0f} tokens/s, nn.Transformer {best_torch:,.0f} tokens/s; the book's model takes "
        f"{best_torch / best_book:.2f}x nn.Transformer's time per token, {best_torch / best_fused:.2f}x with the fused path"
    )


def compare_causal_attention(args: argparse.Namespace, on: torch.device) -> None:
    """The book's MultiHeadAttention on its fused causal path against the same projections around a
    direct call of F.scaled_dot_product_attention(is_causal=True): forward and backward, time and peak memory."""
    seed_everything(0)
    module = MultiHeadAttention(args.d_model, args.heads).to(on)
    x = torch.randn(args.batch, args.attention_length, args.d_model, device=on, requires_grad=True)

    def forget_gradients() -> None:  # each run allocates its gradients afresh, as the first did
        module.zero_grad(set_to_none=True)
        x.grad = None

    def book() -> None:
        forget_gradients()
        output, _ = module(x, x, x, need_weights=False, is_causal=True)
        output.sum().backward()

    def direct() -> None:
        forget_gradients()
        q, k, v = (split_heads(projection(x), args.heads) for projection in (module.w_q, module.w_k, module.w_v))
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        output = module.w_o(merge_heads(attended))  # held while backward runs, as the book's output is
        output.sum().backward()

    # A millisecond call on a GPU is timed by its launches as much as its work: alternate the two, time
    # many calls each round, and keep each one's best round.
    timings = {"book": float("inf"), "direct": float("inf")}
    for _ in range(args.rounds):
        for name, run in (("book", book), ("direct", direct)):
            timings[name] = min(timings[name], seconds_per_call(run, calls=timed_steps(args, on)))
    # The smaller of two measurements: a first call can allocate what later calls reuse.
    peaks = {
        name: min(peak_memory_bytes(run, on) for _ in range(2)) for name, run in (("book", book), ("direct", direct))
    }
    print(
        f"{on.type}, causal attention ({args.batch} x {args.attention_length} tokens, d_model {args.d_model}, forward "
        f"and backward): the book's fused path takes {timings['book'] / timings['direct']:.2f}x the time and "
        f"{peaks['book'] / max(peaks['direct'], 1):.2f}x the peak memory of direct SDPA with is_causal=True "
        f"({timings['direct'] * 1e3:.2f} ms, {peaks['direct'] / 2**20:.1f} MiB)"
    )


def timed_steps(args: argparse.Namespace, on: torch.device) -> int:
    """Steps (or calls) timed a round: --steps if given, else 20 on the CPU and 200 on a GPU.

    A step on a GPU takes about a millisecond, so 20 of them are as short as the noise of the
    machine: rounds of the same code differed by a fifth on an H200. This is the size of a
    measurement, never of an experiment whose result a chapter checks.
    """
    if args.steps is not None:
        return int(args.steps)
    return 20 if on.type == "cpu" else 200


def describe(on: torch.device) -> str:
    if on.type == "cuda":
        return torch.cuda.get_device_name(on)
    return f"{torch.get_num_threads()} threads" if on.type == "cpu" else on.type


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--vocab", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--length", type=int, default=32, help="longest source and target, in tokens")
    parser.add_argument("--attention-length", type=int, default=512, help="sequence length of the attention rows")
    parser.add_argument(
        "--steps", type=int, default=None, help="timed steps per model and round (default: 20 on the CPU, 200 on a GPU)"
    )
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps before each timing")
    parser.add_argument("--rounds", type=int, default=3, help="alternate the two models this many times")
    parser.add_argument(
        "--devices", nargs="+", choices=["cpu", "cuda", "mps"], help="only these (default: every device found)"
    )
    args = parser.parse_args()

    devices = [on for on in benchmark_devices() if args.devices is None or on.type in args.devices]
    if not torch.cuda.is_available():
        print("CUDA is not available on this machine: no CUDA rows.")
    for on in devices:
        compare_training(args, on)
        compare_causal_attention(args, on)


if __name__ == "__main__":
    main()
