"""What bad input gets: a clear error naming the layer, what was expected and what was given."""

import re

import numpy as np
import pytest

from minitransformer import (
    GELU,
    GPT,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    FeedForward,
    LayerNorm,
    LearnedPositionalEmbedding,
    Linear,
    MultiHeadAttention,
    ReLU,
    ScaledDotProductAttention,
    SinusoidalPositionalEncoding,
    Softmax,
    TiedLMHead,
    TransformerBlock,
)


def test_wrong_feature_size_names_layer_expected_and_given():
    with pytest.raises(ValueError, match=r"Linear\(8 -> 4\) expected input \(\.\.\., 8\), got \(2, 5\)"):
        Linear(8, 4).forward(np.zeros((2, 5)))
    with pytest.raises(ValueError, match=r"LayerNorm\(6\) expected input \(\.\.\., 6\), got \(3, 4\)"):
        LayerNorm(6).forward(np.zeros((3, 4)))
    with pytest.raises(ValueError, match=r"MultiHeadAttention.*expected x \(B, T, 8\), got \(2, 3, 4\)"):
        MultiHeadAttention(8, 2).forward(np.zeros((2, 3, 4)))
    with pytest.raises(ValueError, match=r"ScaledDotProductAttention.*expected q"):
        ScaledDotProductAttention().forward(np.zeros((2, 3, 4)), np.zeros((2, 3, 5)), np.zeros((2, 3, 4)))


LAYERS = [
    Softmax(), Linear(3, 2), ReLU(), GELU(), LayerNorm(3), Dropout(0.1), Embedding(5, 3),
    SinusoidalPositionalEncoding(4, 5), LearnedPositionalEmbedding(5, 3), ScaledDotProductAttention(),
    MultiHeadAttention(4, 2), FeedForward(4, 8), TransformerBlock(4, 2, 8), CrossEntropyLoss(),
    TiedLMHead(Embedding(5, 3)), GPT(7, 4, 2, 1, 8, 5),
]


@pytest.mark.parametrize("layer", LAYERS, ids=lambda layer: type(layer).__name__)
def test_backward_before_forward_is_a_clear_error(layer):
    with pytest.raises(RuntimeError, match=r"backward\(\) called before forward\(\)"):
        layer.backward(np.ones((1, 2, 3)) if not isinstance(layer, CrossEntropyLoss) else 1.0)


def test_upstream_gradient_of_the_wrong_shape_is_not_broadcast():
    layer = Linear(3, 2)
    layer.forward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match=r"Linear\(3 -> 2\).backward expected dout of shape \(4, 2\), got \(1, 2\)"):
        layer.backward(np.ones((1, 2)))
    norm = LayerNorm(3)
    norm.forward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="expected dout of shape"):
        norm.backward(np.ones(3))


@pytest.mark.parametrize("layer, inputs, wrong_dout", [
    (GELU(), [np.zeros((4, 3))], np.ones(3)),
    (ScaledDotProductAttention(causal=True), [np.zeros((2, 5, 4))] * 3, np.ones((2, 1, 4))),
    (MultiHeadAttention(4, 2, causal=True), [np.zeros((2, 5, 4))], np.ones((1, 5, 4))),
], ids=["GELU", "ScaledDotProductAttention", "MultiHeadAttention"])
def test_layers_with_fast_backward_forms_refuse_a_broadcastable_dout(layer, inputs, wrong_dout):
    layer.forward(*inputs)
    with pytest.raises(ValueError, match=r"backward expected dout of shape \(.*\), got " + re.escape(str(wrong_dout.shape))):
        layer.backward(wrong_dout)


@pytest.mark.parametrize("ids, error, message", [
    (np.array([[0, -1]]), IndexError, r"Embedding\(5, 3\) expected token ids in \[0, 5\), got -1"),
    (np.array([[0, 5]]), IndexError, r"Embedding\(5, 3\) expected token ids in \[0, 5\), got 5"),
    (np.array([[0.0, 1.0]]), TypeError, r"Embedding\(5, 3\) expected integer token ids, got dtype float64"),
    (np.array([[True, False]]), TypeError, r"expected integer token ids, got dtype bool"),
])
def test_bad_token_ids(ids, error, message):
    with pytest.raises(error, match=message):
        Embedding(5, 3).forward(ids)


def test_bad_targets_and_shapes_in_the_loss():
    loss = CrossEntropyLoss()
    with pytest.raises(IndexError, match=r"CrossEntropyLoss\(\) \(targets\) expected token ids in \[0, 4\), got 4"):
        loss.forward(np.zeros((2, 4)), np.array([1, 4]))
    with pytest.raises(IndexError, match=r"got -2"):
        loss.forward(np.zeros((2, 4)), np.array([-2, 1]))
    with pytest.raises(ValueError, match=r"same leading shape, got logits \(2, 4\) and targets \(3,\)"):
        loss.forward(np.zeros((2, 4)), np.array([1, 2, 3]))
    with pytest.raises(ValueError, match="every target equals ignore_index"):
        CrossEntropyLoss(ignore_index=-1).forward(np.zeros((2, 4)), np.array([-1, -1]))


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="d_model divisible by n_heads, got d_model=10, n_heads=3"):
        MultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="d_model divisible by n_heads, got d_model=10, n_heads=4"):
        GPT(vocab_size=5, d_model=10, n_heads=4, n_layers=1, d_ff=8, max_len=4)


def test_sequence_longer_than_max_len():
    with pytest.raises(ValueError, match=r"GPT\(.*\) expected at most max_len=4 positions, got T=5"):
        GPT(vocab_size=5, d_model=4, n_heads=2, n_layers=1, d_ff=8, max_len=4).forward(np.zeros((1, 5), dtype=int))
    with pytest.raises(ValueError, match="at most max_len=3 positions, got T=4"):
        SinusoidalPositionalEncoding(4, 3).forward(np.zeros((1, 4, 4)))
    with pytest.raises(ValueError, match="at most max_len=3 positions, got T=4"):
        LearnedPositionalEmbedding(3, 4).forward(np.zeros((1, 4, 4)))


def test_bad_options():
    with pytest.raises(ValueError, match=r"Dropout expected 0 <= p < 1, got p=1.0"):
        Dropout(1.0)
    with pytest.raises(ValueError, match="activation in"):
        FeedForward(4, 8, activation="tanh")
    with pytest.raises(ValueError, match="norm 'pre' or 'post'"):
        TransformerBlock(4, 2, 8, norm="sandwich")
    with pytest.raises(ValueError, match="even d"):
        SinusoidalPositionalEncoding(5, 3)
    with pytest.raises(TypeError, match="bool mask"):
        ScaledDotProductAttention().forward(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"mask broadcastable to \(2, 2\), got \(3, 2\)"):
        ScaledDotProductAttention().forward(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3)),
                                            np.ones((3, 2), dtype=bool))


def test_extreme_float32_logits_stay_finite():
    logits = np.array([[1e4, -1e4, 0.0], [-1e4, -1e4, 1e4]], dtype=np.float32)
    probs = Softmax().forward(logits)
    assert probs.dtype == np.float32 and np.all(np.isfinite(probs))
    np.testing.assert_allclose(probs, [[1, 0, 0], [0, 0, 1]], atol=1e-6)
    loss = CrossEntropyLoss()
    value = loss.forward(logits, np.array([1, 2]))
    assert np.isfinite(value)
    np.testing.assert_allclose(value, 1e4, rtol=1e-6)             # -log p(target) = 2e4 for row 0, 0 for row 1
    assert np.all(np.isfinite(loss.backward()))


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


def test_a_block_with_an_unknown_norm_is_refused():
    with pytest.raises(ValueError, match="TransformerBlock expected norm 'pre' or 'post', got 'middle'"):
        TransformerBlock(4, 2, 8, norm="middle")
