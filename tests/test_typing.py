"""The companion package is typed: mypy --strict (configured in pyproject.toml) finds nothing."""

from __future__ import annotations

import subprocess
import sys

from chapters import ROOT


def test_package_passes_mypy_strict(tmp_path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), str(ROOT / "src" / "transformer_book")],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert result.returncode == 0, f"mypy found problems in the package:\n{result.stdout}{result.stderr}"
