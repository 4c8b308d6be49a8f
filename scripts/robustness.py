"""Re-run the chapters whose results are stochastic over seeds and thread counts; print, per claim,
how often it held and by what margin.

    python scripts/robustness.py                          # the default sweep: 10 seeds x {1, 2, 4} threads
    python scripts/robustness.py --seeds 3 --threads 1 book/training.md
    python scripts/robustness.py --jobs 8                 # on a machine with 16 cores

Every run executes a chapter itself, unchanged, in a fresh kernel, with ``BOOK_SEED`` (which
moves all of the chapter's seeds: weights, data, sampling) and ``OMP_NUM_THREADS`` set. The
chapter's hidden checks call ``transformer_book.check``; with ``BOOK_CLAIMS_LOG`` set, each check
is written to a log instead of raising, so one run reports every claim. Runs on the CPU hide the
GPU; where CUDA is present, each seed also runs once on it.

The table gives, per chapter and claim: the pass rate, the minimum, median and maximum of the
measured value, the threshold, and the smallest margin to it (value minus bound, in the claim's own
units; negative means it failed somewhere). It prints and asserts nothing: it is a measurement for
authors, not a test. A run that raised (not a check, a crash) is listed with its error.
"""

from __future__ import annotations

import argparse
import json
import os
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

from chapters import BOOK, ROOT, ChapterFailed, execute_chapter

#: Chapters whose checks rest on training or sampling, and so can differ from run to run.
STOCHASTIC = [
    "sequential-bottleneck",
    "scaled-dot-product",
    "self-attention",
    "multi-head-attention",
    "positional-encoding",
    "block-anatomy",
    "batching",
    "training",
    "translation",
    "decoding",
    "tokenization",
    "decoder-only",
    "encoder-only",
    "vision-transformer",
    "text-to-text",
    "relative-positions",
    "efficient-attention",
    "precision-and-memory",
]


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


def run(setting: Setting) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="robustness-") as scratch:
        log = Path(scratch) / "claims.jsonl"
        environment = {
            "BOOK_SEED": str(setting.seed),
            "BOOK_CLAIMS_LOG": str(log),
            "OMP_NUM_THREADS": str(setting.threads),
            "MKL_NUM_THREADS": str(setting.threads),
            # Runs share the machine; OpenMP's spinning threads would otherwise slow multi-threaded
            # runs 5-20 times while another run holds a core. It changes scheduling, not arithmetic.
            "OMP_WAIT_POLICY": "PASSIVE",
        }
        if setting.device == "cpu":
            environment["CUDA_VISIBLE_DEVICES"] = ""
        start = time.perf_counter()
        error = None
        try:
            execute_chapter(setting.chapter, env={**os.environ, **environment})
        except ChapterFailed as failure:
            error = failing_line(str(failure))
        except Exception as failure:  # a cell timeout or a dead kernel: one lost run, not the whole table
            error = (
                f"{type(failure).__name__}: {str(failure).strip().splitlines()[-1] if str(failure).strip() else ''}"[
                    :400
                ]
            )
        seconds = time.perf_counter() - start
        claims = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Outcome(setting, seconds, claims, error)


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


def report(outcomes: list[Outcome], settings_per_chapter: dict[str, int]) -> None:
    by_claim: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    order: list[tuple[str, str]] = []
    for outcome in outcomes:
        for record in outcome.claims:
            key = (outcome.setting.chapter.stem, record["claim"])
            if key not in by_claim:
                order.append(key)
            by_claim[key].append(record)

    print()
    header = f"{'chapter':<22} {'claim':<70} {'passed':>9} {'min':>10} {'median':>10} {'max':>10} {'threshold':>18} {'min margin':>11}"
    print(header)
    print("-" * len(header))
    for chapter, claim in sorted(order, key=lambda key: STOCHASTIC.index(key[0]) if key[0] in STOCHASTIC else 99):
        records = by_claim[(chapter, claim)]
        runs = settings_per_chapter[chapter]
        passed = sum(record["passed"] for record in records)
        values = [record["value"] for record in records]
        margins = [record["margin"] for record in records if record["margin"] is not None]
        # A claim checked in a loop appears several times a run; a claim a run never reached counts as failed.
        denominator = max(len(records), runs)
        shown = claim if len(claim) <= 70 else claim[:67] + "..."
        print(
            f"{chapter:<22} {shown:<70} {passed:>4}/{denominator:<4} {min(values):>10.4g} "
            f"{statistics.median(values):>10.4g} {max(values):>10.4g} {threshold_text(records[0]):>18} "
            f"{(f'{min(margins):.4g}' if margins else '-'):>11}"
        )

    crashes = [outcome for outcome in outcomes if outcome.error]
    if crashes:
        print("\nRuns that raised (not a check):")
        for outcome in crashes:
            print(f"  {outcome.setting.label}: {outcome.error}")
    failed = sum(not record["passed"] for records in by_claim.values() for record in records)
    print(
        f"\n{len(by_claim)} claims, {sum(len(r) for r in by_claim.values())} checks, {failed} failed, "
        f"{len(crashes)} runs raised."
    )


def main(arguments: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("chapters", nargs="*", help="chapters to sweep (default: the stochastic ones)")
    parser.add_argument("--seeds", type=int, default=10, help="BOOK_SEED = 0 .. SEEDS-1 (default 10)")
    parser.add_argument("--first-seed", type=int, default=0, help="start the seeds here (default 0)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4], help="CPU thread counts (default 1 2 4)")
    parser.add_argument(
        "--jobs",
        type=int,
        default=max(1, (os.cpu_count() or 2) // 2),
        help="chapters run at once (default: half the CPU cores)",
    )
    parser.add_argument("--no-cuda", action="store_true", help="skip the CUDA runs even where a GPU is present")
    options = parser.parse_args(arguments)

    chapters = [Path(chapter).resolve() for chapter in options.chapters] or [BOOK / f"{stem}.md" for stem in STOCHASTIC]
    devices = ["cpu"] + (["cuda"] if cuda_available() and not options.no_cuda else [])
    settings = [
        Setting(chapter, seed, threads, device)
        for seed in range(options.first_seed, options.first_seed + options.seeds)
        for chapter in chapters
        for device in devices
        for threads in (options.threads if device == "cpu" else [options.threads[0]])
    ]
    per_chapter: dict[str, int] = defaultdict(int)
    for setting in settings:
        per_chapter[setting.chapter.stem] += 1

    print(
        f"{len(settings)} runs: {len(chapters)} chapters x {options.seeds} seeds x "
        f"{'/'.join(map(str, options.threads))} threads on {', '.join(devices)}, {options.jobs} at a time",
        flush=True,
    )
    start = time.perf_counter()
    outcomes: list[Outcome] = []
    with ThreadPoolExecutor(max_workers=options.jobs) as pool:
        futures = [pool.submit(run, setting) for setting in settings]
        for future in as_completed(futures):
            outcome = future.result()
            outcomes.append(outcome)
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
    report(outcomes, per_chapter)
    elapsed = time.perf_counter() - start
    print(f"sweep time: {elapsed / 60:.1f} min wall, {sum(o.seconds for o in outcomes) / 60:.1f} min of chapter runs")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "scripts"))
    sys.exit(main(sys.argv[1:]))
