"""Unit tests for transformer_book.efficient_attention (exported from book/efficient-attention.md)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from transformer_book.efficient_attention import flash_attention, linear_attention

BATCH, HEADS, N, M, D_K, D_V = 2, 3, 37, 53, 8, 5  # lengths that no tile size below divides


def random_qkv(n: int = N, m: int = M, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return (
        torch.randn(BATCH, HEADS, n, D_K, generator=generator),
        torch.randn(BATCH, HEADS, m, D_K, generator=generator),
        torch.randn(BATCH, HEADS, m, D_V, generator=generator),
    )


def band(n: int, window: int, causal: bool = False) -> torch.Tensor:
    """True where query i may attend to key j: |i - j| < window, and j <= i when causal."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    allowed = (i - j).abs() < window
    return allowed & (j <= i) if causal else allowed


# --- exact attention, tile by tile ---------------------------------------------------------------


@pytest.mark.parametrize("block_q, block_k", [(256, 256), (1, 1), (7, 16), (16, 7), (100, 100)])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_sdpa_for_any_tiles(block_q, block_k, causal):
    query, key, value = random_qkv(n=M)  # n == m
    ours = flash_attention(query, key, value, causal=causal, block_q=block_q, block_k=block_k)
    theirs = F.scaled_dot_product_attention(query, key, value, is_causal=causal)
    assert ours.shape == (BATCH, HEADS, M, D_V)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n, m", [(N, M), (M, N)])
@pytest.mark.parametrize("causal", [False, True])
def test_equals_sdpa_when_n_differs_from_m(n, m, causal):
    # With n != m, is_causal is the top-left-aligned mask: query i sees keys 0..i.
    query, key, value = random_qkv(n=n, m=m)
    ours = flash_attention(query, key, value, causal=causal, block_q=8, block_k=16)
    theirs = F.scaled_dot_product_attention(query, key, value, is_causal=causal)
    assert ours.shape == (BATCH, HEADS, n, D_V)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_causal_output_does_not_depend_on_future_keys():
    query, key, value = random_qkv(n=M)
    changed_key, changed_value = key.clone(), value.clone()
    changed_key[..., 30:, :] += 5.0
    changed_value[..., 30:, :] -= 5.0
    before = flash_attention(query, key, value, causal=True, block_q=8, block_k=8)
    after = flash_attention(query, changed_key, changed_value, causal=True, block_q=8, block_k=8)
    torch.testing.assert_close(before[..., :30, :], after[..., :30, :])
    assert not torch.allclose(before[..., 30:, :], after[..., 30:, :])


@pytest.mark.parametrize("window", [1, 3, 10, 52, 53, 200])
@pytest.mark.parametrize("causal", [False, True])
def test_window_equals_sdpa_with_a_band_mask(window, causal):
    query, key, value = random_qkv(n=M)
    ours = flash_attention(query, key, value, causal=causal, window=window, block_q=8, block_k=5)
    theirs = F.scaled_dot_product_attention(query, key, value, attn_mask=band(M, window, causal))
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_window_of_one_returns_each_position_its_own_value():
    query, key, value = random_qkv(n=M)
    torch.testing.assert_close(flash_attention(query, key, value, window=1, block_q=4, block_k=4), value)


def test_window_covering_the_sequence_is_exact_attention():
    query, key, value = random_qkv(n=M)
    torch.testing.assert_close(
        flash_attention(query, key, value, window=M),
        F.scaled_dot_product_attention(query, key, value),
        atol=1e-6,
        rtol=1e-5,
    )


def test_leading_dimensions_broadcast_and_unbatched_inputs_work():
    query, key, value = random_qkv()
    shared_key, shared_value = key[0, 0], value[0, 0]  # (m, d): one set of keys for every batch and head
    ours = flash_attention(query, shared_key, shared_value, block_q=16, block_k=16)
    theirs = F.scaled_dot_product_attention(query, shared_key.expand_as(key), shared_value.expand_as(value))
    assert ours.shape == (BATCH, HEADS, N, D_V)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)
    unbatched = flash_attention(query[0, 0], key[0, 0], value[0, 0], block_q=5, block_k=9)
    torch.testing.assert_close(
        unbatched, F.scaled_dot_product_attention(query[0, 0], key[0, 0], value[0, 0]), atol=1e-6, rtol=1e-5
    )


def test_no_queries_gives_an_empty_output():
    query, key, value = random_qkv(n=0)
    assert flash_attention(query, key, value).shape == (BATCH, HEADS, 0, D_V)


def test_stable_for_huge_scores():
    # Scores of order 1e4 overflow exp() in float32; the running maximum keeps every exponent <= 0.
    query, key, value = random_qkv(n=M)
    ours = flash_attention(1e3 * query, 1e2 * key, value, block_q=8, block_k=8)
    assert torch.isfinite(ours).all()
    torch.testing.assert_close(
        ours, F.scaled_dot_product_attention(1e3 * query, 1e2 * key, value), atol=1e-5, rtol=1e-5
    )


def test_low_precision_inputs_are_summed_in_float32_and_returned_in_their_dtype():
    query, key, value = (tensor.to(torch.bfloat16) for tensor in random_qkv(n=200, m=300))
    ours = flash_attention(query, key, value, block_q=32, block_k=32)
    assert ours.dtype == torch.bfloat16
    reference = F.scaled_dot_product_attention(query.double(), key.double(), value.double())
    # Only the final rounding to bfloat16 (8 bits of mantissa) separates it from the exact result.
    assert (ours.double() - reference).abs().max() <= 2**-8 * reference.abs().max()


def test_float64_stays_float64():
    query, key, value = (tensor.double() for tensor in random_qkv())
    ours = flash_attention(query, key, value, causal=True, block_q=4, block_k=4)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(query, key, value, is_causal=True))


def test_gradients_flow_and_match_sdpa():
    # Not the memory-saving backward pass of FlashAttention, but autograd through the loop is exact too.
    query, key, value = (tensor.double().requires_grad_() for tensor in random_qkv(n=11, m=11))
    flash_attention(query, key, value, causal=True, block_q=4, block_k=3).square().sum().backward()
    ours = [tensor.grad.clone() for tensor in (query, key, value)]  # type: ignore[union-attr]
    for tensor in (query, key, value):
        tensor.grad = None
    F.scaled_dot_product_attention(query, key, value, is_causal=True).square().sum().backward()
    for mine, theirs in zip(ours, (query.grad, key.grad, value.grad)):
        torch.testing.assert_close(mine, theirs)


# --- linear attention --------------------------------------------------------------------------


def test_linear_attention_equals_its_quadratic_form():
    query, key, value = random_qkv()
    phi_q, phi_k = F.elu(query) + 1, F.elu(key) + 1
    similarity = phi_q @ phi_k.transpose(-2, -1)  # (..., n, m), all positive
    expected = similarity @ value / similarity.sum(-1, keepdim=True)
    ours = linear_attention(query, key, value)
    assert ours.shape == (BATCH, HEADS, N, D_V)
    torch.testing.assert_close(ours, expected)


def test_linear_attention_is_a_weighted_average_of_the_values():
    query, key, value = random_qkv()
    constant = torch.full_like(value, 2.5)
    torch.testing.assert_close(linear_attention(query, key, constant), torch.full((BATCH, HEADS, N, D_V), 2.5))
    ours = linear_attention(query, key, value)
    assert (ours <= value.amax(-2, keepdim=True) + 1e-6).all() and (ours >= value.amin(-2, keepdim=True) - 1e-6).all()


def test_linear_attention_differs_from_softmax_attention():
    query, key, value = random_qkv()
    difference = (linear_attention(query, key, value) - F.scaled_dot_product_attention(query, key, value)).abs().max()
    assert difference > 1e-2


# --- bad input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["block_q", "block_k"])
@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "8", None])
def test_tile_size_must_be_a_positive_integer(name, bad):
    with pytest.raises(ValueError, match=name):
        flash_attention(*random_qkv(), **{name: bad})


def test_numpy_integer_tile_sizes_are_accepted():
    np = pytest.importorskip("numpy")
    query, key, value = random_qkv()
    torch.testing.assert_close(
        flash_attention(query, key, value, block_q=np.int64(8), block_k=np.int32(8)),
        F.scaled_dot_product_attention(query, key, value),
        atol=1e-6,
        rtol=1e-5,
    )


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_window_must_be_a_positive_integer(bad):
    query, key, value = random_qkv(n=M)
    with pytest.raises(ValueError, match="window"):
        flash_attention(query, key, value, window=bad)


def test_window_needs_as_many_queries_as_keys():
    with pytest.raises(ValueError, match="n == m"):
        flash_attention(*random_qkv(n=N, m=M), window=4)


def test_causal_must_be_a_bool():
    with pytest.raises(ValueError, match="causal"):
        flash_attention(*random_qkv(), causal=1)  # type: ignore[arg-type]


@pytest.mark.parametrize("function", [flash_attention, linear_attention])
def test_mismatched_shapes_are_refused(function):
    query, key, value = random_qkv()
    with pytest.raises(ValueError, match="same last dimension d_k"):
        function(query, key[..., :-1], value)
    with pytest.raises(ValueError, match="same length m"):
        function(query, key, value[..., :-1, :])
    with pytest.raises(ValueError, match="do not broadcast"):
        function(query, key[:1].expand(3, -1, -1, -1).contiguous(), value[:1].expand(3, -1, -1, -1).contiguous())
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        function(query[0, 0, 0], key, value)
    with pytest.raises(ValueError, match="at least one key"):
        function(query, key[..., :0, :], value[..., :0, :])


@pytest.mark.parametrize("function", [flash_attention, linear_attention])
def test_integer_tensors_and_non_tensors_are_refused(function):
    query, key, value = random_qkv()
    with pytest.raises(ValueError, match="floating-point"):
        function(query, key, value.long())
    with pytest.raises(ValueError, match="query must be a tensor"):
        function(query.tolist(), key, value)


def test_scale_is_one_over_sqrt_d_k():
    # A single query and two keys: the weights are softmax(q . k / sqrt(d_k)), checked by hand.
    query = torch.tensor([[2.0, 0.0, 0.0, 0.0]])
    key = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    value = torch.tensor([[1.0], [0.0]])
    expected = math.exp(2 / 2) / (math.exp(2 / 2) + 1)  # sqrt(d_k) = 2
    assert flash_attention(query, key, value, block_k=1).item() == pytest.approx(expected, rel=1e-6)
