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


@pytest.fixture(scope="session")
def book_build(tmp_path_factory: pytest.TempPathFactory) -> BookBuild:
    """Build the book once, exactly as `make book` does but into a fresh folder, so no cache is reused."""
    output = tmp_path_factory.mktemp("book")
    command = [
        str(Path(sys.executable).parent / "jupyter-book"), "build", str(ROOT),
        "--builder", "html", "--path-output", str(output), "-W", "-n", "--keep-going",
    ]
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    return BookBuild(result.returncode, result.stdout + result.stderr, output / "_build" / "html")
