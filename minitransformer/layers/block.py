"""One Transformer layer: attention and feed-forward sublayers with residual connections
(lecture notes 2025 §1.3; Vaswani et al. 2017; pre-norm as in GPT-2).

    pre-norm  (default):  h = x + attn(ln1(x));      y = h + ff(ln2(h))
    post-norm (the paper): h = ln1(x + attn(x));     y = ln2(h + ff(h))

The notes (§1.3) arrive at the pre-norm form, x' = self(norm(x)) + x. Dropout,
when p > 0, sits on each sublayer's output before the residual addition.

The modern (Llama-style) block changes what sits in the sublayers, not where:
`norm_layer="rmsnorm"` puts RMSNorm where LayerNorm was, `activation="swiglu"`
replaces the feed-forward by the gated SwiGLU, and `bias=False` drops the
biases of every linear map (notebook 16 shows the two blocks side by side).

`d_ff=0` leaves the feed-forward sublayer out (with its norm and dropout): the
block is its attention sublayer alone, h = x + attn(ln1(x)) (post-norm:
h = ln1(x + attn(x))). Stacks of such blocks are the attention-only models in
which Elhage et al. (2021, "A mathematical framework for Transformer circuits")
and Olsson et al. (2022, "In-context learning and induction heads") study
induction heads (notebook 19).

Left out: parallel attention and feed-forward (GPT-J, PaLM) and dropout on the
attention weights themselves (GPT-2's attn_pdrop).

Derivation:
    In the backward pass a residual connection is just a sum: the gradient reaching
    h flows both straight through to x and through the sublayer, and the two add.
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator, dropout_generator
from .dropout import Dropout
from .feedforward import FeedForward
from .layernorm import LayerNorm
from .multihead import MultiHeadAttention
from .rmsnorm import RMSNorm
from .swiglu import SwiGLU

NORMS = ("pre", "post")
NORM_LAYERS = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}
FEEDFORWARD_ACTIVATIONS = ("relu", "gelu", "swiglu")       # "swiglu": the gated SwiGLU sublayer


def check_norm(norm, where):
    """Raise naming `where` unless norm is "pre" (LayerNorm inside each residual branch) or "post" (after the sum)."""
    if norm not in NORMS:
        raise ValueError(f"{where} expected norm 'pre' or 'post', got {norm!r}")


def check_block_options(norm_layer, activation, where):
    """Raise naming `where` unless norm_layer is "layernorm" or "rmsnorm" and activation one of
    "relu", "gelu" (FeedForward) or "swiglu" (SwiGLU)."""
    if norm_layer not in NORM_LAYERS:
        raise ValueError(f"{where} expected norm_layer in {sorted(NORM_LAYERS)}, got {norm_layer!r}")
    if activation not in FEEDFORWARD_ACTIVATIONS:
        raise ValueError(f"{where} expected activation in {list(FEEDFORWARD_ACTIVATIONS)}, got {activation!r}")


def make_norm(norm_layer, d_model, dtype):
    """LayerNorm(d_model) or RMSNorm(d_model), by name (checked by `check_block_options`)."""
    return NORM_LAYERS[norm_layer](d_model, dtype=dtype)


def make_feedforward(d_model, d_ff, activation, bias, dtype, rng, init_std, out_std):
    """SwiGLU for activation="swiglu", else FeedForward with that activation; `bias` for every linear map."""
    if activation == "swiglu":
        return SwiGLU(d_model, d_ff, bias=bias, dtype=dtype, rng=rng, init_std=init_std, out_std=out_std)
    return FeedForward(d_model, d_ff, activation=activation, bias=bias, dtype=dtype, rng=rng,
                       init_std=init_std, out_std=out_std)


class TransformerBlock(Module):
    """A self-attention sublayer and a feed-forward sublayer, each with a residual connection.

    Args:
        d_model: C.  n_heads: H.  d_ff: feed-forward hidden width; 0 for none (an attention-only block).
        norm: "pre" (default) or "post".
        causal: mask future positions in attention (a decoder block).
        dropout: drop probability on each sublayer output.
        activation: "relu" or "gelu" in the feed-forward sublayer, or "swiglu" for the gated
            SwiGLU sublayer (Llama) in its place.
        norm_layer: "layernorm" (default) or "rmsnorm" (Llama), in both norm places.
        bias: biases in every linear map: attention's four projections and the
            feed-forward's (default True; Llama has none).
        dtype, rng: as everywhere.
        dropout_rng: generator for dropout masks (default: `rng`).
        attention_options: extra keyword arguments for MultiHeadAttention
            (n_kv_heads, position, window).
        init_std: standard deviation of every initial weight matrix (default:
            each `Linear`'s 1/sqrt(width in)).
        residual_std: that of the two matrices writing into the residual stream,
            attention's W_O and the feed-forward's fc2 (default init_std).
    Children:
        ln1, attn, drop1, ln2, ff, drop2 (the last three None when d_ff = 0).
    """

    def __init__(self, d_model, n_heads, d_ff, norm="pre", causal=True, dropout=0.0, activation="relu",
                 dtype=np.float64, rng=None, dropout_rng=None, attention_options=None, init_std=None,
                 residual_std=None, norm_layer="layernorm", bias=True):
        check_norm(norm, "TransformerBlock")
        check_block_options(norm_layer, activation, "TransformerBlock")
        if not isinstance(d_ff, (int, np.integer)) or isinstance(d_ff, bool) or d_ff < 0:
            raise ValueError(f"TransformerBlock expected d_ff an integer >= 0 (0: no feed-forward sublayer), "
                             f"got {d_ff!r}")
        rng = as_generator(rng)
        dropout_rng = dropout_generator(rng, dropout_rng)
        self.norm = norm
        self.ln1 = make_norm(norm_layer, d_model, dtype)
        self.attn = MultiHeadAttention(d_model, n_heads, causal=causal, bias=bias, dtype=dtype, rng=rng,
                                       init_std=init_std, out_std=residual_std, **(attention_options or {}))
        self.drop1 = Dropout(dropout, rng=dropout_rng)
        self.ln2 = self.ff = self.drop2 = None                         # attention only (d_ff = 0)
        if d_ff:
            self.ln2 = make_norm(norm_layer, d_model, dtype)
            self.ff = make_feedforward(d_model, d_ff, activation, bias, dtype, rng, init_std, residual_std)
            self.drop2 = Dropout(dropout, rng=dropout_rng)

    def forward(self, x, mask=None, cache=None):
        """x (B, T, C) -> (B, T, C); mask: optional bool attention mask, see MultiHeadAttention.forward;
        cache: optional LayerKVCache for the attention (inference)."""
        if self.norm == "pre":
            h = x + self.drop1(self.attn(self.ln1(x), mask=mask, cache=cache))
            return h if self.ff is None else h + self.drop2(self.ff(self.ln2(h)))
        h = self.ln1(x + self.drop1(self.attn(x, mask=mask, cache=cache)))
        return h if self.ff is None else self.ln2(h + self.drop2(self.ff(h)))

    def backward(self, dout):
        """The gradient at x, through both sublayers. dout (B, T, C) -> dx (B, T, C).

        Derivation:
            Each residual `a + f(a)` passes da = dout + f'(a)^T dout, the steps taken in reverse.
        """
        ### BEGIN SOLUTION block.backward
        if self.norm == "pre":
            dh = dout                                                                  # y = h (attention only)
            if self.ff is not None:
                dh = dout + self.ln2.backward(self.ff.backward(self.drop2.backward(dout)))  # y = h + ff(ln2(h))
            return dh + self.ln1.backward(self.attn.backward(self.drop1.backward(dh)))  # h = x + attn(ln1(x))
        dh = dout                                                                      # y = h (attention only)
        if self.ff is not None:
            dsum2 = self.ln2.backward(dout)                                            # y = ln2(h + ff(h))
            dh = dsum2 + self.ff.backward(self.drop2.backward(dsum2))
        dsum1 = self.ln1.backward(dh)                                                  # h = ln1(x + attn(x))
        return dsum1 + self.attn.backward(self.drop1.backward(dsum1))
        ### END SOLUTION

    def __repr__(self):
        return f"TransformerBlock(d_model={self.attn.d_model}, n_heads={self.attn.n_heads}, norm={self.norm!r})"
