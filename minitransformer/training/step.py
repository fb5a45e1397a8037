"""One optimisation step, the same for every objective (lecture notes 2025 §1.6; nanoGPT's train.py):

    optimizer.lr = lr                         the schedule's rate for this step (schedules.py)
    optimizer.zero_grad()                     every .grad back to 0 (backward passes add into them)
    loss = objective.forward(*batch)          forward: the scalar to minimise (objectives/)
    objective.backward()                      backward: d loss / d W added into every .grad
    optimizer.clip_gradients(grad_clip)       cap the global gradient norm ||g|| at grad_clip
    optimizer.step()                          the update (Adam, AdamW, SGD)

Every run of the package trains with it, through the one loop (loop.py):

    the language model (Trainer, `train`)        objectives/language_model.py
    the encoder-decoder (`seq2seq`)              objectives/seq2seq.py
    BERT's masked language model (`mlm`)         objectives/masked_lm.py
    the fine-tuned classifier (`finetune`)       objectives/finetune.py
    in-context learning                          objectives/in_context.py
    the induction head                           objectives/induction.py
    InstructGPT's supervised fine-tuning         objectives/instruct.py
    InstructGPT's reward model                   objectives/ranking.py
    PPO's inner steps                            objectives/ppo.py

Clipping is the optimizer's own `clip_gradients(grad_clip)`: the plain
optimizers scale every .grad in place (`clip_grad_norm`); the fast one
(optim/fast.py) keeps the factor and folds it into its update, which gives
the same weights to float rounding (tests/test_trainer.py).

Data parallelism is a hook of this step around its reduce, clip and update
phase (`parallel`, distributed.py's DataParallel): the forward and backward
passes run on this rank's rows of the batch, their gradient scaled by the
rows' share of the batch, and the hook adds the ranks' gradients up, clips with
the norm of the whole and updates (replicated, or sharded: reduce-scatter,
update a shard, all-gather). The same step, so every objective trains under
`mpiexec`.

Left out: gradient accumulation, mixed precision, skipping a step on a
non-finite loss, timing its phases (phases.py wraps the objective and the
optimizer it is given when asked).
"""

from ..core.checks import is_finite_number


def train_step(objective, optimizer, batch, lr, grad_clip, parallel=None):
    """One step: set the rate, zero the gradients, forward, backward, clip, update.

    Args:
        objective: forward(*batch) -> scalar loss and backward() (objectives/).
        optimizer: over the objective's parameters (optim/).
        batch: a tuple of the objective's inputs, e.g. (x, y) of int (B, T) for a language model.
        lr: the learning rate of this step (>= 0).
        grad_clip: the largest global gradient norm (> 0), or 0 for no clipping.
        parallel: None (one process), or the data-parallel hook (distributed.py's DataParallel).
    Returns:
        the batch's loss, a Python float (under MPI, the whole batch's, the same on every rank).
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
    if parallel is not None:                                     # this rank's rows, weighted by their share
        batch, share = parallel.rows_and_share(objective, batch)
        loss = share * float(objective.forward(*batch))          # (N_k / N) L_k
        objective.backward(share)                                # (N_k / N) dL_k/dW
        return parallel.reduce_clip_update(loss, grad_clip)      # sum over ranks, clip, update
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
