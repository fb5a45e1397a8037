"""`BPETokenizer`: byte-level BPE that turns any text into GPT token ids and back.

The merges are learned by the same trainer as the lecture's (`fast.py`, with the
lecture's tie rule), but on bytes instead of characters, so nothing is ever
unknown:

* **Base vocabulary.** Ids 0..255 are the 256 byte values. Text is encoded as
  UTF-8, so a character never seen in training (an emoji, a Greek letter) is
  spelled with its bytes: any string round-trips, `decode(encode(s)) == s`.
* **Pre-tokenization.** Merges never cross the boundary of a *chunk*: a run of
  non-space characters with the single space that follows it (`"speak, "`), or
  a run of whitespace (`"\\n\\n"`). That trailing space plays the role of the
  lecture's `</w>` (notes section 1.5): it marks the end of a word, and since it
  is a real character of the text, decoding restores spaces and newlines exactly.
  The chunks of a text, joined, are the text.
* **Merges.** Merge k joins two existing ids into the new id 256 + k, so
  `vocab_size == 256 + len(merges)` and ids are exactly 0..vocab_size-1.
* **Encoding** applies merges by rank: in each chunk, repeatedly merge the
  adjacent pair that was learned earliest, until no learned pair is left. This
  gives each chunk the segmentation training would have given it.
* **File.** `save` writes a small JSON file: the merges as pairs of ids, and the
  vocabulary as one string per id (byte b written as the character chr(b), so
  ASCII reads as itself). `load` rebuilds the vocabulary from the merges and
  checks it against the file. `to_config` / `from_config` are the same
  dictionary, for checkpoints.

Left out on purpose: special tokens (end of text, padding), GPT-2's split of
letters, digits and punctuation into separate chunks, and any limit on the
chunk cache used by `encode`.
"""

import itertools
import json
import re
from collections import Counter

from .fast import iter_merges_fast
from .pair_merge import merge_pair_in_sequence

NUM_BYTES = 256
CHUNK_PATTERN = re.compile(r"\S+ ?|\s+")
FILE_FORMAT = "minitransformer-bpe"
FILE_VERSION = 1


def split_into_chunks(text):
    """Cut `text` into the pieces merges stay inside: a word with its one trailing space, or a whitespace run.

    Example:
        >>> split_into_chunks("To be,  or\\n\\nnot")
        ['To ', 'be, ', ' ', 'or', '\\n\\n', 'not']
    """
    return CHUNK_PATTERN.findall(text)


def text_to_bytes(text):
    """UTF-8 bytes of `text`; lone surrogates (not valid Unicode) are kept so they round-trip too."""
    return text.encode("utf-8", "surrogatepass")


class BPETokenizer:
    """Byte-level BPE tokenizer: ids 0..255 are bytes, id 256 + k is merge k.

    Args:
        merges: list of (left id, right id); merge k may use only ids below 256 + k.
    Attributes:
        merges: list of (left id, right id), in the order learned.
        vocab: list of bytes, vocab[id] is what the id decodes to.
        vocab_size: V = 256 + len(merges).
    """

    kind = "bpe"  # the name `--tokenizer bpe` and checkpoints use

    def __init__(self, merges=()):
        self.merges = []
        self.merge_ranks = {}
        self.vocab = [bytes([byte]) for byte in range(NUM_BYTES)]
        for rank, pair in enumerate(merges):
            if len(pair) != 2 or not all(isinstance(i, int) and 0 <= i < NUM_BYTES + rank for i in pair):
                raise ValueError(f"BPETokenizer merge {rank} must join two ids below {NUM_BYTES + rank}, got {pair!r}")
            left, right = pair
            if (left, right) in self.merge_ranks:
                raise ValueError(f"BPETokenizer merge {rank} repeats merge {self.merge_ranks[left, right]}: {pair!r}")
            self.merges.append((left, right))
            self.merge_ranks[left, right] = rank
            self.vocab.append(self.vocab[left] + self.vocab[right])
        self.vocab_size = len(self.vocab)
        self.chunk_cache = {}

    def __repr__(self):
        return f"BPETokenizer(vocab_size={self.vocab_size})"

    @classmethod
    def train(cls, text, vocab_size, min_count=1):
        """Learn `vocab_size - 256` merges from `text`.

        Args:
            text: str, the training text.
            vocab_size: exact size V of the id space, at least 256.
            min_count: a merge must join a pair seen at least this many times. The
                default 1 lets a small text still fill `vocab_size` (the GPT needs
                that exact size); 2 is the lecture's "stop when no pair repeats".
        Returns:
            BPETokenizer with `vocab_size` ids.
        Raises:
            ValueError if the text has too few frequent pairs to reach `vocab_size`.
        """
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int) or vocab_size < NUM_BYTES:
            raise ValueError(f"BPETokenizer.train vocab_size must be an int >= {NUM_BYTES} (bytes), got {vocab_size!r}")
        chunk_counts = Counter(split_into_chunks(text))
        words = [list(text_to_bytes(chunk)) for chunk in chunk_counts]
        fresh_ids = itertools.count(NUM_BYTES)
        merge_steps = iter_merges_fast(words, list(chunk_counts.values()), lambda left, right: next(fresh_ids))
        merges = []
        while NUM_BYTES + len(merges) < vocab_size:
            pair, count = next(merge_steps, (None, 0))
            if count < min_count:
                raise ValueError(
                    f"BPETokenizer.train: the text allows only {len(merges)} merges of pairs seen at least "
                    f"{min_count} times, so vocab_size can be at most {NUM_BYTES + len(merges)}; got {vocab_size}"
                )
            merges.append(pair)
        return cls(merges)

    def encode_chunk(self, chunk):
        """Token ids of one chunk (see `split_into_chunks`), merging the earliest-learned pair first."""
        symbols = list(text_to_bytes(chunk))
        while len(symbols) > 1:
            rank = min(self.merge_ranks.get(pair, len(self.merges)) for pair in zip(symbols, symbols[1:]))
            if rank == len(self.merges):
                break  # no learned pair left
            symbols = merge_pair_in_sequence(symbols, self.merges[rank], NUM_BYTES + rank)
        return symbols

    def encode(self, text):
        """Token ids of `text`.

        Args:
            text: any str.
        Returns:
            list of ints in 0..V-1.
        """
        if not isinstance(text, str):
            raise TypeError(f"BPETokenizer.encode expected a str, got {type(text).__name__}")
        ids = []
        for chunk in split_into_chunks(text):
            chunk_ids = self.chunk_cache.get(chunk)
            if chunk_ids is None:
                chunk_ids = self.chunk_cache[chunk] = self.encode_chunk(chunk)
            ids.extend(chunk_ids)
        return ids

    def decode(self, ids):
        """The text of token ids; inverts `encode` exactly.

        Ids that do not come from `encode` may cut a character's bytes apart;
        those bytes decode to U+FFFD instead of raising.

        Args:
            ids: iterable of ints in 0..V-1 (Python or NumPy integers).
        Returns:
            str.
        """
        pieces = []
        for token_id in ids:
            if not 0 <= token_id < self.vocab_size:
                raise ValueError(f"BPETokenizer.decode expected ids in 0..{self.vocab_size - 1}, got {token_id}")
            pieces.append(self.vocab[token_id])
        data = b"".join(pieces)
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return data.decode("utf-8", "replace")

    # ------------------------------------------------------------------ file and config
    def to_config(self):
        """A JSON-serialisable description: what `save` writes, what checkpoints store, what `from_config` reads."""
        return {
            "kind": self.kind,
            "format": FILE_FORMAT,
            "version": FILE_VERSION,
            "chunk_pattern": CHUNK_PATTERN.pattern,
            "vocab_size": self.vocab_size,
            "merges": [list(pair) for pair in self.merges],
            "vocab": [token.decode("latin-1") for token in self.vocab],
        }

    @classmethod
    def from_config(cls, config, source="BPETokenizer.from_config: the config"):
        """Rebuild a tokenizer from `to_config()`, checking it; `source` starts every error message."""
        expected = {"format": FILE_FORMAT, "version": FILE_VERSION, "chunk_pattern": CHUNK_PATTERN.pattern}
        if not isinstance(config, dict) or any(config.get(key) != value for key, value in expected.items()):
            found = {key: config.get(key) for key in expected} if isinstance(config, dict) else type(config).__name__
            raise ValueError(f"{source} is not a tokenizer file: expected {expected}, got {found}")
        try:
            tokenizer = cls([tuple(pair) for pair in config["merges"]])
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(f"{source} has no valid merges: {error}") from None
        if config.get("vocab") != tokenizer.to_config()["vocab"] or config.get("vocab_size") != tokenizer.vocab_size:
            raise ValueError(
                f"{source} vocabulary does not match its merges "
                f"(expected {tokenizer.vocab_size} tokens, it says {config.get('vocab_size')})"
            )
        return tokenizer

    def save(self, path):
        """Write the tokenizer to `path` as JSON (merges and vocabulary)."""
        with open(path, "w", encoding="utf-8") as file:
            json.dump(self.to_config(), file, ensure_ascii=True, indent=0)

    @classmethod
    def load(cls, path):
        """Read a tokenizer written by `save`, with a clear error for a missing, truncated or foreign file."""
        try:
            with open(path, encoding="utf-8") as file:
                config = json.load(file)
        except FileNotFoundError:
            raise FileNotFoundError(f"BPETokenizer.load: no tokenizer file at {path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"BPETokenizer.load: {path} is not a complete JSON file (truncated?): {error}") from None
        return cls.from_config(config, source=f"BPETokenizer.load: {path}")
