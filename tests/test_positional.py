"""Positions (layers/positional.py): SinusoidalPositionalEncoding and LearnedPositionalEmbedding, in one file.

* definition: with an offset, the learned table's gradient lands on the rows that were used, by hand;
* gradients: the catalogue's rows of both layers, and the learned table with an offset, against
  central differences (float64, 1e-7);
* float32: agrees with float64 to 1e-5;
* bad input: a negative or too large start, more positions than max_len, an odd width for the
  sinusoidal table; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64

from minitransformer import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from minitransformer.gradcheck.checker import check_module

FACTORIES = {
    "SinusoidalPositionalEncoding": lambda dtype: SinusoidalPositionalEncoding(6, 8, dtype=dtype),
    "LearnedPositionalEmbedding": lambda dtype: LearnedPositionalEmbedding(8, 6, dtype=dtype, rng=0),
}


def test_learned_positions_send_the_gradient_to_the_rows_used_after_an_offset():
    layer = LearnedPositionalEmbedding(8, 4, rng=0)
    x = np.random.default_rng(1).standard_normal((2, 2, 4))
    layer.forward(x, start=3)
    layer.backward(np.ones_like(x))
    assert np.flatnonzero(np.abs(layer.weight.grad).sum(axis=1)).tolist() == [3, 4]
    np.testing.assert_array_equal(layer.weight.grad[3:5], np.full((2, 4), 2.0))     # summed over the batch


def test_learned_positions_with_an_offset_pass_the_gradient_check():
    layer = LearnedPositionalEmbedding(8, 4, rng=0)
    x = np.random.default_rng(1).standard_normal((2, 3, 4))
    check_module(layer, [x], forward=lambda x: layer.forward(x, start=2)).assert_ok(1e-7)


@pytest.mark.parametrize("layer", [SinusoidalPositionalEncoding(4, 6), LearnedPositionalEmbedding(6, 4)])
def test_negative_or_too_large_start_is_refused(layer):
    x = np.zeros((1, 1, 4))
    with pytest.raises(ValueError, match=r"expected start >= 0, got -1"):
        layer.forward(x, start=-1)
    with pytest.raises(ValueError, match=r"at most max_len=6 positions, got T=1 after start=6"):
        layer.forward(x, start=6)


@pytest.mark.parametrize("case", catalogue_cases("SinusoidalPositionalEncoding", "LearnedPositionalEmbedding"),
                         ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


@pytest.mark.parametrize("name", FACTORIES)
def test_float32_forward_and_backward_agree_with_float64(name):
    assert_float32_agrees_with_float64(FACTORIES[name], (2, 4, 6), name)


def test_sequence_longer_than_max_len():
    with pytest.raises(ValueError, match="at most max_len=3 positions, got T=4"):
        SinusoidalPositionalEncoding(4, 3).forward(np.zeros((1, 4, 4)))
    with pytest.raises(ValueError, match="at most max_len=3 positions, got T=4"):
        LearnedPositionalEmbedding(3, 4).forward(np.zeros((1, 4, 4)))


def test_sinusoidal_table_needs_an_even_width():
    with pytest.raises(ValueError, match="even d"):
        SinusoidalPositionalEncoding(5, 3)


@pytest.mark.parametrize("layer", [SinusoidalPositionalEncoding(4, 5), LearnedPositionalEmbedding(5, 3)],
                         ids=lambda layer: type(layer).__name__)
def test_backward_before_forward_is_a_clear_error(layer):
    assert_backward_before_forward_is_refused(layer)


# ---------------------------------------------------------------- sinusoidal positions have no length limit (issue 24)
def test_extended_sinusoidal_rows_past_max_len_are_the_formula_by_hand():
    """Vaswani et al. (2017) §3.5: P[n, 2k] = sin(n / 10000^(2k/d)), P[n, 2k+1] = cos(n / 10000^(2k/d)), for any n.
    With extend=True the rows past the stored table are computed on demand and equal the formula, written here
    one entry at a time; rows that straddle the table's end agree bit for bit with a longer table."""
    import math

    d, max_len = 6, 4
    layer = SinusoidalPositionalEncoding(d, max_len, extend=True)
    rows = layer.forward(np.zeros((1, 5, d)), start=7)[0]                     # positions 7 .. 11, all past 4
    for t, n in enumerate(range(7, 12)):
        for k in range(d // 2):
            angle = n / 10000 ** (2 * k / d)
            assert rows[t, 2 * k] == pytest.approx(math.sin(angle), abs=1e-15)
            assert rows[t, 2 * k + 1] == pytest.approx(math.cos(angle), abs=1e-15)
    straddling = layer.forward(np.zeros((2, 6, d)), start=1)                   # positions 1 .. 6
    np.testing.assert_array_equal(straddling[0], SinusoidalPositionalEncoding(d, 7).table[1:7])
    assert layer.backward(np.ones((2, 6, d))).shape == (2, 6, d)               # dx = dout, any length


def test_extended_rows_keep_the_tables_dtype_and_without_extend_the_limit_stays():
    layer = SinusoidalPositionalEncoding(4, 3, dtype=np.float32, extend=True)
    assert layer.forward(np.zeros((1, 9, 4), dtype=np.float32)).dtype == np.float32
    assert "extend=True" in repr(layer)
    with pytest.raises(ValueError, match="expected start >= 0, got -1"):
        layer.forward(np.zeros((1, 1, 4)), start=-1)
    with pytest.raises(ValueError, match="at most max_len=3 positions, got T=4"):
        SinusoidalPositionalEncoding(4, 3).forward(np.zeros((1, 4, 4)))
