"""Byte-pair encoding: the lecture's trainer, a fast trainer with the same merges, and a tokenizer.

* `reference.py`: the lecture's loop (`get_stats`, `merge_vocab`), slow and readable;
* `pair_merge.py`: merging one pair inside one word (trainer and encoder share it);
* `fast.py`: incremental pair counts, the same merges in the same order;
* `learn.py`: `learn_bpe`, one entry point to both, with the stopping rules;
* `tokenizer.py`: `BPETokenizer`, byte-level BPE for the GPT (train, encode, decode, save, load).
"""

from .fast import iter_merges_fast
from .learn import learn_bpe, word_counts_from_text
from .pair_merge import merge_pair_in_sequence
from .reference import END_OF_WORD, get_stats, iter_merges_reference, lecture_vocab, merge_vocab
from .tokenizer import BPETokenizer

__all__ = [
    "BPETokenizer",
    "END_OF_WORD",
    "get_stats",
    "iter_merges_fast",
    "iter_merges_reference",
    "learn_bpe",
    "lecture_vocab",
    "merge_pair_in_sequence",
    "merge_vocab",
    "word_counts_from_text",
]
