"""The Colab notebooks install a release of the package (a git tag v<version>), so a release must
match what the tests checked: one version everywhere, and no change to the package after its tag."""

from __future__ import annotations

import json
import os
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
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
        # A shallow checkout (actions/checkout's default) has no tags, so it cannot tell a new version
        # from a released one; this test once returned early there and could never fail in CI. The
        # book's workflow fetches the tags, so there a shallow checkout is an error; elsewhere the
        # test says that it could not check.
        if shallow == "true":
            reason = (
                f"this is a shallow clone without tags, so it cannot tell whether {tag} was released and "
                f"src/ has changed since: fetch the history and tags (git fetch --tags --unshallow, or "
                f"fetch-depth: 0 in actions/checkout)"
            )
            if os.environ.get("GITHUB_ACTIONS") == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        return  # a full clone without the tag: a new version, tagged by release.yml once CI passes on main
    changed = subprocess.run(
        ["git", "diff", "--name-only", tag, "--", "src/"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert not changed, (
        f"{', '.join(changed)} changed since release {tag}, which the Colab notebooks install: "
        f"bump the version in pyproject.toml, src/transformer_book/__init__.py and package.json, "
        f"then make sync (CONTRIBUTING.md, 'Releases')"
    )
