"""The two losses of proximal policy optimisation (Schulman et al. 2017, §3 and §5), as InstructGPT uses them
(Ouyang et al. 2022, §3.5; survey note §7, Fig. 5, step 3).

A batch of completions was sampled from the policy as it was (log-probabilities logp_old, one per token), each
token given an advantage A (`objectives/ppo.py`, generalised advantage estimation). The policy is then moved to
make the good tokens likelier, but by small steps: with the ratio r = pi(y) / pi_old(y) = exp(logp - logp_old),

    clipped surrogate:  L_clip = -(1/N) sum_t mask_t min(r_t A_t, clip(r_t, 1 - eps, 1 + eps) A_t)
    value loss:         L_V    = (1/2N) sum_t mask_t (V_t - R_t)^2

with N the number of scored tokens (mask_t = 1) and R the returns the value head V learns to predict. The min
makes the objective pessimistic: once r has moved past 1 +- eps in the direction A favours, the clipped term is
the smaller one. Left out: PPO2's clipping of the value loss, and the entropy bonus.

Derivation:
    Once r has moved past 1 +- eps in the direction A favours, the clipped term is the min and does not
    depend on r: the token's gradient is 0; in the other direction the unclipped term stays and pulls r back.
"""

import numpy as np

from ..core.module import Module


def _scored(mask, shape, layer):
    """The mask as float (shape) and N = its sum; None means every position."""
    mask = np.ones(shape) if mask is None else np.asarray(mask, dtype=np.float64)
    if mask.shape != shape:
        raise ValueError(f"{layer!r} expected a mask of shape {shape}, got {mask.shape}")
    if mask.sum() == 0:
        raise ValueError(f"{layer!r}: the mask scores no position; the mean is undefined")
    return mask, mask.sum()


def _check_same_shape(layer, **arrays):
    shapes = {name: np.shape(array) for name, array in arrays.items()}
    for name, array in arrays.items():
        layer._check_float(array, name)
    if len(set(shapes.values())) != 1:
        raise ValueError(f"{layer!r} expected arrays of one shape, got {shapes}")


class ClippedSurrogateLoss(Module):
    """PPO's clipped objective, negated to be minimised.

    Args:
        clip: eps, how far the ratio may move from 1 before the clipped term takes over (0.2 in PPO and InstructGPT).
    """

    def __init__(self, clip=0.2):
        if not 0.0 < clip < 1.0:
            raise ValueError(f"ClippedSurrogateLoss expected clip in (0, 1), got {clip!r}")
        self.clip = clip

    def forward(self, logp, logp_old, advantages, mask=None):
        """logp (B, T) of the current policy; logp_old, advantages (B, T) from the rollout (constants);
        mask (B, T) of the scored tokens or None -> scalar loss. Also sets `clip_fraction`."""
        _check_same_shape(self, logp=logp, logp_old=logp_old, advantages=advantages)
        self.mask, self.count = _scored(mask, np.shape(logp), self)
        self.advantages = np.asarray(advantages)
        self.ratio = np.exp(np.asarray(logp) - logp_old)                                 # 1. r (B, T)
        clipped = np.clip(self.ratio, 1.0 - self.clip, 1.0 + self.clip)                  # 2. (B, T)
        self.unclipped_is_min = self.ratio * self.advantages <= clipped * self.advantages
        objective = np.minimum(self.ratio * self.advantages, clipped * self.advantages)  # 3. (B, T)
        self.clip_fraction = float(((~self.unclipped_is_min) * self.mask).sum() / self.count)
        return -(objective * self.mask).sum() / self.count                               # 4. scalar

    def backward(self, grad=1.0):
        """The gradient at the log-probabilities, times `grad`; returns dlogp (B, T).

        Derivation:
            dlogp_t = -(grad / N) mask_t A_t r_t [r_t A_t <= clip(r_t) A_t].

            Where the clipped term is the min it is constant in logp; elsewhere d(r A)/dlogp = r A.
        """
        ### BEGIN SOLUTION clipped_surrogate.backward
        dobjective = -grad * self.mask / self.count                                      # undo 4: (B, T)
        dratio = dobjective * self.advantages * self.unclipped_is_min                    # undo 3 (and 2)
        dlogp = dratio * self.ratio                                                      # undo 1: dr/dlogp = r
        ### END SOLUTION
        return dlogp

    def __repr__(self):
        return f"ClippedSurrogateLoss(clip={self.clip})"


class ValueLoss(Module):
    """Half the mean squared error of the value head against the returns, over the scored tokens."""

    def forward(self, values, returns, mask=None):
        """values (B, T), returns (B, T) (a constant target), mask (B, T) or None -> scalar loss."""
        _check_same_shape(self, values=values, returns=returns)
        self.mask, self.count = _scored(mask, np.shape(values), self)
        self.error = np.asarray(values) - returns                                        # 1. (B, T)
        return 0.5 * (self.mask * self.error ** 2).sum() / self.count                    # 2. scalar

    def backward(self, grad=1.0):
        """The gradient at the values, times `grad`; returns dvalues (B, T).

        Derivation:
            dvalues_t = (grad / N) mask_t (V_t - R_t).
        """
        ### BEGIN SOLUTION value_loss.backward
        dvalues = grad * self.mask * self.error / self.count                             # undo 2 and 1
        ### END SOLUTION
        return dvalues

    def __repr__(self):
        return "ValueLoss()"
