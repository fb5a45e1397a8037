"""Learning-rate schedules: the notes' warmup rule and nanoGPT's warmup + cosine decay.

1. The schedule of Vaswani et al. (2017, eq. 3), printed in lecture notes 2025 §1.6:

       rate(step) = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

   It rises linearly for `warmup` steps, peaks at step = warmup with
   d_model^-0.5 * warmup^-0.5, then decays as 1/sqrt(step). The notes
   summarise it as "warmup phase then decay to 0": it approaches 0 but never
   reaches it (at step 100 000 with d_model 512, warmup 4000 it is still
   1.4e-4, a fifth of its peak). Steps count from 1; step 0 would divide by zero.

2. Linear warmup then cosine decay to a floor (Loshchilov & Hutter 2017's
   cosine, as nanoGPT uses it):

       step < warmup:            max_lr * (step + 1) / (warmup + 1)
       warmup <= step <= decay:  min_lr + 0.5 (1 + cos(pi r)) (max_lr - min_lr),
                                 r = (step - warmup) / (decay - warmup)
       step > decay:             min_lr

Both are plain functions of the step, so a resumed run gets the same rates.
"""

import math


def noam_rate(step, d_model, warmup):
    """The notes' warmup schedule; `step` >= 1.

    >>> round(noam_rate(4000, 512, 4000), 6)      # the peak: 512^-0.5 * 4000^-0.5
    0.000699
    """
    if step < 1:
        raise ValueError(f"noam_rate expects step >= 1 (the formula divides by step), got {step}")
    if warmup < 1:
        raise ValueError(f"noam_rate expects warmup >= 1, got {warmup}")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def cosine_rate(step, max_lr, min_lr, warmup, decay_steps):
    """Linear warmup for `warmup` steps, cosine decay to `min_lr` at `decay_steps`, then `min_lr`.

    Args:
        step: 0-based iteration.
        max_lr: the peak rate, reached at step = warmup.
        min_lr: the floor.
        warmup: steps of linear warmup (0 for none).
        decay_steps: the step at which the floor is reached (nanoGPT's lr_decay_iters).
    """
    if decay_steps <= warmup:
        raise ValueError(f"cosine_rate expects decay_steps > warmup, got {decay_steps} <= {warmup}")
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    if step > decay_steps:
        return min_lr
    progress = (step - warmup) / (decay_steps - warmup)          # 0 -> 1
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)
