"""The worked self-attention example of the lecture notes (seed 002 / 000, §1.1).

Inputs x1 = [1,0,1,0], x2 = [0,2,0,2], x3 = [1,1,1,1] (from the figure the
text refers to) with the notes' query, key and value matrices give, for the
first position, raw scores [2, 4, 4], weights softmax([2, 4, 4]) = [.06, .47, .47]
and output [1.9, 6.7, 1.6]. The printed example is unscaled, so `scale=1.0`.
"""

import numpy as np

from minitransformer import ScaledDotProductAttention, softmax

X = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], dtype=float)
W_K = np.array([[0, 0.5, 0.5], [1, 1, 0], [0, 0.5, 0.5], [1, 1, 0]])
W_Q = np.array([[0.5, 0, 1], [0, 0, 0], [0.5, 0, 1], [0, 0, 0]])
W_V = np.array([[0.5, 1, 1.5], [0.5, 2, 0], [0.5, 1, 1.5], [0.5, 2, 0]])


def test_first_position_matches_the_printed_numbers():
    q, k, v = X @ W_Q, X @ W_K, X @ W_V
    np.testing.assert_array_equal(q[0] @ k.T, [2, 4, 4])
    np.testing.assert_allclose(softmax(np.array([2.0, 4.0, 4.0])), [0.06, 0.47, 0.47], atol=0.005)
    attention = ScaledDotProductAttention(scale=1.0)
    out = attention.forward(q, k, v)
    np.testing.assert_allclose(attention.alpha[0], [0.06, 0.47, 0.47], atol=0.005)
    np.testing.assert_allclose(out[0], [1.9, 6.7, 1.6], atol=0.05)
    np.testing.assert_allclose(out[0], [1.93662, 6.68311, 1.59507], atol=1e-5)   # the unrounded values


def test_footnote_6_scaling_changes_the_weights():
    q, k, v = X @ W_Q, X @ W_K, X @ W_V
    scaled = ScaledDotProductAttention()                        # 1/sqrt(d_k), d_k = 3
    scaled.forward(q, k, v)
    np.testing.assert_allclose(scaled.alpha[0], softmax(np.array([2.0, 4.0, 4.0]) / np.sqrt(3)))
    assert scaled.alpha[0, 0] > 0.06                            # a flatter distribution than unscaled
