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
* **Untrusted files.** A file (or a checkpoint's JSON) is checked before any merged
  token is built: types, ids in range, at most `MAX_VOCAB_SIZE` ids and tokens of
  at most `MAX_TOKEN_BYTES` bytes, and every token's length as the merges give it
  (a sum of two integers, computed without building the token) equal to the
  length of its string in the file. A "merge bomb", 48 merges each joining the
  previous token with itself, would otherwise build a token of 2^48 bytes from a
  712-byte file; it is refused at the first token longer than the bound. Errors
  are `TokenizerConfigError` (a ValueError) naming the file and the field.

Left out on purpose: special tokens (end of text, padding), GPT-2's split of
letters, digits and punctuation into separate chunks, and any limit on the
chunk cache used by `encode`.
"""

import itertools
import json
import os
import re
import tempfile
from collections import Counter

from ..checks import TokenizerConfigError, check_decode_ids, is_token_id, short_repr
from .fast import iter_merges_fast
from .pair_merge import merge_pair_in_sequence

NUM_BYTES = 256
CHUNK_PATTERN = re.compile(r"\S+ ?|\s+")
FILE_FORMAT = "minitransformer-bpe"
FILE_VERSION = 1
MAX_VOCAB_SIZE = 1 << 18       # 262,144 ids: five times GPT-2's 50,257 (Gemma's 256,000 fits too)
MAX_TOKEN_BYTES = 1024         # eight times GPT-2's longest token (128 bytes)


def check_merges(merges, source):
    """Check merges before any token is built; return them as (left, right) int pairs and every token's length.

    Merge k must join two ids below 256 + k, no pair may repeat, there may be at most
    MAX_VOCAB_SIZE - 256 merges, and no token may be longer than MAX_TOKEN_BYTES. The
    lengths are sums of integers (length[256 + k] = length[left] + length[right]), so a
    merge bomb costs a few integers, not 2^48 bytes.

    Args:
        merges: a list (or tuple) of pairs of ids, as read from JSON or learned.
        source: starts every error message (the file, or the class).
    Returns:
        (list of (int, int), list of int token lengths in bytes, one per id).
    Raises:
        TokenizerConfigError (a ValueError) naming the merge.
    """
    if not isinstance(merges, (list, tuple)):
        raise TokenizerConfigError(f"{source}: field 'merges' must be a list of [left, right] id pairs, "
                                   f"got {type(merges).__name__}")
    if NUM_BYTES + len(merges) > MAX_VOCAB_SIZE:
        raise TokenizerConfigError(f"{source}: field 'merges' has {len(merges):,} merges; at most "
                                   f"{MAX_VOCAB_SIZE - NUM_BYTES:,} are allowed (vocab_size <= {MAX_VOCAB_SIZE:,})")
    lengths = [1] * NUM_BYTES
    pairs, ranks = [], {}
    for rank, pair in enumerate(merges):
        limit = NUM_BYTES + rank
        if not (isinstance(pair, (list, tuple)) and len(pair) == 2
                and all((type(i) is int or is_token_id(i)) and 0 <= i < limit for i in pair)):   # fast path for int
            raise TokenizerConfigError(f"{source}: field 'merges', merge {rank} must join two ids below {limit}, "
                                       f"got {short_repr(pair)}")
        left, right = int(pair[0]), int(pair[1])
        if (left, right) in ranks:
            raise TokenizerConfigError(f"{source}: field 'merges', merge {rank} repeats merge {ranks[left, right]}: "
                                       f"{[left, right]}")
        length = lengths[left] + lengths[right]
        if length > MAX_TOKEN_BYTES:
            raise TokenizerConfigError(f"{source}: field 'merges', merge {rank} would build a token of {length:,} "
                                       f"bytes; at most {MAX_TOKEN_BYTES} are allowed")
        ranks[left, right] = rank
        pairs.append((left, right))
        lengths.append(length)
    return pairs, lengths


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
        merges: list of (left id, right id); merge k may use only ids below 256 + k
            (checked by `check_merges`, with the bounds on size and token length).
    Attributes:
        merges: list of (left id, right id), in the order learned.
        vocab: list of bytes, vocab[id] is what the id decodes to.
        vocab_size: V = 256 + len(merges).
    """

    kind = "bpe"  # the name `--tokenizer bpe` and checkpoints use

    def __init__(self, merges=()):
        self._build(check_merges(list(merges), "BPETokenizer")[0])   # all checked before any token is built

    def _build(self, merges):
        """Set the merges (int pairs that passed `check_merges`) and build the vocabulary from them."""
        self.merges = merges
        self.merge_ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.vocab = [bytes([byte]) for byte in range(NUM_BYTES)]
        for left, right in merges:
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
            ValueError if the text has too few frequent pairs to reach `vocab_size`, or if a merge
            would build a token longer than MAX_TOKEN_BYTES.
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
        try:
            return cls(merges)
        except TokenizerConfigError as error:       # a token longer than MAX_TOKEN_BYTES (a very long repeated run)
            raise ValueError(f"BPETokenizer.train: {str(error).split(', ', 1)[-1]}; the text repeats a run of "
                             f"over {MAX_TOKEN_BYTES} bytes without a space: use a smaller vocab_size") from None

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
        Raises:
            TypeError for an id that is not an integer, ValueError for one outside 0..V-1.
        """
        data = b"".join(self.vocab[token_id] for token_id in check_decode_ids(ids, self.vocab_size,
                                                                               "BPETokenizer.decode"))
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
        """Rebuild a tokenizer from `to_config()`, checking it first; `source` starts every error message.

        The config is untrusted (a file, a checkpoint's JSON). In order, each check cheap and none
        building a merged token: the format fields; the merges (`check_merges`: types, ids in range,
        no repeats, the bounds MAX_VOCAB_SIZE and MAX_TOKEN_BYTES); `vocab_size`; `vocab`, a list of
        one string per id whose lengths are the merges' token lengths. Only then are the tokens built
        (about as many bytes as the file holds) and compared with `vocab`.

        Raises:
            TokenizerConfigError (a ValueError) naming the source and the field.
        """
        expected = {"format": FILE_FORMAT, "version": FILE_VERSION, "chunk_pattern": CHUNK_PATTERN.pattern}
        if not isinstance(config, dict):
            raise TokenizerConfigError(f"{source} is not a tokenizer file: expected a JSON object, "
                                       f"got {type(config).__name__}")
        wrong = [f"field {key!r} should be {value!r}, got {short_repr(config.get(key))}"
                 for key, value in expected.items() if config.get(key) != value]
        if wrong:
            raise TokenizerConfigError(f"{source} is not a tokenizer file of this version: {wrong[0]}")
        if "merges" not in config:
            raise TokenizerConfigError(f"{source} has no field 'merges'")
        merges, lengths = check_merges(config["merges"], source)
        vocab_size, vocab = config.get("vocab_size"), config.get("vocab")
        if not is_token_id(vocab_size) or vocab_size != len(lengths):
            raise TokenizerConfigError(f"{source} vocabulary does not match its merges (expected {len(lengths)} "
                                       f"tokens, field 'vocab_size' says {short_repr(vocab_size)})")
        if not isinstance(vocab, list) or len(vocab) != len(lengths):
            found = f"{len(vocab)} entries" if isinstance(vocab, list) else type(vocab).__name__
            raise TokenizerConfigError(f"{source} vocabulary does not match its merges (expected field 'vocab' "
                                       f"to list {len(lengths)} tokens, got {found})")
        for token_id, (token, length) in enumerate(zip(vocab, lengths)):
            if not isinstance(token, str) or len(token) != length:
                raise TokenizerConfigError(f"{source} vocabulary does not match its merges (field 'vocab', token "
                                           f"{token_id}: expected a string of {length} characters, got "
                                           f"{short_repr(token)})")
        tokenizer = cls.__new__(cls)
        tokenizer._build(merges)                     # checked above; its size is now bounded by the file's own
        built = tokenizer.to_config()["vocab"]
        if vocab != built:
            token_id = next(i for i, (a, b) in enumerate(zip(vocab, built)) if a != b)
            raise TokenizerConfigError(f"{source} vocabulary does not match its merges (field 'vocab', token "
                                       f"{token_id} is {short_repr(vocab[token_id])}, its merge builds "
                                       f"{short_repr(tokenizer.vocab[token_id].decode('latin-1'))})")
        return tokenizer

    def save(self, path):
        """Write the tokenizer to `path` as JSON (merges and vocabulary).

        The file is written under a temporary name in the same directory and renamed over `path`,
        so an interrupted save never leaves a truncated tokenizer behind.
        """
        path = os.fspath(path)
        directory = os.path.dirname(os.path.abspath(path))
        handle, temporary = tempfile.mkstemp(prefix=".tokenizer-", suffix=".json.tmp", dir=directory)
        umask = os.umask(0)
        os.umask(umask)
        try:
            os.chmod(temporary, 0o666 & ~umask)           # what open(path, "w") would have given, not mkstemp's 0600
            with os.fdopen(handle, "w", encoding="utf-8") as file:
                json.dump(self.to_config(), file, ensure_ascii=True, indent=0)
            os.replace(temporary, path)
        except BaseException:
            if os.path.exists(temporary):
                os.remove(temporary)
            raise

    @classmethod
    def load(cls, path):
        """Read a tokenizer written by `save`, with a clear error for a missing, truncated or foreign file.

        Raises:
            FileNotFoundError when there is no file; OSError when it cannot be read (a directory, no
            permission); TokenizerConfigError (a ValueError) when it is not a valid tokenizer file.
        """
        try:
            with open(path, encoding="utf-8") as file:
                config = json.load(file)
        except FileNotFoundError:
            raise FileNotFoundError(f"BPETokenizer.load: no tokenizer file at {path}") from None
        except OSError as error:
            raise type(error)(f"BPETokenizer.load: cannot read {path}: {error.strerror or error}") from None
        except (ValueError, RecursionError) as error:   # JSONDecodeError, UnicodeDecodeError, nesting too deep
            raise TokenizerConfigError(f"BPETokenizer.load: {path} is not a complete JSON file (truncated?): "
                                       f"{short_repr(str(error))}") from None
        return cls.from_config(config, source=f"BPETokenizer.load: {path}")
