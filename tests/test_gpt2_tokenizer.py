"""GPT2Tokenizer (tokenizers/gpt2.py): GPT-2's tokenizer byte for byte.

* definition: the same ids as tiktoken's GPT-2 encoding (built offline from the same two files) on
  prose, code, whitespace runs, emoji, CJK, combining marks, contractions, numbers, and on any text
  hypothesis makes; golden ids by hand ("Hello world" is [15496, 995] in GPT-2);
* round trip: decode(encode(x)) == x for every str;
* special tokens: `<|endoftext|>` is 50256 only when allowed, plain text otherwise;
* bad input: malformed files name the file and the line or token; unknown allowed_special; bad ids.

The tests that need GPT-2's files or tiktoken skip without them (tests/_gpt2_files.py says where).
"""

import json

import pytest
from _gpt2_files import MERGES, VOCAB, requires_gpt2_files, requires_tiktoken, tiktoken_gpt2
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import GPT2Tokenizer, TokenizerConfigError
from minitransformer.tokenizers.gpt2 import bytes_to_unicode, pretokenize

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
    assert gpt2.encode(text) == reference.encode_ordinary(text)
    assert gpt2.decode(gpt2.encode(text)) == text


@requires_gpt2_files
@requires_tiktoken
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60) | st.text(alphabet=" \n\t'sdmtlvre", max_size=30))
def test_same_ids_as_tiktoken_on_any_text(gpt2, reference, text):
    assert gpt2.encode(text) == reference.encode_ordinary(text)


@requires_gpt2_files
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_decode_inverts_encode(gpt2, text):
    assert gpt2.decode(gpt2.encode(text)) == text


def test_byte_alphabet_is_256_printable_characters():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256)) and len(set(table.values())) == 256
    assert all(char.isprintable() and not char.isspace() for char in table.values())
    assert (table[32], table[10], table[0], table[ord("A")]) == ("Ġ", "Ċ", "Ā", "A")


def test_pretokenize_keeps_every_character():
    text = TEXTS["whitespace runs"] + TEXTS["contractions"]
    assert "".join(pretokenize(text)) == text
    assert pretokenize("a   b") == ["a", "  ", " b"]          # the run's last space goes to the next word


# ---------------------------------------------------------------- special tokens
@requires_gpt2_files
@requires_tiktoken
def test_endoftext_is_one_token_only_when_allowed(gpt2, reference):
    text = "doc one<|endoftext|>doc two <|endoftext|>"
    allowed = gpt2.encode(text, allowed_special={"<|endoftext|>"})
    assert allowed == reference.encode(text, allowed_special={"<|endoftext|>"}) and allowed.count(50256) == 2
    assert gpt2.encode(text, allowed_special="all") == gpt2.encode(text, allowed_special="<|endoftext|>") == allowed
    plain = gpt2.encode(text)
    assert 50256 not in plain and plain == reference.encode_ordinary(text)
    assert gpt2.decode(allowed) == gpt2.decode(plain) == text


@requires_gpt2_files
def test_unknown_allowed_special_is_refused(gpt2):
    with pytest.raises(ValueError, match=r"allowed_special \['<\|pad\|>'\] are not special tokens"):
        gpt2.encode("x", allowed_special={"<|pad|>"})


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


@pytest.mark.parametrize("lines, vocab_change, message", [
    (["a b c"], None, r"merges.txt, line 2: expected two tokens separated by one space"),
    (["a c"], None, r"merge 0 'a c' joins or makes a token that is not in the vocabulary"),
    (["a b"], "drop byte", r"the byte tokens \['Ā'\] are missing"),
    (["a b"], "gap", r"expected the ids 0..257, each once"),
], ids=["three parts", "unknown token", "missing byte", "ids with a gap"])
def test_malformed_files_name_the_file_and_the_fault(tmp_path, lines, vocab_change, message):
    alphabet = list(bytes_to_unicode().values())
    vocab = {**{c: i for i, c in enumerate(alphabet)}, "ab": 256, "<|endoftext|>": 257}
    if vocab_change == "drop byte":
        vocab = {c: i for i, c in enumerate(c for c in alphabet if c != "Ā")}
        vocab.update({"ab": 255, "<|endoftext|>": 256})
    if vocab_change == "gap":
        vocab["<|endoftext|>"] = 300
    with pytest.raises(TokenizerConfigError, match=message):
        GPT2Tokenizer.from_files(*_tiny_files(tmp_path, lines, vocab))


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no file .*vocab.json"):
        GPT2Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
