# %% [markdown]
# # 11. Pre-norm against post-norm: the same weights, two blocks
#
# **Sources, and where they disagree.**
# * Jonathan May, "Transformer Language Models", lecture notes 2025, §1.3 "Residual Connections and Layer
#   Norm": first x' = self(x) + x, then "in fact" x' = self(norm(x)) + x and the output ff(norm(x')) + x':
#   the **pre-norm** block (LayerNorm inside each residual branch).
# * Si Wu, "Transformers" ([CS 6120, Northeastern](https://siwu.io/nlp-class)): the slide "Minor clarification:
#   Pre-norm vs post-norm" names both (post-norm: the 2017 paper; pre-norm: GPT-2/3), the per-token equations
#   ("Putting together a single transformer block", $t^1 = \mathrm{LayerNorm}(x), \dots$) are pre-norm, but the slide
#   "Parallelizing Multi-head Attention" writes $O = \mathrm{LayerNorm}(X + \mathrm{MultiHeadAttention}(X))$,
#   $H = \mathrm{LayerNorm}(O + \mathrm{FFN}(O))$: **post-norm** (notebook 6 measures how far apart the two are).
# * Greg Strabel, "Transformers" (2023), §2.4: "adds $X_0$ and $X_1$ and applies normalization": post-norm, the
#   original block of Vaswani et al. (2017).
# * Sachin Kumar, "Language Modeling III: Transformers" ([CSE 5525, Ohio State,
#   2025](https://shocheen.github.io/cse-5525-spring-2025/)): residual connections give "higher values of the
#   gradient" and LayerNorm is "another way to prevent vanishing gradients".
#
# The package's `TransformerBlock` has both (`norm="pre"`, the default, and `norm="post"`):
#
#     pre-norm:   h = x + attn(ln1(x));    y = h + ff(ln2(h))
#     post-norm:  h = ln1(x + attn(x));    y = ln2(h + ff(h))
#
# Two blocks built with the same seed have the same weights, so every difference below comes from where
# the LayerNorm sits.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import TransformerBlock

rng = np.random.default_rng(0)
B, T, C, H, d_ff = 4, 32, 64, 4, 256

# %% [markdown]
# ## One block: same weights, different outputs
# A post-norm block ends with a LayerNorm (γ = 1, β = 0 at initialisation), so every output row has mean 0
# and standard deviation 1, whatever the input's scale. A pre-norm block ends with a residual sum: the
# output keeps the input's scale and adds the two sublayers' updates to it.

# %%
pre = TransformerBlock(C, H, d_ff, norm="pre", rng=1)
post = TransformerBlock(C, H, d_ff, norm="post", rng=1)
same_weights = all(np.array_equal(a.data, b.data) for a, b in zip(pre.parameters(), post.parameters()))
x = 3.0 * rng.standard_normal((B, T, C))                    # a residual stream of scale 3
y_pre, y_post = pre(x), post(x)
print(f"same weights: {same_weights}; largest |pre - post| = {np.abs(y_pre - y_post).max():.2f}")
print(f"row std of the output: pre {y_pre.std(axis=-1).mean():.2f}, post {y_post.std(axis=-1).mean():.4f}")
assert same_weights
assert np.abs(y_pre - y_post).max() > 1
assert np.allclose(y_post.mean(axis=-1), 0, atol=1e-9) and np.allclose(y_post.std(axis=-1), 1, atol=1e-3)
assert y_pre.std(axis=-1).mean() > 2                         # the input's scale is carried through

# %% [markdown]
# ## A stack of twelve at initialisation: the residual stream and the gradients
# We stack 12 blocks of each kind (block i drawn with seed i for both), push the same input through, send
# the same random gradient back from the top, and record at every layer (a) the scale of the stream
# leaving it, (b) the norm of the gradient reaching its input, relative to the one sent in at the top,
# and (c) the norm of the gradient of all its parameters.
#
# In a pre-norm stack the residual path is the identity, so the top gradient reaches every layer
# unchanged, *plus* what each sublayer adds: the gradient never gets smaller on the way down. In a
# post-norm stack every sublayer's LayerNorm sits on the main path; each one rescales the gradient by the
# inverse standard deviation of what it normalised and removes two directions from it.

# %%
n_layers = 12
x = rng.standard_normal((B, T, C))
dout = rng.standard_normal((B, T, C))
results = {}
for norm in ("pre", "post"):
    blocks = [TransformerBlock(C, H, d_ff, norm=norm, rng=10 + i) for i in range(n_layers)]
    stream, scale = x, []
    for block in blocks:
        stream = block(stream)
        scale.append(stream.std())
    gradient, reaching = dout, []
    for block in reversed(blocks):
        block.zero_grad()
        gradient = block.backward(gradient)
        reaching.append(np.linalg.norm(gradient) / np.linalg.norm(dout))
    parameter_norms = [np.sqrt(sum(np.sum(p.grad ** 2) for p in block.parameters())) for block in blocks]
    results[norm] = {"stream std": np.array(scale), "input gradient": np.array(reaching[::-1]),
                     "parameter gradient": np.array(parameter_norms)}
for norm, rows in results.items():
    for name, values in rows.items():
        print(f"{norm:4s} {name:18s}", np.round(values, 2))

# %% [markdown]
# **What the numbers say.** Pre-norm: the stream's scale grows layer by layer (each block adds to it), the
# gradient reaching every layer is at least the one sent in and grows toward the bottom, and the bottom
# layers' parameters get the largest gradients. Post-norm: the stream is renormalised to scale 1 after
# every sublayer, and the gradient on the way down is rescaled at every LayerNorm, here ending up smaller
# than at the top; the parameters' gradients stay within a factor of 2 of each other from bottom to top
# (pre-norm: almost a factor of 3 between the bottom layer and the top one).
#
# These are facts about these weights at initialisation, not about training: how each form trains (post-norm
# usually needs a learning-rate warm-up, Vaswani et al. §5.3; Xiong et al. 2020 analyse why) is for
# notebooks 5 and 12.

# %%
pre_rows, post_rows = results["pre"], results["post"]
assert np.all(np.diff(pre_rows["stream std"]) > 0)                       # the pre-norm stream grows
assert np.allclose(post_rows["stream std"], 1, atol=1e-3)                 # post-norm: renormalised
assert np.all(pre_rows["input gradient"] >= 1)                            # never shrinks on the way down
assert post_rows["input gradient"].min() < 0.8                            # rescaled by every LayerNorm
assert pre_rows["parameter gradient"][0] > 2 * pre_rows["parameter gradient"][-1]
assert post_rows["parameter gradient"].max() < 2 * post_rows["parameter gradient"].min()

fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), layout="constrained")
layers = np.arange(1, n_layers + 1)
for norm, marker in (("pre", "o-"), ("post", "s-")):
    rows = results[norm]
    axes[0].plot(layers, rows["stream std"], marker, label=f"{norm}-norm")
    axes[1].plot(layers, rows["input gradient"], marker, label=f"{norm}-norm")
    axes[2].plot(layers, rows["parameter gradient"], marker, label=f"{norm}-norm")
axes[0].set_ylabel("standard deviation of the block's output")
axes[1].set_ylabel("‖dL/d input‖ / ‖dL/d output of the stack‖")
axes[1].axhline(1, color="k", ls=":", lw=1)
axes[2].set_ylabel("‖gradient of the block's parameters‖")
for ax, title in zip(axes, ("the residual stream", "gradient reaching each layer", "parameter gradients")):
    ax.set_xlabel("layer (1 = bottom)"); ax.set_title(title); ax.legend()
plt.show()
