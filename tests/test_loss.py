"""Cross-entropy (layers/loss.py): everything that pins it, in one file.

* definition: PyTorch's `cross_entropy`, with and without ignore_index (parity, 1e-10);
* gradients: the catalogue's CrossEntropyLoss rows against central differences (float64, 1e-7);
* float32: agrees with float64 to 1e-5 and keeps float32; logits of +-1e4 give a finite loss and
  gradient, and the loss they should (by hand: -log p(target) = 2e4 for one row, 0 for the other);
* bad input: targets out of range (negative ones are not wrapped), a shape that does not match the
  logits, every target ignored; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused
from _torch_parity import F, assert_matches_torch, requires_torch

from minitransformer import CrossEntropyLoss


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("ignore_index", [None, -1])
def test_matches_torch(ignore_index):
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((2, 5, 11)) * 3
    targets = rng.integers(0, 11, size=(2, 5))
    if ignore_index is not None:
        targets[0, :2] = ignore_index

    def reference(t, leaves):
        return F.cross_entropy(t[0].reshape(-1, 11), t[1].reshape(-1), ignore_index=-100 if ignore_index is None else ignore_index)
    assert_matches_torch(CrossEntropyLoss(ignore_index=ignore_index), [logits, targets], reference)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("CrossEntropyLoss"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- float32
def test_loss_in_float32():
    rng = np.random.default_rng(0)
    rng.standard_normal((3, 2, 4, 3))                      # skip q, k, v: the logits this test has always used
    logits, targets = rng.standard_normal((6, 7)) * 3, rng.integers(0, 7, size=6)
    loss32 = CrossEntropyLoss()
    value32 = loss32.forward(logits.astype(np.float32), targets)
    assert value32.dtype == np.float32
    np.testing.assert_allclose(value32, CrossEntropyLoss().forward(logits, targets), rtol=1e-5)
    assert loss32.backward().dtype == np.float32


def test_extreme_float32_logits_stay_finite():
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4]], dtype=np.float32)
    loss = CrossEntropyLoss()
    value = loss.forward(logits, np.array([1, 2]))
    assert np.isfinite(value)
    np.testing.assert_allclose(value, 1e4, rtol=1e-6)             # -log p(target) = 2e4 for row 0, 0 for row 1
    assert np.all(np.isfinite(loss.backward()))


# ---------------------------------------------------------------- bad input
def test_bad_targets_and_shapes_in_the_loss():
    loss = CrossEntropyLoss()
    with pytest.raises(IndexError, match=r"CrossEntropyLoss\(\) \(targets\) expected token ids in \[0, 4\), got 4"):
        loss.forward(np.zeros((2, 4)), np.array([1, 4]))
    with pytest.raises(IndexError, match=r"got -2"):
        loss.forward(np.zeros((2, 4)), np.array([-2, 1]))
    with pytest.raises(ValueError, match=r"same leading shape, got logits \(2, 4\) and targets \(3,\)"):
        loss.forward(np.zeros((2, 4)), np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="every target equals ignore_index"):
        CrossEntropyLoss(ignore_index=-1).forward(np.zeros((2, 4)), np.array([-1, -1]))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(CrossEntropyLoss(), dout=1.0)


def test_cross_entropy_by_hand_is_the_mean_nll_of_the_kept_targets():
    """-log softmax(logits)[target], averaged over the targets not ignored: rows with probabilities
    (1/6, 2/6, 3/6) and targets 2, 0 give (ln 2 + ln 6) / 2; a third row with target -1 is left out."""
    import math

    logits = np.log(np.array([[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [5.0, 1.0, 1.0]]))
    assert float(CrossEntropyLoss()(logits[:2], np.array([2, 0]))) == pytest.approx(
        (math.log(2) + math.log(6)) / 2, rel=1e-14)
    assert float(CrossEntropyLoss(ignore_index=-1)(logits, np.array([2, 0, -1]))) == pytest.approx(
        (math.log(2) + math.log(6)) / 2, rel=1e-14)
