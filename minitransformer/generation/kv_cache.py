"""Key/value cache for incremental decoding (Pope et al. 2022, "Efficiently scaling Transformer inference"):
the one cache protocol of the package, for GPT and the encoder-decoder alike.

When a decoder generates one token at a time, the keys and values of the
earlier positions do not change: causal attention never lets an earlier
position see a later one. Recomputing them at every step repeats work that
grows with the length of the text. A cache keeps them, so each new step only
projects the new token and attends from it to everything cached:

    step 1: prompt (B, T0)  -> k, v (B, Hkv, T0, hs) stored
    step 2: one token (B, 1) -> k, v (B, Hkv, 1, hs) appended; attention (1 x T0+1)

`ScaledDotProductAttention`'s causal mask aligns the queries to the end of the
keys, which is exactly what a query at position T0 needs. The logits equal
those of a full recomputation (tests/test_sampling.py, tests/test_seq2seq.py).

The protocol: what an attention layer may use of the `LayerKVCache` it is handed

    cache.length          S, the number of positions cached so far (0 before the first call)
    cache.append(k, v)    store this call's keys and values (B, Hkv, T, hs) after the cached ones and
                          return everything cached, (B, Hkv, S + T, hs) each
    cache.k, cache.v      everything cached, (B, Hkv, S, hs); a cross-attention layer whose cache is
                          not empty reads them instead of projecting its context again

`MultiHeadAttention.forward(x, context, cache=...)` uses nothing else. A
self-attention cache grows by T positions a call; a cross-attention cache is
filled once, with the context's S positions, on its first call, and read after.

Who creates caches: the generation loops, never a layer or a model. `generate`
(sampling.py) builds `KVCache(n_layers)` for GPT; `greedy_decode` and
`beam_search` (decoding.py) build `KVCache(n_layers, cross_attention=True)`
for the encoder-decoder. They hand it to the model (`GPT.forward(ids, cache=...)`,
`Seq2SeqTransformer.decode(ids, memory, memory_mask, cache=...)`), which passes
block i its own `LayerKVCache`s (`cache[i]`, and `cache.cross_attention[i]`),
and the block passes them to its attention layers. A model may use `len(cache)`,
`cache.length` (the position of its next token) and those two lists; only the
generation loop calls `reorder`. So nothing below generation/ imports this file:
the layers know the protocol, not the class.

Beam search keeps, at every step, some rows of the batch and repeats others:
`reorder(rows)` does the same to every layer's keys and values.

Left out: preallocated buffers, paged or sliding-window caches; keys and values
are concatenated, which is simple and cheap at these lengths.
"""

import numpy as np


class LayerKVCache:
    """Keys and values one attention layer has seen so far.

    Attributes:
        k: (B, Hkv, S, hs), or None before the first call.
        v: (B, Hkv, S, hs), or None.
    """

    def __init__(self):
        self.k = None
        self.v = None

    @property
    def length(self):
        """S, the number of cached positions."""
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        """Add the new positions' keys and values (B, Hkv, T, hs); return everything cached (B, Hkv, S + T, hs) each."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            if k.shape[:-2] != self.k.shape[:-2]:
                raise ValueError(f"LayerKVCache holds keys {self.k.shape}, cannot append keys {k.shape}")
            self.k = np.concatenate([self.k, k], axis=-2)                    # (B, Hkv, S + T, hs)
            self.v = np.concatenate([self.v, v], axis=-2)                    # (B, Hkv, S + T, hs)
        return self.k, self.v

    def reorder(self, rows):
        """Keep batch rows `rows` (int (B',)), in that order: beam search reshuffling its beams."""
        if self.k is not None:
            self.k, self.v = self.k[rows], self.v[rows]                      # (B', Hkv, S, hs)

    def __repr__(self):
        return f"LayerKVCache(length={self.length})"


class KVCache:
    """One `LayerKVCache` per block for self-attention, and one per block for cross-attention if asked.

    Args:
        n_layers: the model's number of blocks.
        cross_attention: also keep a cache for each block's cross-attention (an encoder-decoder).
    Attributes:
        self_attention: list of n_layers LayerKVCache; `cache[i]` is block i's.
        cross_attention: list of n_layers LayerKVCache, or empty (GPT).
    """

    def __init__(self, n_layers, cross_attention=False):
        self.self_attention = [LayerKVCache() for _ in range(n_layers)]
        self.cross_attention = [LayerKVCache() for _ in range(n_layers)] if cross_attention else []

    @property
    def length(self):
        """Positions seen so far (the position of the next token); a cross-attention cache does not count."""
        return self.self_attention[0].length if self.self_attention else 0

    def __getitem__(self, index):
        return self.self_attention[index]

    def __len__(self):
        return len(self.self_attention)

    def reorder(self, rows):
        """Keep batch rows `rows` (int (B',)) of every layer's cache, in that order (see `LayerKVCache.reorder`)."""
        for layer in self.self_attention + self.cross_attention:
            layer.reorder(rows)

    def __repr__(self):
        cross = ", cross_attention=True" if self.cross_attention else ""
        return f"KVCache(layers={len(self)}, length={self.length}{cross})"
