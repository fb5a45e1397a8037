# %% [markdown]
# # 1. The worked attention example, by hand and by the package
#
# **Source.** Jonathan May, "Transformer Language Models", lecture notes 2025, §1.1 "Key, Query, Value
# Attention", and the same section of his 2024 notes. The notes give three 4 × 3 matrices, then state
# that the first position's weights come out as $\operatorname{softmax}([2, 4, 4]) \approx [.06, .47, .47]$ and its
# result as $[1.9, 6.7, 1.6]$. They do not print the three 4-dimensional inputs: the ones used here are our
# reconstruction, consistent with every printed number (and not the only such inputs; notebook 6, E22).
#
# The notes call the three matrices $K$, $Q$ and $V$. We write them `w_k`, `w_q`, `w_v` (as the package
# does) and keep the letters $q$, $k$, $v$ for the *projected* vectors, which is what Si Wu's slides
# "Transformers" ([CS 6120, Northeastern](https://siwu.io/nlp-class): "Final equations for one attention head") do.
#
# Plan: (1) one query by hand, unscaled, as printed (an exercise); (2) the same with the $1/\sqrt{d_k}$ of
# footnote 6; (3) all three positions at once; (4) the causal mask, two ways; (5) the same numbers through
# `MultiHeadAttention`.
#
# **Exercise** (2 points): the first query by hand, in section 1. Its cell carries nbgrader's metadata: in a
# student copy (`python -m minitransformer exercises make --only worked_attention --notebooks`, or an nbgrader
# release) the answer is blank and a locked check cell, with hidden tests of the numbers, grades it.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import MultiHeadAttention, ScaledDotProductAttention, causal_mask, softmax

np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## The inputs (reconstructed) and the three matrices of §1.1
# Rows of `X` are the positions $x_1, x_2, x_3$. Every projection is a row vector times a matrix,
# $q_i = x_i W_Q$, so all positions at once are `X @ w_q`.

# %%
X = np.array([[1, 0, 1, 0],
              [0, 2, 0, 2],
              [1, 1, 1, 1]], dtype=float)
w_k = np.array([[0, .5, .5], [1, 1, 0], [0, .5, .5], [1, 1, 0]])
w_q = np.array([[.5, 0, 1], [0, 0, 0], [.5, 0, 1], [0, 0, 0]])
w_v = np.array([[.5, 1, 1.5], [.5, 2, 0], [.5, 1, 1.5], [.5, 2, 0]])

q, k, v = X @ w_q, X @ w_k, X @ w_v
print("queries\n", q, "\nkeys\n", k, "\nvalues\n", v)

# %% [markdown]
# ## One query, unscaled, as the notes print it
# The raw score of key $j$ for query 1 is the dot product $s_j = q_1 \cdot k_j$. The weights are their
# softmax and the output is the weighted sum of the value rows:
#
# $$\alpha_{1j} = \frac{e^{s_j}}{\sum_{j'} e^{s_{j'}}}, \qquad \mathrm{out}_1 = \sum_j \alpha_{1j} v_j .$$
#
# The notes' example leaves out the division by $\sqrt{d_k}$ (their footnote 6 adds it afterwards).
#
# **Exercise 1** (2 points). Compute, with plain NumPy from `q`, `k` and `v` (not the package's `softmax`):
# `scores_1`, the three raw scores of query 1; `alpha_1`, their softmax; `out_1`, the output of position 1.
# The check compares them with the numbers the notes print; its hidden tests compare them with the package.

# %% [solution] worked_attention_by_hand
### BEGIN SOLUTION
scores_1 = q[0] @ k.T                                # q_1 . k_j for every key j
alpha_1 = np.exp(scores_1) / np.exp(scores_1).sum()  # the softmax, written out
out_1 = alpha_1 @ v                                  # the weighted sum of the value rows
### END SOLUTION

# %% [check 2] check_worked_attention_by_hand
assert np.shape(scores_1) == (3,) and np.shape(alpha_1) == (3,) and np.shape(out_1) == (3,), "each is a 3-vector"
assert np.isclose(np.sum(alpha_1), 1), "the weights of one query sum to 1"
assert np.array_equal(np.round(alpha_1, 2), [0.06, 0.47, 0.47]), "the notes print alpha_1 = [.06, .47, .47]"
### BEGIN HIDDEN TESTS
assert np.allclose(scores_1, [2, 4, 4], rtol=0, atol=1e-12)
assert np.allclose(alpha_1, softmax(np.array([2.0, 4.0, 4.0])), rtol=1e-12, atol=1e-15)
assert np.allclose(out_1, ScaledDotProductAttention(scale=1.0)(q[:1], k, v)[0], rtol=1e-12, atol=1e-15)
assert np.array_equal(np.round(out_1, 1), [1.9, 6.7, 1.6])
### END HIDDEN TESTS

# %% [markdown]
# The package agrees: its attention with `scale=1.0` (the notes' unscaled example) gives the same weights and
# the output the notes print.

# %%
print("scores", scores_1, " alpha_1", alpha_1)
assert np.array_equal(scores_1, [2, 4, 4])
assert np.allclose(alpha_1, softmax(scores_1))
assert np.allclose(alpha_1, [0.0634, 0.4683, 0.4683], atol=5e-5)
assert np.array_equal(np.round(alpha_1, 2), [0.06, 0.47, 0.47])     # the notes' rounding

unscaled = ScaledDotProductAttention(scale=1.0)
out_1 = unscaled(q[:1], k, v)[0]          # one query row against all three keys
print("output for position 1:", out_1)
assert np.allclose(out_1, alpha_1 @ v)
assert np.array_equal(np.round(out_1, 1), [1.9, 6.7, 1.6])             # the printed result

# %% [markdown]
# The output is a weighted average of the value rows: 6 % of $v_1 = [1, 2, 3]$ and 47 % each of
# $v_2 = [2, 8, 0]$ and $v_3 = [2, 6, 3]$, which gives $[1.94, 6.68, 1.60]$.
#
# ## With the scaling of footnote 6
# Footnote 6 divides the scores by the square root of the key size before the softmax; here
# $d_k = 3$ (the formula in the footnote has the square root; its words, "divide by the dimension",
# drop it; see notebook 6). The package's default `scale=None` is $1/\sqrt{d_k}$.

# %%
scaled = ScaledDotProductAttention()          # scale = 1/sqrt(d_k)
out_1_scaled = scaled(q[:1], k, v)[0]
alpha_1_scaled = scaled.alpha[0]
print("alpha_1 scaled:", alpha_1_scaled, " output:", out_1_scaled)
assert np.allclose(alpha_1_scaled, softmax(np.array([2, 4, 4]) / np.sqrt(3)))
assert alpha_1_scaled[0] > alpha_1[0]             # dividing the scores flattens the distribution
assert np.allclose(alpha_1_scaled.sum(), 1)

# %% [markdown]
# ## All positions at once
# Stacking the queries as rows gives the $3 \times 3$ score table $q k^\top$; a softmax along each row gives
# one distribution per position, and `alpha @ v` gives every output at once. The first row is the
# example above.

# %%
out_all = unscaled(q, k, v)
alpha_all = unscaled.alpha
print("alpha\n", alpha_all, "\noutputs\n", out_all)
assert np.allclose(alpha_all[0], alpha_1) and np.allclose(out_all[0], out_1)
assert np.allclose(alpha_all.sum(axis=1), 1)
assert np.allclose(out_all, alpha_all @ v)       # alpha on the LEFT of the values (notebook 6)

# %% [markdown]
# ## The causal mask, two ways
# A language model may not look at later positions. The notes (§1.1, the matrix $M$) multiply the
# weights $\alpha$ by a lower-triangular 0/1 matrix *after* the softmax. The Si Wu slides ("Masking out
# the future") put $-\infty$ into the scores *before* the softmax, which is what the package does.
# The two are not the same: after the multiplication a row no longer sums to 1. Dividing each row
# by its sum (renormalising) turns the first into the second, because the softmax of the allowed
# entries alone is exactly the full softmax restricted to them, divided by their total.

# %%
M = causal_mask(3, 3).astype(float)
alpha_times_M = alpha_all * M
print("M\n", M, "\nalpha * M\n", alpha_times_M, "\nrow sums", alpha_times_M.sum(axis=1))

causal = ScaledDotProductAttention(causal=True, scale=1.0)
out_causal = causal(q, k, v)
alpha_causal = causal.alpha
renormalised = alpha_times_M / alpha_times_M.sum(axis=1, keepdims=True)
print("-inf before softmax\n", alpha_causal)

assert not np.allclose(alpha_times_M.sum(axis=1), 1)      # the notes' version loses probability mass
assert np.allclose(alpha_causal.sum(axis=1), 1)
assert np.allclose(renormalised, alpha_causal)             # ... and renormalising repairs it
assert np.allclose(out_causal[0], v[0])                    # position 1 can only see itself

# %%
fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
panels = [(alpha_all, "α (no mask)"), (alpha_times_M, "α ⊙ M after softmax (notes)"),
          (alpha_causal, "−∞ before softmax (package)")]
for ax, (matrix, title) in zip(axes, panels):
    image = ax.imshow(matrix, vmin=0, vmax=1, cmap="viridis")
    for (i, j), value in np.ndenumerate(matrix):
        ax.text(j, i, f"{value:.2f}", ha="center", va="center", color="w" if value < .6 else "k")
    ax.set_title(f"{title}\nrow sums {np.round(matrix.sum(axis=1), 2)}", fontsize=9)
    ax.set_xlabel("key position")
    ax.set_xticks(range(3), ["x1", "x2", "x3"]); ax.set_yticks(range(3), ["x1", "x2", "x3"])
axes[0].set_ylabel("query position")
fig.colorbar(image, ax=axes, shrink=0.8)
plt.show()

# %% [markdown]
# ## The same numbers through `MultiHeadAttention`
# A layer of the model has square $(C, C)$ projection matrices and an output matrix $W_O$. With one
# head, $C = 4$, the notes' $4 \times 3$ matrices padded with a zero column, no biases, $W_O = I$ and the
# unscaled attention, the layer must give back the worked example (plus a zero fourth coordinate).

# %%
layer = MultiHeadAttention(d_model=4, n_heads=1, bias=False, rng=0)
pad = np.zeros((4, 1))
layer.w_q.data[...] = np.hstack([w_q, pad])
layer.w_k.data[...] = np.hstack([w_k, pad])
layer.w_v.data[...] = np.hstack([w_v, pad])
layer.w_o.data[...] = np.eye(4)
layer.attention.scale = 1.0                    # the printed example is unscaled
out_layer = layer(X[None])                     # (B=1, T=3, C=4)
print(out_layer[0])
assert np.allclose(out_layer[0, :, :3], out_all) and np.allclose(out_layer[0, :, 3], 0)
assert np.allclose(layer.attention.alpha[0, 0], alpha_all)      # (B, H, T, T)

# %% [markdown]
# Above, one head used all $C = 4$ columns ($hs = 4$, the fourth one the zero padding). With two heads the
# same $C = 4$ is split into two heads of $hs = C / H = 2$ columns each, and each head is scaled by its own
# $1/\sqrt{hs} = 1/\sqrt{2}$ (the package's default). Each head attends differently; the picture shows each head's table,
# both on one colour scale.

# %%
two_heads = MultiHeadAttention(d_model=4, n_heads=2, causal=True, rng=1)
two_heads(X[None])
print("head size:", two_heads.head_size, "| scale used:", two_heads.attention.used_scale)
assert two_heads.head_size == 2 and np.isclose(two_heads.attention.used_scale, 1 / np.sqrt(2))
assert np.allclose(two_heads.attention.alpha.sum(axis=-1), 1)
fig, axes = plt.subplots(1, 2, figsize=(7.5, 3.2), layout="constrained")
for head, ax in enumerate(axes):
    image = ax.imshow(two_heads.attention.alpha[0, head], vmin=0, vmax=1, cmap="viridis")
    ax.set_title(f"head {head} (hs = 2, causal, random weights)", fontsize=9)
    ax.set_xlabel("key position"); ax.set_ylabel("query position")
    ax.set_xticks(range(3), ["x1", "x2", "x3"]); ax.set_yticks(range(3), ["x1", "x2", "x3"])
fig.colorbar(image, ax=axes, shrink=0.8, label="attention weight α")
plt.show()
