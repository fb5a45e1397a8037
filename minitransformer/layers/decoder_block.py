"""The decoder layer of an encoder-decoder Transformer (Vaswani et al. 2017 §3.1; Kumar slides, "Transformer Decoder").

Three sublayers, each with a residual connection:

    1. masked self-attention over the target prefix (each position sees itself and the past);
    2. cross-attention: queries from the decoder, keys and values from the encoder's output `memory`;
    3. the position-wise feed-forward layer.

    post-norm (the paper, default):  h1 = ln1(x + self(x));       h2 = ln2(h1 + cross(h1, m));      y = ln3(h2 + ff(h2))
    pre-norm:                        h1 = x + self(ln1(x));       h2 = h1 + cross(ln2(h1), m);      y = h2 + ff(ln3(h2))

Because every sublayer other than self-attention acts on each position on its
own, the decoder can run one position at a time: `forward(..., self_cache=...,
cross_cache=...)` hands each attention layer the keys and values it has seen
before (self-attention: the earlier target positions; cross-attention: the
memory's, projected once per source sentence). The caches follow the protocol
of `generation/kv_cache.py`; the caller creates them (`greedy_decode`,
`beam_search`) and this file never imports them. A cached forward is for
inference only: it has no backward.
"""

import numpy as np

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

    def forward(self, x, memory, self_mask=None, memory_mask=None, self_cache=None, cross_cache=None):
        """Run the three sublayers.

        Args:
            x: (B, T, C) target-side states.
            memory: (B, S, C) encoder output.
            self_mask: optional bool broadcastable to (B, H, T, T), combined with the causal rule
                (a target key padding mask (B, 1, 1, T)).
            memory_mask: optional bool broadcastable to (B, H, T, S) (a source key padding mask (B, 1, 1, S)).
            self_cache, cross_cache: optional key/value caches of the two attention layers (inference only,
                generation/kv_cache.py); with them x holds the new positions only, after the cached ones.
        Returns:
            y: (B, T, C).
        """
        if self.norm == "pre":
            h1 = x + self.drop1(self.self_attn(self.ln1(x), mask=self_mask, cache=self_cache))
            h2 = h1 + self.drop2(self.cross_attn(self.ln2(h1), memory, mask=memory_mask, cache=cross_cache))
            return h2 + self.drop3(self.ff(self.ln3(h2)))
        h1 = self.ln1(x + self.drop1(self.self_attn(x, mask=self_mask, cache=self_cache)))
        h2 = self.ln2(h1 + self.drop2(self.cross_attn(h1, memory, mask=memory_mask, cache=cross_cache)))
        return self.ln3(h2 + self.drop3(self.ff(h2)))

    def backward(self, dout):
        """The gradients at x and at the encoder's memory, through the three sublayers.

        Derivation:
            Each residual `a + f(a)` passes da = dout + f'(a)^T dout, the steps taken in reverse; the memory
            feeds cross-attention only, so dmemory is cross-attention's share alone.

        Args:
            dout: (B, T, C).
        Returns:
            (dx (B, T, C), dmemory (B, S, C)).
        """
        ### BEGIN SOLUTION decoder_block.backward
        if self.norm == "pre":
            # forward was y = h2 + ff(ln3(h2))
            dh2 = dout + self.ln3.backward(self.ff.backward(self.drop3.backward(dout)))
            # forward was h2 = h1 + cross(ln2(h1), m)
            dquery, dmemory = self.cross_attn.backward(self.drop2.backward(dh2))
            dh1 = dh2 + self.ln2.backward(dquery)
            # forward was h1 = x + self(ln1(x))
            dx = dh1 + self.ln1.backward(self.self_attn.backward(self.drop1.backward(dh1)))
            return dx, dmemory
        # forward was y = ln3(h2 + ff(h2))
        dsum3 = self.ln3.backward(dout)
        dh2 = dsum3 + self.ff.backward(self.drop3.backward(dsum3))
        # forward was h2 = ln2(h1 + cross(h1, m))
        dsum2 = self.ln2.backward(dh2)
        dquery, dmemory = self.cross_attn.backward(self.drop2.backward(dsum2))
        dh1 = dsum2 + dquery
        # forward was h1 = ln1(x + self(x))
        dsum1 = self.ln1.backward(dh1)
        return dsum1 + self.self_attn.backward(self.drop1.backward(dsum1)), dmemory
        ### END SOLUTION

    def __repr__(self):
        return f"DecoderBlock(d_model={self.self_attn.d_model}, n_heads={self.self_attn.n_heads}, norm={self.norm!r})"
