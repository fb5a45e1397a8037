"""WordPieceTokenizer: merges by likelihood score (not count), greedy longest-match encoding, round trips, errors."""

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minitransformer
from minitransformer.tokenizers import wordpiece
from minitransformer.tokenizers.bpe import learn_bpe, word_counts_from_text
from minitransformer.tokenizers.wordpiece import UNKNOWN, WordPieceTokenizer, best_pair, learn_wordpiece

# Worked by hand. Pieces: a 8 times, ##b 6, ##c 3, d 1. Pairs: (a, ##b) 6, (a, ##c) 2, (d, ##c) 1.
#   scores: (a, ##b) 6 / (8 * 6) = 1/8;  (a, ##c) 2 / (8 * 3) = 1/12;  (d, ##c) 1 / (1 * 3) = 1/3
# By count (BPE) the first merge is a + b; by score (WordPiece) it is d + c.
# Second merge, after `dc`: a 8, ##b 6, ##c 2; (a, ##b) 6 / 48 = 1/8 and (a, ##c) 2 / 16 = 1/8 tie in
# score; the tie goes to the more frequent pair, (a, ##b).
WORKED_TEXT = "ab ab ab ab ab ab ac ac dc"


def test_the_first_merge_is_the_best_score_not_the_most_frequent_pair():
    vocab, merges = learn_wordpiece(word_counts_from_text(WORKED_TEXT), vocab_size=6)
    assert merges == [("d", "##c")]
    assert vocab == [UNKNOWN, "##b", "##c", "a", "d", "dc"]
    assert learn_bpe(word_counts_from_text(WORKED_TEXT), num_merges=1, min_count=1)[0] == ("a", "b")


def test_the_score_divides_by_both_parts_counts():
    assert wordpiece.pair_score(6, 8, 6) == 1 / 8 and wordpiece.pair_score(1, 1, 3) == 1 / 3     # the worked example
    pieces = {"a": 4, "z": 4, "##w": 8, "##y": 2}                   # same pair counts, same left counts
    assert best_pair({("a", "##w"): 2, ("z", "##y"): 2}, pieces) == ("z", "##y")   # 2 / (4 * 2) beats 2 / (4 * 8)


def test_a_tie_in_score_goes_to_the_more_frequent_pair_then_to_string_order():
    _, merges = learn_wordpiece(word_counts_from_text(WORKED_TEXT), vocab_size=7)
    assert merges == [("d", "##c"), ("a", "##b")]
    pieces = {"x": 2, "##y": 2, "##z": 2}
    assert best_pair({("x", "##z"): 2, ("x", "##y"): 2}, pieces) == ("x", "##y")     # same score, same count
    assert best_pair({}, pieces) is None


def test_training_stops_when_every_word_is_one_token():
    tokenizer = WordPieceTokenizer.train(WORKED_TEXT, vocab_size=100)
    assert tokenizer.vocab_size == 8 and tokenizer.vocab[-1] == "ac"
    assert tokenizer.tokenize(WORKED_TEXT) == WORKED_TEXT.split()


def test_encoding_is_greedy_longest_match_first():
    tokenizer = WordPieceTokenizer([UNKNOWN, "a", "ab", "abc", "##c", "##d", "##cd", "b"])
    assert tokenizer.tokenize("abcd") == ["abc", "##d"]            # longest first: abc, not ab + ##cd
    assert tokenizer.tokenize("acd") == ["a", "##cd"]
    assert tokenizer.tokenize("ab  b\n") == ["ab", "b"]
    assert tokenizer.tokenize("abe") == [UNKNOWN]                  # one unspellable position: the word is [UNK]
    assert tokenizer.tokenize("ca") == [UNKNOWN]                   # "c" exists only as a continuation


def test_decode_joins_continuations_and_id_to_token_names_each_id():
    tokenizer = WordPieceTokenizer.train(WORKED_TEXT, vocab_size=7)
    ids = tokenizer.encode("dc abc")
    assert [tokenizer.id_to_token(token_id) for token_id in ids] == ["dc", "ab", "##c"]
    assert tokenizer.decode(ids) == "dc abc"
    assert tokenizer.decode([]) == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="abcd", min_size=1, max_size=6), min_size=1, max_size=8),
       st.text(alphabet=" \n\t", min_size=1, max_size=3))
def test_words_made_of_seen_characters_round_trip(words, separator):
    tokenizer = WordPieceTokenizer.train("abcd " + "ba ca da cab dab", vocab_size=14)
    text = separator.join(words)
    ids = tokenizer.encode(text)
    assert all(0 <= token_id < tokenizer.vocab_size for token_id in ids)
    assert tokenizer.decode(ids) == " ".join(words)


def test_on_a_real_text_it_compresses_and_round_trips():
    text = minitransformer.default_corpus()[:20000]
    tokenizer = WordPieceTokenizer.train(text, vocab_size=400)
    assert tokenizer.vocab_size == 400 and len(set(tokenizer.vocab)) == 400
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == " ".join(text.split())
    assert len(ids) < 0.97 * len("".join(text.split()))       # merges of rare pairs first: shortens little
    assert WordPieceTokenizer.train(text, vocab_size=400).vocab == tokenizer.vocab          # deterministic


def test_importable_from_the_package_and_its_docstring_examples_hold():
    assert minitransformer.WordPieceTokenizer is WordPieceTokenizer
    result = doctest.testmod(wordpiece)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("text, vocab_size, error, words", [
    (b"abc", 10, TypeError, "expected text as a str, got bytes"),
    ("  \n ", 10, ValueError, "no words"),
    ("abc", 3, ValueError, "vocab_size must be at least 4 (the 1 special tokens and the 3 initial pieces"),
    ("abc", 2.5, ValueError, "vocab_size as a positive int, got 2.5"),
    ("abc", 0, ValueError, "vocab_size as a positive int, got 0"),
    ("abc", True, ValueError, "vocab_size as a positive int, got True"),
])
def test_bad_training_input_is_a_clear_error(text, vocab_size, error, words):
    with pytest.raises(error, match="WordPieceTokenizer.train") as raised:
        WordPieceTokenizer.train(text, vocab_size)
    assert words in str(raised.value)


def test_bad_ids_and_vocabularies_are_clear_errors():
    tokenizer = WordPieceTokenizer.train(WORKED_TEXT, vocab_size=7)
    with pytest.raises(ValueError, match=r"WordPieceTokenizer.decode expected ids in 0..6, got -1 at position 1"):
        tokenizer.decode([0, -1])
    with pytest.raises(ValueError, match=r"id_to_token expected ids in 0..6, got 7"):
        tokenizer.id_to_token(7)
    with pytest.raises(TypeError, match=r"id_to_token expected integer ids, got 1.0"):
        tokenizer.id_to_token(1.0)
    with pytest.raises(TypeError, match="WordPieceTokenizer.encode expected a str, got list"):
        tokenizer.encode(["ab"])
    with pytest.raises(ValueError, match=r"expected \[UNK\] in the vocabulary"):
        WordPieceTokenizer(["a", "##b"])
    with pytest.raises(ValueError, match="expected distinct tokens, got \\['a'\\] twice"):
        WordPieceTokenizer([UNKNOWN, "a", "a"])
