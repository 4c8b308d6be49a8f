"""The code is lint-clean: ruff (configured in pyproject.toml) finds nothing, generated modules included."""

from __future__ import annotations

import subprocess
import sys

from chapters import ROOT


def test_ruff_finds_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."],
                            capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, (f"ruff found problems (fix generated modules in their chapter's export "
                                    f"cells, then make sync):\n{result.stdout}{result.stderr}")
