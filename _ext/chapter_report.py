"""Name the chapters that failed to execute, once, at the end of the build.

``_config.yml`` sets ``execute.raise_on_error: false``, so a chapter that raises (a failed
``check`` of a trained result, say) no longer stops the whole build: myst-nb logs a warning, the
other chapters build, and ``-W`` still makes the build fail. The warning sits among hundreds of
lines, so this extension closes the build with a short list: each failed chapter and the last line
of its error, which for a failed check is the claim itself.

myst-nb's ``raise_on_error: false`` covers only a cell that raised or timed out
(jupyter-cache's ``single_nb_execution`` catches ``CellExecutionError`` and ``CellTimeoutError``).
Anything else the notebook client raises (``DeadKernelError`` when a kernel dies, ``RuntimeError``
when one never answers at start-up) escaped from the reader: under ``sphinx-build -j`` that stops
the whole build, no page written, and Sphinx terminates the other reader, whose notebook client
(on SIGTERM) shuts its busy kernel down, and that kernel logs ``ZMQError: Socket operation on
non-socket`` (ipykernel 7 closes its shell socket pairs while the interrupted cell replies): the only
line the failed build of 2026-12-05 kept. ``_fail_only_the_chapter`` turns such an exception into
that chapter's failure, with its traceback, like a failed cell; the other chapters go on.
"""

from __future__ import annotations

import functools
import re
import time
import traceback
from collections.abc import Callable
from typing import Any

import myst_nb.core.execute.cache
import myst_nb.core.execute.direct
from jupyter_cache.executors.utils import ExecutionResult
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
        head = lines[index].split(":", 1)[0]  # ClaimFailed, or nbclient.exceptions.DeadKernelError
        if all(part.isidentifier() for part in head.split(".")) and head.endswith(
            ("Error", "Failed", "Exception", "Interrupt")
        ):
            return " ".join(lines[index : index + 3])
    return lines[-1] if lines else "unknown error"


def _report(app: Sphinx, exception: Exception | None) -> None:
    failures = failed_chapters(app)
    if not failures:
        return
    logger.info(bold(red(f"\n{len(failures)} chapter(s) failed to execute; the rest of the book was built:")))
    for docname, line in failures.items():
        logger.info(red(f"  {docname}: {line}"))


def _fail_only_the_chapter(execute: Callable[..., ExecutionResult]) -> Callable[..., ExecutionResult]:
    """``single_nb_execution`` that returns any exception of the notebook's execution as its error
    (with its traceback), instead of raising it out of the reader and stopping the build."""
    if getattr(execute, "fails_only_the_chapter", False):
        return execute

    @functools.wraps(execute)
    def execute_one_chapter(nb: Any, cwd: str | None, *args: Any, **kwargs: Any) -> ExecutionResult:
        start = time.perf_counter()
        try:
            return execute(nb, cwd, *args, **kwargs)
        except Exception as error:  # DeadKernelError, a kernel that never started, ...: not KeyboardInterrupt
            return ExecutionResult(nb, cwd or "", time.perf_counter() - start, error, traceback.format_exc())

    execute_one_chapter.fails_only_the_chapter = True  # type: ignore[attr-defined]
    return execute_one_chapter


def setup(app: Sphinx) -> dict[str, Any]:
    # Both of myst-nb's executors (execute_notebooks: cache, and force/auto) import it by name.
    for executor in (myst_nb.core.execute.cache, myst_nb.core.execute.direct):
        executor.single_nb_execution = _fail_only_the_chapter(executor.single_nb_execution)
    app.connect("build-finished", _report)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
