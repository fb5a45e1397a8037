"""A character tokenizer: one id per distinct character of the training text.

The smallest vocabulary that can spell the text (about 100 symbols for English
prose). Left out: unknown-character handling (an unseen character is an error),
normalisation of any kind.
"""


class CharTokenizer:
    """Characters <-> integer ids, ids in order of the sorted distinct characters.

    >>> tok = CharTokenizer.train("hello")
    >>> tok.encode("hole"), tok.decode([3, 1, 2])
    ([1, 3, 2, 0], 'ohl')
    """

    kind = "char"

    def __init__(self, chars):
        self.chars = "".join(chars)
        if len(set(self.chars)) != len(self.chars):
            raise ValueError("CharTokenizer expected distinct characters")
        self.ids = {char: index for index, char in enumerate(self.chars)}

    @classmethod
    def train(cls, text, vocab_size=None):
        """Vocabulary of all distinct characters of `text` (`vocab_size` is ignored; it is what it is)."""
        if not text:
            raise ValueError("CharTokenizer.train got an empty text")
        return cls(sorted(set(text)))

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, text):
        """str -> list of ids; a character never seen in training is an error naming it."""
        try:
            return [self.ids[char] for char in text]
        except KeyError as error:
            raise ValueError(f"CharTokenizer: character {error.args[0]!r} is not in the vocabulary "
                             f"of {self.vocab_size} characters") from None

    def decode(self, ids):
        """Iterable of ids -> str."""
        return "".join(self.chars[int(index)] for index in ids)

    def to_config(self):
        """A JSON-serialisable description that `tokenizer_from_config` turns back into this tokenizer."""
        return {"kind": self.kind, "chars": self.chars}

    def __repr__(self):
        return f"CharTokenizer(vocab_size={self.vocab_size})"
