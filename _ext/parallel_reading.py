"""Let Sphinx read (and so execute) several chapters at once: ``scripts/build_book.py``.

Sphinx reads in parallel only if every extension declares itself safe for it.
Two extensions that Jupyter Book loads declare nothing, so Sphinx warns (an error under ``-W``)
and reads one page at a time. Both are safe for the HTML builders:

- sphinx-multitoc-numbering 0.1.3 only replaces how section numbers are assigned, which Sphinx
  does in the main process after every page has been read and merged;
- sphinx-jupyterbook-latex 1.0 does nothing unless the builder is LaTeX.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx
from sphinx.builders.latex import LaTeXBuilder

#: Extensions that are safe to read and write in parallel, for a builder other than LaTeX, but do not say so.
UNDECLARED_BUT_SAFE = ("sphinx_multitoc_numbering", "sphinx_jupyterbook_latex")


def _declare_safe(app: Sphinx) -> None:
    if isinstance(app.builder, LaTeXBuilder):
        return
    for name in UNDECLARED_BUT_SAFE:
        extension = app.extensions.get(name)
        if extension is not None:
            extension.parallel_read_safe = True
            extension.parallel_write_safe = True


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _declare_safe)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
