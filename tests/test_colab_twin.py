"""The Colab twin's writer (scripts/colab_twin.py) on small pieces of MyST."""

from __future__ import annotations

from typing import Any

import colab_twin
import jupytext
import nbformat
import pytest
from colab_twin import colab_markdown, colab_notebook, page_url


def markdown(source: str) -> str:
    text, still_open = colab_markdown(source)
    assert not still_open
    return text


def test_a_citation_becomes_author_and_year_linked_to_the_bibliography() -> None:
    bibliography = page_url("bibliography")
    assert markdown("as {cite:p}`vaswani2017attention` wrote") == f"as ([Vaswani et al., 2017]({bibliography})) wrote"
    assert (
        markdown("{cite:t}`hochreiter1997long` showed") == f"[Hochreiter and Schmidhuber (1997)]({bibliography}) showed"
    )
    both = markdown("{cite:p}`vaswani2017attention,hochreiter1997long`")
    assert both.count(bibliography) == 2 and "; " in both


def test_cross_references_become_links_to_the_website() -> None:
    assert markdown("see {doc}`decoder`") == f"see [The decoder]({page_url('decoder')})"
    assert markdown("see {doc}`its chapter <decoder>`") == f"see [its chapter]({page_url('decoder')})"
    assert markdown("in {ref}`its fused path <mha-fused-path>`") == (
        f"in [its fused path]({page_url('multi-head-attention', 'mha-fused-path')})"
    )
    assert markdown("{numref}`fig-lookup-temperature` shows") == (
        f"[the figure]({page_url('attention-as-lookup', 'fig-lookup-temperature')}) shows"
    )
    assert (
        markdown("a {term}`key-value cache`") == f"a [key-value cache]({page_url('glossary', 'term-key-value-cache')})"
    )


def test_a_glued_value_becomes_the_name_its_cell_prints() -> None:
    assert markdown("it is {glue:text}`gpt_loss:.3f` nats") == "it is **`gpt_loss`** nats"


def test_the_sentences_that_show_glued_values_are_kept_with_a_marker_for_each() -> None:
    text = """The model answers {glue:text}`score:.0%` of them, on {glue:text}`count:,` names. Then
it stops. See {doc}`decoder-only`.

- a list item with {glue}`steps`;
- another item.

```{glue:figure} fig_name
:name: fig-x

A caption with {glue:text}`score:.1%`.
```
"""
    assert colab_twin.glue_sentences([text, text]) == [
        "The model answers [[score:.0%]] of them, on [[count:,]] names.",
        "a list item with [[steps:]];",
        "A caption with [[score:.1%]].",
    ]


def test_the_twins_glue_prints_a_value_as_the_page_formats_it_and_each_sentence_once_complete(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import numpy as np
    import torch

    import transformer_book.runtime

    book_glue = []
    monkeypatch.setattr(transformer_book.runtime, "glue", lambda *args: book_glue.append(args))
    cell = colab_twin.glue_cell(["It answers [[score:.0%]] of [[count:,]].", "Alone: [[score:.1%]]."])
    assert colab_twin.is_twin_only(cell) and colab_twin.is_folded(cell)
    namespace: dict[str, Any] = {}
    exec(colab_twin.unfolded_source(cell), namespace)
    shown: list[str] = []
    namespace["show"] = lambda markdown: shown.append(markdown.data)
    glue = namespace["glue"]
    assert transformer_book.runtime.glue is glue
    glue("score", np.float64(0.5404761904761904))
    assert shown == ["> Alone: 54.0%."]  # the first sentence waits for its count
    glue("count", torch.tensor(1234))
    glue("score", 0.5)  # glued again: printed, its sentences not shown twice
    glue("table", [1, 2])
    glue("unshown", 0.123456789)
    assert capsys.readouterr().out.splitlines() == ["score = 54%", "count = 1,234", "score = 50%"]
    assert shown == ["> Alone: 54.0%.", "> It answers 54% of 1,234."]
    assert [args[0] for args in book_glue] == ["table", "unshown"]


def test_admonitions_answers_exercises_and_labels() -> None:
    assert markdown("(my-label)=\n## A section") == "## A section"
    assert markdown(":::{admonition} In this chapter\n:class: tip\n- one\n- two\n:::") == (
        "> **In this chapter**\n>\n> - one\n> - two"
    )
    assert markdown(":::{admonition} Answer\n:class: dropdown\nBecause.\n:::") == (
        "<details><summary>Answer</summary>\n\nBecause.\n\n</details>"
    )
    assert markdown("```{exercise} Try it\n:label: ex-try\n\nDo this.\n```") == "> **Exercise: Try it**\n>\n> Do this."


def test_a_solution_is_folded_also_across_cells() -> None:
    text, still_open = colab_markdown("```{solution-start} ex-try\n:class: dropdown\n```\n\nThe answer.")
    assert still_open and text.startswith("**Solution**, folded") and "<details>" in text and "The answer." in text
    text, still_open = colab_markdown("More of it.\n\n```{solution-end}\n```\n\n## Next", in_solution=True)
    assert not still_open and text.index("More of it.") < text.index("</details>") < text.index("## Next")


def test_unknown_syntax_and_dangling_references_fail_loudly() -> None:
    with pytest.raises(ValueError, match="does not know the role"):
        markdown("{kbd}`Ctrl`")
    with pytest.raises(ValueError, match="no page of book/"):
        markdown("{doc}`no-such-chapter`")
    with pytest.raises(ValueError, match="glossary.md does not define"):
        markdown("{term}`flux capacitor`")
    with pytest.raises(ValueError, match="references.bib does not hold"):
        markdown("{cite:p}`nobody2099`")
    with pytest.raises(ValueError, match="not closed"):
        markdown(":::{admonition} Open\nnever closed")


def test_the_notebook_folds_hidden_cells_and_solutions_and_keeps_their_code() -> None:
    text = """# A chapter

```{code-cell} ipython3
:tags: [hide-input]

# Draw the heatmap of the weights
x = 1
```

```{code-cell} ipython3
y = 2
```

```{code-cell} ipython3
:tags: [remove-cell]

assert y == 2
```

```{exercise} Try it
:label: ex-try

Do this.
```

```{solution-start} ex-try
:class: dropdown
```

```{code-cell} ipython3
z = 3
```

```{code-cell} ipython3
:tags: [remove-cell]

assert z == 3
```

```{solution-end}
```
"""
    notebook = colab_notebook(jupytext.reads(text, fmt="myst"))
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert [colab_twin.is_folded(cell) for cell in code] == [True, False, True, True, True]
    assert code[0].source.startswith("#@title Draw the heatmap of the weights\n")
    assert code[3].source == "#@title Solution: Try it\nz = 3"
    # hidden checks inside a solution are titled as checks, not as the solution (Part VIII review)
    assert code[4].source.startswith("#@title Hidden checks")
    assert [colab_twin.unfolded_source(cell) for cell in code][1:] == [
        "y = 2",
        "assert y == 2",
        "z = 3",
        "assert z == 3",
    ]
    assert colab_twin.GLUE_NOTE in notebook.cells[0].source
    nbformat.validate(nbformat.from_dict(notebook))


def test_cell_titles_say_what_a_cell_does() -> None:
    assert colab_twin.cell_title("def f():\n    pass\n\nclass G:\n    pass", []) == "Defines `f` and `G`"
    assert colab_twin.cell_title('glue("a_b", 1)\nplt.plot([1])', []) == "Draws and glues `a_b`"
    assert colab_twin.cell_title("import torch\nuse_book_style()", []) == "Imports and settings"
    assert colab_twin.cell_title("check('x', 1, at_least=0)", ["remove-cell"]).startswith("Hidden checks")


@pytest.mark.parametrize(
    ("source", "title"),
    [
        # a cell that builds data is not "Imports and settings" (review 2026-12-05, instruction-tuning cell 4)
        ("import torch\nSEED = book_seed(0)\nfacts = build_dates(100)", "Computes what the cells below use"),
        ("import torch\nSEED = book_seed(0)\nDEVICE = device()\nuse_book_style()", "Imports and settings"),
        # a cell that defines a function and then runs it says both (instruction-tuning cell 29)
        (
            "def exact_match(a, b):\n    return a == b\n\nscores = [exact_match(1, 1)]\nglue('em', scores[0])",
            "Defines `exact_match`, then computes and glues `em`",
        ),
        ("def f():\n    return 1\n\nprint(f())", "Defines `f`, then computes the table or printout shown below"),
        ("def f():\n    pass\n\nfig, ax = plt.subplots()", "Defines `f`, then draws the figure"),
        # the grader cell of an exercise (fine-tuning cell 47)
        ("grade(my_lora_layer)", "Checks your answer with the grader"),
        ("table = compute()\ntable", "Computes the table or printout shown below"),
    ],
)
def test_a_fold_title_names_everything_the_cell_does(source: str, title: str) -> None:
    assert colab_twin.cell_title(source, ["hide-input"]) == title


def test_the_glue_cell_comes_right_after_the_bootstrap_and_only_where_the_text_shows_a_value() -> None:
    text = """```{code-cell} ipython3
:tags: [remove-cell]

# Colab only: install the package
x = 0
```

# A chapter

It scores {glue:text}`score:.0%`.

```{code-cell} ipython3
from transformer_book.runtime import glue
```
"""
    code = [cell for cell in colab_notebook(jupytext.reads(text, fmt="myst")).cells if cell.cell_type == "code"]
    assert [colab_twin.is_twin_only(cell) for cell in code] == [False, True, False]
    assert code[1].source.startswith(f"#@title {colab_twin.GLUE_CELL_TITLE}\n")
    without = colab_notebook(jupytext.reads(text.replace("{glue:text}`score:.0%`", "well"), fmt="myst"))
    assert not any(colab_twin.is_twin_only(cell) for cell in without.cells)


STUDENT_CHAPTER = """# A chapter

It scores {glue:text}`score:.0%`.

```{exercise} Try it
:label: ex-try

Write `my_f`.
```

```{code-cell} ipython3
def my_f():
    raise NotImplementedError("fill in")
```

```{solution-start} ex-try
:class: dropdown
```

The answer is {glue:text}`answer:.1f`, because of this.

```{code-cell} ipython3
def f_solution():
    return 1
glue("answer", 1.0)
```

```{solution-end}
```

```{code-cell} ipython3
:tags: [remove-cell]

assert f_solution() == 1
```

```{code-cell} ipython3
print(my_f)
```
"""


def test_the_students_edition_leaves_out_solutions_and_the_checks_of_their_results() -> None:
    student = colab_notebook(jupytext.reads(STUDENT_CHAPTER, fmt="myst"), solutions=False)
    text = "\n".join(cell.source for cell in student.cells)
    assert "f_solution" not in text and "because of this" not in text and "[[answer" not in text
    assert colab_twin.SOLUTION_ELSEWHERE in text and "[[score:.0%]]" in text
    code = [cell.source for cell in student.cells if cell.cell_type == "code" and not colab_twin.is_twin_only(cell)]
    assert code == ['def my_f():\n    raise NotImplementedError("fill in")', "print(my_f)"]
    instructor = colab_notebook(jupytext.reads(STUDENT_CHAPTER, fmt="myst"))
    assert "f_solution" in "\n".join(cell.source for cell in instructor.cells)


def test_the_students_edition_refuses_a_kept_cell_that_needs_a_solution() -> None:
    chapter = STUDENT_CHAPTER.replace("print(my_f)", "print(f_solution())")
    with pytest.raises(ValueError, match="only a solution defines"):
        colab_notebook(jupytext.reads(chapter, fmt="myst"), solutions=False)
