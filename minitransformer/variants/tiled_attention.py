"""Tiled attention: softmax(q k^T * scale + mask) v without ever holding the (Tq, Tk) weights
(online softmax, Milakov & Gimelshein 2018, arXiv 1805.02867; FlashAttention, Dao et al. 2022,
arXiv 2205.14135, Algorithms 1 and 2).

Plain attention (`layers/attention.py`) builds the whole (..., Tq, Tk) score matrix, and keeps
the weights alpha for its backward pass: memory grows with T^2. This layer computes the same
numbers one tile at a time: a block of queries against a block of keys, (..., Bq, Bk), and keeps
only q, k, v, out and one number per query row for backward: memory grows with T.

Online softmax, for one query row whose scores s_1 .. s_Tk arrive in blocks of keys. After the
blocks seen so far, keep three numbers per row (a vector o for the output):

    m = max of the scores seen                      the running maximum
    l = sum over seen keys of exp(s_j - m)          the running sum, relative to m
    o = sum over seen keys of exp(s_j - m) v_j      the unnormalised output, relative to m

When the next block arrives, with scores s_j, j in the block:

    m' = max(m, max_j s_j)                          the new maximum
    l' = exp(m - m') l + sum_j exp(s_j - m')        the old sum re-based: exp(s - m) exp(m - m') = exp(s - m')
    o' = exp(m - m') o + sum_j exp(s_j - m') v_j    the same correction for the output

so the three invariants hold again, with the block added. After the last block, l is the
softmax's denominator relative to m, so

    out = o / l = sum_j softmax(s)_j v_j            exactly plain attention's row
    lse = m + log l = log sum_j exp(s_j)            the row's log-sum-exp, saved for backward

Each exp(s - m') is at most 1, so nothing overflows, as in `layers/softmax.py`.

Backward, with the weights recomputed instead of stored: p_j = exp(s_j - lse) is softmax(s)_j
exactly (the denominator is exp(lse)). The softmax backward needs, per row,
sum_j p_j dp_j with dp_j = dout . v_j; that sum is dout . (sum_j p_j v_j) = dout . out = D,
one number per row computed once from the saved output (FlashAttention's D_i = rowsum(dO_i * O_i)).
So every tile's gradients follow from the tile alone:

    p   = exp(s - lse)                    the tile's weights, (Bq, Bk)
    dv += p^T dout                        out = p v
    dp  = dout v^T                        (Bq, Bk)
    ds  = p (dp - D)                      softmax backward, with D in place of the row sum
    dq += scale ds k                      s = scale q k^T
    dk += scale ds^T q

A query row that sees no key (fully masked) never gets a finite score: l stays 0, and this
layer gives it out = 0 and no gradient, as plain attention does; its lse is stored as +inf so
that the recomputed weights exp(-inf - inf) are 0.

This file is the plain form: one line per step, every tile computed (masked tiles add exp(-inf) =
0). The fast tier (`fast/attention.py`) runs the same algorithm with large blocks and skips
the tiles above a causal diagonal. Notebook 17 walks one row through the online softmax.

Left out: dropout on the weights, and a learned score bias (the bias is a constant, as ALiBi's).
"""

import numpy as np

from ..layers.attention import ScaledDotProductAttention


class TiledAttention(ScaledDotProductAttention):
    """ScaledDotProductAttention's numbers (`forward(q, k, v, mask=None, bias=None)`), computed in
    (block_size x block_size) tiles with an online softmax; memory linear in T.

    Args:
        causal: if True, query i (at absolute position Tk - Tq + i) sees keys 0 .. Tk - Tq + i.
        scale: multiplies the scores; None means 1/sqrt(dk).
        block_size: rows of queries and of keys per tile (>= 1); the last block may be shorter.
    Attributes after forward:
        lse: (..., Tq, 1) each query row's log-sum-exp of its scores (+inf for a row that sees no key).
        out: (..., Tq, dv) the output, kept for D = rowsum(dout * out) in backward.
        There is no `alpha`: the weights are never stored.
    """

    def __init__(self, causal=False, scale=None, block_size=64):
        if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
            raise ValueError(f"TiledAttention expected block_size an integer >= 1, got {block_size!r}")
        super().__init__(causal=causal, scale=scale)
        self.block_size = int(block_size)

    def forward(self, q, k, v, mask=None, bias=None):
        """Attend from each query to the keys, one block of keys at a time.

        Args:
            q: (..., Tq, dk) queries.
            k: (..., Tk, dk) keys.
            v: (..., Tk, dv) values.
            mask: optional bool, broadcastable to (..., Tq, Tk); True = may attend.
            bias: optional constant float, broadcastable to (..., Tq, Tk), added to the scaled
                scores (ALiBi's distance penalties); it receives no gradient.
        Returns:
            out: (..., Tq, dv).
        """
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        self._check_shapes(q, k, v)
        self.used_scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        self.q, self.k, self.v = q, k, v
        self.mask, self.bias = tile_views(self, mask, bias, (*q.shape[:-1], k.shape[-2]))
        outs, lses = [], []
        for rows in blocks(q.shape[-2], self.block_size):
            out_block, lse_block = self._forward_rows(rows)
            outs.append(out_block)
            lses.append(lse_block)
        self.out = np.concatenate(outs, axis=-2)                   # (..., Tq, dv)
        self.lse = np.concatenate(lses, axis=-2)                   # (..., Tq, 1)
        return self.out

    def _forward_rows(self, rows):
        """One block of queries against every block of keys (online softmax): (out, lse) of those rows."""
        q_block = self.q[..., rows, :]                                        # (..., Bq, dk)
        row_max = np.full((*q_block.shape[:-1], 1), -np.inf, dtype=q_block.dtype)   # m (..., Bq, 1)
        row_sum = np.zeros_like(row_max)                                      # l (..., Bq, 1)
        acc = np.zeros((*q_block.shape[:-1], self.v.shape[-1]), np.result_type(self.q, self.v))  # o
        for cols in blocks(self.k.shape[-2], self.block_size):
            scores = self._tile_scores(q_block, rows, cols)                    # 1-3. (..., Bq, Bk)
            row_max, row_sum, acc = online_softmax_step(row_max, row_sum, acc, scores, self.v[..., cols, :])  # 4-5.
        return online_softmax_result(row_max, row_sum, acc)                    # 6-7.

    def backward(self, dout):
        """Reverse the forward tile by tile, recomputing each tile's weights from the saved lse.

            7-4. p = exp(s - lse)             the tile's softmax weights, recomputed (not stored)
            5.   out = p v                    ->  dv += p^T dout,   dp = dout v^T
            4.   softmax                      ->  ds = p (dp - D),  D = rowsum(dout * out)
                 (D = sum_j p_j dp_j = dout . sum_j p_j v_j = dout . out, the whole row's sum)
            3.   masked entries have p = 0, so ds = 0 there; 2b. the bias is a constant
            2-1. s = scale q k^T              ->  dq += scale ds k,   dk += scale ds^T q
        Args:
            dout: (..., Tq, dv).
        Returns:
            (dq, dk, dv) with the shapes of q, k, v.
        """
        D = (dout * self.out).sum(axis=-1, keepdims=True)                      # (..., Tq, 1)
        dq = np.zeros(self.q.shape, np.result_type(self.q, dout))
        dk = np.zeros(self.k.shape, np.result_type(self.k, dout))
        dv = np.zeros(self.v.shape, np.result_type(self.v, dout))
        for rows in blocks(self.q.shape[-2], self.block_size):
            q_block, dout_block = self.q[..., rows, :], dout[..., rows, :]     # (..., Bq, dk), (..., Bq, dv)
            for cols in blocks(self.k.shape[-2], self.block_size):
                scores = self._tile_scores(q_block, rows, cols)                # 1-3. recomputed (..., Bq, Bk)
                weights = np.exp(scores - self.lse[..., rows, :])              # 7-4. p, exactly softmax's weights
                dv[..., cols, :] += np.swapaxes(weights, -1, -2) @ dout_block  # 5. (..., Bk, dv)
                dweights = dout_block @ np.swapaxes(self.v[..., cols, :], -1, -2)   # 5. dp (..., Bq, Bk)
                dtile = weights * (dweights - D[..., rows, :])                 # 4. ds (..., Bq, Bk)
                dtile = self.used_scale * dtile                                # 2. d(q k^T) = scale ds
                dq[..., rows, :] += dtile @ self.k[..., cols, :]               # 1. (..., Bq, dk)
                dk[..., cols, :] += np.swapaxes(dtile, -1, -2) @ q_block       # 1. (..., Bk, dk)
        return dq, dk, dv

    def _tile_scores(self, q_block, rows, cols):
        """Steps 1-3 for one tile: scale q k^T, plus the bias, -inf where a key is masked; (..., Bq, Bk)."""
        tile = q_block @ np.swapaxes(self.k[..., cols, :], -1, -2) * self.used_scale     # 1-2.
        if self.bias is not None:
            tile = tile + self.bias[..., rows, cols]                           # 2b. constant score bias
        allowed = self._tile_allowed(rows, cols)
        if allowed is not None:
            tile = np.where(allowed, tile, -np.inf)                            # 3. masked keys get -inf
        return tile

    def _tile_allowed(self, rows, cols):
        """The causal rule and the user's mask on one tile (bool, broadcastable to it), or None."""
        Tq, Tk = self.q.shape[-2], self.k.shape[-2]
        allowed = None
        if self.causal:                                                        # key j <= query's position
            allowed = np.arange(cols.start, cols.stop)[None, :] <= np.arange(rows.start, rows.stop)[:, None] + Tk - Tq
        if self.mask is not None:
            tile_mask = self.mask[..., rows, cols]
            allowed = tile_mask if allowed is None else allowed & tile_mask
        return allowed

    def __repr__(self):
        return f"TiledAttention(causal={self.causal}, scale={self.scale}, block_size={self.block_size})"


def online_softmax_step(row_max, row_sum, acc, scores, values):
    """Fold one block of keys into the running maximum m, sum l and output o (steps 4-5).

    Args:
        row_max: (..., Bq, 1) m, the largest score seen so far (-inf before any).
        row_sum: (..., Bq, 1) l, the sum of exp(s_j - m) over the keys seen.
        acc: (..., Bq, dv) o, the sum of exp(s_j - m) v_j over the keys seen.
        scores: (..., Bq, Bk) the new block's scores (-inf where masked).
        values: (..., Bk, dv) the new block's values.
    Returns:
        (m', l', o') after the block, the same shapes.
    """
    new_max = np.maximum(row_max, scores.max(axis=-1, keepdims=True))   # 4a. m' = max(m, max_j s_j)
    shift = np.where(np.isfinite(new_max), new_max, 0)                  # 4b. no finite score yet: shift by 0
    weights = np.exp(scores - shift)                                    # 4c. exp(s_j - m'), each <= 1
    rescale = np.exp(row_max - shift)                                   # 4d. exp(m - m'), 0 while m = -inf
    row_sum = rescale * row_sum + weights.sum(axis=-1, keepdims=True)   # 4e. l' = exp(m - m') l + sum_j
    acc = rescale * acc + weights @ values                              # 5.  o' = exp(m - m') o + sum_j .. v_j
    return new_max, row_sum, acc


def online_softmax_result(row_max, row_sum, acc):
    """(out, lse) from the final m, l, o (steps 6-7): out = o / l, lse = m + log l.

    A row that saw no finite score (l = 0) gets out = 0 and lse = +inf, so that the backward's
    recomputed weights exp(s - lse) are 0 there. Shapes: out (..., Bq, dv), lse (..., Bq, 1).
    """
    seen = row_sum > 0                                                  # False: the row saw no key
    safe_sum = np.where(seen, row_sum, 1)                               # (..., Bq, 1)
    shift = np.where(row_max > -np.inf, row_max, 0)                     # m, or 0 for a row with no key
    out = acc / safe_sum                                                # 6. out = o / l (0 if no key)
    lse = np.where(seen, shift + np.log(safe_sum), np.inf)              # 7. lse = m + log l
    return out, lse


def blocks(length, block_size):
    """slice objects covering 0 .. length in steps of block_size (the last may be shorter)."""
    return [slice(start, min(start + block_size, length)) for start in range(0, length, block_size)]


def tile_views(layer, mask, bias, scores_shape):
    """The mask and the bias as read-only broadcast views of scores_shape (no T^2 copy), checked;
    errors name `layer`. The fast tier's tiled attention calls this too."""
    mask = layer._check_mask(mask, scores_shape)
    mask = None if mask is None else np.broadcast_to(mask, scores_shape)
    if bias is not None:
        bias = np.asarray(bias)
        layer._check_float(bias, "bias")
        try:
            bias = np.broadcast_to(bias, scores_shape)
        except ValueError:
            raise ValueError(f"{layer!r} expected a bias broadcastable to {scores_shape}, got {bias.shape}") from None
    return mask, bias
