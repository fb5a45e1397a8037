"""The decoder layer of an encoder-decoder Transformer (Vaswani et al. 2017 §3.1; Kumar slides, "Transformer Decoder").

Three sublayers, each with a residual connection:

    1. masked self-attention over the target prefix (each position sees itself and the past);
    2. cross-attention: queries from the decoder, keys and values from the encoder's output `memory`;
    3. the position-wise feed-forward layer.

    post-norm (the paper, default):  h1 = ln1(x + self(x));       h2 = ln2(h1 + cross(h1, m));      y = ln3(h2 + ff(h2))
    pre-norm:                        h1 = x + self(ln1(x));       h2 = h1 + cross(ln2(h1), m);      y = h2 + ff(ln3(h2))

Because every sublayer other than self-attention acts on each position on its
own, the decoder can run one position at a time with the self-attention keys
and values of the earlier positions kept in a cache (`step`, used by
`decoding.py`); cross-attention keys and values depend only on the memory and
are computed once per source sentence. Both caches are the `LayerKVCache` of
`minitransformer/kv_cache.py` that GPT uses, passed to `MultiHeadAttention.forward(..., cache=...)`.
"""

import numpy as np

from ..generation.kv_cache import LayerKVCache
from ..core.module import Module
from ..core.random import as_generator, dropout_generator
from .block import check_norm
from .dropout import Dropout
from .feedforward import FeedForward
from .layernorm import LayerNorm
from .multihead import MultiHeadAttention


class DecoderBlock(Module):
    """Masked self-attention, cross-attention to the encoder output, and feed-forward.

    Args:
        d_model: C.  n_heads: H.  d_ff: feed-forward hidden width.
        norm: "post" (the paper, default) or "pre".
        dropout: drop probability on each sublayer output.
        activation: "relu" (the paper) or "gelu".
        dtype, rng, dropout_rng: as for TransformerBlock.
    Children:
        ln1, self_attn, drop1, ln2, cross_attn, drop2, ln3, ff, drop3.
    """

    def __init__(self, d_model, n_heads, d_ff, norm="post", dropout=0.0, activation="relu",
                 dtype=np.float64, rng=None, dropout_rng=None):
        check_norm(norm, "DecoderBlock")
        rng = as_generator(rng)
        dropout_rng = dropout_generator(rng, dropout_rng)
        self.norm = norm
        self.ln1 = LayerNorm(d_model, dtype=dtype)
        self.self_attn = MultiHeadAttention(d_model, n_heads, causal=True, dtype=dtype, rng=rng)
        self.drop1 = Dropout(dropout, rng=dropout_rng)
        self.ln2 = LayerNorm(d_model, dtype=dtype)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, causal=False, dtype=dtype, rng=rng)
        self.drop2 = Dropout(dropout, rng=dropout_rng)
        self.ln3 = LayerNorm(d_model, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation=activation, dtype=dtype, rng=rng)
        self.drop3 = Dropout(dropout, rng=dropout_rng)

    def forward(self, x, memory, self_mask=None, memory_mask=None):
        """Run the three sublayers.

        Args:
            x: (B, T, C) target-side states.
            memory: (B, S, C) encoder output.
            self_mask: optional bool broadcastable to (B, H, T, T), combined with the causal rule
                (a target key padding mask (B, 1, 1, T)).
            memory_mask: optional bool broadcastable to (B, H, T, S) (a source key padding mask (B, 1, 1, S)).
        Returns:
            y: (B, T, C).
        """
        if self.norm == "pre":
            h1 = x + self.drop1(self.self_attn(self.ln1(x), mask=self_mask))
            h2 = h1 + self.drop2(self.cross_attn(self.ln2(h1), memory, mask=memory_mask))
            return h2 + self.drop3(self.ff(self.ln3(h2)))
        h1 = self.ln1(x + self.drop1(self.self_attn(x, mask=self_mask)))
        h2 = self.ln2(h1 + self.drop2(self.cross_attn(h1, memory, mask=memory_mask)))
        return self.ln3(h2 + self.drop3(self.ff(h2)))

    def backward(self, dout):
        """Each residual `a + f(a)` passes da = dout + f'(a)^T dout; memory only feeds cross-attention.

        Args:
            dout: (B, T, C).
        Returns:
            (dx (B, T, C), dmemory (B, S, C)).
        """
        if self.norm == "pre":
            dh2 = dout + self.ln3.backward(self.ff.backward(self.drop3.backward(dout)))       # y = h2 + ff(ln3(h2))
            dquery, dmemory = self.cross_attn.backward(self.drop2.backward(dh2))              # h2 = h1 + cross(ln2(h1), m)
            dh1 = dh2 + self.ln2.backward(dquery)
            dx = dh1 + self.ln1.backward(self.self_attn.backward(self.drop1.backward(dh1)))   # h1 = x + self(ln1(x))
            return dx, dmemory
        dsum3 = self.ln3.backward(dout)                                                       # y = ln3(h2 + ff(h2))
        dh2 = dsum3 + self.ff.backward(self.drop3.backward(dsum3))
        dsum2 = self.ln2.backward(dh2)                                                        # h2 = ln2(h1 + cross(h1, m))
        dquery, dmemory = self.cross_attn.backward(self.drop2.backward(dsum2))
        dh1 = dsum2 + dquery
        dsum1 = self.ln1.backward(dh1)                                                        # h1 = ln1(x + self(x))
        return dsum1 + self.self_attn.backward(self.drop1.backward(dsum1)), dmemory

    # ---------------------------------------------------------------- incremental decoding (no backward)
    def start_cache(self, memory, memory_mask=None):
        """The cache for `step`: one LayerKVCache per attention layer, and the memory (B, S, C) with its mask.

        The cross-attention cache projects the memory's keys and values at the first step and reuses them.
        """
        return {"self": LayerKVCache(), "cross": LayerKVCache(), "memory": memory, "memory_mask": memory_mask}

    def step(self, x, cache):
        """forward() for new positions x (B, t, C) that follow the cached ones; updates `cache` in place.

        Dropout is skipped: decoding runs in evaluation mode.
        """
        memory, memory_mask = cache["memory"], cache["memory_mask"]
        if self.norm == "pre":
            h1 = x + self.self_attn(self.ln1(x), cache=cache["self"])
            h2 = h1 + self.cross_attn(self.ln2(h1), memory, mask=memory_mask, cache=cache["cross"])
            return h2 + self.ff(self.ln3(h2))
        h1 = self.ln1(x + self.self_attn(x, cache=cache["self"]))
        h2 = self.ln2(h1 + self.cross_attn(h1, memory, mask=memory_mask, cache=cache["cross"]))
        return self.ln3(h2 + self.ff(h2))

    @staticmethod
    def reorder_cache(cache, rows):
        """Keep batch rows `rows` (int (B',)) of a `start_cache` cache, in that order (beam search); in place."""
        cache["self"].reorder(rows)
        cache["cross"].reorder(rows)
        cache["memory"] = cache["memory"][rows]
        if cache["memory_mask"] is not None:
            cache["memory_mask"] = cache["memory_mask"][rows]
        return cache

    def __repr__(self):
        return f"DecoderBlock(d_model={self.self_attn.d_model}, n_heads={self.self_attn.n_heads}, norm={self.norm!r})"
