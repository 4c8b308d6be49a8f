"""The Colab notebooks install a release of the package (a git tag v<version>), so a release must
match what the tests checked: one version everywhere, and no change to the package after its tag."""

from __future__ import annotations

import json
import subprocess

import pytest

import transformer_book
from chapters import ROOT, package_version


def test_one_version_everywhere() -> None:
    npm_version = json.loads((ROOT / "package.json").read_text())["version"]
    assert transformer_book.__version__ == package_version() == npm_version, (
        f"versions differ: pyproject.toml {package_version()}, transformer_book.__version__ "
        f"{transformer_book.__version__}, package.json {npm_version}"
    )


def test_package_is_unchanged_since_its_release_tag() -> None:
    """Once v<version> is tagged, notebooks install exactly that; a later change to src/ needs a new version."""
    tag = f"v{package_version()}"
    try:
        tagged = (
            subprocess.run(
                ["git", "rev-parse", "-q", "--verify", f"refs/tags/{tag}"], cwd=ROOT, capture_output=True, text=True
            ).returncode
            == 0
        )
    except FileNotFoundError:
        pytest.skip("git is not installed")
    if not tagged:
        return  # a new version, released by .github/workflows/release.yml once CI passes on main
    changed = subprocess.run(
        ["git", "diff", "--name-only", tag, "--", "src/"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert not changed, (
        f"{', '.join(changed)} changed since release {tag}, which the Colab notebooks install: "
        f"bump the version in pyproject.toml, src/transformer_book/__init__.py and package.json, "
        f"then make sync (CONTRIBUTING.md, 'Releases')"
    )
