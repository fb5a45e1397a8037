"""Corpus BLEU (Papineni et al. 2002) from the definitions of Strabel's survey note "Transformers" (2023), §1.3.

For a corpus of hypotheses, each with one or more references:

* n-gram counts: C(s, y) is how often the n-gram s occurs in y, i.e. the
  number of start positions i = 1 .. K - n + 1 with y_i .. y_{i+n-1} = s.
  (The note's Definition 1.3 writes the window as y_i .. y_{i+M} with
  i + M <= K: that window has M + 1 tokens, one too many, and the bound
  drops the last n-gram. See notebooks/errata_encdec.md.)
* clipped (modified) precision p_n: each hypothesis n-gram counts at most
  as often as it occurs in the single reference where it is most frequent;
  numerator and denominator are summed over the whole corpus before dividing.
* brevity penalty BP = exp(-(r/c - 1)^+), c the total hypothesis length and
  r the sum, over sentences, of the reference length closest to the
  hypothesis length (a tie goes to the shorter reference, as in the original
  script and sacrebleu; the note leaves ties open).
* BLEU = BP * exp((1/N) sum_{n=1..N} log p_n), the geometric mean with equal
  weights. The note's §1.3.1 heading is left empty; this is the standard form.

No smoothing: if some p_n is 0 the score is 0. Tokens are whitespace-split,
nothing is lower-cased or detokenised (sacrebleu's `tokenize="none"`).
"""

import math
from collections import Counter


def ngram_counts(tokens, n):
    """Counter of the n-grams (tuples) of a token list; empty when len(tokens) < n.

    >>> sorted(ngram_counts("a b a b".split(), 2).items())
    [(('a', 'b'), 2), (('b', 'a'), 1)]
    """
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def _closest_length(hypothesis_length, reference_lengths):
    """The reference length nearest the hypothesis length; the shorter one on a tie."""
    return min(reference_lengths, key=lambda length: (abs(length - hypothesis_length), length))


def corpus_statistics(hypotheses, references, max_n=4):
    """The sufficient statistics of corpus BLEU.

    Returns:
        (matches, totals, c, r): matches[n-1] and totals[n-1] are the clipped
        and the plain n-gram counts summed over the corpus; c and r the
        hypothesis and effective reference lengths.
    """
    if len(hypotheses) != len(references):
        raise ValueError(f"corpus_bleu expected one list of references per hypothesis, "
                         f"got {len(hypotheses)} hypotheses and {len(references)} reference lists")
    matches, totals = [0] * max_n, [0] * max_n
    c = r = 0
    for hypothesis, refs in zip(hypotheses, references):
        if isinstance(refs, str) or len(refs) == 0:
            raise ValueError(f"corpus_bleu expected references[i] to be a non-empty list of strings, got {refs!r}")
        hyp_tokens = hypothesis.split()
        ref_tokens = [ref.split() for ref in refs]
        c += len(hyp_tokens)
        r += _closest_length(len(hyp_tokens), [len(tokens) for tokens in ref_tokens])
        for n in range(1, max_n + 1):
            hyp_counts = ngram_counts(hyp_tokens, n)
            most_in_one_reference = Counter()
            for tokens in ref_tokens:
                most_in_one_reference |= ngram_counts(tokens, n)      # | keeps the per-n-gram maximum
            matches[n - 1] += sum(min(count, most_in_one_reference[gram]) for gram, count in hyp_counts.items())
            totals[n - 1] += sum(hyp_counts.values())
    return matches, totals, c, r


def brevity_penalty(c, r):
    """exp(-(r/c - 1)^+): 1 when the hypotheses are at least as long as the references, 0 when c = 0."""
    if c == 0:
        return 0.0
    return math.exp(-max(r / c - 1.0, 0.0))


def corpus_bleu(hypotheses, references, max_n=4):
    """Corpus-level BLEU in [0, 1].

    Args:
        hypotheses: list of M strings.
        references: list of M lists of strings; references[i] are the
            references of hypotheses[i] (any number, at least one).
        max_n: the longest n-gram, N.
    Returns:
        float, BP * (p_1 ... p_N)^(1/N).

    >>> corpus_bleu(["the cat sat on the mat"], [["the cat sat on the mat"]])
    1.0
    >>> round(corpus_bleu(["the cat sat on mat"], [["the cat sat on the mat", "a cat sat on the mat"]]), 4)
    0.5789
    """
    if max_n < 1:
        raise ValueError(f"corpus_bleu expected max_n >= 1, got {max_n}")
    matches, totals, c, r = corpus_statistics(hypotheses, references, max_n)
    if min(matches) == 0:
        return 0.0
    log_mean = sum(math.log(m / t) for m, t in zip(matches, totals)) / max_n
    return brevity_penalty(c, r) * math.exp(log_mean)
