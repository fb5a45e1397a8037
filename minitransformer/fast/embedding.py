"""Embedding, fast form: the scatter-add of the backward pass as a sort and one `np.add.reduceat`.

The plain backward, `np.add.at(weight.grad, ids, dout)`, adds row by row in an
unbuffered loop; sorting the ids and adding each run of equal ids at once gives
the same sums much faster on the benchmark model's (768, 128) rows (0.2 benchmark,
benchmarks/README.md). The plain layer is `minitransformer/layers/embedding.py`;
tests/test_fast.py proves this form equal to it.
"""

import numpy as np

from ..layers.embedding import Embedding


class FastEmbedding(Embedding):
    """`Embedding` whose backward sums repeated ids with one reduceat. Same parameters and results."""

    def backward(self, dout):
        """dout (B, T, C) -> None; dweight[v] += the sum of dout over the positions holding id v."""
        self._require("ids")
        self._check_dout(dout, (*self.ids.shape, self.d))
        # Sort the rows by id, add each run of equal ids with one reduceat, then scatter the distinct ids.
        flat_ids = self.ids.reshape(-1)                                     # (N,)
        if flat_ids.size == 0:
            return None
        order = np.argsort(flat_ids, kind="stable")
        sorted_ids = flat_ids[order]
        run_starts = np.flatnonzero(np.diff(sorted_ids, prepend=-1))        # first row of each id
        sums = np.add.reduceat(dout.reshape(-1, self.d)[order], run_starts, axis=0)   # (distinct, C)
        self.weight.grad[sorted_ids[run_starts]] += sums                    # ids distinct: += is safe
        return None


FAST_FORMS = {Embedding: FastEmbedding}
