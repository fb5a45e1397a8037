"""Fine-tuning a pre-trained GPT for classification: L3 = L2 + lambda L1 (Radford et al. 2018, §3.2; Strabel,
"Transformers", 2023, §4), the `finetune` command's two runs on the one training loop.

1. `pretraining_loop`: next-token prediction on unlabelled strings (L1 alone);
2. `fine_tuning_loop`: the classifier head on the last position with the auxiliary LM loss,
   L3 = L2 + lambda L1 (`FineTuningObjective`).

Both checkpoint the whole `GPTClassifier` (the head is drawn when it is built, from its own seed, so building
it before pre-training changes no number), so one run directory holds either phase. The model and its
objective are the model family's own (models/gpt_classifier.py), re-exported here so that every objective is
found in objectives/; GPT's input transformations for structured tasks are in finetune_inputs.py.
"""

from ..layers.loss import CrossEntropyLoss
from ..models.gpt_classifier import FineTuningObjective, GPTClassifier, next_token_targets  # noqa: F401 (see above)
from ..training.loop import adam_warmup_loop
from .language_model import LanguageModelObjective


def pretraining_loop(classifier, labelled_batch, steps, lr, **loop_options):
    """Phase 1: L1 alone, the next token of every string of `labelled_batch()` (its labels unused).

    Args:
        classifier: the GPTClassifier whose `gpt` is pre-trained (the whole classifier is checkpointed).
        labelled_batch: () -> (ids int (B, T), labels int (B,)).
    """
    def unlabelled_batch():
        ids = labelled_batch()[0]
        return ids, next_token_targets(ids)           # (B, T) and (B, T), -1 at the last position

    objective = LanguageModelObjective(classifier.gpt, CrossEntropyLoss(ignore_index=-1))
    return adam_warmup_loop(objective, unlabelled_batch, steps, lr, model=classifier, name="pre-train",
                            **loop_options)


def fine_tuning_loop(classifier, labelled_batch, steps, lr, lm_weight, **loop_options):
    """Phase 2: L3 = L2 + lm_weight L1 on `labelled_batch()` -> (ids (B, T), labels (B,))."""
    return adam_warmup_loop(FineTuningObjective(classifier, lm_weight), labelled_batch, steps, lr, nll=False,
                            name="fine-tune", **loop_options)
