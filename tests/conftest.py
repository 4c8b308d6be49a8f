"""Shared fixtures: the chapter list, and one build of the whole book per test session."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


@dataclass
class BookBuild:
    """The result of ``jupyter-book build`` from an empty cache."""

    returncode: int
    log: str
    html: Path  # the folder holding index.html


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
        pytest.fail(f"{BUILD_OUTPUT_VARIABLE}={output} is not empty: the book must build from an empty cache", pytrace=False)
    output.mkdir(parents=True, exist_ok=True)
    return output


@pytest.fixture(scope="session")
def book_build(tmp_path_factory: pytest.TempPathFactory) -> BookBuild:
    """Build the book once, exactly as `make book` does but into a fresh folder, so no cache is reused."""
    output = build_output(tmp_path_factory)
    command = [
        str(Path(sys.executable).parent / "jupyter-book"), "build", str(ROOT),
        "--builder", "html", "--path-output", str(output), "-W", "-n", "--keep-going",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    return BookBuild(result.returncode, result.stdout + result.stderr, output / "_build" / "html")


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
