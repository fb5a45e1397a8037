"""A GPT-style decoder-only language model (lecture notes 2025 §1; Radford et al. 2018/2019).

Bottom to top:

    ids (B, T) -> token embedding + positions -> dropout
               -> n_layers causal TransformerBlocks
               -> final LayerNorm (pre-norm only: post-norm blocks already end in one)
               -> LM head, sharing the token-embedding matrix when tied (notes §1.5)
               -> logits (B, T, V)

The backward pass visits the same layers top to bottom. Initialisation follows
GPT-2: weights N(0, 0.02^2), the two projections that write into the residual
stream (attention's W_O, the feed-forward's second layer) scaled down by
1/sqrt(2 n_layers), biases 0, LayerNorm gamma 1. Each layer draws its weights
once, when it is built, with the standard deviation the model passes it
(`init_std`, `residual_std`), in the order the layers are built.

Attention variants (Kumar slides, `variants/rope.py`, `variants/alibi.py`, `variants/sliding_window.py`):
positional="rope" or "alibi" moves position information into every attention
layer, "none" leaves it out (Haviv et al. 2022: a causal mask alone lets the
model infer positions); with these three there is no position table, so
`max_len` is not a limit. Nor is it with "sinusoidal": the formula gives every
position, and rows past max_len are computed when a longer input asks for them.
Only learned positions (a table of max_len trained rows) refuse a longer input.
`n_kv_heads` gives grouped-query attention and `window` a sliding attention window.

A Llama-style decoder (Touvron et al. 2023) is the same model with three keywords and
rotary positions: `GPT(..., positional="rope", norm_layer="rmsnorm", activation="swiglu",
bias=False)` (`LLAMA_STYLE` lists them). `norm` stays the placement ("pre" in Llama too).

Left out: GPT-2's dropout on the attention weights (attn_pdrop): dropout here
acts after the embeddings and on each sublayer's output (resid_pdrop, embd_pdrop)
only. Also left out: a padding mask (every sequence in a batch is full length).
"""

from dataclasses import dataclass

import numpy as np

from ..core.module import Module
from ..core.random import as_generator, spawn_generator
from ..core.tiers import check_kernels, use_kernels
from ..layers.block import TransformerBlock, check_block_options, make_norm
from ..layers.dropout import Dropout
from ..layers.embedding import Embedding, check_token_batch
from ..layers.linear import Linear
from ..layers.lm_head import TiedLMHead
from ..layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ..variants.attention_positions import attention_position
from . import FromConfig, config_dict

POSITIONAL = ("learned", "sinusoidal", "rope", "alibi", "none")
GPT2_INIT_STD = 0.02          # GPT-2's standard deviation of every initial weight matrix and table
# What makes a GPT Llama-style (Touvron et al. 2023): GPT(..., **LLAMA_STYLE)
LLAMA_STYLE = dict(positional="rope", norm_layer="rmsnorm", activation="swiglu", bias=False)


@dataclass
class GPTConfig:
    """Everything that fixes a GPT's shape and behaviour (the weights come from `rng`); `GPT.from_config`."""
    vocab_size: int                  # V, tokens the model reads and predicts
    d_model: int                     # C, width of every token's vector (the residual stream)
    n_heads: int                     # H, attention heads per layer; must divide d_model
    n_layers: int                    # Transformer blocks, bottom to top
    d_ff: int                        # hidden width of the feed-forward sublayer (4 C in GPT-2); 0: attention only
    max_len: int                     # context window: the longest sequence (enforced for "learned" positions only)
    norm: str = "pre"                # "pre": LayerNorm inside each residual branch (GPT-2); "post": the 2017 paper
    positional: str = "learned"      # "learned" (GPT-2), "sinusoidal", "rope", "alibi" or "none"
    tie_weights: bool = True         # the output projection reuses the token-embedding matrix
    dropout: float = 0.0             # drop probability after the embeddings and on every sublayer's output
    activation: str = "gelu"         # feed-forward: "gelu" (GPT-2), "relu" (the 2017 paper) or "swiglu" (Llama's gated)
    dtype: str = "float64"           # "float64" (exact gradient checks) or "float32" (training speed)
    n_kv_heads: int | None = None    # key/value heads (None: n_heads; 1: multi-query attention)
    window: int | None = None        # None, or how many recent positions each query sees (sliding window)
    norm_layer: str = "layernorm"    # which norm sits in the norm places: "layernorm" (GPT-2) or "rmsnorm" (Llama)
    bias: bool = True                # biases in attention's and the feed-forward's linear maps (Llama: False)


class GPT(FromConfig, Module):
    """Decoder-only Transformer language model.

    Args:
        vocab_size: V.  d_model: C.  n_heads: H.  n_layers: number of blocks.
        d_ff: feed-forward hidden width (4 C in GPT-2); 0 leaves the feed-forward sublayers out
            (an attention-only model, as in Olsson et al. 2022).
        max_len: the longest sequence (context window); enforced only for learned
            positions, whose table has max_len rows: sinusoidal rows past it are computed
            on demand, and "rope", "alibi", "none" have no table.
        norm: "pre" (GPT-2) or "post" (the 2017 paper).
        positional: "learned" (GPT-2), "sinusoidal" (the 2017 paper, notes §1.4),
            "rope" (rotary, Su et al.), "alibi" (linear biases, Press et al.) or
            "none" (no position information, Haviv et al.).
        n_kv_heads: key/value heads per attention layer (default n_heads;
            1 is multi-query attention).
        window: None, or the number of most recent positions each query sees.
        tie_weights: share the token embedding with the output projection.
        dropout: drop probability after the embeddings and on every sublayer.
        activation: "gelu" (GPT-2), "relu", or "swiglu" (the gated feed-forward of Llama).
        dtype: float64 (default) or float32.
        rng: seed or Generator for the initial weights; dropout masks come from
            a generator derived from it (`dropout_rng`), so a seed fixes both.
        kernels: "plain" (default), the layers as the lecture derives them, or
            "fast", the same numbers from the fast tier (`minitransformer/fast/`, which
            registers its forms with `core/tiers.py`).
        norm_layer: "layernorm" (GPT-2) or "rmsnorm" (Llama), in every block and at the top.
        bias: biases in every linear map of the blocks (default True; Llama has none). The
            LM head has none either way.
    """

    CONFIG = GPTConfig

    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, max_len, norm="pre", positional="learned",
                 tie_weights=True, dropout=0.0, activation="gelu", dtype=np.float64, rng=None,
                 n_kv_heads=None, window=None, kernels="plain", norm_layer="layernorm", bias=True):
        check_kernels(kernels, "GPT")
        check_block_options(norm_layer, activation, "GPT")
        if positional not in POSITIONAL:
            raise ValueError(f"GPT expected positional in {POSITIONAL}, got {positional!r}")
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"GPT expected n_heads >= 1 and d_model divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
        rng = as_generator(rng)
        self.dropout_rng = spawn_generator(rng)
        self.config = config_dict(GPTConfig, locals())                # what a checkpoint needs to rebuild it
        self.vocab_size, self.max_len, self.norm = vocab_size, max_len, norm
        init_std, residual_std = GPT2_INIT_STD, GPT2_INIT_STD / np.sqrt(2 * n_layers)
        self.token_embedding = Embedding(vocab_size, d_model, dtype=dtype, rng=rng, init_std=init_std)
        self.position = None                                          # table-free positions
        if positional == "learned":
            self.position = LearnedPositionalEmbedding(max_len, d_model, dtype=dtype, rng=rng, init_std=init_std)
        elif positional == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(d_model, max_len, dtype=dtype, extend=True)   # any length
        self.drop = Dropout(dropout, rng=self.dropout_rng)
        self.blocks = [TransformerBlock(d_model, n_heads, d_ff, norm=norm, causal=True, dropout=dropout,
                                        activation=activation, dtype=dtype, rng=rng, dropout_rng=self.dropout_rng,
                                        attention_options=dict(n_kv_heads=n_kv_heads, window=window,
                                                               position=attention_position(positional, d_model, n_heads)),
                                        init_std=init_std, residual_std=residual_std, norm_layer=norm_layer,
                                        bias=bias)
                       for _ in range(n_layers)]
        self.ln_f = make_norm(norm_layer, d_model, dtype) if norm == "pre" else None
        self.lm_head = (TiedLMHead(self.token_embedding) if tie_weights
                        else Linear(d_model, vocab_size, bias=False, dtype=dtype, rng=rng, init_std=init_std))
        use_kernels(self, kernels)

    def forward(self, ids, cache=None):
        """ids int (B, T) with T <= max_len (any T unless positions are learned) -> logits (B, T, V).

        An empty batch or sequence (B = 0 or T = 0) is refused with a ValueError, as by every model.

        With a `KVCache` (minitransformer/generation/kv_cache.py) `ids` are the *new* tokens only, placed after
        the cache.length positions seen before; inference only.
        """
        return self.lm_head(self.hidden(ids, cache))                    # (B, T, V)

    def backward(self, dlogits):
        """dlogits (B, T, V) -> None (ids are integers); every parameter's .grad receives its share."""
        self.hidden_backward(self.lm_head.backward(dlogits))
        return None

    def hidden(self, ids, cache=None):
        """ids int (B, T) -> hidden states (B, T, C): everything below the LM head.

        Also sets `hidden_states`: the input of the first block and the output of every block, n_layers + 1
        arrays (B, T, C), before the final LayerNorm (the features of each layer; Kumar's BERT slides).
        `forward` and the fine-tuning classifier (gpt_classifier.py) both build on it, so
        the checks of the ids, the cache and max_len live here.
        """
        ids = check_token_batch(ids, self.vocab_size, repr(self))      # (B, T), B, T >= 1, ids in [0, V)
        if cache is not None and len(cache) != len(self.blocks):
            raise ValueError(f"{self!r} expected a KVCache of {len(self.blocks)} layers, got {len(cache)}")
        start = 0 if cache is None else cache.length
        if start + ids.shape[1] > self.max_len and isinstance(self.position, LearnedPositionalEmbedding):
            raise ValueError(f"{self!r} expected at most max_len={self.max_len} positions, "
                             f"got T={ids.shape[1]}" + (f" after {start} cached" if start else ""))
        x = self.token_embedding(ids)                                   # (B, T, C)
        if self.position is not None:
            x = self.position(x, start=start)
        x = self.drop(x)
        self.hidden_states = [x]                                        # per-layer features (Kumar, BERT slides)
        for index, block in enumerate(self.blocks):
            x = block(x, cache=None if cache is None else cache[index])   # (B, T, C)
            self.hidden_states.append(x)
        return x if self.ln_f is None else self.ln_f(x)                 # (B, T, C)

    def hidden_backward(self, dhidden):
        """dhidden (B, T, C) -> None; the layers of `hidden` in reverse."""
        dx = dhidden if self.ln_f is None else self.ln_f.backward(dhidden)
        for block in reversed(self.blocks):
            dx = block.backward(dx)
        dx = self.drop.backward(dx)
        if self.position is not None:
            dx = self.position.backward(dx)
        self.token_embedding.backward(dx)

    def __repr__(self):
        c = self.config
        return f"GPT(V={c['vocab_size']}, C={c['d_model']}, H={c['n_heads']}, L={c['n_layers']}, max_len={c['max_len']})"
