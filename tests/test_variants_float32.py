"""Every variant layer runs in float32 and keeps float32 through forward and backward."""

import numpy as np
import pytest

from minitransformer import (
    GPT,
    BandedAttention,
    Linear,
    LoRALinear,
    RelativePositionAttention,
    RotaryEmbedding,
    TransformerXL,
    add_lora,
)


def _x(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layer, inputs", [
    (RotaryEmbedding(4), [_x(2, 3, 4)]),
    (BandedAttention(2), [_x(2, 5, 4), _x(2, 5, 4), _x(2, 5, 4)]),
    (RelativePositionAttention(4, 2, dtype=np.float32, rng=0), [_x(2, 5, 4), _x(2, 5, 4), _x(2, 5, 4)]),
    (RelativePositionAttention(4, 2, skewed=True, dtype=np.float32, rng=0), [_x(2, 5, 4), _x(2, 5, 4), _x(2, 5, 4)]),
    (LoRALinear(Linear(4, 3, dtype=np.float32, rng=0), 2, rng=0), [_x(2, 5, 4)]),
], ids=lambda value: type(value).__name__ if not isinstance(value, list) else "")
def test_layers_keep_float32(layer, inputs):
    out = layer(*inputs)
    assert out.dtype == np.float32
    grads = layer.backward(np.ones_like(out))
    for grad in grads if isinstance(grads, tuple) else (grads,):
        assert grad.dtype == np.float32
    for _, param in layer.named_parameters():
        assert param.grad.dtype == np.float32


@pytest.mark.parametrize("positional", ["rope", "alibi", "none"])
def test_gpt_variants_and_lora_in_float32(positional):
    model = GPT(9, 8, 4, 1, 16, 4, positional=positional, n_kv_heads=2, window=3, dtype=np.float32, rng=0)
    adapted = add_lora(model, r=2, targets=("w_q", "w_k", "w_v", "w_o"), rng=0)
    logits = adapted(np.zeros((2, 6), dtype=np.int64))
    assert logits.dtype == np.float32
    adapted.backward(np.ones_like(logits))
    assert all(param.grad.dtype == np.float32 for param in adapted.parameters())


def test_transformer_xl_in_float32():
    model = TransformerXL(9, 8, 2, 1, 16, mem_len=4, positional="rope", dtype=np.float32, rng=0)
    ids = np.zeros((2, 3), dtype=np.int64)
    model(ids)
    logits = model(ids, model.next_memories)
    assert logits.dtype == np.float32 and all(m.dtype == np.float32 for m in model.next_memories)
