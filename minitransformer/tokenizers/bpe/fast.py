"""The fast BPE trainer: the same merges, in the same order, as the lecture's loop.

The lecture's loop (`reference.py`) recounts every pair of every word for every
merge. Here the counts are kept from one merge to the next; only the words that
contain the merged pair are touched, and in them only the pairs next to a merge
(`merge_pair_in_word`). Three structures:

* `pair_counts[pair]`: weighted count of each adjacent pair, as `get_stats` gives it;
* `pair_words[pair]`: indices of the words containing the pair, so a merge finds
  its words without a scan. It may also hold words that have lost the pair
  (removing them costs more than skipping them), so every use checks the word;
* a heap of `(-count, first_word_bound, pair)` entries, smallest first.

The tie rule of the reference: among the pairs with the highest count, the
winner is the pair met first when scanning the current words in order, each
left to right; that is, the pair with the smallest (index of the first word
containing it, position in that word). The heap orders by count, then by the
first word; the position only matters between pairs tied on both, so it is
looked up for those few, when they are popped.

Lazy entries. An entry is never changed in place; when a pair's count changes, a
new entry is pushed and the old one becomes stale (its count no longer matches
`pair_counts`). The first word stored in an entry is a *lower bound*: a pair's
first word moves earlier only when the pair appears in a new word, and that
pushes a new entry; it moves later when the pair leaves its first word, and
then the old bound is still a bound. When the top entry's bound is not the
true first word, it is pushed back with the true one. So when the top entry is
exact, no other pair with the same count can have an earlier first word.

Symbols are integers. How a merged symbol is named is up to the caller
(`merged_symbol(left, right) -> int`): the lecture's strings are compared by
content, so `a`+`bc` and `ab`+`c` are the same symbol `abc`; the byte-level
tokenizer gives every merge a fresh id.

Left out on purpose: parallelism, and any data structure beyond dictionaries,
sets and a heap. `tests/test_bpe_fast.py` checks this file against the
reference on random corpora full of ties.
"""

import heapq
from collections import defaultdict

from .pair_merge import first_position, merge_pair_in_word


class PairStatistics:
    """Pair counts, the pair -> words index and the heap, for a list of weighted words.

    Args:
        words: list of lists of symbol ids (copied; the caller's lists are not changed).
        counts: list of positive ints, one per word.
    """

    def __init__(self, words, counts):
        self.words = [list(symbols) for symbols in words]
        self.counts = list(counts)
        self.pair_counts = defaultdict(int)
        self.pair_words = defaultdict(set)
        self.first_word_bound = {}
        for index, (symbols, count) in enumerate(zip(self.words, self.counts)):
            for pair in zip(symbols, symbols[1:]):
                self.pair_counts[pair] += count
                self.pair_words[pair].add(index)
                self.first_word_bound.setdefault(pair, index)
        self.heap = [(-count, self.first_word_bound[pair], pair) for pair, count in self.pair_counts.items()]
        heapq.heapify(self.heap)

    def first_word(self, pair):
        """Index of the first word that contains `pair` now; drops stale words from the index on the way."""
        candidates = self.pair_words[pair]
        while True:
            index = min(candidates)
            if first_position(self.words[index], pair) is not None:
                self.first_word_bound[pair] = index
                return index
            candidates.discard(index)

    def pop_best(self):
        """Remove and return (pair, count) with the highest count, ties broken as the reference does.

        Returns None when no pair is left.
        """
        heap = self.heap
        while heap:
            negative_count, bound, pair = heap[0]
            if self.pair_counts.get(pair) != -negative_count:
                heapq.heappop(heap)  # stale count
                continue
            first_word = self.first_word(pair)
            if first_word == bound:
                break
            heapq.heapreplace(heap, (negative_count, first_word, pair))  # bound was too low
        else:
            return None
        # Every pair with this count and this first word has an entry with exactly this key prefix.
        tied = set()
        while heap and heap[0][:2] == (negative_count, bound):
            _, _, pair = heapq.heappop(heap)
            if self.pair_counts.get(pair) != -negative_count:
                continue
            first_word = self.first_word(pair)
            if first_word == bound:
                tied.add(pair)
            else:
                heapq.heappush(heap, (negative_count, first_word, pair))
        first_word_symbols = self.words[bound]
        best = min(tied, key=lambda pair: first_position(first_word_symbols, pair))
        tied.discard(best)
        for pair in tied:
            heapq.heappush(heap, (negative_count, bound, pair))
        return best, -negative_count

    def merge(self, pair, merged):
        """Rewrite every word containing `pair`, updating counts, index and heap for the changes only."""
        count_changes = defaultdict(int)
        for index in self.pair_words.pop(pair):
            new_symbols, removed, added = merge_pair_in_word(self.words[index], pair, merged)
            if not removed:
                continue  # the index held a word that had lost the pair
            count = self.counts[index]
            for old_pair in removed:
                count_changes[old_pair] -= count
            for new_pair in added:
                count_changes[new_pair] += count
                self.pair_words[new_pair].add(index)
                if index < self.first_word_bound.get(new_pair, index + 1):
                    self.first_word_bound[new_pair] = index
            self.words[index] = new_symbols
        # Push even when the net change is 0: the pair may have moved to an earlier word.
        for changed_pair, change in count_changes.items():
            new_count = self.pair_counts[changed_pair] + change
            if new_count:
                self.pair_counts[changed_pair] = new_count
                heapq.heappush(self.heap, (-new_count, self.first_word_bound[changed_pair], changed_pair))
            else:
                del self.pair_counts[changed_pair]
                self.first_word_bound.pop(changed_pair, None)
                self.pair_words.pop(changed_pair, None)


def iter_merges_fast(words, counts, merged_symbol):
    """Yield the reference's merges, in its order, for integer-symbol words.

    Args:
        words: list of lists of symbol ids, in vocabulary order (the order decides ties).
        counts: list of positive ints, the count of each word.
        merged_symbol: function (left id, right id) -> id of the merged symbol.
    Yields:
        ((left id, right id), count) for each merge, until no pair is left.
    """
    statistics = PairStatistics(words, counts)
    while True:
        best = statistics.pop_best()
        if best is None:
            return
        pair, count = best
        merged = merged_symbol(*pair)
        yield pair, count
        statistics.merge(pair, merged)
