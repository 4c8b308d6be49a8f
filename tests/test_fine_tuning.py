"""Unit tests for transformer_book.fine_tuning (exported from book/fine-tuning.md)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn

from transformer_book.fine_tuning import DecoderClassifier, LoRALinear, add_lora, merge_lora, training_memory
from transformer_book.model import DecoderLayer, DecoderOnlyTransformer


def small_model() -> DecoderOnlyTransformer:
    torch.manual_seed(0)
    return DecoderOnlyTransformer(30, d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=12)


def nudged(layer: LoRALinear) -> LoRALinear:
    """The layer with B drawn at random, as if trained (at B = 0 many errors would cancel)."""
    with torch.no_grad():
        layer.lora_B.normal_(std=0.5)
    return layer


def test_the_wrapper_starts_as_its_base_with_only_the_low_rank_factors_trainable() -> None:
    torch.manual_seed(0)
    base = nn.Linear(7, 5)
    layer = LoRALinear(base, rank=3, alpha=6)
    x = torch.randn(4, 2, 7)
    assert torch.equal(layer(x), base(x))
    assert layer.scaling == 2.0
    assert layer.lora_A.shape == (3, 7) and layer.lora_B.shape == (5, 3)
    assert [name for name, parameter in layer.named_parameters() if parameter.requires_grad] == ["lora_A", "lora_B"]
    assert sum(parameter.numel() for parameter in layer.parameters() if parameter.requires_grad) == 3 * (7 + 5)


def test_the_wrapper_computes_the_base_plus_the_scaled_low_rank_update() -> None:
    torch.manual_seed(1)
    base = nn.Linear(6, 4).double()
    layer = nudged(LoRALinear(base, rank=2, alpha=3))
    x = torch.randn(5, 6, dtype=torch.float64)
    expected = x @ base.weight.T + base.bias + 1.5 * x @ (layer.lora_B @ layer.lora_A).T
    torch.testing.assert_close(layer(x), expected, rtol=0, atol=1e-12)


def test_gradients_reach_only_the_factors_and_first_only_b() -> None:
    torch.manual_seed(2)
    layer = LoRALinear(nn.Linear(6, 4), rank=2, alpha=2)
    layer(torch.randn(3, 6)).square().sum().backward()
    assert layer.base.weight.grad is None and layer.base.bias.grad is None
    assert layer.lora_A.grad is not None and torch.equal(layer.lora_A.grad, torch.zeros(2, 6))  # B = 0 blocks A
    assert layer.lora_B.grad is not None and layer.lora_B.grad.abs().sum() > 0


@pytest.mark.parametrize("bias", [True, False])
def test_merging_gives_one_linear_with_the_same_outputs(bias: bool) -> None:
    torch.manual_seed(3)
    layer = nudged(LoRALinear(nn.Linear(8, 6, bias=bias).double(), rank=4, alpha=8))
    merged = layer.merge()
    assert type(merged) is nn.Linear and (merged.bias is not None) == bias
    assert not any(parameter.requires_grad for parameter in merged.parameters())
    x = torch.randn(10, 8, dtype=torch.float64)
    torch.testing.assert_close(merged(x), layer(x), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(merged.weight, layer.base.weight + 2.0 * layer.lora_B @ layer.lora_A)


def test_bad_arguments_are_refused_with_clear_messages() -> None:
    with pytest.raises(ValueError, match="rank must be a positive integer"):
        LoRALinear(nn.Linear(4, 4), rank=0, alpha=1)
    with pytest.raises(ValueError, match="rank must be at most"):
        LoRALinear(nn.Linear(4, 3), rank=4, alpha=1)
    for alpha in (0, -1.0, math.nan, math.inf, True):
        with pytest.raises(ValueError, match="alpha must be a positive finite number"):
            LoRALinear(nn.Linear(4, 4), rank=2, alpha=alpha)
    with pytest.raises(ValueError, match="wraps an nn.Linear, got Conv1d"):
        LoRALinear(nn.Conv1d(4, 4, 1), rank=2, alpha=1)  # type: ignore[arg-type]  # the point of the test


def test_add_lora_wraps_the_named_projections_of_the_book_model_and_starts_equal() -> None:
    model = small_model()
    reference = copy.deepcopy(model)
    wrappers = add_lora(model, ("w_q", "w_v"), rank=2, alpha=4)
    assert len(wrappers) == 2 * 2
    for layer in model.decoder.layers:
        assert isinstance(layer, DecoderLayer)
        assert isinstance(layer.self_attention.w_q, LoRALinear) and isinstance(layer.self_attention.w_v, LoRALinear)
        assert type(layer.self_attention.w_k) is nn.Linear
    tokens = torch.randint(30, (3, 12))
    assert torch.equal(model(tokens), reference(tokens))
    with pytest.raises(ValueError, match="no nn.Linear called w_q"):
        add_lora(model, ("w_q",), rank=2, alpha=4)  # every one is wrapped already: nothing is wrapped twice


def test_add_lora_refuses_a_name_that_is_not_a_linear() -> None:
    model = nn.Sequential()
    model.w_q = nn.ReLU()
    with pytest.raises(ValueError, match="Sequential.w_q is a ReLU, not an nn.Linear"):
        add_lora(model, ("w_q",), rank=1, alpha=1)


def test_merge_lora_restores_plain_layers_with_the_adapted_outputs() -> None:
    model = small_model().double()
    for wrapper in add_lora(model, ("w_q", "w_k", "w_v", "w_o"), rank=3, alpha=3):
        nudged(wrapper)
    tokens = torch.randint(30, (2, 12))
    with torch.no_grad():
        adapted = model(tokens)
        assert merge_lora(model) == 2 * 4
        merged = model(tokens)
    assert not any(isinstance(module, LoRALinear) for module in model.modules())
    assert ((merged - adapted).norm() / adapted.norm()).item() < 1e-12
    assert merge_lora(model) == 0


def test_the_layer_equals_peft_lora_on_the_same_weights() -> None:
    peft = pytest.importorskip("peft")

    class Holder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(9, 7)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            output: torch.Tensor = self.proj(x)
            return output

    torch.manual_seed(4)
    holder = Holder().double()
    ours = LoRALinear(copy.deepcopy(holder.proj), rank=3, alpha=5)
    # init_lora_weights=False draws B at random too, so the update is not zero and the test has teeth.
    config = peft.LoraConfig(r=3, lora_alpha=5, target_modules=["proj"], lora_dropout=0.0, init_lora_weights=False)
    theirs = peft.get_peft_model(holder, config)
    layer = theirs.base_model.model.proj
    assert layer.scaling["default"] == ours.scaling
    with torch.no_grad():
        ours.lora_A.copy_(layer.lora_A["default"].weight)  # nn.Linear(in, r): its weight is (r, in), like A
        ours.lora_B.copy_(layer.lora_B["default"].weight)  # nn.Linear(r, out): (out, r), like B
    x = torch.randn(4, 3, 9, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), rtol=1e-12, atol=1e-12)
    trainable = sum(parameter.numel() for parameter in theirs.parameters() if parameter.requires_grad)
    assert trainable == sum(parameter.numel() for parameter in ours.parameters() if parameter.requires_grad)
    merged = theirs.merge_and_unload()
    torch.testing.assert_close(ours.merged_weight(), merged.proj.weight, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours.merge()(x), merged(x), rtol=1e-12, atol=1e-12)


def test_the_classifier_averages_the_final_vectors_of_the_real_tokens() -> None:
    body = small_model()
    classifier = DecoderClassifier(body, num_classes=3)
    tokens = torch.randint(30, (2, 12))
    lengths = torch.tensor([12, 5])
    logits = classifier(tokens, lengths)
    assert logits.shape == (2, 3)
    hidden = body.decoder(body.positional_encoding(body.target_embedding(tokens[1:, :5])), None)
    torch.testing.assert_close(logits[1], classifier.head(hidden.mean(dim=1))[0])
    padded = tokens.clone()
    padded[1, 5:] = 0  # what stands after the end is never read
    torch.testing.assert_close(classifier(padded, lengths), logits)


def test_the_classifier_refuses_lengths_that_do_not_fit() -> None:
    classifier = DecoderClassifier(small_model(), num_classes=2)
    tokens = torch.randint(30, (2, 12))
    for lengths in (torch.tensor([0, 3]), torch.tensor([13, 3]), torch.tensor([3]), torch.tensor([3.0, 3.0])):
        with pytest.raises(ValueError, match="length"):
            classifier(tokens, lengths)
    with pytest.raises(ValueError, match="num_classes"):
        DecoderClassifier(small_model(), num_classes=0)


def test_training_memory_counts_parameters_gradients_and_adam_state() -> None:
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(10, 20), nn.Linear(20, 3))
    model[0].requires_grad_(False)
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-3)
    assert training_memory(model, optimizer) == {"parameters": 4 * (220 + 63), "gradients": 0, "optimizer state": 0}
    model(torch.randn(4, 10)).sum().backward()
    optimizer.step()
    memory = training_memory(model, optimizer)
    assert memory["parameters"] == 4 * (220 + 63) and memory["gradients"] == 4 * 63
    steps = sum(state["step"].nbytes for state in optimizer.state.values())  # one number per tensor
    assert memory["optimizer state"] == 2 * 4 * 63 + steps
