"""Checks shared by the tokenizers: untrusted tokenizer configs and the ids handed to `decode`.

A tokenizer config comes from a file the user names (`BPETokenizer.load`) or from a checkpoint's
JSON (`tokenizer_from_config`, called by `sample` and `train --resume`), so it is untrusted: every
field is checked for its type and bounds before anything is built from it, and every problem is a
`TokenizerConfigError` (a ValueError) whose message names the source and the field.
"""

import numbers
import reprlib

import numpy as np

_short = reprlib.Repr()
_short.maxstring, _short.maxother, _short.maxlist = 60, 60, 6


def short_repr(value):
    """repr(value), cut to a few dozen characters: an error message must not echo a whole file."""
    return _short.repr(value)


class TokenizerConfigError(ValueError):
    """A malformed tokenizer file or config (alone or inside a checkpoint); the message names the source and field."""


def is_token_id(value):
    """True for a Python or NumPy integer that is not a bool."""
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


def check_decode_ids(ids, vocab_size, where):
    """Return `ids` as a list of Python ints in [0, vocab_size), or raise naming `where`.

    Python and NumPy would index a list or an array with -1 and return its last entry; a float or a
    bool id would be an index too, or fail with an unrelated error. Refused here instead.

    Args:
        ids: an iterable of integers (a list, or a 1-D integer NumPy array).
        vocab_size: V.
        where: names the decoder in the messages.
    Raises:
        TypeError for an id that is not an integer; ValueError for one outside [0, V).
    """
    if isinstance(ids, np.ndarray):
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise TypeError(f"{where} expected a 1-D sequence of integer ids, got an array of shape {ids.shape} "
                            f"and dtype {ids.dtype}")
        ids = ids.tolist()
    elif isinstance(ids, (str, bytes)):
        raise TypeError(f"{where} expected a sequence of integer ids, got {type(ids).__name__}")
    checked = []
    for position, token_id in enumerate(ids):
        if not is_token_id(token_id):
            raise TypeError(f"{where} expected integer ids, got {short_repr(token_id)} at position {position}")
        if not 0 <= token_id < vocab_size:
            raise ValueError(f"{where} expected ids in 0..{vocab_size - 1}, got {token_id} at position {position}")
        checked.append(int(token_id))
    return checked
