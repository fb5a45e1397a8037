"""LayerNorm (layers/layernorm.py): everything that pins it, in one file.

* definition: PyTorch's `nn.LayerNorm` (parity, 1e-10), also where eps dominates the variance; the
  slides' form without eps (Si Wu, "Transformers", CS 6120, Northeastern, slide "Layer Norm") is a different function;
* gradients: the catalogue's LayerNorm rows against central differences (float64, 1e-7);
* properties (hypothesis): before the affine the output has zero mean and unit variance, for every shape;
* float32: agrees with float64 to 1e-5;
* bad input: a wrong feature size names the layer; an upstream gradient of the wrong shape is refused
  rather than broadcast; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64, seeds, shapes
from _torch_parity import TOLERANCE, F, assert_matches_torch, functional_call, requires_torch, torch
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import LayerNorm, rel_error


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("eps, scale", [(1e-5, 1.0), (1e-3, 0.01)], ids=["gpt2-eps", "eps-dominates"])
def test_matches_torch(eps, scale):
    """With inputs of variance 1e-4 and eps 1e-3 the placement of eps (inside the root) decides the output."""
    rng = np.random.default_rng(2)
    layer = LayerNorm(6, eps=eps)
    layer.gamma.data[...] = rng.standard_normal(6)
    layer.beta.data[...] = rng.standard_normal(6)
    reference = torch.nn.LayerNorm(6, eps=eps, dtype=torch.float64)
    assert_matches_torch(layer, [scale * rng.standard_normal((3, 4, 6))],
                         lambda t, leaves: functional_call(reference, {"weight": leaves["gamma"], "bias": leaves["beta"]},
                                                           (t[0],)))


@requires_torch
def test_layernorm_of_the_slides_without_eps_is_a_different_function():
    """Si Wu's slides ("Transformers", CS 6120, Northeastern, slide "Layer Norm") divide by sigma = sqrt(var)
    with no eps; PyTorch, GPT-2 and this project use sqrt(var + eps). With small variance the two differ,
    and on a constant vector the slides' form is 0/0 while the layer gives beta."""
    rng = np.random.default_rng(14)
    x = 0.01 * rng.standard_normal((3, 6))
    slides = (x - x.mean(-1, keepdims=True)) / x.std(-1, keepdims=True)
    expected = F.layer_norm(torch.from_numpy(x), (6,), eps=1e-5).numpy()
    assert rel_error(LayerNorm(6)(x), expected) <= TOLERANCE
    assert rel_error(slides, expected) > 1e-2
    constant = np.full((1, 6), 3.0)
    with np.errstate(invalid="ignore"):
        assert np.isnan((constant - constant.mean()) / constant.std()).all()
    np.testing.assert_array_equal(LayerNorm(6)(constant), F.layer_norm(torch.from_numpy(constant), (6,)).numpy())


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("LayerNorm"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- properties
@given(shapes, seeds, st.floats(0.01, 100))
def test_output_has_zero_mean_and_unit_variance_before_the_affine(shape, seed, scale):
    d = shape[-1] + 1                                    # at least two features, so the variance is not 0
    x = np.random.default_rng(seed).standard_normal((*shape[:-1], d)) * scale + 3.0
    layer = LayerNorm(d, eps=0.0)
    layer.gamma.data[...] = 2.0
    layer.beta.data[...] = -1.0
    y = layer.forward(x)
    np.testing.assert_allclose(layer.xhat.mean(axis=-1), 0.0, atol=1e-9)
    np.testing.assert_allclose(layer.xhat.var(axis=-1), 1.0, rtol=1e-9)
    np.testing.assert_allclose(y, 2.0 * layer.xhat - 1.0)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: LayerNorm(5, dtype=dtype), (2, 3, 5), "LayerNorm")


# ---------------------------------------------------------------- bad input
def test_wrong_feature_size_names_layer_expected_and_given():
    with pytest.raises(ValueError, match=r"LayerNorm\(6\) expected input \(\.\.\., 6\), got \(3, 4\)"):
        LayerNorm(6).forward(np.zeros((3, 4)))


def test_upstream_gradient_of_the_wrong_shape_is_not_broadcast():
    norm = LayerNorm(3)
    norm.forward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="expected dout of shape"):
        norm.backward(np.ones(3))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(LayerNorm(3))


# ---------------------------------------------------------------- definition by hand (no PyTorch needed)
def test_layernorm_by_hand_biased_variance_and_eps_1e5_inside_the_root():
    """Ba et al. (2016) eq. 4 with GPT-2's and PyTorch's eps = 1e-5 inside the square root, variance over C
    (not C - 1). x = (1, 2, 3, 4): mean 2.5, variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25. x = (0, 0.002):
    variance 1e-6, ten times smaller than eps, so eps decides the output: 0.001 / sqrt(1.1e-5) = 0.3015..."""
    import math

    y = LayerNorm(4)(np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(y, np.array([-1.5, -0.5, 0.5, 1.5]) / math.sqrt(1.25 + 1e-5), rtol=1e-14)
    small = LayerNorm(2)(np.array([0.0, 0.002]))
    np.testing.assert_allclose(small, [-0.001 / math.sqrt(1.1e-5), 0.001 / math.sqrt(1.1e-5)], rtol=1e-12)
    assert LayerNorm(2).eps == 1e-5
