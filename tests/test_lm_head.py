"""The tied output projection (layers/lm_head.py): everything that pins it, in one file.

* definition, by hand: logits = h E^T with E the embedding's own table (the same Parameter, not a
  copy), and E's gradient gains dlogits^T h on top of what it already holds;
* gradients: the catalogue's TiedLMHead rows against central differences (float64, 1e-7);
* bad input: something other than an Embedding to tie to; a wrong width; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused

from minitransformer import Embedding, TiedLMHead


# ---------------------------------------------------------------- definition
def test_logits_are_h_times_the_embedding_table_transposed_and_the_gradient_adds_to_it():
    rng = np.random.default_rng(0)
    embedding = Embedding(5, 3, rng=rng)
    head = TiedLMHead(embedding)
    assert head.weight is embedding.weight
    h, dlogits = rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 5))
    np.testing.assert_allclose(head(h), np.einsum("btc,vc->btv", h, embedding.weight.data), rtol=1e-12)
    embedding.weight.grad[...] = 1.0                             # what the lookup already added
    dh = head.backward(dlogits)
    np.testing.assert_allclose(dh, np.einsum("btv,vc->btc", dlogits, embedding.weight.data), rtol=1e-12)
    np.testing.assert_allclose(embedding.weight.grad, 1.0 + np.einsum("btv,btc->vc", dlogits, h), rtol=1e-12)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("TiedLMHead"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- bad input
def test_only_an_embedding_can_be_tied():
    with pytest.raises(TypeError, match="TiedLMHead expected an Embedding, got ndarray"):
        TiedLMHead(np.zeros((5, 3)))


def test_wrong_width_names_layer_expected_and_given():
    with pytest.raises(ValueError, match=r"TiedLMHead\(C=3 -> V=5\) expected input \(\.\.\., 3\), got \(2, 4\)"):
        TiedLMHead(Embedding(5, 3)).forward(np.zeros((2, 4)))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(TiedLMHead(Embedding(5, 3)))
