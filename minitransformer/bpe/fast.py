"""The fast BPE trainer: the same merges, in the same order, as the lecture's loop.

The lecture's loop (`reference.py`) recounts every pair of every word for every
merge. Here the counts are kept from one merge to the next and only the words
that contain the merged pair are touched, and in them only the pairs next to a
merge (`merge_pair_in_word`):

* `pair_counts[pair]`: weighted count of each adjacent pair, as `get_stats` would give;
* `pair_words[pair]`: the indices of the words containing the pair (the index
  that finds the words to rewrite; it may also hold words that lost the pair);
* a heap of `(-count, pair)` entries. Entries are never updated in place: when
  a count changes a new entry is pushed, and an entry whose count no longer
  matches `pair_counts` is stale and skipped when it reaches the top.

The tie rule of the reference: among the pairs with the highest count, the
winner is the pair met first when scanning the words in order, each left to
right. A pair's first meeting is (index of the first word containing it,
position of its first occurrence in that word), taken in the *current* words.
Only the pairs tied at the top need it, so it is computed when they are popped,
never stored (a stored one would go stale with every merge).

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


def merge_pair_in_sequence(symbols, pair, merged):
    """Replace each occurrence of `pair` in `symbols` by `merged`, scanning left to right.

    Occurrences do not overlap: for pair (a, a), `a a a` becomes `aa a`, as the
    lecture's regular expression does.

    Example:
        >>> merge_pair_in_sequence([1, 1, 1, 2], (1, 1), 9)
        [9, 1, 2]

    Args:
        symbols: list of symbol ids, length n.
        pair: (left id, right id).
        merged: id of the merged symbol.
    Returns:
        new list, length n minus the number of merges made.
    """
    left, right = pair
    result = []
    position = 0
    last = len(symbols) - 1
    while position <= last:
        if position < last and symbols[position] == left and symbols[position + 1] == right:
            result.append(merged)
            position += 2
        else:
            result.append(symbols[position])
            position += 1
    return result


def merge_pair_in_word(symbols, pair, merged):
    """`merge_pair_in_sequence`, also listing the adjacent pairs that disappear and appear.

    A pair disappears when one of its two symbols is consumed by a merge, and
    appears when one of its two symbols is a merged one; every other pair of
    the word is untouched, so these lists are the whole change in its counts.

    Example:
        >>> merge_pair_in_word([3, 1, 2, 1, 2], (1, 2), 9)
        ([3, 9, 9], [(3, 1), (1, 2), (2, 1), (1, 2)], [(3, 9), (9, 9)])

    Args:
        symbols: list of symbol ids.
        pair: (left id, right id).
        merged: id of the merged symbol.
    Returns:
        (new symbols, pairs removed, pairs added); both pair lists are empty
        when `pair` does not occur.
    """
    left, right = pair
    new_symbols, removed, added = [], [], []
    last = len(symbols) - 1
    position = 0
    previous_merged = False  # the symbol appended last was made by this merge
    while position <= last:
        if position < last and symbols[position] == left and symbols[position + 1] == right:
            if position > 0 and not previous_merged:  # else (right, left) went with the previous merge
                removed.append((symbols[position - 1], left))
            removed.append(pair)
            if position + 2 <= last:
                removed.append((right, symbols[position + 2]))
            if new_symbols:
                added.append((new_symbols[-1], merged))
            new_symbols.append(merged)
            previous_merged = True
            position += 2
        else:
            if previous_merged:
                added.append((merged, symbols[position]))
            new_symbols.append(symbols[position])
            previous_merged = False
            position += 1
    return new_symbols, removed, added


def first_position(symbols, pair):
    """Index of the first occurrence of `pair` in `symbols`, or None."""
    for position, adjacent in enumerate(zip(symbols, symbols[1:])):
        if adjacent == pair:
            return position
    return None


class PairStatistics:
    """Pair counts, the pair -> words index and the heap, for a list of weighted words.

    The index is allowed to be a superset: a word that loses a pair is not
    removed from the pair's set (that costs more than it saves), so every use
    of the index checks the word.

    Args:
        words: list of lists of symbol ids (copied; the caller's lists are not changed).
        counts: list of positive ints, one per word.
    """

    def __init__(self, words, counts):
        self.words = [list(symbols) for symbols in words]
        self.counts = list(counts)
        self.pair_counts = defaultdict(int)
        self.pair_words = defaultdict(set)
        for index, (symbols, count) in enumerate(zip(self.words, self.counts)):
            for pair in zip(symbols, symbols[1:]):
                self.pair_counts[pair] += count
                self.pair_words[pair].add(index)
        self.heap = [(-count, pair) for pair, count in self.pair_counts.items()]
        heapq.heapify(self.heap)

    def first_met(self, pair):
        """(word index, position) of the first occurrence of `pair` in the current words."""
        for index in sorted(self.pair_words[pair]):
            position = first_position(self.words[index], pair)
            if position is not None:
                return index, position
        raise KeyError(f"PairStatistics.first_met: pair {pair} occurs in no word")

    def pop_best(self):
        """Remove and return (pair, count) with the highest count, ties broken as the reference does.

        Returns None when no pair is left.
        """
        while self.heap and self.pair_counts.get(self.heap[0][1]) != -self.heap[0][0]:
            heapq.heappop(self.heap)  # stale entry
        if not self.heap:
            return None
        best_count = -self.heap[0][0]
        tied = set()
        while self.heap and self.heap[0][0] == -best_count:
            _, pair = heapq.heappop(self.heap)
            if self.pair_counts.get(pair) == best_count:
                tied.add(pair)
        best = tied.pop() if len(tied) == 1 else min(tied, key=self.first_met)
        tied.discard(best)
        for pair in tied:
            heapq.heappush(self.heap, (-best_count, pair))
        return best, best_count

    def merge(self, pair, merged):
        """Rewrite every word containing `pair`, updating counts, index and heap for the changes only."""
        count_changes = defaultdict(int)
        for index in self.pair_words.pop(pair):
            new_symbols, removed, added = merge_pair_in_word(self.words[index], pair, merged)
            if not removed:
                continue  # the index was a superset
            count = self.counts[index]
            for old_pair in removed:
                count_changes[old_pair] -= count
            for new_pair in added:
                count_changes[new_pair] += count
                self.pair_words[new_pair].add(index)
            self.words[index] = new_symbols
        for changed_pair, change in count_changes.items():
            if change == 0:
                continue
            new_count = self.pair_counts[changed_pair] + change
            if new_count:
                self.pair_counts[changed_pair] = new_count
                heapq.heappush(self.heap, (-new_count, changed_pair))
            else:
                del self.pair_counts[changed_pair]
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
