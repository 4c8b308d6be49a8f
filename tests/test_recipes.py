"""Unit tests for transformer_book.recipes (exported from book/recipes.md)."""

from __future__ import annotations

import math
import warnings
from typing import Any, cast

import pytest
import torch
from torch import nn

from transformer_book.model import DecoderOnlyTransformer, MultiHeadAttention
from transformer_book.recipes import (
    HeadwiseRMSNorm,
    MuonWithAdamW,
    largest_attention_logit,
    newton_schulz,
    use_qk_norm,
    warmup_stable_decay,
)
from transformer_book.training import warmup_cosine


def small_model(**options: object) -> DecoderOnlyTransformer:
    torch.manual_seed(0)
    block = dict(
        d_ff=48,
        positions="none",
        rope_theta=10_000.0,
        scale_embeddings=False,
        activation="swiglu",
        norm="rms",
        bias=False,
    )
    block.update(options)
    return DecoderOnlyTransformer(40, d_model=16, num_heads=4, num_layers=2, max_len=12, **block)  # type: ignore[arg-type]


@pytest.mark.parametrize("shape", [(16, 16), (8, 24), (24, 8)])
def test_newton_schulz_is_torch_muons_step_to_bfloat16_rounding(shape: tuple[int, int]) -> None:
    torch.manual_seed(1)
    weight = nn.Parameter(torch.randn(shape))
    gradient = torch.randn(shape)
    weight.grad = gradient.clone()
    before = weight.detach().clone()
    torch.optim.Muon([weight], lr=0.1, weight_decay=0.0).step()
    scale = 0.1 * math.sqrt(max(1.0, shape[0] / shape[1]))  # torch's default adjust_lr_fn
    theirs = ((before - weight.detach()) / scale).double()
    ours = newton_schulz(gradient.double())
    assert ((theirs - ours).abs().max() / ours.abs().max()).item() < 0.06


def test_newton_schulz_equalises_singular_values_and_keeps_the_singular_vectors() -> None:
    torch.manual_seed(2)
    u, _ = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(12, 12, dtype=torch.float64))
    singular_values = torch.logspace(0, -1.5, 12, dtype=torch.float64)  # a spread of 30x
    gradient = u @ torch.diag(singular_values) @ v.T
    result = newton_schulz(gradient)
    # an odd polynomial in the gradient: the same singular vectors, each value mapped on its own
    mapped = u.T @ result @ v
    assert torch.allclose(mapped, torch.diag(torch.diagonal(mapped)), atol=1e-10)
    assert torch.diagonal(mapped).min() > 0.5 and torch.diagonal(mapped).max() < 1.5
    assert torch.linalg.svdvals(gradient)[0] / torch.linalg.svdvals(gradient)[-1] > 30 - 1e-9


def test_newton_schulz_refuses_what_is_not_a_matrix() -> None:
    with pytest.raises(ValueError, match="orthogonalises matrices"):
        newton_schulz(torch.ones(3))
    with pytest.raises(ValueError, match="steps"):
        newton_schulz(torch.ones(3, 3), steps=0)


def test_muon_with_adamw_splits_parameters_and_one_scheduler_drives_both() -> None:
    model = small_model()
    optimizer = MuonWithAdamW(model, lr=1e-3, muon_lr=0.02)
    embedding = model.target_embedding.embedding.weight
    hidden = {id(p) for p in optimizer.hidden}
    assert id(embedding) not in hidden
    assert all(p.dim() == 2 for p in optimizer.hidden)
    adamw_parameters = {id(p) for group in optimizer.adamw.param_groups for p in group["params"]}
    assert hidden.isdisjoint(adamw_parameters)
    assert hidden | adamw_parameters == {id(p) for p in model.parameters()}
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5 ** (step + 1))
    for _ in range(2):
        model(torch.randint(0, 40, (2, 12))).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    assert optimizer.muon.param_groups[0]["lr"] == pytest.approx(0.02 * 0.125)
    assert optimizer.adamw.param_groups[0]["lr"] == pytest.approx(1e-3 * 0.125)


def test_muon_with_adamw_moves_every_parameter() -> None:
    model = small_model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = MuonWithAdamW(model, lr=1e-2, muon_lr=0.02)
    model(torch.randint(0, 40, (2, 12))).square().mean().backward()
    optimizer.step()
    assert all(not torch.equal(old, new) for old, new in zip(before, model.parameters()))


def test_muon_with_adamw_needs_a_hidden_matrix() -> None:
    with pytest.raises(ValueError, match="no weight matrix"):
        MuonWithAdamW(nn.Embedding(4, 3), lr=1e-3, muon_lr=0.02)


def test_warmup_stable_decay_matches_transformers_after_the_warm_up() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers.optimization import get_wsd_schedule
    steps, warmup = 50, 5
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)
    reference = get_wsd_schedule(
        optimizer,
        num_warmup_steps=warmup,
        num_decay_steps=10,
        num_training_steps=steps,
        decay_type="linear",
        min_lr_ratio=0.1,
    )
    for step in range(steps + 5):
        if step >= warmup:
            ours = warmup_stable_decay(step, warmup=warmup, total=steps)
            assert ours == pytest.approx(reference.get_last_lr()[0], abs=1e-12)
        optimizer.step()
        reference.step()


def test_warmup_stable_decay_warms_up_like_the_cosine_and_holds_its_peak() -> None:
    for step in range(8):
        assert warmup_stable_decay(step, warmup=8, total=100) == warmup_cosine(step, warmup=8, total=100)
    assert all(warmup_stable_decay(step, warmup=8, total=100) == 1.0 for step in range(8, 81))
    assert warmup_stable_decay(99, warmup=8, total=100) < 0.15
    assert warmup_stable_decay(500, warmup=8, total=100) == pytest.approx(0.1)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"warmup": -1, "total": 10}, "warmup"),
        ({"warmup": 9, "total": 10}, "fit after"),
        ({"warmup": 0, "total": 10, "decay": 0.0}, "at least one step"),
        ({"warmup": 0, "total": 10, "floor": 1.5}, "floor"),
        ({"warmup": 0, "total": 0}, "total"),
    ],
)
def test_warmup_stable_decay_refuses_a_schedule_that_does_not_fit(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        warmup_stable_decay(0, **options)


def test_headwise_rms_norm_normalises_each_head_alone() -> None:
    norm = HeadwiseRMSNorm(num_heads=3, d_head=4)
    x = torch.randn(2, 5, 12) * torch.tensor([1.0] * 4 + [100.0] * 4 + [0.1] * 4)
    heads, inputs = norm(x).view(2, 5, 3, 4), x.view(2, 5, 3, 4)
    expected = inputs / torch.sqrt(inputs.square().mean(dim=-1, keepdim=True) + 1e-5)  # each head on its own
    assert torch.allclose(heads, expected, atol=1e-5)
    with pytest.raises(ValueError, match="3 heads of 4 features"):
        norm(torch.randn(2, 5, 10))


def test_qk_norm_bounds_every_attention_logit() -> None:
    model = small_model()
    layers = use_qk_norm(model)
    assert len(layers) == 2
    with torch.no_grad():
        for layer in layers:
            for projection in (layer.w_q, layer.w_k):
                linear = cast(nn.Linear, cast(nn.Sequential, projection)[0])
                linear.weight.mul_(50.0)  # weights that would give huge logits without the norm
    largest = largest_attention_logit(model, torch.randint(0, 40, (3, 12)))
    assert largest <= math.sqrt(4) + 1e-5  # d_head = 4, every gain 1
    plain = small_model()
    with torch.no_grad():
        for module in plain.modules():
            if isinstance(module, MultiHeadAttention):
                module.w_q.weight.mul_(50.0)
                module.w_k.weight.mul_(50.0)
    assert largest_attention_logit(plain, torch.randint(0, 40, (3, 12))) > 10 * largest


def test_largest_attention_logit_is_the_largest_causal_score_of_every_head() -> None:
    """With RoPE off and w_q = w_k = identity, a head's score is the dot product of its features of
    the attention's input, which a pre-hook records: the function must find the largest over every
    layer, head and causal pair."""
    model = small_model(rope_theta=None).eval()
    layers = [module for module in model.modules() if isinstance(module, MultiHeadAttention)]
    inputs: list[torch.Tensor] = []
    with torch.no_grad():
        for layer in layers:
            layer.w_q.weight.copy_(torch.eye(16))
            layer.w_k.weight.copy_(torch.eye(16))
            layer.register_forward_pre_hook(lambda _, arguments: inputs.append(arguments[0].detach().clone()))
    tokens = torch.randint(0, 40, (2, 9))
    found = largest_attention_logit(model, tokens)
    expected = -math.inf
    for x in inputs:
        heads = x.view(2, 9, 4, 4)  # (batch, position, head, d_head)
        for i in range(9):
            for j in range(i + 1):  # causal: j <= i
                expected = max(expected, ((heads[:, i] * heads[:, j]).sum(-1) / 2.0).max().item())
    assert len(inputs) == 2
    assert found == pytest.approx(expected, rel=1e-5)


def test_use_qk_norm_refuses_twice_and_models_without_attention() -> None:
    model = small_model()
    use_qk_norm(model)
    with pytest.raises(ValueError, match="QK-norm twice"):
        use_qk_norm(model)
    with pytest.raises(ValueError, match="no MultiHeadAttention"):
        use_qk_norm(nn.Linear(3, 3))


def test_a_model_with_qk_norm_decodes_with_the_cache_as_without_it() -> None:
    """The cache path of generate calls w_q and w_k too: each step's logits there equal the logits of
    a full forward pass over the same tokens."""
    from transformer_book.decoding import generate

    model = small_model()
    use_qk_norm(model)
    model.eval()
    prompt = torch.randint(0, 40, (1, 4))
    step_logits: list[torch.Tensor] = []

    def choose(logits: torch.Tensor) -> torch.Tensor:
        step_logits.append(logits.clone())
        return logits.argmax(-1)

    new_tokens = torch.tensor(generate(model, None, prompt=prompt, max_new_tokens=6, choose=choose, end_id=None))
    tokens = torch.cat([prompt, new_tokens], dim=1)
    with torch.no_grad():
        full = model(tokens)
    for step, logits in enumerate(step_logits):
        assert torch.allclose(logits, full[:, prompt.shape[1] - 1 + step], atol=1e-5)


def test_qk_norm_equals_transformers_qwen3() -> None:
    """Qwen 3 is a Llama with QK-norm: its weights, read through the book's Llama loader, and its
    q_norm and k_norm gains put into use_qk_norm's norms (permuted to the book's RoPE pairs, as the
    loader permutes W^Q's rows), give the same logits to float32's rounding of RoPE and RMSNorm."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from transformer_book.modern_decoder import interleave_rotary_rows, llama_from_huggingface

    shape = dict(
        vocab_size=50,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=16,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
    )
    torch.manual_seed(3)
    qwen = Qwen3ForCausalLM(Qwen3Config(**shape, head_dim=8)).double().eval()
    with torch.no_grad():
        for block in qwen.model.layers:  # gains away from 1, so that copying them is tested
            block.self_attn.q_norm.weight.uniform_(0.5, 1.5)
            block.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    llama = LlamaForCausalLM(LlamaConfig(**shape)).double().eval()
    qk_gains = (".q_norm.", ".k_norm.")
    llama.load_state_dict({k: v for k, v in qwen.state_dict().items() if not any(g in k for g in qk_gains)})
    ours = llama_from_huggingface(llama)
    tokens = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        without = ours(tokens)
    layers = use_qk_norm(ours)
    ours.double()
    with torch.no_grad():
        for layer, block in zip(layers, qwen.model.layers, strict=True):
            for projection, gain in (
                (layer.w_q, block.self_attn.q_norm.weight),
                (layer.w_k, block.self_attn.k_norm.weight),
            ):
                norm = cast(HeadwiseRMSNorm, cast(nn.Sequential, projection)[1]).norm
                norm.weight.copy_(interleave_rotary_rows(gain[:, None], 1)[:, 0])
        theirs, mine = qwen(tokens).logits, ours(tokens)
    # transformers computes RoPE's angles and RMSNorm in float32 even in a float64 model (as
    # test_modern_decoder's float64 comparison of a Llama, where the same bound holds)
    assert (mine - theirs).abs().max().item() < 1e-4
    assert (without - theirs).abs().max().item() > 1e-2
