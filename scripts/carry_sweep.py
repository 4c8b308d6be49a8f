"""Carry a chapter's recorded sweep over a change of code that leaves every result as it was.

    python scripts/carry_sweep.py --base REV                # every swept chapter whose code changed since REV
    python scripts/carry_sweep.py --base REV book/training.md

A sweep's runs hold for the code they executed: each records its fingerprint (the chapter's code
cells and the package modules they reach), and a run of other code no longer counts. A change that
moves code without changing what it computes (a function moved to another module, an argument
check added, an import renamed) changes the fingerprint of every chapter that reaches it, and
re-sweeping the whole book (30 runs a chapter) would take a day on two cores. What the sweep
measured has not changed, though, and this script shows it by execution:

- REV must hold the code of the chapter's recorded sweep (its fingerprint there is the one
  ``robustness.json`` records), checked out into a temporary worktree.
- The chapter runs twice at ``BOOK_SEED`` 0 on one thread, side by side on this machine: as it
  is now, and as it was at REV (the kernel imports REV's package; a first cell added to the run
  asserts it).
- Compared: every claim the chapter checks (value, bounds, verdict, in order) and every value it
  glues (numbers, sentences, tables and figures, as the executed notebook holds them).
- Where something differs, REV's code runs once more, and if a difference remains, the new code
  too. A value that differs between two runs of the same code is a measurement of the machine (a
  wall-clock time, a throughput), not a result of the code: it is left out, and named in the
  record. Any other difference refuses the carry: the change altered a result, and the chapter
  must be swept again (``make robustness``).

A carry is appended to ``robustness-carried.jsonl`` (from, to, REV, the machine, how many values
were compared and which were measurements, and a digest over the record, so an edit shows), and
the chapter's row in ``robustness.json`` takes the new fingerprint, with the carry listed. From then
on ``scripts/robustness.py`` counts the chapter's saved runs of the old code as runs of the new.
Only execution writes a carry, as only execution writes a run.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jupytext
import nbformat

from chapters import ROOT, ChapterFailed, execute_notebook, experiment_fingerprint, swept_chapters
from robustness import CARRIED, SUMMARY, machine, signed, sweep_variables

#: The one setting a carry compares at: the book's own seed, one thread (the most deterministic).
SEED, THREADS = 0, 1


@dataclass
class Results:
    """What one execution of a chapter says about its results, key by key: ``claim N: <words>`` for
    the N-th check (its whole record) and ``glued: <name>`` for each glued value (its data)."""

    values: dict[str, str]
    error: str | None = None

    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.values, sort_keys=True).encode()).hexdigest()


#: A cell of an HTML table (a pandas table's header and data cells).
TABLE_CELL = re.compile(r"<t[dh]\b[^>]*>(.*?)</t[dh]>", re.DOTALL)


def glued_values(notebook: nbformat.NotebookNode) -> dict[str, str]:
    """Every value the executed notebook glued (myst-nb marks each output with its scrapbook name):
    the JSON of its data (the text of a number or sentence, a figure's image), and a table cell by
    cell, so that a column of wall-clock times leaves out only its own cells, not the table's results."""
    found = {}
    for cell in notebook.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            name = output.get("metadata", {}).get("scrapbook", {}).get("name")
            if name is None:
                continue
            data = output.get("data", {})
            html = next((text for kind, text in sorted(data.items()) if kind.endswith("text/html")), "")
            cells = TABLE_CELL.findall(html if isinstance(html, str) else "".join(html))
            if not cells:
                found[f"glued: {name}"] = json.dumps(data, sort_keys=True)
                continue
            found[f"glued: {name} (cells)"] = str(len(cells))  # the table's shape, as one value
            for number, text in enumerate(cells):
                found[f"glued: {name} cell {number}"] = " ".join(text.split())
    return found


def execute(chapter: Path, source_root: Path) -> Results:
    """Run ``chapter`` (a file under ``source_root``) at the carry's setting, importing the package
    from ``source_root/src``, and collect its claims and glued values."""
    notebook = jupytext.read(chapter)
    package = source_root / "src" / "transformer_book"
    guard = nbformat.v4.new_code_cell(
        "import transformer_book as _carry_package, pathlib as _carry_path\n"
        f"assert _carry_path.Path(_carry_package.__file__).resolve().parent == _carry_path.Path({str(package.resolve())!r}), "
        "_carry_package.__file__\n"
        "del _carry_package, _carry_path"
    )
    notebook.cells.insert(0, guard)
    with tempfile.TemporaryDirectory(prefix="carry-") as scratch:
        log = Path(scratch) / "claims.jsonl"
        environment = {
            **os.environ,
            **sweep_variables(SEED, THREADS, log),
            "CUDA_VISIBLE_DEVICES": "",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(source_root / "src"), os.environ.get("PYTHONPATH")])),
        }
        error = None
        try:
            execute_notebook(notebook, chapter, cwd=chapter.parent, timeout=900, env=environment)
        except ChapterFailed as failure:
            error = str(failure).strip().splitlines()[-1][:400]
        logged = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    claims = [record for record in logged if "claim" in record]
    values = {
        f"claim {number}: {record['claim']}": json.dumps(record, sort_keys=True) for number, record in enumerate(claims)
    }
    return Results(values | glued_values(notebook), error)


def differing(first: Results, second: Results) -> list[str]:
    """The keys whose values differ between two executions (a key only one of them has differs)."""
    keys = set(first.values) | set(second.values)
    return sorted(key for key in keys if first.values.get(key) != second.values.get(key))


@dataclass
class Verdict:
    carried: bool
    measurements: list[str]  # values that differ between two runs of the same code: left out
    changed: list[str]  # values the change altered: they refuse the carry
    compared: int


def judge(before: Results, after: Results, again: Results | None, after_again: Results | None = None) -> Verdict:
    """Whether ``after`` (the new code) gives ``before``'s results (the old code's), leaving out the
    values that also differ between two runs of the same code: ``before`` and ``again`` (the old
    code run once more), or ``after`` and ``after_again`` (the new code run once more)."""
    if before.error or after.error:
        raise ValueError(f"a run raised: before {before.error!r}, after {after.error!r}")
    changed = differing(before, after)
    noise = set(differing(before, again)) if again is not None else set()
    noise |= set(differing(after, after_again)) if after_again is not None else set()
    measurements = [key for key in changed if key in noise]
    altered = [key for key in changed if key not in noise]
    compared = len(set(before.values) | set(after.values)) - len(measurements)
    return Verdict(not altered, measurements, altered, compared)


def fingerprint_at(root: Path, chapter_name: str) -> str:
    """The experiment fingerprint of ``book/<chapter_name>`` as the code at ``root`` computes it."""
    code = (
        "import sys; from pathlib import Path; from chapters import experiment_fingerprint; "
        f"print(experiment_fingerprint(Path({str(root / 'book' / chapter_name)!r})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root / "scripts")},
        check=True,
        capture_output=True,
        text=True,
    )
    return result.stdout.strip()


def carry_record(chapter: str, old: str, new: str, base: str, verdict: Verdict, after: Results) -> dict[str, Any]:
    fields = {
        "chapter": chapter,
        "from": old,
        "to": new,
        "base": base,
        "seed": SEED,
        "threads": THREADS,
        "machine": machine("cpu"),
        "date": datetime.date.today().isoformat(),
        "compared": verdict.compared,
        "measurements": verdict.measurements,
        "results_digest": after.digest(),
    }
    return signed(fields)


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "chapters", nargs="*", help="chapters to carry (default: every swept chapter whose code changed)"
    )
    parser.add_argument("--base", required=True, help="the commit whose code the recorded sweeps ran")
    parser.add_argument(
        "--no-record",
        action="store_true",
        help="compare and print only (also for a chapter that is not swept, whose glued values the "
        "change should leave as they were too); write nothing",
    )
    options = parser.parse_args(arguments)
    base = subprocess.run(
        ["git", "rev-parse", "--verify", f"{options.base}^{{commit}}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    summary = json.loads(SUMMARY.read_text())
    rows = summary["chapters"]
    chapters = [Path(chapter).resolve() for chapter in options.chapters] or [
        chapter
        for chapter in swept_chapters()
        if rows.get(chapter.stem, {}).get("fingerprint") != experiment_fingerprint(chapter)
    ]
    refused = []
    with tempfile.TemporaryDirectory(prefix="carry-base-") as scratch:
        worktree = Path(scratch) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(worktree), base], cwd=ROOT, check=True, capture_output=True
        )
        try:
            for chapter in chapters:
                row = rows.get(chapter.stem)
                old, new = fingerprint_at(worktree, chapter.name), experiment_fingerprint(chapter)
                if not options.no_record and (row is None or row["fingerprint"] != old):
                    raise SystemExit(
                        f"{chapter.stem}: its recorded sweep ran code {row and row['fingerprint']}, not the code at "
                        f"{base[:10]} ({old}): name the commit the sweep ran, or sweep the chapter again"
                    )
                if old == new:
                    print(f"{chapter.stem}: unchanged since {base[:10]}, nothing to carry", flush=True)
                    continue
                with ThreadPoolExecutor(max_workers=2) as pool:
                    running_before = pool.submit(execute, worktree / "book" / chapter.name, worktree)
                    running_after = pool.submit(execute, chapter, ROOT)
                    before, after = running_before.result(), running_after.result()
                if experiment_fingerprint(chapter) != new:
                    raise SystemExit(f"{chapter.stem}: its code changed while it ran: run this again")
                if before.error or after.error:
                    refused.append(chapter.stem)
                    print(f"{chapter.stem}: NOT carried; a run raised: before {before.error!r}, after {after.error!r}")
                    continue
                again = execute(worktree / "book" / chapter.name, worktree) if differing(before, after) else None
                verdict = judge(before, after, again)
                if not verdict.carried:
                    # Two runs of the old code can agree on a wall-clock cell by chance (a time rounded to
                    # one digit); one more run of the new code shows whether what differs varies by itself.
                    verdict = judge(before, after, again, execute(chapter, ROOT))
                if not verdict.carried:
                    refused.append(chapter.stem)
                    print(f"{chapter.stem}: NOT carried; the change altered {verdict.changed}", flush=True)
                    continue
                identical = f"{verdict.compared} values identical" + (
                    f"; measurements left out: {verdict.measurements}" if verdict.measurements else ""
                )
                if options.no_record:
                    print(f"{chapter.stem}: {identical} (not recorded)", flush=True)
                    continue
                carry = carry_record(chapter.stem, old, new, base, verdict, after)
                with CARRIED.open("a") as file:
                    file.write(json.dumps(carry) + "\n")
                row["fingerprint"] = new
                row.setdefault("carried", []).append({"from": old, "to": new, "base": base, "date": carry["date"]})
                SUMMARY.write_text(json.dumps(summary, indent=1) + "\n")
                print(f"{chapter.stem}: carried {old} -> {new}, {identical}", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
    if refused:
        print(f"\nsweep again: {' '.join(f'book/{stem}.md' for stem in refused)}")
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
