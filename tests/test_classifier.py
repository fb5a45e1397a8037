"""GPT fine-tuning for classification: the head reads the last position, L3 = L2 + lambda L1, a training smoke test."""

import numpy as np
import pytest

from minitransformer import GPT, CrossEntropyLoss
from minitransformer.models.gpt_classifier import FineTuningObjective, GPTClassifier
from minitransformer.tasks.majority import majority_task
from minitransformer.training.config import transformer_adam


def make_classifier(seed=0, dtype=np.float64):
    gpt = GPT(vocab_size=6, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=12, dtype=dtype, rng=seed)
    return GPTClassifier(gpt, 2, dtype=dtype, rng=seed + 1)


def test_lm_logits_are_the_gpts_and_the_class_depends_only_on_what_the_last_position_sees():
    model = make_classifier()
    ids = np.array([[3, 4, 5, 3, 4], [5, 5, 4, 3, 3]])
    lm_logits, class_logits = model(ids)
    np.testing.assert_allclose(lm_logits, model.gpt(ids), rtol=1e-12)
    assert class_logits.shape == (2, 2)
    changed_first = ids.copy()
    changed_first[:, 0] = 5
    assert not np.allclose(model(changed_first)[1], class_logits)         # the last position sees the first token


def test_objective_is_l2_plus_lambda_l1():
    model = make_classifier()
    ids, labels = majority_task(4, length=8, rng=0)
    objective = FineTuningObjective(model, lm_weight=0.3)
    total = objective(ids, labels)
    lm_logits, class_logits = model(ids)
    l2 = CrossEntropyLoss()(class_logits, labels)
    l1 = CrossEntropyLoss()(lm_logits[:, :-1], ids[:, 1:])                 # next-token prediction
    assert total == pytest.approx(l2 + 0.3 * l1, rel=1e-12)
    assert objective.l1 == pytest.approx(l1) and objective.l2 == pytest.approx(l2)


def test_gradient_of_l3_is_gradient_of_l2_plus_lambda_times_gradient_of_l1():
    model = make_classifier()
    ids, labels = majority_task(4, length=8, rng=1)

    def grads(lm_weight):
        objective = FineTuningObjective(model, lm_weight)
        model.zero_grad()
        objective(ids, labels)
        objective.backward()
        return {name: param.grad.copy() for name, param in model.named_parameters()}

    only_l2, with_l1, mixed = grads(0.0), grads(1.0), grads(0.3)
    for name in only_l2:
        expected = only_l2[name] + 0.3 * (with_l1[name] - only_l2[name])
        np.testing.assert_allclose(mixed[name], expected, rtol=1e-9, atol=1e-12, err_msg=name)
    assert not np.allclose(only_l2["gpt.token_embedding.weight"], with_l1["gpt.token_embedding.weight"])


def test_bad_inputs_are_named():
    with pytest.raises(TypeError, match="GPTClassifier expected a GPT"):
        GPTClassifier(object(), 2)
    with pytest.raises(ValueError, match=r"max_len=12 positions, got T=13"):
        make_classifier()(np.ones((2, 13), dtype=int))


@pytest.mark.parametrize("positional", ["rope", "alibi", "none"])
def test_classifier_runs_on_table_free_gpts_beyond_max_len(positional):
    gpt = GPT(vocab_size=6, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=4, positional=positional, rng=0)
    model = GPTClassifier(gpt, 2, rng=1)
    ids = np.array([[3, 4, 5, 3, 4, 1]])                                     # T = 6 > max_len: no table to outgrow
    lm_logits, class_logits = model(ids)
    np.testing.assert_allclose(lm_logits, gpt(ids), rtol=1e-12)
    model.backward((np.ones_like(lm_logits), np.ones_like(class_logits)))
    assert np.any(gpt.token_embedding.weight.grad)


def test_majority_task_labels():
    ids, labels = majority_task(500, length=12, rng=0)
    counts_a, counts_b = (ids == 3).sum(axis=1), (ids == 4).sum(axis=1)
    assert np.array_equal(labels, (counts_a > counts_b).astype(int)) and not np.any(counts_a == counts_b)
    assert 0.4 < labels.mean() < 0.6


def test_training_smoke_classifier_learns_the_majority_task():
    """`python -m minitransformer finetune` is the full demonstration; this is a short run."""
    rng = np.random.default_rng(0)
    model = make_classifier(dtype=np.float32)
    objective = FineTuningObjective(model, lm_weight=0.5)
    optimizer = transformer_adam(model.parameters(), lr=3e-3)
    for _ in range(150):
        ids, labels = majority_task(64, length=12, rng=rng)
        optimizer.zero_grad()
        objective(ids, labels)
        objective.backward()
        optimizer.step()
    ids, labels = majority_task(500, length=12, rng=99)
    accuracy = np.mean(model(ids)[1].argmax(axis=-1) == labels)
    assert accuracy > 0.85


def test_next_token_targets_shift_left_and_ignore_the_last_position():
    from minitransformer.models.gpt_classifier import next_token_targets

    np.testing.assert_array_equal(next_token_targets(np.array([[3, 4, 5], [1, 2, 0]])), [[4, 5, -1], [2, 0, -1]])
