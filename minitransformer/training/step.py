"""One optimisation step, the same for every objective (lecture notes 2025 §1.6; nanoGPT's train.py):

    optimizer.lr = lr                         the schedule's rate for this step (schedules.py)
    optimizer.zero_grad()                     every .grad back to 0 (backward passes add into them)
    loss = objective.forward(*batch)          forward: the scalar to minimise (objectives/)
    objective.backward()                      backward: d loss / d W added into every .grad
    optimizer.clip_gradients(grad_clip)       cap the global gradient norm ||g|| at grad_clip
    optimizer.step()                          the update (Adam, AdamW, SGD)

The language model (`Trainer`), the encoder-decoder (`train_seq2seq`), BERT
(`mlm`) and the fine-tuned classifier (`finetune`) all train with `train_step`.

Clipping is the optimizer's own `clip_gradients(grad_clip)`: the plain
optimizers scale every .grad in place (`clip_grad_norm`); the fast one
(optim/fast.py) keeps the factor and folds it into its update, which gives
the same weights to float rounding (tests/test_trainer.py).

The data-parallel step (distributed.py) does the same step with its forward
and backward passes split over MPI ranks; it shares `check_step_arguments`
and the clipping factor (`optim.clipping.factor_for_norm`, of a norm added
up from the ranks' parts).

Left out: gradient accumulation, mixed precision, skipping a step on a
non-finite loss.
"""

from ..core.checks import is_finite_number


def train_step(objective, optimizer, batch, lr, grad_clip):
    """One step: set the rate, zero the gradients, forward, backward, clip, update.

    Args:
        objective: forward(*batch) -> scalar loss and backward() (objectives/).
        optimizer: over the objective's parameters (optim/).
        batch: a tuple of the objective's inputs, e.g. (x, y) of int (B, T) for a language model.
        lr: the learning rate of this step (>= 0).
        grad_clip: the largest global gradient norm (> 0), or 0 for no clipping.
    Returns:
        the batch's loss, a Python float.
    """
    check_step_arguments("train_step", lr, grad_clip)
    if not (callable(getattr(objective, "forward", None)) and callable(getattr(objective, "backward", None))):
        raise TypeError(f"train_step expected an objective with forward(*batch) and backward(), "
                        f"got {type(objective).__name__}")
    if not isinstance(batch, (tuple, list)):
        raise TypeError(f"train_step expected batch as a tuple of the objective's inputs, e.g. (x, y), "
                        f"got {type(batch).__name__}")
    optimizer.lr = lr
    optimizer.zero_grad()
    loss = float(objective.forward(*batch))
    objective.backward()
    if grad_clip:
        optimizer.clip_gradients(grad_clip)                      # ||g|| <= grad_clip
    optimizer.step()
    return loss


def check_step_arguments(caller, lr, grad_clip):
    """Refuse a learning rate or a clipping norm that is not a finite number >= 0, naming `caller`."""
    for name, value in (("lr", lr), ("grad_clip", grad_clip)):
        if not is_finite_number(value) or value < 0:
            raise ValueError(f"{caller} expected {name} to be a finite number >= 0"
                             f"{' (0: no clipping)' if name == 'grad_clip' else ''}, got {value!r}")
