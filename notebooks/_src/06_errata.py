# %% [markdown]
# # 6. The lectures' errata, each with a computation
#
# The five lecture sources are good teaching material, and they contain mistakes. Where they do, the
# package follows the papers, and this notebook shows the difference with numbers. Every item names the
# source and section, states the mistake and the correction in our own words, and proves it with an
# `assert` where a computation applies.
#
# | short name | source |
# | --- | --- |
# | the notes (2024) | Jonathan May, "Transformer Language Models", lecture notes, September 2024 |
# | the notes (2025) | Jonathan May, "Transformer Language Models", lecture notes, September 2025 |
# | Wu | Si Wu, "Transformers", slides, CS 6120 Natural Language Processing, Northeastern University ([course page](https://siwu.io/nlp-class)) |
# | Kumar | Sachin Kumar, "Language Modeling III: Transformers", slides, CSE 5525, Ohio State, 2025 ([course page](https://shocheen.github.io/cse-5525-spring-2025/)) |
# | Strabel | Greg Strabel, "Transformers", survey note, 2023 |
#
# Contents: E1 the positional-encoding formula · E2 the mask applied after the softmax · E3 "Vα" /
# "XVα" · E4 footnote 6 in words · E5 the extra ReLU in the feed-forward formula · E6 dropout of
# "parameters" · E7 the BPE listing, which merges nothing · E8 the Kumar slides' softmax numbers ·
# E9 the [1 × N] position-embedding matrix · E10 the residual "concatenation" · E11 GPT's objective
# called masked · E12 the BLEU definitions · E13 the relative-position "skewing" listing ·
# E14 Wu's block reads keys and values from an undefined vector · E15 Wu's parallel block is post-norm ·
# E16 "96 layers: GPT-3-large" · E17 the "N × d" result of one head · E18 Wu's i written for j ·
# E19 the warm-up rule does not decay to 0 · E20 "WebText based on Common Crawl" · E21 the 2024 notes'
# misspelt link · E22 the worked example's inputs are not printed.

# %%
import re

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import (
    GPT,
    BertMLM,
    DecoderBlock,
    Dropout,
    FeedForward,
    LearnedPositionalEmbedding,
    ScaledDotProductAttention,
    TransformerBlock,
    causal_mask,
    get_stats,
    learn_bpe,
    lecture_vocab,
    sinusoidal_table,
    skew,
    softmax,
)
from minitransformer.generation.bleu import brevity_penalty, corpus_statistics, ngram_counts

rng = np.random.default_rng(0)
np.set_printoptions(precision=4, suppress=True)

# %% [markdown]
# ## E1. The sinusoidal formula (notes 2024 and 2025, §1.4)
# **Printed:** $p_n^{(i)} = n \times \sin(\omega_k)$ if $i = 2k$, $n \times \cos(\omega_k)$ if $i = 2k + 2$.
# **Correct** (Vaswani et al. 2017; also the survey note §3, eq. 17, and the Kumar slides):
# $\sin(n \, \omega_k)$ at $i = 2k$ and $\cos(n \, \omega_k)$ at $i = 2k + 1$.
#
# Two separate slips. (a) The position belongs *inside* the sine: $n \times \sin(\omega_k)$ is a straight line in
# n, unbounded, and makes every position vector a multiple of the first. (b) 2k + 2 is even, so the
# cosines land on the sine slots of the next frequency and the odd slots stay empty. Notebook 2 shows
# the full picture; here are the two facts in numbers.

# %%
d, n = 16, np.arange(60)[:, None]
w = 1 / 10000 ** (np.arange(0, d, 2) / d)
printed_sine_part = n * np.sin(w)                       # the printed product, sine slots only
correct = sinusoidal_table(60, d)
slots_of_printed_cosines = {2 * k + 2 for k in range(d // 2)}
assert slots_of_printed_cosines & set(range(0, d, 2))            # they collide with sine slots
assert not slots_of_printed_cosines & set(range(1, d, 2))        # and no odd slot is ever filled
assert np.allclose(printed_sine_part[7], 7 * printed_sine_part[1])
assert np.abs(printed_sine_part).max() > 40 and np.abs(correct).max() <= 1
print("largest printed entry by n = 59:", printed_sine_part.max().round(1), "| correct table stays in [-1, 1]")

# %% [markdown]
# ## E2. The causal mask multiplied into α after the softmax (notes 2024 and 2025, §1.1)
# The notes multiply the attention weights, element by element, by the lower-triangular 0/1 matrix M.
# Each row of α was a distribution over *all* positions; zeroing the future entries leaves a row that
# sums to less than 1, so the output is a shrunken average (the first position keeps only its own
# weight, however small). The fix is to mask *before* the softmax with −∞, as the Si Wu slides do and
# as the package does; renormalising the rows afterwards gives the same thing (notebook 1).

# %%
T = 5
scores = rng.standard_normal((T, T)) * 2
alpha = softmax(scores)
M = causal_mask(T, T).astype(float)                 # the notes' matrix M
row_sums = (alpha * M).sum(axis=1)
masked = ScaledDotProductAttention(causal=True, scale=1.0)
masked(np.eye(T), scores.T, np.eye(T))              # q = I and k = scores^T give raw scores = scores
print("row sums of alpha * M:", row_sums)
assert np.all(row_sums[:-1] < 1) and np.isclose(row_sums[-1], 1)
assert np.allclose(masked.alpha.sum(axis=1), 1)
assert np.allclose(masked.alpha, (alpha * M) / row_sums[:, None])

# %% [markdown]
# ## E3. "Vα" (2024) and "XVα" (2025), §1.1
# The rows of $X$ are the positions; the values are the rows of $X W_V$, a $(T \times d_v)$ matrix; $\alpha$ is $(T \times T)$
# with one row per query. Each output row is a weighted sum of value rows, i.e. $\alpha (X W_V)$: $\alpha$ on the
# **left**. In the printed order the shapes do not even fit unless $d_v = T$, and when they happen to fit
# the result is something else.

# %%
T, C, d_v = 5, 4, 3
X, w_v = rng.standard_normal((T, C)), rng.standard_normal((C, d_v))
alpha = softmax(rng.standard_normal((T, T)))
attention = ScaledDotProductAttention(scale=1.0)
try:
    (X @ w_v) @ alpha
    raise AssertionError("XV alpha should not have fitted")
except ValueError as error:
    print("X V alpha:", error)
values = X @ w_v
weights_as_scores = np.log(alpha)                   # softmax(log alpha) = alpha
out = attention(weights_as_scores, np.eye(T), values)
assert np.allclose(out, alpha @ values)
square_values = rng.standard_normal((T, T))          # d_v = T: the printed order runs, and is wrong
assert not np.allclose(square_values @ alpha, alpha @ square_values)

# %% [markdown]
# ## E4. Footnote 6 in words (notes 2024 and 2025, §1.1)
# The formula in the footnote divides the scores by $\sqrt{|K|}$, but the sentence after it says "divide by
# the dimension of K". The square root matters: with unit-variance entries a dot product of two
# $d_k$-vectors has standard deviation $\sqrt{d_k}$, so dividing by $\sqrt{d_k}$ brings the scores back to unit scale,
# while dividing by $d_k$ shrinks them to $1/\sqrt{d_k}$ and makes the attention nearly uniform. ($|K|$ must
# also be read as the key size $d_k$ per head, not the size of the matrix $K$.)

# %%
d_k = 64
q, k = rng.standard_normal((2000, d_k)), rng.standard_normal((2000, d_k))
raw = np.sum(q * k, axis=1)
print("std of q.k:", raw.std().round(2), " / sqrt(d_k):", (raw / 8).std().round(3), " / d_k:", (raw / 64).std().round(3))
assert abs(raw.std() / np.sqrt(d_k) - 1) < 0.1 and (raw / d_k).std() < 0.2
rows = raw[:16 * 8].reshape(16, 8)                   # 16 queries over 8 keys
peak_sqrt = softmax(rows / np.sqrt(d_k)).max(axis=1).mean()
peak_dim = softmax(rows / d_k).max(axis=1).mean()
assert peak_dim < 0.2 < peak_sqrt                    # dividing by d_k: close to uniform (1/8 = .125)

# %% [markdown]
# ## E5. An extra ReLU around the feed-forward layer (notes 2024 and 2025, §1)
# The notes write the position-wise layer as $\max(0, \max(0, x W_1 + b_1) W_2 + b_2)$. The paper (and the
# Si Wu slides, "$\mathrm{FFN}(x) = \mathrm{ReLU}(x W_1 + b_1) W_2 + b_2$") have only the inner ReLU: the second linear map
# writes into the residual stream, and it must be able to *subtract* as well as add. With the outer
# ReLU every feed-forward update would be non-negative.

# %%
ff = FeedForward(8, 32, rng=0)
update = ff(rng.standard_normal((100, 8)))
print("fraction of negative feed-forward outputs:", (update < 0).mean())
assert 0.3 < (update < 0).mean() < 0.7

# %% [markdown]
# ## E6. Dropout zeroes activations, not parameters (notes 2024 and 2025, §1.6)
# The notes describe dropout as treating a *parameter* as 0 with probability 0.1. Dropout (Srivastava
# et al. 2014; the paper's "residual dropout") zeroes *outputs of a layer* (activations), and scales
# the survivors by 1/(1 − p) so that the expected value is unchanged; the weights are never touched.
# (Zeroing weights is a different method, DropConnect.)

# %%
drop = Dropout(0.1, rng=0)
activations = np.ones(10_000)
dropped = drop(activations)
print("values after dropout:", np.unique(dropped.round(6)), " kept:", (dropped > 0).mean())
assert set(np.unique(dropped.round(6))) == {0.0, round(1 / 0.9, 6)}
assert abs(dropped.mean() - 1) < 0.02 and drop.parameters() == []
drop.eval()
assert np.array_equal(drop(activations), activations)     # and nothing at all at evaluation time

# %% [markdown]
# ## E7. The survey note's BPE listing merges nothing (Strabel §12)
# The listing builds its merge pattern as `(?!\S)` + the escaped pair + `(!\S)`. Both ends are wrong:
#
# * `(?!\S)` is a *lookahead* ("the next character is not a non-space"), placed before a pair that
#   starts with a non-space character: it can never succeed. The intended guard is the lookbehind
#   `(?<!\S)`, "the previous character is not a non-space", i.e. the pair starts a symbol.
# * `(!\S)` is not a lookaround at all but a group matching a literal `!` and a character; the intended
#   `(?!\S)` says the pair ends a symbol.
#
# And a third slip: each match is replaced by `' '.join(pair)`, the pair *with*
# its space, which is exactly the text that matched. Sennrich et al.'s original joins with `''`.
#
# So as printed nothing is ever merged, the pair counts never change, and the loop picks the same best
# pair, ('e', 's'), ten times. Fixing only one of the two parts changes nothing; fixing both gives the
# lecture's ten merges. The package's `merge_vocab_with_pattern` runs any pattern and joiner through
# the same code as its `merge_vocab`.

# %%
from minitransformer.tokenizers.bpe.reference import merge_vocab_with_pattern


def ten_merges(before, after, joiner):
    """The listing's loop, with the lookarounds and the joiner given."""
    vocab, chosen = lecture_vocab({"low": 5, "lower": 2, "newest": 6, "widest": 3}), []
    for _ in range(10):
        pairs = get_stats(vocab)
        best = max(pairs, key=pairs.get)
        chosen.append(best)
        vocab = merge_vocab_with_pattern(best, vocab, before, after, joiner)
    return chosen


printed_regex, intended_regex = (r"(?!\S)", r"(!\S)"), (r"(?<!\S)", r"(?!\S)")
as_printed = ten_merges(*printed_regex, joiner=" ")
print("as printed:          ", as_printed)
print("regex fixed only:    ", ten_merges(*intended_regex, joiner=" ")[:3], "...")
print("both fixed:          ", ten_merges(*intended_regex, joiner=""))
assert as_printed == [("e", "s")] * 10
assert ten_merges(*intended_regex, joiner=" ") == [("e", "s")] * 10
assert ten_merges(*printed_regex, joiner="") == [("e", "s")] * 10
assert ten_merges(*intended_regex, joiner="") == learn_bpe({"low": 5, "lower": 2, "newest": 6, "widest": 3}, 10)
printed_pattern = re.compile(printed_regex[0] + re.escape("e s") + printed_regex[1])
assert not any(printed_pattern.search(word) for word in ["n e w e s t </w>", "e s", "x e s!y", "e s!x"])

# %% [markdown]
# ## E8. The softmax numbers on the Kumar slides ("Step 3")
# The slides compute the scores 92, 124, 22, 8 of one query against four keys, divide them by 8
# ($= \sqrt{64}$) and print the weights $a_2 = .91$, $a_3 = .01$, $a_4 = 0$ (so $a_1$ would be about .08). The actual
# softmax of [11.5, 15.5, 2.75, 1] is about [.018, .982, .000003, .0000005]: a 4-point gap in the
# scaled scores is a factor $e^4 \approx 55$ in weight, and a gap of 12.75 is a factor of about 340,000.
# No other divisor reproduces the printed pair either: the one that makes $a_2 = .91$ makes $a_3$ about
# .0006, not .01 (the plot).

# %%
slide_scores = np.array([92, 124, 22, 8])
weights = softmax(slide_scores / 8)
print("softmax(scores / 8) =", weights)
assert np.allclose(weights, [0.018, 0.982, 0, 0], atol=1e-3)
assert abs(weights[1] - 0.91) > 0.05 and abs(weights[2] - 0.01) > 0.009

divisors = np.linspace(4, 40, 721)
curves = softmax(slide_scores[None, :] / divisors[:, None])          # (divisors, 4)
at_091 = np.argmin(np.abs(curves[:, 1] - 0.91))
print(f"a_2 = .91 needs a divisor of {divisors[at_091]:.1f}; then a_3 = {curves[at_091, 2]:.4f}")
assert curves[at_091, 2] < 0.002

fig, ax = plt.subplots(figsize=(6.5, 3.5))
for index in range(4):
    ax.plot(divisors, curves[:, index], label=f"a_{index + 1} (score {slide_scores[index]})")
ax.plot([8, 8, 8], [0.91, 0.01, 0.0], "kx", ms=9, label="printed on the slide")
ax.axvline(8, ls=":", color="k"); ax.set_xlabel("divisor of the scores"); ax.set_ylabel("weight")
ax.legend(fontsize=8); ax.set_title("softmax(scores / divisor)")
plt.show()

# %% [markdown]
# ## E9. The position-embedding matrix of shape [1 × N] (Si Wu slides, "Position Embeddings")
# The slides ask to learn $E_\mathrm{pos}$ "of shape [1 × N]". A learned table holds one d-dimensional vector per
# position, [N × d] (N positions up to the maximum length), so that it can be added row by row to the
# [N × d] token embeddings X, as the same slides do two pages earlier. A [1 × N] row cannot be added
# to X at all unless N = d, and then it would add the same row to every position.

# %%
N, d = 6, 4
positions = LearnedPositionalEmbedding(max_len=N, d=d, rng=0)
X = rng.standard_normal((N, d))
assert positions.weight.shape == (N, d)
assert np.allclose(positions(X), X + positions.weight.data)
try:
    X + rng.standard_normal((1, N))
    raise AssertionError("[1 x N] should not broadcast against [N x d]")
except ValueError as error:
    print("X + E_pos[1 x N]:", error)

# %% [markdown]
# ## E10. A residual connection adds, it does not concatenate (Kumar slides)
# One slide writes the residual as v = z + x, and a later one says "We concat w/ a residual
# connection". It is an addition: the sublayer's output and its input have the same width C, and the
# block's output keeps that width, which is what lets blocks be stacked. Concatenation would double
# the width at every sublayer (×4 per block), and the next block would not accept it.

# %%
C = 8
block = TransformerBlock(d_model=C, n_heads=2, d_ff=16, rng=0)
x = rng.standard_normal((1, 5, C))
y = block(x)
assert y.shape == x.shape
try:
    TransformerBlock(d_model=C, n_heads=2, d_ff=16, rng=1)(np.concatenate([y, x], axis=-1))
    raise AssertionError("a doubled width should be rejected")
except ValueError as error:
    print("next block, concatenated input:", error)
print("width after 6 blocks if each of the 12 sublayers concatenated:", C * 2 ** 12)

# %% [markdown]
# Two smaller points on the same slides: the decoder differs from the encoder by a whole
# cross-attention *sublayer* (its own residual connection and LayerNorm), not by one extra "attention
# head", and its self-attention is masked (the slides say so later). The package's `DecoderBlock` has
# the three sublayers; its output keeps the decoder's width and length whatever the source length.

# %%
decoder = DecoderBlock(d_model=C, n_heads=2, d_ff=16, rng=2)
encoder_output = rng.standard_normal((1, 7, C))                       # 7 source positions
target = decoder(y, encoder_output)
assert target.shape == y.shape
assert decoder.self_attn.causal and not decoder.cross_attn.causal
assert decoder.cross_attn.attention.alpha.shape == (1, 2, 5, 7)       # (B, H, target T, source S)
print([name for name, _ in decoder.named_children()])

# %% [markdown]
# ## E11. GPT's pre-training objective is left-to-right, not masked (Strabel §4)
# The survey note says GPT pre-trains "with a masked language model objective" and that fine-tuning
# "continued to use the masked language modeling". Its own eq. (18) is the left-to-right objective:
# each token is predicted from the k tokens *before* it, and the decoder's attention is causal. A
# masked LM (BERT, Strabel §8) hides some tokens and predicts them from both sides. (Eq. (22) also
# lost its parentheses: $L_3(C) = L_2(C) + \lambda L_1(C)$; and eq. (21) calls the last layer's state $h_l^m$
# where eq. (19) numbers the layers $1 \dots n$, so it is $h_n^m$.)
#
# The computation: in a GPT the prediction at position t cannot depend on any later token. Changing
# the tokens after t leaves every logit up to t unchanged, to the last bit; in the package's masked LM
# (`BertMLM`, a bidirectional encoder) the early predictions change.

# %%
gpt = GPT(vocab_size=13, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=10, rng=0)
ids = rng.integers(0, 13, size=(1, 10))
changed = ids.copy()
changed[0, 6:] = (changed[0, 6:] + 1) % 13             # rewrite the future from position 6 on
logits, logits_changed = gpt(ids), gpt(changed)
assert np.array_equal(logits[:, :6], logits_changed[:, :6])
assert not np.allclose(logits[:, 6:], logits_changed[:, 6:])

bert = BertMLM(vocab_size=13, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_len=10, pad_id=0, rng=0)
ids, changed = np.maximum(ids, 1), np.maximum(changed, 1)          # id 0 is BERT's padding
assert not np.allclose(bert(ids)[:, :6], bert(changed)[:, :6])

# %% [markdown]
# ## E12. The BLEU definitions (Strabel §1.3)
# **Definition 1.3, the substring count.** The note counts the positions i with i + M ≤ K and
# $y_i \dots y_{i+M} = s$, where $s$ has $M$ symbols. But $y_i \dots y_{i+M}$ has $M + 1$ symbols, so it never equals $s$ and
# every count is 0; the modified precision of Definition 1.4 then divides 0 by 0. Reading the window as
# the $M$ symbols $y_i \dots y_{i+M-1}$ but keeping the bound $i + M \le K$ is still wrong: it stops one start early
# and never counts the n-gram that ends the sentence. Right:
# $i = 1 \dots K - M + 1$ with the window $y_i \dots y_{i+M-1}$. The two functions below write the two wrong readings
# literally, with 1-based i; the package's `ngram_counts` (in `minitransformer.generation.bleu`) is the right one.
# (Definitions 1.4 and 1.5 also reuse M for the number of sentences.)
#
# **§1.3.1 and eq. (10).** The heading "Bilingual Evaluation Understudy (BLEU)" has no formula under it:
# $\mathrm{BLEU} = \mathrm{BP} \cdot \exp\left(\sum_n w_n \log p_n\right)$, with $w_n = 1/4$ for $n = 1 \dots 4$. And eq. (10) picks, per sentence, the
# reference length closest to the candidate's without saying what to do on a tie; Papineni et al.'s
# script takes the shorter (so does `minitransformer.generation.bleu`), and the choice changes the brevity penalty
# of eq. (8). (And the plural of corpus, in Definitions 1.4 and 1.5, is corpora.)

# %%
def count_as_printed(s, y):
    M, K = len(s), len(y)
    return sum(1 for i in range(1, K + 1) if i + M <= K and y[i - 1:i + M] == s)          # y_i..y_{i+M}


def count_window_fixed_bound_not(s, y):
    M, K = len(s), len(y)
    return sum(1 for i in range(1, K + 1) if i + M <= K and y[i - 1:i + M - 1] == s)      # y_i..y_{i+M-1}


sentence = tuple("the cat the hat the end".split())
for gram in (("the",), ("the", "cat"), ("the", "end"), ("end",)):
    print(gram, "printed:", count_as_printed(gram, sentence), " bound kept:", count_window_fixed_bound_not(gram, sentence),
          " package:", ngram_counts(list(sentence), len(gram))[gram])
assert ngram_counts(list(sentence), 1)[("the",)] == 3 and ngram_counts(list(sentence), 2)[("the", "end")] == 1
assert all(count_as_printed(gram, sentence) == 0 for gram in (("the",), ("the", "cat"), sentence[:3]))
assert count_window_fixed_bound_not(("the", "end"), sentence) == 0 == count_window_fixed_bound_not(("end",), sentence)

# a 4-token hypothesis with references of 2 and 6 tokens: both are 2 away
*_, c, r = corpus_statistics(["a b c d"], [["a b", "a b c d e f"]])
print(f"c = {c}, r = {r}: BP = {brevity_penalty(c, r)}; with the longer reference BP = {brevity_penalty(c, 6):.4f}")
assert r == 2 and brevity_penalty(c, 2) == 1 and np.isclose(brevity_penalty(c, 6), np.exp(-0.5))

# %% [markdown]
# ## E13. The relative-position "skewing" listing (Strabel §11, Algorithm 1)
# Algorithm 1 computes relative-position logits with the skewing trick of the Music Transformer
# (Huang et al. 2018): multiply by the table of relative embeddings $E^r$, pad a zero column on the left,
# reshape the $(L \times (L+1))$ result to $((L+1) \times L)$, drop the first row. Row $r$ of $E^r$ embeds the relative
# distance r − (L − 1), from −(L − 1) up to 0 (the paper's order; the note does not say). After
# skewing, entry $(i, j)$ is $q_i \cdot e_{j-i}$, which is what a causal query $i$ needs for every key $j \le i$.
# Three slips (see also `tests/test_relative_position.py`):
#
# 1. **The mask covers the wrong triangle.** Before skewing the listing multiplies by the
#    lower-triangular "$m_{ij} = 1$ if $i \ge j$". The entries that the skew moves into the causal (lower)
#    triangle are those on or below the anti-diagonal (0-based j ≥ L − 1 − i); the printed mask zeroes
#    some of them, including every query's score with itself except the last. With the anti-diagonal
#    mask, or with no mask at all (attention's causal mask removes the upper triangle later anyway, which
#    is why the package's `skew` has no mask step), the result is right.
# 2. **Step 6's index range contradicts its shape:** C is declared (L + 1) × L but i runs only to L,
#    and step 7 then reads row L + 1.
# 3. **Step 1 uses the input X, not the queries.** In the paper the skewed product is $Q {E^r}^\top$ per head,
#    with $Q = X W_Q$ and $E^r$ of the head's width, added to $Q K^\top$ before the scaling and the softmax.
#
# The function below follows the seven printed steps literally (with the queries, per point 3), the
# mask as a parameter.

# %%
def skewed_relative_logits(q, E_r, mask):
    """Strabel's Algorithm 1, step by step; `mask` is the (L, L) 0/1 matrix of its step 2."""
    L = len(q)
    A = (q @ E_r.T) * mask                               # steps 1-3
    B = np.hstack([np.zeros((L, 1)), A])                 # step 4: (L, L + 1), zero column first
    V = B.reshape(-1)                                    # step 5: vec(B^T) = the rows of B in turn
    C = V.reshape(L + 1, L)                              # step 6: (L + 1, L), rows 1 .. L + 1
    return C[1:]                                         # step 7: drop the first row


L, d = 5, 3
q, E_r = rng.standard_normal((L, d)), rng.standard_normal((L, d))
wanted = np.array([[q[i] @ E_r[j - i + L - 1] if j <= i else 0.0 for j in range(L)] for i in range(L)])
causal_part = np.tril(np.ones((L, L), dtype=bool))
printed_mask = np.tril(np.ones((L, L)))                  # m_ij = 1 if i >= j
anti_diagonal_mask = np.fliplr(printed_mask)             # m_ij = 1 if i + j >= L - 1 (0-based)

as_printed = skewed_relative_logits(q, E_r, printed_mask)
corrected = skewed_relative_logits(q, E_r, anti_diagonal_mask)
print("wanted\n", wanted, "\nas printed\n", as_printed)
assert not np.allclose(as_printed[causal_part], wanted[causal_part])
assert np.isclose(as_printed[0, 0], 0) and not np.isclose(wanted[0, 0], 0)   # query 1 loses its own score
assert np.allclose(corrected, wanted)                                     # exact, upper triangle 0 too
assert np.allclose(skew(q @ E_r.T)[causal_part], wanted[causal_part])     # the package's skew, no mask

fig, axes = plt.subplots(1, 3, figsize=(10, 3))
for ax, (matrix, title) in zip(axes, [(wanted, "q_i · e_(j−i), j ≤ i"), (as_printed, "Algorithm 1 as printed"),
                                      (corrected, "with the anti-diagonal mask")]):
    ax.imshow(matrix, cmap="RdBu", vmin=-3, vmax=3); ax.set_title(title, fontsize=9)
    ax.set_xlabel("key j"); ax.set_ylabel("query i")
plt.tight_layout(); plt.show()

# %% [markdown]
# ## E14. Wu's block takes keys and values from an undefined vector ("Putting together a single transformer block")
# The slide writes the attention step as $t^2_i = \mathrm{MultiHeadAttention}(t^1_i, [x^1_1, \dots, x^1_N])$: the
# query is the normalised $t^1_i = \mathrm{LayerNorm}(x_i)$, but the keys and values come from vectors $x^1_j$
# that the slide never defines. In the pre-norm block the slide is describing (and in the package's
# `TransformerBlock`), keys and values come from the same normalised vectors as the queries:
# $[t^1_1, \dots, t^1_N]$. Reading $x^1$ as the raw input $x$ gives a different block. Both are computed below with one block's own sublayers (`attn` with
# `context=` for the keys and values), on residual streams of several scales: the gap is smallest when x is
# already of unit scale and grows as its scale moves away from 1, because LayerNorm removes the scale from
# $t^1$ but not from $x$ (the printed numbers below: about 0.8 at scale 1, 2.6 at scale 2, 6.6 at scale 4).

# %%
from minitransformer import MultiHeadAttention, noam_rate

wu_block = TransformerBlock(d_model=16, n_heads=2, d_ff=64, rng=0)          # pre-norm, as Wu's slide
gaps = {}
for stream_scale in (0.5, 1.0, 2.0, 4.0):
    x = stream_scale * np.random.default_rng(0).standard_normal((1, 8, 16))
    right = wu_block(x)                                                     # K, V from t1 = LayerNorm(x)
    t1 = wu_block.ln1(x)
    h = x + wu_block.attn(t1, context=x)                                    # K, V from the raw x
    as_raw_x = h + wu_block.ff(wu_block.ln2(h))
    assert np.allclose(wu_block.attn(t1, context=t1), wu_block.attn(t1))   # K, V from t1: the block's own form
    gaps[stream_scale] = float(np.abs(right - as_raw_x).max())
print("largest output difference, K and V from raw x against from t1, by the stream's scale:",
      {scale: round(gap, 2) for scale, gap in gaps.items()})
assert gaps[1.0] > 0.3 and gaps[4.0] > 3
assert gaps[4.0] > gaps[2.0] > gaps[1.0] < gaps[0.5]        # larger as the scale moves away from 1

# %% [markdown]
# ## E15. Wu's "Parallelizing Multi-head Attention" block is post-norm; the deck says pre-norm
# The same deck announces "we are using the pre-norm version" and writes the per-token equations that way
# ($t^1 = \mathrm{LayerNorm}(x), \dots, h = t^5 + t^3$), but the matrix form on the parallelising slide is
# $O = \mathrm{LayerNorm}(X + \mathrm{MultiHeadAttention}(X))$, $H = \mathrm{LayerNorm}(O + \mathrm{FFN}(O))$, and
# the list $T^1 \dots H$ below it: the
# post-norm block of Vaswani et al. (2017). The two are different functions of the same weights. Two
# package blocks built with one seed share every weight; their outputs differ (notebook 11 compares the
# two in depth).

# %%
pre_block = TransformerBlock(d_model=16, n_heads=2, d_ff=64, norm="pre", rng=0)
post_block = TransformerBlock(d_model=16, n_heads=2, d_ff=64, norm="post", rng=0)
assert all(np.array_equal(a.data, b.data) for a, b in zip(pre_block.parameters(), post_block.parameters()))
norm_gaps = {}
for stream_scale in (1.0, 2.0, 4.0):
    x = stream_scale * np.random.default_rng(0).standard_normal((1, 8, 16))
    norm_gaps[stream_scale] = float(np.abs(pre_block(x) - post_block(x)).max())
    assert np.allclose(post_block(x).std(axis=-1), 1, atol=1e-3)          # post-norm ends normalised
print("largest output difference, pre-norm against post-norm, same weights, by the stream's scale:",
      {scale: round(gap, 2) for scale, gap in norm_gaps.items()})
assert norm_gaps[1.0] > 1 and norm_gaps[2.0] > 3

# %% [markdown]
# ## E16. "96 layers: GPT-3-large" (Wu, "LLMs and transformer blocks")
# In the GPT-3 paper (Brown et al. 2020, Table 2.1) the model called GPT-3 Large has 24 layers,
# $d_\mathrm{model} = 1536$, 760 M parameters; the 96-layer model is the largest one, GPT-3 175B ($d_\mathrm{model} = 12288$, 96 heads). The
# layer count and width fix the parameter count: the package's `GPT` has V·C + T·C embedding weights, then
# per layer $12 C^2 + 13 C$, and $2 C$ for the final LayerNorm, which we first check against `num_parameters()` of
# a small GPT, then apply to GPT-3's sizes (V = 50257, T = 2048; GPT-3's feed-forward is 4·C wide, as here).
# With 24 layers of 1536 the count is GPT-3 Large's 760 M; 96 layers of 1536 would be 2.8 B; 96 layers of
# 12288 give the 175 B model.

# %%
def gpt_parameters(V, T, C, n_layers):
    """Weights of the package's GPT with d_ff = 4C and tied output: embeddings, blocks, final LayerNorm."""
    return V * C + T * C + n_layers * (12 * C * C + 13 * C) + 2 * C


small = GPT(vocab_size=100, d_model=64, n_heads=4, n_layers=3, d_ff=256, max_len=32, rng=0)
assert small.num_parameters() == gpt_parameters(100, 32, 64, 3)
sizes = {"24 layers, C = 1536 (GPT-3 Large)": (24, 1536), "96 layers, C = 1536": (96, 1536),
         "96 layers, C = 12288 (GPT-3 175B)": (96, 12288)}
counts = {name: gpt_parameters(50257, 2048, C, layers) for name, (layers, C) in sizes.items()}
for name, count in counts.items():
    print(f"{name:36s} {count / 1e9:7.2f} B parameters")
assert abs(counts["24 layers, C = 1536 (GPT-3 Large)"] / 760e6 - 1) < 0.01
assert abs(counts["96 layers, C = 12288 (GPT-3 175B)"] / 175e9 - 1) < 0.01
assert counts["96 layers, C = 1536"] > 3 * 760e6

# %% [markdown]
# ## E17. One attention head's result has the values' width, not "N × d" (Wu, "Parallelizing attention")
# The slide multiplies $\operatorname{softmax}(Q K^\top / \sqrt{d_k})$ by $V$ "resulting in a matrix of shape N × d". $V = X W^V$ is
# $N \times d_v$, and the product has $V$'s width; the same deck says two slides earlier that the projections may
# go to a lower dimension $d_k$. With $h$ heads of width $d/h$ each head's result is $N \times d/h$; only after the
# concatenation and $W^O$ is it $N \times d$ again.

# %%
N, d, d_k, d_v = 5, 12, 4, 3
X = rng.standard_normal((N, d))
w_q, w_k, w_v = rng.standard_normal((d, d_k)), rng.standard_normal((d, d_k)), rng.standard_normal((d, d_v))
head = ScaledDotProductAttention(causal=True)(X @ w_q, X @ w_k, X @ w_v)
print("one head:", head.shape)
assert head.shape == (N, d_v) != (N, d)
mha = MultiHeadAttention(d_model=d, n_heads=4, causal=True, rng=0)
out = mha(X[None])
assert mha.attention.v.shape == (1, 4, N, d // 4) and (mha.attention.alpha @ mha.attention.v).shape[-1] == 3
assert out.shape == (1, N, d)                                           # N x d only after concat and W_O

# %% [markdown]
# ## E18. Wu's attention-head slides write i where j is meant ("Attention head", "An Actual Attention Head")
# Printed: $\mathrm{score}(x_i, x_i) = x_i \cdot x_i$; $a_i = \sum_{i \le i} \alpha_{ij} x_j$; "key and value of preceding word $x_i$"; "dot
# product between $q_i$ and $k_i$"; "similarity of current element $x_i$ with some prior element $x_i$". Each should
# pair the current position $i$ with a preceding position $j$: $\mathrm{score}(x_i, x_j) = x_i \cdot x_j$, $\sum_{j \le i}$, the key of $x_j$,
# $q_i \cdot k_j$ (as the deck's own "Final equations for one attention head" has it). Taken literally, $\mathrm{score}(x_i, x_i)$
# is the same number for every $j$, so the softmax over $j$ is uniform and every position gets the plain
# average of its prefix, whatever the words. We give the package's attention those row-constant scores as
# a score bias (with zero queries) and compare.

# %%
T, C = 6, 8
x = rng.standard_normal((T, C))
right = ScaledDotProductAttention(causal=True)
out_right = right(x, x, x)                                                  # score(x_i, x_j) = x_i . x_j / sqrt(C)
literal = ScaledDotProductAttention(causal=True, scale=1.0)
self_scores = np.sum(x * x, axis=1)[:, None] * np.ones((1, T))              # score(x_i, x_i) in every column j
out_literal = literal(np.zeros((T, C)), x, x, bias=self_scores)
prefix_mean = np.cumsum(x, axis=0) / np.arange(1, T + 1)[:, None]
assert np.allclose(literal.alpha, np.tril(np.ones((T, T))) / np.arange(1, T + 1)[:, None])   # uniform weights
assert np.allclose(out_literal, prefix_mean)                                # just the average of the prefix
assert not np.allclose(out_right, out_literal)
print("weights of the last position, as printed:", literal.alpha[-1].round(3), "\n  with j:", right.alpha[-1].round(3))

# %% [markdown]
# ## E19. The warm-up rule does not "decay to 0" (the notes 2025, §1.6)
# The notes summarise Vaswani et al.'s rule, $\mathrm{rate} = d_\mathrm{model}^{-0.5} \cdot \min(s^{-0.5}, s \cdot w^{-1.5})$ at step $s$ after $w$ warm-up steps, as
# "warmup phase then decay to 0". After the warm-up it falls as $1/\sqrt{s}$: never 0, and slowly; with the
# paper's $d_\mathrm{model} = 512$ and $w = 4000$ it is still a fifth of its peak at step 100,000 and a fiftieth at
# ten million. A schedule that does reach 0 is the cosine with floor 0 (notebook 12 plots them side by side).

# %%
peak = noam_rate(4000, 512, 4000)
tail = {step: noam_rate(step, 512, 4000) / peak for step in (100_000, 1_000_000, 10_000_000)}
print("rate / peak:", {step: round(ratio, 3) for step, ratio in tail.items()})
assert np.isclose(tail[100_000], np.sqrt(4000 / 100_000)) and np.isclose(tail[10_000_000], 0.02)
assert all(ratio > 0 for ratio in tail.values())

# %% [markdown]
# ## E20. "WebText — based on Common Crawl data" (Strabel §5)
# The survey note describes GPT-2's training set, WebText, as "based on Common Crawl data with outbound
# Redit links". The GPT-2 paper (Radford et al. 2019, §2.1 "Training Dataset") says the opposite: it names
# Common Crawl as the obvious source and sets it aside for its data-quality problems, and builds WebText
# from a new scrape of the pages linked from Reddit posts with at least 3 karma (about 45 million links,
# 8 million documents, 40 GB after cleaning; Wikipedia removed). (And "Redit" is Reddit.) No computation
# applies: this is a statement about a paper.

# %% [markdown]
# ## E21. The 2024 notes' link to the Illustrated Transformer is misspelt (the notes 2024, footnote 2)
# Footnote 2 of the 2024 notes points to `jalamar.github.io`; the author is Jay Alammar, and the 2025 notes
# correct it to `jalammar.github.io` (Kumar's slides link the same). The two printed addresses differ by one
# letter:

# %%
import difflib

printed_2024, printed_2025 = "http://jalamar.github.io/illustrated-transformer/", "http://jalammar.github.io/illustrated-transformer/"
edits = [op for op in difflib.SequenceMatcher(None, printed_2024, printed_2025).get_opcodes() if op[0] != "equal"]
print(edits)
assert len(edits) == 1 and edits[0][0] == "insert" and printed_2025[edits[0][3]:edits[0][4]] == "m"

# %% [markdown]
# ## E22. The worked example's inputs are a reconstruction (the notes 2024 and 2025, §1.1)
# The notes print the matrices $K$, $Q$, $V$ ($4 \times 3$), the weights
# $\alpha_1 = \operatorname{softmax}([2, 4, 4]) = [.06, .47, .47]$ and the result $[1.9, 6.7, 1.6]$, but not the three
# inputs. Notebook 1 uses $x_1 = [1, 0, 1, 0]$, $x_2 = [0, 2, 0, 2]$, $x_3 = [1, 1, 1, 1]$: our reconstruction, consistent with every printed number (checked here again). It is
# not the only one: the three matrices have equal first and third rows, so adding any multiple of
# [1, 0, −1, 0] to an input changes none of its projections and none of the printed numbers.

# %%
K = np.array([[0, .5, .5], [1, 1, 0], [0, .5, .5], [1, 1, 0]])
Q = np.array([[.5, 0, 1], [0, 0, 0], [.5, 0, 1], [0, 0, 0]])
Vm = np.array([[.5, 1, 1.5], [.5, 2, 0], [.5, 1, 1.5], [.5, 2, 0]])


def printed_numbers(X):
    """Scores, weights and result of position 1, unscaled, as the notes print them."""
    unscaled = ScaledDotProductAttention(scale=1.0)
    result = unscaled((X @ Q)[:1], X @ K, X @ Vm)[0]
    return (X @ Q)[0] @ (X @ K).T, unscaled.alpha[0], result


reconstruction = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], dtype=float)
another = reconstruction + np.array([[2, 0, -2, 0], [-1, 0, 1, 0], [0, 0, 0, 0]])
for X in (reconstruction, another):
    scores, alpha_1, result = printed_numbers(X)
    assert np.array_equal(scores, [2, 4, 4])
    assert np.array_equal(np.round(alpha_1, 2), [0.06, 0.47, 0.47])
    assert np.array_equal(np.round(result, 1), [1.9, 6.7, 1.6])
print("both input sets reproduce scores [2, 4, 4], alpha [.06, .47, .47] and the result [1.9, 6.7, 1.6]:\n",
      reconstruction, "\n", another)
