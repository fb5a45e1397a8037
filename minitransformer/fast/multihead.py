"""Multi-head attention, fast form: one fused product for q, k and v, heads merged without copies.

In self-attention the three projections read the same x, so their
weights are placed side by side, [W_Q | W_K | W_V] (C, C + 2 Hkv hs), and one
matrix product computes q, k and v (three small products are slower than one
large one). The parameters stay the separate w_q, w_k, w_v;
tests/test_fast.py proves this form equal to the plain one.
The backward pass keeps the three projections apart: fusing them would mean
copying dq, dk and dv side by side into one (B*T, C + 2 Hkv hs) array, which
cost more (0.14 ms a layer on the benchmark model) than the three weight
products lose against one; `ScaledDotProductAttention` writes dq, dk, dv
laid out like q, k, v, so merging their heads back needs no copy at all
(both changes together: 0.7 ms of a 54 ms training step).

This form belongs with `FastScaledDotProductAttention` (fast/attention.py), which writes
dq, dk, dv in q, k, v's memory layout; with the plain attention it is still correct, only
slower. The plain layer and its derivation are in `minitransformer/layers/multihead.py`.
"""

import numpy as np

from ..layers.multihead import MultiHeadAttention
from .reductions import sum_rows


class FastMultiHeadAttention(MultiHeadAttention):
    """`MultiHeadAttention` on 2-D row blocks with a fused QKV product. Same parameters and results.

    It reads the projections' parameters (w_q, ..., b_o) directly instead of calling the
    q_proj, k_proj, v_proj, o_proj layers.
    """

    def _project(self, x2d, weight, bias):
        """(N, C) @ (C, C) + (C,) -> (N, C)."""
        y = x2d @ weight.data
        if bias is not None:
            y += bias.data
        return y

    def _split_rows(self, y2d, B, T):
        """(B*T, n*hs) -> (B, n, T, hs), n = H or Hkv."""
        return y2d.reshape(B, T, -1, self.head_size).transpose(0, 2, 1, 3)

    def _merge_rows(self, y, B, T):
        """(B, n, T, hs) -> (B*T, n*hs)."""
        return y.transpose(0, 2, 1, 3).reshape(B * T, -1)

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

    def forward(self, x, context=None, mask=None, cache=None):
        """x (B, T, C), context (B, S, C) or None -> out (B, T, C); see the plain layer."""
        x, source = self._check_inputs(x, context)
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
            q, k, v = (self._split_rows(y2d, B, T) for y2d in np.split(qkv2d, splits, axis=1))  # views
        else:
            q = self._split_rows(self._project(self.x2d, self.w_q, self.b_q), B, T)        # 1. (B, H, T, hs)
            if new_keys:
                k = self._split_rows(self._project(self.source2d, self.w_k, self.b_k), B, S)   # (B, Hkv, S, hs)
                v = self._split_rows(self._project(self.source2d, self.w_v, self.b_v), B, S)   # (B, Hkv, S, hs)
            else:                                                             # context seen before: reuse
                k, v = cache.k, cache.v
        offset = cache.length if (cache is not None and not self.has_context) else 0
        if self.position is not None and new_keys:
            q, k = self.position.transform(q, k, offset=offset)             # 1b. rotary positions
        if cache is not None and new_keys:
            k, v = cache.append(k, v)                                         # (B, Hkv, S_cached, hs)
        S_keys = k.shape[-2]
        score_bias = None
        if self.position is not None:
            score_bias = self.position.score_bias(T, S_keys, q.dtype)       # 1b. ALiBi, (H, T, S)
        k, v = self._share_kv_heads(k), self._share_kv_heads(v)               # 1c. (B, H, S, hs)
        allowed = self._allowed_keys(mask, T, S_keys)                         # 1d. window and caller's mask
        heads = self.attention.forward(q, k, v, mask=allowed, bias=score_bias)  # 2. (B, H, T, hs)
        self.heads2d = self._merge_rows(heads, B, T)                         # 3. (B*T, C) concatenated heads
        out = self._project(self.heads2d, self.w_o, self.b_o)                 # 4. (B*T, C)
        self.batch, self.query_len, self.key_len = B, T, S
        return out.reshape(B, T, C)

    def backward(self, dout):
        """dout (B, T, C) -> dx, or (dx, dcontext); the derivation is in the plain layer's backward."""
        self._require("heads2d")
        if self.used_cache:
            raise RuntimeError(f"{self!r}: backward() after a forward with a key/value cache is not supported "
                               "(the cache is for inference; train without it)")
        B, T, S, C = self.batch, self.query_len, self.key_len, self.d_model
        self._check_dout(dout, (B, T, C))
        dout2d = dout.reshape(B * T, C)
        dheads2d = self._project_backward(dout2d, self.heads2d, self.w_o, self.b_o)     # 4.
        dheads = self._split_rows(dheads2d, B, T)                                       # 3. (B, H, T, hs)
        dq, dk, dv = self.attention.backward(dheads)                                     # 2.
        dk, dv = self._share_kv_heads_backward(dk), self._share_kv_heads_backward(dv)    # 1c. (B, Hkv, S, hs)
        if self.position is not None:
            dq, dk = self.position.transform_backward(dq, dk)                          # 1b.
        dx2d = self._project_backward(self._merge_rows(dq, B, T), self.x2d, self.w_q, self.b_q)             # 1.
        dsource2d = self._project_backward(self._merge_rows(dk, B, S), self.source2d, self.w_k, self.b_k)
        dsource2d += self._project_backward(self._merge_rows(dv, B, S), self.source2d, self.w_v, self.b_v)
        if not self.has_context:                   # x was the source too: its three contributions add
            dx2d += dsource2d
            return dx2d.reshape(B, T, C)
        return dx2d.reshape(B, T, C), dsource2d.reshape(B, S, C)


FAST_FORMS = {MultiHeadAttention: FastMultiHeadAttention}
