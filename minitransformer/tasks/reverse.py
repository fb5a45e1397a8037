"""String reversal, generated, so that an encoder-decoder trains without data files (the `seq2seq` command).

`ReverseTask`: a string of n symbols (n in [min_len, max_len]) maps to the
same symbols in reverse order, e.g. "3 1 4" -> "4 1 3". The held-out test
set is drawn first and every training example that happens to equal a test
source is redrawn, so accuracy on it measures generalisation, not recall.
`exact_match` is its metric.

Token layout: 0 = PAD, 1 = BOS, 2 = EOS, symbols from 3 (T5's and BART's denoising shares it).
"""


from ..core.random import as_generator
from ..layers.padding import pad_sequences

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ("<pad>", "<bos>", "<eos>")


class ReverseTask:
    """Reverse strings of symbols.

    Args:
        n_symbols: alphabet size (symbols are token ids 3 .. 3 + n_symbols - 1).
        min_len, max_len: range of string lengths.
        n_test: size of the held-out test set.
        rng: seed or Generator (the test set is drawn from it at construction).
    """

    def __init__(self, n_symbols=10, min_len=3, max_len=8, n_test=1000, rng=None):
        self.n_symbols, self.min_len, self.max_len = n_symbols, min_len, max_len
        self.vocab_size = len(SPECIALS) + n_symbols
        self.rng = as_generator(rng)
        self.test_sources = self._draw(n_test, exclude=set())
        self._test_set = {tuple(s) for s in self.test_sources}

    def _draw(self, n, exclude):
        sources = []
        while len(sources) < n:
            length = int(self.rng.integers(self.min_len, self.max_len + 1))
            source = tuple(int(t) for t in self.rng.integers(3, 3 + self.n_symbols, size=length))
            if source not in exclude:
                sources.append(source)
        return sources

    @staticmethod
    def target_of(source):
        return list(reversed(source))

    def batch(self, sources):
        """Arrays for teacher forcing.

        Returns:
            src (B, S), decoder input [BOS] y (B, T), targets y [EOS] (B, T), all padded with PAD.
        """
        targets = [self.target_of(s) for s in sources]
        src = pad_sequences(sources, PAD)
        tgt_in = pad_sequences([[BOS] + t for t in targets], PAD)
        tgt_out = pad_sequences([t + [EOS] for t in targets], PAD)
        return src, tgt_in, tgt_out

    def train_batch(self, batch_size):
        """A fresh random batch, never containing a test source."""
        return self.batch(self._draw(batch_size, exclude=self._test_set))

    def decode(self, ids):
        """Token ids -> a readable string of the symbols, up to the first EOS."""
        symbols = []
        for token in ids:
            if token == EOS:
                break
            symbols.append(str(int(token) - 3) if token >= 3 else SPECIALS[int(token)])
        return " ".join(symbols)


def exact_match(predicted, sources, target_of):
    """Fraction of rows whose predicted tokens up to EOS equal the target exactly (with the EOS)."""
    hits = 0
    for row, source in zip(predicted, sources):
        expected = list(target_of(source)) + [EOS]
        hits += list(row[:len(expected)]) == expected
    return hits / len(sources)
