"""The book's modules in 16-bit floats: finite, close to float32, masks exact, the cache equal to recomputation.

Every other unit test runs in float32 or float64; the precision-and-memory chapter trains in
bfloat16, and a reader on a GPU may cast a model to half precision.
"""

from __future__ import annotations

import pytest
import torch

from transformer_book.decoding import IncrementalDecoder
from transformer_book.model import (
    PositionalEncoding,
    TransformerConfig,
    causal_mask,
    make_transformer,
    padding_mask,
    scaled_dot_product_attention,
)

HALF = [torch.bfloat16, torch.float16]
VOCAB = 20


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_a_query_with_no_key_gets_zero_output_in_half_precision(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    query, key, value = (torch.randn(2, 3, 8, dtype=dtype) for _ in range(3))
    mask = torch.ones(2, 3, 3, dtype=torch.bool)
    mask[1, 2] = False  # the last query of the second sequence may attend to nothing
    output, weights = scaled_dot_product_attention(query, key, value, mask)
    assert output.dtype == dtype and torch.isfinite(output).all()
    assert torch.equal(output[1, 2], torch.zeros(8, dtype=dtype)) and torch.equal(
        weights[1, 2], torch.zeros(3, dtype=dtype)
    )
    assert torch.allclose(weights[0].float().sum(-1), torch.ones(3), atol=1e-2)


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_positional_table_follows_the_models_dtype(dtype: torch.dtype) -> None:
    encoding = PositionalEncoding(d_model=8, max_len=16, dropout=0.0).to(dtype)
    assert encoding(torch.zeros(1, 5, 8, dtype=dtype)).dtype == dtype


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_transformer_in_half_precision_is_finite_and_close_to_float32(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = make_transformer(
        VOCAB, VOCAB, TransformerConfig(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0), pad_id=0
    ).eval()
    source = torch.randint(3, VOCAB, (2, 7))
    target = torch.randint(3, VOCAB, (2, 5))
    source_mask = padding_mask(torch.tensor([7, 4]), 7)
    target_mask = causal_mask(5)[None]
    with torch.no_grad():
        full = model(source, target, source_mask=source_mask, target_mask=target_mask)
        half = model.to(dtype)(source, target, source_mask=source_mask, target_mask=target_mask)
    assert half.dtype == dtype and torch.isfinite(half).all()
    # Log-probabilities of order 3; 16-bit floats carry 3 (fp16) or 2 (bf16) significant digits.
    assert (half.float() - full).abs().max() < 0.25


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_cached_step_equals_the_full_decoder_in_half_precision(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = (
        make_transformer(
            VOCAB, VOCAB, TransformerConfig(d_model=32, num_heads=4, num_layers=2, d_ff=64, dropout=0.0), pad_id=None
        )
        .eval()
        .to(dtype)
    )
    source = torch.randint(3, VOCAB, (2, 6))
    prefix = torch.randint(3, VOCAB, (2, 4))
    with torch.no_grad():
        memory = model.encode(source)
        full = model.generator(model.decode(prefix, memory, source_mask=None, target_mask=causal_mask(4)[None]))[:, -1]
        decoder = IncrementalDecoder(model, source)
        for position in range(4):
            step = decoder.step(prefix[:, position])
    assert step.dtype == dtype
    # The same products in another order: equal up to the rounding of 16-bit floats.
    assert (step.float() - full.float()).abs().max() < 0.1
