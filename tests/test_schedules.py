"""Learning-rate schedules: the notes' rule as printed, and warmup + cosine decay."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer.training.schedules import cosine_rate, noam_rate


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
