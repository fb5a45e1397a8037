"""Grouped-query and multi-query attention, and the option checks of MultiHeadAttention."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import ALiBi, MultiHeadAttention, RotaryEmbedding


def _randomise_biases(layer, rng):
    for name in ("b_q", "b_k", "b_v", "b_o"):
        getattr(layer, name).data[...] = rng.standard_normal(getattr(layer, name).shape)


def test_gqa_with_as_many_kv_heads_as_heads_is_standard_attention():
    standard = MultiHeadAttention(8, 4, causal=True, rng=3)
    grouped = MultiHeadAttention(8, 4, causal=True, rng=3, n_kv_heads=4)
    assert all(np.array_equal(a.data, b.data) for a, b in zip(standard.parameters(), grouped.parameters()))
    x = np.random.default_rng(0).standard_normal((2, 5, 8))
    np.testing.assert_array_equal(standard(x), grouped(x))


@given(n_kv_heads=st.sampled_from([1, 2, 3, 6]), causal=st.booleans(), seed=st.integers(0, 1000))
def test_gqa_equals_standard_attention_whose_kv_heads_are_copies(n_kv_heads, causal, seed):
    """A GQA layer is an ordinary 6-head layer whose key/value heads repeat in groups;
    its key/value gradients are the ordinary layer's gradients summed over each group."""
    rng = np.random.default_rng(seed)
    H, hs = 6, 2
    grouped = MultiHeadAttention(H * hs, H, causal=causal, rng=rng, n_kv_heads=n_kv_heads)
    _randomise_biases(grouped, rng)
    full = MultiHeadAttention(H * hs, H, causal=causal, rng=rng)
    group = H // n_kv_heads
    for name in ("w_q", "w_o", "b_q", "b_o"):
        getattr(full, name).data[...] = getattr(grouped, name).data
    for name in ("w_k", "w_v", "b_k", "b_v"):
        shared = getattr(grouped, name).data                                     # (..., Hkv*hs)
        heads = shared.reshape(*shared.shape[:-1], n_kv_heads, 1, hs)
        getattr(full, name).data[...] = np.broadcast_to(heads, (*shared.shape[:-1], n_kv_heads, group, hs)).reshape(
            *shared.shape[:-1], H * hs)
    x = rng.standard_normal((2, 4, H * hs))
    dout = rng.standard_normal((2, 4, H * hs))
    np.testing.assert_allclose(grouped(x), full(x), atol=1e-12)
    np.testing.assert_allclose(grouped.backward(dout), full.backward(dout), atol=1e-12)
    for name in ("w_k", "w_v", "b_k", "b_v"):
        grad = getattr(full, name).grad
        summed = grad.reshape(*grad.shape[:-1], n_kv_heads, group, hs).sum(axis=-2).reshape(*grad.shape[:-1], -1)
        np.testing.assert_allclose(getattr(grouped, name).grad, summed, atol=1e-12)


def test_multi_query_attention_has_one_key_and_value_head():
    layer = MultiHeadAttention(8, 4, n_kv_heads=1, rng=0)
    assert layer.w_k.shape == layer.w_v.shape == (8, 2)
    assert layer.b_k.shape == (2,)
    assert layer.num_parameters() == 2 * (8 * 8 + 8) + 2 * (8 * 2 + 2)
    assert layer(np.ones((1, 3, 8))).shape == (1, 3, 8)


def test_float32_variants_keep_float32():
    for options in (dict(n_kv_heads=2), dict(position=RotaryEmbedding(2)), dict(position=ALiBi(4), window=2)):
        layer = MultiHeadAttention(8, 4, causal=True, dtype=np.float32, rng=0, **options)
        out = layer(np.ones((2, 3, 8), dtype=np.float32))
        assert out.dtype == np.float32
        assert layer.backward(np.ones_like(out)).dtype == np.float32


@pytest.mark.parametrize("options, message", [
    (dict(n_kv_heads=3), "n_kv_heads dividing n_heads=4"),
    (dict(n_kv_heads=0), "n_kv_heads dividing"),
    (dict(window=0), "window None or >= 1"),
])
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(8, 4, **options)


def test_the_0_2_positional_option_is_gone_in_0_4():
    with pytest.raises(TypeError, match="unexpected keyword argument 'positional'"):
        MultiHeadAttention(8, 4, positional="rope")


def test_window_restricts_what_a_query_sees():
    """With window 2, changing a token 2 or more positions back leaves the output unchanged."""
    layer = MultiHeadAttention(4, 2, causal=True, window=2, position=ALiBi(2), rng=0)
    x = np.random.default_rng(1).standard_normal((1, 6, 4))
    changed = x.copy()
    changed[0, 1] += 5.0
    out, out_changed = layer(x), layer(changed)
    np.testing.assert_array_equal(out[0, 3:], out_changed[0, 3:])
    assert not np.allclose(out[0, 1:3], out_changed[0, 1:3])
