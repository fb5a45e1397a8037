"""Position schemes that act inside attention, chosen by name (Kumar slides; Strabel §9-10).

`MultiHeadAttention(position=...)` takes a scheme object; models and Transformer-XL
choose it by the name a user gives (`GPT(positional="rope")`) through
`attention_position`, which builds a new object for every attention layer (a scheme
caches its angles or its input between forward and backward, so layers never share one).

A scheme offers `transform(q, k, offset)` and `transform_backward(dq, dk)` (RoPE rotates
q and k; ALiBi leaves them alone) and `score_bias(Tq, Tk, dtype)` (ALiBi's distance
penalties; None for RoPE).
"""

from .alibi import ALiBi
from .rope import RotaryEmbedding

IN_ATTENTION = ("rope", "alibi")


def attention_position(positional, d_model, n_heads):
    """A new scheme for one attention layer: RotaryEmbedding(hs) for "rope", ALiBi(H) for "alibi",
    None for anything else (positions added to the input, or none at all)."""
    if positional == "rope":
        return RotaryEmbedding(d_model // n_heads)
    if positional == "alibi":
        return ALiBi(n_heads)
    return None
