"""pyproject.toml declares what the package imports, and nothing it does not.

Every module that src/transformer_book/*.py imports, at the top of a module or inside a function
(plotting and tqdm are imported where they are used), is a runtime need of some part of the package.
Imports under ``if TYPE_CHECKING:`` count too: they are for the annotations only, but every one of
them names a library that the package also imports at run time, and mypy needs it installed; a
typing-only library would have to be declared all the same for ``make`` to type-check the package.

Documented exceptions:

- ``torch`` is not declared: Colab and every reader already have one, and a requirement here would
  make pip replace it (the comment above ``dependencies`` in pyproject.toml says so);
- an extra may declare a library that the package does not import when the chapters import it: the
  ``pretrained`` extra is for the readers of the chapters that compare the book's models with
  ``transformers`` and ``tiktoken``.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions

from chapters import ROOT, book_chapters, chapter_code

PACKAGE = ROOT / "src" / "transformer_book"
#: Imported by the package but deliberately not declared (see the module's docstring).
UNDECLARED = {"torch"}


def canonical(distribution: str) -> str:
    """A distribution's name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def requirement_name(requirement: str) -> str:
    """The distribution a requirement names, without version, extras or markers."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, f"cannot read the requirement {requirement!r}"
    return canonical(match.group(1))


def top_level_imports(tree: ast.AST) -> set[str]:
    """The top-level module of every absolute import anywhere in the tree, standard library left out."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {name for name in names if name not in sys.stdlib_module_names}


def distribution_of(module: str) -> str:
    """The distribution that installs an importable module (``yaml`` -> pyyaml, ``IPython`` -> ipython),
    read from the installed environment rather than a hand-kept table."""
    distributions = packages_distributions().get(module)
    assert distributions, f"{module} is imported but no installed distribution provides it: install and declare it"
    assert len(set(map(canonical, distributions))) == 1, (
        f"{module} is provided by several distributions: {distributions}"
    )
    return canonical(distributions[0])


def package_imports() -> dict[str, set[str]]:
    """Each third-party module the package imports -> the package's files that import it."""
    imports: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        for name in top_level_imports(ast.parse(path.read_text(), filename=str(path))) - {"transformer_book"}:
            imports.setdefault(name, set()).add(path.name)
    return imports


def declared() -> tuple[set[str], dict[str, set[str]]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    return {requirement_name(item) for item in project["dependencies"]}, {
        extra: {requirement_name(item) for item in items} for extra, items in extras.items()
    }


def test_the_walk_sees_imports_inside_functions_and_type_checking_blocks() -> None:
    tree = ast.parse(
        "import os\nimport numpy.linalg\nfrom . import x\nif TYPE_CHECKING:\n    from matplotlib.axes import Axes\n"
        "def f():\n    from tqdm import tqdm\n    import IPython.display\n"
    )
    assert top_level_imports(tree) == {"numpy", "matplotlib", "tqdm", "IPython"}


def test_every_import_of_the_package_is_declared() -> None:
    dependencies, extras = declared()
    everything = dependencies.union(*extras.values())
    missing = {
        f"{module} (distribution {distribution_of(module)}, imported by {', '.join(sorted(files))})"
        for module, files in package_imports().items()
        if module not in UNDECLARED and distribution_of(module) not in everything
    }
    assert not missing, (
        "pyproject.toml does not declare what the package imports; add to [project] dependencies (or an extra, "
        "for what only one optional part needs):\n" + "\n".join(sorted(missing))
    )


def test_torch_stays_undeclared() -> None:
    """A torch requirement would make pip replace the reader's (Colab's CUDA build among them)."""
    dependencies, extras = declared()
    assert "torch" in package_imports(), "the package no longer imports torch: drop the exception"
    assert "torch" not in dependencies.union(*extras.values())


def test_nothing_is_declared_that_is_never_imported() -> None:
    dependencies, extras = declared()
    imported = {distribution_of(module) for module in package_imports() if module not in UNDECLARED}
    unused = dependencies - imported
    assert not unused, f"[project] dependencies declare what the package never imports: {sorted(unused)}"
    chapters_import = {module for chapter in book_chapters() for module in top_level_imports(chapter_code(chapter))} - {
        "transformer_book"
    }
    imported_by_chapters = {distribution_of(module) for module in chapters_import if module in packages_distributions()}
    for extra, names in extras.items():
        unused = names - imported - imported_by_chapters
        assert not unused, (
            f"the extra {extra!r} declares what neither the package nor any chapter imports: {sorted(unused)}"
        )
