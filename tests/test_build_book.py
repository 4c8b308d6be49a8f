"""scripts/build_book.py: how many chapters the build executes at once, with how many threads, in what order."""

from __future__ import annotations

import io
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import build_book
import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
import chapter_report  # noqa: E402


@pytest.mark.parametrize(
    ("cores", "environment", "expected"),
    [
        (2, {}, (2, 1)),  # the default: a chapter per core, one thread each
        (1, {}, (1, 1)),
        (2, {"OMP_NUM_THREADS": "1"}, (2, 1)),
        (2, {"OMP_NUM_THREADS": "4"}, (1, 4)),  # the reader's thread count is kept; fewer chapters at once
        (8, {"OMP_NUM_THREADS": "2"}, (4, 2)),
        (8, {"BOOK_BUILD_JOBS": "3"}, (3, 1)),
        (2, {"OMP_NUM_THREADS": "", "BOOK_BUILD_JOBS": "0"}, (2, 1)),  # empty or zero: not set
    ],
)
def test_jobs_and_threads(cores: int, environment: dict[str, str], expected: tuple[int, int]) -> None:
    assert build_book.jobs_and_threads(cores, environment) == expected


def test_every_page_is_read_once_and_the_longest_first() -> None:
    pages = ["book/preface", "book/batching", "book/decoder-only", "book/glossary", "book/training"]
    batches = build_book.one_page_per_batch(pages, 2)
    assert sorted(page for batch in batches for page in batch) == sorted(pages)
    assert all(len(batch) == 1 for batch in batches)
    order = read_order(batches, 2)
    recorded = build_book.swept_seconds()
    assert recorded["decoder-only"] > recorded["batching"], "the sweep's records no longer say what this test assumes"
    assert order.index("book/decoder-only") < order.index("book/batching") < order.index("book/preface")


def read_order(batches: list[list[str]], nproc: int) -> list[str]:
    """The order in which Sphinx's own ParallelTasks starts reading the batches.

    Each reader writes its page down as it starts, then sleeps: the k-th to start sleeps 0.3 (k + 1) s,
    so that no two workers free up together and every later start is 0.3 s or more after the one
    before. With equal sleeps, two workers freed at once started the next two pages so close together
    that a loaded machine wrote them down in the other order (a CI run failed so)."""
    import fcntl

    from sphinx.util.parallel import ParallelTasks

    with tempfile.TemporaryDirectory() as folder:
        started = Path(folder) / "started"
        started.touch()

        def read(batch: list[str]) -> None:
            with started.open("r+") as record:
                fcntl.flock(record, fcntl.LOCK_EX)  # count and write as one step
                rank = len(record.read().split())
                record.write(batch[0] + "\n")
            time.sleep(0.3 * (rank + 1))

        tasks = ParallelTasks(nproc)
        for batch in batches:
            tasks.add_task(read, batch)
        tasks.join()
        return started.read_text().split()


def test_sphinx_starts_the_costliest_pages_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sphinx starts all but the first batches last in, first out: the build must still read the
    costliest pages first, and not leave the third and fourth longest to the end (as it did)."""
    costs = {"a": 90.0, "b": 89.0, "c": 86.0, "d": 78.0, "e": 29.0, "f": 5.0}
    monkeypatch.setattr(build_book, "swept_seconds", lambda: costs)
    pages = [f"book/{name}" for name in sorted(costs, reverse=True)] + ["book/preface"]
    order = read_order(build_book.one_page_per_batch(pages, 2), 2)
    assert order[:2] == ["book/a", "book/b"] or order[:2] == ["book/b", "book/a"]
    assert order[2:] == ["book/c", "book/d", "book/e", "book/f", "book/preface"]


def test_the_execution_cache_is_where_myst_nb_looks(tmp_path: Path) -> None:
    assert build_book.execution_cache([".", "--builder", "html"]) == Path(".").resolve() / "_build" / ".jupyter_cache"
    arguments = [".", "--builder", "html", "--path-output", str(tmp_path), "-W"]
    assert build_book.execution_cache(arguments) == tmp_path / "_build" / ".jupyter_cache"


def test_the_execution_cache_is_created_once_before_the_parallel_build(tmp_path: Path) -> None:
    """The database and its tables exist before any worker opens it, and creating it again is harmless."""
    from jupyter_cache import get_cache

    cache = tmp_path / "_build" / ".jupyter_cache"
    build_book.create_execution_cache(cache)
    build_book.create_execution_cache(cache)
    assert (cache / "global.db").is_file()
    assert get_cache(str(cache)).list_cache_records() == []


def test_the_build_log_is_the_build_folders(tmp_path: Path) -> None:
    assert build_book.build_log([".", "--builder", "html"]) == Path(".").resolve() / "_build" / "build.log"
    assert build_book.build_log([".", "--path-output", str(tmp_path)]) == tmp_path / "_build" / "build.log"


FAKE_FAILING_BUILD = """
import os, subprocess, sys
for i in range(200):
    print(f"line {i}", flush=True)
print("a warning on standard error", file=sys.stderr, flush=True)
# A grandchild writing to the inherited descriptor, as a kernel or a forked Sphinx reader does.
subprocess.run([sys.executable, "-c", "print('[IPKernelApp] ERROR | from a kernel')"])
print("Sphinx parallel build error: the real reason", file=sys.stderr, flush=True)
sys.exit(3)
"""


def test_everything_the_build_prints_is_echoed_and_kept(tmp_path: Path) -> None:
    """Standard output, standard error and what the build's own children print, in order, on the terminal
    and in the log; and the exit status is the command's."""
    log = tmp_path / "_build" / "build.log"
    echo = io.BytesIO()
    returncode = build_book.run_logged([sys.executable, "-u", "-c", FAKE_FAILING_BUILD], log, echo)
    assert returncode == 3
    kept = log.read_text().splitlines()
    assert echo.getvalue().decode().splitlines() == kept
    assert kept[0] == "line 0" and kept[199] == "line 199"
    assert kept[200:] == [
        "a warning on standard error",
        "[IPKernelApp] ERROR | from a kernel",
        "Sphinx parallel build error: the real reason",
    ]


def test_a_failed_build_ends_with_its_logs_tail_and_path(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("".join(f"line {i}\n" for i in range(200)) + "Sphinx parallel build error: the real reason\n")
    report = build_book.failure_report(log, 1)
    lines = report.splitlines()
    assert lines[1:81] == [f"line {i}" for i in range(121, 200)] + ["Sphinx parallel build error: the real reason"]
    assert str(log) in lines[0] and str(log) in lines[-1] and "exit status 1" in lines[-1]
    assert build_book.tail(log, 3) == ["line 198", "line 199", "Sphinx parallel build error: the real reason"]
    assert build_book.tail(tmp_path / "missing.log") == []


def test_main_runs_the_build_in_a_child_and_reports_its_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """main() re-runs this script as the build, with its output teed; a failing build prints the tail."""
    commands: list[list[str]] = []

    def fake_run_logged(command: list[str], log: Path, echo: object, env: dict[str, str]) -> int:
        commands.append(command)
        assert env[build_book.CHILD_VARIABLE] == "1"
        log.parent.mkdir(parents=True)
        log.write_text("reading sources...\nException occurred: DeadKernelError\n")
        return 2

    monkeypatch.delenv(build_book.CHILD_VARIABLE, raising=False)
    monkeypatch.setattr(build_book, "run_logged", fake_run_logged)
    assert build_book.main([".", "--path-output", str(tmp_path), "-W"]) == 2
    assert commands[0][1:] == [str(Path(build_book.__file__).resolve()), ".", "--path-output", str(tmp_path), "-W"]
    out = capsys.readouterr().out
    assert "Exception occurred: DeadKernelError" in out
    assert f"whole log, kernels' output included: {tmp_path / '_build' / 'build.log'}" in out


def test_an_executor_exception_fails_its_chapter_only(tmp_path: Path) -> None:
    """What myst-nb's executors call: an exception other than a failed cell comes back as the
    chapter's error, with its traceback, as a failed cell does; KeyboardInterrupt still stops."""
    from nbclient.exceptions import DeadKernelError

    def dies(nb: object, cwd: str | None, **kwargs: object) -> None:
        raise DeadKernelError("Kernel died")

    wrapped = chapter_report._fail_only_the_chapter(dies)
    result = wrapped({"cells": []}, str(tmp_path), timeout=1, allow_errors=False)
    assert isinstance(result.err, DeadKernelError)
    assert "DeadKernelError: Kernel died" in (result.exc_string or "")
    assert chapter_report._fail_only_the_chapter(wrapped) is wrapped, "wrapping twice would be harmless but noisy"

    def interrupted(nb: object, cwd: str | None, **kwargs: object) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        chapter_report._fail_only_the_chapter(interrupted)({}, None)


DIES = "import os\nos._exit(1)"
WORKS = "print('still here')"


@pytest.mark.build
def test_a_dead_kernel_fails_only_its_chapter_in_a_parallel_build(tmp_path: Path) -> None:
    """Two notebooks read at once (sphinx-build -j 2), as the book's build does: the kernel of one dies.
    Before _ext/chapter_report.py caught it, its DeadKernelError stopped the whole build (no page
    written) and the other reader was terminated, its kernel logging 'Socket operation on non-socket'."""
    import nbformat

    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(ROOT / '_ext')!r})\n"
        "extensions = ['myst_nb', 'chapter_report', 'parallel_reading']\n"
        "nb_execution_mode = 'cache'\nnb_execution_raise_on_error = False\nnb_execution_timeout = 60\n"
        "nb_execution_show_tb = True\n"
    )
    (source / "index.md").write_text("# Index\n\n```{toctree}\ndies\nworks\n```\n")
    for name, code in (("dies", DIES), ("works", WORKS)):
        notebook = nbformat.v4.new_notebook(
            cells=[nbformat.v4.new_markdown_cell(f"# {name}"), nbformat.v4.new_code_cell(code)]
        )
        notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nbformat.write(notebook, source / f"{name}.ipynb")
    command = [
        sys.executable,
        "-m",
        "sphinx",
        "-j",
        "2",
        "-b",
        "html",
        "--keep-going",
        "-W",
        str(source),
        str(tmp_path / "html"),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    log = result.stdout + result.stderr
    assert "Sphinx parallel build error" not in log, log
    assert "dies.ipynb: WARNING: Executing notebook failed: DeadKernelError" in log, log
    assert (
        "1 chapter(s) failed to execute" in log and "dies: nbclient.exceptions.DeadKernelError: Kernel died" in log
    ), log
    assert (tmp_path / "html" / "works.html").is_file(), log
    assert "still here" in (tmp_path / "html" / "works.html").read_text()
    assert result.returncode != 0, "-W: a failed chapter still fails the build"


def test_the_test_builds_failure_shows_its_logs_tail_and_path(tmp_path: Path) -> None:
    """What test_build.py prints when the build failed: the last 80 lines of its log, and the log's path."""
    from conftest import BookBuild

    log = "".join(f"line {i}\n" for i in range(100)) + "Sphinx parallel build error:\nRuntimeError: the reason\n"
    build = BookBuild(1, log, tmp_path / "_build" / "html")
    assert build.log_path == tmp_path / "_build" / "build.log"
    shown = build.log_tail().splitlines()
    assert str(build.log_path) in shown[0]
    assert shown[1:] == [f"line {i}" for i in range(22, 100)] + [
        "Sphinx parallel build error:",
        "RuntimeError: the reason",
    ]


def test_a_build_with_the_sweeps_claims_log_set_is_refused(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    from transformer_book.runtime import CLAIMS_LOG_VARIABLE

    assert build_book.CLAIMS_LOG_VARIABLE == CLAIMS_LOG_VARIABLE
    monkeypatch.setenv(CLAIMS_LOG_VARIABLE, "1")
    assert build_book.main([".", "--builder", "html"]) == 2
    assert "BOOK_CLAIMS_LOG is set" in capsys.readouterr().err
