"""Position information added to the token embeddings (lecture notes 2025 §1.4).

Two forms, both `x + P[:T]`:

* `SinusoidalPositionalEncoding`, the fixed table of Vaswani et al. (2017):
      P[n, 2k]   = sin(n * w_k)
      P[n, 2k+1] = cos(n * w_k),      w_k = 1 / 10000^(2k / d)
  The lecture notes (both versions, §1.4) print it as n * sin(w_k) and put the
  cosine at i = 2k + 2. As printed the entries grow without bound with n and
  lose the rotation property; the errata notebook shows both side by side.
  Because each pair (sin(n w), cos(n w)) is a point on a circle, moving k
  positions is a fixed rotation, so P[n + k] is a linear function of P[n].
  The formula has no length limit: with `extend=True` (the GPT's choice) the
  rows past the stored max_len are computed on demand, by the same formula.
* `LearnedPositionalEmbedding`, a trained (max_len, C) table (GPT-2).

Rotary and linear-bias positions act inside attention instead and are left out here.
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.module import Module
from ..core.parameter import Parameter
from ..core.random import as_generator


def sinusoidal_table(max_len, d, start=0):
    """The sinusoidal rows of positions start .. max_len - 1 (all of them from 0 by default); d must be even.

    Returns:
        P: float64 (max_len - start, d), P[n - start, 2k] = sin(n w_k), P[n - start, 2k+1] = cos(n w_k).
    """
    if d % 2:
        raise ValueError(f"SinusoidalPositionalEncoding expected an even d, got d={d}")
    positions = np.arange(start, max_len)[:, None]             # (max_len - start, 1)
    ### BEGIN SOLUTION positional.forward
    frequencies = 1.0 / 10000 ** (np.arange(0, d, 2) / d)      # (d/2,) w_k = 10000^(-2k/d)
    table = np.empty((len(positions), d))
    table[:, 0::2] = np.sin(positions * frequencies)
    table[:, 1::2] = np.cos(positions * frequencies)
    ### END SOLUTION
    return table


def _check_positions(module, x, start, max_len, d):
    """Raise unless x is (..., T, d) with 0 <= start and start + T <= max_len (max_len None: no limit)."""
    module._check_features(x, d)
    if x.ndim < 2:
        raise ValueError(f"{module!r} expected input (..., T, {d}), got {x.shape}")
    if start < 0:
        raise ValueError(f"{module!r} expected start >= 0, got {start}")
    if max_len is not None and start + x.shape[-2] > max_len:
        raise ValueError(f"{module!r} expected a sequence of at most max_len={max_len} positions, "
                         f"got T={x.shape[-2]}" + (f" after start={start}" if start else ""))


class SinusoidalPositionalEncoding(Module):
    """y = x + P[:T] with the fixed sinusoidal table (no parameters).

    Args:
        d: C, the model width (even).
        max_len: the rows of the stored table: the longest sequence accepted, unless `extend`.
        dtype: dtype of the table.
        extend: accept any length; rows past max_len are computed when asked for (the same formula,
            so they equal the rows a longer table would hold).
    """

    def __init__(self, d, max_len, dtype=np.float64, extend=False):
        self.d, self.max_len, self.extend = d, max_len, extend
        self.table = sinusoidal_table(max_len, d).astype(check_float_dtype(dtype, repr(self)))

    def forward(self, x, start=0):
        """x (..., T, C) -> x + P[start:start + T] (..., T, C); `start` > 0 when decoding with a cache."""
        x = np.asarray(x)
        _check_positions(self, x, start, None if self.extend else self.max_len, self.d)
        stop = start + x.shape[-2]
        if stop <= self.max_len:
            return x + self.table[start:stop]
        return x + sinusoidal_table(stop, self.d, start).astype(self.table.dtype)    # past the table: on demand

    def backward(self, dout):
        """The gradient at x. dout (..., T, C) -> dx (..., T, C).

        Derivation:
            The table is constant, so dx = dout.
        """
        return dout

    def __repr__(self):
        extend = ", extend=True" if self.extend else ""
        return f"SinusoidalPositionalEncoding(d={self.d}, max_len={self.max_len}{extend})"


class LearnedPositionalEmbedding(Module):
    """y = x + P[:T] with a learned table P.

    Args:
        max_len: rows of the table, the longest sequence accepted.
        d: C, the model width.
        dtype, rng, init_std: as for `Embedding`.
    Parameters:
        weight (max_len, C).
    """

    def __init__(self, max_len, d, dtype=np.float64, rng=None, init_std=0.02):
        dtype = check_float_dtype(dtype, f"LearnedPositionalEmbedding({max_len}, {d})")
        self.max_len, self.d = max_len, d
        self.weight = Parameter((as_generator(rng).standard_normal((max_len, d)) * init_std).astype(dtype),
                                embedding=True)

    def forward(self, x, start=0):
        """x (..., T, C) -> x + P[start:start + T] (..., T, C); `start` > 0 when decoding with a cache."""
        x = np.asarray(x)
        _check_positions(self, x, start, self.max_len, self.d)
        self.shape, self.start = x.shape, start
        return x + self.weight.data[start: start + x.shape[-2]]

    def backward(self, dout):
        """The gradient at x, and the table's gradient added to `weight.grad`. dout (..., T, C) -> dx (..., T, C).

        Derivation:
            dx = dout; dP[start + t] += sum over the batch axes of dout[..., t, :].
        """
        ### BEGIN SOLUTION positional.backward
        T = self.shape[-2]
        self.weight.grad[self.start:self.start + T] += dout.reshape(-1, T, self.d).sum(axis=0)
        ### END SOLUTION
        return dout

    def __repr__(self):
        return f"LearnedPositionalEmbedding({self.max_len}, {self.d})"
