"""GPT (models/gpt.py): its definition, pinned independently of the gradient checks."""

import numpy as np
import pytest
from _catalogue import assert_gradients_match, case_id, catalogue_cases
from _layer_checks import assert_backward_before_forward_is_refused, assert_close_in_float32
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import GPT


@pytest.mark.parametrize("n_layers", [2, 8])
def test_initialisation_is_gpt2s(n_layers):
    """GPT-2: weights N(0, 0.02^2), W_O and fc2 N(0, (0.02 / sqrt(2 L))^2), biases 0, LayerNorm 1 and 0.

    Each layer draws its own weights when it is built; this pins the standard deviations the model
    hands them, by name, so that a renamed child or a forgotten argument shows up here.
    """
    model = GPT(vocab_size=300, d_model=64, n_heads=4, n_layers=n_layers, d_ff=256, max_len=128,
                tie_weights=False, rng=0)
    residual_std = 0.02 / np.sqrt(2 * n_layers)
    seen = set()
    for name, param in model.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        values = param.data
        if leaf.startswith("b_") or leaf in ("bias", "beta"):
            expected = ("zeros", 0.0)
            assert np.all(values == 0), f"{name}: expected zeros"
        elif leaf == "gamma":
            expected = ("ones", 1.0)
            assert np.all(values == 1), f"{name}: expected ones"
        else:
            std = residual_std if leaf == "w_o" or name.endswith("fc2.weight") else 0.02
            expected = ("normal", std)
            # n >= 4096 draws: the sample std is within 5 % of the true one with overwhelming probability
            assert values.size >= 4096
            assert abs(values.std() / std - 1) < 0.05, f"{name}: std {values.std():.5f}, expected {std:.5f}"
            assert abs(values.mean()) < 4 * std / np.sqrt(values.size), f"{name}: mean {values.mean():.2e}"
        seen.add(expected[0])
    assert seen == {"zeros", "ones", "normal"}


def test_same_seed_same_weights_and_draws_do_not_depend_on_kernels():
    a = GPT(50, 32, 4, 2, 64, 16, rng=3)
    b = GPT(50, 32, 4, 2, 64, 16, rng=3, kernels="fast")
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(p.data, q.data, err_msg=name)


# ---------------------------------------------------------------- gradients, properties, float32, bad input
@pytest.mark.parametrize("case", catalogue_cases("GPT", "GPT + loss"), ids=case_id)
def test_backward_matches_finite_differences(case):
    assert_gradients_match(case)


@given(st.integers(2, 6), st.integers(0, 2**32 - 1))
def test_causal_gpt_ignores_future_tokens(T, seed):
    rng = np.random.default_rng(seed)
    model = GPT(vocab_size=9, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6, rng=seed)
    ids = rng.integers(0, 9, size=(1, T))
    ids2 = ids.copy()
    ids2[0, -1] = (ids[0, -1] + 1) % 9
    np.testing.assert_allclose(model.forward(ids)[:, :-1], model.forward(ids2)[:, :-1], atol=1e-12)


def test_tiny_gpt_in_float32_matches_float64():
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 6))
    config = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, max_len=6, rng=3)
    model64, model32 = GPT(**config), GPT(**config, dtype=np.float32)
    assert_close_in_float32(model32.forward(ids), model64.forward(ids), "GPT.forward")


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="d_model divisible by n_heads, got d_model=10, n_heads=4"):
        GPT(vocab_size=5, d_model=10, n_heads=4, n_layers=1, d_ff=8, max_len=4)


def test_sequence_longer_than_max_len():
    with pytest.raises(ValueError, match=r"GPT\(.*\) expected at most max_len=4 positions, got T=5"):
        GPT(vocab_size=5, d_model=4, n_heads=2, n_layers=1, d_ff=8, max_len=4).forward(np.zeros((1, 5), dtype=int))


def test_backward_before_forward_is_a_clear_error():
    assert_backward_before_forward_is_refused(GPT(7, 4, 2, 1, 8, 5))


# ---------------------------------------------------------------- sinusoidal positions for any length (issue 24)
def test_a_sinusoidal_gpt_runs_past_max_len_and_learned_positions_keep_their_limit():
    """The formula gives every position: a sinusoidal GPT reads 15 tokens with max_len 6, forward and backward;
    causal attention means the first 6 logits are those of the first 6 tokens alone; the positions past max_len
    are the formula's (a GPT built with max_len 15 holds them in its table and gives the same logits)."""
    config = dict(vocab_size=11, d_model=8, n_heads=2, n_layers=2, d_ff=16, positional="sinusoidal", rng=0)
    model = GPT(max_len=6, **config)
    ids = np.random.default_rng(0).integers(0, 11, size=(2, 15))
    logits = model(ids)
    assert logits.shape == (2, 15, 11) and np.all(np.isfinite(logits))
    np.testing.assert_allclose(logits[:, :6], model(ids[:, :6]), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(logits, GPT(max_len=15, **config)(ids))
    model(ids)
    assert model.backward(np.ones_like(logits)) is None
    learned = GPT(max_len=6, **(config | {"positional": "learned"}))
    with pytest.raises(ValueError, match=r"GPT\(.*\) expected at most max_len=6 positions, got T=15"):
        learned(ids)
