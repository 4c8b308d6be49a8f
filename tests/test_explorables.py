"""The explorables: their Python side equals the package's own functions, bad input is refused with a
clear error, and the HTML is one self-contained block with labelled controls and live regions."""

from __future__ import annotations

import json
import math
import re
from html import unescape
from typing import Any

import pytest
import torch

from transformer_book import decoding
from transformer_book.explorables import (
    HeadView,
    MemoryCalculator,
    SamplingExplorer,
    filtered_distribution,
    fixed,
    format_estimate,
    memory_estimate,
)
from transformer_book.helpers import count_parameters
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.modern_decoder import kv_cache_bytes
from transformer_book.precision_and_memory import model_state_bytes
from transformer_book.scaling_laws import non_embedding_parameters, training_flops

LOGITS = [2.0, -1.0, 0.5, 3.0, 0.5, -2.5, 1.25, 0.0]

#: Two configurations: Llama 3 8B (as the modern-decoder chapter builds it) and a small one with MQA.
CONFIGS = [
    dict(vocab_size=128_256, d_model=4_096, num_layers=32, num_heads=32, num_kv_heads=8, d_ff=14_336,
         context=8_192, batch_size=1, bytes_per_number=2, tokens=15 * 10**12),
    dict(vocab_size=1_000, d_model=96, num_layers=3, num_heads=6, num_kv_heads=1, d_ff=250,
         context=64, batch_size=8, bytes_per_number=4, tokens=10**6),
]  # fmt: skip


def llama_style(config: dict[str, int], dtype: torch.dtype) -> DecoderOnlyTransformer:
    """The model memory_estimate describes, built on the meta device (sizes only)."""
    with torch.device("meta"):
        return DecoderOnlyTransformer(
            config["vocab_size"], d_model=config["d_model"], num_heads=config["num_heads"],
            num_layers=config["num_layers"], d_ff=config["d_ff"], max_len=config["context"], positions="none",
            scale_embeddings=False, activation="swiglu", norm="rms", bias=False, tie_embeddings=False,
            num_kv_heads=config["num_kv_heads"],
        ).to(dtype)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Sampling


def sample_token_distribution(logits: list[float], temperature: float, top_k: int | None) -> list[float]:
    """The probabilities decoding.sample_token hands to torch.multinomial, caught on their way."""
    caught = []

    def multinomial(probabilities: torch.Tensor, samples: int, generator: object = None) -> torch.Tensor:
        caught.append(probabilities)
        return torch.zeros(probabilities.shape[0], samples, dtype=torch.long)

    original = torch.multinomial
    torch.multinomial = multinomial  # type: ignore[assignment]
    try:
        decoding.sample_token(torch.tensor([logits], dtype=torch.float64), temperature=temperature, top_k=top_k)
    finally:
        torch.multinomial = original
    return caught[0][0].tolist()


@pytest.mark.parametrize("temperature", [0.3, 1.0, 1.7])
@pytest.mark.parametrize("top_k", [None, 1, 3, 5, 8])
def test_temperature_and_top_k_give_what_sample_token_draws_from(temperature: float, top_k: int | None) -> None:
    _, fate, final = filtered_distribution(LOGITS, temperature, top_k)
    assert final == pytest.approx(sample_token_distribution(LOGITS, temperature, top_k), abs=1e-12)
    assert fate.count("kept") == sum(p > 0 for p in final) == (len(LOGITS) if top_k is None else top_k)


@pytest.mark.parametrize("top_p", [0.05, 0.5, 0.8, 0.95, 1.0])
def test_top_p_keeps_the_smallest_set_holding_p(top_p: float) -> None:
    probabilities, fate, final = filtered_distribution(LOGITS, 0.9, None, top_p)
    # The nucleus as the decoding chapter's exercise computes it, in torch.
    sorted_probabilities, order = torch.softmax(torch.tensor(LOGITS, dtype=torch.float64) / 0.9, -1).sort(
        descending=True, stable=True
    )
    before = sorted_probabilities.cumsum(-1) - sorted_probabilities
    nucleus = set(order[before < top_p].tolist())
    assert {i for i, f in enumerate(fate) if f == "kept"} == nucleus
    assert sum(probabilities[i] for i in nucleus) >= top_p - 1e-12
    assert sum(final) == pytest.approx(1.0)


def test_top_p_works_on_what_top_k_kept() -> None:
    _, fate, final = filtered_distribution(LOGITS, 1.0, 3, 0.7)  # the top 3 renormalised: 0.649, 0.239, 0.113
    assert fate == ["kept", "top-k", "top-k", "kept", "top-k", "top-k", "top-p", "top-k"]
    assert final[0] + final[3] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (([], 1.0), "non-empty"),
        (([1.0, math.nan], 1.0), "finite"),
        ((LOGITS, 0.0), "temperature"),
        ((LOGITS, 1.0, 0), "top_k"),
        ((LOGITS, 1.0, None, 1.5), "top_p"),
        ((LOGITS, 1.0, None, 0.0), "top_p"),
    ],
)
def test_filtered_distribution_refuses_bad_input(arguments: tuple[Any, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        filtered_distribution(*arguments)


def test_sampling_explorer_lists_the_most_likely_tokens() -> None:
    tokens = [f" t{i}" for i in range(len(LOGITS))]
    explorer = SamplingExplorer(LOGITS, tokens, context="Once", shown=4)
    page = explorer._repr_html_()
    found = re.search(r'data-explorable="([^"]*)"', page)
    assert found, "the explorer carries no data"
    data = json.loads(unescape(found.group(1)))
    assert data["ids"] == [3, 0, 6, 2] and data["logits"] == LOGITS and data["shown"] == 4
    assert re.findall(r"<code>(␣t\d)</code>", page) == ["␣t3", "␣t0", "␣t6", "␣t2"], "spaces are not shown"
    for name in ("temperature", "top_k", "top_p"):
        field = re.search(rf'<input type="range" id="([^"]+)" name="{name}"', page)
        assert field and f'<label for="{field.group(1)}">' in page, f"{name}'s slider has no label"
    with pytest.raises(ValueError, match="one string per position"):
        SamplingExplorer(LOGITS, tokens[:3], context="Once")


# ---------------------------------------------------------------------------------------------
# Head view


def test_head_view_keeps_the_weights_and_refuses_a_wrong_shape() -> None:
    weights = torch.softmax(torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(0)), -1)
    view = HeadView(["The", " cat", " sat", "."], weights)
    assert view.weights[1][2][3] == [round(w, 4) for w in weights[1, 2, 3].tolist()]
    page = view._repr_html_()
    assert page.count('class="tb-token"') == 4 and page.count("<option") == 2 + 3
    assert 'aria-label="token 1: &quot; cat&quot;"' in page, "a token button is not named by its text"
    assert "<span>␣␣</span>" in HeadView(["a", "  "], [[[[1.0, 0.0], [0.5, 0.5]]]])._repr_html_()
    assert 'role="status"' in page and "<script>" in page and "src=" not in page
    with pytest.raises(ValueError, match="one string per position"):
        HeadView(["The", " cat"], weights)
    with pytest.raises(ValueError, match="shape"):
        HeadView(["a", "b", "c", "d"], [[weights[0, 0].tolist()], [weights[0, 0, :3].tolist()]])
    with pytest.raises(ValueError, match="finite"):
        HeadView(["a"], [[[[math.inf]]]])


# ---------------------------------------------------------------------------------------------
# Memory and compute


@pytest.mark.parametrize("config", CONFIGS, ids=["llama3-8b", "small-mqa"])
def test_memory_estimate_equals_the_packages_functions(config: dict[str, int]) -> None:
    estimate = memory_estimate(**config)
    dtype = {2: torch.bfloat16, 4: torch.float32}[config["bytes_per_number"]]
    model = llama_style(config, dtype)
    state = model_state_bytes(model)
    assert estimate["parameters"] == count_parameters(model)
    assert estimate["non-embedding parameters"] == non_embedding_parameters(model)
    assert estimate["weights"] == state["weights"] and estimate["gradients"] == state["gradients"]
    assert estimate["Adam state"] == state["optimizer state"]
    assert estimate["kv cache"] == kv_cache_bytes(
        num_layers=config["num_layers"], num_kv_heads=config["num_kv_heads"],
        d_head=config["d_model"] // config["num_heads"], tokens=config["context"],
        bytes_per_number=config["bytes_per_number"], batch_size=config["batch_size"],
    )  # fmt: skip
    assert estimate["6ND"] == training_flops(non_embedding_parameters(model), config["tokens"])


def test_memory_estimate_refuses_bad_configurations() -> None:
    good = CONFIGS[1]
    with pytest.raises(ValueError, match="num_heads=7 must divide d_model=96"):
        memory_estimate(**{**good, "num_heads": 7})
    with pytest.raises(ValueError, match="num_kv_heads=4 must divide num_heads=6"):
        memory_estimate(**{**good, "num_kv_heads": 4})
    with pytest.raises(ValueError, match="context"):
        memory_estimate(**{**good, "context": 0})
    with pytest.raises(ValueError, match="give exactly these settings"):
        MemoryCalculator(**{name: value for name, value in good.items() if name != "tokens"})


def test_calculator_shows_the_configuration_in_labelled_fields() -> None:
    page = MemoryCalculator(**CONFIGS[0])._repr_html_()
    for name, value in CONFIGS[0].items():
        field = re.search(rf'<input type="number" id="([^"]+)" name="{name}" min="1" step="1" value="(\d+)"', page)
        assert field and int(field.group(2)) == value, f"no field for {name}"
        assert f'<label for="{field.group(1)}">' in page
    assert format_estimate(memory_estimate(**CONFIGS[0]))["kv cache"] == "1,073,741,824 bytes (1.00 GiB)"
    assert format_estimate(memory_estimate(**CONFIGS[1]))["6ND"] == "2.263e+12"


def test_fixed_rounds_ties_up_as_javascript_does() -> None:
    assert (fixed(0.125, 2), fixed(0.135, 2), fixed(1 / 3, 3), fixed(2.0, 1)) == ("0.13", "0.14", "0.333", "2.0")
