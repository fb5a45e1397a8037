"""A trainable array and the gradient that backward passes add into.

Every layer keeps its weights as `Parameter` objects. A backward pass never
*assigns* a gradient, it *adds* one (`p.grad += ...`). That single rule is what
makes weight tying and residual branches work without special code: a
parameter used twice simply receives two contributions. `zero_grad()` clears
the sum before the next step.
"""

import numpy as np


class Parameter:
    """A trainable array `data` with a gradient `grad` of the same shape and dtype.

    Args:
        data: array of any shape; it is stored as given (no copy when it is
            already an ndarray of a floating dtype).
        decay: whether weight decay applies (`training.optim.parameter_groups` reads it).
            Default: True for matrices (2 or more axes), False for vectors such as
            biases and LayerNorm's gamma and beta, whose decay towards zero has no
            regularising meaning.
        embedding: True for a lookup table (token or position embedding); such a
            table is decayed only when the optimizer is asked to (`decay_embeddings`).
    """

    def __init__(self, data, decay=None, embedding=False):
        data = np.asarray(data)
        if not np.issubdtype(data.dtype, np.floating):
            raise TypeError(f"Parameter expected a floating-point array, got dtype {data.dtype}")
        self.data = data
        self.grad = np.zeros_like(data)
        self.decay = data.ndim >= 2 if decay is None else bool(decay)
        self.embedding = bool(embedding)

    @property
    def shape(self):
        return self.data.shape

    @property
    def dtype(self):
        return self.data.dtype

    @property
    def size(self):
        return self.data.size

    def zero_grad(self):
        """Set the accumulated gradient back to zero (in place, keeping the array)."""
        self.grad[...] = 0

    def __repr__(self):
        return f"Parameter(shape={self.data.shape}, dtype={self.data.dtype})"
