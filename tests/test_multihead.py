"""Multi-head attention (layers/multihead.py): everything that pins it, in one file.

* definition: PyTorch's `nn.MultiheadAttention`, self-attention with and without the causal mask and
  cross-attention, its fused in_proj built from our w_q, w_k, w_v (parity, 1e-10);
* gradients: the catalogue's MultiHeadAttention rows (self, cross, with key padding) against central
  differences (float64, 1e-7);
* properties (hypothesis): causal self-attention ignores future tokens;
* float32: agrees with float64 to 1e-5;
* bad input: a wrong width names the layer; heads that do not divide the width; a broadcastable dout;
  backward before forward.
"""

import re

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64, seeds
from _torch_parity import assert_matches_torch, attention_weights, functional_call, future_masked, requires_torch, torch
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import MultiHeadAttention


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_torch(causal):
    rng = np.random.default_rng(11)
    layer = MultiHeadAttention(12, 3, causal=causal, rng=rng)
    for bias in (layer.b_q, layer.b_k, layer.b_v, layer.b_o):
        bias.data[...] = rng.standard_normal(12)
    reference = torch.nn.MultiheadAttention(12, 3, batch_first=True, dtype=torch.float64)

    def forward(t, leaves):
        mask = future_masked(5) if causal else None
        out, _ = functional_call(reference, attention_weights(leaves, "", ""), (t[0], t[0], t[0]),
                                 {"attn_mask": mask, "need_weights": False})
        return out
    assert_matches_torch(layer, [rng.standard_normal((2, 5, 12))], forward)


@requires_torch
def test_cross_attention_matches_torch():
    rng = np.random.default_rng(12)
    layer = MultiHeadAttention(8, 2, rng=rng)
    reference = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)

    def forward(t, leaves):
        out, _ = functional_call(reference, attention_weights(leaves, "", ""), (t[0], t[1], t[1]),
                                 {"need_weights": False})
        return out
    assert_matches_torch(layer, [rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 6, 8))], forward)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("MultiHeadAttention"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- properties
@given(st.integers(2, 6), seeds)
def test_causal_multihead_ignores_future_tokens(T, seed):
    rng = np.random.default_rng(seed)
    layer = MultiHeadAttention(8, 2, causal=True, rng=seed)
    x = rng.standard_normal((2, T, 8))
    x2 = x.copy()
    x2[:, -1] += 5.0
    np.testing.assert_allclose(layer.forward(x)[:, :-1], layer.forward(x2)[:, :-1], atol=1e-12)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: MultiHeadAttention(8, 2, causal=True, dtype=dtype, rng=0),
                                       (2, 5, 8), "MultiHeadAttention")


# ---------------------------------------------------------------- bad input
def test_wrong_width_names_layer_expected_and_given():
    with pytest.raises(ValueError, match=r"MultiHeadAttention.*expected x \(B, T, 8\), got \(2, 3, 4\)"):
        MultiHeadAttention(8, 2).forward(np.zeros((2, 3, 4)))


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="d_model divisible by n_heads, got d_model=10, n_heads=3"):
        MultiHeadAttention(10, 3)


def test_refuses_a_broadcastable_dout():
    layer, wrong_dout = MultiHeadAttention(4, 2, causal=True), np.ones((1, 5, 4))
    layer.forward(np.zeros((2, 5, 4)))
    with pytest.raises(ValueError, match=r"backward expected dout of shape \(.*\), got " + re.escape(str(wrong_dout.shape))):
        layer.backward(wrong_dout)


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(MultiHeadAttention(4, 2))


# ---------------------------------------------------------------- definition by hand (no PyTorch needed)
def test_each_head_by_hand_and_concatenation_then_w_o_is_the_sum_over_heads():
    """Vaswani et al. (2017) §3.2.2: head h uses columns h*hs .. (h+1)*hs of W_Q, W_K, W_V, attends with
    softmax(q k^T / sqrt(hs)) under the causal mask, and out = concat(head_1 .. head_H) W_O + b_O. The same
    product, cut by rows of W_O, is sum_h head_h W_O[h*hs:(h+1)*hs] + b_O (May's notes §1.2, Wu's slides,
    Strabel §2.2). Written with one loop over heads, none of the layer's reshapes."""
    import math

    rng = np.random.default_rng(5)
    C, H, T = 6, 3, 4
    hs = C // H
    layer = MultiHeadAttention(C, H, causal=True, rng=1)
    for bias in (layer.b_q, layer.b_k, layer.b_v, layer.b_o):
        bias.data[...] = rng.standard_normal(C)
    x = rng.standard_normal((2, T, C))
    future = np.triu(np.ones((T, T), dtype=bool), k=1)
    heads = []
    for h in range(H):
        cols = slice(h * hs, (h + 1) * hs)
        q, k, v = (x @ w.data[:, cols] + b.data[cols] for w, b in ((layer.w_q, layer.b_q), (layer.w_k, layer.b_k),
                                                                     (layer.w_v, layer.b_v)))
        scores = np.where(future, -np.inf, q @ k.transpose(0, 2, 1) / math.sqrt(hs))      # (B, T, T)
        weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
        heads.append(weights / weights.sum(axis=-1, keepdims=True) @ v)                     # (B, T, hs)
    concatenated = np.concatenate(heads, axis=-1) @ layer.w_o.data + layer.b_o.data
    summed = sum(heads[h] @ layer.w_o.data[h * hs:(h + 1) * hs] for h in range(H)) + layer.b_o.data
    np.testing.assert_allclose(layer(x), concatenated, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(summed, concatenated, rtol=1e-12, atol=1e-14)
