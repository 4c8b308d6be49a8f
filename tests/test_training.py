"""Unit tests for transformer_book.training (exported from book/training.md)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer_book.checks import check_decoding_inputs
from transformer_book.data import (
    END_ID,
    PAD_ID,
    START_ID,
    Batch,
    LabelledBatch,
    LanguageModelBatch,
    make_batch,
    random_windows,
)
from transformer_book.model import DecoderOnlyTransformer, Transformer, TransformerConfig, causal_mask, make_transformer
from transformer_book.training import (
    LabelSmoothingLoss,
    TrainingHistory,
    average_weights,
    exact_match,
    greedy_decode,
    load_checkpoint,
    make_optimizer,
    save_checkpoint,
    strip_after_end,
    train,
    transformer_learning_rate,
    weights_of,
    with_checkpoints,
)

VOCAB = 9  # PAD, START, END and the symbols 3..8
SOURCES = [[3, 4, 5, 6], [7, 8], [5]]


def tiny_model(seed: int = 0) -> Transformer:
    torch.manual_seed(seed)
    return make_transformer(
        VOCAB, VOCAB, TransformerConfig(d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0), pad_id=PAD_ID
    )


def copy_batches(seed: int = 0, batch_size: int = 16) -> Iterator[Batch]:
    """An endless stream of copy batches of 1 to 5 symbols."""
    generator = torch.Generator().manual_seed(seed)
    while True:
        lengths = torch.randint(1, 6, (batch_size,), generator=generator).tolist()
        sequences = [torch.randint(3, VOCAB, (length,), generator=generator).tolist() for length in lengths]
        yield make_batch(sequences, sequences)


# --- the training loop -------------------------------------------------------------------------


def test_train_lowers_the_loss_and_records_the_schedule() -> None:
    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=10, factor=0.5)
    batches = [next(copy_batches())] * 60  # one batch, learned by heart
    history = train(model, batches, steps=60, optimizer=optimizer, scheduler=scheduler)
    assert isinstance(history, TrainingHistory) and not history.interrupted
    assert len(history.losses) == len(history.learning_rates) == 60
    assert sum(history.losses[-10:]) / 10 < 0.5 * sum(history.losses[:10]) / 10
    assert history.learning_rates == pytest.approx([transformer_learning_rate(s, 16, 10, 0.5) for s in range(1, 61)])
    assert history.target_tokens == sum(batch.num_target_tokens for batch in batches)
    assert history.seconds > 0 and history.tokens_per_second == pytest.approx(history.target_tokens / history.seconds)


def test_train_stops_cleanly_on_keyboard_interrupt() -> None:
    def interrupted_after(count: int) -> Iterator[Batch]:
        yield from itertools.islice(copy_batches(), count)
        raise KeyboardInterrupt

    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=10)
    history = train(model, interrupted_after(7), steps=50, optimizer=optimizer, scheduler=scheduler)
    assert history.interrupted and len(history.losses) == 7 and scheduler.last_epoch == 7
    batch = next(copy_batches(seed=1))
    logits = model(**batch.model_inputs())  # still usable
    assert torch.isfinite(logits).all()


def test_train_raises_when_the_batches_run_out_and_for_bad_steps() -> None:
    model = tiny_model()
    optimizer, _ = make_optimizer(model, d_model=16, warmup=10)
    with pytest.raises(ValueError, match="the batches ran out after 3 of 5 steps"):
        train(model, list(itertools.islice(copy_batches(), 3)), steps=5, optimizer=optimizer)
    for steps in [0, -1, 2.5, True]:
        with pytest.raises(ValueError, match=f"steps must be a positive integer, got steps={steps!r}"):
            train(model, copy_batches(), steps=steps, optimizer=optimizer)  # type: ignore[arg-type]


def test_the_callback_runs_after_every_step_with_the_history_so_far() -> None:
    model = tiny_model()
    optimizer, _ = make_optimizer(model, d_model=16, warmup=10)
    seen: list[tuple[int, int, bool]] = []

    def callback(step: int, history: TrainingHistory) -> None:
        seen.append((step, len(history.losses), model.training))
        model.eval()  # an evaluation that forgets to switch back must not turn dropout off for good

    train(model, copy_batches(), steps=4, optimizer=optimizer, callback=callback)
    assert seen == [(1, 1, True), (2, 2, True), (3, 3, True), (4, 4, True)]


def test_train_takes_any_model_through_a_labelled_batch(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    classifier = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    inputs = torch.randn(48, 4)
    labels = inputs[:, :3].argmax(dim=1)  # learnable: which of the first three features is largest
    batches = [LabelledBatch({"input": inputs}, labels)] * 150
    optimizer = torch.optim.Adam(classifier.parameters(), lr=1e-2)
    history = train(classifier, batches, steps=150, optimizer=optimizer, loss_function=nn.CrossEntropyLoss(), desc=None)
    assert history.target_tokens == 150 * 48  # one target per example
    assert history.losses[-1] < 0.3 * history.losses[0]
    assert capsys.readouterr().out == ""  # desc=None: no bar


def test_tokens_per_second_is_zero_before_any_time_has_passed() -> None:
    assert TrainingHistory().tokens_per_second == 0.0


def test_train_records_the_gradient_norm_and_does_not_clip_by_default() -> None:
    batches = list(itertools.islice(copy_batches(), 5))
    model, reference = tiny_model(), tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    history = train(model, batches, steps=5, optimizer=optimizer)
    assert len(history.gradient_norms) == 5 and all(math.isfinite(n) and n > 0 for n in history.gradient_norms)
    # The same steps by hand, without clipping: the same weights, and the same first norm.
    reference_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    for step, batch in enumerate(batches):
        logits = reference(**batch.model_inputs())
        loss = LabelSmoothingLoss(0.0)(logits, batch.target_output)  # the default: no smoothing
        reference_optimizer.zero_grad()
        loss.backward()
        if step == 0:
            norm = torch.cat([p.grad.flatten() for p in reference.parameters()]).norm().item()  # type: ignore[union-attr]
            assert history.gradient_norms[0] == pytest.approx(norm, rel=1e-5)
        reference_optimizer.step()
    for name, tensor in reference.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name


def test_train_clips_the_gradient_norm_when_asked() -> None:
    batch = next(copy_batches())
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)  # the step is minus the clipped gradient
    history = train(model, [batch], steps=1, optimizer=optimizer, clip_norm=0.01)
    assert history.gradient_norms[0] > 0.01  # the norm before clipping is recorded
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)])
    assert step.norm().item() == pytest.approx(0.01, rel=1e-4)
    # A threshold above the norm changes nothing.
    unclipped, clipped_loosely = tiny_model(), tiny_model()
    train(unclipped, [batch], steps=1, optimizer=torch.optim.SGD(unclipped.parameters(), lr=1.0))
    train(
        clipped_loosely,
        [batch],
        steps=1,
        optimizer=torch.optim.SGD(clipped_loosely.parameters(), lr=1.0),
        clip_norm=1e6,
    )
    for name, tensor in unclipped.state_dict().items():
        assert torch.allclose(tensor, clipped_loosely.state_dict()[name], rtol=0, atol=1e-7), name


@pytest.mark.parametrize("clip_norm", [0, -1.0, float("nan")])
def test_train_rejects_a_clip_norm_that_is_not_positive(clip_norm: float) -> None:
    model = tiny_model()
    optimizer, _ = make_optimizer(model, d_model=16, warmup=10)
    with pytest.raises(ValueError, match="clip_norm must be positive"):
        train(model, copy_batches(), steps=1, optimizer=optimizer, clip_norm=clip_norm)


# --- checkpoint averaging ----------------------------------------------------------------------


def test_weights_of_is_a_copy_that_later_steps_leave_alone() -> None:
    model = tiny_model()
    copy = weights_of(model)
    with torch.no_grad():
        model.generator.projection.weight.add_(1.0)
    assert not torch.equal(copy["generator.projection.weight"], model.generator.projection.weight)
    assert copy.keys() == model.state_dict().keys()


def test_with_checkpoints_copies_the_weights_every_few_steps() -> None:
    batches = list(itertools.islice(copy_batches(), 7))
    model = tiny_model()
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=4)
    store: list[dict[str, Tensor]] = []
    train(
        model,
        with_checkpoints(batches, model, every=3, store=store),
        steps=7,
        optimizer=optimizer,
        scheduler=scheduler,
    )
    assert len(store) == 2  # after steps 3 and 6
    # The copy after step 3 is the model trained on the first three batches alone.
    again = tiny_model()
    optimizer, scheduler = make_optimizer(again, d_model=16, warmup=4)
    train(again, batches[:3], steps=3, optimizer=optimizer, scheduler=scheduler)
    for name, tensor in again.state_dict().items():
        assert torch.allclose(tensor, store[0][name], rtol=0, atol=1e-7), name


def test_average_weights_is_the_element_wise_mean() -> None:
    first, second = tiny_model(seed=0).state_dict(), tiny_model(seed=1).state_dict()
    average = average_weights([first, second])
    for name in first:
        assert torch.allclose(average[name], (first[name] + second[name]) / 2), name
    assert average_weights([first])["generator.projection.weight"].equal(first["generator.projection.weight"])
    with pytest.raises(ValueError, match="average_weights needs at least one checkpoint, got none"):
        average_weights([])


# --- checkpoints -------------------------------------------------------------------------------


def test_checkpoint_round_trip_restores_model_optimizer_and_schedule(tmp_path: Path) -> None:
    model = tiny_model(seed=0)
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=10)
    train(model, itertools.islice(copy_batches(), 6), steps=6, optimizer=optimizer, scheduler=scheduler)
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, model, optimizer, scheduler, step=6)

    fresh = tiny_model(seed=1)
    fresh_optimizer, fresh_scheduler = make_optimizer(fresh, d_model=16, warmup=10)
    assert load_checkpoint(path, fresh, fresh_optimizer, fresh_scheduler) == 6
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, fresh.state_dict()[name]), name
    original_state, restored_state = optimizer.state_dict()["state"], fresh_optimizer.state_dict()["state"]
    assert original_state.keys() == restored_state.keys()
    for key in original_state:
        for moment in ["exp_avg", "exp_avg_sq", "step"]:
            assert torch.equal(original_state[key][moment], restored_state[key][moment])
    assert fresh_scheduler.last_epoch == 6
    assert fresh_optimizer.param_groups[0]["lr"] == pytest.approx(transformer_learning_rate(7, 16, 10))


def test_resuming_from_a_checkpoint_equals_training_without_a_break(tmp_path: Path) -> None:
    batches = list(itertools.islice(copy_batches(), 8))
    straight = tiny_model()
    optimizer, scheduler = make_optimizer(straight, d_model=16, warmup=4)
    train(straight, batches, steps=8, optimizer=optimizer, scheduler=scheduler)

    first_half = tiny_model()
    optimizer, scheduler = make_optimizer(first_half, d_model=16, warmup=4)
    train(first_half, batches[:4], steps=4, optimizer=optimizer, scheduler=scheduler)
    save_checkpoint(tmp_path / "half.pt", first_half, optimizer, scheduler, step=4)
    resumed = tiny_model(seed=5)
    optimizer, scheduler = make_optimizer(resumed, d_model=16, warmup=4)
    load_checkpoint(tmp_path / "half.pt", resumed, optimizer, scheduler)
    train(resumed, batches[4:], steps=4, optimizer=optimizer, scheduler=scheduler)
    for name, tensor in straight.state_dict().items():
        assert torch.allclose(tensor, resumed.state_dict()[name], atol=1e-6), name


def test_load_checkpoint_refuses_missing_optimizer_or_scheduler_state(tmp_path: Path) -> None:
    model = tiny_model()
    save_checkpoint(tmp_path / "weights.pt", model)
    optimizer, scheduler = make_optimizer(model, d_model=16, warmup=10)
    assert load_checkpoint(tmp_path / "weights.pt", tiny_model(seed=3)) == 0
    with pytest.raises(ValueError, match="holds no optimizer state"):
        load_checkpoint(tmp_path / "weights.pt", model, optimizer)
    with pytest.raises(ValueError, match="holds no scheduler state"):
        load_checkpoint(tmp_path / "weights.pt", model, scheduler=scheduler)


def test_load_checkpoint_refuses_a_file_save_checkpoint_did_not_write(tmp_path: Path) -> None:
    torch.save(tiny_model().state_dict(), tmp_path / "bare.pt")  # weights alone, as torch.save writes them
    with pytest.raises(ValueError, match="not written by save_checkpoint"):
        load_checkpoint(tmp_path / "bare.pt", tiny_model())


def test_load_checkpoint_into_a_model_of_another_size_names_the_mismatch(tmp_path: Path) -> None:
    save_checkpoint(tmp_path / "small.pt", tiny_model())
    wider = make_transformer(
        VOCAB, VOCAB, TransformerConfig(d_model=32, num_heads=2, num_layers=1, d_ff=64, dropout=0.0), pad_id=PAD_ID
    )
    with pytest.raises(RuntimeError, match="size mismatch"):
        load_checkpoint(tmp_path / "small.pt", wider)


# --- decoding and scoring ----------------------------------------------------------------------


class ScriptedModel(nn.Module):
    """Stands in for a Transformer: row r of the batch writes scripts[r], then END_ID forever."""

    def __init__(self, scripts: list[list[int]]) -> None:
        super().__init__()
        self.scripts = scripts
        self.decode_calls = 0

    def source_padding_mask(self, source: Tensor) -> None:
        return None

    def encode(self, source: Tensor, *, source_mask: Tensor | None = None) -> Tensor:
        return torch.arange(source.shape[0], dtype=torch.float)[:, None, None]

    def decode(self, target_input: Tensor, memory: Tensor, *, source_mask: Tensor | None = None) -> Tensor:
        self.decode_calls += 1
        rows = memory[:, :, 0].expand(-1, target_input.shape[1])
        written = torch.full_like(rows, float(target_input.shape[1] - 1))
        return torch.stack([rows, written], dim=-1)  # (batch, length, 2)

    def generator(self, hidden: Tensor) -> Tensor:
        logits = torch.zeros(hidden.shape[0], VOCAB)
        for index, (row, written) in enumerate(hidden.tolist()):
            script = self.scripts[int(row)]
            logits[index, script[int(written)] if int(written) < len(script) else END_ID] = 1.0
        return logits


def test_greedy_decode_stops_when_every_row_has_ended() -> None:
    model = ScriptedModel([[3, 4, 5], [6], []])
    source = torch.ones(3, 2, dtype=torch.long)
    assert greedy_decode(model, source, max_new_tokens=10) == [[3, 4, 5], [6], []]  # type: ignore[arg-type]
    assert model.decode_calls == 4  # three symbols, then END in every row
    assert greedy_decode(model, source, max_new_tokens=2) == [[3, 4], [6], []]  # type: ignore[arg-type]
    assert greedy_decode(model, source, max_new_tokens=5, end_id=None) == [  # type: ignore[arg-type]
        [3, 4, 5, END_ID, END_ID],
        [6, END_ID, END_ID, END_ID, END_ID],
        [END_ID] * 5,
    ]


def test_greedy_decode_takes_the_argmax_of_the_full_model_at_every_step() -> None:
    model = tiny_model().eval()
    batch = make_batch(SOURCES, SOURCES)
    decoded = greedy_decode(model, batch.source, source_mask=batch.source_mask, max_new_tokens=6, end_id=None)
    prefix = torch.full((3, 1), START_ID)
    with torch.no_grad():
        for _ in range(6):
            logits = model(
                batch.source, prefix, source_mask=batch.source_mask, target_mask=causal_mask(prefix.shape[1])[None]
            )
            prefix = torch.cat([prefix, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert decoded == prefix[:, 1:].tolist()


@pytest.mark.parametrize(
    ("source", "max_new_tokens", "message"),
    [
        (torch.ones(4, dtype=torch.long), 5, r"source must be a \(batch, n\) tensor of token ids, got shape \(4,\)"),
        (torch.ones(0, 3, dtype=torch.long), 5, r"got shape \(0, 3\)"),
        (torch.ones(2, 0, dtype=torch.long), 5, "the source is empty: it needs at least one token"),
        (torch.ones(2, 3, dtype=torch.long), 0, "max_new_tokens must be a positive integer, got max_new_tokens=0"),
        (torch.ones(2, 3, dtype=torch.long), 2.0, "max_new_tokens must be a positive integer, got max_new_tokens=2.0"),
        (
            torch.ones(2, 3, dtype=torch.long),
            True,
            "max_new_tokens must be a positive integer, got max_new_tokens=True",
        ),
    ],
)
def test_decoding_inputs_are_checked(source: Tensor, max_new_tokens: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_decoding_inputs(source, max_new_tokens)
    with pytest.raises(ValueError, match=message):
        greedy_decode(tiny_model(), source, max_new_tokens=max_new_tokens)


def test_strip_after_end_cuts_at_the_first_end_token() -> None:
    tokens = torch.tensor([[3, END_ID, 4, END_ID], [5, 6, 7, 8], [END_ID, 3, 3, 3]])
    assert strip_after_end(tokens) == [[3], [5, 6, 7, 8], []]
    assert strip_after_end(tokens, end_id=None) == tokens.tolist()
    assert strip_after_end(tokens, end_id=3) == [[], [5, 6, 7, 8], [END_ID]]


def test_exact_match_counts_whole_sequences() -> None:
    assert exact_match([[3, 4], [5], (6, 7)], [(3, 4), [5, 5], [6, 7]]) == pytest.approx(2 / 3)
    assert exact_match([[]], [[]]) == 1.0 and exact_match([[3, 4]], [[3]]) == 0.0
    with pytest.raises(ValueError, match="need as many predictions as references"):
        exact_match([[3]], [[3], [4]])
    with pytest.raises(ValueError, match="got 0 and 0"):
        exact_match([], [])


def test_fused_attention_takes_the_fused_path_inside_and_restores_each_layer_after() -> None:
    from transformer_book.model import Encoder, fused_attention

    torch.manual_seed(0)
    encoder = Encoder(2, 16, 2, 32, dropout=0.0).eval()
    encoder.layers[1].keep_attention_weights = False  # type: ignore[assignment]  # a layer already on the fused path stays there
    x = torch.randn(2, 5, 16)
    before = encoder(x)
    with fused_attention(encoder) as model:
        assert model is encoder
        assert [layer.keep_attention_weights for layer in encoder.layers] == [False, False]
        inside = encoder(x)
    assert [layer.keep_attention_weights for layer in encoder.layers] == [True, False]
    torch.testing.assert_close(inside, before, rtol=1e-5, atol=1e-5)

    try:
        with fused_attention(encoder):
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        pass
    assert [layer.keep_attention_weights for layer in encoder.layers] == [True, False], "restored after an error"


def test_the_default_loss_skips_what_the_batch_pads_with_and_nothing_else() -> None:
    # Once silent: the default loss skipped id 0 whatever the batch, so a language model never
    # learned to predict token 0 unless the chapter remembered to pass ignore_index=-1.
    stream = torch.zeros(200, dtype=torch.long)  # a stream of token 0 alone
    generator = torch.Generator().manual_seed(0)
    windows = [random_windows(stream, batch_size=2, context=8, generator=generator) for _ in range(2)]
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(VOCAB, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    history = train(model, windows, steps=2, optimizer=optimizer)
    assert all(math.isfinite(loss) and loss > 0 for loss in history.losses)  # token 0 is counted
    assert LanguageModelBatch.ignore_index not in range(VOCAB) and Batch.ignore_index == PAD_ID


def test_the_default_loss_is_the_plain_cross_entropy_and_smoothing_is_asked_for() -> None:
    batch = next(copy_batches())
    losses = {}
    for name, loss_function in [("default", None), ("smoothed", LabelSmoothingLoss(0.1))]:
        model = tiny_model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # the loss of the first step, weights kept
        losses[name] = train(model, [batch], steps=1, optimizer=optimizer, loss_function=loss_function).losses[0]
    logits = tiny_model()(**batch.model_inputs())
    plain = F.cross_entropy(logits.flatten(0, 1), batch.target_output.flatten(), ignore_index=batch.ignore_index)
    smoothed = F.cross_entropy(
        logits.flatten(0, 1), batch.target_output.flatten(), ignore_index=batch.ignore_index, label_smoothing=0.1
    )
    assert losses["default"] == pytest.approx(plain.item(), rel=1e-5)
    assert losses["smoothed"] == pytest.approx(smoothed.item(), rel=1e-5)
    assert losses["smoothed"] != pytest.approx(losses["default"], rel=1e-3)
