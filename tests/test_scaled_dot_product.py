"""Unit tests for transformer_book.model (exported from book/scaled-dot-product.md)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F

from transformer_book.model import causal_mask, padding_mask, scaled_dot_product_attention

BATCH, HEADS, N, M, D_K, D_V = 2, 3, 4, 6, 8, 5


QKV = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


@pytest.fixture
def qkv() -> QKV:
    """Random queries, keys and values with batch and head dims, n != m and d_k != d_v."""
    generator = torch.Generator().manual_seed(0)
    query = torch.randn(BATCH, HEADS, N, D_K, generator=generator)
    key = torch.randn(BATCH, HEADS, M, D_K, generator=generator)
    value = torch.randn(BATCH, HEADS, M, D_V, generator=generator)
    return query, key, value


def reference_attention(query, key, value, mask=None):
    """The formula written out with an explicit loop over queries, independent of the package."""
    output = torch.empty(*query.shape[:-1], value.shape[-1], dtype=query.dtype)
    for i in range(query.shape[-2]):
        scores = (query[..., i : i + 1, :] @ key.transpose(-2, -1)).squeeze(-2) / math.sqrt(query.shape[-1])
        if mask is not None:
            row_mask = mask.expand(*scores.shape[:-1], query.shape[-2], scores.shape[-1])[..., i, :]
            scores = scores.masked_fill(~row_mask, float("-inf"))
        output[..., i, :] = (torch.softmax(scores, dim=-1).unsqueeze(-2) @ value).squeeze(-2)
    return output


# --- shapes and values -------------------------------------------------------------------------


def test_shapes_with_batch_and_head_dims(qkv: QKV) -> None:
    output, weights = scaled_dot_product_attention(*qkv)
    assert output.shape == (BATCH, HEADS, N, D_V)
    assert weights.shape == (BATCH, HEADS, N, M)


def test_unbatched_and_broadcast_leading_dims():
    query, key, value = torch.randn(N, D_K), torch.randn(M, D_K), torch.randn(M, D_V)
    output, weights = scaled_dot_product_attention(query, key, value)
    assert output.shape == (N, D_V) and weights.shape == (N, M)
    # keys and values shared by every batch element broadcast against a batch of queries
    output, weights = scaled_dot_product_attention(torch.randn(BATCH, 1, N, D_K), key, value)
    assert output.shape == (BATCH, 1, N, D_V) and weights.shape == (BATCH, 1, N, M)


def test_matches_the_formula_with_a_loop(qkv: QKV) -> None:
    output, _ = scaled_dot_product_attention(*qkv)
    torch.testing.assert_close(output, reference_attention(*qkv))


def test_scaling_is_by_sqrt_d_k():
    query, key = torch.randn(1, D_K), torch.randn(3, D_K)
    _, weights = scaled_dot_product_attention(query, key, torch.randn(3, 2))
    expected = torch.softmax(query @ key.T / math.sqrt(D_K), dim=-1)
    torch.testing.assert_close(weights, expected)
    assert not torch.allclose(weights, torch.softmax(query @ key.T, dim=-1))


def test_rows_sum_to_one_and_masked_weights_are_exactly_zero(qkv: QKV) -> None:
    mask = padding_mask(torch.tensor([6, 3]))[:, None]  # (batch, 1, 1, m)
    _, weights = scaled_dot_product_attention(*qkv, mask=mask)
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(BATCH, HEADS, N))
    assert (weights[1, ..., 3:] == 0).all()
    assert (weights[1, ..., :3] > 0).all()


def test_numerically_stable_for_huge_scores():
    query = torch.full((1, 4), 1e4)
    key = torch.stack([torch.full((4,), 1.0), torch.full((4,), 0.5)])
    output, weights = scaled_dot_product_attention(query, key, torch.eye(2))
    assert torch.isfinite(weights).all() and torch.isfinite(output).all()
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.0]]))


# --- agreement with PyTorch --------------------------------------------------------------------


@pytest.mark.parametrize("case", ["no mask", "padding", "causal", "padding and causal"])
def test_agrees_with_torch_sdpa(case):
    generator = torch.Generator().manual_seed(1)
    query, key, value = (torch.randn(BATCH, HEADS, 7, d, generator=generator) for d in (D_K, D_K, D_V))
    padding = padding_mask(torch.tensor([7, 4]))[:, None]
    causal = causal_mask(7)
    mask = {"no mask": None, "padding": padding, "causal": causal, "padding and causal": padding & causal}[case]
    ours, _ = scaled_dot_product_attention(query, key, value, mask)
    theirs = F.scaled_dot_product_attention(query, key, value, attn_mask=mask)
    assert (ours - theirs).abs().max().item() <= 1e-6


def test_causal_mask_agrees_with_is_causal(qkv: QKV) -> None:
    query, key, value = qkv[0], qkv[1][..., :N, :], qkv[2][..., :N, :]
    ours, _ = scaled_dot_product_attention(query, key, value, causal_mask(N))
    theirs = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_cross_attention_padding_agrees_with_torch_sdpa(qkv: QKV) -> None:
    mask = padding_mask(torch.tensor([6, 2]))[:, None]
    ours, _ = scaled_dot_product_attention(*qkv, mask=mask)
    theirs = F.scaled_dot_product_attention(*qkv, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_mask_convention_is_the_opposite_of_multihead_attention():
    """A book mask passed as ~mask to nn.MultiheadAttention gives the same attention weights."""
    torch.manual_seed(0)
    attention = torch.nn.MultiheadAttention(embed_dim=4, num_heads=1, bias=False, batch_first=True)
    with torch.no_grad():
        attention.in_proj_weight.copy_(torch.eye(4).repeat(3, 1))  # queries = keys = values = x
    x = torch.randn(2, 5, 4)
    book_mask = padding_mask(torch.tensor([5, 3]))  # (batch, 1, m), True = may attend
    _, their_weights = attention(x, x, x, key_padding_mask=~book_mask[:, 0])
    _, our_weights = scaled_dot_product_attention(x, x, x, book_mask)
    torch.testing.assert_close(our_weights, their_weights)


# --- fully masked rows -------------------------------------------------------------------------


def test_fully_masked_row_gives_zero_weights_and_output_without_nan_or_warning(qkv: QKV) -> None:
    mask = torch.ones(N, M, dtype=torch.bool)
    mask[2] = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        output, weights = scaled_dot_product_attention(*qkv, mask=mask)
    assert not torch.isnan(output).any() and not torch.isnan(weights).any()
    assert (weights[..., 2, :] == 0).all() and (output[..., 2, :] == 0).all()
    # the other rows are untouched by the empty one
    torch.testing.assert_close(weights[..., [0, 1, 3], :].sum(dim=-1), torch.ones(BATCH, HEADS, 3))


def test_fully_masked_row_has_zero_finite_gradients(qkv: QKV) -> None:
    query, key, value = (tensor.clone().requires_grad_() for tensor in qkv)
    mask = torch.ones(N, M, dtype=torch.bool)
    mask[1] = False
    output, _ = scaled_dot_product_attention(query, key, value, mask)
    output.sum().backward()
    for tensor in (query, key, value):
        assert torch.isfinite(tensor.grad).all()  # type: ignore[arg-type]
    assert (query.grad[..., 1, :] == 0).all()  # type: ignore[index]


def test_empty_sequence_in_a_batch(qkv: QKV) -> None:
    mask = padding_mask(torch.tensor([0, 4]), max_len=M)[:, None]
    output, weights = scaled_dot_product_attention(*qkv, mask=mask)
    assert (weights[0] == 0).all() and (output[0] == 0).all()
    torch.testing.assert_close(weights[1].sum(dim=-1), torch.ones(HEADS, N))


# --- gradients ---------------------------------------------------------------------------------


def test_gradcheck_with_and_without_mask():
    generator = torch.Generator().manual_seed(2)
    query, key, value = (
        torch.randn(2, 3, d, generator=generator, dtype=torch.float64, requires_grad=True) for d in (4, 4, 2)
    )
    mask = torch.tensor([[True, False, True], [True, True, False], [False, False, False]])
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v)[0], (query, key, value))
    assert torch.autograd.gradcheck(lambda q, k, v: scaled_dot_product_attention(q, k, v, mask)[0], (query, key, value))


# --- input validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (((N, D_K), (M, D_K + 1), (M, D_V)), "same last dimension d_k"),
        (((N, D_K), (M, D_K), (M + 1, D_V)), "same length m"),
        (((D_K,), (M, D_K), (M, D_V)), "query needs at least 2 dimensions"),
        (((N, D_K), (D_K,), (M, D_V)), "key needs at least 2 dimensions"),
        (((N, D_K), (M, D_K), (D_V,)), "value needs at least 2 dimensions"),
        (((2, N, D_K), (3, M, D_K), (3, M, D_V)), r"leading \(batch\) dimensions .* do not broadcast"),
    ],
)
def test_bad_shapes_raise_value_error_naming_the_problem(shapes, message):
    query, key, value = (torch.randn(*shape) for shape in shapes)
    with pytest.raises(ValueError, match=message):
        scaled_dot_product_attention(query, key, value)


def test_mask_that_does_not_broadcast_names_both_shapes(qkv: QKV) -> None:
    with pytest.raises(ValueError, match=r"mask of shape \(4, 5\) .* scores' shape \(2, 3, 4, 6\)"):
        scaled_dot_product_attention(*qkv, mask=torch.ones(N, M - 1, dtype=torch.bool))


def test_padding_mask_without_head_dim_is_rejected_not_misapplied(qkv: QKV) -> None:
    # (batch, 1, m) against (batch, heads, n, m) would align batch with heads: refuse it.
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention(*qkv, mask=padding_mask(torch.tensor([6, 3])))


def test_mask_may_not_add_dimensions():
    query, key, value = torch.randn(N, D_K), torch.randn(M, D_K), torch.randn(M, D_V)
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention(query, key, value, torch.ones(2, N, M, dtype=torch.bool))


@pytest.mark.parametrize("mask", [torch.ones(N, M), torch.ones(N, M, dtype=torch.int64), [[True] * M] * N])
def test_non_bool_mask_is_rejected(qkv, mask):
    with pytest.raises(ValueError, match="mask must be a bool tensor, True where a query may attend"):
        scaled_dot_product_attention(*qkv, mask=mask)  # type: ignore[misc]


# --- causal_mask -------------------------------------------------------------------------------


def test_causal_mask_values():
    mask = causal_mask(4)
    assert mask.dtype == torch.bool and mask.shape == (4, 4)
    assert mask.tolist() == [
        [True, False, False, False],
        [True, True, False, False],
        [True, True, True, False],
        [True, True, True, True],
    ]
    assert causal_mask(0).shape == (0, 0)
    assert causal_mask(3, device="cpu").device.type == "cpu"


# True was once a silent 1 x 1 mask: Python counts a bool as an integer.
@pytest.mark.parametrize(
    ("n", "message"),
    [(-1, "at least 0"), (2.5, "integer"), ("3", "integer"), (True, "n must be an integer, got n=True")],
)
def test_causal_mask_validation(n, message):
    with pytest.raises(ValueError, match=message):
        causal_mask(n)


# --- padding_mask ------------------------------------------------------------------------------


def test_padding_mask_values_and_shape():
    mask = padding_mask(torch.tensor([3, 1, 0]), max_len=4)
    assert mask.dtype == torch.bool and mask.shape == (3, 1, 4)
    assert mask[:, 0].tolist() == [
        [True, True, True, False],
        [True, False, False, False],
        [False, False, False, False],
    ]


def test_padding_mask_defaults_to_the_longest_and_accepts_a_list():
    assert padding_mask([2, 5]).shape == (2, 1, 5)
    assert padding_mask([2, 5])[0, 0].tolist() == [True, True, False, False, False]


def test_padding_mask_broadcasts_over_queries():
    x = torch.randn(2, 5, 4)
    _, weights = scaled_dot_product_attention(x, x, x, padding_mask([5, 2]))
    assert (weights[1, :, 2:] == 0).all() and (weights[1, :, :2] > 0).all()


@pytest.mark.parametrize(
    ("lengths", "max_len", "message"),
    [
        ([3, -1], None, "non-negative"),
        ([3, 5], 4, "longer than max_len=4"),
        ([1, 2], -1, "max_len must be at least 0"),
        ([1], 2.5, "max_len must be an integer, got max_len=2.5"),  # once a silent mask of width 3
        ([1], True, "max_len must be an integer, got max_len=True"),
        ([1.0, 2.0], None, "1-D tensor of integers"),
        ([[1, 2]], None, "1-D tensor of integers"),
        ([True, False], None, "1-D tensor of integers"),
    ],
)
def test_padding_mask_validation(lengths, max_len, message):
    with pytest.raises(ValueError, match=message):
        padding_mask(torch.tensor(lengths), max_len=max_len)
