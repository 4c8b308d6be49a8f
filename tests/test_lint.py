"""The code is lint-clean and formatted: ruff (configured in pyproject.toml) finds nothing to fix or
reformat, generated modules included (scripts/export.py formats them as it writes them)."""

from __future__ import annotations

import subprocess
import sys

from chapters import ROOT


def test_ruff_finds_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, (
        f"ruff found problems (fix generated modules in their chapter's export "
        f"cells, then make sync):\n{result.stdout}{result.stderr}"
    )


def test_ruff_format_would_change_nothing() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 0, (
        f"ruff format would reformat these files (run ruff format on tests, scripts and "
        f"hand-written modules; make sync re-exports the generated ones):\n{result.stdout}{result.stderr}"
    )
