"""Re-run the chapters whose claims rest on training, sampling or timing over seeds and thread
counts; print, per claim, how often it held and by what margin; record it in ``robustness.json``.

    python scripts/robustness.py                          # the default sweep: 10 seeds x {1, 2, 4} threads
    python scripts/robustness.py --seeds 3 --threads 1 book/training.md
    python scripts/robustness.py --jobs 8                 # on a machine with 16 cores

The chapters swept are exactly those that call ``check`` (``chapters.swept_chapters``). Every run
executes a chapter itself, unchanged, in a fresh kernel, with ``BOOK_SEED`` (which moves all of the
chapter's seeds: weights, data, sampling) and ``OMP_NUM_THREADS`` set. The chapter's hidden checks
call ``transformer_book.runtime.check``; with ``BOOK_CLAIMS_LOG`` pointing into this script's scratch folder
and ``BOOK_SWEEP_PARENT`` naming this process (a kernel honours the log only when this process is its
parent, so the variable is refused anywhere else), each check is written to a log instead of raising,
so one run reports every claim. Runs on the CPU hide the GPU; where CUDA
is present, each seed also runs once on it.

The table gives, per chapter and claim: in how many runs it held (a claim checked in a loop holds
in a run when every one of its checks did; a run that raised before reaching it counts against
it), the minimum, median and maximum of the measured value, the threshold, and the smallest margin
to it (value minus bound, in the claim's own units; negative means it failed somewhere). A run that
raised (not a check, a crash) is listed with its error. It asserts nothing: it is a measurement.

A sentence the text chooses by the result is one conclusion (``check(..., family=...)``): the table
lists, per conclusion, the branch each run took, so a lesson that flips with the seed shows.

Each swept chapter's row in ``robustness.json`` is replaced by this sweep's (``--no-record`` to
leave it alone): the claims and their statistics, the conclusions and their branches, the seeds,
threads, devices and machines, and the chapter's experiment fingerprint (its code cells and the
package modules they reach, ``chapters.experiment_fingerprint``).

Only execution writes a run. Each run records the fingerprint of the code it executed, a digest of
the outputs the executed notebook holds, its claims as ``check`` logged them (values and evaluated
bounds), and a digest over all of these. A sweep can be split across machines: ``--runs-out
runs.jsonl`` appends every run as it finishes (so a sweep cut short keeps what it finished), and
``--from-runs a.jsonl b.jsonl`` summarises saved runs. It refuses a run without its outputs digest,
a run whose record was edited after it ran, and a run of code that has changed since: a changed
bound, step count or package module means running the chapter again; nothing re-scores a run.
``tests/test_robustness_summary.py`` fails when a chapter changed after its recorded sweep, a
recorded claim did not hold in every run or held without margin, or a conclusion took different
branches in different runs.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jupytext

from chapters import ROOT, ChapterFailed, execute_notebook, experiment_fingerprint, outputs_digest, swept_chapters

#: The committed record of the latest sweep of each chapter.
SUMMARY = ROOT / "robustness.json"
#: Every run of the sweeps that robustness.json summarises, one JSON object a line.
RUNS = ROOT / "robustness-runs.jsonl"
#: Every carry of a sweep over a change of code that left the chapter's results as they were
#: (scripts/carry_sweep.py), one JSON object a line.
CARRIED = ROOT / "robustness-carried.jsonl"


@dataclass(frozen=True)
class Setting:
    chapter: Path
    seed: int
    threads: int
    device: str  # "cpu" or "cuda"

    @property
    def label(self) -> str:
        return f"{self.chapter.stem} seed {self.seed} {self.device} {self.threads} threads"


@dataclass
class Outcome:
    setting: Setting
    seconds: float
    claims: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    machine: str = ""
    fingerprint: str = ""  # chapters.experiment_fingerprint of the code that ran
    outputs: str = ""  # chapters.outputs_digest of the executed notebook
    glued: dict[str, str] = field(default_factory=dict)  # each glued sentence's wording (runtime.wording)

    def fields(self) -> dict[str, Any]:
        return {
            "chapter": self.setting.chapter.stem,
            "fingerprint": self.fingerprint,
            "seed": self.setting.seed,
            "threads": self.setting.threads,
            "device": self.setting.device,
            "machine": self.machine,
            "seconds": self.seconds,
            "claims": self.claims,
            "error": self.error,
            "outputs_digest": self.outputs,
            "glued": self.glued,
        }

    def as_json(self) -> str:
        fields = self.fields()
        return json.dumps(signed(fields))


def record_digest(fields: dict[str, Any]) -> str:
    """A digest over a run's whole record: an edit of any field (a claim's bound, its verdict, the
    fingerprint) after the run no longer matches it."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


def load_runs(paths: list[Path], chapters: list[Path]) -> list[Outcome]:
    """The saved runs of the given chapters. Refuses a run without the digest of its executed
    outputs, a record edited after its run, and a run of a chapter whose code changed since."""
    by_stem = {chapter.stem: chapter for chapter in chapters}
    accepted = current_fingerprints(chapters)
    outcomes = []
    for path in paths:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            saved = json.loads(line)
            chapter = by_stem.get(saved["chapter"])
            if chapter is None:
                continue
            reason = refusal(saved, accepted[chapter.stem])
            if reason:
                where = f"{path}:{number}: the run of {chapter.name} (seed {saved['seed']}, {saved['threads']} threads)"
                raise SystemExit(f"{where} {reason}")
            setting = Setting(chapter, saved["seed"], saved["threads"], saved["device"])
            outcomes.append(
                Outcome(
                    setting,
                    saved["seconds"],
                    saved["claims"],
                    saved["error"],
                    saved["machine"],
                    saved["fingerprint"],
                    saved["outputs_digest"],
                    saved.get("glued", {}),
                )
            )
    return outcomes


def current_fingerprints(chapters: list[Path]) -> dict[str, set[str]]:
    """Per chapter, the fingerprints whose runs count now: its current code's and those carried to it."""
    return {chapter.stem: accepted_fingerprints(chapter.stem, experiment_fingerprint(chapter)) for chapter in chapters}


def signed(fields: dict[str, Any]) -> dict[str, Any]:
    """A record (a run, a carry) with the digest over its fields that ``edited`` checks."""
    return fields | {"record_digest": record_digest(fields)}


def edited(saved: dict[str, Any]) -> bool:
    """Whether a saved record (a run, a carry) no longer matches the digest written with it."""
    fields = {key: value for key, value in saved.items() if key != "record_digest"}
    return saved.get("record_digest") != record_digest(fields)


def accepted_fingerprints(chapter: str, current: str, carried: Path | None = None) -> set[str]:
    """The code whose runs count as runs of ``current``: itself, and each older version from which
    ``scripts/carry_sweep.py`` carried the chapter's sweep, by execution, to it (directly or through
    later carries). Refuses a carry record edited after it was written."""
    carried = CARRIED if carried is None else carried
    carries = []
    if carried.exists():
        for number, line in enumerate(carried.read_text().splitlines(), start=1):
            saved = json.loads(line)
            if edited(saved):
                raise SystemExit(f"{carried}:{number}: a carry edited after it was written (its digest does not match)")
            if saved["chapter"] == chapter:
                carries.append((saved["from"], saved["to"]))
    accepted = {current}
    while True:
        older = {old for old, new in carries if new in accepted} - accepted
        if not older:
            return accepted
        accepted |= older


def refusal(saved: dict[str, Any], fingerprint: str | set[str]) -> str | None:
    """Why a saved run no longer counts (None when it does): it carries no digest of its executed
    outputs, its record was edited after it ran, or it ran code other than ``fingerprint``'s (or
    than each of a set of them: the current code and those its sweep was carried from)."""
    accepted = {fingerprint} if isinstance(fingerprint, str) else fingerprint
    if not saved.get("outputs_digest"):
        return "carries no digest of its executed outputs: only execution writes a run"
    if edited(saved):
        return "was edited after it ran (its record digest does not match): run it again"
    if saved.get("fingerprint") not in accepted:
        return "predates the chapter's current code: run it again"
    return None


def sweep_variables(seed: int, threads: int, log: Path) -> dict[str, str]:
    """The environment of a sweep's kernel: the run's seed and threads, and the claims log, which the
    kernel honours because this process, named in ``BOOK_SWEEP_PARENT``, is its parent."""
    from transformer_book.runtime import CLAIMS_LOG_VARIABLE, SEED_VARIABLE, SWEEP_PARENT_VARIABLE

    return {
        SEED_VARIABLE: str(seed),
        CLAIMS_LOG_VARIABLE: str(log),
        SWEEP_PARENT_VARIABLE: str(os.getpid()),
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        # Runs share the machine; OpenMP's spinning threads would otherwise slow multi-threaded
        # runs 5-20 times while another run holds a core. It changes scheduling, not arithmetic.
        "OMP_WAIT_POLICY": "PASSIVE",
    }


def run(setting: Setting) -> Outcome:
    fingerprint = experiment_fingerprint(setting.chapter)  # of the code as it is read to run
    notebook = jupytext.read(setting.chapter)
    with tempfile.TemporaryDirectory(prefix="robustness-") as scratch:
        log = Path(scratch) / "claims.jsonl"
        environment = sweep_variables(setting.seed, setting.threads, log)
        if setting.device == "cpu":
            environment["CUDA_VISIBLE_DEVICES"] = ""
        start = time.perf_counter()
        error = None
        try:
            execute_notebook(
                notebook, setting.chapter, cwd=setting.chapter.parent, timeout=600, env={**os.environ, **environment}
            )
        except ChapterFailed as failure:
            error = failing_line(str(failure))
        except Exception as failure:  # a cell timeout or a dead kernel: one lost run, not the whole table
            error = (
                f"{type(failure).__name__}: {str(failure).strip().splitlines()[-1] if str(failure).strip() else ''}"[
                    :400
                ]
            )
        seconds = time.perf_counter() - start
        logged = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    claims = [record for record in logged if "claim" in record]
    glued = {record["glued"]: record["wording"] for record in logged if "glued" in record}
    if experiment_fingerprint(setting.chapter) != fingerprint:
        error = error or "the chapter or a package module it imports changed while it ran: run it again"
    return Outcome(
        setting, seconds, claims, error, machine(setting.device), fingerprint, outputs_digest(notebook), glued
    )


def failing_line(traceback: str) -> str:
    """The source line that raised (IPython marks it with an arrow) and the error it raised."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*m", "", traceback).splitlines() if line.strip()]
    arrows = [line for line in lines if re.match(r"^-*>\s*\d+", line)]
    errors = [line for line in lines if re.match(r"^\w+(Error|Failed|Exception)\b", line)]
    return " | ".join(filter(None, [arrows[-1] if arrows else "", errors[-1] if errors else lines[-1]]))[:400]


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def threshold_text(record: dict[str, Any]) -> str:
    low, high = record["at_least"], record["at_most"]
    if low is not None and high is not None:
        return f"[{low:.4g}, {high:.4g}]"
    if low is not None:
        return f">= {low:.4g}"
    if high is not None:
        return f"<= {high:.4g}"
    return "true"


@dataclass
class ClaimSummary:
    chapter: str
    claim: str
    threshold: str
    passed_runs: int
    runs: int
    values: list[float]
    margins: list[float]

    def as_record(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "threshold": self.threshold,
            "held": f"{self.passed_runs}/{self.runs}",
            "min": min(self.values),
            "median": statistics.median(self.values),
            "max": max(self.values),
            "min_margin": min(self.margins) if self.margins else None,
        }


def summarise(outcomes: list[Outcome]) -> list[ClaimSummary]:
    """Per chapter and claim, in how many runs it held. A claim held in a run when every one of its
    checks there passed; a run that raised before reaching a claim other runs reached counts as a
    failure of it, so a crash can never raise the pass rate."""
    per_run: dict[tuple[str, str], list[list[dict[str, Any]]]] = defaultdict(list)
    order: list[tuple[str, str]] = []
    runs_of: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        chapter = outcome.setting.chapter.stem
        runs_of[chapter].append(outcome)
        grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for record in outcome.claims:
            grouped[record["claim"]].append(record)
        for claim, records in grouped.items():
            if (chapter, claim) not in per_run:
                order.append((chapter, claim))
            per_run[(chapter, claim)].append(records)
    summaries = []
    for chapter, claim in order:
        runs = per_run[(chapter, claim)]
        raised_before = sum(
            1 for outcome in runs_of[chapter] if outcome.error and all(r["claim"] != claim for r in outcome.claims)
        )
        records = [record for run in runs for record in run]
        summaries.append(
            ClaimSummary(
                chapter,
                claim,
                threshold_text(records[0]),
                passed_runs=sum(all(record["passed"] for record in run) for run in runs),
                runs=len(runs) + raised_before,
                values=[record["value"] for record in records],
                margins=[record["margin"] for record in records if record["margin"] is not None],
            )
        )
    return summaries


@dataclass
class ConclusionSummary:
    """One conclusion the text chooses by the result, and how many runs took each of its branches."""

    chapter: str
    family: str
    branches: dict[str, int]

    def as_record(self) -> dict[str, Any]:
        return {"family": self.family, "branches": dict(sorted(self.branches.items()))}


def summarise_conclusions(outcomes: list[Outcome]) -> list[ConclusionSummary]:
    """Per chapter and conclusion, the branch each run took, counted. A conclusion is a family of
    checks (``check(..., family=...)``), whose branch in a run is the set of its claims that run
    checked (claims joined by " + " when a branch checks several), or a glued sentence
    (``glued: <name>``), whose branches are its wordings, numbers aside."""
    taken: dict[tuple[str, str], dict[str, int]] = {}
    for outcome in outcomes:
        chapter = outcome.setting.chapter.stem
        per_family: dict[str, set[str]] = defaultdict(set)
        for record in outcome.claims:
            if record.get("family"):
                per_family[record["family"]].add(record["claim"])
        for name, wording in outcome.glued.items():
            per_family[f"glued: {name}"].add(wording)
        for family, claims in per_family.items():
            branches = taken.setdefault((chapter, family), {})
            branch = " + ".join(sorted(claims))
            branches[branch] = branches.get(branch, 0) + 1
    return [ConclusionSummary(chapter, family, branches) for (chapter, family), branches in taken.items()]


def report(outcomes: list[Outcome], summaries: list[ClaimSummary]) -> None:
    print()
    header = f"{'chapter':<22} {'claim':<70} {'held':>9} {'min':>10} {'median':>10} {'max':>10} {'threshold':>18} {'min margin':>11}"
    print(header)
    print("-" * len(header))
    for summary in summaries:
        record = summary.as_record()
        shown = summary.claim if len(summary.claim) <= 70 else summary.claim[:67] + "..."
        margin = record["min_margin"]
        print(
            f"{summary.chapter:<22} {shown:<70} {record['held']:>9} {record['min']:>10.4g} "
            f"{record['median']:>10.4g} {record['max']:>10.4g} {summary.threshold:>18} "
            f"{(f'{margin:.4g}' if margin is not None else '-'):>11}"
        )

    for conclusion in summarise_conclusions(outcomes):
        if conclusion.family.startswith("glued: ") and len(conclusion.branches) == 1:
            continue  # a glued sentence worded alike in every run: nothing to show
        taken = ", ".join(f"{count} runs: {claim}" for claim, count in sorted(conclusion.branches.items()))
        flag = "FLIPS" if len(conclusion.branches) > 1 else "one branch"
        print(f"{conclusion.chapter:<22} conclusion {conclusion.family!r} ({flag}): {taken}")

    crashes = [outcome for outcome in outcomes if outcome.error]
    if crashes:
        print("\nRuns that raised (not a check):")
        for outcome in crashes:
            print(f"  {outcome.setting.label}: {outcome.error}")
    failed = sum(summary.passed_runs < summary.runs for summary in summaries)
    print(f"\n{len(summaries)} claims, {failed} failed in some run, {len(crashes)} runs raised.")


def machine(device: str = "cpu") -> str:
    """Where a run ran: processor (and GPU), cores, PyTorch and Python."""
    import torch

    from transformer_book.runtime import processor_name

    gpu = f"{torch.cuda.get_device_name()} on " if device == "cuda" else ""
    return (
        f"{gpu}{processor_name()}, {os.cpu_count()} cores; PyTorch {torch.__version__}, "
        f"Python {platform.python_version()}"
    )


def record(outcomes: list[Outcome], summaries: list[ClaimSummary]) -> None:
    """Replace the swept chapters' rows of ``robustness.json`` with this sweep's."""
    summary = json.loads(SUMMARY.read_text()) if SUMMARY.exists() else {}
    chapters = summary.setdefault("chapters", {})
    for chapter in sorted({outcome.setting.chapter for outcome in outcomes}, key=lambda path: path.stem):
        runs = [outcome for outcome in outcomes if outcome.setting.chapter == chapter]
        chapters[chapter.stem] = {
            "fingerprint": experiment_fingerprint(chapter),
            "seeds": sorted({outcome.setting.seed for outcome in runs}),
            "threads": sorted({outcome.setting.threads for outcome in runs if outcome.setting.device == "cpu"}),
            "devices": sorted({outcome.setting.device for outcome in runs}),
            "runs": len(runs),
            "runs_by_device": {
                device: sum(outcome.setting.device == device for outcome in runs)
                for device in sorted({outcome.setting.device for outcome in runs})
            },
            "runs_that_raised": [f"{o.setting.label}: {o.error}" for o in runs if o.error],
            "machines": sorted({outcome.machine for outcome in runs}),
            "date": datetime.date.today().isoformat(),
            "claims": [s.as_record() for s in summaries if s.chapter == chapter.stem],
            "conclusions": [c.as_record() for c in summarise_conclusions(runs)],
        }
    summary["about"] = (
        "The latest sweep of each chapter's claims by scripts/robustness.py (make robustness): "
        "written by that script, checked by tests/test_robustness_summary.py."
    )
    summary["chapters"] = dict(sorted(chapters.items()))
    SUMMARY.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"recorded in {SUMMARY.relative_to(ROOT)}")


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", help="chapters to sweep (default: every chapter that calls check)")
    parser.add_argument("--seeds", type=int, default=10, help="BOOK_SEED = 0 .. SEEDS-1 (default 10)")
    parser.add_argument("--first-seed", type=int, default=0, help="start the seeds here (default 0)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="CPU thread counts (default 1 2 4)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="chapters run at once (default: half the CPU cores)",
    )
    parser.add_argument(
        "--devices",
        nargs="+",
        choices=["cpu", "cuda"],
        help="where to run (default: the CPU, and CUDA once per seed where a GPU is present)",
    )
    parser.add_argument("--no-record", action="store_true", help="print only; leave robustness.json as it is")
    parser.add_argument(
        "--runs-out",
        type=Path,
        help="append every run to this file as it finishes (JSON lines; default robustness-runs.jsonl, "
        "whose runs of the swept chapters robustness.json then summarises, unless --no-record)",
    )
    parser.add_argument(
        "--from-runs", type=Path, nargs="+", help="summarise these saved runs (of --runs-out) instead of running"
    )
    options = parser.parse_args(arguments)
    # --from-runs takes every path after it, so a chapter written after the runs files lands among them
    # and would be read as JSON lines (or, unread, leave every chapter's runs to be summarised).
    misplaced = [path for path in options.from_runs or [] if path.suffix == ".md"]
    if misplaced:
        parser.error(
            f"--from-runs takes runs files (JSON lines), not chapters: {', '.join(map(str, misplaced))}; "
            "name the chapters before it: robustness.py book/x.md --from-runs runs.jsonl"
        )

    chapters = [Path(chapter).resolve() for chapter in options.chapters] or swept_chapters()
    start = time.perf_counter()
    if options.from_runs:
        outcomes = load_runs(options.from_runs, chapters)
    else:
        options.runs_out = options.runs_out or (None if options.no_record else RUNS)
        if options.runs_out is not None:
            drop_stale_runs(options.runs_out, chapters)
        outcomes = run_sweep(options, chapters)
        if options.runs_out == RUNS and not options.no_record:
            outcomes = load_runs([RUNS], chapters)  # the record summarises every current run of these chapters
    outcomes.sort(
        key=lambda o: (chapters.index(o.setting.chapter), o.setting.seed, o.setting.device, o.setting.threads)
    )
    summaries = summarise(outcomes)
    report(outcomes, summaries)
    if not options.no_record:
        record(outcomes, summaries)
    if not options.from_runs:
        elapsed = time.perf_counter() - start
        print(
            f"sweep time: {elapsed / 60:.1f} min wall, {sum(o.seconds for o in outcomes) / 60:.1f} min of chapter runs"
        )
    return 0


def drop_stale_runs(path: Path, chapters: list[Path]) -> None:
    """Remove from a runs file the runs of these chapters that no longer count: runs of code that has
    changed since, or without the digests that only execution writes. Running is the only way back."""
    if not path.exists():
        return
    current = current_fingerprints(chapters)
    kept, dropped = [], 0
    for line in path.read_text().splitlines():
        saved = json.loads(line)
        if saved["chapter"] in current and refusal(saved, current[saved["chapter"]]):
            dropped += 1
        else:
            kept.append(line)
    if dropped:
        path.write_text("".join(line + "\n" for line in kept))
        print(f"dropped {dropped} runs of older code (or without digests) from {path}", flush=True)


def run_sweep(options: argparse.Namespace, chapters: list[Path]) -> list[Outcome]:
    """Run every chapter x seed x device x thread count, ``options.jobs`` at a time, printing each as it ends."""
    devices = options.devices or ["cpu"] + (["cuda"] if cuda_available() else [])
    if "cuda" in devices and not cuda_available():
        raise SystemExit("--devices cuda: PyTorch sees no CUDA device here")
    settings = [
        Setting(chapter, seed, threads, device)
        for seed in range(options.first_seed, options.first_seed + options.seeds)
        for chapter in chapters
        for device in devices
        for threads in (options.threads if device == "cpu" else [options.threads[0]])
    ]
    print(
        f"{len(settings)} runs: {len(chapters)} chapters x {options.seeds} seeds x "
        f"{'/'.join(map(str, options.threads))} threads on {', '.join(devices)}, {options.jobs} at a time",
        flush=True,
    )
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = [pool.submit(run, setting) for setting in settings]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
            if options.runs_out:
                with options.runs_out.open("a") as saved:
                    saved.write(outcome.as_json() + "\n")
            failed = [record["claim"] for record in outcome.claims if not record["passed"]]
            status = (
                "raised: " + outcome.error
                if outcome.error
                else (f"{len(failed)} failed: " + "; ".join(failed) if failed else "all held")
            )
            print(
                f"[{len(outcomes)}/{len(settings)}] {outcome.setting.label}: {outcome.seconds:.0f} s, "
                f"{len(outcome.claims)} checks, {status}",
                flush=True,
            )
    return outcomes


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.exit(main(sys.argv[1:]))
