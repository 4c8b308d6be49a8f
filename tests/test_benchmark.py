"""The training benchmark runs and prints its comparison.

It is a script that prints timings; this test only checks that it still works with the
package (a tiny configuration, two steps), never how fast anything is.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import torch

from chapters import ROOT


def test_benchmark_script_prints_the_three_throughputs() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "benchmark_training.py"),
            "--d-model",
            "16",
            "--heads",
            "2",
            "--layers",
            "1",
            "--d-ff",
            "32",
            "--vocab",
            "20",
            "--batch",
            "4",
            "--length",
            "6",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--rounds",
            "1",
            "--attention-length",
            "16",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "UserWarning" not in result.stderr, result.stderr
    summary = re.search(
        r"book ([\d,]+) tokens/s, book with the fused path ([\d,]+) tokens/s, nn.Transformer ([\d,]+) tokens/s",
        result.stdout,
    )
    assert summary is not None, result.stdout
    assert all(int(group.replace(",", "")) > 0 for group in summary.groups())
    causal = re.search(
        r"fused path takes ([\d.]+)x the time and ([\d.]+)x the peak memory of direct SDPA", result.stdout
    )
    assert causal is not None, result.stdout
    assert "CUDA is not available" in result.stdout or "\ncuda: " in result.stdout, "no CUDA rows, and no word why"
    assert "2 timed steps a round" in result.stdout, "--steps was not used"


def test_benchmark_times_ten_times_more_steps_on_a_gpu_unless_told() -> None:
    """A GPU step takes about a millisecond: 20 of them are within the machine's noise."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from benchmark_training import timed_steps

    default, told = argparse.Namespace(steps=None), argparse.Namespace(steps=7)
    assert timed_steps(default, torch.device("cpu")) == 20
    assert timed_steps(default, torch.device("cuda")) == timed_steps(default, torch.device("mps")) == 200
    assert timed_steps(told, torch.device("cuda")) == timed_steps(told, torch.device("cpu")) == 7
