"""Tests for transformer_book.pretraining (exported from book/pretraining.md) and for the model it
shipped, src/transformer_book/weights/book-lm: the corpus builder gives the card's digest, the recipe
retraces the card's first 50 losses on one thread, the tokenizer it learns is the shipped one, and the
shipped weights score the card's held-out loss. Then the checkpoint format, on tiny random models:
saving and loading are exact, transformers' LlamaForCausalLM reads the files to the same logits, and
what is missing or wrong is named."""

from __future__ import annotations

import dataclasses
import json
import platform
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import torch
from test_modern_decoder import without_float32_islands
from transformers import LlamaForCausalLM

from transformer_book.instruction_tuning import with_new_tokens
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.modern_decoder import interleave_rotary_rows
from transformer_book.pretraining import (
    BOOK_MODEL,
    CARD_FILE,
    CONFIG_FILE,
    TOKENIZER_FILE,
    WEIGHTS_FILE,
    Docstring,
    PretrainingRecipe,
    book_language_model,
    build_corpus,
    corpus_digest,
    corpus_text,
    corpus_versions,
    deinterleave_rotary_rows,
    load_pretrained,
    pretrain,
    save_pretrained,
    source_folder,
)
from transformer_book.tokenization import BytePairTokenizer
from transformer_book.training import validation_loss


@pytest.fixture(scope="module")
def card() -> dict[str, Any]:
    """The shipped model's card, as make pretrain wrote it."""
    return cast(dict[str, Any], json.loads((BOOK_MODEL / CARD_FILE).read_text()))


def public_versions(versions: dict[str, str]) -> dict[str, str]:
    """Versions without their local label (the +cpu of 2.13.0+cpu)."""
    return {source: version.split("+")[0] for source, version in versions.items()}


@pytest.fixture(scope="module")
def corpus(card: dict[str, Any]) -> list[Docstring]:
    """The corpus as this machine builds it; the tests that compare it with the card need the card's
    Python and package versions, and say so when they differ."""
    # PyTorch's CPU and CUDA builds (2.13.0+cpu, 2.13.0+cu130) hold the same Python files
    if public_versions(corpus_versions()) != public_versions(card["corpus"]["versions"]):
        pytest.skip(
            f"the card's corpus was read from {card['corpus']['versions']}, this machine has {corpus_versions()}"
        )
    return build_corpus()


@pytest.fixture
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.pretraining
def test_the_corpus_builder_gives_the_cards_digest(corpus: list[Docstring], card: dict[str, Any]) -> None:
    assert corpus_digest(corpus) == card["corpus"]["digest"], "the corpus builder no longer reads what the card says"
    assert len(corpus) == card["corpus"]["docstrings"]
    assert len(corpus_text(corpus)) == card["corpus"]["characters"]
    held_out = [docstring for docstring in corpus if docstring.held_out]
    assert len(held_out) == card["corpus"]["held_out_docstrings"]
    assert not {docstring.text for docstring in held_out} & {
        docstring.text for docstring in corpus if not docstring.held_out
    }


@pytest.mark.pretraining
def test_no_paragraph_of_pythons_reference_pages_is_in_the_corpus(corpus: list[Docstring]) -> None:
    """fine-tuning.md classifies paragraphs of pydoc_data's pages, and its text says the pretraining
    never read one: not as a page (the folder is skipped) nor copied into a docstring."""
    from pydoc_data.topics import topics

    text = corpus_text(corpus)
    paragraphs = {
        paragraph.strip()
        for page in topics.values()
        for paragraph in re.split(r"\n\s*\n", page)
        if len(paragraph.split()) >= 15
    }
    read = [paragraph for paragraph in paragraphs if paragraph in text]
    assert len(paragraphs) > 1000
    assert not read, f"{len(read)} paragraphs of pydoc_data.topics occur in the corpus, the first: {read[0][:200]!r}"


@pytest.mark.pretraining
def test_the_recipe_learns_the_shipped_tokenizer_and_retraces_the_cards_first_50_losses(
    corpus: list[Docstring], card: dict[str, Any], one_thread: None
) -> None:
    _, shipped, _ = load_pretrained()
    recipe = PretrainingRecipe(**card["recipe"])
    training_text = corpus_text([docstring for docstring in corpus if not docstring.held_out])
    learned = BytePairTokenizer.learn([training_text], num_merges=recipe.num_merges)
    assert learned.merges == shipped.merges, "the recipe's tokenizer differs from the shipped one"
    training_ids = torch.tensor(shipped.encode(training_text))
    assert len(training_ids) == card["training_tokens_available"]
    _, history = pretrain(recipe, training_ids, shipped.vocab_size, steps=50, desc=None)
    differences = [abs(ours - theirs) for ours, theirs in zip(history.losses, card["losses"][:50], strict=True)]
    assert max(differences) < 1e-3, (
        f"the first 50 losses differ from the card's by up to {max(differences):.1e} (the card's machine: "
        f"{card['machine']}; this one: {platform.processor() or platform.machine()}, PyTorch {torch.__version__})"
    )


@pytest.mark.pretraining
def test_the_shipped_weights_score_the_cards_held_out_loss(corpus: list[Docstring]) -> None:
    model, tokenizer, card = load_pretrained()
    recipe = PretrainingRecipe(**card["recipe"])
    held_out = corpus_text([docstring for docstring in corpus if docstring.held_out])
    ids = torch.tensor(tokenizer.encode(held_out))[: recipe.held_out_tokens + 1]
    assert len(ids) - 1 == card["held_out_tokens"]
    assert validation_loss(model, ids, context=recipe.context) == pytest.approx(card["held_out_loss"], abs=1e-4)


def test_the_card_records_what_the_model_card_must_say() -> None:
    model, tokenizer, card = load_pretrained()
    assert card["parameters"] == sum(parameter.numel() for parameter in model.parameters())
    assert card["tokenizer"]["vocab_size"] == tokenizer.vocab_size == 256 + card["recipe"]["num_merges"]
    recipe = PretrainingRecipe(**card["recipe"])
    assert len(card["losses"]) == recipe.steps
    assert card["tokens_seen"] == recipe.steps * recipe.batch_size * recipe.context
    assert [step for step, _ in card["held_out_curve"]][-1] == recipe.steps
    assert card["held_out_curve"][-1][1] == pytest.approx(card["held_out_loss"])
    assert {"digest", "versions", "sources"} <= set(card["corpus"]) and card["machine"]
    size = sum(path.stat().st_size for path in BOOK_MODEL.iterdir())
    assert size < 25e6, f"the shipped model takes {size / 1e6:.1f} MB, over the 25 MB the design allows"


TINY = PretrainingRecipe(
    num_merges=20, d_model=32, num_heads=4, num_layers=2, d_ff=48, context=16, batch_size=4, steps=3, warmup=1
)


@dataclasses.dataclass
class Tiny:
    folder: Path
    ids: torch.Tensor  # one window of its text, (1, context)
    model: DecoderOnlyTransformer  # the model that was saved, as training left it


@pytest.fixture
def tiny(tmp_path: Path) -> Tiny:
    text = "Return the sum of the values, or the value itself. " * 20
    tokenizer = BytePairTokenizer.learn([text], num_merges=TINY.num_merges)
    ids = torch.tensor(tokenizer.encode(text))
    model, history = pretrain(TINY, ids, tokenizer.vocab_size, desc=None)
    save_pretrained(tmp_path, model, tokenizer, TINY, {"losses": history.losses})
    return Tiny(tmp_path, ids[: TINY.context].unsqueeze(0), model)


def test_saving_and_loading_are_exact(tiny: Tiny) -> None:
    folder = tiny.folder
    model, tokenizer, card = load_pretrained(folder)
    assert PretrainingRecipe(**card["recipe"]) == TINY and len(card["losses"]) == TINY.steps
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), tiny.model.state_dict().values(), strict=True)
    )
    with torch.no_grad():
        assert torch.equal(model(tiny.ids), tiny.model(tiny.ids))
    assert sorted(path.name for path in folder.iterdir()) == sorted(
        [WEIGHTS_FILE, CONFIG_FILE, TOKENIZER_FILE, CARD_FILE]
    )
    assert tokenizer.merges == BytePairTokenizer(json.loads((folder / TOKENIZER_FILE).read_text())).merges


def test_transformers_reads_the_checkpoint_as_a_llama_with_the_same_logits(tiny: Tiny) -> None:
    folder, ids = tiny.folder, tiny.ids
    ours = load_pretrained(folder)[0].double()
    theirs = LlamaForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float64).eval()
    theirs = without_float32_islands(theirs)  # transformers computes RoPE and RMSNorm in float32 otherwise
    with torch.no_grad():
        assert (ours(ids) - theirs(ids).logits).abs().max() < 1e-10


def test_new_tokens_grow_the_model_as_transformers_resize_token_embeddings_does(tiny: Tiny) -> None:
    """with_new_tokens (instruction-tuning) against LlamaForCausalLM.resize_token_embeddings on the same
    checkpoint, the new rows set to the old rows' mean in both: the same logits over every id, old and new."""
    folder, ids = tiny.folder, tiny.ids
    base = load_pretrained(folder)[0].double()
    ours = with_new_tokens(base, 3)
    theirs = LlamaForCausalLM.from_pretrained(folder, local_files_only=True, dtype=torch.float64).eval()
    theirs = without_float32_islands(theirs)
    old = theirs.get_input_embeddings().weight.detach().clone()
    theirs.resize_token_embeddings(old.shape[0] + 3, mean_resizing=False)
    with torch.no_grad():
        theirs.get_input_embeddings().weight[old.shape[0] :] = old.mean(dim=0)
    assert theirs.get_output_embeddings().weight is theirs.get_input_embeddings().weight  # tied in both
    assert ours.generator.projection.weight is ours.target_embedding.embedding.weight
    new_ids = torch.cat([ids, torch.arange(old.shape[0], old.shape[0] + 3).unsqueeze(0)], dim=1)[:, -TINY.context :]
    with torch.no_grad():
        assert ours(new_ids).shape[-1] == old.shape[0] + 3
        assert (ours(new_ids) - theirs(new_ids).logits).abs().max() < 1e-10
        # the old vocabulary's logits are the base model's, exactly
        assert torch.equal(ours(ids)[..., : old.shape[0]], base(ids))


def test_new_tokens_refuse_a_count_that_is_not_positive_and_ids_past_the_new_vocabulary(tiny: Tiny) -> None:
    base = load_pretrained(tiny.folder)[0]
    for count in (0, -1):
        with pytest.raises(ValueError, match="count"):
            with_new_tokens(base, count)
    grown = with_new_tokens(base, 2)
    vocab_size = base.target_embedding.vocab_size
    with pytest.raises(ValueError):
        grown(torch.tensor([[vocab_size + 2]]))
    untied = DecoderOnlyTransformer(
        vocab_size, d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=4, tie_embeddings=False
    )
    grown_untied = with_new_tokens(untied, 2)
    assert grown_untied.generator.projection.weight is not grown_untied.target_embedding.embedding.weight
    with torch.no_grad():
        assert torch.equal(grown_untied.generator.projection.weight[-1], untied.generator.projection.weight.mean(dim=0))
        assert torch.equal(
            grown_untied.target_embedding.embedding.weight[-2], untied.target_embedding.embedding.weight.mean(dim=0)
        )


def test_a_trained_checkpoint_differs_from_a_fresh_model(tiny: Tiny) -> None:
    """Guards the tests above: three steps of training moved the weights away from their start."""
    folder, ids = tiny.folder, tiny.ids
    torch.manual_seed(TINY.seed)
    fresh = book_language_model(TINY, 256 + TINY.num_merges).eval()
    with torch.no_grad():
        assert (load_pretrained(folder)[0](ids) - fresh(ids)).abs().max() > 1e-3


def test_rotary_rows_go_back_where_they_came_from() -> None:
    weight = torch.randn(24, 5)
    for heads in (1, 2, 3):
        assert torch.equal(interleave_rotary_rows(deinterleave_rotary_rows(weight, heads), heads), weight)
        assert torch.equal(deinterleave_rotary_rows(interleave_rotary_rows(weight, heads), heads), weight)


def test_a_missing_file_is_named(tiny: Tiny) -> None:
    folder = tiny.folder
    (folder / TOKENIZER_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=r"merges\.json.*make pretrain"):
        load_pretrained(folder)


def test_an_unknown_source_is_named() -> None:
    with pytest.raises(ValueError, match="no_such_package_here"):
        source_folder("no_such_package_here")


def test_which_files_are_held_out_depends_on_the_file_alone() -> None:
    a, b = Docstring("python", "json/__init__.py", "one"), Docstring("python", "json/__init__.py", "two")
    assert a.held_out == b.held_out
    files = [Docstring("python", f"module_{index}.py", "text") for index in range(2000)]
    share = sum(docstring.held_out for docstring in files) / len(files)
    assert 0.03 < share < 0.07, f"{share:.1%} of files held out, not about one in 20"


def test_the_corpus_keeps_each_text_once_and_skips_tests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package = tmp_path / "toy_corpus_package"
    (package / "tests").mkdir(parents=True)
    (package / "__init__.py").write_text('"""The package."""\n')
    (package / "a.py").write_text('"""Same text."""\n\ndef f():\n    """Only in a."""\n')
    (package / "b.py").write_text('"""Same text."""\n')
    (package / "tests" / "test_a.py").write_text('"""A test."""\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    corpus = build_corpus(["toy_corpus_package"])
    assert [(docstring.path, docstring.text) for docstring in corpus] == [
        ("__init__.py", "The package."),
        ("a.py", "Same text."),
        ("a.py", "Only in a."),
    ]
