"""WordPiece: BERT's sub-word tokenizer, merges chosen by likelihood instead of by count.

Kumar, *Language Modeling III: Transformers* (CSE 5525, Ohio State, 2025), BERT slides: WordPiece merges the
pair of symbols whose merge most raises the likelihood of the training data. Under a unigram model of the
symbols, merging `a` and `b` changes the log-likelihood by about count(ab) * log(count(ab) / (count(a) count(b)))
up to terms that do not depend on the pair, and the implementations in use (Schuster & Nakajima's, and the one
behind BERT's vocabulary) rank pairs by the ratio

    score(a, b) = count(ab) / (count(a) * count(b)).

Byte-pair encoding (`bpe/`) ranks by count(ab) alone, so it merges frequent symbols first; WordPiece prefers a
pair whose parts are rarely seen apart. Worked example (`tests/test_wordpiece.py`): in the words
`ab ab ab ab ab ab ac ac dc` the pair (a, ##b) is the most frequent (6) but scores 6 / (8 * 6) = 1/8, while
(d, ##c) occurs once and scores 1 / (1 * 3) = 1/3, so WordPiece merges `dc` first and BPE `ab`.

A word is split into its first character and continuation pieces marked `##` (`low` -> `l ##o ##w`); a merge
glues the continuation on (`l` + `##o` -> `lo`, `##o` + `##w` -> `##ow`). Encoding is greedy longest match first
from the left of each word; a word that cannot be spelled from the vocabulary becomes one `[UNK]`, as in BERT.

Ties in score go to the more frequent pair, then to the smaller pair in string order, so training is
deterministic. Left out on purpose: BERT's text normalisation (lower-casing, accent stripping, splitting off
punctuation); words here are whitespace-separated, so `decode(encode(text)) == " ".join(text.split())`
whenever every word can be spelled. Also left out: saving to a file, and a maximum word length.
"""

import collections

from .checks import check_decode_ids, is_token_id, short_repr

CONTINUATION = "##"
UNKNOWN = "[UNK]"


def initial_pieces(word):
    """A word's first character, then each further character marked as a continuation.

    >>> initial_pieces("low")
    ['l', '##o', '##w']
    """
    return [word[0]] + [CONTINUATION + char for char in word[1:]]


def join_pieces(left, right):
    """The token a merge of two adjacent pieces makes: `right` is always a `##` continuation.

    >>> join_pieces("l", "##o"), join_pieces("##o", "##w")
    ('lo', '##ow')
    """
    return left + right[len(CONTINUATION):]


def pair_score(pair_count, left_count, right_count):
    """WordPiece's likelihood score count(ab) / (count(a) count(b))."""
    return pair_count / (left_count * right_count)


def best_pair(pair_counts, piece_counts):
    """The pair with the highest score; ties to the higher count, then the smaller pair in string order.

    Args:
        pair_counts: {(left, right): count of the adjacent pair, weighted by word frequency}, counts > 0.
        piece_counts: {piece: count}.
    Returns:
        (left, right), or None when there is no pair left.
    """
    best, best_key = None, None
    for pair, count in pair_counts.items():
        key = (pair_score(count, piece_counts[pair[0]], piece_counts[pair[1]]), count)
        if best is None or key > best_key or (key == best_key and pair < best):
            best, best_key = pair, key
    return best


class _PairCounts:
    """Piece and adjacent-pair counts over the words, kept up to date as words are re-split by merges."""

    def __init__(self, word_counts):
        self.splits = [initial_pieces(word) for word in word_counts]
        self.frequencies = list(word_counts.values())
        self.pieces = collections.Counter()
        self.pairs = collections.Counter()
        self.words_with_pair = collections.defaultdict(set)     # pair -> indices of words that hold it
        for index in range(len(self.splits)):
            self._count_word(index, +1)

    def _count_word(self, index, sign):
        pieces, frequency = self.splits[index], self.frequencies[index]
        for piece in pieces:
            self.pieces[piece] += sign * frequency
        for pair in zip(pieces, pieces[1:]):
            self.pairs[pair] += sign * frequency
            if sign > 0:
                self.words_with_pair[pair].add(index)
            if self.pairs[pair] == 0:
                del self.pairs[pair]

    def merge(self, pair):
        """Merge every occurrence of `pair` (left to right, not overlapping) and update the counts."""
        merged = join_pieces(*pair)
        for index in sorted(self.words_with_pair.pop(pair, ())):
            pieces = self.splits[index]
            if pair not in zip(pieces, pieces[1:]):
                continue                                         # an earlier merge already changed this word
            self._count_word(index, -1)
            new_pieces, position = [], 0
            while position < len(pieces):
                if tuple(pieces[position:position + 2]) == pair:
                    new_pieces.append(merged)
                    position += 2
                else:
                    new_pieces.append(pieces[position])
                    position += 1
            self.splits[index] = new_pieces
            self._count_word(index, +1)
        return merged


def learn_wordpiece(word_counts, vocab_size, special_tokens=(UNKNOWN,)):
    """The WordPiece vocabulary of `word_counts`: special tokens, the initial pieces, then merges in order.

    Args:
        word_counts: {word: count}, words non-empty and without whitespace.
        vocab_size: the size to stop at; it must leave room for the special tokens and the initial pieces.
            Training also stops early when every word is a single token.
        special_tokens: the first ids, in order.
    Returns:
        (vocab list of str, merges list of (left, right)).
    """
    counts = _PairCounts(word_counts)
    alphabet = sorted(counts.pieces)
    vocab = list(special_tokens) + [piece for piece in alphabet if piece not in special_tokens]
    if vocab_size < len(vocab):
        raise ValueError(f"WordPieceTokenizer.train: vocab_size must be at least {len(vocab)} (the "
                         f"{len(special_tokens)} special tokens and the {len(alphabet)} initial pieces of the "
                         f"text), got {vocab_size}")
    known, merges = set(vocab), []
    while len(vocab) < vocab_size:
        pair = best_pair(counts.pairs, counts.pieces)
        if pair is None:
            break
        merged = counts.merge(pair)
        merges.append(pair)
        if merged not in known:
            known.add(merged)
            vocab.append(merged)
    return vocab, merges


def check_training_args(text, vocab_size):
    """Raise naming WordPieceTokenizer.train unless `text` is a string with a word and `vocab_size` an int."""
    if not isinstance(text, str):
        raise TypeError(f"WordPieceTokenizer.train expected text as a str, got {type(text).__name__}")
    if not text.split():
        raise ValueError("WordPieceTokenizer.train got a text with no words (empty or only whitespace)")
    if not is_token_id(vocab_size) or vocab_size < 1:
        raise ValueError(f"WordPieceTokenizer.train expected vocab_size as a positive int, "
                         f"got {short_repr(vocab_size)}")


class WordPieceTokenizer:
    """Whitespace-separated words <-> WordPiece ids (`##` marks a piece that continues a word).

    >>> tok = WordPieceTokenizer.train("ab ab ab ab ab ab ac ac dc", vocab_size=7)
    >>> tok.vocab
    ['[UNK]', '##b', '##c', 'a', 'd', 'dc', 'ab']
    >>> tok.tokenize("dc abc ax"), tok.decode(tok.encode("ab dc"))
    (['dc', 'ab', '##c', '[UNK]'], 'ab dc')
    """

    kind = "wordpiece"

    def __init__(self, vocab, merges=()):
        if not isinstance(vocab, (list, tuple)) or not all(isinstance(token, str) and token for token in vocab):
            raise ValueError(f"WordPieceTokenizer expected a list of non-empty token strings, got {short_repr(vocab)}")
        if len(set(vocab)) != len(vocab):
            repeated = sorted(token for token, count in collections.Counter(vocab).items() if count > 1)
            raise ValueError(f"WordPieceTokenizer expected distinct tokens, got {short_repr(repeated)} twice")
        if UNKNOWN not in vocab:
            raise ValueError(f"WordPieceTokenizer expected {UNKNOWN} in the vocabulary, got {short_repr(vocab)}")
        self.vocab = list(vocab)
        self.merges = list(merges)
        self.ids = {token: index for index, token in enumerate(self.vocab)}
        self._word_cache = {}

    @classmethod
    def train(cls, text, vocab_size):
        """Learn a vocabulary of `vocab_size` tokens from the whitespace-separated words of `text`."""
        check_training_args(text, vocab_size)
        vocab, merges = learn_wordpiece(dict(collections.Counter(text.split())), vocab_size)
        return cls(vocab, merges)

    @property
    def vocab_size(self):
        return len(self.vocab)

    def tokenize_word(self, word):
        """Greedy longest match first: the longest vocabulary piece at the left, then again on the rest.

        Returns the list of pieces, or [UNKNOWN] when some position has no piece at all.
        """
        if word in self._word_cache:
            return self._word_cache[word]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else CONTINUATION + word[start:end]
                if piece in self.ids:
                    break
            else:
                pieces = [UNKNOWN]
                break
            pieces.append(piece)
            start = end
        self._word_cache[word] = pieces
        return pieces

    def tokenize(self, text):
        """str -> list of token strings, word by word."""
        if not isinstance(text, str):
            raise TypeError(f"WordPieceTokenizer.encode expected a str, got {type(text).__name__}")
        return [piece for word in text.split() for piece in self.tokenize_word(word)]

    def encode(self, text):
        """str -> list of ids in 0..V-1 (an unspellable word is the id of [UNK])."""
        return [self.ids[piece] for piece in self.tokenize(text)]

    def id_to_token(self, token_id):
        """The token string of one id in 0..V-1 (a negative or too large id is an error, not a wrap-around)."""
        return self.vocab[check_decode_ids([token_id], self.vocab_size, "WordPieceTokenizer.id_to_token")[0]]

    def decode(self, ids):
        """ids -> text: a `##` piece joins the token before it, every other token starts a new word."""
        words = []
        for token_id in check_decode_ids(ids, self.vocab_size, "WordPieceTokenizer.decode"):
            token = self.vocab[token_id]
            if token.startswith(CONTINUATION) and words:
                words[-1] += token[len(CONTINUATION):]
            else:
                words.append(token[len(CONTINUATION):] if token.startswith(CONTINUATION) else token)
        return " ".join(words)

    def __repr__(self):
        return f"WordPieceTokenizer(vocab_size={self.vocab_size})"
