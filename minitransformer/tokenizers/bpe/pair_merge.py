"""Merging one pair inside one word: the step shared by the fast trainer and the encoder.

Words here are lists of integer symbol ids. The lecture (notes section 1.5,
survey note section 12) merges with a regular expression over the spaced word;
`merge_pair_in_sequence` is the same left-to-right, non-overlapping rewrite on a
list, and `tests/test_bpe_fast.py` checks the two agree. `merge_pair_in_word`
also reports which adjacent pairs the rewrite destroyed and created, which is
all the fast trainer needs to keep its counts.

Left out on purpose: anything about counts or order of merges (see `fast.py`).
"""


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
    if left not in symbols:  # a quick scan in C; the fast trainer's word index holds such words
        return symbols, [], []
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
