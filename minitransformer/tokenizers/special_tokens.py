"""Special tokens in text: which are read as themselves, which are refused, as tiktoken decides.

A special token (GPT-2's `<|endoftext|>`, id 50256) is a control signal: it tells the model that a
document ended. If any text that happens to contain its characters became that token, a user could
end a prompt's document, or open another, by typing them. So the caller says per call which special
tokens the text may contain, with the two options and defaults of tiktoken's `Encoding.encode`:

* `allowed_special` (default: none) are read as their one id;
* `disallowed_special` (default "all": every special token not allowed) must not occur at all: their
  characters in the text raise a ValueError with tiktoken's message, which says how to allow them or
  how to encode them as text;
* a special token neither allowed nor disallowed (`disallowed_special=()`) is ordinary text.

Each option is "all", one token's string, or a collection of token strings. The disallowed check runs
first, so a token both allowed and disallowed is refused, as in tiktoken. Where tiktoken is laxer, this
is stricter: a name that is not one of the tokenizer's special tokens is refused in either option
(tiktoken ignores it in `allowed_special` and searches the text for it in `disallowed_special`).

The alternation that finds a set of special tokens is compiled once per set (`special_pattern` keeps
the last 64 sets), with the standard library's `re`: escaped literals need no Unicode classes.
"""

import functools
import re

SPECIAL_PATTERN_SETS_KEPT = 64


@functools.lru_cache(maxsize=SPECIAL_PATTERN_SETS_KEPT)
def special_pattern(tokens):
    """The compiled pattern `(t1|t2|...)` that finds any of `tokens` (a frozenset of str), longest first.

    Example:
        >>> special_pattern(frozenset({"<|a|>", "<|ab|>"})).pattern
        '(<\\\\|ab\\\\|>|<\\\\|a\\\\|>)'
    """
    longest_first = sorted(tokens, key=lambda token: (-len(token), token))
    return re.compile("(" + "|".join(re.escape(token) for token in longest_first) + ")")


def split_special(text, special_tokens):
    """`text` cut at every occurrence of the special tokens: ordinary parts at even indices, the special
    tokens found at odd ones (longest first where two overlap).

    Example:
        >>> split_special("a<|endoftext|>b", ["<|endoftext|>"])
        ['a', '<|endoftext|>', 'b']
    """
    if not special_tokens:
        return [text]
    return special_pattern(frozenset(special_tokens)).split(text)


def raise_disallowed_special_token(token):
    """Raise tiktoken's ValueError, word for word, for the disallowed special `token` found in a text."""
    raise ValueError(
        f"Encountered text corresponding to disallowed special token {token!r}.\n"
        "If you want this text to be encoded as a special token, "
        f"pass it to `allowed_special`, e.g. `allowed_special={{{token!r}, ...}}`.\n"
        f"If you want this text to be encoded as normal text, disable the check for this token "
        f"by passing `disallowed_special=(enc.special_tokens_set - {{{token!r}}})`.\n"
        "To disable this check for all special tokens, pass `disallowed_special=()`.\n")


def special_set(value, option, special_tokens, where):
    """The frozenset of special tokens an option names ("all", one token's string, or a collection of them).

    Raises:
        TypeError for a value of another type; ValueError naming the strings that are not special tokens.
    """
    if isinstance(value, str):
        tokens = frozenset(special_tokens) if value == "all" else frozenset({value})
    else:
        try:
            tokens = frozenset(value)
        except TypeError:
            raise TypeError(f"{where} expected {option} \"all\", a special token's string or a collection of them, "
                            f"got {type(value).__name__}") from None
    unknown = sorted(tokens - frozenset(special_tokens), key=repr)
    if unknown:
        raise ValueError(f"{where}: {option} {unknown} are not special tokens of this tokenizer; its special "
                         f"tokens are {sorted(special_tokens)}")
    return tokens


def allowed_after_check(text, allowed_special, disallowed_special, special_tokens, where):
    """The special tokens to read as themselves in `text`, after refusing any disallowed one found in it.

    Args:
        text: str.  allowed_special, disallowed_special: the two options (see the module docstring).
        special_tokens: the tokenizer's special token strings.  where: names the caller in errors.
    Raises:
        ValueError (tiktoken's message) when a disallowed special token occurs in `text`.
    """
    allowed = special_set(allowed_special, "allowed_special", special_tokens, where)
    if isinstance(disallowed_special, str) and disallowed_special == "all":
        disallowed = frozenset(special_tokens) - allowed
    else:
        disallowed = special_set(disallowed_special, "disallowed_special", special_tokens, where)
    if disallowed:
        found = special_pattern(disallowed).search(text)
        if found:
            raise_disallowed_special_token(found.group())
    return allowed
