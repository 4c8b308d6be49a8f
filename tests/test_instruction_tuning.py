"""Unit tests for transformer_book.instruction_tuning (exported from book/instruction-tuning.md)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from transformer_book.data import IGNORE_INDEX
from transformer_book.decoding import generate
from transformer_book.instruction_tuning import (
    ASSISTANT,
    END,
    USER,
    ChatTemplate,
    Instruction,
    greedy_matches,
    instruction_batch,
    instruction_batches,
    respond,
)
from transformer_book.model import DecoderOnlyTransformer
from transformer_book.tokenization import BytePairTokenizer
from transformer_book.training import LabelSmoothingLoss, train

TEXTS = ["Which year is 2016-03-18 in? The year 2016. Which month is 1999-12-31 in? December."]
EXAMPLES = [
    Instruction("Which year is 2016-03-18 in?", "2016", "year"),
    Instruction("Which month is 1999-12-31 in?", "December", "month"),
    Instruction("Say hello, then stop.", "hello there", "other"),
]


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate(BytePairTokenizer.learn(TEXTS, num_merges=20))


def test_the_special_tokens_are_three_new_ids_after_the_tokenizer(template: ChatTemplate) -> None:
    size = template.tokenizer.vocab_size
    assert (template.user_id, template.assistant_id, template.end_id) == (size, size + 1, size + 2)
    assert template.vocab_size == size + 3
    for example in EXAMPLES:  # no text encodes to a special id
        assert max(template.tokenizer.encode(example.prompt + example.response)) < size


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_template_round_trips(template: ChatTemplate, example: Instruction) -> None:
    ids, _ = template.encode(example.prompt, example.response)
    assert template.decode(ids) == f"{USER}{example.prompt}{ASSISTANT}{example.response}{END}"
    assert ids[0] == template.user_id and ids[-1] == template.end_id
    assert template.encode_prompt(example.prompt) == ids[: ids.index(template.assistant_id) + 1]


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_mask_covers_exactly_the_response_and_the_end_token(template: ChatTemplate, example: Instruction) -> None:
    ids, is_response = template.encode(example.prompt, example.response)
    response = [index for index, kept in zip(ids, is_response) if kept]
    assert response == [*template.tokenizer.encode(example.response), template.end_id]
    assert is_response == sorted(is_response), "the response is one run at the end"


def test_the_batch_targets_only_the_response_tokens(template: ChatTemplate) -> None:
    batch = instruction_batch(template, EXAMPLES)
    assert batch.ignore_index == IGNORE_INDEX
    for row, example in enumerate(EXAMPLES):
        ids, is_response = template.encode(example.prompt, example.response)
        n = len(ids) - 1
        assert batch.inputs[row, :n].tolist() == ids[:-1]
        expected = [ids[i + 1] if is_response[i + 1] else IGNORE_INDEX for i in range(n)]
        assert batch.target_output[row, :n].tolist() == expected
        assert (batch.target_output[row, n:] == IGNORE_INDEX).all(), "padding is never a target"
    assert batch.num_target_tokens == sum(len(template.tokenizer.encode(e.response)) + 1 for e in EXAMPLES)


def test_without_the_mask_every_token_after_the_first_is_a_target(template: ChatTemplate) -> None:
    batch = instruction_batch(template, EXAMPLES, mask_prompt=False)
    for row, example in enumerate(EXAMPLES):
        ids, _ = template.encode(example.prompt, example.response)
        assert batch.target_output[row, : len(ids) - 1].tolist() == ids[1:]
    assert batch.num_target_tokens == sum(len(template.encode(e.prompt, e.response).ids) - 1 for e in EXAMPLES)


def test_the_masked_loss_is_the_cross_entropy_of_the_response_tokens_alone(template: ChatTemplate) -> None:
    torch.manual_seed(0)
    batch = instruction_batch(template, EXAMPLES)
    logits = torch.randn(*batch.inputs.shape, template.vocab_size, dtype=torch.float64)
    terms = []
    for row, example in enumerate(EXAMPLES):
        ids, is_response = template.encode(example.prompt, example.response)
        for position in range(len(ids) - 1):
            if is_response[position + 1]:
                terms.append(-F.log_softmax(logits[row, position], dim=-1)[ids[position + 1]])
    loss = LabelSmoothingLoss(smoothing=0.0, ignore_index=IGNORE_INDEX)(logits, batch.target_output)
    torch.testing.assert_close(loss, torch.stack(terms).mean(), rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("prompt", "response", "message"),
    [
        ("Which year is <|end|> in?", "2016", "prompt must not contain the special token '<|end|>'"),
        ("<|assistant|>2016", "2016", "prompt must not contain the special token '<|assistant|>'"),
        ("Which year is 2016-03-18 in?", "2016<|user|>Hi", "response must not contain the special token '<|user|>'"),
        ("Which year is 2016-03-18 in?", "", "response must be a non-empty string"),
        ("  \n", "2016", "prompt must be a non-empty string"),
    ],
)
def test_bad_text_is_refused(template: ChatTemplate, prompt: str, response: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("|", r"\|")):
        template.encode(prompt, response)
    with pytest.raises(ValueError, match="must"):
        instruction_batch(template, [Instruction(prompt, response)])


def test_bad_batches_are_refused(template: ChatTemplate) -> None:
    with pytest.raises(ValueError, match="at least one example"):
        instruction_batch(template, [])
    with pytest.raises(ValueError, match="more than the 3 examples"):
        next(instruction_batches(template, EXAMPLES, batch_size=4, seed=0))
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        next(instruction_batches(template, EXAMPLES, batch_size=0, seed=0))


def test_the_batches_go_through_every_example_each_pass(template: ChatTemplate) -> None:
    batches = instruction_batches(template, EXAMPLES, batch_size=1, seed=3)
    seen = [template.decode(next(batches).inputs[0].tolist()) for _ in range(3)]
    assert sorted(text.split(ASSISTANT)[0] for text in seen) == sorted(f"{USER}{e.prompt}" for e in EXAMPLES)


@pytest.fixture(scope="module")
def memorised(template: ChatTemplate) -> DecoderOnlyTransformer:
    """A tiny model trained, through train, until it answers the three examples."""
    torch.manual_seed(0)
    model = DecoderOnlyTransformer(template.vocab_size, d_model=32, num_heads=2, num_layers=1, d_ff=64, max_len=64)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    train(
        model,
        instruction_batches(template, EXAMPLES, batch_size=3, seed=0),
        steps=150,
        optimizer=optimizer,
        loss_function=LabelSmoothingLoss(smoothing=0.0, ignore_index=IGNORE_INDEX),
        desc=None,
    )
    return model


def test_generation_stops_at_the_end_token(template: ChatTemplate, memorised: DecoderOnlyTransformer) -> None:
    prompts = [example.prompt for example in EXAMPLES]
    assert respond(memorised, template, prompts, max_new_tokens=12) == [e.response for e in EXAMPLES]
    for example in EXAMPLES:  # left to go on, the model writes <|end|> right after the response
        prompt = torch.tensor([template.encode_prompt(example.prompt)])
        ids = generate(
            memorised, None, prompt=prompt, max_new_tokens=12, choose=lambda logits: logits.argmax(dim=-1), end_id=None
        )[0]
        answer = template.tokenizer.encode(example.response)
        assert ids[: len(answer) + 1] == [*answer, template.end_id] and len(ids) == 12


def test_greedy_matches_agrees_with_generate(template: ChatTemplate, memorised: DecoderOnlyTransformer) -> None:
    prompts = [template.encode_prompt(example.prompt) for example in EXAMPLES]
    right = [[*template.tokenizer.encode(example.response), template.end_id] for example in EXAMPLES]
    assert greedy_matches(memorised, prompts, right) == [True, True, True]
    unfinished = [answer[:-1] + [answer[0]] for answer in right]  # the same tokens, no end token
    assert greedy_matches(memorised, prompts, unfinished) == [False, False, False]
    swapped = right[1:] + right[:1]
    assert greedy_matches(memorised, prompts, swapped, batch_size=1) == [False, False, False]
    with pytest.raises(ValueError, match="one non-empty answer for each"):
        greedy_matches(memorised, prompts, right[:2])
