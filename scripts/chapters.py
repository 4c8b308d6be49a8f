"""Find the book's chapters and execute them the way a reader's kernel would.

Shared by ``tests/test_chapters.py`` and ``scripts/time_chapters.py``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jupytext
import nbformat
import yaml
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"


def toc_files() -> list[Path]:
    """Every page listed in ``_toc.yml``, in reading order, as ``book/<slug>.md``."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    entries = [toc["root"]]

    def walk(items: list[dict[str, Any]]) -> None:
        for item in items:
            if "file" in item:
                entries.append(item["file"])
            walk(item.get("sections", []))

    for part in toc.get("parts", []):
        walk(part.get("chapters", []))
    walk(toc.get("chapters", []))
    return [ROOT / f"{entry}.md" for entry in entries]


def is_notebook(page: Path) -> bool:
    """A chapter that executes: a MyST text notebook with a jupytext header."""
    return page.is_file() and page.read_text().startswith("---\njupytext:")


def book_chapters() -> list[Path]:
    """The executable chapters in book/, whether or not _toc.yml lists them yet, sorted by name."""
    return [page for page in sorted(BOOK.glob("*.md")) if is_notebook(page)]


def toc_chapters() -> list[Path]:
    """The executable chapters of ``_toc.yml``, in reading order."""
    return [page for page in toc_files() if is_notebook(page)]


#: The numbered Parts' numerals, Part I first.
ROMAN_NUMERALS = ["I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX", "X"]


def parts() -> list[list[Path]]:
    """The numbered Parts of ``_toc.yml`` (Part I to the last), each as its chapters in reading
    order: the preface and the appendices aside."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    return [
        [ROOT / f"{chapter['file']}.md" for chapter in part.get("chapters", [])]
        for part in toc.get("parts", [])
        if str(part.get("caption", "")).startswith("Part ")
    ]


def part_chapters() -> list[Path]:
    """The chapters of the numbered Parts, in reading order. Each ends with a quiz (``show_quiz``)."""
    return [chapter for part in parts() for chapter in part]


def chapter_code(chapter: Path) -> ast.Module:
    """The chapter's code cells as one Python module (IPython's ``%`` and ``!`` lines left out)."""
    cells = [cell.source for cell in jupytext.read(chapter).cells if cell.cell_type == "code"]
    lines = [line for line in "\n".join(cells).splitlines() if not line.lstrip().startswith(("%", "!"))]
    return ast.parse("\n".join(lines), filename=str(chapter))


def check_calls(chapter: Path) -> list[ast.Call]:
    """Every call of ``check(...)`` in the chapter's code, in reading order: its claims."""
    calls = [
        node
        for node in ast.walk(chapter_code(chapter))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check"
    ]
    return sorted(calls, key=lambda call: (call.lineno, call.col_offset))


def glued_names(code: ast.AST) -> list[str]:
    """The names that code glues, in reading order: the key of each ``glue("key", ...)`` (an
    f-string key as its text up to the first placeholder, followed by "…") and each keyword of
    ``glue_values(key=value, ...)``."""
    found: list[tuple[int, int, str]] = []
    for node in ast.walk(code):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
            continue
        if node.func.id == "glue" and node.args:
            key = node.args[0]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                found.append((node.lineno, node.col_offset, key.value))
            elif isinstance(key, ast.JoinedStr) and key.values:
                start = key.values[0]
                text = start.value if isinstance(start, ast.Constant) and isinstance(start.value, str) else ""
                found.append((node.lineno, node.col_offset, text + "…"))
        elif node.func.id == "glue_values":
            found += [(node.lineno, node.col_offset, keyword.arg) for keyword in node.keywords if keyword.arg]
    return [name for _, _, name in sorted(found, key=lambda item: (item[0], item[1]))]


def claim_source(call: ast.Call) -> str:
    """A check's claim as written: a string, or an f-string's template (one claim, whatever it fills in)."""
    if not call.args:
        raise ValueError(f"line {call.lineno}: check() without its claim")
    return ast.unparse(call.args[0])


PACKAGE = ROOT / "src" / "transformer_book"
PACKAGE_IMPORT = re.compile(r"^\s*(?:from|import)\s+transformer_book(?:\.(\w+))?\b", re.MULTILINE)
# An ``if TYPE_CHECKING:`` block (to its first unindented line) never runs: what it imports cannot change a result.
TYPE_CHECKING_BLOCK = re.compile(r"^if TYPE_CHECKING:[^\n]*\n(?:[ \t]+[^\n]*\n|[ \t]*\n)*", re.MULTILINE)


FROM_PACKAGE = re.compile(r"^\s*from\s+transformer_book\s+import\s+(\([^)]*\)|[^\n]*)", re.MULTILINE)
WHOLE_PACKAGE = re.compile(r"^\s*import\s+transformer_book\s*(?:as\s+\w+\s*)?(?:#[^\n]*)?$", re.MULTILINE)


def imported_modules(text: str) -> set[str]:
    """Package modules named by the imports in text, outside ``if TYPE_CHECKING:`` blocks. A name
    imported from the package's top level (``from transformer_book import device``) counts as the
    module that defines it (``helpers``), followed through the façades that re-export it; only
    ``import transformer_book`` itself, or a name the top level defines, counts as ``__init__``,
    whose imports reach the whole library."""
    text = TYPE_CHECKING_BLOCK.sub("", text)
    modules = {match.group(1) for match in PACKAGE_IMPORT.finditer(text) if match.group(1)}
    for match in FROM_PACKAGE.finditer(text):
        names = re.sub(r"#[^\n]*", "", match.group(1)).strip().strip("()").replace("\n", " ").split(",")
        for name in (name.split(" as ")[0].strip() for name in names):
            if name:
                modules.add(name if (PACKAGE / f"{name}.py").exists() else defining_module(name))
    if WHOLE_PACKAGE.search(text):
        modules.add("__init__")
    return modules


def defining_module(name: str, module: str = "__init__") -> str:
    """The package module whose code defines ``name``, following ``from transformer_book.x import
    name`` re-exports from ``module`` (the top level, then a façade such as ``models``)."""
    path = PACKAGE / f"{module}.py"
    if not path.exists():
        return module
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("transformer_book."):
            source = (node.module or "").removeprefix("transformer_book.")
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return defining_module(alias.name, source)
                if alias.name == "*" and _defines(source, name):  # from transformer_book.models import *
                    return defining_module(name, source)
    return module


def _defines(module: str, name: str) -> bool:
    """Whether ``module`` binds ``name`` at its top level: a def, a class, an assignment or an import."""
    path = PACKAGE / f"{module}.py"
    if not path.exists():
        return False
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(target, ast.Name) and target.id == name for target in targets):
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (alias.asname or alias.name).split(".")[0] == name for alias in node.names
        ):
            return True
    return False


def reached_modules(text: str) -> set[str]:
    """The modules text imports, and the modules those import, through the whole package."""
    reached: set[str] = set()
    pending = list(imported_modules(text))
    while pending:
        name = pending.pop()
        path = PACKAGE / f"{name}.py"
        if name in reached or not path.exists():
            continue
        reached.add(name)
        pending.extend(imported_modules(path.read_text()))
    return reached


def experiment_fingerprint(chapter: Path) -> str:
    """A digest of everything a chapter's run executes: its code cells as written (the experiment,
    its checks and their bounds, however they are spelled) and the source of every package module
    they reach. A sweep run records it; a run whose chapter or package code changed since is stale,
    and only running the chapter again can replace it."""
    digest = hashlib.sha256()
    for cell in jupytext.read(chapter).cells:
        if cell.cell_type == "code":
            digest.update(b"cell\0" + cell.source.encode() + b"\0")
    for name in sorted(reached_modules(chapter.read_text())):
        digest.update(b"module\0" + name.encode() + b"\0" + (PACKAGE / f"{name}.py").read_bytes())
    return digest.hexdigest()[:16]


def outputs_digest(notebook: nbformat.NotebookNode) -> str:
    """A digest of what an executed notebook printed, drew and glued: its code cells' outputs."""
    digest = hashlib.sha256()
    for cell in notebook.cells:
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                digest.update(json.dumps(output, sort_keys=True, default=str).encode() + b"\0")
    return digest.hexdigest()


def swept_chapters() -> list[Path]:
    """The chapters ``make robustness`` sweeps: exactly those of ``_toc.yml`` that call ``check``,
    the claims about trained, sampled or timed results, in reading order."""
    return [chapter for chapter in toc_chapters() if check_calls(chapter)]


class ChapterFailed(Exception):
    """A chapter raised while executing; the message names it and holds the traceback."""


@dataclass
class Execution:
    chapter: Path
    seconds: float
    notebook: nbformat.NotebookNode


def execute_chapter(chapter: Path, timeout: int = 600, env: dict[str, str] | None = None) -> Execution:
    """Run every cell of a chapter in a fresh kernel, with the book folder as working directory
    (and ``env`` as the kernel's environment, where given)."""
    return execute_notebook(jupytext.read(chapter), chapter, cwd=chapter.parent, timeout=timeout, env=env)


def execute_like_colab(chapter: Path, timeout: int = 600, twin: Path | None = None) -> Execution:
    """Run a chapter's Colab twin as an instructor would: the ``.ipynb`` (or ``twin``, another
    edition of it), in a fresh kernel where myst-nb cannot be imported (Colab has none), from an
    empty working directory (so no cell may rely on files of the repository)."""
    twin = chapter.with_suffix(".ipynb") if twin is None else twin
    notebook = nbformat.read(twin, as_version=4)
    with tempfile.TemporaryDirectory(prefix="colab-") as scratch:
        hidden = Path(scratch) / "hidden-packages"
        (hidden / "myst_nb").mkdir(parents=True)
        (hidden / "myst_nb" / "__init__.py").write_text(
            'raise ImportError("myst_nb is hidden: this kernel imitates Google Colab")\n'
        )
        path = os.pathsep.join(filter(None, [str(hidden), os.environ.get("PYTHONPATH")]))
        workdir = Path(scratch) / "content"
        workdir.mkdir()
        return execute_notebook(notebook, twin, cwd=workdir, timeout=timeout, env={**os.environ, "PYTHONPATH": path})


def execute_notebook(
    notebook: nbformat.NotebookNode, source: Path, cwd: Path, timeout: int, env: dict[str, str] | None = None
) -> Execution:
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    start = time.perf_counter()
    try:
        client.execute(**({"env": env} if env is not None else {}))
    except CellExecutionError as error:
        raise ChapterFailed(f"chapter {source.name} failed:\n{error}") from None
    return Execution(source, time.perf_counter() - start, notebook)


def repository_url() -> str:
    """The book's repository, from ``_config.yml``: the Colab links and the bootstrap cell use it."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    return str(config["repository"]["url"]).rstrip("/")


def colab_url(chapter: Path, *, student: bool = False) -> str:
    """Where Colab opens a chapter: its ``.ipynb`` twin in the repository, on ``main`` (the
    instructor's edition, or with ``student`` the student's edition in ``book/student/``)."""
    repository = repository_url().replace("https://github.com/", "https://colab.research.google.com/github/")
    twin = chapter.relative_to(ROOT).with_suffix(".ipynb")
    if student:
        twin = twin.parent / "student" / twin.name
    return f"{repository}/blob/main/{twin.as_posix()}"


def package_version() -> str:
    """The companion package's version, from ``pyproject.toml``: the release the notebooks install."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        return str(tomllib.load(file)["project"]["version"])


def site_url() -> str:
    """The book's website, GitHub Pages of the repository: https://github.com/OWNER/REPO is served at
    https://OWNER.github.io/REPO."""
    owner, repository = repository_url().removeprefix("https://github.com/").split("/")
    return f"https://{owner.lower()}.github.io/{repository}"


def wheel_name() -> str:
    """The standard file name of the companion package's wheel (pure Python, any platform)."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        name = str(tomllib.load(file)["project"]["name"])
    return f"{name.replace('-', '_').replace('.', '_').lower()}-{package_version()}-py3-none-any.whl"


def wheel_url() -> str:
    """Where the website publishes the wheel: the site build (_ext/site_assets.py) builds it from the
    same commit as the pages and copies it into ``_static``."""
    return f"{site_url()}/_static/{wheel_name()}"


def colab_bootstrap() -> str:
    """The first cell of every chapter: under Colab only, install the companion package's wheel that
    the website publishes (built from the same commit as the pages), without dependencies so that
    Colab's own torch is kept."""
    return f"""# Colab only: install the book's companion package, built from the same commit as this notebook
# and published with the website. Torch is already there and is not reinstalled.
import subprocess
import sys

if "google.colab" in sys.modules:
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
         "{wheel_url()}"],
        check=True,
    )"""


def write_or_check(expected: dict[Path, str], orphans: list[Path], check: bool, fix: str) -> int:
    """Bring generated files in line with their sources, or with ``check`` only report.

    ``expected`` maps each generated file to the text it must hold; ``orphans`` are generated
    files whose source is gone. Returns the exit status: 1 when checking found a difference.
    """
    stale = [path for path, text in expected.items() if not path.exists() or path.read_text() != text]
    if check:
        for path in stale:
            print(f"stale: {path.relative_to(ROOT)} is out of date ({fix})")
        for path in orphans:
            print(f"orphan: {path.relative_to(ROOT)} has no chapter ({fix})")
        return 1 if stale or orphans else 0
    for path in stale:
        path.write_text(expected[path])
        print(f"wrote {path.relative_to(ROOT)}")
    for path in orphans:
        path.unlink()
        print(f"removed {path.relative_to(ROOT)}")
    return 0
