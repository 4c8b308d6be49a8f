"""Pretrain the book's language model and write it, with its card, to src/transformer_book/weights/book-lm.

    make pretrain                                  # the whole recipe: about an hour on one CPU thread
    make pretrain PRETRAIN_ARGS="--steps 50"       # its first 50 steps, compared with the card's losses

The corpus is the docstrings of this Python's standard library and of the packages the lock pins
(transformer_book.pretraining.CORPUS_SOURCES); nothing is downloaded. Training runs on one thread by
default, so that another machine with the same builds retraces the card's losses step by step."""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

from transformer_book.model import DecoderOnlyTransformer
from transformer_book.pretraining import (
    BOOK_MODEL,
    PretrainingRecipe,
    build_corpus,
    corpus_digest,
    corpus_text,
    corpus_versions,
    load_pretrained,
    machine_description,
    pretrain,
    save_pretrained,
)
from transformer_book.tokenization import BytePairTokenizer
from transformer_book.training import validation_loss


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, help="stop after this many of the recipe's steps, and only compare")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1, as the card's run)")
    parser.add_argument("--out", type=Path, default=BOOK_MODEL, help="where to write the model and its card")
    options = parser.parse_args(arguments)
    torch.set_num_threads(options.threads)
    recipe = PretrainingRecipe()
    started = time.perf_counter()

    corpus = build_corpus()
    training = [docstring for docstring in corpus if not docstring.held_out]
    held_out = [docstring for docstring in corpus if docstring.held_out]
    print(f"corpus: {len(corpus):,} docstrings, {len(corpus_text(corpus)):,} characters, {corpus_digest(corpus)}")

    if options.steps is not None:  # a check of the recipe: the shipped tokenizer, the first steps
        _, tokenizer, card = load_pretrained(options.out)
        if corpus_digest(corpus) != card["corpus"]["digest"]:
            print(f"the corpus differs from the card's ({card['corpus']['versions']}): its losses cannot match")
        training_ids = torch.tensor(tokenizer.encode(corpus_text(training)))
        _, history = pretrain(recipe, training_ids, tokenizer.vocab_size, steps=options.steps)
        expected = card["losses"][: options.steps]
        worst = max(abs(ours - theirs) for ours, theirs in zip(history.losses, expected, strict=True))
        print(f"first {options.steps} losses: largest difference from the card's {worst:.2e}")
        return 0 if worst < 1e-3 else 1

    tokenizer_started = time.perf_counter()
    tokenizer = BytePairTokenizer.learn([corpus_text(training)], num_merges=recipe.num_merges)
    training_ids = torch.tensor(tokenizer.encode(corpus_text(training)))
    held_out_ids = torch.tensor(tokenizer.encode(corpus_text(held_out)))[: recipe.held_out_tokens + 1]
    tokenizer_seconds = time.perf_counter() - tokenizer_started
    print(f"tokens: {len(training_ids):,} to train on, {len(held_out_ids):,} held out ({tokenizer_seconds:.0f} s)")

    held_out_curve: list[tuple[int, float]] = []

    def evaluate(model: DecoderOnlyTransformer, step: int) -> None:
        if step % recipe.evaluate_every == 0 or step == recipe.steps:
            held_out_curve.append((step, validation_loss(model, held_out_ids, context=recipe.context)))
            print(f"step {step}: held-out loss {held_out_curve[-1][1]:.3f}", flush=True)

    model, history = pretrain(recipe, training_ids, tokenizer.vocab_size, evaluate=evaluate)
    final_loss = validation_loss(model, held_out_ids, context=recipe.context)
    card = {
        "corpus": {
            "sources": list(corpus_versions()),
            "versions": corpus_versions(),
            "digest": corpus_digest(corpus),
            "docstrings": len(corpus),
            "characters": len(corpus_text(corpus)),
            "held_out_docstrings": len(held_out),
        },
        "tokenizer": {"kind": "byte-level BPE (transformer_book.tokenization)", "vocab_size": tokenizer.vocab_size},
        "parameters": sum(parameter.numel() for parameter in model.parameters()),
        "training_tokens_available": len(training_ids),
        "tokens_seen": history.target_tokens,
        "epochs": history.target_tokens / len(training_ids),
        "training_seconds": history.seconds,
        "total_seconds": time.perf_counter() - started,
        "machine": machine_description(),
        "losses": history.losses,
        "held_out_curve": held_out_curve,
        "held_out_loss": final_loss,
        "held_out_tokens": len(held_out_ids) - 1,
    }
    save_pretrained(options.out, model, tokenizer, recipe, card)
    print(f"held-out loss {final_loss:.3f} nats ({math.exp(final_loss):.1f} perplexity); wrote {options.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
