"""Sparse Transformer and Longformer masks: their defining sets, and two heads reaching everything."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import ScaledDotProductAttention, causal_mask, fixed_masks, longformer_mask, strided_masks
from minitransformer.variants.sliding_window import band_mask


def _reach(first, second):
    """Positions reachable by attending with `second` after `first` (boolean matrix product)."""
    return (first.astype(int) @ second.astype(int)) > 0


def test_strided_pattern_on_a_small_example():
    local, strided = strided_masks(6, 3)
    assert set(np.flatnonzero(local[5])) == {3, 4, 5}
    assert set(np.flatnonzero(strided[5])) == {2, 5}


def test_fixed_pattern_on_a_small_example():
    block, summary = fixed_masks(8, 4, summary=1)
    assert set(np.flatnonzero(block[6])) == {4, 5, 6}
    assert set(np.flatnonzero(summary[6])) == {3}
    assert set(np.flatnonzero(summary[7])) == {3, 7}


@given(T=st.integers(1, 24), stride=st.integers(1, 8))
def test_two_strided_heads_connect_every_earlier_position(T, stride):
    local, strided = strided_masks(T, stride)
    assert not np.any(local & ~causal_mask(T, T)) and not np.any(strided & ~causal_mask(T, T))
    np.testing.assert_array_equal(_reach(local, strided), causal_mask(T, T))


@given(T=st.integers(1, 24), block=st.integers(1, 6), data=st.data())
def test_two_fixed_heads_connect_every_earlier_position(T, block, data):
    summary_len = data.draw(st.integers(1, block))
    same_block, summary = fixed_masks(T, block, summary_len)
    np.testing.assert_array_equal(same_block | _reach(summary, same_block), causal_mask(T, T))


def test_longformer_window_and_global_tokens():
    mask = longformer_mask(8, 4, global_positions=[0])
    assert mask[0].all() and mask[:, 0].all()
    assert set(np.flatnonzero(mask[5])) == {0, 3, 4, 5, 6, 7}
    np.testing.assert_array_equal(mask, mask.T)


def test_longformer_dilated_window_by_hand_and_equal_to_the_band_without_dilation():
    assert set(np.flatnonzero(longformer_mask(9, 4, dilation=2)[4])) == {0, 2, 4, 6, 8}
    assert set(np.flatnonzero(longformer_mask(9, 4, dilation=3)[1])) == {1, 4, 7}
    assert set(np.flatnonzero(longformer_mask(9, 3, dilation=2)[4])) == {2, 4, 6}    # odd w: w // 2 = 1 each side
    np.testing.assert_array_equal(longformer_mask(7, 4, dilation=1), band_mask(7, 7, 3, causal=False))


@pytest.mark.parametrize("layers, window, dilation", [(1, 4, 2), (3, 4, 3), (2, 6, 2)])
def test_stacked_dilated_windows_reach_layers_times_dilation_times_window(layers, window, dilation):
    """Beltagy et al. §3.1: l layers of a dilated window of w positions reach l * d * w positions in all."""
    T = 2 * layers * window * dilation + 3
    mask = longformer_mask(T, window, dilation=dilation).astype(int)
    reach = np.linalg.matrix_power(mask, layers) > 0                    # connected through `layers` hops
    middle = T // 2
    offsets = np.flatnonzero(reach[middle]) - middle
    assert offsets.max() - offsets.min() == layers * dilation * window
    assert np.all(offsets % dilation == 0)                              # one dilated head alone skips the rest


def test_two_heads_with_different_patterns_in_one_attention_call():
    local, strided = strided_masks(6, 2)
    q = np.random.default_rng(0).standard_normal((1, 2, 6, 3))
    attention = ScaledDotProductAttention()
    attention(q, q, q, mask=np.stack([local, strided]))
    assert np.all(attention.alpha[0, 0][~local] == 0) and np.all(attention.alpha[0, 1][~strided] == 0)
    np.testing.assert_allclose(attention.alpha.sum(axis=-1), 1.0)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="stride >= 1"):
        strided_masks(4, 0)
    with pytest.raises(ValueError, match="1 <= summary <= block"):
        fixed_masks(4, 2, summary=3)
    with pytest.raises(ValueError, match=r"global positions in \[0, 4\)"):
        longformer_mask(4, 2, global_positions=[4])
    with pytest.raises(ValueError, match="longformer_mask expected dilation an integer >= 1, got 0"):
        longformer_mask(4, 2, dilation=0)
