"""Embedding (layers/embedding.py): everything that pins it, in one file.

* definition: PyTorch's `nn.Embedding`, a repeated id collecting every contribution (parity, 1e-10);
* gradients: the catalogue's Embedding rows against central differences (float64, 1e-7);
* float32: a float32 table looks up float32 vectors;
* bad input: token ids out of range (negative ones are not wrapped), float or bool ids; backward
  before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused
from _torch_parity import assert_matches_torch, functional_call, requires_torch, torch

from minitransformer import Embedding


# ---------------------------------------------------------------- definition
@requires_torch
def test_matches_torch_with_repeated_ids():
    rng = np.random.default_rng(6)
    layer = Embedding(9, 5, rng=rng)
    ids = rng.integers(0, 9, size=(3, 7))
    ids[0, :3] = 4                                         # a repeated id receives every contribution
    reference = torch.nn.Embedding(9, 5, dtype=torch.float64)
    assert_matches_torch(layer, [ids], lambda t, leaves: functional_call(reference, {"weight": leaves["weight"]}, (t[0],)))


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("Embedding"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- float32
def test_float32_table_looks_up_float32():
    assert Embedding(3, 2, dtype=np.float32).forward(np.array([[0, 2]])).dtype == np.float32


# ---------------------------------------------------------------- bad input
@pytest.mark.parametrize("ids, error, message", [
    (np.array([[0, -1]]), IndexError, r"Embedding\(5, 3\) expected token ids in \[0, 5\), got -1"),
    (np.array([[0, 5]]), IndexError, r"Embedding\(5, 3\) expected token ids in \[0, 5\), got 5"),
    (np.array([[0.0, 1.0]]), TypeError, r"Embedding\(5, 3\) expected integer token ids, got dtype float64"),
    (np.array([[True, False]]), TypeError, r"expected integer token ids, got dtype bool"),
])
def test_bad_token_ids(ids, error, message):
    with pytest.raises(error, match=message):
        Embedding(5, 3).forward(ids)


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(Embedding(5, 3))


def test_initial_table_has_gpt2s_standard_deviation_0_02():
    """GPT-2 (Radford et al. 2019; its released code's initializer_range) draws every table from N(0, 0.02^2)."""
    table = Embedding(2000, 50, rng=0).weight.data                              # 100 000 draws
    assert table.std() == pytest.approx(0.02, rel=0.01)
    assert abs(table.mean()) < 0.02 * 0.01
