"""Optimizers and clipping: each update against its formula, the parameter groups, state round trips."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import GPT, rel_error
from minitransformer.core.parameter import Parameter
from minitransformer.training.config import transformer_adam
from minitransformer.training.optim import (
    SGD,
    Adam,
    AdamW,
    clip_factor,
    clip_grad_norm,
    global_grad_norm,
    parameter_groups,
)
from minitransformer.training.optim.fast import FAST_FORMS, FastAdam, FastAdamW


def _param(values, grad):
    param = Parameter(np.array(values, dtype=np.float64))
    param.grad[...] = grad
    return param


def test_sgd_momentum_matches_formula():
    param = _param([1.0, -2.0], [0.5, 0.25])
    optimizer = SGD([param], lr=0.1, momentum=0.9)
    optimizer.step()                                      # v = g;           p = p - lr g
    np.testing.assert_allclose(param.data, [1.0 - 0.05, -2.0 - 0.025])
    optimizer.step()                                      # v = 0.9 g + g;   p -= lr 1.9 g
    np.testing.assert_allclose(param.data, [1.0 - 0.05 - 0.095, -2.0 - 0.025 - 0.0475])


def test_adam_first_step_has_size_lr_in_every_coordinate():
    param = _param([0.0, 0.0, 0.0], [1e-4, -3.0, 50.0])
    Adam([param], lr=0.01).step()                         # m_hat / sqrt(v_hat) = sign(g) at t = 1
    np.testing.assert_allclose(param.data, [-0.01, 0.01, -0.01], rtol=1e-4)


def test_adam_matches_formula_over_steps():
    rng = np.random.default_rng(0)
    param = Parameter(rng.standard_normal(5))
    expected = param.data.copy()
    m = v = np.zeros(5)
    optimizer = Adam([param], lr=0.05, betas=(0.8, 0.9), eps=1e-6)
    for t in range(1, 6):
        grad = rng.standard_normal(5)
        param.grad[...] = grad
        optimizer.step()
        m = 0.8 * m + 0.2 * grad
        v = 0.9 * v + 0.1 * grad ** 2
        expected = expected - 0.05 * (m / (1 - 0.8 ** t)) / (np.sqrt(v / (1 - 0.9 ** t)) + 1e-6)
        np.testing.assert_allclose(param.data, expected, rtol=1e-12)


def test_adamw_decay_is_decoupled_and_adam_decay_is_not():
    grad = [0.0, 0.0]
    decoupled, coupled = _param([2.0, -4.0], grad), _param([2.0, -4.0], grad)
    AdamW([decoupled], lr=0.1, weight_decay=0.5).step()
    Adam([coupled], lr=0.1, weight_decay=0.5).step()
    np.testing.assert_allclose(decoupled.data, [2.0 * 0.95, -4.0 * 0.95])     # p <- p - lr lambda p exactly
    np.testing.assert_allclose(coupled.data, [2.0 - 0.1, -4.0 + 0.1], rtol=1e-6)   # L2 went through Adam: step lr


def test_adamw_matches_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    start = rng.standard_normal((3, 4))
    ours = Parameter(start.copy())
    theirs = torch.nn.Parameter(torch.tensor(start))
    optimizer = AdamW([ours], lr=0.01, betas=(0.9, 0.99), weight_decay=0.1)
    reference = torch.optim.AdamW([theirs], lr=0.01, betas=(0.9, 0.99), weight_decay=0.1)
    for _ in range(4):
        grad = rng.standard_normal((3, 4))
        ours.grad[...] = grad
        theirs.grad = torch.tensor(grad)
        optimizer.step()
        reference.step()
    np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-10)


def test_parameter_groups_exempt_biases_layernorm_and_embeddings():
    model = GPT(11, 8, 2, 2, 16, 6, rng=0)
    decayed, plain = parameter_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed_names = {names[id(p)] for p in decayed["params"]}
    plain_names = {names[id(p)] for p in plain["params"]}
    assert decayed["weight_decay"] == 0.1 and plain["weight_decay"] == 0.0
    assert "blocks.0.attn.w_q" in decayed_names and "blocks.1.ff.fc2.weight" in decayed_names
    assert {"token_embedding.weight", "position.weight", "blocks.0.ln1.gamma", "blocks.0.attn.b_q",
            "blocks.0.ff.fc1.bias", "ln_f.beta"} <= plain_names
    assert len(decayed_names) + len(plain_names) == len(model.parameters())
    with_embeddings, _ = parameter_groups(model, 0.1, decay_embeddings=True)
    assert model.token_embedding.weight in with_embeddings["params"]


def test_float32_parameters_stay_float32():
    for make in (lambda p: SGD(p, lr=0.1, momentum=0.9), lambda p: AdamW(p, lr=0.1)):
        param = Parameter(np.ones(4, dtype=np.float32))
        param.grad[...] = 0.5
        optimizer = make([param])
        optimizer.step()
        assert param.data.dtype == np.float32 and all(s.dtype == np.float32 for s in optimizer.state[0].values())


def _twin_optimizers(plain_class, dtype, weight_decay=0.1, **settings):
    """Two GPTs built from one seed, with the plain optimizer on one and its fast form on the other."""
    models = [GPT(11, 8, 2, 2, 16, 6, dtype=dtype, rng=0) for _ in range(2)]
    return models, [make(parameter_groups(model, weight_decay), lr=0.01, betas=(0.9, 0.95), **settings)
                    for model, make in zip(models, (plain_class, FAST_FORMS[plain_class]))]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("grad_clip", [0.0, 0.5, 1e3], ids=["no-clip", "clips", "clip-never-binds"])
@pytest.mark.parametrize("name", ["Adam", "AdamW"])
def test_the_fast_optimizer_equals_its_plain_parent(name, grad_clip, dtype):
    """Five steps of the plain optimizer (one line per rule, per parameter) and its fast form (one flat buffer,
    chunks, the clipping factor folded in) on the same gradients, with both weight-decay groups: the weights
    and the moments agree to float rounding (float64 1e-12 relative, float32 1e-5) after every step."""
    plain_class = {"Adam": Adam, "AdamW": AdamW}[name]
    models, (plain, fast) = _twin_optimizers(plain_class, dtype, eps=1e-8)
    tolerance = 1e-12 if dtype == np.float64 else 1e-5
    rng = np.random.default_rng(0)
    for step in range(5):
        grads = [(rng.standard_normal(p.shape) * 10.0 ** rng.integers(-2, 2)).astype(dtype)
                 for p in models[0].parameters()]
        for model, optimizer in zip(models, (plain, fast)):
            optimizer.lr = 0.01 * (step + 1)
            optimizer.zero_grad()
            for param, grad in zip(model.parameters(), grads):
                param.grad += grad
            if grad_clip:
                norms = optimizer.clip_gradients(grad_clip)
            optimizer.step()
        for (where, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters()):
            assert a.data.dtype == b.data.dtype == dtype
            assert rel_error(a.data, b.data) <= tolerance, f"{name} step {step + 1}: {where}"
        for index, (a, b) in enumerate(zip(plain.state, fast.state)):
            for key in a:
                assert rel_error(a[key], b[key]) <= tolerance, f"{name} step {step + 1}: state {index} {key}"
    if grad_clip == 0.5:
        assert norms > 0.5                               # the clipping did bind
    assert plain.state_dict().keys() == fast.state_dict().keys()


def test_a_fast_optimizers_state_loads_into_the_plain_one_and_back():
    models, (plain, fast) = _twin_optimizers(AdamW, np.float64)
    for param in models[1].parameters():
        param.grad += 1.0
    fast.step()
    plain.load_state_dict(fast.state_dict())
    fast_again = FastAdamW(parameter_groups(GPT(11, 8, 2, 2, 16, 6, rng=0), 0.1))
    fast_again.load_state_dict(plain.state_dict())
    assert np.array_equal(fast_again.moments["m"], fast.moments["m"]) and fast_again.step_count == 1


def test_a_span_updates_that_part_of_the_buffer_only():
    """step(span=...), a ZeRO-1 rank's update of its shard: the spans of a step, each with the same step count,
    make the whole step bit for bit, across the boundary of the two groups."""
    models, (_, whole) = _twin_optimizers(AdamW, np.float32)
    _, (_, parted) = _twin_optimizers(AdamW, np.float32)
    rng = np.random.default_rng(1)
    boundaries = [0, whole.spans[0][1] - 7, whole.spans[0][1] + 5, whole.data.size]   # one span straddles the groups
    for _ in range(3):
        grads = rng.standard_normal(whole.grad.size).astype(np.float32)
        whole.grad[...] = parted.grad[...] = grads
        whole.clip_gradients(0.5)
        whole.step()
        count = parted.step_count
        for start, stop in zip(boundaries, boundaries[1:]):
            parted.step_count, parted.grad_scale = count, whole_scale(grads, 0.5)
            parted.step(span=(start, stop))
    assert parted.step_count == whole.step_count == 3
    assert np.array_equal(whole.data, parted.data)
    assert all(np.array_equal(whole.moments[key], parted.moments[key]) for key in whole.moments)


def test_an_optimizer_keeping_a_part_of_the_moments_steps_saves_and_loads_as_the_whole():
    """keep_moments(start, stop), a ZeRO-1 rank's memory: two optimizers, each keeping its part's moments, step to
    the whole one's weights and moments bit for bit, holding half the bytes each; the state of such a one saves
    only from gathered whole moments (released once saved), and a whole state loads as its part."""
    _, (_, whole) = _twin_optimizers(AdamW, np.float32)
    size, middle = whole.data.size, whole.spans[0][1] - 7                  # a part's edge inside a group
    parts = [_twin_optimizers(AdamW, np.float32)[1][1] for _ in range(2)]
    for part, (start, stop) in zip(parts, [(0, middle), (middle, size)]):
        part.keep_moments(start, stop)
        assert part.state_nbytes() == 2 * 4 * (stop - start) and part.state is None
    rng = np.random.default_rng(2)
    for _ in range(3):
        grads = rng.standard_normal(size).astype(np.float32)
        whole.grad[...] = grads
        whole.clip_gradients(0.5)
        whole.step()
        for part in parts:
            part.grad[...], part.grad_scale = grads, whole_scale(grads, 0.5)
            part.step()                                                   # its kept span
    for part, (start, stop) in zip(parts, [(0, middle), (middle, size)]):
        assert np.array_equal(part.data[start:stop], whole.data[start:stop])
        assert all(np.array_equal(part.moments[key], whole.moments[key][start:stop]) for key in whole.moments)
    with pytest.raises(ValueError, match=r"span \(0, 5\) is outside the part whose moments are kept"):
        parts[1].step(span=(0, 5))
    with pytest.raises(RuntimeError, match="gather the whole moments first"):
        parts[0].state_dict()
    parts[0].gathered = {key: moment.copy() for key, moment in whole.moments.items()}
    saved, expected = parts[0].state_dict(), whole.state_dict()
    assert parts[0].gathered is None and parts[0].state_nbytes() == 2 * 4 * middle
    assert saved.keys() == expected.keys() and all(np.array_equal(saved[k], expected[k]) for k in expected)
    fresh = _twin_optimizers(AdamW, np.float32)[1][1]
    fresh.keep_moments(middle, size)
    fresh.load_state_dict(expected)
    assert fresh.step_count == 3 and fresh.moments["v"].shape == (size - middle,)
    assert all(np.array_equal(fresh.moments[key], whole.moments[key][middle:]) for key in whole.moments)


def whole_scale(grads, max_norm):
    return clip_factor([grads], max_norm)[1]


def test_replacing_a_flattened_parameter_array_is_an_error():
    param = _param([1.0, 2.0], [0.1, 0.1])
    optimizer = FastAdamW([param], lr=0.1)
    param.data = np.array([5.0, 6.0])
    with pytest.raises(RuntimeError, match="replaced after the optimizer was built"):
        optimizer.step()


def test_a_fast_optimizer_refuses_parameters_of_two_dtypes():
    with pytest.raises(ValueError, match=r"FastAdam expected parameters of one dtype, got \['float32', 'float64'\]"):
        FastAdam([_param([1.0], [0.0]), Parameter(np.ones(2, dtype=np.float32))])


def test_clip_factor_is_what_clipping_multiplies_by():
    grads = [np.array([3.0, 0.0]), np.array([4.0])]                          # norm 5
    assert clip_factor(grads, 1.0) == (5.0, pytest.approx(1.0 / (5.0 + 1e-6)))
    assert clip_factor(grads, 10.0) == (5.0, 1.0)
    with pytest.raises(ValueError, match="max_norm > 0, got 0"):
        clip_factor(grads, 0)


@given(st.floats(0.01, 10.0), st.integers(0, 2**32 - 1))
def test_clipping_caps_the_global_norm_and_keeps_direction(max_norm, seed):
    rng = np.random.default_rng(seed)
    params = [_param(rng.standard_normal(3), rng.standard_normal(3) * 5) for _ in range(3)]
    before = [p.grad.copy() for p in params]
    norm = clip_grad_norm(params, max_norm)
    assert norm == pytest.approx(np.sqrt(sum((g ** 2).sum() for g in before)))
    assert global_grad_norm(params) <= max_norm * (1 + 1e-9)
    if norm <= max_norm:
        assert all(np.array_equal(p.grad, g) for p, g in zip(params, before))
    else:
        scale = params[0].grad[0] / before[0][0]
        for param, grad in zip(params, before):
            np.testing.assert_allclose(param.grad, grad * scale)


def test_optimizers_minimise_a_quadratic():
    for make in (lambda p: SGD(p, lr=0.1, momentum=0.5), lambda p: Adam(p, lr=0.1), lambda p: AdamW(p, lr=0.1)):
        param = _param([3.0, -2.0], [0.0, 0.0])
        optimizer = make([param])
        for _ in range(300):
            param.grad[...] = 2 * param.data              # d/dp ||p||^2
            optimizer.step()
        assert np.abs(param.data).max() < 0.05


def test_state_dict_round_trip_and_mismatch():
    param = _param([1.0, 2.0], [0.3, -0.1])
    optimizer = AdamW([param], lr=0.1)
    optimizer.step()
    state = optimizer.state_dict()
    other = AdamW([_param([1.0, 2.0], [0.0, 0.0])], lr=0.5)
    other.load_state_dict(state)
    assert other.step_count == 1 and other.lr == 0.1
    assert np.array_equal(other.state[0]["m"], optimizer.state[0]["m"])
    wrong = AdamW([_param([1.0, 2.0, 3.0], [0.0, 0.0, 0.0])])
    with pytest.raises(ValueError, match="shape"):
        wrong.load_state_dict(state)
    assert wrong.step_count == 0 and not wrong.state[0]["m"].any()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="momentum"):
        SGD([_param([1.0], [0.0])], lr=0.1, momentum=1.5)
    with pytest.raises(ValueError, match="max_norm"):
        clip_grad_norm([_param([1.0], [0.0])], 0.0)
    with pytest.raises(ValueError, match="empty"):
        Adam([], lr=0.1)


# ---------------------------------------------------------------- the papers' default settings, by hand
def _two_steps_by_hand(param0, grads, lr, beta1, beta2, eps, decay=0.0):
    """Kingma & Ba (2015) Algorithm 1 written out for two steps (and AdamW's p <- p - lr lambda p first)."""
    p, m, v = np.array(param0, dtype=np.float64), 0.0, 0.0
    for t, g in enumerate(grads, start=1):
        p = p - lr * decay * p
        m = beta1 * m + (1 - beta1) * np.array(g)
        v = beta2 * v + (1 - beta2) * np.array(g) ** 2
        p = p - lr * (m / (1 - beta1 ** t)) / (np.sqrt(v / (1 - beta2 ** t)) + eps)
    return p


@pytest.mark.parametrize("make, settings", [
    (lambda params: Adam(params), (1e-3, 0.9, 0.999, 1e-8, 0.0)),            # Kingma & Ba (2015) §2 defaults
    (lambda params: AdamW(params), (1e-3, 0.9, 0.999, 1e-8, 0.01)),          # PyTorch's AdamW defaults
    (lambda params: transformer_adam(params), (1e-3, 0.9, 0.98, 1e-9, 0.0)),  # Vaswani et al. (2017) §5.3
], ids=["Adam", "AdamW", "transformer_adam"])
def test_default_betas_eps_and_decay_are_the_papers(make, settings):
    """Two steps with the defaults against Algorithm 1 by hand. The gradients are chosen so that every setting
    shows: 3e-9 is near eps (1e-8 against 1e-9 changes the step by a third), the second gradient differs from
    the first (beta1, beta2 weigh them), and the weights are far from 0 (the decay moves them)."""
    grads = [[3e-9, 1.0, -2.0], [1e-9, -3.0, 0.5]]
    param = _param([5.0, -4.0, 3.0], grads[0])
    optimizer = make([param])
    optimizer.step()
    param.grad[...] = grads[1]
    optimizer.step()
    np.testing.assert_allclose(param.data, _two_steps_by_hand([5.0, -4.0, 3.0], grads, *settings), rtol=1e-13)
