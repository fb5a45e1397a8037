"""RelativeValueAttention: Shaw et al.'s relative vectors on keys and values, against their equations by loops."""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer.variants.relative_position import RelativePositionAttention
from minitransformer.variants.relative_values import RelativeValueAttention


@pytest.mark.parametrize("case", catalogue_cases("RelativeValueAttention"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


def _shaw_by_loops(q, k, v, table_k, table_v, max_distance, causal):
    """Shaw et al. (2018) eqs. (2)-(4) one query and one key at a time."""
    T, hs = q.shape
    out = np.zeros((T, v.shape[1]))
    for i in range(T):
        keys = range(i + 1) if causal else range(T)
        rows = [min(max(j - i, -max_distance), max_distance) + max_distance for j in keys]
        scores = np.array([q[i] @ (k[j] + table_k[row]) / np.sqrt(hs) for j, row in zip(keys, rows)])
        weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()
        out[i] = sum(w * (v[j] + table_v[row]) for w, j, row in zip(weights, keys, rows))
    return out


@pytest.mark.parametrize("causal", [True, False])
def test_forward_is_shaws_equations(causal):
    rng = np.random.default_rng(0)
    layer = RelativeValueAttention(3, 2, value_size=4, causal=causal, rng=1)
    q, k, v = rng.standard_normal((6, 3)), rng.standard_normal((6, 3)), rng.standard_normal((6, 4))
    expected = _shaw_by_loops(q, k, v, layer.table.data, layer.table_v.data, 2, causal)
    np.testing.assert_allclose(layer(q, k, v), expected, atol=1e-12)


def test_without_value_vectors_it_is_the_key_side_layer():
    rng = np.random.default_rng(1)
    layer = RelativeValueAttention(3, 2, rng=2)
    layer.table_v.data[...] = 0.0
    key_side = RelativePositionAttention(3, 2, rng=0)
    key_side.table.data[...] = layer.table.data
    q, k, v = (rng.standard_normal((2, 5, 3)) for _ in range(3))
    np.testing.assert_allclose(layer(q, k, v), key_side(q, k, v), atol=1e-14)
    dout = rng.standard_normal((2, 5, 3))
    gradients = layer.backward(dout)
    for mine, theirs in zip(gradients, key_side.backward(dout)):
        np.testing.assert_allclose(mine, theirs, atol=1e-14)
    for again, first in zip(layer.backward(dout), gradients):                 # backward leaves forward's caches as they were
        np.testing.assert_array_equal(again, first)


def test_both_tables_are_drawn_from_rng_key_table_first_each_scaled_by_its_width():
    """By hand: a^K ~ N(0, 1/hs) then a^V ~ N(0, 1/dv), (2K + 1) rows each, from one generator in that order."""
    layer = RelativeValueAttention(4, 3, value_size=9, rng=5)
    rng = np.random.default_rng(5)
    np.testing.assert_array_equal(layer.table.data, rng.standard_normal((7, 4)) * 4 ** -0.5)
    np.testing.assert_array_equal(layer.table_v.data, rng.standard_normal((7, 9)) * 9 ** -0.5)
    wide = RelativeValueAttention(4, 50, value_size=64, rng=0).table_v.data        # 101 * 64 draws
    assert abs(wide.std() - 64 ** -0.5) < 0.006                                     # 1/8, standard error 0.0011


def test_bad_input_is_a_clear_error():
    layer = RelativeValueAttention(3, 2, value_size=4)
    with pytest.raises(ValueError, match=r"RelativeValueAttention\(head_size=3, value_size=4, max_distance=2\) "
                                         r"expected v \(..., T, 4\), got \(5, 3\)"):
        layer(np.zeros((5, 3)), np.zeros((5, 3)), np.zeros((5, 3)))
    with pytest.raises(RuntimeError, match="before forward"):
        RelativeValueAttention(3, 2).backward(np.zeros((5, 3)))
