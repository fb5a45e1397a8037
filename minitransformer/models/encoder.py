"""A Transformer encoder: bidirectional blocks over a padded batch (Vaswani et al. 2017 §3.1; Kumar slides, "Transformer Encoder").

Bottom to top:

    ids (B, T) -> token embedding * sqrt(C) + positions -> dropout       (InputEmbedding)
               -> n_layers TransformerBlocks with causal=False, every position
                  sees every real position of its own sequence (key padding mask)
               -> final LayerNorm (pre-norm only: post-norm blocks already end in one)
               -> hidden states (B, T, C)

The encoder is the "E" of the Kumar slides' three families: it produces a
contextual vector per token, for a masked-LM head (models/bert.py) or for a
decoder to attend to (models/seq2seq.py). The sqrt(C) scale and the
N(0, 1/C) token table follow the paper §3.4, so tokens and sinusoidal
positions start on the same scale.
"""

from dataclasses import dataclass

import numpy as np

from ..core.module import Module
from ..core.random import as_generator, dropout_generator, spawn_generator
from ..layers.block import TransformerBlock
from ..layers.dropout import Dropout
from ..layers.embedding import Embedding, check_token_batch, check_token_ids
from ..layers.layernorm import LayerNorm
from ..layers.padding import key_padding_mask
from ..layers.positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from . import FromConfig

POSITIONAL = ("learned", "sinusoidal")


class InputEmbedding(Module):
    """x = E[ids] * sqrt(C) + P[start : start + T], then dropout.

    Args:
        vocab_size: V.  d_model: C.  max_len: rows of the position table.
        positional: "sinusoidal" (the paper) or "learned".
        dropout: drop probability on the sum.
        share_with: optional Embedding whose table is reused (shared source/target embeddings).
        dtype, rng, dropout_rng: as everywhere.
    Children:
        token_embedding, position, drop.
    """

    def __init__(self, vocab_size, d_model, max_len, positional="sinusoidal", dropout=0.0, share_with=None,
                 dtype=np.float64, rng=None, dropout_rng=None):
        if positional not in POSITIONAL:
            raise ValueError(f"InputEmbedding expected positional in {POSITIONAL}, got {positional!r}")
        rng = as_generator(rng)
        self.d_model, self.max_len, self.scale = d_model, max_len, float(np.sqrt(d_model))   # a Python float keeps float32
        self.token_embedding = Embedding(vocab_size, d_model, dtype=dtype, rng=rng, init_std=d_model ** -0.5)
        if share_with is not None:
            if share_with.weight.shape != self.token_embedding.weight.shape:
                raise ValueError(f"InputEmbedding cannot share a table of shape {share_with.weight.shape}, "
                                 f"expected ({vocab_size}, {d_model})")
            self.token_embedding.weight = share_with.weight          # the same Parameter: gradients add
        if positional == "learned":
            # on the scale of the tokens (std 1 after the sqrt(C) factor): GPT-2's 0.02 would leave the
            # positions drowned by the tokens at the start, and an encoder then learns a bag of words
            self.position = LearnedPositionalEmbedding(max_len, d_model, dtype=dtype, rng=rng, init_std=1.0)
        else:
            self.position = SinusoidalPositionalEncoding(d_model, max_len, dtype=dtype)
        self.drop = Dropout(dropout, rng=dropout_generator(rng, dropout_rng))

    def forward(self, ids):
        """ids int (B, T) -> x (B, T, C)."""
        return self.drop(self.position(self.token_embedding(ids) * self.scale))

    def backward(self, dx):
        """x = drop(E[ids] * s + P): dE[ids] += s * (the gradient through dropout and positions). Returns None."""
        self.token_embedding.backward(self.position.backward(self.drop.backward(dx)) * self.scale)
        return None

    def step(self, ids, start):
        """Embed ids (B, t) sitting at positions start .. start+t-1 (incremental decoding, no dropout)."""
        ids = check_token_ids(ids, self.token_embedding.vocab_size, repr(self))
        if start < 0:
            raise ValueError(f"{self!r} expected start >= 0, got {start}")
        # the position layer itself adds rows start .. start+t-1 and refuses positions beyond max_len
        return self.position(self.token_embedding(ids) * self.scale, start=start)

    def __repr__(self):
        return f"InputEmbedding(V={self.token_embedding.vocab_size}, C={self.d_model}, max_len={self.max_len})"


@dataclass
class EncoderConfig:
    """A TransformerEncoder's shape and behaviour (the weights come from `rng`); `TransformerEncoder.from_config`."""
    vocab_size: int                  # V, input tokens
    d_model: int                     # C, width of every token's vector
    n_heads: int                     # H, attention heads per layer; must divide d_model
    n_layers: int                    # encoder blocks
    d_ff: int                        # hidden width of the feed-forward sublayer
    max_len: int                     # the longest input sequence
    pad_id: int | None = None        # padding id, hidden from attention (None: every sequence is full length)
    norm: str = "post"               # "post" (the 2017 paper) or "pre"
    positional: str = "sinusoidal"   # "sinusoidal" (the 2017 paper) or "learned"
    dropout: float = 0.0             # drop probability after the embeddings and on every sublayer's output
    activation: str = "relu"         # feed-forward nonlinearity: "relu" (the paper) or "gelu"
    dtype: str = "float64"           # "float64" or "float32"


class TransformerEncoder(FromConfig, Module):
    """Token ids to contextual vectors with bidirectional self-attention.

    Args:
        vocab_size: V.  d_model: C.  n_heads: H.  n_layers: blocks.  d_ff: feed-forward width.
        max_len: longest sequence.  pad_id: padding id, hidden from attention (None: no padding).
        norm: "post" (the paper, default) or "pre".  positional: "sinusoidal" or "learned".
        dropout, activation, dtype, rng: as for GPT.
    """

    CONFIG = EncoderConfig

    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, max_len, pad_id=None, norm="post",
                 positional="sinusoidal", dropout=0.0, activation="relu", dtype=np.float64, rng=None):
        rng = as_generator(rng)
        dropout_rng = spawn_generator(rng)
        self.vocab_size, self.pad_id, self.norm = vocab_size, pad_id, norm
        self.embed = InputEmbedding(vocab_size, d_model, max_len, positional, dropout, dtype=dtype, rng=rng,
                                    dropout_rng=dropout_rng)
        self.blocks = [TransformerBlock(d_model, n_heads, d_ff, norm=norm, causal=False, dropout=dropout,
                                        activation=activation, dtype=dtype, rng=rng, dropout_rng=dropout_rng)
                       for _ in range(n_layers)]
        self.ln_f = LayerNorm(d_model, dtype=dtype) if norm == "pre" else None

    def padding_mask(self, ids):
        """(B, 1, 1, T) key mask, or None when the encoder has no pad id."""
        return None if self.pad_id is None else key_padding_mask(ids, self.pad_id)

    def forward(self, ids):
        """ids int (B, T) -> hidden states (B, T, C); rows at padded positions are computed but meaningless.

        Also sets `hidden_states`: the embeddings and the output of every block, n_layers + 1 arrays (B, T, C),
        before the final LayerNorm (pre-norm only); Kumar's BERT slides compare them as features.

        An empty batch or sequence (B = 0 or T = 0) is refused with a ValueError, as by every model.
        """
        ids = check_token_batch(ids, self.vocab_size, repr(self))
        mask = self.padding_mask(ids)
        x = self.embed(ids)                                              # (B, T, C)
        self.hidden_states = [x]                                         # per-layer features, as GPT.hidden
        for block in self.blocks:
            x = block(x, mask=mask)                                      # (B, T, C)
            self.hidden_states.append(x)
        return x if self.ln_f is None else self.ln_f(x)

    def backward(self, dh):
        """dh (B, T, C) -> None (ids are integers); parameters receive their gradients."""
        dx = dh if self.ln_f is None else self.ln_f.backward(dh)
        for block in reversed(self.blocks):
            dx = block.backward(dx)
        return self.embed.backward(dx)

    def __repr__(self):
        return f"TransformerEncoder(V={self.vocab_size}, L={len(self.blocks)}, norm={self.norm!r})"
