"""Unit tests for transformer_book.scaling_laws (exported from book/scaling-laws.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from transformer_book import count_parameters
from transformer_book.model import MultiHeadAttention
from transformer_book.scaling_laws import (
    PowerLaw,
    counted_training_flops,
    fit_power_law,
    forward_flops_per_token,
    non_embedding_parameters,
    scaling_model,
    sweep_parameters,
    training_flops,
)


@pytest.mark.parametrize(("scale", "exponent"), [(8.8e13, 0.076), (2.3e8, 0.05), (40.0, 0.5), (3.0, -0.7)])
def test_the_fit_recovers_a_known_law_from_exact_points(scale: float, exponent: float) -> None:
    sizes = [1e3, 3e3, 1e4, 4e4, 2e5, 1e6]
    law = fit_power_law(sizes, [(scale / size) ** exponent for size in sizes])
    assert abs(law.exponent - exponent) < 1e-9
    assert abs(law.scale - scale) / scale < 1e-9


def test_two_points_determine_the_law() -> None:
    law = fit_power_law([10.0, 1000.0], [4.0, 1.0])  # y falls 4x over 2 decades: exponent ln 4 / ln 100
    assert law.exponent == pytest.approx(math.log(4) / math.log(100), abs=1e-12)
    assert law(10.0) == pytest.approx(4.0, rel=1e-12) and law(1000.0) == pytest.approx(1.0, rel=1e-12)


def test_noisy_points_give_the_least_squares_line_in_log_space() -> None:
    # ln y = 2 - 0.5 ln x plus residuals +e, -e, +e, -e at symmetric ln x: the residuals cancel in the fit.
    log_x = [0.0, 1.0, 2.0, 3.0]
    residuals = [0.1, -0.1, -0.1, 0.1]  # orthogonal to both 1 and ln x - mean
    law = fit_power_law([math.exp(u) for u in log_x], [math.exp(2 - 0.5 * u + r) for u, r in zip(log_x, residuals)])
    assert law.exponent == pytest.approx(0.5, abs=1e-12)
    assert math.log(law.scale) == pytest.approx(2 / 0.5, abs=1e-12)


def test_a_power_law_is_evaluated_as_scale_over_x_to_the_exponent() -> None:
    assert PowerLaw(scale=100.0, exponent=0.5)(4.0) == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("x", "y", "problem"),
    [
        ([10.0], [3.0], "at least two points"),
        ([], [], "at least two points"),
        ([10.0, 100.0], [3.0, 0.0], "positive"),
        ([10.0, -100.0], [3.0, 2.0], "positive"),
        ([10.0, 100.0], [3.0, math.nan], "positive"),
        ([10.0, 100.0], [3.0, math.inf], "positive"),
        ([10.0, 100.0, 1000.0], [3.0, 2.0], "one value per point"),
        ([10.0, 10.0], [3.0, 2.0], "all x are equal"),
        ([10.0, 100.0], [3.0, 3.0], "does not change"),
    ],
)
def test_bad_input_raises_a_value_error_naming_the_problem(x: list[float], y: list[float], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        fit_power_law(x, y)


def test_a_non_positive_value_is_named_with_its_argument() -> None:
    with pytest.raises(ValueError, match=r"^x must be positive"):
        fit_power_law([0.0, 10.0], [3.0, 2.0])
    with pytest.raises(ValueError, match=r"^y must be positive"):
        fit_power_law([1.0, 10.0], [3.0, -2.0])


@pytest.mark.parametrize(("d_model", "num_layers"), [(8, 2), (12, 2), (48, 2), (16, 1), (32, 3)])
def test_sweep_parameters_counts_what_scaling_model_builds(d_model: int, num_layers: int) -> None:
    model = scaling_model(50, d_model, context=16, num_layers=num_layers)
    assert non_embedding_parameters(model) == sweep_parameters(d_model, num_layers)
    assert count_parameters(model) - non_embedding_parameters(model) == 50 * d_model  # the tied embedding only


def test_sweep_parameters_gives_the_books_numbers() -> None:
    assert sweep_parameters(6) == 1_032
    assert sweep_parameters(32) == 25_472
    assert sweep_parameters(128, num_layers=1) == 12 * 128**2 + 13 * 128 + 2 * 128


def test_scaling_model_has_the_promised_shape() -> None:
    model = scaling_model(50, 24, context=16)
    weights = dict(model.named_parameters())
    assert len(model.decoder.layers) == 2 and model.max_len == 16
    assert weights["decoder.layers.1.feed_forward.linear_2.weight"].shape == (24, 4 * 24)  # d_ff = 4 d_model
    assert "decoder.layers.2.feed_forward.linear_2.weight" not in weights
    assert [module.num_heads for module in model.modules() if isinstance(module, MultiHeadAttention)] == [2, 2]


def test_the_embedding_is_excluded_even_though_the_generator_shares_it() -> None:
    model = scaling_model(50, 8, context=16)
    assert model.generator.projection.weight is model.target_embedding.embedding.weight
    assert non_embedding_parameters(model) == count_parameters(model) - model.target_embedding.embedding.weight.numel()


def test_training_flops_is_six_per_parameter_per_token() -> None:
    assert training_flops(1_000, 20_000) == 1.2e8
    with pytest.raises(ValueError, match="parameters"):
        training_flops(0, 10)
    with pytest.raises(ValueError, match="tokens"):
        training_flops(10, -1)
    with pytest.raises(ValueError, match="d_model"):
        sweep_parameters(0)


@pytest.mark.parametrize(("d_model", "context", "vocab_size"), [(6, 32, 356), (16, 8, 50), (32, 64, 1000)])
def test_forward_flops_per_token_is_what_pytorchs_flop_counter_counts(
    d_model: int, context: int, vocab_size: int
) -> None:
    # FlopCounterMode counts every matrix product at 2 operations per multiply-add, attention over the
    # whole window (it does not know about the mask), and no bias, norm or softmax. The book's count
    # is 2 per parameter (biases and norm gains included), plus causal attention over T/2 positions.
    model = scaling_model(vocab_size, d_model, context=context)
    tokens = torch.randint(0, vocab_size, (3, context))
    with FlopCounterMode(display=False) as counter:
        model(tokens)
    counted_per_token = counter.get_total_flops() / tokens.numel()
    num_layers = 2
    weight_matrices = num_layers * 12 * d_model**2  # q, k, v, output (4 d²) and the feed-forward network (8 d²)
    other_parameters = sweep_parameters(d_model, num_layers) - weight_matrices
    full_window_attention = 2 * 2 * context * d_model * num_layers
    book = forward_flops_per_token(d_model, context=context, vocab_size=vocab_size)
    assert book - 2 * other_parameters + full_window_attention / 2 == counted_per_token


def test_counted_training_flops_is_three_forward_passes_and_tends_to_6nd_for_wide_models() -> None:
    per_token = forward_flops_per_token(12, context=32, vocab_size=356)
    assert counted_training_flops(12, 1000, context=32, vocab_size=356) == 3 * per_token * 1000
    wide = counted_training_flops(4096, 1000, context=32, vocab_size=356)
    assert 1 < wide / training_flops(sweep_parameters(4096), 1000) < 1.01
    narrow = counted_training_flops(6, 1000, context=32, vocab_size=356)
    assert narrow / training_flops(sweep_parameters(6), 1000) > 3  # the logits dominate a width-6 model


@pytest.mark.parametrize("argument", ["d_model", "context", "vocab_size", "num_layers"])
def test_forward_flops_per_token_names_a_bad_argument(argument: str) -> None:
    arguments = {"d_model": 8, "context": 16, "vocab_size": 50, "num_layers": 2} | {argument: 0}
    with pytest.raises(ValueError, match=argument):
        forward_flops_per_token(arguments.pop("d_model"), **arguments)
