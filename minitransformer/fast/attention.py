"""Scaled dot-product attention, fast form: the plain layer's numbers with memory-layout tricks.

Speed. The scores are computed as (k q^T)^T rather than q k^T.
The numbers are the same; only the memory layout differs: each query's row of
scores then lies down a column, so the softmax's per-row maximum, sums and
broadcasts run over many rows at once instead of one short row of Tk at a time,
which NumPy does faster. dalpha is computed the same way, so that every
elementwise operation of the backward pass meets operands of one layout, and
the cached causal bias is stored in that layout too (`np.asfortranarray`).
The two products whose right operand would be a transposed view, k q^T and
v dout^T, first copy that operand into a contiguous (..., d, Tq) array:
OpenBLAS multiplies these small (64 x 32) matrices faster from a contiguous
copy, the copy included, than from the transposed view. The gradients dq, dk, dv are written straight into arrays laid
out in memory like q, k, v (`np.empty_like` keeps the order of the strides;
the dtype is that of the product, as `@` would give): in plain self-attention
multi-head attention's q, k, v are views of one (B, T, 3C) projection, so its
dq, dk, dv come out as (B, T, H, hs) in memory and need no copy to merge the
heads again (with grouped-query attention dk and dv still do).
tests/test_fast.py proves this form equal to the plain one.

Measured in 0.2: benchmarks/README.md, "What the code's docstrings point to".

Long sequences. From Tk >= TILED_FROM keys on, this layer hands the call to the fast tier's
tiled attention (`fast/tiled_attention.py`: FlashAttention-2's algorithms in tiles of
TILE_SIZE x TILE_SIZE, its blocks shared between threads), whose memory grows with T
instead of T^2; `alpha` is then None. From WIDE_TILES_FROM keys on the tiles are
WIDE_TILE_SIZE wide: fewer, larger products and passes, which pay once there are enough
blocks for the threads. The threshold and the tile sizes are measured by `benchmarks/bench_tiled_threshold.py`
(benchmarks/README.md, "Tiled attention: where it starts"). tests/test_fast.py runs this path
on every attention case of the catalogue (forced with 2 x 2 tiles) against the plain layers;
tests/test_fast_forms.py checks which path and tiles each length takes; tests/test_tiled_attention.py
measures its memory.
"""

from functools import lru_cache

import numpy as np

from ..layers.attention import ScaledDotProductAttention, causal_mask
from ..variants.tiled_attention import tile_views
from .softmax import softmax, softmax_backward
from .tiled_attention import FastTiledAttention

TILED_FROM = 256          # Tk at and above which the tiled form runs (see "Long sequences" above)
TILE_SIZE = 128           # queries and keys per tile: (Bq, Bk) = (128, 128) per head (see "Long sequences")
WIDE_TILES_FROM = 1024    # Tk at and above which the tiles are WIDE_TILE_SIZE wide instead (see "Long sequences")
WIDE_TILE_SIZE = 256


@lru_cache(maxsize=32)
def causal_bias(Tq, Tk, dtype):
    """The causal mask as an additive (Tq, Tk) bias: 0 where allowed, -inf where not.

    `scores += causal_bias(...)` equals `np.where(causal_mask(...), scores, -inf)`
    (tests/test_fast.py) but works in place on the scores instead of building a
    new array. Cached and read-only, so it is built once per shape.
    """
    bias = np.asfortranarray(np.where(causal_mask(Tq, Tk), 0.0, -np.inf).astype(dtype))   # laid out as the scores
    bias.flags.writeable = False
    return bias


class FastScaledDotProductAttention(ScaledDotProductAttention):
    """`ScaledDotProductAttention` with the scores in column layout, in-place masking and softmax,
    and gradients written in q, k, v's memory layout. Same arguments, caches and results.

    From Tk >= `tiled_from` keys on, the call goes to `tiled`, a `FastTiledAttention` with tiles of `tile_size`
    queries by `tile_size` keys (`wide_tile_size` from Tk >= `wide_tiles_from` on): `alpha` is then None
    (`tiled` keeps `lse` and `out`).
    """

    tiled_from = TILED_FROM
    tile_size = TILE_SIZE
    wide_tiles_from = WIDE_TILES_FROM
    wide_tile_size = WIDE_TILE_SIZE

    def forward(self, q, k, v, mask=None, bias=None):
        """q (..., Tq, dk), k (..., Tk, dk), v (..., Tk, dv) -> out (..., Tq, dv); see the plain layer."""
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        self._check_shapes(q, k, v)
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        Tq, Tk = q.shape[-2], k.shape[-2]
        tile = self.tile_for(Tk)
        if tile is not None:                                       # memory linear in T (see "Long sequences")
            mask, bias = tile_views(self, mask, bias, (*q.shape[:-1], Tk))   # checked here: errors name this layer
            self.tiled, self.alpha = FastTiledAttention(self.causal, self.scale, tile), None
            return self.tiled.forward(q, k, v, mask=mask, bias=bias)
        self.tiled = None
        q_t = np.ascontiguousarray(np.swapaxes(q, -1, -2))         # (..., dk, Tq), see "Speed" above
        scores = np.swapaxes(k @ q_t, -1, -2)                      # 1. q k^T (..., Tq, Tk), in column layout
        scores *= scale                                            # 2.
        if bias is not None:
            scores += bias                                         # 2b. constant score bias
        if self.causal and mask is None:
            scores += causal_bias(Tq, Tk, scores.dtype)            # 3. masked keys get -inf (in place)
        else:
            allowed = self._allowed(mask, scores.shape, Tq, Tk)
            if allowed is not None:
                scores = np.where(allowed, scores, -np.inf)        # 3. masked keys get -inf
        self.alpha = softmax(scores, axis=-1, out=scores)          # 4. (..., Tq, Tk), in the scores' buffer
        self.q, self.k, self.v, self.used_scale = q, k, v, scale
        return self.alpha @ v                                      # 5. (..., Tq, dv)

    def tile_for(self, Tk):
        """The tile size a call with Tk keys runs in: None (the dense form) below `tiled_from`, `tile_size` from
        there, `wide_tile_size` from `wide_tiles_from` on."""
        if Tk < self.tiled_from:
            return None
        return self.wide_tile_size if Tk >= self.wide_tiles_from else self.tile_size

    def backward(self, dout):
        """dout (..., Tq, dv) -> (dq, dk, dv); the derivation is in the plain layer's backward."""
        if self.tiled is not None:
            return self.tiled.backward(dout)
        dout_t = np.ascontiguousarray(np.swapaxes(dout, -1, -2))   # (..., dv, Tq), see "Speed" above
        dalpha = np.swapaxes(self.v @ dout_t, -1, -2)              # dout v^T (..., Tq, Tk), as alpha
        dv = np.matmul(np.swapaxes(self.alpha, -1, -2), dout,                       # (..., Tk, dv)
                       out=np.empty_like(self.v, dtype=np.result_type(self.alpha, dout)))
        dscores = softmax_backward(self.alpha, dalpha, axis=-1)    # (..., Tq, Tk)
        dscores *= self.used_scale
        dq = np.matmul(dscores, self.k, out=np.empty_like(self.q, dtype=np.result_type(dscores, self.k)))  # (..., Tq, dk)
        dk = np.matmul(np.swapaxes(dscores, -1, -2), self.q,                        # (..., Tk, dk)
                       out=np.empty_like(self.k, dtype=np.result_type(dscores, self.q)))
        return dq, dk, dv


FAST_FORMS = {ScaledDotProductAttention: FastScaledDotProductAttention}
