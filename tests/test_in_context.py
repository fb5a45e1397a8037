"""In-context learning in miniature: the key -> value task, its accuracy by pairs shown, the induction score."""

from types import SimpleNamespace

import numpy as np
import pytest

from minitransformer import GPT, Module
from minitransformer.objectives.in_context import in_context_accuracy, induction_scores, train_in_context
from minitransformer.tasks.key_value import KeyValueTask


def test_each_sequence_has_its_own_table_and_values_are_scored_after_keys():
    task = KeyValueTask(n_keys=3, n_values=5, n_pairs=12, rng=0)
    x, y, keys = task.batch(50)
    assert x.shape == y.shape == (50, 23) and keys.shape == (50, 12)
    assert np.array_equal(x[:, 0::2], keys) and np.all(y[:, 1::2] == -1)
    values = y[:, 0::2]
    assert np.array_equal(x[:, 1::2], values[:, :-1]) and values.min() >= 3 and values.max() < 8
    for row_keys, row_values in zip(keys, values):                                   # one table per sequence
        assert all(len(set(row_values[row_keys == key])) == 1 for key in set(row_keys))
    tables = {tuple(row_values[np.argsort(row_keys, kind="stable")]) for row_keys, row_values in zip(keys, values)}
    assert len(tables) > 40                                                          # and the tables differ
    assert task.seen_before(np.array([[2, 0, 2, 2, 1]])).tolist() == [[False, False, True, True, False]]


class _Oracle(Module):
    """Predicts the value that followed the key's last earlier occurrence, else value 0: perfect in-context copying."""

    def __init__(self, task):
        self.task = task

    def forward(self, x):
        logits = np.zeros((*x.shape, self.task.vocab_size))
        logits[..., self.task.n_keys] = 1.0
        for b, t in zip(*np.nonzero(np.ones(x.shape, dtype=bool))):
            earlier = [s for s in range(0, t, 2) if x[b, s] == x[b, t] and t % 2 == 0]
            if earlier:
                logits[b, t, x[b, earlier[-1] + 1]] = 2.0
        return logits


def test_accuracy_of_perfect_copying_is_one_on_seen_keys_and_rises_with_the_pairs_shown():
    task = KeyValueTask(n_keys=4, n_values=4, n_pairs=10, rng=1)
    accuracy = in_context_accuracy(_Oracle(task), task, n_sequences=400)
    assert accuracy["seen"] == 1.0 and abs(accuracy["new"] - 0.25) < 0.06           # new keys: chance, 1/4
    expected = 1 - 0.75 ** np.arange(10) * 0.75                                      # P(seen) + P(new) / 4
    np.testing.assert_allclose(accuracy["by_pair"], expected, atol=0.08)


def test_induction_score_reads_the_attention_on_the_values_after_earlier_copies():
    task = KeyValueTask(rng=2)

    class Attending(Module):
        """One block whose head 0 attends exactly to the induction target, head 1 uniformly."""
        def __init__(self):
            self.blocks = [SimpleNamespace(attn=SimpleNamespace(attention=SimpleNamespace(alpha=None)))]

        def forward(self, x):
            B, T = x.shape
            alpha = np.full((B, 2, T, T), 1.0 / T)
            alpha[:, 0] = 0.0
            for b in range(B):
                for t in range(0, T, 2):
                    earlier = [s for s in range(0, t, 2) if x[b, s] == x[b, t]]
                    alpha[b, 0, t, earlier[-1] + 1 if earlier else t] = 1.0
            self.blocks[0].attn.attention.alpha = alpha

    scores = induction_scores(Attending(), KeyValueTask(rng=2), n_sequences=30)
    _, _, keys = task.batch(30)                                  # the same draws: uniform weight 1/19 per copy
    earlier_copies = [np.sum(row[:n] == row[n]) for row in keys for n in range(1, 10) if row[n] in row[:n]]
    np.testing.assert_allclose(scores, [[1.0, np.mean(earlier_copies) / 19]])


def test_a_few_steps_lower_the_loss_and_the_scores_have_one_row_per_layer():
    task = KeyValueTask(rng=3)
    model = GPT(task.vocab_size, 16, 2, 2, 32, 20, rng=0)
    losses = train_in_context(model, task, steps=30, batch_size=32, lr=1e-2, warmup=5)
    assert np.mean(losses[-5:]) < np.mean(losses[:3]) - 0.3
    assert induction_scores(model, task, n_sequences=20).shape == (2, 2)


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match="KeyValueTask expected n_keys, n_values, n_pairs >= 1, got 0, 4, 10"):
        KeyValueTask(n_keys=0)
