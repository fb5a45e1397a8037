"""PPO's clipped surrogate and value loss: the branches of the min by hand, finite differences, bad input."""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer.layers.ppo_losses import ClippedSurrogateLoss, ValueLoss


@pytest.mark.parametrize("case", catalogue_cases("ClippedSurrogateLoss", "ValueLoss"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


def test_clipped_objective_and_its_gradient_by_hand():
    # ratios r = 1.5, 1.5, 0.5, 0.5, 1.1 against advantages +1, -1, +1, -1, +2, eps = 0.2:
    #   r=1.5, A=+1: min(1.5, 1.2)   = 1.2  clipped, gradient 0      (already moved far enough up)
    #   r=1.5, A=-1: min(-1.5, -1.2) = -1.5 unclipped, d/dlogp = A r = -1.5
    #   r=0.5, A=+1: min(0.5, 0.8)   = 0.5  unclipped, d/dlogp = 0.5
    #   r=0.5, A=-1: min(-0.5, -0.8) = -0.8 clipped, gradient 0      (already moved far enough down)
    #   r=1.1, A=+2: inside the range: 2.2, d/dlogp = 2.2
    ratio, advantages = np.array([[1.5, 1.5, 0.5, 0.5, 1.1]]), np.array([[1.0, -1.0, 1.0, -1.0, 2.0]])
    logp_old = np.full((1, 5), -1.0)
    loss = ClippedSurrogateLoss(0.2)
    value = loss(logp_old + np.log(ratio), logp_old, advantages)
    assert value == pytest.approx(-(1.2 - 1.5 + 0.5 - 0.8 + 2.2) / 5)
    assert loss.clip_fraction == pytest.approx(2 / 5)
    assert np.allclose(loss.backward(1.0), -np.array([[0.0, -1.5, 0.5, 0.0, 2.2]]) / 5)


def test_the_default_clip_is_ppos_0_2():
    """Schulman et al. 2017, §6.1: eps = 0.2 did best (InstructGPT keeps it). Ratios 1.15 and 1.25 with A = +1:
    the first is inside [0.8, 1.2] (1.15), the second is cut to 1.2."""
    loss = ClippedSurrogateLoss()
    logp_old = np.zeros((1, 2))
    assert loss(np.log([[1.15, 1.25]]), logp_old, np.ones((1, 2))) == pytest.approx(-(1.15 + 1.2) / 2)
    assert loss(np.log([[0.85, 0.75]]), logp_old, -np.ones((1, 2))) == pytest.approx((0.85 + 0.8) / 2)


def test_at_the_old_policy_the_gradient_is_the_policy_gradient():
    rng = np.random.default_rng(0)
    logp, advantages, mask = -rng.random((3, 4)), rng.standard_normal((3, 4)), rng.random((3, 4)) < 0.5
    loss = ClippedSurrogateLoss()
    loss(logp, logp, advantages, mask)
    assert np.allclose(loss.backward(), -advantages * mask / mask.sum())                # r = 1: -A / N


def test_value_loss_by_hand_and_the_mask():
    loss = ValueLoss()
    value = loss(np.array([[1.0, 2.0, 5.0]]), np.array([[0.0, 4.0, 0.0]]), np.array([[1, 1, 0]]))
    assert value == pytest.approx(0.5 * (1 + 4) / 2)
    assert np.allclose(loss.backward(), [[0.5, -1.0, 0.0]])


@pytest.mark.parametrize("call, error, message", [
    (lambda: ClippedSurrogateLoss(1.5), ValueError, r"ClippedSurrogateLoss expected clip in \(0, 1\), got 1.5"),
    (lambda: ClippedSurrogateLoss(0.0), ValueError, r"expected clip in \(0, 1\), got 0.0"),     # every ratio frozen at 1
    (lambda: ClippedSurrogateLoss(1.0), ValueError, r"expected clip in \(0, 1\), got 1.0"),     # the range reaches r = 0
    (lambda: ClippedSurrogateLoss()(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((3, 2))), ValueError,
     "expected arrays of one shape"),
    (lambda: ClippedSurrogateLoss()(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3))),
     ValueError, "the mask scores no position"),
    (lambda: ValueLoss()(np.zeros((2, 3)), np.zeros((2, 3)), np.ones((3,))), ValueError,
     r"ValueLoss\(\) expected a mask of shape \(2, 3\), got \(3,\)"),
    (lambda: ValueLoss()(np.zeros((2, 3), dtype=int), np.zeros((2, 3))), TypeError, "ValueLoss"),
    (lambda: ValueLoss().backward(), RuntimeError, "before forward"),
])
def test_bad_input_is_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()
