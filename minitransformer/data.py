"""Text to training batches: a character tokenizer, the default corpus, a split, random windows.

* `CharTokenizer`: one token per distinct character of the training text, the
  smallest vocabulary that can spell it (about 100 symbols for English prose).
  The BPE tokenizer (lecture notes 2025 §1.5) merges frequent pairs into larger
  tokens; `make_tokenizer("bpe", ...)` uses it when the package provides it.
* `default_corpus()`: the help topics that ship inside every CPython
  (`pydoc_data.topics`, about 460 kB of English prose and code examples), so the
  main job runs offline on a fresh machine.
* `train_val_split`: the first 90 % for training, the last 10 % held out.
* `get_batch`: `batch_size` windows of `block_size + 1` consecutive tokens at
  random offsets drawn from the passed-in generator; the input is a window's
  first `block_size` tokens and the target the same window shifted by one.

Left out: streaming corpora larger than memory, document boundaries, padding.
"""

import numpy as np

from .bpe import BPETokenizer
from .random import as_generator


class CharTokenizer:
    """Characters <-> integer ids, ids in order of the sorted distinct characters.

    >>> tok = CharTokenizer.train("hello")
    >>> tok.encode("hole"), tok.decode([3, 1, 2])
    ([1, 3, 2, 0], 'ohl')
    """

    kind = "char"

    def __init__(self, chars):
        self.chars = "".join(chars)
        if len(set(self.chars)) != len(self.chars):
            raise ValueError("CharTokenizer expected distinct characters")
        self.ids = {char: index for index, char in enumerate(self.chars)}

    @classmethod
    def train(cls, text, vocab_size=None):
        """Vocabulary of all distinct characters of `text` (`vocab_size` is ignored; it is what it is)."""
        if not text:
            raise ValueError("CharTokenizer.train got an empty text")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, text):
        """str -> list of ids; a character never seen in training is an error naming it."""
        try:
            return [self.ids[char] for char in text]
        except KeyError as error:
            raise ValueError(f"CharTokenizer: character {error.args[0]!r} is not in the vocabulary "
                             f"of {self.vocab_size} characters") from None

    def decode(self, ids):
        """Iterable of ids -> str."""
        return "".join(self.chars[int(index)] for index in ids)

    def to_config(self):
        """A JSON-serialisable description that `tokenizer_from_config` turns back into this tokenizer."""
        return {"kind": self.kind, "chars": self.chars}

    def __repr__(self):
        return f"CharTokenizer(vocab_size={self.vocab_size})"


def make_tokenizer(kind, text, vocab_size=None):
    """Train a tokenizer of `kind` ("char" or "bpe") on `text`."""
    if kind == "char":
        return CharTokenizer.train(text)
    if kind == "bpe":
        return BPETokenizer.train(text, vocab_size=vocab_size or 512)
    raise ValueError(f"unknown tokenizer {kind!r}; expected 'char' or 'bpe'")


def tokenizer_from_config(config):
    """Rebuild a tokenizer from its `to_config()` dictionary (stored in checkpoints)."""
    if config.get("kind") == "char":
        return CharTokenizer(config["chars"])
    if config.get("kind") == "bpe":
        return BPETokenizer.from_config(config)
    raise ValueError(f"unknown tokenizer config {config.get('kind')!r}")


def default_corpus():
    """The pydoc help topics that ship with CPython, joined in sorted order (about 460 kB)."""
    from pydoc_data.topics import topics
    return "\n\n".join(topics[name] for name in sorted(topics))


def train_val_split(ids, train_fraction=0.9):
    """First `train_fraction` of the tokens for training, the rest for validation (no shuffling)."""
    ids = np.asarray(ids)
    cut = int(len(ids) * train_fraction)
    return ids[:cut], ids[cut:]


def get_batch(data, block_size, batch_size, rng):
    """Random windows of block_size + 1 tokens.

    Args:
        data: 1-D int array of token ids.
        block_size: T.
        batch_size: B.
        rng: seed or Generator (the only source of randomness).
    Returns:
        x int (B, T), y int (B, T) with y[b, t] = x[b, t + 1] inside the window.
    """
    data = np.asarray(data)
    if len(data) < block_size + 1:
        raise ValueError(f"get_batch needs at least block_size + 1 = {block_size + 1} tokens, got {len(data)}")
    starts = as_generator(rng).integers(0, len(data) - block_size, size=batch_size)   # (B,)
    windows = data[starts[:, None] + np.arange(block_size + 1)]                       # (B, T + 1)
    return windows[:, :-1], windows[:, 1:]
