"""Unit tests for transformer_book.modern_decoder (exported from book/modern-decoder.md) and for the
options of the book's classes that a Llama block needs: RMSNorm, SwiGLU without biases, grouped-query
attention (num_kv_heads), RoPE inside attention, positions="none" and an untied head. Each option is
held to PyTorch where PyTorch has one, and the loader to transformers' LlamaForCausalLM on random
tiny configurations (nothing is downloaded)."""

from __future__ import annotations

import copy
import math
import pickle
import re
import warnings
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from transformer_book import count_parameters
from transformer_book.decoding import IncrementalDecoder, generate
from transformer_book.model import (
    Decoder,
    DecoderLayer,
    DecoderOnlyTransformer,
    LayerNorm,
    MultiHeadAttention,
    NoPositionalEncoding,
    PositionwiseFeedForward,
    RMSNorm,
    SublayerConnection,
    apply_rope,
    make_norm,
    repeat_kv_heads,
    rotate_heads,
)
from transformer_book.modern_decoder import (
    LLAMA3_SCALING,
    Llama3Theta,
    cache_bytes,
    interleave_rotary_rows,
    kv_cache_bytes,
    llama3_inverse_frequencies,
    llama_rope,
    llama_rope_parameters,
    llama_rope_theta,
)
from transformer_book.pretrained import llama_from_huggingface
from transformer_book.torch_loading import load_torch_layer_norm, load_torch_weights

with warnings.catch_warnings():  # transformers imports tqdm.auto, which warns where ipywidgets is missing
    warnings.simplefilter("ignore")
    from transformers import LlamaConfig, LlamaForCausalLM
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm
    from transformers.utils import logging as transformers_logging

transformers_logging.set_verbosity_error()


def random_llama(**changes: object) -> LlamaForCausalLM:
    """A random Llama with GQA (4 query heads, 2 kv heads), an untied head, rope_theta 5e5 and random norm gains."""
    settings: dict[str, object] = dict(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=56,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=24,
        rope_theta=500_000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=60,
    )
    settings.update(changes)
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**settings)).eval()
    with torch.no_grad():  # transformers starts the norms' gains at one: a gain copied to the wrong place would hide
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.uniform_(0.5, 1.5)
    return model


def without_float32_islands(theirs: LlamaForCausalLM) -> LlamaForCausalLM:
    """A float64 copy of theirs whose RoPE angles and RMSNorms, which transformers computes in float32
    whatever the model's dtype, are computed in float64 with the same formulas (for rope_type "llama3",
    llama3_inverse_frequencies, which test_llama3_inverse_frequencies_equal_transformers holds to theirs)."""
    theirs = copy.deepcopy(theirs).to(torch.float64)
    config = theirs.config
    parameters, d = llama_rope_parameters(config), config.hidden_size // config.num_attention_heads
    frequencies = float(parameters["rope_theta"]) ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    if parameters["rope_type"] == "llama3":
        frequencies = llama3_inverse_frequencies(frequencies, **{name: parameters[name] for name in LLAMA3_SCALING})

    def angles(x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        both = torch.cat([position_ids[..., None].double() * frequencies] * 2, dim=-1)
        return both.cos().to(x.dtype), both.sin().to(x.dtype)

    theirs.model.rotary_emb.forward = angles

    def float64_norm(norm: LlamaRMSNorm) -> None:
        norm.forward = lambda x: (
            norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
        )

    for module in theirs.modules():
        if isinstance(module, LlamaRMSNorm):
            float64_norm(module)
    return theirs


def tokens(model: LlamaForCausalLM, batch: int = 3, length: int = 24) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, model.config.vocab_size, (batch, length), generator=generator)


# RMSNorm


def test_rms_norm_equals_pytorch_and_transformers() -> None:
    torch.manual_seed(0)
    ours = RMSNorm(24, eps=1e-6).double()
    with torch.no_grad():
        ours.weight.normal_()
    torch_norm, their_norm = nn.RMSNorm(24, eps=1e-6).double(), LlamaRMSNorm(24, eps=1e-6).double()
    torch_norm.load_state_dict(ours.state_dict())
    their_norm.load_state_dict(ours.state_dict())
    x = 3 * torch.randn(2, 5, 24, dtype=torch.float64) + 1
    assert (ours(x) - torch_norm(x)).abs().max() < 1e-12
    expected = ours.weight * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)  # Llama's formula
    assert (ours(x) - expected).abs().max() < 1e-13
    # LlamaRMSNorm normalises in float32 whatever the input: float32 rounding.
    assert (ours(x) - their_norm(x)).abs().max() < 1e-5
    assert count_parameters(ours) == 24 and not hasattr(ours, "bias")


def test_rms_norm_option_of_the_sublayer_and_its_errors() -> None:
    sublayer = SublayerConnection(16, norm_first=True, norm="rms", eps=1e-6)
    assert isinstance(sublayer.norm, RMSNorm) and sublayer.norm.eps == 1e-6
    assert isinstance(SublayerConnection(16).norm, LayerNorm)
    with pytest.raises(ValueError, match="unknown norm 'batch'; choose one of 'layer', 'rms'"):
        make_norm("batch", 16)
    with pytest.raises(ValueError, match="eps must be positive"):
        RMSNorm(16, eps=0.0)
    with pytest.raises(ValueError, match="d_model=16"):
        RMSNorm(16)(torch.randn(2, 15))
    with pytest.raises(ValueError, match="ours is a RMSNorm, not a LayerNorm"):
        load_torch_layer_norm(sublayer.norm, nn.LayerNorm(16))


def test_pre_ln_decoder_ends_with_the_chosen_norm() -> None:
    decoder = Decoder(1, 16, 2, 32, norm_first=True, cross_attention=False, norm="rms", norm_eps=1e-6)
    assert isinstance(decoder.norm, RMSNorm) and decoder.norm.eps == 1e-6
    layer = cast(DecoderLayer, decoder.layers[0])
    assert isinstance(layer.self_attention_sublayer.norm, RMSNorm)
    assert isinstance(layer.feed_forward_sublayer.norm, RMSNorm)


# SwiGLU and biases


def test_swiglu_equals_transformers_llama_mlp() -> None:
    torch.manual_seed(0)
    ours = PositionwiseFeedForward(32, 56, activation="swiglu", bias=False).double()
    config = LlamaConfig(hidden_size=32, intermediate_size=56, hidden_act="silu", mlp_bias=False)
    theirs = LlamaMLP(config).double()
    assert ours.linear_3 is not None
    with torch.no_grad():
        ours.linear_1.weight.copy_(theirs.gate_proj.weight)
        ours.linear_3.weight.copy_(theirs.up_proj.weight)
        ours.linear_2.weight.copy_(theirs.down_proj.weight)
    x = torch.randn(3, 7, 32, dtype=torch.float64)
    assert (ours(x) - theirs(x)).abs().max() < 1e-13
    by_hand = F.silu(x @ ours.linear_1.weight.T) * (x @ ours.linear_3.weight.T) @ ours.linear_2.weight.T
    assert (ours(x) - by_hand).abs().max() < 1e-13
    assert count_parameters(ours) == 3 * 32 * 56


def test_bias_option_and_default_feed_forward() -> None:
    no_bias = PositionwiseFeedForward(8, 16, bias=False)
    assert no_bias.linear_1.bias is None and no_bias.linear_2.bias is None and no_bias.linear_3 is None
    assert count_parameters(PositionwiseFeedForward(8, 16)) == 2 * 8 * 16 + 16 + 8
    with pytest.raises(ValueError, match=re.escape("choose one of 'relu', 'gelu', 'gelu_tanh', 'swiglu'")):
        PositionwiseFeedForward(8, 16, activation="geglu")
    attention = MultiHeadAttention(8, 2, bias=False, num_kv_heads=1)
    assert all(layer.bias is None for layer in (attention.w_q, attention.w_k, attention.w_v, attention.w_o))


def test_defaults_draw_the_same_numbers_as_before() -> None:
    """Options left off draw no extra random numbers: the same seed gives the same weights."""
    torch.manual_seed(3)
    plain = MultiHeadAttention(16, 4)
    torch.manual_seed(3)
    explicit = MultiHeadAttention(16, 4, num_kv_heads=4, rope_theta=None)
    for (name, ours), (_, theirs) in zip(plain.state_dict().items(), explicit.state_dict().items(), strict=True):
        assert torch.equal(ours, theirs), name
    x = torch.randn(2, 5, 16)
    assert rotate_heads(x, None) is x
    split = x.view(2, 5, 4, 4).transpose(1, 2)
    assert repeat_kv_heads(split, 4) is split


@pytest.mark.parametrize(
    ("num_heads", "message"),
    [
        (4, "num_heads must be a positive multiple of x's 3 key-value heads, got num_heads=4"),  # once x unchanged
        (2, "num_heads must be a positive multiple of x's 3 key-value heads, got num_heads=2"),  # once x unchanged
        (0, "num_heads must be a positive integer, got num_heads=0"),
        (6.0, "num_heads must be a positive integer, got num_heads=6.0"),
    ],
)
def test_repeat_kv_heads_refuses_a_head_count_its_heads_do_not_divide(num_heads: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        repeat_kv_heads(torch.zeros(1, 3, 2, 4), num_heads)  # type: ignore[arg-type]


def test_repeat_kv_heads_takes_a_numpy_head_count() -> None:
    x = torch.randn(1, 3, 2, 4)
    assert torch.equal(repeat_kv_heads(x, np.int64(6)), repeat_kv_heads(x, 6))  # type: ignore[arg-type]


# Grouped-query and multi-query attention


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("need_weights", [True, False])
def test_grouped_query_attention_equals_pytorch_enable_gqa(num_kv_heads: int, need_weights: bool) -> None:
    torch.manual_seed(0)
    attention = MultiHeadAttention(32, 4, num_kv_heads=num_kv_heads).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64)
    lengths = torch.tensor([6, 4])
    mask = (torch.arange(6)[None, :] < lengths[:, None])[:, None, :]  # (batch, 1, m) padding
    with torch.no_grad():
        q, k, v = (
            projection(x).view(2, 6, -1, 8).transpose(1, 2)
            for projection in (attention.w_q, attention.w_k, attention.w_v)
        )
        assert k.shape[1] == num_kv_heads
        cases: list[tuple[dict[str, Any], dict[str, Any]]] = [
            ({"is_causal": True}, {"is_causal": True}),
            ({"mask": mask}, {"attn_mask": mask[:, None]}),
        ]
        for kwargs, torch_kwargs in cases:
            ours, weights = attention(x, x, x, need_weights=need_weights, **kwargs)
            heads = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **torch_kwargs)
            repeated = F.scaled_dot_product_attention(
                q, k.repeat_interleave(4 // num_kv_heads, 1), v.repeat_interleave(4 // num_kv_heads, 1), **torch_kwargs
            )
            theirs = attention.w_o(heads.transpose(1, 2).reshape(2, 6, 32))
            assert (heads - repeated).abs().max() < 1e-13
            assert (ours - theirs).abs().max() < 1e-12
            assert (weights is None) != need_weights
            if weights is not None:
                assert weights.shape == (2, 4, 6, 6)
    assert count_parameters(attention) == 2 * (32 * 32 + 32) + 2 * (32 * 8 * num_kv_heads + 8 * num_kv_heads)


def test_num_kv_heads_must_divide_num_heads() -> None:
    with pytest.raises(ValueError, match=re.escape("num_kv_heads=3 does not divide num_heads=4")):
        MultiHeadAttention(32, 4, num_kv_heads=3)
    with pytest.raises(ValueError, match="num_kv_heads must be a positive integer"):
        MultiHeadAttention(32, 4, num_kv_heads=0)
    with pytest.raises(ValueError, match="grouped key-value heads or RoPE"):
        load_torch_weights(MultiHeadAttention(32, 4, num_kv_heads=2), nn.MultiheadAttention(32, 4, batch_first=True))


# RoPE inside attention


def test_rotate_heads_is_apply_rope_with_its_base() -> None:
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    assert torch.equal(rotate_heads(x, 5e5, start=4), apply_rope(x, torch.arange(4, 11), 5e5))
    x32 = torch.randn(2, 3, 7, 8)
    assert torch.equal(rotate_heads(x32, 10_000.0), apply_rope(x32, torch.arange(7)))


def test_rope_scores_depend_only_on_the_offset() -> None:
    """Shifting every position by the same amount leaves RoPE attention's output unchanged."""
    torch.manual_seed(0)
    q, k = torch.randn(1, 2, 5, 8, dtype=torch.float64), torch.randn(1, 2, 5, 8, dtype=torch.float64)
    scores = rotate_heads(q, 1e4) @ rotate_heads(k, 1e4).transpose(-1, -2)
    shifted = rotate_heads(q, 1e4, start=37) @ rotate_heads(k, 1e4, start=37).transpose(-1, -2)
    assert (scores - shifted).abs().max() < 1e-12


def test_rope_needs_an_even_head_width_and_a_positive_base() -> None:
    with pytest.raises(ValueError, match="RoPE needs a positive rope_theta and an even d_head"):
        MultiHeadAttention(12, 4, rope_theta=1e4)  # d_head = 3
    with pytest.raises(ValueError, match="RoPE needs a positive rope_theta"):
        MultiHeadAttention(16, 4, rope_theta=0.0)


def test_interleave_rotary_rows_pairs_i_with_i_plus_half() -> None:
    rows = torch.arange(16.0)[:, None]  # two heads of width 8
    order = interleave_rotary_rows(rows, 2).flatten().tolist()
    assert order == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]


# The KV cache with grouped heads and RoPE


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_cache_holds_only_the_kv_heads_and_matches_the_full_forward(num_kv_heads: int) -> None:
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(
        40,
        d_model=32,
        num_heads=4,
        num_layers=2,
        d_ff=48,
        max_len=16,
        positions="none",
        scale_embeddings=False,
        activation="swiglu",
        norm="rms",
        bias=False,
        tie_embeddings=False,
        num_kv_heads=num_kv_heads,
        rope_theta=1e4,
    ).double()
    model.eval()
    ids = torch.randint(0, 40, (2, 12))
    decoder = IncrementalDecoder(model, None, batch_size=2)
    stepped = torch.stack([decoder.step(ids[:, position]) for position in range(12)], dim=1)
    with torch.no_grad():
        full = model(ids)
    assert (stepped - full).abs().max() < 1e-12
    for cache, _ in decoder.caches:
        assert cache.keys is not None and cache.values is not None
        assert cache.keys.shape == cache.values.shape == (2, num_kv_heads, 12, 8)
    expected = kv_cache_bytes(
        num_layers=2, num_kv_heads=num_kv_heads, d_head=8, tokens=12, batch_size=2, bytes_per_number=8
    )
    assert cache_bytes(decoder) == expected


def test_cross_attention_with_grouped_heads_runs() -> None:
    layer = DecoderLayer(16, 4, 32, num_kv_heads=2)
    assert layer.cross_attention is not None and layer.cross_attention.num_kv_heads == 2
    assert layer.self_attention.rope_theta is None
    out = layer(torch.randn(2, 5, 16), torch.randn(2, 7, 16))
    assert out.shape == (2, 5, 16)


def test_no_positions_adds_nothing() -> None:
    encoding = NoPositionalEncoding(8, 10)
    x = torch.randn(2, 4, 8)
    assert torch.equal(encoding(x), x)
    assert count_parameters(encoding) == 0
    with pytest.raises(ValueError, match=re.escape("choose one of 'sinusoidal', 'learned', 'none'")):
        DecoderOnlyTransformer(10, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=4, positions="rotary")


def test_untied_head_has_its_own_matrix() -> None:
    tied = DecoderOnlyTransformer(10, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=4)
    untied = DecoderOnlyTransformer(10, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=4, tie_embeddings=False)
    assert tied.generator.projection.weight is tied.target_embedding.embedding.weight
    assert untied.generator.projection.weight is not untied.target_embedding.embedding.weight
    assert count_parameters(untied) == count_parameters(tied) + 10 * 8


# The loader


@pytest.mark.parametrize(
    "changes",
    [{}, {"num_key_value_heads": 1}, {"num_key_value_heads": 4, "tie_word_embeddings": True, "rope_theta": 10_000.0}],
    ids=["gqa-untied", "mqa", "mha-tied"],
)
def test_loader_gives_transformers_logits_in_float64(changes: dict[str, object]) -> None:
    theirs = random_llama(**changes)
    ours = llama_from_huggingface(theirs)
    assert not ours.training
    assert count_parameters(ours) == theirs.num_parameters()
    ids = tokens(theirs)
    with torch.no_grad():
        their_logits, our_logits = theirs(ids).logits, ours(ids)
    assert ((our_logits - their_logits).norm() / their_logits.norm()).item() < 1e-5  # float32
    theirs64 = without_float32_islands(theirs)
    ours64 = llama_from_huggingface(theirs64)
    with torch.no_grad():
        assert (ours64(ids) - theirs64(ids).logits).abs().max().item() < 1e-10
        # transformers' own float64 model, with its float32 RoPE angles and RMSNorm: float32 rounding
        as_is = copy.deepcopy(theirs).double()
        assert (ours64(ids) - as_is(ids).logits).abs().max().item() < 1e-4


def test_loader_reads_the_config_and_leaves_the_options_it_needs() -> None:
    theirs = random_llama()
    ours = llama_from_huggingface(theirs)
    layer = cast(DecoderLayer, ours.decoder.layers[0])
    assert layer.self_attention.num_kv_heads == 2 and layer.self_attention.rope_theta == 500_000.0
    assert isinstance(layer.self_attention_sublayer.norm, RMSNorm) and layer.self_attention_sublayer.norm.eps == 1e-5
    assert isinstance(ours.positional_encoding, NoPositionalEncoding)
    assert ours.generator.projection.weight is not ours.target_embedding.embedding.weight
    assert llama_rope(theirs.config) == ("default", 500_000.0)


def test_greedy_tokens_with_the_cache_equal_transformers_generate() -> None:
    theirs64 = without_float32_islands(random_llama())
    ours64 = llama_from_huggingface(theirs64)
    prompt = tokens(theirs64, batch=2, length=6)
    with torch.no_grad():
        their_tokens = theirs64.generate(prompt, max_new_tokens=18, do_sample=False, pad_token_id=60)[:, 6:]
    our_tokens = generate(
        ours64, None, prompt=prompt, max_new_tokens=18, choose=lambda logits: logits.argmax(dim=-1), end_id=60
    )
    for their_row, our_row in zip(their_tokens, our_tokens, strict=True):
        assert their_row[: len(our_row)].tolist() == our_row


def test_kv_cache_formula_equals_transformers_cache_tensors() -> None:
    for num_kv_heads in (4, 2, 1):
        theirs = random_llama(num_key_value_heads=num_kv_heads)
        with torch.no_grad():
            cache = theirs(tokens(theirs, batch=3, length=10), use_cache=True).past_key_values
        measured = sum(t.numel() * t.element_size() for layer in cache.layers for t in (layer.keys, layer.values))
        formula = kv_cache_bytes(
            num_layers=2, num_kv_heads=num_kv_heads, d_head=8, tokens=10, batch_size=3, bytes_per_number=4
        )
        assert measured == formula


def test_kv_cache_of_llama_3_8b() -> None:
    sizes = dict(num_layers=32, d_head=128, tokens=8_192, bytes_per_number=2)
    assert kv_cache_bytes(num_kv_heads=8, **sizes) == 2**30
    assert kv_cache_bytes(num_kv_heads=32, **sizes) == 4 * 2**30
    assert kv_cache_bytes(num_kv_heads=1, **sizes) == 2**27


def meta_llama(**changes: object) -> LlamaForCausalLM:
    """A one-layer transformers Llama on the meta device (no memory), with changes to its config."""
    with torch.device("meta"):
        return LlamaForCausalLM(
            LlamaConfig(
                vocab_size=16,
                hidden_size=32,
                intermediate_size=48,
                num_hidden_layers=1,
                num_attention_heads=4,
                **changes,
            )
        )


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"hidden_act": "gelu"}, "hidden_act='gelu' (the book's SwiGLU gates with 'silu')"),
        (
            {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}},
            "rope scaling of type 'linear' (the book's RoPE scales only as Llama 3.1's, 'llama3')",
        ),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1e4}},
            "rope scaling of type 'yarn' (the book's RoPE scales only as Llama 3.1's, 'llama3')",
        ),
        ({"attention_bias": True}, "attention_bias=True, mlp_bias=False"),
        ({"mlp_bias": True}, "attention_bias=False, mlp_bias=True"),
        ({"head_dim": 16}, "head_dim=16 (the book's heads have width hidden_size / num_attention_heads)"),
    ],
)
def test_loader_refuses_what_the_book_cannot_represent(changes: dict[str, object], message: str) -> None:
    theirs = meta_llama(**changes)
    with pytest.raises(ValueError, match=re.escape("DecoderOnlyTransformer cannot represent this Llama: ")) as error:
        llama_from_huggingface(theirs)
    assert message in str(error.value)


def test_loader_names_every_obstacle_at_once() -> None:
    theirs = meta_llama(hidden_act="relu", attention_bias=True)
    with pytest.raises(ValueError) as error:
        llama_from_huggingface(theirs)
    assert str(error.value).count(";") == 1


# Llama 3.1's RoPE scaling (rope_type "llama3")


def llama3_scaling(original: int = 16, factor: float = 8.0) -> dict[str, Any]:
    return {
        "factor": factor,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": original,
    }


@pytest.mark.parametrize(
    ("d_head", "theta", "scaling"),
    [
        (128, 500_000.0, llama3_scaling(8_192)),  # Llama 3.1 8B
        (64, 500_000.0, llama3_scaling(8_192, factor=32.0)),  # Llama 3.2 1B
        (32, 500_000.0, llama3_scaling(64)),  # the chapter's check
        (16, 10_000.0, {**llama3_scaling(40), "low_freq_factor": 2.0, "high_freq_factor": 5.0}),
    ],
)
def test_llama3_inverse_frequencies_equal_transformers(d_head: int, theta: float, scaling: dict[str, Any]) -> None:
    """The book's scaling, on transformers' float32 frequencies, gives exactly ROPE_INIT_FUNCTIONS["llama3"]'s;
    Llama3Theta's power, in float64, the same to float32 rounding."""
    config = LlamaConfig(
        hidden_size=4 * d_head,
        num_attention_heads=4,
        max_position_embeddings=16 * scaling["original_max_position_embeddings"],
        rope_theta=theta,
        rope_scaling={"rope_type": "llama3", **scaling},
    )
    theirs, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](config, "cpu")
    assert attention_factor == 1.0
    plain = 1.0 / (theta ** (torch.arange(0, d_head, 2, dtype=torch.int64).float() / d_head))  # theirs, unscaled
    assert torch.equal(llama3_inverse_frequencies(plain, **scaling), theirs)
    ours = Llama3Theta(theta, scaling) ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
    assert ours.dtype == torch.float64
    assert ((ours - theirs.double()).abs() / theirs.double()).max() < 1e-6
    assert not torch.equal(ours, plain.double())  # some pair is scaled


def test_llama3_scaling_keeps_the_fast_pairs_and_slows_the_slow() -> None:
    scaling = llama3_scaling(8_192)
    plain = 500_000.0 ** (-torch.arange(0, 128, 2, dtype=torch.float64) / 128)
    slowed = plain / llama3_inverse_frequencies(plain, **scaling)
    wavelengths = 2 * math.pi / plain
    assert (slowed[wavelengths < 2_048] == 1).all() and (slowed[wavelengths > 8_192] == 8).all()
    between = (wavelengths > 2_048) & (wavelengths < 8_192)
    assert between.any() and ((slowed[between] > 1) & (slowed[between] < 8)).all()
    assert (slowed.diff() >= 0).all()  # the slower the pair, the more it is slowed


def test_llama3_theta_is_theta_and_keeps_its_scaling() -> None:
    theta = Llama3Theta(500_000.0, llama3_scaling())
    assert theta == 500_000.0 and float(theta) == 500_000.0 and theta > 0
    assert repr(theta).startswith("Llama3Theta(500000.0, {'factor': 8.0")
    for copied in (copy.deepcopy(theta), pickle.loads(pickle.dumps(theta))):
        assert isinstance(copied, Llama3Theta) and copied == theta and copied.scaling == theta.scaling
    with pytest.raises(ValueError, match="llama3 scaling takes exactly factor, low_freq_factor"):
        Llama3Theta(1e4, {"factor": 8.0})
    with pytest.raises(ValueError, match="high_freq_factor > low_freq_factor > 0"):
        Llama3Theta(1e4, {**llama3_scaling(), "high_freq_factor": 1.0})
    with pytest.raises(ValueError, match="theta must be positive"):
        Llama3Theta(0.0, llama3_scaling())


def test_rotate_heads_and_apply_rope_rotate_by_the_scaled_frequencies() -> None:
    """rotate_heads and apply_rope take their frequencies as rope_theta ** (-2i/d): with a Llama3Theta,
    the llama3 ones. Written out here, so that a change to how they compute it fails this test."""
    theta = Llama3Theta(500_000.0, llama3_scaling(16))
    x = torch.randn(2, 3, 40, 32, dtype=torch.float64)
    frequencies = llama3_inverse_frequencies(
        500_000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32), **llama3_scaling(16)
    )
    angles = torch.arange(5, 45, dtype=torch.float64)[:, None] * frequencies
    even, odd = x[..., 0::2], x[..., 1::2]
    expected = torch.stack([even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()], -1)
    assert (rotate_heads(x, theta, start=5) - expected.flatten(-2)).abs().max() < 1e-13
    assert torch.equal(rotate_heads(x, theta, start=5), apply_rope(x, torch.arange(5, 45), theta))
    assert (rotate_heads(x, 500_000.0, start=5) - expected.flatten(-2)).abs().max() > 0.1


def test_llama_rope_theta_reads_new_and_old_configs() -> None:
    assert llama_rope_theta(random_llama().config) == 500_000.0
    assert type(llama_rope_theta(random_llama().config)) is float
    new = LlamaConfig(rope_theta=5e5, rope_scaling={"rope_type": "llama3", **llama3_scaling(16)})
    old = SimpleNamespace(rope_theta=5e5, rope_scaling={"type": "llama3", **llama3_scaling(16)})  # transformers 4
    for config in (new, old):
        theta = llama_rope_theta(config)
        assert isinstance(theta, Llama3Theta) and theta == 5e5 and theta.scaling == llama3_scaling(16)
        assert llama_rope(config) == ("llama3", 5e5)
    assert llama_rope(SimpleNamespace(rope_theta=1e4, rope_scaling=None)) == ("default", 1e4)


def test_loader_gives_transformers_logits_with_llama3_scaling_past_the_original_context() -> None:
    # heads of width 8, base 10,000: wavelengths 6.3, 63, 628 and 6,283 positions, one pair in each band
    theirs = random_llama(
        max_position_embeddings=1_024, rope_theta=10_000.0, rope_scaling={"rope_type": "llama3", **llama3_scaling(64)}
    )
    with torch.no_grad():  # sharper attention than transformers' 0.02 draws, so that positions weigh in the logits
        for name, parameter in theirs.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                parameter.normal_(0.0, 0.3)
    ours = llama_from_huggingface(theirs)
    assert isinstance(cast(DecoderLayer, ours.decoder.layers[0]).self_attention.rope_theta, Llama3Theta)
    ids = tokens(theirs, batch=2, length=160)  # past the original 64 positions
    with torch.no_grad():
        their_logits, our_logits = theirs(ids).logits, ours(ids)
    assert ((our_logits - their_logits).norm() / their_logits.norm()).item() < 1e-5  # float32
    theirs64 = without_float32_islands(theirs)
    ours64 = llama_from_huggingface(theirs64)
    decoder = IncrementalDecoder(ours64, None, batch_size=2)
    with torch.no_grad():
        their_logits64 = theirs64(ids).logits
        assert (ours64(ids) - their_logits64).abs().max().item() < 1e-10
        stepped = torch.stack([decoder.step(ids[:, position]) for position in range(160)], dim=1)
        assert (stepped - their_logits64).abs().max().item() < 1e-10
        unscaled = copy.deepcopy(ours64)
        for layer in cast(list[DecoderLayer], list(unscaled.decoder.layers)):
            layer.self_attention.rope_theta = 10_000.0
        dropped = (unscaled(ids) - their_logits64)[:, :64].norm() / their_logits64[:, :64].norm()
        assert dropped.item() > 0.01  # the scaling counts inside the original context too
