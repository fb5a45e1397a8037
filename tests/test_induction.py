"""Repeated random halves (tasks/repeated_half.py, objectives/induction.py): the sequences, their two parts, the training loop's numbers."""

import numpy as np
import pytest

from minitransformer import GPT
from minitransformer.objectives.induction import drop_step, part_losses, train_induction
from minitransformer.tasks.repeated_half import RepeatedHalfTask, earlier_next, random_part, repeated_part
from minitransformer.training.config import TrainConfig, build_model


def test_each_sequence_is_a_random_half_repeated_then_padding_without_targets():
    task = RepeatedHalfTask(vocab_size=50, max_half=7, min_half=3, rng=0)
    x, y, half = task.batch(200)
    assert x.shape == y.shape == (200, 13) and half.shape == (200,) and task.seq_len == 13
    assert set(half.tolist()) == {3, 4, 5, 6, 7}                       # every length in range is drawn
    assert x.min() >= 0 and x.max() < 50 and y.min() == -1
    for row_x, row_y, length in zip(x, y, half):
        sequence = np.append(row_x, row_y[-1])                          # the T + 1 tokens the pair was cut from
        assert np.array_equal(sequence[length:2 * length], sequence[:length])          # the repeat
        assert np.array_equal(row_y[:2 * length - 1], sequence[1:2 * length])          # next tokens ...
        assert np.all(row_y[2 * length - 1:] == -1)                                    # ... and no targets after
    first_halves = {tuple(row[:3]) for row in x}
    assert len(first_halves) == 200                                     # fresh random tokens in every sequence


def test_the_parts_and_the_earlier_copy_on_a_hand_written_example():
    half = np.array([3, 2])
    # T = 5 (max_half 3). Sequence 0: a b c a b c, queries 0..4 predict b c a b c; the last two need induction.
    assert random_part(half, 5).tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert repeated_part(half, 5).tolist() == [[0, 0, 0, 1, 1], [0, 0, 1, 0, 0]]
    # query 3 (the repeat's 'a') should look at 1 (the 'b' after the first 'a'); query 4 at 2
    assert earlier_next(half, 5).tolist() == [[-1, -1, -1, 1, 2], [-1, -1, 1, -1, -1]]
    x = np.array([[7, 8, 9, 7, 8]])
    target = earlier_next(np.array([3]), 5)
    queries = np.flatnonzero(target[0] >= 0)
    assert np.array_equal(x[0, target[0, queries] - 1], x[0, queries])   # the token before the target is the query's


def test_the_tasks_and_loss_parts_arguments_are_checked():
    with pytest.raises(ValueError, match="2 <= min_half <= max_half, got vocab_size=10, min_half=5, max_half=4"):
        RepeatedHalfTask(vocab_size=10, max_half=4, min_half=5)
    with pytest.raises(ValueError, match="vocab_size >= 2"):
        RepeatedHalfTask(vocab_size=1)


def test_part_losses_are_log_v_for_a_model_that_predicts_nothing():
    task = RepeatedHalfTask(vocab_size=16, max_half=5, min_half=2, rng=3)
    x, y, half = task.batch(30)
    uniform = GPT(16, 8, 2, 1, 0, 9, rng=0)
    uniform.lm_head.weight.data[...] = 0.0                               # tied: every logit 0
    assert part_losses(uniform, x, y, half) == pytest.approx((np.log(16), np.log(16)))


def _short_run(seed):
    config = TrainConfig(block_size=9, batch_size=8, n_layers=2, n_heads=2, d_model=16, d_ff=0, max_steps=12,
                         lr=1e-2, warmup_steps=2, lr_decay_steps=12, seed=seed, dtype="float64", kernels="plain")
    task = RepeatedHalfTask(vocab_size=12, max_half=5, min_half=3, rng=seed)
    eval_batch = RepeatedHalfTask(vocab_size=12, max_half=5, min_half=3, rng=99).batch(16)
    model = build_model(config, 12)
    return model, train_induction(model, task, config, eval_batch, eval_every=5)


def test_training_is_reproducible_from_the_seed_and_records_both_parts():
    model, history = _short_run(4)
    _, again = _short_run(4)
    _, other = _short_run(5)
    assert history["loss"].shape == (12,) and history["eval_step"].tolist() == [0, 5, 10, 12]
    for name in history:
        np.testing.assert_array_equal(history[name], again[name], err_msg=name)   # same seed, same numbers
    assert not np.array_equal(history["loss"], other["loss"])
    assert history["repeated_loss"][-1] < history["repeated_loss"][0]              # it learns (same eval batch)
    assert all(block.ff is None for block in model.blocks)                         # attention only
    assert history["random_loss"][0] == pytest.approx(np.log(12), abs=0.05)


def test_drop_step_is_the_first_evaluation_below_half_way():
    steps = np.array([0, 25, 50, 75, 100, 125])
    assert drop_step(steps, [4.2, 4.1, 4.0, 1.0, 0.3, 0.2]) == 75               # half way: 2.2
    assert drop_step(steps, [4.0, 3.9, 2.1, 1.9, 0.1, 0.0]) == 75               # 2.0 is not below 2.0
    assert drop_step(steps, [4.0, 4.0, 4.0, 4.0, 2.5, 0.0]) == 125              # not the mean (3.08): 2.0
