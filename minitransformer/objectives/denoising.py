"""Pre-training objectives of the encoder-decoders T5 and BART, as data transforms: clean ids -> (source, target).

Kumar, *Language Modeling III: Transformers* (CSE 5525, Ohio State, 2025), "Encoder-Decoders": T5 and BART are
encoder-decoders pre-trained to repair corrupted text. The corruption is all in the data; the model and its loss
are the ordinary `Seq2SeqTransformer` and `Seq2SeqObjective` (`DenoisingTask` feeds them, `train_seq2seq` trains).

* T5's **span corruption** (Raffel et al. 2020, §3.1.4 and §3.3.4): about `density` = 15% of the tokens, in spans
  of mean length 3, are cut out; each span is replaced in the source by one sentinel token, and the target lists
  each sentinel followed by the tokens it hides, closed by one more sentinel. Source and target together spell
  the original (`fill_sentinels`). As in T5's code the number of noise tokens is round(density * n), the number of
  spans round(noise / mean_span), both split into random positive parts, and the layout rolled by a random offset.
* BART's **noising functions** (Lewis et al. 2020, §2.2), where the target is always the whole original text:
  token masking (tokens replaced by [MASK], as BERT), token deletion (tokens removed; the model must find where),
  and text infilling (spans with Poisson(3) lengths each replaced by a single [MASK]; a span of length 0 inserts
  one, so the model also learns how many tokens a [MASK] hides). BART's best model masked 30% of the tokens.

Randomness is passed in (`rng`, a seed or Generator). Left out: BART's sentence permutation and document rotation
(they need sentence and document boundaries), and T5's packing of several examples into one row.
"""

import numpy as np

from ..core.random import as_generator
from ..layers.padding import pad_sequences
from ..tasks.reverse import BOS, EOS, PAD

MASK = 3                      # the token layout of `DenoisingTask`: PAD, BOS, EOS (tasks/reverse.py), [MASK], sentinels
N_SPECIAL = 4


def check_clean_ids(ids, where, reserved=()):
    """ids as a 1-D int64 array of at least 2 tokens, none of them a reserved (mask or sentinel) id."""
    array = np.asarray(ids)
    if array.ndim != 1 or array.size < 2 or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{where} expected a 1-D sequence of at least 2 integer ids, got shape {array.shape} "
                         f"and dtype {array.dtype}")
    clash = np.intersect1d(array, np.asarray(list(reserved), dtype=np.int64))
    if clash.size:
        raise ValueError(f"{where}: the text already holds the reserved id(s) {clash.tolist()} (mask or sentinel)")
    return array.astype(np.int64)


def check_rate(rate, where, name="rate"):
    if not 0.0 < rate < 1.0:
        raise ValueError(f"{where} expected {name} in (0, 1), got {rate!r}")


def random_segmentation(total, parts, rng):
    """`total` items cut into `parts` consecutive segments of random positive length.

    The cut points are `parts - 1` distinct places among the `total - 1` gaps, every choice equally likely.
    Returns an int array (parts,) of lengths >= 1 summing to total.
    """
    cuts = np.sort(rng.choice(total - 1, size=parts - 1, replace=False)) + 1         # (parts - 1,)
    return np.diff(np.concatenate([[0], cuts, [total]]))


def t5_noise_mask(length, rng, density=0.15, mean_span=3.0):
    """T5's choice of noise tokens for a sequence of `length` tokens: bool (length,), True where corrupted.

    n_noise = round(density * length) tokens (at least 1, at most length - 1) in n_spans = round(n_noise /
    mean_span) spans (at least 1, at most the kept tokens): kept and noise tokens are each cut into n_spans random
    positive parts and interleaved, kept first, then the whole mask is rolled by a random offset (T5's
    `random_roll`), so that a span is as likely at the start as at the end. A span rolled over the end is two.
    """
    check_rate(density, "span_corruption", "density")
    if mean_span < 1:
        raise ValueError(f"span_corruption expected mean_span >= 1, got {mean_span!r}")
    n_noise = min(max(int(round(density * length)), 1), length - 1)
    n_spans = min(max(int(round(n_noise / mean_span)), 1), length - n_noise)
    keep_lengths = random_segmentation(length - n_noise, n_spans, rng)                 # (n_spans,)
    noise_lengths = random_segmentation(n_noise, n_spans, rng)                         # (n_spans,)
    segments = np.stack([keep_lengths, noise_lengths], axis=1).reshape(-1)             # keep, noise, keep, ...
    is_noise = np.tile([False, True], n_spans)                                         # (2 n_spans,)
    return np.roll(np.repeat(is_noise, segments), rng.integers(length))                # (length,)


def span_corruption(ids, sentinel_ids, rng, density=0.15, mean_span=3.0):
    """T5's objective: each noise span becomes one sentinel in the source; the target spells the spans out.

    >>> span_corruption([10, 11, 12, 13, 14, 15, 16, 17], [4, 5, 6], rng=0, density=0.25, mean_span=2)
    ([10, 11, 12, 13, 4, 16, 17], [4, 14, 15, 5])

    Args:
        ids: int (n,) clean tokens, n >= 2, none of them a sentinel.
        sentinel_ids: the sentinel tokens in order of use; at least one more than there are spans.
        rng: seed or Generator.
        density, mean_span: the fraction of tokens corrupted and the mean span length (T5: 0.15 and 3).
    Returns:
        (source list, target list).
    """
    ids = check_clean_ids(ids, "span_corruption", sentinel_ids)
    noise = t5_noise_mask(len(ids), as_generator(rng), density, mean_span)            # (n,)
    span_starts = noise & ~np.concatenate([[False], noise[:-1]])                       # (n,) first token of a span
    if len(sentinel_ids) < span_starts.sum() + 1:
        raise ValueError(f"span_corruption needs {span_starts.sum() + 1} sentinel ids for {span_starts.sum()} "
                         f"spans, got {len(sentinel_ids)}")
    source, target, span = [], [], -1
    for token, is_noise, starts in zip(ids.tolist(), noise, span_starts):
        if starts:
            span += 1
            source.append(sentinel_ids[span])
            target.append(sentinel_ids[span])
        (target if is_noise else source).append(token)
    return source, target + [sentinel_ids[span + 1]]


def fill_sentinels(source, target, sentinel_ids):
    """The inverse of `span_corruption`: each sentinel of the source replaced by what follows it in the target."""
    sentinels, spans, current = set(sentinel_ids), {}, None
    for token in target:
        if token in sentinels:
            current = spans.setdefault(token, [])
        elif current is not None:
            current.append(token)
    return [piece for token in source for piece in (spans.get(token, []) if token in sentinels else [token])]


def token_masking(ids, mask_id, rng, rate=0.15):
    """BART's token masking: round(rate * n) tokens (at least 1) chosen at random become `mask_id`.

    Returns (source list, target list = ids).
    """
    check_rate(rate, "token_masking")
    ids = check_clean_ids(ids, "token_masking", [mask_id])
    chosen = as_generator(rng).choice(len(ids), size=max(int(round(rate * len(ids))), 1), replace=False)
    source = ids.copy()
    source[chosen] = mask_id
    return source.tolist(), ids.tolist()


def token_deletion(ids, rng, rate=0.15):
    """BART's token deletion: round(rate * n) tokens (at least 1) chosen at random are removed.

    Returns (source list, target list = ids).
    """
    check_rate(rate, "token_deletion")
    ids = check_clean_ids(ids, "token_deletion")
    chosen = as_generator(rng).choice(len(ids), size=max(int(round(rate * len(ids))), 1), replace=False)
    return np.delete(ids, chosen).tolist(), ids.tolist()


def infilling_spans(length, rng, rate=0.3, poisson_mean=3.0):
    """BART's span layout for `length` tokens: (keep_lengths (k + 1,), span_lengths (k,)).

    Span lengths are drawn from Poisson(poisson_mean) until they cover n_mask = ceil(rate * length) tokens; the
    last is cut so that they cover exactly that many. The kept tokens are split around the k spans with each
    inner keep >= 1 (so two [MASK]s never touch) and the outer ones >= 0. Spans of length 0 are kept: each
    inserts a [MASK]. If k exceeds the places between kept tokens, the surplus spans join the last one.
    """
    check_rate(rate, "text_infilling")
    n_mask = min(int(np.ceil(rate * length)), length - 1)
    span_lengths = []
    while sum(span_lengths) < n_mask:
        span_lengths.append(int(rng.poisson(poisson_mean)))
    span_lengths[-1] -= sum(span_lengths) - n_mask
    n_keep = length - n_mask
    if len(span_lengths) > n_keep + 1:
        span_lengths = span_lengths[:n_keep] + [sum(span_lengths[n_keep:])]
    points = np.sort(rng.choice(n_keep + 1, size=len(span_lengths), replace=False))     # where each [MASK] goes
    keep_lengths = np.diff(np.concatenate([[0], points, [n_keep]]))
    return keep_lengths, np.array(span_lengths)


def text_infilling(ids, mask_id, rng, rate=0.3, poisson_mean=3.0):
    """BART's text infilling: every span of `infilling_spans` becomes one `mask_id`.

    >>> text_infilling([10, 11, 12, 13, 14, 15, 16, 17, 18, 19], 3, rng=0)
    ([10, 11, 3, 14, 15, 3, 16, 17, 3, 19], [10, 11, 12, 13, 14, 15, 16, 17, 18, 19])

    Returns (source list, target list = ids).
    """
    ids = check_clean_ids(ids, "text_infilling", [mask_id])
    keep_lengths, span_lengths = infilling_spans(len(ids), as_generator(rng), rate, poisson_mean)
    source, start = [], 0
    for keep, span in zip(keep_lengths, span_lengths):
        source += ids[start:start + keep].tolist() + [mask_id]
        start += keep + span
    return source + ids[start:].tolist(), ids.tolist()


class DenoisingTask:
    """Random windows of a token stream, corrupted by `transform`, as encoder-decoder batches (`train_seq2seq`).

    Token layout: 0 PAD, 1 BOS, 2 EOS, 3 [MASK], 4 .. 4 + n_sentinels - 1 the sentinels, then the text's symbols
    (the stream's id + `offset`, offset = 4 + n_sentinels).

    Args:
        stream: int (N,), N >= block_size, ids of the text in 0 .. n_symbols - 1 (e.g. CharTokenizer ids of the
            default corpus).
        n_symbols: the text's vocabulary size.
        block_size: tokens per window.
        transform: "span_corruption", "token_masking", "token_deletion" or "text_infilling".
        rng: seed or Generator (windows and corruption).
        n_sentinels: sentinel tokens reserved (T5 needs round(0.15 * block_size / 3) + 1).
    """

    TRANSFORMS = ("span_corruption", "token_masking", "token_deletion", "text_infilling")

    def __init__(self, stream, n_symbols, block_size, transform, rng=None, n_sentinels=8):
        if transform not in self.TRANSFORMS:
            raise ValueError(f"DenoisingTask expected transform in {self.TRANSFORMS}, got {transform!r}")
        self.stream, self.block_size, self.transform = np.asarray(stream), block_size, transform
        if len(self.stream) < block_size:
            raise ValueError(f"DenoisingTask needs at least block_size = {block_size} tokens, got {len(self.stream)}")
        self.sentinels = list(range(N_SPECIAL, N_SPECIAL + n_sentinels))
        self.offset = N_SPECIAL + n_sentinels
        self.vocab_size = self.offset + n_symbols
        self.rng = as_generator(rng)

    def corrupt(self, ids):
        """One clean window (already offset) -> (source, target) by the task's transform."""
        if self.transform == "span_corruption":
            return span_corruption(ids, self.sentinels, self.rng)
        if self.transform == "token_masking":
            return token_masking(ids, MASK, self.rng)
        if self.transform == "token_deletion":
            return token_deletion(ids, self.rng)
        return text_infilling(ids, MASK, self.rng)

    def train_batch(self, batch_size):
        """src (B, S), decoder input [BOS] target (B, T), target [EOS] (B, T), padded with PAD.

        The windows start uniformly at 0 .. N - block_size, so the stream's last token is in windows too.
        """
        starts = self.rng.integers(0, len(self.stream) - self.block_size + 1, size=batch_size)   # (B,) 0 .. N - block
        windows = self.stream[starts[:, None] + np.arange(self.block_size)] + self.offset          # (B, block)
        pairs = [self.corrupt(window) for window in windows]
        return (pad_sequences([source for source, _ in pairs], PAD),
                pad_sequences([[BOS] + target for _, target in pairs], PAD),
                pad_sequences([target + [EOS] for _, target in pairs], PAD))
