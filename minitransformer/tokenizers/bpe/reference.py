"""Byte-pair encoding as the lectures write it: the readable reference trainer.

Implements the loop of the 2025 lecture notes, section 1.5 ("Shared embeddings
and BPE"), and of the survey note's section 12 listing (after Sennrich, Haddow
and Birch 2016, arXiv:1508.07909):

* the corpus is a *lecture vocabulary*: each word written as its symbols
  separated by single spaces, ending in the end-of-word symbol `</w>`, mapped
  to how often the word occurs (`{'l o w </w>': 5, 'n e w e s t </w>': 6}`);
* `get_stats` counts every adjacent pair of symbols, each weighted by the
  count of the word it sits in;
* the most frequent pair is merged everywhere (`merge_vocab`), and the loop
  starts again from the new vocabulary.

Tie rule. The best pair is `max(pairs, key=pairs.get)`. Python's `max` returns
the first maximal key in iteration order, and `get_stats` inserts a pair into
its dictionary the first time it meets it while scanning the words in
vocabulary order, each word left to right. So among equally frequent pairs the
winner is the one met first in that scan of the *current* vocabulary. The fast
trainer in `fast.py` reproduces exactly this rule.

The merge pattern. A pair `('e', 's')` must match only whole symbols: `e s` in
`n e w e s t </w>`, but not the `e s` inside `e st` of a word that already has a
symbol `st`. The text before the pair must not be a non-space `(?<!\\S)`, and
the text after it must not be a non-space `(?!\\S)`. The survey note prints a
lookahead `(?!\\S)` in front of the pair, which can never hold at a position
where a symbol starts, and `(!\\S)` (a literal "!") after it; as printed the
pattern never matches. Its replacement is printed as `' '.join(pair)`, which
would put the space back even if the pattern matched; the merge needs
`''.join(pair)`. Both are shown in `tests/test_bpe_reference.py`.

Left out on purpose: any speed. `iter_merges_reference` rebuilds all pair
counts and rewrites every word for every merge, exactly like the lecture; use
`learn_bpe(..., method="fast")` for real corpora. Stopping rules (number of
merges, vocabulary size, minimum count) live in `learn.py`, shared with the
fast trainer.
"""

import collections
import re

END_OF_WORD = "</w>"

# The lookarounds that make a pair match whole symbols only.
WHOLE_SYMBOL_BEFORE = r"(?<!\S)"
WHOLE_SYMBOL_AFTER = r"(?!\S)"


def lecture_vocab(word_counts):
    """Write `{word: count}` as the lecture's vocabulary of spaced symbols.

    Example:
        >>> lecture_vocab({"low": 5, "newest": 6})
        {'l o w </w>': 5, 'n e w e s t </w>': 6}

    Args:
        word_counts: dict of plain-string word (no whitespace) -> positive count;
            its order is kept, and it decides the tie rule.
    Returns:
        dict of 'c h a r s </w>' -> count, in the same order.
    """
    return {" ".join([*word, END_OF_WORD]): count for word, count in word_counts.items()}


def get_stats(vocab):
    """Count adjacent symbol pairs, each occurrence weighted by its word's count.

    Example:
        >>> dict(get_stats({'l o w </w>': 5, 'l o t </w>': 2}))
        {('l', 'o'): 7, ('o', 'w'): 5, ('w', '</w>'): 5, ('o', 't'): 2, ('t', '</w>'): 2}

    Args:
        vocab: lecture vocabulary, 's y m b o l s' -> count.
    Returns:
        dict (symbol, symbol) -> weighted count, pairs in the order first met
        (words in vocabulary order, each left to right).
    """
    pairs = collections.defaultdict(int)
    for word, count in vocab.items():
        symbols = word.split()
        for left, right in zip(symbols, symbols[1:]):
            pairs[left, right] += count
    return pairs


def merge_vocab_with_pattern(pair, vocab, before, after, joiner=""):
    """Rewrite every word, replacing each match of `before + 'left right' + after` by `left + joiner + right`.

    `merge_vocab` is this with the whole-symbol lookarounds and an empty
    joiner. It is kept separate so the errata can run the survey note's printed
    lookarounds and its printed replacement (`' '.join(pair)`, a joiner of one
    space, which puts back exactly what it matched) through the same code.
    """
    spaced_pair = re.escape(" ".join(pair))
    pattern = re.compile(before + spaced_pair + after)
    replacement = joiner.join(pair)
    # A function, not a template string: a symbol may contain a backslash ("\\1" is not a group here).
    return {pattern.sub(lambda match: replacement, word): count for word, count in vocab.items()}


def merge_vocab(pair, vocab):
    """Merge `pair` into one symbol in every word of `vocab`, scanning left to right.

    Example:
        >>> merge_vocab(('e', 's'), {'n e w e s t </w>': 6, 'e s e s </w>': 1})
        {'n e w es t </w>': 6, 'es es </w>': 1}

    Args:
        pair: (left symbol, right symbol).
        vocab: lecture vocabulary, 's y m b o l s' -> count.
    Returns:
        new lecture vocabulary, same words in the same order, same counts.
    """
    return merge_vocab_with_pattern(pair, vocab, WHOLE_SYMBOL_BEFORE, WHOLE_SYMBOL_AFTER)


def iter_merges_reference(vocab):
    """The lecture's loop, one merge per step, for as long as any pair exists.

    Each step recounts all pairs, takes `max(pairs, key=pairs.get)` (ties: first
    met in the scan, see the module docstring), yields it with its count and
    rewrites the vocabulary. The caller decides when to stop.

    Args:
        vocab: lecture vocabulary, 's y m b o l s' -> count (not modified).
    Yields:
        ((left, right), count) for each merge, in order.
    """
    while True:
        pairs = get_stats(vocab)
        if not pairs:
            return
        best = max(pairs, key=pairs.get)
        yield best, pairs[best]
        vocab = merge_vocab(best, vocab)
