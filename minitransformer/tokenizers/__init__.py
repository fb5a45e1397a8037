"""Tokenizers: text to integer ids and back (lecture notes 2025 §1.5).

* `CharTokenizer` (`char.py`): one id per distinct character of the training text.
* `BPETokenizer` (`bpe/`): byte-level byte-pair encoding, the lecture's merges.
* `GPT2Tokenizer` (`gpt2.py`): GPT-2's tokenizer from its two released files, and trained the same way.
* `WordPieceTokenizer` (`wordpiece.py`): BERT's WordPiece, merges by likelihood score (not stored in checkpoints).
* `make_tokenizer` trains either kind; `tokenizer_from_config` rebuilds one from the
  dictionary its `to_config()` wrote (checkpoints store it). The dictionary is untrusted
  and checked first (`checks.py`); a malformed one raises `TokenizerConfigError`, a ValueError.
"""

from .bpe import BPETokenizer
from .char import CharTokenizer
from .checks import TokenizerConfigError, short_repr
from .gpt2 import GPT2Tokenizer
from .wordpiece import WordPieceTokenizer

__all__ = ["BPETokenizer", "CharTokenizer", "GPT2Tokenizer", "TokenizerConfigError", "WordPieceTokenizer",
           "make_tokenizer",
           "tokenizer_from_config"]


def make_tokenizer(kind, text, vocab_size=None):
    """Train a tokenizer of `kind` ("char" or "bpe") on `text`."""
    if kind == "char":
        return CharTokenizer.train(text)
    if kind == "bpe":
        return BPETokenizer.train(text, vocab_size=vocab_size or 512)
    raise ValueError(f"unknown tokenizer {kind!r}; expected 'char' or 'bpe'")


def tokenizer_from_config(config, source="tokenizer_from_config: the config"):
    """Rebuild a tokenizer from its `to_config()` dictionary (stored in checkpoints).

    Args:
        config: the dictionary, untrusted (it comes from a checkpoint's JSON): checked before
            anything is built from it (see `CharTokenizer.from_config`, `BPETokenizer.from_config`).
        source: starts every error message, e.g. "checkpoint runs/1/checkpoint.json: field 'tokenizer'".
    Raises:
        TokenizerConfigError (a ValueError) naming the source and the field.
    """
    if not isinstance(config, dict):
        raise TokenizerConfigError(f"{source}: expected a dict with 'kind' 'char' or 'bpe', "
                                   f"got {type(config).__name__}")
    if config.get("kind") == "char":
        return CharTokenizer.from_config(config, source)
    if config.get("kind") == "bpe":
        return BPETokenizer.from_config(config, source)
    raise TokenizerConfigError(f"{source}: field 'kind' must be 'char' or 'bpe', got {short_repr(config.get('kind'))}")
