"""Fixes to the pages Sphinx writes: MathJax served offline, no script declared twice, ARIA
that assistive technology understands, and downloaded notebooks with their outputs; and the
companion package's wheel, published with the site.

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

**Two editions in Colab.** The theme's launch menu opens the chapter's notebook
``book/<slug>.ipynb`` in Colab: the instructor's edition, with its solutions folded. Beside it,
the menu gets the student's edition, ``book/student/<slug>.ipynb`` (``scripts/sync_twins.py``
writes both), whose graders say "Not yet" until the reader's function passes.

**The companion package's wheel.** Every chapter's Colab bootstrap cell installs
``<site>/_static/<wheel>`` (``colab_bootstrap()`` in ``scripts/chapters.py``), so the
site publishes the wheel built from the same commit as its pages. It is built when the
builder starts, so that a package that cannot be built fails the build before any chapter
runs, with ``pip wheel --no-deps --no-build-isolation --no-index``: offline, with the
setuptools of the environment (locked in ``requirements.lock``). It builds from a temporary
copy of the files the wheel is made of (``pyproject.toml``, its readme and licence files,
``src/``), never in the repository, where setuptools would leave ``build/`` behind and a
stale ``build/lib`` could put a deleted module into the next wheel. It takes about a
second. The wheel is copied into ``_static`` when the build ends.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
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


def build_wheel(destination: Path) -> Path:
    """Build the companion package's wheel from the repository's files into ``destination`` (which
    must hold no other wheel) and return it; raise ``ExtensionError`` when it cannot be built."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    with tempfile.TemporaryDirectory(prefix="transformer-book-wheel-") as folder:
        source = Path(folder)
        files = [ROOT / "pyproject.toml", ROOT / project["readme"]]
        files += [path for pattern in project.get("license-files", []) for path in sorted(ROOT.glob(pattern))]
        for path in files:
            shutil.copy2(path, source / path.relative_to(ROOT))
        shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        command = [
            sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
            "--disable-pip-version-check", "--quiet", "--wheel-dir", str(destination), str(source),
        ]  # fmt: skip
        result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise ExtensionError(
            f"could not build the companion package's wheel, which the Colab notebooks install from the site "
            f"({' '.join(command[2:])} exited with {result.returncode}):\n{result.stdout}{result.stderr}"
        )
    wheels = sorted(destination.glob("*.whl"))
    if len(wheels) != 1:
        raise ExtensionError(f"expected one wheel in {destination}, found {[wheel.name for wheel in wheels]}")
    return wheels[0]


#: The wheel built when the builder started, waiting to be copied into the site when the build ends.
_built_wheel: list[Path] = []


def _build_wheel(app: Sphinx) -> None:
    if app.builder.format != "html":
        return
    wheel = build_wheel(Path(tempfile.mkdtemp(prefix="transformer-book-dist-")))
    _built_wheel[:] = [wheel]
    logger.info("built the companion package's wheel %s", wheel.name)


def _publish_wheel(app: Sphinx, exception: Exception | None) -> None:
    """Copy the wheel into ``_static``, replacing any wheel of the package an earlier build left there."""
    if exception is not None or app.builder.format != "html":
        return
    if not _built_wheel:
        raise ExtensionError("the companion package's wheel was not built when the builder started")
    wheel = _built_wheel.pop()
    static = Path(app.outdir) / "_static"
    static.mkdir(parents=True, exist_ok=True)
    for old in static.glob(f"{wheel.name.split('-')[0]}-*.whl"):
        old.unlink()
    shutil.copy2(wheel, static / wheel.name)
    shutil.rmtree(wheel.parent, ignore_errors=True)
    logger.info("published the companion package's wheel as _static/%s", wheel.name)


STUDENT_EDITION = "book/student"


def _add_student_edition(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """Name the theme's Colab entry the instructor's edition and add the student's edition after it."""
    student = Path(app.srcdir) / STUDENT_EDITION / f"{PurePosixPath(pagename).name}.ipynb"
    for group in context.get("header_buttons", []):
        buttons = group.get("buttons", []) if group.get("label") == "launch-buttons" else []
        for index, button in enumerate(buttons):
            if button.get("text") == "Colab" and student.is_file():
                url = str(button["url"])
                buttons[index] = {
                    **button,
                    "text": "Colab, instructor's edition",
                    "tooltip": "Open with solutions in Colab",
                }
                buttons.insert(
                    index + 1,
                    {
                        **button,
                        "text": "Colab, student's edition",
                        "tooltip": "Open without solutions in Colab",
                        "url": url.replace(
                            f"/{pagename}.ipynb", f"/{STUDENT_EDITION}/{PurePosixPath(pagename).name}.ipynb"
                        ),
                    },
                )
                return


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _check_mathjax_installed)
    app.connect("builder-inited", _build_wheel)
    app.connect("html-page-context", _drop_duplicate_scripts, priority=900)
    app.connect("html-page-context", _repair_aria)
    # after the theme's add_launch_buttons (priority 501)
    app.connect("html-page-context", _add_student_edition, priority=550)
    app.connect("html-page-context", _restore_cached_outputs, priority=600)
    app.connect("build-finished", _copy_mathjax)
    app.connect("build-finished", _publish_wheel)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
