"""Linear (layers/linear.py): everything that pins it, in one file.

* definition: PyTorch's `nn.Linear`, with and without bias, 2-D and 3-D input (parity, 1e-10);
* gradients: the catalogue's Linear rows against central differences (float64, 1e-7);
* float32: agrees with float64 to 1e-5;
* bad input: a wrong feature size names the layer, what it expected and what it got; an upstream
  gradient of the wrong shape is refused rather than broadcast; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64
from _torch_parity import assert_matches_torch, functional_call, linear_weights, requires_torch, torch

from minitransformer import Linear


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("shape", [(2, 5, 6), (7, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_matches_torch(shape, bias):
    rng = np.random.default_rng(1)
    layer = Linear(shape[-1], 4, bias=bias, rng=rng)
    if bias:
        layer.bias.data[...] = rng.standard_normal(4)
    reference = torch.nn.Linear(shape[-1], 4, bias=bias, dtype=torch.float64)
    assert_matches_torch(layer, [rng.standard_normal(shape)],
                         lambda t, leaves: functional_call(reference, linear_weights(leaves, "", ""), (t[0],)))


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("Linear"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: Linear(5, 4, dtype=dtype, rng=0), (2, 3, 5), "Linear")


# ---------------------------------------------------------------- bad input
def test_wrong_feature_size_names_layer_expected_and_given():
    with pytest.raises(ValueError, match=r"Linear\(8 -> 4\) expected input \(\.\.\., 8\), got \(2, 5\)"):
        Linear(8, 4).forward(np.zeros((2, 5)))


def test_upstream_gradient_of_the_wrong_shape_is_not_broadcast():
    layer = Linear(3, 2)
    layer.forward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"Linear\(3 -> 2\).backward expected dout of shape \(4, 2\), got \(1, 2\)"):
        layer.backward(np.ones((1, 2)))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(Linear(3, 2))


# ---------------------------------------------------------------- initial weights
def test_initial_weights_have_standard_deviation_one_over_sqrt_d_in_and_keep_the_variance():
    """N(0, 1/d_in) (LeCun et al. 1998, "Efficient BackProp" §4.6): each output sums d_in products of
    variance 1/d_in, so unit-variance inputs give outputs of variance about 1. d_in = 400: std 0.05; biases 0."""
    layer = Linear(400, 300, rng=0)
    assert layer.weight.data.std() == pytest.approx(0.05, rel=0.01)                # 120 000 draws
    assert not layer.bias.data.any()
    y = layer(np.random.default_rng(1).standard_normal((200, 400)))
    assert y.var() == pytest.approx(1.0, rel=0.05)
