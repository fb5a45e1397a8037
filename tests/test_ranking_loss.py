"""PairwiseRankingLoss: -log sigma(r_chosen - r_rejected), pinned by hand, checked by finite differences."""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer.layers.ranking_loss import PairwiseRankingLoss, log_sigmoid


@pytest.mark.parametrize("case", catalogue_cases("PairwiseRankingLoss"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


def test_loss_by_hand():
    # margin 1: log(1 + e^-1) = 0.313262; margin 0: log 2 = 0.693147; margin -2: log(1 + e^2) = 2.126928
    loss = PairwiseRankingLoss()(np.array([1.5, 0.0, -1.0]), np.array([0.5, 0.0, 1.0]))
    assert loss == pytest.approx((0.3132617 + 0.6931472 + 2.1269280) / 3, abs=1e-6)


def test_gradient_by_hand_and_only_the_margin_matters():
    layer = PairwiseRankingLoss()
    layer(np.array([0.0]), np.array([0.0]))
    dr_chosen, dr_rejected = layer.backward(1.0)
    assert dr_chosen[0] == pytest.approx(-0.5) and dr_rejected[0] == pytest.approx(0.5)    # sigma(0) = 1/2
    r_chosen, r_rejected = np.array([0.3, -2.0]), np.array([1.1, 4.0])
    assert layer(r_chosen + 7.0, r_rejected + 7.0) == pytest.approx(layer(r_chosen, r_rejected))


def test_huge_margins_stay_finite():
    loss = PairwiseRankingLoss()(np.array([1e4, -1e4]), np.array([-1e4, 1e4]))
    assert loss == pytest.approx(1e4)                                 # 0 for the right pair, 2e4 for the wrong
    assert log_sigmoid(np.array(-800.0)) == pytest.approx(-800.0)


@pytest.mark.parametrize("chosen, rejected, error, message", [
    (np.zeros(3), np.zeros(2), ValueError, r"expected r_chosen \(B,\) and r_rejected \(B,\) .* got \(3,\) and \(2,\)"),
    (np.zeros((2, 1)), np.zeros((2, 1)), ValueError, r"got \(2, 1\) and \(2, 1\)"),
    (np.zeros(0), np.zeros(0), ValueError, "B >= 1"),
    (np.array([1, 2]), np.zeros(2), TypeError, "PairwiseRankingLoss"),
])
def test_bad_input_is_a_clear_error(chosen, rejected, error, message):
    with pytest.raises(error, match=message):
        PairwiseRankingLoss()(chosen, rejected)


def test_backward_before_forward_is_a_clear_error():
    with pytest.raises(RuntimeError, match="backward\\(\\) called before forward"):
        PairwiseRankingLoss().backward()
