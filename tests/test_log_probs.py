"""TokenLogProbs: log softmax(logits)[token] per position, against the cross-entropy and by finite differences."""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer import CrossEntropyLoss
from minitransformer.layers.log_probs import TokenLogProbs


@pytest.mark.parametrize("case", catalogue_cases("TokenLogProbs"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


def test_each_entry_is_minus_the_cross_entropy_of_its_position():
    rng = np.random.default_rng(0)
    logits, tokens = rng.standard_normal((2, 3, 5)) * 3, rng.integers(0, 5, (2, 3))
    logp = TokenLogProbs()(logits, tokens)
    for b in range(2):
        for t in range(3):
            assert logp[b, t] == pytest.approx(-CrossEntropyLoss()(logits[b, t][None], tokens[b, t][None]))


def test_probabilities_of_every_token_sum_to_one_and_by_hand():
    logits = np.array([[[0.0, np.log(3.0)]]])                           # softmax (1/4, 3/4)
    layer = TokenLogProbs()
    assert layer(logits, np.array([[1]]))[0, 0] == pytest.approx(np.log(0.75))
    assert np.exp([layer(logits, np.array([[v]]))[0, 0] for v in (0, 1)]).sum() == pytest.approx(1.0)
    assert np.isfinite(layer(np.array([[[1e4, -1e4]]]), np.array([[1]]))).all()


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match=r"TokenLogProbs\(\) expected logits \(..., V\) and tokens"):
        TokenLogProbs()(np.zeros((2, 3, 5)), np.zeros((2, 4), dtype=int))
    with pytest.raises(IndexError, match=r"TokenLogProbs\(\) \(tokens\) expected token ids in \[0, 5\), got 5"):
        TokenLogProbs()(np.zeros((2, 3, 5)), np.full((2, 3), 5))
    with pytest.raises(RuntimeError, match="before forward"):
        TokenLogProbs().backward(np.zeros((2, 3)))
