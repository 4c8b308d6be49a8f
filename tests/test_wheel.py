"""The package a reader installs (Colab's bootstrap installs the wheel the website publishes) is
complete: built as a wheel and imported from it alone, every module of src/ is there and imports,
and the book's pretrained model is there and loads."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from chapters import ROOT

PACKAGE = ROOT / "src" / "transformer_book"


def test_every_module_imports_from_the_built_wheel(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "--wheel-dir",
            str(tmp_path / "dist"),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = (tmp_path / "dist").glob("transformer_book-*.whl")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--quiet",
            "--target",
            str(tmp_path / "site"),
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    modules = sorted(path.stem for path in PACKAGE.glob("*.py") if path.stem != "__init__")
    script = (
        "import importlib, pathlib, transformer_book\n"
        f"assert pathlib.Path(transformer_book.__file__).is_relative_to({str(tmp_path / 'site')!r}), transformer_book.__file__\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('transformer_book.' + name)\n"
        "assert (pathlib.Path(transformer_book.__file__).parent / 'py.typed').exists()\n"
        # the book's pretrained model travels in the wheel, so Part VIII runs in Colab
        "from transformer_book.pretraining import BOOK_MODEL, load_pretrained\n"
        f"assert BOOK_MODEL.is_relative_to(pathlib.Path({str(tmp_path / 'site')!r}).resolve()), BOOK_MODEL\n"
        "load_pretrained()\n"
    )
    # Run from an empty folder with only the wheel's files ahead of the environment, so neither
    # src/ nor the editable install can stand in for a module the wheel left out.
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path / "site")},
    )
    assert result.returncode == 0, f"the wheel is incomplete:\n{result.stderr}"
