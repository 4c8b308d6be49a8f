"""The committed record of the robustness sweep (robustness.json, written by scripts/robustness.py)
matches the chapters as they are now: a chapter whose code (or a package module it imports) changed
after its sweep, a claim that did not hold in every run or held without margin, and a conclusion
that took different branches in different runs each fail here and name the chapter."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path
from typing import Any

import carry_sweep
import nbformat
import pytest

import robustness
from chapters import chapter_code, check_calls, experiment_fingerprint, swept_chapters, toc_chapters

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
    assert row["fingerprint"] == experiment_fingerprint(chapter), (
        f"{chapter.stem}: its code, or a package module it imports, changed after the recorded sweep of "
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


def _signed(run: dict[str, Any]) -> dict[str, Any]:
    fields = {key: value for key, value in run.items() if key != "record_digest"}
    return fields | {"record_digest": robustness.record_digest(fields)}


def _saved_run(chapter: Path) -> robustness.Outcome:
    record = {"claim": "c", "value": 1.0, "at_least": 0.5, "at_most": None, "margin": 0.5, "passed": True}
    return robustness.Outcome(
        robustness.Setting(chapter, 3, 2, "cuda"),
        12.5,
        [record],
        None,
        "a GPU",
        fingerprint=experiment_fingerprint(chapter),
        outputs="0" * 64,
    )


def test_saved_runs_come_back_as_they_were(tmp_path: Path) -> None:
    saved = _saved_run(SWEPT[0])
    runs = tmp_path / "runs.jsonl"
    runs.write_text(saved.as_json() + "\n")
    assert robustness.load_runs([runs], SWEPT) == [saved]
    assert robustness.load_runs([runs], SWEPT[1:]) == [], "a run of a chapter not asked for is left out"


@pytest.mark.parametrize(
    ("edit", "refusal"),
    [
        # A run of an older version of the chapter, honestly recorded: its record digest matches.
        (lambda run: _signed(run | {"fingerprint": "an older version"}), "predates the chapter's current code"),
        (lambda run: {k: v for k, v in run.items() if k != "outputs_digest"}, "no digest of its executed outputs"),
        (lambda run: run | {"outputs_digest": ""}, "no digest of its executed outputs"),
        # Re-scoring: a looser bound written into a saved run, its verdict kept.
        (lambda run: run | {"claims": [run["claims"][0] | {"at_least": 0.0, "margin": 1.0}]}, "edited after it ran"),
        (lambda run: {k: v for k, v in run.items() if k != "record_digest"}, "edited after it ran"),
    ],
    ids=["stale code", "no outputs digest", "empty outputs digest", "re-scored bound", "no record digest"],
)
def test_only_an_executed_unedited_run_of_the_current_code_is_accepted(tmp_path: Path, edit, refusal: str) -> None:
    saved = json.loads(_saved_run(SWEPT[0]).as_json())
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps(edit(saved)) + "\n")
    with pytest.raises(SystemExit, match=refusal):
        robustness.load_runs([runs], SWEPT)


def test_the_committed_runs_are_the_summarys_runs() -> None:
    """robustness.json is what scripts/robustness.py --from-runs robustness-runs.jsonl writes: every
    committed run is executed, unedited and of the current code, and the summary counts exactly them."""
    outcomes = robustness.load_runs([robustness.RUNS], SWEPT)
    for chapter in SWEPT:
        runs = [outcome for outcome in outcomes if outcome.setting.chapter == chapter]
        row = SUMMARY.get(chapter.stem, {})
        assert row.get("runs") == len(runs), (
            f"{chapter.stem}: robustness.json counts {row.get('runs')} runs, robustness-runs.jsonl holds "
            f"{len(runs)} of its current code: {RESWEEP.format(chapter.stem)}"
        )
        summaries = [s.as_record() for s in robustness.summarise(runs)]
        assert summaries == row["claims"], f"{chapter.stem}: robustness.json does not summarise its runs"


#: The fewest runs of each swept chapter the committed record holds (the full sweep is 10 seeds at
#: 1, 2 and 4 threads; CONTRIBUTING.md, "Robustness").
FEWEST_SEEDS = 3


@pytest.mark.parametrize("chapter", SWEPT, ids=[chapter.stem for chapter in SWEPT])
def test_each_chapter_was_swept_over_several_seeds(chapter: Path) -> None:
    row = SUMMARY.get(chapter.stem, {"seeds": []})
    assert len(row["seeds"]) >= FEWEST_SEEDS, (
        f"{chapter.stem}: the recorded sweep ran {len(row['seeds'])} seeds, fewer than {FEWEST_SEEDS}: "
        f"{RESWEEP.format(chapter.stem)}"
    )


#: Claims that vary over the sweep and sit on a bound that no run can cross, with the reason.
ON_A_BOUND_BY_NATURE = {
    "the allocator measures 4,000,000 bytes for a 1000 x 1000 float32 matrix, within 512": (
        "the matrix cannot take fewer than its 4,000,000 bytes; CUDA's allocator rounds up to 512-byte blocks"
    ),
}


#: How close to its bound a margin may come, relative to the size of the values and the bound, before
#: it counts as touching it: float32 rounding puts a value that "equals" its bound within about 1e-7
#: of it, relatively (encoder-only once sat 1.2e-8 inside a bound of -0.05).
MARGIN_TOLERANCE = 1e-5


def _touched_its_bound(claim: dict[str, object]) -> bool:
    """A claim whose value varied over the sweep and came within rounding of its bound in some run:
    it held, but without margin, so another seed or machine can cross it. (An exact fact, such as
    a count of mismatches that must be 0, measures the same value in every run and sits on its
    bound by design.)"""
    if claim["min_margin"] is None:  # a true-or-false claim has no margin: it held, or it failed
        return False
    low, high, margin = float(claim["min"]), float(claim["max"]), float(claim["min_margin"])  # type: ignore[arg-type]
    bounds = [
        float(number)
        for number in str(claim.get("threshold", "")).replace(">=", "").replace("<=", "").strip("[] ").split(",")
        if number.strip() and number.strip() != "true"
    ]
    scale = max([abs(low), abs(high), *map(abs, bounds), math.ulp(1.0)])
    return low != high and margin <= MARGIN_TOLERANCE * scale


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
    assert _touched_its_bound({"min": 2.0, "max": 8.0, "min_margin": 0.0, "threshold": "<= 8"})
    assert not _touched_its_bound({"min": 0.0, "max": 0.0, "min_margin": 0.0, "threshold": "<= 0"})
    assert not _touched_its_bound({"min": 2.0, "max": 6.0, "min_margin": 4.0, "threshold": "<= 10"})
    assert not _touched_its_bound({"min": 0.0, "max": 1.0, "min_margin": None, "threshold": "true"})


def test_a_margin_within_rounding_of_its_bound_counts_as_touching_it() -> None:
    # encoder-only's "end close" at the 2026-12-05 review: 1.19e-8 inside a bound of -0.05.
    assert _touched_its_bound(
        {"min": -0.0499999881, "max": -0.0043, "min_margin": 1.19e-8, "threshold": "[-0.05, 0.05]"}
    )
    assert not _touched_its_bound({"min": -0.049, "max": -0.0043, "min_margin": 1e-3, "threshold": "[-0.05, 0.05]"})


def test_every_claim_excused_from_a_margin_is_still_made() -> None:
    made = {claim["claim"] for row in SUMMARY.values() for claim in row["claims"]}
    assert set(ON_A_BOUND_BY_NATURE) <= made, set(ON_A_BOUND_BY_NATURE) - made


#: Glued sentences whose wording the result chooses and whose every wording the prose is written to
#: be true for, each with where and why: a description of this run ("in this run ..."), a piece of
#: data (a sample, a ranking), never a conclusion the chapter draws. A conclusion not listed here must
#: take one branch in every run of the sweep.
TRUE_FOR_EVERY_BRANCH: dict[tuple[str, str], str] = {
    ("multi-head-attention", "glued: mha_stuck_sentence"): (
        "'In this run none (or k) of the restarts got stuck': a count of this run's restarts; the lesson, "
        "that the lowest training loss of several restarts is kept, holds either way"
    ),
    ("multi-head-attention", "glued: mha_one_head_sentence"): (
        "which relation the single head solves is a coin the seed tosses; the text goes on 'Either way it "
        "gets about one digit in two right', which is checked"
    ),
    ("training", "glued: tr_interrupted_copies"): (
        "how many test sequences a model interrupted after a few steps copies (none, or a few); the point "
        "made is that it decodes at all"
    ),
    ("training", "glued: tr_checkpoints_singly"): (
        "whether every single checkpoint is already perfect varies; what is checked and concluded is the "
        "averaged model's exact match"
    ),
    ("training", "glued: tr_checkpoints_verdict"): (
        "follows tr_checkpoints_singly: both wordings say the average does not depend on where training stopped"
    ),
    ("training", "glued: tr_spikes"): (
        "whether this run's loss jumps above the floor after step 300, and how often: a description of the "
        "curve beside it; the text then measures the restless gradient norm, which every run shows"
    ),
    ("translation", "glued: tl_worst_sentence"): (
        "which date style an early checkpoint gets wrong most often, as data introducing the table of its failures"
    ),
    ("vision-transformer", "glued: vit_best_baseline"): (
        "names the baseline that scores highest in this run (the SVM or the CNN, a few images apart); the text "
        "says another seed moves every network by a few images"
    ),
    ("translation", "glued: tl_century_clause"): (
        "grammatical number only: 'only one puts the date in the wrong century' or 'k put it there'"
    ),
    ("vision-transformer", "glued: vit_patch4_comparison"): (
        "grammatical number only: 'one more test image' or 'k more test images'; the text adds that another "
        "seed may change it by a few"
    ),
    ("precision-and-memory", "glued: precision_first_overflow"): (
        "the first overflowing scale is written as a power of two with a superscript exponent (2^19 or 2^20), "
        "a number the wording's digit filter does not read as one"
    ),
    ("mixture-of-experts", "glued: moe_balance_agreement"): (
        "'agrees exactly' or 'agrees to 1e-07': the same agreement, exact or within float32 rounding of the sum "
        "taken in another order; the bound is checked"
    ),
    ("mixture-of-experts", "glued: moe_equal_time_leaning"): (
        "whether the dense model's fixed step count is fewer or more than equal time gives it on the machine "
        "that ran it: a description of that machine's measured step times; the losses compared are the same "
        "experiment on every machine, and their conclusions are checked"
    ),
    ("translation", "glued: tl_year_sentence"): (
        "which source digit the best head reads each year digit from varies; every wording says the head "
        "copies the year, as the figure beside it shows"
    ),
    ("decoding", "glued: dc_example_text"): "a date of the test set, chosen by the trained model: data, not a claim",
    ("text-to-text", "glued: t5_lowest_clause"): (
        "'every held-out date exactly right' or 'at least x% of them': both state the lowest task's score"
    ),
    ("relative-positions", "glued: rope_ranking"): (
        "the full ranking at the longest length, as data: learned and sinusoidal positions, both near chance "
        "there (checked), swap places; the conclusion drawn, RoPE first, is checked"
    ),
    ("efficient-attention", "glued: flash_time_sentence"): (
        "'On this machine our Python loop was faster (or slower) than the naive formula': a description of the "
        "machine's timings, printed beside them: faster on the AMD EPYC (1 and 2 threads) and at 1 thread on the "
        "Xeon, slower at 2 and 4 threads on the Xeon. What the text goes on to say (the same multiply-adds; the "
        "loop saves memory traffic and pays per tile) holds either way"
    ),
    ("precision-and-memory", "glued: precision_paper_duration"): (
        "the paper's training time at the rate this run measured, written in days or, past a year, in years: "
        "a description of the machine, followed by its order of magnitude in seconds"
    ),
    ("translation", "glued: tl_weekday_clause"): (
        "how much attention the abbreviated example's weekday draws in the figure beside it (almost none, or a "
        "share given as a number): a description of this run's map; the exercise below measures whether the model "
        "uses it"
    ),
    ("vision-transformer", "glued: vit_best_sentence"): (
        "which model is best at each size, as data: the paragraph goes on 'one run per model and size is one "
        "draw', and the conclusions drawn (the CNN ahead on few images, its lead shrinking) are checked"
    ),
}


@pytest.mark.parametrize("chapter", SWEPT, ids=[chapter.stem for chapter in SWEPT])
def test_no_conclusion_flips_with_the_seed(chapter: Path) -> None:
    row = SUMMARY.get(chapter.stem, {})
    flipped = [
        f"{conclusion['family']!r}: "
        + "; ".join(f"{count} runs: {claim}" for claim, count in conclusion["branches"].items())
        for conclusion in row.get("conclusions", [])
        if len(conclusion["branches"]) > 1 and (chapter.stem, conclusion["family"]) not in TRUE_FOR_EVERY_BRANCH
    ]
    assert not flipped, (
        f"{chapter.stem}: conclusions that took different branches in different runs (a lesson that flips "
        f"with the seed): {flipped}. Make the result robust, or write only what every run shows."
    )


def test_every_excused_conclusion_is_still_drawn() -> None:
    drawn = {(stem, c["family"]) for stem, row in SUMMARY.items() for c in row.get("conclusions", [])}
    assert set(TRUE_FOR_EVERY_BRANCH) <= drawn, set(TRUE_FOR_EVERY_BRANCH) - drawn


def test_conclusions_are_counted_per_run_across_branches() -> None:
    chapter = Path("book/example.md")

    def outcome(seed: int, claim: str) -> robustness.Outcome:
        record = {"claim": claim, "value": 1.0, "at_least": 0.5, "at_most": None, "margin": 0.5, "passed": True}
        return robustness.Outcome(robustness.Setting(chapter, seed, 1, "cpu"), 1.0, [record | {"family": "verdict"}])

    outcomes = [outcome(0, "beats"), outcome(1, "beats"), outcome(2, "falls behind")]
    (conclusion,) = robustness.summarise_conclusions(outcomes)
    assert conclusion.branches == {"beats": 2, "falls behind": 1}
    # A branch that checks two claims is one branch: every run that takes it checks both.
    both = outcome(3, "is not a copy")
    both.claims.append(both.claims[0] | {"claim": "repeats little"})
    (conclusion,) = robustness.summarise_conclusions([both, both])
    assert conclusion.branches == {"is not a copy + repeats little": 2}


def _checks_chosen_by_a_result(chapter: Path) -> list[str]:
    """Checks inside an ``if`` (or a conditional expression), or whose claim is not written out: a
    sentence the result chooses, which must name its conclusion with ``family=``."""
    found = []
    tree = chapter_code(chapter)
    conditional = {
        id(node) for branch in ast.walk(tree) if isinstance(branch, (ast.If, ast.IfExp)) for node in ast.walk(branch)
    }
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "check"
    ]
    for call in sorted(calls, key=lambda call: call.lineno):
        claim = call.args[0] if call.args else None
        written_out = isinstance(claim, (ast.Constant, ast.JoinedStr))
        if (id(call) in conditional or not written_out) and not any(k.arg == "family" for k in call.keywords):
            found.append(f"line {call.lineno}: {ast.unparse(call)[:90]}")
    return found


@pytest.mark.parametrize("chapter", SWEPT, ids=[chapter.stem for chapter in SWEPT])
def test_a_sentence_chosen_by_the_result_names_its_conclusion(chapter: Path) -> None:
    unnamed = _checks_chosen_by_a_result(chapter)
    assert not unnamed, (
        f"{chapter.stem}: checks whose claim the result chooses, without family=: {unnamed}. Give the branches of one "
        f"conclusion the same family, so that the sweep sees when it flips."
    )


def test_a_new_sweep_drops_the_runs_that_no_longer_count_and_keeps_the_rest(tmp_path: Path) -> None:
    current = json.loads(_saved_run(SWEPT[0]).as_json())
    stale = _signed(current | {"seed": 4, "fingerprint": "an older version"})
    other_chapter = _signed(current | {"chapter": SWEPT[1].stem, "fingerprint": "not this sweep's to judge"})
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(run) + "\n" for run in (current, stale, other_chapter)))
    robustness.drop_stale_runs(runs, SWEPT[:1])
    assert [json.loads(line) for line in runs.read_text().splitlines()] == [current, other_chapter]


def test_a_chapter_given_after_from_runs_is_refused_by_name(capsys: pytest.CaptureFixture[str]) -> None:
    # argparse gives --from-runs every path after it: a chapter there was read as a runs file and
    # failed with a JSON error that named neither the chapter nor the fix.
    with pytest.raises(SystemExit) as exited:
        robustness.main(["--from-runs", str(robustness.RUNS), "book/training.md"])
    assert exited.value.code == 2
    error = capsys.readouterr().err
    assert "not chapters: book/training.md" in error and "name the chapters before it" in error


def _carry(chapter: str, old: str, new: str) -> dict[str, Any]:
    return _signed({"chapter": chapter, "from": old, "to": new, "base": "0" * 40, "results_digest": "r"})


def test_a_carried_sweep_counts_the_runs_of_every_version_it_was_carried_from(tmp_path: Path) -> None:
    carried = tmp_path / "carried.jsonl"
    carries = [_carry("a", "v1", "v2"), _carry("a", "v2", "v3"), _carry("b", "v0", "v3")]
    carried.write_text("".join(json.dumps(carry) + "\n" for carry in carries))
    assert robustness.accepted_fingerprints("a", "v3", carried) == {"v1", "v2", "v3"}
    assert robustness.accepted_fingerprints("a", "v2", carried) == {"v1", "v2"}, "a carry goes forward only"
    assert robustness.accepted_fingerprints("c", "v3", carried) == {"v3"}, "another chapter's carry is not this one's"
    assert robustness.refusal({"outputs_digest": "x", "fingerprint": "v1"} | {}, {"v3"}) is not None


def test_a_carry_edited_after_it_was_written_is_refused(tmp_path: Path) -> None:
    carried = tmp_path / "carried.jsonl"
    carried.write_text(json.dumps(_carry("a", "v1", "v2") | {"from": "v0"}) + "\n")
    with pytest.raises(SystemExit, match="edited after it was written"):
        robustness.accepted_fingerprints("a", "v2", carried)


def test_every_carry_the_summary_lists_was_written_by_execution() -> None:
    """Each carry a row of robustness.json names is a signed record of scripts/carry_sweep.py, whose
    chain reaches the chapter's current code."""
    written = (
        [json.loads(line) for line in robustness.CARRIED.read_text().splitlines()]
        if robustness.CARRIED.exists()
        else []
    )
    for chapter in SWEPT:
        for carry in SUMMARY.get(chapter.stem, {}).get("carried", []):
            matching = [
                record
                for record in written
                if (record["chapter"], record["from"], record["to"]) == (chapter.stem, carry["from"], carry["to"])
            ]
            assert matching, (
                f"{chapter.stem}: robustness.json lists a carry {carry} that robustness-carried.jsonl lacks"
            )
            assert carry["from"] in robustness.accepted_fingerprints(chapter.stem, experiment_fingerprint(chapter))


def _results(**values: str) -> carry_sweep.Results:
    return carry_sweep.Results(dict(values))


def test_a_carry_needs_every_result_identical_and_leaves_out_only_what_varies_between_runs_of_the_same_code() -> None:
    before = _results(loss="1.5", seconds="2.0", figure="png")
    same = carry_sweep.judge(before, _results(loss="1.5", seconds="2.0", figure="png"), None)
    assert same.carried and same.compared == 3 and not same.measurements
    timing = carry_sweep.judge(
        before, _results(loss="1.5", seconds="2.4", figure="png"), _results(loss="1.5", seconds="1.9", figure="png")
    )
    assert timing.carried and timing.measurements == ["seconds"] and timing.compared == 2
    changed = carry_sweep.judge(
        before, _results(loss="1.6", seconds="2.0", figure="png"), _results(loss="1.5", seconds="2.0", figure="png")
    )
    assert not changed.carried and changed.changed == ["loss"]
    lost = carry_sweep.judge(
        before, _results(loss="1.5", seconds="2.0"), _results(loss="1.5", seconds="2.0", figure="png")
    )
    assert not lost.carried and lost.changed == ["figure"], "a value the new code no longer glues is a change"
    # two runs of the old code agreed on a time by chance; two runs of the new code show it varies
    lucky = carry_sweep.judge(
        before,
        _results(loss="1.5", seconds="2.4", figure="png"),
        _results(loss="1.5", seconds="2.0", figure="png"),
        _results(loss="1.5", seconds="2.1", figure="png"),
    )
    assert lucky.carried and lucky.measurements == ["seconds"]
    steady = carry_sweep.judge(
        before,
        _results(loss="1.6", seconds="2.0", figure="png"),
        _results(loss="1.5", seconds="2.0", figure="png"),
        _results(loss="1.6", seconds="2.0", figure="png"),
    )
    assert not steady.carried and steady.changed == ["loss"], "a result the new code repeats is a change"


def test_a_glued_table_is_compared_cell_by_cell_so_a_time_column_leaves_out_only_its_cells() -> None:
    def notebook(seconds: str, accuracy: str) -> nbformat.NotebookNode:
        table = f"<table><tr><th>model</th><th>accuracy</th><th>seconds</th></tr><tr><td>a</td><td>{accuracy}</td><td>{seconds}</td></tr></table>"
        glued = nbformat.v4.new_output(
            "display_data",
            data={"text/html": table, "text/plain": f"a {accuracy} {seconds}"},
            metadata={"scrapbook": {"name": "results"}},
        )
        number = nbformat.v4.new_output(
            "display_data",
            data={"application/papermill.record/text/plain": accuracy},
            metadata={"scrapbook": {"name": "accuracy"}},
        )
        code = nbformat.v4.new_code_cell("")
        code.outputs = [glued, number]
        book: nbformat.NotebookNode = nbformat.v4.new_notebook(cells=[code])
        return book

    def results(seconds: str, accuracy: str) -> carry_sweep.Results:
        return carry_sweep.Results(carry_sweep.glued_values(notebook(seconds, accuracy)))

    before = results("1.2", "0.91")
    assert before.values["glued: results cell 4"] == "0.91" and before.values["glued: results (cells)"] == "6"
    timing = carry_sweep.judge(before, results("1.5", "0.91"), results("1.3", "0.91"))
    assert timing.carried and timing.measurements == ["glued: results cell 5"]
    changed = carry_sweep.judge(before, results("1.5", "0.92"), results("1.3", "0.91"))
    assert not changed.carried and "glued: results cell 4" in changed.changed and "glued: accuracy" in changed.changed
