"""The training loop's progress bar, fitted to where the code runs (written by hand).

Part of the library: :func:`transformer_book.training.train` draws its bar with it, and the book's
runtime re-exports it for the chapters' own loops. tqdm is imported only when a bar is shown, so
importing the package loads no progress bar.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tqdm import tqdm

T = TypeVar("T")


def progress(iterable: Iterable[T], *, desc: str, total: int | None = None, disable: bool = False) -> tqdm[T]:
    """A progress bar for a training loop, fitted to where the chapter runs (none with ``disable``).

    - In Jupyter or Colab with ipywidgets: tqdm's live notebook bar.
    - In a terminal: tqdm's live text bar.
    - Anywhere else, such as the book's build, where every redraw would stay in the
      page as a line of its own: nothing while running, then the finished bar once.

    Report a running loss with ``bar.set_postfix(loss=..., refresh=False)``, so that
    the quiet bar stays quiet until the end.
    """
    from tqdm import tqdm

    if disable:  # a bar that draws nothing, so the loop's code stays the same
        return tqdm(iterable, desc=desc, total=total, disable=True)
    in_notebook = "ipykernel" in sys.modules
    if in_notebook and importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.notebook import tqdm as notebook_tqdm

        bar: tqdm[T] = notebook_tqdm(iterable, desc=desc, total=total)
        return bar
    if sys.stdout.isatty():
        return tqdm(iterable, desc=desc, total=total, file=sys.stdout)
    return _finished_bar_class()(iterable, desc=desc, total=total, file=sys.stdout)


@functools.cache  # one class, made on first use: tqdm is imported only when a bar is shown
def _finished_bar_class() -> type[tqdm[Any]]:
    """tqdm's bar that draws nothing until it is closed, then draws its final state once."""
    from tqdm import tqdm

    class FinishedBar(tqdm):  # type: ignore[type-arg]  # tqdm is generic only in its stubs
        def __init__(self, iterable: Iterable[T], *, desc: str, total: int | None, file: Any) -> None:
            # An infinite delay keeps tqdm from drawing while the loop runs.
            super().__init__(iterable, desc=desc, total=total, file=file, delay=float("inf"), mininterval=float("inf"))

        def close(self) -> None:
            # tqdm skips the final draw of a bar it never showed; lifting the delay restores it.
            self.delay = 0
            super().close()

    return FinishedBar
