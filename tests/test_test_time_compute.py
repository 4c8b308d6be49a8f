"""test-time-compute's exported code: pass@k against counting every draw, the vote's tie rule, the
program's verdicts on steps, the verifier's rows, and sampling that repeats with its generator."""

from __future__ import annotations

import itertools
import math
import random
from datetime import date

import pytest
import torch

from transformer_book.data import IGNORE_INDEX
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.test_time_compute import (
    final_answer,
    greedy_match,
    majority_vote,
    pass_at_k,
    sample_answers,
    step_labels,
    steps_right,
    train_until_right,
    verifier_rows,
)
from transformer_book.worked_steps import (
    MOST_MOVES,
    PROMPT_LENGTH,
    TOKEN_ID,
    VOCABULARY,
    Moves,
    is_right,
    prompt_tokens,
    random_moves,
)

MONDAY = date(2026, 12, 7)


def ids(*tokens: str) -> list[int]:
    return [TOKEN_ID[token] for token in tokens]


@pytest.mark.parametrize(("samples", "right", "k"), [(6, 2, 1), (6, 2, 3), (7, 3, 4), (5, 0, 2), (5, 5, 5), (8, 1, 8)])
def test_pass_at_k_is_the_fraction_of_k_subsets_holding_a_right_answer(samples: int, right: int, k: int) -> None:
    answers = [True] * right + [False] * (samples - right)
    subsets = list(itertools.combinations(answers, k))
    counted = sum(any(subset) for subset in subsets) / len(subsets)
    assert pass_at_k(samples, right, k) == pytest.approx(counted, abs=1e-12)


@pytest.mark.parametrize(("samples", "right", "k"), [(4, 5, 1), (4, -1, 1), (4, 2, 0), (4, 2, 5)])
def test_pass_at_k_names_impossible_counts(samples: int, right: int, k: int) -> None:
    with pytest.raises(ValueError, match=f"samples={samples}, right={right}, k={k}"):
        pass_at_k(samples, right, k)


def test_pass_at_k_does_not_overflow_for_many_samples() -> None:
    expected = 1 - math.comb(9000, 500) / math.comb(10_000, 500)
    assert pass_at_k(10_000, 1000, 500) == pytest.approx(expected, rel=1e-9)


def test_the_vote_takes_the_most_frequent_answer_and_breaks_ties_by_the_first_drawn() -> None:
    assert majority_vote(["Tue", "Mon", "Mon"]) == "Mon"
    assert majority_vote(["Sun", "Mon", "Mon", "Sun"]) == "Sun"
    assert majority_vote(["", "Fri"]) == ""


def test_the_final_answer_is_the_last_weekday_written() -> None:
    assert final_answer(ids("Thu", "Tue", "Thu")) == "Thu"
    assert final_answer(ids("Thu", "+3", "_")) == "Thu"
    assert final_answer(ids("+3")) == ""


def test_step_labels_judge_each_step_from_the_step_written_before_it() -> None:
    question = Moves(MONDAY, (3, 5, 2))  # Thu, Tue, Thu
    assert step_labels(question, ids("Thu", "Tue", "Thu")) == [1, 1, 1, 1]
    assert steps_right(question, ids("Thu", "Tue", "Thu"))
    # a wrong first step; the second adds its move to it, so only the first is wrong, and the answer too
    assert step_labels(question, ids("Fri", "Wed", "Fri")) == [0, 1, 1, 1]
    assert not steps_right(question, ids("Fri", "Wed", "Fri"))
    # one step too many, or too few: the last verdict is on the length
    assert step_labels(question, ids("Thu", "Tue", "Thu", "Fri")) == [1, 1, 1, 0, 0]
    assert step_labels(question, ids("Thu", "Tue")) == [1, 1, 0]
    # a token that is no weekday is wrong, and the next step is judged from the last weekday before it
    assert step_labels(question, ids("+3", "Tue", "Thu")) == [0, 0, 1, 1]
    assert step_labels(question, ids("Thu", "+5", "Sat")) == [1, 0, 1, 1]


def test_verifier_rows_hold_each_answer_and_put_the_verdicts_at_its_steps_and_end() -> None:
    question = Moves(MONDAY, (3, 5, 2))
    answers = [ids("Thu", "Tue", "Thu"), ids("Fri")]
    rows, labels = verifier_rows([question], [answers])
    assert rows.shape == labels.shape == (2, PROMPT_LENGTH + MOST_MOVES + 1)
    assert rows[0, PROMPT_LENGTH : PROMPT_LENGTH + 4].tolist() == ids("Thu", "Tue", "Thu", ".")
    assert labels[0, PROMPT_LENGTH : PROMPT_LENGTH + 4].tolist() == [1, 1, 1, 1]
    assert labels[1, PROMPT_LENGTH : PROMPT_LENGTH + 2].tolist() == [0, 0]
    assert (labels[:, :PROMPT_LENGTH] == IGNORE_INDEX).all() and (labels[1, PROMPT_LENGTH + 2 :] == IGNORE_INDEX).all()


def test_sampling_repeats_with_its_generator_and_greedy_needs_none() -> None:
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(
        len(VOCABULARY), d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=PROMPT_LENGTH + MOST_MOVES + 1
    ).eval()
    questions = [random_moves(3, random.Random(seed), test=True) for seed in range(3)]
    first = sample_answers(model, questions, samples=4, temperature=1.0, rng=torch.Generator().manual_seed(1))
    again = sample_answers(model, questions, samples=4, temperature=1.0, rng=torch.Generator().manual_seed(1))
    assert first == again and len(first) == 3 and all(len(group) == 4 for group in first)
    assert all(len(answer) <= MOST_MOVES + 1 for group in first for answer in group)
    greedy = sample_answers(model, questions)
    assert [len(group) for group in greedy] == [1, 1, 1]
    prompt = torch.tensor([[TOKEN_ID[t] for t in prompt_tokens(questions[0])]])
    with torch.no_grad():
        first_choice = int(model(prompt)[0, -1].argmax())
    assert (greedy[0][0] or [TOKEN_ID["."]])[0] == first_choice


def test_train_until_right_stops_at_the_target_or_the_budget_and_is_the_same_for_the_same_seeds() -> None:
    rng = random.Random(0)
    validation = [random_moves(moves, rng, test=False) for moves in (1, 2, 3) for _ in range(4)]

    def trained(target: float) -> tuple[DecoderOnlyTransformer, int, float]:
        # the warm-up takes 50 steps, so the budget is above it
        return train_until_right(
            validation,
            target=target,
            seed=1,
            batches_seed=2,
            device=torch.device("cpu"),
            most_steps=60,
            round_steps=30,
            batch_size=8,
        )

    model, steps, match = trained(1.01)  # never reached: the budget stops it
    assert steps == 60 and not model.training
    assert match == greedy_match(model, validation) and 0.0 <= match <= 1.0
    again, _, _ = trained(1.01)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))
    _, first_round, _ = trained(0.0)  # any match reaches 0
    assert first_round == 30, "the target is checked after every round, the first included"


def test_greedy_match_is_the_share_of_questions_whose_greedy_final_answer_is_right() -> None:
    rng = random.Random(3)
    questions = [random_moves(2, rng, test=False) for _ in range(6)]
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(
        len(VOCABULARY), d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=PROMPT_LENGTH + MOST_MOVES + 1
    ).eval()
    written = sample_answers(model, questions)
    expected = sum(is_right(q, final_answer(w[0])) for q, w in zip(questions, written)) / len(questions)
    assert greedy_match(model, questions) == pytest.approx(expected)
