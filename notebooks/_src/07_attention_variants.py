# %% [markdown]
# # 7. Attention and position variants on one tiny task
#
# **Sources.** Sachin Kumar, "Language Modeling III: Transformers" ([CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)), the slides "Variants of Positional Embeddings" (RoPE,
# ALiBi, no embeddings) and "Variants of multi-head attention" (GQA); Greg Strabel, "Transformers" (2023), §9.2–9.3
# (sparse and sliding-window attention), §10.1 (LoRA), §11 (relative positions and the skewing
# algorithm); Jonathan May, "Transformer Language Models", lecture notes 2025, §1.4 on RoPE.
#
# Claims checked here:
# 1. every position scheme lets a one-layer GPT learn a task that needs to know *where* a token is;
# 2. ALiBi, trained on 8 tokens, still works on 32; a learned table cannot even run there, and sinusoidal
#    positions (computed for any length) run but fail at positions never seen in training;
# 3. a RoPE score depends only on the offset between query and key;
# 4. grouped-query attention trades key/value weights for a little accuracy, and with as many
#    key/value heads as heads it *is* standard attention;
# 5. the skewed relative-position computation equals the direct one;
# 6. the sparse patterns look like the survey note's figures; LoRA merges exactly.
#
# **Exercise** (2 points): ALiBi's bias, after claim 3. Its cells carry nbgrader's metadata: in a student copy
# (`python -m minitransformer exercises make --only distance_bias --notebooks`, or an nbgrader release) the
# answer is blank and a locked check cell, with hidden tests of the numbers, grades it.
#
# Everything is imported from the package; the cells only train, measure and draw.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import (
    GPT,
    CrossEntropyLoss,
    Linear,
    LoRALinear,
    MultiHeadAttention,
    RelativePositionAttention,
    alibi_bias,
    band_mask,
    fixed_masks,
    longformer_mask,
    rotary_angles,
    rotate,
    strided_masks,
)

# %% [markdown]
# ## The task: predict the token two places back, permuted
#
# Each sequence starts with two random tokens out of 8; after that $x_{t+1} = \pi(x_{t-1})$ for a fixed
# permutation $\pi$. The next token is decided by the token *two* back, so attention has to find the
# position $t - 1$, not just any earlier token: a model without any sense of order cannot do it
# reliably. The first prediction of each sequence is a coin toss over 8 tokens.

# %%
VOCAB, TRAIN_LEN, STEPS = 8, 8, 200
perm = np.random.default_rng(0).permutation(VOCAB)


def skip_sequences(rng, batch, length):
    """int (batch, length + 1) with x[t+1] = perm[x[t-1]]."""
    ids = np.empty((batch, length + 1), dtype=np.int64)
    ids[:, :2] = rng.integers(0, VOCAB, size=(batch, 2))
    for t in range(2, length + 1):
        ids[:, t] = perm[ids[:, t - 2]]
    return ids


def loss_on(model, ids, backward=False):
    loss_fn = CrossEntropyLoss()
    loss = loss_fn(model(ids[:, :-1]), ids[:, 1:])
    if backward:
        model.backward(loss_fn.backward())
    return float(loss)


def train_briefly(model, lr=2e-2, seed=1):
    """STEPS steps of Adam (bias-corrected, no weight decay) on batches of 16; returns the losses."""
    rng, params = np.random.default_rng(seed), model.parameters()
    moments = [(np.zeros_like(p.data), np.zeros_like(p.data)) for p in params]
    losses = []
    for step in range(1, STEPS + 1):
        model.zero_grad()
        losses.append(loss_on(model, skip_sequences(rng, 16, TRAIN_LEN), backward=True))
        for p, (m, v) in zip(params, moments):
            m[...] = 0.9 * m + 0.1 * p.grad
            v[...] = 0.99 * v + 0.01 * p.grad ** 2
            p.data -= lr * (m / (1 - 0.9 ** step)) / (np.sqrt(v / (1 - 0.99 ** step)) + 1e-8)
    return losses

# %% [markdown]
# ## Claim 1: loss curves, one per position scheme
#
# The same one-layer GPT ($C = 16$, $H = 4$), the same data and the same 200 steps; only `positional` changes.

# %%
SCHEMES = ["learned", "sinusoidal", "rope", "alibi", "none"]
models, curves = {}, {}
for scheme in SCHEMES:
    models[scheme] = GPT(vocab_size=VOCAB, d_model=16, n_heads=4, n_layers=1, d_ff=32, max_len=TRAIN_LEN,
                         positional=scheme, rng=0)
    curves[scheme] = train_briefly(models[scheme])

smooth = np.ones(10) / 10
for scheme in SCHEMES:
    plt.plot(np.convolve(curves[scheme], smooth, mode="valid"), label=scheme)
plt.axhline(np.log(VOCAB) / TRAIN_LEN, color="grey", ls=":", label="only the coin toss left")
plt.xlabel("step"); plt.ylabel("training loss (10-step mean)"); plt.legend(); plt.show()

final = {scheme: float(np.mean(curves[scheme][-20:])) for scheme in SCHEMES}
print({scheme: round(value, 3) for scheme, value in final.items()})
for scheme in ("learned", "rope", "alibi"):
    assert final[scheme] < 0.35 * np.log(VOCAB), scheme
assert final["none"] > final["alibi"]

# %% [markdown]
# Learned positions, RoPE and ALiBi all learn the task. Without positions the model still does
# better than chance (the causal mask alone leaks some order, as Haviv et al. report) but worse.
# The sinusoidal model learns far more slowly in these 200 steps (about 1.5 against 0.3–0.5). A
# likely reason: the fixed table is added at full amplitude (±1) to token embeddings initialised
# GPT-2 style at 0.02, so at the start the input is almost all position and little token. A reminder
# that "works" depends on the whole recipe, not on the scheme alone.
#
# ## Claim 2: longer contexts than those seen in training

# %%
LENGTHS = [8, 16, 32]
eval_ids = {T: skip_sequences(np.random.default_rng(5), 64, T) for T in LENGTHS}
long_loss = {}
for scheme in SCHEMES:
    row = []
    for T in LENGTHS:
        try:
            row.append(loss_on(models[scheme], eval_ids[T]))
        except ValueError as error:            # a learned position table has only max_len rows
            row.append(np.nan)
            message = str(error)
    long_loss[scheme] = row
    print(f"{scheme:>10}: " + "  ".join(f"T={T}: {value:.3f}" for T, value in zip(LENGTHS, row)))
print("learned at T = 32:", message)

for offset, scheme in enumerate(["sinusoidal", "rope", "alibi", "none"]):
    plt.bar(np.arange(3) + 0.2 * offset, long_loss[scheme], width=0.2, label=scheme)
plt.xticks(np.arange(3) + 0.3, [f"T = {T}" for T in LENGTHS]); plt.ylabel("loss on the held-out sequences")
plt.xlabel("evaluation length (learned positions: cannot run past T = 8)"); plt.legend()
plt.title("trained on T = 8"); plt.show()

assert np.isnan(long_loss["learned"][1]) and np.isnan(long_loss["learned"][2])
assert np.isfinite(long_loss["sinusoidal"]).all() and long_loss["sinusoidal"][2] > 1.0
assert long_loss["alibi"][2] < 1.0 < min(long_loss["rope"][2], long_loss["none"][2])

# %% [markdown]
# ALiBi keeps its accuracy at four times the training length. RoPE runs (it has no table) but
# degrades sharply: at $T = 16$ and 32 it meets offsets, and so rotation angles, it never saw in
# training. Sinusoidal positions have no length limit either (the package computes rows past its table
# on demand, with the same formula), and fail the same way: "no limit to the number of tokens that can
# be read", as the notes put it (§1.4), is true of the formula, not of what a model trained on 8 positions
# makes of position 20. Without positions the model also falls apart. In this run both end near or beyond
# uniform guessing ($\log 8 \approx 2.08$) at $T = 32$, which of the two is worse depends on the seed. This is
# Press et al.'s "train short, test long" result in miniature.
#
# ## Claim 3: a RoPE score depends only on the offset
#
# Put the same query vector at position $m$ and the same key vector at position $n$, for every $m$ and $n$.
# The score matrix must be constant along every diagonal (a Toeplitz matrix).

# %%
q, k = np.random.default_rng(2).standard_normal((2, 16))
positions = np.arange(24)
cos, sin = rotary_angles(positions, 16)
rotated_q = rotate(np.tile(q, (24, 1)), cos, sin)
rotated_k = rotate(np.tile(k, (24, 1)), cos, sin)
scores = rotated_q @ rotated_k.T                     # (m, n)
plt.imshow(scores, cmap="RdBu"); plt.xlabel("key position n"); plt.ylabel("query position m")
plt.colorbar(); plt.title("RoPE score of one q, k pair"); plt.show()
for offset in range(-23, 24):
    diagonal = np.diagonal(scores, offset)
    assert np.allclose(diagonal, diagonal[0])

# %% [markdown]
# And ALiBi's bias: a straight penalty on distance, nothing learned. Head $h = 1, \dots, H$ adds to the score of
# query $i$ and key $j$
#
# $$b_{h,i,j} = -m_h\,|i - j|, \qquad m_h = 2^{-8h/H},$$
#
# a geometric sequence of slopes from $2^{-8/H}$ down to $2^{-8}$ (Press et al. 2022, §3, for $H$ a power of 2).
#
# **Exercise** (2 points). Write `distance_bias(n_heads, T)`: the $(H, T, T)$ array $b$ for $H$ = `n_heads`
# (a power of 2) and $T$ queries against the same $T$ keys, the steepest head first. The check tests 4 heads
# against the numbers below; its hidden tests compare other sizes with the package's `alibi_bias`.

# %% [solution] distance_bias_by_hand
def distance_bias(n_heads, T):
    """-m_h |i - j| for head h, query i, key j: (H, T, T), m_h = 2^(-8 h / H), h = 1..H."""
    ### BEGIN SOLUTION
    slopes = 2.0 ** (-8 * np.arange(1, n_heads + 1) / n_heads)                 # (H,)
    distance = np.abs(np.arange(T)[:, None] - np.arange(T)[None, :])           # (T, T)
    return -slopes[:, None, None] * distance
    ### END SOLUTION

# %% [check 2] check_distance_bias_by_hand
mine = distance_bias(4, 8)
assert np.shape(mine) == (4, 8, 8), f"the bias has shape {np.shape(mine)}, expected (H, T, T) = (4, 8, 8)"
assert np.allclose(mine[:, 7, 0], [-1.75, -0.4375, -0.109375, -0.02734375]), "head slopes 2^-2, 2^-4, 2^-6, 2^-8"
### BEGIN HIDDEN TESTS
for n_heads, T in ((1, 3), (2, 5), (8, 6), (16, 9)):
    assert np.allclose(distance_bias(n_heads, T), alibi_bias(n_heads, T, T), rtol=1e-12, atol=0), (n_heads, T)
assert np.array_equal(distance_bias(4, 8), np.transpose(distance_bias(4, 8), (0, 2, 1)))
### END HIDDEN TESTS

# %% [markdown]
# The picture for 4 heads: all four panels share one colour scale, so the slopes can be compared: the first
# head's penalty reaches $-7 \cdot 2^{-2} = -1.75$ at distance 7, the last head's only
# $-7 \cdot 2^{-8} \approx -0.03$.

# %%
biases = alibi_bias(4, 8, 8)                                       # (H, Tq, Tk)
assert np.allclose(biases[:, 7, 0], [-7 * 2.0 ** -(2 * (head + 1)) for head in range(4)])
assert np.allclose(biases, distance_bias(4, 8))
lowest = biases[:, band_mask(8, 8, 8)].min()
fig, axes = plt.subplots(1, 4, figsize=(13, 3.2), layout="constrained")
for head, axis in enumerate(axes):
    image = axis.imshow(np.where(band_mask(8, 8, 8), biases[head], np.nan), cmap="viridis", vmin=lowest, vmax=0)
    axis.set_title(f"head {head + 1}, slope 2^-{2 * (head + 1)}", fontsize=9)
    axis.set_xlabel("key position n"); axis.set_ylabel("query position m")
fig.colorbar(image, ax=axes, shrink=0.8, label="bias added to the score (one scale)")
plt.show()

# %% [markdown]
# ## Claim 4: grouped-query attention

# %%
gqa_curves, gqa_sizes = {}, {}
for n_kv in (4, 2, 1):
    model = GPT(vocab_size=VOCAB, d_model=16, n_heads=4, n_layers=1, d_ff=32, max_len=TRAIN_LEN,
                positional="alibi", n_kv_heads=n_kv, rng=0)
    gqa_sizes[n_kv] = model.num_parameters()
    gqa_curves[n_kv] = train_briefly(model)
    plt.plot(np.convolve(gqa_curves[n_kv], smooth, mode="valid"),
             label=f"n_kv_heads = {n_kv} ({gqa_sizes[n_kv]} parameters)")
plt.xlabel("step"); plt.ylabel("training loss"); plt.legend(); plt.show()

assert gqa_curves[4] == curves["alibi"]            # n_kv_heads = H is the standard model, step for step
assert gqa_sizes[4] - gqa_sizes[1] == 2 * (16 * 16 + 16) - 2 * (16 * 4 + 4)
standard = MultiHeadAttention(16, 4, rng=3)
grouped = MultiHeadAttention(16, 4, rng=3, n_kv_heads=4)
x = np.random.default_rng(4).standard_normal((2, 5, 16))
assert np.array_equal(standard(x), grouped(x))

# %% [markdown]
# ## Claim 5: relative positions, direct and skewed
#
# The direct form builds a $(T, T, hs)$ array of relative vectors; Huang et al.'s skew gets the same
# scores from a $(T, hs)$ array with one pad and one reshape. The survey note's listing of the skew
# masks the wrong triangle first (see `errata_variants.md`).

# %%
rng = np.random.default_rng(6)
qkv = rng.standard_normal((3, 2, 12, 4))
direct = RelativePositionAttention(4, max_distance=5, rng=0)
skewed = RelativePositionAttention(4, max_distance=5, skewed=True, rng=0)
assert np.allclose(direct(*qkv), skewed(*qkv), atol=1e-12)
print("largest difference:", np.abs(direct(*qkv) - skewed(*qkv)).max())

# %% [markdown]
# ## Claim 6: sparse patterns, and LoRA's merge
#
# Rows are queries, columns keys; dark = may attend. The Sparse Transformer's two heads of each
# pattern, the Longformer window with one global token, and the sliding window.

# %%
T = 16
panels = [("strided: local", strided_masks(T, 4)[0]), ("strided: every 4th", strided_masks(T, 4)[1]),
          ("fixed: own block", fixed_masks(T, 4)[0]), ("fixed: block summaries", fixed_masks(T, 4)[1]),
          ("Longformer, global 0", longformer_mask(T, 4, [0])), ("sliding window 4", band_mask(T, T, 4))]
fig, axes = plt.subplots(1, 6, figsize=(15, 2.8))
for axis, (title, mask) in zip(axes, panels):
    axis.imshow(mask, cmap="Greys"); axis.set_title(title, fontsize=9); axis.axis("off")
plt.show()

both = (strided_masks(T, 4)[0].astype(int) @ strided_masks(T, 4)[1].astype(int)) > 0
assert np.array_equal(both, np.tril(np.ones((T, T), dtype=bool)))   # two heads reach every earlier token

layer = LoRALinear(Linear(16, 16, rng=0), r=2, alpha=4, rng=1)
layer.lora_b.data[...] = np.random.default_rng(7).standard_normal((2, 16))
x = np.random.default_rng(8).standard_normal((5, 16))
assert np.allclose(layer.merged()(x), layer(x), atol=1e-12)
print("LoRA trains", layer.num_parameters(), "numbers instead of", 16 * 16)
