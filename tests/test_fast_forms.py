"""The fast tier's own machinery: row blocks, BLAS sums, the in-place softmax, the causal bias, memory layouts.

tests/test_fast.py proves every fast layer equal to its plain parent on the checker's cases; these tests pin
the pieces the fast forms are built from against the plain formulas.
"""

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import GPT
from minitransformer.fast import row_blocks
from minitransformer.fast.activations import FastGELU as GELU
from minitransformer.fast.attention import FastScaledDotProductAttention as ScaledDotProductAttention
from minitransformer.fast.attention import causal_bias
from minitransformer.fast.reductions import sum_last_axis, sum_rows
from minitransformer.fast.softmax import softmax, softmax_backward
from minitransformer.layers.activations import GELU_CUBIC, SQRT_2_OVER_PI
from minitransformer.layers.attention import causal_mask


def test_gelu_in_place_form_equals_the_formula():
    x = np.random.default_rng(0).standard_normal((4, 7)) * 3
    dout = np.random.default_rng(1).standard_normal((4, 7))
    layer = GELU()
    t = np.tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x ** 3))
    np.testing.assert_allclose(layer.forward(x), 0.5 * x * (1 + t), rtol=1e-14, atol=1e-15)
    du_dx = SQRT_2_OVER_PI * (1 + 3 * GELU_CUBIC * x ** 2)
    np.testing.assert_allclose(layer.backward(dout), dout * (0.5 * (1 + t) + 0.5 * x * (1 - t ** 2) * du_dx), rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_gate_as_a_sigmoid_matches_tanh_at_the_extremes_without_warnings(dtype):
    """The fast gate 1 / (1 + exp(-2u)) against the plain 0.5 (1 + tanh u): where exp(-2u) overflows (x far
    below 0) the gate must be exactly 0, as tanh's, with no overflow warning reaching the caller."""
    from minitransformer.layers.activations import GELU as PlainGELU
    x = np.array([-1e4, -100.0, -30.0, -12.0, -10.0, -3.0, -1e-3, 0.0, 1e-3, 3.0, 10.0, 100.0, 1e4], dtype)
    dout = np.linspace(-1.0, 1.0, x.size).astype(dtype)
    plain, fast = PlainGELU(), GELU()
    with np.errstate(all="raise"):                          # an overflow escaping the fast form would raise here
        y, dx = fast.forward(x), fast.backward(dout)
    with np.errstate(over="ignore"):                        # the plain form's x**3 overflows at -1e4 in float32
        y_plain, dx_plain = plain.forward(x), plain.backward(dout)
    assert y.dtype == dx.dtype == dtype
    overflowing = 4 if dtype == np.float32 else 3                # -2u beyond the dtype's range: x <= -12, x <= -30
    assert np.all(fast.gate[:overflowing] == 0) and np.all(y[:overflowing] == 0)
    tolerance = 4 * np.finfo(dtype).eps
    np.testing.assert_allclose(y, y_plain, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(dx, dx_plain, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("shape", [(3, 100, 512), (2, 1, 7), (5,), (), (4, 0)])
def test_gelu_in_row_blocks_equals_one_block_bit_for_bit(shape, monkeypatch):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    dout = rng.standard_normal(shape).astype(np.float32)
    if len(shape) == 3:                                               # the first case really is cut into blocks
        assert len(row_blocks.row_blocks(300, 512 * 4)) > 1
    results = {}
    for block_bytes in (row_blocks.BLOCK_BYTES, 1 << 40):            # many blocks, then one
        monkeypatch.setattr(row_blocks, "BLOCK_BYTES", block_bytes)
        layer = GELU()
        results[block_bytes] = (layer.forward(x), layer.backward(dout))
    (y_blocks, dx_blocks), (y_whole, dx_whole) = results.values()
    assert y_blocks.shape == dx_blocks.shape == shape and y_blocks.dtype == np.float32
    assert np.array_equal(y_blocks, y_whole) and np.array_equal(dx_blocks, dx_whole)


def test_gelu_on_a_non_contiguous_input_equals_gelu_on_its_copy():
    rng = np.random.default_rng(4)
    x, dout = rng.standard_normal((6, 5)), rng.standard_normal((5, 6))
    strided, copied = GELU(), GELU()
    np.testing.assert_array_equal(strided.forward(x.T), copied.forward(np.ascontiguousarray(x.T)))
    np.testing.assert_array_equal(strided.backward(dout.T.copy().T), copied.backward(dout))


@given(st.integers(1, 6), st.integers(0, 4))
def test_causal_bias_equals_where_with_the_mask(Tq, extra):
    Tk = Tq + extra
    scores = np.random.default_rng(Tq).standard_normal((2, Tq, Tk)).astype(np.float32)
    expected = np.where(causal_mask(Tq, Tk), scores, -np.inf)
    assert np.array_equal(scores + causal_bias(Tq, Tk, np.float32), expected)
    assert causal_bias(Tq, Tk, np.float32).dtype == np.float32


def test_softmax_backward_equals_the_plain_form():
    rng = np.random.default_rng(2)
    y = rng.dirichlet(np.ones(5), size=(3, 4))
    dy = rng.standard_normal((3, 4, 5))
    np.testing.assert_allclose(softmax_backward(y, dy), y * (dy - (dy * y).sum(-1, keepdims=True)), rtol=1e-14)


def test_a_float32_gpt_computes_in_float32_throughout():
    model = GPT(11, 16, 2, 2, 32, 8, dtype=np.float32, rng=0, kernels="fast")
    logits = model.forward(np.arange(8)[None] % 11)
    assert logits.dtype == np.float32
    assert model.blocks[0].ff.act.gate.dtype == np.float32               # NumPy 2 promotes np.float64 scalars
    model.backward(np.ones_like(logits))
    assert all(p.grad.dtype == np.float32 for p in model.parameters())


@given(st.integers(1, 5), st.integers(1, 70), st.sampled_from([np.float32, np.float64]))
def test_sums_through_blas_equal_np_sum(rows, cols, dtype):
    x = np.random.default_rng(rows * 100 + cols).standard_normal((2, rows, cols)).astype(dtype)
    tolerance = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(sum_last_axis(x), x.sum(axis=-1, keepdims=True), rtol=tolerance, atol=tolerance)
    x2d = x.reshape(-1, cols)
    np.testing.assert_allclose(sum_rows(x2d), x2d.sum(axis=0), rtol=tolerance, atol=tolerance)
    assert sum_last_axis(x).dtype == dtype and sum_rows(x2d).dtype == dtype
    assert np.array_equal(sum_rows(np.arange(6).reshape(3, 2)), [6, 9])          # integers: plain np.sum


def test_softmax_in_place_equals_the_plain_form():
    x = np.random.default_rng(3).standard_normal((3, 4, 64)).astype(np.float32) * 5
    plain = np.exp(x - x.max(-1, keepdims=True))
    plain /= plain.sum(-1, keepdims=True)
    y = softmax(x.copy())
    np.testing.assert_allclose(y, plain, rtol=1e-6, atol=1e-7)
    buffer = x.copy()
    assert softmax(buffer, out=buffer) is buffer and np.array_equal(buffer, y)


def test_attention_in_column_layout_equals_the_plain_form():
    rng = np.random.default_rng(4)
    q, k, v, dout = (rng.standard_normal((2, 3, 5, 4)) for _ in range(4))
    layer = ScaledDotProductAttention(causal=True)
    out = layer.forward(q, k, v)
    dq, dk, dv = layer.backward(dout)
    scores = np.where(causal_mask(5, 5), q @ k.swapaxes(-1, -2) / 2.0, -np.inf)      # plain: q k^T / sqrt(4)
    alpha = np.exp(scores - scores.max(-1, keepdims=True))
    alpha /= alpha.sum(-1, keepdims=True)
    dalpha = dout @ v.swapaxes(-1, -2)
    dscores = alpha * (dalpha - (dalpha * alpha).sum(-1, keepdims=True)) / 2.0
    for ours, plain in ((out, alpha @ v), (layer.alpha, alpha), (dq, dscores @ k),
                        (dk, dscores.swapaxes(-1, -2) @ q), (dv, alpha.swapaxes(-1, -2) @ dout)):
        np.testing.assert_allclose(ours, plain, rtol=1e-12, atol=1e-14)


def test_a_row_kernel_that_returns_its_answer_is_refused():
    def returns_instead_of_writing(x, y):
        return x * 2
    with pytest.raises(TypeError, match="returns_instead_of_writing must write its result"):
        row_blocks.by_row_blocks(returns_instead_of_writing, [np.ones((3, 4))])


def test_a_row_kernel_that_rebinds_its_output_name_is_refused():
    def rebinds_instead_of_writing(x, y):
        y = x * 2                                                      # noqa: F841 (the mistake under test)
    for dtype in (np.float32, np.float64):
        with pytest.raises(TypeError, match="rebinds_instead_of_writing did not write into its output"):
            row_blocks.by_row_blocks(rebinds_instead_of_writing, [np.ones((300, 512), dtype=dtype)])


@pytest.mark.parametrize("causal", [True, False])
def test_attention_on_views_of_one_projection_equals_the_plain_form(causal):
    """q from one projection, k and v from another (S != T, dk != dv), all strided views as multi-head
    attention passes them; the gradients keep their inputs' memory order, so merging heads is free."""
    rng = np.random.default_rng(5)
    B, H, T, S, dk, dv = 2, 3, 4, 6, 5, 7
    q = rng.standard_normal((B * T, H * dk)).reshape(B, T, H, dk).transpose(0, 2, 1, 3)     # (B, H, T, dk) view
    kv = rng.standard_normal((B * S, H * (dk + dv)))
    k = kv[:, :H * dk].reshape(B, S, H, dk).transpose(0, 2, 1, 3)                          # (B, H, S, dk) view
    v = kv[:, H * dk:].reshape(B, S, H, dv).transpose(0, 2, 1, 3)                          # (B, H, S, dv) view
    dout = rng.standard_normal((B, H, T, dv))
    layer = ScaledDotProductAttention(causal=causal)
    out = layer.forward(q, k, v)
    dq, dk_, dv_ = layer.backward(dout)
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(dk)
    if causal:
        scores = np.where(causal_mask(T, S), scores, -np.inf)
    alpha = np.exp(scores - scores.max(-1, keepdims=True))
    alpha /= alpha.sum(-1, keepdims=True)
    dalpha = dout @ v.swapaxes(-1, -2)
    dscores = alpha * (dalpha - (dalpha * alpha).sum(-1, keepdims=True)) / np.sqrt(dk)
    for ours, plain in ((out, alpha @ v), (dq, dscores @ k), (dk_, dscores.swapaxes(-1, -2) @ q),
                        (dv_, alpha.swapaxes(-1, -2) @ dout)):
        np.testing.assert_allclose(ours, plain, rtol=1e-12, atol=1e-14)
    for gradient, given in ((dq, q), (dk_, k), (dv_, v)):                 # same order of strides as the input
        assert np.argsort(gradient.strides).tolist() == np.argsort(given.strides).tolist()
    assert np.shares_memory(dq.transpose(0, 2, 1, 3).reshape(B * T, H * dk), dq)   # merging the heads is a view


def test_row_blocks_refuse_inputs_of_different_shapes():
    def copy(x, y, out):
        out[...] = x
    with pytest.raises(ValueError, match=r"by_row_blocks expected inputs of one shape \(3, 4\), got \(1, 4\)"):
        row_blocks.by_row_blocks(copy, [np.ones((3, 4)), np.ones((1, 4))])


def test_fast_attention_picks_dense_then_tiles_then_wide_tiles_by_the_number_of_keys():
    """Below `tiled_from` keys the dense form (alpha kept); from there tiles of `tile_size`; from `wide_tiles_from`
    tiles of `wide_tile_size`: each path equal to the plain layer, forward and backward."""
    from minitransformer.layers.attention import ScaledDotProductAttention as PlainAttention
    rng = np.random.default_rng(12)
    for T, expected_tile in [(3, None), (4, 2), (7, 2), (8, 4), (11, 4)]:
        q, k, v, dout = (rng.standard_normal((2, 3, T, 4)) for _ in range(4))
        fast = ScaledDotProductAttention(causal=True)
        fast.tiled_from, fast.tile_size, fast.wide_tiles_from, fast.wide_tile_size = 4, 2, 8, 4
        plain = PlainAttention(causal=True)
        out = fast(q, k, v)
        assert fast.tile_for(T) == expected_tile, T
        assert (fast.tiled is None) == (expected_tile is None), T
        assert expected_tile is None or (fast.tiled.block_size == expected_tile and fast.alpha is None), T
        np.testing.assert_allclose(out, plain(q, k, v), rtol=1e-12, atol=1e-12)
        for ours, theirs in zip(fast.backward(dout), plain.backward(dout)):
            np.testing.assert_allclose(ours, theirs, rtol=1e-11, atol=1e-12)


def test_the_fast_tier_swaps_its_attention_in_and_out():
    """The fast tier registers FastScaledDotProductAttention for ScaledDotProductAttention: use_kernels switches a
    layer to it and back, and a fast GPT's attention is the fast form."""
    from minitransformer.fast import kernels_of, use_kernels
    from minitransformer.layers.attention import ScaledDotProductAttention as PlainAttention
    layer = use_kernels(PlainAttention(causal=True), "fast")
    assert type(layer) is ScaledDotProductAttention and kernels_of(layer) == "fast"
    assert type(use_kernels(layer, "plain")) is PlainAttention
    model = GPT(11, 8, 2, 1, 16, 6, rng=0, kernels="fast")
    assert type(model.blocks[0].attn.attention) is ScaledDotProductAttention


def test_the_tiling_thresholds_are_those_the_last_measurement_decided():
    """TILED_FROM, TILE_SIZE, WIDE_TILES_FROM and WIDE_TILE_SIZE are measured, not chosen: the last decision written
    in benchmarks/README.md ("Tiled attention: where it starts") names each value, and the code holds the same. A
    default layer then computes keys 1 .. 255 densely, 256 .. 1023 in tiles of 128 and from 1024 in tiles of 256."""
    from minitransformer.fast import attention
    readme = (Path(__file__).resolve().parents[1] / "benchmarks" / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Tiled attention: where it starts\n")[1].split("\n#")[0]
    decision = section.split("Its decision:")[-1].split("\n\n")[0]
    decided = {name: int(value) for name, value in re.findall(r"`(\w+) = (\d+)`", decision)}
    assert set(decided) == {"TILED_FROM", "TILE_SIZE", "WIDE_TILES_FROM", "WIDE_TILE_SIZE"}, decision
    assert {name: getattr(attention, name) for name in decided} == decided
    layer = ScaledDotProductAttention(causal=True)
    for Tk, tile in [(1, None), (decided["TILED_FROM"] - 1, None), (decided["TILED_FROM"], decided["TILE_SIZE"]),
                     (decided["WIDE_TILES_FROM"] - 1, decided["TILE_SIZE"]),
                     (decided["WIDE_TILES_FROM"], decided["WIDE_TILE_SIZE"]), (4096, decided["WIDE_TILE_SIZE"])]:
        assert layer.tile_for(Tk) == tile, Tk


def test_the_path_is_chosen_by_the_number_of_keys_not_of_queries():
    """One query against 256 cached keys (a decoding step) runs in tiles, memory linear in the keys; 256 queries
    against 2 keys (cross-attention to a short source) run densely."""
    rng = np.random.default_rng(13)
    for Tq, Tk, tiled in [(1, 256, True), (256, 2, False)]:
        q, k, v = rng.standard_normal((1, Tq, 4)), rng.standard_normal((1, Tk, 4)), rng.standard_normal((1, Tk, 4))
        layer = ScaledDotProductAttention(causal=True)
        layer(q, k, v)
        assert (layer.tiled is not None) == tiled and (layer.alpha is None) == tiled, (Tq, Tk)


def test_one_layer_switching_between_the_paths_keeps_nothing_of_the_other():
    """The same layer called densely, then in tiles, then densely again: alpha is None while tiled (not the earlier
    call's weights), and each backward is that of its own forward (plain attention's gradients)."""
    from minitransformer.layers.attention import ScaledDotProductAttention as PlainAttention
    rng = np.random.default_rng(14)
    layer = ScaledDotProductAttention(causal=True)
    layer.tiled_from, layer.tile_size = 6, 2
    for T, tiled in [(4, False), (7, True), (5, False)]:
        q, k, v, dout = (rng.standard_normal((2, T, 3)) for _ in range(4))
        plain = PlainAttention(causal=True)
        np.testing.assert_allclose(layer(q, k, v), plain(q, k, v), rtol=1e-12, atol=1e-12)
        assert (layer.alpha is None) == tiled, T
        for ours, theirs in zip(layer.backward(dout), plain.backward(dout)):
            np.testing.assert_allclose(ours, theirs, rtol=1e-11, atol=1e-12)


def test_the_cached_causal_bias_is_read_only():
    """causal_bias is cached per shape and shared by every call: an in-place change to it is refused."""
    bias = causal_bias(3, 5, np.float64)
    with pytest.raises(ValueError, match="read-only"):
        bias += 1
    assert causal_bias(3, 5, np.float64) is bias


@pytest.mark.parametrize("tiled_from", [10**9, 1], ids=["dense path", "tiled path"])
def test_any_mix_of_float32_and_float64_gives_plain_attentions_dtypes(tiled_from):
    """q, k, v and dout each float32 or float64: on both paths out, dq, dk and dv have the dtypes of the plain layer's
    products (dv = alpha^T dout in alpha's and dout's dtype, not v's), and its numbers."""
    from minitransformer.layers.attention import ScaledDotProductAttention as PlainAttention
    rng = np.random.default_rng(15)
    arrays = [rng.standard_normal(shape) for shape in ((2, 5, 3), (2, 6, 3), (2, 6, 4), (2, 5, 4))]
    for mix in range(16):
        dtypes = [np.float64 if mix >> bit & 1 else np.float32 for bit in range(4)]
        q, k, v, dout = (array.astype(dtype) for array, dtype in zip(arrays, dtypes))
        fast, plain = ScaledDotProductAttention(causal=True), PlainAttention(causal=True)
        fast.tiled_from, fast.tile_size = tiled_from, 2
        ours, theirs = (fast(q, k, v), *fast.backward(dout)), (plain(q, k, v), *plain.backward(dout))
        tolerance = 1e-5 if np.float32 in dtypes else 1e-12
        for what, a, b in zip(("out", "dq", "dk", "dv"), ours, theirs):
            names = [np.dtype(t).name for t in dtypes]
            assert a.dtype == b.dtype, f"{what} for q k v dout {names}: {a.dtype}, plain attention's {b.dtype}"
            np.testing.assert_allclose(a, b, rtol=tolerance, atol=tolerance, err_msg=what)
