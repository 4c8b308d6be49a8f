"""Write the course plan's table into book/course-plan.md: fifteen weeks built from the chapters.

The weeks are the one thing written by hand (WEEKS below). Everything else in a week's row is read
from the sources, so the table cannot drift from the book:

- reading time: ``reading_time.py``'s measure of each chapter, summed;
- run time: the median seconds of the chapter's runs at one thread on the CPU in
  ``robustness-runs.jsonl`` (the sweep machine, two runs at a time); chapters that are not swept
  (they train nothing and check nothing that varies) say so;
- exercises: the ``{exercise}`` directives of the week's chapters;
- assignment: the otter-grader assignment (``assignments/``) of each Part that ends that week;
- below the table, per week: the worksheet's questions for the Parts that begin that week, and the
  chapters of earlier weeks that the week's chapters link to with ``{doc}``.

The table is kept narrow enough for a laptop's page (1280 pixels: about 690 of them for the page's
text): seven short columns, and each chapter named by its title's first half, before the colon::

    python scripts/course_plan.py           # write the table into book/course-plan.md (make sync does)
    python scripts/course_plan.py --check   # exit 1 if the page's table is stale
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys

from colab_twin import page_titles

import reading_time
from assignments import assignment_path
from chapters import BOOK, ROMAN_NUMERALS, ROOT, part_chapters, parts, repository_url

PAGE = BOOK / "course-plan.md"
RUNS = ROOT / "robustness-runs.jsonl"
WORKSHEET = BOOK / "worksheet.md"
BEGIN, END = "<!-- course-plan: begin -->", "<!-- course-plan: end -->"

#: Fifteen weeks, in reading order: each a theme and its chapters. Every chapter of a numbered Part
#: appears once, in the order of _toc.yml.
WEEKS: list[tuple[str, list[str]]] = [
    (
        "Why attention, and attention as a lookup",
        ["sequential-bottleneck", "attention-as-lookup", "scaled-dot-product"],
    ),
    ("Self-attention, heads and positions", ["self-attention", "multi-head-attention", "positional-encoding"]),
    ("The block, the encoder and the decoder", ["block-anatomy", "encoder", "decoder"]),
    ("The whole model, and how it is fed and scheduled", ["full-model", "batching", "learning-rate"]),
    ("Training", ["label-smoothing", "training"]),
    ("Translating and decoding", ["translation", "decoding"]),
    ("Tokens and the decoder-only family", ["tokenization", "decoder-only"]),
    ("Encoders, images and text-to-text", ["encoder-only", "vision-transformer", "text-to-text"]),
    ("Attention at scale", ["relative-positions", "efficient-attention", "precision-and-memory"]),
    ("Scaling laws and many devices", ["scaling-laws", "parallel-training"]),
    ("Real models", ["gpt2", "modern-decoder", "mixture-of-experts"]),
    ("Pretraining, its recipe, and fine-tuning", ["pretraining", "recipes", "fine-tuning"]),
    ("Instructions and preferences", ["instruction-tuning", "preference-tuning"]),
    (
        "Reasoning: worked steps, test-time compute and verifiable rewards",
        ["worked-steps", "test-time-compute", "verifiable-rewards"],
    ),
    ("Serving and measuring: speculative decoding and quantization", ["speculative-decoding", "quantization"]),
]

EXERCISE = re.compile(r"^```\{exercise\}", re.MULTILINE)
DOC_LINK = re.compile(r"\{doc\}`(?:[^`<]*<)?([\w-]+)>?`")
QUESTION = re.compile(r"^\*\*(\d+)\.\*\*", re.MULTILINE)
WORKSHEET_PART = re.compile(r"^## Before Part ([IVX]+)\b", re.MULTILINE)
ROMAN = {numeral: number for number, numeral in enumerate(ROMAN_NUMERALS, start=1)}


def check_weeks(weeks: list[tuple[str, list[str]]]) -> None:
    """Raise ValueError unless the weeks hold every chapter of the numbered Parts once, in order."""
    planned = [slug for _, chapters in weeks for slug in chapters]
    expected = [chapter.stem for chapter in part_chapters()]
    if planned != expected:
        missing = sorted(set(expected) - set(planned))
        extra = sorted(set(planned) - set(expected))
        raise ValueError(
            "the course plan's weeks must hold every chapter of _toc.yml's Parts once, in order: "
            f"missing {missing}, not in the book {extra}, or out of order"
        )


def run_seconds() -> dict[str, float]:
    """Each swept chapter's median seconds over its one-thread CPU runs."""
    seconds: dict[str, list[float]] = {}
    for line in RUNS.read_text().splitlines():
        run = json.loads(line)
        if run["threads"] == 1 and run["device"] == "cpu":
            seconds.setdefault(run["chapter"], []).append(run["seconds"])
    return {chapter: statistics.median(values) for chapter, values in seconds.items()}


def worksheet_questions() -> dict[int, list[int]]:
    """The worksheet's question numbers, by the Part (1 to 8) whose group holds them."""
    text = WORKSHEET.read_text()
    headings = list(WORKSHEET_PART.finditer(text))
    ends = [heading.start() for heading in headings[1:]] + [len(text)]
    return {
        ROMAN[heading.group(1)]: [int(number) for number in QUESTION.findall(text[heading.end() : end])]
        for heading, end in zip(headings, ends, strict=True)
    }


def part_starts() -> dict[str, int]:
    """The first chapter of each numbered Part, and the Part's number."""
    return {chapters[0].stem: number for number, chapters in enumerate(parts(), start=1)}


def part_ends() -> dict[str, int]:
    """The last chapter of each numbered Part, and the Part's number."""
    return {chapters[-1].stem: number for number, chapters in enumerate(parts(), start=1)}


def assignment_link(number: int) -> str:
    """Part number's assignment, on GitHub: an instructor downloads it and runs otter assign."""
    path = assignment_path(number).relative_to(ROOT).as_posix()
    return f"[Part {ROMAN_NUMERALS[number - 1]}]({repository_url()}/blob/main/{path})"


def short_title(slug: str) -> str:
    """A chapter's title up to its colon ("Relative positions" for "Relative positions: RoPE and ALiBi"),
    as a link: the full titles made the table's chapters column a tall, narrow stack of words."""
    return f"{{doc}}`{page_titles()[slug].split(':')[0].strip()} <{slug}>`"


def question_range(numbers: list[int]) -> str:
    return f"{numbers[0]}" if len(numbers) == 1 else f"{numbers[0]}–{numbers[-1]}"


def table() -> str:
    check_weeks(WEEKS)
    seconds, questions, starts, ends = run_seconds(), worksheet_questions(), part_starts(), part_ends()
    rows = [
        "| week | theme | chapters | read (min) | run (min) | exercises | assignment |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    # Below the table, not in it: the lists are long, and as columns they pushed the table off a page's width.
    before = [
        "",
        "Before each week: the worksheet's questions to hand out, and the chapters of earlier weeks",
        "that its chapters build on.",
        "",
    ]
    earlier: set[str] = set()
    for week, (theme, slugs) in enumerate(WEEKS, start=1):
        sources = {slug: (BOOK / f"{slug}.md").read_text() for slug in slugs}
        minutes = sum(reading_time.reading_time(BOOK / f"{slug}.md").minutes for slug in slugs)
        swept = [seconds[slug] for slug in slugs if slug in seconds]
        running = f"{sum(swept) / 60:.1f}" if swept else "under 1 each"
        if 0 < len(swept) < len(slugs):
            running += f" (+{len(slugs) - len(swept)} chapter{'s' * (len(slugs) - len(swept) > 1)} under 1)"
        exercises = sum(len(EXERCISE.findall(source)) for source in sources.values())
        parts = [starts[slug] for slug in slugs if slug in starts]
        worksheet = ", ".join(question_range(questions[part]) for part in parts if questions.get(part))
        assignment = ", ".join(assignment_link(ends[slug]) for slug in slugs if slug in ends) or "–"
        linked = {target for source in sources.values() for target in DOC_LINK.findall(source)}
        notes = [f"worksheet questions {worksheet}"] if worksheet else []
        if linked & earlier:
            notes.append("builds on " + ", ".join(f"{{doc}}`{slug}`" for slug in sorted(linked & earlier)))
        if notes:
            before.append(f"- Week {week}: " + "; ".join(notes))
        chapters = ", ".join(short_title(slug) for slug in slugs)
        rows.append(f"| {week} | {theme} | {chapters} | {minutes:.0f} | {running} | {exercises} | {assignment} |")
        earlier.update(slugs)
    return "\n".join(rows + before)


def page_with(table_text: str) -> str:
    text = PAGE.read_text()
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[:start] + "\n" + table_text + "\n" + text[end:]


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if book/course-plan.md's table is stale")
    options = parser.parse_args(arguments)
    updated = page_with(table())
    if options.check:
        if updated != PAGE.read_text():
            print("book/course-plan.md's table is stale: run make sync", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(updated)
    print("wrote the course plan's table into book/course-plan.md")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
