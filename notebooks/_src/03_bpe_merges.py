# %% [markdown]
# # 3. Byte-pair encoding, merge by merge
#
# **Sources.** Jonathan May, "Transformer Language Models", lecture notes 2025, §1.5 "Shared embeddings and
# BPE" (the loop in outline, and the exercise "BITTER BUTLER BITE BUTTER BITER"), the same section of his 2024
# notes, and Greg Strabel, "Transformers" (2023), §12, whose listing runs the classic toy vocabulary of Sennrich et al.
# (2016): low ×5, lower ×2, newest ×6, widest ×3, each word ending in the end-of-word symbol `</w>`.
#
# The loop: count every adjacent pair of symbols (weighted by how often its word occurs), merge the
# most frequent pair everywhere it appears as two whole symbols, repeat. Everything below calls the
# package's `minitransformer.tokenizers.bpe`: `get_stats` and `merge_vocab` are the lecture's two steps,
# `learn_bpe` the whole loop, `BPETokenizer` the byte-level tokenizer the GPT uses.
#
# **The tie rule.** When several pairs share the highest count, the package (like the lecture's
# `max(pairs, key=pairs.get)`) takes the one met *first* when the words are scanned in the order of the
# vocabulary, each word left to right.

# %%
import pydoc_data.topics

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import BPETokenizer, get_stats, learn_bpe, lecture_vocab, merge_vocab


def show_step(step, vocab):
    """Print the best pair of this step and every pair tied with it."""
    pairs = get_stats(vocab)
    best_count = max(pairs.values())
    tied = [pair for pair, count in pairs.items() if count == best_count]
    note = f"   (tied: {', '.join(map(str, tied))})" if len(tied) > 1 else ""
    print(f"{step:2d}. {tied[0]} count {best_count}{note}")
    return tied

# %% [markdown]
# ## The toy vocabulary: ten merges
# Each line shows the merge, its count, and the pairs that had the same count (the tie rule picked the
# first of them).

# %%
toy_counts = {"low": 5, "lower": 2, "newest": 6, "widest": 3}
vocab = lecture_vocab(toy_counts)
print(vocab)
tie_steps = []
for step in range(1, 11):
    tied = show_step(step, vocab)
    tie_steps += [step] if len(tied) > 1 else []
    vocab = merge_vocab(tied[0], vocab)
print(vocab)
print("steps decided by the tie rule:", tie_steps)
assert tie_steps == [1, 2, 4, 6, 7, 10]

merges = learn_bpe(toy_counts, 10)
assert merges == [("e", "s"), ("es", "t"), ("est", "</w>"), ("l", "o"), ("lo", "w"), ("n", "e"),
                  ("ne", "w"), ("new", "est</w>"), ("low", "</w>"), ("w", "i")]
assert learn_bpe(toy_counts, 10, method="reference") == merges        # the lecture's slow loop agrees
assert list(vocab) == ["low</w>", "low e r </w>", "newest</w>", "wi d est</w>"]

# %% [markdown]
# Six of the ten steps are ties: 1, 2, 4, 6, 7 and 10. At step 1, ('e', 's'), ('s', 't') and ('t', '</w>')
# all occur 9 times (in newest ×6 and widest ×3), but steps 1–3 rebuild est</w> from the same letters
# whichever comes first; steps 4 (l o / o w) and 6–7 (n e / e w / w est</w>) are the same kind of tie, settled
# within the same word whatever the order. Step 10 is different: ('w', 'i'), ('i', 'd') and ('d', 'est</w>') occur 3 times each, and
# the first-met rule picks ('w', 'i') because widest is scanned left to right; preferring ('d', 'est</w>')
# would have left widest as w i dest</w>. The exercise shows the rule at work more strongly.
#
# ## The exercise: BITTER BUTLER BITE BUTTER BITER
# Every word occurs once. We run the loop while the best pair occurs at least twice (a pair seen once
# says nothing about new text; `learn_bpe`'s default `min_count=2`) and print the ties at each step.

# %%
exercise = {word: 1 for word in "BITTER BUTLER BITE BUTTER BITER".split()}
vocab = lecture_vocab(exercise)
exercise_merges = []
while max(get_stats(vocab).values()) >= 2:
    best = show_step(len(exercise_merges) + 1, vocab)[0]
    exercise_merges.append(best)
    vocab = merge_vocab(best, vocab)
print("segmentation:", list(vocab))

assert exercise_merges == learn_bpe(exercise, None) == [("T", "E"), ("R", "</w>"), ("B", "I"), ("TE", "R</w>"),
                                                       ("T", "TER</w>"), ("B", "U")]
assert list(vocab) == ["BI TTER</w>", "BU T L E R</w>", "BI TE </w>", "BU TTER</w>", "BI TER</w>"]

# %% [markdown]
# **Where the tie rule decides.** Step 1 has a three-way tie between (T, E), (E, R) and (R, </w>),
# each occurring 4 times (BITTER, BUTLER, BUTTER, BITER; BITE has T E but not E R). The first-met rule
# picks (T, E) because T E comes before E R inside every word. A rule that preferred, say, (E, R) would
# go another way: BUTLER's E R would merge and be kept together, and BITE would keep T E apart. Step 3
# (B, I against TE, R</w>) and step 5 (three pairs of count 2) are ties too.
#
# We show it by forcing the first merge to (E, R) and letting the package's loop continue.

# %%
other = merge_vocab(("E", "R"), lecture_vocab(exercise))
other_merges = [("E", "R")]
while max(get_stats(other).values()) >= 2:
    best = max(get_stats(other), key=get_stats(other).get)
    other_merges.append(best)
    other = merge_vocab(best, other)
print("merges:", other_merges)
print("segmentation:", list(other))
assert list(other) == ["BIT TER</w>", "BUT L ER</w>", "BIT E </w>", "BUT TER</w>", "BIT ER</w>"]
assert list(other) != list(vocab)

# %% [markdown]
# **To the very end.** With no minimum count the loop goes on merging pairs seen only once, until every
# word is a single symbol and no pair is left. A word of n letters is n + 1 symbols with `</w>`, and needs
# n merges on its own: BITTER 6, BUTLER 6, BITE 4, BUTTER 6, BITER 5, so 6 + 6 + 4 + 6 + 5 = 27 for five
# separate words. Pieces shared by several words (TTER</w>, BI, BU) are merged once for all of them, so
# the five words together need far fewer.

# %%
all_merges = learn_bpe(exercise, None, min_count=1)
separately = {word: len(learn_bpe({word: 1}, None, min_count=1)) for word in exercise}
print(len(all_merges), "merges together; separately", separately, "=", sum(separately.values()))
print("the last five:", all_merges[-5:])
assert separately == {word: len(word) for word in exercise} and sum(separately.values()) == 27
assert len(all_merges) == 15
final = lecture_vocab(exercise)
for pair in all_merges:
    final = merge_vocab(pair, final)
assert list(final) == [word + "</w>" for word in exercise]

# %% [markdown]
# ## Encoding a word never seen in training
# A new word is split into characters plus `</w>`, and the learned merges are applied *in the order
# they were learned*. "lowest" was never in the toy corpus, but it decomposes into two known pieces;
# "widen" keeps only what it shares with widest.

# %%
def apply_merges(word, merges):
    """Replay the learned merges on one word, with the package's merge step."""
    vocab = lecture_vocab({word: 1})
    for pair in merges:
        vocab = merge_vocab(pair, vocab)
    return next(iter(vocab)).split()


for word in ("lowest", "newer", "widen"):
    print(word, "->", apply_merges(word, merges))
assert apply_merges("lowest", merges) == ["low", "est</w>"]
assert apply_merges("newer", merges) == ["new", "e", "r", "</w>"]

# %% [markdown]
# ## A larger corpus: how many tokens per word?
# The corpus is the help text that ships with Python (`pydoc_data.topics`, about 65,000 words), split
# into a training part and a held-out part. The package's byte-level `BPETokenizer` learns 1,500
# merges on the training part; its first m merges form a smaller tokenizer. With no merges a word costs
# one token per byte; each merge lowers the cost, quickly at first (frequent short pieces, whole common
# words) and then more slowly. On held-out text the cost is a little higher, since the merges were
# chosen for the training text.

# %%
text = "\n".join(pydoc_data.topics.topics.values())
train_text, held_out_text = text[:300_000], text[300_000:]
tokenizer = BPETokenizer.train(train_text, vocab_size=256 + 1500)
assert tokenizer.decode(tokenizer.encode(held_out_text)) == held_out_text

sizes = [0, 25, 50, 100, 200, 300, 500, 750, 1000, 1500]
per_word = {"training text": [], "held-out text": []}
for m in sizes:
    smaller = BPETokenizer(tokenizer.merges[:m])
    for name, part in (("training text", train_text), ("held-out text", held_out_text)):
        per_word[name].append(len(smaller.encode(part)) / len(part.split()))
print({name: np.round(values, 2) for name, values in per_word.items()})

train_cost, held_cost = np.array(per_word["training text"]), np.array(per_word["held-out text"])
assert np.all(np.diff(train_cost) < 0)                        # every batch of merges helps on training text
assert train_cost[0] > 5 and train_cost[-1] < 2.0
assert np.all(held_cost[1:] >= train_cost[1:])                # merges fit the text they were learned on

fig, ax = plt.subplots(figsize=(6.5, 3.6))
for name, values in per_word.items():
    ax.plot(sizes, values, "o-", label=name)
ax.set_xlabel("number of merges"); ax.set_ylabel("tokens per word"); ax.legend()
ax.set_title("byte-level BPE on Python's help text")
plt.show()
