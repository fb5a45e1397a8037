"""Checks every layer's test file makes the same way: float32 against float64, backward before forward; and the
hypothesis strategies the property tests share (`shapes` of activations, `seeds`).

* `assert_float32_agrees_with_float64(factory, shape, what)`: the layer is built twice from the same
  seed, once per dtype (the float32 weights are the float64 ones rounded), and fed the same input in
  each dtype; forward and backward must keep float32 and agree with float64 to 1e-5, relative to the
  largest entry.
* `assert_backward_before_forward_is_refused(layer)`: a clear error instead of a stale or missing cache.
"""

import numpy as np
import pytest
from hypothesis import strategies as st

FLOAT32_TOLERANCE = 1e-5

shapes = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)     # (...), 1 to 4 axes of 1 to 5
seeds = st.integers(0, 2**32 - 1)


def assert_close_in_float32(y32, y64, what):
    """y32 is float32 and within 1e-5 of y64, relative to max(1, max |y64|)."""
    assert y32.dtype == np.float32, f"{what} returned {y32.dtype} for float32 input"
    scale = max(1.0, float(np.max(np.abs(y64))))
    error = float(np.max(np.abs(y32.astype(np.float64) - y64))) / scale
    assert error < FLOAT32_TOLERANCE, f"{what}: float32 differs from float64 by {error:.1e} (relative to max |y|)"


def assert_float32_agrees_with_float64(factory, shape, what):
    """factory(dtype) -> layer; forward on a standard normal x of `shape`, backward of a standard normal dout."""
    x = np.random.default_rng(0).standard_normal(shape)
    layer64, layer32 = factory(np.float64), factory(np.float32)
    y64, y32 = layer64.forward(x), layer32.forward(x.astype(np.float32))
    assert_close_in_float32(y32, y64, f"{what}.forward")
    dout = np.random.default_rng(1).standard_normal(y64.shape)
    dx64, dx32 = layer64.backward(dout), layer32.backward(dout.astype(np.float32))
    assert_close_in_float32(dx32, dx64, f"{what}.backward")


def assert_backward_before_forward_is_refused(layer, dout=None):
    """layer.backward(dout) before any forward raises RuntimeError; dout defaults to ones (1, 2, 3)."""
    with pytest.raises(RuntimeError, match=r"backward\(\) called before forward\(\)"):
        layer.backward(np.ones((1, 2, 3)) if dout is None else dout)
