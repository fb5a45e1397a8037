# %% [markdown]
# # 9. BERT: masked language modelling (80/10/10) and next-sentence prediction
#
# **Source.** Sachin Kumar, "Language Modeling III: Transformers" ([CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)), the BERT slides: an encoder sees the whole input in both
# directions, so it cannot be trained to predict the next token (it would see it). BERT has two objectives instead.
# (1) **Masked words**: 15% of the input tokens are chosen; of those, 80% become [MASK], 10% are kept as they are,
# 10% are replaced by a random word; the model must give back the original at every chosen position. (2) **Next
# sentence**: two segments separated by a separator token; half of the time the second truly follows the first, half
# of the time it is a random one; a classifier on the first position predicts which. (Devlin et al. 2019,
# §3.1.) Greg Strabel, "Transformers" (2023), §8, introduces the same encoder-only model.
#
# Everything below is the package: `mask_tokens`, `BertMLM(nsp=True)`, `MaskedLMObjective`, and the
# character corpus of the `mlm` command (`[CLS] chunk_a [SEP] chunk_b [SEP]`, 8 characters per chunk,
# the English help text that ships with Python).

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import BertMLM, default_corpus, mask_tokens, perplexity
from minitransformer.objectives.masked_lm import CLS, MASK, SEP, SPECIALS, CharCorpus, masked_lm_loop

rng = np.random.default_rng(0)
corpus = CharCorpus(default_corpus(), chunk=8, rng=rng)
n_special, V = len(SPECIALS), corpus.vocab_size
print(f"V = {V}: the specials {SPECIALS} and {V - n_special} characters")

# %% [markdown]
# ## The 80/10/10 rule, on real counts
# 2,000 examples of 19 tokens: 16 characters each, and [CLS], [SEP], [SEP], which are never chosen. We let
# `mask_tokens` corrupt them and count what happened at the chosen positions. A random replacement can
# draw the original character by chance (1 in V − 4), so "replaced by another character" is a little
# under 10%, and "left as it was" a little over.
#
# **15% is rounded per sequence.** As in BERT's own data script (`create_pretraining_data.py`: round(15% of
# the sequence's tokens), at least 1), each example gets a whole number of chosen positions: 15% of 16
# characters is 2.4, so 2 are chosen, 12.5%. On long sequences the rate is 15%: the last check below uses
# rows of 400 characters (60 chosen each).

# %%
ids, follows = corpus.batch(2000)
inputs, targets, chosen = mask_tokens(ids, rng, MASK, n_special, V)
ordinary = ids >= n_special
n_chosen = int(chosen.sum())
counts = {"became [MASK]": int(np.sum(chosen & (inputs == MASK))),
          "left as it was": int(np.sum(chosen & (inputs == ids))),
          "another character": int(np.sum(chosen & (inputs != MASK) & (inputs != ids)))}
shares = {name: count / n_chosen for name, count in counts.items()}
print(f"chosen: {n_chosen} of {ordinary.sum()} characters = {n_chosen / ordinary.sum():.2%}")
print({name: f"{count} ({shares[name]:.1%})" for name, count in counts.items()})

expected = {"became [MASK]": 0.8, "left as it was": 0.1 + 0.1 / (V - n_special),
            "another character": 0.1 * (1 - 1 / (V - n_special))}
assert n_chosen == sum(counts.values())
assert np.all(chosen.sum(axis=1) == round(0.15 * 16))                  # 2.4 rounds to 2 per 16-character example
long_rows = corpus.parts["train"][:400 * 50].reshape(50, 400)
assert np.all(mask_tokens(long_rows, rng, MASK, n_special, V)[2].sum(axis=1) == 60)     # 15% of 400
assert not (chosen & ~ordinary).any()                                   # [CLS] and [SEP] are never chosen
for name, share in expected.items():                                    # within 4 binomial standard deviations
    assert abs(shares[name] - share) < 4 * np.sqrt(share * (1 - share) / n_chosen), name
assert np.array_equal(targets[chosen], ids[chosen]) and np.all(targets[~chosen] == -1)   # only chosen are scored

fig, ax = plt.subplots(figsize=(6.5, 3.5))
ax.bar(range(3), list(counts.values()), color=["C0", "C1", "C2"], label="counted")
ax.plot(range(3), [expected[name] * n_chosen for name in counts], "k_", ms=40, mew=2, label="expected")
for index, (name, count) in enumerate(counts.items()):
    ax.text(index, count, f"{shares[name]:.1%}", ha="center", va="bottom")
ax.set_xticks(range(3), list(counts)); ax.set_ylabel(f"chosen positions (of {n_chosen})")
ax.set_ylim(0, 1.15 * max(counts.values()))
ax.set_title("what mask_tokens did to the chosen positions"); ax.legend(loc="center right")
plt.show()

# %% [markdown]
# ## The next-sentence labels
# The second chunk follows the first in the text half of the time. We check the labels against the text itself:
# where the label says "follows", the 16 characters of the two chunks occur together in the text; where it
# says "random", they almost never do.

# %%
train_text = corpus.show(corpus.parts["train"])                 # the training characters as one string
first, second = ids[:, 1:9], ids[:, 10:18]
continues = np.array([corpus.show(np.concatenate([a, b])) in train_text for a, b in zip(first[:200], second[:200])])
print(f"label 'follows' in {follows.mean():.1%} of 2000 examples; the first 200 checked against the text: "
      f"{np.mean(continues[follows[:200] == 1]):.0%} of 'follows' and {np.mean(continues[follows[:200] == 0]):.0%} "
      f"of 'random' continue the first chunk")
assert abs(follows.mean() - 0.5) < 4 * np.sqrt(0.25 / len(follows))
assert np.all(ids[:, 0] == CLS) and np.all(ids[:, 9] == SEP) and np.all(ids[:, 18] == SEP)
assert continues[follows[:200] == 1].all() and continues[follows[:200] == 0].mean() < 0.1

# %% [markdown]
# ## A short run of both objectives
# `MaskedLMObjective(nsp=True)` adds the cross-entropy at the chosen positions and the next-sentence
# cross-entropy from the [CLS] position. 150 steps of 32 examples: enough for the masked characters,
# which the model learns to fill from the letters around them on *both* sides; far too little for the
# next-sentence task (Devlin et al. trained for a million steps; Liu et al. 2019, RoBERTa, found the task
# could be dropped without loss), so we report its accuracy and do not claim it learned anything.

# %%
model = BertMLM(V, d_model=32, n_heads=4, n_layers=2, d_ff=128, max_len=19, pad_id=0, nsp=True,
                dtype=np.float32, rng=1)
steps = 150
loop = masked_lm_loop(model, corpus, rng, steps, batch_size=32, lr=3e-3, nsp=True, warmup=30, log=False,
                      progress=False)                    # the package's one training loop, Adam with warm-up
objective = loop.objective                               # MaskedLMObjective(model, nsp=True)
test_ids, test_follows = corpus.batch(1000, part="test")
test_inputs, test_targets, test_chosen = mask_tokens(test_ids, np.random.default_rng(1), MASK, n_special, V)


def held_out():
    """Masked-character loss and accuracy, next-sentence accuracy, on the fixed held-out batch."""
    model.eval()
    token_logits, nsp_logits = model(test_inputs)
    model.train()
    masked_loss = float(objective.masked_loss(token_logits, test_targets))
    accuracy = np.mean(token_logits.argmax(axis=-1)[test_chosen] == test_ids[test_chosen])
    return masked_loss, accuracy, np.mean(nsp_logits.argmax(axis=-1) == test_follows)


before = held_out()
started = time.perf_counter()
loop.fit()
losses = loop.history["loss"]
after = held_out()
most_common = np.bincount(corpus.parts["train"]).argmax()
baseline = np.mean(test_ids[test_chosen] == most_common)
print(f"{steps} steps in {time.perf_counter() - started:.1f} s")
for name, (loss, accuracy, nsp_accuracy) in (("before", before), ("after", after)):
    print(f"{name:6s} masked characters: loss {loss:.3f}, perplexity {perplexity(loss):5.1f}, accuracy {accuracy:.1%}"
          f" | next sentence: accuracy {nsp_accuracy:.1%}")
print(f"always guessing the most common character ({corpus.show([most_common])!r}): {baseline:.1%}")
assert after[0] < before[0] - 0.5 and perplexity(after[0]) < perplexity(before[0]) / 2
assert after[1] > baseline + 0.05                                    # better than guessing the commonest letter
assert abs(after[2] - 0.5) < 0.1                                     # next sentence: near chance after 150 steps

# %%
model.eval()
filled_logits, _ = model(test_inputs[:4])
filled = np.where(test_chosen[:4], filled_logits.argmax(axis=-1), test_inputs[:4])
for row in range(4):
    print(f"original {corpus.show(test_ids[row])}\ninput    {corpus.show(test_inputs[row])}\n"
          f"filled   {corpus.show(filled[row])}\n")

fig, ax = plt.subplots(figsize=(6.5, 3.5))
ax.plot(losses, lw=0.8, label="batch loss (masked characters + next sentence)")
ax.axhline(before[0] + np.log(2), color="0.5", ls=":", label="held-out before training (masked + ln 2)")
ax.axhline(after[0] + np.log(2), color="k", ls="--", label="held-out after (masked + ln 2)")
ax.set_xlabel("step"); ax.set_ylabel("loss (nats)"); ax.legend(fontsize=8)
plt.show()
