"""Unit tests for the loss scaler and the training-memory count of the precision-and-memory chapter."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from transformer_book.model import TransformerConfig, make_transformer
from transformer_book.precision_and_memory import DynamicLossScaler, model_state_bytes


def test_scaler_backs_off_and_skips_on_overflow_then_grows_after_the_interval() -> None:
    scaler = DynamicLossScaler(init_scale=8.0, growth_interval=2)
    assert scaler.update(finite=False) is False and scaler.scale == 4.0
    assert scaler.update(finite=True) and scaler.scale == 4.0
    assert scaler.update(finite=True) and scaler.scale == 8.0
    assert scaler.update(finite=True) and scaler.scale == 8.0  # the count restarted after growing


def test_scaler_matches_gradscaler_on_planted_overflows() -> None:
    bad = {1, 5, 6}
    ours = DynamicLossScaler(init_scale=64.0, growth_interval=2)
    theirs = torch.amp.GradScaler("cpu", init_scale=64.0, growth_interval=2)
    weight = nn.Parameter(torch.ones(3))
    optimizer = torch.optim.SGD([weight], lr=0.1)
    for step in range(9):
        optimizer.zero_grad()
        theirs.scale((weight**2).sum()).backward()
        if step in bad:
            weight.grad[1] = math.nan  # type: ignore[index]
        theirs.step(optimizer)
        theirs.update()
        ours.update(finite=step not in bad)
        assert ours.scale == theirs.get_scale()


def test_unscale_divides_gradients_and_reports_non_finite() -> None:
    scaler = DynamicLossScaler(init_scale=4.0)
    weight = nn.Parameter(torch.ones(2))
    scaler.scale_loss((3 * weight).sum()).backward()
    assert scaler.unscale_([weight]) and torch.equal(weight.grad, torch.full((2,), 3.0))  # type: ignore[arg-type]
    weight.grad[0] = math.inf  # type: ignore[index]
    assert not scaler.unscale_([weight])


@pytest.mark.parametrize(
    "settings",
    [
        dict(init_scale=0.0),
        dict(growth_factor=1.0),
        dict(backoff_factor=1.0),
        dict(backoff_factor=0.0),
        dict(growth_interval=0),
    ],
)
def test_scaler_refuses_bad_settings(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        DynamicLossScaler(**settings)  # type: ignore[arg-type]


def test_model_state_counts_tied_weights_once_and_four_bytes_each() -> None:
    model = make_transformer(
        50, 50, TransformerConfig(d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.1), pad_id=0
    )
    parameters = sum(p.numel() for p in model.parameters())
    state = model_state_bytes(model)
    assert state == {"weights": 4 * parameters, "gradients": 4 * parameters, "optimizer state": 8 * parameters}
    assert model_state_bytes(model.half(), optimizer_moments=0)["optimizer state"] == 0
    assert model_state_bytes(model)["weights"] == 2 * parameters


def test_model_state_ignores_frozen_parameters_for_gradients_and_refuses_bad_moments() -> None:
    model = nn.Linear(4, 3)
    model.bias.requires_grad_(False)
    assert model_state_bytes(model) == {"weights": 60, "gradients": 48, "optimizer state": 96}
    for bad, message in [(-1, "at least 0"), (1.5, "an integer"), (True, "an integer")]:
        with pytest.raises(ValueError, match=f"optimizer_moments must be {message}, got optimizer_moments={bad}"):
            model_state_bytes(model, optimizer_moments=bad)  # type: ignore[arg-type]
    # Once refused by an ad-hoc isinstance(optimizer_moments, int) check; the counts stay Python ints.
    state = model_state_bytes(model, optimizer_moments=np.int64(1))  # type: ignore[arg-type]
    assert state["optimizer state"] == 48 and type(state["optimizer state"]) is int


def test_the_chapter_measures_the_same_model_on_every_device() -> None:
    from pathlib import Path

    chapter = (Path(__file__).resolve().parents[1] / "book" / "precision-and-memory.md").read_text()
    assert "by_device(" not in chapter  # model and training settings are the same on every device
