"""One optimisation step, the same for every objective (lecture notes 2025 §1.6; nanoGPT's train.py):

    optimizer.lr = lr                         the schedule's rate for this step (schedules.py)
    optimizer.zero_grad()                     every .grad back to 0 (backward passes add into them)
    loss = objective.forward(*batch)          forward: the scalar to minimise (objectives.py)
    objective.backward()                      backward: d loss / d W added into every .grad
    clip_grad_norm(parameters, grad_clip)     cap the global gradient norm ||g|| at grad_clip
    optimizer.step()                          the update (Adam, AdamW, SGD)

The language model (`Trainer`), the encoder-decoder (`train_seq2seq`), BERT
(`mlm`) and the fine-tuned classifier (`finetune`) all train with `train_step`.

Clipping, two ways that agree up to float rounding (tests/test_trainer.py):
* folded (the default, the trainer's): the factor s = grad_clip / (||g|| + 1e-6)
  (1 when ||g|| <= grad_clip) goes into the update's constants,
  `optimizer.step(grad_scale=s)`, so the gradients are never rewritten: one
  pass over them fewer. ||g|| is taken over the optimizer's flat buffers.
* in place (`clip_in_place=True`): the lecture's two lines, `clip_grad_norm`
  scales every .grad by s, then `optimizer.step()`. ||g|| is added up one
  parameter at a time. The seq2seq, mlm and finetune commands clip this way, as
  they did before they shared this function, so their numbers are unchanged to
  the last bit.

The data-parallel step (parallel.py) does the same step with its forward and
backward passes split over processes; it shares `check_step_arguments`, the
learning rate handed in the same way and the same clipping factor
(`optim.clipping.factor_for_norm`, of a norm added up from the processes' parts).

Left out: gradient accumulation, mixed precision, skipping a step on a
non-finite loss.
"""


from ..core.checks import is_finite_number
from .optim import clip_factor, clip_grad_norm


def train_step(objective, optimizer, batch, lr, grad_clip, clip_in_place=False):
    """One step: set the rate, zero the gradients, forward, backward, clip, update.

    Args:
        objective: forward(*batch) -> scalar loss and backward() (objectives.py).
        optimizer: over the objective's parameters (optim/).
        batch: a tuple of the objective's inputs, e.g. (x, y) of int (B, T) for a language model.
        lr: the learning rate of this step (>= 0).
        grad_clip: the largest global gradient norm (> 0), or 0 for no clipping.
        clip_in_place: scale the gradients in place before the update (see the module docstring) instead
            of folding the factor into it.
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
    if not grad_clip:
        optimizer.step()
    elif clip_in_place:
        clip_grad_norm(optimizer.parameters(), grad_clip)        # every .grad *= s
        optimizer.step()
    else:
        _, scale = clip_factor(optimizer.gradients(), grad_clip)
        optimizer.step(grad_scale=scale)                        # = clip_grad_norm(parameters); step()
    return loss


def check_step_arguments(caller, lr, grad_clip):
    """Refuse a learning rate or a clipping norm that is not a finite number >= 0, naming `caller`."""
    for name, value in (("lr", lr), ("grad_clip", grad_clip)):
        if not is_finite_number(value) or value < 0:
            raise ValueError(f"{caller} expected {name} to be a finite number >= 0"
                             f"{' (0: no clipping)' if name == 'grad_clip' else ''}, got {value!r}")
