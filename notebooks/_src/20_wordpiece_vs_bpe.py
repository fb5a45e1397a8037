# %% [markdown]
# # 20. WordPiece against BPE, on one corpus
#
# **The claim.** Sachin Kumar, *Language Modeling III: Transformers* ([CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)), the BERT slides: BERT reads WordPiece tokens, a sub-word
# vocabulary that grows by merging the pair of symbols that most raises the likelihood of the training data, where
# byte-pair encoding (May, *Transformer Language Models*, 2025, §1.5) merges the most *frequent* pair. The score used
# to rank pairs is
#
# $$\text{score}(a, b) = \frac{\text{count}(ab)}{\text{count}(a)\,\text{count}(b)},$$
#
# the pair's count relative to what its two parts would give if they met by chance.
#
# **Here.** `WordPieceTokenizer` (`minitransformer/tokenizers/wordpiece.py`) against the lecture's BPE loop
# (`learn_bpe`) and the byte-level `BPETokenizer`, all trained on the first 200,000 characters of the corpus that
# ships with Python (`default_corpus()`), and compared on the next 60,000.

# %%
import matplotlib.pyplot as plt

from minitransformer import BPETokenizer, WordPieceTokenizer, default_corpus, learn_bpe
from minitransformer.tokenizers.bpe import word_counts_from_text
from minitransformer.tokenizers.wordpiece import join_pieces, learn_wordpiece

# %% [markdown]
# ## A pair chosen by score, not by count
# In the words `ab ab ab ab ab ab ac ac dc`, the pair (a, ##b) occurs 6 times and (d, ##c) once. But `a`
# occurs 8 times and `##b` 6, so (a, ##b) scores 6 / (8·6) = 1/8, while `d` occurs only in `dc` and
# (d, ##c) scores 1 / (1·3) = 1/3. BPE merges `ab` first, WordPiece `dc`.

# %%
toy = word_counts_from_text("ab ab ab ab ab ab ac ac dc")
wordpiece_vocab, wordpiece_merges = learn_wordpiece(toy, vocab_size=6)
bpe_merges = learn_bpe(toy, num_merges=1, min_count=1)
print("WordPiece's first merge:", wordpiece_merges[0], "  BPE's first merge:", bpe_merges[0])
assert wordpiece_merges[0] == ("d", "##c") and bpe_merges[0] == ("a", "b")

# %% [markdown]
# ## The first merges on real text
# The same 200,000 characters, split on whitespace.

# %%
text = default_corpus()
train_text, held_out = text[:200_000], text[200_000:260_000]
wordpiece = WordPieceTokenizer.train(train_text, vocab_size=1600)
lecture_bpe = learn_bpe(word_counts_from_text(train_text), 12)
print("WordPiece:", [join_pieces(*pair) for pair in wordpiece.merges[:12]])
print("BPE      :", ["".join(pair) for pair in lecture_bpe])
assert ("t", "h") in lecture_bpe and ("e", "</w>") in lecture_bpe

# %% [markdown]
# BPE starts where English is frequent (`e</w>`, `th`, `in`). WordPiece starts with pairs whose parts are
# seldom seen apart, however rare the pair: `XO`, `%H`, `°F` come from a handful of words. The score divides by
# count(a)·count(b), so a frequent symbol is a poor partner whatever its pair count.
#
# ## Tokens per word on held-out text
# The WordPiece vocabulary of a smaller size is the first entries of the larger one (training is greedy and
# deterministic), so one training run gives every size. Byte-level BPE is trained for each size; its first
# 256 entries are the bytes, where WordPiece's start from the characters of the training text.

# %%
sizes = [400, 800, 1600]
words = held_out.split()
wordpiece_rate, bpe_rate, unknown_rate = [], [], []
for size in sizes:
    smaller = WordPieceTokenizer(wordpiece.vocab[:size])
    ids = smaller.encode(held_out)
    wordpiece_rate.append(len(ids) / len(words))
    unknown_rate.append(ids.count(smaller.ids["[UNK]"]) / len(ids))
    bpe_rate.append(len(BPETokenizer.train(train_text, vocab_size=size).encode(held_out)) / len(words))
for size, w, b, u in zip(sizes, wordpiece_rate, bpe_rate, unknown_rate):
    print(f"V = {size:5d}: WordPiece {w:.2f} tokens/word ([UNK] {100 * u:.3f}%),  byte-level BPE {b:.2f}")
assert all(w > b for w, b in zip(wordpiece_rate, bpe_rate))
assert bpe_rate[-1] < bpe_rate[0] and wordpiece_rate[-1] < wordpiece_rate[0]
print("WordPiece tokens per BPE token:", [round(w / b, 1) for w, b in zip(wordpiece_rate, bpe_rate)])
assert wordpiece_rate[-1] > 2 * bpe_rate[-1]

fig, ax = plt.subplots(figsize=(5, 3.2))
ax.plot(sizes, wordpiece_rate, "o-", label="WordPiece (score)")
ax.plot(sizes, bpe_rate, "s-", label="byte-level BPE (count)")
ax.set_xlabel("vocabulary size V")
ax.set_ylabel("tokens per word, held-out text")
ax.set_xticks(sizes)
ax.legend()
ax.set_title("the same 200,000 characters of training text")
fig.tight_layout()
plt.show()

# %% [markdown]
# At these small vocabularies, ranking by the score spends merges on rare pairs: the held-out text needs 1.5
# times as many WordPiece tokens as BPE tokens at V = 400, and 2.6 times as many at V = 1600, where BPE's
# extra merges went to frequent words and WordPiece's did not. The score says nothing about how often a merge will
# be *used*: the change in the log-likelihood of the data from a merge is roughly count(ab) times the log of the
# ratio, and it is that product, not the ratio alone, that a likelihood argument ranks by. BERT's vocabulary has
# 30,000 entries, where the frequent words are merged whole either way. WordPiece's [UNK] is rare here (a word
# with a character never seen in training), while byte-level BPE never needs one.
