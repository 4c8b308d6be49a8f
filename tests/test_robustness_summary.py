"""The committed record of the robustness sweep (robustness.json, written by scripts/robustness.py)
matches the claims the chapters make now: a claim or threshold changed after its chapter's sweep,
or a claim that did not hold in every run of it, fails here and names the chapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import robustness
from chapters import check_calls, claims_fingerprint, swept_chapters, toc_chapters

SWEPT = swept_chapters()
SUMMARY = json.loads(robustness.SUMMARY.read_text())["chapters"] if robustness.SUMMARY.exists() else {}
RESWEEP = "run make robustness ROBUSTNESS_ARGS=book/{}.md (add --seeds/--threads to taste) and commit robustness.json"


def test_the_sweep_covers_exactly_the_chapters_that_check_claims() -> None:
    checking = [chapter.stem for chapter in toc_chapters() if check_calls(chapter)]
    assert [chapter.stem for chapter in SWEPT] == checking
    assert len(checking) >= 18, "fewer chapters check claims than when this test was written: is check_calls blind?"
    stale = sorted(set(SUMMARY) - set(checking))
    assert not stale, f"robustness.json records chapters that no longer check claims: {stale}"


@pytest.mark.parametrize("chapter", SWEPT, ids=[chapter.stem for chapter in SWEPT])
def test_each_chapters_claims_were_swept_as_they_stand(chapter: Path) -> None:
    assert chapter.stem in SUMMARY, f"{chapter.stem} has never been swept: {RESWEEP.format(chapter.stem)}"
    row = SUMMARY[chapter.stem]
    assert row["fingerprint"] == claims_fingerprint(chapter), (
        f"{chapter.stem}: a claim, a measured value or a threshold changed after the recorded sweep of "
        f"{row['date']}: {RESWEEP.format(chapter.stem)}"
    )


@pytest.mark.parametrize("chapter", SWEPT, ids=[chapter.stem for chapter in SWEPT])
def test_each_recorded_claim_held_in_every_run(chapter: Path) -> None:
    row = SUMMARY.get(chapter.stem)
    if row is None:
        pytest.fail(f"{chapter.stem} has never been swept: {RESWEEP.format(chapter.stem)}")
    assert row["runs"] >= 1 and row["claims"], f"{chapter.stem}: the recorded sweep holds no run"
    assert not row["runs_that_raised"], f"{chapter.stem}: runs of the sweep raised: {row['runs_that_raised']}"
    failed = [f"{claim['claim']} ({claim['held']})" for claim in row["claims"] if not _held_every_time(claim["held"])]
    assert not failed, f"{chapter.stem}: claims that failed in some run of the sweep: {failed}"


def _held_every_time(held: str) -> bool:
    passed, runs = (int(part) for part in held.split("/"))
    return passed == runs


def test_a_claim_that_failed_once_is_read_as_failed() -> None:
    assert _held_every_time("30/30") and not _held_every_time("29/30")


def test_a_run_that_raised_before_a_claim_counts_against_it_and_a_loop_holds_only_if_every_check_did() -> None:
    chapter = Path("book/example.md")

    def outcome(seed: int, claims: list[tuple[str, bool]], error: str | None = None) -> robustness.Outcome:
        records = [
            {"claim": claim, "value": 1.0, "at_least": 0.5, "at_most": None, "margin": 0.5, "passed": passed}
            for claim, passed in claims
        ]
        return robustness.Outcome(robustness.Setting(chapter, seed, 1, "cpu"), 1.0, records, error)

    outcomes = [
        outcome(0, [("early", True), ("in a loop", True), ("in a loop", True)]),
        outcome(1, [("early", True), ("in a loop", True), ("in a loop", False)]),
        outcome(2, [("early", True)], error="RuntimeError: a crash"),
    ]
    held = {summary.claim: (summary.passed_runs, summary.runs) for summary in robustness.summarise(outcomes)}
    assert held == {"early": (3, 3), "in a loop": (1, 3)}


def test_saved_runs_come_back_as_they_were_and_runs_of_older_claims_are_refused(tmp_path: Path) -> None:
    chapter = SWEPT[0]
    record = {"claim": "c", "value": 1.0, "at_least": 0.5, "at_most": None, "margin": 0.5, "passed": True}
    saved = robustness.Outcome(robustness.Setting(chapter, 3, 2, "cuda"), 12.5, [record], None, "a GPU")
    runs = tmp_path / "runs.jsonl"
    runs.write_text(saved.as_json() + "\n")
    assert robustness.load_runs([runs], SWEPT) == [saved]
    assert robustness.load_runs([runs], SWEPT[1:]) == [], "a run of a chapter not asked for is left out"

    stale = json.loads(saved.as_json()) | {"fingerprint": "an older version of the claims"}
    runs.write_text(json.dumps(stale) + "\n")
    with pytest.raises(SystemExit, match="predates its current claims"):
        robustness.load_runs([runs], SWEPT)


#: Claims that vary over the sweep and sit on a bound that no run can cross, with the reason.
ON_A_BOUND_BY_NATURE = {
    "the allocator measures 4,000,000 bytes for a 1000 x 1000 float32 matrix, within 512": (
        "the matrix cannot take fewer than its 4,000,000 bytes; CUDA's allocator rounds up to 512-byte blocks"
    ),
}


def _touched_its_bound(claim: dict[str, object]) -> bool:
    """A claim whose value varied over the sweep and landed on its bound in some run: it held, but
    without margin, so another seed or machine can cross it. (An exact fact, such as a count of
    mismatches that must be 0, measures the same value in every run and sits on its bound by design.)"""
    return claim["min"] != claim["max"] and claim["min_margin"] == 0


@pytest.mark.parametrize("chapter", SWEPT, ids=[chapter.stem for chapter in SWEPT])
def test_no_claim_that_varies_over_the_sweep_touched_its_bound(chapter: Path) -> None:
    row = SUMMARY.get(chapter.stem, {"claims": []})
    touched = [
        f"{claim['claim']} ({claim['min']} to {claim['max']}, bound {claim['threshold']})"
        for claim in row["claims"]
        if _touched_its_bound(claim) and claim["claim"] not in ON_A_BOUND_BY_NATURE
    ]
    assert not touched, f"{chapter.stem}: claims that held without margin in some run: {touched}"


def test_a_count_that_reached_its_bound_is_flagged_and_an_exact_fact_is_not() -> None:
    assert _touched_its_bound({"min": 2.0, "max": 8.0, "min_margin": 0.0})
    assert not _touched_its_bound({"min": 0.0, "max": 0.0, "min_margin": 0.0})
    assert not _touched_its_bound({"min": 2.0, "max": 6.0, "min_margin": 4.0})


def test_every_claim_excused_from_a_margin_is_still_made() -> None:
    made = {claim["claim"] for row in SUMMARY.values() for claim in row["claims"]}
    assert set(ON_A_BOUND_BY_NATURE) <= made, set(ON_A_BOUND_BY_NATURE) - made
