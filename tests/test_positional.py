"""Position tables with an offset: the gradient lands on the rows that were used; a negative offset is refused."""

import numpy as np
import pytest

from minitransformer import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from minitransformer.gradcheck.checker import check_module


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
