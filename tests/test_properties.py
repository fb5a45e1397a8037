"""Rules that hold for every shape, checked by hypothesis over random shapes and values."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import GPT, LayerNorm, MultiHeadAttention, ScaledDotProductAttention, Softmax

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)
seeds = st.integers(0, 2**32 - 1)


@given(shapes, seeds, st.floats(0.1, 50))
def test_softmax_rows_are_distributions(shape, seed, spread):
    x = np.random.default_rng(seed).standard_normal(shape) * spread
    y = Softmax().forward(x)
    assert np.all(y >= 0)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-12)


@given(shapes, seeds)
def test_softmax_is_shift_invariant(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    np.testing.assert_allclose(Softmax().forward(x), Softmax().forward(x + 123.0), atol=1e-12)


@given(shapes, seeds, st.floats(0.01, 100))
def test_layernorm_output_has_zero_mean_and_unit_variance_before_the_affine(shape, seed, scale):
    d = shape[-1] + 1                                    # at least two features, so the variance is not 0
    x = np.random.default_rng(seed).standard_normal((*shape[:-1], d)) * scale + 3.0
    layer = LayerNorm(d, eps=0.0)
    layer.gamma.data[...] = 2.0
    layer.beta.data[...] = -1.0
    y = layer.forward(x)
    np.testing.assert_allclose(layer.xhat.mean(axis=-1), 0.0, atol=1e-9)
    np.testing.assert_allclose(layer.xhat.var(axis=-1), 1.0, rtol=1e-9)
    np.testing.assert_allclose(y, 2.0 * layer.xhat - 1.0)


@given(st.integers(1, 3), st.integers(2, 7), st.integers(1, 4), seeds, st.data())
def test_causal_attention_ignores_the_future(B, T, d, seed, data):
    """Changing keys/values at positions > t changes nothing at t, and sends no gradient there."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, T, d)) for _ in range(3))
    t = data.draw(st.integers(0, T - 2))
    attention = ScaledDotProductAttention(causal=True)
    before = attention.forward(q, k, v)
    k2, v2 = k.copy(), v.copy()
    k2[:, t + 1:] += rng.standard_normal(k2[:, t + 1:].shape) * 10
    v2[:, t + 1:] += rng.standard_normal(v2[:, t + 1:].shape) * 10
    after = attention.forward(q, k2, v2)
    np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], atol=1e-12)
    dout = np.zeros((B, T, d))
    dout[:, t] = 1.0
    _, dk, dv = attention.backward(dout)
    assert not dk[:, t + 1:].any() and not dv[:, t + 1:].any()


@given(st.integers(2, 6), seeds)
def test_causal_multihead_and_gpt_ignore_future_tokens(T, seed):
    rng = np.random.default_rng(seed)
    layer = MultiHeadAttention(8, 2, causal=True, rng=seed)
    x = rng.standard_normal((2, T, 8))
    x2 = x.copy()
    x2[:, -1] += 5.0
    np.testing.assert_allclose(layer.forward(x)[:, :-1], layer.forward(x2)[:, :-1], atol=1e-12)
    model = GPT(vocab_size=9, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6, rng=seed)
    ids = rng.integers(0, 9, size=(1, T))
    ids2 = ids.copy()
    ids2[0, -1] = (ids[0, -1] + 1) % 9
    np.testing.assert_allclose(model.forward(ids)[:, :-1], model.forward(ids2)[:, :-1], atol=1e-12)
