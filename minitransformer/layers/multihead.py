"""Multi-head attention (lecture notes 2025 §1.2; Vaswani et al. 2017 §3.2.2).

Each of the H heads has its own d x d/H slice of W_Q, W_K, W_V (the notes'
"rectangular Q, K, V"); the heads attend independently and their outputs are
concatenated and mixed by W_O. Storing the H slices side by side as one
(C, C) matrix lets one matrix product compute all heads at once; a reshape
(B, T, C) -> (B, T, H, hs) and a transpose then separate them.

Self-attention takes keys and values from `x`; cross-attention (the notes'
footnote 5) takes them from `context`, e.g. an encoder's output.

The layer is composed of four `Linear` projections (q_proj, k_proj, v_proj,
o_proj) around one `ScaledDotProductAttention`.
The projections' weights and biases are also the layer's own attributes w_q, w_k,
w_v, w_o, b_q, b_k, b_v, b_o: the parameter names (`blocks.0.attn.w_q`) that
checkpoints, the GPT-2 import and LoRA's targets use.

Variants (Kumar slides; `minitransformer/variants/`): grouped-query attention,
where n_kv_heads < H key/value heads are each shared by a group of H / n_kv_heads
query heads (Ainslie et al. 2023; multi-query attention when n_kv_heads = 1); a
position scheme that acts inside the attention, given by the model (`position=`:
an object with `transform(q, k, offset)`, `transform_backward(dq, dk)` and
`score_bias(Tq, Tk, dtype)`, such as `RotaryEmbedding` or `ALiBi`); and a sliding
window of keys. `forward` is the lecture's four steps; each variant enters at one
named place: cross-attention's source in `_check_inputs`, the KV cache and RoPE's
rotation in `_keys_and_values`, grouped queries in `_share_kv_heads`, ALiBi's bias
in `_score_bias`, the window in `_allowed_keys`; each is the identity when unused.

Multi-head attention has no fast form: 0.2's (one fused product for q, k and v)
gained nothing measurable in 0.3 (`minitransformer/fast/__init__.py`); with
`kernels="fast"` its four `Linear`s and its attention run their fast forms.

Incremental decoding: `forward(x, cache=LayerKVCache())` appends this call's
keys and values (after RoPE, before sharing among query heads) to the cache
and attends over everything cached so far (`minitransformer/generation/kv_cache.py`); a
cross-attention cache keeps the context's keys and values from its first
call. A cached forward is for inference only.

Left out: dropout on the attention weights (GPT-2's attn_pdrop; this project
drops only sublayer outputs), value heads of another width than the key heads
(d_v = hs always), and backward through a cached forward.

Derivation:
    The layer's backward is its parts' backward passes in reverse order.
"""

import numpy as np

from ..core.checks import check_float_dtype
from ..core.module import Module
from ..core.random import as_generator
from .attention import ScaledDotProductAttention, band_mask
from .linear import Linear


class MultiHeadAttention(Module):
    """out = concat_h(attention(x W_Q^h, src W_K^h, src W_V^h)) W_O, src = context or x.

    Args:
        d_model: C, the width of x (and of context).
        n_heads: H; must divide d_model. Head size hs = C // H.
        causal: if True each query sees only keys at its own or earlier positions.
        bias: add learned biases b_q, b_k, b_v, b_o.
        dtype, rng: as everywhere.
        init_std: standard deviation of the normal initial weights of the four
            projections (default 1/sqrt(C), `Linear`'s); biases start at 0.
        out_std: that of W_O alone (default init_std). GPT-2 gives the projection
            that writes into the residual stream a smaller one (`models/gpt.py`).
        n_kv_heads: Hkv, the number of key/value heads (default H); must divide H.
            Query head h reads key/value head h // (H / Hkv).
        position: None, or a position scheme acting inside attention, e.g.
            `RotaryEmbedding(hs)` (rotates q and k) or `ALiBi(H)` (distance bias on the scores).
        window: None, or w: a query sees only keys less than w positions away.
    Parameters:
        w_q, w_o (C, C); w_k, w_v (C, Hkv*hs); b_q, b_o (C,), b_k, b_v (Hkv*hs,) when bias.
    Children:
        q_proj, k_proj, v_proj, o_proj (Linear), attention (ScaledDotProductAttention), position.
    Attributes after forward:
        attention.alpha: (B, H, Tq, Tk) attention weights of every head.
    """

    def __init__(self, d_model, n_heads, causal=False, bias=True, dtype=np.float64, rng=None,
                 n_kv_heads=None, position=None, window=None, init_std=None, out_std=None):
        if n_heads <= 0 or d_model % n_heads:
            raise ValueError(f"MultiHeadAttention expected d_model divisible by n_heads, got d_model={d_model}, n_heads={n_heads}")
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads <= 0 or n_heads % n_kv_heads:
            raise ValueError(f"MultiHeadAttention expected n_kv_heads dividing n_heads={n_heads}, got {n_kv_heads}")
        if window is not None and window < 1:
            raise ValueError(f"MultiHeadAttention expected window None or >= 1, got {window}")
        dtype = check_float_dtype(dtype, "MultiHeadAttention")
        rng = as_generator(rng)
        self.d_model, self.n_heads, self.head_size = d_model, n_heads, d_model // n_heads
        self.n_kv_heads, self.window, self.causal = n_kv_heads, window, causal
        kv_width = n_kv_heads * self.head_size
        out_std = init_std if out_std is None else out_std
        self.q_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng, init_std=init_std)
        self.k_proj = Linear(d_model, kv_width, bias=bias, dtype=dtype, rng=rng, init_std=init_std)
        self.v_proj = Linear(d_model, kv_width, bias=bias, dtype=dtype, rng=rng, init_std=init_std)
        self.o_proj = Linear(d_model, d_model, bias=bias, dtype=dtype, rng=rng, init_std=out_std)
        projections = (self.q_proj, self.k_proj, self.v_proj, self.o_proj)
        self.w_q, self.w_k, self.w_v, self.w_o = (proj.weight for proj in projections)   # the parameter names
        self.b_q, self.b_k, self.b_v, self.b_o = (proj.bias for proj in projections)     # of 0.2 (see above)
        self.attention = ScaledDotProductAttention(causal=causal)
        self.position = position

    # ---------------------------------------------------------------- heads
    def _split_heads(self, y):
        """(B, T, n*hs) -> (B, n, T, hs), n = H or Hkv."""
        B, T, _ = y.shape
        return y.reshape(B, T, -1, self.head_size).transpose(0, 2, 1, 3)

    def _merge_heads(self, y):
        """(B, n, T, hs) -> (B, T, n*hs): the heads side by side again."""
        B, _, T, _ = y.shape
        return y.transpose(0, 2, 1, 3).reshape(B, T, -1)

    def _share_kv_heads(self, y):
        """(B, Hkv, S, hs) -> (B, H, S, hs): each key/value head serves H / Hkv query heads in a row."""
        return y if self.n_kv_heads == self.n_heads else np.repeat(y, self.n_heads // self.n_kv_heads, axis=1)

    def _share_kv_heads_backward(self, dy):
        """The backward of sharing key/value heads among query heads: (B, H, S, hs) -> (B, Hkv, S, hs).

        Derivation:
            A shared head's gradient is the sum over the heads it served.
        """
        if self.n_kv_heads == self.n_heads:
            return dy
        B, _, S, hs = dy.shape
        return dy.reshape(B, self.n_kv_heads, self.n_heads // self.n_kv_heads, S, hs).sum(axis=2)

    # ---------------------------------------------------------------- where the variants enter
    def _keys_and_values(self, q, source, cache):
        """Step 1's k = src W_K and v = src W_V in the Hkv key/value heads, with what acts on new keys: a position
        scheme that rotates q and k (RoPE: step 1b), at the positions after the cached ones, and a KV cache, which
        puts them after the keys and values cached before (inference). A cross-attention's cache, once filled,
        holds its context's: nothing is projected again.

        q (B, H, T, hs), source (B, S, C) -> (q, k, v); k and v (B, Hkv, S', hs), S' = S and the positions cached.
        """
        if cache is not None and self.has_context and cache.length:
            return q, cache.k, cache.v                                        # the context's, from the first call
        k = self._split_heads(self.k_proj(source))                            # (B, Hkv, S, hs)
        v = self._split_heads(self.v_proj(source))                            # (B, Hkv, S, hs)
        if self.position is not None:
            offset = cache.length if (cache is not None and not self.has_context) else 0
            q, k = self.position.transform(q, k, offset=offset)              # 1b. rotary positions
        if cache is not None:
            k, v = cache.append(k, v)                                         # (B, Hkv, S_cached + S, hs)
        return q, k, v

    def _score_bias(self, q, k):
        """A position scheme's constant bias on the scores (ALiBi's distances), (H, Tq, Tk), or None."""
        return None if self.position is None else self.position.score_bias(q.shape[-2], k.shape[-2], q.dtype)

    def _allowed_keys(self, mask, q, k):
        """The sliding window (Tq, Tk) and the caller's mask combined, or None."""
        Tq, Tk = q.shape[-2], k.shape[-2]
        allowed = None if self.window is None else band_mask(Tq, Tk, self.window, self.causal)
        if mask is not None:
            mask = np.asarray(mask)
            if mask.ndim != 4:     # a (B, S) padding mask would broadcast as (T, S) when B == T: refuse it
                raise ValueError(f"{self!r} expected mask (B or 1, H or 1, T or 1, S), e.g. key_padding_mask's "
                                 f"(B, 1, 1, S), got {mask.shape}")
            allowed = mask if allowed is None else allowed & mask
        return allowed

    # ---------------------------------------------------------------- forward / backward
    def forward(self, x, context=None, mask=None, cache=None):
        """Self-attention over x, or cross-attention from x to context.

        Args:
            x: (B, T, C) queries (and keys/values when context is None).
            context: optional (B, S, C) source of keys and values.
            mask: optional bool, broadcastable to (B, H, T, S); True = may attend
                (a key padding mask is (B, 1, 1, S), see layers/padding.py).
            cache: optional key/value cache for incremental decoding (inference only;
                see minitransformer/generation/kv_cache.py for the protocol).
        Returns:
            out: (B, T, C).
        """
        x, source = self._check_inputs(x, context)                            # cross-attention: source = context
        self.has_context, self.used_cache = context is not None, cache is not None
        q = self._split_heads(self.q_proj(x))                                 # 1. q = x W_Q: (B, H, T, hs)
        q, k, v = self._keys_and_values(q, source, cache)                     # 1. k = src W_K, v = src W_V: (B, Hkv, S, hs)
        k, v = self._share_kv_heads(k), self._share_kv_heads(v)               # 1c. grouped queries: (B, H, S, hs)
        heads = self.attention(q, k, v, mask=self._allowed_keys(mask, q, k), bias=self._score_bias(q, k))   # 2. (B, H, T, hs)
        return self.o_proj(self._merge_heads(heads))                          # 3-4. concat, W_O: (B, T, C)

    def backward(self, dout):
        """The gradient at x (and at the context, for cross-attention), and the projections' gradients.

        Derivation:
            Reverse steps 4 to 1.

                4. out = heads W_O + b_O   -> dheads = dout W_O^T; dW_O += heads^T dout (o_proj.backward)
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
        if self.used_cache:
            raise RuntimeError(f"{self!r}: backward() after a forward with a key/value cache is not supported "
                               "(the cache is for inference; train without it)")
        ### BEGIN SOLUTION multihead.backward
        dheads = self._split_heads(self.o_proj.backward(dout))                # 4-3. (B, H, T, hs)
        dq, dk, dv = self.attention.backward(dheads)                          # 2.
        dk, dv = self._share_kv_heads_backward(dk), self._share_kv_heads_backward(dv)   # 1c. (B, Hkv, S, hs)
        if self.position is not None:
            dq, dk = self.position.transform_backward(dq, dk)                 # 1b.
        dx = self.q_proj.backward(self._merge_heads(dq))                      # 1. (B, T, C)
        dsource = self.k_proj.backward(self._merge_heads(dk)) + self.v_proj.backward(self._merge_heads(dv))
        ### END SOLUTION
        if not self.has_context:                   # x was the source too: its three contributions add
            return dx + dsource
        return dx, dsource

    # ---------------------------------------------------------------- checks
    def _check_inputs(self, x, context):
        """x (B, T, C) and context (B, S, C) or None as arrays -> (x, source), source = context or x."""
        x = np.asarray(x)
        self._check_input(x, "x")
        if context is None:
            return x, x
        source = np.asarray(context)
        self._check_input(source, "context")
        if source.shape[0] != x.shape[0]:
            raise ValueError(f"{self!r} expected context with batch size {x.shape[0]}, got {source.shape}")
        return x, source

    def _check_input(self, x, what):
        self._check_float(x, what)
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"{self!r} expected {what} (B, T, {self.d_model}), got {x.shape}")
        if 0 in x.shape[:2]:        # NumPy's reshape into heads fails on an empty batch or sequence: say so
            raise ValueError(f"{self!r} expected {what} (B, T, {self.d_model}) with B >= 1 and T >= 1, got {x.shape}")

    def __repr__(self):
        extras = "" if self.n_kv_heads == self.n_heads else f", n_kv_heads={self.n_kv_heads}"
        extras += "" if self.position is None else f", position={self.position!r}"
        extras += "" if self.window is None else f", window={self.window}"
        return f"MultiHeadAttention(d_model={self.d_model}, n_heads={self.n_heads}, causal={self.causal}{extras})"
