"""`GPT2Tokenizer`: GPT-2's own tokenizer, read from its two released files, and trained the same way.

This is the lecture's BPE (notes 2025 §1.5; `bpe/reference.py`) with ranks instead of counts.
Training counts pairs and merges the most frequent one, again and again; the list of merges, in
the order they were learned, is what GPT-2 released (`merges.txt`, first line = first merge). To
encode, nothing is counted: within each pre-token the adjacent pair whose merge was learned
earliest (the lowest *rank*) is merged, everywhere in the pre-token, until no pair of the list is
left, which replays training's merges in training's order. `vocab.json` then names each resulting
token's id. Four details make it GPT-2's and not the lecture's:

* **Bytes, written as characters.** Text is UTF-8 bytes, so nothing is ever unknown. GPT-2 writes
  each of the 256 bytes as one printable character (`bytes_to_unicode`): printable ASCII and Latin-1
  stand for themselves, the rest (space, newline, control bytes) are moved to U+0100 and up, so the
  space byte is `Ġ` and `" the"` is the token `Ġthe`.
* **Pre-tokenization.** A regular expression (`PRETOKENIZE_PATTERN`, which needs the `regex`
  package for its Unicode classes \\p{L} letters and \\p{N} numbers) cuts text into pieces that merges
  never cross: English contractions ('s 't 're 've 'm 'll 'd), a run of letters, of numbers or of
  other symbols with at most one space in front, and whitespace runs, the last space of a run going
  to the next word (`\\s+(?!\\S)`). The lecture's `</w>` is this leading space.
* **Special tokens.** `<|endoftext|>` (id 50256) separates documents. `encode` follows tiktoken's
  contract (`special_tokens.py`): it is one token only where the caller allows it
  (`encode(text, allowed_special={"<|endoftext|>"})`), and by default (`disallowed_special="all"`)
  its characters in a text are refused with tiktoken's ValueError, so text from a user cannot forge
  document boundaries; `disallowed_special=()` or `encode_ordinary` reads them as ordinary text.
* **A cache.** Pre-tokens repeat ("Ġthe"), so each one's ids are remembered after its first encoding,
  for the `cache_size` most recently used pre-tokens (the least recently used is dropped).

`GPT2Tokenizer.train` learns a new vocabulary this way with the fast trainer (`bpe/fast.py`): the same
pre-tokenization, special tokens cut out before counting (never merged), and `save` writes GPT-2's
two-file format (`vocab.json`, `merges.txt` with its `#version: 0.2` line).

Left out: lone surrogates (invalid Unicode) are encoded as their bytes and round-trip, where tiktoken
replaces them by U+FFFD.
"""

import json
import os
from collections import Counter, OrderedDict

from .bpe.fast import iter_merges_fast
from .bpe.pair_merge import merge_pair_in_sequence
from .checks import TokenizerConfigError, check_decode_ids, short_repr
from .special_tokens import allowed_after_check, split_special

try:
    import regex
except ImportError:                     # an install requirement; a broken environment gets a clear message later
    regex = None

PRETOKENIZE_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
END_OF_TEXT = "<|endoftext|>"
MERGES_HEADER = "#version: 0.2"
DEFAULT_CACHE_SIZE = 65536             # pre-tokens whose ids are kept (tiny Shakespeare has about 14,000 distinct)


def bytes_to_unicode():
    """{byte: its character}, in GPT-2's id order (the bytes that print as themselves first).

    Example:
        >>> table = bytes_to_unicode()
        >>> table[ord("a")], table[ord(" ")], table[ord("\\n")], list(table)[:3]
        ('a', 'Ġ', 'Ċ', [33, 34, 35])
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in printable}
    moved = [byte for byte in range(256) if byte not in table]
    table.update({byte: chr(256 + index) for index, byte in enumerate(moved)})
    return table


def _pattern():
    """GPT-2's pre-tokenization pattern, compiled; a clear ModuleNotFoundError without the `regex` package."""
    if regex is None:
        raise ModuleNotFoundError("GPT2Tokenizer needs the `regex` package for GPT-2's Unicode classes: "
                                  "pip install regex")
    return regex.compile(PRETOKENIZE_PATTERN)


def pretokenize(text):
    """GPT-2's pieces of `text`; joined, they are the text.

    Example:
        >>> pretokenize("I'll pay 12 €  now!")
        ['I', "'ll", ' pay', ' 12', ' €', ' ', ' now', '!']
    """
    return _pattern().findall(text)


def _check_vocab(vocab, special_tokens, source):
    """Raise unless vocab maps distinct token strings to exactly the ids 0..len-1, holds every byte's
    character and every special token."""
    if not isinstance(vocab, dict) or not all(isinstance(token, str) and type(token_id) is int
                                              for token, token_id in vocab.items()):
        raise TokenizerConfigError(f"{source}: expected a JSON object of token string -> integer id")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise TokenizerConfigError(f"{source}: expected the ids 0..{len(vocab) - 1}, each once")
    missing = [char for char in bytes_to_unicode().values() if char not in vocab]
    if missing:
        raise TokenizerConfigError(f"{source}: the byte tokens {short_repr(missing)} are missing")
    unknown = [token for token in special_tokens if token not in vocab]
    if unknown:
        raise TokenizerConfigError(f"{source}: the special tokens {unknown} are not in the vocabulary")


def _check_merges(merges, vocab, source):
    """Raise unless every merge joins two tokens of the vocabulary into a third."""
    for rank, pair in enumerate(merges):
        if not all(part in vocab for part in pair) or pair[0] + pair[1] not in vocab:
            raise TokenizerConfigError(f"{source}: merge {rank} {short_repr(' '.join(pair))} joins or makes a "
                                       "token that is not in the vocabulary")


def read_merges(path):
    """The merges of a `merges.txt` as (left, right) pairs, rank 0 first; its `#version` line is skipped."""
    pairs = []
    with open(path, encoding="utf-8") as file:
        for number, line in enumerate(file, start=1):
            line = line.rstrip("\n")
            if (number == 1 and line.startswith("#version")) or not line:
                continue
            parts = line.split(" ")
            if len(parts) != 2 or not all(parts):
                raise TokenizerConfigError(f"GPT2Tokenizer: {path}, line {number}: expected two tokens separated "
                                           f"by one space, got {short_repr(line)}")
            pairs.append((parts[0], parts[1]))
    return pairs


class GPT2Tokenizer:
    """GPT-2's byte-level BPE: `encode` gives the ids GPT-2 (and tiktoken's "gpt2") gives.

    Args:
        vocab: {token string (in the byte alphabet) -> id}, ids exactly 0..V-1.
        merges: list of (left, right) token strings, highest priority (rank 0) first.
        special_tokens: tokens of the vocabulary that `encode` produces only when allowed
            (default: `<|endoftext|>` when the vocabulary has it).
        cache_size: how many pre-tokens' ids are remembered (an int >= 0; 0 remembers none).
    Attributes:
        vocab_size: V.  special_tokens: {token: id}.  special_tokens_set: their strings, as tiktoken's.
        ranks: {(left, right): rank}.  cache: {pre-token: ids}, least recently used first.
    """

    def __init__(self, vocab, merges, special_tokens=None, source="GPT2Tokenizer", cache_size=DEFAULT_CACHE_SIZE):
        if type(cache_size) is not int or cache_size < 0:
            raise ValueError(f"GPT2Tokenizer expected cache_size an int >= 0 (pre-tokens whose ids are kept), "
                             f"got {cache_size!r}")
        if special_tokens is None:
            special_tokens = (END_OF_TEXT,) if END_OF_TEXT in vocab else ()
        merges = [tuple(pair) for pair in merges]
        _check_vocab(vocab, special_tokens, source)
        _check_merges(merges, vocab, source)
        self.vocab, self.merges = dict(vocab), merges
        self.ranks = {pair: rank for rank, pair in enumerate(merges)}
        self.vocab_size = len(vocab)
        self.special_tokens = {token: vocab[token] for token in special_tokens}
        self.byte_char = bytes_to_unicode()
        char_byte = {char: byte for byte, char in self.byte_char.items()}
        self.token_bytes = [b""] * self.vocab_size           # what each id decodes to
        for token, token_id in vocab.items():
            is_text = token in self.special_tokens or any(char not in char_byte for char in token)
            self.token_bytes[token_id] = token.encode("utf-8") if is_text else bytes(char_byte[c] for c in token)
        self.pattern = _pattern()
        self.cache, self.cache_size = OrderedDict(), cache_size

    @classmethod
    def from_files(cls, vocab_json, merges_txt, special_tokens=None, cache_size=DEFAULT_CACHE_SIZE):
        """Read GPT-2's `vocab.json` (GPT-2's encoder.json) and `merges.txt` (its vocab.bpe).

        Raises:
            FileNotFoundError naming a missing file; TokenizerConfigError (a ValueError) naming the file
            and what is wrong with it.
        """
        for path in (vocab_json, merges_txt):
            if not os.path.isfile(path):
                raise FileNotFoundError(f"GPT2Tokenizer.from_files: no file {path}")
        try:
            with open(vocab_json, encoding="utf-8") as file:
                vocab = json.load(file)
        except (ValueError, RecursionError) as error:
            raise TokenizerConfigError(f"GPT2Tokenizer: {vocab_json} is not a JSON file: {short_repr(str(error))}") from None
        merges = read_merges(merges_txt)
        return cls(vocab, merges, special_tokens, source=f"GPT2Tokenizer: {vocab_json} with {merges_txt}",
                   cache_size=cache_size)

    def __repr__(self):
        return f"GPT2Tokenizer(vocab_size={self.vocab_size}, merges={len(self.merges)})"

    @property
    def special_tokens_set(self):
        """The special tokens' strings (tiktoken's name, which its error message uses)."""
        return set(self.special_tokens)

    # ------------------------------------------------------------------ encoding
    def bpe(self, piece):
        """Token ids of one pre-token: merge the lowest-ranked adjacent pair until no ranked pair is left."""
        symbols = [self.byte_char[byte] for byte in piece.encode("utf-8", "surrogatepass")]
        while len(symbols) > 1:
            pair = min(zip(symbols, symbols[1:]), key=lambda adjacent: self.ranks.get(adjacent, len(self.ranks)))
            if pair not in self.ranks:
                break                                           # no learned pair left
            symbols = merge_pair_in_sequence(symbols, pair, pair[0] + pair[1])
        return [self.vocab[symbol] for symbol in symbols]

    def piece_ids(self, piece):
        """Token ids of one pre-token, remembered for the `cache_size` most recently used pre-tokens."""
        ids = self.cache.get(piece)
        if ids is not None:
            self.cache.move_to_end(piece)                       # now the most recently used
            return ids
        ids = self.bpe(piece)
        if self.cache_size:
            self.cache[piece] = ids
            if len(self.cache) > self.cache_size:
                self.cache.popitem(last=False)                  # drop the least recently used
        return ids

    def encode_ordinary(self, text):
        """Token ids of `text`, special tokens' characters read as ordinary text (tiktoken's `encode_ordinary`)."""
        ids = []
        for piece in self.pattern.findall(text):
            ids.extend(self.piece_ids(piece))
        return ids

    def encode(self, text, *, allowed_special=frozenset(), disallowed_special="all"):
        """Token ids of `text` (list of ints in 0..V-1), with tiktoken's contract for special tokens.

        Args:
            text: str.
            allowed_special: the special tokens read as their one id: "all", one token's string or a
                collection of them (default: none).
            disallowed_special: the special tokens whose characters must not occur in `text`: "all"
                (default: every special token not allowed), one token's string or a collection of them;
                `()` lets every special token not allowed be ordinary text.
        Raises:
            ValueError (tiktoken's message) when a disallowed special token occurs in `text`, or when
            an option names a string that is not a special token of this tokenizer.

        Example (GPT-2's files):
            `encode("a<|endoftext|>")` raises; `encode("a<|endoftext|>", allowed_special="all")` is
            [64, 50256]; `encode("a<|endoftext|>", disallowed_special=())` is [64, 27, 91, 437, 1659, 5239, 91, 29].
        """
        if not isinstance(text, str):
            raise TypeError(f"GPT2Tokenizer.encode expected a str, got {type(text).__name__}")
        allowed = allowed_after_check(text, allowed_special, disallowed_special, self.special_tokens,
                                      "GPT2Tokenizer.encode")
        if not allowed:
            return self.encode_ordinary(text)
        ids = []
        for index, part in enumerate(split_special(text, allowed)):     # odd parts are the special tokens found
            ids.extend([self.special_tokens[part]] if index % 2 else self.encode_ordinary(part))
        return ids

    def decode(self, ids):
        """The text of token ids; `decode(encode(x)) == x` for every str x.

        Ids that cut a character's bytes apart decode those bytes to U+FFFD instead of raising.
        """
        data = b"".join(self.token_bytes[i] for i in check_decode_ids(ids, self.vocab_size, "GPT2Tokenizer.decode"))
        try:
            return data.decode("utf-8", "surrogatepass")
        except UnicodeDecodeError:
            return data.decode("utf-8", "replace")

    # ------------------------------------------------------------------ training and the two files
    @classmethod
    def train(cls, text, vocab_size, special_tokens=(END_OF_TEXT,), cache_size=DEFAULT_CACHE_SIZE):
        """Learn a GPT-2-style vocabulary of `vocab_size` ids from `text` with the fast trainer.

        Ids 0..255 are the bytes in GPT-2's order, then one id per new token in the order merges make
        them, then the special tokens. The special tokens are cut out of the text before counting, so
        no merge ever spans one; merges stay inside GPT-2's pre-tokens. A merge that rebuilds a token
        already made (a+bc after ab+c) is kept in the list and adds no id, as the lecture's strings do.

        Raises:
            ValueError when vocab_size leaves no room for the bytes and special tokens, or when the text
            has too few pairs to reach it; ModuleNotFoundError (saying how to install it) without `regex`.
        """
        alphabet = list(bytes_to_unicode().values())
        if type(vocab_size) is not int or vocab_size < len(alphabet) + len(special_tokens):
            raise ValueError(f"GPT2Tokenizer.train expected an int vocab_size >= {len(alphabet) + len(special_tokens)} "
                             f"(256 bytes and {len(special_tokens)} special tokens), got {vocab_size!r}")
        pieces = Counter(piece for part in split_special(text, special_tokens)[::2] for piece in pretokenize(part))
        byte_id = {byte: index for index, byte in enumerate(bytes_to_unicode())}
        words = [[byte_id[byte] for byte in piece.encode("utf-8", "surrogatepass")] for piece in pieces]
        tokens, ids, merges = list(alphabet), {char: index for index, char in enumerate(alphabet)}, []

        def merged_symbol(left, right):
            token = tokens[left] + tokens[right]
            if token not in ids:
                ids[token] = len(tokens)
                tokens.append(token)
            return ids[token]

        target = vocab_size - len(special_tokens)
        for left, right in (pair for pair, _ in iter_merges_fast(words, list(pieces.values()), merged_symbol)):
            if len(tokens) > target:
                break                                   # this merge made one token too many: not kept
            merges.append((tokens[left], tokens[right]))
        if len(tokens) < target:
            raise ValueError(f"GPT2Tokenizer.train: the text allows only {len(tokens)} tokens besides the special "
                             f"ones, so vocab_size can be at most {len(tokens) + len(special_tokens)}; got {vocab_size}")
        del tokens[target:]
        vocab = {token: index for index, token in enumerate(tokens + list(special_tokens))}
        return cls(vocab, merges, special_tokens, cache_size=cache_size)

    def save(self, directory, overwrite=False):
        """Write GPT-2's two files, `vocab.json` and `merges.txt` (with its `#version: 0.2` line), to `directory`.

        Raises FileExistsError, writing nothing, when either file is there already and overwrite is False.
        """
        paths = [os.path.join(directory, name) for name in ("vocab.json", "merges.txt")]
        existing = [path for path in paths if os.path.exists(path)]
        if existing and not overwrite:
            raise FileExistsError(f"GPT2Tokenizer.save: {existing} exist; pass overwrite=True to replace them")
        os.makedirs(directory, exist_ok=True)
        with open(paths[0], "w", encoding="utf-8") as file:
            json.dump(self.vocab, file, ensure_ascii=False)
        with open(paths[1], "w", encoding="utf-8") as file:
            file.write(MERGES_HEADER + "\n" + "".join(f"{left} {right}\n" for left, right in self.merges))

