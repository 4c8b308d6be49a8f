"""Unit tests for transformer_book.verifiable_rewards (exported from book/verifiable-rewards.md).

GRPOLoss is checked against trl's GRPO loss (``GRPOTrainer._compute_loss`` with ``loss_type="grpo"``)
on the same random log-probabilities and advantages: nothing is downloaded and no model is built,
since trl's loss reads the policy's log-probabilities from one method, which a stand-in returns.
Both are held to a float64 evaluation of the same loss, within a bound from float32's precision.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator, Sequence
from types import SimpleNamespace

import pytest
import torch
from trl.trainer.grpo_trainer import GRPOTrainer
from trl.trainer.utils import nanstd

from transformer_book.data import IGNORE_INDEX
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.test_time_compute import final_answer
from transformer_book.training import train
from transformer_book.verifiable_rewards import (
    GRPOLoss,
    RolloutLogProbs,
    Rollouts,
    TokenLogProbs,
    accepted,
    group_advantages,
    rollout_rows,
    rollouts,
    token_log_probs,
)
from transformer_book.worked_steps import (
    MOST_MOVES,
    PROMPT_LENGTH,
    TOKEN_ID,
    VOCABULARY,
    Moves,
    is_right,
    random_moves,
)

# float32 keeps 24 bits: each log-probability, ratio and product is within about 6e-8 of its value,
# and a loss of order one that averages a few hundred of them stays within 1e-5 of the float64 one.
FLOAT32_BOUND = 1e-5


def random_case(seed: int, rows: int = 12, width: int = 9) -> dict[str, torch.Tensor]:
    """Log-probabilities of a policy, the policy that sampled, and a reference, far enough apart that
    the clip binds on some tokens; a mask of varying lengths (one row empty); and advantages."""
    generator = torch.Generator().manual_seed(seed)
    policy = -torch.rand(rows, width, generator=generator, dtype=torch.float64) * 3
    old = policy + torch.randn(rows, width, generator=generator, dtype=torch.float64) * 0.3
    reference = policy + torch.randn(rows, width, generator=generator, dtype=torch.float64) * 0.5
    lengths = torch.randint(1, width + 1, (rows,), generator=generator)
    lengths[0] = 0
    counted = torch.arange(width) < lengths.unsqueeze(1)
    advantages = torch.randn(rows, generator=generator, dtype=torch.float64)
    return {"policy": policy, "old": old, "reference": reference, "counted": counted, "advantages": advantages}


def book_loss(case: dict[str, torch.Tensor], *, beta: float, clip: float, dtype: torch.dtype) -> torch.Tensor:
    keep = case["counted"]
    masked = {name: case[name].to(dtype).masked_fill(~keep, 0.0) for name in ("policy", "old", "reference")}
    log_probs = TokenLogProbs(masked["policy"], masked["reference"], masked["old"], keep)
    loss: torch.Tensor = GRPOLoss(clip=clip, beta=beta)(log_probs, case["advantages"].to(dtype))
    return loss


def trl_loss(case: dict[str, torch.Tensor], *, beta: float, clip: float) -> torch.Tensor:
    """trl's GRPO loss in float32, called on a stand-in for the trainer that holds the settings
    _compute_loss reads and returns the policy's log-probabilities instead of running a model."""
    policy = case["policy"].float()
    rows, width = policy.shape
    identity = SimpleNamespace(
        gather=lambda t: t, gather_for_metrics=lambda t: t, reduce=lambda t, reduction: t, sync_gradients=True
    )
    stand_in = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (policy, torch.zeros_like(policy), None),
        aux_loss_enabled=False,
        top_entropy_quantile=1.0,
        off_policy_mask_threshold=None,
        importance_sampling_level="token",
        beta=beta,
        loss_type="grpo",
        epsilon_low=clip,
        epsilon_high=clip,
        use_vllm=False,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None),
        model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1,
        _entropy_bonus_enabled=False,
        _metrics=defaultdict(lambda: defaultdict(list)),
        accelerator=identity,
    )
    inputs = {
        "prompt_ids": torch.zeros(rows, 3, dtype=torch.long),
        "prompt_mask": torch.ones(rows, 3, dtype=torch.long),
        "completion_ids": torch.zeros(rows, width, dtype=torch.long),
        "completion_mask": case["counted"].long(),
        "advantages": case["advantages"].float(),
        "old_per_token_logps": case["old"].float(),
        "ref_per_token_logps": case["reference"].float(),
    }
    loss: torch.Tensor = GRPOTrainer._compute_loss(stand_in, None, inputs)  # type: ignore[arg-type]
    return loss


@pytest.mark.parametrize("beta", [0.0, 0.04, 0.5])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grpo_loss_equals_trls_within_float32_of_the_float64_loss(seed: int, beta: float) -> None:
    case = random_case(seed)
    exact = book_loss(case, beta=beta, clip=0.2, dtype=torch.float64)
    ours = book_loss(case, beta=beta, clip=0.2, dtype=torch.float32)
    theirs = trl_loss(case, beta=beta, clip=0.2)
    assert abs(float(ours) - float(exact)) <= FLOAT32_BOUND, (float(ours), float(exact))
    assert abs(float(theirs) - float(exact)) <= FLOAT32_BOUND, (float(theirs), float(exact))


def test_the_cases_clip_some_tokens_so_the_comparison_covers_the_clip() -> None:
    case = random_case(0)
    ratio = (case["policy"] - case["old"]).exp()[case["counted"]]
    assert ((ratio < 0.8) | (ratio > 1.2)).any() and ((ratio > 0.8) & (ratio < 1.2)).any()
    assert book_loss(case, beta=0.0, clip=0.2, dtype=torch.float64) != book_loss(
        case, beta=0.0, clip=0.9, dtype=torch.float64
    )


def test_grpo_loss_gradient_at_one_step_per_batch_is_the_policy_gradient() -> None:
    """With old = the policy, detached, the loss's gradient is -A / |o| per counted token."""
    policy = torch.tensor([[-0.5, -1.0, -2.0], [-0.3, -0.7, -0.1]], requires_grad=True)
    counted = torch.tensor([[True, True, False], [True, True, True]])
    advantages = torch.tensor([1.5, -0.5])
    GRPOLoss()(TokenLogProbs(policy.masked_fill(~counted, 0.0), None, None, counted), advantages).backward()
    expected = torch.tensor([[-1.5 / 2, -1.5 / 2, 0.0], [0.5 / 3, 0.5 / 3, 0.5 / 3]]) / 2
    torch.testing.assert_close(policy.grad, expected)


def test_grpo_loss_refuses_bad_settings_with_named_errors() -> None:
    with pytest.raises(ValueError, match="clip"):
        GRPOLoss(clip=0.0)
    with pytest.raises(ValueError, match="clip"):
        GRPOLoss(clip=1.5)
    with pytest.raises(ValueError, match="beta"):
        GRPOLoss(beta=-0.1)
    with pytest.raises(ValueError, match="beta"):
        GRPOLoss(beta=float("nan"))
    policy = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="reference"):
        GRPOLoss(beta=0.1)(TokenLogProbs(policy, None, None, torch.ones(1, 2, dtype=torch.bool)), torch.ones(1))


def test_group_advantages_match_trls_group_normalisation() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]])
    expected = (rewards - rewards.mean(dim=1, keepdim=True)) / (nanstd(rewards, dim=1).unsqueeze(1) + 1e-4)
    torch.testing.assert_close(group_advantages(rewards), expected)
    assert torch.equal(group_advantages(rewards)[1], torch.zeros(4))
    torch.testing.assert_close(group_advantages(rewards, scale=False)[0], torch.tensor([0.5, -0.5, -0.5, 0.5]))


@pytest.mark.parametrize("shape", [(4,), (3, 1), (2, 2, 2)])
def test_group_advantages_refuse_a_shape_that_is_not_groups(shape: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="shape"):
        group_advantages(torch.zeros(shape))


def test_rollout_rows_put_each_written_token_where_it_is_predicted() -> None:
    rng = random.Random(0)
    questions = [random_moves(2, rng, test=False), random_moves(8, rng, test=False)]
    written = [[TOKEN_ID[w] for w in questions[0].weekdays()], list(range(12))]  # the second runs past eight steps
    tokens, targets = rollout_rows(questions, written)
    assert tokens.shape == targets.shape == (2, PROMPT_LENGTH + MOST_MOVES)
    dot = TOKEN_ID["."]
    assert targets[0, PROMPT_LENGTH - 1 : PROMPT_LENGTH + 2].tolist() == [*written[0], dot]
    assert (targets[0, PROMPT_LENGTH + 2 :] == IGNORE_INDEX).all() and (
        targets[:, : PROMPT_LENGTH - 1] == IGNORE_INDEX
    ).all()
    assert targets[1, PROMPT_LENGTH - 1 :].tolist() == [*range(MOST_MOVES), dot]  # cut at eight steps, then '.'
    # a row reads its prompt, then the written tokens (its last target, '.', is read by no one), padded with '.'
    assert tokens[0, PROMPT_LENGTH : PROMPT_LENGTH + 3].tolist() == [*written[0], dot]
    assert tokens[1, PROMPT_LENGTH:].tolist() == list(range(MOST_MOVES))


def test_token_log_probs_are_the_models_and_zero_where_nothing_counts() -> None:
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(len(VOCABULARY), d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=20).eval()
    tokens = torch.randint(0, len(VOCABULARY), (2, 6))
    targets = torch.tensor([[IGNORE_INDEX, IGNORE_INDEX, 3, 4, IGNORE_INDEX, IGNORE_INDEX], [IGNORE_INDEX] * 5 + [1]])
    picked = token_log_probs(model, tokens, targets)
    expected = model(tokens).log_softmax(-1)
    assert picked[0, 2] == expected[0, 2, 3] and picked[1, 5] == expected[1, 5, 1]
    assert (picked[targets == IGNORE_INDEX] == 0).all()


def tiny_policy() -> DecoderOnlyTransformer:
    torch.manual_seed(0)
    return DecoderOnlyTransformer(
        len(VOCABULARY), d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=PROMPT_LENGTH + MOST_MOVES + 1
    )


def question_batches(count: int, seed: int = 0) -> Iterator[list[Moves]]:
    rng = random.Random(seed)
    while True:
        yield [random_moves(rng.randint(1, MOST_MOVES), rng, test=False) for _ in range(count)]


def checker(question: Moves, written: Sequence[int]) -> float:
    return float(is_right(question, final_answer(written)))


def test_rollouts_sample_groups_and_reward_them_with_the_given_function() -> None:
    policy = tiny_policy()
    batch = next(
        rollouts(policy, question_batches(3), checker, group=4, rng=torch.Generator().manual_seed(0), reference=policy)
    )
    assert isinstance(batch, Rollouts)
    assert batch.rewards.shape == (3, 4) and batch.tokens.shape[0] == batch.target_output.shape[0] == 12
    torch.testing.assert_close(batch.target_output, group_advantages(batch.rewards).flatten())
    assert batch.num_target_tokens == int((batch.targets != IGNORE_INDEX).sum())
    # the reference's log-probabilities are taken when sampling, with no gradient
    assert batch.reference is not None and not batch.reference.requires_grad
    assert set(batch.model_inputs()) == {"tokens", "targets", "reference"}
    without = next(rollouts(policy, question_batches(3), checker, group=4, rng=torch.Generator().manual_seed(0)))
    assert without.reference is None and set(without.model_inputs()) == {"tokens", "targets"}


def test_accepted_keeps_only_rewarded_answers_and_skips_a_batch_with_none() -> None:
    policy = tiny_policy()
    always = next(
        rollouts(policy, question_batches(2), lambda q, w: 1.0, group=2, rng=torch.Generator().manual_seed(0))
    )
    never = next(rollouts(policy, question_batches(2), lambda q, w: 0.0, group=2, rng=torch.Generator().manual_seed(0)))
    half = Rollouts(
        always.tokens, always.targets, None, torch.tensor([[1.0, 0.0], [0.0, 1.0]]), always.target_output, 0
    )
    kept = list(accepted(iter([never, half, always])))
    assert len(kept) == 2
    assert torch.equal(kept[0].inputs, always.tokens[[0, 3]]) and torch.equal(kept[1].inputs, always.tokens)


def test_grpo_through_train_raises_the_reward_of_a_reward_it_can_reach() -> None:
    """A reward for writing Mon first: a few steps of GRPO through train() make it more frequent."""
    policy = tiny_policy()
    monday = TOKEN_ID["Mon"]

    def mondays(batches: Iterator[Rollouts]) -> float:
        return float(torch.cat([next(batches).rewards.flatten() for _ in range(4)]).mean())

    def first_is_monday(question: Moves, written: Sequence[int]) -> float:
        return float(len(written) > 0 and written[0] == monday)

    def sampled(policy_now: DecoderOnlyTransformer, seed: int) -> Iterator[Rollouts]:
        generator = torch.Generator().manual_seed(seed)
        return rollouts(policy_now, question_batches(16, seed), first_is_monday, group=8, rng=generator)

    before = mondays(sampled(policy, 1))
    adam = torch.optim.AdamW(policy.parameters(), lr=3e-3)
    train(RolloutLogProbs(policy), sampled(policy, 2), steps=30, optimizer=adam, loss_function=GRPOLoss(), desc=None)
    after = mondays(sampled(policy, 1))
    assert after > before + 0.3, (before, after)
