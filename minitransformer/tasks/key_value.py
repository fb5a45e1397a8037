"""Random key -> value tables, one per sequence: the task of the in-context learning run (objectives/in_context.py).

Each sequence draws its own random table from `n_keys` keys to `n_values` values, then lists `n_pairs` pairs
`k v k v ...` with keys drawn at random (so keys repeat). The value of a key is only predictable if the key
appeared earlier in the same sequence: nothing in the weights can know this sequence's table.

Token layout: keys are ids 0 .. n_keys - 1, values n_keys .. n_keys + n_values - 1.
"""

import numpy as np

from ..core.random import as_generator


class KeyValueTask:
    """Random key -> value tables, one per sequence, listed as pairs (module docstring).

    Args:
        n_keys, n_values: the two alphabets.  n_pairs: N, pairs per sequence (T = 2N - 1 inputs).
        rng: seed or Generator for every draw.
    """

    def __init__(self, n_keys=4, n_values=4, n_pairs=10, rng=None):
        if min(n_keys, n_values, n_pairs) < 1:
            raise ValueError(f"KeyValueTask expected n_keys, n_values, n_pairs >= 1, got {n_keys}, {n_values}, "
                             f"{n_pairs}")
        self.n_keys, self.n_values, self.n_pairs = n_keys, n_values, n_pairs
        self.vocab_size = n_keys + n_values
        self.rng = as_generator(rng)

    def batch(self, batch_size):
        """(x int (B, 2N - 1), y int (B, 2N - 1), keys int (B, N)); y is the value after each key, -1 elsewhere."""
        keys = self.rng.integers(0, self.n_keys, size=(batch_size, self.n_pairs))            # (B, N)
        tables = self.rng.integers(0, self.n_values, size=(batch_size, self.n_keys))        # (B, n_keys)
        values = np.take_along_axis(tables, keys, axis=1) + self.n_keys                     # (B, N)
        sequence = np.stack([keys, values], axis=2).reshape(batch_size, 2 * self.n_pairs)   # k v k v ...
        x, y = sequence[:, :-1], np.full((batch_size, 2 * self.n_pairs - 1), -1)
        y[:, 0::2] = sequence[:, 1::2]                                                        # at each key: its value
        return x, y, keys

    @staticmethod
    def seen_before(keys):
        """bool (B, N): key n occurred among keys 0 .. n - 1 of its sequence."""
        same = keys[:, :, None] == keys[:, None, :]                                          # (B, N, N)
        return np.tril(same, k=-1).any(axis=2)
