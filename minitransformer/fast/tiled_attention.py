"""Tiled attention, fast form: `TiledAttention`'s two algorithms (FlashAttention-2's Algorithms 1 and 2,
derived in variants/tiled_attention.py) in large tiles, in place, their blocks shared between threads.

What it changes, and nothing else (the blocks, the causal skipping, the loop over a query block's tiles, each
tile's bias and masks, the online softmax's final division and the checks are the plain layer's; this class
replaces three of its steps, `softmax_step`, `_tile_scores` and `_mask_diagonal`, and the backward):

* **Threads over blocks** (FlashAttention-2's section 3.2 spreads the same work over the GPU's thread blocks):
  the forward's query blocks, and the backward's key blocks, are shared out between `workers` threads, each
  running every tile of its blocks with one BLAS thread. The blocks of one pass are independent: a query block
  writes its own rows of out and lse; a key block its own dk_j and dv_j. Only dq's rows receive terms from every
  key block, so each thread sums them into a dq of its own, and those are added at the end (one (..., Tq, dk)
  array per thread: memory still linear in T). NumPy releases the GIL inside its ufunc loops and BLAS calls, so
  the threads compute at the same time; only the Python between two NumPy calls is taken in turn.
  The number of threads is the BLAS thread count the process was given (`OPENBLAS_NUM_THREADS`, or the limit
  `train` sets per rank, read with threadpoolctl), and during the threads BLAS is limited to one thread each:
  attention's threads and BLAS's together never exceed the process's share of cores.
* Each key block transposed once into a contiguous (..., dk, Bk) array, each value block into (..., dv, Bk)
  (OpenBLAS multiplies a transposed small right operand more slowly, as in `fast/attention.py`).
* The diagonal's causal rule as an additive bias of 0 and -inf, built once per forward and added in place.
* The shift, exp and the softmax backward's products in place in the tile's buffer; row sums as products with a
  vector of ones (`fast/reductions.py`).

The blocks are shared out before the threads start, largest first, each to the least loaded thread (a causal
query block's cost is its number of tiles), so each thread keeps the same blocks from one call to the next and
the result does not depend on the machine's timing: dq's terms are summed in a fixed order.

Measured on nanoGPT's CPU model at T = 2048 (benchmarks/README.md, "Long sequences on two cores" and "What kept
the second core idle"; the measurement is `benchmarks/bench_long_sequences.py`): the threads add no work and
scarcely wait for each other; what took the second core was OpenBLAS's helper thread, left spinning by the linear
layers' products just before, which `fast/blas_idle.py` sends to sleep. tests/test_fast.py proves this form
equal to `TiledAttention` (forward and every gradient) on the gradient checker's cases, and
tests/test_tiled_attention.py measures its memory.
"""

import os
import sys
from concurrent.futures import ThreadPoolExecutor, wait
from functools import lru_cache

import numpy as np
from threadpoolctl import ThreadpoolController

from ..variants.tiled_attention import TiledAttention, gradient_dtypes
from .reductions import sum_last_axis


def online_softmax_step_in_place(row_max, row_sum, acc, scores, values):
    """`online_softmax_step` ([1.9-10], variants/tiled_attention.py) in place: the tile's scores become its weights
    exp(s - m') in their own buffer, o is rescaled and added to where it is, and the row sums are products with a
    vector of ones (`fast/reductions.py`). Overwrites `scores` and `acc`; same arguments, shapes and results."""
    new_max = np.maximum(row_max, np.max(scores, axis=-1, keepdims=True))
    shift = np.where(np.isfinite(new_max), new_max, 0)
    scores -= shift
    weights = np.exp(scores, out=scores)                                        # exp(s - m')
    rescale = np.exp(row_max - shift)                                           # exp(m - m')
    row_sum = rescale * row_sum + sum_last_axis(weights)
    acc *= rescale
    acc += weights @ values
    return new_max, row_sum, acc


class FastTiledAttention(TiledAttention):
    """`TiledAttention` in place, its blocks shared between `workers` threads (None: as many as the process's
    BLAS threads). Same arguments, attributes and results."""

    workers = None
    softmax_step = staticmethod(online_softmax_step_in_place)     # [1.9-10], above

    def forward(self, q, k, v, mask=None, bias=None):
        """q (..., Tq, dk), k (..., Tk, dk), v (..., Tk, dv) -> out (..., Tq, dv); see the plain layer."""
        out, lse = self._start(q, k, v, mask, bias)
        self.k_t = [np.ascontiguousarray(np.swapaxes(self.k[..., cols, :], -1, -2))   # (..., dk, Bk) per key block
                    for cols in self.tiling.key_blocks]
        mask = self.tiling.diagonal_mask
        self.diagonal_bias = None if mask is None else np.where(mask, 0, -np.inf).astype(self.q_scaled.dtype)

        def query_blocks(indices):
            for i in indices:
                rows = self.tiling.query_blocks[i]
                out[..., rows, :], lse[..., rows, :] = self._forward_query_block(i)
        costs = [len(keys) for keys in self.tiling.keys_seen_by]
        in_threads(query_blocks, share(costs, self._workers()))
        self.out, self.lse = out, lse
        return out

    def _tile_scores(self, q_i, k_j, i, j):
        """The plain layer's tile scores, (..., Bq, Bk), a new array; k_j^T is read from the key block's
        contiguous transposed copy (k_j, the block itself, is not used)."""
        return super()._tile_scores(q_i, np.swapaxes(self.k_t[j], -1, -2), i, j)  # transposed back there: k_t[j]

    def _mask_diagonal(self, scores_ij):
        """The causal rule as a bias of 0 and -inf, added to the tile in place."""
        size = scores_ij.shape[-1]
        scores_ij += self.diagonal_bias[:size, :size]
        return scores_ij

    def backward(self, dout):
        """dout (..., Tq, dv) -> (dq, dk, dv); Algorithm 2 with the key blocks shared between threads."""
        self.D = sum_last_axis(dout * self.out)                                     # [2.4] (..., Tq, 1)
        self.dout = dout
        dq_type, dk_type, dv_type = gradient_dtypes(self.q_scaled, self.v, dout)   # as plain attention's
        dk = np.empty_like(self.k, dtype=dk_type)                                   # laid out like k, v
        dv = np.empty_like(self.v, dtype=dv_type)                                   # (every row written once)
        self.v_t = [np.ascontiguousarray(np.swapaxes(self.v[..., cols, :], -1, -2))  # (..., dv, Bk) per key block
                    for cols in self.tiling.key_blocks]

        def key_blocks(indices):
            dq_scaled = np.zeros_like(self.q, dtype=dq_type)                        # this thread's dq terms
            for j in indices:
                cols = self.tiling.key_blocks[j]
                dk[..., cols, :], dv[..., cols, :] = self._backward_key_block(j, dq_scaled, dk_type, dv_type)
            return dq_scaled
        costs = [len(queries) for queries in self.tiling.queries_seeing]
        empty = np.zeros_like(self.q, dtype=dq_type)                                # no key block at all (Tk = 0)
        dq_scaled, *others = in_threads(key_blocks, share(costs, self._workers())) or [empty]
        for terms in others:
            dq_scaled += terms
        dq_scaled *= self.used_scale                                                # q_scaled = scale q
        del self.D, self.dout, self.v_t
        return dq_scaled, dk, dv

    def _backward_key_block(self, j, dq_scaled, dk_type, dv_type):
        """[2.6-18] for key block j, in place: (dk_j, dv_j) of the dtypes given; adds its terms of dq into dq_scaled."""
        cols = self.tiling.key_blocks[j]
        k_j = self.k[..., cols, :]                                                      # (..., Bk, dk)
        dk_j = np.zeros((*k_j.shape[:-1], self.k.shape[-1]), dk_type)
        dv_j = np.zeros((*k_j.shape[:-1], self.v.shape[-1]), dv_type)
        for i in self.tiling.queries_seeing[j]:
            rows = self.tiling.query_blocks[i]
            q_i, dout_i = self.q_scaled[..., rows, :], self.dout[..., rows, :]
            weights_ij = self._tile_scores(q_i, k_j, i, j)                              # s, recomputed
            weights_ij -= self.lse[..., rows, :]
            np.exp(weights_ij, out=weights_ij)                                          # p = exp(s - lse)
            dv_j += np.swapaxes(weights_ij, -1, -2) @ dout_i
            dscores_ij = dout_i @ self.v_t[j]                                           # dp (..., Bq, Bk)
            dscores_ij -= self.D[..., rows, :]
            dscores_ij *= weights_ij                                                    # ds = p (dp - D)
            dq_scaled[..., rows, :] += dscores_ij @ k_j
            dk_j += np.swapaxes(dscores_ij, -1, -2) @ q_i
        return dk_j, dv_j

    def _workers(self):
        return blas_threads() if self.workers is None else self.workers


def share(costs, n_parts):
    """The indices of `costs` in at most n_parts lists of about equal total cost: largest first, each to the
    least loaded list (so that causal blocks, whose costs fall along the diagonal, are balanced)."""
    parts, loads = [[] for _ in range(max(1, n_parts))], [0] * max(1, n_parts)
    for index in sorted(range(len(costs)), key=lambda index: -costs[index]):
        least = loads.index(min(loads))
        parts[least].append(index)
        loads[least] += costs[index]
    return [part for part in parts if part]


def in_threads(work, parts):
    """[work(part) for part in parts], the first in this thread and the others in the pool's, with BLAS
    limited to one thread while more than one part runs; an exception in any is raised here."""
    if len(parts) <= 1:
        return [work(part) for part in parts]
    with _blas().limit(limits=1):
        others = [_pool(len(parts) - 1).submit(work, part) for part in parts[1:]]
        try:
            first = work(parts[0])
        finally:
            wait(others)                                # no thread still computing once BLAS is set back
        return [first] + [future.result() for future in others]


def blas_threads():
    """The threads BLAS may use in this process (at least 1): its share of the cores."""
    return max([1] + [controller.num_threads for controller in _blas().lib_controllers])


@lru_cache(maxsize=1)
def _blas():
    return ThreadpoolController().select(user_api="blas")


@lru_cache(maxsize=4)
def _pool(n_threads):
    return ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="tiled-attention")


if sys.platform != "win32":                             # Windows starts processes anew: there is no fork
    os.register_at_fork(after_in_child=_pool.cache_clear)    # a forked child has none of the parent's threads

FAST_FORMS = {TiledAttention: FastTiledAttention}
