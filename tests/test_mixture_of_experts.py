"""Unit tests for transformer_book.mixture_of_experts (exported from book/mixture-of-experts.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from transformer_book.data import IGNORE_INDEX
from transformer_book.mixture_of_experts import (
    LoadBalancedLoss,
    MixtureOfExperts,
    TopKRouter,
    active_parameters,
    expert_capacity,
    keep_within_capacity,
    load_balancing_loss,
    load_mixtral_sparse_moe,
    use_experts,
)
from transformer_book.model import DecoderOnlyTransformer, PositionwiseFeedForward
from transformer_book.training import LabelSmoothingLoss


def test_the_router_keeps_the_top_k_logits_and_takes_a_softmax_over_them() -> None:
    torch.manual_seed(0)
    router = TopKRouter(d_model=5, num_experts=6, top_k=3)
    x = torch.randn(10, 5)
    routing = router(x)
    logits = x @ router.gate.weight.T
    torch.testing.assert_close(routing.logits, logits)
    expected_experts = logits.argsort(dim=-1, descending=True)[:, :3]
    assert torch.equal(routing.experts, expected_experts)
    top = logits.gather(1, expected_experts)
    torch.testing.assert_close(routing.weights, torch.exp(top) / torch.exp(top).sum(dim=-1, keepdim=True))
    # The same as the softmax over all experts, renormalised over the chosen ones (transformers' form).
    chosen = logits.softmax(dim=-1).gather(1, expected_experts)
    torch.testing.assert_close(routing.weights, chosen / chosen.sum(dim=-1, keepdim=True))
    torch.testing.assert_close(routing.weights.sum(dim=-1), torch.ones(10))
    assert (routing.weights[:, :-1] >= routing.weights[:, 1:]).all(), "the highest logit comes first"


def test_one_expert_per_token_gets_the_weight_one() -> None:
    routing = TopKRouter(d_model=4, num_experts=3, top_k=1)(torch.randn(7, 4))
    assert torch.equal(routing.weights, torch.ones(7, 1))


def test_the_balancing_loss_is_the_formula_on_fixed_logits() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 1.0], [1.0, 0.0, 0.5], [0.2, 0.1, 0.0]], dtype=torch.float64)
    probabilities = logits.softmax(dim=-1)
    mean_probability = probabilities.mean(dim=0)  # P_i
    # Top 1: tokens go to experts 0, 1, 0, 0, so f = (3/4, 1/4, 0): Switch's N sum f_i P_i.
    top_1 = 3 * (0.75 * mean_probability[0] + 0.25 * mean_probability[1])
    torch.testing.assert_close(load_balancing_loss(logits, top_k=1), top_1, rtol=0, atol=1e-15)
    # Top 2: the pairs are {0, 1}, {1, 2}, {0, 2}, {0, 1}, so f = (3/4, 3/4, 2/4).
    top_2 = 3 * (0.75 * mean_probability[0] + 0.75 * mean_probability[1] + 0.5 * mean_probability[2])
    torch.testing.assert_close(load_balancing_loss(logits, top_k=2), top_2, rtol=0, atol=1e-15)


def test_the_balancing_loss_is_k_when_balanced_and_the_number_of_experts_when_collapsed() -> None:
    balanced = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    assert load_balancing_loss(balanced, top_k=1).item() == pytest.approx(1.0)
    collapsed = torch.tensor([[100.0, 0.0, 0.0, 0.0]] * 5)
    assert load_balancing_loss(collapsed, top_k=1).item() == pytest.approx(4.0)


def test_the_balancing_loss_reads_logits_of_any_leading_shape() -> None:
    logits = torch.randn(2, 3, 5)
    torch.testing.assert_close(load_balancing_loss(logits, 2), load_balancing_loss(logits.reshape(6, 5), 2))


def test_the_balancing_loss_equals_transformers() -> None:
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    torch.manual_seed(1)
    layers = (torch.randn(40, 6), torch.randn(40, 6) + torch.tensor([3.0, 0, 0, 0, 0, 0]))
    theirs = mixtral.load_balancing_loss_func(layers, num_experts=6, top_k=3)
    ours = load_balancing_loss(torch.cat(layers), 3)  # theirs pools the tokens of every layer into one batch
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=0)


def test_capacity_is_the_factor_times_the_assignments_per_expert_rounded_up() -> None:
    assert expert_capacity(8, num_experts=4, top_k=2, capacity_factor=1.0) == 4
    assert expert_capacity(8, num_experts=4, top_k=2, capacity_factor=1.25) == 5
    assert expert_capacity(10, num_experts=4, top_k=1, capacity_factor=1.0) == 3  # 2.5 rounded up
    assert expert_capacity(512, num_experts=8, top_k=2, capacity_factor=1.25) == 160


def test_capacity_keeps_first_choices_first_then_tokens_in_order() -> None:
    experts = torch.tensor([[0, 1], [0, 2], [0, 1], [0, 3], [0, 2], [1, 0], [2, 3], [0, 1]])
    kept = keep_within_capacity(experts, num_experts=4, capacity=4)
    # Expert 0 is the first choice of tokens 0, 1, 2, 3, 4, 7: the first four fit, and token 5's
    # second choice of it comes after every first choice, so it is dropped too.
    assert sorted(map(tuple, (~kept).nonzero().tolist())) == [(4, 0), (5, 1), (7, 0)]
    # No expert is given more than its capacity, and everything fits when the capacity is large.
    for capacity in range(0, 9):
        kept = keep_within_capacity(experts, 4, capacity)
        assert torch.bincount(experts[kept], minlength=4).max() <= capacity
    assert keep_within_capacity(experts, 4, 16).all()
    assert not keep_within_capacity(experts, 4, 0).any()


def test_capacity_drops_exactly_the_assignments_past_it() -> None:
    torch.manual_seed(2)
    experts = torch.randint(0, 3, (50, 1))
    kept = keep_within_capacity(experts, 3, 7)
    for expert in range(3):
        tokens = (experts[:, 0] == expert).nonzero().squeeze(1)
        assert kept[tokens[:7], 0].all() and not kept[tokens[7:], 0].any()


def test_a_dropped_assignment_adds_nothing() -> None:
    torch.manual_seed(3)
    unlimited = MixtureOfExperts(6, 8, num_experts=4, top_k=2)
    limited = MixtureOfExperts(6, 8, num_experts=4, top_k=2, capacity_factor=1.0)
    limited.load_state_dict(unlimited.state_dict())
    x = torch.randn(2, 9, 6)
    with torch.no_grad():
        full, capped = unlimited(x).reshape(-1, 6), limited(x).reshape(-1, 6)
    assert limited.kept is not None and limited.expert_choices is not None and not limited.kept.all()
    routing = limited.router(x.reshape(-1, 6))
    expected = torch.zeros_like(full)
    for token in range(18):
        for choice in range(2):
            if limited.kept[token, choice]:
                expert = limited.experts[int(routing.experts[token, choice])]
                expected[token] += routing.weights[token, choice] * expert(x.reshape(-1, 6)[token])
    torch.testing.assert_close(capped, expected.detach())
    untouched = limited.kept.all(dim=1)
    torch.testing.assert_close(capped[untouched], full[untouched])


def test_the_layer_is_the_weighted_sum_of_its_chosen_experts() -> None:
    torch.manual_seed(4)
    layer = MixtureOfExperts(5, 7, num_experts=3, top_k=2, activation="relu")
    x = torch.randn(4, 5)
    with torch.no_grad():
        output = layer(x)
        routing = layer.router(x)
        expected = torch.stack(
            [
                sum(routing.weights[t, c] * layer.experts[int(routing.experts[t, c])](x[t]) for c in range(2))
                for t in range(4)
            ]
        )
    torch.testing.assert_close(output, expected)
    assert layer.router_logits is not None and layer.router_logits.shape == (4, 3)


@pytest.mark.parametrize(
    ("d_model", "d_ff", "num_experts", "top_k", "shape"),
    [(12, 20, 6, 3, (2, 9, 12)), (10, 16, 5, 1, (4, 3, 10)), (8, 6, 3, 3, (1, 11, 8))],
)
def test_equal_to_transformers_mixtral_block_in_float64(
    d_model: int, d_ff: int, num_experts: int, top_k: int, shape: tuple[int, ...]
) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    torch.manual_seed(5)
    config = transformers.MixtralConfig(
        hidden_size=d_model,
        intermediate_size=d_ff,
        num_local_experts=num_experts,
        num_experts_per_tok=top_k,
        experts_implementation="eager",
    )
    theirs = MixtralSparseMoeBlock(config).double().eval()
    for parameter in theirs.parameters():
        nn.init.normal_(parameter, std=0.5)
    ours = MixtureOfExperts(d_model, d_ff, num_experts=num_experts, top_k=top_k, activation="swiglu").double()
    load_mixtral_sparse_moe(ours, theirs)
    x = torch.randn(*shape, dtype=torch.float64)
    flat = x.reshape(-1, d_model)
    with torch.no_grad():
        output = ours(x)
        routing = ours.router(flat)
        their_logits, their_weights, their_experts = theirs.gate(flat)
        on_our_routing = theirs.experts(flat, routing.experts, routing.weights)
        whole = theirs(x)
    assert (routing.logits - their_logits).abs().max() < 1e-12
    assert torch.equal(routing.experts, their_experts)
    # Their router's softmax runs in float32 even in a float64 block; the rest is float64.
    assert (routing.weights - their_weights).abs().max() < 1e-6
    assert ((output - whole).norm() / whole.norm()).item() < 1e-6
    assert ((output.reshape(-1, d_model) - on_our_routing).norm() / on_our_routing.norm()).item() < 1e-10


def test_the_mixtral_loader_refuses_what_it_cannot_copy() -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    config = transformers.MixtralConfig(
        hidden_size=8, intermediate_size=12, num_local_experts=4, num_experts_per_tok=2, experts_implementation="eager"
    )
    theirs = MixtralSparseMoeBlock(config)
    with pytest.raises(ValueError, match="SwiGLU"):
        load_mixtral_sparse_moe(MixtureOfExperts(8, 12, num_experts=4, top_k=2), theirs)
    with pytest.raises(ValueError, match="sizes differ"):
        load_mixtral_sparse_moe(MixtureOfExperts(8, 10, num_experts=4, top_k=2, activation="swiglu"), theirs)
    with pytest.raises(ValueError, match="top_k"):
        load_mixtral_sparse_moe(MixtureOfExperts(8, 12, num_experts=4, top_k=1, activation="swiglu"), theirs)
    with pytest.raises(ValueError, match="capacity_factor"):
        load_mixtral_sparse_moe(
            MixtureOfExperts(8, 12, num_experts=4, top_k=2, activation="swiglu", capacity_factor=2.0), theirs
        )
    with pytest.raises(ValueError, match="not the MixtralSparseMoeBlock"):
        load_mixtral_sparse_moe(MixtureOfExperts(8, 12, num_experts=4, top_k=2, activation="swiglu"), nn.Linear(8, 8))


def test_swiglu_experts_are_the_books_feed_forward_without_biases() -> None:
    layer = MixtureOfExperts(8, 12, num_experts=3, top_k=2, activation="swiglu")
    for expert in layer.experts:
        assert isinstance(expert, PositionwiseFeedForward) and expert.linear_3 is not None
        assert all(linear.bias is None for linear in (expert.linear_1, expert.linear_2, expert.linear_3))
    with pytest.raises(ValueError, match="unknown activation 'tanh'"):
        MixtureOfExperts(8, 12, num_experts=3, top_k=2, activation="tanh")


def test_use_experts_replaces_every_feed_forward_with_the_same_active_parameters() -> None:
    torch.manual_seed(7)
    dense = DecoderOnlyTransformer(30, d_model=16, num_heads=2, num_layers=3, d_ff=64, max_len=8)
    sparse = DecoderOnlyTransformer(30, d_model=16, num_heads=2, num_layers=3, d_ff=64, max_len=8)
    layers = use_experts(sparse, num_experts=4, top_k=2)
    assert len(layers) == 3 and all(isinstance(layer, MixtureOfExperts) for layer in layers)
    assert [layer.feed_forward for layer in sparse.decoder.layers] == layers
    assert all(layer.d_ff == 32 and layer.activation == "gelu" for layer in layers)
    # One router (E x d_model) and one more output bias (d_model) per layer: k experts have k biases.
    assert active_parameters(sparse) - active_parameters(dense) == 3 * (4 * 16 + 16)
    assert active_parameters(dense) == sum(parameter.numel() for parameter in dense.parameters())
    logits = sparse(torch.randint(0, 30, (2, 8)))
    assert logits.shape == (2, 8, 30)


def test_the_balanced_loss_adds_the_coefficient_times_each_layers_loss() -> None:
    torch.manual_seed(8)
    model = DecoderOnlyTransformer(20, d_model=8, num_heads=2, num_layers=2, d_ff=16, max_len=6)
    layers = use_experts(model, num_experts=4, top_k=2)
    base = LabelSmoothingLoss(0.0, ignore_index=IGNORE_INDEX)
    tokens, targets = torch.randint(0, 20, (3, 6)), torch.randint(0, 20, (3, 6))
    with pytest.raises(ValueError, match="has not run"):
        LoadBalancedLoss(base, layers, 0.1)(torch.zeros(3, 6, 20), targets)
    logits = model(tokens)
    expected = base(logits, targets)
    for layer in layers:
        assert layer.router_logits is not None
        expected = expected + 0.1 * load_balancing_loss(layer.router_logits, 2)
    torch.testing.assert_close(LoadBalancedLoss(base, layers, 0.1)(logits, targets), expected)
    loss = LoadBalancedLoss(base, layers, 0.1)(logits, targets)
    loss.backward()
    assert all(layer.router.gate.weight.grad is not None for layer in layers)
    assert not list(LoadBalancedLoss(base, layers, 0.1).parameters()), "the loss must not own the model's layers"


@pytest.mark.parametrize(
    ("build", "problem"),
    [
        (lambda: TopKRouter(8, num_experts=2, top_k=3), "top_k must be at most num_experts"),
        (lambda: MixtureOfExperts(8, 4, num_experts=4, top_k=5), "top_k must be at most num_experts"),
        (lambda: MixtureOfExperts(8, 4, num_experts=0, top_k=1), "num_experts must be a positive integer"),
        (lambda: MixtureOfExperts(8, 4, num_experts=4, top_k=0), "top_k must be a positive integer"),
        (lambda: MixtureOfExperts(8, 4, num_experts=4, top_k=2, capacity_factor=0.0), "capacity_factor must be"),
        (lambda: MixtureOfExperts(8, 4, num_experts=4, top_k=2, capacity_factor=-1.0), "capacity_factor must be"),
        (lambda: MixtureOfExperts(8, 4, num_experts=4, top_k=2, capacity_factor=math.nan), "capacity_factor must"),
        (lambda: MixtureOfExperts(8, 4, num_experts=4, top_k=2, activation="tanh"), "unknown activation"),
        (lambda: expert_capacity(8, 4, 2, capacity_factor=0.0), "capacity_factor must be"),
        (lambda: load_balancing_loss(torch.randn(5, 3), top_k=4), "top_k must be at most num_experts"),
        (lambda: load_balancing_loss(torch.randn(3), top_k=1), "router_logits must be"),
        (lambda: load_balancing_loss(torch.randn(0, 3), top_k=1), "router_logits must be"),
        (lambda: LoadBalancedLoss(nn.MSELoss(), [], 0.01), "at least one"),
        (
            lambda: LoadBalancedLoss(nn.MSELoss(), [MixtureOfExperts(4, 4, num_experts=2, top_k=1)], -0.1),
            "coefficient must be",
        ),
    ],
)
def test_bad_arguments_are_refused_with_the_problem_named(build: object, problem: str) -> None:
    assert callable(build)
    with pytest.raises(ValueError, match=problem):
        build()


def test_wrong_input_width_is_refused() -> None:
    layer = MixtureOfExperts(8, 4, num_experts=4, top_k=2)
    with pytest.raises(ValueError, match="d_model=8"):
        layer(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match="d_model=8"):
        TopKRouter(8, 4, 2)(torch.randn(5, 6))


def test_use_experts_refuses_a_model_without_decoder_layers_an_uneven_split_or_a_bad_top_k() -> None:
    with pytest.raises(ValueError, match="no DecoderLayer"):
        use_experts(nn.Sequential(PositionwiseFeedForward(4, 8)), num_experts=2, top_k=1)
    model = DecoderOnlyTransformer(10, d_model=8, num_heads=2, num_layers=1, d_ff=15, max_len=4)
    with pytest.raises(ValueError, match="must divide d_ff"):
        use_experts(model, num_experts=4, top_k=2)
    with pytest.raises(ValueError, match="top_k must be a positive integer, got top_k=0"):  # once ZeroDivisionError
        use_experts(model, num_experts=4, top_k=0)
    with pytest.raises(ValueError, match="top_k must be at most num_experts"):
        use_experts(model, num_experts=4, top_k=5)


def test_use_experts_takes_numpy_integers_as_python_ones() -> None:
    model = DecoderOnlyTransformer(10, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=4)
    (layer,) = use_experts(model, num_experts=np.int64(4), top_k=np.int64(2))  # type: ignore[arg-type]
    assert (layer.num_experts, layer.top_k, layer.d_ff) == (4, 2, 8) and type(layer.top_k) is int
