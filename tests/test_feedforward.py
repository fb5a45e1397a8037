"""The position-wise feed-forward layer (layers/feedforward.py): everything that pins it, in one file.

* definition: fc2(activation(fc1(x))) is pinned against PyTorch inside the block
  (tests/test_block.py, `nn.TransformerEncoderLayer`'s linear1, linear2);
* gradients: the catalogue's FeedForward rows (ReLU and GELU) against central differences (float64, 1e-7);
* float32: agrees with float64 to 1e-5;
* bad input: an unknown activation; backward before forward.
"""

import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64

from minitransformer import FeedForward


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("FeedForward"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: FeedForward(8, 16, activation="gelu", dtype=dtype, rng=0),
                                       (2, 5, 8), "FeedForward")


# ---------------------------------------------------------------- bad input
def test_an_unknown_activation_is_refused():
    with pytest.raises(ValueError, match="activation in"):
        FeedForward(4, 8, activation="tanh")


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(FeedForward(4, 8))


def test_two_linear_maps_around_the_activation_by_hand():
    """Vaswani et al. (2017) eq. 2: FFN(x) = max(0, x W1 + b1) W2 + b2, C -> d_ff -> C, the same at every position."""
    import numpy as np

    rng = np.random.default_rng(2)
    layer = FeedForward(4, 12, activation="relu", rng=0)
    for linear in (layer.fc1, layer.fc2):
        linear.bias.data[...] = rng.standard_normal(linear.bias.data.shape)
    x = rng.standard_normal((3, 5, 4))
    hidden = np.maximum(0.0, x @ layer.fc1.weight.data + layer.fc1.bias.data)          # (3, 5, 12)
    np.testing.assert_allclose(layer(x), hidden @ layer.fc2.weight.data + layer.fc2.bias.data, rtol=1e-13)
    assert hidden.shape[-1] == 12 and (hidden == 0).any() and (hidden > 0).any()       # the kink is used
