"""speculative-decoding's exported code: the cache that reads several tokens and rolls back, against
the model's own forward; greedy speculative decoding against generate and against transformers'
assisted generation; the sampling rule's output distribution, exactly and by a chi-square test
(which fails when the residual is replaced by p); the rounds counted from agreements against real
runs; the n-gram draft against KneserNey; and the refusals of bad input."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

import transformer_book.speculative_decoding as speculative
from transformer_book.decoding import generate
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.ngram import KneserNey
from transformer_book.speculative_decoding import (
    CachedReader,
    NgramDraft,
    NgramReader,
    Reader,
    agreements,
    first_layers,
    greedy_rounds,
    residual,
    speculative_decode,
    verify,
)

VOCAB = 40


def small_model(seed: int, **options: Any) -> DecoderOnlyTransformer:
    """A random modern decoder (RMSNorm, RoPE, SwiGLU) in float64, or the options' variant."""
    torch.manual_seed(seed)
    settings: dict[str, Any] = {
        "positions": "none",
        "activation": "swiglu",
        "norm": "rms",
        "bias": False,
        "rope_theta": 10_000.0,
        "scale_embeddings": False,
    }
    settings.update(options)
    model = DecoderOnlyTransformer(VOCAB, d_model=32, num_heads=4, num_layers=3, d_ff=64, max_len=48, **settings)
    return model.double().eval()


MODELS: dict[str, dict[str, Any]] = {
    "rope": {},
    "grouped-query": {"num_kv_heads": 2},
    "sinusoidal, LayerNorm": {
        "positions": "sinusoidal",
        "activation": "gelu",
        "norm": "layer",
        "bias": True,
        "rope_theta": None,
        "scale_embeddings": True,
    },
}


@pytest.mark.parametrize("options", MODELS.values(), ids=list(MODELS))
def test_the_cache_gives_the_models_logits_at_once_in_pieces_and_after_a_rollback(options: dict[str, Any]) -> None:
    model = small_model(0, **options)
    tokens = torch.randint(VOCAB, (30,), generator=torch.Generator().manual_seed(1)).tolist()
    with torch.no_grad():
        full = model(torch.tensor([tokens]))[0]
    assert torch.allclose(CachedReader(model).extend(tokens), full, atol=1e-10)
    reader = CachedReader(model)
    reader.extend(tokens[:10])
    reader.extend([3, 4, 5])  # read, then forgotten
    reader.rollback(10)
    assert reader.length == 10
    pieces = torch.cat([reader.extend(tokens[10:11]), reader.extend(tokens[11:25]), reader.extend(tokens[25:])])
    assert torch.allclose(pieces, full[10:], atol=1e-10)


def test_the_cache_refuses_what_it_cannot_read_or_forget() -> None:
    reader = CachedReader(small_model(0))
    with pytest.raises(ValueError, match="at least one token"):
        reader.extend([])
    with pytest.raises(ValueError, match="tokens must be token ids"):
        reader.extend([VOCAB])
    with pytest.raises(ValueError, match="do not fit"):
        reader.extend([1] * 49)
    reader.extend([1, 2, 3])
    with pytest.raises(ValueError, match="length must be at most the 3 tokens read"):
        reader.rollback(4)
    with pytest.raises(ValueError, match="length must be at least 0"):
        reader.rollback(-1)


def test_first_layers_copies_the_first_layers_and_leaves_the_model_alone() -> None:
    model = small_model(0)
    draft = first_layers(model, 2)
    assert len(draft.decoder.layers) == 2 and len(model.decoder.layers) == 3
    assert all(
        torch.equal(a, b) for a, b in zip(draft.decoder.layers.parameters(), model.decoder.layers[:2].parameters())
    )
    assert draft.generator.projection.weight is draft.target_embedding.embedding.weight  # still tied
    with pytest.raises(ValueError, match="num_layers must be at most the model's 3"):
        first_layers(model, 4)
    with pytest.raises(ValueError, match="num_layers must be a positive integer"):
        first_layers(model, 0)


def ngram_and_stream() -> tuple[KneserNey, list[int]]:
    stream = torch.randint(12, (600,), generator=torch.Generator().manual_seed(2))
    return KneserNey(stream, VOCAB, order=3), stream.tolist()


@pytest.mark.parametrize("history", [[], [5], [1, 2], [3, 4, 5], [39, 38]], ids=str)
def test_the_ngram_draft_gives_kneser_neys_probability_of_every_token(history: list[int]) -> None:
    ngram, _ = ngram_and_stream()
    vector = NgramDraft(ngram).distribution(history)
    one_by_one = torch.tensor([ngram.probability(history, token) for token in range(VOCAB)], dtype=torch.float64)
    assert torch.allclose(vector, one_by_one, rtol=0, atol=1e-14)
    assert math.isclose(float(vector.sum()), 1.0, abs_tol=1e-12)


def greedy_reference(model: DecoderOnlyTransformer, prompt: list[int], new: int) -> list[int]:
    return generate(
        model, None, prompt=torch.tensor([prompt]), max_new_tokens=new, choose=lambda x: x.argmax(-1), end_id=None
    )[0]


@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_speculative_decoding_writes_the_targets_text(k: int) -> None:
    target = small_model(0)
    drafts = {"cut": first_layers(target, 1), "other model": small_model(5)}
    ngram = NgramDraft(ngram_and_stream()[0])
    for seed in range(3):
        prompt = torch.randint(VOCAB, (6,), generator=torch.Generator().manual_seed(seed)).tolist()
        expected = greedy_reference(target, prompt, 20)
        readers: list[Reader] = [*(CachedReader(d) for d in drafts.values()), NgramReader(ngram)]
        for draft in readers:
            result = speculative_decode(CachedReader(target), draft, prompt, k=k, max_new_tokens=20)
            assert result.tokens == expected
            assert sum(result.accepted) + len(result.accepted) == 20
            assert all(0 <= a <= d <= k for a, d in zip(result.accepted, result.drafted))


def test_a_draft_that_is_the_target_is_always_accepted() -> None:
    target = small_model(0)
    result = speculative_decode(CachedReader(target), CachedReader(target), [1, 2, 3], k=4, max_new_tokens=20)
    assert result.accepted == [4, 4, 4, 4] and result.tokens == greedy_reference(target, [1, 2, 3], 20)


def test_the_rounds_counted_from_agreements_are_those_of_real_runs() -> None:
    target, draft = small_model(0), small_model(7)
    for seed, k in itertools.product(range(2), (1, 3)):
        prompt = torch.randint(VOCAB, (5,), generator=torch.Generator().manual_seed(seed)).tolist()
        written = greedy_reference(target, prompt, 24)
        run = speculative_decode(CachedReader(target), CachedReader(draft), prompt, k=k, max_new_tokens=24)
        assert run.accepted == greedy_rounds(agreements(CachedReader(draft), prompt, written), k)


def test_greedy_rounds_by_hand() -> None:
    assert greedy_rounds([True, True, False, True, True, True, True, True], 2) == [2, 2, 1]
    assert greedy_rounds([False] * 4, 3) == [0, 0, 0, 0]
    assert greedy_rounds([True] * 6, 10) == [5]
    with pytest.raises(ValueError, match="k must be a positive integer"):
        greedy_rounds([True], 0)


def test_speculative_decode_refuses_bad_arguments() -> None:
    target = small_model(0)

    def run(**changes: object) -> None:
        arguments: dict[str, object] = {"k": 2, "max_new_tokens": 4, **changes}
        prompt = arguments.pop("prompt", [1, 2])
        used = arguments.pop("used", False)
        draft = CachedReader(target)
        if used:
            draft.extend([1])
        speculative_decode(CachedReader(target), draft, prompt, **arguments)  # type: ignore[arg-type]

    for changes, message in (
        ({"k": 0}, "k must be a positive integer"),
        ({"max_new_tokens": 0}, "max_new_tokens must be a positive integer"),
        ({"temperature": 0.0}, "temperature must be"),
        ({"prompt": []}, "prompt must hold at least one token"),
        ({"used": True}, "fresh readers"),
    ):
        with pytest.raises(ValueError, match=message):
            run(**changes)


def test_the_rules_first_token_has_exactly_the_targets_distribution() -> None:
    generator = torch.Generator().manual_seed(3)
    for _ in range(5):
        p = torch.randn(VOCAB, generator=generator, dtype=torch.float64).mul(2).softmax(0)
        q = torch.randn(VOCAB, generator=generator, dtype=torch.float64).mul(2).softmax(0)
        accepted = q * torch.clamp(p / q, max=1.0)  # drafted, then accepted
        output = accepted + (1 - accepted.sum()) * residual(p, q)
        assert torch.allclose(output, p, rtol=0, atol=1e-15)


def test_verify_greedy_accepts_up_to_the_first_disagreement() -> None:
    target_logits = torch.eye(5)[[2, 0, 4, 1]]  # argmax 2, 0, 4, 1
    assert verify(target_logits, torch.empty(0), [2, 0, 3]) == (2, 4)
    assert verify(target_logits, torch.empty(0), [2, 0, 4]) == (3, 1)  # all accepted: the bonus
    assert verify(target_logits[:1], torch.empty(0), []) == (0, 2)


class TableReader:
    """A toy reader over 5 tokens whose next-token logits depend on the last two tokens: the
    exact distribution of its continuations is a product of table rows."""

    def __init__(self, seed: int, sharpness: float) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.table = sharpness * torch.randn(5, 5, 5, generator=generator, dtype=torch.float64)
        self.history: list[int] = []

    @property
    def length(self) -> int:
        return len(self.history)

    def logits(self, history: Sequence[int]) -> Tensor:
        return self.table[history[-2] if len(history) > 1 else 0, history[-1]]

    def extend(self, tokens: Sequence[int]) -> Tensor:
        out = []
        for token in tokens:
            self.history.append(int(token))
            out.append(self.logits(self.history))
        return torch.stack(out)

    def rollback(self, length: int) -> None:
        del self.history[length:]


def chi_square_p_value(counts: dict[tuple[int, ...], int], expected: dict[tuple[int, ...], float]) -> float:
    """Pearson's test of counts against expected probabilities, the outcomes expected fewer than 5 times pooled."""
    draws = sum(counts.values())
    kept = [outcome for outcome, p in expected.items() if p * draws >= 5]
    rest = [outcome for outcome in expected if outcome not in kept]
    observed = [counts.get(o, 0) for o in kept] + [sum(counts.get(o, 0) for o in rest)]
    wanted = [expected[o] * draws for o in kept] + [sum(expected[o] for o in rest) * draws]
    statistic = sum((o - w) ** 2 / w for o, w in zip(observed, wanted) if w > 0)
    degrees = len([w for w in wanted if w > 0]) - 1
    return float(torch.special.gammaincc(torch.tensor(degrees / 2, dtype=torch.float64), torch.tensor(statistic / 2)))


def three_token_test(draws: int) -> float:
    """The chi-square p-value of the first three tokens that speculative sampling writes (k = 2), against
    the target's exact distribution of three tokens."""
    prompt = [1, 3]
    target = TableReader(seed=10, sharpness=1.5)
    p: dict[tuple[int, ...], float] = {
        (a, b, c): float(
            target.logits([*prompt])[a].exp()
            / target.logits([*prompt]).exp().sum()
            * (target.logits([3, a])[b].exp() / target.logits([3, a]).exp().sum())
            * (target.logits([a, b])[c].exp() / target.logits([a, b]).exp().sum())
        )
        for a, b, c in itertools.product(range(5), repeat=3)
    }
    rng = torch.Generator().manual_seed(4)
    counts: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        result = speculative_decode(
            TableReader(seed=10, sharpness=1.5),
            TableReader(seed=11, sharpness=1.5),
            prompt,
            k=2,
            max_new_tokens=3,
            temperature=1.0,
            rng=rng,
        )
        outcome = tuple(result.tokens)
        counts[outcome] = counts.get(outcome, 0) + 1
    return chi_square_p_value(counts, p)


def test_speculative_sampling_writes_the_targets_distribution_of_three_tokens() -> None:
    assert three_token_test(2000) > 1e-3


def test_the_same_test_fails_when_a_rejected_token_is_redrawn_from_p(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speculative, "residual", lambda p, q: p)
    assert three_token_test(1000) < 1e-6


def test_greedy_speculative_decoding_equals_transformers_assisted_generation() -> None:
    transformers = pytest.importorskip("transformers")
    from transformer_book.pretraining import BOOK_MODEL, load_pretrained

    transformers.logging.set_verbosity_error()
    theirs = transformers.LlamaForCausalLM.from_pretrained(BOOK_MODEL, dtype=torch.float64).eval()
    their_draft = transformers.LlamaForCausalLM.from_pretrained(
        BOOK_MODEL, num_hidden_layers=1, dtype=torch.float64
    ).eval()
    ours = load_pretrained()[0].double()
    our_draft = first_layers(ours, 1)
    for seed in range(2):
        prompt = torch.randint(4096, (1, 20), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            assisted = theirs.generate(
                prompt,
                assistant_model=their_draft,
                do_sample=False,
                max_new_tokens=24,
                min_new_tokens=24,
                pad_token_id=0,
            )[0, 20:].tolist()
        result = speculative_decode(
            CachedReader(ours), CachedReader(our_draft), prompt[0].tolist(), k=4, max_new_tokens=24
        )
        assert result.tokens == assisted
