"""Build the book as ``jupyter-book build`` does, executing several chapters at once.

    python scripts/build_book.py . --builder html -W -n --keep-going   # the arguments of jupyter-book build

A chapter spends most of its time in small operations that one CPU thread runs about as fast as
two (the book took 971 s at one thread and 950 s at two on a 2-core machine). So on a machine with
C cores the build reads J chapters at once, each kernel with T = C // J threads, instead of one
chapter with C threads:

- ``OMP_NUM_THREADS`` set: T is that, and J = max(1, C // T): a reader's thread count is kept;
- unset: T = 1 and J = C (at most ``BOOK_BUILD_JOBS`` when that is set).

Every thread count the build can choose is one the robustness sweep runs, so the claims it checks
are the swept ones. Sphinx reads the chapters in parallel (``sphinx-build -j``, which the
jupyter-book CLI does not expose); each chapter is its own batch, the longest first (by the sweep's
recorded times), so no core waits at the end while one long chapter runs alone.

Everything the build prints (Sphinx, jupyter-book, the kernels' own logs, the forked readers) goes to
the terminal and to ``<output>/_build/build.log``; when the build fails, the log's last lines and its
path are printed at the end, so the reason is never lost among the warnings. The build itself runs in a
child process whose standard output and error are one pipe: the kernels and Sphinx's forked readers
write to the file descriptors they inherit, which only a pipe at the process level can collect.
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, BinaryIO

import sphinx.builders

from chapters import ROOT

RUNS = ROOT / "robustness-runs.jsonl"
#: Set in the child process that runs the build itself (see ``main``).
CHILD_VARIABLE = "BOOK_BUILD_LOGGED"
#: How many of the log's last lines a failed build prints.
TAIL_LINES = 80


def usable_cores() -> int:
    """The CPU cores this process may run on (a container's limit, not the host's count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def jobs_and_threads(cores: int, environment: dict[str, str]) -> tuple[int, int]:
    """How many chapters run at once, and with how many threads each (see the module's docstring)."""
    threads_set = environment.get("OMP_NUM_THREADS", "").strip()
    if threads_set.isdigit() and int(threads_set) > 0:
        threads = int(threads_set)
        return max(1, cores // threads), threads
    jobs_cap = environment.get("BOOK_BUILD_JOBS", "").strip()
    jobs = min(cores, int(jobs_cap)) if jobs_cap.isdigit() and int(jobs_cap) > 0 else cores
    return max(1, jobs), 1


@functools.cache
def swept_seconds() -> dict[str, float]:
    """Each swept chapter's median execution time on a CPU in the robustness sweep's records."""
    times: dict[str, list[float]] = {}
    if RUNS.is_file():
        for line in RUNS.read_text().splitlines():
            run = json.loads(line)
            if run.get("device") == "cpu" and run.get("seconds"):
                times.setdefault(run["chapter"], []).append(float(run["seconds"]))
    return {chapter: statistics.median(seconds) for chapter, seconds in times.items()}


def expected_cost(docname: str) -> float:
    """How long a page takes to execute, as the sweep measured it (0 for a page it does not run,
    which are the quick ones). Only the order of reading depends on it, never a result."""
    return swept_seconds().get(docname.rsplit("/", 1)[-1], 0.0)


def one_page_per_batch(arguments: Sequence[str], nproc: int, maxbatch: int = 10) -> list[Any]:
    """Sphinx's make_chunks, with one page per batch, so that the costliest are read first.

    Sphinx's ParallelTasks (7.x) starts the first ``nproc`` batches as they are added, and the others
    last in, first out (``dict.popitem``) as workers free up: so the first ``nproc`` batches are the
    costliest, and the rest follow cheapest first, which Sphinx then starts costliest first."""
    ordered = [[docname] for docname in sorted(arguments, key=expected_cost, reverse=True)]
    return ordered[:nproc] + ordered[nproc:][::-1]


def build_folder(arguments: Sequence[str]) -> Path:
    """The build's ``_build`` folder: ``<output>/_build``, the output being ``--path-output`` or else
    the book's folder (the first argument), as jupyter-book decides."""
    output = arguments[0] if arguments else "."
    for flag, value in zip(arguments, arguments[1:]):
        if flag == "--path-output":
            output = value
    return Path(output).resolve() / "_build"


def execution_cache(arguments: Sequence[str]) -> Path:
    """Where myst-nb keeps executed notebooks for this build: ``<output>/_build/.jupyter_cache``."""
    return build_folder(arguments) / ".jupyter_cache"


def build_log(arguments: Sequence[str]) -> Path:
    """Where the whole output of this build is kept: ``<output>/_build/build.log``."""
    return build_folder(arguments) / "build.log"


def tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last ``lines`` lines of a log file (all of them if it is shorter; none if it is missing)."""
    if not path.is_file():
        return []
    return path.read_text(errors="replace").splitlines()[-lines:]


def failure_report(path: Path, returncode: int, lines: int = TAIL_LINES) -> str:
    """What a failed build prints last: the log's tail, then its path."""
    last = tail(path, lines)
    rule = "-" * 30
    return "\n".join(
        [
            f"{rule} the last {len(last)} lines of {path} {rule}",
            *last,
            rule * 2,
            f"The book build failed (exit status {returncode}). Its whole log, kernels' output included: {path}",
        ]
    )


def run_logged(command: Sequence[str], log: Path, echo: BinaryIO, env: dict[str, str] | None = None) -> int:
    """Run ``command`` with its standard output and error joined, copy every line to ``echo`` and
    to ``log`` as it comes (so a killed build keeps what it printed), and return its exit status."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with (
        log.open("wb") as kept,
        subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env) as process,
    ):
        assert process.stdout is not None
        for line in iter(process.stdout.readline, b""):
            echo.write(line)
            echo.flush()
            kept.write(line)
            kept.flush()
        return process.wait()


def create_execution_cache(path: Path) -> None:
    """Create jupyter-cache's database before the parallel build starts: two Sphinx workers that
    find none at once both create its tables, and the second fails (an OperationalError on a
    UNIQUE constraint, seen here); one process creating it first leaves them nothing to race for."""
    from jupyter_cache.cache.db import create_db

    path.mkdir(parents=True, exist_ok=True)
    create_db(path).dispose()


#: Set by the robustness sweep alone; in a build it would turn every check into a log line.
CLAIMS_LOG_VARIABLE = "BOOK_CLAIMS_LOG"


def claims_log_refusal() -> str:
    return (
        f"{CLAIMS_LOG_VARIABLE} is set: it would turn every claim the book checks into a log line, and the "
        f"build would publish claims nobody checked. Only make robustness (scripts/robustness.py) sets it; "
        f"unset {CLAIMS_LOG_VARIABLE} and build again."
    )


def main(arguments: list[str]) -> int:
    """Run the build in a child process, teeing all it prints to ``<output>/_build/build.log``; on
    failure, print the log's last lines and its path."""
    if os.environ.get(CLAIMS_LOG_VARIABLE):
        print(claims_log_refusal(), file=sys.stderr, flush=True)
        return 2
    if os.environ.get(CHILD_VARIABLE):
        return build(arguments)
    log = build_log(arguments)
    command = [sys.executable, str(Path(__file__).resolve()), *arguments]
    returncode = run_logged(
        command, log, sys.stdout.buffer, env={**os.environ, CHILD_VARIABLE: "1", "PYTHONUNBUFFERED": "1"}
    )
    if returncode != 0:
        print(failure_report(log, returncode), flush=True)
    else:
        print(f"The build's whole log: {log}", flush=True)
    return returncode


def build(arguments: list[str]) -> int:
    """The build itself: jupyter-book, with several chapters read (and executed) at once."""
    # Imported here, not at the top, so that the tests of the functions above load no jupyter-book.
    import jupyter_book.sphinx
    from jupyter_book.cli.main import main as jupyter_book_main

    jobs, threads = jobs_and_threads(usable_cores(), dict(os.environ))
    os.environ["OMP_NUM_THREADS"] = str(threads)  # the kernels inherit it, and torch reads it at import
    print(f"Building with {jobs} chapter(s) at once, {threads} thread(s) each", flush=True)
    if jobs > 1:
        create_execution_cache(execution_cache(arguments))
        sphinx.builders.make_chunks = one_page_per_batch  # type: ignore[attr-defined]
        jupyter_book.sphinx.build_sphinx = functools.partial(jupyter_book.sphinx.build_sphinx, jobs=jobs)
    try:
        jupyter_book_main(args=["build", *arguments], prog_name="jupyter-book", standalone_mode=False)
    except SystemExit as stop:  # jupyter-book exits with the build's status
        return int(stop.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
