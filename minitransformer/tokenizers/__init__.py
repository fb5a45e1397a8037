"""Tokenizers: text to integer ids and back (lecture notes 2025 §1.5).

* `CharTokenizer` (`char.py`): one id per distinct character of the training text.
* `BPETokenizer` (`bpe/`): byte-level byte-pair encoding, the lecture's merges.
* `make_tokenizer` trains either kind; `tokenizer_from_config` rebuilds one from the
  dictionary its `to_config()` wrote (checkpoints store it).
"""

from .bpe import BPETokenizer
from .char import CharTokenizer


def make_tokenizer(kind, text, vocab_size=None):
    """Train a tokenizer of `kind` ("char" or "bpe") on `text`."""
    if kind == "char":
        return CharTokenizer.train(text)
    if kind == "bpe":
        return BPETokenizer.train(text, vocab_size=vocab_size or 512)
    raise ValueError(f"unknown tokenizer {kind!r}; expected 'char' or 'bpe'")


def tokenizer_from_config(config):
    """Rebuild a tokenizer from its `to_config()` dictionary (stored in checkpoints)."""
    if config.get("kind") == "char":
        return CharTokenizer(config["chars"])
    if config.get("kind") == "bpe":
        return BPETokenizer.from_config(config)
    raise ValueError(f"unknown tokenizer config {config.get('kind')!r}")
