# %% [markdown]
# # 19. In-context learning, and the head that does it
#
# **The claim.** Greg Strabel, *Transformers* (survey note, 2023), §6, on GPT-3 (Brown et al. 2020, "Language
# models are few-shot learners"): a large language model learns a task from examples placed in its prompt,
# without any change to its weights, and does better the more examples it is shown. Olsson et al. (2022, "In-
# context learning and induction heads") found much of this done by *induction heads*: attention heads that, at
# a token seen earlier, look at the token that followed it last time and copy it.
#
# **Here.** A 2-layer GPT of the package trained on `KeyValueTask` (`minitransformer/tasks/key_value.py`, `minitransformer/objectives/in_context.py`):
# every sequence lists pairs `k v k v ...` from a random key→value table of its own, 4 keys and 4 values, 10
# pairs. The weights cannot know a sequence's table; only its context can. The model was trained for 2,000
# steps by `python benchmarks/bench_in_context.py` (longer than this notebook's time budget), which saved it to
# `data/in_context_gpt.npz` (97 KB); everything below is computed from those weights.

# %%
import pathlib

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import GPT
from minitransformer.objectives.in_context import in_context_accuracy, induction_scores
from minitransformer.tasks.key_value import KeyValueTask

saved = np.load(pathlib.Path("..") / "data" / "in_context_gpt.npz")
config = dict(zip(saved["config_keys"], saved["config_values"]))
n_keys, n_values, n_pairs = int(config["n_keys"]), int(config["n_values"]), int(config["n_pairs"])
model = GPT(n_keys + n_values, int(config["d_model"]), int(config["n_heads"]), int(config["n_layers"]),
            int(config["d_ff"]), 2 * n_pairs, dtype=np.float32)
model.load_state_dict({name[len("param."):]: saved[name] for name in saved.files if name.startswith("param.")})
print({str(name): float(value) for name, value in config.items()})

# %% [markdown]
# ## Accuracy rises with the number of examples in the context
# Accuracy on 2,000 fresh sequences (tables never seen), at each pair index n: the model has seen n earlier
# pairs. A key met before in the sequence can be answered by copying; a new key only by guessing (1 in 4). A
# perfect copier would score P(seen) + P(new)/4 = 1 − (3/4)^(n+1).

# %%
accuracy = in_context_accuracy(model, KeyValueTask(n_keys, n_values, n_pairs, rng=12345), n_sequences=2000)
shown = np.arange(n_pairs)
perfect = 1 - (1 - 1 / n_keys) ** shown * (1 - 1 / n_values)
print("accuracy by examples shown:", np.round(accuracy["by_pair"], 2))
print(f"keys seen before: {accuracy['seen']:.3f}   new keys: {accuracy['new']:.3f} (chance {1 / n_values:.2f})")
assert accuracy["seen"] > 0.7 and abs(accuracy["new"] - 1 / n_values) < 0.05     # copies; guesses new keys
assert accuracy["by_pair"][-1] > accuracy["by_pair"][0] + 0.3

# %% [markdown]
# ## Where the heads look
# For every repeated key, the attention weight each head puts on the values that followed the key's earlier
# occurrences (all of them carry the answer). The same score for an untrained twin of the model, whose
# attention is nearly uniform, is the baseline.

# %%
task = KeyValueTask(n_keys, n_values, n_pairs, rng=7)
scores = induction_scores(model, task, n_sequences=500)
untrained = GPT(n_keys + n_values, int(config["d_model"]), int(config["n_heads"]), int(config["n_layers"]),
                int(config["d_ff"]), 2 * n_pairs, dtype=np.float32, rng=0)
baseline = induction_scores(untrained, KeyValueTask(n_keys, n_values, n_pairs, rng=7), n_sequences=500)
print("score of each head (rows: layers, columns: heads):\n", np.round(scores, 2))
print("untrained twin:\n", np.round(baseline, 2))
layer, head = np.unravel_index(scores.argmax(), scores.shape)
assert scores.max() > 1.8 * baseline.max()

x, _, keys = task.batch(1)
with model.evaluating():
    model(x)
pattern = model.blocks[layer].attn.attention.alpha[0, head]              # (T, T)
labels = [f"k{token}" if token < n_keys else f"v{token - n_keys}" for token in x[0]]

fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
axes[0].plot(shown, accuracy["by_pair"], "o-", label="the trained GPT")
axes[0].plot(shown, perfect, "--", label="perfect copying")
axes[0].axhline(1 / n_values, color="grey", lw=0.8, label="chance")
axes[0].set_xlabel("examples (key→value pairs) already in the context")
axes[0].set_ylabel("accuracy on the next value")
axes[0].legend()
image = axes[1].imshow(pattern, cmap="magma", vmin=0, vmax=1)
axes[1].set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
axes[1].set_yticks(range(len(labels)), labels, fontsize=7)
axes[1].set_xlabel("key position (attended to)")
axes[1].set_ylabel("query position")
axes[1].set_title(f"layer {layer}, head {head}: attention on one sequence", fontsize=9)
fig.colorbar(image, ax=axes[1], fraction=0.046, label="attention weight")
fig.tight_layout()
plt.show()

# %% [markdown]
# What the numbers say. The accuracy follows perfect copying for the first three examples and then levels off
# near 0.67, while keys new to the sequence stay at chance: the model learns from its context, and only from
# it, but after 2,000 steps (training loss 0.85, where perfect copying would reach about 0.52) it copies
# reliably from a short context only. The heads: both of layer 0 put about twice the untrained share of their
# attention on the right values, those of layer 1 little more than it; the picture (the highest-scoring head)
# shows queries at keys resting on the first position and queries at values looking at earlier values. This is
# not yet the clean induction head of Olsson et al., a key attending sharply to the value after its earlier
# copy; they report that such heads form in a sudden phase change, and this model's loss was still falling when
# training stopped (`python benchmarks/bench_in_context.py --steps 4000 --out ... --force` trains longer).
