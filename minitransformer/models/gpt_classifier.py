"""Fine-tuning a GPT for classification (Radford et al. 2018 §3.2; Strabel, "Transformers", 2023, §4).

The pre-trained decoder reads the whole input x^1 .. x^m; the hidden state at
the last position, h_l^m (the only one that has seen every token), goes
through a new linear layer W_y to give class logits. The fine-tuning objective
keeps language modelling as an auxiliary task:

    L3 = L2 + lambda * L1

with, as quantities to *minimise* (the note writes the log-likelihoods to be
maximised, the same thing with the sign flipped and without the 1/N):

    L2 = mean over examples of -log P(y | x^1 .. x^m)        the classification loss
    L1 = mean over positions of -log P(x^{t+1} | x^1 .. x^t)   next-token prediction on the same inputs

L1 is the ordinary left-to-right objective of GPT; the note calls it a
"masked language model" objective, which is BERT's, not GPT's (errata).

The backward pass meets the two losses at the final hidden states: the LM
head sends a gradient to every position, the classifier adds its own to the
last one. Padded batches: `lengths` (B,) names each row's real length; the
classifier reads the hidden state at position lengths - 1 (the extract token
of the paper's input transformations, `objectives/finetune_inputs.py`), and the
LM loss skips the padding. Causal attention keeps right padding out of every
earlier position, so no mask is needed.
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from ..layers.embedding import check_token_batch
from ..layers.linear import Linear
from ..layers.loss import CrossEntropyLoss
from .gpt import GPT


def next_token_targets(ids, ignore_index=-1, lengths=None):
    """ids int (B, T) -> the next token at every position, int (B, T); the last has none (ignore_index),
    nor has any position at or after lengths - 1 of a padded row (lengths (B,) or None: every row full)."""
    ids = np.asarray(ids)
    targets = np.concatenate([ids[:, 1:], np.full((len(ids), 1), ignore_index, dtype=ids.dtype)], axis=1)
    if lengths is not None:
        targets[np.arange(ids.shape[1])[None, :] >= np.asarray(lengths)[:, None] - 1] = ignore_index
    return targets


def extract_positions(ids, lengths, where):
    """The position each row is classified at: lengths - 1, or T - 1 for every row when lengths is None."""
    B, T = np.shape(ids)
    if lengths is None:
        return np.full(B, T - 1)
    lengths = np.asarray(lengths)
    if lengths.shape != (B,) or not np.issubdtype(lengths.dtype, np.integer) or lengths.min() < 1 or lengths.max() > T:
        raise ValueError(f"{where} expected lengths, integers (B,) = ({B},) in 1..{T}, got {lengths!r}")
    return lengths - 1


class GPTClassifier(Module):
    """A GPT with a classification head W_y on the last position.

    Args:
        gpt: the (pre-trained) GPT; its parameters are fine-tuned too.
        n_classes: number of labels.
        dtype, rng: for the new head.
    Returns from forward: (lm_logits (B, T, V), class_logits (B, n_classes)).
    """

    def __init__(self, gpt, n_classes, dtype=np.float64, rng=None):
        if not isinstance(gpt, GPT):
            raise TypeError(f"GPTClassifier expected a GPT, got {type(gpt).__name__}")
        self.gpt, self.n_classes = gpt, n_classes
        self.classifier = Linear(gpt.config["d_model"], n_classes, dtype=dtype, rng=as_generator(rng))

    def forward(self, ids, lengths=None):
        """ids int (B, T), lengths int (B,) or None (no padding) -> (lm_logits (B, T, V), class_logits (B, n_classes)).

        An empty batch or sequence (B = 0 or T = 0) is refused with a ValueError, as by every model.
        """
        ids = check_token_batch(ids, self.gpt.vocab_size, repr(self))
        self.extract = extract_positions(ids, lengths, repr(self))                  # (B,)
        hidden = self.gpt.hidden(ids)                       # (B, T, C); the GPT checks ids and max_len
        last = hidden[np.arange(len(ids)), self.extract]                            # (B, C) h_l^m, the last real token
        return self.gpt.lm_head(hidden), self.classifier(last)

    @property
    def hidden_states(self):
        """The GPT's per-layer features of the last forward (`GPT.hidden_states`)."""
        return self.gpt.hidden_states

    def backward(self, dout):
        """dout = (dlm_logits (B, T, V), dclass_logits (B, n_classes)) -> None.

        dh = (LM head)^T dlm_logits at every position, plus W_y^T dclass_logits at the last one.
        """
        dlm_logits, dclass_logits = dout
        gpt = self.gpt
        dhidden = gpt.lm_head.backward(dlm_logits).copy()                        # (B, T, C)
        dhidden[np.arange(len(dhidden)), self.extract] += self.classifier.backward(dclass_logits)
        gpt.hidden_backward(dhidden)
        return None

    def __repr__(self):
        return f"GPTClassifier({self.gpt!r}, classes={self.n_classes})"


class FineTuningObjective(Module):
    """L3 = L2 + lambda * L1 as one scalar (see the module docstring).

    Args:
        model: a GPTClassifier.
        lm_weight: lambda (0 gives plain classification fine-tuning).
    """

    def __init__(self, model, lm_weight=0.5):
        self.model, self.lm_weight = model, lm_weight
        self.classification_loss, self.lm_loss = CrossEntropyLoss(), CrossEntropyLoss(ignore_index=-1)

    def forward(self, ids, labels, lengths=None):
        """ids int (B, T), labels int (B,), lengths int (B,) or None -> scalar L3; L1 and L2 are kept in self.l1,
        self.l2."""
        ids = np.asarray(ids)
        lm_logits, class_logits = self.model.forward(ids, lengths)
        next_tokens = next_token_targets(ids, lengths=lengths)              # (B, T), -1 at the last position
        self.l2 = self.classification_loss.forward(class_logits, labels)
        self.l1 = self.lm_loss.forward(lm_logits, next_tokens)
        return self.l2 + self.lm_weight * self.l1

    def backward(self, grad=1.0):
        """dL3/dL2 = 1 and dL3/dL1 = lambda; both flow into the shared network."""
        self.model.backward((self.lm_loss.backward(grad * self.lm_weight), self.classification_loss.backward(grad)))
        return None

    def __repr__(self):
        return f"FineTuningObjective(lambda={self.lm_weight})"
