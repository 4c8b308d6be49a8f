"""Unit tests for transformer_book.data (exported from book/batching.md)."""

from __future__ import annotations

import random

import pytest
import torch

from transformer_book.data import (
    COPY_SYMBOLS,
    COPY_VOCAB_SIZE,
    END_ID,
    PAD_ID,
    START_ID,
    LabelledBatch,
    make_batch,
    pad_sequences,
    random_copy_sequence,
    shuffled_batches,
)
from transformer_book.model import causal_mask

SOURCES = [[3, 4, 5, 6], [7, 8], [5]]


# --- pad_sequences and make_batch --------------------------------------------------------------


def test_pad_sequences_pads_at_the_end_and_returns_the_lengths() -> None:
    ids, lengths = pad_sequences(SOURCES)
    assert ids.tolist() == [[3, 4, 5, 6], [7, 8, 0, 0], [5, 0, 0, 0]]
    assert lengths.tolist() == [4, 2, 1] and ids.dtype == lengths.dtype == torch.long
    # A negative pad_id pads labels with an index the loss ignores: allowed, and documented as such.
    assert pad_sequences(SOURCES, pad_id=-100)[0][2].tolist() == [5, -100, -100, -100]


@pytest.mark.parametrize("pad_id", [True, 0.5, "0"])
def test_pad_sequences_refuses_a_pad_id_that_is_not_an_integer(pad_id) -> None:
    with pytest.raises(ValueError, match=f"pad_id must be an integer, got pad_id={pad_id!r}"):
        pad_sequences(SOURCES, pad_id=pad_id)


def test_pad_sequences_rejects_no_sequences_and_empty_ones() -> None:
    with pytest.raises(ValueError, match="a batch needs at least one sequence, got none"):
        pad_sequences([])
    with pytest.raises(ValueError, match="sequence 1 of the batch is empty"):
        pad_sequences([[3], [], [4]])


def test_make_batch_shapes_and_teacher_forcing() -> None:
    batch = make_batch(SOURCES, [[4, 3], [8, 7, 6], [5]])
    assert batch.source.shape == (3, 4) and batch.source_mask.shape == (3, 1, 4)
    assert batch.target_input.tolist() == [[START_ID, 4, 3, PAD_ID], [START_ID, 8, 7, 6], [START_ID, 5, PAD_ID, PAD_ID]]
    assert batch.target_output.tolist() == [[4, 3, END_ID, PAD_ID], [8, 7, 6, END_ID], [5, END_ID, PAD_ID, PAD_ID]]
    assert batch.target_mask.shape == (3, 4, 4)
    assert batch.num_target_tokens == 3 + 4 + 2 == int((batch.target_output != PAD_ID).sum())


def test_make_batch_masks_hide_padding_and_the_future() -> None:
    batch = make_batch(SOURCES, SOURCES)
    assert batch.source_mask[:, 0].tolist() == [[True] * 4, [True, True, False, False], [True, False, False, False]]
    target_lengths = [5, 3, 2]
    for row, length in enumerate(target_lengths):
        mask = batch.target_mask[row]
        assert not mask.triu(diagonal=1).any()  # causal: no query sees a later key
        assert not mask[:, length:].any()  # no query sees padding
        assert torch.equal(mask[:length, :length], causal_mask(length))
        assert mask.any(dim=-1).all()  # no row is fully masked
    assert batch.source_mask.dtype == batch.target_mask.dtype == torch.bool


def test_make_batch_rejects_mismatched_lists() -> None:
    with pytest.raises(ValueError, match="every source needs a target, got 3 sources and 2 targets"):
        make_batch(SOURCES, SOURCES[:2])
    with pytest.raises(ValueError, match="a batch needs at least one sequence"):
        make_batch([], [])


def test_make_batch_counts_the_tokens_the_loss_is_taken_over() -> None:
    # The loss skips PAD_ID wherever it stands; a PAD_ID inside a target must not be counted either,
    # or the loss per token would be divided by too many tokens.
    batch = make_batch(SOURCES[:2], [[3, 4], [5, PAD_ID, 6]])
    assert batch.num_target_tokens == int((batch.target_output != PAD_ID).sum()) == 6


@pytest.mark.parametrize(("sequence", "problem"), [([3, 1.5], "integer"), ([3, -1], "negative")])
def test_pad_sequences_refuses_ids_that_are_not_token_ids(sequence: list[float], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        pad_sequences([[3, 4], sequence])  # type: ignore[list-item]


def test_random_copy_sequence_draws_copy_symbols_of_the_asked_lengths() -> None:
    generator = torch.Generator().manual_seed(0)
    sequences = [random_copy_sequence(generator, 2, 4) for _ in range(200)]
    assert {len(sequence) for sequence in sequences} == {2, 3, 4}
    assert {token for sequence in sequences for token in sequence} == set(COPY_SYMBOLS)
    assert COPY_VOCAB_SIZE == 13 and min(COPY_SYMBOLS) == END_ID + 1


def test_labelled_batch_passes_its_inputs_by_name_and_counts_its_targets() -> None:
    images, labels = torch.zeros(5, 1, 8, 8), torch.tensor([3, 1, 4, 1, 5])
    batch = LabelledBatch({"images": images}, labels)
    assert batch.model_inputs() == {"images": images} and batch.target_output is labels
    assert batch.num_target_tokens == 5 and LabelledBatch.ignore_index == -100


def test_shuffled_batches_deal_every_pass_in_a_new_order_and_drop_the_short_batch() -> None:
    deal = shuffled_batches(7, 3, seed=5)
    passes = [[next(deal) for _ in range(2)] for _ in range(3)]  # 7 // 3 = 2 full batches a pass
    for batches in passes:
        indices = [index for batch in batches for index in batch]
        assert all(len(batch) == 3 for batch in batches) and len(set(indices)) == 6 and set(indices) <= set(range(7))
    assert passes[0] != passes[1], "a new order every pass"
    again = shuffled_batches(7, 3, seed=5)
    assert [next(again) for _ in range(6)] == [batch for batches in passes for batch in batches], "seeded"


def test_shuffled_batches_equal_the_loop_the_chapters_wrote_before() -> None:
    """translation, instruction-tuning and preference-tuning each shuffled a list of indices with
    random.Random(seed) every pass; the shared deal draws the same batches, so their runs are unchanged."""
    rng, order = random.Random(11), list(range(10))
    expected: list[list[int]] = []
    while len(expected) < 9:
        rng.shuffle(order)
        expected += [order[start : start + 4] for start in range(0, 10 - 4 + 1, 4)]
    deal = shuffled_batches(10, 4, seed=11)
    assert [next(deal) for _ in range(len(expected))] == expected


@pytest.mark.parametrize(
    ("batch_size", "message"), [(0, "positive integer"), (8, "batch_size=8 is more than the 7 rows")]
)
def test_shuffled_batches_refuse_a_batch_size_that_does_not_fit(batch_size: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        next(shuffled_batches(7, batch_size, seed=0, what="rows"))
