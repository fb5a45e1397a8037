# %% [markdown]
# # 5. Train a tiny GPT on a CPU
#
# **Sources.** Jonathan May, "Transformer Language Models", lecture notes 2025, §1 (a stack of attention + feed-forward blocks, used as a
# left-to-right language model, footnote 7) and §1.6 (Adam, a warm-up then a decaying learning rate);
# Si Wu's slides "Transformers" ([CS 6120, Northeastern](https://siwu.io/nlp-class)), "Transformer language model"
# and "Masking out the future".
#
# The model is small enough to train on a laptop CPU in about a minute or less: 2 blocks, 4 heads,
# C = 64, a context of 32 characters, one token per character. The text is the English help that ships
# with Python (`pydoc_data.topics`), so nothing is downloaded. Everything here is the package:
# `Trainer` (AdamW, warm-up + cosine schedule, gradient clipping), `CharTokenizer`, `sample_text`.
#
# It trains on the plain tier (`kernels="plain"`): the layers of `minitransformer/layers/` as they are
# derived, and the plain AdamW of `training/optim/adam.py`, so a debugger stepping into the training lands in
# the code the lectures derive. `TrainConfig`'s default is the fast tier (what `python -m minitransformer
# train` runs): the same numbers up to float rounding (`tests/test_fast.py`, `tests/test_trainer.py`),
# computed faster at the main job's size.
#
# Checks: the loss falls from about ln V (a uniform guess) to well below the entropy of single
# characters, so the model uses context; and after training the first layer has heads that look at the
# previous character, which they did not do at initialisation.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import AdamW, CharTokenizer, TrainConfig, Trainer, default_corpus, sample_text, train_val_split
from minitransformer.fast import kernels_of

text = default_corpus()
tokenizer = CharTokenizer.train(text)
ids = np.array(tokenizer.encode(text))
train_ids, val_ids = train_val_split(ids)
counts = np.bincount(train_ids, minlength=tokenizer.vocab_size)
frequencies = counts[counts > 0] / counts.sum()
unigram_entropy = -np.sum(frequencies * np.log(frequencies))
print(f"{len(text):,} characters, V = {tokenizer.vocab_size}; ln V = {np.log(tokenizer.vocab_size):.2f}, "
      f"entropy of single characters = {unigram_entropy:.2f} nats")

# %%
config = TrainConfig(block_size=32, batch_size=16, n_layers=2, n_heads=4, d_model=64, d_ff=256,
                     max_steps=1500, lr=3e-3, min_lr=3e-4, warmup_steps=50, lr_decay_steps=1500,
                     eval_interval=300, eval_batches=8, seed=0, kernels="plain")
trainer = Trainer(config, train_ids, val_ids, tokenizer.vocab_size, progress=False)
model = trainer.model
print(model, f"{sum(p.data.size for p in model.parameters()):,} parameters")
print(f"tier: {kernels_of(model)} layers, optimizer {type(trainer.optimizer).__module__}.{type(trainer.optimizer).__name__}")
assert kernels_of(model) == "plain" and type(trainer.optimizer) is AdamW       # the lecture's code, not fast/

# %% [markdown]
# ## Before training
# A fresh model's next-character distribution is close to uniform: its loss is about ln V, and a
# sample is a random string of characters. We also keep its attention weights on a fixed prompt.

# %%
prompt = "for each item in the list, the"        # 30 characters, inside the 32-character window
prompt_ids = np.array([tokenizer.encode(prompt)])


def attention_maps(model):
    """(layers, H, T, T) attention weights of every head for the prompt, dropout off."""
    model.eval()
    model(prompt_ids)
    model.train()
    return np.stack([block.attn.attention.alpha[0] for block in model.blocks])


before = trainer.evaluate()
maps_before = attention_maps(model)
print(f"loss before training: train {before['train']:.3f}, val {before['val']:.3f}")
print(repr(sample_text(model, tokenizer, "The ", 120, temperature=0.8, rng=0)))
assert abs(before["val"] - np.log(tokenizer.vocab_size)) < 0.3

# %% [markdown]
# ## Training
# The cell prints how long the 1500 steps took. How long the whole notebook takes on the project's 2-core
# machine, against its budget of 60 s, is in `benchmarks/README.md` ("The notebooks' budget"); on a laptop
# expect less than a minute.

# %%
started = time.perf_counter()
after = trainer.fit()
print(f"{config.max_steps} steps in {time.perf_counter() - started:.0f} s")
assert after["val"] < unigram_entropy - 1.0           # far better than guessing letters by frequency
assert after["val"] < before["val"] - 2.0

# %%
steps, train_eval, val_eval = zip(*trainer.history["eval"])
fig, ax = plt.subplots(figsize=(7, 3.8))
ax.plot(trainer.history["step"], trainer.history["loss"], color="0.7", lw=0.8, label="batch loss")
ax.plot(steps, train_eval, "o-", label="train (evaluation)")
ax.plot(steps, val_eval, "s-", label="validation")
ax.axhline(np.log(tokenizer.vocab_size), ls=":", color="k", label="uniform guess, ln V")
ax.axhline(unigram_entropy, ls="--", color="k", label="single-character entropy")
ax.set_xlabel("step"); ax.set_ylabel("cross-entropy (nats per character)"); ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# ## After training
# The sample now has words, spaces, punctuation and indentation in roughly the right places; many
# "words" are invented, which is what two blocks and well under a minute of training buy.

# %%
print(sample_text(model, tokenizer, "The ", 300, temperature=0.8, rng=0))

# %% [markdown]
# ## What the heads look at
# Each panel is one head: row i is the distribution of query position i over the positions it may see
# (the causal mask leaves the upper triangle empty). For each layer, one row shows its heads at
# initialisation and the row below the same heads after training, all on one colour scale, with the
# prompt's characters on the axes (␣ is a space). At initialisation every head spreads its weight almost evenly; after training,
# heads of the first layer put much of their weight on the previous character, the sub-diagonal (the
# simplest useful context for spelling).

# %%
maps_after = attention_maps(model)
T = prompt_ids.shape[1]
previous_before = maps_before[:, :, np.arange(1, T), np.arange(T - 1)].mean(axis=-1)     # (layers, H)
previous_after = maps_after[:, :, np.arange(1, T), np.arange(T - 1)].mean(axis=-1)
print("mean weight on the previous character, per head\n before", previous_before.round(2),
      "\n after ", previous_after.round(2))
assert previous_after[0].max() > 0.3 and previous_after[0].max() > 2 * previous_before[0].max()

layers, heads = maps_after.shape[:2]
labels = [character.replace(" ", "␣") for character in prompt]
fig, axes = plt.subplots(2 * layers, heads, figsize=(3.4 * heads, 3.5 * 2 * layers), layout="constrained")
for layer in range(layers):
    for row, (maps, when) in enumerate(((maps_before, "before training"), (maps_after, "after training"))):
        for head in range(heads):
            ax = axes[2 * layer + row, head]
            image = ax.imshow(maps[layer, head], cmap="magma", vmin=0, vmax=1)
            ax.set_title(f"{when}: layer {layer}, head {head}", fontsize=8)
            ax.set_xticks(range(T), labels, fontsize=6); ax.set_yticks(range(T), labels, fontsize=6)
            ax.set_xlabel("key (character seen)", fontsize=7); ax.set_ylabel("query (character read)", fontsize=7)
fig.colorbar(image, ax=axes, shrink=0.4, label="attention weight (one scale for every panel)")
fig.suptitle(f"attention on {prompt!r}, each layer at initialisation and after training", fontsize=10)
plt.show()
