"""Multi-head attention (lecture notes 2025 §1.2; Vaswani et al. 2017 §3.2.2).

Each of the H heads has its own d x d/H slice of W_Q, W_K, W_V (the notes'
"rectangular Q, K, V"); the heads attend independently and their outputs are
concatenated and mixed by W_O. Storing the H slices side by side as one
(C, C) matrix lets one matrix product compute all heads at once; a reshape
(B, T, C) -> (B, T, H, hs) and a transpose then separate them.

Self-attention takes keys and values from `x`; cross-attention (the notes'
footnote 5) takes them from `context`, e.g. an encoder's output.

Variants (Kumar slides; see `layers/rope.py`, `alibi.py`, `sliding_window.py`):
grouped-query attention, where n_kv_heads < H key/value heads are each shared
by a group of H / n_kv_heads query heads (Ainslie et al. 2023; multi-query
attention when n_kv_heads = 1); rotary or linear-bias positions inside the
attention; and a sliding window of keys.

Speed: in self-attention the three projections read the same x, so their
weights are placed side by side, [W_Q | W_K | W_V] (C, C + 2 Hkv hs), and one
matrix product computes q, k and v (three small products are slower than one
large one). The parameters stay the separate w_q, w_k, w_v;
tests/test_speed_forms.py checks the fused path against the separate one.
The backward pass keeps the three projections apart: fusing them would mean
copying dq, dk and dv side by side into one (B*T, C + 2 Hkv hs) array, which
cost more (0.14 ms a layer on the benchmark model) than the three weight
products lose against one; `ScaledDotProductAttention` writes dq, dk, dv
laid out like q, k, v, so merging their heads back needs no copy at all
(both changes together: 0.7 ms of a 54 ms training step).

Incremental decoding: `forward(x, cache=LayerKVCache())` appends this call's
keys and values (after RoPE, before sharing among query heads) to the cache
and attends over everything cached so far (`minitransformer/kv_cache.py`); a
cross-attention cache keeps the context's keys and values from its first
call. A cached forward is for inference only.

Left out: dropout on the attention weights (GPT-2's attn_pdrop; this project
drops only sublayer outputs), value heads of another width than the key heads
(dv = hs always), and backward through a cached forward.
"""

import numpy as np

from ..core.module import Module
from ..core.parameter import Parameter
from ..core.random import as_generator, check_float_dtype
from ..variants.alibi import ALiBi
from .attention import ScaledDotProductAttention
from ..fast.reductions import sum_rows
from ..variants.rope import RotaryEmbedding
from ..variants.sliding_window import band_mask


class MultiHeadAttention(Module):
    """out = concat_h(attention(x W_Q^h, src W_K^h, src W_V^h)) W_O, src = context or x.

    Args:
        d_model: C, the width of x (and of context).
        n_heads: H; must divide d_model. Head size hs = C // H.
        causal: if True each query sees only keys at its own or earlier positions.
        bias: add learned biases b_q, b_k, b_v, b_o.
        dtype, rng: as everywhere; weights are N(0, 1/C).
        n_kv_heads: Hkv, the number of key/value heads (default H); must divide H.
            Query head h reads key/value head h // (H / Hkv).
        positional: None, "rope" (rotate q and k, `RotaryEmbedding`) or "alibi"
            (distance bias on the scores, `ALiBi`).
        window: None, or w: a query sees only keys less than w positions away.
    Parameters:
        w_q, w_o (C, C); w_k, w_v (C, Hkv*hs); b_q, b_o (C,), b_k, b_v (Hkv*hs,) when bias.
    Attributes after forward:
        attention.alpha: (B, H, Tq, Tk) attention weights of every head.
    """

    def __init__(self, d_model, n_heads, causal=False, bias=True, dtype=np.float64, rng=None,
                 n_kv_heads=None, positional=None, window=None):
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"MultiHeadAttention expected d_model divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise ValueError(f"MultiHeadAttention expected n_kv_heads dividing n_heads={n_heads}, got {n_kv_heads}")
        if positional not in (None, "rope", "alibi"):
            raise ValueError(f"MultiHeadAttention expected positional None, 'rope' or 'alibi', got {positional!r}")
        if window is not None and window < 1:
            raise ValueError(f"MultiHeadAttention expected window None or >= 1, got {window}")
        dtype = check_float_dtype(dtype, "MultiHeadAttention")
        rng = as_generator(rng)
        self.d_model, self.n_heads, self.head_size = d_model, n_heads, d_model // n_heads
        self.n_kv_heads, self.window = n_kv_heads, window
        self.causal = causal
        std = d_model ** -0.5
        widths = {"q": d_model, "k": n_kv_heads * self.head_size, "v": n_kv_heads * self.head_size, "o": d_model}
        for name in ("q", "k", "v", "o"):
            setattr(self, f"w_{name}", Parameter((rng.standard_normal((d_model, widths[name])) * std).astype(dtype)))
        for name in ("q", "k", "v", "o"):
            setattr(self, f"b_{name}", Parameter(np.zeros(widths[name], dtype=dtype)) if bias else None)
        self.attention = ScaledDotProductAttention(causal=causal)
        self.positional = None                   # position hook: transform(q, k), its backward, score_bias(Tq, Tk, dtype)
        if positional == "rope":
            self.positional = RotaryEmbedding(self.head_size)
        elif positional == "alibi":
            self.positional = ALiBi(n_heads)

    # ---------------------------------------------------------------- helpers for the projections
    def _project(self, x2d, weight, bias):
        """(N, C) @ (C, C) + (C,) -> (N, C)."""
        y = x2d @ weight.data
        if bias is not None:
            y += bias.data
        return y

    def _split_heads(self, y2d, B, T):
        """(B*T, n*hs) -> (B, n, T, hs), n = H or Hkv."""
        return y2d.reshape(B, T, -1, self.head_size).transpose(0, 2, 1, 3)

    def _merge_heads(self, y, B, T):
        """(B, n, T, hs) -> (B*T, n*hs)."""
        return y.transpose(0, 2, 1, 3).reshape(B * T, -1)

    def _share_kv_heads(self, y):
        """(B, Hkv, S, hs) -> (B, H, S, hs): each key/value head serves H / Hkv query heads in a row."""
        return y if self.n_kv_heads == self.n_heads else np.repeat(y, self.n_heads // self.n_kv_heads, axis=1)

    def _share_kv_heads_backward(self, dy):
        """(B, H, S, hs) -> (B, Hkv, S, hs): a shared head's gradient is the sum over the heads it served."""
        if self.n_kv_heads == self.n_heads:
            return dy
        B, _, S, hs = dy.shape
        return dy.reshape(B, self.n_kv_heads, self.n_heads // self.n_kv_heads, S, hs).sum(axis=2)

    def _fused_qkv(self):
        """[W_Q | W_K | W_V] (C, C + 2 Hkv hs), the matching biases or None, and the column splits."""
        w_qkv = np.concatenate([self.w_q.data, self.w_k.data, self.w_v.data], axis=1)
        b_qkv = None if self.b_q is None else np.concatenate([self.b_q.data, self.b_k.data, self.b_v.data])
        splits = [self.w_q.shape[1], self.w_q.shape[1] + self.w_k.shape[1]]
        return w_qkv, b_qkv, splits

    def _project_backward(self, dy2d, x2d, weight, bias):
        """Undo y = x W + b: dW += x^T dy, db += sum dy; return dx = dy W^T."""
        weight.grad += x2d.T @ dy2d
        if bias is not None:
            bias.grad += sum_rows(dy2d)
        return dy2d @ weight.data.T

    # ---------------------------------------------------------------- forward / backward
    def forward(self, x, context=None, mask=None, cache=None):
        """Self-attention over x, or cross-attention from x to context.

        Args:
            x: (B, T, C) queries (and keys/values when context is None).
            context: optional (B, S, C) source of keys and values.
            mask: optional bool, broadcastable to (B, H, T, S); True = may attend
                (a key padding mask is (B, 1, 1, S), see layers/padding.py).
            cache: optional `LayerKVCache` for incremental decoding (inference only).
        Returns:
            out: (B, T, C).
        """
        x = np.asarray(x)
        self._check_input(x, "x")
        source = x if context is None else np.asarray(context)
        if context is not None:
            self._check_input(source, "context")
            if source.shape[0] != x.shape[0]:
                raise ValueError(f"{self!r} expected context with batch size {x.shape[0]}, got {source.shape}")
        B, T, C = x.shape
        S = source.shape[1]
        self.x2d = x.reshape(B * T, C)                                        # (B*T, C)
        self.source2d = source.reshape(B * S, C)                              # (B*S, C)
        self.has_context = context is not None
        self.used_cache = cache is not None
        new_keys = not (self.has_context and cache is not None and cache.length)
        if context is None:                                                   # 1. one product for q, k, v
            w_qkv, b_qkv, splits = self._fused_qkv()
            qkv2d = self.x2d @ w_qkv                                          # (B*T, C + 2 Hkv hs)
            if b_qkv is not None:
                qkv2d += b_qkv
            q, k, v = (self._split_heads(y2d, B, T) for y2d in np.split(qkv2d, splits, axis=1))  # views
        else:
            q = self._split_heads(self._project(self.x2d, self.w_q, self.b_q), B, T)        # 1. (B, H, T, hs)
            if new_keys:
                k = self._split_heads(self._project(self.source2d, self.w_k, self.b_k), B, S)   # (B, Hkv, S, hs)
                v = self._split_heads(self._project(self.source2d, self.w_v, self.b_v), B, S)   # (B, Hkv, S, hs)
            else:                                                             # context seen before: reuse
                k, v = cache.k, cache.v
        offset = cache.length if (cache is not None and not self.has_context) else 0
        if self.positional is not None and new_keys:
            q, k = self.positional.transform(q, k, offset=offset)             # 1b. rotary positions
        if cache is not None and new_keys:
            k, v = cache.append(k, v)                                         # (B, Hkv, S_cached, hs)
        S_keys = k.shape[-2]
        score_bias = None
        if self.positional is not None:
            score_bias = self.positional.score_bias(T, S_keys, q.dtype)       # 1b. ALiBi, (H, T, S)
        k, v = self._share_kv_heads(k), self._share_kv_heads(v)               # 1c. (B, H, S, hs)
        allowed = None if self.window is None else band_mask(T, S_keys, self.window, self.causal)
        if mask is not None:                                                  # 1d. the caller's mask, e.g. padding
            mask = np.asarray(mask)
            if mask.ndim != 4:     # a (B, S) padding mask would broadcast as (T, S) when B == T: refuse it
                raise ValueError(f"{self!r} expected mask (B or 1, H or 1, T or 1, S), e.g. key_padding_mask's "
                                 f"(B, 1, 1, S), got {mask.shape}")
            allowed = mask if allowed is None else allowed & mask
        heads = self.attention.forward(q, k, v, mask=allowed, bias=score_bias)  # 2. (B, H, T, hs)
        self.heads2d = self._merge_heads(heads, B, T)                         # 3. (B*T, C) concatenated heads
        out = self._project(self.heads2d, self.w_o, self.b_o)                 # 4. (B*T, C)
        self.batch, self.query_len, self.key_len = B, T, S
        return out.reshape(B, T, C)

    def backward(self, dout):
        """Reverse steps 4 to 1.

            4. out = heads W_O + b_O   -> dheads = dout W_O^T; dW_O += heads^T dout
            3. concatenation           -> split dheads back into (B, H, T, hs)
            2. attention               -> (dq, dk, dv) from ScaledDotProductAttention.backward
            1c. k, v shared by a group -> dk, dv of a shared head = sum over its group
            1b. q, k rotated (RoPE)    -> rotate dq, dk back; a score bias is constant
            1. q = x W_Q, k = src W_K, v = src W_V
                                       -> dW_Q += x^T dq, ...; dx = dq W_Q^T (+ dk W_K^T + dv W_V^T
                                          when src is x itself: x feeds all three paths, so the
                                          three contributions add)

        Args:
            dout: (B, T, C).
        Returns:
            dx (B, T, C) for self-attention, or (dx, dcontext (B, S, C)) for cross-attention.
        """
        self._require("heads2d")
        if self.used_cache:
            raise RuntimeError(f"{self!r}: backward() after a forward with a key/value cache is not supported "
                               "(the cache is for inference; train without it)")
        B, T, S, C = self.batch, self.query_len, self.key_len, self.d_model
        self._check_dout(dout, (B, T, C))
        ### BEGIN SOLUTION multihead.backward
        dout2d = dout.reshape(B * T, C)
        dheads2d = self._project_backward(dout2d, self.heads2d, self.w_o, self.b_o)     # 4.
        dheads = self._split_heads(dheads2d, B, T)                                       # 3. (B, H, T, hs)
        dq, dk, dv = self.attention.backward(dheads)                                     # 2.
        dk, dv = self._share_kv_heads_backward(dk), self._share_kv_heads_backward(dv)    # 1c. (B, Hkv, S, hs)
        if self.positional is not None:
            dq, dk = self.positional.transform_backward(dq, dk)                          # 1b.
        dx2d = self._project_backward(self._merge_heads(dq, B, T), self.x2d, self.w_q, self.b_q)             # 1.
        dsource2d = self._project_backward(self._merge_heads(dk, B, S), self.source2d, self.w_k, self.b_k)
        dsource2d += self._project_backward(self._merge_heads(dv, B, S), self.source2d, self.w_v, self.b_v)
        if not self.has_context:                   # x was the source too: its three contributions add
            dx2d += dsource2d
            return dx2d.reshape(B, T, C)
        return dx2d.reshape(B, T, C), dsource2d.reshape(B, S, C)
        ### END SOLUTION

    def _check_input(self, x, what):
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"{self!r} expected {what} (B, T, {self.d_model}), got {x.shape}")

    def __repr__(self):
        extras = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        extras += "" if self.positional is None else f", positional={self.positional!r}"
        extras += "" if self.window is None else f", window={self.window}"
        return f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}{extras})"
