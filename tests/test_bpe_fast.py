"""The fast trainer gives the reference's merges, in the reference's order, on every corpus.

The corpora are built to be hard: few distinct letters and few distinct counts,
so most steps have several pairs tied at the top; letters that spell `</w>`; and
words where a merged symbol can be built in two ways (`a`+`bc`, `ab`+`c`).
"""

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer.tokenizers.bpe import iter_merges_fast, learn_bpe, merge_pair_in_sequence, merge_vocab
from minitransformer.tokenizers.bpe.pair_merge import merge_pair_in_word

SMALL_ALPHABETS = ["ab", "abc", "aab", "</w>", "a.b*"]


@st.composite
def word_counts(draw, max_words=12, max_length=8):
    """A {word: count} table over a small alphabet, with counts from a small set (ties everywhere)."""
    alphabet = draw(st.sampled_from(SMALL_ALPHABETS))
    words = draw(st.lists(st.text(alphabet=alphabet, min_size=1, max_size=max_length), max_size=max_words, unique=True))
    count_choices = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    return {word: draw(st.sampled_from(count_choices)) for word in words}


def assert_same_merges(table, **limits):
    reference = learn_bpe(table, method="reference", with_counts=True, **limits)
    fast = learn_bpe(table, method="fast", with_counts=True, **limits)
    assert fast == reference


@settings(max_examples=300, deadline=None)
@given(word_counts())
def test_fast_equals_reference_to_the_end(table):
    assert_same_merges(table, min_count=1)


@settings(max_examples=150, deadline=None)
@given(word_counts(max_words=30, max_length=12), st.integers(0, 40), st.integers(1, 3))
def test_fast_equals_reference_with_limits(table, num_merges, min_count):
    assert_same_merges(table, num_merges=num_merges, min_count=min_count)


@settings(max_examples=100, deadline=None)
@given(word_counts(), st.integers(0, 30))
def test_fast_equals_reference_with_vocab_size(table, extra_symbols):
    alphabet_size = len(set("".join(table)) | {"</w>"})
    assert_same_merges(table, vocab_size=alphabet_size + extra_symbols, min_count=1)


def test_all_equal_counts_and_one_letter_pair_everywhere():
    table = {"".join(letters): 1 for letters in itertools.product("ab", repeat=4)}
    assert_same_merges(table, min_count=1)


def test_merged_symbol_built_two_ways_is_one_symbol():
    # 'abc' arises from ('a','bc') in the first word and from ('ab','c') in the third:
    # afterwards both are the same symbol, and pairs with it are counted together.
    table = {"bcbc": 3, "abcd": 2, "abcd" + "x": 1, "xab": 5, "abcz": 2}
    assert_same_merges(table, min_count=1)


def test_letters_spelling_end_of_word_merge_into_the_same_symbol():
    # '<' '/' 'w' '>' become '</w>', the end-of-word symbol itself; then ('a', '</w>') counts both words.
    table = {"</w>a": 5, "a</w>": 1}
    merges = learn_bpe(table, method="reference", min_count=1, with_counts=True)
    assert merges[2:4] == [(("</w", ">"), 6), (("a", "</w>"), 6)]
    assert_same_merges(table, min_count=1)


def test_fast_trainer_on_a_shakespeare_like_sample():
    text = (
        "First Citizen: Before we proceed any further, hear me speak. All: Speak, speak. "
        "First Citizen: You are all resolved rather to die than to famish? All: Resolved. resolved."
    ) * 3
    table = {}
    for word in text.split():
        table[word] = table.get(word, 0) + 1
    assert_same_merges(table, num_merges=60)


@given(st.lists(st.sampled_from("ab"), max_size=12), st.sampled_from([("a", "a"), ("a", "b"), ("b", "a")]))
def test_merge_pair_in_sequence_agrees_with_the_lecture_regex(symbols, pair):
    merged = merge_pair_in_sequence(symbols, pair, pair[0] + pair[1])
    word = " ".join(symbols)
    assert " ".join(merged) == next(iter(merge_vocab(pair, {word: 1})))


def test_iter_merges_fast_leaves_the_callers_words_alone():
    words, counts = [[1, 2, 1, 2]], [1]
    merges = list(iter_merges_fast(words, counts, merged_symbol=lambda left, right: 10 * left + right))
    assert merges == [((1, 2), 2), ((12, 12), 1)]
    assert words == [[1, 2, 1, 2]]


@given(st.lists(st.sampled_from([1, 2, 3]), max_size=12), st.sampled_from([(1, 1), (1, 2), (2, 1)]))
def test_merge_pair_in_word_lists_exactly_the_changed_pairs(symbols, pair):
    """The fast trainer's local update equals recounting the whole word before and after."""
    merged = 9
    new_symbols, removed, added = merge_pair_in_word(symbols, pair, merged)
    assert new_symbols == merge_pair_in_sequence(symbols, pair, merged)
    old_pairs = Counter(zip(symbols, symbols[1:]))
    new_pairs = Counter(zip(new_symbols, new_symbols[1:]))
    assert old_pairs - Counter(removed) + Counter(added) == new_pairs
    assert Counter(removed) <= old_pairs
