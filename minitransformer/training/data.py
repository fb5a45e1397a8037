"""Token ids to training batches: the default corpus, a split, random windows.

(The tokenizers that turn text into ids are in `minitransformer/tokenizers/`.)

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

from ..core.random import as_generator


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
