"""Gradient checks of the attention and position variants, two or more shapes each.

`all_cases()` (this package's __init__) joins them to the catalogue, so `python -m
minitransformer gradcheck` and tests/test_gradients.py run them with the core layers. Adapter
factors B start at zero in LoRA; the cases fill them with random numbers so
that the gradient of A is not trivially zero.
"""

import numpy as np

from ...layers.attention import ScaledDotProductAttention
from ...layers.linear import Linear
from ...layers.multihead import MultiHeadAttention
from ...models.gpt import GPT
from ...variants.alibi import ALiBi
from ...variants.attention_positions import attention_position
from ...variants.lora import LoRALinear, add_lora
from ...variants.relative_position import RelativePositionAttention
from ...variants.relative_values import RelativeValueAttention
from ...variants.rope import RotaryEmbedding
from ...variants.sliding_window import BandedAttention
from ...variants.sparse_masks import fixed_masks, longformer_mask, strided_masks
from ...variants.tiled_attention import TiledAttention
from ...variants.transformer_xl import TransformerXL, TransformerXLBlock
from .case import GradcheckCase, WithLoss, normal, perturb


def _rope_offset_case(rng):
    layer = RotaryEmbedding(4)
    return layer, [normal(rng, 5, 4)], lambda x: layer.forward(x, offset=7)


def _mha_variant_case(B, T, S, C, H, cross=False, positional=None, **options):
    def build(rng):
        position = attention_position(positional, C, H)
        layer = perturb(MultiHeadAttention(C, H, causal=True, rng=rng, position=position, **options), rng, 0.1)
        inputs = [normal(rng, B, T, C)] + ([normal(rng, B, S, C)] if cross else [])
        return layer, inputs, None
    return build


def _gpt_variant_case(with_loss=False, **options):
    def build(rng):
        model = perturb(GPT(vocab_size=7, d_model=8, n_heads=4, n_layers=2, d_ff=12, max_len=6, rng=rng, **options), rng, 0.3)
        ids = rng.integers(0, 7, size=(2, 5))
        if with_loss:
            return WithLoss(model, rng.integers(0, 7, size=(2, 5))), [ids], None
        return model, [ids], None
    return build


def _sparse_case(masks, T):
    def build(rng):
        mask = np.stack(masks(T))[None] if isinstance(masks(T), tuple) else masks(T)   # (1, heads, T, T) or (T, T)
        heads = mask.shape[1] if mask.ndim == 4 else 1
        q, k, v = (normal(rng, 2, heads, T, 3) for _ in range(3))
        return ScaledDotProductAttention(), [q, k, v, mask], None
    return build


def _lora_linear_case(d_in, d_out, r, shape):
    def build(rng):
        layer = LoRALinear(Linear(d_in, d_out, rng=rng), r, alpha=2 * r, rng=rng)
        layer.lora_b.data[...] = rng.standard_normal(layer.lora_b.shape)
        return layer, [normal(rng, *shape, d_in)], None
    return build


def _lora_gpt_case(targets):
    def build(rng):
        model = perturb(GPT(vocab_size=7, d_model=8, n_heads=2, n_layers=2, d_ff=12, max_len=6, rng=rng), rng, 0.3)
        adapted = add_lora(model, r=2, alpha=4, targets=targets, rng=rng)
        for adapter in adapted.adapters:
            adapter.lora_b.data[...] = rng.standard_normal(adapter.lora_b.shape)
        return adapted, [rng.integers(0, 7, size=(2, 5))], None
    return build


def _relative_case(shape, max_distance, causal, skewed):
    def build(rng):
        layer = RelativePositionAttention(shape[-1], max_distance, causal=causal, skewed=skewed, rng=rng)
        return layer, [normal(rng, *shape) for _ in range(3)], None
    return build


def _xl_block_case(positional, memory_len):
    def build(rng):
        block = perturb(TransformerXLBlock(8, 2, 12, positional=positional, rng=rng), rng, 0.3)
        memory = normal(rng, 2, memory_len, 8)
        return block, [normal(rng, 2, 4, 8)], lambda x: block.forward(x, memory)   # the memory is a constant
    return build


def _xl_model_case(rng):
    model = perturb(TransformerXL(7, 8, 2, 2, 12, mem_len=3, positional="alibi", rng=rng), rng, 0.3)
    model.forward(rng.integers(0, 7, size=(2, 4)))
    memories = model.next_memories
    return model, [rng.integers(0, 7, size=(2, 4))], lambda ids: model.forward(ids, memories)


def _tiled_case(shape_q, shape_kv, causal, block_size, with_mask=False, with_bias=False):
    """TiledAttention with T not a multiple of the block; mask rows may be fully masked (out 0, no gradient)."""
    def build(rng):
        q, k = normal(rng, *shape_q), normal(rng, *shape_kv)
        v = normal(rng, *shape_kv[:-1], shape_kv[-1] + 1)
        Tq, Tk = shape_q[-2], shape_kv[-2]
        layer = TiledAttention(causal=causal, block_size=block_size)
        mask = rng.random((*shape_q[:-1], Tk)) > 0.3 if with_mask else None
        if with_mask:
            mask[..., 0, :] = False                                  # the first query sees no key at all
        bias = rng.standard_normal((Tq, Tk)) if with_bias else None
        return layer, [q, k, v], lambda q, k, v: layer.forward(q, k, v, mask=mask, bias=bias)
    return build



def _relative_values_case(shape, value_size, max_distance, causal):
    def build(rng):
        layer = RelativeValueAttention(shape[-1], max_distance, value_size=value_size, causal=causal, rng=rng)
        v_shape = (*shape[:-1], value_size)
        return layer, [rng.standard_normal(shape), rng.standard_normal(shape), rng.standard_normal(v_shape)], None
    return build

CASES = [
    GradcheckCase("RotaryEmbedding", "x (2, 3, 4, 6), offset 0", lambda rng: (RotaryEmbedding(6), [normal(rng, 2, 3, 4, 6)], None)),
    GradcheckCase("RotaryEmbedding", "x (5, 4), offset 7", _rope_offset_case),
    GradcheckCase("ALiBi", "scores (2, 4, 3, 3)", lambda rng: (ALiBi(4), [normal(rng, 2, 4, 3, 3)], None)),
    GradcheckCase("ALiBi", "scores (1, 3, 2, 5)", lambda rng: (ALiBi(3), [normal(rng, 1, 3, 2, 5)], None)),
    GradcheckCase("MultiHeadAttention (variants)", "GQA H 4, Hkv 2, (2, 5, 8)", _mha_variant_case(2, 5, 5, 8, 4, n_kv_heads=2)),
    GradcheckCase("MultiHeadAttention (variants)", "MQA H 3, Hkv 1, cross (2, 3)->(2, 5), C 6",
                  _mha_variant_case(2, 3, 5, 6, 3, cross=True, n_kv_heads=1)),
    GradcheckCase("MultiHeadAttention (variants)", "RoPE, Hkv 2, (2, 4, 8)", _mha_variant_case(2, 4, 4, 8, 4, n_kv_heads=2, positional="rope")),
    GradcheckCase("MultiHeadAttention (variants)", "RoPE, cross (2, 3)->(2, 5)",
                  _mha_variant_case(2, 3, 5, 8, 2, cross=True, positional="rope")),
    GradcheckCase("MultiHeadAttention (variants)", "ALiBi, (3, 4, 6), H 3", _mha_variant_case(3, 4, 4, 6, 3, positional="alibi")),
    GradcheckCase("MultiHeadAttention (variants)", "window 2, (2, 5, 4)", _mha_variant_case(2, 5, 5, 4, 2, window=2)),
    GradcheckCase("BandedAttention", "window 2, (2, 5, 3)",
                  lambda rng: (BandedAttention(2), [normal(rng, 2, 5, 3) for _ in range(3)], None)),
    GradcheckCase("BandedAttention", "window 6 > T, (2, 2, 4, 3)",
                  lambda rng: (BandedAttention(6), [normal(rng, 2, 2, 4, 3) for _ in range(3)], None)),
    GradcheckCase("ScaledDotProductAttention (sparse masks)", "strided, 2 heads, T 7", _sparse_case(lambda T: strided_masks(T, 3), 7)),
    GradcheckCase("ScaledDotProductAttention (sparse masks)", "fixed, 2 heads, T 6", _sparse_case(lambda T: fixed_masks(T, 3), 6)),
    GradcheckCase("ScaledDotProductAttention (sparse masks)", "longformer, global 0, T 6", _sparse_case(lambda T: longformer_mask(T, 2, [0]), 6)),
    GradcheckCase("RelativePositionAttention", "direct, causal, (2, 5, 3), K 2", _relative_case((2, 5, 3), 2, True, False)),
    GradcheckCase("RelativePositionAttention", "direct, bidirectional, (2, 2, 4, 3), K 1",
                  _relative_case((2, 2, 4, 3), 1, False, False)),
    GradcheckCase("RelativePositionAttention", "skewed, (2, 5, 3), K 2", _relative_case((2, 5, 3), 2, True, True)),
    GradcheckCase("RelativePositionAttention", "skewed, (2, 2, 4, 2), K 6", _relative_case((2, 2, 4, 2), 6, True, True)),
    GradcheckCase("TransformerXLBlock", "memory 3, no positions", _xl_block_case(None, 3)),
    GradcheckCase("TransformerXLBlock", "memory 2, rope", _xl_block_case("rope", 2)),
    GradcheckCase("TransformerXL", "2 layers, alibi, memories from a first segment", _xl_model_case),
    GradcheckCase("LoRALinear", "(2, 3, 5) -> 4, r 2", _lora_linear_case(5, 4, 2, (2, 3))),
    GradcheckCase("LoRALinear", "(6, 3) -> 7, r 1", _lora_linear_case(3, 7, 1, (6,))),
    GradcheckCase("LoRA GPT", "w_q, w_v adapters", _lora_gpt_case(("w_q", "w_v"))),
    GradcheckCase("LoRA GPT", "all four projections", _lora_gpt_case(("w_q", "w_k", "w_v", "w_o"))),
    GradcheckCase("GPT (variants)", "rope, GQA Hkv 2", _gpt_variant_case(positional="rope", n_kv_heads=2)),
    GradcheckCase("GPT (variants)", "alibi, MQA, window 3", _gpt_variant_case(positional="alibi", n_kv_heads=1, window=3)),
    GradcheckCase("GPT (variants)", "no positions", _gpt_variant_case(positional="none")),
    GradcheckCase("GPT (variants) + loss", "rope, GQA Hkv 2", _gpt_variant_case(with_loss=True, positional="rope", n_kv_heads=2)),
    GradcheckCase("TiledAttention", "(2, 5, 3), block 2", _tiled_case((2, 5, 3), (2, 5, 3), False, 2)),
    GradcheckCase("TiledAttention", "causal, (2, 2, 7, 3), block 3", _tiled_case((2, 2, 7, 3), (2, 2, 7, 3), True, 3)),
    GradcheckCase("TiledAttention", "causal, Tq 3 < Tk 6, mask, bias, block 4",
                  _tiled_case((2, 3, 2), (2, 6, 2), True, 4, with_mask=True, with_bias=True)),
    GradcheckCase("RelativeValueAttention", "causal, (2, 5, 3), dv 4, K 2", _relative_values_case((2, 5, 3), 4, 2, True)),
    GradcheckCase("RelativeValueAttention", "bidirectional, (2, 2, 4, 3), dv 3, K 1",
                  _relative_values_case((2, 2, 4, 3), 3, 1, False)),
]
