"""Gradient checks of GPT fine-tuning on transformed inputs (`objectives/finetune_inputs.py`): padded batches,
the extract token at each row's own last position, and the three ways rows combine into logits."""

import numpy as np

from ...models.gpt import GPT
from ...models.gpt_classifier import GPTClassifier
from ...objectives.finetune_inputs import (
    FineTuningTokens,
    TransformedInputsObjective,
    entailment_inputs,
    multiple_choice_inputs,
    similarity_inputs,
)
from .case import GradcheckCase, perturb

TOKENS = FineTuningTokens(start=7, delimiter=8, extract=9, pad=0)


def _case(kind):
    def build(rng):
        gpt = GPT(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=12, max_len=12, rng=rng)
        model = perturb(GPTClassifier(gpt, 1 if kind == "choice" else 3, rng=rng), rng, 0.3)
        texts = [list(rng.integers(1, 7, size=n)) for n in (3, 1, 2, 2)]
        if kind == "entailment":
            ids, lengths = entailment_inputs(texts[:2], texts[2:], TOKENS)
        elif kind == "similarity":
            ids, lengths = similarity_inputs(texts[:2], texts[2:], TOKENS)
        else:
            ids, lengths = multiple_choice_inputs(texts[:2], [texts[2:], texts[1:3]], TOKENS)
        objective = TransformedInputsObjective(model, kind, n_choices=2, lm_weight=0.5)
        labels = np.array([1, 0])
        return objective, [ids], lambda ids: objective.forward(ids, lengths, labels)
    return build


CASES = [
    GradcheckCase("GPTClassifier + input transformations", "entailment, padded", _case("entailment")),
    GradcheckCase("GPTClassifier + input transformations", "similarity, both orders", _case("similarity")),
    GradcheckCase("GPTClassifier + input transformations", "multiple choice, K = 2", _case("choice")),
]
