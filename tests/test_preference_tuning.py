"""Unit tests for transformer_book.preference_tuning (exported from book/preference-tuning.md)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from transformer_book.data import IGNORE_INDEX
from transformer_book.instruction_tuning import ChatTemplate
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.preference_tuning import (
    DPOLoss,
    PolicyAndReference,
    PreferencePair,
    chosen_and_rejected,
    dpo_loss,
    implicit_reward,
    preference_accuracy,
    preference_batch,
    preference_batches,
    sequence_log_probs,
    token_kl,
)
from transformer_book.tokenization import BytePairTokenizer
from transformer_book.training import train

TEXTS = ["Which year is 2016-03-18 in? The year 2016. Which month is 1999-12-31 in? December."]
PAIRS = [
    PreferencePair("Which year is 2016-03-18 in?", "2016", "2015", "year"),
    PreferencePair("Which month is 1999-12-31 in?", "December", "November", "month"),
    PreferencePair("Which day of the month is 1999-12-31?", "31", "30", "day"),
]
# Log-probabilities of four pairs: policy chosen, policy rejected, reference chosen, reference rejected.
FIXED = torch.tensor(
    [[-1.0, -3.0, -1.5, -2.0], [-4.0, -2.0, -3.0, -2.5], [-0.2, -9.0, -0.1, -1.0], [-2.0, -2.0, -2.0, -2.0]],
    dtype=torch.float64,
)


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate(BytePairTokenizer.learn(TEXTS, num_merges=20))


def tiny_model(template: ChatTemplate, seed: int = 0) -> DecoderOnlyTransformer:
    torch.manual_seed(seed)
    return DecoderOnlyTransformer(template.vocab_size, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=32)


def paper_equation_7(
    policy_chosen: float, policy_rejected: float, ref_chosen: float, ref_rejected: float, beta: float
) -> float:
    """-log sigma(beta log pi(y_w)/pi_ref(y_w) - beta log pi(y_l)/pi_ref(y_l)), written out with math.exp."""
    z = beta * (policy_chosen - ref_chosen) - beta * (policy_rejected - ref_rejected)
    return -math.log(1.0 / (1.0 + math.exp(-z)))


@pytest.mark.parametrize("beta", [0.01, 0.1, 0.5, 1.0, 5.0])
def test_dpo_loss_is_the_papers_equation_7(beta: float) -> None:
    direct = sum(
        paper_equation_7(win, lose, ref_win, ref_lose, beta) for win, lose, ref_win, ref_lose in FIXED.tolist()
    ) / len(FIXED)
    assert dpo_loss(*FIXED.T, beta=beta).item() == pytest.approx(direct, rel=1e-12, abs=1e-12)


def test_the_implicit_reward_is_beta_times_the_log_ratio() -> None:
    policy, reference = FIXED[:, 0], FIXED[:, 2]
    torch.testing.assert_close(implicit_reward(policy, reference, beta=0.3), 0.3 * (policy - reference))


def test_dpo_is_a_two_way_classification_with_the_implicit_rewards_as_logits() -> None:
    log_probs = torch.stack([FIXED[:, [0, 2]], FIXED[:, [1, 3]]], dim=1)  # [pair, chosen/rejected, policy/ref]
    preferred = torch.zeros(len(FIXED), dtype=torch.long)
    ratios = log_probs[..., 0] - log_probs[..., 1]
    loss = DPOLoss(0.7)(log_probs, preferred)
    torch.testing.assert_close(loss, F.cross_entropy(0.7 * ratios, preferred))
    torch.testing.assert_close(loss, dpo_loss(*FIXED.T, beta=0.7))
    # The same pairs with the two answers in the other order, and the preferred index saying so.
    swapped = DPOLoss(0.7)(log_probs.flip(1), torch.ones_like(preferred))
    torch.testing.assert_close(swapped, loss)


def test_preference_accuracy_counts_a_tie_as_half() -> None:
    assert preference_accuracy(torch.tensor([1.0, -1.0, 0.0, 0.0])) == 0.5
    assert preference_accuracy(torch.tensor([2.0, 0.5, 0.0])) == pytest.approx(2.5 / 3)
    with pytest.raises(ValueError, match="at least one margin"):
        preference_accuracy(torch.tensor([]))


@pytest.mark.parametrize("beta", [0, -0.1, float("nan"), float("inf"), True, "0.1"])
def test_a_beta_that_is_not_a_positive_number_is_refused(beta: object) -> None:
    with pytest.raises(ValueError, match="beta must be a positive number"):
        dpo_loss(*FIXED.T, beta=beta)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="beta must be a positive number"):
        DPOLoss(beta)  # type: ignore[arg-type]


def test_log_probabilities_of_different_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="must have the same shape"):
        dpo_loss(FIXED[:, 0], FIXED[:3, 1], FIXED[:, 2], FIXED[:, 3], beta=0.1)
    with pytest.raises(ValueError, match="must have the same shape"):
        implicit_reward(FIXED[:, 0], FIXED[:, :2], beta=0.1)
    with pytest.raises(ValueError, match=r"need log_probs \(pairs, 2, 2\)"):
        DPOLoss(0.1)(FIXED, torch.zeros(4, dtype=torch.long))


def test_the_sequence_log_probability_is_the_sum_over_the_response_tokens(template: ChatTemplate) -> None:
    model = tiny_model(template).double().eval()
    batch = preference_batch(template, PAIRS)
    computed = sequence_log_probs(model, batch.inputs, batch.targets)
    answers = [pair.chosen for pair in PAIRS] + [pair.rejected for pair in PAIRS]
    for row, (pair, answer) in enumerate(zip(PAIRS * 2, answers)):
        ids, is_response = template.encode(pair.prompt, answer)
        by_hand = 0.0
        for position in range(1, len(ids)):  # each response token (and <|end|>) given only the ids before it
            if is_response[position]:
                logits = model(torch.tensor([ids[:position]]))[0, -1]
                by_hand += F.log_softmax(logits, dim=-1)[ids[position]].item()
        assert computed[row].item() == pytest.approx(by_hand, rel=1e-10, abs=1e-10)


def test_the_batch_holds_the_chosen_answers_then_the_rejected(template: ChatTemplate) -> None:
    batch = preference_batch(template, PAIRS)
    assert batch.inputs.shape == batch.targets.shape and batch.inputs.shape[0] == 2 * len(PAIRS)
    assert batch.target_output.tolist() == [0] * len(PAIRS)
    for row, pair in enumerate(PAIRS):
        for offset, answer in ((0, pair.chosen), (len(PAIRS), pair.rejected)):
            ids, is_response = template.encode(pair.prompt, answer)
            targets = batch.targets[row + offset]
            assert targets[targets != IGNORE_INDEX].tolist() == [i for i, kept in zip(ids, is_response) if kept]


def test_at_the_start_the_policy_is_the_reference(template: ChatTemplate) -> None:
    policy = tiny_model(template)
    pair_model = PolicyAndReference(policy, copy.deepcopy(policy))
    batch = preference_batch(template, PAIRS)
    log_probs = pair_model(**batch.model_inputs())
    assert log_probs.shape == (len(PAIRS), 2, 2)
    torch.testing.assert_close(log_probs[..., 0], log_probs[..., 1])
    loss = DPOLoss(0.1)(log_probs, batch.target_output)
    assert loss.item() == pytest.approx(math.log(2), abs=1e-6)
    rewards = implicit_reward(log_probs[..., 0], log_probs[..., 1], beta=0.1)
    assert preference_accuracy(rewards[:, 0] - rewards[:, 1]) == 0.5
    loss.backward()  # the gradient reaches the policy, never the frozen reference
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in policy.parameters())
    assert all(p.grad is None and not p.requires_grad for p in pair_model.reference.parameters())
    assert token_kl(policy, pair_model.reference, batch.inputs, batch.targets) == pytest.approx(0.0, abs=1e-6)


def test_the_reference_stays_frozen_and_in_eval_mode(template: ChatTemplate) -> None:
    policy = tiny_model(template)
    pair_model = PolicyAndReference(policy, copy.deepcopy(policy))
    pair_model.train()
    assert policy.training and not pair_model.reference.training
    with pytest.raises(ValueError, match="frozen copy of the policy, not the policy itself"):
        PolicyAndReference(policy, policy)


def test_token_kl_is_the_mean_kl_over_the_response_positions(template: ChatTemplate) -> None:
    policy, reference = tiny_model(template, 0).double(), tiny_model(template, 1).double()
    batch = preference_batch(template, PAIRS)
    log_p = F.log_softmax(policy(batch.inputs), dim=-1)
    log_q = F.log_softmax(reference(batch.inputs), dim=-1)
    counted = batch.targets != IGNORE_INDEX
    direct = F.kl_div(log_q[counted], log_p[counted], log_target=True, reduction="batchmean").item()
    kl = token_kl(policy, reference, batch.inputs, batch.targets)
    assert kl > 0 and kl == pytest.approx(direct, rel=1e-10)
    with pytest.raises(ValueError, match="at least one target"):
        token_kl(policy, reference, batch.inputs, torch.full_like(batch.targets, IGNORE_INDEX))


def test_bad_pairs_and_batches_are_refused(template: ChatTemplate) -> None:
    with pytest.raises(ValueError, match="at least one pair"):
        preference_batch(template, [])
    with pytest.raises(ValueError, match="chosen and rejected answers must differ"):
        preference_batch(template, [PreferencePair("Which year is 2016-03-18 in?", "2016", "2016")])
    with pytest.raises(ValueError, match="more than the 3 pairs"):
        next(preference_batches(template, PAIRS, batch_size=4, seed=0))
    with pytest.raises(ValueError, match=r"tokens must have shape \(batch, m\)"):
        sequence_log_probs(tiny_model(template), torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long))


def test_dpo_through_train_learns_to_prefer_the_chosen_answers(template: ChatTemplate) -> None:
    policy = tiny_model(template)
    pair_model = PolicyAndReference(policy, copy.deepcopy(policy))
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
    batches = preference_batches(template, PAIRS, batch_size=3, seed=0)
    history = train(pair_model, batches, steps=40, optimizer=optimizer, loss_function=DPOLoss(1.0), desc=None)
    assert history.losses[0] == pytest.approx(math.log(2), abs=1e-5)
    batch = preference_batch(template, PAIRS)
    with torch.no_grad():
        log_probs = pair_model.eval()(**batch.model_inputs())
    ratios = log_probs[..., 0] - log_probs[..., 1]
    assert preference_accuracy(ratios[:, 0] - ratios[:, 1]) == 1.0
    assert DPOLoss(1.0)(log_probs, batch.target_output).item() < 0.1


def test_chosen_and_rejected_split_each_pair_by_its_preferred_answer() -> None:
    # pair i, answer j, column c (0 policy, 1 reference): the value 100 i + 10 j + c
    pairs, answers, columns = torch.meshgrid(torch.arange(3), torch.arange(2), torch.arange(2), indexing="ij")
    log_probs = (100 * pairs + 10 * answers + columns).float()
    chosen, rejected = chosen_and_rejected(log_probs, torch.tensor([0, 1, 1]))
    assert chosen.tolist() == [[0.0, 1.0], [110.0, 111.0], [210.0, 211.0]]
    assert rejected.tolist() == [[10.0, 11.0], [100.0, 101.0], [200.0, 201.0]]
    with pytest.raises(ValueError, match=r"need log_probs \(pairs, 2, 2\)"):
        chosen_and_rejected(log_probs[:, :, :1], torch.tensor([0, 1, 1]))
    with pytest.raises(ValueError, match=r"preferred \(pairs,\)"):
        chosen_and_rejected(log_probs, torch.tensor([0, 1]))
