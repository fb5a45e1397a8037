"""Tiled attention: softmax(q k^T * scale + mask) v without ever holding the (Tq, Tk) weights.

Sources: FlashAttention-2 (Dao 2023, "FlashAttention-2: Faster Attention with Better Parallelism and Work
Partitioning", arXiv 2307.08691): Algorithm 1 is the forward pass, Algorithm 2 the backward pass, section 3.1.1
the causal mask; both rest on the online softmax (Milakov & Gimelshein 2018, "Online normalizer calculation for
softmax", arXiv 1805.02867). The first FlashAttention (Dao et al. 2022, arXiv 2205.14135) divided its output by
the running sum after every block and saved the maximum and the sum for backward; its second version, followed
here, keeps the output unnormalised until the last block and saves one number per row, the log-sum-exp.

Plain attention (`layers/attention.py`) builds the whole (..., Tq, Tk) score matrix, and keeps the weights alpha
for its backward pass: memory grows with T^2. This layer computes the same numbers one tile at a time: a block of
queries against a block of keys, (..., Bq, Bk), and keeps only q, k, v, out and one number per query row for
backward: memory grows with T.

Online softmax, for one query row whose scores s_1 .. s_Tk arrive in blocks of keys. After the blocks seen so
far, keep three numbers per row (a vector o for the output):

    m = max of the scores seen                      the running maximum
    l = sum over seen keys of exp(s_j - m)          the running sum, relative to m
    o = sum over seen keys of exp(s_j - m) v_j      the unnormalised output, relative to m

When the next block arrives, with scores s_j, j in the block:

    m' = max(m, max_j s_j)                          the new maximum
    l' = exp(m - m') l + sum_j exp(s_j - m')        the old sum re-based: exp(s - m) exp(m - m') = exp(s - m')
    o' = exp(m - m') o + sum_j exp(s_j - m') v_j    the same correction for the output

so the three invariants hold again, with the block added. After the last block, l is the softmax's
denominator relative to m, so

    out = o / l = sum_j softmax(s)_j v_j            exactly plain attention's row
    lse = m + log l = log sum_j exp(s_j)            the row's log-sum-exp, saved for backward

Each exp(s - m') is at most 1, so nothing overflows, as in `layers/softmax.py`.

The backward pass (Algorithm 2) recomputes the weights from the saved lse instead of storing them, and takes a
block of keys outside and the blocks of queries inside.

The paper's lines, as this file's comments number them ([1.8] is Algorithm 1's line 8, [2.14] Algorithm 2's
line 14). The paper leaves out the scale (its S = Q K^T); here q is multiplied by it once, before the loops,
so every tile's scores are (scale q) k^T.

    forward, Algorithm 1
    [1.1-2] cut q into query blocks, k and v into key blocks; out and lse into row blocks
    [1.3]   for each query block i:
    [1.4]     q_i
    [1.5]     m = -inf, l = 0, o = 0
    [1.6]     for each key block j it sees:
    [1.7]       k_j, v_j
    [1.8]       s = q_i k_j^T (+ bias, mask)
    [1.9]       m', p~ = exp(s - m'), l'
    [1.10]      o' = exp(m - m') o + p~ v_j
    [1.12]    out_i = o / l
    [1.13]    lse_i = m + log l
    [1.14-15] write out_i and lse_i

Causal attention (the paper's section 3.1.1): a tile whose keys all lie after its queries is skipped, and only
the tile on the diagonal needs the mask. The key blocks are cut at the query blocks' positions (after the keys
before the first query, which every query sees: the cache, in decoding), so that every diagonal tile is a square
that holds the same lower-triangular mask: built once per forward, a slice of it for a shorter last block.

A query row that sees no key (fully masked) never gets a finite score: l stays 0, and this layer gives it
out = 0, as plain attention does; its lse is stored as +inf.

This file is the plain form: one line per step. The fast tier's form (`fast/tiled_attention.py`) runs the same
algorithm with large tiles, in place, its blocks shared between threads; the fast dense attention
(`fast/attention.py`) hands long sequences to it. Notebook 17 walks one row through the online softmax.

Left out: dropout on the weights, a learned score bias (the bias is a constant, as ALiBi's), and everything the
paper does for the GPU (its on-chip memory, its warps).

Derivation:
    Backward, with the weights recomputed instead of stored: p_j = exp(s_j - lse) is softmax(s)_j exactly (the
    denominator is exp(lse)). The softmax backward needs, per row, sum_j p_j dp_j with dp_j = dout . v_j; that sum
    is dout . (sum_j p_j v_j) = dout . out = D, one number per row computed once from the saved output. So every
    tile's gradients follow from the tile alone, and the backward can take the tiles in any order. Algorithm 2
    takes a block of keys outside and the blocks of queries inside: dk and dv of that key block are sums over the
    query blocks, kept in the block (dk_j, dv_j) and written once; dq's rows receive one term per key block, and
    dq = scale * (the gradient of scale q) once, after the loops.

        backward, Algorithm 2
        [2.1-3] the same blocks; dq starts at 0
        [2.4]   D = rowsum(dout * out), once
        [2.5]   for each key block j:
        [2.6]     k_j, v_j
        [2.7]     dk_j = 0, dv_j = 0
        [2.8]     for each query block i that sees it:
        [2.9]       q_i, dout_i, lse_i, D_i
        [2.10]      s = q_i k_j^T (+ bias, mask), recomputed
        [2.11]      p = exp(s - lse_i)
        [2.12]      dv_j += p^T dout_i
        [2.13]      dp = dout_i v_j^T
        [2.14]      ds = p (dp - D_i)
        [2.15]      dq_i += ds k_j
        [2.16]      dk_j += ds^T q_i
        [2.18]    write dk_j and dv_j

    A fully masked row passes no gradient: its lse of +inf makes the recomputed weights exp(-inf - inf) zero.
"""

from dataclasses import dataclass

import numpy as np

from ..layers.attention import ScaledDotProductAttention, causal_mask


def online_softmax_step(row_max, row_sum, acc, scores, values):
    """Fold one block of keys into the running maximum m, sum l and output o ([1.9-10]).

    Args:
        row_max: (..., Bq, 1) m, the largest score seen so far (-inf before any).
        row_sum: (..., Bq, 1) l, the sum of exp(s_j - m) over the keys seen.
        acc: (..., Bq, dv) o, the sum of exp(s_j - m) v_j over the keys seen.
        scores: (..., Bq, Bk) the new block's scores (-inf where masked).
        values: (..., Bk, dv) the new block's values.
    Returns:
        (m', l', o') after the block, the same shapes.
    """
    new_max = np.maximum(row_max, scores.max(axis=-1, keepdims=True))   # [1.9] m' = max(m, max_j s_j)
    shift = np.where(np.isfinite(new_max), new_max, 0)                  #       no finite score yet: shift by 0
    weights = np.exp(scores - shift)                                    # [1.9] p~ = exp(s_j - m'), each <= 1
    rescale = np.exp(row_max - shift)                                   #       exp(m - m'), 0 while m = -inf
    row_sum = rescale * row_sum + weights.sum(axis=-1, keepdims=True)   # [1.9] l' = exp(m - m') l + sum_j p~_j
    acc = rescale * acc + weights @ values                              # [1.10] o' = exp(m - m') o + p~ v
    return new_max, row_sum, acc


def online_softmax_result(row_max, row_sum, acc):
    """(out, lse) from the final m, l, o ([1.12-13]): out = o / l, lse = m + log l.

    A row that saw no finite score (l = 0) gets out = 0 and lse = +inf, so that weights recomputed
    as exp(s - lse) are 0 there. Shapes: out (..., Bq, dv), lse (..., Bq, 1).
    """
    seen = row_sum > 0                                                  # False: the row saw no key
    safe_sum = np.where(seen, row_sum, 1)                               # (..., Bq, 1)
    shift = np.where(row_max > -np.inf, row_max, 0)                     # m, or 0 for a row with no key
    out = acc / safe_sum                                                # [1.12] out = o / l (0 if no key)
    lse = np.where(seen, shift + np.log(safe_sum), np.inf)              # [1.13] lse = m + log l
    return out, lse


class TiledAttention(ScaledDotProductAttention):
    """ScaledDotProductAttention's numbers (`forward(q, k, v, mask=None, bias=None)`), computed in
    (block_size x block_size) tiles with an online softmax; memory linear in T.

    Args:
        causal: if True, query i (at absolute position Tk - Tq + i) sees keys 0 .. Tk - Tq + i.
        scale: multiplies the scores; None means 1/sqrt(dk).
        block_size: rows of queries and of keys per tile (>= 1, default 64); the last block may be shorter.
    Attributes after forward:
        lse: (..., Tq, 1) each query row's log-sum-exp of its scores (+inf for a row that sees no key).
        out: (..., Tq, dv) the output, kept for the backward pass.
        q_scaled: (..., Tq, dk) scale * q, the queries every tile multiplies.
        tiling: the blocks and which tiles are computed (`Tiling`).
        There is no `alpha`: the weights are never stored.
    The fast form (fast/tiled_attention.py) replaces `softmax_step`, `_tile_scores` and `_mask_diagonal` with
    in-place forms, shares the query blocks between threads, and has a backward of its own.
    """

    softmax_step = staticmethod(online_softmax_step)       # [1.9-10], above

    def __init__(self, causal=False, scale=None, block_size=64):
        if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
            raise ValueError(f"TiledAttention expected block_size an integer >= 1, got {block_size!r}")
        super().__init__(causal=causal, scale=scale)
        self.block_size = int(block_size)

    def forward(self, q, k, v, mask=None, bias=None):
        """Algorithm 1: each block of queries against the blocks of keys it sees, one tile at a time.

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
        out, lse = self._start(q, k, v, mask, bias)                            # [1.1-2]
        for i, rows in enumerate(self.tiling.query_blocks):                    # [1.3]
            out[..., rows, :], lse[..., rows, :] = self._forward_query_block(i)    # [1.14-15]
        self.out, self.lse = out, lse
        return out

    def _start(self, q, k, v, mask, bias):
        """Check and keep the inputs, cut the blocks, fold the scale into q; the empty out (..., Tq, dv) and lse
        (..., Tq, 1) (0 and +inf: the values of a row that sees no key). The fast form starts the same way."""
        q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
        self._check_shapes(q, k, v)
        Tq, Tk = q.shape[-2], k.shape[-2]
        self.used_scale = q.shape[-1] ** -0.5 if self.scale is None else self.scale
        self.q, self.k, self.v = q, k, v
        self.mask, self.bias = tile_views(self, mask, bias, (*q.shape[:-1], Tk))
        self.tiling = Tiling.cut(Tq, Tk, self.block_size, self.causal)
        # S = (scale q) k^T: q scaled in the dtype of q k^T (a float32 q against float64 keys in float64)
        self.q_scaled = self.used_scale * q.astype(np.result_type(q, k), copy=False)   # (..., Tq, dk)
        out = np.zeros((*q.shape[:-1], v.shape[-1]), np.result_type(self.q_scaled, v))     # (..., Tq, dv)
        lse = np.full((*q.shape[:-1], 1), np.inf, self.q_scaled.dtype)                      # (..., Tq, 1)
        return out, lse

    def _forward_query_block(self, i):
        """[1.4-13] Query block i through the online softmax over the key blocks it sees: (out_i, lse_i)."""
        q_i = self.q_scaled[..., self.tiling.query_blocks[i], :]                           # [1.4] (..., Bq, dk)
        row_max = np.full((*q_i.shape[:-1], 1), -np.inf, dtype=q_i.dtype)                  # [1.5] m (..., Bq, 1)
        row_sum = np.zeros_like(row_max)                                                   #       l (..., Bq, 1)
        acc = np.zeros((*q_i.shape[:-1], self.v.shape[-1]), np.result_type(q_i, self.v))   #       o (..., Bq, dv)
        for j in self.tiling.keys_seen_by[i]:                                              # [1.6]
            cols = self.tiling.key_blocks[j]
            k_j, v_j = self.k[..., cols, :], self.v[..., cols, :]                          # [1.7] (..., Bk, d)
            scores = self._tile_scores(q_i, k_j, i, j)                                     # [1.8] (..., Bq, Bk)
            row_max, row_sum, acc = self.softmax_step(row_max, row_sum, acc, scores, v_j)      # [1.9-10]
        return online_softmax_result(row_max, row_sum, acc)                                # [1.12-13]

    def backward(self, dout):
        r"""Algorithm 2: the gradients at q, k and v, one tile at a time, each block of keys against the blocks of
        queries that see it; dk_j and dv_j summed in the block and written once.

        Derivation:
            The weights of every tile are recomputed from the saved lse. Per tile, with
            $\hat q = \text{scale} \cdot q$ (the scale folded into q):

            $$
            \begin{aligned}
            &[2.11] \quad p = \exp(s - \text{lse}) && \text{the weights: each row's softmax denominator is } e^{\text{lse}} \\
            &[2.12\text{-}13] \quad \text{out} = p\, v \;\Rightarrow\; dv \mathrel{+}= p^\top \mathrm{dout}, \quad
                dp = \mathrm{dout}\, v^\top \\
            &[2.14] \quad p = \operatorname{softmax}(s) \;\Rightarrow\; ds = p \circ (dp - D), \quad
                D = \operatorname{rowsum}(\mathrm{dout} \circ \text{out}) \;\; [2.4] \\
            &[2.15\text{-}16] \quad s = \hat q\, k^\top \;\Rightarrow\; d\hat q \mathrel{+}= ds\, k, \quad
                dk \mathrel{+}= ds^\top \hat q; \qquad \text{at the end } dq = \text{scale} \cdot d\hat q
            \end{aligned}
            $$

            The softmax backward's row sum $\sum_j p_j\, dp_j = \mathrm{dout} \cdot \sum_j p_j v_j = \mathrm{dout} \cdot
            \text{out} = D$ covers the whole row, so each tile needs only its own p and dp. Masked entries have p = 0,
            hence ds = 0 there; the bias is a constant.

        Args:
            dout: (..., Tq, dv).
        Returns:
            (dq, dk, dv) with the shapes of q, k, v.
        """
        ### BEGIN SOLUTION tiled_attention.backward
        D = (dout * self.out).sum(axis=-1, keepdims=True)                      # [2.4] (..., Tq, 1)
        dq_type, dk_type, dv_type = gradient_dtypes(self.q_scaled, self.v, dout)   # as plain attention's
        dq_scaled = np.zeros(self.q.shape, dq_type)                            # [2.3] (..., Tq, dk)
        dk = np.zeros(self.k.shape, dk_type)                                   # (..., Tk, dk)
        dv = np.zeros(self.v.shape, dv_type)                                   # (..., Tk, dv)
        for j, cols in enumerate(self.tiling.key_blocks):                      # [2.5]
            k_j, v_j = self.k[..., cols, :], self.v[..., cols, :]              # [2.6] (..., Bk, dk), (..., Bk, dv)
            dk_j, dv_j = np.zeros_like(dk[..., cols, :]), np.zeros_like(dv[..., cols, :])  # [2.7]
            for i in self.tiling.queries_seeing[j]:                            # [2.8]
                rows = self.tiling.query_blocks[i]
                q_i, dout_i = self.q_scaled[..., rows, :], dout[..., rows, :]  # [2.9] (..., Bq, dk), (..., Bq, dv)
                scores_ij = self._tile_scores(q_i, k_j, i, j)                  # [2.10] recomputed (..., Bq, Bk)
                weights_ij = np.exp(scores_ij - self.lse[..., rows, :])        # [2.11] p, exactly softmax's weights
                dv_j = dv_j + np.swapaxes(weights_ij, -1, -2) @ dout_i         # [2.12] (..., Bk, dv)
                dweights_ij = dout_i @ np.swapaxes(v_j, -1, -2)                # [2.13] dp (..., Bq, Bk)
                dscores_ij = weights_ij * (dweights_ij - D[..., rows, :])      # [2.14] ds (..., Bq, Bk)
                dq_scaled[..., rows, :] += dscores_ij @ k_j                    # [2.15] (..., Bq, dk)
                dk_j = dk_j + np.swapaxes(dscores_ij, -1, -2) @ q_i            # [2.16] (..., Bk, dk)
            dk[..., cols, :], dv[..., cols, :] = dk_j, dv_j                    # [2.18]
        dq = self.used_scale * dq_scaled                                       # q_scaled = scale q
        return dq, dk, dv
        ### END SOLUTION

    def _tile_scores(self, q_i, k_j, i, j):
        """[1.8] = [2.10] on tile (i, j): (scale q_i) k_j^T, plus the bias, -inf where a key is masked; (..., Bq, Bk)."""
        rows, cols = self.tiling.query_blocks[i], self.tiling.key_blocks[j]
        scores_ij = q_i @ np.swapaxes(k_j, -1, -2)                             # the scale is in q_i
        if self.bias is not None:
            scores_ij = scores_ij + self.bias[..., rows, cols]                 # a constant score bias
        if self.tiling.is_diagonal(i, j):
            scores_ij = self._mask_diagonal(scores_ij)                         # causal: keys after the query -inf
        if self.mask is not None:
            scores_ij = np.where(self.mask[..., rows, cols], scores_ij, -np.inf)  # the user's mask
        return scores_ij

    def _mask_diagonal(self, scores_ij):
        """A tile on the diagonal, (..., Bq, Bq) (the last may be smaller): -inf where a key comes after its query."""
        size = scores_ij.shape[-1]
        return np.where(self.tiling.diagonal_mask[:size, :size], scores_ij, -np.inf)

    def __repr__(self):
        return f"TiledAttention(causal={self.causal}, scale={self.scale}, block_size={self.block_size})"


@dataclass
class Tiling:
    """The blocks of one forward, and which tiles are computed (with causal: none wholly after the diagonal).

    query_blocks, key_blocks: lists of slices over the queries' and the keys' axis.
    keys_seen_by[i]: the indices of the key blocks query block i sees (Algorithm 1's inner loop).
    queries_seeing[j]: the indices of the query blocks that see key block j (Algorithm 2's inner loop).
    diagonal_of[i]: the key block on query block i's diagonal (None without causal); only that tile is masked.
    diagonal_mask: (Bq, Bq) bool, True on and below the diagonal, Bq the first query block's length (None
        without causal): every diagonal tile's mask, a shorter last tile's its top-left corner.
    """

    query_blocks: list
    key_blocks: list
    keys_seen_by: list
    queries_seeing: list
    diagonal_of: list
    diagonal_mask: object = None

    @classmethod
    def cut(cls, Tq, Tk, block_size, causal):
        """The tiling of Tq queries against Tk keys; query i sits at position Tk - Tq + i (the end of the keys)."""
        if not causal:
            query_blocks, key_blocks = blocks(Tq, block_size), blocks(Tk, block_size)
            every_query, every_key = range(len(query_blocks)), range(len(key_blocks))
            return cls(query_blocks, key_blocks, [every_key] * len(query_blocks), [every_query] * len(key_blocks),
                       [None] * len(query_blocks))
        offset = Tk - Tq                                          # the first query's position
        query_blocks = blocks(Tq, block_size, start=max(0, -offset))   # queries before position 0 see no key: left out
        before = blocks(max(0, offset), block_size)                     # keys before the first query: every query sees them
        key_blocks = before + [slice(rows.start + offset, rows.stop + offset) for rows in query_blocks]
        n_before, n_rows = len(before), len(query_blocks)
        side = query_blocks[0].stop - query_blocks[0].start if query_blocks else 0     # the largest diagonal tile
        return cls(query_blocks, key_blocks,
                   keys_seen_by=[range(n_before + i + 1) for i in range(n_rows)],           # up to the diagonal
                   queries_seeing=[range(max(0, j - n_before), n_rows) for j in range(len(key_blocks))],
                   diagonal_of=[n_before + i for i in range(n_rows)],
                   diagonal_mask=causal_mask(side, side))

    def is_diagonal(self, i, j):
        return self.diagonal_of[i] == j


def blocks(stop, block_size, start=0):
    """slice objects covering start .. stop in steps of block_size (the last may be shorter)."""
    return [slice(first, min(first + block_size, stop)) for first in range(start, stop, block_size)]


def gradient_dtypes(q_scaled, v, dout):
    """The dtypes of (dq, dk, dv) that plain attention's backward gives (q_scaled is in the scores' dtype): dq and
    dk come from the scores' gradient, which every input reaches; dv is built from the weights and the output's
    gradient alone, so v's own dtype never enters it. The fast tier's tiled attention allocates the same."""
    ds_type = np.result_type(q_scaled, v, dout)
    return ds_type, ds_type, np.result_type(q_scaled, dout)


def tile_views(layer, mask, bias, scores_shape):
    """The mask and the bias as read-only broadcast views of scores_shape (no T^2 copy), checked;
    errors name `layer`. The fast tier's tiled attention starts from these too."""
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
