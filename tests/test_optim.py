"""Optimizers and clipping: each update against its formula, the parameter groups, state round trips."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer import GPT
from minitransformer.core.parameter import Parameter
from minitransformer.training.config import transformer_adam
from minitransformer.training.optim import (
    SGD,
    Adam,
    AdamW,
    clip_factor,
    clip_grad_norm,
    clip_gradients,
    global_grad_norm,
    parameter_groups,
    part_slice,
)


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


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
def test_flat_buffers_give_the_per_parameter_update_bit_for_bit(name):
    make = {"SGD": lambda p, flat: SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, flatten=flat),
            "Adam": lambda p, flat: Adam(p, lr=0.01, weight_decay=0.01, flatten=flat),
            "AdamW": lambda p, flat: AdamW(p, lr=0.01, weight_decay=0.1, flatten=flat)}[name]
    models = [GPT(11, 8, 2, 2, 16, 6, dtype=np.float32, rng=0) for _ in range(2)]
    optimizers = [make(parameter_groups(model, 0.1), flat) for model, flat in zip(models, (True, False))]
    rng = np.random.default_rng(0)
    for _ in range(3):
        grads = [rng.standard_normal(p.shape).astype(np.float32) for p in models[0].parameters()]
        for model, optimizer in zip(models, optimizers):
            optimizer.zero_grad()
            for param, grad in zip(model.parameters(), grads):
                param.grad += grad
            optimizer.step()
    for (name_a, a), (_, b) in zip(models[0].named_parameters(), models[1].named_parameters()):
        assert np.array_equal(a.data, b.data), name_a
    assert optimizers[0].state_dict().keys() == optimizers[1].state_dict().keys()


def test_replacing_a_flattened_parameter_array_is_an_error():
    param = _param([1.0, 2.0], [0.1, 0.1])
    optimizer = AdamW([param], lr=0.1)
    param.data = np.array([5.0, 6.0])
    with pytest.raises(RuntimeError, match="replaced after the optimizer was built"):
        optimizer.step()


def test_moved_buffers_keep_values_views_and_updates():
    """move_buffers (used by DataParallel to share the weights) changes where the buffers live, nothing else."""
    rng = np.random.default_rng(0)
    pairs = [[_param(values, grad) for values, grad in zip(rng.standard_normal((3, 4)), rng.standard_normal((3, 4)))]
             for _ in range(2)]
    pairs[1] = [_param(p.data, p.grad) for p in pairs[0]]
    moved, kept = AdamW(pairs[0], lr=0.1, weight_decay=0.1), AdamW(pairs[1], lr=0.1, weight_decay=0.1)
    made = []
    moved.move_buffers(lambda size, dtype: made.append(np.full(size, np.nan, dtype)) or made[-1])
    assert moved.groups[0]["data"] is made[0] and moved.groups[0]["grad"] is made[1]
    assert moved.groups[0]["state"]["m"] is made[2] and moved.groups[0]["state"]["v"] is made[3]
    assert all(p.data.base is made[0] and p.grad.base is made[1] for p in pairs[0])
    assert all(state["m"].base is made[2] and state["v"].base is made[3] for state in moved.state)  # checkpoints
    for _ in range(3):
        moved.step()
        kept.step()
    assert all(np.array_equal(a.data, b.data) for a, b in zip(*pairs))


def test_move_buffers_and_bind_refuse_what_they_cannot_do():
    from minitransformer.training.optim.optimizer import bind_to_buffers

    param = _param([1.0, 2.0], [0.1, 0.1])
    with pytest.raises(ValueError, match="every group must be flat"):
        AdamW([param], lr=0.1, flatten=False).move_buffers(np.empty)
    with pytest.raises(ValueError, match=r"expected flat buffers of 2 elements, got \(3,\) and \(2,\)"):
        bind_to_buffers([param], np.zeros(3), np.zeros(2))
    optimizer = AdamW([param], lr=0.1)
    with pytest.raises(ValueError, match="expected 1 groups of buffers, got 2"):
        optimizer.bind_buffers(optimizer.buffers() * 2)
    with pytest.raises(ValueError, match=r"expected buffers \['data', 'grad', 'm', 'v'\], got \['data', 'grad'\]"):
        optimizer.bind_buffers([{"data": np.zeros(2), "grad": np.zeros(2)}])
    with pytest.raises(ValueError, match=r"expected a flat 'v' buffer of 2 elements, got shape \(3,\)"):
        optimizer.bind_buffers([{**optimizer.buffers()[0], "v": np.zeros(3)}])
    flat = _param([1.0, 1.0], [0.5, 0.5])
    mixed = [_param([1.0], [0.5]), Parameter(np.ones(1, np.float32))]           # two dtypes: not flat
    mixed[1].grad[...] = 0.5
    optimizer = AdamW([{"params": [flat]}, {"params": mixed}], lr=0.1)
    with pytest.raises(ValueError, match=r"AdamW.step\(part=...\): every group must be flat"):
        optimizer.step(part=(0, 2))
    assert np.array_equal(flat.data, [1.0, 1.0]) and optimizer.step_count == 0     # refused before any update


def _gpt_and_optimizer_maker(name, dtype=np.float64):
    model = GPT(11, 8, 2, 2, 16, 6, dtype=dtype, rng=0)
    make = {"SGD": lambda g, flat: SGD(g, lr=0.1, momentum=0.9, weight_decay=0.01, flatten=flat),
            "Adam": lambda g, flat: Adam(g, lr=0.01, weight_decay=0.01, flatten=flat),
            "AdamW": lambda g, flat: AdamW(g, lr=0.01, weight_decay=0.1, flatten=flat)}[name]
    return model, make


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW"])
@pytest.mark.parametrize("flat", [True, False])
def test_a_grad_scale_equals_scaling_the_gradients_first(name, flat):
    """step(grad_scale=s), how the trainer clips, against multiplying every .grad by s and stepping."""
    pairs = [_gpt_and_optimizer_maker(name) for _ in range(2)]
    optimizers = [make(parameter_groups(model, 0.1), flat) for model, make in pairs]
    rng = np.random.default_rng(0)
    for scale in (0.3, 1.0, 2.5):
        grads = [rng.standard_normal(p.shape) for p in pairs[0][0].parameters()]
        for (model, _), optimizer in zip(pairs, optimizers):
            optimizer.zero_grad()
            for param, grad in zip(model.parameters(), grads):
                param.grad += grad
        for grad in optimizers[1].gradients():
            grad *= scale
        optimizers[0].step(grad_scale=scale)
        optimizers[1].step()
    for (name_a, a), (_, b) in zip(pairs[0][0].named_parameters(), pairs[1][0].named_parameters()):
        np.testing.assert_allclose(a.data, b.data, rtol=1e-13, atol=1e-15, err_msg=name_a)


@pytest.mark.parametrize("n_parts", [2, 3])
@pytest.mark.parametrize("name", ["SGD", "AdamW"])
def test_the_parts_of_a_step_make_the_whole_step_bit_for_bit(name, n_parts):
    """Optimizer.step(part=(k, n)) for k = 0 .. n-1, each with the same step count, is one step(): what
    DataParallel's processes do, each on its slice, in float32 as the benchmark trains."""
    pairs = [_gpt_and_optimizer_maker(name, np.float32) for _ in range(2)]
    whole, parted = (make(parameter_groups(model, 0.1), True) for model, make in pairs)
    rng = np.random.default_rng(1)
    for _ in range(3):
        grads = [rng.standard_normal(p.shape).astype(np.float32) for p in pairs[0][0].parameters()]
        for (model, _), optimizer in zip(pairs, (whole, parted)):
            optimizer.zero_grad()
            for param, grad in zip(model.parameters(), grads):
                param.grad += grad
        whole.step(grad_scale=0.5)
        count = parted.step_count
        for k in range(n_parts):
            parted.step_count = count
            parted.step(grad_scale=0.5, part=(k, n_parts))
    assert parted.step_count == whole.step_count == 3
    for a, b in zip(whole.buffers(), parted.buffers()):
        for name_ in a:
            assert np.array_equal(a[name_], b[name_]), name_


def test_two_optimizers_bound_to_one_set_of_buffers_share_the_update():
    """bind_buffers, as a DataParallel worker uses it: its parameters and state become views of another
    optimizer's buffers, with a gradient buffer of its own; each updating one part gives the whole step."""
    models = [GPT(11, 8, 2, 2, 16, 6, rng=0) for _ in range(3)]
    main, worker, alone = (AdamW(parameter_groups(model, 0.1), lr=0.01, weight_decay=0.1) for model in models)
    own_grads = [np.zeros_like(group["grad"]) for group in main.buffers()]
    worker.bind_buffers([{**group, "grad": grad} for group, grad in zip(main.buffers(), own_grads)])
    assert all(np.shares_memory(a.data, b.data) for a, b in zip(models[0].parameters(), models[1].parameters()))
    rng = np.random.default_rng(2)
    for _ in range(2):
        for model in models:
            model.zero_grad()
        for params in zip(*(model.parameters() for model in models)):
            grad = rng.standard_normal(params[0].shape)
            for param in params:
                param.grad += grad
        main.step(part=(0, 2))
        worker.step(part=(1, 2))
        alone.step()
    for (name, a), (_, b) in zip(models[0].named_parameters(), models[2].named_parameters()):
        assert np.array_equal(a.data, b.data), name
    assert all(np.array_equal(a[key], b[key]) for a, b in zip(main.state, alone.state) for key in a)


def test_part_slices_cover_the_buffer_once_in_order():
    for size in range(12):
        for n in range(1, 5):
            covered = [i for k in range(n) for i in range(size)[part_slice(size, (k, n))]]
            assert covered == list(range(size)), (size, n)
    assert part_slice(7, None) == slice(0, 7)
    with pytest.raises(ValueError, match=r"0 <= k < n, got \(2, 2\)"):
        part_slice(7, (2, 2))


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


@pytest.mark.parametrize("flat", [True, False])
def test_clipping_the_optimizers_gradient_buffers_equals_clipping_each_parameter(flat):
    models = [GPT(11, 8, 2, 2, 16, 6, rng=0) for _ in range(2)]
    optimizer = AdamW(parameter_groups(models[0], 0.1), flatten=flat)
    rng = np.random.default_rng(1)
    for param, twin in zip(models[0].parameters(), models[1].parameters()):
        param.grad += rng.standard_normal(param.shape)
        twin.grad += param.grad
    assert len(optimizer.gradients()) == (2 if flat else len(optimizer.parameters()))
    norm = clip_gradients(optimizer.gradients(), 0.5)
    assert norm == pytest.approx(clip_grad_norm(models[1].parameters(), 0.5), rel=1e-12) and norm > 0.5
    for param, twin in zip(models[0].parameters(), models[1].parameters()):
        np.testing.assert_allclose(param.grad, twin.grad, rtol=1e-12)


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
