"""Key/value cache for incremental decoding (Pope et al. 2022, "Efficiently scaling Transformer inference").

When a decoder generates one token at a time, the keys and values of the
earlier positions do not change: causal attention never lets an earlier
position see a later one. Recomputing them at every step repeats work that
grows with the length of the text. A cache keeps them, so each new step only
projects the new token and attends from it to everything cached:

    step 1: prompt (B, T0)  -> k, v (B, H, T0, hs) stored
    step 2: one token (B, 1) -> k, v (B, H, 1, hs) appended; attention (1 x T0+1)

`ScaledDotProductAttention`'s causal mask aligns the queries to the end of the
keys, which is exactly what a query at position T0 needs. The logits equal
those of a full recomputation (tests/test_sampling.py).

One `LayerKVCache` serves one attention layer, self- or cross-attention (a
cross-attention cache stores the encoder output's keys and values on its first
call and reuses them), so an encoder-decoder can use the same objects. A
`KVCache` holds one per block of a model and knows how many positions it has
seen; `reorder(rows)` keeps chosen batch rows, as beam search needs. GPT
(`forward(ids, cache=...)`) and the encoder-decoder's `DecoderBlock.step` both
use these classes. Left out: preallocated buffers, paged or sliding-window
caches; keys and values are concatenated, which is simple and cheap at these lengths.
"""

import numpy as np


class LayerKVCache:
    """Keys and values one attention layer has seen so far.

    Attributes:
        k: (B, H, S, hs) or None before the first call.
        v: (B, H, S, dv) or None.
    """

    def __init__(self):
        self.k = None
        self.v = None

    @property
    def length(self):
        """S, the number of cached positions."""
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k, v):
        """Add the new positions' keys (B, H, T, hs) and values; return everything cached (B, H, S + T, hs)."""
        if self.k is None:
            self.k, self.v = k, v
        else:
            if k.shape[:-2] != self.k.shape[:-2]:
                raise ValueError(f"LayerKVCache holds keys {self.k.shape}, cannot append keys {k.shape}")
            self.k = np.concatenate([self.k, k], axis=-2)
            self.v = np.concatenate([self.v, v], axis=-2)
        return self.k, self.v

    def reorder(self, rows):
        """Keep batch rows `rows` (int (B',)), in that order: beam search reshuffling its beams."""
        if self.k is not None:
            self.k, self.v = self.k[rows], self.v[rows]

    def __repr__(self):
        return f"LayerKVCache(length={self.length})"


class KVCache:
    """One `LayerKVCache` per attention layer of a model.

    Args:
        n_layers: how many attention layers share the positions.
    """

    def __init__(self, n_layers):
        self.layers = [LayerKVCache() for _ in range(n_layers)]

    @property
    def length(self):
        """Positions seen so far (the position of the next token)."""
        return self.layers[0].length if self.layers else 0

    def __getitem__(self, index):
        return self.layers[index]

    def reorder(self, rows):
        """Keep batch rows `rows` of every layer's cache (see `LayerKVCache.reorder`)."""
        for layer in self.layers:
            layer.reorder(rows)

    def __len__(self):
        return len(self.layers)

    def __repr__(self):
        return f"KVCache(layers={len(self.layers)}, length={self.length})"
