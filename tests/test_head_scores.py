"""Head scores (models/head_scores.py): previous-token, prefix-matching and copying, on hand-built heads, and the
OV circuits against the plain product of the layers' own maps on random weights (LayerNorm and RMSNorm, tied and
untied heads, grouped key/value heads)."""

import numpy as np
import pytest

from minitransformer import GPT
from minitransformer.models.head_scores import (
    copying_score,
    copying_scores,
    head_scores,
    ov_circuits,
    prefix_matching_scores,
    previous_token_scores,
)
from minitransformer.tasks.repeated_segment import RepeatedSegmentTask


def _causal_uniform(B, H, T):
    """(B, H, T, T): every query spreads its weight evenly over itself and the positions before it."""
    weights = np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None]
    return np.broadcast_to(weights, (B, H, T, T)).copy()


def _pattern_at(target, H):
    """(B, H, T, T): all weight on target[b, t] where it is >= 0, else on the query itself."""
    B, T = target.shape
    alpha = np.zeros((B, H, T, T))
    for b in range(B):
        for t in range(T):
            alpha[b, :, t, target[b, t] if target[b, t] >= 0 else t] = 1.0
    return alpha


def test_a_perfect_induction_pattern_scores_one_and_a_uniform_one_scores_its_share():
    task = RepeatedSegmentTask(vocab_size=20, seq_len=12, min_length=3, max_length=6, rng=0)
    x, _, target = task.batch(8)
    perfect = _pattern_at(target, H=2)
    np.testing.assert_allclose(prefix_matching_scores(perfect, target), [1.0, 1.0])
    uniform = _causal_uniform(8, 2, x.shape[1])
    queries = np.nonzero(target >= 0)[1]
    np.testing.assert_allclose(prefix_matching_scores(uniform, target), [np.mean(1 / (queries + 1))] * 2)
    mixed = np.concatenate([perfect[:, :1], uniform[:, :1]], axis=1)         # head 0 induction, head 1 uniform
    assert prefix_matching_scores(mixed, target)[0] == 1.0 > 5 * prefix_matching_scores(mixed, target)[1]


def test_previous_token_score_of_a_one_back_head_is_one_and_of_a_uniform_head_the_mean_share():
    T = 7
    one_back = np.zeros((3, 1, T, T))
    one_back[:, 0, 0, 0] = 1.0
    one_back[:, 0, np.arange(1, T), np.arange(T - 1)] = 1.0
    assert previous_token_scores(one_back).tolist() == [1.0]
    np.testing.assert_allclose(previous_token_scores(_causal_uniform(2, 3, T)), [np.mean(1 / np.arange(2, T + 1))] * 3)
    assert previous_token_scores(np.eye(T)[None, None]).tolist() == [0.0]     # attending to itself only


def _identity_model(sign):
    """A pre-norm GPT with V = C = 6, W_E = I, gains 1, and head 0's W_V W_O = sign * I, head 1's random."""
    model = GPT(6, 6, 2, 1, 0, 4, rng=0)
    model.token_embedding.weight.data[...] = np.eye(6)
    attn = model.blocks[0].attn
    attn.w_v.data[...] = np.random.default_rng(1).standard_normal((6, 6))
    attn.w_o.data[...] = np.random.default_rng(2).standard_normal((6, 6))
    attn.w_v.data[:, :3] = np.eye(6)[:, :3]                # head 0: values are the first 3 coordinates ...
    attn.w_o.data[:3] = sign * np.eye(6)[:3]               # ... written back where they came from
    return model


def test_copying_score_is_one_for_a_copying_circuit_minus_one_for_a_suppressing_one():
    assert copying_score(np.eye(5)) == 1.0 and copying_score(-2 * np.eye(5)) == -1.0
    assert copying_score(np.diag([3.0, 1.0, -1.0])) == pytest.approx(3 / 5)
    rotation = np.array([[0.0, -1.0], [1.0, 0.0]])          # eigenvalues +-i: moves tokens, copies none
    assert copying_score(rotation) == pytest.approx(0.0, abs=1e-12)
    random = [copying_score(np.random.default_rng(seed).standard_normal((40, 40))) for seed in range(20)]
    assert abs(np.mean(random)) < 0.1


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_copying_scores_read_the_ov_circuit_from_the_models_weights(sign):
    model = _identity_model(sign)
    circuits = ov_circuits(model, 0)
    assert circuits.shape == (2, 6, 6)
    centre = np.eye(6) - 1 / 6                                # LayerNorm removes the mean, before and after
    np.testing.assert_allclose(circuits[0], sign * centre @ np.diag([1, 1, 1, 0, 0, 0]) @ centre, atol=1e-12)
    scores = copying_scores(model)
    assert scores.shape == (1, 2) and scores[0, 0] == pytest.approx(sign)
    assert abs(scores[0, 1]) < 0.9                            # the random head neither copies nor suppresses all


def test_copying_scores_take_the_norm_gains_and_an_untied_head_into_account():
    model = _identity_model(1.0)
    model.ln_f.gamma.data[...] = -1.0                         # a negative final gain turns copying into suppression
    assert copying_scores(model)[0, 0] == pytest.approx(-1.0)
    untied = GPT(6, 6, 2, 1, 0, 4, rng=0, tie_weights=False)
    untied.lm_head.weight.data[...] = np.eye(6)
    untied.token_embedding.weight.data[...] = np.eye(6)
    untied.blocks[0].attn.w_v.data[...] = np.eye(6)
    untied.blocks[0].attn.w_o.data[...] = np.eye(6)
    np.testing.assert_allclose(copying_scores(untied), [[1.0, 1.0]])


def _assert_proportional(actual, expected):
    """actual = c * expected for one c > 0 (the circuits are defined up to the norms' positive scales)."""
    scale = (actual * expected).sum() / (expected * expected).sum()
    assert scale > 0
    np.testing.assert_allclose(actual, scale * expected, rtol=1e-9, atol=1e-12 * np.abs(actual).max())


def _as_matrix(layer, width):
    """A layer applied to the rows of the identity (width, width): the linear map it applies, read from its own
    forward (for a norm: up to one positive scale, every row e_j having the same mean and spread)."""
    return layer(np.eye(width))


@pytest.mark.parametrize("case", ["layernorm, untied, grouped heads", "rmsnorm, tied"])
def test_ov_circuits_are_the_plain_product_on_random_weights_norms_and_grouped_heads(case):
    """Elhage et al.'s OV circuit W_E N_1 W_V^h W_O^h N_f W_U, each factor read from the layers' forward passes
    on one-hot inputs and the heads split by plain reshapes, on random weights and gains of both signs (so no
    transpose, order of factors or head index can hide behind an identity); query head h reads key/value head
    h // (H / Hkv), the heads of a group sitting in a row."""
    rng = np.random.default_rng(0)
    if case == "rmsnorm, tied":
        model, layer = GPT(9, 6, 2, 1, 12, 4, norm_layer="rmsnorm", rng=1), 0
    else:
        model, layer = GPT(11, 8, 4, 2, 16, 4, n_kv_heads=2, tie_weights=False, rng=1), 1
    for norm in [model.ln_f] + [module for block in model.blocks for module in (block.ln1, block.ln2)]:
        norm.gamma.data[...] = rng.uniform(0.5, 2.0, norm.gamma.data.shape) * rng.choice([-1, 1], norm.gamma.data.shape)
        if hasattr(norm, "beta"):
            norm.beta.data[...] = rng.standard_normal(norm.beta.data.shape)
    V, C = model.vocab_size, model.blocks[0].attn.w_v.data.shape[0]
    block, attn = model.blocks[layer], model.blocks[layer].attn
    H, Hkv, hs = attn.n_heads, attn.n_kv_heads, attn.head_size
    embedding = model.token_embedding(np.arange(V)[None])[0]                    # (V, C): W_E
    unembedding = _as_matrix(model.lm_head, C)                                  # (C, V): W_U
    norms = [_as_matrix(norm, C) - (norm.beta.data if hasattr(norm, "beta") else 0.0)     # (C, C): N_1, N_f,
             for norm in (block.ln1, model.ln_f)]                                       # up to positive scales
    w_v = attn.w_v.data.reshape(C, Hkv, hs)
    w_o = attn.w_o.data.reshape(H, hs, C)
    kv_of = np.repeat(np.arange(Hkv), H // Hkv)                                 # (H,)
    circuits = ov_circuits(model, layer)
    assert circuits.shape == (H, V, V)
    for head in range(H):
        expected = embedding @ norms[0] @ w_v[:, kv_of[head]] @ w_o[head] @ norms[1] @ unembedding
        _assert_proportional(circuits[head], expected)
    np.testing.assert_array_equal(copying_scores(model)[layer], [copying_score(circuit) for circuit in circuits])


def test_head_scores_read_the_model_in_evaluation_mode_and_leave_its_mode_alone():
    """Dropout would draw new masks on every call: the scores are those of the model without dropout, and a model
    in training mode stays in it."""
    x, _, earlier_next = RepeatedSegmentTask(vocab_size=20, seq_len=11, min_length=3, max_length=6, rng=1).batch(4)
    model = GPT(20, 8, 2, 2, 0, 11, dropout=0.5, rng=0)
    assert model.training
    first, again = head_scores(model, x, earlier_next), head_scores(model, x, earlier_next)
    assert model.training
    model.eval()
    model(x)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name], err_msg=name)
    np.testing.assert_array_equal(first["previous_token"][1], previous_token_scores(model.blocks[1].attn.attention.alpha))


def test_prefix_matching_counts_a_target_at_position_zero_by_hand():
    """Query 1 answers from position 0 (weight 0.25 there), query 2 from position 1 (weight 0.5): mean 0.375."""
    alpha = np.zeros((1, 1, 3, 3))
    alpha[0, 0, 0, 0] = 1.0
    alpha[0, 0, 1, :2] = [0.25, 0.75]
    alpha[0, 0, 2] = [0.2, 0.5, 0.3]
    assert prefix_matching_scores(alpha, np.array([[-1, 0, 1]])).tolist() == [0.375]


def test_head_scores_run_the_model_and_return_one_row_per_layer():
    model = GPT(20, 8, 2, 2, 0, 11, rng=0)
    x, _, earlier_next = RepeatedSegmentTask(vocab_size=20, seq_len=11, min_length=3, max_length=6, rng=1).batch(4)
    scores = head_scores(model, x, earlier_next)
    assert {name: value.shape for name, value in scores.items()} == {
        "previous_token": (2, 2), "prefix_matching": (2, 2), "copying": (2, 2)}
    alpha = model.blocks[1].attn.attention.alpha
    np.testing.assert_allclose(scores["previous_token"][1], previous_token_scores(alpha))


def test_bad_input_is_refused_with_the_expected_shape():
    with pytest.raises(ValueError, match=r"expected attention weights \(B, H, T, T\), got shape \(2, 3, 3\)"):
        previous_token_scores(np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match=r"expected attention weights \(B, H, T, T\), got shape \(1, 1, 3, 4\)"):
        previous_token_scores(np.zeros((1, 1, 3, 4)))
    with pytest.raises(ValueError, match="previous_token_scores expected at least 2 positions, got T=1"):
        previous_token_scores(np.ones((1, 1, 1, 1)))
    with pytest.raises(ValueError, match=r"expected target \(B, T\) = \(1, 3\), got \(1, 4\)"):
        prefix_matching_scores(np.zeros((1, 1, 3, 3)), np.zeros((1, 4), dtype=int))
    with pytest.raises(ValueError, match="at least one query with a target >= 0"):
        prefix_matching_scores(np.zeros((1, 1, 3, 3)), np.full((1, 3), -1))
    with pytest.raises(ValueError, match="expected a pre-norm GPT"):
        ov_circuits(GPT(6, 6, 2, 1, 0, 4, norm="post", rng=0), 0)
