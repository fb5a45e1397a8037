"""Sums written as matrix-vector products, for speed (style rule 12).

`np.sum` along a short last axis (attention rows of T = 64, LayerNorm rows of
C = 128) or down the rows of an (N, C) gradient is a reduction NumPy runs
without BLAS; the same sum as a product with a vector of ones runs in BLAS,
faster on these shapes (benchmarks/README.md, "What the code's docstrings point to"). The plain forms are in each
docstring; tests/test_fast_forms.py proves both agree to rounding.
"""

from functools import lru_cache

import numpy as np


def sum_last_axis(x):
    """np.sum(x, axis=-1, keepdims=True) for a float array (..., n) -> (..., 1)."""
    if x.dtype not in (np.float32, np.float64):
        return np.sum(x, axis=-1, keepdims=True)
    return (x @ ones(x.shape[-1], x.dtype))[..., None]


def sum_rows(x2d):
    """x2d.sum(axis=0) for a float (N, C) array -> (C,): what a bias gradient needs."""
    if x2d.dtype not in (np.float32, np.float64):
        return x2d.sum(axis=0)
    return ones(x2d.shape[0], x2d.dtype) @ x2d


@lru_cache(maxsize=64)
def ones(n, dtype):
    """A read-only vector of n ones of `dtype`, made once per (n, dtype): a step sums rows about 50 times."""
    vector = np.ones(n, dtype=dtype)
    vector.flags.writeable = False
    return vector
