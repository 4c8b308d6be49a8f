"""Shared fixtures: the chapter list, and one build of the whole book per test session."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def pytest_configure(config: pytest.Config) -> None:
    """The claims log of the robustness sweep turns every check into a log line: never in a test run."""
    if os.environ.get("BOOK_CLAIMS_LOG"):
        raise pytest.UsageError(
            "BOOK_CLAIMS_LOG is set: it would turn every claim of the book into a log line. Only make robustness "
            "sets it; unset BOOK_CLAIMS_LOG and run the tests again."
        )


@dataclass
class BookBuild:
    """The result of ``jupyter-book build`` from an empty cache."""

    returncode: int
    log: str
    html: Path  # the folder holding index.html

    @property
    def log_path(self) -> Path:
        """The build's whole output, kernels' logs included, as scripts/build_book.py keeps it."""
        return self.html.parent / "build.log"

    def log_tail(self, lines: int = 80) -> str:
        """The last lines of the build's output and where the whole of it is: what a failure shows."""
        last = self.log.splitlines()[-lines:]
        return f"the last {len(last)} lines of the build's log ({self.log_path}):\n" + "\n".join(last)

    @property
    def warnings(self) -> list[str]:
        """Each warning or error of the build, with the lines that follow it up to the next one
        (a failed chapter's warning carries its traceback there)."""
        plain = re.sub(r"\x1b\[[0-9;]*m", "", self.log)
        entries: list[str] = []
        for line in plain.splitlines():
            if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line):
                entries.append(line)
            elif entries and not re.match(
                r"^(reading sources|writing output|\S+\.md: Executing|checking|copying|"
                r"looking for|pickling|preparing|highlighting|dumping|build finished)",
                line,
            ):
                entries[-1] += "\n" + line
        return entries

    def warnings_of(self, page: Path) -> list[str]:
        """The warnings Sphinx attributes to one page of the book (``book/<slug>.md``)."""
        name = str(page.relative_to(ROOT))
        return [entry for entry in self.warnings if re.match(rf"^\S*{re.escape(name)}(:\d+)?: ", entry)]

    @property
    def failed_chapters(self) -> set[str]:
        """The slugs of the chapters whose execution failed in this build."""
        return set(re.findall(r"book/([\w-]+)\.md: WARNING: Executing notebook failed", "\n".join(self.warnings)))


#: Where to build, instead of a temporary folder: CI sets it to publish the very site the tests checked.
BUILD_OUTPUT_VARIABLE = "BOOK_BUILD_OUTPUT"
SITE_REPORT = pytest.StashKey[list[str]]()


def build_output(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh folder for the build: ``$BOOK_BUILD_OUTPUT`` when set (it must be empty), else a temporary one."""
    chosen = os.environ.get(BUILD_OUTPUT_VARIABLE)
    if not chosen:
        return tmp_path_factory.mktemp("book")
    output = Path(chosen).resolve()
    if output.exists() and any(output.iterdir()):
        pytest.fail(
            f"{BUILD_OUTPUT_VARIABLE}={output} is not empty: the book must build from an empty cache", pytrace=False
        )
    output.mkdir(parents=True, exist_ok=True)
    return output


@dataclass
class StartedBuild:
    """A build of the book running in the background, its output going to ``output/console.log``."""

    process: subprocess.Popen[bytes]
    output: Path

    @property
    def console(self) -> Path:
        return self.output / "console.log"


def start_build(output: Path) -> StartedBuild:
    """Start building the book exactly as `make book` does (scripts/build_book.py, several chapters
    at once) but into ``output``, a fresh folder, so that no cache is reused."""
    command = [
        sys.executable,
        str(ROOT / "scripts" / "build_book.py"),
        str(ROOT),
        "--builder",
        "html",
        "--path-output",
        str(output),
        "-W",
        "-n",
        "--keep-going",
    ]
    with (output / "console.log").open("wb") as console:
        process = subprocess.Popen(
            command,
            stdout=console,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONHASHSEED": "0"},
            start_new_session=True,  # its own process group, so that the kernels stop with it
        )
    return StartedBuild(process, output)


@pytest.fixture(scope="session", autouse=True)
def _early_book_build(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartedBuild | None]:
    """Start the book's build before the first test, when a test of the session needs it.

    The build runs two chapters at a time, one thread each, while the unit tests that come first
    run beside it. Started only when the first site test asked for it, the build waited for the unit
    tests, which kept one core busy for minutes while the other idled. A session that ends before
    the build does stops it."""
    if not any("book_build" in getattr(item, "fixturenames", ()) for item in request.session.items):
        yield None
        return
    started = start_build(build_output(tmp_path_factory))
    yield started
    if started.process.poll() is None:
        os.killpg(started.process.pid, signal.SIGTERM)
        started.process.wait()


@pytest.fixture(scope="session")
def book_build(_early_book_build: StartedBuild | None, tmp_path_factory: pytest.TempPathFactory) -> BookBuild:
    """The book built from an empty cache: the build started before the first test, waited for here
    (or started now, for a session whose tests asked for it only at run time)."""
    started = _early_book_build or start_build(build_output(tmp_path_factory))
    returncode = started.process.wait()
    # The build's log holds all it printed (kernels included), without the tail build_book.py repeats
    # on failure; what the script printed stands in only if it died before writing its log.
    log = started.output / "_build" / "build.log"
    text = log.read_text(errors="replace") if log.is_file() else started.console.read_text(errors="replace")
    return BookBuild(returncode, text, started.output / "_build" / "html")


@pytest.fixture(autouse=True)
def _skip_pages_of_failed_chapters(request: pytest.FixtureRequest) -> None:
    """A chapter that failed to execute fails its own build test (test_build.py), once; the checks
    of its half-built page are skipped, so one failure does not cascade into dozens."""
    page = getattr(getattr(request.node, "callspec", None), "params", {}).get("page")
    source = getattr(page, "source", None)
    if source is None:  # not a page of the site (test_build's Path parameters have no source)
        return
    build: BookBuild = request.getfixturevalue("book_build")
    if source.stem in build.failed_chapters:
        pytest.skip(
            f"{source.stem} failed to execute in the build: see test_build.py::test_chapter_builds_cleanly[{source.stem}]"
        )


@pytest.fixture(scope="session")
def site_report(request: pytest.FixtureRequest) -> list[str]:
    """Lines the tests of the built website print at the end of the run (screenshots, links, timings)."""
    return request.config.stash.setdefault(SITE_REPORT, [])


@pytest.fixture(scope="session")
def screenshot_dir(book_build: BookBuild, site_report: list[str]) -> Path:
    """Where the browser tests save their screenshots: in the build folder, next to html/, never in git."""
    folder = book_build.html.parent / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    site_report.append(f"screenshots of every chapter, light and dark, for review: {folder}")
    return folder


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(SITE_REPORT, [])
    if lines:
        terminalreporter.write_sep("-", "the built website")
        for line in lines:
            terminalreporter.write_line(line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the fast tests first: unit and source tests, beside the book build that started before
    them (``_early_book_build``); then the tests of the built site; then the Colab twins. A broken
    function is reported in a few minutes, not after the minutes of chapter execution. The sort is
    stable, so file order holds within each stage."""

    def stage(item: pytest.Item) -> int:
        if item.get_closest_marker("chapter"):
            return 2
        if item.get_closest_marker("build"):
            return 1
        return 0

    items.sort(key=stage)
