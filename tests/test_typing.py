"""The package, the scripts, the Sphinx extensions and the tests are typed: mypy --strict (configured
in pyproject.toml, where test functions may leave their parameters unannotated) finds nothing."""

from __future__ import annotations

import os
import subprocess
import sys

from chapters import ROOT


def test_package_scripts_extensions_and_tests_pass_mypy_strict() -> None:
    # The scripts import each other by name (they run from scripts/), so mypy searches there too; the
    # tests import the extensions' modules and their shared torch_reference by name. The cache lives in
    # the repository's (ignored) .mypy_cache, so that a second make check takes seconds.
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(ROOT / ".mypy_cache"),
            str(ROOT / "src" / "transformer_book"),
            str(ROOT / "scripts"),
            str(ROOT / "_ext"),
            str(ROOT / "tests"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "MYPYPATH": os.pathsep.join(str(ROOT / folder) for folder in ["scripts", "_ext", "tests"])},
    )
    assert result.returncode == 0, f"mypy found problems:\n{result.stdout}{result.stderr}"
