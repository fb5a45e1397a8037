"""Scaled dot-product attention (layers/attention.py): everything that pins it, in one file.

* definition: PyTorch's `scaled_dot_product_attention` (parity, 1e-10) without a mask, causal (our
  rule aligns the queries to the end of the keys: torch's `causal_lower_right`, not its `is_causal`),
  with a user mask; and the worked example of May's notes "Transformer Language Models" (2025 and 2024,
  §1.1), by hand;
* gradients: the catalogue's ScaledDotProductAttention rows against central differences (float64, 1e-7);
* properties (hypothesis): causal attention ignores the future and sends it no gradient;
* float32: agrees with float64 to 1e-5;
* bad input: q and k of different widths, a broadcastable dout, a mask that is not bool or does not
  broadcast; a fully masked row gives zeros, not NaN; backward before forward.
"""

import re

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_close_in_float32, seeds
from _torch_parity import F, assert_matches_torch, requires_torch, torch
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import ScaledDotProductAttention, rel_error, softmax


# ---------------------------------------------------------------- definition: PyTorch
@requires_torch
@pytest.mark.parametrize("causal, Tq, Tk, scale", [(False, 5, 7, None), (True, 6, 6, None), (True, 3, 7, None),
                                                    (False, 4, 4, 1.0)])
def test_matches_torch(causal, Tq, Tk, scale):
    """Our causal rule aligns the queries to the end of the keys: torch's `causal_lower_right`."""
    from torch.nn.attention.bias import causal_lower_right
    rng = np.random.default_rng(8)
    q, k, v = (rng.standard_normal((2, 3, T, 4)) for T in (Tq, Tk, Tk))

    def reference(t, leaves):
        mask = causal_lower_right(Tq, Tk) if causal else None
        return F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=mask, scale=scale)
    assert_matches_torch(ScaledDotProductAttention(causal=causal, scale=scale), [q, k, v], reference)


@requires_torch
def test_causal_attention_with_fewer_queries_is_not_torchs_top_left_is_causal():
    """torch's `is_causal=True` aligns query 0 with key 0; for Tq < Tk that is a different rule from ours."""
    rng = np.random.default_rng(9)
    q, k, v = rng.standard_normal((1, 3, 4)), rng.standard_normal((1, 6, 4)), rng.standard_normal((1, 6, 4))
    top_left = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, k, v)), is_causal=True).numpy()
    assert rel_error(ScaledDotProductAttention(causal=True)(q, k, v), top_left) > 1e-3


class _MaskedAttention(ScaledDotProductAttention):
    """Attention with a fixed user mask, so that forward takes q, k, v only."""

    def __init__(self, mask):
        super().__init__()
        self.mask = mask

    def forward(self, q, k, v):
        return super().forward(q, k, v, mask=self.mask)


@requires_torch
def test_attention_with_a_user_mask_matches_torch():
    """A bool mask means the same in both libraries: True = may attend."""
    rng = np.random.default_rng(10)
    q, k, v = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 6, 3)), rng.standard_normal((2, 6, 3))
    mask = rng.random((2, 5, 6)) < 0.6
    mask[..., 0] = True                                    # no query is left with nothing to see

    assert_matches_torch(_MaskedAttention(mask), [q, k, v],
                         lambda t, leaves: F.scaled_dot_product_attention(t[0], t[1], t[2], attn_mask=torch.from_numpy(mask)))


# ---------------------------------------------------------------- definition: the lecture's worked example
# The worked self-attention example of May's notes "Transformer Language Models" (2025 and 2024, §1.1).
# Inputs x1 = [1,0,1,0], x2 = [0,2,0,2], x3 = [1,1,1,1] (from the figure the text refers to) with the notes'
# query, key and value matrices give, for the first position, raw scores [2, 4, 4], weights
# softmax([2, 4, 4]) = [.06, .47, .47] and output [1.9, 6.7, 1.6]. The printed example is unscaled, so `scale=1.0`.
X = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], dtype=float)
W_K = np.array([[0, 0.5, 0.5], [1, 1, 0], [0, 0.5, 0.5], [1, 1, 0]])
W_Q = np.array([[0.5, 0, 1], [0, 0, 0], [0.5, 0, 1], [0, 0, 0]])
W_V = np.array([[0.5, 1, 1.5], [0.5, 2, 0], [0.5, 1, 1.5], [0.5, 2, 0]])


def test_lecture_example_first_position_matches_the_printed_numbers():
    q, k, v = X @ W_Q, X @ W_K, X @ W_V
    np.testing.assert_array_equal(q[0] @ k.T, [2, 4, 4])
    np.testing.assert_allclose(softmax(np.array([2.0, 4.0, 4.0])), [0.06, 0.47, 0.47], atol=0.005)
    attention = ScaledDotProductAttention(scale=1.0)
    out = attention.forward(q, k, v)
    np.testing.assert_allclose(attention.alpha[0], [0.06, 0.47, 0.47], atol=0.005)
    np.testing.assert_allclose(out[0], [1.9, 6.7, 1.6], atol=0.05)
    np.testing.assert_allclose(out[0], [1.93662, 6.68311, 1.59507], atol=1e-5)   # the unrounded values


def test_lecture_example_footnote_6_scaling_changes_the_weights():
    q, k, v = X @ W_Q, X @ W_K, X @ W_V
    scaled = ScaledDotProductAttention()                        # 1/sqrt(d_k), d_k = 3
    scaled.forward(q, k, v)
    np.testing.assert_allclose(scaled.alpha[0], softmax(np.array([2.0, 4.0, 4.0]) / np.sqrt(3)))
    assert scaled.alpha[0, 0] > 0.06                            # a flatter distribution than unscaled


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("ScaledDotProductAttention"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- properties
@given(st.integers(1, 3), st.integers(2, 7), st.integers(1, 4), seeds, st.data())
def test_causal_attention_ignores_the_future(B, T, d, seed, data):
    """Changing keys/values at positions > t changes nothing at t, and sends no gradient there."""
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((B, T, d)) for _ in range(3))
    t = data.draw(st.integers(0, T - 2))
    attention = ScaledDotProductAttention(causal=True)
    before = attention.forward(q, k, v)
    k2, v2 = k.copy(), v.copy()
    k2[:, t + 1:] += rng.standard_normal(k2[:, t + 1:].shape) * 10
    v2[:, t + 1:] += rng.standard_normal(v2[:, t + 1:].shape) * 10
    after = attention.forward(q, k2, v2)
    np.testing.assert_allclose(after[:, : t + 1], before[:, : t + 1], atol=1e-12)
    dout = np.zeros((B, T, d))
    dout[:, t] = 1.0
    _, dk, dv = attention.backward(dout)
    assert not dk[:, t + 1:].any() and not dv[:, t + 1:].any()


# ---------------------------------------------------------------- float32
def test_attention_in_float32():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 3)) for _ in range(3))
    y64 = ScaledDotProductAttention(causal=True).forward(q, k, v)
    y32 = ScaledDotProductAttention(causal=True).forward(*(a.astype(np.float32) for a in (q, k, v)))
    assert_close_in_float32(y32, y64, "ScaledDotProductAttention")


# ---------------------------------------------------------------- bad input
def test_q_and_k_of_different_widths_are_refused():
    with pytest.raises(ValueError, match=r"ScaledDotProductAttention.*expected q"):
        ScaledDotProductAttention().forward(np.zeros((2, 3, 4)), np.zeros((2, 3, 5)), np.zeros((2, 3, 4)))


def test_refuses_a_broadcastable_dout():
    layer, wrong_dout = ScaledDotProductAttention(causal=True), np.ones((2, 1, 4))
    layer.forward(*[np.zeros((2, 5, 4))] * 3)
    with pytest.raises(ValueError, match=r"backward expected dout of shape \(.*\), got " + re.escape(str(wrong_dout.shape))):
        layer.backward(wrong_dout)


def test_bad_masks_are_refused():
    with pytest.raises(TypeError, match="bool mask"):
        ScaledDotProductAttention().forward(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"mask broadcastable to \(2, 2\), got \(3, 2\)"):
        ScaledDotProductAttention().forward(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)),
                                            np.ones((3, 2), dtype=bool))


def test_fully_masked_row_gives_zero_weights_zero_output_zero_gradient():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal((5, 2))
    mask = np.ones((3, 5), dtype=bool)
    mask[1] = False                                              # query 1 may see nothing
    attention = ScaledDotProductAttention()
    out = attention.forward(q, k, v, mask)
    assert np.all(np.isfinite(out))
    np.testing.assert_array_equal(attention.alpha[1], 0.0)
    np.testing.assert_array_equal(out[1], 0.0)
    np.testing.assert_allclose(attention.alpha[[0, 2]].sum(axis=-1), 1.0)
    dq, dk, dv = attention.backward(np.ones((3, 2)))
    np.testing.assert_array_equal(dq[1], 0.0)
    assert all(np.all(np.isfinite(g)) for g in (dq, dk, dv))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(ScaledDotProductAttention())
