"""Unit tests for transformer_book.training (exported from book/label-smoothing.md)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_book.data import PAD_ID, make_batch
from transformer_book.training import LabelSmoothingLoss, smoothed_loss_floor, smoothed_targets

VOCAB = 9  # PAD, START, END and the symbols 3..8
SOURCES = [[3, 4, 5, 6], [7, 8], [5]]


# --- label smoothing ---------------------------------------------------------------------------


def test_smoothed_targets_follow_the_formula_and_sum_to_one() -> None:
    targets = torch.tensor([[2, 0, 5], [1, 1, 3]])
    smoothed = smoothed_targets(targets, vocab_size=6, smoothing=0.1)
    assert smoothed.shape == (2, 3, 6)
    expected = 0.9 * F.one_hot(targets, 6).float() + 0.1 / 6
    assert torch.allclose(smoothed, expected) and torch.allclose(smoothed.sum(-1), torch.ones(2, 3))
    assert smoothed_targets(torch.tensor(2), 4, 0.1).tolist() == pytest.approx([0.025, 0.025, 0.925, 0.025])
    assert torch.equal(smoothed_targets(targets, 6, 0.0), F.one_hot(targets, 6).float())


def test_smoothed_targets_reject_bad_smoothing_and_ids() -> None:
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\), got smoothing=1.0"):
        smoothed_targets(torch.tensor([1]), 4, 1.0)
    with pytest.raises(ValueError, match=r"targets must be token ids in \[0, 4\), got ids from 0 to 4"):
        smoothed_targets(torch.tensor([0, 4]), 4, 0.1)
    with pytest.raises(ValueError, match=r"got ids from -1 to 2"):
        smoothed_targets(torch.tensor([-1, 2]), 4, 0.1)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.3])
def test_label_smoothing_loss_equals_pytorch_cross_entropy_with_padding(smoothing: float) -> None:
    generator = torch.Generator().manual_seed(0)
    targets = make_batch(SOURCES, SOURCES).target_output  # (3, 5) with padding
    logits = torch.randn(*targets.shape, VOCAB, generator=generator) * 3
    ours = LabelSmoothingLoss(smoothing)(logits, targets)
    theirs = F.cross_entropy(
        logits.reshape(-1, VOCAB), targets.reshape(-1), ignore_index=PAD_ID, label_smoothing=smoothing
    )
    assert ours.item() == pytest.approx(theirs.item(), abs=1e-6)
    changed = logits.clone()
    changed[targets == PAD_ID] = 50.0  # padding positions do not count
    assert torch.equal(LabelSmoothingLoss(smoothing)(changed, targets), ours)


def test_label_smoothing_loss_minimum_is_the_entropy_of_the_smoothed_target() -> None:
    targets = torch.tensor([[3, 4, 5]])
    smoothed = smoothed_targets(targets, VOCAB, 0.1)
    entropy = -(smoothed[0, 0] * smoothed[0, 0].log()).sum()
    at_minimum = LabelSmoothingLoss(0.1)(smoothed.log(), targets)
    assert at_minimum.item() == pytest.approx(entropy.item(), abs=1e-6) and entropy.item() > 0.3
    confident = LabelSmoothingLoss(0.1)(20 * F.one_hot(targets, VOCAB).float(), targets)
    assert confident.item() > at_minimum.item() + 1.0


def test_label_smoothing_loss_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match=r"smoothing must be in \[0, 1\), got smoothing=-0.1"):
        LabelSmoothingLoss(-0.1)
    with pytest.raises(ValueError, match=r"logits \(2, 3, 9\) must be targets \(2, 4\) plus a vocabulary dimension"):
        LabelSmoothingLoss()(torch.zeros(2, 3, VOCAB), torch.ones(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="every target is padding"):
        LabelSmoothingLoss()(torch.zeros(2, 3, VOCAB), torch.zeros(2, 3, dtype=torch.long))


@pytest.mark.parametrize("vocab_size", [2, 13, 1000])
def test_smoothed_loss_floor_is_the_entropy_and_the_lowest_loss(vocab_size: int) -> None:
    a, b = 0.9 + 0.1 / vocab_size, 0.1 / vocab_size
    assert smoothed_loss_floor(vocab_size, 0.1) == pytest.approx(-a * math.log(a) - (vocab_size - 1) * b * math.log(b))
    target = torch.tensor([1])
    best = LabelSmoothingLoss(0.1)(smoothed_targets(target, vocab_size, 0.1).log(), target)
    assert best.item() == pytest.approx(smoothed_loss_floor(vocab_size, 0.1), abs=1e-5)
    assert smoothed_loss_floor(vocab_size, 0.0) == 0.0
