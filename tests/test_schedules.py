"""Learning-rate schedules (all in training/schedules.py): the notes' rule as printed, its rescaled form, warmup +
cosine decay, warmup + linear decay."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer.training.config import TrainConfig
from minitransformer.training.schedules import cosine_rate, linear_rate, noam_rate, scaled_noam_rate


def test_noam_matches_the_printed_formula_and_peaks_at_warmup():
    d_model, warmup = 512, 4000
    for step in (1, 10, 3999, 4000, 4001, 10**5):
        assert noam_rate(step, d_model, warmup) == d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    rates = [noam_rate(step, d_model, warmup) for step in range(1, 20000, 50)]
    peak = max(range(len(rates)), key=rates.__getitem__)
    assert abs(range(1, 20000, 50)[peak] - warmup) <= 50
    assert noam_rate(warmup, d_model, warmup) == pytest.approx((d_model * warmup) ** -0.5)


def test_noam_decays_towards_zero_but_never_reaches_it():
    # the notes say "decay to 0"; the formula only approaches it, as 1/sqrt(step)
    assert noam_rate(100_000, 512, 4000) / noam_rate(4000, 512, 4000) == pytest.approx(0.2)
    assert noam_rate(10**12, 512, 4000) > 0
    with pytest.raises(ValueError, match="step >= 1"):
        noam_rate(0, 512, 4000)


def test_cosine_endpoints():
    assert cosine_rate(0, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-3 / 101)
    assert cosine_rate(100, 1e-3, 1e-4, 100, 2000) == 1e-3
    assert cosine_rate(1050, 1e-3, 1e-4, 100, 2000) == pytest.approx(0.55e-3)     # halfway: the mean
    assert cosine_rate(2000, 1e-3, 1e-4, 100, 2000) == pytest.approx(1e-4)
    assert cosine_rate(5000, 1e-3, 1e-4, 100, 2000) == 1e-4


@given(st.integers(0, 3000), st.integers(0, 200), st.integers(201, 2500))
def test_cosine_stays_between_floor_and_peak_and_decays_monotonically(step, warmup, decay):
    rate = cosine_rate(step, 1.0, 0.1, warmup, decay)
    assert 0 < rate <= 1.0
    if step >= warmup:
        assert rate >= 0.1 - 1e-12
        assert cosine_rate(step + 1, 1.0, 0.1, warmup, decay) <= rate + 1e-12
    else:
        assert cosine_rate(step + 1, 1.0, 0.1, warmup, decay) > rate


def test_cosine_rejects_decay_before_warmup_ends():
    with pytest.raises(ValueError, match="decay_steps > warmup"):
        cosine_rate(0, 1.0, 0.1, 100, 100)
    assert math.isclose(cosine_rate(0, 1.0, 0.1, 0, 10), 1.0)


def test_linear_warms_up_then_decays_to_a_tenth():
    assert [linear_rate(step, 1e-3, 4, 24) for step in (0, 1, 3)] == [0.25e-3, 0.5e-3, 1e-3]
    assert linear_rate(4, 1e-3, 4, 24) == 1e-3                                   # the decay starts at the peak
    assert linear_rate(14, 1e-3, 4, 24) == pytest.approx(0.55e-3)                 # halfway down
    assert linear_rate(24, 1e-3, 4, 24) == pytest.approx(1e-4)
    assert linear_rate(0, 1e-3, 0, 10) == 1e-3                                   # no warm-up
    with pytest.raises(ValueError, match="linear_rate expects warmup >= 0, got -1"):
        linear_rate(0, 1e-3, -1, 10)


@given(st.integers(0, 3000), st.integers(1, 200))
def test_scaled_noam_has_the_notes_shape_with_its_peak_at_max_lr(step, warmup):
    rate = scaled_noam_rate(step, 1e-3, warmup, 128)
    assert rate == pytest.approx(1e-3 * noam_rate(step + 1, 128, warmup) / noam_rate(warmup, 128, warmup), rel=1e-15)
    assert rate <= 1e-3 * (1 + 1e-12)
    assert scaled_noam_rate(warmup - 1, 1e-3, warmup, 128) == pytest.approx(1e-3)


def test_the_trainers_config_picks_its_rate_from_the_schedules():
    config = TrainConfig(lr=1e-3, min_lr=1e-4, warmup_steps=10, lr_decay_steps=100, d_model=64)
    for step in (0, 9, 10, 50, 100, 200):
        assert config.learning_rate(step) == cosine_rate(step, 1e-3, 1e-4, 10, 100)
        noam = TrainConfig(schedule="noam", lr=1e-3, warmup_steps=10, d_model=64)
        assert noam.learning_rate(step) == scaled_noam_rate(step, 1e-3, 10, 64)
        assert TrainConfig(schedule="constant", lr=1e-3).learning_rate(step) == 1e-3
    no_warmup, one_step = TrainConfig(schedule="noam", warmup_steps=0), TrainConfig(schedule="noam", warmup_steps=1)
    assert no_warmup.learning_rate(0) == one_step.learning_rate(0)                  # a warmup of 0 counts as 1
    with pytest.raises(ValueError, match="unknown schedule 'step'"):
        TrainConfig(schedule="step").learning_rate(0)


def test_the_old_encoder_decoder_rate_is_gone_in_0_4():
    import minitransformer.objectives.seq2seq as encdec

    assert not hasattr(encdec, "learning_rate")


def test_noam_values_at_given_steps_by_hand():
    """Vaswani et al. (2017) eq. 3 with d_model 512 and warmup 4000: the peak at step 4000 is
    1 / sqrt(512 * 4000) = 1 / sqrt(2 048 000) = 6.9877e-4; the rise is linear, so step 1000 gives a quarter of
    it; the decay is 1/sqrt(step), so step 16 000 gives half of it and step 64 000 a quarter."""
    peak = 1 / math.sqrt(2_048_000)
    assert peak == pytest.approx(6.9877e-4, abs=5e-9)
    assert noam_rate(4000, 512, 4000) == pytest.approx(peak, rel=1e-14)
    assert noam_rate(1000, 512, 4000) == pytest.approx(peak / 4, rel=1e-14)
    assert noam_rate(16_000, 512, 4000) == pytest.approx(peak / 2, rel=1e-14)
    assert noam_rate(64_000, 512, 4000) == pytest.approx(peak / 4, rel=1e-14)


def test_cosine_decay_at_its_quarter_points_by_hand():
    """Loshchilov & Hutter (2017) eq. 5: min + (max - min)(1 + cos(pi r)) / 2. From 1.0 to 0.1 over steps
    10 .. 110: r = 1/4 gives 0.1 + 0.45 (1 + sqrt(2)/2) = 0.868198, r = 1/2 gives 0.55, r = 3/4 gives
    0.1 + 0.45 (1 - sqrt(2)/2) = 0.231802; a straight line would give 0.775, 0.55, 0.325."""
    assert cosine_rate(35, 1.0, 0.1, 10, 110) == pytest.approx(0.868198, abs=1e-6)
    assert cosine_rate(60, 1.0, 0.1, 10, 110) == pytest.approx(0.55, abs=1e-12)
    assert cosine_rate(85, 1.0, 0.1, 10, 110) == pytest.approx(0.231802, abs=1e-6)
    assert cosine_rate(4, 1.0, 0.1, 10, 110) == pytest.approx(5 / 11, rel=1e-14)    # warm-up: (step + 1) / (warmup + 1)
