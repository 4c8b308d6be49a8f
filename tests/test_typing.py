"""The package, the scripts and the Sphinx extensions are typed: mypy --strict (configured in
pyproject.toml) finds nothing."""

from __future__ import annotations

import os
import subprocess
import sys

from chapters import ROOT


def test_package_scripts_and_extensions_pass_mypy_strict(tmp_path) -> None:
    # The scripts import each other by name (they run from scripts/), so mypy searches there too.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(tmp_path),
            str(ROOT / "src" / "transformer_book"),
            str(ROOT / "scripts"),
            str(ROOT / "_ext"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": str(ROOT / "scripts")},
    )
    assert result.returncode == 0, f"mypy found problems:\n{result.stdout}{result.stderr}"
