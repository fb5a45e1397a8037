"""Training a GPT-2-style byte-level BPE (GPT2Tokenizer.train, tokenizers/gpt2.py).

* special tokens are cut out before counting: no merge spans or builds one; they take the last ids;
* merges stay inside GPT-2's pre-tokens: every learned token is one pre-token;
* GPT-2's two-file format: saved and read back (`from_files`), the same ids; saving refuses to overwrite either
  file and makes a missing folder;
* tiktoken built from the saved files gives the same ids (when tiktoken is installed);
* a vocab_size of the bytes and special tokens alone learns no merge; a lone surrogate is trained on as its bytes;
* bad input: a vocab_size too small or too large for the text.
"""

import pytest
from _gpt2_files import requires_tiktoken, tiktoken_gpt2
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer import GPT2Tokenizer
from minitransformer.tokenizers.gpt2 import pretokenize

TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n") * 8


@pytest.fixture(scope="module")
def trained():
    return GPT2Tokenizer.train(TEXT + "<|endoftext|>" + TEXT[:300], 320)


def test_special_tokens_are_never_merged_and_come_last():
    text = "x<|endoftext|>y" * 50                      # without the cut, '<|', 'endoftext' and '|>' would merge
    tokenizer = GPT2Tokenizer.train(text, 258)
    assert tokenizer.merges == [("y", "x")] and tokenizer.vocab["yx"] == 256
    assert tokenizer.vocab["<|endoftext|>"] == 257 == tokenizer.vocab_size - 1
    assert tokenizer.encode(text, allowed_special="all")[:3] == [tokenizer.vocab["x"], 257, 256]
    with pytest.raises(ValueError, match="allows only 257 tokens besides the special ones, so vocab_size can be "
                                         "at most 258; got 259"):
        GPT2Tokenizer.train(text, 259)


def test_every_learned_token_is_one_pretoken(trained):
    learned = [trained.decode([i]) for i in range(256, trained.vocab_size - 1)]
    assert len(learned) == 63 and all(len(pretokenize(token)) == 1 for token in learned), learned


def test_the_two_files_round_trip(trained, tmp_path):
    trained.save(tmp_path)
    assert (tmp_path / "merges.txt").read_text(encoding="utf-8").startswith("#version: 0.2\ne a\n")
    again = GPT2Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    assert again.vocab == trained.vocab and again.merges == trained.merges
    sample = "Speak, citizens! We proceed<|endoftext|>ünïcödé 🙂"
    assert again.encode(sample, allowed_special="all") == trained.encode(sample, allowed_special="all")
    with pytest.raises(FileExistsError, match="pass overwrite=True"):
        trained.save(tmp_path)
    trained.save(tmp_path, overwrite=True)


def test_saving_refuses_when_either_file_is_there_and_makes_a_missing_folder(trained, tmp_path):
    (tmp_path / "merges.txt").write_text("mine\n", encoding="utf-8")
    with pytest.raises(FileExistsError, match="merges.txt"):
        trained.save(tmp_path)
    assert not (tmp_path / "vocab.json").exists() and (tmp_path / "merges.txt").read_text(encoding="utf-8") == "mine\n"
    folder = tmp_path / "new" / "folder"
    trained.save(folder)
    assert GPT2Tokenizer.from_files(folder / "vocab.json", folder / "merges.txt").merges == trained.merges


@requires_tiktoken
@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="First Citizen:resolvd.\n ?é", max_size=80))
def test_tiktoken_from_the_trained_files_gives_the_same_ids(trained, text):
    assert trained.encode(text) == tiktoken_gpt2(trained.vocab).encode_ordinary(text)


def test_decode_inverts_encode_on_unseen_text(trained):
    text = "Ελληνικά, 中文, and\ttabs  —  all unseen.<|endoftext|>"
    assert trained.decode(trained.encode(text, disallowed_special=())) == text
    assert trained.decode(trained.encode(text, allowed_special="all")) == text


def test_a_lone_surrogate_is_trained_on_as_its_bytes():
    text = "a\ud800b " * 20
    tokenizer = GPT2Tokenizer.train(text, 258)
    assert tokenizer.decode(tokenizer.encode(text)) == text
    assert tokenizer.merges == [("í", "ł")]                     # its bytes 0xED 0xA0 (0x80 follows), in GPT-2's alphabet


def test_a_vocab_size_of_the_bytes_and_specials_alone_learns_no_merge():
    with_special, without = GPT2Tokenizer.train("abab abab", 257), GPT2Tokenizer.train("abab abab", 256, special_tokens=())
    assert with_special.merges == without.merges == [] and (with_special.vocab_size, without.vocab_size) == (257, 256)
    assert with_special.vocab["<|endoftext|>"] == 256 and without.encode("ab") == [without.vocab["a"], without.vocab["b"]]


def test_a_vocab_size_below_the_bytes_and_specials_is_refused():
    with pytest.raises(ValueError, match=r"expected an int vocab_size >= 257 \(256 bytes and 1 special tokens\), got 256"):
        GPT2Tokenizer.train("abc", 256)
