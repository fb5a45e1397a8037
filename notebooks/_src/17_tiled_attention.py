# %% [markdown]
# # 17. Tiled attention: the same output, memory linear in the length
#
# **Sources.** Milakov & Gimelshein, *Online normalizer calculation for softmax* (2018, arXiv
# 1805.02867); Dao, *FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning*
# (2023, arXiv 2307.08691), Algorithm 1 (forward) and Algorithm 2 (backward), after Dao et al.,
# *FlashAttention* (2022, arXiv 2205.14135). The attention itself is the lecture notes' §1.1
# (Jonathan May, *Transformer Language Models*, 2025).
#
# Plain attention builds the $(T, T)$ matrix of weights $\operatorname{softmax}(s \, q k^\top)$ ($s$ the scale)
# and keeps it for the backward pass, so its memory grows with $T^2$. The softmax needs a whole row (its maximum and its
# sum) before it can give a single weight, which seems to force the whole row to exist at once.
#
# Claims checked here:
# 1. a softmax row can be computed from blocks of keys that arrive one at a time, keeping only a
#    running maximum $m$, a running sum $\ell$ and a running output $o$ (the *online softmax*; an exercise,
#    2 points: in a student copy, `exercises make --only online_softmax --notebooks`, or an nbgrader release,
#    its answer is blank and a locked check cell, with hidden tests of the numbers, grades it);
# 2. `TiledAttention` built on it gives plain attention's output and gradients, its backward
#    recomputing each tile's weights from one saved number per row, the log-sum-exp;
# 3. its memory grows linearly with $T$, plain attention's quadratically (measured, not estimated).
#
# The derivation is in the docstring of `minitransformer/variants/tiled_attention.py`, with a table
# that maps each of its lines to the paper's algorithms; every number below is computed by the package.

# %%
import tracemalloc

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import ScaledDotProductAttention, TiledAttention
from minitransformer.fast import kernels_of, use_kernels
from minitransformer.variants.tiled_attention import online_softmax_result, online_softmax_step

# %% [markdown]
# ## One query row, three blocks of keys
#
# Twelve keys, scored against one query, arrive in blocks of four. A block brings scores $s_j$ and value rows
# $v_j$; the running state $(m, \ell, o)$ becomes
#
# $$m' = \max\big(m, \max_j s_j\big), \qquad \ell' = \ell\, e^{m - m'} + \sum_j e^{s_j - m'}, \qquad
# o' = o\, e^{m - m'} + \sum_j e^{s_j - m'} v_j .$$
#
# The factor $e^{m - m'}$ re-bases the old sum and output from the old maximum to the new one. Starting from
# $m = -\infty$, $\ell = 0$, $o = 0$, after every block $\ell\, e^{m}$ is the plain sum $\sum_j e^{s_j}$ over
# the keys seen so far and $o / \ell$ is the softmax-weighted average of their values.
#
# **Exercise** (2 points). Write `online_step(m, total, o, s, v)` for one query row: `m` and `total` ($\ell$) floats, `o` of
# shape $(d_v,)$, a block of scores `s` $(b,)$ and its values `v` $(b, d_v)$; return the new `(m, total, o)`. The
# check streams a row through it; its hidden tests compare it with the package's `online_softmax_step` and
# feed it scores whose exponentials would overflow.

# %% [solution] online_softmax_step_by_hand
def online_step(m, total, o, s, v):
    """One block of the online softmax for one row: m, total (the lecture's l) floats, o (dv,), s (b,), v (b, dv)
    -> (m', total', o')."""
    ### BEGIN SOLUTION
    new_m = max(m, np.max(s))
    rebase = np.exp(m - new_m)                  # 0 on the first block, where m = -inf
    weights = np.exp(s - new_m)                 # (b,), each at most 1
    return new_m, total * rebase + weights.sum(), o * rebase + weights @ v
    ### END SOLUTION

# %% [check 2] check_online_softmax_step_by_hand
s_check, v_check = np.array([0.5, -1.0, 2.0, 0.0, 3.0, 1.0]), np.arange(12.0).reshape(6, 2)
state = (-np.inf, 0.0, np.zeros(2))
for start in (0, 2, 4):
    state = online_step(*state, s_check[start:start + 2], v_check[start:start + 2])
p_check = np.exp(s_check) / np.exp(s_check).sum()
assert np.isclose(state[0], 3.0), "m is the largest score seen"
assert np.allclose(state[2] / state[1], p_check @ v_check), "o / l should be softmax(s) @ v"
### BEGIN HIDDEN TESTS
hidden = np.random.default_rng(5)
for block in (1, 3, 7):
    s_h, v_h = hidden.standard_normal(21) * 3, hidden.standard_normal((21, 4))
    mine, theirs = (-np.inf, 0.0, np.zeros(4)), (np.array([[-np.inf]]), np.zeros((1, 1)), np.zeros((1, 4)))
    for start in range(0, 21, block):
        mine = online_step(*mine, s_h[start:start + block], v_h[start:start + block])
        theirs = online_softmax_step(*theirs, s_h[None, start:start + block], v_h[start:start + block])
        assert np.isclose(mine[0], theirs[0][0, 0]) and np.isclose(mine[1], theirs[1][0, 0], rtol=1e-12)
        assert np.allclose(mine[2], theirs[2][0], rtol=1e-12, atol=1e-12), (block, start)
big = online_step(*online_step(-np.inf, 0.0, np.zeros(2), np.array([1000.0, 999.0]), np.eye(2)),
                  np.array([1001.0]), np.ones((1, 2)))
assert np.isfinite(big[1]) and np.all(np.isfinite(big[2])) and np.isclose(big[0], 1001.0)
assert np.allclose(big[2] / big[1], np.array([np.exp(-1) + np.exp(0), np.exp(-2) + np.exp(0)]) /
                   (np.exp(-1) + np.exp(-2) + 1))
### END HIDDEN TESTS

# %% [markdown]
# The package's `online_softmax_step` does the same for a block of query rows at once (`m`, `l` of shape
# $(\text{rows}, 1)$). Streaming the twelve keys through it, the check after each block is
# $\ell\, e^{m} = \sum_j e^{s_j}$ over the keys seen so far, and your `online_step` gives the same $o / \ell$.

# %%
rng = np.random.default_rng(14)                     # a row whose maximum rises in every block
scores = np.round(rng.standard_normal(12) * 2, 2)       # one query's 12 scores
values = np.round(rng.standard_normal((12, 2)), 2)      # each key's value, dv = 2
BLOCK = 4

row_max, row_sum, acc = np.array([[-np.inf]]), np.zeros((1, 1)), np.zeros((1, 2))
mine = (-np.inf, 0.0, np.zeros(2))                      # the same state for your online_step
history = []
print(" keys    block max    m        l        o / l (the output so far)")
for start in range(0, 12, BLOCK):
    block = slice(start, start + BLOCK)
    rescale_from = row_max[0, 0]
    row_max, row_sum, acc = online_softmax_step(row_max, row_sum, acc, scores[None, block], values[block])
    mine = online_step(*mine, scores[block], values[block])
    assert np.allclose(mine[2] / mine[1], acc[0] / row_sum[0, 0])
    seen = scores[:start + BLOCK]
    assert np.isclose(row_sum[0, 0] * np.exp(row_max[0, 0]), np.exp(seen).sum(), rtol=1e-12)
    history.append((start + BLOCK, row_max[0, 0], row_sum[0, 0]))
    print(f"{start:2d}-{start + BLOCK - 1:<2d}   {scores[block].max():8.2f}  {row_max[0, 0]:6.2f}  {row_sum[0, 0]:7.4f}  "
          f"{np.array2string(acc[0] / row_sum[0, 0], precision=4)}   (old sums x exp({rescale_from:.2f} - {row_max[0, 0]:.2f}))")

out, lse = online_softmax_result(row_max, row_sum, acc)
weights = np.exp(scores - scores.max()) / np.exp(scores - scores.max()).sum()    # the softmax, by hand
assert np.allclose(out[0], weights @ values, rtol=1e-13) and np.isclose(lse[0, 0], np.log(np.exp(scores).sum()))
print(f"\nfinal output {out[0]}, softmax(s) v by hand {weights @ values}")
print(f"log-sum-exp saved for backward: {lse[0, 0]:.4f}; exp(s - lse) gives the weights back: "
      f"{np.allclose(np.exp(scores - lse[0, 0]), weights)}")

# %% [markdown]
# The partial outputs $o / \ell$ after the first blocks are not the final answer: they are the softmax
# over the keys seen so far. Each new block shifts them, and when a block brings a larger score
# (the maximum rises), the old sums are scaled down by $e^{m - m'} < 1$ before the new terms are
# added. Nothing overflows: every exponent is a score minus a maximum, at most 0.

# %%
fig, ax = plt.subplots(figsize=(7, 3.2))
colors = ["tab:blue", "tab:orange", "tab:green"]
for index, start in enumerate(range(0, 12, BLOCK)):
    keys = np.arange(start, start + BLOCK)
    ax.bar(keys, scores[keys], color=colors[index], label=f"block {index + 1} (keys {start}-{start + BLOCK - 1})")
for index, (end, running_max, _) in enumerate(history):
    ax.hlines(running_max, end - BLOCK - 0.45, end - 0.55, color="black", linewidth=2,
              label="running maximum m after the block" if index == 0 else None)
ax.set_xlabel("key j")
ax.set_ylabel("score s_j")
ax.set_ylim(scores.min() - 0.5, scores.max() + 3)
ax.set_title("One query row, keys in blocks of 4: m rises when a block holds a larger score", fontsize=10)
ax.legend(fontsize=8, loc="upper left", ncol=2)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## The whole layer equals plain attention
#
# `TiledAttention` runs this update for a block of queries against each block of keys (a tile), and
# saves per row only the output and the log-sum-exp (Algorithm 1). With causal attention the tiles wholly
# above the diagonal are skipped. Here $T = 50$ in blocks of 16 (the last block is 2 long), causal.

# %% [markdown] derives=tiled_attention
# Its backward pass (Algorithm 2) takes one block of keys at a time against the blocks of queries that see it,
# recomputes each tile's weights as $e^{s - \mathrm{lse}}$, and needs one more number per row,
# $D = \sum \mathrm{dout} \cdot \mathrm{out}$ (the softmax backward's row sum, rewritten with the saved output).

# %%
q, k, v, dout = np.random.default_rng(1).standard_normal((4, 2, 3, 50, 8))
plain, tiled = ScaledDotProductAttention(causal=True), TiledAttention(causal=True, block_size=16)
worst = {}
for name, a, b in [("out", plain(q, k, v), tiled(q, k, v))] + list(zip(("dq", "dk", "dv"), plain.backward(dout), tiled.backward(dout))):
    worst[name] = np.abs(a - b).max() / np.abs(a).max()
print({name: f"{value:.1e}" for name, value in worst.items()})
assert max(worst.values()) < 1e-13
print("tiled keeps", {name: getattr(tiled, name).shape for name in ("lse", "out")},
      "; plain keeps alpha", plain.alpha.shape)

# %% [markdown]
# ## Memory against length
#
# The peak of NumPy's allocations during one forward and backward pass (Python's `tracemalloc`
# sees every NumPy array), for one sequence with 2 heads of size 16, float64. Plain attention holds
# $(T, T)$ arrays; `TiledAttention` (blocks of 128) holds q, k, v, the output, their gradients and a few
# tiles. The fast tier's attention (what `GPT(kernels="fast")` runs) switches to tiling itself from
# a threshold on (`tiled_from`, printed in the legend), and to wider tiles from a second one
# (`wide_tiles_from`: fewer, larger tiles are faster on long sequences). This cell builds the fast tier on
# purpose, to measure what training runs; every other cell here, like the other notebooks but 16, uses the plain
# layers.

# %%
def peak_bytes(layer, T):
    """Peak bytes allocated during one forward and backward at length T (B = 1, H = 2, hs = 16)."""
    q, k, v, dout = np.random.default_rng(0).standard_normal((4, 1, 2, T, 16))
    tracemalloc.start()
    layer(q, k, v)
    layer.backward(dout)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


lengths = [64, 128, 256, 512, 1024, 2048]
fast_layer = use_kernels(ScaledDotProductAttention(causal=True), "fast")
tiled_from = getattr(fast_layer, "tiled_from", None)                   # None: a copy without the fast form
wide_from = getattr(fast_layer, "wide_tiles_from", None)
FAST = f"fast tier (tiles from T = {tiled_from}, wider from {wide_from})"
makers = {"plain ScaledDotProductAttention": lambda: ScaledDotProductAttention(causal=True),
          "TiledAttention (blocks of 128)": lambda: TiledAttention(causal=True, block_size=128),
          FAST: lambda: use_kernels(ScaledDotProductAttention(causal=True), "fast")}
peaks = {name: [peak_bytes(make(), T) for T in lengths] for name, make in makers.items()}
print("T     " + "".join(f"{name[:30]:>33}" for name in peaks))
for index, T in enumerate(lengths):
    print(f"{T:<6d}" + "".join(f"{peaks[name][index] / 2**20:30.2f} MB" for name in peaks))
plain_growth = peaks["plain ScaledDotProductAttention"][-1] / peaks["plain ScaledDotProductAttention"][-2]
tiled_growth = peaks["TiledAttention (blocks of 128)"][-1] / peaks["TiledAttention (blocks of 128)"][-2]
fast_growth = peaks[FAST][-1] / peaks[FAST][-2]
print(f"from T = 1024 to 2048: plain x{plain_growth:.2f}, tiled x{tiled_growth:.2f}, fast tier x{fast_growth:.2f}")
assert plain_growth > 3.5 and tiled_growth < 2.3
assert fast_growth < 2.3 or kernels_of(makers[FAST]()) == "plain"   # a copy without it

# %%
fig, ax = plt.subplots(figsize=(6.5, 4))
for name, marker in zip(peaks, "osd"):
    ax.loglog(lengths, np.array(peaks[name]) / 2**20, marker=marker, label=name)
reference = np.array(lengths, dtype=float) / lengths[-1]           # slopes 2 and 1 through the last points
ax.loglog(lengths, peaks["plain ScaledDotProductAttention"][-1] / 2**20 * reference ** 2, ":", color="gray", label="∝ T²")
ax.loglog(lengths, peaks["TiledAttention (blocks of 128)"][-1] / 2**20 * reference, "--", color="gray", label="∝ T")
ax.set_xlabel("sequence length T")
ax.set_ylabel("peak NumPy memory, forward + backward (MB)")
ax.set_title("Attention memory against length (B = 1, H = 2, hs = 16, float64)")
ax.legend(fontsize=8)
plt.tight_layout()
plt.show()

# %% [markdown]
# The plain layer's line has slope 2 on these axes: doubling $T$ from 1024 to 2048 multiplies its peak
# by the printed ratio, close to 4. The tiled layer's peak grows by less than 2 per doubling: it is
# a fixed part (a few $128 \times 128$ tiles per head) plus a part proportional to $T$ ($q$, $k$, $v$, the output,
# their gradients), and at these lengths the fixed part is still a good share of it, so its line
# is flatter than the dashed $\propto T$ line through its last point, and approaches that slope as $T$ grows.
# Below its threshold the fast tier still runs the dense form (faster there); from it on it tiles, and where its
# tiles widen its fixed part steps up once (four times the tile's area), then grows linearly again. In a whole GPT
# the other activations ($T \cdot C$ per layer) grow linearly too, so with tiling the model's memory is linear
# in $T$:
# `benchmarks/bench_long_sequences.py` measures it against PyTorch.
