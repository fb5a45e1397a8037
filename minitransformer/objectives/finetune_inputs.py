"""GPT's input transformations for fine-tuning (Radford et al. 2018, §3.3 and Fig. 1 right; survey note §4,
Fig. 4 right): structured inputs become token sequences for one pre-trained model and one classifier head.

    entailment       [start] premise [delim] hypothesis [extract]          -> W_y h(extract)
    similarity       [start] a [delim] b [extract]  and  [start] b [delim] a [extract]
                                                                            -> W_y (h_ab + h_ba)
    multiple choice  [start] context [delim] answer_k [extract], k = 1..K  -> one score w . h_k each, softmax over k

The sequences of a batch differ in length: they are padded on the right and `lengths` tells `GPTClassifier`
where each row's extract token is (causal attention keeps the padding out of it). Similarity has no natural
order, so both orders are read and their extract states added; since the head is linear, adding the two rows'
class logits is the same thing up to the bias (counted twice). Multiple choice scores each (context, answer)
row with a one-output head (`GPTClassifier(gpt, 1)`) and `choice_logits` reshapes the scores to (B, K).

Left out: the paper's auxiliary LM weight schedule, and truncating inputs longer than the context window
(too long an input is an error from the GPT).
"""

from dataclasses import dataclass

import numpy as np

from ..core.module import Module
from ..layers.loss import CrossEntropyLoss
from ..layers.padding import pad_sequences
from ..models.gpt_classifier import next_token_targets


@dataclass(frozen=True)
class FineTuningTokens:
    """The special token ids of the input transformations (new rows of the embedding in the paper)."""
    start: int
    delimiter: int
    extract: int
    pad: int


def _joined(firsts, seconds, tokens, where):
    if len(firsts) != len(seconds) or not len(firsts):
        raise ValueError(f"{where} expected two equally long, non-empty lists of token sequences, "
                         f"got {len(firsts)} and {len(seconds)}")
    rows = [[tokens.start, *first, tokens.delimiter, *second, tokens.extract] for first, second in zip(firsts, seconds)]
    return pad_sequences(rows, tokens.pad), np.array([len(row) for row in rows])


def entailment_inputs(premises, hypotheses, tokens):
    """B premises and B hypotheses (lists of ids) -> (ids int (B, T), lengths int (B,))."""
    return _joined(premises, hypotheses, tokens, "entailment_inputs")


def similarity_inputs(first_texts, second_texts, tokens):
    """B pairs -> (ids int (2B, T), lengths (2B,)): rows 0..B-1 in the order a, b; rows B..2B-1 in the order b, a."""
    return _joined(list(first_texts) + list(second_texts), list(second_texts) + list(first_texts), tokens,
                   "similarity_inputs")


def similarity_logits(class_logits):
    """(2B, n_classes) from the two orders -> (B, n_classes), their sum."""
    half = len(class_logits) // 2
    return class_logits[:half] + class_logits[half:]


def multiple_choice_inputs(contexts, choices, tokens):
    """B contexts, each with the same number K of answers -> (ids int (B K, T), lengths (B K,)), row b K + k."""
    counts = {len(answers) for answers in choices}
    if len(counts) != 1 or len(contexts) != len(choices):
        raise ValueError(f"multiple_choice_inputs expected one list of K answers per context, the same K for all, "
                         f"got {len(contexts)} contexts and answer counts {sorted(counts)}")
    repeated = [context for context, answers in zip(contexts, choices) for _ in answers]
    return _joined(repeated, [answer for answers in choices for answer in answers], tokens, "multiple_choice_inputs")


def choice_logits(scores, n_choices):
    """(B K, 1) scores -> (B, K) logits over the choices (softmax and cross-entropy over the last axis)."""
    return np.asarray(scores).reshape(-1, n_choices)


class TransformedInputsObjective(Module):
    """Cross-entropy of a `GPTClassifier` on transformed inputs, plus lm_weight times its LM loss (L3 of §3.2).

    Args:
        model: a GPTClassifier (n_classes outputs; 1 for "choice").
        kind: "entailment" (one row per example), "similarity" (two rows, logits added) or "choice" (K rows,
            scores reshaped to (B, K)).
        n_choices: K for "choice".
        lm_weight: lambda, the weight of the auxiliary LM loss on the (unpadded) tokens.
    The batch for `train_step`: (ids (R, T), lengths (R,), labels (B,)), from the *_inputs functions.
    """

    KINDS = ("entailment", "similarity", "choice")

    def __init__(self, model, kind, n_choices=None, lm_weight=0.0):
        if kind not in self.KINDS:
            raise ValueError(f"TransformedInputsObjective expected kind in {self.KINDS}, got {kind!r}")
        if kind == "choice" and not (isinstance(n_choices, int) and n_choices >= 2):
            raise ValueError(f"TransformedInputsObjective(kind='choice') expected n_choices >= 2, got {n_choices!r}")
        self.model, self.kind, self.n_choices, self.lm_weight = model, kind, n_choices, lm_weight
        self.loss, self.lm_loss = CrossEntropyLoss(), CrossEntropyLoss(ignore_index=-1)

    def forward(self, ids, lengths, labels):
        """-> scalar loss; the combined logits (B, n_classes or K) are kept in `logits`."""
        lm_logits, class_logits = self.model(ids, lengths)
        if self.kind == "similarity":
            self.logits = similarity_logits(class_logits)                     # (B, n_classes)
        elif self.kind == "choice":
            self.logits = choice_logits(class_logits, self.n_choices)        # (B, K)
        else:
            self.logits = class_logits
        loss = self.loss(self.logits, labels)
        self.l1 = self.lm_loss(lm_logits, next_token_targets(ids, lengths=lengths))
        return loss + self.lm_weight * self.l1

    def backward(self, grad=1.0):
        """dlogits back through the combination: similarity copies it to both orders, choice reshapes it."""
        dlogits = self.loss.backward(grad)
        if self.kind == "similarity":
            dclass = np.concatenate([dlogits, dlogits])                       # (2B, n_classes)
        elif self.kind == "choice":
            dclass = dlogits.reshape(-1, 1)                                   # (B K, 1)
        else:
            dclass = dlogits
        self.model.backward((self.lm_loss.backward(grad * self.lm_weight), dclass))
        return None
