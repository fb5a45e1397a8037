"""The reward model's pairwise ranking loss (Ouyang et al. 2022, "InstructGPT", §3.5; survey note §7, Fig. 5).

Labelers rank two completions of one prompt; the reward model r should score the chosen one higher. With the
Bradley-Terry model P(chosen preferred) = sigma(r_chosen - r_rejected), the loss is its negative log-likelihood:

    loss = -(1/B) sum_b log sigma(r_chosen_b - r_rejected_b) = (1/B) sum_b log(1 + exp(-(r_chosen_b - r_rejected_b)))

It depends only on the margin m = r_chosen - r_rejected, so adding a constant to every reward changes nothing.
Left out: InstructGPT's grouping of all K-choose-2 pairs of one prompt into one batch element (here every pair
is its own row; the mean is the same when each prompt gives one pair).
"""

import numpy as np

from ..core.module import Module


def log_sigmoid(x):
    """log sigma(x) = -log(1 + e^-x), computed without overflow for large |x|."""
    return -np.logaddexp(0.0, -x)


def sigmoid(x):
    """sigma(x) = 1 / (1 + e^-x), without overflow (e^(log sigma(x)))."""
    return np.exp(log_sigmoid(x))


class PairwiseRankingLoss(Module):
    """Mean of -log sigma(r_chosen - r_rejected) over the B pairs.

    >>> round(float(PairwiseRankingLoss()(np.array([2.0, 0.0]), np.array([1.0, 0.0]))), 4)   # (0.3133 + 0.6931) / 2
    0.5032
    """

    def forward(self, r_chosen, r_rejected):
        """r_chosen (B,), r_rejected (B,) rewards of the preferred and the other completion -> scalar loss."""
        self._check_float(r_chosen, "r_chosen")
        self._check_float(r_rejected, "r_rejected")
        r_chosen, r_rejected = np.asarray(r_chosen), np.asarray(r_rejected)
        if r_chosen.ndim != 1 or r_chosen.shape != r_rejected.shape or r_chosen.size == 0:
            raise ValueError(f"{self!r} expected r_chosen (B,) and r_rejected (B,) with B >= 1, "
                             f"got {r_chosen.shape} and {r_rejected.shape}")
        self.margin = r_chosen - r_rejected                                   # 1. m (B,)
        return -log_sigmoid(self.margin).mean()                               # 2. mean of -log sigma(m)

    def backward(self, grad=1.0):
        """The gradients at both rewards, times `grad`. Returns (dr_chosen (B,), dr_rejected (B,)).

        Derivation:
            d loss/d r_chosen = -(1/B) sigma(-m) * grad and d loss/d r_rejected = +(1/B) sigma(-m) * grad
            (d/dm of -log sigma(m) is -(1 - sigma(m)) = -sigma(-m)).
        """
        ### BEGIN SOLUTION ranking_loss.backward
        dmargin = -grad * sigmoid(-self.margin) / self.margin.size          # undo 2: (B,)
        return dmargin, -dmargin                                              # undo 1: m = r_chosen - r_rejected
        ### END SOLUTION

    def __repr__(self):
        return "PairwiseRankingLoss()"
