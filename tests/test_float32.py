"""float32 works end to end and agrees with float64 to about 1e-5.

Each layer is built twice from the same seed, once per dtype (the float32
weights are the float64 ones rounded), and fed the same input in each dtype.
"""

import numpy as np
import pytest

from minitransformer import (
    GELU,
    GPT,
    CrossEntropyLoss,
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
    TransformerBlock,
)

FACTORIES = {
    "Softmax": (lambda dtype: Softmax(), (2, 3, 5)),
    "Linear": (lambda dtype: Linear(5, 4, dtype=dtype, rng=0), (2, 3, 5)),
    "ReLU": (lambda dtype: ReLU(), (2, 3, 5)),
    "GELU": (lambda dtype: GELU(), (2, 3, 5)),
    "LayerNorm": (lambda dtype: LayerNorm(5, dtype=dtype), (2, 3, 5)),
    "SinusoidalPositionalEncoding": (lambda dtype: SinusoidalPositionalEncoding(6, 8, dtype=dtype), (2, 4, 6)),
    "LearnedPositionalEmbedding": (lambda dtype: LearnedPositionalEmbedding(8, 6, dtype=dtype, rng=0), (2, 4, 6)),
    "MultiHeadAttention": (lambda dtype: MultiHeadAttention(8, 2, causal=True, dtype=dtype, rng=0), (2, 5, 8)),
    "FeedForward": (lambda dtype: FeedForward(8, 16, activation="gelu", dtype=dtype, rng=0), (2, 5, 8)),
    "TransformerBlock": (lambda dtype: TransformerBlock(8, 2, 16, dtype=dtype, rng=0), (2, 5, 8)),
}


def assert_close_in_float32(y32, y64, what):
    assert y32.dtype == np.float32, f"{what} returned {y32.dtype} for float32 input"
    scale = max(1.0, float(np.max(np.abs(y64))))
    error = float(np.max(np.abs(y32.astype(np.float64) - y64))) / scale
    assert error < 1e-5, f"{what}: float32 differs from float64 by {error:.1e} (relative to max |y|)"


@pytest.mark.parametrize("name", FACTORIES)
def test_float32_forward_and_backward_agree_with_float64(name):
    factory, shape = FACTORIES[name]
    x = np.random.default_rng(0).standard_normal(shape)
    layer64, layer32 = factory(np.float64), factory(np.float32)
    y64, y32 = layer64.forward(x), layer32.forward(x.astype(np.float32))
    assert_close_in_float32(y32, y64, f"{name}.forward")
    dout = np.random.default_rng(1).standard_normal(y64.shape)
    dx64, dx32 = layer64.backward(dout), layer32.backward(dout.astype(np.float32))
    assert_close_in_float32(dx32, dx64, f"{name}.backward")


def test_attention_and_loss_in_float32():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 4, 3)) for _ in range(3))
    y64 = ScaledDotProductAttention(causal=True).forward(q, k, v)
    y32 = ScaledDotProductAttention(causal=True).forward(*(a.astype(np.float32) for a in (q, k, v)))
    assert_close_in_float32(y32, y64, "ScaledDotProductAttention")
    logits, targets = rng.standard_normal((6, 7)) * 3, rng.integers(0, 7, size=6)
    loss32 = CrossEntropyLoss()
    value32 = loss32.forward(logits.astype(np.float32), targets)
    assert value32.dtype == np.float32
    np.testing.assert_allclose(value32, CrossEntropyLoss().forward(logits, targets), rtol=1e-5)
    assert loss32.backward().dtype == np.float32


def test_tiny_gpt_in_float32_matches_float64():
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 6))
    config = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6, rng=3)
    model64, model32 = GPT(**config), GPT(**config, dtype=np.float32)
    assert_close_in_float32(model32.forward(ids), model64.forward(ids), "GPT.forward")
    assert Embedding(3, 2, dtype=np.float32).forward(np.array([[0, 2]])).dtype == np.float32
