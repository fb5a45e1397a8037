"""A repeated random segment (tasks/repeated_segment.py, objectives/induction.py): the sequences, their two
parts, the training loop's numbers, and the induction head of the shipped weights (data/induction_gpt.npz)."""

import pathlib

import numpy as np
import pytest

from minitransformer import GPT
from minitransformer.models.head_scores import head_scores
from minitransformer.objectives.induction import drop_step, part_losses, repeat_targets, train_induction
from minitransformer.tasks.repeated_segment import RepeatedSegmentTask, repeated_part
from minitransformer.training.config import TrainConfig, build_model

SHIPPED = pathlib.Path(__file__).resolve().parent.parent / "data" / "induction_gpt.npz"


def test_each_sequence_repeats_one_random_segment_at_a_random_distance():
    task = RepeatedSegmentTask(vocab_size=50, seq_len=20, min_length=3, max_length=7, rng=0)
    x, y, earlier_next = task.batch(300)
    assert x.shape == y.shape == earlier_next.shape == (300, 20)
    assert x.min() >= 0 and x.max() < 50 and np.array_equal(x[:, 1:], y[:, :-1])     # y is the next token
    lengths, distances = set(), set()
    for row_x, row_y, row_target in zip(x, y, earlier_next):
        queries = np.flatnonzero(row_target >= 0)
        assert np.array_equal(queries, np.arange(queries[0], queries[-1] + 1))       # one run of queries
        distance = queries[0] - row_target[queries[0]] + 1
        assert np.all(queries - row_target[queries] + 1 == distance)                  # one distance per sequence
        sequence = np.append(row_x, row_y[-1])                                        # the T + 1 tokens
        first, length = queries[0] - distance, len(queries) + 1                       # the segment's start, length
        assert np.array_equal(sequence[first + distance:first + distance + length], sequence[first:first + length])
        assert np.array_equal(row_y[queries], row_x[row_target[queries]])             # the answer is where it looks
        lengths.add(length)
        distances.add(distance)
    assert lengths == {3, 4, 5, 6, 7} and min(distances) == 3 and max(distances) >= 15   # spread over the context
    assert len({tuple(row[:4]) for row in x}) == 300                                  # fresh random tokens


def test_the_same_seed_gives_the_same_batches():
    first, again = RepeatedSegmentTask(rng=3).batch(5), RepeatedSegmentTask(rng=3).batch(5)
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], RepeatedSegmentTask(rng=4).batch(5)[0])


def test_the_parts_on_a_hand_written_example():
    # tokens 5 1 2 9 1 2 7: segment "1 2" at 1, again at 4 (distance 3); query 4 ("1") predicts 2, found at 2
    earlier_next = np.array([[-1, -1, -1, -1, 2, -1]])
    assert repeated_part(earlier_next).tolist() == [[False] * 4 + [True, False]]
    y = np.array([[1, 2, 9, 1, 2, 7]])
    assert repeat_targets(y, earlier_next).tolist() == [[-1, -1, -1, -1, 2, -1]]


def test_the_tasks_arguments_are_checked():
    with pytest.raises(ValueError, match="2 <= min_length <= max_length <= \\(seq_len \\+ 1\\) / 2, got vocab_size=10, "
                                         "seq_len=8, min_length=5, max_length=4"):
        RepeatedSegmentTask(vocab_size=10, seq_len=8, min_length=5, max_length=4)
    with pytest.raises(ValueError, match="max_length=6"):
        RepeatedSegmentTask(seq_len=10, min_length=2, max_length=6)                  # two copies need 12 tokens
    with pytest.raises(ValueError, match="vocab_size >= 2"):
        RepeatedSegmentTask(vocab_size=1)


def test_part_losses_are_log_v_for_a_model_that_predicts_nothing():
    x, y, earlier_next = RepeatedSegmentTask(vocab_size=16, seq_len=9, min_length=2, max_length=4, rng=3).batch(30)
    uniform = GPT(16, 8, 2, 1, 0, 9, rng=0)
    uniform.lm_head.weight.data[...] = 0.0                               # tied: every logit 0
    assert part_losses(uniform, x, y, earlier_next) == pytest.approx((np.log(16), np.log(16)))


def _short_run(seed):
    config = TrainConfig(block_size=9, batch_size=8, n_layers=2, n_heads=2, d_model=16, d_ff=0, max_steps=12,
                         lr=1e-2, warmup_steps=2, lr_decay_steps=12, seed=seed, dtype="float64", kernels="plain")
    task = RepeatedSegmentTask(vocab_size=12, seq_len=9, min_length=2, max_length=4, rng=seed)
    eval_batch = RepeatedSegmentTask(vocab_size=12, seq_len=9, min_length=2, max_length=4, rng=99).batch(16)
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


def _shipped_model():
    saved = np.load(SHIPPED)
    config = dict(zip(saved["config_keys"], saved["config_values"]))
    model = GPT(int(config["vocab_size"]), int(config["d_model"]), int(config["n_heads"]), int(config["n_layers"]),
                int(config["d_ff"]), int(config["block_size"]), positional=str(saved["positional"]), dtype=np.float32)
    model.load_state_dict({name[len("param."):]: saved[name] for name in saved.files if name.startswith("param.")})
    return model, config


def test_the_shipped_weights_hold_an_induction_head_fed_by_a_previous_token_head():
    model, config = _shipped_model()
    task = RepeatedSegmentTask(int(config["vocab_size"]), int(config["seq_len"]), int(config["min_length"]),
                               int(config["max_length"]), rng=2024)
    x, y, earlier_next = task.batch(256)
    scores = head_scores(model, x, earlier_next)
    assert scores["prefix_matching"][1].max() > 0.7                     # layer 1 looks after the earlier copy ...
    assert scores["copying"][1, scores["prefix_matching"][1].argmax()] > 0.5          # ... and copies what it sees
    assert scores["previous_token"][0].max() > 0.5                      # layer 0 looks one place back
    assert scores["prefix_matching"][0].max() < 0.2                     # layer 0 alone cannot find the copy
    assert part_losses(model, x, y, earlier_next)[1] < 0.5               # the repeat: from log V = 4.16 to near 0
