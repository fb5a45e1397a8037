"""SwiGLU (layers/swiglu.py): everything that pins it, in one file.

* definition: (silu(x W_1) * (x W_3)) W_2 built from PyTorch ops (`F.silu`, `F.linear`), with and
  without biases (parity, 1e-10); with the gate taken away (W_1 large and positive) it is a bilinear map;
* gradients: the catalogue's SwiGLU rows against central differences (float64, 1e-7);
* float32: agrees with float64 to 1e-5;
* bad input: a wrong feature size names the layer; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64
from _torch_parity import F, assert_matches_torch, requires_torch, shift_vectors

from minitransformer import SwiGLU


# ---------------------------------------------------------------- definition
def _torch_swiglu(x, leaves):
    """(silu(x W_1) * (x W_3)) W_2 with torch ops; our (in, out) weights are F.linear's transposed."""
    def linear(name, h):
        return F.linear(h, leaves[f"{name}.weight"].T, leaves.get(f"{name}.bias"))
    return linear("w2", F.silu(linear("w1", x)) * linear("w3", x))


@requires_torch
@pytest.mark.parametrize("bias", [False, True], ids=["no-bias", "bias"])
def test_matches_swiglu_built_from_torch_ops(bias):
    rng = np.random.default_rng(8)
    layer = shift_vectors(SwiGLU(6, 10, bias=bias, rng=rng), rng)
    assert_matches_torch(layer, [rng.standard_normal((2, 5, 6))], lambda t, leaves: _torch_swiglu(t[0], leaves))


def test_parameters_are_the_three_matrices_of_the_formula():
    layer = SwiGLU(4, 6, rng=0)
    assert [(name, param.shape) for name, param in layer.named_parameters()] == [
        ("w1.weight", (4, 6)), ("w3.weight", (4, 6)), ("w2.weight", (6, 4))]


def test_weights_are_drawn_in_the_order_w1_w3_w2_with_their_scales():
    """By hand: one generator draws W_1, then W_3 (std init_std), then W_2 (std out_std), as the docstring says."""
    layer = SwiGLU(4, 6, rng=3, init_std=0.5, out_std=0.25)
    rng = np.random.default_rng(3)
    for linear, shape, std in ((layer.w1, (4, 6), 0.5), (layer.w3, (4, 6), 0.5), (layer.w2, (6, 4), 0.25)):
        np.testing.assert_array_equal(linear.weight.data, rng.standard_normal(shape) * std)
    default = SwiGLU(4, 6, rng=3)
    rng = np.random.default_rng(3)
    for linear, shape, std in ((default.w1, (4, 6), 4 ** -0.5), (default.w3, (4, 6), 4 ** -0.5),
                               (default.w2, (6, 4), 6 ** -0.5)):                # Linear's 1/sqrt(fan-in)
        np.testing.assert_array_equal(linear.weight.data, rng.standard_normal(shape) * std)


def test_an_open_gate_leaves_the_product_of_two_projections():
    """silu(a) -> a for large positive a: out -> ((x W_1) * (x W_3)) W_2, computed by hand."""
    rng = np.random.default_rng(1)
    layer = SwiGLU(3, 4, rng=rng)
    x = np.abs(rng.standard_normal((5, 3))) + 1.0
    layer.w1.weight.data[...] = np.abs(layer.w1.weight.data) * 50 + 20        # every gate far on the positive side
    by_hand = ((x @ layer.w1.weight.data) * (x @ layer.w3.weight.data)) @ layer.w2.weight.data
    np.testing.assert_allclose(layer(x), by_hand, rtol=1e-12)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("SwiGLU"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: SwiGLU(5, 7, dtype=dtype, rng=0), (2, 3, 5), "SwiGLU")


# ---------------------------------------------------------------- bad input
def test_wrong_feature_size_names_the_first_projection():
    with pytest.raises(ValueError, match=r"Linear\(4 -> 6\) expected input \(\.\.\., 4\), got \(3, 5\)"):
        SwiGLU(4, 6, rng=0).forward(np.zeros((3, 5)))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(SwiGLU(3, 4, rng=0))
