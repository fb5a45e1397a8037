# %% [markdown]
# # 15. Multi-head attention: concatenate then $W_O$, or add up one product per head
#
# **Sources.** Jonathan May, "Transformer Language Models", lecture notes 2025, §1.2 "Multi-Head": each head
# has its own $d \times d/n$ slices of $Q$, $K$, $V$, and "the results are concatenated to form a d-length vector and
# then multiplied by another d × d linear transform matrix". Si Wu, "Transformers" ([CS 6120,
# Northeastern](https://siwu.io/nlp-class)), the slide "Parallelizing Multi-head Attention":
# $\mathrm{MultiHeadAttention}(X) = (\mathrm{head}_1 \oplus \dots \oplus \mathrm{head}_h)\, W^O$. Greg Strabel, "Transformers" (2023), §2.2, eq. (16):
# $\mathrm{Multihead} = \mathrm{concat}(A_1, \dots, A_h)\, W_O$ with $W_O \in \mathbb{R}^{h d_v \times d_o}$.
#
# **The claim shown here.** A row vector split into blocks times a matrix split into the matching row
# blocks is the sum of the block products:
#
# $$[A_1 \; A_2 \; \cdots \; A_h]\, W_O = A_1 W_O^{(1)} + A_2 W_O^{(2)} + \dots + A_h W_O^{(h)},$$
#
# where $W_O^{(i)}$ is the block of rows of $W_O$ that head $i$'s output meets.
# So "concatenate, then mix" is the same as "each head writes its own $(T \times C)$ update into the residual
# stream, and the updates add up". That second reading is the one used by interpretability work (Elhage et
# al. 2021, cited on Wu's "residual stream" slide): every head has its own output matrix, the row block.
#
# Everything below is the package's `MultiHeadAttention`; the notebook only reads what its forward pass kept.
#
# **Exercise** (2 points): the sum over heads, in its section. Its cells carry nbgrader's metadata: in a student
# copy (`python -m minitransformer exercises make --only heads_as_a_sum --notebooks`, or an nbgrader release) the
# answer is blank and a locked check cell, with hidden tests of the numbers, grades it.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import MultiHeadAttention

rng = np.random.default_rng(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## One layer, three heads
# $C = 12$, $H = 3$, so each head has $hs = d_v = 4$ columns of $W_V$, and $W_O$ is $(12 \times 12)$: rows 0–3 read
# head 0's output, rows 4–7 head 1's, rows 8–11 head 2's. The biases are kept (they start at 0 in the
# package, so we give them random values to make the check honest).

# %%
B, T, C, H = 2, 6, 12, 3
layer = MultiHeadAttention(d_model=C, n_heads=H, causal=True, rng=1)
for bias in (layer.b_q, layer.b_k, layer.b_v, layer.b_o):
    bias.data[...] = rng.standard_normal(bias.data.shape)
x = rng.standard_normal((B, T, C))
out = layer(x)                                                   # (B, T, C)
hs = layer.head_size

# what the forward pass kept: the weights alpha (B, H, T, T) and the values v (B, H, T, hs) of every head
alpha, v = layer.attention.alpha, layer.attention.v
heads = alpha @ v                                                # (B, H, T, hs): each head's output
concatenated = layer.o_proj.x                                    # (B, T, C): the input of W_O
print("head size", hs, "| heads", heads.shape, "| concatenation", concatenated.shape)

# the concatenation is the heads side by side, head h in columns h*hs .. (h+1)*hs - 1
for h in range(H):
    assert np.allclose(concatenated[..., h * hs:(h + 1) * hs], heads[:, h])
# and each head's values are x W_V + b_V restricted to its columns (nothing else mixes in)
w_v, b_v = layer.w_v.data, layer.b_v.data
for h in range(H):
    columns = slice(h * hs, (h + 1) * hs)
    assert np.allclose(v[:, h], x @ w_v[:, columns] + b_v[columns])

# %% [markdown]
# ## Concatenate-then-$W_O$ against the sum over heads
# **Exercise** (2 points). Compute `contribution`, of shape $(H, B, T, C)$: `contribution[h]` is head $h$'s output
# (`heads[:, h]`, $(B, T, hs)$) times its row block $W_O^{(h)}$ of `w_o`, a $(B, T, C)$ update. Their sum plus the
# bias $b_O$ must be the layer's output, to rounding. The check tests the shape and that sum; its hidden tests
# switch the heads off one at a time in the layer itself.

# %%
w_o, b_o = layer.w_o.data, layer.b_o.data

# %% [solution] heads_as_a_sum_contributions
### BEGIN SOLUTION
contribution = np.stack([heads[:, h] @ w_o[h * hs:(h + 1) * hs, :] for h in range(H)])   # (H, B, T, C)
### END SOLUTION

# %% [check 2] check_heads_as_a_sum_contributions
assert np.shape(contribution) == (H, B, T, C), f"contribution has shape {np.shape(contribution)}, expected (H, B, T, C)"
assert np.allclose(np.sum(contribution, axis=0) + b_o, out), "the heads' updates plus b_O should give the layer's output"
### BEGIN HIDDEN TESTS
for h in range(H):                             # head h alone: every other head's columns of the concatenation zeroed
    alone = np.zeros_like(concatenated)
    alone[..., h * hs:(h + 1) * hs] = concatenated[..., h * hs:(h + 1) * hs]
    assert np.allclose(contribution[h], layer.o_proj(alone) - b_o, rtol=1e-12, atol=1e-12), f"head {h}"
### END HIDDEN TESTS

# %%
summed = contribution.sum(axis=0) + b_o
print("largest difference, sum over heads vs the layer:", np.abs(summed - out).max())
assert np.allclose(summed, out, rtol=1e-12, atol=1e-12)
assert np.allclose(concatenated @ w_o + b_o, out, rtol=1e-12, atol=1e-12)

# a wrong pairing fails: head 0's output against head 1's rows is a different matrix product
wrong = heads[:, 1] @ w_o[0:hs] + heads[:, 0] @ w_o[hs:2 * hs] + heads[:, 2] @ w_o[2 * hs:] + b_o
assert not np.allclose(wrong, out)

# %% [markdown]
# **A consequence.** Switching one head off (its output set to 0) removes exactly its contribution and
# leaves the others untouched: this is how "head ablation" is done. We zero head 1's columns of the
# concatenation and push it through the package's own output projection.

# %%
ablated = concatenated.copy()
ablated[..., hs:2 * hs] = 0
without_head_1 = layer.o_proj(ablated)                           # (B, T, C), the layer's W_O and b_O
assert np.allclose(without_head_1, out - contribution[1])
print("norm of head 1's update:", np.linalg.norm(contribution[1]).round(3))

# %% [markdown]
# ## The picture
# First batch row: each head's update ($T \times C$), the sum of the three plus $b_O$, and the layer's output, all
# on one colour scale; the last panel is the difference ($\times 10^{12}$ to be visible at all).

# %%
panels = [(contribution[h, 0], f"head {h}:\nA_{h} W_O[rows {h * hs}–{(h + 1) * hs - 1}]") for h in range(H)]
panels += [(summed[0], "sum over heads\n+ b_O"), (out[0], "layer output\nconcat · W_O + b_O")]
limit = max(np.abs(matrix).max() for matrix, _ in panels)
fig, axes = plt.subplots(1, 6, figsize=(15, 3.2), layout="constrained")
for ax, (matrix, title) in zip(axes, panels):
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit)
    ax.set_title(title, fontsize=8); ax.set_xlabel("channel c"); ax.set_ylabel("position t")
fig.colorbar(image, ax=axes[4], shrink=0.8, label="value (panels 1-5)")
difference = (summed[0] - out[0]) * 1e12
diff_image = axes[5].imshow(difference, cmap="RdBu_r", vmin=-1, vmax=1)
axes[5].set_title("difference\n× 10¹²", fontsize=8); axes[5].set_xlabel("channel c"); axes[5].set_ylabel("position t")
fig.colorbar(diff_image, ax=axes[5], shrink=0.8)
plt.show()
