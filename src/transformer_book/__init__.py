"""Companion package of the book *The Transformer, Built Up*: the models, and what trains, runs and
loads them.

``import transformer_book`` gives the model API: every class and function a program builds, trains
and runs the book's models with (the names of :mod:`transformer_book.models`), and the device and
parameter-count helpers::

    import transformer_book as tb

    model = tb.make_transformer(100, 100, tb.SMALL_CONFIG, pad_id=0)

Two sides, one rule. The *library* never imports the *book's* side. The library is the models
(:mod:`transformer_book.model`, the GPT's forward pass in one file), :mod:`~transformer_book.data`,
:mod:`~transformer_book.training`, :mod:`~transformer_book.decoding`,
:mod:`~transformer_book.tokenization`, :mod:`~transformer_book.interop`, and each later chapter's
own module; all are generated from the chapters' cells tagged ``export``, but for the hand-written
:mod:`transformer_book.helpers`, :mod:`transformer_book.progress`, :mod:`transformer_book.checks`
(every argument check), :mod:`transformer_book.torch_loading` and the façades
:mod:`transformer_book.models` and :mod:`transformer_book.utils`. The book's side is
:mod:`transformer_book.runtime` (seeds, claims, ``glue``, figure style), the figures (``figures_*``),
:mod:`transformer_book.quiz`, :mod:`transformer_book.explorables` and the graders (``exercises*``);
no library module imports them, nor matplotlib or pandas (``tests/test_package_layers.py``). The
chapters import the runtime by name::

    from transformer_book.runtime import check, glue, seed_everything
"""

from transformer_book import models
from transformer_book.helpers import count_parameters, device, on_accelerator, seconds_per_call
from transformer_book.models import *  # noqa: F403  (the model API is the façade's: one list of names)

__all__ = [*models.__all__, "count_parameters", "device", "on_accelerator", "seconds_per_call"]
__version__ = "0.1.0"
