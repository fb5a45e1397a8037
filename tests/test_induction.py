"""A repeated random segment (tasks/repeated_segment.py, objectives/induction.py): the sequences (every length,
distance and start the rules allow, by brute force; the defaults), their two parts (the losses by hand), the
training loop's numbers (the targets counted, the evaluation and log steps, clipping), and the induction head of
the shipped weights (data/induction_gpt.npz)."""

import contextlib
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


def test_every_length_distance_and_start_the_rules_allow_is_drawn_and_no_other():
    """seq_len 9 (10 tokens), segments of 2 to 4 tokens: by brute force, the (length, distance, start) with
    length <= distance and start + distance + length <= 10 are 49 (the rarest drawn with probability 1/147); 3,000
    sequences draw each of them and no other. The copy is exactly `length` long: the token after it equals the
    token after the segment only by chance (V = 1,000)."""
    x, y, earlier_next = RepeatedSegmentTask(vocab_size=1000, seq_len=9, min_length=2, max_length=4, rng=0).batch(3000)
    seen, after_agrees = set(), []
    for row_x, row_y, row_target in zip(x, y, earlier_next):
        queries = np.flatnonzero(row_target >= 0)
        distance = queries[0] - row_target[queries[0]] + 1
        length, start = len(queries) + 1, queries[0] - distance
        seen.add((length, distance, start))
        tokens = np.append(row_x, row_y[-1])
        assert np.array_equal(tokens[start + distance:start + distance + length], tokens[start:start + length])
        if start + distance + length < 10:
            after_agrees.append(tokens[start + distance + length] == tokens[start + length])
    allowed = {(length, distance, start) for length in range(2, 5) for distance in range(length, 11)
               for start in range(11) if start + distance + length <= 10}
    assert len(allowed) == 49 and seen == allowed
    assert np.mean(after_agrees) < 0.01


def test_the_default_task_is_v_64_and_t_32_with_segments_of_4_to_10_tokens():
    """The defaults the module docstring and objectives/induction.py speak of: V = 64, T = 32, segments of 4 to 10."""
    x, y, earlier_next = RepeatedSegmentTask(rng=0).batch(400)
    assert x.shape == (400, 32)
    assert set(np.unique(np.append(x, y[:, -1:], axis=1)).tolist()) == set(range(64))     # every token, none beyond
    assert {np.count_nonzero(row >= 0) + 1 for row in earlier_next} == set(range(4, 11))


def test_the_arguments_bounds_are_inclusive():
    """min_length = max_length = (T + 1) / 2 is allowed: the segment and its copy fill the sequence."""
    x, y, earlier_next = RepeatedSegmentTask(vocab_size=2, seq_len=11, min_length=6, max_length=6, rng=0).batch(5)
    tokens = np.append(x, y[:, -1:], axis=1)                                          # (5, 12)
    np.testing.assert_array_equal(tokens[:, 6:], tokens[:, :6])
    np.testing.assert_array_equal(earlier_next, np.tile([-1] * 6 + [1, 2, 3, 4, 5], (5, 1)))
    with pytest.raises(ValueError, match="min_length=1"):
        RepeatedSegmentTask(min_length=1, max_length=3)


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
    assert repeated_part([[-1, 0, 3]]).tolist() == [[False, True, True]]             # position 0 is a position


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


class _FixedLogits:
    """A stand-in model with the same logits at every position, (log 3, 0, 0, 0): p(0) = 1/2, p(1) = p(2) = p(3) = 1/6."""

    @contextlib.contextmanager
    def evaluating(self):
        yield self

    def __call__(self, x):
        return np.broadcast_to(np.log([3.0, 1.0, 1.0, 1.0]), x.shape + (4,))


def test_part_losses_by_hand():
    """Targets 0, 0 outside the repeat (-log 1/2 each) and 1, 2 inside it (-log 1/6 each): (log 2, log 6)."""
    x = np.zeros((1, 4), dtype=int)
    losses = part_losses(_FixedLogits(), x, np.array([[0, 0, 1, 2]]), np.array([[-1, -1, 1, 2]]))
    assert losses == pytest.approx((np.log(2), np.log(6)), rel=1e-12)


def test_part_losses_read_the_model_without_dropout_and_leave_its_mode_alone():
    x, y, earlier_next = RepeatedSegmentTask(vocab_size=16, seq_len=9, min_length=2, max_length=4, rng=3).batch(8)
    model = GPT(16, 8, 2, 1, 0, 9, dropout=0.5, rng=0)
    first = part_losses(model, x, y, earlier_next)
    assert model.training and part_losses(model, x, y, earlier_next) == first
    model.eval()
    assert part_losses(model, x, y, earlier_next) == first


def _tiny(max_steps, **changes):
    """A 1-layer model's config and its task (V = 8, T = 5): a step costs about a millisecond."""
    config = TrainConfig(block_size=5, batch_size=2, n_layers=1, n_heads=1, d_model=8, d_ff=0, max_steps=max_steps,
                         lr=1e-2, warmup_steps=1, lr_decay_steps=max_steps + 1, seed=0, dtype="float64", kernels="plain",
                         **changes)
    return config, RepeatedSegmentTask(vocab_size=8, seq_len=5, min_length=2, max_length=3, rng=0)


def test_by_default_it_evaluates_every_25_steps_and_logs_every_100th_and_the_last():
    config, task = _tiny(101)
    lines = []
    history = train_induction(build_model(config, 8), task, config, task.batch(4), log=lines.append)
    assert history["eval_step"].tolist() == [0, 25, 50, 75, 100, 101]
    assert lines == [f"step {step:5d}  random part {random:.3f}  repeated part {repeated:.3f}" for step, random, repeated
                     in zip(history["eval_step"], history["random_loss"], history["repeated_loss"]) if step in (0, 100, 101)]


def test_the_training_loss_counts_the_repeats_targets_alone_unless_told():
    """The first step's loss is the initial model's mean -log p over the first batch's repeated part (by default),
    or over every target (repeat_only=False), computed here by a log-softmax by hand."""
    for repeat_only in (None, False):
        config, task = _tiny(1)
        x, y, earlier_next = RepeatedSegmentTask(vocab_size=8, seq_len=5, min_length=2, max_length=3, rng=0).batch(2)
        logits = build_model(config, 8)(x)                                          # the same initial weights
        nll = np.log(np.exp(logits).sum(axis=-1)) - np.take_along_axis(logits, y[..., None], axis=-1)[..., 0]
        counted = repeated_part(earlier_next) if repeat_only is None else np.ones(y.shape, dtype=bool)
        options = {} if repeat_only is None else {"repeat_only": repeat_only}
        eval_batch = RepeatedSegmentTask(vocab_size=8, seq_len=5, min_length=2, max_length=3, rng=1).batch(2)
        history = train_induction(build_model(config, 8), task, config, eval_batch, **options)
        assert history["loss"][0] == pytest.approx(nll[counted].mean(), rel=1e-10)


def test_the_configs_gradient_clipping_reaches_the_loop():
    losses = []
    for grad_clip in (0.0, 1e-3):
        config, task = _tiny(3, grad_clip=grad_clip)
        losses.append(train_induction(build_model(config, 8), task, config, task.batch(2))["loss"])
    assert losses[0][0] == losses[1][0] and np.all(np.abs(losses[0][1:] - losses[1][1:]) > 1e-6)


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
    eval_batch = RepeatedSegmentTask(vocab_size=12, seq_len=9, min_length=2, max_length=4, rng=99).batch(16)
    assert (history["random_loss"][-1], history["repeated_loss"][-1]) == part_losses(model, *eval_batch)


def test_drop_step_is_the_first_evaluation_below_half_way():
    steps = np.array([0, 25, 50, 75, 100, 125])
    assert drop_step(steps, [4.2, 4.1, 4.0, 1.0, 0.3, 0.2]) == 75               # half way: 2.2
    assert drop_step(steps, [4.0, 3.9, 2.0, 1.9, 0.1, 0.0]) == 75               # 2.0 is not below 2.0
    assert drop_step(steps, [4.0, 4.0, 4.0, 4.0, 2.5, 0.0]) == 125              # not the mean (3.08): 2.0
    assert drop_step(steps[:5], [3.0, 5.0, 2.8, 1.5, 1.0]) == 75                # from the first (3.0), not the highest
    assert drop_step(steps[:5], [4.0, 3.5, 2.5, 0.0, 3.0]) == 50                # to the last (3.0), not the lowest


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
