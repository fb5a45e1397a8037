"""Transformer-XL segment recurrence (Dai et al. 2019; survey note §9.1, eq. 23).

A long text is read in segments of T tokens. Each layer n keeps the hidden
states that entered it during the previous segment, h_prev (B, M, C), as a
memory. For the next segment, keys and values come from the memory followed
by the current states, while queries come from the current states only:

    h~ = [SG(h_prev) ; h]          (B, M + T, C)
    q = h W_Q,  k = h~ W_K,  v = h~ W_V

SG is the stop-gradient: the memory is a constant. So training costs one
segment, yet a query can look M positions further back, and with n layers
the reach grows to about n M positions.

Causal masking with M + T keys and T queries is `causal_mask(T, M + T)`,
which aligns the queries to the end of the keys: every memory position is
visible. Positions: the paper has its own relative scheme; here attention
takes the package's `positional` option ("rope", "alibi" or None), which is
relative or absent and so stays valid across segments. The memory keeps the
last mem_len positions a layer has seen (the current segment and, if mem_len
is longer, older memory), as in the paper's code. Left out: the paper's
relative position terms with the u, v biases, and adaptive softmax.

Derivation:
    The stop-gradient is simply what the backward pass does: the gradient that
    reaches the memory's rows is dropped, never passed on.
"""

import numpy as np

from ..core.module import Module
from ..core.random import as_generator
from ..layers.embedding import Embedding, check_token_ids
from ..layers.feedforward import FeedForward
from ..layers.layernorm import LayerNorm
from ..layers.lm_head import TiedLMHead
from ..layers.multihead import MultiHeadAttention
from .attention_positions import attention_position


class TransformerXLBlock(Module):
    """A pre-norm block whose attention also reads a memory of earlier states.

        full = [memory ; x];  n = ln1(full);  h = x + attn(n[:, M:], context=n);  y = h + ff(ln2(h))
    Args:
        d_model, n_heads, d_ff: as TransformerBlock.
        positional: None, "rope" or "alibi" (see MultiHeadAttention).
        dtype, rng: as everywhere.
    """

    def __init__(self, d_model, n_heads, d_ff, positional=None, dtype=np.float64, rng=None):
        rng = as_generator(rng)
        self.ln1 = LayerNorm(d_model, dtype=dtype)
        self.attn = MultiHeadAttention(d_model, n_heads, causal=True, dtype=dtype, rng=rng,
                                       position=attention_position(positional, d_model, n_heads))
        self.ln2 = LayerNorm(d_model, dtype=dtype)
        self.ff = FeedForward(d_model, d_ff, activation="gelu", dtype=dtype, rng=rng)

    def check_memory(self, x, memory):
        """Raise, naming this block, unless memory is None or (B, M, C) for x (B, T, C)."""
        if memory is not None and (np.ndim(memory) != 3 or np.shape(memory)[0] != np.shape(x)[0]
                                   or np.shape(memory)[2] != np.shape(x)[-1]):
            B, C = np.shape(x)[0], np.shape(x)[-1]
            raise ValueError(f"{self!r} expected memory ({B}, M, {C}) for x {np.shape(x)}, got {np.shape(memory)}")

    def forward(self, x, memory=None):
        """x (B, T, C), memory None or (B, M, C) -> y (B, T, C)."""
        x = np.asarray(x)
        self._check_features(x, self.attn.d_model)
        self.check_memory(x, memory)
        full = x if memory is None else np.concatenate([np.asarray(memory, dtype=x.dtype), x], axis=1)  # (B, M+T, C)
        self.memory_len = full.shape[1] - x.shape[1]
        normed = self.ln1(full)                                                  # 1. (B, M+T, C)
        h = x + self.attn(normed[:, self.memory_len:], normed)                  # 2. queries: current only
        return h + self.ff(self.ln2(h))                                          # 3.

    def backward(self, dout):
        """The gradient at x (none reaches the memory), and the sublayers' gradients.

        Derivation:
            Reverse steps 3 to 1; the memory is a constant (stop-gradient).

                3. y = h + ff(ln2(h))           ->  dh = dout + ln2'(ff'(dout))
                2. h = x + attn(n_cur, n)       ->  dx = dh + ...;  dn = dcontext, dn[:, M:] += dquery
                1. n = ln1([memory ; x])        ->  dfull = ln1'(dn); the rows of the memory are dropped

        Returns:
            dx (B, T, C).
        """
        ### BEGIN SOLUTION transformer_xl.backward
        dh = dout + self.ln2.backward(self.ff.backward(dout))                     # 3.
        dquery, dnormed = self.attn.backward(dh)                                 # 2.
        dnormed[:, self.memory_len:] += dquery
        dfull = self.ln1.backward(dnormed)                                       # 1. (B, M+T, C)
        return dh + dfull[:, self.memory_len:]                                   # SG: memory rows dropped
        ### END SOLUTION

    def __repr__(self):
        return f"TransformerXLBlock(d_model={self.attn.d_model}, n_heads={self.attn.n_heads})"


class TransformerXL(Module):
    """A decoder LM that carries per-layer memories from one segment to the next.

    Args:
        vocab_size, d_model, n_heads, n_layers, d_ff: as GPT.
        mem_len: M, how many past positions each layer remembers.
        positional: None (default), "rope" or "alibi".
        dtype, rng: as everywhere.
    Attributes after forward:
        next_memories: list of n_layers arrays (B, <= M, C), to pass to the next
            segment's forward; plain arrays, so no gradient can reach them.
    """

    def __init__(self, vocab_size, d_model, n_heads, n_layers, d_ff, mem_len, positional=None,
                 dtype=np.float64, rng=None):
        rng = as_generator(rng)
        self.vocab_size, self.mem_len = vocab_size, mem_len
        self.token_embedding = Embedding(vocab_size, d_model, dtype=dtype, rng=rng, init_std=0.1)
        self.blocks = [TransformerXLBlock(d_model, n_heads, d_ff, positional=positional, dtype=dtype, rng=rng)
                       for _ in range(n_layers)]
        self.ln_f = LayerNorm(d_model, dtype=dtype)
        self.lm_head = TiedLMHead(self.token_embedding)

    def forward(self, ids, memories=None):
        """ids int (B, T), memories None or a list from the previous call -> logits (B, T, V)."""
        ids = check_token_ids(ids, self.vocab_size, repr(self))
        if ids.ndim != 2:
            raise ValueError(f"{self!r} expected token ids (B, T), got shape {ids.shape}")
        if memories is not None and len(memories) != len(self.blocks):
            raise ValueError(f"{self!r} expected {len(self.blocks)} memories (one per layer), got {len(memories)}")
        x = self.token_embedding(ids)                                            # (B, T, C)
        self.next_memories = []
        self.hidden_states = [x]                        # per-layer features: embeddings, every block's output
        for index, block in enumerate(self.blocks):
            memory = None if memories is None else memories[index]
            block.check_memory(x, memory)
            seen = x if memory is None else np.concatenate([memory, x], axis=1)
            keep = min(self.mem_len, seen.shape[1])
            self.next_memories.append(seen[:, seen.shape[1] - keep:].copy())     # (B, <= M, C)
            x = block(x, memory)
            self.hidden_states.append(x)
        return self.lm_head(self.ln_f(x))                                        # (B, T, V)

    def backward(self, dlogits):
        """dlogits (B, T, V) -> None; gradients stop at the memories."""
        dx = self.ln_f.backward(self.lm_head.backward(dlogits))
        for block in reversed(self.blocks):
            dx = block.backward(dx)
        self.token_embedding.backward(dx)
        return None

    def __repr__(self):
        return f"TransformerXL(V={self.vocab_size}, L={len(self.blocks)}, mem_len={self.mem_len})"
