"""Relative positions: the direct O(T^2 hs) form and Huang et al.'s skewed form are the same layer,
and the survey note's listing of the skew (Algorithm 1, §11) is not."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import RelativePositionAttention, causal_mask, skew, skew_backward


def test_skew_moves_offset_columns_to_key_positions():
    """Column r of the input holds offset r - (T - 1); after the skew, entry (i, j <= i) holds offset j - i."""
    T = 5
    offsets_by_column = np.tile(np.arange(T) - (T - 1), (T, 1)).astype(float)   # (T, T)
    skewed = skew(offsets_by_column)
    lower = causal_mask(T, T)
    expected = np.arange(T)[None, :] - np.arange(T)[:, None]
    np.testing.assert_array_equal(skewed[lower], expected[lower])


@given(T=st.integers(1, 7), seed=st.integers(0, 1000))
def test_skew_backward_is_the_adjoint(T, seed):
    rng = np.random.default_rng(seed)
    a, d = rng.standard_normal((2, 3, T, T))
    assert np.isclose(np.sum(skew(a) * d), np.sum(a * skew_backward(d)))


@given(T=st.integers(1, 9), head_size=st.integers(1, 4), max_distance=st.integers(1, 10),
       batch=st.sampled_from([(2,), (2, 3), ()]), seed=st.integers(0, 1000))
def test_direct_and_skewed_forms_are_equal(T, head_size, max_distance, batch, seed):
    rng = np.random.default_rng(seed)
    direct = RelativePositionAttention(head_size, max_distance, rng=seed)
    skewed = RelativePositionAttention(head_size, max_distance, skewed=True, rng=seed)
    q, k, v = rng.standard_normal((3, *batch, T, head_size))
    np.testing.assert_allclose(skewed(q, k, v), direct(q, k, v), atol=1e-12)
    dout = rng.standard_normal((*batch, T, head_size))
    for d_skewed, d_direct in zip(skewed.backward(dout), direct.backward(dout)):
        np.testing.assert_allclose(d_skewed, d_direct, atol=1e-12)
    np.testing.assert_allclose(skewed.table.grad, direct.table.grad, atol=1e-12)


@pytest.mark.parametrize("skewed", [False, True])
def test_weights_depend_on_offsets_not_on_absolute_positions(skewed):
    """The same query everywhere and zero keys: alpha[i, i - d] / alpha[i, i] is the same for every i,
    and offsets beyond the clipping distance K = 2 share one vector."""
    T = 6
    layer = RelativePositionAttention(2, 2, skewed=skewed, rng=0)
    q = np.tile(np.random.default_rng(0).standard_normal(2), (T, 1))
    layer(q, np.zeros((T, 2)), np.zeros((T, 2)))
    alpha = layer.alpha
    for d in range(1, T):
        ratios = [alpha[i, i - d] / alpha[i, i] for i in range(d, T)]
        np.testing.assert_allclose(ratios, ratios[0])
    np.testing.assert_allclose(alpha[5, 0], alpha[5, 3])          # offsets -5 and -2 clip to -2


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="skewed form is defined for causal attention only"):
        RelativePositionAttention(4, 2, causal=False, skewed=True)
    with pytest.raises(ValueError, match=r"expected q, k \(\.\.\., T, 4\)"):
        RelativePositionAttention(4, 2)(np.ones((3, 5)), np.ones((3, 5)), np.ones((3, 5)))


# ---------------------------------------------------------------- errata: the survey note's Algorithm 1

def survey_listing(x, e_rel):
    """The survey note's Algorithm 1 (§11), step by step, 1-based indices translated to 0-based."""
    L = x.shape[0]
    a = x @ e_rel.T                                             # 1. A = X E^rT
    m = np.tril(np.ones((L, L)))                                # 2. m_ij = 1 where i >= j
    a = a * m                                                   # 3. A = A (.) M
    b = np.concatenate([np.zeros((L, 1)), a], axis=1)           # 4. B: zero first column, then A
    flat = b.T.reshape(-1, order="F")                           # 5. V = vec(B^T), vec stacks columns
    c = flat.reshape(L + 1, L)                                  # 6. c_ij = V_((i-1)L + j), (L+1) x L
    return c[1:]                                                # 7. d_ij = c_(i+1, j)


def test_survey_listing_masks_away_the_entries_the_skew_needs():
    """Steps 2-3 keep A[i, r] only for r <= i, but after the skew D[i, j] reads A[i, L - 1 - i + j]:
    for every row but the last, offsets near 0 are zeroed. Without those steps the listing is right."""
    rng = np.random.default_rng(0)
    L, d = 5, 3
    x = rng.standard_normal((L, d))
    e_rel = rng.standard_normal((L, d))                         # row r: offset r - (L - 1)
    lower = causal_mask(L, L)
    rows = np.arange(L)[None, :] - np.arange(L)[:, None] + (L - 1)          # column of A for offset j - i
    direct = np.einsum("id,ijd->ij", x, e_rel[np.clip(rows, 0, L - 1)])     # q_i . e_(j-i)
    listing = survey_listing(x, e_rel)
    assert not np.allclose(listing[lower], direct[lower])
    assert listing[0, 0] == 0.0 and direct[0, 0] != 0.0        # query 0 loses its own offset 0
    np.testing.assert_allclose(listing[-1], direct[-1])         # only the last row survives intact
    np.testing.assert_allclose(skew(x @ e_rel.T)[lower], direct[lower])     # no mask: correct


@pytest.mark.parametrize("skewed", [False, True], ids=["direct", "skewed"])
def test_relative_scores_by_hand(skewed):
    """Shaw et al. (2018) eq. 5 (Huang et al. 2018 for the skew): score(i, j) = (q_i.k_j + q_i.a_(j-i)) / sqrt(hs).
    hs = 4, so the scale is 1/2. Query 1 against key 0 (offset -1): (1 + 2) / 2 = 1.5; against key 1
    (offset 0): (1 + 1) / 2 = 1.0; with v_0 = (1, 0), v_1 = (0, 1) the output is softmax(1.5, 1.0)."""
    import math

    layer = RelativePositionAttention(4, max_distance=1, skewed=skewed, rng=0)
    layer.table.data[...] = [[0, 0, 2, 0], [1, 0, 0, 0], [5, 5, 5, 5]]       # rows: offsets -1, 0, +1
    q = np.array([[0.0, 0, 0, 0], [1, 0, 1, 0]])
    k = np.array([[1.0, 1, 0, 0], [0, 1, 1, 0]])
    v = np.eye(2)
    out = layer.forward(q, k, v)
    first = math.exp(0.5) / (1 + math.exp(0.5))
    np.testing.assert_allclose(out, [[1.0, 0.0], [first, 1 - first]], rtol=1e-14)
