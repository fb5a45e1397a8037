"""Scaled dot-product attention, fast form: the plain layer's numbers with memory-layout tricks.

The scores are computed as (k q^T)^T rather than q k^T.
The numbers are the same; only the memory layout differs: each query's row of
scores then lies down a column, so the softmax's per-row maximum, sums and
broadcasts run over many rows at once instead of one short row of Tk at a time
(2 to 3 times faster in NumPy). dalpha is computed the same way, so that every
elementwise operation of the backward pass meets operands of one layout, and
the cached causal bias is stored in that layout too (`np.asfortranarray`).
The two products whose right operand would be a transposed view, k q^T and
v dout^T, first copy that operand into a contiguous (..., d, Tq) array:
OpenBLAS multiplies these small (64 x 32) matrices about twice as slowly
when the right one is transposed (measured on the benchmark model's
(12, 4, 64, 32) operands: 0.16 ms transposed, 0.09 ms contiguous, 0.02 ms
for the copy). The gradients dq, dk, dv are written straight into arrays laid
out in memory like q, k, v (`np.empty_like` keeps the order of the strides;
the dtype is that of the product, as `@` would give): in plain self-attention
multi-head attention's q, k, v are views of one (B, T, 3C) projection, so its
dq, dk, dv come out as (B, T, H, hs) in memory and need no copy to merge the
heads again (with grouped-query attention dk and dv still do).
tests/test_fast.py proves this form equal to the plain one.

Measured in the 0.2 benchmark (benchmarks/README.md): laying the scores out as
(k q^T)^T made the softmax's row passes 2 to 3 times faster, and the gradients
laid out like q, k, v with the fused QKV product of multi-head attention saved
0.7 ms of a 54 ms training step.

Long sequences (tiled attention). From Tk >= TILED_FROM keys on, this form runs the tiled
algorithm of `variants/tiled_attention.py` (online softmax forward, weights
recomputed from the saved log-sum-exp in backward; the derivation is there), so
its memory grows with T instead of T^2, arranged for NumPy: all batch entries and
heads of a block of 128 queries at once against a block of 128 keys; tiles wholly
above a causal diagonal skipped (about half of them), and the causal rule added as a
cached bias on the tiles that cross it; scale folded into q once; each key and value
block transposed once into a contiguous (..., d, 128) array; exp, the shift and the
softmax backward's products in place on the tile's buffer. Measured on the
benchmark model's attention alone (B = max(1, 768 // T), H = 4, hs = 32, float32,
forward and backward, 2 BLAS threads, a loaded machine, median of 3 rounds):

    T                     64     128     256      512     2048
    dense (this form)   12.4    17.8    1395      537     1452-1886 ms
    tiled, 128 x 128    16.4    24.4    25.1     27.8     244-351 ms

so TILED_FROM = 256. The tile side, at T = 2048: with 1 thread 64 x 64 tiles took 347 ms
(more calls), 128 x 128 237 ms, 256 x 256 286 ms; with 2 threads 256 x 256 took 2.6 to
4.0 s, because a (4, 256, 32) @ (4, 32, 256) product took 510 us
and a (4, 512, 32) @ (4, 32, 512) one 64 ms when OpenBLAS's two threads competed with
other processes, against 40 us for (4, 128, 32) @ (4, 32, 128). The dense form's
figures from T = 256 on are that same effect on its (T, T) products; on a quiet
machine it would fare better, but never below the tiled form's memory.
tests/test_fast.py runs this path on every attention case of the catalogue
(forced with 2 x 2 tiles) against the plain layers; tests/test_tiled_attention.py
measures its memory.
"""

from functools import lru_cache

import numpy as np

from ..layers.attention import ScaledDotProductAttention, causal_mask
from ..variants.tiled_attention import blocks, tile_views
from .reductions import sum_last_axis
from .softmax import softmax, softmax_backward

TILED_FROM = 256          # Tk at and above which the tiled form runs (see "Long sequences" above)
TILE_SIZE = 128           # queries and keys per tile: (Bq, Bk) = (128, 128) per head (see "Long sequences")


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


@lru_cache(maxsize=64)
def causal_tile_bias(n_rows, n_cols, offset, dtype):
    """The causal rule on one (n_rows, n_cols) tile as an additive bias: 0 where key j <= query i + offset
    (offset = the tile's first query's position minus its first key's), -inf above. Cached, read-only."""
    bias = np.where(np.tril(np.ones((n_rows, n_cols), dtype=bool), k=offset), 0.0, -np.inf).astype(dtype)
    bias.flags.writeable = False
    return bias


class FastScaledDotProductAttention(ScaledDotProductAttention):
    """`ScaledDotProductAttention` with the scores in column layout, in-place masking and softmax,
    and gradients written in q, k, v's memory layout. Same arguments, caches and results.

    From Tk >= `tiled_from` keys on, the tiled form: `alpha` is then None, and `lse`, `out` are kept
    instead (as in `TiledAttention`); tiles are `tile_size` queries by `tile_size` keys.
    """

    tiled_from = TILED_FROM
    tile_size = TILE_SIZE

    def forward(self, q, k, v, mask=None, bias=None):
        """q (..., Tq, dk), k (..., Tk, dk), v (..., Tk, dv) -> out (..., Tq, dv); see the plain layer."""
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        self._check_shapes(q, k, v)
        scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        Tq, Tk = q.shape[-2], k.shape[-2]
        if Tk >= self.tiled_from:
            return self._tiled_forward(q, k, v, mask, bias, scale)   # memory linear in T (see "Long sequences")
        self.lse = None
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

    def backward(self, dout):
        """dout (..., Tq, dv) -> (dq, dk, dv); the derivation is in the plain layer's backward."""
        if getattr(self, "lse", None) is not None:
            return self._tiled_backward(dout)
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

    def _tiled_forward(self, q, k, v, mask, bias, scale):
        """TiledAttention's forward (variants/tiled_attention.py derives it), with large square tiles,
        scale folded into q, keys pre-transposed per block, in-place exp, causal tiles above the diagonal skipped."""
        Tq, Tk = q.shape[-2], k.shape[-2]
        self.mask, self.bias = tile_views(self, mask, bias, (*q.shape[:-1], Tk))
        self.block = self.tile_size
        self.q, self.k, self.v, self.used_scale, self.alpha = q, k, v, scale, None
        self.q_scaled = q * scale                                              # (..., Tq, dk)
        self.k_t = [np.ascontiguousarray(np.swapaxes(k[..., cols, :], -1, -2))  # (..., dk, Bk) per key block
                    for cols in blocks(Tk, self.block)]
        out = np.empty((*q.shape[:-1], v.shape[-1]), np.result_type(q, v))    # (..., Tq, dv)
        lse = np.empty((*q.shape[:-1], 1), self.q_scaled.dtype)               # (..., Tq, 1)
        for rows in blocks(Tq, self.block):
            out[..., rows, :], lse[..., rows, :] = self._tiled_rows(rows)
        self.out, self.lse = out, lse
        return out

    def _tiled_rows(self, rows):
        """Online softmax of one block of queries over its key blocks: (out, lse) of those rows."""
        q_block = self.q_scaled[..., rows, :]                                  # (..., Bq, dk)
        row_max = np.full((*q_block.shape[:-1], 1), -np.inf, q_block.dtype)    # m
        row_sum = np.zeros_like(row_max)                                       # l
        acc = np.zeros((*q_block.shape[:-1], self.v.shape[-1]), np.result_type(q_block, self.v))  # o
        shift = np.zeros_like(row_max)
        for j, cols in self._key_blocks(rows):
            scores = self._tile_scores(q_block, rows, cols, j)                 # (..., Bq, Bk), own buffer
            new_max = np.maximum(row_max, np.max(scores, axis=-1, keepdims=True))
            shift = np.where(np.isfinite(new_max), new_max, 0)
            scores -= shift
            weights = np.exp(scores, out=scores)                               # exp(s - m'), in place
            rescale = np.exp(row_max - shift)                                  # exp(m - m')
            row_sum = rescale * row_sum + sum_last_axis(weights)
            acc *= rescale
            acc += weights @ self.v[..., cols, :]
            row_max = new_max
        seen = row_sum > 0
        safe_sum = np.where(seen, row_sum, 1)
        return acc / safe_sum, np.where(seen, shift + np.log(safe_sum), np.inf)

    def _tiled_backward(self, dout):
        """TiledAttention's backward: each tile's weights recomputed from lse, D = rowsum(dout * out)."""
        D = sum_last_axis(dout * self.out)                                     # (..., Tq, 1)
        dq = np.zeros_like(self.q, dtype=np.result_type(self.q, dout))         # laid out like q, k, v
        dk = np.zeros_like(self.k, dtype=np.result_type(self.k, dout))
        dv = np.zeros_like(self.v, dtype=np.result_type(self.v, dout))
        v_t = [np.ascontiguousarray(np.swapaxes(self.v[..., cols, :], -1, -2))  # (..., dv, Bk) per key block
               for cols in blocks(self.k.shape[-2], self.block)]
        for rows in blocks(self.q.shape[-2], self.block):
            q_block, dout_block, dq_block = self.q_scaled[..., rows, :], dout[..., rows, :], dq[..., rows, :]
            for j, cols in self._key_blocks(rows):
                weights = self._tile_scores(q_block, rows, cols, j)            # s, recomputed
                weights -= self.lse[..., rows, :]
                np.exp(weights, out=weights)                                   # p = exp(s - lse)
                dv[..., cols, :] += np.swapaxes(weights, -1, -2) @ dout_block
                dscores = dout_block @ v_t[j]                                  # dp (..., Bq, Bk)
                dscores -= D[..., rows, :]
                dscores *= weights                                             # ds = p (dp - D)
                dq_block += dscores @ self.k[..., cols, :]                     # scale applied once, below
                dk[..., cols, :] += np.swapaxes(dscores, -1, -2) @ q_block     # q_block holds scale q
        dq *= self.used_scale
        return dq, dk, dv

    def _key_blocks(self, rows):
        """(index, slice) of the key blocks that query block `rows` may see: with causal, none above the diagonal."""
        last_visible = rows.stop - 1 + self.k.shape[-2] - self.q.shape[-2]    # the block's last query's position
        return [(j, cols) for j, cols in enumerate(blocks(self.k.shape[-2], self.block))
                if not self.causal or cols.start <= last_visible]

    def _tile_scores(self, q_block, rows, cols, j):
        """scale q k^T on one tile, plus the bias, -inf where masked; a new (..., Bq, Bk) array."""
        scores = q_block @ self.k_t[j]
        if self.bias is not None:
            scores += self.bias[..., rows, cols]
        offset = rows.start + self.k.shape[-2] - self.q.shape[-2] - cols.start
        if self.causal and cols.stop - cols.start - 1 > offset:               # the tile crosses the diagonal
            scores += causal_tile_bias(rows.stop - rows.start, cols.stop - cols.start, offset, scores.dtype)
        if self.mask is not None:
            scores = np.where(self.mask[..., rows, cols], scores, -np.inf)
        return scores


FAST_FORMS = {ScaledDotProductAttention: FastScaledDotProductAttention}
