"""Companion package of the book *The Transformer, Built Up*.

Each module but the hand-written :mod:`transformer_book.helpers` (device, parameter count, timer),
:mod:`transformer_book.runtime` (what the chapters need to run), :mod:`transformer_book.quiz` (the quiz
at the end of each chapter), :mod:`transformer_book.exercises` (the graders of the exercises),
:mod:`transformer_book.explorables` (the interactive views), :mod:`transformer_book.validation`
and the façades :mod:`transformer_book.models` and :mod:`transformer_book.utils` is generated from the chapter
of the same name (``scaled_dot_product.py`` from ``book/scaled-dot-product.md``):
the code there is exactly the code the chapter teaches, in cells tagged
``export``. Import from the chapter's module, for example::

    from transformer_book.scaled_dot_product import scaled_dot_product_attention

or, for the classes and functions a program builds models with, from the hand-written façade
:mod:`transformer_book.models`, which names each chapter's own object.
"""

from transformer_book.helpers import count_parameters, device, on_accelerator, seconds_per_call
from transformer_book.runtime import (
    ClaimFailed,
    book_seed,
    by_device,
    check,
    glue,
    plot_heatmap,
    progress,
    seed_everything,
    use_book_style,
)

__all__ = [
    "ClaimFailed",
    "book_seed",
    "by_device",
    "check",
    "count_parameters",
    "device",
    "glue",
    "on_accelerator",
    "plot_heatmap",
    "progress",
    "seconds_per_call",
    "seed_everything",
    "use_book_style",
]
__version__ = "0.1.0"
