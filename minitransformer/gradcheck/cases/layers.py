"""The catalogue of gradient checks: every layer at two or more shapes, and a tiny GPT.

`python -m minitransformer gradcheck` runs these and prints one row per layer;
the test suite runs the very same cases, so the command and the tests cannot
drift apart. What a case is, and the helpers every catalogue uses, is `case.py`.

Inputs to ReLU are kept away from 0, where the kink would make the finite
difference disagree with any one-sided derivative.
"""

import numpy as np

from ...layers.activations import GELU, ReLU, SiLU
from ...layers.attention import ScaledDotProductAttention
from ...layers.block import TransformerBlock
from ...layers.dropout import Dropout
from ...layers.embedding import Embedding
from ...layers.feedforward import FeedForward
from ...layers.layernorm import LayerNorm
from ...layers.linear import Linear
from ...layers.lm_head import TiedLMHead
from ...layers.loss import CrossEntropyLoss
from ...layers.multihead import MultiHeadAttention
from ...layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ...layers.rmsnorm import RMSNorm
from ...layers.softmax import Softmax
from ...layers.swiglu import SwiGLU
from ...models.gpt import GPT, LLAMA_STYLE
from .case import GradcheckCase, WithLoss, normal, perturb


def _away_from_zero(rng, *shape):
    x = rng.standard_normal(shape)
    return x + np.sign(x) * 0.1


def _dropout_case(shape, p):
    def build(rng):
        layer = Dropout(p)

        def forward(x):                      # the same mask at every call, so L is a fixed function of x
            layer.rng = np.random.default_rng(123)
            return layer.forward(x)
        return layer, [normal(rng, *shape)], forward
    return build


def _tied_head_case(V, *shape):
    def build(rng):
        embedding = Embedding(V, shape[-1], rng=rng)
        embedding.weight.data[...] = rng.standard_normal((V, shape[-1]))
        return TiedLMHead(embedding), [normal(rng, *shape)], None
    return build


def _gpt_case(norm, positional, tie_weights, with_loss, d_ff=12):
    def build(rng):
        model = GPT(vocab_size=7, d_model=8, n_heads=2, n_layers=2, d_ff=d_ff, max_len=6, norm=norm,
                    positional=positional, tie_weights=tie_weights, rng=rng)
        perturb(model, rng, 0.3)                        # larger weights than GPT-2's 0.02: every path matters
        ids = rng.integers(0, 7, size=(2, 5))
        if not with_loss:
            return model, [ids], None
        targets = rng.integers(0, 7, size=(2, 5))
        return WithLoss(model, targets), [ids], None
    return build


def _sdpa_case(shape_q, shape_kv, causal, scale=None, with_mask=False):
    def build(rng):
        q = normal(rng, *shape_q)
        k = normal(rng, *shape_kv)
        v = normal(rng, *shape_kv[:-1], shape_kv[-1] + 1)
        inputs = [q, k, v]
        if with_mask:
            mask = rng.random((*shape_q[:-1], shape_kv[-2])) > 0.3
            mask[..., 0] = True                                  # every query sees at least one key
            inputs.append(mask)
        return ScaledDotProductAttention(causal=causal, scale=scale), inputs, None
    return build


def _mha_case(B, T, S, C, H, causal, cross):
    def build(rng):
        layer = MultiHeadAttention(C, H, causal=causal, rng=rng)
        for name in ("b_q", "b_k", "b_v", "b_o"):
            getattr(layer, name).data[...] = rng.standard_normal(C) * 0.1
        inputs = [normal(rng, B, T, C)] + ([normal(rng, B, S, C)] if cross else [])
        return layer, inputs, None
    return build


def _layernorm_case(shape):
    def build(rng):
        layer = LayerNorm(shape[-1])
        layer.gamma.data[...] = rng.standard_normal(shape[-1])
        layer.beta.data[...] = rng.standard_normal(shape[-1])
        return layer, [normal(rng, *shape)], None
    return build


def _rmsnorm_case(shape):
    def build(rng):
        layer = RMSNorm(shape[-1])
        layer.gamma.data[...] = rng.standard_normal(shape[-1])
        return layer, [normal(rng, *shape)], None
    return build


def _swiglu_case(d_model, d_ff, shape, bias):
    def build(rng):
        layer = perturb(SwiGLU(d_model, d_ff, bias=bias, rng=rng), rng, 0.1)   # non-zero biases when present
        return layer, [normal(rng, *shape, d_model)], None
    return build


def _llama_gpt_case(with_loss):
    def build(rng):
        model = perturb(GPT(vocab_size=7, d_model=8, n_heads=2, n_layers=2, d_ff=10, max_len=6, rng=rng,
                            **LLAMA_STYLE), rng, 0.3)
        ids = rng.integers(0, 7, size=(2, 5))
        if with_loss:
            return WithLoss(model, rng.integers(0, 7, size=(2, 5))), [ids], None
        return model, [ids], None
    return build


def _block_case(norm, dropout_p, activation="gelu", d_ff=12, **modern):
    def build(rng):
        block = TransformerBlock(8, 2, d_ff, norm=norm, dropout=dropout_p, activation=activation, rng=rng, **modern)
        if dropout_p:
            def forward(x):
                rng_of_masks = np.random.default_rng(7)
                for drop in filter(None, (block.drop1, block.drop2)):        # drop2 is None when d_ff = 0
                    drop.rng = rng_of_masks
                return block.forward(x)
            return block, [normal(rng, 2, 4, 8)], forward
        return block, [normal(rng, 2, 4, 8)], None
    return build


def _loss_case(shape, V, ignore_index=None):
    def build(rng):
        targets = rng.integers(0, V, size=shape)
        if ignore_index is not None:
            targets.flat[::3] = ignore_index
        return CrossEntropyLoss(ignore_index=ignore_index), [normal(rng, *shape, V), targets], None
    return build


CASES = [
    GradcheckCase("Softmax", "x (2, 3, 5), last axis", lambda rng: (Softmax(), [normal(rng, 2, 3, 5)], None)),
    GradcheckCase("Softmax", "x (4, 6), axis 0", lambda rng: (Softmax(axis=0), [normal(rng, 4, 6)], None)),
    GradcheckCase("Linear", "x (2, 3, 5) -> 4", lambda rng: (Linear(5, 4, rng=rng), [normal(rng, 2, 3, 5)], None)),
    GradcheckCase("Linear", "x (7, 3) -> 6, no bias", lambda rng: (Linear(3, 6, bias=False, rng=rng), [normal(rng, 7, 3)], None)),
    GradcheckCase("ReLU", "x (2, 3, 4)", lambda rng: (ReLU(), [_away_from_zero(rng, 2, 3, 4)], None)),
    GradcheckCase("ReLU", "x (5, 2)", lambda rng: (ReLU(), [_away_from_zero(rng, 5, 2)], None)),
    GradcheckCase("GELU", "x (2, 3, 4)", lambda rng: (GELU(), [normal(rng, 2, 3, 4) * 2], None)),
    GradcheckCase("GELU", "x (6,)", lambda rng: (GELU(), [normal(rng, 6) * 3], None)),
    GradcheckCase("LayerNorm", "x (2, 3, 6)", _layernorm_case((2, 3, 6))),
    GradcheckCase("LayerNorm", "x (4, 5)", _layernorm_case((4, 5))),
    GradcheckCase("Dropout", "x (2, 3, 4), p 0.3", _dropout_case((2, 3, 4), 0.3)),
    GradcheckCase("Dropout", "x (5, 6), p 0.5", _dropout_case((5, 6), 0.5)),
    GradcheckCase("Embedding", "ids (2, 3), V 5, C 4",
                  lambda rng: (Embedding(5, 4, rng=rng), [np.array([[0, 1, 1], [4, 0, 1]])], None)),
    GradcheckCase("Embedding", "ids (3, 2), V 4, C 3",
                  lambda rng: (Embedding(4, 3, rng=rng), [rng.integers(0, 4, size=(3, 2))], None)),
    GradcheckCase("SinusoidalPositionalEncoding", "x (2, 5, 6)",
                  lambda rng: (SinusoidalPositionalEncoding(6, 8), [normal(rng, 2, 5, 6)], None)),
    GradcheckCase("SinusoidalPositionalEncoding", "x (3, 2, 3, 4)",
                  lambda rng: (SinusoidalPositionalEncoding(4, 3), [normal(rng, 3, 2, 3, 4)], None)),
    GradcheckCase("LearnedPositionalEmbedding", "x (2, 4, 3), max_len 6",
                  lambda rng: (LearnedPositionalEmbedding(6, 3, rng=rng), [normal(rng, 2, 4, 3)], None)),
    GradcheckCase("LearnedPositionalEmbedding", "x (3, 2, 5, 2), max_len 5",
                  lambda rng: (LearnedPositionalEmbedding(5, 2, rng=rng), [normal(rng, 3, 2, 5, 2)], None)),
    GradcheckCase("ScaledDotProductAttention", "q (2, 4, 3), k (2, 5, 3)", _sdpa_case((2, 4, 3), (2, 5, 3), False)),
    GradcheckCase("ScaledDotProductAttention", "causal, (2, 2, 4, 3)", _sdpa_case((2, 2, 4, 3), (2, 2, 4, 3), True)),
    GradcheckCase("ScaledDotProductAttention", "causal Tq < Tk, scale 1, (3, 2, 3)",
                  _sdpa_case((3, 2, 3), (3, 4, 3), True, scale=1.0)),
    GradcheckCase("ScaledDotProductAttention", "bool mask, (2, 3, 4)", _sdpa_case((2, 3, 4), (2, 3, 4), False, with_mask=True)),
    GradcheckCase("MultiHeadAttention", "self, causal, (2, 4, 6), H 2", _mha_case(2, 4, 4, 6, 2, True, False)),
    GradcheckCase("MultiHeadAttention", "self, (3, 3, 4), H 4", _mha_case(3, 3, 3, 4, 4, False, False)),
    GradcheckCase("MultiHeadAttention", "cross, x (2, 3, 6), context (2, 5, 6), H 3", _mha_case(2, 3, 5, 6, 3, False, True)),
    GradcheckCase("FeedForward", "relu, (2, 3, 4) -> 8",
                  lambda rng: (FeedForward(4, 8, rng=rng), [normal(rng, 2, 3, 4)], None)),
    GradcheckCase("FeedForward", "gelu, (5, 3) -> 6",
                  lambda rng: (FeedForward(3, 6, activation="gelu", rng=rng), [normal(rng, 5, 3)], None)),
    GradcheckCase("TransformerBlock", "pre-norm, (2, 4, 8)", _block_case("pre", 0.0)),
    GradcheckCase("TransformerBlock", "post-norm, (2, 4, 8)", _block_case("post", 0.0)),
    GradcheckCase("TransformerBlock", "pre-norm, dropout 0.2", _block_case("pre", 0.2)),
    GradcheckCase("CrossEntropyLoss", "logits (2, 3, 5)", _loss_case((2, 3), 5)),
    GradcheckCase("CrossEntropyLoss", "logits (4, 7), ignore_index -1", _loss_case((4,), 7, ignore_index=-1)),
    GradcheckCase("TiedLMHead", "h (2, 3, 4), V 7", _tied_head_case(7, 2, 3, 4)),
    GradcheckCase("TiedLMHead", "h (5, 4), V 3", _tied_head_case(3, 5, 4)),
    GradcheckCase("GPT", "pre-norm, learned, tied, logits", _gpt_case("pre", "learned", True, False)),
    GradcheckCase("GPT", "post-norm, sinusoidal, untied, logits", _gpt_case("post", "sinusoidal", False, False)),
    GradcheckCase("GPT + loss", "pre-norm, learned, tied", _gpt_case("pre", "learned", True, True)),
    # the modern (Llama-style) decoder's layers
    GradcheckCase("RMSNorm", "x (2, 3, 6)", _rmsnorm_case((2, 3, 6))),
    GradcheckCase("RMSNorm", "x (4, 5)", _rmsnorm_case((4, 5))),
    GradcheckCase("SiLU", "x (2, 3, 4)", lambda rng: (SiLU(), [normal(rng, 2, 3, 4) * 3], None)),
    GradcheckCase("SiLU", "x (6,)", lambda rng: (SiLU(), [normal(rng, 6) * 5], None)),
    GradcheckCase("SwiGLU", "(2, 3, 4) -> 6, no bias", _swiglu_case(4, 6, (2, 3), False)),
    GradcheckCase("SwiGLU", "(5, 3) -> 4, bias", _swiglu_case(3, 4, (5,), True)),
    GradcheckCase("TransformerBlock", "pre-norm, rmsnorm, swiglu, no bias",
                  _block_case("pre", 0.0, activation="swiglu", norm_layer="rmsnorm", bias=False)),
    GradcheckCase("GPT (Llama-style)", "rope, rmsnorm, swiglu, no bias, logits", _llama_gpt_case(False)),
    GradcheckCase("GPT (Llama-style) + loss", "rope, rmsnorm, swiglu, no bias", _llama_gpt_case(True)),
    # attention only (d_ff = 0): the two-layer models in which induction heads form (notebook 19)
    GradcheckCase("TransformerBlock", "attention only (d_ff 0), pre-norm", _block_case("pre", 0.0, d_ff=0)),
    GradcheckCase("TransformerBlock", "attention only (d_ff 0), post-norm, dropout 0.2",
                  _block_case("post", 0.2, d_ff=0)),
    GradcheckCase("GPT + loss", "attention only (d_ff 0), pre-norm, learned, tied",
                  _gpt_case("pre", "learned", True, True, d_ff=0)),
]

# Catalogues added by other parts of the package: each module holds its own `CASES` list.
