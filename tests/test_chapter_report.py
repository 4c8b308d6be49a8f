"""The end-of-build summary names a failed chapter by the claim that failed, not by a traceback."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "_ext"))
from chapter_report import _error_line  # noqa: E402


def test_a_failed_check_is_reported_by_its_claim_value_and_run() -> None:
    traceback = (
        "\x1b[31m---------------------------------------------------------------------------\x1b[39m\n"
        "\x1b[31mClaimFailed\x1b[39m                               Traceback (most recent call last)\n"
        "\x1b[32m--> \x1b[39m\x1b[32m166\x1b[39m raise ClaimFailed(\n"
        "\x1b[31mClaimFailed\x1b[39m: The text claims: the model copies every held-out sequence.\n"
        "But this run measured 0.946; the text needs at least 1.\n"
        "Run: BOOK_SEED=0, device cpu (AMD EPYC), 2 CPU threads, PyTorch 2.13.0+cpu, Python 3.11.7.\n"
        "Results of training differ a little between machines, so ...\n"
    )
    line = _error_line(traceback)
    assert line.startswith("ClaimFailed: The text claims: the model copies every held-out sequence.")
    assert "measured 0.946" in line and "AMD EPYC" in line and "Results of training" not in line


def test_any_other_error_is_reported_by_its_last_line() -> None:
    assert (
        _error_line("Traceback\n  File x\nZeroDivisionError: division by zero\n")
        == "ZeroDivisionError: division by zero"
    )
    assert _error_line("") == "unknown error"
