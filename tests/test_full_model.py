"""Unit tests for transformer_book.model (exported from book/full-model.md)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch import nn

from transformer_book import count_parameters
from transformer_book.interop import load_torch_transformer
from transformer_book.model import (
    BASE_CONFIG,
    BIG_CONFIG,
    SMALL_CONFIG,
    Decoder,
    DecoderLayer,
    Generator,
    PositionalEncoding,
    TokenEmbedding,
    Transformer,
    TransformerConfig,
    causal_mask,
    make_transformer,
    padding_mask,
)

VOCAB, D_MODEL, HEADS, LAYERS, D_FF = 50, 16, 4, 2, 32
SMALL = TransformerConfig(d_model=D_MODEL, num_heads=HEADS, num_layers=LAYERS, d_ff=D_FF, dropout=0.0)
BATCH, N, M = 3, 7, 5
SOURCE_LENGTHS = [7, 4, 2]


def small_model(**options) -> Transformer:
    """The SMALL model in eval mode; options (tie_weights, norm_first, pad_id) go to make_transformer."""
    torch.manual_seed(0)
    options.setdefault("pad_id", 0)
    return make_transformer(VOCAB, VOCAB, SMALL, **options).eval()


def batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    source = torch.randint(0, VOCAB, (BATCH, N), generator=generator)
    target_input = torch.randint(0, VOCAB, (BATCH, M), generator=generator)
    return source, target_input, padding_mask(SOURCE_LENGTHS, N)


# --- parameter counts (meta device: no memory, no values) ---------------------------------------


@pytest.mark.parametrize(
    ("config", "tie_weights", "expected"),
    [
        (BASE_CONFIG, True, 63_082_496),
        (BIG_CONFIG, True, 214_245_376),
        (BASE_CONFIG, False, 100_970_496),
        (BIG_CONFIG, False, 290_021_376),
    ],
)
def test_parameter_counts_of_the_paper_configurations(config, tie_weights, expected):
    with torch.device("meta"):
        model = make_transformer(37_000, 37_000, config, tie_weights=tie_weights, pad_id=0)
    assert count_parameters(model) == expected


def test_pre_ln_adds_exactly_the_two_final_layer_norms():
    with torch.device("meta"):
        post = make_transformer(37_000, 37_000, pad_id=0)  # the default is the base model
        pre = make_transformer(37_000, 37_000, BASE_CONFIG, norm_first=True, pad_id=0)
    assert count_parameters(pre) - count_parameters(post) == 2 * 2 * 512


def test_count_parameters_skips_frozen_parameters():
    model = small_model()
    total = count_parameters(model)
    model.generator.projection.weight.requires_grad_(False)  # the tied matrix, all three uses
    assert count_parameters(model) == total - VOCAB * D_MODEL


# --- weight tying ---------------------------------------------------------------------------------


def vocabulary_matrices(model: Transformer) -> list[torch.Tensor]:
    return [
        model.source_embedding.embedding.weight,
        model.target_embedding.embedding.weight,
        model.generator.projection.weight,
    ]


def test_tied_model_holds_one_tensor():
    matrices = vocabulary_matrices(small_model())
    assert matrices[0] is matrices[1] is matrices[2]
    assert len({matrix.data_ptr() for matrix in matrices}) == 1


def test_untied_model_holds_three_tensors():
    matrices = vocabulary_matrices(small_model(tie_weights=False))
    assert len({matrix.data_ptr() for matrix in matrices}) == 3
    assert not torch.equal(matrices[0], matrices[1])


def test_tied_gradient_is_the_sum_of_the_three_uses_and_a_step_moves_all_three():
    tied, untied = small_model(), small_model(tie_weights=False)
    untied.load_state_dict(tied.state_dict())
    source, target_input, source_mask = batch()
    for model in [tied, untied]:
        model(source, target_input, source_mask=source_mask).square().mean().backward()
    summed = sum(matrix.grad for matrix in vocabulary_matrices(untied))  # type: ignore[misc]
    assert torch.allclose(tied.generator.projection.weight.grad, summed, atol=1e-6)  # type: ignore[arg-type]
    before = tied.source_embedding.embedding.weight.detach().clone()
    torch.optim.SGD(tied.parameters(), lr=0.1).step()
    for matrix in vocabulary_matrices(tied):
        assert not torch.equal(matrix, before)
        assert torch.equal(matrix, tied.generator.projection.weight)


# --- embeddings and generator ---------------------------------------------------------------------


def test_token_embedding_scales_by_sqrt_d_model_and_starts_small():
    torch.manual_seed(0)
    embedding = TokenEmbedding(2000, 256)
    assert embedding.embedding.weight.std().item() == pytest.approx(256**-0.5, rel=0.05)
    tokens = torch.tensor([[3, 7, 1999]])
    expected = embedding.embedding.weight[tokens] * 16.0
    assert torch.allclose(embedding(tokens), expected)


def test_generator_has_no_bias_and_gives_logits():
    generator = Generator(D_MODEL, VOCAB)
    assert generator.projection.bias is None
    x = torch.randn(2, 3, D_MODEL)
    assert torch.allclose(generator(x), x @ generator.projection.weight.T)


# --- shapes and masks -----------------------------------------------------------------------------


def test_shapes_of_encode_decode_and_forward():
    model = small_model()
    source, target_input, source_mask = batch()
    memory = model.encode(source, source_mask=source_mask)
    hidden = model.decode(target_input, memory, source_mask=source_mask)
    logits = model(source, target_input, source_mask=source_mask)
    assert memory.shape == (BATCH, N, D_MODEL)
    assert hidden.shape == (BATCH, M, D_MODEL)
    assert logits.shape == (BATCH, M, VOCAB)
    assert torch.allclose(logits, model.generator(hidden))


def test_separate_vocabularies_give_the_target_vocabulary_size():
    torch.manual_seed(0)
    model = make_transformer(30, 40, SMALL, tie_weights=False, pad_id=0).eval()
    logits = model(torch.randint(0, 30, (2, 6)), torch.randint(0, 40, (2, 4)))
    assert logits.shape == (2, 4, 40)


def test_default_target_mask_is_causal():
    model = small_model()
    source, target_input, source_mask = batch()
    changed = target_input.clone()
    changed[:, 3] = (changed[:, 3] + 1) % VOCAB  # change position 3 only
    with torch.no_grad():
        original = model(source, target_input, source_mask=source_mask)
        after = model(source, changed, source_mask=source_mask)
    assert torch.allclose(original[:, :3], after[:, :3], atol=1e-6)  # earlier positions do not see it
    assert not torch.allclose(original[:, 3:], after[:, 3:], atol=1e-3)


def test_a_target_mask_is_combined_with_the_causal_one():
    # Once silent: a target_mask that let every position see every other (a source padding mask
    # given as the target's, say) replaced the causal mask, and the decoder saw the future.
    model = small_model()
    source, target_input, source_mask = batch()
    changed = target_input.clone()
    changed[:, 3] = (changed[:, 3] + 1) % VOCAB
    see_everything = torch.ones(1, M, M, dtype=torch.bool)
    with torch.no_grad():
        original = model(source, target_input, source_mask=source_mask, target_mask=see_everything)
        after = model(source, changed, source_mask=source_mask, target_mask=see_everything)
        causal = model(source, target_input, source_mask=source_mask)
    assert torch.equal(original[:, :3], after[:, :3])  # positions before 3 still do not see it
    assert torch.equal(original, causal)


def test_without_a_source_mask_the_source_padding_is_hidden():
    # Once silent: with no source_mask, every query attended to the padding, and a row's logits
    # moved with the amount of padding after it.
    model = small_model()
    source, target_input, source_mask = batch()
    source = source.clamp(min=1).masked_fill(~source_mask[:, 0], 0)  # real tokens 1.., padding 0
    more_padding = torch.cat([source, torch.zeros(BATCH, 3, dtype=torch.long)], dim=1)
    with torch.no_grad():
        automatic = model(source, target_input)
        assert torch.equal(automatic, model(source, target_input, source_mask=source_mask))
        torch.testing.assert_close(model(more_padding, target_input), automatic, atol=1e-5, rtol=0)
        unmasked = small_model(pad_id=None)(more_padding, target_input)
    assert (unmasked - automatic).abs().max() > 1e-2  # what a model that reads its padding gives


def test_decode_equals_forward_on_a_padded_source():
    # Once 0.20 apart in the logits: decode without a source mask attended to the padding that
    # encode (and forward) had hidden. decode sees only the memory, so it now asks for the mask.
    model = small_model()
    source, target_input, source_mask = batch()
    source = source.clamp(min=1).masked_fill(~source_mask[:, 0], 0)  # real tokens 1.., padding 0
    with torch.no_grad():
        whole = model(source, target_input)
        memory = model.encode(source)
        with pytest.raises(ValueError, match="decode needs the source_mask the memory was encoded with"):
            model.decode(target_input, memory)
        in_steps = model.generator(model.decode(target_input, memory, source_mask=model.source_padding_mask(source)))
    assert torch.equal(whole, in_steps)


def test_a_model_is_told_its_pad_id_and_token_0_is_read_when_it_is_not_padding():
    with pytest.raises(TypeError, match="pad_id"):
        make_transformer(VOCAB, VOCAB, SMALL)  # type: ignore[call-arg]  # no default id to hide a real token
    source, target_input, _ = batch()
    source = source.clamp(min=1)
    source[:, 2] = 0  # a real token whose id is 0 ("!" in GPT-2's vocabulary)
    weights: dict[int | None, torch.Tensor] = {}
    for pad_id in (None, 0):
        model = small_model(pad_id=pad_id)
        with torch.no_grad():
            model(source, target_input)
        layers = [layer for layer in model.decoder.layers if isinstance(layer, DecoderLayer)]
        kept = [layer.cross_attention_weights for layer in layers]
        weights[pad_id] = torch.stack([weight for weight in kept if weight is not None])
        assert len(weights[pad_id]) == SMALL.num_layers
    assert (weights[None][..., 2] > 0).all(), "a model without a pad id reads every token"
    assert (weights[0][..., 2] == 0).all(), "told that 0 pads, the model hides it"


def test_swapped_source_and_target_masks_are_refused():
    # Once silent when n == m: a causal (1, m, m) mask broadcasts as a source mask, and a
    # (batch, 1, n) padding mask as a target mask, so the decoder saw the future.
    model = small_model()
    source, target_input, _ = batch()
    source = source[:, :M]
    source_mask, target_mask = padding_mask(torch.tensor([M, 4, 2])[:BATCH], M), causal_mask(M)[None]
    with pytest.raises(ValueError, match="source_mask and target_mask swapped"):
        model(source, target_input, source_mask=target_mask, target_mask=source_mask)
    with pytest.raises(TypeError):
        model(source, target_input, source_mask, target_mask)  # masks by position are refused
    with pytest.raises(ValueError, match="target_mask must have 3 dimensions"):
        model(source, target_input, source_mask=source_mask, target_mask=causal_mask(M))


def test_a_pytorch_style_source_padding_mask_is_refused():
    # nn.Transformer's src_key_padding_mask is (batch, n); the book's masks are 3-D, so a 2-D one
    # is refused everywhere, here with a batch of 7 sources of 7 tokens, where it could be misread.
    model = small_model()
    source = torch.randint(0, VOCAB, (N, N))
    target_input = torch.randint(0, VOCAB, (N, M))
    key_padding = torch.arange(N)[None, :] < torch.arange(1, N + 1)[:, None]  # (batch, n), True = real
    with pytest.raises(ValueError, match="ambiguous"):
        model(source, target_input, source_mask=key_padding)
    with pytest.raises(ValueError, match="ambiguous"):
        model(source, target_input, source_mask=key_padding[:, None], target_mask=causal_mask(M))


def test_source_padding_is_ignored():
    model = small_model()
    source, target_input, source_mask = batch()
    changed = source.clone()
    changed[2, SOURCE_LENGTHS[2] :] = (changed[2, SOURCE_LENGTHS[2] :] + 1) % VOCAB  # only padding changes
    with torch.no_grad():
        original = model(source, target_input, source_mask=source_mask)
        after = model(changed, target_input, source_mask=source_mask)
        unmasked = model(changed, target_input)
    assert torch.allclose(original, after, atol=1e-6)
    assert not torch.allclose(original[2], unmasked[2], atol=1e-3)


# --- agreement with nn.Transformer ----------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_stacks_agree_with_nn_transformer(norm_first):
    torch.manual_seed(0)
    theirs = nn.Transformer(D_MODEL, HEADS, LAYERS, LAYERS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first)
    if not norm_first:  # the paper's post-LN stacks end without a LayerNorm
        theirs.encoder.norm = nn.Identity()
        theirs.decoder.norm = nn.Identity()
    with torch.no_grad():  # zero biases and identity LayerNorms would hide misplaced copies
        for parameter in theirs.parameters():
            if parameter.dim() == 1:
                parameter.add_(0.2 * torch.randn_like(parameter))
    theirs.train()  # dropout is 0; training mode avoids the nested-tensor fast path
    ours = small_model(norm_first=norm_first)
    load_torch_transformer(ours, theirs)
    source, target_input, source_mask = batch()
    with torch.no_grad():
        source_vectors = ours.positional_encoding(ours.source_embedding(source))
        target_vectors = ours.positional_encoding(ours.target_embedding(target_input))
        our_memory = ours.encode(source, source_mask=source_mask)
        our_output = ours.decode(target_input, our_memory, source_mask=source_mask)
        blocked = ~source_mask[:, 0]
        their_memory = theirs.encoder(source_vectors, src_key_padding_mask=blocked)
        their_output = theirs(
            source_vectors,
            target_vectors,
            tgt_mask=~causal_mask(M),
            src_key_padding_mask=blocked,
            memory_key_padding_mask=blocked,
        )
    assert (our_memory - their_memory).abs().max() <= 1e-5
    assert (our_output - their_output).abs().max() <= 1e-5


def test_load_torch_transformer_refuses_a_final_norm_the_paper_lacks():
    theirs = nn.Transformer(D_MODEL, HEADS, LAYERS, LAYERS, D_FF, dropout=0.0, batch_first=True)
    with pytest.raises(ValueError, match="ends in a LayerNorm and the other does not"):
        load_torch_transformer(small_model(), theirs)


# --- errors ---------------------------------------------------------------------------------------


def test_mismatched_d_model_is_refused():
    encoder = small_model().encoder
    with pytest.raises(ValueError, match="every part must have the same d_model, got .*decoder 32"):
        Transformer(
            TokenEmbedding(VOCAB, D_MODEL),
            TokenEmbedding(VOCAB, D_MODEL),
            PositionalEncoding(D_MODEL),
            encoder,
            Decoder(LAYERS, 32, HEADS, D_FF),
            Generator(D_MODEL, VOCAB),
            pad_id=0,
        )


def test_generator_vocabulary_must_match_the_target_vocabulary():
    model = small_model()
    with pytest.raises(ValueError, match="the generator predicts 60 tokens but the target vocabulary has 50"):
        Transformer(
            model.source_embedding,
            model.target_embedding,
            model.positional_encoding,
            model.encoder,
            model.decoder,
            Generator(D_MODEL, 60),
            pad_id=0,
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dropout": -0.1}, r"dropout must be a probability in \[0, 1\), got dropout=-0.1"),
        ({"dropout": 1.0}, r"dropout must be a probability in \[0, 1\)"),
        ({"num_layers": 0}, "num_layers must be a positive integer"),
        ({"d_ff": 2.5}, "d_ff must be a positive integer"),
        ({"num_heads": 3}, "not divisible"),
        ({"d_model": True}, "d_model must be a positive integer"),
    ],
)
def test_configuration_errors(overrides, message):
    with pytest.raises(ValueError, match=message):  # when the config is made, before any model
        dataclasses.replace(SMALL, **overrides)
    with pytest.raises(ValueError, match="unknown activation 'tanh'; choose one of 'relu', 'gelu', 'gelu_tanh'"):
        make_transformer(VOCAB, VOCAB, SMALL, activation="tanh", pad_id=0)


def test_the_presets_are_the_papers_and_cannot_be_changed_by_accident():
    assert (BASE_CONFIG.num_layers, BASE_CONFIG.d_model, BASE_CONFIG.d_ff, BASE_CONFIG.num_heads) == (6, 512, 2048, 8)
    assert (BIG_CONFIG.d_model, BIG_CONFIG.d_ff, BIG_CONFIG.num_heads, BIG_CONFIG.dropout) == (1024, 4096, 16, 0.3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        BASE_CONFIG.dropout = 0.0  # type: ignore[misc]
    assert dataclasses.replace(BASE_CONFIG, dropout=0.0).dropout == 0.0 and BASE_CONFIG.dropout == 0.1
    assert make_transformer(VOCAB, VOCAB, SMALL_CONFIG, pad_id=0).source_embedding.d_model == SMALL_CONFIG.d_model == 64


def test_tie_weights_needs_one_vocabulary():
    with pytest.raises(
        ValueError, match="tie_weights needs one shared vocabulary, got source_vocab_size=30 and target_vocab_size=40"
    ):
        make_transformer(30, 40, SMALL, pad_id=0)


@pytest.mark.parametrize("vocab_size", [0, -5, 2.0])
def test_vocabulary_size_must_be_a_positive_integer(vocab_size):
    with pytest.raises(ValueError, match="vocab_size must be a positive integer"):
        TokenEmbedding(vocab_size, D_MODEL)


@pytest.mark.parametrize(
    ("tokens", "message"),
    [
        (torch.tensor([[1, VOCAB]]), rf"tokens must be token ids in \[0, {VOCAB}\), got ids from 1 to {VOCAB}"),
        (torch.tensor([[-1, 2]]), rf"tokens must be token ids in \[0, {VOCAB}\), got ids from -1 to 2"),
        (torch.tensor([[1.0, 2.0]]), "tokens must be integer ids, got dtype torch.float32"),
        (torch.tensor([[True, False]]), "tokens must be integer ids, got dtype torch.bool"),
    ],
)
def test_token_id_errors(tokens, message):
    model = small_model()
    with pytest.raises(ValueError, match=message):
        model.source_embedding(tokens)
    with pytest.raises(ValueError, match=message):
        model(tokens, torch.zeros(1, 2, dtype=torch.long))


def test_initial_loss_is_near_uniform_guessing():
    torch.manual_seed(0)
    model = make_transformer(
        1000, 1000, TransformerConfig(d_model=64, num_heads=4, num_layers=2, d_ff=256, dropout=0.0), pad_id=0
    ).eval()
    source = torch.randint(0, 1000, (8, 10))
    targets = torch.randint(0, 1000, (8, 9))
    target_input = torch.cat([torch.ones(8, 1, dtype=torch.long), targets[:, :-1]], dim=1)
    with torch.no_grad():
        logits = model(source, target_input)
    loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()).item()
    assert 0.0 < loss - math.log(1000) < 1.5


@pytest.mark.parametrize("pad_id", [-1, 1.0, True])
def test_a_bad_pad_id_is_refused(pad_id: object) -> None:
    with pytest.raises(ValueError, match="pad_id must be"):
        small_model(pad_id=pad_id)
