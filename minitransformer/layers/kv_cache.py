"""Cached keys and values for incremental decoding (inference only, no backward).

When a decoder generates token t, the keys and values of positions 0 .. t-1
are the same as they were at the previous step: causal masking means an
earlier position never looks at a later one, so nothing below it changes.
Recomputing them costs O(t) per layer and step, O(T^2) per sentence; keeping
them costs one (B, H, t, hs) array per layer and lets each step project only
the new position. Cross-attention keys and values depend only on the encoder
output, so they are projected once per source sentence.

These functions read a `MultiHeadAttention`'s parameters and run the same
arithmetic as its forward pass on the new position only; tests/test_seq2seq.py
proves that cached decoding gives the same logits as recomputing the prefix.
Beam search reorders a cache with `reorder_cache` when beams are reshuffled.

Supported: plain and grouped-query heads (the cache keeps the Hkv key/value
heads and shares them at attention time). Rotary/ALiBi positions and sliding
windows, which DecoderBlock does not use, raise rather than give wrong logits.
"""

import numpy as np


def _heads(mha, x, name):
    """x (B, T, C) -> x W_name + b_name split into heads, (B, n, T, hs) with n = H for q, Hkv for k and v."""
    if getattr(mha, "positional", None) is not None or getattr(mha, "window", None) is not None:
        raise NotImplementedError(f"{mha!r}: cached decoding supports neither rotary/ALiBi positions nor windows")
    B, T, C = x.shape
    weight, bias = getattr(mha, f"w_{name}"), getattr(mha, f"b_{name}")
    y = x.reshape(B * T, C) @ weight.data                                  # (B*T, n*hs)
    if bias is not None:
        y += bias.data
    return y.reshape(B, T, -1, mha.head_size).transpose(0, 2, 1, 3)       # (B, n, T, hs)


def _attend(mha, q, k, v, mask=None):
    """Attention of q (B, H, t, hs) to cached k, v (B, Hkv, S, hs), sharing key/value heads as the layer does."""
    groups = mha.n_heads // getattr(mha, "n_kv_heads", mha.n_heads)
    if groups > 1:
        k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)  # (B, H, S, hs)
    return mha.attention.forward(q, k, v, mask)


def _output(mha, heads):
    """(B, H, T, hs) -> concat(heads) W_O + b_O, (B, T, C)."""
    B, H, T, hs = heads.shape
    y = heads.transpose(0, 2, 1, 3).reshape(B * T, H * hs) @ mha.w_o.data   # (B*T, C)
    if mha.b_o is not None:
        y += mha.b_o.data
    return y.reshape(B, T, H * hs)


def start_cross_cache(mha, memory):
    """Project the encoder output once: {"k", "v"} each (B, H, S, hs)."""
    return {"k": _heads(mha, memory, "k"), "v": _heads(mha, memory, "v")}


def cross_attention_step(mha, x, cache, memory_mask=None):
    """Cross-attention of the new positions x (B, t, C) to the cached memory keys/values -> (B, t, C)."""
    q = _heads(mha, x, "q")                                               # (B, H, t, hs)
    return _output(mha, _attend(mha, q, cache["k"], cache["v"], memory_mask))


def self_attention_step(mha, x, cache):
    """Causal self-attention of new positions x (B, t, C), appending their keys/values to `cache`.

    Args:
        mha: the (causal) MultiHeadAttention whose weights are used.
        x: (B, t, C), usually t = 1.
        cache: dict, empty at the first step, then {"k", "v"} of shape (B, H, t_past, hs); updated in place.
    Returns:
        (B, t, C); query i of x sees every cached position and x's positions up to i.
    """
    k_new, v_new = _heads(mha, x, "k"), _heads(mha, x, "v")              # (B, H, t, hs)
    if "k" in cache:
        cache["k"] = np.concatenate([cache["k"], k_new], axis=2)          # (B, H, t_past + t, hs)
        cache["v"] = np.concatenate([cache["v"], v_new], axis=2)
    else:
        cache["k"], cache["v"] = k_new, v_new
    q = _heads(mha, x, "q")                                               # (B, H, t, hs)
    # mha.attention is causal: with Tq < Tk it aligns the queries with the last keys (attention.causal_mask)
    return _output(mha, _attend(mha, q, cache["k"], cache["v"]))


def reorder_cache(cache, rows):
    """Keep batch rows `rows` (int (B',)) of every array in a (nested) cache, in that order."""
    if isinstance(cache, dict):
        return {name: reorder_cache(value, rows) for name, value in cache.items()}
    if isinstance(cache, list):
        return [reorder_cache(value, rows) for value in cache]
    if isinstance(cache, np.ndarray) and cache.ndim >= 1:
        return cache[rows]
    return cache
