# %% [markdown]
# # 14. What attention costs: quadratic in length against quadratic in width, path lengths, restricted attention
#
# **Source.** Sachin Kumar, "Language Modeling III: Transformers" ([CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)), the table taken from Vaswani et al. (2017, Table 1): per
# layer, self-attention costs $O(n^2 \cdot d)$ operations, a recurrent layer $O(n \cdot d^2)$, restricted
# self-attention (each position sees $r$ neighbours)
# $O(r \cdot n \cdot d)$; the maximum path length between two positions is $O(1)$ for self-attention, $O(n)$ for
# a recurrence and $O(n/r)$ for restricted attention. Si Wu's slides ("Another point: Attention is quadratic in length") make the
# same point with the $n \times n$ table of $q \cdot k$ products; Greg Strabel, "Transformers" (2023), §9, opens the
# long-sequence methods with it. The position-wise feed-forward layer, applied to each of the $n$
# positions with a $d \times 4d$ and a $4d \times d$ matrix, is the $O(n \cdot d^2)$ part of a Transformer block.
#
# **How we check it.** Wall-clock times on a shared machine are noisy, so the claims are asserted on
# *counts*: the floating-point operations of the matrix products, read off the shapes of the arrays
# the package's layers actually multiplied and kept ($q$, $k$, $v$, $\alpha$, the feed-forward's inputs), and the
# bytes of the arrays they hold (`.nbytes`). The times are measured too (median of three runs) and
# plotted next to the counts, never asserted.
#
# **Exercise** (2 points): the two counts, derived before they are measured. Its cells carry nbgrader's
# metadata: in a student copy (`python -m minitransformer exercises make --only operation_counts --notebooks`, or
# an nbgrader release) the answer is blank and a locked check cell, with hidden tests of the numbers, grades it.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import BandedAttention, FeedForward, ScaledDotProductAttention, band_mask, causal_mask

rng = np.random.default_rng(0)


def product_flops(left_shape, right_shape):
    """Multiply-adds of a (batched) matrix product (..., m, k) @ (..., k, n), counted as 2 m k n per batch."""
    *batch, m, k = left_shape
    n = right_shape[-1]
    return 2 * m * k * n * int(np.prod(batch, dtype=np.int64))


def median_time(function, *args, repeats=3, **kwargs):
    """Median wall time of `function(*args, **kwargs)` in seconds, over `repeats` calls (plotted only)."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function(*args, **kwargs)
        times.append(time.perf_counter() - started)
    return float(np.median(times))


def label_ticks(ax, xs):
    """Tick the log x axis at the measured values only."""
    ax.set_xticks(xs, [str(x) for x in xs], minor=False)
    ax.set_xticks([], minor=True)


def slope(xs, ys):
    """Slope of the least-squares line through (log xs, log ys): the exponent of a power law."""
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])

# %% [markdown]
# ## Attention and feed-forward, counted on what the layers computed
# For one head of width $d$ on $n$ positions, attention forms $q k^\top$ ($n \times d$ times $d \times n$) and
# $\alpha v$ ($n \times n$ times $n \times d$), and it keeps the $n \times n$ table $\alpha$. The feed-forward
# layer multiplies the $(n \times d)$ input by a $d \times 4d$ matrix and the result by a $4d \times d$ one, and it
# keeps an $n \times 4d$ hidden layer. A product of an $(a \times b)$ by a $(b \times c)$ matrix costs $2abc$
# operations: $ac$ entries, each $b$ multiplications and $b$ additions.
#
# **Exercise** (2 points). Write `attention_operations(n, d)` and `feed_forward_operations(n, d)`, the operations
# of the two products of each layer, and `crossover(d)`, the length $n$ at which the two counts are equal. The
# check tests one small case; its hidden tests compare your counts with those of the package's layers below, at
# several sizes.

# %% [solution] operation_counts_by_hand
def attention_operations(n, d):
    """Operations of q k^T and alpha v for one head of width d on n positions."""
    ### BEGIN SOLUTION
    return 2 * n * d * n + 2 * n * n * d
    ### END SOLUTION


def feed_forward_operations(n, d):
    """Operations of the feed-forward layer's two products (d -> 4d -> d) on n positions."""
    ### BEGIN SOLUTION
    return 2 * n * d * 4 * d + 2 * n * 4 * d * d
    ### END SOLUTION


def crossover(d):
    """The length n at which attention and the feed-forward count the same operations."""
    ### BEGIN SOLUTION
    return 4 * d                      # 4 n^2 d = 16 n d^2
    ### END SOLUTION

# %% [check 2] check_operation_counts_by_hand
assert attention_operations(1, 1) == 4 and feed_forward_operations(1, 1) == 16, "one position of width 1"
### BEGIN HIDDEN TESTS
for n, d in ((3, 5), (16, 8), (40, 2)):
    assert attention_operations(n, d) == 4 * n * n * d and feed_forward_operations(n, d) == 16 * n * d * d, (n, d)
assert crossover(64) == 256 and crossover(768) == 3072
assert attention_operations(crossover(10), 10) == feed_forward_operations(crossover(10), 10)
### END HIDDEN TESTS

# %% [markdown]
# We run both layers of the package over a range of $n$ ($d = 64$ fixed) and a range of $d$ ($n = 128$ fixed), and
# count the operations of the products they computed, from the shapes of the arrays they kept.

# %%
def measure(n, d):
    """Counted operations, kept bytes and wall time of one attention head and one feed-forward layer."""
    q, k, v = (rng.standard_normal((1, n, d)) for _ in range(3))
    attention = ScaledDotProductAttention(causal=True)
    attention_time = median_time(attention, q, k, v)
    attention_flops = (product_flops(attention.q.shape, attention.k.swapaxes(-1, -2).shape)
                       + product_flops(attention.alpha.shape, attention.v.shape))
    ff = FeedForward(d, 4 * d, rng=0)
    x = rng.standard_normal((1, n, d))
    ff_time = median_time(ff, x)
    ff_flops = (product_flops(ff.fc1.x.shape, ff.fc1.weight.data.shape)
                + product_flops(ff.fc2.x.shape, ff.fc2.weight.data.shape))
    return {"attention flops": attention_flops, "attention bytes": attention.alpha.nbytes,
            "attention s": attention_time, "ff flops": ff_flops, "ff bytes": ff.fc2.x.nbytes, "ff s": ff_time}


lengths, widths = [32, 64, 128, 256, 512], [16, 32, 64, 128, 256]
by_length = {n: measure(n, 64) for n in lengths}
by_width = {d: measure(128, d) for d in widths}


def column(table, key):
    return np.array([row[key] for row in table.values()], dtype=float)


fitted = {}
for name, table, xs in (("n", by_length, lengths), ("d", by_width, widths)):
    for key in ("attention flops", "ff flops", "attention bytes", "ff bytes", "attention s", "ff s"):
        fitted[key, name] = slope(xs, column(table, key))
for (key, name), value in fitted.items():
    print(f"slope of {key:16s} in {name}: {value:5.2f}")

# %% [markdown]
# The counted exponents are exact: attention's operations grow as $n^2$ and $d^1$, the feed-forward's as $n^1$
# and $d^2$; the memory attention keeps (the $n \times n$ table $\alpha$) grows as $n^2$ and does not depend on $d$.

# %%
assert np.isclose(fitted["attention flops", "n"], 2) and np.isclose(fitted["attention flops", "d"], 1)
assert np.isclose(fitted["ff flops", "n"], 1) and np.isclose(fitted["ff flops", "d"], 2)
assert np.isclose(fitted["attention bytes", "n"], 2) and np.isclose(fitted["attention bytes", "d"], 0)
assert np.isclose(fitted["ff bytes", "n"], 1) and np.isclose(fitted["ff bytes", "d"], 1)
for n, row in by_length.items():                          # the exact formulas, not only their exponents
    assert row["attention flops"] == 4 * n * n * 64 and row["ff flops"] == 16 * n * 64 * 64
    assert row["attention flops"] == attention_operations(n, 64) and row["ff flops"] == feed_forward_operations(n, 64)
    assert row["attention bytes"] == n * n * 8            # float64

# %% [markdown]
# **Which one dominates?** $4 n^2 d$ against $16 n d^2$: attention costs more exactly when $n > 4d$, the
# `crossover(d)` of the exercise. At $d = 64$ the
# crossover is $n = 256$; a GPT-2 small layer ($d = 768$, $n = 1024$) is still on the feed-forward side.

# %%
attention_heavier = [n for n in lengths if by_length[n]["attention flops"] > by_length[n]["ff flops"]]
ties = [n for n in lengths if by_length[n]["attention flops"] == by_length[n]["ff flops"]]
print("attention counts more than the feed-forward for n in", attention_heavier, "| equal at n =", ties)
assert ties == [256] == [crossover(64)] and attention_heavier == [512]

fig, axes = plt.subplots(1, 3, figsize=(15, 4), layout="constrained")
for ax, (table, xs, label) in zip(axes[:2], ((by_length, lengths, "sequence length n (d = 64)"),
                                            (by_width, widths, "width d (n = 128)"))):
    variable = "n" if table is by_length else "d"
    for key, colour in (("attention flops", "C0"), ("ff flops", "C1")):
        ax.loglog(xs, column(table, key), "o-", color=colour,
                  label=f"{key.split()[0]}: counted, slope {fitted[key, variable]:.2f}")
    ax.set_xlabel(label); ax.set_ylabel("floating-point operations (counted)")
    timed = ax.twinx()
    for key, colour in (("attention s", "C0"), ("ff s", "C1")):
        timed.loglog(xs, column(table, key) * 1e3, "x:", color=colour,
                     label=f"{key.split()[0]}: wall time, slope {fitted[key, variable]:.2f}")
    timed.set_ylabel("wall time, ms (median of 3; not asserted)")
    label_ticks(timed, xs)
    handles = ax.get_legend_handles_labels()[0] + timed.get_legend_handles_labels()[0]
    ax.legend(handles, [h.get_label() for h in handles], fontsize=7, loc="upper left")
axes[0].set_title("operations and time against n"); axes[1].set_title("operations and time against d")
axes[2].loglog(lengths, column(by_length, "attention bytes") / 1e6, "o-", label="attention: α, n × n")
axes[2].loglog(lengths, column(by_length, "ff bytes") / 1e6, "s-", label="feed-forward: hidden, n × 4d")
label_ticks(axes[2], lengths); axes[2].set_xlabel("sequence length n (d = 64)"); axes[2].set_ylabel("bytes kept for backward, MB")
axes[2].set_title("memory the layers keep"); axes[2].legend(fontsize=8)
plt.show()

# %% [markdown]
# ## Restricted attention: linear in the length
# With a window of $r$ keys per query, the package's `BandedAttention` scores only the band: its $\alpha$ is
# $n \times r$, not $n \times n$. Counted operations and bytes grow linearly in $n$ (and in $r$); the dense form with a band mask
# (`band_mask`) gives the same outputs but still builds the full table.

# %%
d, window = 32, 16
banded_flops, banded_bytes, banded_s, dense_s = [], [], [], []
for n in lengths:
    q, k, v = (rng.standard_normal((1, n, d)) for _ in range(3))
    banded = BandedAttention(window)
    banded_s.append(median_time(banded, q, k, v))
    out_banded = banded(q, k, v)
    banded_flops.append(product_flops(banded.alpha.shape[:-1] + (1, window), (1, window, d))
                        + product_flops((*banded.q.shape[:-1], 1, d), (1, d, window)))
    banded_bytes.append(banded.alpha.nbytes)
    dense = ScaledDotProductAttention()
    dense_s.append(median_time(dense, q, k, v, mask=band_mask(n, n, window)))
    assert np.allclose(out_banded, dense(q, k, v, mask=band_mask(n, n, window)))
    assert banded.alpha.shape[-2:] == (n, window)

print("slope of banded operations in n:", round(slope(lengths, banded_flops), 3),
      "| of banded bytes:", round(slope(lengths, banded_bytes), 3))
assert banded_flops == [4 * window * n * d for n in lengths]        # exactly 4 r n d
assert np.isclose(slope(lengths, banded_flops), 1) and np.isclose(slope(lengths, banded_bytes), 1)

# %% [markdown]
# ## Maximum path length
# How many layers must information pass through to get from the first position to the last? Treat each
# layer's attention mask as the edges of a graph (query i reads key j) and count the layers until the
# last position can read the first: boolean matrix products of the package's masks. Full causal
# attention: one layer. A window of r: ⌈(n − 1)/(r − 1)⌉ layers, O(n/r). A window of 2 (each position
# reads only itself and its predecessor, as a recurrence reads its previous state): n − 1 layers, O(n).

# %%
def layers_to_reach(mask):
    """Fewest stacked layers with this (n, n) mask after which the last query depends on the first key."""
    reach, layers = mask.copy(), 1
    while not reach[-1, 0]:
        reach, layers = (reach.astype(int) @ mask.astype(int)) > 0, layers + 1
    return layers


n_values = [8, 16, 32, 64, 128]
paths = {"full causal attention": [layers_to_reach(causal_mask(n, n)) for n in n_values],
         "window r = 4": [layers_to_reach(band_mask(n, n, 4)) for n in n_values],
         "window r = 2 (a recurrence)": [layers_to_reach(band_mask(n, n, 2)) for n in n_values]}
print(paths)
assert paths["full causal attention"] == [1] * len(n_values)
assert paths["window r = 4"] == [int(np.ceil((n - 1) / 3)) for n in n_values]
assert paths["window r = 2 (a recurrence)"] == [n - 1 for n in n_values]

fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
axes[0].loglog(lengths, banded_flops, "o-", label=f"banded, r = {window}: counted operations")
axes[0].loglog(lengths, [4 * n * n * d for n in lengths], "s--", label="dense n × n: counted operations")
axes[0].set_xlabel("sequence length n (d = 32)"); axes[0].set_ylabel("floating-point operations (counted)")
timed = axes[0].twinx()
timed.loglog(lengths, np.array(banded_s) * 1e3, "x:", color="C0", label="banded: wall time")
timed.loglog(lengths, np.array(dense_s) * 1e3, "+:", color="C1", label="dense with band mask: wall time")
timed.set_ylabel("wall time, ms (median of 3; not asserted)")
handles = axes[0].get_legend_handles_labels()[0] + timed.get_legend_handles_labels()[0]
axes[0].legend(handles, [h.get_label() for h in handles], fontsize=7, loc="upper left")
axes[0].set_title("restricted attention: O(r n d)"); label_ticks(timed, lengths)
for label, values in paths.items():
    axes[1].plot(n_values, values, "o-", label=label)
axes[1].set_xscale("log", base=2); axes[1].set_yscale("log", base=2); label_ticks(axes[1], n_values)
axes[1].set_xlabel("sequence length n"); axes[1].set_ylabel("layers from first to last position")
axes[1].set_title("maximum path length"); axes[1].legend(fontsize=8)
plt.show()
