"""The one way a command reports a user's mistake.

A command raises `UsageError("--eval-interval must be a positive whole number, got 0")`;
the dispatcher (`minitransformer/__main__.py`) prints it as a single line,
`error: --eval-interval must be ...`, on stderr and exits with status 2, the
status argparse uses for its own usage errors. No traceback: the message names
the option or file, what was expected and what was given.

Helpers for checks shared by several commands live here too.
"""

import argparse
import os

from ..core.checks import is_finite_number


class UsageError(Exception):
    """A mistake in what the user asked for (an option, a file); exit status 2."""


def positive_int(text):
    """argparse type: a whole number >= 1 (sizes, counts, intervals)."""
    return _int_at_least(text, 1, "a positive whole number")


def non_negative_int(text):
    """argparse type: a whole number >= 0 (e.g. --max-steps 0: evaluate and sample without training)."""
    return _int_at_least(text, 0, "a whole number >= 0")


def _int_at_least(text, floor, expected):
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < floor:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def non_negative_float(text):
    """argparse type: a finite number >= 0 (a learning rate, a temperature: 0 = greedy)."""
    return _finite_float(text, lambda value: value >= 0, ">= 0")


def positive_float(text):
    """argparse type: a finite number > 0 (a tolerance, a size that may be fractional)."""
    return _finite_float(text, lambda value: value > 0, "> 0")


def _finite_float(text, allowed, bound):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number {bound}, got {text!r}") from None
    if not is_finite_number(value) or not allowed(value):
        raise argparse.ArgumentTypeError(f"expected a finite number {bound}, got {text!r}")
    return value


def check_output_file(path, option, force=False, force_option="--force"):
    """Raise UsageError unless `path` can be written as a new file: not a directory, its directory exists,
    and no file there unless `force` (nothing a user made is overwritten without being asked).

    Called before any work, so a bad path costs nothing.
    """
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a directory, expected the path of a file to write")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"{option} {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK):
        raise UsageError(f"{option} {path}: the directory {directory} is not writable")
    if os.path.lexists(path) and not force:
        raise UsageError(f"{option} {path} already exists; pass {force_option} to replace it")


def read_text_file(path, option="--text"):
    """The contents of the UTF-8 text file at `path` (newlines read as Python's text mode reads them).

    Raises:
        UsageError naming `option` and `path` if the file is missing, a directory, unreadable, binary
        (NUL bytes) or not UTF-8.
    """
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a directory, expected a UTF-8 text file")
    try:
        with open(path, "rb") as file:
            data = file.read()
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file") from None
    except OSError as error:
        raise UsageError(f"{option} {path} cannot be read: {error.strerror or error}") from None
    if b"\0" in data:
        raise UsageError(f"{option} {path} looks binary (it holds NUL bytes), expected a UTF-8 text file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"{option} {path} is not UTF-8 text: byte 0x{data[error.start]:02x} at offset "
                         f"{error.start}") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")      # as open(path, encoding="utf-8") reads it
