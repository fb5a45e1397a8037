# %% [markdown]
# # 16. The modern decoder: the 2017/GPT-2 block and the Llama block side by side
#
# **Sources.** Lecture notes 2025 §1.3 (the pre-norm block this project's GPT uses); Zhang & Sennrich
# 2019 (RMSNorm); Shazeer 2020, "GLU Variants Improve Transformer" (SwiGLU); Su et al. 2021 (RoPE);
# Touvron et al. 2023 (Llama, which puts the four together). The lectures stop at GPT-2's block;
# every current open model (Llama, Qwen, Mistral) changes four things inside it and nothing else.
#
# Claims checked here:
# 1. the two blocks have the same two residual sums; only what sits in the sublayers differs;
# 2. RMSNorm is LayerNorm without re-centring: equal on zero-mean vectors, different once a vector has a mean;
# 3. SwiGLU with hidden width 8C/3 has the parameters of a 4C feed-forward without biases;
# 4. with the same parameter budget, both learn the same text, their losses within 0.3 of each other
#    after 150 steps (which one is ahead at this tiny size is printed; the benchmark settles it with seeds).
#
# Everything is imported from the package; the cells only build, measure and draw.

# %%
import matplotlib.pyplot as plt
import numpy as np

from minitransformer import (
    GELU,
    GPT,
    LLAMA_STYLE,
    CharTokenizer,
    LayerNorm,
    ReLU,
    RMSNorm,
    SiLU,
    TransformerBlock,
    default_corpus,
    get_batch,
)
from minitransformer.objectives.language_model import LanguageModelObjective
from minitransformer.training.config import TrainConfig, build_optimizer
from minitransformer.training.loop import LoopOptions, TrainingLoop
from minitransformer.variants.rope import RotaryEmbedding

# %% [markdown]
# ## Claim 1: two blocks, the same residual arithmetic
#
# Both are pre-norm: h = x + attn(norm1(x)), y = h + ff(norm2(h)). The Llama block swaps LayerNorm for
# RMSNorm, the GELU feed-forward for SwiGLU, drops every bias, and rotates queries and keys (RoPE)
# instead of adding a position table below the first block.

# %%
C, H = 48, 4
gpt2_block = TransformerBlock(C, H, 4 * C, activation="gelu", rng=0)
llama_block = TransformerBlock(C, H, 8 * C // 3, activation="swiglu", norm_layer="rmsnorm", bias=False, rng=0,
                               attention_options=dict(position=RotaryEmbedding(C // H)))


def parameter_table(block):
    """{sublayer: (class name, parameters)} of a block's children."""
    return {name: (type(child).__name__, child.num_parameters()) for name, child in block.named_children()
            if child.num_parameters() or name == "attn"}


print(f"{'sublayer':9s} {'GPT-2 block':>24s} {'Llama block':>24s}")
for name, (kind, count) in parameter_table(gpt2_block).items():
    other_kind, other_count = parameter_table(llama_block)[name]
    print(f"{name:9s} {kind:>16s} {count:7,d} {other_kind:>16s} {other_count:7,d}")
print(f"{'total':9s} {gpt2_block.num_parameters():24,d} {llama_block.num_parameters():24,d}")

x = np.random.default_rng(1).standard_normal((2, 5, C))
for block in (gpt2_block, llama_block):
    assert block(x).shape == x.shape
assert not [name for name, _ in llama_block.named_parameters() if "bias" in name or "beta" in name or ".b_" in name]

# %% [markdown]
# ## Claim 2: RMSNorm = LayerNorm minus the re-centring
#
# LayerNorm subtracts the mean and divides by the standard deviation; RMSNorm only divides by the root
# mean square. On a vector whose mean is zero the two are the same function. Add a constant to every
# feature: LayerNorm removes it again, RMSNorm keeps it (scaled), so the mean of its output moves
# towards ±1 as the shift grows.

# %%
rng = np.random.default_rng(2)
vector = rng.standard_normal((1, C))
vector -= vector.mean()
assert np.allclose(RMSNorm(C)(vector), LayerNorm(C)(vector))

shifts = np.linspace(-3, 3, 61)
layer_means = [LayerNorm(C)(vector + shift).mean() for shift in shifts]
rms_means = [RMSNorm(C)(vector + shift).mean() for shift in shifts]
assert np.allclose(layer_means, 0, atol=1e-12)
assert rms_means[-1] > 0.9 and rms_means[0] < -0.9

u = np.linspace(-4, 3, 200)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.5))
axes[0].plot(shifts, layer_means, label="LayerNorm")
axes[0].plot(shifts, rms_means, label="RMSNorm")
axes[0].set_xlabel("constant added to every feature"); axes[0].set_ylabel("mean of the normalised output")
axes[0].legend(); axes[0].set_title("re-centring")
for name, layer in (("ReLU", ReLU()), ("GELU (GPT-2)", GELU()), ("SiLU (SwiGLU's gate)", SiLU())):
    axes[1].plot(u, layer(u), label=name)
axes[1].set_xlabel("input"); axes[1].set_ylabel("activation"); axes[1].legend(); axes[1].set_title("activations")
plt.tight_layout(); plt.show()

# %% [markdown]
# ## Claim 3: SwiGLU's width 8C/3 keeps the parameter budget
#
# The GELU feed-forward has two matrices, $C \times 4C$ and $4C \times C$, and two biases. SwiGLU has three matrices
# (gate $W_1$, value $W_3$, output $W_2$) of width $d_\mathrm{ff}$: $3 C d_\mathrm{ff}$. With $d_\mathrm{ff} = 8C/3$ that is $8 C^2$, the two GELU
# matrices exactly; the Llama block saves only the biases. SiLU (right panel above) is GELU's close
# cousin; the difference that matters is the gate: $\mathrm{silu}(x W_1)$ multiplies $x W_3$ entry by entry.

# %%
gelu_ff, swiglu_ff = gpt2_block.ff.num_parameters(), llama_block.ff.num_parameters()
print(f"GELU feed-forward: {gelu_ff:,} parameters; SwiGLU with d_ff = {8 * C // 3}: {swiglu_ff:,}")
assert swiglu_ff == 3 * C * (8 * C // 3) == 8 * C * C == gelu_ff - (4 * C + C)

# %% [markdown]
# ## Claim 4: the same budget, the same text, close losses
#
# Two small GPTs, one of each kind, trained with the project's AdamW recipe on CPython's help text
# (shipped with Python), character tokens, the same batches. The Llama model has no position table and
# no biases, so its SwiGLU width is chosen to make the parameter counts as close as they can be. The
# Shakespeare benchmark (benchmarks/bench_modern_decoder.py, figures in benchmarks/README.md) does the
# same at the main job's size with three seeds. The table printed above shows where the Llama block's
# parameters went: the same attention matrices without their four biases, gains without shifts.
#
# The two models train on the fast tier (`kernels="fast"` and, by `TrainConfig`'s default, the fast AdamW) on
# purpose: as the benchmark and `python -m minitransformer train --style llama` train them, so that this small
# run is the benchmark's recipe. The fast layers give the plain layers' numbers up to float rounding
# (`tests/test_fast.py`); every other cell here, like the other notebooks but 17, uses the plain layers.

# %%
text = default_corpus()[:60_000]
tokenizer = CharTokenizer.train(text)
ids = np.array(tokenizer.encode(text))
V, T, STEPS = tokenizer.vocab_size, 32, 150
sizes = dict(vocab_size=V, d_model=32, n_heads=4, n_layers=2, max_len=T, dtype=np.float32, rng=0, kernels="fast")
gpt2 = GPT(d_ff=128, **sizes)
d_ff = min(range(60, 120), key=lambda width: abs(GPT(d_ff=width, **sizes, **LLAMA_STYLE).num_parameters()
                                                    - gpt2.num_parameters()))
llama = GPT(d_ff=d_ff, **sizes, **LLAMA_STYLE)
print(f"GPT-2-style: {gpt2.num_parameters():,} parameters; Llama-style (d_ff {d_ff}): {llama.num_parameters():,}")

config = TrainConfig(lr=3e-3, warmup_steps=10, lr_decay_steps=STEPS, max_steps=STEPS)
curves = {}
for name, model in (("GPT-2-style", gpt2), ("Llama-style", llama)):
    objective, optimizer, batches = LanguageModelObjective(model), build_optimizer(model, config), np.random.default_rng(3)
    loop = TrainingLoop(objective, optimizer, lambda batches=batches: get_batch(ids, T, 16, batches), config.learning_rate,
                        LoopOptions(grad_clip=1.0, max_steps=STEPS, log=False, progress=False))   # the package's one loop
    loop.fit()
    curves[name] = loop.history["loss"]

smooth = np.ones(10) / 10
for name, losses in curves.items():
    plt.plot(np.convolve(losses, smooth, mode="valid"), label=name)
plt.axhline(np.log(V), color="grey", ls=":", label="uniform guess, log V")
plt.xlabel("step"); plt.ylabel("training loss (10-step mean)"); plt.legend(); plt.show()

final = {name: float(np.mean(losses[-20:])) for name, losses in curves.items()}
print({name: round(loss, 3) for name, loss in final.items()})
assert all(loss < 0.75 * np.log(V) for loss in final.values())
assert abs(final["GPT-2-style"] - final["Llama-style"]) < 0.3
