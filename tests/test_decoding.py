"""Unit tests for transformer_book.decoding (exported from book/decoding.md).

Tiny untrained models keep them fast: the decoders must agree with each other and with
brute force whatever the weights are.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch

from transformer_book import decoding
from transformer_book.data import END_ID, START_ID, make_batch, pad_sequences
from transformer_book.decoding import (
    IncrementalDecoder,
    beam_search,
    cached_greedy_decode,
    generate,
    greedy_decode,
    length_penalty,
    nucleus,
    sample_decode,
    sample_token,
)
from transformer_book.model import (
    DecoderOnlyTransformer,
    KVCache,
    Transformer,
    TransformerConfig,
    make_transformer,
    padding_mask,
)

VOCAB = 11


def tiny_model(norm_first: bool = False, vocab: int = VOCAB, seed: int = 0, max_len: int = 64) -> Transformer:
    torch.manual_seed(seed)
    model = make_transformer(
        vocab,
        vocab,
        TransformerConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0),
        norm_first=norm_first,
        max_len=max_len,
        pad_id=0,
    )
    # Sharpen the untrained logits a little, so that decoders face real choices rather than near-ties.
    with torch.no_grad():
        model.generator.projection.weight.mul_(3.0)
    return model.eval()


def padded_sources(lengths: list[int], seed: int = 1, vocab: int = VOCAB) -> tuple[torch.Tensor, torch.Tensor]:
    """Random sources of the given lengths (ids 3..vocab-1), padded, and their padding mask."""
    rng = torch.Generator().manual_seed(seed)
    sequences = [torch.randint(3, vocab, (length,), generator=rng).tolist() for length in lengths]
    source, source_lengths = pad_sequences(sequences)
    return source, padding_mask(source_lengths, source.shape[1])


# --- the key-value cache ------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("end_id", [END_ID, None])
def test_cached_greedy_decode_equals_greedy_decode(norm_first: bool, end_id: int | None) -> None:
    model = tiny_model(norm_first)
    source, source_mask = padded_sources([7, 3, 5, 1, 6, 2])
    expected = greedy_decode(model, source, source_mask=source_mask, max_new_tokens=9, end_id=end_id)
    assert cached_greedy_decode(model, source, source_mask=source_mask, max_new_tokens=9, end_id=end_id) == expected
    if end_id is None:
        assert all(len(output) == 9 for output in expected)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_step_logits_equal_the_full_models_last_position(norm_first: bool) -> None:
    model = tiny_model(norm_first)
    source, source_mask = padded_sources([6, 2, 4])
    target_input = torch.tensor([[START_ID, 5, 7, 4, 9], [START_ID, 3, 3, 8, 6], [START_ID, 10, 2, 5, 5]])
    decoder = IncrementalDecoder(model, source, source_mask=source_mask)
    with torch.no_grad():
        memory = model.encode(source, source_mask=source_mask)
        for t in range(target_input.shape[1]):
            step_logits = decoder.step(target_input[:, t])
            prefix_logits = model.generator(model.decode(target_input[:, : t + 1], memory, source_mask=source_mask))[
                :, -1
            ]
            torch.testing.assert_close(step_logits, prefix_logits, atol=1e-5, rtol=1e-5)


def test_the_cache_hides_the_sources_padding() -> None:
    """Changing a padded source position must not change any step's logits."""
    model = tiny_model()
    source, source_mask = padded_sources([6, 2])
    changed = source.clone()
    changed[1, 2:] = 7
    tokens = torch.tensor([START_ID, START_ID])
    original = IncrementalDecoder(model, source, source_mask=source_mask).step(tokens)
    assert torch.equal(IncrementalDecoder(model, changed, source_mask=source_mask).step(tokens), original)
    assert not torch.equal(IncrementalDecoder(model, changed, source_mask=None).step(tokens)[1], original[1])


def test_the_cache_grows_by_one_position_per_step() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([5, 3])
    decoder = IncrementalDecoder(model, source, source_mask=source_mask)
    for step in range(1, 4):
        decoder.step(torch.tensor([START_ID, 4]))
        for prefix, memory in decoder.caches:
            assert prefix.keys is not None and prefix.values is not None
            assert prefix.keys.shape == prefix.values.shape == (2, 2, step, 8)  # (batch, heads, positions, d_head)
            # the memory's keys and values, projected at the first step and kept
            assert memory.keys is not None and memory.keys.shape == (2, 2, 5, 8)
            if step == 1:
                first_memory_keys = memory.keys
    assert decoder.caches[-1][1].keys is first_memory_keys


def test_a_cache_takes_several_positions_at_once_after_cached_ones() -> None:
    # a decoder-only model with RoPE and GQA: three positions fed one by one, then two at once, give the
    # logits of the full model at those positions (the causal mask is offset by the cached positions)
    model = DecoderOnlyTransformer(
        30,
        d_model=16,
        num_heads=4,
        num_layers=2,
        d_ff=24,
        max_len=8,
        positions="none",
        num_kv_heads=2,
        rope_theta=10_000.0,
    ).eval()
    tokens = torch.randint(0, 30, (2, 5), generator=torch.Generator().manual_seed(0))
    caches = [(KVCache(), KVCache(fixed=True)) for _ in model.decoder.layers]
    with torch.no_grad():
        expected = model(tokens)
        for position in range(3):
            hidden = model.decoder(model.target_embedding(tokens[:, position : position + 1]), None, cache=caches)
        both = model.generator(model.decoder(model.target_embedding(tokens[:, 3:]), None, cache=caches))
    torch.testing.assert_close(both, expected[:, 3:], atol=1e-5, rtol=1e-5)
    assert hidden.shape == (2, 1, 16) and caches[0][0].keys is not None and caches[0][0].keys.shape == (2, 2, 5, 4)


def test_the_cache_gives_the_same_logits_on_the_fused_path() -> None:
    # keep_attention_weights = False sends the cached attention to F.scaled_dot_product_attention, with the
    # causal pattern offset by the cached positions written out as a mask (its is_causal would align it wrong)
    model = DecoderOnlyTransformer(30, d_model=16, num_heads=4, num_layers=2, d_ff=24, max_len=8).eval()
    tokens = torch.randint(0, 30, (2, 6), generator=torch.Generator().manual_seed(1))
    results = []
    for keep in (True, False):
        for layer in model.decoder.layers:
            setattr(layer, "keep_attention_weights", keep)  # noqa: B010  (a ModuleList holds Modules, to mypy)
        caches = [(KVCache(), KVCache(fixed=True)) for _ in model.decoder.layers]
        with torch.no_grad():
            embedded = model.positional_encoding(model.target_embedding(tokens))
            first = model.decoder(embedded[:, :2], None, cache=caches)
            rest = model.decoder(embedded[:, 2:], None, cache=caches)
        results.append(torch.cat([first, rest], dim=1))
    with torch.no_grad():
        whole = model.decoder(model.positional_encoding(model.target_embedding(tokens)), None)
    torch.testing.assert_close(results[0], whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(results[1], whole, atol=1e-5, rtol=1e-5)


def test_select_reorders_and_repeats_the_rows_of_every_cache() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([6, 2, 4])
    first, second = torch.tensor([START_ID] * 3), torch.tensor([5, 8, 9])
    rows = torch.tensor([2, 0, 0, 1])

    decoder = IncrementalDecoder(model, source, source_mask=source_mask)
    decoder.step(first)
    decoder.select(rows)
    reordered = decoder.step(second[rows])

    fresh = IncrementalDecoder(model, source[rows], source_mask=source_mask[rows])
    fresh.step(first[rows])
    expected = fresh.step(second[rows])
    torch.testing.assert_close(reordered, expected, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(reordered[0], reordered[1])  # the rows really differ


def test_step_rejects_tokens_of_the_wrong_shape() -> None:
    source, source_mask = padded_sources([4, 3])
    decoder = IncrementalDecoder(tiny_model(), source, source_mask=source_mask)
    with pytest.raises(ValueError, match=r"tokens must hold one id per row, shape \(2,\), got shape \(3,\)"):
        decoder.step(torch.tensor([START_ID] * 3))
    with pytest.raises(ValueError, match="tokens must hold one id per row"):
        decoder.step(torch.tensor([[START_ID], [START_ID]]))


def test_step_stops_at_the_end_of_the_positional_table() -> None:
    source, source_mask = padded_sources([3])
    decoder = IncrementalDecoder(tiny_model(max_len=3), source, source_mask=source_mask)
    for _ in range(3):
        decoder.step(torch.tensor([START_ID]))
    with pytest.raises(ValueError, match="cannot decode past the positional table's 3 positions"):
        decoder.step(torch.tensor([START_ID]))


def test_greedy_decode_stops_at_the_end_of_the_positional_table() -> None:
    model = tiny_model(max_len=3)
    source, source_mask = padded_sources([3])
    assert len(greedy_decode(model, source, source_mask=source_mask, max_new_tokens=2, end_id=None)[0]) == 2
    with pytest.raises(ValueError, match="longer than the positional table"):
        greedy_decode(model, source, source_mask=source_mask, max_new_tokens=5, end_id=None)


def test_generate_applies_choose_and_stops_at_the_end_token() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([4, 2])
    always_end = generate(
        model,
        source,
        source_mask=source_mask,
        max_new_tokens=5,
        choose=lambda logits: torch.full_like(logits[:, 0], END_ID, dtype=torch.long),
    )
    assert always_end == [[], []]
    always_seven = generate(
        model,
        source,
        source_mask=source_mask,
        max_new_tokens=4,
        end_id=None,
        choose=lambda logits: torch.full_like(logits[:, 0], 7, dtype=torch.long),
    )
    assert always_seven == [[7, 7, 7, 7], [7, 7, 7, 7]]


def test_generate_asks_whether_every_row_ended_every_step_on_the_cpu_only() -> None:
    assert decoding.steps_between_stop_checks(torch.device("cpu")) == 1
    assert decoding.steps_between_stop_checks(torch.device("cuda")) > 1


def test_checking_for_the_end_every_few_steps_gives_the_same_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """On an accelerator generate asks only every few steps; the tokens after a row's end are cut off."""
    model = tiny_model()
    source, source_mask = padded_sources([7, 3, 5, 1, 6, 2])
    end_step = torch.tensor([2, 5, 1, 3, 4, 2])  # row r emits END_ID at this step, symbol 3 + r before it

    def scripted(counter: list[int]) -> Callable[[torch.Tensor], torch.Tensor]:
        def choose(logits: torch.Tensor) -> torch.Tensor:
            step = counter[0]
            counter[0] += 1
            symbols = 3 + torch.arange(logits.shape[0])
            return torch.where(step >= end_step, torch.full_like(symbols, END_ID), symbols)

        return choose

    every_step_count, every_eighth_count = [0], [0]
    every_step = generate(model, source, source_mask=source_mask, max_new_tokens=20, choose=scripted(every_step_count))
    monkeypatch.setattr(decoding, "steps_between_stop_checks", lambda device: 8)
    every_eighth = generate(
        model, source, source_mask=source_mask, max_new_tokens=20, choose=scripted(every_eighth_count)
    )
    assert every_eighth == every_step == [[3 + row] * int(end_step[row]) for row in range(6)]
    assert (every_step_count[0], every_eighth_count[0]) == (6, 8)  # the last row ends at step 6; the check at 8


# --- beam search --------------------------------------------------------------------------------


def test_length_penalty_values() -> None:
    assert length_penalty(1, 0.6) == 1.0  # (5 + 1) / 6 = 1 whatever alpha is
    assert length_penalty(30, 0.0) == 1.0
    assert length_penalty(13, 1.0) == pytest.approx(3.0)
    assert length_penalty(20, 0.6) == pytest.approx((25 / 6) ** 0.6)
    assert length_penalty(10, 0.6) < length_penalty(11, 0.6) < length_penalty(11, 1.0)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_beam_of_one_without_penalty_is_greedy_decoding(norm_first: bool) -> None:
    model = tiny_model(norm_first)
    for seed in range(6):
        source, _ = padded_sources([3 + seed % 4], seed=seed)
        expected = greedy_decode(model, source, max_new_tokens=8)[0]
        assert beam_search(model, source, max_new_tokens=8, beam_size=1, alpha=0.0) == [expected]


def exhaustive_best(
    model: Transformer, source: torch.Tensor, vocab: int, max_new_tokens: int, alpha: float
) -> list[int]:
    """The output with the best log P(Y + END | X) / lp(|Y| + 1) among all outputs of up to max_new_tokens - 1 tokens."""
    tokens = [token for token in range(vocab) if token != END_ID]
    outputs = [list(output) for length in range(max_new_tokens) for output in itertools.product(tokens, repeat=length)]
    batch = make_batch([source[0].tolist()] * len(outputs), outputs)
    with torch.no_grad():
        logits = model(**batch.model_inputs())
        log_probs = torch.log_softmax(logits, dim=-1)
    token_log_probs = log_probs.gather(-1, batch.target_output.unsqueeze(-1)).squeeze(-1)
    scores = [
        token_log_probs[row, : len(output) + 1].sum().item() / length_penalty(len(output) + 1, alpha)
        for row, output in enumerate(outputs)
    ]
    return outputs[max(range(len(outputs)), key=scores.__getitem__)]


@pytest.mark.parametrize("seed", [2, 10, 13])
def test_a_wide_beam_finds_the_exhaustive_best(seed: int) -> None:
    """With a beam wider than every prefix set, beam search is exact: brute force must agree.

    The seeds are models for which the best output's length depends on alpha, so that the
    length penalty and the early stop are really tested.
    """
    vocab, max_new_tokens = 5, 4
    model = tiny_model(vocab=vocab, seed=seed)
    source, _ = padded_sources([3], seed=seed, vocab=vocab)
    best = {alpha: exhaustive_best(model, source, vocab, max_new_tokens, alpha) for alpha in [0.0, 0.6, 2.0]}
    assert len(best[0.0]) != len(best[2.0])
    for alpha, expected in best.items():
        assert beam_search(model, source, max_new_tokens=max_new_tokens, beam_size=1000, alpha=alpha) == [expected]


def test_beam_search_returns_the_most_probable_prefix_when_nothing_ends() -> None:
    """An end id the model cannot emit: no hypothesis finishes, and the best live prefix is returned."""
    vocab, max_new_tokens = 5, 3
    model = tiny_model(vocab=vocab, seed=3)
    source, _ = padded_sources([4], seed=3, vocab=vocab)
    outputs = [list(output) for output in itertools.product(range(vocab), repeat=max_new_tokens)]
    batch = make_batch([source[0].tolist()] * len(outputs), outputs)
    with torch.no_grad():
        logits = model(**batch.model_inputs())
        log_probs = torch.log_softmax(logits, dim=-1)
    sums = log_probs.gather(-1, batch.target_output.unsqueeze(-1)).squeeze(-1)[:, :max_new_tokens].sum(-1)
    output = beam_search(model, source, max_new_tokens=max_new_tokens, beam_size=1000, end_id=vocab + 1)
    assert output == [outputs[int(sums.argmax())]]


# --- sampling -----------------------------------------------------------------------------------


def test_top_k_one_sampling_is_greedy_decoding() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([7, 3, 5, 1, 6, 2])
    rng = torch.Generator().manual_seed(0)
    sampled = sample_decode(model, source, source_mask=source_mask, max_new_tokens=9, temperature=5.0, top_k=1, rng=rng)
    assert sampled == greedy_decode(model, source, source_mask=source_mask, max_new_tokens=9)


def test_a_low_temperature_samples_greedily() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([7, 3, 5, 1, 6, 2])
    greedy = greedy_decode(model, source, source_mask=source_mask, max_new_tokens=9)
    rng = torch.Generator().manual_seed(0)
    assert sample_decode(model, source, source_mask=source_mask, max_new_tokens=9, temperature=1e-4, rng=rng) == greedy
    assert sample_decode(model, source, source_mask=source_mask, max_new_tokens=9, temperature=1.0, rng=rng) != greedy


def test_a_seeded_generator_repeats_its_samples() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([7, 3, 5, 1, 6, 2])

    def draw(seed: int) -> list[list[int]]:
        return sample_decode(
            model,
            source,
            source_mask=source_mask,
            max_new_tokens=9,
            temperature=2.0,
            end_id=None,
            rng=torch.Generator().manual_seed(seed),
        )

    assert draw(0) == draw(0)
    assert draw(0) != draw(1)


def test_top_k_draws_only_among_the_k_most_probable_tokens() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([5, 3, 6])
    rng = torch.Generator().manual_seed(0)
    # A huge temperature makes the top-k almost uniform, so every one of the k tokens gets drawn.
    sampled = sample_decode(
        model, source, source_mask=source_mask, max_new_tokens=8, temperature=1e4, top_k=3, end_id=None, rng=rng
    )
    batch = make_batch(source.tolist(), sampled)  # for target_input (START + samples) and target_output
    with torch.no_grad():
        logits = model(source, batch.target_input, source_mask=source_mask)[:, :8]
    ranks = (logits > logits.gather(-1, batch.target_output[:, :8, None])).sum(-1)
    assert ranks.max() <= 2 and ranks.min() == 0
    assert (ranks == 2).any()  # not just greedy


# --- errors -------------------------------------------------------------------------------------

EMPTY = torch.zeros(1, 0, dtype=torch.long)
ONE = torch.tensor([[4, 5, 6]])


@pytest.mark.parametrize(
    "decode",
    [
        lambda model, source, max_new_tokens: cached_greedy_decode(model, source, max_new_tokens=max_new_tokens),
        lambda model, source, max_new_tokens: sample_decode(model, source, max_new_tokens=max_new_tokens),
        lambda model, source, max_new_tokens: beam_search(model, source, max_new_tokens=max_new_tokens),
    ],
    ids=["cached_greedy_decode", "sample_decode", "beam_search"],
)
def test_decoders_reject_an_empty_source_and_max_new_tokens_below_one(decode) -> None:
    model = tiny_model()
    with pytest.raises(ValueError, match="the source is empty"):
        decode(model, EMPTY, 5)
    for max_new_tokens in [0, -1, 2.5, True]:
        with pytest.raises(ValueError, match="max_new_tokens must be a positive integer"):
            decode(model, ONE, max_new_tokens)


DECODERS = {
    "greedy_decode": lambda model, source, mask: greedy_decode(model, source, source_mask=mask, max_new_tokens=4),
    "cached_greedy_decode": lambda model, source, mask: cached_greedy_decode(
        model, source, source_mask=mask, max_new_tokens=4
    ),
    "sample_decode": lambda model, source, mask: sample_decode(model, source, source_mask=mask, max_new_tokens=4),
    "beam_search": lambda model, source, mask: beam_search(model, source, source_mask=mask, max_new_tokens=4),
}


@pytest.mark.parametrize("training", [True, False], ids=["training", "eval"])
@pytest.mark.parametrize("name", DECODERS)
def test_decoders_leave_the_model_in_the_mode_they_found_it(name: str, training: bool) -> None:
    model = make_transformer(
        VOCAB, VOCAB, TransformerConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.5), pad_id=0
    )
    model.train(training)
    source, source_mask = padded_sources([5, 3])
    DECODERS[name](model, source, source_mask)
    assert model.training is training
    assert all(module.training is training for module in model.modules())


def test_the_incremental_decoder_runs_without_dropout_and_leaves_the_mode_alone() -> None:
    # Once silent: IncrementalDecoder switched the model to eval mode and left it there, so the
    # training that followed ran without dropout.
    model = make_transformer(
        VOCAB, VOCAB, TransformerConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.5), pad_id=0
    )
    source, source_mask = padded_sources([5, 3])
    tokens = torch.tensor([START_ID, START_ID])
    expected = IncrementalDecoder(model.eval(), source, source_mask=source_mask).step(tokens)
    decoder = IncrementalDecoder(model.train(), source, source_mask=source_mask)
    assert model.training and all(module.training for module in model.modules())
    torch.testing.assert_close(decoder.step(tokens), expected, atol=0.0, rtol=0.0)
    assert model.training and all(module.training for module in model.modules())


def test_decoders_decode_without_dropout_even_from_a_model_in_training_mode() -> None:
    model = make_transformer(
        VOCAB, VOCAB, TransformerConfig(d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.5), pad_id=0
    )
    source, source_mask = padded_sources([5, 3])
    expected = greedy_decode(model.eval(), source, source_mask=source_mask, max_new_tokens=6, end_id=None)
    model.train()
    assert greedy_decode(model, source, source_mask=source_mask, max_new_tokens=6, end_id=None) == expected
    assert cached_greedy_decode(model, source, source_mask=source_mask, max_new_tokens=6, end_id=None) == expected


def test_beam_search_hides_the_padding_of_a_padded_source() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([6, 3])
    padded, mask = source[1:], source_mask[1:]  # one sentence of 3 tokens, padded to 6
    alone = beam_search(model, padded[:, :3], max_new_tokens=6)
    assert beam_search(model, padded, source_mask=mask, max_new_tokens=6) == alone
    changed = padded.clone()
    changed[0, 3:] = 7
    assert beam_search(model, changed, source_mask=mask, max_new_tokens=6) == alone


def test_incremental_decoder_rejects_an_empty_source() -> None:
    with pytest.raises(ValueError, match="the source is empty"):
        IncrementalDecoder(tiny_model(), EMPTY)


@pytest.mark.parametrize("beam_size", [0, -2, 1.5, True])
def test_beam_search_rejects_a_beam_size_below_one(beam_size) -> None:
    with pytest.raises(ValueError, match="beam_size must be a positive integer"):
        beam_search(tiny_model(), ONE, max_new_tokens=5, beam_size=beam_size)


def test_beam_search_searches_each_row_of_a_batch_on_its_own() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([6, 3, 5])
    one_by_one = [
        beam_search(model, source[row : row + 1], source_mask=source_mask[row : row + 1], max_new_tokens=6)[0]
        for row in range(3)
    ]
    assert beam_search(model, source, source_mask=source_mask, max_new_tokens=6) == one_by_one
    assert beam_search(model, source, max_new_tokens=6) == one_by_one  # the padding mask built from pad_id
    # One mask row for every source, as broadcasting allows: every row is still searched (once, one was).
    unpadded = source[:, :3]
    alone = [beam_search(model, unpadded[row : row + 1], max_new_tokens=6)[0] for row in range(3)]
    everything_visible = torch.ones(1, 1, 3, dtype=torch.bool)
    assert beam_search(model, unpadded, source_mask=everything_visible, max_new_tokens=6) == alone
    with pytest.raises(ValueError, match="source_mask must have shape"):
        beam_search(model, source, source_mask=source_mask[:2], max_new_tokens=6)
    with pytest.raises(ValueError, match="positions, more than the model's"):
        beam_search(model, source[:1], max_new_tokens=100_000)


def test_beam_search_rejects_a_negative_alpha() -> None:
    with pytest.raises(ValueError, match="alpha must be a non-negative number"):
        beam_search(tiny_model(), ONE, max_new_tokens=5, alpha=-0.1)
    # NaN was once accepted silently (NaN < 0 is False), although a NaN temperature was refused.
    with pytest.raises(ValueError, match="alpha must be a non-negative number, got alpha=nan"):
        beam_search(tiny_model(), ONE, max_new_tokens=5, alpha=float("nan"))


@pytest.mark.parametrize(
    ("temperature", "message"),
    [
        (0.0, "temperature must be positive, got temperature=0.0"),
        (-1.0, "temperature must be positive, got temperature=-1.0"),
        (float("nan"), "temperature must be finite and positive, got temperature=nan"),
        # once accepted: logits / inf are all 0 or NaN, and the draw is uniform or fails inside multinomial
        (float("inf"), "temperature must be finite and positive, got temperature=inf"),
        (True, "temperature must be a real number, got temperature=True"),
    ],
)
def test_sample_decode_rejects_a_temperature_that_is_not_a_finite_positive_number(
    temperature: float, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        sample_decode(tiny_model(), ONE, max_new_tokens=5, temperature=temperature)


@pytest.mark.parametrize("top_k", [0, -3, 2.0, True])
def test_sample_decode_rejects_a_top_k_that_is_not_a_positive_integer(top_k) -> None:
    with pytest.raises(ValueError, match="top_k must be a positive integer"):
        sample_decode(tiny_model(), ONE, max_new_tokens=5, top_k=top_k)


# --- sample_token and a decoder without a source ---------------------------------------------------


def test_sample_token_draws_one_id_per_row_among_the_top_k() -> None:
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0], [3.0, 0.0, 0.0, 2.0]]).repeat(50, 1)
    drawn = sample_token(logits, temperature=1.0, top_k=2, rng=torch.Generator().manual_seed(0))
    assert drawn.shape == (100,)
    assert set(drawn[0::2].tolist()) <= {1, 2} and set(drawn[1::2].tolist()) <= {0, 3}


def test_sample_token_refuses_a_bad_temperature_or_top_k() -> None:
    with pytest.raises(ValueError, match="temperature"):
        sample_token(torch.zeros(1, 3), temperature=0.0)
    with pytest.raises(ValueError, match="temperature must be finite and positive, got temperature=inf"):
        sample_token(torch.zeros(1, 3), temperature=float("inf"))
    with pytest.raises(ValueError, match="top_k"):
        sample_token(torch.zeros(1, 3), top_k=0)


def test_sample_token_takes_numpy_numbers_as_python_ones() -> None:
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0], [3.0, 0.0, 0.0, 2.0]]).repeat(50, 1)
    ours = sample_token(logits, temperature=np.float64(0.7), top_k=np.int64(2), rng=torch.Generator().manual_seed(0))  # type: ignore[arg-type]
    expected = sample_token(logits, temperature=0.7, top_k=2, rng=torch.Generator().manual_seed(0))
    assert torch.equal(ours, expected)


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.8, 0.95, 0.999])
@pytest.mark.parametrize("temperature", [0.7, 1.0, 1.5])
def test_the_nucleus_keeps_the_tokens_transformers_keeps(top_p: float, temperature: float) -> None:
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopPLogitsWarper

    logits = 3 * torch.randn(64, 50, generator=torch.Generator().manual_seed(0))
    scaled = TemperatureLogitsWarper(temperature)(None, logits)
    theirs = TopPLogitsWarper(top_p)(None, scaled).isfinite()
    ours = nucleus(logits / temperature, top_p)
    assert torch.equal(ours, theirs)
    # the nucleus is the smallest such set: it holds top_p, and without its least probable token it would not
    probabilities = torch.softmax(logits / temperature, dim=-1)
    kept_mass = (probabilities * ours).sum(-1)
    least_kept = probabilities.masked_fill(~ours, 2.0).min(-1).values
    assert (kept_mass >= top_p - 1e-6).all() and (kept_mass - least_kept < top_p + 1e-6).all()


def test_sample_token_draws_only_from_the_nucleus_and_from_all_of_it() -> None:
    # probabilities 0.5, 0.3, 0.15, 0.05: p = 0.8 keeps the first two (0.5 < 0.8 before the second, 0.8 before the third)
    logits = torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log().repeat(2000, 1)
    drawn = sample_token(logits, top_p=0.8, rng=torch.Generator().manual_seed(0))
    counts = torch.bincount(drawn, minlength=4)
    assert counts[2:].sum() == 0
    # renormalised within the nucleus: 0.5 / 0.8 = 0.625 of the draws; 2000 draws, 5 standard deviations of 0.011
    assert abs(counts[0].item() / 2000 - 0.625) < 0.055
    # top_p = 1 is no filter, and the default (None) draws the same as it
    every = sample_token(logits, top_p=1.0, rng=torch.Generator().manual_seed(0))
    assert torch.equal(every, sample_token(logits, rng=torch.Generator().manual_seed(0)))
    assert torch.bincount(every, minlength=4)[2:].sum() > 0


def test_sample_decode_passes_top_p_to_each_draw() -> None:
    model = tiny_model()
    source, source_mask = padded_sources([5, 3, 6])
    tiny = sample_decode(
        model,
        source,
        source_mask=source_mask,
        max_new_tokens=8,
        top_p=1e-6,
        end_id=None,
        rng=torch.Generator().manual_seed(0),
    )
    assert tiny == cached_greedy_decode(model, source, source_mask=source_mask, max_new_tokens=8, end_id=None)


@pytest.mark.parametrize("top_p", [0, -0.1, 1.5, float("nan"), True])
def test_sampling_refuses_a_top_p_outside_zero_to_one(top_p) -> None:
    with pytest.raises(ValueError, match="top_p"):
        sample_token(torch.zeros(1, 3), top_p=top_p)
    with pytest.raises(ValueError, match="top_p"):
        sample_decode(tiny_model(), ONE, max_new_tokens=5, top_p=top_p)


def test_incremental_decoder_needs_the_source_when_the_decoder_has_cross_attention() -> None:
    with pytest.raises(ValueError, match="give the source"):
        IncrementalDecoder(tiny_model(), source=None, batch_size=1)


@pytest.mark.parametrize(
    "decode",
    [greedy_decode, cached_greedy_decode, lambda model, source, **kw: sample_decode(model, source, top_k=1, **kw)],
    ids=["greedy", "cached", "sampled"],
)
def test_decoders_hide_the_source_padding_when_no_mask_is_given(decode: Callable[..., list[list[int]]]) -> None:
    # Once silent: without a source_mask, the encoder and every cross-attention read the padding,
    # so a sentence decoded differently with more padding after it.
    model = tiny_model()
    source, source_mask = padded_sources([7, 3, 5, 1, 6, 2])
    with_mask = decode(model, source, source_mask=source_mask, max_new_tokens=9, end_id=None)
    assert decode(model, source, max_new_tokens=9, end_id=None) == with_mask
    more_padding = torch.cat([source, torch.zeros(source.shape[0], 4, dtype=torch.long)], dim=1)
    assert decode(model, more_padding, max_new_tokens=9, end_id=None) == with_mask
