"""What a training run is built from: its config (`TrainConfig`) and the builders of its model and optimizer.

The GPT trainer (objectives/language_model.py) builds its model and AdamW from a `TrainConfig`
with the builders here, on every MPI rank alike; nanoGPT keeps the same
settings at the top of its train.py.

`transformer_adam` is the optimizer of the encoder-decoder, BERT and
fine-tuning demonstrations: Adam with the settings of Vaswani et al. (2017)
§5.3.

Left out: reading a config from a file (the `train` command maps its options
onto `TrainConfig`).
"""

import dataclasses

import numpy as np

from ..models.gpt import GPT, LLAMA_STYLE
from .optim import Adam, AdamW, parameter_groups
from .optim.fast import FastAdam, FastAdamW
from .schedules import cosine_rate, scaled_noam_rate

# The decoders a run can build, by name (`TrainConfig.style`): GPT's options that make each one
STYLES = {"gpt2": dict(positional="learned", norm_layer="layernorm", activation="gelu", bias=True),  # GPT-2
          "llama": LLAMA_STYLE}         # Touvron et al. (2023): RoPE, RMSNorm, SwiGLU, no biases


@dataclasses.dataclass
class TrainConfig:
    """Everything that defines a run. Defaults: nanoGPT's Shakespeare-char "CPU" configuration."""

    # data
    block_size: int = 64            # T, the context window (the model's max_len)
    batch_size: int = 12            # B, windows per step
    # model
    style: str = "gpt2"             # which decoder (`STYLES`): "gpt2" (learned positions, LayerNorm, GELU, biases)
                                    # or "llama" (RoPE, RMSNorm, SwiGLU, no biases)
    n_layers: int = 4
    n_heads: int = 4                # H
    d_model: int = 128              # C
    d_ff: int = 512                 # feed-forward width (4 C); "llama": SwiGLU's hidden width (`matching_llama_width`)
    dropout: float = 0.0            # the notes' 0.1 helps on small corpora with long runs
    dtype: str = "float32"
    # optimisation
    max_steps: int = 2000
    lr: float = 1e-3                # peak learning rate
    min_lr: float = 1e-4            # floor of the cosine decay
    warmup_steps: int = 100
    lr_decay_steps: int = 2000      # the step at which the cosine reaches min_lr
    schedule: str = "cosine"        # "cosine", "noam" (the notes' rule, scaled by lr / its peak), "constant"
    weight_decay: float = 0.1
    decay_embeddings: bool = False  # nanoGPT decays every 2-D tensor, embeddings included
    beta1: float = 0.9
    beta2: float = 0.99
    grad_clip: float = 1.0          # 0 disables clipping
    # evaluation
    eval_interval: int = 250
    eval_batches: int = 20
    seed: int = 1337
    # speed
    workers: int = 1                # MPI ranks that split each batch (data parallel: distributed.py), e.g. 2 on 2 cores
    parallel: str = "replicated"    # with workers > 1: "replicated" (DDP's all-reduce) or "sharded" (ZeRO-1)
    kernels: str = "fast"           # "fast" (minitransformer/fast/) or "plain" (the lecture's layers): same numbers
    worker_timeout: float = 60.0    # seconds, > 0: the least a data-parallel step waits for a rank's answer before
                                    # it aborts the job (distributed.py: or 20 x the slowest step, if longer)

    # fields that may change when a run is resumed; all others must match the checkpoint
    # (another `workers` or `parallel` adds the gradient up in another order: the losses then agree only up to
    # float rounding, and with dropout the masks differ too)
    RESUMABLE = ("max_steps", "eval_interval", "eval_batches", "workers", "parallel", "kernels", "worker_timeout")

    def learning_rate(self, step):
        """The rate for 0-based `step`, from the schedule named by `self.schedule` (schedules.py)."""
        if self.schedule == "cosine":
            return cosine_rate(step, self.lr, self.min_lr, self.warmup_steps, self.lr_decay_steps)
        if self.schedule == "noam":                             # a warmup of 0 steps counts as 1 here
            return scaled_noam_rate(step, self.lr, max(self.warmup_steps, 1), self.d_model)
        if self.schedule == "constant":
            return self.lr
        raise ValueError(f"unknown schedule {self.schedule!r}; expected 'cosine', 'noam' or 'constant'")


def build_model(config, vocab_size):
    """The GPT that `config` describes: pre-norm, tied embeddings, and the decoder `config.style` names (`STYLES`)."""
    if config.style not in STYLES:
        raise ValueError(f"TrainConfig expected style in {tuple(STYLES)}, got {config.style!r}")
    return GPT(vocab_size, config.d_model, config.n_heads, config.n_layers, config.d_ff, config.block_size,
               dropout=config.dropout, dtype=np.dtype(config.dtype), rng=config.seed, kernels=config.kernels,
               **STYLES[config.style])


def parameter_count(config, vocab_size):
    """The number of parameters of `build_model(config, vocab_size)`, counted from the config (nothing built):
    the token table V C (tied to the output), the position table T C when learned, and per block attention's four
    C x C maps, the feed-forward sublayer (GELU's two maps, SwiGLU's three) with their biases if any, and a norm
    before each sublayer (LayerNorm's gain and shift, RMSNorm's gain), then the final norm."""
    style, C, width = STYLES[config.style], config.d_model, config.d_ff
    bias = style["bias"]
    norm = 2 * C if style["norm_layer"] == "layernorm" else C
    attention = 4 * C * C + (4 * C if bias else 0)                          # w_q, w_k, w_v, w_o (b_q, ..., b_o)
    if style["activation"] == "swiglu":
        feed_forward = 3 * C * width + ((2 * width + C) if bias else 0)     # w1, w3: C -> d_ff; w2: d_ff -> C
    else:
        feed_forward = 2 * C * width + ((width + C) if bias else 0)         # fc1: C -> d_ff; fc2: d_ff -> C
    block = norm + attention + (norm + feed_forward if width else 0)        # d_ff 0: attention only
    positions = config.block_size * C if style["positional"] == "learned" else 0
    return vocab_size * C + positions + config.n_layers * block + norm


def matching_llama_width(config, vocab_size, target):
    """The SwiGLU hidden width whose Llama-style model of `config`'s other sizes has the parameter count
    closest to `target` (e.g. the GPT-2-style model's). SwiGLU has three matrices, so each hidden unit costs
    3 C parameters per layer; the Llama model has no position table and no biases to pay for."""
    def count(d_ff):
        return parameter_count(dataclasses.replace(config, style="llama", d_ff=d_ff), vocab_size)
    per_unit = count(2) - count(1)                       # 3 C n_layers parameters per hidden unit: linear in d_ff
    return max(1, round((target - count(1)) / per_unit) + 1)


def build_parameter_groups(model, config):
    """The optimizer's groups for `model`: decayed matrices and the rest (`optim.parameter_groups`)."""
    return parameter_groups(model, config.weight_decay, decay_embeddings=config.decay_embeddings)


def build_optimizer(model, config):
    """AdamW over `build_parameter_groups(model, config)` with the config's betas and weight decay: the fast
    form (optim/fast.py) when config.kernels is "fast" or the run is data parallel (the collectives send its
    flat buffers), the plain one (optim/adam.py) otherwise."""
    optimizer = FastAdamW if config.kernels == "fast" or config.workers > 1 else AdamW
    return optimizer(build_parameter_groups(model, config), lr=config.lr, betas=(config.beta1, config.beta2),
                 weight_decay=config.weight_decay)


def transformer_adam(params, lr=1e-3, flat=False):
    """Adam with beta2 = 0.98 and eps = 1e-9, the settings of Vaswani et al. (2017) §5.3; `flat`: its fast
    form over one buffer (optim/fast.py), which data parallelism sends."""
    return (FastAdam if flat else Adam)(list(params), lr=lr, betas=(0.9, 0.98), eps=1e-9)
