"""The log-probability a language model gives each token it emitted: log softmax(logits)[token].

Policy-gradient methods (PPO, `layers/ppo_losses.py`) score a sampled sequence by these numbers, one per token,
not by a mean cross-entropy: each token's log-probability is weighted by its own advantage.

    logp[b, t] = logits[b, t, y] - log sum_v exp(logits[b, t, v]),   y = tokens[b, t]

It is the negative of `CrossEntropyLoss` before its mean, kept per position. Left out: temperature.
"""

import numpy as np

from ..core.module import Module
from .embedding import check_token_ids


class TokenLogProbs(Module):
    """logits (B, T, V), tokens int (B, T) -> logp (B, T)."""

    def forward(self, logits, tokens):
        """logits (B, T, V) float, tokens int (B, T) in [0, V) -> logp (B, T) = log softmax(logits)[tokens]."""
        self._check_float(logits, "logits")
        logits, tokens = np.asarray(logits), np.asarray(tokens)
        if logits.ndim < 1 or logits.shape[:-1] != tokens.shape:
            raise ValueError(f"{self!r} expected logits (..., V) and tokens (...) with the same leading shape, "
                             f"got {logits.shape} and {tokens.shape}")
        tokens = check_token_ids(tokens, logits.shape[-1], f"{self!r} (tokens)")
        shifted = logits - logits.max(axis=-1, keepdims=True)                         # 1. (B, T, V), max 0
        log_total = np.log(np.exp(shifted).sum(axis=-1, keepdims=True))               # 2. (B, T, 1)
        self.probs = np.exp(shifted - log_total)                                      # softmax, kept for backward
        self.tokens = tokens
        return np.take_along_axis(shifted - log_total, tokens[..., None], axis=-1)[..., 0]   # 3. (B, T)

    def backward(self, dlogp):
        """The gradient at the logits from dlogp (B, T); returns (dlogits (B, T, V), None): token ids have none.

        Derivation:
            dlogits[b, t, v] = dlogp[b, t] * (onehot(y)[v] - softmax(logits[b, t])[v]).
        """
        ### BEGIN SOLUTION log_probs.backward
        onehot = np.zeros_like(self.probs)
        np.put_along_axis(onehot, self.tokens[..., None], 1.0, axis=-1)                # (B, T, V)
        return np.asarray(dlogp)[..., None] * (onehot - self.probs), None
        ### END SOLUTION

    def __repr__(self):
        return "TokenLogProbs()"
