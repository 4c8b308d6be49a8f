"""Make a chapter's Colab twin read like its page.

Colab renders Markdown, not MyST, and folds no cell by tag. ``colab_notebook`` takes the jupytext
notebook of a chapter and returns the twin that Colab should show:

- every MyST role of the text becomes Markdown that Colab renders: a citation "(Author, year)"
  linked to the bibliography page, a cross-reference a link to the page on the website, a glossary
  term the word linked to the glossary, a glued value the name that its cell prints;
- a folded cell after the bootstrap gives ``glue`` the page's formats: where the page writes a glued
  number into a sentence, Colab prints ``name = value`` formatted as the page formats it (54%, not
  0.5404761904761904), and shows each such sentence once all its values are computed
  (``glue_sentences``, ``glue_cell``);
- admonitions become titled blockquotes, answers (dropdown admonitions) ``<details>`` blocks,
  exercises blockquotes, figures a line that names the figure its cell drew;
- code cells that the page collapses (``hide-input``), removes (``remove-cell``: hidden checks and
  the setup cell) or folds (solutions) become Colab form cells, ``#@title`` and ``cellView: form``,
  shown as one line that says what the cell does; they still run.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Any

from chapters import BOOK, glued_names, repository_url

FOLDED_TAGS = ("hide-input", "remove-cell")
TITLE = "#@title "


def site_url() -> str:
    """The website's root, https://<owner>.github.io/<name>/, from the repository URL."""
    owner, name = repository_url().removeprefix("https://github.com/").split("/")[:2]
    return f"https://{owner}.github.io/{name}/"


def page_url(slug: str, anchor: str = "") -> str:
    return f"{site_url()}book/{slug}.html" + (f"#{anchor}" if anchor else "")


# --- what the roles point at, read from the book's sources -------------------------------------------


@functools.cache
def page_titles() -> dict[str, str]:
    """Each page's slug -> its title (the first level-1 heading)."""
    titles = {}
    for page in BOOK.glob("*.md"):
        prose = re.sub(r"^```\{code-cell\}.*?^```$", "", page.read_text(), flags=re.M | re.S)
        heading = re.search(r"^# (.+)$", prose, re.M)
        titles[page.stem] = heading[1].strip() if heading else page.stem
    return titles


@functools.cache
def labels() -> dict[str, tuple[str, str]]:
    """Each label of the book -> (the page it is on, the text a reference to it shows)."""
    found: dict[str, tuple[str, str]] = {}
    for page in BOOK.glob("*.md"):
        text = page.read_text()
        for match in re.finditer(r"^\((\S+)\)=\n+#+ (.+)$", text, re.M):
            found[match[1]] = (page.stem, match[2].strip())
        for match in re.finditer(r"^```\{exercise\} (.+)\n:label: (\S+)", text, re.M):
            found[match[2]] = (page.stem, f"the exercise \u201c{match[1].strip()}\u201d")
        for match in re.finditer(r"^:name: (\S+)", text, re.M):
            found.setdefault(match[1], (page.stem, "the figure"))
    return found


@functools.cache
def glossary_terms() -> dict[str, str]:
    """Each term of the glossary, in lower case -> as the glossary spells it."""
    text = (BOOK / "glossary.md").read_text()
    block = text[text.index("```{glossary}") : text.rindex("```")]
    return {term.lower(): term for term in re.findall(r"^(\S[^\n]*)$", block, re.M)[1:]}


LATEX = {
    r"\"u": "ü",
    r"\"o": "ö",
    r"\"a": "ä",
    r"\'e": "é",
    r"\'a": "á",
    r"\`e": "è",
    r"\L": "Ł",
    r"\l": "ł",
    r"\o": "ø",
    r"\c{c}": "ç",
    r"\c c": "ç",
    r"\~n": "ñ",
    r"\ss": "ß",
}


def plain(latex: str) -> str:
    """BibTeX text without its braces and accent commands."""
    for command, letter in LATEX.items():
        latex = latex.replace("{" + command + "}", letter).replace(command, letter)
    return re.sub(r"[{}]", "", latex).strip()


@functools.cache
def references() -> dict[str, str]:
    """Each BibTeX key -> "Surname", "Surname and Surname" or "Surname et al.", then ", year"."""
    entries = {}
    text = (BOOK / "references.bib").read_text()
    for match in re.finditer(r"@\w+\{([^,\s]+),(.*?)\n\}", text, re.S):
        key, body = match[1], match[2]
        author = re.search(r"\bauthor\s*=\s*\{(.+?)\},?\s*\n", body)
        year = re.search(r"\byear\s*=\s*\{?(\d{4})", body)
        names = [plain(name) for name in re.split(r"\s+and\s+", author[1])] if author else ["Anonymous"]
        surnames = [name.split(",")[0].strip() if "," in name else name.split()[-1] for name in names]
        if len(surnames) == 1 or surnames[1:] == ["others"]:
            who = surnames[0] + (" et al." if len(surnames) > 1 else "")
        elif len(surnames) == 2:
            who = f"{surnames[0]} and {surnames[1]}"
        else:
            who = f"{surnames[0]} et al."
        entries[key] = f"{who}, {year[1] if year else 'n.d.'}"
    return entries


# --- the text ---------------------------------------------------------------------------------------


def _target(content: str) -> tuple[str | None, str]:
    """A role's content "text <target>" or "target" -> (text or None, target)."""
    explicit = re.fullmatch(r"(.*?)\s*<([^<>]+)>", content, re.S)
    return (explicit[1], explicit[2]) if explicit else (None, content)


def _citation(keys: str, textual: bool) -> str:
    bibliography = page_url("bibliography")
    cited = []
    for key in (key.strip() for key in keys.split(",")):
        if key not in references():
            raise ValueError(f"{{cite}} names {key!r}, which book/references.bib does not hold")
        who, year = references()[key].rsplit(", ", 1)
        cited.append(f"[{who} ({year})]({bibliography})" if textual else f"[{who}, {year}]({bibliography})")
    return "; ".join(cited) if textual else "(" + "; ".join(cited) + ")"


def _role(match: re.Match[str]) -> str:
    role, content = match[1], match[2]
    text, target = _target(content)
    if role == "doc":
        if target not in page_titles():
            raise ValueError(f"{{doc}} names {target!r}, which is no page of book/")
        return f"[{text or page_titles()[target]}]({page_url(target)})"
    if role in ("ref", "numref"):
        if target not in labels():
            raise ValueError(f"{{{role}}} names {target!r}, which no page of book/ labels")
        page, shown = labels()[target]
        if text:
            shown = text.replace("%s", "").strip() or shown
        return f"[{shown}]({page_url(page, target)})"
    if role == "term":
        target = " ".join(target.split())  # a term may break across lines of the source
        if target.lower() not in glossary_terms():
            raise ValueError(f"{{term}} names {target!r}, which book/glossary.md does not define")
        # Sphinx matches a term in any case but makes its anchor from the glossary's own spelling.
        anchor = "term-" + re.sub(r"[^A-Za-z0-9]+", "-", glossary_terms()[target.lower()]).strip("-")
        return f"[{text or content}]({page_url('glossary', anchor)})"
    if role in ("cite:p", "cite:t", "cite"):
        return _citation(target, textual=role == "cite:t")
    if role in ("glue:text", "glue", "glue:"):
        return f"**`{content.split(':')[0]}`**"
    if role == "math":
        return f"${content}$"
    raise ValueError(f"the twin writer does not know the role {{{role}}}")


ROLE = re.compile(r"\{([a-z]+(?::[a-z]*)?)\}`([^`]+)`")


def _options_and_body(lines: list[str]) -> tuple[dict[str, str], list[str]]:
    """A directive's ":key: value" lines, then its body (without the blank line between)."""
    options = {}
    while lines and re.match(r"^:[\w-]+:", lines[0]):
        key, _, value = lines.pop(0)[1:].partition(":")
        options[key] = value.strip()
    while lines and not lines[0].strip():
        lines.pop(0)
    return options, lines


def _quote(lines: list[str]) -> list[str]:
    return [f"> {line}" if line.strip() else ">" for line in lines]


def _directive(name: str, argument: str, lines: list[str]) -> list[str]:
    options, body = _options_and_body(lines)
    if name == "admonition":
        if "dropdown" in options.get("class", ""):
            return [f"<details><summary>{argument}</summary>", "", *body, "", "</details>"]
        return _quote([f"**{argument}**", "", *body])
    if name in ("note", "tip", "warning", "important"):
        return _quote([f"**{name.capitalize()}**", "", *body])
    if name == "exercise":
        return _quote([f"**Exercise: {argument}**", "", *body])
    if name == "glue:figure":
        return _quote([f"**Figure** (drawn by the cell above that glues `{argument}`): " + " ".join(body)])
    if name in ("glue:", "glue"):
        return _quote([f"The table `{argument}`, shown by the cell above that glues it."])
    raise ValueError(f"the twin writer does not know the directive {{{name}}}")


def colab_markdown(source: str, in_solution: bool = False, *, solutions: bool = True) -> tuple[str, bool]:
    """A chapter's Markdown cell as Markdown that Colab renders, and whether a solution is still
    open at its end (``in_solution`` says whether one was open at its start). The text of a
    solution is folded into a ``<details>`` block, or left out without ``solutions`` (the
    student's edition)."""
    lines = source.splitlines()
    shown: list[str] = []
    folded: list[str] = []

    def close_fold() -> None:
        if solutions and any(line.strip() for line in folded):
            shown.extend(["<details><summary>Show the solution</summary>", "", *folded, "", "</details>"])
        folded.clear()

    while lines:
        line = lines.pop(0)
        if re.fullmatch(r"\(\S+\)=", line):
            continue  # a label: the website's anchor, nothing to show
        opening = re.match(r"^(`{3,}|:{3,})\{([\w:-]*)\}\s*(.*)$", line)
        if not opening:
            (folded if in_solution else shown).append(line)
            continue
        fence, name, argument = opening[1], opening[2], opening[3].strip()
        body = []
        while lines and not re.fullmatch(re.escape(fence) + r"\s*", lines[0]):
            body.append(lines.pop(0))
        if not lines:
            raise ValueError(f"the directive {{{name}}} is not closed by {fence}")
        lines.pop(0)
        if name == "solution-start":
            shown.append(SOLUTION_FOLDED if solutions else SOLUTION_ELSEWHERE)
            in_solution = True
        elif name == "solution-end":
            close_fold()
            in_solution = False
        else:
            (folded if in_solution else shown).extend(_directive(name, argument, body))
    close_fold()
    text = ROLE.sub(_role, "\n".join(shown))
    return text.strip("\n"), in_solution


# --- the code ---------------------------------------------------------------------------------------


# Calls that set a notebook up rather than compute a result: a cell of imports, constants and these
# is "Imports and settings".
SETUP_CALLS = {
    "use_book_style",
    "device",
    "book_seed",
    "seed_everything",
    "print",
    "set_num_threads",
    "manual_seed",
    "filterwarnings",
    "simplefilter",
}


def cell_title(source: str, tags: list[str]) -> str:
    """The one line that a folded cell shows in Colab: what the cell does, all of it.

    A title names everything the cell does that a reader would look for: the functions it defines
    and whether it then computes, draws or glues. "Imports and settings" is kept for cells of
    imports, constants and set-up calls only (the review of 2026-12-05 found it on a cell that
    built the data).
    """
    if source.startswith("# Colab only"):
        return "Colab setup: install the book's companion package"
    if "remove-cell" in tags:
        return "Hidden checks: the claims of the text, asserted (run it)"
    first = source.lstrip().splitlines()[0] if source.strip() else ""
    if first.startswith("#") and not first.startswith("#!"):
        return first.lstrip("#: ").rstrip(".")
    try:
        tree = _parse(source)
    except SyntaxError:
        tree = ast.Module(body=[], type_ignores=[])
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.ClassDef)]
    rest = [
        node
        for node in tree.body
        if not isinstance(node, ast.FunctionDef | ast.ClassDef | ast.Import | ast.ImportFrom) and not _is_setup(node)
    ]
    glued = glued_names(tree)
    drawn = "plt." in source or "subplots(" in source or re.search(r"\bdraw_\w+\(", source) is not None
    if glued:
        shown = ", ".join(f"`{name}`" for name in glued[:3]) + (" and more" if len(glued) > 3 else "")
        does = ("draws and glues " if drawn else "computes and glues ") + shown
    elif drawn:
        does = "draws the figure"
    elif rest and all(_calls(node) == {"grade"} for node in rest):
        does = "checks your answer with the grader"
    elif rest and ("print" in set().union(*map(_calls, rest)) or isinstance(tree.body[-1], ast.Expr)):
        does = "computes the table or printout shown below"
    elif rest:
        does = "computes what the cells below use"
    else:
        does = ""
    if defined:
        names = [f"`{name}`" for name in defined]
        defines = "Defines " + (", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0])
        return f"{defines}, then {does}" if does else defines
    if does:
        return does[0].upper() + does[1:]
    return "Imports and settings"


def _calls(node: ast.AST) -> set[str]:
    """The names of the functions a statement calls (the last part of a dotted name)."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            function = call.func
            names.add(function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "?"))
    return names


def _is_setup(node: ast.stmt) -> bool:
    """A constant assigned, or a set-up call (use_book_style(), device()), as setup cells hold."""
    if not isinstance(node, ast.Expr | ast.Assign | ast.AnnAssign):
        return False
    value = getattr(node, "value", None)
    if value is None or isinstance(value, ast.Compare):
        return False
    return _calls(value) <= SETUP_CALLS


def fold(cell: Any, title: str) -> None:
    """Make a code cell a Colab form cell that shows only its title."""
    if cell.source.startswith("%%"):
        raise ValueError(f"a cell magic must stay on a cell's first line; cannot fold {cell.source[:40]!r}")
    cell.source = f"{TITLE}{title}\n" + cell.source
    cell.metadata["cellView"] = "form"


SOLUTION_FOLDED = "**Solution**, folded: open it once you have tried."
SOLUTION_ELSEWHERE = "*The solution is in the instructor's edition of this notebook (the page's Colab button).*"

GLUE_NOTE = (
    "*In Colab, numbers that the website's text shows are written as **`name`** here: the cell that "
    "computes one prints `name = value`, formatted as the website formats it, and the sentence that "
    "uses it. Cells that the website collapses are folded into one line that says what they do; "
    "double-click to open them. Run everything with Runtime → Run all.*"
)


GLUE_ROLE = re.compile(r"\{glue(?::text)?\}`([^`]+)`")


def _sentences(markdown: str) -> list[str]:
    """The sentences (and list items, table rows) of a Markdown cell, each on one line, without
    directive fences, their options and labels."""
    kept = [line for line in markdown.splitlines() if not re.match(r"^\s*(`{3,}|:{3,}|:[\w-]+:|\(\S+\)=)", line)]
    units: list[str] = []
    current: list[str] = []
    for line in kept + [""]:
        if not line.strip() or re.match(r"^\s*([-*] |\d+\. |\|)", line):
            if current:
                units.append(" ".join(current))
            current = [line.strip()] if line.strip() else []
        else:
            current.append(line.strip())
    return [sentence for unit in units for sentence in re.split(r"(?<=[.!?])\s+(?=[A-Z{*`(])", unit)]


def glue_sentences(markdown_cells: list[str]) -> list[str]:
    """The sentences of the text that show glued values, once each, as Colab Markdown, with every
    glued value written as a marker, ``[[name:spec]]``, that the twin's glue fills in."""
    found: dict[str, None] = {}
    for source in markdown_cells:
        for sentence in _sentences(source):
            if GLUE_ROLE.search(sentence):
                marked = GLUE_ROLE.sub(
                    lambda match: f"[[{match[1]}]]" if ":" in match[1] else f"[[{match[1]}:]]", sentence
                )
                found[ROLE.sub(_role, marked).lstrip("-* ").strip()] = None
    return list(found)


GLUE_CELL_TITLE = "Colab: print each number of the text as the website shows it, in its sentence"

GLUE_CELL = """import numbers
import re

import transformer_book.runtime
from IPython.display import Markdown
from IPython.display import display as show

# The text's sentences that show computed values: [[name:format]] marks where each value goes.
SENTENCES = {sentences}
MARKER = re.compile(r"\\[\\[(\\w+):([^\\]]*)\\]\\]")
GLUED, SHOWN = {{}}, set()
book_glue = transformer_book.runtime.glue


def glue(name, value, display=None):
    \"\"\"Print a number or string of the text as the website formats it, then each sentence whose
    values are all computed; anything else (a figure, a table) goes to the book's glue.\"\"\"
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()  # a NumPy or PyTorch scalar
    mine = [text for text in SENTENCES if any(m[1] == name for m in MARKER.finditer(text))]
    if not mine or not isinstance(value, (numbers.Number, str)):
        return book_glue(name, value, display)
    GLUED[name] = value
    spec = next(m[2] for m in MARKER.finditer(mine[0]) if m[1] == name)
    print(f"{{name}} = {{format(value, spec)}}")
    for text in mine:
        if text not in SHOWN and {{m[1] for m in MARKER.finditer(text)}} <= GLUED.keys():
            SHOWN.add(text)
            show(Markdown("> " + MARKER.sub(lambda m: format(GLUED[m[1]], m[2]), text)))


transformer_book.runtime.glue = glue"""


def glue_cell(sentences: list[str]) -> Any:
    """The folded cell that makes the twin's glue print as the page formats: it replaces the
    package's glue before the chapter imports it (numbers and strings that the text shows; figures
    and tables still go to the book's glue)."""
    import pprint

    import nbformat

    cell = nbformat.v4.new_code_cell(GLUE_CELL.format(sentences=pprint.pformat(sentences, width=100)))
    cell.metadata["colab_twin"] = "glue"
    fold(cell, GLUE_CELL_TITLE)
    return cell


def is_twin_only(cell: Any) -> bool:
    """A cell the twin adds to the chapter's (the glue cell)."""
    return bool(cell.get("metadata", {}).get("colab_twin"))


def _top_level_bindings(tree: ast.AST) -> set[str]:
    """The names a cell binds at the notebook's top level: definitions, imports and assignments,
    not the local names inside its functions and classes."""
    bound: set[str] = set()
    pending = list(ast.iter_child_nodes(tree))
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
            continue
        if isinstance(node, ast.Lambda | ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound.add(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return bound


def _loaded_names(tree: ast.AST) -> set[str]:
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _parse(source: str) -> ast.Module:
    """A cell's code without IPython's % and ! lines."""
    code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!")))
    return ast.parse(code)


def without_solutions(markdown_cells: list[str]) -> list[str]:
    """Markdown cells without the text of their solutions (from a solution-start directive to its
    solution-end, which may close in a later cell)."""
    kept: list[str] = []
    inside = False
    for source in markdown_cells:
        lines: list[str] = []
        for line in source.splitlines():
            if re.match(r"^`{3,}\{solution-start\}", line):
                inside = True
            if not inside:
                lines.append(line)
            if re.match(r"^`{3,}\{solution-end\}", line):
                inside = False
        kept.append("\n".join(lines))
    return kept


def colab_notebook(notebook: Any, *, solutions: bool = True) -> Any:
    """The chapter's jupytext notebook made into its Colab twin, in place; returned for convenience.

    With ``solutions`` (the instructor's edition, which Colab opens from the page) each solution is
    folded; without (the student's edition), its text and cells are left out, so the reader's
    graders say "Not yet" until the reader writes the function."""
    markdown = [cell.source for cell in notebook.cells if cell.cell_type == "markdown"]
    sentences = glue_sentences(markdown if solutions else without_solutions(markdown))
    in_solution, exercise, exercise_titles = False, "", {}
    # the student's edition: names that only a left-out solution binds, and those the kept cells bind
    solution_only: set[str] = set()
    main_bound: set[str] = set()
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for match in re.finditer(r"^```\{exercise\} (.+)\n:label: (\S+)", cell.source, re.M):
                exercise_titles[match[2]] = match[1].strip()
            for match in re.finditer(r"^```\{solution-start\} (\S+)", cell.source, re.M):
                exercise = exercise_titles.get(match[1], match[1])
            cell.source, in_solution = colab_markdown(cell.source, in_solution, solutions=solutions)
            if re.match(r"# ", cell.source) and GLUE_NOTE not in cell.source:
                first, _, rest = cell.source.partition("\n")
                cell.source = first + "\n\n" + GLUE_NOTE + ("\n" + rest if rest else "")
        elif cell.cell_type == "code":
            tags = list(cell.metadata.get("tags", []))
            if not solutions:
                tree = _parse(cell.source)
                if in_solution:
                    cell.metadata["colab_twin"] = "solution"  # left out below
                    solution_only |= _top_level_bindings(tree) - main_bound
                    continue
                needs = _loaded_names(tree) & solution_only
                if needs and "remove-cell" in tags:  # a hidden check of a solution's result
                    cell.metadata["colab_twin"] = "solution"
                    continue
                if needs:
                    raise ValueError(
                        f"the student's edition keeps a cell that uses {', '.join(sorted(needs))}, which only a "
                        f"solution defines: {cell.source[:80]!r}"
                    )
                main_bound |= _top_level_bindings(tree)
                solution_only -= main_bound
            if in_solution and "remove-cell" not in tags:
                fold(cell, f"Solution: {exercise}")
            elif any(tag in tags for tag in FOLDED_TAGS):
                fold(cell, cell_title(cell.source, tags))
    notebook.cells = [
        cell
        for cell in notebook.cells
        if (cell.cell_type != "markdown" or cell.source.strip()) and cell.metadata.get("colab_twin") != "solution"
    ]
    if sentences:
        # after the bootstrap (which installs the package) when there is one, else before the first code cell
        code = [index for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
        at = code[0] if code else len(notebook.cells)
        if code and notebook.cells[at].source.split("\n", 1)[-1].startswith("# Colab only"):
            at += 1
        notebook.cells.insert(at, glue_cell(sentences))
    return notebook


def _source(cell: Any) -> str:
    """A cell's source as one string (a notebook file may store it as a list of lines)."""
    source = cell["source"]
    return "".join(source) if isinstance(source, list) else str(source)


def is_folded(cell: Any) -> bool:
    return bool(cell.get("metadata", {}).get("cellView") == "form" and _source(cell).startswith(TITLE))


def unfolded_source(cell: Any) -> str:
    """A twin's code cell as the chapter holds it (its title line taken off)."""
    source = _source(cell)
    return source.split("\n", 1)[1] if is_folded(cell) else source


MYST_LEFT = re.compile(r"\{[a-z]+(?::[a-z]*)?\}`|^(`{3,}|:{3,})\{|^\(\S+\)=$", re.M)


def myst_left(markdown: str) -> list[str]:
    """MyST syntax that a twin's Markdown still holds (a role, a directive fence or a label)."""
    return [match[0] for match in MYST_LEFT.finditer(markdown)]


def paths_of(book: Path = BOOK) -> list[Path]:
    """Every Colab twin: the instructor's editions, then the student's (book/student/)."""
    return sorted(book.glob("*.ipynb")) + sorted((book / "student").glob("*.ipynb"))
