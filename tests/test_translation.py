"""Unit tests for transformer_book.translation (exported from book/translation.md)."""

from __future__ import annotations

import datetime

import pytest
import torch

from transformer_book.data import END_ID, PAD_ID, START_ID, Batch
from transformer_book.model import TransformerConfig
from transformer_book.translation import (
    DATE_MODEL_CONFIG,
    DATE_STYLES,
    MONTHS,
    WEEKDAYS,
    DatePair,
    Vocabulary,
    date_batches,
    make_date_pairs,
    ordinal_suffix,
    ordinal_word,
    tokenize,
)

MOON_LANDING = datetime.date(1969, 7, 20)  # a Sunday

# --- ordinals --------------------------------------------------------------------------------

EXPECTED_SUFFIXES = {
    1: "1st",
    2: "2nd",
    3: "3rd",
    4: "4th",
    10: "10th",
    11: "11th",
    12: "12th",
    13: "13th",
    14: "14th",
    20: "20th",
    21: "21st",
    22: "22nd",
    23: "23rd",
    24: "24th",
    30: "30th",
    31: "31st",
}


def test_ordinal_suffix_of_the_tricky_days() -> None:
    assert {day: ordinal_suffix(day) for day in EXPECTED_SUFFIXES} == EXPECTED_SUFFIXES
    assert ordinal_suffix(111) == "111th" and ordinal_suffix(101) == "101st"


def test_ordinal_word_of_every_day() -> None:
    units = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth"]
    expected = [
        *units,
        "tenth",
        "eleventh",
        "twelfth",
        "thirteenth",
        "fourteenth",
        "fifteenth",
        "sixteenth",
        "seventeenth",
        "eighteenth",
        "nineteenth",
        "twentieth",
        *[f"twenty-{unit}" for unit in units],
        "thirtieth",
        "thirty-first",
    ]
    assert [ordinal_word(day) for day in range(1, 32)] == expected


@pytest.mark.parametrize("day", [0, 32, -1])
def test_ordinal_word_rejects_days_outside_a_month(day: int) -> None:
    with pytest.raises(ValueError, match=f"day must be between 1 and 31, got day={day}"):
        ordinal_word(day)


def test_ordinal_suffix_rejects_non_positive_numbers() -> None:
    with pytest.raises(ValueError, match="day must be a positive number, got day=0"):
        ordinal_suffix(0)


# --- styles ----------------------------------------------------------------------------------


def test_the_styles_of_one_date() -> None:
    assert {name: render(MOON_LANDING) for name, render in DATE_STYLES.items()} == {
        "long": "Sunday, the 20th of July 1969",
        "british": "20 July 1969",
        "american": "July 20, 1969",
        "abbreviated": "Sun 20 Jul 1969",
        "spelled": "the twentieth of july, 1969",
        "ordinal": "July 20th 1969",
        "dotted": "20.07.1969",
        "slashed": "Sunday 20/7/1969",
    }


@pytest.mark.parametrize("style", list(DATE_STYLES))
def test_every_style_names_the_right_weekday_month_and_year(style: str) -> None:
    for date in [
        datetime.date(2021, 3, 3),
        datetime.date(1900, 1, 1),
        datetime.date(2000, 2, 29),
        datetime.date(2099, 12, 31),
        datetime.date(1987, 11, 12),
    ]:
        text = DATE_STYLES[style](date)
        assert text.endswith(str(date.year))
        weekday_tokens = [token for token in tokenize(text) if token[:3] in {day[:3] for day in WEEKDAYS}]
        if weekday_tokens:  # the weekday, where a style writes one, must be the date's own
            assert weekday_tokens == [date.strftime("%A").lower()[: len(weekday_tokens[0])]], text
            assert weekday_tokens[0] in (WEEKDAYS[date.weekday()], WEEKDAYS[date.weekday()][:3])
        month = MONTHS[date.month - 1]
        assert (
            month in text.lower()
            or month[:3] in text.lower()
            or f"{date.month}/" in text
            or f".{date.month:02d}." in text
        ), text


def test_styles_with_a_weekday_are_right_on_a_known_day() -> None:
    wednesday = datetime.date(2021, 3, 3)
    assert DATE_STYLES["long"](wednesday) == "Wednesday, the 3rd of March 2021"
    assert DATE_STYLES["abbreviated"](wednesday) == "Wed 3 Mar 2021"
    assert DATE_STYLES["slashed"](wednesday) == "Wednesday 3/3/2021"


# --- make_date_pairs -------------------------------------------------------------------------


def test_make_date_pairs_is_deterministic_by_seed() -> None:
    assert make_date_pairs(50, seed=7) == make_date_pairs(50, seed=7)
    assert make_date_pairs(50, seed=7) != make_date_pairs(50, seed=8)


def test_make_date_pairs_makes_consistent_pairs_in_range() -> None:
    pairs = make_date_pairs(300, seed=0, first_year=1990, last_year=1999)
    assert len(pairs) == 300 and all(isinstance(pair, DatePair) for pair in pairs)
    for pair in pairs:
        assert 1990 <= pair.date.year <= 1999
        assert pair.iso == pair.date.isoformat()
        assert pair.text in {render(pair.date) for render in DATE_STYLES.values()}
    assert len({pair.text for pair in pairs}) > 250  # varied: dates and styles


def test_make_date_pairs_uses_every_style() -> None:
    pairs = make_date_pairs(400, seed=0)
    used = {name for pair in pairs for name, render in DATE_STYLES.items() if render(pair.date) == pair.text}
    assert used == set(DATE_STYLES)


def test_make_date_pairs_never_draws_an_excluded_date() -> None:
    test = make_date_pairs(200, seed=1, first_year=2000, last_year=2000)
    excluded = {pair.date for pair in test}
    train = make_date_pairs(2000, seed=2, exclude=excluded, first_year=2000, last_year=2000)
    assert not {pair.date for pair in train} & excluded
    assert len({pair.date for pair in train}) > 100


def test_make_date_pairs_with_all_but_one_date_excluded_draws_that_date() -> None:
    days = [datetime.date(2000, 1, 1) + datetime.timedelta(days=k) for k in range(366)]
    pairs = make_date_pairs(5, seed=0, exclude=days[1:], first_year=2000, last_year=2000)
    assert {pair.date for pair in pairs} == {days[0]}


def test_excluded_dates_outside_the_range_do_not_count() -> None:
    far_away = [datetime.date(1950, 1, 1) + datetime.timedelta(days=k) for k in range(1000)]
    assert len(make_date_pairs(3, seed=0, exclude=far_away, first_year=2000, last_year=2000)) == 3


def test_make_date_pairs_of_zero_is_empty() -> None:
    assert make_date_pairs(0, seed=0) == []


def test_make_date_pairs_errors() -> None:
    with pytest.raises(ValueError, match="count must be non-negative, got count=-1"):
        make_date_pairs(-1, seed=0)
    with pytest.raises(ValueError, match="need 1 <= first_year <= last_year <= 9999, got 2000 and 1999"):
        make_date_pairs(3, seed=0, first_year=2000, last_year=1999)
    every_day = [datetime.date(2000, 1, 1) + datetime.timedelta(days=k) for k in range(366)]
    with pytest.raises(ValueError, match="every date in the range is excluded"):
        make_date_pairs(3, seed=0, exclude=every_day, first_year=2000, last_year=2000)


# --- tokenize and Vocabulary -----------------------------------------------------------------


def test_tokenize_splits_digits_words_and_punctuation() -> None:
    assert tokenize("March 3rd, 2021") == ["march", "3", "rd", ",", "2", "0", "2", "1"]
    assert tokenize("the twenty-second of may, 1999") == [
        "the",
        "twenty",
        "-",
        "second",
        "of",
        "may",
        ",",
        "1",
        "9",
        "9",
        "9",
    ]
    assert tokenize("20.07.1969") == ["2", "0", ".", "0", "7", ".", "1", "9", "6", "9"]
    assert tokenize("Sun 20/7/1969") == ["sun", "2", "0", "/", "7", "/", "1", "9", "6", "9"]
    assert tokenize("  ") == []


def test_vocabulary_puts_the_specials_at_the_training_ids() -> None:
    vocab = Vocabulary(["b", "a", "a", "<pad>"])
    assert vocab.tokens == ["<pad>", "<s>", "</s>", "<unk>", "a", "b"] and len(vocab) == 6
    assert (vocab.ids["<pad>"], vocab.ids["<s>"], vocab.ids["</s>"]) == (PAD_ID, START_ID, END_ID) == (0, 1, 2)
    assert vocab.ids["<unk>"] == Vocabulary.UNKNOWN_ID == 3


def test_vocabulary_from_texts_encodes_and_decodes_round_trip() -> None:
    texts = [render(MOON_LANDING) for render in DATE_STYLES.values()] + [MOON_LANDING.isoformat()]
    vocab = Vocabulary.from_texts(texts)
    assert vocab.tokens[4:] == sorted(vocab.tokens[4:])
    for text in texts:
        ids = vocab.encode(text)
        assert all(4 <= index < len(vocab) for index in ids)
        assert vocab.decode(ids) == tokenize(text)
    assert Vocabulary.from_texts(reversed(texts)).tokens == vocab.tokens  # order of texts does not matter


def test_vocabulary_maps_unknown_tokens_to_unknown_id() -> None:
    vocab = Vocabulary.from_texts(["20 July 1969"])
    assert vocab.encode("20 August 1969") == [vocab.ids["2"], vocab.ids["0"], 3, *vocab.encode("1969")]
    assert vocab.decode([3]) == ["<unk>"]


def test_vocabulary_decode_rejects_ids_outside_it() -> None:
    vocab = Vocabulary(["a"])
    with pytest.raises(ValueError, match=r"ids \[5, -1\] are outside the vocabulary of 5 tokens"):
        vocab.decode([4, 5, -1])


def test_the_chapter_vocabulary_has_84_tokens() -> None:
    pairs = make_date_pairs(5000, seed=2)
    vocab = Vocabulary.from_texts([pair.text for pair in pairs] + [pair.iso for pair in pairs])
    assert len(vocab) == 84


# --- date_batches ----------------------------------------------------------------------------


def test_date_batches_shapes_and_contents() -> None:
    pairs = make_date_pairs(10, seed=0)
    vocab = Vocabulary.from_texts([pair.text for pair in pairs] + [pair.iso for pair in pairs])
    batches = date_batches(pairs, vocab, 4, seed=0)
    batch = next(batches)
    assert isinstance(batch, Batch)
    assert batch.target_input.shape == batch.target_output.shape == (4, 11)  # 10 ISO tokens + START or END
    assert (batch.target_input[:, 0] == START_ID).all() and (batch.target_output[:, -1] == END_ID).all()
    assert batch.source.shape[0] == 4 and batch.source_mask.shape == (4, 1, batch.source.shape[1])
    assert batch.target_mask.shape == (4, 11, 11) and batch.num_target_tokens == 44
    sources = {tuple(vocab.encode(pair.text)) for pair in pairs}
    for row, length in zip(batch.source, batch.source_mask[:, 0].sum(-1)):
        assert tuple(row[:length].tolist()) in sources and (row[length:] == PAD_ID).all()


def test_date_batches_cover_every_pair_once_per_pass_and_are_endless() -> None:
    pairs = make_date_pairs(12, seed=3)
    vocab = Vocabulary.from_texts([pair.text for pair in pairs] + [pair.iso for pair in pairs])
    batches = date_batches(pairs, vocab, 4, seed=1)
    first_pass = [tuple(target[:-1].tolist()) for _ in range(3) for target in next(batches).target_output]
    assert sorted(first_pass) == sorted(tuple(vocab.encode(pair.iso)) for pair in pairs)
    second_pass = [tuple(target[:-1].tolist()) for _ in range(3) for target in next(batches).target_output]
    assert sorted(second_pass) == sorted(first_pass) and second_pass != first_pass  # reshuffled


def test_date_batches_are_deterministic_by_seed() -> None:
    pairs = make_date_pairs(20, seed=0)
    vocab = Vocabulary.from_texts([pair.text for pair in pairs] + [pair.iso for pair in pairs])
    one, two = date_batches(pairs, vocab, 5, seed=4), date_batches(pairs, vocab, 5, seed=4)
    for _ in range(6):
        assert torch.equal(next(one).source, next(two).source)


@pytest.mark.parametrize(
    ("batch_size", "message"),
    [(0, "batch_size must be a positive integer"), (11, "batch_size=11 is more than the 10 pairs")],
)
def test_date_batches_reject_a_batch_size_that_does_not_fit(batch_size: int, message: str) -> None:
    pairs = make_date_pairs(10, seed=0)
    vocab = Vocabulary.from_texts([pair.text for pair in pairs])
    with pytest.raises(ValueError, match=message):
        next(date_batches(pairs, vocab, batch_size, seed=0))


def test_date_model_config_builds_the_chapter_model() -> None:
    from transformer_book.model import make_transformer

    model = make_transformer(84, 84, DATE_MODEL_CONFIG, pad_id=PAD_ID)
    assert model(torch.tensor([[5, 6, 7]]), torch.tensor([[1, 8]])).shape == (1, 2, 84)


def test_output_log_probabilities_sum_each_outputs_token_log_probabilities() -> None:
    from transformer_book.model import make_transformer
    from transformer_book.translation import output_log_probabilities

    torch.manual_seed(0)
    model = make_transformer(
        9, 9, TransformerConfig(d_model=16, num_heads=2, num_layers=1, d_ff=32, dropout=0.0), pad_id=PAD_ID
    ).eval()
    sources, outputs = [[4, 5, 6], [7, 8]], [[5, 4], [6, 6, 7]]
    scores = output_log_probabilities(model, sources, outputs)
    assert scores.shape == (2,)
    for row, (source, output) in enumerate(zip(sources, outputs)):
        # One pair on its own, no padding: log P(output, then END) token by token.
        with torch.no_grad():
            logits = model(torch.tensor([source]), torch.tensor([[START_ID, *output]]))[0]
        expected = logits.log_softmax(-1)[torch.arange(len(output) + 1), torch.tensor([*output, END_ID])].sum()
        assert torch.allclose(scores[row], expected, atol=1e-5)
