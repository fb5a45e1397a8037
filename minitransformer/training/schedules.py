"""Learning-rate schedules, all in one place: plain functions of the step, so a resumed run gets the same rates.

1. The schedule of Vaswani et al. (2017, eq. 3), printed in lecture notes 2025 §1.6 (`noam_rate`):

       rate(step) = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)

   It rises linearly for `warmup` steps, peaks at step = warmup with
   d_model^-0.5 * warmup^-0.5, then decays as 1/sqrt(step). The notes
   summarise it as "warmup phase then decay to 0": it approaches 0 but never
   reaches it (at step 100 000 with d_model 512, warmup 4000 it is still
   1.4e-4, a fifth of its peak). Steps count from 1; step 0 would divide by zero.

   `scaled_noam_rate` is its shape with the peak moved to a chosen max_lr
   (the trainer's `--schedule noam`), on 0-based steps:

       rate(step) = max_lr * noam_rate(step + 1) / noam_rate(warmup)

2. Linear warmup then cosine decay to a floor (Loshchilov & Hutter 2017's
   cosine, as nanoGPT uses it; the trainer's default, `cosine_rate`):

       step < warmup:            max_lr * (step + 1) / (warmup + 1)
       warmup <= step <= decay:  min_lr + 0.5 (1 + cos(pi r)) (max_lr - min_lr),
                                 r = (step - warmup) / (decay - warmup)
       step > decay:             min_lr

3. Linear warmup then linear decay to a tenth (`linear_rate`; the
   encoder-decoder, BERT and fine-tuning demonstrations: post-norm
   Transformers need the warm-up, Vaswani et al. §5.3):

       step < warmup:   max_lr * (step + 1) / warmup
       step >= warmup:  max_lr * (1 - 0.9 (step - warmup) / max(total - warmup, 1))

4. Linear warmup then constant (`warmup_rate`; the in-context run):

       rate(step) = max_lr * min(1, (step + 1) / warmup)

Left out: step decay, cyclical rates, schedules that read the loss (reduce on plateau).
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


def scaled_noam_rate(step, max_lr, warmup, d_model):
    """The notes' rule rescaled so that its peak, at step = warmup - 1 (0-based), is `max_lr`.

    Args:
        step: 0-based iteration (the rule's step is step + 1).
        max_lr: the peak rate.
        warmup: steps of linear warmup (>= 1).
        d_model: C; it cancels out of the ratio, and is kept so that the rates are the ratio of two
            `noam_rate`s exactly as runs saved by 0.2 computed them, to the last bit.

    >>> scaled_noam_rate(99, 1e-3, 100, 512)           # the peak
    0.001
    """
    return max_lr * noam_rate(step + 1, d_model, warmup) / noam_rate(warmup, d_model, warmup)


def linear_rate(step, max_lr, warmup, total_steps):
    """Linear warmup to `max_lr` over `warmup` steps, then linear decay to max_lr / 10 at `total_steps`.

    Args:
        step: 0-based iteration.
        max_lr: the peak rate, reached at step = warmup - 1.
        warmup: steps of linear warmup (0 for none).
        total_steps: the step at which the rate reaches max_lr / 10 (the run's length).

    >>> [round(linear_rate(step, 1.0, 2, 12), 2) for step in (0, 1, 2, 7, 12)]
    [0.5, 1.0, 1.0, 0.55, 0.1]
    """
    if warmup < 0:
        raise ValueError(f"linear_rate expects warmup >= 0, got {warmup}")
    if step < warmup:
        return max_lr * (step + 1) / warmup
    return max_lr * (1.0 - 0.9 * (step - warmup) / max(total_steps - warmup, 1))


def warmup_rate(step, max_lr, warmup):
    """Linear warmup to `max_lr` over `warmup` steps (>= 1), then `max_lr`.

    >>> [warmup_rate(step, 1.0, 4) for step in (0, 3, 9)]
    [0.25, 1.0, 1.0]
    """
    if warmup < 1:
        raise ValueError(f"warmup_rate expects warmup >= 1, got {warmup}")
    return max_lr * min(1.0, (step + 1) / warmup)
