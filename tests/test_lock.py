"""The toolchain is locked: requirements.lock pins every package with hashes, agrees with the versions
chosen in requirements.txt, and is what the tests run on."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest
from packaging.markers import Marker
from packaging.utils import canonicalize_name
from packaging.version import Version

from chapters import ROOT

PIN = re.compile(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)[ \t]*(?:;[ \t]*([^\\\n]+?))?[ \t]*\\?$", re.M)


def pins(path: Path) -> list[tuple[str, str, str | None]]:
    """(name, version, environment marker or None) of every ``name==version`` line of a requirements file."""
    if not path.exists():
        return []
    return [
        (canonicalize_name(name), version, marker or None) for name, version, marker in PIN.findall(path.read_text())
    ]


LOCKED = pins(ROOT / "requirements.lock")
CHOSEN = {name: version for name, version, _ in pins(ROOT / "requirements.txt")}


def test_every_locked_package_has_a_hash() -> None:
    text = (ROOT / "requirements.lock").read_text()
    starts = [match.start() for match in PIN.finditer(text)]
    assert starts, "requirements.lock is missing or has no pins: run make lock"
    blocks = [text[start:end] for start, end in zip(starts, [*starts[1:], len(text)])]
    unhashed = [block.splitlines()[0] for block in blocks if "--hash=sha256:" not in block]
    assert not unhashed, f"pins without a hash in requirements.lock (run make lock): {unhashed}"


@pytest.mark.parametrize("name", sorted(set(CHOSEN) - {"torch"}))
def test_lock_keeps_the_version_chosen_in_requirements_txt(name: str) -> None:
    locked = {version for locked_name, version, _ in LOCKED if locked_name == name}
    assert locked == {CHOSEN[name]}, (
        f"requirements.txt asks for {name}=={CHOSEN[name]}, requirements.lock has "
        f"{sorted(locked) or 'nothing'}: run make lock"
    )


def test_lock_leaves_torch_to_the_machine() -> None:
    assert "torch" in CHOSEN, "requirements.txt must pin the torch version make installs after the lock"
    assert not [name for name, _, _ in LOCKED if name == "torch"], (
        "torch must not be locked: its build is the machine's"
    )


def test_tests_run_on_the_locked_packages() -> None:
    """What `make` installed is what the lock says (after an edit of the lock, make reinstalls)."""
    installed: dict[str, str] = {}
    for dist in importlib.metadata.distributions():  # in sys.path order: the first is the one imports load
        # Later entries can be copies vendored by a tool (setuptools, imported by torch.utils.benchmark,
        # puts its _vendor folder on sys.path); they must not hide the environment's own.
        installed.setdefault(canonicalize_name(dist.metadata["Name"]), dist.version)
    wrong = [
        f"{name}: locked {version}, installed {installed.get(name, 'nothing')}"
        for name, version, marker in LOCKED
        if (marker is None or Marker(marker).evaluate()) and installed.get(name) != version
    ]
    assert not wrong, "the environment differs from requirements.lock (run make):\n" + "\n".join(wrong)
    torch_version = Version(installed["torch"])
    assert torch_version.public == CHOSEN["torch"], (
        f"torch {torch_version} is installed, requirements.txt pins {CHOSEN['torch']}"
    )


def test_the_autograder_is_locked_apart_and_stays_out_of_the_books_environment() -> None:
    """otter-grader and what it adds are pinned with hashes in requirements-otter.lock and installed in
    .venv/otter; the chapters' kernels must not import ipywidgets, which it pulls in (their progress bars
    would become widgets that the built pages cannot show)."""
    otter_lock = (ROOT / "requirements-otter.lock").read_text()
    added = pins(ROOT / "requirements-otter.lock")
    assert ("otter-grader", "6.1.0", None) in added and otter_lock.count("--hash=sha256:") >= len(added)
    assert not {name for name, _, _ in added} & {name for name, _, _ in LOCKED}, "a package is in both locks"
    assert importlib.util.find_spec("ipywidgets") is None, "ipywidgets is importable in the book's environment"
