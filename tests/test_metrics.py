"""Perplexity (training/metrics.py): exp of the mean negative log-likelihood per predicted token, pinned by hand."""

import math

import numpy as np
import pytest

import minitransformer as mt
from minitransformer.training.metrics import perplexity


def test_uniform_model_over_V_tokens_has_perplexity_V():
    """A model with equal logits puts 1/V on every token: NLL = log V per token, so perplexity = V."""
    for V in (2, 65, 50257):
        logits = np.zeros((2, 3, V))
        targets = np.arange(6).reshape(2, 3) % V
        assert perplexity(mt.CrossEntropyLoss()(logits, targets)) == pytest.approx(V, rel=1e-12)


def test_perplexity_is_the_geometric_mean_of_one_over_p_by_hand():
    """Two predictions with p = 1/2 and p = 1/4: mean NLL = (ln 2 + ln 4) / 2 = 1.5 ln 2, so the perplexity is
    2^1.5 = 2.828..., the geometric mean of 2 and 4 (sqrt(8)), not their arithmetic mean 3."""
    logits = np.log(np.array([[0.5, 0.5], [0.25, 0.75]]))
    mean_nll = mt.CrossEntropyLoss()(logits, np.array([0, 0]))
    assert float(mean_nll) == pytest.approx(1.5 * math.log(2), rel=1e-12)
    assert perplexity(mean_nll) == pytest.approx(math.sqrt(8), rel=1e-12)


def test_a_certain_and_right_model_has_perplexity_one_and_the_package_exports_it():
    assert perplexity(0.0) == 1.0
    assert mt.perplexity is perplexity
    assert perplexity(np.float32(math.log(3))) == pytest.approx(3, rel=1e-6)


def test_overflow_is_infinite_not_an_error():
    assert perplexity(1e4) == math.inf


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_a_negative_or_nan_mean_nll_is_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"perplexity: mean_nll must be .*>= 0"):
        perplexity(bad)
