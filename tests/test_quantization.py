"""Unit tests for transformer_book.quantization (exported from book/quantization.md): the rounding against
PyTorch's fake quantization, the error bounds, int4 packing, the quantized layer and model, their sizes, and
QLoRA's adapters against fine-tuning's LoRALinear."""

from __future__ import annotations

import io
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.fine_tuning import LoRALinear
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.quantization import (
    QLoRALinear,
    QuantizedEmbedding,
    QuantizedLinear,
    absmax_quantize,
    add_qlora,
    dequantize,
    pack_int4,
    quantize_model,
    stored_bytes,
    unpack_int4,
)


def small_model(tie: bool = True) -> DecoderOnlyTransformer:
    torch.manual_seed(0)
    return DecoderOnlyTransformer(
        64, d_model=32, num_heads=2, num_layers=2, d_ff=64, max_len=16, tie_embeddings=tie
    ).eval()


def peer(weight: torch.Tensor, bits: int, group_size: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """Ours and torch.fake_quantize_per_channel_affine's round trip, with our scales (a group is a row of its own)."""
    q, scale = absmax_quantize(weight, bits, group_size)
    qmax, group = 2 ** (bits - 1) - 1, weight.shape[1] // scale.shape[1]
    scales = scale.reshape(-1)
    theirs = torch.fake_quantize_per_channel_affine(
        weight.reshape(-1, group), scales, torch.zeros_like(scales, dtype=torch.int32), 0, -qmax, qmax
    ).reshape(weight.shape)
    return dequantize(q, scale), theirs


@pytest.mark.parametrize(("bits", "group_size"), [(8, None), (8, 16), (4, 32), (4, None)])
def test_the_round_trip_equals_pytorchs_fake_quantization_but_at_ties(bits: int, group_size: int | None) -> None:
    torch.manual_seed(bits)
    weight = torch.randn(48, 64) * torch.rand(48, 1)  # rows of different sizes
    weight[3, 5] = 9.0  # an outlier
    ours, theirs = peer(weight, bits, group_size)
    differ = ours != theirs
    assert differ.sum() <= 2  # PyTorch multiplies by 1 / scale where we divide: only a tie can round otherwise
    _, scale = absmax_quantize(weight, bits, group_size)
    step = scale.repeat_interleave(weight.shape[1] // scale.shape[1], dim=1)
    ratio = weight.double() / step.double()
    assert ((ratio - ratio.floor() - 0.5).abs()[differ] < 1e-5).all()


def test_exact_ties_and_levels_round_as_pytorch_does() -> None:
    # Each row's largest |w| is 127 (or 7), so the scale is exactly 1: every weight is a level or a tie.
    weight = torch.tensor([[127.0, -2.5, 0.5, 3.0, -126.5, 1.5], [7.0, -7.0, 6.5, -0.5, 2.5, 0.0]])
    for row, bits in ((0, 8), (1, 4)):
        ours, theirs = peer(weight[row : row + 1], bits, None)
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)  # both round half to even
    q, _ = absmax_quantize(weight[1:], 4)
    assert q.tolist() == [[7, -7, 6, 0, 2, 0]]


@pytest.mark.parametrize(("bits", "group_size"), [(8, None), (4, 8), (4, 32), (4, None)])
def test_every_weight_moves_by_at_most_half_a_step_and_codes_stay_in_range(bits: int, group_size: int | None) -> None:
    torch.manual_seed(1)
    weight = torch.randn(20, 64) ** 3  # heavy tails
    q, scale = absmax_quantize(weight, bits, group_size)
    qmax = 2 ** (bits - 1) - 1
    assert q.dtype == torch.int8 and q.shape == weight.shape
    assert scale.dtype == torch.float32 and scale.shape == (20, 64 // (group_size or 64))
    assert q.abs().max() == qmax  # the largest |w| of a group lands on the last level
    step = scale.double().repeat_interleave(64 // scale.shape[1], dim=1)
    error = (weight.double() - q.double() * step).abs()
    assert (error <= step / 2 * (1 + 2**-16)).all()  # up to float32's rounding of w / s


def test_a_group_of_zeros_is_stored_exactly() -> None:
    weight = torch.zeros(2, 8)
    weight[1, :4] = torch.tensor([0.1, -0.2, 0.3, -0.4])
    q, scale = absmax_quantize(weight, 4, 4)
    assert scale[0].tolist() == [1.0, 1.0] and scale[1, 1] == 1.0
    assert torch.equal(dequantize(q, scale)[0], torch.zeros(8))
    assert torch.isfinite(dequantize(q, scale)).all()


def test_int4_packing_round_trips_every_code_two_to_a_byte() -> None:
    codes = torch.arange(-8, 8, dtype=torch.int8).repeat(5, 3)[
        :, torch.randperm(48, generator=torch.Generator().manual_seed(0))
    ]
    packed = pack_int4(codes)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 24)
    assert torch.equal(unpack_int4(packed), codes)
    assert pack_int4(torch.tensor([[-8, 7], [0, -1]], dtype=torch.int8)).tolist() == [[0xF0], [0x78]]


def test_packing_refuses_what_does_not_fit() -> None:
    with pytest.raises(ValueError, match="even number of columns"):
        pack_int4(torch.zeros(2, 3, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"\[-8, 7\]"):
        pack_int4(torch.tensor([[8, 0]], dtype=torch.int8))
    with pytest.raises(ValueError, match="integers"):
        pack_int4(torch.zeros(2, 4))


@pytest.mark.parametrize(("bits", "group_size", "code_columns"), [(8, None, 64), (8, 16, 64), (4, 16, 32)])
def test_the_layer_stores_codes_and_scales_as_buffers_and_computes_with_their_weight(
    bits: int, group_size: int | None, code_columns: int
) -> None:
    torch.manual_seed(2)
    linear = nn.Linear(64, 24)
    layer = QuantizedLinear(linear, bits, group_size)
    assert list(layer.parameters()) == []  # nothing an optimizer could change
    assert {name for name, _ in layer.named_buffers()} == {"codes", "scale", "bias"}
    assert layer.codes.shape == (24, code_columns) and layer.codes.dtype == (torch.uint8 if bits == 4 else torch.int8)
    q, scale = absmax_quantize(linear.weight, bits, group_size)
    torch.testing.assert_close(layer.dequantized_weight(), dequantize(q, scale), rtol=0, atol=0)
    x = torch.randn(3, 5, 64, dtype=torch.float64)
    expected = x @ dequantize(q, scale).double().T + linear.bias.detach().double()
    torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)
    assert f"bits={bits}" in repr(layer)


@pytest.mark.parametrize(("bits", "group_size"), [(8, None), (4, 16)])
def test_the_matmul_error_obeys_the_analytic_bound_in_float64(bits: int, group_size: int | None) -> None:
    torch.manual_seed(3)
    linear = nn.Linear(64, 32, bias=False)
    layer = QuantizedLinear(linear, bits, group_size)
    x = torch.randn(200, 64, dtype=torch.float64) * torch.rand(64, dtype=torch.float64) * 3
    error = (x @ linear.weight.double().T - x @ layer.dequantized_weight().double().T).abs()
    bound = x.abs().reshape(200, -1, layer.group_size).sum(-1) @ (layer.scale.double() / 2).T
    assert (error <= bound * (1 + 2**-16)).all()
    assert (error / bound).median() < 0.2  # far from the worst case: independent errors cancel


def test_the_model_is_copied_with_every_linear_quantized_and_its_tie_kept() -> None:
    model = small_model()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    quantized: Any = quantize_model(model, 8)  # a DecoderOnlyTransformer, typed as an nn.Module
    assert not any(isinstance(module, nn.Linear) for module in quantized.modules())
    assert sum(isinstance(module, QuantizedLinear) for module in quantized.modules()) == 2 * 6 + 1  # GELU: two
    embedding = quantized.target_embedding.embedding
    assert isinstance(embedding, QuantizedEmbedding) and embedding.tied is quantized.generator.projection
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in before.items())  # left alone
    tokens = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours, theirs = quantized(tokens), model(tokens)
    assert (ours - theirs).norm() / theirs.norm() < 0.05
    rows = embedding.tied.dequantized_weight()[tokens]
    torch.testing.assert_close(embedding(tokens), rows, rtol=0, atol=0)


def test_an_untied_embedding_stays_in_float() -> None:
    quantized: Any = quantize_model(small_model(tie=False), 4, 16)
    assert isinstance(quantized.target_embedding.embedding, nn.Embedding)
    assert isinstance(quantized.generator.projection, QuantizedLinear)


def test_stored_bytes_counts_every_tensor_once_and_matches_what_torch_save_writes() -> None:
    model = small_model()
    parameters = sum(p.numel() for p in model.parameters())  # the tied table once
    saved = model.state_dict()  # a buffer that is not saved (persistent=False) is not stored
    buffers = sum(b.numel() * b.element_size() for name, b in model.named_buffers() if name in saved)
    assert stored_bytes(model) == 4 * parameters + buffers
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    weights = sum(m.weight.numel() for m in linears)
    rest = stored_bytes(model) - 4 * weights
    int8 = quantize_model(model, 8)
    assert stored_bytes(int8) == weights + 4 * sum(m.out_features for m in linears) + rest
    int4 = quantize_model(model, 4, 16)
    assert stored_bytes(int4) == weights // 2 + 4 * weights // 16 + rest
    for each in (model, int8, int4):
        buffer = io.BytesIO()
        torch.save(each.state_dict(), buffer)
        assert 0 <= buffer.getbuffer().nbytes - stored_bytes(each) < 64_000


def test_bad_arguments_are_refused_with_clear_messages() -> None:
    weight = torch.randn(4, 12)
    with pytest.raises(ValueError, match="bits must be 8 or 4"):
        absmax_quantize(weight, 3)
    with pytest.raises(ValueError, match="bits"):
        absmax_quantize(weight, 4.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="group_size must divide in_features=12"):
        absmax_quantize(weight, 4, 8)
    with pytest.raises(ValueError, match="group_size"):
        absmax_quantize(weight, 4, 0)
    with pytest.raises(ValueError, match="2-D floating-point"):
        absmax_quantize(torch.randn(12), 8)
    with pytest.raises(ValueError, match="2-D floating-point"):
        absmax_quantize(torch.ones(4, 12, dtype=torch.int64), 8)
    with pytest.raises(ValueError, match="NaN"):
        absmax_quantize(torch.full((2, 4), float("nan")), 8)
    with pytest.raises(ValueError, match="nn.Linear"):
        QuantizedLinear(nn.Conv1d(4, 4, 1))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="even number of columns"):
        QuantizedLinear(nn.Linear(5, 4), 4)
    base = QuantizedLinear(nn.Linear(8, 4), 4)
    with pytest.raises(ValueError, match="rank must be at most"):
        QLoRALinear(base, rank=5, alpha=1.0)
    with pytest.raises(ValueError, match="rank"):
        QLoRALinear(base, rank=0, alpha=1.0)
    with pytest.raises(ValueError, match="alpha"):
        QLoRALinear(base, rank=2, alpha=0.0)
    with pytest.raises(ValueError, match="QuantizedLinear"):
        QLoRALinear(nn.Linear(8, 4), rank=2, alpha=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no QuantizedLinear called w_z"):
        add_qlora(quantize_model(small_model()), ("w_z",), rank=2, alpha=2.0)


def test_qlora_starts_as_its_base_and_equals_lora_on_the_dequantized_weight() -> None:
    torch.manual_seed(4)
    base = QuantizedLinear(nn.Linear(32, 16, bias=True), 4, 16).double()
    adapter = QLoRALinear(base, rank=3, alpha=6.0).double()
    x = torch.randn(5, 32, dtype=torch.float64)
    torch.testing.assert_close(adapter(x), base(x), rtol=0, atol=0)  # B starts at zero
    with torch.no_grad():
        adapter.lora_B.normal_()
    plain = nn.Linear(32, 16).double()
    assert base.bias is not None
    with torch.no_grad():
        plain.weight.copy_(base.dequantized_weight())
        plain.bias.copy_(base.bias)
    reference = LoRALinear(plain, rank=3, alpha=6.0)
    with torch.no_grad():
        reference.lora_A.copy_(adapter.lora_A)
        reference.lora_B.copy_(adapter.lora_B)
    torch.testing.assert_close(adapter(x), reference(x), rtol=1e-12, atol=1e-12)


def test_gradients_reach_only_the_adapters_and_training_leaves_the_codes_alone() -> None:
    model = quantize_model(small_model(), 4, 16).requires_grad_(False)
    codes = {name: buffer.clone() for name, buffer in model.named_buffers()}
    torch.manual_seed(5)
    wrappers = add_qlora(model, ("w_q", "w_v", "linear_2"), rank=2, alpha=4.0)
    assert len(wrappers) == 2 * 3
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    tokens = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(model(tokens[:, :-1]).transpose(1, 2), tokens[:, 1:]).backward()
        optimizer.step()
    trained = {name for name, p in model.named_parameters() if p.grad is not None}
    assert trained == {
        f"{name}.lora_{f}" for name, m in model.named_modules() if isinstance(m, QLoRALinear) for f in "AB"
    }
    assert all(wrapper.lora_B.abs().sum() > 0 for wrapper in wrappers)  # they moved
    after = {name.replace(".base.", "."): buffer for name, buffer in model.named_buffers()}
    assert after.keys() == codes.keys() and all(torch.equal(after[name], codes[name]) for name in codes)
