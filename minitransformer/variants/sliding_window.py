"""Sliding-window attention: each query sees only its last w keys (Longformer, Beltagy et al. 2020;
survey note §9.3; Child et al. 2019's local pattern, §9.2).

Two ways to compute the same thing:

* dense: ordinary attention with `band_mask(T, T, w)`, which still builds the
  full (T, T) score matrix and throws most of it away, cost O(T^2 hs);
* banded (`BandedAttention`): gather, for every query t, the w keys
  t - w + 1 .. t into a (T, w, hs) block and score only those, cost
  O(T w hs). The scores are a (T, w) array whose column o holds key
  t - (w - 1) + o; slots before the start of the sequence are masked.
  Scoring is scaled dot-product attention, called (`layers/attention.py`)
  with each query its own batch entry of length 1 and its w keys.

`tests/test_sliding_window.py` proves the two equal on every allowed position,
forward and backward. The banded form is causal only (the decoder case);
`band_mask` also gives the symmetric window of an encoder.

Left out: dilated windows, and Longformer's global tokens in the banded form
(both are in `sparse_masks.longformer_mask`, for the dense form).
"""

import numpy as np

from ..core.module import Module
from ..layers.attention import ScaledDotProductAttention, band_mask  # noqa: F401  (band_mask exported here too)


class BandedAttention(Module):
    """Causal sliding-window attention computed on the band only.

    Args:
        window: w >= 1, the number of keys each query sees (itself included).
        scale: multiplies the scores; None means 1/sqrt(hs).
    Attributes after forward:
        alpha: (..., T, w) weights; alpha[..., t, o] belongs to key t - (w - 1) + o.
    """

    def __init__(self, window, scale=None):
        if window < 1:
            raise ValueError(f"BandedAttention expected window >= 1, got {window}")
        self.window, self.scale = window, scale

    def forward(self, q, k, v):
        """q, k, v: (..., T, hs) each (self-attention, one length) -> out (..., T, hs)."""
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        if q.ndim < 2 or q.shape != k.shape or k.shape[:-1] != v.shape[:-1]:
            raise ValueError(f"{self!r} expected q, k (..., T, hs) and v (..., T, dv) of one length T, "
                             f"got {q.shape}, {k.shape}, {v.shape}")
        T, w = q.shape[-2], self.window
        ### BEGIN SOLUTION banded.forward
        key_index = np.arange(T)[:, None] + np.arange(-(w - 1), 1)[None, :]    # (T, w) key of slot (t, o)
        self.valid = key_index >= 0                                             # (T, w)
        self.key_index = np.where(self.valid, key_index, 0)
        k_band = k[..., self.key_index, :]                                      # 1. (..., T, w, hs) gather
        v_band = v[..., self.key_index, :]                                      # 1. (..., T, w, dv)
        ### END SOLUTION
        self.attention, self.q, self.T = ScaledDotProductAttention(scale=self.scale), q, T
        out = self.attention.forward(q[..., :, None, :], k_band, v_band,       # 2-5. (..., T, 1, dv), one query each
                                     mask=self.valid[:, None, :])               # 3. slots before the start
        return out[..., 0, :]                                                   # (..., T, dv)

    @property
    def alpha(self):
        """(..., T, w) the weights of the last forward; alpha[..., t, o] belongs to key t - (w - 1) + o."""
        self._require("attention")
        return self.attention.alpha[..., 0, :]

    def backward(self, dout):
        """The gradients at the queries, keys and values.

        Derivation:
            Reverse steps 5 to 1: attention's backward on the band, then the gather undone.

                5-2. attention of query t on its w keys  ->  dq_t, dk_band_t, dv_band_t (`ScaledDotProductAttention`)
                1.   k_band_to = k[t - (w-1) + o]        ->  dk[j] = sum of dk_band over every slot that copied key j

        Args:
            dout: (..., T, dv).
        Returns:
            (dq, dk, dv).
        """
        dq, dk_band, dv_band = self.attention.backward(np.asarray(dout)[..., None, :])   # 5-2.
        return dq[..., 0, :], self._scatter(dk_band), self._scatter(dv_band)               # 1.

    def _scatter(self, dband):
        """The backward of the gather of step 1: dband (..., T, w, d) -> (..., T, d).

        Derivation:
            Slot (t, o) sends its row back to key t - (w - 1) + o, added: one slice per offset o.
        """
        w, T = self.window, self.T
        ### BEGIN SOLUTION banded.backward
        dfull = np.zeros((*dband.shape[:-3], T, dband.shape[-1]), dtype=dband.dtype)   # (..., T, d)
        for o in range(max(w - T, 0), w):                   # one whole (..., T, d) slice per offset
            shift = w - 1 - o                               # slot (t, o) holds key t - shift, shift < T
            dfull[..., : T - shift, :] += dband[..., shift:, o, :]
        return dfull
        ### END SOLUTION

    def __repr__(self):
        return f"BandedAttention(window={self.window})"
