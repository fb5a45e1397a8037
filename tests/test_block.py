"""The Transformer block (layers/block.py): everything that pins it, in one file.

* definition: PyTorch's `nn.TransformerEncoderLayer` with a causal mask, pre- and post-norm, ReLU and
  GELU (parity, 1e-10); the Llama-style block (RMSNorm, SwiGLU, no biases) against the same sums
  written with torch ops (`F.rms_norm`, `F.scaled_dot_product_attention`, `F.silu`);
* gradients: the catalogue's TransformerBlock rows (pre-, post-norm, dropout, encoder with key padding)
  against central differences (float64, 1e-7);
* float32: agrees with float64 to 1e-5;
* bad input: an unknown norm, norm layer or activation; backward before forward.
"""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_float32_agrees_with_float64
from _torch_parity import (
    F,
    assert_matches_torch,
    block_weights,
    functional_call,
    future_masked,
    requires_torch,
    shift_vectors,
    torch,
)

from minitransformer import TransformerBlock


# ---------------------------------------------------------------- definition
@requires_torch
@pytest.mark.parametrize("norm, activation", [("pre", "gelu"), ("pre", "relu"), ("post", "relu")])
def test_transformer_block_is_torchs_encoder_layer_with_a_causal_mask(norm, activation):
    rng = np.random.default_rng(13)
    block = shift_vectors(TransformerBlock(12, 3, 20, norm=norm, causal=True, activation=activation, rng=rng), rng)
    act = (lambda x: F.gelu(x, approximate="tanh")) if activation == "gelu" else F.relu
    reference = torch.nn.TransformerEncoderLayer(12, 3, dim_feedforward=20, dropout=0.0, activation=act,
                                                 layer_norm_eps=1e-5, batch_first=True, norm_first=(norm == "pre"),
                                                 dtype=torch.float64)

    def forward(t, leaves):
        params = block_weights(leaves, {"attn.": "self_attn."}, {"ln1": "norm1", "ln2": "norm2"})
        return functional_call(reference, params, (t[0],), {"src_mask": future_masked(6)})
    assert_matches_torch(block, [rng.standard_normal((2, 6, 12))], forward)


def _torch_llama_block(x, leaves, n_heads):
    """h = x + attn(rms_norm(x)); y = h + swiglu(rms_norm(h)), causal, no biases, with torch ops."""
    B, T, C = x.shape

    def heads(y):
        return y.reshape(B, T, n_heads, C // n_heads).transpose(1, 2)             # (B, H, T, hs)
    normed = F.rms_norm(x, (C,), weight=leaves["ln1.gamma"], eps=1e-5)
    q, k, v = (heads(normed @ leaves[f"attn.w_{name}"]) for name in "qkv")
    attended = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, C)
    h = x + attended @ leaves["attn.w_o"]
    normed = F.rms_norm(h, (C,), weight=leaves["ln2.gamma"], eps=1e-5)
    gated = F.silu(normed @ leaves["ff.w1.weight"]) * (normed @ leaves["ff.w3.weight"])
    return h + gated @ leaves["ff.w2.weight"]


@requires_torch
def test_llama_style_block_is_the_same_sums_in_torch():
    rng = np.random.default_rng(21)
    block = shift_vectors(TransformerBlock(12, 3, 20, activation="swiglu", norm_layer="rmsnorm", bias=False, rng=rng),
                          rng)
    assert not any(name.endswith(("bias", "beta")) or "b_" in name for name, _ in block.named_parameters())
    assert_matches_torch(block, [rng.standard_normal((2, 6, 12))], lambda t, leaves: _torch_llama_block(t[0], leaves, 3))


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("case", catalogue_cases("TransformerBlock"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


# ---------------------------------------------------------------- float32
def test_float32_forward_and_backward_agree_with_float64():
    assert_float32_agrees_with_float64(lambda dtype: TransformerBlock(8, 2, 16, dtype=dtype, rng=0), (2, 5, 8),
                                       "TransformerBlock")


# ---------------------------------------------------------------- bad input
def test_a_block_with_an_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="norm 'pre' or 'post'"):
        TransformerBlock(4, 2, 8, norm="sandwich")
    with pytest.raises(ValueError, match="TransformerBlock expected norm 'pre' or 'post', got 'middle'"):
        TransformerBlock(4, 2, 8, norm="middle")


def test_an_unknown_norm_layer_or_activation_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"TransformerBlock expected norm_layer in \['layernorm', 'rmsnorm'\], got 'rms'"):
        TransformerBlock(4, 2, 8, norm_layer="rms")
    with pytest.raises(ValueError, match=r"TransformerBlock expected activation in \['relu', 'gelu', 'swiglu'\], got 'geglu'"):
        TransformerBlock(4, 2, 8, activation="geglu")


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(TransformerBlock(4, 2, 8))


# ---------------------------------------------------------------- definition by hand (no PyTorch needed)
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_the_residual_arrangement_by_hand(norm):
    """Pre-norm (GPT-2; May's notes §1.3): h = x + attn(LN1(x)), y = h + ff(LN2(h)). Post-norm (Vaswani et al.
    2017 §3.1; Wu and Strabel §2.4 call it the original): h = LN1(x + attn(x)), y = LN2(h + ff(h)). Written with
    the block's own sublayers, each called on its own."""
    rng = np.random.default_rng(8)
    block = TransformerBlock(8, 2, 16, norm=norm, rng=0)
    for ln in (block.ln1, block.ln2):
        ln.gamma.data[...] = rng.uniform(0.5, 1.5, 8)
        ln.beta.data[...] = rng.standard_normal(8)
    x = rng.standard_normal((2, 5, 8))
    if norm == "pre":
        h = x + block.attn(block.ln1(x))
        expected = h + block.ff(block.ln2(h))
    else:
        h = block.ln1(x + block.attn(x))
        expected = block.ln2(h + block.ff(h))
    np.testing.assert_allclose(block(x), expected, rtol=1e-13, atol=1e-14)
