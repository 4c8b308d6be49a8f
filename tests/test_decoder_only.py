"""Unit tests for transformer_book.model (exported from book/decoder-only.md)."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
from torch import nn

from transformer_book.data import LanguageModelBatch, language_model_batches, random_windows
from transformer_book.decoding import IncrementalDecoder, generate
from transformer_book.interop import load_torch_decoder_only_layer
from transformer_book.model import Decoder, DecoderOnlyTransformer, TransformerConfig, make_transformer
from transformer_book.ngram import KneserNey, bigram_probabilities, unigram_probabilities
from transformer_book.training import language_model_optimizer, loss_by_position, train, validation_loss, warmup_cosine

VOCAB, D_MODEL, HEADS, LAYERS, D_FF, MAX_LEN = 23, 16, 4, 2, 32, 12


def small_model(seed: int = 0) -> DecoderOnlyTransformer:
    torch.manual_seed(seed)
    return DecoderOnlyTransformer(
        VOCAB, d_model=D_MODEL, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF, max_len=MAX_LEN
    ).eval()


def test_logits_have_one_distribution_per_position() -> None:
    tokens = torch.randint(VOCAB, (3, 7))
    assert small_model()(tokens).shape == (3, 7, VOCAB)


def test_the_generator_is_tied_to_the_embedding() -> None:
    model = small_model()
    assert model.generator.projection.weight is model.target_embedding.embedding.weight


def test_the_layers_have_no_cross_attention() -> None:
    for layer in small_model().decoder.layers:
        assert layer.cross_attention is None and layer.cross_attention_sublayer is None


def test_no_position_sees_a_later_token() -> None:
    model = small_model()
    tokens = torch.randint(VOCAB, (1, 8))
    changed = tokens.clone()
    changed[0, 5] = (changed[0, 5] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    assert torch.equal(before[:, :5], after[:, :5])
    assert not torch.allclose(before[:, 5:], after[:, 5:])


def test_a_sequence_longer_than_max_len_is_refused() -> None:
    with pytest.raises(ValueError, match="max_len=12"):
        small_model()(torch.zeros(1, MAX_LEN + 1, dtype=torch.long))


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="not divisible by num_heads"):
        DecoderOnlyTransformer(VOCAB, d_model=10, num_heads=4, num_layers=1, d_ff=8, max_len=4)
    with pytest.raises(ValueError, match="max_len"):
        DecoderOnlyTransformer(VOCAB, d_model=8, num_heads=2, num_layers=1, d_ff=8, max_len=0)
    with pytest.raises(ValueError, match="dropout"):
        DecoderOnlyTransformer(VOCAB, d_model=8, num_heads=2, num_layers=1, d_ff=8, max_len=4, dropout=1.5)


def test_a_layer_matches_pytorchs_encoder_layer_with_a_causal_mask() -> None:
    torch.manual_seed(1)
    ours = Decoder(1, D_MODEL, HEADS, D_FF, activation="gelu", norm_first=True, cross_attention=False).layers[0]
    theirs = nn.TransformerEncoderLayer(
        D_MODEL, HEADS, D_FF, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    )
    load_torch_decoder_only_layer(ours, theirs)  # type: ignore[arg-type]
    x = torch.randn(2, 6, D_MODEL)
    with torch.no_grad():
        expected = theirs(x, src_mask=nn.Transformer.generate_square_subsequent_mask(6), is_causal=True)
        assert (ours(x, None) - expected).abs().max() < 1e-5


def test_loading_refuses_a_layer_with_cross_attention_or_another_norm_order() -> None:
    theirs = nn.TransformerEncoderLayer(D_MODEL, HEADS, D_FF, batch_first=True, norm_first=True)
    with pytest.raises(ValueError, match="cross-attention"):
        load_torch_decoder_only_layer(Decoder(1, D_MODEL, HEADS, D_FF, norm_first=True).layers[0], theirs)  # type: ignore[arg-type]
    post_ln = Decoder(1, D_MODEL, HEADS, D_FF, norm_first=False, cross_attention=False).layers[0]
    with pytest.raises(ValueError, match="norm_first"):
        load_torch_decoder_only_layer(post_ln, theirs)  # type: ignore[arg-type]


def test_random_windows_are_shifted_by_one() -> None:
    ids = torch.arange(100)
    batch = random_windows(ids, batch_size=4, context=10, generator=torch.Generator().manual_seed(0))
    assert batch.inputs.shape == batch.target_output.shape == (4, 10)
    assert torch.equal(batch.target_output, batch.inputs + 1)
    assert batch.num_target_tokens == 40
    assert batch.model_inputs()["tokens"] is batch.inputs


def test_random_windows_refuse_a_stream_too_short_or_not_flat() -> None:
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="longer than context"):
        random_windows(torch.arange(10), batch_size=2, context=10, generator=generator)
    with pytest.raises(ValueError, match="1-D"):
        random_windows(torch.zeros(3, 30, dtype=torch.long), batch_size=2, context=5, generator=generator)


def test_the_batch_stream_repeats_with_its_seed() -> None:
    first = next(language_model_batches(torch.arange(50), batch_size=3, context=5, seed=7))
    second = next(language_model_batches(torch.arange(50), batch_size=3, context=5, seed=7))
    assert torch.equal(first.inputs, second.inputs)


def test_the_training_loop_lowers_the_loss_on_a_repeating_stream() -> None:
    model = small_model().train()
    ids = torch.tensor([3, 5, 7, 11] * 50)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    history = train(
        model,
        language_model_batches(ids, batch_size=4, context=8, seed=0),
        steps=60,
        optimizer=optimizer,
    )
    assert history.losses[-1] < 0.2 * history.losses[0]
    assert validation_loss(model, ids, context=8) < 0.3


def test_unigram_and_bigram_are_distributions_without_zeros() -> None:
    ids = torch.tensor([1, 2, 1, 2, 1, 3])
    unigram = unigram_probabilities(ids, 5)
    bigram = bigram_probabilities(ids, 5)
    assert math.isclose(unigram.sum().item(), 1.0) and (unigram > 0).all()
    assert torch.allclose(bigram.sum(dim=1), torch.ones(5, dtype=torch.float64)) and (bigram > 0).all()
    assert bigram[1, 2] > bigram[1, 3]  # 1 is followed by 2 twice, by 3 once


def test_unigram_refuses_an_id_outside_the_vocabulary() -> None:
    # Once silent: bincount lengthened the table to the largest id, so it no longer matched vocab_size.
    with pytest.raises(ValueError, match="ids"):
        unigram_probabilities(torch.tensor([1, 2, 7]), 5)


def test_the_bigram_tends_to_the_pair_counts_as_alpha_shrinks() -> None:
    ids = torch.tensor([1, 2, 1, 2, 1, 3])
    assert torch.allclose(
        bigram_probabilities(ids, 5, alpha=1e-9)[1, [2, 3]], torch.tensor([2 / 3, 1 / 3], dtype=torch.float64)
    )


@pytest.mark.parametrize("alpha", [0, -0.5, math.nan, math.inf, True])
def test_the_bigram_refuses_an_alpha_that_is_not_a_finite_positive_number(alpha: object) -> None:
    # Once silent: alpha=0 gave NaN rows (0 / 0 for a token never followed), alpha=-0.5 negative probabilities.
    with pytest.raises(ValueError, match=re.escape("alpha must be ") + ".*" + re.escape(f"got alpha={alpha}")):
        bigram_probabilities(torch.tensor([1, 2, 1, 3]), 5, alpha=alpha)  # type: ignore[arg-type]


def test_the_bigram_takes_a_numpy_alpha_as_the_same_float() -> None:
    ids = torch.tensor([1, 2, 1, 2, 1, 3])
    assert torch.equal(bigram_probabilities(ids, 5, alpha=np.float64(0.1)), bigram_probabilities(ids, 5))


def test_validation_loss_is_the_mean_cross_entropy_of_the_whole_windows() -> None:
    model, ids = small_model(), torch.randint(VOCAB, (35,))
    windows = 34 // 10  # three windows of 10; the last four tokens are left out
    inputs, targets = ids[:30].view(windows, 10), ids[1:31].view(windows, 10)
    with torch.no_grad():
        expected = nn.functional.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()).item()
    assert validation_loss(model, ids, context=10, batch_size=2) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="more than context"):
        validation_loss(model, torch.arange(5), context=10)


def test_warmup_cosine_rises_peaks_and_ends_at_the_floor() -> None:
    rates = [warmup_cosine(step, warmup=10, total=100) for step in range(100)]
    assert rates[0] == pytest.approx(0.1) and rates[9] == pytest.approx(1.0)
    assert all(later <= earlier for earlier, later in zip(rates[10:], rates[11:]))
    assert warmup_cosine(100, warmup=10, total=100) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"floor": 2}, "floor must be in [0, 1], got floor=2"),  # once silent: a multiplier of 2
        ({"floor": -0.1}, "floor must be in [0, 1], got floor=-0.1"),
        ({"floor": math.nan}, "floor must be finite and in [0, 1], got floor=nan"),
        ({"step": -1}, "step must be at least 0, got step=-1"),
        ({"step": 1.5}, "step must be an integer, got step=1.5"),
        ({"warmup": -1}, "warmup must be at least 0, got warmup=-1"),
        ({"warmup": True}, "warmup must be an integer, got warmup=True"),
        ({"total": 0, "warmup": 0}, "total must be a positive integer, got total=0"),
        (
            {"warmup": 20, "total": 10},
            "warmup must be at most total (the warm-up is part of the schedule), got warmup=20",
        ),
    ],
)
def test_warmup_cosine_refuses_bad_arguments_naming_them(arguments: dict[str, object], message: str) -> None:
    settings: dict[str, object] = {"step": 3, "warmup": 5, "total": 10} | arguments
    with pytest.raises(ValueError, match=re.escape(message)):
        warmup_cosine(**settings)  # type: ignore[arg-type]


def test_warmup_cosine_takes_numpy_integers_and_the_edges_of_its_range() -> None:
    for step in range(12):
        assert warmup_cosine(np.int64(step), warmup=np.int64(5), total=np.int64(10)) == warmup_cosine(  # type: ignore[arg-type]
            step, warmup=5, total=10
        )
    assert warmup_cosine(0, warmup=0, total=1, floor=0) == 1.0 and warmup_cosine(7, warmup=7, total=7) == 1.0
    assert warmup_cosine(9, warmup=5, total=10, floor=1) == 1.0


def test_language_model_optimizer_decays_only_the_matrices_and_follows_warmup_cosine() -> None:
    model = DecoderOnlyTransformer(20, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=6)
    optimizer, scheduler = language_model_optimizer(model, lr=0.01, steps=50, warmup=5)
    decayed, kept = optimizer.param_groups
    assert decayed["weight_decay"] == 0.1 and kept["weight_decay"] == 0.0 and decayed["betas"] == (0.9, 0.95)
    assert all(p.dim() >= 2 for p in decayed["params"]) and all(p.dim() < 2 for p in kept["params"])
    assert len(decayed["params"]) + len(kept["params"]) == len(list(model.parameters()))
    rates = []
    for _ in range(50):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert rates == pytest.approx([0.01 * warmup_cosine(step, warmup=5, total=50) for step in range(50)])


def test_generate_continues_a_prompt_as_greedy_recomputation_does() -> None:
    model = small_model()
    prompt = torch.tensor([[4, 9, 2], [7, 7, 1]])
    cached = generate(
        model, None, prompt=prompt, max_new_tokens=6, choose=lambda logits: logits.argmax(dim=-1), end_id=None
    )
    sequence = prompt
    with torch.no_grad():
        for _ in range(6):
            sequence = torch.cat([sequence, model(sequence)[:, -1].argmax(dim=-1, keepdim=True)], dim=1)
    assert cached == sequence[:, 3:].tolist()
    # With an end id, each row is cut before its first end token, as for an encoder-decoder.
    end = sequence[0, 4].item()
    cut = generate(
        model,
        None,
        prompt=prompt,
        max_new_tokens=6,
        choose=lambda logits: logits.argmax(dim=-1),
        end_id=end,  # type: ignore[arg-type]
    )
    expected = [row[: row.index(end)] if end in row else row for row in sequence[:, 3:].tolist()]
    assert cut == expected and len(cut[0]) < 6


def test_the_cached_steps_give_the_full_pass_logits() -> None:
    model = small_model()
    tokens = torch.randint(VOCAB, (2, 9))
    decoder = IncrementalDecoder(model, source=None, batch_size=2)
    with torch.no_grad():
        stepwise = torch.stack([decoder.step(tokens[:, position]) for position in range(9)], dim=1)
        assert (stepwise - model(tokens)).abs().max() < 1e-5


def test_generate_leaves_a_decoder_only_model_in_training_mode() -> None:
    model = small_model().train()
    generate(model, None, prompt=torch.tensor([[1]]), max_new_tokens=2, choose=lambda logits: logits.argmax(dim=-1))
    assert model.training


def test_generate_refuses_bad_prompts_and_lengths() -> None:
    model = small_model()
    greedy = lambda logits: logits.argmax(dim=-1)  # noqa: E731
    for bad_prompt in [torch.tensor([1, 2]), torch.tensor(5), torch.zeros(2, 0, dtype=torch.long)]:
        with pytest.raises(ValueError, match="prompt must have shape"):
            generate(model, None, prompt=bad_prompt, max_new_tokens=2, choose=greedy)
    with pytest.raises(ValueError, match="give a prompt to continue"):
        generate(model, None, max_new_tokens=2, choose=greedy)
    with pytest.raises(ValueError, match=f"needs {MAX_LEN + 1} positions, more than the model's {MAX_LEN}"):
        generate(model, None, prompt=torch.tensor([[1, 2]]), max_new_tokens=MAX_LEN, choose=greedy)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, None, prompt=torch.tensor([[1, 2]]), max_new_tokens=0, choose=greedy)
    with pytest.raises(ValueError, match="cross-attention: give the source"):  # an encoder-decoder needs one
        generate(
            make_transformer(
                VOCAB, VOCAB, TransformerConfig(d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.1), pad_id=0
            ),
            None,
            prompt=torch.tensor([[1, 2]]),
            max_new_tokens=2,
            choose=greedy,
        )
    # The longest continuation that fits: prompt + new tokens - 1 positions are fed to the model.
    longest = generate(
        model, None, prompt=torch.tensor([[1, 2]]), max_new_tokens=MAX_LEN - 1, choose=greedy, end_id=None
    )
    assert len(longest[0]) == MAX_LEN - 1


def test_language_model_batch_feeds_the_model_its_inputs_only() -> None:
    batch = LanguageModelBatch(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 3, dtype=torch.long), 3)
    assert len(batch.model_inputs()) == 1


def test_overlapping_windows_score_each_token_once_with_a_long_past() -> None:
    model, ids = small_model(), torch.randint(VOCAB, (40,))
    # context 10, stride 4: windows start at 0, 4, ..., 28; the first scores targets 1-10, each later
    # one its last 4 targets, so targets 1-34 are each scored once.
    with torch.no_grad():
        losses = [nn.functional.cross_entropy(model(ids[:10][None])[0], ids[1:11], reduction="sum").item()]
        for start in range(4, 29, 4):
            logits = model(ids[start : start + 10][None])[0, 6:]
            losses.append(nn.functional.cross_entropy(logits, ids[start + 7 : start + 11], reduction="sum").item())
    expected = sum(losses) / (10 + 7 * 4)
    assert validation_loss(model, ids, context=10, stride=4, batch_size=3) == pytest.approx(expected, rel=1e-5)
    with pytest.raises(ValueError, match="stride <= context"):
        validation_loss(model, ids, context=10, stride=11)


def test_the_loss_by_position_averages_to_the_validation_loss_of_consecutive_windows() -> None:
    model, ids = small_model(), torch.randint(VOCAB, (50,))
    by_position = loss_by_position(model, ids, context=12, batch_size=2)
    assert by_position.shape == (12,)
    assert by_position.mean().item() == pytest.approx(validation_loss(model, ids, context=12), rel=1e-5)
    with torch.no_grad():  # position 0 of every window is predicted from that window's first token alone
        first = model(ids[:48].view(4, 12)[:, :1])[:, 0]
    expected = nn.functional.cross_entropy(first, ids[1:49].view(4, 12)[:, 0]).item()
    assert by_position[0].item() == pytest.approx(expected, rel=1e-5)


# Kneser-Ney. A tiny corpus whose counts are worked out by hand below.
TINY = torch.tensor([0, 1, 2, 0, 1, 3, 0, 1, 2])
D = 0.75


def test_kneser_ney_distributions_sum_to_one_for_any_history_and_order() -> None:
    ids = torch.randint(7, (300,), generator=torch.Generator().manual_seed(0))
    for order in range(1, 6):
        model = KneserNey(ids, 9, order=order)  # tokens 7 and 8 never occur
        for history in ([], [3], [3, 4], [1, 2, 3, 4, 5, 6], [8, 8, 8], [2, 8, 1, 4]):
            total = sum(model.probability(history, token) for token in range(9))
            assert total == pytest.approx(1.0, abs=1e-12), (order, history)
            assert all(model.probability(history, token) > 0 for token in range(9))


def test_kneser_ney_order_1_is_the_add_one_unigram() -> None:
    model = KneserNey(TINY, 5, order=1)
    expected = unigram_probabilities(TINY, 5)
    assert [model.probability([0, 1], token) for token in range(5)] == pytest.approx(expected.tolist())


def test_kneser_ney_bigram_equals_the_formula_by_hand() -> None:
    # Bigrams of TINY: (0,1) x3, (1,2) x2, (2,0) x2, (1,3), (3,0): five kinds. Tokens before each
    # token: 0 after {2, 3}, 1 after {0}, 2 after {1}, 3 after {1}; token 4 never occurs.
    model = KneserNey(TINY, 5, order=2)
    base = {0: (2 + 1) / (5 + 5), 1: (1 + 1) / 10, 2: (1 + 1) / 10, 3: (1 + 1) / 10, 4: (0 + 1) / 10}
    assert [model.probability([], token) for token in range(5)] == pytest.approx(list(base.values()))
    # After 1: seen 3 times, followed by 2 twice and 3 once (two kinds).
    assert model.probability([1], 2) == pytest.approx((2 - D) / 3 + D * 2 / 3 * base[2])
    assert model.probability([1], 0) == pytest.approx(D * 2 / 3 * base[0])
    assert model.probability([4], 2) == pytest.approx(base[2])  # never seen: backs off to the base
    assert model.probability([0, 3, 1], 3) == model.probability([1], 3)  # only the last token counts


def test_kneser_ney_trigram_equals_the_formula_by_hand() -> None:
    # Trigrams of TINY: (0,1,2) x2, (1,2,0), (2,0,1), (0,1,3), (1,3,0), (3,0,1).
    # Continuation counts of the bigrams (different tokens before each): (0,1): 2 (after 2 and 3),
    # (1,2), (2,0), (1,3), (3,0): 1 each. Of the unigrams, as for the bigram model: 0: 2, 1, 2, 3: 1.
    model = KneserNey(TINY, 5, order=3)
    base = {token: (kinds + 1) / (5 + 5) for token, kinds in {0: 2, 1: 1, 2: 1, 3: 1, 4: 0}.items()}
    after_1 = {2: (1 - D) / 2 + D * 2 / 2 * base[2], 0: D * 2 / 2 * base[0]}  # (1,2) and (1,3): total 2, two kinds
    assert model.probability([1], 2) == pytest.approx(after_1[2])
    assert model.probability([0, 1], 2) == pytest.approx((2 - D) / 3 + D * 2 / 3 * after_1[2])
    assert model.probability([0, 1], 0) == pytest.approx(D * 2 / 3 * after_1[0])
    # History (3, 3) never seen: the continuation bigram after 3, (3,0) once, takes over.
    assert model.probability([3, 3], 0) == pytest.approx((1 - D) + D * 1 * base[0])
    assert model.probability([4, 4], 1) == pytest.approx(base[1])  # no history seen at all: the base


def test_kneser_ney_loss_is_the_mean_negative_log_probability() -> None:
    ids = torch.randint(6, (80,), generator=torch.Generator().manual_seed(1))
    held_out = torch.randint(6, (30,), generator=torch.Generator().manual_seed(2))
    for order in (1, 2, 4):
        model = KneserNey(ids, 6, order=order)
        stream = held_out.tolist()
        expected = -sum(math.log(model.probability(stream[:i], stream[i])) for i in range(1, 30)) / 29
        assert model.loss(held_out) == pytest.approx(expected)


def test_kneser_ney_refuses_bad_input_with_a_message_naming_it() -> None:
    with pytest.raises(ValueError, match="order must be a positive integer, got order=0"):
        KneserNey(TINY, 5, order=0)
    with pytest.raises(ValueError, match=r"order must be a positive integer, got order=2\.0"):
        KneserNey(TINY, 5, order=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 3\), got 3"):
        KneserNey(TINY, 3, order=2)
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 5\), got -1"):
        KneserNey(torch.tensor([0, -1, 2]), 5, order=2)
    with pytest.raises(ValueError, match="1-D tensor of integer token ids"):
        KneserNey(TINY.view(3, 3), 5, order=2)
    with pytest.raises(ValueError, match="1-D tensor of integer token ids"):
        KneserNey(TINY.float(), 5, order=2)
    with pytest.raises(ValueError, match="discount"):
        KneserNey(TINY, 5, order=2, discount=1.0)
    model = KneserNey(TINY, 5, order=2)
    with pytest.raises(ValueError, match=r"token ids must be integers in \[0, 5\), got 5"):
        model.probability([1], 5)
    with pytest.raises(ValueError, match=r"got -2"):
        model.probability([-2], 1)
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 5\), got 7"):
        model.loss(torch.tensor([1, 7]))
    with pytest.raises(ValueError, match=r"token id must be an integer, got token id=1\.0"):
        model.probability([1.0], 2)  # type: ignore[list-item]


def test_kneser_ney_takes_numpy_integers_as_python_ones() -> None:
    # Once refused: NumPy integers failed the ad-hoc isinstance(token, int) and isinstance(order, int) checks.
    model = KneserNey(TINY, np.int64(5), order=np.int64(2))  # type: ignore[arg-type]
    assert model.order == 2 and type(model.order) is int
    assert model.probability([np.int64(1)], np.int64(2)) == model.probability([1], 2)  # type: ignore[list-item, arg-type]
