"""Name the chapters that failed to execute, once, at the end of the build.

``_config.yml`` sets ``execute.raise_on_error: false``, so a chapter that raises (a failed
``check`` of a trained result, say) no longer stops the whole build: myst-nb logs a warning, the
other chapters build, and ``-W`` still makes the build fail. The warning sits among hundreds of
lines, so this extension closes the build with a short list: each failed chapter and the last line
of its error, which for a failed check is the claim itself.
"""

from __future__ import annotations

import re
from typing import Any

from myst_nb.sphinx_ import NbMetadataCollector
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.console import bold, red

logger = logging.getLogger(__name__)


def failed_chapters(app: Sphinx) -> dict[str, str]:
    """Each chapter whose execution failed in this build, with the first line of its error."""
    failures: dict[str, str] = {}
    for docname in sorted(app.env.found_docs):
        data = NbMetadataCollector.get_exec_data(app.env, docname)
        if data and not data.get("succeeded", True):
            failures[docname] = _error_line(str(data.get("traceback") or data.get("error") or "unknown error"))
    return failures


def _error_line(traceback: str) -> str:
    """What went wrong, from a traceback: the last ``SomethingError: ...`` line and the two after
    it (for a failed check: the claim, the value against its threshold, and the run)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", traceback)
    lines = [line.strip() for line in plain.splitlines() if line.strip()]
    for index in range(len(lines) - 1, -1, -1):
        head = lines[index].split(":", 1)[0]
        if head.isidentifier() and head.endswith(("Error", "Failed", "Exception", "Interrupt")):
            return " ".join(lines[index : index + 3])
    return lines[-1] if lines else "unknown error"


def _report(app: Sphinx, exception: Exception | None) -> None:
    failures = failed_chapters(app)
    if not failures:
        return
    logger.info(bold(red(f"\n{len(failures)} chapter(s) failed to execute; the rest of the book was built:")))
    for docname, line in failures.items():
        logger.info(red(f"  {docname}: {line}"))


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("build-finished", _report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
