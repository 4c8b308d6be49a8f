"""Unit tests for transformer_book.model (exported from book/encoder-only.md)."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from torch_reference import random_transformers_model
from transformer_book.data import IGNORE_INDEX, mask_tokens
from transformer_book.interop import bert_from_huggingface
from transformer_book.model import (
    EncoderClassifier,
    EncoderOnlyModel,
    MaskedLanguageModel,
    MaskedLanguageModelHead,
    causal_mask,
)
from transformer_book.torch_loading import load_torch_encoder

VOCAB, PAD, CLS, MASK = 20, 0, 18, 19
SPECIALS = [PAD, CLS, MASK]


def ordinary_tokens(batch: int, n: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.randint(1, CLS, (batch, n), generator=generator)
    tokens[:, 0] = CLS
    return tokens


def masked(tokens: torch.Tensor, seed: int = 0, **options: object) -> tuple[torch.Tensor, torch.Tensor]:
    return mask_tokens(
        tokens,
        mask_id=MASK,
        special_ids=SPECIALS,
        vocab_size=VOCAB,
        generator=torch.Generator().manual_seed(seed),
        **options,  # type: ignore[arg-type]
    )


def test_masking_proportions_on_a_large_sample() -> None:
    tokens = ordinary_tokens(400, 100)
    corrupted, labels = masked(tokens)
    ordinary = tokens != CLS
    chosen = labels != IGNORE_INDEX
    assert not (chosen & ~ordinary).any()
    assert abs(chosen.sum().item() / ordinary.sum().item() - 0.15) < 0.01
    assert abs((corrupted[chosen] == MASK).float().mean().item() - 0.8) < 0.02
    # kept: 10%, plus the random draws that happen to hit the original token (1 in 17 of 10%)
    assert abs((corrupted[chosen] == tokens[chosen]).float().mean().item() - 0.1 - 0.1 / 17) < 0.02
    assert (labels[chosen] == tokens[chosen]).all()
    assert (corrupted[~chosen] == tokens[~chosen]).all()
    assert not torch.isin(corrupted[chosen & (corrupted != MASK)], torch.tensor(SPECIALS)).any()


def test_masking_is_reproducible_and_keeps_the_shape() -> None:
    tokens = ordinary_tokens(3, 7)
    first, second = masked(tokens, seed=5), masked(tokens, seed=5)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    assert first[0].shape == first[1].shape == tokens.shape
    assert torch.equal(tokens, ordinary_tokens(3, 7)), "the input is not modified in place"


def test_mask_probability_one_chooses_every_ordinary_position() -> None:
    tokens = ordinary_tokens(4, 9)
    _, labels = masked(tokens, mask_probability=1.0)
    assert ((labels != IGNORE_INDEX) == (tokens != CLS)).all()


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"mask_id": 3}, "mask_id"),
        ({"mask_probability": 0.0}, "mask_probability"),
        ({"mask_probability": 1.5}, "mask_probability"),
        ({"ignore_index": 4}, "ignore_index"),
        ({"generator": 0}, "generator"),
        ({"special_ids": [PAD, MASK, VOCAB]}, "special ids"),
        ({"vocab_size": 0}, "vocab_size"),
    ],
)
def test_masking_refuses_bad_arguments(bad: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {
        "mask_id": MASK,
        "special_ids": SPECIALS,
        "vocab_size": VOCAB,
        "generator": torch.Generator(),
        **bad,
    }
    with pytest.raises(ValueError, match=message):
        mask_tokens(ordinary_tokens(2, 5), **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("tokens", [torch.rand(2, 3), torch.tensor([[1, 2, VOCAB]]), torch.tensor([[True]])])
def test_masking_refuses_bad_tokens(tokens: torch.Tensor) -> None:
    with pytest.raises(ValueError, match="token"):
        masked(tokens)


def test_model_shapes_and_padding_is_invisible() -> None:
    torch.manual_seed(0)
    model = EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0).eval()
    tokens = ordinary_tokens(3, 6)
    padded = torch.cat([tokens, torch.full((3, 4), PAD)], dim=1)
    with torch.no_grad():
        hidden, hidden_padded = model(tokens), model(padded)
    assert hidden.shape == (3, 6, 16)
    assert torch.allclose(hidden, hidden_padded[:, :6], atol=1e-5)


def test_model_sees_both_sides_unless_a_causal_mask_is_given() -> None:
    torch.manual_seed(0)
    model = EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0).eval()
    tokens = ordinary_tokens(1, 6)
    changed = tokens.clone()
    changed[0, -1] = 1 if tokens[0, -1] != 1 else 2  # change only the last token
    left_only = causal_mask(6)[None]
    with torch.no_grad():
        assert not torch.allclose(model(tokens)[0, 0], model(changed)[0, 0])
        assert torch.allclose(
            model(tokens, attention_mask=left_only)[0, :5], model(changed, attention_mask=left_only)[0, :5], atol=1e-6
        )


def test_model_agrees_with_torch_transformer_encoder() -> None:
    torch.manual_seed(0)
    model = EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, num_layers=2, d_ff=32, dropout=0.0).eval()
    layer = nn.TransformerEncoderLayer(16, 2, 32, 0.0, activation="gelu", batch_first=True)
    theirs = nn.TransformerEncoder(layer, 2, norm=None, enable_nested_tensor=False).eval()
    load_torch_encoder(model.encoder, theirs)
    tokens = torch.cat([ordinary_tokens(2, 5), torch.full((2, 2), PAD)], dim=1)
    with torch.no_grad():
        embedded = model.positional_encoding(model.token_embedding(tokens))
        expected = theirs(embedded, src_key_padding_mask=tokens == PAD)
        real = tokens != PAD
        assert torch.allclose(model(tokens)[real], expected[real], atol=1e-5)


def test_head_is_tied_to_the_embedding() -> None:
    model = EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, d_ff=32)
    head = MaskedLanguageModelHead(model.token_embedding)
    assert head.embedding.embedding.weight is model.token_embedding.embedding.weight
    assert head(torch.randn(2, 3, 16)).shape == (2, 3, VOCAB)
    shared = nn.ModuleDict({"model": model, "head": head})
    assert sum(p.numel() for p in shared.parameters()) == sum(p.numel() for p in model.parameters()) + sum(
        p.numel() for n, p in head.named_parameters() if not n.startswith("embedding.")
    )


def test_masked_language_model_scores_the_chosen_positions_as_the_whole_output_does() -> None:
    torch.manual_seed(0)
    model = EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, d_ff=32, dropout=0.0)
    mlm = MaskedLanguageModel(model, MaskedLanguageModelHead(model.token_embedding)).eval()
    tokens = ordinary_tokens(3, 6)
    corrupted, labels = masked(tokens, mask_probability=0.5)
    chosen = labels != IGNORE_INDEX
    assert chosen.any()
    everywhere = mlm(corrupted)
    assert everywhere.shape == (3, 6, VOCAB)
    torch.testing.assert_close(mlm(corrupted, chosen=chosen), everywhere[chosen])
    own = [name for name, _ in mlm.named_parameters()]  # the tied matrix once, the encoder's first
    assert own[0].startswith("encoder.") and not any(name.startswith("head.embedding") for name in own)
    for bad in [chosen.long(), chosen[:, :5]]:
        with pytest.raises(ValueError, match="chosen must be a bool tensor of the tokens' shape"):
            mlm(corrupted, chosen=bad)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_classifier_shapes_and_padding(pooling: str) -> None:
    torch.manual_seed(0)
    model = EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, d_ff=32, dropout=0.0)
    classifier = EncoderClassifier(model, 5, pooling=pooling, dropout=0.0).eval()
    tokens = ordinary_tokens(3, 6)
    padded = torch.cat([tokens, torch.full((3, 2), PAD)], dim=1)
    with torch.no_grad():
        assert classifier(tokens).shape == (3, 5)
        assert torch.allclose(classifier(tokens), classifier(padded), atol=1e-5)


@pytest.mark.parametrize("bad", [{"pooling": "max"}, {"num_classes": 0}, {"dropout": 1.0}])
def test_classifier_refuses_bad_arguments(bad: dict[str, object]) -> None:
    arguments: dict[str, object] = {"num_classes": 3, **bad}
    with pytest.raises(ValueError):
        EncoderClassifier(EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, d_ff=32), **arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [{"pad_id": VOCAB}, {"pad_id": -1}, {"dropout": 1.5}, {"num_layers": 0}])
def test_model_refuses_bad_arguments(bad: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        EncoderOnlyModel(VOCAB, **{"pad_id": PAD, **bad})  # type: ignore[arg-type]


def test_model_refuses_a_two_dimensional_attention_mask() -> None:
    # Once silent: with batch == n, a (batch, n) mask broadcast as an (n, n) pattern against the
    # (batch, 1, n) padding mask, and the output moved with no error.
    model = EncoderOnlyModel(VOCAB, pad_id=PAD, d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0).eval()
    tokens = ordinary_tokens(4, 4)
    key_padding = torch.ones(4, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"attention_mask must have 3 dimensions .* a 2-D mask is ambiguous"):
        model(tokens, attention_mask=key_padding)
    with pytest.raises(ValueError, match="attention_mask: mask must be a bool tensor"):
        model(tokens, attention_mask=torch.ones(1, 4, 4))  # a float mask
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, n\)"):
        model(tokens[0])
    with torch.no_grad():
        assert torch.equal(model(tokens, attention_mask=key_padding[:, None]), model(tokens))  # the advised form works


def random_hf_bert(**changes: object) -> torch.nn.Module:
    """A random transformers BERT unlike the chapter's: odd head width, its own eps, random biases."""
    settings: dict[str, object] = dict(
        vocab_size=53,
        hidden_size=24,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=40,
        max_position_embeddings=30,
        layer_norm_eps=1e-7,
    )
    return random_transformers_model("BertForMaskedLM", "BertConfig", **{**settings, **changes})


def test_the_loaded_bert_gives_transformers_logits_in_float64_with_and_without_padding() -> None:
    theirs = random_hf_bert()
    ours = bert_from_huggingface(theirs)
    tokens = torch.randint(1, 53, (3, 25), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (ours(tokens) - theirs(tokens).logits).abs().max().item() < 1e-10
        tokens[0, 20:] = 0  # padding: the book hides it by pad_id, transformers by its attention mask
        padded = theirs(tokens, attention_mask=(tokens != 0).long()).logits
        assert (ours(tokens) - padded).abs().max().item() < 1e-10
    assert ours.head.embedding is ours.encoder.token_embedding and not ours.training


def test_the_loaded_bert_reads_segment_ids_as_transformers_reads_token_type_ids() -> None:
    theirs = random_hf_bert(type_vocab_size=3)
    ours = bert_from_huggingface(theirs)
    generator = torch.Generator().manual_seed(2)
    tokens = torch.randint(1, 53, (2, 20), generator=generator)
    segments = torch.randint(0, 3, (2, 20), generator=generator)
    with torch.no_grad():
        with_segments = ours(tokens, segment_ids=segments)
        assert (with_segments - theirs(tokens, token_type_ids=segments).logits).abs().max().item() < 1e-10
        assert (with_segments - ours(tokens)).abs().max().item() > 1e-3  # the segments are read, not ignored
        assert torch.equal(ours(tokens, segment_ids=torch.zeros_like(tokens)), ours(tokens))


def test_segment_ids_that_do_not_fit_are_refused() -> None:
    ours = bert_from_huggingface(random_hf_bert())
    tokens = torch.randint(1, 53, (2, 6), generator=torch.Generator().manual_seed(3))
    for wrong in (torch.full((2, 6), 2), torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 6)):
        with pytest.raises(ValueError, match=r"segment_ids must be integers in \[0, 2\)"):
            ours(tokens, segment_ids=wrong)
    plain = EncoderOnlyModel(11, pad_id=PAD, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)
    with pytest.raises(ValueError, match="no segment embedding"):
        plain(torch.ones(1, 4, dtype=torch.long), segment_ids=torch.zeros(1, 4, dtype=torch.long))


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"hidden_act": "relu"}, "hidden_act='relu'"),
        ({"is_decoder": True}, "is_decoder=True"),
        ({"tie_word_embeddings": False}, "tie_word_embeddings=False"),
    ],
)
def test_a_bert_the_book_cannot_represent_is_refused_by_name(change: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        bert_from_huggingface(random_hf_bert(**change))
