"""BPETokenizer: exact round trips on any text, ids in 0..V-1, merges by rank, save and load."""

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minitransformer.tokenizers.bpe import BPETokenizer, merge_pair_in_sequence
from minitransformer.tokenizers.bpe.tokenizer import split_into_chunks

TRAINING_TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\n"
    "All:\nResolved. resolved.\n\n"
    "First Citizen:\nFirst, you know Caius Marcius is chief enemy to the people.\n"
) * 4
VOCAB_SIZE = 300


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train(TRAINING_TEXT, vocab_size=VOCAB_SIZE)


def test_vocab_size_is_exact_and_ids_fill_the_range(tokenizer):
    assert tokenizer.vocab_size == VOCAB_SIZE == len(tokenizer.vocab) == 256 + len(tokenizer.merges)
    ids = tokenizer.encode(TRAINING_TEXT)
    assert min(ids) >= 0 and max(ids) == VOCAB_SIZE - 1  # the last merge is used on its own training text


def test_training_text_round_trips_and_compresses(tokenizer):
    ids = tokenizer.encode(TRAINING_TEXT)
    assert tokenizer.decode(ids) == TRAINING_TEXT
    assert len(ids) < len(TRAINING_TEXT.encode("utf-8")) / 2


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_any_text_round_trips(tokenizer, text):
    ids = tokenizer.encode(text)
    assert all(0 <= token_id < tokenizer.vocab_size for token_id in ids)
    assert tokenizer.decode(ids) == text


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet=" \n\tab\u00e9\u4e2d", max_size=40))
def test_whitespace_runs_and_unseen_characters_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_unseen_characters_fall_back_to_utf8_bytes(tokenizer):
    ids = tokenizer.encode("\u4e2d")  # one character, three UTF-8 bytes, never seen in training
    assert ids == list("\u4e2d".encode("utf-8"))


def test_lone_surrogate_round_trips(tokenizer):
    assert tokenizer.decode(tokenizer.encode("a\ud800b")) == "a\ud800b"


def test_chunks_keep_one_trailing_space_and_join_to_the_text():
    text = "To be,  or\n\nnot to be \t"
    chunks = split_into_chunks(text)
    assert chunks == ["To ", "be, ", " ", "or", "\n\n", "not ", "to ", "be ", "\t"]
    assert "".join(chunks) == text


def test_encoding_applies_merges_by_rank():
    # Merges: 256 = (a, b), 257 = (b, c). In "abc" the earlier merge (a, b) wins, leaving c alone.
    tokenizer = BPETokenizer([(ord("a"), ord("b")), (ord("b"), ord("c"))])
    assert tokenizer.encode("abc") == [256, ord("c")]
    assert tokenizer.encode("bca") == [257, ord("a")]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="Fis rtCzen:\n,.", max_size=60))
def test_encoding_by_rank_equals_replaying_the_merges_in_order(tokenizer, text):
    """Merging the earliest-learned pair first gives what applying every merge in turn gives."""
    for chunk in split_into_chunks(text):
        replayed = list(chunk.encode("utf-8"))
        for rank, pair in enumerate(tokenizer.merges):
            replayed = merge_pair_in_sequence(replayed, pair, 256 + rank)
        assert tokenizer.encode_chunk(chunk) == replayed


def naive_byte_merges(text, num_merges):
    """The lecture's loop on byte chunks with a fresh id per merge: recount everything, `max` over the scan."""
    chunk_counts = {}
    for chunk in split_into_chunks(text):
        chunk_counts[chunk] = chunk_counts.get(chunk, 0) + 1
    words = {tuple(chunk.encode("utf-8")): count for chunk, count in chunk_counts.items()}
    merges = []
    while len(merges) < num_merges:
        pairs = {}
        for symbols, count in words.items():
            for pair in zip(symbols, symbols[1:]):
                pairs[pair] = pairs.get(pair, 0) + count
        if not pairs:
            break
        best = max(pairs, key=pairs.get)
        words = {tuple(merge_pair_in_sequence(list(symbols), best, 256 + len(merges))): count
                 for symbols, count in words.items()}
        merges.append(best)
    return merges


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab \n", max_size=60))
def test_train_learns_the_lecture_loops_merges_on_bytes(text):
    merges = naive_byte_merges(text, 20)
    assert BPETokenizer.train(text, vocab_size=256 + len(merges)).merges == merges


def test_train_is_deterministic(tokenizer):
    assert BPETokenizer.train(TRAINING_TEXT, vocab_size=VOCAB_SIZE).merges == tokenizer.merges


def test_decode_accepts_numpy_ids_and_rejects_out_of_range(tokenizer):
    ids = np.array(tokenizer.encode("speak"), dtype=np.int64)
    assert tokenizer.decode(ids) == "speak"
    with pytest.raises(ValueError, match=r"ids in 0\.\.299, got 300"):
        tokenizer.decode([300])


def test_decode_of_a_cut_character_gives_replacement_not_an_error(tokenizer):
    first_byte = "\u00e9".encode("utf-8")[0]
    assert tokenizer.decode([first_byte]) == "\ufffd"


def test_train_errors_name_what_was_expected():
    with pytest.raises(ValueError, match="vocab_size must be an int >= 256"):
        BPETokenizer.train("abc", vocab_size=100)
    with pytest.raises(ValueError, match="vocab_size can be at most 257; got 300"):
        BPETokenizer.train("ab ab", vocab_size=300, min_count=2)  # only (a, b) occurs twice
    with pytest.raises(ValueError, match="vocab_size can be at most 258; got 259"):
        BPETokenizer.train("ab ab", vocab_size=259)  # then ("ab", " ") once, and every chunk is one token
    assert BPETokenizer.train("ab ab", vocab_size=258).vocab_size == 258


def test_save_and_load_round_trip(tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    loaded = BPETokenizer.load(path)
    assert loaded.merges == tokenizer.merges and loaded.vocab == tokenizer.vocab
    assert loaded.encode(TRAINING_TEXT) == tokenizer.encode(TRAINING_TEXT)
    content = json.loads(path.read_text(encoding="utf-8"))
    assert content["vocab"][ord("A")] == "A" and content["vocab_size"] == VOCAB_SIZE


def test_config_round_trip_is_json(tokenizer):
    config = json.loads(json.dumps(tokenizer.to_config()))
    assert config["kind"] == "bpe"
    assert BPETokenizer.from_config(config).merges == tokenizer.merges
    config["vocab"][300 - 1] = "changed"
    with pytest.raises(ValueError, match="BPETokenizer.from_config: the config vocabulary does not match"):
        BPETokenizer.from_config(config)


def test_load_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer file at"):
        BPETokenizer.load(tmp_path / "missing.json")


def test_load_truncated_file(tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    path.write_text(path.read_text(encoding="utf-8")[:-40], encoding="utf-8")
    with pytest.raises(ValueError, match="not a complete JSON file"):
        BPETokenizer.load(path)


@pytest.mark.parametrize(
    "content, message",
    [
        ([1, 2, 3], "not a tokenizer file"),
        ({"format": "something-else", "version": 1}, "not a tokenizer file"),
        ({"format": "minitransformer-bpe", "version": 99, "chunk_pattern": r"\S+ ?|\s+"}, "not a tokenizer file"),
    ],
)
def test_load_foreign_json(tmp_path, content, message):
    path = tmp_path / "other.json"
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        BPETokenizer.load(path)


def test_load_rejects_merges_that_do_not_match_the_vocabulary(tokenizer, tmp_path):
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    content = json.loads(path.read_text(encoding="utf-8"))
    content["merges"][0] = [content["merges"][0][1], content["merges"][0][0]]
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(ValueError, match="vocabulary does not match its merges"):
        BPETokenizer.load(path)
    content["merges"][3] = [0, 9999]
    path.write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(ValueError, match="merge 3 must join two ids below 259"):
        BPETokenizer.load(path)
