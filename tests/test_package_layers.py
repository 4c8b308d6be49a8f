"""The package has two sides, and the library never leans on the book's.

The *library* (models, data, training, generation, loaders, argument checks) is what a program
imports to build and run the book's models. The *book's side* is what only the chapters need: the
runtime (seeds, claims, ``glue``, figure style), the figures, the quiz, the explorables and the
graders. A library module that imported the book's side would make every program that serves a
model pay for plotting and progress widgets, and tie the models to the chapters' runtime.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import transformer_book
from transformer_book import decoding, model, models, training

PACKAGE = Path(transformer_book.__file__).parent
BOOK_SIDE_PREFIXES = ("runtime", "quiz", "explorables", "exercises", "figures_")
#: What a library module never imports: plotting, tables, the notebook's display, widgets.
HEAVY = ("matplotlib", "pandas", "IPython", "ipywidgets", "seaborn")
#: The one library module that may draw a progress bar, importing tqdm only when it draws one.
PROGRESS = "progress"


def _is_book_side(name: str) -> bool:
    return name.startswith(BOOK_SIDE_PREFIXES)


LIBRARY = sorted(path.stem for path in PACKAGE.glob("*.py") if not _is_book_side(path.stem))
BOOK_SIDE = sorted(path.stem for path in PACKAGE.glob("*.py") if _is_book_side(path.stem))


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement of the file names (anywhere in it, functions included), with
    its line, leaving out ``if TYPE_CHECKING:`` blocks, which never run."""
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            skipped |= {id(child) for statement in node.body for child in ast.walk(statement)}
    found = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.append((node.lineno, node.module))
            if node.module == "transformer_book":  # from transformer_book import runtime
                found += [(node.lineno, f"transformer_book.{alias.name}") for alias in node.names]
    return found


def test_the_split_is_what_the_package_holds() -> None:
    assert {"runtime", "quiz", "explorables", "exercises"} <= set(BOOK_SIDE)
    assert {"model", "data", "training", "decoding", "interop", "checks", "progress", "models"} <= set(LIBRARY)


@pytest.mark.parametrize("module", LIBRARY)
def test_a_library_module_imports_nothing_of_the_books_side(module: str) -> None:
    wrong = []
    for line, name in _imports(PACKAGE / f"{module}.py"):
        top, _, rest = name.partition(".")
        if top == "transformer_book" and _is_book_side(rest.split(".")[0]):
            wrong.append(f"line {line}: {name} (the book's side)")
        elif top in HEAVY:
            wrong.append(f"line {line}: {name} (plotting or display)")
        elif top == "tqdm" and module != PROGRESS:
            wrong.append(f"line {line}: {name} (draw bars with transformer_book.progress)")
    assert not wrong, f"transformer_book.{module} imports {wrong}"


def test_importing_the_package_loads_none_of_the_books_side() -> None:
    code = (
        "import sys, json\n"
        "import torch\n"
        "before = set(sys.modules)\n"
        "import transformer_book\n"
        "print(json.dumps({'torch': sorted(before), 'package': sorted(set(sys.modules) - before)}))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(result.stdout)
    added = loaded["package"]
    book_side = [name for name in added if name.startswith("transformer_book.") and _is_book_side(name.split(".")[1])]
    heavy = [name for name in added if name.split(".")[0] in HEAVY]
    assert not book_side and not heavy, f"import transformer_book loaded {book_side + heavy}"
    # torch loads tqdm itself (torch.hub), so only a bar the package imported on its own would show here
    assert "tqdm" in loaded["torch"] or "tqdm" not in added, "import transformer_book loaded tqdm"


def test_the_top_level_exports_the_model_api_and_not_the_runtime() -> None:
    assert transformer_book.make_transformer is model.make_transformer
    assert transformer_book.Transformer is model.Transformer
    assert transformer_book.DecoderOnlyTransformer is model.DecoderOnlyTransformer
    assert transformer_book.train is training.train
    assert transformer_book.generate is decoding.generate
    assert set(models.__all__) <= set(transformer_book.__all__)
    for name in ("check", "glue", "seed_everything", "use_book_style", "book_seed"):
        assert not hasattr(transformer_book, name), f"transformer_book.{name}: the runtime belongs to the book's side"


def test_the_models_read_in_one_module() -> None:
    """Every layer of the GPT, of the encoder-decoder and of BERT is a class of transformer_book.model
    (or PyTorch's own), and model.py leans only on the argument checks (transformer_book.checks): a
    reader follows a forward pass, embedding to logits, in one file."""
    gpt = model.DecoderOnlyTransformer(50, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=8)
    encoder_decoder = model.make_transformer(50, 50, model.SMALL_CONFIG, pad_id=0)
    bert = model.EncoderOnlyModel(50, pad_id=0, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=8)
    elsewhere = {
        f"{type(layer).__module__}.{type(layer).__name__}"
        for network in (gpt, encoder_decoder, bert)
        for layer in network.modules()
        if type(layer).__module__ != "transformer_book.model" and not type(layer).__module__.startswith("torch.")
    }
    assert not elsewhere, f"layers defined outside transformer_book.model: {sorted(elsewhere)}"
    imported = {name for _, name in _imports(PACKAGE / "model.py") if name.startswith("transformer_book")}
    assert imported == {"transformer_book.checks"}, imported


def test_the_package_has_one_rope() -> None:
    """The attention's rotation (rotate_heads, at positions start, start + 1, ...) is the
    relative-positions chapter's apply_rope, and no other module rotates queries and keys."""
    x = torch.randn(2, 3, 5, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    rotated = model.rotate_heads(x, 500.0, start=4)
    assert torch.equal(rotated, model.apply_rope(x, torch.arange(4, 9), base=500.0))
    assert not torch.equal(rotated, x) and model.rotate_heads(x, None) is x
    rope_modules = [path.stem for path in PACKAGE.glob("*.py") if "even * cos - odd * sin" in path.read_text()]
    assert rope_modules == ["model"], f"RoPE written in {rope_modules}"
