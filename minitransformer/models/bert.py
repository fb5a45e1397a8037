"""A BERT-style masked language model (Devlin et al. 2019; Kumar slides, "BERT has 2 training objectives").

An encoder sees the whole sequence in both directions, so it cannot be trained
to predict the next token (it would see it). BERT instead corrupts the input
and asks for the originals back:

* `mask_tokens` chooses 15% of the real positions of each sequence; of those,
  80% become [MASK], 10% a random token and 10% stay as they are (so the model
  cannot learn that only [MASK] positions matter). The targets are the
  original ids at the chosen positions and `ignore_index` everywhere else, so
  `CrossEntropyLoss(ignore_index=...)` scores the chosen positions only.
* `BertMLM` = TransformerEncoder -> transform (Linear, GELU, LayerNorm) -> output
  projection tied to the token table -> logits (B, T, V). With `nsp=True` it
  also returns next-sentence logits (B, 2) from the first position ([CLS]).

Left out: segment (token-type) embeddings, the tanh pooler before the NSP
head, the output bias, and WordPiece; the tokens here are characters.
"""

from dataclasses import dataclass

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from ..layers.activations import GELU
from ..layers.embedding import check_token_batch, check_token_ids
from ..layers.layernorm import LayerNorm
from ..layers.linear import Linear
from ..layers.lm_head import TiedLMHead
from . import FromConfig
from .encoder import TransformerEncoder


def mask_tokens(ids, rng, mask_id, n_special, vocab_size, p=0.15, ignore_index=-1):
    """BERT's corruption of a batch.

    Args:
        ids: int (B, T) token ids; ids below `n_special` (pad, [MASK], [CLS], ...) are never chosen.
        rng: seed or Generator.
        mask_id: the [MASK] id.
        n_special: ordinary tokens are n_special .. vocab_size - 1 (random replacements come from them).
        vocab_size: V.
        p: fraction of each sequence's ordinary tokens to choose (at least one per sequence).
        ignore_index: target value at positions that are not scored.
    Returns:
        (inputs int (B, T), targets int (B, T), chosen bool (B, T)).
    """
    rng = as_generator(rng)
    ids = check_token_ids(ids, vocab_size, "mask_tokens")
    maskable = ids >= n_special
    n_chosen = np.maximum(np.round(p * maskable.sum(axis=1)), 1)             # (B,)
    priority = np.where(maskable, rng.random(ids.shape), np.inf)              # a random order of the positions
    rank = np.argsort(np.argsort(priority, axis=1), axis=1)                   # (B, T) rank of each position
    chosen = (rank < n_chosen[:, None]) & maskable
    roll = rng.random(ids.shape)
    inputs = ids.copy()
    inputs[chosen & (roll < 0.8)] = mask_id                                   # 80%: [MASK]
    randomised = chosen & (roll >= 0.8) & (roll < 0.9)                        # 10%: a random ordinary token
    inputs[randomised] = rng.integers(n_special, vocab_size, size=int(randomised.sum()))
    targets = np.where(chosen, ids, ignore_index)                             # the other 10% stay as they are
    return inputs, targets, chosen


@dataclass
class BertConfig:
    """A BertMLM's shape and behaviour (the weights come from `rng`); `BertMLM.from_config`."""
    vocab_size: int                  # V, including the special tokens ([PAD], [MASK], [CLS], [SEP], ...)
    d_model: int                     # C, width of every token's vector
    n_heads: int                     # H, attention heads per layer; must divide d_model
    n_layers: int                    # encoder blocks
    d_ff: int                        # hidden width of the feed-forward sublayer
    max_len: int                     # the longest input sequence
    pad_id: int = 0                  # padding id, hidden from attention
    nsp: bool = False                # add the next-sentence head on position 0
    norm: str = "post"               # "post" (BERT) or "pre"
    positional: str = "learned"      # "learned" (BERT) or "sinusoidal"
    dropout: float = 0.0             # drop probability after the embeddings and on every sublayer's output
    dtype: str = "float64"           # "float64" or "float32"


class BertMLM(FromConfig, Module):
    """Encoder with a masked-LM head and, optionally, a next-sentence head.

    Args:
        vocab_size: V.  d_model: C.  n_heads: H.  n_layers: blocks.  d_ff: feed-forward width.
        max_len: longest sequence.  pad_id: padding id hidden from attention.
        nsp: add the next-sentence head on position 0.
        norm: "post" (BERT, default) or "pre".  positional: "learned" (BERT) or "sinusoidal".
        dropout, dtype, rng: as everywhere.
    """

    CONFIG = BertConfig

    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, max_len, pad_id=0, nsp=False, norm="post",
                 positional="learned", dropout=0.0, dtype=np.float64, rng=None):
        rng = as_generator(rng)
        self.vocab_size, self.nsp = vocab_size, nsp
        self.encoder = TransformerEncoder(vocab_size, d_model, n_heads, n_layers, d_ff, max_len, pad_id, norm,
                                          positional, dropout, "gelu", dtype, rng)
        self.transform = Linear(d_model, d_model, dtype=dtype, rng=rng)
        self.act = GELU()
        self.ln = LayerNorm(d_model, dtype=dtype)
        self.head = TiedLMHead(self.encoder.embed.token_embedding)
        self.nsp_head = Linear(d_model, 2, dtype=dtype, rng=rng) if nsp else None

    def forward(self, ids):
        """ids int (B, T) -> MLM logits (B, T, V), or (MLM logits, NSP logits (B, 2)) when nsp.

        An empty batch or sequence (B = 0 or T = 0) is refused with a ValueError, as by every model.
        """
        ids = check_token_batch(ids, self.vocab_size, repr(self))
        hidden = self.encoder(ids)                                               # (B, T, C)
        mlm_logits = self.head(self.ln(self.act(self.transform(hidden))))      # (B, T, V)
        if not self.nsp:
            return mlm_logits
        return mlm_logits, self.nsp_head(hidden[:, 0])                          # (B, 2) from [CLS]

    @property
    def hidden_states(self):
        """The encoder's per-layer features of the last forward (`TransformerEncoder.hidden_states`)."""
        return self.encoder.hidden_states

    def backward(self, dout):
        """dout: dmlm (B, T, V), or (dmlm, dnsp (B, 2)) when nsp. Returns None (ids are integers)."""
        dmlm, dnsp = dout if self.nsp else (dout, None)
        dhidden = self.transform.backward(self.act.backward(self.ln.backward(self.head.backward(dmlm))))
        if dnsp is not None:
            dhidden = dhidden.copy()
            dhidden[:, 0] += self.nsp_head.backward(dnsp)                        # only position 0 feeds the NSP head
        return self.encoder.backward(dhidden)

    def __repr__(self):
        return f"BertMLM(V={self.vocab_size}, L={len(self.encoder.blocks)}, nsp={self.nsp})"
