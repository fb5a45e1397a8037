"""Perplexity: the exponential of the mean negative log-likelihood per predicted token.

    perplexity = exp( -(1/N) sum_n log p(y_n | y_<n) ) = exp(mean cross-entropy in nats)

(Kumar, "Language Modeling III: Transformers", CSE 5525, Ohio State, 2025, slide "Impact of Transformers",
which ranks language models by it.) It reads as the number of equally likely choices the model is left with
at each token, the geometric mean of 1/p(y_n | y_<n): a model that spreads its probability evenly over
a vocabulary of V tokens has perplexity exactly V, and a model that is always certain and right has 1.

A perplexity is per *token*, so it depends on what a token is. A character model predicts one character at a
time: its perplexity counts choices per character, a few at most for a trained model. A BPE
model predicts a whole sub-word piece, several characters at once, so the same text gives it fewer, harder
predictions and a much larger perplexity (tens to hundreds). Two models compare by perplexity only with the same
tokenizer; across tokenizers compare the total log-likelihood of the text (or bits per character) instead.

Left out: bits per character / per byte (divide the summed NLL by the number of characters and by log 2).
"""

import math


def perplexity(mean_nll):
    """exp(mean_nll): the perplexity of a mean negative log-likelihood per predicted token, in nats.

    Args:
        mean_nll: the mean cross-entropy per predicted token in nats (natural log), e.g. what
            CrossEntropyLoss returns; a float or a 0-d array, finite and >= 0.
    Returns:
        a Python float >= 1 (math.inf if exp overflows, i.e. mean_nll > ~709).
    Raises:
        ValueError if mean_nll is negative or NaN (no mean negative log-likelihood is).
    """
    value = float(mean_nll)
    if math.isnan(value) or value < 0:
        raise ValueError(f"perplexity: mean_nll must be a mean negative log-likelihood >= 0 (nats per token), "
                         f"got {mean_nll!r}")
    return math.exp(value) if value < 709.0 else math.inf
