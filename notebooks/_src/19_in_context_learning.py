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
# `data/in_context_gpt.npz` (97 KB); everything below is computed from those weights. The last section shows a
# clean induction head forming in a 2-layer attention-only model (`data/induction_gpt.npz`).

# %%
import pathlib

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import GPT
from minitransformer.models.head_scores import head_scores
from minitransformer.objectives.in_context import in_context_accuracy, induction_scores
from minitransformer.objectives.induction import drop_step, part_losses
from minitransformer.tasks.key_value import KeyValueTask
from minitransformer.tasks.repeated_segment import RepeatedSegmentTask

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
# training stopped (`python benchmarks/bench_in_context.py --steps 4000 --out ... --force` trains longer). The
# next section shows that head, in a smaller model and a task made for it.

# %% [markdown]
# ## A clean induction head, and the moment it forms
# Olsson et al. (2022, §2 and their study of small attention-only models) describe the circuit in two parts: a
# *previous-token head* in one layer writes into every position $j$ the identity of the token at $j - 1$; an
# *induction head* in the next layer then matches its query, the current token $x_t$, against those keys, so it
# finds the position $j$ with $x_{j-1} = x_t$ and copies $x_j$, the token that came after $x_t$ last time. They
# see it form suddenly: the loss on repeated text drops in a phase change while the rest stays put.
#
# The setting (`minitransformer/tasks/repeated_segment.py`): 32 random tokens out of $V = 64$ in which one
# random segment of 4 to 10 tokens appears twice, at a random distance. Every target is a uniform draw,
# $\log V = 4.16$ nats, except inside the repeat, where content matching alone can find it (the distance varies over the
# whole context, so no look-back by position helps). The model: 2 layers of 2 heads, $C = 32$, rotary
# positions, no feed-forward sublayers, trained with the loss on the repeat's targets alone
# (`minitransformer/objectives/induction.py` says why). `python benchmarks/train_induction.py --out
# data/induction_gpt.npz` trained 3 seeds (a few minutes each, longer than this notebook's budget) and saved the
# first seed's weights with every seed's loss curves.

# %%
shipped = np.load(pathlib.Path("..") / "data" / "induction_gpt.npz")
setting = {str(name): float(value) for name, value in zip(shipped["config_keys"], shipped["config_values"])}
inductor = GPT(int(setting["vocab_size"]), int(setting["d_model"]), int(setting["n_heads"]),
               int(setting["n_layers"]), int(setting["d_ff"]), int(setting["block_size"]),
               positional=str(shipped["positional"]), dtype=np.float32)
inductor.load_state_dict({name[len("param."):]: shipped[name] for name in shipped.files if name.startswith("param.")})
print(setting)

fig, ax = plt.subplots(figsize=(8, 3.6))
for seed in shipped["seeds"]:
    steps, repeated = shipped[f"seed{seed}.eval_step"], shipped[f"seed{seed}.repeated_loss"]
    drop = drop_step(steps, repeated)
    ax.plot(steps, repeated, label=f"seed {seed} (half way down at step {drop})")
    print(f"seed {seed}: repeated part {repeated[0]:.2f} -> {repeated[-1]:.2f}, half way down at step {drop}")
    assert repeated[-1] < 0.5 < 3.5 < repeated[0]                    # the drop, in every seed
ax.axhline(np.log(setting["vocab_size"]), color="grey", lw=0.8, label="$\\log V$ (guessing)")
ax.set_xlabel("training step")
ax.set_ylabel("loss on the repeated part (nats per token)")
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Each seed's loss on the repeated part sits on a plateau for the first several hundred steps: the model only
# learns to spread its bets over tokens already in the context. Then, within a few hundred steps, it falls from
# near $\log V$ towards 0; that is the induction head forming. (The random part's loss is not drawn: it was not
# trained, and a model that copies after every earlier occurrence of its token, chance ones included, ends far
# above $\log V$ there; the benchmark prints it.)
#
# ## Which heads do it
# The scores of `minitransformer/models/head_scores.py` on 512 fresh sequences: the *previous-token* score is
# the mean attention from $t$ to $t - 1$; the *prefix-matching* score the mean attention a query in the repeat
# puts on the position right after its token's earlier copy; the *copying* score reads a head's OV circuit
# $W_E W_V^h W_O^h W_U$ (a $V \times V$ map) as $\sum \lambda / \sum |\lambda|$ over its eigenvalues, 1 when the
# head only raises the logit of the token it attends to.

# %%
fresh = RepeatedSegmentTask(int(setting["vocab_size"]), int(setting["seq_len"]), int(setting["min_length"]),
                            int(setting["max_length"]), rng=2024)
x, y, earlier_next = fresh.batch(512)
scores = head_scores(inductor, x, earlier_next)
for name, table in scores.items():
    print(f"{name:16s}", "   ".join(f"layer {layer}: " + " ".join(f"{value:5.2f}" for value in row)
                                    for layer, row in enumerate(table)))
induction_head = int(scores["prefix_matching"][1].argmax())
previous_head = int(scores["previous_token"][0].argmax())
_, repeated_loss = part_losses(inductor, x, y, earlier_next)
print(f"induction head: layer 1 head {induction_head}; previous-token head: layer 0 head {previous_head}")
print(f"loss on the repeated part {repeated_loss:.3f} (log V = {np.log(setting['vocab_size']):.3f})")
assert scores["prefix_matching"][1, induction_head] > 0.7 and scores["copying"][1, induction_head] > 0.5
assert scores["previous_token"][0, previous_head] > 0.5 and scores["prefix_matching"][0].max() < 0.2
assert repeated_loss < 0.5

# %% [markdown]
# Both heads' attention on one sequence. Left, layer 0's previous-token head: the bright line one below the
# diagonal is every query looking at the token just before it. Right, layer 1's induction head: queries inside
# the repeat look at the position after their token's earlier copy (circled), an off-diagonal stripe at the
# segment's distance. Outside the repeat it does the same wherever its token occurred before by chance (with 32
# tokens out of 64 that is common), and copies a token that is no better than a guess: the price of a loss that
# never counted the random part (`minitransformer/objectives/induction.py`).

# %%
one = 0
with inductor.evaluating():
    inductor(x[one:one + 1])
patterns = [inductor.blocks[0].attn.attention.alpha[0, previous_head],             # (T, T)
            inductor.blocks[1].attn.attention.alpha[0, induction_head]]
queries = np.flatnonzero(earlier_next[one] >= 0)
fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
for ax, pattern, title in zip(axes, patterns, [f"layer 0, head {previous_head}: previous token",
                                               f"layer 1, head {induction_head}: induction"]):
    image = ax.imshow(pattern, cmap="magma", vmin=0, vmax=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key position (attended to), labelled by its token")
    ax.set_ylabel("query position, labelled by its token")
    ax.set_xticks(range(len(x[one])), x[one], rotation=90, fontsize=6)
    ax.set_yticks(range(len(x[one])), x[one], fontsize=6)
axes[1].scatter(earlier_next[one, queries], queries, s=60, facecolors="none", edgecolors="cyan",
                label="after the earlier copy")
axes[1].legend(fontsize=7, loc="lower left")
fig.colorbar(image, ax=axes, fraction=0.03, label="attention weight")
plt.show()
