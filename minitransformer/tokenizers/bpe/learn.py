"""`learn_bpe`: learn the lecture's merges from a word-count table, with either trainer.

One entry point for both trainers, and the stopping rules both share (2025
lecture notes section 1.5: "run it as long as you want", or until the
vocabulary has the size you want):

* `num_merges`: stop after this many merges;
* `vocab_size`: stop when the vocabulary has this many symbols. The vocabulary
  is the initial alphabet (every character of the words, plus `</w>`) and the
  symbol each merge creates; a merge whose result is already a symbol (`a`+`bc`
  after `ab`+`c`) adds nothing. With no merge that recreates a symbol this is
  Sennrich et al.'s "initial vocabulary plus the number of merges";
* `min_count`: stop early when the best pair occurs fewer than this many times
  (default 2: a pair seen once teaches nothing about new text).

`method="reference"` runs the lecture's loop (`reference.py`), `method="fast"`
the incremental trainer (`fast.py`); both give the same merges in the same order.

Left out on purpose: reading text. `word_counts_from_text` only splits on
whitespace, as the lecture does; the byte-level tokenizer for the GPT is in
`tokenizer.py`.
"""

import collections

from .fast import iter_merges_fast
from .reference import END_OF_WORD, iter_merges_reference, lecture_vocab

METHODS = ("fast", "reference")


def word_counts_from_text(text):
    """Split `text` on whitespace and count the words, in order of first appearance.

    Example:
        >>> word_counts_from_text("the cat the hat")
        {'the': 2, 'cat': 1, 'hat': 1}
    """
    return dict(collections.Counter(text.split()))


def check_word_counts(word_counts):
    """Raise a clear error unless `word_counts` maps non-empty, whitespace-free strings to positive ints."""
    if not isinstance(word_counts, dict):
        raise TypeError(f"learn_bpe expected a dict {{word: count}}, got {type(word_counts).__name__}")
    for word, count in word_counts.items():
        if not isinstance(word, str) or not word or any(character.isspace() for character in word):
            raise ValueError(f"learn_bpe expected words as non-empty strings without whitespace, got {word!r}")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"learn_bpe expected a positive integer count for {word!r}, got {count!r}")


def iter_merges_fast_on_strings(word_counts):
    """Run the fast trainer on lecture symbols: strings in, strings out.

    Symbols become integer ids; a merged symbol's id is looked up by its text,
    so two merges giving the same text give the same symbol, as in the reference.

    Yields:
        ((left, right), count), symbols as strings.
    """
    symbol_ids = {}
    symbol_texts = []

    def symbol_id(text):
        if text not in symbol_ids:
            symbol_ids[text] = len(symbol_texts)
            symbol_texts.append(text)
        return symbol_ids[text]

    def merged_symbol(left, right):
        return symbol_id(symbol_texts[left] + symbol_texts[right])

    words = [[symbol_id(symbol) for symbol in [*word, END_OF_WORD]] for word in word_counts]
    counts = list(word_counts.values())
    for (left, right), count in iter_merges_fast(words, counts, merged_symbol):
        yield (symbol_texts[left], symbol_texts[right]), count


def learn_bpe(word_counts, num_merges=None, method="fast", *, vocab_size=None, min_count=2, with_counts=False):
    """Learn the ordered BPE merges of a word-count table, as the lectures define them.

    Ties between equally frequent pairs go to the pair met first when scanning
    the words in the dictionary's order, each word left to right (the lecture's
    `max(pairs, key=pairs.get)`).

    Example:
        >>> learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 4)
        [('e', 's'), ('es', 't'), ('est', '</w>'), ('l', 'o')]

    Args:
        word_counts: dict word -> positive int count; words are plain strings
            without whitespace. The order of the dictionary decides ties.
        num_merges: stop after this many merges (None: no limit).
        method: "fast" (default) or "reference" (the lecture's loop).
        vocab_size: stop when the vocabulary (alphabet plus `</w>` plus merged
            symbols) has this many symbols (None: no limit).
        min_count: stop when the best pair occurs fewer times than this.
        with_counts: also return each merge's count.
    Returns:
        list of (left, right) symbol strings, `</w>` written as the lecture
        writes it (`('est', '</w>')`); with `with_counts`, list of
        ((left, right), count).
    """
    check_word_counts(word_counts)
    if method == "reference":
        merge_steps = iter_merges_reference(lecture_vocab(word_counts))
    elif method == "fast":
        merge_steps = iter_merges_fast_on_strings(word_counts)
    else:
        raise ValueError(f"learn_bpe method must be one of {METHODS}, got {method!r}")
    symbols = {END_OF_WORD}.union(*word_counts)
    if vocab_size is not None and vocab_size < len(symbols):
        raise ValueError(f"learn_bpe vocab_size must be at least the alphabet size {len(symbols)}, got {vocab_size}")
    learned = []
    while (num_merges is None or len(learned) < num_merges) and (vocab_size is None or len(symbols) < vocab_size):
        pair, count = next(merge_steps, (None, 0))
        if pair is None or count < min_count:
            break
        learned.append((pair, count))
        symbols.add(pair[0] + pair[1])
    if with_counts:
        return learned
    return [pair for pair, _ in learned]
