"""The hand-written modules: helpers (device choice, parameter count, timer) and runtime (seeding, claims, figure style, glue)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.patches import FancyBboxPatch

import transformer_book
from transformer_book import helpers, runtime, seconds_per_call


@pytest.mark.parametrize(
    ("cuda", "mps", "expected"),
    [
        (True, True, "cuda"),
        (True, False, "cuda"),
        (False, True, "mps"),
        (False, False, "cpu"),
    ],
)
def test_device_prefers_cuda_then_mps_then_the_cpu(
    monkeypatch: pytest.MonkeyPatch, cuda: bool, mps: bool, expected: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    monkeypatch.setattr(helpers, "_mps_works", lambda: True)
    assert transformer_book.device().type == expected


def test_device_falls_back_to_the_cpu_when_mps_fails_its_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(helpers, "_mps_works", lambda: False)
    assert transformer_book.device().type == "cpu"


def test_the_mps_check_fails_with_a_message_where_mps_cannot_run() -> None:
    if torch.backends.mps.is_available():
        pytest.skip("this machine has a working MPS")
    helpers._mps_works.cache_clear()
    with pytest.warns(UserWarning, match="MPS is available but failed a small attention check"):
        assert helpers._mps_works() is False
    helpers._mps_works.cache_clear()


def test_by_device_picks_the_cpu_setting_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(helpers, "device", lambda: torch.device("cpu"))
    assert runtime.by_device(cpu=1, accelerator=2) == 1
    monkeypatch.setattr(helpers, "device", lambda: torch.device("cuda"))
    assert runtime.by_device(cpu=1, accelerator=2) == 2


def test_seed_everything_makes_torch_and_numpy_repeatable() -> None:
    runtime.seed_everything(3)
    first = (torch.rand(4), np.random.rand(4))
    runtime.seed_everything(3)
    second = (torch.rand(4), np.random.rand(4))
    assert torch.equal(first[0], second[0])
    assert np.array_equal(first[1], second[1])


def test_book_style_sets_an_opaque_background_and_uniform_colour_map() -> None:
    runtime.use_book_style()
    assert plt.rcParams["figure.facecolor"] == "white"
    assert plt.rcParams["image.cmap"] == "viridis"


def test_glue_turns_one_number_tensors_and_numpy_scalars_into_python_numbers() -> None:
    assert runtime._plain("x", torch.tensor(2.5)) == 2.5
    assert type(runtime._plain("x", np.float64(1.5))) is float
    assert type(runtime._plain("x", np.int64(7))) is int


def test_glue_refuses_tensors_with_many_numbers() -> None:
    with pytest.raises(TypeError, match="'weights'.*shape \\(2, 2\\)"):
        runtime._plain("weights", torch.zeros(2, 2))


def test_glue_without_myst_nb_prints_numbers_and_closes_figures(monkeypatch, capsys) -> None:
    import builtins

    real_import = builtins.__import__

    def no_myst_nb(name, *args, **kwargs):
        if name == "myst_nb":
            raise ImportError("simulating Colab")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_myst_nb)
    runtime.glue("answer", np.float32(0.5))
    assert capsys.readouterr().out.strip() == "answer = 0.5"
    figure = plt.figure()
    runtime.glue("figure", figure, display=False)
    assert not plt.fignum_exists(figure.number)


def test_plot_heatmap_rejects_non_matrices() -> None:
    figure, axes = plt.subplots()
    with pytest.raises(ValueError, match="2-D matrix"):
        runtime.plot_heatmap(axes, torch.zeros(2, 2, 2))
    plt.close(figure)


def test_diagram_arrow_writes_its_label_on_the_side_asked_for() -> None:
    fig, ax = plt.subplots()
    runtime.diagram_arrow(ax, (0.0, 0.0), (0.0, 2.0), "(n, d_k)", side="left")
    runtime.diagram_arrow(ax, (1.0, 0.0), (1.0, 2.0))  # no label: no text
    labels = [text for text in ax.texts if text.get_text()]
    assert [text.get_text() for text in labels] == ["(n, d_k)"]
    assert labels[0].get_position() == (-0.12, 1.0) and labels[0].get_horizontalalignment() == "right"
    with pytest.raises(ValueError, match="side must be 'right' or 'left'"):
        runtime.diagram_arrow(ax, (0.0, 0.0), (1.0, 1.0), "x", side="above")
    plt.close(fig)


def test_diagram_box_draws_one_box_per_copy_with_its_title_and_code() -> None:
    fig, ax = plt.subplots()
    runtime.diagram_box(ax, (2.0, 3.0), (2.0, 0.6), "SoftMax", "torch.softmax", "#FFF5B0", copies=2, dashed=True)
    assert len(ax.patches) == 3
    front = ax.patches[-1]  # drawn last, in front, at the centre given
    assert isinstance(front, FancyBboxPatch) and front.get_linestyle() == "--"
    assert np.allclose([front.get_x() + front.get_width() / 2, front.get_y() + front.get_height() / 2], [2.0, 3.0])
    assert [text.get_text() for text in ax.texts] == ["SoftMax", "torch.softmax"]
    with pytest.raises(ValueError, match="size must be positive"):
        runtime.diagram_box(ax, (0.0, 0.0), (0.0, 1.0), "a", "b", "white")
    with pytest.raises(ValueError, match="copies must be at least 0"):
        runtime.diagram_box(ax, (0.0, 0.0), (1.0, 1.0), "a", "b", "white", copies=-1)
    plt.close(fig)


def test_number_cells_draws_a_vector_as_one_row_and_colours_by_number() -> None:
    fig, ax = plt.subplots()
    runtime.number_cells(ax, torch.tensor([1.5, -2.0]), 0.0, 1.0, "#BBBBBB", fmt="{:.1f}")
    assert [text.get_text() for text in ax.texts] == ["1.5", "-2.0"]
    assert [text.get_position() for text in ax.texts] == [(0.5, 0.5), (1.5, 0.5)]
    runtime.number_cells(ax, [[0, 1], [2, 3]], 5.0, 0.0, lambda number: "red" if number % 2 else "blue")
    fills = [patch.get_facecolor()[:3] for patch in ax.patches[4::2]]  # the shaded cell of each pair
    assert fills == [(0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.0, 0.0, 1.0), (1.0, 0.0, 0.0)]
    with pytest.raises(ValueError, match="vector or a matrix, got shape"):
        runtime.number_cells(ax, np.zeros((2, 2, 2)), 0.0, 0.0, "white")
    with pytest.raises(ValueError, match="width must be positive"):
        runtime.number_cells(ax, [1.0], 0.0, 0.0, "white", width=0.0)
    plt.close(fig)


def test_glue_shows_tables_but_not_numbers_in_the_book_by_default(monkeypatch) -> None:
    import myst_nb

    shown = {}  # type: ignore[var-annotated]
    monkeypatch.setattr(myst_nb, "glue", lambda name, value, display: shown.__setitem__(name, display))
    runtime.glue("number", 1.5)
    runtime.glue("text", "cpu")
    runtime.glue("table", [[1, 2]])
    runtime.glue("forced", 2.0, display=True)
    assert shown == {"number": False, "text": False, "table": True, "forced": True}


def test_progress_draws_the_finished_bar_once_when_output_is_captured(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bar = runtime.progress(range(5), desc="training")
    for step in bar:
        bar.set_postfix(loss=1.0 / (step + 1), refresh=False)
    printed = capsys.readouterr().out
    assert printed.count("training") == 1, printed
    assert "5/5" in printed and "loss=0.2" in printed


def test_count_parameters_counts_a_shared_tensor_once() -> None:
    embedding, projection = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False)
    assert helpers.count_parameters(torch.nn.ModuleList([embedding, projection])) == 80
    projection.weight = embedding.weight  # tied: one (10, 4) matrix used twice
    assert helpers.count_parameters(torch.nn.ModuleList([embedding, projection])) == 40
    assert helpers.count_parameters(torch.nn.Linear(3, 4)) == 3 * 4 + 4


def test_book_seed_is_the_chapters_seed_in_the_books_own_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.SEED_VARIABLE, raising=False)
    assert runtime.book_seed(0) == 0 and runtime.book_seed(7) == 7
    monkeypatch.setenv(runtime.SEED_VARIABLE, "3")
    assert runtime.book_seed(0) == 3000 and runtime.book_seed(7) == 3007


def test_book_seed_moves_every_seed_of_a_chapter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.SEED_VARIABLE, "0")
    runtime.seed_everything(1)
    books_run = torch.rand(3)
    monkeypatch.setenv(runtime.SEED_VARIABLE, "2")
    runtime.seed_everything(1)
    assert not torch.equal(torch.rand(3), books_run)


@pytest.mark.parametrize("text", ["one", "1.5", "-1"])
def test_a_bad_book_seed_names_the_variable(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setenv(runtime.SEED_VARIABLE, text)
    with pytest.raises(ValueError, match="BOOK_SEED"):
        runtime.book_seed(0)


def test_check_passes_silently_inside_its_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.CLAIMS_LOG_VARIABLE, raising=False)
    runtime.check("exact match is high", 0.99, at_least=0.98)
    runtime.check("loss is near its floor", 0.54, at_least=0.53, at_most=0.55)
    runtime.check("the bounds are inclusive", 1.0, at_least=1.0, at_most=1.0)
    runtime.check("the outputs agree", True)
    runtime.check("a tensor holding one number is a number", torch.tensor(0.5), at_most=1)  # type: ignore[arg-type]


def test_a_failed_check_tells_the_reader_what_and_where(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(runtime.CLAIMS_LOG_VARIABLE, raising=False)
    monkeypatch.setenv(runtime.SEED_VARIABLE, "4")
    with pytest.raises(runtime.ClaimFailed) as failure:
        runtime.check("the model copies every held-out sequence", 0.946, at_least=1.0)
    message = str(failure.value)
    for needed in (
        "the model copies every held-out sequence",
        "0.946",
        "at least 1",
        "BOOK_SEED=4",
        "device cpu",
        "CPU threads",
        f"PyTorch {torch.__version__}",
        "another seed",
        "report",
    ):
        assert needed in message, f"{needed!r} missing from:\n{message}"
    with pytest.raises(runtime.ClaimFailed, match="found it false"):
        runtime.check("the outputs agree", False)
    with pytest.raises(runtime.ClaimFailed, match="at most 0.1"):
        runtime.check("spikes are rare", float("nan"), at_most=0.1)


def test_check_refuses_a_claim_it_cannot_judge() -> None:
    with pytest.raises(TypeError, match="at_least"):
        runtime.check("a number without bounds", 0.5)
    with pytest.raises(TypeError, match="bool takes no bounds"):
        runtime.check("a bool with bounds", True, at_least=0)
    with pytest.raises(ValueError, match="in words"):
        runtime.check("", True)


def test_check_records_every_claim_for_the_robustness_sweep(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import json

    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(runtime.CLAIMS_LOG_VARIABLE, str(log))
    # As in a kernel the sweep started: the sweep's process id is this process's parent.
    monkeypatch.setenv(runtime.SWEEP_PARENT_VARIABLE, str(os.getppid()))
    runtime.check("held", 0.99, at_least=0.98)
    runtime.check("failed, recorded and not raised", 0.5, at_least=0.98, at_most=1.0)
    runtime.check("a bool", False, family="a conclusion")
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert [record["passed"] for record in records] == [True, False, False]
    assert records[0]["margin"] == pytest.approx(0.01) and records[1]["margin"] == pytest.approx(-0.48)
    assert records[2]["margin"] is None and records[1]["at_most"] == 1.0
    assert [record["family"] for record in records] == [None, None, "a conclusion"]


def test_the_sweep_logs_the_wording_of_each_glued_sentence(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    import json

    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(runtime.CLAIMS_LOG_VARIABLE, str(log))
    monkeypatch.setenv(runtime.SWEEP_PARENT_VARIABLE, str(os.getppid()))
    runtime.glue("verdict", "The model beats the 5-gram by 0.12 nats, 12% of 1,024 tokens.", display=False)
    runtime.glue("a number", 0.5, display=False)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"glued": "verdict", "wording": "The model beats the #-gram by # nats, # of # tokens."}
    ]


def test_a_claims_log_outside_the_sweep_is_refused_rather_than_silencing_every_check(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    log = tmp_path / "claims.jsonl"
    monkeypatch.setenv(runtime.CLAIMS_LOG_VARIABLE, str(log))
    monkeypatch.delenv(runtime.SWEEP_PARENT_VARIABLE, raising=False)
    with pytest.raises(RuntimeError, match="Only make robustness"):
        runtime.check("a claim that fails", 0.5, at_least=0.98)
    with pytest.raises(RuntimeError, match="Only make robustness"):
        runtime.check("a claim that holds", True)
    # A sweep's variables copied into another process (this one's parent is not the sweep) are refused too.
    monkeypatch.setenv(runtime.SWEEP_PARENT_VARIABLE, str(os.getpid()))
    with pytest.raises(RuntimeError, match="Only make robustness"):
        runtime.check("a claim that fails", 0.5, at_least=0.98)
    assert not log.exists()


def test_the_sweep_names_itself_as_its_kernels_parent() -> None:
    import robustness

    variables = robustness.sweep_variables(seed=3, threads=2, log=Path("claims.jsonl"))
    assert variables[runtime.SWEEP_PARENT_VARIABLE] == str(os.getpid())
    assert variables[runtime.CLAIMS_LOG_VARIABLE] == "claims.jsonl" and variables[runtime.SEED_VARIABLE] == "3"


@pytest.mark.parametrize("bound", [float("nan"), float("inf"), -float("inf")])
def test_a_bound_that_nothing_could_fail_is_refused(monkeypatch: pytest.MonkeyPatch, bound: float) -> None:
    monkeypatch.delenv(runtime.CLAIMS_LOG_VARIABLE, raising=False)
    with pytest.raises(ValueError, match="not a finite bound"):
        runtime.check("x", 5, at_most=bound)
    with pytest.raises(ValueError, match="not a finite bound"):
        runtime.check("x", 5, at_least=bound)


def test_importing_the_package_and_its_models_loads_no_plotting() -> None:
    # A reader who imports a model (or a program that serves one) should not pay for matplotlib.
    modules = sorted(
        path.stem for path in Path(transformer_book.__file__).parent.glob("*.py") if path.stem != "__init__"
    )
    code = (
        "import sys, importlib, transformer_book\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('transformer_book.' + name)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"importing transformer_book's modules loaded {loaded}"


@pytest.mark.parametrize(("facade", "at_least"), [("models", 40), ("utils", 10)])
def test_the_facades_name_the_chapters_own_objects(facade: str, at_least: int) -> None:
    # A façade re-exports, it does not redefine: each name is the object its chapter's module holds.
    import importlib

    module = importlib.import_module(f"transformer_book.{facade}")
    assert len(module.__all__) == len(set(module.__all__)) >= at_least
    for name in module.__all__:
        obj = getattr(module, name)
        home = getattr(obj, "__module__", None)
        if home is not None and home.startswith("transformer_book."):
            assert getattr(importlib.import_module(home), name) is obj, f"{facade}.{name} is not {home}.{name}"
        assert home != module.__name__, f"{facade}.{name} is defined in the façade, not in a chapter"
    assert importlib.import_module("transformer_book.models").generate.__module__ == "transformer_book.decoding"


def test_seconds_per_call_times_the_calls_after_two_warm_ups() -> None:
    calls: list[None] = []
    seconds = seconds_per_call(lambda: calls.append(time.sleep(0.01)), calls=3)  # type: ignore[func-returns-value]
    assert len(calls) == 2 + 3
    assert seconds >= 0.01  # a lower bound only: sleeping can take longer, never less
    with pytest.raises(ValueError, match="calls must be a positive integer, got calls=0"):
        seconds_per_call(lambda: None, calls=0)
    with pytest.raises(ValueError, match="warmup must be at least 0"):
        seconds_per_call(lambda: None, warmup=-1)
    with pytest.raises(ValueError, match="min_seconds"):
        seconds_per_call(lambda: None, min_seconds=float("nan"))


def test_seconds_per_call_gives_the_median_and_times_until_min_seconds() -> None:
    durations = iter([0.0, 0.03, 0.001, 0.002] + [0.0] * 100)
    calls: list[float] = []

    def run() -> None:
        duration = next(durations)
        calls.append(duration)
        time.sleep(duration)

    # no warm-up; three calls of 0, 30 and 1 ms: the median is the 1 ms call's, not the mean's 10 ms
    assert seconds_per_call(run, calls=3, warmup=0) < 0.01
    assert len(calls) == 3
    # calls of about 1 ms go on until they add up to 5 ms
    short_calls: list[None] = []
    seconds_per_call(lambda: short_calls.append(time.sleep(0.001)), calls=1, warmup=0, min_seconds=0.005)  # type: ignore[func-returns-value]
    assert len(short_calls) >= 5


def test_seconds_per_call_runs_on_the_threads_it_is_given_and_restores_them() -> None:
    before = torch.get_num_threads()
    seen: list[int] = []
    seconds_per_call(lambda: seen.append(torch.get_num_threads()), calls=2, warmup=1, threads=1)
    assert seen == [1, 1, 1] and torch.get_num_threads() == before
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        seconds_per_call(lambda: None, threads=0)
    assert torch.get_num_threads() == before


def test_nudge_parameters_moves_every_parameter_and_draws_from_the_global_generator() -> None:
    layer = torch.nn.LayerNorm(4)  # weight all ones, bias all zeros
    torch.manual_seed(0)
    assert helpers.nudge_parameters(layer, 0.1) is layer
    torch.manual_seed(0)
    expected_weight, expected_bias = 1 + 0.1 * torch.randn(4), 0.1 * torch.randn(4)
    assert torch.equal(layer.weight.detach(), expected_weight) and torch.equal(layer.bias.detach(), expected_bias)
    assert layer.weight.grad is None  # no graph was recorded


@pytest.mark.parametrize("scale", [0.0, -0.1, float("nan"), float("inf"), "0.1"])
def test_nudge_parameters_refuses_a_scale_that_is_not_positive_and_finite(scale: object) -> None:
    with pytest.raises(ValueError, match="scale must be a positive finite number"):
        helpers.nudge_parameters(torch.nn.Linear(2, 2), scale)  # type: ignore[arg-type]


def test_nudge_parameters_refuses_what_is_not_a_module() -> None:
    with pytest.raises(TypeError, match="needs a torch.nn.Module, got Tensor"):
        helpers.nudge_parameters(torch.zeros(2), 0.1)  # type: ignore[arg-type]


def test_show_refusal_prints_the_wrapped_message_and_insists_on_a_value_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def refuse() -> None:
        raise ValueError("word " * 40)

    message = runtime.show_refusal(refuse, label="forty words", width=40)
    assert message == "word " * 40
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("forty words: ValueError: word") and len(lines) > 3
    assert all(len(line) <= 40 for line in lines)
    assert " ".join(line.strip() for line in lines) == "forty words: ValueError: " + ("word " * 40).strip()
    with pytest.raises(AssertionError, match="the call raised no ValueError, but the text shows it refused"):
        runtime.show_refusal(lambda: None)

    def breaks() -> None:
        raise TypeError("not a ValueError")

    with pytest.raises(TypeError, match="not a ValueError"):
        runtime.show_refusal(breaks)  # only a refusal is shown; any other error is a bug and propagates
