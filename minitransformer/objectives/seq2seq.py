"""The encoder-decoder on a generated task: its training run and its evaluation (`python -m minitransformer seq2seq`).

`train_seq2seq` is the one training loop (training/loop.py) applied to the encoder-decoder's
objective (`Seq2SeqObjective`: teacher-forced cross-entropy with the padding
ignored), with a fresh batch of the task at every step, Adam with the settings
of Vaswani et al. (2017) §5.3 (`config.transformer_adam`), global-norm clipping,
and a rate that rises linearly over `warmup` steps, then decays linearly to a
tenth (`schedules.linear_rate`; post-norm Transformers need the warm-up, §5.3).

`evaluate_seq2seq` decodes held-out sources, greedily or with beam search,
and scores them by exact match (the task's metric; BLEU is in generation/bleu.py);
`evaluate_loss` gives their teacher-forced loss per target token and its perplexity (metrics.py).

Left out: label smoothing (§5.4), checkpoint averaging, batches bucketed by length.
"""



import numpy as np

from ..core.module import Module
from ..generation.decoding import beam_search, greedy_decode
from ..layers.loss import CrossEntropyLoss
from ..tasks.reverse import BOS, EOS, PAD, exact_match
from ..training.loop import adam_warmup_loop
from ..training.metrics import perplexity


class Seq2SeqObjective(Module):
    """The encoder-decoder's teacher-forced cross-entropy; target positions holding `pad_id` are ignored.

    Args:
        model: maps (src int (B, S), tgt_in int (B, T)) to logits (B, T, V), e.g. a Seq2SeqTransformer.
        pad_id: the padding id of the targets.
    """

    def __init__(self, model, pad_id):
        self.model, self.pad_id = model, pad_id
        self.loss = CrossEntropyLoss(ignore_index=pad_id)

    def forward(self, src, tgt_in, tgt_out):
        """src int (B, S), tgt_in int (B, T) (BOS, y_1 ..), tgt_out int (B, T) (y_1 .., EOS) -> the loss."""
        return self.loss(self.model(src, tgt_in), tgt_out)

    def backward(self, grad=1.0):
        self.model.backward(self.loss.backward(grad))

    def row_weights(self, src, tgt_in, tgt_out):
        """(B,) the target tokens each row counts (padding not), for data parallelism (training/distributed.py)."""
        return (np.asarray(tgt_out) != self.pad_id).sum(axis=1)

    def __repr__(self):
        return f"Seq2SeqObjective({self.model!r}, pad_id={self.pad_id})"


def seq2seq_loop(model, task, steps, batch_size=64, lr=1e-3, warmup=100, max_norm=1.0, **loop_options):
    """The one training loop (training/loop.py) set up for `model` on `task.train_batch`.

    Args:
        model: a Seq2SeqTransformer whose padding id is the task's PAD.
        task: gives `train_batch(batch_size)` -> (src, tgt_in, tgt_out) from its generator `rng`, e.g. a ReverseTask.
        steps, batch_size: the run's length and each batch's size.
        lr, warmup: the peak rate and the steps of warm-up to it (`schedules.linear_rate`).
        max_norm: the clipping norm.
        loop_options: TrainingLoop's (eval_interval, out_dir, progress, meta, log, ...).
    Returns:
        a TrainingLoop; its checkpoints keep the task's generator, so a resumed run draws the same batches.
    """
    return adam_warmup_loop(Seq2SeqObjective(model, PAD), lambda: task.train_batch(batch_size), steps, lr, warmup,
                            max_norm, generators={"task": task.rng}, name="seq2seq", **loop_options)


def train_seq2seq(model, task, steps, batch_size=64, lr=1e-3, warmup=100, max_norm=1.0, log_every=0, log=print):
    """Train `model` on `task.train_batch` for `steps` steps with `seq2seq_loop`; returns the loss at every step.

    log_every: say the mean loss (and its perplexity) every so many steps (0: not at all), with `log`.
    """
    loop = seq2seq_loop(model, task, steps, batch_size, lr, warmup, max_norm, eval_interval=log_every or None,
                        progress=False, log=log if log_every else False)
    model.train()
    loop.fit()
    model.eval()
    return loop.history["loss"]


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


def evaluate_loss(model, task, sources, batch_size=250):
    """The teacher-forced mean NLL per target token (EOS included, padding not) on `sources`, and its perplexity.

    Each chunk's mean is weighted by its number of target tokens, so the result is the mean over all of them.
    Returns:
        (mean NLL in nats, perplexity), two Python floats.
    """
    objective = Seq2SeqObjective(model, PAD)
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(sources), batch_size):
        batch = task.batch(sources[start:start + batch_size])      # (src, tgt_in, tgt_out)
        total += float(objective.forward(*batch)) * objective.loss.count
        count += objective.loss.count
    return total / count, perplexity(total / count)
