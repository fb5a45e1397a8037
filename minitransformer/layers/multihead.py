"""Multi-head attention (lecture notes 2025 §1.2; Vaswani et al. 2017 §3.2.2).

Each of the H heads has its own d x d/H slice of W_Q, W_K, W_V (the notes'
"rectangular Q, K, V"); the heads attend independently and their outputs are
concatenated and mixed by W_O. Storing the H slices side by side as one
(C, C) matrix lets one matrix product compute all heads at once; a reshape
(B, T, C) -> (B, T, H, hs) and a transpose then separate them.

Self-attention takes keys and values from `x`; cross-attention (the notes'
footnote 5) takes them from `context`, e.g. an encoder's output.

Speed: in self-attention the three projections read the same x, so their
weights are placed side by side, [W_Q | W_K | W_V] (C, 3C), and one matrix
product computes q, k and v (three small products are slower than one large
one); the backward pass likewise makes one product for the three weight
gradients and one for dx. The parameters stay the separate w_q, w_k, w_v.

Incremental decoding: `forward(x, cache=LayerKVCache())` appends this call's
keys and values to the cache and attends over everything cached so far
(`minitransformer/kv_cache.py`); a cross-attention cache keeps the context's
keys and values from its first call. A cached forward is for inference only.
"""

import numpy as np

from ..module import Module
from ..parameter import Parameter
from ..random import as_generator, check_float_dtype
from .attention import ScaledDotProductAttention


class MultiHeadAttention(Module):
    """out = concat_h(attention(x W_Q^h, src W_K^h, src W_V^h)) W_O, src = context or x.

    Args:
        d_model: C, the width of x (and of context).
        n_heads: H; must divide d_model. Head size hs = C // H.
        causal: if True each query sees only keys at its own or earlier positions.
        bias: add learned biases b_q, b_k, b_v, b_o.
        dtype, rng: as everywhere; weights are N(0, 1/C).
    Parameters:
        w_q, w_k, w_v, w_o (C, C); b_q, b_k, b_v, b_o (C,) when bias.
    Attributes after forward:
        attention.alpha: (B, H, Tq, Tk) attention weights of every head.
    """

    def __init__(self, d_model, n_heads, causal=False, bias=True, dtype=np.float64, rng=None):
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"MultiHeadAttention expected d_model divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
        dtype = check_float_dtype(dtype, "MultiHeadAttention")
        rng = as_generator(rng)
        self.d_model, self.n_heads, self.head_size = d_model, n_heads, d_model // n_heads
        self.causal = causal
        std = d_model ** -0.5
        for name in ("q", "k", "v", "o"):
            setattr(self, f"w_{name}", Parameter((rng.standard_normal((d_model, d_model)) * std).astype(dtype)))
        for name in ("q", "k", "v", "o"):
            setattr(self, f"b_{name}", Parameter(np.zeros(d_model, dtype=dtype)) if bias else None)
        self.attention = ScaledDotProductAttention(causal=causal)

    # ---------------------------------------------------------------- helpers for the projections
    def _project(self, x2d, weight, bias):
        """(N, C) @ (C, C) + (C,) -> (N, C)."""
        y = x2d @ weight.data
        if bias is not None:
            y += bias.data
        return y

    def _split_heads(self, y2d, B, T):
        """(B*T, C) -> (B, H, T, hs)."""
        return y2d.reshape(B, T, self.n_heads, self.head_size).transpose(0, 2, 1, 3)

    def _merge_heads(self, y, B, T):
        """(B, H, T, hs) -> (B*T, C)."""
        return y.transpose(0, 2, 1, 3).reshape(B * T, self.d_model)

    def _fused_qkv(self):
        """[W_Q | W_K | W_V] (C, 3C) and [b_Q | b_K | b_V] (3C,) or None."""
        weights = (self.w_q, self.w_k, self.w_v)
        biases = (self.b_q, self.b_k, self.b_v)
        w_qkv = np.concatenate([w.data for w in weights], axis=1)
        b_qkv = None if self.b_q is None else np.concatenate([b.data for b in biases])
        return w_qkv, b_qkv

    def _project_backward(self, dy2d, x2d, weight, bias):
        """Undo y = x W + b: dW += x^T dy, db += sum dy; return dx = dy W^T."""
        weight.grad += x2d.T @ dy2d
        if bias is not None:
            bias.grad += dy2d.sum(axis=0)
        return dy2d @ weight.data.T

    # ---------------------------------------------------------------- forward / backward
    def forward(self, x, context=None, cache=None):
        """Self-attention over x, or cross-attention from x to context.

        Args:
            x: (B, T, C) queries (and keys/values when context is None).
            context: optional (B, S, C) source of keys and values.
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
        if context is None:                                                   # 1. one product for q, k, v
            self.w_qkv, b_qkv = self._fused_qkv()
            qkv2d = self.x2d @ self.w_qkv                                     # (B*T, 3C)
            if b_qkv is not None:
                qkv2d += b_qkv
            q2d, k2d, v2d = np.split(qkv2d, np.cumsum([self.w_q.shape[1], self.w_k.shape[1]]), axis=1)
            q, k, v = (self._split_heads(y2d, B, T) for y2d in (q2d, k2d, v2d))   # (B, H, T, hs) views
        else:
            q = self._split_heads(self._project(self.x2d, self.w_q, self.b_q), B, T)        # 1. (B, H, T, hs)
            if cache is not None and cache.length:                            # context seen before: reuse
                k, v = cache.k, cache.v
            else:
                k = self._split_heads(self._project(self.source2d, self.w_k, self.b_k), B, S)   # (B, H, S, hs)
                v = self._split_heads(self._project(self.source2d, self.w_v, self.b_v), B, S)   # (B, H, S, hs)
        if cache is not None and not (self.has_context and cache.length):
            k, v = cache.append(k, v)                                         # (B, H, S_cached, hs)
        heads = self.attention.forward(q, k, v)                               # 2. (B, H, T, hs)
        self.heads2d = self._merge_heads(heads, B, T)                         # 3. (B*T, C) concatenated heads
        out = self._project(self.heads2d, self.w_o, self.b_o)                 # 4. (B*T, C)
        self.shapes = (B, T, S)
        return out.reshape(B, T, C)

    def backward(self, dout):
        """Reverse steps 4 to 1.

            4. out = heads W_O + b_O   -> dheads = dout W_O^T; dW_O += heads^T dout
            3. concatenation           -> split dheads back into (B, H, T, hs)
            2. attention               -> (dq, dk, dv) from ScaledDotProductAttention.backward
            1. q = x W_Q, k = src W_K, v = src W_V
                                       -> dW_Q += x^T dq, ...; dx = dq W_Q^T (+ dk W_K^T + dv W_V^T
                                          when src is x itself: x feeds all three paths, so the
                                          three contributions add)
        In self-attention step 1 runs fused: with dqkv = [dq | dk | dv] (B*T, 3C),
        d[W_Q | W_K | W_V] = x^T dqkv and dx = dqkv [W_Q | W_K | W_V]^T, which is
        exactly the sum of the three separate terms above.

        Args:
            dout: (B, T, C).
        Returns:
            dx (B, T, C) for self-attention, or (dx, dcontext (B, S, C)) for cross-attention.
        """
        self._require("heads2d")
        if self.used_cache:
            raise RuntimeError(f"{self!r}: backward() after a forward with a key/value cache is not supported "
                               "(the cache is for inference; train without it)")
        B, T, S = self.shapes
        C = self.d_model
        self._check_dout(dout, (B, T, C))
        dout2d = dout.reshape(B * T, C)
        dheads2d = self._project_backward(dout2d, self.heads2d, self.w_o, self.b_o)     # 4.
        dheads = self._split_heads(dheads2d, B, T)                                       # 3. (B, H, T, hs)
        dq, dk, dv = self.attention.backward(dheads)                                     # 2.
        if not self.has_context:                                                         # 1. fused
            dqkv2d = np.concatenate([self._merge_heads(d, B, T) for d in (dq, dk, dv)], axis=1)   # (B*T, 3C)
            dw_qkv = self.x2d.T @ dqkv2d                                                 # (C, 3C)
            splits = np.cumsum([self.w_q.shape[1], self.w_k.shape[1]])
            for weight, dweight in zip((self.w_q, self.w_k, self.w_v), np.split(dw_qkv, splits, axis=1)):
                weight.grad += dweight
            if self.b_q is not None:
                dbias = dqkv2d.sum(axis=0)
                for bias, dbias_part in zip((self.b_q, self.b_k, self.b_v), np.split(dbias, splits)):
                    bias.grad += dbias_part
            return (dqkv2d @ self.w_qkv.T).reshape(B, T, C)
        dx2d = self._project_backward(self._merge_heads(dq, B, T), self.x2d, self.w_q, self.b_q)             # 1.
        dsource2d = self._project_backward(self._merge_heads(dk, B, S), self.source2d, self.w_k, self.b_k)
        dsource2d += self._project_backward(self._merge_heads(dv, B, S), self.source2d, self.w_v, self.b_v)
        return dx2d.reshape(B, T, C), dsource2d.reshape(B, S, C)

    def _check_input(self, x, what):
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"{self!r} expected {what} (B, T, {self.d_model}), got {x.shape}")

    def __repr__(self):
        return f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal})"
