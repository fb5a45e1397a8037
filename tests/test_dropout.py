"""Dropout (layers/dropout.py): everything that pins it, in one file.

* definition: inverted dropout, by hand: kept entries are scaled by 1/(1 - p), the mean stays 1, the
  same seed gives the same mask, and in eval mode the input passes through untouched;
* gradients: the catalogue's Dropout rows (mask fixed) against central differences (float64, 1e-7);
* bad input: p outside [0, 1); backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused

from minitransformer import Dropout


# ---------------------------------------------------------------- definition
def test_dropout_is_inverted_and_reproducible():
    x = np.ones((200, 50))
    first = Dropout(0.25, rng=3).forward(x)
    np.testing.assert_array_equal(first, Dropout(0.25, rng=3).forward(x))
    assert set(np.unique(first)) == {0.0, 1 / 0.75}
    assert abs(first.mean() - 1.0) < 0.02
    layer = Dropout(0.25, rng=3).eval()
    assert layer.forward(x) is x


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("Dropout"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- bad input
def test_p_of_one_is_refused():
    with pytest.raises(ValueError, match=r"Dropout expected 0 <= p < 1, got p=1.0"):
        Dropout(1.0)


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(Dropout(0.1))
