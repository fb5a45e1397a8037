"""Generating text from a trained language model: greedy, temperature and top-k sampling.

Each new token comes from the model's distribution over the next token given
everything so far, p = softmax(logits / temperature):

* greedy (temperature 0): always the most likely token; deterministic, and
  prone to loops.
* temperature tau: tau < 1 sharpens the distribution towards the likely
  tokens, tau > 1 flattens it; tau = 1 samples the model as trained.
* top-k: only the k most likely tokens keep their probability (renormalised),
  which removes the long tail of unlikely tokens that spoil a sample.

Untrusted numbers are checked rather than passed through: a NaN logit, or a
row whose logits are all -inf, is an error naming the position; a +inf logit is
a certainty (that token, or one of several +inf tokens, uniformly); temperature
must be finite and >= 0, top_k an integer >= 1, max_new_tokens an integer >= 0,
and prompt ids integers in [0, V). Otherwise NumPy would quietly return token 0.

A key/value cache makes each step cost one token's worth of projections
instead of the whole text's: `generate` creates a `KVCache` (kv_cache.py, the
protocol the encoder-decoder's decoding.py uses too) and hands it to
`GPT.forward(ids, cache=...)`. The model only knows `max_len` positions, so a
longer prompt is cropped to its last `max_len` tokens, and once the text
outgrows the window each step recomputes the last `max_len` tokens without the
cache (the positions of a learned table shift, so cached keys no longer fit):
exactly what a full recomputation would do. The window stays max_len even when the
model's positions have no limit (sinusoidal, rotary, ALiBi): generation keeps to the
context length the model was trained on; call `model.forward` for a longer input.

Left out: nucleus (top-p) sampling, repetition penalties, stop tokens, and beam
search for GPT (decoding.py has it for the encoder-decoder).
"""

import math
import numbers

import numpy as np

from ..core.random import as_generator
from ..layers.embedding import check_token_ids
from .kv_cache import KVCache


def check_sampling_options(temperature, top_k, where="next_token"):
    """Raise naming `where` unless temperature is a finite real >= 0 and top_k is None or an integer >= 1.

    A NaN temperature would turn every probability into NaN and the inverse-CDF draw into token 0.
    """
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not math.isfinite(temperature) \
            or temperature < 0:
        raise ValueError(f"{where} expected temperature a finite number >= 0 (0 = greedy), got {temperature!r}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1):
        raise ValueError(f"{where} expected top_k None or an integer >= 1, got {top_k!r}")


def _certain_and_possible(logits):
    """Logits (B, V) with each row's +inf entries made the only possible tokens; errors for NaN or all -inf.

    A +inf logit is a certainty: its probability is 1 (split evenly when a row has several), and
    every finite logit of that row gets probability 0. Softmax would instead compute inf - inf = NaN.
    """
    nan = np.isnan(logits)
    if nan.any():
        row, column = (int(i) for i in np.argwhere(nan)[0])
        raise ValueError(f"next_token expected logits without NaN, got NaN at position [{row}, {column}] "
                         f"(row {row}, token {column})")
    impossible = np.isneginf(logits).all(axis=-1)
    if impossible.any():
        row = int(np.flatnonzero(impossible)[0])
        raise ValueError(f"next_token expected at least one logit above -inf in each row, got all -inf in row {row} "
                         "(no token is possible)")
    certain = np.isposinf(logits)
    rows = certain.any(axis=-1)
    if rows.any():
        logits = logits.copy()
        logits[rows] = np.where(certain[rows], 0.0, -np.inf)       # uniform over the row's +inf tokens
    return logits


def next_token(logits, temperature=1.0, top_k=None, rng=None):
    """Choose one token per row from next-token logits.

    Args:
        logits: real (B, V), V >= 1. -inf marks an impossible token, +inf a certain one (several
            +inf in a row: one of them, uniformly; greedy takes the first). NaN, or a row with
            every entry -inf, is an error naming the position.
        temperature: finite, >= 0; 0 for greedy.
        top_k: keep only the k largest logits (None: all); an integer >= 1.
        rng: seed or Generator (unused when greedy).
    Returns:
        int array (B,).
    """
    check_sampling_options(temperature, top_k)
    logits = np.asarray(logits)
    if not (np.issubdtype(logits.dtype, np.floating) or np.issubdtype(logits.dtype, np.integer)):
        raise TypeError(f"next_token expected real logits (float or integer), got dtype {logits.dtype}")
    logits = logits.astype(np.float64, copy=False)
    if logits.ndim != 2:
        raise ValueError(f"next_token expected logits (B, V), got shape {logits.shape}")
    if logits.shape[-1] == 0:
        raise ValueError(f"next_token expected logits (B, V) with V >= 1 tokens, got shape {logits.shape}")
    logits = _certain_and_possible(logits)
    if temperature == 0:
        return logits.argmax(axis=-1)
    # shift by the row maximum *before* dividing: a tiny temperature then sends the others to -inf, never to NaN
    with np.errstate(over="ignore"):                                            # overflow to -inf is intended
        logits = (logits - logits.max(axis=-1, keepdims=True)) / temperature   # (B, V), max 0
    if top_k is not None:
        k = min(int(top_k), logits.shape[-1])
        kth_largest = np.partition(logits, -k, axis=-1)[:, [-k]]                 # (B, 1)
        logits = np.where(logits < kth_largest, -np.inf, logits)
    probs = np.exp(logits)
    probs /= probs.sum(axis=-1, keepdims=True)                                  # (B, V), each row sums to 1
    uniform = as_generator(rng).random((probs.shape[0], 1))                     # (B, 1)
    choice = (probs.cumsum(axis=-1) < uniform).sum(axis=-1)                     # inverse CDF
    # the cumulative sum may end a little below 1 (rounding), and a draw above it would count past the
    # last token, or land on a zero-probability one at the end of the row: take the last possible token
    last_possible = probs.shape[-1] - 1 - np.argmax(probs[:, ::-1] > 0, axis=-1)   # (B,)
    return np.minimum(choice, last_possible)


def generate(model, prompt_ids, max_new_tokens, temperature=1.0, top_k=None, rng=None, use_cache=True):
    """Extend each row of `prompt_ids` by `max_new_tokens` tokens.

    Args:
        model: a GPT (anything with `max_len`, `vocab_size`, `blocks` and `forward(ids, cache=...)`).
        prompt_ids: int (B, T0) or (T0,), B >= 1, T0 >= 1, ids in [0, vocab_size); only the last
            max_len tokens are used.
        max_new_tokens: how many tokens to add, an integer >= 0 (0 returns the cropped prompt).
        temperature, top_k, rng: see `next_token`; checked before the model runs.
        use_cache: decode incrementally with a key/value cache (same logits, faster).
    Returns:
        int (B, T0' + max_new_tokens): the cropped prompt followed by the new tokens
        ((T0' + n,) for a 1-D prompt).
    """
    check_sampling_options(temperature, top_k, "generate")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, numbers.Integral) or max_new_tokens < 0:
        raise ValueError(f"generate expected max_new_tokens an integer >= 0, got {max_new_tokens!r}")
    ids = np.asarray(prompt_ids)
    if ids.ndim not in (1, 2) or ids.size == 0:
        raise ValueError(f"generate expected prompt_ids (T0,) or (B, T0) with B >= 1 and T0 >= 1, got shape {ids.shape}")
    ids = check_token_ids(ids, model.vocab_size, "generate (prompt_ids)")
    single = ids.ndim == 1
    ids = np.atleast_2d(ids)
    ids = ids[:, -model.max_len:]                               # crop a long prompt to the window
    if max_new_tokens == 0:
        return ids[0] if single else ids
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
    """Prompt string -> prompt + continuation string (a long prompt is cropped to the window).

    The options are checked as `generate` checks them, before the prompt is encoded.
    """
    if not isinstance(prompt, str):
        raise TypeError(f"sample_text expected a str prompt, got {type(prompt).__name__}")
    check_sampling_options(temperature, top_k, "sample_text")
    prompt_ids = tokenizer.encode(prompt)
    if not prompt_ids:
        raise ValueError("sample_text needs a non-empty prompt")
    out = generate(model, np.array(prompt_ids), max_new_tokens, temperature, top_k, rng)
    return tokenizer.decode(out.tolist())
