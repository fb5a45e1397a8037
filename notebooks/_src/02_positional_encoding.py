# %% [markdown]
# # 2. Positional encoding: the picture, the binary clock, the rotation
#
# **Sources.** Jonathan May, "Transformer Language Models", lecture notes 2025 and 2024, §1.4 "Positional Embeddings",
# with their Figure 2 (a 128-dimensional encoding of 50 positions) and the table of the numbers
# 0–15 in binary; Sachin Kumar, "Language Modeling III: Transformers" ([CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)), the slides "Functional (and fixed) position embeddings"
# and "Properties of a good positional embedding"; Greg Strabel, "Transformers" (2023), §3, eq. (17).
#
# Claims checked here:
# 1. each column of the table oscillates, fast on the left and slower to the right, like the bits
#    of a binary counter;
# 2. the encoding of position $n + k$ is a *linear* function of the encoding of position $n$, the same
#    matrix for every $n$ (an exercise, 2 points);
# 3. the values stay bounded however long the text is.
#
# The formula the package uses (`sinusoidal_table`) is
#
# $$P_{n, 2k} = \sin(n\,\omega_k), \qquad P_{n, 2k+1} = \cos(n\,\omega_k), \qquad \omega_k = 10000^{-2k/d}.$$
#
# The notes print something else; the last section plots it.
#
# **Exercise** (2 points): the rotation matrix of claim 2, in its section. Its cells carry nbgrader's metadata:
# in a student copy (`python -m minitransformer exercises make --only sinusoid_shift --notebooks`, or an nbgrader
# release) the answer is blank and a locked check cell, with hidden tests of the numbers, grades it.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import LayerNorm, SinusoidalPositionalEncoding, sinusoidal_table

# %% [markdown]
# ## Figure 2 of the notes, next to the binary counter

# %%
P = sinusoidal_table(50, 128)                     # (positions, dimensions)
bits = (np.arange(16)[:, None] >> np.arange(3, -1, -1)) & 1     # rows 0..15, most significant bit first

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4), gridspec_kw={"width_ratios": [3, 1]})
image = left.pcolormesh(P, cmap="RdBu", vmin=-1, vmax=1)
left.set_xlabel("dimension i"); left.set_ylabel("position n"); left.invert_yaxis()
left.set_title("sinusoidal encoding, d = 128, 50 positions")
fig.colorbar(image, ax=left)
right.imshow(bits, cmap="Greys", aspect="auto")
right.set_xticks(range(4), ["8", "4", "2", "1"]); right.set_yticks(range(16))
right.set_title("0–15 in binary"); right.set_ylabel("number")
plt.show()

assert P.shape == (50, 128)
assert np.array_equal(bits[5], [0, 1, 0, 1]) and np.array_equal(bits[12], [1, 1, 0, 0])

# %% [markdown]
# In the binary table the last bit flips every row, the next every two rows, then every four: each
# column is a square wave with twice the period of its right-hand neighbour. In the encoding the
# columns are smooth waves whose period grows geometrically, from $2\pi$ at the first pair of columns to nearly
# $2\pi \cdot 10000$ at the last. Both give every row a distinct pattern. We check that every position in the
# first 50 gets a distinct vector and that the periods grow geometrically.

# %%
frequencies = 1 / 10000 ** (np.arange(0, 128, 2) / 128)      # w_k, one per (sin, cos) pair
periods = 2 * np.pi / frequencies
assert np.allclose(periods[1:] / periods[:-1], 10000 ** (2 / 128))
distances = np.linalg.norm(P[:, None] - P[None], axis=-1)
assert np.all(distances[~np.eye(50, dtype=bool)] > 0.1)       # no two positions share a vector
assert np.allclose(P[:, 0::2], np.sin(np.arange(50)[:, None] * frequencies))

# %% [markdown]
# ## $P_{n+k}$ is a rotation of $P_n$
# For one frequency $\omega$, the pair $(\sin n\omega, \cos n\omega)$ is a point on the unit circle at angle
# $n\omega$. Moving $k$ positions adds the angle $k\omega$, whatever $n$ is: by the addition formulas
#
# $$\sin((n+k)\omega) = \sin(n\omega)\cos(k\omega) + \cos(n\omega)\sin(k\omega), \qquad
# \cos((n+k)\omega) = \cos(n\omega)\cos(k\omega) - \sin(n\omega)\sin(k\omega).$$
#
# So with the row-vector convention, $P_{n + k} = P_n R_k$, where $R_k$ is block-diagonal with one $2 \times 2$
# rotation block per frequency, and $R_k$ depends on $k$ only. This is the "linear function" of the notes.
#
# **Exercise** (2 points). Write `rotation_for_offset(offset, frequencies)`: the $(2K, 2K)$ matrix $R_k$ for
# $k$ = `offset` and the $K$ frequencies $\omega$ given, such that a row
# $[\sin n\omega_0, \cos n\omega_0, \sin n\omega_1, \dots]$ times $R_k$ is the row of position $n + k$. Read the
# block off the addition formulas:
# which entry multiplies $\sin(n\omega)$ to give $\sin((n+k)\omega)$? The check tests one offset on the
# package's table; its hidden tests others, other frequencies and the blocks' entries.

# %% [solution] sinusoid_shift_rotation
def rotation_for_offset(offset, frequencies):
    """Block-diagonal R, (2K, 2K) for K frequencies, with P[n + offset] = P[n] @ R (row vectors)."""
    ### BEGIN SOLUTION
    R = np.zeros((2 * len(frequencies), 2 * len(frequencies)))
    for index, w in enumerate(frequencies):
        c, s = np.cos(offset * w), np.sin(offset * w)
        R[2 * index:2 * index + 2, 2 * index:2 * index + 2] = [[c, -s], [s, c]]
    return R
    ### END SOLUTION

# %% [check 2] check_sinusoid_shift_rotation
table = sinusoidal_table(40, 16)
frequencies_16 = 1 / 10000 ** (np.arange(0, 16, 2) / 16)
R_1 = rotation_for_offset(1, frequencies_16)
assert np.shape(R_1) == (16, 16), f"R has shape {np.shape(R_1)}, expected (16, 16)"
assert np.allclose(table[:-1] @ R_1, table[1:]), "P[n] R_1 should be P[n + 1] for every n"
### BEGIN HIDDEN TESTS
for offset in (0, 3, 11):
    R_k = rotation_for_offset(offset, frequencies_16)
    assert np.allclose(table[:40 - offset] @ R_k, table[offset:], rtol=1e-12, atol=1e-12), f"offset {offset}"
assert np.allclose(rotation_for_offset(np.pi / 2, [1.0]), [[0, -1], [1, 0]], atol=1e-15)
assert np.allclose(rotation_for_offset(2.0, [0.5, 0.25]), [[np.cos(1), -np.sin(1), 0, 0], [np.sin(1), np.cos(1), 0, 0],
                   [0, 0, np.cos(.5), -np.sin(.5)], [0, 0, np.sin(.5), np.cos(.5)]], atol=1e-15)
### END HIDDEN TESTS

# %% [markdown]
# The same holds at the width of the picture, for every position of a long table at once:

# %%
long_table = sinusoidal_table(1000, 128)
for offset in (1, 5, 37):
    R = rotation_for_offset(offset, frequencies)
    assert np.allclose(long_table[:-offset] @ R, long_table[offset:], atol=1e-9)   # every n at once
    assert np.allclose(R @ R.T, np.eye(128))                                        # a rotation
print("P[n + k] = P[n] R_k holds for k = 1, 5, 37 and all n < 1000")

# %% [markdown]
# ## Bounded for any length
# Every entry is a sine or cosine, so it lies in $[-1, 1]$, and each $(\sin, \cos)$ pair has length 1,
# so every position vector has length $\sqrt{d/2} = 8$ however far along the text it is (the Kumar slides'
# "values should be bounded").

# %%
far = SinusoidalPositionalEncoding(128, max_len=100_000).table
norms = np.linalg.norm(far, axis=1)
assert np.abs(far).max() <= 1 and np.allclose(norms, 8)

# %% [markdown]
# ## The formula as printed in the notes
# Both versions of the notes print $p_n^{(i)} = n \times \sin(\omega_k)$ for $i = 2k$ and
# $n \times \cos(\omega_k)$ for $i = 2k + 2$. Two things are wrong:
#
# * **the index.** $i = 2k + 2$ is the *even* index $2(k + 1)$: it collides with the sine of the next
#   pair, and no odd index is ever defined. The cosine belongs at $i = 2k + 1$;
# * **the product.** $n \times \sin(\omega_k)$ multiplies the position by a constant. Every column is then a
#   straight line through 0: nothing oscillates, values grow without bound, and $p_n = n \, p_1$, so
#   all positions point in the same direction.
#
# Below, "as printed" keeps the printed product but puts the cosine at the odd index (the only way to
# fill the table at all).

# %%
def as_printed(max_len, d):
    """The notes' formula n * sin(w_k), n * cos(w_k), with the cosine moved to the odd index."""
    n = np.arange(max_len)[:, None]
    w = 1 / 10000 ** (np.arange(0, d, 2) / d)
    table = np.empty((max_len, d))
    table[:, 0::2], table[:, 1::2] = n * np.sin(w), n * np.cos(w)
    return table


printed = as_printed(50, 128)
even_indices_written_twice = sorted(set(range(0, 128, 2)) & {2 * k + 2 for k in range(64)})
print("even indices the printed rule writes twice:", len(even_indices_written_twice), "of 64")
print("largest |entry| at n = 49: printed", np.abs(printed[49]).max(), " correct", np.abs(P[49]).max())

assert len(even_indices_written_twice) == 63 and not any((2 * k + 2) % 2 for k in range(64))
assert np.allclose(printed[10], 10 * printed[1])          # p_n = n p_1: one direction for every n
assert np.abs(as_printed(10_000, 128)).max() > 9_000      # unbounded

# %% [markdown]
# Because every printed vector is a multiple of $p_1$, anything that ignores the length of a vector
# cannot tell the positions apart. LayerNorm (notes §1.3) is such a thing: it subtracts the mean and
# divides by the spread, so a vector and any positive multiple of it come out the same.

# %%
norm = LayerNorm(128, eps=1e-12)      # a tiny eps, so that only the scale invariance shows
normalised = norm(printed[1:])
assert np.allclose(normalised, normalised[0], atol=1e-6)    # positions 1..49 become identical
assert not np.allclose(norm(P[1:]), norm(P[1:])[0])

fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.6))
image = a.pcolormesh(printed, cmap="RdBu", vmin=-50, vmax=50)
a.invert_yaxis(); a.set_title("as printed: n × sin(w_k), n × cos(w_k)"); a.set_xlabel("dimension i")
a.set_ylabel("position n"); fig.colorbar(image, ax=a)
n = np.arange(200)
b.plot(n, as_printed(200, 128)[:, 1], label="printed, i = 1")
b.plot(n, sinusoidal_table(200, 128)[:, 1], label="sin/cos(n·w_k), i = 1")
b.plot(n, sinusoidal_table(200, 128)[:, 20], label="sin/cos(n·w_k), i = 20")
b.set_xlabel("position n"); b.set_ylim(-3, 10); b.legend(fontsize=8); b.set_title("one column against n")
plt.show()
