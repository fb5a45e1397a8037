# %% [markdown]
# # 21. Pre-training an encoder-decoder: T5's span corruption and BART's denoising
#
# **The claim.** Sachin Kumar, *Language Modeling III: Transformers* ([CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)), "Encoder-Decoders": T5 and BART are encoder-decoders,
# pre-trained by corrupting text and teaching the decoder to repair it. T5 (Raffel et al. 2020, §3.1.4) hides about
# 15% of the tokens in spans of mean length 3, each span replaced by one sentinel; the target spells out only the
# hidden spans. BART (Lewis et al. 2020, §2.2) corrupts the text in several ways (masking tokens, deleting them,
# replacing spans of Poisson(3) length by one [MASK]) and its target is the whole original.
#
# **Here.** The corruptions are data transforms (`minitransformer/objectives/denoising.py`); the model and loss
# are the package's `Seq2SeqTransformer` and its teacher-forced cross-entropy (`train_seq2seq`). Text: the
# characters of the corpus that ships with Python (`default_corpus()`).

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import CharTokenizer, Seq2SeqTransformer, default_corpus
from minitransformer.objectives.denoising import (
    MASK,
    DenoisingTask,
    fill_sentinels,
    span_corruption,
    t5_noise_mask,
    text_infilling,
    token_deletion,
    token_masking,
)
from minitransformer.objectives.seq2seq import train_seq2seq

text = default_corpus()
tokenizer = CharTokenizer.train(text)
stream = np.array(tokenizer.encode(text))
task = DenoisingTask(stream, tokenizer.vocab_size, block_size=40, transform="span_corruption", rng=0)


def readable(ids):
    """Token ids of a DenoisingTask -> text, sentinels as <0>, <1>, ..., the mask as [M]."""
    return "".join(f"<{token - task.sentinels[0]}>" if token in task.sentinels else "[M]" if token == MASK
                   else tokenizer.decode([token - task.offset]) for token in ids)

# %% [markdown]
# ## One sentence, four corruptions

# %%
clean = stream[1000:1040] + task.offset
rng = np.random.default_rng(0)
source, target = span_corruption(clean, task.sentinels, rng)
print("original        ", repr(readable(clean)))
print("T5 source       ", repr(readable(source)))
print("T5 target       ", repr(readable(target)))
assert fill_sentinels(source, target, task.sentinels) == clean.tolist()       # source + target spell the original
for name, (source, target) in [("BART masking   ", token_masking(clean, MASK, rng)),
                               ("BART deletion  ", token_deletion(clean, rng)),
                               ("BART infilling ", text_infilling(clean, MASK, rng))]:
    print(name, repr(readable(source)))
    assert target == clean.tolist()                                            # BART's target: the whole text

# %% [markdown]
# ## The rates hold on average
# Over 2,000 windows of 40 characters: T5 hides round(0.15 · 40) = 6 characters each time, in spans whose mean
# length is 6 / round(6 / 3) = 3 (a span rolled over the window's end counts as two). BART's infilling hides
# ceil(0.3 · 40) = 12 in spans of Poisson(3) length, each a single [MASK] in the source.

# %%
masks = [t5_noise_mask(40, rng) for _ in range(2000)]
span_count = np.mean([np.sum(mask & ~np.concatenate([[False], mask[:-1]])) for mask in masks])
hidden_by_infilling = [40 - (len(s) - s.count(MASK)) for s, _ in (text_infilling(clean, MASK, rng) for _ in range(2000))]
print(f"T5: fraction hidden {np.mean(masks):.3f}, mean span length {6 / span_count:.2f}")
print(f"BART infilling: fraction hidden {np.mean(hidden_by_infilling) / 40:.3f}")
assert np.mean(masks) == 6 / 40 and 2.7 < 6 / span_count <= 3.0
assert np.mean(hidden_by_infilling) == 12

# %% [markdown]
# ## A short training run of each
# The same small encoder-decoder (1 layer each side, C = 32, shared embeddings) trained 80 steps of 16 windows
# on T5's objective and on each of BART's three. The losses are per target token, so they are not the same
# quantity: T5's target holds the 6 hidden characters and 3 or 4 sentinels, BART's all 40 characters, most
# of which the encoder shows it unchanged.

# %%
losses = {}
for transform in DenoisingTask.TRANSFORMS:
    task = DenoisingTask(stream, tokenizer.vocab_size, block_size=40, transform=transform, rng=1)
    model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, d_model=32, n_heads=2, n_layers=1, d_ff=64,
                               max_len=48, pad_id=0, norm="pre", share_embeddings=True, tie_output=True, rng=0)
    losses[transform] = train_seq2seq(model, task, steps=80, batch_size=16, lr=3e-3, warmup=10)
    first, last = np.mean(losses[transform][:5]), np.mean(losses[transform][-5:])
    print(f"{transform:16s} loss {first:.2f} -> {last:.2f} (nats per target token; uniform over "
          f"{task.vocab_size} tokens would be {np.log(task.vocab_size):.2f})")
    assert last < first - 1.0

fig, ax = plt.subplots(figsize=(5.5, 3.2))
for (transform, curve), style in zip(losses.items(), ("-", "--", ":", "-.")):     # BART's three lie close together
    ax.plot(np.convolve(curve, np.ones(5) / 5, mode="valid"), style,
            label={"span_corruption": "T5 span corruption", "token_masking": "BART token masking",
                   "token_deletion": "BART token deletion", "text_infilling": "BART text infilling"}[transform])
ax.set_xlabel("training step (16 windows of 40 characters)")
ax.set_ylabel("cross-entropy per target token\n(nats, 5-step mean)")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# After 80 steps all four losses have fallen well below the uniform 4.74 nats, T5's furthest (2.44, against
# 2.97 to 3.10 for BART's three, which are close to one another). Part of
# T5's target is easy: its sentinels come in a known order (<0>, <1>, ...) and are a third of its tokens. Most
# of BART's target is a copy of the source, which would cost almost nothing once the decoder has learnt to read
# the source through cross-attention; 80 steps are too few for that, so BART is still paying for the whole text
# whichever way it was corrupted.
# T5 pays the decoder only for the hidden spans, which is the economy Raffel et al. chose it for (§3.3.4).
