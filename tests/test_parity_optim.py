"""The optimizers against `torch.optim`, and the learning-rate schedules against their formulas.

Adam and AdamW take ten steps on the same parameters with the same gradients
(a new random gradient each step) in the project and in PyTorch, in float64;
after every step the parameters must agree to 1e-10 relative. Two parameter
groups (decayed and not) and a learning rate that changes every step, as the
trainer sets it from a schedule, are part of the comparison.

Skipped when PyTorch or `minitransformer.training.optim` is missing.
"""

import math

import numpy as np
import pytest

from minitransformer import Parameter, rel_error

TOLERANCE = 1e-10
STEPS = 10

torch = pytest.importorskip("torch")
optim = pytest.importorskip("minitransformer.training.optim", reason="minitransformer.training.optim (Adam, AdamW) is not there yet")

SHAPES = [(4, 3), (5,), (2, 3, 2)]


def _run_both(ours_class, torch_class, lr_at, weight_decay, rng):
    """Ten steps of both optimizers; yields (step, our params, torch params) after each step."""
    initial = [rng.standard_normal(shape) for shape in SHAPES]
    ours = [Parameter(value.copy()) for value in initial]
    theirs = [torch.nn.Parameter(torch.from_numpy(value.copy())) for value in initial]
    settings = dict(lr=lr_at(0), betas=(0.9, 0.95), eps=1e-8)
    # first two tensors decayed, the vector (a bias, say) not: the usual two groups
    our_optimizer = ours_class([{"params": ours[:1] + ours[2:], "weight_decay": weight_decay},
                                {"params": ours[1:2], "weight_decay": 0.0}], **settings)
    torch_optimizer = torch_class([{"params": theirs[:1] + theirs[2:], "weight_decay": weight_decay},
                                   {"params": theirs[1:2], "weight_decay": 0.0}], **settings)
    for step in range(STEPS):
        our_optimizer.lr = lr_at(step)
        for group in torch_optimizer.param_groups:
            group["lr"] = lr_at(step)
        for mine, torchs in zip(ours, theirs):
            gradient = rng.standard_normal(mine.shape) * 10.0 ** rng.integers(-3, 2)   # mixed scales
            mine.grad[...] = gradient
            torchs.grad = torch.from_numpy(gradient.copy())
        our_optimizer.step()
        torch_optimizer.step()
        yield step, ours, theirs


@pytest.mark.parametrize("name", ["Adam", "AdamW"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("varying_lr", [False, True], ids=["constant-lr", "lr-per-step"])
def test_ten_steps_equal_torch_optim(name, weight_decay, varying_lr):
    def lr_at(step):
        return 3e-2 * (0.5 + 0.5 * math.cos(math.pi * step / STEPS)) if varying_lr else 1e-2

    steps = _run_both(getattr(optim, name), getattr(torch.optim, name), lr_at, weight_decay, np.random.default_rng(0))
    for step, ours, theirs in steps:
        for index, (mine, torchs) in enumerate(zip(ours, theirs)):
            error = rel_error(mine.data, torchs.detach().numpy())
            assert error <= TOLERANCE, f"{name} step {step + 1}, parameter {index}: rel_error {error:.2e}"


def test_adam_l2_and_adamw_decay_are_different_rules():
    """The comparison above can tell coupled from decoupled decay: after ten steps they differ."""
    def finals(our_class):
        *_, (_, ours, _) = _run_both(our_class, torch.optim.Adam, lambda step: 1e-2, 0.1, np.random.default_rng(1))
        return [param.data.copy() for param in ours]
    assert max(rel_error(a, b) for a, b in zip(finals(optim.Adam), finals(optim.AdamW))) > 1e-6


# ---------------------------------------------------------------- schedules against their formulas
def test_noam_schedule_is_the_papers_formula():
    schedules = pytest.importorskip("minitransformer.training.schedules")
    d_model, warmup = 512, 4000
    for step in [1, 2, 100, 3999, 4000, 4001, 10_000, 100_000]:
        expected = d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)     # Vaswani et al. 2017, eq. 3
        assert schedules.noam_rate(step, d_model, warmup) == pytest.approx(expected, rel=1e-12)
    peak = schedules.noam_rate(warmup, d_model, warmup)
    assert peak == pytest.approx((d_model * warmup) ** -0.5, rel=1e-12)
    assert schedules.noam_rate(warmup // 2, d_model, warmup) == pytest.approx(peak / 2, rel=1e-12)   # linear warmup


def test_cosine_schedule_after_warmup_equals_torchs_cosine_annealing():
    schedules = pytest.importorskip("minitransformer.training.schedules")
    max_lr, min_lr, warmup, decay_steps = 6e-4, 6e-5, 10, 60
    for step in range(warmup):
        assert schedules.cosine_rate(step, max_lr, min_lr, warmup, decay_steps) == pytest.approx(
            max_lr * (step + 1) / (warmup + 1), rel=1e-12)
    parameter = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    sgd = torch.optim.SGD([parameter], lr=max_lr)
    annealing = torch.optim.lr_scheduler.CosineAnnealingLR(sgd, T_max=decay_steps - warmup, eta_min=min_lr)
    for step in range(warmup, decay_steps + 1):
        ours = schedules.cosine_rate(step, max_lr, min_lr, warmup, decay_steps)
        assert abs(ours - sgd.param_groups[0]["lr"]) <= TOLERANCE * max_lr, f"step {step}"
        sgd.step()
        annealing.step()
    assert schedules.cosine_rate(decay_steps + 5, max_lr, min_lr, warmup, decay_steps) == min_lr
