"""The lecture's BPE loop: golden merges from the notes, the tie rule, the stopping rules, the errata."""

import doctest
import importlib

import pytest

from minitransformer.tokenizers.bpe import get_stats, learn_bpe, lecture_vocab, merge_vocab
from minitransformer.tokenizers.bpe.reference import merge_vocab_with_pattern

TOY_WORDS = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
TOY_MERGES = [
    ("e", "s"), ("es", "t"), ("est", "</w>"), ("l", "o"), ("lo", "w"),
    ("n", "e"), ("ne", "w"), ("new", "est</w>"), ("low", "</w>"), ("w", "i"),
]

# Notes section 1.5's example, worked by hand. Every word occurs once; after
# (T,E) three pairs are tied at 4, (T,E) and (E,R) both met first in BITTER.
BITTER_WORDS = {"BITTER": 1, "BUTLER": 1, "BITE": 1, "BUTTER": 1, "BITER": 1}
BITTER_MERGES_SEEN_TWICE = [
    (("T", "E"), 4),           # tied at 4 with (E,R), (R,</w>): (T,E) comes first in BITTER
    (("R", "</w>"), 4),        # (E,R) fell to 1 (only BUTLER keeps E R)
    (("B", "I"), 3),           # tied with (TE,R</w>); B I starts BITTER
    (("TE", "R</w>"), 3),
    (("T", "TER</w>"), 2),     # tied with (B,U): BITTER comes before BUTLER
    (("B", "U"), 2),
]
BITTER_MERGES_TO_THE_END = [pair for pair, _ in BITTER_MERGES_SEEN_TWICE] + [
    ("BI", "TTER</w>"), ("BU", "T"), ("BUT", "L"), ("BUTL", "E"), ("BUTLE", "R</w>"),
    ("BI", "TE"), ("BITE", "</w>"), ("BU", "TTER</w>"), ("BI", "TER</w>"),
]

# The survey note's printed lookarounds (section 12, line 14 of its listing) and the
# joiner of its printed replacement (line 16: the pair joined with a space).
SURVEY_PRINTED_BEFORE = r"(?!\S)"
SURVEY_PRINTED_AFTER = r"(!\S)"
SURVEY_PRINTED_JOINER = " "


def test_lecture_vocab_spells_words_with_end_of_word():
    assert lecture_vocab(TOY_WORDS) == {
        "l o w </w>": 5, "l o w e r </w>": 2, "n e w e s t </w>": 6, "w i d e s t </w>": 3,
    }


def test_get_stats_weights_pairs_by_word_count_in_scan_order():
    stats = get_stats({"l o w </w>": 5, "l o w e r </w>": 2})
    assert list(stats.items()) == [
        (("l", "o"), 7), (("o", "w"), 7), (("w", "</w>"), 5), (("w", "e"), 2), (("e", "r"), 2), (("r", "</w>"), 2),
    ]


def test_merge_vocab_matches_whole_symbols_only():
    vocab = {"e st e s </w>": 1, "es s e s s </w>": 2}
    assert merge_vocab(("e", "s"), vocab) == {"e st es </w>": 1, "es s es s </w>": 2}


def test_merge_vocab_is_left_to_right_without_overlap():
    assert merge_vocab(("a", "a"), {"a a a </w>": 1, "a a a a </w>": 1}) == {"aa a </w>": 1, "aa aa </w>": 1}


def test_merge_vocab_escapes_regex_characters_and_backslashes():
    vocab = {". * \\ 1 </w>": 3, "x . * </w>": 1}
    merged = merge_vocab((".", "*"), vocab)
    assert merged == {".* \\ 1 </w>": 3, "x .* </w>": 1}
    assert merge_vocab(("\\", "1"), merged) == {".* \\1 </w>": 3, "x .* </w>": 1}


@pytest.mark.parametrize("method", ["reference", "fast"])
def test_toy_vocabulary_gives_the_ten_lecture_merges(method):
    assert learn_bpe(TOY_WORDS, 10, method=method) == TOY_MERGES


@pytest.mark.parametrize("method", ["reference", "fast"])
def test_bitter_butter_with_the_tie_rule(method):
    assert learn_bpe(BITTER_WORDS, method=method, with_counts=True) == BITTER_MERGES_SEEN_TWICE
    assert learn_bpe(BITTER_WORDS, method=method, min_count=1) == BITTER_MERGES_TO_THE_END


def test_running_to_the_end_leaves_every_word_one_symbol():
    vocab = lecture_vocab(BITTER_WORDS)
    for pair in BITTER_MERGES_TO_THE_END:
        vocab = merge_vocab(pair, vocab)
    assert list(vocab) == [word + "</w>" for word in BITTER_WORDS]


def test_tie_follows_vocabulary_order_not_alphabet():
    assert learn_bpe({"zy": 2, "ab": 2}, 1, method="reference") == [("z", "y")]
    assert learn_bpe({"ab": 2, "zy": 2}, 1, method="reference") == [("a", "b")]


@pytest.mark.parametrize("method", ["reference", "fast"])
def test_vocab_size_counts_alphabet_end_of_word_and_merged_symbols(method):
    alphabet_size = len(set("lowernstid")) + 1  # 10 letters and </w>
    merges = learn_bpe(TOY_WORDS, method=method, vocab_size=alphabet_size + 4)
    assert merges == TOY_MERGES[:4]
    with pytest.raises(ValueError, match="vocab_size must be at least the alphabet size 11"):
        learn_bpe(TOY_WORDS, method=method, vocab_size=5)


def test_min_count_stops_when_no_pair_occurs_often_enough():
    assert learn_bpe(TOY_WORDS, 100, method="reference", min_count=3) == TOY_MERGES + [("wi", "d"), ("wid", "est</w>")]
    assert len(learn_bpe(TOY_WORDS, 100, method="reference", min_count=2)) == 15  # every word one symbol


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"two words": 1}, "without whitespace"),
        ({"": 1}, "non-empty"),
        ({"low": 0}, "positive integer count for 'low', got 0"),
        ({"low": 1.5}, "positive integer"),
        (["low"], "expected a dict"),
    ],
)
def test_bad_word_counts_are_named(bad, message):
    with pytest.raises((ValueError, TypeError), match=message):
        learn_bpe(bad, 3)


def test_unknown_method_is_named():
    with pytest.raises(ValueError, match="method must be one of"):
        learn_bpe(TOY_WORDS, 3, method="quick")


# ---------------------------------------------------------------- errata
def test_survey_printed_pattern_never_matches():
    """Survey note section 12: `(?!\\S)` before the pair and `(!\\S)` after it match nothing."""
    vocab = lecture_vocab(TOY_WORDS)
    for pair in get_stats(vocab):
        assert merge_vocab_with_pattern(pair, vocab, SURVEY_PRINTED_BEFORE, SURVEY_PRINTED_AFTER) == vocab
    # Even a word that literally has "!" after the pair is left alone: the lookahead in front fails first.
    assert merge_vocab_with_pattern(("e", "s"), {"e s !x": 1}, SURVEY_PRINTED_BEFORE, SURVEY_PRINTED_AFTER) == {
        "e s !x": 1
    }


def run_survey_loop(before, after, joiner, num_merges=10):
    vocab = lecture_vocab(TOY_WORDS)
    merges = []
    for _ in range(num_merges):
        pairs = get_stats(vocab)
        best = max(pairs, key=pairs.get)
        vocab = merge_vocab_with_pattern(best, vocab, before, after, joiner)
        merges.append(best)
    return merges


def test_survey_printed_loop_returns_e_s_ten_times():
    printed = run_survey_loop(SURVEY_PRINTED_BEFORE, SURVEY_PRINTED_AFTER, SURVEY_PRINTED_JOINER)
    assert printed == [("e", "s")] * 10


def test_survey_loop_needs_both_fixes():
    """Correct lookarounds alone still merge nothing (the space is put back); with '' as joiner it is the lecture."""
    assert run_survey_loop(r"(?<!\S)", r"(?!\S)", SURVEY_PRINTED_JOINER) == [("e", "s")] * 10
    assert run_survey_loop(SURVEY_PRINTED_BEFORE, SURVEY_PRINTED_AFTER, "") == [("e", "s")] * 10
    assert run_survey_loop(r"(?<!\S)", r"(?!\S)", "") == TOY_MERGES


@pytest.mark.parametrize("module_name", ["reference", "pair_merge", "learn", "tokenizer"])
def test_docstring_examples_of_the_bpe_package_hold(module_name):
    module = importlib.import_module(f"minitransformer.tokenizers.bpe.{module_name}")
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
