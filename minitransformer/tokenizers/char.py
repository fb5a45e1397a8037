"""A character tokenizer: one id per distinct character of the training text.

The smallest vocabulary that can spell the text (about 100 symbols for English
prose). Left out: unknown-character handling (an unseen character is an error),
normalisation of any kind.
"""

from .checks import TokenizerConfigError, check_decode_ids, short_repr


class CharTokenizer:
    """Characters <-> integer ids, ids in order of the sorted distinct characters.

    >>> tok = CharTokenizer.train("hello")
    >>> tok.encode("hole"), tok.decode([3, 1, 2])
    ([1, 3, 2, 0], 'ohl')
    """

    kind = "char"

    def __init__(self, chars):
        if not isinstance(chars, str):
            chars = list(chars)
            if not all(isinstance(char, str) and len(char) == 1 for char in chars):
                bad = next(char for char in chars if not (isinstance(char, str) and len(char) == 1))
                raise ValueError(f"CharTokenizer expected single characters, got {short_repr(bad)}")
        self.chars = "".join(chars)
        if len(set(self.chars)) != len(self.chars):
            seen, repeated = set(), []
            for char in self.chars:
                if char in seen and char not in repeated:
                    repeated.append(char)
                seen.add(char)
            raise ValueError(f"CharTokenizer expected distinct characters, got {short_repr(''.join(repeated))} "
                             "more than once")
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
        """Iterable of integer ids in 0..V-1 -> str; a negative, non-integer or too large id is an error.

        (Python would read chars[-1] as the last character.)
        """
        return "".join(self.chars[index] for index in check_decode_ids(ids, self.vocab_size, "CharTokenizer.decode"))

    def to_config(self):
        """A JSON-serialisable description that `tokenizer_from_config` turns back into this tokenizer."""
        return {"kind": self.kind, "chars": self.chars}

    @classmethod
    def from_config(cls, config, source="CharTokenizer.from_config: the config"):
        """Rebuild a tokenizer from `to_config()`, checking it; `source` starts every error message.

        The config is untrusted (a checkpoint's JSON): `chars` must be a non-empty string of distinct
        characters (at most 1,114,112 of them, the number of Unicode code points, so no separate bound).
        Raises TokenizerConfigError (a ValueError) naming the source and field.
        """
        if not isinstance(config, dict):
            raise TokenizerConfigError(f"{source}: expected a dict, got {type(config).__name__}")
        chars = config.get("chars")
        if not isinstance(chars, str) or not chars:
            raise TokenizerConfigError(f"{source}: field 'chars' must be a non-empty string of distinct characters, "
                                       f"got {short_repr(chars)}")
        try:
            return cls(chars)
        except ValueError as error:
            raise TokenizerConfigError(f"{source}: field 'chars': {error}") from None

    def __repr__(self):
        return f"CharTokenizer(vocab_size={self.vocab_size})"
