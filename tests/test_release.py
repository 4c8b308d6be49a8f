"""The Colab notebooks install the companion package's wheel that the website publishes, built from the
same commit as the pages (``_ext/site_assets.py``): every chapter's bootstrap cell names exactly the
address where the site build puts that wheel, and the version is one everywhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jupytext
import nbformat
import pytest

import transformer_book
from chapters import ROOT, book_chapters, package_version, site_url, wheel_name, wheel_url

sys.path.insert(0, str(ROOT / "_ext"))
import site_assets  # noqa: E402  (a local Sphinx extension, not a package)


def test_one_version_everywhere() -> None:
    npm_version = json.loads((ROOT / "package.json").read_text())["version"]
    assert transformer_book.__version__ == package_version() == npm_version, (
        f"versions differ: pyproject.toml {package_version()}, transformer_book.__version__ "
        f"{transformer_book.__version__}, package.json {npm_version}"
    )


def test_the_site_build_makes_the_wheel_the_notebooks_install(tmp_path: Path) -> None:
    """The wheel the site build publishes has the name the bootstrap cells ask for, on the site's address."""
    wheel = site_assets.build_wheel(tmp_path)
    assert wheel.name == wheel_name(), f"the site build makes {wheel.name}, the notebooks install {wheel_name()}"
    assert wheel_url() == f"{site_url()}/_static/{wheel.name}"
    assert site_url() == "https://transformer-book.github.io/transformer-book", site_url()


def bootstrap_source(cells: list[nbformat.NotebookNode]) -> str:
    return str(next(cell.source for cell in cells if cell.cell_type == "code"))


@pytest.mark.parametrize("chapter", book_chapters(), ids=lambda chapter: chapter.stem)
def test_bootstrap_installs_the_published_wheel(chapter: Path) -> None:
    """In the chapter and in its Colab twin, the first cell installs that wheel, by its exact address."""
    twin = chapter.with_suffix(".ipynb")
    for path, notebook in [(chapter, jupytext.read(chapter)), (twin, nbformat.read(twin, as_version=4))]:
        source = bootstrap_source(notebook.cells)
        addresses = [token.strip("\"',[]") for token in source.split() if "://" in token]
        assert addresses == [wheel_url()], f"{path.name}: the bootstrap installs {addresses}, not [{wheel_url()}]"
        assert '"--no-deps"' in source, f"{path.name}: the bootstrap would let pip replace Colab's torch"


def test_the_launch_menu_offers_the_instructors_and_the_students_edition() -> None:
    """_ext/site_assets.py renames the theme's Colab entry and adds the student's edition after it,
    on a page whose student's edition exists; other pages keep the theme's menu."""
    colab = {
        "type": "link",
        "text": "Colab",
        "tooltip": "Launch on Colab",
        "icon": "_static/images/logo_colab.png",
        "url": "https://colab.research.google.com/github/o/r/blob/main/book/batching.ipynb",
    }

    def menu() -> dict[str, Any]:
        return {"header_buttons": [{"type": "group", "label": "launch-buttons", "buttons": [dict(colab)]}]}

    app = type("App", (), {"srcdir": str(ROOT)})()
    context = menu()
    site_assets._add_student_edition(app, "book/batching", "page.html", context, None)
    buttons = context["header_buttons"][0]["buttons"]
    assert [button["text"] for button in buttons] == ["Colab, instructor's edition", "Colab, student's edition"]
    assert buttons[0]["url"] == colab["url"]
    assert buttons[1]["url"] == "https://colab.research.google.com/github/o/r/blob/main/book/student/batching.ipynb"
    assert (ROOT / "book" / "student" / "batching.ipynb").is_file()
    other = menu()
    site_assets._add_student_edition(app, "book/no-such-chapter", "page.html", other, None)
    assert other == menu()
