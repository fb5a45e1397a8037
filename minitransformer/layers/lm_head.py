"""The output projection that shares the token-embedding matrix (lecture notes 2025 §1.5).

With weight tying (Press & Wolf 2017) the logits are h E^T, where E (V, C) is
the token embedding table itself. The same `Parameter` object serves both
layers.

Derivation:
    The embedding's gradient receives two contributions, one from the lookup at
    the bottom of the model and one from here, simply by `+=`.
"""

import numpy as np

from ..core.module import Module
from .embedding import Embedding


class TiedLMHead(Module):
    """logits = h @ E^T, E being `embedding.weight` (shared, not copied).

    Args:
        embedding: the `Embedding` whose table is reused.
    """

    def __init__(self, embedding):
        if not isinstance(embedding, Embedding):
            raise TypeError(f"TiedLMHead expected an Embedding, got {type(embedding).__name__}")
        self.weight = embedding.weight                               # the same Parameter (V, C)
        self.vocab_size, self.d = embedding.vocab_size, embedding.d

    def forward(self, h):
        """h (..., C) -> logits (..., V)."""
        h = np.asarray(h)
        self._check_features(h, self.d)
        self.h = h
        logits = h.reshape(-1, self.d) @ self.weight.data.T          # (N, V)
        return logits.reshape(*h.shape[:-1], self.vocab_size)

    def backward(self, dlogits):
        """The gradient at h, and the shared table's gradient added to its `.grad`.

        Derivation:
            forward was logits = h E^T  ->  dh = dlogits E,  dE += dlogits^T h.

        Args:
            dlogits: (..., V).
        Returns:
            dh: (..., C).
        """
        ### BEGIN SOLUTION lm_head.backward
        dlogits2d = dlogits.reshape(-1, self.vocab_size)             # (N, V)
        self.weight.grad += dlogits2d.T @ self.h.reshape(-1, self.d)
        return (dlogits2d @ self.weight.data).reshape(self.h.shape)
        ### END SOLUTION

    def __repr__(self):
        return f"TiedLMHead(C={self.d} -> V={self.vocab_size})"
