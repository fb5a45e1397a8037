"""GPT2Tokenizer (tokenizers/gpt2.py): GPT-2's tokenizer byte for byte.

* definition: the same ids as tiktoken's GPT-2 encoding (built offline from the same two files) on
  prose, code, whitespace runs, emoji, CJK, combining marks, contractions, numbers, and on any text
  hypothesis makes; golden ids by hand ("Hello world" is [15496, 995] in GPT-2);
* round trip: decode(encode(x)) == x for every str;
* special tokens, tiktoken's contract (tokenizers/special_tokens.py): `<|endoftext|>` is 50256 only when
  allowed, refused with tiktoken's own ValueError when disallowed (the default), plain text when neither;
  the same ids or the same message as tiktoken for every combination of the two options; by hand on a
  tiny tokenizer with two special tokens; each set's pattern compiled once;
* by hand: GPT-2's byte alphabet (its three printable ranges), each alternative of the pattern (and tiktoken's own
  spelling of it on every text), ranks, a lone surrogate, a cut character, a special token with a non-ASCII letter;
* the word cache: bounded by `cache_size` on a stream of unique words, least recently used dropped; 65,536 by
  default on every path;
* a missing `regex` package: the same clear error on every path that needs it;
* bad input: malformed files name the file and the line or token; unknown allowed_special; bad ids.

The tests that need GPT-2's files or tiktoken skip without them (tests/_gpt2_files.py says where).
"""

import itertools
import json
import re
import types

import pytest
from _gpt2_files import MERGES, TIKTOKEN_GPT2_PATTERN, VOCAB, requires_gpt2_files, requires_tiktoken, tiktoken_gpt2
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import GPT2Tokenizer, TokenizerConfigError
from minitransformer.tokenizers import gpt2 as gpt2_module
from minitransformer.tokenizers import special_tokens as special_tokens_module
from minitransformer.tokenizers.gpt2 import bytes_to_unicode, pretokenize
from minitransformer.tokenizers.special_tokens import split_special

TEXTS = {
    "prose": "It was the best of times, it was the worst of times; it was the age of wisdom...",
    "code": "def f(x):\n    return {'a': x ** 2, \"b\": [1, 2, 3]}  # comment\n\tif x != 0: pass\r\n",
    "whitespace runs": "a  b   c\n\n\n  d \t\t e     \n    ",
    "emoji": "I ❤️ 🐍 and 👩‍👩‍👧‍👦 🇫🇷 ok",
    "CJK": "日本語のテキストと中文文本，还有한국어 텍스트。",
    "combining marks": "e\u0301 a\u0308 n\u0303 Z\u0351\u0352\u0353algo ǅ ﬁ",
    "contractions": "I'm sure you'll say it's what we've done, they'd've; DON'T 'S' ''",
    "numbers": "3.14159 1,000,000 2024-06-01 0x1F ½ ² ٣",
    "endoftext as text": "one <|endoftext|> two<|endoftext|>",
}


@pytest.fixture(scope="module")
def gpt2():
    return GPT2Tokenizer.from_files(VOCAB, MERGES)


@pytest.fixture(scope="module")
def reference(gpt2):
    return tiktoken_gpt2(gpt2.vocab)


# ---------------------------------------------------------------- definition
@requires_gpt2_files
def test_golden_ids_by_hand(gpt2):
    assert gpt2.encode("Hello world") == [15496, 995]
    assert gpt2.vocab["!"] == 0 and gpt2.vocab["Ġthe"] == 262 and gpt2.vocab["<|endoftext|>"] == 50256
    assert gpt2.vocab_size == 50257 and len(gpt2.merges) == 50000


@requires_gpt2_files
@requires_tiktoken
@pytest.mark.parametrize("name", TEXTS)
def test_same_ids_as_tiktoken(gpt2, reference, name):
    text = TEXTS[name]
    assert gpt2.encode_ordinary(text) == reference.encode_ordinary(text)
    assert gpt2.decode(gpt2.encode_ordinary(text)) == text
    assert outcome(gpt2, text) == outcome(reference, text)


@requires_gpt2_files
@requires_tiktoken
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60) | st.text(alphabet=" \n\t'sdmtlvre", max_size=30))
def test_same_ids_as_tiktoken_on_any_text(gpt2, reference, text):
    assert gpt2.encode(text) == reference.encode(text) == reference.encode_ordinary(text)


@requires_gpt2_files
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_decode_inverts_encode(gpt2, text):
    assert gpt2.decode(gpt2.encode(text, disallowed_special=())) == text


def test_byte_alphabet_is_256_printable_characters():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert all(char.isprintable() and not char.isspace() for char in table.values())
    assert (table[32], table[10], table[0], table[ord("A")]) == ("Ġ", "Ċ", "Ā", "A")


def test_byte_alphabet_keeps_gpt2s_three_printable_ranges_and_moves_the_other_68_bytes_in_order():
    """By hand from GPT-2's encoder.py: the bytes '!'..'~' (94), '¡'..'¬' (12) and '®'..'ÿ' (82) stand for
    themselves, 188 in all, and come first; the other 68 (0-32, 127-160, 173) become chr(256), chr(257), ... in
    byte order: the space chr(288) 'Ġ', DEL chr(289) 'ġ', the no-break space 0xA0 chr(322) 'ł' (GPT-2's token
    'Âł' is its two UTF-8 bytes), the soft hyphen 0xAD chr(323) 'Ń'."""
    table = bytes_to_unicode()
    itself = [byte for byte, char in table.items() if char == chr(byte)]
    assert len(itself) == 188 and list(table)[:188] == itself
    assert all(table[byte] == chr(byte) for byte in (33, 126, 161, 172, 174, 255))
    assert [table[byte] for byte in (0, 32, 127, 160, 173)] == ["Ā", "Ġ", "ġ", "ł", "Ń"]
    assert list(table)[188:] == [*range(33), *range(127, 161), 173]


def test_pretokenize_by_hand_and_as_tiktokens_own_pattern():
    """Each alternative of GPT-2's pattern by hand: a contraction, letters, numbers and other symbols each with at
    most one space in front, a whitespace run giving its last space to the next word; and the same pieces as
    tiktoken's own spelling of the pattern (tests/_gpt2_files.py) on every text above."""
    regex = pytest.importorskip("regex")
    assert pretokenize("I've 2024 apples+=3!!  ok") == ["I", "'ve", " 2024", " apples", "+=", "3", "!!", " ", " ok"]
    for name, text in TEXTS.items():
        assert pretokenize(text) == regex.findall(TIKTOKEN_GPT2_PATTERN, text), name


def test_pretokenize_keeps_every_character():
    text = TEXTS["whitespace runs"] + TEXTS["contractions"]
    assert "".join(pretokenize(text)) == text
    assert pretokenize("a   b") == ["a", "  ", " b"]          # the run's last space goes to the next word


# ---------------------------------------------------------------- special tokens
EOT = "<|endoftext|>"
DISALLOWED_MESSAGE = (  # tiktoken's message (tiktoken/core.py, raise_disallowed_special_token), for the hand tests
    "Encountered text corresponding to disallowed special token {token!r}.\n"
    "If you want this text to be encoded as a special token, pass it to `allowed_special`, e.g. "
    "`allowed_special={{{token!r}, ...}}`.\n"
    "If you want this text to be encoded as normal text, disable the check for this token by passing "
    "`disallowed_special=(enc.special_tokens_set - {{{token!r}}})`.\n"
    "To disable this check for all special tokens, pass `disallowed_special=()`.\n")


def outcome(encoding, text, **options):
    """("ids", the ids) or ("ValueError", its message) of `encoding.encode(text, **options)`."""
    try:
        return "ids", encoding.encode(text, **options)
    except ValueError as error:
        return "ValueError", str(error)


@requires_gpt2_files
@requires_tiktoken
@pytest.mark.parametrize("allowed", [set(), {EOT}, "all"], ids=["allowed none", "allowed eot", "allowed all"])
@pytest.mark.parametrize("disallowed", ["all", (), {EOT}], ids=["disallowed all", "disallowed none", "disallowed eot"])
@pytest.mark.parametrize("text", ["doc one<|endoftext|>doc two <|endoftext|>", "no special token here",
                                  "<|endoftext|>", "<|endoftext|<|endoftext|>|>"], ids=["two", "none", "alone", "nested"])
def test_the_special_token_contract_is_tiktokens(gpt2, reference, allowed, disallowed, text):
    ours = outcome(gpt2, text, allowed_special=allowed, disallowed_special=disallowed)
    assert ours == outcome(reference, text, allowed_special=allowed, disallowed_special=disallowed)
    if ours[0] == "ids":
        assert gpt2.decode(ours[1]) == text


@requires_gpt2_files
@requires_tiktoken
def test_endoftext_is_one_token_only_when_allowed(gpt2, reference):
    text = "doc one<|endoftext|>doc two <|endoftext|>"
    allowed = gpt2.encode(text, allowed_special={EOT})
    assert allowed == reference.encode(text, allowed_special={EOT}) and allowed.count(50256) == 2
    assert gpt2.encode(text, allowed_special="all") == gpt2.encode(text, allowed_special=EOT) == allowed
    plain = gpt2.encode(text, disallowed_special=())
    assert 50256 not in plain and plain == gpt2.encode_ordinary(text) == reference.encode_ordinary(text)
    assert gpt2.decode(allowed) == gpt2.decode(plain) == text
    assert gpt2.special_tokens_set == reference.special_tokens_set == {EOT}


@pytest.fixture()
def two_specials():
    """A byte-level tokenizer (no merges) with two special tokens, <|endoftext|> 256 and <|pad|> 257."""
    alphabet = list(bytes_to_unicode().values())
    vocab = {**{c: i for i, c in enumerate(alphabet)}, EOT: 256, "<|pad|>": 257}
    return GPT2Tokenizer(vocab, [], special_tokens=(EOT, "<|pad|>"))


def test_a_disallowed_special_token_raises_tiktokens_error_by_hand(two_specials):
    tokenizer, byte = two_specials, two_specials.vocab
    with pytest.raises(ValueError) as refused:
        tokenizer.encode("x<|endoftext|>")                      # the default: every special token disallowed
    assert str(refused.value) == DISALLOWED_MESSAGE.format(token=EOT)
    with pytest.raises(ValueError) as refused:                 # allowing one leaves the other disallowed
        tokenizer.encode("<|endoftext|>a<|pad|>", allowed_special={EOT})
    assert str(refused.value) == DISALLOWED_MESSAGE.format(token="<|pad|>")
    with pytest.raises(ValueError, match="disallowed special token '<|endoftext|>'"):
        tokenizer.encode(EOT, allowed_special="all", disallowed_special={EOT})     # the check comes first
    assert tokenizer.encode("<|endoftext|>a<|pad|>", allowed_special="all") == [256, byte["a"], 257]
    assert tokenizer.encode("<|pad|>a", allowed_special={EOT}, disallowed_special=()) == [
        byte[c] for c in "<|pad|>a"]                            # neither allowed nor disallowed: ordinary text
    assert tokenizer.encode("a<|pad|>", disallowed_special=tokenizer.special_tokens_set - {"<|pad|>"}) == [
        byte[c] for c in "a<|pad|>"]                            # the way out the message names works
    assert tokenizer.encode("a<|endoftext", allowed_special=()) == [byte[c] for c in "a<|endoftext"]


def test_options_naming_no_special_token_are_refused(two_specials):
    for option in ("allowed_special", "disallowed_special"):
        with pytest.raises(ValueError, match=rf"{option} \['<\|mask\|>'\] are not special tokens of this "
                                             r"tokenizer; its special tokens are \['<\|endoftext\|>', '<\|pad\|>'\]"):
            two_specials.encode("x", **{option: {"<|mask|>"}})
        with pytest.raises(TypeError, match=rf"expected {option} \"all\", a special token's string or a collection "
                                            "of them, got int"):
            two_specials.encode("x", **{option: 3})


def test_where_two_special_tokens_overlap_the_longest_is_found():
    assert split_special("a<|ab|>b", ["<|a", "<|ab|>"]) == ["a", "<|ab|>", "b"]
    assert split_special("a<|ac", ["<|a", "<|ab|>"]) == ["a", "<|a", "c"]


def test_an_option_naming_one_token_by_its_string_means_that_token_alone(two_specials):
    """One token's string is that token, not its characters: allowed alone, or disallowed alone (the other
    special token, in neither option, is then ordinary text)."""
    tokenizer, byte = two_specials, two_specials.vocab
    text = "<|pad|>a<|endoftext|>"
    assert tokenizer.encode(text, allowed_special="<|pad|>", disallowed_special=()) == [
        257, byte["a"]] + [byte[c] for c in "<|endoftext|>"]
    assert tokenizer.encode("a<|endoftext|>", disallowed_special="<|pad|>") == [byte[c] for c in "a<|endoftext|>"]
    with pytest.raises(ValueError) as refused:
        tokenizer.encode(text, disallowed_special="<|pad|>")
    assert str(refused.value) == DISALLOWED_MESSAGE.format(token="<|pad|>")


def test_without_special_tokens_the_text_is_one_part():
    assert split_special("a<|endoftext|>b", []) == split_special("a<|endoftext|>b", ()) == ["a<|endoftext|>b"]
    assert split_special("", [EOT]) == [""] and split_special(EOT, [EOT]) == ["", EOT, ""]


def test_tokens_of_one_length_are_tried_in_sorted_order_whatever_the_sets_order():
    """Eight tokens of one length: the pattern lists them sorted, so each set has one pattern in every process
    (a set's order follows the strings' hashes, which change from process to process)."""
    tokens = [f"<|{letter}|>" for letter in "hgfedcba"]
    assert special_tokens_module.special_pattern(frozenset(tokens)).pattern == (
        r"(<\|a\|>|<\|b\|>|<\|c\|>|<\|d\|>|<\|e\|>|<\|f\|>|<\|g\|>|<\|h\|>)")


@pytest.fixture()
def compiled(monkeypatch):
    """The patterns special_tokens.py compiles from here on (its cache of compiled sets emptied before and after)."""
    patterns = []

    def counting_compile(pattern):
        patterns.append(pattern)
        return re.compile(pattern)
    monkeypatch.setattr(special_tokens_module, "re", types.SimpleNamespace(compile=counting_compile, escape=re.escape))
    special_tokens_module.special_pattern.cache_clear()
    yield patterns
    special_tokens_module.special_pattern.cache_clear()


def test_the_last_64_sets_of_special_tokens_are_kept_compiled(compiled):
    """The module keeps the 64 most recently used sets' patterns: 64 sets used twice compile 64 times; a 65th
    set pushes out the least recently used one, which compiles again when it comes back."""
    sets = [frozenset({f"<|{number}|>"}) for number in range(65)]
    for tokens in sets[:64] + sets[:64]:
        special_tokens_module.special_pattern(tokens)
    assert len(compiled) == 64
    special_tokens_module.special_pattern(sets[64])
    for tokens in sets[1:64]:
        special_tokens_module.special_pattern(tokens)
    assert len(compiled) == 65
    special_tokens_module.special_pattern(sets[0])
    assert len(compiled) == 66


def test_each_set_of_special_tokens_is_compiled_once(two_specials, compiled):
    for _ in range(5):
        two_specials.encode("a<|endoftext|>b", allowed_special={EOT}, disallowed_special=())
        two_specials.encode("a b")                              # the check for both, whatever the text
    assert len(compiled) == 2, compiled                         # {EOT} to split at, {EOT, <|pad|>} to refuse


def test_the_word_cache_stays_bounded_and_keeps_the_recent_words():
    alphabet = list(bytes_to_unicode().values())
    tokenizer = GPT2Tokenizer({c: i for i, c in enumerate(alphabet)}, [], cache_size=8)
    uncached = GPT2Tokenizer({c: i for i, c in enumerate(alphabet)}, [], cache_size=0)
    words = ["".join(letters) for letters in itertools.product("abcdefgh", repeat=3)]      # 512 unique words
    for word in words:
        assert tokenizer.encode(" the " + word) == uncached.encode(" the " + word)
        assert len(tokenizer.cache) <= 8 and " the" in tokenizer.cache        # used by every text: never dropped
    assert list(tokenizer.cache)[-1] == " " + words[-1] and len(uncached.cache) == 0
    assert len(tokenizer.cache) == 8                             # full, not one short
    assert " " + words[0] not in tokenizer.cache                # the least recently used went first
    one = GPT2Tokenizer({c: i for i, c in enumerate(alphabet)}, [], cache_size=1)
    one.encode("a b")
    assert list(one.cache) == [" b"]                            # a cache of one keeps the last pre-token
    for size in (-1, True):
        with pytest.raises(ValueError, match=f"GPT2Tokenizer expected cache_size an int >= 0 .*, got {size}"):
            GPT2Tokenizer({c: i for i, c in enumerate(alphabet)}, [], cache_size=size)


def test_the_word_cache_keeps_65536_pre_tokens_unless_told_on_every_path(tmp_path):
    """65,536 by default (tiny Shakespeare has about 14,000 distinct pre-tokens), from the constructor, the two
    files and training alike; a size given to `from_files` or `train` reaches the tokenizer."""
    alphabet = list(bytes_to_unicode().values())
    files = _tiny_files(tmp_path, ["a b"])
    by_default = {"constructor": GPT2Tokenizer({c: i for i, c in enumerate(alphabet)}, []),
                  "from_files": GPT2Tokenizer.from_files(*files), "train": GPT2Tokenizer.train("ab ab ab", 257)}
    assert {path: tokenizer.cache_size for path, tokenizer in by_default.items()} == dict.fromkeys(by_default, 65536)
    assert GPT2Tokenizer.from_files(*files, cache_size=3).cache_size == 3
    assert GPT2Tokenizer.train("ab ab ab", 257, cache_size=3).cache_size == 3


def test_a_missing_regex_package_is_the_same_clear_error_on_every_path(tmp_path, monkeypatch):
    vocab_json, merges_txt = _tiny_files(tmp_path, ["a b"])
    monkeypatch.setattr(gpt2_module, "regex", None)             # what `import regex` failing leaves
    paths = {"from_files": lambda: GPT2Tokenizer.from_files(vocab_json, merges_txt),
             "pretokenize": lambda: pretokenize("a b"),
             "train with special tokens": lambda: GPT2Tokenizer.train("a b<|endoftext|>a b", 258),
             "train without": lambda: GPT2Tokenizer.train("a b a b", 257, special_tokens=()),
             "the constructor": lambda: GPT2Tokenizer({c: i for i, c in enumerate(bytes_to_unicode().values())}, [])}
    for name, path in paths.items():
        with pytest.raises(ModuleNotFoundError, match=r"GPT2Tokenizer needs the `regex` package .*pip install regex"):
            path()


# ---------------------------------------------------------------- bad input
@requires_gpt2_files
def test_decode_refuses_bad_ids_and_replaces_cut_characters(gpt2):
    with pytest.raises(ValueError, match="expected ids in 0..50256, got 50257"):
        gpt2.decode([50257])
    with pytest.raises(TypeError, match="expected integer ids"):
        gpt2.decode([1.0])
    lead_byte = gpt2.vocab["â"]                                  # byte 0xE2 alone: the start of a 3-byte character
    assert gpt2.decode([lead_byte]) == "\ufffd" and gpt2.decode(gpt2.encode("€")) == "€"


def _tiny_files(tmp_path, merges_lines, vocab=None):
    alphabet = list(bytes_to_unicode().values())
    vocab = vocab if vocab is not None else {**{c: i for i, c in enumerate(alphabet)}, "ab": 256, "<|endoftext|>": 257}
    (tmp_path / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n" + "".join(line + "\n" for line in merges_lines),
                                         encoding="utf-8")
    return tmp_path / "vocab.json", tmp_path / "merges.txt"


def test_a_tiny_vocabulary_merges_by_rank(tmp_path):
    tokenizer = GPT2Tokenizer.from_files(*_tiny_files(tmp_path, ["a b"]))
    assert tokenizer.encode("abab a") == [256, 256, tokenizer.vocab["Ġ"], tokenizer.vocab["a"]]   # "Ġa" not learned
    assert tokenizer.encode("<|endoftext|>", allowed_special="all") == [257]
    assert tokenizer.encode("cab") == [tokenizer.vocab["c"], 256]     # the last merge beats the unlearned pair (c, a)
    assert tokenizer.encode("ab") == [256]


def test_a_tiny_vocabulary_decodes_a_cut_character_and_a_lone_surrogate(tmp_path):
    """A lead byte alone decodes to U+FFFD; a lone surrogate is encoded as its three bytes and decodes back to
    itself (the module docstring's one departure from tiktoken); only a str is encoded."""
    tokenizer = GPT2Tokenizer.from_files(*_tiny_files(tmp_path, ["a b"]))
    assert tokenizer.decode([tokenizer.vocab["â"], tokenizer.vocab["a"]]) == "\ufffda"   # 0xE2: starts a 3-byte character
    text = "a\ud800b \udfff"
    assert tokenizer.encode(text)[:4] == [tokenizer.vocab["a"]] + [tokenizer.vocab[bytes_to_unicode()[byte]]
                                                                   for byte in (0xED, 0xA0, 0x80)]
    assert tokenizer.decode(tokenizer.encode(text)) == text
    with pytest.raises(TypeError, match="GPT2Tokenizer.encode expected a str, got bytes"):
        tokenizer.encode(b"ab")


def test_a_special_token_decodes_to_its_own_text_not_to_the_bytes_its_characters_stand_for():
    """'é' is also the byte alphabet's character for byte 0xE9; a special token is text, so <|café|> decodes to
    itself."""
    vocab = {**{c: i for i, c in enumerate(bytes_to_unicode().values())}, "<|café|>": 256}
    tokenizer = GPT2Tokenizer(vocab, [], special_tokens=("<|café|>",))
    ids = tokenizer.encode("x<|café|>", allowed_special="all")
    assert ids == [vocab["x"], 256] and tokenizer.decode(ids) == "x<|café|>"


def test_merges_files_with_and_without_the_version_line_and_blank_lines_read_alike(tmp_path):
    vocab_json, merges_txt = _tiny_files(tmp_path, ["a b", "", ""])
    assert GPT2Tokenizer.from_files(vocab_json, merges_txt).merges == [("a", "b")]
    merges_txt.write_text("a b\n", encoding="utf-8")
    assert GPT2Tokenizer.from_files(vocab_json, merges_txt).merges == [("a", "b")]


@pytest.mark.parametrize("lines, vocab_change, message", [
    (["a b c"], None, r"merges.txt, line 2: expected two tokens separated by one space"),
    (["a c"], None, r"merge 0 'a c' joins or makes a token that is not in the vocabulary"),
    (["a b"], "drop byte", r"the byte tokens \['Ā'\] are missing"),
    (["a b"], "gap", r"expected the ids 0..257, each once"),
    (["a "], None, r"merges.txt, line 2: expected two tokens separated by one space, got 'a '"),
    (["ab c"], "abc only", r"merge 0 'ab c' joins or makes a token that is not in the vocabulary"),
    (["a b"], "true as an id", r"vocab.json with .*merges.txt: expected a JSON object of token string -> integer id"),
], ids=["three parts", "unknown token", "missing byte", "ids with a gap", "an empty part", "a part not in the vocabulary",
        "a JSON true as an id"])
def test_malformed_files_name_the_file_and_the_fault(tmp_path, lines, vocab_change, message):
    alphabet = list(bytes_to_unicode().values())
    vocab = {**{c: i for i, c in enumerate(alphabet)}, "ab": 256, "<|endoftext|>": 257}
    if vocab_change == "drop byte":
        vocab = {c: i for i, c in enumerate(c for c in alphabet if c != "Ā")}
        vocab.update({"ab": 255, "<|endoftext|>": 256})
    if vocab_change == "gap":
        vocab["<|endoftext|>"] = 300
    if vocab_change == "abc only":                              # the merge makes "abc" from "ab", which is missing
        vocab["abc"] = vocab.pop("ab")
    if vocab_change == "true as an id":                         # JSON's true is Python's True, which equals 1
        vocab['"'] = True
    with pytest.raises(TokenizerConfigError, match=message):
        GPT2Tokenizer.from_files(*_tiny_files(tmp_path, lines, vocab))


def test_a_faulty_vocabulary_names_both_files_and_a_bad_json_file_is_named(tmp_path):
    alphabet = list(bytes_to_unicode().values())
    vocab_json, merges_txt = _tiny_files(tmp_path, [], {c: i for i, c in enumerate(alphabet[1:])})
    with pytest.raises(TokenizerConfigError) as refused:
        GPT2Tokenizer.from_files(vocab_json, merges_txt)
    assert str(refused.value).startswith(f"GPT2Tokenizer: {vocab_json} with {merges_txt}: the byte tokens ['!']")
    vocab_json.write_text("{", encoding="utf-8")
    with pytest.raises(TokenizerConfigError, match="vocab.json is not a JSON file"):
        GPT2Tokenizer.from_files(vocab_json, merges_txt)
    with pytest.raises(TokenizerConfigError, match=r"the special tokens \['<\|pad\|>'\] are not in the vocabulary"):
        GPT2Tokenizer({c: i for i, c in enumerate(alphabet)}, [], special_tokens=("<|pad|>",))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file .*vocab.json"):
        GPT2Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
