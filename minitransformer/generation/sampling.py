"""Generating text from a trained language model: greedy, temperature and top-k sampling.

Each new token comes from the model's distribution over the next token given
everything so far, p = softmax(logits / temperature):

* greedy (temperature 0): always the most likely token; deterministic, and
  prone to loops.
* temperature tau: tau < 1 sharpens the distribution towards the likely
  tokens, tau > 1 flattens it; tau = 1 samples the model as trained.
* top-k: only the k most likely tokens keep their probability (renormalised),
  which removes the long tail of unlikely tokens that spoil a sample.

A key/value cache makes each step cost one token's worth of projections
instead of the whole text's: `generate` creates a `KVCache` (kv_cache.py, the
protocol the encoder-decoder's decoding.py uses too) and hands it to
`GPT.forward(ids, cache=...)`. The model only knows `max_len` positions, so a
longer prompt is cropped to its last `max_len` tokens, and once the text
outgrows the window each step recomputes the last `max_len` tokens without the
cache (the positions of a learned table shift, so cached keys no longer fit):
exactly what a full recomputation would do.

Left out: nucleus (top-p) sampling, repetition penalties, stop tokens, and beam
search for GPT (decoding.py has it for the encoder-decoder).
"""

import numpy as np

from ..core.random import as_generator
from .kv_cache import KVCache


def next_token(logits, temperature=1.0, top_k=None, rng=None):
    """Choose one token per row from next-token logits.

    Args:
        logits: (B, V).
        temperature: 0 for greedy, else > 0.
        top_k: keep only the k largest logits (None: all).
        rng: seed or Generator (unused when greedy).
    Returns:
        int array (B,).
    """
    logits = np.asarray(logits, dtype=np.float64)
    if logits.ndim != 2:
        raise ValueError(f"next_token expected logits (B, V), got shape {logits.shape}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if temperature == 0:
        return logits.argmax(axis=-1)
    logits = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        k = min(top_k, logits.shape[-1])
        kth_largest = np.partition(logits, -k, axis=-1)[:, [-k]]                 # (B, 1)
        logits = np.where(logits < kth_largest, -np.inf, logits)
    probs = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)                                  # (B, V)
    uniform = as_generator(rng).random((probs.shape[0], 1))                     # (B, 1)
    choice = (probs.cumsum(axis=-1) < uniform).sum(axis=-1)                     # inverse CDF
    return np.minimum(choice, probs.shape[-1] - 1)


def generate(model, prompt_ids, max_new_tokens, temperature=1.0, top_k=None, rng=None, use_cache=True):
    """Extend each row of `prompt_ids` by `max_new_tokens` tokens.

    Args:
        model: a GPT (anything with `max_len`, `blocks` and `forward(ids, cache=...)`).
        prompt_ids: int (B, T0) or (T0,), T0 >= 1; only the last max_len tokens are used.
        max_new_tokens: how many tokens to add.
        temperature, top_k, rng: see `next_token`.
        use_cache: decode incrementally with a key/value cache (same logits, faster).
    Returns:
        int (B, T0' + max_new_tokens): the cropped prompt followed by the new tokens
        ((T0' + n,) for a 1-D prompt).
    """
    ids = np.asarray(prompt_ids)
    single = ids.ndim == 1
    ids = np.atleast_2d(ids)
    if ids.shape[1] == 0:
        raise ValueError("generate needs a prompt of at least one token")
    ids = ids[:, -model.max_len:]                               # crop a long prompt to the window
    rng = as_generator(rng)
    with model.evaluating():                                    # dropout off; the mode is restored after
        cache = KVCache(len(model.blocks)) if use_cache else None
        logits = model.forward(ids, cache=cache)[:, -1]         # (B, V)
        for index in range(max_new_tokens):
            token = next_token(logits, temperature, top_k, rng)[:, None]       # (B, 1)
            ids = np.concatenate([ids, token], axis=1)
            if index == max_new_tokens - 1:
                break                                           # no logits needed after the last token
            if cache is not None and cache.length < model.max_len:
                logits = model.forward(token, cache=cache)[:, -1]
            else:                                               # window full: recompute the last max_len
                logits = model.forward(ids[:, -model.max_len:])[:, -1]
    return ids[0] if single else ids


def sample_text(model, tokenizer, prompt, max_new_tokens, temperature=1.0, top_k=None, rng=None):
    """Prompt string -> prompt + continuation string (a long prompt is cropped to the window)."""
    prompt_ids = tokenizer.encode(prompt)
    if not prompt_ids:
        raise ValueError("sample_text needs a non-empty prompt")
    out = generate(model, np.array(prompt_ids), max_new_tokens, temperature, top_k, rng)
    return tokenizer.decode(out.tolist())
