"""Fixes to the pages Sphinx writes: MathJax served offline, no script declared twice, ARIA
that assistive technology understands, and downloaded notebooks with their outputs.

**MathJax offline.** Sphinx loads MathJax from a CDN by default. This extension
copies the MathJax pinned in ``package-lock.json`` (installed by ``npm ci``, which
``make book`` and ``make test`` run) into ``_build/html/_static/<dir>/``, where
``<dir>`` and the bundle's name come from ``mathjax_path`` in ``_config.yml``, for
example ``mathjax/tex-mml-chtml.js``. MathJax finds its fonts and its lazily loaded
components (TeX extensions, the accessibility explorer, the SVG output that the
reader's menu can switch to) relative to that script, so they are copied too.

It is copied with ``shutil`` rather than listed in ``html_static_path``, because
Jupyter Book adds every ``*.js`` file of a static path to every page as a
``<script>``, and MathJax has dozens.

**Inline scripts once.** Sphinx 7.4 lists an inline script that an extension
adds after the builder starts twice, once as ``None`` and once as ``""`` (see
``StandaloneHTMLBuilder.prepare_writing``). sphinx-thebe's inline script
declares ``const THEBE_JS_URL``, so its second copy throws a ``SyntaxError`` on
every page. The page context is cleaned of such duplicates before rendering.

**Toggles named by their text.** myst-nb labels the ``<summary>`` of a hidden
code cell "Toggle hidden content" while it shows "Show code cell source", so
axe-core reports a serious ``label-content-name-mismatch``. Without the label the
summary is named by the text a reader sees.

**Bibliography entries as list items.** docutils marks each citation with the
``doc-biblioentry`` role, deprecated in DPUB-ARIA 1.1, inside a ``role="list"``;
axe-core then finds no list items in the list (a critical
``aria-required-children``). They become ``role="listitem"``, its replacement.

**Downloaded notebooks with outputs.** The theme's "download .ipynb" button
serves the notebook myst-nb writes, but myst-nb 1.4 writes the notebook without
outputs when it takes them from jupyter-cache (``execute_notebooks: cache``), so
after an incremental ``make book`` a reader downloads empty cells. The outputs are
merged back from the same cache.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePosixPath
from typing import Any

import nbformat
from jupyter_cache import get_cache
from sphinx.application import Sphinx
from sphinx.errors import ConfigError, ExtensionError
from sphinx.util import logging

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
MATHJAX_PACKAGE = ROOT / "node_modules" / "mathjax"
INSTALL_HINT = "run `npm ci` in the repository root (`make book` and `make test` do it)"


def _bundle_path(app: Sphinx) -> PurePosixPath:
    """``mathjax_path`` as ``<dir>/<bundle>.js`` below ``_static``; refuse a CDN address."""
    path = PurePosixPath(app.config.mathjax_path)
    if "://" in app.config.mathjax_path or path.is_absolute() or len(path.parts) != 2:
        raise ConfigError(
            f"mathjax_path is {app.config.mathjax_path!r}: it must be a path below _static such as "
            "'mathjax/tex-mml-chtml.js', so that the book reads offline"
        )
    return path


def _check_mathjax_installed(app: Sphinx) -> None:
    """Fail at the start of the build, not after it, when ``npm ci`` has not been run."""
    if app.builder.format != "html":
        return
    bundle = MATHJAX_PACKAGE / "es5" / _bundle_path(app).name
    if not bundle.is_file():
        raise ExtensionError(f"MathJax is not installed ({bundle} is missing): {INSTALL_HINT}")
    version = json.loads((MATHJAX_PACKAGE / "package.json").read_text())["version"]
    if not version.startswith("3."):
        raise ExtensionError(f"the book is set up for MathJax 3, found {version}: {INSTALL_HINT}")


def _copy_mathjax(app: Sphinx, exception: Exception | None) -> None:
    """Copy the bundle, the components it loads on demand, its fonts and its licence."""
    if exception is not None or app.builder.format != "html":
        return
    bundle = _bundle_path(app)
    source = MATHJAX_PACKAGE / "es5"
    target = Path(app.outdir) / "_static" / bundle.parent
    target.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / bundle.name, target / bundle.name)
    shutil.copy2(MATHJAX_PACKAGE / "LICENSE", target / "LICENSE")
    # The other top-level files are alternative bundles that a page never loads.
    for folder in sorted(item for item in source.iterdir() if item.is_dir()):
        shutil.copytree(folder, target / folder.name, dirs_exist_ok=True)
    logger.info("copied MathJax from %s into %s", source.relative_to(ROOT), target)


def _drop_duplicate_scripts(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Keep the first of scripts that differ only in ``None`` against ``""`` as file name."""
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: set[tuple[str, int, tuple[tuple[str, str], ...]]] = set()
    unique = []
    for script in scripts:
        attributes = tuple(sorted((str(key), str(value)) for key, value in getattr(script, "attributes", {}).items()))
        key = (str(getattr(script, "filename", script) or ""), getattr(script, "priority", 500), attributes)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


#: Markup of the page body and its accessible replacement (see the module's docstring).
ARIA_REPAIRS = {
    '<summary aria-label="Toggle hidden content">': "<summary>",
    'role="doc-biblioentry"': 'role="listitem"',
}


def _repair_aria(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    body = context.get("body")
    if body:
        for wrong, right in ARIA_REPAIRS.items():
            body = body.replace(wrong, right)
        context["body"] = body


def _restore_cached_outputs(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Runs after sphinx-book-theme (priority 501) has copied the notebook into ``_sources``."""
    source = context.get("ipynb_source")
    config = app.env.mystnb_config  # type: ignore[attr-defined]  # set by myst-nb
    if not source or config.execution_mode != "cache":
        return
    path = Path(app.outdir) / "_sources" / source
    if not path.is_file():
        return
    notebook = nbformat.read(path, as_version=4)
    if any(cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code"):
        return
    try:
        _, merged = get_cache(config.execution_cache_path).merge_match_into_notebook(notebook)
    except KeyError:  # not executed into the cache: there are no outputs to restore
        return
    nbformat.write(merged, path)


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _check_mathjax_installed)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    app.connect("html-page-context", _repair_aria)
    app.connect("html-page-context", _restore_cached_outputs, priority=600)
    app.connect("build-finished", _copy_mathjax)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
