# %% [markdown]
# # 8. The encoder–decoder: cross-attention, and greedy against beam search
#
# **Sources.** Sachin Kumar, "Language Modeling III: Transformers" ([CSE 5525, Ohio State,
# 2025](https://shocheen.github.io/cse-5525-spring-2025/)), the "Transformer Decoder" slides: a decoder block has
# masked self-attention (each position sees only the earlier ones), then an attention whose **queries** come from the
# decoder and whose **keys and values** come from the encoder's output, then the feed-forward layer: the "3 forms of
# attention" of the original Transformer (Vaswani et al. 2017, §3.2.3), and decoding "time step" by time step.
# Jonathan May, "Transformer Language Models", lecture notes 2025, footnote 5 of §1, names the second kind
# *cross-attention*.
#
# **The task.** The package's `ReverseTask`: a string of 3–6 symbols is to be written back in reverse
# ("3 1 4" → "4 1 3"). To produce output position t the decoder must read source position S − 1 − t, so
# a trained model's cross-attention should trace the anti-diagonal. Everything is the package:
# `Seq2SeqTransformer`, `train_seq2seq` (teacher forcing, Adam with warm-up), `greedy_decode`,
# `beam_search`.

# %%
import time

import matplotlib.pyplot as plt
import numpy as np

from minitransformer import Seq2SeqTransformer, beam_search, greedy_decode
from minitransformer.objectives.seq2seq import train_seq2seq
from minitransformer.tasks.reverse import BOS, EOS, PAD, ReverseTask, exact_match

task = ReverseTask(n_symbols=8, min_len=3, max_len=6, n_test=300, rng=0)
model = Seq2SeqTransformer(task.vocab_size, task.vocab_size, d_model=32, n_heads=2, n_layers=2, d_ff=64,
                           max_len=12, pad_id=PAD, rng=0)
print(model, f"{model.num_parameters():,} parameters; vocabulary: pad, bos, eos and {task.n_symbols} symbols")

# %% [markdown]
# ## Training (teacher forcing)
# The decoder reads [BOS] $y_1 \dots y_{T-1}$ and is scored on $y_1 \dots y_T$ [EOS], all positions at once. We train in
# two runs of 150 steps of 32 random strings (none of them a test string): after the first the model is
# half-trained, which is where decoding strategies differ most; after the second it reverses nearly everything.

# %%
started = time.perf_counter()
losses = train_seq2seq(model, task, steps=150, batch_size=32, lr=3e-3, warmup=50)
print(f"150 steps in {time.perf_counter() - started:.1f} s; loss {np.mean(losses[:10]):.2f} -> {np.mean(losses[-10:]):.3f}")
assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
sources = task.test_sources
src, tgt_in, tgt_out = task.batch(sources)

# %% [markdown]
# ## Decoding the half-trained model: greedy against beam search
# At generation time there is no target to read: the decoder runs one step at a time, feeding back what
# it chose (with a key/value cache). **Greedy** takes the most likely token at every step. **Beam search**
# (beam size 4) keeps the four best prefixes by total log-probability and returns the best finished one.
# Beam search looks for a sequence the *model* likes more; we check that on every test string by scoring
# both outputs with the model itself (teacher forcing, the sum of the log-probabilities of the chosen
# tokens).

# %%
def sequence_log_probability(model, src, tokens):
    """Total log-probability under the model of each row of `tokens` (up to its EOS, or all of it without one)."""
    decoder_input = np.concatenate([np.full((len(tokens), 1), BOS), tokens[:, :-1]], axis=1)
    logits = model(src, decoder_input)                                          # (B, T, V)
    log_probs = logits - logits.max(axis=-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]  # (B, T)
    ends = np.where((tokens == EOS).any(axis=1), np.argmax(tokens == EOS, axis=1), tokens.shape[1] - 1)
    keep = np.arange(tokens.shape[1])[None, :] <= ends[:, None]
    return (picked * keep).sum(axis=1)


def compare_decoders(model):
    """Greedy and beam-4 outputs on the test strings, their log-probabilities and exact-match accuracies."""
    max_len = task.max_len + 2
    greedy = greedy_decode(model, src, BOS, EOS, max_len, pad_id=PAD)
    beam, beam_scores = beam_search(model, src, BOS, EOS, max_len, beam_size=4, pad_id=PAD)
    greedy_logp, beam_logp = sequence_log_probability(model, src, greedy), sequence_log_probability(model, src, beam)
    assert np.allclose(beam_logp, beam_scores)       # beam search's own score is the model's log-probability
    accuracy = {"greedy": exact_match(greedy, sources, task.target_of),
                "beam 4": exact_match(beam, sources, task.target_of)}
    return greedy, beam, greedy_logp, beam_logp, accuracy


greedy, beam, greedy_logp, beam_logp, accuracy = compare_decoders(model)
better = np.sum(beam_logp > greedy_logp + 1e-9)
print(f"exact match on {len(sources)} test strings: {accuracy}")
print(f"beam search found a more likely output than greedy for {better} strings, an equally likely one for the rest")
assert np.all(beam_logp >= greedy_logp - 1e-9)                   # never worse than greedy here
assert better > 0 and accuracy["beam 4"] > accuracy["greedy"]

# %%
differ = np.flatnonzero(beam_logp > greedy_logp + 1e-9)
for row in differ[:4]:
    print(f"source {task.decode(sources[row]):14s} greedy {task.decode(greedy[row]):14s} (log p {greedy_logp[row]:6.2f})"
          f"   beam {task.decode(beam[row]):14s} (log p {beam_logp[row]:6.2f})")

fig, ax = plt.subplots(figsize=(5.5, 5))
ax.scatter(greedy_logp, beam_logp, s=12, alpha=0.6)
low = min(greedy_logp.min(), beam_logp.min())
ax.plot([low, 0], [low, 0], "k:", lw=1, label="equal")
ax.set_xlabel("log-probability of the greedy output"); ax.set_ylabel("log-probability of the beam-search output")
ax.set_title(f"half-trained, {len(sources)} test strings: greedy {accuracy['greedy']:.0%} correct, beam {accuracy['beam 4']:.0%}")
ax.legend()
plt.show()

# %% [markdown]
# ## Trained further: where each output position reads the source
# A second run of 150 steps, from the weights the first left. Then we run the trained model on test strings with teacher forcing and read the weights of the second
# decoder block's cross-attention, `cross_attn.attention.alpha` $(B, H, T_\mathrm{target}, S_\mathrm{source})$, averaged over
# the two heads. Output position t of a string of length n should look at source position n − 1 − t;
# position n (where EOS is due) has no source symbol of its own.

# %%
losses += train_seq2seq(model, task, steps=150, batch_size=32, lr=3e-3, warmup=50)
print(f"after 300 steps: loss {np.mean(losses[-10:]):.3f}")
model.eval()
model(src, tgt_in)
cross = [block.cross_attn.attention.alpha.mean(axis=1) for block in model.blocks]     # per layer (B, T, S)
lengths = np.array([len(s) for s in sources])
hits = total = 0
for row, n in enumerate(lengths):
    read = cross[-1][row, :n, :n].argmax(axis=-1)                       # source position read most, per output
    hits += np.sum(read == n - 1 - np.arange(n))
    total += n
print(f"output positions whose strongest cross-attention is on the mirrored source position: {hits / total:.1%}")
assert hits / total > 0.8
assert np.allclose(cross[-1].sum(axis=-1), 1)
assert np.all(cross[-1][lengths < 6][:, :, 5] == 0)                     # padding in the source gets no weight

# %%
examples = [int(np.argmax(lengths == 6)), int(np.argmax(lengths == 4))]
fig, axes = plt.subplots(2, 2, figsize=(9, 7.5), layout="constrained")
for column, row in enumerate(examples):
    n = lengths[row]
    source_labels = [task.decode([t]) for t in src[row, :n]]
    target_labels = [task.decode([t]) if t != BOS else "BOS" for t in tgt_in[row, :n + 1]]
    for layer in range(2):
        ax = axes[layer, column]
        image = ax.imshow(cross[layer][row, :n + 1, :n], vmin=0, vmax=1, cmap="viridis")
        ax.set_xticks(range(n), source_labels); ax.set_yticks(range(n + 1), target_labels)
        ax.set_xlabel("source symbol (key)"); ax.set_ylabel("decoder input (query)")
        ax.set_title(f"decoder block {layer + 1}, source '{task.decode(src[row, :n])}'", fontsize=9)
fig.colorbar(image, ax=axes, shrink=0.6, label="cross-attention weight (mean of 2 heads)")
plt.show()

# %% [markdown]
# And the two decoders on the trained model: both now reverse almost every test string, and they rarely
# disagree. Beam search maximises the model's probability, not correctness: where the model is wrong, a
# more likely output can be a wrong one, so beam search is not guaranteed to score higher on the task.

# %%
*_, greedy_logp_after, beam_logp_after, accuracy_after = compare_decoders(model)
print(f"exact match after 300 steps: {accuracy_after}; beam more likely than greedy for "
      f"{np.sum(beam_logp_after > greedy_logp_after + 1e-9)} strings")
assert min(accuracy_after.values()) > 0.9 and accuracy_after["greedy"] > accuracy["greedy"]
