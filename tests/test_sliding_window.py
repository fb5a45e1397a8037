"""Banded sliding-window attention equals dense attention with a band mask, at T*w cost."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import BandedAttention, ScaledDotProductAttention, band_mask


@given(T=st.integers(1, 10), window=st.integers(1, 12), head_size=st.integers(1, 4),
       batch=st.sampled_from([(), (2,), (2, 3)]), seed=st.integers(0, 1000))
def test_banded_equals_dense_masked_attention(T, window, head_size, batch, seed):
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((3, *batch, T, head_size))
    banded, dense = BandedAttention(window), ScaledDotProductAttention(causal=True)
    np.testing.assert_allclose(banded(q, k, v), dense(q, k, v, mask=band_mask(T, T, window)), atol=1e-12)
    dout = rng.standard_normal((*batch, T, head_size))
    for d_banded, d_dense in zip(banded.backward(dout), dense.backward(dout)):
        np.testing.assert_allclose(d_banded, d_dense, atol=1e-12)
    # every allowed weight agrees: alpha[t, o] is dense alpha[t, t - (w - 1) + o]
    rows, offsets = np.nonzero(banded.valid)
    keys = rows - (window - 1) + offsets
    np.testing.assert_allclose(banded.alpha[..., rows, offsets], dense.alpha[..., rows, keys], atol=1e-12)


def test_banded_scores_have_t_by_w_entries():
    banded = BandedAttention(3)
    q = np.ones((2, 50, 4))
    banded(q, q, q)
    assert banded.alpha.shape == (2, 50, 3)                     # T * w, not T * T


def test_band_mask_shapes_and_alignment():
    np.testing.assert_array_equal(band_mask(3, 3, 2), [[1, 0, 0], [1, 1, 0], [0, 1, 1]])
    np.testing.assert_array_equal(band_mask(3, 3, 2, causal=False), [[1, 1, 0], [1, 1, 1], [0, 1, 1]])
    np.testing.assert_array_equal(band_mask(1, 4, 2), [[0, 0, 1, 1]])       # the query sits at position 3


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="window >= 1, got 0"):
        BandedAttention(0)
    with pytest.raises(ValueError, match=r"BandedAttention\(window=2\) expected q, k \(\.\.\., T, hs\)"):
        BandedAttention(2)(np.ones((3, 4)), np.ones((5, 4)), np.ones((5, 4)))
