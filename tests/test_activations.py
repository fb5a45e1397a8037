"""ReLU, GELU and SiLU (layers/activations.py): everything that pins them, in one file.

* definition: PyTorch's `relu`, `gelu(approximate="tanh")` and `silu` (parity, 1e-10); the erf GELU is a
  different function; SiLU stays finite where exp(-x) overflows;
* gradients: the catalogue's ReLU, GELU and SiLU rows against central differences (float64, 1e-7);
* float32: agrees with float64 to 1e-5;
* bad input: GELU refuses an upstream gradient that would broadcast; backward before forward.
"""

import re

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64
from _torch_parity import F, assert_matches_torch, requires_torch, torch

from minitransformer import GELU, ReLU, SiLU, rel_error

ACTIVATIONS = {"ReLU": ReLU, "GELU": GELU, "SiLU": SiLU}


# ---------------------------------------------------------------- definition
@requires_torch
def test_relu_matches_torch():
    x = np.random.default_rng(4).standard_normal((4, 6))
    x += np.sign(x) * 0.1                                  # away from the kink
    assert_matches_torch(ReLU(), [x], lambda t, leaves: F.relu(t[0]))


@requires_torch
def test_gelu_is_the_tanh_approximation():
    x = np.random.default_rng(3).standard_normal((4, 5, 6)) * 3
    assert_matches_torch(GELU(), [x], lambda t, leaves: F.gelu(t[0], approximate="tanh"))
    exact_erf = F.gelu(torch.from_numpy(x)).numpy()
    assert rel_error(GELU()(x), exact_erf) > 1e-5          # the erf form is a different function


@requires_torch
def test_silu_matches_torch():
    x = np.random.default_rng(5).standard_normal((4, 5, 6)) * 4
    assert_matches_torch(SiLU(), [x], lambda t, leaves: F.silu(t[0]))


def test_silu_by_hand_and_far_out_in_both_tails():
    """x sigmoid(x) at a few points by hand; at -800 exp(-x) would overflow, SiLU gives 0 and warns of nothing."""
    x = np.array([-800.0, -2.0, 0.0, 1.0, 800.0])
    with np.errstate(all="raise"):
        y = SiLU()(x)
    np.testing.assert_allclose(y[1:4], [-2 / (1 + np.exp(2.0)), 0.0, 1 / (1 + np.exp(-1.0))], rtol=1e-14)
    assert y[0] == 0.0 and y[4] == 800.0


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("ReLU", "GELU", "SiLU"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- float32
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_float32_forward_and_backward_agree_with_float64(name):
    assert_float32_agrees_with_float64(lambda dtype: ACTIVATIONS[name](), (2, 3, 5), name)


# ---------------------------------------------------------------- bad input
def test_gelu_refuses_a_broadcastable_dout():
    layer, wrong_dout = GELU(), np.ones(3)
    layer.forward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"backward expected dout of shape \(.*\), got " + re.escape(str(wrong_dout.shape))):
        layer.backward(wrong_dout)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_backward_before_forward_is_a_clear_error(name):
    assert_backward_before_forward_is_refused(ACTIVATIONS[name]())


# ---------------------------------------------------------------- definition by hand (no PyTorch needed)
def test_gelu_constants_are_hendrycks_and_gimpels_by_hand():
    """Hendrycks & Gimpel (2016) §2: GELU(x) ~ 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), written out
    with `math` here, entry by entry; and the approximation stays within 5e-4 of the exact x Phi(x) (erf)."""
    import math

    xs = np.array([-4.0, -2.5, -1.0, -0.3, 0.0, 0.4, 1.0, 1.7, 3.0, 5.0])
    y = GELU()(xs)
    for x, value in zip(xs, y, strict=True):
        by_hand = 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
        assert value == pytest.approx(by_hand, rel=1e-14, abs=1e-15), x
        exact = 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))
        assert abs(value - exact) < 5e-4, x
    assert GELU()(np.array([1.0]))[0] == pytest.approx(0.8411919906082768, rel=1e-14)   # the tanh form at 1
