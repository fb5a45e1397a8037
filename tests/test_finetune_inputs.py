"""GPT fine-tuning's input transformations: the token layouts, padded batches, gradients, and a task learnt."""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases

from minitransformer import GPT, GPTClassifier
from minitransformer.models.gpt_classifier import next_token_targets
from minitransformer.objectives.finetune_inputs import (
    FineTuningTokens,
    TransformedInputsObjective,
    choice_logits,
    entailment_inputs,
    multiple_choice_inputs,
    similarity_inputs,
)
from minitransformer.training.optim import Adam
from minitransformer.training.step import train_step

TOKENS = FineTuningTokens(start=7, delimiter=8, extract=9, pad=0)


@pytest.mark.parametrize("case", catalogue_cases("GPTClassifier + input transformations"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


def test_the_three_layouts_by_hand():
    ids, lengths = entailment_inputs([[1, 2], [3]], [[4], [5, 6]], TOKENS)
    assert ids.tolist() == [[7, 1, 2, 8, 4, 9], [7, 3, 8, 5, 6, 9]] and lengths.tolist() == [6, 6]
    ids, lengths = similarity_inputs([[1, 2]], [[3]], TOKENS)
    assert ids.tolist() == [[7, 1, 2, 8, 3, 9], [7, 3, 8, 1, 2, 9]]
    ids, lengths = multiple_choice_inputs([[1], [2, 3]], [[[4], [5, 6]], [[4], [6]]], TOKENS)
    assert ids.tolist() == [[7, 1, 8, 4, 9, 0], [7, 1, 8, 5, 6, 9], [7, 2, 3, 8, 4, 9], [7, 2, 3, 8, 6, 9]]
    assert lengths.tolist() == [5, 6, 6, 6]
    assert choice_logits(np.arange(4.0)[:, None], 2).tolist() == [[0.0, 1.0], [2.0, 3.0]]


def test_a_padded_batch_classifies_each_row_as_it_would_alone():
    model = GPTClassifier(GPT(10, 8, 2, 2, 16, 12, rng=0), 3, rng=1)
    rows = [[1, 2, 3], [4], [5, 6]]
    ids, lengths = entailment_inputs(rows, [[1]] * 3, TOKENS)
    _, batched = model(ids, lengths)
    for row, (length, logits) in enumerate(zip(lengths, batched)):
        _, alone = model(ids[row:row + 1, :length])
        np.testing.assert_allclose(logits, alone[0], atol=1e-12)
    targets = next_token_targets(ids, lengths=lengths)
    assert targets[1].tolist() == [4, 8, 1, 9, -1, -1, -1] and targets[0, -1] == -1   # no target on padding


def _choice_task(rng, n):
    """Context: 4 digits of 1..6; three one-digit answers, exactly one of them in the context (the label)."""
    contexts, choices, labels = [], [], []
    for _ in range(n):
        context = list(rng.choice(np.arange(1, 7), size=4, replace=False))
        outside = [digit for digit in range(1, 7) if digit not in context]
        answer = int(rng.integers(3))
        options = [[int(digit)] for digit in rng.choice(outside, size=2, replace=False)]
        options.insert(answer, [int(rng.choice(context))])
        contexts.append(context), choices.append(options), labels.append(answer)
    return (*multiple_choice_inputs(contexts, choices, TOKENS), np.array(labels))


def test_multiple_choice_is_learnt_through_one_scoring_head():
    rng = np.random.default_rng(0)
    model = GPTClassifier(GPT(10, 16, 2, 2, 32, 12, rng=0), 1, rng=1)
    objective = TransformedInputsObjective(model, "choice", n_choices=3, lm_weight=0.0)
    optimizer = Adam(objective.parameters(), lr=1e-2)
    for _ in range(150):
        train_step(objective, optimizer, _choice_task(rng, 32), 1e-2, 1.0)
    ids, lengths, labels = _choice_task(np.random.default_rng(1), 300)
    objective.forward(ids, lengths, labels)
    accuracy = np.mean(objective.logits.argmax(axis=1) == labels)
    assert accuracy > 0.55, accuracy                    # measured 0.65; chance 1/3 (+- 0.03 on 300 examples)


@pytest.mark.parametrize("call, message", [
    (lambda: entailment_inputs([[1]], [], TOKENS), "entailment_inputs expected two equally long, non-empty lists"),
    (lambda: multiple_choice_inputs([[1], [2]], [[[3], [4]], [[5]]], TOKENS), r"answer counts \[1, 2\]"),
    (lambda: TransformedInputsObjective(None, "ranking"), "expected kind in"),
    (lambda: TransformedInputsObjective(None, "choice", n_choices=1), "n_choices >= 2, got 1"),
    (lambda: GPTClassifier(GPT(10, 8, 2, 1, 16, 12, rng=0), 2)(np.ones((2, 4), int), np.array([4, 5])),
     r"expected lengths, integers \(B,\) = \(2,\) in 1..4"),
])
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()
