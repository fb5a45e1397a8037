"""Corpus BLEU: hand-computed examples, properties, and agreement with sacrebleu where it is installed."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import corpus_bleu
from minitransformer.generation.bleu import brevity_penalty, corpus_statistics, ngram_counts

HYPOTHESES = [
    "the cat is sitting on the mat near the door",
    "there is a small dog in the garden today",
    "he went to the market to buy fresh bread and milk",
    "we will meet again next week at the station",
    "the weather was cold but the sky was clear",
    "she reads a book every evening before she sleeps",
    "the train leaves the city at seven in the morning",
    "they did not understand the question at all",
]
REFERENCES = [
    ["the cat sits on the mat by the door", "a cat is sitting on the mat near the door"],
    ["a small dog is in the garden today", "there is a little dog in the garden"],
    ["he went to the market to buy bread and milk", "he walked to the market for fresh bread and milk"],
    ["we will see each other next week at the station", "we meet again next week at the train station"],
    ["it was cold but the sky was clear", "the weather was cold although the sky was clear"],
    ["every evening she reads a book before sleeping", "she reads a book each evening before she goes to sleep"],
    ["the train leaves the city at seven a.m.", "the train departs from the city at seven in the morning"],
    ["they did not understand the question", "they did not get the question at all"],
]


def test_clipping_on_papineni_example():
    # Papineni et al. 2002: "the" seven times against a reference with "the" twice -> p1 = 2/7
    matches, totals, c, r = corpus_statistics(["the the the the the the the"], [["the cat is on the mat"]], max_n=1)
    assert (matches, totals, c, r) == ([2], [7], 7, 6)
    assert corpus_bleu(["the the the the the the the"], [["the cat is on the mat"]], max_n=1) == pytest.approx(2 / 7)


def test_clipping_takes_the_maximum_over_single_references_not_their_sum():
    # "a" occurs once in each reference: the clip is max(1, 1) = 1, not 2
    matches, totals, _, _ = corpus_statistics(["a a"], [["a b", "b a"]], max_n=1)
    assert matches == [1] and totals == [2]


def test_brevity_penalty_uses_the_closest_reference_and_the_shorter_on_a_tie():
    # hypothesis of 4 tokens, references of 2 and 6 tokens: equally close, the shorter (2) counts -> no penalty
    _, _, c, r = corpus_statistics(["a b c d"], [["a b", "a b c d e f"]])
    assert (c, r) == (4, 2)
    _, _, c, r = corpus_statistics(["a b"], [["a b c", "a b c d e f g"]])
    assert (c, r) == (2, 3)
    assert brevity_penalty(2, 3) == pytest.approx(math.exp(1 - 3 / 2))
    assert brevity_penalty(5, 3) == 1.0 and brevity_penalty(0, 3) == 0.0


def test_hand_computed_two_sentence_corpus():
    # sentence 1: "a b c" vs "a b c d": p1 3/3, p2 2/2; sentence 2: "a x" vs "a y": p1 1/2, p2 0/1
    # corpus: p1 = 4/5, p2 = 2/3, c = 5, r = 6 -> BP = exp(1 - 6/5)
    expected = math.exp(1 - 6 / 5) * math.sqrt(4 / 5 * 2 / 3)
    assert corpus_bleu(["a b c", "a x"], [["a b c d"], ["a y"]], max_n=2) == pytest.approx(expected)


def test_no_smoothing_a_missing_order_gives_zero():
    assert corpus_bleu(["a b c"], [["a c b"]], max_n=4) == 0.0
    assert corpus_bleu([""], [["a b"]]) == 0.0


def test_survey_note_definition_as_printed_drops_the_last_ngram():
    """Seed 004, Definition 1.3 counts windows y_i..y_{i+M} with i + M <= K (1-based).

    Read literally the window holds M + 1 tokens and never equals an M-gram; read as the
    M-token window y_i..y_{i+M-1}, the bound i + M <= K still leaves out the n-gram that
    ends at y_K. Both differ from the count BLEU needs.
    """
    def count_as_printed(s, y, window_extra):
        M, K = len(s), len(y)
        return sum(1 for i in range(1, K + 1) if i + M <= K and tuple(y[i - 1:i - 1 + M + window_extra]) == s)

    y = "the cat sat".split()
    assert count_as_printed(("sat",), y, window_extra=1) == 0          # literal: M + 1 tokens
    assert count_as_printed(("sat",), y, window_extra=0) == 0          # charitable: still misses the last one
    assert ngram_counts(y, 1)[("sat",)] == 1                            # the right count


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="one list of references per hypothesis"):
        corpus_bleu(["a"], [["a"], ["b"]])
    with pytest.raises(ValueError, match="non-empty list of strings"):
        corpus_bleu(["a"], ["a"])
    with pytest.raises(ValueError, match="max_n >= 1"):
        corpus_bleu(["a"], [["a"]], max_n=0)


words = st.lists(st.sampled_from("a b c d e".split()), min_size=0, max_size=8).map(" ".join)


@given(st.lists(st.tuples(words, st.lists(words, min_size=1, max_size=3)), min_size=1, max_size=4))
def test_score_is_in_unit_interval_and_perfect_on_identity(pairs):
    hypotheses = [h for h, _ in pairs]
    references = [refs for _, refs in pairs]
    assert 0.0 <= corpus_bleu(hypotheses, references) <= 1.0 + 1e-12
    if sum(len(h.split()) for h in hypotheses) >= 4 and all(len(h.split()) >= 4 or not h for h in hypotheses):
        assert corpus_bleu(hypotheses, [[h] for h in hypotheses]) == pytest.approx(1.0)


def test_agrees_with_sacrebleu():
    sacrebleu = pytest.importorskip("sacrebleu")
    reference_streams = [[refs[k] for refs in REFERENCES] for k in range(2)]
    for max_n in (2, 4):
        theirs = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", max_ngram_order=max_n)
        expected = theirs.corpus_score(HYPOTHESES, reference_streams).score / 100
        assert corpus_bleu(HYPOTHESES, REFERENCES, max_n=max_n) == pytest.approx(expected, rel=1e-9)
        assert 0.2 < expected < 0.99                                     # a non-trivial score was compared
