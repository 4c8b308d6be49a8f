"""Unit tests for transformer_book.tokenization (exported from book/tokenization.md)."""

from __future__ import annotations

from collections import Counter

import pytest

from transformer_book.tokenization import BytePairTokenizer, learn_merges, merge_pair, split_words

CORPUS = [
    "the cat sat on the mat. the cat ate the rat.",
    "a theory of the thing: then there were three themes.",
    "def area(radius):\n    return 3.14159 * radius ** 2\n",
]


@pytest.fixture(scope="module")
def tokenizer() -> BytePairTokenizer:
    return BytePairTokenizer.learn(CORPUS, num_merges=40)


def naive_merges(texts: list[str], num_merges: int) -> list[tuple[int, int]]:
    """The definition, slowly: recount every pair of every word after every merge."""
    words = [list(word.encode()) for text in texts for word in split_words(text)]
    merges: list[tuple[int, int]] = []
    while len(merges) < num_merges:
        counts = Counter(pair for word in words for pair in zip(word, word[1:]))
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))  # most frequent, then smallest
        merges.append(best)
        words = [merge_pair(word, best, 255 + len(merges)) for word in words]
    return merges


@pytest.mark.parametrize("text", ["", " ", "a   b\t\tc\n\n", "x_y__z 3.14 (a, b)", "naïve café 🙂 日本語"])
def test_split_words_covers_every_character(text: str) -> None:
    assert "".join(split_words(text)) == text


def test_a_whitespace_run_leaves_its_last_space_to_the_word_after_it() -> None:
    assert split_words("x:\n    return y") == ["x", ":", "\n   ", " return", " y"]
    assert split_words("a  \n") == ["a", "  \n"]  # nothing follows: the run stays whole


def test_letters_digits_and_punctuation_are_never_one_word() -> None:
    assert split_words("dog. dog! dog?") == ["dog", ".", " dog", "!", " dog", "?"]
    assert split_words("abc123_x") == ["abc", "123", "_", "x"]


def test_merge_pair_replaces_left_to_right() -> None:
    assert merge_pair([1, 2, 1, 2, 3], (1, 2), 9) == [9, 9, 3]
    assert merge_pair([5, 5, 5], (5, 5), 9) == [9, 5]
    assert merge_pair([], (1, 2), 9) == []


def test_incremental_learning_agrees_with_recounting() -> None:
    assert learn_merges(CORPUS, 60) == naive_merges(CORPUS, 60)


@pytest.mark.parametrize("text", ["the cat sat on the mat.", "def area(radius):\n    return radius\n"])
def test_round_trip_of_ascii(tokenizer: BytePairTokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.mark.parametrize("text", ["Größe 3×4 → 12 ✓", "🙂🚀 emoji", "日本語のテキスト", "\x00\x7f\n\t "])
def test_round_trip_of_characters_never_seen(tokenizer: BytePairTokenizer, text: str) -> None:
    assert not set(text) - {" ", "\n", "\t"} <= set("".join(CORPUS))
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_merges_shorten_the_encoding(tokenizer: BytePairTokenizer) -> None:
    text = "the theory of the cat"
    lengths = [len(BytePairTokenizer(tokenizer.merges[:count]).encode(text)) for count in (0, 5, 20, 40)]
    assert lengths[0] == len(text.encode())
    assert all(later <= earlier for earlier, later in zip(lengths, lengths[1:])) and lengths[-1] < lengths[0]


def test_learning_is_deterministic_and_greedy() -> None:
    merges = learn_merges(CORPUS, 30)
    assert learn_merges(list(CORPUS), 30) == merges
    assert learn_merges(CORPUS, 10) == merges[:10]


def test_vocab_size_is_256_plus_the_merges(tokenizer: BytePairTokenizer) -> None:
    assert len(tokenizer.merges) == 40 and tokenizer.vocab_size == 256 + 40
    assert BytePairTokenizer([]).vocab_size == 256
    assert all(0 <= index < tokenizer.vocab_size for index in tokenizer.encode("the cat 🙂"))


def test_learning_stops_when_every_word_is_one_token() -> None:
    merges = learn_merges(["ab ab ab"], 100)
    assert len(merges) == 2  # 'a'+'b', then ' '+'ab'
    assert BytePairTokenizer(merges).encode("ab ab") == [256, 257]


def test_decode_of_a_cut_character_gives_the_replacement_character(tokenizer: BytePairTokenizer) -> None:
    assert tokenizer.decode(tokenizer.encode("🙂")[:1]) == "\ufffd"


@pytest.mark.parametrize("num_merges", [0, -1, 2.0, True, "10"])
def test_learning_refuses_a_bad_number_of_merges(num_merges: object) -> None:
    with pytest.raises(ValueError, match="num_merges"):
        learn_merges(CORPUS, num_merges)  # type: ignore[arg-type]


@pytest.mark.parametrize("texts", [[], [""], ["", ""]])
def test_learning_refuses_no_text(texts: list[str]) -> None:
    with pytest.raises(ValueError, match="no text"):
        BytePairTokenizer.learn(texts, 10)


@pytest.mark.parametrize("ids", [[256 + 40], [-1], [0, 10_000]])
def test_decode_refuses_ids_outside_the_vocabulary(tokenizer: BytePairTokenizer, ids: list[int]) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tokenizer.decode(ids)


def test_a_merge_of_ids_that_do_not_exist_yet_is_refused() -> None:
    with pytest.raises(ValueError, match="merge 1"):
        BytePairTokenizer([(97, 98), (256, 258)])
