"""Softmax (layers/softmax.py): everything that pins it, in one file.

* definition: PyTorch's `softmax` along the same axis, masked (-inf) entries included (parity, 1e-10);
* gradients: the catalogue's Softmax rows against central differences (float64, 1e-7);
* properties (hypothesis): every row is a distribution; adding a constant to a row changes nothing;
* float32: agrees with float64 to 1e-5; logits of +-1e4 stay finite;
* bad input: backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64, seeds, shapes
from _torch_parity import F, assert_matches_torch, requires_torch
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import Softmax, softmax


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("axis", [-1, 1])
def test_matches_torch(axis):
    x = np.random.default_rng(5).standard_normal((3, 4, 5)) * 4
    x[0, 1, 2] = x[2, 3, 0] = -np.inf                      # masked entries, never a whole row
    assert_matches_torch(Softmax(axis=axis), [x], lambda t, leaves: F.softmax(t[0], dim=axis))


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("Softmax"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- properties
@given(shapes, seeds, st.floats(0.1, 50))
def test_rows_are_distributions(shape, seed, spread):
    x = np.random.default_rng(seed).standard_normal(shape) * spread
    y = Softmax().forward(x)
    assert np.all(y >= 0)
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-12)


@given(shapes, seeds)
def test_is_shift_invariant(shape, seed):
    x = np.random.default_rng(seed).standard_normal(shape)
    np.testing.assert_allclose(Softmax().forward(x), Softmax().forward(x + 123.0), atol=1e-12)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: Softmax(), (2, 3, 5), "Softmax")


def test_extreme_float32_logits_stay_finite():
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4]], dtype=np.float32)
    probs = Softmax().forward(logits)
    assert probs.dtype == np.float32 and np.all(np.isfinite(probs))
    np.testing.assert_allclose(probs, [[1, 0, 0], [0, 0, 1]], atol=1e-6)


# ---------------------------------------------------------------- bad input
def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(Softmax())


def test_softmax_by_hand():
    """exp(x_i) / sum_j exp(x_j): logits log 1, log 2, log 3 give 1/6, 2/6, 3/6; logits 0 and 1 give
    1 / (1 + e) and e / (1 + e)."""
    import math

    np.testing.assert_allclose(softmax(np.log([1.0, 2.0, 3.0])), [1 / 6, 2 / 6, 3 / 6], rtol=1e-14)
    np.testing.assert_allclose(softmax(np.array([[0.0, 1.0]])), [[1 / (1 + math.e), math.e / (1 + math.e)]],
                               rtol=1e-14)
