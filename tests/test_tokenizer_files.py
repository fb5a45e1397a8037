"""Untrusted tokenizer files and configs (alone, or inside a checkpoint's JSON) are checked before anything is built.

A 712-byte file of 48 merges, each joining the previous token with itself, used to make the loader
build tokens of 2^48 bytes. Now every field is checked for type and bounds first, and every problem
is a TokenizerConfigError (a ValueError) naming the file and the field. Decoders refuse ids that
Python would wrap (-1 is the last character) or misread.
"""

import json
import tracemalloc

import numpy as np
import pytest
from _gpt2_files import MERGES, requires_gpt2_files

from minitransformer.tokenizers import BPETokenizer, CharTokenizer, TokenizerConfigError, tokenizer_from_config
from minitransformer.tokenizers.bpe.tokenizer import MAX_TOKEN_BYTES, MAX_VOCAB_SIZE


def bpe_config(merges, vocab=None):
    """A config in the file format with these merges (and, unless given, the vocabulary they build)."""
    config = {"kind": "bpe", "format": "minitransformer-bpe", "version": 1, "chunk_pattern": r"\S+ ?|\s+",
              "vocab_size": 256 + len(merges), "merges": merges}
    config["vocab"] = vocab if vocab is not None else BPETokenizer([tuple(m) for m in merges]).to_config()["vocab"]
    return config


def merge_bomb():
    """48 merges, merge k joining token 256 + k - 1 with itself: token 256 + k would be 2^(k+1) bytes long."""
    merges = [[97, 97]] + [[256 + k, 256 + k] for k in range(47)]
    return {"kind": "bpe", "format": "minitransformer-bpe", "version": 1, "chunk_pattern": r"\S+ ?|\s+",
            "vocab_size": 304, "merges": merges, "vocab": []}


def test_a_merge_bomb_file_is_refused_with_little_memory(tmp_path):
    path = tmp_path / "bomb.json"
    path.write_text(json.dumps(merge_bomb(), separators=(",", ":")), encoding="utf-8")
    assert path.stat().st_size < 800
    tracemalloc.start()
    try:
        with pytest.raises(TokenizerConfigError, match=rf"bomb\.json: field 'merges', merge 10 would build a token "
                                                       rf"of 2,048 bytes; at most {MAX_TOKEN_BYTES} are allowed"):
            BPETokenizer.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000                                   # bytes; the old loader asked for 2^49


def test_a_merge_bomb_inside_a_checkpoint_config_is_refused_naming_the_source():
    tracemalloc.start()
    try:
        with pytest.raises(TokenizerConfigError, match=r"^checkpoint x/checkpoint\.json: field 'tokenizer': field "
                                                       r"'merges', merge 10 would build"):
            tokenizer_from_config(merge_bomb(), source="checkpoint x/checkpoint.json: field 'tokenizer'")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_the_constructor_refuses_a_merge_bomb_too():
    with pytest.raises(ValueError, match="merge 10 would build a token of 2,048 bytes"):
        BPETokenizer([(97, 97)] + [(256 + k, 256 + k) for k in range(47)])


def test_tokens_up_to_the_bound_are_fine():
    merges = [(97, 97)] + [(256 + k, 256 + k) for k in range(9)]         # the last token is 1024 bytes
    tokenizer = BPETokenizer(merges)
    assert len(tokenizer.vocab[-1]) == MAX_TOKEN_BYTES
    assert BPETokenizer.from_config(tokenizer.to_config()).vocab == tokenizer.vocab
    assert tokenizer.encode("a" * 1024) == [tokenizer.vocab_size - 1]


def test_training_refuses_a_token_longer_than_the_bound_it_could_not_load_again():
    text = ("=" * 1500 + "\n") * 50
    with pytest.raises(ValueError, match=r"BPETokenizer.train: merge 10 would build a token of 1,280 bytes; at most "
                                         r"1024 are allowed; the text repeats a run of over 1024 bytes"):
        BPETokenizer.train(text, 256 + 12)
    assert BPETokenizer.train(text, 256 + 10).vocab_size == 266


def test_a_gpt2_sized_vocabulary_loads(tmp_path):
    """50,000 merges (GPT-2's count) with a token of 128 bytes (GPT-2's longest) are within the bounds."""
    assert MAX_VOCAB_SIZE >= 50_257 and MAX_TOKEN_BYTES >= 128
    pairs = [(i, j) for i in range(256) for j in range(256)][:50_000 - 6]
    start, aa = 256 + len(pairs), 256 + pairs.index((97, 97))
    chain = [(aa, aa)] + [(start + k, start + k) for k in range(5)]       # "a" * 4, 8, ..., 128
    tokenizer = BPETokenizer(pairs + chain)
    path = tmp_path / "big.json"
    tokenizer.save(path)
    loaded = BPETokenizer.load(path)
    assert loaded.vocab_size == 50_256 and loaded.vocab[-1] == b"a" * 128


@requires_gpt2_files
def test_gpt2s_own_merges_load(tmp_path):
    """GPT-2's 50,000 merges, rewritten as id pairs over bytes, load and round-trip a text."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    byte_of = {chr(b): b for b in printable}
    byte_of.update({chr(256 + n): b for n, b in enumerate(b for b in range(256) if b not in printable)})
    ids = {char: byte for char, byte in byte_of.items()}
    merges = []
    for line in MERGES.read_text(encoding="utf-8").splitlines():
        left, right = line.split(" ")
        merges.append((ids[left], ids[right]))
        ids.setdefault(left + right, 255 + len(merges))
    path = tmp_path / "gpt2.json"
    BPETokenizer(merges).save(path)
    tokenizer = BPETokenizer.load(path)
    assert tokenizer.vocab_size == 50_256 and max(len(token) for token in tokenizer.vocab) == 128
    text = "Hello, world! The quick brown fox jumps over the lazy dog."
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert len(tokenizer.encode(text)) < len(text) / 2                 # GPT-2's merges compress English


@pytest.mark.parametrize("change, message", [
    (lambda c: c.update(merges=[[0, 1]] * (MAX_VOCAB_SIZE - 255)), r"field 'merges' has 261,889 merges; at most 261,888 are allowed"),
    (lambda c: c.update(merges="[[97, 98]]"), r"field 'merges' must be a list of \[left, right\] id pairs, got str"),
    (lambda c: c.update(merges={"0": [97, 98]}), r"field 'merges' must be a list"),
    (lambda c: c["merges"].__setitem__(1, [256, -1]), r"merge 1 must join two ids below 257, got \[256, -1\]"),
    (lambda c: c["merges"].__setitem__(1, [256, 257]), r"merge 1 must join two ids below 257, got \[256, 257\]"),
    (lambda c: c["merges"].__setitem__(1, [256, 1.0]), r"merge 1 must join two ids below 257, got \[256, 1.0\]"),
    (lambda c: c["merges"].__setitem__(1, [True, 98]), r"merge 1 must join two ids below 257, got \[True, 98\]"),
    (lambda c: c["merges"].__setitem__(1, [97, 98, 99]), r"merge 1 must join two ids below 257, got \[97, 98, 99\]"),
    (lambda c: c["merges"].__setitem__(1, "ab"), r"merge 1 must join two ids below 257, got 'ab'"),
    (lambda c: c["merges"].__setitem__(1, [97, 98]), r"merge 1 repeats merge 0: \[97, 98\]"),
    (lambda c: c.pop("merges"), r"has no field 'merges'"),
    (lambda c: c.update(vocab_size="258"), r"field 'vocab_size' says '258'"),
    (lambda c: c.update(vocab_size=10**9), r"expected 258 tokens, field 'vocab_size' says 1000000000"),
    (lambda c: c.update(vocab="abc"), r"expected field 'vocab' to list 258 tokens, got str"),
    (lambda c: c["vocab"].pop(), r"expected field 'vocab' to list 258 tokens, got 257 entries"),
    (lambda c: c["vocab"].__setitem__(257, 42), r"field 'vocab', token 257: expected a string of 3 characters, got 42"),
    (lambda c: c["vocab"].__setitem__(257, "x" * 10**6), r"token 257: expected a string of 3 characters, got 'xxx"),
    (lambda c: c["vocab"].__setitem__(257, "abd"), r"field 'vocab', token 257 is 'abd', its merge builds 'abc'"),
    (lambda c: c.update(format="other"), r"is not a tokenizer file"),
])
def test_malformed_bpe_configs_name_the_field(change, message):
    config = bpe_config([[97, 98], [256, 99]])                              # "ab", "abc"
    change(config)
    with pytest.raises(TokenizerConfigError, match=r"^the file " + message if message.startswith("is") else message):
        BPETokenizer.from_config(config, source="the file")
    with pytest.raises(TokenizerConfigError, match=message):
        tokenizer_from_config(config, source="the file")


def test_error_messages_never_echo_a_whole_file():
    config = bpe_config([[97, 98]])
    config["vocab"][256] = "y" * 10**6
    with pytest.raises(TokenizerConfigError) as error:
        BPETokenizer.from_config(config)
    assert len(str(error.value)) < 400
    config = bpe_config([[97, 98]])
    config["merges"][0] = list(range(10**5))                  # a "pair" of 100,000 ids
    with pytest.raises(TokenizerConfigError) as error:
        BPETokenizer.from_config(config)
    assert len(str(error.value)) < 400


@pytest.mark.parametrize("content, error, message", [
    ("[" * 100_000 + "]" * 100_000, TokenizerConfigError, "is not a complete JSON file"),
    ('{"merges": 1' + "0" * 5000 + "}", TokenizerConfigError, "is not a complete JSON file"),
    (b"\xff\xfe binary", TokenizerConfigError, "is not a complete JSON file"),
])
def test_files_that_are_not_json_are_refused_by_name(tmp_path, content, error, message):
    path = tmp_path / "odd.json"
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(error, match=rf"BPETokenizer.load: .*odd\.json {message}"):
        BPETokenizer.load(path)


def test_a_directory_is_not_a_tokenizer_file(tmp_path):
    with pytest.raises(IsADirectoryError, match=r"BPETokenizer.load: cannot read .*: Is a directory"):
        BPETokenizer.load(tmp_path)


def test_save_is_atomic_and_keeps_the_usual_permissions(tmp_path, monkeypatch):
    import minitransformer.tokenizers.bpe.tokenizer as module

    path = tmp_path / "tokenizer.json"
    BPETokenizer([(97, 98)]).save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json"]      # no temporary left behind
    assert path.stat().st_mode & 0o044                                           # readable by others (umask)

    def dump_half_then_fail(config, file, **options):
        file.write(json.dumps(config)[:40])
        raise KeyboardInterrupt                                                  # e.g. Ctrl-C in the middle

    monkeypatch.setattr(module.json, "dump", dump_half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        BPETokenizer([(97, 98), (256, 99)]).save(path)
    assert BPETokenizer.load(path).merges == [(97, 98)]                          # the old file, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json"]


# ---------------------------------------------------------------- char tokenizer configs
@pytest.mark.parametrize("config, message", [
    ([1, 2], r"expected a dict with 'kind' 'char' or 'bpe', got list"),
    ("char", r"expected a dict with 'kind' 'char' or 'bpe', got str"),
    ({"chars": "abc"}, r"field 'kind' must be 'char' or 'bpe', got None"),
    ({"kind": "wordpiece"}, r"field 'kind' must be 'char' or 'bpe', got 'wordpiece'"),
    ({"kind": "char"}, r"field 'chars' must be a non-empty string of distinct characters, got None"),
    ({"kind": "char", "chars": ""}, r"field 'chars' must be a non-empty string"),
    ({"kind": "char", "chars": ["a", "b"]}, r"field 'chars' must be a non-empty string .* got \['a', 'b'\]"),
    ({"kind": "char", "chars": 42}, r"field 'chars' must be a non-empty string .* got 42"),
    ({"kind": "char", "chars": "abca"}, r"field 'chars': CharTokenizer expected distinct characters, got 'a' more"),
])
def test_malformed_char_configs_name_the_field(config, message):
    with pytest.raises(TokenizerConfigError, match=r"^checkpoint c\.json: field 'tokenizer': " + message):
        tokenizer_from_config(config, source="checkpoint c.json: field 'tokenizer'")


def test_char_config_round_trip():
    tokenizer = CharTokenizer.train("hello, world")
    again = tokenizer_from_config(json.loads(json.dumps(tokenizer.to_config())))
    assert again.chars == tokenizer.chars


def test_char_tokenizer_wants_single_characters():
    with pytest.raises(ValueError, match=r"CharTokenizer expected single characters, got 'ab'"):
        CharTokenizer(["ab", "c"])                          # "".join used to make it "abc" silently
    assert CharTokenizer(["a", "b"]).chars == "ab"


# ---------------------------------------------------------------- decoders
CHAR = CharTokenizer("abc")
BPE = BPETokenizer([(97, 98)])


@pytest.mark.parametrize("tokenizer", [CHAR, BPE], ids=["char", "bpe"])
@pytest.mark.parametrize("ids, error, message", [
    ([-1], ValueError, r"expected ids in 0\.\.{last}, got -1 at position 0"),
    ([0, 1, 10**6], ValueError, r"expected ids in 0\.\.{last}, got 1000000 at position 2"),
    (np.array([0, -2]), ValueError, r"got -2 at position 1"),
    ([1.0], TypeError, r"expected integer ids, got 1\.0 at position 0"),
    ([0, True], TypeError, r"expected integer ids, got True at position 1"),
    (["a"], TypeError, r"expected integer ids, got 'a' at position 0"),
    ("ab", TypeError, r"expected a sequence of integer ids, got str"),
    (np.array([0.0, 1.0]), TypeError, r"expected a 1-D sequence of integer ids, got an array of shape \(2,\) "
                                      r"and dtype float64"),
    (np.array([[0, 1]]), TypeError, r"got an array of shape \(1, 2\)"),
])
def test_decoders_refuse_negative_non_integer_and_out_of_range_ids(tokenizer, ids, error, message):
    name = type(tokenizer).__name__
    with pytest.raises(error, match=rf"{name}\.decode .*" + message.replace("{last}", str(tokenizer.vocab_size - 1))):
        tokenizer.decode(ids)


@pytest.mark.parametrize("tokenizer", [CHAR, BPE], ids=["char", "bpe"])
def test_decoders_accept_python_and_numpy_integers(tokenizer):
    ids = tokenizer.encode("abcab")
    for form in (ids, np.array(ids), np.array(ids, dtype=np.int32), [np.int64(i) for i in ids], tuple(ids)):
        assert tokenizer.decode(form) == "abcab"


def test_the_checkpoint_loader_refuses_a_merge_bomb_in_its_json():
    """`sample` and `train --resume` rebuild the tokenizer of checkpoint.json through tokenizer_from_config."""
    from minitransformer.training.checkpoint import CheckpointError, checkpoint_tokenizer

    tracemalloc.start()
    try:
        with pytest.raises(CheckpointError, match=r"checkpoint run-dir.*merge 10 would build a token of 2,048 bytes"):
            checkpoint_tokenizer({"tokenizer": merge_bomb()}, "run-dir")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
