"""Token embedding: a lookup table from integer ids to vectors (lecture notes 2025 §1.5).

Left out: a padding row that never receives gradient (PyTorch's padding_idx;
here padding is kept out of the loss instead), max-norm renormalisation, and
sparse gradients (the gradient is a dense (V, C) array).

Derivation:
    The backward pass is a scatter-add: row `ids[b, t]` of the table receives
    dout[b, t], and a token that occurs twice receives both contributions.
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.module import Module
from ..core.parameter import Parameter
from ..core.random import as_generator


def check_token_ids(ids, vocab_size, where):
    """Return `ids` as an integer array, or raise naming `where` if any id is not in [0, vocab_size).

    NumPy would silently wrap a negative index to the end of the table; this
    guard turns that into an error.
    """
    ids = np.asarray(ids)
    if not np.issubdtype(ids.dtype, np.integer):
        raise TypeError(f"{where} expected integer token ids, got dtype {ids.dtype}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)].flat[0]
        raise IndexError(f"{where} expected token ids in [0, {vocab_size}), got {bad}")
    return ids


def check_token_batch(ids, vocab_size, where, what="token ids"):
    """Return `ids` as an integer (B, T) array with B >= 1 and T >= 1 and ids in [0, vocab_size), or raise naming `where`.

    The one rule of every model (GPT, encoder, BERT, encoder-decoder, GPT classifier) for an empty
    batch or sequence: it is refused with a ValueError. Nothing useful comes out of one (no position
    to predict from, no last position to classify), and a clear refusal beats NumPy's reshape error
    from deep inside attention.
    """
    ids = check_token_ids(ids, vocab_size, where)
    if ids.ndim != 2:
        raise ValueError(f"{where} expected {what} (B, T), got shape {ids.shape}")
    if 0 in ids.shape:
        raise ValueError(f"{where} expected {what} (B, T) with B >= 1 and T >= 1 (an empty batch or sequence "
                         f"is refused), got shape {ids.shape}")
    return ids


class Embedding(Module):
    """out[..., :] = weight[ids[...], :].

    Args:
        vocab_size: V, the number of rows.
        d: C, the embedding width.
        dtype: float64 (default) or float32.
        rng: seed or Generator for the initial weights N(0, init_std^2).
        init_std: standard deviation of the initial table (0.02, as GPT-2).
    Parameters:
        weight (V, C).
    """

    def __init__(self, vocab_size, d, dtype=np.float64, rng=None, init_std=0.02):
        dtype = check_float_dtype(dtype, f"Embedding({vocab_size}, {d})")
        rng = as_generator(rng)
        self.vocab_size, self.d = vocab_size, d
        self.weight = Parameter((rng.standard_normal((vocab_size, d)) * init_std).astype(dtype), embedding=True)

    def forward(self, ids):
        """ids int (B, T) (any shape) -> out (B, T, C)."""
        self.ids = check_token_ids(ids, self.vocab_size, repr(self))
        return self.weight.data[self.ids]

    def backward(self, dout):
        """The table's gradient, added to `weight.grad`.

        Derivation:
            dweight[v] += sum of dout[b, t] over all (b, t) with ids[b, t] == v.

        Args:
            dout: (B, T, C).
        Returns:
            None: token ids are integers and have no gradient.
        """
        ### BEGIN SOLUTION embedding.backward
        ids = self.ids.reshape(-1)                                          # (N,)
        dout2d = dout.reshape(-1, self.d)                                   # (N, C)
        np.add.at(self.weight.grad, ids, dout2d)    # forward was out = weight[ids]: a repeated id adds twice
        ### END SOLUTION
        return None

    def __repr__(self):
        return f"Embedding({self.vocab_size}, {self.d})"
