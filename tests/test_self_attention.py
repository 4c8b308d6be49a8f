"""Unit tests for transformer_book.self_attention (exported from book/self-attention.md)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book.model import causal_mask, padding_mask
from transformer_book.self_attention import SelfAttention

BATCH, N, D_MODEL, D_K, D_V = 2, 5, 12, 4, 3  # every width different, so a mix-up shows as a shape error


@pytest.fixture
def module() -> SelfAttention:
    torch.manual_seed(0)
    return SelfAttention(D_MODEL, d_k=D_K, d_v=D_V)


@pytest.fixture
def x() -> torch.Tensor:
    return torch.randn(BATCH, N, D_MODEL, generator=torch.Generator().manual_seed(1))


def by_hand(module: SelfAttention, x: torch.Tensor, mask: torch.Tensor | None = None):
    """softmax(x W^Q (x W^K)^T / sqrt(d_k)) x W^V written from the nn.Linear weights (W = weight.T)."""

    def project(linear: nn.Linear) -> torch.Tensor:
        projected = x @ linear.weight.T
        return projected if linear.bias is None else projected + linear.bias

    query, key, value = project(module.w_q), project(module.w_k), project(module.w_v)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


# --- construction ------------------------------------------------------------------------------


def test_d_k_and_d_v_default_to_d_model():
    module = SelfAttention(D_MODEL)
    assert (module.d_model, module.d_k, module.d_v) == (D_MODEL, D_MODEL, D_MODEL)
    for linear in (module.w_q, module.w_k, module.w_v):
        assert linear.weight.shape == (D_MODEL, D_MODEL) and linear.bias is None
    # Each default is d_model, independently of the other width.
    only_d_k = SelfAttention(D_MODEL, d_k=D_K)
    assert (only_d_k.d_k, only_d_k.d_v, only_d_k.w_v.weight.shape) == (D_K, D_MODEL, (D_MODEL, D_MODEL))
    only_d_v = SelfAttention(D_MODEL, d_v=D_V)
    assert (only_d_v.d_k, only_d_v.d_v, only_d_v.w_k.weight.shape) == (D_MODEL, D_V, (D_MODEL, D_MODEL))


def test_projection_shapes_and_bias(module):
    assert module.w_q.weight.shape == (D_K, D_MODEL)
    assert module.w_k.weight.shape == (D_K, D_MODEL)
    assert module.w_v.weight.shape == (D_V, D_MODEL)
    assert all(linear.bias is None for linear in (module.w_q, module.w_k, module.w_v))
    with_bias = SelfAttention(D_MODEL, d_k=D_K, d_v=D_V, bias=True)
    assert [linear.bias.shape for linear in (with_bias.w_q, with_bias.w_k, with_bias.w_v)] == [(D_K,), (D_K,), (D_V,)]


def test_parameter_count():
    module = SelfAttention(512, d_k=64, d_v=64)
    assert sum(p.numel() for p in module.parameters()) == 3 * 512 * 64
    with_bias = SelfAttention(512, d_k=64, d_v=32, bias=True)
    assert sum(p.numel() for p in with_bias.parameters()) == 2 * 512 * 64 + 512 * 32 + 2 * 64 + 32


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"d_model": 0}, r"d_model must be a positive integer, got d_model=0"),
        ({"d_model": -3}, r"d_model must be a positive integer, got d_model=-3"),
        ({"d_model": 8.0}, r"d_model must be a positive integer, got d_model=8.0"),
        ({"d_model": True}, r"d_model must be a positive integer, got d_model=True"),
        ({"d_model": 8, "d_k": 0}, r"d_k must be a positive integer, got d_k=0"),
        ({"d_model": 8, "d_v": "4"}, r"d_v must be a positive integer, got d_v='4'"),
    ],
)
def test_bad_sizes_raise_value_error_naming_the_argument(arguments, message):
    with pytest.raises(ValueError, match=message):
        SelfAttention(**arguments)


# --- shapes ------------------------------------------------------------------------------------


def test_batched_shapes(module, x):
    output, weights = module(x)
    assert output.shape == (BATCH, N, D_V)
    assert weights.shape == (BATCH, N, N)


def test_unbatched_and_extra_leading_dims(module, x):
    output, weights = module(x[0])
    assert output.shape == (N, D_V) and weights.shape == (N, N)
    torch.testing.assert_close(output, module(x)[0][0])
    output, weights = module(x.reshape(1, BATCH, N, D_MODEL))
    assert output.shape == (1, BATCH, N, D_V) and weights.shape == (1, BATCH, N, N)


def test_weights_are_distributions(module, x):
    _, weights = module(x)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(BATCH, N))


# --- values ------------------------------------------------------------------------------------


@pytest.mark.parametrize("bias", [False, True])
def test_equals_the_formula_written_from_the_linear_weights(x, bias):
    torch.manual_seed(2)
    module = SelfAttention(D_MODEL, d_k=D_K, d_v=D_V, bias=bias)
    output, weights = module(x)
    expected_output, expected_weights = by_hand(module, x)
    torch.testing.assert_close(output, expected_output)
    torch.testing.assert_close(weights, expected_weights)


def test_scale_is_sqrt_d_k_not_sqrt_d_model(module, x):
    _, weights = module(x)
    query, key = module.w_q(x), module.w_k(x)
    wrong = torch.softmax(query @ key.transpose(-2, -1) / math.sqrt(D_MODEL), dim=-1)
    assert not torch.allclose(weights, wrong, atol=1e-3)


def test_agrees_with_torch_sdpa_on_the_projected_inputs(module, x):
    with torch.no_grad():
        query, key, value = module.w_q(x), module.w_k(x), module.w_v(x)
        ours, _ = module(x)
        theirs = F.scaled_dot_product_attention(query, key, value)
        ours_causal, _ = module(x, causal_mask(N))
        theirs_causal = F.scaled_dot_product_attention(query, key, value, is_causal=True)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)
    torch.testing.assert_close(ours_causal, theirs_causal, atol=1e-6, rtol=0)


def test_agrees_with_single_head_multihead_attention():
    """nn.MultiheadAttention with one head, no bias and an identity output projection is SelfAttention."""
    torch.manual_seed(3)
    ours = SelfAttention(D_MODEL)
    theirs = nn.MultiheadAttention(D_MODEL, num_heads=1, bias=False, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
        theirs.out_proj.weight.copy_(torch.eye(D_MODEL))
    x = torch.randn(BATCH, N, D_MODEL)
    mask = causal_mask(N)
    with torch.no_grad():
        our_output, our_weights = ours(x, mask)
        their_output, their_weights = theirs(x, x, x, attn_mask=~mask)  # their True = blocked
    torch.testing.assert_close(our_output, their_output)
    torch.testing.assert_close(our_weights, their_weights)


def test_gradients_reach_all_three_projections(module, x):
    output, _ = module(x)
    (output * torch.randn_like(output)).sum().backward()
    for linear in (module.w_q, module.w_k, module.w_v):
        assert linear.weight.grad is not None and linear.weight.grad.abs().sum() > 0


# --- permutation equivariance -------------------------------------------------------------------


def test_permutation_equivariance(module, x):
    permutation = torch.tensor([3, 0, 4, 1, 2])
    with torch.no_grad():
        output, weights = module(x)
        permuted_output, permuted_weights = module(x[:, permutation])
    torch.testing.assert_close(permuted_output, output[:, permutation], atol=1e-6, rtol=0)
    torch.testing.assert_close(permuted_weights, weights[:, permutation][:, :, permutation], atol=1e-6, rtol=0)
    assert not torch.allclose(permuted_output, output, atol=1e-3)  # the permutation did change the order


def test_a_causal_mask_breaks_equivariance_but_a_permuted_mask_keeps_it(module, x):
    permutation = torch.tensor([4, 2, 0, 3, 1])
    mask = causal_mask(N)
    with torch.no_grad():
        output, _ = module(x, mask)
        broken, _ = module(x[:, permutation], mask)
        kept, _ = module(x[:, permutation], mask[permutation][:, permutation])
    assert not torch.allclose(broken, output[:, permutation], atol=1e-3)
    torch.testing.assert_close(kept, output[:, permutation], atol=1e-6, rtol=0)


# --- masks -------------------------------------------------------------------------------------


def test_causal_mask(module, x):
    output, weights = module(x, causal_mask(N))
    assert (weights.triu(diagonal=1) == 0).all()
    torch.testing.assert_close(weights[:, 0, 0], torch.ones(BATCH))
    torch.testing.assert_close(output, by_hand(module, x, causal_mask(N))[0])


def test_padding_mask_per_sequence(module, x):
    mask = padding_mask(torch.tensor([5, 3]))  # (batch, 1, n)
    output, weights = module(x, mask)
    assert (weights[1, :, 3:] == 0).all() and (weights[1, :, :3] > 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(BATCH, N))
    # The real tokens of the short sequence do not depend on its padding.
    changed = x.clone()
    changed[1, 3:] = torch.randn(2, D_MODEL)
    torch.testing.assert_close(module(changed, mask)[0][1, :3], output[1, :3])


def test_diagonal_mask_keeps_tokens_from_attending_to_themselves(module, x):
    _, weights = module(x, ~torch.eye(N, dtype=torch.bool))
    assert (weights.diagonal(dim1=-2, dim2=-1) == 0).all()


@pytest.mark.parametrize(
    ("mask", "message"),
    [
        (torch.ones(N, N + 1, dtype=torch.bool), r"mask of shape \(5, 6\) does not broadcast"),
        (torch.ones(N, N), "mask must be a bool tensor"),
    ],
)
def test_bad_mask_is_rejected(module, x, mask, message):
    with pytest.raises(ValueError, match=message):
        module(x, mask)


# --- input validation --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(BATCH, N, D_MODEL + 1), (N, D_MODEL - 1), (BATCH, N, D_K)])
def test_wrong_last_dimension_raises_value_error(module, shape):
    expected = rf"x's last dimension must be d_model={D_MODEL}, got shape \({', '.join(map(str, shape))}\)"
    with pytest.raises(ValueError, match=expected):
        module(torch.randn(*shape))


def test_one_dimensional_input_raises_value_error(module):
    with pytest.raises(ValueError, match=r"x needs at least 2 dimensions \(\.\.\., n, d_model\), got shape \(12,\)"):
        module(torch.randn(D_MODEL))
