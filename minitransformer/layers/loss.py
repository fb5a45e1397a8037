r"""Cross-entropy loss of next-token prediction, the mean negative log-likelihood.

$$
L = -\frac{1}{n} \sum_i \mathrm{keep}_i \log p_{i, t_i}, \qquad p_i = \operatorname{softmax}(z_i), \qquad
n = \textstyle\sum_i \mathrm{keep}_i
$$

over the positions i (every leading axis of the logits z), t_i the target of position i, keep_i 0 where it
equals `ignore_index` and 1 elsewhere. The softmax and the log are fused (log-sum-exp with the row maximum
subtracted) so logits of +-1e4 in float32 still give a finite loss.

Left out: label smoothing (the 2017 paper's epsilon_ls = 0.1, which mixes the
one-hot target with a uniform distribution) and per-class weights; the loss is
always the mean over the scored positions.

Derivation:
    Notebook 04 derives the gradient step by step: the mean, the log, then softmax's backward, whose
    Jacobian collapses against the one-hot target's single entry.
"""

import numpy as np

from ..core.module import Module
from .embedding import check_token_ids


class CrossEntropyLoss(Module):
    """Mean NLL over all positions whose target is not `ignore_index`.

    Args:
        ignore_index: optional target value that contributes neither loss nor
            gradient (padding, or unmasked positions in a masked LM).
    """

    def __init__(self, ignore_index=None):
        self.ignore_index = ignore_index

    def forward(self, logits, targets):
        """logits (..., V), targets int (...) -> scalar loss (a 0-d float of the logits' dtype)."""
        logits = np.asarray(logits)
        targets = np.asarray(targets)
        self._check_float(logits, "logits")
        if logits.ndim == 0 or logits.shape[:-1] != targets.shape:
            raise ValueError(f"{self!r} expected logits (..., V) and targets (...) with the same leading shape, "
                             f"got logits {logits.shape} and targets {targets.shape}")
        V = logits.shape[-1]
        flat_targets = targets.reshape(-1)
        self.keep = np.ones(flat_targets.shape, dtype=bool) if self.ignore_index is None else flat_targets != self.ignore_index
        check_token_ids(flat_targets[self.keep], V, f"{self!r} (targets)")
        self.count = int(self.keep.sum())
        if self.count == 0:
            raise ValueError(f"{self!r}: every target equals ignore_index={self.ignore_index}; the mean is undefined")
        ### BEGIN SOLUTION crossentropy.forward
        logits2d = logits.reshape(-1, V)                                      # (N, V)
        shifted = logits2d - logits2d.max(axis=-1, keepdims=True)             # (N, V), row max is 0
        exp_shifted = np.exp(shifted)
        total = exp_shifted.sum(axis=-1, keepdims=True)                       # (N, 1)
        self.probs = exp_shifted / total                                      # (N, V) softmax
        self.safe_targets = np.where(self.keep, flat_targets, 0)              # ignored rows point at 0
        target_shifted = shifted[np.arange(len(flat_targets)), self.safe_targets]   # (N,)
        nll = (np.log(total[:, 0]) - target_shifted) * self.keep              # -log p(target)
        ### END SOLUTION
        self.logits_shape = logits.shape
        return nll.sum() / self.count

    def backward(self, grad=1.0):
        r"""The gradient at the logits, times `grad`.

        Derivation:
            Undo the mean, the log and the softmax, with $e_{t_i}$ the one-hot vector of the target:

            $$
            \begin{aligned}
            L = \tfrac{1}{n} \textstyle\sum_i \mathrm{keep}_i \, \ell_i \;&\Rightarrow\;
                d\ell_i = \mathrm{grad} \cdot \mathrm{keep}_i / n \\
            \ell_i = -\log p_{i, t_i} \;&\Rightarrow\; dp_i = -d\ell_i \, e_{t_i} / p_{i, t_i} \\
            p_i = \operatorname{softmax}(z_i) \;&\Rightarrow\;
                dz_i = p_i \odot \big( dp_i - dp_i \cdot p_i \big) = d\ell_i \, \big( p_i - e_{t_i} \big)
            \end{aligned}
            $$

            Softmax minus the one-hot target, divided by the number of scored positions n, zero on the
            ignored ones: softmax's Jacobian collapses because the target has a single entry.

        Args:
            grad: upstream gradient of the scalar loss (1.0 when the loss is the objective).
        Returns:
            dlogits (..., V).
        """
        if np.shape(grad) != ():
            raise ValueError(f"{self!r}.backward expected a scalar grad, got shape {np.shape(grad)}")
        ### BEGIN SOLUTION crossentropy.backward
        dlogits = self.probs.copy()                                           # (N, V)
        dlogits[np.arange(len(self.safe_targets)), self.safe_targets] -= 1.0
        dlogits *= (self.keep * (grad / self.count))[:, None].astype(dlogits.dtype)
        return dlogits.reshape(self.logits_shape)
        ### END SOLUTION

    def __repr__(self):
        return "CrossEntropyLoss()" if self.ignore_index is None else f"CrossEntropyLoss(ignore_index={self.ignore_index})"
