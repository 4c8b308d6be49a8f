"""Unit tests for transformer_book.training (exported from book/learning-rate.md)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_book.training import make_optimizer, transformer_learning_rate

# --- the learning-rate schedule and the optimizer ----------------------------------------------


def test_schedule_peaks_at_warmup_with_the_papers_value() -> None:
    rates = [transformer_learning_rate(step, 512, 4000) for step in range(1, 12_001)]
    assert rates.index(max(rates)) + 1 == 4000
    assert max(rates) == pytest.approx(6.987e-4, abs=1e-7)
    assert max(rates) == pytest.approx((512 * 4000) ** -0.5, rel=1e-12)


def test_schedule_is_linear_then_inverse_square_root() -> None:
    first = transformer_learning_rate(1, 512, 4000)
    assert first == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-12)
    assert transformer_learning_rate(1000, 512, 4000) == pytest.approx(1000 * first, rel=1e-12)
    assert transformer_learning_rate(16_000, 512, 4000) == pytest.approx(transformer_learning_rate(4000, 512, 4000) / 2)
    assert transformer_learning_rate(100, 64, 10, factor=0.5) == pytest.approx(
        0.5 * transformer_learning_rate(100, 64, 10)
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"step": 0}, "step must be a positive integer, got step=0"),
        ({"step": 2.0}, "step must be a positive integer, got step=2.0"),
        ({"step": True}, "step must be a positive integer, got step=True"),
        ({"d_model": 0}, "d_model must be a positive integer, got d_model=0"),
        ({"warmup": -5}, "warmup must be a positive integer, got warmup=-5"),
        ({"factor": 0.0}, "factor must be positive, got factor=0.0"),
        ({"factor": float("nan")}, "factor must be positive, got factor=nan"),
    ],
)
def test_schedule_rejects_bad_arguments(arguments: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        transformer_learning_rate(**{"step": 10, "d_model": 512, "warmup": 4000, **arguments})  # type: ignore[arg-type]


def test_make_optimizer_is_adam_with_the_papers_settings_following_the_schedule() -> None:
    model = nn.Linear(3, 3)
    optimizer, scheduler = make_optimizer(model, d_model=64, warmup=10, factor=2.0)
    assert isinstance(optimizer, torch.optim.Adam)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    for step in range(1, 25):
        assert optimizer.param_groups[0]["lr"] == pytest.approx(transformer_learning_rate(step, 64, 10, 2.0), rel=1e-12)
        optimizer.step()
        scheduler.step()
