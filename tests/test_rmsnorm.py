"""RMSNorm (layers/rmsnorm.py): everything that pins it, in one file.

* definition: PyTorch's `torch.nn.functional.rms_norm` (parity, 1e-10), also where eps dominates the
  mean square (eps inside the root); LayerNorm of a zero-mean vector without beta is the same function;
* gradients: the catalogue's RMSNorm rows against central differences (float64, 1e-7);
* properties (hypothesis): before the gain the output has unit root mean square, for every shape;
* float32: agrees with float64 to 1e-5;
* bad input: a wrong feature size names the layer; an upstream gradient of the wrong shape is refused
  rather than broadcast; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64, seeds, shapes
from _torch_parity import F, assert_matches_torch, requires_torch
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import LayerNorm, RMSNorm


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("eps, scale", [(1e-5, 1.0), (1e-3, 0.01)], ids=["llama-eps", "eps-dominates"])
def test_matches_torch_rms_norm(eps, scale):
    """With inputs of mean square 1e-4 and eps 1e-3, where eps sits (inside the root) decides the output."""
    rng = np.random.default_rng(5)
    layer = RMSNorm(6, eps=eps)
    layer.gamma.data[...] = rng.standard_normal(6)
    assert_matches_torch(layer, [scale * rng.standard_normal((3, 4, 6))],
                         lambda t, leaves: F.rms_norm(t[0], (6,), weight=leaves["gamma"], eps=eps))


def test_on_a_zero_mean_vector_it_is_layernorm_without_beta():
    """A computation by hand: once the mean is zero, LayerNorm's variance is RMSNorm's mean square."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 7))
    x -= x.mean(axis=-1, keepdims=True)
    gamma = rng.standard_normal(7)
    rms, layer = RMSNorm(7), LayerNorm(7)
    rms.gamma.data[...] = layer.gamma.data[...] = gamma
    np.testing.assert_allclose(rms(x), layer(x), rtol=1e-12, atol=1e-12)
    by_hand = gamma * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(rms(x), by_hand, rtol=1e-12)
    shifted = x + 3.0                                   # LayerNorm removes a shift, RMSNorm does not
    np.testing.assert_allclose(layer(shifted), layer(x), rtol=1e-9, atol=1e-9)
    assert np.max(np.abs(rms(shifted) - rms(x))) > 0.1


def test_the_gain_starts_at_one_and_its_gradient_accumulates():
    """Zhang & Sennrich 2019 start the gain at 1, so a new layer outputs x / rms(x); dgamma is added (+=), so
    two backward passes leave twice the gradient of one."""
    x = np.random.default_rng(2).standard_normal((3, 5))
    layer = RMSNorm(5)
    np.testing.assert_array_equal(layer.gamma.data, np.ones(5))
    np.testing.assert_allclose(layer(x), x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-5), rtol=1e-12)
    dout = np.random.default_rng(3).standard_normal((3, 5))
    layer.backward(dout)
    once = layer.gamma.grad.copy()
    layer.backward(dout)
    np.testing.assert_allclose(layer.gamma.grad, 2 * once, rtol=1e-12)
    np.testing.assert_allclose(once, np.sum(dout * layer.xhat, axis=0), rtol=1e-12)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("RMSNorm"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- properties
@given(shapes, seeds, st.floats(0.01, 100))
def test_output_has_unit_root_mean_square_before_the_gain(shape, seed, scale):
    x = np.random.default_rng(seed).standard_normal(shape) * scale + 0.5
    layer = RMSNorm(shape[-1], eps=0.0)
    layer.gamma.data[...] = -2.0
    y = layer.forward(x)
    np.testing.assert_allclose(np.sqrt(np.mean(layer.xhat ** 2, axis=-1)), 1.0, rtol=1e-9)
    np.testing.assert_allclose(y, -2.0 * layer.xhat)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: RMSNorm(5, dtype=dtype), (2, 3, 5), "RMSNorm")


# ---------------------------------------------------------------- bad input
def test_wrong_feature_size_names_layer_expected_and_given():
    with pytest.raises(ValueError, match=r"RMSNorm\(6\) expected input \(\.\.\., 6\), got \(3, 4\)"):
        RMSNorm(6).forward(np.zeros((3, 4)))


def test_upstream_gradient_of_the_wrong_shape_is_not_broadcast():
    norm = RMSNorm(3)
    norm.forward(np.ones((4, 3)))
    with pytest.raises(ValueError, match="expected dout of shape"):
        norm.backward(np.ones(3))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(RMSNorm(3))
