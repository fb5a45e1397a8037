# %% [markdown]
# # 12. Learning-rate schedules: the notes' warm-up rule, its tail, and the cosine
#
# **Source.** Jonathan May, "Transformer Language Models", lecture notes 2025, §1.6 "Model optimization
# tips": Adam "plus a fancy learning rate on top of that. Warmup phase then decay to 0", with the rule of
# Vaswani et al. (2017, §5.3, eq. 3):
#
# $$\mathrm{rate}(s) = d_\mathrm{model}^{-0.5} \cdot \min\left(s^{-0.5},\; s \cdot w^{-1.5}\right)$$
#
# at step $s$ with $w$ warm-up steps. The two arguments of the min are equal at $s = w$. Before it the second is
# smaller: the rate rises **linearly**. After it the first is smaller: the rate falls as $1/\sqrt{s}$, which
# approaches 0 but never
# reaches it, and slowly: to lose another factor of 10 the run must be 100 times longer. "Decays to 0" is
# what the cosine schedule (Loshchilov & Hutter 2017, the package's training default) does, to a floor it
# is given, at a step it is given. Everything here calls `minitransformer.training.schedules`.
#
# **Exercise** (2 points): the rule itself, first. Its cells carry nbgrader's metadata: in a student copy
# (`python -m minitransformer exercises make --only warmup_rule --notebooks`, or an nbgrader release) the answer
# is blank and a locked check cell, with hidden tests of the numbers, grades it.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import cosine_rate, noam_rate
from minitransformer.training.schedules import linear_rate, scaled_noam_rate

# %% [markdown]
# ## The notes' rule with the paper's numbers ($d_\mathrm{model} = 512$, $w = 4000$)
#
# **Exercise** (2 points). Write `warmup_rule(step, d_model, warmup)`, the rate above for one step $s \ge 1$.
# Then answer from the formula: at which step does the rate fall to a hundredth of its peak? Set
# `hundredth_step` for $w = 4000$ (the peak is at $s = w$; after it the rate is $d_\mathrm{model}^{-0.5}\,s^{-0.5}$).
# The check tests the peak; its hidden tests compare the rule with the package's `noam_rate` at many steps and
# sizes, and check your step.

# %% [solution] warmup_rule_by_hand
def warmup_rule(step, d_model, warmup):
    """The notes' learning rate at `step` (>= 1): a float."""
    ### BEGIN SOLUTION
    return d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)
    ### END SOLUTION


### BEGIN SOLUTION
hundredth_step = 10_000 * 4000           # sqrt(w / s) = 1/100: s = 10^4 w
### END SOLUTION

# %% [check 2] check_warmup_rule_by_hand
assert np.isclose(warmup_rule(4000, 512, 4000), 512 ** -0.5 * 4000 ** -0.5), "the peak, at step = warmup"
assert warmup_rule(1000, 512, 4000) < warmup_rule(4000, 512, 4000) > warmup_rule(9000, 512, 4000)
### BEGIN HIDDEN TESTS
for d, w in ((512, 4000), (64, 100), (1024, 1)):
    for s in (1, 2, w // 2 + 1, w, w + 1, 3 * w, 10 ** 7):
        assert np.isclose(warmup_rule(s, d, w), noam_rate(s, d, w), rtol=1e-12, atol=0), (s, d, w)
assert np.isclose(noam_rate(hundredth_step, 512, 4000), noam_rate(4000, 512, 4000) / 100, rtol=1e-9)
### END HIDDEN TESTS

# %% [markdown]
# The package's `noam_rate` over ten million steps, on a log scale:

# %%
d_model, warmup = 512, 4000
steps = np.unique(np.geomspace(1, 10_000_000, 400).astype(int))
rates = np.array([noam_rate(int(step), d_model, warmup) for step in steps])
peak = noam_rate(warmup, d_model, warmup)
print(f"peak at step {warmup}: {peak:.3e} (= 512^-0.5 * 4000^-0.5 = {512 ** -0.5 * 4000 ** -0.5:.3e})")
for step in (100_000, 1_000_000, 10_000_000):
    print(f"step {step:>10,}: rate {noam_rate(step, d_model, warmup):.2e} = {noam_rate(step, d_model, warmup) / peak:.3f} of the peak")

assert np.isclose(peak, d_model ** -0.5 * warmup ** -0.5) and rates.max() <= peak
assert steps[np.argmax(rates)] <= warmup <= steps[np.argmax(rates) + 1]     # the maximum is at the warm-up's end
warming, decaying = steps < warmup, steps > warmup
assert np.allclose(rates[warming], d_model ** -0.5 * steps[warming] * warmup ** -1.5)     # linear rise
assert np.allclose(rates[decaying], d_model ** -0.5 * steps[decaying] ** -0.5)           # 1/sqrt(step) tail
assert np.all(rates > 0)                                                                  # never 0
assert np.isclose(noam_rate(100_000, d_model, warmup) / peak, 0.2)      # still a fifth of the peak at 100k steps
# to fall to 1% of the peak, sqrt(warmup / step) = 0.01: step = 10^4 warmup = 40 million steps
assert np.isclose(noam_rate(40_000_000, d_model, warmup) / peak, 0.01)
assert all(np.isclose(warmup_rule(int(step), d_model, warmup), rate) for step, rate in zip(steps, rates))

rise_slope = np.polyfit(np.log(steps[warming]), np.log(rates[warming]), 1)[0]
tail_slope = np.polyfit(np.log(steps[decaying]), np.log(rates[decaying]), 1)[0]
print(f"fitted log-log slopes: warm-up {rise_slope:.3f}, tail {tail_slope:.3f}")
assert np.isclose(rise_slope, 1) and np.isclose(tail_slope, -0.5)

# %% [markdown]
# ## Against the cosine, and the linear decay used by the package's encoder–decoder demonstrations
# A run of 20,000 steps with 500 steps of warm-up, all three scaled to the same peak $10^{-3}$. The cosine
# reaches its floor (here 0, the notes' "decays to 0") exactly at the step it is told; the linear schedule
# ends at a tenth of its peak; the notes' rule (`scaled_noam_rate`, the same shape with the peak moved)
# still has 16% of its peak at the end, and a longer run would only lower that as $1/\sqrt{s}$.

# %%
total, warm, max_lr = 20_000, 500, 1e-3
run = np.arange(total + 1)
schedules = {
    "notes' rule, 1/√step tail (scaled_noam_rate)": [scaled_noam_rate(s, max_lr, warm, d_model) for s in run],
    "cosine to 0 (cosine_rate)": [cosine_rate(s, max_lr, 0.0, warm, total) for s in run],
    "linear to a tenth (linear_rate)": [linear_rate(s, max_lr, warm, total) for s in run],
}
schedules = {name: np.array(values) for name, values in schedules.items()}
for name, values in schedules.items():
    print(f"{name:46s} peak {values.max():.1e} at step {values.argmax():4d}, last {values[-1]:.2e}")

noam_curve, cosine_curve, linear_curve = schedules.values()
assert np.isclose(noam_curve.max(), max_lr) and np.isclose(cosine_curve.max(), max_lr)
assert cosine_curve[-1] == 0.0                                          # the cosine does decay to 0
assert np.isclose(cosine_curve[warm + (total - warm) // 2], max_lr / 2)  # half way down at half the decay
assert np.isclose(linear_curve[-1], max_lr / 10)
assert np.isclose(noam_curve[-1] / max_lr, np.sqrt(warm / (total + 1)))  # the tail: sqrt(warmup / step)
assert noam_curve[-1] > 0.15 * max_lr

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4), layout="constrained")
axes[0].loglog(steps, rates, label="d_model^-0.5 · min(step^-0.5, step · warmup^-1.5)")
axes[0].loglog(steps[decaying], d_model ** -0.5 * steps[decaying] ** -0.5, "k:", lw=1,
               label=f"tail d_model^-0.5 · step^-0.5 (fitted slope {tail_slope:.2f})")
axes[0].axvline(warmup, color="0.6", ls="--", lw=1, label=f"end of warm-up, step {warmup}")
axes[0].set_xlabel("step"); axes[0].set_ylabel("learning rate")
axes[0].set_title("the notes' rule (d_model 512, warmup 4000): no zero in sight"); axes[0].legend(fontsize=8)
for name, values in schedules.items():
    axes[1].plot(run, values, label=name)
axes[1].set_xlabel("step"); axes[1].set_ylabel("learning rate"); axes[1].set_ylim(0, 1.05 * max_lr)
axes[1].set_title(f"three schedules over a {total:,}-step run, warm-up {warm}"); axes[1].legend(fontsize=8)
plt.show()
