"""An encoder-decoder Transformer (Vaswani et al. 2017, Figure 1; Kumar slides, "Encoder-Decoder Architectures").

    source ids (B, S) -> TransformerEncoder -> memory (B, S, C)
    target ids (B, T) -> InputEmbedding -> n_layers DecoderBlocks (each attending to memory)
                      -> final LayerNorm (pre-norm only) -> output projection -> logits (B, T, V_tgt)

Training is teacher forcing: the decoder reads [BOS] y_1 .. y_{T-1} and is
scored on y_1 .. y_T, all positions at once. Generation (generation/decoding.py)
runs the encoder once (`encode`) and then the decoder one position at a time
(`decode(tokens, memory, memory_mask, cache=...)`), with a `KVCache` that it
creates and that keeps the keys and values of the earlier positions, the same
protocol as GPT's (generation/kv_cache.py).

Options: post-norm (the paper, default) or pre-norm; sinusoidal or learned
positions; `share_embeddings` (one table for source, target and, with
`tie_output`, the output projection, as the paper's shared BPE vocabulary).
Left out: label smoothing and the paper's learning-rate schedule.
"""

from dataclasses import dataclass

import numpy as np

from ..core.module import Module
from ..core.random import as_generator, spawn_generator
from ..layers.decoder_block import DecoderBlock
from ..layers.embedding import check_token_batch
from ..layers.layernorm import LayerNorm
from ..layers.linear import Linear
from ..layers.lm_head import TiedLMHead
from ..layers.padding import key_padding_mask
from . import FromConfig, config_dict
from .encoder import InputEmbedding, TransformerEncoder


@dataclass
class Seq2SeqConfig:
    """A Seq2SeqTransformer's shape and behaviour (the weights come from `rng`); `Seq2SeqTransformer.from_config`."""
    src_vocab_size: int              # V of the source side
    tgt_vocab_size: int              # V of the target side (equal to the source's when sharing embeddings)
    d_model: int                     # C, width of every token's vector
    n_heads: int                     # H, attention heads per layer; must divide d_model
    n_layers: int                    # encoder blocks, and as many decoder blocks
    d_ff: int                        # hidden width of the feed-forward sublayers
    max_len: int                     # the longest source or target sequence
    pad_id: int | None = None        # padding id of both sides, hidden from attention (None: no padding)
    norm: str = "post"               # "post" (the 2017 paper) or "pre"
    positional: str = "sinusoidal"   # "sinusoidal" (the 2017 paper) or "learned"
    share_embeddings: bool = False   # one token table for source and target
    tie_output: bool = False         # the output projection reuses the target token table (no bias)
    dropout: float = 0.0             # drop probability after the embeddings and on every sublayer's output
    activation: str = "relu"         # feed-forward nonlinearity: "relu" (the paper) or "gelu"
    dtype: str = "float64"           # "float64" or "float32"


class Seq2SeqTransformer(FromConfig, Module):
    """Encoder-decoder Transformer for sequence-to-sequence tasks.

    Args:
        src_vocab_size, tgt_vocab_size: V of each side (equal when sharing embeddings).
        d_model: C.  n_heads: H.  n_layers: encoder blocks and decoder blocks (each).  d_ff: feed-forward width.
        max_len: longest source or target sequence.
        pad_id: padding id of both sides, hidden from attention (None: no padding).
        norm: "post" (default) or "pre".  positional: "sinusoidal" (default) or "learned".
        share_embeddings: one token table for source and target.
        tie_output: the output projection reuses the target token table (no bias).
        dropout, activation, dtype, rng: as for GPT.
    """

    CONFIG = Seq2SeqConfig

    def __init__(self, src_vocab_size, tgt_vocab_size, d_model, n_heads, n_layers, d_ff, max_len, pad_id=None,
                 norm="post", positional="sinusoidal", share_embeddings=False, tie_output=False, dropout=0.0,
                 activation="relu", dtype=np.float64, rng=None):
        if share_embeddings and src_vocab_size != tgt_vocab_size:
            raise ValueError(f"Seq2SeqTransformer: share_embeddings needs equal vocabularies, "
                             f"got {src_vocab_size} and {tgt_vocab_size}")
        rng = as_generator(rng)
        dropout_rng = spawn_generator(rng)
        self.config = config_dict(Seq2SeqConfig, locals())
        self.tgt_vocab_size, self.pad_id = tgt_vocab_size, pad_id
        self.encoder = TransformerEncoder(src_vocab_size, d_model, n_heads, n_layers, d_ff, max_len, pad_id, norm,
                                          positional, dropout, activation, dtype, rng)
        shared = self.encoder.embed.token_embedding if share_embeddings else None
        self.tgt_embed = InputEmbedding(tgt_vocab_size, d_model, max_len, positional, dropout, share_with=shared,
                                        dtype=dtype, rng=rng, dropout_rng=dropout_rng)
        self.blocks = [DecoderBlock(d_model, n_heads, d_ff, norm=norm, dropout=dropout, activation=activation,
                                    dtype=dtype, rng=rng, dropout_rng=dropout_rng) for _ in range(n_layers)]
        self.ln_f = LayerNorm(d_model, dtype=dtype) if norm == "pre" else None
        self.head = (TiedLMHead(self.tgt_embed.token_embedding) if tie_output
                     else Linear(d_model, tgt_vocab_size, dtype=dtype, rng=rng))

    def forward(self, src_ids, tgt_ids):
        """Teacher-forced logits.

        Args:
            src_ids: int (B, S) source, padded with pad_id.
            tgt_ids: int (B, T) decoder input ([BOS] y_1 .. y_{T-1}), padded with pad_id.
        Returns:
            logits: (B, T, V_tgt); position t predicts y_{t+1}.

        An empty batch or sequence (B = 0, S = 0 or T = 0) is refused with a ValueError, as by every model.
        """
        memory, memory_mask = self.encode(src_ids)
        return self.decode(tgt_ids, memory, memory_mask)

    def backward(self, dlogits):
        """dlogits (B, T, V) -> None; memory's gradient is the sum over all decoder blocks."""
        dx = self.head.backward(dlogits)
        if self.ln_f is not None:
            dx = self.ln_f.backward(dx)
        dmemory = 0.0
        for block in reversed(self.blocks):
            dx, dmemory_block = block.backward(dx)
            dmemory = dmemory + dmemory_block                   # memory feeds every block: contributions add
        self.tgt_embed.backward(dx)
        self.encoder.backward(dmemory)
        return None

    # ---------------------------------------------------------------- the two halves (forward, generation)
    def encode(self, src_ids):
        """src_ids (B, S) -> (memory (B, S, C), memory_mask (B, 1, 1, S) or None)."""
        src_ids = check_token_batch(src_ids, self.encoder.vocab_size, repr(self), "source ids")
        return self.encoder(src_ids), self.encoder.padding_mask(src_ids)

    def decode(self, tgt_ids, memory, memory_mask=None, cache=None):
        """The decoder half: target ids and the encoder's memory -> logits.

        Args:
            tgt_ids: int (B, T) decoder input, padded with pad_id.
            memory, memory_mask: from `encode`, (B, S, C) and (B, 1, 1, S) or None.
            cache: optional `KVCache(n_layers, cross_attention=True)` (generation/kv_cache.py) for
                incremental decoding, inference only: tgt_ids are then the new tokens only, at positions
                cache.length onwards, and target padding is not masked (decoding feeds pad only after EOS).
        Returns:
            logits: (B, T, V_tgt). Also sets `decoder_hidden_states` (n_layers + 1 arrays (B, T, C), the target
            embeddings and every decoder block's output); the encoder's are `encoder_hidden_states`.
        """
        tgt_ids = check_token_batch(tgt_ids, self.tgt_vocab_size, repr(self), "target ids")
        if cache is None:
            self_mask = None if self.pad_id is None else key_padding_mask(tgt_ids, self.pad_id)
            x = self.tgt_embed(tgt_ids)                                             # (B, T, C)
        else:
            if len(cache) != len(self.blocks) or len(cache.cross_attention) != len(self.blocks):
                raise ValueError(f"{self!r} expected a KVCache of {len(self.blocks)} layers with cross-attention, "
                                 f"got {cache!r}")
            self_mask = None
            x = self.tgt_embed.step(tgt_ids, cache.length)                          # (B, T, C), no dropout
        self.decoder_hidden_states = [x]                                            # per-layer features
        for index, block in enumerate(self.blocks):
            self_cache = None if cache is None else cache[index]
            cross_cache = None if cache is None else cache.cross_attention[index]
            x = block(x, memory, self_mask=self_mask, memory_mask=memory_mask,
                      self_cache=self_cache, cross_cache=cross_cache)               # (B, T, C)
            self.decoder_hidden_states.append(x)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x)                                                         # (B, T, V)

    @property
    def encoder_hidden_states(self):
        """The encoder's per-layer features of the last `encode` (`TransformerEncoder.hidden_states`)."""
        return self.encoder.hidden_states

    def __repr__(self):
        c = self.config
        return (f"Seq2SeqTransformer(V={c['src_vocab_size']}->{c['tgt_vocab_size']}, C={c['d_model']}, "
                f"H={c['n_heads']}, L={c['n_layers']}, norm={c['norm']!r})")
