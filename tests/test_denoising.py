"""T5's span corruption and BART's noising functions: the target repairs the source, the rates hold, training learns."""

import doctest
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import CharTokenizer, Seq2SeqTransformer
from minitransformer.objectives import denoising
from minitransformer.objectives.denoising import (
    MASK,
    DenoisingTask,
    fill_sentinels,
    infilling_spans,
    span_corruption,
    t5_noise_mask,
    text_infilling,
    token_deletion,
    token_masking,
)
from minitransformer.objectives.seq2seq import train_seq2seq
from minitransformer.tasks.reverse import BOS, EOS, PAD

SENTINELS = list(range(4, 100))                 # enough for every span hypothesis draws (at most 61)
TEXT_IDS = 100                                   # clean ids start here, clear of the mask and the sentinels


def clean(length, seed=0):
    return np.random.default_rng(seed).integers(TEXT_IDS, TEXT_IDS + 20, size=length)


@given(st.integers(2, 120), st.floats(0.05, 0.6), st.floats(1.0, 6.0), st.integers(0, 2**32 - 1))
def test_span_corruption_source_and_target_spell_the_original(length, density, mean_span, seed):
    ids = clean(length, seed)
    source, target = span_corruption(ids, SENTINELS, rng=seed, density=density, mean_span=mean_span)
    assert fill_sentinels(source, target, SENTINELS) == ids.tolist()
    used = [token for token in source if token in SENTINELS]
    assert used == SENTINELS[:len(used)] and len(used) >= 1                      # in order, each once
    assert [token for token in target if token in SENTINELS] == SENTINELS[:len(used) + 1]   # and one to close
    n_noise = min(max(round(density * length), 1), length - 1)
    assert len(target) - len(used) - 1 == n_noise                                # exactly the noise tokens


def test_span_corruption_hides_15_percent_in_spans_of_mean_length_3():
    rng = np.random.default_rng(0)
    masks = [t5_noise_mask(300, rng) for _ in range(300)]
    assert all(mask.sum() == 45 for mask in masks)                                # round(0.15 * 300)
    n_spans = [np.sum(mask & ~np.concatenate([[False], mask[:-1]])) for mask in masks]
    assert 2.85 < 45 / np.mean(n_spans) <= 3.0                                    # 15 spans, 16 if one wraps
    starts = np.mean([np.argmax(mask) for mask in masks])
    assert 0 < starts < 40                                                         # rolled: spans also at the start


def test_the_span_layout_is_rolled_so_every_position_is_noise_at_the_density():
    """T5's random roll: each position is noise with probability 0.15, the first and the middle alike
    (4,000 masks: standard error 0.0056, tolerance 0.03)."""
    rng = np.random.default_rng(1)
    masks = np.array([t5_noise_mask(100, rng) for _ in range(4000)])
    assert np.abs(masks[:, [0, 25, 50, 75, 99]].mean(axis=0) - 0.15).max() < 0.03


@pytest.mark.parametrize("length, density, mean_span, n_noise, n_spans", [
    (22, 0.5, 4.0, 11, 3),          # 11 / 4 = 2.75 rounds to 3 spans (not 2)
    (100, 0.15, 3.0, 15, 5),
    (10, 0.04, 3.0, 1, 1),          # round(0.4) = 0 noise tokens, raised to 1, in 1 span
])
def test_noise_and_span_counts_are_rounded_as_t5_rounds_them(length, density, mean_span, n_noise, n_spans):
    """Counted around the circle (the roll may cut one span in two at the ends), each draw has exactly
    round(density * n) noise tokens in round(noise / mean_span) spans."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        mask = t5_noise_mask(length, rng, density, mean_span)
        assert mask.sum() == n_noise and np.sum(mask & ~np.roll(mask, 1)) == n_spans


def test_span_corruptions_own_defaults_are_t5s_15_percent_in_spans_of_3():
    source, target = span_corruption(clean(300), SENTINELS, rng=2)
    n_spans = sum(token in SENTINELS for token in source)
    assert len(target) - n_spans - 1 == 45 and n_spans in (15, 16)               # 45 noise tokens, 15 spans (+1 wrapped)


@pytest.mark.parametrize("function, arguments, papers_numbers", [
    (t5_noise_mask, (200,), dict(density=0.15, mean_span=3.0)),
    (span_corruption, (clean(200), SENTINELS), dict(density=0.15, mean_span=3.0)),
    (infilling_spans, (200,), dict(rate=0.3, poisson_mean=3.0)),
    (text_infilling, (clean(200), MASK), dict(rate=0.3, poisson_mean=3.0)),
    (token_masking, (clean(200), MASK), dict(rate=0.15)),
    (token_deletion, (clean(200),), dict(rate=0.15)),
], ids=lambda value: getattr(value, "__name__", ""))
def test_the_defaults_are_the_papers_numbers(function, arguments, papers_numbers):
    """T5: 15% of the tokens in spans of mean length 3 (Raffel et al. 2020, §3.3.4); BART: spans of Poisson(3)
    lengths over 30% of the tokens (Lewis et al. 2020, §2.2 and its best model); token masking and deletion 15%.
    Each call with the defaults draws what the call with the papers' numbers draws, seed for seed."""
    for seed in range(10):
        by_default = function(*arguments, rng=np.random.default_rng(seed))
        explicit = function(*arguments, rng=np.random.default_rng(seed), **papers_numbers)
        assert str(by_default) == str(explicit), seed


def test_the_task_lays_out_pad_bos_eos_mask_sentinels_then_the_text():
    stream = np.arange(30) % 7
    task = DenoisingTask(stream, 7, block_size=10, transform="token_masking", rng=4)
    assert (PAD, BOS, EOS, MASK) == (0, 1, 2, 3) and task.sentinels == list(range(4, 12))   # 8 sentinels
    assert task.offset == 12 and task.vocab_size == 19
    src, tgt_in, tgt_out = task.train_batch(3)
    assert np.all(tgt_in[:, 0] == BOS) and np.all(tgt_out[:, -1] == EOS)
    np.testing.assert_array_equal(tgt_in[:, 1:], tgt_out[:, :-1])                 # the target, shifted by one
    for window in tgt_out[:, :-1] - 12:                         # the clean window, its ids moved past 11
        assert any(np.array_equal(window, stream[start:start + 10]) for start in range(21))
    assert np.all((src == MASK) | (src == tgt_out[:, :-1])) and np.all(np.sum(src == MASK, axis=1) == 2)


def test_the_task_draws_every_window_start_alike():
    """Window starts are uniform over 0 .. N - block: 13 starts of a 22-token stream in windows of 10, the last
    window ending on the stream's last token (6,000 windows: each start's frequency 1/13, standard error 0.0034,
    tolerance 0.02). A window's first token is its start here, the stream's ids being distinct."""
    task = DenoisingTask(np.arange(22), 22, block_size=10, transform="token_masking", rng=0)
    starts = task.train_batch(6000)[2][:, 0] - task.offset                    # the clean target's first token
    assert set(starts.tolist()) == set(range(13))
    assert np.abs(np.bincount(starts) / starts.size - 1 / 13).max() < 0.02


def test_every_token_of_the_stream_is_in_some_window():
    """A stream of block + 1 tokens holds two windows, the second ending on the last token: both are drawn
    (200 windows, each missed with probability 2^-200); a stream of exactly block tokens is its one window."""
    stream = np.arange(11)
    task = DenoisingTask(stream, 11, block_size=10, transform="token_masking", rng=0)
    windows = {tuple(window) for window in task.train_batch(200)[2][:, :-1] - task.offset}
    assert windows == {tuple(range(10)), tuple(range(1, 11))}
    task = DenoisingTask(stream[:10], 11, block_size=10, transform="token_masking", rng=0)
    np.testing.assert_array_equal(task.train_batch(3)[2][:, :-1] - task.offset, [stream[:10]] * 3)


@pytest.mark.parametrize("transform", DenoisingTask.TRANSFORMS)
def test_each_transform_name_calls_its_function_with_the_default_rates(transform):
    ids = np.arange(TEXT_IDS, TEXT_IDS + 40)
    task = DenoisingTask(np.zeros(50, dtype=int), 1, 10, transform, rng=9)
    expected = {"span_corruption": lambda rng: span_corruption(ids, task.sentinels, rng),
                "token_masking": lambda rng: token_masking(ids, MASK, rng),
                "token_deletion": lambda rng: token_deletion(ids, rng),
                "text_infilling": lambda rng: text_infilling(ids, MASK, rng)}[transform]
    assert task.corrupt(ids) == expected(np.random.default_rng(9))
    source, _ = task.corrupt(ids)
    hidden = {"text_infilling": 12}.get(transform, 6)         # 15% of 40 = 6 (round), text infilling 30% = 12 (ceil)
    assert len(ids) - sum(token >= TEXT_IDS for token in source) == hidden


def test_token_masking_masks_the_rate_and_keeps_the_rest():
    ids = clean(200)
    source, target = token_masking(ids, MASK, rng=3)
    source = np.array(source)
    assert target == ids.tolist() and np.sum(source == MASK) == 30
    assert np.array_equal(source[source != MASK], ids[source != MASK])
    hits = np.mean([np.array(token_masking(ids, MASK, rng=seed)[0]) == MASK for seed in range(200)], axis=0)
    assert np.all(np.abs(hits - 0.15) < 0.1) and abs(hits.mean() - 0.15) < 1e-12  # every position alike


def test_token_deletion_leaves_an_ordered_subsequence():
    ids = np.arange(TEXT_IDS, TEXT_IDS + 40)
    source, target = token_deletion(ids, rng=5)
    assert target == ids.tolist() and len(source) == 34                          # round(0.15 * 40) = 6 deleted
    assert len(token_deletion(ids[:25], rng=5)[0]) == 21                         # round(0.15 * 25 = 3.75) = 4, not 3
    assert source == sorted(source) and set(source) < set(ids.tolist())
    deleted = np.mean([~np.isin(ids, token_deletion(ids, rng=seed)[0]) for seed in range(400)], axis=0)
    assert np.all(np.abs(deleted - 0.15) < 0.08) and abs(deleted.mean() - 0.15) < 1e-12  # every position alike


def _matches_with_each_mask_some_span(source, original):
    pattern = "".join("(.*?)" if token == MASK else re.escape(chr(token)) for token in source)
    return re.fullmatch(pattern, "".join(chr(token) for token in original))


@given(st.integers(2, 80), st.floats(0.05, 0.9), st.integers(0, 2**32 - 1))
def test_text_infilling_each_mask_hides_one_span(length, rate, seed):
    ids = clean(length, seed)
    source, target = text_infilling(ids, MASK, rng=seed, rate=rate)
    assert target == ids.tolist()
    assert _matches_with_each_mask_some_span(source, ids)
    n_hidden = len(ids) - (len(source) - source.count(MASK))
    assert n_hidden == min(int(np.ceil(rate * length)), length - 1)
    assert all(not (a == b == MASK) for a, b in zip(source, source[1:]))         # two [MASK]s never touch


def test_infilling_span_lengths_are_poisson_3():
    rng = np.random.default_rng(0)
    assert all(infilling_spans(40, rng)[1].sum() == 12 for _ in range(20))        # BART's 30%: ceil(0.3 * 40)
    lengths = np.concatenate([infilling_spans(400, rng)[1][:-1] for _ in range(300)])   # the last one is cut
    assert abs(lengths.mean() - 3.0) < 0.15 and abs(lengths.var() - 3.0) < 0.4      # Poisson: mean = variance
    assert abs(np.mean(lengths == 0) - np.exp(-3)) < 0.02                          # zero-length spans insert a mask


def test_same_seed_same_corruption_and_docstring_examples_hold():
    ids = clean(50)
    for transform in (lambda rng: span_corruption(ids, SENTINELS, rng), lambda rng: text_infilling(ids, MASK, rng),
                      lambda rng: token_masking(ids, MASK, rng), lambda rng: token_deletion(ids, rng)):
        assert transform(7) == transform(np.random.default_rng(7))
    result = doctest.testmod(denoising)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("call, message", [
    (lambda: span_corruption([100, 101, 5], SENTINELS, 0), r"span_corruption: the text already holds .*\[5\]"),
    (lambda: span_corruption(clean(100), [4, 5], 0), "span_corruption needs 6 sentinel ids for 5 spans, got 2"),
    (lambda: span_corruption(clean(10), SENTINELS, 0, density=1.5), r"density in \(0, 1\), got 1.5"),
    (lambda: span_corruption(clean(10), SENTINELS, 0, mean_span=0.5), "mean_span >= 1, got 0.5"),
    (lambda: token_masking([[100, 101]], MASK, 0), r"token_masking expected a 1-D sequence .* shape \(1, 2\)"),
    (lambda: token_deletion([100], 0), "at least 2 integer ids"),
    (lambda: text_infilling(clean(10), MASK, 0, rate=0), r"text_infilling expected rate in \(0, 1\), got 0"),
    (lambda: DenoisingTask(clean(100), 20, 16, "shuffle"), "DenoisingTask expected transform in"),
    (lambda: DenoisingTask(clean(10), 20, 16, "token_masking"), "at least block_size = 16 tokens, got 10"),
])
def test_bad_input_is_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_few_steps_of_span_corruption_on_a_text_lower_the_loss():
    text = "the quick brown fox jumps over the lazy dog; " * 40
    tokenizer = CharTokenizer.train(text)
    task = DenoisingTask(tokenizer.encode(text), tokenizer.vocab_size, block_size=24, transform="span_corruption",
                         rng=0)
    src, tgt_in, tgt_out = task.train_batch(4)
    assert src.shape[0] == tgt_in.shape[0] == 4 and tgt_in.shape == tgt_out.shape
    assert src.max() < task.vocab_size and src.min() >= 0
    model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, 32, 2, 1, 64, 32, pad_id=0, norm="pre",
                               share_embeddings=True, tie_output=True, rng=0)
    losses = train_seq2seq(model, task, steps=40, batch_size=16, lr=3e-3, warmup=10)
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 1.0, (losses[:5], losses[-5:])
