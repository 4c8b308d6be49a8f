"""Unit tests for transformer_book.interop (exported from book/gpt2.md), through transformer_book.pretrained,
against transformers' GPT2LMHeadModel and tiktoken on random weights and the book's own merges (nothing
downloaded), and for the three options of DecoderOnlyTransformer that GPT-2 needs."""

from __future__ import annotations

import re
import warnings
from typing import cast

import pytest
import tiktoken
import torch
import torch.nn.functional as F

from transformer_book import count_parameters
from transformer_book.decoding import generate
from transformer_book.interop import GPT2_CHOICES
from transformer_book.model import (
    DecoderLayer,
    DecoderOnlyTransformer,
    LearnedPositionalEncoding,
    PositionalEncoding,
    check_activation,
)
from transformer_book.pretrained import (
    GPT2_PATTERN,
    RankedBytePairTokenizer,
    gpt2_byte_order,
    gpt2_from_huggingface,
    merge_ranks,
    recover_merges,
)
from transformer_book.tokenization import BytePairTokenizer

with warnings.catch_warnings():  # transformers imports tqdm.auto, which warns where ipywidgets is missing
    warnings.simplefilter("ignore")
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as transformers_logging

transformers_logging.set_verbosity_error()

TEXT = (
    "Don't panic: it's only x_1 = 2² and ½ of   the naïve café's __init__() calls.\n\n"
    "The quick brown fox jumps over the lazy dog; THE QUICK BROWN FOX, 12345 times!\n"
) * 20


def random_gpt2(**changes: object) -> GPT2LMHeadModel:
    """A random GPT-2 unlike the chapter's: odd head width, its own d_ff, exact GELU unless changed."""
    settings: dict[str, object] = dict(
        vocab_size=97, n_positions=20, n_embd=48, n_layer=2, n_head=3, n_inner=80, bos_token_id=96, eos_token_id=96
    )
    settings.update(changes)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**settings)).eval()
    with torch.no_grad():  # transformers starts the biases and LayerNorm shifts at zero: a missed copy would hide
        for name, parameter in model.named_parameters():
            if name.endswith("bias"):
                parameter.normal_(std=0.1)
    return model


@pytest.mark.parametrize("activation", ["gelu_new", "gelu", "gelu_pytorch_tanh"])
def test_the_loaded_model_gives_transformers_logits_in_float64(activation: str) -> None:
    theirs = random_gpt2(activation_function=activation).double()
    ours = gpt2_from_huggingface(theirs)
    tokens = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        difference = (ours(tokens) - theirs(tokens).logits).abs().max().item()
    assert difference < 1e-10
    assert next(ours.parameters()).dtype == torch.float64 and not ours.training


def test_in_float32_the_logits_differ_by_rounding_only() -> None:
    theirs = random_gpt2()
    ours = gpt2_from_huggingface(theirs)
    tokens = torch.randint(0, 97, (3, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        their_logits = theirs(tokens).logits
        relative = ((ours(tokens) - their_logits).norm() / their_logits.norm()).item()
    assert relative < 1e-5


def test_greedy_decoding_with_the_cache_writes_transformers_tokens() -> None:
    theirs = random_gpt2().double()
    ours = gpt2_from_huggingface(theirs)
    prompt = torch.tensor([[5, 17, 3], [40, 41, 42]])
    with torch.no_grad():
        their_tokens = theirs.generate(prompt, max_new_tokens=15, do_sample=False, pad_token_id=96)[:, 3:]
    our_tokens = generate(
        ours, None, prompt=prompt, max_new_tokens=15, choose=lambda logits: logits.argmax(-1), end_id=96
    )
    for theirs_row, ours_row in zip(their_tokens.tolist(), our_tokens):
        assert theirs_row[: len(ours_row)] == ours_row


def test_the_output_matrix_stays_tied_to_the_loaded_embedding() -> None:
    ours = gpt2_from_huggingface(random_gpt2())
    assert ours.generator.projection.weight is ours.target_embedding.embedding.weight
    assert isinstance(ours.positional_encoding.table, torch.nn.Parameter)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"activation_function": "relu"}, "activation_function='relu'"),
        ({"layer_norm_epsilon": 1e-6}, "layer_norm_epsilon=1e-06"),
        ({"scale_attn_by_inverse_layer_idx": True}, "1/sqrt(d_head)"),
        ({"scale_attn_weights": False}, "1/sqrt(d_head)"),
        ({"add_cross_attention": True}, "add_cross_attention=True"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False"),
    ],
)
def test_a_config_the_book_cannot_represent_is_refused_by_name(change: dict[str, object], named: str) -> None:
    with torch.device("meta"):
        theirs = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=50, **change))
    with pytest.raises(ValueError, match=re.escape(named)):
        gpt2_from_huggingface(theirs)


def test_the_book_counts_gpt2_smalls_parameters() -> None:
    with torch.device("meta"):
        ours = DecoderOnlyTransformer(
            50_257, d_model=768, num_heads=12, num_layers=12, d_ff=3072, max_len=1024, **GPT2_CHOICES
        )
    assert count_parameters(ours) == 124_439_808


def test_the_2017_defaults_are_unchanged() -> None:
    model = DecoderOnlyTransformer(30, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=8)
    assert type(model.positional_encoding) is PositionalEncoding
    assert "positional_encoding.table" not in model.state_dict()  # the sinusoids are a buffer, not saved
    assert model.target_embedding.scale == 4.0
    assert cast(DecoderLayer, model.decoder.layers[0]).feed_forward.activation is F.gelu


def test_the_gpt2_options_change_what_they_name() -> None:
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(30, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=8, **GPT2_CHOICES)
    assert isinstance(model.positional_encoding, LearnedPositionalEncoding)
    assert model.state_dict()["positional_encoding.table"].shape == (8, 16)
    tokens = torch.tensor([[1, 2, 3]])
    embedded = model.target_embedding(tokens)
    assert torch.equal(embedded, model.target_embedding.embedding.weight[tokens])
    x = torch.linspace(-4, 4, 101)
    assert torch.equal(check_activation("gelu_tanh")(x), F.gelu(x, approximate="tanh"))
    with pytest.raises(ValueError, match="a sequence of length 9 is longer than the positional table"):
        model.positional_encoding(torch.zeros(1, 9, 16))


def test_unknown_positions_are_refused_with_the_choices() -> None:
    with pytest.raises(
        ValueError, match=re.escape("unknown positions 'rotary'; choose one of 'sinusoidal', 'learned'")
    ):
        DecoderOnlyTransformer(30, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=8, positions="rotary")


@pytest.fixture(scope="module")
def learned() -> BytePairTokenizer:
    return BytePairTokenizer.learn([TEXT], num_merges=120)


def test_a_rank_table_gives_back_the_merges_it_was_written_from(learned: BytePairTokenizer) -> None:
    for order in (range(256), gpt2_byte_order()):
        assert recover_merges(merge_ranks(learned, order)) == learned.merges


@pytest.mark.parametrize("byte_order", ["identity", "gpt2"])
def test_the_ranked_tokenizer_gives_tiktokens_ids(learned: BytePairTokenizer, byte_order: str) -> None:
    ranks = merge_ranks(learned, range(256) if byte_order == "identity" else gpt2_byte_order())
    ours = RankedBytePairTokenizer(ranks)
    theirs = tiktoken.Encoding("test", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens={})
    text = TEXT + "unseen wörds ☃ and 'll 've 're 'd 'm\t\ttabs  \n"
    assert ours.encode(text) == theirs.encode_ordinary(text)
    assert ours.decode(ours.encode(text)) == text


def test_gpt2s_byte_order_starts_with_the_printable_bytes() -> None:
    order = gpt2_byte_order()
    assert sorted(order) == list(range(256))
    assert order[0] == ord("!") and order[93] == ord("~") and order[188] == 0


def test_the_pretokenizers_differ_on_contractions_and_unicode_numbers(learned: BytePairTokenizer) -> None:
    ranked = RankedBytePairTokenizer(merge_ranks(learned))
    assert ranked.words("Don't 2²") == ["Don", "'t", " 2²"]
    assert learned.words("Don't 2²") == ["Don", "'", "t", " 2", "²"]


def test_a_table_that_is_not_byte_pair_merges_is_refused() -> None:
    singles = {bytes([byte]): byte for byte in range(256)}
    with pytest.raises(ValueError, match=re.escape("token 256, b'abc', is not one merge")):
        RankedBytePairTokenizer(singles | {b"abc": 256})
    with pytest.raises(ValueError, match="the 256 single bytes ranks 0-255"):
        recover_merges(singles | {b"ab": 300})
    with pytest.raises(ValueError, match="byte_order must list each of the 256 bytes once"):
        merge_ranks(BytePairTokenizer([]), [0] * 256)
