"""Training and evaluating the encoder-decoder on a generated task (used by `python -m minitransformer seq2seq`).

One step: a fresh batch, teacher-forced logits, cross-entropy with the padding
ignored, backward, global-norm clipping, an Adam update. The learning rate
rises linearly over `warmup` steps (post-norm Transformers need the warm-up,
Vaswani et al. §5.3) and then decays linearly to a tenth.

`_Adam` is a placeholder, written while the shared optimizers (issue 4,
`minitransformer.optim`) were still being built: TO BE REPLACED by
`minitransformer.optim.Adam`, which has the same constructor and `step()`.
"""

import numpy as np

from .decoding import beam_search, greedy_decode
from .layers.loss import CrossEntropyLoss
from .tasks import BOS, EOS, PAD, exact_match


class _Adam:
    """Minimal Adam (Kingma & Ba 2015). PLACEHOLDER: replace with minitransformer.optim.Adam."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.98), eps=1e-9):
        self.params, self.lr, self.betas, self.eps = list(params), lr, betas, eps
        self.m = [np.zeros_like(p.data) for p in self.params]
        self.v = [np.zeros_like(p.data) for p in self.params]
        self.t = 0

    def step(self):
        self.t += 1
        beta1, beta2 = self.betas
        for param, m, v in zip(self.params, self.m, self.v):
            m *= beta1
            m += (1 - beta1) * param.grad
            v *= beta2
            v += (1 - beta2) * param.grad * param.grad
            m_hat = m / (1 - beta1 ** self.t)
            v_hat = v / (1 - beta2 ** self.t)
            param.data -= (self.lr * m_hat / (np.sqrt(v_hat) + self.eps)).astype(param.dtype)

    def zero_grad(self):
        for param in self.params:
            param.zero_grad()


def clip_grad_norm(params, max_norm):
    """Scale all gradients together so their global L2 norm is at most max_norm; return the norm before."""
    norm = float(np.sqrt(sum(float((p.grad.astype(np.float64) ** 2).sum()) for p in params)))
    if norm > max_norm:
        for param in params:
            param.grad *= max_norm / norm
    return norm


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
    optimizer = _Adam(model.parameters(), lr=lr)
    loss_fn = CrossEntropyLoss(ignore_index=PAD)
    losses = []
    model.train()
    for step in range(steps):
        src, tgt_in, tgt_out = task.train_batch(batch_size)
        optimizer.lr = learning_rate(step, steps, lr, warmup)
        optimizer.zero_grad()
        loss = float(loss_fn(model(src, tgt_in), tgt_out))
        model.backward(loss_fn.backward())
        clip_grad_norm(optimizer.params, max_norm)
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
