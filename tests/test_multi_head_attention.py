"""Unit tests for transformer_book.model (exported from book/multi-head-attention.md)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from torch import nn

from transformer_book.model import MultiHeadAttention, causal_mask, merge_heads, padding_mask, split_heads
from transformer_book.torch_loading import load_torch_weights

BATCH, N, M, D_MODEL, HEADS = 2, 5, 7, 12, 3


def torch_pair(bias: bool = True, seed: int = 0) -> tuple[MultiHeadAttention, nn.MultiheadAttention]:
    """The book's module with the weights of a randomly initialised nn.MultiheadAttention.

    PyTorch initialises its biases to zero; they are drawn at random here so that a bias
    copied to the wrong place cannot go unnoticed.
    """
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(D_MODEL, HEADS, bias=bias, batch_first=True)
    if bias:
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    ours = MultiHeadAttention(D_MODEL, HEADS, bias=bias)
    load_torch_weights(ours, theirs)
    return ours, theirs


def reference_multi_head(module: MultiHeadAttention, query, key, value, mask=None):
    """The paper's formula with an explicit loop over heads, independent of split_heads/merge_heads."""
    d_head = module.d_head
    heads, all_weights = [], []
    for i in range(module.num_heads):
        rows = slice(i * d_head, (i + 1) * d_head)
        q = query @ module.w_q.weight[rows].T + module.w_q.bias[rows]
        k = key @ module.w_k.weight[rows].T + module.w_k.bias[rows]
        v = value @ module.w_v.weight[rows].T + module.w_v.bias[rows]
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        heads.append(weights @ v)
        all_weights.append(weights)
    return module.w_o(torch.cat(heads, dim=-1)), torch.stack(all_weights, dim=1)


# --- split and merge ---------------------------------------------------------------------------


def test_split_heads_gives_each_head_its_block_of_columns():
    x = torch.randn(BATCH, N, D_MODEL)
    split = split_heads(x, HEADS)
    d_head = D_MODEL // HEADS
    assert split.shape == (BATCH, HEADS, N, d_head)
    for head in range(HEADS):
        assert torch.equal(split[:, head], x[:, :, head * d_head : (head + 1) * d_head])


def test_split_heads_is_a_view():
    x = torch.randn(BATCH, N, D_MODEL)
    assert split_heads(x, HEADS).untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 6, 12])
def test_merge_heads_inverts_split_heads(num_heads):
    x = torch.randn(BATCH, N, D_MODEL)
    assert torch.equal(merge_heads(split_heads(x, num_heads)), x)
    # and the other way round, on a tensor stored head by head as attention returns it
    heads = torch.randn(BATCH, num_heads, N, D_MODEL // num_heads)
    assert merge_heads(heads).shape == (BATCH, N, D_MODEL)
    assert torch.equal(split_heads(merge_heads(heads), num_heads), heads)


def test_split_heads_is_not_a_plain_view_without_transpose():
    # The common bug x.view(batch, h, n, d_head) also round-trips; the heads must differ from it.
    x = torch.arange(BATCH * N * D_MODEL, dtype=torch.float32).reshape(BATCH, N, D_MODEL)
    assert not torch.equal(split_heads(x, HEADS), x.view(BATCH, HEADS, N, D_MODEL // HEADS))


def test_split_heads_errors():
    with pytest.raises(ValueError, match=r"d_model=12 is not divisible by num_heads=5"):
        split_heads(torch.randn(BATCH, N, 12), 5)
    with pytest.raises(ValueError, match=r"num_heads must be a positive integer, got num_heads=0"):
        split_heads(torch.randn(BATCH, N, 12), 0)
    with pytest.raises(ValueError, match=r"split_heads needs x of shape \(batch, n, d_model\), got shape \(5, 12\)"):
        split_heads(torch.randn(N, 12), 3)


def test_merge_heads_error():
    with pytest.raises(ValueError, match=r"merge_heads needs x of shape .*got shape \(2, 5, 12\)"):
        merge_heads(torch.randn(BATCH, N, 12))


# --- the module --------------------------------------------------------------------------------


def test_attributes_and_parameter_count():
    module = MultiHeadAttention(D_MODEL, HEADS)
    assert (module.d_model, module.num_heads, module.d_head) == (D_MODEL, HEADS, D_MODEL // HEADS)
    for layer in [module.w_q, module.w_k, module.w_v, module.w_o]:
        assert isinstance(layer, nn.Linear) and layer.weight.shape == (D_MODEL, D_MODEL)
    assert sum(p.numel() for p in module.parameters()) == 4 * D_MODEL**2 + 4 * D_MODEL
    paper = MultiHeadAttention(512, 8)
    assert sum(p.numel() for p in paper.parameters()) == 1_050_624
    without_bias = MultiHeadAttention(D_MODEL, HEADS, bias=False)
    assert sum(p.numel() for p in without_bias.parameters()) == 4 * D_MODEL**2


def test_self_attention_shapes():
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    output, weights = module(x, x, x)
    assert output.shape == (BATCH, N, D_MODEL)
    assert weights.shape == (BATCH, HEADS, N, N)
    torch.testing.assert_close(weights.sum(-1), torch.ones(BATCH, HEADS, N))


def test_cross_attention_shapes_with_m_different_from_n():
    module = MultiHeadAttention(D_MODEL, HEADS)
    query, memory = torch.randn(BATCH, N, D_MODEL), torch.randn(BATCH, M, D_MODEL)
    output, weights = module(query, memory, memory, mask=padding_mask([M, 3]))
    assert output.shape == (BATCH, N, D_MODEL)
    assert weights.shape == (BATCH, HEADS, N, M)
    assert (weights[1, :, :, 3:] == 0).all() and (weights[1, :, :, :3] > 0).all()


def test_matches_the_formula_with_a_loop_over_heads():
    module = MultiHeadAttention(D_MODEL, HEADS)
    query, memory = torch.randn(BATCH, N, D_MODEL), torch.randn(BATCH, M, D_MODEL)
    mask = padding_mask([M, 4]) & torch.rand(N, M).ge(0.3).index_fill(1, torch.tensor([0]), True)
    output, weights = module(query, memory, memory, mask=mask)
    expected_output, expected_weights = reference_multi_head(module, query, memory, memory, mask)
    torch.testing.assert_close(output, expected_output)
    torch.testing.assert_close(weights, expected_weights)


def test_heads_differ_and_see_the_whole_input():
    # Each head has its own projection of all d_model features: changing the last feature of the
    # input changes every head's weights, not only the last head's.
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(1, N, D_MODEL)
    _, weights = module(x, x, x)
    x_changed = x.clone()
    x_changed[..., -1] += 1.0
    _, weights_changed = module(x_changed, x_changed, x_changed)
    for head in range(HEADS):
        assert not torch.allclose(weights[:, head], weights_changed[:, head])
    assert not torch.allclose(weights[:, 0], weights[:, 1])


def test_one_head_and_many_heads_have_the_same_cost():
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(1, 16, 64)
    totals = []
    for num_heads in [1, 8]:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            MultiHeadAttention(64, num_heads)(x, x, x)
        totals.append(counter.get_total_flops() // 2)
    assert totals[0] == totals[1] == 4 * 16 * 64**2 + 2 * 16**2 * 64


# --- agreement with nn.MultiheadAttention ------------------------------------------------------

MASK_CASES = ["no mask", "key padding", "causal", "key padding and causal"]


def masks_for(case: str, n: int, m: int):
    """The book's mask (True = may attend) and the keyword arguments nn.MultiheadAttention needs (True = blocked)."""
    padding = padding_mask([m, 3])  # (batch, 1, m)
    causal = (causal_mask(n) if n == m else torch.ones(n, m, dtype=torch.bool).tril())[None]  # (1, n, m)
    if case == "no mask":
        return None, {}
    if case == "key padding":
        return padding, {"key_padding_mask": ~padding[:, 0]}
    if case == "causal":
        return causal, {"attn_mask": ~causal[0]}
    return padding & causal, {"key_padding_mask": ~padding[:, 0], "attn_mask": ~causal[0]}


@pytest.mark.parametrize("case", MASK_CASES)
def test_agrees_with_nn_multihead_attention_self_attention(case):
    ours, theirs = torch_pair()
    x = torch.randn(BATCH, N, D_MODEL)
    our_mask, their_masks = masks_for(case, N, N)
    our_output, our_weights = ours(x, x, x, mask=our_mask)
    their_output, their_weights = theirs(x, x, x, need_weights=True, average_attn_weights=False, **their_masks)
    assert (our_output - their_output).abs().max() <= 1e-6
    assert (our_weights - their_weights).abs().max() <= 1e-6


@pytest.mark.parametrize("case", MASK_CASES)
def test_agrees_with_nn_multihead_attention_cross_attention(case):
    ours, theirs = torch_pair(seed=1)
    query, memory = torch.randn(BATCH, N, D_MODEL), torch.randn(BATCH, M, D_MODEL)
    our_mask, their_masks = masks_for(case, N, M)
    our_output, our_weights = ours(query, memory, memory, mask=our_mask)
    their_output, their_weights = theirs(query, memory, memory, average_attn_weights=False, **their_masks)
    assert (our_output - their_output).abs().max() <= 1e-6
    assert (our_weights - their_weights).abs().max() <= 1e-6


def test_agrees_with_nn_multihead_attention_without_bias():
    ours, theirs = torch_pair(bias=False)
    assert ours.w_q.bias is None and ours.w_o.bias is None
    x = torch.randn(BATCH, N, D_MODEL)
    torch.testing.assert_close(ours(x, x, x)[0], theirs(x, x, x)[0], atol=1e-6, rtol=0)


def test_load_torch_weights_copies_every_block_in_place():
    ours, theirs = torch_pair()
    w_q, w_k, w_v = theirs.in_proj_weight.chunk(3)
    b_q, b_k, b_v = theirs.in_proj_bias.chunk(3)
    assert torch.equal(ours.w_q.weight, w_q) and torch.equal(ours.w_k.weight, w_k) and torch.equal(ours.w_v.weight, w_v)
    assert torch.equal(ours.w_q.bias, b_q) and torch.equal(ours.w_k.bias, b_k) and torch.equal(ours.w_v.bias, b_v)
    assert torch.equal(ours.w_o.weight, theirs.out_proj.weight) and torch.equal(ours.w_o.bias, theirs.out_proj.bias)
    # a copy, not shared storage: changing theirs leaves ours alone
    with torch.no_grad():
        theirs.in_proj_weight.zero_()
    assert not torch.equal(ours.w_q.weight, torch.zeros_like(ours.w_q.weight))


@pytest.mark.parametrize(
    ("theirs", "message"),
    [
        (lambda: nn.MultiheadAttention(15, HEADS, batch_first=True), r"sizes differ: theirs has embed_dim=15"),
        (lambda: nn.MultiheadAttention(D_MODEL, 4, batch_first=True), r"num_heads=4.*ours has d_model=12, num_heads=3"),
        (lambda: nn.MultiheadAttention(D_MODEL, HEADS, bias=False, batch_first=True), r"bias=False; ours .*bias=True"),
        (
            lambda: nn.MultiheadAttention(D_MODEL, HEADS, kdim=8, vdim=8, batch_first=True),
            r"separate key/value widths \(kdim=8",
        ),
        (
            lambda: nn.MultiheadAttention(D_MODEL, HEADS, add_bias_kv=True, batch_first=True),
            r"add_bias_kv or add_zero_attn",
        ),
        (
            lambda: nn.MultiheadAttention(D_MODEL, HEADS, add_zero_attn=True, batch_first=True),
            r"add_bias_kv or add_zero_attn",
        ),
    ],
    ids=["embed_dim", "num_heads", "bias", "kdim", "add_bias_kv", "add_zero_attn"],
)
def test_load_torch_weights_refuses_a_different_module(theirs, message):
    ours = MultiHeadAttention(D_MODEL, HEADS)
    before = ours.w_q.weight.clone()
    with pytest.raises(ValueError, match=message):
        load_torch_weights(ours, theirs())
    assert torch.equal(ours.w_q.weight, before)


# --- a query with nothing to attend to ---------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
def test_fully_blocked_query_gets_zero_weights_and_the_output_bias(bias):
    module = MultiHeadAttention(D_MODEL, HEADS, bias=bias)
    x = torch.randn(BATCH, N, D_MODEL)
    mask = torch.ones(1, N, N, dtype=torch.bool)
    mask[:, 2] = False
    output, weights = module(x, x, x, mask=mask)
    assert (weights[:, :, 2] == 0).all()
    expected = module.w_o.bias if bias else torch.zeros(D_MODEL)
    assert torch.equal(output[:, 2], expected.expand(BATCH, D_MODEL))
    assert not torch.isnan(output).any()
    torch.testing.assert_close(weights[:, :, [0, 1, 3, 4]].sum(-1), torch.ones(BATCH, HEADS, 4))


def test_empty_sequence_in_a_batch_gives_the_output_bias():
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    output, weights = module(x, x, x, mask=padding_mask([N, 0]))
    assert (weights[1] == 0).all()
    assert torch.equal(output[1], module.w_o.bias.expand(N, D_MODEL))
    assert (weights[0].sum(-1) - 1).abs().max() < 1e-6


def test_gradients_stay_finite_with_a_fully_blocked_query():
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL, requires_grad=True)
    mask = torch.ones(1, N, N, dtype=torch.bool)
    mask[:, 0] = False
    module(x, x, x, mask=mask)[0].sum().backward()
    assert torch.isfinite(x.grad).all()  # type: ignore[arg-type]
    assert all(torch.isfinite(p.grad).all() for p in module.parameters())  # type: ignore[arg-type]


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("d_model", "num_heads", "message"),
    [
        (10, 3, r"d_model=10 is not divisible by num_heads=3"),
        (512, 6, r"d_model=512 is not divisible by num_heads=6"),
        (0, 2, r"d_model must be a positive integer, got d_model=0"),
        (8, -2, r"num_heads must be a positive integer, got num_heads=-2"),
        (8.0, 2, r"d_model must be a positive integer, got d_model=8.0"),
    ],
)
def test_constructor_errors(d_model, num_heads, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(d_model, num_heads)


def test_wrong_input_shapes_raise():
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    with pytest.raises(ValueError, match=r"query must have shape \(batch, length, d_model=12\), got \(2, 5, 8\)"):
        module(torch.randn(BATCH, N, 8), x, x)
    with pytest.raises(ValueError, match=r"key must have shape .*got \(5, 12\)"):
        module(x, torch.randn(N, D_MODEL), x)
    with pytest.raises(ValueError, match=r"key and value must have the same shape .*value \(2, 7, 12\)"):
        module(x, x, torch.randn(BATCH, M, D_MODEL))
    with pytest.raises(ValueError, match=r"same batch size, got query \(2, 5, 12\) and key \(3, 5, 12\)"):
        module(x, torch.randn(3, N, D_MODEL), torch.randn(3, N, D_MODEL))


@pytest.mark.parametrize(
    "bad_mask", [torch.ones(N, N), torch.ones(N, N, dtype=torch.int64), [[True] * N] * N], ids=["float", "int", "list"]
)
def test_mask_of_the_wrong_dtype_raises(bad_mask):
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    with pytest.raises(ValueError, match=r"mask must be a bool tensor, True where a query may attend"):
        module(x, x, x, mask=bad_mask)


@pytest.mark.parametrize(
    "bad_shape",
    [(1, N, N + 1), (3, N, N), (BATCH, 1, 1, N), (BATCH, HEADS, N, N)],
    ids=["wrong m", "wrong batch", "padding with a head dim", "per-head mask"],
)
def test_mask_of_the_wrong_shape_raises(bad_shape):
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    shape = "(" + ", ".join(str(size) for size in bad_shape) + ("," if len(bad_shape) == 1 else "") + ")"
    with pytest.raises(
        ValueError,
        match=rf"mask of shape {re.escape(shape)} does not broadcast to the scores' shape \(2, 5, 5\)"
        r".*one mask for all heads",
    ):
        module(x, x, x, mask=torch.ones(bad_shape, dtype=torch.bool))


@pytest.mark.parametrize("bad_shape", [(N, N), (BATCH, N), (N,), ()], ids=["2-D pattern", "2-D keys", "1-D", "0-D"])
def test_masks_of_fewer_than_three_dimensions_raise(bad_shape):
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    with pytest.raises(ValueError, match=r"mask must have 3 dimensions .*ambiguous"):
        module(x, x, x, mask=torch.ones(bad_shape, dtype=torch.bool))


def test_a_pytorch_style_key_padding_mask_is_refused_not_misread():
    # PyTorch's key_padding_mask is (batch, m); with batch == n it has the shape of an (n, m)
    # pattern. Broadcast as one, row b would mask query b's keys in every sequence: sequence 0,
    # which has no padding, lost keys 2 and 3. It must raise instead.
    module = MultiHeadAttention(8, 2)
    x = torch.randn(4, 4, 8)
    key_padding = torch.tensor([[True] * 4, [True, True, False, False], [True] * 3 + [False], [True] * 4])
    with pytest.raises(ValueError, match=r"ambiguous"):
        module(x, x, x, mask=key_padding)
    output, weights = module(x, x, x, mask=key_padding[:, None])  # the unambiguous spelling
    assert (weights[0] > 0).all() and (weights[1, :, :, 2:] == 0).all()


@pytest.mark.parametrize("good_shape", [(BATCH, 1, N), (1, N, N), (BATCH, N, N), (1, 1, N), (1, 1, 1)])
def test_masks_that_broadcast_are_accepted(good_shape):
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    output, weights = module(x, x, x, mask=torch.ones(good_shape, dtype=torch.bool))
    torch.testing.assert_close(output, module(x, x, x)[0])
    assert weights.shape == (BATCH, HEADS, N, N)


# --- the fused path (need_weights=False) ------------------------------------------------------


def fused_case_masks(batch: int, length: int) -> dict[str, torch.Tensor | None]:
    """The book's masks (True = may attend), plus one where a query may attend to no key at all."""
    padding = padding_mask(torch.tensor([length, length - 3]))
    causal = causal_mask(length)[None]
    blocked = torch.ones(batch, length, length, dtype=torch.bool)
    blocked[0, 2] = False
    return {
        "no mask": None,
        "padding": padding,
        "causal": causal,
        "padding and causal": padding & causal,
        "a query with no key": blocked,
        "cross-attention padding": padding_mask(torch.tensor([4, 2]), 5),
    }


FUSED_CASES = list(fused_case_masks(2, 7))


@pytest.mark.parametrize("case", FUSED_CASES)
def test_fused_path_equals_the_from_scratch_path_in_values_and_gradients(case: str) -> None:
    torch.manual_seed(0)
    batch, length, d_model = 2, 7, 16
    module = MultiHeadAttention(d_model, 4)
    query = torch.randn(batch, length, d_model, requires_grad=True)
    memory_length = 5 if case == "cross-attention padding" else length
    memory = torch.randn(batch, memory_length, d_model, requires_grad=True)
    mask = fused_case_masks(batch, length)[case]
    results = []
    for need_weights in (True, False):
        output, weights = module(query, memory, memory, mask, need_weights=need_weights)
        assert (weights is None) == (not need_weights)
        gradients = torch.autograd.grad(output.square().sum(), [query, memory, *module.parameters()])
        results.append((output, gradients))
    (scratch, scratch_grads), (fused, fused_grads) = results
    assert torch.isfinite(fused).all() and all(torch.isfinite(gradient).all() for gradient in fused_grads)
    assert (fused - scratch).abs().max() < 1e-5  # float32 rounding: the fused kernel adds in another order
    for ours, theirs in zip(fused_grads, scratch_grads):
        assert (ours - theirs).abs().max() < 1e-5


def test_fused_path_gives_a_query_with_no_key_the_output_bias() -> None:
    torch.manual_seed(0)
    module = MultiHeadAttention(8, 2)
    x = torch.randn(2, 7, 8)
    output, _ = module(x, x, x, fused_case_masks(2, 7)["a query with no key"], need_weights=False)
    assert torch.equal(output[0, 2], module.w_o.bias)


@pytest.mark.parametrize("need_weights", [True, False], ids=["from scratch", "fused"])
def test_is_causal_equals_the_causal_mask_in_values_and_gradients(need_weights: bool) -> None:
    torch.manual_seed(0)
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL, requires_grad=True)
    by_mask, _ = module(x, x, x, causal_mask(N)[None], need_weights=need_weights)
    (mask_gradient,) = torch.autograd.grad(by_mask.sum(), x)
    by_flag, weights = module(x, x, x, need_weights=need_weights, is_causal=True)
    (flag_gradient,) = torch.autograd.grad(by_flag.sum(), x)
    torch.testing.assert_close(by_flag, by_mask)
    torch.testing.assert_close(flag_gradient, mask_gradient)
    if need_weights:  # the from-scratch path writes the pattern out: no weight above the diagonal
        assert weights is not None and not weights.triu(1).any()


def test_the_fused_path_hands_pytorch_no_mask_for_the_causal_case(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    module = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(BATCH, N, D_MODEL)
    module(x, x, x, need_weights=False, is_causal=True)
    module(x, x, x, padding_mask(torch.tensor([N, 3]), N), need_weights=False)
    assert calls[0].get("attn_mask") is None and calls[0].get("is_causal") is True
    assert calls[1].get("attn_mask") is not None and not calls[1].get("is_causal", False)


def test_is_causal_refuses_a_mask_or_unequal_lengths() -> None:
    module = MultiHeadAttention(D_MODEL, HEADS)
    x, memory = torch.randn(BATCH, N, D_MODEL), torch.randn(BATCH, M, D_MODEL)
    with pytest.raises(ValueError, match="give no mask with it"):
        module(x, x, x, causal_mask(N)[None], is_causal=True)
    with pytest.raises(ValueError, match=f"{N} queries and {M} keys"):
        module(x, memory, memory, is_causal=True)
