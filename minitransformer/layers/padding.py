"""Padding: one batch holding sequences of different lengths (Vaswani et al. 2017; Kumar slides, encoder).

Sequences of lengths 3, 5 and 2 travel together as one (B, T) array, each
row filled up to T with a pad id. Nothing may then depend on what sits in the
padding. Three pieces together guarantee it:

* attention gets a *key* mask, True where the key is a real token, shaped
  (B, 1, 1, T) so it broadcasts over heads and queries: no real query ever
  puts weight on a padded key (its score is -inf before the softmax);
* every other layer (LayerNorm, feed-forward, embeddings) acts on each
  position separately, so padding cannot leak through them;
* the loss ignores the padded targets (`CrossEntropyLoss(ignore_index=pad)`),
  so the padded positions' own outputs, which are computed but meaningless,
  send no gradient back.

tests/test_padding.py proves it: outputs and gradients at the real positions
do not change when the padding is refilled with other tokens or made longer.

A padded *query* still sees the real keys, so no row is ever fully masked as
long as every sequence has at least one token.
"""

import numpy as np


def pad_sequences(sequences, pad_id, length=None):
    """Stack integer sequences into one (B, T) array, filling the tail of each row with `pad_id`.

    Args:
        sequences: list of B lists (or 1-D arrays) of token ids.
        pad_id: the id written after the end of each sequence.
        length: T; default the longest sequence. A longer sequence raises.
    Returns:
        ids: int64 (B, T).

    >>> pad_sequences([[5, 6, 7], [8]], pad_id=0).tolist()
    [[5, 6, 7], [8, 0, 0]]
    """
    longest = max((len(s) for s in sequences), default=0)
    T = longest if length is None else length
    if longest > T:
        raise ValueError(f"pad_sequences expected sequences of at most length={T} tokens, got one of {longest}")
    ids = np.full((len(sequences), T), pad_id, dtype=np.int64)
    for row, sequence in enumerate(sequences):        # building the batch, not a layer: a loop is fine
        ids[row, :len(sequence)] = sequence
    return ids


def key_padding_mask(ids, pad_id):
    """Attention mask that hides padded keys.

    Args:
        ids: int (B, T) token ids.
        pad_id: the padding id.
    Returns:
        mask: bool (B, 1, 1, T), True where the key is a real token; broadcasts
            to the attention scores (B, H, Tq, T).
    """
    ids = np.asarray(ids)
    if ids.ndim != 2:
        raise ValueError(f"key_padding_mask expected token ids (B, T), got shape {ids.shape}")
    return (ids != pad_id)[:, None, None, :]


def lengths_to_mask(lengths, T):
    """Key mask from sequence lengths: True for positions 0 .. length-1 of each row.

    Args:
        lengths: int (B,), each in [1, T].
        T: the padded length.
    Returns:
        mask: bool (B, 1, 1, T).
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.size and (lengths.min() < 1 or lengths.max() > T):
        raise ValueError(f"lengths_to_mask expected lengths (B,) in [1, {T}], got {lengths.tolist()}")
    return (np.arange(T)[None, :] < lengths[:, None])[:, None, None, :]
