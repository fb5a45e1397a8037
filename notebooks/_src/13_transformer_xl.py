# %% [markdown]
# # 13. Transformer-XL against the vanilla model's evaluation, measured in perplexity
#
# **Source.** Greg Strabel, "Transformers" (2023), §9.1 "Transformer-XL" and its Figures 6–7 (from Dai et
# al. 2019): a "vanilla" model trained on separate segments of length L sees no context across a segment
# boundary (*context fragmentation*). Evaluated the same way, the first tokens of every segment are
# predicted almost blind. The vanilla fix at evaluation time slides the window **one position at a time**,
# so every prediction has L tokens of context, at the price of a whole forward pass per token.
# Transformer-XL keeps each layer's hidden states of the previous segment as a *memory* (eq. 23, with a
# stop-gradient): every segment starts with context, at the cost of one pass per segment.
#
# **Perplexity.** The measure is the one of the table on Sachin Kumar's slide "Impact of Transformers"
# ("Language Modeling III: Transformers", [CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)): the exponential of the mean negative log-likelihood per
# predicted token, `minitransformer.perplexity`. It reads as the number of equally likely choices the model is left
# with per token. It is per *token*, so it depends on the tokenizer: here a token is one character, so a trained
# model's perplexity is a handful of choices per character; a BPE model predicts whole sub-word pieces, fewer and
# harder predictions for the same text, so its perplexity is much larger (tens to hundreds, as in Kumar's table).
# Compare perplexities only between models with the same tokenizer.
#
# **The experiment.** The text is a made-up language: 24 random six-letter words, drawn at random and
# separated by spaces. Within a word every letter is decided once the first two or three are known, so
# context of a few characters is worth a lot, and a tiny model learns that in seconds (on English text it
# would need minutes of training before context beyond a few characters paid off). The best possible
# model pays only for the choice of each word, ln 24 nats per 7 characters. Two copies of the package's
# `TransformerXL` (ALiBi distance biases, so positions make sense across segments), the same size and
# seed: one trained as the vanilla model (no memory, random segments), one trained with its memory
# carried from one segment to the next. Then three ways to score the same held-out text.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import AdamW, CharTokenizer, TransformerXL, perplexity, train_val_split
from minitransformer.objectives.language_model import LanguageModelObjective
from minitransformer.training.loop import LoopOptions, TrainingLoop
from minitransformer.training.schedules import warmup_rate

rng = np.random.default_rng(0)
words = ["".join(rng.choice(list("abcdefghijklmnopqrstuvwxyz"), 6)) for _ in range(24)]
text = " ".join(rng.choice(words, 6000))
tokenizer = CharTokenizer.train(text)
train_ids, val_ids = (np.array(part) for part in train_val_split(np.array(tokenizer.encode(text))))
V, L = tokenizer.vocab_size, 16                      # segment length L
best = np.log(len(words)) / 7                        # nats per character of the best possible model
print("some words:", words[:6], f"\nV = {V} characters; segments of L = {L}")
print(f"perplexity of uniform guessing: {perplexity(np.log(V)):.0f}; of the best possible model: {perplexity(best):.2f}")


def build():
    return TransformerXL(V, d_model=32, n_heads=4, n_layers=2, d_ff=64, mem_len=L, positional="alibi",
                         dtype=np.float32, rng=0)


class SegmentObjective(LanguageModelObjective):
    """The language-model objective of one segment, given the memories of the previous one."""

    def forward(self, x, y, memories=None):
        return self.loss(self.model(x, memories), y)

# %% [markdown]
# ## Training the two models
# Each step reads B = 16 streams. The vanilla model gets one random segment per stream and no memory. The
# XL model gets two consecutive segments per stream: a forward pass over the first (no gradient) fills the
# memory, then the second is trained with it, exactly as eq. 23 has it (the memory is a constant).

# %%
def train(with_memory, steps=200, batch=16, lr=3e-3, seed=1):
    model = build()
    objective = SegmentObjective(model)
    optimizer = AdamW(objective.parameters(), lr=lr, weight_decay=0.0)
    rng = np.random.default_rng(seed)

    def segments():
        starts = rng.integers(0, len(train_ids) - 2 * L - 1, size=batch)
        window = train_ids[starts[:, None] + np.arange(2 * L + 1)]              # (B, 2L + 1)
        memories = None
        if with_memory:
            model(window[:, :L])                                                 # fills model.next_memories
            memories = model.next_memories
        return window[:, L:2 * L], window[:, L + 1:2 * L + 1], memories

    TrainingLoop(objective, optimizer, segments, lambda step: warmup_rate(step, lr, 30),   # a short warm-up
                 LoopOptions(grad_clip=1.0, max_steps=steps, log=False, progress=False)).fit()   # the package's one loop
    model.eval()
    return model


started = time.perf_counter()
vanilla, xl = train(with_memory=False), train(with_memory=True)
print(f"both trained in {time.perf_counter() - started:.1f} s")

# %% [markdown]
# ## Three evaluations of the same held-out text
# The held-out characters are cut into 6 streams of 40 segments each.
#
# 1. **Vanilla, segment by segment**: each segment alone; position 0 of a segment has no context at all.
# 2. **Vanilla, sliding by one**: for every target, the L characters before it; one forward pass (of L
#    positions) per predicted character.
# 3. **Transformer-XL**: segment by segment, each layer's memory carried over.
#
# We record the negative log-likelihood of every target and how many token positions each method pushed
# through the model (its cost).

# %%
streams, n_segments = 6, 40
n = n_segments * L
data = val_ids[: streams * (n + 1)].reshape(streams, n + 1)
inputs, targets = data[:, :-1], data[:, 1:]                                     # (6, n) each


def nll_of(logits, y):
    """Negative log-likelihood of each target under the logits (..., V) -> (...)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_probs, y[..., None], axis=-1)[..., 0]


# 1. vanilla, segment by segment
segment_nll = np.concatenate([nll_of(vanilla(inputs[:, s:s + L]), targets[:, s:s + L]) for s in range(0, n, L)], axis=1)
segment_cost = n * streams

# 2. vanilla, sliding by one: the target at position t is predicted from inputs[t - L + 1 .. t]
padded = np.concatenate([inputs[:, :1].repeat(L - 1, axis=1), inputs], axis=1)  # the first windows reach back to the start
windows = np.stack([padded[:, t:t + L] for t in range(n)], axis=1)              # (6, n, L)
sliding_nll = np.concatenate([nll_of(vanilla(windows[row])[:, -1], targets[row])[None] for row in range(streams)])
sliding_cost = windows.size

# 3. Transformer-XL with memory
memories, pieces = None, []
for s in range(0, n, L):
    pieces.append(nll_of(xl(inputs[:, s:s + L], memories), targets[:, s:s + L]))
    memories = xl.next_memories
xl_nll = np.concatenate(pieces, axis=1)
xl_cost = n * streams

skip = L                                             # leave out the first segment: no method has context there
results = {"vanilla, segment by segment": (segment_nll, segment_cost),
           "vanilla, sliding by one": (sliding_nll, sliding_cost),
           "Transformer-XL, memory": (xl_nll, xl_cost)}
for name, (nll, cost) in results.items():
    mean = nll[:, skip:].mean()
    print(f"{name:28s} loss {mean:.3f} nats/char, perplexity {perplexity(mean):5.2f}, "
          f"{cost:,} positions through the model")

# %% [markdown]
# **What to read.** Evaluated segment by segment, the vanilla model is worse: a quarter of its predictions
# have three or fewer characters of context, often not enough to know which word they are in. Sliding by
# one repairs that, for L = 16 times the work. Transformer-XL gets its context from the memory at the cost
# of the segment-by-segment pass, and here does better still: it was also *trained* with context reaching
# back up to 2L, so after the same 200 steps it has learned the words better. The left panel shows where the
# vanilla model loses: the first one or two positions of every segment.

# %%
perplexities = {name: perplexity(nll[:, skip:].mean()) for name, (nll, _) in results.items()}
assert perplexities["vanilla, segment by segment"] > 1.03 * perplexities["vanilla, sliding by one"]
assert perplexities["Transformer-XL, memory"] < perplexities["vanilla, sliding by one"]
assert sliding_cost == L * xl_cost == L * segment_cost
assert all(1 < value < V for value in perplexities.values())
# perplexity is exp(mean NLL): the package's function against the definition
assert np.isclose(perplexities["Transformer-XL, memory"], np.exp(xl_nll[:, skip:].mean()))

# where in the segment the vanilla model suffers: the first position, with no context at all
by_position = {name: nll[:, skip:].reshape(streams, -1, L).mean(axis=(0, 1)) for name, (nll, _) in results.items()}
print({name: np.round(values, 2) for name, values in by_position.items()})
assert by_position["vanilla, segment by segment"][0] > by_position["vanilla, segment by segment"][-1] + 0.5
assert by_position["Transformer-XL, memory"][0] < by_position["vanilla, segment by segment"][0] - 0.5

# %%
fig, axes = plt.subplots(1, 2, figsize=(13, 4), layout="constrained")
for name, values in by_position.items():
    axes[0].plot(range(L), np.exp(values), "o-", label=name)
axes[0].set_xlabel("position inside the segment (0 = first)"); axes[0].set_ylabel("perplexity at that position")
axes[0].set_title("context fragmentation: the start of every segment"); axes[0].legend(fontsize=8)
names = list(results)
axes[1].bar(range(3), [perplexities[name] for name in names], color=["C0", "C1", "C2"])
for index, name in enumerate(names):
    axes[1].text(index, perplexities[name], f"{perplexities[name]:.2f}\n{results[name][1]:,} positions",
                 ha="center", va="bottom", fontsize=8)
axes[1].set_xticks(range(3), [name.replace(", ", ",\n") for name in names], fontsize=8)
axes[1].axhline(perplexity(best), color="k", ls=":", lw=1, label=f"best possible, {perplexity(best):.2f}")
axes[1].legend(fontsize=8, loc="upper right")
axes[1].set_ylabel("held-out perplexity (per character)")
axes[1].set_ylim(0, 1.3 * max(perplexities.values()))
axes[1].set_title("perplexity, and the positions each evaluation computed")
plt.show()
