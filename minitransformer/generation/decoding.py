"""Generating target sequences from an encoder-decoder: batched greedy decoding and beam search.

Both switch the model to evaluation mode while they run (dropout off), run
the encoder once, then the decoder one position at a time through a key/value
cache: `KVCache(n_layers, cross_attention=True)` of kv_cache.py, the protocol
GPT's sampling uses too, with one more cache per block for cross-attention,
which projects the encoder's output into keys and values at the first step and
reuses them after. Each step feeds only the newest token, so a sentence of T
tokens costs T decoder steps of one position each instead of prefixes of
length 1, 2, ..., T. `use_cache=False` recomputes the whole prefix (encoder
included) at every step; it exists so the tests can prove both give the same tokens.

Greedy decoding takes the most likely token at each step. Beam search keeps,
for each source sentence, the `beam_size` prefixes of highest total
log-probability; a prefix that has produced EOS is finished and its score no
longer changes. The loop over steps is the one loop that cannot be avoided:
step t needs the token chosen at step t-1. Batch rows and beams are never looped over.

Model interface: `blocks` (one cache per block), `encode(src) -> (memory, memory_mask)`,
`decode(tgt_ids (B, T), memory, memory_mask, cache=None) -> logits (B, T, V)`,
and `forward(src, tgt) -> logits (B, T, V)` for the uncached path.
Left out: sampling from an encoder-decoder, n-best lists, early stopping of beam search before max_len
once no unfinished beam can win.
"""

import numbers

import numpy as np

from ..core.checks import is_finite_number
from .kv_cache import KVCache


def _is_integer(value):
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _check_decoding_options(where, model, bos_id, eos_id, pad_id, max_len, beam_size=1, length_penalty=0.0):
    """Raise naming `where` unless the options make sense, before the model runs.

    Token ids must be integers in [0, V) of the target vocabulary (NumPy would wrap a negative one
    to the end of the table); max_len and beam_size integers >= 1; eos_id must differ from pad_id
    (pad is never chosen before EOS, so the rows would never finish); length_penalty finite.
    """
    vocab_size = getattr(model, "tgt_vocab_size", None)
    for name, value in (("bos_id", bos_id), ("eos_id", eos_id), ("pad_id", pad_id)):
        if not _is_integer(value):
            raise TypeError(f"{where} expected {name} an integer token id, got {value!r}")
        if value < 0 or (vocab_size is not None and value >= vocab_size):
            raise IndexError(f"{where} expected {name} in [0, {vocab_size}), got {value}")
    if eos_id == pad_id:
        raise ValueError(f"{where} expected eos_id different from pad_id (pad is never chosen before EOS), "
                         f"got both {eos_id}")
    for name, value in (("max_len", max_len), ("beam_size", beam_size)):
        if not _is_integer(value) or value < 1:
            raise ValueError(f"{where} expected {name} an integer >= 1, got {value!r}")
    if not is_finite_number(length_penalty):
        raise ValueError(f"{where} expected length_penalty a finite number, got {length_penalty!r}")


def _log_softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


class _Recompute:
    """Re-runs the whole model on the whole prefix at every step: the reference the cache must equal (tests)."""

    def __init__(self, model, src_ids):
        self.model, self.src_ids = model, np.asarray(src_ids)
        self.prefix = np.empty((len(self.src_ids), 0), dtype=np.int64)

    def step(self, tokens):
        """tokens int (B,) -> next-token logits (B, V)."""
        self.prefix = np.concatenate([self.prefix, np.asarray(tokens)[:, None]], axis=1)    # (B, t)
        return self.model.forward(self.src_ids, self.prefix)[:, -1]                       # (B, V)

    def reorder(self, rows):
        """Keep batch rows `rows` (int (B',)), in that order."""
        self.src_ids, self.prefix = self.src_ids[rows], self.prefix[rows]


class _Cached:
    """Encodes once, then feeds one token a step through a `KVCache` with cross-attention."""

    def __init__(self, model, src_ids):
        self.model = model
        self.memory, self.memory_mask = model.encode(src_ids)             # (B, S, C), (B, 1, 1, S) or None
        self.cache = KVCache(len(model.blocks), cross_attention=True)

    def step(self, tokens):
        """tokens int (B,) -> next-token logits (B, V)."""
        new_ids = np.asarray(tokens)[:, None]                             # (B, 1)
        return self.model.decode(new_ids, self.memory, self.memory_mask, cache=self.cache)[:, -1]    # (B, V)

    def reorder(self, rows):
        """Keep batch rows `rows` (int (B',)) of the cache and of the memory the cross-attention reads."""
        self.cache.reorder(rows)
        self.memory = self.memory[rows]                                   # (B', S, C)
        if self.memory_mask is not None:
            self.memory_mask = self.memory_mask[rows]                     # (B', 1, 1, S)


def _decoder_state(model, src_ids, use_cache):
    return _Cached(model, src_ids) if use_cache else _Recompute(model, src_ids)


def greedy_decode(model, src_ids, bos_id, eos_id, max_len, pad_id=0, use_cache=True):
    """Most likely token at every step, for a whole batch at once.

    Args:
        model: a Seq2SeqTransformer (switched to eval mode while decoding, then back).
        src_ids: int (B, S) padded sources.
        bos_id, eos_id: start and end tokens of the target side.
        max_len: the most tokens to generate (EOS included), an integer >= 1.
        pad_id: written after a row's EOS, never chosen before it (the uncached path
            would hide a pad token from attention, the cached one would not).
        use_cache: reuse keys/values (True) or recompute the prefix (False).
    Returns:
        int (B, <= max_len): generated tokens without BOS; each row ends at its EOS, then pad_id.
    Raises:
        IndexError for a bos/eos/pad id outside [0, V); ValueError for max_len < 1 or eos_id == pad_id.
    """
    _check_decoding_options("greedy_decode", model, bos_id, eos_id, pad_id, max_len)
    src_ids = np.asarray(src_ids)
    B = len(src_ids)
    with model.evaluating():
        state = _decoder_state(model, src_ids, use_cache)
        tokens = np.full(B, bos_id, dtype=np.int64)
        finished = np.zeros(B, dtype=bool)
        outputs = []
        for _ in range(max_len):
            logits = state.step(tokens).copy()                        # (B, V)
            logits[:, pad_id] = -np.inf                               # pad only ever follows EOS (as in beam_search)
            tokens = np.where(finished, pad_id, logits.argmax(axis=-1))   # (B,)
            outputs.append(tokens)
            finished |= tokens == eos_id
            if finished.all():
                break
    return np.stack(outputs, axis=1) if outputs else np.empty((B, 0), dtype=np.int64)


def beam_search(model, src_ids, bos_id, eos_id, max_len, beam_size=4, pad_id=0, length_penalty=0.0, use_cache=True):
    """Beam search over a batch: B sources x K beams run as one batch of B*K rows.

    Args:
        as greedy_decode, plus
        beam_size: K, an integer >= 1.
        length_penalty: alpha, finite; finished hypotheses are ranked by logp / len^alpha
            (0 ranks by total log-probability).
    Returns:
        (tokens int (B, <= max_len), scores float (B,)): the best hypothesis of each source
        (ending at EOS, then pad_id) and its total log-probability.
    """
    _check_decoding_options("beam_search", model, bos_id, eos_id, pad_id, max_len, beam_size, length_penalty)
    src_ids = np.asarray(src_ids)
    B, K = len(src_ids), beam_size
    with model.evaluating():
        state = _decoder_state(model, np.repeat(src_ids, K, axis=0), use_cache)    # rows b*K + k
        tokens = np.full(B * K, bos_id, dtype=np.int64)
        scores = np.zeros((B, K))
        scores[:, 1:] = -np.inf                    # all beams start identical: keep one so the top K are distinct
        finished = np.zeros((B, K), dtype=bool)
        lengths = np.zeros((B, K))
        history = np.empty((B, K, 0), dtype=np.int64)
        for _ in range(max_len):
            logp = _log_softmax(state.step(tokens)).reshape(B, K, -1)                   # (B, K, V)
            V = logp.shape[-1]
            # a finished beam may only continue with pad, at no cost, so it competes with its final score;
            # an unfinished one may not pad
            logp = np.where(finished[..., None], -np.inf, logp)
            logp[..., pad_id] = np.where(finished, 0.0, -np.inf)
            candidates = (scores[..., None] + logp).reshape(B, K * V)                   # (B, K*V)
            best = np.argsort(-candidates, axis=1, kind="stable")[:, :K]                # (B, K)
            beam, tokens2d = best // V, best % V
            scores = np.take_along_axis(candidates, best, axis=1)
            history = np.concatenate([np.take_along_axis(history, beam[..., None], axis=1), tokens2d[..., None]],
                                     axis=2)
            was_finished = np.take_along_axis(finished, beam, axis=1)
            lengths = np.take_along_axis(lengths, beam, axis=1) + ~was_finished
            finished = was_finished | (tokens2d == eos_id)
            state.reorder((np.arange(B)[:, None] * K + beam).reshape(-1))
            tokens = tokens2d.reshape(-1)
            if finished.all():
                break
    ranking = scores / np.maximum(lengths, 1) ** length_penalty
    choice = ranking.argmax(axis=1)                                                 # (B,)
    return history[np.arange(B), choice], scores[np.arange(B), choice]
