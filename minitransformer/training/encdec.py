"""Training and evaluating the encoder-decoder on a generated task (used by `python -m minitransformer seq2seq`).

One step: a fresh batch, teacher-forced logits, cross-entropy with the padding
ignored, backward, global-norm clipping, an Adam update. The learning rate
rises linearly over `warmup` steps (post-norm Transformers need the warm-up,
Vaswani et al. §5.3) and then decays linearly to a tenth.

The optimizer is `minitransformer.training.optim.Adam` with the paper's betas and eps
(`transformer_adam`); clipping is `minitransformer.training.optim.clip_grad_norm`.
"""

import numpy as np

from ..generation.decoding import beam_search, greedy_decode
from ..layers.loss import CrossEntropyLoss
from .optim import Adam, clip_grad_norm
from .tasks import BOS, EOS, PAD, exact_match


def transformer_adam(params, lr=1e-3):
    """Adam with beta2 = 0.98 and eps = 1e-9, the settings of Vaswani et al. (2017) §5.3."""
    return Adam(list(params), lr=lr, betas=(0.9, 0.98), eps=1e-9)


def learning_rate(step, steps, lr, warmup):
    """Linear warm-up to lr over `warmup` steps, then linear decay to lr / 10 at `steps`."""
    if step < warmup:
        return lr * (step + 1) / warmup
    return lr * (1.0 - 0.9 * (step - warmup) / max(steps - warmup, 1))


def train_seq2seq(model, task, steps, batch_size=64, lr=1e-3, warmup=100, max_norm=1.0, log_every=0, log=print):
    """Train `model` on `task.train_batch` for `steps` steps.

    Returns:
        list of the training loss at every step.
    """
    optimizer = transformer_adam(model.parameters(), lr=lr)
    loss_fn = CrossEntropyLoss(ignore_index=PAD)
    losses = []
    model.train()
    for step in range(steps):
        src, tgt_in, tgt_out = task.train_batch(batch_size)
        optimizer.lr = learning_rate(step, steps, lr, warmup)
        optimizer.zero_grad()
        loss = float(loss_fn(model(src, tgt_in), tgt_out))
        model.backward(loss_fn.backward())
        clip_grad_norm(optimizer.parameters(), max_norm)
        optimizer.step()
        losses.append(loss)
        if log_every and (step + 1) % log_every == 0:
            log(f"step {step + 1:5d}  loss {np.mean(losses[-log_every:]):.4f}  lr {optimizer.lr:.2e}")
    model.eval()
    return losses


def evaluate_seq2seq(model, task, sources, beam_size=None, batch_size=250):
    """Exact-match accuracy and the predictions on `sources`, greedy (beam_size None) or beam search."""
    model.eval()
    predictions = []
    for start in range(0, len(sources), batch_size):
        chunk = sources[start:start + batch_size]
        src, _, _ = task.batch(chunk)
        max_len = max(len(s) for s in chunk) + 2
        if beam_size is None:
            out = greedy_decode(model, src, BOS, EOS, max_len, pad_id=PAD)
        else:
            out, _ = beam_search(model, src, BOS, EOS, max_len, beam_size=beam_size, pad_id=PAD)
        predictions += list(out)
    return exact_match(predictions, sources, task.target_of), predictions
